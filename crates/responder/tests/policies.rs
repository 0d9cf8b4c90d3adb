//! In-process: the server policies on every connection transport, seen from raw clients —
//! the most queries per connection (TCP and DoT FIN, HTTP/2 GOAWAY, HTTP/1.1
//! `connection: close`, DoQ CONNECTION_CLOSE), the idle timeout (TCP, HTTP/1.1 keep-alive,
//! QUIC) and the most connections per listener (TCP close, QUIC CONNECTION_REFUSED), each
//! counted in the stats.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use volley_responder::{start, Responder, ResponderConfig, Stats, Transport};
use volley_wire::{Header, Name, QType, QueryOptions, QueryTemplate};

fn query(id: u16, name: &str) -> Vec<u8> {
    let mut v = Vec::new();
    QueryTemplate::new(&name.parse::<Name>().unwrap(), QType::A, QueryOptions::default()).write(id, &mut v);
    v
}

fn frame(m: &[u8]) -> Vec<u8> {
    let mut v = (m.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(m);
    v
}

/// Reads one length-prefixed message; None at end of stream.
fn read_frame(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return None,
        Err(e) => panic!("read: {e}"),
    }
    let mut m = vec![0; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut m).unwrap();
    Some(m)
}

/// Reads until end of stream (FIN): true; false on a reset.
fn reads_to_eof(s: &mut impl Read) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return false,
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn plain(c: ResponderConfig) -> ResponderConfig {
    ResponderConfig { udp_port: None, threads: 2, ..c }
}

fn encrypted(c: ResponderConfig) -> ResponderConfig {
    ResponderConfig { udp_port: None, tcp_port: None, threads: 1, ..c }
}

