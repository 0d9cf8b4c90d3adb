//! `volley bench`: every transport for a few seconds, one comparison table.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use volley_engine::{Load, Plan, QuerySet};
use volley_report::BenchRow;
use volley_responder::{ResponderConfig, Transport};
use volley_transport::{ConnPolicy, HttpVersion, LaneOptions, Scheme, Target};
use volley_wire::{QType, QueryOptions};

use crate::args::{parse_duration, TlsArgs};
use crate::cmd::run::{
    check_output, check_target, execute, h1_connections, insecure_warning, interrupt_flag, ProgressMode, INSECURE,
};
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  The embedded responder on loopback, every transport for 3 s each:
    volley bench

  Only some transports, longer:
    volley bench --transports udp,dot,doh2 -l 10s

  An external server, a target per transport (its certificate checked against --ca):
    volley bench --target udp://127.0.0.1:53 --target tls://127.0.0.1:853 --ca ca.pem

  DoH over HTTP/1.1 with GET (the TLS and HTTP flags are those of volley run):
    volley bench --target https://127.0.0.1/dns-query --http 1.1 --doh-method get --ca ca.pem

  A UDP server behind veth0, over kernel sockets and through AF_XDP (root):
    volley bench --target udp://10.0.0.2:53 --xdp veth0

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

    /// The TLS and HTTP flags of `volley run`. Against the embedded responder each row names
    /// its HTTP version, the responder's own CA is trusted and `localhost` verified: --http,
    /// --sni, --ca and --insecure are for --target.
    #[command(flatten)]
    pub tls: TlsArgs,

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

    /// Measure behind an emulated network link (docs/link.md): the items of `volley link`,
    /// space-separated (e.g. "4g"). The embedded responder listens on the link's host end, so
    /// every transport crosses the same link; an external target on 127.0.0.1 is reached at
    /// the host end (it must listen on 0.0.0.0).
    #[arg(long, value_name = "SPEC")]
    pub link: Option<String>,

    /// Seed of the link's random choices [default: a random one, printed].
    #[arg(long, value_name = "N", requires = "link")]
    pub link_seed: Option<u64>,

    /// Each `--target udp://...` also through AF_XDP, as `volley run --xdp` sends (a row
    /// `udp-xdp` under its `udp` row), over IFACE [default: the interface that routes to the
    /// target]. Needs an external UDP target reached through an interface (XDP does not see
    /// loopback, where the embedded responder listens), root, and a queue per generator
    /// thread. docs/run.md.
    #[arg(long, value_name = "IFACE", num_args = 0..=1, requires = "target", conflicts_with = "link")]
    pub xdp: Option<Option<String>>,
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
    // Behind a link, the embedded responder listens on its host end (on the host), and this
    // thread enters its namespace once the responder runs: every generator socket is there.
    let mut link = match &a.link {
        Some(spec) => Some(super::link::start_link(spec, a.link_seed)?),
        None => None,
    };
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
        let config = match &link {
            Some(l) => ResponderConfig { listen: l.host(), ..config },
            None => config,
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
            let lane = embedded_lane(&a.tls, e, ca_file.clone(), &target)?;
            cases.push(Case { name: e.name.to_string(), target, lane });
        }
        embedded = Some(r);
    } else {
        cases = target_cases(&a)?;
        if let Some(iface) = &a.xdp {
            cases = with_xdp_rows(cases, iface.as_deref(), threads)?;
        }
    }
    if let Some(l) = &link {
        for c in &mut cases {
            l.reach(vec![&mut c.target]);
        }
        l.enter()?;
    }

    let interrupt = interrupt_flag();
    let mut rows = Vec::new();
    let mut insecure = false;
    let mut runs = Vec::new();
    println!(
        "volley bench: {}s per transport, closed loop of {}, {} generator thread(s){}{}",
        a.duration.as_secs_f64(),
        a.concurrency,
        threads,
        match (&embedded, &link) {
            (Some(_), Some(l)) => format!(", embedded responder at {} behind the link", l.host()),
            (Some(_), None) => ", embedded responder on loopback".to_string(),
            (None, Some(_)) => ", behind the link".to_string(),
            (None, None) => String::new(),
        },
        match (a.fresh, embedded.is_some() && link.is_none()) {
            (true, true) => format!(", one query per connection from {FRESH_SOURCES}"),
            (true, false) => ", one query per connection".to_string(),
            _ => String::new(),
        }
    );
    for case in cases {
        let queries = QuerySet::single(&a.name, QType::A, QueryOptions::default()).map_err(CliError::usage)?;
        let fresh = a.fresh && case.target.scheme != Scheme::Udp;
        // HTTP/1.1 carries one request at a time per connection (or its pipelining depth);
        // fresh connections carry one query each.
        let connections = match h1_connections(a.concurrency, &case.lane, &case.target) {
            _ if fresh => a.concurrency as usize,
            Some(n) => n.max(threads),
            None => threads,
        };
        let mut lane = case.lane;
        if fresh {
            lane.conn = ConnPolicy { max_queries: Some(1), ..lane.conn };
            // On one source address the ports that fresh connections leave in TIME_WAIT would
            // soon make the kernel's port search, not the transport, the cost measured. (Not
            // behind a link: its namespace has one address, and a slower exchange.)
            if embedded.is_some() && link.is_none() {
                lane.sources = Some(FRESH_SOURCES.parse().map_err(CliError::usage)?);
            }
        }
        let mut plan = Plan {
            queries,
            load: Load::Closed { concurrency: a.concurrency },
            duration: Some(a.duration),
            count: None,
            timeout: Duration::from_secs(2),
            threads,
            connections,
            lane,
            batch_window: Duration::ZERO,
            target_pids: target_pids.clone(),
            // The embedded responder's threads, over the run's clock.
            target_clock: embedded.as_ref().map(|r| volley_engine::CpuClock::new(r.cpu_clock())),
            target: case.target,
            udp_retry: None,
            tc_fallback: false,
            part: volley_engine::Part::WHOLE,
            start: None,
            trace_queries: 0,
        };
        check_target(&mut plan)?;
        if let Some(l) = link.as_mut() {
            l.mark();
        }
        let mut result = execute(&plan, a.progress, None, interrupt.clone(), link.as_mut())?;
        if let Some(l) = link.as_mut() {
            // This transport's run over the link.
            let (info, warnings) = l.part();
            result.link = Some(info);
            result.warnings.extend(warnings);
        }
        result.command = std::env::args().collect();
        if let Some(w) = insecure_warning(&plan) {
            result.warnings.insert(0, w);
            insecure = true;
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
            handshake_rtts: conns.and_then(|c| c.handshake_rtt_ratio_milli.as_ref()).map(|h| h.p50_ns as f64 / 1000.0),
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
    if let Some(l) = link {
        // The link's lines over all the transports (stderr).
        l.finish()?;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let mut out = std::io::stdout().lock();
    if insecure {
        let _ = writeln!(out, "WARNING: {INSECURE}");
    }
    volley_report::write_bench_table(&rows, &mut out).map_err(CliError::failure)?;
    if !a.fresh && rows.iter().any(|r| ["tcp", "dot", "tls"].contains(&r.transport.as_str())) {
        // The default table reads as the opposite of seeds/000 to a newcomer: say why.
        let _ = writeln!(out, "{}", pipelined_note(threads, a.concurrency));
    }
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

/// The line under the default table: its TCP and DoT figures come from queries pipelined on
/// a few connections, not from clients each on their own.
fn pipelined_note(connections: usize, concurrency: u64) -> String {
    format!(
        "note: TCP and DoT above are pipelined: {concurrency} queries in flight on {connections} connection(s), \
         answers sharing segments, so on loopback they may beat UDP per query; for the cost per client \
         (connections and lifetimes, as seeds/000 measured it): volley experiment run transport-cost"
    )
}

/// The lane of one row: the TLS and HTTP flags of `volley run`, `--h1-pipeline` only where
/// the row is DoH over HTTP/1.1.
fn row_lane(tls: &TlsArgs, target: &Target) -> CliResult<LaneOptions> {
    let mut lane = TlsArgs { h1_pipeline: 1, ..tls.clone() }.apply(LaneOptions::default(), target)?;
    if h1_connections(1, &lane, target).is_some() {
        lane.h1_pipeline = tls.h1_pipeline;
    }
    Ok(lane)
}

/// The lane of a row of the embedded responder: the TLS and HTTP flags (method, pipelining,
/// TLS version, resumption, 0-RTT) with the row's HTTP version, the responder's CA and no SNI
/// of the user's (the generator verifies `localhost`).
fn embedded_lane(tls: &TlsArgs, e: &Embedded, ca: Option<PathBuf>, target: &Target) -> CliResult<LaneOptions> {
    let http = match e.http {
        Some(HttpVersion::Http1) => "1.1",
        Some(HttpVersion::Http3) => "3",
        _ => "2",
    };
    let t = TlsArgs { http: Some(http.to_string()), ca, insecure: false, sni: None, ..tls.clone() };
    row_lane(&t, target)
}

/// The rows of `--target` URLs, each named by its scheme, with the TLS and HTTP flags.
fn target_cases(a: &BenchArgs) -> CliResult<Vec<Case>> {
    let mut cases = Vec::new();
    for t in &a.target {
        let target: Target = t.parse().map_err(CliError::usage)?;
        let lane = row_lane(&a.tls, &target)?;
        cases.push(Case { name: target.scheme.as_str().to_string(), target, lane });
    }
    Ok(cases)
}

/// `--xdp`: under each UDP row, the same target through AF_XDP (`udp-xdp`).
fn with_xdp_rows(cases: Vec<Case>, iface: Option<&str>, threads: usize) -> CliResult<Vec<Case>> {
    use volley_transport::udp::xdp::Xdp;
    let mut out = Vec::new();
    let mut opened: Option<(std::net::SocketAddr, Xdp)> = None;
    for c in cases {
        let udp = c.target.scheme == Scheme::Udp;
        let (target, lane) = (c.target.clone(), c.lane.clone());
        out.push(c);
        if !udp {
            continue;
        }
        let xdp = match &opened {
            Some((t, x)) if *t == target.addr => x.clone(),
            Some(_) => return Err(CliError::usage("--xdp: one UDP target per bench")),
            None => {
                let workers = threads.min(u32::MAX as usize) as u32;
                let x = Xdp::open(target.addr, iface, None, workers).map_err(|e| CliError::usage(e.to_string()))?;
                eprintln!("volley: --xdp: {}, {}", x.iface(), x.mode());
                opened = Some((target.addr, x.clone()));
                x
            }
        };
        out.push(Case { name: "udp-xdp".to_string(), target, lane: LaneOptions { xdp: Some(xdp), ..lane } });
    }
    if opened.is_none() {
        return Err(CliError::usage("--xdp: no --target udp://... to send through AF_XDP"));
    }
    Ok(out)
}

/// A private directory for the embedded responder's CA.
fn tempdir() -> CliResult<PathBuf> {
    let p = std::env::temp_dir().join(format!("volley-bench-{}", std::process::id()));
    std::fs::create_dir_all(&p).map_err(|e| CliError::failure(format!("cannot create {}: {e}", p.display())))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use volley_transport::DohMethod;

    use super::*;
    use crate::cli::{Cli, Command};

    fn bench(args: &[&str]) -> BenchArgs {
        match Cli::try_parse_from(["volley", "bench"].iter().chain(args)).unwrap().command {
            Command::Bench(b) => b,
            c => panic!("{c:?}"),
        }
    }

    /// `--target` rows take the TLS and HTTP flags of `volley run`: a DoH/1.1 GET row with an
    /// SNI of its own, pipelined.
    #[test]
    fn target_rows_take_the_tls_and_http_flags() {
        let a = bench(&[
            "--target",
            "https://127.0.0.1:8443/dns-query",
            "--target",
            "tls://127.0.0.1:853",
            "--http",
            "1.1",
            "--doh-method",
            "get",
            "--h1-pipeline",
            "4",
            "--sni",
            "dns.example",
        ]);
        let cases = target_cases(&a).unwrap();
        let doh = &cases[0].lane;
        assert_eq!((cases[0].name.as_str(), doh.http, doh.doh_method), ("https", HttpVersion::Http1, DohMethod::Get));
        assert_eq!(doh.tls.sni.as_deref(), Some("dns.example"));
        assert_eq!(h1_connections(64, doh, &cases[0].target), Some(16));
        assert_eq!((h1_connections(64, &cases[1].lane, &cases[1].target), cases[1].lane.h1_pipeline), (None, 1));
        assert!(target_cases(&bench(&["--target", "https://127.0.0.1/dns-query", "--doh-method", "put"])).is_err());
    }

    /// Embedded rows keep their own HTTP version, CA and name, and take the method.
    #[test]
    fn embedded_rows_take_the_method() {
        let a = bench(&[
            "--http",
            "1.1",
            "--doh-method",
            "get",
            "--sni",
            "x.example",
            "--ca",
            "/none",
            "--h1-pipeline",
            "4",
        ]);
        let target: Target = "https://localhost:8443/dns-query".parse().unwrap();
        let (doh1, doh2) = (&EMBEDDED[3], &EMBEDDED[4]);
        assert_eq!((doh1.name, doh2.name), ("doh1", "doh2"));
        let lane = embedded_lane(&a.tls, doh2, None, &target).unwrap();
        assert_eq!((lane.http, lane.doh_method, lane.h1_pipeline), (HttpVersion::Http2, DohMethod::Get, 1));
        assert_eq!((lane.tls.sni, lane.tls.ca_file), (None, None));
        let lane = embedded_lane(&a.tls, doh1, None, &target).unwrap();
        assert_eq!((lane.http, lane.h1_pipeline), (HttpVersion::Http1, 4));
    }
}
