//! Kernel receive times, so that an answer's latency ends when it reached the generator's
//! socket, not when the generator got round to reading it (a thread waking up, a busy
//! generator, TLS and HTTP work before the DNS message appears).
//!
//! UDP stamps each datagram. A stream socket ([`StampedTcp`], under TCP, DoT and DoH) stamps
//! each read with the arrival of the newest segment it returned (the kernel also merges
//! segments queued behind each other into one): an answer's time is then the arrival of the
//! last segment read with it or after it, never earlier than the answer itself and never later
//! than the moment it was handed to the engine. A QUIC endpoint's socket ([`StampedUdp`], under
//! DoQ and DoH/3) does the same with the newest datagram quinn read.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::{sockopt, Exchange};

/// Asks the kernel to stamp what the socket receives (SO_TIMESTAMPNS).
pub(crate) fn enable(fd: RawFd) -> io::Result<()> {
    sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// The receive stamp of a received message, CLOCK_REALTIME ns (0 when absent): its
/// SCM_TIMESTAMPNS, or the software stamp of its SCM_TIMESTAMPING (a socket with transmit
/// stamps on, see [`enable_tx`]).
pub(crate) fn of(h: &libc::msghdr) -> u64 {
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET
                && ((*c).cmsg_type == libc::SCM_TIMESTAMPNS || (*c).cmsg_type == libc::SO_TIMESTAMPING)
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}

/// SO_TIMESTAMPING's flags for transmit stamps: software stamps when a packet leaves for the
/// device (TX_SOFTWARE) and when one arrives (RX_SOFTWARE, so that receive stamps need no
/// SO_TIMESTAMPNS beside them: the two together would add two control messages to every
/// datagram), reported (SOFTWARE), each with the ID of what it stamps (OPT_ID: a datagram's
/// number over UDP, counted from 0 when the option is set; a byte's offset over TCP) and
/// without the packet itself (OPT_TSONLY: a small message on the error queue, and no need
/// for `net.core.tstamp_allow_data`).
const TX_FLAGS: libc::c_uint = libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

fn set_timestamping(fd: RawFd, flags: libc::c_uint) -> io::Result<()> {
    // The flags are bits: the same int, read as unsigned by the kernel.
    sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags as libc::c_int)
}

/// Asks the kernel to stamp what the socket sends and receives (SO_TIMESTAMPING, see
/// [`TX_FLAGS`]); the send stamps come back on the socket's error queue ([`TxReader`]).
pub(crate) fn enable_tx(fd: RawFd) -> io::Result<()> {
    set_timestamping(fd, TX_FLAGS)
}

/// [`TX_FLAGS`] less the stamping of every send (TX_SOFTWARE): each datagram that is to be
/// stamped asks for it in a control message of its own ([`TX_ASK`]), and OPT_ID numbers only
/// those (the kernel counts a datagram only when it is stamped).
const SPARSE_TX_FLAGS: libc::c_uint = TX_FLAGS & !libc::SOF_TIMESTAMPING_TX_SOFTWARE;

/// What a datagram's own SO_TIMESTAMPING control message asks for: a software stamp as it
/// leaves for the device.
pub(crate) const TX_ASK: u32 = libc::SOF_TIMESTAMPING_TX_SOFTWARE;

/// [`enable_tx`] for a socket whose sends ask for their stamps one by one ([`TX_ASK`]).
pub(crate) fn enable_sparse_tx(fd: RawFd) -> io::Result<()> {
    set_timestamping(fd, SPARSE_TX_FLAGS)
}

/// A transmit stamp from the error queue: its ID (OPT_ID) and its time, CLOCK_REALTIME ns.
/// None for anything else there (an ICMP error, a stamp of another kind).
pub(crate) fn tx_of(h: &libc::msghdr) -> Option<(u32, u64)> {
    let (mut id, mut at) = (None, 0);
    // SAFETY: as in `of`; each payload is read unaligned, within its message.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            let data = libc::CMSG_DATA(c);
            let len = (*c).cmsg_len as usize - (data as usize - c as usize);
            if level == libc::SOL_SOCKET && kind == libc::SO_TIMESTAMPING && len >= 16 {
                let ts = std::ptr::read_unaligned(data as *const libc::timespec);
                at = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            } else if ((level == libc::SOL_IP && kind == libc::IP_RECVERR)
                || (level == libc::SOL_IPV6 && kind == libc::IPV6_RECVERR))
                && len >= std::mem::size_of::<libc::sock_extended_err>()
            {
                let ee = std::ptr::read_unaligned(data as *const libc::sock_extended_err);
                if ee.ee_errno == libc::ENOMSG as u32
                    && ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                    && ee.ee_info == SCM_TSTAMP_SND
                {
                    id = Some(ee.ee_data);
                }
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    id.filter(|_| at != 0).map(|id| (id, at))
}

/// `ee_info` of a stamp taken as the packet went to the device (linux/errqueue.h).
const SCM_TSTAMP_SND: u32 = 0;

/// Stamps read from the error queue per system call.
const TX_BATCH: usize = 64;
/// Control bytes per stamp: SCM_TIMESTAMPING (16 + 48) and IP_RECVERR (16 + 16 + 16).
const TX_CTRL: usize = 160;

/// Reads transmit stamps from a socket's error queue in batches (`recvmmsg` with
/// MSG_ERRQUEUE): one system call for up to [`TX_BATCH`] stamps. One per thread.
struct TxReader {
    hdrs: Vec<libc::mmsghdr>,
    ctrl: Vec<u64>,
}

thread_local! {
    static TX_READER: std::cell::RefCell<TxReader> = std::cell::RefCell::new(TxReader {
        // SAFETY: mmsghdr is plain old data; all-zero is a valid empty header.
        hdrs: (0..TX_BATCH).map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() }).collect(),
        ctrl: vec![0; TX_BATCH * TX_CTRL / 8],
    });
}

/// Reads every transmit stamp waiting on `fd`'s error queue, in batches, and hands each to
/// `each` (ID, CLOCK_REALTIME ns). Returns how many were read.
pub(crate) fn read_tx(fd: RawFd, mut each: impl FnMut(u32, u64)) -> usize {
    let mut total = 0;
    loop {
        let got = TX_READER.with(|r| {
            let r = &mut *r.borrow_mut();
            let TxReader { hdrs, ctrl } = r;
            for (i, h) in hdrs.iter_mut().enumerate() {
                h.msg_hdr.msg_iov = std::ptr::null_mut();
                h.msg_hdr.msg_iovlen = 0;
                h.msg_hdr.msg_name = std::ptr::null_mut();
                h.msg_hdr.msg_namelen = 0;
                h.msg_hdr.msg_control = ctrl[i * TX_CTRL / 8..].as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = TX_CTRL as _;
                h.msg_hdr.msg_flags = 0;
                h.msg_len = 0;
            }
            // SAFETY: the headers point into buffers of the reader, ours for the call; the
            // kernel writes at most msg_controllen bytes into each.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    TX_BATCH as libc::c_uint,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            let n = n.max(0) as usize;
            // `each` reads no error queue itself: the reader stays borrowed while it runs.
            for (id, at) in hdrs[..n].iter().filter_map(|h| tx_of(&h.msg_hdr)) {
                each(id, at);
            }
            n
        });
        total += got;
        let n = got;
        if n < TX_BATCH {
            return total;
        }
    }
}

