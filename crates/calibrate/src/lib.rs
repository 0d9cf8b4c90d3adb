//! Latency as the wire sees it (issue 21): queries matched to their answers in a packet
//! capture, and the wire's figures beside a run's own, so that a user knows how far to trust
//! volley's latency on a machine.
//!
//! [`matcher`] is the sans-IO part (packets in, per-transport histograms out); [`live`] is a
//! capture of its own (`AF_PACKET`, kernel time stamps, a thread); [`read_pcap`] feeds a
//! capture file instead; [`Calibration`] puts the wire's figures beside volley's (the run's
//! `service_time` where its results have one, its `latency` otherwise), prints them and
//! writes them as JSON (`volley.calibration/1`).

pub mod live;
pub mod matcher;

use std::io::{self, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use volley_metrics::{LatencySummary, RunResult};
use volley_replay::capture::{CaptureError, CaptureReader};

pub use live::{CaptureStats, LiveCapture};
pub use matcher::{Matcher, PacketCounts, Proto, WireCounts, WireResult};

/// The schema name of a calibration file.
pub const SCHEMA: &str = "volley.calibration/1";

/// Why a calibration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// Capturing needs root or CAP_NET_RAW.
    #[error(
        "capturing packets is not permitted ({0}): run as root or give volley CAP_NET_RAW (setcap cap_net_raw+ep)"
    )]
    NotPermitted(#[source] io::Error),
    /// The live capture could not be set up or read.
    #[error("capture: {0}")]
    Capture(String),
    /// A capture file that cannot be read.
    #[error("{path}: {source}")]
    File {
        path: String,
        #[source]
        source: CaptureError,
    },
    /// An output that cannot be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Signed differences, volley's figure less the wire's, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Differences {
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub p99_ns: i64,
    pub p999_ns: i64,
    pub mean_ns: i64,
}

impl Differences {
    pub fn of(volley: &LatencySummary, wire: &LatencySummary) -> Differences {
        let d = |a: u64, b: u64| a as i64 - b as i64;
        Differences {
            p50_ns: d(volley.p50_ns, wire.p50_ns),
            p90_ns: d(volley.p90_ns, wire.p90_ns),
            p99_ns: d(volley.p99_ns, wire.p99_ns),
            p999_ns: d(volley.p999_ns, wire.p999_ns),
            mean_ns: d(volley.mean_ns, wire.mean_ns),
        }
    }
}

/// Volley's figure for one transport, from a run's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolleyFigure {
    /// The results field it was taken from: `service_time` (kernel send to kernel receive)
    /// when the results have it, else `latency`.
    pub field: String,
    /// Queries the run counted answered.
    pub answered: u64,
    pub latency: LatencySummary,
}

impl VolleyFigure {
    /// The figure of a run: its `service_time` when its results carry one, else its `latency`.
    pub fn of(result: &RunResult) -> VolleyFigure {
        let value = serde_json::to_value(result).unwrap_or_default();
        VolleyFigure::from_results(&value).unwrap_or_else(|| VolleyFigure {
            field: "latency".into(),
            answered: result.totals.answered,
            latency: result.latency.clone(),
        })
    }

    /// The figure of a results file read as JSON (`volley.results/1`): its `service_time`
    /// when it has one (results of versions with kernel transmit stamps), else its `latency`.
    /// None when neither is there.
    pub fn from_results(v: &serde_json::Value) -> Option<VolleyFigure> {
        let answered = v.get("totals")?.get("answered")?.as_u64()?;
        ["service_time", "latency"].iter().find_map(|field| {
            let s = serde_json::from_value::<LatencySummary>(v.get(*field)?.clone()).ok()?;
            Some(VolleyFigure { field: field.to_string(), answered, latency: s })
        })
    }
}

/// One transport's calibration: the wire's figures, volley's beside them when a run made the
/// traffic, and their differences.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransportCalibration {
    pub transport: Proto,
    pub wire: LatencySummary,
    pub wire_counts: WireCounts,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub volley: Option<VolleyFigure>,
    /// volley less wire.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub difference: Option<Differences>,
}

