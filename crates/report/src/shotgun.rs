//! DNS Shotgun's results, read as runs: so that `volley report`, `compare` and `merge` set years
//! of Shotgun measurements beside volley's own.
//!
//! Two formats are read (DNS Shotgun's "raw output", one file per traffic sender, per thread
//! or merged; docs/report.md says where each is from):
//!
//! * JSON lines, `schema_version` 20221207 (as Shotgun's tools/_plot_common.py reads it and
//!   its examples/TCP.json shows it): a `header` line (`time_units_per_sec`,
//!   `stats_interval`, `timeout`, optional `latency_bucket_boundaries`), then `stats_periodic`
//!   (or `stats_interval`) lines and one `stats_sum` line, each with `since`/`until`,
//!   `queries`, `ongoing`, `responses`, `timeouts`, `discarded`, `response_rcodes` and
//!   `response_latency` (`buckets`: one per time unit; or `bucket_counts` between the header's
//!   boundaries), connection counts in `conn_info` or `conn_*`.
//! * One JSON object, `version` 20200527, as dnssim's `DnsSim:export()` writes it
//!   (replay/dnssim/src/output/dnssim.lua in DNS Shotgun; per thread, and merged by
//!   tools/merge-data.py): `merged`, `stats_interval_ms`, `timeout_ms`, `idle_timeout_ms`,
//!   `handshake_timeout_ms`, `discarded`, `stats_sum` and `stats_periodic`, each stats object
//!   with `since_ms`/`until_ms`, `requests`, `ongoing`, `answers`, `conn_active`,
//!   `conn_handshakes`, `conn_resumed`, `conn_quic_0rtt_loaded`, `quic_0rtt_sent`,
//!   `quic_0rtt_answered`, `conn_handshakes_failed`, `rcode_noerror` … `rcode_other` and
//!   `latency`: `timeout_ms + 1` counts, index i the queries that ended i ms after they were
//!   sent, the last also every query that timed out or failed (dnssim's common.c). dnssim
//!   counts a query, its answer and its latency in the interval it was sent in; `ongoing` is
//!   the queries in flight when the interval began, `conn_handshakes` the attempts (with the
//!   failed ones), and `discarded` the input packets it never sent.
//!
//! Shotgun keeps latency in buckets of a millisecond (or coarser), volley in HDR histograms of
//! nanoseconds: each bucket's count is recorded at the bucket's upper end, so a percentile read
//! from the imported run is an upper bound within one bucket, as volley's own are within their
//! precision; the run carries a warning saying so. Counts beyond the answers in the latency
//! buckets (Shotgun puts timed-out queries in its last bucket) are not latencies and are left
//! out. What Shotgun does not record (bytes, CPU, the target's URL) stays empty.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use volley_metrics::{Histogram, LatencySummary, SecondLatency, SCHEMA};

/// A Shotgun file that cannot be read as a run: the file, the line (JSON lines), and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: DNS Shotgun results: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ShotgunError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

/// Whether the first line of `text` is the header line of Shotgun's JSON-lines format.
pub fn is_lines_format(text: &str) -> bool {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    serde_json::from_str::<Value>(first)
        .map(|v| v.get("type").and_then(Value::as_str) == Some("header") && v.get("schema_version").is_some())
        .unwrap_or(false)
}

/// Whether a JSON object is Shotgun's single-object format (`version` and `stats_sum`).
pub fn is_object_format(v: &Value) -> bool {
    v.get("version").and_then(Value::as_u64).is_some() && v.get("stats_sum").is_some() && v.get("schema").is_none()
}

/// One interval (or the sum) of a Shotgun file, in one shape for both formats.
#[derive(Debug, Clone)]
struct Stats {
    since_ms: f64,
    until_ms: f64,
    queries: u64,
    responses: u64,
    timeouts: u64,
    discarded: u64,
    rcodes: BTreeMap<String, u64>,
    latency: Histogram,
    latency_dropped: u64,
    handshakes: u64,
    handshakes_failed: u64,
    resumed: u64,
    active: u64,
    /// `conn_info.type`: udp, tcp, tls, https2, quic.
    conn_type: Option<String>,
}

