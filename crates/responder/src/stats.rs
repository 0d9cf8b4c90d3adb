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
    /// DoT connections accepted (TCP accepted; the TLS handshake may still fail).
    pub dot_connections: u64,
    /// DoH connections accepted (HTTP/1.1 and HTTP/2).
    pub doh_connections: u64,
    /// DoH/3 (HTTP/3) QUIC connections accepted.
    pub doh3_connections: u64,
    /// DoQ QUIC connections accepted.
    pub doq_connections: u64,
    /// TLS handshakes (TLS over TCP and QUIC) that resumed a session instead of a full handshake.
    pub tls_resumed: u64,
    /// Connections whose client sent early data (TLS 1.3 early data or QUIC 0-RTT) that was accepted.
    pub early_data: u64,
    /// QUIC Retry packets sent (address validation, `--retry`).
    pub retry_sent: u64,
    /// QUIC connections whose client presented a valid address validation token from an
    /// earlier connection (a NEW_TOKEN frame, `--quic-tokens`): their address needed no Retry
    /// and no anti-amplification wait.
    pub quic_token_validated: u64,
    /// Connections the server closed after their last query (`--max-queries-per-conn`): TCP
    /// and DoT FIN, HTTP/2 and HTTP/3 GOAWAY, HTTP/1.1 `connection: close`, DoQ
    /// CONNECTION_CLOSE (DOQ_NO_ERROR).
    pub closed_max_queries: u64,
    /// Connections the server closed after `--idle-timeout` without traffic (QUIC: the idle
    /// timeout expired).
    pub closed_idle: u64,
    /// Connections turned away because their listener held `--max-conns` already (TCP, DoT,
    /// DoH: closed right after accept; QUIC: refused with CONNECTION_REFUSED).
    pub refused_max_conns: u64,
    /// TCP, DoT and DoH connections closed to make room for a new one when their listener held
    /// `--max-conns` already: the longest idle (at least 200 ms, nothing in flight) of the
    /// accepting thread's connections; the newcomer is kept.
    pub evicted_idle: u64,
    /// Request streams the client stopped (QUIC STOP_SENDING: DoQ, DoH/3) or reset (HTTP/2
    /// RST_STREAM) before their answer left, with its protocol's cancel code:
    /// DOQ_REQUEST_CANCELLED (RFC 9250 section 4.3), H3_REQUEST_CANCELLED (RFC 9114 section
    /// 4.1.1) or CANCEL (RFC 9113 section 7). The stream is freed at once.
    pub cancelled: u64,
    /// The same, with any other code (0, say).
    pub stopped: u64,
    /// Connections closed because a query or request begun on them did not arrive whole
    /// within `--request-timeout` (slowloris, a length prefix whose message never comes), or
    /// whose TLS or QUIC handshake did not finish within it.
    pub closed_slow: u64,
    /// Connections turned away because their listener had `--max-handshakes` TLS or QUIC
    /// handshakes in progress already.
    pub refused_handshakes: u64,
    /// Queries not answered because their client (by IP address) was over
    /// `--max-qps-per-client` (UDP, TCP, DoT: dropped; DoH: 429; DoQ: stream reset).
    pub rate_limited: u64,
    /// Error answers (FORMERR, NOTIMP) not sent over UDP because their thread had sent
    /// `--udp-error-rate` of them in that second already.
    pub errors_withheld: u64,
}

