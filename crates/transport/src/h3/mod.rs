//! DNS over HTTPS over HTTP/3 (RFC 8484 on RFC 9114), with h3 and h3-quinn: one QUIC
//! connection per lane, one request stream per query, awaited by its own local task.
//! Requests are written as for HTTP/2 (`https::RequestTemplate`). A request given up (timed
//! out) is cancelled with H3_REQUEST_CANCELLED ([`streams`]).

use std::future::poll_fn;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h3::ConnectionState;
use volley_metrics::{Close, ErrorKind};

use crate::https::{check_head, RequestTemplate};
use crate::quic;
use crate::stamp::RxStamp;
use crate::{stream, Exchange, Lane, LaneOptions, Target, Token};

/// ALPN protocol of HTTP/3.
pub const ALPN: &[u8] = b"h3";
/// H3_NO_ERROR, the code of a clean close.
const H3_NO_ERROR: u32 = 0x100;
/// H3_REQUEST_REJECTED: the server did not process the request (RFC 9114 section 8.1).
const H3_REQUEST_REJECTED: u64 = 0x10b;

mod bidi;
mod streams;

pub use bidi::Bidi;

/// The error kind of an HTTP/3 stream error.
fn stream_kind(e: &h3::error::StreamError) -> ErrorKind {
    use h3::error::StreamError as S;
    match e {
        // Refused unprocessed (a request beyond the server's GOAWAY).
        S::RemoteTerminate { code, .. } if *code == H3_REQUEST_REJECTED => ErrorKind::Goaway,
        S::RemoteTerminate { .. } => ErrorKind::QuicStreamReset,
        S::ConnectionError { 0: c, .. } => conn_kind(c),
        S::RemoteClosing => ErrorKind::Goaway,
        S::HeaderTooBig { .. } => ErrorKind::Malformed,
        _ => ErrorKind::Io,
    }
}

/// The error kind of an HTTP/3 connection error (QUIC's own, such as a stateless reset, as
/// for DoQ).
fn conn_kind(e: &h3::error::ConnectionError) -> ErrorKind {
    use h3::error::ConnectionError as C;
    use h3::quic::ConnectionErrorIncoming as In;
    match e {
        C::Timeout => ErrorKind::IdleTimeout,
        C::Remote { 0: In::Timeout, .. } => ErrorKind::IdleTimeout,
        C::Remote { 0: In::Undefined(e), .. } => {
            e.downcast_ref::<quinn::ConnectionError>().map_or(ErrorKind::QuicClosed, quic::conn_kind)
        }
        _ => ErrorKind::QuicClosed,
    }
}

