//! One worker thread: a single-threaded runtime that issues queries by the load model,
//! hands them to its lanes, ends them by timeout, and records every fate.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use volley_metrics::{Close, ErrorKind, Handshake, Recorder, Unexpected};
use volley_transport::{spawn_lane, Exchange, Lane, LaneOptions, Target, Token};
use volley_wire::{question_key, Header, Rcode};

use crate::clock::{now_ns, thread_cpu_ns};
use crate::slab::{Entry, Slab};
use crate::source::{Cursor, QuerySet};
use crate::timer::PreciseTimer;

/// This worker's share of the load.
#[derive(Debug, Clone)]
pub(crate) struct Share {
    pub index: usize,
    /// Closed loop: queries kept in flight. None for open loop.
    pub concurrency: Option<u64>,
    /// Open loop: first scheduled time and interval between queries, ns.
    pub schedule: Option<(u64, f64)>,
    /// Open loop: queries due within this many ns of a wake-up leave together.
    pub batch_window_ns: u64,
    /// Most queries to issue.
    pub quota: u64,
    pub lanes: usize,
}

/// Everything a worker shares with its lanes (through [`Exchange`]) and its tasks.
pub(crate) struct Worker {
    inner: RefCell<Inner>,
    lanes: Vec<Rc<Lane>>,
    queries: QuerySet,
    timeout_ns: u64,
    closed_loop: bool,
}

struct Inner {
    slab: Slab,
    /// (deadline, token) in issue order: deadlines only grow, so the front expires first.
    deadlines: VecDeque<(u64, Token)>,
    rec: Option<Recorder>,
    cursor: Cursor,
    issued: u64,
    quota: u64,
    issuing: bool,
    finished: bool,
    rr: usize,
    events: BTreeMap<&'static str, u64>,
}

impl Inner {
    fn rec(&mut self) -> &mut Recorder {
        self.rec.as_mut().expect("recorder present until the worker finishes")
    }
}

/// What a worker thread returns when it ends.
pub(crate) struct WorkerEnd {
    pub events: BTreeMap<&'static str, u64>,
}

impl Worker {
    fn issue(&self, inn: &mut Inner, scheduled: u64, now: u64) {
        if !inn.issuing || inn.finished {
            return;
        }
        inn.issued += 1;
        if inn.issued >= inn.quota {
            inn.issuing = false;
        }
        let n = self.lanes.len();
        let lane = (0..n).map(|i| (inn.rr + i) % n).find(|&i| self.lanes[i].has_room());
        inn.rec().sent(now);
        let Some(lane) = lane else {
            inn.rec().failed(now, ErrorKind::Overload);
            return;
        };
        inn.rr = (lane + 1) % n;
        let (query, seed) = inn.cursor.next();
        let key = self.queries.fixed_key(query).unwrap_or(0);
        // Latency counts from the schedule, or from the hand-over when a query leaves ahead of it
        // (batch window): never from later than the schedule, never from before the send.
        let origin = scheduled.min(now);
        let t = inn.slab.insert(Entry { lane: lane as u32, query, seed, scheduled: origin, key, ..Default::default() });
        inn.deadlines.push_back((now + self.timeout_ns, t));
        self.lanes[lane].push(t);
    }

    /// Closed loop: a query ended, so another starts.
    #[inline]
    fn refill(&self, inn: &mut Inner, now: u64) {
        if self.closed_loop {
            self.issue(inn, now, now);
        }
    }

    /// Ends every query whose deadline passed.
    fn expire(&self, now: u64) {
        let mut inn = self.inner.borrow_mut();
        while let Some(&(deadline, t)) = inn.deadlines.front() {
            if deadline > now {
                break;
            }
            inn.deadlines.pop_front();
            if let Some(e) = inn.slab.remove(t) {
                self.lanes[e.lane as usize].release();
                inn.rec().timed_out(now);
                self.refill(&mut inn, now);
            }
        }
    }
}

impl Exchange for Worker {
    #[inline]
    fn now(&self) -> u64 {
        now_ns()
    }

