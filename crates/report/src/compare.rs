//! `volley compare`: the key figures of runs side by side, with ratios against the first, and
//! — when each side has repeated runs — whether a difference is beyond run-to-run noise.
//!
//! **The noise rule.** Each side (group) is one or more runs of the same configuration. For
//! each figure, a side is summarised by the median of its runs and their range (min–max). The
//! ratio is the median of a side over the median of the first side (the baseline). A
//! difference is *beyond noise* when both sides have at least two runs and their ranges do not
//! overlap (every run of one side is above every run of the other); *within noise* when the
//! ranges overlap; and *not known* when a side has a single run (one run says nothing about
//! run-to-run variation).

use std::io::{self, Write};

use serde::Serialize;
use volley_metrics::RunResult;

use crate::input::NamedRun;
use crate::table::{Align, Table};
use crate::units::{fmt_bytes, fmt_ns, fmt_rate};

/// A figure compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Answers per second of the sending phase.
    QpsAnswered,
    /// Queries sent per second of the sending phase.
    QpsSent,
    /// Answered queries over queries issued, percent.
    AnsweredPct,
    /// Median response time, ns.
    P50,
    /// 99th percentile, ns.
    P99,
    /// 99.9th percentile, ns.
    P999,
    /// Median service time (departure to answer), ns; runs with `service_time` only.
    ServiceP50,
    /// 99th percentile of the service time, ns.
    ServiceP99,
    /// 99th percentile of the generator's delay (issue or schedule to departure), ns.
    GeneratorP99,
    /// Median handshake time (TCP + TLS, or QUIC), ns; connection-based transports only.
    HandshakeP50,
    /// DNS message bytes written per query sent.
    BytesOutPerQuery,
    /// DNS message bytes read per answer.
    BytesInPerAnswer,
    /// Bytes sent on the wire (IP and UDP/TCP headers, handshakes, acknowledgements and
    /// retransmissions included) per query sent; runs with `totals.wire` only.
    WireBytesOutPerQuery,
    /// Bytes received on the wire, headers included, per answer.
    WireBytesInPerAnswer,
    /// Packets sent per query sent; runs with `totals.wire` only.
    PacketsOutPerQuery,
    /// Packets received per answer.
    PacketsInPerAnswer,
    /// Generator CPU time per answer, µs.
    CpuUsPerAnswer,
    /// The target's CPU time per answer, µs; runs with `target_cpu` (`--target-pid`) only.
    TargetCpuUsPerAnswer,
    /// Packets the emulated link dropped (loss, queue, outage; both directions) as a share of
    /// those that entered it, %; runs behind a link (`link`) only.
    LinkDroppedPct,
    /// The link emulator's p99 lateness, ns; runs behind a link only.
    LinkLatenessP99,
}

/// Whether more is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// More is better (rates, answered share).
    Higher,
    /// Less is better (times, bytes, CPU).
    Lower,
}

impl Metric {
    /// Every figure, in table order.
    pub const ALL: [Metric; 20] = [
        Metric::QpsAnswered,
        Metric::QpsSent,
        Metric::AnsweredPct,
        Metric::P50,
        Metric::P99,
        Metric::P999,
        Metric::ServiceP50,
        Metric::ServiceP99,
        Metric::GeneratorP99,
        Metric::HandshakeP50,
        Metric::BytesOutPerQuery,
        Metric::BytesInPerAnswer,
        Metric::WireBytesOutPerQuery,
        Metric::WireBytesInPerAnswer,
        Metric::PacketsOutPerQuery,
        Metric::PacketsInPerAnswer,
        Metric::CpuUsPerAnswer,
        Metric::TargetCpuUsPerAnswer,
        Metric::LinkDroppedPct,
        Metric::LinkLatenessP99,
    ];

