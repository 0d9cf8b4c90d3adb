//! DNS over HTTPS over HTTP/3 (h3 on quinn, ALPN `h3`): the same requests, checks, answers
//! and faults as HTTP/1.1 and HTTP/2 ([`crate::doh::request`]), one task per request.

use std::rc::Rc;

use bytes::{Buf, Bytes};
use h3::error::Code;
use http::StatusCode;
use quinn::{Connection, ZeroRttAccepted};
use tokio::sync::watch;

use crate::answer::Transport;
use crate::ctx::Ctx;
use crate::doh::request::{self, Kind, Outcome};
use crate::stats::add;

/// ALPN protocol of HTTP/3.
pub(crate) const ALPN: &[u8] = b"h3";

type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;
type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Serves one HTTP/3 connection.
pub(crate) async fn connection(conn: Connection, mut zero_rtt: Option<ZeroRttAccepted>, ctx: Rc<Ctx>) {
    add(&ctx.counters.doh3_connections, 1);
    let quic = conn.clone();
    let Ok(mut h3c) =
        h3::server::builder().max_field_section_size(16 << 10).build::<_, Bytes>(h3_quinn::Connection::new(conn)).await
    else {
        note_idle(&quic, &ctx);
        return;
    };
    // Dropped when the connection ends: releases streams held unanswered.
    let (_closed_tx, closed) = watch::channel(());
    let mut served = 0u64;
    let mut closing = false;
    let mut requests = Vec::new();
    while let Ok(Some(resolver)) = h3c.accept().await {
        crate::quic::note_first_stream(&ctx, &mut zero_rtt);
        served += 1;
        requests.retain(|r: &tokio::task::JoinHandle<()>| !r.is_finished());
        requests.push(tokio::task::spawn_local(request(resolver, ctx.clone(), closed.clone())));
        if closing {
            continue;
        }
        // --max-queries-per-conn, or the goaway-after fault: GOAWAY (requests after this one
        // are refused).
        let spent = ctx.max_queries.is_some_and(|n| served >= n);
        if spent || ctx.faults.goaway_after.is_some_and(|n| served >= n) {
            closing = true;
            let _ = h3c.shutdown(0).await;
        }
        if spent {
            // h3 ends its accept loop only once the client has sent its own GOAWAY: close
            // the connection here, once every request taken is answered (bounded by the idle
            // timeout), with H3_NO_ERROR.
            add(&ctx.counters.closed_max_queries, 1);
            let answered = tokio::time::timeout(ctx.idle_timeout, async {
                for r in std::mem::take(&mut requests) {
                    let _ = r.await;
                }
            });
            let refuse_more = async { while let Ok(Some(_)) = h3c.accept().await {} };
            tokio::select! {
                _ = answered => {}
                _ = refuse_more => {}
            }
            quic.close(H3_NO_ERROR.into(), b"");
            return;
        }
    }
    note_idle(&quic, &ctx);
}

/// H3_NO_ERROR (RFC 9114 section 8.1).
pub(crate) const H3_NO_ERROR: u32 = 0x100;

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

async fn request(resolver: Resolver, ctx: Rc<Ctx>, mut closed: watch::Receiver<()>) {
    let Ok((req, mut stream)) = resolver.resolve_request().await else { return };
    let mut scratch = Vec::new();
    let kind = match request::check(&ctx, req.method(), req.uri(), req.headers(), &mut scratch) {
        Ok(k) => k,
        Err(status) => {
            send(&mut stream, request::status_head(status), &[]).await;
            return;
        }
    };
    if kind == Kind::Post {
        loop {
            match stream.recv_data().await {
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
    match request::answer(&ctx, &scratch, Transport::Doh3, &mut out) {
        Outcome::Reset => {
            stream.stop_stream(Code::H3_INTERNAL_ERROR);
            stream.stop_sending(Code::H3_INTERNAL_ERROR);
        }
        Outcome::Drop => {
            let _ = closed.changed().await;
        }
        Outcome::Reply { head, delay } => {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let ok = head.status() == StatusCode::OK;
            if send(&mut stream, head, &out).await && ok {
                ctx.counters.sent(&out);
            }
        }
    }
}
