//! What DoQ and DoH/3 share: a quinn endpoint per I/O thread on an SO_REUSEPORT socket, the
//! server transport settings, address validation with Retry or with tokens from earlier
//! connections (NEW_TOKEN), and 0-RTT.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Context;

use quinn::{Connection, ZeroRttAccepted};
use ring::hmac;
use rustls::pki_types::PrivateKeyDer;
use tokio::sync::{watch, Notify};

use crate::answer::Transport;
use crate::ctx::Ctx;
use crate::policy::{Slot, Tracker};
use crate::stats::add;

/// What a QUIC listener's endpoints are made with (one per I/O thread).
#[derive(Clone)]
pub(crate) struct Config {
    endpoint: quinn::EndpointConfig,
    server: quinn::ServerConfig,
    /// The transport settings, to make a connection's own (with its qlog trace).
    params: Params,
    /// `--qlog DIR`: a trace per connection.
    qlog: Option<std::path::PathBuf>,
}

/// The settings of [`transport`].
#[derive(Clone, Copy)]
struct Params {
    idle: std::time::Duration,
    max_streams: u32,
    h3: bool,
    gso: bool,
}

impl Config {
    /// The server configuration of one connection from `peer` when it is traced (`--qlog`):
    /// the listener's, with a transport config of its own that writes the trace.
    /// The trace's handle for the streams' events comes with it.
    fn traced(&self, peer: std::net::SocketAddr) -> Option<(Arc<quinn::ServerConfig>, volley_transport::qlog::Trace)> {
        let dir = self.qlog.as_deref()?;
        let what = if self.params.h3 { "DoH/3" } else { "DoQ" };
        let (stream, trace) = volley_transport::qlog::stream(
            dir,
            "server",
            self.params.h3,
            format!("volley serve {what}, client {peer}"),
        )?;
        let mut t = transport(self.params);
        t.qlog_stream(Some(stream));
        let mut sc = self.server.clone();
        sc.transport_config(Arc::new(t));
        Some((Arc::new(sc), trace))
    }
}

/// Stream limits at or below which clients are asked to acknowledge every packet at once.
const SMALL_STREAM_LIMIT: u32 = 32;

/// The quinn configuration: TLS 1.3 from `tls`, idle timeout, stream limits, address
/// validation tokens ([`validation_tokens`]), and the keys of [`endpoint_config`] from the
/// certificate's private key `key`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn config(
    tls: Arc<rustls::ServerConfig>,
    key: &PrivateKeyDer<'_>,
    ctx_idle: std::time::Duration,
    max_streams: u32,
    h3: bool,
    gso: bool,
    tokens: u32,
    tokens_ignored: bool,
    qlog: Option<std::path::PathBuf>,
) -> Result<Config, String> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(|e| format!("QUIC TLS: {e}"))?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let params = Params { idle: ctx_idle, max_streams, h3, gso };
    sc.transport_config(Arc::new(transport(params)));
    sc.validation_token_config(validation_tokens(tokens, tokens_ignored));
    Ok(Config { endpoint: endpoint_config(key), server: sc, params, qlog })
}

/// The server's QUIC transport settings: idle timeout, stream limits, offload, ACK frequency.
fn transport(p: Params) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(quinn::IdleTimeout::try_from(p.idle).ok());
    t.max_concurrent_bidi_streams(p.max_streams.into());
    t.enable_segmentation_offload(p.gso);
    // HTTP/3 needs the client's control and QPACK streams; DoQ uses none.
    t.max_concurrent_uni_streams(if p.h3 { 8u32.into() } else { 0u32.into() });
    // A stream's credit (MAX_STREAMS) comes back only once the client has acknowledged the
    // answer on it, and a client acknowledges a lone packet up to its max_ack_delay (25 ms)
    // late: under a small --max-streams that delay, not the server, set the pace (2 streams:
    // 80 queries a second). So clients that support the ACK frequency extension (quinn does)
    // are asked to acknowledge every packet at once; reordering is acknowledged at once as
    // without the extension. That costs such a client an ACK packet per answer, so it is asked
    // only under a limit whose answers can fit in one packet (about 20 small answers do); with
    // more streams a window of answers spans packets and the client's ACK of every second
    // packet returns the credit.
    if p.max_streams <= SMALL_STREAM_LIMIT {
        let mut ack = quinn::AckFrequencyConfig::default();
        ack.ack_eliciting_threshold(0u32.into()).reordering_threshold(1u32.into());
        t.ack_frequency_config(Some(ack));
    }
    t
}

