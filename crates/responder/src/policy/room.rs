//! Room at `--max-conns`: the TCP, DoT, DoH, DoQ and DoH/3 connections an I/O thread holds
//! under the cap, so that a new one can take the place of the longest idle instead of being
//! turned away.
//!
//! Turning the newcomer away lets idle connections that reconnect at once (an attacker's, or
//! a pool's) keep every place, and a client that asks is starved (docs/reliability.md).
//! unbound cuts its TCP idle timeout as its buffers run low, to 200 ms at the least; here
//! the connection idle the longest, and at least [`EVICT_IDLE`], with nothing in flight, is
//! closed at the moment a place is wanted, and its place goes to the newcomer. A connection
//! that carries queries is never idle that long, so it keeps its place.
//!
//! Per thread (no locks): each connection is accepted, served and evicted on one thread; the
//! cap itself is counted over all threads ([`super::ConnLimit`]). The table costs a few
//! pointer moves per connection opened and closed, and each connection notes its last
//! activity in a `Cell`; without `--max-conns` nothing is kept.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::Slot;
use crate::answer::Transport;

/// A connection must have been idle this long to be evicted (unbound's floor).
pub(crate) const EVICT_IDLE: Duration = Duration::from_millis(200);

/// Up to this many connections, eviction looks at each; beyond, at [`SAMPLE`] chosen at
/// random (the oldest of them goes), so that its cost does not grow with the cap.
const SCAN_ALL: usize = 64;
const SAMPLE: usize = 32;

impl Held {
    fn busy(&self) -> bool {
        self.busy.get() || self.streams.get() > 0 || self.token.borrow().as_ref().is_some_and(|t| t.strong_count() > 1)
    }
}

/// One connection held under the cap.
pub(crate) struct Held {
    /// Its place under the cap, taken by the newcomer when it is evicted.
    slot: RefCell<Option<Slot>>,
    /// Its task, aborted when it is evicted (which drops and so closes the socket).
    task: RefCell<Option<AbortHandle>>,
    /// Run before the task is aborted (QUIC: a close with the application's NO_ERROR, which
    /// dropping the connection would not send at once).
    close: RefCell<Option<Box<dyn FnOnce()>>>,
    /// Streams (queries) in progress on it ([`Tracker::stream`]): not evicted.
    streams: Cell<u32>,
    /// Since when it has been idle (its last query or answer, or since the first byte of a
    /// query that is still arriving).
    since: Cell<Instant>,
    /// Answers held or unwritten: not evicted.
    busy: Cell<bool>,
    /// Also busy while this token has more than one holder (HTTP/2: the tasks of its held
    /// streams hold it beside the connection).
    token: RefCell<Option<std::rc::Weak<()>>>,
    /// Its index in its table; `usize::MAX` once out of it.
    at: Cell<usize>,
}

/// The connections of one I/O thread held under `--max-conns`, per listener (TCP, DoT, DoH,
/// DoQ, DoH/3).
#[derive(Default)]
pub(crate) struct Room {
    tables: [RefCell<Vec<Rc<Held>>>; 5],
    rng: Cell<u64>,
}

/// A connection's place under `--max-conns`, freed when it is dropped (when the
/// connection's task ends).
pub(crate) enum Place {
    /// The listener has no cap.
    Free,
    /// Counted under the cap; never evicted (a listener without a table: none today).
    Counted(#[allow(dead_code)] Slot),
    /// Counted, and may be evicted.
    Held(Rc<Room>, usize, Rc<Held>),
}

fn table_of(t: Transport) -> Option<usize> {
    match t {
        Transport::Tcp => Some(0),
        Transport::Dot => Some(1),
        Transport::Doh => Some(2),
        Transport::Doq => Some(3),
        Transport::Doh3 => Some(4),
        _ => None,
    }
}

impl Room {
    /// The place of a connection accepted on `t`'s listener with `slot` under the cap.
    pub fn enter(self: &Rc<Self>, t: Transport, slot: Slot) -> Place {
        let Some(i) = table_of(t) else { return Place::Counted(slot) };
        let mut table = self.tables[i].borrow_mut();
        let held = Rc::new(Held {
            slot: RefCell::new(Some(slot)),
            task: RefCell::new(None),
            close: RefCell::new(None),
            streams: Cell::new(0),
            since: Cell::new(Instant::now()),
            busy: Cell::new(false),
            token: RefCell::new(None),
            at: Cell::new(table.len()),
        });
        table.push(held.clone());
        Place::Held(self.clone(), i, held)
    }

