//! Where connections come from and how fast they may be opened: source addresses spread over
//! a range (`--bind 127.0.1.0/24`), so that more connections than one address's ports allow
//! reach one server, and a run-wide cap on new connections per second (`--conn-rate`).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A range of source addresses; each lane takes the next in turn and keeps it for all its
/// connections. Shared by every worker thread of a run.
#[derive(Clone)]
pub struct Sources {
    first: IpAddr,
    count: u64,
    next: Arc<AtomicU64>,
}

impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sources({} x{})", self.first, self.count)
    }
}

/// The limit of addresses a range may name: more would never be used by one run.
const MAX_SOURCES: u128 = 1 << 24;

impl Sources {
    /// The addresses of the range, in turn.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The first address.
    pub fn first(&self) -> IpAddr {
        self.first
    }

    /// Checks that the first and the last address of the range can be bound on this machine,
    /// so that a wrong range is one clear error before the run rather than failed connections.
    pub fn check(&self) -> io::Result<()> {
        for ip in [self.nth(0), self.nth(self.count - 1)] {
            let domain = if ip.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
            let s = socket2::Socket::new(domain, socket2::Type::DGRAM, None)?;
            s.bind(&SocketAddr::new(ip, 0).into()).map_err(|e| bind_error(ip, e))?;
        }
        Ok(())
    }

    /// The next address for a new lane (round robin).
    pub fn take(&self) -> IpAddr {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.count;
        self.nth(i)
    }

    fn nth(&self, i: u64) -> IpAddr {
        match self.first {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).wrapping_add(i as u32))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).wrapping_add(u128::from(i)))),
        }
    }
}

impl FromStr for Sources {
    type Err = String;

    /// `ADDR` or `ADDR/PREFIX`. An IPv4 range of more than two addresses leaves out its
    /// network and broadcast addresses (127.0.1.0/24 is 127.0.1.1 to 127.0.1.254).
    fn from_str(s: &str) -> Result<Sources, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("invalid address {addr:?}: expected an IPv4 or IPv6 address, or ADDR/PREFIX"))?;
        let bits: u32 = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u32 = match prefix {
            None => bits,
            Some(p) => p
                .parse()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("invalid prefix length {p:?}: expected 0 to {bits}"))?,
        };
        let host_bits = bits - prefix;
        let size: u128 = if host_bits >= 128 { u128::MAX } else { 1u128 << host_bits };
        let (mut first, mut count) = match addr {
            IpAddr::V4(a) => {
                let base = u32::from(a) & u32::MAX.checked_shl(host_bits).unwrap_or(0);
                (u128::from(base), size)
            }
            IpAddr::V6(a) => {
                let base = u128::from(a) & u128::MAX.checked_shl(host_bits).unwrap_or(0);
                (base, size)
            }
        };
        if addr.is_ipv4() && count > 2 {
            first += 1;
            count -= 2;
        }
        if count > MAX_SOURCES {
            return Err(format!(
                "range {s} names {count} addresses; at most {MAX_SOURCES} are used: use a longer prefix"
            ));
        }
        let first = match addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(first as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(first)),
        };
        Ok(Sources { first, count: count as u64, next: Arc::new(AtomicU64::new(0)) })
    }
}

/// The local address a lane's sockets bind to before connecting: its source address and any
/// port. For TCP the port is left to `connect` (IP_BIND_ADDRESS_NO_PORT), which may then reuse
/// a port towards different servers instead of reserving one per socket at bind time.
pub(crate) fn bind_to(sock: &socket2::SockRef<'_>, local: IpAddr, stream: bool) -> io::Result<()> {
    if stream && local.is_ipv4() {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&**sock);
        // Best effort: without it, bind reserves a port as it always did.
        let _ = crate::sockopt::set_int(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1);
    }
    sock.bind(&SocketAddr::new(local, 0).into()).map_err(|e| bind_error(local, e))
}

