//! Connection policies observed on the wire, not only in volley's counters (issue 4): the
//! client's (`--conn-queries`, `--conn-lifetime`, `--idle-timeout`, `--connections`) checked
//! against the responder's own counters (its `stats` line) and `ss`, and the server's
//! (`volley serve --max-queries-per-conn`, `--idle-timeout`, `--max-conns`) seen by the
//! client with the right "who closed" record.
//!
//! `volley run` sends one probe query on a connection of its own before the load: the
//! responder counts one connection and one answer more than the run's results.

mod common;

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// The closes of a run, `connections.closed.KIND`.
fn closed(v: &Value, kind: &str) -> u64 {
    conn_map(v, &["closed"], kind)
}

fn show(v: &Value) -> String {
    format!("totals:\n{:#}\nconnections:\n{:#}", v["totals"], v["connections"])
}

/// A complete run whose accounting balances, and whose per-second closes (by who closed and
/// how) add up to the run's.
fn complete(r: &RunResult) -> Value {
    let v = r.ok().clone();
    check_accounting(&v);
    assert_eq!(v["status"], "complete", "{v:#}");
    assert_eq!(total(&v, "in_flight"), 0, "{}", show(&v));
    let series = v["series"].as_array().cloned().unwrap_or_default();
    if let Some(closed) = v["connections"]["closed"].as_object() {
        for (how, n) in closed {
            let per_second: u64 =
                series.iter().map(|r| r["connections"]["closed_by"][how.as_str()].as_u64().unwrap_or(0)).sum();
            assert_eq!(Some(per_second), n.as_u64(), "closed {how}: the series against the run:\n{}", show(&v));
        }
        // Every handshake's time is in the second its connection opened.
        let count = |h: &Value| -> u64 {
            h["buckets"].as_array().map_or(0, |b| b.iter().map(|p| p[1].as_u64().unwrap_or(0)).sum())
        };
        for (second, run) in [
            ("handshake", "handshake_total"),
            ("handshake_tcp", "handshake_tcp"),
            ("handshake_tls", "handshake_tls"),
            ("handshake_quic", "handshake_quic"),
        ] {
            let per_second: u64 = series.iter().map(|r| count(&r["connections"][second]["histogram"])).sum();
            let total = v["connections"][run]["count"].as_u64().unwrap_or(0);
            assert_eq!(per_second, total, "{run}: the series against the run:\n{}", show(&v));
        }
        for (second, run) in
            [("early_data_offered", "early_data_offered"), ("early_data_accepted", "early_data_accepted")]
        {
            let per_second: u64 = series.iter().map(|r| r["connections"][second].as_u64().unwrap_or(0)).sum();
            assert_eq!(per_second, v["connections"][run].as_u64().unwrap_or(0), "{run}:\n{}", show(&v));
        }
    }
    v
}

// ---------------------------------------------------------------------------------------------
// Client policies
// ---------------------------------------------------------------------------------------------

/// One query per connection: connections opened equal queries answered, in volley's results
/// and in the responder's own counters, over TCP and DoT.
#[test]
fn one_query_per_connection_tcp_and_dot() {
    let mut s = Server::start_encrypted(&["-T", "1"]);
    let tcp = run_volley(&[&s.tcp_url(), "--conn-queries", "1", "-n", "200", "-c", "5", "-T", "1"]);
    let dot =
        run_volley(&[&s.url("tls"), "--ca", s.ca_str(), "--conn-queries", "1", "-n", "200", "-c", "5", "-T", "1"]);
    let stats = s.terminate();
    for (name, r, key) in [("tcp", &tcp, "tcp_connections"), ("dot", &dot, "dot_connections")] {
        let v = complete(r);
        assert_eq!(total(&v, "answered"), 200, "{name}: {}", show(&v));
        assert_eq!(conn_total(&v, "opened"), 200, "{name}: one connection per query:\n{}", show(&v));
        assert_eq!(
            closed(&v, "client_lifetime"),
            200,
            "{name}: each closed by the client after its query:\n{}",
            show(&v)
        );
        // The responder's view: one connection per query, plus the probe's.
        assert_eq!(serve_stat(&stats, key), 201, "{name}: responder's {key} (probe + 200):\n{stats}");
    }
    assert_eq!(serve_stat(&stats, "answered"), 402, "{stats}");
    assert_eq!(serve_stat(&stats, "closed_max_queries"), 0, "{stats}");
}

