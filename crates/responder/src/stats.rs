//! Counters: one set per I/O thread (single writer, so no locked instructions on the hot
//! path), summed when read.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Totals since start, summed over every thread and transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages received (well-formed or not).
    pub queries: u64,
    /// Responses sent (delayed ones once they left).
    pub answered: u64,
    /// Messages never answered: no header, QR=1, a `drop` label or a `--drop` rule.
    pub dropped: u64,
    /// Responses held back by a delay rule or a `delay-DUR` label.
    pub delayed: u64,
    /// Responses sent with TC=1.
    pub truncated: u64,
    /// Responses with RCODE FORMERR.
    pub formerr: u64,
    /// TCP connections accepted.
    pub tcp_connections: u64,
}

impl fmt::Display for Stats {
    /// `stats queries=.. answered=.. dropped=.. delayed=.. truncated=.. formerr=.. tcp_connections=..`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stats queries={} answered={} dropped={} delayed={} truncated={} formerr={} tcp_connections={}",
            self.queries, self.answered, self.dropped, self.delayed, self.truncated, self.formerr, self.tcp_connections
        )
    }
}

/// One thread's counters. Only the owning thread writes (load + store, no `lock` prefix);
/// any thread may read.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    pub queries: AtomicU64,
    pub answered: AtomicU64,
    pub dropped: AtomicU64,
    pub delayed: AtomicU64,
    pub truncated: AtomicU64,
    pub formerr: AtomicU64,
    pub tcp_connections: AtomicU64,
}

/// Adds `by` to a counter that only the calling thread writes.
#[inline]
pub(crate) fn add(c: &AtomicU64, by: u64) {
    if by != 0 {
        c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
    }
}

impl Counters {
    pub fn snapshot(&self) -> Stats {
        Stats {
            queries: self.queries.load(Relaxed),
            answered: self.answered.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            delayed: self.delayed.load(Relaxed),
            truncated: self.truncated.load(Relaxed),
            formerr: self.formerr.load(Relaxed),
            tcp_connections: self.tcp_connections.load(Relaxed),
        }
    }

    /// Counts one sent response from its header bytes (TC bit, FORMERR).
    #[inline]
    pub fn sent(&self, response: &[u8]) {
        add(&self.answered, 1);
        if let Some(&f) = response.get(2) {
            if f & 0x02 != 0 {
                add(&self.truncated, 1);
            }
        }
        if let Some(&r) = response.get(3) {
            if r & 0x0F == 1 {
                add(&self.formerr, 1);
            }
        }
    }
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.queries += o.queries;
        self.answered += o.answered;
        self.dropped += o.dropped;
        self.delayed += o.delayed;
        self.truncated += o.truncated;
        self.formerr += o.formerr;
        self.tcp_connections += o.tcp_connections;
    }
}
