//! Batched datagram I/O on a connected socket: `sendmmsg(2)` and `recvmmsg(2)`.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;

/// Datagrams per system call.
pub const BATCH: usize = 64;

thread_local! {
    /// Batches not in use on this thread, for [`Batch::take`]: a thread's UDP lanes borrow
    /// them for each system call rather than each holding its own.
    static POOL: RefCell<Vec<Batch>> = const { RefCell::new(Vec::new()) };
}

/// Datagrams between two that ask for their stamps (after the second of a call).
pub const STAMP_STRIDE: usize = 8;

/// Whether datagram `i` of a call sending `from..=last` asks for its transmit stamp (`--tx-stamps
/// ends`): the first, the second, every [`STAMP_STRIDE`]th after it, and the last. The ones
/// between take times between their neighbours' stamps. On loopback the first datagram's
/// way to the server wakes it, and the second leaves 16 µs after the first where the others
/// leave 3.6 µs apart (64 in flight here): with the first and the last alone, the ones between
/// read 12 µs early (service time p50 +30 µs above the wire's). The stride bounds what the
/// unevenness within a call moves: against the wire, with 64 in flight, service time p50
/// +3.1 to +4.6 µs every 16th, +1.0 every 8th, +0.5 to +0.8 every 4th (`--tx-stamps each`
/// +0.5); every 8th costs a fifth of the stamps at 100,000 qps (docs/performance.md).
pub fn asks_stamp(from: usize, last: usize, i: usize) -> bool {
    i == from || i == last || (i > from && (i - from - 1).is_multiple_of(STAMP_STRIDE))
}

/// Control bytes per datagram: room for one SCM_TIMESTAMPNS message.
const CTRL: usize = 64;

/// Fixed buffers for up to `n` datagrams, reused for every batch: no allocation per query.
pub struct Batch {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Control buffers of received datagrams (kernel receive timestamps), `CTRL` bytes each.
    ctrl: Vec<u64>,
    /// Kernel receive time of each received datagram, CLOCK_REALTIME ns (0: none).
    stamps: Vec<u64>,
    /// Datagrams filled for sending.
    pub count: usize,
    /// The size each buffer was made with.
    size: usize,
}

impl Batch {
    pub fn new(n: usize, size: usize) -> Batch {
        let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| Vec::with_capacity(size)).collect();
        let iovs = bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: size }).collect();
        // SAFETY: mmsghdr is plain old data; all-zero is a valid empty header.
        let hdrs = (0..n).map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() }).collect();
        Batch { bufs, lens: vec![0; n], iovs, hdrs, ctrl: vec![0; n * CTRL / 8], stamps: vec![0; n], count: 0, size }
    }

    /// A batch of [`BATCH`] buffers of `size` bytes from this thread's pool (made when none is
    /// free); hand it back with [`Batch::give_back`]. A thread with thousands of lanes then
    /// holds a few batches, not one per lane: a lane needs one only while it sends or reads.
    pub fn take(size: usize) -> Batch {
        let pooled = POOL.with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().position(|b| b.size == size)?;
            Some(p.swap_remove(i))
        });
        pooled.unwrap_or_else(|| Batch::new(BATCH, size))
    }

    /// Returns a batch taken with [`Batch::take`] to this thread's pool.
    pub fn give_back(mut self) {
        self.count = 0;
        POOL.with(|p| p.borrow_mut().push(self));
    }

    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// The next send buffer, cleared; call [`Batch::commit`] once it holds a message.
    pub fn next_buf(&mut self) -> &mut Vec<u8> {
        let b = &mut self.bufs[self.count];
        b.clear();
        b
    }

    pub fn commit(&mut self) {
        self.lens[self.count] = self.bufs[self.count].len();
        self.count += 1;
    }

    pub fn is_full(&self) -> bool {
        self.count == self.bufs.len()
    }

    /// Length of datagram `i` (sent or received).
    pub fn len_of(&self, i: usize) -> usize {
        self.lens[i]
    }

    pub fn msg(&self, i: usize) -> &[u8] {
        // SAFETY: recv wrote `lens[i]` bytes into the buffer's spare capacity; send buffers
        // hold `lens[i]` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.bufs[i].as_ptr(), self.lens[i]) }
    }

    fn point(&mut self, from: usize, to: usize, recv: bool) {
        self.point_asking(from, to, recv, |_| false)
    }

    /// [`Batch::point`]; the datagrams `ask` picks (sending) carry a control message that
    /// asks the kernel for their transmit stamp (`stamp::TX_ASK`).
    fn point_asking(&mut self, from: usize, to: usize, recv: bool, ask: impl Fn(usize) -> bool) {
        for i in from..to {
            let b = &mut self.bufs[i];
            self.iovs[i] = libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: if recv { b.capacity() } else { self.lens[i] },
            };
            let h = &mut self.hdrs[i];
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_name = std::ptr::null_mut();
            h.msg_hdr.msg_namelen = 0;
            if recv {
                h.msg_hdr.msg_control = self.ctrl[i * CTRL / 8..].as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = CTRL as _;
            } else if ask(i) {
                let ctrl = &mut self.ctrl[i * CTRL / 8..(i + 1) * CTRL / 8];
                h.msg_hdr.msg_control = ctrl.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE of a u32 (24 bytes) fits the CTRL bytes the header points
                // at; the CMSG macros write within them.
                unsafe {
                    h.msg_hdr.msg_controllen = libc::CMSG_SPACE(4) as _;
                    let c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                    (*c).cmsg_level = libc::SOL_SOCKET;
                    (*c).cmsg_type = libc::SO_TIMESTAMPING;
                    (*c).cmsg_len = libc::CMSG_LEN(4) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u32>(), crate::stamp::TX_ASK);
                }
            } else {
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
            }
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
    }

    /// Sends datagrams `from..count`; returns how many left (at least one) or the error.
    pub fn send(&mut self, fd: RawFd, from: usize) -> io::Result<usize> {
        self.send_asking(fd, from, false)
    }

    /// [`Batch::send`]; `ends`: the datagrams [`asks_stamp`] picks ask for their transmit
    /// stamps (a socket with `stamp::enable_sparse_tx`).
    pub fn send_asking(&mut self, fd: RawFd, from: usize, ends: bool) -> io::Result<usize> {
        let last = self.count.saturating_sub(1);
        self.point_asking(from, self.count, false, |i| ends && asks_stamp(from, last, i));
        let n = (self.count - from) as libc::c_uint;
        // SAFETY: headers point at live buffers owned by self for the duration of the call.
        let r = unsafe { libc::sendmmsg(fd, self.hdrs[from..].as_mut_ptr(), n, libc::MSG_DONTWAIT) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Receives up to `capacity()` datagrams without blocking; returns how many.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.bufs.len();
        self.point(0, n, true);
        // SAFETY: as for send; the kernel writes at most iov_len bytes into each buffer.
        let r = unsafe {
            libc::recvmmsg(fd, self.hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = r as usize;
        for i in 0..r {
            self.lens[i] = self.hdrs[i].msg_len as usize;
            self.stamps[i] = crate::stamp::of(&self.hdrs[i].msg_hdr);
        }
        Ok(r)
    }

    /// Kernel receive time of received datagram `i`, CLOCK_REALTIME ns, when the socket has
    /// SO_TIMESTAMPNS on (0 otherwise).
    pub fn stamp(&self, i: usize) -> u64 {
        self.stamps[i]
    }
}
