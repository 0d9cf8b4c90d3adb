//! In-process: start the responder on port 0 (UDP and TCP) and talk to it with std sockets.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use volley_responder::{start, AnswerConfig, ResponderConfig, Transport};
use volley_wire::{parse_query, Edns, Header, Name, QType, QueryOptions, QueryTemplate, Rcode};

fn query(id: u16, name: &str, qtype: QType, edns: Option<Edns>) -> Vec<u8> {
    let opts = QueryOptions { edns, ..QueryOptions::default() };
    let mut v = Vec::new();
    QueryTemplate::new(&name.parse::<Name>().unwrap(), qtype, opts).write(id, &mut v);
    v
}

fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len).unwrap();
    let mut m = vec![0; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut m).unwrap();
    m
}

fn frame(m: &[u8]) -> Vec<u8> {
    let mut v = (m.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(m);
    v
}

#[test]
fn udp_and_tcp_on_port_zero() {
    let r = start(ResponderConfig {
        threads: 2,
        idle_timeout: Duration::from_millis(500),
        answer: AnswerConfig { ttl: 60, ..AnswerConfig::default() },
        ..ResponderConfig::default()
    })
    .unwrap();
    assert_eq!(r.addresses().len(), 2);
    let udp = r.address(Transport::Udp).unwrap();
    let tcp = r.address(Transport::Tcp).unwrap();
    assert_ne!(udp.port(), 0);
    assert_ne!(tcp.port(), 0);

    // UDP: a few queries, each answered with its ID and question.
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 65535];
    for (id, name, rcode, an) in [
        (1u16, "a.test", Rcode::NOERROR, 1u16),
        (2, "x.nx.test", Rcode::NXDOMAIN, 0),
        (3, "fail.test", Rcode::SERVFAIL, 0),
    ] {
        s.send_to(&query(id, name, QType::A, None), udp).unwrap();
        let (n, _) = s.recv_from(&mut buf).unwrap();
        let h = Header::parse(&buf[..n]).unwrap();
        assert_eq!((h.id, h.rcode(), h.ancount), (id, rcode, an), "{name}");
        assert_eq!(parse_query(&buf[..n]).unwrap().qname, name.parse().unwrap());
    }
    // UDP truncation, then the full answer over TCP.
    let big = query(4, "size-3000.x.test", QType::TXT, Some(Edns::default()));
    s.send_to(&big, udp).unwrap();
    let (n, _) = s.recv_from(&mut buf).unwrap();
    let h = Header::parse(&buf[..n]).unwrap();
    assert!(h.truncated());
    assert_eq!((h.id, h.ancount, h.arcount), (4, 0, 1));

    let mut t = TcpStream::connect(tcp).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    t.write_all(&frame(&big)).unwrap();
    let m = read_frame(&mut t);
    let h = Header::parse(&m).unwrap();
    assert!(!h.truncated());
    assert_eq!((h.id, h.ancount), (4, 1));
    assert!(m.len() > 3000);

    // Two pipelined queries in one write: the delayed one is answered after the other.
    let sent = Instant::now();
    let mut both = frame(&query(10, "delay-300ms.test", QType::A, None));
    both.extend_from_slice(&frame(&query(11, "now.test", QType::AAAA, None)));
    t.write_all(&both).unwrap();
    let first = read_frame(&mut t);
    let first_at = sent.elapsed();
    let second = read_frame(&mut t);
    let second_at = sent.elapsed();
    assert_eq!(Header::parse(&first).unwrap().id, 11);
    assert_eq!(Header::parse(&second).unwrap().id, 10);
    assert!(first_at < Duration::from_millis(250), "{first_at:?}");
    assert!(second_at >= Duration::from_millis(300), "{second_at:?}");

    // Idle timeout: the server closes the connection (EOF) after 500 ms of silence.
    let idle_from = Instant::now();
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    let waited = idle_from.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3), "{waited:?}");

    // Garbage on UDP is dropped; the server keeps answering.
    s.send_to(&[1, 2, 3], udp).unwrap();
    s.send_to(&query(5, "still.test", QType::A, None), udp).unwrap();
    let (n, _) = s.recv_from(&mut buf).unwrap();
    assert_eq!(Header::parse(&buf[..n]).unwrap().id, 5);

    // Counters are bumped right after the send: give the last one a moment.
    let deadline = Instant::now() + Duration::from_secs(2);
    while r.stats().answered < 8 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let st = r.stats();
    assert_eq!(st.queries, 9);
    assert_eq!(st.answered, 8);
    assert_eq!(st.dropped, 1);
    assert_eq!(st.delayed, 1);
    assert_eq!(st.truncated, 1);
    assert_eq!(st.tcp_connections, 1);
    r.stop();
}

