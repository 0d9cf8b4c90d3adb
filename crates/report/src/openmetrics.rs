//! OpenMetrics (Prometheus) text exposition of a run: counters of queries by fate, RCODEs,
//! errors and unexpected responses, bytes, connection events, and the latency histogram as
//! cumulative `le` buckets at fixed bounds ([`LATENCY_BOUNDS_NS`]). [`write_openmetrics`]
//! writes it for a finished run; [`progress_metrics`] for a run in progress, from its last
//! complete second and running totals ([`LiveTotals`]); [`write_metrics_file_atomic`] puts
//! either into a file a scraper (node_exporter's textfile collector, a sidecar) reads.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use volley_metrics::{
    Histogram, LatencySummary, Progress, RunResult, SecondConnections, SecondRow, SparseHistogram, Status,
};

use crate::json::ReportError;

/// Upper bounds of the latency histogram buckets (`le`), in ns: 50 µs to 10 s, 1-2.5-5 steps.
pub const LATENCY_BOUNDS_NS: [u64; 18] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
];

/// Escapes a label value (`\`, `"`, line feed).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Seconds from nanoseconds, as OpenMetrics wants them.
fn secs(ns: u64) -> String {
    format_float(ns as f64 / 1e9)
}

fn format_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// A small writer of metric families.
struct Om<'a, W: Write> {
    w: &'a mut W,
}

impl<W: Write> Om<'_, W> {
    fn family(&mut self, name: &str, kind: &str, unit: Option<&str>, help: &str) -> io::Result<()> {
        writeln!(self.w, "# TYPE {name} {kind}")?;
        if let Some(u) = unit {
            writeln!(self.w, "# UNIT {name} {u}")?;
        }
        writeln!(self.w, "# HELP {name} {help}")
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) -> io::Result<()> {
        if labels.is_empty() {
            writeln!(self.w, "{name} {value}")
        } else {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", esc(v))).collect();
            writeln!(self.w, "{name}{{{}}} {value}", l.join(","))
        }
    }

    fn counter_map(&mut self, name: &str, label: &str, help: &str, m: &BTreeMap<String, u64>) -> io::Result<()> {
        self.family(name, "counter", None, help)?;
        for (k, v) in m {
            self.sample(&format!("{name}_total"), &[(label, k)], v)?;
        }
        Ok(())
    }

    /// A latency summary's histogram family (its sum from its mean).
    fn summary(&mut self, name: &str, help: &str, l: &LatencySummary) -> io::Result<()> {
        self.histogram(name, help, &l.histogram, l.mean_ns as f64 * l.count as f64)
    }

    /// The histogram family: cumulative buckets at [`LATENCY_BOUNDS_NS`], `+Inf`, count, sum.
    fn histogram(&mut self, name: &str, help: &str, h: &SparseHistogram, sum_ns: f64) -> io::Result<()> {
        self.family(name, "histogram", Some("seconds"), help)?;
        let count: u64 = h.iter().map(|b| b.1).sum();
        for (bound, n) in cumulative_buckets(h) {
            self.sample(&format!("{name}_bucket"), &[("le", &secs(bound))], n)?;
        }
        self.sample(&format!("{name}_bucket"), &[("le", "+Inf")], count)?;
        self.sample(&format!("{name}_count"), &[], count)?;
        self.sample(&format!("{name}_sum"), &[], format_float(sum_ns / 1e9))
    }
}

/// For each bound of [`LATENCY_BOUNDS_NS`], how many values of the histogram are at most that
/// bound. A bucket counts when its highest value is at most the bound, so a bucket that
/// straddles a bound counts above it: the error is within the histogram's precision.
pub fn cumulative_buckets(h: &SparseHistogram) -> Vec<(u64, u64)> {
    LATENCY_BOUNDS_NS.iter().map(|&b| (b, h.iter().filter(|(v, _)| *v <= b).map(|(_, n)| n).sum())).collect()
}

