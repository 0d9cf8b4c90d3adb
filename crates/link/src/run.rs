//! A live link: a network namespace whose only way out is a device (TUN, or a veth pair
//! whose far end an AF_XDP socket reads: `xdp.rs`), a device on the host, and a forwarder
//! thread between them that passes every packet through the two pipes
//! (up: namespace to host; down: host to namespace) with the monotonic clock.
//!
//! Nothing it makes outlives the process: both TUN devices are non-persistent (the kernel
//! removes each when its descriptor closes, however the process ends), the veth pairs' far
//! ends live in a namespace only the process holds (removing one end removes both), and the namespace lives
//! as long as a descriptor or a process holds it (the command run inside gets SIGKILL when
//! volley exits, by PR_SET_PDEATHSIG). So a killed run leaves nothing behind for a later one
//! to clean up.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use volley_metrics::Histogram;

use crate::model::LinkConfig;
use crate::pipe::{Counters, Pipe};
use crate::sys;

/// Why a link could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("no TUN device: cannot open /dev/net/tun ({0}); the kernel's tun module is needed")]
    NoTun(io::Error),
    #[error("not permitted to {what} ({err}): volley link needs root or CAP_NET_ADMIN and CAP_SYS_ADMIN")]
    NotPermitted { what: &'static str, err: io::Error },
    #[error("cannot {what}: {err}")]
    Io { what: &'static str, err: io::Error },
    #[error("no free address block for a link in 10.213.0.0/16")]
    NoAddress,
    #[error("cannot run '{program}': {err}")]
    Spawn { program: String, err: io::Error },
    #[error("--device xdp: cannot {what} ({err}): the XDP device needs AF_XDP sockets and XDP programs in the kernel (CONFIG_XDP_SOCKETS, CONFIG_BPF_SYSCALL), veth pairs and root; --device tun does without")]
    NoXdp { what: &'static str, err: io::Error },
    #[error("unknown link device '{0}': tun or xdp")]
    UnknownDevice(String),
}

/// How packets leave the namespace and reach the host (docs/link.md, "Devices").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// A TUN device on each side: the forwarder reads and writes IP packets by system calls.
    #[default]
    Tun,
    /// A veth pair on each side and an AF_XDP socket on each pair's far end (`xdp.rs`).
    Xdp,
}

impl Device {
    /// The device `VOLLEY_LINK_DEVICE` names (tun where it is not set), for the links that
    /// `--link` makes.
    pub fn from_env() -> Result<Device, LinkError> {
        match std::env::var("VOLLEY_LINK_DEVICE") {
            Ok(v) => v.parse(),
            Err(_) => Ok(Device::Tun),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Device::Tun => "tun",
            Device::Xdp => "xdp",
        }
    }
}

impl std::str::FromStr for Device {
    type Err = LinkError;
    fn from_str(s: &str) -> Result<Device, LinkError> {
        match s.trim() {
            "tun" | "" => Ok(Device::Tun),
            "xdp" => Ok(Device::Xdp),
            o => Err(LinkError::UnknownDevice(o.to_string())),
        }
    }
}

fn xdp_err((what, err): crate::xdp::Failure) -> LinkError {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) if what != "load the XDP program" => {
            LinkError::NotPermitted { what, err }
        }
        _ => LinkError::NoXdp { what, err },
    }
}

fn sys_err(what: &'static str) -> impl FnOnce(io::Error) -> LinkError {
    move |err| match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => LinkError::NotPermitted { what, err },
        _ => LinkError::Io { what, err },
    }
}

/// The addresses of a link: a /30 of 10.213.0.0/16 used between the host and our namespace,
/// and the /126 of the same number in fd76:6c69:6e6b::/48 (`vlink`) where IPv6 works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The host's end (where the target listens).
    pub host: Ipv4Addr,
    /// The namespace's own.
    pub local: Ipv4Addr,
    /// The same over IPv6, where the kernel has it.
    pub host6: Option<Ipv6Addr>,
    pub local6: Option<Ipv6Addr>,
}

