//! The results file: one type, serialised as JSON (schema in docs/results-schema.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Counters, Histogram, SparseHistogram, WireStats};

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Ran for its whole duration or count, then waited for the last answers.
    Complete,
    /// Stopped early (Ctrl-C / SIGTERM); queries without a fate are counted as in flight.
    Interrupted,
}

/// Everything a run measured. Produced by the engine, read by every printer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub schema: String,
    pub volley_version: String,
    pub status: Status,
    /// The command line that produced the run, to repeat it.
    pub command: Vec<String>,
    /// Wall-clock start, RFC 3339 UTC, and the same in Unix milliseconds (second 0 of `series`).
    pub started_at: String,
    pub started_unix_ms: u64,
    /// Length of the sending phase, seconds.
    pub duration_s: f64,
    /// Sending plus waiting for the last answers, seconds.
    pub elapsed_s: f64,
    /// Set-up before the run's clock started (second 0 of `series`), seconds: worker threads,
    /// sockets, and the connections the run opens at its start. Not part of `elapsed_s`;
    /// absent in results of versions that made sockets on the clock.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub setup_s: Option<f64>,
    pub target: TargetInfo,
    pub load: LoadInfo,
    pub totals: Totals,
    pub qps: Qps,
    /// Answered queries' latency: from the schedule to the answer's arrival in open loop
    /// (the response time: coordinated omission corrected), the service time in closed loop.
    pub latency: LatencySummary,
    /// Answered queries' service time: from the query's departure (its kernel transmit
    /// stamp, else volley's clock; see `send_stamps`) to its answer's kernel receive time:
    /// the server's and the network's time, without the generator's own.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub service_time: Option<LatencySummary>,
    /// Every query that left: from its issue (closed loop) or its scheduled time (open loop)
    /// to its departure: the generator's own delay, waits for its transport included. In
    /// open loop a query's response time is its generator delay plus its service time.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub generator_delay: Option<LatencySummary>,
    /// How the departures were timed: by the kernel, or by volley's clock where it gave none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub send_stamps: Option<SendStamps>,
    /// Open loop only: how late queries left against their schedule.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub send_lateness: Option<LatencySummary>,
    /// Scheduled loads: how late the generator's scheduler handed each query to its transport
    /// against its schedule, the generator's own part of `send_lateness` (the rest is
    /// `transport_wait`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub schedule_lateness: Option<LatencySummary>,
    /// Queries that waited for their transport before they left (a connection being opened,
    /// the server's stream limit, an HTTP/1.1 connection busy...), by cause; absent when none
    /// waited. The wait is the server's or the protocol's doing: it counts in the response time
    /// on a schedule, and in `generator_delay` (in the closed loop, not in its latency).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub transport_wait: Option<TransportWait>,
    /// The most queries on the wire at one moment (sent and not yet ended; the sum of each
    /// worker's peak): the concurrency the server allowed. In a closed loop, below its
    /// concurrency when the server allowed fewer at once (its streams, HTTP/1.1 connections).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_on_wire: Option<u64>,
    pub generator: GeneratorInfo,
    /// The target's CPU time over the run, when it runs on this host (`--target-pid`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target_cpu: Option<TargetCpu>,
    /// The machine's steal time over the run (a VM's CPU time its hypervisor took), where the
    /// kernel counts it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host: Option<crate::HostInfo>,
    /// The emulated link the generator was behind (`--link`; docs/link.md).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub link: Option<LinkInfo>,
    /// The directory of the QUIC connections' qlog traces (`--qlog`; one `.sqlog` file each).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub qlog_dir: Option<String>,
    /// Connection-based transports only: handshakes, resumption, closes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub connections: Option<crate::ConnectionSummary>,
    /// Simulated clients: each group (a profile on a transport) of a mixture, when several.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub groups: Vec<GroupSummary>,
    pub series: Vec<SecondRow>,
    /// Transport events that are not fates of queries (connections opened, closed by the
    /// server, ICMP unreachable...), by name.
    #[serde(default)]
    pub events: BTreeMap<String, u64>,
    /// Things the reader must know to trust the figures (e.g. the generator fell behind).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// A part of a run split across processes or machines (`--part I/N`, `--start-at`,
    /// `--coordinator`; docs/scale-out.md): which part, and how it started.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub part: Option<PartInfo>,
    /// The merge of a coordinated run's parts (`volley coordinate`): whether every part came,
    /// each part's share, clock offset and start, and the start skew.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub scale: Option<ScaleInfo>,
    /// The run's first queries one by one (`--trace-queries N`, at most 10,000): each one's
    /// order of issue, issue time, latency and fate. Absent unless asked for.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub query_trace: Option<crate::QueryTrace>,
}

