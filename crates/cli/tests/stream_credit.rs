//! QUIC stream credit under queries a server never answers, and queries that never leave.
//!
//! A DoQ or DoH/3 server holds each request stream until its answer leaves; a query it drops
//! holds one until the client gives it up: the client cancels it (STOP_SENDING with
//! DOQ_REQUEST_CANCELLED or H3_REQUEST_CANCELLED), and the server frees the stream, which
//! gives the client its credit back (MAX_STREAMS). Were a dropped request held until the
//! connection closed, the client would run out of streams after `--max-streams` drops and no
//! answer would come again. And a query that waited for the transport until its timeout
//! (no stream credit, no connection) never left: it is `unsent`, not `timed_out` (the
//! server never saw it), and `sent` counts only the queries that left.

mod common;

use std::net::UdpSocket;

use common::*;
use serde_json::Value;

/// Each full second of the sending phase answered at least `share` of the busiest one: the
/// answers keep coming.
fn answers_keep_coming(v: &Value, seconds: usize, share: f64, what: &str) {
    let per_second: Vec<u64> =
        v["series"].as_array().unwrap().iter().take(seconds).map(|r| r["answered"].as_u64().unwrap()).collect();
    let most = *per_second.iter().max().unwrap();
    assert!(most > 0, "{what}: nothing answered: {per_second:?}");
    assert!(
        per_second.iter().all(|&n| n as f64 >= share * most as f64),
        "{what}: answers per second fell: {per_second:?}\n{:#}",
        v["totals"]
    );
}

/// The server saw the streams of the `timed_out` queries stopped with the cancel code of their
/// protocol, and no stream stopped with another code. The last ones' stops may race the
/// connection's close at the end of the run (a server that reads both at once sees the
/// connection closed), and the probe's, when it was not answered, may be seen too.
fn cancelled_so(stats: &str, timed_out: u64, what: &str) {
    let cancelled = serve_stat(stats, "cancelled");
    assert!(cancelled * 10 >= timed_out * 9 && cancelled <= timed_out + 1, "{what}: {timed_out} timed out: {stats}");
    assert_eq!(serve_stat(stats, "stopped"), 0, "{what}: no stream stopped with another code: {stats}");
}

/// Against a server that drops 1 query in 10 and allows 50 streams per connection, a DoQ,
/// DoH/3 or DoH/2 run of 1,000 queries (100 dropped: twice the streams) goes on answering to
/// its end, on one connection; every query the server dropped, and only those, timed out; each
/// was cancelled with its protocol's code, which the server saw; and every query left.
#[test]
fn dropped_queries_give_their_streams_back() {
    for t in ["quic", "h3", "https"] {
        let mut s = Server::start_encrypted(&["--drop", "1/10", "--max-streams", "50", "-T", "1"]);
        let r = run_volley(&[&s.url(t), "--ca", s.ca_str(), "--rate", "200", "-l", "5s", "-t", "1s", "-T", "1"]);
        let v = r.ok();
        check_accounting(v);
        let stats = s.terminate();
        answers_keep_coming(v, 5, 0.7, t);
        let (issued, sent, answered, timed_out) =
            (total(v, "issued"), total(v, "sent"), total(v, "answered"), total(v, "timed_out"));
        assert_eq!(issued, 1000, "{t}: {:#}", v["totals"]);
        assert_eq!((sent, total(v, "unsent"), total(v, "failed")), (issued, 0, 0), "{t}: {:#}", v["totals"]);
        assert_eq!(answered + timed_out, issued, "{t}: {:#}", v["totals"]);
        // The server saw every query that left, and the probe before the run; it dropped 1 in
        // 10 of them, and only those timed out.
        assert_eq!(serve_stat(&stats, "queries"), sent + 1, "{t}: {stats}");
        let (probe_answered, probe_dropped) =
            (serve_stat(&stats, "answered") - answered, serve_stat(&stats, "dropped") - timed_out);
        assert_eq!(probe_answered + probe_dropped, 1, "{t}: {stats}\n{:#}", v["totals"]);
        assert!((99..=101).contains(&timed_out), "{t}: 1 in 10 dropped: {:#}", v["totals"]);
        // Every timed-out query's stream was stopped with the cancel code, none with another.
        cancelled_so(&stats, timed_out, t);
        assert_eq!(v["connections"]["opened"].as_u64(), Some(1), "{t}: {:#}", v["connections"]);
    }
}