impl Addresses {
    /// The IPv6 pair of the IPv4 block of `host` (fd76:6c69:6e6b::B:1 and ::B:2).
    fn v6_of(host: Ipv4Addr) -> (Ipv6Addr, Ipv6Addr) {
        let b = ((u32::from(host) >> 2) & 0x3fff) as u16;
        (Ipv6Addr::new(0xfd76, 0x6c69, 0x6e6b, 0, 0, 0, b, 1), Ipv6Addr::new(0xfd76, 0x6c69, 0x6e6b, 0, 0, 0, b, 2))
    }
}

/// Links made by this process so far (device names and address blocks differ between them).
static MADE: AtomicU32 = AtomicU32::new(0);

/// What the forwarder saw, once it stopped.
#[derive(Debug, Clone)]
pub struct LinkReport {
    pub up: Counters,
    pub down: Counters,
    /// Time packets waited in each direction's bottleneck queue (rate or trace), ns.
    pub up_queue_delay: Histogram,
    pub down_queue_delay: Histogram,
    /// How late each packet left against its due time, ns (when the forwarder handed it to
    /// the device: a TUN write, or a frame put on the XDP TX ring, kicked with its batch).
    pub lateness: Histogram,
    /// Packets the kernel refused when written to a device (or, with XDP, that found no room
    /// on the TX ring).
    pub write_errors: u64,
    /// Packets still held when the link stopped (neither delivered nor dropped).
    pub held_at_end: u64,
    /// The forwarder ran at real-time priority (SCHED_FIFO).
    pub realtime: bool,
    /// CPU time of the forwarder thread (user + system).
    pub cpu: Duration,
    pub elapsed: Duration,
    /// The machine's steal time over the link's life (a VM's CPU time its hypervisor took:
    /// the forwarder did not run then either), where the kernel counts it.
    pub host: Option<volley_metrics::HostInfo>,
    /// The link as it stopped, as a [`Link::sample`] would have seen it then: its histograms
    /// since the last sample, so that the samples and this one add up to the report.
    pub last: LinkSample,
}

/// The link at one moment (see [`Link::sample`]): counters since the start, the queues now,
/// and the histograms of the interval since the previous sample.
#[derive(Debug, Clone)]
pub struct LinkSample {
    /// Since the link's start.
    pub up: Counters,
    pub down: Counters,
    /// Packets in each direction's bottleneck queue now (rate or trace).
    pub up_queued: u64,
    pub down_queued: u64,
    /// Packets held past their due time now, both directions (the emulator's backlog).
    pub overdue: u64,
    /// Since the previous sample: lateness and each direction's queueing delay, ns.
    pub lateness: Histogram,
    pub up_queue_delay: Histogram,
    pub down_queue_delay: Histogram,
    /// The forwarder's CPU time so far, and whether it runs at real-time priority.
    pub cpu: Duration,
    pub realtime: bool,
}

/// A running link. Dropping it stops the forwarder; its devices and namespace go with it.
pub struct Link {
    pub addrs: Addresses,
    /// The host's device (TUN, or the host's end of a veth pair).
    pub host_dev: String,
    pub device: Device,
    pub seed: u64,
    ns: OwnedFd,
    /// With the XDP device: the forwarder's own namespace (its veth ends go with it).
    _fwd_ns: Option<OwnedFd>,
    stop_fd: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    samples: Mutex<mpsc::Sender<mpsc::Sender<LinkSample>>>,
    thread: Option<JoinHandle<io::Result<LinkReport>>>,
}

impl Link {
    /// Makes the namespace and the devices and starts forwarding through `cfg`, over the
    /// device `VOLLEY_LINK_DEVICE` names (TUN by default).
    pub fn start(cfg: LinkConfig, seed: u64) -> Result<Link, LinkError> {
        Link::start_on(Device::from_env()?, cfg, seed)
    }

