//! `merge` and `compare` on hand-built results with known answers.

mod common;

use common::*;
use volley_metrics::{Histogram, LatencySummary, Status};
use volley_report::*;

fn lat_a() -> Vec<u64> {
    (0..3000u64).map(|i| 80_000 + i * i % 700_000).collect()
}

fn lat_b() -> Vec<u64> {
    (0..2000u64).map(|i| 300_000 + i * 7919 % 9_000_000).collect()
}

#[test]
fn merged_histograms_equal_one_run_over_all_values() {
    let a = named("a", &Spec { latencies: lat_a(), nxdomain_every: Some(10), timed_out: 4, ..Spec::default() });
    let b = named("b", &Spec { latencies: lat_b(), failed: 2, ..Spec::default() });
    let m = merge_runs(&[a.clone(), b.clone()], vec!["volley".into(), "merge".into()]).unwrap();
    let r = &m.result;

    let mut all = Histogram::new(3);
    for v in lat_a().into_iter().chain(lat_b()) {
        all.record(v);
    }
    let one = LatencySummary::of(&all);
    assert_eq!(r.latency.count, 5000);
    assert_eq!(
        (r.latency.min_ns, r.latency.p50_ns, r.latency.p90_ns, r.latency.p99_ns, r.latency.p999_ns, r.latency.max_ns),
        (one.min_ns, one.p50_ns, one.p90_ns, one.p99_ns, one.p999_ns, one.max_ns)
    );
    assert_eq!(r.latency.mean_ns, one.mean_ns);
    assert_eq!(r.latency.histogram, one.histogram);
    // The merged p99 is neither part's p99.
    assert_ne!(r.latency.p99_ns, a.result.latency.p99_ns);
    assert_ne!(r.latency.p99_ns, b.result.latency.p99_ns);

    // Counts add, the equation still holds, derived figures are recomputed.
    let t = &r.totals;
    assert_eq!(t.sent, a.result.totals.sent + b.result.totals.sent);
    assert_eq!((t.answered, t.timed_out, t.failed), (5000, 4, 2));
    assert!(t.balanced());
    assert_eq!(t.rcodes.get("NXDOMAIN"), Some(&300));
    assert_eq!(t.rcodes.get("NOERROR"), Some(&4700));
    assert_eq!(t.errors.get("reset"), Some(&2));
    assert_eq!(t.bytes_out, a.result.totals.bytes_out + b.result.totals.bytes_out);
    assert_eq!(r.qps.answered, 1000.0);
    assert_eq!(r.generator.threads, 2);
    assert!((r.generator.cpu_s - 1.0).abs() < 1e-9);
    assert!((r.generator.cpu_us_per_answer - 200.0).abs() < 1e-9);
    assert_eq!(r.status, Status::Complete);
    assert_eq!(r.load.concurrency, Some(20));
    assert_eq!(r.command, vec!["volley", "merge"]);
    assert_eq!(m.parts.len(), 2);
    assert_eq!(m.parts[1].command, b.result.command);

    // Same start: series rows add second by second, and each row's histogram is exact too.
    assert_eq!(r.series.len(), a.result.series.len().max(b.result.series.len()));
    for (k, row) in r.series.iter().enumerate() {
        let (ra, rb) = (&a.result.series[k], &b.result.series[k]);
        assert_eq!(row.sent, ra.sent + rb.sent);
        assert_eq!(row.answered, ra.answered + rb.answered);
        let mut h = Histogram::from_sparse(&ra.latency.histogram);
        h.merge(&Histogram::from_sparse(&rb.latency.histogram));
        assert_eq!(row.latency.p99_ns, h.quantile(0.99));
    }
    assert_eq!(r.series.iter().map(|s| s.sent).sum::<u64>(), t.sent);
}

