//! DNS over HTTPS (RFC 8484) over HTTP/1.1 and HTTP/2 on one TLS port, the version chosen
//! by ALPN (`h2`, else HTTP/1.1). `GET PATH?dns=BASE64URL` and `POST PATH` with an
//! `application/dns-message` body; answers `application/dns-message` with
//! `cache-control: max-age=TTL`. Wrong path 404, wrong method 405, bad `dns` 400, wrong
//! content type 415, a target over 8 KiB 414, a head over 16 KiB 431 (the HTTP layer's),
//! over `--max-qps-per-client` 429.
//!
//! HTTP/2 runs on the h2 crate directly: requests whose query is at hand (GET, or a POST whose
//! body arrived with its headers) are answered inline in the connection task; the others,
//! and delayed answers, get a task of their own. HTTP/1.1 runs on hyper.

pub(crate) mod request;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::answer::Transport;
use crate::ctx::Ctx;
use crate::stats::add;
use request::{Kind, Outcome};

/// ALPN protocols offered, HTTP/2 preferred.
pub(crate) const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// Serves DoH (HTTP/1.1 and HTTP/2) on `listener`.
pub(crate) async fn serve(
    listener: std::net::TcpListener,
    ctx: Rc<Ctx>,
    tls: Arc<rustls::ServerConfig>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    crate::dot::serve_tls(listener, ctx, tls, stop, Transport::Doh, connection).await
}

/// `place`: its place under `--max-conns`, held until the connection ends; the HTTP/1.1 and
/// HTTP/2 halves tell it when the connection was last active.
async fn connection(
    stream: TcpStream,
    ctx: Rc<Ctx>,
    acceptor: TlsAcceptor,
    handshaking: Option<crate::policy::Slot>,
    place: crate::policy::Place,
) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let sock = Sock { fd, peer: stream.peer_addr().ok().map(|a| a.ip()) };
    let cork = Rc::new(Cork::default());
    let stream = Corked { inner: stream, buf: Vec::new(), at: 0, cork: cork.clone() };
    let Some(mut tls) = crate::dot::handshake(stream, &ctx, &acceptor, handshaking).await else { return };
    let early = crate::dot::early_data(&mut tls, &ctx);
    let tracker = place.tracker();
    tracker.note(tokio::time::Instant::now(), false);
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = Prefixed { early, at: 0, inner: tls };
    // Each on the heap: this task's future then holds the one the connection speaks, not
    // room for the larger of the two (idle connections: see docs/reliability.md).
    if h2 {
        Box::pin(serve_h2(io, ctx, sock, cork, tracker)).await;
    } else {
        let Some(io) = first_head(io, &ctx).await else { return };
        let stalled = Rc::new(std::cell::Cell::new(false));
        let io = Batched { inner: io, buf: Vec::new(), at: 0, read_idle: false, stalled: stalled.clone() };
        Box::pin(serve_h1(io, stalled, ctx, sock.peer, tracker)).await;
    }
}

/// The buffer an HTTP/1.1 connection's first request head is first read into; it doubles as
/// it fills, to at most `MAX_HEAD` (hyper then reads the rest, and answers 431).
const HEAD_FIRST: usize = 512;

