//! DNS over UDP through AF_XDP (`--xdp`): a second I/O path behind the same UDP lane.
//!
//! [`Xdp::open`] (before the run, so that anything missing is one line and exit 2) finds the
//! interface that routes to the target, its MAC address and the neighbour's (the kernel's
//! table), loads a small XDP program (`bpf.rs`: the target's answers go to the AF_XDP socket,
//! everything else to the kernel) and attaches it, natively where the driver allows it and
//! generically elsewhere. Each worker thread then makes one AF_XDP socket bound to the queue
//! (its UMEM, fill, completion, RX and TX rings mapped into the process) the first time one of
//! its lanes starts; the thread's lanes share it. A lane reserves its source port with a
//! kernel socket (nothing else takes it), builds its queries' frames from a template
//! (`frame.rs`) straight into the UMEM and puts them on the TX ring; the socket's receive
//! task reads the RX ring and hands each answer to the lane its destination port names, with
//! the receive time the XDP program wrote before the frame (CLOCK_MONOTONIC, the run's
//! clock). Everything above the lane (IDs, fates, accounting) is the plain UDP path's.

pub mod bpf;
pub mod frame;
mod ring;
mod route;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use volley_metrics::{ErrorKind, Unexpected, WireStats};

use crate::{deliver, meter, Exchange, IdTable, Lane, LaneOptions, Token};
use frame::Template;
use ring::Umem;

/// Why `--xdp` cannot run: one line each.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error("--xdp: interface '{0}' does not exist")]
    NoInterface(String),
    #[error("--xdp: '{0}' is a loopback interface; XDP does not see loopback traffic (use an interface such as a veth pair)")]
    Loopback(String),
    #[error("--xdp: {0} is reached through {1}, not '{2}'")]
    WrongInterface(IpAddr, String, String),
    #[error("--xdp: no route to {0}: {1}")]
    NoRoute(IpAddr, String),
    #[error("--xdp: no neighbour entry (MAC address) for {0} on {1}")]
    NoNeighbour(IpAddr, String),
    #[error("--xdp needs root or CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF ({0}: {1})")]
    Permission(&'static str, io::Error),
    #[error("--xdp: {0}: {1}")]
    Sys(&'static str, io::Error),
    #[error("--xdp: '{0}' already has an XDP program (another tool's? `ip link set dev {0} xdp off` removes it)")]
    Busy(String),
}

/// The run-wide side of `--xdp`: the interface, the attached program and its socket map.
/// Cloned into every lane's options; the program is detached when the last clone is dropped.
#[derive(Clone)]
pub struct Xdp(Arc<Inner>);

struct Inner {
    iface: String,
    ifindex: u32,
    queue: u32,
    target: SocketAddr,
    src: IpAddr,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    native: bool,
    zero_copy: bool,
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
}

impl std::fmt::Debug for Xdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Xdp({}, {})", self.0.iface, self.mode())
    }
}