    #[inline]
    fn encode(&self, token: Token, id: u16, out: &mut Vec<u8>) -> bool {
        let mut inn = self.inner.borrow_mut();
        let Some(e) = inn.slab.get_mut(token) else { return false };
        self.queries.write(e.query, e.seed, id, out);
        if e.key == 0 {
            e.key = question_key(out).unwrap_or(1);
        }
        true
    }

    #[inline]
    fn sent(&self, token: Token, bytes: usize, now: u64) {
        let mut inn = self.inner.borrow_mut();
        let scheduled = inn.slab.get_mut(token).map(|e| e.scheduled);
        let rec = inn.rec();
        rec.wrote(bytes);
        if let (false, Some(s)) = (self.closed_loop, scheduled) {
            rec.lateness(now.saturating_sub(s));
        }
    }

    #[inline]
    fn response(&self, token: Token, msg: &[u8], now: u64) {
        let mut inn = self.inner.borrow_mut();
        if inn.finished {
            return;
        }
        let Some(e) = inn.slab.remove(token) else {
            inn.rec().unexpected(now, Unexpected::Late, msg.len());
            return;
        };
        self.lanes[e.lane as usize].release();
        let rec = inn.rec();
        match Header::parse(msg) {
            Ok(h) => match question_key(msg) {
                Ok(k) if k == e.key => {
                    rec.answered(now, now.saturating_sub(e.scheduled), h.rcode().0, h.truncated(), msg.len())
                }
                Ok(_) => rec.failed(now, ErrorKind::Mismatch),
                // Error responses (FORMERR, NOTIMP...) may carry no question: still an answer.
                Err(_) if h.qdcount == 0 && h.rcode() != Rcode::NOERROR => {
                    rec.answered(now, now.saturating_sub(e.scheduled), h.rcode().0, h.truncated(), msg.len())
                }
                Err(_) => rec.failed(now, ErrorKind::Malformed),
            },
            Err(_) => rec.failed(now, ErrorKind::Malformed),
        }
        self.refill(&mut inn, now);
    }

    #[inline]
    fn failed(&self, token: Token, kind: ErrorKind, now: u64) {
        let mut inn = self.inner.borrow_mut();
        if inn.finished {
            return;
        }
        if let Some(e) = inn.slab.remove(token) {
            self.lanes[e.lane as usize].release();
            inn.rec().failed(now, kind);
            self.refill(&mut inn, now);
        }
    }

    #[inline]
    fn unexpected(&self, kind: Unexpected, bytes: usize, now: u64) {
        let mut inn = self.inner.borrow_mut();
        if !inn.finished {
            inn.rec().unexpected(now, kind, bytes);
        }
    }

    #[inline]
    fn is_live(&self, token: Token) -> bool {
        let inn = self.inner.borrow();
        !inn.finished && inn.slab.contains(token)
    }

    fn conn_opened(&self, h: &Handshake, now: u64) {
        let mut inn = self.inner.borrow_mut();
        if !inn.finished {
            inn.rec().conn_opened(now, h);
        }
    }

    fn conn_failed(&self, kind: ErrorKind, now: u64) {
        let mut inn = self.inner.borrow_mut();
        if !inn.finished {
            inn.rec().conn_failed(now, kind);
        }
    }

    fn conn_closed(&self, how: Close, now: u64) {
        let mut inn = self.inner.borrow_mut();
        if !inn.finished {
            inn.rec().conn_closed(now, how);
        }
    }

    fn event(&self, what: &'static str) {
        *self.inner.borrow_mut().events.entry(what).or_insert(0) += 1;
    }
}

/// Settings shared by all workers of a run.
#[derive(Clone)]
pub(crate) struct Common {
    pub target: Target,
    pub queries: QuerySet,
    pub timeout: Duration,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    pub lane: LaneOptions,
    pub interrupt: Arc<AtomicBool>,
    pub out: std::sync::mpsc::Sender<volley_metrics::WorkerMessage>,
    pub workers: usize,
}

