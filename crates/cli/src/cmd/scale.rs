//! A part of a split run (`--part`, `--parts`, `--start-at`, `--coordinator`): which part,
//! when it starts, and its coordinator (docs/scale-out.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley_coordinate::{CoordError, Hello, LimitSpec, PartLink, PartProgress, PROTOCOL};
use volley_engine::{Load, Part, Plan, StartAt};
use volley_metrics::{Progress, RunResult};

use super::run::RunArgs;
use crate::error::{CliError, CliResult};

/// The part's index from the environment an orchestrator sets: a Kubernetes Indexed Job's
/// `JOB_COMPLETION_INDEX`, or `VOLLEY_PART` (a Swarm task's slot, less 1).
fn env_index() -> CliResult<Option<u32>> {
    for var in ["JOB_COMPLETION_INDEX", "VOLLEY_PART"] {
        if let Ok(v) = std::env::var(var) {
            let v = v.trim();
            if v.is_empty() {
                continue;
            }
            return v
                .parse::<u32>()
                .map(Some)
                .map_err(|_| CliError::usage(format!("invalid {var} '{v}': expected a part index from 0")));
        }
    }
    Ok(None)
}

/// The part the flags name, when its index is known without a coordinator: `--part I/N`, or
/// `--parts N` with an index in the environment. None: the whole run, or a part whose
/// coordinator gives it its index.
pub fn static_part(a: &RunArgs) -> CliResult<Option<Part>> {
    if let Some(p) = &a.part {
        let part = p.parse::<Part>().map_err(|e| CliError::usage(format!("--part: {e}")))?;
        return match a.parts {
            Some(n) if n != part.count => {
                Err(CliError::usage(format!("--part {part} and --parts {n} (or VOLLEY_PARTS) disagree on the parts")))
            }
            _ => Ok(Some(part)),
        };
    }
    let Some(n) = a.parts else { return Ok(None) };
    if n == 0 {
        return Err(CliError::usage("invalid --parts 0: expected at least 1"));
    }
    match env_index()? {
        Some(i) => Part::new(i, n).map(Some).map_err(|e| CliError::usage(format!("--parts {n}: {e}"))),
        None if a.coordinator.is_some() => Ok(None),
        None => Err(CliError::usage(format!(
            "--parts {n}: which part is this? give --part I/{n}, set JOB_COMPLETION_INDEX or VOLLEY_PART, \
             or join a --coordinator that gives it"
        ))),
    }
}

/// The results file of a part: `{part}` in the path becomes its index.
pub fn output_path(path: &std::path::Path, part: Part) -> std::path::PathBuf {
    match path.to_str() {
        Some(s) if s.contains("{part}") => s.replace("{part}", &part.index.to_string()).into(),
        _ => path.to_path_buf(),
    }
}

/// `--start-at`: RFC 3339 (with a zone: `Z` or `+HH:MM`) or Unix milliseconds; Unix ns.
pub fn parse_start_at(s: &str) -> Result<u64, String> {
    let bad = || format!("invalid --start-at '{s}': expected RFC 3339 (2026-11-26T03:00:00Z) or Unix milliseconds");
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().ok().and_then(|ms| ms.checked_mul(1_000_000)).ok_or_else(bad);
    }
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let t = s.get(r).ok_or_else(bad)?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse::<i64>().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (y, mo, d, h, mi, se) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return Err(bad());
    }
    let mut rest = &s[19..];
    let mut frac_ns = 0i64;
    if let Some(r) = rest.strip_prefix('.') {
        let digits = r.bytes().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err(bad());
        }
        let f = &r[..digits.min(9)];
        frac_ns = f.parse::<i64>().map_err(|_| bad())? * 10i64.pow(9 - f.len() as u32);
        rest = &r[digits..];
    }
    let zone_s = match rest {
        "Z" | "z" => 0,
        z if z.len() == 6 && (z.starts_with('+') || z.starts_with('-')) && &z[3..4] == ":" => {
            let hh: i64 = z[1..3].parse().map_err(|_| bad())?;
            let mm: i64 = z[4..6].parse().map_err(|_| bad())?;
            let sign = if z.starts_with('-') { -1 } else { 1 };
            sign * (hh * 3600 + mm * 60)
        }
        _ => return Err(bad()),
    };
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
    let (yy, m) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - zone_s;
    if secs < 0 {
        return Err(bad());
    }
    Ok(secs as u64 * 1_000_000_000 + frac_ns as u64)
}

