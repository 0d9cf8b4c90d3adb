//! What every chart shows, as plain data: one pure function per chart builds its
//! [`ChartData`] from one or more runs, and [`crate::render_svg`] / [`crate::render_png`] draw
//! any `ChartData`. Tests assert the data, not the pixels.
//!
//! Values are stored in their natural unit (seconds since the run's start, percent,
//! nanoseconds, queries per second, counts); the [`Axis`] says how to scale and label them.

use serde::{Deserialize, Serialize};
use volley_metrics::{Histogram, LatencySummary, RunResult, SparseHistogram};

use crate::input::NamedRun;
use crate::text::rcode_rank;

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear.
    Linear,
    /// Base-10 logarithmic (values must be > 0; others are left out when drawing).
    Log,
    /// Base-10 logarithmic, largest value on the left (the slowest-percentile axis:
    /// 100 % on the left down to 0.01 % on the right).
    LogReversed,
}

/// How an axis labels its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds since the run's start.
    Seconds,
    /// A percentage (0..=100).
    Percent,
    /// A duration in nanoseconds, labelled `412µs`, `1.50ms`.
    Nanos,
    /// A rate or count, labelled as a number.
    Number,
}

/// One axis of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The axis title, e.g. `response time`.
    pub label: String,
    /// Linear or logarithmic.
    pub scale: Scale,
    /// How tick labels are written.
    pub unit: Unit,
    /// The range shown, `None` for the data's extent.
    pub range: Option<(f64, f64)>,
}

impl Axis {
    pub(crate) fn new(label: &str, scale: Scale, unit: Unit) -> Axis {
        Axis { label: label.to_string(), scale, unit, range: None }
    }

    pub(crate) fn with_range(mut self, lo: f64, hi: f64) -> Axis {
        self.range = Some((lo, hi));
        self
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Points joined by straight lines.
    Line,
    /// As `Line`, dashed (a second figure of the same run, e.g. p99 next to p50).
    Dashed,
    /// A staircase: each value holds until the next point's x.
    Step,
}

/// One named line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend entry: the run's name, then what the line is when a run has several
    /// (`udp: NOERROR`, `udp p99`).
    pub name: String,
    /// The run it belongs to (index into the runs given), which picks its colour.
    pub run: usize,
    /// Index of the line within its run, which varies the colour between a run's lines.
    pub shade: usize,
    /// How it is drawn.
    pub style: Style,
    /// `(x, y)` in axis units, in increasing x order (for `LogReversed`, decreasing x).
    pub points: Vec<(f64, f64)>,
}

/// A shaded band between two values at each x (e.g. between p50 and p99).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// What it spans, e.g. `udp p50–p99`.
    pub name: String,
    /// The run it belongs to (its colour).
    pub run: usize,
    /// `(x, low, high)`.
    pub points: Vec<(f64, f64, f64)>,
}

/// A vertical line at an x value, labelled (e.g. the limit a search found).
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// The label drawn next to the line.
    pub label: String,
    /// The run it belongs to (its colour).
    pub run: usize,
    /// Where, in x axis units.
    pub x: f64,
}

/// Everything one chart shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartData {
    /// Stable identifier, used for file names (`DIR/ID.svg`) and in the HTML report.
    pub id: String,
    /// Caption.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// Lines, drawn in order.
    pub series: Vec<Series>,
    /// Shaded bands, drawn under the lines.
    pub bands: Vec<Band>,
    /// Vertical markers.
    pub markers: Vec<Marker>,
}

impl ChartData {
    pub(crate) fn new(id: &str, title: &str, x: Axis, y: Axis) -> ChartData {
        ChartData {
            id: id.to_string(),
            title: title.to_string(),
            x,
            y,
            series: Vec::new(),
            bands: Vec::new(),
            markers: Vec::new(),
        }
    }

    /// True when there is nothing to draw (no point in any series or band).
    pub fn is_empty(&self) -> bool {
        self.series.iter().all(|s| s.points.is_empty()) && self.bands.iter().all(|b| b.points.is_empty())
    }

    /// The series with this legend name.
    pub fn series_named(&self, name: &str) -> Option<&Series> {
        self.series.iter().find(|s| s.name == name)
    }
}

