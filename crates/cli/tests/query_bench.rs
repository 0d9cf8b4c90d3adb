//! `volley query` (one query, dig-like output) and `volley bench` (a table per transport).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn query(args: &[&str]) -> Output {
    let mut cmd = Command::new(volley());
    cmd.arg("query").args(args);
    run_cmd(&mut cmd, Duration::from_secs(30))
}

#[test]
fn query_the_responder() {
    let s = Server::start();
    for t in ["udp", "tcp"] {
        let url = s.url(t);
        let out = query(&[&url, "www.example.test", "A"]);
        assert_eq!(out.status.code(), Some(0), "{t}: {}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("NOERROR"), "{t}: rcode shown:\n{}", out.stdout);
        assert!(out.stdout.contains("192.0.2.1"), "{t}: answer shown:\n{}", out.stdout);
        assert!(out.stdout.contains("www.example.test."), "{t}: owner shown:\n{}", out.stdout);

        let out = query(&[&url, "x.nx.test"]);
        assert_eq!(out.status.code(), Some(0), "{t}: an NXDOMAIN answer is an answer:\n{}", out.stderr);
        assert!(out.stdout.contains("NXDOMAIN"), "{t}:\n{}", out.stdout);

        let out = query(&[&url, "www.example.test", "AAAA"]);
        assert!(out.stdout.contains("2001:db8::1"), "{t}:\n{}", out.stdout);
    }
}

#[test]
fn query_unbound() {
    let ub = Unbound::start(UNBOUND_DATA);
    for t in ["udp", "tcp"] {
        let out = query(&[&ub.url(t), "www.example.test", "TXT"]);
        assert_eq!(out.status.code(), Some(0), "{t}: {}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("\"volley\""), "{t}: TXT shown:\n{}", out.stdout);
    }
}

#[test]
fn query_nothing_listening() {
    let port = closed_tcp_port();
    let out = query(&[&format!("tcp://127.0.0.1:{port}"), "www.example.test"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.starts_with("volley: error:"), "{}", out.stderr);
}

/// The cell of column `name` in table line `line`: cells are right-aligned, so a cell ends
/// where its header does (in characters).
fn cell(header: &str, line: &str, name: &str) -> String {
    let end = header.find(name).unwrap_or_else(|| panic!("no column {name} in {header:?}")) + name.len();
    let upto: String = line.chars().take(end).collect();
    upto.split_whitespace().last().unwrap_or_default().to_string()
}

/// The embedded responder's seven transports, a row each in table order; the connection
/// columns filled for the connection-based ones, `resumed` for those with TLS.
#[test]
fn bench_prints_a_row_per_transport() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "-l", "1s", "-c", "10", "-o"]).arg(&json);
    let out = run_cmd(&mut cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    let header = out.stdout.lines().find(|l| l.starts_with("transport")).unwrap_or_else(|| panic!("{}", out.stdout));
    let rows: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("transport"))
        .skip(1)
        .take_while(|l| !l.starts_with("note:"))
        .collect();
    let names: Vec<&str> = rows.iter().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(names, ["udp", "tcp", "dot", "doh1", "doh2", "doh3", "doq"], "{}", out.stdout);
    // The line under the table: TCP and DoT are pipelined here; the per-client comparison is
    // the transport-cost experiment.
    let note = out.stdout.lines().find(|l| l.starts_with("note:")).unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(note.contains("pipelined") && note.contains("volley experiment run transport-cost"), "{note}");
    for l in &rows {
        let t = l.split_whitespace().next().unwrap();
        let (conns, handshake, resumed) =
            (cell(header, l, "conns"), cell(header, l, "handshake"), cell(header, l, "resumed"));
        match t {
            "udp" => assert_eq!((conns.as_str(), handshake.as_str(), resumed.as_str()), ("-", "-", "-"), "{l}"),
            _ => {
                assert!(conns.parse::<u64>().is_ok_and(|n| n > 0), "{t}: connections in {l:?}");
                assert!(handshake.ends_with('s') && handshake != "-", "{t}: a handshake time in {l:?}");
                let tls = t != "tcp";
                assert_eq!(resumed.parse::<u64>().is_ok(), tls, "{t}: resumed in {l:?}");
            }
        }
    }
    // The embedded responder's CPU per query, for every transport, relative to UDP's.
    assert!(out.stdout.contains("srv CPU/query") && out.stdout.contains("srv vs udp"), "{}", out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for (row, run) in doc["rows"].as_array().unwrap().iter().zip(doc["runs"].as_array().unwrap()) {
        let t = &run["target_cpu"];
        let (cpu, answered) = (t["cpu_s"].as_f64().unwrap(), run["totals"]["answered"].as_f64().unwrap());
        assert!(cpu > 0.0 && answered > 0.0, "{}: the responder spent CPU on its answers: {t:#}", row["transport"]);
        assert!((row["target_cpu_us_per_answer"].as_f64().unwrap() - cpu * 1e6 / answered).abs() < 1e-6);
    }
}

