//! How a run ends. Every connection attempt has one fate: opened, failed, or in progress when
//! the run ended (`connections.in_progress`); every connection still open at the end is closed
//! by the client (`client_end`) and its bytes and packets are counted, however many there are.

mod common;

use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;

use common::*;
use serde_json::Value;

/// A target that takes connections and never answers: a TCP listener that never accepts (the
/// kernel completes the handshakes its queue holds, up to `backlog`; TLS then waits for a
/// ServerHello that never comes) and a UDP socket on the same port that never reads (QUIC
/// handshakes wait).
struct Silent {
    tcp: TcpListener,
    _udp: UdpSocket,
}

impl Silent {
    fn start(backlog: i32) -> Silent {
        for _ in 0..20 {
            let tcp = TcpListener::bind("127.0.0.1:0").expect("bind a TCP listener");
            // SAFETY: listen on a socket we own; it only sets the queue's length.
            assert_eq!(unsafe { libc::listen(tcp.as_raw_fd(), backlog) }, 0, "listen");
            if let Ok(udp) = UdpSocket::bind(("127.0.0.1", tcp.local_addr().unwrap().port())) {
                return Silent { tcp, _udp: udp };
            }
        }
        panic!("no port free for both TCP and UDP");
    }

    fn port(&self) -> u16 {
        self.tcp.local_addr().unwrap().port()
    }
}

/// `events.NAME`, 0 when absent.
fn event(v: &Value, name: &str) -> u64 {
    v["events"][name].as_u64().unwrap_or(0)
}

/// The connections open at the end of the last second of the series.
fn last_active(v: &Value) -> u64 {
    let series = v["series"].as_array().expect("series");
    series.last().and_then(|r| r["connections"]["active"].as_u64()).unwrap_or(0)
}

/// Every connection that came up was closed by the end, each once, by the client at the end
/// of the run; none was left unreported.
fn all_closed_at_the_end(what: &str, v: &Value) {
    let c = &v["connections"];
    let opened = conn_total(v, "opened");
    assert_eq!(map_sum(&c["closed"]), opened, "{what}: every connection opened is closed:\n{c:#}");
    assert_eq!(conn_map(v, &["closed"], "client_end"), opened, "{what}: closed by the run's end:\n{c:#}");
    assert_eq!(last_active(v), 0, "{what}: nothing open after the end");
    assert_eq!(event(v, "conn_end_unreported"), 0, "{what}: every end reported:\n{:#}", v["events"]);
}

#[test]
fn handshakes_pending_at_the_end_are_in_progress() {
    let s = Silent::start(128);
    let p = s.port();
    for (what, url, extra) in [
        ("tls", format!("tls://127.0.0.1:{p}"), None),
        ("https", format!("https://127.0.0.1:{p}/dns-query"), None),
        ("https 1.1", format!("https://127.0.0.1:{p}/dns-query"), Some(["--http", "1.1"])),
        ("quic", format!("quic://127.0.0.1:{p}"), None),
        ("h3", format!("h3://127.0.0.1:{p}/dns-query"), None),
    ] {
        let mut args = vec![url.as_str(), "-n", "20", "-c", "20", "-t", "300ms", "--insecure"];
        if let Some(e) = extra {
            args.extend(e);
        }
        let r = run_volley(&args);
        let v = r.ok();
        check_accounting(v);
        // No connection comes up: no query leaves (unsent, not timed out).
        assert_eq!((total(v, "unsent"), total(v, "sent")), (20, 0), "{what}: nothing leaves:\n{:#}", v["totals"]);
        assert_eq!(v["totals"]["unsent_reasons"]["no_connection"], 20, "{what}:\n{:#}", v["totals"]);
        let c = &v["connections"];
        let lanes = v["load"]["connections"].as_u64().expect("load.connections");
        assert_eq!((conn_total(v, "opened"), conn_total(v, "failed")), (0, 0), "{what}:\n{c:#}");
        assert_eq!(conn_total(v, "in_progress"), lanes, "{what}: each lane's attempt is in progress:\n{c:#}");
        assert!(r.stdout.contains(&format!("{lanes} in progress at the end")), "{what}:\n{}", r.stdout);
        all_closed_at_the_end(what, v);
    }
}

#[test]
fn thousands_of_connections_open_at_the_end_are_closed_and_counted() {
    // Connections that the peer's kernel completed and no program ever reads: at the end each
    // is closed with nothing coming back.
    let s = Silent::start(4096);
    let url = format!("tcp://127.0.0.1:{}", s.port());
    let r = run_volley(&[
        &url,
        "--clients",
        "3000",
        "--client-rate",
        "1",
        "--profile",
        "stub",
        "-T",
        "1",
        "-l",
        "1s",
        "-t",
        "300ms",
    ]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(total(v, "issued"), 3000, "one query per client:\n{:#}", v["totals"]);
    let c = &v["connections"];
    let opened = conn_total(v, "opened");
    assert!(opened > 0, "{c:#}");
    // Past the listener's queue (somaxconn) the SYNs go unanswered: in progress.
    assert_eq!(opened + conn_total(v, "in_progress"), 3000, "one attempt per client, each with a fate:\n{c:#}");
    assert_eq!(conn_total(v, "failed"), 0, "{c:#}");
    all_closed_at_the_end("tcp", v);
    // Each connection sent at least its SYN, its ACK and its query.
    let out = v["totals"]["wire"]["packets_out"].as_u64().unwrap_or(0);
    assert!(out >= 3 * opened, "every connection's packets counted: {out} for {opened}:\n{:#}", v["totals"]);
}

#[test]
fn encrypted_connections_open_at_the_end_are_closed_and_counted() {
    let s = Server::start_encrypted(&[]);
    for t in ["tls", "https", "h3", "quic"] {
        let url = s.url(t);
        let r = run_volley(&[
            &url,
            "--ca",
            s.ca_str(),
            "--clients",
            "300",
            "--client-rate",
            "2",
            "--profile",
            "forwarder",
            "-l",
            "1s",
        ]);
        let v = r.ok();
        check_accounting(v);
        let c = &v["connections"];
        assert_eq!(conn_total(v, "opened"), 300, "{t}: one connection per client:\n{c:#}");
        assert_eq!((conn_total(v, "failed"), conn_total(v, "in_progress")), (0, 0), "{t}:\n{c:#}");
        all_closed_at_the_end(t, v);
        let w = &v["totals"]["wire"];
        assert!(w["packets_out"].as_u64().unwrap_or(0) >= 3 * 300, "{t}: every connection counted:\n{w:#}");
    }
}
