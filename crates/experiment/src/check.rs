//! The table from the measured figures, and the verdicts: each check of the study's finding
//! computed on the measured values, holds or differs (and by how much).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::figures::{median, FIGURES};
use crate::spec::{Check, Figure, Spec};

/// What a spec names that is not there: (text to find its line by, message).
pub type Invalid = (Option<String>, String);

/// Transports a run may name.
pub const TRANSPORTS: &[&str] = &["udp", "tcp", "dot", "doh1", "doh2", "doh3", "doq"];

/// Most runs an experiment may name, its blocks' lists multiplied and their repetitions: a
/// file of a few lines could otherwise name billions (and the plan of them take the memory).
pub const MAX_RUNS: u64 = 100_000;

/// Checks what serde cannot: names of figures, columns, rows, transports.
pub fn validate(spec: &Spec) -> Result<(), Invalid> {
    if spec.runs.is_empty() {
        return Err((None, "an experiment needs at least one [[runs]] block".into()));
    }
    for quick in [false, true] {
        let runs = spec.runs.iter().fold(0u64, |sum, block| {
            let r = block.effective(quick);
            let len = |n: Option<usize>| n.unwrap_or(1).max(1) as u64;
            [
                len(r.transport.as_ref().map(Vec::len)),
                len(r.lifetime.as_ref().map(Vec::len)),
                len(r.key.as_ref().map(Vec::len)),
                len(r.link.as_ref().map(Vec::len)),
                len(r.connections.as_ref().map(Vec::len)),
                len(r.tls.as_ref().map(Vec::len)),
                u64::from(r.repetitions.unwrap_or(1).max(1)),
            ]
            .into_iter()
            .fold(1u64, u64::saturating_mul)
            .saturating_add(sum)
        });
        if runs > MAX_RUNS {
            let what = if quick { "with --quick, " } else { "" };
            return Err((
                Some("[[runs]]".into()),
                format!("{what}the [[runs]] blocks name {runs} runs (their lists multiplied, and repetitions), more than {MAX_RUNS}"),
            ));
        }
    }
    for c in &spec.columns {
        if !FIGURES.iter().any(|(f, _)| *f == c.figure) {
            let known: Vec<&str> = FIGURES.iter().map(|(f, _)| *f).collect();
            return Err((
                Some(c.figure.clone()),
                format!("column '{}': unknown figure '{}' (known: {})", c.name, c.figure, known.join(", ")),
            ));
        }
        if c.ratio_to.is_some() && c.factor_of.is_some() {
            return Err((Some(c.name.clone()), format!("column '{}': ratio_to or factor_of, not both", c.name)));
        }
    }
    for r in &spec.runs {
        for q in [Some(r), r.quick.as_deref()].into_iter().flatten() {
            for t in q.transport.iter().flatten() {
                if !TRANSPORTS.contains(&t.as_str()) {
                    return Err((
                        Some(t.clone()),
                        format!("unknown transport '{t}' (known: {})", TRANSPORTS.join(", ")),
                    ));
                }
            }
            for l in q.lifetime.iter().flatten() {
                if crate::runner::lifetime(l).is_err() {
                    return Err((
                        Some(l.clone()),
                        format!("lifetime '{l}': expected persistent, a duration (30s), queries (1q) or idle10s"),
                    ));
                }
            }
            for k in q.key.iter().flatten() {
                if let Err(e) = k.parse::<volley_responder::KeyType>() {
                    return Err((Some(k.clone()), format!("key {e}")));
                }
            }
            for t in q.tls.iter().flatten() {
                if !["fresh", "resumed", "0rtt"].contains(&t.as_str()) {
                    return Err((Some(t.clone()), format!("tls '{t}': expected fresh, resumed or 0rtt")));
                }
            }
            for (what, d) in [
                ("duration", &q.duration),
                ("timeout", &q.timeout),
                ("slow_over", &q.slow_over),
                ("udp_retry", &q.udp_retry),
                ("server.idle_timeout", &q.server.as_ref().and_then(|s| s.idle_timeout.clone())),
            ] {
                if let Some(d) = d {
                    if volley_responder::parse_duration(d).is_err() {
                        return Err((Some(d.clone()), format!("{what} '{d}': expected a duration such as 2s")));
                    }
                }
            }
            if let Some(n) = q.conn_rate.filter(|n| !(n.is_finite() && *n > 0.0)) {
                return Err((
                    Some("conn_rate".into()),
                    format!("conn_rate {n}: expected new connections per second above 0"),
                ));
            }
            if let Some(n) = q.trace_queries.filter(|&n| n == 0 || n > volley_metrics::MAX_TRACE) {
                return Err((
                    Some("trace_queries".into()),
                    format!("trace_queries {n}: expected 1 to {}", volley_metrics::MAX_TRACE),
                ));
            }
            if let Some(d) = q.server.as_ref().and_then(|s| s.delay.as_ref()) {
                if let Err(e) = d.parse::<volley_responder::DelayRule>() {
                    return Err((Some(d.clone()), format!("server.delay {e}")));
                }
            }
            if let Some(by) = q.limit.as_ref().and_then(|l| l.by.as_deref()) {
                if by != "rate" && by != "clients" {
                    return Err((Some(by.to_string()), format!("limit.by '{by}': expected rate or clients")));
                }
            }
            if q.measure == Some(crate::spec::Measure::Limit) && q.limit.is_none() && r.limit.is_none() {
                return Err((Some("limit".into()), "measure = \"limit\" needs a [runs.limit] table".into()));
            }
        }
    }
    let column = |n: &str| spec.columns.iter().any(|c| c.name == n);
    for r in &spec.rows {
        for c in r.study.keys() {
            if !column(c) {
                return Err((
                    Some(c.clone()),
                    format!("row '{}': the study's figure for unknown column '{c}'", r.name),
                ));
            }
        }
    }
    for c in &spec.checks {
        if !column(&c.column) {
            return Err((Some(c.column.clone()), format!("check '{}': unknown column '{}'", c.says, c.column)));
        }
        let order = c.higher.is_some() || c.lower.is_some();
        let range = c.row.is_some();
        if order == range || (order && (c.higher.is_none() || c.lower.is_none())) {
            return Err((
                Some(c.says.clone()),
                format!("check '{}': give row (with min/max, and to for a ratio) or higher and lower", c.says),
            ));
        }
        if c.pairwise && c.higher.as_ref().map(Vec::len) != c.lower.as_ref().map(Vec::len) {
            return Err((
                Some(c.says.clone()),
                format!("check '{}': pairwise needs as many higher as lower rows", c.says),
            ));
        }
        if range && c.min.is_none() && c.max.is_none() {
            return Err((Some(c.says.clone()), format!("check '{}': needs min or max", c.says)));
        }
    }
    Ok(())
}

