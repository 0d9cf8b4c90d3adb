//! The coordinator: waits for every part, gives them one start, follows them, collects and
//! merges their results.

use std::collections::BTreeMap;
use std::io::{self, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use volley_metrics::{RunResult, ScaleInfo, ScalePart};
use volley_report::{merge_runs, MergeError, Merged, NamedRun};

use crate::protocol::{recv, send, Hello, LimitSpec, PartProgress, ToCoordinator, ToPart, PROTOCOL};
use crate::{share, unix_ns};

/// A running part not heard from for longer than this (it says it is alive every second) is
/// named in the live line, which goes on without it.
const QUIET_AFTER: Duration = Duration::from_secs(2);

/// How the coordinator waits.
#[derive(Debug, Clone)]
pub struct Options {
    pub parts: u32,
    /// Longest wait for every part to be ready; then the parts that are start without the rest.
    pub wait: Duration,
    /// The start is this long after the last part said ready (it must reach every part first).
    pub lead: Duration,
    /// A started part silent this long (no progress, no heartbeat) is given up as lost.
    pub silence: Duration,
    /// This volley's version: parts of another are refused.
    pub version: String,
}

/// What happens, as it happens (the command line prints it).
#[derive(Debug, Clone)]
pub enum Event {
    Joined {
        index: u32,
        peer: String,
    },
    Refused {
        peer: String,
        reason: String,
    },
    Started {
        unix_ns: u64,
        ready: Vec<u32>,
        missing: Vec<u32>,
    },
    /// A second's figures of every part that reported it, added; `live` parts of `parts`.
    /// `quiet`: running parts not heard from for over 2 s (a heartbeat comes every second).
    Second {
        progress: PartProgress,
        reported: u32,
        live: u32,
        quiet: Vec<u32>,
    },
    Ended {
        index: u32,
        status: String,
    },
}

/// What the coordinator collected.
#[derive(Debug)]
pub struct Outcome {
    /// Each merged part's results, by index.
    pub results: Vec<(u32, RunResult)>,
    /// Every part, merged or not.
    pub scale: ScaleInfo,
}

#[derive(Debug, Default)]
struct Slot {
    peer: Option<String>,
    writer: Option<TcpStream>,
    ready: bool,
    started: bool,
    results: Option<RunResult>,
    /// `lost`, `failed`, `not_ready` (with the reason), once it can give no results.
    gone: Option<(String, String)>,
    last_heard: Option<Instant>,
    offset_probe: bool,
    /// A part of a split limit search: its clock measured, it waits for the first step.
    waiting: bool,
    limit: bool,
    seconds: BTreeMap<u32, PartProgress>,
}

#[derive(Debug, Default)]
struct State {
    slots: Vec<Slot>,
    first: Option<(u32, Hello)>,
    items: u64,
    start: Option<u64>,
    /// A split limit search has begun its steps: no part joins now.
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    opts: Options,
}

/// A coordinator bound to its address.
pub struct Coordinator {
    listener: TcpListener,
    opts: Options,
}

impl Coordinator {
    pub fn bind(addr: SocketAddr, opts: Options) -> io::Result<Coordinator> {
        Ok(Coordinator { listener: TcpListener::bind(addr)?, opts })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Runs the coordination of one run to its end: every part's results in, or given up on.
    pub fn run(self, mut events: impl FnMut(Event)) -> Outcome {
        let mut s = self.open();
        s.round(None, &mut events)
    }

    /// Opens the coordination: parts may join from now on; [`Session::wait_joined`] and
    /// [`Session::round`] follow them.
    pub fn open(self) -> Session {
        let n = self.opts.parts.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State { slots: (0..n).map(|_| Slot::default()).collect(), ..Default::default() }),
            changed: Condvar::new(),
            opts: self.opts.clone(),
        });
        let (etx, erx) = std::sync::mpsc::channel::<Event>();
        {
            let shared = shared.clone();
            let listener = self.listener;
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let shared = shared.clone();
                    let etx = etx.clone();
                    std::thread::spawn(move || serve_part(conn, &shared, &etx));
                }
            });
        }
        Session { deadline: Instant::now() + self.opts.wait, shared, erx, rounds: 0 }
    }
}

