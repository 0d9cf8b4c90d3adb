//! `volley limit`: raise the load until the target stops keeping up, per transport.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;
use volley_coordinate::{merge_outcome, Event, LimitSpec, Session};
use volley_engine::limit::{search, GeneratorFigures, Growth, Measured, Objective, Outcome, Search};
use volley_metrics::{Histogram, RunResult};

use crate::args::parse_duration;
use crate::cmd::run::{
    check_output, check_target, dnsperf_target, execute, execute_with, interrupt_flag, plan, same_addresses, RunArgs,
};
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  The highest rate the responder keeps 99 % answered over UDP, then over TCP and DoT:
    volley limit udp://127.0.0.1:53 --also tcp://127.0.0.1:53 --also tls://127.0.0.1:853 --ca ca.pem

  Clients served (seeds/004's method): clients of 1 query per second each, browser profile
  over DoH, with p95 under 100 ms:
    volley limit https://127.0.0.1/dns-query --by clients --client-rate 1 --profile browser \\
      --start 1000 --max-latency p95=100ms

Each step runs for --step-duration at a load; the load grows (--growth x2: doubles; +5000:
adds) until a step breaks the objective, then the search bisects between the last good and
the first bad step (--refine). A step where the generator, not the target, was the
bottleneck (its CPU saturated, its scheduler late by more than 1 ms at the median, or less
than 95 % of the load sent) ends the search: the limit is then at least the last good load,
and the table says so. Queries that waited for the transport (the server's stream limit, a
connection being opened) are the target's doing: such a step is judged like any other.

Every other flag of `volley run` applies to each step (queries, TLS, connections, profiles).";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct LimitArgs {
    #[command(flatten)]
    pub run: RunArgs,

    /// Search this target too (repeat); the table compares each limit with the first TARGET's.
    #[arg(long, value_name = "URL", help_heading = "Limit search")]
    pub also: Vec<String>,

    /// What to raise: queries per second (open loop), or simulated clients (each at
    /// --client-rate, with --profile or --mix).
    #[arg(long, value_enum, default_value = "qps", help_heading = "Limit search")]
    pub by: By,

    /// Load of the first step.
    #[arg(long, value_name = "LOAD", default_value_t = 1000.0, help_heading = "Limit search")]
    pub start: f64,

    /// Highest load to try.
    #[arg(long, value_name = "LOAD", default_value_t = 10_000_000.0, help_heading = "Limit search")]
    pub max: f64,

    /// How the load grows while steps keep up: xF multiplies by F, +N adds N.
    #[arg(long, value_name = "xF|+N", default_value = "x2", help_heading = "Limit search")]
    pub growth: String,

    /// How long each step runs (long enough to be steady).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = "Limit search")]
    pub step_duration: Duration,

    /// Bisection steps between the last good and the first bad load.
    #[arg(long, value_name = "N", default_value_t = 4, help_heading = "Limit search")]
    pub refine: u32,

    /// Objective: at least this share of queries answered (e.g. 99%, 0.999).
    #[arg(long, value_name = "RATIO", default_value = "99%", help_heading = "Limit search")]
    pub min_answered: String,

    /// Objective: a latency percentile at most this (e.g. p95=100ms).
    #[arg(long, value_name = "pQ=DURATION", help_heading = "Limit search")]
    pub max_latency: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum By {
    Qps,
    Clients,
}

impl By {
    fn unit(self) -> &'static str {
        match self {
            By::Qps => "qps",
            By::Clients => "clients",
        }
    }
}

/// One target's search, as written to the results file (charts read `name`, `unit`, `steps`,
/// `limit`).
#[derive(Debug, Serialize)]
struct SearchResult {
    name: String,
    target: String,
    unit: &'static str,
    steps: Vec<volley_engine::limit::Step>,
    limit: Option<f64>,
    stopped: volley_engine::limit::Stopped,
    /// Every step's full results (volley.results/1), in step order: the same figures as any
    /// other run's, for reports and comparisons.
    runs: Vec<RunResult>,
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| format!("invalid --min-answered '{s}': expected a share such as 99% or 0.99"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("invalid --min-answered '{s}': must be between 0 and 100%"));
    }
    Ok(v)
}