/// Runs one worker to its end on the calling thread.
pub(crate) fn run_worker(share: Share, common: Common) -> WorkerEnd {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(_) => {
            // Without a runtime the worker cannot run: report an empty end so the collector completes.
            let rec = Recorder::new(share.index, common.start_ns, common.out.clone());
            rec.finish(now_ns(), 0, thread_cpu_ns());
            return WorkerEnd { events: BTreeMap::from([("worker_runtime_failed", 1)]) };
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, worker_main(share, common))
}

async fn worker_main(share: Share, c: Common) -> WorkerEnd {
    let lanes: Vec<Rc<Lane>> = (0..share.lanes.max(1)).map(|_| Rc::new(Lane::new())).collect();
    let w = Rc::new(Worker {
        inner: RefCell::new(Inner {
            slab: Slab::default(),
            deadlines: VecDeque::new(),
            rec: Some(Recorder::new(share.index, c.start_ns, c.out.clone())),
            cursor: Cursor::new(&c.queries, share.index, c.workers),
            issued: 0,
            quota: share.quota,
            issuing: share.quota > 0,
            finished: false,
            rr: 0,
            events: BTreeMap::new(),
        }),
        lanes,
        queries: c.queries.clone(),
        timeout_ns: c.timeout.as_nanos() as u64,
        closed_loop: share.concurrency.is_some(),
    });
    for lane in &w.lanes {
        spawn_lane(&c.target, lane.clone(), w.clone(), &c.lane);
    }

    if let Some(n) = share.concurrency {
        let now = now_ns();
        let mut inn = w.inner.borrow_mut();
        for _ in 0..n {
            w.issue(&mut inn, now, now);
        }
    }
    if let Some((first, interval)) = share.schedule {
        tokio::task::spawn_local(schedule(w.clone(), first, interval, share.batch_window_ns, c.end_ns));
    }

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
        if inn.issuing && c.end_ns.is_some_and(|e| now >= e) {
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
    let (rec, in_flight, events) = {
        let mut inn = w.inner.borrow_mut();
        inn.finished = true;
        inn.issuing = false;
        (inn.rec.take(), inn.slab.live() as u64, std::mem::take(&mut inn.events))
    };
    for lane in &w.lanes {
        lane.close();
    }
    // Let the lanes see the close and shut their connections.
    tokio::task::yield_now().await;
    if let Some(rec) = rec {
        rec.finish(now, in_flight, thread_cpu_ns());
    }
    WorkerEnd { events }
}

/// Open loop: issues each query at its scheduled time; latency counts from that time, so a
/// late send shows as latency (no coordinated omission) and as send lateness.
///
/// Each wake-up also issues the queries due within `window` ns after it, so that at high
/// rates a burst shares one timer arm and one system call (a timer arm costs microseconds in
/// a virtual machine); those leave at most `window` early and their latency counts from the
/// moment they left.
async fn schedule(w: Rc<Worker>, first: u64, interval: f64, window: u64, end: Option<u64>) {
    let timer = match PreciseTimer::new() {
        Ok(t) => Some(t),
        Err(_) => {
            w.event("precise_timer_unavailable");
            None
        }
    };
    let due = |k: u64| first + (k as f64 * interval) as u64;
    let mut k = 0u64;
    loop {
        let next = due(k);
        if end.is_some_and(|e| next >= e) || !w.inner.borrow().issuing {
            w.inner.borrow_mut().issuing = false;
            return;
        }
        match &timer {
            Some(t) => {
                let _ = t.sleep_until(next).await;
            }
            None => tokio::time::sleep(Duration::from_nanos(next.saturating_sub(now_ns()))).await,
        }
        let now = now_ns();
        let horizon = now + window;
        let mut inn = w.inner.borrow_mut();
        while inn.issuing {
            let d = due(k);
            if d > horizon || end.is_some_and(|e| d >= e) {
                break;
            }
            w.issue(&mut inn, d, now);
            k += 1;
        }
    }
}
