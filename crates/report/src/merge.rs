//! `volley merge`: results of runs made at the same time (several processes or machines)
//! combined into one, exactly (docs/results-schema.md, "Merging runs exactly"): counts added,
//! histograms rebuilt from their sparse form and added bucket by bucket (percentiles recomputed
//! from the merged histogram), series aligned by wall-clock second, derived figures recomputed.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use volley_metrics::{
    ConnectionSummary, GeneratorInfo, GroupSummary, Histogram, LatencySummary, Qps, RunResult, SecondConnections,
    SecondLatency, SecondRow, SparseHistogram, Status, TargetCpu, TargetInfo, Totals, SCHEMA,
};

use crate::input::{MergedPart, NamedRun};
use crate::json::{write_json, ReportError};

/// Why inputs cannot be merged. Every message names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no results to merge")]
    Empty,
    /// A part declares another schema than the others.
    #[error("{file}: unsupported results schema \"{found}\" (this volley merges {SCHEMA})")]
    Schema {
        /// The part's file (or name).
        file: String,
        /// Its `schema`.
        found: String,
    },
    /// A histogram of a part has another precision than the same histogram of the first part,
    /// so the two cannot be added exactly.
    #[error("{file}: {what} histogram has {found} significant figures, {first} has {expected}: cannot merge exactly")]
    Sigfig {
        /// The part's file (or name).
        file: String,
        /// Which histogram (`latency`, `series[3].latency`, ...).
        what: String,
        /// Its precision.
        found: u8,
        /// The first part that had this histogram.
        first: String,
        /// That part's precision.
        expected: u8,
    },
}

/// The outcome of a merge: the merged results, and what each part contributed.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The merged results (`command` is the merge's own command line).
    pub result: RunResult,
    /// One entry per input, in order: its file, command, target, start and the shift of its
    /// series in seconds. Written to the merged file as `merged_from`.
    pub parts: Vec<MergedPart>,
}

fn part_name(r: &NamedRun) -> String {
    r.path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| r.name.clone())
}

/// Adds histograms of the same precision; the first part that had one sets the precision.
struct HistSum {
    what: String,
    h: Option<(Histogram, String)>,
}

impl HistSum {
    fn new(what: impl Into<String>) -> HistSum {
        HistSum { what: what.into(), h: None }
    }

    fn add(&mut self, file: &str, s: &SparseHistogram) -> Result<(), MergeError> {
        let part = Histogram::from_sparse(s);
        match &mut self.h {
            None => self.h = Some((part, file.to_string())),
            Some((h, first)) => {
                if h.sigfig() != part.sigfig() {
                    return Err(MergeError::Sigfig {
                        file: file.to_string(),
                        what: self.what.clone(),
                        found: part.sigfig(),
                        first: first.clone(),
                        expected: h.sigfig(),
                    });
                }
                h.merge(&part);
            }
        }
        Ok(())
    }

    fn summary(self) -> Option<LatencySummary> {
        self.h.map(|(h, _)| LatencySummary::of(&h))
    }
}

fn add_map(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

/// The distinct values in order of first appearance, joined with `sep`.
fn distinct<'a>(values: impl Iterator<Item = &'a str>, sep: &str) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen.join(sep)
}

fn sum_opt<T: Copy + std::iter::Sum<T>>(values: impl Iterator<Item = Option<T>> + Clone) -> Option<T> {
    if values.clone().all(|v| v.is_none()) {
        None
    } else {
        Some(values.flatten().sum())
    }
}

