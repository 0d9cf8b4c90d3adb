//! DNS over QUIC (RFC 9250) on quinn: ALPN `doq`, one bidirectional stream per query, the
//! message with a 2-byte length prefix and ID 0, the client finishing its side after the
//! query. One quinn endpoint (UDP socket) per lane, one connection at a time on it.
//!
//! Also the QUIC connection set-up HTTP/3 shares: TLS from `tls`, handshake time, RTT,
//! resumption and 0-RTT, and the address validation tokens the server gives (NEW_TOKEN),
//! kept for the next connection ([`Client`]).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use quinn::{ConnectionError, ReadError, WriteError};
use volley_metrics::{Close, EarlyData, ErrorKind, Handshake, Wait};

use crate::https::ConnEnd;
use crate::meter;
use crate::qlog::StreamState;
use crate::stamp::{RxStamp, StampedUdp};
use crate::stream;
use crate::tls::{self, SeenVerify};
use crate::{Exchange, Lane, LaneOptions, Target, Token};

/// ALPN protocol of DoQ.
pub const ALPN: &[u8] = b"doq";
/// DOQ_NO_ERROR, the code of a clean close.
const DOQ_NO_ERROR: u32 = 0;
/// DOQ_REQUEST_CANCELLED: the client gave up a query.
const DOQ_REQUEST_CANCELLED: u32 = 3;

/// A client endpoint (its own UDP socket) for connections to `to`, from `local` (any address
/// when `None`), and the receive time of the newest datagram it read (and with `tx`, the
/// kernel's transmit stamps of the datagrams it sends).
pub(crate) fn endpoint(
    to: SocketAddr,
    local: Option<std::net::IpAddr>,
    tx: bool,
) -> std::io::Result<(quinn::Endpoint, RxStamp)> {
    let any: std::net::IpAddr =
        if to.is_ipv6() { std::net::Ipv6Addr::UNSPECIFIED.into() } else { std::net::Ipv4Addr::UNSPECIFIED.into() };
    let ip = local.unwrap_or(any);
    let bound = (|| {
        let addr = SocketAddr::new(ip, 0);
        let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::DGRAM, None)?;
        if addr.is_ipv6() {
            let _ = s.set_only_v6(false);
        }
        s.bind(&addr.into())?;
        Ok(s)
    })();
    let socket: std::net::UdpSocket = bound
        .map_err(|e| match local {
            Some(ip) => crate::source::bind_error(ip, e),
            None => e,
        })?
        .into();
    let runtime = quinn::default_runtime().ok_or_else(|| std::io::Error::other("no async runtime"))?;
    let (socket, rx) = StampedUdp::wrap(socket, &runtime, tx)?;
    let ep = quinn::Endpoint::new_with_abstract_socket(quinn::EndpointConfig::default(), None, socket, runtime)?;
    Ok((ep, rx))
}

/// The error kind of a QUIC connection error.
pub fn conn_kind(e: &ConnectionError) -> ErrorKind {
    let crypto = |code: u64| match code {
        // no_application_protocol alert
        0x178 => Some(ErrorKind::Alpn),
        0x100..=0x1ff => Some(ErrorKind::Tls),
        _ => None,
    };
    match e {
        ConnectionError::TimedOut => ErrorKind::IdleTimeout,
        ConnectionError::Reset => ErrorKind::StatelessReset,
        ConnectionError::TransportError(t) => crypto(u64::from(t.code)).unwrap_or(ErrorKind::QuicClosed),
        ConnectionError::ConnectionClosed(c) => crypto(u64::from(c.error_code)).unwrap_or(ErrorKind::QuicClosed),
        _ => ErrorKind::QuicClosed,
    }
}

/// Who closed a QUIC connection, and how. A stateless reset is the server's reset of a
/// connection it no longer knows, as a TCP RST is.
pub fn close_of(e: &ConnectionError) -> Close {
    match e {
        ConnectionError::ConnectionClosed(_) | ConnectionError::ApplicationClosed(_) => Close::ServerQuicClose,
        ConnectionError::Reset => Close::ServerReset,
        ConnectionError::TimedOut => Close::IdleTimeout,
        ConnectionError::LocallyClosed => Close::ClientEnd,
        _ => Close::Error,
    }
}

/// The prefix of the event that tells the code of a CONNECTION_CLOSE the server ended a
/// connection (or a connection attempt) with: `server_quic_close_DOQ_NO_ERROR`.
pub const SERVER_CLOSE_EVENT: &str = "server_quic_close_";

/// The name of the code of a CONNECTION_CLOSE the peer sent, if it sent one: a transport error
/// by its RFC 9000 name (`CONNECTION_REFUSED`; TLS alerts as `CRYPTO_ERROR_0x178`), an
/// application error by its DoQ (RFC 9250) or HTTP/3 (RFC 9114, RFC 9204) name
/// (`DOQ_NO_ERROR`, `H3_NO_ERROR`), other codes in hex (`0x1f`).
pub fn close_code(e: &ConnectionError, h3: bool) -> Option<String> {
    Some(match e {
        ConnectionError::ConnectionClosed(c) => {
            let code = u64::from(c.error_code);
            match code {
                0x100..=0x1ff => format!("CRYPTO_ERROR_{code:#x}"),
                // quinn names the codes of RFC 9000 section 20.1 as the RFC does.
                0..=0x10 => format!("{:?}", c.error_code),
                _ => format!("{code:#x}"),
            }
        }
        ConnectionError::ApplicationClosed(c) => {
            let code = c.error_code.into_inner();
            let name = if h3 { h3_code_name(code) } else { doq_code_name(code) };
            name.map_or_else(|| format!("{code:#x}"), str::to_string)
        }
        _ => return None,
    })
}

