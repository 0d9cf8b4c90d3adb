//! Bytes and packets on the wire: volley's `totals.wire` (TCP_INFO counters for TCP, DoT and
//! DoH, datagram counts for UDP, IP and transport headers included) against a capture of the
//! same run. tcpdump captures loopback on the responder's port while `volley run` queries it;
//! tshark reads the capture; packets and bytes (frame length less the 14-byte Ethernet header
//! of `lo`) are counted per direction and must agree with volley's within 3 %.
//!
//! `volley run` sends one probe query before the run (is anything listening?); the probe's
//! socket is its own UDP flow or TCP connection, the first one in the capture, and is not
//! part of the run: it is left out of the capture's counts.
//!
//! Needs root (capturing), tcpdump and tshark: a missing tool fails the test (run
//! scripts/install-deps.sh). Every wait is bounded; tcpdump is stopped by its own pid.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{require, run_cmd, run_volley, Capture, Server, CAPTURE_WAIT as WAIT};
use serde_json::Value;

/// Largest difference allowed between volley and the capture, per direction, for packets and
/// for bytes. Observed: exact for UDP, TCP and DoT; DoH differs by a few bytes when the
/// server answers the client's last TLS record with a RST (40 bytes of headers, no
/// timestamps option, where volley counts 52 for every segment it cannot tell apart).
const TOLERANCE: f64 = 0.03;
/// Most packets the probe before a run may account for (a DoH probe is about 25).
const PROBE_MAX_PACKETS: u64 = 60;

/// Packets and bytes (IP packets: frame length less the Ethernet header) per direction.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Counts {
    bytes_out: u64,
    bytes_in: u64,
    packets_out: u64,
    packets_in: u64,
}

impl Counts {
    fn packets(&self) -> u64 {
        self.packets_out + self.packets_in
    }
}

/// The capture's counts by flow (TCP connection or UDP flow, in order of first packet), as
/// tshark reads them; "out" is towards `server_port`.
fn capture_flows(file: &Path, server_port: u16) -> Vec<Counts> {
    let tshark = require("tshark");
    let mut cmd = Command::new(&tshark);
    cmd.arg("-r").arg(file).args([
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-e",
        "frame.len",
        "-e",
        "tcp.srcport",
        "-e",
        "udp.srcport",
        "-e",
        "tcp.stream",
        "-e",
        "udp.stream",
    ]);
    let out = run_cmd(&mut cmd, WAIT);
    assert!(out.status.success(), "tshark -r {}: {}\n{}", file.display(), out.status, out.stderr);
    let mut order: Vec<String> = Vec::new();
    let mut flows: BTreeMap<String, Counts> = BTreeMap::new();
    for line in out.stdout.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 5, "tshark line: {line:?}");
        let len: u64 = f[0].parse().unwrap_or_else(|_| panic!("frame.len in {line:?}"));
        assert!(len > 14, "frame shorter than an Ethernet header: {line:?}");
        let ip_len = len - 14;
        let (src, flow) =
            if !f[1].is_empty() { (f[1], format!("tcp{}", f[3])) } else { (f[2], format!("udp{}", f[4])) };
        let src: u16 = src.parse().unwrap_or_else(|_| panic!("source port in {line:?}"));
        if !flows.contains_key(&flow) {
            order.push(flow.clone());
        }
        let c = flows.entry(flow).or_default();
        if src == server_port {
            c.packets_in += 1;
            c.bytes_in += ip_len;
        } else {
            c.packets_out += 1;
            c.bytes_out += ip_len;
        }
    }
    order.iter().map(|k| flows[k]).collect()
}

/// `totals.wire` of a results file.
fn volley_wire(v: &Value) -> Counts {
    let w = &v["totals"]["wire"];
    let n = |k: &str| w[k].as_u64().unwrap_or_else(|| panic!("totals.wire.{k} missing in\n{:#}", v["totals"]));
    Counts {
        bytes_out: n("bytes_out"),
        bytes_in: n("bytes_in"),
        packets_out: n("packets_out"),
        packets_in: n("packets_in"),
    }
}

