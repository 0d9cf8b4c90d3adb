//! Connections: how they came up (handshake times, resumption, early data, what was
//! negotiated), how they failed, and who closed them and how.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ErrorKind, Histogram, LatencySummary};

kinds! {
    /// Who ended a connection, and how.
    Close {
        /// The server closed it (TCP FIN, TLS close_notify then FIN).
        ServerFin = "server_fin",
        /// The server reset it (TCP RST, or a QUIC stateless reset: it no longer knew the
        /// connection).
        ServerReset = "server_reset",
        /// The server sent HTTP/2 or HTTP/3 GOAWAY.
        ServerGoaway = "server_goaway",
        /// The server closed the QUIC connection (CONNECTION_CLOSE).
        ServerQuicClose = "server_quic_close",
        /// The QUIC idle timeout expired.
        IdleTimeout = "idle_timeout",
        /// The client closed it because the run ended.
        ClientEnd = "client_end",
        /// The client closed it at the end of its lifetime (time or queries).
        ClientLifetime = "client_lifetime",
        /// The client closed it after idling.
        ClientIdle = "client_idle",
        /// It broke on an error (see the connection errors).
        Error = "error",
    }
}

kinds! {
    /// How a connection that stopped taking queries (its lifetime or query count spent, or the
    /// server's GOAWAY) ended while its outstanding queries drained; the lane's new queries went
    /// on its next connection meanwhile.
    DrainEnd {
        /// Every query outstanding on it was answered.
        Answered = "answered",
        /// At least one of its queries ended without an answer on it (most often: it timed out
        /// on its own deadline).
        TimedOut = "timed_out",
        /// The server closed or reset it first (its unanswered queries were sent again).
        ServerClosed = "server_closed",
        /// The run ended first.
        RunEnd = "run_end",
    }
}

/// Whether TLS 1.3 or QUIC early data (0-RTT) was used on a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EarlyData {
    #[default]
    NotOffered,
    /// Offered, but the server refused it (queries were sent again after the handshake).
    Rejected,
    Accepted,
}

/// How one connection came up.
#[derive(Debug, Clone, Default)]
pub struct Handshake {
    /// TCP connect: SYN to established.
    pub tcp_ns: Option<u64>,
    /// TLS handshake after the TCP connect.
    pub tls_ns: Option<u64>,
    /// QUIC handshake (includes TLS).
    pub quic_ns: Option<u64>,
    /// Round-trip time seen by the transport (TCP_INFO or QUIC path statistics).
    pub rtt_ns: Option<u64>,
    pub resumed: bool,
    /// QUIC: the connection presented an address validation token from an earlier
    /// connection (NEW_TOKEN, RFC 9000 section 8.1.3) in its Initial.
    pub token: bool,
    pub early_data: EarlyData,
    /// `TLSv1.3`, `TLSv1.2`.
    pub tls_version: Option<&'static str>,
    /// ALPN protocol agreed, e.g. `dot`, `h2`, `h3`, `doq`.
    pub alpn: Option<String>,
    pub cipher: Option<&'static str>,
}

impl Handshake {
    /// The whole handshake: TCP + TLS, or QUIC.
    pub fn total_ns(&self) -> Option<u64> {
        match (self.tcp_ns, self.tls_ns, self.quic_ns) {
            (_, _, Some(q)) => Some(q),
            (Some(a), Some(b), None) => Some(a + b),
            (a, b, None) => a.or(b),
        }
    }
}

/// Connection event counts, per second and in total. Every attempt is counted once: opened,
/// failed, or in progress when the run ended (counted in the run's last second).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnCounters {
    pub opened: u64,
    pub failed: u64,
    /// Attempts still in progress (handshake not done) when the run ended.
    pub in_progress: u64,
    pub resumed: u64,
    /// QUIC handshakes that presented an address validation token.
    pub tokens: u64,
    pub early_offered: u64,
    pub early_accepted: u64,
    pub closed: [u64; Close::COUNT],
    pub errors: [u64; ErrorKind::COUNT],
    /// Connections that stopped taking queries with queries still outstanding, and began to
    /// drain them while the lane went on on a new connection.
    pub drains: u64,
    /// How the drains ended.
    pub drain_ends: [u64; DrainEnd::COUNT],
}