/// A bind error that says which source address failed and why that usually happens.
pub(crate) fn bind_error(local: IpAddr, e: io::Error) -> io::Error {
    let hint = if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
        " (not an address of this machine: --bind takes addresses assigned to an interface, or any of 127.0.0.0/8)"
    } else {
        ""
    };
    io::Error::new(e.kind(), format!("cannot bind source address {local}: {e}{hint}"))
}

/// A run-wide cap on new connections per second: each connection attempt takes the next slot
/// of an even schedule and waits for it. Lock-free; shared by every worker thread.
#[derive(Clone)]
pub struct ConnGate {
    epoch: Instant,
    interval_ns: u64,
    /// The next free slot, in nanoseconds since `epoch`.
    next: Arc<AtomicU64>,
}

impl fmt::Debug for ConnGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnGate({} per second)", 1e9 / self.interval_ns as f64)
    }
}

impl ConnGate {
    /// At most `per_second` new connections per second (a burst of none: slots are even).
    pub fn new(per_second: f64) -> ConnGate {
        let interval_ns = (1e9 / per_second.max(1e-3)).round().max(1.0) as u64;
        ConnGate { epoch: Instant::now(), interval_ns, next: Arc::new(AtomicU64::new(0)) }
    }

    /// Takes the next slot: how long to wait before connecting (zero when one is free now).
    pub fn reserve(&self) -> Duration {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let slot = cur.max(now);
            match self.next.compare_exchange_weak(cur, slot + self.interval_ns, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Duration::from_nanos(slot - now),
                Err(seen) => cur = seen,
            }
        }
    }

    /// The cap, in new connections per second.
    pub fn per_second(&self) -> f64 {
        1e9 / self.interval_ns as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &Sources) -> Vec<String> {
        (0..s.count()).map(|_| s.take().to_string()).collect()
    }

    #[test]
    fn ranges() {
        let s: Sources = "127.0.1.0/24".parse().unwrap();
        assert_eq!(s.count(), 254);
        let v = all(&s);
        assert_eq!(v[0], "127.0.1.1");
        assert_eq!(v[253], "127.0.1.254");
        // Round robin: the 255th lane gets the first address again.
        assert_eq!(s.take().to_string(), "127.0.1.1");

        let s: Sources = "127.0.0.9".parse().unwrap();
        assert_eq!(all(&s), ["127.0.0.9"]);
        let s: Sources = "127.0.2.4/31".parse().unwrap();
        assert_eq!(all(&s), ["127.0.2.4", "127.0.2.5"]);
        let s: Sources = "127.0.2.77/30".parse().unwrap();
        assert_eq!(all(&s), ["127.0.2.77", "127.0.2.78"]);
        let s: Sources = "fd00::10/126".parse().unwrap();
        assert_eq!(all(&s), ["fd00::10", "fd00::11", "fd00::12", "fd00::13"]);
        let s: Sources = "[::1]".parse().unwrap();
        assert_eq!(all(&s), ["::1"]);
    }

    #[test]
    fn bad_ranges_say_why() {
        assert!("127.0.0.1/33".parse::<Sources>().unwrap_err().contains("prefix length"));
        assert!("localhost".parse::<Sources>().unwrap_err().contains("invalid address"));
        assert!("10.0.0.0/4".parse::<Sources>().unwrap_err().contains("longer prefix"));
        assert!("fd00::/64".parse::<Sources>().unwrap_err().contains("longer prefix"));
    }

    #[test]
    fn gate_slots_are_even() {
        let g = ConnGate::new(1000.0);
        let waits: Vec<Duration> = (0..5).map(|_| g.reserve()).collect();
        // The first slot is now; each later one a millisecond after the one before.
        assert!(waits[0] < Duration::from_micros(100), "{waits:?}");
        for w in waits.windows(2) {
            let d = w[1].saturating_sub(w[0]);
            assert!(d > Duration::from_micros(900) && d <= Duration::from_micros(1000), "{waits:?}");
        }
        assert_eq!(g.per_second(), 1000.0);
    }
}
