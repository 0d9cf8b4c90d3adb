//! Bytes and packets on the wire, headers included, as the kernel and QUIC count them.
//!
//! * **TCP** (TCP, DoT, DoH over HTTP/1.1 and HTTP/2): a [`TcpMeter`] holds a duplicate of the
//!   connection's socket descriptor from the moment the socket exists until the connection is
//!   up (so that a failed attempt is counted too); then the stream's owner keeps the only
//!   descriptor and gives it back when it is done (h2 and hyper own the stream inside their
//!   connection tasks: its wrapper hands the socket to the meter when they drop it). When the
//!   connection ends, [`TcpMeter::finish`] sends FIN (if the stream's owner has not), waits —
//!   in a task of its own, bounded — for the close handshake to complete, then reads
//!   `TCP_INFO` and reports one [`WireStats`]: payload bytes
//!   (`tcpi_bytes_sent`, `tcpi_bytes_received`) plus IP and TCP headers for every segment
//!   (`tcpi_segs_out`, `tcpi_segs_in`: SYN, FIN and pure ACKs included).
//! * **QUIC** (DoQ, DoH/3): quinn's connection statistics, UDP payload of every datagram plus
//!   the IP and UDP headers ([`report_quic`], [`close_quic`]).
//! * **UDP**: the drivers count every datagram of a `sendmmsg`/`recvmmsg` batch ([`udp_header`]).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use volley_metrics::WireStats;

use crate::{Exchange, Lane};

/// IPv4 (20) and UDP (8) headers.
const UDP4: u64 = 28;
/// IPv6 (40) and UDP (8) headers.
const UDP6: u64 = 48;
/// TCP header without options.
const TCP_HEADER: u64 = 20;
/// The timestamps option as Linux pads it (NOP, NOP, kind 8 with two 4-byte values).
const TCP_TIMESTAMPS: u64 = 12;
/// Options of a Linux SYN or SYN-ACK: MSS (4), SACK permitted and timestamps (12), window
/// scale (4) — or, without timestamps, MSS (4), SACK permitted (4), window scale (4).
const SYN_OPTIONS_TS: u64 = 20;
const SYN_OPTIONS_NO_TS: u64 = 12;
/// `tcpi_options` bit: the timestamps option was negotiated.
const TCPI_OPT_TIMESTAMPS: u8 = 1;
/// TCP states (linux/tcp_states.h): over, and those reached only after the peer's FIN.
const TCP_TIME_WAIT: u8 = 6;
const TCP_CLOSE: u8 = 7;
const TCP_CLOSE_WAIT: u8 = 8;
const TCP_LAST_ACK: u8 = 9;
const TCP_CLOSING: u8 = 11;
/// How long [`TcpMeter::finish`] waits for the close handshake.
const CLOSE_WAIT: Duration = Duration::from_millis(200);
/// How long [`close_quic`] waits for the CONNECTION_CLOSE datagram to leave.
const QUIC_CLOSE_WAIT: Duration = Duration::from_millis(100);

/// Whether the wire below this address is IPv6 (an IPv4-mapped address travels as IPv4).
fn is_v6(addr: SocketAddr) -> bool {
    match addr {
        SocketAddr::V4(_) => false,
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_none(),
    }
}

/// IP and UDP header bytes of one datagram to or from `addr`.
pub(crate) fn udp_header(addr: SocketAddr) -> u64 {
    if is_v6(addr) {
        UDP6
    } else {
        UDP4
    }
}

/// `struct tcp_info` of linux/tcp.h up to `tcpi_snd_wnd` (Linux 5.4). libc's glibc struct
/// stops before the byte and segment counters, so the layout is spelled out here; the kernel
/// fills as much of it as it knows and says how much.
#[repr(C)]
#[derive(Default)]
struct TcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    app_limited_fastopen: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
}

/// What one connection's `TCP_INFO` says about its traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TcpCounts {
    /// TCP state (linux/tcp_states.h).
    pub state: u8,
    /// `tcpi_options`: options negotiated in the handshake (0: no handshake completed).
    pub options: u8,
    /// Payload bytes sent, retransmissions included.
    pub bytes_out: u64,
    /// Payload bytes received.
    pub bytes_in: u64,
    /// Segments sent and received: SYN, FIN, pure ACKs and retransmissions included.
    pub segs_out: u64,
    pub segs_in: u64,
    /// Segments sent again (`tcpi_total_retrans`).
    pub retrans: u64,
}

