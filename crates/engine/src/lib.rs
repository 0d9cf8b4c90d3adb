//! The load engine: turns a [`Plan`] (target, queries, load model, stop condition) into a
//! [`RunResult`].
//!
//! Threads: one worker per thread, each with its own single-threaded runtime, its own
//! lanes (sockets or connections) and its own recorder — nothing shared on the hot path.
//! The calling thread collects one sample per worker per second and reports progress.
//!
//! Load models: closed loop (a fixed number of queries in flight; each fate starts the next),
//! open loop (queries scheduled at exact times; latency counts from the scheduled time,
//! so a generator that falls behind shows it as latency and send lateness, never as a
//! silently lower rate), and simulated clients (each with its own connections and timing,
//! behaving as a profile says; mixtures of profiles and transports by weight).

pub mod clients;
pub mod clock;
#[doc(hidden)]
pub mod fuzzing;
pub mod limit;
pub mod part;
mod slab;
pub mod source;
mod timer;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use thiserror::Error;
use volley_metrics::{
    Collector, ConnCounters, GeneratorInfo, LatencySummary, LoadInfo, Progress, Qps, RunResult, SendStamps, Status,
    TargetInfo, Totals, SCHEMA,
};
use volley_transport::{LaneOptions, Target};

pub use clients::{Arrivals, ClientsLoad, Group, Profile};
pub use part::{Part, PartError};

pub use source::{QuerySet, SourceError};
pub use worker::threads_own_descriptor_tables;

/// How load is applied.
#[derive(Debug, Clone)]
pub enum Load {
    /// Keep this many queries in flight.
    Closed { concurrency: u64 },
    /// Issue this many queries per second, on schedule.
    Open { rate: f64 },
    /// Simulated clients, each at its own rate on its own connections (`target` and `lane`
    /// of the plan are unused: each group has its own).
    Clients(clients::ClientsLoad),
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: Target,
    pub queries: QuerySet,
    pub load: Load,
    /// Stop issuing after this long...
    pub duration: Option<Duration>,
    /// ...or after this many queries, whichever comes first.
    pub count: Option<u64>,
    pub timeout: Duration,
    pub threads: usize,
    /// Lanes (UDP sockets, TCP connections) in total.
    pub connections: usize,
    pub lane: LaneOptions,
    /// Open loop: queries due within this window of a wake-up leave together (they may leave
    /// up to this early; latency then counts from when they left). Zero: one wake-up per query.
    pub batch_window: Duration,
    /// The target's processes, when it runs on this host: their CPU time over the run is
    /// reported (`target_cpu`).
    pub target_pids: Vec<u32>,
    /// A target inside this process (the embedded responder): its CPU clock, read as the
    /// processes' are (from the run's start to its end, and each second), reported under this
    /// process's id.
    pub target_clock: Option<CpuClock>,
    /// UDP: send a query again when no answer came (`--udp-retry`, `--udp-tries`).
    pub udp_retry: Option<UdpRetry>,
    /// UDP: ask a truncated answer's question again over TCP (`--tc-fallback`), on a
    /// connection of its own per retry, from the UDP socket's address, as stub resolvers do.
    pub tc_fallback: bool,
    /// The share of a run split across processes this one makes (`--part I/N`; [`part`]):
    /// the load's figures (rate, concurrency, clients, connections, count) stay the whole
    /// run's, and the engine takes this part's share of each.
    pub part: Part,
    /// When to start: asked once every worker is ready (sockets made, connections open).
    /// None: a moment after they are.
    pub start: Option<StartAt>,
    /// Keep the first this many queries one by one (order of issue, issue time, latency,
    /// fate: the results' `query_trace`; at most [`volley_metrics::MAX_TRACE`]); 0: none.
    pub trace_queries: u64,
}

/// The CPU time a target inside this process has used so far, ns (its threads' clocks).
#[derive(Clone)]
pub struct CpuClock(pub Arc<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for CpuClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CpuClock(..)")
    }
}

impl CpuClock {
    pub fn new(f: impl Fn() -> u64 + Send + Sync + 'static) -> CpuClock {
        CpuClock(Arc::new(f))
    }
}

/// Says when a run starts, as Unix nanoseconds (`--start-at`, or a coordinator's answer to
/// "ready"); called on the engine's thread once every worker is ready. An error stops the run
/// before it sends (its results are then `interrupted`, with the error as a warning).
#[derive(Clone)]
pub struct StartAt(pub Arc<dyn Fn() -> Result<u64, String> + Send + Sync>);

impl std::fmt::Debug for StartAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StartAt(..)")
    }
}

impl StartAt {
    pub fn new(f: impl Fn() -> Result<u64, String> + Send + Sync + 'static) -> StartAt {
        StartAt(Arc::new(f))
    }

    /// A fixed time, Unix nanoseconds.
    pub fn at(unix_ns: u64) -> StartAt {
        StartAt::new(move || Ok(unix_ns))
    }
}

/// How a stub resolver sends a UDP query again when no answer comes (glibc's `timeout:` and
/// `attempts:` in resolv.conf, dig's `+timeout` and `+tries`): after `after` without an answer
/// the query goes out again, up to `tries` sends in all, all within the query's own timeout.
/// Each send has a DNS ID of its own (see docs/run.md, "Retransmission over UDP").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRetry {
    pub after: Duration,
    pub tries: u32,
}

impl UdpRetry {
    /// The retry of `after` and `tries` for queries that time out after `timeout`: checked
    /// (tries at least 2, `after` above 0 and below `timeout`: a retry that could never be
    /// sent is a contradiction). `after` None: the timeout shared evenly by the tries (glibc
    /// waits `timeout:` after each of its `attempts:`, so its whole wait is their product).
    pub fn new(after: Option<Duration>, tries: u32, timeout: Duration) -> Result<UdpRetry, String> {
        if tries < 2 {
            return Err(format!("{tries} tries: a retry needs at least 2 (1 is no retry)"));
        }
        let after = after.unwrap_or(timeout / tries);
        if after.is_zero() {
            return Err("the retry delay must be above 0".into());
        }
        if after >= timeout {
            return Err(format!(
                "a retry after {after:?} is never sent: queries time out after {timeout:?} (--timeout)"
            ));
        }
        Ok(UdpRetry { after, tries })
    }
}

#[derive(Debug, Error)]
pub enum EngineError {
    #[error("{0}")]
    Plan(String),
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
}

