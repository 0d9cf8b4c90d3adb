use std::sync::mpsc::Sender;

use crate::connections::ConnHistograms;
use crate::{Close, Counters, EarlyData, ErrorKind, Handshake, Histogram, Unexpected};

const NS: u64 = 1_000_000_000;

/// One worker's events of one second, sent to the [`crate::Collector`].
#[derive(Debug, Clone)]
pub struct SecondSample {
    pub worker: usize,
    pub second: u32,
    /// Every second before this one is complete for this worker.
    pub watermark: u32,
    pub counters: Counters,
    /// Latency of the answers of this second (2 significant figures).
    pub latency: Histogram,
}

/// What a worker knows only at its end.
#[derive(Debug, Clone)]
pub struct WorkerFinal {
    pub worker: usize,
    /// Latency of every answer of the run (3 significant figures).
    pub latency: Histogram,
    /// How late each query left against its scheduled time (open loop; 3 significant figures).
    pub lateness: Histogram,
    /// Queries still without a fate when the run ended.
    pub in_flight: u64,
    /// CPU time the worker's thread used.
    pub cpu_ns: u64,
    /// Handshake histograms and negotiated parameters.
    pub conns: ConnHistograms,
}

/// A message from a worker to the collector.
#[derive(Debug, Clone)]
pub enum WorkerMessage {
    Second(SecondSample),
    Final(WorkerFinal),
}

/// Per-worker recording on the hot path: counters and histograms of the current second,
/// flushed to the collector when the second changes. Memory is fixed, whatever the run length.
pub struct Recorder {
    worker: usize,
    start_ns: u64,
    second: u32,
    cur: Counters,
    cur_latency: Histogram,
    latency: Histogram,
    lateness: Histogram,
    conns: ConnHistograms,
    out: Sender<WorkerMessage>,
}

impl Recorder {
    /// `start_ns` is the run's start on the engine's monotonic clock, the same for every worker.
    pub fn new(worker: usize, start_ns: u64, out: Sender<WorkerMessage>) -> Recorder {
        Recorder {
            worker,
            start_ns,
            second: 0,
            cur: Counters::default(),
            cur_latency: Histogram::new(2),
            latency: Histogram::new(3),
            lateness: Histogram::new(3),
            conns: ConnHistograms::default(),
            out,
        }
    }

    /// Moves to the second containing `now_ns`, flushing the finished one. Call it at least
    /// once a second even when idle so that the live view and the series advance.
    #[inline]
    pub fn tick(&mut self, now_ns: u64) {
        let s = (now_ns.saturating_sub(self.start_ns) / NS) as u32;
        if s > self.second {
            self.flush(s);
        }
    }

    fn flush(&mut self, next: u32) {
        let sample = SecondSample {
            worker: self.worker,
            second: self.second,
            watermark: next,
            counters: std::mem::take(&mut self.cur),
            latency: self.cur_latency.clone(),
        };
        self.cur_latency.reset();
        self.second = next;
        // The collector outlives the workers; a send error means the run is being torn down.
        let _ = self.out.send(WorkerMessage::Second(sample));
    }

    /// A query was issued by the load model (its fate comes later).
    #[inline]
    pub fn sent(&mut self, now_ns: u64) {
        self.tick(now_ns);
        self.cur.sent += 1;
    }

    /// Records how late a query left against its scheduled time.
    #[inline]
    pub fn lateness(&mut self, late_ns: u64) {
        self.lateness.record(late_ns);
    }

    /// Counts the bytes of a DNS message written to the transport (the query left).
    #[inline]
    pub fn wrote(&mut self, bytes: usize) {
        self.cur.bytes_out += bytes as u64;
    }

    #[inline]
    pub fn answered(&mut self, now_ns: u64, latency_ns: u64, rcode: u16, truncated: bool, bytes: usize) {
        self.tick(now_ns);
        self.cur.answered += 1;
        self.cur.rcodes[(rcode & 0xF) as usize] += 1;
        self.cur.truncated += truncated as u64;
        self.cur.bytes_in += bytes as u64;
        self.cur_latency.record(latency_ns);
        self.latency.record(latency_ns);
    }

    #[inline]
    pub fn timed_out(&mut self, now_ns: u64) {
        self.tick(now_ns);
        self.cur.timed_out += 1;
    }

    #[inline]
    pub fn failed(&mut self, now_ns: u64, kind: ErrorKind) {
        self.tick(now_ns);
        self.cur.failed += 1;
        self.cur.errors[kind as usize] += 1;
    }

    #[inline]
    pub fn unexpected(&mut self, now_ns: u64, kind: Unexpected, bytes: usize) {
        self.tick(now_ns);
        self.cur.unexpected[kind as usize] += 1;
        self.cur.bytes_in += bytes as u64;
    }

    /// A connection came up.
    pub fn conn_opened(&mut self, now_ns: u64, h: &Handshake) {
        self.tick(now_ns);
        let c = &mut self.cur.conns;
        c.opened += 1;
        c.resumed += h.resumed as u64;
        c.early_offered += (h.early_data != EarlyData::NotOffered) as u64;
        c.early_accepted += (h.early_data == EarlyData::Accepted) as u64;
        self.conns.record(h);
    }

    /// A connection attempt failed.
    pub fn conn_failed(&mut self, now_ns: u64, kind: ErrorKind) {
        self.tick(now_ns);
        self.cur.conns.failed += 1;
        self.cur.conns.errors[kind as usize] += 1;
    }

    /// A connection ended.
    pub fn conn_closed(&mut self, now_ns: u64, how: Close) {
        self.tick(now_ns);
        self.cur.conns.closed[how as usize] += 1;
    }

    /// Flushes the last second and reports the worker's end.
    pub fn finish(mut self, now_ns: u64, in_flight: u64, cpu_ns: u64) {
        self.tick(now_ns);
        let next = self.second + 1;
        self.flush(next);
        let _ = self.out.send(WorkerMessage::Final(WorkerFinal {
            worker: self.worker,
            latency: self.latency,
            lateness: self.lateness,
            in_flight,
            cpu_ns,
            conns: self.conns,
        }));
    }
}