/// Merges runs made at the same time into one, exactly; `command` is recorded as the merged
/// file's `command` (the parts' commands go to [`Merged::parts`]).
///
/// - totals, RCODEs, errors, unexpected responses, bytes and events are added;
/// - the latency, send lateness, schedule lateness, transport wait and handshake histograms
///   (and the transport waits' causes) are rebuilt from their sparse form
///   and added bucket by bucket; count, min, mean, max and percentiles are recomputed from the
///   merged histogram, so they equal those of one run that recorded every value;
/// - series rows are added by wall-clock second: a part that started `d` ms after the earliest
///   is shifted by `round(d / 1000)` seconds (recorded as its `offset_s`; a warning is added
///   when `d` is more than 100 ms away from a whole number of seconds);
/// - `duration_s`/`elapsed_s` span from the earliest start to the last part's end (the
///   longest part for synchronised starts; a warning names a part that started after the
///   others had finished sending), QPS and CPU per answer are recomputed, generator CPU and
///   threads add up, `status` is `interrupted` if any part was, warnings are concatenated;
///   targets and load parameters that differ are listed.
///
/// Refuses parts with another schema and histograms of different precision.
pub fn merge_runs(runs: &[NamedRun], command: Vec<String>) -> Result<Merged, MergeError> {
    let first = runs.first().ok_or(MergeError::Empty)?;
    for r in runs {
        if r.result.schema != SCHEMA {
            return Err(MergeError::Schema { file: part_name(r), found: r.result.schema.clone() });
        }
    }
    let earliest = runs.iter().map(|r| r.result.started_unix_ms).min().unwrap_or(0);
    let earliest_run = runs.iter().find(|r| r.result.started_unix_ms == earliest).unwrap_or(first);

    let mut totals = Totals::default();
    let mut latency = HistSum::new("latency");
    let mut lateness = HistSum::new("send_lateness");
    let mut schedule_lateness = HistSum::new("schedule_lateness");
    let mut service_time = HistSum::new("service_time");
    let mut generator_delay = HistSum::new("generator_delay");
    let mut send_stamps: Option<volley_metrics::SendStamps> = None;
    let mut wait = HistSum::new("transport_wait");
    let mut wait_causes: BTreeMap<String, volley_metrics::WaitCause> = BTreeMap::new();
    let mut peak_on_wire = None;
    let mut events = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut parts = Vec::new();
    let mut cpu_s = 0.0;
    let mut gen_threads = 0;
    let mut status = Status::Complete;
    let (mut duration_s, mut elapsed_s) = (0f64, 0f64);
    let mut rows: Vec<HistSumRow> = Vec::new();
    let mut conns: Option<ConnAcc> = None;
    let mut groups: Vec<GroupSum> = Vec::new();
    let mut target_cpu: BTreeMap<Vec<u32>, f64> = BTreeMap::new();

    for run in runs {
        let r = &run.result;
        let file = part_name(run);
        add_totals(&mut totals, &r.totals);
        add_map(&mut events, &r.events);
        latency.add(&file, &r.latency.histogram)?;
        if let Some(l) = &r.send_lateness {
            lateness.add(&file, &l.histogram)?;
        }
        if let Some(l) = &r.schedule_lateness {
            schedule_lateness.add(&file, &l.histogram)?;
        }
        if let Some(l) = &r.service_time {
            service_time.add(&file, &l.histogram)?;
        }
        if let Some(l) = &r.generator_delay {
            generator_delay.add(&file, &l.histogram)?;
        }
        if let Some(s) = r.send_stamps {
            let acc = send_stamps.get_or_insert_with(Default::default);
            acc.kernel += s.kernel;
            acc.between += s.between;
            acc.fallback += s.fallback;
        }
        if let Some(w) = &r.transport_wait {
            wait.add(&file, &w.wait.histogram)?;
            for (k, c) in &w.causes {
                let acc = wait_causes.entry(k.clone()).or_default();
                acc.queries += c.queries;
                acc.total_s += c.total_s;
            }
        }
        // Parts ran at the same time: their peaks add up (an upper bound, as across workers).
        if let Some(p) = r.peak_on_wire {
            *peak_on_wire.get_or_insert(0) += p;
        }
        cpu_s += r.generator.cpu_s;
        gen_threads += r.generator.threads;
        if let Some(c) = &r.target_cpu {
            // Parts that measured the same processes saw the same CPU time over the same
            // seconds: the longest reading counts once. Different processes add up.
            let mut pids = c.pids.clone();
            pids.sort_unstable();
            let seen = target_cpu.entry(pids).or_insert(0.0);
            *seen = f64::max(*seen, c.cpu_s);
        }
        if r.status == Status::Interrupted {
            status = Status::Interrupted;
        }
        // The merged run lasts from the earliest start to the last part's end, by the wall
        // clock: with synchronised starts that is the longest part.
        let start_s = (r.started_unix_ms - earliest) as f64 / 1000.0;
        duration_s = duration_s.max(start_s + r.duration_s);
        elapsed_s = elapsed_s.max(start_s + r.elapsed_s);
        warnings.extend(r.warnings.iter().cloned());
        if let Some(c) = &r.connections {
            conns.get_or_insert_with(ConnAcc::default).add(&file, c)?;
        }
        for g in &r.groups {
            let k = match groups.iter().position(|a: &GroupSum| a.first.name == g.name) {
                Some(k) => k,
                None => {
                    groups.push(GroupSum::new(g));
                    groups.len() - 1
                }
            };
            groups[k].add(&file, g)?;
        }

        let delta = r.started_unix_ms - earliest;
        let offset = ((delta + 500) / 1000) as u32;
        let residual = (delta as i64 - offset as i64 * 1000).abs();
        if residual > 100 {
            warnings.push(format!(
                "merge: {file} started {delta} ms after the earliest part, not a whole number of seconds: its \
                 series was shifted by {offset} s, so its rows are misaligned by {residual} ms"
            ));
        }
        for row in &r.series {
            let k = (row.second + offset) as usize;
            if rows.len() <= k {
                rows.resize_with(k + 1, HistSumRow::default);
            }
            rows[k].add(&file, k, row)?;
            if let (Some(cpu), Some(t)) = (row.target_cpu_s, &r.target_cpu) {
                // As for the totals: the same processes once (the larger reading), others added.
                let mut pids = t.pids.clone();
                pids.sort_unstable();
                let seen = rows[k].target.entry(pids).or_insert(0.0);
                *seen = f64::max(*seen, cpu);
            }
        }
        parts.push(MergedPart {
            file,
            command: r.command.clone(),
            target: r.target.clone(),
            started_unix_ms: r.started_unix_ms,
            offset_s: offset,
            status: match r.status {
                Status::Complete => "complete".into(),
                Status::Interrupted => "interrupted".into(),
            },
            part: r.part.as_ref().map(|p| format!("{}/{}", p.index, p.count)),
        });
    }

    warnings.extend(not_simultaneous(runs, duration_s));
    warnings.extend(missing_parts(runs));
    let series: Vec<SecondRow> = rows.into_iter().enumerate().map(|(k, acc)| acc.row(k as u32)).collect();
    let latency = latency.summary().unwrap_or_default();
    let qps = if duration_s > 0.0 {
        Qps {
            issued: totals.issued as f64 / duration_s,
            sent: totals.sent as f64 / duration_s,
            answered: totals.answered as f64 / duration_s,
        }
    } else {
        Qps::default()
    };
    let all = || runs.iter().map(|r| &r.result);
    let target = TargetInfo {
        url: distinct(all().map(|r| r.target.url.as_str()), ","),
        transport: distinct(all().map(|r| r.target.transport.as_str()), ","),
        address: distinct(all().map(|r| r.target.address.as_str()), ","),
    };
    // Start from the earliest part so that fields added to the schema later keep a value;
    // every field known here is then combined from all parts.
    let mut load = earliest_run.result.load.clone();
    load.model = distinct(all().map(|r| r.load.model.as_str()), ",");
    load.concurrency = sum_opt(all().map(|r| r.load.concurrency));
    load.rate = sum_opt(all().map(|r| r.load.rate));
    load.clients = sum_opt(all().map(|r| r.load.clients));
    load.client_rate = if all().all(|r| r.load.client_rate == load.client_rate) { load.client_rate } else { None };
    load.duration_s = all().filter_map(|r| r.load.duration_s).reduce(f64::max);
    load.count = sum_opt(all().map(|r| r.load.count));
    load.timeout_ms = all().map(|r| r.load.timeout_ms).max().unwrap_or(0);
    load.threads = all().map(|r| r.load.threads).sum();
    load.connections = all().map(|r| r.load.connections).sum();
    load.queries = distinct(all().map(|r| r.load.queries.as_str()), "; ");
    // The UDP retry where every part had the same (else none); TC fallback where any had it.
    let retry = |r: &RunResult| (r.load.udp_retry_ms, r.load.udp_tries);
    let first = retry(&earliest_run.result);
    (load.udp_retry_ms, load.udp_tries) = if all().all(|r| retry(r) == first) { first } else { (None, None) };
    load.tc_fallback = all().any(|r| r.load.tc_fallback);
    // Start from the earliest part so that fields added to the schema later keep a value;
    // every field known here is then combined from all parts.
    let mut result = earliest_run.result.clone();
    result.link = merge_links(runs.iter().map(|r| r.result.link.as_ref()));
    // The parts' query traces on the earliest part's clock (their issue times from their own
    // starts), the first of them by issue time.
    let shifted: Vec<volley_metrics::QueryTrace> = runs
        .iter()
        .filter_map(|r| {
            let mut t = r.result.query_trace.clone()?;
            let by = r.result.started_unix_ms.saturating_sub(earliest) * 1_000_000;
            t.queries.iter_mut().for_each(|q| q.issued_ns += by);
            Some(t)
        })
        .collect();
    result.query_trace = volley_metrics::QueryTrace::merge(&shifted.iter().collect::<Vec<_>>());
    result.schema = SCHEMA.to_string();
    result.volley_version = env!("CARGO_PKG_VERSION").to_string();
    result.status = status;
    result.command = command;
    result.started_at = earliest_run.result.started_at.clone();
    result.started_unix_ms = earliest;
    result.duration_s = duration_s;
    result.elapsed_s = elapsed_s;
    // Each part set itself up before its own clock: the longest set-up.
    result.setup_s = all().filter_map(|r| r.setup_s).reduce(f64::max);
    result.target = target;
    result.load = load;
    result.qps = qps;
    result.latency = latency;
    result.send_lateness = lateness.summary();
    result.schedule_lateness = schedule_lateness.summary();
    result.service_time = service_time.summary();
    result.generator_delay = generator_delay.summary();
    result.send_stamps = send_stamps;
    result.transport_wait =
        wait.summary().map(|w| volley_metrics::TransportWait { queries: w.count, wait: w, causes: wait_causes });
    result.peak_on_wire = peak_on_wire;
    result.generator = GeneratorInfo {
        cpu_s,
        cpu_us_per_answer: if totals.answered > 0 { cpu_s * 1e6 / totals.answered as f64 } else { 0.0 },
        threads: gen_threads,
    };
    result.target_cpu = (!target_cpu.is_empty()).then(|| {
        let cpu_s: f64 = target_cpu.values().sum();
        let mut pids: Vec<u32> = target_cpu.keys().flatten().copied().collect();
        pids.sort_unstable();
        pids.dedup();
        TargetCpu::new(pids, cpu_s, totals.answered)
    });
    // The parts may have run on different machines: the one that lost the most.
    result.host = all().filter_map(|r| r.host).max_by(|a, b| a.steal_share.total_cmp(&b.steal_share));
    result.connections = conns.map(ConnAcc::summary);
    if let Some(d) = result.connections.as_mut().and_then(|c| c.draining.as_mut()) {
        // The merged series adds the parts' draining connections second by second.
        d.peak = series_peak(&series, |c| c.draining);
    }
    result.groups = groups.into_iter().map(GroupSum::summary).collect();
    result.totals = totals;
    result.series = series;
    result.events = events;
    result.warnings = warnings;
    // A merge is no part; a coordinator records its coordination itself (`scale`).
    result.part = None;
    result.scale = None;
    Ok(Merged { result, parts })
}

