//! DNS over HTTPS (RFC 8484) over HTTP/1.1 and HTTP/2 on TLS. Queries carry ID 0 and are
//! matched by request, not by ID. GET sends the message base64url-encoded without padding
//! in `?dns=`, POST as an `application/dns-message` body.
//!
//! HTTP/2 (the h2 crate): one connection per lane, one stream per query, all awaited by one
//! task per lane (`responses`); the streams open at once follow the server's
//! SETTINGS_MAX_CONCURRENT_STREAMS (one until its SETTINGS arrive on a new connection).
//! HTTP/1.1 (hyper): keep-alive, one request in flight per connection; with pipelining
//! (`h1_pipeline` > 1) the lane runs on the stream loop of TCP and DoT instead (see `h1`).

use std::cell::Cell;
use std::future::poll_fn;
use std::io;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use volley_metrics::{Close, ErrorKind, Wait};

pub(crate) mod h1;
pub(crate) mod responses;

use crate::meter::{SocketBack, TcpMeter};
use crate::stamp::{RxStamp, StampedTcp};
use crate::stream::{self, Buffers};
use crate::{dot, tcp, tls, DohMethod, Exchange, IdTable, Lane, LaneOptions, Target};

/// The media type of DNS messages over HTTP.
pub const DNS_MESSAGE: &str = "application/dns-message";
/// Largest DNS message accepted in a response body.
const MAX_MESSAGE: usize = 65_535;

/// Appends `data` base64url-encoded without padding (RFC 4648 section 5, as RFC 8484 asks).
pub fn base64url(data: &[u8], out: &mut String) {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    out.reserve(data.len().div_ceil(3) * 4);
    let mut chunks = data.chunks_exact(3);
    for c in &mut chunks {
        let n = (c[0] as u32) << 16 | (c[1] as u32) << 8 | c[2] as u32;
        for s in [18, 12, 6, 0] {
            out.push(A[(n >> s & 63) as usize] as char);
        }
    }
    match *chunks.remainder() {
        [a] => {
            let n = (a as u32) << 16;
            out.push(A[(n >> 18 & 63) as usize] as char);
            out.push(A[(n >> 12 & 63) as usize] as char);
        }
        [a, b] => {
            let n = (a as u32) << 16 | (b as u32) << 8;
            for s in [18, 12, 6] {
                out.push(A[(n >> s & 63) as usize] as char);
            }
        }
        _ => {}
    }
}

/// How requests of a lane are written: the URI prefix and headers, built once.
pub(crate) struct RequestTemplate {
    method: DohMethod,
    /// Full URI (HTTP/2 and HTTP/3 need scheme and authority) or path only (HTTP/1.1).
    post_uri: Uri,
    /// The URI text GET requests append `dns=` to (with `?` or `&`).
    get_prefix: String,
    authority: HeaderValue,
    h1: bool,
    uri_buf: String,
}

impl RequestTemplate {
    pub(crate) fn new(target: &Target, method: DohMethod, h1: bool) -> Result<RequestTemplate, String> {
        let base = if h1 { target.path.clone() } else { format!("https://{}{}", target.authority(), target.path) };
        let post_uri: Uri = base.parse().map_err(|e| format!("invalid DoH URL '{}': {e}", target.url))?;
        let sep = if target.path.contains('?') { '&' } else { '?' };
        let authority =
            HeaderValue::from_str(&target.authority()).map_err(|e| format!("invalid host in '{}': {e}", target.url))?;
        Ok(RequestTemplate {
            method,
            post_uri,
            get_prefix: format!("{base}{sep}dns="),
            authority,
            h1,
            uri_buf: String::new(),
        })
    }

    /// The request for one DNS message; the body (POST) is returned apart.
    pub(crate) fn request(&mut self, msg: &[u8]) -> (Request<()>, Option<Bytes>) {
        let (uri, body) = match self.method {
            DohMethod::Post => (self.post_uri.clone(), Some(Bytes::copy_from_slice(msg))),
            DohMethod::Get => {
                self.uri_buf.clear();
                self.uri_buf.push_str(&self.get_prefix);
                base64url(msg, &mut self.uri_buf);
                // base64url and a parsed prefix always make a valid URI.
                (Uri::try_from(self.uri_buf.as_str()).unwrap_or_else(|_| self.post_uri.clone()), None)
            }
        };
        let mut req = Request::new(());
        *req.uri_mut() = uri;
        if body.is_some() {
            *req.method_mut() = Method::POST;
        }
        let h = req.headers_mut();
        h.insert(ACCEPT, HeaderValue::from_static(DNS_MESSAGE));
        if self.h1 {
            h.insert(HOST, self.authority.clone());
        }
        if let Some(b) = &body {
            h.insert(CONTENT_TYPE, HeaderValue::from_static(DNS_MESSAGE));
            h.insert(CONTENT_LENGTH, HeaderValue::from(b.len()));
        }
        (req, body)
    }
}

/// The prefix of the event that tells an `http_status` failure's status: `http_status_404`.
pub const HTTP_STATUS_EVENT: &str = "http_status_";

