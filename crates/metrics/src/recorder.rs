use std::sync::mpsc::Sender;

use crate::connections::{ConnHistograms, SecondHandshakes};
use crate::{Close, Counters, EarlyData, ErrorKind, Handshake, Histogram, Tally, Unexpected, Unsent, Wait, WireStats};

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
    /// Handshake times of the connections opened in this second, whole and by part (boxed:
    /// four histograms, sent once a second).
    pub handshake: Box<SecondHandshakes>,
}

/// What a worker knows only at its end.
#[derive(Debug, Clone)]
pub struct WorkerFinal {
    pub worker: usize,
    /// Latency of every answer of the run (3 significant figures).
    pub latency: Histogram,
    /// How late each query left against its scheduled time (open loop; 3 significant figures).
    pub lateness: Histogram,
    /// How late the scheduler handed each query to its lane (open loop): the generator's own
    /// lateness, without the time the query then waited for the transport.
    pub schedule_lateness: Histogram,
    /// The transport waits: how long each query that waited for its transport waited (boxed:
    /// a histogram and two tables, sent once).
    pub waits: Box<TransportWaits>,
    /// Service times, the generator's delays and how each query's departure was timed.
    pub send: Box<SendTimes>,
    /// The most queries sent and not yet ended at one moment.
    pub peak_on_wire: u64,
    /// Queries still without a fate when the run ended.
    pub in_flight: u64,
    /// CPU time the worker's thread used.
    pub cpu_ns: u64,
    /// Handshake histograms and negotiated parameters.
    pub conns: ConnHistograms,
    /// Per group of clients (mixtures of profiles and transports), when there are several.
    pub groups: Vec<GroupAcc>,
    /// The trace of the worker's first queries (`--trace-queries`): its capacity (0: off)
    /// and what it holds.
    pub trace_cap: usize,
    pub trace: Vec<crate::TraceSlot>,
}

/// Totals of one group of clients (a profile on a transport) in a mixture.
#[derive(Debug, Clone)]
pub struct GroupAcc {
    pub counters: Counters,
    pub latency: Histogram,
    pub conns: ConnHistograms,
    pub in_flight: u64,
}

impl Default for GroupAcc {
    fn default() -> Self {
        GroupAcc {
            counters: Counters::default(),
            latency: Histogram::new(3),
            conns: ConnHistograms::default(),
            in_flight: 0,
        }
    }
}

impl GroupAcc {
    pub fn merge(&mut self, o: &GroupAcc) {
        self.counters.merge(&o.counters);
        self.latency.merge(&o.latency);
        self.conns.merge(&o.conns);
        self.in_flight += o.in_flight;
    }
}

/// The time queries waited for their transport (a connection being opened, stream credit...):
/// one histogram of each waiting query's wait, and per cause ([`Wait`]) the queries and their
/// total wait.
#[derive(Debug, Clone)]
pub struct TransportWaits {
    pub wait: Histogram,
    pub queries: [u64; Wait::COUNT],
    pub total_ns: [u64; Wait::COUNT],
}

impl Default for TransportWaits {
    fn default() -> Self {
        TransportWaits { wait: Histogram::new(3), queries: [0; Wait::COUNT], total_ns: [0; Wait::COUNT] }
    }
}

impl TransportWaits {
    /// A query waited `ns` for its transport, mostly for `why`.
    #[inline]
    pub fn record(&mut self, why: Wait, ns: u64) {
        self.wait.record(ns);
        self.queries[why as usize] += 1;
        self.total_ns[why as usize] += ns;
    }

    pub fn merge(&mut self, o: &TransportWaits) {
        self.wait.merge(&o.wait);
        for i in 0..Wait::COUNT {
            self.queries[i] += o.queries[i];
            self.total_ns[i] += o.total_ns[i];
        }
    }
}

/// Each query's departure split the time it took in two: the generator's delay (from its
/// issue or schedule to its departure: volley's own doing, and waits its transport imposed)
/// and its service time (from its departure to its answer's arrival: the server's and the
/// network's). Its departure is the kernel's transmit stamp where there is one (`kernel`),
/// volley's clock after the send returned where not (`fallback`).
#[derive(Debug, Clone)]
pub struct SendTimes {
    /// Departure to the answer's arrival, answered queries.
    pub service_time: Histogram,
    /// Issue (closed loop) or schedule (open loop) to departure, every query that left.
    pub generator_delay: Histogram,
    /// Queries that left timed by the kernel, between two kernel stamps (see
    /// [`Departure::Between`]), and by volley's clock.
    pub kernel: u64,
    pub between: u64,
    pub fallback: u64,
}