/// A coordination under way: one round for a run, one round per step for a split limit search.
pub struct Session {
    shared: Arc<Shared>,
    erx: std::sync::mpsc::Receiver<Event>,
    /// The end of the first round's wait for the parts (`--wait` from the opening).
    deadline: Instant,
    rounds: u32,
}

impl Session {
    fn drain(&self, events: &mut dyn FnMut(Event)) {
        while let Ok(e) = self.erx.try_recv() {
            events(e);
        }
    }

    /// Waits until every part has joined, or the wait is over; then the limit search the parts
    /// asked for (a split `volley limit`), or None (a run).
    pub fn wait_joined(&mut self, events: &mut dyn FnMut(Event)) -> Option<LimitSpec> {
        loop {
            {
                let st = self.shared.state.lock().expect("state");
                // A part of a split search joins, measures its clock, then says it waits.
                let joined = |s: &Slot| s.peer.is_some() && (!s.limit || s.waiting || s.gone.is_some());
                if st.slots.iter().all(joined) || Instant::now() >= self.deadline {
                    break;
                }
                let _ = self.shared.changed.wait_timeout(st, Duration::from_millis(50)).expect("state");
            }
            self.drain(events);
        }
        self.drain(events);
        let st = self.shared.state.lock().expect("state");
        st.first.as_ref().and_then(|(_, h)| h.limit.clone())
    }

    /// Tells every part that the search is over.
    pub fn finish(self) {
        let mut st = self.shared.state.lock().expect("state");
        for s in st.slots.iter_mut().filter(|s| s.gone.is_none()) {
            if let Some(w) = s.writer.as_mut() {
                let _ = send(w, &ToPart::Done);
            }
        }
    }