/// DoQ error codes (RFC 9250 section 8.4).
fn doq_code_name(code: u64) -> Option<&'static str> {
    Some(match code {
        0x0 => "DOQ_NO_ERROR",
        0x1 => "DOQ_INTERNAL_ERROR",
        0x2 => "DOQ_PROTOCOL_ERROR",
        0x3 => "DOQ_REQUEST_CANCELLED",
        0x4 => "DOQ_EXCESSIVE_LOAD",
        0x5 => "DOQ_UNSPECIFIED_ERROR",
        0xd098_ea5e => "DOQ_ERROR_RESERVED",
        _ => return None,
    })
}

/// HTTP/3 error codes (RFC 9114 section 8.1) and QPACK's (RFC 9204 section 6).
fn h3_code_name(code: u64) -> Option<&'static str> {
    Some(match code {
        0x100 => "H3_NO_ERROR",
        0x101 => "H3_GENERAL_PROTOCOL_ERROR",
        0x102 => "H3_INTERNAL_ERROR",
        0x103 => "H3_STREAM_CREATION_ERROR",
        0x104 => "H3_CLOSED_CRITICAL_STREAM",
        0x105 => "H3_FRAME_UNEXPECTED",
        0x106 => "H3_FRAME_ERROR",
        0x107 => "H3_EXCESSIVE_LOAD",
        0x108 => "H3_ID_ERROR",
        0x109 => "H3_SETTINGS_ERROR",
        0x10a => "H3_MISSING_SETTINGS",
        0x10b => "H3_REQUEST_REJECTED",
        0x10c => "H3_REQUEST_CANCELLED",
        0x10d => "H3_REQUEST_INCOMPLETE",
        0x10e => "H3_MESSAGE_ERROR",
        0x10f => "H3_CONNECT_ERROR",
        0x110 => "H3_VERSION_FALLBACK",
        0x200 => "QPACK_DECOMPRESSION_FAILED",
        0x201 => "QPACK_ENCODER_STREAM_ERROR",
        0x202 => "QPACK_DECODER_STREAM_ERROR",
        _ => return None,
    })
}

/// Counts the code of the CONNECTION_CLOSE that ended a connection or an attempt, when the
/// server sent one (event `server_quic_close_CODE`).
fn note_close_code<X: Exchange + ?Sized>(x: &X, e: &ConnectionError, h3: bool) {
    if let Some(code) = close_code(e, h3) {
        x.event(&format!("{SERVER_CLOSE_EVENT}{code}"));
    }
}

/// What a QUIC lane's connections share: the TLS configuration (with its session store) and
/// the store of address validation tokens.
pub(crate) struct Client {
    tls: Arc<rustls::ClientConfig>,
    /// The tokens servers sent in NEW_TOKEN frames (RFC 9000 section 8.1.3), each presented
    /// once by a later connection to the same server name; None: none kept (`--quic-tokens
    /// off`), every connection's address unvalidated until its handshake.
    tokens: Option<Arc<dyn quinn::TokenStore>>,
}

impl Client {
    /// The lane's client: `tls`, and a token store shared by every lane of this thread (as
    /// the TLS session store is), or with `own_sessions` (simulated clients) one of the
    /// lane's own. Both are bounded: 256 server names with 2 tokens each for the thread, 4
    /// with 2 for a lane.
    pub(crate) fn new(tls: Arc<rustls::ClientConfig>, opts: &LaneOptions) -> Client {
        thread_local! {
            static TOKENS: Arc<quinn::TokenMemoryCache> = Arc::new(quinn::TokenMemoryCache::new(256, 2));
        }
        let tokens: Option<Arc<dyn quinn::TokenStore>> = match (opts.quic_tokens, opts.own_sessions) {
            (false, _) => None,
            (true, false) => Some(TOKENS.with(Arc::clone)),
            (true, true) => Some(Arc::new(quinn::TokenMemoryCache::new(4, 2))),
        };
        Client { tls, tokens }
    }
}

/// One connection's view of its lane's token store: the store's, and whether the connection
/// took a token to present in its Initial (quinn takes it when the connection is made).
struct Presented {
    store: Arc<dyn quinn::TokenStore>,
    took: std::sync::atomic::AtomicBool,
}

impl quinn::TokenStore for Presented {
    fn insert(&self, server_name: &str, token: Bytes) {
        self.store.insert(server_name, token);
    }

    fn take(&self, server_name: &str) -> Option<Bytes> {
        let t = self.store.take(server_name);
        if t.is_some() {
            self.took.store(true, Ordering::Relaxed);
        }
        t
    }
}

