//! In-process: DoT, DoH (HTTP/1.1, 2, 3), DoQ; certificates of every key type; resumption,
//! 0-RTT, Retry; the faults. Clients: the generator's own drivers (volley-transport) and raw
//! rustls / quinn / h2 clients where a test needs to look inside.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore};
use volley_responder::{start, Fault, KeyType, Responder, ResponderConfig, TlsConfig, Transport};
use volley_transport::probe::exchange_with;
use volley_transport::{DohMethod, HttpVersion, LaneOptions, Target, TlsSettings};
use volley_wire::{Header, Name, QType, QueryOptions, QueryTemplate, Rcode};

fn query(id: u16, name: &str, qtype: QType) -> Vec<u8> {
    let mut v = Vec::new();
    QueryTemplate::new(&name.parse::<Name>().unwrap(), qtype, QueryOptions::default()).write(id, &mut v);
    v
}

fn frame(m: &[u8]) -> Vec<u8> {
    let mut v = (m.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(m);
    v
}

fn base(c: ResponderConfig) -> ResponderConfig {
    ResponderConfig { udp_port: None, tcp_port: None, threads: 1, ..c }
}

fn all_encrypted() -> ResponderConfig {
    base(ResponderConfig {
        dot_port: Some(0),
        doh_port: Some(0),
        doh3_port: Some(0),
        doq_port: Some(0),
        ..ResponderConfig::default()
    })
}

/// The responder's CA written to a file, for the generator's `--ca`.
fn ca_file(r: &Responder) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(r.ca_pem().expect("generated CA").as_bytes()).unwrap();
    f
}

fn opts(ca: &tempfile::NamedTempFile, http: HttpVersion, method: DohMethod) -> LaneOptions {
    LaneOptions {
        tls: TlsSettings { ca_file: Some(ca.path().to_path_buf()), ..TlsSettings::default() },
        http,
        doh_method: method,
        ..LaneOptions::default()
    }
}

fn target(scheme: &str, addr: SocketAddr, path: &str) -> Target {
    format!("{scheme}://{addr}{path}").parse().unwrap()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(ca_pem: &str, alpn: &[&[u8]], early: bool) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    c.enable_early_data = early;
    Arc::new(c)
}

/// One DoT exchange on a fresh connection with a blocking rustls client: the answer, the
/// handshake kind, and whether the query went (and was accepted) as early data.
fn dot_once(addr: SocketAddr, cfg: &Arc<ClientConfig>, q: &[u8]) -> (Vec<u8>, HandshakeKind, bool) {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_nodelay(true).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut conn = ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut sent_early = false;
    if let Some(mut ed) = conn.early_data() {
        ed.write_all(&frame(q)).unwrap();
        sent_early = true;
    }
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    let early_ok = sent_early && conn.is_early_data_accepted();
    let mut s = rustls::Stream::new(&mut conn, &mut sock);
    if !early_ok {
        s.write_all(&frame(q)).unwrap();
    }
    let mut len = [0u8; 2];
    s.read_exact(&mut len).unwrap();
    let mut m = vec![0; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut m).unwrap();
    let kind = s.conn.handshake_kind().unwrap();
    s.conn.send_close_notify();
    let _ = s.flush();
    (m, kind, early_ok)
}

