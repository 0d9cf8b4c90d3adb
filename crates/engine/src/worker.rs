//! One worker thread: a single-threaded runtime that issues queries by the load model,
//! hands them to its lanes, ends them by timeout, and records every fate.
//!
//! Lanes belong to groups (one group for a plain run; one per profile and transport in a
//! mixture of simulated clients). Each lane's driver reaches the worker through a [`LaneView`]
//! of its own, so connection events are counted per group, and followed per lane for the end
//! of the run, without the transports knowing.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::ops::Range;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use volley_metrics::{Close, Departure, ErrorKind, Handshake, Recorder, TraceFate, Unexpected, Unsent, Wait};
use volley_transport::{spawn_lane, ConnPolicy, Exchange, Lane, LaneOptions, Target, Token};
use volley_wire::{question_key, Header, Rcode};

use crate::clients::{Arrivals, Rng};
use crate::clock::{now_ns, thread_cpu_ns};
use crate::slab::{Entry, Slab};
use crate::source::{Cursor, QuerySet};
use crate::timer::PreciseTimer;

/// Where a lane sends: a target and its settings.
#[derive(Debug, Clone)]
pub(crate) struct LaneSpec {
    pub target: Target,
    pub lane: LaneOptions,
}

/// One group of lanes as the worker runs it.
#[derive(Debug, Clone)]
pub(crate) struct GroupRt {
    pub spec: LaneSpec,
    /// TCP for truncated UDP answers (stub resolvers), on connections of its own.
    pub fallback: Option<LaneSpec>,
    /// Lanes each client holds (clients mode, connection-based transports).
    pub connections: u32,
    pub connect_at_start: bool,
    /// Clients mode: each client's queries per second (not used in a replay).
    pub rate: f64,
    /// Clients mode: the policy a client's connections switch to while its own rate is above
    /// the rate given (the profile's busy policy and light_rate); `spec.lane.conn` otherwise.
    pub busy: Option<(ConnPolicy, f64)>,
    /// UDP: a query without an answer is sent again (`--udp-retry`, the stub profile).
    pub retry: Option<crate::UdpRetry>,
}

/// A worker's part of a replay: the captured clients, and for each of its clients which one
/// it replays and how much later it starts.
pub(crate) type ReplayShare = (Arc<crate::clients::Replay>, Vec<(u32, u64)>);

/// This worker's share of the load.
#[derive(Debug, Clone)]
pub(crate) struct Share {
    pub index: usize,
    /// Closed loop: queries kept in flight. None for open loop.
    pub concurrency: Option<u64>,
    /// The global indices of this worker's arrivals (its part and its place among the part's
    /// workers: [`crate::part::Part::stripe`]): which queries it sends, and in open loop when.
    pub stripe: crate::part::Stripe,
    /// Open loop: the run's interval between arrivals, ns (arrival k is due k of them after
    /// the start).
    pub schedule: Option<f64>,
    /// Open loop and clients: queries due within this many ns of a wake-up leave together.
    pub batch_window_ns: u64,
    /// Most queries to issue.
    pub quota: u64,
    /// Plain runs: lanes of the one group. Clients: UDP sockets shared by a UDP group's clients.
    pub lanes: usize,
    /// Clients mode: the group of each of this worker's clients.
    pub clients: Vec<u16>,
    /// Clients mode: each of this worker's clients' index in the whole run (its random choices
    /// and its queries are keyed by it).
    pub client_ids: Vec<u64>,
    /// Clients mode: the clients of the whole run.
    pub client_count: u64,
    /// Clients mode: how each client spaces its queries.
    pub arrivals: Arrivals,
    /// Replay: the captured clients, and for each of this worker's clients which one it
    /// replays and how much later it starts.
    pub replay: Option<ReplayShare>,
}

struct LaneSlot {
    lane: Rc<Lane>,
    group: u16,
    /// Index into the worker's lane specs.
    spec: u16,
    started: Cell<bool>,
    /// Lanes that take truncated answers' retries (stub): a range in `lanes`.
    fallback: Option<(u32, u32)>,
    /// Connections of the lane that came up and whose close is not reported yet.
    open: Cell<u32>,
    /// Its first connection attempt came up or failed (the run's set-up waits for this).
    settled: Cell<bool>,
    /// The source address the lane took from `--bind`'s range when it started.
    local: Cell<Option<std::net::IpAddr>>,
    /// A lane whose source address this one takes (a UDP socket's TCP fallback: the same
    /// client asks again over TCP from the same address).
    source_of: Option<u32>,
}

impl LaneSlot {
    fn new(group: u16, spec: u16, policy: ConnPolicy) -> LaneSlot {
        LaneSlot {
            lane: Rc::new(Lane::with_policy(policy)),
            group,
            spec,
            started: Cell::new(false),
            fallback: None,
            open: Cell::new(0),
            settled: Cell::new(false),
            local: Cell::new(None),
            source_of: None,
        }
    }
}

/// A simulated client: its lanes, and how fast it has been sending (for profiles whose
/// connections behave differently under light and busy traffic).
struct ClientRt {
    lanes: Range<u32>,
    group: u16,
    /// When its last query was due, ns (0: none yet).
    last: Cell<u64>,
    /// Its mean gap between queries, ns, smoothed over about its last four gaps (0: unknown).
    gap: Cell<f64>,
    /// Its connections follow the group's busy policy.
    busy: Cell<bool>,
}

/// How far a client's rate must move past its profile's `light_rate` before its connections
/// change policy (so that a client sending close to it does not flip at every query).
const REGIME_MARGIN: f64 = 1.2;

impl ClientRt {
    /// Notes a query due at `due`; when the client's rate crossed its profile's light rate,
    /// its connections take the other policy (a browser: short connections in sequence above
    /// about one query per second). Returns the event to count, if it changed.
    fn note_query(&self, due: u64, g: &GroupRt, lanes: &[LaneSlot]) -> Option<&'static str> {
        let (busy, light_rate) = g.busy?;
        let last = self.last.replace(due);
        if last == 0 || due <= last {
            return None;
        }
        let gap = (due - last) as f64;
        let mean = match self.gap.get() {
            m if m > 0.0 => 0.75 * m + 0.25 * gap,
            _ => gap,
        };
        self.gap.set(mean);
        let rate = 1e9 / mean;
        let now_busy =
            if self.busy.get() { rate * REGIME_MARGIN >= light_rate } else { rate > light_rate * REGIME_MARGIN };
        if now_busy == self.busy.get() {
            return None;
        }
        self.busy.set(now_busy);
        let policy = if now_busy { busy } else { g.spec.lane.conn };
        for l in &lanes[self.lanes.start as usize..self.lanes.end as usize] {
            l.lane.set_policy(policy);
        }
        Some(if now_busy { "profile_busy" } else { "profile_light" })
    }
}

/// Everything a worker shares with its lanes and its tasks.
pub(crate) struct Worker {
    inner: RefCell<Inner>,
    lanes: Vec<LaneSlot>,
    /// Plain runs: the lanes queries are issued to, the first of `lanes` (the rest are their
    /// TCP lanes for truncated answers, `--tc-fallback`).
    pool: u32,
    specs: Vec<LaneSpec>,
    clients: Vec<ClientRt>,
    queries: QuerySet,
    timeout_ns: u64,
    closed_loop: bool,
    /// The groups' settings (clients mode: rates and profile policies).
    groups: Vec<GroupRt>,
    /// The worker itself, for the drivers spawned lazily.
    this: RefCell<std::rc::Weak<Worker>>,
    /// Connection reports so far (attempts, closes, wire counts): the end of the run waits
    /// while they come.
    reports: Cell<u64>,
}

struct Inner {
    slab: Slab,
    /// (deadline, token) in issue order: deadlines only grow, so the front expires first.
    deadlines: VecDeque<(u64, Token)>,
    /// Per group with a UDP retry: (when its query is sent again, token), in the order they
    /// were noted: each is noted when its query left (or went out again) plus the group's
    /// constant delay, so these times only grow too, and one sweep serves both.
    retries: Vec<VecDeque<(u64, Token)>>,
    rec: Option<Recorder>,
    cursor: Cursor,
    issued: u64,
    quota: u64,
    issuing: bool,
    finished: bool,
    rr: usize,
    events: BTreeMap<String, u64>,
    late: Late,
    /// Queries that left and have no fate yet, and the most there were at once.
    on_wire: u64,
    peak_on_wire: u64,
}

/// Queries that left later than [`LATE_NS`] after their schedule, and of those the ones
/// whose lane had been waiting for a `--conn-rate` slot since they were due.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Late {
    pub sends: u64,
    pub behind_cap: u64,
}

/// How late a send must be to count in [`Late`] (and the p99 send lateness above which a run
/// warns).
pub(crate) const LATE_NS: u64 = 1_000_000;

impl Inner {
    fn rec(&mut self) -> &mut Recorder {
        self.rec.as_mut().expect("recorder present until the worker finishes")
    }
}

/// What a worker thread returns when it ends.
#[derive(Default)]
pub(crate) struct WorkerEnd {
    pub events: BTreeMap<String, u64>,
    pub late: Late,
    /// How long after the run's start this worker woke to begin, ns.
    pub woke_late_ns: u64,
}

/// A query to issue: which query of the set (and seed), or the next one.
#[derive(Clone, Copy)]
enum What {
    Next,
    /// This query of the set with this seed, counted as the next of the worker's quota (a
    /// simulated client's query, keyed by the client).
    Keyed(u32, u64),
    /// This query of the set (a replayed query).
    Exact(u32, u64),
}

impl Worker {
    /// Starts a lane's driver the first time it is needed.
    fn ensure_started(&self, i: usize) {
        let slot = &self.lanes[i];
        if slot.started.replace(true) {
            return;
        }
        if let Some(w) = self.this.borrow().upgrade() {
            let spec = &self.specs[slot.spec as usize];
            let view = Rc::new(LaneView { w, g: slot.group, lane: i });
            match &spec.lane.sources {
                // The lane's source address: the next of the range, or its UDP socket's.
                Some(sources) => {
                    let paired = slot.source_of.and_then(|j| self.lanes[j as usize].local.get());
                    let ip = paired.unwrap_or_else(|| sources.take());
                    slot.local.set(Some(ip));
                    let opts = LaneOptions { local: Some(ip), sources: None, ..spec.lane.clone() };
                    spawn_lane(&spec.target, slot.lane.clone(), view, &opts);
                }
                None => spawn_lane(&spec.target, slot.lane.clone(), view, &spec.lane),
            }
        }
    }

