//! A live capture of its own: an `AF_PACKET` socket (Linux) on the interface that routes to the
//! server, each packet stamped by the kernel (`SO_TIMESTAMPNS`, the same stamp tcpdump gets),
//! read in a thread of its own that feeds a [`Matcher`].
//!
//! The socket is `SOCK_RAW`, bound to one interface: frames come with their link header
//! (Ethernet on Ethernet and loopback devices, none on raw IP devices such as TUN). On loopback every packet passes the socket twice, once leaving
//! (`PACKET_OUTGOING`) and once arriving (`PACKET_HOST`); only the arrival is matched, as
//! libpcap does, so that the times are tcpdump's; the two copies of each TCP query tell how
//! long loopback held it ([`Held`]). On any other interface both directions are kept: the
//! queries leave, the answers arrive.
//!
//! A UDP answer train sent with segmentation offload (`UDP_SEGMENT`) passes a capture on its
//! host as one packet; the `virtio_net_hdr` the socket asks for (`PACKET_VNET_HDR`) gives its
//! segment size, and the train is split into its datagrams.
//!
//! Memory is bounded: one batch of receive buffers ([`BATCH`] of [`SNAP`] bytes), the socket's
//! kernel buffer and the matcher's own bounds. Packets the kernel could not queue (the reader
//! fell behind) are counted from `PACKET_STATISTICS` and reported as dropped.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};
use volley_replay::capture::linktype;

use crate::matcher::Matcher;
use crate::CalibrateError;

/// Packets read per system call.
const BATCH: usize = 32;
/// How long the reader sleeps when it has read everything. It sleeps rather than waits on the
/// socket: a reader waiting is woken by each packet, and the kernel wakes it before it lets
/// the packet go on (an IPI and a scheduler run in the sender's path, 5 to 20 µs on a VM),
/// which delays every query and answer the capture sees. Asleep, nobody waits on the socket,
/// and a packet costs its copy into the socket's buffer, which holds many drains' worth.
const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// Bytes kept of each packet: a whole IP packet, segmentation offload trains included.
const SNAP: usize = 65_600;
/// The socket's kernel receive buffer asked for (as root, beyond `rmem_max`).
const RCVBUF: libc::c_int = 64 << 20;

/// What the capture saw and missed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStats {
    /// The interface captured on.
    pub interface: String,
    /// Packets read (on loopback, each once): those of the server's port on an Ethernet or
    /// loopback device (a socket filter drops the rest in the kernel), all on others.
    pub packets: u64,
    /// Packets the kernel dropped because the reader fell behind: matches are then missing.
    pub dropped: u64,
    /// Packets without a kernel time stamp (stamped by the reader's clock instead).
    pub unstamped: u64,
    /// On loopback: TCP segments to the server that reached the receiving side over
    /// [`HELD_NS`] after they left (see [`Held`]). Their capture stamp, like tcpdump's, is
    /// that late; volley's departure is not.
    #[serde(default)]
    pub held: u64,
    /// The longest such wait, ns.
    #[serde(default)]
    pub held_max_ns: u64,
}

/// How much later than it left a TCP segment may reach the receiving side of a loopback
/// device before it counts as held (see [`Held`]): three times the 99th percentile of the wait
/// between the two copies of one (3 µs at the middle, 6.4 µs at p99, on the 2-core VM).
pub const HELD_NS: u64 = 20_000;

/// The TCP segments to the server that a loopback device held, by the two copies of each that
/// the capture sees: one as the sender's stack hands it to the device (`PACKET_OUTGOING`),
/// one as the receiving stack takes it (`PACKET_HOST`). A UDP datagram is stamped as it is
/// queued to the receiver, so its arrival copy has its departure's time; a TCP segment
/// carries its departure time for pacing instead of an arrival stamp, so each packet socket
/// stamps its arrival copy itself, as the receive path takes it from the device's queue.
/// That is usually microseconds after it left, but the kernel may run its receive path
/// late (deferred to a thread, or the virtual CPU off its core): then the capture, like
/// tcpdump, stamps the query late, and the wire's time leaves the wait out while volley's
/// departure, taken as it left, keeps it in.
struct Held {
    /// Departures waiting for their arrival copy: (client port, sequence number, length)
    /// and the leaving copy's stamp, oldest first.
    leaving: std::collections::VecDeque<((u16, u32, usize), u64)>,
    count: u64,
    max_ns: u64,
}

