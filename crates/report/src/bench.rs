//! The `volley bench` table: one row per transport, built from a column model so that new
//! columns are one entry in [`COLUMNS`] (and a field in [`BenchRow`]).

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::table::{Align, Table};
use crate::units::{fmt_bytes, fmt_ns, fmt_rate, fmt_ratio_pct};

/// One transport's figures in a bench.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRow {
    /// Transport name as the user wrote it (`udp`, `tcp`, `dot`, `doh2`, ...).
    pub transport: String,
    /// Answers per second.
    pub qps: f64,
    /// Answered queries over queries issued, 0..=1.
    pub answered_ratio: f64,
    /// Median latency, nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile latency, nanoseconds.
    pub p99_ns: u64,
    /// Generator CPU time per answered query, microseconds.
    pub cpu_us_per_answer: f64,
    /// Connection-based transports: connections opened, their median handshake (TCP + TLS, or
    /// QUIC), and how many resumed a TLS session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_p50_ns: Option<u64>,
    /// The median of each connection's handshake time over its RTT (1.0: one round trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_rtts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<u64>,
    /// Bytes on the wire per answered query, both directions together, IP and transport
    /// headers included (connections' handshakes and closes are part of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_query: Option<f64>,
    /// Packets on the wire per answered query, both directions together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets_per_query: Option<f64>,
    /// The target's CPU time per answered query, microseconds: the embedded responder's
    /// threads, or an external target's processes (`--target-pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cpu_us_per_answer: Option<f64>,
    /// Free text printed after the columns (e.g. `connection refused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What every cell may look at besides its row.
struct Context {
    /// QPS of the `udp` row, the reference of the `qps vs udp` column.
    udp_qps: Option<f64>,
    /// Bytes and packets per query of the `udp` row, the references of `B vs udp` and
    /// `pkts vs udp`.
    udp_bytes: Option<f64>,
    udp_packets: Option<f64>,
    /// The target's CPU per query of the `udp` row, the reference of `srv vs udp`.
    udp_target_cpu: Option<f64>,
}

/// A column of the bench table: header, alignment, whether it appears at all for these rows,
/// and how one row's cell is written.
struct Column {
    header: &'static str,
    align: Align,
    shown: fn(&[BenchRow]) -> bool,
    cell: fn(&BenchRow, &Context) -> String,
}

fn always(_: &[BenchRow]) -> bool {
    true
}

/// The columns, in order. Optional columns (handshake time, bytes per query) go here with a
/// `shown` that checks whether any row has the figure.
const COLUMNS: &[Column] = &[
    Column { header: "transport", align: Align::Left, shown: always, cell: |r, _| r.transport.clone() },
    Column { header: "qps", align: Align::Right, shown: always, cell: |r, _| fmt_rate(r.qps) },
    Column { header: "qps vs udp", align: Align::Right, shown: always, cell: |r, c| vs_udp(r.qps, c.udp_qps) },
    Column { header: "answered", align: Align::Right, shown: always, cell: |r, _| fmt_ratio_pct(r.answered_ratio) },
    Column { header: "p50", align: Align::Right, shown: always, cell: |r, _| fmt_ns(r.p50_ns) },
    Column { header: "p99", align: Align::Right, shown: always, cell: |r, _| fmt_ns(r.p99_ns) },
    Column {
        header: "gen CPU/query",
        align: Align::Right,
        shown: always,
        cell: |r, _| {
            if r.cpu_us_per_answer.is_finite() && r.cpu_us_per_answer >= 0.0 {
                fmt_ns((r.cpu_us_per_answer * 1000.0).round() as u64)
            } else {
                "-".into()
            }
        },
    },
    Column {
        header: "srv CPU/query",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.target_cpu_us_per_answer.is_some()),
        cell: |r, _| r.target_cpu_us_per_answer.map_or("-".into(), |us| fmt_ns((us * 1000.0).round() as u64)),
    },
    Column {
        header: "srv vs udp",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.target_cpu_us_per_answer.is_some()),
        cell: |r, c| r.target_cpu_us_per_answer.map_or("-".into(), |us| vs_udp(us, c.udp_target_cpu)),
    },
    Column {
        header: "conns",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.connections.is_some()),
        cell: |r, _| r.connections.map_or("-".into(), |n| n.to_string()),
    },
    Column {
        header: "handshake",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.handshake_p50_ns.is_some()),
        cell: |r, _| r.handshake_p50_ns.map_or("-".into(), fmt_ns),
    },
    Column {
        header: "hs/rtt",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.handshake_rtts.is_some()),
        cell: |r, _| r.handshake_rtts.map_or("-".into(), |x| format!("{x:.1}")),
    },
    Column {
        header: "resumed",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.resumed.is_some()),
        cell: |r, _| r.resumed.map_or("-".into(), |n| n.to_string()),
    },
    Column {
        header: "B/query",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.bytes_per_query.is_some()),
        cell: |r, _| r.bytes_per_query.map_or("-".into(), fmt_bytes),
    },
    Column {
        header: "B vs udp",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.bytes_per_query.is_some()),
        cell: |r, c| r.bytes_per_query.map_or("-".into(), |b| vs_udp(b, c.udp_bytes)),
    },
    Column {
        header: "pkts/query",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.packets_per_query.is_some()),
        cell: |r, _| r.packets_per_query.map_or("-".into(), |p| format!("{p:.2}")),
    },
    Column {
        header: "pkts vs udp",
        align: Align::Right,
        shown: |rows| rows.iter().any(|r| r.packets_per_query.is_some()),
        cell: |r, c| r.packets_per_query.map_or("-".into(), |p| vs_udp(p, c.udp_packets)),
    },
    Column { header: "", align: Align::Left, shown: always, cell: |r, _| r.note.clone().unwrap_or_default() },
];

