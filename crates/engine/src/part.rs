//! Which share of a run belongs to part I of N (`--part I/N`): a run split across processes or
//! machines so that the N parts together make the very run one process would make. Sans-IO:
//! pure functions of the part, the run's figures and the part's worker threads.
//!
//! * A scheduled rate is split by striping the run's arrival indices (as k6's execution
//!   segments do): arrival `k` of the single run is due at `k / rate` after the start; part `I`
//!   takes the arrivals `k ≡ I (mod N)`, and its worker `w` of `T` those `k = I + N·w + N·T·j`.
//!   The due time is computed from `k` alone, so the union of the parts' schedules is the
//!   single run's schedule, to the nanosecond, whatever N and T.
//! * Simulated and replay clients go whole to one part. Simulated clients: client `c` of the run
//!   to part `c mod N` (counts differ by at most one; a mixture's groups, dealt by weight in
//!   client order, spread alike). Replay clients carry the captured clients' loads, which differ
//!   by orders of magnitude (a forwarder beside a stub), so they are dealt by load
//!   ([`deal_by_load`]): the heaviest first, each to the part with the least load so far. Each
//!   client's random choices are keyed by its index in the whole run.
//! * Which query of the set an arrival sends, and its random label, are keyed by the arrival's
//!   global index `k`: the parts' queries together are those of the single run.
//! * Closed-loop concurrency, connections and a query count are split so that the parts add up
//!   exactly ([`Part::share`]).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// One part of a run split N ways. Parts are numbered from 0, as Kubernetes numbers the pods
/// of an Indexed Job (`JOB_COMPLETION_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Part {
    pub index: u32,
    pub count: u32,
}

/// Why a part cannot be.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PartError {
    #[error("invalid part '{0}': expected I/N, the part I (from 0) of N parts, e.g. 0/4")]
    Syntax(String),
    #[error("invalid part '{0}': the number of parts must be at least 1")]
    NoParts(String),
    #[error("invalid part '{0}': parts are numbered 0 to {1}")]
    Index(String, u32),
    #[error("{what} {total} cannot be split into {parts} parts: each part needs at least 1")]
    TooFew { what: &'static str, total: u64, parts: u32 },
}

impl Part {
    /// The whole run: one part of one.
    pub const WHOLE: Part = Part { index: 0, count: 1 };

    pub fn new(index: u32, count: u32) -> Result<Part, PartError> {
        let text = format!("{index}/{count}");
        if count == 0 {
            return Err(PartError::NoParts(text));
        }
        if index >= count {
            return Err(PartError::Index(text, count - 1));
        }
        Ok(Part { index, count })
    }

    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// This part's share of `total` (concurrency, connections, a query count, clients): the
    /// parts' shares add up to `total` and differ by at most one, the first parts taking the
    /// remainder.
    pub fn share(&self, total: u64) -> u64 {
        let n = u64::from(self.count);
        total / n + u64::from(u64::from(self.index) < total % n)
    }

    /// As [`Part::share`], refusing a share of 0 (a part with no concurrency or no clients
    /// would have nothing to do).
    pub fn share_of(&self, what: &'static str, total: u64) -> Result<u64, PartError> {
        if total < u64::from(self.count) {
            return Err(PartError::TooFew { what, total, parts: self.count });
        }
        Ok(self.share(total))
    }

    /// The global arrival indices of this part's worker `worker` of `workers`: `first`, then
    /// every `stride`.
    pub fn stripe(&self, worker: usize, workers: usize) -> Stripe {
        let n = u64::from(self.count);
        Stripe { first: u64::from(self.index) + n * worker as u64, stride: n * workers.max(1) as u64 }
    }

    /// Whether client `c` of the whole run (0-based) belongs to this part.
    pub fn has_client(&self, c: u64) -> bool {
        c % u64::from(self.count) == u64::from(self.index)
    }

