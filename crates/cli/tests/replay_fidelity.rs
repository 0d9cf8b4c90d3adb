//! Replay fidelity: traffic captured on loopback, turned into a clients file, replayed over
//! UDP and TCP while a second capture runs; the second capture holds the same queries, each
//! client's in the same order, with the same gaps (within a tolerance).
//!
//! Clients are told apart in the replay's capture by their names (`qI.cC.replay.test`):
//! the replay sends from the generator's own sockets, not from the captured addresses.

mod common;

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, run_cmd, volley, Capture, Server};

const CLIENTS: usize = 4;
const QUERIES: usize = 8;

/// A DNS query for `name` A with `id`, no EDNS.
fn query(name: &str, id: u16) -> Vec<u8> {
    let mut m = vec![(id >> 8) as u8, id as u8, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.split('.').filter(|l| !l.is_empty()) {
        m.push(l.len() as u8);
        m.extend_from_slice(l.as_bytes());
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1]);
    m
}

/// Per client (by the `cC` label of the names): its query indices and offsets (s), in order.
fn by_client(dump: &str) -> BTreeMap<usize, Vec<(usize, f64)>> {
    let mut out: BTreeMap<usize, Vec<(usize, f64)>> = BTreeMap::new();
    for line in dump.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (offset, name) = (f[1].parse::<f64>().unwrap(), f[3]);
        let labels: Vec<&str> = name.split('.').collect();
        let q = labels[0].trim_start_matches('q').parse::<usize>().unwrap();
        let c = labels[1].trim_start_matches('c').parse::<usize>().unwrap();
        out.entry(c).or_default().push((q, offset));
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
    }
    out
}

fn pcap_dump(pcap: &Path, port: u16, clients: &Path) -> String {
    let r = run_cmd(
        Command::new(volley()).arg("pcap").arg(pcap).arg("-o").arg(clients).args(["--port", &port.to_string()]),
        Duration::from_secs(30),
    );
    assert_eq!(r.status.code(), Some(0), "volley pcap: {}", r.stderr);
    let d = run_cmd(Command::new(volley()).args(["pcap", "--dump"]).arg(clients), Duration::from_secs(30));
    assert_eq!(d.status.code(), Some(0), "volley pcap --dump: {}", d.stderr);
    d.stdout
}

/// Gaps between a client's consecutive queries, seconds.
fn gaps(v: &[(usize, f64)]) -> Vec<f64> {
    v.windows(2).map(|w| w[1].1 - w[0].1).collect()
}

#[test]
fn replay_keeps_queries_order_and_timing() {
    let port = free_port();
    let p = port.to_string();
    let _server = Server::start_with(&["--udp-port", &p, "--tcp-port", &p, "-T", "1"]);
    let dir = tempfile::tempdir().unwrap();

    // 1. The original traffic: CLIENTS sources, each with its own pace, captured.
    let original = dir.path().join("original.pcap");
    let cap = Capture::start(&original, port);
    let socks: Vec<UdpSocket> = (0..CLIENTS)
        .map(|c| {
            let s = UdpSocket::bind(format!("127.0.0.{}:0", c + 2)).unwrap();
            s.connect(("127.0.0.1", port)).unwrap();
            s
        })
        .collect();
    let start = Instant::now();
    let mut due: Vec<(Duration, usize, usize)> = Vec::new();
    for (c, _) in socks.iter().enumerate() {
        for q in 0..QUERIES {
            // Client c every 40 + 25c ms, starting 15c ms in.
            due.push((Duration::from_millis((15 * c + q * (40 + 25 * c)) as u64), c, q));
        }
    }
    due.sort();
    for (at, c, q) in &due {
        if let Some(wait) = at.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        socks[*c].send(&query(&format!("q{q}.c{c}.replay.test"), (*c * 100 + *q) as u16)).unwrap();
    }
    let _ = cap.stop();
    let clients = dir.path().join("original.clients");
    let want = by_client(&pcap_dump(&original, port, &clients));
    assert_eq!(want.len(), CLIENTS, "original capture: {want:?}");
    for v in want.values() {
        assert_eq!(v.len(), QUERIES);
    }

    // 2. Replay over UDP and over TCP, each captured, and compared with the original.
    for scheme in ["udp", "tcp"] {
        let again = dir.path().join(format!("replay-{scheme}.pcap"));
        let cap = Capture::start(&again, port);
        let results = dir.path().join(format!("replay-{scheme}.json"));
        let r = run_cmd(
            Command::new(volley())
                .args(["run", &format!("{scheme}://127.0.0.1:{port}"), "--replay"])
                .arg(&clients)
                .args(["-T", "1", "-q", "--progress", "never", "-o"])
                .arg(&results),
            Duration::from_secs(60),
        );
        assert_eq!(r.status.code(), Some(0), "{scheme} replay: {}", r.stderr);
        let _ = cap.stop();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
        assert_eq!(v["load"]["model"], "replay");
        assert_eq!(v["totals"]["answered"], (CLIENTS * QUERIES) as u64, "{scheme}: {}", v["totals"]);
        let lateness_p99 = v["send_lateness"]["p99_ns"].as_u64().unwrap();
        let got = by_client(&pcap_dump(&again, port, &dir.path().join(format!("replay-{scheme}.clients"))));
        // The probe query before the run asks for the first client's first name: drop it.
        let mut got = got;
        if let Some(v) = got.get_mut(&0) {
            if v.len() == QUERIES + 1 {
                v.remove(0);
            }
        }
        assert_eq!(got.len(), CLIENTS, "{scheme}: {got:?}");
        // Same multiset, same order per client.
        for (c, w) in &want {
            let g = &got[c];
            let order: Vec<usize> = g.iter().map(|x| x.0).collect();
            let expected: Vec<usize> = w.iter().map(|x| x.0).collect();
            assert_eq!(order, expected, "{scheme}: client {c} order");
            // Same gaps within 8 ms (loopback, a busy 2-core machine, tcpdump's timestamps). Over
            // TCP a client connects at its first query, as a real one does, so that query
            // leaves after the handshake: its gap is left out (send lateness shows it).
            let skip = usize::from(scheme == "tcp");
            for (i, (a, b)) in gaps(w).iter().zip(gaps(g)).enumerate().skip(skip) {
                assert!((a - b).abs() < 0.008, "{scheme}: client {c} gap {i}: captured {a:.4}s, replayed {b:.4}s");
            }
        }
        // Clients keep their offsets against each other (second query of each, relative to
        // client 0's: the first may wait for a connection).
        let base_w = want[&0][1].1;
        let base_g = got[&0][1].1;
        for c in want.keys() {
            let (a, b) = (want[c][1].1 - base_w, got[c][1].1 - base_g);
            assert!((a - b).abs() < 0.015, "{scheme}: client {c} start {a:.4}s vs {b:.4}s");
        }
        assert!(lateness_p99 < 50_000_000, "{scheme}: send lateness p99 {lateness_p99} ns");
    }
}
