//! `volley experiment list | show NAME | run NAME|FILE.toml`: the studies' experiments
//! (crate volley-experiment); this module only parses flags and prints.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use clap::{Args, Subcommand};
use volley_experiment::{output, ExperimentError};

use crate::cmd::run::{check_output, interrupt_flag, ProgressMode};
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  The built-in experiments, and one of them as a file to copy and change:
    volley experiment list
    volley experiment show head-of-line > my.toml

  Run one against the embedded responder (started with what each row needs), in seconds:
    volley experiment run head-of-line --quick

  Your own file, against your servers for some transports (the others: the embedded responder):
    volley experiment run my.toml --target dot=tls://127.0.0.1:853 --ca ca.pem -o exp.json

The table shows each measured figure with the study's in brackets, and a verdict per row
(holds / differs); below it each check of the study's finding with the measured values. The
JSON file (volley.experiment/1, docs/experiments.md) holds the experiment that ran, the host,
the table and every run's full results.

Exit status: 0 done (a verdict that differs is a result, not a failure); 2 bad input (an
experiment file's mistake names FILE:LINE); 130 interrupted; 1 any other failure.";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Subcommand, Debug)]
pub enum Action {
    /// The built-in experiments, one a line: name, study, title.
    List,
    /// Print an experiment's file (TOML), to copy and change.
    Show {
        /// A built-in experiment's name.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Run an experiment and print its table with the study's figures and verdicts.
    Run(RunExperiment),
}

#[derive(Args, Debug)]
pub struct RunExperiment {
    /// A built-in experiment's name, or an experiment file (FILE.toml).
    #[arg(value_name = "NAME|FILE.toml")]
    pub experiment: String,

    /// Short runs (each experiment's `quick` settings): seconds, for tests and a first look.
    #[arg(long)]
    pub quick: bool,

    /// Measure this server for one transport instead of the embedded responder:
    /// TRANSPORT=URL, e.g. dot=tls://10.0.0.1:853 (repeatable; transports: udp, tcp, dot,
    /// doh1, doh2, doh3, doq). The rows' server settings (delay rules, key types) apply to
    /// the embedded responder only.
    #[arg(long, value_name = "TRANSPORT=URL")]
    pub target: Vec<String>,

    /// Measure a real server that volley configures and starts on loopback, pinned to one core
    /// (the last, or --server-cpu): unbound, kresd (knot-resolver), dnsdist (answering itself,
    /// no backend) or named (BIND 9, authoritative), over UDP, TCP, DoT and DoH/2 (rows of other
    /// transports are not measured). The rows' server settings (delay
    /// rules, key types) apply to the embedded responder only.
    #[arg(long, value_name = "NAME", conflicts_with = "target")]
    pub server: Option<String>,

    /// The core --server runs on [default: the last].
    #[arg(long, value_name = "N", requires = "server")]
    pub server_cpu: Option<usize>,

    /// The --target servers' CA certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// Do not verify the --target servers' certificates.
    #[arg(long, conflicts_with = "ca")]
    pub insecure: bool,

    /// The --target servers' processes on this host (repeatable): their CPU per query.
    #[arg(long = "target-pid", value_name = "PID")]
    pub target_pid: Vec<u32>,

    /// Seed of the links' random choices [default: a fixed one per repetition].
    #[arg(long, value_name = "N")]
    pub link_seed: Option<u64>,

    /// Write the experiment, the host, the table and every run's results as JSON
    /// (volley.experiment/1) to FILE, atomically.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The progress line on standard error (step i of n, time left).
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
}

fn err(e: ExperimentError) -> CliError {
    if e.is_usage() {
        CliError::usage(e)
    } else {
        CliError::failure(e)
    }
}

pub fn run(a: ExperimentArgs) -> CliResult {
    match a.action {
        Action::List => {
            let mut out = std::io::stdout().lock();
            for (name, text) in volley_experiment::BUILTIN {
                let spec = volley_experiment::parse(name, text).map_err(err)?;
                let _ = writeln!(out, "{name:<16} {}\n{:<16} {}", spec.title, "", spec.source);
            }
            Ok(())
        }
        Action::Show { name } => {
            let (_, text) = volley_experiment::load(&name).map_err(err)?;
            print!("{text}");
            Ok(())
        }
        Action::Run(r) => run_experiment(r),
    }
}

fn run_experiment(a: RunExperiment) -> CliResult {
    check_output(&a.output)?;
    let (file, text) = volley_experiment::load(&a.experiment).map_err(err)?;
    let spec = volley_experiment::parse(&file, &text).map_err(err)?;
    let mut targets = BTreeMap::new();
    for t in &a.target {
        let (transport, url) = t.split_once('=').ok_or_else(|| {
            CliError::usage(format!("invalid --target '{t}': expected TRANSPORT=URL such as dot=tls://127.0.0.1:853"))
        })?;
        if !volley_experiment::check::TRANSPORTS.contains(&transport) {
            return Err(CliError::usage(format!(
                "invalid --target '{t}': unknown transport '{transport}' (known: {})",
                volley_experiment::check::TRANSPORTS.join(", ")
            )));
        }
        url.parse::<volley_transport::Target>().map_err(|e| CliError::usage(format!("--target {t}: {e}")))?;
        targets.insert(transport.to_string(), url.to_string());
    }
    let mut target_pids = super::run::target_pids(&a.target_pid)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let server = match &a.server {
        Some(name) => {
            let cpu = a.server_cpu.unwrap_or(cores - 1);
            if cpu >= cores {
                return Err(CliError::usage(format!("--server-cpu {cpu}: this machine has cores 0 to {}", cores - 1)));
            }
            let s = volley_experiment::servers::start(name, cpu).map_err(err)?;
            eprintln!(
                "volley experiment: {name} started on core {cpu} (pid {}, {}): {}",
                s.pid,
                s.info.version,
                s.targets.iter().map(|(t, u)| format!("{t} {u}")).collect::<Vec<_>>().join(", ")
            );
            targets = s.targets.clone();
            target_pids = vec![s.pid];
            Some(s)
        }
        None => None,
    };
    let opts = volley_experiment::Options {
        quick: a.quick,
        targets,
        ca: server.as_ref().map(|s| s.ca.clone()).or_else(|| a.ca.clone()),
        insecure: a.insecure,
        target_pids,
        link_seed: a.link_seed,
        only_targets: server.as_ref().map(|s| s.name.clone()),
    };
    let show = match a.progress {
        ProgressMode::Always => true,
        ProgressMode::Never => false,
        ProgressMode::Auto => std::io::stderr().is_terminal(),
    };
    let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let started_at = volley_wire::rfc3339(now_ns, 0);
    let interrupt = interrupt_flag();
    let outcome = volley_experiment::run(&spec, &opts, interrupt.clone(), |p| {
        if show {
            let s = p.step;
            let rep = if s.repetition > 1 { format!(" (repetition {})", s.repetition) } else { String::new() };
            eprintln!(
                "volley experiment: step {} of {}: {}{rep}, about {} s left",
                p.index,
                p.steps,
                s.row,
                p.left.as_secs_f64().ceil() as u64
            );
        }
    })
    .map_err(err);
    let server_info = server.as_ref().map(|s| s.info.clone());
    if let Some(s) = server {
        s.stop();
    }
    let outcome = outcome?;
    let table = volley_experiment::evaluate(&spec, &outcome.measured());
    let mut out = std::io::stdout().lock();
    let _ = output::write_text(&spec, &table, &mut out);
    for s in &outcome.steps {
        for w in &s.warnings {
            let _ = writeln!(out, "warning: {} (repetition {}): {w}", s.step.row, s.step.repetition);
        }
    }
    let _ = writeln!(
        out,
        "{} steps in {:.1} s{}",
        outcome.steps.len(),
        outcome.seconds,
        if a.quick { " (--quick)" } else { "" }
    );
    let _ = out.flush();
    if let Some(path) = &a.output {
        let version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("VOLLEY_BUILD"), ")");
        let doc = output::document(&spec, &text, &table, &outcome, version, &started_at, a.quick, server_info.as_ref());
        output::write_json(path, &doc)
            .map_err(|e| CliError::failure(format!("cannot write {}: {e}", path.display())))?;
    }
    if outcome.interrupted || interrupt.load(Ordering::Relaxed) {
        return Err(CliError { code: 130, message: "interrupted: the table is partial".into() });
    }
    Ok(())
}