/// The queries sent on one socket whose transmit stamps have not come yet, in the order they
/// left, each with its stamp's ID: a datagram's number (UDP), or the offset of the last byte
/// of the write that carried it (TCP: one stamp then covers every query up to its byte).
/// Bounded: a socket whose stamps stop coming forgets its oldest queries, which then keep
/// volley's own send time.
#[derive(Default)]
pub(crate) struct TxPending {
    /// ID, query, and for a query sent between two stamped datagrams (not stamped itself),
    /// where it lay between them: 0 at the first, 1 at the second.
    q: std::collections::VecDeque<(u64, crate::Token, Option<f32>)>,
    /// The next datagram's ID (UDP), or the bytes written so far (TCP).
    pub(crate) next: u64,
    /// The newest stamp taken by [`TxPending::stamp_at`]: its full ID and time.
    last: Option<(u64, u64)>,
}

/// Most queries a socket keeps waiting for their stamps.
const PENDING_MAX: usize = 1 << 16;

impl TxPending {
    /// Query `t` left with ID `id`.
    pub(crate) fn push(&mut self, id: u64, t: crate::Token) {
        if self.q.len() >= PENDING_MAX {
            self.q.pop_front();
        }
        self.q.push_back((id, t, None));
    }

    /// Query `t` left unstamped between the datagrams stamped `id - 1` and `id`, at `at` of
    /// the way from the first to the second (by its place among the datagrams of one send).
    pub(crate) fn push_between(&mut self, id: u64, t: crate::Token, at: f32) {
        if self.q.len() >= PENDING_MAX {
            self.q.pop_front();
        }
        self.q.push_back((id, t, Some(at)));
    }