/// The lane settings of a stub's retries over TCP after truncation: a connection of its own
/// for each, closed after its answer.
fn stub_tcp(udp: &LaneOptions) -> LaneOptions {
    LaneOptions {
        conn: volley_transport::ConnPolicy { max_queries: Some(1), ..Default::default() },
        udp_lazy_receive: None,
        ..udp.clone()
    }
}

/// The clock starts this long after the last worker is ready (each looks every millisecond).
const START_LEAD_NS: u64 = 5_000_000;

/// Queries per second on one UDP socket from which a scheduled load reads answers lazily.
const LAZY_RECEIVE_RATE: f64 = 1_000.0;

/// The open loop's batch window unless a run says otherwise ([`Plan::batch_window`]): queries
/// due within 250 µs of a wake-up leave together. With none, every query costs the generator a
/// wake-up of its own (tens of µs on a VM), and a scheduled load of tens of thousands of
/// queries a second keeps its thread busy: a limit search then stops at the generator, not
/// at the target.
pub const BATCH_WINDOW: Duration = Duration::from_micros(250);

/// The share of its threads' time (CPU over wall clock) above which a run warns that the
/// generator may have set the pace.
pub const GENERATOR_BUSY: f64 = 0.9;

/// The warning of a run whose generator threads were busy nearly all the time: it may itself
/// have set the pace (a closed loop then measures volley), and every latency includes its own
/// queueing. Runs under a second are left out: a short run is mostly start-up and handshakes.
fn busy_warning(cpu_s: f64, elapsed_s: f64, threads: usize) -> Option<String> {
    let busy = cpu_s / (elapsed_s.max(1e-3) * threads.max(1) as f64);
    (elapsed_s >= 1.0 && busy >= GENERATOR_BUSY).then(|| {
        format!(
            "the generator's {threads} thread(s) were busy {:.0}% of the run: the generator, not the target, \
             may have set the pace, and latencies include its own queueing (more threads with -T, or less load)",
            busy.min(1.0) * 100.0
        )
    })
}

/// The warning of a run whose queries left late (p99 send lateness over 1 ms), naming what held
/// them back: the `--conn-rate` cap (`cap`, new connections per second) when at least half of
/// the queries that left over 1 ms late had waited for a connection's slot under it; the
/// generator itself when its scheduler handed queries over late (`schedule` p99 over 1 ms);
/// otherwise none: the queries waited for the transport ([`transport_wait_warning`]).
fn lateness_warning(
    send: Option<&LatencySummary>,
    schedule: Option<&LatencySummary>,
    late: worker::Late,
    cap: Option<f64>,
) -> Option<String> {
    let send = send.filter(|l| l.p99_ns > worker::LATE_NS)?;
    let p99 = send.p99_ns as f64 / 1e6;
    match cap {
        Some(rate) if late.behind_cap > 0 && late.behind_cap * 2 >= late.sends => {
            return Some(format!(
                "queries left behind their schedule, held back by the cap on new connections (--conn-rate {rate}): \
                 p99 send lateness {p99:.1} ms (latency includes it); {} of the {} queries that left over 1 ms \
                 late waited for a connection's slot: raise --conn-rate, or let connections carry more queries",
                late.behind_cap, late.sends
            ))
        }
        _ => {}
    }
    let own = schedule.filter(|l| l.p99_ns > worker::LATE_NS)?;
    Some(format!(
        "the generator fell behind its schedule: p99 lateness {:.1} ms handing queries to the transport (latency \
         includes it): give it more threads (-T) or less load",
        own.p99_ns as f64 / 1e6
    ))
}

/// Share of the queries sent that waited longer than this for their transport above which a
/// run warns ([`transport_wait_warning`]).
const WAIT_WARN_SHARE: f64 = 0.01;

/// What a query waited for, in words.
fn wait_words(cause: &str) -> &'static str {
    match volley_metrics::Wait::from_name(cause) {
        Some(volley_metrics::Wait::Setup) => "the first connections being opened",
        Some(volley_metrics::Wait::Connecting) => "a connection being opened",
        Some(volley_metrics::Wait::ConnRate) => "a connection slot under --conn-rate",
        Some(volley_metrics::Wait::Backoff) => "a backoff after failed connections",
        Some(volley_metrics::Wait::StreamCredit) => "stream credit (the server's limit on concurrent streams)",
        Some(volley_metrics::Wait::Http1Slot) => "an HTTP/1.1 connection busy with earlier requests",
        Some(volley_metrics::Wait::Rotation) => "a spent connection's last answers before the next one",
        None => "the transport",
    }
}

/// The warning of a run where at least 1 % of the queries sent waited over 1 ms for their
/// transport before they left, not counting the run's set-up (the first queries of a closed
/// loop wait for the first connections): the latency includes the wait, which is the server's
/// or the protocol's doing, not the generator's.
fn transport_wait_warning(w: &volley_metrics::TransportWait, sent: u64) -> Option<String> {
    let over: u64 = w.wait.histogram.pairs().iter().filter(|(v, _)| *v > worker::LATE_NS).map(|(_, n)| n).sum();
    let setup = w.causes.get(volley_metrics::Wait::Setup.as_str()).map_or(0, |c| c.queries);
    let over = over.saturating_sub(setup);
    if sent == 0 || over == 0 || (over as f64) < WAIT_WARN_SHARE * sent as f64 {
        return None;
    }
    let main = w
        .causes
        .iter()
        .filter(|(k, _)| k.as_str() != volley_metrics::Wait::Setup.as_str())
        .max_by(|a, b| a.1.total_s.total_cmp(&b.1.total_s))
        .map_or("", |(k, _)| k.as_str());
    Some(format!(
        "{over} queries ({:.1}% of those sent) waited over 1 ms for the transport before they left, mostly for {}: \
         p99 wait {:.1} ms; latency includes it (the server's or the protocol's doing, not the generator's)",
        over as f64 * 100.0 / sent as f64,
        wait_words(main),
        w.wait.p99_ns as f64 / 1e6
    ))
}

/// The warning of a closed loop whose queries on the wire never reached its concurrency while
/// queries waited for the transport: the server allowed fewer at once (streams, HTTP/1.1), and
/// the rest queued inside volley (their latency includes it).
fn concurrency_warning(concurrency: u64, peak: u64, w: Option<&volley_metrics::TransportWait>) -> Option<String> {
    let w = w.filter(|w| w.causes.keys().any(|k| k.as_str() != volley_metrics::Wait::Setup.as_str()))?;
    (peak < concurrency).then(|| {
        format!(
            "concurrency {concurrency} asked, but at most {peak} queries were on the wire at once: the rest waited \
             inside volley for {} (latency includes it): the server allowed a concurrency of {peak}",
            wait_words(w.main_cause().unwrap_or(""))
        )
    })
}