    /// Closes the longest-idle connection of `t`'s listener on this thread (idle at least
    /// [`EVICT_IDLE`], nothing in flight) and gives its place; None when there is none.
    pub fn evict(&self, t: Transport) -> Option<Slot> {
        let i = table_of(t)?;
        let now = Instant::now();
        let victim = {
            let table = self.tables[i].borrow();
            let n = table.len();
            let mut best: Option<usize> = None;
            let mut look = |k: usize| {
                let h = &table[k];
                if !h.busy()
                    && now.saturating_duration_since(h.since.get()) >= EVICT_IDLE
                    && best.is_none_or(|b| h.since.get() < table[b].since.get())
                {
                    best = Some(k);
                }
            };
            if n <= SCAN_ALL {
                (0..n).for_each(&mut look);
            } else {
                for _ in 0..SAMPLE {
                    look(self.random(n));
                }
            }
            table[best?].clone()
        };
        self.leave(i, &victim);
        let slot = victim.slot.borrow_mut().take();
        if let Some(close) = victim.close.borrow_mut().take() {
            close();
        }
        if let Some(task) = victim.task.borrow_mut().take() {
            task.abort();
        }
        slot
    }

    /// Takes `held` out of table `i` (once).
    fn leave(&self, i: usize, held: &Held) {
        let at = held.at.replace(usize::MAX);
        if at == usize::MAX {
            return;
        }
        let mut table = self.tables[i].borrow_mut();
        table.swap_remove(at);
        if let Some(moved) = table.get(at) {
            moved.at.set(at);
        }
    }

    /// A number below `n` (xorshift; eviction needs spread, not quality).
    fn random(&self, n: usize) -> usize {
        let mut x = self.rng.get();
        if x == 0 {
            x = 0x9E37_79B9_7F4A_7C15;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        (x % n as u64) as usize
    }

    /// Connections held in `t`'s table now.
    #[cfg(test)]
    fn len(&self, t: Transport) -> usize {
        table_of(t).map_or(0, |i| self.tables[i].borrow().len())
    }
}

/// What a connection tells eviction (its task, when it was last active), to be handed to
/// the parts that know ([`Place::tracker`]); does nothing for a connection that is not
/// evictable.
#[derive(Clone)]
pub(crate) struct Tracker(Option<Rc<Held>>);

impl Tracker {
    /// The connection's task, aborted if it is evicted.
    pub fn set_task(&self, task: AbortHandle) {
        if let Some(h) = &self.0 {
            *h.task.borrow_mut() = Some(task);
        }
    }

    /// Run when the connection is evicted, before its task is aborted.
    pub fn set_close(&self, close: impl FnOnce() + 'static) {
        if let Some(h) = &self.0 {
            *h.close.borrow_mut() = Some(Box::new(close));
        }
    }

    /// A stream (a query) begun on the connection: busy until the guard is dropped, idle
    /// from then.
    pub fn stream(&self) -> Stream {
        if let Some(h) = &self.0 {
            h.streams.set(h.streams.get() + 1);
        }
        Stream(self.0.clone())
    }

    /// Idle since `since`; `busy` when answers are held or unwritten.
    #[inline]
    pub fn note(&self, since: Instant, busy: bool) {
        if let Some(h) = &self.0 {
            h.since.set(since);
            h.busy.set(busy);
        }
    }

    /// Busy, besides, while `token` has a holder other than the connection.
    pub fn busy_while_shared(&self, token: &Rc<()>) {
        if let Some(h) = &self.0 {
            *h.token.borrow_mut() = Some(Rc::downgrade(token));
        }
    }
}

/// A stream in progress on a connection ([`Tracker::stream`]).
pub(crate) struct Stream(Option<Rc<Held>>);

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.streams.set(h.streams.get() - 1);
            h.since.set(Instant::now());
        }
    }
}

impl Place {
    /// What the connection tells eviction.
    pub fn tracker(&self) -> Tracker {
        Tracker(match self {
            Place::Held(_, _, h) => Some(h.clone()),
            _ => None,
        })
    }

