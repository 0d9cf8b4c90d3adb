//! DNS over UDP: one thread per socket, each socket bound with SO_REUSEPORT to the same
//! address; batches of datagrams read with `recvmmsg` and answered with `sendmmsg`.
//!
//! Answers of a batch that go to the same address and have the same size leave as one
//! datagram train (UDP generic segmentation offload, `UDP_SEGMENT`): one trip through the
//! kernel's send path (route, headers, queueing) for all of them, segmented just before the
//! device. A generator sending many queries from one socket gets its answers this way; where
//! the kernel refuses segmentation, the server falls back to one message per answer.
//!
//! The loop never blocks on a delayed answer: those wait in a per-thread timer heap and
//! leave when due. Buffers are allocated once per thread; a query costs no allocation
//! (a delayed one reuses buffers from a small pool).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::mem;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::answer::{Answerer, Transport, Verdict};
use crate::delayed::Delayed;
use crate::server::StopSignal;
use crate::stats::{add, Counters};

/// Datagrams per `recvmmsg`/`sendmmsg` call.
const BATCH: usize = 128;
/// Receive buffer per datagram: queries are small; a larger one arrives cut (MSG_TRUNC) and
/// is answered FORMERR or as far as it parses.
const RECV_BUF: usize = 4096;
/// Batches read in a row before delayed answers and the stop flag are looked at again.
const BURST: usize = 16;

/// A delayed answer: where it goes and its bytes.
struct Held {
    addr: libc::sockaddr_storage,
    addr_len: libc::socklen_t,
    buf: Vec<u8>,
}

/// The per-thread buffers; `mmsghdr`s point into them, so they live in a `Box` and the
/// pointers are refreshed before each call.
struct Buffers {
    recv: Vec<u8>,
    addrs: [libc::sockaddr_storage; BATCH],
    iov: [libc::iovec; BATCH],
    hdrs: [libc::mmsghdr; BATCH],
    out: Vec<Vec<u8>>,
    send_iov: [libc::iovec; BATCH],
    send_hdrs: [libc::mmsghdr; BATCH],
    /// One `UDP_SEGMENT` control message per train (u64s for the cmsghdr's alignment).
    send_ctrl: [[u64; 4]; BATCH],
    /// Answers (indices into `out`) in the order they are sent, and where each train starts
    /// in that order.
    order: [usize; BATCH],
    train_start: [usize; BATCH],
    /// The kernel takes `UDP_SEGMENT` (cleared at its first refusal).
    gso: bool,
}

impl Buffers {
    fn new() -> Box<Buffers> {
        // SAFETY: all-zero is a valid value for these plain C structs (null pointers, zero lengths).
        let zeroed = unsafe { mem::zeroed::<[libc::mmsghdr; BATCH]>() };
        Box::new(Buffers {
            recv: vec![0; BATCH * RECV_BUF],
            // SAFETY: as above.
            addrs: unsafe { mem::zeroed() },
            // SAFETY: as above.
            iov: unsafe { mem::zeroed() },
            hdrs: zeroed,
            out: (0..BATCH).map(|_| Vec::with_capacity(1232)).collect(),
            // SAFETY: as above.
            send_iov: unsafe { mem::zeroed() },
            send_hdrs: zeroed,
            send_ctrl: [[0; 4]; BATCH],
            order: [0; BATCH],
            train_start: [0; BATCH],
            gso: true,
        })
    }

    fn prepare_recv(&mut self) {
        for i in 0..BATCH {
            self.iov[i] = libc::iovec { iov_base: self.recv[i * RECV_BUF..].as_mut_ptr().cast(), iov_len: RECV_BUF };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
    }
}

/// What a UDP thread is told besides its socket.
pub(crate) struct Limits {
    /// Send same-size answers to one address as a segmented train.
    pub gso: bool,
    /// `--max-qps-per-client`.
    pub client_rate: Option<Arc<crate::policy::ClientRate>>,
    /// `--udp-error-rate`: error answers a second from this thread (None: all).
    pub error_rate: Option<u32>,
}

/// At most `per_second` error answers (FORMERR, NOTIMP) in each second of this thread's
/// clock, as unbound's worker counts them: a flood of junk is read and looked at, and from
/// then on costs no send (and forged sources get no reflection).
struct ErrorBudget {
    per_second: u32,
    since: Instant,
    left: u32,
}

impl ErrorBudget {
    fn new(per_second: u32, now: Instant) -> ErrorBudget {
        ErrorBudget { per_second, since: now, left: per_second }
    }