/// `--conn-lifetime 300ms` over a 2 s run on 5 connections: about 2 / 0.3 x 5 connections
/// (within 40 %), seen by the responder, each ended as client_lifetime but the last ones.
#[test]
fn conn_lifetime_replaces_connections() {
    let mut s = Server::start_with(&["-T", "1"]);
    let r = run_volley(&[
        &s.tcp_url(),
        "--conn-lifetime",
        "300ms",
        "-l",
        "2s",
        "-c",
        "10",
        "--connections",
        "5",
        "-T",
        "1",
    ]);
    let stats = s.terminate();
    let v = complete(&r);
    let opened = conn_total(&v, "opened");
    let server = serve_stat(&stats, "tcp_connections") - 1;
    assert_eq!(server, opened, "the responder saw the connections volley opened:\n{stats}\n{}", show(&v));
    let expect = 2.0 / 0.3 * 5.0;
    assert!(
        (server as f64) > expect * 0.6 && (server as f64) < expect * 1.4,
        "about {expect:.0} connections (±40 %), responder saw {server}:\n{}",
        show(&v)
    );
    assert_eq!(closed(&v, "client_lifetime") + closed(&v, "client_end"), opened, "{}", show(&v));
    assert!(closed(&v, "client_end") <= 5, "{}", show(&v));
    assert_eq!(total(&v, "failed"), 0, "{}", show(&v));
}

/// Client `--idle-timeout 200ms` with 2 queries per second: the connection closes between
/// queries and the next query opens a new one.
#[test]
fn client_idle_timeout_closes_between_queries() {
    let mut s = Server::start_with(&["-T", "1"]);
    let r = run_volley(&[&s.tcp_url(), "--idle-timeout", "200ms", "-Q", "2", "-l", "3s", "-T", "1"]);
    let stats = s.terminate();
    let v = complete(&r);
    assert_eq!(total(&v, "answered"), total(&v, "issued"), "{}", show(&v));
    assert!(closed(&v, "client_idle") >= 2, "closed when idle:\n{}", show(&v));
    let opened = conn_total(&v, "opened");
    assert!(opened >= 3, "reopened for the next query:\n{}", show(&v));
    assert_eq!(serve_stat(&stats, "tcp_connections") - 1, opened, "{stats}");
}

/// `--connections 7 -c 14`: exactly 7 connections established for the whole run, counted
/// by `ss` on the responder's port.
#[test]
fn fixed_pool_holds_exact_connections_on_the_wire() {
    let s = Server::start_with(&["-T", "1"]);
    let port = s.tcp_addr().port();
    let run = BackgroundRun::start(&[&s.tcp_url(), "--connections", "7", "-c", "14", "-l", "3s", "-T", "1"]);
    thread::sleep(Duration::from_millis(1200));
    let samples: Vec<usize> = (0..5)
        .map(|_| {
            thread::sleep(Duration::from_millis(150));
            ss_established(port)
        })
        .collect();
    let v = run.finish();
    check_accounting(&v);
    assert_eq!(samples, vec![7; 5], "ss: established connections to :{port} during the run");
    assert_eq!(conn_total(&v, "opened"), 7, "{}", show(&v));
}

/// `--bind 127.77.1.0/29 --connections 6`: the six sockets or connections leave from the six
/// usable addresses of the range, one each, as the kernel lists them (`ss src RANGE`), over
/// TCP, UDP and QUIC (DoQ); the answers all come back.
#[test]
fn bind_spreads_sockets_over_source_addresses() {
    let s = Server::start_encrypted(&["-T", "1"]);
    // Ranges no other test or bench uses (127.0.1.0/24 is the docs' example).
    let want: Vec<String> = (1..=6).map(|i| format!("127.77.1.{i}")).collect();
    for (i, url) in [s.tcp_url(), s.udp_url(), s.url("quic")].iter().enumerate() {
        // A range of its own per transport, so that sockets of the run before cannot count.
        let range = format!("127.77.{}.0/29", 1 + i);
        let want: Vec<String> = want.iter().map(|a| a.replace("127.77.1.", &format!("127.77.{}.", 1 + i))).collect();
        let run = BackgroundRun::start(&[
            url,
            "--ca",
            s.ca_str(),
            "--bind",
            &range,
            "--connections",
            "6",
            "-T",
            "1",
            "-Q",
            "300",
            "-l",
            "3s",
        ]);
        thread::sleep(Duration::from_millis(1500));
        let seen = ss_sources(&range);
        let v = run.finish();
        check_accounting(&v);
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), want, "{url}: source addresses of the sockets");
        assert_eq!(total(&v, "answered"), total(&v, "issued"), "{url}: {}", show(&v));
    }
}

