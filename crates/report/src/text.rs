//! The human summary of a run (`volley run` without `--format json`).

use std::collections::BTreeMap;
use std::io::{self, Write};

use volley_metrics::{LatencySummary, RunResult, Status, Totals};

use crate::table::{Align, Table};
use crate::units::{fmt_bytes, fmt_ns, fmt_pct, fmt_rate, fmt_secs};

/// Width of the label column ("unexpected" and one space).
const LABEL: usize = 11;
/// No line of the summary is wider than this, except for values that cannot be split (a URL).
pub const MAX_COLUMNS: usize = 100;

/// Writes the human summary: target, load, status, the fate of every query with the
/// accounting equation checked (`✓`/`✗`), rates, RCODEs, errors, unexpected responses,
/// transport events, latency percentiles, send lateness (open loop), generator CPU and warnings.
pub fn write_text(r: &RunResult, w: &mut impl Write) -> io::Result<()> {
    for line in text_lines(r) {
        writeln!(w, "{line}")?;
    }
    Ok(())
}

/// The summary as lines without newlines (what [`write_text`] prints).
fn text_lines(r: &RunResult) -> Vec<String> {
    let mut out = Vec::new();
    let t = &r.totals;
    let interrupted = r.status == Status::Interrupted;

    if interrupted {
        out.push("*** INTERRUPTED: the run was stopped before its end; the figures below are partial ***".into());
    }
    // The address only when the URL does not already show it (a name resolved to an address).
    let target = if r.target.address.is_empty() || r.target.url.contains(&r.target.address) {
        r.target.url.clone()
    } else {
        format!("{} (address {})", r.target.url, r.target.address)
    };
    push_labeled(&mut out, "target", &target);
    push_labeled(&mut out, "load", &describe_load(r));
    push_labeled(&mut out, "queries", &r.load.queries);
    let status = match r.status {
        Status::Complete => "complete".to_string(),
        Status::Interrupted => "INTERRUPTED (stopped early; queries without a fate count as in flight)".to_string(),
    };
    push_labeled(&mut out, "status", &status);
    if !r.started_at.is_empty() {
        push_labeled(&mut out, "started", &r.started_at);
    }
    let wait = (r.elapsed_s - r.duration_s).max(0.0);
    let mut duration = format!("{:.2}s sending + {:.2}s waiting for answers = {:.2}s", r.duration_s, wait, r.elapsed_s);
    if let Some(setup) = r.setup_s {
        duration.push_str(&format!(" (set-up before: {setup:.2}s)"));
    }
    push_labeled(&mut out, "duration", &duration);
    if let Some(p) = &r.part {
        let mut line = format!("{} of {} (this part's share of the run; docs/scale-out.md)", p.index, p.count);
        if let Some(s) = &p.start {
            line.push_str(&format!(", began {} after its start", crate::fmt_ns(s.late_ns)));
            if let Some(o) = s.clock_offset_ns {
                line.push_str(&format!(", clock {:+.3} ms from the coordinator's", o as f64 / 1e6));
            }
        }
        push_labeled(&mut out, "part", &line);
    }
    if let Some(s) = &r.scale {
        let mut line = format!("{} parts merged", s.part_list.iter().filter(|p| p.status == "merged").count());
        line.push_str(&format!(" of {}", s.parts));
        if let Some(k) = s.start_skew_ns {
            line.push_str(&format!(", start skew {}", crate::fmt_ns(k)));
        }
        if !s.complete {
            line.push_str(&format!(": INCOMPLETE, {:.1}% of the load missing", s.missing_share * 100.0));
        }
        push_labeled(&mut out, "parts", &line);
        // One line a part: its share, where it ran, its start against the one given.
        for p in &s.part_list {
            let mut l = format!("part {}: {}, {:.1}% of the load", p.index, p.status, p.share * 100.0);
            if let Some(peer) = &p.peer {
                l.push_str(&format!(", from {peer}"));
            }
            if let Some(o) = p.start_offset_ns {
                l.push_str(&format!(", started {:+.3} ms from the start given", o as f64 / 1e6));
            }
            if let Some(why) = &p.reason {
                l.push_str(&format!(" ({why})"));
            }
            push_labeled(&mut out, "", &l);
        }
    }
    out.push(String::new());

    // Fates, one aligned block, then the equation that must hold.
    // `sent` (the queries that left) is not a fate: it sits under `issued`, as a share of it.
    let mut fates = Table::new().column("", Align::Right).column("", Align::Right).without_header();
    fates.row([t.issued.to_string(), String::new()]);
    for n in [t.sent, t.answered, t.timed_out, t.failed, t.unsent, t.in_flight] {
        fates.row([n.to_string(), fmt_pct(n, t.issued)]);
    }
    let labels = ["issued", "sent", "answered", "timed out", "failed", "unsent", "in flight"];
    for (label, line) in labels.iter().zip(fates.lines()) {
        out.push(format!("{label:<LABEL$}{line}"));
    }
    push_equation(&mut out, t);
    let mut qps = format!("{} sent/s, {} answered/s", fmt_rate(r.qps.sent), fmt_rate(r.qps.answered));
    if t.issued != t.sent {
        qps.push_str(&format!(" ({} issued/s)", fmt_rate(r.qps.issued)));
    }
    push_labeled(&mut out, "qps", &qps);
    out.push(String::new());

    // Simulated clients in a mixture: one line per group.
    if !r.groups.is_empty() {
        let mut g = GROUP_COLUMNS
            .iter()
            .enumerate()
            .fold(Table::new(), |t, (i, h)| t.column(*h, if i == 0 { Align::Left } else { Align::Right }));
        for grp in &r.groups {
            g.row(group_cells(grp));
        }
        for (i, line) in g.lines().into_iter().enumerate() {
            let label = if i == 0 { "groups" } else { "" };
            out.push(format!("{label:<LABEL$}{line}").trim_end().to_string());
        }
        out.push(String::new());
    }

    // Answers and the events around them: name, count, share, basis.
    let mut tbl = Table::new()
        .column("", Align::Left)
        .column("", Align::Right)
        .column("", Align::Right)
        .column("", Align::Left)
        .without_header();
    let mut labels: Vec<&str> = Vec::new();
    let group = |tbl: &mut Table, labels: &mut Vec<&'static str>, label: &'static str, rows: Vec<[String; 4]>| {
        for (i, row) in rows.into_iter().enumerate() {
            labels.push(if i == 0 { label } else { "" });
            tbl.row(row);
        }
    };
    let none = |why: &str| vec![[format!("none{why}"), String::new(), String::new(), String::new()]];
    let rcodes = share_rows(&ordered_rcodes(&t.rcodes), t.answered, "of answers");
    group(&mut tbl, &mut labels, "rcodes", if rcodes.is_empty() { none(" (no answers)") } else { rcodes });
    group(
        &mut tbl,
        &mut labels,
        "truncated",
        match r.events.get("tcp_retries_after_truncation").copied().unwrap_or(0) {
            // Asked again over TCP: the TCP answer is the fate, the truncated one is not.
            0 => vec![["TC=1".into(), t.truncated.to_string(), fmt_pct(t.truncated, t.answered), "of answers".into()]],
            n => vec![[
                "TC=1".into(),
                t.truncated.to_string(),
                fmt_pct(t.truncated, t.sent),
                format!("of queries sent; {n} asked again over TCP"),
            ]],
        },
    );
    let errors = share_rows(&t.errors.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>(), t.issued, "of issued");
    group(&mut tbl, &mut labels, "errors", if errors.is_empty() { none("") } else { errors });
    if t.unsent > 0 {
        let why = t.unsent_reasons.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>();
        group(&mut tbl, &mut labels, "unsent", share_rows(&why, t.issued, "of issued"));
    }
    let unexpected: Vec<[String; 4]> =
        t.unexpected.iter().map(|(k, v)| [k.clone(), v.to_string(), String::new(), String::new()]).collect();
    group(&mut tbl, &mut labels, "unexpected", if unexpected.is_empty() { none("") } else { unexpected });
    if !r.events.is_empty() {
        let events: Vec<[String; 4]> =
            r.events.iter().map(|(k, v)| [k.clone(), v.to_string(), String::new(), String::new()]).collect();
        group(&mut tbl, &mut labels, "events", events);
    }
    for (label, line) in labels.iter().zip(tbl.lines()) {
        out.push(format!("{label:<LABEL$}{line}").trim_end().to_string());
    }
    if let Some(c) = &r.connections {
        let mut parts = vec![format!("{} opened", c.opened)];
        if c.failed > 0 {
            let kinds: Vec<String> = c.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
            parts.push(format!("{} failed ({})", c.failed, kinds.join(", ")));
        }
        if c.in_progress > 0 {
            parts.push(format!("{} in progress at the end", c.in_progress));
        }
        let closed: u64 = c.closed.values().sum();
        if closed > 0 {
            let how: Vec<String> = c.closed.iter().map(|(k, v)| format!("{k} {v}")).collect();
            parts.push(format!("{closed} closed ({})", how.join(", ")));
        }
        if let Some(d) = &c.draining {
            let how: Vec<String> = d.ended.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let peak = d.peak.map_or(String::new(), |p| format!("; at most {p} at a second's end"));
            parts.push(format!("{} drained ({}{peak})", d.started, how.join(", ")));
        }
        if c.resumed > 0 || c.early_data_offered > 0 {
            parts.push(format!(
                "{} resumed, 0-RTT {} offered / {} accepted",
                c.resumed, c.early_data_offered, c.early_data_accepted
            ));
        }
        if c.quic_tokens > 0 {
            parts.push(format!("{} presented a QUIC address validation token", c.quic_tokens));
        }
        push_labeled(&mut out, "conns", &parts.join(", "));
        for (what, values) in &c.negotiated {
            let v: Vec<String> = values.iter().map(|(k, n)| format!("{k} {n}")).collect();
            push_labeled(&mut out, "", &format!("{what}: {}", v.join(", ")));
        }
    }
    if !t.tries.is_empty() {
        let n: u64 = t.tries.values().sum();
        let by: Vec<String> = t.tries.iter().map(|(k, v)| format!("{k} sends {v}")).collect();
        push_labeled(
            &mut out,
            "resent",
            &format!("{n} queries sent more than once ({}; why: the events)", by.join(", ")),
        );
    }
    if t.bytes_out > 0 || t.bytes_in > 0 {
        let per = |b: u64, n: u64| if n == 0 { "-".to_string() } else { fmt_bytes(b as f64 / n as f64) };
        push_labeled(
            &mut out,
            "bytes",
            &format!(
                "{} out ({}/query), {} in ({}/answer)",
                fmt_bytes(t.bytes_out as f64),
                per(t.bytes_out, t.sent),
                fmt_bytes(t.bytes_in as f64),
                per(t.bytes_in, t.answered)
            ),
        );
    }
    if !t.wire.is_empty() {
        push_labeled(&mut out, "wire", &wire_line(t));
    }
    out.push(String::new());

    // Latency percentiles, and send lateness for the open loop, in one table.
    let mut lat = Table::new().column("", Align::Left);
    for h in ["min", "mean", "p50", "p90", "p99", "p99.9", "max", ""] {
        lat = lat.column(h, if h.is_empty() { Align::Left } else { Align::Right });
    }
    let pad = LABEL - 2;
    let lat_row = |lat: &mut Table, label: &str, s: &LatencySummary, what: &str| {
        let mut cells = vec![format!("{label:<pad$}")];
        cells.extend([s.min_ns, s.mean_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.p999_ns, s.max_ns].into_iter().map(fmt_ns));
        cells.push(format!("({} {what})", s.count));
        lat.row(cells);
    };
    if r.latency.count == 0 {
        push_labeled(&mut out, "latency", "no answers");
    } else {
        lat_row(&mut lat, "latency", &r.latency, "answers");
        // Closed loop: the latency is the service time already.
        if let Some(st) = r.service_time.as_ref().filter(|s| s.count > 0 && r.load.model != "closed") {
            lat_row(&mut lat, "  service", st, "answers");
        }
    }
    if let Some(d) = r.generator_delay.as_ref().filter(|d| d.count > 0) {
        lat_row(&mut lat, "  generator", d, "sends");
    }
    if let Some(late) = r.send_lateness.as_ref().filter(|l| l.count > 0) {
        lat_row(&mut lat, "lateness", late, "sends");
    }
    // The lateness split: the scheduler's own, and the wait for the transport.
    if let Some(w) = &r.transport_wait {
        if let Some(own) = r.schedule_lateness.as_ref().filter(|l| l.count > 0) {
            lat_row(&mut lat, "  scheduler", own, "sends");
        }
        lat_row(&mut lat, "  transport", &w.wait, "waited");
    }
    if let Some(c) = &r.connections {
        for (label, h) in [
            ("hs tcp", &c.handshake_tcp),
            ("hs tls", &c.handshake_tls),
            ("hs quic", &c.handshake_quic),
            ("rtt", &c.rtt),
        ] {
            if let Some(h) = h.as_ref().filter(|h| h.count > 0) {
                lat_row(&mut lat, label, h, "connections");
            }
        }
    }
    if !lat.is_empty() {
        out.extend(lat.lines());
        if let Some(x) =
            r.connections.as_ref().and_then(|c| c.handshake_rtt_ratio_milli.as_ref()).filter(|x| x.count > 0)
        {
            let f = |milli: u64| format!("{:.1}", milli as f64 / 1000.0);
            push_labeled(
                &mut out,
                "hs/rtt",
                &format!(
                    "handshake over RTT: min {} p50 {} p90 {} p99 {} max {} ({} connections)",
                    f(x.min_ns),
                    f(x.p50_ns),
                    f(x.p90_ns),
                    f(x.p99_ns),
                    f(x.max_ns),
                    x.count
                ),
            );
        }
        if r.generator_delay.as_ref().is_some_and(|d| d.count > 0) {
            let from = if r.load.model == "closed" { "issue" } else { "schedule" };
            let mut line = format!("generator: from each query's {from} to its departure (volley's own delay)");
            if r.load.model != "closed" {
                line.push_str("; service: departure to answer");
            }
            if let Some(s) = r.send_stamps.filter(|s| s.fallback > 0) {
                line.push_str(&format!(
                    "; {} of {} departures timed by volley's clock (no kernel stamp)",
                    s.fallback,
                    s.kernel + s.between + s.fallback
                ));
            }
            push_labeled(&mut out, "", &line);
        }
        if r.send_lateness.as_ref().is_some_and(|l| l.count > 0) {
            push_labeled(
                &mut out,
                "",
                "lateness: how late queries left against their schedule; latency counts from the schedule",
            );
        }
        if let Some(w) = &r.transport_wait {
            if r.send_lateness.as_ref().is_some_and(|l| l.count > 0) {
                push_labeled(
                    &mut out,
                    "",
                    "scheduler: how late the generator handed queries over; transport: how long they then waited",
                );
            }
            push_labeled(&mut out, "waited for", &wait_causes(w));
        }
    }
    out.push(String::new());

    let per_answer = if t.answered > 0 && r.generator.cpu_us_per_answer.is_finite() {
        format!(", {} per answer", fmt_ns((r.generator.cpu_us_per_answer * 1000.0).round() as u64))
    } else {
        String::new()
    };
    push_labeled(
        &mut out,
        "generator",
        &format!("CPU {:.3}s{per_answer}, {} threads", r.generator.cpu_s, r.generator.threads),
    );
    if let Some(c) = &r.target_cpu {
        let per_answer = if t.answered > 0 {
            format!(", {} per answer", fmt_ns((c.cpu_us_per_answer * 1000.0).round() as u64))
        } else {
            String::new()
        };
        let pids: Vec<String> = c.pids.iter().map(u32::to_string).collect();
        push_labeled(&mut out, "target cpu", &format!("{:.3}s{per_answer} (pid {})", c.cpu_s, pids.join(", ")));
    }
    if let Some(h) = r.host.filter(|h| h.steal_s > 0.0) {
        push_labeled(
            &mut out,
            "host",
            &format!(
                "steal {:.2}s over {} CPUs ({:.1}% of their time: the hypervisor ran something else)",
                h.steal_s,
                h.cpus,
                h.steal_share * 100.0
            ),
        );
    }
    if let Some(l) = &r.link {
        out.extend(link_lines(l));
    }

    if !r.warnings.is_empty() {
        out.push(String::new());
        for (i, warning) in r.warnings.iter().enumerate() {
            push_labeled(&mut out, if i == 0 { "warnings" } else { "" }, &format!("! {warning}"));
        }
    }
    out
}