    /// The row label.
    pub fn label(self) -> &'static str {
        match self {
            Metric::QpsAnswered => "answers/s",
            Metric::QpsSent => "queries/s",
            Metric::AnsweredPct => "answered",
            Metric::P50 => "latency p50",
            Metric::P99 => "latency p99",
            Metric::P999 => "latency p99.9",
            Metric::ServiceP50 => "service p50",
            Metric::ServiceP99 => "service p99",
            Metric::GeneratorP99 => "generator p99",
            Metric::HandshakeP50 => "handshake p50",
            Metric::BytesOutPerQuery => "bytes out/query",
            Metric::BytesInPerAnswer => "bytes in/answer",
            Metric::WireBytesOutPerQuery => "wire bytes out/query",
            Metric::WireBytesInPerAnswer => "wire bytes in/answer",
            Metric::PacketsOutPerQuery => "packets out/query",
            Metric::PacketsInPerAnswer => "packets in/answer",
            Metric::CpuUsPerAnswer => "CPU/answer",
            Metric::TargetCpuUsPerAnswer => "target CPU/answer",
            Metric::LinkDroppedPct => "link dropped",
            Metric::LinkLatenessP99 => "link lateness p99",
        }
    }

    /// Whether more is better.
    pub fn better(self) -> Better {
        match self {
            Metric::QpsAnswered | Metric::QpsSent | Metric::AnsweredPct => Better::Higher,
            _ => Better::Lower,
        }
    }

    /// The figure of one run; `None` when it does not apply (no answers, no connections).
    pub fn value(self, r: &RunResult) -> Option<f64> {
        let t = &r.totals;
        let answered = (t.answered > 0).then_some(());
        // Wire figures only where the transports counted them (`totals.wire` present).
        let wire = (!t.wire.is_empty()).then_some(&t.wire);
        let per_sent = |n: u64| (t.sent > 0).then(|| n as f64 / t.sent as f64);
        let per_answer = |n: u64| (t.answered > 0).then(|| n as f64 / t.answered as f64);
        match self {
            Metric::QpsAnswered => Some(r.qps.answered),
            Metric::QpsSent => Some(r.qps.sent),
            Metric::AnsweredPct => (t.issued > 0).then(|| t.answered as f64 * 100.0 / t.issued as f64),
            Metric::P50 => answered.map(|_| r.latency.p50_ns as f64),
            Metric::P99 => answered.map(|_| r.latency.p99_ns as f64),
            Metric::P999 => answered.map(|_| r.latency.p999_ns as f64),
            Metric::ServiceP50 => r.service_time.as_ref().filter(|s| s.count > 0).map(|s| s.p50_ns as f64),
            Metric::ServiceP99 => r.service_time.as_ref().filter(|s| s.count > 0).map(|s| s.p99_ns as f64),
            Metric::GeneratorP99 => r.generator_delay.as_ref().filter(|s| s.count > 0).map(|s| s.p99_ns as f64),
            Metric::HandshakeP50 => r
                .connections
                .as_ref()
                .and_then(|c| c.handshake_total.as_ref())
                .filter(|h| h.count > 0)
                .map(|h| h.p50_ns as f64),
            // A run that sent queries and counted no bytes did not count them (DNS Shotgun's
            // results, read by `shotgun.rs`): no figure rather than 0.
            Metric::BytesOutPerQuery => (t.bytes_out > 0).then(|| per_sent(t.bytes_out)).flatten(),
            Metric::BytesInPerAnswer => (t.bytes_in > 0).then(|| per_answer(t.bytes_in)).flatten(),
            Metric::WireBytesOutPerQuery => wire.and_then(|w| per_sent(w.bytes_out)),
            Metric::WireBytesInPerAnswer => wire.and_then(|w| per_answer(w.bytes_in)),
            Metric::PacketsOutPerQuery => wire.and_then(|w| per_sent(w.packets_out)),
            Metric::PacketsInPerAnswer => wire.and_then(|w| per_answer(w.packets_in)),
            Metric::CpuUsPerAnswer => answered.and((r.generator.cpu_s > 0.0).then_some(r.generator.cpu_us_per_answer)),
            Metric::TargetCpuUsPerAnswer => answered.and(r.target_cpu.as_ref()).map(|c| c.cpu_us_per_answer),
            Metric::LinkDroppedPct => r.link.as_ref().and_then(|l| {
                let (u, d) = (&l.up.counts, &l.down.counts);
                let dropped = |c: &volley_metrics::LinkCounters| c.dropped_loss + c.dropped_queue + c.dropped_outage;
                let entered = u.packets_in + d.packets_in;
                (entered > 0).then(|| (dropped(u) + dropped(d)) as f64 * 100.0 / entered as f64)
            }),
            Metric::LinkLatenessP99 => {
                r.link.as_ref().filter(|l| l.lateness.count > 0).map(|l| l.lateness.p99_ns as f64)
            }
        }
    }

    /// A value formatted in the figure's unit.
    pub fn format(self, v: f64) -> String {
        match self {
            Metric::QpsAnswered | Metric::QpsSent => fmt_rate(v),
            Metric::AnsweredPct => format!("{v:.2}%"),
            Metric::LinkDroppedPct => format!("{v:.3}%"),
            Metric::P50
            | Metric::P99
            | Metric::P999
            | Metric::ServiceP50
            | Metric::ServiceP99
            | Metric::GeneratorP99
            | Metric::HandshakeP50
            | Metric::LinkLatenessP99 => fmt_ns(v.round() as u64),
            Metric::BytesOutPerQuery
            | Metric::BytesInPerAnswer
            | Metric::WireBytesOutPerQuery
            | Metric::WireBytesInPerAnswer => fmt_bytes(v),
            Metric::PacketsOutPerQuery | Metric::PacketsInPerAnswer => format!("{v:.2}"),
            Metric::CpuUsPerAnswer | Metric::TargetCpuUsPerAnswer => fmt_ns((v * 1000.0).round() as u64),
        }
    }
}