fn parse_latency(s: &str) -> Result<(f64, u64), String> {
    let bad = || format!("invalid --max-latency '{s}': expected pQ=DURATION such as p95=100ms or p99.9=1s");
    let (q, d) = s.split_once('=').ok_or_else(bad)?;
    let q: f64 = q.strip_prefix('p').ok_or_else(bad)?.parse().map_err(|_| bad())?;
    if !(0.0..=100.0).contains(&q) {
        return Err(bad());
    }
    let d = parse_duration(d).map_err(|_| bad())?;
    Ok((q / 100.0, d.as_nanos() as u64))
}

fn parse_growth(s: &str) -> Result<Growth, String> {
    let bad = || format!("invalid --growth '{s}': expected xF (e.g. x1.5) or +N (e.g. +5000)");
    if let Some(f) = s.strip_prefix('x') {
        let f: f64 = f.parse().map_err(|_| bad())?;
        return if f > 1.0 && f.is_finite() { Ok(Growth::Factor(f)) } else { Err(bad()) };
    }
    if let Some(n) = s.strip_prefix('+') {
        let n: f64 = n.parse().map_err(|_| bad())?;
        return if n > 0.0 && n.is_finite() { Ok(Growth::Add(n)) } else { Err(bad()) };
    }
    Err(bad())
}

/// Whether a step measured the generator rather than the target: its CPU was saturated, or
/// its scheduler handed queries over systematically late (median lateness over 1 ms: a busy
/// machine's hiccups move the tail, not the median), or it issued less than 95 % of the load
/// asked for. Queries that waited for the transport (the server's streams, a connection being
/// opened), or never left for want of them (unsent), do not make a step generator-bound: that
/// is the target's doing, and the step is judged by its answers and latency like any other.
/// The run of one step at `load` against `target`: the search's flags, the step's duration,
/// no file of its own.
fn step_run(a: &LimitArgs, target: &Option<String>, load: f64) -> RunArgs {
    let mut r = a.run.clone();
    r.target = target.clone();
    (r.server, r.port, r.mode) = (None, None, None);
    r.duration = Some(a.step_duration);
    r.output = None;
    match a.by {
        By::Qps => r.rate = Some(load),
        By::Clients => r.clients = Some(load.round().max(1.0) as u64),
    }
    r
}

fn generator_bound(r: &RunResult, load: f64, by: By) -> bool {
    let asked = match by {
        // A part of a split search (--part I/N) is asked for its share of each step.
        By::Qps => r.part.as_ref().map_or(load, |p| load / f64::from(p.count.max(1))),
        By::Clients => r.load.rate.unwrap_or(0.0),
    };
    volley_engine::limit::generator_bound(&GeneratorFigures {
        busy: r.generator.cpu_s / (r.duration_s.max(1e-3) * r.generator.threads.max(1) as f64),
        schedule_late_p50_ns: r.schedule_lateness.as_ref().filter(|l| l.count > 0).map(|l| l.p50_ns),
        // Issued, not sent: queries the server held back (no stream credit) are its doing.
        sent_share: if asked > 0.0 { r.qps.issued / asked } else { 1.0 },
    })
}

/// What a step measured, for the search: its answers, the objective's latency quantile, and
/// whether the generator rather than the target set the pace.
fn measured(r: &RunResult, load: f64, by: By, quantile: f64, interrupted: bool) -> Measured {
    let lat = Histogram::from_sparse(&r.latency.histogram);
    Measured {
        answered_ratio: r.totals.answered_ratio(),
        latency_ns: lat.quantile(quantile),
        p99_ns: r.latency.p99_ns,
        generator_bound: generator_bound(r, load, by),
        interrupted,
    }
}

/// A step's verdict, as printed.
fn verdict(objective: &Objective, m: &Measured) -> &'static str {
    if m.generator_bound {
        "generator-bound"
    } else if objective.met(m) {
        "ok"
    } else {
        "BROKEN"
    }
}

