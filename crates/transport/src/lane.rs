use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use tokio::sync::Notify;

use crate::Token;

/// One socket or connection slot: the engine pushes queries, the transport's driver sends
/// them. The engine counts what it handed over and took back (`load`) to respect `capacity`.
#[derive(Debug, Default)]
pub struct Lane {
    queue: RefCell<VecDeque<Token>>,
    wake: Notify,
    load: Cell<u32>,
    capacity: Cell<u32>,
    closing: Cell<bool>,
}

impl Lane {
    pub fn new() -> Lane {
        Lane { capacity: Cell::new(1), ..Default::default() }
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
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// Next query to send, if any (driver side).
    #[inline]
    pub fn pop(&self) -> Option<Token> {
        self.queue.borrow_mut().pop_front()
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
    }

    /// Queries handed over and not yet ended.
    #[inline]
    pub fn load(&self) -> u32 {
        self.load.get()
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
    }

    pub fn closing(&self) -> bool {
        self.closing.get()
    }
}
