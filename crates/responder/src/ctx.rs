//! What every connection of an I/O thread shares: the answer engine, the thread's counters,
//! the server policies and the faults.

use std::sync::Arc;
use std::time::Duration;

use crate::answer::Answerer;
use crate::faults::Active;
use crate::policy::Limits;
use crate::stats::Counters;

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
    /// HTTP/2 and QUIC: most concurrent streams a client may open.
    pub max_streams: u32,
    /// DoH path, e.g. `/dns-query`.
    pub doh_path: Arc<str>,
    /// The faults in force.
    pub faults: Arc<Active>,
    /// `cache-control` value for answers with records: `max-age=TTL`.
    pub cache_control: http::HeaderValue,
}