    /// Issues one query on a lane of `range` (the first with room when `first_fit`, else in turn).
    fn issue(&self, inn: &mut Inner, what: What, scheduled: u64, now: u64, range: Range<u32>, first_fit: bool) {
        if inn.finished || (matches!(what, What::Next | What::Keyed(..)) && !inn.issuing) {
            return;
        }
        if matches!(what, What::Next | What::Keyed(..)) {
            inn.issued += 1;
            if inn.issued >= inn.quota {
                inn.issuing = false;
            }
        }
        let (lo, n) = (range.start as usize, range.len());
        let g = self.lanes.get(lo).map_or(0, |s| s.group);
        inn.rec().issued(now, g);
        let trace = inn.rec().trace_issue(now);
        // Lanes that can send soon first (not backing off after a failure), then any with room.
        let pick = |i: usize, strict: bool| {
            let l = &self.lanes[lo + i].lane;
            l.has_room() && (!strict || (l.ready() && (!first_fit || l.accepting())))
        };
        let found = if first_fit {
            (0..n).find(|&i| pick(i, true)).or_else(|| (0..n).find(|&i| pick(i, false)))
        } else {
            // In turn from `rr`, wrapping round (no division per query).
            let rr = if inn.rr < n { inn.rr } else { inn.rr % n.max(1) };
            let order = (rr..n).chain(0..rr);
            order.clone().find(|&i| pick(i, true)).or_else(|| order.clone().find(|&i| pick(i, false)))
        };
        let Some(i) = found else {
            inn.rec().failed(now, ErrorKind::Overload, g);
            inn.rec().trace_end(trace, None, TraceFate::Failed(ErrorKind::Overload));
            return;
        };
        if !first_fit {
            inn.rr = if i + 1 < n { i + 1 } else { 0 };
        }
        let lane = lo + i;
        let (query, seed) = match what {
            What::Next => inn.cursor.take(),
            What::Exact(q, s) | What::Keyed(q, s) => (q, s),
        };
        let key = self.queries.fixed_key(query).unwrap_or(0);
        // Latency counts from the schedule, or from the hand-over when a query leaves ahead of it
        // (batch window): never from later than the schedule, never from before the send.
        let origin = scheduled.min(now);
        if !self.closed_loop {
            // The scheduler's own lateness: what the query waits for afterwards is the transport's.
            inn.rec().schedule_lateness(now.saturating_sub(scheduled));
        }
        let lane_mark = self.lanes[lane].lane.waited().0;
        let deadline = now + self.timeout_ns;
        let t = inn.slab.insert(Entry {
            lane: lane as u32,
            query,
            seed,
            scheduled: origin,
            key,
            lane_mark,
            deadline,
            trace,
            ..Default::default()
        });
        inn.deadlines.push_back((deadline, t));
        self.ensure_started(lane);
        self.lanes[lane].lane.push(t);
    }

    /// Simulated client `c` has a query due at `due`: its connections' policy follows its rate
    /// (see [`ClientRt::note_query`]); returns its lanes.
    fn client_query(&self, inn: &mut Inner, c: u32, due: u64) -> Range<u32> {
        let client = &self.clients[c as usize];
        if let Some(event) = client.note_query(due, &self.groups[client.group as usize], &self.lanes) {
            count_event(&mut inn.events, event);
        }
        client.lanes.clone()
    }

    /// Plain runs: a query on any of the worker's lanes, in turn.
    fn issue_any(&self, inn: &mut Inner, scheduled: u64, now: u64) {
        self.issue(inn, What::Next, scheduled, now, 0..self.pool, false);
    }

    /// Closed loop: a query ended, so another starts.
    #[inline]
    fn refill(&self, inn: &mut Inner, now: u64) {
        if self.closed_loop {
            self.issue_any(inn, now, now);
        }
    }

    /// Ends every query whose deadline passed: timed out if it left, else unsent (it waited
    /// for the transport the whole time; the server never saw it).
    fn expire(&self, now: u64) {
        let mut inn = self.inner.borrow_mut();
        while let Some(&(deadline, t)) = inn.deadlines.front() {
            if deadline > now {
                break;
            }
            inn.deadlines.pop_front();
            if let Some(e) = inn.slab.remove(t) {
                Self::off_wire(&mut inn, &e);
                Self::untimed(&mut inn, &e);
                let slot = &self.lanes[e.lane as usize];
                slot.lane.release();
                let fate = match e.again {
                    // Its last connection ended without its answer, and it had not left again:
                    // the server's close is its fate, not a silence.
                    Some(kind) => {
                        inn.rec().failed(now, kind, slot.group);
                        TraceFate::Failed(kind)
                    }
                    None if e.left => {
                        inn.rec().timed_out(now, slot.group);
                        TraceFate::TimedOut
                    }
                    None => {
                        let why = self.unsent_why(&e);
                        inn.rec().unsent(now, why, slot.group);
                        TraceFate::Unsent(why)
                    }
                };
                inn.rec().trace_end(e.trace, None, fate);
                self.refill(&mut inn, now);
            }
        }
        self.retransmit(&mut inn, now);
    }

    /// Why query `e`, which never left, was still waiting when its timeout came: a query
    /// handed to a QUIC connection waits for a stream (MAX_STREAMS), as does one an HTTP/2
    /// connection has not taken (its streams all in use); one still in its lane without a
    /// connection up waits for a connection (UDP sockets need none); else it is queued.
    fn unsent_why(&self, e: &Entry) -> Unsent {
        use volley_transport::{HttpVersion, Scheme};
        let slot = &self.lanes[e.lane as usize];
        let spec = &self.specs[slot.spec as usize];
        let scheme = spec.target.scheme;
        let http = matches!(scheme, Scheme::Https | Scheme::H3).then(|| spec.lane.http_for(scheme));
        let quic = scheme == Scheme::Quic || http == Some(HttpVersion::Http3);
        if e.handed {
            if quic {
                Unsent::NoStreamCredit
            } else {
                Unsent::Queued
            }
        } else if scheme != Scheme::Udp && slot.open.get() == 0 {
            Unsent::NoConnection
        } else if http == Some(HttpVersion::Http2) {
            Unsent::NoStreamCredit
        } else {
            Unsent::Queued
        }
    }

    fn encode(&self, token: Token, id: u16, out: &mut Vec<u8>) -> bool {
        let mut inn = self.inner.borrow_mut();
        let Some(e) = inn.slab.get_mut(token) else { return false };
        e.handed = true;
        e.id = id;
        self.queries.write(e.query, e.seed, id, out);
        if e.key == 0 {
            e.key = question_key(out).unwrap_or(1);
        }
        true
    }

    fn sent(&self, token: Token, bytes: usize, now: u64, g: u16) {
        let mut guard = self.inner.borrow_mut();
        let inn = &mut *guard;
        let mut wait = None;
        let mut scheduled = None;
        let mut retried = None;
        if let Some(e) = inn.slab.get_mut(token) {
            if !e.on_wire {
                e.on_wire = true;
                inn.on_wire += 1;
                inn.peak_on_wire = inn.peak_on_wire.max(inn.on_wire);
            }
            e.again = None;
            // Its departure, until the kernel's stamp of it comes. A query sent again (a UDP
            // retry, a resend, a TCP fallback) keeps its first: its service time, as its
            // latency, counts from its first send (a lost first send is the network's or the
            // server's doing).
            if !e.left {
                e.sent_at = now;
                e.wire_at = 0;
            }
            // A UDP retry counts when it leaves: an answer to an earlier send may end the
            // query while its retry still waits in its lane, and then it is never sent.
            if e.left && std::mem::take(&mut e.retx) {
                retried = Some(e.resent);
            }
            // A query counts as sent, with its lateness and wait, when it first leaves (not
            // when it is sent again).
            if !e.left {
                e.left = true;
                let lane = &self.lanes[e.lane as usize];
                if let Some(r) = self.udp_retry_of(lane) {
                    let due = now + r.after.as_nanos() as u64;
                    if due < e.deadline {
                        inn.retries[lane.group as usize].push_back((due, token));
                    }
                }
                scheduled = Some((e.scheduled, e.lane));
                let (mark, last) = self.lanes[e.lane as usize].lane.waited();
                let in_lane = mark.saturating_sub(e.lane_mark);
                let ns = in_lane + e.waited_ns;
                if ns > 0 {
                    let why = if e.waited_ns >= in_lane { e.waited_for } else { last };
                    wait = Some((why.unwrap_or(Wait::Connecting), ns));
                }
            }
        }
        if let Some(n) = retried {
            count_event(&mut inn.events, UDP_RETRY_EVENT);
            inn.rec().resent(now, u32::from(n), g);
        }
        let closed = self.closed_loop;
        let rec = inn.rec();
        rec.wrote(bytes, g);
        if scheduled.is_some() {
            rec.sent(now, g);
        }
        if let Some((why, ns)) = wait {
            rec.transport_wait(why, ns);
        }
        if let (false, Some((s, lane))) = (closed, scheduled) {
            let late = now.saturating_sub(s);
            rec.lateness(late);
            if late > LATE_NS {
                inn.late.sends += 1;
                inn.late.behind_cap += self.behind_cap(lane as usize, s, now) as u64;
            }
        }
    }

    /// The UDP retry of the queries on `lane`: its group's, when the lane is one of the group's
    /// UDP sockets (not a stub's TCP lane).
    fn udp_retry_of(&self, lane: &LaneSlot) -> Option<crate::UdpRetry> {
        let r = self.groups.get(lane.group as usize)?.retry?;
        (self.specs[lane.spec as usize].target.scheme == volley_transport::Scheme::Udp).then_some(r)
    }

