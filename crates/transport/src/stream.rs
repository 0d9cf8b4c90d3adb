//! DNS over a byte stream: the part TCP, DoT and pipelined DoH over HTTP/1.1 share. Queries
//! are framed into one write buffer and pipelined; answers are parsed from one read buffer.
//! How is a [`Framing`]: RFC 7766's 2-byte length, answers in any order matched by DNS ID
//! ([`IdTable`], TCP and DoT), or HTTP/1.1 requests answered in order (`https::h1`). Generic
//! over the two halves of a stream: plain TCP passes `TcpStream::split()` halves (no
//! locking), TLS passes `tokio::io::split` halves.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use volley_metrics::{Close, DrainEnd, ErrorKind};

use crate::{deliver, Exchange, IdTable, Lane, Token};

/// How queries go onto a stream and answers come off it.
pub(crate) trait Framing {
    /// Whether another query may go out now (HTTP/1.1: its pipelining depth).
    fn has_room(&self) -> bool {
        true
    }
    /// Frames query `t` into `out` (`msg`: scratch for its DNS message). False: it did not
    /// go out (it had ended already, or it failed and was reported).
    fn frame<X: Exchange + ?Sized>(&mut self, t: Token, x: &X, msg: &mut Vec<u8>, out: &mut Vec<u8>) -> bool;
    /// Hands the complete answers at the start of `buf` to the engine. The bytes used, or
    /// the error that ends the connection (its outstanding queries then fail with it).
    fn split<X: Exchange + ?Sized>(&mut self, buf: &[u8], x: &X, now: u64) -> Result<usize, ErrorKind>;
    /// The queries outstanding on a connection that ended, to fail.
    fn drain(&mut self) -> Vec<Token>;
    /// How often [`Framing::stalled`] is asked while queries are outstanding; None: never.
    fn watch(&self) -> Option<Duration> {
        None
    }
    /// Whether the connection cannot go on (HTTP/1.1: the request at the head of the line
    /// has ended in the engine, and every answer behind it waits for its answer).
    fn stalled<X: Exchange + ?Sized>(&mut self, _x: &X) -> bool {
        false
    }
    /// Whether every query written on the connection has had its answer.
    fn answered_all(&self) -> bool;
    /// Whether a query written on the connection still waits for its fate in the engine.
    fn any_live<X: Exchange + ?Sized>(&self, x: &X) -> bool;
}

/// RFC 7766: a 2-byte length before each message; answers in any order, matched by DNS ID.
impl Framing for IdTable {
    fn frame<X: Exchange + ?Sized>(&mut self, t: Token, x: &X, msg: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
        let Some(id) = self.insert(t, |o| x.is_live(o)) else {
            x.failed(t, ErrorKind::Overload, x.now());
            return false;
        };
        if !x.encode(t, id, msg) {
            self.remove(id);
            return false;
        }
        frame(msg, out);
        true
    }

    fn split<X: Exchange + ?Sized>(&mut self, buf: &[u8], x: &X, now: u64) -> Result<usize, ErrorKind> {
        Ok(split_frames(buf, |m| deliver(m, self, x, now)))
    }

    fn drain(&mut self) -> Vec<Token> {
        IdTable::drain(self)
    }

    fn answered_all(&self) -> bool {
        self.is_empty()
    }

    fn any_live<X: Exchange + ?Sized>(&self, x: &X) -> bool {
        self.tokens().any(|t| x.is_live(t))
    }
}

const READ_CHUNK: usize = 64 * 1024;
/// The read buffer a connection starts with: an idle connection (most of them, with many
/// simulated clients) keeps little memory; a busy one grows its buffer up to [`READ_CHUNK`]
/// while reads keep filling it.
const READ_START: usize = 2048;

/// Buffers of one lane, kept across its connections.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    msg: Vec<u8>,
    /// The queries framed into `wbuf` whose bytes have not all been flushed to the socket
    /// (for their transmit stamps).
    framed: Vec<Token>,
}