/// A calibration: what was captured, and each transport's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    pub schema: String,
    /// `live` (a run under a capture of its own) or `pcap` (a capture file read).
    pub source: String,
    /// The run's target (live), or the capture file (pcap).
    pub input: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub capture: Option<CaptureStats>,
    pub packets: PacketCounts,
    pub transports: Vec<TransportCalibration>,
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl Calibration {
    /// A calibration of a capture's wire results, with `volley`'s figure beside the transport
    /// `run_proto` when a run made the traffic.
    pub fn new(
        source: &str,
        input: &str,
        wire: Vec<WireResult>,
        packets: PacketCounts,
        capture: Option<CaptureStats>,
        run: Option<(Proto, VolleyFigure)>,
    ) -> Calibration {
        let mut transports: Vec<TransportCalibration> = wire
            .into_iter()
            .map(|w| TransportCalibration {
                transport: w.proto,
                wire: LatencySummary::of(&w.latency),
                wire_counts: w.counts,
                volley: None,
                difference: None,
            })
            .collect();
        let mut warnings = Vec::new();
        if let Some((proto, fig)) = run {
            if !transports.iter().any(|t| t.transport == proto) {
                transports.push(TransportCalibration {
                    transport: proto,
                    wire: LatencySummary::default(),
                    wire_counts: WireCounts::default(),
                    volley: None,
                    difference: None,
                });
            }
            let t = transports.iter_mut().find(|t| t.transport == proto).expect("just added");
            if t.wire_counts.matched != fig.answered {
                warnings.push(format!(
                    "{}: volley counted {} answered, the wire matched {}: the figures cover different queries",
                    proto.name(),
                    fig.answered,
                    t.wire_counts.matched
                ));
            }
            if fig.field == "latency" {
                warnings.push(
                    "volley's figure is its latency (from its own clock at the hand-over to the transport, or the \
                     schedule in open loop): its difference to the wire includes the generator's own delay"
                        .into(),
                );
            }
            t.difference = Some(Differences::of(&fig.latency, &t.wire));
            t.volley = Some(fig);
        }
        if let Some(c) = &capture {
            if c.dropped > 0 {
                warnings.push(format!(
                    "the capture dropped {} packets (its reader fell behind): some queries are not matched",
                    c.dropped
                ));
            }
            if c.unstamped > 0 {
                warnings.push(format!("{} packets had no kernel time stamp", c.unstamped));
            }
            let tcp = transports.iter().find(|t| t.transport == Proto::Tcp).map_or(0, |t| t.wire_counts.queries);
            // A held query reads late on the wire (tcpdump's too), not in volley: the tail
            // moves by as many ranks as were held; from 1 % of them on, p99 cannot be judged.
            if c.held > 0 && c.held * 100 >= tcp {
                warnings.push(format!(
                    "tcp: {} of {tcp} queries reached the server's side of loopback over {} µs after they left \
                     (the longest {:.0} µs): the capture stamps them as they arrive there, as tcpdump does, \
                     volley as they left, so its tail reads above the wire's by that wait",
                    c.held,
                    live::HELD_NS / 1000,
                    c.held_max_ns as f64 / 1000.0
                ));
            }
        }
        for t in &transports {
            if t.wire_counts.overflow > 0 {
                warnings.push(format!(
                    "{}: {} queries were not matched: more than {} waited at once",
                    t.transport.name(),
                    t.wire_counts.overflow,
                    matcher::MAX_PENDING
                ));
            }
        }
        Calibration {
            schema: SCHEMA.into(),
            source: source.into(),
            input: input.into(),
            capture,
            packets,
            transports,
            warnings,
        }
    }

    /// The text table: per transport, volley's figures, the wire's and their differences.
    pub fn write_text(&self, w: &mut dyn Write) -> io::Result<()> {
        match &self.capture {
            Some(c) => {
                write!(
                    w,
                    "calibrate {}: captured on {}: {} packets, {} dropped",
                    self.input, c.interface, c.packets, c.dropped
                )?;
                if c.held > 0 {
                    write!(
                        w,
                        ", {} TCP queries held by loopback over {} µs (the longest {:.0} µs)",
                        c.held,
                        live::HELD_NS / 1000,
                        c.held_max_ns as f64 / 1000.0
                    )?;
                }
                writeln!(w)?
            }
            None => writeln!(w, "calibrate {}: {} packets read", self.input, self.packets.packets)?,
        }
        for t in &self.transports {
            let c = &t.wire_counts;
            writeln!(w)?;
            let answered = t.volley.as_ref().map(|v| format!(", volley answered {}", v.answered)).unwrap_or_default();
            writeln!(
                w,
                "{}: wire {} queries, {} matched, {} unanswered, {} unmatched responses{answered}",
                t.transport.name(),
                c.queries,
                c.matched,
                c.unanswered,
                c.unmatched_responses
            )?;
            writeln!(w, "  {:<22} {:>10} {:>10} {:>10} {:>10} {:>10}", "", "p50", "p90", "p99", "p99.9", "mean")?;
            if let Some(v) = &t.volley {
                row(w, &format!("volley ({})", v.field), &v.latency)?;
            }
            row(w, "wire", &t.wire)?;
            if let Some(d) = &t.difference {
                let s = |ns: i64| format!("{:+.1} µs", ns as f64 / 1000.0);
                writeln!(
                    w,
                    "  {:<22} {:>10} {:>10} {:>10} {:>10} {:>10}",
                    "difference",
                    s(d.p50_ns),
                    s(d.p90_ns),
                    s(d.p99_ns),
                    s(d.p999_ns),
                    s(d.mean_ns)
                )?;
            }
        }
        for warn in &self.warnings {
            writeln!(w, "warning: {warn}")?;
        }
        Ok(())
    }

    /// Writes the calibration as JSON.
    pub fn write_json(&self, w: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *w, self)?;
        writeln!(w)
    }

    /// Writes the calibration as JSON to `path`, whole or not at all.
    pub fn write_json_file(&self, path: &Path) -> Result<(), CalibrateError> {
        let mut text = serde_json::to_vec_pretty(self).expect("a calibration serializes");
        text.push(b'\n');
        volley_atomic::write(path, &text)
            .map_err(|source| CalibrateError::Write { path: path.display().to_string(), source })
    }
}