/// How a file's latency buckets map to time.
struct Buckets {
    /// Nanoseconds per time unit.
    unit_ns: f64,
    /// Upper boundaries of the `bucket_counts` form, in time units (none: a bucket per unit).
    bounds: Option<Vec<f64>>,
    /// The timeout, in time units.
    timeout: f64,
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn f(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// Reads Shotgun's JSON-lines format (see [`is_lines_format`]) as a volley run (a
/// `volley.results/1` value, ready for `RunResult`).
pub fn read_lines(text: &str, path: &Path) -> Result<Value, ShotgunError> {
    let err = |line: Option<usize>, message: String| ShotgunError { path: path.to_path_buf(), line, message };
    let mut header = None;
    let mut sum = None;
    let mut periodic = Vec::new();
    let mut buckets = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| err(Some(i + 1), format!("not JSON: {e}")))?;
        match v.get("type").and_then(Value::as_str) {
            Some("header") => {
                let units = f(&v, "time_units_per_sec")
                    .filter(|x| *x > 0.0)
                    .ok_or_else(|| err(Some(i + 1), "header without a positive time_units_per_sec".into()))?;
                let bounds = match v.get("latency_bucket_boundaries") {
                    None | Some(Value::Null) => None,
                    Some(Value::Array(a)) => Some(
                        a.iter()
                            .map(Value::as_f64)
                            .collect::<Option<Vec<f64>>>()
                            .filter(|b| b.windows(2).all(|w| w[0] < w[1]))
                            .ok_or_else(|| {
                                err(Some(i + 1), "latency_bucket_boundaries not increasing numbers".into())
                            })?,
                    ),
                    Some(_) => return Err(err(Some(i + 1), "latency_bucket_boundaries is not an array".into())),
                };
                buckets = Some(Buckets { unit_ns: 1e9 / units, bounds, timeout: f(&v, "timeout").unwrap_or(0.0) });
                header = Some(v);
            }
            Some(t @ ("stats_sum" | "stats_periodic" | "stats_interval")) => {
                let b = buckets.as_ref().ok_or_else(|| err(Some(i + 1), "statistics before the header line".into()))?;
                let s = stats_lines(&v, b).map_err(|m| err(Some(i + 1), m))?;
                if t == "stats_sum" {
                    sum = Some(s);
                } else {
                    periodic.push(s);
                }
            }
            _ => {}
        }
    }
    let header = header.ok_or_else(|| err(None, "no header line".into()))?;
    let version = header.get("schema_version").map(|v| v.to_string().trim_matches('"').to_string()).unwrap_or_default();
    finish(&header, sum, periodic, &format!("schema_version {version}"), path)
}

