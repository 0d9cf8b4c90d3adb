//! `volley limit` against a responder of known capacity (`--max-qps`) finds that capacity.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run_cmd, volley, Server};

#[test]
fn finds_a_known_capacity_within_ten_percent() {
    let cap = 1000.0;
    let server = Server::start_with(&["--max-qps", "1000", "-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("limit.json");
    let url = server.udp_url();
    let mut cmd = Command::new(volley());
    cmd.args(["limit", &url, "--start", "250", "--max", "16000", "--step-duration", "2s", "--refine", "5"])
        .args(["-t", "300ms", "-T", "1", "--progress", "never", "-o"])
        .arg(&out);
    let r = run_cmd(&mut cmd, Duration::from_secs(120));
    assert_eq!(r.status.code(), Some(0), "stderr: {}", r.stderr);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(v["schema"], "volley.limit/1");
    let s = &v["searches"][0];
    assert_eq!(s["unit"], "qps");
    assert_eq!(s["stopped"], "found", "{s}");
    let limit = s["limit"].as_f64().unwrap();
    assert!((limit - cap).abs() / cap <= 0.10, "limit {limit} not within 10 % of {cap}: {s}");
    // Every step past the limit broke the objective; every one at or below it kept it.
    for step in s["steps"].as_array().unwrap() {
        let load = step["load"].as_f64().unwrap();
        assert_eq!(step["ok"].as_bool().unwrap(), load <= limit, "{step}");
    }
    // Each step's full results come with the search, in the results schema.
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), s["steps"].as_array().unwrap().len());
    for run in runs {
        assert_eq!(run["schema"], "volley.results/1");
        let t = &run["totals"];
        assert_eq!(
            t["issued"].as_u64().unwrap(),
            ["answered", "timed_out", "failed", "unsent", "in_flight"]
                .iter()
                .map(|k| t[k].as_u64().unwrap())
                .sum::<u64>()
        );
    }
    assert!(r.stdout.contains("limit") && r.stdout.contains(&url), "{}", r.stdout);
}

#[test]
fn bad_objectives_are_usage_errors() {
    for args in [["--min-answered", "120%"], ["--max-latency", "95=1s"], ["--growth", "x1"]] {
        let mut cmd = Command::new(volley());
        cmd.args(["limit", "udp://127.0.0.1:9"]).args(args);
        let r = run_cmd(&mut cmd, Duration::from_secs(20));
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with("volley: error: invalid --"), "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}
