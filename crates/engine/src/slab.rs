//! The queries of one worker that still wait for a fate: a slab of fixed-size entries,
//! addressed by tokens that carry a generation so that a stale token never matches.

use volley_transport::Token;

#[derive(Debug, Clone, Copy, Default)]
pub struct Entry {
    pub(crate) gen: u32,
    pub(crate) live: bool,
    /// Lane (socket or connection slot) the query was handed to.
    pub lane: u32,
    /// Query index in the query set, and the seed of its random label.
    pub query: u32,
    pub seed: u64,
    /// Scheduled send time (open loop) or issue time (closed loop); latency counts from here.
    pub scheduled: u64,
    /// Question key to match the response against (0 until written, for random labels).
    pub key: u64,
    /// Times sent again: after a connection ended without its answer (`--resend`), after a
    /// UDP retry's delay without one (`--udp-retry`), over TCP after a truncated answer.
    pub resent: u16,
    /// The DNS ID of its latest send (an answer under another answers an earlier UDP send).
    pub id: u16,
    /// Waiting to be sent again after a connection ended without its answer with this error
    /// kind (None once it has left again): if its deadline comes first, it fails with it.
    pub again: Option<volley_metrics::ErrorKind>,
    /// Its lane's total stall time when the query was handed to it ([`volley_transport::Lane::waited`]).
    pub lane_mark: u64,
    /// Time it waited for its transport after it left the lane (a QUIC stream), and why.
    pub waited_ns: u64,
    pub waited_for: Option<volley_metrics::Wait>,
    /// It left and has no fate yet (counted in the worker's queries on the wire).
    pub on_wire: bool,
    /// When the query is given up (timed out, or unsent if it never left).
    pub deadline: u64,
    /// A transport took it from its lane and wrote it out (`Exchange::encode`).
    pub handed: bool,
    /// It left the generator (`Exchange::sent`), at least once.
    pub left: bool,
    /// When its first transmission left: by volley's clock after the send (`Exchange::sent`),
    /// and by the kernel's transmit stamp (`Exchange::stamped`; 0 until one comes). A query
    /// sent again keeps these: its service time counts from its first send.
    pub sent_at: u64,
    pub wire_at: u64,
    /// Its departure was recorded (the generator's delay, and how it was timed).
    pub timed: bool,
    /// A UDP retry of it waits in its lane: counted as a send again when it leaves.
    pub retx: bool,
    /// Its id in the worker's query trace (`--trace-queries`); 0: not traced.
    pub trace: u32,
}

/// The entries, and beside them each slot's tag: its generation while live, 0 while free.
/// A token is checked against the tags alone (4 bytes a slot, 16 to a cache line), so that the
/// checks of the hot path (is a query still live? the deadline sweep's look at a query answered
/// a timeout ago) touch a small array rather than an entry of its own cache lines each.
#[derive(Debug, Default)]
pub struct Slab {
    entries: Vec<Entry>,
    tags: Vec<u32>,
    free: Vec<u32>,
    live: usize,
}

impl Slab {
    #[inline]
    pub fn insert(&mut self, mut e: Entry) -> Token {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(Entry::default());
                self.tags.push(0);
                (self.entries.len() - 1) as u32
            }
        };
        let slot = &mut self.entries[idx as usize];
        // Generation 0 marks a free slot in the tags: never given.
        e.gen = match slot.gen.wrapping_add(1) {
            0 => 1,
            g => g,
        };
        e.live = true;
        *slot = e;
        self.tags[idx as usize] = e.gen;
        self.live += 1;
        ((e.gen as u64) << 32) | (idx as u64 + 1)
    }

    #[inline]
    fn index(&self, t: Token) -> Option<usize> {
        let idx = (t as u32).checked_sub(1)? as usize;
        let gen = (t >> 32) as u32;
        (gen != 0 && *self.tags.get(idx)? == gen).then_some(idx)
    }

    #[inline]
    pub fn contains(&self, t: Token) -> bool {
        self.index(t).is_some()
    }

    #[inline]
    pub fn get_mut(&mut self, t: Token) -> Option<&mut Entry> {
        let i = self.index(t)?;
        Some(&mut self.entries[i])
    }

    #[inline]
    pub fn remove(&mut self, t: Token) -> Option<Entry> {
        let i = self.index(t)?;
        let e = &mut self.entries[i];
        e.live = false;
        self.tags[i] = 0;
        self.free.push(i as u32);
        self.live -= 1;
        Some(*e)
    }

    pub fn live(&self) -> usize {
        self.live
    }

    /// The entries still waiting for a fate.
    pub fn iter_live(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_tokens_never_match() {
        let mut s = Slab::default();
        let a = s.insert(Entry { lane: 1, ..Default::default() });
        assert_ne!(a, 0);
        assert!(s.contains(a));
        assert_eq!(s.remove(a).map(|e| e.lane), Some(1));
        assert!(!s.contains(a));
        let b = s.insert(Entry::default());
        assert_ne!(a, b, "same slot, new generation");
        assert!(s.remove(a).is_none());
        assert!(!s.contains(0));
        assert_eq!(s.live(), 1);
    }

    /// A slot's generation wraps round past 0 (which marks a free slot): its tokens still
    /// match while live and never after.
    #[test]
    fn generations_wrap_past_zero() {
        let mut s = Slab::default();
        let a = s.insert(Entry::default());
        s.remove(a);
        s.entries[0].gen = u32::MAX;
        let before = (u64::from(u32::MAX) << 32) | 1;
        let b = s.insert(Entry { lane: 7, ..Default::default() });
        assert_eq!(b >> 32, 1, "generation 0 skipped");
        assert!(s.contains(b) && !s.contains(before));
        assert_eq!(s.get_mut(b).map(|e| e.lane), Some(7));
        assert_eq!(s.remove(b).map(|e| e.lane), Some(7));
        assert!(!s.contains(b));
        assert!(!s.contains(1), "a token of generation 0 never matches");
        assert_eq!(s.live(), 0);
    }
}