    /// [`Link::start`] over `device`.
    pub fn start_on(device: Device, cfg: LinkConfig, seed: u64) -> Result<Link, LinkError> {
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let host_dev = format!("vl{pid}h{n}");
        let host_dev = if host_dev.len() >= libc::IFNAMSIZ { format!("vl{}h{n}", pid % 1_000_000) } else { host_dev };
        let addrs = pick_addresses(pid, n)?;
        let (ns, fwd_ns, ns_dev, host_end, addrs) = match device {
            Device::Tun => {
                let (ns, ns_tun, host_tun, addrs) = tun_devices(&host_dev, addrs)?;
                (ns, None, Dev::Tun(ns_tun), Dev::Tun(host_tun), addrs)
            }
            Device::Xdp => {
                let (ns, fwd, a, b, addrs) = xdp_devices(&host_dev, addrs)?;
                (ns, Some(fwd), Dev::Xdp(Box::new(a)), Dev::Xdp(Box::new(b)), addrs)
            }
        };
        let stop_fd = Arc::new(sys::eventfd().map_err(sys_err("make an eventfd"))?);
        let stop = Arc::new(AtomicBool::new(false));
        let clock = Instant::now();
        let up = Pipe::new(cfg.up, seed, 0);
        // Each direction its own stream of choices, both from the one seed.
        let down = Pipe::new(cfg.down, seed ^ 0xD0D0_D0D0_D0D0_D0D0, 0);
        let (sf, st) = (stop_fd.clone(), stop.clone());
        let (samples, requests) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("volley-link".into())
            .spawn(move || {
                forward(Forwarder { ns_dev, host_dev: host_end, stop_fd: sf, stop: st, requests, up, down, clock })
            })
            .map_err(|err| LinkError::Io { what: "start the forwarder thread", err })?;
        Ok(Link {
            addrs,
            host_dev,
            device,
            seed,
            ns,
            _fwd_ns: fwd_ns,
            stop_fd,
            stop,
            samples: Mutex::new(samples),
            thread: Some(thread),
        })
    }
    /// The namespace's descriptor (for `setns`).
    pub fn netns(&self) -> &OwnedFd {
        &self.ns
    }

    /// Moves the calling thread into the link's namespace: sockets it makes afterwards reach
    /// the host only through the link.
    pub fn enter(&self) -> io::Result<()> {
        sys::enter_netns(self.ns.as_raw_fd())
    }

    /// A command that runs inside the namespace, with `VOLLEY_LINK_HOST` and
    /// `VOLLEY_LINK_LOCAL` set, and that is killed if volley dies.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("VOLLEY_LINK_HOST", self.addrs.host.to_string()).env("VOLLEY_LINK_LOCAL", self.addrs.local.to_string());
        if let (Some(h), Some(l)) = (self.addrs.host6, self.addrs.local6) {
            c.env("VOLLEY_LINK_HOST6", h.to_string()).env("VOLLEY_LINK_LOCAL6", l.to_string());
        }
        let ns = self.ns.as_raw_fd();
        // SAFETY: between fork and exec only async-signal-safe system calls (setns, prctl).
        unsafe {
            c.pre_exec(move || {
                sys::enter_netns(ns)?;
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                Ok(())
            });
        }
        c
    }

    /// Runs `argv` in the namespace until it ends, and volley waits for it, so that the link is
    /// taken down after. SIGTERM and SIGHUP are passed on to it. SIGINT is not, as a shell
    /// does with its foreground job: Ctrl-C reaches the command from the terminal itself (same
    /// process group), and a second SIGINT would make a `volley run` inside quit at once,
    /// without its results.
    pub fn run_command(&self, argv: &[String]) -> Result<ExitStatus, LinkError> {
        let (program, args) = argv.split_first().ok_or(LinkError::Spawn {
            program: String::new(),
            err: io::Error::new(io::ErrorKind::InvalidInput, "no command"),
        })?;
        let mut sigs = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
            .map_err(|err| LinkError::Io { what: "handle signals", err })?;
        let handle = sigs.handle();
        let mut child = self
            .command(program)
            .args(args)
            .spawn()
            .map_err(|err| LinkError::Spawn { program: program.clone(), err })?;
        let pid = child.id() as libc::pid_t;
        let relay = std::thread::spawn(move || {
            for s in sigs.forever() {
                if s != libc::SIGINT {
                    // SAFETY: kill(2) of our own child, which we have not yet reaped.
                    unsafe { libc::kill(pid, s) };
                }
            }
        });
        let status = child.wait().map_err(|err| LinkError::Io { what: "wait for the command", err });
        handle.close();
        let _ = relay.join();
        status
    }

    /// The link now, as the forwarder sees it between two packets (see [`LinkSample`]); None
    /// when the forwarder has stopped. The interval histograms start again.
    pub fn sample(&self) -> Option<LinkSample> {
        let (tx, rx) = mpsc::channel();
        self.samples.lock().ok()?.send(tx).ok()?;
        sys::eventfd_signal(&self.stop_fd);
        rx.recv_timeout(Duration::from_secs(1)).ok()
    }

    /// Stops forwarding and returns what the link saw. The devices and the namespace go when
    /// the link is dropped (at the end of this call).
    pub fn finish(mut self) -> Result<LinkReport, LinkError> {
        self.stop_thread().map_err(|err| LinkError::Io { what: "forward packets", err })
    }

    fn stop_thread(&mut self) -> io::Result<LinkReport> {
        self.stop.store(true, Ordering::Release);
        sys::eventfd_signal(&self.stop_fd);
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err(io::Error::other("the forwarder panicked"))),
            None => Err(io::Error::other("already stopped")),
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop_thread();
        }
    }
}

