//! One module per subcommand: its flags (with their docs) and its entry point.

pub mod bench;
pub mod query;
pub mod run;
pub mod serve;