fn wait_stats(r: &Responder, ok: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = r.stats();
        if ok(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut c = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Arc::new(c)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

// ---------------------------------------------------------------------------------------------
// TCP and DoT
// ---------------------------------------------------------------------------------------------

/// Three queries in one write, the second delayed 300 ms (`--delay 300ms:1/2` takes the
/// second of each pair): by default the third's answer leaves before the second's (out of
/// order); with `in_order` it waits behind it.
#[test]
fn tcp_in_order_answers_wait_behind_a_delayed_one() {
    for in_order in [false, true] {
        let mut answer = volley_responder::AnswerConfig::default();
        answer.delays.push("300ms:1/2".parse().unwrap());
        let r = start(plain(ResponderConfig { in_order, answer, ..Default::default() })).unwrap();
        let mut s = tcp(r.address(Transport::Tcp).unwrap());
        let mut all = Vec::new();
        for id in 1..=3u16 {
            all.extend_from_slice(&frame(&query(id, "www.example.test")));
        }
        s.write_all(&all).unwrap();
        let ids: Vec<u16> = (0..3).map(|_| Header::parse(&read_frame(&mut s).unwrap()).unwrap().id).collect();
        let want = if in_order { [1, 2, 3] } else { [1, 3, 2] };
        assert_eq!(ids, want, "in_order {in_order}");
        let st = wait_stats(&r, |s| s.answered == 3);
        assert_eq!(st.delayed, 1, "{st}");
    }
}

/// Five queries in one write, three per connection: three answers, then FIN; the two after
/// the last are never read (not counted as queries).
#[test]
fn tcp_max_queries_fin_after_the_last_answer() {
    let r = start(plain(ResponderConfig { max_queries_per_conn: Some(3), ..Default::default() })).unwrap();
    let mut s = tcp(r.address(Transport::Tcp).unwrap());
    let mut all = Vec::new();
    for id in 1..=5u16 {
        all.extend_from_slice(&frame(&query(id, "www.example.test")));
    }
    s.write_all(&all).unwrap();
    for id in 1..=3u16 {
        let m = read_frame(&mut s).expect("answer before the FIN");
        assert_eq!(Header::parse(&m).unwrap().id, id);
    }
    assert!(read_frame(&mut s).is_none(), "FIN after the third answer");
    let st = wait_stats(&r, |s| s.closed_max_queries == 1);
    assert_eq!((st.queries, st.answered, st.closed_max_queries, st.closed_idle), (3, 3, 1, 0), "{st}");

    // One query per connection: every connection ends after its answer, by FIN, not RST.
    let r1 = start(plain(ResponderConfig { max_queries_per_conn: Some(1), ..Default::default() })).unwrap();
    for id in 0..10u16 {
        let mut s = tcp(r1.address(Transport::Tcp).unwrap());
        s.write_all(&frame(&query(id, "www.example.test"))).unwrap();
        assert_eq!(Header::parse(&read_frame(&mut s).unwrap()).unwrap().id, id);
        assert!(reads_to_eof(&mut s), "a FIN, not a reset");
    }
    let st = wait_stats(&r1, |s| s.closed_max_queries == 10);
    assert_eq!((st.tcp_connections, st.answered, st.closed_max_queries), (10, 10, 10), "{st}");
}

/// A delayed answer is still sent before the policy's FIN.
#[test]
fn tcp_max_queries_waits_for_delayed_answers() {
    let r = start(plain(ResponderConfig { max_queries_per_conn: Some(2), ..Default::default() })).unwrap();
    let mut s = tcp(r.address(Transport::Tcp).unwrap());
    let mut both = frame(&query(1, "delay-200ms.test"));
    both.extend_from_slice(&frame(&query(2, "www.example.test")));
    s.write_all(&both).unwrap();
    let ids: Vec<u16> = (0..2).map(|_| Header::parse(&read_frame(&mut s).unwrap()).unwrap().id).collect();
    assert_eq!(ids, [2, 1]);
    assert!(read_frame(&mut s).is_none());
}

#[test]
fn tcp_idle_timeout_fin() {
    let r = start(plain(ResponderConfig { idle_timeout: Duration::from_millis(200), ..Default::default() })).unwrap();
    let mut s = tcp(r.address(Transport::Tcp).unwrap());
    s.write_all(&frame(&query(7, "www.example.test"))).unwrap();
    assert!(read_frame(&mut s).is_some());
    let t = Instant::now();
    assert!(read_frame(&mut s).is_none(), "closed when idle");
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(150) && waited < Duration::from_secs(3), "{waited:?}");
    let st = wait_stats(&r, |s| s.closed_idle == 1);
    assert_eq!((st.closed_idle, st.closed_max_queries), (1, 0), "{st}");
}

/// Two connections held (over two threads), the third closed at once; once one of the two
/// ends, a new one is served.
#[test]
fn tcp_max_conns_closes_the_extra_connection() {
    let r = start(plain(ResponderConfig { max_conns: Some(2), ..Default::default() })).unwrap();
    let addr = r.address(Transport::Tcp).unwrap();
    let mut held = Vec::new();
    for id in 0..2u16 {
        let mut s = tcp(addr);
        s.write_all(&frame(&query(id, "www.example.test"))).unwrap();
        assert!(read_frame(&mut s).is_some(), "connection {id} served");
        held.push(s);
    }
    let mut extra = tcp(addr);
    let _ = extra.write_all(&frame(&query(9, "www.example.test")));
    let mut buf = [0u8; 64];
    match extra.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the third connection must be closed unanswered: {other:?}"),
    }
    let st = wait_stats(&r, |s| s.refused_max_conns == 1);
    assert_eq!((st.refused_max_conns, st.tcp_connections), (1, 2), "{st}");
    drop(held.pop());
    // The server sees the close and frees the place (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = tcp(addr);
        let _ = s.write_all(&frame(&query(3, "www.example.test")));
        let mut len = [0u8; 2];
        if s.read_exact(&mut len).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no place freed after a connection closed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// DoT: two answers, then close_notify and FIN.
#[test]
fn dot_max_queries_close_after_the_last_answer() {
    let r =
        start(encrypted(ResponderConfig { dot_port: Some(0), max_queries_per_conn: Some(2), ..Default::default() }))
            .unwrap();
    let cfg = client_config(r.ca_pem().unwrap(), &[b"dot"]);
    let mut sock = tcp(r.address(Transport::Dot).unwrap());
    let mut conn = ClientConnection::new(cfg, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut s = rustls::Stream::new(&mut conn, &mut sock);
    let mut all = Vec::new();
    for id in 1..=3u16 {
        all.extend_from_slice(&frame(&query(id, "www.example.test")));
    }
    s.write_all(&all).unwrap();
    assert!(read_frame(&mut s).is_some());
    assert!(read_frame(&mut s).is_some());
    assert!(read_frame(&mut s).is_none(), "closed after two answers");
    let st = wait_stats(&r, |s| s.closed_max_queries == 1);
    assert_eq!((st.dot_connections, st.answered, st.closed_max_queries), (1, 2, 1), "{st}");
}

// ---------------------------------------------------------------------------------------------
// DoH: HTTP/2 and HTTP/1.1
// ---------------------------------------------------------------------------------------------

const GET: &str = "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB";

async fn h2_get(send: &mut h2::client::SendRequest<Bytes>) -> Result<http::StatusCode, h2::Error> {
    let req = http::Request::get(format!("https://localhost{GET}")).body(()).unwrap();
    let mut ready = send.clone().ready().await?;
    let (resp, _) = ready.send_request(req, true)?;
    let resp = resp.await?;
    let status = resp.status();
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk?.len());
    }
    Ok(status)
}