impl Xdp {
    /// Prepares AF_XDP for `target` over `iface` (the interface that routes to it when
    /// `None`), from source address `local` (the route's own when `None`).
    pub fn open(target: SocketAddr, iface: Option<&str>, local: Option<IpAddr>) -> Result<Xdp, XdpError> {
        let r = route::resolve(target.ip(), iface)?;
        let src = local.unwrap_or(r.src);
        let map = bpf::xskmap(r.queues.max(1)).map_err(|e| sys("creating the socket map", e))?;
        let prog = bpf::load(target, map.as_raw_fd()).map_err(|e| sys("loading the XDP program", e))?;
        let (link, native) = match bpf::attach(&prog, r.ifindex, bpf::XDP_FLAGS_DRV_MODE) {
            Ok(l) => (l, true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::EBUSY)) => {
                return Err(XdpError::Busy(r.iface));
            }
            Err(_) => (
                bpf::attach(&prog, r.ifindex, bpf::XDP_FLAGS_SKB_MODE)
                    .map_err(|e| sys("attaching the XDP program", e))?,
                false,
            ),
        };
        // A trial socket: says now whether AF_XDP works here, and whether zero-copy does.
        let zero_copy = {
            let umem = Umem::new(64).map_err(|e| sys("making the UMEM", e))?;
            match umem.bind(r.ifindex, 0, true) {
                Ok(()) => true,
                Err(_) => {
                    let umem = Umem::new(64).map_err(|e| sys("making the UMEM", e))?;
                    umem.bind(r.ifindex, 0, false).map_err(|e| sys("binding an AF_XDP socket", e))?;
                    false
                }
            }
        };
        Ok(Xdp(Arc::new(Inner {
            iface: r.iface,
            ifindex: r.ifindex,
            queue: 0,
            target,
            src,
            src_mac: r.src_mac,
            dst_mac: r.dst_mac,
            native,
            zero_copy,
            map,
            _prog: prog,
            _link: link,
        })))
    }

    /// The interface used.
    pub fn iface(&self) -> &str {
        &self.0.iface
    }

    /// How frames go: `native` or `generic` XDP, `zero-copy` or `copy`.
    pub fn mode(&self) -> String {
        format!(
            "{} XDP, {}",
            if self.0.native { "native" } else { "generic" },
            if self.0.zero_copy { "zero-copy" } else { "copy mode" }
        )
    }

    /// The event name a run's results count the path under: `xdp_native_copy`,
    /// `xdp_generic_zerocopy`...
    fn event(&self) -> &'static str {
        match (self.0.native, self.0.zero_copy) {
            (true, true) => "xdp_native_zerocopy",
            (true, false) => "xdp_native_copy",
            (false, true) => "xdp_generic_zerocopy",
            (false, false) => "xdp_generic_copy",
        }
    }
}

fn sys(what: &'static str, e: io::Error) -> XdpError {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => XdpError::Permission(what, e),
        _ => XdpError::Sys(what, e),
    }
}

/// Frames in a worker's UMEM: half to receive into, half to send from.
const FRAMES: u32 = 4096;
/// Frames read or written per pass.
const BATCH: usize = 64;

thread_local! {
    /// This worker's AF_XDP socket, while one of its lanes holds it.
    static SOCKET: RefCell<Weak<Socket>> = const { RefCell::new(Weak::new()) };
}

/// What the receive task hands a lane: its answers.
trait Sink {
    fn deliver(&self, msg: &[u8], at: u64);
    fn stray(&self, bytes: usize, at: u64);
    fn in_flight(&self) -> u32;
}

struct LaneRx<X> {
    x: Rc<X>,
    lane: Rc<Lane>,
    ids: RefCell<IdTable>,
    header: u64,
}

impl<X: Exchange> Sink for LaneRx<X> {
    fn deliver(&self, msg: &[u8], at: u64) {
        deliver(msg, &mut self.ids.borrow_mut(), &*self.x, at);
        self.x.wire(&WireStats { bytes_in: msg.len() as u64 + self.header, packets_in: 1, ..WireStats::default() });
    }
    fn stray(&self, bytes: usize, at: u64) {
        self.x.unexpected(Unexpected::UnknownId, bytes, at);
    }
    fn in_flight(&self) -> u32 {
        self.lane.in_flight()
    }
}

/// A worker's AF_XDP socket and the lanes that share it.
struct Socket {
    xdp: Xdp,
    /// Registered with the runtime unless answers are read on a timer (`lazy`): a registered
    /// socket wakes the thread for every batch of answers the kernel hands it, which at 100k
    /// answers a second costs both the generator and the core that runs the interface's
    /// receive path (the responder's, on a veth pair).
    fd: Option<AsyncFd<i32>>,
    umem: RefCell<Umem>,
    lanes: RefCell<HashMap<u16, Rc<dyn Sink>>>,
    /// Frames free to send from.
    free: RefCell<Vec<u64>>,
    /// Scheduled loads: read answers this often while some are due, not on every arrival.
    lazy: Cell<Option<Duration>>,
    /// Whether a lane has counted the path in its events.
    announced: Cell<bool>,
}

