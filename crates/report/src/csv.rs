//! The per-second series as CSV, for spreadsheets and plotting tools.

use std::collections::BTreeSet;
use std::io::{self, Write};

use volley_metrics::{Close, ErrorKind, RunResult, SecondRow, Unexpected, Unsent};

use crate::text::rcode_rank;

/// Writes the per-second series as CSV with a header row. Columns: `second, sent, answered,
/// timed_out, failed, truncated, p50_ns, p90_ns, p99_ns, p999_ns, max_ns, issued, unsent`, then
/// one column per RCODE seen in the run (its name, e.g. `NOERROR`, in registry order), one per
/// error kind seen (`error_KIND`, e.g. `error_reset`), one per kind of unexpected response seen
/// (`unexpected_KIND`) and one per reason queries were unsent (`unsent_WHY`); for connection-based transports `conns_active` (open at the end of
/// the second), `conns_opened`, `conns_closed`, `conns_failed`, `conns_resumed`,
/// `conns_early_offered`, `conns_early_accepted` (0-RTT), the median and p99 handshake time of
/// the connections opened in that second (`hs_p50_ns`, `hs_p99_ns`; empty without any) and the
/// medians of its parts (`hs_tcp_p50_ns`, `hs_tls_p50_ns`, `hs_quic_p50_ns`), and one column per
/// way connections were closed (`closed_HOW`, e.g. `closed_server_fin`); with
/// `--target-pid`, `target_cpu_s`. Counts are of events in that second; latency cells are
/// empty for a second without answers. Each count column sums to the matching total of the run.
pub fn write_csv_series(r: &RunResult, w: &mut impl Write) -> io::Result<()> {
    let rcodes: Vec<String> = {
        let mut seen: BTreeSet<(u16, String)> = BTreeSet::new();
        let names = r.totals.rcodes.keys().chain(r.series.iter().flat_map(|s| s.rcodes.keys()));
        seen.extend(names.map(|n| (rcode_rank(n), n.clone())));
        seen.into_iter().map(|(_, n)| n).collect()
    };
    let errors = kinds_seen(r.totals.errors.keys().chain(r.series.iter().flat_map(|s| s.errors.keys())), |n| {
        ErrorKind::from_name(n).map(|k| k as usize)
    });
    let unexpected =
        kinds_seen(r.totals.unexpected.keys().chain(r.series.iter().flat_map(|s| s.unexpected.keys())), |n| {
            Unexpected::from_name(n).map(|k| k as usize)
        });
    let unsent =
        kinds_seen(r.totals.unsent_reasons.keys().chain(r.series.iter().flat_map(|s| s.unsent_reasons.keys())), |n| {
            Unsent::from_name(n).map(|k| k as usize)
        });

    let mut header: Vec<String> = [
        "second",
        "sent",
        "answered",
        "timed_out",
        "failed",
        "truncated",
        "p50_ns",
        "p90_ns",
        "p99_ns",
        "p999_ns",
        "max_ns",
        "issued",
        "unsent",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(rcodes.iter().cloned());
    header.extend(errors.iter().map(|k| format!("error_{k}")));
    header.extend(unexpected.iter().map(|k| format!("unexpected_{k}")));
    header.extend(unsent.iter().map(|k| format!("unsent_{k}")));
    // Connection-based transports: the connection series, closes by who closed and how.
    let conns = r.series.iter().any(|s| s.connections.is_some());
    let closed_by =
        kinds_seen(r.series.iter().flat_map(|s| s.connections.iter().flat_map(|c| c.closed_by.keys())), |n| {
            Close::from_name(n).map(|k| k as usize)
        });
    if conns {
        header.extend(
            [
                "conns_active",
                "conns_draining",
                "conns_opened",
                "conns_closed",
                "conns_failed",
                "conns_resumed",
                "conns_early_offered",
                "conns_early_accepted",
                "hs_p50_ns",
                "hs_p99_ns",
                "hs_tcp_p50_ns",
                "hs_tls_p50_ns",
                "hs_quic_p50_ns",
            ]
            .map(String::from),
        );
        header.extend(closed_by.iter().map(|k| format!("closed_{k}")));
    }
    // With --target-pid: the target's CPU seconds in each second.
    let target = r.series.iter().any(|s| s.target_cpu_s.is_some());
    if target {
        header.push("target_cpu_s".into());
    }
    write_record(w, &header)?;

    for s in &r.series {
        let mut cells = row_cells(s, &rcodes, &errors, &unexpected, &unsent);
        if conns {
            let c = s.connections.clone().unwrap_or_default();
            cells.extend(
                [
                    c.active,
                    c.draining,
                    c.opened,
                    c.closed,
                    c.failed,
                    c.resumed,
                    c.early_data_offered,
                    c.early_data_accepted,
                ]
                .iter()
                .map(u64::to_string),
            );
            let p50 = |h: &Option<volley_metrics::SecondLatency>| h.as_ref().map(|h| h.p50_ns);
            cells.extend(
                [
                    p50(&c.handshake),
                    c.handshake.as_ref().map(|h| h.p99_ns),
                    p50(&c.handshake_tcp),
                    p50(&c.handshake_tls),
                    p50(&c.handshake_quic),
                ]
                .map(|v| v.map_or(String::new(), |v| v.to_string())),
            );
            cells.extend(closed_by.iter().map(|k| c.closed_by.get(k).copied().unwrap_or(0).to_string()));
        }
        if target {
            cells.push(s.target_cpu_s.map_or(String::new(), |c| format!("{c:.6}")));
        }
        write_record(w, &cells)?;
    }
    Ok(())
}

fn row_cells(
    s: &SecondRow,
    rcodes: &[String],
    errors: &[String],
    unexpected: &[String],
    unsent: &[String],
) -> Vec<String> {
    let mut cells: Vec<String> =
        [s.second as u64, s.sent, s.answered, s.timed_out, s.failed, s.truncated].iter().map(u64::to_string).collect();
    let l = &s.latency;
    for v in [l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns, l.max_ns] {
        cells.push(if s.answered == 0 { String::new() } else { v.to_string() });
    }
    cells.extend([s.issued, s.unsent].iter().map(u64::to_string));
    let get = |m: &std::collections::BTreeMap<String, u64>, k: &String| m.get(k).copied().unwrap_or(0).to_string();
    cells.extend(rcodes.iter().map(|k| get(&s.rcodes, k)));
    cells.extend(errors.iter().map(|k| get(&s.errors, k)));
    cells.extend(unexpected.iter().map(|k| get(&s.unexpected, k)));
    cells.extend(unsent.iter().map(|k| get(&s.unsent_reasons, k)));
    cells
}

/// Names seen, known kinds in their declared order, unknown names after them alphabetically.
fn kinds_seen<'a>(names: impl Iterator<Item = &'a String>, rank: impl Fn(&str) -> Option<usize>) -> Vec<String> {
    let mut seen: BTreeSet<(usize, String)> = BTreeSet::new();
    seen.extend(names.map(|n| (rank(n).unwrap_or(usize::MAX), n.clone())));
    seen.into_iter().map(|(_, n)| n).collect()
}

/// One CSV record (RFC 4180): cells with a comma, quote or line break are quoted.
fn write_record(w: &mut impl Write, cells: &[String]) -> io::Result<()> {
    let mut line = String::new();
    for (i, c) in cells.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        if c.contains([',', '"', '\n', '\r']) {
            line.push('"');
            line.push_str(&c.replace('"', "\"\""));
            line.push('"');
        } else {
            line.push_str(c);
        }
    }
    line.push('\n');
    w.write_all(line.as_bytes())
}