/// Writes the OpenMetrics text of a finished (or interrupted) run, ending with `# EOF`.
///
/// Families: `volley_run` (info: target, transport, model, status), `volley_queries`
/// (counter by `fate`: issued, sent (left the generator), answered, timed_out, failed,
/// unsent), `volley_unsent` (by `why`), `volley_in_flight` (gauge),
/// `volley_answers` (by `rcode`), `volley_truncated`, `volley_errors` (by `kind`),
/// `volley_unexpected` (by `kind`), `volley_bytes` (by `direction`: out, in),
/// `volley_wire_bytes` and `volley_wire_packets` (by `direction`; when the run has `totals.wire`),
/// `volley_latency_seconds` (histogram), `volley_service_time_seconds` and
/// `volley_generator_delay_seconds` (histograms) and `volley_send_stamps` (by `clock`: kernel,
/// volley) where the run has them, `volley_connections` (by `event`: opened, failed,
/// resumed; quic_token where a handshake presented one), `volley_connections_in_progress` (gauge) and `volley_connections_closed` (by
/// `how`) for connection-based transports,
/// `volley_generator_cpu_seconds`, `volley_elapsed_seconds` (gauge).
pub fn write_openmetrics(r: &RunResult, w: &mut impl Write) -> io::Result<()> {
    let mut om = Om { w };
    let status = match r.status {
        Status::Complete => "complete",
        Status::Interrupted => "interrupted",
    };
    om.family("volley_run", "info", None, "The run: target, transport, load model and how it ended.")?;
    om.sample(
        "volley_run_info",
        &[
            ("target", &r.target.url),
            ("transport", &r.target.transport),
            ("model", &r.load.model),
            ("status", status),
            ("version", &r.volley_version),
        ],
        1,
    )?;
    let t = &r.totals;
    om.family("volley_queries", "counter", None, "Queries issued, sent (left the generator), and their fates.")?;
    for (fate, n) in [
        ("issued", t.issued),
        ("sent", t.sent),
        ("answered", t.answered),
        ("timed_out", t.timed_out),
        ("failed", t.failed),
        ("unsent", t.unsent),
    ] {
        om.sample("volley_queries_total", &[("fate", fate)], n)?;
    }
    om.counter_map("volley_unsent", "why", "Queries that never left the generator, by why.", &t.unsent_reasons)?;
    om.family("volley_in_flight", "gauge", None, "Queries without a fate yet.")?;
    om.sample("volley_in_flight", &[], t.in_flight)?;
    om.counter_map("volley_answers", "rcode", "Answers by RCODE.", &t.rcodes)?;
    om.family("volley_truncated", "counter", None, "Answers with the TC bit set.")?;
    om.sample("volley_truncated_total", &[], t.truncated)?;
    om.counter_map("volley_errors", "kind", "Failed queries by error kind.", &t.errors)?;
    om.counter_map("volley_unexpected", "kind", "Responses that matched no query in flight.", &t.unexpected)?;
    om.family("volley_bytes", "counter", Some("bytes"), "DNS message bytes written and read.")?;
    om.sample("volley_bytes_total", &[("direction", "out")], t.bytes_out)?;
    om.sample("volley_bytes_total", &[("direction", "in")], t.bytes_in)?;
    if !t.wire.is_empty() {
        let w = &t.wire;
        om.family(
            "volley_wire_bytes",
            "counter",
            Some("bytes"),
            "Bytes on the wire, IP and UDP/TCP headers included.",
        )?;
        om.sample("volley_wire_bytes_total", &[("direction", "out")], w.bytes_out)?;
        om.sample("volley_wire_bytes_total", &[("direction", "in")], w.bytes_in)?;
        om.family("volley_wire_packets", "counter", None, "Packets on the wire.")?;
        om.sample("volley_wire_packets_total", &[("direction", "out")], w.packets_out)?;
        om.sample("volley_wire_packets_total", &[("direction", "in")], w.packets_in)?;
    }
    om.summary("volley_latency_seconds", "Response time of answered queries.", &r.latency)?;
    if let Some(l) = r.service_time.as_ref().filter(|l| l.count > 0) {
        om.summary(
            "volley_service_time_seconds",
            "Service time of answered queries: from the query's departure to its answer's arrival.",
            l,
        )?;
    }
    if let Some(l) = r.generator_delay.as_ref().filter(|l| l.count > 0) {
        om.summary(
            "volley_generator_delay_seconds",
            "The generator's delay of each query that left: from its issue or schedule to its departure.",
            l,
        )?;
    }
    if let Some(s) = r.send_stamps {
        om.family("volley_send_stamps", "counter", None, "Queries that left, by what timed their departure.")?;
        om.sample("volley_send_stamps_total", &[("clock", "kernel")], s.kernel)?;
        om.sample("volley_send_stamps_total", &[("clock", "between")], s.between)?;
        om.sample("volley_send_stamps_total", &[("clock", "volley")], s.fallback)?;
    }
    if let Some(c) = &r.connections {
        om.family("volley_connections", "counter", None, "Connection events.")?;
        for (ev, n) in [("opened", c.opened), ("failed", c.failed), ("resumed", c.resumed)] {
            om.sample("volley_connections_total", &[("event", ev)], n)?;
        }
        if c.quic_tokens > 0 {
            om.sample("volley_connections_total", &[("event", "quic_token")], c.quic_tokens)?;
        }
        om.family("volley_connections_in_progress", "gauge", None, "Connection attempts without a fate yet.")?;
        om.sample("volley_connections_in_progress", &[], c.in_progress)?;
        if let Some(d) = &c.draining {
            om.counter_map(
                "volley_connections_drained",
                "how",
                "Connections that drained their outstanding queries after taking no more, by how the drain ended.",
                &d.ended,
            )?;
        }
        om.counter_map(
            "volley_connections_closed",
            "how",
            "Connections closed, by who closed them and how.",
            &c.closed,
        )?;
    }
    om.family("volley_generator_cpu_seconds", "counter", Some("seconds"), "CPU time of the generator's threads.")?;
    om.sample("volley_generator_cpu_seconds_total", &[], format_float(r.generator.cpu_s))?;
    if let Some(c) = &r.target_cpu {
        om.family(
            "volley_target_cpu_seconds",
            "counter",
            Some("seconds"),
            "CPU time of the target's processes over the run (--target-pid).",
        )?;
        om.sample("volley_target_cpu_seconds_total", &[], format_float(c.cpu_s))?;
    }
    if let Some(s) = &r.scale {
        om.family("volley_scale_parts", "gauge", None, "Parts of a split run, by whether their results were merged.")?;
        let merged = s.part_list.iter().filter(|p| p.status == "merged").count();
        om.sample("volley_scale_parts", &[("state", "merged")], merged)?;
        om.sample("volley_scale_parts", &[("state", "missing")], s.part_list.len() - merged)?;
        om.family("volley_scale_missing_share", "gauge", None, "Share of the run's load of the parts missing.")?;
        om.sample("volley_scale_missing_share", &[], format_float(s.missing_share))?;
        if let Some(k) = s.start_skew_ns {
            om.family(
                "volley_scale_start_skew_seconds",
                "gauge",
                Some("seconds"),
                "The latest part's actual start minus the earliest's, on the coordinator's clock.",
            )?;
            om.sample("volley_scale_start_skew_seconds", &[], format_float(k as f64 / 1e9))?;
        }
    }
    if let Some(l) = &r.link {
        om.family(
            "volley_link_packets",
            "counter",
            None,
            "Packets of the emulated link (--link) by direction and fate: in, out, or dropped by loss, queue or outage.",
        )?;
        for (dir, d) in [("up", &l.up.counts), ("down", &l.down.counts)] {
            for (fate, n) in [
                ("in", d.packets_in),
                ("out", d.packets_out),
                ("dropped_loss", d.dropped_loss),
                ("dropped_queue", d.dropped_queue),
                ("dropped_outage", d.dropped_outage),
            ] {
                om.sample("volley_link_packets_total", &[("direction", dir), ("fate", fate)], n)?;
            }
        }
        om.summary(
            "volley_link_lateness_seconds",
            "How late the link's emulator sent each packet against its due time.",
            &l.lateness,
        )?;
    }
    om.family("volley_elapsed_seconds", "gauge", Some("seconds"), "Time since the run started.")?;
    om.sample("volley_elapsed_seconds", &[], format_float(r.elapsed_s))?;
    if let Some(setup) = r.setup_s {
        om.family(
            "volley_setup_seconds",
            "gauge",
            Some("seconds"),
            "Set-up before the run's clock started: sockets, connections opened at the start.",
        )?;
        om.sample("volley_setup_seconds", &[], format_float(setup))?;
    }
    writeln!(om.w, "# EOF")
}