    /// This part's clients of the `total` of the run, as global indices, in order.
    pub fn clients(&self, total: u64) -> impl Iterator<Item = u64> {
        (u64::from(self.index)..total).step_by(self.count as usize)
    }

    /// This part's clients when client `k` of the run carries `loads[k]` queries (a replay),
    /// as global indices in order: see [`deal_by_load`].
    pub fn clients_by_load(&self, loads: &[u32]) -> Vec<u64> {
        if self.is_whole() {
            return (0..loads.len() as u64).collect();
        }
        deal_by_load(self.count, loads)
            .iter()
            .enumerate()
            .filter(|&(_, &p)| p == self.index)
            .map(|(k, _)| k as u64)
            .collect()
    }

    /// The share of the run's load this part carries (for the merged results of a run that
    /// lost parts): its fraction of `total` items (arrivals, clients, concurrency).
    pub fn fraction(&self, total: u64) -> f64 {
        if total == 0 {
            1.0 / f64::from(self.count)
        } else {
            self.share(total) as f64 / total as f64
        }
    }
}

impl Default for Part {
    fn default() -> Part {
        Part::WHOLE
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Part {
    type Err = PartError;

    fn from_str(s: &str) -> Result<Part, PartError> {
        let (i, n) = s.split_once('/').ok_or_else(|| PartError::Syntax(s.to_string()))?;
        let num = |v: &str| v.trim().parse::<u32>().map_err(|_| PartError::Syntax(s.to_string()));
        let (i, n) = (num(i)?, num(n)?);
        Part::new(i, n).map_err(|e| match e {
            PartError::NoParts(_) => PartError::NoParts(s.to_string()),
            PartError::Index(_, last) => PartError::Index(s.to_string(), last),
            e => e,
        })
    }
}

/// Global arrival indices `first + stride·j`, j = 0, 1, 2...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    pub first: u64,
    pub stride: u64,
}

impl Stripe {
    /// The `j`-th global index.
    pub fn at(&self, j: u64) -> u64 {
        self.first + self.stride * j
    }

