//! DNS over TCP (RFC 7766), and the same code for DoT (RFC 7858) over a TLS stream: 2-byte
//! length prefix, many queries in flight per connection, answers sent as soon as each is
//! ready (so out of order when some are delayed; in order with `in_order`), idle timeout, TCP_NODELAY, and the answers
//! to one read coalesced into one write.
//!
//! One tokio current-thread runtime per I/O thread, one SO_REUSEPORT listener per thread and
//! transport, and one task per connection that reads, answers, keeps delayed answers in its
//! own timer heap, and writes — no channels, no locks. [`connection`] is generic over the
//! byte stream ([`Stream`]): a `TcpStream` for TCP, a tokio-rustls stream for DoT.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::answer::{Transport, Verdict};
use crate::ctx::Ctx;
use crate::delayed::Delayed;
use crate::policy::Place;
use crate::stats::add;

/// Initial read buffer; grows to fit one 64 KiB frame if a query that large arrives.
const READ_BUF: usize = 16 * 1024;
/// The read buffer a connection starts with (a few queries); it doubles (up to [`READ_BUF`])
/// while reads keep filling it, so that idle connections hold little memory and busy ones
/// read in large chunks.
const READ_START: usize = 512;

/// A byte stream a DNS-over-TCP connection runs on: TCP itself, or TLS over TCP.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin {
    /// The TCP socket underneath (for the reset fault).
    fn tcp(&self) -> &TcpStream;
}

impl Stream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Stream for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// Asks the kernel to acknowledge what it has received right away (TCP_QUICKACK). Called
/// when a request arrived in part: a client that writes a message in two pieces without
/// TCP_NODELAY (length and message, or HTTP/2 HEADERS and DATA) holds the second piece
/// (Nagle) until the first is acknowledged, and a delayed ACK would cost it 40 ms.
pub(crate) fn quick_ack(fd: std::os::fd::RawFd) {
    // Best effort: the ACK then waits as it would have.
    let _ = volley_transport::sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
}