/// Reads `TCP_INFO` of a TCP socket; None when it is not one (or the kernel has no counters).
pub(crate) fn tcp_counts(fd: RawFd) -> Option<TcpCounts> {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which we own; TcpInfo is
    // plain old data for which any bytes are valid.
    let r = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut TcpInfo).cast(), &mut len)
    };
    let has = |end: usize| len as usize >= end;
    if r != 0 || !has(std::mem::offset_of!(TcpInfo, notsent_bytes)) {
        return None;
    }
    // tcpi_bytes_sent (Linux 4.19) counts retransmissions; before it, bytes acknowledged is
    // the closest figure.
    let bytes_out = if has(std::mem::offset_of!(TcpInfo, bytes_retrans)) { info.bytes_sent } else { info.bytes_acked };
    // tcpi_bytes_received follows the receive sequence number, which the peer's FIN advances
    // by one: not a byte on the wire. A closed connection is taken to have closed with a FIN
    // (after a RST this undercounts one byte).
    let fin_in = info.options != 0
        && matches!(info.state, TCP_TIME_WAIT | TCP_CLOSE | TCP_CLOSE_WAIT | TCP_LAST_ACK | TCP_CLOSING);
    Some(TcpCounts {
        state: info.state,
        options: info.options,
        bytes_out,
        bytes_in: info.bytes_received.saturating_sub(fin_in as u64),
        segs_out: info.segs_out as u64,
        segs_in: info.segs_in as u64,
        retrans: info.total_retrans as u64,
    })
}

/// Bytes and packets on the wire of a TCP connection from its counters: payload plus, per
/// segment, the IP header (20 or 40), the TCP header (20) and the timestamps option when it
/// was negotiated (12); the SYN and SYN-ACK carry 8 bytes more options (12 without
/// timestamps). A connection that never completed its handshake sent SYNs (with the full
/// SYN options) and got at most a RST (no options) back.
pub(crate) fn tcp_wire(c: &TcpCounts, v6: bool) -> WireStats {
    let ip = if v6 { 40 } else { 20 };
    if c.options == 0 {
        return WireStats {
            bytes_out: c.bytes_out + c.segs_out * (ip + TCP_HEADER + SYN_OPTIONS_TS),
            bytes_in: c.bytes_in + c.segs_in * (ip + TCP_HEADER),
            packets_out: c.segs_out,
            packets_in: c.segs_in,
            retransmits: c.retrans,
        };
    }
    let ts = c.options & TCPI_OPT_TIMESTAMPS != 0;
    let per = ip + TCP_HEADER + if ts { TCP_TIMESTAMPS } else { 0 };
    let syn_extra = if ts { SYN_OPTIONS_TS - TCP_TIMESTAMPS } else { SYN_OPTIONS_NO_TS };
    let syn_out = syn_extra * (c.segs_out > 0) as u64;
    let syn_in = syn_extra * (c.segs_in > 0) as u64;
    WireStats {
        bytes_out: c.bytes_out + c.segs_out * per + syn_out,
        bytes_in: c.bytes_in + c.segs_in * per + syn_in,
        packets_out: c.segs_out,
        packets_in: c.segs_in,
        retransmits: c.retrans,
    }
}

/// Keeps a TCP connection's socket (a duplicate descriptor) until its counters are read.
/// While the meter holds it, closing the stream's own descriptor does not end the connection:
/// [`TcpMeter::finish`] does (dropping the meter unfinished just closes the descriptor).
///
/// Once the connection is up the duplicate goes, so that an open connection costs one
/// descriptor, not two (which halves the connections one process can hold under its
/// open-files limit). A driver that keeps its stream to the end (TCP, DoT) releases it
/// ([`TcpMeter::release`]) and hands the stream over at the end ([`TcpMeter::finish_with`]).
/// One whose stream an HTTP library owns (DoH) lends it ([`TcpMeter::lend`]): the stream's
/// wrapper gives the socket back to the meter when the library drops it ([`SocketBack`]),
/// and until then the meter reads the socket through the descriptor the wrapper still owns.
#[derive(Debug)]
pub(crate) struct TcpMeter {
    fd: Option<OwnedFd>,
    lent: Option<(RawFd, SocketBack)>,
    v6: bool,
}

/// Where the wrapper of a lent stream puts its socket when it is dropped (see
/// [`TcpMeter::lend`]).
#[derive(Clone, Default)]
pub(crate) struct SocketBack(Rc<std::cell::Cell<Option<OwnedFd>>>);

impl std::fmt::Debug for SocketBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SocketBack")
    }
}

impl SocketBack {
    /// The stream's owner is done with it: keeps the socket open for the meter.
    pub(crate) fn put(&self, s: tokio::net::TcpStream) {
        if Rc::strong_count(&self.0) > 1 {
            self.0.set(s.into_std().ok().map(OwnedFd::from));
        }
    }
}

