//! The system side: TUN devices, their addresses, and network namespaces, by ioctl and
//! unshare/setns (no `ip` commands, no netlink).

use std::ffi::CString;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name '{name}'")));
    }
    // SAFETY: ifreq is plain old data; all zeros is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

/// Creates a TUN device (IPv4/IPv6 packets, no packet information header), non-blocking, not
/// persistent: it disappears when the descriptor is closed, whatever ends the process. Made in
/// the network namespace of the calling thread.
pub fn tun_create(name: &str) -> io::Result<OwnedFd> {
    let path = CString::new("/dev/net/tun").expect("no NUL");
    // SAFETY: a plain open(2) of a NUL-terminated path.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
    // SAFETY: fd was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads an ifreq we own.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &r) })?;
    Ok(fd)
}

fn sockaddr(a: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(a).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; the bytes are a valid sockaddr.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// An AF_INET datagram socket for interface ioctls (in the calling thread's namespace).
fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: just created, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ioctl_ifreq(s: &OwnedFd, req: libc::c_ulong, r: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: the interface ioctls read or write the ifreq we own.
    cvt(unsafe { libc::ioctl(s.as_raw_fd(), req as _, r as *mut libc::ifreq) }).map(|_| ())
}

/// SIOCSIFTXQLEN (linux/sockios.h).
const SIOCSIFTXQLEN: libc::c_ulong = 0x8943;

/// Sets how many packets interface `name` queues for its reader (a TUN device: packets the
/// kernel sent into it and the forwarder has not read yet).
pub fn set_txqueuelen(name: &str, len: u32) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_ifindex = len as libc::c_int;
    ioctl_ifreq(&s, SIOCSIFTXQLEN, &mut r)
}

/// Brings an interface up (and running).
pub fn link_up(name: &str) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    ioctl_ifreq(&s, libc::SIOCGIFFLAGS, &mut r)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { r.ifr_ifru.ifru_flags };
    r.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    ioctl_ifreq(&s, libc::SIOCSIFFLAGS, &mut r)
}

/// Gives a point-to-point interface its address and its peer's (a /32 each: the kernel adds
/// the route to the peer through this interface), and with `v6` an IPv6 address too (see
/// [`configure_v6`]), and brings it up. Returns whether the interface has its IPv6 address:
/// where it cannot (no IPv6 in the kernel), IPv6 is off on it.
pub fn configure_p2p(name: &str, local: Ipv4Addr, peer: Ipv4Addr, v6: Option<Ipv6Addr>) -> io::Result<bool> {
    configure(name, local, Some(peer), Ipv4Addr::new(255, 255, 255, 255), v6)
}

/// Gives interface `name` its IPv4 address `local` with `mask` (and on a point-to-point
/// interface its `peer`'s), with `v6` an IPv6 address too (without it, or where the kernel
/// has no IPv6, IPv6 is off on it), and brings it up. Returns whether it has its IPv6 address.
fn configure(
    name: &str,
    local: Ipv4Addr,
    peer: Option<Ipv4Addr>,
    mask: Ipv4Addr,
    v6: Option<Ipv6Addr>,
) -> io::Result<bool> {
    let has_v6 = v6.is_some_and(|a| configure_v6(name, a).is_ok());
    if !has_v6 {
        // Best effort: without IPv6 in the kernel the file is not there.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
    }
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_addr = sockaddr(local);
    ioctl_ifreq(&s, libc::SIOCSIFADDR, &mut r)?;
    if let Some(peer) = peer {
        let mut r = ifreq(name)?;
        r.ifr_ifru.ifru_dstaddr = sockaddr(peer);
        ioctl_ifreq(&s, libc::SIOCSIFDSTADDR, &mut r)?;
    }
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_netmask = sockaddr(mask);
    ioctl_ifreq(&s, libc::SIOCSIFNETMASK, &mut r)?;
    link_up(name)?;
    Ok(has_v6)
}