fn wait_stats(r: &Responder, ok: impl Fn(&volley_responder::Stats) -> bool) -> volley_responder::Stats {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let s = r.stats();
        if ok(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn every_transport_answers_the_generator() {
    let r = start(all_encrypted()).unwrap();
    let names: Vec<_> = r.addresses().iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["dot", "doh", "doh3", "doq"]);
    let ca = ca_file(&r);
    let q = query(0, "www.example.test", QType::A);
    let t = Duration::from_secs(5);
    let cases = [
        ("tls", Transport::Dot, HttpVersion::Http2, DohMethod::Post),
        ("https", Transport::Doh, HttpVersion::Http1, DohMethod::Get),
        ("https", Transport::Doh, HttpVersion::Http1, DohMethod::Post),
        ("https", Transport::Doh, HttpVersion::Http2, DohMethod::Get),
        ("https", Transport::Doh, HttpVersion::Http2, DohMethod::Post),
        ("h3", Transport::Doh3, HttpVersion::Http3, DohMethod::Get),
        ("h3", Transport::Doh3, HttpVersion::Http3, DohMethod::Post),
        ("quic", Transport::Doq, HttpVersion::Http2, DohMethod::Post),
    ];
    for (scheme, transport, http, method) in cases {
        let addr = r.address(transport).unwrap();
        let tg = target(scheme, addr, "");
        let (m, _) = exchange_with(&tg, tg.scheme, &q, t, &opts(&ca, http, method))
            .unwrap_or_else(|e| panic!("{scheme} {http:?} {method:?}: {e}"));
        let h = Header::parse(&m).unwrap();
        assert_eq!((h.rcode(), h.ancount), (Rcode::NOERROR, 1), "{scheme} {http:?} {method:?}");
    }
    // A big answer over every stream transport: no truncation.
    let big = query(0, "size-3000.x.test", QType::TXT);
    for (scheme, transport) in [("tls", Transport::Dot), ("https", Transport::Doh), ("quic", Transport::Doq)] {
        let tg = target(scheme, r.address(transport).unwrap(), "");
        let (m, _) = exchange_with(&tg, tg.scheme, &big, t, &opts(&ca, HttpVersion::Http2, DohMethod::Post)).unwrap();
        assert!(!Header::parse(&m).unwrap().truncated() && m.len() > 3000, "{scheme}");
    }
    let s = wait_stats(&r, |s| s.answered >= 11);
    assert_eq!((s.queries, s.answered), (11, 11), "{s}");
    assert!(
        s.dot_connections >= 2 && s.doh_connections >= 5 && s.doh3_connections >= 2 && s.doq_connections >= 2,
        "{s}"
    );
    r.stop();
}

#[test]
fn doh_statuses_and_headers() {
    let r = start(base(ResponderConfig { doh_port: Some(0), doh_path: "/q".into(), ..Default::default() })).unwrap();
    let addr = r.address(Transport::Doh).unwrap();
    let cfg = client_config(r.ca_pem().unwrap(), &[b"http/1.1"], false);
    let q = query(0, "www.example.test", QType::A);
    let b64 = "AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB"; // RFC 8484's www.example.com A
    let _ = &q;
    let h1 = |req: &str| -> String {
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut conn = ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
        let mut s = rustls::Stream::new(&mut conn, &mut sock);
        s.write_all(req.as_bytes()).unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).to_lowercase()
    };
    let get = |path: &str| h1(&format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"));
    let ok = get(&format!("/q?dns={b64}"));
    assert!(ok.starts_with("http/1.1 200"), "{ok}");
    assert!(ok.contains("content-type: application/dns-message"), "{ok}");
    assert!(ok.contains("cache-control: max-age=300"), "{ok}");
    assert!(get(&format!("/dns-query?dns={b64}")).starts_with("http/1.1 404"));
    assert!(get("/q?dns=***").starts_with("http/1.1 400"));
    assert!(get("/q").starts_with("http/1.1 400"));
    let put = h1("PUT /q HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    assert!(put.starts_with("http/1.1 405"), "{put}");
    let post = h1("POST /q HTTP/1.1\r\nhost: localhost\r\ncontent-type: text/plain\r\ncontent-length: 1\r\n\r\nx");
    assert!(post.starts_with("http/1.1 415"), "{post}");
    r.stop();
}

#[test]
fn every_key_type_verifies_with_the_written_ca() {
    for kt in [KeyType::P256, KeyType::Ed25519, KeyType::Rsa2048, KeyType::Rsa3072] {
        let dir = tempfile::tempdir().unwrap();
        let ca_out = dir.path().join("ca.pem");
        let began = Instant::now();
        let r = start(base(ResponderConfig {
            dot_port: Some(0),
            tls: TlsConfig {
                cert: volley_responder::CertSource::Generate(kt),
                ca_out: Some(ca_out.clone()),
                ..TlsConfig::default()
            },
            ..Default::default()
        }))
        .unwrap();
        eprintln!("{kt}: started in {:?}", began.elapsed());
        let pem = std::fs::read_to_string(&ca_out).unwrap();
        assert_eq!(pem, r.ca_pem().unwrap());
        let cfg = client_config(&pem, &[b"dot"], false);
        let (m, kind, _) = dot_once(r.address(Transport::Dot).unwrap(), &cfg, &query(7, "k.test", QType::A));
        assert_eq!((Header::parse(&m).unwrap().id, kind), (7, HandshakeKind::Full), "{kt}");
        // The IP address SAN verifies too (no SNI).
        let ca = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca.path(), &pem).unwrap();
        let tg = target("tls", r.address(Transport::Dot).unwrap(), "");
        let o = LaneOptions {
            tls: TlsSettings { ca_file: Some(ca.path().to_path_buf()), ..TlsSettings::default() },
            ..LaneOptions::default()
        };
        exchange_with(&tg, tg.scheme, &query(1, "k.test", QType::A), Duration::from_secs(5), &o).unwrap();
        r.stop();
    }
}

#[test]
fn resumption_with_tickets_and_without() {
    for tickets in [true, false] {
        let tls = TlsConfig { tickets, ..TlsConfig::default() };
        let r = start(base(ResponderConfig { dot_port: Some(0), tls, ..Default::default() })).unwrap();
        let addr = r.address(Transport::Dot).unwrap();
        for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12][..]] {
            let mut roots = RootCertStore::empty();
            roots.add(CertificateDer::from_pem_slice(r.ca_pem().unwrap().as_bytes()).unwrap()).unwrap();
            let cfg = Arc::new(
                ClientConfig::builder_with_provider(provider())
                    .with_protocol_versions(versions)
                    .unwrap()
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            );
            let q = query(3, "r.test", QType::A);
            let (_, first, _) = dot_once(addr, &cfg, &q);
            let (_, second, _) = dot_once(addr, &cfg, &q);
            assert_eq!(first, HandshakeKind::Full);
            let want = if tickets { HandshakeKind::Resumed } else { HandshakeKind::Full };
            assert_eq!(second, want, "tickets {tickets}, {versions:?}");
        }
        let s = wait_stats(&r, |s| s.answered >= 4);
        assert_eq!(s.tls_resumed, if tickets { 2 } else { 0 }, "{s}");
        r.stop();
    }
}