/// Whether a group's connections run over TCP (and so leave TIME_WAIT behind when the client
/// closes them).
fn over_tcp(spec: &worker::LaneSpec) -> bool {
    use volley_transport::{HttpVersion, Scheme};
    match spec.target.scheme {
        Scheme::Tcp | Scheme::Tls => true,
        Scheme::Https => spec.lane.http_for(Scheme::Https) != HttpVersion::Http3,
        Scheme::Udp | Scheme::H3 | Scheme::Quic => false,
    }
}

/// How long Linux keeps a socket in TIME_WAIT after its side closed first (TCP_TIMEWAIT_LEN).
const TIME_WAIT_S: usize = 60;

/// The warning of a run that closed, within some 60 s, more connections than half its local
/// ports towards the target (`ports`: ephemeral ports times source addresses): each leaves its
/// port in TIME_WAIT for 60 s. The kernel then searches longer for a free port at each connect
/// (CPU, and connects delayed by up to hundreds of milliseconds in a busy generator), and runs
/// out of them once all are taken.
fn time_wait_warning(conns: &ConnCounters, series: &[volley_metrics::SecondRow], ports: u64) -> Option<String> {
    use volley_metrics::Close;
    let all: u64 = conns.closed.iter().sum();
    let ours: u64 =
        [Close::ClientEnd, Close::ClientLifetime, Close::ClientIdle].iter().map(|&c| conns.closed[c as usize]).sum();
    if all == 0 || ours == 0 {
        return None;
    }
    let closed: Vec<u64> = series.iter().map(|r| r.connections.as_ref().map_or(0, |c| c.closed)).collect();
    let peak =
        (0..closed.len()).map(|i| closed[i.saturating_sub(TIME_WAIT_S - 1)..=i].iter().sum::<u64>()).max().unwrap_or(0);
    // Only the connections this side closed first wait in TIME_WAIT here.
    let peak = (peak as f64 * ours as f64 / all as f64).round() as u64;
    (peak * 2 > ports).then(|| {
        format!(
            "this run closed up to {peak} connections within 60 s, for {ports} local ports towards the target: \
             their ports wait in TIME_WAIT for 60 s, and connects then cost more CPU and can stall while the kernel \
             searches for a free port; spread the sources with --bind (e.g. --bind 127.0.1.0/24)"
        )
    })
}

/// Warnings about what came back that answered no query (`unexpected`), when it is a large part
/// of what came back: answers after their query's timeout (the timeout is shorter than the
/// target takes), messages that are not DNS responses (a port that reflects or speaks another
/// protocol), and IDs of no query in flight (duplicates, or IDs rewritten on the way).
fn unexpected_warnings(c: &volley_metrics::Counters, timeout: Duration) -> Vec<String> {
    use volley_metrics::Unexpected;
    let n = |k: Unexpected| c.unexpected[k as usize];
    let mut out = Vec::new();
    // A query sent again may be answered once per send: an answer after its first is late
    // too, but not for a short timeout. Only those beyond the sends again count here.
    let resends: u64 = c.again.iter().sum();
    let late = n(Unexpected::Late).saturating_sub(resends);
    if late >= 10 && late * 2 >= c.timed_out {
        out.push(format!(
            "{late} answers came after their query had timed out ({} timed out): the timeout ({timeout:?}, -t) \
             is shorter than the target takes to answer them",
            c.timed_out
        ));
    }
    let malformed = n(Unexpected::Malformed);
    if malformed >= 10 && malformed >= c.answered {
        out.push(format!(
            "{malformed} messages came back that are not DNS responses (no header, or the QR bit clear) and \
             {} answers: is a DNS server listening there on this transport?",
            c.answered
        ));
    }
    let unknown = n(Unexpected::UnknownId);
    if unknown >= 10 && unknown * 100 >= c.sent {
        out.push(format!(
            "{unknown} responses carried the ID of no query in flight ({} sent): answers sent twice, or IDs \
             rewritten on the way",
            c.sent
        ));
    }
    out
}

/// A warning when queries never left the generator: they waited for the transport (the
/// server's stream credit, a connection) until their timeout, so the server never saw them.
fn unsent_warning(t: &Totals, timeout: Duration) -> Option<String> {
    (t.unsent > 0).then(|| {
        let why: Vec<String> = t.unsent_reasons.iter().map(|(k, n)| format!("{n} {k}")).collect();
        format!(
            "{} of {} queries never left the generator within their timeout ({timeout:?}, -t): they waited for \
             the transport ({}), so the server never saw them; they are counted unsent, not timed out",
            t.unsent,
            t.issued,
            why.join(", ")
        )
    })
}

/// Ephemeral ports per source address towards one server (net.ipv4.ip_local_port_range).
pub fn local_ports() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u64>().ok());
            Some(it.next()??.abs_diff(it.next()??) + 1)
        })
        .unwrap_or(28_232)
}

/// Splits `total` into `n` near-equal parts.
fn split(total: u64, n: usize, i: usize) -> u64 {
    total / n as u64 + u64::from((i as u64) < total % n as u64)
}