/// Client configuration of one connection: the worker's shared TLS config (its session
/// store) behind a verifier that tells whether the handshake was a full one, and the lane's
/// token store behind a [`Presented`] that tells whether the connection presented a token
/// (None without tokens: quinn's default, a store of the connection's own, stays empty).
#[allow(clippy::type_complexity)]
fn connection_config(
    client: &Client,
    h3: bool,
    idle: Duration,
    gso: bool,
    qlog: Option<quinn::QlogStream>,
) -> Result<(quinn::ClientConfig, Arc<std::sync::atomic::AtomicBool>, Option<Arc<Presented>>), String> {
    let (c, seen) = SeenVerify::connection(&client.tls);
    let q =
        quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(c)).map_err(|e| format!("QUIC TLS config: {e}"))?;
    let mut cc = quinn::ClientConfig::new(Arc::new(q));
    let presented = client.tokens.as_ref().map(|store| {
        let p = Arc::new(Presented { store: store.clone(), took: Default::default() });
        cc.token_store(p.clone());
        p
    });
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    if !h3 {
        // DoQ servers open no streams towards the client.
        t.max_concurrent_uni_streams(0u32.into());
    }
    t.max_concurrent_bidi_streams(0u32.into());
    t.enable_segmentation_offload(gso);
    t.qlog_stream(qlog);
    cc.transport_config(Arc::new(t));
    Ok((cc, seen, presented))
}

/// The client's QUIC idle timeout (max_idle_timeout; the connection's is the smaller of both
/// sides'): 30 s, as quinn, quic-go and browsers use, or longer when the run needs it: never
/// shorter than the query timeout (a query still waiting for its answer is not cut short by
/// the client's own timer), and twice the client's `--idle-timeout`, so that this policy, not
/// QUIC's timer, closes an idle connection (as `client_idle`).
fn idle_timeout(opts: &LaneOptions) -> Duration {
    let policy = opts.conn.idle.map_or(Duration::ZERO, |d| d.saturating_mul(2));
    Duration::from_secs(30).max(opts.query_timeout).max(policy)
}

/// Opens a QUIC connection and reports it (`conn_opened` once the handshake is done; with
/// 0-RTT, when the server has said whether it took the early data, while the connection is
/// already usable).
pub(crate) async fn connect<X: Exchange + 'static>(
    ep: &quinn::Endpoint,
    target: &Target,
    client: &Client,
    opts: &LaneOptions,
    x: &Rc<X>,
    h3: bool,
) -> Result<quinn::Connection, (ErrorKind, String)> {
    let (qlog, trace) = opts
        .qlog
        .as_deref()
        .and_then(|dir| {
            let what = if h3 { "DoH/3" } else { "DoQ" };
            crate::qlog::stream(dir, "client", h3, format!("volley {what} client to {target}"))
        })
        .unzip();
    let traced = |conn: &quinn::Connection| {
        if let Some(t) = &trace {
            crate::qlog::register(conn, t);
        }
    };
    let (cc, seen, presented) =
        connection_config(client, h3, idle_timeout(opts), opts.udp_gso, qlog).map_err(|e| (ErrorKind::Tls, e))?;
    let name = opts.tls.sni.as_deref().unwrap_or(&target.host);
    let began = x.now();
    let connecting = ep
        .connect_with(cc, target.addr, name)
        .map_err(|e| (ErrorKind::Connect, format!("QUIC connect to {target}: {e}")))?;
    // quinn took the token (if any) as it made the connection.
    let token = presented.is_some_and(|p| p.took.load(Ordering::Relaxed));
    let failed = |e: ConnectionError| {
        note_close_code(&**x, &e, h3);
        let kind = conn_kind(&e);
        let what = if matches!(kind, ErrorKind::Tls | ErrorKind::Alpn) { "TLS handshake" } else { "QUIC handshake" };
        let why = match &e {
            ConnectionError::TransportError(t) if kind != ErrorKind::QuicClosed => tls::tidy(&t.reason),
            e => e.to_string(),
        };
        (kind, format!("{what} with {target} failed: {why}"))
    };
    let report = move |x: &X, conn: &quinn::Connection, early: EarlyData, resumed: bool, now: u64| {
        let alpn = conn
            .handshake_data()
            .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
            .and_then(|d| d.protocol)
            .map(|p| String::from_utf8_lossy(&p).into_owned());
        let h = Handshake {
            quic_ns: Some(now.saturating_sub(began)),
            rtt_ns: Some(conn.rtt().as_nanos() as u64),
            resumed,
            token,
            early_data: early,
            // QUIC v1 runs on TLS 1.3 only (RFC 9001 section 4.2). No cipher suite: quinn
            // (0.11) does not tell which one the handshake agreed on.
            tls_version: Some("TLSv1.3"),
            alpn,
            ..Handshake::default()
        };
        x.conn_opened(&h, now);
    };
    if client.tls.enable_early_data {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                traced(&conn);
                let (x2, c2) = (x.clone(), conn.clone());
                tokio::task::spawn_local(async move {
                    let ok = accepted.await;
                    if c2.close_reason().is_none() {
                        let early = if ok { EarlyData::Accepted } else { EarlyData::Rejected };
                        report(&x2, &c2, early, ok || !seen.load(Ordering::Relaxed), x2.now());
                    }
                });
                return Ok(conn);
            }
            Err(connecting) => {
                let left = opts.connect_timeout;
                let conn = match tokio::time::timeout(left, connecting).await {
                    Ok(r) => r.map_err(failed)?,
                    Err(_) => return Err((ErrorKind::Connect, format!("QUIC handshake with {target} timed out"))),
                };
                traced(&conn);
                report(x, &conn, EarlyData::NotOffered, !seen.load(Ordering::Relaxed), x.now());
                return Ok(conn);
            }
        }
    }
    let conn = match tokio::time::timeout(opts.connect_timeout, connecting).await {
        Ok(r) => r.map_err(failed)?,
        Err(_) => return Err((ErrorKind::Connect, format!("QUIC handshake with {target} timed out"))),
    };
    traced(&conn);
    report(x, &conn, EarlyData::NotOffered, !seen.load(Ordering::Relaxed), x.now());
    Ok(conn)
}

