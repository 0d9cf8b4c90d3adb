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
    (
        "limit_core",
        "limit search: the load one whole core of the target would keep up with, derived from the best step kept up \
         (its load over the share of a core the target used there; linear)",
    ),
    (
        "limit_target",
        "limit search: the target's limit: the limit found where the target set it; where the search stopped \
         first (the generator's pace, or the most tried), limit_core, marked derived (*)",
    ),
];

/// The name of the companion figure that says whether `figure` was derived rather than
/// measured (1 or 0, per repetition): the table marks such cells.
pub fn derived(figure: &str) -> String {
    format!("{figure}.derived")
}

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

/// One step of a limit search, as [`of_limit`] needs it.
#[derive(Debug, Clone, Copy)]
pub struct LimitStep {
    /// Queries per second, or simulated clients.
    pub load: f64,
    /// Kept up (judged so by the search).
    pub ok: bool,
    /// The target's CPU over the step, when it was read.
    pub target_cpu_s: Option<f64>,
    pub duration_s: f64,
}

/// The target's figures of a limit search: `limit_core`, the best step kept up scaled to a
/// whole core of the target by the share of a core it used there; and `limit_target`, the
/// limit found where the target set it (`found`), else `limit_core`, marked derived.
pub fn of_limit(steps: &[LimitStep], limit: Option<f64>, found: bool) -> BTreeMap<String, f64> {
    let mut f = BTreeMap::new();
    let best = steps.iter().filter(|s| s.ok).max_by(|a, b| a.load.total_cmp(&b.load));
    let core = best.and_then(|s| {
        let share = s.target_cpu_s? / s.duration_s;
        (share > 0.0 && share.is_finite()).then(|| s.load / share).filter(|c| c.is_finite())
    });
    if let Some(c) = core {
        f.insert("limit_core".to_string(), c);
    }
    match (found, limit, core) {
        (true, Some(v), _) => {
            f.insert("limit_target".to_string(), v);
            f.insert(derived("limit_target"), 0.0);
        }
        (false, _, Some(c)) => {
            f.insert("limit_target".to_string(), c);
            f.insert(derived("limit_target"), 1.0);
        }
        _ => {}
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn step(load: f64, ok: bool, cpu: Option<f64>) -> LimitStep {
        LimitStep { load, ok, target_cpu_s: cpu, duration_s: 2.0 }
    }

    #[test]
    fn a_search_the_generator_stopped_gives_the_targets_figure_from_its_cpu() {
        // 400 clients kept up with the server a quarter busy (0.5 s of 2 s); 800 was not kept
        // up, for the generator's reasons: the server's core would serve 1,600.
        let steps = [step(200.0, true, Some(0.3)), step(400.0, true, Some(0.5)), step(800.0, false, Some(0.6))];
        let f = of_limit(&steps, None, false);
        assert_eq!(f["limit_core"], 1600.0);
        assert_eq!(f["limit_target"], 1600.0, "not the measured lower bound (400)");
        assert_eq!(f[&derived("limit_target")], 1.0);
    }

    #[test]
    fn a_limit_the_target_set_is_the_figure_measured() {
        let steps = [step(1000.0, true, Some(1.0)), step(2000.0, true, Some(1.9)), step(4000.0, false, Some(2.0))];
        let f = of_limit(&steps, Some(2100.0), true);
        assert_eq!(f["limit_target"], 2100.0);
        assert_eq!(f[&derived("limit_target")], 0.0);
        // Derived anyway, for comparison: 2,000 at 95 % of a core.
        assert!((f["limit_core"] - 2000.0 / 0.95).abs() < 1e-6);
    }

    #[test]
    fn no_cpu_reading_no_derived_figure() {
        let f = of_limit(&[step(400.0, true, None)], None, false);
        assert!(f.is_empty(), "{f:?}");
        let f = of_limit(&[step(400.0, true, Some(0.0))], None, false);
        assert!(!f.contains_key("limit_target"), "{f:?}");
    }
}