/// Counts the status of a response other than 200 as event `http_status_NNN` (the query's
/// fate is `failed: http_status`).
pub(crate) fn note_status<X: Exchange + ?Sized>(x: &X, status: u16) {
    x.event(&format!("{HTTP_STATUS_EVENT}{status}"));
}

/// Checks a response's status and content type (RFC 8484 section 4.2); a status other than
/// 200 is noted as an event.
pub(crate) fn check_head<X: Exchange + ?Sized>(
    x: &X,
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<(), ErrorKind> {
    let r = head_kind(status, headers);
    if r == Err(ErrorKind::HttpStatus) {
        note_status(x, status.as_u16());
    }
    r
}

/// Whether a response head carries a DNS message: status 200, `application/dns-message`.
fn head_kind(status: StatusCode, headers: &HeaderMap) -> Result<(), ErrorKind> {
    if status != StatusCode::OK {
        return Err(ErrorKind::HttpStatus);
    }
    let ok = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(DNS_MESSAGE));
    if ok {
        Ok(())
    } else {
        Err(ErrorKind::ContentType)
    }
}

/// The prefix of the event that counts the server's HTTP/2 GOAWAYs by their error code:
/// `server_goaway_NO_ERROR`, `server_goaway_ENHANCE_YOUR_CALM`.
pub const SERVER_GOAWAY_EVENT: &str = "server_goaway_";

/// The event of a GOAWAY with `reason` (its RFC 9113 name, or its code in hex).
fn goaway_event(reason: Option<h2::Reason>) -> String {
    let name = match reason.map(|r| format!("{r:?}")) {
        Some(n) if !n.starts_with("Reason") => n,
        Some(_) => format!("0x{:x}", u32::from(reason.unwrap_or(h2::Reason::NO_ERROR))),
        None => "unknown".into(),
    };
    format!("{SERVER_GOAWAY_EVENT}{name}")
}

/// The error kind of an HTTP/2 error.
pub(crate) fn h2_kind(e: &h2::Error) -> ErrorKind {
    if e.is_go_away() {
        ErrorKind::Goaway
    } else if e.is_reset() && e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        ErrorKind::RefusedStream
    } else if e.is_reset() {
        ErrorKind::StreamReset
    } else if let Some(io) = e.get_io() {
        tls::io_error_kind(io)
    } else {
        ErrorKind::Io
    }
}

/// How a connection ended, told by its connection task to the lane's driver.
#[derive(Default)]
pub(crate) struct ConnEnd {
    ended: Cell<Option<Close>>,
    kind: Cell<Option<ErrorKind>>,
    wake: Notify,
}

impl ConnEnd {
    pub(crate) fn end(&self, how: Close, kind: ErrorKind) {
        if self.ended.get().is_none() {
            self.ended.set(Some(how));
            self.kind.set(Some(kind));
        }
        self.wake.notify_one();
    }

    pub(crate) fn ended(&self) -> Option<Close> {
        self.ended.get()
    }

    pub(crate) async fn wait(&self) {
        while self.ended.get().is_none() {
            self.wake.notified().await;
        }
    }
}

/// How long a driver lets hyper or h2 end a connection itself (on dropping its last handle)
/// before the meter ends it (FIN) and reads its counters.
const END_GRACE: Duration = Duration::from_millis(50);

/// The meter of a connection's socket, if it got one.
struct Metered(Option<TcpMeter>);

impl Metered {
    /// Ends the connection and reports its bytes and packets (see [`TcpMeter::finish`]).
    fn finish<X: Exchange + 'static>(self, lane: &Rc<Lane>, x: &Rc<X>) {
        if let Some(m) = self.0 {
            m.finish(lane, x);
        }
    }
}

/// Where the TLS handshake of an HTTP connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hs {
    /// Going on (0-RTT: the HTTP connection writes early data meanwhile).
    Pending,
    /// Done and reported (`conn_opened`).
    Open,
    /// Failed and reported (`conn_failed`) with this kind.
    Failed(ErrorKind),
}

/// Runs once when a handshake that goes on under the HTTP connection ends, with the stream or
/// the error that ended it; an error it returns fails the I/O call that saw the end.
type OnHandshake = Box<dyn FnOnce(Result<&TlsStream<StampedTcp>, &io::Error>) -> io::Result<()>>;

/// The TLS stream of an HTTP connection. With 0-RTT its handshake may still be going on when
/// HTTP starts: what HTTP writes meanwhile (HTTP/2 preface, SETTINGS, the first request)
/// goes as early data, and tokio-rustls sends it again after the handshake if the server
/// refused it; reads wait for the handshake. `done` reports the handshake when an I/O call
/// sees it end.
struct Tls {
    /// Taken out only when the wrapper is dropped (see `back`).
    s: ManuallyDrop<TlsStream<StampedTcp>>,
    /// Where the socket goes when the HTTP library drops its stream: to the meter, which
    /// reads its counters after the close handshake (see [`TcpMeter::lend`]).
    back: Option<SocketBack>,
    done: Option<OnHandshake>,
    cork: Rc<Cork>,
    /// What was written while corked, not yet handed to TLS.
    held: Vec<u8>,
    /// The socket's stamps: what HTTP writes is told to it, to time each request by the
    /// write that carried its last byte (see `stamp::HttpTrack`).
    rx: RxStamp,
}