    /// Forgets the queries waiting (they have their fates) and lets their memory go; the
    /// numbering goes on.
    pub(crate) fn forget(&mut self) {
        if self.q.capacity() > 0 {
            self.q = std::collections::VecDeque::new();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    /// A stamp with the kernel's (32-bit) ID `id` came: the query or queries it stamps, each
    /// handed to `stamped`. `cumulative`: it stamps every query up to its ID (TCP's bytes
    /// leave in order); else only the query with that ID, and the ones before it (whose stamps
    /// are lost) are forgotten.
    pub(crate) fn stamp(&mut self, id: u32, cumulative: bool, mut stamped: impl FnMut(crate::Token)) {
        let full = self.full_id(id);
        while let Some(&(k, t, _)) = self.q.front() {
            if k > full {
                break;
            }
            self.q.pop_front();
            if cumulative || k == full {
                stamped(t);
            }
        }
    }

    /// The full ID of the kernel's (32-bit) `id`: the one nearest to the oldest query waiting
    /// (the kernel's wraps).
    fn full_id(&self, id: u32) -> u64 {
        let base = self.q.front().map_or(self.next, |&(k, _, _)| k);
        let mut full = (base & !0xffff_ffff) | u64::from(id);
        if full + (1 << 31) < base {
            full += 1 << 32;
        } else if full > base + (1 << 31) && full >= 1 << 32 {
            full -= 1 << 32;
        }
        full
    }

    /// A datagram's stamp, ID `id` and time `at`, where not every datagram is stamped: the
    /// query it stamps takes `at`; the queries sent between it and the stamp before it
    /// ([`TxPending::push_between`]) take the time as far between the two stamps as they lay
    /// between the two datagrams (`stamped`'s third argument: true), or none when that stamp
    /// was lost. Queries before it whose stamps were lost are forgotten.
    pub(crate) fn stamp_at(&mut self, id: u32, at: u64, mut stamped: impl FnMut(crate::Token, u64, bool)) {
        let full = self.full_id(id);
        let before = self.last.filter(|&(k, _)| k + 1 == full).map(|(_, t)| t.min(at));
        while let Some(&(k, t, between)) = self.q.front() {
            if k > full {
                break;
            }
            self.q.pop_front();
            if k != full {
                continue;
            }
            match (between, before) {
                (None, _) => stamped(t, at, false),
                (Some(f), Some(b)) => stamped(t, b + ((at - b) as f64 * f64::from(f)).round() as u64, true),
                (Some(_), None) => {}
            }
        }
        self.last = Some((full, at));
    }
}

/// CLOCK_REALTIME minus the run's clock (CLOCK_MONOTONIC), ns. Read between two readings of
/// the run's clock, taking the tightest of a few tries: a thread preempted between two plain
/// reads would otherwise move every stamp it converts earlier by the time it was off the CPU,
/// even to before its query left.
pub(crate) fn realtime_shift(now: &impl Fn() -> u64) -> u64 {
    let mut best = (u64::MAX, 0);
    for _ in 0..3 {
        let a = now();
        let r = realtime_ns();
        let b = now();
        let gap = b.saturating_sub(a);
        if gap < best.0 {
            best = (gap, r.saturating_sub(a + gap / 2));
        }
        if gap < 2_000 {
            break;
        }
    }
    best.1
}

/// CLOCK_REALTIME in ns.
fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The receive time of the newest read of a stream socket, shared between the socket (which
/// sets it) and whoever hands what was read to the engine (which converts it).
#[derive(Clone)]
pub(crate) struct RxStamp(Rc<Rx>);

struct Rx {
    /// The newest read's stamp, CLOCK_REALTIME ns (0: none, or not to be trusted); shared with
    /// the socket, which may be another thread's (quinn's).
    last: Arc<AtomicU64>,
    /// The TCP socket, asked for `TCP_INFO` (-1: none, or no longer the stream's).
    fd: Cell<RawFd>,
    /// Whether stamps are checked against reordering: TCP's are. A QUIC stream's data reaches
    /// the reader only once complete, when the newest datagram is at least as new as the one
    /// that completed it.
    ordered: bool,
    /// Out-of-order segments the socket had received when last asked.
    ooo: Cell<u32>,
    /// The stamp last found trusted (so that a read's other answers do not ask again).
    checked: Cell<u64>,
    /// When the clock shift was last measured (run clock) and the shift.
    shift: Cell<(u64, u64)>,
    /// Transmit stamps (a stream socket with them on): the bytes written to the socket so
    /// far (TLS records included) and the queries waiting for their stamps.
    tx: Option<TxState>,
}

struct TxState {
    written: Cell<u64>,
    pending: std::cell::RefCell<TxPending>,
    /// A QUIC endpoint's socket ([`StampedUdp`]): its datagrams are counted and stamped one by
    /// one, and each query takes the stamp of the first datagram sent after its stream was
    /// written and finished (see [`RxStamp::left_one`]).
    dgram: Option<Arc<DgramTx>>,
    /// Writes since the error queue was last read: their stamps wait there, queries or not.
    unread: Cell<u32>,
    /// HTTP over TLS on this socket: where each request's last byte is ([`HttpTrack`]).
    http: std::cell::RefCell<HttpTrack>,
}

/// Where the requests of an HTTP library (hyper, h2) end in what it writes, so that each takes
/// the stamp of the write that carried its last byte: the library writes its requests itself,
/// through the TLS stream (see `https::Tls`), which tells what it accepted ([`RxStamp::plain`])
/// and when all of it is in the socket, as TLS records ([`RxStamp::drained`]).
#[derive(Default)]
pub(crate) struct HttpTrack {
    /// HTTP/2: the frames written are parsed (from the client's preface on).
    h2: bool,
    /// Bytes of the client's preface passed.
    preface: u8,
    /// The frame header being read, and its bytes so far.
    hdr: [u8; 9],
    have: u8,
    /// Payload bytes of the current frame still to pass.
    skip: u32,
    /// The request the current frame ends (its stream's END_STREAM), once the frame is passed.
    ending: Option<crate::Token>,
    /// A request whose END_STREAM came on a HEADERS frame that CONTINUATION frames follow.
    continued: Option<(u32, crate::Token)>,
    /// HTTP/2 streams whose request is not all written yet: stream ID and query.
    streams: std::collections::VecDeque<(u32, crate::Token)>,
    /// Requests all written by the library, not all in the socket yet.
    whole: Vec<crate::Token>,
    /// HTTP/1.1 (one request at a time): the request, whether the library wrote since it was
    /// handed over, and the last byte of the socket when what it wrote was all in the socket.
    h1: Option<(crate::Token, bool, Option<u64>)>,
}

/// The client connection preface of HTTP/2 (RFC 9113 section 3.4), its length.
const H2_PREFACE: u8 = 24;
/// Most HTTP/2 requests a socket tracks whose last frame is not written yet.
const H2_STREAMS_MAX: usize = 4096;

impl HttpTrack {
    /// The library wrote `buf` (accepted by the TLS stream, in order).
    fn parse(&mut self, mut buf: &[u8]) {
        if let Some(h1) = &mut self.h1 {
            h1.1 |= !buf.is_empty();
        }
        if !self.h2 {
            return;
        }
        while !buf.is_empty() {
            if self.preface < H2_PREFACE {
                let n = buf.len().min(usize::from(H2_PREFACE - self.preface));
                self.preface += n as u8;
                buf = &buf[n..];
            } else if self.skip > 0 {
                let n = buf.len().min(self.skip as usize);
                self.skip -= n as u32;
                buf = &buf[n..];
                if self.skip == 0 {
                    self.frame_passed();
                }
            } else {
                let have = usize::from(self.have);
                let n = buf.len().min(9 - have);
                self.hdr[have..have + n].copy_from_slice(&buf[..n]);
                self.have += n as u8;
                buf = &buf[n..];
                if self.have == 9 {
                    self.have = 0;
                    self.header();
                }
            }
        }
    }

    /// A frame's header was read (RFC 9113 section 4.1).
    fn header(&mut self) {
        let h = self.hdr;
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
        let (kind, flags) = (h[3], h[4]);
        let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        const END_STREAM: u8 = 0x1;
        const END_HEADERS: u8 = 0x4;
        let take = |streams: &mut std::collections::VecDeque<(u32, crate::Token)>| {
            let i = streams.iter().position(|s| s.0 == id)?;
            streams.remove(i).map(|s| s.1)
        };
        match kind {
            // DATA, or HEADERS that end the stream and their header block.
            0x0 if flags & END_STREAM != 0 => self.ending = take(&mut self.streams),
            0x1 if flags & END_STREAM != 0 => match take(&mut self.streams) {
                Some(t) if flags & END_HEADERS == 0 => self.continued = Some((id, t)),
                t => self.ending = t,
            },
            // CONTINUATION that ends a header block.
            0x9 if flags & END_HEADERS != 0 && self.continued.is_some_and(|c| c.0 == id) => {
                self.ending = self.continued.take().map(|c| c.1);
            }
            _ => {}
        }
        self.skip = len;
        if len == 0 {
            self.frame_passed();
        }
    }

    fn frame_passed(&mut self) {
        if let Some(t) = self.ending.take() {
            self.whole.push(t);
        }
    }
}

/// How often the shift between the kernel's clock and the run's is measured again: a clock
/// slewed by NTP (at most 500 ppm) moves by half a microsecond in that time.
const SHIFT_EVERY_NS: u64 = 1_000_000;

impl Default for RxStamp {
    /// No socket: every arrival is now.
    fn default() -> RxStamp {
        RxStamp::new(-1, Arc::default(), false, false)
    }
}

impl RxStamp {
    fn new(fd: RawFd, last: Arc<AtomicU64>, ordered: bool, tx: bool) -> RxStamp {
        RxStamp(Rc::new(Rx {
            last,
            fd: Cell::new(fd),
            ordered,
            ooo: Cell::new(0),
            checked: Cell::new(0),
            shift: Cell::new((0, 0)),
            tx: tx.then(|| TxState {
                written: Cell::new(0),
                pending: Default::default(),
                dgram: None,
                unread: Cell::new(0),
                http: Default::default(),
            }),
        }))
    }

    /// The shift of the kernel's clock against the run's (measured again every
    /// [`SHIFT_EVERY_NS`]); `t` is now.
    fn shift_at(&self, t: u64, now: &impl Fn() -> u64) -> u64 {
        let (at, mut shift) = self.0.shift.get();
        if at == 0 || t.saturating_sub(at) > SHIFT_EVERY_NS {
            shift = realtime_shift(now);
            self.0.shift.set((t, shift));
        }
        shift
    }

    /// `n` more bytes were written to the socket.
    fn wrote(&self, n: usize) {
        if let Some(tx) = &self.0.tx {
            tx.written.set(tx.written.get() + n as u64);
            tx.unread.set(tx.unread.get().saturating_add(1));
        }
    }

    /// The socket carries HTTP/2 (with transmit stamps on): the frames written from now on
    /// are parsed for the ends of the requests ([`RxStamp::h2_request`]).
    pub(crate) fn http2(&self) {
        if let Some(tx) = &self.0.tx {
            tx.http.borrow_mut().h2 = true;
        }
    }

    /// HTTP/2 request `t` goes on stream `id`, not written yet: its departure is the stamp of
    /// the write that carries the last byte of its stream's END_STREAM frame.
    pub(crate) fn h2_request(&self, id: u32, t: crate::Token) {
        if let Some(tx) = &self.0.tx {
            let mut h = tx.http.borrow_mut();
            if h.streams.len() >= H2_STREAMS_MAX {
                h.streams.pop_front();
            }
            h.streams.push_back((id, t));
        }
    }

    /// HTTP/1.1 request `t` (one at a time) was handed to the library, not written yet: its
    /// departure is the stamp of the last byte of what the library wrote before its answer
    /// came (see [`RxStamp::read_sent`]).
    pub(crate) fn h1_request(&self, t: crate::Token) {
        if let Some(tx) = &self.0.tx {
            tx.http.borrow_mut().h1 = Some((t, false, None));
        }
    }

    /// The HTTP library's bytes `buf` were accepted by the TLS stream (in order).
    pub(crate) fn plain(&self, buf: &[u8]) {
        if let Some(tx) = &self.0.tx {
            tx.http.borrow_mut().parse(buf);
        }
    }

    /// Everything the HTTP library wrote so far is in the socket (TLS holds none of it): the
    /// requests it completed take the last byte written as their departure.
    pub(crate) fn drained(&self) {
        let Some(tx) = &self.0.tx else { return };
        let mut h = tx.http.borrow_mut();
        let last = tx.written.get().saturating_sub(1);
        if !h.whole.is_empty() {
            let mut p = tx.pending.borrow_mut();
            for t in h.whole.drain(..) {
                p.push(last, t);
            }
        }
        if let Some((_, true, at)) = &mut h.h1 {
            *at = Some(last);
        }
    }

    /// The queries `tokens` (taken) were written out whole: every byte of theirs is in the
    /// socket, so the kernel's stamp of the last byte written so far is their departure (the
    /// stamp of each write's last byte: the writes of one flush leave together).
    pub(crate) fn left(&self, tokens: &mut Vec<crate::Token>) {
        let Some(tx) = &self.0.tx else {
            tokens.clear();
            return;
        };
        let last = tx.written.get().saturating_sub(1);
        let mut p = tx.pending.borrow_mut();
        for t in tokens.drain(..) {
            p.push(last, t);
        }
    }

    /// Query `t` was written out whole (a QUIC stream written and finished; a stream socket's
    /// query whose every byte is in the socket). Over QUIC its departure is the first datagram
    /// the endpoint sends from now on: quinn builds its packets from the streams' data after
    /// the stream was written, so that datagram carries the query's data, or the first of it
    /// (when the connection's congestion or flow control holds the data back, the datagram
    /// taken may be another, an acknowledgement say: the departure is then off by that
    /// wait). Over a stream socket: as [`RxStamp::left`].
    pub(crate) fn left_one(&self, t: crate::Token) {
        let Some(tx) = &self.0.tx else { return };
        match &tx.dgram {
            Some(d) => tx.pending.borrow_mut().push(d.sent.load(Relaxed), t),
            None => self.left(&mut vec![t]),
        }
    }

    /// Whether enough queries wait for their stamps that they should be read now, answers or
    /// not (the error queue takes room in the socket's receive buffer).
    pub(crate) fn many_sent(&self) -> bool {
        self.0.tx.as_ref().is_some_and(|tx| tx.pending.borrow().len() >= TX_BATCH)
    }

    /// Reads the transmit stamps waiting on the socket's error queue and hands the engine the
    /// departures of the queries they cover (before their answers, which need them).
    pub(crate) fn read_sent<X: Exchange + ?Sized>(&self, x: &X) {
        let Some(tx) = &self.0.tx else { return };
        let fd = self.0.fd.get();
        // An HTTP/1.1 request answered: it left with the last write before its answer.
        if let Some((t, _, Some(at))) = tx.http.borrow_mut().h1.take() {
            tx.pending.borrow_mut().push(at, t);
        }
        let idle = tx.pending.borrow().is_empty();
        // Read anyway now and then: the socket's other writes (handshakes, acknowledgements,
        // HTTP/2's own frames) are stamped too.
        match &tx.dgram {
            Some(d) if idle && d.unread() < TX_BATCH as u64 => return,
            None if fd < 0 || (idle && tx.unread.get() < TX_BATCH as u32) => return,
            _ => {}
        }
        tx.unread.set(0);
        let mut p = tx.pending.borrow_mut();
        // The clocks once per read, after it: every stamp read is at or before that now.
        let mut clocks = None;
        // A datagram's stamp is its own (the ones before it lost theirs); a stream's last byte
        // stamps every byte before it.
        let cumulative = tx.dgram.is_none();
        let each = |id: u32, at: u64| {
            let &mut (now, s) = clocks.get_or_insert_with(|| {
                let now = x.now();
                (now, self.shift_at(now, &|| x.now()))
            });
            let at = at.saturating_sub(s).min(now);
            p.stamp(id, cumulative, |t| x.stamped(t, at, volley_metrics::Departure::Kernel));
        };
        match &tx.dgram {
            Some(d) => {
                d.read(each);
            }
            None => {
                read_tx(fd, each);
            }
        }
    }

    /// When what the newest read returned had arrived, on the run's clock: the kernel's stamp
    /// (never later than now), or now when the socket gave none or it cannot be trusted (see
    /// [`trusted`]).
    pub(crate) fn arrival<X: Exchange + ?Sized>(&self, x: &X) -> u64 {
        self.arrival_by(|| x.now())
    }

    /// As [`RxStamp::arrival`], by the clock `now`.
    fn arrival_by(&self, now: impl Fn() -> u64) -> u64 {
        let rx = &*self.0;
        let t = now();
        let s = rx.last.load(Relaxed);
        if s == 0 {
            return t;
        }
        let shift = self.shift_at(t, &now);
        let arrived = s.saturating_sub(shift).min(t);
        let ooo = || {
            let after = rcv_ooopack(rx.fd.get())?;
            Some((rx.ooo.replace(after), after))
        };
        if !rx.ordered || s == rx.checked.get() || trusted(t - arrived, ooo) {
            rx.checked.set(s);
            arrived
        } else {
            // Not for the rest of this read's answers either.
            rx.last.store(0, Relaxed);
            t
        }
    }
}

/// A TCP stream whose reads note the kernel's receive time (see the module's text). It reads
/// with `recvmsg` and writes as a `TcpStream` does; `&StampedTcp` reads and writes too, so
/// the two halves of one connection can be driven at once.
pub(crate) struct StampedTcp {
    inner: TcpStream,
    stamp: RxStamp,
}

/// How old a read's stamp may be before it is checked against reordering (see [`trusted`]).
const CHECK_AFTER_NS: u64 = 200_000;

/// Whether a read's stamp, `age` ns old, can be its answers' time.
/// A segment that came out of order (after a loss) waits in the kernel until the hole is
/// filled, but keeps the time it arrived: a read then returns data stamped before it could be
/// read, and the wait (head-of-line blocking, up to a retransmission timeout) would not count.
/// So an old stamp (over `CHECK_AFTER_NS`; a reader that was woken by the data is faster) is
/// kept only if no segment came out of order since the last check (`ooo` before and after,
/// from `TCP_INFO`, asked for only then). A stamp not kept means "now": today's time, late by
/// the reader's own delay, never early.
fn trusted(age: u64, ooo: impl FnOnce() -> Option<(u32, u32)>) -> bool {
    if age <= CHECK_AFTER_NS {
        return true;
    }
    matches!(ooo(), Some((before, after)) if before == after)
}

/// Room for one SCM_TIMESTAMPNS control message (header and timespec, aligned).
const CONTROL: usize = 64;

impl StampedTcp {
    /// Wraps `inner`; without kernel stamps (an error enabling them) reads give none. `tx`:
    /// writes are stamped too (by the offset of each write's last byte, counted from here:
    /// wrap the stream before anything is written), for a driver that reads the stamps
    /// ([`RxStamp::read_sent`]): unread, they would fill the socket's receive buffer.
    pub(crate) fn new(inner: TcpStream, tx: bool) -> StampedTcp {
        let fd = inner.as_raw_fd();
        let tx = tx && enable_tx(fd).is_ok();
        if !tx {
            let _ = enable(fd);
        }
        let stamp = RxStamp::new(fd, Arc::default(), true, tx);
        StampedTcp { inner, stamp }
    }

    pub(crate) fn stamp(&self) -> RxStamp {
        self.stamp.clone()
    }

    pub(crate) fn get_ref(&self) -> &TcpStream {
        &self.inner
    }

    pub(crate) fn into_inner(self) -> TcpStream {
        let this = std::mem::ManuallyDrop::new(self);
        this.stamp.0.fd.set(-1);
        // SAFETY: `this` is never used or dropped again; each field is moved out once.
        let (inner, stamp) = unsafe { (std::ptr::read(&this.inner), std::ptr::read(&this.stamp)) };
        drop(stamp);
        inner
    }

    /// One non-blocking `recvmsg` into `buf`; notes the stamp.
    fn recv(&self, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
        let unfilled = buf.initialize_unfilled();
        let mut iov = libc::iovec { iov_base: unfilled.as_mut_ptr().cast(), iov_len: unfilled.len() };
        let mut control = [0u64; CONTROL / 8];
        // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = control.as_mut_ptr().cast();
        h.msg_controllen = CONTROL as _;
        // SAFETY: the kernel writes at most iov_len bytes into the buffer and msg_controllen
        // into the control buffer, both ours for the call.
        let n = unsafe { libc::recvmsg(self.inner.as_raw_fd(), &mut h, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n > 0 {
            self.stamp.0.last.store(of(&h), Relaxed);
        }
        buf.advance(n);
        Ok(n)
    }

    fn poll_recv(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.inner.poll_read_ready(cx))?;
            // A read that did not fill the buffer emptied the socket: its readiness is cleared
            // now (as tokio's own reads do), not by one more read that would block.
            let drained = Cell::new(false);
            let r = self.inner.try_io(Interest::READABLE, || {
                let want = buf.remaining();
                let n = self.recv(buf)?;
                if n > 0 && n < want {
                    drained.set(true);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            match r {
                Ok(_) => return Poll::Ready(Ok(())),
                Err(_) if drained.get() => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_send(&self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.inner.poll_write_ready(cx))?;
            match self.inner.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => {
                    if let Ok(n) = r {
                        self.stamp.wrote(n);
                    }
                    return Poll::Ready(r);
                }
            }
        }
    }
}

impl Drop for StampedTcp {
    fn drop(&mut self) {
        // The descriptor may be another socket's from now on.
        self.stamp.0.fd.set(-1);
    }
}

/// The out-of-order segments a TCP socket has received (`tcpi_rcv_ooopack`).
fn rcv_ooopack(fd: RawFd) -> Option<u32> {
    // SAFETY: getsockopt writes at most `len` bytes into the tcp_info we own.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len)
    };
    // Kernels before 5.4 do not fill the field in: no answer, no trust.
    let end = std::mem::offset_of!(libc::tcp_info, tcpi_rcv_ooopack) + 4;
    (r == 0 && len as usize >= end).then_some(info.tcpi_rcv_ooopack)
}

/// SIOCGSTAMPNS (linux/sockios.h, 64-bit): the stamp of the last datagram a socket received.
const SIOCGSTAMPNS: libc::c_ulong = 0x8907;

/// The CLOCK_REALTIME stamp of the last datagram `fd` received (0 when there is none). The
/// first call also asks the kernel to keep it.
fn last_datagram(fd: RawFd) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: the ioctl writes one timespec into the one we own.
    let r = unsafe { libc::ioctl(fd, SIOCGSTAMPNS as _, &mut ts as *mut libc::timespec) };
    if r < 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A QUIC endpoint's UDP socket (quinn's own, wrapped) that notes the receive time of the
/// newest datagram after each batch quinn reads (see the module's text), and with transmit
/// stamps on counts the datagrams it sends ([`DgramTx`]).
#[derive(Debug)]
pub(crate) struct StampedUdp {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    fd: RawFd,
    last: Arc<AtomicU64>,
    tx: Option<Arc<DgramTx>>,
}

/// SO_TIMESTAMPING's flags on a QUIC endpoint's socket: transmit stamps with their datagram's
/// number, without the packet, and not reported (no SOF_TIMESTAMPING_SOFTWARE) but while the
/// error queue is read ([`DgramTx::read`]). Reported, they would also come with every datagram
/// received, in a control message that quinn's receive buffer for its own (ECN, GRO segment
/// size, destination address) has no room for, and the kernel would no longer note the last
/// datagram's receive time for SIOCGSTAMPNS, which the receive times come from.
const DGRAM_TX_FLAGS: libc::c_uint =
    libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_OPT_ID | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// The transmit stamps of a QUIC endpoint's socket, shared by the socket (quinn's endpoint
/// driver sends through it) and the lane's queries (which read the stamps). The kernel numbers
/// the datagrams from 0 (OPT_ID), one number per `sendmsg` (a GSO train is one).
#[derive(Debug)]
pub(crate) struct DgramTx {
    fd: RawFd,
    /// Datagrams (sends) that left so far: the next one's number.
    sent: AtomicU64,
    /// `sent` when the error queue was last read.
    read_at: AtomicU64,
}

/// Datagrams sent without their stamps read (no query waiting, or no answer coming) after
/// which the socket reads and drops the stamps itself: unread, they take the room of the
/// socket's receive buffer, where answers would then be dropped.
const DGRAM_UNREAD_MAX: u64 = 256;

impl DgramTx {
    /// Datagrams sent since the error queue was last read.
    fn unread(&self) -> u64 {
        self.sent.load(Relaxed).saturating_sub(self.read_at.load(Relaxed))
    }

    /// Reads the stamps waiting, each handed to `each` (datagram number, CLOCK_REALTIME ns),
    /// with their report turned on for the read. One thread drives the socket and its queries.
    fn read(&self, each: impl FnMut(u32, u64)) -> usize {
        self.read_at.store(self.sent.load(Relaxed), Relaxed);
        if set_timestamping(self.fd, DGRAM_TX_FLAGS | libc::SOF_TIMESTAMPING_SOFTWARE).is_err() {
            return 0;
        }
        let n = read_tx(self.fd, each);
        let _ = set_timestamping(self.fd, DGRAM_TX_FLAGS);
        n
    }
}

impl StampedUdp {
    /// Wraps `socket` for quinn's `runtime`; the stamp is for the lane to read. `tx`: the
    /// datagrams sent are stamped too, when the kernel allows it.
    pub(crate) fn wrap(
        socket: std::net::UdpSocket,
        runtime: &Arc<dyn quinn::Runtime>,
        tx: bool,
    ) -> io::Result<(Arc<dyn quinn::AsyncUdpSocket>, RxStamp)> {
        let fd = socket.as_raw_fd();
        // Before anything is sent: the kernel numbers the datagrams from here.
        let tx = (tx && set_timestamping(fd, DGRAM_TX_FLAGS).is_ok())
            .then(|| Arc::new(DgramTx { fd, sent: AtomicU64::new(0), read_at: AtomicU64::new(0) }));
        last_datagram(fd);
        let last = Arc::new(AtomicU64::new(0));
        let inner = runtime.wrap_udp_socket(socket)?;
        // quinn sizes each endpoint's receive buffer by the socket's GRO segments (64 where
        // the kernel has UDP GRO) times its batch (32) times 1,472 bytes: 3 MB per endpoint,
        // zeroed, and a client has an endpoint per connection (10,000 DoQ connections: 30 GB
        // touched, the generator's thread clearing pages). A DNS client's answers are small:
        // GRO off, one segment per datagram, 47 KB per endpoint.
        // Best effort: a kernel without UDP GRO has nothing to turn off.
        let _ = sockopt::set_int(fd, libc::SOL_UDP, libc::UDP_GRO, 0);
        let mut stamp = RxStamp::new(-1, last.clone(), false, tx.is_some());
        if let Some(state) = Rc::get_mut(&mut stamp.0).and_then(|r| r.tx.as_mut()) {
            state.dgram = tx.clone();
        }
        Ok((Arc::new(StampedUdp { inner, fd, last, tx }), stamp))
    }
}

impl quinn::AsyncUdpSocket for StampedUdp {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit) -> io::Result<()> {
        let r = self.inner.try_send(transmit);
        if let (Some(tx), Ok(())) = (&self.tx, &r) {
            // quinn-udp reports only WouldBlock (the kernel numbers no datagram then); the
            // errors it drops (EMSGSIZE of a path MTU probe) would move the numbering by one.
            tx.sent.fetch_add(1, Relaxed);
            if tx.unread() >= DGRAM_UNREAD_MAX {
                tx.read(|_, _| {});
            }
        }
        r
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let r = self.inner.poll_recv(cx, bufs, meta);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.last.store(last_datagram(self.fd), Relaxed);
        }
        r
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        // GRO is off on this socket (`wrap`).
        1
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// The reading and writing of a `StampedTcp` and of a `&StampedTcp` (one connection's two
/// halves at once).
macro_rules! stamped_io {
    ($t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                self.poll_recv(cx, buf)
            }
        }

        impl AsyncWrite for $t {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                self.poll_send(cx, &[io::IoSlice::new(buf)])
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                self.poll_send(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(socket2::SockRef::from(&self.inner).shutdown(std::net::Shutdown::Write))
            }
        }
    };
}

stamped_io!(StampedTcp);
stamped_io!(&StampedTcp);

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};
    use tokio::io::AsyncReadExt;