/// `--bind` with an address this machine does not have: one usage error before the run.
#[test]
fn bind_to_a_foreign_address_is_a_usage_error() {
    let s = Server::start();
    let r = run_volley(&[&s.tcp_url(), "--bind", "192.0.2.1", "-n", "5"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("cannot bind source address 192.0.2.1"), "{}", r.stderr);
    assert!(r.json.is_none(), "no results after a usage error");
}

/// `--conn-rate 40` with one query per connection: connections open at most 40 per second
/// over the run, whatever the load asks for (the responder counts them too).
#[test]
fn conn_rate_caps_new_connections() {
    let mut s = Server::start_with(&["-T", "1"]);
    let r = run_volley(&[&s.tcp_url(), "--conn-queries", "1", "--conn-rate", "40", "-c", "20", "-l", "2s", "-t", "1s"]);
    let stats = s.terminate();
    let v = r.ok().clone();
    check_accounting(&v);
    let opened = conn_total(&v, "opened") + conn_total(&v, "failed");
    // The run's first connections open in its set-up, before its clock: under the cap too.
    let secs = v["elapsed_s"].as_f64().unwrap_or_else(|| panic!("elapsed_s:\n{v:#}"))
        + v["setup_s"].as_f64().unwrap_or_else(|| panic!("setup_s:\n{v:#}"));
    // Slots are even: at most one at the start plus 40 per second after it.
    assert!(opened as f64 <= 40.0 * secs + 1.0, "{opened} connections in {secs:.2}s:\n{}", show(&v));
    assert!(opened >= 20, "connections kept opening under the cap:\n{}", show(&v));
    assert_eq!(serve_stat(&stats, "tcp_connections") - 1, conn_total(&v, "opened"), "{stats}");
    // Queries waited for their connection: some timed out rather than being sent at once.
    assert!(total(&v, "answered") <= opened, "{}", show(&v));
}

/// `--conn-rate` over DoQ with many connections: each lane makes its socket and endpoint once
/// its slot has come, so the set-up opens every connection at the cap's pace, and a server that
/// takes few handshakes at once refuses none. (When each lane made them as it started, the
/// thread spent its first second on 1,500 of them while the slots passed, then connected all
/// those lanes at once: a burst of hundreds of handshakes, most refused.)
#[test]
fn conn_rate_paces_quic_set_up() {
    let mut s = Server::start_encrypted(&["-T", "1", "--max-handshakes", "100"]);
    let r = run_volley(&[
        &s.url("quic"),
        "--ca",
        s.ca_str(),
        "--connections",
        "1500",
        "-c",
        "100",
        "--conn-rate",
        "500",
        "-n",
        "1500",
        "-T",
        "1",
        "-t",
        "5s",
    ]);
    let stats = s.terminate();
    let v = complete(&r);
    check_accounting(&v);
    assert_eq!(serve_stat(&stats, "refused_handshakes"), 0, "{stats}\n{}", show(&v));
    assert_eq!(conn_total(&v, "opened"), 1500, "{}", show(&v));
    assert_eq!(conn_total(&v, "failed"), 0, "{}", show(&v));
    assert_eq!(total(&v, "answered"), 1500, "{}", show(&v));
}

/// Queries that leave late because the cap lets their connections open only later: the
/// warning names the cap, not the generator's threads.
#[test]
fn conn_rate_named_when_it_holds_queries_back() {
    let s = Server::start_with(&["-T", "1"]);
    let r = run_volley(&[&s.tcp_url(), "--conn-queries", "1", "--conn-rate", "50", "--rate", "200", "-l", "1s"]);
    let v = r.ok();
    check_accounting(v);
    let warnings: Vec<&str> = v["warnings"].as_array().expect("warnings").iter().filter_map(|w| w.as_str()).collect();
    let late = warnings.iter().find(|w| w.contains("send lateness")).unwrap_or_else(|| panic!("{warnings:?}"));
    assert!(late.contains("held back by the cap on new connections (--conn-rate 50)"), "{late}");
    assert!(!late.contains("-T"), "not the threads: {late}");
}

// ---------------------------------------------------------------------------------------------
// Server policies, seen by the client
// ---------------------------------------------------------------------------------------------

/// `volley run -n 500 -c 1` against `--max-queries-per-conn 50`: about 10 connections, each
/// ended by the server as `close`, the client reconnecting. A query sent as the server closed
/// is sent again on the next connection; where a transport may still fail it, only with one of
/// `error_kinds` (none: no query fails), at most one per connection.
fn max_queries_seen_as(url_kind: &str, close: &[&str], error_kinds: &[&str]) {
    let mut s = Server::start_encrypted(&["-T", "1", "--max-queries-per-conn", "50"]);
    let r = run_volley(&[&s.url(url_kind), "--ca", s.ca_str(), "-n", "500", "-c", "1", "-T", "1"]);
    let stats = s.terminate();
    let v = complete(&r);
    let opened = conn_total(&v, "opened");
    let failed = total(&v, "failed");
    let by_server: u64 = close.iter().map(|k| closed(&v, k)).sum();
    assert!((9..=11).contains(&by_server), "{url_kind}: about 10 closes as {close:?}:\n{}", show(&v));
    assert!(failed <= opened, "{url_kind}: at most one failure per connection:\n{}", show(&v));
    let known: u64 = error_kinds.iter().map(|k| error_count(&v, k)).sum();
    assert_eq!(known, failed, "{url_kind}: failures are {error_kinds:?}:\n{}", show(&v));
    assert_eq!(total(&v, "answered") + failed, 500, "{}", show(&v));
    let policy = serve_stat(&stats, "closed_max_queries");
    assert!((9..=12).contains(&policy), "{url_kind}: the responder's closes by policy:\n{stats}");
}

#[test]
fn server_max_queries_tcp_is_server_fin() {
    let mut s = Server::start_with(&["-T", "1", "--max-queries-per-conn", "50"]);
    let r = run_volley(&[&s.tcp_url(), "-n", "500", "-c", "1", "-T", "1"]);
    let stats = s.terminate();
    let v = complete(&r);
    let opened = conn_total(&v, "opened");
    assert!((9..=11).contains(&closed(&v, "server_fin")), "about 10 server_fin:\n{}", show(&v));
    assert_eq!(closed(&v, "server_reset"), 0, "a FIN, never a reset:\n{}", show(&v));
    assert_eq!(total(&v, "answered"), 500, "a query the close left unanswered is sent again:\n{}", show(&v));
    assert_eq!(serve_stat(&stats, "tcp_connections") - 1, opened, "{stats}");
    // Every query answered: ten connections of 50.
    assert_eq!(serve_stat(&stats, "closed_max_queries"), 10, "{stats}");
}

#[test]
fn server_max_queries_dot_is_server_fin() {
    max_queries_seen_as("tls", &["server_fin"], &[]);
}

/// HTTP/2: the server's GOAWAY must be recorded as `server_goaway`.
#[test]
fn server_max_queries_doh2_is_server_goaway() {
    max_queries_seen_as("https", &["server_goaway"], &[]);
}

/// 20 queries at a time on one connection against `--max-queries-per-conn 50`: the queries
/// pipelined after the 50th, which the server never reads, are sent again on the next
/// connection (RFC 7766 section 6.2.1.1; event `resent_closed`), so every query is answered;
/// over HTTP/2 the server's GOAWAY is graceful (the requests the client sent before it saw
/// it are answered), and over HTTP/1.1 one request at a time the 50th response says
/// `connection: close` before another is sent: nothing to send again.
#[test]
fn server_closes_resend_the_unanswered() {
    let mut s = Server::start_encrypted(&["-T", "1", "--max-queries-per-conn", "50"]);
    let ca = s.ca_str().to_string();
    let cases: [(&str, String, &[&str], &str, bool); 5] = [
        ("tcp", s.tcp_url(), &[], "server_fin", true),
        ("dot", s.url("tls"), &[], "server_fin", true),
        ("doh1.1 pipelined", s.url("https"), &["--http", "1.1", "--h1-pipeline", "8"], "server_fin", true),
        ("doh1.1", s.url("https"), &["--http", "1.1"], "server_fin", false),
        ("doh2", s.url("https"), &[], "server_goaway", false),
    ];
    let mut by_server = 0;
    for (name, url, extra, close, resends) in cases {
        let mut args = vec![url.as_str(), "--ca", &ca, "-n", "2000", "-c", "20", "--connections", "1", "-T", "1"];
        args.extend_from_slice(extra);
        let v = complete(&run_volley(&args));
        assert_eq!(total(&v, "answered"), 2000, "{name}: every query answered:\n{}", show(&v));
        let resent = v["events"]["resent_closed"].as_u64().unwrap_or(0);
        assert_eq!(resent > 0, resends, "{name}: resent_closed {resent}:\n{:#}", v["events"]);
        let closes = closed(&v, close);
        assert!(closes >= 30, "{name}: the server's closes recorded as {close}:\n{}", show(&v));
        assert_eq!(closed(&v, "error") + closed(&v, "server_reset"), 0, "{name}: {}", show(&v));
        by_server += closes;
    }
    let stats = s.terminate();
    assert!(serve_stat(&stats, "closed_max_queries") >= by_server, "{stats}");
}

/// QUIC against `--max-queries-per-conn 50`, 20 queries in flight on one connection: every
/// query is answered. The server closes a connection only once the client has acknowledged
/// every answer it took, and the client sends again, on its next connection, the queries the
/// server did not take (DoQ: the streams after the 50th, never read; HTTP/3: those at or
/// beyond the GOAWAY's stream ID, refused unprocessed), each once: the responder answered
/// every query exactly once, plus the probe's. `close`: how the client records the server's
/// closes; `code`: the CONNECTION_CLOSE code the server's closes carry (event
/// `server_quic_close_CODE`).
fn max_queries_quic(url_kind: &str, close: &str, code: &str) {
    let mut s = Server::start_encrypted(&["-T", "1", "--max-queries-per-conn", "50"]);
    let r = run_volley(&[&s.url(url_kind), "--ca", s.ca_str(), "-n", "500", "-c", "20", "-T", "1"]);
    let stats = s.terminate();
    let v = complete(&r);
    let events = &v["events"];
    let show = || format!("{}\nevents:\n{events:#}\n{stats}", show(&v));
    assert_eq!(total(&v, "answered"), 500, "{url_kind}: every query answered:\n{}", show());
    assert!((9..=11).contains(&closed(&v, close)), "{url_kind}: about 10 closes as {close}:\n{}", show());
    assert_eq!(serve_stat(&stats, "answered"), 501, "{url_kind}: each query answered once:\n{}", show());
    assert!((9..=11).contains(&serve_stat(&stats, "closed_max_queries")), "{url_kind}: {}", show());
    let codes: Vec<(&String, &Value)> = events
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| k.starts_with("server_quic_close_")).collect())
        .unwrap_or_default();
    let want = format!("server_quic_close_{code}");
    assert!(codes.iter().all(|(k, _)| **k == want), "{url_kind}: the server closes with {code} only:\n{}", show());
    if close == "server_quic_close" {
        assert_eq!(events[&want].as_u64(), Some(closed(&v, close)), "{url_kind}: each close's code:\n{}", show());
    }
}