/// `name: what` when several runs share the chart, `what` alone for a single run.
fn label(runs: &[NamedRun], run: &NamedRun, what: &str) -> String {
    if runs.len() == 1 {
        what.to_string()
    } else if what.is_empty() {
        run.name.clone()
    } else {
        format!("{}: {what}", run.name)
    }
}

/// Response rate over time, as DNS Shotgun's chart: for each second, the answers as a
/// percentage of the queries that got a fate in that second (answered + timed out + failed),
/// in total (`answered`) and by RCODE (one line per RCODE seen, in registry order). Seconds in
/// which no query got a fate are left out. x: second since the run's start; y: percent.
pub fn response_rate_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "response_rate",
        "Response rate over time",
        Axis::new("time since start [s]", Scale::Linear, Unit::Seconds),
        Axis::new("answered [% of fates in the second]", Scale::Linear, Unit::Percent).with_range(0.0, 100.0),
    );
    for (i, run) in runs.iter().enumerate() {
        let r = &run.result;
        let mut rcodes: Vec<&String> =
            r.totals.rcodes.keys().chain(r.series.iter().flat_map(|s| s.rcodes.keys())).collect();
        rcodes.sort_by_key(|n| (rcode_rank(n), n.to_string()));
        rcodes.dedup();
        let pct = |n: u64, d: u64| n as f64 * 100.0 / d as f64;
        let ended = |s: &volley_metrics::SecondRow| s.answered + s.timed_out + s.failed + s.unsent;
        let rows = r.series.iter().filter(move |s| ended(s) > 0);
        let points = rows.clone().map(|s| (s.second as f64, pct(s.answered, ended(s))));
        c.series.push(Series {
            name: label(runs, run, "answered"),
            run: i,
            shade: 0,
            style: Style::Line,
            points: points.collect(),
        });
        for (k, rc) in rcodes.iter().enumerate() {
            let points = rows.clone().map(|s| {
                let n = s.rcodes.get(*rc).copied().unwrap_or(0);
                (s.second as f64, pct(n, ended(s)))
            });
            c.series.push(Series {
                name: label(runs, run, rc),
                run: i,
                shade: k + 1,
                style: Style::Dashed,
                points: points.collect(),
            });
        }
    }
    c
}

/// The slowest-percentile grid of the latency percentile plot: 100 % down to 0.01 %, six
/// points per decade (1, 1.5, 2, 3, 5, 7 times a power of ten), in decreasing order.
pub const SLOWEST_PERCENTILES: [f64; 25] = [
    100.0, 70.0, 50.0, 30.0, 20.0, 15.0, 10.0, 7.0, 5.0, 3.0, 2.0, 1.5, 1.0, 0.7, 0.5, 0.3, 0.2, 0.15, 0.1, 0.07, 0.05,
    0.03, 0.02, 0.015, 0.01,
];

/// The latency percentile plot on log–log axes: for each slowest percentile `s` of
/// [`SLOWEST_PERCENTILES`], the response time that the slowest `s` % of answers took at
/// least: the value at quantile `1 − s/100` of the run's exact (3-figure) histogram, by the
/// same rule as the summary's percentiles (so the point at 1 % is the run's p99). x: slowest
/// percentile (100 % on the left); y: response time in ns. Runs without answers have no line.
pub fn latency_percentile_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "latency_percentiles",
        "Latency percentiles",
        Axis::new("slowest percentile [%]", Scale::LogReversed, Unit::Percent).with_range(100.0, 0.01),
        Axis::new("response time", Scale::Log, Unit::Nanos),
    );
    for (i, run) in runs.iter().enumerate() {
        c.series.push(Series {
            name: label(runs, run, ""),
            run: i,
            shade: 0,
            style: Style::Line,
            points: percentile_points(&run.result.latency),
        });
    }
    c
}

/// `(slowest %, value_ns)` over the grid, from a summary's histogram; empty without values.
pub fn percentile_points(l: &LatencySummary) -> Vec<(f64, f64)> {
    let h = Histogram::from_sparse(&l.histogram);
    if h.is_empty() {
        return Vec::new();
    }
    SLOWEST_PERCENTILES.iter().map(|&s| (s, h.quantile(1.0 - s / 100.0) as f64)).collect()
}