    /// Whether one more error answer may leave at `now`.
    fn take(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.since) >= Duration::from_secs(1) {
            self.since = now;
            self.left = self.per_second;
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }
}

/// Serves one socket until `stop` is raised.
pub(crate) fn serve(
    sock: UdpSocket,
    answerer: Arc<Answerer>,
    counters: Arc<Counters>,
    stop: Arc<StopSignal>,
    limits: Limits,
) {
    let Limits { gso, client_rate, error_rate } = limits;
    let fd = sock.as_raw_fd();
    let mut b = Buffers::new();
    b.gso = gso;
    let mut errors = error_rate.map(|r| ErrorBudget::new(r, Instant::now()));
    let mut timers: BinaryHeap<Reverse<Delayed<Held>>> = BinaryHeap::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut seq = 0u64;
    // (index into out/addrs, destination) of the answers to send now
    let mut ready: [usize; BATCH] = [0; BATCH];
    loop {
        if stop.raised() {
            return;
        }
        let mut got_any = false;
        for _ in 0..BURST {
            b.prepare_recv();
            // SAFETY: hdrs point into `b`, which outlives the call; BATCH entries are valid.
            let n = unsafe {
                libc::recvmmsg(fd, b.hdrs.as_mut_ptr(), BATCH as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut())
            };
            if n <= 0 {
                break;
            }
            got_any = true;
            let n = n as usize;
            let now = Instant::now();
            let (mut dropped, mut delayed, mut nready, mut limited, mut withheld) = (0u64, 0u64, 0usize, 0u64, 0u64);
            answerer.prefetch((0..n).map(|i| {
                let len = (b.hdrs[i].msg_len as usize).min(RECV_BUF);
                &b.recv[i * RECV_BUF..i * RECV_BUF + len]
            }));
            for i in 0..n {
                if let Some(rate) = &client_rate {
                    if !rate.admit(peer_ip(&b.addrs[i])) {
                        limited += 1;
                        continue;
                    }
                }
                let len = (b.hdrs[i].msg_len as usize).min(RECV_BUF);
                let query = &b.recv[i * RECV_BUF..i * RECV_BUF + len];
                let out = &mut b.out[i];
                match answerer.answer(query, Transport::Udp, out) {
                    Verdict::Drop | Verdict::Invalid => dropped += 1,
                    Verdict::Error if errors.as_mut().is_some_and(|e| !e.take(now)) => withheld += 1,
                    Verdict::Reply { delay: None } | Verdict::Error => {
                        ready[nready] = i;
                        nready += 1;
                    }
                    Verdict::Reply { delay: Some(d) } => {
                        delayed += 1;
                        let mut buf = pool.pop().unwrap_or_default();
                        buf.clear();
                        buf.extend_from_slice(out);
                        seq += 1;
                        let item = Held { addr: b.addrs[i], addr_len: b.hdrs[i].msg_hdr.msg_namelen, buf };
                        timers.push(Reverse(Delayed { due: now + d, seq, item }));
                    }
                }
            }
            add(&counters.queries, n as u64);
            add(&counters.dropped, dropped);
            add(&counters.delayed, delayed);
            add(&counters.rate_limited, limited);
            add(&counters.errors_withheld, withheld);
            send_ready(fd, &mut b, &ready[..nready], &counters);
            if n < BATCH {
                break;
            }
        }
        fire_due(fd, &mut timers, &mut pool, &counters);
        if !got_any {
            wait(fd, &stop, timers.peek().map(|t| t.0.due));
        }
    }
}

/// The IP address of a datagram's sender (unspecified for a family other than IPv4 or IPv6).
fn peer_ip(a: &libc::sockaddr_storage) -> std::net::IpAddr {
    match a.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in into this storage (family AF_INET).
            let v4 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            std::net::IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes())
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 into this storage (family AF_INET6).
            let v6 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            std::net::IpAddr::from(v6.sin6_addr.s6_addr)
        }
        _ => std::net::IpAddr::from([0u8; 4]),
    }
}

/// Most bytes in one segmented train (a UDP datagram's limit, less headers).
const TRAIN_BYTES: usize = 65_000;
/// Most answers in one train (the kernel's UDP_MAX_SEGMENTS is 64 before Linux 6.9).
const TRAIN_SEGMENTS: usize = 64;

/// Sends the answers at `idx` with `sendmmsg`, retrying the rest after a partial send: one
/// message per train of same-size answers to one address (see the module docs).
fn send_ready(fd: i32, b: &mut Buffers, idx: &[usize], counters: &Counters) {
    let trains = plan_trains(b, idx);
    let mut done = 0;
    let mut waited = false;
    while done < trains {
        // SAFETY: entries done..trains were filled by plan_trains and point into live buffers.
        let r = unsafe { libc::sendmmsg(fd, b.send_hdrs[done..].as_mut_ptr(), (trains - done) as libc::c_uint, 0) };
        if r > 0 {
            for t in done..done + r as usize {
                for &i in &b.order[b.train_start[t]..train_end(b, t, trains, idx.len())] {
                    counters.sent(&b.out[i]);
                }
            }
            done += r as usize;
            continue;
        }
        let err = io::Error::last_os_error();
        let segmented = b.send_hdrs[done].msg_hdr.msg_controllen > 0;
        match err.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) if !waited => {
                // Socket buffer full: wait a little for room once, then give up on this batch.
                waited = true;
                let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut p, 1, 10) };
            }
            Some(libc::EAGAIN) => return,
            Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP) if segmented && b.gso => {
                // No segmentation offload here: send what is left one answer per message.
                b.gso = false;
                let rest: Vec<usize> = b.order[b.train_start[done]..idx.len()].to_vec();
                return send_ready(fd, b, &rest, counters);
            }
            // This train cannot be sent (e.g. unreachable destination): skip it.
            _ => done += 1,
        }
    }
}