impl Buffers {
    pub(crate) fn new() -> Buffers {
        Buffers {
            wbuf: Vec::new(),
            rbuf: Vec::with_capacity(READ_START),
            msg: Vec::with_capacity(512),
            framed: Vec::new(),
        }
    }

    /// Frames every queued query into the write buffer, while the framing has room;
    /// returns how many.
    pub(crate) fn frame_queued<X: Exchange + ?Sized, F: Framing>(&mut self, lane: &Lane, x: &X, f: &mut F) -> usize {
        let mut n = 0;
        while f.has_room() {
            let Some(t) = lane.pop() else { break };
            if f.frame(t, x, &mut self.msg, &mut self.wbuf) {
                x.sent(t, self.msg.len(), x.now());
                self.framed.push(t);
                n += 1;
            }
        }
        // HTTP/1.1: queries left in the lane wait for the answers ahead of them.
        if f.has_room() {
            lane.end_wait(volley_metrics::Wait::Http1Slot);
        } else {
            lane.note_wait(Some(volley_metrics::Wait::Http1Slot));
        }
        n
    }

    /// The framed bytes not yet written.
    pub(crate) fn pending(&self) -> &[u8] {
        &self.wbuf
    }

    /// Forgets what was framed (written elsewhere, or the connection died).
    pub(crate) fn clear(&mut self) {
        self.wbuf.clear();
        self.framed.clear();
        self.rbuf.clear();
    }

    /// Hands over what was read and not yet parsed (a connection that goes on draining takes
    /// it), leaving a fresh buffer for the next connection.
    pub(crate) fn take_read(&mut self) -> Vec<u8> {
        self.wbuf.clear();
        self.framed.clear();
        std::mem::replace(&mut self.rbuf, Vec::with_capacity(READ_START))
    }
}

/// Appends `msg` with its 2-byte length prefix.
#[inline]
pub(crate) fn frame(msg: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
}

/// Hands every complete frame in `buf` to `each`; returns the bytes consumed.
#[inline]
pub(crate) fn split_frames(buf: &[u8], mut each: impl FnMut(&[u8])) -> usize {
    let mut at = 0;
    while buf.len() - at >= 2 {
        let len = u16::from_be_bytes([buf[at], buf[at + 1]]) as usize;
        if buf.len() - at - 2 < len {
            break;
        }
        each(&buf[at + 2..at + 2 + len]);
        at += 2 + len;
    }
    at
}

/// How serving a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// The connection failed or the lane is closing: its outstanding queries get this kind.
    Failed(ErrorKind),
    /// The connection policy ends it, nothing outstanding: close it gracefully this way.
    Turn(Close),
}