/// Which part of a split run a result is, and how it started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartInfo {
    /// From 0 (`JOB_COMPLETION_INDEX`), below `count`.
    pub index: u32,
    pub count: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub start: Option<PartStart>,
}

/// A part's start: the time it was given, and how late its workers began after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartStart {
    /// The start, Unix nanoseconds on this part's clock (the coordinator's start time less
    /// the measured clock offset, or `--start-at`).
    pub planned_unix_ns: u64,
    /// How long after it the last of its worker threads woke to begin, ns.
    pub late_ns: u64,
    /// The coordinator's clock minus this part's, measured NTP-style (ns; absent without a
    /// coordinator).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub clock_offset_ns: Option<i64>,
    /// The round trip of the exchange that measured it, ns.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rtt_ns: Option<u64>,
}

/// The merge of a coordinated run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleInfo {
    /// Parts the run was split into.
    pub parts: u32,
    /// Whether every part's results are in the merge.
    pub complete: bool,
    /// The share of the run's load (by arrivals, clients or concurrency) of the parts missing.
    pub missing_share: f64,
    /// The start the coordinator gave, Unix nanoseconds on its clock.
    pub start_unix_ns: u64,
    /// The latest part's actual start minus the earliest's, on the coordinator's clock (each
    /// part's start less its clock offset, plus how late its workers woke), ns.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub start_skew_ns: Option<u64>,
    /// One entry per part, by index.
    pub part_list: Vec<ScalePart>,
}

/// One part of a coordinated run, as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalePart {
    pub index: u32,
    /// `merged`, or why not: `never_came`, `lost` (it left before its results came), `failed`.
    pub status: String,
    /// Its share of the run's load (0..1).
    pub share: f64,
    /// Where it connected from.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub clock_offset_ns: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rtt_ns: Option<u64>,
    /// Its actual start against the given start, on the coordinator's clock, ns.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub start_offset_ns: Option<i64>,
    /// What went wrong, for a part not merged.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
}