impl ConnCounters {
    pub fn merge(&mut self, o: &ConnCounters) {
        self.opened += o.opened;
        self.failed += o.failed;
        self.in_progress += o.in_progress;
        self.resumed += o.resumed;
        self.tokens += o.tokens;
        self.early_offered += o.early_offered;
        self.early_accepted += o.early_accepted;
        crate::counters::add(&mut self.closed, &o.closed);
        crate::counters::add(&mut self.errors, &o.errors);
        self.drains += o.drains;
        crate::counters::add(&mut self.drain_ends, &o.drain_ends);
    }

    pub fn drains_ended(&self) -> u64 {
        self.drain_ends.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        *self == ConnCounters::default()
    }

    pub fn closed_total(&self) -> u64 {
        self.closed.iter().sum()
    }

    pub fn close_map(&self) -> BTreeMap<String, u64> {
        Close::map(&self.closed)
    }

    pub fn error_map(&self) -> BTreeMap<String, u64> {
        ErrorKind::map(&self.errors)
    }
}

/// Handshake histograms and negotiated parameters of a run (3 significant figures).
#[derive(Debug, Clone)]
pub struct ConnHistograms {
    pub tcp: Histogram,
    pub tls: Histogram,
    pub quic: Histogram,
    pub total: Histogram,
    pub rtt: Histogram,
    /// Handshake time divided by RTT, in thousandths (1000 = one round trip).
    pub ratio_milli: Histogram,
    /// ("tls_version" | "alpn" | "cipher", value) → connections.
    pub negotiated: BTreeMap<(&'static str, String), u64>,
}

impl Default for ConnHistograms {
    fn default() -> Self {
        ConnHistograms {
            tcp: Histogram::new(3),
            tls: Histogram::new(3),
            quic: Histogram::new(3),
            total: Histogram::new(3),
            rtt: Histogram::new(3),
            ratio_milli: Histogram::new(3),
            negotiated: BTreeMap::new(),
        }
    }
}

impl ConnHistograms {
    pub fn record(&mut self, h: &Handshake) {
        if let Some(v) = h.tcp_ns {
            self.tcp.record(v);
        }
        if let Some(v) = h.tls_ns {
            self.tls.record(v);
        }
        if let Some(v) = h.quic_ns {
            self.quic.record(v);
        }
        if let Some(v) = h.total_ns() {
            self.total.record(v);
            if let Some(rtt) = h.rtt_ns.filter(|r| *r > 0) {
                self.ratio_milli.record(v.saturating_mul(1000) / rtt);
            }
        }
        if let Some(v) = h.rtt_ns {
            self.rtt.record(v);
        }
        for (k, v) in [
            ("tls_version", h.tls_version.map(str::to_string)),
            ("alpn", h.alpn.clone()),
            ("cipher", h.cipher.map(str::to_string)),
        ] {
            if let Some(v) = v {
                *self.negotiated.entry((k, v)).or_insert(0) += 1;
            }
        }
    }