/// `--target` rows take `volley run`'s TLS and HTTP flags: a DoH/1.1 row (ALPN http/1.1, one
/// connection per query in flight) with GET and an SNI of its own; a wrong SNI is bad input.
#[test]
fn bench_target_doh11_get_with_sni() {
    let s = Server::start_encrypted(&["-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let url = s.url("https");
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "--target", &url, "--ca", s.ca_str(), "--http", "1.1", "--doh-method", "get"])
        .args(["--sni", "localhost", "-l", "1s", "-c", "6", "-T", "1", "--progress", "never", "-o"])
        .arg(&json);
    let out = run_cmd(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.lines().any(|l| l.starts_with("https ")), "an https row:\n{}", out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let c = &doc["runs"][0]["connections"];
    assert_eq!(c["negotiated"]["alpn"]["http/1.1"].as_u64(), Some(6), "HTTP/1.1, a connection per query:\n{c:#}");
    assert!(doc["runs"][0]["totals"]["answered"].as_u64() > Some(0), "{:#}", doc["runs"][0]["totals"]);
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "--target", &url, "--ca", s.ca_str(), "--sni", "wrong.example", "-l", "1s"]);
    let out = run_cmd(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("wrong.example"), "names the name: {}", out.stderr);
}

#[test]
fn bench_target_pid_is_for_external_targets() {
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "-l", "1s", "--target-pid", &std::process::id().to_string()]);
    let out = run_cmd(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("--target-pid is for external targets"), "{}", out.stderr);
}

#[test]
fn bench_against_unbound_targets() {
    let ub = Unbound::start(UNBOUND_DATA);
    let (udp, tcp) = (ub.url("udp"), ub.url("tcp"));
    let mut cmd = Command::new(volley());
    let pid = ub.pid().to_string();
    cmd.args(["bench", "--target", &udp, "--target", &tcp, "-l", "1s", "-c", "10", "--target-pid", &pid]);
    let out = run_cmd(&mut cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    // unbound's CPU per query, from --target-pid: a figure in every row.
    let header = out.stdout.lines().find(|l| l.starts_with("transport")).unwrap_or_else(|| panic!("{}", out.stdout));
    // Cells are right-aligned: the cell ends where its header does (in characters).
    let end = header.find("srv CPU/query").expect("srv CPU/query column") + "srv CPU/query".len();
    for l in out.stdout.lines().filter(|l| l.starts_with("udp") || l.starts_with("tcp")) {
        let upto: String = l.chars().take(end).collect();
        let cell = upto.split_whitespace().last().unwrap();
        assert!(cell.ends_with("µs") || cell.ends_with("ns"), "a CPU time in {l:?}: {cell:?}");
    }
    for t in ["udp", "tcp"] {
        assert!(
            out.stdout.lines().any(|l| l.split(|c: char| c.is_whitespace() || c == '|').any(|w| w == t)),
            "a row for {t}:\n{}",
            out.stdout
        );
    }
}
