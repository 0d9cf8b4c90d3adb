//! The names of a compiled zone, laid out for answering: every node (its name, flags and
//! pre-encoded RRsets) one after the other in one buffer, found through an open-addressing
//! table of 8-octet slots. A question that names a record costs two memory reads that miss the
//! caches (its slot, then its node: name and RRset are neighbours) where a map of boxed keys
//! and vectors cost four (control bytes, bucket, key, RRset vector); a name the zone does not
//! hold costs its slot only. Both regions are asked for transparent huge pages, so that those
//! reads do not miss the TLB as well, and the zone takes a fifth of the memory it did.
//!
//! A node, at an offset that is a multiple of [`ALIGN`]:
//!
//! ```text
//! name length (1 octet), flags (1: CUT, WILDCARD_CHILD), RRsets (2, little-endian),
//! the name (lowercased wire form), then each RRset:
//!   type (2), type covered (2), targets (2), wire length (4), targets length (4),
//!   the records' tails (TYPE, CLASS, TTL, RDLENGTH, RDATA each), then its targets:
//!   offset in the tails (4), name length (1), the name (lowercased wire form)
//! ```
//!
//! A slot is 0 (empty) or the high 32 bits of the name's hash above the node's offset in
//! units of [`ALIGN`], plus one.

use std::hash::BuildHasher;

use super::load::NodeMap;
use super::{Node, RrSet};

/// Alignment of nodes in the buffer.
const ALIGN: usize = 8;
/// A node of at most this many octets (a name with an A or AAAA record) starts on a new cache
/// line rather than cross one: an answer then reads one line of it.
const LINE: usize = 64;

/// Flags of a node.
const CUT: u8 = 1;
const WILDCARD_CHILD: u8 = 2;

const NODE_FIXED: usize = 4;
pub(crate) const SET_FIXED: usize = 14;

/// Room for a node with a name this long, its padding included; its RRsets ([`SET_FIXED`]
/// each) and their records and targets come on top.
pub(crate) fn node_room(name_len: usize) -> usize {
    NODE_FIXED + name_len + ALIGN + LINE
}

/// The hash of names: foldhash with a fixed seed (the table is built once from the zone file;
/// questions only look up, so they cannot lengthen its probe sequences), the same on every run
/// so that two loads of one zone compare equal.
const HASH: foldhash::fast::FixedState = foldhash::fast::FixedState::with_seed(0x766f_6c6c_6579);

/// A zone's names: see the module's documentation.
#[derive(Default)]
pub(crate) struct Names {
    nodes: Vec<u8>,
    slots: Vec<u64>,
    len: usize,
    /// Offsets of the apex's node and of its wildcard child's (`*.` the apex), found once
    /// ([`Names::mark_apex`]): every name the zone does not hold right below its apex (the
    /// wildcard's answers, their NODATA) looks both up.
    apex: Option<usize>,
    apex_wildcard: Option<usize>,
}

/// The same names with the same nodes (where they lie in the buffer aside).
impl PartialEq for Names {
    fn eq(&self, other: &Names) -> bool {
        self.len == other.len && self.nodes().all(|n| other.get(n.name()).is_some_and(|o| o.bytes() == n.bytes()))
    }
}

impl Eq for Names {}

/// The zone has more than this buffer can address (32 GiB of nodes).
#[derive(Debug)]
pub(crate) struct TooLarge;

/// Whether two names (or any two short slices) are equal: compared here, eight octets at a
/// time, rather than by a call to the C library's `memcmp`, which for names of twenty octets
/// took a seventh of a zone answer's time (the engine alone, a zone in the caches).
#[inline(always)]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap_or_default());
    let mut at = 0;
    while at + 8 < n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    // The last eight octets (overlapping those compared before, where n is not a multiple of 8).
    word(a, n - 8) == word(b, n - 8)
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn node_size(name: &[u8], node: &Node) -> usize {
    let sets: usize = node
        .sets
        .iter()
        .map(|s| SET_FIXED + s.wire.len() + s.targets.iter().map(|t| 5 + t.name.len()).sum::<usize>())
        .sum();
    (NODE_FIXED + name.len() + sets).next_multiple_of(ALIGN)
}

