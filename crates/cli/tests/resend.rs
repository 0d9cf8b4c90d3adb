//! Queries a server provably did not process (its connection closed before their answer with
//! none owed, a GOAWAY, a refused stream) are sent again as often as their own timeout allows:
//! a server's polite cap on queries per connection costs no query, with volley's responder
//! (`--max-queries-per-conn`) and with dnsdist (`setMaxTCPQueriesPerConnection`). `--resend 0`
//! fails them instead, as dnsperf does; the number of tries per query is counted.

mod common;

use common::*;
use serde_json::Value;

/// Closed loop, 100 queries in flight on one connection, 3,000 queries.
fn closed_loop(url: &str, ca: Option<&str>, extra: &[&str]) -> Value {
    let mut args = vec![url, "-c", "100", "-n", "3000", "--connections", "1", "-t", "2s", "-T", "1"];
    if let Some(ca) = ca {
        args.extend(["--ca", ca]);
    }
    args.extend_from_slice(extra);
    let r = run_volley(&args);
    let v = r.ok().clone();
    check_accounting(&v);
    v
}

/// Queries sent more than once, from `totals.tries`.
fn resent(v: &Value) -> u64 {
    v["totals"]["tries"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// Every query is answered although each connection ends after 20 queries with up to 100
/// outstanding; with `--resend 0` the unprocessed ones fail.
/// `all_answered`: the server answers every query it reads (dnsdist 1.7 over DoT now and then
/// leaves the queries of a connection unanswered without closing it: they time out, the
/// server's doing; none fails).
fn polite_cap(url: &str, ca: Option<&str>, what: &str, all_answered: bool) {
    let v = closed_loop(url, ca, &[]);
    if all_answered {
        assert_eq!(total(&v, "answered"), 3000, "{what}: every query answered\n{:#}", v["totals"]);
    }
    assert_eq!(total(&v, "failed"), 0, "{what}: no query fails\n{:#}", v["totals"]);
    let again = resent(&v);
    assert!(again > 0, "{what}: queries were sent again\n{:#}", v["totals"]);
    let tries = v["totals"]["tries"].as_object().unwrap();
    assert!(tries.keys().any(|k| k != "2"), "{what}: some queries needed more than two tries: {tries:?}");
    let events: u64 = v["events"]
        .as_object()
        .map_or(0, |m| m.iter().filter(|(k, _)| k.starts_with("resent_")).filter_map(|(_, n)| n.as_u64()).sum());
    let queries: u64 = tries.values().filter_map(Value::as_u64).sum();
    assert!(queries <= 3000, "{what}: queries by tries: {tries:?}");
    // Resends counted by their cause; `tries` tells them per query (at least as many, where
    // its last place holds "that many or more").
    let sends: u64 =
        tries.iter().map(|(k, n)| (k.trim_end_matches('+').parse::<u64>().unwrap() - 1) * n.as_u64().unwrap()).sum();
    let open_ended = tries.keys().any(|k| k.ends_with('+'));
    assert!(
        events == sends || (open_ended && events > sends),
        "{what}: each resend counted once by its cause ({events} events, {sends} from tries):\n{:#}\n{tries:?}",
        v["events"]
    );

    let v = closed_loop(url, ca, &["--resend", "0"]);
    assert!(total(&v, "failed") > 0, "{what} --resend 0: unprocessed queries fail\n{:#}", v["totals"]);
    assert_eq!(resent(&v), 0, "{what} --resend 0\n{:#}", v["totals"]);
}

#[test]
fn a_servers_query_cap_costs_no_query_on_any_transport() {
    let mut s = Server::start_encrypted(&["-T", "1", "--max-queries-per-conn", "20"]);
    for t in ["tcp", "tls", "quic", "h3"] {
        polite_cap(&s.url(t), Some(s.ca_str()), t, true);
    }
    s.terminate();
}

#[test]
fn dnsdists_query_cap_costs_no_query() {
    // dnsdist sends TCP and DoT queries on to its backend over TCP, on the UDP port: unbound.
    let backend = Unbound::start(UNBOUND_DATA);
    let d = dnsdist_with(backend.addr(), "setMaxTCPQueriesPerConnection(20)");
    let ca = d.cert.cert();
    polite_cap(&format!("tcp://127.0.0.1:{}", d.port("udp")), None, "dnsdist tcp", true);
    polite_cap(&format!("tls://127.0.0.1:{}", d.port("dot")), Some(ca.to_str().unwrap()), "dnsdist dot", false);
}

#[test]
fn resend_takes_any_or_a_count() {
    let s = Server::start();
    let r = run_volley(&[&s.tcp_url(), "-n", "1", "--resend", "some"]);
    let err = assert_usage_error(&r);
    assert!(err.contains("--resend") && err.contains("any"), "{err}");
}