/// Departures [`Held`] remembers at most (their arrival copy comes right after, or never).
const HELD_PENDING: usize = 4096;

impl Held {
    fn new() -> Held {
        Held { leaving: std::collections::VecDeque::with_capacity(HELD_PENDING), count: 0, max_ns: 0 }
    }

    /// One copy of a loopback packet, stamped `ts`: only TCP data to `server` is followed.
    fn copy(&mut self, server: SocketAddr, ts: u64, linktype: u32, frame: &[u8], leaving: bool) {
        let Ok(d) = volley_replay::capture::decode(linktype, frame) else { return };
        let volley_replay::capture::Transport::Tcp { seq, .. } = d.transport else { return };
        if d.payload.is_empty() || SocketAddr::new(d.dst, d.dport) != server {
            return;
        }
        let key = (d.sport, seq, d.payload.len());
        if leaving {
            if self.leaving.len() == HELD_PENDING {
                self.leaving.pop_front();
            }
            self.leaving.push_back((key, ts));
        } else if let Some(i) = self.leaving.iter().rposition(|e| e.0 == key) {
            let (_, left) = self.leaving.remove(i).expect("found");
            let wait = ts.saturating_sub(left);
            if wait > HELD_NS {
                self.count += 1;
                self.max_ns = self.max_ns.max(wait);
            }
        }
    }
}

/// A capture running in its thread until [`LiveCapture::stop`].
pub struct LiveCapture {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<io::Result<(Matcher, CaptureStats)>>,
}

impl LiveCapture {
    /// Opens the capture on the interface that routes to `server` and starts reading into
    /// `matcher`. Errors at once when capturing is not permitted (root or CAP_NET_RAW needed).
    pub fn start(server: SocketAddr, matcher: Matcher) -> Result<LiveCapture, CalibrateError> {
        let (name, index, loopback) = route_interface(server)?;
        let loopback = loopback.then_some(server);
        let fd = open(index, port_filter(&name, server.port())).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => CalibrateError::NotPermitted(e),
            _ => CalibrateError::Capture(format!("AF_PACKET socket on {name}: {e}")),
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("volley-capture".into())
            .spawn(move || read_loop(fd, loopback, name, matcher, &flag))
            .map_err(|e| CalibrateError::Capture(format!("capture thread: {e}")))?;
        Ok(LiveCapture { stop, thread })
    }

    /// Stops reading once what the kernel holds is read; returns the matcher and the counts.
    pub fn stop(self) -> Result<(Matcher, CaptureStats), CalibrateError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(r) => r.map_err(|e| CalibrateError::Capture(format!("reading the capture: {e}"))),
            Err(_) => Err(CalibrateError::Capture("the capture thread panicked".into())),
        }
    }
}

