//! QUIC connections leave traces: `--qlog DIR` on `volley run` and `volley serve` writes one
//! qlog file (JSON-SEQ) per DoQ and DoH/3 connection, and the results name the directory; and
//! the keys the run writes to SSLKEYLOGFILE decrypt a capture of DoQ and DoH/3 in tshark.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{require, run_cmd, Capture, Server, CAPTURE_WAIT as WAIT};
use serde_json::Value;

fn wait_for_ca(ca: &Path) {
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(ca).map(|t| t.contains("BEGIN CERTIFICATE")).unwrap_or(false) {
        assert!(Instant::now() < deadline, "volley serve wrote no CA to {}", ca.display());
        thread::sleep(Duration::from_millis(20));
    }
}

/// One trace: its header record and the count of (event name, kind) of its events, the kind
/// being a packet's type, a stream's new state, or where data moved from.
fn read_trace(path: &Path) -> (Value, BTreeMap<(String, String), u64>) {
    let text = std::fs::read_to_string(path).unwrap();
    // JSON-SEQ (RFC 7464): each record starts with RS (0x1e).
    assert!(text.starts_with('\u{1e}'), "{}: not JSON-SEQ", path.display());
    let mut records = text.split('\u{1e}').filter(|r| !r.trim().is_empty());
    let header: Value = serde_json::from_str(records.next().expect("a header record")).unwrap();
    let mut events = BTreeMap::new();
    for r in records {
        let e: Value = serde_json::from_str(r)
            .unwrap_or_else(|err| panic!("{}: a record is not JSON: {err}: {r}", path.display()));
        // Every event has its time (ms after the reference time) and its name.
        let time = e["time"].as_f64().unwrap_or_else(|| panic!("{}: an event without a time: {e}", path.display()));
        assert!(time >= 0.0, "{}: {e}", path.display());
        let name = e["name"].as_str().unwrap_or_else(|| panic!("an event without a name: {e}")).to_string();
        let data = &e["data"];
        let ty = [&data["header"]["packet_type"], &data["new"], &data["from"]]
            .iter()
            .find_map(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        if name.starts_with("transport:stream") || name == "transport:data_moved" {
            // Client-initiated bidirectional streams: DoQ's queries, DoH/3's requests.
            let id = data["stream_id"].as_u64().unwrap_or_else(|| panic!("a stream event without a stream: {e}"));
            assert_eq!(id % 4, 0, "{}: {e}", path.display());
        }
        *events.entry((name, ty)).or_insert(0) += 1;
    }
    (header, events)
}

/// The header fields qvis reads: the qlog version and format, the vantage point (`role`), and
/// the reference time the events count from, a wall-clock time within the test's.
fn check_header(path: &Path, header: &Value, role: &str, protocol: &str, since_ms: f64) {
    let at = path.display();
    assert_eq!(header["qlog_version"].as_str(), Some("0.3"), "{at}: {header}");
    assert_eq!(header["qlog_format"].as_str(), Some("JSON-SEQ"), "{at}: {header}");
    let trace = &header["trace"];
    assert_eq!(trace["vantage_point"]["type"].as_str(), Some(role), "{at}: {header}");
    let common = &trace["common_fields"];
    assert_eq!(common["time_format"].as_str(), Some("relative"), "{at}: {header}");
    let protocols: Vec<&str> =
        common["protocol_type"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(protocols.contains(&"QUIC") && protocols.contains(&protocol), "{at}: {header}");
    let reference = common["reference_time"].as_f64().unwrap_or_else(|| panic!("{at}: no reference_time: {header}"));
    let now_ms = unix_ms();
    assert!((since_ms..=now_ms).contains(&reference), "{at}: reference_time {reference} not in [{since_ms}, {now_ms}]");
}

fn unix_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0
}

fn count(events: &BTreeMap<(String, String), u64>, name: &str, ty: &str) -> u64 {
    events.get(&(name.to_string(), ty.to_string())).copied().unwrap_or(0)
}

#[test]
fn qlog_traces_every_quic_connection_client_and_server() {
    let since_ms = unix_ms();
    let dir = tempfile::tempdir().unwrap();
    let (ca, srv_dir) = (dir.path().join("ca.pem"), dir.path().join("server-traces"));
    let mut server = Server::start_with(&[
        "--doq-port",
        "0",
        "--doh3-port",
        "0",
        "--ca-out",
        ca.to_str().unwrap(),
        "--qlog",
        srv_dir.to_str().unwrap(),
    ]);
    wait_for_ca(&ca);
    let mut client_files = 0;
    for (what, url) in [
        ("doq", format!("quic://{}", server.listener("doq"))),
        ("doh3", format!("h3://{}/dns-query", server.listener("doh3"))),
    ] {
        let traces = dir.path().join(format!("client-{what}"));
        let results = dir.path().join(format!("{what}.json"));
        let out = run_cmd(
            Command::new(common::volley())
                .args(["run", &url, "--ca", ca.to_str().unwrap(), "-n", "30", "-c", "3", "--conn-queries", "10"])
                .args(["--progress", "never", "-q", "--qlog", traces.to_str().unwrap(), "-o"])
                .arg(&results),
            WAIT,
        );
        assert!(out.status.success(), "{what}: {}\n{}", out.status, out.stderr);
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
        assert_eq!(v["totals"]["answered"].as_u64(), Some(30), "{what}: {:#}", v["totals"]);
        assert_eq!(v["qlog_dir"].as_str(), Some(traces.to_str().unwrap()), "{what}: the results name the directory");
        // One trace per connection: the run's (a new one every 10 queries) and the probe's.
        let opened = v["connections"]["opened"].as_u64().unwrap();
        let files: Vec<_> = std::fs::read_dir(&traces).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(
            files.len() as u64,
            opened + 1,
            "{what}: {} traces for {opened} connections and the probe",
            files.len()
        );
        client_files += files.len();
        let mut streams = 0;
        for f in &files {
            assert!(f.extension().is_some_and(|e| e == "sqlog"), "{}", f.display());
            let (header, events) = read_trace(f);
            check_header(f, &header, "client", if what == "doh3" { "HTTP3" } else { "QUIC" }, since_ms);
            assert!(header["trace"]["title"].as_str().is_some_and(|t| t.contains("client")), "{header}");
            // The handshake: Initial and Handshake packets both ways, then 1-RTT packets that
            // carry the queries, and the RTT estimates of recovery.
            for ty in ["initial", "handshake", "1RTT"] {
                assert!(
                    count(&events, "transport:packet_sent", ty) > 0,
                    "{}: no {ty} packet sent: {events:?}",
                    f.display()
                );
                assert!(
                    count(&events, "transport:packet_received", ty) > 0,
                    "{}: no {ty} packet received",
                    f.display()
                );
            }
            assert!(count(&events, "recovery:metrics_updated", "") > 0, "{}: no recovery metrics", f.display());
            // The streams (volley's own events: quinn records no frames): each query's stream
            // opened, its bytes handed to QUIC and the answer's handed back, and its end.
            let opened = count(&events, "transport:stream_state_updated", "open");
            assert!(opened > 0, "{}: no stream opened: {events:?}", f.display());
            assert_eq!(
                count(&events, "transport:stream_state_updated", "closed"),
                opened,
                "{}: {events:?}",
                f.display()
            );
            assert!(count(&events, "transport:data_moved", "application") >= opened, "{}: {events:?}", f.display());
            assert!(count(&events, "transport:data_moved", "transport") >= opened, "{}: {events:?}", f.display());
            streams += opened;
        }
        // A stream per query: the run's 30 and the probe's.
        assert!(streams > 30, "{what}: {streams} streams for 30 queries and the probe");
    }
    // Stopped as a service is (SIGTERM): its connections end, and their traces with them.
    server.terminate();
    // The server traced the same connections from its side.
    let server_files: Vec<_> = std::fs::read_dir(&srv_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(server_files.len(), client_files, "server traces");
    for f in &server_files {
        let (header, events) = read_trace(f);
        let doq = header["trace"]["title"].as_str().is_some_and(|t| t.contains("DoQ"));
        check_header(f, &header, "server", if doq { "QUIC" } else { "HTTP3" }, since_ms);
        assert!(header["trace"]["title"].as_str().is_some_and(|t| t.contains("volley serve")), "{header}");
        assert!(count(&events, "transport:packet_received", "initial") > 0, "{}", f.display());
        assert!(count(&events, "transport:packet_sent", "handshake") > 0, "{}", f.display());
        // Each query's stream: opened, the query handed to the server, the answer to QUIC,
        // closed (DoQ: one read and one write per stream; DoH/3: HTTP/3 frames, one or more).
        let opened = count(&events, "transport:stream_state_updated", "open");
        assert!(opened > 0, "{}: no stream opened: {events:?}", f.display());
        assert_eq!(count(&events, "transport:stream_state_updated", "closed"), opened, "{}: {events:?}", f.display());
        let (received, sent) = (
            count(&events, "transport:data_moved", "transport"),
            count(&events, "transport:data_moved", "application"),
        );
        if header["trace"]["title"].as_str().is_some_and(|t| t.contains("DoQ")) {
            assert_eq!((received, sent), (opened, opened), "{}: {events:?}", f.display());
        } else {
            assert!(received >= opened && sent >= opened, "{}: {events:?}", f.display());
        }
    }

    // A directory that cannot be made: one line, exit 2.
    let out = run_cmd(
        Command::new(common::volley()).args(["run", "quic://127.0.0.1:9", "--qlog", "/proc/volley-qlog"]),
        WAIT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.trim().starts_with("volley: error: --qlog /proc/volley-qlog"), "{}", out.stderr);
}

/// The run's SSLKEYLOGFILE decrypts DoQ and DoH/3 in tshark: the query's name in DoQ's stream
/// data, HTTP/3 HEADERS and DATA frames on DoH/3's streams.
#[test]
fn sslkeylogfile_decrypts_doq_and_doh3_captures() {
    require("tcpdump");
    let tshark = require("tshark");
    let dir = tempfile::tempdir().unwrap();
    let (ca, keys) = (dir.path().join("ca.pem"), dir.path().join("keys.log"));
    // Packets one by one on both sides: a capture on lo sees an offload train as one packet.
    let server = Server::start_with(&[
        "--doq-port",
        "0",
        "--doh3-port",
        "0",
        "--ca-out",
        ca.to_str().unwrap(),
        "--udp-gso",
        "off",
    ]);
    wait_for_ca(&ca);
    let (doq, doh3) = (server.listener("doq"), server.listener("doh3"));
    let file = dir.path().join("quic.pcap");
    let cap = Capture::start_filter(&file, &format!("udp port {} or udp port {}", doq.port(), doh3.port()));
    for url in [format!("quic://{doq}"), format!("h3://{doh3}/dns-query")] {
        let out = run_cmd(
            Command::new(common::volley())
                .env("SSLKEYLOGFILE", &keys)
                .args(["run", &url, "--ca", ca.to_str().unwrap(), "-n", "10", "-c", "2", "--udp-gso", "off"])
                .args(["--name", "keylog.example.test", "--progress", "never", "-q"]),
            WAIT,
        );
        assert!(out.status.success(), "{url}: {}\n{}", out.status, out.stderr);
    }
    let file = cap.stop();
    let fields = |filter: &str, field: &str| -> Vec<(u16, String)> {
        let out = Command::new(&tshark)
            .arg("-r")
            .arg(&file)
            .arg("-o")
            .arg(format!("tls.keylog_file:{}", keys.display()))
            .args(["-Y", filter, "-T", "fields", "-e", "udp.dstport", "-e", field])
            .output()
            .expect("run tshark");
        assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(p, v)| (p.parse().unwrap_or(0), v.to_string()))
            .collect()
    };
    // "keylog.example.test" as DNS labels, in hex.
    let name: String = b"\x06keylog\x07example\x04test".iter().map(|b| format!("{b:02x}")).collect();
    let doq_queries = fields("quic.stream_data", "quic.stream_data")
        .into_iter()
        .filter(|(port, data)| *port == doq.port() && data.contains(&name))
        .count();
    assert!(doq_queries >= 10, "decrypted DoQ stream data towards the server holds {doq_queries} queries for the name");
    let h3 = fields("http3", "http3.frame_type");
    let to_server: Vec<_> = h3.iter().filter(|(p, _)| *p == doh3.port()).collect();
    assert!(
        to_server.iter().filter(|(_, t)| t.split(',').any(|x| x == "1")).count() >= 10,
        "decrypted HTTP/3 HEADERS towards the server: {to_server:?}"
    );
}