/// Reads Shotgun's single-object format (see [`is_object_format`]) as a volley run.
pub fn read_object(v: &Value, path: &Path) -> Result<Value, ShotgunError> {
    let err = |message: String| ShotgunError { path: path.to_path_buf(), line: None, message };
    let b = Buckets { unit_ns: 1e6, bounds: None, timeout: f(v, "timeout_ms").unwrap_or(0.0) };
    let sum = v
        .get("stats_sum")
        .map(|s| stats_object(s, &b).map_err(|m| format!("stats_sum: {m}")))
        .transpose()
        .map_err(err)?;
    let periodic = match v.get("stats_periodic") {
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| stats_object(s, &b).map_err(|m| format!("stats_periodic[{i}]: {m}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?,
        Some(Value::Null) | None => Vec::new(),
        Some(x) => return Err(err(format!("stats_periodic is not an array: {x}"))),
    };
    let header = json!({
        "time_units_per_sec": 1000,
        "timeout": v.get("timeout_ms").cloned().unwrap_or(Value::Null),
        "stats_interval": v.get("stats_interval_ms").cloned().unwrap_or(Value::Null),
        "generator": "shotgun",
        // Input packets dnssim dropped before sending them (malformed, or a client beyond its
        // max_clients): no query of the run, said in a warning.
        "input_discarded": u(v, "discarded"),
    });
    finish(&header, sum, periodic, &format!("version {}", u(v, "version")), path)
}

fn finish(
    header: &Value,
    sum: Option<Stats>,
    periodic: Vec<Stats>,
    format: &str,
    path: &Path,
) -> Result<Value, ShotgunError> {
    // The sum line is the whole run; without one, the intervals are added up.
    let total = match sum {
        Some(s) => s,
        None if !periodic.is_empty() => {
            let mut t = periodic[0].clone();
            for p in &periodic[1..] {
                add(&mut t, p);
            }
            t
        }
        None => {
            return Err(ShotgunError {
                path: path.to_path_buf(),
                line: None,
                message: "no statistics (stats_sum or stats_periodic)".into(),
            })
        }
    };
    Ok(to_run(header, &total, &periodic, format, path))
}

fn add(t: &mut Stats, p: &Stats) {
    t.since_ms = t.since_ms.min(p.since_ms);
    t.until_ms = t.until_ms.max(p.until_ms);
    t.queries += p.queries;
    t.responses += p.responses;
    t.timeouts += p.timeouts;
    t.discarded += p.discarded;
    for (k, n) in &p.rcodes {
        *t.rcodes.entry(k.clone()).or_default() += n;
    }
    t.latency.merge(&p.latency);
    t.latency_dropped += p.latency_dropped;
    t.handshakes += p.handshakes;
    t.handshakes_failed += p.handshakes_failed;
    t.resumed += p.resumed;
    t.active = p.active;
    t.conn_type = t.conn_type.take().or_else(|| p.conn_type.clone());
}

/// Fills a histogram from bucket counts: each at its bucket's upper end, the last `excess`
/// counts (timed-out queries in the last buckets) left out.
fn histogram(counts: &[u64], b: &Buckets, answered: u64) -> (Histogram, u64) {
    let mut h = Histogram::new(3);
    let total: u64 = counts.iter().sum();
    let mut excess = total.saturating_sub(answered);
    let dropped = excess;
    let mut kept = counts.to_vec();
    for c in kept.iter_mut().rev() {
        let take = excess.min(*c);
        *c -= take;
        excess -= take;
        if excess == 0 {
            break;
        }
    }
    for (i, n) in kept.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        let upper_units = match &b.bounds {
            None => (i + 1) as f64,
            Some(bounds) => bounds.get(i).copied().unwrap_or(b.timeout.max(bounds.last().copied().unwrap_or(0.0))),
        };
        // Just inside the bucket: [lo, hi) holds values below hi.
        let ns = (upper_units * b.unit_ns).max(1.0) as u64;
        h.record_n(ns.saturating_sub(1).max(1), *n);
    }
    (h, dropped)
}

fn counts(v: Option<&Value>, what: &str) -> Result<Vec<u64>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_u64().ok_or_else(|| format!("{what}: a count that is not a whole number: {x}")))
            .collect(),
        Some(x) => Err(format!("{what} is not an array: {x}")),
    }
}