/// Whether `got` is within [`TOLERANCE`] of `want`.
fn close(got: u64, want: u64) -> bool {
    (got as f64 - want as f64).abs() <= TOLERANCE * want as f64
}

/// Runs `volley run ARGS` against `port` under a capture and compares the counts; returns
/// (volley, capture) for the report.
fn check(what: &str, dir: &Path, port: u16, args: &[&str], answered: u64) -> (Counts, Counts) {
    let file = dir.join(format!("{}.pcap", what.replace([' ', '/'], "_")));
    let cap = Capture::start(&file, port);
    let run = run_volley(args);
    let file = cap.stop();
    let v = run.ok();
    assert_eq!(v["totals"]["answered"].as_u64(), Some(answered), "{what}: every query answered\n{}", run.stdout);
    assert!(
        run.stdout.lines().any(|l| l.starts_with("wire ") && l.contains("per answered query")),
        "{what}: the summary has a wire line\n{}",
        run.stdout
    );
    let got = volley_wire(v);
    let flows = capture_flows(&file, port);
    assert!(flows.len() >= 2, "{what}: the probe and the run in the capture, got {flows:?}");
    // The probe before the run is the first flow.
    let probe = flows[0];
    assert!(
        probe.packets() <= PROBE_MAX_PACKETS,
        "{what}: the first flow ({probe:?}) is too big for the probe before the run"
    );
    let mut seen = Counts::default();
    for c in &flows[1..] {
        seen.bytes_out += c.bytes_out;
        seen.bytes_in += c.bytes_in;
        seen.packets_out += c.packets_out;
        seen.packets_in += c.packets_in;
    }
    eprintln!("{what}: volley {got:?}\n{what}: capture {seen:?} (probe {probe:?} left out)");
    for (name, g, s) in [
        ("packets out", got.packets_out, seen.packets_out),
        ("packets in", got.packets_in, seen.packets_in),
        ("bytes out", got.bytes_out, seen.bytes_out),
        ("bytes in", got.bytes_in, seen.bytes_in),
    ] {
        assert!(
            close(g, s),
            "{what}: {name}: volley {g}, capture {s} (more than {:.0} % apart)\nvolley {got:?}\ncapture {seen:?}",
            TOLERANCE * 100.0
        );
    }
    (got, seen)
}

/// Prints each case's packets and bytes, volley's against the capture's.
fn print_rows(rows: &[(&str, (Counts, Counts))]) {
    for (what, (got, seen)) in rows {
        eprintln!(
            "{what:>10}: packets {}/{} (volley/capture), bytes {}/{}",
            got.packets(),
            seen.packets(),
            got.bytes_out + got.bytes_in,
            seen.bytes_out + seen.bytes_in
        );
    }
}