/// DoQ: CONNECTION_CLOSE (DOQ_NO_ERROR) is `server_quic_close`, with event
/// `server_quic_close_DOQ_NO_ERROR`; the queries sent on streams after the 50th are sent again.
#[test]
fn server_max_queries_doq_is_server_quic_close() {
    max_queries_quic("quic", "server_quic_close", "DOQ_NO_ERROR");
}

/// HTTP/3: GOAWAY, then CONNECTION_CLOSE (H3_NO_ERROR) once the responses are acknowledged;
/// the client has seen the GOAWAY first (`server_goaway`), and closes itself once its requests
/// are answered unless the server's close comes first.
#[test]
fn server_max_queries_doh3_is_server_goaway() {
    max_queries_quic("h3", "server_goaway", "H3_NO_ERROR");
}

/// Server `--idle-timeout 300ms`, one query a second: the server closes each idle
/// connection, seen as `server_fin` over TCP and `idle_timeout` over QUIC.
#[test]
fn server_idle_timeout_seen_by_the_client() {
    let mut s = Server::start_encrypted(&["-T", "1", "--idle-timeout", "300ms"]);
    let tcp = run_volley(&[&s.tcp_url(), "--rate", "1", "-l", "3s", "-T", "1"]);
    let doq = run_volley(&[&s.url("quic"), "--ca", s.ca_str(), "--rate", "1", "-l", "3s", "-T", "1"]);
    let stats = s.terminate();
    for (name, r, kind) in [("tcp", &tcp, "server_fin"), ("doq", &doq, "idle_timeout")] {
        let v = complete(r);
        assert_eq!(total(&v, "answered"), total(&v, "issued"), "{name}: {}", show(&v));
        assert!(closed(&v, kind) >= 2, "{name}: idle connections closed by the server as {kind}:\n{}", show(&v));
        assert_eq!(closed(&v, "client_idle") + closed(&v, "client_lifetime"), 0, "{name}: {}", show(&v));
    }
    assert!(serve_stat(&stats, "closed_idle") >= 4, "{stats}");
}

