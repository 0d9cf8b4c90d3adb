//! Server policies on connections (seeds/000 section 4.4: Cloudflare closes a connection after
//! 10,000 queries, Quad9 after about 20 s idle): the most connections a listener holds
//! (`--max-conns`), shared by its threads. The per-connection policies (most queries per
//! connection, idle timeout) live in each transport's connection code.

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

/// The connection limits of every connection-oriented listener (None: no limit).
#[derive(Debug, Default)]
pub(crate) struct Limits {
    tcp: Option<Arc<ConnLimit>>,
    dot: Option<Arc<ConnLimit>>,
    doh: Option<Arc<ConnLimit>>,
    doh3: Option<Arc<ConnLimit>>,
    doq: Option<Arc<ConnLimit>>,
}

/// Whether a new connection may stay.
pub(crate) enum Admit {
    /// No limit on this listener.
    Free,
    /// Counted; the place is freed when the slot is dropped.
    Counted(Slot),
    /// The listener is full: close the connection (TCP) or refuse it (QUIC).
    Refused,
}

impl Limits {
    /// One limit of `max` connections per listener (each transport its own count).
    pub fn new(max: Option<u64>) -> Limits {
        let l = || max.map(ConnLimit::new);
        Limits { tcp: l(), dot: l(), doh: l(), doh3: l(), doq: l() }
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
        let none = Limits::new(None);
        assert!(matches!(none.admit(Transport::Tcp), Admit::Free));
        let one = Limits::new(Some(1));
        let _keep = match one.admit(Transport::Dot) {
            Admit::Counted(s) => s,
            _ => panic!("first DoT connection admitted"),
        };
        assert!(matches!(one.admit(Transport::Dot), Admit::Refused));
        assert!(matches!(one.admit(Transport::Tcp), Admit::Counted(_)), "each listener its own count");
    }
}
