//! Zones: what `volley serve --zone FILE` answers from.
//!
//! A zone file (RFC 1035 master file) is read at start by NLnet Labs' zone file scanner (the
//! `domain` crate: `$ORIGIN`, `$TTL`, `$INCLUDE`, relative names, every common record type and
//! RFC 3597's `TYPEnnn` / `\# len hex` for the others) and compiled into volley's own lookup
//! structure ([`load`], then `names.rs`): every owner name (lowercased wire form) with its node in
//! one buffer, found by an open-addressing hash table; a node's RRsets are pre-encoded (TYPE,
//! CLASS, TTL, RDLENGTH and RDATA of each record, ready to copy behind a compressed owner name),
//! with the names in their RDATA that answers follow (CNAME targets, NS, MX and SRV targets for
//! the additional section) kept apart. Empty non-terminals are nodes too, so that "does this
//! name exist" is one lookup, and a node knows whether it has a wildcard child.
//!
//! The answer engine asks [`Zones::find`] for the zone of each question (one hash lookup per
//! distinct apex depth); [`Zone::answer`] (in `answer.rs`) then writes what an authoritative
//! server answers, without allocating: see docs/serve.md, "Zones".

mod answer;
mod load;
mod names;

use std::collections::HashMap;
use std::fmt;
use std::mem::MaybeUninit;

pub use answer::ZoneAnswer;
pub use load::{load, ZoneError};

/// RR types the zone code looks at.
pub(crate) mod rr {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const MX: u16 = 15;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const DS: u16 = 43;
    pub const RRSIG: u16 = 46;
    pub const NSEC: u16 = 47;
    pub const DNSKEY: u16 = 48;
    pub const NSEC3: u16 = 50;
    pub const ANY: u16 = 255;
}

/// The zones served, found by their apex.
/// Up to this many zones, [`Zones::find`] compares each apex with the name's suffix rather than
/// looking suffixes up in the map.
const SCAN_ZONES: usize = 8;

#[derive(Default, PartialEq, Eq)]
pub struct Zones {
    zones: Vec<Zone>,
    /// Lowercased wire apex → index in `zones`.
    by_apex: HashMap<Box<[u8]>, usize, foldhash::fast::FixedState>,
    /// The distinct label counts of the apexes, deepest first: a name is looked up at these
    /// depths only, and the deepest zone that holds it wins.
    depths: Vec<u8>,
}

impl fmt::Debug for Zones {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.zones.iter().map(|z| (z.apex_text(), z.records))).finish()
    }
}

impl Zones {
    /// No zones.
    pub fn new() -> Zones {
        Zones::default()
    }

    /// Adds a zone; Err(the zone) if one with the same apex is there already.
    pub(crate) fn add(&mut self, zone: Zone) -> Result<(), Box<Zone>> {
        if self.by_apex.contains_key(&zone.apex) {
            return Err(Box::new(zone));
        }
        self.by_apex.insert(zone.apex.clone(), self.zones.len());
        if !self.depths.contains(&zone.labels) {
            self.depths.push(zone.labels);
            self.depths.sort_unstable_by(|a, b| b.cmp(a));
        }
        self.zones.push(zone);
        Ok(())
    }