/// `--max-conns 3`: three connections are served (exactly three on the wire); with five
/// asked for, the others are turned away (TCP: closed at accept; QUIC: CONNECTION_REFUSED,
/// a failed connection for the client, with event `server_quic_close_CONNECTION_REFUSED`),
/// unless one of the three has been idle long enough to give its place.
#[test]
fn server_max_conns() {
    let mut s = Server::start_encrypted(&["-T", "2", "--max-conns", "3"]);
    let port = s.tcp_addr().port();
    let run = BackgroundRun::start(&[&s.tcp_url(), "--connections", "3", "-c", "6", "-l", "2s", "-T", "1"]);
    thread::sleep(Duration::from_millis(1000));
    let on_wire = ss_established(port);
    let v = run.finish();
    check_accounting(&v);
    assert_eq!(on_wire, 3, "ss: established connections to :{port}");
    assert_eq!(total(&v, "failed"), 0, "three connections fit:\n{}", show(&v));

    let r = run_volley(&[&s.url("quic"), "--ca", s.ca_str(), "--connections", "5", "-c", "10", "-l", "1s", "-T", "1"]);
    let stats = s.terminate();
    let v = complete(&r);
    assert!(total(&v, "answered") > 0, "{}", show(&v));
    assert!(conn_total(&v, "failed") >= 2, "refused connections fail:\n{}", show(&v));
    let refused = conn_map(&v, &["errors"], "quic_closed");
    assert!(refused >= 2, "{}", show(&v));
    // Each refusal is recorded with its code.
    let code = v["events"]["server_quic_close_CONNECTION_REFUSED"].as_u64();
    assert_eq!(code, Some(refused), "{}\nevents:\n{:#}", show(&v), v["events"]);
    assert!(serve_stat(&stats, "refused_max_conns") >= 2, "{stats}");
    // A connection the client held idle 200 ms (while the others it asked for were turned
    // away) gave its place to one of them: closed with DOQ_NO_ERROR, one more served.
    let evicted = v["events"]["server_quic_close_DOQ_NO_ERROR"].as_u64().unwrap_or(0);
    assert_eq!(
        serve_stat(&stats, "doq_connections"),
        3 + 1 + evicted,
        "three held, the probe's, the evicted ones' successors:\n{stats}"
    );
}