/// Address validation tokens (RFC 9000 section 8.1.3): the server sends `sent` of them in
/// NEW_TOKEN frames on each connection once its handshake is confirmed, and a later connection
/// from the same IP address that presents one (within two weeks, quinn's lifetime) counts as
/// validated: its first flight is not held to three times what the client sent
/// (anti-amplification), and it needs no Retry. Each token is taken once: quinn's
/// `BloomTokenLog` remembers the tokens used in at most 10 MiB (an exact set while small, then
/// a Bloom filter, whose false positives only make a token be ignored). 0: none sent, and
/// none accepted. `ignored`: tokens are sent but none is taken, every address held to the
/// limit as if it came without one (what seeds/002 found DoQ resolvers do).
fn validation_tokens(sent: u32, ignored: bool) -> quinn::ValidationTokenConfig {
    let mut v = quinn::ValidationTokenConfig::default();
    v.sent(sent);
    if sent == 0 || ignored {
        v.log(Arc::new(quinn::NoneTokenLog));
    }
    v
}

/// An endpoint that knows the connections of an earlier run with the same key well enough to
/// reset them (RFC 9000 section 10.3): a server must keep its stateless reset key across
/// restarts for its old clients to believe its resets, which end at once a connection they
/// would otherwise hold until its idle timeout; and quinn answers only packets whose
/// connection ID its generator signed. Both keys come from the certificate's private key
/// (HMAC-SHA256 under labels), so a responder restarted with the same `--cert`/`--key` resets
/// its old connections. (A generated certificate has a new key at each start.)
fn endpoint_config(key: &PrivateKeyDer<'_>) -> quinn::EndpointConfig {
    let secret = hmac::Key::new(hmac::HMAC_SHA256, key.secret_der());
    let derive = |label: &[u8]| hmac::sign(&secret, label);
    let reset = hmac::Key::new(hmac::HMAC_SHA256, derive(b"volley serve: QUIC stateless reset key").as_ref());
    let mut cid = [0u8; 8];
    cid.copy_from_slice(&derive(b"volley serve: QUIC connection ID key").as_ref()[..8]);
    let cid = u64::from_le_bytes(cid);
    let mut c = quinn::EndpointConfig::new(Arc::new(reset));
    c.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid)));
    c
}

/// A server endpoint on `socket` (bound already; one per I/O thread, same port).
pub(crate) fn endpoint(socket: std::net::UdpSocket, config: &Config) -> std::io::Result<quinn::Endpoint> {
    let (ep, sc) = (config.endpoint.clone(), config.server.clone());
    quinn::Endpoint::new(ep, Some(sc), socket, Arc::new(quinn::TokioRuntime))
}

/// Whether the handshake is still under way: a stream accepted then came in 0-RTT packets.
pub(crate) fn still_handshaking(accepted: &mut ZeroRttAccepted) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    Pin::new(accepted).poll(&mut cx).is_pending()
}

/// A QUIC handshake, within the smaller of the idle and request timeouts (a timeout counts as
/// `closed_slow`), holding its place under `--max-handshakes` until it ends.
async fn handshake(connecting: quinn::Connecting, ctx: &Ctx, handshaking: Option<Slot>) -> Option<Connection> {
    let limit = ctx.idle_timeout.min(ctx.request_timeout);
    let r = tokio::time::timeout(limit, connecting).await;
    drop(handshaking);
    match r {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(_)) => None,
        Err(_) => {
            add(&ctx.counters.closed_slow, 1);
            None
        }
    }
}