/// Where train `t` of `trains` ends in `order` (`n` answers in all).
fn train_end(b: &Buffers, t: usize, trains: usize, n: usize) -> usize {
    if t + 1 < trains {
        b.train_start[t + 1]
    } else {
        n
    }
}

/// Orders the answers at `idx` into trains (same address, same size, at most
/// [`TRAIN_BYTES`]; single answers when segmentation is off) and fills one `mmsghdr` per
/// train. Returns the number of trains.
fn plan_trains(b: &mut Buffers, idx: &[usize]) -> usize {
    let n = idx.len();
    b.order[..n].copy_from_slice(idx);
    if b.gso {
        let (addrs, hdrs, out) = (&b.addrs, &b.hdrs, &b.out);
        let key = |i: usize| {
            let len = hdrs[i].msg_hdr.msg_namelen as usize;
            // SAFETY: the first `len` bytes of a sockaddr_storage the kernel filled.
            let bytes =
                unsafe { std::slice::from_raw_parts((&addrs[i] as *const libc::sockaddr_storage).cast::<u8>(), len) };
            (bytes, out[i].len())
        };
        b.order[..n].sort_by(|&x, &y| key(x).cmp(&key(y)));
    }
    let mut trains = 0;
    let mut j = 0;
    while j < n {
        let first = b.order[j];
        let size = b.out[first].len();
        let mut k = 1;
        while b.gso && j + k < n && k < TRAIN_SEGMENTS && (k + 1) * size <= TRAIN_BYTES && size > 0 {
            let next = b.order[j + k];
            if b.out[next].len() != size || !same_addr(b, first, next) {
                break;
            }
            k += 1;
        }
        for (m, &i) in b.order[j..j + k].iter().enumerate() {
            b.send_iov[j + m] = libc::iovec { iov_base: b.out[i].as_mut_ptr().cast(), iov_len: b.out[i].len() };
        }
        b.train_start[trains] = j;
        let ctrl = b.send_ctrl[trains].as_mut_ptr().cast::<libc::c_void>();
        let h = &mut b.send_hdrs[trains].msg_hdr;
        h.msg_name = (&mut b.addrs[first] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = b.hdrs[first].msg_hdr.msg_namelen;
        h.msg_iov = &mut b.send_iov[j];
        h.msg_iovlen = k as _;
        h.msg_flags = 0;
        if k > 1 {
            // SAFETY: CMSG_SPACE(2) = 16 bytes fit in the 32 of send_ctrl[trains]; the macros
            // compute offsets inside that buffer only.
            unsafe {
                h.msg_control = ctrl;
                h.msg_controllen = libc::CMSG_SPACE(2) as _;
                let c = libc::CMSG_FIRSTHDR(h);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size as u16);
            }
        } else {
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
        }
        trains += 1;
        j += k;
    }
    trains
}

/// Whether answers `a` and `b` go to the same address.
fn same_addr(b: &Buffers, x: usize, y: usize) -> bool {
    let (lx, ly) = (b.hdrs[x].msg_hdr.msg_namelen, b.hdrs[y].msg_hdr.msg_namelen);
    // SAFETY: the first `lx` bytes of sockaddr_storages the kernel filled.
    lx == ly
        && unsafe {
            libc::memcmp(
                (&b.addrs[x] as *const libc::sockaddr_storage).cast(),
                (&b.addrs[y] as *const libc::sockaddr_storage).cast(),
                lx as usize,
            ) == 0
        }
}

fn fire_due(fd: i32, timers: &mut BinaryHeap<Reverse<Delayed<Held>>>, pool: &mut Vec<Vec<u8>>, counters: &Counters) {
    if timers.is_empty() {
        return;
    }
    let now = Instant::now();
    while timers.peek().is_some_and(|t| t.0.due <= now) {
        let Some(Reverse(Delayed { item: d, .. })) = timers.pop() else { break };
        // SAFETY: buf and addr are valid for the given lengths.
        let r = unsafe {
            libc::sendto(
                fd,
                d.buf.as_ptr().cast(),
                d.buf.len(),
                0,
                (&d.addr as *const libc::sockaddr_storage).cast(),
                d.addr_len,
            )
        };
        if r >= 0 {
            counters.sent(&d.buf);
        }
        if pool.len() < 1024 {
            pool.push(d.buf);
        }
    }
}

/// Waits until the socket is readable, the stop signal is raised or `until` is reached.
fn wait(fd: i32, stop: &StopSignal, until: Option<Instant>) {
    let mut fds = [
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: stop.fd(), events: libc::POLLIN, revents: 0 },
    ];
    let ts;
    let tsp = match until {
        Some(t) => {
            let d = t.saturating_duration_since(Instant::now());
            ts = libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long };
            &ts as *const libc::timespec
        }
        None => std::ptr::null(),
    };
    // SAFETY: two valid pollfds; tsp is null or points to `ts`, alive for the call.
    unsafe { libc::ppoll(fds.as_mut_ptr(), 2, tsp, std::ptr::null()) };
}