/// How busy the target was during a step: its CPU time over the time the load ran (not the
/// step's whole elapsed time, which adds the wait for the last answers after the load).
fn target_cpu_share(cpu_s: f64, load_s: f64) -> f64 {
    cpu_s / load_s.max(1e-3)
}

pub fn run(a: LimitArgs) -> CliResult {
    check_output(&a.run.output)?;
    let min_answered = parse_ratio(&a.min_answered).map_err(CliError::usage)?;
    let max_latency = a.max_latency.as_deref().map(parse_latency).transpose().map_err(CliError::usage)?;
    let growth = parse_growth(&a.growth).map_err(CliError::usage)?;
    if !(a.start > 0.0 && a.start.is_finite() && a.max >= a.start) {
        return Err(CliError::usage("invalid --start/--max: need 0 < start <= max"));
    }
    if a.run.rate.is_some() || a.run.concurrency.is_some() || a.run.clients.is_some() || a.run.count.is_some() {
        return Err(CliError::usage(
            "volley limit sets the load itself: drop --rate, --concurrency, --clients and --count",
        ));
    }
    if a.run.start_at.is_some() {
        return Err(CliError::usage(
            "--start-at: a split limit search starts each step together with --coordinator; fixed start times apply to volley run",
        ));
    }
    let objective = Objective { min_answered, max_latency };
    if a.run.coordinator.is_some() {
        let spec = LimitSpec {
            by: a.by.unit().to_string(),
            start: a.start,
            max: a.max,
            growth: a.growth.clone(),
            step_duration_ns: a.step_duration.as_nanos() as u64,
            refine: a.refine,
            min_answered,
            max_latency,
        };
        return split_part(&a, spec);
    }
    let settings = Search { start: a.start, max: a.max, growth, refine: a.refine, resolution: 0.02 };
    let quantile = max_latency.map_or(0.99, |(q, _)| q);

    if !a.also.is_empty() && !a.run.mix.is_empty() {
        return Err(CliError::usage("--also searches other targets; a --mix names its own: use one or the other"));
    }
    // dnsperf's -s/-p/-m name the first target; each step's plan then names it as TARGET.
    let first = if a.run.server.is_some() || a.run.port.is_some() || a.run.mode.is_some() {
        Some(dnsperf_target(a.run.server.as_deref(), a.run.port, a.run.mode.as_deref())?)
    } else {
        a.run.target.clone()
    };
    let mut targets: Vec<Option<String>> = vec![first];
    targets.extend(a.also.iter().cloned().map(Some));
    let interrupt = interrupt_flag();
    // Behind a link (--link): one link for the whole search, entered before any socket is
    // made; each step's results carry the link over that step.
    let mut link = match &a.run.link {
        Some(spec) => {
            let l = super::link::start_link(spec, a.run.link_seed)?;
            l.enter()?;
            Some(l)
        }
        None => None,
    };
    let mut searches = Vec::new();
    for target in targets {
        // The plan of one step at `load`.
        let step_args = |load: f64| step_run(&a, &target, load);
        let mut first = plan(&step_args(a.start))?;
        if let Some(l) = &link {
            l.reach_plan(&mut first);
        }
        check_target(&mut first).map_err(|e| match &link {
            Some(l) => l.unreachable(e),
            None => e,
        })?;
        let name = first.target.to_string();
        eprintln!("searching the limit of {name} by {} ({})", a.by.unit(), describe(&objective));
        let mut failure = None;
        let mut runs = Vec::new();
        let outcome: Outcome = search(&settings, &objective, |load| {
            if failure.is_some() || interrupt.load(Ordering::Relaxed) {
                return Measured { interrupted: true, ..Default::default() };
            }
            if let Some(l) = link.as_mut() {
                l.mark();
            }
            let step = plan(&step_args(load)).and_then(|mut p| {
                // Measured at the address the probe found answering.
                same_addresses(&mut p, &first);
                execute(&p, a.run.progress, None, interrupt.clone(), link.as_mut())
            });
            match step {
                Ok(mut r) => {
                    r.command = std::env::args().collect();
                    if let Some(l) = link.as_mut() {
                        let (info, warnings) = l.part();
                        r.link = Some(info);
                        r.warnings.extend(warnings);
                    }
                    let m = measured(&r, load, a.by, quantile, interrupt.load(Ordering::Relaxed));
                    // With --target-pid: how busy the target was at this step.
                    let target = r.target_cpu.as_ref().map_or(String::new(), |c| {
                        format!(
                            "  target CPU {:.0}% ({}/answer)",
                            target_cpu_share(c.cpu_s, r.duration_s) * 100.0,
                            volley_report::fmt_ns((c.cpu_us_per_answer * 1000.0).round() as u64)
                        )
                    });
                    eprintln!(
                        "  {:>12} {}  answered {:>7.3}%  p{} {:>10}  {}{target}",
                        format!("{load:.0}"),
                        a.by.unit(),
                        m.answered_ratio * 100.0,
                        quantile * 100.0,
                        volley_report::fmt_ns(m.latency_ns),
                        verdict(&objective, &m)
                    );
                    runs.push(r);
                    m
                }
                Err(e) => {
                    failure = Some(e);
                    Measured { interrupted: true, ..Default::default() }
                }
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        searches.push(SearchResult {
            name: name.clone(),
            target: first.target.url.clone(),
            unit: a.by.unit(),
            steps: outcome.steps,
            limit: outcome.limit,
            stopped: outcome.stopped,
            runs,
        });
        if interrupt.load(Ordering::Relaxed) {
            break;
        }
    }

    if let Some(l) = link {
        // The link's lines over the whole search (stderr).
        l.finish()?;
    }
    let mut out = std::io::stdout().lock();
    write_table(&searches, &mut out).map_err(CliError::failure)?;
    if let Some(path) = &a.run.output {
        write_doc(path, &objective, quantile, a.step_duration, &searches, None)?;
    }
    if interrupt.load(Ordering::Relaxed) {
        return Err(CliError { code: 130, message: "interrupted: the limits shown are partial".into() });
    }
    Ok(())
}

/// The search's results file (`volley.limit/1`); `parts`: a split search's part count.
fn write_doc(
    path: &std::path::Path,
    objective: &Objective,
    quantile: f64,
    step_duration: Duration,
    searches: &[SearchResult],
    parts: Option<u32>,
) -> CliResult {
    let mut doc = serde_json::json!({
        "schema": "volley.limit/1",
        "command": std::env::args().collect::<Vec<_>>(),
        "objective": { "min_answered": objective.min_answered, "latency_quantile": quantile,
                       "max_latency_ns": objective.max_latency.map(|(_, ns)| ns) },
        "step_duration_s": step_duration.as_secs_f64(),
        "searches": searches,
    });
    if let Some(n) = parts {
        doc["parts"] = n.into();
    }
    let bytes = serde_json::to_vec_pretty(&doc).map_err(CliError::failure)?;
    volley_report::write_file_atomic(path, |w| w.write_all(&bytes)).map_err(CliError::failure)
}

/// A part of a split limit search (`volley limit --parts N --coordinator ADDR`): the
/// coordinator runs the search; this part makes its share of each step it announces, starting
/// when every part is ready, and hands in the step's results.
fn split_part(a: &LimitArgs, spec: LimitSpec) -> CliResult {
    if !a.also.is_empty() || a.run.link.is_some() {
        return Err(CliError::usage(
            "--coordinator: a split limit search searches one target, not behind --link: drop --also and --link",
        ));
    }
    if a.run.output.is_some() {
        return Err(CliError::usage(
            "-o: the parts of a split limit search write no file; the coordinator writes the search (volley coordinate -o)",
        ));
    }
    let target = if a.run.server.is_some() || a.run.port.is_some() || a.run.mode.is_some() {
        Some(dnsperf_target(a.run.server.as_deref(), a.run.port, a.run.mode.as_deref())?)
    } else {
        a.run.target.clone()
    };
    let step_args = |load: f64| step_run(a, &target, load);
    let mut first = plan(&step_args(a.start))?;
    check_target(&mut first)?;
    let items = match a.by {
        By::Qps => 0,
        By::Clients => a.start.round().max(1.0) as u64,
    };
    let Some(c) = super::scale::join(&a.run, items, Some(spec))? else {
        return Err(CliError::usage("--coordinator: no coordinator"));
    };
    let interrupt = interrupt_flag();
    while let Some((number, load)) = c.next_step()? {
        let step = plan(&step_args(load)).and_then(|mut p| {
            same_addresses(&mut p, &first);
            c.arm(&mut p);
            execute_with(&p, a.run.progress, None, interrupt.clone(), None, &mut |pr| c.progress(pr))
        });
        let mut r = match step {
            Ok(r) => r,
            Err(e) => {
                c.failed(&e.message);
                return Err(e);
            }
        };
        r.command = std::env::args().collect();
        c.annotate(&mut r);
        if !a.run.quiet {
            eprintln!(
                "  step {number}: {load:.0} {} (part {}: {} issued, {} answered)",
                a.by.unit(),
                c.part(),
                r.totals.issued,
                r.totals.answered
            );
        }
        c.hand_in_step(&r)
            .map_err(|e| CliError::failure(format!("part {}: step {number}: results not handed in: {e}", c.part())))?;
        if interrupt.load(Ordering::Relaxed) {
            return Err(CliError { code: 130, message: "interrupted".into() });
        }
    }
    Ok(())
}

/// The coordinator's side of a split limit search (`volley coordinate` whose parts run
/// `volley limit`): runs the search, announcing each step's load to every part with one start,
/// and judges each step on the parts' merged figures. Writes the search to `output`.
pub(crate) fn coordinate_search(
    mut session: Session,
    spec: LimitSpec,
    parts: u32,
    output: &std::path::Path,
    events: &mut dyn FnMut(Event),
) -> CliResult {
    let by = if spec.by == By::Clients.unit() { By::Clients } else { By::Qps };
    let growth = parse_growth(&spec.growth).map_err(CliError::usage)?;
    let objective = Objective { min_answered: spec.min_answered, max_latency: spec.max_latency };
    let settings = Search { start: spec.start, max: spec.max, growth, refine: spec.refine, resolution: 0.02 };
    let quantile = spec.max_latency.map_or(0.99, |(q, _)| q);
    let interrupt = interrupt_flag();
    let command: Vec<String> = std::env::args().collect();
    let mut runs: Vec<RunResult> = Vec::new();
    let mut number = 0u32;
    let mut broken: Option<String> = None;
    eprintln!("volley: coordinate: searching the limit by {} ({}) with {parts} parts", by.unit(), describe(&objective));
    let outcome = search(&settings, &objective, |load| {
        if broken.is_some() || interrupt.load(Ordering::Relaxed) {
            return Measured { interrupted: true, ..Default::default() };
        }
        number += 1;
        let out = session.round(Some((number, load)), events);
        let merged = match merge_outcome(&out, command.clone()) {
            Ok(Some(m)) => m,
            Ok(None) => {
                broken = Some(format!("step {number}: no part handed in results"));
                return Measured { interrupted: true, ..Default::default() };
            }
            Err(e) => {
                broken = Some(format!("step {number}: {e}"));
                return Measured { interrupted: true, ..Default::default() };
            }
        };
        let r = merged.result;
        // A step without some parts measured part of the load: the search cannot go on.
        if !out.scale.complete {
            broken = Some(format!(
                "step {number}: {:.1}% of the load is missing ({})",
                out.scale.missing_share * 100.0,
                r.warnings.first().map_or("", String::as_str)
            ));
        }
        let m = measured(&r, load, by, quantile, broken.is_some() || interrupt.load(Ordering::Relaxed));
        eprintln!(
            "  {:>12} {}  answered {:>7.3}%  p{} {:>10}  {}  start skew {}",
            format!("{load:.0}"),
            by.unit(),
            m.answered_ratio * 100.0,
            quantile * 100.0,
            volley_report::fmt_ns(m.latency_ns),
            if broken.is_some() { "INCOMPLETE" } else { verdict(&objective, &m) },
            out.scale.start_skew_ns.map_or("unknown".to_string(), volley_report::fmt_ns)
        );
        runs.push(r);
        m
    });
    session.finish();
    let Some(first) = runs.first() else {
        return Err(CliError::failure(broken.unwrap_or_else(|| "no step was measured".into())));
    };
    let search = SearchResult {
        name: first.target.url.clone(),
        target: first.target.url.clone(),
        unit: by.unit(),
        steps: outcome.steps,
        limit: outcome.limit,
        stopped: outcome.stopped,
        runs,
    };
    let searches = [search];
    let mut out = std::io::stdout().lock();
    write_table(&searches, &mut out).map_err(CliError::failure)?;
    write_doc(output, &objective, quantile, Duration::from_nanos(spec.step_duration_ns), &searches, Some(parts))?;
    if let Some(b) = broken {
        return Err(CliError { code: 3, message: format!("incomplete: the search stopped at {b}") });
    }
    if interrupt.load(Ordering::Relaxed) {
        return Err(CliError { code: 130, message: "interrupted: the limit shown is partial".into() });
    }
    Ok(())
}

fn describe(o: &Objective) -> String {
    let mut s = format!("answered >= {}%", o.min_answered * 100.0);
    if let Some((q, ns)) = o.max_latency {
        s += &format!(", p{} <= {}", q * 100.0, volley_report::fmt_ns(ns));
    }
    s
}

/// The table of seeds/004: target, limit, factor against the first.
fn write_table(searches: &[SearchResult], w: &mut impl Write) -> std::io::Result<()> {
    use volley_report::table::{Align, Table};
    let reference = searches.first().and_then(|s| s.limit);
    let mut t = Table::new()
        .column("target", Align::Left)
        .column("limit", Align::Right)
        .column("unit", Align::Left)
        .column("vs first", Align::Right)
        .column("steps", Align::Right)
        .column("", Align::Left);
    for s in searches {
        let limit = s.limit.map_or("-".to_string(), |l| format!("{l:.0}"));
        let vs = match (s.limit, reference) {
            (Some(l), Some(r)) if r > 0.0 => format!("{:.2}x", l / r),
            _ => "-".into(),
        };
        let note = match s.stopped {
            volley_engine::limit::Stopped::Found => "",
            volley_engine::limit::Stopped::BelowStart => "below --start",
            volley_engine::limit::Stopped::AboveMax => "at least (reached --max)",
            volley_engine::limit::Stopped::GeneratorBound if s.limit.is_none() => {
                "unknown: the generator was the bottleneck from the first step"
            }
            volley_engine::limit::Stopped::GeneratorBound => "at least (the generator was the bottleneck)",
            volley_engine::limit::Stopped::Interrupted => "interrupted",
        };
        t.row([s.name.clone(), limit, s.unit.to_string(), vs, s.steps.len().to_string(), note.to_string()]);
    }
    t.write(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_ratio("99%").unwrap(), 0.99);
        assert_eq!(parse_ratio("0.5").unwrap(), 0.5);
        assert!(parse_ratio("101%").is_err());
        assert_eq!(parse_latency("p95=100ms").unwrap(), (0.95, 100_000_000));
        assert!(parse_latency("95=1s").is_err());
        assert_eq!(parse_growth("x1.5").unwrap(), Growth::Factor(1.5));
        assert_eq!(parse_growth("+500").unwrap(), Growth::Add(500.0));
        assert!(parse_growth("x1").is_err());
    }

    /// A step of 5 s of load that took 7.9 s with its wait for late answers, the target busy
    /// 3 s: 60 % of the load's time, not 38 % of the step's.
    #[test]
    fn target_cpu_is_a_share_of_the_load_time() {
        assert!((target_cpu_share(3.0, 5.0) - 0.6).abs() < 1e-9);
        assert!(target_cpu_share(3.0, 0.0).is_finite());
    }
}