/// Runs the plan to its end (or until `interrupt` is set), calling `progress` once per
/// completed second, on the calling thread.
pub fn run(
    plan: &Plan,
    interrupt: Arc<AtomicBool>,
    mut progress: impl FnMut(&Progress),
) -> Result<RunResult, EngineError> {
    let replay = matches!(&plan.load, Load::Clients(c) if c.replay.is_some());
    let stop_by = plan.duration.is_some() || plan.count.is_some() || replay;
    if !stop_by {
        return Err(EngineError::Plan("a run needs a duration or a count".into()));
    }
    let part = plan.part;
    // This part's share of the load (the whole of it for a run not split).
    let load = match &plan.load {
        Load::Closed { concurrency } => Load::Closed {
            concurrency: part.share_of("concurrency", *concurrency).map_err(|e| EngineError::Plan(e.to_string()))?,
        },
        l => l.clone(),
    };
    let count = match plan.count {
        Some(n) => Some(part.share_of("count", n).map_err(|e| EngineError::Plan(e.to_string()))?),
        None => None,
    };
    if let Load::Clients(c) = &load {
        part.share_of("clients", c.count).map_err(|e| EngineError::Plan(e.to_string()))?;
    }
    let plan = &Plan { load, count, connections: part.share(plan.connections as u64).max(1) as usize, ..plan.clone() };
    let mut threads = plan.threads.max(1);
    match &plan.load {
        Load::Clients(c) => {
            if c.count == 0 || c.groups.is_empty() {
                return Err(EngineError::Plan("a clients run needs at least one client and one group".into()));
            }
            if c.replay.is_none() && !c.groups.iter().all(|g| g.rate > 0.0 && g.rate.is_finite()) {
                return Err(EngineError::Plan(
                    "the client rate must be a positive number of queries per second".into(),
                ));
            }
            threads = threads.min(part.share(c.count) as usize);
        }
        &Load::Closed { concurrency } => {
            if concurrency == 0 {
                return Err(EngineError::Plan("concurrency must be at least 1".into()));
            }
            threads = threads.min(concurrency as usize);
        }
        &Load::Open { rate } => {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(EngineError::Plan("rate must be a positive number of queries per second".into()));
            }
        }
    }
    if let Some(n) = plan.count {
        threads = threads.min(n.max(1) as usize);
    }
    let connections = plan.connections.max(threads);
    if let Load::Closed { concurrency } = &plan.load {
        let concurrency = *concurrency;
        let room = connections as u64 * plan.lane.max_in_flight as u64;
        if concurrency > room {
            return Err(EngineError::Plan(format!(
                "concurrency {concurrency} exceeds {room} (= {connections} connections x {} queries each): add --connections",
                plan.lane.max_in_flight
            )));
        }
    }

    let (tx, rx) = mpsc::channel();
    // The run's clock starts once every worker has made its sockets and opened the
    // connections the run asks for at its start (set-up, reported apart as `setup_s`), so
    // that no query is late, and no latency longer, for volley's own preparations. Simulated
    // clients also need their schedules built (a heap of every client's next send) by then.
    let setup_began = clock::now_ns();
    let lead_ns = match &plan.load {
        Load::Clients(c) => START_LEAD_NS + (c.count / threads as u64).saturating_mul(300).min(3_000_000_000),
        _ => START_LEAD_NS,
    };
    let gate = Arc::new(worker::StartGate::default());
    let groups: Vec<worker::GroupRt> = match &plan.load {
        Load::Clients(c) => c
            .groups
            .iter()
            .map(|g| worker::GroupRt {
                spec: worker::LaneSpec { target: g.target.clone(), lane: g.lane.clone() },
                fallback: g.fallback.as_ref().map(|t| worker::LaneSpec { target: t.clone(), lane: stub_tcp(&g.lane) }),
                connections: g.profile.connections,
                connect_at_start: g.profile.connect_at_start,
                rate: g.rate,
                busy: g.busy.map(|b| (b, g.profile.light_rate)),
                retry: g.udp_retry.filter(|_| g.target.scheme == volley_transport::Scheme::Udp),
            })
            .collect(),
        _ => {
            let udp = plan.target.scheme == volley_transport::Scheme::Udp;
            let fallback = match (udp && plan.tc_fallback, plan.target.addr) {
                (true, addr) => Some(worker::LaneSpec {
                    target: format!("tcp://{addr}").parse::<Target>().map_err(|e| EngineError::Plan(e.to_string()))?,
                    lane: stub_tcp(&plan.lane),
                }),
                _ => None,
            };
            vec![worker::GroupRt {
                spec: worker::LaneSpec { target: plan.target.clone(), lane: plan.lane.clone() },
                fallback,
                connections: 1,
                connect_at_start: true,
                rate: 0.0,
                busy: None,
                retry: plan.udp_retry.filter(|_| udp),
            }]
        }
    };
    // Clients are dealt to groups by weight, then to parts (each whole to one: in turn, or by
    // the captured clients' loads in a replay), then to this part's workers in turn:
    // `client_ids` are their indices in the whole run.
    let (assignment, client_ids): (Vec<u16>, Vec<u64>) = match &plan.load {
        Load::Clients(c) => {
            let all = c.assignments();
            let mine: Vec<u64> = match &c.replay {
                Some(r) if !part.is_whole() => {
                    let loads: Vec<u32> = (0..c.count)
                        .map(|k| r.clients.get(r.source_of(k, c.count).0 as usize).map_or(0, |q| q.len() as u32))
                        .collect();
                    part.clients_by_load(&loads)
                }
                _ => part.clients(c.count).collect(),
            };
            mine.into_iter().map(|k| (all[k as usize], k)).unzip()
        }
        _ => (Vec::new(), Vec::new()),
    };
    if matches!(plan.load, Load::Clients(_)) {
        // Dealt by load, a part may hold fewer clients than its even share: a worker each at most.
        threads = threads.min(client_ids.len().max(1));
    }
    let udp_of: Vec<bool> = groups.iter().map(|g| g.spec.target.scheme == volley_transport::Scheme::Udp).collect();
    let udp_group = |g: u16| udp_of[g as usize];
    let udp_clients = assignment.iter().filter(|&&g| udp_group(g)).count();
    // Simulated UDP clients: a socket each, or, with fewer sockets than that
    // (`plan.connections`), as evenly shared as the workers' shares allow.
    let udp_sockets = udp_clients.min(plan.connections.max(1));
    // Scheduled loads whose UDP sockets each carry many queries (1,000 a second or more) read
    // answers when a lane wakes to send (or every millisecond while answers are due) rather
    // than waking for each; kernel receive stamps keep their latency exact. Sockets with fewer
    // queries wake for their answers (each wake-up then reads one anyway), and so does the
    // closed loop, which answers each answer with its next query.
    let per_socket_rate = match &plan.load {
        Load::Closed { .. } => 0.0,
        Load::Open { rate } => rate / part.count as f64 / connections as f64,
        Load::Clients(c) => c.total_rate().unwrap_or(0.0) / part.count as f64 / udp_sockets.max(1) as f64,
    };
    let mut groups = groups;
    if per_socket_rate >= LAZY_RECEIVE_RATE {
        for g in &mut groups {
            g.spec.lane.udp_lazy_receive = Some(Duration::from_millis(1));
        }
    }
    let common = worker::Common {
        groups: groups.clone(),
        queries: plan.queries.clone(),
        timeout: plan.timeout,
        gate: gate.clone(),
        duration_ns: plan.duration.map(|d| d.as_nanos() as u64),
        interrupt: interrupt.clone(),
        out: tx,
        trace_queries: plan.trace_queries,
    };
    let mut handles = Vec::with_capacity(threads);
    let mut sockets_made = 0;
    for i in 0..threads {
        let share = worker::Share {
            index: i,
            concurrency: match &plan.load {
                Load::Closed { concurrency } => Some(split(*concurrency, threads, i)),
                _ => None,
            },
            stripe: part.stripe(i, threads),
            schedule: match &plan.load {
                Load::Open { rate } => Some(1e9 / rate),
                _ => None,
            },
            batch_window_ns: plan.batch_window.as_nanos() as u64,
            quota: plan.count.map_or(u64::MAX, |n| split(n, threads, i)),
            lanes: match &plan.load {
                Load::Clients(_) => {
                    // This worker's UDP clients, and its part of the sockets they share.
                    let mine = assignment.iter().skip(i).step_by(threads).filter(|&&g| udp_group(g)).count();
                    mine.min(split(udp_sockets as u64, threads, i) as usize).max(usize::from(mine > 0))
                }
                _ => split(connections as u64, threads, i) as usize,
            },
            clients: assignment.iter().skip(i).step_by(threads).copied().collect(),
            client_ids: client_ids.iter().skip(i).step_by(threads).copied().collect(),
            client_count: match &plan.load {
                Load::Clients(c) => c.count,
                _ => 0,
            },
            arrivals: match &plan.load {
                Load::Clients(c) => c.arrivals,
                _ => Arrivals::Constant,
            },
            replay: match &plan.load {
                Load::Clients(ClientsLoad { replay: Some(r), count, .. }) => Some((
                    r.clone(),
                    client_ids.iter().skip(i).step_by(threads).map(|&k| r.source_of(k, *count)).collect(),
                )),
                _ => None,
            },
        };
        sockets_made += share.lanes;
        let c = common.clone();
        let h = std::thread::Builder::new()
            .name(format!("volley-worker-{i}"))
            .spawn(move || worker::run_worker(share, c))
            .map_err(EngineError::Thread)?;
        handles.push(h);
    }
    drop(common);

    // Set-up: wait until every worker is ready (one that ended already counts: it failed to
    // start), then start the clock a moment later, for every worker at once.
    loop {
        let ended = handles.iter().filter(|h| h.is_finished()).count();
        if gate.ready() + ended >= threads || interrupt.load(Ordering::Relaxed) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut start_warning = None;
    let (start_ns, planned_unix_ns) = match &plan.start {
        None => (clock::now_ns() + lead_ns, clock::unix_ns() + lead_ns),
        Some(StartAt(ask)) => match ask() {
            Ok(unix) => {
                // The monotonic clock's reading at that Unix time.
                let (mono, now) = (clock::now_ns(), clock::unix_ns());
                if unix >= now + START_LEAD_NS {
                    (mono + (unix - now), unix)
                } else {
                    start_warning = Some(format!(
                        "the start time had passed {:.3} ms before every worker was ready: this part started late",
                        (now as f64 - unix as f64) / 1e6
                    ));
                    (mono + START_LEAD_NS, now + START_LEAD_NS)
                }
            }
            Err(e) => {
                start_warning = Some(format!("no start: {e}"));
                interrupt.store(true, Ordering::Relaxed);
                (clock::now_ns(), clock::unix_ns())
            }
        },
    };
    let started_unix_ms = planned_unix_ns / 1_000_000;
    gate.open(start_ns);
    let setup_s = (start_ns - setup_began) as f64 / 1e9;

    let mut target = TargetClock::start(&plan.target_pids, plan.target_clock.clone());
    // The machine's steal time from the run's start (the lead before it is a few ms).
    let steal = volley_metrics::StealClock::now();
    let mut collector = Collector::new(threads);
    while !collector.done() {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(m) => {
                for mut p in collector.absorb(m) {
                    p.row.target_cpu_s = target.read_second(p.row.second);
                    progress(&p);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let mut events: BTreeMap<String, u64> = BTreeMap::new();
    let mut late = worker::Late::default();
    let mut woke_late_ns = 0u64;
    for h in handles {
        if let Ok(end) = h.join() {
            woke_late_ns = woke_late_ns.max(end.woke_late_ns);
            for (k, v) in end.events {
                *events.entry(k).or_insert(0) += v;
            }
            late.sends += end.late.sends;
            late.behind_cap += end.late.behind_cap;
        }
    }
    let elapsed_ns = clock::now_ns() - start_ns;
    let host = steal.and_then(|s| s.since());
    target.read();
    let got = collector.finish();
    let interrupted = interrupt.load(Ordering::Relaxed);

    // The sending phase: the planned duration, or until the last query was issued.
    let sending_s = match (plan.duration, interrupted) {
        (Some(d), false) if !replay => d.as_secs_f64(),
        _ => {
            let last = got.series.iter().rposition(|r| r.issued > 0).map_or(0, |i| i + 1);
            // Whole seconds with sends, trimmed to the elapsed time.
            (last as f64).min(elapsed_ns as f64 / 1e9).max(1e-3)
        }
    };
    let totals = Totals::from_counters(&got.totals, got.in_flight);
    let cpu_s = got.cpu_ns as f64 / 1e9;
    let mut warnings = Vec::new();
    // Every load model but the closed loop sends on a schedule: its timing fidelity is reported.
    let scheduled = !matches!(plan.load, Load::Closed { .. });
    let model = match &plan.load {
        Load::Closed { .. } => "closed",
        Load::Open { .. } => "open",
        Load::Clients(c) if c.replay.is_some() => "replay",
        Load::Clients(_) => "clients",
    };
    let lateness = scheduled.then(|| LatencySummary::of(&got.lateness));
    let schedule_lateness = scheduled.then(|| LatencySummary::of(&got.schedule_lateness));
    let transport_wait = volley_metrics::TransportWait::of(&got.waits);
    let cap = groups.iter().find_map(|g| g.spec.lane.conn_gate.as_ref()).map(|g| g.per_second());
    warnings.extend(lateness_warning(lateness.as_ref(), schedule_lateness.as_ref(), late, cap));
    if let Some(w) = &transport_wait {
        // The cap's own warning says it already.
        if !warnings.iter().any(|w| w.contains("--conn-rate")) {
            warnings.extend(transport_wait_warning(w, totals.sent));
        }
    }
    if let Load::Closed { concurrency } = &plan.load {
        warnings.extend(concurrency_warning(*concurrency, got.peak_on_wire, transport_wait.as_ref()));
    }
    // The threads' CPU clocks ran through the set-up too.
    warnings.extend(busy_warning(cpu_s, elapsed_ns as f64 / 1e9 + setup_s, threads));
    if groups.iter().all(|g| over_tcp(&g.spec)) {
        let addresses = groups.iter().map(|g| g.spec.lane.sources.as_ref().map_or(1, |s| s.count())).min().unwrap_or(1);
        warnings.extend(time_wait_warning(&got.totals.conns, &got.series, local_ports() * addresses));
    }
    warnings.extend(unexpected_warnings(&got.totals, plan.timeout));
    warnings.extend(unsent_warning(&totals, plan.timeout));
    if let Some(n) = events.get("udp_icmp_refused") {
        warnings.push(format!("{n} ICMP port-unreachable errors: the target stopped listening during the run"));
    }
    if let Some(n) = events.get(worker::END_UNREPORTED_EVENT) {
        warnings.push(format!(
            "{n} connections had not reported their end when the run stopped waiting for them: they count as \
             closed (client_end), but their bytes and packets are missing from the wire counts"
        ));
    }
    let mut got = got;
    for (second, cpu_s) in &target.seconds {
        if let Some(row) = got.series.iter_mut().find(|r| r.second == *second) {
            row.target_cpu_s = Some(*cpu_s);
        }
    }
    let target_cpu = target.finish(totals.answered, &mut warnings);
    warnings.extend(host.as_ref().and_then(volley_metrics::host::steal_warning));
    warnings.extend(start_warning);
    if !totals.balanced() {
        warnings.push("accounting does not balance: this is a bug in volley, please report it".into());
    }
    Ok(RunResult {
        schema: SCHEMA.to_string(),
        volley_version: env!("CARGO_PKG_VERSION").to_string(),
        status: if interrupted { Status::Interrupted } else { Status::Complete },
        command: Vec::new(),
        started_at: clock::rfc3339(started_unix_ms),
        started_unix_ms,
        duration_s: sending_s,
        elapsed_s: elapsed_ns as f64 / 1e9,
        setup_s: Some(setup_s),
        target: TargetInfo {
            url: plan.target.url.clone(),
            transport: plan.target.scheme.as_str().to_string(),
            address: plan.target.addr.to_string(),
        },
        load: LoadInfo {
            model: model.to_string(),
            concurrency: match &plan.load {
                Load::Closed { concurrency } => Some(*concurrency),
                _ => None,
            },
            // This part's share (a run split N ways: the parts' figures add up to the run's).
            rate: match &plan.load {
                Load::Open { rate } => Some(*rate / f64::from(part.count)),
                Load::Clients(c) if c.replay.is_none() => {
                    Some(assignment.iter().map(|&g| c.groups[g as usize].rate).sum::<f64>())
                }
                _ => None,
            },
            clients: match &plan.load {
                Load::Clients(_) => Some(assignment.len() as u64),
                _ => None,
            },
            client_rate: match &plan.load {
                Load::Clients(c) => c.client_rate(),
                _ => None,
            },
            duration_s: plan.duration.map(|d| d.as_secs_f64()),
            count: plan.count,
            timeout_ms: plan.timeout.as_millis() as u64,
            threads,
            // Simulated clients: the UDP sockets their UDP clients have (a plain run: its lanes).
            connections: if udp_clients > 0 { sockets_made } else { connections },
            queries: plan.queries.description.clone(),
            udp_retry_ms: groups.iter().find_map(|g| g.retry).map(|r| r.after.as_secs_f64() * 1e3),
            udp_tries: groups.iter().find_map(|g| g.retry).map(|r| r.tries),
            tc_fallback: groups.iter().any(|g| g.fallback.is_some()),
        },
        qps: Qps {
            issued: totals.issued as f64 / sending_s,
            sent: totals.sent as f64 / sending_s,
            answered: totals.answered as f64 / sending_s,
        },
        latency: LatencySummary::of(&got.latency),
        service_time: Some(LatencySummary::of(&got.send.service_time)),
        generator_delay: Some(LatencySummary::of(&got.send.generator_delay)),
        send_stamps: Some(SendStamps {
            kernel: got.send.kernel,
            between: got.send.between,
            fallback: got.send.fallback,
        }),
        send_lateness: lateness,
        schedule_lateness,
        transport_wait,
        peak_on_wire: (got.peak_on_wire > 0).then_some(got.peak_on_wire),
        qlog_dir: match &plan.load {
            Load::Clients(c) => c.groups.iter().find_map(|g| g.lane.qlog.as_ref()),
            _ => plan.lane.qlog.as_ref(),
        }
        .map(|d| d.display().to_string()),
        generator: GeneratorInfo {
            cpu_s,
            cpu_us_per_answer: if totals.answered > 0 { cpu_s * 1e6 / totals.answered as f64 } else { 0.0 },
            threads,
        },
        target_cpu,
        host,
        link: None,
        connections: groups
            .iter()
            .any(|g| g.spec.target.scheme != volley_transport::Scheme::Udp || g.fallback.is_some())
            .then(|| {
                let mut c = volley_metrics::ConnectionSummary::of(&got.totals.conns, &got.conns);
                c.draining = volley_metrics::DrainSummary::of(&got.totals.conns, Some(got.draining_peak));
                c
            }),
        groups: group_summaries(&plan.load, &assignment, &got.groups),
        totals,
        series: got.series,
        events,
        warnings,
        part: (!part.is_whole() || plan.start.is_some()).then_some(volley_metrics::PartInfo {
            index: part.index,
            count: part.count,
            start: Some(volley_metrics::PartStart {
                planned_unix_ns,
                late_ns: woke_late_ns,
                clock_offset_ns: None,
                rtt_ns: None,
            }),
        }),
        scale: None,
        query_trace: got.trace.take(),
    })
}

/// The CPU-time clocks of the target's processes, read at the start, every second and at the
/// end of a run (the last reading of a process that ended counts).
struct TargetClock {
    /// (pid, first reading, last reading)
    procs: Vec<(u32, u64, u64)>,
    /// A target inside this process: (its clock, first reading, last reading).
    own: Option<(CpuClock, u64, u64)>,
    gone: Vec<u32>,
    /// CPU seconds used by all of them in each completed second, as the seconds came in.
    seconds: Vec<(u32, f64)>,
    /// Their total at the last per-second reading, ns.
    at_second: u64,
}

impl TargetClock {
    fn start(pids: &[u32], own: Option<CpuClock>) -> TargetClock {
        let mut gone = Vec::new();
        let procs = pids
            .iter()
            .filter_map(|&p| match clock::pid_cpu_ns(p) {
                Some(t) => Some((p, t, t)),
                None => {
                    gone.push(p);
                    None
                }
            })
            .collect();
        let own = own.map(|c| {
            let t = (c.0)();
            (c, t, t)
        });
        TargetClock { procs, own, gone, seconds: Vec::new(), at_second: 0 }
    }

    /// CPU time used since the start, ns.
    fn used(&self) -> u64 {
        let own = self.own.as_ref().map_or(0, |(_, a, b)| b.saturating_sub(*a));
        self.procs.iter().map(|(_, a, b)| b.saturating_sub(*a)).sum::<u64>() + own
    }

    /// Reads the clocks when `second` has come in, and records (and returns) what was used
    /// since the last such reading.
    fn read_second(&mut self, second: u32) -> Option<f64> {
        if self.procs.is_empty() && self.own.is_none() {
            return None;
        }
        self.read();
        let used = self.used();
        let cpu_s = used.saturating_sub(self.at_second) as f64 / 1e9;
        self.seconds.push((second, cpu_s));
        self.at_second = used;
        Some(cpu_s)
    }

    fn read(&mut self) {
        for (pid, _, last) in &mut self.procs {
            match clock::pid_cpu_ns(*pid) {
                Some(t) => *last = t,
                None if !self.gone.contains(pid) => self.gone.push(*pid),
                None => {}
            }
        }
        if let Some((c, _, last)) = &mut self.own {
            *last = (c.0)();
        }
    }

    fn finish(self, answered: u64, warnings: &mut Vec<String>) -> Option<volley_metrics::TargetCpu> {
        if self.procs.is_empty() && self.gone.is_empty() && self.own.is_none() {
            return None;
        }
        for pid in &self.gone {
            warnings
                .push(format!("target process {pid} ended during the run: its CPU time counts up to its last reading"));
        }
        let cpu_s = self.used() as f64 / 1e9;
        let mut pids: Vec<u32> = self.procs.iter().map(|p| p.0).collect();
        if self.own.is_some() {
            pids.push(std::process::id());
        }
        Some(volley_metrics::TargetCpu::new(pids, cpu_s, answered))
    }
}

/// Per-group results of a mixture of simulated clients.
fn group_summaries(
    load: &Load,
    assignment: &[u16],
    accs: &[volley_metrics::GroupAcc],
) -> Vec<volley_metrics::GroupSummary> {
    let Load::Clients(c) = load else { return Vec::new() };
    if accs.len() < 2 {
        return Vec::new();
    }
    let names = c.group_names();
    let replay = c.replay.is_some();
    c.groups
        .iter()
        .zip(accs)
        .zip(names)
        .enumerate()
        .map(|(i, ((g, acc), name))| volley_metrics::GroupSummary {
            name,
            profile: g.profile.name.clone(),
            client_rate: (!replay).then_some(g.rate),
            target: TargetInfo {
                url: g.target.url.clone(),
                transport: g.target.scheme.as_str().to_string(),
                address: g.target.addr.to_string(),
            },
            clients: assignment.iter().filter(|a| **a as usize == i).count() as u64,
            totals: Totals::from_counters(&acc.counters, acc.in_flight),
            latency: LatencySummary::of(&acc.latency),
            connections: (g.target.scheme != volley_transport::Scheme::Udp || g.fallback.is_some())
                .then(|| volley_metrics::ConnectionSummary::of(&acc.counters.conns, &acc.conns)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{
        busy_warning, concurrency_warning, lateness_warning, time_wait_warning, transport_wait_warning,
        unexpected_warnings, UdpRetry,
    };
    use crate::worker::Late;

    /// A retry shares the timeout when no delay is given (glibc's attempts each wait as
    /// long); one that could never be sent, or no retry at all, is refused.
    #[test]
    fn a_udp_retry_fits_in_the_timeout() {
        let s = std::time::Duration::from_secs;
        assert_eq!(UdpRetry::new(None, 2, s(5)), Ok(UdpRetry { after: s(5) / 2, tries: 2 }));
        assert_eq!(UdpRetry::new(Some(s(1)), 3, s(5)), Ok(UdpRetry { after: s(1), tries: 3 }));
        assert!(UdpRetry::new(Some(s(5)), 2, s(5)).unwrap_err().contains("never sent"));
        assert!(UdpRetry::new(Some(s(1)), 1, s(5)).unwrap_err().contains("at least 2"));
        assert!(UdpRetry::new(Some(s(0)), 2, s(5)).unwrap_err().contains("above 0"));
        assert!(UdpRetry::new(None, 2, std::time::Duration::from_nanos(1)).unwrap_err().contains("above 0"));
    }
    use std::time::Duration;
    use volley_metrics::LatencySummary;
    use volley_metrics::{Close, ConnCounters, Counters, SecondConnections, SecondRow, Unexpected};

    fn closing(per_second: &[u64]) -> Vec<SecondRow> {
        let row = |i: usize, c: u64| SecondRow {
            second: i as u32,
            connections: Some(SecondConnections { closed: c, ..Default::default() }),
            ..Default::default()
        };
        per_second.iter().enumerate().map(|(i, &c)| row(i, c)).collect()
    }

    #[test]
    fn time_wait_is_warned_about_when_own_closes_outgrow_half_the_ports() {
        let mut conns = ConnCounters::default();
        conns.closed[Close::ClientLifetime as usize] = 30_000;
        // 10,000 a second for 3 s against 28,232 ports: warned, with the peak.
        let w = time_wait_warning(&conns, &closing(&[10_000, 10_000, 10_000]), 28_232).expect("a warning");
        assert!(
            w.contains("up to 30000 connections within 60 s, for 28232 local ports") && w.contains("--bind"),
            "{w}"
        );
        // With 256 source addresses the same run is far from it.
        assert_eq!(time_wait_warning(&conns, &closing(&[10_000, 10_000, 10_000]), 28_232 * 256), None);
        // 1,000 a second never has more than 60,000 in a 60 s window: over half of 100,000 ports
        // only once 51 s have passed.
        assert_eq!(time_wait_warning(&conns, &closing(&[1_000; 50]), 100_000), None);
        assert!(time_wait_warning(&conns, &closing(&[1_000; 70]), 100_000).unwrap().contains("up to 60000"));
        // Connections the server closed leave TIME_WAIT on its side, not here.
        let mut by_server = ConnCounters::default();
        by_server.closed[Close::ServerFin as usize] = 30_000;
        assert_eq!(time_wait_warning(&by_server, &closing(&[10_000, 10_000, 10_000]), 28_232), None);
        // Half the closes ours: half the peak counted.
        by_server.closed[Close::ClientIdle as usize] = 30_000;
        assert!(time_wait_warning(&by_server, &closing(&[20_000, 20_000, 20_000]), 28_232)
            .unwrap()
            .contains("up to 30000 connections"));
    }

    #[test]
    fn late_queries_are_blamed_on_what_held_them_back() {
        let late = |sends, behind_cap| Late { sends, behind_cap };
        let p99 = |ns| LatencySummary { p99_ns: ns, count: 1, ..Default::default() };
        // The scheduler itself was late: the generator.
        let w = lateness_warning(Some(&p99(40_400_000)), Some(&p99(40_000_000)), late(500, 0), None).unwrap();
        assert!(w.starts_with("the generator fell behind its schedule: p99 lateness 40.0 ms"), "{w}");
        assert!(w.contains("-T") && !w.contains("--conn-rate"), "{w}");
        // Most late queries waited for a connection's slot: the cap, not the threads.
        let w = lateness_warning(Some(&p99(980_000_000)), Some(&p99(10_000)), late(300, 290), Some(50.0)).unwrap();
        assert!(w.contains("held back by the cap on new connections (--conn-rate 50)"), "{w}");
        assert!(w.contains("p99 send lateness 980.0 ms") && w.contains("290 of the 300 queries"), "{w}");
        assert!(!w.contains("-T") && !w.contains("generator"), "{w}");
        // A cap that held back few of the late queries, and a late scheduler: the generator.
        let w = lateness_warning(Some(&p99(40_000_000)), Some(&p99(30_000_000)), late(300, 20), Some(500.0)).unwrap();
        assert!(w.starts_with("the generator fell behind") && w.contains("-T"), "{w}");
        // Late sends, a punctual scheduler: the queries waited for the transport, not the generator.
        assert_eq!(lateness_warning(Some(&p99(900_000_000)), Some(&p99(20_000)), late(300, 0), None), None);
        // Nothing late.
        assert_eq!(lateness_warning(Some(&p99(500_000)), Some(&p99(20_000)), late(0, 0), None), None);
    }

    #[test]
    fn transport_waits_are_warned_about_with_their_cause() {
        let mut waits = volley_metrics::TransportWaits::default();
        for _ in 0..30 {
            waits.record(volley_metrics::Wait::StreamCredit, 300_000_000);
        }
        waits.record(volley_metrics::Wait::Connecting, 2_000_000);
        let w = volley_metrics::TransportWait::of(&waits).unwrap();
        assert_eq!(w.main_cause(), Some("stream_credit"));
        let text = transport_wait_warning(&w, 1000).expect("3.1 % waited over 1 ms");
        assert!(text.starts_with("31 queries (3.1% of those sent) waited over 1 ms"), "{text}");
        assert!(text.contains("stream credit") && !text.contains("-T"), "{text}");
        assert_eq!(transport_wait_warning(&w, 10_000), None, "0.31 %: no warning");
        // The first queries of a closed loop waiting for the first connections: no warning.
        let mut setup = volley_metrics::TransportWaits::default();
        for _ in 0..10 {
            setup.record(volley_metrics::Wait::Setup, 11_000_000);
        }
        assert_eq!(transport_wait_warning(&volley_metrics::TransportWait::of(&setup).unwrap(), 500), None);
        let c = concurrency_warning(20, 1, Some(&w)).unwrap();
        assert!(c.contains("at most 1 queries were on the wire") && c.contains("concurrency of 1"), "{c}");
        assert_eq!(concurrency_warning(20, 20, Some(&w)), None);
        assert_eq!(concurrency_warning(20, 1, None), None);
    }

    #[test]
    fn busy_generator_is_warned_about() {
        // One thread busy 1.96 s of 2 s: warned, with the share.
        let w = busy_warning(1.96, 2.0, 1).expect("a warning");
        assert!(w.contains("1 thread(s) were busy 98%") && w.contains("-T"), "{w}");
        // Two threads, 1.9 CPU-s over 2 s: 48 %, no warning.
        assert_eq!(busy_warning(1.9, 2.0, 2), None);
        // Just under the threshold.
        assert_eq!(busy_warning(0.89, 1.0, 1), None);
        // Short runs are left out however busy.
        assert_eq!(busy_warning(0.5, 0.5, 1), None);
        // CPU read a little above the wall clock (clock granularity) says 100 %, not more.
        assert!(busy_warning(2.1, 2.0, 1).unwrap().contains("busy 100%"));
    }

    #[test]
    fn unexpected_messages_are_warned_about_when_they_are_many() {
        let run = |sent, answered, timed_out, late, malformed, unknown| {
            let mut c = Counters { sent, answered, timed_out, ..Default::default() };
            c.unexpected[Unexpected::Late as usize] = late;
            c.unexpected[Unexpected::Malformed as usize] = malformed;
            c.unexpected[Unexpected::UnknownId as usize] = unknown;
            unexpected_warnings(&c, Duration::from_millis(500))
        };
        // A clean run, and a few strays: nothing.
        assert!(run(1000, 1000, 0, 0, 0, 0).is_empty());
        assert!(run(1000, 990, 10, 3, 2, 5).is_empty());
        // Most timeouts were answered late: the timeout is too short.
        let w = run(1000, 900, 100, 80, 0, 0);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("80 answers came after") && w[0].contains("500ms"), "{w:?}");
        // A reflecting port: nothing answered, every message malformed.
        let w = run(100, 0, 100, 0, 100, 0);
        assert!(w.len() == 1 && w[0].contains("100 messages came back that are not DNS responses"), "{w:?}");
        // Duplicates: 1 % of the queries or more.
        let w = run(1000, 1000, 0, 0, 0, 10);
        assert!(w.len() == 1 && w[0].contains("10 responses carried the ID of no query in flight"), "{w:?}");
        assert!(run(10_000, 10_000, 0, 0, 0, 99).is_empty());
        // Queries sent again (--udp-retry) answered once per send: the second answers are late
        // but say nothing of the timeout; only those beyond the sends again count.
        let mut c = Counters { sent: 1000, answered: 1000, ..Default::default() };
        c.unexpected[Unexpected::Late as usize] = 150;
        c.again[0] = 150;
        assert!(unexpected_warnings(&c, Duration::from_millis(500)).is_empty());
        c.unexpected[Unexpected::Late as usize] = 170;
        assert!(unexpected_warnings(&c, Duration::from_millis(500))[0].contains("20 answers came after"));
    }
}