/// Opens a connection, retrying with backoff, with the lane's receive stamps; None when the
/// lane closes first. The lane's client and endpoint are made for its first attempt, once
/// that may begin ([`Setup`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn open<X: Exchange + 'static>(
    setup: &mut Option<Setup>,
    target: &Target,
    opts: &LaneOptions,
    lane: &Lane,
    x: &Rc<X>,
    h3: bool,
    backoff: &mut Duration,
) -> Option<(quinn::Connection, RxStamp)> {
    loop {
        if !crate::stream::may_connect(lane, opts).await {
            return None;
        }
        if setup.is_none() {
            *setup = Some(lane_setup(target, lane, &**x, opts, if h3 { crate::h3::ALPN } else { ALPN }).await?);
        }
        let Setup { client, ep, rx } = setup.as_ref()?;
        // None: the lane closed during the attempt (in progress at the end).
        match stream::attempt(lane, connect(ep, target, client, opts, x, h3)).await? {
            Ok(c) => {
                *backoff = stream::BACKOFF;
                return Some((c, rx.clone()));
            }
            Err((kind, why)) => {
                x.conn_failed_why(kind, &why, x.now());
                if stream::after_failure(lane, &**x, kind, backoff).await {
                    return None;
                }
            }
        }
    }
}

/// Closes a connection with `code` (nothing happens when it is closed already) and reports its
/// datagrams on the wire once the close has left ([`meter::close_quic`]).
pub(crate) fn close_and_report<X: Exchange + 'static>(conn: &quinn::Connection, code: u32, lane: &Rc<Lane>, x: &Rc<X>) {
    meter::close_quic(conn, code, lane, x);
}

/// What a QUIC lane does once the queries queued so far are sent.
pub(crate) enum Next {
    /// More queries came: send them on this connection.
    Serve,
    /// The client's policy ends this connection (nothing is outstanding).
    Turn(Close),
    /// The connection ended (the server closed it, or it failed).
    Ended,
    /// The run is over: the connection was closed (`code`) and reported.
    Closed,
}

/// Waits, between bursts, for more queries, the policy's turn or the connection's end; at the
/// end of the run closes the connection with `code`, unless the server closed it first.
pub(crate) async fn after_burst<X: Exchange + 'static>(
    conn: &quinn::Connection,
    code: u32,
    lane: &Rc<Lane>,
    x: &Rc<X>,
    end: &ConnEnd,
) -> Next {
    if end.ended().is_some() || conn.close_reason().is_some() {
        return Next::Ended;
    }
    if lane.closing() {
        close_and_report(conn, code, lane, x);
        // A 0-RTT connection not reported opened yet: its attempt is in progress at the end.
        if !lane.attempting() {
            x.conn_closed(Close::ClientEnd, x.now());
        }
        return Next::Closed;
    }
    tokio::select! {
        turn = lane.wait_turn() => turn.map_or(Next::Serve, Next::Turn),
        _ = end.wait() => Next::Ended,
    }
}

/// How a connection that ended did: as its watcher told, or from quinn when the watcher has
/// not run yet.
pub(crate) fn ended_as(conn: &quinn::Connection, end: &ConnEnd) -> Close {
    end.ended().or_else(|| conn.close_reason().as_ref().map(close_of)).unwrap_or(Close::Error)
}

/// Watches a connection: tells `end` how it closed, and counts the code of the server's
/// CONNECTION_CLOSE.
pub(crate) fn watch<X: Exchange + 'static>(conn: &quinn::Connection, x: &Rc<X>, h3: bool) -> Rc<ConnEnd> {
    let end = Rc::new(ConnEnd::default());
    let (c, e, x) = (conn.clone(), end.clone(), x.clone());
    tokio::task::spawn_local(async move {
        let why = c.closed().await;
        note_close_code(&*x, &why, h3);
        e.end(close_of(&why), conn_kind(&why));
    });
    end
}

/// What a QUIC lane needs for its connections: its client (TLS, tokens) and its endpoint (a
/// socket of its own, and the receive stamps of what it reads).
pub(crate) struct Setup {
    client: Client,
    ep: quinn::Endpoint,
    rx: RxStamp,
}

/// Sets up what a QUIC lane needs, or fails its queries until it closes. Made when the lane's
/// first attempt may begin, after its slot under `--conn-rate`, not when the lane starts:
/// 10,000 lanes that each made their socket and endpoint at their start kept the thread from
/// connecting for about 2 s, while their slots passed, and then connected all at once, more
/// handshakes than the server would take.
async fn lane_setup<X: Exchange>(
    target: &Target,
    lane: &Lane,
    x: &X,
    opts: &LaneOptions,
    alpn: &[u8],
) -> Option<Setup> {
    let cfg = match tls::lane_config(opts, &[alpn], true) {
        Ok(c) => c,
        Err(e) => {
            x.conn_failed_why(ErrorKind::Tls, &e.to_string(), x.now());
            stream::fail_forever(lane, x, ErrorKind::Tls).await;
            return None;
        }
    };
    match endpoint(target.addr, opts.local, opts.tx_stamps.is_some()) {
        Ok((ep, rx)) => Some(Setup { client: Client::new(cfg, opts), ep, rx }),
        Err(e) => {
            x.conn_failed_why(ErrorKind::Io, &format!("QUIC socket: {e}"), x.now());
            stream::fail_forever(lane, x, ErrorKind::Io).await;
            None
        }
    }
}

