//! DNS over TCP (RFC 7766): 2-byte length prefix, many queries in flight per connection,
//! answers sent as soon as each is ready (so out of order when some are delayed), idle
//! timeout, TCP_NODELAY, and the answers to one read coalesced into one write.
//!
//! One tokio current-thread runtime per thread, one SO_REUSEPORT listener per thread, and
//! one task per connection that reads, answers, keeps delayed answers in its own timer heap,
//! and writes — no channels, no locks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::TcpListener as StdListener;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use crate::answer::{Answerer, Transport, Verdict};
use crate::stats::{add, Counters};

/// Pending output above which a connection stops reading until the peer catches up.
const HIGH_WATER: usize = 256 * 1024;
/// Initial read buffer; grows to fit one 64 KiB frame if a query that large arrives.
const READ_BUF: usize = 16 * 1024;

/// Per-thread settings shared by its connections.
pub(crate) struct Shared {
    pub answerer: Arc<Answerer>,
    pub counters: Arc<Counters>,
    pub idle_timeout: Duration,
}

/// Runs a current-thread runtime that accepts on `listener` until `stop` turns true.
pub(crate) fn serve(listener: StdListener, shared: Shared, mut stop: watch::Receiver<bool>) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    let shared = Arc::new(shared);
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        loop {
            if *stop.borrow_and_update() {
                return Ok(());
            }
            tokio::select! {
                _ = stop.changed() => {}
                r = listener.accept() => match r {
                    Ok((stream, _)) => {
                        add(&shared.counters.tcp_connections, 1);
                        tokio::spawn(connection(stream, shared.clone()));
                    }
                    // Out of file descriptors and the like: back off briefly instead of spinning.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
            }
        }
    })
    // Dropping the runtime drops (closes) the connections still open.
}

/// A delayed answer, already framed.
struct Delayed {
    due: Instant,
    seq: u64,
    frame: Vec<u8>,
}

impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// The state of one connection apart from the socket.
struct Conn {
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    out: Vec<u8>,
    timers: BinaryHeap<Reverse<Delayed>>,
    seq: u64,
}

impl Conn {
    /// Answers every complete frame in the read buffer and keeps the partial one.
    fn process(&mut self, shared: &Shared) {
        let mut at = 0;
        let now = Instant::now();
        while self.rlen - at >= 2 {
            let len = u16::from_be_bytes([self.rbuf[at], self.rbuf[at + 1]]) as usize;
            if self.rlen - at - 2 < len {
                break;
            }
            let query = &self.rbuf[at + 2..at + 2 + len];
            at += 2 + len;
            add(&shared.counters.queries, 1);
            match shared.answerer.answer(query, Transport::Tcp, &mut self.out) {
                Verdict::Drop => add(&shared.counters.dropped, 1),
                Verdict::Reply { delay: None } => {
                    shared.counters.sent(&self.out);
                    self.wbuf.extend_from_slice(&(self.out.len() as u16).to_be_bytes());
                    self.wbuf.extend_from_slice(&self.out);
                }
                Verdict::Reply { delay: Some(d) } => {
                    add(&shared.counters.delayed, 1);
                    let mut frame = Vec::with_capacity(self.out.len() + 2);
                    frame.extend_from_slice(&(self.out.len() as u16).to_be_bytes());
                    frame.extend_from_slice(&self.out);
                    self.seq += 1;
                    self.timers.push(Reverse(Delayed { due: now + d, seq: self.seq, frame }));
                }
            }
        }
        self.rbuf.copy_within(at..self.rlen, 0);
        self.rlen -= at;
        if self.rlen >= 2 {
            let need = 2 + u16::from_be_bytes([self.rbuf[0], self.rbuf[1]]) as usize;
            if need > self.rbuf.len() {
                self.rbuf.resize(need, 0);
            }
        }
    }

    /// Moves the delayed answers that are due to the write buffer.
    fn fire_due(&mut self, shared: &Shared) {
        let now = Instant::now();
        while self.timers.peek().is_some_and(|t| t.0.due <= now) {
            let Some(Reverse(d)) = self.timers.pop() else { break };
            shared.counters.sent(&d.frame[2..]);
            self.wbuf.extend_from_slice(&d.frame);
        }
    }

    fn pending_write(&self) -> usize {
        self.wbuf.len() - self.wpos
    }
}

async fn connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let mut c = Conn {
        rbuf: vec![0; READ_BUF],
        rlen: 0,
        wbuf: Vec::new(),
        wpos: 0,
        out: Vec::with_capacity(512),
        timers: BinaryHeap::new(),
        seq: 0,
    };
    let idle = shared.idle_timeout;
    let mut eof = false;
    let mut last_activity = Instant::now();
    let mut idle_sleep = pin!(sleep_until(last_activity + idle));
    let mut timer_sleep = pin!(sleep_until(last_activity));
    loop {
        // Write what is pending without waiting.
        if c.pending_write() > 0 {
            match stream.try_write(&c.wbuf[c.wpos..]) {
                Ok(n) => {
                    c.wpos += n;
                    last_activity = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
            if c.pending_write() == 0 {
                c.wbuf.clear();
                c.wpos = 0;
            }
        }
        if eof && c.timers.is_empty() && c.pending_write() == 0 {
            break;
        }
        let want_read = !eof && c.pending_write() < HIGH_WATER;
        let want_write = c.pending_write() > 0;
        if let Some(t) = c.timers.peek() {
            if timer_sleep.deadline() != t.0.due {
                timer_sleep.as_mut().reset(t.0.due);
            }
        }
        let idle_at = last_activity + idle;
        if idle_sleep.deadline() != idle_at {
            idle_sleep.as_mut().reset(idle_at);
        }
        tokio::select! {
            biased;
            r = stream.readable(), if want_read => {
                if r.is_err() {
                    return;
                }
                loop {
                    if c.rlen == c.rbuf.len() {
                        break;
                    }
                    match stream.try_read(&mut c.rbuf[c.rlen..]) {
                        Ok(0) => {
                            eof = true;
                            break;
                        }
                        Ok(n) => {
                            c.rlen += n;
                            last_activity = Instant::now();
                            c.process(&shared);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => return,
                    }
                    if c.pending_write() >= HIGH_WATER {
                        break;
                    }
                }
            }
            r = stream.writable(), if want_write => {
                if r.is_err() {
                    return;
                }
            }
            _ = &mut timer_sleep, if !c.timers.is_empty() => c.fire_due(&shared),
            _ = &mut idle_sleep, if c.timers.is_empty() => {
                if Instant::now() >= last_activity + idle {
                    break;
                }
            }
        }
    }
    // Graceful close: FIN after whatever could be written.
    if c.pending_write() > 0 {
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&c.wbuf[c.wpos..])).await;
    }
    let _ = stream.shutdown().await;
}
