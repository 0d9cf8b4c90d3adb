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
        SparseHistogram::from_pairs(
            self.h.sigfig(),
            self.h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())),
        )
    }

    /// Rebuilds a histogram from its sparse form: every value falls in the bucket it came from.
    pub fn from_sparse(s: &SparseHistogram) -> Histogram {
        let mut h = Histogram::new(s.sigfig.clamp(1, 5));
        for (v, n) in s.iter() {
            h.record_n(v, n);
        }
        h
    }
}

/// A histogram being recorded on the hot path: the counts of a [`Histogram`] of the same
/// precision (the same HDR buckets, laid out the same way), each value's bucket computed inline
/// with a few shifts, and the lowest and highest values kept beside them. [`Tally::histogram`]
/// gives exactly the histogram that recording every value into a [`Histogram`] would have
/// made (counts, total, lowest and highest value); recording costs a fraction of that.
#[derive(Clone, Debug)]
pub struct Tally {
    counts: Box<[u64]>,
    sigfig: u8,
    /// HDR's sub-bucket mask, the base of its leading-zero count, its half count's magnitude.
    mask: u64,
    lz_base: u32,
    half_mag: u32,
    /// Where a value too large for the counts goes (HIGHEST_NS's bucket, as HDR saturates).
    top: usize,
    total: u64,
    min: u64,
    max: u64,
}

impl Tally {
    /// `sigfig` as [`Histogram::new`].
    pub fn new(sigfig: u8) -> Tally {
        let len = Histogram::new(sigfig).h.distinct_values();
        // As hdrhistogram for a lowest value of 1 (unit magnitude 0): sub-buckets enough for
        // single-unit resolution up to 2 x 10^sigfig.
        let m = f64::from(2 * 10u32.pow(u32::from(sigfig))).log2().ceil() as u32;
        let mut t = Tally {
            counts: vec![0; len].into_boxed_slice(),
            sigfig,
            mask: (1u64 << m) - 1,
            lz_base: 64 - m,
            half_mag: m - 1,
            top: 0,
            total: 0,
            min: u64::MAX,
            max: 0,
        };
        t.top = t.index(HIGHEST_NS);
        t
    }

    /// HDR's bucket index of `v` (at least 1).
    #[inline]
    fn index(&self, v: u64) -> usize {
        let bucket = self.lz_base - (v | self.mask).leading_zeros();
        let sub = v >> bucket;
        (((u64::from(bucket) + 1) << self.half_mag) + sub - (1u64 << self.half_mag)) as usize
    }

    /// The lowest value of bucket `i`.
    fn value_at(&self, i: usize) -> u64 {
        let half = 1u64 << self.half_mag;
        let bucket = (i >> self.half_mag) as i64 - 1;
        let sub = (i as u64 & (half - 1)) + half;
        if bucket < 0 {
            sub - half
        } else {
            sub << bucket
        }
    }

    /// Records `ns` as [`Histogram::record`] does (0 counts as 1; a value past the counts as
    /// the highest the histogram holds).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let mut v = ns.max(1);
        let mut i = self.index(v);
        if i >= self.counts.len() {
            (i, v) = (self.top, HIGHEST_NS);
        }
        self.counts[i] = self.counts[i].saturating_add(1);
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The histogram of what was recorded.
    pub fn histogram(&self) -> Histogram {
        let mut h = Histogram::new(self.sigfig);
        if self.total == 0 {
            return h;
        }
        let (lo, hi) = (self.index(self.min), self.index(self.max));
        for (i, &n) in self.counts.iter().enumerate().filter(|(_, &n)| n > 0) {
            // Each bucket's count under a value of the bucket: the lowest and highest values
            // recorded under their own, so that the histogram's are exactly theirs.
            let _ = match (i == lo, i == hi) {
                (true, true) if self.min != self.max => {
                    h.h.record_n(self.min, n - 1).and_then(|_| h.h.record_n(self.max, 1))
                }
                (true, _) => h.h.record_n(self.min, n),
                (_, true) => h.h.record_n(self.max, n),
                _ => h.h.record_n(self.value_at(i), n),
            };
        }
        h
    }

    /// Empties it (its room is kept).
    pub fn reset(&mut self) {
        if self.total > 0 {
            self.counts.fill(0);
            (self.total, self.min, self.max) = (0, u64::MAX, 0);
        }
    }
}

