//! DNS over QUIC (RFC 9250) on quinn: ALPN `doq`, one bidirectional stream per query, the
//! message with a 2-byte length prefix and ID 0, the client finishing its side after the
//! query. One quinn endpoint (UDP socket) per lane, one connection at a time on it.
//!
//! Also the QUIC connection set-up HTTP/3 shares: TLS from `tls`, handshake time, RTT,
//! resumption and 0-RTT.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use quinn::{ConnectionError, ReadError, ReadToEndError, WriteError};
use volley_metrics::{Close, EarlyData, ErrorKind, Handshake};

use crate::https::ConnEnd;
use crate::meter;
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
/// when `None`), and the receive time of the newest datagram it read.
pub(crate) fn endpoint(to: SocketAddr, local: Option<std::net::IpAddr>) -> std::io::Result<(quinn::Endpoint, RxStamp)> {
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
    let (socket, rx) = StampedUdp::wrap(socket, &runtime)?;
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
        ConnectionError::TransportError(t) => crypto(u64::from(t.code)).unwrap_or(ErrorKind::QuicClosed),
        ConnectionError::ConnectionClosed(c) => crypto(u64::from(c.error_code)).unwrap_or(ErrorKind::QuicClosed),
        _ => ErrorKind::QuicClosed,
    }
}

/// Who closed a QUIC connection, and how.
pub fn close_of(e: &ConnectionError) -> Close {
    match e {
        ConnectionError::ConnectionClosed(_) | ConnectionError::ApplicationClosed(_) => Close::ServerQuicClose,
        ConnectionError::TimedOut => Close::IdleTimeout,
        ConnectionError::LocallyClosed => Close::ClientEnd,
        _ => Close::Error,
    }
}

/// Client configuration of one connection: the worker's shared TLS config (its session
/// store) behind a verifier that tells whether the handshake was a full one.
fn connection_config(
    cfg: &Arc<rustls::ClientConfig>,
    h3: bool,
    idle: Duration,
) -> Result<(quinn::ClientConfig, Arc<std::sync::atomic::AtomicBool>), String> {
    let (c, seen) = SeenVerify::connection(cfg);
    let q =
        quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(c)).map_err(|e| format!("QUIC TLS config: {e}"))?;
    let mut cc = quinn::ClientConfig::new(Arc::new(q));
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    if !h3 {
        // DoQ servers open no streams towards the client.
        t.max_concurrent_uni_streams(0u32.into());
    }
    t.max_concurrent_bidi_streams(0u32.into());
    cc.transport_config(Arc::new(t));
    Ok((cc, seen))
}

/// Opens a QUIC connection and reports it (`conn_opened` once the handshake is done; with
/// 0-RTT, when the server has said whether it took the early data, while the connection is
/// already usable).
pub(crate) async fn connect<X: Exchange + 'static>(
    ep: &quinn::Endpoint,
    target: &Target,
    cfg: &Arc<rustls::ClientConfig>,
    opts: &LaneOptions,
    x: &Rc<X>,
    h3: bool,
) -> Result<quinn::Connection, (ErrorKind, String)> {
    let (cc, seen) = connection_config(cfg, h3, Duration::from_secs(30)).map_err(|e| (ErrorKind::Tls, e))?;
    let name = opts.tls.sni.as_deref().unwrap_or(&target.host);
    let began = x.now();
    let connecting = ep
        .connect_with(cc, target.addr, name)
        .map_err(|e| (ErrorKind::Connect, format!("QUIC connect to {target}: {e}")))?;
    let failed = |e: ConnectionError| {
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
            early_data: early,
            tls_version: Some("TLSv1.3"),
            alpn,
            ..Handshake::default()
        };
        x.conn_opened(&h, now);
    };
    if cfg.enable_early_data {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
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
                report(x, &conn, EarlyData::NotOffered, !seen.load(Ordering::Relaxed), x.now());
                return Ok(conn);
            }
        }
    }
    let conn = match tokio::time::timeout(opts.connect_timeout, connecting).await {
        Ok(r) => r.map_err(failed)?,
        Err(_) => return Err((ErrorKind::Connect, format!("QUIC handshake with {target} timed out"))),
    };
    report(x, &conn, EarlyData::NotOffered, !seen.load(Ordering::Relaxed), x.now());
    Ok(conn)
}

