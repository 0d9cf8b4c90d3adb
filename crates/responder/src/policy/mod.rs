//! Server policies on connections (seeds/000 section 4.4: Cloudflare closes a connection after
//! 10,000 queries, Quad9 after about 20 s idle): the most connections a listener holds
//! (`--max-conns`), shared by its threads, and the room a new connection finds at that cap
//! ([`room`]). The per-connection policies (most queries per
//! connection, idle timeout) live in each transport's connection code.

mod room;

pub(crate) use room::{Place, Room, Tracker};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::answer::Transport;

/// The most connections one transport's listener holds open at once, over all its threads.
#[derive(Debug)]
pub(crate) struct ConnLimit {
    max: u64,
    open: AtomicU64,
}

/// One open connection counted against a [`ConnLimit`]; frees its place when dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<ConnLimit>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnLimit {
    pub fn new(max: u64) -> Arc<ConnLimit> {
        Arc::new(ConnLimit { max, open: AtomicU64::new(0) })
    }

    /// A place for one more connection, or None when the listener is full.
    pub fn take(self: &Arc<Self>) -> Option<Slot> {
        // Once per connection, not per query: a locked add is fine here.
        if self.open.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Slot(self.clone()))
    }

    /// Connections open now.
    #[cfg(test)]
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }
}

/// The connection limits of every connection-oriented listener (None: no limit), and the
/// handshakes in progress each encrypted listener allows (`--max-handshakes`).
#[derive(Debug, Default)]
pub(crate) struct Limits {
    tcp: Option<Arc<ConnLimit>>,
    dot: Option<Arc<ConnLimit>>,
    doh: Option<Arc<ConnLimit>>,
    doh3: Option<Arc<ConnLimit>>,
    doq: Option<Arc<ConnLimit>>,
    /// Handshakes in progress, per encrypted listener (DoT, DoH, DoH/3, DoQ).
    handshakes: [Option<Arc<ConnLimit>>; 4],
}

/// Whether a new connection may stay.
pub(crate) enum Admit {
    /// No limit on this listener.
    Free,
    /// Counted; the place is freed when the slot is dropped.
    Counted(Slot),
    /// The listener is full: make room ([`Room::evict`]), or close the connection (TCP) or
    /// refuse it (QUIC).
    Refused,
}

impl Limits {
    /// One limit of `max` connections per listener (each transport its own count), and of
    /// `handshakes` TLS or QUIC handshakes in progress per encrypted listener.
    pub fn new(max: Option<u64>, handshakes: Option<u64>) -> Limits {
        let l = || max.map(ConnLimit::new);
        let h = || handshakes.map(ConnLimit::new);
        Limits { tcp: l(), dot: l(), doh: l(), doh3: l(), doq: l(), handshakes: [h(), h(), h(), h()] }
    }

    /// Whether `t`'s listener has `--max-handshakes` handshakes in progress now.
    pub fn handshakes_full(&self, t: Transport) -> bool {
        let i = match t {
            Transport::Dot => 0,
            Transport::Doh => 1,
            Transport::Doh3 => 2,
            Transport::Doq => 3,
            _ => return false,
        };
        self.handshakes[i].as_ref().is_some_and(|l| l.open.load(Ordering::Relaxed) >= l.max)
    }

    /// A place for one more handshake in progress on `t`'s listener: `Ok(None)` when there
    /// is no limit, `Err(())` when the listener has `--max-handshakes` in progress already.
    /// The place is freed when the slot is dropped (the handshake ended, either way).
    #[allow(clippy::result_unit_err)]
    pub fn handshake(&self, t: Transport) -> Result<Option<Slot>, ()> {
        let i = match t {
            Transport::Dot => 0,
            Transport::Doh => 1,
            Transport::Doh3 => 2,
            Transport::Doq => 3,
            _ => return Ok(None),
        };
        match &self.handshakes[i] {
            None => Ok(None),
            Some(l) => l.take().map(Some).ok_or(()),
        }
    }

