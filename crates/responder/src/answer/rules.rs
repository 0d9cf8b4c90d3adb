//! `N/M` rules: which queries of a sequence are delayed or dropped.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// "N of every M queries", deterministic.
///
/// Queries are numbered k = 1, 2, 3, ... in the order the engine sees them, across every
/// thread and transport (well-formed queries only: not those answered FORMERR or NOTIMP, and
/// not those carrying a `drop` label). Query k is selected when `(k - 1) % M >= M - N`,
/// i.e. the *last* N of each block of M: `1/25` selects queries 25, 50, 75, 100, ... — exactly
/// 4 of any 100 consecutive queries starting at 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    /// How many of each block are selected (0..=M).
    pub n: u64,
    /// Block length (at least 1).
    pub m: u64,
}

impl Ratio {
    /// True when query number `k` (1-based) is selected.
    #[inline]
    pub fn selects(&self, k: u64) -> bool {
        self.m != 0 && (k.wrapping_sub(1)) % self.m >= self.m - self.n.min(self.m)
    }

    /// Checks `1 <= M` and `N <= M`.
    pub fn validate(&self) -> Result<(), String> {
        if self.m == 0 {
            return Err(format!("{self}: M must be at least 1"));
        }
        if self.n > self.m {
            return Err(format!("{self}: N must not exceed M"));
        }
        Ok(())
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.n, self.m)
    }
}

impl FromStr for Ratio {
    type Err = String;
    /// `N/M`, e.g. `1/25`; M ≥ 1, N ≤ M.
    fn from_str(s: &str) -> Result<Ratio, String> {
        let err = || format!("'{s}': expected N/M such as 1/25");
        let (n, m) = s.split_once('/').ok_or_else(err)?;
        let r = Ratio { n: n.trim().parse().map_err(|_| err())?, m: m.trim().parse().map_err(|_| err())? };
        r.validate().map_err(|e| format!("'{s}': {}", e.split_once(": ").map_or(e.as_str(), |x| x.1)))?;
        Ok(r)
    }
}

/// `DURATION:N/M`: N of every M queries answered `delay` late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayRule {
    /// How late.
    pub delay: Duration,
    /// Which queries.
    pub ratio: Ratio,
}

impl FromStr for DelayRule {
    type Err = String;
    /// `1s:1/25`, `200ms:1/2`, `1.5s:3/100`.
    fn from_str(s: &str) -> Result<DelayRule, String> {
        let err = || format!("'{s}': expected DURATION:N/M such as 1s:1/25");
        let (d, r) = s.split_once(':').ok_or_else(err)?;
        let delay = crate::parse_duration(d).map_err(|_| err())?;
        let ratio = r.parse::<Ratio>().map_err(|e| if e.contains("expected") { err() } else { e })?;
        Ok(DelayRule { delay, ratio })
    }
}

impl fmt::Display for DelayRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:{}", self.delay, self.ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_in_25_is_exactly_4_in_100() {
        let r: Ratio = "1/25".parse().unwrap();
        let picked: Vec<u64> = (1..=100).filter(|&k| r.selects(k)).collect();
        assert_eq!(picked, vec![25, 50, 75, 100]);
        let r: Ratio = "3/10".parse().unwrap();
        let picked: Vec<u64> = (1..=20).filter(|&k| r.selects(k)).collect();
        assert_eq!(picked, vec![8, 9, 10, 18, 19, 20]);
        assert!((1..100).all(|k| !Ratio { n: 0, m: 7 }.selects(k)));
        assert!((1..100).all(|k| Ratio { n: 7, m: 7 }.selects(k)));
    }

    #[test]
    fn parse() {
        assert_eq!(
            "1s:1/25".parse::<DelayRule>(),
            Ok(DelayRule { delay: Duration::from_secs(1), ratio: Ratio { n: 1, m: 25 } })
        );
        assert_eq!("1x:1/25".parse::<DelayRule>().unwrap_err(), "'1x:1/25': expected DURATION:N/M such as 1s:1/25");
        assert!("1s".parse::<DelayRule>().is_err());
        assert!("1s:1".parse::<DelayRule>().is_err());
        assert_eq!("1s:26/25".parse::<DelayRule>().unwrap_err(), "'26/25': N must not exceed M");
        assert!("1/0".parse::<Ratio>().is_err());
        assert!("a/2".parse::<Ratio>().is_err());
    }
}