/// A histogram as stored in results: precision and `[value_ns, count]` pairs of its non-empty
/// buckets, where `value_ns` is the highest value of the bucket. Recording each pair into an
/// empty histogram of the same precision rebuilds it exactly, so files merge exactly.
///
/// In memory the pairs are varint-encoded (value deltas and counts, a few bytes a bucket), so
/// that a long run's per-second histograms cost little; in JSON they are plain pairs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseHistogram {
    pub sigfig: u8,
    data: Vec<u8>,
    len: u32,
}

impl SparseHistogram {
    /// From `(value, count)` pairs in increasing value order.
    pub fn from_pairs(sigfig: u8, pairs: impl IntoIterator<Item = (u64, u64)>) -> SparseHistogram {
        let mut s = SparseHistogram { sigfig, data: Vec::new(), len: 0 };
        let mut prev = 0u64;
        for (v, n) in pairs {
            put_varint(&mut s.data, v.wrapping_sub(prev));
            put_varint(&mut s.data, n);
            prev = v;
            s.len += 1;
        }
        s.data.shrink_to_fit();
        s
    }

    /// The `(value, count)` pairs, in increasing value order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut at = 0;
        let mut prev = 0u64;
        std::iter::from_fn(move || {
            if at >= self.data.len() {
                return None;
            }
            let d = get_varint(&self.data, &mut at);
            let n = get_varint(&self.data, &mut at);
            prev = prev.wrapping_add(d);
            Some((prev, n))
        })
    }

    /// The pairs as a vector.
    pub fn pairs(&self) -> Vec<(u64, u64)> {
        self.iter().collect()
    }

    /// Number of non-empty buckets.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&c) = b.get(*at) {
        *at += 1;
        v |= ((c & 0x7F) as u64) << shift;
        if c & 0x80 == 0 || shift >= 63 {
            break;
        }
        shift += 7;
    }
    v
}

/// The JSON form: `{"sigfig": 3, "buckets": [[value_ns, count], ...]}`.
#[derive(Serialize, Deserialize)]
struct SparseJson {
    sigfig: u8,
    buckets: Vec<(u64, u64)>,
}

impl Serialize for SparseHistogram {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SparseJson { sigfig: self.sigfig, buckets: self.pairs() }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SparseHistogram {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let j = SparseJson::deserialize(d)?;
        Ok(SparseHistogram::from_pairs(j.sigfig, j.buckets))
    }
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
    fn compact_pairs_round_trip() {
        let pairs = vec![(1u64, 5u64), (127, 1), (128, 300), (3_600_000_000_000, 1)];
        let s = SparseHistogram::from_pairs(3, pairs.clone());
        assert_eq!(s.pairs(), pairs);
        assert_eq!(s.len(), 4);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"sigfig":3,"buckets":[[1,5],[127,1],[128,300],[3600000000000,1]]}"#);
        let back: SparseHistogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    /// A tally gives exactly the histogram that recording each value would have made, at
    /// both precisions, over the whole range and past it (0, 1, bucket edges, the highest
    /// value, beyond it).
    #[test]
    fn a_tally_is_the_histogram_exactly() {
        let mut values: Vec<u64> = vec![0, 1, 2, 255, 256, 257, 2047, 2048, 2049, 4095, 4096, 1 << 20];
        values.extend([HIGHEST_NS - 1, HIGHEST_NS, HIGHEST_NS + 1, 1 << 45, 1 << 60, u64::MAX]);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Spread over magnitudes: a random value shifted right by a random amount.
            values.push(x >> (x % 64));
        }
        for sigfig in [2, 3] {
            for cut in [1, 2, 3, 40, values.len()] {
                let part = &values[..cut];
                let mut h = Histogram::new(sigfig);
                let mut t = Tally::new(sigfig);
                for &v in part {
                    h.record(v);
                    t.record(v);
                }
                let got = t.histogram();
                assert_eq!(got.to_sparse(), h.to_sparse(), "sigfig {sigfig}, {cut} values");
                assert_eq!((got.count(), got.min(), got.max()), (h.count(), h.min(), h.max()));
                assert_eq!(got.h.max(), h.h.max());
                assert_eq!(got.mean().to_bits(), h.mean().to_bits());
                for q in [0.0, 0.5, 0.99, 0.999, 1.0] {
                    assert_eq!(got.quantile(q), h.quantile(q));
                }
                assert_eq!(t.count(), part.len() as u64);
                t.reset();
                assert!(t.histogram().is_empty());
                t.record(5);
                assert_eq!((t.histogram().min(), t.histogram().count()), (5, 1));
            }
        }
    }

    #[test]
    fn empty_is_zero() {
        let h = Histogram::new(2);
        assert_eq!((h.min(), h.max(), h.quantile(0.5)), (0, 0, 0));
    }
}
