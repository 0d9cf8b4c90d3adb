//! `volley coordinate`: the parts of a split run started together, followed, and merged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use volley_coordinate::{merge_outcome, Coordinator, Event, Options};

use crate::args::parse_duration;
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  Four parts on four machines, started together, merged into one results file:
    volley coordinate --parts 4 --listen 0.0.0.0:7300 -o merged.json
    volley run udp://192.0.2.53 -Q 400000 -l 60s --parts 4 --coordinator coord:7300 -o part.json   (x4)

  A limit search split across three machines, each step started on all at once and judged on
  the merged figures (the coordinator runs the search and writes it):
    volley coordinate --parts 3 --listen 0.0.0.0:7300 -o limit.json
    volley limit udp://192.0.2.53 --parts 3 --coordinator coord:7300 --start 50000   (x3)

Each part connects, is checked (the same volley, the same run flags), measures its clock's offset
to the coordinator, makes its sockets and connections and says it is ready; once all are (or
--wait is over) every ready part gets one start time. While they run, one line a second shows
their merged figures. Their results are merged exactly (as volley merge does) with the
coordination in `scale`: each part's share, clock offset and actual start, the start skew. A part
that never came, died or whose results never came is named, with its share of the load, and the
merge is marked incomplete (`scale.complete` false, a warning). See docs/scale-out.md.

Exit status: 0 every part merged; 3 the merged file was written without some parts; 1 no part
handed in results, or the file could not be written; 2 bad input.";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct CoordinateArgs {
    /// How many parts the run is split into.
    #[arg(long, value_name = "N")]
    pub parts: u32,

    /// Where parts connect: ADDR:PORT (port 0: any, printed).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7300")]
    pub listen: SocketAddr,

    /// Write the merged results to FILE (atomically).
    #[arg(short = 'o', long, value_name = "FILE", required = true)]
    pub output: PathBuf,

    /// Longest wait for every part to be ready; then the parts that are ready start without the
    /// others (named missing in the merged results).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub wait: Duration,

    /// The start comes this long after the last part is ready (time for the start to reach them).
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = parse_duration)]
    pub lead: Duration,

    /// A part silent this long while it runs (it sends a heartbeat every second) is given up.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub silence: Duration,

    /// No line a second on standard error.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

pub fn run(a: CoordinateArgs) -> CliResult {
    if a.parts == 0 {
        return Err(CliError::usage("invalid --parts 0: expected at least 1"));
    }
    if a.lead.is_zero() {
        return Err(CliError::usage("invalid --lead: must be above 0"));
    }
    crate::cmd::run::check_output(&Some(a.output.clone()))?;
    let opts = Options {
        parts: a.parts,
        wait: a.wait,
        lead: a.lead,
        silence: a.silence,
        version: crate::cli::version().to_string(),
    };
    let c = Coordinator::bind(a.listen, opts).map_err(|e| CliError::usage(format!("--listen {}: {e}", a.listen)))?;
    let addr = c.local_addr().map_err(CliError::failure)?;
    eprintln!(
        "volley: coordinate: listening on {addr}; waiting up to {:.0} s for {} parts to be ready",
        a.wait.as_secs_f64(),
        a.parts
    );
    let quiet = a.quiet;
    let mut events = |e: Event| {
        match e {
        Event::Joined { index, peer } => eprintln!("volley: coordinate: part {index}/{} joined from {peer}", a.parts),
        Event::Refused { peer, reason } => eprintln!("volley: coordinate: refused {peer}: {reason}"),
        Event::Started { unix_ns, ready, missing } => {
            eprintln!(
                "volley: coordinate: start at {} for {} parts{}",
                volley_engine::clock::rfc3339(unix_ns / 1_000_000),
                ready.len(),
                if missing.is_empty() { String::new() } else { format!(" (without parts {missing:?}: not ready)") }
            );
        }
        Event::Second { progress: p, reported, live, quiet: silent } if !quiet => eprintln!(
            "volley: coordinate: second {:>4}: {} issued, {} sent, {} answered, {} timed out, {} failed ({reported} parts reported, {live} running{})",
            p.second + 1,
            p.issued,
            p.sent,
            p.answered,
            p.timed_out,
            p.failed,
            if silent.is_empty() { String::new() } else { format!("; not heard from for 2 s: parts {silent:?}") }
        ),
        Event::Second { .. } => {}
        Event::Ended { index, status } => eprintln!("volley: coordinate: part {index}: {status}"),
    }
    };
    let mut session = c.open();
    // The parts of a split `volley limit` ask for a search: one round per step.
    if let Some(spec) = session.wait_joined(&mut events) {
        return crate::cmd::limit::coordinate_search(session, spec, a.parts, &a.output, &mut events);
    }
    let outcome = session.round(None, &mut events);
    let merged = merge_outcome(&outcome, std::env::args().collect()).map_err(CliError::usage)?;
    let s = &outcome.scale;
    for p in s.part_list.iter().filter(|p| p.status != "merged") {
        eprintln!(
            "volley: warning: part {} ({:.1}% of the load) missing: {} ({})",
            p.index,
            p.share * 100.0,
            p.status,
            p.reason.as_deref().unwrap_or("")
        );
    }
    let Some(merged) = merged else {
        return Err(CliError::failure("no part handed in results: nothing to merge"));
    };
    volley_report::write_merged_file(&merged, &a.output).map_err(CliError::failure)?;
    let t = &merged.result.totals;
    eprintln!(
        "volley: coordinate: merged {} of {} parts into {}: {} issued, {} answered; start skew {}",
        merged.parts.len(),
        s.parts,
        a.output.display(),
        t.issued,
        t.answered,
        s.start_skew_ns.map_or("unknown".to_string(), |n| format!("{:.3} ms", n as f64 / 1e6))
    );
    if !s.complete {
        return Err(CliError {
            code: 3,
            message: format!("incomplete: {:.1}% of the load is missing", s.missing_share * 100.0),
        });
    }
    Ok(())
}