/// What timed a query's departure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// Its own kernel transmit stamp.
    Kernel,
    /// A time between the kernel's stamps of two datagrams that left in the same system call,
    /// before and after it (`--tx-stamps ends`), by its place between them.
    Between,
    /// volley's clock after the send returned.
    Volley,
}

impl Default for SendTimes {
    fn default() -> Self {
        SendTimes {
            service_time: Histogram::new(3),
            generator_delay: Histogram::new(3),
            kernel: 0,
            between: 0,
            fallback: 0,
        }
    }
}

impl SendTimes {
    pub fn merge(&mut self, o: &SendTimes) {
        self.service_time.merge(&o.service_time);
        self.generator_delay.merge(&o.generator_delay);
        self.kernel += o.kernel;
        self.between += o.between;
        self.fallback += o.fallback;
    }
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
    /// When the next second begins on the run's clock (`start_ns + (second + 1) s`,
    /// saturating): the hot path compares against it instead of dividing at every event.
    next_at: u64,
    cur: Counters,
    // The figures recorded for every query are tallies (see [`Tally`]), made histograms when
    // sent to the collector.
    cur_latency: Tally,
    cur_handshake: SecondHandshakes,
    latency: Tally,
    lateness: Tally,
    schedule_lateness: Tally,
    waits: TransportWaits,
    /// [`SendTimes`]: its histograms as tallies, and its counts.
    service_time: Tally,
    generator_delay: Tally,
    departed_kernel: u64,
    departed_between: u64,
    departed_fallback: u64,
    peak_on_wire: u64,
    conns: ConnHistograms,
    groups: Vec<GroupAcc>,
    trace: crate::TraceBuf,
    out: Sender<WorkerMessage>,
}

impl Recorder {
    /// `start_ns` is the run's start on the engine's monotonic clock, the same for every worker.
    pub fn new(worker: usize, start_ns: u64, out: Sender<WorkerMessage>) -> Recorder {
        Recorder::with_groups(worker, start_ns, out, 1)
    }

    /// A recorder that also keeps totals for each of `groups` groups of clients (when more than one).
    pub fn with_groups(worker: usize, start_ns: u64, out: Sender<WorkerMessage>, groups: usize) -> Recorder {
        Recorder {
            worker,
            start_ns,
            second: 0,
            next_at: start_ns.saturating_add(NS),
            cur: Counters::default(),
            cur_latency: Tally::new(2),
            cur_handshake: SecondHandshakes::default(),
            latency: Tally::new(3),
            lateness: Tally::new(3),
            schedule_lateness: Tally::new(3),
            waits: TransportWaits::default(),
            service_time: Tally::new(3),
            generator_delay: Tally::new(3),
            departed_kernel: 0,
            departed_between: 0,
            departed_fallback: 0,
            peak_on_wire: 0,
            conns: ConnHistograms::default(),
            groups: if groups > 1 { vec![GroupAcc::default(); groups] } else { Vec::new() },
            trace: crate::TraceBuf::default(),
            out,
        }
    }

    /// Sets the run's start, once known: what was counted before it (set-up: connections
    /// opened before the clock started) stays in second 0.
    pub fn set_start(&mut self, start_ns: u64) {
        self.start_ns = start_ns;
        self.next_at = self.boundary();
    }

    /// The start of the second after the current one.
    fn boundary(&self) -> u64 {
        self.start_ns.saturating_add((u64::from(self.second) + 1) * NS)
    }

    /// Keeps a trace of the worker's first `n` queries (at most [`crate::MAX_TRACE`]): the
    /// buffer is allocated here, once.
    pub fn set_trace(&mut self, n: u64) {
        self.trace = crate::TraceBuf::new(n);
    }

    /// A query issued at `now_ns`: its trace id, 0 when it is not traced (see
    /// [`crate::TraceBuf::issue`]).
    #[inline]
    pub fn trace_issue(&mut self, now_ns: u64) -> u32 {
        if self.trace.cap() == 0 {
            return 0;
        }
        self.trace.issue(now_ns.saturating_sub(self.start_ns))
    }