/// Packets each TUN device holds for the forwarder before the kernel drops what comes next
/// (the kernel's default for TUN is 500). Packets wait there while the forwarder is busy or
/// not scheduled; dropped there, they would be lost before the emulator saw them and counted
/// by nobody: at 11,000 packets/s a stall of 45 ms (this VM has them) overflows 500. This
/// queue is not the emulated link's (its bottleneck queue is `queue=`): a packet read late
/// from it is counted as arriving when read (docs/link.md, "What it cannot do").
const TUN_QUEUE: u32 = 10_000;

/// The TUN devices of a link: the namespace (with its device, link0) and the host's device.
fn tun_devices(host_dev: &str, addrs: Addresses) -> Result<(OwnedFd, OwnedFd, OwnedFd, Addresses), LinkError> {
    // An early, clear error when there is no TUN at all.
    if let Err(e) = std::fs::metadata("/dev/net/tun") {
        return Err(LinkError::NoTun(e));
    }
    let host_tun = sys::tun_create(host_dev).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => LinkError::NoTun(e),
        _ => sys_err("make a TUN device")(e),
    })?;
    sys::set_txqueuelen(host_dev, TUN_QUEUE).map_err(sys_err("configure the host's TUN device"))?;
    let (host6, local6) = Addresses::v6_of(addrs.host);
    let host_v6 = sys::configure_p2p(host_dev, addrs.host, addrs.local, Some(host6))
        .map_err(sys_err("configure the host's TUN device"))?;
    let (ns, (ns_tun, ns_v6)) = sys::in_new_netns(|| {
        let tun = sys::tun_create("link0")?;
        sys::set_txqueuelen("link0", TUN_QUEUE)?;
        let v6 = sys::configure_p2p("link0", addrs.local, addrs.host, host_v6.then_some(local6))?;
        sys::link_up("lo")?;
        Ok((tun, v6))
    })
    .map_err(sys_err("make a network namespace"))?;
    let v6 = host_v6 && ns_v6;
    let addrs = Addresses { host6: v6.then_some(host6), local6: v6.then_some(local6), ..addrs };
    Ok((ns, ns_tun, host_tun, addrs))
}

