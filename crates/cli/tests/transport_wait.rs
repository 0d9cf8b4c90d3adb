//! Time a query spends waiting for its transport (the server's stream limit, a connection
//! being opened) is the server's or the protocol's doing: it is reported apart from the
//! generator's own lateness, by cause, and never makes a run or a `limit` step look
//! generator-bound. Also: the concurrency a server allowed, and a name's every address.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run_cmd, run_volley, volley, Server};
use serde_json::Value;

fn warnings(v: &Value) -> Vec<String> {
    v["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect()
}

/// Over DoQ and DoH/2 at twice a responder's `--max-qps`, the dropped queries hold the server's
/// few streams until they time out, and the next ones wait for stream credit: that wait is
/// reported as such (cause `stream_credit`), the scheduler's own lateness stays apart, and no
/// warning blames the generator.
#[test]
fn waiting_for_stream_credit_is_the_transports_not_the_generators() {
    let server = Server::start_encrypted(&["--max-qps", "200", "--max-streams", "10", "-T", "1"]);
    for transport in ["quic", "https"] {
        let url = server.url(transport);
        let r = run_volley(&[&url, "--ca", server.ca_str(), "-Q", "400", "-l", "2s", "-t", "1s", "-T", "1"]);
        let v = r.ok();
        let t = &v["totals"];
        assert!(t["timed_out"].as_u64().unwrap() > 0, "{transport}: the server dropped some: {t}");
        let w = &v["transport_wait"];
        let credit = w["causes"]["stream_credit"]["queries"].as_u64().unwrap_or(0);
        assert!(credit > 0, "{transport}: queries waited for stream credit: {w}");
        assert!(credit <= w["queries"].as_u64().unwrap(), "{w}");
        assert!(w["queries"].as_u64().unwrap() <= t["sent"].as_u64().unwrap());
        // The lateness of the sends is the wait for the transport, not the scheduler's.
        let send_p99 = v["send_lateness"]["p99_ns"].as_u64().unwrap();
        let sched_p99 = v["schedule_lateness"]["p99_ns"].as_u64().unwrap();
        let wait_p99 = w["wait"]["p99_ns"].as_u64().unwrap();
        assert!(sched_p99 * 10 < send_p99, "{transport}: scheduler p99 {sched_p99} ns, sends p99 {send_p99} ns");
        assert!(sched_p99 * 10 < wait_p99, "{transport}: scheduler p99 {sched_p99} ns, wait p99 {wait_p99} ns");
        // The generator is blamed only for its scheduler's own lateness (on a busy machine the
        // scheduler itself may be late by a time slice: then the warning quotes that, never
        // the wait for streams).
        let ws = warnings(v);
        let blamed: Vec<&String> =
            ws.iter().filter(|w| w.contains("generator fell behind") || w.contains("-T")).collect();
        if sched_p99 > 1_000_000 {
            let own = format!("p99 lateness {:.1} ms handing queries to the transport", sched_p99 as f64 / 1e6);
            assert!(blamed.len() == 1 && blamed[0].contains(&own), "{transport}: {own}: {ws:?}");
        } else {
            assert!(blamed.is_empty(), "{transport}: {ws:?}");
        }
        assert!(
            ws.iter().any(|w| w.contains("stream credit") && w.contains("not the generator's")),
            "{transport}: {ws:?}"
        );
        assert!(r.stdout.contains("waited for") && r.stdout.contains("stream_credit"), "{}", r.stdout);
    }
}

/// `volley limit` over DoQ and DoH/2 against a responder of known capacity: the steps past it
/// answer fewer and wait for stream credit, and are BROKEN like any other (not "the generator
/// was the bottleneck"), so the search finds the capacity.
#[test]
fn a_limit_over_streams_is_found_not_blamed_on_the_generator() {
    let cap = 400.0;
    let server = Server::start_encrypted(&["--max-qps", "400", "--max-streams", "10", "-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("limit.json");
    let mut cmd = Command::new(volley());
    cmd.args(["limit", &server.url("quic"), "--also", &server.url("https"), "--ca", server.ca_str()])
        .args(["--start", "200", "--max", "3200", "--growth", "x2", "--step-duration", "2s", "--refine", "2"])
        .args(["-t", "300ms", "-T", "1", "--progress", "never", "-o"])
        .arg(&out);
    let r = run_cmd(&mut cmd, Duration::from_secs(150));
    assert_eq!(r.status.code(), Some(0), "stderr: {}", r.stderr);
    assert!(!r.stdout.contains("generator was the bottleneck"), "{}", r.stdout);
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    for s in v["searches"].as_array().unwrap() {
        assert_eq!(s["stopped"], "found", "{}: {}", s["name"], s["steps"]);
        let steps = s["steps"].as_array().unwrap();
        assert!(steps.iter().all(|st| st["generator_bound"] == false), "{}", s["steps"]);
        let limit = s["limit"].as_f64().unwrap();
        assert!((cap * 0.5..=cap * 1.1).contains(&limit), "{}: limit {limit} against {cap}: {}", s["name"], s["steps"]);
        // The broken steps waited on the server's streams.
        let runs = s["runs"].as_array().unwrap();
        let waited = steps
            .iter()
            .zip(runs)
            .filter(|(st, _)| st["ok"] == false)
            .any(|(_, run)| run["transport_wait"]["causes"]["stream_credit"]["queries"].as_u64().unwrap_or(0) > 0);
        assert!(waited, "{}: no broken step waited for stream credit", s["name"]);
    }
}

/// A closed loop of 20 against a DoH/2 server that allows one stream: one query at a time is
/// on the wire, the rest queue in volley for stream credit; the results say so.
#[test]
fn the_concurrency_a_server_allowed_is_reported() {
    let server = Server::start_encrypted(&["--max-streams", "1", "-T", "1"]);
    let url = server.url("https");
    let r = run_volley(&[&url, "--ca", server.ca_str(), "-c", "20", "-n", "400", "-T", "1"]);
    let v = r.ok();
    assert_eq!(v["totals"]["answered"], 400, "{}", v["totals"]);
    assert_eq!(v["load"]["concurrency"], 20);
    assert_eq!(v["peak_on_wire"], 1, "{}", r.stdout);
    assert!(v["transport_wait"]["causes"]["stream_credit"]["queries"].as_u64().unwrap() > 0, "{}", v["transport_wait"]);
    let ws = warnings(v);
    assert!(ws.iter().any(|w| w.contains("the server allowed a concurrency of 1")), "{ws:?}");
    assert!(r.stdout.contains("concurrency 20 (at most 1 on the wire"), "{}", r.stdout);
    // Without the server's limit, all 20 are on the wire.
    let free = Server::start_encrypted(&["-T", "1"]);
    let r = run_volley(&[&free.url("https"), "--ca", free.ca_str(), "-c", "20", "-n", "400", "-T", "1"]);
    let v = r.ok();
    assert_eq!(v["peak_on_wire"], 20, "{}", r.stdout);
    assert!(!warnings(v).iter().any(|w| w.contains("allowed a concurrency")), "{:?}", warnings(v));
}

/// `tls://localhost:PORT` against a server on ::1 alone: the name's other address (127.0.0.1)
/// refuses, ::1 answers, and the run measures ::1 and says so; `volley query` likewise.
#[test]
fn a_name_is_tried_at_each_of_its_addresses() {
    let server = Server::start_encrypted(&["-l", "::1", "-T", "1"]);
    let dot = server.listener("dot");
    assert!(dot.is_ipv6(), "{dot}");
    let url = format!("tls://localhost:{}", dot.port());
    let r = run_volley(&[&url, "--ca", server.ca_str(), "-c", "5", "-n", "50", "-T", "1"]);
    let v = r.ok();
    assert_eq!(v["totals"]["answered"], 50, "{}", v["totals"]);
    assert_eq!(v["target"]["address"], format!("[::1]:{}", dot.port()));
    assert!(r.stderr.contains(&format!("measuring [::1]:{}", dot.port())), "{}", r.stderr);
    assert!(r.stdout.contains(&format!("address [::1]:{}", dot.port())), "{}", r.stdout);

    let mut cmd = Command::new(volley());
    cmd.args(["query", &url, "--ca", server.ca_str(), "www.example.test", "A"]);
    let q = run_cmd(&mut cmd, Duration::from_secs(30));
    assert_eq!(q.status.code(), Some(0), "{}", q.stderr);
    assert!(q.stdout.contains(&format!(";; SERVER: ::1#{}(tls)", dot.port())), "{}", q.stdout);
}
