//! Limit search, sans-IO: raise the load step by step until the target stops keeping up,
//! then refine between the last good and the first bad step. The caller measures a step
//! (a run of the engine at that load); this module only decides what to measure next and
//! what the limit is, so it is tested without a network.

use serde::{Deserialize, Serialize};

/// What "keeping up" means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Objective {
    /// Answered queries over queries issued, at least (e.g. 0.99).
    pub min_answered: f64,
    /// A latency bound: the quantile (e.g. 0.95) must not exceed this many ns.
    pub max_latency: Option<(f64, u64)>,
}

impl Objective {
    pub fn met(&self, m: &Measured) -> bool {
        m.answered_ratio >= self.min_answered && self.max_latency.is_none_or(|(_, bound)| m.latency_ns <= bound)
    }
}

/// How the load grows before the first failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Growth {
    /// Multiply by this factor each step (e.g. 1.5).
    Factor(f64),
    /// Add this much each step (a resperf-like linear ramp).
    Add(f64),
}

/// The search's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Search {
    pub start: f64,
    pub max: f64,
    pub growth: Growth,
    /// Bisection steps between the last good and the first bad load at most...
    pub refine: u32,
    /// ...stopping early once they are within this fraction of each other (e.g. 0.02).
    pub resolution: f64,
}

/// What one step measured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Measured {
    pub answered_ratio: f64,
    /// The objective's latency quantile (p99 when there is no latency objective).
    pub latency_ns: u64,
    pub p99_ns: u64,
    /// The generator could not deliver the load (CPU saturated or sends late): the step says
    /// nothing about the target.
    pub generator_bound: bool,
    /// The user stopped the search.
    pub interrupted: bool,
}

/// What the verdict "generator-bound" looks at in a step: only the generator's own figures.
/// The time queries waited for the transport (the server's stream limit, a connection being
/// opened) is not among them: that is the target's doing, judged by answers and latency.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GeneratorFigures {
    /// CPU time of its threads over the load's duration × threads.
    pub busy: f64,
    /// Median lateness of its scheduler handing queries to the transport, ns (None: the load
    /// had no schedule).
    pub schedule_late_p50_ns: Option<u64>,
    /// Queries issued over queries asked for (1.0 when unknown).
    pub sent_share: f64,
}

/// Median scheduler lateness above which a step is generator-bound (a busy machine's hiccups
/// move the tail, not the median).
pub const SCHEDULE_LATE_P50_NS: u64 = 1_000_000;

/// Whether a step measured the generator rather than the target: its threads were saturated
/// ([`crate::GENERATOR_BUSY`]), its scheduler was late at the median, or it issued less than
/// 95 % of the load asked for.
pub fn generator_bound(f: &GeneratorFigures) -> bool {
    f.busy > crate::GENERATOR_BUSY
        || f.schedule_late_p50_ns.is_some_and(|l| l > SCHEDULE_LATE_P50_NS)
        || f.sent_share < 0.95
}

/// One step of a search, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub load: f64,
    pub answered_ratio: f64,
    pub latency_ns: u64,
    pub p99_ns: u64,
    pub ok: bool,
    pub generator_bound: bool,
    pub phase: Phase,
}

/// Which part of the search a step belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Raising the load until a step fails.
    Ramp,
    /// Bisecting between the last good and the first bad load.
    Refine,
}

/// Why the search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    /// A bad step was found and the limit refined.
    Found,
    /// Even the first step failed: the limit is below `start`.
    BelowStart,
    /// Every step up to `max` kept up: the limit is above `max`.
    AboveMax,
    /// The generator, not the target, became the bottleneck: the limit is at least the last good load.
    GeneratorBound,
    Interrupted,
}

/// The result of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub steps: Vec<Step>,
    /// The highest load that met the objective.
    pub limit: Option<f64>,
    pub stopped: Stopped,
}

