//! `volley compare`: key figures of runs side by side, with ratios against the first and, for
//! repeated runs, whether a difference is beyond run-to-run noise.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use volley_report::{compare, unique_names, write_compare_json, write_compare_text, NamedRun};

use crate::cmd::report::read_runs;
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  Two or more runs, one each; ratios are against the first:
    volley compare udp.json tcp.json dot.json

  Repeated runs of two configurations: medians, min-max, and a noise verdict:
    volley compare --a a1.json a2.json a3.json --b b1.json b2.json b3.json --label old --label new

  As JSON:
    volley compare --format json udp.json tcp.json

  Also as an HTML report (the table, every chart with all runs, one section per run):
    volley compare --a a1.json a2.json --b b1.json b2.json --html compare.html

Figures: answers/s, queries/s, answered %, latency p50/p99/p99.9, service time p50/p99 and the
generator's delay p99 (results that have them), handshake p50 (connection-based transports), bytes out per query, bytes in per answer, wire bytes and packets (headers included)
out per query and in per answer (runs with wire statistics), generator CPU per answer.

Noise rule: each side is summarised by the median of its runs and their range (min-max). A
difference is 'beyond noise' when both sides have at least 2 runs and their ranges do not
overlap, 'within noise' when they overlap; with a single run on a side nothing is said.

Exit status: 0 done; 1 the HTML report could not be written; 2 bad input (unreadable or
incompatible results file, bad flags).";

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    /// An aligned table.
    Text,
    /// The comparison as JSON.
    Json,
}

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct CompareArgs {
    /// Results files, one run each; the first is the baseline.
    #[arg(value_name = "RESULTS.json")]
    pub files: Vec<PathBuf>,

    /// Repeated runs of the baseline side (instead of FILES).
    #[arg(long = "a", value_name = "FILE", num_args = 1..)]
    pub a: Vec<PathBuf>,

    /// Repeated runs of the side compared with the baseline (with --a).
    #[arg(long = "b", value_name = "FILE", num_args = 1..)]
    pub b: Vec<PathBuf>,

    /// Names: one per file, or with --a/--b one per side [default: file stems; `a` and `b`].
    #[arg(long, value_name = "NAME")]
    pub label: Vec<String>,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: CompareFormat,

    /// Also write the comparison as a self-contained HTML report to FILE (atomically): the
    /// table, every chart with all runs, and one section per run.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

pub fn run(a: CompareArgs) -> CliResult {
    let grouped = !a.a.is_empty() || !a.b.is_empty();
    let sides: Vec<(String, Vec<NamedRun>)> = if grouped {
        if !a.files.is_empty() {
            return Err(CliError::usage("give either results files or --a/--b, not both"));
        }
        if a.a.is_empty() || a.b.is_empty() {
            return Err(CliError::usage("--a and --b go together: give the runs of both sides"));
        }
        if a.label.len() > 2 {
            return Err(CliError::usage("with --a/--b, give at most two --label (one per side)"));
        }
        let name = |i: usize, d: &str| a.label.get(i).cloned().unwrap_or_else(|| d.to_string());
        // Run names unique across both sides, so that chart legends tell every run apart.
        let mut runs = read_runs(&a.a, &[])?;
        runs.extend(read_runs(&a.b, &[])?);
        unique_names(&mut runs);
        let b = runs.split_off(a.a.len());
        vec![(name(0, "a"), runs), (name(1, "b"), b)]
    } else {
        if a.files.len() < 2 {
            return Err(CliError::usage("compare needs two or more results files, or --a FILE... --b FILE..."));
        }
        read_runs(&a.files, &a.label)?.into_iter().map(|r| (r.name.clone(), vec![r])).collect()
    };
    let c = compare(&sides);
    if let Some(path) = &a.html {
        volley_report::write_html_comparison_file(&sides, path).map_err(CliError::failure)?;
        eprintln!("volley: report written to {}", path.display());
    }
    let mut out = io::stdout().lock();
    let written = match a.format {
        CompareFormat::Text => write_compare_text(&c, &mut out),
        CompareFormat::Json => write_compare_json(&c, &mut out),
    };
    match written.and_then(|_| out.flush()) {
        // A reader that stopped early (`| head`) wanted no more.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| CliError::failure(format!("stdout: {e}"))),
    }
}