/// The largest value `f` takes over the connection rows of `series` (None without any).
fn series_peak(series: &[SecondRow], f: impl Fn(&volley_metrics::SecondConnections) -> u64) -> Option<u64> {
    series.iter().filter_map(|r| r.connections.as_ref()).map(f).max()
}

/// A warning for each part that started after every part that started before it had finished
/// sending: such parts were not run at the same time, so the merged rates are averages over
/// a span in which they did not all send.
/// The parts of a split run (`--part I/N`) that are not among the files merged, or are there
/// twice: the merge then holds another share of the load than the run's.
fn missing_parts(runs: &[NamedRun]) -> Vec<String> {
    let parts: Vec<&volley_metrics::PartInfo> = runs.iter().filter_map(|r| r.result.part.as_ref()).collect();
    let Some(n) = parts.first().map(|p| p.count).filter(|&n| n > 1) else { return Vec::new() };
    if parts.len() != runs.len() || parts.iter().any(|p| p.count != n) {
        return vec!["merge: the files are not all parts of one split run (their --part counts differ)".into()];
    }
    let mut seen = vec![0u32; n as usize];
    for p in &parts {
        if let Some(s) = seen.get_mut(p.index as usize) {
            *s += 1;
        }
    }
    let missing: Vec<String> = (0..n).filter(|&i| seen[i as usize] == 0).map(|i| format!("{i}/{n}")).collect();
    let twice: Vec<String> = (0..n).filter(|&i| seen[i as usize] > 1).map(|i| format!("{i}/{n}")).collect();
    let mut out = Vec::new();
    if !missing.is_empty() {
        out.push(format!("merge: incomplete: parts {} of the split run are missing", missing.join(", ")));
    }
    if !twice.is_empty() {
        out.push(format!("merge: parts {} of the split run are counted more than once", twice.join(", ")));
    }
    out
}