fn encode_set(out: &mut Vec<u8>, s: &RrSet) {
    let targets: usize = s.targets.iter().map(|t| 5 + t.name.len()).sum();
    out.extend_from_slice(&s.rtype.to_le_bytes());
    out.extend_from_slice(&s.covered.to_le_bytes());
    out.extend_from_slice(&(s.targets.len() as u16).to_le_bytes());
    out.extend_from_slice(&(s.wire.len() as u32).to_le_bytes());
    out.extend_from_slice(&(targets as u32).to_le_bytes());
    out.extend_from_slice(&s.wire);
    for t in s.targets.iter() {
        out.extend_from_slice(&t.at.to_le_bytes());
        out.push(t.name.len() as u8);
        out.extend_from_slice(&t.name);
    }
}

/// One RRset encoded on its own (the negative answers' SOA).
pub(crate) fn encode_one(s: &RrSet) -> Box<[u8]> {
    let mut out = Vec::new();
    encode_set(&mut out, s);
    out.into_boxed_slice()
}

/// Asks the kernel to back this memory with transparent huge pages (before it is written).
fn advise_huge<T>(v: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = v.as_ptr() as usize;
        let end = start + v.capacity() * std::mem::size_of::<T>();
        let from = start.next_multiple_of(HUGE);
        let to = end / HUGE * HUGE;
        if to > from {
            // SAFETY: the range lies inside the vector's allocation; the advice changes how
            // pages are backed, never their contents or the mapping.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
            }
        }
    }
}

