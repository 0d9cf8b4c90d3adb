//! The HTML page of experiments (`volley.experiment/1`, written by `volley experiment run -o`,
//! docs/experiments.md): per experiment its study, the table (each measured figure beside the
//! study's, a verdict per row), every check of the study's finding with its verdict, and the
//! study's charts drawn from the measurement: per column, the rows' measured values as bars
//! with the study's figures marked; the figure against the number of connections where a
//! block varies them (seeds/000's QPS per connections); each row's response-time CDF (seeds/001's
//! CDFs, seeds/003's response times) or handshake-to-RTT CDF (seeds/002's histogram).
//!
//! The document is read as JSON values (this crate does not depend on the experiment layer):
//! fields missing or of another type leave their part of the page out, never panic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::Path;

use serde_json::Value;
use volley_metrics::SparseHistogram;

use crate::chart::{cdf_points, Axis, ChartData, Scale, Series, Style, Unit};
use crate::html::{esc, figure, CSS};
use crate::json::ReportError;
use crate::merge::write_atomic;

/// The schema an experiment document carries.
pub const EXPERIMENT_SCHEMA: &str = "volley.experiment/1";

/// Reads an experiment document; a file that is not one says what it is instead.
pub fn read_experiment(path: &Path) -> Result<Value, String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    if v["schema"] != EXPERIMENT_SCHEMA {
        let found = match v["schema"].as_str() {
            Some(s) => format!("schema \"{s}\""),
            None => "no \"schema\" field".to_string(),
        };
        return Err(format!("{}: not an experiment ({found}, expected {EXPERIMENT_SCHEMA})", path.display()));
    }
    Ok(v)
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// A number as the experiment's text table writes it: 3 significant figures.
fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The study's figure of a cell, as text.
fn study_text(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => n.as_f64().map(num),
        Value::String(w) => Some(w.clone()),
        _ => None,
    }
}

/// The page of one or more experiment documents (`(name, document)`).
pub fn write_html_experiments(docs: &[(String, Value)], w: &mut impl Write) -> io::Result<()> {
    let mut out = String::new();
    let names: Vec<&str> = docs.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>volley experiments: {}</title>\n<style>{CSS}\
         .holds{{color:#1b5e20}}.differs{{color:#b71c1c;font-weight:bold}}.na{{color:#777}}</style>\n</head>\n<body>\n<main>",
        esc(&names.join(", "))
    );
    let _ = write!(
        out,
        "<header><h1>volley experiments</h1><p>{} experiment{}: the studies' figures beside this \
         measurement. Written by volley {}.</p>\n<nav>",
        docs.len(),
        if docs.len() == 1 { "" } else { "s" },
        esc(env!("CARGO_PKG_VERSION"))
    );
    for (k, (name, _)) in docs.iter().enumerate() {
        let _ = write!(out, "<a href=\"#experiment-{}\">{}</a>", k + 1, esc(name));
    }
    out.push_str("</nav></header>\n");
    for (k, (name, doc)) in docs.iter().enumerate() {
        section(&mut out, k + 1, name, doc)?;
    }
    out.push_str("</main>\n</body>\n</html>\n");
    w.write_all(out.as_bytes())
}

/// [`write_html_experiments`] to `path`, atomically.
pub fn write_html_experiments_file(docs: &[(String, Value)], path: &Path) -> Result<(), ReportError> {
    let mut bytes = Vec::new();
    write_html_experiments(docs, &mut bytes).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        op: "write the report",
        source,
    })?;
    write_atomic(path, &bytes)
}

