//! Results with known contents: per-second counters and histograms built from a list of
//! events, summarised with the metrics crate's own `SecondRow::of` and `LatencySummary::of`.

#![allow(dead_code)] // Each test file uses a different part.

use serde_json::json;
use volley_metrics::{
    Close, ConnHistograms, ConnectionSummary, Counters, ErrorKind, Handshake, Histogram, LatencySummary, RunResult,
    SecondRow, Totals, WireStats, SCHEMA,
};
use volley_report::NamedRun;

pub const S: u64 = 1_000_000_000;

/// What a run does. Answers carry the given latencies, in order, spread evenly over
/// `seconds` (answer i is sent at `i * seconds / n` and arrives `latency` later); every
/// `nxdomain_every`-th answer is NXDOMAIN; then `timed_out` timeouts and `failed` resets at
/// the end of the first second.
pub struct Spec {
    pub latencies: Vec<u64>,
    pub seconds: u64,
    pub nxdomain_every: Option<u64>,
    pub timed_out: u64,
    pub failed: u64,
    pub start_ms: u64,
    /// Handshakes (TCP, TLS ns) of connections opened in second 0; every second one resumed.
    pub handshakes: Vec<(u64, u64)>,
    pub transport: &'static str,
    pub cpu_ns: u64,
    pub interrupted: bool,
    /// What the transports counted on the wire (empty: no `totals.wire`).
    pub wire: WireStats,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            latencies: (0..1000).map(|i| 100_000 + i * 1_000).collect(),
            seconds: 5,
            nxdomain_every: None,
            timed_out: 0,
            failed: 0,
            start_ms: 1_735_787_045_000,
            handshakes: Vec::new(),
            transport: "udp",
            cpu_ns: 500_000_000,
            interrupted: false,
            wire: WireStats::default(),
        }
    }
}

pub fn build(spec: &Spec) -> RunResult {
    let n = spec.latencies.len() as u64;
    let span = spec.seconds * S;
    let mut secs: Vec<(Counters, Histogram)> =
        (0..=spec.seconds).map(|_| (Counters::default(), Histogram::new(2))).collect();
    let mut latency = Histogram::new(3);
    let mut conns = ConnHistograms::default();
    let at = |t: u64| (t / S) as usize;
    for (k, h) in spec.handshakes.iter().enumerate() {
        let hs = Handshake {
            tcp_ns: Some(h.0),
            tls_ns: (h.1 > 0).then_some(h.1),
            resumed: k % 2 == 1,
            ..Handshake::default()
        };
        let c = &mut secs[0].0.conns;
        c.opened += 1;
        c.resumed += hs.resumed as u64;
        conns.record(&hs);
    }
    for (i, &lat) in spec.latencies.iter().enumerate() {
        let t = i as u64 * span / n.max(1);
        let s = &mut secs[at(t)].0;
        s.issued += 1;
        s.sent += 1;
        s.bytes_out += 40;
        let rcode = match spec.nxdomain_every {
            Some(e) if (i as u64 + 1).checked_rem(e) == Some(0) => 3,
            _ => 0,
        };
        let (c, h) = &mut secs[at(t + lat)];
        c.answered += 1;
        c.rcodes[rcode] += 1;
        c.bytes_in += 60;
        h.record(lat);
        latency.record(lat);
    }
    let last = &mut secs[spec.seconds as usize - 1].0;
    for _ in 0..spec.timed_out {
        last.issued += 1;
        last.sent += 1;
        last.bytes_out += 40;
        last.timed_out += 1;
    }
    for _ in 0..spec.failed {
        last.issued += 1;
        last.sent += 1;
        last.bytes_out += 40;
        last.failed += 1;
        last.errors[ErrorKind::Reset as usize] += 1;
    }
    secs[spec.seconds as usize].0.conns.closed[Close::ClientEnd as usize] += spec.handshakes.len() as u64 / 2;

    let mut total = Counters::default();
    for (c, _) in &secs {
        total.merge(c);
    }
    total.wire = spec.wire;
    let series: Vec<SecondRow> = secs.iter().enumerate().map(|(k, (c, h))| SecondRow::of(k as u32, c, h)).collect();
    let totals = Totals::from_counters(&total, 0);
    let duration_s = spec.seconds as f64;
    let cpu_s = spec.cpu_ns as f64 / 1e9;
    let connections = (!spec.handshakes.is_empty()).then(|| ConnectionSummary::of(&total.conns, &conns));
    let url = format!("{}://127.0.0.1:5353", spec.transport);
    // Built as JSON, as a reader of results files sees them, so that fields added to the
    // schema later (optional, by the compatibility policy) do not break the fixture.
    let mut v = json!({
        "schema": SCHEMA,
        "volley_version": "0.1.0",
        "status": if spec.interrupted { "interrupted" } else { "complete" },
        "command": ["volley", "run", url, "-l", format!("{}s", spec.seconds), "--name", "it's here"],
        "started_at": "2025-01-02T03:04:05.000Z",
        "started_unix_ms": spec.start_ms,
        "duration_s": duration_s,
        "elapsed_s": duration_s + 0.25,
        "target": {"url": url, "transport": spec.transport, "address": "127.0.0.1:5353"},
        "load": {
            "model": "closed", "concurrency": 10, "duration_s": duration_s, "timeout_ms": 2000,
            "threads": 1, "connections": 1, "queries": "name:www.example.test A"
        },
        "totals": totals,
        "qps": {"issued": totals.issued as f64 / duration_s, "sent": totals.sent as f64 / duration_s, "answered": totals.answered as f64 / duration_s},
        "latency": LatencySummary::of(&latency),
        "generator": {
            "cpu_s": cpu_s,
            "cpu_us_per_answer": if totals.answered > 0 { cpu_s * 1e6 / totals.answered as f64 } else { 0.0 },
            "threads": 1
        },
        "series": series,
    });
    if let Some(c) = connections {
        v["connections"] = serde_json::to_value(c).unwrap();
    }
    serde_json::from_value(v).expect("a valid results document")
}

pub fn named(name: &str, spec: &Spec) -> NamedRun {
    NamedRun::new(name, build(spec))
}

/// A TCP-like run with connections and handshakes.
pub fn tcp_spec() -> Spec {
    Spec { transport: "tcp", handshakes: (0..20).map(|k| (50_000 + k * 1_000, 0)).collect(), ..Spec::default() }
}