/// Accepts on `listener` until `stop` turns true, handing each connection (TCP_NODELAY set)
/// to `on_accept`, which spawns its task, with its place under `--max-conns` (the task keeps
/// it until the connection ends; it returns the task, or None when it closed the connection
/// itself). At the cap, a new connection takes the place of the longest idle one on this
/// thread ([`crate::policy::Room`], counted as evicted); when there is none, the new one is
/// closed at once (FIN, or RST when the client had sent something already) and counted as
/// refused.
pub(crate) async fn accept_loop(
    listener: std::net::TcpListener,
    ctx: &Ctx,
    transport: Transport,
    mut stop: watch::Receiver<bool>,
    mut on_accept: impl FnMut(TcpStream, Place) -> Option<tokio::task::AbortHandle>,
) -> io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    loop {
        if *stop.borrow_and_update() {
            return Ok(());
        }
        // --max-handshakes: while the listener has that many TLS handshakes in progress, new
        // connections wait in the kernel's backlog (a client is delayed, not turned away);
        // one that another thread's accept beat to the last place is closed and counted.
        if ctx.limits.handshakes_full(transport) {
            tokio::select! {
                _ = stop.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(2)) => {}
            }
            continue;
        }
        tokio::select! {
            _ = stop.changed() => {}
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let Some(place) = ctx.admit(transport) else {
                        drop(stream);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let tracker = place.tracker();
                    if let Some(task) = on_accept(stream, place) {
                        tracker.set_task(task);
                    }
                }
                // Out of file descriptors and the like: back off briefly instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Serves plain DNS over TCP on `listener`.
pub(crate) async fn serve(
    listener: std::net::TcpListener,
    ctx: Rc<Ctx>,
    stop: watch::Receiver<bool>,
) -> io::Result<()> {
    accept_loop(listener, &ctx.clone(), Transport::Tcp, stop, |stream, place| {
        add(&ctx.counters.tcp_connections, 1);
        let ctx = ctx.clone();
        let task = tokio::task::spawn_local(async move {
            connection(stream, ctx, Transport::Tcp, Vec::new(), &place).await;
        });
        Some(task.abort_handle())
    })
    .await
}

/// The state of one connection apart from the stream.
struct Conn {
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Written to the stream but maybe not flushed (TLS keeps records until flushed).
    unflushed: bool,
    out: Vec<u8>,
    /// Delayed answers, already framed.
    timers: BinaryHeap<Reverse<Delayed<Vec<u8>, Instant>>>,
    seq: u64,
    /// In-order answers (`Ctx::in_order`): when the last answer held back is due; an answer
    /// made while one is held waits until then.
    tail: Instant,
    /// Queries taken on this connection (for `tcp-reset-after`).
    queries: u64,
    /// The reset fault fired: reset once the answers before it are written.
    reset: bool,
    /// `--max-queries-per-conn` reached: read nothing more, close (FIN) once the answers
    /// are written.
    spent: bool,
    eof: bool,
    last_activity: Instant,
    /// Bytes of the delayed answers in `timers`.
    held: usize,
    /// Since when a query has been arriving in part (`--request-timeout`); None when the read
    /// buffer holds no partial message.
    partial_since: Option<Instant>,
    /// The client's address (`--max-qps-per-client`).
    peer: Option<std::net::IpAddr>,
}

/// What woke the connection up.
enum Event {
    /// Read or wrote something, or reached end of input.
    Progress,
    /// A delayed answer is due.
    Timer,
    /// Idle for the timeout, or a query begun for the request timeout.
    Idle,
    /// The stream failed.
    Error,
}

impl Conn {
    fn new(peer: Option<std::net::IpAddr>) -> Conn {
        Conn {
            rbuf: vec![0; READ_START],
            rlen: 0,
            wbuf: Vec::new(),
            wpos: 0,
            unflushed: false,
            // Grown by the first answer: an idle connection holds none.
            out: Vec::new(),
            timers: BinaryHeap::new(),
            seq: 0,
            tail: Instant::now(),
            queries: 0,
            reset: false,
            spent: false,
            eof: false,
            last_activity: Instant::now(),
            held: 0,
            partial_since: None,
            peer,
        }
    }

    /// Answers every complete frame in the read buffer and keeps the partial one.
    fn process(&mut self, ctx: &Ctx, transport: Transport) {
        let mut at = 0;
        let now = Instant::now();
        while self.rlen - at >= 2 && !self.reset && !self.spent {
            let len = u16::from_be_bytes([self.rbuf[at], self.rbuf[at + 1]]) as usize;
            if self.rlen - at - 2 < len {
                break;
            }
            let query = &self.rbuf[at + 2..at + 2 + len];
            at += 2 + len;
            add(&ctx.counters.queries, 1);
            if ctx.faults.tcp_reset_after.is_some_and(|n| self.queries >= n) {
                self.reset = true;
                add(&ctx.counters.dropped, 1);
                break;
            }
            self.queries += 1;
            if ctx.max_queries.is_some_and(|m| self.queries >= m) {
                // The last query this connection takes: what follows it is never read.
                self.spent = true;
            }
            if let (Some(rate), Some(ip)) = (&ctx.client_rate, self.peer) {
                if !rate.admit(ip) {
                    add(&ctx.counters.rate_limited, 1);
                    continue;
                }
            }
            let delay = match ctx.answerer.answer(query, transport, &mut self.out) {
                Verdict::Drop | Verdict::Invalid => {
                    add(&ctx.counters.dropped, 1);
                    continue;
                }
                Verdict::Reply { delay } => delay,
                // A connection's peer address is its own: error answers leave as others do.
                Verdict::Error => None,
            };
            match delay {
                None if !ctx.in_order || self.timers.is_empty() => {
                    ctx.counters.sent(&self.out);
                    self.wbuf.extend_from_slice(&(self.out.len() as u16).to_be_bytes());
                    self.wbuf.extend_from_slice(&self.out);
                }
                _ => {
                    let mut due = now + delay.unwrap_or_default();
                    if delay.is_some() {
                        add(&ctx.counters.delayed, 1);
                    }
                    if ctx.in_order {
                        // Behind every answer still held (`seq` keeps equal times in order).
                        due = due.max(self.tail);
                        self.tail = due;
                    }
                    let mut frame = Vec::with_capacity(self.out.len() + 2);
                    frame.extend_from_slice(&(self.out.len() as u16).to_be_bytes());
                    frame.extend_from_slice(&self.out);
                    self.seq += 1;
                    self.held += frame.len();
                    self.timers.push(Reverse(Delayed { due, seq: self.seq, item: frame }));
                }
            }
        }
        if self.reset || self.spent {
            self.rlen = 0;
            self.partial_since = None;
            return;
        }
        self.rbuf.copy_within(at..self.rlen, 0);
        self.rlen -= at;
        // The read buffer grows (doubling) as a message's bytes arrive, never ahead of them:
        // a length prefix alone announcing 65,535 bytes costs nothing until they come.
        if self.rlen == 0 {
            self.partial_since = None;
        } else if at > 0 || self.partial_since.is_none() {
            self.partial_since = Some(now);
        }
    }

    /// Takes bytes that arrived before the stream was handed over (TLS early data).
    fn feed(&mut self, bytes: &[u8], ctx: &Ctx, transport: Transport) {
        for chunk in bytes.chunks(READ_BUF) {
            if self.rlen + chunk.len() > self.rbuf.len() {
                self.rbuf.resize(self.rlen + chunk.len(), 0);
            }
            self.rbuf[self.rlen..self.rlen + chunk.len()].copy_from_slice(chunk);
            self.rlen += chunk.len();
            self.process(ctx, transport);
        }
    }

    /// Moves the delayed answers that are due to the write buffer.
    fn fire_due(&mut self, ctx: &Ctx) {
        let now = Instant::now();
        while self.timers.peek().is_some_and(|t| t.0.due <= now) {
            let Some(Reverse(d)) = self.timers.pop() else { break };
            self.held -= d.item.len();
            ctx.counters.sent(&d.item[2..]);
            self.wbuf.extend_from_slice(&d.item);
        }
    }

    fn pending_write(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Answer bytes held: unsent and delayed (`--max-pending-bytes`).
    fn pending(&self) -> usize {
        self.pending_write() + self.held
    }

    /// Writes and flushes what it can, then reads what has arrived (answering it), then
    /// looks at the timers. Ready with the first thing that happened.
    fn poll_event<S: Stream>(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut S,
        ctx: &Ctx,
        transport: Transport,
        mut timer: Pin<&mut Sleep>,
        mut idle: Pin<&mut Sleep>,
    ) -> Poll<Event> {
        let mut progress = false;
        while self.pending_write() > 0 {
            match Pin::new(&mut *stream).poll_write(cx, &self.wbuf[self.wpos..]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Event::Error),
                Poll::Ready(Ok(n)) => {
                    self.wpos += n;
                    self.unflushed = true;
                    progress = true;
                }
                Poll::Pending => break,
            }
        }
        if self.pending_write() == 0 {
            self.wbuf.clear();
            self.wpos = 0;
        }
        if self.unflushed {
            match Pin::new(&mut *stream).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(_)) => return Poll::Ready(Event::Error),
                Poll::Pending => {}
            }
        }
        if progress {
            self.last_activity = Instant::now();
        }
        if !self.eof && !self.reset && !self.spent && self.pending() < ctx.max_pending_bytes {
            if self.rlen == self.rbuf.len() {
                self.rbuf.resize(self.rbuf.len() * 2, 0);
            }
            let spare = self.rbuf.len() - self.rlen;
            let mut rb = ReadBuf::new(&mut self.rbuf[self.rlen..]);
            match Pin::new(&mut *stream).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    if n == spare && self.rbuf.len() < READ_BUF {
                        let grown = self.rbuf.len() * 2;
                        self.rbuf.resize(grown, 0);
                    }
                    if n == 0 {
                        self.eof = true;
                    } else {
                        self.rlen += n;
                        self.last_activity = Instant::now();
                        self.process(ctx, transport);
                    }
                    return Poll::Ready(Event::Progress);
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Event::Error),
                Poll::Pending => {}
            }
        }
        if progress {
            return Poll::Ready(Event::Progress);
        }
        if !self.timers.is_empty() && timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Event::Timer);
        }
        if (self.timers.is_empty() || self.partial_since.is_some()) && idle.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Event::Idle);
        }
        Poll::Pending
    }
}

