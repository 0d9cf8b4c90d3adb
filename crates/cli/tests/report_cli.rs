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
    // Wire figures, headers included: bytes and packets per query in both directions.
    for label in ["wire bytes out/query", "wire bytes in/answer", "packets out/query", "packets in/answer"] {
        assert!(out.stdout.lines().any(|l| l.starts_with(label)), "no {label} row:\n{}", out.stdout);
    }
    let out = volley_cmd(&["compare", "--format", "json", s(&u1), s(&t1)]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let figure = |m: &str| v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == m).cloned().unwrap();
    for (side, file) in [(0, &u1), (1, &t1)] {
        let r: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let t = &r["totals"];
        let per = |n: &Value, of: &Value| n.as_f64().unwrap() / of.as_f64().unwrap();
        let median = |m: &str| figure(m)["groups"][side]["median"].as_f64().unwrap();
        assert_eq!(median("packets_out_per_query"), per(&t["wire"]["packets_out"], &t["sent"]));
        assert_eq!(median("packets_in_per_answer"), per(&t["wire"]["packets_in"], &t["answered"]));
        assert_eq!(median("wire_bytes_out_per_query"), per(&t["wire"]["bytes_out"], &t["sent"]));
        assert_eq!(median("wire_bytes_in_per_answer"), per(&t["wire"]["bytes_in"], &t["answered"]));
    }
    // UDP: one datagram per query, each with at least the 28 bytes of IPv4 and UDP headers.
    assert_eq!(figure("packets_out_per_query")["groups"][0]["median"], 1.0);
    let (wire, dns) = (figure("wire_bytes_out_per_query"), figure("bytes_out_per_query"));
    assert!(wire["groups"][0]["median"].as_f64().unwrap() >= dns["groups"][0]["median"].as_f64().unwrap() + 28.0);
    let out = volley_cmd(&["compare", "--format", "json", "--a", s(&u1), s(&u2), "--b", s(&t1), s(&t1)]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["sides"][0]["name"], "a");
    assert_eq!(v["sides"][0]["runs"].as_array().unwrap().len(), 2);
    assert!(v["figures"].as_array().unwrap().iter().all(|f| f["verdicts"][0] == "baseline"));

    // compare --html: the same table over repeated runs, in a self-contained report.
    let page = dir.path().join("c.html");
    let out = volley_cmd(&["compare", "--a", s(&u1), s(&u2), "--b", s(&t1), "--label", "udp", "--label", "tcp"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let text = out.stdout;
    let out = volley_cmd(&[
        "compare",
        "--a",
        s(&u1),
        s(&u2),
        "--b",
        s(&t1),
        "--label",
        "udp",
        "--label",
        "tcp",
        "--html",
        s(&page),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, text, "--html writes the report besides the table, not instead of it");
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(page.contains("<li><b>udp</b>: u1, u2</li>") && page.contains("<li><b>tcp</b>: t1</li>"), "sides listed");
    assert!(page.contains("<th class=\"n\">udp (2 runs)</th>") && page.contains("<td>packets out/query</td>"));
    assert_eq!(page.matches("<section class=\"run\"").count(), 3);
    assert!(!page.contains("http://") && !page.contains("https://"));

    // merge: counts add, the histogram is merged, parts are recorded.
    let merged = dir.path().join("m.json");
    let out = volley_cmd(&["merge", s(&u1), s(&u2), "-o", s(&merged)]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("series shifted by"), "{}", out.stderr);
    // u1 and u2 ran one after the other, not at the same time: said on stderr and in the file.
    assert!(
        out.stderr.contains("volley: warning: merge: ") && out.stderr.contains("were not made at the same time"),
        "{}",
        out.stderr
    );
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let a: Value = serde_json::from_str(&std::fs::read_to_string(&u1).unwrap()).unwrap();
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&u2).unwrap()).unwrap();
    let sent = |v: &Value| v["totals"]["issued"].as_u64().unwrap();
    assert_eq!(sent(&m), sent(&a) + sent(&b));
    assert_eq!(
        m["latency"]["count"].as_u64().unwrap(),
        a["latency"]["count"].as_u64().unwrap() + b["latency"]["count"].as_u64().unwrap()
    );
    check_accounting(&m);
    assert!(m["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("not made at the same time")));
    // The merged run spans both by the wall clock: from u1's start to u2's end.
    let (start, dur) =
        (|v: &Value| v["started_unix_ms"].as_f64().unwrap(), |v: &Value| v["duration_s"].as_f64().unwrap());
    let span = (start(&b) - start(&a)) / 1000.0 + dur(&b);
    assert!((dur(&m) - span).abs() < 1e-6, "{} vs {span}", dur(&m));
    for k in ["bytes_out", "bytes_in", "packets_out", "packets_in"] {
        let w = |v: &Value| v["totals"]["wire"][k].as_u64().unwrap();
        assert_eq!(w(&m), w(&a) + w(&b), "wire {k}");
    }
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

    // A missing file, JSON that is not a results file, and a results file cut short: each one
    // line naming the file, exit 2, for every command, and nothing written.
    let good = dir.path().join("good.json");
    let server = Server::start();
    let out = volley_cmd(&["run", &server.udp_url(), "-n", "50", "--progress", "never", "-o", s(&good)]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    drop(server);
    let text = std::fs::read_to_string(&good).unwrap();
    let truncated = dir.path().join("truncated.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let not_results = dir.path().join("not-results.json");
    std::fs::write(&not_results, r#"{"hello": [1, 2, 3]}"#).unwrap();
    let html = dir.path().join("bad.html");
    for (bad, why) in [
        (&missing, "cannot read results: No such file"),
        (&not_results, "unsupported results schema (none: no \"schema\" field)"),
        (&truncated, "not a volley results file: EOF while parsing"),
    ] {
        let name = bad.file_name().unwrap().to_str().unwrap();
        for args in [
            vec!["report", s(bad), "-o", s(&html)],
            vec!["report", s(bad), "--csv", "-"],
            vec!["report", s(&good), s(bad), "--charts", s(&dir.path().join("charts"))],
            vec!["compare", s(&good), s(bad)],
            vec!["compare", "--a", s(&good), "--b", s(bad)],
            vec!["merge", s(&good), s(bad), "-o", s(&out_file)],
        ] {
            let out = volley_cmd(&args);
            assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
            let line = one_error_line(&out);
            assert!(line.contains(&format!("{name}: {why}")), "{args:?}: {line}");
        }
    }
    assert!(!out_file.exists() && !html.exists() && !dir.path().join("charts").exists());
    // The same for a limit search file given to --limit.
    for bad in [&missing, &not_results, &truncated] {
        let line = one_error_line(&volley_cmd(&["report", "--limit", s(bad), "-o", s(&html)]));
        assert!(line.contains(bad.file_name().unwrap().to_str().unwrap()), "{line}");
    }
}

/// `volley run --metrics-file`: OpenMetrics text rewritten every second while the run goes,
/// whose last version agrees with the results file.
#[test]
fn live_metrics_file_during_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let (prom, results) = (dir.path().join("live.prom"), dir.path().join("r.json"));
    let server = Server::start();
    let mut child = Command::new(volley())
        .args(["run", &server.udp_url(), "-l", "3s", "-Q", "500", "--progress", "never"])
        .arg("--metrics-file")
        .arg(&prom)
        .arg("-o")
        .arg(&results)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // While it runs: a complete exposition of the seconds so far.
    let start = std::time::Instant::now();
    let mut live = None;
    while start.elapsed() < Duration::from_secs(20) && live.is_none() {
        if let Ok(text) = std::fs::read_to_string(&prom) {
            live = Some(text);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let live = live.expect("no metrics file while the run went");
    let status = wait_bounded(&mut child, WAIT).expect("volley run finished");
    assert!(status.success());
    assert!(live.ends_with("# EOF\n"), "{live}");
    assert!(
        live.contains("volley_queries_total{fate=\"sent\"}")
            && live.contains("volley_second_queries{fate=\"answered\"}")
    );
    let sample = |text: &str, name: &str| -> u64 {
        let l = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in\n{text}"));
        l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
    };
    assert_eq!(sample(&live, "volley_elapsed_seconds"), 1, "the first version covers the first second");
    assert!((400..=600).contains(&sample(&live, "volley_queries_total{fate=\"sent\"}")), "{live}");
    // At the end: the totals of the results file.
    let last = std::fs::read_to_string(&prom).unwrap();
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    for fate in ["issued", "sent", "answered", "timed_out", "failed", "unsent"] {
        let name = format!("volley_queries_total{{fate=\"{fate}\"}}");
        assert_eq!(sample(&last, &name), r["totals"][fate].as_u64().unwrap(), "{fate}");
    }
    assert_eq!(sample(&last, "volley_latency_seconds_count"), r["latency"]["count"].as_u64().unwrap());
    // ... and the finished run's families, which the live figures cannot hold.
    assert!(last.contains("volley_run_info{") && last.contains("status=\"complete\""), "{last}");
    assert_eq!(sample(&last, "volley_bytes_total{direction=\"out\"}"), r["totals"]["bytes_out"].as_u64().unwrap());
    assert!(last.ends_with("# EOF\n"));
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

/// A DNS Shotgun results file in its JSON-lines format (schema_version 20221207, as Shotgun's
/// tools/_plot_common.py reads it; see docs/report.md), with per-millisecond latency buckets,
/// made here: `answers` answers split between 0 and 4 ms,
/// 1 % at 99 ms, `timeouts` timed out (Shotgun counts them in its last bucket).
fn shotgun_file(path: &Path, answers: u64, timeouts: u64) {
    let mut buckets = vec![0u64; 2001];
    buckets[0] = answers * 30 / 100;
    buckets[4] = answers * 69 / 100;
    buckets[99] = answers - buckets[0] - buckets[4];
    buckets[2000] = timeouts;
    let header = serde_json::json!({"runid": "7", "type": "header", "schema_version": 20221207, "generator": "shotgun",
        "generator_version": "20240219", "generator_params": ["replay.py", "-c", "udp.toml", "-s", "127.0.0.1"],
        "time_units_per_sec": 1000, "stats_interval": 1000, "timeout": 2000, "merged": true});
    let sum = serde_json::json!({"runid": "7", "type": "stats_sum", "since": 1_764_000_000_000u64, "until": 1_764_000_001_000u64,
        "queries": answers + timeouts, "ongoing": 0, "responses": answers, "timeouts": timeouts, "discarded": 0,
        "response_rcodes": {"NOERROR": answers}, "response_latency": {"buckets": buckets.clone()},
        "conn_active": 0, "conn_info": {"type": "udp", "handshakes": 0, "handshakes_failed": 0}});
    let mut periodic = sum.clone();
    periodic["type"] = "stats_periodic".into();
    std::fs::write(path, format!("{header}\n{periodic}\n{sum}\n")).unwrap();
}

/// DNS Shotgun's results are read by `report` and `compare` as runs, beside volley's own.
#[test]
fn report_and_compare_read_dns_shotgun_results() {
    let dir = tempfile::tempdir().unwrap();
    let (u1, _, _) = results(dir.path());
    let sg = dir.path().join("shotgun-udp.json");
    shotgun_file(&sg, 9900, 100);

    let out = volley_cmd(&["compare", s(&u1), s(&sg), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "compare: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let fig = |m: &str| -> f64 {
        let f = v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == m).unwrap_or_else(|| panic!("no {m}"));
        f["groups"][1]["median"].as_f64().unwrap_or_else(|| panic!("{m}: {f}"))
    };
    assert_eq!(fig("qps_answered"), 9900.0);
    assert!((fig("answered_pct") - 99.0).abs() < 1e-9, "answered {}", fig("answered_pct"));
    // p50 in the [4, 5) ms bucket, read at its upper end; p99.9 in [99, 100) ms.
    let p50 = fig("p50") / 1e6;
    assert!((4.0..=5.01).contains(&p50), "p50 {p50} ms");
    let p999 = fig("p999") / 1e6;
    assert!((99.0..=100.1).contains(&p999), "p99.9 {p999} ms");
    // What Shotgun does not count is no figure, not a zero.
    let cpu = v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == "cpu_us_per_answer").unwrap();
    assert!(cpu["groups"][1]["median"].is_null(), "{cpu}");

    let html = dir.path().join("r.html");
    let out = volley_cmd(&["report", s(&u1), s(&sg), "-o", s(&html)]);
    assert_eq!(out.status.code(), Some(0), "report: {}", out.stderr);
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(
        text.contains("shotgun-udp") && text.contains("imported from DNS Shotgun"),
        "the report does not show the Shotgun run"
    );

    // A broken Shotgun file: one line naming file:line, exit 2.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"type\": \"header\", \"schema_version\": 20221207, \"time_units_per_sec\": 1000}\n{oops\n")
        .unwrap();
    let line = one_error_line(&volley_cmd(&["compare", s(&u1), s(&bad)]));
    assert!(line.contains("bad.json:2: DNS Shotgun results"), "{line}");
}

/// One stats object as dnssim's `DnsSim:export()` writes it (replay/dnssim/src/output/dnssim.lua
/// in DNS Shotgun): its fields in its order, `latency` one count per millisecond from 0 to the
/// timeout, the last also every query that timed out.
struct DnssimStats {
    since_ms: u64,
    until_ms: u64,
    requests: u64,
    ongoing: u64,
    answers: u64,
    conn_handshakes: u64,
    conn_handshakes_failed: u64,
    noerror: u64,
    nxdomain: u64,
    servfail: u64,
    /// (milliseconds, count); the timed out at the timeout.
    latency: Vec<(usize, u64)>,
}

impl DnssimStats {
    fn write(&self, timeout_ms: usize) -> String {
        let mut lat = vec![0u64; timeout_ms + 1];
        for &(ms, n) in &self.latency {
            lat[ms] += n;
        }
        let lat: Vec<String> = lat.iter().map(u64::to_string).collect();
        let rcodes = [
            ("noerror", self.noerror),
            ("formerr", 0),
            ("servfail", self.servfail),
            ("nxdomain", self.nxdomain),
            ("notimp", 0),
            ("refused", 0),
            ("yxdomain", 0),
            ("yxrrset", 0),
            ("nxrrset", 0),
            ("notauth", 0),
            ("notzone", 0),
            ("badvers", 0),
            ("badkey", 0),
            ("badtime", 0),
            ("badmode", 0),
            ("badname", 0),
            ("badalg", 0),
            ("badtrunc", 0),
            ("badcookie", 0),
            ("other", 0),
        ];
        let rcodes: String = rcodes.iter().map(|(k, n)| format!("\"rcode_{k}\":{n},")).collect();
        format!(
            "{{ \"since_ms\":{},\"until_ms\":{},\"requests\":{},\"ongoing\":{},\"answers\":{},\"conn_active\":{},\
             \"conn_handshakes\":{},\"conn_resumed\":0,\"conn_quic_0rtt_loaded\":0,\"quic_0rtt_sent\":0,\
             \"quic_0rtt_answered\":0,\"conn_handshakes_failed\":{},{rcodes}\"latency\":[{}]}}",
            self.since_ms,
            self.until_ms,
            self.requests,
            self.ongoing,
            self.answers,
            self.conn_handshakes - self.conn_handshakes_failed,
            self.conn_handshakes,
            self.conn_handshakes_failed,
            lat.join(","),
        )
    }
}

/// A dnssim export: its root fields in its order, `stats_sum` the sum of `stats_periodic`.
fn dnssim_file(path: &Path, periodic: &[DnssimStats], discarded: u64) {
    const TIMEOUT_MS: usize = 2000;
    let sum = DnssimStats {
        since_ms: periodic[0].since_ms,
        until_ms: periodic.last().unwrap().until_ms,
        requests: periodic.iter().map(|p| p.requests).sum(),
        // dnssim never sets the sum's ongoing.
        ongoing: 0,
        answers: periodic.iter().map(|p| p.answers).sum(),
        conn_handshakes: periodic.iter().map(|p| p.conn_handshakes).sum(),
        conn_handshakes_failed: periodic.iter().map(|p| p.conn_handshakes_failed).sum(),
        noerror: periodic.iter().map(|p| p.noerror).sum(),
        nxdomain: periodic.iter().map(|p| p.nxdomain).sum(),
        servfail: periodic.iter().map(|p| p.servfail).sum(),
        latency: periodic.iter().flat_map(|p| p.latency.iter().copied()).collect(),
    };
    let periodic: Vec<String> = periodic.iter().map(|p| p.write(TIMEOUT_MS)).collect();
    let text = format!(
        "{{ \"version\":20200527,\"merged\":false,\"stats_interval_ms\":1000,\"timeout_ms\":{TIMEOUT_MS},\
         \"idle_timeout_ms\":10000,\"handshake_timeout_ms\":5000,\"discarded\":{discarded},\"stats_sum\":{},\
         \"stats_periodic\":[{}]}}",
        sum.write(TIMEOUT_MS),
        periodic.join(",")
    );
    std::fs::write(path, text).unwrap();
}

/// DNS Shotgun's results as dnssim exports them (`version` 20200527, one JSON object), read by
/// `report` and `compare`: the answered, the timed out (what dnssim closed without an answer,
/// not what its `ongoing` says), the rates, the latency percentiles from its millisecond
/// buckets, and one row of the series per interval.
#[test]
fn report_and_compare_read_a_dnssim_export() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_764_000_000_000u64;
    // Three intervals over TCP, the last half a second (the run's end). Each interval's
    // `ongoing` is the queries in flight when it began, as dnssim sets it.
    let periodic = [
        DnssimStats {
            since_ms: t0,
            until_ms: t0 + 1000,
            requests: 1000,
            ongoing: 0,
            answers: 990,
            conn_handshakes: 12,
            conn_handshakes_failed: 2,
            noerror: 980,
            nxdomain: 10,
            servfail: 0,
            latency: vec![(0, 400), (2, 500), (40, 90), (2000, 10)],
        },
        DnssimStats {
            // Its timer fired a millisecond early, as dnssim's do.
            since_ms: t0 + 999,
            until_ms: t0 + 2000,
            requests: 1000,
            ongoing: 35,
            answers: 1000,
            conn_handshakes: 0,
            conn_handshakes_failed: 0,
            noerror: 995,
            nxdomain: 0,
            servfail: 5,
            latency: vec![(1, 600), (3, 300), (150, 100)],
        },
        DnssimStats {
            since_ms: t0 + 2000,
            until_ms: t0 + 2500,
            requests: 500,
            ongoing: 12,
            answers: 480,
            conn_handshakes: 0,
            conn_handshakes_failed: 0,
            noerror: 480,
            nxdomain: 0,
            servfail: 0,
            latency: vec![(0, 200), (5, 280), (2000, 20)],
        },
    ];
    let sg = dir.path().join("dnssim-tcp.json");
    dnssim_file(&sg, &periodic, 7);
    // A second thread's file, all its answers within a millisecond.
    let other = dir.path().join("dnssim-fast.json");
    let fast = [DnssimStats {
        since_ms: t0,
        until_ms: t0 + 1000,
        requests: 100,
        ongoing: 0,
        answers: 100,
        conn_handshakes: 0,
        conn_handshakes_failed: 0,
        noerror: 100,
        nxdomain: 0,
        servfail: 0,
        latency: vec![(0, 100)],
    }];
    dnssim_file(&other, &fast, 0);

    let out = volley_cmd(&["compare", s(&other), s(&sg), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "compare: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let fig = |m: &str| -> f64 {
        let f = v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == m).unwrap_or_else(|| panic!("no {m}"));
        f["groups"][1]["median"].as_f64().unwrap_or_else(|| panic!("{m}: {f}"))
    };
    // 2,470 answers of 2,500 queries in 2.5 s.
    assert!((fig("qps_answered") - 988.0).abs() < 1e-9, "answers/s {}", fig("qps_answered"));
    assert!((fig("qps_sent") - 1000.0).abs() < 1e-9, "queries/s {}", fig("qps_sent"));
    assert!((fig("answered_pct") - 98.8).abs() < 1e-9, "answered {}", fig("answered_pct"));
    // The 2,470 answers by millisecond: 600 in [0, 1), 600 in [1, 2), 500 in [2, 3), 300 in
    // [3, 4), 280 in [5, 6), 90 in [40, 41), 100 in [150, 151). The median is the 1,235th, in
    // [2, 3) ms; the 99th percentile the 2,446th, in [150, 151); each read at its bucket's end.
    let ms = |m: &str| fig(m) / 1e6;
    assert!((2.0..=3.01).contains(&ms("p50")), "p50 {} ms", ms("p50"));
    assert!((150.0..=151.2).contains(&ms("p99")), "p99 {} ms", ms("p99"));
    // The other side: every answer under a millisecond.
    let p50_fast = v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == "p50").unwrap()["groups"][0]
        ["median"]
        .as_f64()
        .unwrap();
    assert!(p50_fast <= 1.001e6, "fast p50 {p50_fast} ns");

    // The series: one row per interval, each query's fate in the interval it was sent in.
    let csv = dir.path().join("series.csv");
    let out = volley_cmd(&["report", s(&sg), "--csv", s(&csv)]);
    assert_eq!(out.status.code(), Some(0), "report --csv: {}", out.stderr);
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} in {header:?}"));
    let rows: Vec<Vec<u64>> =
        lines.map(|l| l.split(',').map(|c| c.parse::<u64>().unwrap_or(u64::MAX)).collect()).collect();
    assert_eq!(rows.len(), 3, "{text}");
    let cells = |name: &str| rows.iter().map(|r| r[col(name)]).collect::<Vec<_>>();
    assert_eq!(cells("second"), [0, 1, 2], "{text}");
    assert_eq!(cells("issued"), [1000, 1000, 500], "{text}");
    assert_eq!(cells("answered"), [990, 1000, 480], "{text}");
    assert_eq!(cells("timed_out"), [10, 0, 20], "{text}");
    assert_eq!(cells("NXDOMAIN"), [10, 0, 0], "{text}");
    assert_eq!(cells("SERVFAIL"), [0, 5, 0], "{text}");
    // Connection attempts: 12, 2 of them failed.
    assert_eq!(cells("conns_opened"), [10, 0, 0], "{text}");
    assert_eq!(cells("conns_failed"), [2, 0, 0], "{text}");
    // Second 2's p90: its 480 answers, 200 under 1 ms and 280 in [5, 6) ms.
    let p90 = rows[2][col("p90_ns")] as f64 / 1e6;
    assert!((5.0..=6.1).contains(&p90), "second 2 p90 {p90} ms");

    let html = dir.path().join("r.html");
    let out = volley_cmd(&["report", s(&sg), s(&other), "-o", s(&html)]);
    assert_eq!(out.status.code(), Some(0), "report: {}", out.stderr);
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("dnssim-tcp") && text.contains("imported from DNS Shotgun"), "no Shotgun run in the report");
    assert!(text.contains("version 20200527"), "the report does not name the format");
    assert!(text.contains("7 input packets Shotgun discarded"), "dnssim's discarded are not said");

    // A latency array with fewer queries than answers is not dnssim's: one line, exit 2.
    let bad = dir.path().join("bad.json");
    let mut broken = periodic;
    broken[1].latency = vec![(1, 10)];
    dnssim_file(&bad, &broken, 0);
    let line = one_error_line(&volley_cmd(&["compare", s(&other), s(&bad)]));
    assert!(line.contains("bad.json: DNS Shotgun results: stats_sum: ") && line.contains("latency buckets"), "{line}");
}