/// Running totals of a run in progress, built from the complete seconds the collector hands
/// out ([`Progress`]). Latency is the merge of the per-second histograms (2 significant
/// figures, 1 %), exact up to that precision.
#[derive(Debug, Clone)]
pub struct LiveTotals {
    /// Complete seconds absorbed.
    pub seconds: u32,
    /// Queries issued.
    pub issued: u64,
    /// Queries that left the generator.
    pub sent: u64,
    /// Fates so far.
    pub answered: u64,
    /// Fates so far.
    pub timed_out: u64,
    /// Fates so far.
    pub failed: u64,
    /// Fates so far.
    pub unsent: u64,
    /// Answers with TC=1.
    pub truncated: u64,
    /// Answers by RCODE.
    pub rcodes: BTreeMap<String, u64>,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
    /// Unexpected responses by kind.
    pub unexpected: BTreeMap<String, u64>,
    /// Connection events.
    pub connections: Option<SecondConnections>,
    /// The target's CPU seconds so far (runs with `--target-pid`).
    pub target_cpu_s: Option<f64>,
    latency: Histogram,
}

impl Default for LiveTotals {
    fn default() -> Self {
        LiveTotals {
            seconds: 0,
            issued: 0,
            sent: 0,
            answered: 0,
            timed_out: 0,
            failed: 0,
            unsent: 0,
            truncated: 0,
            rcodes: BTreeMap::new(),
            errors: BTreeMap::new(),
            unexpected: BTreeMap::new(),
            connections: None,
            target_cpu_s: None,
            latency: Histogram::new(2),
        }
    }
}