    pub fn merge(&mut self, o: &ConnHistograms) {
        self.tcp.merge(&o.tcp);
        self.tls.merge(&o.tls);
        self.quic.merge(&o.quic);
        self.total.merge(&o.total);
        self.rtt.merge(&o.rtt);
        self.ratio_milli.merge(&o.ratio_milli);
        for (k, v) in &o.negotiated {
            *self.negotiated.entry(k.clone()).or_insert(0) += v;
        }
    }
}

/// Connections of a run, in the results file (absent for UDP).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConnectionSummary {
    pub opened: u64,
    /// Attempts that did not come up, by error kind in `errors`.
    pub failed: u64,
    /// Attempts still in progress (handshake not done) when the run ended: with `opened` and
    /// `failed`, every attempt has one fate. Absent from files written before it existed (0).
    #[serde(default)]
    pub in_progress: u64,
    pub errors: BTreeMap<String, u64>,
    /// Closed connections by who closed them and how.
    pub closed: BTreeMap<String, u64>,
    /// TLS sessions resumed (abbreviated handshakes).
    pub resumed: u64,
    /// QUIC handshakes that presented an address validation token the server gave on an
    /// earlier connection (NEW_TOKEN): address validation, not resumption. Whether the server
    /// took it shows in its handshake time (no anti-amplification wait) and in `volley serve`'s
    /// `quic_token_validated`. Absent from files written before it existed (0).
    #[serde(default)]
    pub quic_tokens: u64,
    /// Connections that offered early data (0-RTT), and those whose early data was accepted.
    pub early_data_offered: u64,
    pub early_data_accepted: u64,
    /// Handshake times: TCP connect, TLS handshake, QUIC handshake, and the whole.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handshake_tcp: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handshake_tls: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handshake_quic: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handshake_total: Option<LatencySummary>,
    /// Round-trip time seen by the transport when the connection came up.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rtt: Option<LatencySummary>,
    /// Handshake time over RTT, in thousandths (the `_ns` fields hold ratio x 1000).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handshake_rtt_ratio_milli: Option<LatencySummary>,
    /// What was negotiated: `tls_version`, `alpn`, `cipher` → value → connections.
    pub negotiated: BTreeMap<String, BTreeMap<String, u64>>,
    /// Connections that drained their outstanding queries after they stopped taking new ones
    /// (absent when none did, and from files written before it existed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub draining: Option<DrainSummary>,
}

/// Connections that drained: at a connection's end of life (its lifetime or query count
/// spent, a client profile's switch, the server's GOAWAY) the lane sends its new queries on a
/// new connection at once, and the old one takes no more and closes once its outstanding
/// queries have their fates. Connections open at once may then exceed the configured count
/// by the draining ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DrainSummary {
    /// Connections that began to drain.
    pub started: u64,
    /// The most connections draining at the end of any second of the run (absent where the
    /// series does not tell, e.g. per group of a mixture).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak: Option<u64>,
    /// How the drains ended (`DrainEnd` names: answered, timed_out, server_closed, run_end);
    /// zero entries left out.
    pub ended: BTreeMap<String, u64>,
}

impl DrainSummary {
    /// The drains of counters `c`, with the peak taken from the series (None when none began).
    pub fn of(c: &ConnCounters, peak: Option<u64>) -> Option<DrainSummary> {
        (c.drains > 0).then(|| DrainSummary { started: c.drains, peak, ended: DrainEnd::map(&c.drain_ends) })
    }
}

impl ConnectionSummary {
    pub fn of(c: &ConnCounters, h: &ConnHistograms) -> ConnectionSummary {
        let opt = |h: &Histogram| (!h.is_empty()).then(|| LatencySummary::of(h));
        let mut negotiated: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((k, v), n) in &h.negotiated {
            negotiated.entry(k.to_string()).or_default().insert(v.clone(), *n);
        }
        ConnectionSummary {
            opened: c.opened,
            failed: c.failed,
            in_progress: c.in_progress,
            errors: c.error_map(),
            closed: c.close_map(),
            resumed: c.resumed,
            quic_tokens: c.tokens,
            early_data_offered: c.early_offered,
            early_data_accepted: c.early_accepted,
            handshake_tcp: opt(&h.tcp),
            handshake_tls: opt(&h.tls),
            handshake_quic: opt(&h.quic),
            handshake_total: opt(&h.total),
            rtt: opt(&h.rtt),
            handshake_rtt_ratio_milli: opt(&h.ratio_milli),
            negotiated,
            draining: DrainSummary::of(c, None),
        }
    }
}