fn not_simultaneous(runs: &[NamedRun], span_s: f64) -> Vec<String> {
    let mut order: Vec<&NamedRun> = runs.iter().collect();
    order.sort_by_key(|r| r.result.started_unix_ms);
    let end_ms = |r: &NamedRun| r.result.started_unix_ms as f64 + r.result.duration_s * 1000.0;
    let mut warnings = Vec::new();
    let mut last_end: Option<f64> = None;
    for r in order {
        let start = r.result.started_unix_ms as f64;
        if let Some(end) = last_end.filter(|end| start >= *end) {
            warnings.push(format!(
                "merge: {} started {:.0} ms after the other parts had finished sending: these runs were not made at \
                 the same time, and the merged rates are averages over {span_s:.1} s in which they did not all send",
                part_name(r),
                start - end
            ));
        }
        last_end = Some(last_end.unwrap_or(0.0).max(end_ms(r)));
    }
    warnings
}

fn add_totals(into: &mut Totals, t: &Totals) {
    into.issued += t.issued;
    into.sent += t.sent;
    into.answered += t.answered;
    into.timed_out += t.timed_out;
    into.failed += t.failed;
    into.unsent += t.unsent;
    add_map(&mut into.unsent_reasons, &t.unsent_reasons);
    into.in_flight += t.in_flight;
    into.truncated += t.truncated;
    into.bytes_out += t.bytes_out;
    into.bytes_in += t.bytes_in;
    into.wire.add(&t.wire);
    add_map(&mut into.rcodes, &t.rcodes);
    add_map(&mut into.errors, &t.errors);
    add_map(&mut into.unexpected, &t.unexpected);
    add_map(&mut into.tries, &t.tries);
}