impl TcpMeter {
    /// A meter for the socket `s` connected (or connecting) to `peer`; None when the
    /// descriptor cannot be duplicated (out of descriptors: that connection goes uncounted).
    pub(crate) fn new(s: &impl AsRawFd, peer: SocketAddr) -> Option<TcpMeter> {
        // SAFETY: dup of a descriptor we were lent; the new one is ours alone.
        let fd = unsafe { libc::fcntl(s.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Some(TcpMeter { fd: Some(unsafe { OwnedFd::from_raw_fd(fd) }), lent: None, v6: is_v6(peer) })
    }

    /// Closes the duplicate descriptor: the driver keeps the stream and hands it to
    /// [`TcpMeter::finish_with`] at the end.
    pub(crate) fn release(&mut self) {
        self.fd = None;
    }

    /// Closes the duplicate descriptor of the socket `s`, whose stream a library will own: the
    /// stream's wrapper must outlive no read of the meter without giving the socket back
    /// through the returned [`SocketBack`] when it is dropped.
    pub(crate) fn lend(&mut self, s: &impl AsRawFd) -> SocketBack {
        let back = SocketBack::default();
        self.fd = None;
        self.lent = Some((s.as_raw_fd(), back.clone()));
        back
    }

    /// The socket's descriptor: the meter's own, the one given back, or (lent, not given
    /// back yet) the one its stream's wrapper still owns.
    fn raw_fd(&mut self) -> Option<RawFd> {
        if let Some((raw, back)) = &self.lent {
            if let Some(fd) = back.0.take() {
                self.fd = Some(fd);
                self.lent = None;
            } else {
                return Some(*raw);
            }
        }
        self.fd.as_ref().map(|fd| fd.as_raw_fd())
    }

    /// The counters now.
    pub(crate) fn counts(&mut self) -> Option<TcpCounts> {
        tcp_counts(self.raw_fd()?)
    }

    /// [`TcpMeter::finish`] with the connection's own socket, for a released meter.
    pub(crate) fn finish_with<X: Exchange + 'static>(
        mut self,
        stream: tokio::net::TcpStream,
        lane: &Rc<Lane>,
        x: &Rc<X>,
    ) {
        if self.fd.is_none() {
            self.fd = stream.into_std().ok().map(OwnedFd::from);
        }
        self.finish(lane, x);
    }

    /// The connection is over: sends FIN if it was not sent, waits in a task of its own (at
    /// most 200 ms, holding the lane so that the end of a run waits for it) until the close
    /// handshake is complete, then reports the connection's bytes and packets to `x`. It looks
    /// at the connection 1, 2, 4 ... ms apart: a few looks each, however many connections
    /// close together (at the end of a run, all of them).
    pub(crate) fn finish<X: Exchange + 'static>(mut self, lane: &Rc<Lane>, x: &Rc<X>) {
        let Some(fd) = self.raw_fd() else { return };
        // SAFETY: shutdown on a descriptor that is open (ours, or still owned by the stream's
        // wrapper on this thread); an error (not connected) is harmless.
        unsafe { libc::shutdown(fd, libc::SHUT_WR) };
        let (lane, x) = (lane.clone(), x.clone());
        tokio::task::spawn_local(async move {
            let until = Instant::now() + CLOSE_WAIT;
            let mut last = None;
            let mut pause = Duration::from_millis(1);
            loop {
                let c = self.counts();
                if c.is_some() {
                    last = c;
                }
                let done = last.is_none_or(|c| c.state == TCP_CLOSE || c.state == TCP_TIME_WAIT);
                let now = Instant::now();
                if done || now >= until {
                    break;
                }
                tokio::time::sleep(pause.min(until - now)).await;
                pause *= 2;
            }
            if let Some(c) = last {
                x.wire(&tcp_wire(&c, self.v6));
            }
            drop(lane);
        });
    }
}

/// Reports a QUIC connection's datagrams from quinn's statistics: UDP payload plus the IP and
/// UDP headers of each. Call when the connection is closed (by the peer, or after
/// [`close_quic`] saw its CONNECTION_CLOSE leave).
pub(crate) fn report_quic<X: Exchange + ?Sized>(conn: &quinn::Connection, x: &X) {
    let s = conn.stats();
    let h = udp_header(conn.remote_address());
    x.wire(&WireStats {
        bytes_out: s.udp_tx.bytes + s.udp_tx.datagrams * h,
        bytes_in: s.udp_rx.bytes + s.udp_rx.datagrams * h,
        packets_out: s.udp_tx.datagrams,
        packets_in: s.udp_rx.datagrams,
        retransmits: s.path.lost_packets,
    });
}

