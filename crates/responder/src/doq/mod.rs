//! DNS over QUIC (RFC 9250): ALPN `doq`, one query per bidirectional stream with a 2-byte
//! length prefix; the answer (ID 0, as the query's must be) goes back on the same stream,
//! which is then finished. Delayed answers wait in their stream's task without holding up
//! others; a dropped query's stream stays open, unanswered, until the client gives up. A
//! stream the client stops (STOP_SENDING, DOQ_REQUEST_CANCELLED when it cancels a query,
//! RFC 9250 section 4.3) while its answer is dropped or delayed ends at once: quinn resets it
//! with the client's code, and its credit goes back to the client (MAX_STREAMS).

use std::rc::Rc;

use quinn::{Connection, ConnectionError, RecvStream, SendStream, ZeroRttAccepted};
use volley_transport::qlog::{StreamState, Trace};

use crate::answer::{Transport, Verdict};
use crate::ctx::Ctx;
use crate::policy::Tracker;
use crate::quic::Unacked;
use crate::stats::add;

/// ALPN protocol of DoQ.
pub(crate) const ALPN: &[u8] = b"doq";
/// DOQ_INTERNAL_ERROR: the code of the `quic-stream-reset` fault.
const DOQ_INTERNAL_ERROR: u32 = 1;
/// DOQ_PROTOCOL_ERROR: a stream that does not carry one length-prefixed message.
const DOQ_PROTOCOL_ERROR: u32 = 2;
/// DOQ_NO_ERROR: the code of a graceful close (`--max-queries-per-conn`).
pub(crate) const DOQ_NO_ERROR: u32 = 0;
/// DOQ_EXCESSIVE_LOAD (RFC 9250 section 4.3): the code of a stream reset because its client
/// is over `--max-qps-per-client`.
const DOQ_EXCESSIVE_LOAD: u32 = 4;
/// DOQ_REQUEST_CANCELLED: the code a client stops a stream with when it cancels its query.
const DOQ_REQUEST_CANCELLED: u64 = 3;

/// Serves one DoQ connection: a task per stream. With `--max-queries-per-conn N`, the N-th
/// stream is the last one accepted: once the answers of every accepted stream have been
/// acknowledged (or the idle timeout passed), the connection is closed with DOQ_NO_ERROR.
pub(crate) async fn connection(
    conn: Connection,
    mut zero_rtt: Option<ZeroRttAccepted>,
    ctx: Rc<Ctx>,
    tracker: Tracker,
) {
    add(&ctx.counters.doq_connections, 1);
    let unacked = ctx.max_queries.is_some().then(|| Rc::new(Unacked::default()));
    let mut accepted = 0u64;
    let trace = volley_transport::qlog::of(&conn);
    let peer = conn.remote_address().ip();
    loop {
        match conn.accept_bi().await {
            Ok((send, recv)) => {
                crate::quic::note_first_stream(&ctx, &mut zero_rtt);
                accepted += 1;
                if let Some(u) = &unacked {
                    u.track(&send);
                }
                let busy = tracker.stream();
                let query = stream(send, recv, ctx.clone(), trace.clone(), peer);
                tokio::task::spawn_local(async move {
                    let _busy = busy;
                    query.await
                });
                if let (Some(u), true) = (&unacked, ctx.max_queries.is_some_and(|m| accepted >= m)) {
                    let _ = tokio::time::timeout(ctx.idle_timeout, u.settled()).await;
                    if conn.close_reason().is_none() {
                        add(&ctx.counters.closed_max_queries, 1);
                        conn.close(DOQ_NO_ERROR.into(), b"");
                    }
                    return;
                }
            }
            Err(ConnectionError::TimedOut) => {
                add(&ctx.counters.closed_idle, 1);
                return;
            }
            Err(_) => return,
        }
    }
}

