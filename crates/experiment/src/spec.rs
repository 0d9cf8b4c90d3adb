//! The experiment file (TOML): its runs as a matrix, the figures each run gives, the table,
//! the study's own figures and the checks. Read with serde; every error names FILE:LINE.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ExperimentError;

/// One experiment, as written in its file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Its name (`volley experiment run NAME`).
    pub name: String,
    /// One line: what it measures.
    pub title: String,
    /// The study it reproduces: the seed file and its figure or table.
    pub source: String,
    /// What it does, a paragraph.
    #[serde(default)]
    pub description: String,
    /// The runs: each block a matrix of settings.
    pub runs: Vec<Runs>,
    /// The table's columns.
    pub columns: Vec<Column>,
    /// Labels of rows and the study's figures beside them (the table shows the rows in the
    /// order the runs make them).
    #[serde(default)]
    pub rows: Vec<Row>,
    /// What the study found, each a check on the measured table.
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// One block of runs: the matrix of its list-valued axes, each point a row (repetitions of a
/// point are one row, their figures' median shown).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runs {
    /// The row's name for each point of the matrix, `{axis}` replaced by its value, e.g.
    /// "{transport} {lifetime}" [default: "{transport}"].
    pub row: Option<String>,
    /// What a run measures: "run" (a fixed load: count or duration) or "limit" (the load
    /// raised until the target stops keeping up: the limit is the figure `limit`).
    pub measure: Option<Measure>,
    /// Axis: transports (udp, tcp, dot, doh1, doh2, doh3, doq).
    pub transport: Option<Vec<String>>,
    /// Axis: the client's connection lifetime: "persistent", a duration ("30s", "1s"),
    /// queries ("1q": one query per connection) or an idle timeout ("idle10s": closed after
    /// 10 s without a query).
    pub lifetime: Option<Vec<String>>,
    /// Axis: the server certificate's key type (rsa2048, rsa3072, p256, ed25519).
    pub key: Option<Vec<String>>,
    /// Axis: the link between generator and target ("none", a profile such as "4g", or items
    /// such as "delay=25ms").
    pub link: Option<Vec<String>>,
    /// Axis: connections (UDP sockets) in total; the closed loop keeps `per_connection`
    /// queries in flight on each.
    pub connections: Option<Vec<u64>>,
    /// Axis: TLS session resumption on the client ("fresh", "resumed", "0rtt").
    pub tls: Option<Vec<String>>,
    /// QUIC (DoQ, DoH/3): the client keeps the address validation tokens the server sends
    /// (NEW_TOKEN) and presents one on its next connection, as browsers and stubs do; not an
    /// axis. Default false: the studies' clients kept none, each connection a stranger.
    pub quic_tokens: Option<bool>,
    /// Repetitions of each point (figures: median; min and max in the JSON).
    pub repetitions: Option<u32>,
    /// Queries: "random" (a random label under example.test each) or a name.
    pub queries: Option<String>,
    /// Stop after this many queries...
    pub count: Option<u64>,
    /// ...or after this long.
    pub duration: Option<String>,
    /// Closed loop: queries in flight in total (default: `per_connection` x connections).
    pub concurrency: Option<u64>,
    /// Closed loop: queries in flight per connection when `concurrency` is not given
    /// (default 1).
    pub per_connection: Option<u64>,
    /// Open loop: queries per second.
    pub rate: Option<f64>,
    /// A query without an answer after this long has timed out (default 2s).
    pub timeout: Option<String>,
    /// DoH over HTTP/1.1: requests in flight per connection (pipelining).
    pub h1_pipeline: Option<u32>,
    /// UDP: send again after this long without an answer (a stub resolver), up to `udp_tries`.
    pub udp_retry: Option<String>,
    pub udp_tries: Option<u32>,
    /// At most this many new connections per second across the run (as `volley run
    /// --conn-rate`): thousands of QUIC handshakes opened at a pace the server takes.
    pub conn_rate: Option<f64>,
    /// Generator worker threads (default 1).
    pub threads: Option<usize>,
    /// A figure's setting: answers slower than this count as `slow` (and `held_up` when the
    /// server did not delay them) (default 500ms).
    pub slow_over: Option<String>,
    /// Keep each run's first N queries one by one (order of issue, issue time, latency,
    /// fate: the run's `query_trace`, drawn as a timeline by `volley report`; at most 10000).
    pub trace_queries: Option<u64>,
    /// The embedded responder's settings for these runs.
    pub server: Option<Server>,
    /// Limit search settings (`measure = "limit"`).
    pub limit: Option<Limit>,
    /// Settings that replace the above with `--quick` (the same keys, axes included).
    pub quick: Option<Box<Runs>>,
}

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    Run,
    Limit,
}

