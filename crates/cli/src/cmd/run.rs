//! `volley run`: generate load against a DNS server and measure it.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use volley_engine::{Arrivals, ClientsLoad, Group, Load, Plan, Profile, QuerySet, UdpRetry};
use volley_metrics::{RunResult, Status};
use volley_transport::{
    probe::probe_addresses, ConnGate, ConnPolicy, HttpVersion, LaneOptions, Scheme, Sources, Target, TxStamps,
};
use volley_wire::{Edns, QType, QueryOptions};

use crate::args::{parse_duration, TlsArgs};
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

#[derive(Args, Debug, Clone)]
#[command(after_long_help = EXAMPLES)]
pub struct RunArgs {
    /// Server to measure: udp://HOST[:PORT] or tcp://HOST[:PORT] (port 53), tls://HOST[:PORT]
    /// (DoT, port 853), https://HOST[:PORT][/PATH] (DoH, port 443, path /dns-query),
    /// h3://HOST[:PORT][/PATH] (DoH over HTTP/3), quic://HOST[:PORT] (DoQ, port 853); dot://,
    /// doh:// and doq:// name tls://, https:// and quic:// too. IPv6 in brackets, e.g.
    /// udp://[::1]:53.
    #[arg(value_name = "TARGET", required_unless_present_any = ["mix", "server", "port", "mode"])]
    pub target: Option<String>,

    /// dnsperf's spelling of TARGET: the server's address (IPv6 without brackets too); with -p
    /// and -m [default: 127.0.0.1, as dnsperf's, when only -p or -m is given].
    #[arg(short = 's', long = "server", value_name = "ADDR", conflicts_with_all = ["target", "mix"], help_heading = "dnsperf's spelling of TARGET")]
    pub server: Option<String>,

    /// dnsperf's spelling: the server's port [default: the transport's: 53, 853 or 443].
    #[arg(short = 'p', long = "port", value_name = "PORT", conflicts_with_all = ["target", "mix"], help_heading = "dnsperf's spelling of TARGET")]
    pub port: Option<u16>,

    /// dnsperf's spelling: the transport: udp, tcp, dot, doh (DoH over HTTP/2), doh3, doq [default: udp].
    #[arg(short = 'm', long = "mode", value_name = "MODE", conflicts_with_all = ["target", "mix"], help_heading = "dnsperf's spelling of TARGET")]
    pub mode: Option<String>,

    /// Read queries from FILE (dnsperf format: 'NAME [TYPE]' per line), cycling through it.
    #[arg(short = 'd', long = "queries", value_name = "FILE", help_heading = "Queries")]
    pub queries: Option<PathBuf>,

    /// Ask for NAME in every query [default: www.example.test when no other source is given].
    #[arg(long, value_name = "NAME", conflicts_with = "queries", help_heading = "Queries")]
    pub name: Option<String>,

    /// Ask for a fresh random label under SUFFIX in every query (cache-miss load).
    #[arg(long, value_name = "SUFFIX", conflicts_with_all = ["queries", "name"], help_heading = "Queries")]
    pub random_under: Option<String>,

    /// Query type for --name, --random-under and the lines of a -d file that name none (A, AAAA,
    /// TXT, ... or TYPE123).
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

    /// UDP: send a query again after DURATION without an answer, as stub resolvers do
    /// (glibc's resolv.conf `timeout:`, dig's +timeout), up to --udp-tries sends in all, all
    /// within --timeout; each query keeps one fate, its latency counted from its first send.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Load")]
    pub udp_retry: Option<Duration>,

    /// UDP: how many times a query may go out in all, the first send included (glibc's
    /// `attempts:`, dig's +tries) [default: 2 with --udp-retry; without it, the sends share
    /// --timeout evenly].
    #[arg(long, value_name = "N", help_heading = "Load")]
    pub udp_tries: Option<u32>,

    /// UDP: ask the question of a truncated answer (TC=1) again over TCP, on a connection of
    /// its own, as stub resolvers do; the TCP answer is the query's fate, its latency counted
    /// from its first UDP send.
    #[arg(long, help_heading = "Load")]
    pub tc_fallback: bool,

    /// Open loop: queries due within this window of a wake-up leave together in one system
    /// call (up to this early; their latency then counts from when they left). 0 wakes up
    /// for every query: the most exact schedule, and the most CPU per query [default: 250us;
    /// 500us with --xdp, whose cost per query is mostly its wake-ups].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Load")]
    pub batch_window: Option<Duration>,

    /// Close each connection after it has sent N queries and open a new one (1: a new
    /// connection for every query). TCP, DoT, DoH and DoQ.
    #[arg(long, value_name = "N", help_heading = "Connections")]
    pub conn_queries: Option<u64>,

    /// Close each connection once it is DURATION old and open a new one.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Connections")]
    pub conn_lifetime: Option<Duration>,

    /// Close a connection after DURATION with no query outstanding; the next query opens a
    /// new one.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Connections")]
    pub idle_timeout: Option<Duration>,

    /// Open at most N new connections per second over the whole run (each attempt waits for
    /// its slot of an even schedule; queries wait with it). TCP, DoT, DoH and DoQ.
    #[arg(long, value_name = "N", value_parser = parse_conn_rate, help_heading = "Connections")]
    pub conn_rate: Option<ConnGate>,

    /// How many times a query is sent again when a connection ends before its answer and the
    /// server provably did not process it (closed or reset with no answer owed, GOAWAY,
    /// REFUSED_STREAM, H3_REQUEST_REJECTED, a QUIC stateless reset): "any" (as often as the
    /// query's own timeout allows; RFC 7766 6.2.1 sets no count) or N (0: never, as dnsperf).
    #[arg(long, value_name = "any|N", default_value = "any", value_parser = parse_resend, help_heading = "Connections")]
    pub resend: u32,

    /// QUIC (DoQ, DoH/3): send packets in segmentation-offload trains (UDP_SEGMENT) [on], or
    /// one by one [off]. A packet capture on this host sees a train as one large packet (as
    /// with offloads on a real interface); use off when a capture must show each packet.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = crate::args::parse_on_off, action = clap::ArgAction::Set, help_heading = "Connections")]
    pub udp_gso: bool,