/// One side's figure over its runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupStat {
    /// Median of the runs' values (mean of the two middle ones for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Runs that had this figure.
    pub n: usize,
}

impl GroupStat {
    /// Median and range of `values`; `None` when empty.
    pub fn of(values: &[f64]) -> Option<GroupStat> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(GroupStat { median, min: v[0], max: v[n - 1], n })
    }
}

/// How a side's figure stands against the baseline's, by the noise rule (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// This is the baseline (the first side).
    Baseline,
    /// Both sides have two or more runs and their ranges do not overlap.
    BeyondNoise,
    /// Both sides have two or more runs and their ranges overlap.
    WithinNoise,
    /// A side has a single run: run-to-run noise is not known.
    NotKnown,
    /// A side has no value for this figure.
    NoData,
}

impl Verdict {
    /// The rule applied to a side against the baseline.
    pub fn of(base: Option<GroupStat>, side: Option<GroupStat>) -> Verdict {
        match (base, side) {
            (Some(a), Some(b)) if a.n >= 2 && b.n >= 2 => {
                if a.max < b.min || b.max < a.min {
                    Verdict::BeyondNoise
                } else {
                    Verdict::WithinNoise
                }
            }
            (Some(_), Some(_)) => Verdict::NotKnown,
            _ => Verdict::NoData,
        }
    }

    /// How the text table writes it.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Baseline => "",
            Verdict::BeyondNoise => "beyond noise",
            Verdict::WithinNoise => "within noise",
            Verdict::NotKnown => "",
            Verdict::NoData => "",
        }
    }
}

/// One row of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// Which figure.
    pub metric: Metric,
    /// Its label.
    pub label: &'static str,
    /// Whether more is better.
    pub better: Better,
    /// Each side's median and range, in side order (`None`: no run of that side has it).
    pub groups: Vec<Option<GroupStat>>,
    /// Each side's median over the baseline's (`None` for the baseline, or without data or
    /// with a baseline of 0).
    pub ratios: Vec<Option<f64>>,
    /// Each side against the baseline, by the noise rule.
    pub verdicts: Vec<Verdict>,
}

/// A side of the comparison: its name and the names of its runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The side's name (the run's name, or `--a`/`--b` labels).
    pub name: String,
    /// The runs it summarises.
    pub runs: Vec<String>,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The sides, baseline first.
    pub sides: Vec<Side>,
    /// One row per figure that at least one side has.
    pub figures: Vec<Figure>,
    /// The noise rule, in words.
    pub noise_rule: &'static str,
}

/// The noise rule as written in reports.
pub const NOISE_RULE: &str = "each side: median of its runs and min-max range; ratio = median / baseline median; \
a difference is beyond noise when both sides have 2 or more runs and their ranges do not overlap, within noise when \
they overlap, not known with a single run on a side";

