//! The load generator over DoT, DoH (HTTP/1.1, /2, /3; GET and POST) and DoQ against real
//! servers: unbound, knot-resolver, BIND 9, dnsdist and AdGuard dnsproxy, each on free
//! loopback ports with a generated certificate trusted with `--ca`. Every run checks the
//! answers (count and RCODE), the accounting equation and what the connections negotiated;
//! kdig (or q, for QUIC) checks the content of the answer the same server gives.

mod common;

use common::*;

const N: u64 = 500;

/// `volley run URL --ca CERT --name NAME -n 500 -c 10 EXTRA...`, which must exit 0.
fn run(url: &str, ca: &str, name: &str, extra: &[&str]) -> RunResult {
    let n = N.to_string();
    let mut args = vec![url, "--ca", ca, "--name", name, "-n", &n, "-c", "10"];
    args.extend_from_slice(extra);
    run_volley(&args)
}

fn dot(version: &str) -> Expect<'static> {
    let tls_version = if version == "1.2" { "TLSv1.2" } else { "TLSv1.3" };
    Expect { alpn: None, tls_version, quic: false }
}

const H2: Expect<'static> = Expect { alpn: Some("h2"), tls_version: "TLSv1.3", quic: false };
const H11: Expect<'static> = Expect { alpn: Some("http/1.1"), tls_version: "TLSv1.3", quic: false };
const H3: Expect<'static> = Expect { alpn: Some("h3"), tls_version: "TLSv1.3", quic: true };
const DOQ: Expect<'static> = Expect { alpn: Some("doq"), tls_version: "TLSv1.3", quic: true };

/// The content: kdig over the same transport gets the expected address.
fn kdig_says(peer: &Peer, mode: &str, kind: &str, name: &str, addr: &str) {
    let got = kdig_short(peer.port(kind), mode, &peer.cert.cert(), name).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.trim(), addr, "{} over kdig {mode}: {name}", peer.name);
}

// ---------------------------------------------------------------------------------------------
// unbound 1.17: DoT, DoH/2
// ---------------------------------------------------------------------------------------------

#[test]
fn unbound_dot() {
    let p = unbound_tls();
    let url = format!("tls://127.0.0.1:{}", p.port("dot"));
    let r = run(&url, &p.cert.cert_str(), "www.example.test", &[]);
    let v = r.ok();
    check_encrypted_run(v, N, "NOERROR", &dot("1.3"));
    assert_eq!(v["target"]["transport"], "tls", "{v:#}");
    // The machine's own (a VM's steal time) is not the run's.
    let own = v["warnings"].as_array().unwrap().iter().filter(|w| !w.as_str().unwrap().contains("(steal,")).count();
    assert_eq!(own, 0, "no warnings: {}", v["warnings"]);
    kdig_says(&p, "+tls", "dot", "www.example.test", "192.0.2.1");
}

#[test]
fn unbound_dot_tls12() {
    let p = unbound_tls();
    let url = format!("tls://127.0.0.1:{}", p.port("dot"));
    let r = run(&url, &p.cert.cert_str(), "www.example.test", &["--tls-version", "1.2"]);
    check_encrypted_run(r.ok(), N, "NOERROR", &dot("1.2"));
}

#[test]
fn unbound_doh2_post_and_get() {
    let p = unbound_tls();
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    for method in ["post", "get"] {
        let r = run(&url, &p.cert.cert_str(), "www.example.test", &["--doh-method", method]);
        let v = r.ok();
        check_encrypted_run(v, N, "NOERROR", &H2);
        assert_eq!(v["target"]["transport"], "https", "{v:#}");
    }
    kdig_says(&p, "+https", "doh", "www.example.test", "192.0.2.1");
    kdig_says(&p, "+https-get", "doh", "www.example.test", "192.0.2.1");
}

// ---------------------------------------------------------------------------------------------
// knot-resolver 5.6: DoT, DoH/2
// ---------------------------------------------------------------------------------------------

#[test]
fn kresd_dot() {
    let p = kresd();
    let url = format!("tls://127.0.0.1:{}", p.port("dot"));
    let r = run(&url, &p.cert.cert_str(), "www.answer.test", &[]);
    check_encrypted_run(r.ok(), N, "NOERROR", &Expect { alpn: Some("dot"), ..dot("1.3") });
    let r = run(&url, &p.cert.cert_str(), "www.answer.test", &["--tls-version", "1.2"]);
    check_encrypted_run(r.ok(), N, "NOERROR", &Expect { alpn: Some("dot"), ..dot("1.2") });
    kdig_says(&p, "+tls", "dot", "www.answer.test", "192.0.2.4");
}