#[test]
fn wire_counts_match_a_capture() {
    // Fail early, with the fix, when a tool is missing.
    require("tcpdump");
    require("tshark");
    let dir = tempfile::tempdir().expect("temp dir for captures");
    let ca = dir.path().join("ca.pem");
    let ca_s = ca.to_str().unwrap();
    // One message per UDP answer: tcpdump on lo sees a segmented train (UDP_SEGMENT) as one
    // large packet, before the kernel splits it for the receiving socket.
    let server = Server::start_with(&["--dot-port", "0", "--doh-port", "0", "--ca-out", ca_s, "--udp-gso", "off"]);
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(&ca).map(|t| t.contains("BEGIN CERTIFICATE")).unwrap_or(false) {
        assert!(Instant::now() < deadline, "volley serve wrote no CA to {}", ca.display());
        thread::sleep(Duration::from_millis(20));
    }
    let (udp, tcp) = (server.udp_addr(), server.tcp_addr());
    let (dot, doh) = (server.listener("dot"), server.listener("doh"));
    let udp_url = format!("udp://{udp}");
    let tcp_url = format!("tcp://{tcp}");
    let dot_url = format!("tls://{dot}");
    let doh_url = format!("https://localhost:{}/dns-query", doh.port());
    let d = dir.path();

    let rows = vec![
        ("udp", check("udp", d, udp.port(), &[&udp_url, "-n", "200"], 200)),
        ("tcp", check("tcp", d, tcp.port(), &[&tcp_url, "-n", "200"], 200)),
        ("tcp fresh", check("tcp fresh", d, tcp.port(), &[&tcp_url, "-n", "50", "--conn-queries", "1"], 50)),
        ("dot", check("dot", d, dot.port(), &[&dot_url, "--ca", ca_s, "-n", "200"], 200)),
        (
            "dot fresh",
            check("dot fresh", d, dot.port(), &[&dot_url, "--ca", ca_s, "-n", "50", "--conn-queries", "1"], 50),
        ),
        ("doh", check("doh", d, doh.port(), &[&doh_url, "--ca", ca_s, "-n", "200"], 200)),
    ];

    // One query per connection: every connection's SYN, handshake and close are counted, so a
    // fresh query costs several times a persistent one.
    let per = |c: &Counts, n: u64| c.packets() as f64 / n as f64;
    let (tcp_v, _) = rows[1].1;
    let (fresh_v, _) = rows[2].1;
    assert!(
        per(&fresh_v, 50) > 3.0 * per(&tcp_v, 200),
        "a fresh TCP query costs more packets than a persistent one: {fresh_v:?} vs {tcp_v:?}"
    );
    print_rows(&rows);
}

/// `--h1-pipeline 4`: on one HTTP/1.1 connection, requests leave back to back before their
/// responses come (at most 4 outstanding), as a capture decrypted with the run's own
/// SSLKEYLOGFILE shows; every response is matched to its request in order.
#[test]
fn doh11_requests_pipelined_on_the_wire() {
    require("tcpdump");
    let tshark = require("tshark");
    let dir = tempfile::tempdir().expect("temp dir for the capture");
    let (ca, keys, results) = (dir.path().join("ca.pem"), dir.path().join("keys.log"), dir.path().join("r.json"));
    let server = Server::start_with(&["--doh-port", "0", "--ca-out", ca.to_str().unwrap()]);
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(&ca).map(|t| t.contains("BEGIN CERTIFICATE")).unwrap_or(false) {
        assert!(Instant::now() < deadline, "volley serve wrote no CA to {}", ca.display());
        thread::sleep(Duration::from_millis(20));
    }
    let port = server.listener("doh").port();
    let url = format!("https://localhost:{port}/dns-query");
    let cap = Capture::start(&dir.path().join("h1.pcap"), port);
    let out = run_cmd(
        Command::new(common::volley())
            .env("SSLKEYLOGFILE", &keys)
            .args(["run", &url, "--ca", ca.to_str().unwrap(), "--http", "1.1", "--h1-pipeline", "4"])
            .args(["--connections", "1", "-T", "1", "-c", "4", "-n", "40", "--progress", "never", "-q", "-o"])
            .arg(&results),
        WAIT,
    );
    let file = cap.stop();
    assert!(out.status.success(), "volley run: {}\n{}", out.status, out.stderr);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(v["totals"]["answered"].as_u64(), Some(40), "{:#}", v["totals"]);
    assert_eq!(v["connections"]["opened"].as_u64(), Some(1), "{:#}", v["connections"]);

    // HTTP messages per TCP connection, in capture order: +n requests, -n responses.
    let shown = Command::new(&tshark)
        .arg("-r")
        .arg(&file)
        .arg("-o")
        .arg(format!("tls.keylog_file:{}", keys.display()))
        .args(["-d", &format!("tcp.port=={port},tls"), "-Y", "http", "-T", "fields"])
        .args(["-e", "tcp.stream", "-e", "http.request.method", "-e", "http.response.code"])
        .output()
        .expect("run tshark");
    assert!(shown.status.success(), "tshark: {}", String::from_utf8_lossy(&shown.stderr));
    let text = String::from_utf8_lossy(&shown.stdout);
    let mut flows: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    let mut response_frames: BTreeMap<u64, i64> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let count = |s: &str| if s.is_empty() { 0 } else { s.split(',').count() as i64 };
        let stream: u64 = f[0].parse().unwrap_or_else(|_| panic!("tshark line {line:?}"));
        let (req, resp) = (count(f.get(1).unwrap_or(&"")), count(f.get(2).unwrap_or(&"")));
        flows.entry(stream).or_default().push(req - resp);
        *response_frames.entry(stream).or_default() += i64::from(resp > 0);
    }
    // The first connection is the probe before the run (one request, unpipelined).
    let run = flows.values().nth(1).unwrap_or_else(|| panic!("no HTTP on the run's connection:\n{text}"));
    let (mut outstanding, mut most, mut requests) = (0i64, 0i64, 0i64);
    for d in run {
        requests += d.max(&0);
        outstanding += d;
        most = most.max(outstanding);
        assert!(outstanding >= 0, "a response before its request:\n{text}");
    }
    assert_eq!((requests, outstanding), (40, 0), "40 requests, each answered:\n{text}");
    assert!((2..=4).contains(&most), "pipelined, at most 4 outstanding; saw {most}:\n{text}");
    // The responder writes the responses to requests it read together in one go (its
    // `Batched` writer under hyper): fewer frames than responses.
    let frames = response_frames.values().nth(1).copied().unwrap_or(0);
    assert!(frames * 2 <= 40, "40 responses in {frames} frames:\n{text}");
}

