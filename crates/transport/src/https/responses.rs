//! The HTTP/2 responses a DoH lane waits for, all awaited by one task.
//!
//! A task and a timer per request cost an allocation, a timer-wheel entry and a scheduling
//! round each; here one task per lane holds every open stream in a slab, and each slot has a
//! waker of its own (made once, reused) that marks the slot ready, so a wake-up polls only the
//! streams that moved. Streams whose query has ended in the engine (timed out) are dropped by
//! a sweep, which resets them (RST_STREAM) and frees their place under the server's stream
//! limit. A query whose stream the server refused unprocessed (REFUSED_STREAM), or whose
//! connection ended before its answer (GOAWAY above its stream, a close), goes back to the
//! lane to be sent again ([`stream::unanswered`]).

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::client::ResponseFuture;
use h2::RecvStream;
use volley_metrics::ErrorKind;

use super::{check_head, h2_kind, MAX_MESSAGE};
use crate::stamp::RxStamp;
use crate::stream;
use crate::{Exchange, Lane, Token};

/// Slots marked ready by their wakers, and the collecting task to wake.
#[derive(Default)]
struct ReadyList {
    slots: Mutex<(Vec<u32>, Option<Waker>)>,
}

impl ReadyList {
    fn mark(&self, slot: u32) {
        let task = {
            let mut g = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let first = g.0.is_empty();
            g.0.push(slot);
            // Only the first mark since the task last ran needs to wake it.
            if first {
                g.1.take()
            } else {
                None
            }
        };
        if let Some(t) = task {
            t.wake();
        }
    }
}

/// The waker of one slot.
struct SlotWaker {
    slot: u32,
    list: Arc<ReadyList>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.list.mark(self.slot);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.list.mark(self.slot);
    }
}

/// Where one response stands.
enum State {
    Head(ResponseFuture),
    Body { body: RecvStream, first: Option<Bytes>, more: Option<BytesMut> },
}

struct Waiting {
    token: Token,
    state: State,
    /// The receive time of its connection's socket: a response is complete when the read
    /// that brought its end came in.
    rx: RxStamp,
    /// Outstanding on its connection until dropped.
    on: stream::OnConn,
}

impl Waiting {
    /// Polls the response on; Ready with the whole DNS message or the error kind.
    fn poll<X: Exchange + ?Sized>(&mut self, cx: &mut Context<'_>, x: &X) -> Poll<Result<Bytes, ErrorKind>> {
        loop {
            match &mut self.state {
                State::Head(resp) => {
                    let resp = match Pin::new(resp).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(h2_kind(&e))),
                        Poll::Ready(Ok(r)) => r,
                    };
                    if let Err(k) = check_head(x, resp.status(), resp.headers()) {
                        return Poll::Ready(Err(k));
                    }
                    self.state = State::Body { body: resp.into_body(), first: None, more: None };
                }
                State::Body { body, first, more } => {
                    let chunk = match body.poll_data(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(None) => {
                            return Poll::Ready(Ok(match more.take() {
                                Some(m) => m.freeze(),
                                None => first.take().unwrap_or_default(),
                            }))
                        }
                        Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(h2_kind(&e))),
                        Poll::Ready(Some(Ok(c))) => c,
                    };
                    let _ = body.flow_control().release_capacity(chunk.len());
                    match (first.as_ref(), more.as_mut()) {
                        (None, _) => *first = Some(chunk),
                        (Some(f), None) => {
                            let mut m = BytesMut::with_capacity(f.len() + chunk.len());
                            m.extend_from_slice(f);
                            m.extend_from_slice(&chunk);
                            *more = Some(m);
                        }
                        (Some(_), Some(m)) => m.extend_from_slice(&chunk),
                    }
                    if more.as_ref().map_or(0, |m| m.len()) > MAX_MESSAGE {
                        return Poll::Ready(Err(ErrorKind::Malformed));
                    }
                }
            }
        }
    }
}

struct Inner {
    waiting: Vec<Option<Waiting>>,
    wakers: Vec<Waker>,
    free: Vec<u32>,
    open: usize,
    /// The lane is done: drop everything, end the task.
    closed: bool,
}

/// The responses of one lane (see the module's documentation).
#[derive(Clone)]
pub(crate) struct Responses {
    inner: Rc<RefCell<Inner>>,
    list: Arc<ReadyList>,
    /// Signalled when a stream ends (answered, failed or dropped).
    freed: Rc<tokio::sync::Notify>,
}