/// The driver of one DoQ lane. Every connection reports its datagrams on the wire when it
/// closes (quinn's statistics; attempts whose handshake failed are not counted).
pub async fn drive<X: Exchange + 'static>(target: Target, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    let mut setup = None;
    let mut backoff = stream::BACKOFF;
    let mut msg = Vec::with_capacity(512);
    loop {
        let Some((conn, rx)) = open(&mut setup, &target, &opts, &lane, &x, false, &mut backoff).await else { return };
        let end = watch(&conn, &x, false);
        let on = Rc::new(stream::Outstanding::default());
        let mut turned = None;
        loop {
            while end.ended().is_none() {
                let Some(t) = lane.pop() else { break };
                if !x.encode(t, 0, &mut msg) {
                    continue;
                }
                let mut framed = BytesMut::with_capacity(msg.len() + 2);
                framed.put_u16(msg.len() as u16);
                framed.put_slice(&msg);
                let q = query(
                    x.clone(),
                    lane.clone(),
                    conn.clone(),
                    rx.clone(),
                    t,
                    framed.freeze(),
                    opts.query_timeout,
                    on.enter(),
                );
                tokio::task::spawn_local(q);
            }
            match after_burst(&conn, DOQ_NO_ERROR, &lane, &x, &end).await {
                Next::Serve => {}
                Next::Turn(how) => {
                    turned = Some(how);
                    break;
                }
                Next::Ended => break,
                Next::Closed => return,
            }
        }
        if let Some(how) = turned {
            end_of_life(conn, end, on, DOQ_NO_ERROR, how, &lane, &x);
            if stream::after_turn(&lane, how).await {
                return;
            }
            continue;
        }
        // Closed by the server (or lost): its statistics are final.
        close_and_report(&conn, DOQ_NO_ERROR, &lane, &x);
        report_end(&lane, &*x, &conn, ended_as(&conn, &end));
        if stream::after_server_close(&lane, &mut backoff).await {
            return;
        }
    }
}

/// Ends a connection the client's policy is done with (`how`): closes it with `code` at once
/// when nothing is outstanding on it; otherwise it drains its queries in the background
/// ([`stream::drain_streams`]) while the lane goes on on a new connection, then closes.
pub(crate) fn end_of_life<X: Exchange + 'static>(
    conn: quinn::Connection,
    end: Rc<ConnEnd>,
    on: Rc<stream::Outstanding>,
    code: u32,
    how: Close,
    lane: &Rc<Lane>,
    x: &Rc<X>,
) {
    if on.count() == 0 {
        close_and_report(&conn, code, lane, x);
        report_end(lane, &**x, &conn, how);
        return;
    }
    let (lane, x) = (lane.clone(), x.clone());
    tokio::task::spawn_local(async move {
        let ended = async {
            end.wait().await;
            ended_as(&conn, &end)
        };
        let close = stream::drain_streams(&lane, &*x, &on, how, ended).await;
        close_and_report(&conn, code, &lane, &x);
        // Reported opened before it began to drain (the lane's attempt now is another's).
        x.conn_closed(close, x.now());
    });
}

/// Reports how a connection ended: closed (`how`); or, for a 0-RTT connection whose handshake
/// had not finished (the lane's attempt not yet reported opened: it was usable at once, but
/// the server closed it first), a failed attempt, so that every attempt has one fate.
pub(crate) fn report_end<X: Exchange + ?Sized>(lane: &Lane, x: &X, conn: &quinn::Connection, how: Close) {
    if lane.attempting() {
        let kind = conn.close_reason().map_or(ErrorKind::QuicClosed, |e| conn_kind(&e));
        x.conn_failed_why(kind, "the QUIC handshake did not finish before the connection ended (0-RTT)", x.now());
    } else {
        x.conn_closed(how, x.now());
    }
}

/// The error kind of a failed stream write.
pub(crate) fn write_kind(e: &WriteError) -> ErrorKind {
    match e {
        WriteError::Stopped(_) => ErrorKind::QuicStreamReset,
        WriteError::ConnectionLost(c) => conn_kind(c),
        _ => ErrorKind::QuicClosed,
    }
}

/// The error kind of a failed stream read.
pub(crate) fn read_kind(e: &ReadError) -> ErrorKind {
    match e {
        ReadError::Reset(_) => ErrorKind::QuicStreamReset,
        ReadError::ConnectionLost(c) => conn_kind(c),
        _ => ErrorKind::QuicClosed,
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    Kind(ErrorKind),
    /// The server refused the 0-RTT data: send again on the established connection.
    ZeroRttRejected,
}

/// A query's stream that is cancelled if it is dropped before its answer was read (the
/// query timed out): STOP_SENDING and, where the query is not all acknowledged yet,
/// RESET_STREAM, both with DOQ_REQUEST_CANCELLED as RFC 9250 section 4.3 asks (quinn's own
/// drop would stop it with code 0).
struct Cancelling {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    /// Its answer was read, or it failed: nothing to cancel.
    done: bool,
}

impl Drop for Cancelling {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.recv.stop(DOQ_REQUEST_CANCELLED.into());
            let _ = self.send.reset(DOQ_REQUEST_CANCELLED.into());
        }
    }
}