impl fmt::Display for Stats {
    /// `stats queries=.. answered=.. dropped=.. delayed=.. truncated=.. formerr=.. tcp_connections=..
    /// dot_connections=.. doh_connections=.. doh3_connections=.. doq_connections=.. tls_resumed=..
    /// early_data=.. retry_sent=.. quic_token_validated=.. closed_max_queries=.. closed_idle=..
    /// refused_max_conns=.. evicted_idle=.. cancelled=..
    /// stopped=.. closed_slow=.. refused_handshakes=.. rate_limited=.. errors_withheld=..`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stats queries={} answered={} dropped={} delayed={} truncated={} formerr={} tcp_connections={} \
             dot_connections={} doh_connections={} doh3_connections={} doq_connections={} tls_resumed={} \
             early_data={} retry_sent={} quic_token_validated={} closed_max_queries={} closed_idle={} \
             refused_max_conns={} evicted_idle={} cancelled={} stopped={} \
             closed_slow={} refused_handshakes={} rate_limited={} errors_withheld={}",
            self.queries,
            self.answered,
            self.dropped,
            self.delayed,
            self.truncated,
            self.formerr,
            self.tcp_connections,
            self.dot_connections,
            self.doh_connections,
            self.doh3_connections,
            self.doq_connections,
            self.tls_resumed,
            self.early_data,
            self.retry_sent,
            self.quic_token_validated,
            self.closed_max_queries,
            self.closed_idle,
            self.refused_max_conns,
            self.evicted_idle,
            self.cancelled,
            self.stopped,
            self.closed_slow,
            self.refused_handshakes,
            self.rate_limited,
            self.errors_withheld
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
    pub dot_connections: AtomicU64,
    pub doh_connections: AtomicU64,
    pub doh3_connections: AtomicU64,
    pub doq_connections: AtomicU64,
    pub tls_resumed: AtomicU64,
    pub early_data: AtomicU64,
    pub retry_sent: AtomicU64,
    pub quic_token_validated: AtomicU64,
    pub closed_max_queries: AtomicU64,
    pub closed_idle: AtomicU64,
    pub refused_max_conns: AtomicU64,
    pub evicted_idle: AtomicU64,
    pub cancelled: AtomicU64,
    pub stopped: AtomicU64,
    pub closed_slow: AtomicU64,
    pub refused_handshakes: AtomicU64,
    pub rate_limited: AtomicU64,
    pub errors_withheld: AtomicU64,
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
            dot_connections: self.dot_connections.load(Relaxed),
            doh_connections: self.doh_connections.load(Relaxed),
            doh3_connections: self.doh3_connections.load(Relaxed),
            doq_connections: self.doq_connections.load(Relaxed),
            tls_resumed: self.tls_resumed.load(Relaxed),
            early_data: self.early_data.load(Relaxed),
            retry_sent: self.retry_sent.load(Relaxed),
            quic_token_validated: self.quic_token_validated.load(Relaxed),
            closed_max_queries: self.closed_max_queries.load(Relaxed),
            closed_idle: self.closed_idle.load(Relaxed),
            refused_max_conns: self.refused_max_conns.load(Relaxed),
            evicted_idle: self.evicted_idle.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            stopped: self.stopped.load(Relaxed),
            closed_slow: self.closed_slow.load(Relaxed),
            refused_handshakes: self.refused_handshakes.load(Relaxed),
            rate_limited: self.rate_limited.load(Relaxed),
            errors_withheld: self.errors_withheld.load(Relaxed),
        }
    }

    /// Counts a request stream the client stopped before its answer left, by its code.
    pub fn stopped_by_client(&self, code: u64, cancel_code: u64) {
        add(if code == cancel_code { &self.cancelled } else { &self.stopped }, 1);
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
        self.dot_connections += o.dot_connections;
        self.doh_connections += o.doh_connections;
        self.doh3_connections += o.doh3_connections;
        self.doq_connections += o.doq_connections;
        self.tls_resumed += o.tls_resumed;
        self.early_data += o.early_data;
        self.retry_sent += o.retry_sent;
        self.quic_token_validated += o.quic_token_validated;
        self.closed_max_queries += o.closed_max_queries;
        self.closed_idle += o.closed_idle;
        self.refused_max_conns += o.refused_max_conns;
        self.evicted_idle += o.evicted_idle;
        self.cancelled += o.cancelled;
        self.stopped += o.stopped;
        self.closed_slow += o.closed_slow;
        self.refused_handshakes += o.refused_handshakes;
        self.rate_limited += o.rate_limited;
        self.errors_withheld += o.errors_withheld;
    }
}