#[test]
fn explicit_port_shared_and_bind_error() {
    // Find a port free for both UDP and TCP, then use it explicitly.
    let probe = start(ResponderConfig { threads: 1, tcp_port: None, ..ResponderConfig::default() }).unwrap();
    let port = probe.address(Transport::Udp).unwrap().port();
    probe.stop();
    let cfg = ResponderConfig { threads: 2, udp_port: Some(port), tcp_port: Some(port), ..ResponderConfig::default() };
    let r = match start(cfg.clone()) {
        Ok(r) => r,
        Err(_) => return, // the TCP port happened to be taken: nothing to check
    };
    assert!(r.addresses().iter().all(|(_, a)| a.port() == port));
    // A second responder on the same port must fail, not silently share it via SO_REUSEPORT.
    for (udp_port, tcp_port) in [(Some(port), None), (None, Some(port))] {
        let again = start(ResponderConfig { threads: 1, udp_port, tcp_port, ..ResponderConfig::default() });
        assert!(matches!(again, Err(volley_responder::ResponderError::Bind { .. })));
    }
    // A second responder (different process semantics aside) on a taken TCP port fails to bind
    // when the existing listener is not ours: emulate with a plain listener.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = l.local_addr().unwrap().port();
    let err = start(ResponderConfig { tcp_port: Some(taken), udp_port: None, ..ResponderConfig::default() })
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("127.0.0.1:{taken}")), "{err}");
    r.stop();
}

#[test]
fn ipv6_loopback() {
    let Ok(r) = start(ResponderConfig { listen: "::1".parse().unwrap(), threads: 1, ..ResponderConfig::default() })
    else {
        return; // no IPv6 on this host
    };
    let udp = r.address(Transport::Udp).unwrap();
    let s = UdpSocket::bind("[::1]:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.send_to(&query(7, "v6.test", QType::AAAA, None), udp).unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = s.recv_from(&mut buf).unwrap();
    assert_eq!(Header::parse(&buf[..n]).unwrap().ancount, 1);
    assert_eq!(udp.to_string(), format!("[::1]:{}", udp.port()));
}

#[test]
fn tcp_half_close_gets_pending_answers_then_fin() {
    let r = start(ResponderConfig { threads: 1, udp_port: None, ..ResponderConfig::default() }).unwrap();
    let mut t = TcpStream::connect(r.address(Transport::Tcp).unwrap()).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = Vec::new();
    for (id, name) in [(1u16, "delay-100ms.test"), (2, "a.test"), (3, "b.nx.test"), (4, "x.drop.test")] {
        all.extend_from_slice(&frame(&query(id, name, QType::A, None)));
    }
    // Split a frame across two writes to exercise reassembly.
    let (a, b) = all.split_at(20);
    t.write_all(a).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    t.write_all(b).unwrap();
    t.shutdown(std::net::Shutdown::Write).unwrap();
    let ids: Vec<u16> = (0..3).map(|_| Header::parse(&read_frame(&mut t)).unwrap().id).collect();
    assert_eq!(ids, vec![2, 3, 1]);
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "FIN after the last pending answer; the dropped query gets nothing");
    r.stop();
}

/// A burst from one socket, with answers of a few sizes: the server sends same-size answers to
/// one address as a segmented train (UDP_SEGMENT); each must still arrive as its own datagram,
/// whole, with its own ID and question, none lost or merged.
#[test]
fn a_burst_from_one_socket_gets_every_answer_as_its_own_datagram() {
    let r = start(ResponderConfig { threads: 1, tcp_port: None, ..ResponderConfig::default() }).unwrap();
    let udp = r.address(Transport::Udp).unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = 600u16;
    let types = [QType::A, QType::AAAA, QType::TXT];
    // Queries of one size per type, sent in windows of 150 so that the socket buffers hold
    // the answers; the server reads them in batches and answers each batch at once.
    let mut seen = vec![false; n as usize];
    let mut buf = [0u8; 65535];
    for window in (0..n).collect::<Vec<_>>().chunks(150) {
        for &id in window {
            s.send_to(&query(id, "www.example.test", types[id as usize % 3], None), udp).unwrap();
        }
        for _ in window {
            let (len, _) = s.recv_from(&mut buf).expect("every answer arrives");
            let h = Header::parse(&buf[..len]).unwrap();
            let q = parse_query(&buf[..len]).unwrap();
            assert!(h.is_response() && h.ancount == 1, "an answer: {h:?}");
            assert_eq!(q.qtype, types[h.id as usize % 3], "answer {} carries its own question", h.id);
            assert!(!seen[h.id as usize], "answer {} arrived twice", h.id);
            seen[h.id as usize] = true;
        }
    }
    assert!(seen.iter().all(|&x| x), "every query answered once");
}