fn row(w: &mut dyn Write, name: &str, s: &LatencySummary) -> io::Result<()> {
    let f = |ns: u64| format!("{:.1} µs", ns as f64 / 1000.0);
    writeln!(
        w,
        "  {:<22} {:>10} {:>10} {:>10} {:>10} {:>10}",
        name,
        f(s.p50_ns),
        f(s.p90_ns),
        f(s.p99_ns),
        f(s.p999_ns),
        f(s.mean_ns)
    )
}

/// Feeds every packet of a capture file (pcap, pcapng) to `matcher`. A file that breaks in
/// the middle keeps what came before; the returned string says where it broke.
pub fn read_pcap<R: Read>(r: R, path: &str, matcher: &mut Matcher) -> Result<Option<String>, CalibrateError> {
    let file = |source| CalibrateError::File { path: path.to_string(), source };
    let mut cap = CaptureReader::new(r).map_err(file)?;
    loop {
        match cap.next_packet() {
            Ok(Some(p)) => matcher.packet(p.ts_ns, p.linktype, p.data),
            Ok(None) => return Ok(None),
            Err(e @ CaptureError::Truncated { .. }) => return Ok(Some(e.to_string())),
            Err(e) => return Err(file(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use volley_metrics::Histogram;

    fn summary(values: &[u64]) -> serde_json::Value {
        let mut h = Histogram::new(3);
        for &v in values {
            h.record(v);
        }
        serde_json::to_value(LatencySummary::of(&h)).unwrap()
    }

    #[test]
    fn service_time_when_the_results_have_it() {
        let mut v = serde_json::json!({"totals": {"answered": 3}, "latency": summary(&[50_000, 60_000, 70_000])});
        let f = VolleyFigure::from_results(&v).unwrap();
        assert_eq!((f.field.as_str(), f.answered, f.latency.p50_ns), ("latency", 3, 60_031));
        v["service_time"] = summary(&[20_000, 30_000, 40_000]);
        let f = VolleyFigure::from_results(&v).unwrap();
        assert_eq!((f.field.as_str(), f.latency.p50_ns), ("service_time", 30_015));
        assert!(VolleyFigure::from_results(&serde_json::json!({"totals": {"answered": 1}})).is_none());
    }

    #[test]
    fn differences_and_warnings() {
        let mut h = Histogram::new(3);
        for v in [10_000, 20_000] {
            h.record(v);
        }
        let wire = WireResult {
            proto: Proto::Udp,
            latency: h,
            counts: WireCounts { queries: 2, matched: 2, ..WireCounts::default() },
        };
        let fig = VolleyFigure::from_results(
            &serde_json::json!({"totals": {"answered": 3}, "service_time": summary(&[11_000, 21_000, 30_000])}),
        )
        .unwrap();
        let c = Calibration::new("live", "udp://x", vec![wire], PacketCounts::default(), None, Some((Proto::Udp, fig)));
        let t = &c.transports[0];
        let d = t.difference.unwrap();
        // p50: 21,000 (bucket 21,007) against 10,000 (bucket 10,007).
        assert_eq!(d.p50_ns, 11_000);
        assert!(d.p99_ns > 0);
        // Three answered, two matched: said; no warning about the figure (service time).
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("volley counted 3 answered, the wire matched 2"));
        let mut text = Vec::new();
        c.write_text(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("volley (service_time)") && text.contains("difference"), "{text}");
    }
}