    /// Sends again every UDP query whose retry is due and that is still on the wire without
    /// its answer: back to the head of its lane (it keeps its place in the lane's load, its
    /// deadline and its schedule: its latency counts from its first send), under a new DNS
    /// ID that its driver gives it; an answer to any of its sends ends it. Counted as a send
    /// again (`totals.tries`) and as event [`UDP_RETRY_EVENT`].
    fn retransmit(&self, inn: &mut Inner, now: u64) {
        for g in 0..inn.retries.len() {
            while let Some(&(due, t)) = inn.retries[g].front() {
                if due > now {
                    break;
                }
                inn.retries[g].pop_front();
                let Some(e) = inn.slab.get_mut(t) else { continue };
                let slot = &self.lanes[e.lane as usize];
                let Some(r) = self.udp_retry_of(slot) else { continue };
                // Still in its lane from the last time (its socket's buffer full): not twice.
                if !e.handed || u32::from(e.resent) + 1 >= r.tries {
                    continue;
                }
                e.resent = e.resent.saturating_add(1);
                e.handed = false;
                let (n, deadline) = (e.resent, e.deadline);
                let next = now + r.after.as_nanos() as u64;
                if u32::from(n) + 1 < r.tries && next < deadline {
                    inn.retries[g].push_back((next, t));
                }
                // Counted when it leaves (`sent`): it may be answered before.
                e.retx = true;
                slot.lane.requeue(&[t]);
            }
        }
    }

    /// The kernel's transmit stamp of query `token`'s first transmission: its departure (the
    /// stamps of later ones are not taken). The generator's delay is recorded with it.
    fn stamped(&self, token: Token, at: u64, by: Departure) {
        let mut guard = self.inner.borrow_mut();
        let inn = &mut *guard;
        if inn.finished {
            return;
        }
        let Some(e) = inn.slab.get_mut(token) else { return };
        if !e.left || e.wire_at != 0 {
            return;
        }
        // Within the query's life (the clocks' conversion errs by a few ns; the caller keeps
        // it at or before now). A stream transport's stamp comes after `sent`, which it
        // reports as it frames the query.
        let at = at.max(e.scheduled);
        e.wire_at = at;
        if !std::mem::replace(&mut e.timed, true) {
            let delay = at - e.scheduled;
            inn.rec().departed(delay, by);
        }
    }

    /// A query that left ends without a kernel stamp of its departure: its departure is
    /// volley's own send time.
    #[inline]
    fn untimed(inn: &mut Inner, e: &Entry) {
        if e.left && !e.timed {
            inn.rec().departed(e.sent_at.saturating_sub(e.scheduled), Departure::Volley);
        }
    }

    /// When query `e` first left: the kernel's stamp, else volley's clock.
    #[inline]
    fn departure(e: &Entry) -> u64 {
        match (e.wire_at, e.left) {
            (0, true) => e.sent_at,
            (0, false) => e.scheduled,
            (w, _) => w,
        }
    }

    /// How many times a query of `lane` may be sent again (`--resend`).
    fn resend_cap(&self, lane: u32) -> u32 {
        self.lanes.get(lane as usize).and_then(|s| self.specs.get(s.spec as usize)).map_or(0, |s| s.lane.resend)
    }

    /// Query `token` waited `ns` for its transport after it left its lane (a QUIC stream).
    fn waited(&self, token: Token, why: Wait, ns: u64) {
        if let Some(e) = self.inner.borrow_mut().slab.get_mut(token) {
            e.waited_ns += ns;
            e.waited_for = Some(why);
        }
    }

    /// A query leaves the wire (its fate, or back to its lane to be sent again).
    #[inline]
    fn off_wire(inn: &mut Inner, e: &Entry) {
        if e.on_wire {
            inn.on_wire = inn.on_wire.saturating_sub(1);
        }
    }

    /// Whether a query due at `scheduled` and sent at `now` on `lane` waited for the
    /// `--conn-rate` cap: its connection got its slot only after the query was due.
    fn behind_cap(&self, lane: usize, scheduled: u64, now: u64) -> bool {
        let slot = self.lanes.get(lane).and_then(|s| s.lane.slot_waited());
        slot.is_some_and(|t| now.saturating_sub(t.elapsed().as_nanos() as u64) > scheduled)
    }

    /// A connection ended without `token`'s answer, which the server provably did not
    /// process: the query goes out again, as often as its own deadline allows (it is still
    /// live) and `--resend` permits (its latency still counts from its first schedule); past
    /// the cap it fails like any other.
    fn resend(&self, token: Token, kind: ErrorKind, now: u64) -> bool {
        {
            let mut guard = self.inner.borrow_mut();
            let inn = &mut *guard;
            if inn.finished {
                return false;
            }
            let (n, lane) = match inn.slab.get_mut(token) {
                None => return false,
                // It never left: its next connection sends it for the first time.
                Some(e) if !e.left => {
                    e.handed = false;
                    return true;
                }
                Some(e) if u32::from(e.resent) < self.resend_cap(e.lane) => {
                    e.resent = e.resent.saturating_add(1);
                    e.again = Some(kind);
                    if std::mem::take(&mut e.on_wire) {
                        inn.on_wire = inn.on_wire.saturating_sub(1);
                    }
                    (e.resent, e.lane)
                }
                Some(_) => (0, 0),
            };
            if n > 0 {
                count_event(&mut inn.events, &format!("{RESENT_EVENT}{kind}"));
                let g = self.lanes[lane as usize].group;
                inn.rec().resent(now, u32::from(n), g);
                return true;
            }
        }
        self.failed(token, kind, now);
        false
    }

    /// An answer to `token` came on lane `lane`.
    fn response(&self, token: Token, msg: &[u8], now: u64, lane: usize) {
        let mut inn = self.inner.borrow_mut();
        if inn.finished {
            return;
        }
        if inn.slab.get_mut(token).is_some_and(|e| e.lane as usize != lane) {
            // An answer to a UDP send of a query that went on over TCP after a truncated
            // answer: it was answered already, late.
            inn.rec().unexpected(now, Unexpected::Late, msg.len());
            return;
        }
        if self.over_tcp(&mut inn, token, msg, now) {
            return;
        }
        let Some(e) = inn.slab.remove(token) else {
            inn.rec().unexpected(now, Unexpected::Late, msg.len());
            return;
        };
        Self::off_wire(&mut inn, &e);
        let slot = &self.lanes[e.lane as usize];
        slot.lane.release();
        slot.lane.answered();
        let g = slot.group;
        Self::untimed(&mut inn, &e);
        let service = now.saturating_sub(Self::departure(&e));
        // Closed loop: the latency is the service time (the generator's own delay apart); a
        // schedule's: the response time from the schedule (coordinated omission corrected).
        let latency = if self.closed_loop { service } else { now.saturating_sub(e.scheduled) };
        if e.resent > 0
            && msg.len() >= 2
            && u16::from_be_bytes([msg[0], msg[1]]) != e.id
            && self.udp_retry_of(slot).is_some()
        {
            // Sent again too soon: the answer to an earlier send was on its way.
            count_event(&mut inn.events, UDP_EARLIER_EVENT);
        }
        let rec = inn.rec();
        let (fate, truncated) = match Header::parse(msg) {
            // Not a response (QR clear), on a stream that carries only this query's answer.
            Ok(h) if !h.is_response() => (TraceFate::Failed(ErrorKind::Malformed), false),
            Ok(h) => match question_key(msg) {
                Ok(k) if k == e.key => (TraceFate::Answered(h.rcode().0), h.truncated()),
                Ok(_) => (TraceFate::Failed(ErrorKind::Mismatch), false),
                // Error responses (FORMERR, NOTIMP...) may carry no question: still an answer.
                Err(_) if h.qdcount == 0 && h.rcode() != Rcode::NOERROR => {
                    (TraceFate::Answered(h.rcode().0), h.truncated())
                }
                Err(_) => (TraceFate::Failed(ErrorKind::Malformed), false),
            },
            Err(_) => (TraceFate::Failed(ErrorKind::Malformed), false),
        };
        match fate {
            TraceFate::Answered(rcode) => {
                rec.answered(now, latency, rcode, truncated, msg.len(), g);
                rec.service_time(service);
                rec.trace_end(e.trace, Some(latency), fate);
            }
            TraceFate::Failed(kind) => {
                rec.failed(now, kind, g);
                rec.trace_end(e.trace, None, fate);
            }
            _ => {}
        }
        self.refill(&mut inn, now);
    }

    /// A truncated UDP answer (TC=1) to its own question, on a lane that asks such questions
    /// again over TCP (`--tc-fallback`, the `stub` profile): the query moves to the lane's TCP
    /// lane, where it goes out again (a send again: `totals.tries`, event
    /// `tcp_retries_after_truncation`) with its deadline and its schedule (its latency counts
    /// from its first UDP send), and its fate is what comes over TCP. The truncated answer
    /// counts in `truncated` and `bytes_in`, not as a fate. False: not such an answer.
    fn over_tcp(&self, inn: &mut Inner, token: Token, msg: &[u8], now: u64) -> bool {
        let Some(e) = inn.slab.get_mut(token) else { return false };
        let from = &self.lanes[e.lane as usize];
        let Some((lo, _)) = from.fallback else { return false };
        let truncated = matches!(Header::parse(msg), Ok(h) if h.is_response() && h.truncated());
        if !truncated || question_key(msg).ok() != Some(e.key) || !self.lanes[lo as usize].lane.has_room() {
            return false;
        }
        from.lane.release();
        from.lane.answered();
        let to = &self.lanes[lo as usize];
        e.lane = lo;
        e.handed = false;
        e.lane_mark = to.lane.waited().0;
        e.resent = e.resent.saturating_add(1);
        let n = e.resent;
        if std::mem::take(&mut e.on_wire) {
            inn.on_wire = inn.on_wire.saturating_sub(1);
        }
        count_event(&mut inn.events, TC_RETRY_EVENT);
        let rec = inn.rec();
        rec.truncated_answer(now, msg.len(), from.group);
        rec.resent(now, u32::from(n), from.group);
        self.ensure_started(lo as usize);
        to.lane.push(token);
        true
    }