/// The embedded responder's settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// Delay rule DURATION:N/M, e.g. "1s:1/25".
    pub delay: Option<String>,
    /// TCP and DoT answer a connection's queries in the order they came.
    pub in_order: Option<bool>,
    /// Session tickets and cache (default on).
    pub tickets: Option<bool>,
    /// Accept 0-RTT (default off).
    pub zero_rtt: Option<bool>,
    /// I/O threads (default 1: the server on one core, as the studies had it).
    pub threads: Option<usize>,
    /// At most this many answers per second (a known capacity).
    pub max_qps: Option<u64>,
    /// The certificate chain served is at least this many bytes (DER; a leaf padded with names
    /// and an intermediate, as `volley serve --cert-chain-bytes`): a large first flight.
    pub cert_chain_bytes: Option<usize>,
    /// QUIC address validation: a Retry for every new address (as `volley serve --retry`).
    pub retry: Option<bool>,
    /// QUIC address validation tokens sent on each connection (NEW_TOKEN frames, as `volley
    /// serve --quic-tokens`; default 2, 0: none sent or accepted).
    pub quic_tokens: Option<u32>,
    /// Connections idle this long are closed (as `volley serve --idle-timeout`; default 10s).
    pub idle_timeout: Option<String>,
    /// Send those tokens but accept none (as `volley serve --quic-tokens-ignored`): a client
    /// presenting one still waits out the anti-amplification limit, as seeds/002 found.
    pub quic_tokens_ignored: Option<bool>,
}

/// The limit search of `measure = "limit"`: the load is simulated clients or a query rate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// First load (queries per second).
    pub start: f64,
    /// Highest load tried.
    pub max: f64,
    /// Each step multiplies the load by this before the first failure (default 2).
    pub factor: Option<f64>,
    /// Bisection steps after it (default 3).
    pub refine: Option<u32>,
    /// Each step's length (default 2s).
    pub step: Option<String>,
    /// The share of queries that must be answered (default 0.99).
    pub min_answered: Option<f64>,
    /// What the load counts: "rate" (queries per second, default) or "clients" (simulated
    /// clients, each with its own connection and `client_rate` queries per second, as DNS
    /// Shotgun counts clients served).
    pub by: Option<String>,
    /// Queries per second of each simulated client (default 1).
    pub client_rate: Option<f64>,
}

/// A column of the table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    /// Its name (checks and the study's figures refer to it).
    pub name: String,
    /// Its heading [default: the name].
    pub label: Option<String>,
    /// The figure of each run it shows (see [`crate::figures::FIGURES`]).
    pub figure: String,
    /// Shown as a ratio to this row's figure (value / baseline).
    pub ratio_to: Option<String>,
    /// Shown as the baseline row's figure over this row's ("x fewer than UDP").
    pub factor_of: Option<String>,
}

/// A row: its label and the study's figures beside it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    pub name: String,
    pub label: Option<String>,
    /// The study's figure per column (a number, or words such as "blocks").
    #[serde(default)]
    pub study: BTreeMap<String, Figure>,
}

/// A figure of the study: a number or words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Figure {
    Number(f64),
    Words(String),
}

/// A check of the study's finding on the measured table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The finding, in words.
    pub says: String,
    /// The column checked.
    pub column: String,
    /// Range check: this row's value lies within `min`..`max`.
    pub row: Option<String>,
    /// Ratio check: `row`'s value over this row's lies within `min`..`max`.
    pub to: Option<String>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Order check: every row of `higher` above every row of `lower`.
    pub higher: Option<Vec<String>>,
    pub lower: Option<Vec<String>>,
    /// Order check in pairs: each row of `higher` above the row of `lower` at its place
    /// (default: above every row of `lower`).
    #[serde(default)]
    pub pairwise: bool,
}

impl Runs {
    /// These settings with `--quick`'s over them.
    pub fn effective(&self, quick: bool) -> Runs {
        let base = Runs { quick: None, ..self.clone() };
        match (&self.quick, quick) {
            (Some(q), true) => {
                let mut b = toml::Value::try_from(&base).expect("serialisable");
                let over = toml::Value::try_from(q.as_ref()).expect("serialisable");
                if let (Some(b), toml::Value::Table(over)) = (b.as_table_mut(), over) {
                    for (k, v) in over {
                        b.insert(k, v);
                    }
                }
                b.try_into().expect("both read as Runs")
            }
            _ => base,
        }
    }
}

/// Reads an experiment file: `file` names it in errors (FILE:LINE).
pub fn parse(file: &str, text: &str) -> Result<Spec, ExperimentError> {
    let spec: Spec = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        let message: Vec<&str> = e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        ExperimentError::Spec { file: file.to_string(), line, message: message.join("; ") }
    })?;
    crate::check::validate(&spec).map_err(|(needle, message)| ExperimentError::Spec {
        file: file.to_string(),
        line: needle.and_then(|n| find_line(text, &n)).unwrap_or(1),
        message,
    })?;
    Ok(spec)
}

/// The 1-based line of byte `at`.
pub fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// The first line holding `needle` (quoted, as TOML writes a string value), else unquoted.
fn find_line(text: &str, needle: &str) -> Option<usize> {
    let quoted = format!("\"{needle}\"");
    text.lines()
        .position(|l| l.contains(&quoted))
        .or_else(|| text.lines().position(|l| l.contains(needle)))
        .map(|i| i + 1)
}
