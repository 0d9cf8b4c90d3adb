//! `volley run`: generate load against a DNS server and measure it.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use volley_engine::{Load, Plan, QuerySet};
use volley_metrics::{RunResult, Status};
use volley_transport::{probe::probe, LaneOptions, Target};
use volley_wire::{Edns, QType, QueryOptions};

use crate::args::parse_duration;
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  Closed loop, 100 queries in flight for 10 s, against the responder (volley serve):
    volley run udp://127.0.0.1:5353

  Open loop at 20,000 queries per second over TCP, queries from a dnsperf file:
    volley run tcp://127.0.0.1:53 -d queries.txt -Q 20000 -l 30s -o results.json

  Cache-miss load: a random label under example.test for every query:
    volley run udp://[::1]:53 --random-under example.test --qtype AAAA -c 500 -n 1000000

Query file format (as dnsperf's -d): one 'NAME [TYPE]' per line, TYPE defaults to A;
'#' or ';' starts a comment; blank lines are ignored.

Every query has exactly one fate: answered (by RCODE), timed out, failed (by error kind),
or in flight when the run ended; the summary prints the equation.

Exit status: 0 run done (timeouts and errors are results, not failures); 2 bad input or
nothing listening at the target; 130 interrupted (results are still written, marked
'interrupted'); 1 any other failure.";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct RunArgs {
    /// Server to measure: udp://HOST[:PORT] or tcp://HOST[:PORT] (port 53 by default; IPv6 in
    /// brackets, e.g. udp://[::1]:53).
    #[arg(value_name = "TARGET")]
    pub target: String,

    /// Read queries from FILE (dnsperf format: 'NAME [TYPE]' per line), cycling through it.
    #[arg(short = 'd', long = "queries", value_name = "FILE", help_heading = "Queries")]
    pub queries: Option<PathBuf>,

    /// Ask for NAME in every query [default: www.example.test when no other source is given].
    #[arg(long, value_name = "NAME", conflicts_with = "queries", help_heading = "Queries")]
    pub name: Option<String>,

    /// Ask for a fresh random label under SUFFIX in every query (cache-miss load).
    #[arg(long, value_name = "SUFFIX", conflicts_with_all = ["queries", "name"], help_heading = "Queries")]
    pub random_under: Option<String>,

    /// Query type for --name and --random-under (A, AAAA, TXT, ... or TYPE123).
    #[arg(long = "qtype", value_name = "TYPE", default_value = "A", help_heading = "Queries")]
    pub qtype: String,

    /// Send queries without an EDNS(0) OPT record.
    #[arg(long, help_heading = "Queries")]
    pub no_edns: bool,

    /// EDNS(0) UDP payload size to advertise.
    #[arg(long, value_name = "BYTES", default_value_t = 1232, help_heading = "Queries")]
    pub edns_size: u16,

    /// Set the DNSSEC OK (DO) bit.
    #[arg(long, help_heading = "Queries")]
    pub dnssec: bool,

    /// Clear the Recursion Desired (RD) bit.
    #[arg(long, help_heading = "Queries")]
    pub no_rd: bool,

    /// Closed loop: keep N queries in flight [default: 100].
    #[arg(short = 'c', long, value_name = "N", conflicts_with = "rate", help_heading = "Load")]
    pub concurrency: Option<u64>,

    /// Open loop: send QPS queries per second at exact times; latency is measured from each
    /// query's scheduled time, so a generator that falls behind shows it.
    #[arg(short = 'Q', long, value_name = "QPS", help_heading = "Load")]
    pub rate: Option<f64>,

    /// Stop sending after DURATION (e.g. 500ms, 30s, 2m) [default: 10s unless --count].
    #[arg(short = 'l', long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Load")]
    pub duration: Option<Duration>,

    /// Stop after N queries (with --duration: whichever comes first).
    #[arg(short = 'n', long, value_name = "N", help_heading = "Load")]
    pub count: Option<u64>,

    /// A query without an answer after DURATION has timed out.
    #[arg(short = 't', long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = "Load")]
    pub timeout: Duration,

    /// Worker threads [default: the number of cores].
    #[arg(short = 'T', long, value_name = "N", help_heading = "Load")]
    pub threads: Option<usize>,

    /// UDP sockets or TCP connections in total [default: one per thread].
    #[arg(long, value_name = "N", help_heading = "Load")]
    pub connections: Option<usize>,

    /// Write the results as JSON to FILE (atomically; schema in docs/results-schema.md).
    #[arg(short = 'o', long, value_name = "FILE", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// Summary format on standard output.
    #[arg(long, value_enum, default_value = "text", help_heading = "Output")]
    pub format: Format,

    /// Live progress line on standard error: auto shows it when standard output is a terminal.
    #[arg(long, value_enum, default_value = "auto", help_heading = "Output")]
    pub progress: ProgressMode,

    /// Print no summary (the results file is still written).
    #[arg(short = 'q', long, help_heading = "Output")]
    pub quiet: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ProgressMode {
    Auto,
    Always,
    Never,
}

/// Builds a plan from the flags, or says which flag is wrong.
pub fn plan(a: &RunArgs) -> CliResult<Plan> {
    let target: Target = a.target.parse().map_err(CliError::usage)?;
    let opts = QueryOptions {
        recursion_desired: !a.no_rd,
        checking_disabled: false,
        edns: (!a.no_edns).then_some(Edns { udp_size: a.edns_size, dnssec_ok: a.dnssec, version: 0 }),
    };
    let qtype: QType =
        a.qtype.parse().map_err(|_| CliError::usage(format!("unknown query type '{}' in --qtype", a.qtype)))?;
    let queries = if let Some(path) = &a.queries {
        QuerySet::from_file(path, opts)
    } else if let Some(suffix) = &a.random_under {
        QuerySet::random_under(suffix, qtype, opts)
    } else {
        QuerySet::single(a.name.as_deref().unwrap_or("www.example.test"), qtype, opts)
    }
    .map_err(CliError::usage)?;
    let load = match (a.rate, a.concurrency) {
        (Some(rate), _) if !(rate > 0.0 && rate.is_finite()) => {
            return Err(CliError::usage(format!("invalid --rate '{rate}': expected queries per second above 0")))
        }
        (Some(rate), _) => Load::Open { rate },
        (None, Some(0)) => return Err(CliError::usage("invalid --concurrency 0: expected at least 1")),
        (None, c) => Load::Closed { concurrency: c.unwrap_or(100) },
    };
    if a.threads == Some(0) {
        return Err(CliError::usage("invalid --threads 0: expected at least 1"));
    }
    if a.connections == Some(0) {
        return Err(CliError::usage("invalid --connections 0: expected at least 1"));
    }
    if a.timeout.is_zero() {
        return Err(CliError::usage("invalid --timeout: must be above 0"));
    }
    if a.count == Some(0) {
        return Err(CliError::usage("invalid --count 0: expected at least 1"));
    }
    let duration = match (a.duration, a.count) {
        (Some(d), _) if d.is_zero() => return Err(CliError::usage("invalid --duration: must be above 0")),
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let lane = LaneOptions { udp_payload: (a.edns_size as usize).max(4096), ..LaneOptions::default() };
    Ok(Plan {
        target,
        queries,
        load,
        duration,
        count: a.count,
        timeout: a.timeout,
        threads,
        connections: a.connections.unwrap_or(threads),
        lane,
    })
}

/// Fails early when the results file could not be written at the end.
pub fn check_output(path: &Option<PathBuf>) -> CliResult {
    if let Some(p) = path {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            return Err(CliError::usage(format!(
                "cannot write {}: directory {} does not exist",
                p.display(),
                dir.display()
            )));
        }
        if p.is_dir() {
            return Err(CliError::usage(format!("cannot write {}: it is a directory", p.display())));
        }
    }
    Ok(())
}

/// Checks that something answers at the target before load starts.
pub fn check_target(plan: &Plan) -> CliResult<Option<String>> {
    let q = plan.queries.first_wire();
    match probe(&plan.target, &q, plan.timeout.min(Duration::from_secs(2))) {
        Ok(volley_transport::probe::Probe::Answered) => Ok(None),
        Ok(volley_transport::probe::Probe::Silent) => {
            Ok(Some(format!("{} did not answer a first probe query; measuring anyway", plan.target)))
        }
        Err(e) => Err(CliError::usage(e)),
    }
}

/// Installs SIGINT/SIGTERM handling: the first stops the run (results still written), a
/// second SIGINT exits at once.
pub fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone());
        let _ = signal_hook::flag::register(sig, flag.clone());
    }
    flag
}