fn section(out: &mut String, k: usize, name: &str, doc: &Value) -> io::Result<()> {
    let spec = &doc["spec"];
    let _ = writeln!(
        out,
        "<section class=\"experiment\" id=\"experiment-{k}\"><h2>{}: {}</h2>",
        esc(s(spec, "name")),
        esc(s(spec, "title"))
    );
    let _ = writeln!(out, "<p>Study: <b>{}</b>. File: {}.</p>", esc(s(spec, "source")), esc(name));
    if !s(spec, "description").is_empty() {
        let _ = writeln!(out, "<p class=\"muted\">{}</p>", esc(s(spec, "description")));
    }
    let host = &doc["host"];
    let server = match doc["server"].as_object() {
        Some(sv) => format!(
            " Server: {} ({}), {}, on core {}.",
            sv.get("name").and_then(Value::as_str).unwrap_or(""),
            sv.get("version").and_then(Value::as_str).unwrap_or(""),
            sv.get("answers").and_then(Value::as_str).unwrap_or(""),
            sv.get("cpu").and_then(Value::as_u64).unwrap_or(0)
        ),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "<p>Ran {} on {} ({} CPUs, {}), {} s{}{}.{}</p>",
        esc(s(doc, "started_at")),
        esc(s(host, "hostname")),
        host["cpus"].as_u64().unwrap_or(0),
        esc(s(host, "cpu_model")),
        num(doc["seconds"].as_f64().unwrap_or(0.0)),
        if doc["quick"] == true { ", --quick" } else { "" },
        if doc["interrupted"] == true { ", <span class=\"status-interrupted\">interrupted</span>" } else { "" },
        esc(&server)
    );

    // The table: measured (study) per column, and the row's verdict.
    let columns: Vec<&Value> = spec["columns"].as_array().map(|c| c.iter().collect()).unwrap_or_default();
    let rows: Vec<&Value> = doc["table"]["rows"].as_array().map(|r| r.iter().collect()).unwrap_or_default();
    out.push_str("<h3>Table</h3>\n<table class=\"experiment-table\"><thead><tr><th>row</th>");
    for c in &columns {
        let label = c["label"].as_str().unwrap_or(s(c, "name"));
        let _ = write!(out, "<th class=\"n\">{}</th>", esc(label));
    }
    out.push_str("<th>verdict</th></tr></thead><tbody>\n");
    for r in &rows {
        let _ = write!(out, "<tr><td>{}</td>", esc(s(r, "label")));
        for c in &columns {
            let cell = &r["cells"][s(c, "name")];
            let ratio = c["ratio_to"].is_string() || c["factor_of"].is_string();
            let x = if ratio { "x" } else { "" };
            let mark = if cell["derived"] == true { "*" } else { "" };
            let m = cell["measured"].as_f64().map_or("-".to_string(), |v| format!("{}{x}{mark}", num(v)));
            let st = study_text(&cell["study"]).map_or(String::new(), |t| {
                if cell["study"].is_number() {
                    format!(" ({t}{x})")
                } else {
                    format!(" ({t})")
                }
            });
            let _ = write!(out, "<td class=\"n\">{}{}</td>", esc(&m), esc(&st));
        }
        let verdict = s(r, "verdict");
        let class = match verdict {
            "holds" => "holds",
            "differs" => "differs",
            _ => "na",
        };
        let _ = writeln!(out, "<td class=\"{class}\">{}</td></tr>", esc(verdict));
    }
    out.push_str("</tbody></table>\n<p class=\"muted\">In brackets: the study's figure.</p>\n");
    let mut derived: Vec<&str> = columns
        .iter()
        .filter(|c| rows.iter().any(|r| r["cells"][s(c, "name")]["derived"] == true))
        .map(|c| s(c, "figure"))
        .collect();
    derived.dedup();
    if !derived.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"muted\" data-derived>*: derived, not measured ({}): the target's CPU over the best step \
             kept up, scaled to a whole core, where the search stopped before the target's limit.</p>",
            esc(&derived.join(", "))
        );
    }

    // Every check of the study's finding.
    out.push_str("<h3>Checks</h3>\n<ul class=\"checks\">\n");
    for v in doc["table"]["verdicts"].as_array().into_iter().flatten() {
        let (word, class) = match (v["measured"].as_bool(), v["holds"].as_bool()) {
            (Some(false), _) => ("n/a", "na"),
            (_, Some(true)) => ("holds", "holds"),
            _ => ("DIFFERS", "differs"),
        };
        let _ = writeln!(
            out,
            "<li data-check><b class=\"{class}\">{word}</b> {}: {}</li>",
            esc(s(v, "says")),
            esc(s(v, "detail"))
        );
    }
    out.push_str("</ul>\n");
    let warnings: Vec<String> = doc["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|st| {
            let row = s(st, "row").to_string();
            st["warnings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(move |w| format!("{row}: {w}"))
        })
        .collect();
    if !warnings.is_empty() {
        out.push_str("<h3>Warnings</h3>\n<ul class=\"warnings\">\n");
        for w in &warnings {
            let _ = writeln!(out, "<li>{}</li>", esc(w));
        }
        out.push_str("</ul>\n");
    }

    out.push_str("<h3>Charts</h3>\n");
    let id = s(spec, "name").to_string();
    for c in charts(&id, doc) {
        if !c.is_empty() {
            figure(out, &c)?;
        }
    }
    timelines(out, &id, doc, &rows);
    for c in &columns {
        bars(out, &id, c, &rows);
    }
    out.push_str("</section>\n");
    Ok(())
}