impl RunResult {
    /// Reads a file written before `issued` existed as one written now: its `sent` counted
    /// the queries issued (totals, series, groups, qps). Files with `issued` are unchanged.
    pub fn upgrade(&mut self) {
        if !self.totals.is_old() {
            return;
        }
        self.totals.upgrade();
        self.qps.issued = self.qps.sent;
        for r in &mut self.series {
            r.issued = r.sent;
        }
        for g in &mut self.groups {
            g.totals.upgrade();
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetInfo {
    pub url: String,
    pub transport: String,
    pub address: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadInfo {
    /// `closed` (fixed concurrency) or `open` (fixed rate).
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub concurrency: Option<u64>,
    /// Open loop: the rate; clients: the total of the clients' rates.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rate: Option<f64>,
    /// Simulated clients: how many, and each one's rate (qps).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub clients: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub client_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duration_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub count: Option<u64>,
    pub timeout_ms: u64,
    pub threads: usize,
    pub connections: usize,
    /// Where queries came from: `file:PATH`, `name:NAME TYPE`, `random:SUFFIX TYPE`.
    pub queries: String,
    /// UDP: a query without an answer went out again after this long (`--udp-retry`, or the
    /// first UDP group's profile with simulated clients) ...
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub udp_retry_ms: Option<f64>,
    /// ... up to this many sends in all.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub udp_tries: Option<u32>,
    /// UDP: truncated answers were asked again over TCP (`--tc-fallback`, the stub profile).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub tc_fallback: bool,
}

/// Fates of every query and the events around them.
/// `issued = answered + timed_out + failed + unsent + in_flight`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Queries the load model issued (absent in files written before it existed, whose
    /// `sent` counted them: see [`RunResult::upgrade`]).
    #[serde(default)]
    pub issued: u64,
    /// Queries that left the generator.
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    pub failed: u64,
    /// Queries whose timeout came before they could leave the generator.
    #[serde(default)]
    pub unsent: u64,
    /// `unsent` by why (`no_connection`, `no_stream_credit`, `queued`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub unsent_reasons: BTreeMap<String, u64>,
    pub in_flight: u64,
    pub truncated: u64,
    pub rcodes: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    pub unexpected: BTreeMap<String, u64>,
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// On the wire, headers included (absent when the transport could not tell).
    #[serde(skip_serializing_if = "WireStats::is_empty", default)]
    pub wire: WireStats,
    /// Queries sent more than once (a connection's end left them unanswered), by how many
    /// times they went out in all: `{"2": n, "3": m, ...}`; absent when none was.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub tries: BTreeMap<String, u64>,
}

impl Totals {
    pub fn from_counters(c: &Counters, in_flight: u64) -> Totals {
        Totals {
            issued: c.issued,
            sent: c.sent,
            answered: c.answered,
            timed_out: c.timed_out,
            failed: c.failed,
            unsent: c.unsent,
            unsent_reasons: c.unsent_map(),
            in_flight,
            truncated: c.truncated,
            rcodes: c.rcode_map(),
            errors: c.error_map(),
            unexpected: c.unexpected_map(),
            bytes_out: c.bytes_out,
            bytes_in: c.bytes_in,
            wire: c.wire,
            tries: c.tries_map(),
        }
    }

    /// The fates added up (with `in_flight`): `issued` when every query has exactly one.
    pub fn fates(&self) -> u128 {
        [self.answered, self.timed_out, self.failed, self.unsent, self.in_flight].iter().map(|n| *n as u128).sum()
    }

    /// True when every query has exactly one fate.
    pub fn balanced(&self) -> bool {
        self.issued as u128 == self.fates()
    }

    /// Answered queries over queries issued.
    pub fn answered_ratio(&self) -> f64 {
        if self.issued == 0 {
            0.0
        } else {
            self.answered as f64 / self.issued as f64
        }
    }

    /// A file written before `issued` existed counted issued queries as `sent`, and had no
    /// `unsent` (`sent` can never exceed `issued`, so `issued` 0 with `sent` above 0 marks it).
    fn is_old(&self) -> bool {
        self.issued == 0 && self.sent > 0
    }

    fn upgrade(&mut self) {
        if self.is_old() {
            self.issued = self.sent;
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Qps {
    /// Queries issued per second of the sending phase (absent in older files: `sent` then).
    #[serde(default)]
    pub issued: f64,
    /// Queries that left the generator per second of the sending phase.
    pub sent: f64,
    /// Answers per second of the sending phase.
    pub answered: f64,
}

/// Percentiles in nanoseconds, and the whole histogram for exact merging.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub histogram: SparseHistogram,
}

impl LatencySummary {
    pub fn of(h: &Histogram) -> LatencySummary {
        LatencySummary {
            count: h.count(),
            min_ns: h.min(),
            mean_ns: h.mean().round() as u64,
            p50_ns: h.quantile(0.5),
            p90_ns: h.quantile(0.9),
            p99_ns: h.quantile(0.99),
            p999_ns: h.quantile(0.999),
            max_ns: h.max(),
            histogram: h.to_sparse(),
        }
    }
}

/// The emulated link a run's generator was behind (`--link`), as its emulator saw it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LinkInfo {
    /// The spec as given (`--link`).
    pub spec: String,
    /// The seed of its random choices (`--link-seed`, or the one drawn).
    pub seed: u64,
    /// Namespace to host (the generator's queries).
    pub up: LinkDirection,
    /// Host to namespace (the answers).
    pub down: LinkDirection,
    /// How late the emulator sent each packet against its due time.
    pub lateness: LatencySummary,
    /// Packets still in the link when the run ended.
    pub held_at_end: u64,
    /// The forwarder thread's CPU time.
    pub forwarder_cpu_s: f64,
    /// The forwarder ran at real-time priority.
    pub realtime: bool,
    /// Per second of the run (the seconds of the results' `series`): drops by cause, the
    /// queues and the emulator's lateness. Empty where the run had none (older results).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub series: Vec<LinkSecond>,
}

/// One second of an emulated link.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkSecond {
    /// Seconds since the run's start (as the results' `series` rows).
    pub second: u64,
    pub up: LinkSecondDir,
    pub down: LinkSecondDir,
    /// How late the emulator sent the second's packets: p99 and max, ns.
    pub lateness_p99_ns: u64,
    pub lateness_max_ns: u64,
    /// Packets held past their due time at the end of the second, both directions (the
    /// emulator's backlog: growing, it fell behind).
    pub overdue: u64,
    /// How late the emulator sent each of the second's packets (both directions), with its
    /// histogram (2 significant figures), so that merged seconds stay exact. None in results
    /// written before it was added.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub lateness: Option<SecondLatency>,
}

/// One direction of an emulated link over one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkSecondDir {
    /// Packets (and their bytes) that came into the link. The fields marked `default` were
    /// added later: results written before them read 0.
    #[serde(default)]
    pub packets_in: u64,
    #[serde(default)]
    pub bytes_in: u64,
    /// Packets that left the link, and their bytes.
    pub packets_out: u64,
    #[serde(default)]
    pub bytes_out: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub dropped_outage: u64,
    /// Packets in the bottleneck queue at the end of the second (rate or trace).
    pub queued: u64,
    /// The p99 of the second's queueing delay, ns (0: none queued).
    pub queue_delay_p99_ns: u64,
    /// Packets that left after one that came in later than they did.
    #[serde(default)]
    pub reordered: u64,
    /// Extra copies made (each counted in `packets_out` too when it leaves).
    #[serde(default)]
    pub duplicated: u64,
}

impl LinkSecond {
    /// Adds another run's second (merge): counts and queues add; the lateness histograms
    /// merge (exact: the p99 is the merged histogram's, as the rows' own is theirs), where a
    /// second has none (older results) the p99 is the worse of the two; the lateness's max and
    /// the queueing delay's p99 are the worse of the two.
    pub fn add(&mut self, o: &LinkSecond) {
        for (a, b) in [(&mut self.up, &o.up), (&mut self.down, &o.down)] {
            a.packets_in += b.packets_in;
            a.bytes_in += b.bytes_in;
            a.packets_out += b.packets_out;
            a.bytes_out += b.bytes_out;
            a.dropped_loss += b.dropped_loss;
            a.dropped_queue += b.dropped_queue;
            a.dropped_outage += b.dropped_outage;
            a.queued += b.queued;
            a.queue_delay_p99_ns = a.queue_delay_p99_ns.max(b.queue_delay_p99_ns);
            a.reordered += b.reordered;
            a.duplicated += b.duplicated;
        }
        self.overdue += o.overdue;
        match (&self.lateness, &o.lateness) {
            (Some(a), Some(b)) => {
                let mut h = Histogram::from_sparse(&a.histogram);
                h.merge(&Histogram::from_sparse(&b.histogram));
                self.lateness_p99_ns = h.quantile(0.99);
                self.lateness = Some(SecondLatency::of(&h));
            }
            _ => {
                self.lateness_p99_ns = self.lateness_p99_ns.max(o.lateness_p99_ns);
                // A second without its histogram makes the merged one's incomplete.
                self.lateness = None;
            }
        }
        self.lateness_max_ns = self.lateness_max_ns.max(o.lateness_max_ns);
    }

    /// Adds series of two runs second by second.
    pub fn add_series(acc: &mut Vec<LinkSecond>, other: &[LinkSecond]) {
        for o in other {
            match acc.iter_mut().find(|s| s.second == o.second) {
                Some(s) => s.add(o),
                None => acc.push(o.clone()),
            }
        }
        acc.sort_by_key(|s| s.second);
    }
}

/// What happened to the packets of one direction of an emulated link: the emulator's own
/// counters (volley-link), and the results' (in [`LinkDirection`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub dropped_outage: u64,
    /// Packets that left after a packet that came in later than they did.
    pub reordered: u64,
    /// Extra copies made (each counted in `packets_out` too when it leaves).
    pub duplicated: u64,
}

impl LinkCounters {
    /// Packets still held: in = out + dropped - duplicated + held.
    pub fn held(&self) -> u64 {
        (self.packets_in + self.duplicated)
            .saturating_sub(self.packets_out + self.dropped_loss + self.dropped_queue + self.dropped_outage)
    }