/// A `stats_*` line of the JSON-lines format.
fn stats_lines(v: &Value, b: &Buckets) -> Result<Stats, String> {
    let ms = |x: f64| x * b.unit_ns / 1e6;
    let lat = v.get("response_latency");
    let raw = match lat {
        Some(l) if l.get("bucket_counts").is_some() => {
            if b.bounds.is_none() {
                return Err("bucket_counts without latency_bucket_boundaries in the header".into());
            }
            counts(l.get("bucket_counts"), "response_latency.bucket_counts")?
        }
        Some(l) => counts(l.get("buckets"), "response_latency.buckets")?,
        None => Vec::new(),
    };
    let responses = u(v, "responses");
    let (latency, latency_dropped) = histogram(&raw, b, responses);
    let conn = v.get("conn_info").unwrap_or(v);
    let rcodes = match v.get("response_rcodes") {
        Some(Value::Object(m)) => {
            m.iter().filter_map(|(k, n)| Some((k.clone(), n.as_u64()?))).filter(|(_, n)| *n > 0).collect()
        }
        _ => BTreeMap::new(),
    };
    Ok(Stats {
        since_ms: ms(f(v, "since").ok_or("a statistics line without \"since\"")?),
        until_ms: ms(f(v, "until").ok_or("a statistics line without \"until\"")?),
        queries: u(v, "queries"),
        responses,
        timeouts: u(v, "timeouts"),
        discarded: u(v, "discarded"),
        rcodes,
        latency,
        latency_dropped,
        handshakes: u(conn, "handshakes") + u(conn, "conn_handshakes"),
        handshakes_failed: u(conn, "handshakes_failed") + u(conn, "conn_handshakes_failed"),
        resumed: u(conn, "resumed") + u(conn, "conn_resumed"),
        active: u(v, "conn_active"),
        conn_type: v.get("conn_info").and_then(|c| c.get("type")).and_then(Value::as_str).map(str::to_string),
    })
}

/// A stats object of the single-object format (`version` 20200527), as dnssim writes it.
fn stats_object(v: &Value, b: &Buckets) -> Result<Stats, String> {
    let answers = u(v, "answers");
    let raw = counts(v.get("latency"), "latency")?;
    // Every query dnssim closed (answered, timed out or failed) is in one latency bucket.
    let closed: u64 = raw.iter().sum();
    if closed < answers {
        return Err(format!("{closed} queries in the latency buckets but {answers} answers"));
    }
    let (latency, latency_dropped) = histogram(&raw, b, answers);
    let mut rcodes = BTreeMap::new();
    if let Value::Object(m) = v {
        for (k, n) in m {
            if let (Some(name), Some(n)) = (k.strip_prefix("rcode_"), n.as_u64()) {
                if n > 0 {
                    rcodes.insert(name.to_ascii_uppercase(), n);
                }
            }
        }
    }
    let requests = u(v, "requests");
    // conn_handshakes counts the attempts, the failed (timed out) ones among them.
    let failed = u(v, "conn_handshakes_failed");
    Ok(Stats {
        since_ms: f(v, "since_ms").ok_or("a statistics object without \"since_ms\"")?,
        until_ms: f(v, "until_ms").ok_or("a statistics object without \"until_ms\"")?,
        queries: requests,
        responses: answers,
        // This format counts no timeouts: what dnssim closed without an answer (its
        // `ongoing` is the queries in flight when the interval began, of earlier intervals).
        timeouts: closed - answers,
        discarded: 0,
        rcodes,
        latency,
        latency_dropped,
        handshakes: u(v, "conn_handshakes").saturating_sub(failed),
        handshakes_failed: failed,
        resumed: u(v, "conn_resumed"),
        active: u(v, "conn_active"),
        conn_type: None,
    })
}

/// Totals in volley's shape: every query one fate (answered, timed out, or in flight).
fn totals(s: &Stats) -> Value {
    let issued = s.queries.max(s.responses + s.timeouts);
    let mut unexpected = Map::new();
    if s.discarded > 0 {
        unexpected.insert("late".into(), json!(s.discarded));
    }
    json!({
        "issued": issued,
        "sent": issued,
        "answered": s.responses,
        "timed_out": s.timeouts,
        "failed": 0,
        "in_flight": issued - s.responses - s.timeouts,
        "truncated": 0,
        "rcodes": s.rcodes,
        "errors": {},
        "unexpected": unexpected,
        "bytes_out": 0,
        "bytes_in": 0,
    })
}