#[test]
fn tls_early_data_accepted_and_answered() {
    let tls = TlsConfig { zero_rtt: true, ..TlsConfig::default() };
    let r = start(base(ResponderConfig { dot_port: Some(0), tls, ..Default::default() })).unwrap();
    let addr = r.address(Transport::Dot).unwrap();
    let cfg = client_config(r.ca_pem().unwrap(), &[b"dot"], true);
    let (_, k1, e1) = dot_once(addr, &cfg, &query(1, "a.test", QType::A));
    assert_eq!((k1, e1), (HandshakeKind::Full, false));
    let (m, k2, e2) = dot_once(addr, &cfg, &query(2, "b.test", QType::A));
    assert_eq!((k2, e2), (HandshakeKind::Resumed, true));
    assert_eq!(Header::parse(&m).unwrap().id, 2);
    let s = wait_stats(&r, |s| s.answered >= 2);
    assert_eq!((s.early_data, s.tls_resumed), (1, 1), "{s}");
    r.stop();

    // Without --zero-rtt the same client resumes but its early data is refused (and resent).
    let r = start(base(ResponderConfig { dot_port: Some(0), ..Default::default() })).unwrap();
    let addr = r.address(Transport::Dot).unwrap();
    let cfg = client_config(r.ca_pem().unwrap(), &[b"dot"], true);
    dot_once(addr, &cfg, &query(1, "a.test", QType::A));
    let (_, k, e) = dot_once(addr, &cfg, &query(2, "b.test", QType::A));
    assert_eq!((k, e), (HandshakeKind::Resumed, false));
    assert_eq!(r.stats().early_data, 0);
    r.stop();
}