/// Reads an HTTP/1.1 connection's first request head until it is whole (an empty line) or
/// `MAX_HEAD` long, then gives the connection back with those bytes to be read again:
/// hyper gets it only then. hyper allocates an 8 KiB write buffer when it takes a
/// connection and a read buffer of 8 KiB at its first read, grown to 16 KiB at its second,
/// and keeps both: a client dribbling a head a byte at a time (slowloris) held 24 KiB of
/// them until the timeout, here a buffer the size of what it sent. Within `--idle-timeout`
/// from the handshake, as hyper's header read timeout was (`closed_idle`, no response);
/// None when the connection ends first.
async fn first_head<S: AsyncRead + Unpin>(mut io: Prefixed<S>, ctx: &Ctx) -> Option<Prefixed<S>> {
    use tokio::io::AsyncReadExt;
    let mut head: Vec<u8> = Vec::new();
    let read = async {
        loop {
            if head.len() == head.capacity() {
                let want = (head.capacity() * 2).clamp(HEAD_FIRST, request::MAX_HEAD);
                head.reserve_exact(want - head.len());
            }
            let from = head.len().saturating_sub(2);
            match io.read_buf(&mut head).await {
                Ok(0) => return !head.is_empty(),
                Ok(_) => {}
                Err(_) => return false,
            }
            let tail = &head[from..];
            if tail.windows(2).any(|w| w == b"\n\n")
                || tail.windows(3).any(|w| w == b"\n\r\n")
                || head.len() >= request::MAX_HEAD
            {
                return true;
            }
        }
    };
    match tokio::time::timeout(ctx.idle_timeout, read).await {
        Ok(true) => {}
        Ok(false) => return None,
        Err(_) => {
            add(&ctx.counters.closed_idle, 1);
            return None;
        }
    }
    io.unread(head);
    Some(io)
}

/// A DoH connection's TCP socket (open as long as the connection) and its client's address
/// (`--max-qps-per-client`).
#[derive(Clone, Copy)]
struct Sock {
    fd: std::os::fd::RawFd,
    peer: Option<std::net::IpAddr>,
}