/// Asks the CPU to bring the cache line of `v` in (a hint: no fault, no effect on results).
#[inline(always)]
pub(crate) fn prefetch<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing the program sees and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch((v as *const T).cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

impl Names {
    /// Lays the nodes out (dropping the map as it goes); marks the nodes that have a wildcard
    /// child. `room`: the octets they take, padding included, as [`node_room`] and the sizes
    /// of their RRsets count them (were it short, the buffer would grow: slower, still right).
    pub(crate) fn build(nodes: NodeMap, room: usize) -> Result<Names, TooLarge> {
        let len = nodes.len();
        let room = room + LINE;
        if room / ALIGN >= u32::MAX as usize {
            return Err(TooLarge);
        }
        let mut buf: Vec<u8> = Vec::with_capacity(room);
        advise_huge(&buf);
        buf.resize((LINE - buf.as_ptr() as usize % LINE) % LINE, 0);
        let n_slots = (len * 2).next_power_of_two().max(8);
        let mut slots: Vec<u64> = Vec::with_capacity(n_slots);
        advise_huge(&slots);
        slots.resize(n_slots, 0);
        let mask = n_slots - 1;
        let mut wild = Vec::new();
        for (name, node) in nodes {
            let size = node_size(&name, &node);
            let line_at = (buf.as_ptr() as usize + buf.len()) % LINE;
            if size <= LINE && line_at + size > LINE {
                buf.resize(buf.len() + LINE - line_at, 0);
            }
            let at = buf.len();
            buf.push(name.len() as u8);
            buf.push(if node.cut { CUT } else { 0 });
            buf.extend_from_slice(&(node.sets.len() as u16).to_le_bytes());
            buf.extend_from_slice(&name);
            for s in &node.sets {
                encode_set(&mut buf, s);
            }
            buf.resize(buf.len().next_multiple_of(ALIGN), 0);
            let h = HASH.hash_one(&*name);
            let mut i = h as usize & mask;
            while slots[i] != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = (h >> 32) << 32 | (at / ALIGN + 1) as u64;
            if name.starts_with(b"\x01*") {
                wild.push(at);
            }
        }
        debug_assert!(buf.len() <= room, "the reader counted {room} octets for {}", buf.len());
        let mut names = Names { nodes: buf, slots, len, apex: None, apex_wildcard: None };
        for at in wild {
            let name_len = names.nodes[at] as usize;
            let parent = names.nodes[at + NODE_FIXED + 2..at + NODE_FIXED + name_len].to_vec();
            if let Some(p) = names.find(&parent) {
                names.nodes[p + 1] |= WILDCARD_CHILD;
            }
        }
        Ok(names)
    }

    /// Remembers where the node of the zone's apex (lowercased wire form) and that of its
    /// wildcard child lie, for [`Names::apex`] and [`Names::apex_wildcard`].
    pub(crate) fn mark_apex(&mut self, apex: &[u8]) {
        self.apex = self.find(apex);
        let mut wild = b"\x01*".to_vec();
        wild.extend_from_slice(apex);
        self.apex_wildcard = self.find(&wild);
    }

    /// The apex's node (as `get(apex)`, without hashing the name).
    pub(crate) fn apex(&self) -> Option<NodeRef<'_>> {
        self.apex.map(|at| NodeRef { b: &self.nodes[at..] })
    }

    /// The node of `*.` the apex, if the zone has one.
    pub(crate) fn apex_wildcard(&self) -> Option<NodeRef<'_>> {
        self.apex_wildcard.map(|at| NodeRef { b: &self.nodes[at..] })
    }

    /// The number of names.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Offset of the node of `name` (lowercased wire form).
    fn find(&self, name: &[u8]) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let h = HASH.hash_one(name);
        let mask = self.slots.len() - 1;
        let tag = h >> 32;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s >> 32 == tag {
                let at = ((s as u32) as usize - 1) * ALIGN;
                let n = self.nodes[at] as usize;
                if self.nodes.get(at + NODE_FIXED..at + NODE_FIXED + n).is_some_and(|n| same(n, name)) {
                    return Some(at);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The slot where a lookup of a name with this hash starts.
    pub(crate) fn slot_of(&self, h: u64) -> Option<&u64> {
        self.slots.get(h as usize & self.slots.len().wrapping_sub(1))
    }

    /// Asks the CPU to fetch the node of the first slot that holds the hash's tag (reading the
    /// slots that were asked for before); false if no slot holds it (the name is
    /// not in the zone).
    pub(crate) fn prefetch_node(&self, h: u64) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return false;
            }
            if s >> 32 == h >> 32 {
                if let Some(b) = self.nodes.get(((s as u32) as usize - 1) * ALIGN) {
                    prefetch(b);
                }
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    /// The hash of a name (lowercased wire form), as lookups compute it.
    pub(crate) fn hash(name: &[u8]) -> u64 {
        HASH.hash_one(name)
    }

    /// The node of `name` (lowercased wire form).
    pub(crate) fn get(&self, name: &[u8]) -> Option<NodeRef<'_>> {
        self.find(name).map(|at| NodeRef { b: &self.nodes[at..] })
    }

    /// Every node, in no particular order.
    fn nodes(&self) -> impl Iterator<Item = NodeRef<'_>> {
        let mut at = 0;
        std::iter::from_fn(move || {
            // Padding (zeros) before a node; a node's first octet (its name's length) is not 0.
            while *self.nodes.get(at)? == 0 {
                at += ALIGN;
            }
            let node = NodeRef { b: &self.nodes[at..] };
            at += node.bytes().len().next_multiple_of(ALIGN);
            Some(node)
        })
    }

    /// Every name, in no particular order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.nodes().map(NodeRef::name)
    }
}

/// A node in [`Names`].
#[derive(Clone, Copy)]
pub(crate) struct NodeRef<'z> {
    /// From the node's start to the end of the buffer.
    b: &'z [u8],
}