// ------------------------------------------------------------------------------------------
// QUIC: raw quinn clients

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn quic_client(ca_pem: &str, alpn: &[u8], early: bool) -> (quinn::Endpoint, quinn::ClientConfig) {
    let mut c = (*client_config(ca_pem, &[alpn], early)).clone();
    c.enable_early_data = early;
    let q = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(c)).unwrap();
    let ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    (ep, quinn::ClientConfig::new(Arc::new(q)))
}

/// One DoQ query on `conn`: the answer, or the stream's read error.
async fn doq_query(conn: &quinn::Connection, name: &str) -> Result<Vec<u8>, quinn::ReadToEndError> {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&frame(&query(0, name, QType::A))).await.unwrap();
    send.finish().unwrap();
    let m = recv.read_to_end(65_537).await?;
    Ok(m[2..].to_vec())
}

/// Retry and 0-RTT on DoQ. The client keeps the server's address validation tokens (quinn's
/// client configuration has a store, shared by its clones): with tokens (the default, 2 per
/// connection) the first connection gets a Retry and the second presents the token the first
/// got (NEW_TOKEN), which validates its address: no Retry. With `quic_tokens: 0` the server
/// sends none, and every new connection gets a Retry.
#[test]
fn doq_zero_rtt_and_retry() {
    for tokens in [2, 0] {
        let tls = TlsConfig { zero_rtt: true, ..TlsConfig::default() };
        let config = ResponderConfig { doq_port: Some(0), tls, retry: true, quic_tokens: tokens, ..Default::default() };
        let r = start(base(config)).unwrap();
        let addr = r.address(Transport::Doq).unwrap();
        rt().block_on(async {
            let (ep, cc) = quic_client(r.ca_pem().unwrap(), b"doq", true);
            let conn = ep.connect_with(cc.clone(), addr, "localhost").unwrap().await.unwrap();
            let m = doq_query(&conn, "one.test").await.unwrap();
            let h = Header::parse(&m).unwrap();
            assert_eq!((h.id, h.ancount), (0, 1));
            // Wait for the ticket (and the tokens), then close.
            tokio::time::sleep(Duration::from_millis(100)).await;
            conn.close(0u32.into(), b"");
            // Resumed with 0-RTT: the query leaves before the handshake completes.
            let connecting = ep.connect_with(cc, addr, "localhost").unwrap();
            let (conn, accepted) = connecting.into_0rtt().map_err(|_| "no 0-RTT").unwrap();
            let m = doq_query(&conn, "two.test").await.unwrap();
            assert_eq!(Header::parse(&m).unwrap().ancount, 1);
            assert!(accepted.await, "0-RTT accepted");
            conn.close(0u32.into(), b"");
            ep.wait_idle().await;
        });
        let s = wait_stats(&r, |s| s.answered >= 2 && s.early_data >= 1);
        assert_eq!(s.answered, 2, "{s}");
        if tokens > 0 {
            assert!(s.retry_sent >= 1, "a Retry for the first connection: {s}");
            assert_eq!(s.quic_token_validated, 1, "the second validated by its token: {s}");
        } else {
            assert!(s.retry_sent >= 2, "a Retry per new connection: {s}");
            assert_eq!(s.quic_token_validated, 0, "{s}");
        }
        assert_eq!((s.early_data, s.tls_resumed), (1, 1), "{s}");
        r.stop();
    }
}

#[test]
fn fault_quic_stream_reset() {
    let faults = vec!["quic-stream-reset=1/2".parse::<Fault>().unwrap()];
    let r = start(base(ResponderConfig { doq_port: Some(0), faults, ..Default::default() })).unwrap();
    let addr = r.address(Transport::Doq).unwrap();
    rt().block_on(async {
        let (ep, cc) = quic_client(r.ca_pem().unwrap(), b"doq", false);
        let conn = ep.connect_with(cc, addr, "localhost").unwrap().await.unwrap();
        assert!(doq_query(&conn, "a.test").await.is_ok());
        match doq_query(&conn, "b.test").await {
            Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code))) => assert_eq!(code.into_inner(), 1),
            other => panic!("expected a reset, got {other:?}"),
        }
        assert!(doq_query(&conn, "c.test").await.is_ok());
        conn.close(0u32.into(), b"");
    });
    r.stop();
}

