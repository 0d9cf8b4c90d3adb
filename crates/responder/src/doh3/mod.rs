//! DNS over HTTPS over HTTP/3 (h3 on quinn, ALPN `h3`): the same requests, checks, answers
//! and faults as HTTP/1.1 and HTTP/2 ([`crate::doh::request`]), one task per request. A
//! request whose answer is dropped or delayed ends as soon as the client stops its stream
//! (STOP_SENDING, H3_REQUEST_CANCELLED when it cancels, RFC 9114 section 4.1.1): quinn resets
//! it with the client's code and the stream's credit goes back to the client (MAX_STREAMS),
//! as DoQ does; a dropped request never holds a stream past the client's interest in it.

use std::rc::Rc;

use bytes::{Buf, Bytes};
use h3::error::Code;
use http::StatusCode;
use quinn::{Connection, ZeroRttAccepted};
use tokio::sync::watch;

use crate::answer::Transport;
use crate::ctx::Ctx;
use crate::doh::request::{self, Kind, Outcome};
use crate::policy::Tracker;
use crate::quic::Unacked;
use crate::stats::add;

/// Runs a request's task, the connection busy for eviction until it ends.
fn spawn_request(request: impl std::future::Future<Output = ()> + 'static, tracker: &Tracker) {
    let busy = tracker.stream();
    tokio::task::spawn_local(async move {
        let _busy = busy;
        request.await
    });
}

/// ALPN protocol of HTTP/3.
pub(crate) const ALPN: &[u8] = b"h3";

mod streams;

type Resolver = h3::server::RequestResolver<streams::Conn, Bytes>;
type Stream = h3::server::RequestStream<streams::Bidi<Bytes>, Bytes>;

/// Serves one HTTP/3 connection: a task per request. With `--max-queries-per-conn N` or the
/// `goaway-after=N` fault, the N-th request is the last one taken: a GOAWAY carries the ID of
/// the next request stream, and requests from it on are refused unprocessed
/// (H3_REQUEST_REJECTED, the client may send them again). `--max-queries-per-conn` then
/// ends the connection gracefully: once every response taken was acknowledged by the client
/// (bounded by the idle timeout), the client has [`CLOSE_GRACE`] to close it; then the server
/// does, with H3_NO_ERROR.
pub(crate) async fn connection(
    conn: Connection,
    mut zero_rtt: Option<ZeroRttAccepted>,
    ctx: Rc<Ctx>,
    tracker: Tracker,
) {
    add(&ctx.counters.doh3_connections, 1);
    let quic = conn.clone();
    let peer = Some(conn.remote_address().ip());
    let shared = Rc::new(streams::Shared::default());
    let unacked = ctx.max_queries.is_some().then(|| Rc::new(Unacked::default()));
    let transport = streams::Conn::new(conn, shared.clone(), unacked.clone());
    let Ok(mut h3c) =
        h3::server::builder().max_field_section_size(request::MAX_HEAD as u64).build::<_, Bytes>(transport).await
    else {
        note_idle(&quic, &ctx);
        return;
    };
    // Dropped when the connection ends: releases the requests held unanswered whose stream's
    // stop was not seen (none, as h3 hands out every stream it accepts).
    let (_closed_tx, closed) = watch::channel(());
    let mut served = 0u64;
    let mut closing = false;
    while let Ok(Some(resolver)) = h3c.accept().await {
        crate::quic::note_first_stream(&ctx, &mut zero_rtt);
        served += 1;
        let stopped = shared.take_stopped(resolver.frame_stream.id());
        spawn_request(request(resolver, ctx.clone(), stopped, closed.clone(), peer), &tracker);
        if closing {
            continue;
        }
        let spent = ctx.max_queries.is_some_and(|n| served >= n);
        if spent || ctx.faults.goaway_after.is_some_and(|n| served >= n) {
            closing = true;
            // h3 sends as its GOAWAY's ID the last request stream it took plus the number
            // given: 1 makes it the first one refused.
            shared.goaway();
            let _ = h3c.shutdown(1).await;
        }
        if let (true, Some(unacked)) = (spent, &unacked) {
            add(&ctx.counters.closed_max_queries, 1);
            let ended = async {
                // Every response taken reached the client...
                let _ = tokio::time::timeout(ctx.idle_timeout, unacked.settled()).await;
                // ...which, having seen the GOAWAY, closes once it has read them (RFC 9114
                // section 5.2). Closing first could lose responses it has received but not
                // read yet (quic-go drops them when the connection closes).
                let _ = tokio::time::timeout(CLOSE_GRACE, quic.closed()).await;
            };
            let mut ended = std::pin::pin!(ended);
            let mut accepting = true;
            loop {
                tokio::select! {
                    () = &mut ended => break,
                    // Keeps h3 reading its control streams; new requests are refused.
                    r = h3c.accept(), if accepting => match r {
                        Ok(Some(resolver)) => {
                            let stopped = shared.take_stopped(resolver.frame_stream.id());
                            spawn_request(request(resolver, ctx.clone(), stopped, closed.clone(), peer), &tracker);
                        }
                        // The client's GOAWAY: nothing more comes, the answers may still go.
                        Ok(None) => accepting = false,
                        Err(_) => break,
                    },
                }
            }
            quic.close(H3_NO_ERROR.into(), b"");
            return;
        }
    }
    note_idle(&quic, &ctx);
}

