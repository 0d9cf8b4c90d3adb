//! `volley report`, `volley compare` and `volley merge` end to end: real results files from
//! `volley run` against `volley serve` on loopback, then the three commands on them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);

fn volley_cmd(args: &[&str]) -> Output {
    let mut cmd = Command::new(volley());
    cmd.args(args);
    run_cmd(&mut cmd, WAIT)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Two short runs over UDP and one over TCP, written into `dir`.
fn results(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let server = Server::start();
    let files = [dir.join("u1.json"), dir.join("u2.json"), dir.join("t1.json")];
    for (f, url) in files.iter().zip([server.udp_url(), server.udp_url(), server.tcp_url()]) {
        let out = volley_cmd(&["run", &url, "-l", "1s", "-c", "8", "--progress", "never", "-o", s(f)]);
        assert_eq!(out.status.code(), Some(0), "volley run failed: {}", out.stderr);
    }
    drop(server);
    let [a, b, c] = files;
    (a, b, c)
}

fn one_error_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "expected exit 2: {}\n{}", out.status, out.stderr);
    let lines: Vec<&str> = out.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {}", out.stderr);
    assert!(lines[0].starts_with("volley: error: "), "{}", lines[0]);
    lines[0].to_string()
}

#[test]
fn report_compare_merge_on_real_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (u1, u2, t1) = results(dir.path());

    // report: HTML, charts, CSV, OpenMetrics.
    let html = dir.path().join("r.html");
    let charts = dir.path().join("charts");
    let out = volley_cmd(&["report", s(&u1), s(&t1), "-o", s(&html), "--charts", s(&charts), "--label", "UDP"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<section class=\"run\" id=\"run-1\"><h2>UDP</h2>"));
    assert!(page.contains("<h2>t1</h2>"));
    assert!(!page.contains("http://") && !page.contains("https://"));
    assert!(page.contains("<pre class=\"command\">"));
    for id in ["response_rate", "latency_percentiles", "latency_over_time", "qps", "connections", "handshake_cdf"] {
        for ext in ["svg", "png"] {
            let f = charts.join(format!("{id}.{ext}"));
            assert!(std::fs::metadata(&f).map(|m| m.len() > 1000).unwrap_or(false), "{} missing", f.display());
        }
    }
    let out = volley_cmd(&["report", s(&u1), "--csv", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("second,sent,answered,"));
    let out = volley_cmd(&["report", s(&u1), "--openmetrics", "-"]);
    assert!(out.stdout.contains("volley_queries_total{fate=\"answered\"}") && out.stdout.ends_with("# EOF\n"));

    // compare: text and JSON, single runs and repeated ones.
    let out = volley_cmd(&["compare", s(&u1), s(&t1)]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stdout.lines().next().unwrap().contains("u1") && out.stdout.contains("/u1"), "{}", out.stdout);
    assert!(out.stdout.lines().any(|l| l.starts_with("handshake p50")));
    let out = volley_cmd(&["compare", "--format", "json", "--a", s(&u1), s(&u2), "--b", s(&t1), s(&t1)]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["sides"][0]["name"], "a");
    assert_eq!(v["sides"][0]["runs"].as_array().unwrap().len(), 2);
    assert!(v["figures"].as_array().unwrap().iter().all(|f| f["verdicts"][0] == "baseline"));

    // merge: counts add, the histogram is merged, parts are recorded.
    let merged = dir.path().join("m.json");
    let out = volley_cmd(&["merge", s(&u1), s(&u2), "-o", s(&merged)]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("series shifted by"), "{}", out.stderr);
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let a: Value = serde_json::from_str(&std::fs::read_to_string(&u1).unwrap()).unwrap();
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&u2).unwrap()).unwrap();
    let sent = |v: &Value| v["totals"]["sent"].as_u64().unwrap();
    assert_eq!(sent(&m), sent(&a) + sent(&b));
    assert_eq!(
        m["latency"]["count"].as_u64().unwrap(),
        a["latency"]["count"].as_u64().unwrap() + b["latency"]["count"].as_u64().unwrap()
    );
    check_accounting(&m);
    assert_eq!(m["merged_from"].as_array().unwrap().len(), 2);
    assert_eq!(m["merged_from"][1]["command"], b["command"]);
    assert_eq!(m["command"][1], "merge");
    // The merged file is a results file like any other.
    let out = volley_cmd(&["report", s(&merged), "-o", s(&dir.path().join("m.html"))]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
}

