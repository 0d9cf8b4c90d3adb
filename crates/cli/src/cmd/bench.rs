//! `volley bench`: every transport for a few seconds, one comparison table.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use volley_engine::{Load, Plan, QuerySet};
use volley_report::BenchRow;
use volley_responder::{ResponderConfig, Transport};
use volley_transport::{ConnPolicy, HttpVersion, LaneOptions, Scheme, Target, TlsSettings};
use volley_wire::{QType, QueryOptions};

use crate::args::parse_duration;
use crate::cmd::run::{check_output, check_target, execute, insecure_warning, interrupt_flag, ProgressMode};
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  The embedded responder on loopback, every transport for 3 s each:
    volley bench

  Only some transports, longer:
    volley bench --transports udp,dot,doh2 -l 10s

  An external server, a target per transport (its certificate checked against --ca):
    volley bench --target udp://127.0.0.1:53 --target tls://127.0.0.1:853 --ca ca.pem

  What a query costs on the wire with persistent connections, then with a fresh connection
  for every query (one connection per query in flight):
    volley bench --transports udp,tcp,dot,doh2
    volley bench --transports udp,tcp,dot,doh2 --fresh

Transports: udp, tcp, dot (DNS over TLS), doh1, doh2, doh3 (DNS over HTTPS over HTTP/1.1,
HTTP/2, HTTP/3), doq (DNS over QUIC).

The table shows answered queries per second, the share answered, latency p50 and p99, the
generator's CPU time per answered query (its worker threads only: with the embedded
responder, the responder's threads are not counted), QPS relative to UDP, for
connection-based transports the connections opened, their median handshake and how many
resumed a TLS session, and what crossed the wire per answered query, both directions
together, IP/TCP/UDP headers included (TCP_INFO counters for TCP, DoT, DoH/1.1 and /2, QUIC
statistics for DoH/3 and DoQ, datagrams for UDP): bytes (B/query) and packets (pkts/query),
also relative to UDP. Connection set-up and close are part of a query's cost: with --fresh
(one query per connection) that is the cost of a fresh exchange, without it the cost on a
persistent connection.";

/// Every transport `volley bench` knows, in table order.
const TRANSPORTS: &[&str] = &["udp", "tcp", "dot", "doh1", "doh2", "doh3", "doq"];

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct BenchArgs {
    /// Measure this server instead of the embedded responder (repeat: one per transport).
    #[arg(long, value_name = "URL")]
    pub target: Vec<String>,

    /// Transports to measure against the embedded responder (comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_values = TRANSPORTS)]
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

    /// External targets: trust this CA (PEM) for their certificates.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// External targets: do not verify certificates (said in the results).
    #[arg(long)]
    pub insecure: bool,

    /// External targets: the target's process on this host (repeatable), for its CPU time
    /// per query (the embedded responder's own threads are always measured).
    #[arg(long = "target-pid", value_name = "PID")]
    pub target_pid: Vec<u32>,

    /// Write every run's full results (and the table) as JSON to FILE.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// One query per connection for connection-based transports (TCP, DoT, DoH, DoQ): each
    /// connection is closed after its answer and a new one opened, with as many connections
    /// as --concurrency. Shows what a fresh exchange costs (handshakes, bytes and packets on
    /// the wire) against a persistent connection (the default). Against the embedded
    /// responder the connections come from 127.0.1.0/24, so that ports left in TIME_WAIT do
    /// not make the kernel's port search the cost measured.
    #[arg(long)]
    pub fresh: bool,

    /// Live progress line on standard error.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
}

/// The source addresses of `--fresh` runs against the embedded responder (on loopback any
/// address of 127.0.0.0/8 works without configuration).
const FRESH_SOURCES: &str = "127.0.1.0/24";

/// A transport of the embedded responder: its listener and how the generator reaches it.
struct Embedded {
    name: &'static str,
    listener: Transport,
    scheme: &'static str,
    http: Option<HttpVersion>,
}

