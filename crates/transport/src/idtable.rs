use crate::Token;

/// DNS message IDs of one socket or connection, mapped to the engine's tokens.
///
/// Starts small and doubles up to 65,536 entries, so an idle connection costs little. An
/// entry whose query has already ended (timed out) is reused when its ID comes round again.
#[derive(Debug)]
pub struct IdTable {
    slots: Vec<Token>,
    next: usize,
    used: usize,
    /// Entries looked at by `insert` (tests: the cost of finding an ID).
    #[cfg(test)]
    probes: u64,
}

impl Default for IdTable {
    fn default() -> Self {
        Self::with_capacity(16)
    }
}

impl IdTable {
    pub fn with_capacity(n: usize) -> IdTable {
        let n = n.clamp(1, 65_536).next_power_of_two();
        IdTable {
            slots: vec![0; n],
            next: 0,
            used: 0,
            #[cfg(test)]
            probes: 0,
        }
    }

    /// An ID for `token`, or None when all 65,536 are held by live queries.
    ///
    /// Free IDs are preferred while the table can grow or is less than three quarters used;
    /// past that, at its full 65,536 entries, the scan from the ID after the last one given
    /// also takes an ID whose query already ended (the oldest come first, so a late answer
    /// rarely meets a new query). One pass at most: a table full of ended queries (a server
    /// that answers few of them) costs a step or two per query, not a scan of every ID.
    #[inline]
    pub fn insert(&mut self, token: Token, is_live: impl Fn(Token) -> bool) -> Option<u16> {
        if self.used * 4 >= self.slots.len() * 3 && self.slots.len() < 65_536 {
            self.slots.resize(self.slots.len() * 2, 0);
        }
        let crowded = self.used * 4 >= self.slots.len() * 3;
        let mask = self.slots.len() - 1;
        for _ in 0..self.slots.len() {
            let i = self.next & mask;
            self.next = i.wrapping_add(1);
            let s = self.slots[i];
            #[cfg(test)]
            {
                self.probes += 1;
            }
            if s == 0 || (crowded && !is_live(s)) {
                if s == 0 {
                    self.used += 1;
                }
                self.slots[i] = token;
                return Some(i as u16);
            }
        }
        None
    }

    /// Removes and returns the token of `id`.
    #[inline]
    pub fn remove(&mut self, id: u16) -> Option<Token> {
        let s = self.slots.get_mut(id as usize)?;
        if *s == 0 {
            return None;
        }
        self.used -= 1;
        Some(std::mem::take(s))
    }

    /// Removes every entry, returning the tokens (to fail them when the connection dies).
    pub fn drain(&mut self) -> Vec<Token> {
        self.used = 0;
        self.slots.iter_mut().filter(|s| **s != 0).map(std::mem::take).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// The tokens in the table (answered queries are not; ended ones may be).
    pub fn tokens(&self) -> impl Iterator<Item = Token> + '_ {
        self.slots.iter().copied().filter(|&s| s != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_grow_reuse() {
        let mut t = IdTable::with_capacity(2);
        let live = |_| true;
        let a = t.insert(10, live).unwrap();
        let b = t.insert(11, live).unwrap();
        assert_ne!(a, b);
        for i in 0..100 {
            t.insert(100 + i, live).unwrap();
        }
        assert_eq!(t.remove(a), Some(10));
        assert_eq!(t.remove(a), None);
        assert_eq!(t.drain().len(), 101);
        assert!(t.is_empty());
        // full of dead entries: reused
        let mut t = IdTable::with_capacity(65_536);
        for i in 0..65_536u64 {
            t.insert(i + 1, |_| true).unwrap();
        }
        assert_eq!(t.insert(1_000_000, |_| true), None);
        assert!(t.insert(1_000_000, |tok| tok != 7).is_some());
    }

    /// A full table whose queries have all ended (a server that answers few of them): each
    /// new query looks at one or two entries, not at all 65,536.
    #[test]
    fn a_full_table_of_ended_queries_costs_a_step_per_query() {
        let mut t = IdTable::with_capacity(65_536);
        for i in 0..65_536u64 {
            t.insert(i + 1, |_| true).unwrap();
        }
        let live_from = 65_537u64;
        t.probes = 0;
        for i in 0..10_000u64 {
            assert!(t.insert(live_from + i, |tok| tok >= live_from).is_some());
        }
        assert!(t.probes <= 20_000, "{} entries looked at for 10,000 queries", t.probes);
    }

    /// Below three quarters used, a free ID is taken before an ended query's.
    #[test]
    fn free_ids_first_while_the_table_has_room() {
        let mut t = IdTable::with_capacity(65_536);
        let a = t.insert(1, |_| true).unwrap();
        let b = t.insert(2, |_| false).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.remove(b), Some(2));
    }
}