    /// Time each query's departure by the kernel's transmit stamp (SO_TIMESTAMPING, read from
    /// the socket's error queue), or by volley's clock after the send returned [off]. Over UDP
    /// [each, also on] stamps every datagram; [ends] stamps the first, the second, every 8th
    /// and the last datagram of each batch sent in one system call, and the ones between take
    /// a time between the two stamps around them, by their place: a stamp costs the kernel
    /// about 1 µs, and ends takes a fifth of them at high rates, but a stall inside a batch
    /// moves the ones between (p99 up to 21 µs off the wire at 50,000 qps here). Stamps are taken over
    /// every transport (TCP and TLS: each write; DoQ and DoH/3: the first datagram sent after
    /// the query's stream was written); a query the kernel gave none takes volley's clock (the
    /// results' send_stamps count each kind). Off only to measure what the stamps cost.
    #[arg(long, value_name = "each|ends|off", value_enum, default_value = "each", help_heading = "Output")]
    pub tx_stamps: TxStampsArg,

    /// Spread sockets over these source addresses: ADDR or ADDR/PREFIX (e.g. 127.0.1.0/24),
    /// each socket or connection slot taking the next address in turn. One address has about
    /// 28,000 ports towards one server; a range lifts that limit. Addresses must be on this
    /// machine (any of 127.0.0.0/8 is).
    #[arg(long, value_name = "CIDR", help_heading = "Connections")]
    pub bind: Option<Sources>,

    /// Simulate N clients, each with its own connections and its own timing, behaving as
    /// --profile says (or as each --mix group says).
    #[arg(long, value_name = "N", help_heading = "Clients")]
    pub clients: Option<u64>,

    /// Queries per second of each simulated client (the total rate is clients x this); a
    /// --mix group may set its own (WEIGHT:PROFILE:QPS@URL).
    #[arg(long, value_name = "QPS", default_value_t = 1.0, help_heading = "Clients")]
    pub client_rate: f64,

    /// How each client spaces its queries: evenly (each client at its own phase) or as a
    /// Poisson process.
    #[arg(long, value_enum, default_value = "constant", help_heading = "Clients")]
    pub arrivals: ArrivalsArg,

    /// Client profile: a built-in (stub, forwarder, browser) or a TOML file (docs/clients.md)
    /// [default: stub over UDP, forwarder otherwise].
    #[arg(long, value_name = "NAME|FILE", help_heading = "Clients")]
    pub profile: Option<String>,

    /// A group of a mixture of clients: WEIGHT:PROFILE[:QPS]@URL, e.g. 60:stub@udp://127.0.0.1:53
    /// or 20:browser:3@https://127.0.0.1/dns-query (repeat; weights are relative; QPS: each
    /// of the group's clients, default --client-rate). Replaces TARGET and --profile.
    #[arg(long, value_name = "WEIGHT:PROFILE[:QPS]@URL", help_heading = "Clients")]
    pub mix: Vec<String>,

    /// Replay a clients file (made by `volley pcap`): each simulated client sends a captured
    /// client's queries at their captured times. --clients scales: fewer takes an even sample,
    /// more repeats the capture's clients, each repetition shifted in time.
    #[arg(long, value_name = "FILE", help_heading = "Clients", conflicts_with_all = ["queries", "name", "random_under"])]
    pub replay: Option<PathBuf>,

    /// Worker threads [default: the number of cores; 1 with --xdp].
    #[arg(short = 'T', long, value_name = "N", help_heading = "Load")]
    pub threads: Option<usize>,

    /// Send and receive UDP through an AF_XDP socket on IFACE [default: the interface that
    /// routes to the target], frames built by volley, answers redirected to it by an XDP
    /// program volley attaches (native where the driver allows it, generic elsewhere; the
    /// results' events say which). Needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF) and a real
    /// or virtual interface (not loopback) with a queue per worker thread (-T): worker i's
    /// socket is on queue i, its source ports are i modulo the workers. docs/run.md.
    #[arg(long, value_name = "IFACE", num_args = 0..=1, help_heading = "Connections")]
    pub xdp: Option<Option<String>>,

    /// UDP sockets or TCP connections in total [default: one per thread].
    #[arg(long, value_name = "N", help_heading = "Load")]
    pub connections: Option<usize>,

    #[command(flatten)]
    pub tls: TlsArgs,

    /// Generate the load behind an emulated network link (docs/link.md): the items of
    /// `volley link`, space-separated (e.g. "4g", "delay=20ms,loss=1%", "up:rate=10mbit
    /// down:delay=5ms"). A target on 127.0.0.1 is reached at the link's host end: it must
    /// listen on 0.0.0.0.
    #[arg(long, value_name = "SPEC", help_heading = "Link")]
    pub link: Option<String>,

    /// Seed of the link's random choices [default: a random one, printed].
    #[arg(long, value_name = "N", requires = "link", help_heading = "Link")]
    pub link_seed: Option<u64>,

    /// Make part I (from 0) of a run split into N parts, e.g. 0/4: its share of the rate
    /// (every Nth arrival of the whole run's schedule), of the clients (each whole to one
    /// part), of the concurrency, connections and count; the N parts together make the run
    /// one process would make (docs/scale-out.md).
    #[arg(long, value_name = "I/N", help_heading = "Scale out")]
    pub part: Option<String>,

    /// The run is split into N parts, this one's index from JOB_COMPLETION_INDEX (a Kubernetes
    /// Indexed Job) or VOLLEY_PART, else given by the coordinator (--coordinator).
    #[arg(long, value_name = "N", env = "VOLLEY_PARTS", help_heading = "Scale out")]
    pub parts: Option<u32>,

    /// Start at TIME: RFC 3339 (2026-11-26T03:00:00.000Z) or Unix milliseconds; the run makes
    /// its sockets and connections first, then its load begins at TIME exactly.
    #[arg(long = "start-at", value_name = "TIME", conflicts_with = "coordinator", help_heading = "Scale out")]
    pub start_at: Option<String>,