#[test]
fn bad_inputs_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let future = dir.path().join("future.json");
    std::fs::write(&future, r#"{"schema": "volley.results/2"}"#).unwrap();
    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"schema": "volley.results/2"}"#).unwrap();
    let out_file = dir.path().join("m.json");

    let line = one_error_line(&volley_cmd(&["merge", s(&future), s(&other), "-o", s(&out_file)]));
    assert!(line.contains("future.json: unsupported results schema \"volley.results/2\""), "{line}");
    assert!(!out_file.exists());
    let line = one_error_line(&volley_cmd(&["compare", s(&future), s(&other)]));
    assert!(line.contains("future.json"), "{line}");
    let line = one_error_line(&volley_cmd(&["report", s(&future), "-o", s(&dir.path().join("r.html"))]));
    assert!(line.contains("future.json"), "{line}");
    let line = one_error_line(&volley_cmd(&["report", s(&future)]));
    assert!(line.contains("nothing to write"), "{line}");
    let line = one_error_line(&volley_cmd(&["compare", s(&future)]));
    assert!(line.contains("two or more"), "{line}");
    let missing = dir.path().join("missing.json");
    let line = one_error_line(&volley_cmd(&["merge", s(&missing), s(&other), "-o", s(&out_file)]));
    assert!(line.contains("missing.json"), "{line}");
}

/// `volley report --limit`: a limit search's step curve and latency, with the limit marked,
/// in the charts and in a section of the HTML report.
#[test]
fn report_draws_a_limit_search() {
    let dir = tempfile::tempdir().unwrap();
    let limit = dir.path().join("limit.json");
    let steps = |ok: &[(f64, f64)]| -> Value {
        ok.iter()
            .map(|(load, ratio)| {
                serde_json::json!({"load": load, "answered_ratio": ratio, "latency_ns": 900_000, "p99_ns": 900_000,
                    "ok": *ratio >= 0.99, "generator_bound": false, "phase": "ramp"})
            })
            .collect()
    };
    let doc = serde_json::json!({
        "schema": "volley.limit/1",
        "searches": [
            {"name": "udp://127.0.0.1:53", "target": "udp://127.0.0.1:53", "unit": "qps",
             "steps": steps(&[(1000.0, 1.0), (2000.0, 1.0), (4000.0, 0.5)]), "limit": 2000.0, "stopped": "found", "runs": []},
            {"name": "tcp://127.0.0.1:53", "target": "tcp://127.0.0.1:53", "unit": "qps",
             "steps": steps(&[(1000.0, 1.0), (2000.0, 0.8)]), "limit": 1000.0, "stopped": "found", "runs": []}
        ]
    });
    std::fs::write(&limit, serde_json::to_vec(&doc).unwrap()).unwrap();
    let html = dir.path().join("r.html");
    let charts = dir.path().join("charts");
    let r = run_cmd(
        Command::new(volley())
            .arg("report")
            .arg("--limit")
            .arg(&limit)
            .arg("-o")
            .arg(&html)
            .arg("--charts")
            .arg(&charts),
        Duration::from_secs(60),
    );
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("Limit searches"), "no limit section");
    assert!(text.contains("udp://127.0.0.1:53") && text.contains("tcp://127.0.0.1:53"));
    assert!(text.contains("<td>2000</td>") && text.contains("<td>1000</td>"), "limits missing from the table");
    for f in ["limit.svg", "limit.png", "limit_latency.svg", "limit_latency.png"] {
        let len = std::fs::metadata(charts.join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{f} missing or empty");
    }
    let svg = std::fs::read_to_string(charts.join("limit.svg")).unwrap();
    assert!(
        svg.contains("limit 2000") || svg.contains("limit 2k"),
        "the limit is not marked: {}",
        &svg[..svg.len().min(400)]
    );

    // A results file given as a limit file is refused, naming it.
    let wrong = dir.path().join("wrong.json");
    std::fs::write(&wrong, br#"{"schema":"volley.results/1"}"#).unwrap();
    let r = run_cmd(
        Command::new(volley()).arg("report").arg("--limit").arg(&wrong).arg("-o").arg(&html),
        Duration::from_secs(30),
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("wrong.json") && r.stderr.contains("volley.limit/1"), "{}", r.stderr);
}