    fn failed(&self, token: Token, kind: ErrorKind, now: u64) {
        let mut inn = self.inner.borrow_mut();
        if inn.finished {
            return;
        }
        if let Some(e) = inn.slab.remove(token) {
            Self::off_wire(&mut inn, &e);
            Self::untimed(&mut inn, &e);
            let slot = &self.lanes[e.lane as usize];
            slot.lane.release();
            inn.rec().failed(now, kind, slot.group);
            inn.rec().trace_end(e.trace, None, TraceFate::Failed(kind));
            self.refill(&mut inn, now);
        }
    }

    /// Records a transport event; connection events still count while the run shuts its
    /// connections down (fates no longer do).
    fn with_rec(&self, f: impl FnOnce(&mut Recorder)) {
        let mut inn = self.inner.borrow_mut();
        if let Some(r) = inn.rec.as_mut() {
            f(r);
        }
    }

    /// The group of every live query, counted (for queries in flight at the end).
    fn in_flight_by_group(&self, inn: &Inner) -> Vec<u64> {
        let mut v = vec![0u64; self.groups.len()];
        for e in inn.slab.iter_live() {
            if let Some(s) = self.lanes.get(e.lane as usize) {
                v[s.group as usize] += 1;
            }
        }
        v
    }
}

/// What one lane sees of the worker: the engine's [`Exchange`], with the lane's group attached
/// to what it reports. It also follows the lane's connections (attempts in progress, connections
/// open), for the end of the run.
pub(crate) struct LaneView {
    w: Rc<Worker>,
    g: u16,
    lane: usize,
}

impl LaneView {
    /// The lane's slot, as a connection report comes.
    fn slot(&self) -> &LaneSlot {
        self.w.reports.set(self.w.reports.get() + 1);
        &self.w.lanes[self.lane]
    }
}

impl Exchange for LaneView {
    #[inline]
    fn now(&self) -> u64 {
        now_ns()
    }

    #[inline]
    fn encode(&self, token: Token, id: u16, out: &mut Vec<u8>) -> bool {
        self.w.encode(token, id, out)
    }

    #[inline]
    fn sent(&self, token: Token, bytes: usize, now: u64) {
        self.w.sent(token, bytes, now, self.g)
    }

    #[inline]
    fn stamped(&self, token: Token, at: u64, by: Departure) {
        self.w.stamped(token, at, by)
    }

    fn waited(&self, token: Token, why: Wait, ns: u64) {
        self.w.waited(token, why, ns)
    }

    #[inline]
    fn response(&self, token: Token, msg: &[u8], now: u64) {
        self.w.response(token, msg, now, self.lane)
    }

    #[inline]
    fn failed(&self, token: Token, kind: ErrorKind, now: u64) {
        self.w.failed(token, kind, now)
    }

    fn resend(&self, token: Token, kind: ErrorKind, now: u64) -> bool {
        self.w.resend(token, kind, now)
    }

    #[inline]
    fn unexpected(&self, kind: Unexpected, bytes: usize, now: u64) {
        if !self.w.inner.borrow().finished {
            self.w.with_rec(|r| r.unexpected(now, kind, bytes));
        }
    }

    #[inline]
    fn is_live(&self, token: Token) -> bool {
        let inn = self.w.inner.borrow();
        !inn.finished && inn.slab.contains(token)
    }

    fn deadline(&self, token: Token) -> Option<u64> {
        let mut inn = self.w.inner.borrow_mut();
        if inn.finished {
            return None;
        }
        inn.slab.get_mut(token).map(|e| e.deadline)
    }

    fn conn_opened(&self, h: &Handshake, now: u64) {
        let s = self.slot();
        s.settled.set(true);
        s.lane.settle_attempt();
        s.open.set(s.open.get() + 1);
        self.w.with_rec(|r| r.conn_opened(now, h, self.g));
    }

    fn conn_failed(&self, kind: ErrorKind, now: u64) {
        let s = self.slot();
        s.settled.set(true);
        s.lane.settle_attempt();
        self.w.with_rec(|r| r.conn_failed(now, kind, self.g));
    }

    fn conn_draining(&self, now: u64) {
        self.slot();
        self.w.with_rec(|r| r.conn_draining(now, self.g));
    }

    fn drain_ended(&self, how: volley_metrics::DrainEnd, now: u64) {
        self.slot();
        self.w.with_rec(|r| r.drain_ended(now, how, self.g));
    }

    fn conn_closed(&self, how: Close, now: u64) {
        let s = self.slot();
        s.open.set(s.open.get().saturating_sub(1));
        self.w.with_rec(|r| r.conn_closed(now, how, self.g));
    }

    fn wire(&self, w: &volley_metrics::WireStats) {
        self.slot();
        self.w.with_rec(|r| r.wire(w, self.g));
    }

    fn event(&self, what: &str) {
        count_event(&mut self.w.inner.borrow_mut().events, what);
    }

    fn events(&self, what: &str, n: u64) {
        if n > 0 {
            count_events(&mut self.w.inner.borrow_mut().events, what, n);
        }
    }
}

/// The prefix of the event that counts queries sent again after their connection ended
/// without their answer, by the error kind it ended with: `resent_closed`.
pub const RESENT_EVENT: &str = "resent_";

/// The event that counts UDP queries sent again after `--udp-retry`'s delay without an answer.
pub const UDP_RETRY_EVENT: &str = "udp_retries";

/// The event that counts answers to a UDP send that was not a query's latest: the query was
/// sent again while its answer was on its way (the retry delay was shorter than the wait).
pub const UDP_EARLIER_EVENT: &str = "udp_answers_to_earlier_send";

/// The event that counts truncated UDP answers asked again over TCP.
pub const TC_RETRY_EVENT: &str = "tcp_retries_after_truncation";

/// Adds one to event `what` (a new name costs an allocation; a known one none).
fn count_event(events: &mut BTreeMap<String, u64>, what: &str) {
    count_events(events, what, 1);
}

/// Adds `n` to event `what`.
fn count_events(events: &mut BTreeMap<String, u64>, what: &str, n: u64) {
    match events.get_mut(what) {
        Some(c) => *c += n,
        None => {
            events.insert(what.to_string(), n);
        }
    }
}

/// Settings shared by all workers of a run.
#[derive(Clone)]
pub(crate) struct Common {
    pub groups: Vec<GroupRt>,
    pub queries: QuerySet,
    pub timeout: Duration,
    /// Where the workers say they are ready and learn when the run's clock starts.
    pub gate: Arc<StartGate>,
    /// Stop issuing this long after the start.
    pub duration_ns: Option<u64>,
    pub interrupt: Arc<AtomicBool>,
    pub out: std::sync::mpsc::Sender<volley_metrics::WorkerMessage>,
    /// Trace each worker's first this many queries (0: none).
    pub trace_queries: u64,
}

/// The start of a run: each worker says it is ready (sockets made, the connections the run
/// asks for at its start up or failed), then waits for the start time the engine sets once
/// all are. Looked at every millisecond: nothing may wake a worker's runtime from another
/// thread (see [`own_descriptor_table`]).
#[derive(Debug, Default)]
pub(crate) struct StartGate {
    ready: AtomicUsize,
    start_ns: AtomicU64,
}

impl StartGate {
    pub fn ready(&self) -> usize {
        self.ready.load(Ordering::Acquire)
    }

    /// Sets the start for every worker.
    pub fn open(&self, start_ns: u64) {
        self.start_ns.store(start_ns.max(1), Ordering::Release);
    }

    /// Says this worker is ready, then waits for the start.
    async fn start(&self) -> u64 {
        self.ready.fetch_add(1, Ordering::AcqRel);
        loop {
            match self.start_ns.load(Ordering::Acquire) {
                0 => tokio::time::sleep(Duration::from_millis(1)).await,
                s => return s,
            }
        }
    }
}

/// Gives the calling thread a descriptor table of its own (`unshare(CLONE_FILES)`): the
/// open-files limit then bounds the descriptors of each worker, not of the whole process, so
/// that T workers may hold T times as many connections. A worker's sockets, timers and
/// runtime are made and closed on its own thread, and nothing of it crosses to another (the
/// other threads' descriptors it inherits are copies, closed when it ends). False where the
/// kernel refuses (the thread then shares the process's table, as before).
fn own_descriptor_table() -> bool {
    // SAFETY: unshare with CLONE_FILES only copies this thread's descriptor table.
    unsafe { libc::unshare(libc::CLONE_FILES) == 0 }
}

/// Runs one worker to its end on the calling thread.
pub(crate) fn run_worker(share: Share, common: Common) -> WorkerEnd {
    let own = own_descriptor_table();
    // `--xdp`: this worker's AF_XDP socket binds to the queue of its number.
    volley_transport::udp::xdp::set_worker(share.index);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(_) => {
            // Without a runtime the worker cannot run: report an empty end so the collector completes.
            let rec = Recorder::new(share.index, now_ns(), common.out.clone());
            rec.finish(now_ns(), 0, &[], thread_cpu_ns());
            let events = BTreeMap::from([("worker_runtime_failed".to_string(), 1)]);
            return WorkerEnd { events, ..WorkerEnd::default() };
        }
    };
    let local = tokio::task::LocalSet::new();
    let linger = common.timeout * 2;
    let mut end = local.block_on(&rt, async move {
        let end = worker_main(share, common).await;
        // `--xdp`: this worker's socket goes on reading its queue for the other workers' lanes.
        volley_transport::udp::xdp::linger(linger).await;
        end
    });
    if !own {
        count_event(&mut end.events, "descriptor_table_shared");
    }
    end
}

/// Whether threads here may have descriptor tables of their own (a sandbox's system-call
/// filter may refuse `unshare`): asked on a thread made for the purpose.
pub fn threads_own_descriptor_tables() -> bool {
    std::thread::spawn(own_descriptor_table).join().unwrap_or(false)
}