/// At `--max-conns` a new connection takes the place of the longest idle one, not the other
/// way round (TCP, DoT, DoH): two idle connections and a client's fill a cap of 3; five more
/// connections come while the client asks. The idle ones (200 ms and more; over DoT and DoH
/// they never began their handshake) go first, each closed as a newcomer takes its place,
/// newcomers not yet idle that long are turned away, and the client's connection, which
/// carries queries, keeps its place: every query answered, nothing closed by the server.
/// (Turning the newcomer away instead let idle connections that reconnect at once starve a
/// client: docs/reliability.md.)
#[test]
fn max_conns_makes_room_by_closing_the_longest_idle() {
    use std::io::Read;
    for (transport, listener) in [("tcp", "tcp"), ("tls", "dot"), ("https", "doh")] {
        let mut s = Server::start_encrypted(&["-T", "1", "--max-conns", "3"]);
        let addr = s.listener(listener);
        let idle: Vec<std::net::TcpStream> = (0..2).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        thread::sleep(Duration::from_millis(300));
        let url = s.url(transport);
        let run =
            BackgroundRun::start(&[&url, "--ca", s.ca_str(), "--connections", "1", "-Q", "200", "-l", "3s", "-T", "1"]);
        thread::sleep(Duration::from_millis(1000));
        let newcomers: Vec<std::net::TcpStream> = (0..5)
            .map(|_| {
                let c = std::net::TcpStream::connect(addr).unwrap();
                thread::sleep(Duration::from_millis(20));
                c
            })
            .collect();
        let v = run.finish();
        let stats = s.terminate();
        check_accounting(&v);
        // Closed by the server: end of stream (or a reset), not a read that times out.
        let ended = |c: &std::net::TcpStream| {
            c.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            match (&*c).read(&mut [0u8; 1]) {
                Ok(0) => true,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                Ok(_) => false,
            }
        };
        let closed_idle = idle.iter().filter(|c| ended(c)).count();
        assert_eq!(closed_idle, 2, "{transport}: both idle connections closed to make room:\n{stats}");
        let evicted = serve_stat(&stats, "evicted_idle");
        assert!(evicted >= 2, "{transport}: {stats}");
        let refused = serve_stat(&stats, "refused_max_conns");
        assert_eq!(
            evicted + refused,
            5,
            "{transport}: each newcomer took an idle one's place or was turned away:\n{stats}"
        );
        drop(newcomers);
        assert_eq!(conn_total(&v, "failed"), 0, "{transport}: {}", show(&v));
        let by_server = closed(&v, "server_fin") + closed(&v, "server_reset");
        assert_eq!(by_server, 0, "{transport}: the client's connection kept its place:\n{}", show(&v));
        assert_eq!(total(&v, "answered"), total(&v, "issued"), "{transport}: {}", show(&v));
    }
}