/// A delayed answer holds its stream only while the client waits for it: answers delayed past
/// the client's timeout are cancelled, and the server frees their streams at once (the run
/// goes on answering the others).
#[test]
fn delayed_answers_give_their_streams_back_when_cancelled() {
    for t in ["quic", "h3"] {
        let mut s = Server::start_encrypted(&["--delay", "3s:1/10", "--max-streams", "50", "-T", "1"]);
        let r = run_volley(&[&s.url(t), "--ca", s.ca_str(), "--rate", "200", "-l", "4s", "-t", "1s", "-T", "1"]);
        let v = r.ok();
        check_accounting(v);
        let stats = s.terminate();
        answers_keep_coming(v, 4, 0.7, t);
        let timed_out = total(v, "timed_out");
        assert!((79..=81).contains(&timed_out), "{t}: 1 in 10 delayed past the timeout: {:#}", v["totals"]);
        assert_eq!(total(v, "answered") + timed_out, total(v, "issued"), "{t}: {:#}", v["totals"]);
        cancelled_so(&stats, timed_out, t);
    }
}

/// Queries that wait for a connection that never comes up (a QUIC port that swallows every
/// packet: the handshake outlasts their timeout) never leave: they are unsent, for want of a
/// connection, and none is sent or timed out.
#[test]
fn queries_without_a_connection_are_unsent() {
    let hole = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    for url in [format!("quic://127.0.0.1:{port}"), format!("h3://127.0.0.1:{port}/dns-query")] {
        let r = run_volley(&[&url, "--insecure", "--rate", "20", "-l", "2s", "-t", "300ms", "-T", "1"]);
        let v = r.ok();
        check_accounting(v);
        let issued = total(v, "issued");
        assert!(issued >= 35, "{url}: {:#}", v["totals"]);
        assert_eq!(
            (total(v, "sent"), total(v, "timed_out"), total(v, "unsent")),
            (0, 0, issued),
            "{url}: {:#}",
            v["totals"]
        );
        assert_eq!(v["totals"]["unsent_reasons"]["no_connection"].as_u64(), Some(issued), "{url}: {:#}", v["totals"]);
        let warned = v["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("never left"));
        assert!(warned, "{url}: {:#}", v["warnings"]);
    }
}

/// Queries that wait for stream credit the server does not give back in time are unsent for
/// want of it: a DoQ server allowing one stream and dropping every query, 20 queries issued at
/// once (closed loop): one takes the stream and holds it until its timeout, the others' timeout
/// comes at the same moment, before they could leave; then 20 more. What left timed out, and
/// the server saw exactly those.
#[test]
fn queries_without_stream_credit_are_unsent() {
    let mut s = Server::start_encrypted(&["--drop", "1/1", "--max-streams", "1", "-T", "1"]);
    let r = run_volley(&[&s.url("quic"), "--ca", s.ca_str(), "-c", "20", "-l", "2s", "-t", "300ms", "-T", "1"]);
    let v = r.ok();
    check_accounting(v);
    let stats = s.terminate();
    let (issued, sent, unsent) = (total(v, "issued"), total(v, "sent"), total(v, "unsent"));
    assert_eq!((total(v, "answered"), total(v, "failed")), (0, 0), "{:#}", v["totals"]);
    assert_eq!(total(v, "timed_out"), sent, "what left timed out: {:#}", v["totals"]);
    assert!(sent >= 1 && unsent >= 5 * sent, "most never left: {:#}", v["totals"]);
    assert_eq!(v["totals"]["unsent_reasons"]["no_stream_credit"].as_u64(), Some(unsent), "{:#}", v["totals"]);
    assert_eq!(issued, sent + unsent, "{:#}", v["totals"]);
    // The server saw the queries that left, and the probe.
    assert_eq!(serve_stat(&stats, "queries"), sent + 1, "{stats}\n{:#}", v["totals"]);
}

/// DoH/2: until the server's SETTINGS arrive, h2 opens one stream; when they raise the limit,
/// the other queries leave at once, not when the first one is answered. Behind a link whose
/// way up takes 150 ms the first request leaves before the SETTINGS come; the server holds
/// every answer 1 s. Each query then takes the server's second and the link's trip, the first
/// as the last: had the others waited for the first stream to end (as they once did, which
/// made one query the server dropped early hold all of them until the client gave it up),
/// the queries of the first second would have taken up to twice as long.
#[test]
fn doh2_queries_leave_when_the_settings_come_not_when_the_first_stream_ends() {
    let server = Server::start_encrypted(&["--listen", "0.0.0.0", "--delay", "1s:1/1"]);
    let url = format!("https://127.0.0.1:{}/dns-query", server.listener("doh").port());
    let r = run_volley(&[
        &url,
        "--ca",
        server.ca_str(),
        "--link",
        "up:delay=150ms",
        "--link-seed",
        "1",
        "-Q",
        "60",
        "-l",
        "1500ms",
        "-t",
        "5s",
    ]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(total(v, "answered"), total(v, "issued"), "{}", r.stderr);
    let (min, max) = (v["latency"]["min_ns"].as_f64().unwrap(), v["latency"]["max_ns"].as_f64().unwrap());
    assert!(min >= 1.15e9 * 0.99, "min {min}");
    assert!(max < 1.4 * min, "the first stream held the others: latency {min} to {max} ns\n{:#}", v["totals"]);
}