/// Closes a QUIC connection with `code` and reports its datagrams once the CONNECTION_CLOSE
/// has left (quinn sends it from its driver task) and the peer's datagrams that were on their
/// way have come in, waiting at most 100 ms in a task of its own that holds the lane.
///
/// A closing connection still receives (and counts) what the peer sent before it saw the close:
/// its last acknowledgements, the answer's other packets, and the client's CONNECTION_CLOSE
/// sent again in reply. Reporting as soon as the close left missed them: with one query per
/// connection, 13 of 347 datagrams in over 40 connections on a loaded machine. So the report
/// waits for a quiet spell of [`quic_quiet`] with no datagram in or out.
pub(crate) fn close_quic<X: Exchange + 'static>(conn: &quinn::Connection, code: u32, lane: &Rc<Lane>, x: &Rc<X>) {
    let before = conn.stats().udp_tx.datagrams;
    let already = conn.close_reason().is_some();
    conn.close(code.into(), b"");
    let (conn, lane, x) = (conn.clone(), lane.clone(), x.clone());
    tokio::task::spawn_local(async move {
        let until = Instant::now() + QUIC_CLOSE_WAIT;
        while !already && conn.stats().udp_tx.datagrams == before && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if !already {
            let datagrams = |c: &quinn::Connection| {
                let s = c.stats();
                s.udp_tx.datagrams + s.udp_rx.datagrams
            };
            let quiet = quic_quiet(conn.rtt());
            let (mut seen, mut since) = (datagrams(&conn), Instant::now());
            loop {
                let now = Instant::now();
                if now >= until || now - since >= quiet {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1).min(until - now)).await;
                let d = datagrams(&conn);
                if d != seen {
                    (seen, since) = (d, Instant::now());
                }
            }
        }
        report_quic(&conn, &*x);
        drop(lane);
    });
}

/// How long a closing QUIC connection must see no datagram before its counts are final: two
/// round trips (what the peer sent before our close reached it comes back within one), and at
/// least 3 ms (loopback's round trip is microseconds; the peer may be a busy process).
fn quic_quiet(rtt: Duration) -> Duration {
    (rtt * 2).max(Duration::from_millis(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_headers() {
        // One query per connection over IPv4 with timestamps: SYN, ACK, query, FIN, ACK out;
        // SYN-ACK, ACK, answer, FIN in.
        let c = TcpCounts {
            state: TCP_CLOSE,
            options: 7,
            bytes_out: 40,
            bytes_in: 56,
            segs_out: 5,
            segs_in: 4,
            retrans: 1,
        };
        let w = tcp_wire(&c, false);
        assert_eq!(
            w,
            WireStats {
                bytes_out: 40 + 5 * 52 + 8,
                bytes_in: 56 + 4 * 52 + 8,
                packets_out: 5,
                packets_in: 4,
                retransmits: 1
            }
        );
        let w6 = tcp_wire(&c, true);
        assert_eq!(w6.bytes_out, 40 + 5 * 72 + 8);
        // Refused: one SYN (60 bytes), one RST (40).
        let r = TcpCounts { state: TCP_CLOSE, segs_out: 1, segs_in: 1, ..TcpCounts::default() };
        assert_eq!(
            tcp_wire(&r, false),
            WireStats { bytes_out: 60, bytes_in: 40, packets_out: 1, packets_in: 1, retransmits: 0 }
        );
    }

    #[test]
    fn udp_headers() {
        assert_eq!(udp_header("127.0.0.1:53".parse().unwrap()), 28);
        assert_eq!(udp_header("[::1]:53".parse().unwrap()), 48);
        assert_eq!(udp_header("[::ffff:127.0.0.1]:53".parse().unwrap()), 28);
    }

    #[test]
    fn reads_tcp_info_of_a_loopback_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        use std::io::Write;
        s.write_all(b"hello").unwrap();
        let mut m = TcpMeter::new(&c, l.local_addr().unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        let counts = loop {
            let k = m.counts().expect("TCP_INFO");
            if k.bytes_in == 5 || Instant::now() > deadline {
                break k;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(counts.bytes_in, 5);
        assert!(counts.segs_out >= 2, "SYN and ACK at least: {counts:?}");
        assert!(counts.segs_in >= 2, "SYN-ACK and data at least: {counts:?}");
        assert_ne!(counts.options & TCPI_OPT_TIMESTAMPS, 0, "Linux negotiates timestamps on loopback");
        drop(c);
        // The meter keeps the connection open: no FIN yet.
        assert_eq!(m.counts().unwrap().state, 1, "ESTABLISHED while the meter holds it");
    }
}