/// Lays out the worker's lanes: the plain run's pool, or each client's connections. Each
/// simulated UDP client has a socket of its own, or, when the worker has fewer sockets than
/// UDP clients (`share.lanes`), shares one with as few others as the sockets allow; a stub's
/// socket has a TCP lane of its own for retries after truncation, from the same address.
fn layout(share: &Share, c: &Common) -> (Vec<LaneSlot>, Vec<LaneSpec>, Vec<ClientRt>) {
    let mut specs: Vec<LaneSpec> = c.groups.iter().map(|g| g.spec.clone()).collect();
    let mut lanes: Vec<LaneSlot> = Vec::new();
    if share.clients.is_empty() {
        let policy = c.groups[0].spec.lane.conn;
        let n = share.lanes.max(1) as u32;
        lanes.extend((0..n).map(|_| LaneSlot::new(0, 0, policy)));
        // `--tc-fallback`: each UDP socket has a TCP lane of its own, from its address.
        if let Some(f) = &c.groups[0].fallback {
            specs.push(f.clone());
            for k in 0..n {
                let mut s = LaneSlot::new(0, 1, f.lane.conn);
                s.source_of = Some(k);
                lanes.push(s);
                lanes[k as usize].fallback = Some((n + k, n + k + 1));
            }
        }
        return (lanes, specs, Vec::new());
    }
    let udp = |gi: usize| c.groups[gi].spec.target.scheme == volley_transport::Scheme::Udp;
    let udp_clients = share.clients.iter().filter(|&&g| udp(g as usize)).count();
    // Each UDP group's part of the sockets: in proportion to its clients, at least one, the
    // rest one by one to the groups with clients left to give a socket to.
    let counts: Vec<usize> =
        (0..c.groups.len()).map(|gi| share.clients.iter().filter(|&&x| x as usize == gi).count()).collect();
    let mut parts: Vec<usize> = (0..c.groups.len())
        .map(|gi| match counts[gi] {
            n if n == 0 || !udp(gi) => 0,
            n if share.lanes >= udp_clients => n,
            n => (share.lanes * n / udp_clients).max(1),
        })
        .collect();
    let mut left = share.lanes.saturating_sub(parts.iter().sum());
    for gi in (0..c.groups.len()).cycle().take(c.groups.len() * left.min(udp_clients)) {
        if left > 0 && udp(gi) && parts[gi] < counts[gi] {
            parts[gi] += 1;
            left -= 1;
        }
    }
    // The sockets of each UDP group: (first lane, how many).
    let mut pools: Vec<Option<(u32, u32)>> = vec![None; c.groups.len()];
    for (gi, g) in c.groups.iter().enumerate() {
        let n = parts[gi];
        if n == 0 {
            continue;
        }
        let lo = lanes.len() as u32;
        lanes.extend((0..n).map(|_| LaneSlot::new(gi as u16, gi as u16, ConnPolicy::default())));
        if let Some(f) = &g.fallback {
            specs.push(f.clone());
            let spec = (specs.len() - 1) as u16;
            let flo = lanes.len() as u32;
            for k in 0..n as u32 {
                let mut s = LaneSlot::new(gi as u16, spec, f.lane.conn);
                s.source_of = Some(lo + k);
                lanes.push(s);
                lanes[(lo + k) as usize].fallback = Some((flo + k, flo + k + 1));
            }
        }
        pools[gi] = Some((lo, n as u32));
    }
    let replay = share.replay.is_some();
    let mut dealt = vec![0u32; c.groups.len()];
    let clients = share
        .clients
        .iter()
        .map(|&g| {
            let gi = g as usize;
            let group = &c.groups[gi];
            // A client starts busy when its rate is above its profile's light rate (a replayed
            // client starts light: its rate shows as it sends).
            let busy = !replay && group.busy.is_some_and(|(_, light)| group.rate > light);
            let client = |lanes| ClientRt {
                lanes,
                group: g,
                last: Cell::new(0),
                gap: Cell::new(if replay || group.rate <= 0.0 { 0.0 } else { 1e9 / group.rate }),
                busy: Cell::new(busy),
            };
            if let Some((lo, n)) = pools[gi] {
                // The group's clients take its sockets in turn.
                let k = lo + dealt[gi] % n;
                dealt[gi] += 1;
                return client(k..k + 1);
            }
            let lo = lanes.len() as u32;
            let policy = match group.busy {
                Some((b, _)) if busy => b,
                _ => group.spec.lane.conn,
            };
            lanes.extend((0..group.connections.max(1)).map(|_| LaneSlot::new(g, g, policy)));
            client(lo..lanes.len() as u32)
        })
        .collect();
    (lanes, specs, clients)
}

/// How long before the run's start a worker wakes, to spin until it (ns).
const START_SPIN_NS: u64 = 2_000_000;

async fn worker_main(share: Share, c: Common) -> WorkerEnd {
    let (lanes, specs, clients) = layout(&share, &c);
    let groups = c.groups.len();
    let w = Rc::new(Worker {
        inner: RefCell::new(Inner {
            slab: Slab::default(),
            deadlines: VecDeque::new(),
            retries: vec![VecDeque::new(); groups],
            // Its start is set once the run's clock starts: until then every count is second 0's.
            rec: Some({
                let mut r = Recorder::with_groups(share.index, u64::MAX, c.out.clone(), groups);
                r.set_trace(c.trace_queries);
                r
            }),
            cursor: Cursor::new(&c.queries, share.stripe),
            issued: 0,
            quota: share.quota,
            issuing: share.quota > 0,
            finished: false,
            rr: 0,
            events: BTreeMap::new(),
            late: Late::default(),
            on_wire: 0,
            peak_on_wire: 0,
        }),
        pool: if share.clients.is_empty() { share.lanes.max(1) as u32 } else { 0 },
        lanes,
        specs,
        clients,
        queries: c.queries.clone(),
        timeout_ns: c.timeout.as_nanos() as u64,
        closed_loop: share.concurrency.is_some(),
        groups: c.groups.clone(),
        this: RefCell::new(std::rc::Weak::new()),
        reports: Cell::new(0),
    });
    *w.this.borrow_mut() = Rc::downgrade(&w);

    // Set-up, before the run's clock starts: sockets, and the connections the run opens at
    // its start (a plain run's lanes, and the clients that connect at their start: browsers).
    // The others connect at their client's first query, as such clients do.
    if w.clients.is_empty() {
        for i in 0..w.pool as usize {
            w.ensure_started(i);
        }
    } else {
        for (i, slot) in w.lanes.iter().enumerate() {
            if w.specs[slot.spec as usize].target.scheme == volley_transport::Scheme::Udp {
                w.ensure_started(i);
            }
        }
        for (ci, cl) in w.clients.iter().enumerate() {
            let g = share.clients[ci] as usize;
            if c.groups[g].connect_at_start {
                for i in cl.lanes.clone() {
                    w.ensure_started(i as usize);
                }
            }
        }
    }
    connections_up(&w, &c).await;
    let start = c.gate.start().await;
    // What the load needs at its start is made before it: the open loop's timer.
    let schedule_timer = share.schedule.map(|_| precise_timer(&w));
    // Every load begins at the start itself (a coordinated run's parts at the same moment):
    // the timer wakes the worker shortly before it, and it waits out the rest on the clock,
    // giving its core away between readings. A pure spin held the core until the kernel
    // preempted it: with more waiting threads than cores (parts sharing a machine), a thread
    // preempted so ran again a time slice later, past the start (7 parts on 2 cores: up to
    // 1 ms late). Yielding, every waiting thread reads the clock every few microseconds; but
    // the fair scheduler pushes a thread that yields often behind those that do not (a
    // neighbour's build, a part already started), so where it may the thread waits at
    // real-time priority, yielding only to the other waiting threads, and drops it at the
    // start (it sleeps at that priority too, so that its wake-up does not queue behind them).
    let realtime = RealtimeWait::enter();
    sleep_until(&precise_timer(&w), start.saturating_sub(START_SPIN_NS)).await;
    while now_ns() < start {
        std::thread::yield_now();
    }
    let woke_late_ns = now_ns().saturating_sub(start);
    drop(realtime);
    let end = c.duration_ns.map(|d| start + d);
    w.inner.borrow_mut().rec().set_start(start);
    if !w.clients.is_empty() {
        tokio::task::spawn_local(clients_schedule(w.clone(), share.clone(), start, end));
    }
    if let Some(n) = share.concurrency {
        let now = now_ns();
        let mut inn = w.inner.borrow_mut();
        for _ in 0..n {
            w.issue_any(&mut inn, now, now);
        }
    }
    if let Some(period) = share.schedule {
        let timer = schedule_timer.flatten();
        tokio::task::spawn_local(schedule(w.clone(), timer, start, share.stripe, period, share.batch_window_ns, end));
    }

    let scheduled = !w.clients.is_empty() || share.schedule.is_some();
    // Housekeeping: timeouts, the per-second flush, and the end of the run.
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut drain_until = u64::MAX;
    loop {
        tick.tick().await;
        let now = now_ns();
        w.expire(now);
        let mut inn = w.inner.borrow_mut();
        inn.rec().tick(now);
        if c.interrupt.load(Ordering::Relaxed) {
            break;
        }
        // A scheduled load (open loop, clients, replay) stops issuing when its schedule task has
        // issued every query due before the end, however late it runs (a busy machine): that
        // task ends it. A schedule still running a second past the end is stopped here, as
        // the closed loop is at the end.
        let stop_at = end.map(|e| if scheduled { e + 1_000_000_000 } else { e });
        if inn.issuing && stop_at.is_some_and(|e| now >= e) {
            inn.issuing = false;
        }
        if !inn.issuing {
            if drain_until == u64::MAX {
                drain_until = now + w.timeout_ns;
            }
            if inn.slab.live() == 0 || now >= drain_until {
                break;
            }
        }
    }
    let now = now_ns();
    let (in_flight, by_group) = {
        let mut guard = w.inner.borrow_mut();
        let inn = &mut *guard;
        inn.finished = true;
        inn.issuing = false;
        // Queries still in flight that left: their departures, as known now.
        if let Some(rec) = inn.rec.as_mut() {
            for e in inn.slab.iter_live().filter(|e| e.left && !e.timed) {
                rec.departed(e.sent_at.saturating_sub(e.scheduled), Departure::Volley);
            }
        }
        (inn.slab.live() as u64, w.in_flight_by_group(inn))
    };
    // Close every connection: each driver reports how its connection ended, and what crossed
    // the wire, as it closes it.
    for slot in &w.lanes {
        slot.lane.close();
    }
    settle(&w).await;
    let (rec, events, late) = {
        let mut inn = w.inner.borrow_mut();
        w.account_unended(&mut inn, now_ns());
        let peak = inn.peak_on_wire;
        inn.rec().peak_on_wire(peak);
        (inn.rec.take(), std::mem::take(&mut inn.events), inn.late)
    };
    if let Some(rec) = rec {
        rec.finish(now, in_flight, &by_group, thread_cpu_ns());
    }
    WorkerEnd { events, late, woke_late_ns }
}