/// Runs one connection until it ends.
/// `kind_of` maps the stream's I/O errors (TLS streams wrap TLS errors in them); `rx` is the
/// socket's receive time, the time of the answers each read brings.
///
/// `lost_after` (the run's query timeout): bytes that keep coming while no message completes
/// for longer than this mean the stream's framing is lost (a length prefix or an HTTP/1.1
/// header damaged on the way, a server out of step): every answer behind the message waited
/// for is unreadable, so the connection ends (its outstanding queries fail `malformed`) and
/// the lane goes on on a new one, instead of sending queries whose answers it can never read
/// until the run ends.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve<R, W, X, F>(
    mut rd: R,
    mut wr: W,
    lane: &Lane,
    x: &X,
    f: &mut F,
    b: &mut Buffers,
    kind_of: fn(&io::Error) -> ErrorKind,
    rx: &crate::stamp::RxStamp,
    lost_after: Duration,
) -> Served
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    X: Exchange + ?Sized,
    F: Framing,
{
    let mut woff = 0;
    // Bytes handed to the writer that may still sit in its buffer (TLS records).
    let mut unflushed = !b.wbuf.is_empty();
    // The last read filled the buffer: more was probably waiting, so read more at once.
    let mut filled = false;
    // One timer for the whole connection, re-armed when it fires (framings that watch).
    let every = f.watch();
    let watch = tokio::time::sleep(every.unwrap_or(Duration::from_secs(3600)));
    tokio::pin!(watch);
    // When a message last completed, or the read buffer last began a new one.
    let mut progress = tokio::time::Instant::now();
    loop {
        b.frame_queued(lane, x, f);
        if lane.closing() {
            return Served::Failed(ErrorKind::Closed);
        }
        let pending = woff < b.wbuf.len();
        let spare = b.rbuf.capacity() - b.rbuf.len();
        if spare < READ_START / 2 || (filled && b.rbuf.capacity() < READ_CHUNK) {
            b.rbuf.reserve(b.rbuf.capacity().clamp(READ_START, READ_CHUNK));
        }
        let spare = b.rbuf.capacity() - b.rbuf.len();
        tokio::select! {
            biased;
            r = rd.read_buf(&mut b.rbuf) => match r {
                Ok(0) => return Served::Failed(ErrorKind::Closed),
                Ok(n) => {
                    filled = n == spare;
                    rx.read_sent(x);
                    let now = rx.arrival(x);
                    let began = b.rbuf.len() == n;
                    let used = match f.split(&b.rbuf, x, now) {
                        Ok(used) => used,
                        Err(kind) => return Served::Failed(kind),
                    };
                    b.rbuf.drain(..used);
                    let t = tokio::time::Instant::now();
                    if began || used > 0 || b.rbuf.is_empty() {
                        progress = t;
                    } else if t.duration_since(progress) > lost_after {
                        x.event("framing_lost");
                        return Served::Failed(ErrorKind::Malformed);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Served::Failed(kind_of(&e)),
            },
            // Write what is framed, then flush (TLS records may wait in the writer).
            r = async {
                if pending {
                    wr.write(&b.wbuf[woff..]).await.map(Some)
                } else {
                    wr.flush().await.map(|()| None)
                }
            }, if pending || unflushed => match r {
                Ok(Some(0)) => return Served::Failed(ErrorKind::Closed),
                Ok(Some(n)) => {
                    woff += n;
                    unflushed = true;
                    if woff == b.wbuf.len() {
                        b.wbuf.clear();
                        woff = 0;
                    }
                }
                Ok(None) => {
                    unflushed = false;
                    // Every framed byte is in the socket now.
                    rx.left(&mut b.framed);
                    if rx.many_sent() {
                        rx.read_sent(x);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Served::Failed(kind_of(&e)),
            },
            turn = lane.wait_turn(), if !pending && !unflushed => {
                if let Some(how) = turn {
                    return Served::Turn(how);
                }
            }
            () = &mut watch, if every.is_some() => {
                if f.stalled(x) {
                    return Served::Failed(ErrorKind::Io);
                }
                watch.as_mut().reset(tokio::time::Instant::now() + every.unwrap_or_default());
            }
        }
    }
}

/// How long after its last query's deadline a draining connection looks again for queries
/// still waiting (the engine ends timed-out queries every few milliseconds).
const DRAIN_RECHECK: Duration = Duration::from_millis(10);

/// Serves a connection that takes no more queries (its policy spent it) until every query
/// outstanding on it has its fate: answers are read and handed on as before; the queries that
/// get none end by their own deadlines in the engine, at most `timeout` from now (none was
/// sent on it after now). Meanwhile the lane's driver goes on on a new connection: no query
/// waits for another's fate. Reports the drain (`conn_draining`, `drain_ended`) and the
/// connection's close; the caller then closes its socket. A server that closes the connection
/// first leaves its unanswered queries to be sent again on the lane ([`unanswered`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn drain<R, X, F>(
    mut rd: R,
    lane: &Lane,
    x: &X,
    f: &mut F,
    mut rbuf: Vec<u8>,
    kind_of: fn(&io::Error) -> ErrorKind,
    rx: &crate::stamp::RxStamp,
    timeout: Duration,
) where
    R: AsyncRead + Unpin,
    X: Exchange + ?Sized,
    F: Framing,
{
    x.conn_draining(x.now());
    let mut check = tokio::time::Instant::now() + timeout + DRAIN_RECHECK;
    let ended = loop {
        if !f.any_live(x) {
            break if f.answered_all() { Ok(DrainEnd::Answered) } else { Ok(DrainEnd::TimedOut) };
        }
        if lane.closing() {
            break Ok(DrainEnd::RunEnd);
        }
        if rbuf.capacity() - rbuf.len() < READ_START / 2 {
            rbuf.reserve(rbuf.capacity().clamp(READ_START, READ_CHUNK));
        }
        tokio::select! {
            biased;
            r = rd.read_buf(&mut rbuf) => match r {
                Ok(0) => break Err(ErrorKind::Closed),
                Ok(_) => {
                    rx.read_sent(x);
                    let now = rx.arrival(x);
                    match f.split(&rbuf, x, now) {
                        Ok(used) => drop(rbuf.drain(..used)),
                        Err(kind) => break Err(kind),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(kind_of(&e)),
            },
            () = tokio::time::sleep_until(check) => check = tokio::time::Instant::now() + DRAIN_RECHECK,
            () = closed(lane) => break Ok(DrainEnd::RunEnd),
        }
    };
    let (how, close) = match ended {
        Ok(DrainEnd::RunEnd) => {
            unanswered(lane, x, &f.drain(), ErrorKind::Closed);
            (DrainEnd::RunEnd, Close::ClientEnd)
        }
        Ok(how) => (how, Close::ClientLifetime),
        // The framing ended it with every answer in (HTTP/1.1: `Connection: close` after the
        // last one it owed).
        Err(_) if !f.any_live(x) => (DrainEnd::Answered, Close::ClientLifetime),
        Err(kind) => {
            unanswered(lane, x, &f.drain(), kind);
            (DrainEnd::ServerClosed, close_of(kind))
        }
    };
    let now = x.now();
    x.drain_ended(how, now);
    x.conn_closed(close, now);
}

/// The queries outstanding on one connection whose queries are streams or tasks of their own
/// (DoH/2, DoH/3, DoQ): how many, and whether any ended without its answer. A connection that
/// takes no more queries drains until none is left ([`drain_streams`]).
#[derive(Default)]
pub(crate) struct Outstanding {
    n: Cell<u32>,
    unanswered: Cell<bool>,
    done: Notify,
}

impl Outstanding {
    /// A query goes out on the connection: outstanding until the guard is dropped.
    pub(crate) fn enter(self: &Rc<Self>) -> OnConn {
        self.n.set(self.n.get() + 1);
        OnConn { on: self.clone(), answered: false }
    }

    /// Queries outstanding.
    pub(crate) fn count(&self) -> u32 {
        self.n.get()
    }

    /// Resolves when no query is outstanding.
    pub(crate) async fn idle(&self) {
        while self.n.get() > 0 {
            self.done.notified().await;
        }
    }
}

/// One query outstanding on a connection (see [`Outstanding`]), until dropped.
pub(crate) struct OnConn {
    on: Rc<Outstanding>,
    answered: bool,
}

impl OnConn {
    /// Its answer came (on this connection).
    pub(crate) fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for OnConn {
    fn drop(&mut self) {
        let o = &self.on;
        o.n.set(o.n.get() - 1);
        if !self.answered {
            o.unanswered.set(true);
        }
        if o.n.get() == 0 {
            o.done.notify_waiters();
        }
    }
}

/// Drains a connection whose queries are streams or tasks of their own (DoH/2, DoH/3, DoQ)
/// and that takes no more queries (its policy spent it, or the server's GOAWAY): waits until
/// none of its queries is outstanding (each ends on its own: answered, or given up at its
/// deadline), the connection ends first (`ended`, with how), or the lane closes. The queries'
/// own tasks report their fates (sent again when the server's close left them unanswered).
/// Reports the drain; returns how to report the connection's close (`done`: how it ends
/// when its queries are done), which the caller does once it has closed it.
pub(crate) async fn drain_streams<X: Exchange + ?Sized>(
    lane: &Lane,
    x: &X,
    on: &Outstanding,
    done: Close,
    ended: impl std::future::Future<Output = Close>,
) -> Close {
    x.conn_draining(x.now());
    let (how, close) = tokio::select! {
        // First: the connection may end because its last query did.
        biased;
        () = on.idle() => (if on.unanswered.get() { DrainEnd::TimedOut } else { DrainEnd::Answered }, done),
        c = ended => (DrainEnd::ServerClosed, c),
        () = closed(lane) => (DrainEnd::RunEnd, Close::ClientEnd),
    };
    x.drain_ended(how, x.now());
    close
}

/// Before each connection attempt of a lane: waits for its slot under `--conn-rate` (the
/// run-wide gate), then false when the lane is closing (or closes while it waits); otherwise
/// the attempt begins, noting when its wait for a slot ended (the queries waiting in the lane
/// until then were held back by the cap).
pub(crate) async fn may_connect(lane: &Lane, opts: &crate::LaneOptions) -> bool {
    let mut slot = None;
    if let Some(gate) = &opts.conn_gate {
        let wait = gate.reserve();
        if !wait.is_zero() {
            lane.note_wait(Some(volley_metrics::Wait::ConnRate));
            tokio::select! {
                () = tokio::time::sleep(wait) => slot = Some(std::time::Instant::now()),
                () = closed(lane) => return false,
            }
        }
    }
    if lane.closing() {
        return false;
    }
    lane.begin_connection();
    lane.set_slot_waited(slot);
    true
}

/// A connection attempt, given up when the lane closes first (the run ended): None then. The
/// attempt stays in progress ([`Lane::attempting`]): that is its fate at the end of the run.
pub(crate) async fn attempt<T>(lane: &Lane, f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        r = f => Some(r),
        () = closed(lane) => None,
    }
}

/// How a connection ended, from the error its queries got.
pub fn close_of(kind: ErrorKind) -> Close {
    match kind {
        ErrorKind::Closed => Close::ServerFin,
        ErrorKind::Reset => Close::ServerReset,
        ErrorKind::Goaway => Close::ServerGoaway,
        ErrorKind::IdleTimeout => Close::IdleTimeout,
        _ => Close::Error,
    }
}

/// Fails every query waiting in the lane with `kind`.
pub(crate) fn fail_queued<X: Exchange + ?Sized>(lane: &Lane, x: &X, kind: ErrorKind) {
    let now = x.now();
    for t in lane.take_queued() {
        x.failed(t, kind, now);
    }
}

/// After the client closed a connection (already reported): when its policy closed it (idle,
/// or lifetime by time or queries), waits for a query before the next one, so that the new
/// connection opens lazily and its handshake is part of that query's latency. Returns true
/// when the lane is closing (the driver ends).
pub(crate) async fn after_turn(lane: &Lane, how: Close) -> bool {
    matches!(how, Close::ClientIdle | Close::ClientLifetime) && !lane.wait_for_work().await || lane.closing()
}

/// Ends the outstanding queries of a dead connection and reports its close. Returns true
/// when the lane is closing (the driver ends).
pub(crate) fn end_connection<X: Exchange + ?Sized, F: Framing>(lane: &Lane, x: &X, f: &mut F, kind: ErrorKind) -> bool {
    let now = x.now();
    unanswered(lane, x, &f.drain(), kind);
    if lane.closing() {
        x.conn_closed(Close::ClientEnd, now);
        return true;
    }
    x.conn_closed(close_of(kind), now);
    false
}

/// Whether a query that a connection left unanswered with `kind` is sent again: when the
/// server ended the connection (FIN, RST, GOAWAY, a QUIC close or stateless reset) or refused
/// the query's HTTP/2 stream unprocessed (REFUSED_STREAM): it did not process the query, or
/// said it would not answer it. Not after a fault of the answer itself or of TLS, nor after
/// another stream reset, nor after a QUIC idle timeout (the server fell silent with the query:
/// it may have taken it and dropped it, as a lost answer over UDP; it fails `idle_timeout`).
pub(crate) fn resendable(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Closed
            | ErrorKind::Reset
            | ErrorKind::Goaway
            | ErrorKind::RefusedStream
            | ErrorKind::QuicClosed
            | ErrorKind::StatelessReset
    )
}

/// The queries a connection left unanswered when it ended with `kind`: those still live are
/// sent again on the lane's next connection when `kind` is [`resendable`], the lane is not
/// closing and the engine agrees ([`Exchange::resend`]: as often as the query's own deadline
/// and `--resend` allow); the others fail with `kind`.
pub(crate) fn unanswered<X: Exchange + ?Sized>(lane: &Lane, x: &X, tokens: &[Token], kind: ErrorKind) {
    let now = x.now();
    let again = resendable(kind) && !lane.closing();
    let mut back = Vec::new();
    for &t in tokens {
        if !x.is_live(t) {
            continue;
        }
        if again {
            if x.resend(t, kind, now) {
                back.push(t);
            }
        } else {
            x.failed(t, kind, now);
        }
    }
    lane.requeue(&back);
}

/// Resolves when the lane is told to close.
pub(crate) async fn closed(lane: &Lane) {
    lane.closed().await
}

/// After a failed connection attempt: fails what waits, then sleeps `backoff` (doubling it,
/// up to 1 s). Returns true when the lane closed meanwhile.
pub(crate) async fn after_failure<X: Exchange + ?Sized>(
    lane: &Lane,
    x: &X,
    kind: ErrorKind,
    backoff: &mut Duration,
) -> bool {
    fail_queued(lane, x, kind);
    let closing = pause(lane, *backoff).await;
    *backoff = (*backoff * 2).min(Duration::from_secs(1));
    closing
}

/// Sleeps `d`, marked as backing off; true when the lane closed meanwhile.
async fn pause(lane: &Lane, d: Duration) -> bool {
    lane.set_backing_off(true);
    let closing = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = closed(lane) => true,
    };
    lane.set_backing_off(false);
    closing
}

/// After the server ended a connection (already reported): a connection that brought no
/// answer (refused by a connection limit, say) is followed by a growing backoff rather than a
/// storm of reconnects; one that did (a server's query or idle policy) is replaced without
/// delay. Then, like a real client, the lane opens the next one only when it has a query.
/// Returns true when the lane is closing.
pub(crate) async fn after_server_close(lane: &Lane, backoff: &mut Duration) -> bool {
    if lane.conn_answers() == 0 {
        if pause(lane, *backoff).await {
            return true;
        }
        *backoff = (*backoff * 2).min(Duration::from_secs(1));
    } else {
        *backoff = BACKOFF;
    }
    !lane.wait_for_work().await
}

/// The first backoff after a failure.
pub(crate) const BACKOFF: Duration = Duration::from_millis(20);

/// Fails every query the lane gets until it closes (the transport cannot work at all,
/// e.g. its TLS configuration could not be built).
pub(crate) async fn fail_forever<X: Exchange + ?Sized>(lane: &Lane, x: &X, kind: ErrorKind) {
    loop {
        fail_queued(lane, x, kind);
        if lane.closing() {
            return;
        }
        lane.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut out = Vec::new();
        frame(b"abc", &mut out);
        frame(b"", &mut out);
        frame(&[7u8; 300], &mut out);
        out.extend_from_slice(&[0, 5, 1, 2]); // incomplete
        let mut got = Vec::new();
        let used = split_frames(&out, |m| got.push(m.to_vec()));
        assert_eq!(used, out.len() - 4);
        assert_eq!(got, vec![b"abc".to_vec(), vec![], vec![7u8; 300]]);
        assert_eq!(split_frames(&[0], |_| panic!()), 0);
    }
}
