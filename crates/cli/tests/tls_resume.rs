//! TLS session resumption and 0-RTT, observed on both sides, never assumed: the generator's
//! `connections.resumed` / `early_data_accepted` and the responder's `tls_resumed` /
//! `early_data` counters. Reconnects are forced two ways: by the generator
//! (`--conn-queries N`: a new connection every N queries) and by the server (a reset after N
//! queries, or its idle timeout).

mod common;

use common::*;

/// `volley run URL --ca CA -n N -c 10 EXTRA...` (exit 0) and the responder's stats after it.
fn run_and_stats(s: &mut Server, t: &str, n: u64, extra: &[&str]) -> (serde_json::Value, String) {
    let url = s.url(t);
    let n_s = n.to_string();
    let mut args = vec![url.as_str(), "--ca", s.ca_str(), "--name", "www.example.test", "-n", &n_s, "-c", "10"];
    args.extend_from_slice(extra);
    let r = run_volley(&args);
    let v = r.ok().clone();
    check_accounting(&v);
    assert_eq!(v["status"], "complete", "{v:#}");
    (v, s.terminate())
}

fn all_answered(v: &serde_json::Value, n: u64, what: &str) {
    assert_eq!(total(v, "answered"), n, "{what}: every query answered:\n{:#}\n{:#}", v["totals"], v["connections"]);
    assert_eq!(rcode(v, "NOERROR"), n, "{what}");
}

// ---------------------------------------------------------------------------------------------
// Reconnects by the generator: --conn-queries (every transport)
// ---------------------------------------------------------------------------------------------

/// Tickets on: a new connection every 50 queries resumes the session of an earlier one.
fn conn_queries_resume(t: &str) {
    let mut s = Server::start_encrypted(&[]);
    let (v, err) = run_and_stats(&mut s, t, 500, &["--conn-queries", "50"]);
    all_answered(&v, 500, t);
    let opened = conn_total(&v, "opened");
    assert!(opened >= 10, "{t}: 500 queries, 50 per connection:\n{:#}", v["connections"]);
    assert!(conn_map(&v, &["closed"], "client_lifetime") >= 1, "{t}:\n{:#}", v["connections"]);
    let resumed = conn_total(&v, "resumed");
    assert!(resumed > 0, "{t}: reconnects resumed:\n{:#}", v["connections"]);
    assert!(resumed < opened, "{t}: the first connection of each thread is a full handshake");
    assert!(serve_stat(&err, "tls_resumed") >= resumed, "{t}: the server saw them resumed: {err}");
}

#[test]
fn conn_queries_resume_dot() {
    conn_queries_resume("tls");
}

#[test]
fn conn_queries_resume_doh2() {
    conn_queries_resume("https");
}

#[test]
fn conn_queries_resume_doh3() {
    conn_queries_resume("h3");
}

#[test]
fn conn_queries_resume_doq() {
    conn_queries_resume("quic");
}

/// 0-RTT on both sides: the queries that open a resumed connection go as early data, the
/// server takes them, and every query is answered.
fn conn_queries_zero_rtt(t: &str) {
    let mut s = Server::start_encrypted(&["--zero-rtt"]);
    let (v, err) = run_and_stats(&mut s, t, 500, &["--conn-queries", "50", "--zero-rtt"]);
    all_answered(&v, 500, t);
    let accepted = conn_total(&v, "early_data_accepted");
    assert!(accepted > 0, "{t}: early data accepted:\n{:#}", v["connections"]);
    assert!(conn_total(&v, "early_data_offered") >= accepted, "{t}:\n{:#}", v["connections"]);
    assert!(serve_stat(&err, "early_data") >= 1, "{t}: the server took early data: {err}");
    // Per second too: the seconds' 0-RTT counts add up to the run's.
    for key in ["early_data_offered", "early_data_accepted"] {
        let rows = v["series"].as_array().cloned().unwrap_or_default();
        let per_second: u64 = rows.iter().map(|r| r["connections"][key].as_u64().unwrap_or(0)).sum();
        assert_eq!(per_second, conn_total(&v, key), "{t}: series {key}");
    }
}

#[test]
fn conn_queries_zero_rtt_dot() {
    conn_queries_zero_rtt("tls");
}

