//! Answering from a zone, as an authoritative server does (RFC 1034 section 4.3.2, RFC 2308,
//! RFC 4592, RFC 6604), into the response buffer the answer engine started: no allocation,
//! no I/O.
//!
//! * The name exists with the type asked: its RRset (ANY: every RRset of the name), and the
//!   addresses (A, AAAA) of the NS, MX and SRV targets inside the zone in the additional
//!   section (not for ANY). DNSSEC records are data, served as BIND serves a zone it does not
//!   consider signed: each when asked for, RRSIGs never added to other answers, no NSEC
//!   proofs, and ANY leaves RRSIG, NSEC, NSEC3 and DNSKEY out.
//! * It has a CNAME (and another type was asked): the CNAME, then the same question for its
//!   target while the target is inside the zone (a chain of at most [`MAX_CHAIN`]); the last
//!   name's outcome sets the RCODE (NXDOMAIN at the end of a chain, RFC 6604).
//! * It exists without the type (an empty non-terminal too): NODATA, NOERROR with the SOA in
//!   the authority section; a name that does not exist: NXDOMAIN with the SOA. The SOA's TTL
//!   there is the smaller of its own TTL and its MINIMUM field (RFC 2308 section 5).
//! * A name that does not exist under a closest encloser that has a wildcard child (`*.`):
//!   answered from the wildcard, with the question's name as owner (RFC 4592).
//! * A name at or below a zone cut (NS records below the apex): a referral, AA clear: the NS
//!   RRset in the authority section, the addresses of the name servers that the zone holds
//!   (glue) in the additional section. DS at the cut is the parent's and is answered.
//!
//! Owner names are compression pointers: to the question (or an ancestor of it), or to a name
//! written earlier in the RDATA of a CNAME, NS, MX or SRV record.

use std::mem::MaybeUninit;

use volley_wire::Rcode;

use super::names::{NodeRef, SetRef};
use super::{is_below, rr, QName, Zone, TAIL_FIXED};

/// Most CNAMEs followed for one answer (BIND restarts at most 11 times; Knot follows chains
/// inside the zone without a stated limit but stops at loops).
pub const MAX_CHAIN: usize = 16;

/// Names written in RDATA that later owners may point to.
const MAX_NAMES: usize = 32;

/// Offsets of the count fields in the header.
const COUNT_AT: [usize; 3] = [6, 8, 10];

/// What [`Zone::answer`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneAnswer {
    /// The RCODE: NOERROR or NXDOMAIN.
    pub rcode: Rcode,
    /// Whether the answer is authoritative (AA=1): all but referrals.
    pub authoritative: bool,
    /// A referral: its additional section (glue) may not be dropped to fit.
    pub referral: bool,
    /// Where the additional section starts in the message, and how many records it has.
    pub additional_at: usize,
    pub additional: u16,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Answer = 0,
    Authority = 1,
    Additional = 2,
}

/// The outcome of looking a name up in the zone.
enum Found<'z> {
    /// The name's node (or the wildcard's that stands for it).
    Node(NodeRef<'z>),
    /// The name is at or below a zone cut: the cut's node and name.
    Referral(NodeRef<'z>, &'z [u8]),
    /// No such name, no wildcard.
    NxDomain,
}