    /// Adds another run's counters (merge).
    pub fn add(&mut self, o: &LinkCounters) {
        self.packets_in += o.packets_in;
        self.bytes_in += o.bytes_in;
        self.packets_out += o.packets_out;
        self.bytes_out += o.bytes_out;
        self.dropped_loss += o.dropped_loss;
        self.dropped_queue += o.dropped_queue;
        self.dropped_outage += o.dropped_outage;
        self.reordered += o.reordered;
        self.duplicated += o.duplicated;
    }
}

/// What one direction of an emulated link did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LinkDirection {
    /// Its settings in words (`delay 53.3ms, jitter 1ms uniform (reorders), loss 0.5%`).
    pub settings: String,
    #[serde(flatten)]
    pub counts: LinkCounters,
    /// Time packets waited in the bottleneck queue (with a rate or a trace).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub queue_delay: Option<LatencySummary>,
}

/// How the queries that left were timed: `kernel` by a kernel transmit stamp of their own,
/// `between` by a time between the stamps of the two stamped datagrams around them in the
/// system call that sent them (UDP with `--tx-stamps ends`), `fallback` by volley's clock after the
/// send returned (no stamp from the kernel, stamps off, or a transport without them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendStamps {
    pub kernel: u64,
    #[serde(default)]
    pub between: u64,
    pub fallback: u64,
}

