//! The coordinator's protocol: one JSON object per line, over TCP.

use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};
use volley_metrics::RunResult;

/// The protocol's name and version, sent in every hello.
pub const PROTOCOL: &str = "volley.coordinate/1";

/// The longest line either side reads (a part's results, with their series, fit well inside).
pub const MAX_LINE: u64 = 256 << 20;

/// What a part says first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: String,
    /// volley's version and build: parts of one run must be the same program.
    pub version: String,
    /// A digest of the run's flags, those that say where a part writes or shows its figures
    /// left out: parts of one run must make the same run.
    pub fingerprint: String,
    /// The flags the digest covers, to name the first one that differs.
    pub args: Vec<String>,
    /// Parts the run is split into.
    pub parts: u32,
    /// This part's index, when it has one (`--part`, `JOB_COMPLETION_INDEX`); None: the
    /// coordinator gives one.
    pub index: Option<u32>,
    /// The run's items split between parts (concurrency, clients or a count; 0 for a rate
    /// over a duration): each part's share of the load follows from it.
    pub items: u64,
    /// A split limit search (`volley limit --coordinator`): the search the coordinator runs,
    /// announcing each step to every part. None: one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitSpec>,
}

/// The limit search the parts of a split `volley limit` ask for: the coordinator runs it,
/// giving every part each step's load and one start, and judges each step on the merged
/// figures (docs/limit.md, "Split across machines").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitSpec {
    /// `qps` or `clients`.
    pub by: String,
    pub start: f64,
    pub max: f64,
    /// `xF` or `+N`, as given.
    pub growth: String,
    pub step_duration_ns: u64,
    pub refine: u32,
    pub min_answered: f64,
    /// The latency objective: (quantile 0..1, bound ns).
    pub max_latency: Option<(f64, u64)>,
}

/// A part's live figures for one completed second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PartProgress {
    pub second: u32,
    pub issued: u64,
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    pub failed: u64,
}

/// From a part to the coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToCoordinator {
    Hello(Hello),
    /// A clock probe: the part's Unix time when it sent it.
    Time {
        t1: u64,
    },
    /// Sockets made, connections open: waiting for the start.
    Ready,
    /// A part of a split limit search, its clock measured, waiting for the next step.
    Waiting,
    /// Still running (once a second, from a thread of its own).
    Alive,
    Progress(PartProgress),
    Results(Box<RunResult>),
    /// The part could not run (its error).
    Failed {
        error: String,
    },
}

/// From the coordinator to a part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToPart {
    Welcome {
        index: u32,
        parts: u32,
    },
    Refused {
        reason: String,
    },
    /// The probe's `t1`, the coordinator's Unix time when it read it (`t2`) and when it answered
    /// (`t3`).
    Time {
        t1: u64,
        t2: u64,
        t3: u64,
    },
    /// Start at this Unix time on the coordinator's clock, ns.
    Start {
        unix_ns: u64,
    },
    /// The results came.
    Received,
    /// A split limit search: run the next step, `load` for the whole run (the part takes its
    /// share), then say ready and wait for its start as for a run.
    Step {
        number: u32,
        load: f64,
    },
    /// A split limit search is over: no more steps.
    Done,
}

/// Writes one message as a line.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Reads one message; None at the end of the stream. A line that is not a message is an error
/// (`InvalidData`), never a panic.
pub fn recv<T: for<'de> Deserialize<'de>, R: BufRead>(r: &mut R) -> io::Result<Option<T>> {
    let mut line = Vec::new();
    let n = std::io::Read::take(&mut *r, MAX_LINE).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') && n as u64 >= MAX_LINE {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "message too long"));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_an_error() {
        let mut buf = Vec::new();
        send(&mut buf, &ToPart::Start { unix_ns: 42 }).unwrap();
        send(&mut buf, &ToCoordinator::Time { t1: 7 }).unwrap();
        let mut r = io::BufReader::new(&buf[..]);
        assert_eq!(recv::<ToPart, _>(&mut r).unwrap(), Some(ToPart::Start { unix_ns: 42 }));
        assert!(matches!(recv::<ToCoordinator, _>(&mut r).unwrap(), Some(ToCoordinator::Time { t1: 7 })));
        assert!(recv::<ToPart, _>(&mut r).unwrap().is_none());
        for junk in [&b"{\"start\":\n"[..], b"\xff\xfe\n", b"[]\n", b"{\"nope\":1}\n"] {
            let mut r = io::BufReader::new(junk);
            assert_eq!(recv::<ToPart, _>(&mut r).unwrap_err().kind(), io::ErrorKind::InvalidData);
        }
    }
}