    /// Join the coordinator at HOST:PORT (volley coordinate): it checks that every part makes
    /// the same run, measures this host's clock offset, gives one start to all parts once all
    /// are ready, shows their merged progress and merges their results.
    #[arg(long, value_name = "HOST:PORT", env = "VOLLEY_COORDINATOR", help_heading = "Scale out")]
    pub coordinator: Option<String>,

    /// How long to wait for the coordinator: to answer (tried again until then: an orchestrator
    /// starts it in no particular order, and its name may not resolve yet), and for the start.
    #[arg(long = "coordinator-wait", value_name = "DURATION", default_value = "5m", value_parser = parse_duration, help_heading = "Scale out")]
    pub coordinator_wait: Duration,

    /// Write the results as JSON to FILE (atomically; schema in docs/results-schema.md). In a
    /// split run, `{part}` in FILE becomes the part's index (parts/run-{part}.json).
    #[arg(short = 'o', long, value_name = "FILE", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// The target's process on this host (repeatable): its CPU time over the run, in total and
    /// per answered query, goes into the summary and the results (`target_cpu`).
    #[arg(long = "target-pid", value_name = "PID", help_heading = "Output")]
    pub target_pid: Vec<u32>,

    /// Keep the run's first N queries one by one in the results (`query_trace`: each one's
    /// order of issue, issue time, latency and fate), for a per-query timeline; at most 10000,
    /// in a buffer of that size (memory does not grow with the run).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000), help_heading = "Output")]
    pub trace_queries: Option<u64>,

