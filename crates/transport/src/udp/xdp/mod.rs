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

pub use volley_xsk::bpf;
pub mod frame;
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
use volley_xsk::{ring, Umem};

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
    #[error("--xdp: {1} worker threads need {1} queues on '{0}', which has {2} (one AF_XDP socket per worker, each on its own queue)")]
    TooFewQueues(String, u32, u32),
}

/// The run-wide side of `--xdp`: the interface, the attached program and its socket map.
/// Cloned into every lane's options; the program is detached when the last clone is dropped.
#[derive(Clone)]
pub struct Xdp(Arc<Inner>);

struct Inner {
    iface: String,
    ifindex: u32,
    /// Worker threads: worker `i` binds its socket to queue `i`, and its lanes take source
    /// ports `p` with `p % workers == i` (so that a rule on the port can steer its answers).
    workers: u32,
    target: SocketAddr,
    src: IpAddr,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    native: bool,
    zero_copy: bool,
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// The worker (index + 1; 0: none) whose lane holds each source port: an answer that
    /// arrives on another worker's queue (the interface spread it by its own hash) is handed
    /// to its owner through [`Inner::mail`].
    owners: Box<[std::sync::atomic::AtomicU8]>,
    /// Each worker's answers that arrived on another worker's queue.
    mail: Box<[Mailbox]>,
    /// Lanes running, in all workers: a worker's socket outlives its own lanes until none is
    /// left ([`linger`]).
    live_lanes: std::sync::atomic::AtomicU32,
}

/// An answer handed over from another worker's socket: destination port, receive time,
/// whether that time is the XDP program's ([`receive_time`]), bytes.
type Mail = (u16, u64, bool, Box<[u8]>);

/// Answers handed over from other workers' sockets.
#[derive(Default)]
struct Mailbox {
    items: std::sync::Mutex<Vec<Mail>>,
    /// Set while items wait, so that an empty mailbox costs an atomic load, not a lock.
    waiting: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl std::fmt::Debug for Xdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Xdp({}, {})", self.0.iface, self.mode())
    }
}