    /// See [`Tracker::note`].
    #[inline]
    pub fn note(&self, since: Instant, busy: bool) {
        if let Place::Held(_, _, h) = self {
            h.since.set(since);
            h.busy.set(busy);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Place::Held(room, i, h) = self {
            room.leave(*i, h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ConnLimit;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn evicts_the_longest_idle_and_gives_its_place() {
        let limit = ConnLimit::new(3);
        let room = Rc::new(Room::default());
        let a = room.enter(Transport::Tcp, limit.take().unwrap());
        tokio::time::advance(Duration::from_millis(100)).await;
        let b = room.enter(Transport::Tcp, limit.take().unwrap());
        let c = room.enter(Transport::Tcp, limit.take().unwrap());
        assert!(limit.take().is_none(), "full");
        assert!(room.evict(Transport::Tcp).is_none(), "none idle 200 ms yet");
        tokio::time::advance(Duration::from_millis(300)).await;
        // `a` is the oldest, but has an answer held; `c` was active 50 ms ago.
        a.note(Instant::now() - Duration::from_millis(400), true);
        c.note(Instant::now() - Duration::from_millis(50), false);
        assert!(room.evict(Transport::Dot).is_none(), "each listener its own table");
        let slot = room.evict(Transport::Tcp).expect("b is idle 300 ms");
        assert_eq!(room.len(Transport::Tcp), 2);
        assert_eq!(limit.open(), 3, "the place passes to the newcomer, still counted");
        let d = room.enter(Transport::Tcp, slot);
        assert!(room.evict(Transport::Tcp).is_none(), "a busy, c and d recent");
        // Busy while another holds its token (HTTP/2's held streams).
        let token = Rc::new(());
        a.tracker().busy_while_shared(&token);
        a.note(Instant::now() - Duration::from_millis(400), false);
        let held_stream = token.clone();
        assert!(room.evict(Transport::Tcp).is_none(), "a holds a stream");
        drop(held_stream);
        let slot = room.evict(Transport::Tcp).expect("a's stream is done");
        let d2 = room.enter(Transport::Tcp, slot);
        drop(b);
        assert_eq!(room.len(Transport::Tcp), 3, "an evicted connection's end leaves the table alone");
        drop((a, c, d, d2));
        assert_eq!(room.len(Transport::Tcp), 0);
        assert_eq!(limit.open(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_a_stream_in_progress_keeps_its_place() {
        let limit = ConnLimit::new(1);
        let room = Rc::new(Room::default());
        let a = room.enter(Transport::Doq, limit.take().unwrap());
        let tracker = a.tracker();
        let stream = tracker.stream();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(room.evict(Transport::Doq).is_none(), "a stream in progress");
        drop(stream);
        assert!(room.evict(Transport::Doq).is_none(), "idle only since its stream ended");
        tokio::time::advance(EVICT_IDLE).await;
        assert!(room.evict(Transport::Doh3).is_none(), "each listener its own table");
        let closed = Rc::new(Cell::new(false));
        let c = closed.clone();
        tracker.set_close(move || c.set(true));
        assert!(room.evict(Transport::Doq).is_some(), "idle 200 ms");
        assert!(closed.get(), "closed as it was evicted");
    }

    #[tokio::test(start_paused = true)]
    async fn eviction_aborts_the_task() {
        let limit = ConnLimit::new(1);
        let room = Rc::new(Room::default());
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let place = room.enter(Transport::Dot, limit.take().unwrap());
                let tracker = place.tracker();
                let task = tokio::task::spawn_local(async move {
                    let _place = place;
                    std::future::pending::<()>().await;
                });
                tracker.set_task(task.abort_handle());
                tokio::time::advance(EVICT_IDLE).await;
                let slot = room.evict(Transport::Dot).expect("idle");
                assert!(task.await.unwrap_err().is_cancelled());
                assert_eq!(room.len(Transport::Dot), 0);
                drop(slot);
                assert_eq!(limit.open(), 0);
            })
            .await;
    }

    #[test]
    fn many_connections_are_sampled() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let limit = ConnLimit::new(10_000);
            let room = Rc::new(Room::default());
            let places: Vec<Place> = (0..1000).map(|_| room.enter(Transport::Tcp, limit.take().unwrap())).collect();
            for p in &places {
                p.note(Instant::now(), false);
            }
            tokio::time::advance(Duration::from_secs(1)).await;
            // One in ten connections active now: never chosen.
            for p in places.iter().step_by(10) {
                p.note(Instant::now(), false);
            }
            for _ in 0..500 {
                assert!(room.evict(Transport::Tcp).is_some());
            }
            assert_eq!(room.len(Transport::Tcp), 500);
            let active =
                places.iter().step_by(10).filter(|p| matches!(p, Place::Held(_, _, h) if h.at.get() != usize::MAX));
            assert_eq!(active.count(), 100, "the active ones keep their places");
        });
    }
}