/// Serves one connection: `early` holds bytes that arrived before (TLS early data); it tells
/// `place` how long it has been idle.
pub(crate) async fn connection<S: Stream>(
    mut stream: S,
    ctx: Rc<Ctx>,
    transport: Transport,
    early: Vec<u8>,
    place: &Place,
) {
    let mut c = Conn::new(stream.tcp().peer_addr().ok().map(|a| a.ip()));
    if !early.is_empty() {
        c.feed(&early, &ctx, transport);
    }
    let idle = ctx.idle_timeout;
    // Counted among the thread's open connections while it lives.
    struct Open<'a>(&'a Ctx);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.0.open_conns.set(self.0.open_conns.get() - 1);
        }
    }
    ctx.open_conns.set(ctx.open_conns.get() + 1);
    let _open = Open(&ctx);
    let crowded_idle = idle.min(crate::ctx::CROWDED_IDLE);
    let mut idle_sleep = pin!(sleep_until(c.last_activity + idle));
    let mut timer_sleep = pin!(sleep_until(c.last_activity));
    // Closed by a server policy: linger after the FIN for the client's own close.
    let mut by_policy = c.spent && c.timers.is_empty() && c.pending_write() == 0;
    loop {
        if by_policy {
            break;
        }
        // Idle since the last query or answer, or since a query began to arrive (slowloris).
        place.note(c.partial_since.unwrap_or(c.last_activity), !c.timers.is_empty() || c.pending_write() > 0);
        if let Some(t) = c.timers.peek() {
            if timer_sleep.deadline() != t.0.due {
                timer_sleep.as_mut().reset(t.0.due);
            }
        }
        // The idle deadline, or sooner the request timeout of a query begun.
        // (Delayed answers waiting: not idle.)
        // Idle connections wake once after CROWDED_IDLE, to close if the thread is crowded.
        let now = Instant::now();
        let wait = if !c.timers.is_empty() {
            Duration::from_secs(86_400)
        } else if now < c.last_activity + crowded_idle {
            crowded_idle
        } else {
            idle
        };
        let mut idle_at = c.last_activity + wait;
        if let Some(since) = c.partial_since {
            idle_at = idle_at.min(since + ctx.request_timeout);
        }
        if idle_sleep.deadline() != idle_at {
            idle_sleep.as_mut().reset(idle_at);
        }
        let ev =
            poll_fn(|cx| c.poll_event(cx, &mut stream, &ctx, transport, timer_sleep.as_mut(), idle_sleep.as_mut()))
                .await;
        match ev {
            Event::Progress => {
                if c.rlen > 0 {
                    use std::os::fd::AsRawFd;
                    quick_ack(stream.tcp().as_raw_fd());
                }
            }
            Event::Timer => c.fire_due(&ctx),
            Event::Idle => {
                let now = Instant::now();
                if c.partial_since.is_some_and(|since| now >= since + ctx.request_timeout) {
                    // A query begun and not finished in time (slowloris, a stalled length
                    // prefix): close at once, without lingering.
                    add(&ctx.counters.closed_slow, 1);
                    break;
                }
                let crowded = ctx.open_conns.get() >= ctx.crowded_at;
                if c.timers.is_empty()
                    && (now >= c.last_activity + idle || (crowded && now >= c.last_activity + crowded_idle))
                {
                    add(&ctx.counters.closed_idle, 1);
                    by_policy = true;
                    break;
                }
            }
            Event::Error => return,
        }
        if c.reset && c.pending_write() == 0 && !c.unflushed {
            // The fault: RST instead of FIN.
            let _ = socket2::SockRef::from(stream.tcp()).set_linger(Some(Duration::ZERO));
            return;
        }
        if c.eof && c.timers.is_empty() && c.pending_write() == 0 && !c.unflushed {
            break;
        }
        if c.spent && c.timers.is_empty() && c.pending_write() == 0 && !c.unflushed {
            by_policy = true;
        }
    }
    if c.spent {
        add(&ctx.counters.closed_max_queries, 1);
    }
    // Graceful close: FIN (after close_notify over TLS) after whatever could be written.
    if c.pending_write() > 0 {
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&c.wbuf[c.wpos..])).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
    if by_policy {
        linger(&mut stream).await;
    }
}