/// The time queries waited for their transport before they left.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TransportWait {
    /// Queries that waited (counted once, at their first send).
    pub queries: u64,
    /// How long each of them waited.
    pub wait: LatencySummary,
    /// By cause ([`crate::Wait`] names): the queries whose wait was (mostly) for it, and how
    /// long they waited in all.
    pub causes: BTreeMap<String, WaitCause>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitCause {
    pub queries: u64,
    pub total_s: f64,
}

impl TransportWait {
    /// The summary of a run's waits; None when no query waited.
    pub fn of(w: &crate::TransportWaits) -> Option<TransportWait> {
        if w.wait.count() == 0 {
            return None;
        }
        let causes = crate::Wait::ALL
            .iter()
            .filter(|k| w.queries[**k as usize] > 0)
            .map(|k| {
                let i = *k as usize;
                (k.to_string(), WaitCause { queries: w.queries[i], total_s: w.total_ns[i] as f64 / 1e9 })
            })
            .collect();
        Some(TransportWait { queries: w.wait.count(), wait: LatencySummary::of(&w.wait), causes })
    }

    /// The cause most of the waiting was for.
    pub fn main_cause(&self) -> Option<&str> {
        self.causes.iter().max_by(|a, b| a.1.total_s.total_cmp(&b.1.total_s)).map(|(k, _)| k.as_str())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GeneratorInfo {
    /// CPU time (user + system) of the generator's worker threads.
    pub cpu_s: f64,
    /// That CPU time per answered query, microseconds.
    pub cpu_us_per_answer: f64,
    pub threads: usize,
}

/// The CPU time of the target's processes (user + system, all their threads) from the start
/// of the run to its end, read from their CPU-time clocks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetCpu {
    pub pids: Vec<u32>,
    pub cpu_s: f64,
    /// That CPU time per answered query, microseconds.
    pub cpu_us_per_answer: f64,
}

impl TargetCpu {
    /// `cpu_s` spent by `pids` for `answered` answers (0 µs per answer when none).
    pub fn new(pids: Vec<u32>, cpu_s: f64, answered: u64) -> TargetCpu {
        let cpu_us_per_answer = if answered > 0 { cpu_s * 1e6 / answered as f64 } else { 0.0 };
        TargetCpu { pids, cpu_s, cpu_us_per_answer }
    }
}

/// One second of the run (second 0 starts at `started_unix_ms`). Fates are counted in the
/// second they happened; `issued` in the second the query was issued, `sent` in the second it
/// first left.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SecondRow {
    pub second: u32,
    #[serde(default)]
    pub issued: u64,
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    pub failed: u64,
    #[serde(default)]
    pub unsent: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub unsent_reasons: BTreeMap<String, u64>,
    pub truncated: u64,
    pub rcodes: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub errors: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub unexpected: BTreeMap<String, u64>,
    pub latency: SecondLatency,
    /// Connection events of this second (connection-based transports).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub connections: Option<crate::SecondConnections>,
    /// CPU time the target used in this second, seconds (`--target-pid`; read when the
    /// second's figures came in).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target_cpu_s: Option<f64>,
}