/// Gives an interface an IPv6 address in a /126 it shares with its peer (the kernel adds the
/// prefix's route through it), with no link-local address, no duplicate address detection
/// (usable at once), no router solicitations and no autoconfiguration: IPv6's own chatter
/// stays off the link.
pub fn configure_v6(name: &str, local: Ipv6Addr) -> io::Result<()> {
    for (key, v) in [
        ("disable_ipv6", "0"),
        ("addr_gen_mode", "1"),
        ("accept_dad", "0"),
        ("router_solicitations", "0"),
        ("accept_ra", "0"),
        ("autoconf", "0"),
    ] {
        std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/{key}"), v)?;
    }
    let cname = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: if_nametoindex(3) of a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket(2) with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: just created, owned by nothing else.
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    let r = libc::in6_ifreq {
        ifr6_addr: libc::in6_addr { s6_addr: local.octets() },
        ifr6_prefixlen: 126,
        ifr6_ifindex: index as libc::c_int,
    };
    // SAFETY: SIOCSIFADDR on an AF_INET6 socket reads the in6_ifreq we own.
    cvt(unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFADDR as _, &r) }).map(|_| ())
}

/// The IPv4 addresses of this namespace's interfaces.
pub fn host_addresses() -> io::Result<Vec<Ipv4Addr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    cvt(unsafe { libc::getifaddrs(&mut list) })?;
    let mut out = Vec::new();
    let mut p = list;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: a non-null ifa_addr points at a sockaddr of its family.
            let fam = unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int;
            if fam == libc::AF_INET {
                // SAFETY: AF_INET: the sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// Runs `f` on a new thread inside a new network namespace; returns the namespace (a
/// descriptor that keeps it alive) and what `f` returned. Network namespaces are per thread:
/// the caller's stays as it was.
pub fn in_new_netns<R: Send>(f: impl FnOnce() -> io::Result<R> + Send) -> io::Result<(OwnedFd, R)> {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare(2) of this thread's network namespace only.
            cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
            let r = f()?;
            let path = CString::new("/proc/thread-self/ns/net").expect("no NUL");
            // SAFETY: open(2) of a NUL-terminated path.
            let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
            // SAFETY: just opened, owned by nothing else.
            Ok((unsafe { OwnedFd::from_raw_fd(fd) }, r))
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
    })
}

/// Runs `f` on a new thread inside the network namespace `ns` (the caller's stays as it was).
pub fn in_netns<R: Send>(ns: &OwnedFd, f: impl FnOnce() -> io::Result<R> + Send) -> io::Result<R> {
    let ns = ns.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
    })
}

/// Moves the calling thread into the network namespace `ns` (sockets it makes afterwards live
/// there).
pub fn enter_netns(ns: RawFd) -> io::Result<()> {
    // SAFETY: setns(2) on a namespace descriptor; affects the calling thread only.
    cvt(unsafe { libc::setns(ns, libc::CLONE_NEWNET) }).map(|_| ())
}

/// An eventfd: wakes the forwarder (to stop, or for a sample).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) with constant arguments.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: just created, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Signals an eventfd.
pub fn eventfd_signal(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: an 8-byte write from a buffer we own.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}

/// Reads an eventfd back to zero (non-blocking).
pub fn eventfd_drain(fd: &OwnedFd) {
    let mut v = [0u8; 8];
    // SAFETY: an 8-byte read into a buffer we own.
    let _ = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
}

/// An epoll instance watching descriptors for input (level-triggered), each with a token.
pub struct Poller {
    ep: OwnedFd,
    /// epoll_pwait2(2) is there (Linux 5.11): sleeps to the nanosecond; without it, epoll_wait's
    /// whole milliseconds, rounded down (the forwarder spins the rest).
    pwait2: bool,
}

impl Poller {
    /// What [`Poller::wait`] returns when a signal interrupted it (the tokens are below 63).
    pub const INTERRUPTED: u64 = 1 << 63;

    pub fn new(fds: &[(RawFd, u64)]) -> io::Result<Poller> {
        // SAFETY: epoll_create1(2) with a constant flag.
        let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: just created, owned by nothing else.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        for &(fd, token) in fds {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
            // SAFETY: epoll_ctl(2) with an event we own.
            cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        }
        Ok(Poller { ep, pwait2: true })
    }