/// H3_NO_ERROR (RFC 9114 section 8.1).
pub(crate) const H3_NO_ERROR: u32 = 0x100;
/// H3_REQUEST_CANCELLED: the code a client stops a request stream with when it cancels it.
const H3_REQUEST_CANCELLED: u64 = 0x10c;
/// How long a connection closed by `--max-queries-per-conn` waits, once its responses are
/// acknowledged, for the client to close it before the server does.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Counts a connection that ended by the QUIC idle timeout.
fn note_idle(conn: &Connection, ctx: &Ctx) {
    if matches!(conn.close_reason(), Some(quinn::ConnectionError::TimedOut)) {
        add(&ctx.counters.closed_idle, 1);
    }
}

async fn send(stream: &mut Stream, head: http::Response<()>, body: &[u8]) -> bool {
    if stream.send_response(head).await.is_err() {
        return false;
    }
    if !body.is_empty() && stream.send_data(Bytes::copy_from_slice(body)).await.is_err() {
        return false;
    }
    stream.finish().await.is_ok()
}

/// Waits until the client stops the request's stream (counted by its code), or the
/// connection ends.
async fn stopped(ctx: &Ctx, stopped: Option<streams::Stopped>, closed: &mut watch::Receiver<()>) {
    match stopped {
        Some(s) => {
            if let Ok(Some(code)) = s.await {
                ctx.counters.stopped_by_client(code.into_inner(), H3_REQUEST_CANCELLED);
            }
        }
        None => {
            let _ = closed.changed().await;
        }
    }
}

async fn request(
    resolver: Resolver,
    ctx: Rc<Ctx>,
    stop: Option<streams::Stopped>,
    mut closed: watch::Receiver<()>,
    peer: Option<std::net::IpAddr>,
) {
    // --request-timeout: a request whose head or body does not come whole in time ends here
    // (its stream dropped: reset).
    let (req, mut stream) = match tokio::time::timeout(ctx.request_timeout, resolver.resolve_request()).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => return,
        Err(_) => {
            add(&ctx.counters.closed_slow, 1);
            return;
        }
    };
    let mut scratch = Vec::new();
    let kind = match request::check(&ctx, req.method(), req.uri(), req.headers(), &mut scratch) {
        Ok(k) => k,
        Err(status) => {
            send(&mut stream, request::status_head(status), &[]).await;
            return;
        }
    };
    if kind == Kind::Post {
        let deadline = tokio::time::Instant::now() + ctx.request_timeout;
        loop {
            let Ok(data) = tokio::time::timeout_at(deadline, stream.recv_data()).await else {
                add(&ctx.counters.closed_slow, 1);
                send(&mut stream, request::status_head(StatusCode::REQUEST_TIMEOUT), &[]).await;
                return;
            };
            match data {
                Ok(Some(mut chunk)) => {
                    while chunk.has_remaining() {
                        let c = chunk.chunk();
                        scratch.extend_from_slice(c);
                        let n = c.len();
                        chunk.advance(n);
                    }
                    if scratch.len() > request::MAX_QUERY {
                        send(&mut stream, request::status_head(StatusCode::PAYLOAD_TOO_LARGE), &[]).await;
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let mut out = Vec::with_capacity(512);
    match request::answer(&ctx, peer, &scratch, Transport::Doh3, &mut out) {
        Outcome::Reset => {
            stream.stop_stream(Code::H3_INTERNAL_ERROR);
            stream.stop_sending(Code::H3_INTERNAL_ERROR);
        }
        Outcome::Drop => {
            // The stream (dropped here) is reset with the client's code.
            stopped(&ctx, stop, &mut closed).await;
        }
        Outcome::Reply { head, delay } => {
            if let Some(d) = delay {
                tokio::select! {
                    () = tokio::time::sleep(d) => {}
                    () = stopped(&ctx, stop, &mut closed) => return,
                }
            }
            let ok = head.status() == StatusCode::OK;
            if send(&mut stream, head, &out).await && ok {
                ctx.counters.sent(&out);
            }
        }
    }
}
