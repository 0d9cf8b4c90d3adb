use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use volley_metrics::{Close, Wait};

use crate::Token;

/// When a client ends a connection on its own and replaces it with a new one. One mechanism
/// for every connection-based transport: the lane stops handing out queries once the
/// connection's budget is spent, and tells the driver when to close it (see [`Lane::wait_turn`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnPolicy {
    /// Close after this many queries were sent on the connection (1: one query per connection).
    pub max_queries: Option<u64>,
    /// Close once the connection is this old (counted from the start of its attempt).
    pub lifetime: Option<Duration>,
    /// Close after this long with nothing outstanding; the next query opens a new connection.
    pub idle: Option<Duration>,
}

impl ConnPolicy {
    pub fn is_none(&self) -> bool {
        *self == ConnPolicy::default()
    }
}

/// One socket or connection slot: the engine pushes queries, the transport's driver sends
/// them. The engine counts what it handed over and took back (`load`) to respect `capacity`.
#[derive(Debug, Default)]
pub struct Lane {
    queue: RefCell<VecDeque<Token>>,
    wake: Notify,
    load: Cell<u32>,
    capacity: Cell<u32>,
    closing: Cell<bool>,
    policy: Cell<ConnPolicy>,
    /// The current connection: when its attempt started, queries sent on it.
    conn_start: Cell<Option<Instant>>,
    conn_sent: Cell<u64>,
    /// Answers that came back since the current connection's attempt started.
    conn_answers: Cell<u64>,
    /// Last push or release, for the idle policy.
    last_activity: Cell<Option<Instant>>,
    /// Signalled when the lane has nothing outstanding any more (the idle policy's clock starts).
    drained: Notify,
    /// Signalled to every waiter when the lane closes: the driver and the connections draining
    /// in the background all end then (`wake` wakes the driver alone).
    ended: Notify,
    /// The driver is waiting out a backoff after a failure: new queries would wait too.
    backing_off: Cell<bool>,
    /// A connection attempt began and has neither come up nor failed yet.
    attempting: Cell<bool>,
    /// When the current connection's attempt got its `--conn-rate` slot, if it had to wait.
    slot_waited: Cell<Option<Instant>>,
    /// Why the driver cannot send the lane's queries now, and since when ([`Lane::note_wait`]).
    stall: Cell<Option<(Wait, Instant)>>,
    /// How long the lane was stalled before the current stall, ns; and why it stalled last.
    stalled_ns: Cell<u64>,
    last_wait: Cell<Option<Wait>>,
    /// Connection attempts begun so far.
    attempts: Cell<u64>,
}

impl Lane {
    pub fn new() -> Lane {
        Lane { capacity: Cell::new(1), ..Default::default() }
    }

    /// A lane whose connections follow `policy`.
    pub fn with_policy(policy: ConnPolicy) -> Lane {
        let l = Lane::new();
        l.policy.set(policy);
        l
    }

    pub fn policy(&self) -> ConnPolicy {
        self.policy.get()
    }

    pub fn set_policy(&self, p: ConnPolicy) {
        self.policy.set(p);
    }