/// Holds what HTTP/2 writes during a burst of POSTs, so that the burst leaves in one write
/// (one TLS record, few packets) although the connection task writes each request apart
/// (see [`drive_h2`]).
#[derive(Default)]
struct Cork {
    on: Cell<bool>,
    /// The connection task, to wake when the cork comes off.
    task: Cell<Option<Waker>>,
}

impl Cork {
    fn set(&self, on: bool) {
        if self.on.replace(on) && !on {
            if let Some(w) = self.task.take() {
                w.wake();
            }
        }
    }
}

/// The most a cork holds; beyond it writes go through.
const CORK_MAX: usize = 64 * 1024;

impl Tls {
    fn new(s: TlsStream<StampedTcp>, done: Option<OnHandshake>) -> Tls {
        let rx = s.get_ref().0.stamp();
        Tls { s: ManuallyDrop::new(s), back: None, done, cork: Rc::default(), held: Vec::new(), rx }
    }

    /// Lends the socket to `meter` (its duplicate descriptor closes): the socket goes back to
    /// it when this stream is dropped.
    fn lend_to(&mut self, meter: &mut Option<TcpMeter>) {
        if let Some(m) = meter {
            self.back = Some(m.lend(self.s.get_ref().0.get_ref()));
        }
    }

    /// The receive time of the socket's newest read.
    fn stamp(&self) -> RxStamp {
        self.rx.clone()
    }

    /// After a write or flush: when nothing HTTP wrote is held here or in TLS, it is all in
    /// the socket, and the requests it completed have their last byte's offset.
    #[inline]
    fn note_out(&self) {
        if self.held.is_empty() && !self.s.get_ref().1.wants_write() {
            self.rx.drained();
        }
    }

    /// HTTP's bytes `bufs` were accepted, `n` of them.
    fn accepted(&self, bufs: &[io::IoSlice<'_>], mut n: usize) {
        for b in bufs {
            if n == 0 {
                break;
            }
            let k = b.len().min(n);
            self.rx.plain(&b[..k]);
            n -= k;
        }
    }

    #[inline]
    fn seen<T>(&mut self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if self.done.is_none() {
            return r;
        }
        let handshaking = self.s.get_ref().1.is_handshaking();
        let outcome = match &r {
            Poll::Ready(Err(e)) if handshaking => Err(e),
            _ if !handshaking => Ok(&*self.s),
            _ => return r,
        };
        let done = self.done.take().expect("checked");
        match done(outcome) {
            Err(e) => Poll::Ready(Err(e)),
            Ok(()) => r,
        }
    }

    /// Whether to hold this write (the cork is on and has room); notes the task to wake.
    #[inline]
    fn holds(&mut self, cx: &Context<'_>, len: usize) -> bool {
        if !self.cork.on.get() || self.held.len() + len > CORK_MAX {
            return false;
        }
        let w = self.cork.task.take().filter(|w| w.will_wake(cx.waker()));
        self.cork.task.set(Some(w.unwrap_or_else(|| cx.waker().clone())));
        true
    }

    /// Whether a write with the cork off joins what the cork held, so that both leave in one
    /// TLS record and one system call (not the held burst, then the write that released it).
    #[inline]
    fn joins(&self, len: usize) -> bool {
        !self.cork.on.get() && !self.held.is_empty() && self.held.len() + len <= CORK_MAX
    }

    /// After `len` bytes were added to what is held: accepted. With the cork off, what is held
    /// goes to TLS now; if the socket is full, the next write or flush sends the rest.
    fn flush_held(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        if !self.cork.on.get() {
            if let Poll::Ready(Err(e)) = self.release(cx) {
                return Poll::Ready(Err(e));
            }
            self.note_out();
        }
        Poll::Ready(Ok(len))
    }

    /// Hands what was held to TLS.
    fn release(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let r = Pin::new(&mut *self.s).poll_write(cx, &self.held);
            match ready!(self.seen(r)) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => drop(self.held.drain(..n)),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        // SAFETY: `s` is not used again: this is the end of the wrapper.
        let s = unsafe { ManuallyDrop::take(&mut self.s) };
        if let Some(back) = self.back.take() {
            back.put(s.into_inner().0.into_inner());
        }
    }
}

impl AsyncRead for Tls {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut *this.s).poll_read(cx, buf);
        this.seen(r)
    }
}

impl AsyncWrite for Tls {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.holds(cx, buf.len()) || this.joins(buf.len()) {
            this.held.extend_from_slice(buf);
            this.rx.plain(buf);
            return this.flush_held(cx, buf.len());
        }
        ready!(this.release(cx))?;
        let r = Pin::new(&mut *this.s).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            this.rx.plain(&buf[..n]);
            this.note_out();
        }
        this.seen(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len = bufs.iter().map(|b| b.len()).sum();
        if this.holds(cx, len) || this.joins(len) {
            for b in bufs {
                this.held.extend_from_slice(b);
            }
            this.accepted(bufs, len);
            return this.flush_held(cx, len);
        }
        ready!(this.release(cx))?;
        let r = Pin::new(&mut *this.s).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            this.accepted(bufs, n);
            this.note_out();
        }
        this.seen(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.s.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.cork.on.get() && this.holds(cx, 0) {
            return Poll::Ready(Ok(()));
        }
        ready!(this.release(cx))?;
        let r = Pin::new(&mut *this.s).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r {
            this.note_out();
        }
        this.seen(r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.release(cx))?;
        let r = Pin::new(&mut *this.s).poll_shutdown(cx);
        this.seen(r)
    }
}

