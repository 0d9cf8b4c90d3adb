//! The experiment's table in text (the study's figure beside each measured one, a verdict per
//! row, the checks below), and its JSON document `volley.experiment/1`.

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

use crate::check::{num, Evaluation};
use crate::runner::Outcome;
use crate::spec::{Figure, Spec};

/// The text table.
pub fn write_text(spec: &Spec, ev: &Evaluation, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "{}: {}", spec.name, spec.title)?;
    writeln!(out, "study: {}", spec.source)?;
    // Each column: measured, then the study's in brackets.
    let mut header = vec!["row".to_string()];
    for c in &spec.columns {
        let label = c.label.clone().unwrap_or_else(|| c.name.clone());
        header.push(label);
    }
    header.push("verdict".into());
    let mut lines = vec![header];
    let mut spread = false;
    for r in &ev.rows {
        let mut l = vec![r.label.clone()];
        for c in &spec.columns {
            let cell = &r.cells[&c.name];
            let m = cell.measured.map_or("-".to_string(), num);
            let ratio = if c.ratio_to.is_some() || c.factor_of.is_some() { "x" } else { "" };
            let mark = if cell.derived { "*" } else { "" };
            let m = if cell.measured.is_some() { format!("{m}{ratio}{mark}") } else { m };
            // The repetitions' spread beside a figure shown as it was measured (a ratio's
            // repetitions are of the figure before the ratio: in the JSON only).
            let lo = cell.values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = cell.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let m = if ratio.is_empty() && cell.measured.is_some() && cell.values.len() > 1 && lo < hi {
                spread = true;
                format!("{m} [{}-{}]", num(lo), num(hi))
            } else {
                m
            };
            let s = match &cell.study {
                Some(Figure::Number(v)) => format!(" ({}{ratio})", num(*v)),
                Some(Figure::Words(w)) => format!(" ({w})"),
                None => String::new(),
            };
            l.push(format!("{m}{s}"));
        }
        l.push(r.verdict.clone());
        lines.push(l);
    }
    let widths: Vec<usize> =
        (0..lines[0].len()).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    for (n, l) in lines.iter().enumerate() {
        let mut s = String::new();
        for (i, cell) in l.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            if i == 0 {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            }
        }
        writeln!(out, "{}", s.trim_end())?;
        if n == 0 {
            writeln!(out, "{}", "-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)))?;
        }
    }
    writeln!(out, "(in brackets: the study's figure)")?;
    if spread {
        writeln!(out, "(in square brackets: the lowest and highest of the repetitions; the middle one is shown)")?;
    }
    let mut derived: Vec<&str> = spec
        .columns
        .iter()
        .filter(|c| ev.rows.iter().any(|r| r.cells[&c.name].derived))
        .map(|c| c.figure.as_str())
        .collect();
    derived.dedup();
    for figure in derived {
        let what = crate::figures::FIGURES.iter().find(|(f, _)| *f == figure).map_or("", |(_, d)| d);
        writeln!(out, "(*: derived, not measured: {figure}: {what})")?;
    }
    if !ev.verdicts.is_empty() {
        writeln!(out)?;
        for v in &ev.verdicts {
            let word = match (v.measured, v.holds) {
                (false, _) => "n/a    ",
                (true, true) => "holds  ",
                (true, false) => "DIFFERS",
            };
            writeln!(out, "{word} {}: {}", v.says, v.detail)?;
        }
    }
    Ok(())
}

/// Facts about the machine that ran it.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    pub hostname: String,
    pub kernel: String,
    pub cpus: usize,
    pub cpu_model: String,
}

impl Host {
    pub fn here() -> Host {
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        Host {
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
        }
    }
}

/// The JSON document of a finished experiment.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    pub schema: &'static str,
    pub volley_version: &'a str,
    pub started_at: &'a str,
    pub quick: bool,
    pub host: Host,
    /// The experiment file that ran, as text and as read.
    pub spec_text: &'a str,
    pub spec: &'a Spec,
    pub table: &'a Evaluation,
    pub holds: bool,
    pub seconds: f64,
    pub interrupted: bool,
    /// Every step: its point, figures and full results (`volley.results/1` each).
    pub steps: &'a [crate::runner::StepRecord],
    /// The server volley started (`--server`): name, version, pid, core, targets, how it
    /// answers, the configuration written; null against the embedded responder or targets.
    pub server: Option<&'a crate::servers::ServerInfo>,
}

/// Writes the JSON document atomically.
pub fn write_json(path: &Path, doc: &Document) -> io::Result<()> {
    let bytes = serde_json::to_vec(doc).map_err(io::Error::other)?;
    volley_atomic::write(path, &bytes)
}

/// The document of an outcome.
#[allow(clippy::too_many_arguments)]
pub fn document<'a>(
    spec: &'a Spec,
    spec_text: &'a str,
    table: &'a Evaluation,
    outcome: &'a Outcome,
    version: &'a str,
    started_at: &'a str,
    quick: bool,
    server: Option<&'a crate::servers::ServerInfo>,
) -> Document<'a> {
    Document {
        schema: "volley.experiment/1",
        volley_version: version,
        started_at,
        quick,
        host: Host::here(),
        spec_text,
        spec,
        table,
        holds: table.holds(),
        seconds: outcome.seconds,
        interrupted: outcome.interrupted,
        steps: &outcome.steps,
        server,
    }
}