/// A message that is no query (shorter than a header, or a response) has no ID to answer:
/// over DoH it is refused with 400, over DoQ its stream is reset (DOQ_PROTOCOL_ERROR), never
/// held unanswered; the connection goes on serving.
#[test]
fn requests_without_a_query_are_refused() {
    let r = start(all_encrypted()).unwrap();
    let ca = ca_file(&r);
    let mut response = query(0, "a.test", QType::A);
    response[2] |= 0x80;
    let not_queries: [&[u8]; 3] = [b"", b"\0\0\0", &response];
    for (scheme, transport, http) in [
        ("https", Transport::Doh, HttpVersion::Http2),
        ("https", Transport::Doh, HttpVersion::Http1),
        ("h3", Transport::Doh3, HttpVersion::Http3),
    ] {
        let tg = target(scheme, r.address(transport).unwrap(), "");
        for method in [DohMethod::Post, DohMethod::Get] {
            for m in not_queries {
                let e = exchange_with(&tg, tg.scheme, m, Duration::from_secs(5), &opts(&ca, http, method))
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("400"), "{http:?} {method:?} {m:?}: {e}");
            }
        }
    }
    let addr = r.address(Transport::Doq).unwrap();
    rt().block_on(async {
        let (ep, cc) = quic_client(r.ca_pem().unwrap(), b"doq", false);
        let conn = ep.connect_with(cc, addr, "localhost").unwrap().await.unwrap();
        for m in not_queries {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(&frame(m)).await.unwrap();
            send.finish().unwrap();
            match tokio::time::timeout(Duration::from_secs(5), recv.read_to_end(65_537)).await {
                Ok(Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code)))) => {
                    assert_eq!(code.into_inner(), 2, "DOQ_PROTOCOL_ERROR for {m:?}")
                }
                other => panic!("expected a reset for {m:?}, got {other:?}"),
            }
        }
        // The connection still answers.
        let m = doq_query(&conn, "after.test").await.unwrap();
        assert_eq!(Header::parse(&m).unwrap().ancount, 1);
        conn.close(0u32.into(), b"");
    });
    // Counted as dropped: every one but the three empty GETs (`?dns=` with nothing: refused
    // before there is a message to count).
    let s = wait_stats(&r, |s| s.dropped >= 18);
    assert_eq!((s.dropped, s.answered), (18, 1), "{s}");
    r.stop();
}

// ------------------------------------------------------------------------------------------
// Faults over TCP, DoT and HTTP

#[test]
fn fault_tcp_reset_after() {
    let faults = vec!["tcp-reset-after=2".parse::<Fault>().unwrap()];
    let r = start(ResponderConfig { udp_port: None, threads: 1, faults, ..Default::default() }).unwrap();
    let mut t = TcpStream::connect(r.address(Transport::Tcp).unwrap()).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for id in 1..=2u16 {
        t.write_all(&frame(&query(id, "a.test", QType::A))).unwrap();
        let mut len = [0u8; 2];
        t.read_exact(&mut len).unwrap();
        let mut m = vec![0; u16::from_be_bytes(len) as usize];
        t.read_exact(&mut m).unwrap();
        assert_eq!(Header::parse(&m).unwrap().id, id);
    }
    t.write_all(&frame(&query(3, "a.test", QType::A))).unwrap();
    let mut buf = [0u8; 64];
    let e = t.read(&mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    r.stop();
}

#[test]
fn fault_http_status_and_content_type() {
    let q = query(0, "www.example.test", QType::A);
    for (fault, want) in [("http-status=503", "HTTP status"), ("content-type=text/plain", "content type")] {
        let faults = vec![fault.parse::<Fault>().unwrap()];
        let r = start(base(ResponderConfig { doh_port: Some(0), doh3_port: Some(0), faults, ..Default::default() }))
            .unwrap();
        let ca = ca_file(&r);
        for (scheme, transport, http) in [
            ("https", Transport::Doh, HttpVersion::Http2),
            ("https", Transport::Doh, HttpVersion::Http1),
            ("h3", Transport::Doh3, HttpVersion::Http3),
        ] {
            let tg = target(scheme, r.address(transport).unwrap(), "");
            let e = exchange_with(&tg, tg.scheme, &q, Duration::from_secs(5), &opts(&ca, http, DohMethod::Post))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{fault} {http:?}: {e}");
        }
        r.stop();
    }
}

/// A blocking-free HTTP/2 client over TLS: (send handle, connection task).
async fn h2_client(
    addr: SocketAddr,
    ca_pem: &str,
) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
    let cfg = client_config(ca_pem, &[b"h2"], false);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls =
        tokio_rustls::TlsConnector::from(cfg).connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    (send, tokio::spawn(conn))
}