/// A TLS connection, where its handshake stands, and the meter of its socket.
type Opened = (Tls, Rc<Cell<Hs>>, Option<TcpMeter>);

/// Opens TCP and TLS with ALPN `alpn` (the server must agree on it). With 0-RTT on and a
/// ticket that allows early data, returns as soon as TCP is up: the handshake goes on under
/// HTTP, which sends its first bytes as early data, and is reported when it ends. Otherwise
/// returns once the handshake is done and reported.
#[allow(clippy::too_many_arguments)]
async fn connect<X: Exchange + 'static>(
    target: &Target,
    cfg: &Arc<rustls::ClientConfig>,
    name: &ServerName<'static>,
    opts: &LaneOptions,
    lane: &Lane,
    x: &Rc<X>,
    alpn: &'static [u8],
    meter: &mut Option<TcpMeter>,
) -> Result<(Tls, Rc<Cell<Hs>>), (ErrorKind, String)> {
    // Transmit stamps: hyper and h2 write their requests themselves, through `Tls`, which
    // finds where each request ends; the stream loop (pipelined HTTP/1.1) times its own.
    let tx = opts.tx_stamps;
    if !cfg.enable_early_data {
        let (mut ids, mut bufs) = (IdTable::with_capacity(1), Buffers::default());
        let opts = &LaneOptions { tx_stamps: tx, ..opts.clone() };
        let s = dot::connect(target, cfg, name, opts, lane, &**x, &mut ids, &mut bufs, Some(alpn), meter).await?;
        return Ok((Tls::new(s, None), Rc::new(Cell::new(Hs::Open))));
    }
    let tcp::Connected { s: tcp, tcp_ns, done: tcp_done, left } = tcp::connect_timed(target, opts, &**x, meter).await?;
    let connector = TlsConnector::from(cfg.clone()).early_data(true);
    // Returns at once in the early data state; otherwise after the full handshake.
    let s = match tokio::time::timeout(left, connector.connect(name.clone(), StampedTcp::new(tcp, tx.is_some()))).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(dot::handshake_failed(target, &e)),
        Err(_) => return Err((ErrorKind::Tls, format!("TLS handshake with {target} timed out"))),
    };
    if !s.get_ref().1.is_handshaking() {
        dot::report(&**x, target, &s, tcp_ns, x.now() - tcp_done, false, Some(alpn))?;
        return Ok((Tls::new(s, None), Rc::new(Cell::new(Hs::Open))));
    }
    let hs = Rc::new(Cell::new(Hs::Pending));
    let (x, target, state) = (x.clone(), target.clone(), hs.clone());
    let done: OnHandshake = Box::new(move |r| {
        let failed = match r {
            Ok(s) => match dot::report(&*x, &target, s, tcp_ns, x.now() - tcp_done, true, Some(alpn)) {
                Ok(()) => {
                    state.set(Hs::Open);
                    return Ok(());
                }
                Err(f) => f,
            },
            Err(e) => dot::handshake_failed(&target, e),
        };
        x.conn_failed_why(failed.0, &failed.1, x.now());
        state.set(Hs::Failed(failed.0));
        match failed.0 {
            // The I/O error tells the HTTP connection's requests why.
            ErrorKind::Alpn => Err(io::Error::new(io::ErrorKind::InvalidData, rustls::Error::NoApplicationProtocol)),
            _ => Ok(()),
        }
    });
    Ok((Tls::new(s, Some(done)), hs))
}

/// Reports how a connection ended: closed (`how`) when its handshake was done; failed when
/// it never finished (0-RTT, the handshake under HTTP), reported now if not already. Some:
/// the handshake failed with this kind (the caller backs off before reconnecting).
fn ended<X: Exchange + ?Sized>(hs: &Cell<Hs>, x: &X, target: &Target, how: Close) -> Option<ErrorKind> {
    match hs.get() {
        Hs::Open => {
            x.conn_closed(how, x.now());
            None
        }
        Hs::Failed(k) => Some(k),
        // The run ended during the handshake: the attempt is in progress at the end.
        Hs::Pending if how == Close::ClientEnd => None,
        Hs::Pending => {
            let why = format!("TLS handshake with {target} did not finish before the connection ended");
            x.conn_failed_why(ErrorKind::Tls, &why, x.now());
            hs.set(Hs::Failed(ErrorKind::Tls));
            Some(ErrorKind::Tls)
        }
    }
}