/// How long a query task may wait for `t`'s answer: until the engine gives it up, so that a
/// query that waited for its stream is never sent after its fate was told (or `limit` when
/// the engine names no deadline).
pub(crate) fn time_left<X: Exchange + ?Sized>(x: &X, t: Token, limit: Duration) -> Duration {
    x.deadline(t).map_or(limit, |d| Duration::from_nanos(d.saturating_sub(x.now())))
}

/// One DoQ query on its own stream; reports its fate. A query the connection's end left
/// unanswered goes to the lane's next connection ([`stream::unanswered`]). `on`: it is
/// outstanding on the connection until the task ends.
#[allow(clippy::too_many_arguments)]
async fn query<X: Exchange>(
    x: Rc<X>,
    lane: Rc<Lane>,
    conn: quinn::Connection,
    rx: RxStamp,
    t: Token,
    framed: Bytes,
    limit: Duration,
    mut on: stream::OnConn,
) {
    let once = |framed: Bytes| {
        let (x, conn, rx) = (&x, &conn, &rx);
        async move {
            let (send, recv) = stream_credit(&**x, t, conn.open_bi()).await.map_err(|e| Fail::Kind(conn_kind(&e)))?;
            let trace = crate::qlog::of(conn).map(|trace| (trace, u64::from(send.id())));
            if let Some((trace, id)) = &trace {
                trace.stream_state(*id, None, StreamState::Open);
            }
            let mut s = Cancelling { send, recv, done: false };
            let len = framed.len() - 2;
            let moved = framed.len() as u64;
            if let Err(e) = s.send.write_chunk(framed).await {
                s.done = true;
                return Err(match e {
                    WriteError::ZeroRttRejected => Fail::ZeroRttRejected,
                    e => Fail::Kind(write_kind(&e)),
                });
            }
            let _ = s.send.finish();
            x.sent(t, len, x.now());
            rx.left_one(t);
            if rx.many_sent() {
                rx.read_sent(&**x);
            }
            if let Some((trace, id)) = &trace {
                trace.data_moved(*id, 0, moved, true);
                trace.stream_state(*id, Some(StreamState::Open), StreamState::HalfClosedLocal);
            }
            let r = read_answer(&mut s.recv).await;
            s.done = true;
            if let (Some((trace, id)), Ok(data)) = (&trace, &r) {
                trace.data_moved(*id, 0, data.len() as u64, false);
                trace.stream_state(*id, Some(StreamState::HalfClosedLocal), StreamState::Closed);
            }
            r
        }
    };
    let left = time_left(&*x, t, limit);
    if left.is_zero() {
        // Given up already (the engine tells its fate): it never leaves.
        return;
    }
    let r = tokio::time::timeout(left, twice(|| once(framed.clone()))).await;
    // The departures first: the answer's time needs them.
    rx.read_sent(&*x);
    let now = rx.arrival(&*x);
    match r.as_ref().map(fate) {
        Ok(Fate::Answer(m)) => {
            on.answered();
            x.response(t, m, now)
        }
        Ok(Fate::Failed(k)) => x.failed(t, k, now),
        Ok(Fate::Unanswered(k)) => stream::unanswered(&lane, &*x, &[t], k),
        // Timed out by the engine (now or a moment later); the stream, if it was opened, was
        // cancelled.
        Err(_) => {}
    }
}

/// The largest DoQ answer stream read: a 2-byte length and the largest DNS message.
const MAX_STREAM: usize = 2 + 65_535;

/// The receiving side of a query's stream, as [`read_answer`] reads it: quinn's, or the fuzz
/// targets' scripted streams.
pub(crate) trait AnswerStream {
    /// The stream's next bytes, in order; None: its end (FIN).
    async fn chunk(&mut self) -> Result<Option<Bytes>, ReadError>;
    /// Stops the stream (STOP_SENDING with DOQ_REQUEST_CANCELLED): its answer is too long.
    fn stop(&mut self);
}

impl AnswerStream for quinn::RecvStream {
    async fn chunk(&mut self) -> Result<Option<Bytes>, ReadError> {
        Ok(self.read_chunk(usize::MAX, true).await?.map(|c| c.bytes))
    }

    fn stop(&mut self) {
        let _ = quinn::RecvStream::stop(self, DOQ_REQUEST_CANCELLED.into());
    }
}

/// Reads a query's stream to its end (FIN), as quinn's `read_to_end` with a limit of
/// [`MAX_STREAM`] bytes: the bytes, or why there are none (a longer stream is stopped and
/// malformed; a reset, a lost connection or refused 0-RTT data end it with their error).
pub(crate) async fn read_answer<S: AnswerStream>(s: &mut S) -> Result<Vec<u8>, Fail> {
    let mut data = Vec::new();
    while let Some(c) = s.chunk().await.map_err(|e| match e {
        ReadError::ZeroRttRejected => Fail::ZeroRttRejected,
        e => Fail::Kind(read_kind(&e)),
    })? {
        if data.len() + c.len() > MAX_STREAM {
            s.stop();
            return Err(Fail::Kind(ErrorKind::Malformed));
        }
        data.extend_from_slice(&c);
    }
    Ok(data)
}