    fn of(&self, t: Transport) -> Option<&Arc<ConnLimit>> {
        match t {
            Transport::Tcp => self.tcp.as_ref(),
            Transport::Dot => self.dot.as_ref(),
            Transport::Doh => self.doh.as_ref(),
            Transport::Doh3 => self.doh3.as_ref(),
            Transport::Doq => self.doq.as_ref(),
            _ => None,
        }
    }

    /// Admits a new connection on `t`'s listener, or not.
    pub fn admit(&self, t: Transport) -> Admit {
        match self.of(t) {
            None => Admit::Free,
            Some(l) => match l.take() {
                Some(s) => Admit::Counted(s),
                None => Admit::Refused,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_counts_and_frees() {
        let l = ConnLimit::new(2);
        let a = l.take().unwrap();
        let b = l.take().unwrap();
        assert!(l.take().is_none(), "full at 2");
        assert_eq!(l.open(), 2);
        drop(a);
        let c = l.take().unwrap();
        assert!(l.take().is_none());
        drop((b, c));
        assert_eq!(l.open(), 0);
        let none = Limits::new(None, None);
        assert!(matches!(none.admit(Transport::Tcp), Admit::Free));
        let one = Limits::new(Some(1), Some(1));
        let h = one.handshake(Transport::Doq).unwrap().expect("a counted handshake");
        assert!(one.handshake(Transport::Doq).is_err(), "one handshake at a time");
        assert!(one.handshake(Transport::Tcp).unwrap().is_none(), "TCP has no handshake");
        drop(h);
        assert!(one.handshake(Transport::Doq).unwrap().is_some());
        let _keep = match one.admit(Transport::Dot) {
            Admit::Counted(s) => s,
            _ => panic!("first DoT connection admitted"),
        };
        assert!(matches!(one.admit(Transport::Dot), Admit::Refused));
        assert!(matches!(one.admit(Transport::Tcp), Admit::Counted(_)), "each listener its own count");
    }
}

/// `--max-qps-per-client`: at most `rate` queries per second from each client IP address (a
/// token bucket per address, `rate` deep), shared by every thread of the transports that use
/// it. The table holds the addresses seen in the last second or so: once it holds
/// [`CLIENTS_MAX`] entries, those whose bucket is full again are forgotten, and if that frees
/// nothing the table starts over (so memory stays bounded under spoofed sources).
#[derive(Debug)]
pub struct ClientRate {
    rate: f64,
    start: std::time::Instant,
    table: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, (f64, f64)>>,
}

/// The most client addresses [`ClientRate`] keeps.
pub const CLIENTS_MAX: usize = 65_536;

impl ClientRate {
    /// A limit of `rate` queries per second per client (at least 1).
    pub fn new(rate: u64) -> ClientRate {
        ClientRate {
            rate: rate.max(1) as f64,
            start: std::time::Instant::now(),
            table: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Whether one more query from `ip` may be answered now. An IPv4-mapped IPv6 address
    /// (a dual-stack socket's view of an IPv4 client) counts as its IPv4 address.
    pub fn admit(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        let now = self.start.elapsed().as_secs_f64();
        let Ok(mut t) = self.table.lock() else { return true };
        if t.len() >= CLIENTS_MAX && !t.contains_key(&ip) {
            let rate = self.rate;
            t.retain(|_, (tokens, at)| *tokens + (now - *at) * rate < rate);
            if t.len() >= CLIENTS_MAX {
                t.clear();
            }
        }
        let (tokens, at) = t.entry(ip).or_insert((self.rate, now));
        *tokens = (*tokens + (now - *at) * self.rate).min(self.rate);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn client_rate_is_per_address() {
        let r = ClientRate::new(10);
        let a: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let b: std::net::IpAddr = "192.0.2.2".parse().unwrap();
        let admitted = (0..100).filter(|_| r.admit(a)).count();
        assert!((10..=11).contains(&admitted), "a burst of the bucket's depth, got {admitted}");
        assert!(r.admit(b), "another client has its own bucket");
    }
}