impl Xdp {
    /// Prepares AF_XDP for `target` over `iface` (the interface that routes to it when
    /// `None`), from source address `local` (the route's own when `None`), for `workers`
    /// worker threads (one queue each: the interface needs as many).
    pub fn open(target: SocketAddr, iface: Option<&str>, local: Option<IpAddr>, workers: u32) -> Result<Xdp, XdpError> {
        let r = route::resolve(target.ip(), iface)?;
        let workers = workers.max(1);
        if workers > r.queues.max(1) || workers > 255 {
            return Err(XdpError::TooFewQueues(r.iface, workers, r.queues.max(1)));
        }
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
            workers,
            target,
            src,
            src_mac: r.src_mac,
            dst_mac: r.dst_mac,
            native,
            zero_copy,
            map,
            _prog: prog,
            _link: link,
            owners: (0..65_536).map(|_| std::sync::atomic::AtomicU8::new(0)).collect(),
            mail: (0..workers).map(|_| Mailbox::default()).collect(),
            live_lanes: std::sync::atomic::AtomicU32::new(0),
        })))
    }

    /// Worker threads (and queues) used.
    pub fn workers(&self) -> u32 {
        self.0.workers
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

impl Xdp {
    /// The worker whose lane holds source port `port`.
    fn owner(&self, port: u16) -> Option<u32> {
        match self.0.owners[port as usize].load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            w => Some(u32::from(w) - 1),
        }
    }

    /// Lets source port `port` go (its lane has ended).
    fn release(&self, port: u16) {
        self.0.owners[port as usize].store(0, std::sync::atomic::Ordering::Release);
    }

    /// Claims source port `port` for `worker`'s lane: false when another lane holds it (on
    /// another source address of `--bind`: answers are told apart by port alone).
    fn claim(&self, port: u16, worker: u32) -> bool {
        use std::sync::atomic::Ordering;
        self.0.owners[port as usize].compare_exchange(0, worker as u8 + 1, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Hands an answer that arrived on this worker's queue to worker `to`, whose lane sent the
    /// query.
    fn hand_over(&self, to: u32, port: u16, at: u64, stamped: bool, msg: &[u8]) {
        let Some(m) = self.0.mail.get(to as usize) else { return };
        m.items.lock().unwrap_or_else(|e| e.into_inner()).push((port, at, stamped, msg.into()));
        m.waiting.store(true, std::sync::atomic::Ordering::Release);
        m.notify.notify_one();
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
    /// This thread's worker index ([`set_worker`]): the queue its socket binds to.
    static WORKER: Cell<u32> = const { Cell::new(0) };
}

/// Says which worker the calling thread is (0 for the first): its AF_XDP socket binds to the
/// queue of that number. The engine calls it as each worker starts.
pub fn set_worker(index: usize) {
    WORKER.with(|w| w.set(index.min(u32::MAX as usize) as u32));
}

/// The event that counts answers whose receive time is when the RX ring was read, not the XDP
/// program's stamp (the frame came without the program's metadata).
pub const RX_TIME_FALLBACK_EVENT: &str = "xdp_rx_time_fallback";

/// An answer's receive time: the XDP program's stamp `stamp` (0: none; never later than
/// `read`), else `read`, the time the RX ring was read. True when it is the program's.
fn receive_time(stamp: u64, read: u64) -> (u64, bool) {
    match stamp {
        0 => (read, false),
        s => (s.min(read), true),
    }
}

/// What the receive task hands a lane: its answers.
trait Sink {
    /// An answer received at `at`: the XDP program's stamp when `stamped`, else the time the
    /// RX ring was read.
    fn deliver(&self, msg: &[u8], at: u64, stamped: bool);
    fn stray(&self, bytes: usize, at: u64);
    fn in_flight(&self) -> u32;
    fn event(&self, what: &str);
    /// The lane's frames put on the TX ring since the last kick left at `now`.
    fn flush_sent(&self, now: u64);
    /// Reports the bytes and packets of the answers delivered since the last call (once per
    /// read of the RX ring, as the socket path reports each batch of datagrams).
    fn flush_received(&self);
}

struct LaneRx<X> {
    x: Rc<X>,
    lane: Rc<Lane>,
    ids: RefCell<IdTable>,
    header: u64,
    /// Queries on the TX ring, not kicked yet: (token, DNS bytes).
    unsent: RefCell<Vec<(Token, usize)>>,
    /// Answers delivered and not yet reported to the engine's wire counts: (bytes, packets).
    received: Cell<(u64, u64)>,
    /// Of those, the answers without the XDP program's receive time ([`RX_TIME_FALLBACK_EVENT`]).
    unstamped: Cell<u64>,
}

impl<X: Exchange> Sink for LaneRx<X> {
    fn deliver(&self, msg: &[u8], at: u64, stamped: bool) {
        deliver(msg, &mut self.ids.borrow_mut(), &*self.x, at);
        let (bytes, packets) = self.received.get();
        self.received.set((bytes + msg.len() as u64 + self.header, packets + 1));
        if !stamped {
            self.unstamped.set(self.unstamped.get() + 1);
        }
    }
    fn flush_received(&self) {
        let (bytes_in, packets_in) = self.received.take();
        if packets_in > 0 {
            self.x.wire(&WireStats { bytes_in, packets_in, ..WireStats::default() });
        }
        let unstamped = self.unstamped.take();
        if unstamped > 0 {
            self.x.events(RX_TIME_FALLBACK_EVENT, unstamped);
        }
    }
    fn stray(&self, bytes: usize, at: u64) {
        self.x.unexpected(Unexpected::UnknownId, bytes, at);
    }
    fn in_flight(&self) -> u32 {
        self.lane.in_flight()
    }
    fn event(&self, what: &str) {
        self.x.event(what);
    }
    fn flush_sent(&self, now: u64) {
        let mut unsent = self.unsent.borrow_mut();
        if unsent.is_empty() {
            return;
        }
        let mut bytes = 0;
        for &(t, len) in unsent.iter() {
            self.x.sent(t, len, now);
            bytes += len as u64 + self.header;
        }
        let n = unsent.len() as u64;
        unsent.clear();
        self.x.wire(&WireStats { bytes_out: bytes, packets_out: n, ..WireStats::default() });
    }
}

/// A worker's AF_XDP socket and the lanes that share it.
struct Socket {
    xdp: Xdp,
    /// This worker's index: its queue, its mailbox, its source ports' residue.
    worker: u32,
    /// Registered with the runtime unless answers are read on a timer (`lazy`): a registered
    /// socket wakes the thread for every batch of answers the kernel hands it, which at 100k
    /// answers a second costs both the generator and the core that runs the interface's
    /// receive path (the responder's, on a veth pair).
    fd: Option<AsyncFd<i32>>,
    umem: RefCell<Umem>,
    lanes: RefCell<HashMap<u16, Rc<dyn Sink>, PortHash>>,
    /// Lanes with frames on the TX ring since the last kick (each once), and the wake-up of
    /// the task that kicks: every lane that sends in one turn of the worker shares one kick.
    unkicked: RefCell<Vec<Rc<dyn Sink>>>,
    kick: Rc<tokio::sync::Notify>,
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
        let worker = WORKER.with(Cell::get);
        if worker >= xdp.0.workers {
            return Err(io::Error::other(format!("worker {worker} of {}: no queue of its own", xdp.0.workers)));
        }
        let mut umem = Umem::new(FRAMES)?;
        umem.fill_all(0..FRAMES / 2);
        // A socket closed a moment ago (the trial one of `open`, or a previous step's) frees its
        // queue only once the kernel's deferred release has run: busy until then.
        let mut tries = 0;
        while let Err(e) = umem.bind(xdp.0.ifindex, worker, xdp.0.zero_copy) {
            tries += 1;
            // Up to 10 s: the release waits for an RCU grace period, long on a loaded machine.
            if e.raw_os_error() != Some(libc::EBUSY) || tries > 2_000 {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        bpf::map_set(xdp.0.map.as_raw_fd(), worker, umem.fd())?;
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
        let kick = Rc::new(tokio::sync::Notify::new());
        let s = Rc::new(Socket {
            xdp: xdp.clone(),
            worker,
            fd,
            umem: RefCell::new(umem),
            lanes: RefCell::new(HashMap::default()),
            unkicked: RefCell::new(Vec::new()),
            kick: kick.clone(),
            free: RefCell::new(free),
            lazy: Cell::new(lazy),
            announced: Cell::new(false),
        });
        SOCKET.with(|w| *w.borrow_mut() = Rc::downgrade(&s));
        tokio::task::spawn_local(receive(s.clone()));
        tokio::task::spawn_local(kicker(Rc::downgrade(&s), kick));
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
            let read = crate::udp::xdp::now();
            for &(addr, len) in &got[..n] {
                let (stamp, frame) = umem.frame(addr, len);
                let (at, stamped) = receive_time(stamp, read);
                if let Some((port, msg)) = frame::parse(frame, target) {
                    match lanes.get(&port) {
                        Some(l) => l.deliver(msg, at, stamped),
                        None => match self.xdp.owner(port) {
                            // Another worker's lane: the interface put its answer on our queue.
                            Some(w) if w != self.worker => self.xdp.hand_over(w, port, at, stamped, msg),
                            _ => {
                                if let Some(l) = lanes.values().next() {
                                    l.stray(msg.len(), at);
                                }
                            }
                        },
                    }
                }
            }
            umem.refill(got[..n].iter().map(|g| g.0));
            total += n;
            if n < BATCH {
                break;
            }
        }
        drop(umem);
        self.read_mail(&lanes);
        for l in lanes.values() {
            l.flush_received();
        }
        total
    }

    /// Delivers the answers other workers' sockets received for this worker's lanes.
    fn read_mail(&self, lanes: &HashMap<u16, Rc<dyn Sink>, PortHash>) {
        let mailbox = &self.xdp.0.mail[self.worker as usize];
        if !mailbox.waiting.swap(false, std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let items = std::mem::take(&mut *mailbox.items.lock().unwrap_or_else(|e| e.into_inner()));
        for (port, at, stamped, msg) in items {
            match lanes.get(&port) {
                Some(l) => {
                    l.event("xdp_answers_handed_over");
                    l.deliver(&msg, at, stamped);
                }
                None => {
                    if let Some(l) = lanes.values().next() {
                        l.stray(msg.len(), at);
                    }
                }
            }
        }
    }

    /// Takes queued queries of `lane` into frames on the TX ring; the kicker task has the
    /// kernel send them once the worker's other lanes have had their turn. Returns how many
    /// went on the ring; 0 when no frame or ring slot was free.
    fn send<X: Exchange + 'static>(
        &self,
        lane: &Lane,
        rx: &Rc<LaneRx<X>>,
        tpl: &Template,
        sport: u16,
        scratch: &mut Vec<u8>,
    ) -> usize {
        let x = &*rx.x;
        let mut umem = self.umem.borrow_mut();
        let mut free = self.free.borrow_mut();
        umem.complete(&mut free);
        let room = umem.tx_room().min(free.len()).min(BATCH);
        let mut unsent = rx.unsent.borrow_mut();
        let was_empty = unsent.is_empty();
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
            unsent.push((t, scratch.len()));
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        umem.tx_commit();
        if was_empty {
            self.unkicked.borrow_mut().push(rx.clone());
            self.kick.notify_one();
        }
        n
    }

    /// Has the kernel send what the TX ring holds, and tells each lane whose frames went when
    /// they left.
    fn kick_now(&self) {
        let lanes = std::mem::take(&mut *self.unkicked.borrow_mut());
        if lanes.is_empty() {
            return;
        }
        // The frames leave during the kick (copy mode sends in the system call): their
        // departure is its start, or an answer could come back before its query left.
        let now = now();
        let failed = self.umem.borrow_mut().kick().is_err();
        for l in &lanes {
            if failed {
                l.event("xdp_send_error");
            }
            l.flush_sent(now);
        }
        // The vector's room is kept for the next turn.
        let mut u = self.unkicked.borrow_mut();
        if u.is_empty() {
            let mut lanes = lanes;
            lanes.clear();
            *u = lanes;
        } else {
            drop(u);
            self.kick.notify_one();
        }
        // And reads what has come back (no system call): a worker behind its schedule sends
        // turn after turn, and answers left on the RX ring meanwhile would overflow it (the
        // kernel drops them: timeouts that are the generator's, not the server's).
        self.drain();
    }

    fn any_in_flight(&self) -> bool {
        self.lanes.borrow().values().any(|l| l.in_flight() > 0)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // The kicker ends (it finds the socket gone).
        self.kick.notify_one();
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
                let mailbox = &s.xdp.0.mail[s.worker as usize];
                tokio::select! {
                    biased;
                    g = fd.readable() => {
                        let Ok(mut g) = g else { return };
                        s.drain();
                        g.clear_ready();
                        s.drain();
                    }
                    _ = mailbox.notify.notified() => {
                        s.drain();
                    }
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        }
        // Its lanes are gone; but while another worker's lanes still wait for answers, some may
        // arrive on this socket's queue: it keeps reading (and handing them over) until then.
        if Rc::strong_count(&s) == 1 && s.xdp.0.live_lanes.load(std::sync::atomic::Ordering::Acquire) == 0 {
            return;
        }
    }
}

/// Called by a worker whose own work is done: waits while this thread's AF_XDP socket is still
/// open, that is until no worker has lanes left (its receive task reads the answers that
/// arrive on its queue for the others' lanes and hands them over), at most `bound`.
pub async fn linger(bound: Duration) {
    let start = std::time::Instant::now();
    while SOCKET.with(|s| s.borrow().strong_count()) > 0 && start.elapsed() < bound {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A worker socket's kicker: one `sendto` for what every lane put on the TX ring in one turn
/// of the worker (it is woken by the first of them and runs after the others).
async fn kicker(s: Weak<Socket>, kick: Rc<tokio::sync::Notify>) {
    loop {
        kick.notified().await;
        let Some(s) = s.upgrade() else { return };
        s.kick_now();
    }
}

/// A hasher for source ports (a `u16` key): the port times an odd constant.
#[derive(Default, Clone, Copy)]
struct PortHasher(u64);

impl std::hash::Hasher for PortHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u16(&mut self, n: u16) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type PortHash = std::hash::BuildHasherDefault<PortHasher>;

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
    let reserve = reserve_port(xdp, src, socket.worker)?;
    let template = Template::new(xdp.0.src_mac, xdp.0.dst_mac, src, xdp.0.target);
    Ok(Prepared { socket, reserve, template })
}

/// A kernel socket on `src` holding a free source port `p` with `p % workers == worker`,
/// claimed for the lane in the run's table of ports (the ports the kernel offers are tried in
/// turn; those that do not fit are let go after). A port another lane holds on another source
/// address (`--bind`) does not fit: the RX path finds a lane by port alone.
fn reserve_port(xdp: &Xdp, src: IpAddr, worker: u32) -> io::Result<std::net::UdpSocket> {
    let workers = xdp.0.workers.max(1);
    let mut held = Vec::new();
    for _ in 0..64 * workers {
        let s = std::net::UdpSocket::bind(SocketAddr::new(src, 0))?;
        let port = s.local_addr()?.port();
        if u32::from(port) % workers == worker && xdp.claim(port, worker) {
            return Ok(s);
        }
        held.push(s);
    }
    Err(io::Error::new(io::ErrorKind::AddrNotAvailable, "no free source port for this worker's queue"))
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
    // The port was claimed when it was reserved (`reserve_port`).
    let sport = match p.reserve.local_addr() {
        Ok(a) => a.port(),
        Err(_) => return,
    };
    let rx = Rc::new(LaneRx {
        x: x.clone(),
        lane: lane.clone(),
        ids: RefCell::new(IdTable::with_capacity(64)),
        header: meter::udp_header(addr),
        unsent: RefCell::new(Vec::with_capacity(BATCH)),
        received: Cell::new((0, 0)),
        unstamped: Cell::new(0),
    });
    p.socket.lanes.borrow_mut().insert(sport, rx.clone());
    p.socket.xdp.0.live_lanes.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
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
    // What this lane put on the ring last leaves now, not with a later turn's kick.
    p.socket.kick_now();
    p.socket.lanes.borrow_mut().remove(&sport);
    p.socket.xdp.release(sport);
    p.socket.xdp.0.live_lanes.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    drop(p.reserve);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_time_is_the_programs_stamp_else_the_ring_read() {
        assert_eq!(receive_time(0, 5_000), (5_000, false), "no stamp: the read, counted as a fallback");
        assert_eq!(receive_time(4_000, 5_000), (4_000, true));
        assert_eq!(receive_time(6_000, 5_000), (5_000, true), "never after the read");
    }
}