    /// How many of the indices below `total` are this stripe's.
    pub fn count_below(&self, total: u64) -> u64 {
        if total <= self.first {
            0
        } else {
            (total - self.first).div_ceil(self.stride)
        }
    }
}

/// Which part each client goes to when client `k` carries `loads[k]` queries: the clients from
/// the heaviest to the lightest (equal loads in client order), each to the part whose load is
/// the least so far (equal loads: the one with fewer clients, then the lower index), the
/// longest-processing-time rule. The parts' loads then differ by at most the heaviest
/// client's, and, among clients of equal load, their counts by at most one. Deterministic:
/// every part computes the same deal from the same clients.
pub fn deal_by_load(parts: u32, loads: &[u32]) -> Vec<u32> {
    use std::cmp::Reverse;
    let mut out = vec![0u32; loads.len()];
    if parts <= 1 {
        return out;
    }
    let mut order: Vec<u32> = (0..loads.len() as u32).collect();
    order.sort_unstable_by_key(|&k| (Reverse(loads[k as usize]), k));
    let mut heap: std::collections::BinaryHeap<Reverse<(u64, u64, u32)>> =
        (0..parts).map(|p| Reverse((0, 0, p))).collect();
    for k in order {
        let Reverse((load, count, p)) = heap.pop().expect("one entry per part");
        out[k as usize] = p;
        heap.push(Reverse((load + u64::from(loads[k as usize]), count + 1, p)));
    }
    out
}

/// When arrival `k` of an open loop at `rate` queries per second is due, ns after the start: a
/// function of `k` alone, so every split of the run schedules each arrival at the same moment.
#[inline]
pub fn due_ns(k: u64, period_ns: f64) -> u64 {
    (k as f64 * period_ns) as u64
}

/// The seed of a simulated client's random choices (its phase, its Poisson gaps): its index in
/// the whole run, so a client behaves alike however the run is split.
pub fn client_seed(global_client: u64) -> u64 {
    global_client.wrapping_mul(0x2545_F491_4F6C_DD1D).wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: [u32; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 13, 64, 1000];

    #[test]
    fn parses_and_refuses() {
        assert_eq!("2/4".parse::<Part>(), Ok(Part { index: 2, count: 4 }));
        assert_eq!("0/1".parse::<Part>(), Ok(Part::WHOLE));
        let e = "3/2".parse::<Part>().unwrap_err().to_string();
        assert_eq!(e, "invalid part '3/2': parts are numbered 0 to 1");
        let e = "0/0".parse::<Part>().unwrap_err().to_string();
        assert_eq!(e, "invalid part '0/0': the number of parts must be at least 1");
        for bad in ["", "1", "a/2", "1/b", "-1/2", "1/2/3", "/", "2/"] {
            assert!(matches!(bad.parse::<Part>(), Err(PartError::Syntax(_))), "{bad}");
        }
        assert_eq!(Part { index: 5, count: 7 }.to_string(), "5/7");
    }

    /// Shares add up to the whole and differ by at most one, for every N.
    #[test]
    fn shares_add_up_exactly() {
        for n in NS {
            for total in [0u64, 1, 2, 7, 100, 101, 999, 1_000_003] {
                let shares: Vec<u64> = (0..n).map(|i| Part::new(i, n).unwrap().share(total)).collect();
                assert_eq!(shares.iter().sum::<u64>(), total, "n {n} total {total}");
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= 1, "n {n} total {total}: {shares:?}");
                let f: f64 = (0..n).map(|i| Part::new(i, n).unwrap().fraction(total)).sum();
                assert!((f - 1.0).abs() < 1e-9);
            }
        }
        let e = Part::new(2, 4).unwrap().share_of("concurrency", 3).unwrap_err().to_string();
        assert_eq!(e, "concurrency 3 cannot be split into 4 parts: each part needs at least 1");
        assert_eq!(Part::new(2, 4).unwrap().share_of("concurrency", 4), Ok(1));
    }

    /// The union of every part's and worker's arrivals, with their due times, is the single
    /// run's schedule exactly: each index once, at the same nanosecond.
    #[test]
    fn striped_schedules_union_to_the_single_schedule() {
        let period = 1e9 / 7_777.0;
        let total = 20_000u64;
        let single: Vec<(u64, u64)> = (0..total).map(|k| (k, due_ns(k, period))).collect();
        for n in NS {
            for threads in [1usize, 2, 3, 8] {
                let mut all = Vec::with_capacity(total as usize);
                let mut per_part = Vec::new();
                for i in 0..n {
                    let part = Part::new(i, n).unwrap();
                    let mut mine = 0;
                    for w in 0..threads {
                        let s = part.stripe(w, threads);
                        let c = s.count_below(total);
                        // A count quota split by part then worker gives the same numbers.
                        assert_eq!(c, split(part.share(total), threads, w), "n {n} t {threads} part {i} w {w}");
                        for j in 0..c {
                            let k = s.at(j);
                            assert!(k < total);
                            all.push((k, due_ns(k, period)));
                        }
                        assert!(s.at(c) >= total);
                        mine += c;
                    }
                    per_part.push(mine);
                }
                all.sort_unstable();
                assert_eq!(all, single, "n {n} threads {threads}");
                let (lo, hi) = (per_part.iter().min().unwrap(), per_part.iter().max().unwrap());
                assert!(hi - lo <= 1);
            }
        }
    }

    fn split(total: u64, n: usize, i: usize) -> u64 {
        total / n as u64 + u64::from((i as u64) < total % n as u64)
    }