/// Waits until every connection the worker opened at its start came up or failed, or until
/// none has come up for a query timeout (those still pending are left to come up on the run's
/// clock), at most [`SETUP_MAX_NS`], or until the run is interrupted.
async fn connections_up(w: &Worker, c: &Common) {
    let timeout = c.timeout.as_nanos() as u64;
    let begun = now_ns();
    let mut limit = begun + timeout;
    let pending = |s: &LaneSlot| {
        s.started.get() && !s.settled.get() && w.specs[s.spec as usize].target.scheme != volley_transport::Scheme::Udp
    };
    let mut left = w.lanes.iter().filter(|s| pending(s)).count();
    while left > 0 && now_ns() < limit && !c.interrupt.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now_left = w.lanes.iter().filter(|s| pending(s)).count();
        // Thousands of handshakes take the server longer than one timeout: the wait goes on
        // while connections keep coming up (each one settled gives the rest another timeout),
        // so that the run measures the connections it asked for, not their handshakes; a
        // server that stops completing them is given up on after a timeout, as before.
        if now_left < left {
            limit = (now_ns() + timeout).min(begun + SETUP_MAX_NS);
        }
        left = now_left;
    }
}

/// The longest the set-up waits for a run's first connections, however they progress.
const SETUP_MAX_NS: u64 = 120_000_000_000;

/// How long the end of a run waits while nothing moves (no driver reports or finishes, and the
/// thread has nothing to do) before it stops waiting for the rest. Of each pause between two
/// looks at most [`END_LOOK_NS`] counts, so that a thread kept off the CPU by others does not
/// give up; whatever moves, the end waits at most [`END_MAX_NS`].
const END_STALL_NS: u64 = 500_000_000;
const END_LOOK_NS: u64 = 50_000_000;
const END_MAX_NS: u64 = 15_000_000_000;
/// CPU time the thread spends between two looks above which it is at work (closing
/// connections: a look itself takes microseconds).
const END_BUSY_NS: u64 = 1_000_000;

/// Whether the end of the run waits for a lane's driver: it holds its lane until it has
/// reported its connection's close and bytes (or its own end); one that is still in a
/// connection attempt is not waited for (the attempt is in progress at the end).
fn closing(s: &LaneSlot) -> bool {
    Rc::strong_count(&s.lane) > 1 && !s.lane.attempting()
}

