//! The one runner: expands each block of runs into its matrix, measures each point with the
//! engine (a run, or a limit search of runs) against the embedded responder set up as the
//! point needs (or a target the user names), and collects the figures.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use volley_engine::{CpuClock, Load, Plan, QuerySet, UdpRetry};
use volley_metrics::RunResult;
use volley_responder::{CertSource, KeyType, Responder, ResponderConfig, TlsConfig, Transport};
use volley_transport::{ConnPolicy, HttpVersion, LaneOptions, Scheme, Sources, Target, TlsSettings};
use volley_wire::{QType, QueryOptions};

use crate::check::Measured;
use crate::spec::{Measure, Runs, Server, Spec};
use crate::ExperimentError;

/// How to run an experiment.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--quick`: the runs' `quick` settings.
    pub quick: bool,
    /// Targets named by the user, per transport (`--target dot=tls://...`): these rows measure
    /// them instead of the embedded responder.
    pub targets: BTreeMap<String, String>,
    /// Their CA (PEM file), or no verification.
    pub ca: Option<PathBuf>,
    pub insecure: bool,
    /// Their processes on this host, for the target's CPU per query.
    pub target_pids: Vec<u32>,
    /// Seed of the links' random choices (default: fixed, so runs repeat).
    pub link_seed: Option<u64>,
    /// Measure only `targets` (a server volley started, `--server`): rows of other transports
    /// are not measured, and say so.
    pub only_targets: Option<String>,
}

/// A point of a matrix: its axes' values.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Point {
    pub transport: String,
    pub lifetime: String,
    pub key: String,
    pub link: String,
    pub connections: u64,
    pub tls: String,
}

/// One step of the experiment: a point and its repetition.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub block: usize,
    pub row: String,
    pub point: Point,
    pub repetition: u32,
}

/// What the progress callback sees before each step.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    /// 1-based.
    pub index: usize,
    pub steps: usize,
    pub step: &'a Step,
    /// Time left, estimated from the planned durations and the time taken so far.
    pub left: Duration,
}

/// One step's outcome as kept in the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    #[serde(flatten)]
    pub step: Step,
    pub figures: BTreeMap<String, f64>,
    /// What the step ran against.
    pub target: String,
    pub seconds: f64,
    /// The run's full results (a limit search: each step's).
    pub results: Vec<RunResult>,
    /// A limit search's outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<volley_engine::limit::Outcome>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Everything measured.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub steps: Vec<StepRecord>,
    pub interrupted: bool,
    pub seconds: f64,
}

impl Outcome {
    /// The figures by row, in the order made, each with one value per repetition.
    pub fn measured(&self) -> Measured {
        let mut m: Measured = Vec::new();
        for s in &self.steps {
            let i = match m.iter().position(|(r, _)| *r == s.step.row) {
                Some(i) => i,
                None => {
                    m.push((s.step.row.clone(), BTreeMap::new()));
                    m.len() - 1
                }
            };
            for (k, v) in &s.figures {
                m[i].1.entry(k.clone()).or_default().push(*v);
            }
        }
        m
    }
}

/// A lifetime of the matrix as a connection policy: "persistent", "30s", "1q".
pub fn lifetime(s: &str) -> Result<ConnPolicy, String> {
    if s == "persistent" {
        return Ok(ConnPolicy::default());
    }
    if let Some(d) = s.strip_prefix("idle") {
        let d = volley_responder::parse_duration(d).map_err(|_| s.to_string())?;
        if d.is_zero() {
            return Err(s.to_string());
        }
        return Ok(ConnPolicy { idle: Some(d), ..ConnPolicy::default() });
    }
    if let Some(n) = s.strip_suffix('q') {
        let n: u64 = n.parse().map_err(|_| s.to_string())?;
        if n == 0 {
            return Err(s.to_string());
        }
        return Ok(ConnPolicy { max_queries: Some(n), ..ConnPolicy::default() });
    }
    let d = volley_responder::parse_duration(s).map_err(|_| s.to_string())?;
    if d.is_zero() {
        return Err(s.to_string());
    }
    Ok(ConnPolicy { lifetime: Some(d), ..ConnPolicy::default() })
}