/// One group of clients (a profile on a transport) added up across parts, by name.
struct GroupSum {
    first: GroupSummary,
    clients: u64,
    totals: Totals,
    latency: HistSum,
    conns: Option<ConnAcc>,
}

impl GroupSum {
    fn new(g: &GroupSummary) -> GroupSum {
        GroupSum {
            first: g.clone(),
            clients: 0,
            totals: Totals::default(),
            latency: HistSum::new(format!("groups[{}].latency", g.name)),
            conns: None,
        }
    }

    fn add(&mut self, file: &str, g: &GroupSummary) -> Result<(), MergeError> {
        self.clients += g.clients;
        add_totals(&mut self.totals, &g.totals);
        self.latency.add(file, &g.latency.histogram)?;
        if let Some(c) = &g.connections {
            self.conns.get_or_insert_with(ConnAcc::default).add(file, c)?;
        }
        Ok(())
    }

    fn summary(self) -> GroupSummary {
        GroupSummary {
            clients: self.clients,
            totals: self.totals,
            latency: self.latency.summary().unwrap_or_default(),
            connections: self.conns.map(ConnAcc::summary),
            ..self.first
        }
    }
}

/// One merged second of the series.
#[derive(Default)]
struct HistSumRow {
    row: SecondRow,
    h: Option<(Histogram, String)>,
    conns: Option<SecondConnections>,
    /// The target's CPU seconds of this second, by the processes measured.
    target: BTreeMap<Vec<u32>, f64>,
}