/// Issue 3: "TLS 1.3 early data for DoT/DoH".
#[test]
fn conn_queries_zero_rtt_doh2() {
    conn_queries_zero_rtt("https");
}

#[test]
fn conn_queries_zero_rtt_doh3() {
    conn_queries_zero_rtt("h3");
}

#[test]
fn conn_queries_zero_rtt_doq() {
    conn_queries_zero_rtt("quic");
}

/// 0-RTT offered but the server does not take early data: the queries are sent again after
/// the handshake and all answered.
#[test]
fn conn_queries_zero_rtt_refused_by_server_dot() {
    let mut s = Server::start_encrypted(&[]);
    let (v, err) = run_and_stats(&mut s, "tls", 500, &["--conn-queries", "50", "--zero-rtt"]);
    all_answered(&v, 500, "tls");
    assert_eq!(conn_total(&v, "early_data_accepted"), 0, "{:#}", v["connections"]);
    assert_eq!(serve_stat(&err, "early_data"), 0, "{err}");
}

/// Tickets off on the server: no reconnect resumes, and no early data is taken.
#[test]
fn conn_queries_no_tickets_no_resumption() {
    for t in ["tls", "https", "h3", "quic"] {
        let mut s = Server::start_encrypted(&["--no-tickets"]);
        let (v, err) = run_and_stats(&mut s, t, 500, &["--conn-queries", "50", "--zero-rtt"]);
        all_answered(&v, 500, t);
        assert!(conn_total(&v, "opened") >= 10, "{t}:\n{:#}", v["connections"]);
        assert_eq!(conn_total(&v, "resumed"), 0, "{t}: nothing to resume:\n{:#}", v["connections"]);
        assert_eq!(conn_total(&v, "early_data_accepted"), 0, "{t}:\n{:#}", v["connections"]);
        assert_eq!(serve_stat(&err, "tls_resumed"), 0, "{t}: {err}");
    }
}

/// Resumption off on the client: every reconnect is a full handshake though the server
/// issues tickets.
#[test]
fn conn_queries_tls_resume_off() {
    for t in ["tls", "https", "quic"] {
        let mut s = Server::start_encrypted(&[]);
        let (v, err) = run_and_stats(&mut s, t, 500, &["--conn-queries", "50", "--tls-resume", "off"]);
        all_answered(&v, 500, t);
        assert!(conn_total(&v, "opened") >= 10, "{t}:\n{:#}", v["connections"]);
        assert_eq!(conn_total(&v, "resumed"), 0, "{t}:\n{:#}", v["connections"]);
        assert_eq!(serve_stat(&err, "tls_resumed"), 0, "{t}: {err}");
    }
}

/// One query per connection (`--conn-queries 1`): every query after the first few opens a
/// resumed connection; none is lost.
#[test]
fn one_query_per_connection_dot() {
    let mut s = Server::start_encrypted(&[]);
    let (v, err) = run_and_stats(&mut s, "tls", 200, &["--conn-queries", "1"]);
    all_answered(&v, 200, "tls");
    assert!(conn_total(&v, "opened") >= 200, "{:#}", v["connections"]);
    assert!(conn_total(&v, "resumed") >= 150, "{:#}", v["connections"]);
    assert!(serve_stat(&err, "tls_resumed") >= 150, "{err}");
}

// ---------------------------------------------------------------------------------------------
// Reconnects by the server: TCP reset after N queries (DoT)
// ---------------------------------------------------------------------------------------------

#[test]
fn dot_reconnect_after_reset_resumes_with_early_data() {
    let mut s = Server::start_encrypted(&["--fault", "tcp-reset-after=50", "--zero-rtt"]);
    let (v, err) = run_and_stats(&mut s, "tls", 500, &["--zero-rtt"]);
    let c = &v["connections"];
    assert!(conn_total(&v, "opened") > 2, "reconnected:\n{c:#}");
    let resumed = conn_total(&v, "resumed");
    assert!(resumed > 0, "reconnects resumed:\n{c:#}");
    assert!(conn_total(&v, "early_data_accepted") > 0, "early data taken:\n{c:#}");
    assert!(serve_stat(&err, "tls_resumed") >= resumed, "{err}");
    assert!(serve_stat(&err, "early_data") > 0, "{err}");
    // The queries in flight at each reset fail; all the others are answered.
    assert_eq!(total(&v, "answered") + total(&v, "failed"), 500, "{:#}", v["totals"]);
    assert!(total(&v, "answered") >= 400, "{:#}", v["totals"]);
}

