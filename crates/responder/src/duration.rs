//! Duration text: `500ms`, `1s`, `1.5s`, `2m`, `250us`; a bare number is seconds.

use std::time::Duration;

/// Parses a duration written as a decimal number and an optional unit: `ns`, `us` (or `µs`),
/// `ms`, `s`, `m`, `h`; a bare number is seconds. Examples: `500ms`, `1s`, `1.5s`, `2m`,
/// `250us`, `0.25`. Does not allocate on success; negative and empty values are rejected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_bytes(s.trim().as_bytes()).ok_or_else(|| {
        format!("invalid duration '{s}': expected a number with a unit such as 500ms, 1s, 1.5s, 2m, 250us")
    })
}

/// The byte-level parser (shared with the `delay-DUR` label, which is matched without
/// allocating). Units are matched case-insensitively.
pub(crate) fn parse_bytes(b: &[u8]) -> Option<Duration> {
    let num_end = b.iter().position(|c| !(c.is_ascii_digit() || *c == b'.')).unwrap_or(b.len());
    let (num, unit) = b.split_at(num_end);
    let unit_ns: u128 = match unit {
        b"" => 1_000_000_000,
        u if u.eq_ignore_ascii_case(b"s") => 1_000_000_000,
        u if u.eq_ignore_ascii_case(b"ms") => 1_000_000,
        u if u.eq_ignore_ascii_case(b"us") || u == "µs".as_bytes() => 1_000,
        u if u.eq_ignore_ascii_case(b"ns") => 1,
        u if u.eq_ignore_ascii_case(b"m") => 60_000_000_000,
        u if u.eq_ignore_ascii_case(b"h") => 3_600_000_000_000,
        _ => return None,
    };
    let (int, frac) = match num.iter().position(|&c| c == b'.') {
        Some(p) => (&num[..p], &num[p + 1..]),
        None => (num, &b""[..]),
    };
    if (int.is_empty() && frac.is_empty()) || frac.contains(&b'.') || int.len() > 20 {
        return None;
    }
    let mut whole: u128 = 0;
    for &c in int {
        whole = whole * 10 + (c - b'0') as u128;
    }
    let mut nanos = whole.checked_mul(unit_ns)?;
    // Fraction: digits beyond nanosecond precision are ignored.
    let mut scale = unit_ns;
    for &c in frac.iter().take(30) {
        scale /= 10;
        if scale == 0 {
            break;
        }
        nanos += (c - b'0') as u128 * scale;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("1s"), Ok(ms(1000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("0.1s"), Ok(ms(100)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("3"), Ok(ms(3000)));
        assert_eq!(parse_duration("1500US"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration(".5"), Ok(ms(500)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        for bad in ["", "s", "1x", "-1s", "1..2s", "1.2.3", "ms1", "1 s", "99999999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