impl Socket {
    fn get(xdp: &Xdp, lazy: Option<Duration>) -> io::Result<Rc<Socket>> {
        if let Some(s) = SOCKET.with(|s| s.borrow().upgrade()) {
            return Ok(s);
        }
        let mut umem = Umem::new(FRAMES)?;
        umem.fill_all(0..FRAMES / 2);
        // A socket closed a moment ago (the trial one of `open`, or a previous step's) frees its
        // queue only once the kernel's deferred release has run: busy until then.
        let mut tries = 0;
        while let Err(e) = umem.bind(xdp.0.ifindex, xdp.0.queue, xdp.0.zero_copy) {
            tries += 1;
            // Up to 10 s: the release waits for an RCU grace period, long on a loaded machine.
            if e.raw_os_error() != Some(libc::EBUSY) || tries > 2_000 {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        bpf::map_set(xdp.0.map.as_raw_fd(), xdp.0.queue, umem.fd())?;
        let free = (FRAMES / 2..FRAMES).map(|i| u64::from(i) * ring::FRAME as u64).collect();
        // SAFETY: the descriptor stays open, and the same, while the AsyncFd lives: `fd` is
        // declared before `umem` in `Socket`, so it is deregistered before the socket closes.
        let fd = match lazy {
            Some(_) => None,
            None => Some(
                unsafe { AsyncFd::register_with_interest(umem.fd(), tokio::io::Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)?,
            ),
        };
        let s = Rc::new(Socket {
            xdp: xdp.clone(),
            fd,
            umem: RefCell::new(umem),
            lanes: RefCell::new(HashMap::new()),
            free: RefCell::new(free),
            lazy: Cell::new(lazy),
            announced: Cell::new(false),
        });
        SOCKET.with(|w| *w.borrow_mut() = Rc::downgrade(&s));
        tokio::task::spawn_local(receive(s.clone()));
        Ok(s)
    }

    /// Reads every answer on the RX ring and hands it to its lane; gives the frames back to the
    /// fill ring. Returns how many frames it read.
    fn drain(&self) -> usize {
        let mut umem = self.umem.borrow_mut();
        let lanes = self.lanes.borrow();
        let target = self.xdp.0.target;
        let mut total = 0;
        loop {
            let mut got = [(0u64, 0u32); BATCH];
            let n = umem.rx(&mut got);
            if n == 0 {
                break;
            }
            let fallback = crate::udp::xdp::now();
            for &(addr, len) in &got[..n] {
                let (at, frame) = umem.frame(addr, len);
                let at = if at == 0 { fallback } else { at.min(fallback) };
                if let Some((port, msg)) = frame::parse(frame, target) {
                    match lanes.get(&port) {
                        Some(l) => l.deliver(msg, at),
                        None => {
                            if let Some(l) = lanes.values().next() {
                                l.stray(msg.len(), at);
                            }
                        }
                    }
                }
            }
            umem.refill(got[..n].iter().map(|g| g.0));
            total += n;
            if n < BATCH {
                break;
            }
        }
        total
    }

    /// Takes queued queries of `lane` into frames on the TX ring and has the kernel send them.
    /// Returns how many went; 0 when no frame or ring slot was free.
    fn send<X: Exchange>(
        &self,
        lane: &Lane,
        rx: &LaneRx<X>,
        tpl: &Template,
        sport: u16,
        scratch: &mut Vec<u8>,
    ) -> usize {
        let x = &*rx.x;
        let mut umem = self.umem.borrow_mut();
        let mut free = self.free.borrow_mut();
        umem.complete(&mut free);
        let room = umem.tx_room().min(free.len()).min(BATCH);
        let mut sent: [(Token, usize); BATCH] = [(0, 0); BATCH];
        let mut n = 0;
        let h = tpl.headers();
        while n < room {
            let Some(t) = lane.pop() else { break };
            let Some(id) = rx.ids.borrow_mut().insert(t, |o| x.is_live(o)) else {
                x.failed(t, ErrorKind::Overload, x.now());
                continue;
            };
            scratch.clear();
            if !x.encode(t, id, scratch) {
                rx.ids.borrow_mut().remove(id);
                continue;
            }
            if scratch.len() + h > ring::FRAME {
                rx.ids.borrow_mut().remove(id);
                x.failed(t, ErrorKind::Io, x.now());
                continue;
            }
            let addr = free.pop().expect("room counted");
            let f = umem.frame_mut(addr);
            f[h..h + scratch.len()].copy_from_slice(scratch);
            let len = tpl.finish(f, sport, scratch.len());
            umem.tx_push(addr, len as u32);
            sent[n] = (t, scratch.len());
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        umem.tx_commit();
        // The frames leave during the kick (copy mode sends in the system call): their
        // departure is its start, or an answer could come back before its query left.
        let now = x.now();
        if umem.kick().is_err() {
            x.event("xdp_send_error");
        }
        let mut bytes = 0;
        for &(t, len) in &sent[..n] {
            x.sent(t, len, now);
            bytes += len as u64 + rx.header;
        }
        x.wire(&WireStats { bytes_out: bytes, packets_out: n as u64, ..WireStats::default() });
        n
    }

    fn any_in_flight(&self) -> bool {
        self.lanes.borrow().values().any(|l| l.in_flight() > 0)
    }
}

/// CLOCK_MONOTONIC ns: the run's clock, and the XDP program's (`bpf_ktime_get_ns`).
fn now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A worker socket's receive task: reads answers as they arrive (or, for scheduled loads,
/// every millisecond while some are due: they keep the time the XDP program saw them), until
/// no lane holds the socket any more.
async fn receive(s: Rc<Socket>) {
    loop {
        match (&s.fd, s.lazy.get()) {
            (None, poll) => {
                // Every `poll` while answers are due; idle, every 10 ms (strays, late answers).
                let poll = poll.unwrap_or(Duration::from_millis(1));
                let idle = Duration::from_millis(10);
                tokio::time::sleep(if s.any_in_flight() { poll } else { idle }).await;
                s.drain();
            }
            (Some(fd), _) => {
                tokio::select! {
                    biased;
                    g = fd.readable() => {
                        let Ok(mut g) = g else { return };
                        s.drain();
                        g.clear_ready();
                        s.drain();
                    }
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        }
        if Rc::strong_count(&s) == 1 {
            return;
        }
    }
}

/// A lane made ready to run over AF_XDP: its worker's socket and its own source port.
pub struct Prepared {
    socket: Rc<Socket>,
    /// Holds the lane's source port in the kernel, so that no other socket takes it.
    reserve: std::net::UdpSocket,
    template: Template,
}

/// Makes (or joins) this worker's AF_XDP socket and reserves the lane's source port.
pub fn prepare(xdp: &Xdp, opts: &LaneOptions) -> io::Result<Prepared> {
    let socket = Socket::get(xdp, opts.udp_lazy_receive)?;
    let src = opts.local.unwrap_or(xdp.0.src);
    let reserve = std::net::UdpSocket::bind(SocketAddr::new(src, 0))?;
    let template = Template::new(xdp.0.src_mac, xdp.0.dst_mac, src, xdp.0.target);
    Ok(Prepared { socket, reserve, template })
}

/// The driver of one UDP lane over AF_XDP (see the module's documentation).
pub async fn drive<X: Exchange + 'static>(prepared: io::Result<Prepared>, addr: SocketAddr, lane: Rc<Lane>, x: Rc<X>) {
    let p = match prepared {
        Ok(p) => p,
        Err(e) => {
            let kind = crate::error_kind(&e);
            let now = x.now();
            for t in lane.take_queued() {
                x.failed(t, kind, now);
            }
            x.conn_failed_why(kind, &format!("AF_XDP socket: {e}"), now);
            x.event("xdp_socket_error");
            return;
        }
    };
    let sport = match p.reserve.local_addr() {
        Ok(a) => a.port(),
        Err(_) => return,
    };
    let rx = Rc::new(LaneRx {
        x: x.clone(),
        lane: lane.clone(),
        ids: RefCell::new(IdTable::with_capacity(64)),
        header: meter::udp_header(addr),
    });
    p.socket.lanes.borrow_mut().insert(sport, rx.clone());
    // The path is said once per worker socket, not per lane.
    if !p.socket.announced.replace(true) {
        x.event(p.socket.xdp.event());
    }
    let mut scratch = Vec::with_capacity(512);
    loop {
        while lane.queued() > 0 {
            if p.socket.send(&lane, &rx, &p.template, sport, &mut scratch) == 0 {
                // No frame or TX slot free: the kernel is still sending; look again shortly.
                tokio::time::sleep(Duration::from_micros(50)).await;
            }
        }
        if lane.closing() {
            break;
        }
        lane.wait().await;
    }
    p.socket.lanes.borrow_mut().remove(&sport);
    drop(p.reserve);
}
