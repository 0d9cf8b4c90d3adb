//! `volley bench`: every transport for a few seconds, one comparison table.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use volley_engine::{Load, Plan, QuerySet};
use volley_report::BenchRow;
use volley_responder::{ResponderConfig, Transport};
use volley_transport::{LaneOptions, Target};
use volley_wire::{QType, QueryOptions};

use crate::args::parse_duration;
use crate::cmd::run::{interrupt_flag, ProgressMode};
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  The embedded responder on loopback, every transport for 3 s each:
    volley bench

  An external server, a target per transport:
    volley bench --target udp://127.0.0.1:53 --target tcp://127.0.0.1:53 -l 10s -c 200

The table shows answered queries per second, the share answered, latency p50 and p99, and
the generator's CPU time per answered query (its worker threads only: with the embedded
responder, the responder's threads are not counted).";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct BenchArgs {
    /// Measure this server instead of the embedded responder (repeat: one per transport).
    #[arg(long, value_name = "URL")]
    pub target: Vec<String>,

    /// Transports to measure against the embedded responder (comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_values = ["udp", "tcp"])]
    pub transports: Vec<String>,

    /// How long to measure each transport.
    #[arg(short = 'l', long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Queries in flight (closed loop).
    #[arg(short = 'c', long, value_name = "N", default_value_t = 64)]
    pub concurrency: u64,

    /// Generator worker threads [default: half the cores, at least 1, leaving the rest to
    /// the embedded responder].
    #[arg(short = 'T', long, value_name = "N")]
    pub threads: Option<usize>,

    /// Threads of the embedded responder [default: the other half of the cores].
    #[arg(long, value_name = "N")]
    pub responder_threads: Option<usize>,

    /// Name to query.
    #[arg(long, value_name = "NAME", default_value = "www.example.test")]
    pub name: String,

    /// Write every run's full results (and the table) as JSON to FILE.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Live progress line on standard error.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
}

pub fn run(a: BenchArgs) -> CliResult {
    crate::cmd::run::check_output(&a.output)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = a.threads.unwrap_or((cores / 2).max(1));
    if threads == 0 || a.concurrency == 0 {
        return Err(CliError::usage("--threads and --concurrency must be at least 1"));
    }
    let mut embedded = None;
    let targets: Vec<Target> = if a.target.is_empty() {
        let mut udp = false;
        let mut tcp = false;
        for t in &a.transports {
            match t.to_ascii_lowercase().as_str() {
                "udp" => udp = true,
                "tcp" => tcp = true,
                other => {
                    return Err(CliError::usage(format!(
                        "unknown transport '{other}' in --transports (known: udp, tcp)"
                    )))
                }
            }
        }
        let config = ResponderConfig {
            udp_port: udp.then_some(0),
            tcp_port: tcp.then_some(0),
            threads: a.responder_threads.unwrap_or((cores - threads.min(cores)).max(1)),
            ..ResponderConfig::default()
        };
        let r = volley_responder::start(config).map_err(|e| CliError::failure(format!("embedded responder: {e}")))?;
        let mut ts = Vec::new();
        for (transport, scheme) in [(Transport::Udp, "udp"), (Transport::Tcp, "tcp")] {
            if let Some(addr) = r.address(transport) {
                ts.push(format!("{scheme}://{addr}").parse().map_err(CliError::failure)?);
            }
        }
        embedded = Some(r);
        ts
    } else {
        a.target.iter().map(|t| t.parse::<Target>().map_err(CliError::usage)).collect::<CliResult<_>>()?
    };

    let interrupt = interrupt_flag();
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    println!(
        "volley bench: {} per transport, closed loop of {}, {} generator thread(s){}",
        secs(a.duration),
        a.concurrency,
        threads,
        if embedded.is_some() { ", embedded responder on loopback" } else { "" }
    );
    for target in targets {
        let queries = QuerySet::single(&a.name, QType::A, QueryOptions::default()).map_err(CliError::usage)?;
        let plan = Plan {
            queries,
            load: Load::Closed { concurrency: a.concurrency },
            duration: Some(a.duration),
            count: None,
            timeout: Duration::from_secs(2),
            threads,
            connections: threads,
            lane: LaneOptions::default(),
            batch_window: Duration::ZERO,
            target,
        };
        crate::cmd::run::check_target(&plan)?;
        let mut result = crate::cmd::run::execute(&plan, a.progress, interrupt.clone())?;
        result.command = std::env::args().collect();
        rows.push(BenchRow {
            transport: plan.target.scheme.as_str().to_string(),
            qps: result.qps.answered,
            answered_ratio: result.totals.answered_ratio(),
            p50_ns: result.latency.p50_ns,
            p99_ns: result.latency.p99_ns,
            cpu_us_per_answer: result.generator.cpu_us_per_answer,
            note: (!result.totals.balanced()).then(|| "accounting does not balance".to_string()),
        });
        runs.push(result);
        if interrupt.load(Ordering::Relaxed) {
            break;
        }
    }
    if let Some(r) = embedded {
        r.stop();
    }
    let mut out = std::io::stdout().lock();
    volley_report::write_bench_table(&rows, &mut out).map_err(|e| CliError::failure(e))?;
    if let Some(path) = &a.output {
        let doc = serde_json::json!({ "schema": "volley.bench/1", "rows": rows, "runs": runs });
        write_atomic(path, &serde_json::to_vec_pretty(&doc).map_err(|e| CliError::failure(e))?)?;
    }
    if interrupt.load(Ordering::Relaxed) {
        return Err(CliError { code: 130, message: "interrupted".into() });
    }
    Ok(())
}

fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> CliResult {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::failure(format!("cannot write {}: {e}", path.display()))
    })
}
