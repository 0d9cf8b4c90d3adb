//! Flag value parsers shared by subcommands.

/// Durations as people write them: `500ms`, `1s`, `1.5s`, `2m`, `1h`, `250us`; a bare number
/// is seconds. One parser for every flag and for the responder's rules and labels.
pub use volley_responder::parse_duration;