    /// One round: (for a step of a split limit search, `step`: its number and load, announced
    /// to every part first) waits until every part is ready (the first round: until `--wait`
    /// after the opening; later ones: `--wait` from the announcement), gives the ready ones
    /// one start, follows them, and collects their results.
    pub fn round(&mut self, step: Option<(u32, f64)>, events: &mut dyn FnMut(Event)) -> Outcome {
        let opts = self.shared.opts.clone();
        let n = opts.parts.max(1);
        let deadline = if step.is_none() && self.rounds == 0 { self.deadline } else { Instant::now() + opts.wait };
        self.rounds += 1;
        let shared = self.shared.clone();
        if let Some((number, load)) = step {
            let mut st = shared.state.lock().expect("state");
            // No part joins a search under way: it would miss steps.
            st.closed = true;
            st.start = None;
            // A search by clients splits each step's clients whole (as each part does): the
            // shares follow the step's count, not the first step's.
            if st.first.as_ref().and_then(|(_, h)| h.limit.as_ref()).is_some_and(|l| l.by == "clients") {
                st.items = load.round().max(1.0) as u64;
            }
            for s in st.slots.iter_mut() {
                s.ready = false;
                s.started = false;
                s.results = None;
                s.seconds.clear();
                // (A part still measuring its clock is not sent a step: it is not ready in time.)
                if s.gone.is_none() && s.waiting {
                    if let Some(w) = s.writer.as_mut() {
                        if send(w, &ToPart::Step { number, load }).is_err() {
                            s.gone = Some(("lost".into(), format!("its connection failed before step {number}")));
                        }
                    }
                }
            }
        }

        // Wait until every part is ready (or gone), or the wait is over.
        let mut st = shared.state.lock().expect("state");
        loop {
            if st.slots.iter().all(|s| s.ready || s.gone.is_some()) || Instant::now() >= deadline {
                break;
            }
            let (g, _) = shared.changed.wait_timeout(st, Duration::from_millis(50)).expect("state");
            st = g;
            drop(st);
            self.drain(events);
            st = shared.state.lock().expect("state");
        }
        let start = unix_ns() + opts.lead.as_nanos() as u64;
        st.start = Some(start);
        let (mut ready, mut missing) = (Vec::new(), Vec::new());
        for (i, s) in st.slots.iter_mut().enumerate() {
            let go = s.ready && s.gone.is_none();
            let sent = if go {
                s.writer.as_mut().is_some_and(|w| send(w, &ToPart::Start { unix_ns: start }).is_ok())
            } else {
                if s.gone.is_none() {
                    if let Some(w) = s.writer.as_mut() {
                        let reason = "the run started without this part: it was not ready in time";
                        let _ = send(w, &ToPart::Refused { reason: reason.into() });
                    }
                }
                false
            };
            if go && sent {
                s.started = true;
                s.last_heard = Some(Instant::now());
                ready.push(i as u32);
            } else {
                missing.push(i as u32);
                if s.gone.is_none() {
                    let why = if s.peer.is_none() { "never_came" } else { "not_ready" };
                    s.gone =
                        Some((why.into(), format!("not ready {:.1} s after the wait began", opts.wait.as_secs_f64())));
                }
            }
        }
        drop(st);
        self.drain(events);
        events(Event::Started { unix_ns: start, ready, missing });

        // Follow the parts until each has handed in its results or is gone.
        let mut shown = 0u32;
        loop {
            std::thread::sleep(Duration::from_millis(100));
            self.drain(events);
            let mut st = shared.state.lock().expect("state");
            let now = Instant::now();
            for s in st.slots.iter_mut().filter(|s| s.started && s.results.is_none() && s.gone.is_none()) {
                if s.last_heard.is_some_and(|t| now.duration_since(t) > opts.silence) {
                    s.gone = Some(("lost".into(), format!("silent for {:.0} s", opts.silence.as_secs_f64())));
                    if let Some(w) = &s.writer {
                        let _ = w.shutdown(std::net::Shutdown::Both);
                    }
                }
            }
            // The merged progress of each second every live part has reported (or given up on).
            // A part not heard from for over 2 s (it says it is alive every second) does not hold
            // the line up: the line goes on without it, naming it, until it is heard again or
            // given up after --silence.
            let live: Vec<&Slot> = st.slots.iter().filter(|s| s.started && s.gone.is_none()).collect();
            let next = shown;
            let is_quiet =
                |s: &Slot| s.results.is_none() && s.last_heard.is_some_and(|t| now.duration_since(t) > QUIET_AFTER);
            let complete = live.iter().all(|s| {
                s.results.is_some() || is_quiet(s) || s.seconds.keys().next_back().is_some_and(|&k| k >= next)
            });
            if !live.is_empty() && complete && live.iter().any(|s| s.seconds.contains_key(&next)) {
                let mut p = PartProgress { second: next, ..Default::default() };
                let mut reported = 0;
                for s in &live {
                    if let Some(x) = s.seconds.get(&next) {
                        reported += 1;
                        p.issued += x.issued;
                        p.sent += x.sent;
                        p.answered += x.answered;
                        p.timed_out += x.timed_out;
                        p.failed += x.failed;
                    }
                }
                let live_n = live.iter().filter(|s| s.results.is_none()).count() as u32;
                let quiet: Vec<u32> = st
                    .slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.started && s.gone.is_none() && is_quiet(s))
                    .map(|(i, _)| i as u32)
                    .collect();
                // A second shown is not kept (nor one a quiet part reports late, once heard again).
                for s in st.slots.iter_mut() {
                    s.seconds.retain(|&k, _| k > next);
                }
                shown += 1;
                drop(st);
                events(Event::Second { progress: p, reported, live: live_n, quiet });
                continue;
            }
            if st.slots.iter().all(|s| !s.started || s.results.is_some() || s.gone.is_some()) {
                break;
            }
        }
        self.drain(events);

