//! Real clients against the responder's encrypted listeners (`volley serve --dot-port
//! --doh-port --doh3-port --doq-port`, certificate generated at start, CA from `--ca-out`):
//! kdig over DoT and DoH (POST and GET), q over DoT, DoQ, DoH/2 and DoH/3, dnsproxy as a DoQ
//! and a DoH/3 upstream client, dnsperf -m dot and -m doh; and the generator against the
//! responder on every encrypted transport.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

// ---------------------------------------------------------------------------------------------
// kdig
// ---------------------------------------------------------------------------------------------

#[test]
fn kdig_tls_https_and_https_get() {
    let mut s = Server::start_encrypted(&[]);
    let dot = s.listener("dot").port();
    let doh = s.listener("doh").port();
    for (port, mode) in [(dot, "+tls"), (doh, "+https"), (doh, "+https-get")] {
        let got = kdig_short(port, mode, s.ca(), "www.example.test").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, "192.0.2.1", "kdig {mode}");
        // The answer engine behind every transport: NXDOMAIN for a name with an `nx` label.
        let kdig = require("kdig");
        let out = run_cmd(
            Command::new(kdig)
                .arg("@127.0.0.1")
                .arg("-p")
                .arg(port.to_string())
                .arg(mode)
                .arg(format!("+tls-ca={}", s.ca().display()))
                .args(["+tls-hostname=localhost", "+timeout=2", "+retry=0", "a.nx.test", "A"]),
            Duration::from_secs(15),
        );
        assert!(out.stdout.contains("status: NXDOMAIN"), "kdig {mode} a.nx.test:\n{}{}", out.stdout, out.stderr);
    }
    let err = s.terminate();
    assert!(serve_stat(&err, "dot_connections") >= 1, "{err}");
    assert!(serve_stat(&err, "doh_connections") >= 2, "{err}");
}

// kdig over DoQ is not tested: Debian 12's kdig (knot-dnsutils 3.2.6) is built without QUIC
// (no libngtcp2) and falls back to TCP for +quic. DoQ clients are tested with q and dnsproxy.

/// kdig with a CA that did not sign the responder's certificate refuses it.
#[test]
fn kdig_refuses_an_untrusted_responder() {
    let s = Server::start_encrypted(&[]);
    let other = TestCert::new();
    let r = kdig_short(s.listener("dot").port(), "+tls", &other.cert(), "www.example.test");
    assert!(r.is_err(), "kdig trusted a certificate its CA did not sign: {r:?}");
}

// ---------------------------------------------------------------------------------------------
// q (natesales/q): DoT, DoQ, DoH/2, DoH/3
// ---------------------------------------------------------------------------------------------