#[test]
fn series_align_by_wall_clock_second() {
    let a = named("a", &Spec::default());
    let mut b = named("b", &Spec { start_ms: Spec::default().start_ms + 2000, ..Spec::default() });
    b.result.status = Status::Interrupted;
    b.result.warnings.push("b's warning".into());
    let m = merge_runs(&[a.clone(), b.clone()], vec![]).unwrap();
    let r = &m.result;
    assert_eq!(r.started_unix_ms, a.result.started_unix_ms);
    assert_eq!(m.parts[1].offset_s, 2);
    assert_eq!(r.series.len(), b.result.series.len() + 2);
    for (k, row) in r.series.iter().enumerate() {
        let sa = a.result.series.get(k).map_or(0, |s| s.sent);
        let sb = k.checked_sub(2).and_then(|j| b.result.series.get(j)).map_or(0, |s| s.sent);
        assert_eq!(row.sent, sa + sb, "second {k}");
        assert_eq!(row.second as usize, k);
    }
    assert_eq!(r.status, Status::Interrupted, "interrupted if any part was");
    assert_eq!(r.warnings, vec!["b's warning".to_string()]);

    // A start 2.4 s later is shifted by 2 s, with a warning naming the part.
    let c = named("c", &Spec { start_ms: Spec::default().start_ms + 2400, ..Spec::default() });
    let m = merge_runs(&[a, c], vec![]).unwrap();
    assert_eq!(m.parts[1].offset_s, 2);
    assert!(
        m.result.warnings.iter().any(|w| w.contains("c started 2400 ms") && w.contains("400 ms")),
        "{:?}",
        m.result.warnings
    );
}

#[test]
fn connections_merge_exactly() {
    let a = named("a", &tcp_spec());
    let b = named("b", &Spec { handshakes: (0..10).map(|k| (90_000 + k * 3_000, 0)).collect(), ..tcp_spec() });
    let m = merge_runs(&[a.clone(), b.clone()], vec![]).unwrap();
    let c = m.result.connections.as_ref().unwrap();
    assert_eq!(c.opened, 30);
    assert_eq!(c.resumed, 15);
    let mut all = Histogram::new(3);
    for (hs, _) in tcp_spec().handshakes.iter().chain(b_handshakes().iter()) {
        all.record(*hs);
    }
    let total = c.handshake_total.as_ref().unwrap();
    assert_eq!(total.count, 30);
    assert_eq!(total.p99_ns, all.quantile(0.99));
    assert_eq!(total.p50_ns, all.quantile(0.5));
    assert_eq!(m.result.series[0].connections.as_ref().unwrap().opened, 30);
}

fn b_handshakes() -> Vec<(u64, u64)> {
    (0..10).map(|k| (90_000 + k * 3_000, 0)).collect()
}

#[test]
fn incompatible_inputs_are_refused_naming_the_file() {
    let a = named("a", &Spec::default());
    let mut b = named("b", &Spec::default());
    b.result.schema = "volley.results/2".into();
    let e = merge_runs(&[a.clone(), b], vec![]).unwrap_err();
    assert!(e.to_string().starts_with("b: unsupported results schema \"volley.results/2\""), "{e}");

    let mut c = named("c", &Spec::default());
    c.result.latency.histogram.sigfig = 2;
    let e = merge_runs(&[a.clone(), c], vec![]).unwrap_err();
    assert!(e.to_string().starts_with("c: latency histogram has 2 significant figures, a has 3"), "{e}");

    // Files: the schema is checked when read, naming the file.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("future.json");
    let mut v = serde_json::to_value(&a.result).unwrap();
    v["schema"] = "volley.results/2".into();
    std::fs::write(&p, v.to_string()).unwrap();
    let e = NamedRun::read(&p, None).unwrap_err();
    assert!(e.to_string().contains("future.json: unsupported results schema \"volley.results/2\""), "{e}");
}