impl Responses {
    /// Starts the task that awaits the responses of `lane`; `sweep` is how often streams of
    /// ended queries are dropped.
    pub(crate) fn start<X: Exchange + 'static>(x: Rc<X>, lane: Rc<Lane>, sweep: Duration) -> Responses {
        let r = Responses {
            inner: Rc::new(RefCell::new(Inner {
                waiting: Vec::new(),
                wakers: Vec::new(),
                free: Vec::new(),
                open: 0,
                closed: false,
            })),
            list: Arc::default(),
            freed: Rc::default(),
        };
        tokio::task::spawn_local(r.clone().run(x, lane, sweep));
        r
    }

    /// Awaits the response to query `token`, timed by `rx` (its connection's socket's
    /// receive times), outstanding on its connection (`on`) until it ends.
    pub(crate) fn push(&self, token: Token, resp: ResponseFuture, rx: RxStamp, on: stream::OnConn) {
        let slot = {
            let mut inn = self.inner.borrow_mut();
            let w = Waiting { token, state: State::Head(resp), rx, on };
            inn.open += 1;
            match inn.free.pop() {
                Some(s) => {
                    inn.waiting[s as usize] = Some(w);
                    s
                }
                None => {
                    let s = inn.waiting.len() as u32;
                    inn.waiting.push(Some(w));
                    inn.wakers.push(Waker::from(Arc::new(SlotWaker { slot: s, list: self.list.clone() })));
                    s
                }
            }
        };
        // Polled first on the task's next turn, which registers the slot's waker with h2.
        self.list.mark(slot);
    }

    /// Resolves once a stream has ended since the last call.
    pub(crate) async fn freed(&self) {
        self.freed.notified().await
    }

    /// Ends the task, dropping (resetting) what it still awaits.
    pub(crate) fn close(&self) {
        self.inner.borrow_mut().closed = true;
        self.list.mark(u32::MAX);
    }

    async fn run<X: Exchange>(self, x: Rc<X>, lane: Rc<Lane>, sweep: Duration) {
        let mut ready = Vec::new();
        let timer = tokio::time::sleep(sweep);
        tokio::pin!(timer);
        let mut armed = false;
        poll_fn(|cx| {
            {
                let mut g = self.list.slots.lock().unwrap_or_else(|e| e.into_inner());
                std::mem::swap(&mut g.0, &mut ready);
                g.1 = Some(cx.waker().clone());
            }
            let mut inn = self.inner.borrow_mut();
            if inn.closed {
                inn.waiting.clear();
                return Poll::Ready(());
            }
            for &s in &ready {
                let inn_ = &mut *inn;
                let Some(w) = inn_.waiting.get_mut(s as usize).and_then(Option::as_mut) else { continue };
                let r = w.poll(&mut Context::from_waker(&inn_.wakers[s as usize]), &*x);
                let Poll::Ready(r) = r else { continue };
                let Some(mut w) = inn.waiting[s as usize].take() else { continue };
                inn.free.push(s);
                inn.open -= 1;
                self.freed.notify_one();
                // The departures first: the answer's time needs them.
                w.rx.read_sent(&*x);
                let now = w.rx.arrival(&*x);
                // The engine is called with no borrow held: it may issue more queries.
                drop(inn);
                match r {
                    Ok(msg) => {
                        w.on.answered();
                        x.response(w.token, &msg, now)
                    }
                    // Sent again when the connection's end left it unanswered, else failed.
                    Err(kind) => stream::unanswered(&lane, &*x, &[w.token], kind),
                }
                inn = self.inner.borrow_mut();
            }
            ready.clear();
            // Streams of queries the engine has ended (timed out) are dropped now and then.
            if armed && timer.as_mut().poll(cx).is_ready() {
                armed = false;
                let inn = &mut *inn;
                for (s, w) in inn.waiting.iter_mut().enumerate() {
                    if w.as_ref().is_some_and(|w| !x.is_live(w.token)) {
                        *w = None;
                        inn.free.push(s as u32);
                        inn.open -= 1;
                        self.freed.notify_one();
                    }
                }
            }
            if !armed && inn.open > 0 {
                armed = true;
                timer.as_mut().reset(tokio::time::Instant::now() + sweep);
                let _ = timer.as_mut().poll(cx);
            }
            Poll::Pending
        })
        .await
    }
}