/// The response being written.
struct Writer<'a, 'z> {
    out: &'a mut Vec<u8>,
    qname: &'z [u8],
    /// (message offset, name) of names written whole, for owners to point to: the first
    /// `n_names` are set. Left uninitialised (most answers note none): setting the whole
    /// array for every answer cost more than the rest of an A record's answer.
    names: [MaybeUninit<(u16, &'z [u8])>; MAX_NAMES],
    n_names: usize,
    counts: [u16; 3],
}

impl<'a, 'z> Writer<'a, 'z> {
    /// A compression pointer to `name` if the message holds it (or a name ending with it).
    fn pointer(&self, name: &[u8]) -> Option<u16> {
        if let Some(k) = is_below(self.qname, name) {
            return Some((volley_wire::HEADER_LEN + k) as u16);
        }
        self.noted()
            .iter()
            .find_map(|&(off, n)| is_below(n, name).map(|k| off as usize + k))
            .filter(|&p| p < 0x4000)
            .map(|p| p as u16)
    }

    fn owner(&mut self, name: &[u8]) {
        match self.pointer(name) {
            Some(p) => self.out.extend_from_slice(&(0xC000 | p).to_be_bytes()),
            None => self.out.extend_from_slice(name),
        }
    }

    /// The names noted so far.
    fn noted(&self) -> &[(u16, &'z [u8])] {
        let noted = &self.names[..self.n_names];
        // SAFETY: note_name set the first n_names entries (and only ever raises n_names past
        // an entry it has set); MaybeUninit<T> has the layout of T.
        unsafe { &*(noted as *const [MaybeUninit<(u16, &'z [u8])>] as *const [(u16, &'z [u8])]) }
    }

    fn note_name(&mut self, at: usize, name: &'z [u8]) {
        if self.n_names < MAX_NAMES && at < 0x4000 {
            self.names[self.n_names] = MaybeUninit::new((at as u16, name));
            self.n_names += 1;
        }
    }

    /// Writes every record of `set` with this owner into `section`.
    fn set(&mut self, section: Section, owner: &[u8], set: SetRef<'z>) {
        let mut targets = set.targets().peekable();
        // Each tail's length from its RDLENGTH.
        let wire: &[u8] = set.wire;
        let mut from = 0;
        while let Some(f) = wire.get(from..from + TAIL_FIXED) {
            let to = (from + TAIL_FIXED + usize::from(u16::from_be_bytes([f[8], f[9]]))).min(wire.len());
            self.owner(owner);
            let at = self.out.len();
            self.out.extend_from_slice(&wire[from..to]);
            while let Some(t) = targets.next_if(|t| (t.at as usize) < to) {
                self.note_name(at + (t.at as usize - from), t.name);
            }
            self.counts[section as usize] += 1;
            from = to;
        }
    }

    fn finish(self) {
        for (i, at) in COUNT_AT.iter().enumerate() {
            self.out[*at..*at + 2].copy_from_slice(&self.counts[i].to_be_bytes());
        }
    }
}

impl Zone {
    /// Looks `name` (lowercased wire form, inside this zone) up.
    fn lookup<'z>(&'z self, name: &'z [u8], qtype: u16) -> Found<'z> {
        if !self.has_cuts {
            if let Some(node) = self.nodes.get(name) {
                return Found::Node(node);
            }
            // No cuts: the closest encloser is the nearest ancestor the zone holds (the names
            // between an owner and the apex are all nodes), the apex at worst.
            let mut at = 0;
            while at + self.apex.len() < name.len() {
                at += 1 + name[at] as usize;
                // A suffix of a name inside the zone as long as the apex is the apex.
                let encloser =
                    if at + self.apex.len() == name.len() { self.nodes.apex() } else { self.nodes.get(&name[at..]) };
                let Some(encloser) = encloser else { continue };
                if !encloser.wildcard_child() {
                    return Found::NxDomain;
                }
                return match self.wildcard(&name[at..]) {
                    Some(node) => Found::Node(node),
                    None => Found::NxDomain,
                };
            }
            return Found::NxDomain;
        }
        // Label offsets of the name, leftmost first.
        let mut starts = [0u8; 128];
        let mut n = 0;
        let mut at = 0;
        while name[at] != 0 && n < starts.len() {
            starts[n] = at as u8;
            n += 1;
            at += 1 + name[at] as usize;
        }
        let below = n.saturating_sub(self.labels as usize);
        // From the name just below the apex down to the name itself: the first cut on the
        // way is a referral; the first name missing makes its parent the closest encloser.
        for i in (0..below).rev() {
            let here = &name[starts[i] as usize..];
            match self.nodes.get(here) {
                None => {
                    let encloser = if i + 1 < n { starts[i + 1] as usize } else { at };
                    return match self.wildcard(&name[encloser..]) {
                        Some(node) => Found::Node(node),
                        None => Found::NxDomain,
                    };
                }
                Some(node) if node.cut() && !(i == 0 && qtype == rr::DS) => return Found::Referral(node, here),
                Some(node) if i == 0 => return Found::Node(node),
                Some(_) => {}
            }
        }
        match self.nodes.get(name) {
            Some(node) => Found::Node(node),
            None => Found::NxDomain,
        }
    }

    /// The wildcard child (`*.ENCLOSER`) of a closest encloser, if the zone has one.
    fn wildcard(&self, encloser: &[u8]) -> Option<NodeRef<'_>> {
        if encloser.len() == self.apex.len() {
            // The encloser is a suffix of a name inside the zone: the apex.
            return self.nodes.apex_wildcard();
        }
        let mut key = [0u8; 255];
        let len = encloser.len() + 2;
        if len > key.len() {
            return None;
        }
        key[0] = 1;
        key[1] = b'*';
        key[2..len].copy_from_slice(encloser);
        self.nodes.get(&key[..len])
    }

    /// Writes the answer to `qname` (lowercased, inside this zone), type `qtype`, behind the
    /// header and question already in `out`, and sets the header's record counts.
    pub(crate) fn answer<'z>(&'z self, q: &'z QName, qtype: u16, out: &mut Vec<u8>) -> ZoneAnswer {
        let mut w = Writer {
            out,
            qname: q.wire(),
            names: [const { MaybeUninit::uninit() }; MAX_NAMES],
            n_names: 0,
            counts: [0; 3],
        };
        let mut result =
            ZoneAnswer { rcode: Rcode::NOERROR, authoritative: true, referral: false, additional_at: 0, additional: 0 };
        // Sets in the answer whose targets' addresses go in the additional section.
        let mut wanted: Option<SetRef<'z>> = None;
        let mut glue: Option<SetRef<'z>> = None;
        let mut name: &[u8] = q.wire();
        for step in 0..=MAX_CHAIN {
            match self.lookup(name, qtype) {
                Found::Referral(cut, cut_name) => {
                    if step == 0 {
                        if let Some(ns) = cut.get(rr::NS) {
                            w.set(Section::Authority, cut_name, ns);
                            glue = Some(ns);
                        }
                        result.authoritative = false;
                        result.referral = true;
                    }
                    // A CNAME into a delegated name: the chain so far.
                    break;
                }
                Found::NxDomain => {
                    result.rcode = Rcode::NXDOMAIN;
                    self.negative(&mut w);
                    break;
                }
                Found::Node(node) => {
                    if qtype == rr::ANY {
                        let before = w.counts[Section::Answer as usize];
                        for set in node.sets() {
                            if !matches!(set.rtype, rr::RRSIG | rr::NSEC | rr::DNSKEY | rr::NSEC3) {
                                w.set(Section::Answer, name, set);
                            }
                        }
                        if w.counts[Section::Answer as usize] == before {
                            self.negative(&mut w);
                        }
                        break;
                    }
                    if qtype == rr::RRSIG {
                        let before = w.counts[Section::Answer as usize];
                        for set in node.sets().filter(|s| s.rtype == rr::RRSIG) {
                            w.set(Section::Answer, name, set);
                        }
                        if w.counts[Section::Answer as usize] == before {
                            self.negative(&mut w);
                        }
                        break;
                    }
                    if let Some(set) = node.get(qtype) {
                        w.set(Section::Answer, name, set);
                        if matches!(qtype, rr::NS | rr::MX | rr::SRV) {
                            wanted = Some(set);
                        }
                        break;
                    }
                    if qtype != rr::CNAME {
                        if let Some(cname) = node.get(rr::CNAME) {
                            w.set(Section::Answer, name, cname);
                            match cname.targets().next() {
                                Some(t) if is_below(t.name, &self.apex).is_some() && step < MAX_CHAIN => {
                                    name = t.name;
                                    continue;
                                }
                                _ => break,
                            }
                        }
                    }
                    self.negative(&mut w);
                    break;
                }
            }
        }
        result.additional_at = w.out.len();
        if wanted.is_none() && glue.is_none() {
            w.finish();
            return result;
        }
        // Additional section: the addresses of the targets the zone holds, each name once.
        let mut done: [&[u8]; 64] = [&[]; 64];
        let mut n_done = 0;
        for set in wanted.iter().chain(glue.iter()) {
            for t in set.targets() {
                let name: &[u8] = t.name;
                if done[..n_done].contains(&name) {
                    continue;
                }
                if n_done < done.len() {
                    done[n_done] = name;
                    n_done += 1;
                }
                if is_below(name, &self.apex).is_none() {
                    continue;
                }
                if let Some(node) = self.nodes.get(name) {
                    for rtype in [rr::A, rr::AAAA] {
                        if let Some(addrs) = node.get(rtype) {
                            w.set(Section::Additional, name, addrs);
                        }
                    }
                }
            }
        }
        result.additional = w.counts[Section::Additional as usize];
        w.finish();
        result
    }

    /// The authority section of NXDOMAIN and NODATA: the SOA (RFC 2308).
    fn negative<'z>(&'z self, w: &mut Writer<'_, 'z>) {
        w.set(Section::Authority, &self.apex, SetRef::at(&self.negative_soa, 0));
    }
}