        let st = shared.state.lock().expect("state");
        let items = st.items;
        let mut results = Vec::new();
        let mut list = Vec::new();
        for (i, s) in st.slots.iter().enumerate() {
            let i = i as u32;
            let (status, reason) = match (&s.results, &s.gone) {
                (Some(_), _) => ("merged".to_string(), None),
                (None, Some((why, reason))) => (why.clone(), Some(reason.clone())),
                (None, None) => ("lost".to_string(), Some("no results".to_string())),
            };
            let start_info = s.results.as_ref().and_then(|r| r.part.as_ref()).and_then(|p| p.start.as_ref());
            list.push(ScalePart {
                index: i,
                status,
                share: share(items, n, i),
                peer: s.peer.clone(),
                clock_offset_ns: start_info.and_then(|x| x.clock_offset_ns),
                rtt_ns: start_info.and_then(|x| x.rtt_ns),
                // Its actual start on the coordinator's clock, against the start given.
                start_offset_ns: start_info.map(|x| {
                    let actual =
                        x.planned_unix_ns as i128 + i128::from(x.clock_offset_ns.unwrap_or(0)) + x.late_ns as i128;
                    (actual - start as i128) as i64
                }),
                reason,
            });
            if let Some(r) = &s.results {
                results.push((i, r.clone()));
            }
        }
        let offsets: Vec<i64> = list.iter().filter_map(|p| p.start_offset_ns).collect();
        let skew = match (offsets.iter().min(), offsets.iter().max()) {
            (Some(lo), Some(hi)) => Some((hi - lo) as u64),
            _ => None,
        };
        let missing_share = list.iter().filter(|p| p.status != "merged").fold(0.0, |a, p| a + p.share);
        Outcome {
            results,
            scale: ScaleInfo {
                parts: n,
                complete: list.iter().all(|p| p.status == "merged"),
                missing_share,
                start_unix_ns: start,
                start_skew_ns: skew,
                part_list: list,
            },
        }
    }
}

/// The first flag that differs between two parts' flags, in words.
fn first_difference(a: &[String], b: &[String]) -> String {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return format!("'{y}' where part {{first}} has '{x}'");
        }
    }
    match a.len().cmp(&b.len()) {
        std::cmp::Ordering::Less => format!("'{}' more than part {{first}}", b[a.len()]),
        std::cmp::Ordering::Greater => format!("no '{}' where part {{first}} has it", a[b.len()]),
        std::cmp::Ordering::Equal => "settings that differ".into(),
    }
}

