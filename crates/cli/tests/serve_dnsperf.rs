//! `volley serve` under load from a real load generator, dnsperf, over UDP and TCP: every query
//! sent is completed and none is lost.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// The statistics dnsperf prints at the end of a run.
#[derive(Debug)]
struct Stats {
    sent: u64,
    completed: u64,
    lost: u64,
    rcodes: Vec<(String, u64)>,
}

/// The first number after `key` on its line: `  Queries completed:    28692 (100.00%)`.
fn number_after(text: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("no `{key}` line in dnsperf output:\n{text}"));
    let rest = &line[line.find(key).unwrap() + key.len()..];
    rest.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after `{key}` in: {line}"))
}

/// `  Response codes:       NOERROR 19128 (66.67%), NXDOMAIN 9564 (33.33%)`
fn rcodes(text: &str) -> Vec<(String, u64)> {
    let Some(line) = text.lines().find(|l| l.trim_start().starts_with("Response codes:")) else {
        return Vec::new();
    };
    let rest = &line[line.find("Response codes:").unwrap() + "Response codes:".len()..];
    rest.split(',')
        .filter_map(|part| {
            let mut w = part.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

fn dnsperf(port: u16, queries: &std::path::Path, mode: &str) -> (Stats, String) {
    let bin = require("dnsperf");
    let mut cmd = Command::new(bin);
    cmd.args(["-s", "127.0.0.1", "-p", &port.to_string(), "-m", mode, "-l", "2", "-t", "5"]).arg("-d").arg(queries);
    let out = run_cmd(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "dnsperf failed ({}):\n{}\n{}", out.status, out.stdout, out.stderr);
    let text = out.stdout;
    let stats = Stats {
        sent: number_after(&text, "Queries sent:"),
        completed: number_after(&text, "Queries completed:"),
        lost: number_after(&text, "Queries lost:"),
        rcodes: rcodes(&text),
    };
    (stats, text)
}

fn queries_file(dir: &std::path::Path) -> std::path::PathBuf {
    write_queries(
        dir,
        "queries.txt",
        &["www.example.test A", "www.example.test AAAA", "www.example.test TXT", "www.example.test MX", "x.nx.test A"],
    )
}

fn check(mode: &str) {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = queries_file(dir.path());
    let port = if mode == "tcp" { s.tcp_addr().port() } else { s.udp_addr().port() };
    let (st, text) = dnsperf(port, &file, mode);
    assert!(st.sent > 0, "dnsperf sent nothing:\n{text}");
    assert_eq!(st.completed, st.sent, "every query completed:\n{text}");
    assert_eq!(st.lost, 0, "no query lost:\n{text}");
    let get = |name: &str| st.rcodes.iter().find(|(n, _)| n == name).map(|(_, c)| *c).unwrap_or(0);
    assert!(get("NOERROR") > 0, "NOERROR answers expected: {:?}\n{text}", st.rcodes);
    assert!(get("NXDOMAIN") > 0, "NXDOMAIN answers for x.nx.test expected: {:?}\n{text}", st.rcodes);
    let sum: u64 = st.rcodes.iter().map(|(_, c)| c).sum();
    assert_eq!(sum, st.completed, "response codes sum to completed: {:?}\n{text}", st.rcodes);
    assert!(
        st.rcodes.iter().all(|(n, _)| n == "NOERROR" || n == "NXDOMAIN"),
        "only NOERROR and NXDOMAIN: {:?}",
        st.rcodes
    );
}

#[test]
fn dnsperf_udp_all_completed_none_lost() {
    check("udp");
}

#[test]
fn dnsperf_tcp_all_completed_none_lost() {
    check("tcp");
}
