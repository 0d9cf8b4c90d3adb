//! The spellings of the tools volley sits beside: dnsperf's -s/-p/-m name the target, a file
//! of bare names (dnspyre's) takes --qtype, and other tools' flags that mean something else in
//! volley get one line naming volley's spelling, exit 2.

mod common;

use std::process::Command;

use common::*;

#[test]
fn dnsperf_server_port_and_mode_name_the_target() {
    let server = Server::start();
    let udp = server.udp_addr();
    let r = run_volley(&["-s", &udp.ip().to_string(), "-p", &udp.port().to_string(), "-l", "1s", "-c", "4"]);
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    let json = r.json.expect("results");
    assert_eq!(json["target"]["url"].as_str(), Some(format!("udp://{udp}").as_str()));
    assert!(json["totals"]["answered"].as_u64().unwrap() > 0);

    let tcp: std::net::SocketAddr = server.tcp_url().trim_start_matches("tcp://").parse().unwrap();
    let r =
        run_volley(&["-s", &tcp.ip().to_string(), "-p", &tcp.port().to_string(), "-m", "tcp", "-l", "1s", "-c", "4"]);
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    let json = r.json.expect("results");
    assert_eq!(json["target"]["transport"].as_str(), Some("tcp"));
    assert!(json["totals"]["answered"].as_u64().unwrap() > 0);

    // A file of bare names asks for --qtype: AAAA answers carry 16-octet addresses where A
    // answers carry 4, 12 octets more per answer.
    let dir = tempfile::tempdir().unwrap();
    let names = dir.path().join("names.txt");
    std::fs::write(&names, "www.example.test\nmail.example.test\n").unwrap();
    let per_answer = |qtype: &str| {
        let r =
            run_volley(&[&server.udp_url(), "-d", names.to_str().unwrap(), "--qtype", qtype, "-n", "20", "-c", "2"]);
        assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
        let t = &r.json.expect("results")["totals"];
        assert_eq!(t["answered"].as_u64(), Some(20));
        t["bytes_in"].as_u64().unwrap() / 20
    };
    assert_eq!(per_answer("AAAA"), per_answer("A") + 12);
}

/// dnsperf's -m names the encrypted transports too (dot, doh, doq), at their own ports, and
/// its -Q is the open loop's rate: 200 queries a second for one second are 200 queries.
#[test]
fn dnsperf_mode_names_encrypted_transports_and_q_is_the_rate() {
    let server = Server::start_encrypted(&[]);
    for (mode, kind, scheme) in [("dot", "dot", "tls"), ("doh", "doh", "https"), ("doq", "doq", "quic")] {
        let a = server.listener(kind);
        let r = run_volley(&[
            "-s",
            &a.ip().to_string(),
            "-p",
            &a.port().to_string(),
            "-m",
            mode,
            "--ca",
            server.ca_str(),
            "-Q",
            "200",
            "-l",
            "1s",
        ]);
        assert_eq!(r.status.code(), Some(0), "-m {mode}: {}", r.stderr);
        let json = r.json.expect("results");
        let url = json["target"]["url"].as_str().unwrap_or_default().to_string();
        assert!(url.starts_with(&format!("{scheme}://{a}")), "-m {mode}: target {url}");
        let t = &json["totals"];
        assert_eq!(t["issued"].as_u64(), Some(200), "-m {mode} -Q 200 -l 1s: {t}");
        assert_eq!(t["answered"].as_u64(), Some(200), "-m {mode}: {t}");
    }
}

fn one_line(args: &[&str]) -> String {
    let out = run_cmd(Command::new(volley()).args(args), RUN_WAIT);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}\n{}", out.status, out.stderr);
    let lines: Vec<&str> = out.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line: {}", out.stderr);
    lines[0].to_string()
}

#[test]
fn other_tools_flags_get_volleys_spelling() {
    // dnsperf's -q (queries outstanding) is volley's -c.
    let l = one_line(&["run", "-s", "127.0.0.1", "-q", "100"]);
    assert!(l.contains("-c N"), "{l}");
    // dnspyre's -t (query type) is --qtype; its -d (duration) is -l.
    let l = one_line(&["run", "udp://127.0.0.1:9", "-t", "AAAA"]);
    assert!(l.contains("--qtype"), "{l}");
    let l = one_line(&["run", "udp://127.0.0.1:9", "-d", "10s"]);
    assert!(l.contains("-l 10s"), "{l}");
    // flamethrower's -P (protocol).
    let l = one_line(&["run", "udp://127.0.0.1:9", "-P", "tcp"]);
    assert!(l.contains("-m MODE"), "{l}");
    // TARGET and -s together, and an unknown mode.
    let l = one_line(&["run", "udp://127.0.0.1:9", "-s", "127.0.0.1"]);
    assert!(l.contains("cannot be used with"), "{l}");
    let l = one_line(&["run", "-m", "sctp"]);
    assert!(l.contains("invalid -m/--mode 'sctp'"), "{l}");
}

/// dnsperf's `-c 10 -Q 1000` (10 client sockets at 1,000 qps): volley's -c is the closed
/// loop's queries in flight, which -Q excludes, so the conflict names --connections.
#[test]
fn dnsperf_c_with_q_names_connections() {
    for args in [
        &["run", "-s", "127.0.0.1", "-c", "10", "-Q", "1000"][..],
        &["run", "udp://127.0.0.1:9", "-Q", "1000", "-c", "10"][..],
    ] {
        let l = one_line(args);
        assert!(l.contains("cannot be used with"), "{l}");
        assert!(l.contains("--connections N"), "{l}");
    }
    // -c alone is volley's own closed loop and gets no hint (the error here is the bad mode).
    let l = one_line(&["run", "-m", "sctp", "-c", "10"]);
    assert!(!l.contains("--connections"), "{l}");
}

/// resperf's -m is the highest rate it ramps to: a number there names `volley limit --max`.
#[test]
fn resperf_m_names_limit_max() {
    for cmd in ["run", "limit"] {
        let l = one_line(&[cmd, "-s", "127.0.0.1", "-m", "100000"]);
        assert!(l.contains("invalid -m/--mode '100000'"), "{cmd}: {l}");
        assert!(l.contains("volley limit --max 100000"), "{cmd}: {l}");
    }
}