/// Opens TCP and TLS with ALPN `alpn` (the server must agree on it) and reports the
/// connection (see [`connect`]); on failure reports it (its bytes and packets too) and waits
/// the backoff. None: the lane is closing.
#[allow(clippy::too_many_arguments)]
async fn open<X: Exchange + 'static>(
    target: &Target,
    cfg: &Arc<rustls::ClientConfig>,
    name: &ServerName<'static>,
    opts: &LaneOptions,
    lane: &Rc<Lane>,
    x: &Rc<X>,
    alpn: &'static [u8],
    backoff: &mut Duration,
) -> Option<Opened> {
    loop {
        if !stream::may_connect(lane, opts).await {
            return None;
        }
        let mut meter = None;
        // None: the lane closed during the attempt (in progress at the end).
        match stream::attempt(lane, connect(target, cfg, name, opts, lane, x, alpn, &mut meter)).await? {
            Ok((mut s, hs)) => {
                if hs.get() == Hs::Open {
                    *backoff = stream::BACKOFF;
                }
                // One descriptor per open connection from here on, not two.
                s.lend_to(&mut meter);
                return Some((s, hs, meter));
            }
            Err((kind, why)) => {
                if let Some(m) = meter {
                    m.finish(lane, x);
                }
                x.conn_failed_why(kind, &why, x.now());
                if stream::after_failure(lane, &**x, kind, backoff).await {
                    return None;
                }
            }
        }
    }
}

/// The TLS config, server name and request template of a DoH lane; when they cannot be built
/// (a bad CA file, SNI or URL), the lane fails every query it gets until it closes (None).
async fn setup<X: Exchange + ?Sized>(
    target: &Target,
    lane: &Lane,
    x: &X,
    opts: &LaneOptions,
    alpn: &[u8],
    h1: bool,
) -> Option<(std::sync::Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>, RequestTemplate)> {
    let built = dot::setup(opts, target, &[alpn])
        .and_then(|(c, n)| Ok((c, n, RequestTemplate::new(target, opts.doh_method, h1)?)));
    match built {
        Ok(v) => Some(v),
        Err(why) => {
            x.conn_failed_why(ErrorKind::Tls, &why, x.now());
            stream::fail_forever(lane, x, ErrorKind::Tls).await;
            None
        }
    }
}

/// How often a connection still being set up looks whether the server's SETTINGS raised
/// its stream limit (h2 says so only when asked).
const SETTINGS_LOOK: Duration = Duration::from_millis(2);

/// The HTTP/2 client settings of a DoH lane's connections.
pub(crate) fn h2_builder() -> h2::client::Builder {
    let mut b = h2::client::Builder::new();
    // Until the server's SETTINGS arrive, open one stream: the server's limit
    // (SETTINGS_MAX_CONCURRENT_STREAMS) is not known yet, and streams beyond it would be
    // refused (REFUSED_STREAM). h2 holds the next request as pending (`poll_ready`)
    // until the SETTINGS raise the limit; a server that sends none allows any number.
    b.initial_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .max_concurrent_reset_streams(1 << 16)
        .initial_max_send_streams(1);
    b
}