/// Reads a query's answer with `once`, and once more where the server refused its 0-RTT
/// data (the query is sent again on the established connection).
pub(crate) async fn twice<F: std::future::Future<Output = Result<Vec<u8>, Fail>>>(
    mut once: impl FnMut() -> F,
) -> Result<Vec<u8>, Fail> {
    match once().await {
        Err(Fail::ZeroRttRejected) => once().await,
        r => r,
    }
}

/// What a query's stream came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fate<'a> {
    /// The DNS message it carried.
    Answer(&'a [u8]),
    /// The query failed with this kind.
    Failed(ErrorKind),
    /// Its stream ended without an answer: sent again on the next connection where the kind
    /// allows ([`stream::unanswered`]), else failed.
    Unanswered(ErrorKind),
}

/// The fate of a query whose stream was read to `r` (after one more try where the server
/// refused its 0-RTT data).
pub(crate) fn fate(r: &Result<Vec<u8>, Fail>) -> Fate<'_> {
    match r {
        Ok(data) => match unframe(data) {
            Some(m) => Fate::Answer(m),
            None => Fate::Failed(ErrorKind::Malformed),
        },
        Err(Fail::Kind(k)) => Fate::Unanswered(*k),
        Err(Fail::ZeroRttRejected) => Fate::Failed(ErrorKind::QuicClosed),
    }
}

/// Opens query `t`'s stream (`open`): when the server's MAX_STREAMS allows no more yet, the
/// query waits for stream credit, and the engine is told how long ([`Exchange::waited`]).
pub(crate) async fn stream_credit<X: Exchange + ?Sized, F: std::future::Future>(x: &X, t: Token, open: F) -> F::Output {
    let mut open = std::pin::pin!(open);
    if let std::task::Poll::Ready(r) =
        std::future::poll_fn(|cx| std::task::Poll::Ready(std::future::Future::poll(open.as_mut(), cx))).await
    {
        return r;
    }
    let began = x.now();
    let r = open.await;
    x.waited(t, Wait::StreamCredit, x.now().saturating_sub(began));
    r
}