fn dur(s: &Option<String>, default: Duration) -> Duration {
    s.as_deref().and_then(|d| volley_responder::parse_duration(d).ok()).unwrap_or(default)
}

/// The steps of an experiment, in order.
pub fn steps(spec: &Spec, quick: bool) -> Vec<Step> {
    let mut out = Vec::new();
    for (b, block) in spec.runs.iter().enumerate() {
        let r = block.effective(quick);
        let one = |v: &Option<Vec<String>>, d: &str| v.clone().unwrap_or_else(|| vec![d.to_string()]);
        let template = r.row.clone().unwrap_or_else(|| "{transport}".into());
        for transport in one(&r.transport, "udp") {
            for lifetime in one(&r.lifetime, "persistent") {
                for key in one(&r.key, "p256") {
                    for link in one(&r.link, "none") {
                        for &connections in r.connections.as_deref().unwrap_or(&[1]) {
                            for tls in one(&r.tls, "resumed") {
                                let point = Point {
                                    transport: transport.clone(),
                                    lifetime: lifetime.clone(),
                                    key: key.clone(),
                                    link: link.clone(),
                                    connections,
                                    tls: tls.clone(),
                                };
                                let row = template
                                    .replace("{transport}", &transport)
                                    .replace("{lifetime}", &lifetime)
                                    .replace("{key}", &key)
                                    .replace("{link}", &link)
                                    .replace("{connections}", &connections.to_string())
                                    .replace("{tls}", &tls);
                                for repetition in 1..=r.repetitions.unwrap_or(1).max(1) {
                                    out.push(Step { block: b, row: row.clone(), point: point.clone(), repetition });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The time a step is planned to take, for the estimate of time left.
fn planned(r: &Runs) -> f64 {
    match r.measure {
        Some(Measure::Limit) => {
            let l = r.limit.clone().unwrap_or_default();
            let steps = ((l.max / l.start.max(1.0)).ln() / l.factor.unwrap_or(2.0).ln()).ceil().max(1.0)
                + f64::from(l.refine.unwrap_or(3));
            steps * dur(&l.step, Duration::from_secs(2)).as_secs_f64()
        }
        _ => dur(&r.duration, Duration::from_secs(1)).as_secs_f64().max(0.5),
    }
}

/// An embedded responder for one set of server settings, kept for every step that needs it.
struct Embedded {
    key: String,
    responder: Responder,
    ca: Option<PathBuf>,
}

/// The embedded responders and the scratch directory for their CA files.
struct Pool {
    dir: PathBuf,
    servers: Vec<Embedded>,
}

impl Pool {
    fn new() -> Result<Pool, ExperimentError> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "volley-experiment-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| ExperimentError::Io(format!("{}: {e}", dir.display())))?;
        Ok(Pool { dir, servers: Vec::new() })
    }

    /// The responder for `server` and `key` listening on `listen`, started if needed.
    fn get(&mut self, server: &Server, key: &str, listen: IpAddr) -> Result<&Embedded, ExperimentError> {
        let id = format!("{server:?}/{key}/{listen}");
        if let Some(i) = self.servers.iter().position(|e| e.key == id) {
            return Ok(&self.servers[i]);
        }
        let key_type: KeyType = key.parse().map_err(ExperimentError::Setup)?;
        let mut answer = volley_responder::AnswerConfig::default();
        if let Some(d) = &server.delay {
            answer.delays.push(d.parse().map_err(ExperimentError::Setup)?);
        }
        answer.max_qps = server.max_qps;
        let config = ResponderConfig {
            listen,
            udp_port: Some(0),
            tcp_port: Some(0),
            dot_port: Some(0),
            doh_port: Some(0),
            doh3_port: Some(0),
            doq_port: Some(0),
            threads: server.threads.unwrap_or(1),
            in_order: server.in_order.unwrap_or(false),
            tls: TlsConfig {
                cert: match server.cert_chain_bytes {
                    Some(bytes) => CertSource::GenerateChain { key: key_type, bytes },
                    None => CertSource::Generate(key_type),
                },
                ca_out: None,
                tickets: server.tickets.unwrap_or(true),
                zero_rtt: server.zero_rtt.unwrap_or(false),
            },
            answer,
            retry: server.retry.unwrap_or(false),
            quic_tokens: server.quic_tokens.unwrap_or(ResponderConfig::default().quic_tokens),
            quic_tokens_ignored: server.quic_tokens_ignored.unwrap_or(false),
            idle_timeout: match &server.idle_timeout {
                Some(d) => volley_responder::parse_duration(d).map_err(ExperimentError::Setup)?,
                None => ResponderConfig::default().idle_timeout,
            },
            ..ResponderConfig::default()
        };
        let responder =
            volley_responder::start(config).map_err(|e| ExperimentError::Setup(format!("embedded responder: {e}")))?;
        let ca = match responder.ca_pem() {
            Some(pem) => {
                let p = self.dir.join(format!("ca-{}.pem", self.servers.len()));
                std::fs::write(&p, pem).map_err(|e| ExperimentError::Io(format!("{}: {e}", p.display())))?;
                Some(p)
            }
            None => None,
        };
        self.servers.push(Embedded { key: id, responder, ca });
        Ok(self.servers.last().expect("pushed"))
    }

    /// Stops the responders made for a link (its address goes with it).
    fn drop_listening(&mut self, listen: IpAddr) {
        let suffix = format!("/{listen}");
        let (gone, kept): (Vec<Embedded>, Vec<Embedded>) =
            std::mem::take(&mut self.servers).into_iter().partition(|e| e.key.ends_with(&suffix));
        self.servers = kept;
        for e in gone {
            e.responder.stop();
        }
    }

    fn finish(self) {
        for e in self.servers {
            e.responder.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The share of queries answered as a limit search judges it: the upper bound of its 95 %
/// confidence interval (Wilson score), so that a step fails when fewer than `min_answered` were
/// answered beyond chance, not on one query the server lost among a few dozen. A server that
/// drops 1 in 200 is not saturated; with 70 queries a step (`--quick`) one drop is 98.6 % and
/// would end the search at its first step. A saturated server loses systematically: 97 % of
/// 1,500 queries is a bound of 97.7 %, below 99 %.
pub fn answered_bound(answered: u64, issued: u64) -> f64 {
    if issued == 0 {
        return 0.0;
    }
    if answered >= issued {
        return 1.0;
    }
    let (n, p, z) = (issued as f64, answered as f64 / issued as f64, 1.96f64);
    let centre = p + z * z / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre + spread) / (1.0 + z * z / n)).min(1.0)
}

/// Which listener of the embedded responder serves a transport, and how it is reached.
fn embedded_url(transport: &str, r: &Responder) -> Result<(Target, HttpVersion), ExperimentError> {
    let (listener, http) = match transport {
        "udp" => (Transport::Udp, HttpVersion::Http2),
        "tcp" => (Transport::Tcp, HttpVersion::Http2),
        "dot" => (Transport::Dot, HttpVersion::Http2),
        "doh1" => (Transport::Doh, HttpVersion::Http1),
        "doh2" => (Transport::Doh, HttpVersion::Http2),
        "doh3" => (Transport::Doh3, HttpVersion::Http3),
        "doq" => (Transport::Doq, HttpVersion::Http2),
        t => return Err(ExperimentError::Setup(format!("unknown transport '{t}'"))),
    };
    let addr = r.address(listener).ok_or_else(|| ExperimentError::Setup(format!("no {transport} listener")))?;
    let url = match transport {
        "doh1" | "doh2" | "doh3" => format!("https://localhost:{}/dns-query", addr.port()),
        "dot" => format!("tls://localhost:{}", addr.port()),
        "doq" => format!("quic://localhost:{}", addr.port()),
        "udp" => format!("udp://{addr}"),
        _ => format!("tcp://{addr}"),
    };
    let mut target: Target = url.parse().map_err(|e| ExperimentError::Setup(format!("{e}")))?;
    target.addr = addr;
    target.addrs = vec![addr];
    Ok((target, http))
}

/// The HTTP version a transport name asks for (user targets).
fn http_of(transport: &str) -> HttpVersion {
    match transport {
        "doh1" => HttpVersion::Http1,
        "doh3" => HttpVersion::Http3,
        _ => HttpVersion::Http2,
    }
}

/// Runs every step of `spec`, calling `progress` before each.
pub fn run(
    spec: &Spec,
    opts: &Options,
    interrupt: Arc<AtomicBool>,
    mut progress: impl FnMut(&Progress),
) -> Result<Outcome, ExperimentError> {
    let all = steps(spec, opts.quick);
    let blocks: Vec<Runs> = spec.runs.iter().map(|r| r.effective(opts.quick)).collect();
    let planned_s: Vec<f64> = all.iter().map(|s| planned(&blocks[s.block]) + 0.3).collect();
    let mut pool = Pool::new()?;
    let started = Instant::now();
    let mut records = Vec::new();
    let mut interrupted = false;
    let mut result = Ok(());
    for (i, step) in all.iter().enumerate() {
        if interrupt.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        // Time left: the plan of the rest, scaled by how the steps so far compared with theirs.
        let spent = started.elapsed().as_secs_f64();
        let planned_done: f64 = planned_s[..i].iter().sum();
        let scale = if planned_done > 0.0 { (spent / planned_done).max(0.5) } else { 1.0 };
        let left = planned_s[i..].iter().sum::<f64>() * scale;
        progress(&Progress { index: i + 1, steps: all.len(), step, left: Duration::from_secs_f64(left) });
        match run_step(step, &blocks[step.block], opts, &mut pool, interrupt.clone()) {
            Ok(rec) => records.push(rec),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    pool.finish();
    result?;
    held_up_of_targets(&mut records, opts);
    Ok(Outcome { steps: records, interrupted, seconds: started.elapsed().as_secs_f64() })
}

/// `held_up` where the server cannot say which answers it delayed (a target of the user's):
/// the same queries over UDP to that server are never held up behind one another (each
/// datagram on its own), so the UDP row's slow answers are the server's own delays (`delayed`),
/// and a row's slow answers beyond them were held up: `held_up = slow - slow(udp)`. Only for steps
/// against a user's target whose block also ran a UDP row against a user's target (the same
/// server, `--target udp=...`), at the same point (link, connections) and repetition.
fn held_up_of_targets(records: &mut [StepRecord], opts: &Options) {
    if !opts.targets.contains_key("udp") {
        return;
    }
    let udp_slow = |s: &StepRecord| -> Option<f64> {
        records
            .iter()
            .find(|u| {
                u.step.point.transport == "udp"
                    && u.step.block == s.step.block
                    && u.step.repetition == s.step.repetition
                    && u.step.point.link == s.step.point.link
                    && u.step.point.connections == s.step.point.connections
            })
            .and_then(|u| u.figures.get("slow").copied())
    };
    let derived: Vec<Option<(f64, f64)>> = records
        .iter()
        .map(|s| {
            let external = opts.targets.contains_key(&s.step.point.transport);
            match (external, s.figures.get("delayed"), s.figures.get("slow")) {
                (true, None, Some(&slow)) => udp_slow(s).map(|u| ((slow - u).max(0.0), u)),
                _ => None,
            }
        })
        .collect();
    for (s, d) in records.iter_mut().zip(derived) {
        if let Some((h, u)) = d {
            s.figures.insert("held_up".into(), h);
            s.figures.insert("delayed".into(), u);
            s.warnings.push(format!(
                "delayed, held_up: the UDP row's {u} slow answers are the server's own delays (nothing holds up \
                 UDP), the slow answers beyond them were held up"
            ));
        }
    }
}

/// Measures one step.
fn run_step(
    step: &Step,
    r: &Runs,
    opts: &Options,
    pool: &mut Pool,
    interrupt: Arc<AtomicBool>,
) -> Result<StepRecord, ExperimentError> {
    let t0 = Instant::now();
    let p = &step.point;
    let mut warnings = Vec::new();
    let link = match p.link.as_str() {
        "none" | "" => None,
        spec => {
            let items: Vec<String> = spec.split_whitespace().map(str::to_string).collect();
            let cfg =
                volley_link::spec::parse(&items).map_err(|e| ExperimentError::Setup(format!("link '{spec}': {e}")))?;
            let seed = opts.link_seed.unwrap_or(0x5EED ^ step.repetition as u64);
            Some(
                volley_link::Link::start(cfg, seed)
                    .map_err(|e| ExperimentError::Setup(format!("link '{spec}': {e}")))?,
            )
        }
    };
    let server = r.server.clone().unwrap_or_default();
    let user = opts.targets.get(&p.transport);
    if let (None, Some(name)) = (user, &opts.only_targets) {
        if let Some(l) = link {
            let _ = l.finish();
        }
        return Ok(StepRecord {
            step: step.clone(),
            figures: BTreeMap::new(),
            target: String::new(),
            seconds: 0.0,
            results: Vec::new(),
            limit: None,
            warnings: vec![format!("{name} does not serve {}: not measured", p.transport)],
        });
    }
    let (mut target, http, ca, embedded) = match user {
        Some(url) => {
            let t: Target = url.parse().map_err(|e| ExperimentError::Setup(format!("--target {url}: {e}")))?;
            if server != Server::default() {
                warnings.push(format!(
                    "the server settings of this row ({server:?}) apply to the embedded responder, not to {url}"
                ));
            }
            (t, http_of(&p.transport), opts.ca.clone(), None)
        }
        None => {
            let listen = link.as_ref().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |l| IpAddr::V4(l.addrs.host));
            let e = pool.get(&server, &p.key, listen)?;
            let (t, http) = embedded_url(&p.transport, &e.responder)?;
            (t, http, e.ca.clone(), Some(listen))
        }
    };
    if let (Some(l), None) = (&link, embedded) {
        // A user's target on loopback is reached at the link's host end.
        let host = IpAddr::V4(l.addrs.host);
        let to = |a: &mut SocketAddr| {
            if a.ip().is_loopback() {
                *a = SocketAddr::new(host, a.port());
            }
        };
        to(&mut target.addr);
        target.addrs.iter_mut().for_each(to);
    }
    let fresh_conns = lifetime(&p.lifetime).map_err(|l| ExperimentError::Setup(format!("lifetime '{l}'")))?;
    let udp = target.scheme == Scheme::Udp;
    let timeout = dur(&r.timeout, Duration::from_secs(2));
    let mut lane = LaneOptions {
        query_timeout: timeout,
        http,
        h1_pipeline: if http == HttpVersion::Http1 && target.scheme.is_https() {
            r.h1_pipeline.unwrap_or(1)
        } else {
            1
        },
        conn: if udp { ConnPolicy::default() } else { fresh_conns },
        tls: TlsSettings {
            ca_file: ca,
            insecure: user.is_some() && opts.insecure,
            resume: p.tls != "fresh",
            zero_rtt: p.tls == "0rtt",
            ..TlsSettings::default()
        },
        quic_tokens: r.quic_tokens.unwrap_or(false),
        conn_gate: if udp { None } else { r.conn_rate.map(volley_transport::ConnGate::new) },
        ..LaneOptions::default()
    };
    // Fresh connections against the embedded responder on loopback come from many source
    // addresses, so that ports in TIME_WAIT do not make the kernel's port search the cost.
    let one_query =
        fresh_conns.max_queries.is_some() || fresh_conns.lifetime.is_some_and(|l| l < Duration::from_secs(5));
    if one_query && !udp && embedded.is_some_and(|a| a.is_loopback()) {
        lane.sources = Some("127.0.1.0/24".parse::<Sources>().map_err(ExperimentError::Setup)?);
    }
    let opts_q = QueryOptions::default();
    let queries = match r.queries.as_deref().unwrap_or("single") {
        "random" => QuerySet::random_under("example.test", QType::A, opts_q),
        "single" => QuerySet::single("www.example.test", QType::A, opts_q),
        name => QuerySet::single(name, QType::A, opts_q),
    }
    .map_err(|e| ExperimentError::Setup(format!("queries: {e}")))?;
    let connections = p.connections.max(1) as usize;
    let concurrency = r.concurrency.unwrap_or(r.per_connection.unwrap_or(1) * connections as u64).max(1);
    let mut connections = connections;
    if lane.h1_pipeline >= 1 && http == HttpVersion::Http1 && target.scheme.is_https() {
        connections = connections.max(concurrency.div_ceil(u64::from(lane.h1_pipeline)) as usize);
    }
    if fresh_conns.max_queries == Some(1) && !udp {
        connections = connections.max(concurrency as usize);
    }
    let udp_retry = match (&r.udp_retry, udp) {
        (Some(d), true) => Some(
            UdpRetry::new(Some(dur(&Some(d.clone()), timeout)), r.udp_tries.unwrap_or(2), timeout)
                .map_err(|e| ExperimentError::Setup(format!("udp_retry: {e}")))?,
        ),
        _ => None,
    };
    let threads = r.threads.unwrap_or(1).max(1);
    let load = match r.rate {
        Some(rate) => Load::Open { rate },
        None => Load::Closed { concurrency },
    };
    let plan = Plan {
        target: target.clone(),
        queries,
        load,
        duration: r.duration.as_ref().map(|_| dur(&r.duration, Duration::from_secs(1))),
        count: r.count,
        timeout,
        threads,
        connections,
        lane,
        // A fixed run keeps the exact schedule (head-of-line's order of arrival at the server,
        // response times from each query's own time); a limit search batches as `volley limit`
        // does (below).
        batch_window: Duration::ZERO,
        target_pids: if embedded.is_some() { Vec::new() } else { opts.target_pids.clone() },
        target_clock: None,
        udp_retry,
        tc_fallback: false,
        part: volley_engine::part::Part::WHOLE,
        start: None,
        trace_queries: r.trace_queries.unwrap_or(0),
    };
    let plan = if plan.duration.is_none() && plan.count.is_none() {
        Plan { duration: Some(Duration::from_secs(1)), ..plan }
    } else {
        plan
    };
    let slow_over = dur(&r.slow_over, Duration::from_millis(500));
    // The one measurement: a run of `plan` (behind the link when there is one).
    let measure_once = |plan: &Plan, pool: &Pool| -> Result<(RunResult, Option<u64>), ExperimentError> {
        let responder = responder_of(pool, &server, &p.key, embedded);
        let before = responder.map(|e| e.responder.stats().delayed);
        // The embedded responder's CPU, read by the engine over the run's clock (as a target
        // process's: the set-up before it, connections opened at the start, is not counted).
        let plan = &Plan { target_clock: responder.map(|e| CpuClock::new(e.responder.cpu_clock())), ..plan.clone() };
        let result = match &link {
            Some(l) => std::thread::scope(|s| {
                s.spawn(|| {
                    l.enter().map_err(|e| ExperimentError::Setup(format!("enter the link's namespace: {e}")))?;
                    volley_engine::run(plan, interrupt.clone(), |_| {}).map_err(|e| ExperimentError::Run(e.to_string()))
                })
                .join()
                .unwrap_or_else(|_| Err(ExperimentError::Run("the run's thread panicked".into())))
            }),
            None => {
                volley_engine::run(plan, interrupt.clone(), |_| {}).map_err(|e| ExperimentError::Run(e.to_string()))
            }
        }?;
        let delayed = responder.zip(before).map(|(e, d0)| e.responder.stats().delayed.saturating_sub(d0));
        Ok((result, delayed))
    };
    let (figures, results, limit) = match r.measure.unwrap_or(Measure::Run) {
        Measure::Run => {
            let (result, delayed) = measure_once(&plan, pool)?;
            match short_of_files(&result, plan.connections) {
                // Its figures would be volley's own limit's, not the server's.
                Some(w) => {
                    warnings.push(w);
                    (BTreeMap::new(), vec![result], None)
                }
                None => (crate::figures::of_run(&result, delayed, slow_over), vec![result], None),
            }
        }
        Measure::Limit => {
            let l = r.limit.clone().unwrap_or_default();
            let step_len = dur(&l.step, Duration::from_secs(2));
            let search = volley_engine::limit::Search {
                start: l.start,
                max: l.max,
                growth: volley_engine::limit::Growth::Factor(l.factor.unwrap_or(2.0)),
                refine: l.refine.unwrap_or(3),
                resolution: 0.05,
            };
            let obj =
                volley_engine::limit::Objective { min_answered: l.min_answered.unwrap_or(0.99), max_latency: None };
            let mut results = Vec::new();
            let mut failure = None;
            let by_clients = l.by.as_deref() == Some("clients");
            let client_rate = l.client_rate.unwrap_or(1.0);
            let mut outcome = volley_engine::limit::search(&search, &obj, |load| {
                let step_plan = if by_clients {
                    clients_plan(&plan, load.round().max(1.0) as u64, client_rate, step_len)
                } else {
                    Plan { load: Load::Open { rate: load }, duration: Some(step_len), count: None, ..plan.clone() }
                };
                // A step's figures are those `volley limit` would measure: the queries due within
                // its batch window leave together (with none, every query is a wake-up of the
                // generator's, and the search stops at the generator, not the target).
                let step_plan = Plan { batch_window: volley_engine::BATCH_WINDOW, ..step_plan };
                match measure_once(&step_plan, pool) {
                    Ok((res, _)) => {
                        let busy = res.generator.cpu_s / (res.duration_s.max(1e-3) * threads as f64);
                        let m = volley_engine::limit::Measured {
                            answered_ratio: answered_bound(res.totals.answered, res.totals.issued),
                            latency_ns: res.latency.p99_ns,
                            p99_ns: res.latency.p99_ns,
                            generator_bound: volley_engine::limit::generator_bound(
                                &volley_engine::limit::GeneratorFigures {
                                    busy,
                                    schedule_late_p50_ns: res
                                        .schedule_lateness
                                        .as_ref()
                                        .filter(|l| l.count > 0)
                                        .map(|l| l.p50_ns),
                                    // Issued, not sent: queries the server held back are its doing.
                                    sent_share: match res.load.rate {
                                        Some(asked) if asked > 0.0 => res.qps.issued / asked,
                                        _ => 1.0,
                                    },
                                },
                            ),
                            interrupted: interrupt.load(Ordering::Relaxed),
                        };
                        results.push(res);
                        m
                    }
                    Err(e) => {
                        failure.get_or_insert(e);
                        volley_engine::limit::Measured { interrupted: true, ..Default::default() }
                    }
                }
            });
            if let Some(e) = failure {
                return Err(e);
            }
            // The steps record the share answered, not the bound they were judged by.
            for (st, r) in outcome.steps.iter_mut().zip(&results) {
                st.answered_ratio = r.totals.answered_ratio();
            }
            let mut f = BTreeMap::new();
            let good = outcome
                .steps
                .iter()
                .filter(|s| s.ok)
                .map(|s| s.load)
                .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))));
            match (outcome.limit, outcome.stopped) {
                (Some(v), _) => {
                    f.insert("limit".to_string(), v);
                }
                // The generator stopped the search: the target kept up with at least this.
                (None, volley_engine::limit::Stopped::GeneratorBound) => {
                    if let Some(v) = good {
                        f.insert("limit".to_string(), v);
                    }
                }
                _ => {}
            }
            let steps: Vec<crate::figures::LimitStep> = outcome
                .steps
                .iter()
                .zip(&results)
                .map(|(s, r)| crate::figures::LimitStep {
                    load: s.load,
                    ok: s.ok,
                    target_cpu_s: r.target_cpu.as_ref().map(|c| c.cpu_s),
                    duration_s: r.duration_s,
                })
                .collect();
            let found = matches!(outcome.stopped, volley_engine::limit::Stopped::Found);
            f.extend(crate::figures::of_limit(&steps, outcome.limit, found));
            if let Some(last) =
                results.iter().rev().find(|r| answered_bound(r.totals.answered, r.totals.issued) >= obj.min_answered)
            {
                for (k, v) in crate::figures::of_run(last, None, slow_over) {
                    f.entry(k).or_insert(v);
                }
            }
            match outcome.stopped {
                volley_engine::limit::Stopped::Found => {}
                volley_engine::limit::Stopped::GeneratorBound => warnings.push(
                    "limit search stopped: the generator, not the target, set the pace (the figure is a lower bound)"
                        .into(),
                ),
                volley_engine::limit::Stopped::AboveMax => warnings
                    .push(format!("the target kept up with the most tried ({}): the figure is a lower bound", l.max)),
                other => warnings.push(format!("limit search stopped: {other:?}")),
            }
            (f, results, Some(outcome))
        }
    };
    if let Some(l) = link {
        if let Some(listen) = embedded {
            pool.drop_listening(listen);
        }
        let _ = l.finish();
    }
    for res in &results {
        if !res.totals.balanced() {
            warnings.push("a run's accounting does not balance".into());
        }
    }
    Ok(StepRecord {
        step: step.clone(),
        figures,
        target: target.url.clone(),
        seconds: t0.elapsed().as_secs_f64(),
        results,
        limit,
        warnings,
    })
}

/// Why a run that could not open the connections it asked for, for want of open files (its
/// own EMFILE or ENFILE, `local_limit`), is not measured; None where it opened them all (some
/// attempts may have failed and been made again).
fn short_of_files(result: &RunResult, asked: usize) -> Option<String> {
    let c = result.connections.as_ref()?;
    let failed = c.errors.get("local_limit").copied().unwrap_or(0);
    if failed == 0 || c.opened >= asked as u64 {
        return None;
    }
    Some(format!(
        "{} of {asked} connections opened: {failed} attempts found no open file left in volley's process \
         (local_limit; against the embedded responder both ends of each connection are volley's): not \
         measured (measure a server in another process with --target or --server, or raise the limit, \
         ulimit -n)",
        c.opened
    ))
}

fn responder_of<'p>(pool: &'p Pool, server: &Server, key: &str, listen: Option<IpAddr>) -> Option<&'p Embedded> {
    let listen = listen?;
    let id = format!("{server:?}/{key}/{listen}");
    pool.servers.iter().find(|e| e.key == id)
}

/// A step of a search by clients: `n` simulated clients of `rate` queries per second each,
/// each with a connection of its own that follows the plan's connection policy (UDP: a socket
/// each), every client resuming only its own TLS sessions.
fn clients_plan(plan: &Plan, n: u64, rate: f64, duration: Duration) -> Plan {
    let udp = plan.target.scheme == Scheme::Udp;
    let parse = |d: &str| volley_responder::parse_duration(d);
    let mut profile =
        volley_engine::Profile::load(if udp { "stub" } else { "forwarder" }, &parse).expect("a built-in profile");
    profile.connections = 1;
    // Kept connections are opened before the step's clock (a client that has been running a
    // while has its connection); per-query ones as the queries come.
    profile.connect_at_start = plan.lane.conn.max_queries.is_none() && plan.lane.conn.lifetime.is_none();
    profile.light = plan.lane.conn;
    profile.busy = None;
    profile.udp_retry = None;
    profile.udp_tries = None;
    profile.tcp_on_truncation = false;
    let lane = LaneOptions { own_sessions: true, ..plan.lane.clone() };
    let group = volley_engine::Group {
        weight: 1.0,
        profile,
        target: plan.target.clone(),
        rate,
        lane,
        busy: None,
        fallback: None,
        udp_retry: None,
    };
    let load = volley_engine::ClientsLoad {
        count: n,
        arrivals: volley_engine::Arrivals::Constant,
        groups: vec![group],
        replay: None,
    };
    Plan {
        load: Load::Clients(load),
        duration: Some(duration),
        count: None,
        connections: if udp { n.min(4000) as usize } else { plan.threads },
        ..plan.clone()
    }
}