/// `stream_credit 5120 queries (4.21s in all), connecting 10 queries (30.0ms in all)`: what
/// queries waited for before they left, the longest first.
pub(crate) fn wait_causes(w: &volley_metrics::TransportWait) -> String {
    let mut causes: Vec<_> = w.causes.iter().collect();
    causes.sort_by(|a, b| b.1.total_s.total_cmp(&a.1.total_s));
    causes
        .iter()
        .map(|(k, c)| format!("{k} {} queries ({} in all)", c.queries, fmt_ns((c.total_s * 1e9).round() as u64)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `12.3kB out, 45.6kB in; 300 packets out, 280 in; per answered query: 290B, 2.9 packets`:
/// what crossed the wire, headers included, both directions together per answered query.
fn wire_line(t: &Totals) -> String {
    let w = &t.wire;
    let per = if t.answered == 0 {
        "-".to_string()
    } else {
        let n = t.answered as f64;
        format!(
            "{}, {:.1} packets",
            fmt_bytes((w.bytes_out + w.bytes_in) as f64 / n),
            (w.packets_out + w.packets_in) as f64 / n
        )
    };
    let again = if w.retransmits > 0 { format!(" ({} sent again)", w.retransmits) } else { String::new() };
    format!(
        "{} out, {} in; {} packets out{again}, {} in; per answered query: {per}",
        fmt_bytes(w.bytes_out as f64),
        fmt_bytes(w.bytes_in as f64),
        w.packets_out,
        w.packets_in
    )
}

/// The columns of the table of a mixture's groups, in the text summary and the HTML report.
pub(crate) const GROUP_COLUMNS: [&str; 10] =
    ["group", "clients", "qps/client", "issued", "answered", "timed out", "failed", "p50", "p99", "conns"];

/// One group's cells, in the order of [`GROUP_COLUMNS`].
pub(crate) fn group_cells(grp: &volley_metrics::GroupSummary) -> Vec<String> {
    let t = &grp.totals;
    vec![
        grp.name.clone(),
        grp.clients.to_string(),
        grp.client_rate.map_or("-".into(), |q| format!("{q}")),
        t.issued.to_string(),
        fmt_pct(t.answered, t.issued),
        t.timed_out.to_string(),
        t.failed.to_string(),
        fmt_ns(grp.latency.p50_ns),
        fmt_ns(grp.latency.p99_ns),
        grp.connections.as_ref().map_or("-".into(), |c| c.opened.to_string()),
    ]
}

/// Pushes `label` padded to the label column followed by `text`, wrapped at word boundaries so
/// that lines stay within [`MAX_COLUMNS`]; continuation lines are indented under the text.
/// The emulated link (`--link`): its settings, what each direction did, its lateness.
fn link_lines(l: &volley_metrics::LinkInfo) -> Vec<String> {
    let mut out = Vec::new();
    push_labeled(&mut out, "link", &format!("{} (seed {})", if l.spec.is_empty() { "none" } else { &l.spec }, l.seed));
    for (name, d) in [("link up", &l.up), ("link down", &l.down)] {
        let mut text = format!(
            "{}: {} packets in, {} out; dropped: loss {}, queue {}, outage {}; reordered {}, duplicated {}",
            d.settings,
            d.counts.packets_in,
            d.counts.packets_out,
            d.counts.dropped_loss,
            d.counts.dropped_queue,
            d.counts.dropped_outage,
            d.counts.reordered,
            d.counts.duplicated
        );
        if let Some(q) = &d.queue_delay {
            text += &format!("; queueing p50 {} p99 {}", fmt_ns(q.p50_ns), fmt_ns(q.p99_ns));
        }
        push_labeled(&mut out, name, &text);
    }
    let prio = if l.realtime { "real-time priority" } else { "ordinary priority" };
    push_labeled(
        &mut out,
        "link late",
        &format!(
            "p50 {} p99 {} max {} ({prio}), forwarder CPU {:.3}s",
            fmt_ns(l.lateness.p50_ns),
            fmt_ns(l.lateness.p99_ns),
            fmt_ns(l.lateness.max_ns),
            l.forwarder_cpu_s
        ),
    );
    // Per second: the worst second's drops, the deepest queue, the latest second.
    let drops = |s: &volley_metrics::LinkSecond| {
        [&s.up, &s.down].iter().map(|d| d.dropped_loss + d.dropped_queue + d.dropped_outage).sum::<u64>()
    };
    if let Some(worst) = l.series.iter().max_by_key(|s| drops(s)).filter(|s| drops(s) > 0) {
        let queued = l.series.iter().map(|s| s.up.queued + s.down.queued).max().unwrap_or(0);
        let late = l.series.iter().max_by_key(|s| s.lateness_p99_ns).map_or(0, |s| s.lateness_p99_ns);
        push_labeled(
            &mut out,
            "link per s",
            &format!(
                "most drops in second {}: {} (loss {}, queue {}, outage {}); deepest queue {queued} packets; worst second's lateness p99 {}",
                worst.second,
                drops(worst),
                worst.up.dropped_loss + worst.down.dropped_loss,
                worst.up.dropped_queue + worst.down.dropped_queue,
                worst.up.dropped_outage + worst.down.dropped_outage,
                fmt_ns(late)
            ),
        );
    }
    out
}

fn push_labeled(out: &mut Vec<String>, label: &str, text: &str) {
    let room = MAX_COLUMNS - LABEL;
    let mut line = format!("{label:<LABEL$}");
    let mut used = 0usize;
    for word in text.split(' ') {
        let n = word.chars().count();
        if used > 0 && used + 1 + n > room {
            out.push(line.trim_end().to_string());
            line = " ".repeat(LABEL + 2);
            used = 2;
        } else if used > 0 {
            line.push(' ');
            used += 1;
        }
        line.push_str(word);
        used += n;
    }
    out.push(line.trim_end().to_string());
}

/// `closed loop, concurrency 100, duration 10s, timeout 5s, 4 threads, 4 connections`.
fn describe_load(r: &RunResult) -> String {
    let l = &r.load;
    let mut parts = vec![match l.model.as_str() {
        "closed" | "open" => format!("{} loop", l.model),
        m => m.to_string(),
    }];
    if let Some(c) = l.concurrency {
        match r.peak_on_wire {
            // The server allowed fewer at once (its streams, HTTP/1.1): the rest queued in volley.
            Some(p) if p < c => parts.push(format!("concurrency {c} (at most {p} on the wire: the server's limit)")),
            _ => parts.push(format!("concurrency {c}")),
        }
    }
    if let Some(q) = l.rate {
        parts.push(format!("rate {} qps", fmt_rate(q)));
    }
    if let Some(d) = l.duration_s {
        parts.push(format!("duration {}", fmt_secs(d)));
    }
    if let Some(n) = l.count {
        parts.push(format!("count {n}"));
    }
    parts.push(format!("timeout {}", fmt_secs(l.timeout_ms as f64 / 1000.0)));
    if let (Some(ms), Some(n)) = (l.udp_retry_ms, l.udp_tries) {
        parts.push(format!("UDP retry after {} ({n} tries)", fmt_secs(ms / 1000.0)));
    }
    if l.tc_fallback {
        parts.push("TC over TCP".into());
    }
    parts.push(format!("{} threads", l.threads));
    parts.push(format!("{} connections", l.connections));
    parts.join(", ")
}

/// The accounting equation with its numbers and a mark; a loud warning when it does not hold.
fn push_equation(out: &mut Vec<String>, t: &Totals) {
    let ok = t.balanced();
    let mark = if ok { '✓' } else { '✗' };
    let terms = [
        format!("{} issued", t.issued),
        format!("= {} answered", t.answered),
        format!("+ {} timed out", t.timed_out),
        format!("+ {} failed", t.failed),
        format!("+ {} unsent", t.unsent),
        format!("+ {} in flight  {mark}", t.in_flight),
    ];
    // One line when it fits (it does below a billion queries), else wrapped between terms.
    let mut line = format!("{:<LABEL$}{}", "fates", terms[0]);
    for term in &terms[1..] {
        if line.chars().count() + 1 + term.chars().count() > MAX_COLUMNS {
            out.push(line);
            line = format!("{:<LABEL$}{term}", "");
        } else {
            line.push(' ');
            line.push_str(term);
        }
    }
    out.push(line);
    if !ok {
        let diff = t.fates() as i128 - t.issued as i128;
        let what = if diff < 0 { format!("{} queries have no fate", -diff) } else { format!("{diff} fates too many") };
        push_labeled(
            out,
            "WARNING",
            &format!("the fates do not add up to the queries issued ({what}); do not trust these figures"),
        );
    }
}

/// RCODE counts in registry order (NOERROR, FORMERR, SERVFAIL, NXDOMAIN, ...), unknown names last.
pub(crate) fn ordered_rcodes(m: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
    v.sort_by_key(|(k, _)| (rcode_rank(k), k.clone()));
    v
}

/// Position of an RCODE name in the registry (`RCODEn` at n), 16 for names not known.
pub(crate) fn rcode_rank(name: &str) -> u16 {
    (0..16u16)
        .find(|i| rcode_name(*i) == name)
        .or_else(|| name.strip_prefix("RCODE").and_then(|n| n.parse().ok()))
        .unwrap_or(16)
}

/// The metrics crate's name of RCODE `i` (0..=15), read through its counters so that both
/// crates always agree.
fn rcode_name(i: u16) -> String {
    let mut c = volley_metrics::Counters::default();
    c.rcodes[(i & 0xF) as usize] = 1;
    c.rcode_map().into_keys().next().unwrap_or_default()
}

/// Rows `[name, count, share of basis, basis]`, the basis named on the first row only.
fn share_rows(items: &[(String, u64)], of: u64, basis: &str) -> Vec<[String; 4]> {
    items
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            [k.clone(), v.to_string(), fmt_pct(*v, of), if i == 0 { basis.to_string() } else { String::new() }]
        })
        .collect()
}

#[cfg(test)]
mod wire_tests {
    use super::*;
    use volley_metrics::WireStats;

    #[test]
    fn wire_line_per_answered_query() {
        let t = Totals {
            answered: 100,
            wire: WireStats { bytes_out: 7_300, bytes_in: 8_900, packets_out: 100, packets_in: 100, retransmits: 0 },
            ..Totals::default()
        };
        let line = wire_line(&t);
        assert_eq!(line, "7.30kB out, 8.90kB in; 100 packets out, 100 in; per answered query: 162B, 2.0 packets");
        assert!(LABEL + line.len() <= MAX_COLUMNS);
        let none = Totals { answered: 0, ..t.clone() };
        assert!(wire_line(&none).ends_with("per answered query: -"));
        let lossy = Totals { wire: WireStats { retransmits: 3, ..t.wire }, ..t };
        assert!(wire_line(&lossy).contains("100 packets out (3 sent again), 100 in"), "{}", wire_line(&lossy));
    }
}