/// HTTP/2: GOAWAY after the third request; the connection then ends by itself.
#[test]
fn doh2_max_queries_goaway() {
    let r =
        start(encrypted(ResponderConfig { doh_port: Some(0), max_queries_per_conn: Some(3), ..Default::default() }))
            .unwrap();
    let addr = r.address(Transport::Doh).unwrap();
    let cfg = client_config(r.ca_pem().unwrap(), &[b"h2"]);
    rt().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (mut send, conn) = h2::client::handshake(tls).await.unwrap();
        let conn = tokio::spawn(conn);
        for _ in 0..3 {
            assert_eq!(h2_get(&mut send).await.unwrap(), 200);
        }
        let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
        assert!(ended.is_ok(), "the connection ends after GOAWAY");
        assert!(h2_get(&mut send).await.is_err(), "no fourth request on it");
    });
    let st = wait_stats(&r, |s| s.closed_max_queries == 1);
    assert_eq!((st.answered, st.closed_max_queries), (3, 1), "{st}");
}

/// Sends one HTTP/1.1 GET on a TLS stream and reads its response head and body; the head
/// lower-cased. None when the connection ended instead.
fn h1_get(s: &mut (impl Read + Write)) -> Option<String> {
    s.write_all(format!("GET {GET} HTTP/1.1\r\nhost: localhost\r\naccept: application/dns-message\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) => return None,
            Ok(_) => got.push(b[0]),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof || e.kind() == ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("read: {e}"),
        }
    }
    let head = String::from_utf8_lossy(&got).to_lowercase();
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).map(|v| v.trim().parse().unwrap()).unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    Some(head)
}

fn h1_stream(r: &Responder) -> (ClientConnection, TcpStream) {
    let cfg = client_config(r.ca_pem().unwrap(), &[b"http/1.1"]);
    let sock = tcp(r.address(Transport::Doh).unwrap());
    (ClientConnection::new(cfg, ServerName::try_from("localhost").unwrap()).unwrap(), sock)
}

/// HTTP/1.1: the second response says `connection: close`, then the connection ends.
#[test]
fn doh1_max_queries_connection_close() {
    let r =
        start(encrypted(ResponderConfig { doh_port: Some(0), max_queries_per_conn: Some(2), ..Default::default() }))
            .unwrap();
    let (mut conn, mut sock) = h1_stream(&r);
    let mut s = rustls::Stream::new(&mut conn, &mut sock);
    let mut heads = Vec::new();
    for _ in 0..2 {
        heads.push(h1_get(&mut s).expect("answered"));
    }
    assert!(heads[0].starts_with("http/1.1 200") && !heads[0].contains("connection: close"), "{}", heads[0]);
    assert!(heads[1].starts_with("http/1.1 200") && heads[1].contains("connection: close"), "{}", heads[1]);
    assert!(reads_to_eof(&mut s), "closed after the second response");
    let st = wait_stats(&r, |s| s.closed_max_queries == 1);
    assert_eq!((st.answered, st.closed_max_queries), (2, 1), "{st}");
}

/// HTTP/1.1 keep-alive: no request for the idle timeout, and the connection closes.
#[test]
fn doh1_keep_alive_idle_timeout() {
    let r = start(encrypted(ResponderConfig {
        doh_port: Some(0),
        idle_timeout: Duration::from_millis(300),
        ..Default::default()
    }))
    .unwrap();
    let (mut conn, mut sock) = h1_stream(&r);
    let mut s = rustls::Stream::new(&mut conn, &mut sock);
    assert!(h1_get(&mut s).unwrap().starts_with("http/1.1 200"));
    let t = Instant::now();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset) => break,
            Err(e) => panic!("idle connection not closed: {e} after {:?}", t.elapsed()),
        }
    }
    assert!(t.elapsed() >= Duration::from_millis(200), "{:?}", t.elapsed());
    let st = wait_stats(&r, |s| s.closed_idle == 1);
    assert_eq!(st.closed_idle, 1, "{st}");
}

// ---------------------------------------------------------------------------------------------
// DoQ
// ---------------------------------------------------------------------------------------------

async fn quic_connect(r: &Responder, t: Transport, alpn: &[u8]) -> Result<quinn::Connection, quinn::ConnectionError> {
    let c = (*client_config(r.ca_pem().unwrap(), &[alpn])).clone();
    let q = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(c)).unwrap();
    let ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = ep.connect_with(quinn::ClientConfig::new(Arc::new(q)), r.address(t).unwrap(), "localhost").unwrap();
    conn.await
}

async fn doq_query(conn: &quinn::Connection, name: &str) -> Result<Vec<u8>, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(&frame(&query(0, name))).await.map_err(|e| e.to_string())?;
    let _ = send.finish();
    let m = recv.read_to_end(65_537).await.map_err(|e| e.to_string())?;
    Ok(m[2..].to_vec())
}

