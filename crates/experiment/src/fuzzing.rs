//! Entry point of the fuzz target `experiment_spec` (`fuzz/`) and of the corpus replay test:
//! an experiment file as a user could write it, never a panic. Not an API.

/// An experiment file (TOML), as its text: read and checked, and, when it is valid, the plan
/// of its runs made (with and without `--quick`), as `volley experiment run` makes it before
/// measuring anything.
pub fn spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(spec) = crate::spec::parse("fuzz.toml", text) {
        for quick in [false, true] {
            let _ = crate::runner::steps(&spec, quick);
        }
    }
}