impl HistSumRow {
    fn add(&mut self, file: &str, k: usize, r: &SecondRow) -> Result<(), MergeError> {
        let m = &mut self.row;
        m.issued += r.issued;
        m.sent += r.sent;
        m.answered += r.answered;
        m.timed_out += r.timed_out;
        m.failed += r.failed;
        m.unsent += r.unsent;
        add_map(&mut m.unsent_reasons, &r.unsent_reasons);
        m.truncated += r.truncated;
        add_map(&mut m.rcodes, &r.rcodes);
        add_map(&mut m.errors, &r.errors);
        add_map(&mut m.unexpected, &r.unexpected);
        // A second without answers stores an empty histogram whose precision says nothing.
        if !r.latency.histogram.is_empty() {
            let part = Histogram::from_sparse(&r.latency.histogram);
            match &mut self.h {
                None => self.h = Some((part, file.to_string())),
                Some((h, first)) => {
                    if h.sigfig() != part.sigfig() {
                        return Err(MergeError::Sigfig {
                            file: file.to_string(),
                            what: format!("series[{k}].latency"),
                            found: part.sigfig(),
                            first: first.clone(),
                            expected: h.sigfig(),
                        });
                    }
                    h.merge(&part);
                }
            }
        }
        if let Some(c) = &r.connections {
            self.conns.get_or_insert_with(SecondConnections::default).add(c);
        }
        Ok(())
    }

    fn row(self, second: u32) -> SecondRow {
        let mut row = self.row;
        row.second = second;
        let h = self.h.map(|(h, _)| h).unwrap_or_else(|| Histogram::new(2));
        row.latency = SecondLatency::of(&h);
        row.connections = self.conns;
        row.target_cpu_s = (!self.target.is_empty()).then(|| self.target.values().sum());
        row
    }
}

/// Connection summaries added up.
struct ConnAcc {
    sum: ConnectionSummary,
    tcp: HistSum,
    tls: HistSum,
    quic: HistSum,
    total: HistSum,
    rtt: HistSum,
    ratio: HistSum,
}

impl Default for ConnAcc {
    fn default() -> Self {
        ConnAcc {
            sum: ConnectionSummary::default(),
            tcp: HistSum::new("connections.handshake_tcp"),
            tls: HistSum::new("connections.handshake_tls"),
            quic: HistSum::new("connections.handshake_quic"),
            total: HistSum::new("connections.handshake_total"),
            rtt: HistSum::new("connections.rtt"),
            ratio: HistSum::new("connections.handshake_rtt_ratio_milli"),
        }
    }
}

impl ConnAcc {
    fn add(&mut self, file: &str, c: &ConnectionSummary) -> Result<(), MergeError> {
        let s = &mut self.sum;
        s.opened += c.opened;
        s.failed += c.failed;
        s.in_progress += c.in_progress;
        s.resumed += c.resumed;
        s.quic_tokens += c.quic_tokens;
        s.early_data_offered += c.early_data_offered;
        s.early_data_accepted += c.early_data_accepted;
        add_map(&mut s.errors, &c.errors);
        add_map(&mut s.closed, &c.closed);
        if let Some(d) = &c.draining {
            let sd = s.draining.get_or_insert_with(Default::default);
            sd.started += d.started;
            add_map(&mut sd.ended, &d.ended);
        }
        for (k, m) in &c.negotiated {
            add_map(s.negotiated.entry(k.clone()).or_default(), m);
        }
        for (acc, h) in [
            (&mut self.tcp, &c.handshake_tcp),
            (&mut self.tls, &c.handshake_tls),
            (&mut self.quic, &c.handshake_quic),
            (&mut self.total, &c.handshake_total),
            (&mut self.rtt, &c.rtt),
            (&mut self.ratio, &c.handshake_rtt_ratio_milli),
        ] {
            if let Some(h) = h {
                acc.add(file, &h.histogram)?;
            }
        }
        Ok(())
    }