#[test]
fn kresd_doh2_get() {
    let p = kresd();
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    let r = run(&url, &p.cert.cert_str(), "www.answer.test", &["--doh-method", "get"]);
    check_encrypted_run(r.ok(), N, "NOERROR", &H2);
    kdig_says(&p, "+https-get", "doh", "www.answer.test", "192.0.2.4");
}

/// POST with one request in flight: each request's HEADERS and DATA go out together.
#[test]
fn kresd_doh2_post_one_in_flight() {
    let p = kresd();
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    let n = N.to_string();
    let r = run_volley(&[
        &url,
        "--ca",
        &p.cert.cert_str(),
        "--name",
        "www.answer.test",
        "-n",
        &n,
        "-c",
        "1",
        "-T",
        "1",
        "--doh-method",
        "post",
    ]);
    check_encrypted_run(r.ok(), N, "NOERROR", &H2);
}

/// kresd refuses (RST_STREAM) a request stream that begins while another request's body is
/// still incomplete ("stream N incomplete, refusing"): a client must send each POST's HEADERS
/// and DATA back to back. dnsperf -m doh POST does; this holds volley to the same.
#[test]
fn kresd_doh2_post_concurrent() {
    let p = kresd();
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    let r = run(&url, &p.cert.cert_str(), "www.answer.test", &["--doh-method", "post"]);
    check_encrypted_run(r.ok(), N, "NOERROR", &H2);
    kdig_says(&p, "+https", "doh", "www.answer.test", "192.0.2.4");
}

// ---------------------------------------------------------------------------------------------
// BIND 9.18: DoT, DoH/2 with GET and POST
// ---------------------------------------------------------------------------------------------

#[test]
fn bind_dot() {
    let p = named();
    let url = format!("tls://127.0.0.1:{}", p.port("dot"));
    let r = run(&url, &p.cert.cert_str(), "www.example.test", &[]);
    check_encrypted_run(r.ok(), N, "NOERROR", &Expect { alpn: Some("dot"), ..dot("1.3") });
    kdig_says(&p, "+tls", "dot", "www.example.test", "192.0.2.6");
}

#[test]
fn bind_doh2_post_and_get() {
    let p = named();
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    for method in ["post", "get"] {
        let r = run(&url, &p.cert.cert_str(), "www.example.test", &["--doh-method", method]);
        check_encrypted_run(r.ok(), N, "NOERROR", &H2);
    }
    // A name the zone does not have: every answer NXDOMAIN, still answers.
    let r = run(&url, &p.cert.cert_str(), "nope.example.test", &["--doh-method", "get"]);
    check_encrypted_run(r.ok(), N, "NXDOMAIN", &H2);
    kdig_says(&p, "+https", "doh", "www.example.test", "192.0.2.6");
    kdig_says(&p, "+https-get", "doh", "www.example.test", "192.0.2.6");
}

// ---------------------------------------------------------------------------------------------
// dnsdist 1.7: DoT, DoH/2 (SpoofAction, and an unbound backend: dnsdist sends DoT and DoH
// queries on to it over TCP, on the same port as UDP)
// ---------------------------------------------------------------------------------------------

#[test]
fn dnsdist_dot() {
    let backend = Unbound::start(UNBOUND_DATA);
    let p = dnsdist(backend.addr());
    let url = format!("tls://127.0.0.1:{}", p.port("dot"));
    for name in ["spoof.test", "www.example.test"] {
        let r = run(&url, &p.cert.cert_str(), name, &[]);
        // dnsdist 1.7 loses a few DoT queries itself: now and then it closes an incoming
        // connection with queries in flight (CI once lost 2 of 500 so, as `closed`; volley
        // reconnects and goes on), and about once in 40,000 queries it reads a query and never
        // answers it, on a connection that stays open. A capture of both sides with the run's
        // SSLKEYLOGFILE showed the query decrypted on the DoT side, no answer to it there, and
        // unbound behind answering every query dnsdist passed on: the loss is dnsdist's.
        check_encrypted_run_lossy(r.ok(), N, "NOERROR", &dot("1.3"), N / 50);
    }
    kdig_says(&p, "+tls", "dot", "spoof.test", "192.0.2.5");
    kdig_says(&p, "+tls", "dot", "www.example.test", "192.0.2.1");
}