/// Runs a plan with the live view on standard error when asked for.
pub fn execute(plan: &Plan, progress: ProgressMode, interrupt: Arc<AtomicBool>) -> CliResult<RunResult> {
    let show = match progress {
        ProgressMode::Always => true,
        ProgressMode::Never => false,
        ProgressMode::Auto => std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
    };
    let total = plan.duration.map(|d| d.as_secs_f64());
    let mut shown = false;
    let result = volley_engine::run(plan, interrupt, |p| {
        if show {
            let line = volley_report::progress_line(p, p.row.second as f64 + 1.0, total);
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K{line}");
            let _ = e.flush();
            shown = true;
        }
    })
    .map_err(|e| CliError::usage(e))?;
    if shown {
        eprint!("\r\x1b[2K");
    }
    Ok(result)
}

pub fn run(a: RunArgs) -> CliResult {
    let plan = plan(&a)?;
    check_output(&a.output)?;
    let warning = check_target(&plan)?;
    let interrupt = interrupt_flag();
    let mut result = execute(&plan, a.progress, interrupt)?;
    result.command = std::env::args().collect();
    if let Some(w) = warning {
        result.warnings.insert(0, w);
    }
    if let Some(path) = &a.output {
        volley_report::write_json_file_atomic(&result, path).map_err(|e| CliError::failure(e))?;
    }
    if !a.quiet {
        let mut out = std::io::stdout().lock();
        let r = match a.format {
            Format::Text => volley_report::write_text(&result, &mut out),
            Format::Json => volley_report::write_json(&result, &mut out),
        };
        // A closed pipe (e.g. `| head`) is not an error of the run.
        let _ = r.and_then(|_| out.flush());
    }
    if result.status == Status::Interrupted {
        return Err(CliError { code: 130, message: "interrupted: results are partial (status 'interrupted')".into() });
    }
    Ok(())
}