impl LiveTotals {
    /// Empty totals.
    pub fn new() -> LiveTotals {
        LiveTotals::default()
    }

    /// Adds one complete second (call once per [`Progress`], in order).
    pub fn add(&mut self, row: &SecondRow) {
        self.seconds = self.seconds.max(row.second + 1);
        self.issued += row.issued;
        self.sent += row.sent;
        self.answered += row.answered;
        self.timed_out += row.timed_out;
        self.failed += row.failed;
        self.unsent += row.unsent;
        self.truncated += row.truncated;
        if let Some(c) = row.target_cpu_s {
            *self.target_cpu_s.get_or_insert(0.0) += c;
        }
        for (into, from) in
            [(&mut self.rcodes, &row.rcodes), (&mut self.errors, &row.errors), (&mut self.unexpected, &row.unexpected)]
        {
            for (k, v) in from {
                *into.entry(k.clone()).or_insert(0) += v;
            }
        }
        if !row.latency.histogram.is_empty() {
            self.latency.merge(&Histogram::from_sparse(&row.latency.histogram));
        }
        if let Some(c) = &row.connections {
            // Counts add up; `active` is a level, not a count.
            self.connections.get_or_insert_with(SecondConnections::default).add(&SecondConnections {
                active: 0,
                handshake: None,
                ..c.clone()
            });
        }
    }

    /// Queries issued that have no fate yet.
    pub fn in_flight(&self) -> u64 {
        self.issued.saturating_sub(self.answered + self.timed_out + self.failed + self.unsent)
    }

    /// The latency of every answer so far (2 significant figures).
    pub fn latency(&self) -> &Histogram {
        &self.latency
    }

    /// Absorbs `p` and writes the live metrics to `path` atomically (the once-a-second hook of
    /// `--metrics-file`).
    pub fn update_file(&mut self, p: &Progress, path: &Path) -> Result<(), ReportError> {
        self.add(&p.row);
        let mut text = Vec::new();
        progress_metrics(p, self, &mut text).map_err(|source| ReportError::Io {
            path: path.to_path_buf(),
            op: "write metrics",
            source,
        })?;
        write_metrics_file_atomic(path, &text)
    }
}

