//! A run split across processes or machines, started together and merged exactly
//! (docs/scale-out.md): the coordinator (`volley coordinate`) and the part's side of its
//! protocol (`volley run --coordinator`).
//!
//! The protocol is one JSON object per line over TCP ([`protocol`]):
//!
//! ```text
//!  part                                   coordinator
//!  hello {version, fingerprint, index?} →
//!                                       ← welcome {index, parts} | refused {reason}
//!  time {t1}                    (x8)    →
//!                                       ← time {t1, t2, t3}        clock offset, NTP-style
//!  (makes its sockets and connections)
//!  ready                                →
//!                                       ← start {unix_ns}          once every part is ready
//!  alive, progress {second, ...}        →                          live merged progress
//!  results {volley.results/1}           →
//!                                       ← received
//! ```
//!
//! A split limit search (`volley limit --coordinator`) repeats the middle for each step: the
//! coordinator runs the search, announces each step (`step {number, load}`), every part makes
//! its share and says ready, one start for all, results, and `done` after the last step.
//!
//! The coordinator never sits on a part's hot path: a part talks to it before its start, once
//! a second while it runs, and once at its end. A part whose coordinator dies finishes its run
//! and writes its own results; a part that dies or never comes is named in the merged results,
//! with its share of the load, and the merge is marked incomplete.

pub mod client;
pub mod protocol;
pub mod server;

pub use client::{CoordError, PartLink};
pub use protocol::{Hello, LimitSpec, PartProgress, PROTOCOL};
pub use server::{merge_outcome, Coordinator, Event, Options, Outcome, Session};

/// Unix time, ns (CLOCK_REALTIME).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Part `index`'s share of `items` split `parts` ways (as the engine splits them), as a
/// fraction of the whole; `items` 0 (a rate over a duration): an even share.
pub fn share(items: u64, parts: u32, index: u32) -> f64 {
    let n = u64::from(parts.max(1));
    if items == 0 {
        return 1.0 / n as f64;
    }
    let mine = items / n + u64::from(u64::from(index) < items % n);
    mine as f64 / items as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn shares_add_up() {
        for n in 1..=8 {
            for items in [0u64, 7, 100, 1001] {
                let s: f64 = (0..n).map(|i| super::share(items, n, i)).sum();
                assert!((s - 1.0).abs() < 1e-9, "{n} {items}");
            }
        }
    }
}