/// A stream that first yields bytes received before it (TLS early data, an HTTP/1.1
/// connection's first head).
struct Prefixed<S> {
    early: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    /// Puts `bytes` back before what is left to yield.
    fn unread(&mut self, mut bytes: Vec<u8>) {
        bytes.extend_from_slice(&self.early[self.at..]);
        self.early = bytes;
        self.at = 0;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if self.at < self.early.len() {
            let n = (self.early.len() - self.at).min(buf.remaining());
            buf.put_slice(&self.early[self.at..self.at + n]);
            self.at += n;
            if self.at == self.early.len() {
                self.early = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Writes `buf` from `at` on to `inner`, moving `at` as it goes: the held output of [`Corked`]
/// and [`Batched`].
fn write_out<S: AsyncWrite + Unpin>(
    inner: &mut S,
    buf: &[u8],
    at: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<()>> {
    while *at < buf.len() {
        let n = ready!(Pin::new(&mut *inner).poll_write(cx, &buf[*at..]))?;
        if n == 0 {
            return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
        }
        *at += n;
    }
    Poll::Ready(Ok(()))
}

/// Output held back by a [`Corked`] socket before it writes through even while corked.
const CORK_MAX: usize = 64 * 1024;

/// The TCP socket under a DoH connection's TLS: passes writes through, except while corked,
/// when it gathers them and ignores flushes. h2 flushes whenever its connection runs out of
/// input, i.e. once per request when the loop takes requests one at a time, and each flush
/// is a TLS record and a syscall. Corked while the HTTP/2 loop takes the requests at hand,
/// the answers to all of them go out in one syscall when it uncorks (the loop then polls the
/// connection once more, which flushes) — still one TLS record per answer (some clients,
/// dnsperf among them, take one answer per record).
struct Corked<S> {
    inner: S,
    buf: Vec<u8>,
    /// Already written of `buf`.
    at: usize,
    cork: Rc<Cork>,
}

/// Shared by a [`Corked`] socket and its connection loop.
#[derive(Default)]
struct Cork {
    on: std::cell::Cell<bool>,
    /// Output is waiting for a flush.
    held: std::cell::Cell<bool>,
}

impl<S: AsyncWrite + Unpin> Corked<S> {
    /// Writes out everything gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(write_out(&mut self.inner, &self.buf, &mut self.at, cx))?;
        self.buf.clear();
        self.at = 0;
        self.cork.held.set(false);
        Poll::Ready(Ok(()))
    }

    /// Whether a write goes straight through (nothing held, not corked).
    fn through(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<bool>> {
        if self.cork.on.get() && self.buf.len() < CORK_MAX {
            return Poll::Ready(Ok(false));
        }
        ready!(self.poll_drain(cx))?;
        Poll::Ready(Ok(!self.cork.on.get()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Corked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Corked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if ready!(self.through(cx))? {
            return Pin::new(&mut self.inner).poll_write(cx, buf);
        }
        self.buf.extend_from_slice(buf);
        self.cork.held.set(true);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if ready!(self.through(cx))? {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        let mut n = 0;
        for b in bufs {
            self.buf.extend_from_slice(b);
            n += b.len();
        }
        self.cork.held.set(true);
        Poll::Ready(Ok(n))
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.cork.on.get() && self.buf.len() < CORK_MAX {
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// HTTP/1.1: gathers hyper's writes and passes them on once a read found no more input (the
/// client's pipelined requests all taken), so that the responses to requests read together
/// leave in one TLS record and one write. That is what hyper's `pipeline_flush` does, but
/// hyper's own buffer is not written out when the connection ends with a parse error (its
/// automatic 431 or 414 for an oversized head was lost); here a shutdown writes what is held.
/// Nor is anything held while the request in hand waits (a delayed answer, a body to come):
/// the responses before it leave then, not after it.
struct Batched<S> {
    inner: S,
    buf: Vec<u8>,
    /// Already written of `buf`.
    at: usize,
    /// The last read found nothing waiting (or the end): a flush writes through.
    read_idle: bool,
    /// The request being answered is waiting ([`serve_h1`] sets it): a flush writes through.
    stalled: Rc<std::cell::Cell<bool>>,
}

impl<S: AsyncWrite + Unpin> Batched<S> {
    /// Writes out everything gathered; frees a buffer grown past a few responses.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(write_out(&mut self.inner, &self.buf, &mut self.at, cx))?;
        self.at = 0;
        if self.buf.capacity() > 4096 {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        Poll::Ready(Ok(()))
    }
}

/// The most plaintext one read of an HTTP/1.1 connection asks TLS for. hyper offers its whole
/// read buffer (8 KiB from the first read), which tokio-rustls zeroes before it copies into
/// it: every connection's buffer would be resident from its first read, idle or not. Reading
/// in pieces of this size costs no system call (rustls holds the decrypted records), and
/// leaves the rest of hyper's buffer untouched until a request needs it.
const H1_READ: usize = 2048;

impl<S: AsyncRead + Unpin> AsyncRead for Batched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let mut part = buf.take(H1_READ);
        let r = Pin::new(&mut self.inner).poll_read(cx, &mut part);
        let n = part.filled().len();
        self.read_idle = match &r {
            Poll::Ready(Ok(())) => n == 0,
            _ => true,
        };
        if n > 0 {
            // SAFETY: `part` is the start of `buf`'s unfilled part, and the read filled (so
            // initialised) its first n bytes.
            unsafe { buf.assume_init(n) };
            buf.advance(n);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Batched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if self.buf.len() >= CORK_MAX {
            ready!(self.poll_drain(cx))?;
        }
        self.buf.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.buf.len() >= CORK_MAX {
            ready!(self.poll_drain(cx))?;
        }
        let mut n = 0;
        for b in bufs {
            self.buf.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.read_idle && !self.stalled.get() && self.buf.len() < CORK_MAX {
            // More requests were read: their responses go with these (hyper polls the read
            // side again, and flushes after it). Not when the request in hand waits: hyper
            // reads no further until it is answered, so these would wait with it.
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

// ---------------------------------------------------------------------------------------
// HTTP/2

type H2Respond = h2::server::SendResponse<Bytes>;

/// Sends a head and (unless empty) a body on an HTTP/2 stream.
fn h2_send(respond: &mut H2Respond, head: Response<()>, body: &[u8]) {
    let end = body.is_empty();
    if let Ok(mut s) = respond.send_response(head, end) {
        if !end {
            let _ = s.send_data(Bytes::copy_from_slice(body), true);
        }
    }
}

/// What the tasks of an HTTP/2 connection's held streams (delayed answers, dropped queries,
/// bodies on their way) share with it: the connection's end, and a token whose holders
/// eviction counts (a connection with held streams is not idle, [`crate::policy::Tracker`]).
#[derive(Clone)]
struct Streams {
    closed: watch::Receiver<()>,
    token: Rc<()>,
}

/// Carries out an outcome on an HTTP/2 stream; delayed answers and dropped queries get a task.
fn h2_outcome(ctx: &Ctx, mut respond: H2Respond, outcome: Outcome, out: &[u8], streams: &Streams) {
    match outcome {
        Outcome::Reset => respond.send_reset(h2::Reason::INTERNAL_ERROR),
        Outcome::Reply { head, delay: None } => {
            request::sent(ctx, &head, out);
            h2_send(&mut respond, head, out);
        }
        Outcome::Reply { head, delay: Some(d) } => {
            let body = Bytes::copy_from_slice(out);
            let counters = ctx.counters.clone();
            let mut streams = streams.clone();
            tokio::task::spawn_local(async move {
                // A client that resets the stream (gives the query up) ends the wait at once.
                let reset = tokio::select! {
                    _ = tokio::time::sleep(d) => false,
                    r = std::future::poll_fn(|cx| respond.poll_reset(cx)) => {
                        note_reset(&counters, r);
                        true
                    }
                    _ = streams.closed.changed() => true,
                };
                if !reset {
                    counters.sent(&body);
                    let end = body.is_empty();
                    if let Ok(mut s) = respond.send_response(head, end) {
                        if !end {
                            let _ = s.send_data(body, true);
                        }
                    }
                }
            });
        }
        Outcome::Drop => {
            // Hold the stream, unanswered, until the client resets it (gives the query up) or
            // the connection ends.
            let (counters, mut streams) = (ctx.counters.clone(), streams.clone());
            tokio::task::spawn_local(async move {
                tokio::select! {
                    r = std::future::poll_fn(|cx| respond.poll_reset(cx)) => note_reset(&counters, r),
                    _ = streams.closed.changed() => {}
                }
                drop(respond);
            });
        }
    }
}

/// Counts an HTTP/2 stream the client reset before its answer left, by its code (`cancelled`
/// for CANCEL, `stopped` for others).
fn note_reset(counters: &crate::stats::Counters, r: Result<h2::Reason, h2::Error>) {
    if let Ok(reason) = r {
        counters.stopped_by_client(u32::from(reason).into(), u32::from(h2::Reason::CANCEL).into());
    }
}

/// Reads a POST body (at most [`request::MAX_QUERY`] octets), releasing flow-control credit.
/// `poll_data` is driven by `cx`; Ready(None) when the body is too long or broken.
fn poll_body(body: &mut h2::RecvStream, buf: &mut Vec<u8>, cx: &mut Context<'_>) -> Poll<Option<()>> {
    loop {
        match body.poll_data(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                if buf.len() + chunk.len() > request::MAX_QUERY {
                    return Poll::Ready(None);
                }
                buf.extend_from_slice(&chunk);
            }
            Poll::Ready(Some(Err(_))) => return Poll::Ready(None),
            Poll::Ready(None) => return Poll::Ready(Some(())),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// One HTTP/2 request: answered inline when its query is at hand.
fn h2_request(
    ctx: &Rc<Ctx>,
    req: Request<h2::RecvStream>,
    mut respond: H2Respond,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
    streams: &Streams,
    sock: Sock,
) {
    // The refuse-stream fault: refused before the request is read (not a query).
    if ctx.faults.refuse_stream.as_ref().is_some_and(|s| s.hit()) {
        respond.send_reset(h2::Reason::REFUSED_STREAM);
        return;
    }
    let (parts, mut body) = req.into_parts();
    match request::check(ctx, &parts.method, &parts.uri, &parts.headers, scratch) {
        Err(status) => h2_send(&mut respond, request::status_head(status), &[]),
        Ok(Kind::Get) => {
            let outcome = request::answer(ctx, sock.peer, scratch, Transport::Doh, out);
            h2_outcome(ctx, respond, outcome, out, streams);
        }
        Ok(Kind::Post) => {
            scratch.clear();
            // The body usually came with the headers: try without waiting first.
            let mut noop = Context::from_waker(std::task::Waker::noop());
            match poll_body(&mut body, scratch, &mut noop) {
                Poll::Ready(Some(())) => {
                    let outcome = request::answer(ctx, sock.peer, scratch, Transport::Doh, out);
                    h2_outcome(ctx, respond, outcome, out, streams);
                }
                Poll::Ready(None) => h2_send(&mut respond, request::status_head(StatusCode::PAYLOAD_TOO_LARGE), &[]),
                Poll::Pending => {
                    // The body is still on its way: acknowledge the headers now.
                    crate::tcp::quick_ack(sock.fd);
                    let (ctx, streams) = (ctx.clone(), streams.clone());
                    let mut buf = std::mem::take(scratch);
                    tokio::task::spawn_local(async move {
                        // --request-timeout: a body that does not come whole in time is
                        // answered 408 and its stream freed.
                        let got = tokio::time::timeout(
                            ctx.request_timeout,
                            std::future::poll_fn(|cx| poll_body(&mut body, &mut buf, cx)),
                        )
                        .await;
                        let mut out = Vec::with_capacity(512);
                        let got = match got {
                            Ok(got) => got,
                            Err(_) => {
                                add(&ctx.counters.closed_slow, 1);
                                h2_send(&mut respond, request::status_head(StatusCode::REQUEST_TIMEOUT), &[]);
                                return;
                            }
                        };
                        match got {
                            Some(()) => {
                                let outcome = request::answer(&ctx, sock.peer, &buf, Transport::Doh, &mut out);
                                h2_outcome(&ctx, respond, outcome, &out, &streams);
                            }
                            None => h2_send(&mut respond, request::status_head(StatusCode::PAYLOAD_TOO_LARGE), &[]),
                        }
                    });
                }
            }
        }
    }
}

/// What the HTTP/2 connection loop waits for.
// Moved once per request, never stored: boxing the request would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum H2Event {
    Request(Request<h2::RecvStream>, H2Respond),
    /// The connection ended (closed, or broken).
    Closed,
    /// No request for the idle timeout.
    Idle,
}

/// Serves HTTP/2 on `io`; `sock` is its TCP socket, `cork` its [`Corked`] switch.
async fn serve_h2<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: S,
    ctx: Rc<Ctx>,
    sock: Sock,
    cork: Rc<Cork>,
    tracker: crate::policy::Tracker,
) {
    let idle = ctx.idle_timeout;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(ctx.max_streams)
        .max_header_list_size(request::MAX_HEAD as u32)
        .max_send_buffer_size(1 << 20);
    // Streams the client reset before they were taken, waiting to be taken: h2 ends the
    // connection with ENHANCE_YOUR_CALM beyond this (rapid reset, CVE-2023-44487). Its default
    // (20) is below what an honest client resets at once after an outage: every request it
    // sent into the silence (more than its open streams: it gave up the first ones and sent
    // more) arrives with its CANCEL in one burst. Ten times the open streams a client may have
    // lets an outage of a few seconds pass; a flood of resets still goes beyond it.
    builder.max_pending_accept_reset_streams((10 * ctx.max_streams as usize).max(20));
    let Ok(Ok(mut conn)) = tokio::time::timeout(idle, builder.handshake::<_, Bytes>(io)).await else { return };
    // Dropped when the connection ends: releases held (dropped, delayed) streams.
    let (_closed_tx, closed) = watch::channel(());
    let streams = Streams { closed, token: Rc::new(()) };
    tracker.busy_while_shared(&streams.token);
    let mut scratch = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(512);
    let mut served = 0u64;
    let mut closing = false;
    // The idle timer: one per connection, moved on lazily (`last` is when the connection last
    // ran out of requests after taking some).
    let timer = tokio::time::sleep(idle);
    tokio::pin!(timer);
    let mut last = tokio::time::Instant::now();
    let mut taken = false;
    loop {
        // Take the requests at hand corked, so that their answers leave together; then,
        // out of requests, uncork and poll once more, which flushes.
        let event = std::future::poll_fn(|cx| {
            cork.on.set(true);
            match conn.poll_accept(cx) {
                Poll::Ready(Some(Ok((req, respond)))) => {
                    taken = true;
                    return Poll::Ready(H2Event::Request(req, respond));
                }
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(H2Event::Closed),
                Poll::Pending => {}
            }
            cork.on.set(false);
            if cork.held.get() {
                match conn.poll_accept(cx) {
                    Poll::Ready(Some(Ok((req, respond)))) => {
                        taken = true;
                        return Poll::Ready(H2Event::Request(req, respond));
                    }
                    Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(H2Event::Closed),
                    Poll::Pending => {}
                }
            }
            if taken {
                taken = false;
                last = tokio::time::Instant::now();
            }
            while timer.as_mut().poll(cx).is_ready() {
                if last + idle > timer.deadline() {
                    timer.as_mut().reset(last + idle);
                } else {
                    last = tokio::time::Instant::now();
                    timer.as_mut().reset(last + idle);
                    return Poll::Ready(H2Event::Idle);
                }
            }
            Poll::Pending
        })
        .await;
        match event {
            H2Event::Request(req, respond) => {
                served += 1;
                tracker.note(tokio::time::Instant::now(), false);
                h2_request(&ctx, req, respond, &mut scratch, &mut out, &streams, sock);
                if closing {
                    continue;
                }
                // --max-queries-per-conn, or the goaway-after fault: GOAWAY (graceful:
                // requests the client sent before it saw it are still answered), then
                // close once the streams are done.
                if ctx.max_queries.is_some_and(|n| served >= n) {
                    add(&ctx.counters.closed_max_queries, 1);
                    conn.graceful_shutdown();
                    closing = true;
                } else if ctx.faults.goaway_after.is_some_and(|n| served >= n) {
                    conn.graceful_shutdown();
                    closing = true;
                }
            }
            H2Event::Closed => break,
            H2Event::Idle => {
                // No new request for the idle timeout: GOAWAY, then close when streams end
                // (or after another idle period).
                if closing {
                    break;
                }
                add(&ctx.counters.closed_idle, 1);
                conn.graceful_shutdown();
                closing = true;
            }
        }
    }
    // Let the connection flush its last frames.
    cork.on.set(false);
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(1), std::future::poll_fn(|cx| conn.poll_closed(cx))).await;
}

// ---------------------------------------------------------------------------------------
// HTTP/1.1

/// The `rst-stream` fault over HTTP/1.1: an error makes hyper close the connection.
#[derive(Debug)]
struct Reset;

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("rst-stream fault")
    }
}
impl std::error::Error for Reset {}

type H1Body = http_body_util::Full<Bytes>;

async fn h1_request(
    ctx: Rc<Ctx>,
    req: Request<hyper::body::Incoming>,
    served: Rc<std::cell::Cell<u64>>,
    peer: Option<std::net::IpAddr>,
) -> Result<Response<H1Body>, Reset> {
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let mut scratch = Vec::new();
    let n = served.get() + 1;
    served.set(n);
    // --max-queries-per-conn or the goaway-after fault: the last response of the connection.
    let spent = ctx.max_queries.is_some_and(|m| n == m);
    let close = spent || ctx.faults.goaway_after.is_some_and(|g| n >= g);
    let finish = |mut r: Response<()>, body: Bytes| {
        if spent {
            add(&ctx.counters.closed_max_queries, 1);
        }
        if close {
            r.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
        }
        r.map(|()| http_body_util::Full::new(body))
    };
    let kind = match request::check(&ctx, &parts.method, &parts.uri, &parts.headers, &mut scratch) {
        Ok(k) => k,
        Err(status) => return Ok(finish(request::status_head(status), Bytes::new())),
    };
    if kind == Kind::Post {
        let collect = http_body_util::Limited::new(body, request::MAX_QUERY).collect();
        match tokio::time::timeout(ctx.request_timeout, collect).await {
            Ok(Ok(b)) => scratch = b.to_bytes().to_vec(),
            Ok(Err(_)) => return Ok(finish(request::status_head(StatusCode::PAYLOAD_TOO_LARGE), Bytes::new())),
            Err(_) => {
                // --request-timeout: the body did not come whole in time; 408, then close.
                add(&ctx.counters.closed_slow, 1);
                let mut r = request::status_head(StatusCode::REQUEST_TIMEOUT);
                r.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
                return Ok(r.map(|()| http_body_util::Full::new(Bytes::new())));
            }
        }
    }
    let mut out = Vec::with_capacity(512);
    match request::answer(&ctx, peer, &scratch, Transport::Doh, &mut out) {
        Outcome::Reset => Err(Reset),
        // Never answered: hyper drops this future when the connection ends.
        Outcome::Drop => std::future::pending().await,
        Outcome::Reply { head, delay } => {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            request::sent(&ctx, &head, &out);
            Ok(finish(head, Bytes::from(out)))
        }
    }
}

/// Serves HTTP/1.1 on `io`; `stalled` says, each time hyper polls the request in hand,
/// whether it is waiting (hyper polls it before it flushes, so the flush knows).
async fn serve_h1<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: S,
    stalled: Rc<std::cell::Cell<bool>>,
    ctx: Rc<Ctx>,
    peer: Option<std::net::IpAddr>,
    tracker: crate::policy::Tracker,
) {
    let served = Rc::new(std::cell::Cell::new(0u64));
    let svc = {
        let ctx = ctx.clone();
        // Boxed: the connection is then Unpin, so that it can be polled without its shutdown
        // and give the stream back (below).
        hyper::service::service_fn(move |req| {
            let answer = h1_request(ctx.clone(), req, served.clone(), peer);
            let (stalled, tracker) = (stalled.clone(), tracker.clone());
            // Busy while its request is answered; idle from its answer on.
            tracker.note(tokio::time::Instant::now(), true);
            Box::pin(async move {
                let mut answer = std::pin::pin!(answer);
                let r = std::future::poll_fn(|cx| {
                    let r = answer.as_mut().poll(cx);
                    stalled.set(r.is_pending());
                    r
                })
                .await;
                tracker.note(tokio::time::Instant::now(), false);
                r
            })
        })
    };
    // The header read timeout runs from the moment hyper waits for a request head, so it is
    // the keep-alive idle timeout too: no request for that long, and the connection closes.
    // Pipelined requests (read together) get their responses written together, one write
    // for the batch rather than one per response: [`Batched`], not hyper's pipeline_flush,
    // which loses the automatic response to a parse error (431, 414).
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(ctx.idle_timeout)
        .keep_alive(true)
        // A request head (a long URL, say) is read into at most this much; beyond it hyper
        // answers 431 and closes, instead of growing the buffer to its default ~400 KiB.
        .max_buf_size(request::MAX_HEAD);
    let mut conn = b.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
    if let Err(e) = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)).await {
        if e.is_timeout() {
            add(&ctx.counters.closed_idle, 1);
            return;
        }
    }
    // hyper is done: the client closed, or a response closed the connection (`Connection:
    // close`, or an error such as 431 for a head over 16 KiB, sent while the rest of that
    // head was still coming). Close (the held responses, close_notify, FIN), then read what
    // the client still sends for a moment: closed with unread input, the socket would answer
    // it with a RST, which can destroy the response before the client reads it.
    let mut io = conn.into_parts().io.into_inner();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), tokio::io::AsyncWriteExt::shutdown(&mut io)).await;
    crate::tcp::linger(&mut io).await;
}