    /// The zones, in the order they were given.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.zones.is_empty()
    }

    /// For a query message about to be answered from a zone: what [`Prefetch::slot`] and
    /// [`Zones::prefetch_node`] need to ask the CPU for the memory its answer reads (its zone,
    /// the hash of its name and of its parent). Computes only: it reads nothing of the zone's
    /// tables, so that a batch's hints are all made before its first fetch is asked for.
    pub(crate) fn hint(&self, query: &[u8]) -> Option<Prefetch<'_>> {
        let name = query.get(volley_wire::HEADER_LEN..query.len().min(volley_wire::HEADER_LEN + 255))?;
        let mut q = QName::empty();
        if !q.read(name) {
            return None;
        }
        let zone = self.find(&q)?;
        // The parent too, for a name the zone does not hold (where its answer looks next), in
        // a zone without cuts and below the apex.
        let parent = (!zone.has_cuts && q.labels() > zone.labels as usize)
            .then(|| q.suffix(q.labels() - 1).map(names::Names::hash))
            .flatten();
        Some(Prefetch { zone, hash: names::Names::hash(q.wire()), parent })
    }

    /// Asks the CPU to fetch the node a hint of [`Zones::hint`] leads to (its slot asked for by
    /// [`Prefetch::slot`] before), or, where
    /// the zone does not hold the name, the slot of its parent: then returns the hint for
    /// that, to give [`Zones::prefetch_parent`] once the batch's slots are on their way.
    pub(crate) fn prefetch_node(hint: Option<Prefetch<'_>>) -> Option<Prefetch<'_>> {
        let h = hint?;
        if h.zone.nodes.prefetch_node(h.hash) {
            return None;
        }
        let parent = h.parent?;
        if let Some(s) = h.zone.nodes.slot_of(parent) {
            names::prefetch(s);
        }
        Some(Prefetch { zone: h.zone, hash: parent, parent: None })
    }

    /// Asks the CPU to fetch the node of the parent a hint of [`Zones::prefetch_node`] names.
    pub(crate) fn prefetch_parent(hint: Option<Prefetch<'_>>) {
        if let Some(h) = hint {
            h.zone.nodes.prefetch_node(h.hash);
        }
    }

    /// The deepest zone whose apex is `name` or one of its ancestors.
    pub(crate) fn find(&self, name: &QName) -> Option<&Zone> {
        if self.zones.len() <= SCAN_ZONES {
            // A few apexes: compared in place, cheaper than hashing a suffix at each depth (a
            // query is looked up here twice, for its prefetch and for its answer).
            let mut found: Option<&Zone> = None;
            for z in &self.zones {
                if found.is_none_or(|f| z.labels > f.labels)
                    && name.suffix(z.labels as usize).is_some_and(|s| names::same(s, &z.apex))
                {
                    found = Some(z);
                }
            }
            return found;
        }
        for &d in &self.depths {
            if let Some(suffix) = name.suffix(d as usize) {
                if let Some(&i) = self.by_apex.get(suffix) {
                    return Some(&self.zones[i]);
                }
            }
        }
        None
    }
}

/// What [`Zones::hint`] found out about a query: its zone, the hash of its name, and that of
/// its parent where the answer may look there.
#[derive(Clone, Copy)]
pub(crate) struct Prefetch<'z> {
    zone: &'z Zone,
    hash: u64,
    parent: Option<u64>,
}

impl Prefetch<'_> {
    /// Asks the CPU to fetch the hash table slot where the lookup of the query's name starts.
    #[inline(always)]
    pub(crate) fn slot(&self) {
        if let Some(s) = self.zone.nodes.slot_of(self.hash) {
            names::prefetch(s);
        }
    }
}

/// One zone, compiled.
#[derive(PartialEq, Eq)]
pub struct Zone {
    /// Lowercased wire form of the apex.
    pub(crate) apex: Box<[u8]>,
    /// Labels of the apex (0 for the root).
    pub(crate) labels: u8,
    /// Every name of the zone (owners and empty non-terminals), lowercased wire form, with
    /// its RRsets.
    pub(crate) nodes: names::Names,
    /// The SOA record as the authority section of a negative answer carries it: TTL the
    /// smaller of the SOA's TTL and its MINIMUM field (RFC 2308 section 5); encoded as a
    /// node's RRset is.
    pub(crate) negative_soa: Box<[u8]>,
    /// Records loaded (duplicates counted once).
    pub(crate) records: usize,
    /// Whether any name below the apex has NS records (a delegation).
    pub(crate) has_cuts: bool,
}

impl Zone {
    /// The apex as text, with the trailing dot (`example.test.`).
    pub fn apex_text(&self) -> String {
        name_text(&self.apex)
    }

    /// The number of records (duplicates counted once).
    pub fn records(&self) -> usize {
        self.records
    }