    fn summary(self) -> ConnectionSummary {
        let mut s = self.sum;
        s.handshake_tcp = self.tcp.summary();
        s.handshake_tls = self.tls.summary();
        s.handshake_quic = self.quic.summary();
        s.handshake_total = self.total.summary();
        s.rtt = self.rtt.summary();
        s.handshake_rtt_ratio_milli = self.ratio.summary();
        s
    }
}

/// Writes the merged results to `path` atomically (temporary file in the same directory,
/// fsync, rename), as `volley.results/1` with one more top-level field, `merged_from`: the
/// list of parts (file, command, target, started_unix_ms, offset_s, status).
pub fn write_merged_file(m: &Merged, path: &Path) -> Result<(), ReportError> {
    let mut body = Vec::new();
    let io_err = |op: &'static str| move |source: io::Error| ReportError::Io { path: path.to_path_buf(), op, source };
    write_json(&m.result, &mut body).map_err(io_err("write results"))?;
    // `write_json` ends with "\n}\n": add the field before the closing brace, indented like
    // the rest of the document.
    let parts = serde_json::to_string_pretty(&m.parts).map_err(|e| io_err("write results")(e.into()))?;
    let parts = parts.replace('\n', "\n  ");
    let end = body.iter().rposition(|b| *b == b'}').unwrap_or(body.len());
    let mut head = body[..end].to_vec();
    while head.last().is_some_and(|b| b.is_ascii_whitespace()) {
        head.pop();
    }
    head.extend_from_slice(format!(",\n  \"merged_from\": {parts}\n}}\n").as_bytes());
    write_atomic(path, &head)
}

/// Writes `bytes` to `path` atomically (see [`volley_atomic`]).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    if path.is_dir() {
        return Err(ReportError::IsDirectory { path: path.to_path_buf() });
    }
    volley_atomic::write(path, bytes).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        op: "write",
        source,
    })
}

/// Runs behind links of the same spec and seed: their counters added, their histograms merged
/// (exact). Otherwise (a part without a link, or another link) no `link`: each part had its
/// own, and one figure for all would describe none of them.
fn merge_links<'a>(
    mut links: impl Iterator<Item = Option<&'a volley_metrics::LinkInfo>>,
) -> Option<volley_metrics::LinkInfo> {
    use volley_metrics::{Histogram, LatencySummary, LinkDirection};
    let merge_h = |a: &LatencySummary, b: &LatencySummary| {
        let mut h = Histogram::from_sparse(&a.histogram);
        h.merge(&Histogram::from_sparse(&b.histogram));
        LatencySummary::of(&h)
    };
    let add = |a: &mut LinkDirection, b: &LinkDirection| {
        a.counts.add(&b.counts);
        a.queue_delay = match (&a.queue_delay, &b.queue_delay) {
            (Some(x), Some(y)) => Some(merge_h(x, y)),
            (x, y) => x.clone().or_else(|| y.clone()),
        };
    };
    let mut acc = links.next()??.clone();
    for l in links {
        let l = l?;
        if (&l.spec, l.seed) != (&acc.spec, acc.seed) {
            return None;
        }
        add(&mut acc.up, &l.up);
        add(&mut acc.down, &l.down);
        acc.lateness = merge_h(&acc.lateness, &l.lateness);
        acc.held_at_end += l.held_at_end;
        acc.forwarder_cpu_s += l.forwarder_cpu_s;
        acc.realtime &= l.realtime;
        volley_metrics::LinkSecond::add_series(&mut acc.series, &l.series);
    }
    Some(acc)
}

