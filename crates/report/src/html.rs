//! `volley report`: one self-contained HTML file of one or more runs. Nothing in it refers to
//! anything outside the file: the CSS is inline, the charts are inline SVG (drawn by
//! [`crate::render_svg`]), there is no script, and no attribute holds a URL other than a
//! `#fragment` of the page itself.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::Path;

use volley_metrics::{LatencySummary, Status};

use crate::chart::{all_charts, ChartData, LimitResult};
use crate::compare::{compare, Comparison};
use crate::input::NamedRun;
use crate::json::ReportError;
use crate::merge::write_atomic;
use crate::render::{render_svg, CHART_SIZE};
use crate::text::ordered_rcodes;
use crate::units::{fmt_bytes, fmt_ns, fmt_pct, fmt_rate, fmt_secs};

pub(crate) const CSS: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1040px;margin:0 auto;padding:16px 24px 48px}
header{border-bottom:1px solid #ddd;margin-bottom:8px}
h1{font-size:26px;margin:16px 0 4px}h2{font-size:21px;margin:32px 0 8px;border-bottom:2px solid #1f77b4;padding-bottom:4px}
h3{font-size:16px;margin:20px 0 6px;color:#333}
nav a{margin-right:14px;color:#1f77b4;text-decoration:none}
table{border-collapse:collapse;margin:4px 0 8px;font-size:14px;background:#fff}
th,td{border:1px solid #ddd;padding:3px 10px;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f0f3f7}
pre{background:#fff;border:1px solid #ddd;padding:8px 10px;overflow-x:auto;font-size:13px;white-space:pre-wrap;word-break:break-all}
.equation{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:14px;padding:6px 10px;display:inline-block;border-radius:4px}
.equation.ok{background:#e8f5e9;border:1px solid #a5d6a7}.equation.bad{background:#ffebee;border:1px solid #ef9a9a}
.status-interrupted{color:#b71c1c;font-weight:bold}
.warnings li{color:#8a4b00}
.beyond{font-weight:bold;color:#b71c1c}
figure.chart{margin:12px 0 20px;background:#fff;border:1px solid #ddd;padding:6px}
figure.chart svg{width:100%;height:auto;display:block}
figcaption{font-size:13px;color:#555;padding:4px 6px}
.muted{color:#777}
";

/// Escapes text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A command line as a POSIX shell would take it back: arguments with characters other than
/// letters, digits and `_@%+=:,./-` are single-quoted.
pub fn shell_quote(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An SVG chart made fit for inlining in HTML: the `xmlns` declaration (a URL, which an
/// inline SVG does not need) removed, the size left to CSS with the drawing's `viewBox`.
fn inline_svg(svg: &str) -> String {
    let mut s = svg.replace(" xmlns=\"http://www.w3.org/2000/svg\"", "");
    s = s.replace(" xmlns:xlink=\"http://www.w3.org/1999/xlink\"", "");
    if let Some(start) = s.find("<svg") {
        let end = s[start..].find('>').map(|e| start + e).unwrap_or(s.len());
        let tag = &s[start..end];
        if !tag.contains("viewBox") {
            let (w, h) = CHART_SIZE;
            let new_tag = format!("{tag} viewBox=\"0 0 {w} {h}\"");
            s.replace_range(start..end, &new_tag);
        }
    }
    s.replace("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", "")
}

pub(crate) fn figure(out: &mut String, c: &ChartData) -> io::Result<()> {
    let svg = render_svg(c, CHART_SIZE).map_err(io::Error::other)?;
    let _ = writeln!(
        out,
        "<figure class=\"chart\" data-chart=\"{}\">{}<figcaption>{}</figcaption></figure>",
        esc(&c.id),
        inline_svg(&svg),
        esc(&c.title)
    );
    Ok(())
}

fn table_open(out: &mut String, class: &str, header: &[&str]) {
    let _ = write!(out, "<table class=\"{class}\"><thead><tr>");
    for (i, h) in header.iter().enumerate() {
        let cls = if i > 0 { " class=\"n\"" } else { "" };
        let _ = write!(out, "<th{cls}>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>\n");
}

fn table_row(out: &mut String, cells: &[String]) {
    out.push_str("<tr>");
    for (i, c) in cells.iter().enumerate() {
        let cls = if i > 0 { " class=\"n\"" } else { "" };
        let _ = write!(out, "<td{cls}>{}</td>", esc(c));
    }
    out.push_str("</tr>\n");
}

fn table_close(out: &mut String) {
    out.push_str("</tbody></table>\n");
}

fn params(out: &mut String, run: &NamedRun) {
    let r = &run.result;
    let l = &r.load;
    let mut rows: Vec<(&str, String)> = vec![
        ("target", r.target.url.clone()),
        ("transport", r.target.transport.clone()),
        ("address", r.target.address.clone()),
        ("load model", l.model.clone()),
    ];
    if let Some(c) = l.concurrency {
        rows.push(("concurrency", c.to_string()));
        if let Some(p) = r.peak_on_wire.filter(|p| *p < c) {
            rows.push(("on the wire at most", format!("{p} (the server's limit)")));
        }
    }
    if let Some(q) = l.rate {
        rows.push(("rate", format!("{} qps", fmt_rate(q))));
    }
    if let Some(d) = l.duration_s {
        rows.push(("duration requested", fmt_secs(d)));
    }
    if let Some(n) = l.count {
        rows.push(("count requested", n.to_string()));
    }
    if let (Some(ms), Some(n)) = (l.udp_retry_ms, l.udp_tries) {
        rows.push(("UDP retry", format!("after {} without an answer, {n} sends at most", fmt_secs(ms / 1000.0))));
    }
    if l.tc_fallback {
        rows.push(("truncated answers", "asked again over TCP".into()));
    }
    rows.extend([
        ("timeout", fmt_secs(l.timeout_ms as f64 / 1000.0)),
        ("threads", l.threads.to_string()),
        ("connections", l.connections.to_string()),
        ("queries", l.queries.clone()),
        ("started", r.started_at.clone()),
        (
            "duration",
            format!(
                "{:.2}s sending, {:.2}s with the wait for the last answers{}",
                r.duration_s,
                r.elapsed_s,
                r.setup_s.map_or(String::new(), |s| format!(" (set-up before: {s:.2}s)"))
            ),
        ),
        (
            "status",
            match r.status {
                Status::Complete => "complete".into(),
                Status::Interrupted => "INTERRUPTED (stopped early; figures are partial)".into(),
            },
        ),
        ("volley version", r.volley_version.clone()),
    ]);
    if let Some(p) = &run.path {
        rows.push(("results file", p.display().to_string()));
    }
    out.push_str("<table class=\"params\"><tbody>\n");
    for (k, v) in rows {
        let cls = if k == "status" && r.status == Status::Interrupted { " class=\"status-interrupted\"" } else { "" };
        let _ = writeln!(out, "<tr><th>{}</th><td{cls}>{}</td></tr>", esc(k), esc(&v));
    }
    out.push_str("</tbody></table>\n");
}

fn latency_rows(out: &mut String, label: &str, s: &LatencySummary, what: &str) {
    let mut cells = vec![label.to_string()];
    cells.extend([s.min_ns, s.mean_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.p999_ns, s.max_ns].into_iter().map(fmt_ns));
    cells.push(format!("{} {what}", s.count));
    table_row(out, &cells);
}

fn counts_table(out: &mut String, class: &str, title: &str, items: &[(String, u64)], of: u64, basis: &str) {
    let _ = writeln!(out, "<h3>{}</h3>", esc(title));
    if items.is_empty() {
        let _ = writeln!(out, "<p class=\"{class} muted\">none</p>");
        return;
    }
    table_open(out, class, &["", "count", basis]);
    for (k, v) in items {
        table_row(out, &[k.clone(), v.to_string(), fmt_pct(*v, of)]);
    }
    table_close(out);
}

/// A signed span, e.g. `+125µs`, `-2.00µs`.
fn fmt_signed_ns(ns: i64) -> String {
    format!("{}{}", if ns < 0 { "-" } else { "+" }, fmt_ns(ns.unsigned_abs()))
}

/// The coordination of a merged split run (docs/scale-out.md): its parts, each one's share,
/// where it ran from, its clock and its start against the one given, the start skew, and the
/// parts lost with their share of the load.
fn scale_section(out: &mut String, s: &volley_metrics::ScaleInfo) {
    out.push_str("<h3>Scale out</h3>\n");
    let merged = s.part_list.iter().filter(|p| p.status == "merged").count();
    let mut line = format!(
        "{merged} of {} parts merged, started at {} (the coordinator's clock)",
        s.parts,
        volley_wire::rfc3339(s.start_unix_ns, 6)
    );
    match s.start_skew_ns {
        Some(k) => {
            line.push_str(&format!("; start skew {} (the latest part's actual start minus the earliest's)", fmt_ns(k)))
        }
        None => line.push_str("; start skew unknown"),
    }
    let _ = writeln!(out, "<p class=\"scale\">{}</p>", esc(&line));
    if !s.complete {
        let lost: Vec<String> = s
            .part_list
            .iter()
            .filter(|p| p.status != "merged")
            .map(|p| format!("part {} ({}, {:.1}% of the load)", p.index, p.status, p.share * 100.0))
            .collect();
        let _ = writeln!(
            out,
            "<p class=\"status-interrupted\">INCOMPLETE: {:.1}% of the load is missing: {}. The figures are those of the other parts.</p>",
            s.missing_share * 100.0,
            esc(&lost.join(", "))
        );
    }
    table_open(
        out,
        "scale-parts",
        &["part", "status", "share", "from", "clock offset", "round trip", "start offset", "why"],
    );
    for p in &s.part_list {
        table_row(
            out,
            &[
                p.index.to_string(),
                p.status.clone(),
                format!("{:.1}%", p.share * 100.0),
                p.peer.clone().unwrap_or_else(|| "-".into()),
                p.clock_offset_ns.map_or("-".into(), fmt_signed_ns),
                p.rtt_ns.map_or("-".into(), fmt_ns),
                p.start_offset_ns.map_or("-".into(), fmt_signed_ns),
                p.reason.clone().unwrap_or_default(),
            ],
        );
    }
    table_close(out);
}

fn run_section(out: &mut String, k: usize, run: &NamedRun) -> io::Result<()> {
    let r = &run.result;
    let t = &r.totals;
    let _ = writeln!(out, "<section class=\"run\" id=\"run-{k}\"><h2>{}</h2>", esc(&run.name));
    if r.status == Status::Interrupted {
        out.push_str("<p class=\"status-interrupted\">INTERRUPTED: the run was stopped before its end; the figures are partial.</p>\n");
    }
    out.push_str("<h3>Parameters</h3>\n");
    params(out, run);

    out.push_str("<h3>Command</h3>\n");
    let _ = writeln!(out, "<pre class=\"command\">{}</pre>", esc(&shell_quote(&r.command)));
    if !run.merged_from.is_empty() {
        out.push_str("<p>Merged from these runs, made at the same time:</p>\n");
        table_open(out, "merged-from", &["file", "started (Unix ms)", "shift", "status", "command"]);
        for p in &run.merged_from {
            table_row(
                out,
                &[
                    p.file.clone(),
                    p.started_unix_ms.to_string(),
                    format!("{} s", p.offset_s),
                    p.status.clone(),
                    shell_quote(&p.command),
                ],
            );
        }
        table_close(out);
    }

    if let Some(sc) = &r.scale {
        scale_section(out, sc);
    }

    out.push_str("<h3>Summary</h3>\n");
    table_open(out, "summary", &["", "queries", "of issued"]);
    for (label, n) in [
        ("issued", t.issued),
        ("sent (left the generator)", t.sent),
        ("answered", t.answered),
        ("timed out", t.timed_out),
        ("failed", t.failed),
        ("unsent (never left)", t.unsent),
        ("in flight", t.in_flight),
    ] {
        table_row(out, &[label.to_string(), n.to_string(), fmt_pct(n, t.issued)]);
    }
    table_row(out, &["truncated (TC=1)".into(), t.truncated.to_string(), fmt_pct(t.truncated, t.issued)]);
    table_row(out, &["answers/s".into(), fmt_rate(r.qps.answered), String::new()]);
    table_row(out, &["queries/s".into(), fmt_rate(r.qps.sent), String::new()]);
    if t.issued != t.sent {
        table_row(out, &["queries issued/s".into(), fmt_rate(r.qps.issued), String::new()]);
    }
    if t.bytes_out > 0 || t.bytes_in > 0 {
        let per = |b: u64, n: u64| if n == 0 { "-".to_string() } else { fmt_bytes(b as f64 / n as f64) };
        table_row(
            out,
            &["bytes out".into(), fmt_bytes(t.bytes_out as f64), format!("{}/query", per(t.bytes_out, t.sent))],
        );
        table_row(
            out,
            &["bytes in".into(), fmt_bytes(t.bytes_in as f64), format!("{}/answer", per(t.bytes_in, t.answered))],
        );
    }
    if !t.wire.is_empty() {
        // What crossed the wire, IP and UDP/TCP headers included.
        let w = &t.wire;
        let per = |n: u64, of: u64| if of == 0 { "-".to_string() } else { format!("{:.2}", n as f64 / of as f64) };
        let per_b = |b: u64, of: u64| if of == 0 { "-".to_string() } else { fmt_bytes(b as f64 / of as f64) };
        table_row(
            out,
            &[
                "wire out (headers included)".into(),
                format!("{}, {} packets", fmt_bytes(w.bytes_out as f64), w.packets_out),
                format!("{}, {} packets/query", per_b(w.bytes_out, t.sent), per(w.packets_out, t.sent)),
            ],
        );
        table_row(
            out,
            &[
                "wire in (headers included)".into(),
                format!("{}, {} packets", fmt_bytes(w.bytes_in as f64), w.packets_in),
                format!("{}, {} packets/answer", per_b(w.bytes_in, t.answered), per(w.packets_in, t.answered)),
            ],
        );
    }
    let cpu = if t.answered > 0 {
        format!("{}/answer", fmt_ns((r.generator.cpu_us_per_answer * 1000.0).round() as u64))
    } else {
        String::new()
    };
    table_row(out, &["generator CPU".into(), format!("{:.3}s", r.generator.cpu_s), cpu]);
    if let Some(c) = &r.target_cpu {
        let per = if t.answered > 0 {
            format!("{}/answer", fmt_ns((c.cpu_us_per_answer * 1000.0).round() as u64))
        } else {
            String::new()
        };
        let pids: Vec<String> = c.pids.iter().map(u32::to_string).collect();
        table_row(out, &[format!("target CPU (pid {})", pids.join(", ")), format!("{:.3}s", c.cpu_s), per]);
    }
    table_close(out);

    let ok = t.balanced();
    let _ = writeln!(
        out,
        "<p class=\"equation {}\">issued = answered + timed out + failed + unsent + in flight: {} = {} + {} + {} + {} + \
         {} {}</p>",
        if ok { "ok" } else { "bad" },
        t.issued,
        t.answered,
        t.timed_out,
        t.failed,
        t.unsent,
        t.in_flight,
        if ok { "✓" } else { "✗ the fates do not add up: do not trust these figures" }
    );

    if !r.groups.is_empty() {
        out.push_str("<h3>Groups of clients</h3>\n");
        table_open(out, "groups", &crate::text::GROUP_COLUMNS);
        for g in &r.groups {
            table_row(out, &crate::text::group_cells(g));
        }
        table_close(out);
    }

    out.push_str("<h3>Latency</h3>\n");
    table_open(out, "latency", &["", "min", "mean", "p50", "p90", "p99", "p99.9", "max", "values"]);
    let first = if r.load.model == "closed" { "latency (service time)" } else { "response time" };
    latency_rows(out, first, &r.latency, "answers");
    if let Some(st) = r.service_time.as_ref().filter(|s| s.count > 0 && r.load.model != "closed") {
        latency_rows(out, "service time", st, "answers");
    }
    if let Some(d) = r.generator_delay.as_ref().filter(|d| d.count > 0) {
        latency_rows(out, "generator delay", d, "sends");
    }
    if let Some(l) = r.send_lateness.as_ref().filter(|l| l.count > 0) {
        latency_rows(out, "send lateness", l, "sends");
    }
    if let Some(w) = &r.transport_wait {
        if let Some(l) = r.schedule_lateness.as_ref().filter(|l| l.count > 0) {
            latency_rows(out, "scheduler lateness", l, "sends");
        }
        latency_rows(out, "transport wait", &w.wait, "waited");
    }
    if let Some(c) = &r.connections {
        for (label, h) in [
            ("handshake TCP", &c.handshake_tcp),
            ("handshake TLS", &c.handshake_tls),
            ("handshake QUIC", &c.handshake_quic),
            ("handshake total", &c.handshake_total),
            ("RTT", &c.rtt),
        ] {
            if let Some(h) = h.as_ref().filter(|h| h.count > 0) {
                latency_rows(out, label, h, "connections");
            }
        }
    }
    table_close(out);

    if let Some(w) = &r.transport_wait {
        let _ = writeln!(out, "<p class=\"waits\">Waited for the transport: {}</p>", esc(&crate::text::wait_causes(w)));
    }

    counts_table(out, "rcodes", "Answers by RCODE", &ordered_rcodes(&t.rcodes), t.answered, "of answers");
    let errors: Vec<(String, u64)> = t.errors.iter().map(|(k, v)| (k.clone(), *v)).collect();
    counts_table(out, "errors", "Errors by kind", &errors, t.issued, "of issued");
    if t.unsent > 0 {
        let why: Vec<(String, u64)> = t.unsent_reasons.iter().map(|(k, v)| (k.clone(), *v)).collect();
        counts_table(out, "unsent", "Unsent queries by why (they never left)", &why, t.issued, "of issued");
    }
    let unexpected: Vec<(String, u64)> = t.unexpected.iter().map(|(k, v)| (k.clone(), *v)).collect();
    counts_table(out, "unexpected", "Unexpected responses (not fates)", &unexpected, t.issued, "of issued");
    if !r.events.is_empty() {
        let events: Vec<(String, u64)> = r.events.iter().map(|(k, v)| (k.clone(), *v)).collect();
        counts_table(out, "events", "Transport events", &events, t.issued, "of issued");
    }
    if let Some(c) = &r.connections {
        out.push_str("<h3>Connections</h3>\n");
        table_open(out, "connections", &["", "count"]);
        let closed: u64 = c.closed.values().sum();
        for (k, v) in [
            ("opened".to_string(), c.opened),
            ("failed".to_string(), c.failed),
            ("in progress at the end".to_string(), c.in_progress),
            ("closed".to_string(), closed),
            ("resumed".to_string(), c.resumed),
            ("QUIC token presented".to_string(), c.quic_tokens),
            ("0-RTT offered".to_string(), c.early_data_offered),
            ("0-RTT accepted".to_string(), c.early_data_accepted),
        ]
        .into_iter()
        .chain(c.closed.iter().map(|(k, v)| (format!("closed: {k}"), *v)))
        .chain(c.errors.iter().map(|(k, v)| (format!("failed: {k}"), *v)))
        .chain(c.draining.iter().flat_map(|d| {
            let peak = d.peak.map(|p| ("draining at most, at a second's end".to_string(), p));
            std::iter::once(("drained (took no more queries, ended outstanding ones)".to_string(), d.started))
                .chain(peak)
                .chain(d.ended.iter().map(|(k, v)| (format!("drain ended: {k}"), *v)))
        })) {
            table_row(out, &[k, v.to_string()]);
        }
        for (what, values) in &c.negotiated {
            for (v, n) in values {
                table_row(out, &[format!("{what}: {v}"), n.to_string()]);
            }
        }
        if let Some(x) = c.handshake_rtt_ratio_milli.as_ref().filter(|x| x.count > 0) {
            let f = |milli: u64| format!("{:.1}", milli as f64 / 1000.0);
            table_row(out, &["handshake over RTT (p50, p99)".into(), format!("{} / {}", f(x.p50_ns), f(x.p99_ns))]);
        }
        table_close(out);
    }
    if let Some(l) = &r.link {
        let spec = if l.spec.is_empty() { "none" } else { &l.spec };
        let _ = writeln!(out, "<h3>Emulated link: {} (seed {})</h3>", esc(spec), l.seed);
        table_open(
            out,
            "link",
            &[
                "",
                "settings",
                "in",
                "out",
                "dropped: loss",
                "queue",
                "outage",
                "reordered",
                "duplicated",
                "queueing p99",
            ],
        );
        for (name, d) in [("up", &l.up), ("down", &l.down)] {
            let c = &d.counts;
            let q = d.queue_delay.as_ref().map_or("-".to_string(), |q| fmt_ns(q.p99_ns));
            let cells = [
                c.packets_in,
                c.packets_out,
                c.dropped_loss,
                c.dropped_queue,
                c.dropped_outage,
                c.reordered,
                c.duplicated,
            ];
            let mut row = vec![name.to_string(), d.settings.clone()];
            row.extend(cells.iter().map(u64::to_string));
            row.push(q);
            table_row(out, &row);
        }
        table_close(out);
        let prio = if l.realtime { "real-time priority" } else { "ordinary priority" };
        let _ = writeln!(
            out,
            "<p>The emulator's lateness: p50 {}, p99 {}, max {} ({prio}); forwarder CPU {:.3} s.</p>",
            fmt_ns(l.lateness.p50_ns),
            fmt_ns(l.lateness.p99_ns),
            fmt_ns(l.lateness.max_ns),
            l.forwarder_cpu_s
        );
    }
    if !r.warnings.is_empty() {
        out.push_str("<h3>Warnings</h3>\n<ul class=\"warnings\">\n");
        for w in &r.warnings {
            let _ = writeln!(out, "<li>{}</li>", esc(w));
        }
        out.push_str("</ul>\n");
    }

    out.push_str("<h3>Charts</h3>\n");
    for c in all_charts(std::slice::from_ref(run)) {
        figure(out, &c)?;
    }
    let mut text = Vec::new();
    crate::text::write_text(r, &mut text)?;
    let _ = writeln!(
        out,
        "<details><summary>Text summary</summary><pre class=\"text-summary\">{}</pre></details>\n</section>",
        esc(&String::from_utf8_lossy(&text))
    );
    Ok(())
}

/// The comparison as an HTML table (class `compare`), verdicts beyond noise in bold.
fn comparison_table(out: &mut String, c: &Comparison) {
    let cells = c.cells();
    let header: Vec<&str> = cells[0].iter().map(String::as_str).collect();
    table_open(out, "compare", &header);
    for (row, f) in cells[1..].iter().zip(&c.figures) {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            // Cells: figure, first side, then (value, ratio, verdict) per other side.
            let beyond = i >= 4
                && (i - 4) % 3 == 0
                && f.verdicts.get((i - 1) / 3) == Some(&crate::compare::Verdict::BeyondNoise);
            let cls = match (i, beyond) {
                (0, _) => "",
                (_, true) => " class=\"n beyond\"",
                _ => " class=\"n\"",
            };
            let _ = write!(out, "<td{cls}>{}</td>", esc(cell));
        }
        out.push_str("</tr>\n");
    }
    table_close(out);
}

/// Writes the HTML report of `runs`: for several runs, a comparison section first (key figures
/// side by side with ratios against the first run, and every chart with all runs on it); then
/// one section per run with its parameters, the command that produced it, the summary table,
/// the accounting equation, latency, answers by RCODE, errors by kind, unexpected responses,
/// events, connections, warnings and its charts.
pub fn write_html_report(runs: &[NamedRun], w: &mut impl Write) -> io::Result<()> {
    write_html_report_with_limits(runs, &[], w)
}

/// [`write_html_report`] with limit searches (`volley limit` results): their step curves
/// and limits in a section of their own.
pub fn write_html_report_with_limits(runs: &[NamedRun], limits: &[LimitResult], w: &mut impl Write) -> io::Result<()> {
    write_html(runs, None, limits, w)
}

/// The HTML report of repeated runs compared side by side (`volley compare --a ... --b ...
/// --html`): the comparison section holds the table of [`compare`] over `sides` (each side's
/// median and min–max, ratios against the first side, the noise verdicts), then every chart
/// with all runs on it; then one section per run, as [`write_html_report`]. Run names should
/// be unique across sides ([`crate::unique_names`]).
pub fn write_html_comparison(sides: &[(String, Vec<NamedRun>)], w: &mut impl Write) -> io::Result<()> {
    let runs: Vec<NamedRun> = sides.iter().flat_map(|(_, runs)| runs.iter().cloned()).collect();
    write_html(&runs, Some(sides), &[], w)
}

/// [`write_html_comparison`] to `path`, atomically.
pub fn write_html_comparison_file(sides: &[(String, Vec<NamedRun>)], path: &Path) -> Result<(), ReportError> {
    let mut bytes = Vec::new();
    write_html_comparison(sides, &mut bytes).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        op: "write the report",
        source,
    })?;
    write_atomic(path, &bytes)
}

fn write_html(
    runs: &[NamedRun],
    sides: Option<&[(String, Vec<NamedRun>)]>,
    limits: &[LimitResult],
    w: &mut impl Write,
) -> io::Result<()> {
    let mut out = String::new();
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>volley report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>",
        esc(&names.join(", "))
    );
    let _ = write!(
        out,
        "<header><h1>volley report</h1><p>{} run{}: {}. Written by volley {}.</p>\n<nav>",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        esc(&names.join(", ")),
        esc(env!("CARGO_PKG_VERSION"))
    );
    if runs.len() > 1 || sides.is_some() {
        out.push_str("<a href=\"#comparison\">comparison</a>");
    }
    for (k, r) in runs.iter().enumerate() {
        let _ = write!(out, "<a href=\"#run-{}\">{}</a>", k + 1, esc(&r.name));
    }
    out.push_str("</nav></header>\n");

    let compared = runs.len() > 1 || sides.is_some();
    if compared {
        out.push_str("<section class=\"comparison\" id=\"comparison\"><h2>Comparison</h2>\n");
        let c = match sides {
            Some(sides) => {
                let c = compare(sides);
                out.push_str("<p>Each side is summarised by the median of its runs and their range (min–max).</p>\n<ul class=\"sides\">\n");
                for s in &c.sides {
                    let _ = writeln!(out, "<li><b>{}</b>: {}</li>", esc(&s.name), esc(&s.runs.join(", ")));
                }
                out.push_str("</ul>\n");
                let _ = writeln!(out, "<p>Ratios are against the first side, <b>{}</b>.</p>", esc(&c.sides[0].name));
                c
            }
            None => {
                let sides: Vec<(String, Vec<NamedRun>)> =
                    runs.iter().map(|r| (r.name.clone(), vec![r.clone()])).collect();
                let _ = writeln!(out, "<p>Ratios are against the first run, <b>{}</b>.</p>", esc(&runs[0].name));
                compare(&sides)
            }
        };
        comparison_table(&mut out, &c);
        let _ = writeln!(out, "<p class=\"muted\">Noise rule: {}.</p>", esc(c.noise_rule));
        for c in all_charts(runs) {
            figure(&mut out, &c)?;
        }
        out.push_str("</section>\n");
    }
    if !limits.is_empty() {
        out.push_str("<section class=\"limits\" id=\"limits\"><h2>Limit searches</h2>\n<table><tr><th>search</th><th>limit</th><th>unit</th><th>steps</th></tr>\n");
        for l in limits {
            let limit = l.limit.map_or("-".to_string(), |v| format!("{v:.0}"));
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&l.name),
                esc(&limit),
                esc(&l.unit),
                l.steps.len()
            );
        }
        out.push_str("</table>\n");
        for c in [crate::chart::limit_series(limits), crate::chart::limit_latency_series(limits)] {
            if !c.is_empty() {
                figure(&mut out, &c)?;
            }
        }
        out.push_str("</section>\n");
    }
    for (k, run) in runs.iter().enumerate() {
        run_section(&mut out, k + 1, run)?;
    }
    out.push_str("</main>\n</body>\n</html>\n");
    w.write_all(out.as_bytes())
}

/// Writes the HTML report to `path` atomically (temporary file, fsync, rename).
pub fn write_html_report_file(runs: &[NamedRun], path: &Path) -> Result<(), ReportError> {
    write_html_report_file_with_limits(runs, &[], path)
}

/// [`write_html_report_file`] with limit searches.
pub fn write_html_report_file_with_limits(
    runs: &[NamedRun],
    limits: &[LimitResult],
    path: &Path,
) -> Result<(), ReportError> {
    let mut bytes = Vec::new();
    write_html_report_with_limits(runs, limits, &mut bytes).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        op: "write the report",
        source,
    })?;
    write_atomic(path, &bytes)
}
