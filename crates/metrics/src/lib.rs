//! Measurements: what happened to every query, in bounded memory.
//!
//! The load engine records into a [`Recorder`] per worker thread (no locks, no per-query
//! storage but the opt-in trace of a run's first N queries, in a buffer of N made before the
//! run: [`TraceBuf`]); each worker sends one [`SecondSample`] per second to a [`Collector`], which
//! merges them into the per-second series and the totals of a [`RunResult`], the one
//! summary type every printer (text, JSON, later CSV/HTML) reads.
//!
//! Fates: every query the load model issues ends as exactly one of answered (by RCODE),
//! timed out, failed (by [`ErrorKind`]), unsent (its timeout came before it could leave, by
//! [`Unsent`]) or in flight at the end. Responses that match no
//! query in flight are counted apart, as [`Unexpected`].

#[macro_use]
mod counters;
mod collector;
mod connections;
mod histogram;
pub mod host;
mod recorder;
mod result;
mod trace;

pub use collector::{Collected, Collector, Progress};
pub use connections::ConnHistograms;
pub use connections::{
    Close, ConnCounters, ConnectionSummary, DrainEnd, DrainSummary, EarlyData, Handshake, SecondConnections,
};
pub use counters::{Counters, ErrorKind, Unexpected, Unsent, Wait, WireStats};
pub use histogram::{Histogram, SparseHistogram, Tally};
pub use host::{HostInfo, StealClock};
pub use recorder::{
    Departure, GroupAcc, Recorder, SecondSample, SendTimes, TransportWaits, WorkerFinal, WorkerMessage,
};
pub use result::*;
pub use trace::{QueryTrace, TraceBuf, TraceFate, TraceSlot, TracedQuery, MAX_TRACE};

/// Version tag of the results file; bump on any incompatible change (docs/results-schema.md).
pub const SCHEMA: &str = "volley.results/1";