/// The XDP device of a link (see `xdp.rs`): the namespace (with link0, a veth end), the
/// forwarder's namespace (a0 and b0, the far ends, each with its AF_XDP socket), and the
/// host's end of the second pair, `host_dev`. Returns the namespace, the forwarder's, the
/// port on a0 (to the namespace) and the one on b0 (to the host).
fn xdp_devices(
    host_dev: &str,
    addrs: Addresses,
) -> Result<(OwnedFd, OwnedFd, crate::xdp::Port, crate::xdp::Port, Addresses), LinkError> {
    let host_ns = sys::current_netns().map_err(sys_err("open the host's network namespace"))?;
    let (ns, ()) = sys::in_new_netns(|| sys::link_up("lo")).map_err(sys_err("make a network namespace"))?;
    let (fwd, r) = sys::in_new_netns(|| {
        let r = (|| {
            let veth = |what| move |e| (what, e);
            sys::veth_create("a0", "link0", ns.as_raw_fd()).map_err(veth("make a veth pair"))?;
            sys::veth_create("b0", host_dev, host_ns.as_raw_fd()).map_err(veth("make a veth pair"))?;
            for d in ["a0", "b0"] {
                // Nothing of the forwarder's namespace's own goes out of them.
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{d}/disable_ipv6"), "1");
                sys::link_up(d).map_err(veth("bring a veth end up"))?;
            }
            let a = crate::xdp::Port::open("a0")?;
            let b = crate::xdp::Port::open("b0")?;
            let macs = (sys::hwaddr("a0"), sys::hwaddr("b0"));
            let macs = (macs.0.map_err(veth("read a MAC address"))?, macs.1.map_err(veth("read a MAC address"))?);
            Ok::<_, crate::xdp::Failure>((a, b, macs))
        })();
        Ok(r)
    })
    .map_err(sys_err("make a network namespace"))?;
    let (mut a, mut b, (a_mac, b_mac)) = r.map_err(|(what, err)| match what {
        "make a veth pair" | "bring a veth end up" | "read a MAC address" => sys_err(what)(err),
        _ => xdp_err((what, err)),
    })?;
    let (host6, local6) = Addresses::v6_of(addrs.host);
    sys::ethernet_plain(host_dev).map_err(sys_err("configure the host's veth end"))?;
    let host_v6 =
        sys::configure_lan(host_dev, addrs.host, Some(host6)).map_err(sys_err("configure the host's veth end"))?;
    let host_mac = sys::hwaddr(host_dev).map_err(sys_err("configure the host's veth end"))?;
    let (ns_v6, ns_mac) = sys::in_netns(&ns, || {
        sys::ethernet_plain("link0")?;
        let v6 = sys::configure_lan("link0", addrs.local, host_v6.then_some(local6))?;
        // Carrier (both ends up) before the command's first packet.
        sys::wait_running("link0", Duration::from_secs(2))?;
        Ok((v6, sys::hwaddr("link0")?))
    })
    .map_err(sys_err("configure the namespace's veth end"))?;
    sys::wait_running(host_dev, Duration::from_secs(2)).map_err(sys_err("configure the host's veth end"))?;
    a.address(ns_mac, a_mac);
    b.address(host_mac, b_mac);
    let v6 = host_v6 && ns_v6;
    let addrs = Addresses { host6: v6.then_some(host6), local6: v6.then_some(local6), ..addrs };
    Ok((ns, fwd, a, b, addrs))
}

/// A /30 of 10.213.0.0/16 that no interface here uses: the block is chosen from the process id
/// and the link's number (two links never share one), skipping any block in use.
fn pick_addresses(pid: u32, n: u32) -> Result<Addresses, LinkError> {
    let used = sys::host_addresses().map_err(sys_err("list the host's addresses"))?;
    let blocks = 1u32 << 14;
    let first = (pid.wrapping_mul(64).wrapping_add(n)) % blocks;
    for i in 0..blocks {
        let b = (first + i) % blocks;
        let base = u32::from(Ipv4Addr::new(10, 213, 0, 0)) + b * 4;
        if used.iter().any(|a| u32::from(*a) & !3 == base) {
            continue;
        }
        return Ok(Addresses {
            host: Ipv4Addr::from(base + 1),
            local: Ipv4Addr::from(base + 2),
            host6: None,
            local6: None,
        });
    }
    Err(LinkError::NoAddress)
}

/// One side of the forwarder.
enum Dev {
    Tun(OwnedFd),
    Xdp(Box<crate::xdp::Port>),
}

impl Dev {
    /// Readable when a packet waits.
    fn fd(&self) -> RawFd {
        match self {
            Dev::Tun(fd) => fd.as_raw_fd(),
            Dev::Xdp(p) => p.fd(),
        }
    }