/// `value / udp_value` as `0.41x`; `-` without a usable udp row.
fn vs_udp(value: f64, udp_value: Option<f64>) -> String {
    match udp_value {
        Some(u) if u > 0.0 && u.is_finite() && value.is_finite() => format!("{:.2}x", value / u),
        _ => "-".to_string(),
    }
}

/// Writes the bench table: `transport  qps  qps vs udp  answered  p50  p99  gen CPU/query`, the
/// target's CPU per query and its ratio to UDP's when rows have it, the connection columns, `B/query  B vs udp  pkts/query  pkts vs udp` when rows have wire
/// figures, and the note, columns aligned. `qps vs udp` is each row's qps over the qps of the row
/// whose transport is `udp` (the first such row), `-` when there is none; `B vs udp` and
/// `pkts vs udp` likewise for bytes and packets per query.
pub fn write_bench_table(rows: &[BenchRow], w: &mut impl Write) -> io::Result<()> {
    bench_table(rows).write(w)
}

/// The bench table as a [`Table`], for callers that embed it.
pub fn bench_table(rows: &[BenchRow]) -> Table {
    let udp = rows.iter().find(|r| r.transport.eq_ignore_ascii_case("udp"));
    let ctx = Context {
        udp_qps: udp.map(|r| r.qps),
        udp_bytes: udp.and_then(|r| r.bytes_per_query),
        udp_packets: udp.and_then(|r| r.packets_per_query),
        udp_target_cpu: udp.and_then(|r| r.target_cpu_us_per_answer),
    };
    let cols: Vec<&Column> = COLUMNS.iter().filter(|c| (c.shown)(rows)).collect();
    let mut t = cols.iter().fold(Table::new(), |t, c| t.column(c.header, c.align));
    for r in rows {
        t.row(cols.iter().map(|c| (c.cell)(r, &ctx)));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(transport: &str, bytes: Option<f64>, packets: Option<f64>) -> BenchRow {
        BenchRow {
            transport: transport.into(),
            qps: 1000.0,
            answered_ratio: 1.0,
            p50_ns: 1,
            p99_ns: 2,
            cpu_us_per_answer: 1.0,
            connections: None,
            handshake_p50_ns: None,
            handshake_rtts: None,
            resumed: None,
            bytes_per_query: bytes,
            packets_per_query: packets,
            target_cpu_us_per_answer: None,
            note: None,
        }
    }

    #[test]
    fn target_cpu_relative_to_udp() {
        let mut udp = row("udp", None, None);
        udp.target_cpu_us_per_answer = Some(2.0);
        let mut dot = row("dot", None, None);
        dot.target_cpu_us_per_answer = Some(6.8);
        let lines = bench_table(&[udp, dot, row("x", None, None)]).lines();
        assert!(lines[0].contains("srv CPU/query") && lines[0].contains("srv vs udp"), "{lines:?}");
        assert!(lines[2].contains("6.80µs") && lines[2].contains("3.40x"), "{lines:?}");
        assert!(!bench_table(&[row("udp", None, None)]).lines()[0].contains("srv CPU"));
    }

    #[test]
    fn handshake_round_trips_column() {
        let mut dot = row("dot", None, None);
        (dot.connections, dot.handshake_p50_ns, dot.handshake_rtts) = (Some(1), Some(700_000), Some(2.04));
        let lines = bench_table(&[row("udp", None, None), dot]).lines();
        assert!(lines[0].contains("hs/rtt"), "{lines:?}");
        assert!(lines[2].ends_with(" 2.0"), "{lines:?}");
        assert!(!bench_table(&[row("udp", None, None)]).lines()[0].contains("hs/rtt"));
    }

    #[test]
    fn wire_columns_relative_to_udp() {
        let rows =
            vec![row("udp", Some(162.0), Some(2.0)), row("doh2", Some(3240.0), Some(24.0)), row("x", None, None)];
        let t = bench_table(&rows);
        let lines = t.lines();
        assert!(lines[0].contains("B/query") && lines[0].contains("pkts vs udp"), "{lines:?}");
        assert!(lines[2].contains("3.24kB") && lines[2].contains("20.00x") && lines[2].contains("12.00x"), "{lines:?}");
        assert!(lines[3].contains('-'));
        // Without wire figures the columns are not shown.
        let plain = bench_table(&[row("udp", None, None)]);
        assert!(!plain.lines()[0].contains("B/query"));
    }
}