    /// Hands a query to the driver.
    #[inline]
    pub fn push(&self, t: Token) {
        let was_empty = {
            let mut q = self.queue.borrow_mut();
            q.push_back(t);
            q.len() == 1
        };
        self.load.set(self.load.get() + 1);
        if self.policy.get().idle.is_some() {
            self.last_activity.set(Some(Instant::now()));
        }
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// Puts queries that a connection left unanswered back at the head of the queue, in their
    /// order, for the next connection (they are still part of the lane's load).
    pub fn requeue(&self, tokens: &[Token]) {
        if tokens.is_empty() {
            return;
        }
        {
            let mut q = self.queue.borrow_mut();
            for &t in tokens.iter().rev() {
                q.push_front(t);
            }
        }
        self.wake.notify_one();
    }

    /// Next query to send on the current connection, if any (driver side). None also when
    /// the connection has spent its budget (queries or lifetime): the query waits for the next.
    #[inline]
    pub fn pop(&self) -> Option<Token> {
        if self.spent() {
            if !self.queue.borrow().is_empty() {
                self.note_wait(Some(Wait::Rotation));
            }
            return None;
        }
        let t = self.queue.borrow_mut().pop_front()?;
        self.conn_sent.set(self.conn_sent.get() + 1);
        // The connection takes queries again (its policy changed): no longer waiting for the next.
        self.end_wait(Wait::Rotation);
        Some(t)
    }

    /// Whether the current connection still takes new queries (its budget is not spent).
    #[inline]
    pub fn accepting(&self) -> bool {
        !self.spent()
    }

    /// Whether [`Lane::pop`] would hand out a query now.
    #[inline]
    pub fn has_work(&self) -> bool {
        !self.queue.borrow().is_empty() && !self.spent()
    }

    /// Queries waiting to be sent.
    pub fn queued(&self) -> usize {
        self.queue.borrow().len()
    }

    /// Takes every waiting query (to fail them when connecting failed).
    pub fn take_queued(&self) -> Vec<Token> {
        self.queue.borrow_mut().drain(..).collect()
    }

    /// A query handed to this lane ended (any fate).
    #[inline]
    pub fn release(&self) {
        self.load.set(self.load.get().saturating_sub(1));
        let p = self.policy.get();
        if p.is_none() {
            return;
        }
        if p.idle.is_some() {
            self.last_activity.set(Some(Instant::now()));
            if self.load.get() == 0 {
                self.drained.notify_one();
            }
        }
    }

    /// A query handed to this lane was answered (the engine calls this besides
    /// [`Lane::release`]).
    #[inline]
    pub fn answered(&self) {
        self.conn_answers.set(self.conn_answers.get() + 1);
    }

    /// Answers since the current connection's attempt started.
    pub fn conn_answers(&self) -> u64 {
        self.conn_answers.get()
    }

    /// Queries handed over and not yet ended.
    #[inline]
    pub fn load(&self) -> u32 {
        self.load.get()
    }

    /// Queries sent on the current connection and not yet ended.
    pub fn in_flight(&self) -> u32 {
        self.load.get().saturating_sub(self.queued() as u32)
    }

    #[inline]
    pub fn has_room(&self) -> bool {
        self.load.get() < self.capacity.get()
    }

    pub fn capacity(&self) -> u32 {
        self.capacity.get()
    }

    pub fn set_capacity(&self, c: u32) {
        self.capacity.set(c.max(1));
    }

    /// Waits until a query is pushed or the lane is told to close.
    pub async fn wait(&self) {
        self.wake.notified().await
    }

    /// Asks the driver to close its connection and end.
    pub fn close(&self) {
        self.closing.set(true);
        self.wake.notify_one();
        self.drained.notify_one();
        self.ended.notify_waiters();
    }

    pub fn closing(&self) -> bool {
        self.closing.get()
    }

    /// Resolves when the lane is told to close (any number of tasks may wait).
    pub async fn closed(&self) {
        let ended = self.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if self.closing() {
            return;
        }
        ended.await
    }

    /// A new connection attempt starts: its budget is fresh, and it is in progress until
    /// [`Lane::settle_attempt`].
    pub fn begin_connection(&self) {
        self.attempts.set(self.attempts.get() + 1);
        self.note_wait(Some(self.opening_wait()));
        self.attempting.set(true);
        self.conn_sent.set(0);
        self.conn_answers.set(0);
        let now = Instant::now();
        self.conn_start.set(Some(now));
        if self.policy.get().idle.is_some() {
            self.last_activity.set(Some(now));
        }
    }

    /// The attempt begun last came up or failed (the engine calls this when the driver
    /// reports either).
    pub fn settle_attempt(&self) {
        self.attempting.set(false);
        self.end_wait(Wait::Connecting);
        self.end_wait(Wait::Setup);
    }

    /// Whether a connection attempt is in progress: begun, neither up nor failed yet.
    pub fn attempting(&self) -> bool {
        self.attempting.get()
    }

    /// When the current connection's attempt got its `--conn-rate` slot, None when it did not
    /// wait for one: queries in the lane before then were held back by the cap.
    pub fn slot_waited(&self) -> Option<Instant> {
        self.slot_waited.get()
    }

    pub(crate) fn set_slot_waited(&self, at: Option<Instant>) {
        self.slot_waited.set(at);
    }

    /// Whether the lane can send soon: not waiting out a backoff (the engine prefers such lanes).
    #[inline]
    pub fn ready(&self) -> bool {
        !self.backing_off.get()
    }

    pub(crate) fn set_backing_off(&self, on: bool) {
        self.backing_off.set(on);
        if on {
            self.note_wait(Some(Wait::Backoff));
        } else {
            self.end_wait(Wait::Backoff);
        }
    }

    /// The driver notes why it cannot send the lane's queries now (Some: a connection being
    /// opened, no stream credit...), or that it can again (None). Queries in the lane
    /// meanwhile wait for the transport, not for the generator ([`Lane::waited`]).
    #[inline]
    pub fn note_wait(&self, why: Option<Wait>) {
        let cur = self.stall.get();
        if cur.map(|(w, _)| w) == why {
            return;
        }
        let now = Instant::now();
        if let Some((_, since)) = cur {
            self.stalled_ns.set(self.stalled_ns.get() + now.saturating_duration_since(since).as_nanos() as u64);
        }
        self.stall.set(why.map(|w| (w, now)));
        if why.is_some() {
            self.last_wait.set(why);
        }
    }

    /// Ends the current stall if it is for `why`.
    #[inline]
    pub fn end_wait(&self, why: Wait) {
        if self.stall.get().is_some_and(|(w, _)| w == why) {
            self.note_wait(None);
        }
    }

    /// What a query waits for while the current connection is being set up: the run's set-up
    /// on the lane's first connection, a connection being opened on a later one.
    pub fn opening_wait(&self) -> Wait {
        if self.attempts.get() <= 1 {
            Wait::Setup
        } else {
            Wait::Connecting
        }
    }

    /// How long the lane has been stalled so far in all (ns, the current stall included), and
    /// why it stalled last: a query waited for its transport the difference between two
    /// readings, one when it was handed over and one when it left.
    #[inline]
    pub fn waited(&self) -> (u64, Option<Wait>) {
        let mut ns = self.stalled_ns.get();
        if let Some((_, since)) = self.stall.get() {
            ns += since.elapsed().as_nanos() as u64;
        }
        (ns, self.last_wait.get())
    }

    /// The current connection has sent its last query (by count or by age).
    #[inline]
    fn spent(&self) -> bool {
        let p = self.policy.get();
        if p.max_queries.is_some_and(|m| self.conn_sent.get() >= m) {
            return true;
        }
        match (p.lifetime, self.conn_start.get()) {
            (Some(l), Some(s)) => s.elapsed() >= l,
            _ => false,
        }
    }

    /// Whether the client should end the current connection now, and how. A spent connection
    /// ends at once, whatever it still has outstanding: the driver lets it drain those queries
    /// in the background (`stream::Drain`) while the lane's new queries go on its next
    /// connection, so that no query waits for another's fate.
    pub fn turn(&self) -> Option<Close> {
        let p = self.policy.get();
        if self.spent() {
            return Some(Close::ClientLifetime);
        }
        if let (Some(idle), Some(last)) = (p.idle, self.last_activity.get()) {
            if self.load.get() == 0 && last.elapsed() >= idle {
                return Some(Close::ClientIdle);
            }
        }
        None
    }

    /// What a driver awaits when it has nothing to send: a new query (None), or the moment
    /// the policy ends the connection (Some: close it gracefully, or let it drain what it has
    /// outstanding, report how, open another — after [`Close::ClientIdle`], only when the next
    /// query comes: [`Lane::wait_for_work`]).
    pub async fn wait_turn(&self) -> Option<Close> {
        if let Some(c) = self.turn() {
            return Some(c);
        }
        let p = self.policy.get();
        if p.is_none() {
            self.wake.notified().await;
            return None;
        }
        // The next moment the policy could end the connection.
        let now = Instant::now();
        let mut at: Option<Instant> = None;
        if let (Some(l), Some(s)) = (p.lifetime, self.conn_start.get()) {
            if !self.spent() {
                at = Some(s + l);
            }
        }
        if let (Some(idle), Some(last)) = (p.idle, self.last_activity.get()) {
            if self.load.get() == 0 {
                let t = last + idle;
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        }
        let sleep = async {
            match at {
                Some(t) if t > now => tokio::time::sleep_until(t.into()).await,
                Some(_) => {}
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.wake.notified() => None,
            _ = self.drained.notified() => self.turn(),
            _ = sleep => self.turn(),
        }
    }

    /// After an idle close: waits until a query comes (true) or the lane closes (false).
    pub async fn wait_for_work(&self) -> bool {
        loop {
            if self.closing() {
                return false;
            }
            if self.queued() > 0 {
                return true;
            }
            self.wake.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_budget_spent_ends_the_connection_at_once() {
        let l = Lane::with_policy(ConnPolicy { max_queries: Some(2), ..Default::default() });
        l.set_capacity(10);
        l.begin_connection();
        for t in 1..=3 {
            l.push(t);
        }
        assert_eq!(l.pop(), Some(1));
        assert_eq!(l.pop(), Some(2));
        assert_eq!(l.pop(), None, "budget of 2 spent");
        assert!(!l.has_work());
        // Two still in flight: the connection ends now all the same (they drain on it).
        assert_eq!(l.turn(), Some(Close::ClientLifetime));
        l.begin_connection();
        assert_eq!(l.pop(), Some(3), "the next connection takes the waiting query at once");
        assert_eq!(l.in_flight(), 3);
    }

    #[test]
    fn no_policy_never_turns() {
        let l = Lane::new();
        l.begin_connection();
        l.push(1);
        assert_eq!(l.pop(), Some(1));
        l.release();
        assert_eq!(l.turn(), None);
    }

    #[test]
    fn waits_add_up_and_keep_their_cause() {
        let l = Lane::new();
        assert_eq!(l.waited(), (0, None));
        l.begin_connection();
        std::thread::sleep(Duration::from_millis(2));
        let (a, why) = l.waited();
        assert!(a >= 2_000_000, "{a}");
        assert_eq!(why, Some(Wait::Setup), "the lane's first connection");
        l.settle_attempt();
        l.begin_connection();
        assert_eq!(l.waited().1, Some(Wait::Connecting), "a later one");
        // Another cause's end leaves the stall alone; its own ends it.
        l.end_wait(Wait::StreamCredit);
        assert!(l.waited().0 > a);
        l.settle_attempt();
        let (b, _) = l.waited();
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(l.waited(), (b, Some(Wait::Connecting)), "no stall: no time added");
        l.note_wait(Some(Wait::StreamCredit));
        l.note_wait(None);
        assert_eq!(l.waited().1, Some(Wait::StreamCredit));
    }

    #[test]
    fn a_spent_connection_with_work_waits_for_rotation() {
        let l = Lane::with_policy(ConnPolicy { max_queries: Some(1), ..Default::default() });
        l.set_capacity(10);
        l.begin_connection();
        l.settle_attempt();
        l.push(1);
        l.push(2);
        assert_eq!(l.pop(), Some(1));
        assert_eq!(l.pop(), None);
        assert_eq!(l.waited().1, Some(Wait::Rotation));
        l.begin_connection();
        assert_eq!(l.waited().1, Some(Wait::Connecting));
        l.settle_attempt();
        // A policy that no longer spends the connection ends the wait at the next query out.
        assert_eq!(l.pop(), Some(2));
        l.push(3);
        assert_eq!(l.pop(), None);
        l.set_policy(ConnPolicy::default());
        assert_eq!(l.pop(), Some(3));
        let (a, _) = l.waited();
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(l.waited().0, a, "the stall ended");
    }

    #[test]
    fn idle_turns_when_nothing_outstanding() {
        let l = Lane::with_policy(ConnPolicy { idle: Some(Duration::from_millis(1)), ..Default::default() });
        l.begin_connection();
        std::thread::sleep(Duration::from_millis(3));
        assert_eq!(l.turn(), Some(Close::ClientIdle));
        l.push(1);
        assert_eq!(l.turn(), None);
    }
}