    /// The next packet into `buf`: its length, or None when none waits.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            Dev::Tun(fd) => loop {
                // SAFETY: read(2) into a buffer we own, of its length.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n >= 0 {
                    return Ok(Some(n as usize));
                }
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            },
            Dev::Xdp(p) => Ok(p.recv(buf)),
        }
    }

    /// Sends `packet` (a TUN device at once; XDP with the next [`Dev::flush`]); false when the
    /// kernel refused it.
    fn send(&mut self, packet: &[u8]) -> bool {
        match self {
            // SAFETY: write(2) of a packet we own.
            Dev::Tun(fd) => unsafe { libc::write(fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) >= 0 },
            Dev::Xdp(p) => p.send(packet),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Dev::Tun(_) => Ok(()),
            Dev::Xdp(p) => p.flush(),
        }
    }
}

struct Forwarder {
    ns_dev: Dev,
    host_dev: Dev,
    stop_fd: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    requests: mpsc::Receiver<mpsc::Sender<LinkSample>>,
    up: Pipe<Vec<u8>>,
    down: Pipe<Vec<u8>>,
    clock: Instant,
}

/// Below this wait the forwarder spins instead of sleeping (a sleep's wake-up costs more).
const SPIN_NS: u64 = 20_000;
/// The most a sleep is cut short to absorb late wake-ups (the rest spun).
const MAX_EARLY_NS: u64 = 200_000;
/// After a packet in or out, the forwarder polls the devices this long for the next one
/// before it sleeps: a wake-up from another core costs tens of µs on a VM, and the time a
/// packet is read is its arrival time.
const POLL_NS: u64 = 50_000;
/// It polls at most 1/POLL_SHARE of each POLL_PERIOD_NS (at real-time priority, the rest is
/// left to the threads that share its core).
const POLL_PERIOD_NS: u64 = 1_000_000;
const POLL_SHARE: u64 = 2;
/// The share of each POLL_PERIOD_NS, in per mille, the forwarder may be awake for (working,
/// polling or spinning to a due time) before it sleeps to the next due time instead of
/// spinning to it. At real-time priority the kernel throttles a thread that runs more than
/// `sched_rt_runtime_us` of each `sched_rt_period_us` (95 % by default) and then stops it for
/// the rest of the period (50 ms): with many packets due a few µs apart the forwarder spun
/// past that and every packet of the next 50 ms left late (issue 13's 4g capacity).
const DEFAULT_AWAKE_PERMILLE: u64 = 850;
/// Packets read from one side before the other gets its turn.
const BATCH: usize = 8;
/// Packet buffers kept for reuse.
const POOL: usize = 4096;

