//! Connection lifetimes and idle timeouts, client's and server's, timed on the wire: tcpdump
//! captures the run on loopback, tshark reads each TCP connection's SYN, data and FIN times,
//! and each close must come no earlier than its policy allows and not much later (a tolerance
//! for a loaded machine). Also a server's `--max-conns` turning connections away over TCP.
//!
//! Needs root (capturing), tcpdump, tshark and ss: a missing tool fails the test
//! (scripts/install-deps.sh).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// How much later than its policy a close may come on a busy machine.
const LATE: f64 = 0.35;

/// One TCP connection in a capture: when it began (SYN), when each side last sent data, when
/// each side sent its FIN (seconds from the capture's start).
#[derive(Debug, Default, Clone)]
struct Conn {
    syn: Option<f64>,
    client_data: Option<f64>,
    server_data: Option<f64>,
    client_fin: Option<f64>,
    server_fin: Option<f64>,
}

/// The TCP connections to `server_port` in `file`, in order of their first packet.
fn connections(file: &Path, server_port: u16) -> Vec<Conn> {
    let mut order = Vec::new();
    let mut conns: BTreeMap<u64, Conn> = BTreeMap::new();
    for p in tcp_packets(file) {
        let from_server = p.src_port == server_port;
        if !conns.contains_key(&p.stream) {
            order.push(p.stream);
        }
        let c = conns.entry(p.stream).or_default();
        if p.syn && !from_server {
            c.syn.get_or_insert(p.t);
        }
        if p.len > 0 {
            *(if from_server { &mut c.server_data } else { &mut c.client_data }) = Some(p.t);
        }
        if p.fin {
            (if from_server { &mut c.server_fin } else { &mut c.client_fin }).get_or_insert(p.t);
        }
    }
    order.iter().map(|s| conns[s].clone()).collect()
}

/// Runs `volley run ARGS` against `port` under a capture; the run's results and the
/// capture's connections, the probe's (the first) left out.
fn captured(dir: &Path, port: u16, args: &[&str]) -> (Value, Vec<Conn>) {
    let file = dir.join("run.pcap");
    let cap = Capture::start(&file, port);
    let r = run_volley(args);
    let file = cap.stop();
    let v = r.ok().clone();
    check_accounting(&v);
    let mut conns = connections(&file, port);
    assert!(!conns.is_empty(), "no connection in the capture");
    conns.remove(0);
    (v, conns)
}

fn within(what: &str, got: f64, want: f64, all: &[Conn]) {
    eprintln!("{what}: {got:.4} s (policy {want} s)");
    assert!(
        got >= want - 0.005 && got <= want + LATE,
        "{what}: {got:.3} s, expected {want} s (at most {LATE} s late)\n{all:#?}"
    );
}

/// `--conn-lifetime 500ms` at 20 queries a second on one connection: each connection that
/// the policy closed lasted from its SYN to the client's FIN at least 500 ms, and not much more.
#[test]
fn client_lifetime_on_the_wire() {
    let s = Server::start_with(&["-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let url = s.tcp_url();
    let (v, conns) = captured(
        dir.path(),
        s.tcp_addr().port(),
        &[&url, "--conn-lifetime", "500ms", "-Q", "20", "-l", "3s", "--connections", "1", "-T", "1"],
    );
    let by_policy = conn_map(&v, &["closed"], "client_lifetime") as usize;
    assert!(by_policy >= 3, "{:#}", v["connections"]);
    // The last connection ended with the run; those before it by their lifetime.
    assert_eq!(conns.len(), by_policy + 1, "{conns:#?}\n{:#}", v["connections"]);
    for c in &conns[..by_policy] {
        let (syn, fin) = (c.syn.expect("SYN"), c.client_fin.expect("the client's FIN"));
        within("lifetime", fin - syn, 0.5, &conns);
    }
}

/// Client `--idle-timeout 300ms`, one query a second: each connection's FIN comes 300 ms
/// after its answer (the last data), not earlier, not much later.
#[test]
fn client_idle_timeout_on_the_wire() {
    let s = Server::start_with(&["-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let url = s.tcp_url();
    let (v, conns) =
        captured(dir.path(), s.tcp_addr().port(), &[&url, "--idle-timeout", "300ms", "-Q", "1", "-l", "3s", "-T", "1"]);
    let idle = conn_map(&v, &["closed"], "client_idle") as usize;
    assert!(idle >= 2, "{:#}", v["connections"]);
    let closed_idle: Vec<&Conn> = conns
        .iter()
        .filter(|c| c.client_fin.is_some() && c.server_fin.is_none_or(|s| s > c.client_fin.unwrap()))
        .collect();
    assert!(closed_idle.len() >= idle, "{conns:#?}");
    for c in closed_idle.iter().take(idle) {
        let (answer, fin) = (c.server_data.expect("an answer"), c.client_fin.expect("FIN"));
        within("client idle", fin - answer, 0.3, &conns);
    }
}

/// Server `--idle-timeout 300ms`, one query a second: the server's FIN comes 300 ms after the
/// connection's last query, and the client records `server_fin`.
#[test]
fn server_idle_timeout_on_the_wire() {
    let s = Server::start_with(&["-T", "1", "--idle-timeout", "300ms"]);
    let dir = tempfile::tempdir().unwrap();
    let url = s.tcp_url();
    let (v, conns) = captured(dir.path(), s.tcp_addr().port(), &[&url, "-Q", "1", "-l", "3s", "-T", "1"]);
    let by_server = conn_map(&v, &["closed"], "server_fin") as usize;
    assert!(by_server >= 2, "{:#}", v["connections"]);
    let server_closed: Vec<&Conn> =
        conns.iter().filter(|c| c.server_fin.is_some_and(|s| c.client_fin.is_none_or(|f| s <= f))).collect();
    assert_eq!(server_closed.len(), by_server, "{conns:#?}\n{:#}", v["connections"]);
    for c in server_closed {
        // The server's idle time runs from the last byte it read: the query.
        let (query, fin) = (c.client_data.expect("a query"), c.server_fin.expect("FIN"));
        within("server idle", fin - query, 0.3, &conns);
    }
    assert_eq!(total(&v, "answered"), total(&v, "issued"), "{:#}", v["totals"]);
}

/// Server `--max-conns 3`, client `--connections 5` over TCP: the server holds three (`ss`)
/// and turns the others away; the client sees those closed by the server before any answer,
/// backs off, and its queries go to the connections that work.
#[test]
fn server_max_conns_turns_tcp_connections_away() {
    let mut s = Server::start_with(&["-T", "1", "--max-conns", "3"]);
    let port = s.tcp_addr().port();
    let run = BackgroundRun::start(&[&s.tcp_url(), "--connections", "5", "-c", "10", "-l", "3s", "-T", "1"]);
    thread::sleep(Duration::from_millis(1500));
    let held: Vec<usize> = (0..5)
        .map(|_| {
            thread::sleep(Duration::from_millis(100));
            ss_established(port)
        })
        .collect();
    let v = run.finish();
    let stats = s.terminate();
    check_accounting(&v);
    assert!(held.iter().all(|&n| n <= 3) && held.contains(&3), "ss: at most three held: {held:?}");
    assert!(serve_stat(&stats, "refused_max_conns") >= 2, "{stats}");
    let by_server = conn_map(&v, &["closed"], "server_fin") + conn_map(&v, &["closed"], "server_reset");
    assert!(by_server >= 2, "the turned-away connections, closed by the server:\n{:#}", v["connections"]);
    assert!(total(&v, "answered") > 1000, "the three held connections carry the load:\n{:#}", v["totals"]);
}