fn to_run(header: &Value, total: &Stats, periodic: &[Stats], format: &str, path: &Path) -> Value {
    let started_ms = total.since_ms.max(0.0);
    let duration_s = ((total.until_ms - total.since_ms) / 1000.0).max(0.0);
    let totals_v = totals(total);
    // Shotgun's intervals (stats_interval, 1 s by default) as volley's seconds: an interval
    // is in the second it began in, give or take half an interval (its timer fires a
    // millisecond early or late); shorter intervals are added up into their second.
    let units = header.get("time_units_per_sec").and_then(Value::as_f64).filter(|u| *u > 0.0).unwrap_or(1000.0);
    let interval_ms = header.get("stats_interval").and_then(Value::as_f64).map_or(1000.0, |i| i * 1000.0 / units);
    let mut seconds: BTreeMap<u32, Stats> = BTreeMap::new();
    for p in periodic {
        let second = ((p.since_ms - total.since_ms + interval_ms.min(1000.0) / 2.0) / 1000.0).floor().max(0.0) as u32;
        match seconds.entry(second) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(p.clone());
            }
            std::collections::btree_map::Entry::Occupied(mut e) => add(e.get_mut(), p),
        }
    }
    let series: Vec<Value> = seconds
        .iter()
        .map(|(&second, p)| {
            let mut row = totals(p);
            let o = row.as_object_mut().expect("totals are an object");
            for k in ["in_flight", "bytes_out", "bytes_in"] {
                o.remove(k);
            }
            o.insert("second".into(), json!(second));
            o.insert("unsent".into(), json!(0));
            o.insert("latency".into(), serde_json::to_value(SecondLatency::of(&second_histogram(&p.latency))).unwrap_or(Value::Null));
            o.insert(
                "connections".into(),
                json!({"active": p.active, "opened": p.handshakes, "closed": 0, "failed": p.handshakes_failed, "resumed": p.resumed,
                       "early_data_offered": 0, "early_data_accepted": 0}),
            );
            row
        })
        .collect();
    // Shotgun's connection types as volley's schemes (https2 is DoH over HTTP/2).
    let transport =
        total.conn_type.as_deref().or_else(|| periodic.iter().find_map(|p| p.conn_type.as_deref())).map(|t| match t {
            "https2" => "https".to_string(),
            t => t.to_string(),
        });
    let command: Vec<String> = match header.get("generator_params") {
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    // The server, when the command line names it (`replay.py -s ADDR`).
    let server =
        command.windows(2).find(|w| w[0] == "-s" || w[0] == "--server").map(|w| w[1].clone()).unwrap_or_default();
    let generator = format!(
        "dns-shotgun {}",
        header
            .get("generator_version")
            .map(|v| v.to_string().trim_matches('"').to_string())
            .unwrap_or_else(|| "(version unknown)".into())
    );
    let timeout_ms = header.get("timeout").and_then(Value::as_f64).unwrap_or(0.0) * 1000.0
        / header.get("time_units_per_sec").and_then(Value::as_f64).unwrap_or(1000.0);
    let mut warnings = vec![format!(
        "imported from DNS Shotgun results ({format}, {}): latency in Shotgun's buckets, each read at its upper end (percentiles are upper bounds within a bucket); no bytes, CPU or target URL",
        path.display()
    )];
    let input_discarded = header.get("input_discarded").and_then(Value::as_u64).unwrap_or(0);
    if input_discarded > 0 {
        warnings.push(format!(
            "{input_discarded} input packets Shotgun discarded before sending them (dnssim's \"discarded\") are not queries of this run"
        ));
    }
    if total.latency_dropped > 0 && total.latency_dropped != total.timeouts {
        warnings.push(format!(
            "{} counts in Shotgun's latency buckets beyond its {} responses were left out (timed out)",
            total.latency_dropped, total.responses
        ));
    }
    let qps = |n: u64| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
    let issued = totals_v["issued"].as_u64().unwrap_or(0);
    let mut connections = Value::Null;
    if total.handshakes + total.handshakes_failed > 0 {
        let c = volley_metrics::ConnectionSummary {
            opened: total.handshakes,
            failed: total.handshakes_failed,
            resumed: total.resumed,
            ..Default::default()
        };
        connections = serde_json::to_value(c).unwrap_or(Value::Null);
    }
    let mut run = json!({
        "schema": SCHEMA,
        "volley_version": generator,
        "status": "complete",
        "command": command,
        "started_at": volley_wire::rfc3339((started_ms * 1e6) as u64, 3),
        "started_unix_ms": started_ms as u64,
        "duration_s": duration_s,
        "elapsed_s": duration_s,
        "target": {
            "url": if server.is_empty() { format!("shotgun:{}", path.display()) } else { server.clone() },
            "transport": transport.unwrap_or_else(|| "unknown".into()),
            "address": server,
        },
        "load": {"model": "replay", "timeout_ms": timeout_ms as u64, "threads": 1, "connections": 0, "queries": format!("DNS Shotgun replay ({format})")},
        "totals": totals_v,
        "qps": {"issued": qps(issued), "sent": qps(issued), "answered": qps(total.responses)},
        "latency": serde_json::to_value(LatencySummary::of(&total.latency)).unwrap_or(Value::Null),
        "generator": {"cpu_s": 0.0, "cpu_us_per_answer": 0.0, "threads": 1},
        "series": series,
        "events": {},
        "warnings": warnings,
    });
    if !connections.is_null() {
        run["connections"] = connections;
    }
    run
}