fn forward(mut f: Forwarder) -> io::Result<LinkReport> {
    // Wake-ups to the nanosecond asked for, not 50 us later (the default timer slack).
    // SAFETY: prctl on the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    // Woken ahead of ordinary threads (the generator's, the server's) when a packet is due:
    // real-time priority where permitted (root), best effort. It spins no longer than a
    // wake-up's lateness (at most MAX_EARLY_NS) before each due time.
    // A core of its own (VOLLEY_LINK_CPU): nothing there to wake ahead of, so no real-time
    // priority (whose throttling would stop it), and it never sleeps (below).
    let own_core = std::env::var("VOLLEY_LINK_CPU").ok().and_then(|s| s.trim().parse::<usize>().ok());
    let realtime = own_core.is_none() && std::env::var_os("VOLLEY_LINK_NO_RT").is_none() && {
        let p = libc::sched_param { sched_priority: 10 };
        // SAFETY: sched_setscheduler(2) on the calling thread with a param we own.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
    };
    // A core of its own where asked (VOLLEY_LINK_CPU=N): the forwarder's capacity is then
    // that core's, whatever runs where (bench/link_capacity.sh).
    if let Some(cpu) = own_core {
        sys::pin_to(cpu);
    }
    let now = |c: &Instant| c.elapsed().as_nanos() as u64;
    let steal = volley_metrics::StealClock::now();
    let mut buf = vec![0u8; 65536];
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut lateness = Histogram::new(3);
    // Since the last sample.
    let mut late_i = Histogram::new(3);
    let mut write_errors = 0u64;
    let (ns_fd, host_fd) = (f.ns_dev.fd(), f.host_dev.fd());
    // How late a timed sleep's wake-up comes, ns (a running estimate).
    let mut wake_late = 0u64;
    let poll_ns: u64 =
        std::env::var("VOLLEY_LINK_POLL_US").ok().and_then(|s| s.parse().ok()).unwrap_or(POLL_NS / 1000) * 1000;
    // Polling for the next packet takes the core from whatever shares it: only where the
    // forwarder may run on another core than the threads it serves (not pinned with them to
    // one core), or has one of its own.
    let poll_ns = if own_core.is_some() || sys::cpus_allowed() >= 2 { poll_ns } else { 0 };
    // The time spent polling in the current POLL_PERIOD_NS, ns (at most POLL_SHARE of it),
    // and asleep in it (the rest is awake: at most `awake_budget`).
    let (mut period_start, mut polled, mut asleep) = (0u64, 0u64, 0u64);
    let awake_budget = POLL_PERIOD_NS * awake_permille(realtime) / 1000;
    let mut poller = sys::Poller::new(&[(ns_fd, 0), (host_fd, 1), (f.stop_fd.as_raw_fd(), 2)])?;
    // Which devices to read on the next pass: after a sleep, those epoll saw readable.
    let mut readable = [true, true];
    // When the last packet was read or written, ns.
    let mut last_pkt = 0u64;
    loop {
        let pass_start = now(&f.clock);
        while let Ok(reply) = f.requests.try_recv() {
            let _ = reply.send(take_sample(&mut f, &mut late_i, realtime));
        }
        // In: what each side has sent, at most BATCH from a side before what is due is
        // written (so that a backlog does not make the first packets read late). After a
        // sleep only the sides epoll saw readable; a side that had more is read again on the
        // next pass, without a sleep in between.
        for (i, (dev, pipe)) in [(&mut f.ns_dev, &mut f.up), (&mut f.host_dev, &mut f.down)].into_iter().enumerate() {
            if !readable[i] {
                continue;
            }
            readable[i] = false;
            for k in 0..BATCH {
                if k == BATCH - 1 {
                    readable[i] = true;
                }
                let Some(n) = dev.recv(&mut buf)? else {
                    readable[i] = false;
                    break;
                };
                let mut v = pool.pop().unwrap_or_default();
                v.clear();
                v.extend_from_slice(&buf[..n]);
                let t = now(&f.clock);
                pipe.push(t, v);
                last_pkt = t;
            }
        }
        // Out: what is due.
        let t = now(&f.clock);
        for (dev, pipe) in [(&mut f.host_dev, &mut f.up), (&mut f.ns_dev, &mut f.down)] {
            while let Some(d) = pipe.pop_due(t) {
                let at = now(&f.clock);
                if !dev.send(&d.packet) {
                    write_errors += 1;
                }
                last_pkt = at;
                lateness.record(at.saturating_sub(d.due));
                late_i.record(at.saturating_sub(d.due));
                if pool.len() < POOL {
                    pool.push(d.packet);
                }
            }
            // The XDP device's frames leave here, a system call for the batch.
            dev.flush()?;
        }
        if f.stop.load(Ordering::Acquire) {
            break;
        }
        if readable[0] || readable[1] {
            // A device had more than a batch: read on.
            continue;
        }
        // Wait: for a packet, for the next due time, or for the stop signal.
        let next = [f.up.next_due(), f.down.next_due()].into_iter().flatten().min();
        let t = now(&f.clock);
        let wait = next.map(|d| d.saturating_sub(t));
        // A sleep's wake-up comes late (on a VM tens of µs, even at real-time priority): the
        // forwarder sleeps that much less than the wait and spins the rest, so that a packet
        // leaves on time. How late wake-ups come is learnt as it runs (`wake_late`).
        // On a core of its own it polls and spins all the time: a sleeping vCPU's wake-up
        // comes hundreds of µs late at its tail on a VM.
        if own_core.is_some() {
            readable = [true, true];
            continue;
        }
        let early = (wake_late + wake_late / 2).min(MAX_EARLY_NS);
        if t.saturating_sub(period_start) >= POLL_PERIOD_NS {
            (period_start, polled, asleep) = (t, 0, 0);
        }
        // Awake for less than its budget of this period: it may spin to a due time.
        let may_spin = t.saturating_sub(period_start).saturating_sub(asleep) < awake_budget;
        if may_spin && wait.is_some_and(|w| w < SPIN_NS.max(early)) {
            readable = [true, true];
            continue;
        }
        // A packet in the last `poll_ns`: poll for the next one rather than sleep, for a
        // share of the time at most.
        if may_spin && t.saturating_sub(last_pkt) < poll_ns && polled < POLL_PERIOD_NS / POLL_SHARE {
            polled += t.saturating_sub(pass_start);
            readable = [true, true];
            continue;
        }
        // Out of its budget a sleep is not cut short: it may wake late, but it sleeps.
        let sleep = wait.map(|w| if may_spin { w - early } else { w });
        let ready = poller.wait(sleep)?;
        asleep += now(&f.clock).saturating_sub(t);
        if let (0, Some(w)) = (ready, sleep) {
            // Timed out: how late the wake-up came, into the running estimate (1/8 weight).
            let over = now(&f.clock).saturating_sub(t + w).min(MAX_EARLY_NS);
            wake_late = wake_late - wake_late / 8 + over / 8;
        }
        let any = ready & sys::Poller::INTERRUPTED != 0;
        readable = [any || ready & 1 != 0, any || ready & 2 != 0];
        if ready & 4 != 0 {
            // Stopped or asked for a sample: the loop checks both. When stopped, one last
            // pass: what is due now still leaves.
            sys::eventfd_drain(&f.stop_fd);
            continue;
        }
    }
    let held_at_end = (f.up.len() + f.down.len()) as u64;
    let last = take_sample(&mut f, &mut late_i, realtime);
    let cpu = last.cpu;
    Ok(LinkReport {
        up: f.up.counters,
        down: f.down.counters,
        up_queue_delay: f.up.queue_delay.clone(),
        down_queue_delay: f.down.queue_delay.clone(),
        lateness,
        write_errors,
        held_at_end,
        realtime,
        cpu,
        elapsed: f.clock.elapsed(),
        host: steal.and_then(|s| s.since()),
        last,
    })
}