/// Latency over time: for each second with answers, its p50 (solid) and p99 (dashed), with the
/// band between them shaded. The values are the per-second (2-figure) percentiles of the
/// results file. x: second since start; y: response time in ns (log scale).
pub fn latency_over_time_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "latency_over_time",
        "Latency over time (p50, p99)",
        Axis::new("time since start [s]", Scale::Linear, Unit::Seconds),
        Axis::new("response time", Scale::Log, Unit::Nanos),
    );
    for (i, run) in runs.iter().enumerate() {
        let rows: Vec<_> = run.result.series.iter().filter(|s| s.answered > 0).collect();
        let t = |s: &volley_metrics::SecondRow| s.second as f64;
        c.bands.push(Band {
            name: label(runs, run, "p50–p99"),
            run: i,
            points: rows.iter().map(|s| (t(s), s.latency.p50_ns as f64, s.latency.p99_ns as f64)).collect(),
        });
        c.series.push(Series {
            name: label(runs, run, "p50"),
            run: i,
            shade: 0,
            style: Style::Line,
            points: rows.iter().map(|s| (t(s), s.latency.p50_ns as f64)).collect(),
        });
        c.series.push(Series {
            name: label(runs, run, "p99"),
            run: i,
            shade: 1,
            style: Style::Dashed,
            points: rows.iter().map(|s| (t(s), s.latency.p99_ns as f64)).collect(),
        });
    }
    c
}

/// Each traced query's response time against its number in order of issue (`--trace-queries`,
/// the results' `query_trace`; seeds/003's figure 1): a line per run through its answered
/// queries (queries without an answer leave a gap). x: query number; y: response time in ns
/// (log scale). Empty for runs without a trace.
pub fn query_trace_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "query_trace",
        "Response time per query, in order of issue (the first queries of the run)",
        Axis::new("query number", Scale::Linear, Unit::Number),
        Axis::new("response time", Scale::Log, Unit::Nanos),
    );
    for (i, run) in runs.iter().enumerate() {
        let Some(t) = &run.result.query_trace else { continue };
        c.series.push(Series {
            name: label(runs, run, "response time"),
            run: i,
            shade: 0,
            style: Style::Line,
            points: t.queries.iter().filter_map(|q| q.latency_ns.map(|l| (q.index as f64, l.max(1) as f64))).collect(),
        });
    }
    c
}

/// Queries per second over time: queries sent (solid) and answers (dashed) in each second.
/// x: second since start; y: per second.
pub fn qps_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "qps",
        "Queries per second",
        Axis::new("time since start [s]", Scale::Linear, Unit::Seconds),
        Axis::new("per second", Scale::Linear, Unit::Number),
    );
    for (i, run) in runs.iter().enumerate() {
        let s = &run.result.series;
        for (k, (what, style, f)) in [
            ("sent", Style::Line, (|r: &volley_metrics::SecondRow| r.sent) as fn(&volley_metrics::SecondRow) -> u64),
            ("answered", Style::Dashed, |r| r.answered),
        ]
        .into_iter()
        .enumerate()
        {
            c.series.push(Series {
                name: label(runs, run, what),
                run: i,
                shade: k,
                style,
                points: s.iter().map(|r| (r.second as f64, f(r) as f64)).collect(),
            });
        }
    }
    c
}

/// The target's CPU use over time, for runs made with `--target-pid`: per second, the CPU
/// time its processes used as a percentage of one core (above 100 with several cores busy).
/// Runs without it have no line.
pub fn target_cpu_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "target_cpu",
        "Target CPU over time",
        Axis::new("time since start [s]", Scale::Linear, Unit::Seconds),
        Axis::new("CPU [% of one core]", Scale::Linear, Unit::Percent),
    );
    for (i, run) in runs.iter().enumerate() {
        let points: Points =
            run.result.series.iter().filter_map(|r| r.target_cpu_s.map(|cpu| (r.second as f64, cpu * 100.0))).collect();
        if !points.is_empty() {
            c.series.push(Series {
                name: label(runs, run, "target CPU"),
                run: i,
                shade: 0,
                style: Style::Line,
                points,
            });
        }
    }
    c
}

