//! An AF_XDP socket, its UMEM (the frames, in the process's memory) and its four rings
//! (fill, completion, RX, TX), mapped from the kernel: `if_xdp.h`, by hand.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::bpf::{META_LEN, META_MAGIC};

const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_PGOFF_RX_RING: i64 = 0;
const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;

/// Bytes per frame.
pub const FRAME: usize = 2048;

#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// One mapped ring: `N`-byte entries (16 for RX/TX descriptors, 8 for frame addresses).
struct Ring {
    map: *mut libc::c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    size: u32,
    /// Our side's copy of the index we move (producer or consumer), published on commit.
    local: u32,
}

impl Ring {
    fn map(fd: RawFd, off: &RingOffset, size: u32, entry: usize, pgoff: i64) -> io::Result<Ring> {
        let map_len = off.desc as usize + size as usize * entry;
        // SAFETY: mmap of the socket's ring at its documented page offset; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map.cast::<u8>();
        // SAFETY: the offsets come from the kernel and lie inside the mapping.
        unsafe {
            Ok(Ring {
                map,
                map_len,
                producer: base.add(off.producer as usize).cast(),
                consumer: base.add(off.consumer as usize).cast(),
                desc: base.add(off.desc as usize),
                mask: size - 1,
                size,
                local: 0,
            })
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping, u32-aligned (kernel layout).
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for producer.
        unsafe { &*self.consumer }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps what map() mapped, once.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// An AF_XDP socket with its UMEM and rings. Single-threaded: one worker uses it.
pub struct Umem {
    fd: OwnedFd,
    area: *mut u8,
    area_len: usize,
    fill: Ring,
    comp: Ring,
    rx: Ring,
    tx: Ring,
}

// SAFETY: the UMEM and the rings are mappings this value owns alone (no other value points
// into them); moving it to another thread moves that ownership with it. It is not Sync: one
// thread uses it at a time.
unsafe impl Send for Umem {}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: setsockopt reads size_of::<T>() bytes of `v`.
    cvt(unsafe { libc::setsockopt(fd, SOL_XDP, opt, (v as *const T).cast(), std::mem::size_of::<T>() as _) })
        .map(|_| ())
}

impl Umem {
    /// A socket with a UMEM of `frames` frames (a power of two) and rings of as many entries.
    pub fn new(frames: u32) -> io::Result<Umem> {
        // SAFETY: socket(2) with constant arguments.
        let fd = cvt(unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: just made, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let area_len = frames as usize * FRAME;
        // SAFETY: an anonymous private mapping; checked below.
        let area = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                area_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if area == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let area = area.cast::<u8>();
        let unmap = |e| {
            // SAFETY: the mapping just made, unmapped once on this error path.
            unsafe { libc::munmap(area.cast(), area_len) };
            e
        };
        let raw = fd.as_raw_fd();
        let reg = UmemReg {
            addr: area as u64,
            len: area_len as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            pad: 0,
        };
        setsockopt(raw, XDP_UMEM_REG, &reg).map_err(unmap)?;
        let half = frames / 2;
        setsockopt(raw, XDP_UMEM_FILL_RING, &half).map_err(unmap)?;
        setsockopt(raw, XDP_UMEM_COMPLETION_RING, &half).map_err(unmap)?;
        setsockopt(raw, XDP_RX_RING, &half).map_err(unmap)?;
        setsockopt(raw, XDP_TX_RING, &half).map_err(unmap)?;
        let mut off = MmapOffsets::default();
        let mut len = std::mem::size_of::<MmapOffsets>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `off`.
        cvt(unsafe {
            libc::getsockopt(raw, SOL_XDP, XDP_MMAP_OFFSETS, (&mut off as *mut MmapOffsets).cast(), &mut len)
        })
        .map_err(unmap)?;
        let rings = (|| {
            Ok::<_, io::Error>((
                Ring::map(raw, &off.fr, half, 8, XDP_UMEM_PGOFF_FILL_RING)?,
                Ring::map(raw, &off.cr, half, 8, XDP_UMEM_PGOFF_COMPLETION_RING)?,
                Ring::map(raw, &off.rx, half, 16, XDP_PGOFF_RX_RING)?,
                Ring::map(raw, &off.tx, half, 16, XDP_PGOFF_TX_RING)?,
            ))
        })();
        let (fill, comp, rx, tx) = rings.map_err(unmap)?;
        let mut u = Umem { fd, area, area_len, fill, comp, rx, tx };
        // Our producer indices start where the kernel's rings start (0); consumers likewise.
        u.fill.local = u.fill.producer().load(Ordering::Relaxed);
        u.tx.local = u.tx.producer().load(Ordering::Relaxed);
        u.rx.local = u.rx.consumer().load(Ordering::Relaxed);
        u.comp.local = u.comp.consumer().load(Ordering::Relaxed);
        Ok(u)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Binds the socket to queue `queue` of interface `ifindex`, zero-copy or copy mode.
    pub fn bind(&self, ifindex: u32, queue: u32, zero_copy: bool) -> io::Result<()> {
        let sa = SockaddrXdp {
            family: AF_XDP as u16,
            flags: if zero_copy { XDP_ZEROCOPY } else { XDP_COPY },
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // SAFETY: bind reads the sockaddr we own, of the size we pass.
        cvt(unsafe {
            libc::bind(self.fd(), (&sa as *const SockaddrXdp).cast(), std::mem::size_of::<SockaddrXdp>() as _)
        })
        .map(|_| ())
    }

    /// Gives frames `range` (frame numbers) to the kernel to receive into.
    pub fn fill_all(&mut self, range: std::ops::Range<u32>) {
        self.refill(range.map(|i| u64::from(i) * FRAME as u64));
    }

    /// Gives received frames back to the fill ring.
    pub fn refill(&mut self, addrs: impl Iterator<Item = u64>) {
        let r = &mut self.fill;
        for a in addrs {
            // The fill ring has as many slots as there are receive frames: always room.
            // SAFETY: the slot lies inside the ring's descriptor area (masked index).
            unsafe { r.desc.cast::<u64>().add((r.local & r.mask) as usize).write(a & !(FRAME as u64 - 1)) };
            r.local = r.local.wrapping_add(1);
        }
        r.producer().store(r.local, Ordering::Release);
    }

    /// Takes up to `out.len()` received descriptors (address, length) off the RX ring.
    pub fn rx(&mut self, out: &mut [(u64, u32)]) -> usize {
        let r = &mut self.rx;
        let avail = r.producer().load(Ordering::Acquire).wrapping_sub(r.local) as usize;
        let n = avail.min(out.len());
        for o in out.iter_mut().take(n) {
            // SAFETY: a descriptor slot the kernel published (producer read with Acquire).
            let d = unsafe { r.desc.add(((r.local & r.mask) as usize) * 16) };
            // SAFETY: as above; xdp_desc is { u64 addr, u32 len, u32 options }.
            *o = unsafe { (d.cast::<u64>().read(), d.add(8).cast::<u32>().read()) };
            r.local = r.local.wrapping_add(1);
        }
        if n > 0 {
            r.consumer().store(r.local, Ordering::Release);
        }
        n
    }

    /// A received frame: the receive time the XDP program wrote before it (0: none) and its
    /// bytes. The magic is cleared so that the frame's next use cannot read a stale time.
    pub fn frame(&mut self, addr: u64, len: u32) -> (u64, &[u8]) {
        let addr = addr as usize;
        if addr >= self.area_len {
            return (0, &[]);
        }
        let len = (len as usize).min(self.area_len - addr);
        let mut at = 0;
        if addr % FRAME >= META_LEN {
            // SAFETY: the metadata lies inside the frame's headroom, inside the area.
            unsafe {
                let m = self.area.add(addr - META_LEN);
                if m.add(8).cast::<u32>().read_unaligned() == META_MAGIC {
                    at = m.cast::<u64>().read_unaligned();
                    m.add(8).cast::<u32>().write_unaligned(0);
                }
            }
        }
        // SAFETY: addr + len lies inside the area (bounded above).
        (at, unsafe { std::slice::from_raw_parts(self.area.add(addr), len) })
    }

    /// A received frame's bytes, as they are (no metadata read).
    pub fn data(&self, addr: u64, len: u32) -> &[u8] {
        let addr = (addr as usize).min(self.area_len);
        let len = (len as usize).min(self.area_len - addr);
        // SAFETY: addr + len lies inside the area (bounded above).
        unsafe { std::slice::from_raw_parts(self.area.add(addr), len) }
    }

    /// A whole frame to write a packet into.
    pub fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        // SAFETY: addr is a frame's start, inside the area; the frame is not in the kernel's
        // hands (taken from the free list).
        unsafe { std::slice::from_raw_parts_mut(self.area.add(addr as usize), FRAME) }
    }

    /// Free slots on the TX ring.
    pub fn tx_room(&self) -> usize {
        let used = self.tx.local.wrapping_sub(self.tx.consumer().load(Ordering::Acquire));
        (self.tx.size - used) as usize
    }

    pub fn tx_push(&mut self, addr: u64, len: u32) {
        let r = &mut self.tx;
        // SAFETY: a free slot (tx_room counted it), inside the descriptor area.
        unsafe {
            let d = r.desc.add(((r.local & r.mask) as usize) * 16);
            d.cast::<u64>().write(addr);
            d.add(8).cast::<u32>().write(len);
            d.add(12).cast::<u32>().write(0);
        }
        r.local = r.local.wrapping_add(1);
    }

    pub fn tx_commit(&mut self) {
        self.tx.producer().store(self.tx.local, Ordering::Release);
    }

    /// Has the kernel send what the TX ring holds (copy mode sends in the system call, at most
    /// a few dozen frames each: called again while some remain).
    pub fn kick(&mut self) -> io::Result<()> {
        for _ in 0..64 {
            if self.tx.consumer().load(Ordering::Acquire) == self.tx.local {
                return Ok(());
            }
            // SAFETY: sendto with no buffer: the kernel reads the TX ring.
            let r = unsafe { libc::sendto(self.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EINTR) => {}
                    // The device is busy or out of buffers: what is left goes with the next kick.
                    Some(libc::EBUSY | libc::ENOBUFS) => return Ok(()),
                    _ => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Takes the frames the kernel has sent off the completion ring, into `free`.
    pub fn complete(&mut self, free: &mut Vec<u64>) {
        let r = &mut self.comp;
        let avail = r.producer().load(Ordering::Acquire).wrapping_sub(r.local);
        for _ in 0..avail {
            // SAFETY: a slot the kernel published.
            let a = unsafe { r.desc.cast::<u64>().add((r.local & r.mask) as usize).read() };
            free.push(a & !(FRAME as u64 - 1));
            r.local = r.local.wrapping_add(1);
        }
        if avail > 0 {
            r.consumer().store(r.local, Ordering::Release);
        }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // The rings unmap themselves; the socket closes after this; the area goes last... but
        // the kernel holds its own pages of it until the socket closes, so unmapping here is safe.
        // SAFETY: unmaps the area new() mapped, once.
        unsafe { libc::munmap(self.area.cast(), self.area_len) };
    }
}
