//! Entry points of the fuzz targets (`fuzz/`) and of the corpus replay test: each takes
//! arbitrary bytes, as a user could write them, and must never panic. Not an API.

use std::time::Duration;

use crate::Profile;

/// Durations as `N` + `ms` or `s` (the CLI's own parser is the responder's, fuzzed apart).
fn dur(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration '{s}'");
    if let Some(n) = s.strip_suffix("ms") {
        n.parse().map(Duration::from_millis).map_err(|_| bad())
    } else if let Some(n) = s.strip_suffix('s') {
        n.parse().map(Duration::from_secs).map_err(|_| bad())
    } else {
        Err(bad())
    }
}

/// A client profile file (TOML) as `--profile` reads it: parsed and checked.
pub fn profile(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Err(e) = Profile::parse(s, "fuzz.toml", &dur) {
        assert!(!e.contains('\n'), "a profile error is one line: {e}");
    }
}