impl<'z> NodeRef<'z> {
    /// The node's bytes (without the padding after it).
    fn bytes(self) -> &'z [u8] {
        &self.b[..self.sets().last().map_or(NODE_FIXED + self.b[0] as usize, |s| s.end)]
    }

    pub(crate) fn name(self) -> &'z [u8] {
        &self.b[NODE_FIXED..NODE_FIXED + self.b[0] as usize]
    }

    /// NS records below the apex: a zone cut; this node and every name below it belong to
    /// another zone (only DS is answered here).
    pub(crate) fn cut(self) -> bool {
        self.b[1] & CUT != 0
    }

    /// Whether the zone holds `*.` this name.
    pub(crate) fn wildcard_child(self) -> bool {
        self.b[1] & WILDCARD_CHILD != 0
    }

    /// The node's RRsets, in the order they were read.
    pub(crate) fn sets(self) -> Sets<'z> {
        Sets { b: self.b, at: NODE_FIXED + self.b[0] as usize, left: le16(self.b, 2) }
    }

    /// The RRset of this type (not RRSIG: those are one set per type covered).
    pub(crate) fn get(self, rtype: u16) -> Option<SetRef<'z>> {
        // The sets' fixed parts only, until the one wanted (building each SetRef on the way
        // cost more than the rest of the lookup of a name with one set).
        let mut at = NODE_FIXED + self.b[0] as usize;
        for _ in 0..le16(self.b, 2) {
            if le16(self.b, at) == rtype && le16(self.b, at + 2) == 0 {
                return Some(SetRef::at(self.b, at));
            }
            at += SET_FIXED + le32(self.b, at + 6) as usize + le32(self.b, at + 10) as usize;
        }
        None
    }
}

/// The RRsets of a node.
pub(crate) struct Sets<'z> {
    b: &'z [u8],
    at: usize,
    left: u16,
}

impl<'z> Iterator for Sets<'z> {
    type Item = SetRef<'z>;
    fn next(&mut self) -> Option<SetRef<'z>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let s = SetRef::at(self.b, self.at);
        self.at = s.end;
        Some(s)
    }
}

/// An RRset: for each record TYPE, CLASS, TTL, RDLENGTH and RDATA (the owner name is written
/// in front of each when answering), and the names in their RDATA that answers follow.
#[derive(Clone, Copy)]
pub(crate) struct SetRef<'z> {
    pub(crate) rtype: u16,
    /// The records' tails, one after the other.
    pub(crate) wire: &'z [u8],
    n_targets: u16,
    targets: &'z [u8],
    /// Offset of the end of the set in the buffer it was read from.
    end: usize,
}

impl<'z> SetRef<'z> {
    /// The set encoded at `at` in `b`.
    #[inline]
    pub(crate) fn at(b: &'z [u8], at: usize) -> SetRef<'z> {
        let wire_len = le32(b, at + 6) as usize;
        let targets_len = le32(b, at + 10) as usize;
        let w = at + SET_FIXED;
        let t = w + wire_len;
        SetRef {
            rtype: le16(b, at),
            n_targets: le16(b, at + 4),
            wire: &b[w..t],
            targets: &b[t..t + targets_len],
            end: t + targets_len,
        }
    }

    /// Names in the RDATA that answers follow (CNAME, NS, MX, SRV targets), in the order of
    /// the records.
    pub(crate) fn targets(self) -> Targets<'z> {
        Targets { b: self.targets, left: self.n_targets }
    }
}

/// A name inside a record's RDATA.
#[derive(Clone, Copy)]
pub(crate) struct TargetRef<'z> {
    /// Offset of the name (uncompressed wire form) in [`SetRef::wire`].
    pub(crate) at: u32,
    /// The name, lowercased.
    pub(crate) name: &'z [u8],
}

/// The targets of an RRset.
#[derive(Clone)]
pub(crate) struct Targets<'z> {
    b: &'z [u8],
    left: u16,
}

impl<'z> Iterator for Targets<'z> {
    type Item = TargetRef<'z>;
    fn next(&mut self) -> Option<TargetRef<'z>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let n = self.b[4] as usize;
        let t = TargetRef { at: le32(self.b, 0), name: &self.b[5..5 + n] };
        self.b = &self.b[5 + n..];
        Some(t)
    }
}
