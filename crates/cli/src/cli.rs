//! Top-level flags and subcommand dispatch. Each subcommand defines its flags, with their
//! documentation, once, in its own module under `cmd/`.

use clap::{Parser, Subcommand};

use crate::cmd;
use crate::error::{CliError, CliResult};

/// The version and the build: `0.1.0 (1a2b3c4d5e6f 2026-11-25)`, the commit it was built from
/// and its date (crates/cli/build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("VOLLEY_BUILD"), ")");

/// volley: a measurement instrument for DNS transports.
///
/// A load generator (`run`), a responder that answers on every transport (`serve`), a one-shot
/// query tool (`query`) and a quick comparison of transports (`bench`).
#[derive(Parser, Debug)]
#[command(name = "volley", version = VERSION, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate load against a DNS server and measure it.
    Run(cmd::run::RunArgs),
    /// Answer DNS on every transport from one deterministic answer engine.
    Serve(cmd::serve::ServeArgs),
    /// Send one query and print the response, as dig and kdig do.
    Query(cmd::query::QueryArgs),
    /// Measure every transport for a few seconds and print one comparison table.
    Bench(cmd::bench::BenchArgs),
    /// Turn a capture (pcap, pcapng) into a clients file for replay; --dump prints one.
    Pcap(cmd::pcap::PcapArgs),
    /// Write an HTML report, chart files, CSV or OpenMetrics text from results files.
    Report(cmd::report::ReportArgs),
    /// Compare the key figures of runs, or of repeated runs of two configurations.
    Compare(cmd::compare::CompareArgs),
    /// Merge results of runs made at the same time into one, exactly.
    Merge(cmd::merge::MergeArgs),
    /// Start the parts of a split run together, follow them, and merge their results.
    Coordinate(cmd::coordinate::CoordinateArgs),
    /// Raise the load until the target stops keeping up, and report the limit per transport.
    Limit(cmd::limit::LimitArgs),
    /// Run a command behind an emulated network link (delay, jitter, loss, rate, outages).
    Link(cmd::link::LinkArgs),
    /// Run a study's experiment and print its table beside the study's figures, with verdicts.
    Experiment(cmd::experiment::ExperimentArgs),
    /// Run a short load under a packet capture and print volley's latency beside the wire's.
    Calibrate(cmd::calibrate::CalibrateArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) on standard output.
    Completions(cmd::completions::CompletionsArgs),
    /// Print a man page, or write them all with --dir.
    Man(cmd::completions::ManArgs),
}

pub fn run() -> CliResult {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return Ok(());
            }
            // clap's own message, reduced to its first line, exit code 2.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            // Another tool's spelling (dnsperf, dnspyre, flamethrower): say volley's.
            let args: Vec<String> = std::env::args().collect();
            return Err(match crate::neighbours::hint(&args) {
                Some(h) => CliError::usage(format!("{first} ({h})")),
                None => CliError::usage(first),
            });
        }
    };
    match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Query(a) => cmd::query::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Pcap(a) => cmd::pcap::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Merge(a) => cmd::merge::run(a),
        Command::Coordinate(a) => cmd::coordinate::run(a),
        Command::Limit(a) => cmd::limit::run(a),
        Command::Link(a) => cmd::link::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Experiment(a) => cmd::experiment::run(a),
        Command::Completions(a) => cmd::completions::completions(a),
        Command::Man(a) => cmd::completions::man(a),
    }
}

/// volley's version and build, as `--version` prints it.
pub fn version() -> &'static str {
    VERSION
}
