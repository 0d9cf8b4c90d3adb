//! An opt-in trace of a run's first queries (`--trace-queries N`, an experiment's
//! `trace_queries`): each one's order of issue, issue time, response time and fate, for
//! per-query timelines (seeds/003's figure 1). Bounded: a worker keeps its first N queries in a
//! buffer allocated once, the run the first N of all of them by issue time, and N is at most
//! [`MAX_TRACE`]; past them nothing is recorded, whatever the run's length.

use serde::{Deserialize, Serialize};

use crate::{ErrorKind, Unsent};

/// The most queries a trace holds.
pub const MAX_TRACE: u64 = 10_000;

/// A traced query's fate, as the worker knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceFate {
    /// No fate yet (and none when the run ended: in flight).
    #[default]
    InFlight,
    /// Answered, with this RCODE.
    Answered(u16),
    TimedOut,
    Failed(ErrorKind),
    Unsent(Unsent),
}

/// One traced query in a worker's buffer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceSlot {
    /// Issue time after the run's start, ns.
    pub issued_ns: u64,
    /// The answer's latency (as the run's `latency` counts it), ns; 0 until answered.
    pub latency_ns: u64,
    pub fate: TraceFate,
}

/// A worker's trace: its first `cap` queries, in its order of issue. Memory: `cap` slots,
/// allocated when the trace is made.
#[derive(Debug, Clone, Default)]
pub struct TraceBuf {
    cap: usize,
    slots: Vec<TraceSlot>,
}

impl TraceBuf {
    /// A trace of at most `cap` queries (capped at [`MAX_TRACE`]; 0: no trace).
    pub fn new(cap: u64) -> TraceBuf {
        let cap = cap.min(MAX_TRACE) as usize;
        TraceBuf { cap, slots: Vec::with_capacity(cap) }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A query issued `issued_ns` after the start: its trace id (its slot + 1), or 0 when the
    /// trace is full (or off).
    #[inline]
    pub fn issue(&mut self, issued_ns: u64) -> u32 {
        if self.slots.len() >= self.cap {
            return 0;
        }
        self.slots.push(TraceSlot { issued_ns, ..TraceSlot::default() });
        self.slots.len() as u32
    }

    /// The fate of traced query `id` (0: not traced, nothing done).
    #[inline]
    pub fn end(&mut self, id: u32, latency_ns: Option<u64>, fate: TraceFate) {
        if let Some(s) = id.checked_sub(1).and_then(|i| self.slots.get_mut(i as usize)) {
            s.latency_ns = latency_ns.unwrap_or(0);
            s.fate = fate;
        }
    }

    pub fn slots(&self) -> &[TraceSlot] {
        &self.slots
    }
}

/// The trace in the results (`query_trace`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryTrace {
    /// Queries asked for (`--trace-queries`): the run's first this many are here (fewer when
    /// the run issued fewer).
    pub limit: u64,
    /// In order of issue.
    pub queries: Vec<TracedQuery>,
}

/// One query of the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracedQuery {
    /// Its order of issue in the run, from 0.
    pub index: u64,
    /// When it was issued after the run's start, ns.
    pub issued_ns: u64,
    /// Answered: its latency, counted as the run's `latency` (closed loop: its service time;
    /// a schedule: from its scheduled time), ns.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub latency_ns: Option<u64>,
    /// `answered`, `timed_out`, `failed`, `unsent` or `in_flight` (no fate when the run ended).
    pub fate: String,
    /// Answered: the RCODE's name; failed: the error kind; unsent: why.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
}

impl QueryTrace {
    /// The run's trace from the workers' buffers (each with its worker's number): the first
    /// `limit` queries by issue time (ties by worker, then by each worker's order), numbered
    /// in that order.
    pub fn of_workers(limit: u64, bufs: &[(usize, Vec<TraceSlot>)]) -> QueryTrace {
        let mut all: Vec<(u64, usize, usize, TraceSlot)> = bufs
            .iter()
            .flat_map(|(w, slots)| slots.iter().enumerate().map(move |(i, s)| (s.issued_ns, *w, i, *s)))
            .collect();
        all.sort_by_key(|&(t, w, i, _)| (t, w, i));
        all.truncate(limit.min(MAX_TRACE) as usize);
        let queries = all.into_iter().enumerate().map(|(k, (_, _, _, s))| TracedQuery::of(k as u64, &s)).collect();
        QueryTrace { limit, queries }
    }

    /// Traces of parts of one run (started together): their queries by issue time, the first
    /// `limit` of them, numbered again.
    pub fn merge(traces: &[&QueryTrace]) -> Option<QueryTrace> {
        let limit = traces.iter().map(|t| t.limit).max()?;
        let mut all: Vec<TracedQuery> = traces.iter().flat_map(|t| t.queries.iter().cloned()).collect();
        all.sort_by_key(|q| q.issued_ns);
        all.truncate(limit.min(MAX_TRACE) as usize);
        for (k, q) in all.iter_mut().enumerate() {
            q.index = k as u64;
        }
        Some(QueryTrace { limit, queries: all })
    }
}

impl TracedQuery {
    fn of(index: u64, s: &TraceSlot) -> TracedQuery {
        let (fate, detail, latency_ns) = match s.fate {
            TraceFate::InFlight => ("in_flight", None, None),
            TraceFate::Answered(rc) => {
                ("answered", Some(volley_wire::Rcode(rc).name().into_owned()), Some(s.latency_ns))
            }
            TraceFate::TimedOut => ("timed_out", None, None),
            TraceFate::Failed(k) => ("failed", Some(k.as_str().to_string()), None),
            TraceFate::Unsent(u) => ("unsent", Some(u.as_str().to_string()), None),
        };
        TracedQuery { index, issued_ns: s.issued_ns, latency_ns, fate: fate.to_string(), detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_merged_in_issue_order() {
        let mut a = TraceBuf::new(3);
        let mut b = TraceBuf::new(3);
        let ids: Vec<u32> = [10, 30, 50, 70].iter().map(|&t| a.issue(t)).collect();
        assert_eq!(ids, vec![1, 2, 3, 0], "a full trace takes no more");
        assert_eq!(a.slots().len(), 3);
        a.end(1, Some(5), TraceFate::Answered(0));
        a.end(2, None, TraceFate::TimedOut);
        a.end(0, Some(1), TraceFate::Answered(0));
        let b1 = b.issue(20);
        b.issue(40);
        b.end(b1, None, TraceFate::Failed(ErrorKind::Reset));
        let t = QueryTrace::of_workers(3, &[(0, a.slots().to_vec()), (1, b.slots().to_vec())]);
        let got: Vec<(u64, u64, &str)> = t.queries.iter().map(|q| (q.index, q.issued_ns, q.fate.as_str())).collect();
        assert_eq!(got, vec![(0, 10, "answered"), (1, 20, "failed"), (2, 30, "timed_out")]);
        assert_eq!(t.queries[0].latency_ns, Some(5));
        assert_eq!(t.queries[0].detail.as_deref(), Some("NOERROR"));
        assert_eq!(t.queries[2].latency_ns, None);
        assert!(TraceBuf::new(u64::MAX).cap() as u64 == MAX_TRACE);
        let m = QueryTrace::merge(&[&t, &QueryTrace::of_workers(3, &[(0, vec![TraceSlot::default()])])]).unwrap();
        assert_eq!(m.queries.iter().map(|q| q.index).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(m.queries[0].issued_ns, 0);
        assert_eq!(m.queries[0].fate, "in_flight");
    }
}