    /// The fate of traced query `id` (0: not traced).
    #[inline]
    pub fn trace_end(&mut self, id: u32, latency_ns: Option<u64>, fate: crate::TraceFate) {
        if id != 0 {
            self.trace.end(id, latency_ns, fate);
        }
    }

    /// Moves to the second containing `now_ns`, flushing the finished one. Call it at least
    /// once a second even when idle so that the live view and the series advance.
    #[inline]
    pub fn tick(&mut self, now_ns: u64) {
        if now_ns < self.next_at {
            return;
        }
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
            latency: self.cur_latency.histogram(),
            handshake: Box::new(self.cur_handshake.clone()),
        };
        self.cur_latency.reset();
        self.cur_handshake.reset();
        self.second = next;
        self.next_at = self.boundary();
        // The collector outlives the workers; a send error means the run is being torn down.
        let _ = self.out.send(WorkerMessage::Second(sample));
    }

    /// Applies a count to the current second and to group `g`'s totals.
    #[inline]
    fn count(&mut self, g: u16, f: impl Fn(&mut Counters)) {
        f(&mut self.cur);
        if let Some(acc) = self.groups.get_mut(g as usize) {
            f(&mut acc.counters);
        }
    }

    /// A query was issued by the load model (its fate comes later).
    #[inline]
    pub fn issued(&mut self, now_ns: u64, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| c.issued += 1);
    }

    /// A query left the generator for the first time.
    #[inline]
    pub fn sent(&mut self, now_ns: u64, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| c.sent += 1);
    }

    /// Records how late a query left against its scheduled time.
    #[inline]
    pub fn lateness(&mut self, late_ns: u64) {
        self.lateness.record(late_ns);
    }

    /// Records how late the scheduler handed a query to its lane against its scheduled time.
    #[inline]
    pub fn schedule_lateness(&mut self, late_ns: u64) {
        self.schedule_lateness.record(late_ns);
    }

    /// A query waited `ns` for its transport before it left, mostly for `why`.
    #[inline]
    pub fn transport_wait(&mut self, why: Wait, ns: u64) {
        self.waits.record(why, ns);
    }

    /// A query's departure is known: `delay_ns` after its issue or schedule, timed by the
    /// kernel (`kernel`) or by volley's clock. Once per query that left.
    #[inline]
    pub fn departed(&mut self, delay_ns: u64, by: Departure) {
        self.generator_delay.record(delay_ns);
        match by {
            Departure::Kernel => self.departed_kernel += 1,
            Departure::Between => self.departed_between += 1,
            Departure::Volley => self.departed_fallback += 1,
        }
    }

    /// An answered query's service time: from its departure to its answer's arrival.
    #[inline]
    pub fn service_time(&mut self, ns: u64) {
        self.service_time.record(ns);
    }

    /// The most queries on the wire (sent, not yet ended) at one moment of the run.
    pub fn peak_on_wire(&mut self, n: u64) {
        self.peak_on_wire = self.peak_on_wire.max(n);
    }

    /// Counts the bytes of a DNS message written to the transport (the query left).
    #[inline]
    pub fn wrote(&mut self, bytes: usize, g: u16) {
        self.count(g, |c| c.bytes_out += bytes as u64);
    }

    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn answered(&mut self, now_ns: u64, latency_ns: u64, rcode: u16, truncated: bool, bytes: usize, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| {
            c.answered += 1;
            c.rcodes[(rcode & 0xF) as usize] += 1;
            c.truncated += truncated as u64;
            c.bytes_in += bytes as u64;
        });
        self.cur_latency.record(latency_ns);
        self.latency.record(latency_ns);
        if let Some(acc) = self.groups.get_mut(g as usize) {
            acc.latency.record(latency_ns);
        }
    }

    /// A truncated answer (TC=1) that is not its query's fate: the query is asked again over
    /// TCP. Counted in `truncated` and `bytes_in`.
    pub fn truncated_answer(&mut self, now_ns: u64, bytes: usize, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| {
            c.truncated += 1;
            c.bytes_in += bytes as u64;
        });
    }

    #[inline]
    pub fn timed_out(&mut self, now_ns: u64, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| c.timed_out += 1);
    }

    /// A query's timeout came before it could leave: its fate, `why` it never left.
    #[inline]
    pub fn unsent(&mut self, now_ns: u64, why: Unsent, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| {
            c.unsent += 1;
            c.unsent_reasons[why as usize] += 1;
        });
    }

    #[inline]
    pub fn failed(&mut self, now_ns: u64, kind: ErrorKind, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| {
            c.failed += 1;
            c.errors[kind as usize] += 1;
        });
    }

    #[inline]
    pub fn unexpected(&mut self, now_ns: u64, kind: Unexpected, bytes: usize) {
        self.tick(now_ns);
        self.cur.unexpected[kind as usize] += 1;
        self.cur.bytes_in += bytes as u64;
    }

    /// Bytes and packets a transport put on and took off the wire (reported per connection
    /// when it closes, per batch of datagrams for UDP).
    #[inline]
    pub fn wire(&mut self, w: &WireStats, g: u16) {
        self.count(g, |c| c.wire.add(w));
    }

    /// A connection came up.
    pub fn conn_opened(&mut self, now_ns: u64, h: &Handshake, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| {
            let c = &mut c.conns;
            c.opened += 1;
            c.resumed += h.resumed as u64;
            c.tokens += h.token as u64;
            c.early_offered += (h.early_data != EarlyData::NotOffered) as u64;
            c.early_accepted += (h.early_data == EarlyData::Accepted) as u64;
        });
        self.conns.record(h);
        self.cur_handshake.record(h);
        if let Some(acc) = self.groups.get_mut(g as usize) {
            acc.conns.record(h);
        }
    }

    /// A connection attempt failed.
    pub fn conn_failed(&mut self, now_ns: u64, kind: ErrorKind, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| {
            c.conns.failed += 1;
            c.conns.errors[kind as usize] += 1;
        });
    }

    /// `n` connection attempts of group `g` were still in progress (no handshake done, none
    /// failed) when the run ended: their fate.
    pub fn conns_in_progress(&mut self, now_ns: u64, n: u64, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| c.conns.in_progress += n);
    }

    /// A query goes out again: the `n`th time it is sent again (1 for its first resend).
    pub fn resent(&mut self, now_ns: u64, n: u32, g: u16) {
        self.tick(now_ns);
        // `again[k]` counts the queries sent again at least k + 1 times: each query once per
        // place, the last place included (its further resends are not counted again).
        let k = n.max(1) as usize - 1;
        if k < crate::counters::AGAIN_MAX {
            self.count(g, |c| c.again[k] += 1);
        }
    }

    /// A connection stopped taking queries with some still outstanding, and drains them.
    pub fn conn_draining(&mut self, now_ns: u64, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| c.conns.drains += 1);
    }

    /// A draining connection's drain ended (its close is reported apart).
    pub fn drain_ended(&mut self, now_ns: u64, how: crate::DrainEnd, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| c.conns.drain_ends[how as usize] += 1);
    }

    /// A connection ended.
    pub fn conn_closed(&mut self, now_ns: u64, how: Close, g: u16) {
        self.tick(now_ns);
        self.count(g, |c| c.conns.closed[how as usize] += 1);
    }

    /// Flushes the last second and reports the worker's end. `in_flight_by_group`: queries
    /// without a fate per group (ignored with one group).
    pub fn finish(mut self, now_ns: u64, in_flight: u64, in_flight_by_group: &[u64], cpu_ns: u64) {
        for (acc, n) in self.groups.iter_mut().zip(in_flight_by_group) {
            acc.in_flight = *n;
        }
        self.tick(now_ns);
        let next = self.second + 1;
        self.flush(next);
        let _ = self.out.send(WorkerMessage::Final(WorkerFinal {
            worker: self.worker,
            latency: self.latency.histogram(),
            lateness: self.lateness.histogram(),
            schedule_lateness: self.schedule_lateness.histogram(),
            waits: Box::new(self.waits),
            send: Box::new(SendTimes {
                service_time: self.service_time.histogram(),
                generator_delay: self.generator_delay.histogram(),
                kernel: self.departed_kernel,
                between: self.departed_between,
                fallback: self.departed_fallback,
            }),
            peak_on_wire: self.peak_on_wire,
            in_flight,
            cpu_ns,
            conns: self.conns,
            groups: self.groups,
            trace_cap: self.trace.cap(),
            trace: self.trace.slots().to_vec(),
        }));
    }
}