/// Latency of one second's answers (2 significant figures), with its histogram.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondLatency {
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub histogram: SparseHistogram,
}

impl SecondLatency {
    /// The percentiles and buckets of a histogram of one second.
    pub fn of(h: &Histogram) -> SecondLatency {
        SecondLatency {
            p50_ns: h.quantile(0.5),
            p90_ns: h.quantile(0.9),
            p99_ns: h.quantile(0.99),
            p999_ns: h.quantile(0.999),
            max_ns: h.max(),
            histogram: h.to_sparse(),
        }
    }
}

impl SecondRow {
    pub fn of(second: u32, c: &Counters, h: &Histogram) -> SecondRow {
        SecondRow {
            second,
            issued: c.issued,
            sent: c.sent,
            answered: c.answered,
            timed_out: c.timed_out,
            failed: c.failed,
            unsent: c.unsent,
            unsent_reasons: c.unsent_map(),
            truncated: c.truncated,
            rcodes: c.rcode_map(),
            errors: c.error_map(),
            unexpected: c.unexpected_map(),
            latency: SecondLatency::of(h),
            connections: crate::SecondConnections::of(&c.conns),
            target_cpu_s: None,
        }
    }
}

/// One group of simulated clients in a mixture: a profile on a transport.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupSummary {
    /// `PROFILE@SCHEME`, e.g. `browser@https`; unique within a run (groups alike add
    /// `:QPS`, then `#N`).
    pub name: String,
    pub profile: String,
    pub target: TargetInfo,
    pub clients: u64,
    /// Queries per second of each of the group's clients (absent in a replay).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub client_rate: Option<f64>,
    pub totals: Totals,
    pub latency: LatencySummary,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub connections: Option<crate::ConnectionSummary>,
}

#[cfg(test)]
mod tests {
    /// Results written before the link's per-second rows had their counters of packets and
    /// bytes in, bytes out, reordered and duplicated packets, and lateness histogram still read:
    /// those fields read 0 (None).
    #[test]
    fn a_link_second_of_older_results_still_reads() {
        let old = r#"{"second":2,"up":{"packets_out":5,"dropped_loss":1,"dropped_queue":0,"dropped_outage":0,
            "queued":0,"queue_delay_p99_ns":0},"down":{"packets_out":5,"dropped_loss":0,"dropped_queue":0,
            "dropped_outage":0,"queued":0,"queue_delay_p99_ns":0},"lateness_p99_ns":9000,"lateness_max_ns":9000,
            "overdue":0}"#;
        let s: LinkSecond = serde_json::from_str(old).unwrap();
        assert_eq!((s.second, s.up.packets_out, s.up.dropped_loss, s.lateness_p99_ns), (2, 5, 1, 9000));
        assert_eq!((s.up.packets_in, s.up.bytes_in, s.up.bytes_out, s.up.reordered, s.up.duplicated), (0, 0, 0, 0, 0));
        assert!(s.lateness.is_none());
        // Written again, without the histogram it does not have.
        assert!(!serde_json::to_string(&s).unwrap().contains("\"lateness\":"));
    }

    use super::*;

    /// A file written before `issued` existed counted the queries issued as `sent`: read back,
    /// they are `issued`, and its equation holds as it did.
    #[test]
    fn older_files_count_sent_as_issued() {
        let old = r#"{"sent": 10, "answered": 8, "timed_out": 1, "failed": 1, "in_flight": 0, "truncated": 0,
            "rcodes": {"NOERROR": 8}, "errors": {"reset": 1}, "unexpected": {}, "bytes_out": 400, "bytes_in": 480}"#;
        let mut t: Totals = serde_json::from_str(old).unwrap();
        assert_eq!((t.issued, t.unsent), (0, 0));
        t.upgrade();
        assert_eq!((t.issued, t.sent), (10, 10));
        assert!(t.balanced());
        // A file of now: unsent queries never left, and nothing moves.
        let mut now = Totals { issued: 10, sent: 7, answered: 6, timed_out: 1, unsent: 3, ..Totals::default() };
        now.upgrade();
        assert_eq!((now.issued, now.sent), (10, 7));
        assert!(now.balanced());
        assert!(!Totals { unsent: 2, ..now }.balanced());
    }
}