/// The interface whose address this host would send from to reach `server`: its name, index,
/// and whether it is a loopback interface.
fn route_interface(server: SocketAddr) -> Result<(String, u32, bool), CalibrateError> {
    let bind: SocketAddr = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
    let local = UdpSocket::bind(bind)
        .and_then(|s| s.connect(server).and_then(|_| s.local_addr()))
        .map_err(|e| CalibrateError::Capture(format!("no route to {server}: {e}")))?
        .ip();
    let mut found: Option<(String, bool)> = None;
    let mut any_loopback: Option<String> = None;
    // SAFETY: getifaddrs fills a list we free below; each entry is read while it is alive.
    unsafe {
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut list) != 0 {
            return Err(CalibrateError::Capture(format!("getifaddrs: {}", io::Error::last_os_error())));
        }
        let mut at = list;
        while !at.is_null() {
            let ifa = &*at;
            at = ifa.ifa_next;
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as libc::c_uint != 0;
            if loopback && any_loopback.is_none() {
                any_loopback = Some(name.clone());
            }
            if ifa.ifa_addr.is_null() || found.is_some() {
                continue;
            }
            let addr = match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::from(a.sin6_addr.s6_addr)
                }
                _ => continue,
            };
            if addr == local {
                found = Some((name, loopback));
            }
        }
        libc::freeifaddrs(list);
    }
    let (name, loopback) = match (found, any_loopback) {
        (Some(f), _) => f,
        (None, Some(lo)) if local.is_loopback() => (lo, true),
        _ => {
            return Err(CalibrateError::Capture(format!("no interface has the address {local} that reaches {server}")))
        }
    };
    let c = std::ffi::CString::new(name.clone()).expect("interface names have no NUL");
    // SAFETY: a valid C string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(CalibrateError::Capture(format!("interface {name}: {}", io::Error::last_os_error())));
    }
    Ok((name, index, loopback))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: an int option of a socket we own.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// A classic BPF program that keeps the UDP and TCP packets from or to `port` of an interface
/// with Ethernet headers (Ethernet and loopback devices): `tcpdump -dd port PORT`. None for
/// other devices, whose packets all go to the matcher, which keeps the server's.
fn port_filter(interface: &str, port: u16) -> Option<Vec<libc::sock_filter>> {
    let kind = std::fs::read_to_string(format!("/sys/class/net/{interface}/type")).ok()?;
    let kind: u16 = kind.trim().parse().ok()?;
    if kind != libc::ARPHRD_ETHER && kind != libc::ARPHRD_LOOPBACK {
        return None;
    }
    let p = u32::from(port);
    let f = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    Some(vec![
        f(0x28, 0, 0, 12),     // ldh [12]: the ethertype
        f(0x15, 0, 8, 0x86dd), // IPv6?
        f(0x30, 0, 0, 20),     // ldb [20]: next header
        f(0x15, 2, 0, 0x84),   // SCTP
        f(0x15, 1, 0, 6),      // TCP
        f(0x15, 0, 17, 0x11),  // UDP
        f(0x28, 0, 0, 54),     // source port
        f(0x15, 14, 0, p),
        f(0x28, 0, 0, 56), // destination port
        f(0x15, 12, 13, p),
        f(0x15, 0, 12, 0x800), // IPv4?
        f(0x30, 0, 0, 23),     // ldb [23]: protocol
        f(0x15, 2, 0, 0x84),
        f(0x15, 1, 0, 6),
        f(0x15, 0, 8, 0x11),
        f(0x28, 0, 0, 20),     // fragment offset
        f(0x45, 6, 0, 0x1fff), // a later fragment: no ports
        f(0xb1, 0, 0, 14),     // x = the IP header's length
        f(0x48, 0, 0, 14),     // source port
        f(0x15, 2, 0, p),
        f(0x48, 0, 0, 16), // destination port
        f(0x15, 0, 1, p),
        f(0x6, 0, 0, 0x40000), // keep (up to 256 KiB)
        f(0x6, 0, 0, 0),       // drop
    ])
}