/// One cell: the measured value (median of the repetitions), their spread, the study's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    pub measured: Option<f64>,
    /// The repetitions' values of the figure (before any ratio).
    pub values: Vec<f64>,
    pub study: Option<Figure>,
    /// Whether a repetition's figure was derived rather than measured (see the figure's
    /// description; e.g. `limit_target` where the generator stopped the search).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub derived: bool,
}

/// One row of the table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TableRow {
    pub name: String,
    pub label: String,
    /// Column name → cell.
    pub cells: BTreeMap<String, Cell>,
    /// "holds", "differs", "not measured" (no figure: a transport the target lacks) or ""
    /// (no check names this row).
    pub verdict: String,
}

/// A check's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    pub says: String,
    /// Whether the rows it names were measured (against a server that lacks a transport,
    /// some are not): a check not measured neither holds nor differs.
    pub measured: bool,
    pub holds: bool,
    /// The measured values against what the study says, and by how much they differ.
    pub detail: String,
    /// The rows it is about.
    pub rows: Vec<String>,
}

/// The table and the verdicts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Evaluation {
    pub rows: Vec<TableRow>,
    pub verdicts: Vec<Verdict>,
}

impl Evaluation {
    /// Whether every check measured holds.
    pub fn holds(&self) -> bool {
        self.verdicts.iter().filter(|v| v.measured).all(|v| v.holds)
    }
}

/// Figures measured: row → figure → one value per repetition. Rows in the order made.
pub type Measured = Vec<(String, BTreeMap<String, Vec<f64>>)>;

/// The table and verdicts of `spec` from measured figures (which tests may fabricate).
pub fn evaluate(spec: &Spec, measured: &Measured) -> Evaluation {
    // The rows in the order the runs made them.
    let order: Vec<&str> = measured.iter().map(|(r, _)| r.as_str()).collect();
    let figure = |row: &str, fig: &str| -> Option<f64> {
        measured.iter().find(|(r, _)| r == row).and_then(|(_, f)| f.get(fig)).and_then(|v| median(v))
    };
    let value = |row: &str, col: &str| -> Option<f64> {
        let c = spec.columns.iter().find(|c| c.name == col)?;
        let v = figure(row, &c.figure)?;
        match (&c.ratio_to, &c.factor_of) {
            (Some(b), _) => figure(b, &c.figure).filter(|&b| b != 0.0).map(|b| v / b),
            (_, Some(b)) => figure(b, &c.figure).filter(|_| v != 0.0).map(|b| b / v),
            _ => Some(v),
        }
    };
    let verdicts: Vec<Verdict> = spec.checks.iter().map(|c| verdict(c, &value)).collect();
    let rows = order
        .iter()
        .map(|&name| {
            let r = spec.rows.iter().find(|r| r.name == name);
            let cells: BTreeMap<String, Cell> = spec
                .columns
                .iter()
                .map(|c| {
                    let values = measured
                        .iter()
                        .find(|(r, _)| r == name)
                        .and_then(|(_, f)| f.get(&c.figure))
                        .cloned()
                        .unwrap_or_default();
                    let study = r.and_then(|r| r.study.get(&c.name)).cloned();
                    let derived = measured
                        .iter()
                        .find(|(r, _)| r == name)
                        .and_then(|(_, f)| f.get(&crate::figures::derived(&c.figure)))
                        .is_some_and(|v| v.iter().any(|&d| d > 0.0));
                    (c.name.clone(), Cell { measured: value(name, &c.name), values, study, derived })
                })
                .collect();
            let mine: Vec<&Verdict> =
                verdicts.iter().filter(|v| v.measured && v.rows.iter().any(|r| r == name)).collect();
            let unmeasured = cells.values().all(|c: &Cell| c.measured.is_none());
            let verdict = match (mine.is_empty(), mine.iter().all(|v| v.holds)) {
                _ if unmeasured => "not measured".to_string(),
                (true, _) => String::new(),
                (false, true) => "holds".to_string(),
                (false, false) => "differs".to_string(),
            };
            TableRow {
                name: name.to_string(),
                label: r.and_then(|r| r.label.clone()).unwrap_or_else(|| name.to_string()),
                cells,
                verdict,
            }
        })
        .collect();
    Evaluation { rows, verdicts }
}

