use serde::{Deserialize, Serialize};

/// Highest value a histogram holds: one hour in nanoseconds. Larger values saturate.
const HIGHEST_NS: u64 = 3_600_000_000_000;

/// A latency histogram in nanoseconds (HDR: log-linear buckets, relative error bounded by
/// the significant figures). Merging two of the same precision is exact.
#[derive(Clone, Debug)]
pub struct Histogram {
    h: hdrhistogram::Histogram<u64>,
}

impl Histogram {
    /// `sigfig` 3 for totals (0.1 % relative error), 2 for per-second samples.
    pub fn new(sigfig: u8) -> Histogram {
        let h = hdrhistogram::Histogram::new_with_bounds(1, HIGHEST_NS, sigfig).expect("valid histogram bounds");
        Histogram { h }
    }

    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.h.saturating_record(ns.max(1));
    }

    pub fn record_n(&mut self, ns: u64, n: u64) {
        let _ = self.h.record_n(ns.clamp(1, HIGHEST_NS), n);
    }

    /// Adds every count of `other` (same precision: exact).
    pub fn merge(&mut self, other: &Histogram) {
        let _ = self.h.add(&other.h);
    }

    pub fn count(&self) -> u64 {
        self.h.len()
    }

    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }

    pub fn sigfig(&self) -> u8 {
        self.h.sigfig()
    }

    /// Value at quantile `q` in 0..=1 (the highest value equivalent to the bucket), 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.h.is_empty() {
            return 0;
        }
        self.h.highest_equivalent(self.h.value_at_quantile(q))
    }

    pub fn min(&self) -> u64 {
        if self.h.is_empty() {
            0
        } else {
            self.h.min()
        }
    }

    pub fn max(&self) -> u64 {
        if self.h.is_empty() {
            0
        } else {
            self.h.highest_equivalent(self.h.max())
        }
    }

    pub fn mean(&self) -> f64 {
        if self.h.is_empty() {
            0.0
        } else {
            self.h.mean()
        }
    }

    pub fn reset(&mut self) {
        self.h.reset();
    }

    /// The non-empty buckets, for the results file.
    pub fn to_sparse(&self) -> SparseHistogram {
        let buckets = self.h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect();
        SparseHistogram { sigfig: self.h.sigfig(), buckets }
    }

    /// Rebuilds a histogram from its sparse form: every value falls in the bucket it came from.
    pub fn from_sparse(s: &SparseHistogram) -> Histogram {
        let mut h = Histogram::new(s.sigfig.clamp(1, 5));
        for &(v, n) in &s.buckets {
            h.record_n(v, n);
        }
        h
    }
}

/// A histogram as stored in results: precision and `[value_ns, count]` pairs of its non-empty
/// buckets, where `value_ns` is the highest value of the bucket. Recording each pair into an
/// empty histogram of the same precision rebuilds it exactly, so files merge exactly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseHistogram {
    pub sigfig: u8,
    pub buckets: Vec<(u64, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_round_trip_and_exact_merge() {
        let mut a = Histogram::new(3);
        let mut b = Histogram::new(3);
        let mut all = Histogram::new(3);
        for i in 1..5000u64 {
            let v = i * i * 37 % 9_000_000 + 1000;
            if i % 3 == 0 {
                a.record(v)
            } else {
                b.record(v)
            }
            all.record(v);
        }
        let mut m = Histogram::from_sparse(&a.to_sparse());
        m.merge(&Histogram::from_sparse(&b.to_sparse()));
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(m.quantile(q), all.quantile(q), "q={q}");
        }
        assert_eq!(m.count(), all.count());
        assert_eq!(m.to_sparse(), all.to_sparse());
    }

    #[test]
    fn empty_is_zero() {
        let h = Histogram::new(2);
        assert_eq!((h.min(), h.max(), h.quantile(0.5)), (0, 0, 0));
    }
}