/// The driver of one DoH lane over HTTP/2.
///
/// POST requests go out one per turn of the connection task, so that each one's HEADERS and
/// DATA are written back to back: h2 writes the HEADERS of every stream opened in one turn
/// before their DATA, and some servers (knot-resolver) refuse a stream that starts while
/// another request's body is incomplete. The requests stay in flight together.
pub async fn drive_h2<X: Exchange + 'static>(target: Target, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    let Some((cfg, name, mut tpl)) = setup(&target, &lane, &*x, &opts, b"h2", false).await else { return };
    let mut backoff = stream::BACKOFF;
    let mut msg = Vec::with_capacity(512);
    let sweep = (opts.query_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let responses = responses::Responses::start(x.clone(), lane.clone(), sweep);
    // Whichever way the driver returns, the responses' task ends with it.
    let _close = scopeguard(|| responses.close());
    loop {
        let Some((tls, hs, meter)) = open(&target, &cfg, &name, &opts, &lane, &x, b"h2", &mut backoff).await else {
            return;
        };
        let meter = Metered(meter);
        let cork = tls.cork.clone();
        let rx = tls.stamp();
        rx.http2();
        let on = Rc::new(stream::Outstanding::default());
        let (mut send, conn) = match h2_builder().handshake::<_, Bytes>(tls).await {
            Ok(v) => v,
            Err(e) => {
                let kind = ended(&hs, &*x, &target, Close::Error).unwrap_or_else(|| h2_kind(&e));
                meter.finish(&lane, &x);
                if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        let end = Rc::new(ConnEnd::default());
        {
            let end = end.clone();
            tokio::task::spawn_local(async move {
                let (how, kind) = match conn.await {
                    Ok(()) => (Close::ServerFin, ErrorKind::Closed),
                    Err(e) if e.is_go_away() && e.is_remote() => (Close::ServerGoaway, ErrorKind::Goaway),
                    Err(e) => {
                        let k = h2_kind(&e);
                        (stream::close_of(k), k)
                    }
                };
                end.end(how, kind);
            });
        }
        // Serve until the connection ends, the policy ends it, or the lane closes.
        let mut turned = None;
        'conn: loop {
            let mut posted = false;
            while lane.has_work() && end.ended().is_none() {
                if posted {
                    // Let the connection task write the last POST (HEADERS, DATA) before the
                    // next one opens; the cork holds the burst for one write at its end.
                    cork.set(true);
                    run_others_first().await;
                    posted = false;
                    continue;
                }
                // Wait for a free stream (the server's limit) before taking a query. While
                // waiting, what the cork holds must go out: the answers that free streams
                // depend on it.
                let mut waited = false;
                // At the server's limit, h2 would take the request all the same and queue it
                // until a stream ends (it would count as sent while it waits): it waits here.
                // Until the first answer, the server's SETTINGS may not have come (h2 allows one
                // stream until they do): the connection is still being set up.
                let credit = || if lane.conn_answers() == 0 { lane.opening_wait() } else { Wait::StreamCredit };
                // This connection's streams (a draining one's are its own).
                while on.count() as usize >= send.current_max_send_streams() {
                    cork.set(false);
                    lane.note_wait(Some(credit()));
                    waited = true;
                    // Until the first answer the limit is h2's one stream: the server's SETTINGS
                    // raise it without ending a stream, so look again now and then. Waiting for
                    // a freed stream alone, a first query the server holds (drops, delays)
                    // would hold every other one until it is answered or given up.
                    let opening = lane.conn_answers() == 0;
                    tokio::select! {
                        () = responses.freed() => {}
                        _ = end.wait() => break 'conn,
                        () = tokio::time::sleep(SETTINGS_LOOK), if opening => {}
                    }
                }
                let ready = tokio::select! {
                    r = poll_fn(|cx| {
                        let p = send.poll_ready(cx);
                        if p.is_pending() {
                            cork.set(false);
                            lane.note_wait(Some(credit()));
                            waited = true;
                        }
                        p
                    }) => r,
                    _ = end.wait() => break 'conn,
                };
                if waited {
                    lane.note_wait(None);
                    // The answer whose stream just ended goes to the engine before the next
                    // query leaves (the responses' task was woken by the same frame).
                    run_others_first().await;
                }
                if ready.is_err() {
                    break 'conn;
                }
                let Some(t) = lane.pop() else { break };
                if !x.encode(t, 0, &mut msg) {
                    continue;
                }
                let (req, body) = tpl.request(&msg);
                if body.is_some() && lane.has_work() {
                    // More to send after this one: hold it for the burst's write.
                    cork.set(true);
                }
                match send.send_request(req, body.is_none()) {
                    Ok((resp, mut out)) => {
                        rx.h2_request(resp.stream_id().into(), t);
                        if let Some(body) = body {
                            let _ = out.send_data(body, true);
                            posted = true;
                        }
                        x.sent(t, msg.len(), x.now());
                        responses.push(t, resp, rx.clone(), on.enter());
                    }
                    Err(e) => {
                        // The connection ended between `poll_ready` and now.
                        stream::unanswered(&lane, &*x, &[t], h2_kind(&e));
                        break 'conn;
                    }
                }
            }
            cork.set(false);
            if lane.closing() || end.ended().is_some() {
                break;
            }
            tokio::select! {
                turn = lane.wait_turn() => if let Some(how) = turn {
                    turned = Some(how);
                    break;
                },
                _ = end.wait() => break,
            }
        }
        cork.set(false);
        if lane.closing() {
            ended(&hs, &*x, &target, Close::ClientEnd);
            // A moment for h2 to end the connection itself (GOAWAY) when nothing is outstanding.
            drop(send);
            let _ = tokio::time::timeout(END_GRACE, end.wait()).await;
            meter.finish(&lane, &x);
            return;
        }
        if let Some(how) = turned {
            // Dropping the last handle ends the connection cleanly once its streams are done;
            // while some are outstanding it drains them in the background.
            drop(send);
            if on.count() > 0 {
                drain_h2(end, on, hs, meter, how, &target, &lane, &x);
                if stream::after_turn(&lane, how).await {
                    return;
                }
                continue;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), end.wait()).await;
            let failed = ended(&hs, &*x, &target, how);
            meter.finish(&lane, &x);
            if let Some(kind) = failed {
                if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                    return;
                }
            } else if stream::after_turn(&lane, how).await {
                return;
            }
            continue;
        }
        // A GOAWAY from the server stays as the connection's error in h2 (new streams are
        // refused with it) even when the connection then ends cleanly (Ok).
        let goaway = match poll_fn(|cx| Poll::Ready(send.poll_ready(cx))).await {
            Poll::Ready(Err(e)) if e.is_go_away() && e.is_remote() => {
                x.event(&goaway_event(e.reason()));
                true
            }
            _ => false,
        };
        // The connection task ends (and reports) once its streams are done or dead.
        drop(send);
        if goaway && end.ended().is_none() && on.count() > 0 {
            // GOAWAY on a live connection: it ends the requests it took in the background
            // while the lane goes on on a new one.
            drain_h2(end, on, hs, meter, Close::ServerGoaway, &target, &lane, &x);
            if stream::after_server_close(&lane, &mut backoff).await {
                return;
            }
            continue;
        }
        end.wait().await;
        let how = match end.ended() {
            Some(Close::ServerFin) if goaway => Close::ServerGoaway,
            how => how.unwrap_or(Close::Error),
        };
        let failed = ended(&hs, &*x, &target, how);
        meter.finish(&lane, &x);
        if let Some(kind) = failed {
            if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                return;
            }
        } else if stream::after_server_close(&lane, &mut backoff).await {
            return;
        }
    }
}