/// The same room over QUIC (DoQ, DoH/3): two connections of a run at one query a second
/// (idle most of the time) and a client's fill a cap of 3; while the client asks, a third
/// run opens three more connections. They take the idle ones' places: those are closed with
/// the application's NO_ERROR (event `server_quic_close_DOQ_NO_ERROR`, `..._H3_NO_ERROR`),
/// counted as `evicted_idle`, and their run goes on; the client's connection, whose streams
/// keep it busy, keeps its place: every query answered, nothing closed by the server.
#[test]
fn max_conns_makes_room_over_quic_by_closing_the_longest_idle() {
    for (transport, no_error) in [("quic", "DOQ_NO_ERROR"), ("h3", "H3_NO_ERROR")] {
        let mut s = Server::start_encrypted(&["-T", "1", "--max-conns", "3"]);
        let url = s.url(transport);
        let common = ["--ca", s.ca_str(), "-T", "1"];
        let idle =
            BackgroundRun::start(&[&[url.as_str(), "--connections", "2", "-Q", "1", "-l", "4s"], &common[..]].concat());
        thread::sleep(Duration::from_millis(700));
        let client = BackgroundRun::start(
            &[&[url.as_str(), "--connections", "1", "-Q", "200", "-l", "3s"], &common[..]].concat(),
        );
        thread::sleep(Duration::from_millis(1000));
        let newcomers =
            BackgroundRun::start(&[&[url.as_str(), "--connections", "3", "-Q", "3", "-l", "1s"], &common[..]].concat());
        let (c, i, n) = (client.finish(), idle.finish(), newcomers.finish());
        let stats = s.terminate();
        for v in [&c, &i, &n] {
            check_accounting(v);
        }
        assert!(serve_stat(&stats, "evicted_idle") >= 2, "{transport}: {stats}");
        let closes = |v: &Value| v["events"][format!("server_quic_close_{no_error}")].as_u64().unwrap_or(0);
        assert!(
            closes(&i) >= 1,
            "{transport}: the idle run's connections closed to make room:\n{}\n{:#}",
            show(&i),
            i["events"]
        );
        assert_eq!(
            closes(&c),
            0,
            "{transport}: the client's connection kept its place:\n{}\n{:#}",
            show(&c),
            c["events"]
        );
        assert_eq!(conn_total(&c, "failed"), 0, "{transport}: {}", show(&c));
        assert_eq!(total(&c, "answered"), total(&c, "issued"), "{transport}: {}", show(&c));
    }
}

/// `--max-streams 2` (SETTINGS_MAX_CONCURRENT_STREAMS 2): the HTTP/2 client opens no more
/// streams than the server allows, from the start of each connection (it opens one stream
/// until the server's SETTINGS arrive): 50 queries at once over 40 new connections of 10
/// queries each, and the server refuses none (a refused stream would be resent, and counted as
/// event `resent_refused_stream`).
#[test]
fn server_max_streams_doh2_is_honoured() {
    let mut s = Server::start_encrypted(&["-T", "1", "--max-streams", "2"]);
    let r =
        run_volley(&[&s.url("https"), "--ca", s.ca_str(), "-n", "400", "-c", "50", "--conn-queries", "10", "-T", "1"]);
    let stats = s.terminate();
    let v = complete(&r);
    assert_eq!(total(&v, "answered"), 400, "every query answered:\n{}", show(&v));
    assert_eq!(v["events"]["resent_refused_stream"], Value::Null, "no stream refused:\n{:#}", v["events"]);
    assert!(conn_total(&v, "opened") >= 40, "{}", show(&v));
    assert_eq!(serve_stat(&stats, "answered"), 401, "{stats}");
}

