//! Answers held back by a delay rule (`--delay`, `delay-…` labels), kept in a min-heap
//! (`BinaryHeap<Reverse<Delayed<T>>>`) in the order they are due; `seq` keeps answers due at
//! the same instant in the order they were made.

use std::cmp::Ordering;

/// One held answer: when it is due (`I`: the transport's clock, std's or tokio's `Instant`),
/// its place in line, and what the transport sends then.
pub(crate) struct Delayed<T, I = std::time::Instant> {
    pub due: I,
    pub seq: u64,
    pub item: T,
}

impl<T, I: Ord> PartialEq for Delayed<T, I> {
    fn eq(&self, o: &Self) -> bool {
        self.due == o.due && self.seq == o.seq
    }
}

impl<T, I: Ord> Eq for Delayed<T, I> {}

impl<T, I: Ord> PartialOrd for Delayed<T, I> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl<T, I: Ord> Ord for Delayed<T, I> {
    fn cmp(&self, o: &Self) -> Ordering {
        self.due.cmp(&o.due).then(self.seq.cmp(&o.seq))
    }
}
