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

#[test]
fn bench_prints_a_row_per_transport() {
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "-l", "1s", "-c", "10"]);
    let out = run_cmd(&mut cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    for t in ["udp", "tcp"] {
        assert!(
            out.stdout.lines().any(|l| l.split(|c: char| c.is_whitespace() || c == '|').any(|w| w == t)),
            "a row for {t}:\n{}",
            out.stdout
        );
    }
}

#[test]
fn bench_against_unbound_targets() {
    let ub = Unbound::start(UNBOUND_DATA);
    let (udp, tcp) = (ub.url("udp"), ub.url("tcp"));
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "--target", &udp, "--target", &tcp, "-l", "1s", "-c", "10"]);
    let out = run_cmd(&mut cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    for t in ["udp", "tcp"] {
        assert!(
            out.stdout.lines().any(|l| l.split(|c: char| c.is_whitespace() || c == '|').any(|w| w == t)),
            "a row for {t}:\n{}",
            out.stdout
        );
    }
}