    /// Rewrite FILE (atomically) every second with the run's live figures in OpenMetrics /
    /// Prometheus text, for scraping during long runs (e.g. by node_exporter's textfile collector).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub metrics_file: Option<PathBuf>,

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

/// `--tx-stamps`: which departures the kernel stamps (see `volley_transport::TxStamps`).
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum TxStampsArg {
    #[value(alias = "on")]
    Each,
    Ends,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ArrivalsArg {
    Constant,
    Poisson,
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

/// TARGET from dnsperf's -s ADDR, -p PORT and -m MODE: `udp://127.0.0.1:53` and the like.
pub fn dnsperf_target(server: Option<&str>, port: Option<u16>, mode: Option<&str>) -> CliResult<String> {
    let (scheme, default_port) = match mode.unwrap_or("udp").to_ascii_lowercase().as_str() {
        "udp" => ("udp", 53),
        "tcp" => ("tcp", 53),
        "dot" | "tls" => ("tls", 853),
        "doh" | "https" => ("https", 443),
        "doh3" | "h3" => ("h3", 443),
        "doq" | "quic" => ("quic", 853),
        m => {
            let first = format!("invalid -m/--mode '{m}': expected udp, tcp, dot, doh, doh3 or doq");
            // resperf's -m QPS: say volley limit --max.
            return Err(CliError::usage(match crate::neighbours::numeric_mode(m) {
                Some(h) => format!("{first} ({h})"),
                None => first,
            }));
        }
    };
    let host = server.unwrap_or("127.0.0.1");
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    Ok(format!("{scheme}://{host}:{}", port.unwrap_or(default_port)))
}

/// Builds a plan from the flags, or says which flag is wrong.
pub fn plan(a: &RunArgs) -> CliResult<Plan> {
    // dnsperf's -s/-p/-m name the TARGET (clap has made sure neither TARGET nor --mix is given).
    let spelled;
    let a = if a.server.is_some() || a.port.is_some() || a.mode.is_some() {
        let mut b = a.clone();
        b.target = Some(dnsperf_target(a.server.as_deref(), a.port, a.mode.as_deref())?);
        spelled = b;
        &spelled
    } else {
        a
    };
    let replayed = a.replay.as_deref().map(crate::cmd::replay::load).transpose()?;
    let (clients, conn_sockets) = match clients_load(a, replayed.as_ref().map(|(r, _)| r.clone()))? {
        Some((c, n)) => (Some(c), n),
        None => (None, 0),
    };
    let target: Target = match (&clients, &a.target) {
        (Some(c), _) => c.groups[0].target.clone(),
        (None, Some(t)) => t.parse().map_err(CliError::usage)?,
        (None, None) => return Err(CliError::usage("a TARGET is needed (or --mix)")),
    };
    let opts = QueryOptions {
        recursion_desired: !a.no_rd,
        checking_disabled: false,
        edns: (!a.no_edns).then_some(Edns { udp_size: a.edns_size, dnssec_ok: a.dnssec, version: 0 }),
    };
    let qtype: QType =
        a.qtype.parse().map_err(|_| CliError::usage(format!("unknown query type '{}' in --qtype", a.qtype)))?;
    let queries = if let Some((_, set)) = replayed {
        Ok(set)
    } else if let Some(path) = &a.queries {
        if let Some(h) = crate::neighbours::missing_queries_file(path) {
            return Err(CliError::usage(format!("{}: no such queries file ({h})", path.display())));
        }
        QuerySet::from_file(path, qtype, opts)
    } else if let Some(suffix) = &a.random_under {
        QuerySet::random_under(suffix, qtype, opts)
    } else {
        QuerySet::single(a.name.as_deref().unwrap_or("www.example.test"), qtype, opts)
    }
    .map_err(CliError::usage)?;
    let load = match (a.rate, a.concurrency) {
        _ if clients.is_some() => {
            if a.rate.is_some() || a.concurrency.is_some() {
                return Err(CliError::usage(
                    "--clients sets the load (--client-rate per client): drop --rate/--concurrency",
                ));
            }
            Load::Clients(clients.clone().expect("checked"))
        }
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
        // A replay ends with its capture.
        (None, None) if a.replay.is_some() => None,
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let threads = worker_threads(a);
    let lane = match &clients {
        Some(c) => c.groups[0].lane.clone(),
        None => lane_options(a, &target)?,
    };
    let connections = match (a.connections, &load) {
        (_, Load::Clients(c)) => Some(udp_sockets(a.connections, c, threads, conn_sockets)?),
        (None, Load::Closed { concurrency }) => h1_connections(*concurrency, &lane, &target).map(|n| n.max(threads)),
        (c, _) => c,
    }
    .unwrap_or(threads);
    if clients.is_none() {
        check_sockets(connections as u64, threads, &lane, &format!("{connections} connections"))?;
    }
    let udp_retry = udp_retry_flags(a)?;
    if clients.is_none() && target.scheme != Scheme::Udp && (udp_retry.is_some() || a.tc_fallback) {
        return Err(CliError::usage(UDP_FLAGS_NEED_UDP));
    }
    Ok(Plan {
        target,
        queries,
        load,
        duration,
        count: a.count,
        timeout: a.timeout,
        threads,
        connections,
        lane,
        batch_window: batch_window(a),
        target_pids: target_pids(&a.target_pid)?,
        target_clock: None,
        udp_retry,
        tc_fallback: a.tc_fallback,
        part: super::scale::static_part(a)?.unwrap_or_default(),
        start: None,
        trace_queries: a.trace_queries.unwrap_or(0),
    })
}

/// The error of UDP flags on a run without UDP.
const UDP_FLAGS_NEED_UDP: &str = "--udp-retry, --udp-tries and --tc-fallback apply to UDP: use a udp:// target";

/// `--udp-retry` and `--udp-tries`, checked against `--timeout`: None when neither is given.
fn udp_retry_flags(a: &RunArgs) -> CliResult<Option<UdpRetry>> {
    if a.udp_retry.is_none() && a.udp_tries.is_none() {
        return Ok(None);
    }
    UdpRetry::new(a.udp_retry, a.udp_tries.unwrap_or(2), a.timeout)
        .map(Some)
        .map_err(|e| CliError::usage(format!("invalid --udp-retry/--udp-tries: {e}")))
}

/// Simulated UDP clients of a run: how many.
fn udp_clients(c: &ClientsLoad) -> usize {
    c.assignments().iter().filter(|&&g| c.groups[g as usize].target.scheme == Scheme::Udp).count()
}

/// The UDP sockets the simulated UDP clients of `c` get: one each, unless `--connections`
/// (`asked`) gives fewer, or the open-files limit of the worker threads (after the `conn`
/// sockets of the clients of connection-based groups) or the source addresses' ports allow
/// fewer; the clients then share them evenly (see [`udp_sharing`]). `--connections` on a run
/// without UDP clients is an error rather than a flag that does nothing.
fn udp_sockets(asked: Option<usize>, c: &ClientsLoad, threads: usize, conn: u64) -> CliResult<usize> {
    let clients = udp_clients(c);
    if clients == 0 {
        if asked.is_some() {
            return Err(CliError::usage(
                "--connections with --clients is the number of UDP sockets simulated UDP clients share; \
                 these clients each open their profile's connections: drop --connections",
            ));
        }
        return Ok(threads);
    }
    let threads = threads.min(c.count as usize).max(1) as u64;
    let tables = if volley_engine::threads_own_descriptor_tables() { threads } else { 1 };
    let per_table = open_files_limit().saturating_sub(RESERVED_FILES + conn.div_ceil(tables));
    let udp = c.groups.iter().find(|g| g.target.scheme == Scheme::Udp).expect("a UDP group");
    let ports = volley_engine::local_ports() * udp.lane.sources.as_ref().map_or(1, |s| s.count());
    let budget = (per_table.saturating_mul(tables)).min(ports).max(threads);
    Ok(asked.unwrap_or(clients).min(clients).min(budget.min(usize::MAX as u64) as usize).max(1))
}

/// What a run whose simulated UDP clients share sockets says before it starts (and in its
/// results): how many clients per socket, and why.
pub fn udp_sharing(plan: &Plan, asked: Option<usize>) -> Option<String> {
    let Load::Clients(c) = &plan.load else { return None };
    let clients = udp_clients(c);
    let sockets = plan.connections;
    if let Some(n) = asked.filter(|&n| clients > 0 && n > clients) {
        return Some(format!("--connections {n}: the {clients} simulated UDP clients have one socket each"));
    }
    if clients == 0 || sockets >= clients {
        return None;
    }
    let why = if asked == Some(sockets) {
        format!("--connections {sockets}")
    } else {
        format!(
            "the open-files limit: {} files per worker thread; raise it (ulimit -n) or add --threads",
            open_files_limit()
        )
    };
    let (fewest, most) = (clients / sockets, clients.div_ceil(sockets));
    let per = if fewest == most { format!("{most}") } else { format!("{fewest} to {most}") };
    Some(format!(
        "{clients} simulated UDP clients share {sockets} UDP sockets, {per} clients per socket ({why}): \
         the clients of one socket send from one address and port, as one client to the server"
    ))
}

/// Descriptors kept free of sockets (runtime, timers, files, the standard streams).
const RESERVED_FILES: u64 = 256;

/// The simulated clients of the flags, one group (TARGET with --profile) or a --mix, with the
/// sockets its clients of connection-based groups hold at once (about).
fn clients_load(
    a: &RunArgs,
    replay: Option<Arc<volley_engine::clients::Replay>>,
) -> CliResult<Option<(ClientsLoad, u64)>> {
    if a.clients.is_none() && a.mix.is_empty() && a.replay.is_none() {
        return Ok(None);
    }
    let count = a.clients.unwrap_or_else(|| replay.as_ref().map_or(100, |r| r.clients.len() as u64));
    if count == 0 {
        return Err(CliError::usage("invalid --clients 0: expected at least 1"));
    }
    if !(a.client_rate > 0.0 && a.client_rate.is_finite()) {
        return Err(CliError::usage(format!(
            "invalid --client-rate '{}': expected queries per second above 0",
            a.client_rate
        )));
    }
    // (weight, profile, each client's rate, target URL)
    let mut specs: Vec<(f64, Option<String>, f64, String)> = Vec::new();
    if a.mix.is_empty() {
        let t = a.target.clone().ok_or_else(|| CliError::usage("a TARGET is needed (or --mix)"))?;
        specs.push((1.0, a.profile.clone(), a.client_rate, t));
    } else {
        if a.target.is_some() || a.profile.is_some() {
            return Err(CliError::usage("--mix names each group's profile and target: drop TARGET and --profile"));
        }
        for m in &a.mix {
            specs.push(parse_mix(m, a.client_rate)?);
        }
    }
    let user_policy = ConnPolicy { max_queries: a.conn_queries, lifetime: a.conn_lifetime, idle: a.idle_timeout };
    // Each connection flag given replaces its part of a profile's policy.
    let with_flags = |p: ConnPolicy| ConnPolicy {
        max_queries: user_policy.max_queries.or(p.max_queries),
        lifetime: user_policy.lifetime.or(p.lifetime),
        idle: user_policy.idle.or(p.idle),
    };
    check_policy_flags(a)?;
    let targets: Vec<Target> =
        specs.iter().map(|(_, _, _, url)| url.parse::<Target>().map_err(CliError::usage)).collect::<CliResult<_>>()?;
    if targets.iter().all(|t| t.scheme == Scheme::Udp) && (!user_policy.is_none() || a.conn_rate.is_some()) {
        return Err(CliError::usage(CONN_FLAGS_NEED_CONNECTIONS));
    }
    let mut groups = Vec::new();
    for ((weight, profile, rate, _), target) in specs.into_iter().zip(targets) {
        let name = profile.unwrap_or_else(|| if target.scheme == Scheme::Udp { "stub" } else { "forwarder" }.into());
        let profile = Profile::load(&name, &parse_duration).map_err(CliError::usage)?;
        let udp = target.scheme == Scheme::Udp;
        let mut lane = lane_options_with(a, &target, ConnPolicy::default())?;
        // Each client resumes only the TLS sessions it obtained itself.
        lane.own_sessions = true;
        let mut busy = None;
        if udp {
            // UDP groups share sockets: connection settings are for the other groups.
            lane.conn_gate = None;
        } else {
            lane.conn = with_flags(profile.light);
            busy = profile.busy.map(with_flags);
        }
        let fallback = ((profile.tcp_on_truncation || a.tc_fallback) && udp)
            .then(|| format!("tcp://{}", target.addr).parse::<Target>())
            .transpose()
            .map_err(CliError::usage)?;
        // The command line's retry replaces the profile's.
        let udp_retry = match (udp_retry_flags(a)?, profile.udp_tries) {
            _ if !udp => None,
            (Some(r), _) => Some(r),
            (None, Some(tries)) if tries > 1 => Some(
                UdpRetry::new(profile.udp_retry, tries, a.timeout)
                    .map_err(|e| CliError::usage(format!("profile {}: udp_retry/udp_tries: {e}", profile.name)))?,
            ),
            (None, _) => None,
        };
        groups.push(Group { weight, profile, target, rate, lane, busy, fallback, udp_retry });
    }
    let arrivals = match a.arrivals {
        ArrivalsArg::Constant => Arrivals::Constant,
        ArrivalsArg::Poisson => Arrivals::Poisson,
    };
    // Each client of a connection-based group holds its own sockets: say so before starting
    // rather than failing connections one by one. A client whose connections close when idle
    // holds them only part of the time: with q queries per second and an idle timeout of t
    // seconds, a connection is open about 1 - e^(-q t) of the time (Poisson arrivals; for
    // clients of unequal rates, as in a replay, this overestimates).
    let replay_rate = replay.as_ref().map(|r| {
        let queries: usize = r.clients.iter().map(Vec::len).sum();
        let span_s = (r.span_ns as f64 / 1e9).max(1.0);
        queries as f64 / r.clients.len().max(1) as f64 / span_s
    });
    let total_weight: f64 = groups.iter().map(|x| x.weight).sum();
    let sockets: u64 = groups
        .iter()
        .filter(|g| g.target.scheme != Scheme::Udp)
        .map(|g| {
            let clients = (count as f64 * g.weight / total_weight).ceil();
            let rate = replay_rate.unwrap_or(g.rate);
            let open_share = match g.lane.conn.idle {
                Some(idle) if !g.profile.connect_at_start => 1.0 - (-rate * idle.as_secs_f64()).exp(),
                _ => 1.0,
            };
            (clients * f64::from(g.profile.connections) * open_share).ceil() as u64
        })
        .sum();
    if !groups.iter().any(|g| g.target.scheme == Scheme::Udp)
        && (a.udp_retry.is_some() || a.udp_tries.is_some() || a.tc_fallback)
    {
        return Err(CliError::usage(UDP_FLAGS_NEED_UDP));
    }
    check_sockets(sockets, worker_threads(a), &groups[0].lane, &format!("{count} clients"))?;
    Ok(Some((ClientsLoad { count, arrivals, groups, replay }, sockets)))
}

/// The transport settings of the flags (TLS, HTTP), checked.
fn lane_options(a: &RunArgs, target: &Target) -> CliResult<LaneOptions> {
    let policy = ConnPolicy { max_queries: a.conn_queries, lifetime: a.conn_lifetime, idle: a.idle_timeout };
    check_policy_flags(a)?;
    if target.scheme == Scheme::Udp && (!policy.is_none() || a.conn_rate.is_some()) {
        return Err(CliError::usage(CONN_FLAGS_NEED_CONNECTIONS));
    }
    lane_options_with(a, target, policy)
}

/// [`lane_options`] with the connection policy given.
fn lane_options_with(a: &RunArgs, target: &Target, policy: ConnPolicy) -> CliResult<LaneOptions> {
    let base = LaneOptions {
        udp_payload: (a.edns_size as usize).max(4096),
        query_timeout: a.timeout,
        conn: policy,
        sources: a.bind.clone(),
        conn_gate: a.conn_rate.clone(),
        udp_gso: a.udp_gso,
        resend: a.resend,
        tx_stamps: match a.tx_stamps {
            TxStampsArg::Ends => Some(TxStamps::Ends),
            TxStampsArg::Each => Some(TxStamps::Each),
            TxStampsArg::Off => None,
        },
        xdp: xdp_for(a, target)?,
        ..LaneOptions::default()
    };
    let opts = a.tls.apply(base, target)?;
    if let Some(s) = &opts.sources {
        s.check().map_err(|e| CliError::usage(format!("--bind: {e}")))?;
        if s.first().is_ipv4() != target.addr.is_ipv4() {
            return Err(CliError::usage(format!(
                "--bind {}: the source addresses and the target {} are not of the same IP version",
                s.first(),
                target.addr
            )));
        }
    }
    Ok(opts)
}

/// `--xdp`: the interface, program and socket map, set up once per process (a limit search
/// plans each step: they share it) and said once on stderr.
fn xdp_for(a: &RunArgs, target: &Target) -> CliResult<Option<volley_transport::udp::xdp::Xdp>> {
    use volley_transport::udp::xdp::Xdp;
    static OPEN: std::sync::Mutex<Option<(std::net::SocketAddr, Xdp)>> = std::sync::Mutex::new(None);
    let Some(iface) = &a.xdp else { return Ok(None) };
    if target.scheme != Scheme::Udp {
        return Err(CliError::usage("--xdp: only UDP targets (udp://) go through AF_XDP"));
    }
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((t, x)) = open.as_ref() {
        if *t == target.addr {
            return Ok(Some(x.clone()));
        }
        return Err(CliError::usage("--xdp: one target per run"));
    }
    let local = a.bind.as_ref().map(|s| s.first());
    let workers = worker_threads(a).min(u32::MAX as usize) as u32;
    let x = Xdp::open(target.addr, iface.as_deref(), local, workers).map_err(|e| CliError::usage(e.to_string()))?;
    match x.workers() {
        1 => eprintln!("volley: --xdp: {}, queue 0, {}", x.iface(), x.mode()),
        n => eprintln!("volley: --xdp: {}, queues 0-{} (one per worker), {}", x.iface(), n - 1, x.mode()),
    }
    *open = Some((target.addr, x.clone()));
    Ok(Some(x))
}

/// The error of connection flags on a run without connections.
const CONN_FLAGS_NEED_CONNECTIONS: &str =
    "--conn-queries, --conn-lifetime, --idle-timeout and --conn-rate apply to connections: use tcp://, tls://, https:// or quic://";

/// Checks the values of the connection policy flags.
fn check_policy_flags(a: &RunArgs) -> CliResult {
    if a.conn_queries == Some(0) {
        return Err(CliError::usage("invalid --conn-queries 0: expected at least 1"));
    }
    if a.conn_lifetime.is_some_and(|d| d.is_zero()) || a.idle_timeout.is_some_and(|d| d.is_zero()) {
        return Err(CliError::usage("invalid --conn-lifetime/--idle-timeout: must be above 0"));
    }
    Ok(())
}

/// One `--mix` group: WEIGHT:PROFILE[:QPS]@URL (QPS: each client's rate, else `default_rate`).
fn parse_mix(m: &str, default_rate: f64) -> CliResult<(f64, Option<String>, f64, String)> {
    let bad = || {
        CliError::usage(format!(
            "invalid --mix '{m}': expected WEIGHT:PROFILE[:QPS]@URL such as 60:stub@udp://127.0.0.1:53"
        ))
    };
    let (w, rest) = m.split_once(':').ok_or_else(bad)?;
    let (profile, url) = rest.split_once('@').ok_or_else(bad)?;
    let w: f64 = w.trim_end_matches('%').parse().map_err(|_| bad())?;
    let (profile, rate) = match profile.rsplit_once(':') {
        Some((p, q)) => match q.parse::<f64>() {
            Ok(r) if r > 0.0 && r.is_finite() => (p, r),
            _ => {
                return Err(CliError::usage(format!(
                    "invalid --mix '{m}': the rate '{q}' after the profile must be queries per second above 0"
                )))
            }
        },
        None => (profile, default_rate),
    };
    if !(w > 0.0 && w.is_finite()) || profile.is_empty() {
        return Err(bad());
    }
    Ok((w, Some(profile.to_string()), rate, url.to_string()))
}

/// The connections a closed loop of `concurrency` needs over DoH/1.1, which carries one
/// request at a time per connection, or its pipelining depth; None for other transports.
pub fn h1_connections(concurrency: u64, lane: &LaneOptions, target: &Target) -> Option<usize> {
    let h1 = target.scheme.is_https() && lane.http_for(target.scheme) == HttpVersion::Http1;
    h1.then(|| concurrency.div_ceil(lane.h1_pipeline.max(1) as u64) as usize)
}

/// What a run with `--insecure` says (in its results, and in `volley bench`'s table).
pub const INSECURE: &str =
    "--insecure: the server's certificate was NOT verified; these results may come from any server";

/// The warning a run with `--insecure` carries in its results.
pub fn insecure_warning(plan: &Plan) -> Option<String> {
    (plan.lane.tls.insecure && plan.target.scheme.is_encrypted()).then(|| INSECURE.to_string())
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

/// Checks that something answers at each target before load starts: nothing listening, or
/// a request the target says is wrong (a DoH path or method), is bad input. A target that
/// did not answer, or answered with no DNS message (a DoH status such as 503, another content
/// type: its doing, which the run measures), is measured anyway: the warnings, each printed on
/// stderr now, are returned for the results.
///
/// A target given by a name with several addresses is probed at each in turn until one
/// answers, and measured there (the plan's target moves to it); which one is said.
pub fn check_target(plan: &mut Plan) -> CliResult<Vec<String>> {
    use volley_transport::probe::Probe;
    let q = plan.queries.first_wire();
    let mut silent = Vec::new();
    let mut warnings = Vec::new();
    let mut chosen = Vec::new();
    for (target, lane) in targets(plan) {
        let p = probe_addresses(target, &q, plan.timeout.min(Duration::from_secs(2)), lane).map_err(CliError::usage)?;
        if target.addrs.len() > 1 {
            let all: Vec<String> = target.addrs.iter().map(|a| a.ip().to_string()).collect();
            let passed =
                if p.passed.is_empty() { String::new() } else { format!(" (before it: {})", p.passed.join("; ")) };
            let how = if p.probe == Probe::Silent { "the first reached" } else { "the first that answered" };
            eprintln!(
                "volley: {} has addresses {}: measuring {}, {how}{passed}",
                target.host,
                all.join(", "),
                p.target.addr
            );
        }
        match &p.probe {
            Probe::Answered => {}
            Probe::Silent => silent.push(p.target.to_string()),
            Probe::NotDns(e) => {
                warnings.push(format!("first probe query: {e}; measuring anyway (answers like it count as failures)"))
            }
        }
        chosen.push(p.target);
    }
    set_targets(plan, chosen);
    if !silent.is_empty() {
        warnings.push(format!("{} did not answer a first probe query; measuring anyway", silent.join(", ")));
    }
    for w in &warnings {
        eprintln!("volley: warning: {w}");
    }
    Ok(warnings)
}

/// Puts `chosen` (each target at the address to measure, in the order of [`targets`]) into
/// the plan.
fn set_targets(plan: &mut Plan, chosen: Vec<Target>) {
    match &mut plan.load {
        Load::Clients(c) => {
            for (g, t) in c.groups.iter_mut().zip(chosen) {
                g.target = t;
            }
            if let Some(g) = c.groups.first() {
                plan.target = g.target.clone();
            }
        }
        _ => {
            if let Some(t) = chosen.into_iter().next() {
                plan.target = t;
            }
        }
    }
}

/// Measures `plan` at the addresses a probe chose for `probed` (the same targets, planned
/// again: `volley limit` plans each step anew).
pub fn same_addresses(plan: &mut Plan, probed: &Plan) {
    let chosen: Vec<Target> = targets(probed).into_iter().map(|(t, _)| t.clone()).collect();
    let same = targets(plan).iter().map(|(t, _)| &t.url).eq(chosen.iter().map(|t| &t.url));
    if same {
        set_targets(plan, chosen);
    }
}

/// The targets of a plan, with their lane settings: the run's, or each group's.
fn targets(plan: &Plan) -> Vec<(&Target, &LaneOptions)> {
    match &plan.load {
        Load::Clients(c) => c.groups.iter().map(|g| (&g.target, &g.lane)).collect(),
        _ => vec![(&plan.target, &plan.lane)],
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
pub fn execute(
    plan: &Plan,
    progress: ProgressMode,
    metrics_file: Option<&std::path::Path>,
    interrupt: Arc<AtomicBool>,
    link: Option<&mut super::link::BehindLink>,
) -> CliResult<RunResult> {
    execute_with(plan, progress, metrics_file, interrupt, link, &mut |_| {})
}

/// [`execute`], calling `each` with every completed second too (a coordinated part reports it).
pub fn execute_with(
    plan: &Plan,
    progress: ProgressMode,
    metrics_file: Option<&std::path::Path>,
    interrupt: Arc<AtomicBool>,
    mut link: Option<&mut super::link::BehindLink>,
    each: &mut dyn FnMut(&volley_metrics::Progress),
) -> CliResult<RunResult> {
    let show = match progress {
        ProgressMode::Always => true,
        ProgressMode::Never => false,
        ProgressMode::Auto => std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
    };
    let total = plan.duration.map(|d| d.as_secs_f64());
    let mut shown = false;
    let mut live = volley_report::LiveTotals::new();
    let mut metrics_error = None;
    let result = volley_engine::run(plan, interrupt, |p| {
        each(p);
        if let Some(l) = link.as_deref_mut() {
            l.tick(u64::from(p.row.second));
        }
        if let Some(path) = metrics_file {
            if let Err(e) = live.update_file(p, path) {
                metrics_error.get_or_insert(e.to_string());
            }
        }
        if show {
            let line = volley_report::progress_line(p, p.row.second as f64 + 1.0, total);
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K{line}");
            let _ = e.flush();
            shown = true;
        }
    })
    .map_err(CliError::usage)?;
    if shown {
        eprint!("\r\x1b[2K");
    }
    let mut result = result;
    if let Some(path) = metrics_file {
        // The finished run replaces the live figures: every family, totals exact, its status.
        let mut text = Vec::new();
        let done = volley_report::write_openmetrics(&result, &mut text)
            .map_err(|e| e.to_string())
            .and_then(|_| volley_report::write_metrics_file_atomic(path, &text).map_err(|e| e.to_string()));
        if let Err(e) = done {
            metrics_error.get_or_insert(e);
        }
    }
    if let Some(e) = metrics_error {
        result.warnings.push(format!("live metrics file: {e}"));
    }
    Ok(result)
}

pub fn run(a: RunArgs) -> CliResult {
    let mut plan = plan(&a)?;
    check_output(&a.output)?;
    // Behind a link, every socket of the run (the probe's, the workers') is made in the link's
    // namespace: this thread enters it, and the threads it starts are born there.
    let mut link = match &a.link {
        Some(spec) => Some(super::link::plan_behind_link(spec, a.link_seed, &mut plan)?),
        None => None,
    };
    let probed = check_target(&mut plan).map_err(|e| match &link {
        Some(l) => l.unreachable(e),
        None => e,
    })?;
    // Said once the input is known good (a usage error stays one line), and again in the
    // results: flags that do nothing here, --insecure.
    let mut warnings = a.tls.unused(&targets(&plan).iter().map(|(t, _)| *t).collect::<Vec<_>>());
    warnings.extend(insecure_warning(&plan));
    warnings.extend(udp_sharing(&plan, a.connections));
    for w in &warnings {
        eprintln!("volley: warning: {w}");
    }
    warnings.extend(probed);
    let interrupt = interrupt_flag();
    // A split run: its part (and its start) from the flags, or from its coordinator.
    let coordinated = super::scale::prepare(&a, &mut plan)?;
    let mut report = |p: &volley_metrics::Progress| {
        if let Some(c) = &coordinated {
            c.progress(p);
        }
    };
    let mut result = execute_with(&plan, a.progress, a.metrics_file.as_deref(), interrupt, link.as_mut(), &mut report)?;
    result.command = std::env::args().collect();
    if let Some(c) = &coordinated {
        c.annotate(&mut result);
    }
    if let Some(link) = link {
        let (info, warning) = link.finish()?;
        result.link = Some(info);
        warnings.extend(warning);
    }
    result.warnings.splice(0..0, warnings);
    let output = a.output.as_ref().map(|p| super::scale::output_path(p, plan.part));
    if let Some(path) = &output {
        volley_report::write_json_file_atomic(&result, path).map_err(CliError::failure)?;
    }
    // The part's own file first: a coordinator lost now leaves it whole, to merge later.
    if let Some(c) = coordinated {
        c.hand_in(&result, output.as_deref());
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

/// `--target-pid`: processes that exist, whose CPU-time clocks this process can read.
pub(crate) fn target_pids(pids: &[u32]) -> CliResult<Vec<u32>> {
    for &p in pids {
        if volley_engine::clock::pid_cpu_ns(p).is_none() {
            return Err(CliError::usage(format!("--target-pid {p}: no such process on this host")));
        }
    }
    let mut v = pids.to_vec();
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// `--conn-rate N`: a positive number of connections per second.
/// `--resend`: `any` (bounded only by each query's timeout) or a count.
fn parse_resend(s: &str) -> Result<u32, String> {
    match s {
        "any" => Ok(u32::MAX),
        n => n.parse::<u32>().map_err(|_| format!("'{s}' is not a count of resends: any, or N (0: never)")),
    }
}

fn parse_conn_rate(s: &str) -> Result<ConnGate, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(ConnGate::new(r)),
        _ => Err(format!("invalid connection rate {s:?}: expected a positive number per second")),
    }
}

/// `--batch-window`, or its default: 250 µs; 500 µs with `--xdp`. Over AF_XDP a query costs
/// the generator's core about 3 µs and each wake-up about 40 µs more (its own context switch,
/// the responder's wake-up on a veth pair, the burst's start; docs/performance.md): half the
/// wake-ups take the CPU per answer at 50k-100k qps down by 15-30 %, for bursts twice as
/// long (each query's latency still counts from when it left).
fn batch_window(a: &RunArgs) -> Duration {
    a.batch_window.unwrap_or(if a.xdp.is_some() { XDP_BATCH_WINDOW } else { volley_engine::BATCH_WINDOW })
}

/// The open loop's batch window over AF_XDP (`--xdp`) unless `--batch-window` says otherwise
/// (elsewhere [`volley_engine::BATCH_WINDOW`]).
const XDP_BATCH_WINDOW: Duration = Duration::from_micros(500);

/// `--threads`, or one worker per core.
fn worker_threads(a: &RunArgs) -> usize {
    if a.xdp.is_some() && a.threads.is_none() {
        return 1;
    }
    a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Says before the run, rather than by failed connections during it, when `sockets` sockets
/// are more than `threads` workers may open or more than the source addresses have ports for.
/// Each worker has a descriptor table of its own where the system allows it (see
/// `volley_engine::threads_own_descriptor_tables`): the open-files limit then applies to the
/// share of each, not to the sum.
fn check_sockets(sockets: u64, threads: usize, lane: &LaneOptions, what: &str) -> CliResult {
    let limit = open_files_limit();
    let own = volley_engine::threads_own_descriptor_tables();
    let tables = if own { threads as u64 } else { 1 };
    let each = sockets.div_ceil(tables);
    let whose = if tables > 1 { format!("each of {tables} worker threads") } else { "this process".to_string() };
    if each + RESERVED_FILES > limit {
        let more = if own { ", add worker threads (--threads: each has a descriptor table of its own)" } else { "" };
        return Err(CliError::usage(format!(
            "{what} need about {each} sockets but {whose} may open {limit} files: \
             raise the hard limit (ulimit -Hn, as root){more} or open fewer"
        )));
    }
    if each * 5 > limit * 4 {
        // An estimate (clients that close idle connections): close to the limit, say so.
        eprintln!(
            "volley: warning: {what} may need about {each} sockets, close to the {limit} {whose} \
             may open (and a TCP connection being opened holds two until it is up: opened all at \
             once, fewer fit); connections beyond it fail as local_limit: add --threads, or \
             spread the opening with --conn-rate"
        );
    }
    let ports = volley_engine::local_ports();
    let addresses = lane.sources.as_ref().map_or(1, |s| s.count());
    if sockets > ports * addresses {
        return Err(CliError::usage(format!(
            "{what} need about {sockets} connections but {addresses} source address(es) have {ports} ports each \
             towards one server: spread them over more with --bind (e.g. --bind 127.0.1.0/24)"
        )));
    }
    Ok(())
}

/// The soft limit on open files (already raised at start to what the system allows).
fn open_files_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn run_args(args: &[&str]) -> RunArgs {
        match Cli::try_parse_from(["volley", "run", "udp://10.0.0.2:53"].iter().chain(args)).unwrap().command {
            Command::Run(a) => a,
            _ => panic!("not a run"),
        }
    }

    /// The open loop's batch window: 250 µs, 500 µs over AF_XDP, what `--batch-window` says
    /// on either path (0 too).
    #[test]
    fn the_batch_window_is_longer_over_xdp_unless_given() {
        assert_eq!(batch_window(&run_args(&[])), Duration::from_micros(250));
        assert_eq!(batch_window(&run_args(&["--xdp"])), Duration::from_micros(500));
        assert_eq!(batch_window(&run_args(&["--xdp", "veth0"])), Duration::from_micros(500));
        assert_eq!(batch_window(&run_args(&["--xdp", "veth0", "--batch-window", "250us"])), Duration::from_micros(250));
        assert_eq!(batch_window(&run_args(&["--batch-window", "0"])), Duration::ZERO);
        assert_eq!(batch_window(&run_args(&["--batch-window", "1ms"])), Duration::from_millis(1));
    }
}