    /// The number of names, empty non-terminals included.
    pub fn names(&self) -> usize {
        self.nodes.len()
    }
}

/// The RRsets of one name, as the zone is read (then laid out by `names.rs`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) sets: Vec<RrSet>,
    /// NS records below the apex: a zone cut; this node and every name below it belong to
    /// another zone (only DS is answered here).
    pub(crate) cut: bool,
}

impl Node {
    /// The RRset of this type (not RRSIG: those are one set per type covered).
    pub(crate) fn get(&self, rtype: u16) -> Option<&RrSet> {
        self.sets.iter().find(|s| s.rtype == rtype && s.covered == 0)
    }
}

/// An RRset as the zone is read (laid out for answering by `names.rs`), pre-encoded: for each
/// record TYPE, CLASS, TTL, RDLENGTH and RDATA (the owner name is written in front of each when
/// answering).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RrSet {
    pub(crate) rtype: u16,
    /// For RRSIG: the type covered (the RRSIGs of a name are one set per type covered);
    /// 0 otherwise.
    pub(crate) covered: u16,
    /// The TTL of every record of the set.
    pub(crate) ttl: u32,
    /// The records' tails, one after the other (in place when short: an A or AAAA record's).
    pub(crate) wire: Tails,
    /// Names in the RDATA that answers follow (CNAME, NS, MX, SRV targets).
    pub(crate) targets: Vec<Target>,
}

/// Bytes kept in place up to [`Tails::INLINE`] long (one A or AAAA record's tail, the most
/// common RRset), in a box of their own beyond: a zone being read holds one allocation fewer
/// per such set.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Tails {
    Inline(u8, [u8; Tails::INLINE]),
    Boxed(Box<[u8]>),
}

impl Tails {
    pub(crate) const INLINE: usize = 30;
}

impl Default for Tails {
    fn default() -> Tails {
        Tails::Inline(0, [0; Tails::INLINE])
    }
}

impl std::ops::Deref for Tails {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Tails::Inline(n, a) => &a[..*n as usize],
            Tails::Boxed(b) => b,
        }
    }
}

impl std::ops::DerefMut for Tails {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Tails::Inline(n, a) => &mut a[..*n as usize],
            Tails::Boxed(b) => b,
        }
    }
}

impl fmt::Debug for Tails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A name inside a record's RDATA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// Offset of the name (uncompressed wire form) in [`RrSet::wire`].
    pub(crate) at: u32,
    /// The name, lowercased.
    pub(crate) name: Box<[u8]>,
}

/// Offset of RDATA in a record's tail: TYPE, CLASS, TTL, RDLENGTH.
pub(crate) const TAIL_FIXED: usize = 10;