/// The link now (see [`LinkSample`]); the histograms since the previous sample start again.
fn take_sample(f: &mut Forwarder, late_i: &mut Histogram, realtime: bool) -> LinkSample {
    let t = f.clock.elapsed().as_nanos() as u64;
    LinkSample {
        up: f.up.counters,
        down: f.down.counters,
        up_queued: f.up.queued(t) as u64,
        down_queued: f.down.queued(t) as u64,
        overdue: (f.up.overdue(t) + f.down.overdue(t)) as u64,
        lateness: std::mem::replace(late_i, Histogram::new(3)),
        up_queue_delay: std::mem::replace(&mut f.up.queue_delay_since, Histogram::new(3)),
        down_queue_delay: std::mem::replace(&mut f.down.queue_delay_since, Histogram::new(3)),
        cpu: thread_cpu(),
        realtime,
    }
}

/// The forwarder's awake budget per POLL_PERIOD_NS, per mille: [`DEFAULT_AWAKE_PERMILLE`], and
/// at real-time priority no more than the kernel's real-time share less 5 % (where the kernel
/// throttles: `sched_rt_runtime_us` not -1). `VOLLEY_LINK_AWAKE_PERMILLE` sets it.
fn awake_permille(realtime: bool) -> u64 {
    if let Some(v) = std::env::var("VOLLEY_LINK_AWAKE_PERMILLE").ok().and_then(|s| s.trim().parse::<u64>().ok()) {
        return v.min(1000);
    }
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<i64>().ok());
    match (realtime, read("/proc/sys/kernel/sched_rt_runtime_us"), read("/proc/sys/kernel/sched_rt_period_us")) {
        (true, Some(r), Some(p)) if r >= 0 && p > 0 => {
            DEFAULT_AWAKE_PERMILLE.min((r as u64 * 1000 / p as u64).saturating_sub(50))
        }
        _ => DEFAULT_AWAKE_PERMILLE,
    }
}

/// CPU time of the calling thread (user + system).
fn thread_cpu() -> Duration {
    // SAFETY: getrusage(2) of the calling thread into a struct we own.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut u);
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}