    /// Two UDP sockets on loopback: `b` connected to `a`, so that `b.send` reaches `a`.
    fn sender_and_receiver() -> (std::net::UdpSocket, std::net::UdpSocket) {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        (a, b)
    }

    #[test]
    fn old_stamps_are_kept_only_without_reordering() {
        let asked = Cell::new(0);
        let ask = |r: Option<(u32, u32)>| {
            let asked = &asked;
            move || {
                asked.set(asked.get() + 1);
                r
            }
        };
        // A fresh stamp: kept, TCP_INFO not asked.
        assert!(trusted(150_000, ask(None)));
        assert_eq!(asked.get(), 0);
        // An old one: kept when nothing came out of order since the last check...
        assert!(trusted(4_000_000, ask(Some((3, 3)))));
        // ...not when something did, nor when the kernel cannot say.
        assert!(!trusted(4_000_000, ask(Some((3, 4)))));
        assert!(!trusted(4_000_000, ask(None)));
        assert_eq!(asked.get(), 3);
    }

    /// Only the ends of a send are stamped: the queries between them take times between
    /// their stamps, by place; where the stamp before them is lost, none.
    #[test]
    fn queries_between_two_stamps_take_a_time_between_them() {
        let mut p = TxPending::default();
        // One send of five: stamped 0 and 1, three between.
        p.push(0, 10);
        for (i, t) in [11, 12, 13].into_iter().enumerate() {
            p.push_between(1, t, (i + 1) as f32 / 4.0);
        }
        p.push(1, 14);
        // The next send of one, and a send of three whose first stamp is lost.
        p.push(2, 20);
        p.push(3, 30);
        p.push_between(4, 31, 0.5);
        p.push(4, 32);
        let mut got = Vec::new();
        p.stamp_at(0, 1_000, |t, at, between| got.push((t, at, between)));
        p.stamp_at(1, 1_400, |t, at, between| got.push((t, at, between)));
        p.stamp_at(2, 9_000, |t, at, between| got.push((t, at, between)));
        p.stamp_at(4, 9_500, |t, at, between| got.push((t, at, between)));
        assert_eq!(
            got,
            [
                (10, 1_000, false),
                (11, 1_100, true),
                (12, 1_200, true),
                (13, 1_300, true),
                (14, 1_400, false),
                (20, 9_000, false),
                (32, 9_500, false)
            ]
        );
        assert!(p.is_empty());
    }

