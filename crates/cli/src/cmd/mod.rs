//! One module per subcommand: its flags (with their docs) and its entry point.

pub mod bench;
pub mod calibrate;
pub mod compare;
pub mod completions;
pub mod coordinate;
pub mod experiment;
pub mod limit;
pub mod link;
pub mod merge;
pub mod pcap;
pub mod query;
pub mod replay;
pub mod report;
pub mod run;
pub mod scale;
pub mod serve;