/// Connection events of one second in the series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondConnections {
    /// Connections open at the end of the second (opened so far minus closed so far).
    #[serde(default)]
    pub active: u64,
    /// Of `active`, the connections draining at the end of the second (taking no new queries,
    /// waiting for the fates of their outstanding ones).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub draining: u64,
    pub opened: u64,
    pub closed: u64,
    /// `closed` by who closed and how (`Close` names), zero entries left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub closed_by: BTreeMap<String, u64>,
    pub failed: u64,
    pub resumed: u64,
    /// 0-RTT early data offered and accepted on the connections opened in this second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub early_data_offered: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub early_data_accepted: u64,
    /// Handshake times (TCP + TLS, or QUIC) of the connections opened in this second, when
    /// any were (2 significant figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake: Option<crate::SecondLatency>,
    /// The same split: TCP connect, TLS handshake after it, QUIC handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_tcp: Option<crate::SecondLatency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_tls: Option<crate::SecondLatency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_quic: Option<crate::SecondLatency>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The handshake times of one second's new connections, whole and by part (2 significant
/// figures each): what a worker records and the collector merges.
#[derive(Debug, Clone)]
pub struct SecondHandshakes {
    pub total: Histogram,
    pub tcp: Histogram,
    pub tls: Histogram,
    pub quic: Histogram,
}

impl Default for SecondHandshakes {
    fn default() -> Self {
        SecondHandshakes {
            total: Histogram::new(2),
            tcp: Histogram::new(2),
            tls: Histogram::new(2),
            quic: Histogram::new(2),
        }
    }
}

impl SecondHandshakes {
    pub fn record(&mut self, h: &Handshake) {
        for (hist, v) in [
            (&mut self.total, h.total_ns()),
            (&mut self.tcp, h.tcp_ns),
            (&mut self.tls, h.tls_ns),
            (&mut self.quic, h.quic_ns),
        ] {
            if let Some(v) = v {
                hist.record(v);
            }
        }
    }

    pub fn merge(&mut self, o: &SecondHandshakes) {
        self.total.merge(&o.total);
        self.tcp.merge(&o.tcp);
        self.tls.merge(&o.tls);
        self.quic.merge(&o.quic);
    }

    pub fn reset(&mut self) {
        self.total.reset();
        self.tcp.reset();
        self.tls.reset();
        self.quic.reset();
    }

    /// Puts the second's handshake summaries into its connections row.
    pub fn fill(&self, c: &mut SecondConnections) {
        let of = |h: &Histogram| (!h.is_empty()).then(|| crate::SecondLatency::of(h));
        c.handshake = of(&self.total);
        c.handshake_tcp = of(&self.tcp);
        c.handshake_tls = of(&self.tls);
        c.handshake_quic = of(&self.quic);
    }
}

impl SecondConnections {
    pub fn of(c: &ConnCounters) -> Option<SecondConnections> {
        (!c.is_empty()).then(|| SecondConnections {
            active: 0,
            opened: c.opened,
            closed: c.closed_total(),
            closed_by: Close::map(&c.closed),
            failed: c.failed,
            resumed: c.resumed,
            early_data_offered: c.early_offered,
            early_data_accepted: c.early_accepted,
            ..SecondConnections::default()
        })
    }

    /// Adds another run's second (runs made at the same time: their open connections add up).
    pub fn add(&mut self, o: &SecondConnections) {
        self.active += o.active;
        self.draining += o.draining;
        self.opened += o.opened;
        self.closed += o.closed;
        for (k, n) in &o.closed_by {
            *self.closed_by.entry(k.clone()).or_default() += n;
        }
        self.failed += o.failed;
        self.resumed += o.resumed;
        self.early_data_offered += o.early_data_offered;
        self.early_data_accepted += o.early_data_accepted;
        for (mine, theirs) in [
            (&mut self.handshake, &o.handshake),
            (&mut self.handshake_tcp, &o.handshake_tcp),
            (&mut self.handshake_tls, &o.handshake_tls),
            (&mut self.handshake_quic, &o.handshake_quic),
        ] {
            if let Some(b) = theirs {
                let mut h = mine.as_ref().map_or_else(|| Histogram::new(2), |a| Histogram::from_sparse(&a.histogram));
                h.merge(&Histogram::from_sparse(&b.histogram));
                *mine = Some(crate::SecondLatency::of(&h));
            }
        }
    }
}