/// An HTTP/2 connection that takes no more requests (its handle dropped: its policy spent it,
/// or the server's GOAWAY) drains the streams outstanding on it in the background, then ends
/// (h2 closes it once they are done) and is reported (`done`: how, when they all ended).
#[allow(clippy::too_many_arguments)]
fn drain_h2<X: Exchange + 'static>(
    end: Rc<ConnEnd>,
    on: Rc<stream::Outstanding>,
    hs: Rc<Cell<Hs>>,
    meter: Metered,
    done: Close,
    target: &Target,
    lane: &Rc<Lane>,
    x: &Rc<X>,
) {
    let (target, lane, x) = (target.clone(), lane.clone(), x.clone());
    tokio::task::spawn_local(async move {
        let server = async {
            end.wait().await;
            end.ended().unwrap_or(Close::Error)
        };
        let close = stream::drain_streams(&lane, &*x, &on, done, server).await;
        let _ = tokio::time::timeout(END_GRACE, end.wait()).await;
        ended(&hs, &*x, &target, close);
        meter.finish(&lane, &x);
    });
}

/// Runs `f` when dropped.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

/// Lets the thread's other ready tasks (the HTTP/2 connection task, woken by the request
/// just opened) run before this one goes on. Unlike `tokio::task::yield_now`, it does not ask
/// the runtime to poll for I/O first (an `epoll_wait` per call): the task only wakes itself
/// and goes to the back of the local run queue.
async fn run_others_first() {
    let mut queued = false;
    poll_fn(|cx| {
        if queued {
            return Poll::Ready(());
        }
        queued = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// The driver of one DoH lane over HTTP/1.1: one request at a time on a keep-alive
/// connection. A request the server closed the connection on is sent again, once, on the
/// next one ([`stream::unanswered`]).
pub async fn drive_h1<X: Exchange + 'static>(target: Target, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    if opts.h1_pipeline > 1 {
        return h1::drive(target, lane, x, opts).await;
    }
    let Some((cfg, name, mut tpl)) = setup(&target, &lane, &*x, &opts, b"http/1.1", true).await else { return };
    let mut backoff = stream::BACKOFF;
    let mut msg = Vec::with_capacity(512);
    loop {
        let Some((tls, hs, meter)) = open(&target, &cfg, &name, &opts, &lane, &x, b"http/1.1", &mut backoff).await
        else {
            return;
        };
        let meter = Metered(meter);
        let rx = tls.stamp();
        let io = hyper_util::rt::TokioIo::new(tls);
        let (mut send, conn) = match hyper::client::conn::http1::Builder::new().handshake::<_, Full<Bytes>>(io).await {
            Ok(v) => v,
            Err(_) => {
                let kind = ended(&hs, &*x, &target, Close::Error).unwrap_or(ErrorKind::Io);
                meter.finish(&lane, &x);
                if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        let end = Rc::new(ConnEnd::default());
        {
            let end = end.clone();
            tokio::task::spawn_local(async move {
                match conn.await {
                    Ok(()) => end.end(Close::ServerFin, ErrorKind::Closed),
                    Err(e) => {
                        let k = hyper_kind(&e);
                        end.end(stream::close_of(k), k)
                    }
                }
            });
        }
        let mut client_close = None;
        loop {
            if lane.closing() {
                client_close = Some(Close::ClientEnd);
                break;
            }
            if end.ended().is_some() {
                break;
            }
            if !lane.has_work() {
                tokio::select! {
                    turn = lane.wait_turn() => if let Some(how) = turn {
                        client_close = Some(how);
                        break;
                    },
                    _ = end.wait() => {}
                }
                continue;
            }
            if send.ready().await.is_err() {
                // The server closed the connection: reconnect; the query stays queued.
                end.wait().await;
                break;
            }
            let Some(t) = lane.pop() else { continue };
            if !x.encode(t, 0, &mut msg) {
                continue;
            }
            let (req, body) = tpl.request(&msg);
            let (parts, ()) = req.into_parts();
            let req = Request::from_parts(parts, Full::new(body.unwrap_or_default()));
            let fut = send.send_request(req);
            x.sent(t, msg.len(), x.now());
            rx.h1_request(t);
            // One request at a time: the queries behind it wait for its answer.
            lane.note_wait(Some(Wait::Http1Slot));
            let r = tokio::time::timeout(opts.query_timeout, async {
                let resp = fut.await.map_err(|e| hyper_kind(&e))?;
                check_head(&*x, resp.status(), resp.headers())?;
                let body = resp.into_body().collect().await.map_err(|e| hyper_kind(&e))?.to_bytes();
                Ok::<_, ErrorKind>(body)
            })
            .await;
            lane.end_wait(Wait::Http1Slot);
            // The departure first: the answer's time needs it.
            rx.read_sent(&*x);
            let now = rx.arrival(&*x);
            match r {
                Ok(Ok(body)) => x.response(t, &body, now),
                Ok(Err(kind)) if stream::resendable(kind) => {
                    // The server closed the connection before the answer: the query is sent
                    // again on the next one.
                    stream::unanswered(&lane, &*x, &[t], kind);
                    break;
                }
                Ok(Err(kind)) => {
                    x.failed(t, kind, now);
                    if kind != ErrorKind::HttpStatus && kind != ErrorKind::ContentType {
                        break;
                    }
                }
                Err(_) => {
                    // No answer within the timeout: HTTP/1.1 cannot cancel a request
                    // but by closing the connection.
                    client_close = Some(Close::Error);
                    break;
                }
            }
        }
        drop(send);
        match client_close {
            Some(Close::ClientEnd) => {
                ended(&hs, &*x, &target, Close::ClientEnd);
                let _ = tokio::time::timeout(END_GRACE, end.wait()).await;
                meter.finish(&lane, &x);
                return;
            }
            Some(how) => {
                let failed = ended(&hs, &*x, &target, how);
                let _ = tokio::time::timeout(END_GRACE, end.wait()).await;
                meter.finish(&lane, &x);
                if let Some(kind) = failed {
                    if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                        return;
                    }
                } else if stream::after_turn(&lane, how).await {
                    return;
                }
            }
            None => {
                end.wait().await;
                let failed = ended(&hs, &*x, &target, end.ended().unwrap_or(Close::Error));
                meter.finish(&lane, &x);
                if let Some(kind) = failed {
                    if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                        return;
                    }
                } else if stream::after_server_close(&lane, &mut backoff).await {
                    return;
                }
            }
        }
    }
}

/// The error kind of a hyper error.
fn hyper_kind(e: &hyper::Error) -> ErrorKind {
    use std::error::Error as _;
    let mut src = e.source();
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return tls::io_error_kind(io);
        }
        src = s.source();
    }
    if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        ErrorKind::Closed
    } else {
        ErrorKind::Io
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goaway_events_name_the_code() {
        assert_eq!(goaway_event(Some(h2::Reason::NO_ERROR)), "server_goaway_NO_ERROR");
        assert_eq!(goaway_event(Some(h2::Reason::ENHANCE_YOUR_CALM)), "server_goaway_ENHANCE_YOUR_CALM");
        assert_eq!(goaway_event(Some(h2::Reason::from(0x77))), "server_goaway_0x77");
        assert_eq!(goaway_event(None), "server_goaway_unknown");
    }

    #[test]
    fn base64url_no_padding() {
        let enc = |d: &[u8]| {
            let mut s = String::new();
            base64url(d, &mut s);
            s
        };
        assert_eq!(enc(b""), "");
        assert_eq!(enc(b"f"), "Zg");
        assert_eq!(enc(b"fo"), "Zm8");
        assert_eq!(enc(b"foo"), "Zm9v");
        assert_eq!(enc(b"foob"), "Zm9vYg");
        assert_eq!(enc(&[0xfb, 0xff, 0xfe]), "-__-");
        // RFC 8484 section 4.1.1 example: www.example.com A, ID 0, RD.
        let q = [
            0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x77, 0x77, 0x77, 0x07, 0x65,
            0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x03, 0x63, 0x6f, 0x6d, 0x00, 0x00, 0x01, 0x00, 0x01,
        ];
        assert_eq!(enc(&q), "AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB");
    }

    #[test]
    fn requests() {
        let t: Target = "https://127.0.0.1:4431/dns-query".parse().unwrap();
        let mut get = RequestTemplate::new(&t, DohMethod::Get, false).unwrap();
        let (r, b) = get.request(b"foo");
        assert!(b.is_none());
        assert_eq!(r.method(), Method::GET);
        assert_eq!(r.uri().to_string(), "https://127.0.0.1:4431/dns-query?dns=Zm9v");
        let t: Target = "https://localhost/q?ct=1".parse().unwrap();
        let mut get = RequestTemplate::new(&t, DohMethod::Get, true).unwrap();
        let (r, _) = get.request(b"foo");
        assert_eq!(r.uri().to_string(), "/q?ct=1&dns=Zm9v");
        assert_eq!(r.headers()[HOST], "localhost");
        let mut post = RequestTemplate::new(&t, DohMethod::Post, false).unwrap();
        let (r, b) = post.request(b"foo");
        assert_eq!((r.method(), b.as_deref()), (&Method::POST, Some(&b"foo"[..])));
        assert_eq!(r.headers()[CONTENT_TYPE], DNS_MESSAGE);
        assert_eq!(r.headers()[CONTENT_LENGTH], "3");
    }

    #[test]
    fn heads() {
        let mut h = HeaderMap::new();
        assert_eq!(head_kind(StatusCode::OK, &h), Err(ErrorKind::ContentType));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("Application/DNS-Message; charset=x"));
        assert_eq!(head_kind(StatusCode::OK, &h), Ok(()));
        assert_eq!(head_kind(StatusCode::BAD_REQUEST, &h), Err(ErrorKind::HttpStatus));
    }
}