#[test]
fn merged_file_records_its_parts_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let a = named("a", &Spec::default());
    let b = named("b", &Spec { start_ms: Spec::default().start_ms + 1000, ..Spec::default() });
    let m = merge_runs(&[a, b], vec!["volley".into(), "merge".into(), "a.json".into(), "b.json".into()]).unwrap();
    let path = dir.path().join("merged.json");
    write_merged_file(&m, &path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("}\n"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["merged_from"].as_array().unwrap().len(), 2);
    assert_eq!(v["merged_from"][1]["offset_s"], 1);
    // Any reader of volley.results/1 reads it; reports see the parts.
    let plain = read_json_file(&path).unwrap();
    assert_eq!(plain.totals, m.result.totals);
    let run = NamedRun::read(&path, Some("all")).unwrap();
    assert_eq!(run.name, "all");
    assert_eq!(run.merged_from.len(), 2);
    assert_eq!(run.merged_from[0].command, m.parts[0].command);
    // No temporary file left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

// ---- compare -------------------------------------------------------------------------------

fn figure(c: &Comparison, m: Metric) -> &Figure {
    c.figures.iter().find(|f| f.metric == m).unwrap_or_else(|| panic!("no {m:?}"))
}

#[test]
fn compare_single_runs_gives_ratios_and_no_noise_verdict() {
    let a = named("a", &Spec::default());
    let b = named("b", &Spec { seconds: 10, ..Spec::default() });
    let c = compare(&[("a".into(), vec![a]), ("b".into(), vec![b])]);
    let q = figure(&c, Metric::QpsAnswered);
    assert_eq!(q.groups[0].unwrap().median, 200.0);
    assert_eq!(q.groups[1].unwrap().median, 100.0);
    assert_eq!(q.ratios, vec![None, Some(0.5)]);
    assert_eq!(q.verdicts, vec![Verdict::Baseline, Verdict::NotKnown]);
    assert_eq!(figure(&c, Metric::AnsweredPct).groups[0].unwrap().median, 100.0);
    assert_eq!(figure(&c, Metric::BytesOutPerQuery).groups[0].unwrap().median, 40.0);
    assert_eq!(figure(&c, Metric::BytesInPerAnswer).groups[0].unwrap().median, 60.0);
    assert!(c.figures.iter().all(|f| f.metric != Metric::HandshakeP50), "UDP runs have no handshake row");
    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    println!("{s}");
    assert!(s
        .lines()
        .any(|l| l.starts_with("answers/s") && l.contains("200") && l.contains("100") && l.contains("0.50x")));
    assert!(s.contains("one run per side"));
}

#[test]
fn compare_repeated_runs_with_the_noise_rule() {
    let runs = |cpu_ms: &[u64]| -> Vec<NamedRun> {
        cpu_ms
            .iter()
            .enumerate()
            .map(|(i, ms)| named(&format!("r{i}"), &Spec { cpu_ns: ms * 1_000_000, ..Spec::default() }))
            .collect()
    };
    // CPU per answer (1000 answers): a = 100, 110, 120 µs; b = 190, 200, 210 µs.
    let a = runs(&[110, 100, 120]);
    let b = runs(&[200, 210, 190]);
    let c = compare(&[("a".into(), a), ("b".into(), b)]);
    let cpu = figure(&c, Metric::CpuUsPerAnswer);
    let (ga, gb) = (cpu.groups[0].unwrap(), cpu.groups[1].unwrap());
    assert!((ga.median - 110.0).abs() < 1e-9 && (ga.min - 100.0).abs() < 1e-9 && (ga.max - 120.0).abs() < 1e-9);
    assert_eq!(gb.n, 3);
    assert!((cpu.ratios[1].unwrap() - 200.0 / 110.0).abs() < 1e-9);
    assert_eq!(cpu.verdicts[1], Verdict::BeyondNoise);
    // Identical latencies on both sides: ranges overlap.
    assert_eq!(figure(&c, Metric::P99).verdicts[1], Verdict::WithinNoise);

    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    println!("{s}");
    let line = s.lines().find(|l| l.starts_with("CPU/answer")).unwrap();
    assert!(line.contains("110µs (100µs–120µs)") && line.contains("1.82x") && line.ends_with("beyond noise"), "{line}");
    assert!(s.lines().find(|l| l.starts_with("latency p99 ")).unwrap().ends_with("within noise"));
    assert!(s.contains("noise rule:"));
    assert!(s.lines().next().unwrap().contains("a (3 runs)"));

    let mut out = Vec::new();
    write_compare_json(&c, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let f = v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == "cpu_us_per_answer").unwrap();
    assert_eq!(f["verdicts"][1], "beyond_noise");
    assert_eq!(f["groups"][1]["n"], 3);
    assert_eq!(v["sides"][0]["runs"].as_array().unwrap().len(), 3);
}

#[test]
fn medians_and_ranges() {
    let g = GroupStat::of(&[3.0, 1.0, 10.0, 2.0]).unwrap();
    assert_eq!((g.median, g.min, g.max, g.n), (2.5, 1.0, 10.0, 4));
    assert!(GroupStat::of(&[]).is_none());
    let s = |v: &[f64]| GroupStat::of(v);
    assert_eq!(Verdict::of(s(&[1.0, 2.0]), s(&[2.0, 3.0])), Verdict::WithinNoise, "touching ranges overlap");
    assert_eq!(Verdict::of(s(&[1.0, 2.0]), s(&[2.5, 3.0])), Verdict::BeyondNoise);
    assert_eq!(Verdict::of(s(&[1.0]), s(&[5.0, 6.0])), Verdict::NotKnown);
    assert_eq!(Verdict::of(None, s(&[5.0, 6.0])), Verdict::NoData);
}