/// Opens a connection, retrying with backoff; None when the lane closes first.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn open<X: Exchange + 'static>(
    ep: &quinn::Endpoint,
    target: &Target,
    cfg: &Arc<rustls::ClientConfig>,
    opts: &LaneOptions,
    lane: &Lane,
    x: &Rc<X>,
    h3: bool,
    backoff: &mut Duration,
) -> Option<quinn::Connection> {
    loop {
        if !crate::stream::may_connect(lane, opts).await {
            return None;
        }
        // None: the lane closed during the attempt (in progress at the end).
        match stream::attempt(lane, connect(ep, target, cfg, opts, x, h3)).await? {
            Ok(c) => {
                *backoff = stream::BACKOFF;
                return Some(c);
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
/// end of the run closes the connection with `code`.
pub(crate) async fn after_burst<X: Exchange + 'static>(
    conn: &quinn::Connection,
    code: u32,
    lane: &Rc<Lane>,
    x: &Rc<X>,
    end: &ConnEnd,
) -> Next {
    if lane.closing() {
        close_and_report(conn, code, lane, x);
        // A 0-RTT connection not reported opened yet: its attempt is in progress at the end.
        if !lane.attempting() {
            x.conn_closed(Close::ClientEnd, x.now());
        }
        return Next::Closed;
    }
    if end.ended().is_some() {
        return Next::Ended;
    }
    tokio::select! {
        turn = lane.wait_turn() => turn.map_or(Next::Serve, Next::Turn),
        _ = end.wait() => Next::Ended,
    }
}

/// Watches a connection: tells `end` how it closed.
pub(crate) fn watch(conn: &quinn::Connection) -> Rc<ConnEnd> {
    let end = Rc::new(ConnEnd::default());
    let (c, e) = (conn.clone(), end.clone());
    tokio::task::spawn_local(async move {
        let why = c.closed().await;
        e.end(close_of(&why), conn_kind(&why));
    });
    end
}

/// Sets up what a QUIC lane needs, or fails its queries until it closes.
pub(crate) async fn lane_setup<X: Exchange>(
    target: &Target,
    lane: &Lane,
    x: &X,
    opts: &LaneOptions,
    alpn: &[u8],
) -> Option<(Arc<rustls::ClientConfig>, quinn::Endpoint, RxStamp)> {
    let cfg = match tls::lane_config(opts, &[alpn], true) {
        Ok(c) => c,
        Err(e) => {
            x.conn_failed_why(ErrorKind::Tls, &e.to_string(), x.now());
            stream::fail_forever(lane, x, ErrorKind::Tls).await;
            return None;
        }
    };
    match endpoint(target.addr, opts.local) {
        Ok((ep, rx)) => Some((cfg, ep, rx)),
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
    let Some((cfg, ep, rx)) = lane_setup(&target, &lane, &*x, &opts, ALPN).await else { return };
    let mut backoff = stream::BACKOFF;
    let mut msg = Vec::with_capacity(512);
    loop {
        let Some(conn) = open(&ep, &target, &cfg, &opts, &lane, &x, false, &mut backoff).await else { return };
        let end = watch(&conn);
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
                let q = query(x.clone(), conn.clone(), rx.clone(), t, framed.freeze(), opts.query_timeout);
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
            close_and_report(&conn, DOQ_NO_ERROR, &lane, &x);
            x.conn_closed(how, x.now());
            if stream::after_turn(&lane, how).await {
                return;
            }
            continue;
        }
        // Closed by the server (or lost): its statistics are final.
        close_and_report(&conn, DOQ_NO_ERROR, &lane, &x);
        x.conn_closed(end.ended().unwrap_or(Close::Error), x.now());
        if stream::after_server_close(&lane, &mut backoff).await {
            return;
        }
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

enum Fail {
    Kind(ErrorKind),
    /// The server refused the 0-RTT data: send again on the established connection.
    ZeroRttRejected,
}

/// One DoQ query on its own stream; reports its fate.
async fn query<X: Exchange>(x: Rc<X>, conn: quinn::Connection, rx: RxStamp, t: Token, framed: Bytes, limit: Duration) {
    let once = |framed: Bytes| {
        let (x, conn) = (&x, &conn);
        async move {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| Fail::Kind(conn_kind(&e)))?;
            let len = framed.len() - 2;
            send.write_chunk(framed).await.map_err(|e| match e {
                WriteError::ZeroRttRejected => Fail::ZeroRttRejected,
                e => Fail::Kind(write_kind(&e)),
            })?;
            let _ = send.finish();
            x.sent(t, len, x.now());
            let r = recv.read_to_end(2 + 65_535).await;
            let data = r.map_err(|e| match e {
                ReadToEndError::Read(ReadError::ZeroRttRejected) => Fail::ZeroRttRejected,
                ReadToEndError::Read(e) => Fail::Kind(read_kind(&e)),
                ReadToEndError::TooLong => {
                    let _ = recv.stop(DOQ_REQUEST_CANCELLED.into());
                    Fail::Kind(ErrorKind::Malformed)
                }
            })?;
            Ok::<_, Fail>(data)
        }
    };
    let r = tokio::time::timeout(limit, async {
        match once(framed.clone()).await {
            Err(Fail::ZeroRttRejected) => once(framed).await,
            r => r,
        }
    })
    .await;
    let now = rx.arrival(&*x);
    match r {
        Ok(Ok(data)) => match unframe(&data) {
            Some(m) => x.response(t, m, now),
            None => x.failed(t, ErrorKind::Malformed, now),
        },
        Ok(Err(Fail::Kind(k))) => x.failed(t, k, now),
        Ok(Err(Fail::ZeroRttRejected)) => x.failed(t, ErrorKind::QuicClosed, now),
        // Timed out by the engine already; the streams were dropped (reset).
        Err(_) => {}
    }
}

/// The DNS message in a DoQ stream: a 2-byte length, then exactly that many bytes.
pub fn unframe(data: &[u8]) -> Option<&[u8]> {
    let len = u16::from_be_bytes([*data.first()?, *data.get(1)?]) as usize;
    (data.len() == 2 + len).then(|| &data[2..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unframes() {
        assert_eq!(unframe(&[0, 3, 1, 2, 3]), Some(&[1u8, 2, 3][..]));
        assert_eq!(unframe(&[0, 0]), Some(&[][..]));
        assert_eq!(unframe(&[0, 3, 1, 2]), None);
        assert_eq!(unframe(&[0, 1, 1, 2]), None);
        assert_eq!(unframe(&[0]), None);
    }
}
