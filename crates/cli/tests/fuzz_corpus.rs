//! Replays every fuzz corpus (`fuzz/corpus/<target>/`) and every crash found by fuzzing
//! (`fuzz/regressions/<target>/`) through the entry points the fuzz targets call: none may
//! panic. Cheap and deterministic, on the stable toolchain, without cargo-fuzz (see
//! docs/reliability.md and scripts/fuzz.sh for the fuzzing itself).

use std::path::{Path, PathBuf};

/// An entry point: bytes in, never a panic.
type Entry = fn(&[u8]);

/// The fuzz targets (fuzz/fuzz_targets/<name>.rs) and the entry point each calls.
const TARGETS: &[(&str, Entry)] = &[
    ("dns_message", volley_wire::fuzzing::message),
    ("stream_frames", volley_transport::fuzzing::length_prefixed),
    ("http1_responses", volley_transport::fuzzing::http1),
    ("target_url", volley_transport::fuzzing::target),
    ("xdp_frame", volley_transport::fuzzing::xdp_frame),
    ("doh2_responses", volley_transport::fuzzing::http2),
    ("doh3_responses", volley_transport::fuzzing::http3),
    ("doq_streams", volley_transport::fuzzing::doq),
    ("responder_query", volley_responder::fuzzing::query),
    ("doh_request", volley_responder::fuzzing::doh_request),
    ("duration", volley_responder::fuzzing::duration),
    ("zone_file", volley_responder::fuzzing::zone_file),
    ("responder_stream", volley_responder::fuzzing::stream),
    ("capture", volley_replay::fuzzing::capture),
    ("clients_file", volley_replay::fuzzing::clients),
    ("client_profile", volley_engine::fuzzing::profile),
    ("link_spec", volley_link::fuzzing::spec),
    ("link_profile", volley_link::fuzzing::profile),
    ("experiment_spec", volley_experiment::fuzzing::spec),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

/// Every target has a fuzz target file and a seed corpus; every corpus and regression
/// folder belongs to a target (a renamed target cannot leave its inputs unreplayed).
#[test]
fn targets_and_corpora_match() {
    let fuzz = fuzz_dir();
    for (name, _) in TARGETS {
        assert!(fuzz.join(format!("fuzz_targets/{name}.rs")).is_file(), "fuzz/fuzz_targets/{name}.rs");
        assert!(!files(&fuzz.join("corpus").join(name)).is_empty(), "fuzz/corpus/{name} has no seeds");
    }
    for top in ["corpus", "regressions", "fuzz_targets"] {
        let Ok(rd) = std::fs::read_dir(fuzz.join(top)) else { continue };
        for e in rd {
            let p = e.unwrap().path();
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(TARGETS.iter().any(|(n, _)| *n == stem), "fuzz/{top}/{stem} is no target's");
        }
    }
}

/// Every seed and every past crash goes through its entry point without a panic.
#[test]
fn corpora_and_regressions_replay_without_panic() {
    let fuzz = fuzz_dir();
    let mut replayed = 0;
    for (name, entry) in TARGETS {
        for top in ["corpus", "regressions"] {
            for f in files(&fuzz.join(top).join(name)) {
                let data = std::fs::read(&f).unwrap();
                if std::panic::catch_unwind(|| entry(&data)).is_err() {
                    panic!("{} panicked in {name}", f.display());
                }
                replayed += 1;
            }
        }
    }
    assert!(replayed >= TARGETS.len(), "{replayed} inputs");
}