    /// Waits up to `timeout` ns (None: until an event) and returns the tokens of the ready
    /// descriptors as a bit set (bit `token`): 0 when the time ran out, [`Poller::INTERRUPTED`]
    /// when a signal came.
    pub fn wait(&mut self, timeout: Option<u64>) -> io::Result<u64> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let n = loop {
            let r = if self.pwait2 {
                let ts = timeout
                    .map(|w| libc::timespec { tv_sec: (w / 1_000_000_000) as _, tv_nsec: (w % 1_000_000_000) as _ });
                let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
                // SAFETY: epoll_pwait2(2) into an array we own, with a timespec we own (or none)
                // and no signal mask.
                unsafe {
                    libc::syscall(
                        libc::SYS_epoll_pwait2,
                        self.ep.as_raw_fd(),
                        evs.as_mut_ptr(),
                        evs.len() as libc::c_int,
                        tsp,
                        std::ptr::null::<libc::sigset_t>(),
                        0usize,
                    ) as libc::c_int
                }
            } else {
                let ms = timeout.map_or(-1, |w| (w / 1_000_000).min(i32::MAX as u64) as libc::c_int);
                // SAFETY: epoll_wait(2) into an array we own.
                unsafe { libc::epoll_wait(self.ep.as_raw_fd(), evs.as_mut_ptr(), evs.len() as libc::c_int, ms) }
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ENOSYS) if self.pwait2 => {
                        self.pwait2 = false;
                        continue;
                    }
                    Some(libc::EINTR) => return Ok(Self::INTERRUPTED),
                    _ => return Err(e),
                }
            }
            break r as usize;
        };
        Ok(evs[..n].iter().fold(0, |m, e| m | 1u64 << e.u64))
    }
}

/// Pins the calling thread to one CPU (best effort: a CPU out of range is ignored).
pub fn pin_to(cpu: usize) {
    if cpu >= libc::CPU_SETSIZE as usize {
        return;
    }
    // SAFETY: a cpu_set_t we own, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// How many CPUs the calling thread may run on.
pub fn cpus_allowed() -> usize {
    // SAFETY: sched_getaffinity(2) into a cpu_set_t we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 1;
        }
        libc::CPU_COUNT(&set) as usize
    }
}

/// The index of interface `name` in the calling thread's namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let cname = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: if_nametoindex(3) of a NUL-terminated name.
    match unsafe { libc::if_nametoindex(cname.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// The MAC address of interface `name`.
pub fn hwaddr(name: &str) -> io::Result<[u8; 6]> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    ioctl_ifreq(&s, libc::SIOCGIFHWADDR, &mut r)?;
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
    let d = unsafe { r.ifr_ifru.ifru_hwaddr.sa_data };
    Ok([d[0] as u8, d[1] as u8, d[2] as u8, d[3] as u8, d[4] as u8, d[5] as u8])
}

/// Makes an Ethernet interface one that resolves no neighbours (IFF_NOARP: no ARP, no IPv6
/// neighbour discovery; the kernel addresses its frames to the interface's own MAC address,
/// which the link's forwarder rewrites) and that computes its checksums in software
/// (`ethtool -K NAME tx off`: a frame taken by XDP before any device computed its partial
/// checksum would reach the other side with a wrong one).
pub fn ethernet_plain(name: &str) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    ioctl_ifreq(&s, libc::SIOCGIFFLAGS, &mut r)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { r.ifr_ifru.ifru_flags };
    r.ifr_ifru.ifru_flags = flags | libc::IFF_NOARP as libc::c_short;
    ioctl_ifreq(&s, libc::SIOCSIFFLAGS, &mut r)?;
    const ETHTOOL_STXCSUM: u32 = 0x17;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut v = EthtoolValue { cmd: ETHTOOL_STXCSUM, data: 0 };
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
    ioctl_ifreq(&s, libc::SIOCETHTOOL, &mut r)
}