const EMBEDDED: &[Embedded] = &[
    Embedded { name: "udp", listener: Transport::Udp, scheme: "udp", http: None },
    Embedded { name: "tcp", listener: Transport::Tcp, scheme: "tcp", http: None },
    Embedded { name: "dot", listener: Transport::Dot, scheme: "tls", http: None },
    Embedded { name: "doh1", listener: Transport::Doh, scheme: "https", http: Some(HttpVersion::Http1) },
    Embedded { name: "doh2", listener: Transport::Doh, scheme: "https", http: Some(HttpVersion::Http2) },
    Embedded { name: "doh3", listener: Transport::Doh3, scheme: "https", http: Some(HttpVersion::Http3) },
    Embedded { name: "doq", listener: Transport::Doq, scheme: "quic", http: None },
];

/// One measurement to make.
struct Case {
    name: String,
    target: Target,
    lane: LaneOptions,
}

pub fn run(a: BenchArgs) -> CliResult {
    check_output(&a.output)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = a.threads.unwrap_or((cores / 2).max(1));
    if threads == 0 || a.concurrency == 0 {
        return Err(CliError::usage("--threads and --concurrency must be at least 1"));
    }
    if !a.target_pid.is_empty() && a.target.is_empty() {
        return Err(CliError::usage(
            "--target-pid is for external targets (--target); the embedded responder's CPU is measured anyway",
        ));
    }
    let target_pids = super::run::target_pids(&a.target_pid)?;
    let tmp = tempdir()?;
    let mut embedded: Option<volley_responder::Responder> = None;
    let mut cases = Vec::new();
    if a.target.is_empty() {
        let mut wanted = Vec::new();
        for t in &a.transports {
            let e = EMBEDDED.iter().find(|e| e.name.eq_ignore_ascii_case(t)).ok_or_else(|| {
                CliError::usage(format!("unknown transport '{t}' in --transports (known: {})", TRANSPORTS.join(", ")))
            })?;
            wanted.push(e);
        }
        let on = |l: Transport| wanted.iter().any(|e| e.listener == l).then_some(0);
        let config = ResponderConfig {
            udp_port: on(Transport::Udp),
            tcp_port: on(Transport::Tcp),
            dot_port: on(Transport::Dot),
            doh_port: on(Transport::Doh),
            doh3_port: on(Transport::Doh3),
            doq_port: on(Transport::Doq),
            threads: a.responder_threads.unwrap_or((cores - threads.min(cores)).max(1)),
            ..ResponderConfig::default()
        };
        let r = volley_responder::start(config).map_err(|e| CliError::failure(format!("embedded responder: {e}")))?;
        let ca_file = match r.ca_pem() {
            Some(pem) => {
                let p = tmp.join("ca.pem");
                std::fs::write(&p, pem).map_err(|e| CliError::failure(format!("cannot write {}: {e}", p.display())))?;
                Some(p)
            }
            None => None,
        };
        for e in wanted {
            let addr = r.address(e.listener).ok_or_else(|| CliError::failure(format!("no {} listener", e.name)))?;
            let url = match e.scheme {
                "https" => format!("https://localhost:{}/dns-query", addr.port()),
                "tls" | "quic" => format!("{}://localhost:{}", e.scheme, addr.port()),
                s => format!("{s}://{addr}"),
            };
            let mut target: Target = url.parse().map_err(CliError::failure)?;
            target.addr = addr;
            let lane = LaneOptions {
                tls: TlsSettings { ca_file: ca_file.clone(), ..TlsSettings::default() },
                http: e.http.unwrap_or_default(),
                ..LaneOptions::default()
            };
            cases.push(Case { name: e.name.to_string(), target, lane });
        }
        embedded = Some(r);
    } else {
        for t in &a.target {
            let target: Target = t.parse().map_err(CliError::usage)?;
            let lane = LaneOptions {
                tls: TlsSettings { ca_file: a.ca.clone(), insecure: a.insecure, ..TlsSettings::default() },
                ..LaneOptions::default()
            };
            cases.push(Case { name: target.scheme.as_str().to_string(), target, lane });
        }
    }

    let interrupt = interrupt_flag();
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    println!(
        "volley bench: {}s per transport, closed loop of {}, {} generator thread(s){}{}",
        a.duration.as_secs_f64(),
        a.concurrency,
        threads,
        if embedded.is_some() { ", embedded responder on loopback" } else { "" },
        match (a.fresh, embedded.is_some()) {
            (true, true) => format!(", one query per connection from {FRESH_SOURCES}"),
            (true, false) => ", one query per connection".to_string(),
            _ => String::new(),
        }
    );
    for case in cases {
        let queries = QuerySet::single(&a.name, QType::A, QueryOptions::default()).map_err(CliError::usage)?;
        let h1 = case.lane.http == HttpVersion::Http1 && case.target.scheme.is_https();
        let fresh = a.fresh && case.target.scheme != Scheme::Udp;
        let mut lane = case.lane;
        if fresh {
            lane.conn = ConnPolicy { max_queries: Some(1), ..lane.conn };
            // On one source address the ports that fresh connections leave in TIME_WAIT would
            // soon make the kernel's port search, not the transport, the cost measured.
            if embedded.is_some() {
                lane.sources = Some(FRESH_SOURCES.parse().map_err(CliError::usage)?);
            }
        }
        let plan = Plan {
            queries,
            load: Load::Closed { concurrency: a.concurrency },
            duration: Some(a.duration),
            count: None,
            timeout: Duration::from_secs(2),
            threads,
            // HTTP/1.1 carries one request at a time per connection; fresh connections carry
            // one query each.
            connections: if h1 || fresh { a.concurrency as usize } else { threads },
            lane,
            batch_window: Duration::ZERO,
            target_pids: target_pids.clone(),
            target: case.target,
        };
        check_target(&plan)?;
        let srv0 = embedded.as_ref().map(|r| r.cpu_ns());
        let mut result = execute(&plan, a.progress, None, interrupt.clone())?;
        if let (Some(r), Some(srv0)) = (&embedded, srv0) {
            // The embedded responder's threads, over the run.
            let cpu_s = r.cpu_ns().saturating_sub(srv0) as f64 / 1e9;
            result.target_cpu =
                Some(volley_metrics::TargetCpu::new(vec![std::process::id()], cpu_s, result.totals.answered));
        }
        result.command = std::env::args().collect();
        if let Some(w) = insecure_warning(&plan) {
            result.warnings.insert(0, w);
        }
        let conns = result.connections.as_ref();
        let t = &result.totals;
        let per_query = |n: u64| (!t.wire.is_empty() && t.answered > 0).then(|| n as f64 / t.answered as f64);
        rows.push(BenchRow {
            transport: case.name,
            qps: result.qps.answered,
            answered_ratio: result.totals.answered_ratio(),
            p50_ns: result.latency.p50_ns,
            p99_ns: result.latency.p99_ns,
            cpu_us_per_answer: result.generator.cpu_us_per_answer,
            connections: conns.map(|c| c.opened),
            handshake_p50_ns: conns.and_then(|c| c.handshake_total.as_ref()).map(|h| h.p50_ns),
            resumed: conns.filter(|c| c.handshake_tls.is_some() || c.handshake_quic.is_some()).map(|c| c.resumed),
            bytes_per_query: per_query(t.wire.bytes_out + t.wire.bytes_in),
            packets_per_query: per_query(t.wire.packets_out + t.wire.packets_in),
            target_cpu_us_per_answer: result
                .target_cpu
                .as_ref()
                .filter(|_| result.totals.answered > 0)
                .map(|c| c.cpu_us_per_answer),
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
    let _ = std::fs::remove_dir_all(&tmp);
    let mut out = std::io::stdout().lock();
    volley_report::write_bench_table(&rows, &mut out).map_err(CliError::failure)?;
    if let Some(path) = &a.output {
        let doc = serde_json::json!({ "schema": "volley.bench/1", "rows": rows, "runs": runs });
        let bytes = serde_json::to_vec_pretty(&doc).map_err(CliError::failure)?;
        volley_report::write_file_atomic(path, |w| std::io::Write::write_all(w, &bytes)).map_err(CliError::failure)?;
    }
    if interrupt.load(Ordering::Relaxed) {
        return Err(CliError { code: 130, message: "interrupted".into() });
    }
    Ok(())
}

/// A private directory for the embedded responder's CA.
fn tempdir() -> CliResult<PathBuf> {
    let p = std::env::temp_dir().join(format!("volley-bench-{}", std::process::id()));
    std::fs::create_dir_all(&p).map_err(|e| CliError::failure(format!("cannot create {}: {e}", p.display())))?;
    Ok(p)
}