async fn h2_get(send: &mut h2::client::SendRequest<Bytes>) -> Result<http::StatusCode, h2::Error> {
    let req = http::Request::get("https://localhost/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB")
        .body(())
        .unwrap();
    let mut ready = send.clone().ready().await?;
    let (resp, _) = ready.send_request(req, true)?;
    let resp = resp.await?;
    let status = resp.status();
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok(status)
}

/// A DoH responder with `faults`: it, its address and its CA.
fn doh_with_faults(faults: &[&str]) -> (volley_responder::Responder, SocketAddr, String) {
    let faults = faults.iter().map(|f| f.parse::<Fault>().unwrap()).collect();
    let r = start(base(ResponderConfig { doh_port: Some(0), faults, ..Default::default() })).unwrap();
    let (addr, ca) = (r.address(Transport::Doh).unwrap(), r.ca_pem().unwrap().to_string());
    (r, addr, ca)
}

#[test]
fn fault_rst_stream_and_goaway() {
    let (r, addr, ca) = doh_with_faults(&["rst-stream=1/3", "goaway-after=4"]);
    rt().block_on(async {
        let (mut send, conn) = h2_client(addr, &ca).await;
        assert_eq!(h2_get(&mut send).await.unwrap(), 200);
        assert_eq!(h2_get(&mut send).await.unwrap(), 200);
        let e = h2_get(&mut send).await.unwrap_err();
        assert_eq!(e.reason(), Some(h2::Reason::INTERNAL_ERROR), "{e}");
        // The 4th request is answered, then GOAWAY: the connection ends by itself.
        assert_eq!(h2_get(&mut send).await.unwrap(), 200);
        let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
        assert!(ended.is_ok(), "connection closed after GOAWAY");
        assert!(h2_get(&mut send).await.is_err());
    });
    r.stop();
}

/// `refuse-stream=1/3`: every third HTTP/2 request is refused unread (REFUSED_STREAM), and not
/// counted as a query; the connection goes on.
#[test]
fn fault_refuse_stream() {
    let (r, addr, ca) = doh_with_faults(&["refuse-stream=1/3"]);
    rt().block_on(async {
        let (mut send, _conn) = h2_client(addr, &ca).await;
        assert_eq!(h2_get(&mut send).await.unwrap(), 200);
        assert_eq!(h2_get(&mut send).await.unwrap(), 200);
        let e = h2_get(&mut send).await.unwrap_err();
        assert!(e.is_reset() && e.is_remote(), "{e}");
        assert_eq!(e.reason(), Some(h2::Reason::REFUSED_STREAM), "{e}");
        assert_eq!(h2_get(&mut send).await.unwrap(), 200);
    });
    let s = wait_stats(&r, |s| s.answered >= 3);
    assert_eq!((s.queries, s.answered, s.dropped), (3, 3, 0), "the refused request is no query: {s:?}");
    r.stop();
}

#[test]
fn config_errors() {
    let e = start(ResponderConfig {
        dot_port: Some(0),
        tls: TlsConfig { zero_rtt: true, tickets: false, ..TlsConfig::default() },
        ..ResponderConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("0-RTT"), "{e}");
    let e = start(base(ResponderConfig { doh_port: Some(0), doh_path: "x".into(), ..Default::default() })).unwrap_err();
    assert!(e.to_string().contains("path"), "{e}");
    let e = start(base(ResponderConfig::default())).unwrap_err();
    assert!(e.to_string().contains("nothing to serve"), "{e}");
}