/// The charts drawn with the report's line charts: the first column's figure against the
/// number of connections, per transport, where rows vary it; each row's response-time CDF, or
/// its handshake-to-RTT CDF where a column shows handshakes.
pub fn charts(id: &str, doc: &Value) -> Vec<ChartData> {
    let spec = &doc["spec"];
    let steps: Vec<&Value> = doc["steps"].as_array().map(|s| s.iter().collect()).unwrap_or_default();
    let figures: Vec<&str> = spec["columns"].as_array().into_iter().flatten().map(|c| s(c, "figure")).collect();
    let mut out = Vec::new();

    // Against connections (seeds/000's figure 2): rows of one transport and lifetime whose
    // points have several connection counts; the median over repetitions.
    if let Some(fig) = figures.first().copied() {
        // Per block: another block's point at the same count ran under its own settings.
        let mut by: BTreeMap<(u64, String, String), BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
        for st in &steps {
            let p = &st["point"];
            let (Some(n), Some(v)) = (p["connections"].as_u64(), st["figures"][fig].as_f64()) else { continue };
            let block = st["block"].as_u64().unwrap_or(0);
            by.entry((block, s(p, "transport").to_string(), s(p, "lifetime").to_string()))
                .or_default()
                .entry(n)
                .or_default()
                .push(v);
        }
        by.retain(|_, pts| pts.len() > 1);
        if !by.is_empty() {
            let mut c = ChartData::new(
                &format!("{id}_{fig}_per_connections"),
                &format!("{fig} against open connections, per transport (median of the repetitions)"),
                Axis::new("open connections", Scale::Log, Unit::Number),
                Axis::new(fig, Scale::Linear, Unit::Number),
            );
            for (i, ((_, transport, lifetime), pts)) in by.into_iter().enumerate() {
                let points = pts
                    .into_iter()
                    .filter_map(|(n, mut v)| {
                        v.sort_by(f64::total_cmp);
                        v.get(v.len() / 2).map(|m| (n as f64, *m))
                    })
                    .collect();
                let name = if lifetime.is_empty() { transport } else { format!("{transport} ({lifetime})") };
                c.series.push(Series { name, run: i, shade: 0, style: Style::Line, points });
            }
            out.push(c);
        }
    }

    // Per row, its first repetition's distribution.
    let handshakes = figures.iter().any(|f| f.starts_with("handshake"));
    let latency = figures.iter().any(|f| ["p50_ms", "p99_ms", "max_ms", "held_up", "slow"].contains(f));
    let mut seen = std::collections::BTreeSet::new();
    let mut hs = ChartData::new(
        &format!("{id}_handshake_rtts"),
        "Handshake time in RTTs, CDF per row (first repetition)",
        Axis::new("handshake time / RTT", Scale::Linear, Unit::Number),
        Axis::new("connections [%]", Scale::Linear, Unit::Percent).with_range(0.0, 100.0),
    );
    let mut lat = ChartData::new(
        &format!("{id}_response_cdf"),
        "Response time, CDF per row (first repetition)",
        Axis::new("response time", Scale::Log, Unit::Nanos),
        Axis::new("answers [%]", Scale::Linear, Unit::Percent).with_range(0.0, 100.0),
    );
    for st in &steps {
        let row = s(st, "row");
        let Some(res) = st["results"].as_array().and_then(|r| r.first()) else { continue };
        if !seen.insert(row.to_string()) {
            continue;
        }
        let i = seen.len() - 1;
        let hist = |v: &Value| serde_json::from_value::<SparseHistogram>(v.clone()).ok();
        if handshakes {
            if let Some(h) = hist(&res["connections"]["handshake_rtt_ratio_milli"]["histogram"]) {
                let points: Vec<(f64, f64)> = cdf_points(&h).into_iter().map(|(x, y)| (x / 1000.0, y)).collect();
                if !points.is_empty() {
                    hs.series.push(Series { name: row.to_string(), run: i, shade: 0, style: Style::Step, points });
                }
            }
        } else if latency {
            if let Some(h) = hist(&res["latency"]["histogram"]) {
                let points = cdf_points(&h);
                if !points.is_empty() {
                    lat.series.push(Series { name: row.to_string(), run: i, shade: 0, style: Style::Step, points });
                }
            }
        }
    }
    out.push(hs);
    out.push(lat);
    out
}