#[test]
fn q_over_dot_doq_doh2_doh3() {
    let mut s = Server::start_encrypted(&[]);
    let cases = [
        (format!("tls://{}", s.listener("dot")), vec![]),
        (format!("quic://{}", s.listener("doq")), vec![]),
        (format!("https://{}/dns-query", s.listener("doh")), vec!["--http2"]),
        (format!("https://{}/dns-query", s.listener("doh")), vec!["--http2", "--http-method=POST"]),
        (format!("https://{}/dns-query", s.listener("doh3")), vec!["--http3"]),
        (format!("https://{}/dns-query", s.listener("doh3")), vec!["--http3", "--http-method=POST"]),
    ];
    for (server, extra) in &cases {
        let out = q_query(server, s.ca(), "www.example.test", extra).unwrap_or_else(|e| panic!("{e}"));
        assert!(out.contains("192.0.2.1"), "q @{server} {extra:?}:\n{out}");
    }
    let err = s.terminate();
    for key in ["dot_connections", "doq_connections", "doh_connections", "doh3_connections"] {
        assert!(serve_stat(&err, key) >= 1, "{key}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// dnsproxy as an upstream client: plain UDP in front, DoQ or DoH/3 to the responder
// ---------------------------------------------------------------------------------------------

/// dnsproxy listening on plain UDP (127.0.0.1:port) with the responder as its only upstream.
struct Forwarder {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Forwarder {
    fn start(upstream: &str, ca: &Path) -> Forwarder {
        let bin = require("dnsproxy");
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dnsproxy.log");
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let f = std::fs::File::create(&log).unwrap();
            let mut child = Command::new(&bin)
                .env("SSL_CERT_FILE", ca)
                .env_remove("SSL_CERT_DIR")
                .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-u", upstream, "--timeout=3s"])
                .stdin(std::process::Stdio::null())
                .stdout(f.try_clone().unwrap())
                .stderr(f)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start dnsproxy: {e}"));
            // Ready when its UDP port answers (through the upstream).
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let q = build_query(0x7777, "ready.example.test", 1, Some(1232));
            let deadline = std::time::Instant::now() + STARTUP_WAIT;
            while std::time::Instant::now() < deadline {
                if let Ok(Some(st)) = child.try_wait() {
                    last = format!("dnsproxy exited: {st}");
                    break;
                }
                if udp_exchange(addr, &q, Duration::from_millis(500)).is_ok() {
                    return Forwarder { child, port, dir };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            last = format!("{last}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("dnsproxy -u {upstream} did not answer: {last}");
    }

    fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// What dnsproxy logged (its failed exchanges, say).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dnsproxy.log")).unwrap_or_default()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn through_forwarder(scheme: &str, listener: &str, stat: &str) {
    let mut s = Server::start_encrypted(&[]);
    let upstream = match scheme {
        "quic" => format!("quic://{}", s.listener(listener)),
        _ => format!("h3://{}/dns-query", s.listener(listener)),
    };
    let fw = Forwarder::start(&upstream, s.ca());
    for (i, name) in ["a1.example.test", "a2.example.test", "a3.example.test"].iter().enumerate() {
        let q = build_query(0x4200 + i as u16, name, 1, Some(1232));
        let r = udp_exchange(fw.addr(), &q, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let m = parse_msg(&r).unwrap();
        assert_eq!(m.rcode(), 0, "{name}");
        assert!(
            m.answers.iter().any(|a| a.rtype == 1 && a.rdata == [192, 0, 2, 1]),
            "{name} through dnsproxy -u {upstream}: {m:?}"
        );
    }
    let q = build_query(0x4300, "b.nx.test", 1, Some(1232));
    let m = parse_msg(&udp_exchange(fw.addr(), &q, Duration::from_secs(5)).unwrap()).unwrap();
    assert_eq!(m.rcode(), 3, "NXDOMAIN through dnsproxy -u {upstream}");
    let err = s.terminate();
    assert!(serve_stat(&err, stat) >= 1, "dnsproxy reached the responder over {stat}: {err}");
    assert!(serve_stat(&err, "answered") >= 4, "{err}");
}

#[test]
fn dnsproxy_doq_upstream() {
    through_forwarder("quic", "doq", "doq_connections");
}

#[test]
fn dnsproxy_doh3_upstream() {
    through_forwarder("h3", "doh3", "doh3_connections");
}

/// dnsproxy (quic-go) as the client of a responder that closes each connection after 3
/// queries (`--max-queries-per-conn 3`): every answer reaches it, none turns into SERVFAIL.
/// HTTP/3: GOAWAY, then CONNECTION_CLOSE (H3_NO_ERROR) only once the responses were
/// acknowledged (a close as soon as the request tasks were done lost the last answer of each
/// connection); DoQ: CONNECTION_CLOSE (DOQ_NO_ERROR) likewise.
#[test]
fn dnsproxy_upstream_across_graceful_closes() {
    for (scheme, listener) in [("h3", "doh3"), ("quic", "doq")] {
        let mut s = Server::start_encrypted(&["-T", "1", "--max-queries-per-conn", "3"]);
        let upstream = match scheme {
            "quic" => format!("quic://{}", s.listener(listener)),
            _ => format!("h3://{}/dns-query", s.listener(listener)),
        };
        let fw = Forwarder::start(&upstream, s.ca());
        for i in 0..10u16 {
            let name = format!("g{i}.example.test");
            let q = build_query(0x4400 + i, &name, 1, Some(1232));
            let r = udp_exchange(fw.addr(), &q, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let m = parse_msg(&r).unwrap();
            assert_eq!(m.rcode(), 0, "{name} through dnsproxy -u {upstream}: {m:?}\n{}", fw.log());
            assert!(m.answers.iter().any(|a| a.rtype == 1), "{name} through dnsproxy -u {upstream}: {m:?}");
        }
        let err = s.terminate();
        assert!(serve_stat(&err, "closed_max_queries") >= 3, "{scheme}: closed by the policy: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// dnsperf -m dot, -m doh
// ---------------------------------------------------------------------------------------------

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

fn dnsperf(port: u16, mode: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let queries = write_queries(dir.path(), "q.txt", &["www.example.test A", "a.nx.test A", "www.example.test AAAA"]);
    let out = run_cmd(
        Command::new(require("dnsperf"))
            .args(["-s", "127.0.0.1", "-p", &port.to_string(), "-m", mode, "-l", "2", "-t", "5", "-c", "2"])
            .arg("-d")
            .arg(&queries)
            .args(extra),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "dnsperf -m {mode}: {}\n{}", out.stdout, out.stderr);
    out.stdout
}

fn check_dnsperf(text: &str, what: &str) {
    let sent = number_after(text, "Queries sent:");
    let completed = number_after(text, "Queries completed:");
    let lost = number_after(text, "Queries lost:");
    assert!(sent > 0, "{what}: nothing sent:\n{text}");
    assert_eq!(completed, sent, "{what}: every query completed:\n{text}");
    assert_eq!(lost, 0, "{what}: none lost:\n{text}");
    let line = text.lines().find(|l| l.contains("Response codes:")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("NOERROR") && line.contains("NXDOMAIN"), "{what}: {line}");
}

#[test]
fn dnsperf_dot_and_doh() {
    let mut s = Server::start_encrypted(&[]);
    check_dnsperf(&dnsperf(s.listener("dot").port(), "dot", &[]), "dnsperf -m dot");
    check_dnsperf(&dnsperf(s.listener("doh").port(), "doh", &[]), "dnsperf -m doh (GET)");
    check_dnsperf(&dnsperf(s.listener("doh").port(), "doh", &["-O", "doh-method=POST"]), "dnsperf -m doh POST");
    let err = s.terminate();
    assert!(serve_stat(&err, "dot_connections") >= 1, "{err}");
    assert!(serve_stat(&err, "doh_connections") >= 1, "{err}");
}

// ---------------------------------------------------------------------------------------------
// The generator against the responder, every encrypted transport
// ---------------------------------------------------------------------------------------------

#[test]
fn volley_against_responder_every_transport() {
    let s = Server::start_encrypted(&[]);
    let ca = s.ca_str();
    let cases: [(&str, &[&str], Expect); 7] = [
        ("tls", &[], Expect { alpn: Some("dot"), tls_version: "TLSv1.3", quic: false }),
        ("tls", &["--tls-version", "1.2"], Expect { alpn: Some("dot"), tls_version: "TLSv1.2", quic: false }),
        ("https", &["--doh-method", "post"], Expect { alpn: Some("h2"), tls_version: "TLSv1.3", quic: false }),
        ("https", &["--doh-method", "get"], Expect { alpn: Some("h2"), tls_version: "TLSv1.3", quic: false }),
        ("https", &["--http", "1.1"], Expect { alpn: Some("http/1.1"), tls_version: "TLSv1.3", quic: false }),
        ("h3", &["--doh-method", "get"], Expect { alpn: Some("h3"), tls_version: "TLSv1.3", quic: true }),
        ("quic", &[], Expect { alpn: Some("doq"), tls_version: "TLSv1.3", quic: true }),
    ];
    for (t, extra, expect) in &cases {
        let url = s.url(t);
        let mut args = vec![url.as_str(), "--ca", ca, "--name", "www.example.test", "-n", "400", "-c", "10"];
        args.extend_from_slice(extra);
        let r = run_volley(&args);
        check_encrypted_run(r.ok(), 400, "NOERROR", expect);
        // NXDOMAIN answers are answers, on every transport.
        let mut args = vec![url.as_str(), "--ca", ca, "--name", "x.nx.test", "-n", "200", "-c", "10"];
        args.extend_from_slice(extra);
        let r = run_volley(&args);
        check_encrypted_run(r.ok(), 200, "NXDOMAIN", expect);
    }
}
