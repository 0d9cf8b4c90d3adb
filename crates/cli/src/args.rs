//! Flag value parsers shared by subcommands: durations as people write them.

use std::time::Duration;

/// `500ms`, `1s`, `1.5s`, `2m`, `1h`, `250us`, `100ns`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration '{s}': expected a number and a unit such as 500ms, 2s, 1m"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("invalid duration '{s}': unknown unit '{other}' (use ns, us, ms, s, m or h)")),
    };
    let secs = v * scale;
    if !secs.is_finite() || secs < 0.0 || secs > 1e9 {
        return Err(format!("invalid duration '{s}': out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("1x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