/// Compares sides (each a name and one or more runs of the same configuration) against the
/// first side.
pub fn compare(sides: &[(String, Vec<NamedRun>)]) -> Comparison {
    let mut figures = Vec::new();
    for m in Metric::ALL {
        let groups: Vec<Option<GroupStat>> = sides
            .iter()
            .map(|(_, runs)| GroupStat::of(&runs.iter().filter_map(|r| m.value(&r.result)).collect::<Vec<_>>()))
            .collect();
        if groups.iter().all(Option::is_none) {
            continue;
        }
        let base = groups.first().copied().flatten();
        let ratios = groups
            .iter()
            .enumerate()
            .map(|(i, g)| match (i, base, g) {
                (0, _, _) => None,
                (_, Some(b), Some(g)) if b.median != 0.0 => Some(g.median / b.median),
                _ => None,
            })
            .collect();
        let verdicts = groups
            .iter()
            .enumerate()
            .map(|(i, g)| if i == 0 { Verdict::Baseline } else { Verdict::of(base, *g) })
            .collect();
        figures.push(Figure { metric: m, label: m.label(), better: m.better(), groups, ratios, verdicts });
    }
    Comparison {
        sides: sides
            .iter()
            .map(|(name, runs)| Side { name: name.clone(), runs: runs.iter().map(|r| r.name.clone()).collect() })
            .collect(),
        figures,
        noise_rule: NOISE_RULE,
    }
}

impl Comparison {
    /// The comparison as rows of cells: `figure, side 1 value, [side i value, ratio, verdict]...`
    /// with a header row first. A side with several runs shows `median (min–max)`.
    pub fn cells(&self) -> Vec<Vec<String>> {
        let mut header = vec!["".to_string()];
        for (i, s) in self.sides.iter().enumerate() {
            let runs = if s.runs.len() > 1 { format!(" ({} runs)", s.runs.len()) } else { String::new() };
            header.push(format!("{}{runs}", s.name));
            if i > 0 {
                header.push(format!("/{}", self.sides[0].name));
                header.push(String::new());
            }
        }
        let mut rows = vec![header];
        for f in &self.figures {
            let mut row = vec![f.label.to_string()];
            for (i, g) in f.groups.iter().enumerate() {
                row.push(match g {
                    None => "-".to_string(),
                    Some(g) if g.n > 1 => {
                        format!("{} ({}–{})", f.metric.format(g.median), f.metric.format(g.min), f.metric.format(g.max))
                    }
                    Some(g) => f.metric.format(g.median),
                });
                if i > 0 {
                    row.push(f.ratios[i].map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into()));
                    row.push(f.verdicts[i].text().to_string());
                }
            }
            rows.push(row);
        }
        rows
    }

    /// True when some side has more than one run, so verdicts mean something.
    pub fn repeated(&self) -> bool {
        self.sides.iter().any(|s| s.runs.len() > 1)
    }
}

/// Writes the comparison as an aligned text table, followed by the noise rule when sides have
/// repeated runs.
pub fn write_compare_text(c: &Comparison, w: &mut impl Write) -> io::Result<()> {
    let cells = c.cells();
    let mut t = Table::new().column(cells[0][0].clone(), Align::Left);
    for h in &cells[0][1..] {
        t = t.column(h.clone(), if h.is_empty() { Align::Left } else { Align::Right });
    }
    for r in &cells[1..] {
        t.row(r.clone());
    }
    t.write(w)?;
    if c.repeated() {
        writeln!(w)?;
        let mut line = String::from("noise rule:");
        for word in c.noise_rule.split(' ') {
            if line.len() + 1 + word.len() > 100 {
                writeln!(w, "{line}")?;
                line = String::from(" ");
            }
            line.push(' ');
            line.push_str(word);
        }
        writeln!(w, "{line}")?;
    } else if c.sides.len() > 1 {
        writeln!(w)?;
        writeln!(w, "one run per side: give repeated runs (--a FILE... --b FILE...) to tell a difference from noise")?;
    }
    Ok(())
}

/// Writes the comparison as pretty-printed JSON (`sides`, `figures` with each side's
/// `median`/`min`/`max`/`n`, `ratios`, `verdicts`, and `noise_rule`), followed by a newline.
pub fn write_compare_json(c: &Comparison, w: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, c)?;
    writeln!(w)
}