impl RrSet {
    /// Each record's tail (from its RDLENGTH).
    pub(crate) fn tails(&self) -> impl Iterator<Item = &[u8]> {
        let wire: &[u8] = &self.wire;
        let mut from = 0;
        std::iter::from_fn(move || {
            let f = wire.get(from..from + TAIL_FIXED)?;
            let to = (from + TAIL_FIXED + usize::from(u16::from_be_bytes([f[8], f[9]]))).min(wire.len());
            let tail = &wire[from..to];
            from = to;
            Some(tail)
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.tails().count()
    }
}

/// A question name, lowercased, with its label offsets: built on the stack for each query,
/// twice (for its prefetch and its answer). Only as much of it is written as the name takes:
/// zeroing its 383 octets and moving them out of a constructor took a tenth of a zone
/// answer's time.
pub(crate) struct QName {
    /// The first `len` octets written by [`QName::read`], the rest never read.
    buf: [MaybeUninit<u8>; 255],
    len: u8,
    /// Offset of each label, leftmost first (the root not counted): the first `labels` written.
    starts: [MaybeUninit<u8>; 128],
    labels: u8,
}

impl QName {
    /// No name yet, to [`QName::read`] one into (writes nothing but two lengths).
    #[inline(always)]
    pub(crate) fn empty() -> QName {
        QName { buf: [MaybeUninit::uninit(); 255], len: 0, starts: [MaybeUninit::uninit(); 128], labels: 0 }
    }

    /// Reads a validated, uncompressed wire name (a question's:
    /// [`volley_wire::response::QueryView`] has checked it); false, and the name left empty,
    /// if it is not one.
    #[inline(always)]
    pub(crate) fn read(&mut self, wire: &[u8]) -> bool {
        self.len = 0;
        self.labels = 0;
        if wire.is_empty() || wire.len() > 255 {
            return false;
        }
        let mut at = 0usize;
        let mut labels = 0usize;
        loop {
            let Some(&l) = wire.get(at) else { return false };
            let l = l as usize;
            if l == 0 {
                break;
            }
            if l > 63 || at + 1 + l >= wire.len() || labels >= self.starts.len() {
                return false;
            }
            self.starts[labels] = MaybeUninit::new(at as u8);
            labels += 1;
            at += 1 + l;
        }
        let len = at + 1;
        for (d, s) in self.buf[..len].iter_mut().zip(&wire[..len]) {
            *d = MaybeUninit::new(s.to_ascii_lowercase());
        }
        self.len = len as u8;
        self.labels = labels as u8;
        true
    }

    /// From a validated, uncompressed wire name, as [`QName::read`]; None if it is not one.
    #[cfg(test)]
    pub(crate) fn new(wire: &[u8]) -> Option<QName> {
        let mut q = QName::empty();
        q.read(wire).then_some(q)
    }

    /// The whole name.
    pub(crate) fn wire(&self) -> &[u8] {
        // SAFETY: the first `len` octets of `buf` are written (`read` sets `len` after them).
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), self.len as usize) }
    }

    /// The number of labels (the root not counted).
    pub(crate) fn labels(&self) -> usize {
        self.labels as usize
    }

    /// The ancestor (or the name itself) with this many labels.
    pub(crate) fn suffix(&self, labels: usize) -> Option<&[u8]> {
        (labels <= self.labels as usize).then(|| &self.wire()[self.suffix_at(labels)..])
    }

    /// Offset in the name of its ancestor with this many labels (at most [`QName::labels`]:
    /// more reads as that many).
    pub(crate) fn suffix_at(&self, labels: usize) -> usize {
        let labels = labels.min(self.labels as usize);
        if labels == 0 {
            (self.len as usize).saturating_sub(1)
        } else {
            // SAFETY: the index is below `self.labels`, and `read` wrote that many offsets.
            unsafe { self.starts[self.labels as usize - labels].assume_init() as usize }
        }
    }
}

/// A lowercased wire name as text (`www.example.test.`), for messages.
pub(crate) fn name_text(wire: &[u8]) -> String {
    let mut s = String::new();
    let mut at = 0;
    while let Some(&l) = wire.get(at) {
        if l == 0 {
            break;
        }
        let label = wire.get(at + 1..at + 1 + l as usize).unwrap_or_default();
        for &c in label {
            match c {
                b'.' | b'\\' => {
                    s.push('\\');
                    s.push(c as char);
                }
                0x21..=0x7E => s.push(c as char),
                _ => s.push_str(&format!("\\{c:03}")),
            }
        }
        s.push('.');
        at += 1 + l as usize;
    }
    if s.is_empty() {
        s.push('.');
    }
    s
}

/// Whether `name` is `ancestor` or below it (both lowercased wire names), and if so at which
/// offset of `name` `ancestor` starts.
pub(crate) fn is_below(name: &[u8], ancestor: &[u8]) -> Option<usize> {
    if name.len() < ancestor.len() || !names::same(&name[name.len() - ancestor.len()..], ancestor) {
        return None;
    }
    let want = name.len() - ancestor.len();
    let mut at = 0;
    while at < want {
        at += 1 + name[at] as usize;
    }
    (at == want).then_some(at)
}

#[cfg(test)]
mod tests;
