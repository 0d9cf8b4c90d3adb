//! What every connection of an I/O thread shares: the answer engine, the thread's counters,
//! the server policies and the faults.

use std::sync::Arc;
use std::time::Duration;

use crate::answer::Answerer;
use crate::faults::Active;
use crate::policy::{Admit, Limits, Place};
use crate::stats::{add, Counters};

/// Per-thread settings shared by the connections of every async transport on that thread.
pub(crate) struct Ctx {
    pub answerer: Arc<Answerer>,
    /// This thread's counters (single writer: this thread).
    pub counters: Arc<Counters>,
    /// A connection with no traffic for this long is closed.
    pub idle_timeout: Duration,
    /// Close a connection gracefully once it has taken this many queries (None: never).
    pub max_queries: Option<u64>,
    /// TCP and DoT: answers leave in the order their queries came (`ResponderConfig::in_order`).
    pub in_order: bool,
    /// The most connections each listener holds (shared by every thread).
    pub limits: Arc<Limits>,
    /// A query or request begun must arrive whole within this long (`--request-timeout`).
    pub request_timeout: Duration,
    /// TCP and DoT: the most answer bytes a connection holds unsent before it stops reading.
    pub max_pending_bytes: usize,
    /// `--max-qps-per-client` (None: no limit).
    pub client_rate: Option<Arc<crate::policy::ClientRate>>,
    /// TCP and DoT connections this thread holds open now.
    pub open_conns: std::cell::Cell<usize>,
    /// The TCP, DoT and DoH connections this thread holds under `--max-conns`, so that a new one
    /// at the cap can take the longest-idle one's place.
    pub room: std::rc::Rc<crate::policy::Room>,
    /// At this many open connections the thread is crowded: connections idle for
    /// [`CROWDED_IDLE`] are closed (three quarters of the open-files limit of the thread's table).
    pub crowded_at: usize,
    /// HTTP/2 and QUIC: most concurrent streams a client may open.
    pub max_streams: u32,
    /// DoH path, e.g. `/dns-query`.
    pub doh_path: Arc<str>,
    /// The faults in force.
    pub faults: Arc<Active>,
    /// `cache-control` value for answers with records: `max-age=TTL`.
    pub cache_control: http::HeaderValue,
    /// DoT and DoH: the turns the costly step of each TLS handshake waits for.
    pub handshaker: crate::tls::Handshaker,
}

/// The idle timeout of a TCP or DoT connection while its thread is crowded (holds 3/4 of its
/// open-files limit), when `--idle-timeout` is longer: idle connections make room for new
/// ones before descriptors run out (as unbound shortens its TCP idle timeout when busy).
pub(crate) const CROWDED_IDLE: Duration = Duration::from_secs(1);

impl Ctx {
    /// A new connection's place on `t`'s listener under `--max-conns`: free, counted, or at
    /// the cap the place of the longest idle connection on this thread, which is closed
    /// (counted in `evicted_idle`); None when there is none (counted in `refused_max_conns`):
    /// the caller turns the connection away.
    pub(crate) fn admit(&self, t: crate::answer::Transport) -> Option<Place> {
        Some(match self.limits.admit(t) {
            Admit::Free => Place::Free,
            Admit::Counted(slot) => self.room.enter(t, slot),
            Admit::Refused => match self.room.evict(t) {
                Some(slot) => {
                    add(&self.counters.evicted_idle, 1);
                    self.room.enter(t, slot)
                }
                None => {
                    add(&self.counters.refused_max_conns, 1);
                    return None;
                }
            },
        })
    }
}

/// Three quarters of the calling thread's open-files limit (at least 64): see [`Ctx::crowded_at`].
pub(crate) fn crowded_at() -> usize {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into a struct we own.
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0 { l.rlim_cur } else { 1024 };
    (cur.min(1 << 30) as usize / 4 * 3).max(64)
}