/// The emulated link over time, for runs behind one (`--link`, runs without it have no
/// lines): per second, the packets it dropped by cause (loss, queue, outage; both directions
/// together) and the packets in its bottleneck queues at the end of the second.
pub fn link_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "link",
        "Emulated link: drops and queue over time",
        Axis::new("time since start [s]", Scale::Linear, Unit::Seconds),
        Axis::new("packets", Scale::Linear, Unit::Number),
    );
    type Of = fn(&volley_metrics::LinkSecondDir) -> u64;
    for (i, run) in runs.iter().enumerate() {
        let Some(l) = run.result.link.as_ref().filter(|l| !l.series.is_empty()) else { continue };
        let lines: [(&str, Style, Of); 4] = [
            ("dropped: loss", Style::Line, |d| d.dropped_loss),
            ("dropped: queue", Style::Line, |d| d.dropped_queue),
            ("dropped: outage", Style::Line, |d| d.dropped_outage),
            ("queued", Style::Dashed, |d| d.queued),
        ];
        for (k, (what, style, f)) in lines.into_iter().enumerate() {
            c.series.push(Series {
                name: label(runs, run, what),
                run: i,
                shade: k,
                style,
                points: l.series.iter().map(|s| (s.second as f64, (f(&s.up) + f(&s.down)) as f64)).collect(),
            });
        }
    }
    c
}

/// `(x, y)` points of a line.
type Points = Vec<(f64, f64)>;

/// Connections over time, for runs over connection-based transports (runs whose series has
/// no connection events have no lines): per second, connections `opened`, `closed`, `failed`,
/// `resumed` (TLS sessions resumed among those opened), `handshakes` (full handshakes: opened
/// minus resumed) and `active` (opened minus closed since the start, at the end of the second).
pub fn connections_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "connections",
        "Connections over time",
        Axis::new("time since start [s]", Scale::Linear, Unit::Seconds),
        Axis::new("connections", Scale::Linear, Unit::Number),
    );
    for (i, run) in runs.iter().enumerate() {
        let s = &run.result.series;
        if s.iter().all(|r| r.connections.is_none()) {
            continue;
        }
        let get = |r: &volley_metrics::SecondRow| r.connections.clone().unwrap_or_default();
        let mut active = 0i64;
        let mut lines: Vec<(&str, Style, Points)> = vec![
            ("active", Style::Step, Vec::new()),
            ("opened", Style::Line, Vec::new()),
            ("closed", Style::Dashed, Vec::new()),
            ("handshakes", Style::Line, Vec::new()),
            ("resumed", Style::Dashed, Vec::new()),
            ("failed", Style::Dashed, Vec::new()),
        ];
        for r in s {
            let x = r.second as f64;
            let k = get(r);
            active += k.opened as i64 - k.closed as i64;
            let values =
                [active.max(0) as u64, k.opened, k.closed, k.opened.saturating_sub(k.resumed), k.resumed, k.failed];
            for (line, v) in lines.iter_mut().zip(values) {
                line.2.push((x, v as f64));
            }
        }
        for (k, (what, style, points)) in lines.into_iter().enumerate() {
            // Lines that stay at zero the whole run (no resumption, no failures) are left out.
            if k > 0 && points.iter().all(|p| p.1 == 0.0) {
                continue;
            }
            c.series.push(Series { name: label(runs, run, what), run: i, shade: k, style, points });
        }
    }
    c
}

/// Handshake-time CDF per run (named with its transport): for each bucket of the run's whole
/// handshake histogram (`connections.handshake_total`: TCP + TLS, or QUIC), the percentage of
/// connections whose handshake took at most that bucket's value. x: handshake time in ns (log);
/// y: percent of connections. Runs without handshakes have no line.
pub fn handshake_cdf_series(runs: &[NamedRun]) -> ChartData {
    let mut c = ChartData::new(
        "handshake_cdf",
        "Handshake time CDF",
        Axis::new("handshake time", Scale::Log, Unit::Nanos),
        Axis::new("connections [%]", Scale::Linear, Unit::Percent).with_range(0.0, 100.0),
    );
    for (i, run) in runs.iter().enumerate() {
        let Some(h) = run.result.connections.as_ref().and_then(|c| c.handshake_total.as_ref()) else {
            continue;
        };
        let points = cdf_points(&h.histogram);
        if points.is_empty() {
            continue;
        }
        let name = format!("{} ({})", run.name, run.result.target.transport);
        c.series.push(Series { name, run: i, shade: 0, style: Style::Step, points });
    }
    c
}