    /// A socket with sparse stamps (`enable_sparse_tx`) stamps only the datagrams that ask,
    /// numbered from 0 among themselves: of each `sendmmsg`, the first, the second, every
    /// 8th after it and the last.
    #[test]
    fn a_send_asks_for_the_stamps_of_its_ends() {
        let (a, b) = sender_and_receiver();
        enable_sparse_tx(b.as_raw_fd()).unwrap();
        let mut batch = crate::udp::mmsg::Batch::new(16, 64);
        let mut got = Vec::new();
        for (k, ends) in [(5, true), (3, false), (1, true), (12, true)] {
            batch.count = 0;
            for _ in 0..k {
                batch.next_buf().extend_from_slice(b"query");
                batch.commit();
            }
            assert_eq!(batch.send_asking(b.as_raw_fd(), 0, ends).unwrap(), k);
            // The kernel turns stamping on a moment after the first socket asks.
            for _ in 0..200 {
                let before = got.len();
                read_tx(b.as_raw_fd(), |id, _| got.push(id));
                if got.len() > before || !ends {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Five: 0, 1 and 4 asked; three unasked: none; one: itself; twelve: 0, 1, 9 and 11.
        assert_eq!(got, [0, 1, 2, 3, 4, 5, 6, 7], "3 + 0 + 1 + 4 stamps");
        let mut buf = [0u8; 16];
        for _ in 0..21 {
            assert_eq!(a.recv(&mut buf).unwrap(), 5, "every datagram left");
        }
    }

    #[test]
    fn pending_queries_take_their_stamps_by_id() {
        let mut got = Vec::new();
        // UDP: one stamp, one datagram; the ones before it lost theirs.
        let mut p = TxPending::default();
        for (id, t) in [(0, 10), (1, 11), (2, 12), (3, 13)] {
            p.push(id, t);
        }
        p.stamp(0, false, |t| got.push(t));
        p.stamp(2, false, |t| got.push(t));
        assert_eq!(got, [10, 12]);
        assert_eq!(p.len(), 1);
        // A stamp of something no query waits for (a handshake's bytes, say) takes nothing.
        p.stamp(1, false, |t| got.push(t));
        assert_eq!(got, [10, 12]);
        p.stamp(3, false, |t| got.push(t));
        assert_eq!(got, [10, 12, 13]);
        assert!(p.is_empty());
        // Forgotten queries (the lane went idle): their late stamps match the next ones not.
        let mut p = TxPending::default();
        p.push(0, 20);
        p.next = 1;
        p.forget();
        p.push(1, 21);
        p.next = 2;
        p.stamp(0, false, |t| got.push(t));
        assert_eq!(got, [10, 12, 13]);
        p.stamp(1, false, |t| got.push(t));
        assert_eq!(got, [10, 12, 13, 21]);
        // TCP: a write's last byte stamps every query written up to it.
        got.clear();
        let mut p = TxPending::default();
        for (id, t) in [(99, 1), (99, 2), (140, 3), (200, 4)] {
            p.push(id, t);
        }
        p.stamp(50, true, |t| got.push(t));
        assert!(got.is_empty());
        p.stamp(160, true, |t| got.push(t));
        assert_eq!(got, [1, 2, 3]);
        // The kernel's IDs are 32 bits: past 2^32 bytes they wrap, and still match.
        let mut p = TxPending::default();
        p.push((1 << 32) + 5, 7);
        p.next = (1 << 32) + 6;
        p.stamp(5, true, |t| got.push(t));
        assert_eq!(got.last(), Some(&7));
        let mut p = TxPending::default();
        p.push((1 << 32) - 2, 8);
        p.push((1 << 32) + 1, 9);
        p.stamp(u32::MAX - 1, false, |t| got.push(t));
        p.stamp(1, false, |t| got.push(t));
        assert_eq!(&got[got.len() - 2..], [8, 9]);
    }

    /// Transmit stamps come back on the error queue, read in a batch, each with its
    /// datagram's number (UDP) or its write's last byte (TCP) and a time between the send and
    /// the read.
    #[test]
    fn the_error_queue_gives_each_send_its_stamp() {
        let (a, b) = sender_and_receiver();
        enable_tx(b.as_raw_fd()).unwrap();
        let before = realtime_ns();
        for _ in 0..3 {
            b.send(b"query").unwrap();
        }
        let mut got = Vec::new();
        // The kernel turns stamping on a moment after the first socket asks (see below).
        for _ in 0..200 {
            read_tx(b.as_raw_fd(), |id, at| got.push((id, at)));
            if got.len() >= 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let after = realtime_ns();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0, 1, 2], "{got:?}");
        assert!(got.iter().all(|&(_, at)| at >= before && at <= after), "{before} {got:?} {after}");
        // The datagrams themselves arrived, and the error queue is empty now.
        let mut buf = [0u8; 16];
        assert_eq!(a.recv(&mut buf).unwrap(), 5);
        assert_eq!(read_tx(b.as_raw_fd(), |_, _| panic!("read twice")), 0);
        // Numbering goes on.
        b.send(b"again").unwrap();
        let mut ids = Vec::new();
        read_tx(b.as_raw_fd(), |id, _| ids.push(id));
        assert_eq!(ids, [3]);

        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_server, _) = l.accept().unwrap();
        enable_tx(c.as_raw_fd()).unwrap();
        c.write_all(&[0; 10]).unwrap();
        c.write_all(&[0; 5]).unwrap();
        let mut ids = Vec::new();
        for _ in 0..200 {
            read_tx(c.as_raw_fd(), |id, _| ids.push(id));
            if ids.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(ids, [9, 14], "the offset of each write's last byte");
    }

    /// HTTP/2 frames written in pieces: each request ends where its stream's END_STREAM
    /// frame does (DATA after a POST's HEADERS; a GET's HEADERS, or the CONTINUATION that ends
    /// their block); other streams' frames and unknown streams end nothing.
    #[test]
    fn http2_requests_end_with_their_end_stream_frame() {
        fn frame(kind: u8, flags: u8, id: u32, len: usize) -> Vec<u8> {
            let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
            f.extend_from_slice(&id.to_be_bytes());
            f.extend(std::iter::repeat_n(0xaa, len));
            f
        }
        let mut h = HttpTrack { h2: true, ..Default::default() };
        h.streams.extend([(1, 10), (3, 11), (5, 12)]);
        let mut w = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        w.extend(frame(0x4, 0, 0, 6)); // SETTINGS
        w.extend(frame(0x1, 0x4, 1, 30)); // HEADERS of a POST
        w.extend(frame(0x1, 0x5, 3, 20)); // HEADERS of a GET, ending its stream
                                          // Written a byte at a time: nothing ends before its frame's last byte.
        for b in &w {
            h.parse(std::slice::from_ref(b));
        }
        assert_eq!(h.whole, [11]);
        let data = frame(0x0, 0x1, 1, 40); // the POST's DATA, ending it
        h.parse(&data[..data.len() - 1]);
        assert_eq!(h.whole, [11]);
        h.parse(&data[data.len() - 1..]);
        assert_eq!(h.whole, [11, 10]);
        // A header block continued: the request ends with the CONTINUATION that ends it.
        let mut w = frame(0x1, 0x1, 5, 10);
        w.extend(frame(0x8, 0, 0, 4)); // WINDOW_UPDATE between (on stream 0)
        h.parse(&w);
        assert_eq!(h.whole, [11, 10]);
        h.parse(&frame(0x9, 0x4, 5, 3));
        assert_eq!(h.whole, [11, 10, 12]);
        // A stream no query waits on ends nothing.
        h.parse(&frame(0x0, 0x1, 7, 0));
        assert_eq!(h.whole, [11, 10, 12]);
    }

    /// A QUIC endpoint's socket: its datagrams' stamps are read with their numbers, while the
    /// kernel goes on noting the last datagram's receive time (SIOCGSTAMPNS), and received
    /// datagrams carry no stamp of their own (no room for it in quinn's control buffer).
    #[test]
    fn a_quic_socket_reads_its_datagram_stamps_and_keeps_its_receive_times() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set_timestamping(a.as_raw_fd(), DGRAM_TX_FLAGS).unwrap();
        let tx = DgramTx { fd: a.as_raw_fd(), sent: AtomicU64::new(0), read_at: AtomicU64::new(0) };
        last_datagram(a.as_raw_fd());
        let mut ids = Vec::new();
        for round in 0..200 {
            a.send_to(b"query", b.local_addr().unwrap()).unwrap();
            tx.sent.fetch_add(1, Relaxed);
            b.send_to(b"answer", a.local_addr().unwrap()).unwrap();
            let mut buf = [0u8; 16];
            assert_eq!(a.recv(&mut buf).unwrap(), 6);
            tx.read(|id, _| ids.push(id));
            // Stamping comes on a moment after the first socket asks (see the TCP test).
            if !ids.is_empty() && last_datagram(a.as_raw_fd()) != 0 {
                assert_eq!(*ids.last().unwrap(), round, "{ids:?}");
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!ids.is_empty(), "no transmit stamps");
        assert_eq!(tx.unread(), 0);
        let before = realtime_ns();
        b.send_to(b"answer", a.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = [0u8; 16];
        let mut control = [0u64; CONTROL / 8];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // SAFETY: as in `StampedTcp::recv`.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = control.as_mut_ptr().cast();
        h.msg_controllen = CONTROL as _;
        assert_eq!(unsafe { libc::recvmsg(a.as_raw_fd(), &mut h, 0) }, 6);
        assert_eq!(h.msg_controllen, 0, "a received datagram carries no stamp");
        let at = last_datagram(a.as_raw_fd());
        assert!(at >= before && at + 10_000_000 <= realtime_ns(), "{before} {at}");
        // Numbering goes on after the reads.
        a.send_to(b"again", b.local_addr().unwrap()).unwrap();
        let n = ids.len() as u32;
        let mut more = Vec::new();
        tx.read(|id, _| more.push(id));
        assert_eq!(more, [*ids.last().unwrap() + 1], "{n}");
    }

    #[test]
    fn a_datagram_is_timed_when_it_came() {
        let origin = Instant::now();
        let now = || origin.elapsed().as_nanos() as u64 + 1;
        let (a, b) = sender_and_receiver();
        last_datagram(a.as_raw_fd());
        let rx = RxStamp::new(-1, Arc::default(), false, false);
        let mut buf = [0u8; 16];
        // Stamping comes on a moment after the first socket asks (see the TCP test); until
        // then the kernel answers with the time of asking: wait until a datagram read 5 ms
        // after it came is stamped before the read.
        for _ in 0..200 {
            b.send(b"w").unwrap();
            std::thread::sleep(Duration::from_millis(5));
            a.recv(&mut buf).unwrap();
            rx.0.last.store(last_datagram(a.as_raw_fd()), Relaxed);
            let t = now();
            if t - rx.arrival_by(now) >= 4_000_000 {
                break;
            }
        }
        let before = now();
        b.send(b"answer").unwrap();
        let sent = now();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(a.recv(&mut buf).unwrap(), 6);
        rx.0.last.store(last_datagram(a.as_raw_fd()), Relaxed);
        let read = now();
        let at = rx.arrival_by(now);
        assert!(at + 1_000_000 >= before && at <= sent + 1_000_000, "{before} {at} {sent}");
        assert!(read - at >= 49_000_000, "timed at the read: {at} vs {read}");
    }

    #[test]
    fn a_read_is_timed_when_its_bytes_arrived_not_when_it_was_made() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let origin = Instant::now();
            let now = || origin.elapsed().as_nanos() as u64 + 1;
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (mut server, _) = l.accept().unwrap();
            let mut s = StampedTcp::new(c, false);
            let rx = s.stamp();
            let t0 = now();
            assert!(rx.arrival_by(now) >= t0, "no read yet: the time is now");
            // The kernel turns stamping on a moment after the first socket asks (a deferred
            // static key): until then segments come unstamped.
            let mut buf = [0u8; 16];
            for _ in 0..200 {
                server.write_all(b"w").unwrap();
                assert_eq!(s.read(&mut buf).await.unwrap(), 1);
                if rx.0.last.load(Relaxed) != 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_ne!(rx.0.last.load(Relaxed), 0, "the kernel stamps TCP segments");
            let before = now();
            server.write_all(b"answer").unwrap();
            let written = now();
            // The generator is busy elsewhere for 50 ms before it reads.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(s.read(&mut buf).await.unwrap(), 6);
            let read = now();
            let at = rx.arrival_by(now);
            // Within the clock conversion's error (a few µs; 1 ms allowed) of the write.
            assert!(at + 1_000_000 >= before && at <= written + 1_000_000, "{before} {at} {written}");
            assert!(read - at >= 49_000_000, "timed at the read: {at} vs {read}");
            // Writes go through, and the socket is still the stream's.
            tokio::io::AsyncWriteExt::write_all(&mut s, b"q").await.unwrap();
            let mut one = [0u8; 1];
            std::io::Read::read_exact(&mut server, &mut one).unwrap();
            assert_eq!(&one, b"q");
            assert!(s.into_inner().peer_addr().is_ok());
        });
    }
}