#[cfg(test)]
mod tests {
    use volley_metrics::{Histogram, LatencySummary, LinkCounters, LinkDirection, LinkInfo, LinkSecond, LinkSecondDir};

    use super::merge_links;

    fn link(spec: &str, seed: u64, lost: u64, late_us: u64) -> LinkInfo {
        let mut h = Histogram::new(3);
        h.record(late_us * 1000);
        let counts =
            LinkCounters { packets_in: 100, packets_out: 100 - lost, dropped_loss: lost, ..Default::default() };
        let up = LinkDirection { counts, ..Default::default() };
        let second = |s, lost: u64| {
            let mut late = Histogram::new(2);
            late.record_n(late_us * 1000, 10);
            LinkSecond {
                second: s,
                up: LinkSecondDir {
                    packets_in: 10,
                    bytes_in: 800,
                    packets_out: 10 - lost.min(10),
                    bytes_out: 80 * (10 - lost.min(10)),
                    dropped_loss: lost,
                    queued: 1,
                    reordered: 2,
                    duplicated: 1,
                    ..Default::default()
                },
                lateness_p99_ns: late.quantile(0.99),
                lateness_max_ns: late.max(),
                lateness: Some(volley_metrics::SecondLatency::of(&late)),
                ..Default::default()
            }
        };
        let series = vec![second(0, lost), second(lost, 1)];
        let lateness = LatencySummary::of(&h);
        LinkInfo { spec: spec.into(), seed, up, lateness, realtime: true, series, ..Default::default() }
    }

    #[test]
    fn links_of_one_spec_and_seed_add_up_others_are_left_out() {
        let (a, b) = (link("4g", 1, 3, 10), link("4g", 1, 5, 50));
        let m = merge_links([Some(&a), Some(&b)].into_iter()).unwrap();
        assert_eq!((m.up.counts.packets_in, m.up.counts.packets_out, m.up.counts.dropped_loss), (200, 192, 8));
        assert_eq!(m.lateness.count, 2);
        assert!(m.lateness.max_ns >= 50_000 && m.lateness.min_ns <= 10_000);
        // Per second: counts and queues add, second by second; the lateness is the worse.
        let s: Vec<_> =
            m.series.iter().map(|s| (s.second, s.up.dropped_loss, s.up.queued, s.lateness_p99_ns)).collect();
        let p99 = |us: u64| {
            let mut h = Histogram::new(2);
            h.record(us * 1000);
            h.quantile(0.99)
        };
        assert_eq!(s, [(0, 8, 2, p99(50)), (3, 1, 1, p99(10)), (5, 1, 1, p99(50))]);
        // The counters added later add too, and the lateness histograms merge: second 0's
        // holds both parts' packets, its p99 the merged one's.
        let s0 = &m.series[0];
        let up =
            (s0.up.packets_in, s0.up.bytes_in, s0.up.packets_out, s0.up.bytes_out, s0.up.reordered, s0.up.duplicated);
        assert_eq!(up, (20, 1600, 12, 960, 4, 2));
        let late = s0.lateness.as_ref().unwrap();
        assert_eq!(Histogram::from_sparse(&late.histogram).count(), 20);
        assert_eq!((late.p50_ns, s0.lateness_max_ns), (p99(10), p99(50)));
        // A second of older results (no histogram): the p99 the worse of the two.
        let mut old = link("4g", 1, 3, 70);
        old.series.iter_mut().for_each(|s| s.lateness = None);
        let m = merge_links([Some(&a), Some(&old)].into_iter()).unwrap();
        assert_eq!((m.series[0].lateness_p99_ns, m.series[0].lateness.is_none()), (p99(70), true));
        let other_seed = link("4g", 2, 0, 1);
        assert!(merge_links([Some(&a), Some(&other_seed)].into_iter()).is_none());
        assert!(merge_links([Some(&a), None].into_iter()).is_none());
        assert!(merge_links([None, Some(&a)].into_iter()).is_none());
    }
}