/// 0-RTT connections a server turns away (`--max-conns`) are usable before their handshake
/// ends: each such attempt is one failed connection, never a close of a connection that was
/// not opened. Closes never outnumber connections opened (DoQ, DoH/3).
#[test]
fn refused_zero_rtt_connections_fail_once() {
    let mut s = Server::start_encrypted(&["-T", "1", "--max-conns", "3", "--zero-rtt"]);
    for t in ["quic", "h3"] {
        let r = run_volley(&[
            &s.url(t),
            "--ca",
            s.ca_str(),
            "--connections",
            "5",
            "-c",
            "10",
            "-l",
            "2s",
            "-T",
            "1",
            "--zero-rtt",
        ]);
        let v = complete(&r);
        let closed: u64 =
            v["connections"]["closed"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
        assert_eq!(
            closed,
            conn_total(&v, "opened"),
            "{t}: every connection opened is closed once, no other:\n{}",
            show(&v)
        );
        assert!(conn_total(&v, "failed") >= 2, "{t}: the turned-away attempts failed:\n{}", show(&v));
    }
    let stats = s.terminate();
    assert!(serve_stat(&stats, "refused_max_conns") >= 4, "{stats}");
}

/// An open connection costs the generator one descriptor, whoever owns its stream (TCP and
/// DoT: volley's own loop; DoH: hyper or h2, which hand the socket back to the byte counters
/// when they drop it): 60 connections held open per transport, and once `ss` sees them all
/// established, no socket in the run's worker is held by two descriptors. (A duplicate per
/// connection for the counters had halved the DoH connections one process can hold under its
/// open-files limit.) The sockets are told apart by their inodes, so a connection being opened
/// again at the moment of the count (a busy machine) does not read as a duplicate.
#[test]
fn one_descriptor_per_open_connection() {
    let s = Server::start_encrypted(&["-T", "1"]);
    let n = 60;
    let cases = [
        ("tcp", s.tcp_url(), s.tcp_addr().port(), vec![]),
        ("dot", s.url("tls"), s.listener("dot").port(), vec!["--ca", s.ca_str()]),
        ("doh2", s.url("https"), s.listener("doh").port(), vec!["--ca", s.ca_str(), "--http", "2"]),
        ("doh1.1", s.url("https"), s.listener("doh").port(), vec!["--ca", s.ca_str(), "--http", "1.1"]),
    ];
    for (name, url, port, extra) in cases {
        let conns = n.to_string();
        let mut args = vec![url.as_str(), "--connections", &conns, "--rate", "120", "-l", "3s", "-T", "1"];
        args.extend_from_slice(&extra);
        let run = BackgroundRun::start(&args);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while ss_established(port) < n && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(100));
        }
        let on_wire = ss_established(port);
        let (descriptors, sockets) = worker_sockets(run.pid());
        let v = run.finish();
        check_accounting(&v);
        assert!(on_wire >= n, "{name}: {on_wire} connections established to :{port}, {n} asked for");
        assert!(sockets >= n, "{name}: {sockets} sockets in the worker with {on_wire} connections");
        assert_eq!(descriptors, sockets, "{name}: {descriptors} descriptors for {sockets} sockets");
    }
}

/// The socket descriptors open in the table of the run's worker thread (`volley-worker-0`,
/// which has a table of its own: `/proc/PID/task/TID/fd`), and the distinct sockets (inodes)
/// they name.
fn worker_sockets(pid: u32) -> (usize, usize) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the run's threads");
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == "volley-worker-0" {
            let links: Vec<String> = std::fs::read_dir(t.path().join("fd"))
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| std::fs::read_link(e.path()).ok())
                        .map(|l| l.to_string_lossy().into_owned())
                        .filter(|l| l.starts_with("socket:["))
                        .collect()
                })
                .unwrap_or_default();
            let distinct: std::collections::HashSet<&String> = links.iter().collect();
            return (links.len(), distinct.len());
        }
    }
    panic!("no thread volley-worker-0 in process {pid}")
}

/// Each generator worker and each responder I/O thread has a descriptor table of its own, so
/// the open-files limit bounds the connections of each thread, not of the process: under a
/// limit of 600 files in both processes, four workers hold 1,000 TCP connections open at once
/// to four I/O threads (one table could not), every one counted on the wire by `ss` and every
/// query answered.
#[test]
fn workers_hold_more_connections_than_one_descriptor_table() {
    let mut s = Server::start_with_open_files(600, &["-T", "4"]);
    let prlimit = require("prlimit");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let n = 1000;
    let mut cmd = Command::new(prlimit);
    cmd.arg("--nofile=600:600").arg(volley()).arg("run").arg(s.tcp_url());
    cmd.args(["--connections", "1000", "--rate", "1000", "-l", "4s", "-T", "4", "--progress", "never", "-q", "-o"]);
    let child = cmd.arg(&out).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    // Every slot gets its first query within the first second; they stay open to the end.
    let port = s.tcp_addr().port();
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    let mut most = 0;
    while most < n && std::time::Instant::now() < deadline {
        most = most.max(ss_established(port));
        thread::sleep(Duration::from_millis(200));
    }
    let done = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stderr}");
    let v = read_results(&out).expect("results");
    check_accounting(&v);
    assert!(most >= n, "{most} connections established at once, {n} asked for\n{stderr}");
    assert_eq!(v["connections"]["opened"].as_u64(), Some(n as u64), "{:#}", v["connections"]);
    assert_eq!(total(&v, "answered"), total(&v, "issued"), "{:#}", v["totals"]);
    assert_eq!(error_count(&v, "local_limit"), 0);
    // The responder accepted them all (and the run's check query before).
    let stats = s.terminate();
    assert_eq!(serve_stat(&stats, "tcp_connections") - 1, n as u64, "{stats}");
}