/// The same over DoH/1.1, fresh DoH/2 connections (one query each), and QUIC (DoQ, persistent
/// and fresh, and DoH/3), whose counts come from quinn's statistics: every UDP datagram's
/// payload plus IP and UDP headers. Both sides send QUIC packets one by one (`--udp-gso off`):
/// tcpdump on `lo` sees a segmentation-offload train as one packet.
#[test]
fn wire_counts_match_a_capture_doh_and_quic() {
    require("tcpdump");
    require("tshark");
    let dir = tempfile::tempdir().expect("temp dir for captures");
    let server = Server::start_encrypted(&["--udp-gso", "off"]);
    let ca = server.ca_str().to_string();
    let (doh, doh3, doq) = (server.listener("doh"), server.listener("doh3"), server.listener("doq"));
    let doh_url = format!("https://localhost:{}/dns-query", doh.port());
    let doh3_url = format!("h3://localhost:{}/dns-query", doh3.port());
    let doq_url = format!("quic://localhost:{}", doq.port());
    let d = dir.path();
    let with = |url: &str, more: &[&'static str]| -> Vec<String> {
        // QUIC packets one by one, as the capture sees them (not segmentation-offload trains).
        let mut v =
            vec![url.to_string(), "--ca".into(), ca.clone(), "-T".into(), "1".into(), "--udp-gso".into(), "off".into()];
        v.extend(more.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<(&str, u16, Vec<String>, u64)> = vec![
        ("doh1.1", doh.port(), with(&doh_url, &["--http", "1.1", "-n", "100"]), 100),
        ("doh fresh", doh.port(), with(&doh_url, &["-n", "40", "--conn-queries", "1"]), 40),
        ("doq", doq.port(), with(&doq_url, &["-n", "200"]), 200),
        ("doq fresh", doq.port(), with(&doq_url, &["-n", "40", "--conn-queries", "1"]), 40),
        ("doh3", doh3.port(), with(&doh3_url, &["-n", "200"]), 200),
    ];
    let mut rows = Vec::new();
    for (what, port, args, n) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rows.push((*what, check(what, d, *port, &args, *n)));
    }
    // Fresh connections cost many times the packets of persistent ones (handshakes, and for
    // QUIC padded Initial packets).
    let per = |c: &Counts, n: u64| (c.packets() as f64 / n as f64, (c.bytes_out + c.bytes_in) as f64 / n as f64);
    let (doq_v, _) = rows[2].1;
    let (fresh_v, _) = rows[3].1;
    assert!(
        per(&fresh_v, 40).1 > 5.0 * per(&doq_v, 200).1,
        "fresh DoQ costs more bytes per query: {fresh_v:?} vs {doq_v:?}"
    );
    print_rows(&rows);
}