/// One query stream from client address `peer`; its events go to `trace` (`--qlog`).
async fn stream(
    mut send: SendStream,
    mut recv: RecvStream,
    ctx: Rc<Ctx>,
    trace: Option<Trace>,
    peer: std::net::IpAddr,
) {
    let id = u64::from(send.id());
    if let Some(t) = &trace {
        t.stream_state(id, None, StreamState::Open);
    }
    // --request-timeout (and the idle timeout): a query that does not come whole in time.
    let limit = ctx.idle_timeout.min(ctx.request_timeout);
    let msg = match tokio::time::timeout(limit, recv.read_to_end(2 + 65_535)).await {
        Ok(Ok(m)) => {
            if let Some(t) = &trace {
                t.data_moved(id, 0, m.len() as u64, false);
                t.stream_state(id, Some(StreamState::Open), StreamState::HalfClosedRemote);
            }
            m
        }
        Ok(Err(_)) => {
            let _ = send.reset(DOQ_PROTOCOL_ERROR.into());
            return;
        }
        Err(_) => {
            add(&ctx.counters.closed_slow, 1);
            let _ = send.reset(DOQ_PROTOCOL_ERROR.into());
            let _ = recv.stop(DOQ_PROTOCOL_ERROR.into());
            return;
        }
    };
    if msg.len() < 2 || u16::from_be_bytes([msg[0], msg[1]]) as usize != msg.len() - 2 {
        let _ = send.reset(DOQ_PROTOCOL_ERROR.into());
        return;
    }
    add(&ctx.counters.queries, 1);
    if ctx.client_rate.as_ref().is_some_and(|r| !r.admit(peer)) {
        // --max-qps-per-client: no answer, as over UDP and TCP, but the stream is reset at
        // once (DOQ_EXCESSIVE_LOAD) rather than held until the client gives up.
        add(&ctx.counters.rate_limited, 1);
        let _ = send.reset(DOQ_EXCESSIVE_LOAD.into());
        return;
    }
    if ctx.faults.quic_stream_reset.as_ref().is_some_and(|s| s.hit()) {
        add(&ctx.counters.dropped, 1);
        let _ = send.reset(DOQ_INTERNAL_ERROR.into());
        return;
    }
    let mut out = Vec::with_capacity(512);
    let delay = match ctx.answerer.answer(&msg[2..], Transport::Doq, &mut out) {
        Verdict::Drop => {
            add(&ctx.counters.dropped, 1);
            // Unanswered until the client gives up the stream or the connection ends.
            note_stopped(&ctx, send.stopped().await);
            return;
        }
        Verdict::Invalid => {
            // Not a query (no header, or QR=1): nothing to answer it with.
            add(&ctx.counters.dropped, 1);
            let _ = send.reset(DOQ_PROTOCOL_ERROR.into());
            return;
        }
        Verdict::Reply { delay } => delay,
        Verdict::Error => None,
    };
    if let Some(d) = delay {
        add(&ctx.counters.delayed, 1);
        // A client that gives up the query meanwhile has its stream back at once.
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            r = send.stopped() => {
                note_stopped(&ctx, r);
                return;
            }
        }
    }
    // RFC 9250 4.2.1: the ID is 0 in both directions.
    if out.len() >= 2 {
        out[0] = 0;
        out[1] = 0;
    }
    let mut frame = Vec::with_capacity(out.len() + 2);
    frame.extend_from_slice(&(out.len() as u16).to_be_bytes());
    frame.extend_from_slice(&out);
    if send.write_all(&frame).await.is_ok() {
        ctx.counters.sent(&out);
        let _ = send.finish();
        if let Some(t) = &trace {
            t.data_moved(id, 0, frame.len() as u64, true);
            t.stream_state(id, Some(StreamState::HalfClosedRemote), StreamState::Closed);
        }
    }
}

/// Counts a stream the client stopped before its answer left, by its code (`cancelled`,
/// `stopped`); the stream's end (the connection's, or the answer acknowledged) is not counted.
fn note_stopped(ctx: &Ctx, r: Result<Option<quinn::VarInt>, quinn::StoppedError>) {
    if let Ok(Some(code)) = r {
        ctx.counters.stopped_by_client(code.into_inner(), DOQ_REQUEST_CANCELLED);
    }
}