/// The DNS message in a DoQ stream: a 2-byte length, then exactly that many bytes.
pub fn unframe(data: &[u8]) -> Option<&[u8]> {
    let len = u16::from_be_bytes([*data.first()?, *data.get(1)?]) as usize;
    (data.len() == 2 + len).then(|| &data[2..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token stores of lanes: one per thread shared by its lanes (a token a connection of
    /// one lane got is presented by the next connection of any), one per lane with
    /// `own_sessions` (simulated clients), none with `--quic-tokens off`; each connection's
    /// [`Presented`] tells whether it took one.
    #[test]
    fn lanes_of_a_thread_share_their_quic_tokens() {
        crate::tls::install_crypto_provider();
        let tls = tls::client_config(&tls::TlsSettings::default(), &[ALPN], true).unwrap();
        let opts = LaneOptions::default();
        let (a, b) = (Client::new(tls.clone(), &opts), Client::new(tls.clone(), &opts));
        let presented = |c: &Client| Presented { store: c.tokens.clone().unwrap(), took: Default::default() };
        use quinn::TokenStore;
        let (got, next) = (presented(&a), presented(&b));
        got.insert("dns.example", Bytes::from_static(b"token"));
        assert!(!got.took.load(Ordering::Relaxed), "inserting is not presenting");
        assert_eq!(next.take("dns.example").as_deref(), Some(&b"token"[..]), "lane b takes lane a's token");
        assert!(next.took.load(Ordering::Relaxed));
        assert!(next.take("dns.example").is_none(), "a token is presented once");
        // Another thread has a store of its own.
        let elsewhere = std::thread::spawn({
            let (tls, opts) = (tls.clone(), opts.clone());
            move || {
                let c = Client::new(tls, &opts);
                c.tokens.clone().unwrap().insert("dns.example", Bytes::from_static(b"theirs"));
            }
        });
        elsewhere.join().unwrap();
        assert!(presented(&a).take("dns.example").is_none(), "another thread's token is not this thread's");
        // Simulated clients keep their own; --quic-tokens off keeps none.
        let own = LaneOptions { own_sessions: true, ..LaneOptions::default() };
        let (c, d) = (Client::new(tls.clone(), &own), Client::new(tls.clone(), &own));
        presented(&c).insert("dns.example", Bytes::from_static(b"c's"));
        assert!(presented(&d).take("dns.example").is_none(), "d does not take c's token");
        assert!(presented(&c).take("dns.example").is_some());
        let off = LaneOptions { quic_tokens: false, ..LaneOptions::default() };
        assert!(Client::new(tls, &off).tokens.is_none());
    }

    #[test]
    fn close_codes_by_name() {
        let transport = |code| {
            ConnectionError::ConnectionClosed(quinn::ConnectionClose {
                error_code: code,
                frame_type: None,
                reason: Bytes::new(),
            })
        };
        let app = |code: u32| {
            ConnectionError::ApplicationClosed(quinn::ApplicationClose {
                error_code: code.into(),
                reason: Bytes::new(),
            })
        };
        let refused = transport(quinn::TransportErrorCode::CONNECTION_REFUSED);
        assert_eq!(close_code(&refused, false).as_deref(), Some("CONNECTION_REFUSED"));
        assert_eq!(close_code(&transport(quinn::TransportErrorCode::NO_ERROR), true).as_deref(), Some("NO_ERROR"));
        let alert = transport(quinn::TransportErrorCode::crypto(0x78));
        assert_eq!(close_code(&alert, false).as_deref(), Some("CRYPTO_ERROR_0x178"));
        assert_eq!(conn_kind(&alert), ErrorKind::Alpn);
        assert_eq!(close_code(&app(0), false).as_deref(), Some("DOQ_NO_ERROR"));
        assert_eq!(close_code(&app(0x100), true).as_deref(), Some("H3_NO_ERROR"));
        assert_eq!(close_code(&app(0x10b), true).as_deref(), Some("H3_REQUEST_REJECTED"));
        // A code the protocol does not name, or one of the other protocol's.
        assert_eq!(close_code(&app(0x1f), false).as_deref(), Some("0x1f"));
        assert_eq!(close_code(&app(0x100), false).as_deref(), Some("0x100"));
        assert_eq!(close_code(&app(0), true).as_deref(), Some("0x0"));
        for e in [&refused, &app(0)] {
            assert_eq!(close_of(e), Close::ServerQuicClose);
            assert_eq!(conn_kind(e), ErrorKind::QuicClosed);
        }
        // No CONNECTION_CLOSE came: no code.
        for e in [ConnectionError::Reset, ConnectionError::TimedOut, ConnectionError::LocallyClosed] {
            assert_eq!(close_code(&e, false), None);
        }
    }

    #[test]
    fn stateless_reset_is_the_servers_reset() {
        assert_eq!(conn_kind(&ConnectionError::Reset), ErrorKind::StatelessReset);
        assert_eq!(close_of(&ConnectionError::Reset), Close::ServerReset);
        assert_eq!(conn_kind(&ConnectionError::TimedOut), ErrorKind::IdleTimeout);
    }

    #[test]
    fn idle_timeout_outlasts_queries_and_the_idle_policy() {
        let mut opts = LaneOptions::default();
        assert_eq!(idle_timeout(&opts), Duration::from_secs(30));
        opts.query_timeout = Duration::from_secs(45);
        assert_eq!(idle_timeout(&opts), Duration::from_secs(45));
        opts.query_timeout = Duration::from_secs(2);
        opts.conn.idle = Some(Duration::from_secs(25));
        assert_eq!(idle_timeout(&opts), Duration::from_secs(50));
    }

    #[test]
    fn unframes() {
        assert_eq!(unframe(&[0, 3, 1, 2, 3]), Some(&[1u8, 2, 3][..]));
        assert_eq!(unframe(&[0, 0]), Some(&[][..]));
        assert_eq!(unframe(&[0, 3, 1, 2]), None);
        assert_eq!(unframe(&[0, 1, 1, 2]), None);
        assert_eq!(unframe(&[0]), None);
    }

    /// A stream that hands out `chunks` in turn, then its end.
    struct Chunks(std::collections::VecDeque<Result<Option<Bytes>, ReadError>>, bool);

    impl AnswerStream for Chunks {
        async fn chunk(&mut self) -> Result<Option<Bytes>, ReadError> {
            self.0.pop_front().unwrap_or(Ok(None))
        }

        fn stop(&mut self) {
            self.1 = true;
        }
    }

    fn read(chunks: Vec<Result<Option<Bytes>, ReadError>>) -> (Result<Vec<u8>, Fail>, bool) {
        use std::future::Future;
        let mut s = Chunks(chunks.into(), false);
        let r = std::pin::pin!(read_answer(&mut s)).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        let std::task::Poll::Ready(r) = r else { panic!("the stream never waits") };
        (r, s.1)
    }

    /// What `read_answer` and `fate` make of a stream: as quinn's `read_to_end(2 + 65,535)`
    /// and `unframe` did before volley read the chunks itself.
    #[test]
    fn answers_of_streams() {
        let data = |b: &[u8]| Ok(Some(Bytes::copy_from_slice(b)));
        let (r, stopped) = read(vec![data(&[0, 3, 1]), data(&[2, 3])]);
        assert_eq!((fate(&r), stopped), (Fate::Answer(&[1, 2, 3]), false));
        let (r, _) = read(vec![data(&[0, 3, 1, 2, 3, 4])]);
        assert_eq!(fate(&r), Fate::Failed(ErrorKind::Malformed));
        let (r, _) = read(vec![data(&[0, 3, 1]), Err(ReadError::Reset(0u32.into()))]);
        assert_eq!(fate(&r), Fate::Unanswered(ErrorKind::QuicStreamReset));
        let (r, _) = read(vec![Err(ReadError::ConnectionLost(ConnectionError::Reset))]);
        assert_eq!(fate(&r), Fate::Unanswered(ErrorKind::StatelessReset));
        let (r, _) = read(vec![Err(ReadError::ZeroRttRejected)]);
        assert_eq!((r.as_ref().err(), fate(&r)), (Some(&Fail::ZeroRttRejected), Fate::Failed(ErrorKind::QuicClosed)));
        // The limit: a length and 65,535 bytes; one more is stopped.
        let most = vec![0u8; MAX_STREAM];
        let (r, stopped) = read(vec![data(&most[..1000]), data(&most[1000..])]);
        assert_eq!((r.map(|d| d.len()), stopped), (Ok(MAX_STREAM), false));
        let (r, stopped) = read(vec![data(&most), data(&[0])]);
        assert_eq!((fate(&r), stopped), (Fate::Unanswered(ErrorKind::Malformed), true));
    }
}
