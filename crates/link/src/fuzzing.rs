//! Entry points of the fuzz targets (`fuzz/`) and of the corpus replay test: each takes
//! arbitrary bytes, as a user could write them, and must never panic. Not an API.

use crate::spec::{builtin_names, duration, parse, SpecBuilder};

/// A link spec as `volley link` and `--link` take it: whitespace-separated items. Items that
/// would name a profile file are left out (no file is read while fuzzing); built-in profile
/// names and settings are parsed, except a `trace` (a file to read).
pub fn spec(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if s.contains("trace") {
        return;
    }
    let builtins = builtin_names();
    let items: Vec<String> =
        s.split_whitespace().filter(|i| i.contains('=') || builtins.contains(i)).map(String::from).collect();
    if !items.is_empty() {
        let _ = parse(&items);
    }
    let _ = duration(s);
}

/// A link profile file (TOML), as its text; none with a `trace` (a file to read).
pub fn profile(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if s.contains("trace") {
        return;
    }
    let mut b = SpecBuilder::default();
    if b.profile_text(s, "fuzz.toml", Some(std::path::Path::new("/nonexistent"))).is_ok() {
        let _ = b.finish();
    }
}