/// Serves one part's connection to its end.
fn serve_part(conn: TcpStream, shared: &Shared, events: &std::sync::mpsc::Sender<Event>) {
    let peer = conn.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    let _ = conn.set_nodelay(true);
    let Ok(mut writer) = conn.try_clone() else { return };
    let mut reader = BufReader::new(conn);
    let refuse = |w: &mut TcpStream, reason: String| {
        let _ = send(w, &ToPart::Refused { reason: reason.clone() });
        let _ = events.send(Event::Refused { peer: peer.clone(), reason });
    };
    let hello = match recv::<ToCoordinator, _>(&mut reader) {
        Ok(Some(ToCoordinator::Hello(h))) => h,
        Ok(_) | Err(_) => return refuse(&mut writer, "no hello: not a volley part".into()),
    };
    let opts = &shared.opts;
    let index = {
        let mut st = shared.state.lock().expect("state");
        let why = if hello.protocol != PROTOCOL {
            Some(format!("protocol {} where the coordinator speaks {PROTOCOL}", hello.protocol))
        } else if hello.version != opts.version {
            Some(format!("volley {} where the coordinator is volley {}", hello.version, opts.version))
        } else if hello.parts != opts.parts {
            Some(format!("the part says the run has {} parts, the coordinator {}", hello.parts, opts.parts))
        } else if st.start.is_some() || st.closed {
            Some("the run has started already".into())
        } else if let Some((first, h)) = st.first.as_ref().filter(|(_, h)| h.fingerprint != hello.fingerprint) {
            Some(format!(
                "its command line differs from part {first}'s: {}",
                first_difference(&h.args, &hello.args).replace("{first}", &first.to_string())
            ))
        } else {
            None
        };
        if let Some(why) = why {
            drop(st);
            return refuse(&mut writer, why);
        }
        let index = match hello.index {
            Some(i) if i >= opts.parts => {
                drop(st);
                return refuse(
                    &mut writer,
                    format!("part {i} of a run of {} parts (0 to {})", opts.parts, opts.parts - 1),
                );
            }
            Some(i) if st.slots[i as usize].peer.is_some() => {
                drop(st);
                return refuse(&mut writer, format!("part {i} is here already"));
            }
            Some(i) => i,
            None => match st.slots.iter().position(|s| s.peer.is_none()) {
                Some(i) => i as u32,
                None => {
                    drop(st);
                    return refuse(&mut writer, format!("all {} parts are here already", opts.parts));
                }
            },
        };
        if st.first.is_none() {
            st.first = Some((index, hello.clone()));
            st.items = hello.items;
        }
        let slot = &mut st.slots[index as usize];
        slot.peer = Some(peer.clone());
        slot.limit = hello.limit.is_some();
        slot.writer = writer.try_clone().ok();
        slot.last_heard = Some(Instant::now());
        index
    };
    if send(&mut writer, &ToPart::Welcome { index, parts: opts.parts }).is_err() {
        return gone(shared, index, "lost", "it left before its welcome");
    }
    let _ = events.send(Event::Joined { index, peer: peer.clone() });
    loop {
        let msg = match recv::<ToCoordinator, _>(&mut reader) {
            Ok(Some(m)) => m,
            Ok(None) => return gone(shared, index, "lost", "it closed the connection before its results came"),
            Err(e) => return gone(shared, index, "lost", &format!("its connection failed: {e}")),
        };
        let t2 = unix_ns();
        let mut st = shared.state.lock().expect("state");
        let slot = &mut st.slots[index as usize];
        slot.last_heard = Some(Instant::now());
        match msg {
            ToCoordinator::Time { t1 } => {
                slot.offset_probe = true;
                drop(st);
                let _ = send(&mut writer, &ToPart::Time { t1, t2, t3: unix_ns() });
            }
            ToCoordinator::Ready => {
                slot.ready = true;
                shared.changed.notify_all();
            }
            ToCoordinator::Waiting => {
                slot.waiting = true;
                shared.changed.notify_all();
            }
            ToCoordinator::Alive | ToCoordinator::Hello(_) => {}
            ToCoordinator::Progress(p) => {
                // Bounded: a second already shown is not kept.
                if slot.seconds.len() < 100_000 {
                    slot.seconds.insert(p.second, p);
                }
            }
            ToCoordinator::Failed { error } => {
                drop(st);
                return gone(shared, index, "failed", &error);
            }
            ToCoordinator::Results(r) => {
                slot.results = Some(*r);
                drop(st);
                let _ = send(&mut writer, &ToPart::Received);
                let _ = events.send(Event::Ended { index, status: "merged".into() });
                // A part of a split limit search goes on to the next step.
                if hello.limit.is_none() {
                    return;
                }
            }
        }
    }
}

fn gone(shared: &Shared, index: u32, why: &str, reason: &str) {
    let mut st = shared.state.lock().expect("state");
    let slot = &mut st.slots[index as usize];
    if slot.results.is_none() && slot.gone.is_none() {
        slot.gone = Some((why.to_string(), reason.to_string()));
    }
    shared.changed.notify_all();
}