/// A run-total histogram (3 significant digits) as a per-second one (2), as volley's series keep.
fn second_histogram(h: &Histogram) -> Histogram {
    let mut s = Histogram::new(2);
    for (v, n) in Histogram::to_sparse(h).iter() {
        s.record_n(v, n);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Shotgun file of the JSON-lines format, written for this test after the documented
    /// fields (per-millisecond buckets).
    fn lines_file() -> String {
        let mut buckets = vec![0u64; 2001];
        buckets[0] = 300; // [0, 1) ms
        buckets[4] = 600; // [4, 5) ms
        buckets[99] = 90; // [99, 100) ms
        buckets[2000] = 10; // timed out
        let mut half = buckets.clone();
        for b in half.iter_mut() {
            *b /= 2;
        }
        let header = json!({"runid": "1", "type": "header", "schema_version": 20221207, "generator": "shotgun",
            "generator_version": "20240219", "generator_params": ["replay.py", "-s", "127.0.0.1", "-c", "tcp.toml"],
            "time_units_per_sec": 1000, "stats_interval": 1000, "timeout": 2000, "merged": true});
        let p = |since: u64, b: &Vec<u64>| {
            json!({"runid": "1", "type": "stats_periodic", "since": since, "until": since + 1000,
            "queries": 500, "ongoing": 0, "responses": 495, "timeouts": 5, "discarded": 1,
            "response_rcodes": {"NOERROR": 490, "NXDOMAIN": 5}, "response_latency": {"buckets": b},
            "conn_active": 10, "conn_info": {"type": "tcp", "handshakes": 10, "handshakes_failed": 0}})
        };
        let sum = json!({"runid": "1", "type": "stats_sum", "since": 1_700_000_000_000u64, "until": 1_700_000_002_000u64,
            "queries": 1000, "ongoing": 0, "responses": 990, "timeouts": 10, "discarded": 2,
            "response_rcodes": {"NOERROR": 980, "NXDOMAIN": 10}, "response_latency": {"buckets": buckets},
            "conn_active": 0, "conn_info": {"type": "tcp", "handshakes": 20, "handshakes_failed": 0}});
        [header, p(1_700_000_000_000, &half), p(1_700_000_001_000, &half), sum]
            .iter()
            .map(|v| v.to_string() + "\n")
            .collect()
    }

    #[test]
    fn json_lines_format_reads_as_a_balanced_run() {
        let text = lines_file();
        assert!(is_lines_format(&text));
        let v = read_lines(&text, Path::new("tcp.json")).unwrap();
        let r: volley_metrics::RunResult = serde_json::from_value(v).unwrap();
        assert_eq!((r.totals.issued, r.totals.answered, r.totals.timed_out, r.totals.in_flight), (1000, 990, 10, 0));
        assert_eq!(r.totals.rcodes.get("NXDOMAIN"), Some(&10));
        assert_eq!(r.totals.unexpected.get("late"), Some(&2));
        // 990 answers in the buckets (the 10 timed out left out): 300 under 1 ms, 600 under 5 ms.
        assert_eq!(r.latency.count, 990);
        let h = Histogram::from_sparse(&r.latency.histogram);
        let p50 = h.quantile(0.5);
        assert!((4_000_000..=5_010_000).contains(&p50), "p50 {p50}");
        assert!(h.quantile(0.99) <= 100_100_000 && h.quantile(0.99) >= 99_000_000);
        assert_eq!(r.series.len(), 2);
        assert_eq!(r.series[1].second, 1);
        assert_eq!(r.duration_s, 2.0);
        assert_eq!(r.target.transport, "tcp");
        assert_eq!(r.target.address, "127.0.0.1");
        assert_eq!(r.connections.as_ref().map(|c| c.opened), Some(20));
        assert!(r.warnings[0].contains("DNS Shotgun"));
    }

    #[test]
    fn boundary_buckets_and_the_old_format() {
        let header = json!({"type": "header", "schema_version": 20221207, "time_units_per_sec": 1000, "stats_interval": 1000,
            "timeout": 2000, "latency_bucket_boundaries": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]});
        let sum = json!({"type": "stats_sum", "since": 0, "until": 1000, "queries": 110, "ongoing": 0, "responses": 100,
            "timeouts": 10, "response_latency": {"bucket_counts": [50, 0, 40, 0, 0, 0, 10, 0, 0, 0, 0, 10]}});
        let text = format!("{header}\n{sum}\n");
        let r: volley_metrics::RunResult =
            serde_json::from_value(read_lines(&text, Path::new("x.json")).unwrap()).unwrap();
        let h = Histogram::from_sparse(&r.latency.histogram);
        assert_eq!(h.count(), 100);
        // Half under 1 ms, 90 % under 5 ms, all under 100 ms.
        assert!(h.quantile(0.5) <= 1_001_000 && h.quantile(0.9) <= 5_010_000 && h.max() <= 100_100_000);

        let mut lat = vec![0u64; 2001];
        lat[2] = 70;
        lat[30] = 20;
        lat[2000] = 10;
        let old = json!({"version": 20200527, "merged": true, "stats_interval_ms": 1000, "timeout_ms": 2000, "discarded": 0,
            "stats_sum": {"since_ms": 1000, "until_ms": 3000, "requests": 100, "ongoing": 0, "answers": 90,
                          "rcode_noerror": 90, "latency": lat, "conn_active": 0, "conn_handshakes": 4, "conn_handshakes_failed": 0},
            "stats_periodic": []});
        assert!(is_object_format(&old) && !is_lines_format(&serde_json::to_string_pretty(&old).unwrap()));
        let r: volley_metrics::RunResult =
            serde_json::from_value(read_object(&old, Path::new("old.json")).unwrap()).unwrap();
        assert_eq!((r.totals.issued, r.totals.answered, r.totals.timed_out), (100, 90, 10));
        assert_eq!(r.totals.rcodes.get("NOERROR"), Some(&90));
        assert!(Histogram::from_sparse(&r.latency.histogram).quantile(0.5) <= 3_010_000);
    }

    #[test]
    fn broken_files_name_the_line() {
        let text = "{\"type\": \"header\", \"schema_version\": 20221207, \"time_units_per_sec\": 1000}\nnot json\n";
        let e = read_lines(text, Path::new("bad.json")).unwrap_err().to_string();
        assert!(e.starts_with("bad.json:2: DNS Shotgun results: not JSON"), "{e}");
        let text = "{\"type\": \"header\", \"schema_version\": 20221207, \"time_units_per_sec\": 1000}\n";
        let e = read_lines(text, Path::new("empty.json")).unwrap_err().to_string();
        assert!(e.contains("no statistics"), "{e}");
    }
}
