//! Bad input and unusable targets: exit 2, one line on stderr starting `volley: error:` that
//! names the place, and no results file. An interrupted run: exit 130 with its results written.

mod common;

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use common::*;

#[test]
fn missing_query_file() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-queries.txt");
    let missing = missing.to_str().unwrap();
    let r = run_volley(&[&s.udp_url(), "-d", missing, "-n", "10"]);
    let line = assert_usage_error(&r);
    assert!(line.contains(missing), "the message names the file: {line}");
}

#[test]
fn malformed_query_line_names_file_and_line() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = write_queries(
        dir.path(),
        "bad.txt",
        &["www.example.test A", "www.example.test AAAA", "www.example.test BOGUS", "www.example.test TXT"],
    );
    let file = file.to_str().unwrap();
    let r = run_volley(&[&s.udp_url(), "-d", file, "-n", "10"]);
    let line = assert_usage_error(&r);
    assert!(line.contains(&format!("{file}:3")), "the message names FILE:3: {line}");
    assert!(line.contains("BOGUS"), "the message names the bad type: {line}");
}

#[test]
fn unknown_qtype() {
    let s = Server::start();
    let r = run_volley(&[&s.udp_url(), "--name", "www.example.test", "--qtype", "BOGUS", "-n", "10"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("BOGUS"), "the message names the bad type: {line}");
}

#[test]
fn target_pid_that_does_not_exist() {
    let s = Server::start();
    // pid_max is at most 2^22: this pid cannot exist.
    let r = run_volley(&[&s.udp_url(), "-n", "10", "--target-pid", "4194999"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("--target-pid 4194999"), "the message names the flag and pid: {line}");
}

#[test]
fn unparsable_targets() {
    for target in ["foo://x", "udp://", "udp://[::1", "tcp://127.0.0.1:99999"] {
        let r = run_volley(&[target, "--name", "www.example.test", "-n", "10"]);
        let line = assert_usage_error(&r);
        assert!(line.contains(target), "the message names the target {target:?}: {line}");
    }
}

#[test]
fn nothing_listening_over_tcp() {
    let port = closed_tcp_port();
    let addr = format!("127.0.0.1:{port}");
    let r = run_volley(&[&format!("tcp://{addr}"), "--name", "www.example.test", "-n", "10", "-t", "1s"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("nothing") || line.contains("refused"), "says nothing listens: {line}");
    assert!(line.contains(&addr), "names the address {addr}: {line}");
}

#[test]
fn nothing_listening_over_udp() {
    let port = closed_udp_port();
    let addr = format!("127.0.0.1:{port}");
    let r = run_volley(&[&format!("udp://{addr}"), "--name", "www.example.test", "-n", "10", "-t", "1s"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("nothing") || line.contains("refused"), "says nothing listens: {line}");
    assert!(line.contains(&addr), "names the address {addr}: {line}");
}

#[test]
fn nothing_listening_over_quic() {
    // QUIC itself ignores ICMP; the check before the run asks the port.
    let port = closed_udp_port();
    let addr = format!("127.0.0.1:{port}");
    for url in [format!("quic://{addr}"), format!("h3://{addr}/dns-query")] {
        let r = run_volley(&[&url, "--insecure", "--name", "www.example.test", "-n", "10", "-t", "1s"]);
        let line = assert_usage_error(&r);
        assert!(line.contains("nothing is listening") && line.contains(&url), "{url}: {line}");
    }
    let r = run_volley(&[&format!("https://{addr}/dns-query"), "--http", "3", "--insecure", "-n", "10", "-t", "1s"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("nothing is listening"), "{line}");
}

/// Flags that contradict each other are refused before anything runs.
#[test]
fn contradictory_tls_flags() {
    let s = Server::start_encrypted(&[]);
    let dot = s.url("tls");
    for (flags, says) in [
        (&["--insecure", "--ca", s.ca_str()][..], "--insecure skips certificate verification"),
        (&["--ca", s.ca_str(), "--zero-rtt", "--tls-version", "1.2"][..], "--zero-rtt needs TLS 1.3"),
    ] {
        let r = run_volley(&[&[dot.as_str(), "-n", "5"][..], flags].concat());
        let line = assert_usage_error(&r);
        assert!(line.contains(says), "{flags:?}: {line}");
    }
}

/// Flags that no target of the run uses are said on stderr and kept in the results'
/// warnings; the run goes on.
#[test]
fn flags_without_effect_are_said() {
    let s = Server::start_encrypted(&[]);
    let cases = [
        (s.udp_url(), vec!["--ca", s.ca_str(), "--sni", "x.test"], "--ca, --sni has no effect: no target uses TLS"),
        (s.url("tls"), vec!["--ca", s.ca_str(), "--http", "1.1"], "--http has no effect: no target is DoH"),
        (s.url("h3"), vec!["--ca", s.ca_str(), "--http", "2"], "--http 2 has no effect: h3:// is always HTTP/3"),
    ];
    for (url, flags, says) in cases {
        let r = run_volley(&[&[url.as_str(), "-n", "5"][..], &flags[..]].concat());
        let v = r.ok();
        assert!(r.stderr.contains(&format!("volley: warning: {says}")), "{url} {flags:?}: {}", r.stderr);
        let warnings = v["warnings"].as_array().cloned().unwrap_or_default();
        assert!(warnings.iter().any(|w| w.as_str().is_some_and(|w| w.starts_with(says))), "{warnings:?}");
        assert_eq!(total(v, "answered"), 5, "the run went on: {:#}", v["totals"]);
    }
    // --insecure is said at the start too, not only in the summary at the end.
    let r = run_volley(&[&s.url("tls"), "-n", "5", "--insecure"]);
    assert!(
        r.stderr.contains("volley: warning: --insecure: the server's certificate was NOT verified"),
        "{}",
        r.stderr
    );
}

#[test]
fn unknown_flag_is_a_usage_error() {
    let s = Server::start();
    let r = run_volley(&[&s.udp_url(), "--no-such-flag"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("--no-such-flag"), "{line}");
}

#[test]
fn sigint_writes_interrupted_results() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("interrupted.json");
    let mut child = Command::new(volley())
        .args(["run", &s.udp_url(), "--name", "www.example.test", "-c", "10", "-l", "30s"])
        .args(["--progress", "never", "-o"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start volley run");
    thread::sleep(Duration::from_millis(1500));
    signal(&child, libc::SIGINT);
    let status = wait_bounded(&mut child, Duration::from_secs(20)).expect("volley run ends within 20 s of SIGINT");
    assert_eq!(status.code(), Some(130), "exit status 130 after SIGINT, got {status}");
    let v = read_results(&out).expect("results written after SIGINT");
    assert_eq!(v["status"], "interrupted", "{v:#}");
    check_accounting(&v);
    assert!(total(&v, "answered") > 0, "answers before the interrupt:\n{:#}", v["totals"]);
}

/// Results sent to a device or a pipe are written into it, not renamed over it: `-o /dev/null`
/// (and `--metrics-file /dev/null`) must leave the device a device. As root, replacing /dev/null with a
/// regular file breaks every program on the machine.
#[test]
fn results_to_dev_null_and_stdout_keep_the_devices() {
    use std::os::unix::fs::FileTypeExt;
    let s = Server::start();
    let r = run_cmd(
        Command::new(volley())
            .args(["run", &s.udp_url(), "--name", "www.example.test", "-n", "20", "--progress", "never"])
            .args(["-o", "/dev/stdout", "--metrics-file", "/dev/null"]),
        Duration::from_secs(30),
    );
    assert!(r.status.success(), "{}", r.stderr);
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device(), "/dev/null replaced");
    let stdout = &r.stdout;
    assert!(stdout.contains("\"schema\": \"volley.results/1\""), "results JSON on stdout:\n{stdout}");
}

/// More connections than the open-files limit allows: one usage error before the run that
/// names the limit, rather than connections failing one by one.
#[test]
fn connections_beyond_the_open_files_limit_are_refused_up_front() {
    let s = Server::start();
    let prlimit = require("prlimit");
    let r = run_cmd(
        Command::new(prlimit).arg("--nofile=300:300").arg(volley()).args([
            "run",
            &s.tcp_url(),
            "--connections",
            "400",
            "-n",
            "10",
            "--progress",
            "never",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("may open 300 files"), "{}", r.stderr);
    let r = run_cmd(
        Command::new(require("prlimit"))
            .arg("--nofile=300:300")
            .arg(volley())
            .args(["run", &s.tcp_url(), "--clients", "1000", "--profile", "forwarder", "--client-rate", "1"])
            .args(["-l", "1s", "--progress", "never"]),
        Duration::from_secs(30),
    );
    assert_eq!(r.status.code(), Some(2), "1000 clients at 1 qps, 10 s idle: about 1000 connections\n{}", r.stderr);
    assert!(r.stderr.contains("1000 clients need about"), "{}", r.stderr);
}