/// Merges the collected results exactly (`volley merge`'s code) and records the coordination:
/// `scale`, and for a run that lost parts a warning naming each with its share.
pub fn merge_outcome(outcome: &Outcome, command: Vec<String>) -> Result<Option<Merged>, MergeError> {
    if outcome.results.is_empty() {
        return Ok(None);
    }
    let runs: Vec<NamedRun> =
        outcome.results.iter().map(|(i, r)| NamedRun::new(format!("part {i}"), r.clone())).collect();
    let mut merged = merge_runs(&runs, command)?;
    let s = &outcome.scale;
    // The coordinator names each missing part with its share and why, below.
    merged.result.warnings.retain(|w| !w.starts_with("merge: incomplete: parts"));
    for p in s.part_list.iter().filter(|p| p.status != "merged") {
        merged.result.warnings.insert(
            0,
            format!(
                "incomplete: part {} of {} ({:.1}% of the load) is missing ({}: {}); the figures are those of the other parts",
                p.index,
                s.parts,
                p.share * 100.0,
                p.status,
                p.reason.as_deref().unwrap_or("no results")
            ),
        );
    }
    merged.result.part = None;
    merged.result.scale = Some(s.clone());
    Ok(Some(merged))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{CoordError, PartLink};

    fn hello(index: Option<u32>, version: &str, fingerprint: &str) -> Hello {
        Hello {
            protocol: PROTOCOL.into(),
            version: version.into(),
            fingerprint: fingerprint.into(),
            args: vec!["rate: 1".into(), fingerprint.into()],
            parts: 3,
            index,
            items: 30,
            limit: None,
        }
    }

    /// Three parts: one joins and fails, one joins and leaves before its results, one never
    /// comes; another program and another run are refused. Each is named with its share.
    #[test]
    fn parts_that_fail_leave_or_never_come_are_named() {
        let opts = Options {
            parts: 3,
            wait: Duration::from_secs(5),
            lead: Duration::from_millis(50),
            silence: Duration::from_secs(5),
            version: "1.0".into(),
        };
        let c = Coordinator::bind("127.0.0.1:0".parse().unwrap(), opts).unwrap();
        let addr = c.local_addr().unwrap().to_string();
        let run = std::thread::spawn(move || {
            let mut events = Vec::new();
            let out = c.run(|e| events.push(format!("{e:?}")));
            (out, events)
        });
        let wait = Duration::from_secs(5);
        let mut a = PartLink::join(&addr, &hello(Some(2), "1.0", "x"), wait).unwrap();
        assert_eq!((a.index, a.parts), (2, 3));
        assert!(a.offset_ns.abs() < 50_000_000, "one machine, one clock: {}", a.offset_ns);
        let mut b = PartLink::join(&addr, &hello(None, "1.0", "x"), wait).unwrap();
        assert_eq!(b.index, 0, "the first free index");
        match PartLink::join(&addr, &hello(None, "0.9", "x"), wait) {
            Err(CoordError::Refused(r)) => assert!(r.contains("volley 0.9 where the coordinator is volley 1.0"), "{r}"),
            other => panic!("{:?}", other.map(|l| l.index)),
        }
        match PartLink::join(&addr, &hello(None, "1.0", "y"), wait) {
            Err(CoordError::Refused(r)) => {
                assert!(r.contains("differs from part 2's: 'y' where part 2 has 'x'"), "{r}")
            }
            other => panic!("{:?}", other.map(|l| l.index)),
        }
        match PartLink::join(&addr, &hello(Some(2), "1.0", "x"), wait) {
            Err(CoordError::Refused(r)) => assert!(r.contains("part 2 is here already"), "{r}"),
            other => panic!("{:?}", other.map(|l| l.index)),
        }
        // Both ready; part 1 never comes: after the coordinator's wait they start without it.
        // They wait for the start longer than the coordinator waits for part 1 (the same 5 s
        // each way raced on a loaded machine: a part gave up first).
        let start_wait = Duration::from_secs(30);
        let (ta, tb) = (
            std::thread::spawn(move || (a.ready(start_wait).map(|_| ()), a)),
            std::thread::spawn(move || (b.ready(start_wait).map(|_| ()), b)),
        );
        let (ra, a) = ta.join().unwrap();
        let (rb, b) = tb.join().unwrap();
        assert!(ra.is_ok() && rb.is_ok(), "{:?} {:?}", ra.err(), rb.err());
        a.failed("no sockets");
        drop(b);
        let (out, events) = run.join().unwrap();
        let s = &out.scale;
        assert!(out.results.is_empty());
        assert!(!s.complete);
        let status: Vec<&str> = s.part_list.iter().map(|p| p.status.as_str()).collect();
        assert_eq!(status, ["lost", "never_came", "failed"], "{events:?}");
        assert_eq!(s.part_list[2].reason.as_deref(), Some("no sockets"));
        let shares: Vec<f64> = s.part_list.iter().map(|p| p.share).collect();
        assert_eq!(shares, [10.0 / 30.0, 10.0 / 30.0, 10.0 / 30.0]);
        assert!((s.missing_share - 1.0).abs() < 1e-9);
        assert!(merge_outcome(&out, vec![]).unwrap().is_none(), "nothing to merge");
    }
}