/// The driver of one DoH lane over HTTP/3. Every connection reports its datagrams on the wire
/// when it closes (quinn's statistics; attempts whose handshake failed are not counted).
/// After a GOAWAY the lane goes on on a new connection; the old one ends its requests.
pub async fn drive<X: Exchange + 'static>(target: Target, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    let mut tpl = match RequestTemplate::new(&target, opts.doh_method, false) {
        Ok(t) => t,
        Err(why) => {
            x.conn_failed_why(ErrorKind::Io, &why, x.now());
            return stream::fail_forever(&lane, &*x, ErrorKind::Io).await;
        }
    };
    let mut setup = None;
    let mut backoff = stream::BACKOFF;
    let mut msg = Vec::with_capacity(512);
    loop {
        let Some((conn, rx)) = quic::open(&mut setup, &target, &opts, &lane, &x, true, &mut backoff).await else {
            return;
        };
        let end = quic::watch(&conn, &x, true);
        let (mut driver, send) = match h3::client::new(streams::Conn::new(conn.clone())).await {
            Ok(v) => v,
            Err(e) => {
                quic::close_and_report(&conn, 0, &lane, &x);
                quic::report_end(&lane, &*x, &conn, Close::Error);
                if stream::after_failure(&lane, &*x, conn_kind(&e), &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        {
            let end = end.clone();
            tokio::task::spawn_local(async move {
                let e = poll_fn(|cx| {
                    let r = driver.poll_close(cx);
                    // A GOAWAY came: no new request on this connection.
                    if r.is_pending() && driver.is_closing() && end.ended().is_none() {
                        end.end(Close::ServerGoaway, ErrorKind::Goaway);
                    }
                    r
                })
                .await;
                // The QUIC watcher usually tells first, with the precise reason.
                tokio::time::sleep(Duration::from_millis(1)).await;
                let kind = conn_kind(&e);
                end.end(if e.is_h3_no_error() { Close::ServerGoaway } else { stream::close_of(kind) }, kind);
            });
        }
        let on = Rc::new(stream::Outstanding::default());
        let mut turned = None;
        loop {
            while end.ended().is_none() {
                let Some(t) = lane.pop() else { break };
                if !x.encode(t, 0, &mut msg) {
                    continue;
                }
                let (req, body) = tpl.request(&msg);
                let r = request(
                    x.clone(),
                    lane.clone(),
                    send.clone(),
                    rx.clone(),
                    t,
                    (req, body, msg.len()),
                    opts.query_timeout,
                    on.enter(),
                );
                tokio::task::spawn_local(r);
            }
            match quic::after_burst(&conn, H3_NO_ERROR, &lane, &x, &end).await {
                quic::Next::Serve => {}
                quic::Next::Turn(how) => {
                    turned = Some(how);
                    break;
                }
                quic::Next::Ended => break,
                quic::Next::Closed => return,
            }
        }
        if let Some(how) = turned {
            quic::end_of_life(conn, end, on, H3_NO_ERROR, how, &lane, &x);
            if stream::after_turn(&lane, how).await {
                return;
            }
            continue;
        }
        if end.ended() == Some(Close::ServerGoaway) && conn.close_reason().is_none() {
            // GOAWAY on a live connection: it ends the requests it took while the lane goes on
            // on a new one.
            drain_goaway(conn, on, lane.clone(), x.clone());
            continue;
        }
        // Ended by the server: closes the QUIC connection if HTTP/3 alone ended.
        quic::close_and_report(&conn, H3_NO_ERROR, &lane, &x);
        quic::report_end(&lane, &*x, &conn, quic::ended_as(&conn, &end));
        if stream::after_server_close(&lane, &mut backoff).await {
            return;
        }
    }
}

/// A connection the server sent GOAWAY on takes no new request; it is closed (and reported)
/// once the requests in flight on it are done, it closes, or the lane closes.
fn drain_goaway<X: Exchange + 'static>(conn: quinn::Connection, on: Rc<stream::Outstanding>, lane: Rc<Lane>, x: Rc<X>) {
    tokio::task::spawn_local(async move {
        let closed = async {
            let e = conn.closed().await;
            quic::close_of(&e)
        };
        let close = if on.count() == 0 {
            Close::ServerGoaway
        } else {
            stream::drain_streams(&lane, &*x, &on, Close::ServerGoaway, closed).await
        };
        quic::close_and_report(&conn, H3_NO_ERROR, &lane, &x);
        x.conn_closed(close, x.now());
    });
}

/// One DoH/3 request on its own stream; reports its fate. A request the server refused
/// unprocessed (GOAWAY, H3_REQUEST_REJECTED) or the connection's end left unanswered goes to
/// the lane's next connection ([`stream::unanswered`]). `on`: it is outstanding on the
/// connection until the task ends.
/// Generic over h3's QUIC streams (`O`): quinn's ([`streams`]), or the fuzz target's.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn request<X: Exchange, O: h3::quic::OpenStreams<Bytes>>(
    x: Rc<X>,
    lane: Rc<Lane>,
    mut send: h3::client::SendRequest<O, Bytes>,
    rx: RxStamp,
    t: Token,
    (req, body, len): (http::Request<()>, Option<Bytes>, usize),
    limit: Duration,
    mut on: stream::OnConn,
) {
    let left = quic::time_left(&*x, t, limit);
    if left.is_zero() {
        // Given up already (the engine tells its fate): it never leaves.
        return;
    }
    // Timed out, the request's stream (when it was opened) is dropped: cancelled.
    let r = tokio::time::timeout(left, async {
        let mut s = quic::stream_credit(&*x, t, send.send_request(req)).await.map_err(|e| stream_kind(&e))?;
        if let Some(b) = body {
            s.send_data(b).await.map_err(|e| stream_kind(&e))?;
        }
        s.finish().await.map_err(|e| stream_kind(&e))?;
        x.sent(t, len, x.now());
        rx.left_one(t);
        if rx.many_sent() {
            rx.read_sent(&*x);
        }
        let resp = s.recv_response().await.map_err(|e| stream_kind(&e))?;
        check_head(&*x, resp.status(), resp.headers())?;
        let mut out: Option<BytesMut> = None;
        let mut first: Option<Bytes> = None;
        while let Some(mut chunk) = s.recv_data().await.map_err(|e| stream_kind(&e))? {
            let n = chunk.remaining();
            match (&mut first, &mut out) {
                (None, None) => first = Some(chunk.copy_to_bytes(n)),
                (Some(f), None) => {
                    let mut m = BytesMut::with_capacity(f.len() + n);
                    m.extend_from_slice(f);
                    while chunk.has_remaining() {
                        let c = chunk.chunk();
                        let l = c.len();
                        m.extend_from_slice(c);
                        chunk.advance(l);
                    }
                    out = Some(m);
                }
                (_, Some(m)) => {
                    while chunk.has_remaining() {
                        let c = chunk.chunk();
                        let l = c.len();
                        m.extend_from_slice(c);
                        chunk.advance(l);
                    }
                }
            }
            if out.as_ref().map_or(0, |m| m.len()) > 65_535 {
                return Err(ErrorKind::Malformed);
            }
        }
        Ok(match out {
            Some(m) => m.freeze(),
            None => first.unwrap_or_default(),
        })
    })
    .await;
    // The departures first: the answer's time needs them.
    rx.read_sent(&*x);
    let now = rx.arrival(&*x);
    match r {
        Ok(Ok(msg)) => {
            on.answered();
            x.response(t, &msg, now)
        }
        Ok(Err(kind)) => stream::unanswered(&lane, &*x, &[t], kind),
        Err(_) => {}
    }
}