/// A bar per row of a column's measured value (the median), the study's figure marked beside
/// it where it is a number: an inline SVG of its own (the report's charts are line charts).
fn bars(out: &mut String, id: &str, column: &Value, rows: &[&Value]) {
    let name = s(column, "name");
    let vals: Vec<(String, Option<f64>, Option<f64>)> = rows
        .iter()
        .map(|r| {
            let cell = &r["cells"][name];
            (s(r, "label").to_string(), cell["measured"].as_f64(), cell["study"].as_f64())
        })
        .collect();
    let max = vals.iter().flat_map(|(_, m, st)| [*m, *st]).flatten().filter(|v| v.is_finite()).fold(0.0, f64::max);
    if vals.iter().all(|(_, m, _)| m.is_none()) || max <= 0.0 {
        return;
    }
    let (label_w, bar_w, row_h) = (220.0, 600.0, 20.0);
    let height = row_h * vals.len() as f64 + 30.0;
    let width = label_w + bar_w + 90.0;
    let ratio = column["ratio_to"].is_string() || column["factor_of"].is_string();
    let x = if ratio { "x" } else { "" };
    let title = column["label"].as_str().unwrap_or(name);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {width} {height}\" role=\"img\" font-family=\"sans-serif\" font-size=\"12\">\
         <title>{}</title>",
        esc(title)
    );
    for (i, (label, m, st)) in vals.iter().enumerate() {
        let y = 10.0 + row_h * i as f64;
        let _ =
            write!(svg, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", label_w - 6.0, y + 14.0, esc(label));
        match m {
            Some(v) => {
                let w = (v.max(0.0) / max * bar_w).max(1.0);
                let _ = write!(
                    svg,
                    "<rect x=\"{label_w}\" y=\"{}\" width=\"{w:.1}\" height=\"14\" fill=\"#1f77b4\"/>\
                     <text x=\"{:.1}\" y=\"{}\">{}{x}</text>",
                    y + 3.0,
                    label_w + w + 4.0,
                    y + 14.0,
                    esc(&num(*v))
                );
            }
            None => {
                let _ =
                    write!(svg, "<text x=\"{}\" y=\"{}\" fill=\"#777\">not measured</text>", label_w + 4.0, y + 14.0);
            }
        }
        if let Some(st) = st {
            let sx = label_w + st.max(0.0) / max * bar_w;
            let _ = write!(
                svg,
                "<line x1=\"{sx:.1}\" x2=\"{sx:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#d62728\" stroke-width=\"3\"/>",
                y + 1.0,
                y + 19.0
            );
        }
    }
    let _ = write!(
        svg,
        "<text x=\"{label_w}\" y=\"{}\" fill=\"#555\">bars: measured; red marks: the study's figure</text></svg>",
        height - 6.0
    );
    let _ = writeln!(
        out,
        "<figure class=\"chart\" data-chart=\"{}\">{svg}<figcaption>{}: measured per row, the study's figure marked</figcaption></figure>",
        esc(&format!("{id}_{name}_bars")),
        esc(title)
    );
}