/// A number for a message: 3 significant figures.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 || (v.fract() == 0.0 && a < 1e15) {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn bounds(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("{} to {}", num(a), num(b)),
        (Some(a), None) => format!("at least {}", num(a)),
        (None, Some(b)) => format!("at most {}", num(b)),
        (None, None) => "anything".into(),
    }
}

/// How far `v` lies outside `min..max`: "x.x times above the most" and the like.
fn outside(v: f64, min: Option<f64>, max: Option<f64>) -> String {
    let by = |v: f64, b: f64| {
        if b != 0.0 && v != 0.0 && v.signum() == b.signum() {
            format!("{}x", num((v / b).max(b / v)))
        } else {
            format!("by {}", num((v - b).abs()))
        }
    };
    match (min, max) {
        (Some(a), _) if v < a => format!("below {} {}", num(a), by(v, a)),
        (_, Some(b)) if v > b => format!("above {} {}", num(b), by(v, b)),
        _ => String::new(),
    }
}

fn verdict(c: &Check, value: &dyn Fn(&str, &str) -> Option<f64>) -> Verdict {
    let col = &c.column;
    if let (Some(hi), Some(lo)) = (&c.higher, &c.lower) {
        let mut broken = Vec::new();
        let mut missing = Vec::new();
        let pairs: Vec<(&String, &String)> = if c.pairwise {
            hi.iter().zip(lo).collect()
        } else {
            hi.iter().flat_map(|h| lo.iter().map(move |l| (h, l))).collect()
        };
        {
            for (h, l) in pairs {
                match (value(h, col), value(l, col)) {
                    (Some(a), Some(b)) if a > b => {}
                    (Some(a), Some(b)) => broken.push(format!(
                        "{l} {} not below {h} {} ({})",
                        num(b),
                        num(a),
                        if a > 0.0 { format!("{}x", num(b / a)) } else { "no figure".into() }
                    )),
                    _ => missing.push(format!("{h}/{l}")),
                }
            }
        }
        let rows = hi.iter().chain(lo).cloned().collect();
        let total = if c.pairwise { hi.len().min(lo.len()) } else { hi.len() * lo.len() };
        let measured = missing.len() < total;
        let holds = measured && broken.is_empty();
        let mut detail = if !measured {
            format!("{col}: not measured")
        } else if holds {
            format!("{col}: {} above {}", hi.join(", "), lo.join(", "))
        } else {
            format!("{col}: {}", broken.join("; "))
        };
        if measured && !missing.is_empty() {
            detail.push_str(&format!(" (not measured: {})", missing.join(", ")));
        }
        return Verdict { says: c.says.clone(), measured, holds, detail, rows };
    }
    let row = c.row.clone().unwrap_or_default();
    let mut rows = vec![row.clone()];
    let v = match &c.to {
        Some(to) => {
            rows.push(to.clone());
            match (value(&row, col), value(to, col)) {
                (Some(a), Some(b)) if b != 0.0 => Some(a / b),
                _ => None,
            }
        }
        None => value(&row, col),
    };
    let what = match &c.to {
        Some(to) => format!("{col} of {row} over {to}"),
        None => format!("{col} of {row}"),
    };
    match v {
        None => Verdict {
            says: c.says.clone(),
            measured: false,
            holds: false,
            detail: format!("{what}: not measured"),
            rows,
        },
        Some(v) => {
            let holds = c.min.is_none_or(|m| v >= m) && c.max.is_none_or(|m| v <= m);
            let detail = if holds {
                format!("{what} {} (study: {})", num(v), bounds(c.min, c.max))
            } else {
                format!("{what} {}, study {}: {}", num(v), bounds(c.min, c.max), outside(v, c.min, c.max))
            };
            Verdict { says: c.says.clone(), measured: true, holds, detail, rows }
        }
    }
}