/// `(value_ns, cumulative %)` for each bucket of a sparse histogram, exactly.
pub fn cdf_points(h: &SparseHistogram) -> Vec<(f64, f64)> {
    let total: u64 = h.iter().map(|b| b.1).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut cum = 0u64;
    h.iter()
        .map(|(v, n)| {
            cum += n;
            (v as f64, cum as f64 * 100.0 / total as f64)
        })
        .collect()
}

/// One step of a limit search: the load offered, the share of queries answered, and p99.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LimitStep {
    /// Clients or queries per second offered in this step (see [`LimitResult::unit`]).
    pub load: f64,
    /// Answered queries over queries issued in this step, 0..=1.
    pub answered_ratio: f64,
    /// 99th percentile of the response time in this step, ns.
    pub p99_ns: u64,
}

/// What a limit search found, as charts read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitResult {
    /// Name shown in the legend (e.g. the transport).
    pub name: String,
    /// What `load` counts: `clients` or `qps`.
    pub unit: String,
    /// The steps in the order they ran.
    pub steps: Vec<LimitStep>,
    /// The highest load the target kept up with, if the search found one.
    pub limit: Option<f64>,
}

/// The step curve of limit searches: answered % against the load offered, one staircase per
/// search, with the limit found marked by a vertical line labelled `NAME limit LOAD`.
/// x: load (clients or qps, the first search's unit); y: answered %.
pub fn limit_series(searches: &[LimitResult]) -> ChartData {
    let unit = searches.first().map(|s| s.unit.as_str()).unwrap_or("load");
    let mut c = ChartData::new(
        "limit",
        "Limit search",
        Axis::new(&format!("load offered [{unit}]"), Scale::Linear, Unit::Number),
        Axis::new("answered [%]", Scale::Linear, Unit::Percent).with_range(0.0, 100.0),
    );
    for (i, s) in searches.iter().enumerate() {
        let mut steps = s.steps.clone();
        steps.sort_by(|a, b| a.load.total_cmp(&b.load));
        c.series.push(Series {
            name: s.name.clone(),
            run: i,
            shade: 0,
            style: Style::Step,
            points: steps.iter().map(|st| (st.load, st.answered_ratio * 100.0)).collect(),
        });
        if let Some(l) = s.limit {
            c.markers.push(Marker { label: format!("{} limit {}", s.name, crate::units::fmt_rate(l)), run: i, x: l });
        }
    }
    c
}

/// The p99 response time of each step of limit searches against the load offered, with the
/// limits marked. x: load; y: p99 in ns (log).
pub fn limit_latency_series(searches: &[LimitResult]) -> ChartData {
    let mut c = limit_series(searches);
    c.id = "limit_latency".into();
    c.title = "Limit search: p99 per step".into();
    c.y = Axis::new("p99 response time", Scale::Log, Unit::Nanos);
    for (s, search) in c.series.iter_mut().zip(searches) {
        let mut steps = search.steps.clone();
        steps.sort_by(|a, b| a.load.total_cmp(&b.load));
        s.points = steps.iter().filter(|st| st.p99_ns > 0).map(|st| (st.load, st.p99_ns as f64)).collect();
        s.style = Style::Line;
    }
    c
}

/// Every chart of a set of runs that has something to show, in the report's order: response
/// rate, latency percentiles, latency over time, the traced queries' response times, QPS,
/// connections, handshake CDF.
pub fn all_charts(runs: &[NamedRun]) -> Vec<ChartData> {
    [
        response_rate_series(runs),
        latency_percentile_series(runs),
        latency_over_time_series(runs),
        query_trace_series(runs),
        qps_series(runs),
        connections_series(runs),
        handshake_cdf_series(runs),
        target_cpu_series(runs),
        link_series(runs),
    ]
    .into_iter()
    .filter(|c| !c.is_empty())
    .collect()
}

/// True when a run has per-second connection events or handshakes (a connection chart).
pub fn has_connections(r: &RunResult) -> bool {
    r.connections.is_some() || r.series.iter().any(|s| s.connections.is_some())
}