/// Waits up to `limit` for interface `name` to be operationally up (IFF_RUNNING: a veth end
/// is once both ends are up); whether it is.
pub fn wait_running(name: &str, limit: std::time::Duration) -> io::Result<bool> {
    let s = ctl_socket()?;
    let start = std::time::Instant::now();
    loop {
        let mut r = ifreq(name)?;
        ioctl_ifreq(&s, libc::SIOCGIFFLAGS, &mut r)?;
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        if unsafe { r.ifr_ifru.ifru_flags } & libc::IFF_RUNNING as libc::c_short != 0 {
            return Ok(true);
        }
        if start.elapsed() >= limit {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Gives an Ethernet interface `local` in a /30 it shares with its peer, with `v6` an IPv6
/// address too (see [`configure_v6`]), and brings it up. Returns whether it has its IPv6
/// address.
pub fn configure_lan(name: &str, local: Ipv4Addr, v6: Option<Ipv6Addr>) -> io::Result<bool> {
    configure(name, local, None, Ipv4Addr::new(255, 255, 255, 252), v6)
}

/// The calling thread's network namespace, as a descriptor.
pub fn current_netns() -> io::Result<OwnedFd> {
    let path = CString::new("/proc/thread-self/ns/net").expect("no NUL");
    // SAFETY: open(2) of a NUL-terminated path.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
    // SAFETY: just opened, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A netlink message being built: attributes appended, nested ones closed by length.
struct NlMsg(Vec<u8>);

impl NlMsg {
    fn align(&mut self) {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
    }
    fn attr(&mut self, ty: u16, data: &[u8]) {
        self.0.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(data);
        self.align();
    }
    /// Opens a nested attribute; [`NlMsg::end`] with what this returns closes it.
    fn begin(&mut self, ty: u16) -> usize {
        let at = self.0.len();
        self.attr(ty, &[]);
        at
    }
    fn end(&mut self, at: usize) {
        let len = (self.0.len() - at) as u16;
        self.0[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }
    /// An empty ifinfomsg (16 bytes).
    fn ifinfomsg(&mut self) {
        self.0.extend_from_slice(&[0; 16]);
    }
}

/// Makes a veth pair in the calling thread's namespace: `name` here, `peer` in namespace
/// `peer_ns` (rtnetlink: `ip link add NAME type veth peer name PEER netns NS`).
pub fn veth_create(name: &str, peer: &str, peer_ns: RawFd) -> io::Result<()> {
    const RTM_NEWLINK: u16 = 16;
    const IFLA_IFNAME: u16 = 3;
    const IFLA_LINKINFO: u16 = 18;
    const IFLA_INFO_KIND: u16 = 1;
    const IFLA_INFO_DATA: u16 = 2;
    const VETH_INFO_PEER: u16 = 1;
    const IFLA_NET_NS_FD: u16 = 28;
    const IFLA_NUM_TX_QUEUES: u16 = 31;
    const IFLA_NUM_RX_QUEUES: u16 = 32;
    let z = |s: &str| [s.as_bytes(), &[0]].concat();
    let mut m = NlMsg(vec![0; 16]);
    m.ifinfomsg();
    m.attr(IFLA_IFNAME, &z(name));
    // One queue each way on both ends (veth makes one per CPU): every frame arrives on queue
    // 0, where the AF_XDP socket is.
    let one = 1u32.to_ne_bytes();
    m.attr(IFLA_NUM_TX_QUEUES, &one);
    m.attr(IFLA_NUM_RX_QUEUES, &one);
    let li = m.begin(IFLA_LINKINFO);
    m.attr(IFLA_INFO_KIND, b"veth");
    let data = m.begin(IFLA_INFO_DATA);
    let p = m.begin(VETH_INFO_PEER);
    m.ifinfomsg();
    m.attr(IFLA_IFNAME, &z(peer));
    m.attr(IFLA_NUM_TX_QUEUES, &one);
    m.attr(IFLA_NUM_RX_QUEUES, &one);
    m.attr(IFLA_NET_NS_FD, &(peer_ns as u32).to_ne_bytes());
    m.end(p);
    m.end(data);
    m.end(li);
    let len = m.0.len() as u32;
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
    m.0[0..4].copy_from_slice(&len.to_ne_bytes());
    m.0[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
    m.0[6..8].copy_from_slice(&flags.to_ne_bytes());
    m.0[8..12].copy_from_slice(&1u32.to_ne_bytes());
    netlink_request(&m.0)
}

/// Sends one rtnetlink request and reads its acknowledgement (an error code).
fn netlink_request(msg: &[u8]) -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) })?;
    // SAFETY: just created, owned by nothing else.
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: send(2) of a buffer we own (to the kernel: the socket's default peer).
    let n = unsafe { libc::send(s.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 4096];
    // SAFETY: recv(2) into a buffer we own, of its length.
    let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // nlmsghdr (16 bytes), then for NLMSG_ERROR (2) the error code (0: done).
    if n >= 20 && u16::from_ne_bytes([buf[4], buf[5]]) == libc::NLMSG_ERROR as u16 {
        let e = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
        if e != 0 {
            return Err(io::Error::from_raw_os_error(-e));
        }
        return Ok(());
    }
    Err(io::Error::other("netlink: no acknowledgement"))
}