/// Runs the search, calling `measure` for each load in turn.
pub fn search(s: &Search, obj: &Objective, mut measure: impl FnMut(f64) -> Measured) -> Outcome {
    let mut steps = Vec::new();
    let mut good: Option<f64> = None;
    let mut load = s.start.max(f64::MIN_POSITIVE);
    let record = |load: f64, m: &Measured, phase: Phase, steps: &mut Vec<Step>| {
        let ok = obj.met(m);
        steps.push(Step {
            load,
            answered_ratio: m.answered_ratio,
            latency_ns: m.latency_ns,
            p99_ns: m.p99_ns,
            ok,
            generator_bound: m.generator_bound,
            phase,
        });
        ok
    };
    // Ramp.
    loop {
        let m = measure(load);
        let ok = record(load, &m, Phase::Ramp, &mut steps);
        if m.interrupted {
            return Outcome { steps, limit: good, stopped: Stopped::Interrupted };
        }
        if m.generator_bound {
            return Outcome { steps, limit: good, stopped: Stopped::GeneratorBound };
        }
        if !ok {
            break;
        }
        good = Some(load);
        if load >= s.max {
            return Outcome { steps, limit: good, stopped: Stopped::AboveMax };
        }
        load = match s.growth {
            Growth::Factor(f) => load * f.max(1.0 + 1e-6),
            Growth::Add(a) => load + a.max(f64::MIN_POSITIVE),
        }
        .min(s.max);
    }
    let Some(mut lo) = good else {
        return Outcome { steps, limit: None, stopped: Stopped::BelowStart };
    };
    // The ramp ended on a bad step: the last one measured.
    let mut hi = load;
    // Refine by bisection.
    for _ in 0..s.refine {
        if (hi - lo) / lo <= s.resolution {
            break;
        }
        let mid = (lo + hi) / 2.0;
        let m = measure(mid);
        let ok = record(mid, &m, Phase::Refine, &mut steps);
        if m.interrupted {
            return Outcome { steps, limit: Some(lo), stopped: Stopped::Interrupted };
        }
        if m.generator_bound {
            return Outcome { steps, limit: Some(lo), stopped: Stopped::GeneratorBound };
        }
        if ok {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Outcome { steps, limit: Some(lo), stopped: Stopped::Found }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target that answers everything up to `cap` and the share cap/load beyond.
    fn target(cap: f64) -> impl FnMut(f64) -> Measured {
        move |load| Measured {
            answered_ratio: if load <= cap { 1.0 } else { cap / load },
            latency_ns: 1000,
            p99_ns: 1000,
            ..Default::default()
        }
    }

    fn s() -> Search {
        Search { start: 1000.0, max: 1e7, growth: Growth::Factor(2.0), refine: 8, resolution: 0.01 }
    }

    #[test]
    fn finds_a_cap_within_resolution() {
        let obj = Objective { min_answered: 0.99, max_latency: None };
        let o = search(&s(), &obj, target(37_000.0));
        assert_eq!(o.stopped, Stopped::Found);
        let l = o.limit.unwrap();
        // 99 % answered holds up to cap / 0.99.
        assert!((37_000.0 * 0.97..=37_000.0 / 0.99 * 1.01).contains(&l), "{l}");
        assert_eq!(o.steps.iter().filter(|s| s.phase == Phase::Ramp).count(), 7);
        // 1k..64k
    }

    #[test]
    fn below_start_above_max_and_generator_bound() {
        let obj = Objective { min_answered: 0.99, max_latency: None };
        assert_eq!(search(&s(), &obj, target(10.0)).stopped, Stopped::BelowStart);
        let small = Search { max: 4000.0, ..s() };
        let o = search(&small, &obj, target(1e9));
        assert_eq!((o.stopped, o.limit), (Stopped::AboveMax, Some(4000.0)));
        let o = search(&s(), &obj, |load| Measured {
            answered_ratio: 1.0,
            generator_bound: load > 5000.0,
            ..Default::default()
        });
        assert_eq!((o.stopped, o.limit), (Stopped::GeneratorBound, Some(4000.0)));
    }

    /// Past a DoQ or DoH/2 server's capacity, dropped queries hold its streams and the next
    /// ones wait for stream credit: their sends are hundreds of ms late, but the scheduler is
    /// not, nor the threads busy. Such steps break the objective (BROKEN) and are refined; the
    /// search finds the capacity instead of stopping "at least" below it.
    #[test]
    fn waiting_for_the_transport_is_not_the_generator() {
        let obj = Objective { min_answered: 0.99, max_latency: None };
        let cap = 20_000.0;
        let o = search(&s(), &obj, |load| {
            let over = load > cap;
            Measured {
                answered_ratio: if over { 0.6 } else { 1.0 },
                latency_ns: if over { 900_000_000 } else { 1_000_000 },
                p99_ns: 0,
                // Send lateness p50 0.9 s (the wait for streams) plays no part: only these do.
                generator_bound: generator_bound(&GeneratorFigures {
                    busy: 0.25,
                    schedule_late_p50_ns: Some(60_000),
                    sent_share: 1.0,
                }),
                interrupted: false,
            }
        });
        assert_eq!(o.stopped, Stopped::Found);
        let l = o.limit.unwrap();
        assert!((cap * 0.98..=cap).contains(&l), "{l}");
        assert!(o.steps.iter().all(|s| !s.generator_bound));
        assert!(o.steps.iter().any(|s| s.phase == Phase::Refine && !s.ok));
    }

    #[test]
    fn the_generator_is_bound_by_its_own_figures_only() {
        let f = GeneratorFigures { busy: 0.3, schedule_late_p50_ns: Some(50_000), sent_share: 1.0 };
        assert!(!generator_bound(&f));
        assert!(generator_bound(&GeneratorFigures { busy: 0.95, ..f }));
        assert!(generator_bound(&GeneratorFigures { schedule_late_p50_ns: Some(2_000_000), ..f }));
        assert!(generator_bound(&GeneratorFigures { sent_share: 0.9, ..f }));
        assert!(!generator_bound(&GeneratorFigures { schedule_late_p50_ns: None, ..f }));
    }

    #[test]
    fn latency_objective() {
        let obj = Objective { min_answered: 0.0, max_latency: Some((0.95, 100_000)) };
        let o = search(&s(), &obj, |load| Measured {
            answered_ratio: 1.0,
            latency_ns: (load * 10.0) as u64,
            ..Default::default()
        });
        let l = o.limit.unwrap();
        assert!((9_000.0..=10_000.0).contains(&l), "{l}");
    }
}
