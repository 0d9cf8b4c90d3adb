//! Number formatting shared by every printer: durations, percentages, rates, bytes.

/// Formats nanoseconds with an adaptive unit and three significant figures: `ns` below 1 µs,
/// `µs` below 1 ms, `ms` below 10 s, `s` above (`999ns`, `1.00µs`, `412µs`, `1.50ms`, `2510ms`,
/// `12.0s`). The value is rounded first, so 999 999 ns prints as `1.00ms`, never `1000µs`.
pub fn fmt_ns(ns: u64) -> String {
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    let r = round_sig3(ns);
    if r < 1_000_000 {
        scaled(r, 1_000, "µs")
    } else if r < 10_000_000_000 {
        scaled(r, 1_000_000, "ms")
    } else {
        scaled(r, 1_000_000_000, "s")
    }
}

/// `v` rounded half up to three significant figures (saturating at `u64::MAX`).
fn round_sig3(v: u64) -> u64 {
    let v = v as u128;
    let mut p = 1u128;
    while v / p >= 1000 {
        p *= 10;
    }
    (((v + p / 2) / p) * p).min(u64::MAX as u128) as u64
}

/// `r / unit` with as many decimals as keep three significant figures (none above 100).
fn scaled(r: u64, unit: u64, suffix: &str) -> String {
    let x = r as f64 / unit as f64;
    let decimals = if x < 10.0 {
        2
    } else if x < 100.0 {
        1
    } else {
        0
    };
    format!("{x:.decimals$}{suffix}")
}

/// Formats a configured duration given in seconds compactly: `10s`, `1.5s`, `250ms`.
pub fn fmt_secs(s: f64) -> String {
    if !s.is_finite() {
        return "-".to_string();
    }
    if s > 0.0 && s < 1.0 {
        return format!("{}ms", trim_decimals(s * 1000.0, 3));
    }
    format!("{}s", trim_decimals(s, 3))
}

/// Formats `x` with at most `max_decimals` decimals, trailing zeros removed (`1.50` → `1.5`).
fn trim_decimals(x: f64, max_decimals: usize) -> String {
    let s = format!("{x:.max_decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `num / den` as a percentage with two decimals (`99.90%`), `-` when `den` is 0. Never rounds a
/// part up to `100.00%` nor a non-zero part down to `0.00%` (`99.99%`, `<0.01%` instead).
pub fn fmt_pct(num: u64, den: u64) -> String {
    if den == 0 {
        return "-".to_string();
    }
    if num == den {
        return "100.00%".to_string();
    }
    let p = num as f64 * 100.0 / den as f64;
    if num < den && p >= 99.995 {
        "99.99%".to_string()
    } else if num > 0 && p < 0.005 {
        "<0.01%".to_string()
    } else {
        format!("{p:.2}%")
    }
}

/// A ratio in 0..=1 as a percentage with two decimals (`0.9998` → `99.98%`); `-` when not finite.
pub fn fmt_ratio_pct(ratio: f64) -> String {
    if !ratio.is_finite() {
        return "-".to_string();
    }
    format!("{:.2}%", ratio * 100.0)
}

/// A rate per second: whole numbers from 100 up, one decimal below; `-` when not finite.
pub fn fmt_rate(x: f64) -> String {
    if !x.is_finite() {
        "-".to_string()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Bytes with SI prefixes (`812B`, `40.0kB`, `1.23MB`, `4.56GB`).
pub fn fmt_bytes(b: f64) -> String {
    if !b.is_finite() {
        return "-".to_string();
    }
    const UNITS: [(f64, &str); 4] = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, unit) in UNITS {
        if b >= scale {
            let x = b / scale;
            return if x < 10.0 { format!("{x:.2}{unit}") } else { format!("{x:.1}{unit}") };
        }
    }
    if b.fract() == 0.0 {
        format!("{b:.0}B")
    } else {
        format!("{b:.1}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ns_units_at_boundaries() {
        assert_eq!(fmt_ns(0), "0ns");
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(1_000), "1.00µs");
        assert_eq!(fmt_ns(41_249), "41.2µs");
        assert_eq!(fmt_ns(412_000), "412µs");
        assert_eq!(fmt_ns(999_499), "999µs");
        assert_eq!(fmt_ns(999_500), "1.00ms");
        assert_eq!(fmt_ns(1_500_000), "1.50ms");
        assert_eq!(fmt_ns(2_512_345_678), "2510ms");
        assert_eq!(fmt_ns(9_994_999_999), "9990ms");
        assert_eq!(fmt_ns(9_995_000_000), "10.0s");
        assert_eq!(fmt_ns(12_000_000_000), "12.0s");
        assert_eq!(fmt_ns(3_600_000_000_000), "3600s");
        assert!(fmt_ns(u64::MAX).ends_with('s'));
    }

    #[test]
    fn percentages_never_lie_at_the_ends() {
        assert_eq!(fmt_pct(9990, 10000), "99.90%");
        assert_eq!(fmt_pct(99_999, 100_000), "99.99%");
        assert_eq!(fmt_pct(1, 1_000_000), "<0.01%");
        assert_eq!(fmt_pct(0, 5), "0.00%");
        assert_eq!(fmt_pct(5, 5), "100.00%");
        assert_eq!(fmt_pct(1, 0), "-");
    }

    #[test]
    fn secs_rates_bytes() {
        assert_eq!(fmt_secs(10.0), "10s");
        assert_eq!(fmt_secs(1.5), "1.5s");
        assert_eq!(fmt_secs(0.25), "250ms");
        assert_eq!(fmt_rate(48210.4), "48210");
        assert_eq!(fmt_rate(12.34), "12.3");
        assert_eq!(fmt_bytes(812.0), "812B");
        assert_eq!(fmt_bytes(40_000.0), "40.0kB");
        assert_eq!(fmt_bytes(1_234_567.0), "1.23MB");
    }
}
