//! Time the machine itself lost: a virtual machine's *steal* time, when the hypervisor ran
//! something else on its vCPUs. While it does, nothing on the machine runs (the generator, a
//! target on the same host, the link's emulator), so every timestamp taken there jumps, and a
//! latency tail can be the host's rather than the server's. The kernel counts it per CPU in
//! `/proc/stat`; a run reads it at its start and end.

use serde::{Deserialize, Serialize};

/// The share of the machine's CPU time stolen over a run above which the run carries a
/// warning.
pub const STEAL_WARN: f64 = 0.01;

/// `/proc/stat` counts in USER_HZ, 100 per second on every architecture Linux exports it for.
const TICKS_PER_S: f64 = 100.0;

/// The machine's steal time over a run (results' `host`, docs/results-schema.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// CPUs online (the `cpuN` lines of `/proc/stat`).
    pub cpus: u32,
    /// CPU time stolen by the hypervisor, all CPUs together, seconds.
    pub steal_s: f64,
    /// `steal_s` over the run's wall time times `cpus`: the share of the machine's CPU time
    /// it lost.
    pub steal_share: f64,
}

/// The warning of a run whose machine lost more than [`STEAL_WARN`] of its CPU time.
pub fn steal_warning(h: &HostInfo) -> Option<String> {
    (h.steal_share > STEAL_WARN).then(|| {
        format!(
            "the hypervisor took {:.1}% of this machine's CPU time during the run (steal, {:.2}s over {} CPUs): \
             nothing here ran while it did (the generator, a local target, the link's emulator), and the latency \
             tail holds those pauses; figures that move from run to run may be the host's, not the server's",
            h.steal_share * 100.0,
            h.steal_s,
            h.cpus
        )
    })
}

/// The steal counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct StealClock {
    ticks: u64,
    cpus: u32,
    at: std::time::Instant,
}

impl StealClock {
    /// Now; None where `/proc/stat` has no steal column (not Linux, or a kernel before 2.6.11).
    pub fn now() -> Option<StealClock> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let (ticks, cpus) = parse_stat(&text)?;
        Some(StealClock { ticks, cpus, at: std::time::Instant::now() })
    }

    /// The steal time from this moment to now.
    pub fn since(&self) -> Option<HostInfo> {
        let end = StealClock::now()?;
        Some(self.until(&end))
    }

    fn until(&self, end: &StealClock) -> HostInfo {
        let steal_s = end.ticks.saturating_sub(self.ticks) as f64 / TICKS_PER_S;
        let wall = end.at.duration_since(self.at).as_secs_f64() * f64::from(self.cpus.max(1));
        HostInfo { cpus: self.cpus, steal_s, steal_share: if wall > 0.0 { (steal_s / wall).min(1.0) } else { 0.0 } }
    }
}

/// The steal ticks of all CPUs (the `cpu` line's eighth value) and the number of CPUs, from
/// the text of `/proc/stat`.
fn parse_stat(text: &str) -> Option<(u64, u32)> {
    let mut steal = None;
    let mut cpus = 0;
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        match f.next() {
            Some("cpu") => steal = f.nth(7).and_then(|s| s.parse().ok()),
            Some(n)
                if n.strip_prefix("cpu").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) =>
            {
                cpus += 1
            }
            _ => {}
        }
    }
    Some((steal?, cpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  55745 12 11026 363939 10 0 99 754 0 0\n\
                        cpu0 27000 6 5500 181000 5 0 50 400 0 0\n\
                        cpu1 28745 6 5526 182939 5 0 49 354 0 0\n\
                        intr 1 2 3\nctxt 12345\nbtime 1764786000\n";

    #[test]
    fn reads_the_steal_column_and_counts_cpus() {
        assert_eq!(parse_stat(STAT), Some((754, 2)));
        // A kernel without the column.
        assert_eq!(parse_stat("cpu  1 2 3 4\ncpu0 1 2 3 4\n"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn the_share_is_of_all_cpus_over_the_wall_time() {
        let at = std::time::Instant::now();
        let a = StealClock { ticks: 754, cpus: 2, at };
        let b = StealClock { ticks: 774, cpus: 2, at: at + std::time::Duration::from_secs(4) };
        let h = a.until(&b);
        assert_eq!(h.steal_s, 0.2);
        assert!((h.steal_share - 0.025).abs() < 1e-12, "{h:?}");
        let w = steal_warning(&h).expect("2.5 % warns");
        assert!(w.contains("2.5%") && w.contains("0.20s over 2 CPUs"), "{w}");
        let quiet = StealClock { ticks: 755, ..b };
        assert_eq!(steal_warning(&a.until(&quiet)), None, "0.1 % of 2 CPUs over 4 s is below 1 %");
    }

    #[test]
    fn this_machine_has_a_clock_or_says_none() {
        // On Linux the file exists; the figures are whatever the host did.
        if let Some(c) = StealClock::now() {
            let h = c.since().expect("read twice");
            assert!(h.cpus >= 1 && h.steal_s >= 0.0 && (0.0..=1.0).contains(&h.steal_share));
        }
    }
}