    /// Clients go whole to one part each, evenly; each group of a mixture spreads evenly too
    /// when its clients are dealt in turn.
    #[test]
    fn clients_go_whole_to_one_part() {
        for n in NS {
            for total in [1u64, 5, 100, 1001, 10_007] {
                let mut seen = vec![0u32; total as usize];
                let mut counts = Vec::new();
                for i in 0..n {
                    let part = Part::new(i, n).unwrap();
                    let mine: Vec<u64> = part.clients(total).collect();
                    assert!(mine.iter().all(|&c| part.has_client(c)));
                    assert_eq!(mine.len() as u64, part.share(total));
                    for c in &mine {
                        seen[*c as usize] += 1;
                    }
                    counts.push(mine.len() as u64);
                }
                assert!(seen.iter().all(|&s| s == 1), "n {n} total {total}");
                assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
            }
        }
        // Two groups dealt alternately (weights 1:1): each part gets both groups alike when N is odd.
        let groups: Vec<u16> = (0..1000).map(|c| (c % 2) as u16).collect();
        let part = Part::new(1, 3).unwrap();
        let g0 = part.clients(1000).filter(|&c| groups[c as usize] == 0).count();
        let g1 = part.clients(1000).filter(|&c| groups[c as usize] == 1).count();
        assert!(g0.abs_diff(g1) <= 1, "{g0} {g1}");
        // Seeds are the client's own, the same in every split.
        assert_ne!(client_seed(0), client_seed(1));
    }

    /// Replay clients by load: each whole to one part, every part's load within the heaviest
    /// client's of every other's, equal loads spread by count, the same deal every time.
    #[test]
    fn replay_clients_are_dealt_by_load() {
        // A heavy-tailed capture: client k sends 1 + (k^3 mod 997) queries, a few send most.
        let loads: Vec<u32> = (0..2000u64).map(|k| 1 + (k * k * k % 997) as u32).collect();
        let heaviest = u64::from(*loads.iter().max().unwrap());
        for n in [1u32, 2, 3, 7, 64] {
            let mut seen = vec![0u32; loads.len()];
            let mut part_loads = Vec::new();
            for i in 0..n {
                let mine = Part::new(i, n).unwrap().clients_by_load(&loads);
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "in order");
                for &c in &mine {
                    seen[c as usize] += 1;
                }
                part_loads.push(mine.iter().map(|&c| u64::from(loads[c as usize])).sum::<u64>());
            }
            assert!(seen.iter().all(|&s| s == 1), "n {n}: every client in exactly one part");
            let (lo, hi) = (*part_loads.iter().min().unwrap(), *part_loads.iter().max().unwrap());
            assert!(hi - lo <= heaviest, "n {n}: loads {part_loads:?}");
        }
        // Dealt in turn by index, the same clients put twice the load on one of two parts.
        let mod2: u64 = (0..loads.len()).filter(|k| k % 2 == 0).map(|k| u64::from(loads[k])).sum();
        let total: u64 = loads.iter().map(|&l| u64::from(l)).sum();
        let by_load = Part::new(0, 2).unwrap().clients_by_load(&loads);
        let half: u64 = by_load.iter().map(|&c| u64::from(loads[c as usize])).sum();
        assert!(half.abs_diff(total - half) <= heaviest, "{half} of {total} (in turn: {mod2})");
        // Equal loads: counts differ by at most one, as dealt in turn.
        let flat = vec![5u32; 1001];
        let counts: Vec<usize> = (0..4).map(|i| Part::new(i, 4).unwrap().clients_by_load(&flat).len()).collect();
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{counts:?}");
        assert_eq!(deal_by_load(3, &loads), deal_by_load(3, &loads));
    }

    #[test]
    fn large_splits() {
        for n in [50u32, 1000, 100_000] {
            let total = 10_000_000u64;
            let sum: u64 = (0..n).map(|i| Part::new(i, n).unwrap().share(total)).sum();
            assert_eq!(sum, total);
            let last = Part::new(n - 1, n).unwrap();
            assert_eq!(last.stripe(0, 1).count_below(total), last.share(total));
        }
    }
}