/// The capture socket, stamping in nanoseconds, bound to interface `index`, with `filter`
/// attached before it receives anything: the socket is made with protocol 0 (a packet socket
/// that takes no packets, as libpcap makes it) and the bind names the protocol, so no packet
/// that the filter would refuse is queued in between.
fn open(index: u32, filter: Option<Vec<libc::sock_filter>>) -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket creation; the descriptor is owned at once.
    let fd = unsafe {
        OwnedFd::from_raw_fd(cvt(libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        ))?)
    };
    setsockopt(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    // Each packet comes after a virtio_net_hdr that tells a segmentation offload train and its
    // segment size: a UDP train (UDP_SEGMENT) passes a capture on its host as one packet.
    setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)?;
    if let Some(mut prog) = filter {
        let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
        // SAFETY: the program outlives the call, which copies it.
        cvt(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                &fprog as *const libc::sock_fprog as *const libc::c_void,
                size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        })?;
    }
    if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
        let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF);
    }
    // SAFETY: a zeroed sockaddr_ll is valid; we set the fields bind needs.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = index as i32;
    // SAFETY: bind with a sockaddr_ll of the right size.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    // Start from the statistics' zero (reading them resets them).
    let _ = stats(&fd);
    Ok(fd)
}

/// Packets received and dropped since the last call (reading resets them).
fn stats(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    // SAFETY: PACKET_STATISTICS fills a tpacket_stats of the given size.
    let mut s: libc::tpacket_stats = unsafe { zeroed() };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut s as *mut libc::tpacket_stats as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok((u64::from(s.tp_packets), u64::from(s.tp_drops)))
}

/// The capture link type of a device's hardware type: Ethernet headers on Ethernet and
/// loopback devices, raw IP on devices without a link header; any other is not decoded.
fn link_type(hatype: u16) -> u32 {
    match hatype {
        libc::ARPHRD_ETHER | libc::ARPHRD_LOOPBACK => linktype::ETHERNET,
        libc::ARPHRD_NONE => linktype::RAW,
        _ => u32::MAX,
    }
}

/// Size of the `virtio_net_hdr` before each packet (`PACKET_VNET_HDR`).
const VNET_HDR: usize = 10;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: a UDP segmentation offload train.
const GSO_UDP_L4: u8 = 5;

/// The packet after its `virtio_net_hdr`, and the segment size of a UDP train. The header is
/// in the host's byte order (legacy virtio).
fn vnet_split(buf: &[u8]) -> (Option<usize>, &[u8]) {
    if buf.len() < VNET_HDR {
        return (None, &[]);
    }
    let gso_type = buf[1] & 0x7f; // less VIRTIO_NET_HDR_GSO_ECN
    let size = u16::from_ne_bytes([buf[4], buf[5]]) as usize;
    ((gso_type == GSO_UDP_L4 && size > 0).then_some(size), &buf[VNET_HDR..])
}

fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Reads packets until `stop` is set and the socket is empty.
fn read_loop(
    fd: OwnedFd,
    loopback: Option<SocketAddr>,
    interface: String,
    mut matcher: Matcher,
    stop: &AtomicBool,
) -> io::Result<(Matcher, CaptureStats)> {
    let mut out = CaptureStats { interface, ..CaptureStats::default() };
    let mut bufs = vec![0u8; BATCH * SNAP];
    const CMSG: usize = 64;
    let mut cmsgs = vec![[0u64; CMSG / 8]; BATCH];
    // SAFETY: zeroed address and header structs are valid; pointers are set per call below.
    let mut addrs: Vec<libc::sockaddr_ll> = vec![unsafe { zeroed() }; BATCH];
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(BATCH);
    for chunk in bufs.chunks_mut(SNAP) {
        iovs.push(libc::iovec { iov_base: chunk.as_mut_ptr() as *mut libc::c_void, iov_len: SNAP });
    }
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; BATCH];
    let mut stopping = false;
    let mut held = Held::new();
    loop {
        for i in 0..BATCH {
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = &mut addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = cmsgs[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CMSG as _;
            h.msg_flags = 0;
            msgs[i].msg_len = 0;
        }
        // SAFETY: every header points at buffers that live through the call.
        let n = unsafe {
            libc::recvmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {
                    if stopping {
                        break;
                    }
                    // Checked before waiting: once set, one more pass reads what is left.
                    stopping = stop.load(Ordering::Relaxed);
                    std::thread::sleep(DRAIN_EVERY);
                    continue;
                }
                _ => return Err(e),
            }
        }
        for i in 0..n as usize {
            let leaving = addrs[i].sll_pkttype == libc::PACKET_OUTGOING;
            let h = &msgs[i].msg_hdr;
            let mut ts = None;
            // SAFETY: walking the control messages the kernel wrote into our buffer.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                        let t = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                        ts = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                    }
                    c = libc::CMSG_NXTHDR(h, c);
                }
            }
            let len = (msgs[i].msg_len as usize).min(SNAP);
            let (segment, packet) = vnet_split(&bufs[i * SNAP..i * SNAP + len]);
            let link = link_type(addrs[i].sll_hatype);
            if let Some(server) = loopback {
                if let Some(ts) = ts {
                    held.copy(server, ts, link, packet, leaving);
                }
                if leaving {
                    continue;
                }
            }
            out.packets += 1;
            let ts = ts.unwrap_or_else(|| {
                out.unstamped += 1;
                realtime_ns()
            });
            matcher.packet_segmented(ts, link, packet, segment);
        }
    }
    if let Ok((_, drops)) = stats(&fd) {
        out.dropped = drops;
    }
    (out.held, out.held_max_ns) = (held.count, held.max_ns);
    Ok((matcher, out))
}