/// Accepts connections until `stop` turns true: sends a Retry to every client whose address
/// is not validated yet when `retry` is on; at the listener's `--max-conns` a new connection
/// takes the place of the longest idle one on this thread (closed with the application's
/// NO_ERROR, counted as evicted; [`crate::policy::Room`]), or is refused (CONNECTION_REFUSED)
/// when there is none; with 0-RTT, hands the connection over before the handshake
/// completes (0.5-RTT), with the future telling when it did. When it stops, every connection
/// is closed with the application's NO_ERROR (DOQ_NO_ERROR, H3_NO_ERROR).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn accept_loop<F, Fut>(
    ep: quinn::Endpoint,
    cfg: Config,
    ctx: Rc<Ctx>,
    transport: Transport,
    retry: bool,
    zero_rtt: bool,
    mut stop: watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(Connection, Option<ZeroRttAccepted>, Rc<Ctx>, Tracker) -> Fut + Copy + 'static,
    Fut: Future<Output = ()> + 'static,
{
    loop {
        if *stop.borrow_and_update() {
            break;
        }
        let incoming = tokio::select! {
            _ = stop.changed() => continue,
            i = ep.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        // Validated and still free to Retry: the client presented a NEW_TOKEN token (a Retry
        // token validates too, but spends the Retry).
        if incoming.remote_address_validated() && incoming.may_retry() {
            add(&ctx.counters.quic_token_validated, 1);
        }
        if retry && !incoming.remote_address_validated() {
            if incoming.retry().is_ok() {
                add(&ctx.counters.retry_sent, 1);
            }
            continue;
        }
        let Some(place) = ctx.admit(transport) else {
            incoming.refuse();
            continue;
        };
        // --max-handshakes: a place among the handshakes in progress, or refused.
        let Ok(handshaking) = ctx.limits.handshake(transport) else {
            add(&ctx.counters.refused_handshakes, 1);
            incoming.refuse();
            continue;
        };
        let (accepted, trace) = match cfg.traced(incoming.remote_address()) {
            Some((traced, trace)) => (incoming.accept_with(traced), Some(trace)),
            None => (incoming.accept(), None),
        };
        let traced = move |conn: &quinn::Connection| {
            if let Some(t) = &trace {
                volley_transport::qlog::register(conn, t);
            }
        };
        let Ok(connecting) = accepted else { continue };
        let ctx = ctx.clone();
        let tracker = place.tracker();
        let no_error = no_error_of(transport);
        let task = tokio::task::spawn_local(async move {
            // Holds the connection's place under --max-conns until it is served.
            let tracker = place.tracker();
            let _place = place;
            let serve = |conn: Connection, accepted, ctx| {
                let c = conn.clone();
                tracker.set_close(move || c.close(no_error.into(), b""));
                serve(conn, accepted, ctx, tracker.clone())
            };
            // The handshake, within the smaller of the idle and request timeouts (a timeout
            // counts as closed_slow), holding its place under --max-handshakes until it ends.
            if zero_rtt {
                match connecting.into_0rtt() {
                    Ok((conn, accepted)) => {
                        drop(handshaking);
                        traced(&conn);
                        serve(conn, Some(accepted), ctx).await
                    }
                    Err(connecting) => {
                        if let Some(conn) = handshake(connecting, &ctx, handshaking).await {
                            traced(&conn);
                            serve(conn, None, ctx).await
                        }
                    }
                }
            } else if let Some(conn) = handshake(connecting, &ctx, handshaking).await {
                traced(&conn);
                serve(conn, None, ctx).await
            }
        });
        tracker.set_task(task.abort_handle());
    }
    ep.close(no_error_of(transport).into(), b"");
}

/// The application's NO_ERROR code on `transport` (DOQ_NO_ERROR, H3_NO_ERROR).
fn no_error_of(transport: Transport) -> u32 {
    if transport == Transport::Doh3 {
        crate::doh3::H3_NO_ERROR
    } else {
        crate::doq::DOQ_NO_ERROR
    }
}

/// Counts a connection's first stream that arrived during the handshake as early data.
pub(crate) fn note_first_stream(ctx: &Ctx, zero_rtt: &mut Option<ZeroRttAccepted>) {
    if let Some(mut accepted) = zero_rtt.take() {
        if still_handshaking(&mut accepted) {
            add(&ctx.counters.early_data, 1);
        }
    }
}

/// The streams of a connection whose answers may not have reached the client yet: a graceful
/// close waits for them, for a stream finished is not a stream received. Each stream counts
/// until quinn's `SendStream::stopped` resolves: the client acknowledged all of its data (or
/// its reset), stopped it, or the connection ended.
#[derive(Default)]
pub(crate) struct Unacked {
    streams: Cell<u64>,
    done: Notify,
}

impl Unacked {
    /// Counts `send` until it is done.
    pub(crate) fn track(self: &Rc<Self>, send: &quinn::SendStream) {
        self.streams.set(self.streams.get() + 1);
        let (stopped, me) = (send.stopped(), self.clone());
        tokio::task::spawn_local(async move {
            let _ = stopped.await;
            me.streams.set(me.streams.get() - 1);
            me.done.notify_one();
        });
    }

    /// Resolves once every stream counted is done.
    pub(crate) async fn settled(&self) {
        while self.streams.get() > 0 {
            self.done.notified().await;
        }
    }
}
