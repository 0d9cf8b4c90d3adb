//! `volley merge`: results of runs made at the same time (several processes or machines)
//! combined exactly into one results file.

use std::path::PathBuf;

use clap::Args;
use volley_report::{merge_runs, write_merged_file};

use crate::cmd::report::read_runs;
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  The parts of one run split across three machines with a synchronised start:
    volley merge node1.json node2.json node3.json -o all.json
    volley report all.json -o all.html

What is combined: counts are added; latency, send-lateness and handshake histograms are rebuilt
from their sparse form and added bucket by bucket, so percentiles of the merged file are those of
one run that recorded every value; series rows are added by wall-clock second (a part that
started D ms after the earliest is shifted by round(D/1000) s, printed on standard error);
the merged run lasts from the earliest start to the last end, QPS and CPU per answer are
recomputed; a warning on standard error names a part that started after the others had
finished sending (not made at the same time). The parts' commands and targets are kept in the
merged file's `merged_from`. See docs/report.md.

Exit status: 0 done; 1 the merged file could not be written; 2 bad or incompatible input (a
file that is not volley.results/1, histograms of different precision).";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct MergeArgs {
    /// Results files (volley.results/1) of runs made at the same time.
    #[arg(value_name = "RESULTS.json", required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,

    /// Write the merged results to FILE (atomically).
    #[arg(short = 'o', long, value_name = "FILE", required = true)]
    pub output: PathBuf,
}

pub fn run(a: MergeArgs) -> CliResult {
    let runs = read_runs(&a.files, &[])?;
    let merged = merge_runs(&runs, std::env::args().collect()).map_err(CliError::usage)?;
    let earliest = merged.result.started_unix_ms;
    for p in &merged.parts {
        eprintln!(
            "volley: merge: {}: started {} ms after the earliest part, series shifted by {} s",
            p.file,
            p.started_unix_ms - earliest,
            p.offset_s
        );
    }
    // The merge's own warnings (misaligned starts, parts not made at the same time); those of
    // the parts are in their files already.
    for w in merged.result.warnings.iter().filter(|w| w.starts_with("merge: ")) {
        eprintln!("volley: warning: {w}");
    }
    write_merged_file(&merged, &a.output).map_err(CliError::failure)?;
    let t = &merged.result.totals;
    eprintln!(
        "volley: merged {} files into {}: {} issued, {} answered, p99 {}",
        merged.parts.len(),
        a.output.display(),
        t.issued,
        t.answered,
        volley_report::fmt_ns(merged.result.latency.p99_ns)
    );
    Ok(())
}