/// Segments the kernel has merged into segments already queued on a TCP socket, over the
/// whole machine (`TcpExtTCPRcvCoalesce` in /proc/net/netstat); None where it cannot be read.
/// A merged segment's data keeps only the newest segment's arrival stamp: answers that came
/// apart but were read together take the later one's time.
pub fn tcp_merged_segments() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next()?, lines.next()?);
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(k, _)| *k == "TCPRcvCoalesce")
        .and_then(|(_, v)| v.parse().ok())
}

#[cfg(test)]
mod held_tests {
    use super::*;
    use crate::matcher::tests::ipv4;
    use volley_replay::capture::linktype;

    #[test]
    fn queries_that_reach_the_server_late_are_held() {
        let server: SocketAddr = "127.0.0.1:53".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let mut h = Held::new();
        let q1 = ipv4(client, server, Some((100, false)), b"query one");
        let q2 = ipv4(client, server, Some((109, false)), b"query two");
        let answer = ipv4(server, client, Some((7, false)), b"an answer");
        let ack = ipv4(client, server, Some((118, false)), b"");
        // The first query passes in 3 µs, the second waits 250 µs; the answer and an
        // acknowledgement (no data) are not followed.
        h.copy(server, 1_000_000, linktype::RAW, &q1, true);
        h.copy(server, 1_003_000, linktype::RAW, &q1, false);
        h.copy(server, 2_000_000, linktype::RAW, &q2, true);
        h.copy(server, 2_000_500, linktype::RAW, &answer, true);
        h.copy(server, 2_001_000, linktype::RAW, &answer, false);
        h.copy(server, 2_100_000, linktype::RAW, &ack, true);
        h.copy(server, 2_250_000, linktype::RAW, &q2, false);
        h.copy(server, 2_900_000, linktype::RAW, &ack, false);
        assert_eq!((h.count, h.max_ns), (1, 250_000));
        assert!(h.leaving.is_empty(), "every departure met its arrival");
        // A copy that never arrives is forgotten once the bound is reached.
        for i in 0..HELD_PENDING as u32 + 10 {
            h.copy(server, 3_000_000, linktype::RAW, &ipv4(client, server, Some((200 + i, false)), b"q"), true);
        }
        assert_eq!(h.leaving.len(), HELD_PENDING);
    }
}

#[cfg(test)]
mod merged_tests {
    #[test]
    fn the_machine_counts_merged_segments() {
        let n = super::tcp_merged_segments().expect("/proc/net/netstat has TcpExt's TCPRcvCoalesce");
        assert!(super::tcp_merged_segments().unwrap() >= n, "a count only grows");
    }
}