/// After the server's FIN: reads (and drops) what the client still sends until it closes
/// too, for at most [`LINGER`], so that the kernel does not answer queries already on their
/// way with a RST (which could destroy answers the client has not read yet). The client
/// sees the FIN, not a reset.
pub(crate) async fn linger<S: AsyncRead + Unpin>(stream: &mut S) {
    use tokio::io::AsyncReadExt;
    // On the heap, and only while lingering: an array here would sit in every connection's
    // future (its task) for the connection's whole life, idle or not.
    let mut sink = vec![0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// The longest a connection closed by a server policy waits for the client's close.
const LINGER: Duration = Duration::from_secs(1);

/// The fuzz target `responder_stream` ([`crate::fuzzing::stream`]): `data` arrives on one
/// connection in pieces (sizes from its first byte), read through the connection's own
/// framing ([`Conn::feed`]) with delayed answers, in-order answers and a query limit chosen by
/// its second byte. What the connection writes and holds must be whole length-prefixed DNS
/// responses, every query read has one fate (answered now, held, dropped or turned away), and
/// the read buffer holds at most one partial frame.
pub(crate) fn fuzz_stream(ctx: &mut Ctx, data: &[u8]) {
    let [step, mode, data @ ..] = data else { return };
    ctx.in_order = mode & 1 != 0;
    ctx.max_queries = (mode & 2 != 0).then_some(u64::from(mode >> 4) + 1);
    let step = usize::from(step % 128) + 1;
    let mut c = Conn::new(Some(std::net::Ipv4Addr::LOCALHOST.into()));
    let before = ctx.counters.snapshot();
    for piece in data.chunks(step) {
        c.feed(piece, ctx, Transport::Tcp);
        assert!(c.rlen <= 2 + usize::from(u16::MAX), "read buffer holds {} bytes", c.rlen);
    }
    let mut frames = 0u64;
    let mut check = |bytes: &[u8]| {
        let mut at = 0;
        while at < bytes.len() {
            let len = usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]));
            let msg = &bytes[at + 2..at + 2 + len];
            assert!(volley_wire::Header::parse(msg).is_ok_and(|h| h.is_response()), "an answer is a response");
            at += 2 + len;
            frames += 1;
        }
    };
    check(&c.wbuf);
    let mut held = 0;
    for t in &c.timers {
        check(&t.0.item);
        held += t.0.item.len();
    }
    assert_eq!(held, c.held, "held bytes counted");
    let after = ctx.counters.snapshot();
    let queries = after.queries - before.queries;
    let turned_away = (after.dropped - before.dropped) + (after.rate_limited - before.rate_limited);
    assert_eq!(queries, frames + turned_away, "each query read has one fate");
    if let Some(m) = ctx.max_queries {
        assert!(c.queries <= m, "{} queries taken past the limit of {m}", c.queries);
    }
}