/// Waits, after the lanes were told to close, until every driver with a connection to close
/// has reported it, for as long as they make progress (a report, a driver done, or work on
/// the thread: closing many connections takes a while before the first reports): however many
/// connections a worker holds, the wait ends once nothing has moved for [`END_STALL_NS`].
async fn settle(w: &Worker) {
    let began = now_ns();
    let (mut fewest, mut reports) = (usize::MAX, u64::MAX);
    let (mut still, mut last, mut cpu) = (0, began, thread_cpu_ns());
    loop {
        let n = w.lanes.iter().filter(|s| closing(s)).count();
        if n == 0 {
            return;
        }
        let (now, used) = (now_ns(), thread_cpu_ns());
        if n < fewest || w.reports.get() != reports || used - cpu >= END_BUSY_NS {
            (fewest, reports, still) = (fewest.min(n), w.reports.get(), 0);
        } else {
            still += (now - last).min(END_LOOK_NS);
        }
        if still >= END_STALL_NS || now - began >= END_MAX_NS {
            return;
        }
        (last, cpu) = (now, used);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The event that counts connections whose end their driver had not reported when the worker
/// stopped waiting: recorded closed (`client_end`: the worker's end closes them), their bytes
/// and packets missing from the wire counts.
pub const END_UNREPORTED_EVENT: &str = "conn_end_unreported";

impl Worker {
    /// At the very end: attempts still in progress get that fate; connections whose driver has
    /// not reported their close are recorded closed by the client's end, and counted as
    /// unreported ([`END_UNREPORTED_EVENT`]).
    fn account_unended(&self, inn: &mut Inner, now: u64) {
        let mut in_progress = vec![0u64; self.groups.len()];
        let mut unreported = 0u64;
        for s in &self.lanes {
            let attempting = s.lane.attempting();
            in_progress[s.group as usize] += attempting as u64;
            let open = s.open.replace(0);
            for _ in 0..open {
                inn.rec().conn_closed(now, Close::ClientEnd, s.group);
            }
            // A driver still closing without a connection left open holds a report of bytes.
            unreported += if closing(s) { open.max(1) } else { open } as u64;
        }
        for (g, n) in in_progress.into_iter().enumerate().filter(|(_, n)| *n > 0) {
            inn.rec().conns_in_progress(now, n, g as u16);
        }
        if unreported > 0 {
            *inn.events.entry(END_UNREPORTED_EVENT.to_string()).or_insert(0) += unreported;
        }
    }
}

/// Sleeps until `at` on the precise timer, or tokio's when there is none.
/// The calling thread at real-time priority (SCHED_FIFO 1) while it lives, where the process
/// may (root or CAP_SYS_NICE; else nothing changes); its policy before is restored on drop.
struct RealtimeWait(Option<(libc::c_int, libc::sched_param)>);

impl RealtimeWait {
    fn enter() -> RealtimeWait {
        // SAFETY: sched_getscheduler/sched_getparam/sched_setscheduler(2) on the calling
        // thread (0) with params this function owns.
        unsafe {
            let policy = libc::sched_getscheduler(0);
            let mut before = std::mem::zeroed::<libc::sched_param>();
            if policy < 0 || policy == libc::SCHED_FIFO || libc::sched_getparam(0, &mut before) != 0 {
                return RealtimeWait(None);
            }
            let rt = libc::sched_param { sched_priority: 1 };
            if libc::sched_setscheduler(0, libc::SCHED_FIFO, &rt) != 0 {
                return RealtimeWait(None);
            }
            RealtimeWait(Some((policy, before)))
        }
    }
}

impl Drop for RealtimeWait {
    fn drop(&mut self) {
        if let Some((policy, before)) = self.0 {
            // SAFETY: as in `enter`.
            unsafe { libc::sched_setscheduler(0, policy, &before) };
        }
    }
}

async fn sleep_until(timer: &Option<PreciseTimer>, at: u64) {
    match timer {
        Some(t) => {
            let _ = t.sleep_until(at).await;
        }
        None => tokio::time::sleep(Duration::from_nanos(at.saturating_sub(now_ns()))).await,
    }
}

fn precise_timer(w: &Worker) -> Option<PreciseTimer> {
    match PreciseTimer::new() {
        Ok(t) => Some(t),
        Err(_) => {
            count_event(&mut w.inner.borrow_mut().events, "precise_timer_unavailable");
            None
        }
    }
}

/// Open loop: issues each query at its scheduled time; latency counts from that time, so a
/// late send shows as latency (no coordinated omission) and as send lateness.
///
/// Each wake-up also issues the queries due within `window` ns after it, so that at high
/// rates a burst shares one timer arm and one system call (a timer arm costs microseconds in
/// a virtual machine); those leave at most `window` early and their latency counts from the
/// moment they left.
async fn schedule(
    w: Rc<Worker>,
    timer: Option<PreciseTimer>,
    start: u64,
    stripe: crate::part::Stripe,
    period: f64,
    window: u64,
    end: Option<u64>,
) {
    // The worker's k-th arrival is the run's arrival `stripe.at(k)`, due at that index's time.
    let due = |k: u64| start + crate::part::due_ns(stripe.at(k), period);
    let mut k = 0u64;
    loop {
        let next = due(k);
        if end.is_some_and(|e| next >= e) || !w.inner.borrow().issuing {
            w.inner.borrow_mut().issuing = false;
            return;
        }
        sleep_until(&timer, next).await;
        let now = now_ns();
        let horizon = now + window;
        let mut inn = w.inner.borrow_mut();
        while inn.issuing {
            let d = due(k);
            if d > horizon || end.is_some_and(|e| d >= e) {
                break;
            }
            w.issue_any(&mut inn, d, now);
            k += 1;
        }
    }
}

/// Simulated clients: each client sends at its own rate, on its own lanes; one timer for all
/// of a worker's clients (a heap of their next send times).
async fn clients_schedule(w: Rc<Worker>, share: Share, start: u64, end: Option<u64>) {
    if let Some((replay, sources)) = &share.replay {
        return replay_schedule(w, replay.clone(), sources.clone(), share.batch_window_ns, start, end).await;
    }
    let timer = precise_timer(&w);
    // Each client's random choices come from its own generator, seeded by its index in the
    // whole run, and its j-th query is the run's query `id + clients·j`: a client behaves and
    // asks alike however the run is split into parts and threads.
    let mut rngs: Vec<Rng> = share.client_ids.iter().map(|&id| Rng::new(crate::part::client_seed(id))).collect();
    let mut asked = vec![0u64; share.client_ids.len()];
    let n_queries = w.queries.len().max(1) as u64;
    // Each group's mean gap between a client's queries, ns.
    let means: Vec<f64> = w.groups.iter().map(|g| 1e9 / g.rate.max(1e-9)).collect();
    let mean_of = |c: u32| means[w.clients[c as usize].group as usize];
    let gap = |rng: &mut Rng, mean: f64| match share.arrivals {
        Arrivals::Constant => mean as u64,
        Arrivals::Poisson => rng.exp_ns(mean),
    };
    // Each client starts at its own phase within its first interval.
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = (0..w.clients.len() as u32)
        .map(|c| {
            let mean = mean_of(c);
            let rng = &mut rngs[c as usize];
            let phase = match share.arrivals {
                Arrivals::Constant => (rng.unit() * mean) as u64,
                Arrivals::Poisson => rng.exp_ns(mean),
            };
            Reverse((start + phase, c))
        })
        .collect();
    while let Some(&Reverse((next, _))) = heap.peek() {
        if end.is_some_and(|e| next >= e) || !w.inner.borrow().issuing {
            break;
        }
        sleep_until(&timer, next).await;
        let now = now_ns();
        let horizon = now + share.batch_window_ns;
        let mut inn = w.inner.borrow_mut();
        while let Some(&Reverse((due, c))) = heap.peek() {
            if due > horizon || end.is_some_and(|e| due >= e) || !inn.issuing {
                break;
            }
            heap.pop();
            let lanes = w.client_query(&mut inn, c, due);
            let k = share.client_ids[c as usize] + share.client_count * asked[c as usize];
            asked[c as usize] += 1;
            w.issue(&mut inn, What::Keyed((k % n_queries) as u32, k), due, now, lanes, true);
            heap.push(Reverse((due + gap(&mut rngs[c as usize], mean_of(c)).max(1), c)));
        }
    }
    w.inner.borrow_mut().issuing = false;
}

/// Replay: each client sends its captured client's queries at their captured times (shifted
/// by its start offset); one timer for all of a worker's clients. Timing fidelity shows in the
/// send lateness.
async fn replay_schedule(
    w: Rc<Worker>,
    replay: Arc<crate::clients::Replay>,
    sources: Vec<(u32, u64)>,
    window: u64,
    start: u64,
    end: Option<u64>,
) {
    let timer = precise_timer(&w);
    // A shifted repetition wraps round the capture's span, so that the load is even over the
    // whole replay: its queries past the span's end come first, moved back by the span.
    let period = replay.span_ns + 1;
    let rot: Vec<usize> = sources
        .iter()
        .map(|&(src, shift)| {
            let qs = &replay.clients[src as usize];
            if shift == 0 {
                0
            } else {
                qs.iter().position(|&(off, _)| off + shift >= period).unwrap_or(0)
            }
        })
        .collect();
    let due_of = |c: usize, pos: usize| -> Option<(u64, u32)> {
        let (src, shift) = sources[c];
        let qs = &replay.clients[src as usize];
        if pos >= qs.len() {
            return None;
        }
        let (off, q) = qs[(rot[c] + pos) % qs.len()];
        let t = off + shift;
        Some((start + if t >= period { t - period } else { t }, q))
    };
    // (due, client, position in its captured queries)
    let mut heap: BinaryHeap<Reverse<(u64, u32, u32)>> =
        (0..sources.len()).filter_map(|c| due_of(c, 0).map(|(d, _)| Reverse((d, c as u32, 0)))).collect();
    while let Some(&Reverse((next, _, _))) = heap.peek() {
        if end.is_some_and(|e| next >= e) || !w.inner.borrow().issuing {
            break;
        }
        sleep_until(&timer, next).await;
        let now = now_ns();
        let horizon = now + window;
        let mut inn = w.inner.borrow_mut();
        while let Some(&Reverse((due, c, pos))) = heap.peek() {
            if due > horizon || end.is_some_and(|e| due >= e) || !inn.issuing {
                break;
            }
            heap.pop();
            if let Some((_, q)) = due_of(c as usize, pos as usize) {
                let lanes = w.client_query(&mut inn, c, due);
                w.issue(&mut inn, What::Exact(q, 0), due, now, lanes, true);
                if let Some((d, _)) = due_of(c as usize, pos as usize + 1) {
                    heap.push(Reverse((d, c, pos + 1)));
                }
            }
        }
    }
    w.inner.borrow_mut().issuing = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start wait raises the thread to SCHED_FIFO where the process may (CAP_SYS_NICE:
    /// root here, as in CI) and gives the thread its policy back when it ends; where it may not, nothing changes.
    #[test]
    fn the_start_wait_is_real_time_where_permitted_and_restored() {
        std::thread::spawn(|| {
            // SAFETY: sched_getscheduler(2) on the calling thread.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            let before = policy();
            // CAP_SYS_NICE (bit 23) in the effective set: permitted.
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let caps = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap();
            let permitted = u64::from_str_radix(caps.trim(), 16).unwrap() & (1 << 23) != 0;
            let wait = RealtimeWait::enter();
            assert_eq!(wait.0.is_some(), permitted);
            assert_eq!(policy(), if permitted { libc::SCHED_FIFO } else { before });
            drop(wait);
            assert_eq!(policy(), before);
        })
        .join()
        .unwrap();
    }
    use volley_metrics::{Collector, WireStats};
    use volley_wire::{QType, QueryOptions};

    /// A client of a browser-like group (light: idle 10 s; busy: 4 queries a connection above
    /// 1 qps) with two lanes.
    fn browser() -> (GroupRt, Vec<LaneSlot>, ClientRt) {
        let light = ConnPolicy { idle: Some(Duration::from_secs(10)), ..Default::default() };
        let busy = ConnPolicy { max_queries: Some(4), ..light };
        let target: Target = "https://127.0.0.1/dns-query".parse().unwrap();
        let g = GroupRt {
            spec: LaneSpec { target, lane: LaneOptions { conn: light, ..Default::default() } },
            fallback: None,
            connections: 2,
            connect_at_start: true,
            rate: 0.0,
            busy: Some((busy, 1.0)),
            retry: None,
        };
        let lanes = (0..2).map(|_| LaneSlot::new(0, 0, light)).collect();
        let c = ClientRt { lanes: 0..2, group: 0, last: Cell::new(0), gap: Cell::new(0.0), busy: Cell::new(false) };
        (g, lanes, c)
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_client_switches_policy_with_its_rate() {
        let (g, lanes, c) = browser();
        let mut t = S;
        let mut events = Vec::new();
        let mut send = |gap: u64, n: usize, events: &mut Vec<&str>| {
            for _ in 0..n {
                t += gap;
                events.extend(c.note_query(t, &g, &lanes));
            }
        };
        // Slow (one query every 2 s): light.
        send(2 * S, 5, &mut events);
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(lanes[0].lane.policy().max_queries, None);
        // Ten a second: busy, on both lanes, once.
        send(S / 10, 10, &mut events);
        assert_eq!(events, ["profile_busy"]);
        assert!(lanes.iter().all(|l| l.lane.policy().max_queries == Some(4)));
        // Slow again: back to light once the smoothed rate falls below 1 qps / 1.2.
        send(3 * S, 10, &mut events);
        assert_eq!(events, ["profile_busy", "profile_light"]);
        assert!(lanes.iter().all(|l| l.lane.policy().max_queries.is_none()));
    }

    /// Near the light rate, the margin keeps the policy from flipping at every query.
    #[test]
    fn no_flipping_near_the_light_rate() {
        let (g, lanes, c) = browser();
        let mut t = S;
        let mut switches = 0;
        for i in 0..200u64 {
            // Gaps alternating around 1 s (0.9 s and 1.1 s).
            t += if i % 2 == 0 { 9 * S / 10 } else { 11 * S / 10 };
            switches += usize::from(c.note_query(t, &g, &lanes).is_some());
        }
        assert_eq!(switches, 0);
    }

    /// A group without a busy policy never switches.
    #[test]
    fn one_policy_profiles_never_switch() {
        let (mut g, lanes, c) = browser();
        g.busy = None;
        for i in 1..50u64 {
            assert_eq!(c.note_query(i * S / 100, &g, &lanes), None);
        }
    }

    /// A group of a plain run (no profile).
    fn plain_group() -> GroupRt {
        let target: Target = "udp://127.0.0.1:53".parse().unwrap();
        GroupRt {
            spec: LaneSpec { target, lane: LaneOptions::default() },
            fallback: None,
            connections: 1,
            connect_at_start: true,
            rate: 0.0,
            busy: None,
            retry: None,
        }
    }

    /// The lanes of a worker with `clients` (their groups: 0 and 1 UDP, the second with a TCP
    /// fallback, 2 over TCP with two connections each) and `sockets` UDP sockets for them.
    fn laid_out(clients: Vec<u16>, sockets: usize) -> (Vec<LaneSlot>, Vec<ClientRt>) {
        let tcp: Target = "tcp://127.0.0.1:53".parse().unwrap();
        let mut stub = plain_group();
        stub.fallback = Some(LaneSpec { target: tcp.clone(), lane: LaneOptions::default() });
        let forwarder =
            GroupRt { spec: LaneSpec { target: tcp, lane: LaneOptions::default() }, connections: 2, ..plain_group() };
        let (tx, _rx) = std::sync::mpsc::channel();
        let common = Common {
            groups: vec![plain_group(), stub, forwarder],
            queries: QuerySet::single("example.test", QType::A, QueryOptions::default()).unwrap(),
            timeout: Duration::from_secs(1),
            gate: Arc::default(),
            duration_ns: None,
            interrupt: Arc::default(),
            out: tx,
            trace_queries: 0,
        };
        let share = Share {
            index: 0,
            concurrency: None,
            stripe: crate::part::Part::WHOLE.stripe(0, 1),
            schedule: None,
            batch_window_ns: 0,
            quota: 0,
            lanes: sockets,
            clients,
            client_ids: Vec::new(),
            client_count: 0,
            arrivals: Arrivals::Constant,
            replay: None,
        };
        let (lanes, _, clients) = layout(&share, &common);
        (lanes, clients)
    }

    /// Each simulated UDP client has a socket of its own; with fewer sockets, the clients of
    /// each UDP group share their group's part evenly; a stub's socket has a TCP lane of its
    /// own for retries, from the socket's address; TCP clients keep their own connections.
    #[test]
    fn udp_clients_get_a_socket_each_or_an_even_share() {
        // Groups 0, 1, 2 interleaved: 4 clients of each.
        let dealt: Vec<u16> = (0..12).map(|i| (i % 3) as u16).collect();
        let (lanes, clients) = laid_out(dealt.clone(), 8);
        let lane_of = |c: usize| clients[c].lanes.clone();
        let udp: Vec<usize> = (0..12).filter(|&c| dealt[c] < 2).collect();
        let mut own: Vec<u32> = udp.iter().map(|&c| lane_of(c).start).collect();
        assert!(udp.iter().all(|&c| lane_of(c).len() == 1));
        own.sort_unstable();
        own.dedup();
        assert_eq!(own.len(), 8, "8 UDP clients, 8 sockets of their own");
        for &c in &udp {
            let slot = &lanes[lane_of(c).start as usize];
            assert_eq!(slot.group, dealt[c]);
            match dealt[c] {
                0 => assert!(slot.fallback.is_none()),
                _ => {
                    let (lo, hi) = slot.fallback.expect("a stub's TCP lane");
                    assert_eq!(hi - lo, 1);
                    assert_eq!(lanes[lo as usize].source_of, Some(lane_of(c).start), "its retries from its address");
                }
            }
        }
        for c in (0..12).filter(|&c| dealt[c] == 2) {
            assert_eq!(lane_of(c).len(), 2, "a forwarder's own two connections");
        }
        // 3 sockets for 8 UDP clients of two groups: 2 and 1 (one at least each), each group's
        // clients spread over its own.
        let (lanes, clients) = laid_out(dealt.clone(), 3);
        let mut per_socket: BTreeMap<u32, Vec<u16>> = BTreeMap::new();
        for &c in &udp {
            per_socket.entry(clients[c].lanes.start).or_default().push(dealt[c]);
        }
        assert_eq!(per_socket.len(), 3, "{per_socket:?}");
        let sizes: Vec<usize> = per_socket.values().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 4], "group 0's 4 clients on 2 sockets, group 1's on 1: {per_socket:?}");
        assert!(per_socket.iter().all(|(&l, gs)| gs.iter().all(|&g| g == lanes[l as usize].group)));
    }

    /// A worker whose lanes are in the groups `groups` (two groups), its run over.
    fn worker(groups: &[u16]) -> (Rc<Worker>, std::sync::mpsc::Receiver<volley_metrics::WorkerMessage>) {
        worker_with(groups, None)
    }

    /// [`worker`], its UDP groups sending queries again as `retry` says.
    fn worker_with(
        groups: &[u16],
        retry: Option<crate::UdpRetry>,
    ) -> (Rc<Worker>, std::sync::mpsc::Receiver<volley_metrics::WorkerMessage>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let queries = QuerySet::single("example.test", QType::A, QueryOptions::default()).unwrap();
        let lanes = groups
            .iter()
            .map(|&g| {
                let s = LaneSlot::new(g, 0, ConnPolicy::default());
                s.started.set(true);
                s
            })
            .collect();
        let w = Rc::new(Worker {
            inner: RefCell::new(Inner {
                slab: Slab::default(),
                deadlines: VecDeque::new(),
                retries: vec![VecDeque::new(); 2],
                rec: Some(Recorder::with_groups(0, 0, tx, 2)),
                cursor: Cursor::new(&queries, crate::part::Part::WHOLE.stripe(0, 1)),
                issued: 0,
                quota: 0,
                issuing: false,
                finished: true,
                rr: 0,
                events: BTreeMap::new(),
                late: Late::default(),
                on_wire: 0,
                peak_on_wire: 0,
            }),
            pool: groups.len() as u32,
            lanes,
            specs: vec![plain_group().spec],
            clients: Vec::new(),
            queries,
            timeout_ns: 0,
            closed_loop: false,
            groups: vec![GroupRt { retry, ..plain_group() }; 2],
            this: RefCell::new(std::rc::Weak::new()),
            reports: Cell::new(0),
        });
        (w, rx)
    }

    fn view(w: &Rc<Worker>, lane: usize) -> Rc<LaneView> {
        Rc::new(LaneView { w: w.clone(), g: w.lanes[lane].group, lane })
    }

    /// Stands for a UDP lane's driver: takes the lane's next query, gives it `id`, and says
    /// it left at `now`; returns the query's message.
    fn send(w: &Rc<Worker>, x: &LaneView, id: u16, now: u64) -> (Token, Vec<u8>) {
        let t = w.lanes[x.lane].lane.pop().expect("a query in the lane");
        let mut out = Vec::new();
        assert!(x.encode(t, id, &mut out));
        x.sent(t, out.len(), now);
        (t, out)
    }

    /// The UDP retry's sweep, in virtual time: a query with no answer after the delay goes back
    /// to its lane once (not again while it waits there), as often as its tries allow and no
    /// later than its deadline; it keeps one slab entry, `sent` counts it once, and each send
    /// again is counted as it leaves. An answer to its first send ends it (an answer to an earlier send);
    /// the answer to its other send then finds nothing.
    #[test]
    fn a_udp_query_goes_out_again_after_the_delay_with_one_fate() {
        const MS: u64 = 1_000_000;
        let retry = crate::UdpRetry { after: Duration::from_millis(100), tries: 3 };
        let (w, _rx) = worker_with(&[0], Some(retry));
        let x = view(&w, 0);
        let t0 = 10 * S;
        let t = {
            let mut inn = w.inner.borrow_mut();
            inn.finished = false;
            let t = inn.slab.insert(Entry { lane: 0, scheduled: t0, deadline: t0 + 250 * MS, ..Default::default() });
            inn.deadlines.push_back((t0 + 250 * MS, t));
            t
        };
        w.lanes[0].lane.push(t);
        let (_, first) = send(&w, &x, 7, t0);
        let queued = || w.lanes[0].lane.queued();
        let retries = || w.inner.borrow().events.get(UDP_RETRY_EVENT).copied().unwrap_or(0);
        w.expire(t0 + 99 * MS);
        assert_eq!((queued(), retries()), (0, 0), "not before the delay");
        w.expire(t0 + 100 * MS);
        w.expire(t0 + 105 * MS);
        assert_eq!((queued(), retries()), (1, 0), "queued once, however often the sweep looks");
        send(&w, &x, 8, t0 + 105 * MS);
        assert_eq!(retries(), 1, "counted when it leaves");
        w.expire(t0 + 205 * MS);
        assert_eq!((queued(), retries()), (1, 1), "the third try");
        send(&w, &x, 9, t0 + 205 * MS);
        w.expire(t0 + 240 * MS);
        assert_eq!((queued(), retries()), (0, 2), "no fourth: three tries in all");
        assert_eq!(w.inner.borrow().slab.live(), 1, "one query, one entry");
        assert!(w.inner.borrow().retries[0].is_empty(), "nothing left due past its tries");
        // The first send's answer ends it.
        let mut answer = first.clone();
        answer[2] |= 0x80;
        x.response(t, &answer, t0 + 241 * MS);
        let inn = w.inner.borrow();
        assert_eq!(inn.slab.live(), 0);
        assert_eq!(inn.events.get(UDP_EARLIER_EVENT), Some(&1));
        assert!(!x.is_live(t), "a later answer to another send finds no query");
    }

    /// The end of a run: an attempt still going is in progress; a connection whose driver
    /// reports its close is counted so; one whose driver never does is closed by the worker
    /// and counted unreported. Every attempt and every connection has its fate, per group.
    #[test]
    fn the_end_gives_every_attempt_and_connection_a_fate() {
        let (w, rx) = worker(&[0, 1, 1]);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let local = tokio::task::LocalSet::new();
        let held = local.block_on(&rt, async {
            // Lane 0: an attempt that never ends (its driver holds the lane).
            w.lanes[0].lane.begin_connection();
            // Lanes 1 and 2: connections up.
            for i in [1, 2] {
                w.lanes[i].lane.begin_connection();
                view(&w, i).conn_opened(&Handshake::default(), now_ns());
            }
            let held = [w.lanes[0].lane.clone(), w.lanes[1].lane.clone()];
            // Lane 2's driver closes its connection when the lane closes, and reports it.
            let (lane, x) = (w.lanes[2].lane.clone(), view(&w, 2));
            tokio::task::spawn_local(async move {
                while !lane.closing() {
                    lane.wait().await;
                }
                x.conn_closed(Close::ClientEnd, x.now());
                x.wire(&WireStats { bytes_out: 100, bytes_in: 50, packets_out: 3, packets_in: 2, retransmits: 0 });
            });
            for s in &w.lanes {
                s.lane.close();
            }
            settle(&w).await;
            let mut inn = w.inner.borrow_mut();
            w.account_unended(&mut inn, now_ns());
            held
        });
        assert_eq!(Rc::strong_count(&w.lanes[2].lane), 1, "lane 2's driver finished");
        drop(held);
        let events = std::mem::take(&mut w.inner.borrow_mut().events);
        assert_eq!(events.get(END_UNREPORTED_EVENT), Some(&1), "{events:?}");
        let rec = w.inner.borrow_mut().rec.take().unwrap();
        rec.finish(now_ns(), 0, &[0, 0], 0);
        let mut c = Collector::new(1);
        for m in rx.try_iter() {
            c.absorb(m);
        }
        let got = c.finish();
        let t = &got.totals.conns;
        assert_eq!((t.opened, t.failed, t.in_progress), (2, 0, 1));
        assert_eq!(t.closed[Close::ClientEnd as usize], 2, "both connections closed at the end");
        assert_eq!(t.closed_total(), 2);
        assert_eq!(got.totals.wire.packets_out, 3, "the reported connection's wire counts only");
        let g = &got.groups;
        assert_eq!((g[0].counters.conns.in_progress, g[1].counters.conns.in_progress), (1, 0));
        assert_eq!((g[0].counters.conns.closed_total(), g[1].counters.conns.closed_total()), (0, 2));
    }
}
