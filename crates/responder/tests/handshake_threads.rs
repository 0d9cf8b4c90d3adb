//! Where DoT and DoH handshakes run: a handshake thread beside each I/O thread, at nice 19
//! (`tls::handshaker`). A test binary of its own: it looks at the process's threads, which
//! other tests' responders would add to.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use volley_responder::{start, ResponderConfig, Transport};
use volley_transport::probe::exchange_with;
use volley_transport::{DohMethod, HttpVersion, LaneOptions, Target, TlsSettings};
use volley_wire::{Header, Name, QType, QueryOptions, QueryTemplate, Rcode};

fn query(name: &str) -> Vec<u8> {
    let mut v = Vec::new();
    QueryTemplate::new(&name.parse::<Name>().unwrap(), QType::A, QueryOptions::default()).write(0, &mut v);
    v
}

fn target(scheme: &str, addr: SocketAddr) -> Target {
    format!("{scheme}://{addr}").parse().unwrap()
}

/// The threads of this process named `name`, each with its nice value (from /proc).
fn threads_named(name: &str) -> Vec<i64> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let dir = e.path();
        if std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // After the command's closing parenthesis: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        found.push(rest.split(' ').nth(16).unwrap().parse().unwrap());
    }
    found
}

#[test]
fn tls_handshakes_run_on_a_low_priority_thread_beside_each_io_thread() {
    let r = start(ResponderConfig {
        udp_port: None,
        tcp_port: None,
        dot_port: Some(0),
        doh_port: Some(0),
        threads: 2,
        ..ResponderConfig::default()
    })
    .unwrap();
    assert_eq!(threads_named("volley-tls-0"), [19], "the first I/O thread's handshake thread, at nice 19");
    assert_eq!(threads_named("volley-tls-1"), [19]);
    // Handshakes go through it, fresh and resumed, over DoT and DoH.
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(r.ca_pem().expect("generated CA").as_bytes()).unwrap();
    let q = query("www.example.test");
    for (scheme, transport, http) in [
        ("tls", Transport::Dot, HttpVersion::Http2),
        ("https", Transport::Doh, HttpVersion::Http1),
        ("https", Transport::Doh, HttpVersion::Http2),
    ] {
        let tg = target(scheme, r.address(transport).unwrap());
        for _ in 0..3 {
            let (m, _) = exchange_with(
                &tg,
                tg.scheme,
                &q,
                Duration::from_secs(5),
                &LaneOptions {
                    tls: TlsSettings { ca_file: Some(ca.path().to_path_buf()), ..TlsSettings::default() },
                    http,
                    doh_method: DohMethod::Post,
                    ..LaneOptions::default()
                },
            )
            .unwrap_or_else(|e| panic!("{scheme} {http:?}: {e}"));
            assert_eq!(Header::parse(&m).unwrap().rcode(), Rcode::NOERROR);
        }
    }
    drop(r);
    assert!(threads_named("volley-tls-0").is_empty(), "the handshake threads end with the responder");
    // TCP alone: no handshake thread.
    let r =
        start(ResponderConfig { udp_port: None, tcp_port: Some(0), threads: 1, ..ResponderConfig::default() }).unwrap();
    assert!(threads_named("volley-tls-0").is_empty());
    drop(r);
}