/// The run's items split between parts, by which each part's share of the load is known:
/// clients, else concurrency, else a count; 0 for a rate over a duration (an even share).
pub fn items(plan: &Plan) -> u64 {
    match &plan.load {
        Load::Clients(c) => c.count,
        Load::Closed { concurrency } => *concurrency,
        Load::Open { .. } => plan.count.unwrap_or(0),
    }
}

/// The flags every part of one run must share, as `name: value` fields: the run's Debug form
/// without those that say where this part writes or shows its figures, or which part it is.
fn run_fields(a: &RunArgs) -> Vec<String> {
    let mut b = a.clone();
    b.output = None;
    b.part = None;
    b.parts = None;
    b.coordinator = None;
    b.coordinator_wait = Duration::ZERO;
    b.start_at = None;
    b.metrics_file = None;
    b.quiet = false;
    b.target_pid = Vec::new();
    b.progress = super::run::ProgressMode::Never;
    b.format = super::run::Format::Text;
    let text = format!("{b:?}");
    let inner = text.find('{').map_or(text.as_str(), |i| &text[i + 1..]);
    inner.trim_end_matches('}').split(", ").map(|f| f.trim().to_string()).filter(|f| !f.is_empty()).collect()
}

/// FNV-1a, 64 bits, as hex: the fingerprint of a run's flags.
fn fingerprint(fields: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in fields.join("\n").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A part joined to its coordinator.
pub struct Coordinated {
    link: Arc<Mutex<PartLink>>,
    start: Arc<Mutex<Option<u64>>>,
    wait: Duration,
    part: Part,
}

/// Sets the plan's part and start from the flags, joining the coordinator when one is named.
pub fn prepare(a: &RunArgs, plan: &mut Plan) -> CliResult<Option<Coordinated>> {
    if let Some(t) = &a.start_at {
        plan.start = Some(StartAt::at(parse_start_at(t).map_err(CliError::usage)?));
    }
    let Some(c) = join(a, items(plan), None)? else { return Ok(None) };
    c.arm(plan);
    Ok(Some(c))
}

/// Joins the coordinator the flags name (None: no `--coordinator`). `items`: the run's items
/// split between parts (its share of the load follows); `limit`: the search a part of a split
/// `volley limit` asks the coordinator to run (it is part of the run's fingerprint).
pub fn join(a: &RunArgs, items: u64, limit: Option<LimitSpec>) -> CliResult<Option<Coordinated>> {
    let Some(addr) = &a.coordinator else { return Ok(None) };
    let known = static_part(a)?;
    let parts = match (known, a.parts) {
        (Some(p), _) => p.count,
        (None, Some(n)) => n,
        (None, None) => {
            return Err(CliError::usage("--coordinator: say how many parts the run has (--parts N or --part I/N)"))
        }
    };
    let mut fields = run_fields(a);
    if let Some(l) = &limit {
        fields.push(format!("limit: {l:?}"));
    }
    let hello = Hello {
        protocol: PROTOCOL.to_string(),
        version: crate::cli::version().to_string(),
        fingerprint: fingerprint(&fields),
        args: fields,
        parts,
        index: known.map(|p| p.index),
        items,
        limit,
    };
    let link = PartLink::join(addr, &hello, a.coordinator_wait).map_err(|e| match e {
        CoordError::Refused(r) => CliError::usage(format!("refused by the coordinator at {addr}: {r}")),
        e => CliError::usage(format!("--coordinator: {e}")),
    })?;
    let part = Part::new(link.index, link.parts).map_err(|e| CliError::usage(format!("--coordinator: {e}")))?;
    eprintln!(
        "volley: part {part} joined the coordinator at {addr}: clock offset {:+.3} ms (round trip {:.3} ms)",
        link.offset_ns as f64 / 1e6,
        link.rtt_ns as f64 / 1e6
    );
    Ok(Some(Coordinated {
        link: Arc::new(Mutex::new(link)),
        start: Arc::new(Mutex::new(None)),
        wait: a.coordinator_wait,
        part,
    }))
}

impl Coordinated {
    /// Makes `plan` this part's, started when the coordinator says: the plan's setup done, it
    /// says ready and waits for the start.
    pub fn arm(&self, plan: &mut Plan) {
        plan.part = self.part;
        let (l, s, wait) = (self.link.clone(), self.start.clone(), self.wait);
        plan.start = Some(StartAt::new(move || {
            let mut link = l.lock().map_err(|_| "coordinator link poisoned".to_string())?;
            let at = link.ready(wait).map_err(|e| e.to_string())?;
            let given = (at as i128 + i128::from(link.offset_ns)).max(0) as u64;
            *s.lock().map_err(|_| "poisoned".to_string())? = Some(given);
            Ok(at)
        }));
    }

    /// A part of a split limit search: the next step's number and load (the whole run's), or
    /// None once the search is over.
    pub fn next_step(&self) -> CliResult<Option<(u32, f64)>> {
        let mut l = self.link.lock().map_err(|_| CliError::failure("coordinator link poisoned"))?;
        let addr = l.addr().to_string();
        l.next_step(self.wait).map_err(|e| CliError::failure(format!("part {}: coordinator at {addr}: {e}", self.part)))
    }

    /// Says this part could not run.
    pub fn failed(&self, error: &str) {
        if let Ok(l) = self.link.lock() {
            l.failed(error);
        }
    }

    pub fn part(&self) -> Part {
        self.part
    }

    /// Reports a completed second (never holds the run up: a lost coordinator is ignored).
    pub fn progress(&self, p: &Progress) {
        let r = &p.row;
        if let Ok(l) = self.link.try_lock() {
            l.progress(PartProgress {
                second: r.second,
                issued: r.issued,
                sent: r.sent,
                answered: r.answered,
                timed_out: r.timed_out,
                failed: r.failed,
            });
        }
    }

    /// Records the clock offset, and the start on the coordinator's clock (the series of all
    /// parts then align to the second in the merge).
    pub fn annotate(&self, r: &mut RunResult) {
        let Ok(l) = self.link.lock() else { return };
        if let Some(p) = r.part.as_mut() {
            if let Some(s) = p.start.as_mut() {
                s.clock_offset_ns = Some(l.offset_ns);
                s.rtt_ns = Some(l.rtt_ns);
            }
        }
        if let Some(given) = self.start.lock().ok().and_then(|s| *s) {
            r.started_unix_ms = given / 1_000_000;
            r.started_at = volley_engine::clock::rfc3339(r.started_unix_ms);
        }
    }

    /// Hands the results to the coordinator; says so on standard error when it cannot.
    pub fn hand_in(self, r: &RunResult, file: Option<&std::path::Path>) {
        if let Err(e) = self.hand_in_step(r) {
            let kept = file.map_or("not kept: no -o file".to_string(), |f| format!("they are in {}", f.display()));
            eprintln!("volley: warning: part {}: results not handed in ({e}); {kept}", self.part);
        }
    }

    /// Hands one run's (or one step's) results to the coordinator and waits for its receipt.
    pub fn hand_in_step(&self, r: &RunResult) -> Result<(), CoordError> {
        let mut l = self.link.lock().map_err(|_| CoordError::Lost("lock".into()))?;
        l.results(r, self.wait.min(Duration::from_secs(60)))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_start_at;

    #[test]
    fn start_times() {
        assert_eq!(parse_start_at("1764126000000"), Ok(1_764_126_000_000_000_000));
        assert_eq!(parse_start_at("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_start_at("2026-11-26T03:00:00Z"), Ok(1_795_662_000_000_000_000));
        assert_eq!(parse_start_at("2026-11-26T03:00:00.25Z"), Ok(1_795_662_000_250_000_000));
        assert_eq!(parse_start_at("2026-11-26T04:00:00+01:00"), Ok(1_795_662_000_000_000_000));
        assert_eq!(parse_start_at("2000-02-29T00:00:00Z"), Ok(951_782_400_000_000_000));
        for bad in ["", "soon", "2026-13-01T00:00:00Z", "2026-11-26T03:00:00", "2026-11-26T03:00:00.Z", "12a"] {
            assert!(parse_start_at(bad).is_err(), "{bad}");
        }
    }
}