#[test]
fn dnsdist_doh2_post_and_get() {
    let backend = Unbound::start(UNBOUND_DATA);
    let p = dnsdist(backend.addr());
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    for (name, method) in [("spoof.test", "post"), ("spoof.test", "get"), ("www.example.test", "post")] {
        let r = run(&url, &p.cert.cert_str(), name, &["--doh-method", method]);
        check_encrypted_run(r.ok(), N, "NOERROR", &H2);
    }
    // Through to the backend: its NXDOMAIN comes back as an answer.
    let r = run(&url, &p.cert.cert_str(), "nope.example.test", &["--doh-method", "get"]);
    check_encrypted_run(r.ok(), N, "NXDOMAIN", &H2);
    kdig_says(&p, "+https", "doh", "spoof.test", "192.0.2.5");
}

// ---------------------------------------------------------------------------------------------
// AdGuard dnsproxy: DoQ, DoH/3, DoH/2 and DoH/1.1
// ---------------------------------------------------------------------------------------------

fn q_says(p: &Peer, server: &str, extra: &[&str]) {
    let out = q_query(server, &p.cert.cert(), "fixed.example.test", extra).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("192.0.2.7"), "q {server} {extra:?}: {out}");
}

#[test]
fn dnsproxy_doq() {
    let p = dnsproxy();
    let url = format!("quic://127.0.0.1:{}", p.port("doq"));
    let r = run(&url, &p.cert.cert_str(), "fixed.example.test", &[]);
    let v = r.ok();
    check_encrypted_run(v, N, "NOERROR", &DOQ);
    assert_eq!(v["target"]["transport"], "quic", "{v:#}");
    q_says(&p, &url, &[]);
}

#[test]
fn dnsproxy_doh3() {
    let p = dnsproxy();
    let port = p.port("doh");
    for (url, method) in [
        (format!("h3://127.0.0.1:{port}/dns-query"), "post"),
        (format!("h3://127.0.0.1:{port}/dns-query"), "get"),
        (format!("https://127.0.0.1:{port}/dns-query"), "post"),
    ] {
        let mut extra = vec!["--doh-method", method];
        if url.starts_with("https:") {
            extra.extend_from_slice(&["--http", "3"]);
        }
        let r = run(&url, &p.cert.cert_str(), "fixed.example.test", &extra);
        check_encrypted_run(r.ok(), N, "NOERROR", &H3);
    }
    q_says(&p, &format!("https://127.0.0.1:{port}/dns-query"), &["--http3"]);
}

#[test]
fn dnsproxy_doh2_and_doh11() {
    let p = dnsproxy();
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    for method in ["post", "get"] {
        let r = run(&url, &p.cert.cert_str(), "fixed.example.test", &["--doh-method", method]);
        check_encrypted_run(r.ok(), N, "NOERROR", &H2);
        let r = run(&url, &p.cert.cert_str(), "fixed.example.test", &["--doh-method", method, "--http", "1.1"]);
        check_encrypted_run(r.ok(), N, "NOERROR", &H11);
        // Pipelined: 10 in flight on 2 connections (Go's net/http answers them in order).
        let pipelined = ["--doh-method", method, "--http", "1.1", "--h1-pipeline", "5"];
        let r = run(&url, &p.cert.cert_str(), "fixed.example.test", &pipelined);
        check_encrypted_run(r.ok(), N, "NOERROR", &H11);
        assert_eq!(conn_total(r.ok(), "opened"), 2, "{:#}", r.ok()["connections"]);
    }
    kdig_says(&p, "+https", "doh", "fixed.example.test", "192.0.2.7");
    q_says(&p, &url, &["--http2"]);
}

/// dnsdist 1.7's DoH (h2o) offers h2 only: asking for HTTP/1.1 fails ALPN before the run, in
/// one line that says so.
#[test]
fn dnsdist_doh11_alpn_refused_one_line() {
    let backend = Unbound::start(UNBOUND_DATA);
    let p = dnsdist(backend.addr());
    let url = format!("https://127.0.0.1:{}/dns-query", p.port("doh"));
    let r = run(&url, &p.cert.cert_str(), "spoof.test", &["--http", "1.1"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("ALPN") && line.contains("http/1.1"), "{line}");
}

// ---------------------------------------------------------------------------------------------
// A wrong DoH path: the server's 404 stops the run before it starts, in one line.
// ---------------------------------------------------------------------------------------------

#[test]
fn wrong_doh_path_is_one_line_error() {
    let backend = Unbound::start(UNBOUND_DATA);
    let peers = [unbound_tls(), named(), dnsdist(backend.addr())];
    for p in &peers {
        let url = format!("https://127.0.0.1:{}/wrong-path", p.port("doh"));
        let r = run(&url, &p.cert.cert_str(), "www.example.test", &[]);
        let line = assert_usage_error(&r);
        assert!(line.contains("HTTP status"), "{}: {line}", p.name);
        assert!(line.contains("/wrong-path"), "{}: names the URL: {line}", p.name);
    }
}