/// Writes the OpenMetrics text of a run in progress: the running counters of `live` (which
/// must already include `p`'s second), the latency histogram so far, and gauges of the last
/// complete second (`volley_second_queries{fate}`, `volley_second_latency_p99_seconds`), plus
/// `volley_elapsed_seconds` (complete seconds). Ends with `# EOF`.
pub fn progress_metrics(p: &Progress, live: &LiveTotals, w: &mut impl Write) -> io::Result<()> {
    let mut om = Om { w };
    om.family("volley_queries", "counter", None, "Queries issued, sent (left the generator), and their fates.")?;
    for (fate, n) in [
        ("issued", live.issued),
        ("sent", live.sent),
        ("answered", live.answered),
        ("timed_out", live.timed_out),
        ("failed", live.failed),
        ("unsent", live.unsent),
    ] {
        om.sample("volley_queries_total", &[("fate", fate)], n)?;
    }
    om.family("volley_in_flight", "gauge", None, "Queries without a fate yet.")?;
    om.sample("volley_in_flight", &[], live.in_flight())?;
    om.counter_map("volley_answers", "rcode", "Answers by RCODE.", &live.rcodes)?;
    om.family("volley_truncated", "counter", None, "Answers with the TC bit set.")?;
    om.sample("volley_truncated_total", &[], live.truncated)?;
    om.counter_map("volley_errors", "kind", "Failed queries by error kind.", &live.errors)?;
    om.counter_map("volley_unexpected", "kind", "Responses that matched no query in flight.", &live.unexpected)?;
    let h = &live.latency;
    om.histogram(
        "volley_latency_seconds",
        "Response time of answered queries (2 significant figures while running).",
        &h.to_sparse(),
        h.mean() * h.count() as f64,
    )?;
    if let Some(c) = &live.connections {
        om.family("volley_connections", "counter", None, "Connection events.")?;
        for (ev, n) in [("opened", c.opened), ("failed", c.failed), ("resumed", c.resumed)] {
            om.sample("volley_connections_total", &[("event", ev)], n)?;
        }
        om.counter_map(
            "volley_connections_closed",
            "how",
            "Connections closed, by who closed them and how.",
            &c.closed_by,
        )?;
    }
    if let Some(c) = live.target_cpu_s {
        om.family(
            "volley_target_cpu_seconds",
            "counter",
            Some("seconds"),
            "CPU time of the target's processes so far (--target-pid).",
        )?;
        om.sample("volley_target_cpu_seconds_total", &[], format_float(c))?;
    }
    let row = &p.row;
    om.family("volley_second_queries", "gauge", None, "Queries issued, sent and fates in the last complete second.")?;
    for (fate, n) in [
        ("issued", row.issued),
        ("sent", row.sent),
        ("answered", row.answered),
        ("timed_out", row.timed_out),
        ("failed", row.failed),
        ("unsent", row.unsent),
    ] {
        om.sample("volley_second_queries", &[("fate", fate)], n)?;
    }
    om.family("volley_second_latency_p99_seconds", "gauge", Some("seconds"), "p99 of the last complete second.")?;
    om.sample("volley_second_latency_p99_seconds", &[], secs(row.latency.p99_ns))?;
    om.family("volley_elapsed_seconds", "gauge", Some("seconds"), "Complete seconds since the run started.")?;
    om.sample("volley_elapsed_seconds", &[], format_float((row.second + 1) as f64))?;
    writeln!(om.w, "# EOF")
}

/// Writes `text` to `path` atomically for scrapers (see [`volley_atomic`]), without fsync: it
/// is rewritten every second and only read live.
pub fn write_metrics_file_atomic(path: &Path, text: &[u8]) -> Result<(), ReportError> {
    let err = |source| ReportError::Io { path: path.to_path_buf(), op: "write metrics", source };
    if path.is_dir() {
        return Err(ReportError::IsDirectory { path: path.to_path_buf() });
    }
    let mut file = volley_atomic::AtomicFile::create(path).map_err(err)?;
    file.write_all(text).map_err(err)?;
    file.commit_fast().map_err(err)
}
