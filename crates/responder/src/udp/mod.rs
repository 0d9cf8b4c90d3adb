//! DNS over UDP: one thread per socket, each socket bound with SO_REUSEPORT to the same
//! address; batches of datagrams read with `recvmmsg` and answered with `sendmmsg`.
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
use std::time::Instant;

use crate::answer::{Answerer, Transport, Verdict};
use crate::server::StopSignal;
use crate::stats::{add, Counters};

/// Datagrams per `recvmmsg`/`sendmmsg` call.
const BATCH: usize = 64;
/// Receive buffer per datagram: queries are small; a larger one arrives cut (MSG_TRUNC) and
/// is answered FORMERR or as far as it parses.
const RECV_BUF: usize = 4096;
/// Batches read in a row before delayed answers and the stop flag are looked at again.
const BURST: usize = 16;

/// A response waiting for its time.
struct Delayed {
    due: Instant,
    seq: u64,
    addr: libc::sockaddr_storage,
    addr_len: libc::socklen_t,
    buf: Vec<u8>,
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

/// Serves one socket until `stop` is raised.
pub(crate) fn serve(sock: UdpSocket, answerer: Arc<Answerer>, counters: Arc<Counters>, stop: Arc<StopSignal>) {
    let fd = sock.as_raw_fd();
    let mut b = Buffers::new();
    let mut timers: BinaryHeap<Reverse<Delayed>> = BinaryHeap::new();
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
            let (mut dropped, mut delayed, mut nready) = (0u64, 0u64, 0usize);
            for i in 0..n {
                let len = (b.hdrs[i].msg_len as usize).min(RECV_BUF);
                let query = &b.recv[i * RECV_BUF..i * RECV_BUF + len];
                let out = &mut b.out[i];
                match answerer.answer(query, Transport::Udp, out) {
                    Verdict::Drop => dropped += 1,
                    Verdict::Reply { delay: None } => {
                        ready[nready] = i;
                        nready += 1;
                    }
                    Verdict::Reply { delay: Some(d) } => {
                        delayed += 1;
                        let mut buf = pool.pop().unwrap_or_default();
                        buf.clear();
                        buf.extend_from_slice(out);
                        seq += 1;
                        timers.push(Reverse(Delayed {
                            due: now + d,
                            seq,
                            addr: b.addrs[i],
                            addr_len: b.hdrs[i].msg_hdr.msg_namelen,
                            buf,
                        }));
                    }
                }
            }
            add(&counters.queries, n as u64);
            add(&counters.dropped, dropped);
            add(&counters.delayed, delayed);
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

/// Sends the answers at `idx` with `sendmmsg`, retrying the rest after a partial send.
fn send_ready(fd: i32, b: &mut Buffers, idx: &[usize], counters: &Counters) {
    for (j, &i) in idx.iter().enumerate() {
        b.send_iov[j] = libc::iovec { iov_base: b.out[i].as_mut_ptr().cast(), iov_len: b.out[i].len() };
        let h = &mut b.send_hdrs[j].msg_hdr;
        h.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = b.hdrs[i].msg_hdr.msg_namelen;
        h.msg_iov = &mut b.send_iov[j];
        h.msg_iovlen = 1;
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        h.msg_flags = 0;
    }
    let mut done = 0;
    let mut waited = false;
    while done < idx.len() {
        // SAFETY: entries done..idx.len() were filled above and point into live buffers.
        let r = unsafe { libc::sendmmsg(fd, b.send_hdrs[done..].as_mut_ptr(), (idx.len() - done) as libc::c_uint, 0) };
        if r > 0 {
            for &i in &idx[done..done + r as usize] {
                counters.sent(&b.out[i]);
            }
            done += r as usize;
            continue;
        }
        let err = io::Error::last_os_error();
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
            // This datagram cannot be sent (e.g. unreachable destination): skip it.
            _ => done += 1,
        }
    }
}

fn fire_due(fd: i32, timers: &mut BinaryHeap<Reverse<Delayed>>, pool: &mut Vec<Vec<u8>>, counters: &Counters) {
    if timers.is_empty() {
        return;
    }
    let now = Instant::now();
    while timers.peek().is_some_and(|t| t.0.due <= now) {
        let Some(Reverse(d)) = timers.pop() else { break };
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
