//! The figures a run gives, each a number taken from its results (and the embedded
//! responder's counters over the run).

use std::collections::BTreeMap;
use std::time::Duration;

use volley_metrics::RunResult;

/// Every figure a column may show, with what it is.
pub const FIGURES: &[(&str, &str)] = &[
    ("qps", "answered queries per second"),
    ("answered", "answered queries over queries sent"),
    ("p50_ms", "median latency, ms"),
    ("p99_ms", "99th percentile latency, ms"),
    ("max_ms", "highest latency, ms"),
    ("slow", "answers slower than the runs' slow_over"),
    ("delayed", "answers the server held back on purpose (its delay rule; a target's: its UDP row's slow answers)"),
    (
        "held_up",
        "slow answers besides those the server delayed: queries held up behind another (a target's: slow minus \
         its UDP row's slow)",
    ),
    ("bytes", "bytes on the wire per answered query, both directions, headers included"),
    ("packets", "packets on the wire per answered query, both directions"),
    ("handshake_rtts", "median connection handshake time in round-trip times"),
    ("handshake_ms", "median connection handshake time, ms"),
    ("handshake_2rtt", "share of handshakes that took 1.5 RTTs or more (2 RTTs where 1 was expected)"),
    ("resumed", "share of handshakes that resumed a TLS session"),
    ("quic_tokens", "share of handshakes that presented a QUIC address validation token (NEW_TOKEN)"),
    ("connections", "connections opened"),
    ("server_cpu_us", "the target's CPU time per answered query, us"),
    ("timeouts", "queries that timed out"),
    ("limit", "the highest load kept up (limit search), queries per second"),
];

/// The figures of one run. `delayed` is the responder's count of answers it held back over
/// the run (None against an external target); `slow_over` the latency from which an answer is
/// slow.
pub fn of_run(r: &RunResult, delayed: Option<u64>, slow_over: Duration) -> BTreeMap<String, f64> {
    let mut f = BTreeMap::new();
    let mut put = |k: &str, v: f64| {
        if v.is_finite() {
            f.insert(k.to_string(), v);
        }
    };
    let t = &r.totals;
    put("qps", r.qps.answered);
    put("answered", t.answered_ratio());
    let ms = |ns: u64| ns as f64 / 1e6;
    if r.latency.count > 0 {
        put("p50_ms", ms(r.latency.p50_ns));
        put("p99_ms", ms(r.latency.p99_ns));
        put("max_ms", ms(r.latency.max_ns));
    }
    let over = slow_over.as_nanos() as u64;
    let slow: u64 = r.latency.histogram.iter().filter(|&(v, _)| v >= over).map(|(_, n)| n).sum();
    put("slow", slow as f64);
    if let Some(d) = delayed {
        put("delayed", d as f64);
        put("held_up", slow.saturating_sub(d) as f64);
    }
    if !t.wire.is_empty() && t.answered > 0 {
        put("bytes", (t.wire.bytes_out + t.wire.bytes_in) as f64 / t.answered as f64);
        put("packets", (t.wire.packets_out + t.wire.packets_in) as f64 / t.answered as f64);
    }
    if let Some(c) = &r.connections {
        put("connections", c.opened as f64);
        if let Some(h) = &c.handshake_rtt_ratio_milli {
            put("handshake_rtts", h.p50_ns as f64 / 1000.0);
            if h.count > 0 {
                let long: u64 = h.histogram.iter().filter(|&(v, _)| v >= 1500).map(|(_, n)| n).sum();
                put("handshake_2rtt", long as f64 / h.count as f64);
            }
        }
        if let Some(h) = &c.handshake_total {
            put("handshake_ms", ms(h.p50_ns));
        }
        if c.opened > 0 {
            // Connections without TLS (TCP) resumed none.
            put("resumed", c.resumed as f64 / c.opened as f64);
            put("quic_tokens", c.quic_tokens as f64 / c.opened as f64);
        }
    }
    if let Some(c) = r.target_cpu.as_ref().filter(|_| t.answered > 0) {
        put("server_cpu_us", c.cpu_us_per_answer);
    }
    put("timeouts", t.timed_out as f64);
    f
}

/// The median of some values (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}