/// DoQ: both answers arrive, then CONNECTION_CLOSE with DOQ_NO_ERROR.
#[test]
fn doq_max_queries_connection_close_no_error() {
    let r =
        start(encrypted(ResponderConfig { doq_port: Some(0), max_queries_per_conn: Some(2), ..Default::default() }))
            .unwrap();
    rt().block_on(async {
        let conn = quic_connect(&r, Transport::Doq, b"doq").await.unwrap();
        let (a, b) = tokio::join!(doq_query(&conn, "a.test"), doq_query(&conn, "delay-100ms.b.test"));
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
        let why = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("closed by the server");
        match why {
            quinn::ConnectionError::ApplicationClosed(c) => assert_eq!(u64::from(c.error_code), 0, "DOQ_NO_ERROR"),
            other => panic!("expected CONNECTION_CLOSE DOQ_NO_ERROR, got {other}"),
        }
    });
    let st = wait_stats(&r, |s| s.closed_max_queries == 1);
    assert_eq!((st.answered, st.closed_max_queries), (2, 1), "{st}");
}

/// `--max-streams 1`: the answer on a stream must be acknowledged before the server gives
/// its credit back, so the server asks the client (quinn supports the ACK frequency
/// extension) to acknowledge every packet at once (ACK_FREQUENCY), not up to its
/// max_ack_delay (25 ms) late; one stream at a time still carries every query.
#[test]
fn quic_asks_for_immediate_acknowledgements() {
    let r = start(encrypted(ResponderConfig { doq_port: Some(0), max_streams: 1, ..Default::default() })).unwrap();
    rt().block_on(async {
        let conn = quic_connect(&r, Transport::Doq, b"doq").await.unwrap();
        let (a, b, c) =
            tokio::join!(doq_query(&conn, "a.test"), doq_query(&conn, "b.test"), doq_query(&conn, "c.test"));
        assert!(a.is_ok() && b.is_ok() && c.is_ok(), "{a:?} {b:?} {c:?}");
        let asked = conn.stats().frame_rx.ack_frequency;
        assert!(asked >= 1, "{asked} ACK_FREQUENCY frames from the server");
        conn.close(0u32.into(), b"");
    });
    // Under the default limit (100 streams) a window of answers spans packets: clients keep
    // their own acknowledgement pace.
    let r = start(encrypted(ResponderConfig { doq_port: Some(0), ..Default::default() })).unwrap();
    rt().block_on(async {
        let conn = quic_connect(&r, Transport::Doq, b"doq").await.unwrap();
        assert!(doq_query(&conn, "a.test").await.is_ok());
        assert_eq!(conn.stats().frame_rx.ack_frequency, 0, "no ACK_FREQUENCY under the default limit");
        conn.close(0u32.into(), b"");
    });
}

/// QUIC idle timeout: the client sees the connection time out (its own idle timer, at the
/// server's shorter value), the server counts an idle close.
#[test]
fn doq_idle_timeout() {
    let r = start(encrypted(ResponderConfig {
        doq_port: Some(0),
        idle_timeout: Duration::from_millis(300),
        ..Default::default()
    }))
    .unwrap();
    rt().block_on(async {
        let conn = quic_connect(&r, Transport::Doq, b"doq").await.unwrap();
        assert!(doq_query(&conn, "a.test").await.is_ok());
        let why = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("idle close");
        assert!(matches!(why, quinn::ConnectionError::TimedOut), "{why}");
    });
    let st = wait_stats(&r, |s| s.closed_idle == 1);
    assert_eq!(st.closed_idle, 1, "{st}");
}

/// QUIC: one connection held, the second refused with CONNECTION_REFUSED.
#[test]
fn doq_max_conns_refused() {
    let r = start(encrypted(ResponderConfig { doq_port: Some(0), max_conns: Some(1), ..Default::default() })).unwrap();
    rt().block_on(async {
        let first = quic_connect(&r, Transport::Doq, b"doq").await.unwrap();
        assert!(doq_query(&first, "a.test").await.is_ok());
        match quic_connect(&r, Transport::Doq, b"doq").await {
            Err(quinn::ConnectionError::ConnectionClosed(c)) => {
                assert_eq!(c.error_code, quinn::TransportErrorCode::CONNECTION_REFUSED, "{c}")
            }
            other => panic!("expected CONNECTION_REFUSED, got {:?}", other.map(|_| "a connection")),
        }
        first.close(0u32.into(), b"");
    });
    let st = wait_stats(&r, |s| s.refused_max_conns == 1);
    assert_eq!((st.refused_max_conns, st.doq_connections), (1, 1), "{st}");
}

#[test]
fn zero_limits_are_config_errors() {
    for c in [
        ResponderConfig { max_queries_per_conn: Some(0), ..Default::default() },
        ResponderConfig { max_conns: Some(0), ..Default::default() },
    ] {
        assert!(start(c).is_err());
    }
}