/// A duration as an experiment file writes it ("500ms", "1s", "250us", "2.5s"), in ns.
fn duration_ns(d: &str) -> Option<u64> {
    let d = d.trim();
    let split = d.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = d.split_at(split);
    let n: f64 = n.parse().ok()?;
    let mult = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        _ => return None,
    };
    Some((n * mult) as u64)
}

/// One traced query as the timeline draws it: its number, its latency (None: no answer) and
/// its fate.
struct Traced {
    index: u64,
    latency_ns: Option<u64>,
    fate: String,
}

/// The first repetition's query trace of a step (`results[0].query_trace`), if it has one.
fn trace_of(step: &Value) -> Option<Vec<Traced>> {
    let q = step["results"].as_array()?.first()?["query_trace"]["queries"].as_array()?;
    Some(
        q.iter()
            .filter_map(|t| {
                Some(Traced {
                    index: t["index"].as_u64()?,
                    latency_ns: t["latency_ns"].as_u64(),
                    fate: s(t, "fate").to_string(),
                })
            })
            .collect(),
    )
}

/// seeds/003's figure 1, drawn from the runs' query traces (`trace_queries`): for every block
/// of runs with traces a row of small charts, one per transport, each query's response time
/// (log scale) against its number (order of issue). The queries the server delayed are marked:
/// those slow (over the block's `slow_over`) in the block's UDP run, where nothing holds one
/// query up behind another, so that its slow queries are the server's delays (the experiment's
/// rows send the same queries in the same order); other slow queries were held up. Queries
/// without an answer sit on the top edge. Blocks in the file's order: the baseline first.
fn timelines(out: &mut String, id: &str, doc: &Value, rows: &[&Value]) {
    let spec = &doc["spec"];
    let label_of =
        |row: &str| rows.iter().find(|r| s(r, "name") == row).map_or(row.to_string(), |r| s(r, "label").to_string());
    // Per block: (row, transport, trace) of each step's first repetition, in order.
    let mut blocks: BTreeMap<u64, Vec<(String, String, Vec<Traced>)>> = BTreeMap::new();
    for st in doc["steps"].as_array().into_iter().flatten() {
        if st["repetition"].as_u64().unwrap_or(1) != 1 {
            continue;
        }
        let Some(trace) = trace_of(st) else { continue };
        if trace.is_empty() {
            continue;
        }
        let block = st["block"].as_u64().unwrap_or(0);
        blocks.entry(block).or_default().push((
            s(st, "row").to_string(),
            s(&st["point"], "transport").to_string(),
            trace,
        ));
    }
    if blocks.is_empty() {
        return;
    }
    // Every chart on one scale: the lowest and highest latency, in powers of ten.
    let lats = blocks.values().flatten().flat_map(|(_, _, t)| t.iter().filter_map(|q| q.latency_ns));
    let (lo, hi) = lats.fold((u64::MAX, 0u64), |(lo, hi), l| (lo.min(l.max(1)), hi.max(l)));
    if hi == 0 {
        return;
    }
    let lo_e = (lo as f64).log10().floor();
    let hi_e = (hi as f64).log10().ceil().max(lo_e + 1.0);
    let n_max = blocks.values().flatten().flat_map(|(_, _, t)| t.iter().map(|q| q.index + 1)).max().unwrap_or(1).max(2);
    let (w, h, left, top, bottom) = (260.0, 170.0, 46.0, 22.0, 28.0);
    let (pw, ph) = (w - left - 8.0, h - top - bottom);
    let x_of = |i: u64| left + i as f64 / (n_max - 1) as f64 * pw;
    let y_of = |ns: u64| top + ph - ((ns.max(1) as f64).log10() - lo_e) / (hi_e - lo_e) * ph;
    let tick = |e: f64| {
        let ns = 10f64.powf(e);
        if ns >= 1e9 {
            format!("{}s", num(ns / 1e9))
        } else if ns >= 1e6 {
            format!("{}ms", num(ns / 1e6))
        } else {
            format!("{}us", num(ns / 1e3))
        }
    };
    let _ = writeln!(out, "<figure class=\"chart timelines\" data-chart=\"{}\">", esc(&format!("{id}_timelines")));
    for (block, charts) in &blocks {
        let runs = &spec["runs"][*block as usize];
        let slow_over = |r: &Value| r["slow_over"].as_str().and_then(duration_ns);
        let quick = if doc["quick"] == true { slow_over(&runs["quick"]) } else { None };
        let over = quick.or_else(|| slow_over(runs)).unwrap_or(500_000_000);
        // The server's delays: the queries slow over UDP in this block (None: no UDP run, slow
        // queries are not told apart).
        let delayed: Option<std::collections::BTreeSet<u64>> = charts
            .iter()
            .find(|(_, t, _)| t == "udp")
            .map(|(_, _, tr)| tr.iter().filter(|q| q.latency_ns.is_some_and(|l| l >= over)).map(|q| q.index).collect());
        let server = &runs["server"];
        let mut says = match server["delay"].as_str() {
            Some(d) => format!("The server delays {d} (DURATION:N/M)"),
            None => "No delay (baseline)".to_string(),
        };
        if let Some(o) = server["in_order"].as_bool() {
            says.push_str(if o { ", TCP and DoT answered in order" } else { ", TCP and DoT answered out of order" });
        }
        if delayed.is_none() {
            says.push_str(
                ": no UDP run here to tell the server's delays from queries held up (slow queries in purple)",
            );
        }
        let _ = writeln!(out, "<div class=\"timeline-row\" data-block=\"{block}\"><p>{}</p>", esc(&says));
        for (row, transport, trace) in charts {
            let label = label_of(row);
            let mut svg = format!(
                "<svg class=\"timeline\" data-row=\"{}\" data-transport=\"{}\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" \
                 height=\"{h}\" role=\"img\" font-family=\"sans-serif\" font-size=\"10\"><title>{}: response time per query</title>\
                 <text x=\"{left}\" y=\"13\" font-size=\"12\" font-weight=\"bold\">{}</text>",
                esc(row),
                esc(transport),
                esc(&label),
                esc(&label)
            );
            let mut e = lo_e;
            while e <= hi_e + 1e-9 {
                let y = y_of(10f64.powf(e) as u64);
                let _ = write!(
                    svg,
                    "<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                     <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                    left + pw,
                    left - 3.0,
                    y + 3.0,
                    tick(e)
                );
                e += 1.0;
            }
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">query number (0 to {})</text>",
                left + pw / 2.0,
                h - 6.0,
                n_max - 1
            );
            // Layers: the fast answers, then the slow ones, the server's delays on top.
            let mut layers = [String::new(), String::new(), String::new()];
            for q in trace {
                let x = x_of(q.index);
                match q.latency_ns {
                    Some(l) => {
                        let (layer, class, colour, r) = match &delayed {
                            Some(d) if d.contains(&q.index) => (2, "delayed", "#d62728", 3.2),
                            Some(_) if l >= over => (1, "held-up", "#ff7f0e", 2.2),
                            None if l >= over => (1, "slow", "#9467bd", 2.2),
                            _ => (0, "answered", "#1f77b4", 2.2),
                        };
                        let _ = write!(
                            layers[layer],
                            "<circle class=\"{class}\" data-q=\"{}\" cx=\"{x:.1}\" cy=\"{:.1}\" r=\"{r}\" fill=\"{colour}\"/>",
                            q.index,
                            y_of(l)
                        );
                    }
                    None => {
                        let _ = write!(
                            layers[2],
                            "<text class=\"unanswered\" data-q=\"{}\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
                             fill=\"#000\">x<title>{}</title></text>",
                            q.index,
                            top + 3.0,
                            esc(&q.fate)
                        );
                    }
                }
            }
            layers.iter().for_each(|l| svg.push_str(l));
            svg.push_str("</svg>");
            out.push_str(&svg);
        }
        out.push_str("</div>\n");
    }
    let _ = writeln!(
        out,
        "<figcaption>Response time of each query in the order it was issued (seeds/003, figure 1), one chart per \
         transport; log scale. Red: delayed by the server (the queries slow over UDP in the same block); orange: \
         slower than the block's slow_over but not delayed: held up behind another; blue: the others; x on the \
         top edge: no answer.</figcaption></figure>"
    );
}