#[test]
fn dot_reconnect_after_reset_no_tickets() {
    let mut s = Server::start_encrypted(&["--fault", "tcp-reset-after=50", "--no-tickets"]);
    let (v, err) = run_and_stats(&mut s, "tls", 500, &["--zero-rtt"]);
    assert!(conn_total(&v, "opened") > 2, "reconnected:\n{:#}", v["connections"]);
    assert_eq!(conn_total(&v, "resumed"), 0, "{:#}", v["connections"]);
    assert_eq!(conn_total(&v, "early_data_accepted"), 0, "{:#}", v["connections"]);
    assert_eq!(serve_stat(&err, "tls_resumed"), 0, "{err}");
}

// ---------------------------------------------------------------------------------------------
// Reconnects by the server: its idle timeout (every transport)
// ---------------------------------------------------------------------------------------------

/// Three queries a second on one thread, the server closing connections idle for 100 ms:
/// the generator reconnects between queries, and with tickets on the reconnects resume.
fn idle_reconnects(t: &str, server_args: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec!["--idle-timeout", "100ms"];
    args.extend_from_slice(server_args);
    let mut s = Server::start_encrypted(&args);
    let url = s.url(t);
    let r = run_volley(&[&url, "--ca", s.ca_str(), "--name", "www.example.test", "-Q", "3", "-l", "2s", "-T", "1"]);
    let v = r.ok().clone();
    check_accounting(&v);
    assert_eq!(total(&v, "answered"), total(&v, "issued"), "{t}: every query answered:\n{:#}", v["totals"]);
    assert!(conn_total(&v, "opened") >= 3, "{t}: reconnected after idle closes:\n{:#}", v["connections"]);
    (v, s.terminate())
}

#[test]
fn idle_reconnect_resumes_dot_and_doh() {
    for t in ["tls", "https"] {
        let (v, err) = idle_reconnects(t, &[]);
        let resumed = conn_total(&v, "resumed");
        assert!(resumed > 0, "{t}: reconnects resumed:\n{:#}", v["connections"]);
        assert!(serve_stat(&err, "tls_resumed") >= resumed, "{t}: {err}");
    }
}

#[test]
fn idle_reconnect_resumes_doq_and_doh3() {
    for t in ["quic", "h3"] {
        let (v, err) = idle_reconnects(t, &[]);
        let resumed = conn_total(&v, "resumed");
        assert!(resumed > 0, "{t}: reconnects resumed:\n{:#}", v["connections"]);
        assert!(serve_stat(&err, "tls_resumed") >= resumed, "{t}: {err}");
    }
}

/// The generator's own idle timeout (`--idle-timeout`) closes and reopens connections; with
/// tickets the reopened ones resume.
#[test]
fn client_idle_timeout_reconnect_resumes_dot() {
    let mut s = Server::start_encrypted(&[]);
    let url = s.url("tls");
    let r = run_volley(&[
        &url,
        "--ca",
        s.ca_str(),
        "--name",
        "www.example.test",
        "-Q",
        "3",
        "-l",
        "2s",
        "-T",
        "1",
        "--idle-timeout",
        "100ms",
    ]);
    let v = r.ok().clone();
    check_accounting(&v);
    assert_eq!(total(&v, "answered"), total(&v, "issued"), "{:#}", v["totals"]);
    assert!(conn_map(&v, &["closed"], "client_idle") >= 1, "{:#}", v["connections"]);
    assert!(conn_total(&v, "resumed") >= 1, "{:#}", v["connections"]);
    let err = s.terminate();
    assert!(serve_stat(&err, "tls_resumed") >= 1, "{err}");
}

#[test]
fn idle_reconnect_no_tickets_no_resumption() {
    for t in ["tls", "https", "h3", "quic"] {
        let (v, err) = idle_reconnects(t, &["--no-tickets"]);
        assert_eq!(conn_total(&v, "resumed"), 0, "{t}:\n{:#}", v["connections"]);
        assert_eq!(serve_stat(&err, "tls_resumed"), 0, "{t}: {err}");
    }
}
