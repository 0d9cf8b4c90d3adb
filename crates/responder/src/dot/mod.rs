//! DNS over TLS (RFC 7858): the TCP server's connection code ([`crate::tcp::connection`])
//! over a tokio-rustls stream. ALPN `dot` is offered (clients that send none are served too).
//! TLS 1.3 early data, when accepted, is read right after the handshake and answered first.

use std::io::Read;
use std::rc::Rc;
use std::sync::Arc;

use rustls::HandshakeKind;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};

use crate::answer::Transport;
use crate::ctx::Ctx;
use crate::policy::{Place, Slot};
use crate::stats::add;

/// ALPN protocol of DoT (RFC 7858 section 3.2, IANA "dot").
pub(crate) const ALPN: &[u8] = b"dot";

/// Serves DoT on `listener` with this TLS configuration.
pub(crate) async fn serve(
    listener: std::net::TcpListener,
    ctx: Rc<Ctx>,
    tls: Arc<rustls::ServerConfig>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    serve_tls(listener, ctx, tls, stop, Transport::Dot, connection).await
}

/// Accepts TLS-over-TCP connections (DoT, DoH) on `listener`: counts each one under its
/// transport and runs `connection` for it in a task of its own.
pub(crate) async fn serve_tls<F, Fut>(
    listener: std::net::TcpListener,
    ctx: Rc<Ctx>,
    tls: Arc<rustls::ServerConfig>,
    stop: watch::Receiver<bool>,
    transport: Transport,
    connection: F,
) -> std::io::Result<()>
where
    F: Fn(TcpStream, Rc<Ctx>, TlsAcceptor, Option<Slot>, Place) -> Fut + Copy + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let acceptor = TlsAcceptor::from(tls);
    let counter = match transport {
        Transport::Doh => &ctx.counters.doh_connections,
        _ => &ctx.counters.dot_connections,
    };
    crate::tcp::accept_loop(listener, &ctx.clone(), transport, stop, |stream, place| {
        // --max-handshakes: a place among the handshakes in progress, or closed at once.
        let Ok(handshaking) = ctx.limits.handshake(transport) else {
            add(&ctx.counters.refused_handshakes, 1);
            drop(stream);
            return None;
        };
        add(counter, 1);
        let (ctx, acceptor) = (ctx.clone(), acceptor.clone());
        let task = tokio::task::spawn_local(connection(stream, ctx, acceptor, handshaking, place));
        Some(task.abort_handle())
    })
    .await
}

/// The TLS handshake (bounded by the idle and request timeouts), then the DNS-over-TCP
/// connection.
async fn connection(stream: TcpStream, ctx: Rc<Ctx>, acceptor: TlsAcceptor, handshaking: Option<Slot>, place: Place) {
    let Some(mut tls) = handshake(stream, &ctx, &acceptor, handshaking).await else { return };
    let early = early_data(&mut tls, &ctx);
    crate::tcp::connection(tls, ctx, Transport::Dot, early, &place).await;
}

/// Runs the server handshake, within the smaller of the idle and request timeouts (a
/// timeout counts as `closed_slow`), holding its place under `--max-handshakes` until it
/// ends; counts resumed handshakes. None when it failed or timed out. The ClientHello is read
/// first; its costly processing waits its turn ([`crate::tls::handshaker`]).
pub(crate) async fn handshake<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: S,
    ctx: &Ctx,
    acceptor: &TlsAcceptor,
    handshaking: Option<Slot>,
) -> Option<tokio_rustls::server::TlsStream<S>> {
    let limit = ctx.idle_timeout.min(ctx.request_timeout);
    let config = acceptor.config().clone();
    let r = tokio::time::timeout(limit, async {
        let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream).await.ok()?;
        let accept = ctx.handshaker.run(move || start.into_stream(config)).await?;
        accept.await.ok()
    })
    .await;
    drop(handshaking);
    let tls = match r {
        Ok(r) => r?,
        Err(_) => {
            add(&ctx.counters.closed_slow, 1);
            return None;
        }
    };
    if tls.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed) {
        add(&ctx.counters.tls_resumed, 1);
    }
    Some(tls)
}

/// The early data the client sent with its ClientHello (tokio-rustls does not hand it to
/// the reader): read it right after the handshake. Empty when none was accepted.
pub(crate) fn early_data<S>(tls: &mut tokio_rustls::server::TlsStream<S>, ctx: &Ctx) -> Vec<u8> {
    let mut early = Vec::new();
    if let Some(mut ed) = tls.get_mut().1.early_data() {
        let _ = ed.read_to_end(&mut early);
    }
    if !early.is_empty() {
        add(&ctx.counters.early_data, 1);
    }
    early
}
