//! The answer engine: bytes in, bytes out, no I/O, no clock, no allocation per query.
//!
//! Every transport calls [`Answerer::answer`] and carries out the [`Verdict`] (send now, send
//! after a delay, or never). What is answered:
//!
//! * A → `192.0.2.1`, AAAA → `2001:db8::1`, TXT and ANY → one TXT record `"volley"`; other
//!   types → NOERROR with no answer (NODATA). Owner is the question name as asked (a
//!   compression pointer to it), class IN, TTL [`AnswerConfig::ttl`]; AA=1, RA=0.
//! * Special labels, anywhere in the name, any case: `nx` → NXDOMAIN, `fail` → SERVFAIL,
//!   `drop` → no answer, `size-N` → TXT/ANY answer whose RDATA is exactly N octets,
//!   `delay-DUR` → answered DUR late. Precedence: drop, then fail, then nx.
//! * Names inside a zone given with `--zone` ([`AnswerConfig::zones`]) are answered from it, as
//!   an authoritative server does (`crate::zone`); their labels are not special. With
//!   [`AnswerConfig::zones_only`] names outside every zone are REFUSED.
//! * FORMERR (header only) for malformed queries, NOTIMP for opcodes other than QUERY,
//!   REFUSED for classes other than IN/ANY, BADVERS for EDNS versions other than 0; messages
//!   with no header or with QR=1 are not answered ([`Verdict::Invalid`]).

mod rules;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use volley_wire::response::{
    begin_answer, end_record, header_only, push_answer, push_response_opt, response_flags, start_response,
    truncate_to_question, QueryView,
};
use volley_wire::{Class, Header, Opcode, QType, QueryError, Rcode, CLASSIC_UDP, MAX_MESSAGE};

use crate::zone::{QName, Zone, Zones};

pub use rules::{DelayRule, Ratio};

/// The transport a query came in on: decides the size limit of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// DNS over UDP: answers limited to 512 octets, or the requester's EDNS buffer size.
    Udp,
    /// DNS over TCP (RFC 7766): answers up to 65535 octets.
    Tcp,
    /// DNS over TLS (RFC 7858): TCP framing inside TLS; answers up to 65535 octets.
    Dot,
    /// DNS over HTTPS (RFC 8484) over HTTP/1.1 or HTTP/2; answers up to 65535 octets.
    Doh,
    /// DNS over HTTPS over HTTP/3; answers up to 65535 octets.
    Doh3,
    /// DNS over QUIC (RFC 9250); answers up to 65535 octets.
    Doq,
}

impl Transport {
    /// Lower-case name used in `listening` lines and results: `udp`, `tcp`, `dot`, `doh`,
    /// `doh3`, `doq`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Dot => "dot",
            Transport::Doh => "doh",
            Transport::Doh3 => "doh3",
            Transport::Doq => "doq",
        }
    }

    /// Whether the transport runs over UDP datagrams (UDP itself, and QUIC for DoQ and DoH/3).
    pub fn is_datagram(self) -> bool {
        matches!(self, Transport::Udp | Transport::Doh3 | Transport::Doq)
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the transport must do with a query after [`Answerer::answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send the bytes written to `out`, now or after `delay` (without blocking other answers).
    Reply {
        /// How long to hold the answer back; `None` means send now.
        delay: Option<Duration>,
    },
    /// Send nothing: a dropped query (a `drop` label, a `--drop` rule, over the `--max-qps`
    /// cap). Held unanswered where the transport has a request to hold (DoH, DoQ).
    Drop,
    /// Send the bytes written to `out` now: an error answer (FORMERR or NOTIMP, header only)
    /// to a message that is no query the engine can read. Over UDP, where a source address
    /// may be forged, the transport sends at most `--udp-error-rate` of these a second and
    /// withholds the rest, as unbound does; elsewhere it is sent as any reply.
    Error,
    /// Send nothing: not a query (no header, or QR=1), so there is no ID to answer. Where the
    /// transport has a request of its own it refuses it (DoH: 400, DoQ: stream reset).
    Invalid,
}

/// Settings of the answer engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerConfig {
    /// TTL of synthesised records, seconds (default 300).
    pub ttl: u32,
    /// UDP payload size advertised in the response's OPT record (default 1232).
    pub edns_size: u16,
    /// Delay rules: N of every M queries answered late (see [`Ratio`]).
    pub delays: Vec<DelayRule>,
    /// Drop rule: N of every M queries never answered.
    pub drop: Option<Ratio>,
    /// Capacity: at most this many answers per second (counted in 100 ms windows); queries
    /// beyond are dropped, as an overloaded server would. A known limit for limit searches.
    pub max_qps: Option<u64>,
    /// Zones to answer from as an authoritative server (`--zone`, [`crate::zone::load`]);
    /// names outside them are synthesised (or refused, `zones_only`).
    pub zones: Option<Arc<Zones>>,
    /// Refuse (REFUSED) names outside every zone instead of synthesising an answer.
    pub zones_only: bool,
}

impl Default for AnswerConfig {
    fn default() -> Self {
        AnswerConfig {
            ttl: 300,
            edns_size: 1232,
            delays: Vec::new(),
            drop: None,
            max_qps: None,
            zones: None,
            zones_only: false,
        }
    }
}

/// Most queries [`Answerer::prefetch`] looks at.
pub const PREFETCH_BATCH: usize = 128;

/// Longest `delay-DUR` a label may ask for; longer ones are not special.
pub const MAX_LABEL_DELAY: Duration = Duration::from_secs(3600);
/// Largest N of a `size-N` label.
pub const MAX_TXT_SIZE: usize = 65_000;

const A_RDATA: [u8; 4] = [192, 0, 2, 1];
const AAAA_RDATA: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const TXT_RDATA: &[u8] = b"\x06volley";
/// Filler of `size-N` TXT strings.
const FILL: u8 = b'x';

/// The answer engine, shared by every transport and thread (`&self`, `Sync`).
#[derive(Debug)]
pub struct Answerer {
    config: AnswerConfig,
    /// Global query sequence for the N/M rules; touched only when a rule exists.
    seq: AtomicU64,
    has_rules: bool,
    cap: Option<RateCap>,
}

/// At most `per_window` admissions per window of `WINDOW_NS`, shared by every thread.
#[derive(Debug)]
struct RateCap {
    per_window: u64,
    start: std::time::Instant,
    /// Window index (high 32 bits) and admissions in it (low 32 bits).
    cur: AtomicU64,
}

const WINDOW_NS: u128 = 100_000_000;

impl RateCap {
    fn new(max_qps: u64) -> RateCap {
        RateCap { per_window: max_qps.div_ceil(10).max(1), start: std::time::Instant::now(), cur: AtomicU64::new(0) }
    }

    fn admit(&self) -> bool {
        let w = (self.start.elapsed().as_nanos() / WINDOW_NS) as u64 & 0xFFFF_FFFF;
        let mut v = self.cur.load(Ordering::Relaxed);
        loop {
            let (vw, c) = (v >> 32, v & 0xFFFF_FFFF);
            let next = if vw == w {
                if c >= self.per_window {
                    return false;
                }
                (w << 32) | (c + 1)
            } else {
                (w << 32) | 1
            };
            match self.cur.compare_exchange_weak(v, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
    }
}

/// What the special labels of a name ask for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Specials {
    nx: bool,
    fail: bool,
    drop: bool,
    size: Option<usize>,
    delay: Option<Duration>,
}

impl Specials {
    fn scan<'a>(labels: impl Iterator<Item = &'a [u8]>) -> Specials {
        let mut s = Specials::default();
        for l in labels {
            match l.len() {
                2 if l.eq_ignore_ascii_case(b"nx") => s.nx = true,
                4 if l.eq_ignore_ascii_case(b"fail") => s.fail = true,
                4 if l.eq_ignore_ascii_case(b"drop") => s.drop = true,
                6.. if s.size.is_none() && l[..5].eq_ignore_ascii_case(b"size-") => s.size = parse_size(&l[5..]),
                7.. if s.delay.is_none() && l[..6].eq_ignore_ascii_case(b"delay-") => {
                    s.delay = crate::duration::parse_bytes(&l[6..]).filter(|d| *d <= MAX_LABEL_DELAY);
                }
                _ => {}
            }
        }
        s
    }
}

fn parse_size(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits.iter().fold(0usize, |n, &c| n * 10 + (c - b'0') as usize);
    (n <= MAX_TXT_SIZE).then_some(n)
}

impl Answerer {
    /// An engine with these settings.
    pub fn new(config: AnswerConfig) -> Answerer {
        let has_rules = !config.delays.is_empty() || config.drop.is_some();
        let cap = config.max_qps.map(RateCap::new);
        Answerer { config, seq: AtomicU64::new(0), has_rules, cap }
    }

    /// The settings.
    pub fn config(&self) -> &AnswerConfig {
        &self.config
    }

    /// Before answering a batch of queries (those a `recvmmsg` read): asks the CPU to fetch
    /// what answering them from a zone reads, the hash table slots of all their names first,
    /// then the nodes those slots point to (or, for a name the zone does not hold, its
    /// parent's slot, then node), so that the cache misses of a batch (two per name of a large
    /// zone) overlap instead of stalling each answer in turn. Only a hint:
    /// what is answered does not change. Nothing to do without `--zone`; at most
    /// [`PREFETCH_BATCH`] queries are looked at.
    pub fn prefetch<'q>(&self, queries: impl Iterator<Item = &'q [u8]>) {
        let Some(zones) = &self.config.zones else { return };
        let mut hints = [None; PREFETCH_BATCH];
        let mut n = 0;
        // The hashes first, then the fetches in a loop of their own. A profile puts the time of
        // the fetches at the fetch instructions themselves (a table of a million names misses
        // the TLB as well as the caches, and a fetch waits for its page walk): with a whole
        // name's hashing between two of them few were on their way at once; back to back, with
        // a few instructions between them, many are.
        for (hint, query) in hints.iter_mut().zip(queries) {
            *hint = zones.hint(query);
            n += 1;
        }
        for hint in hints[..n].iter().flatten() {
            hint.slot();
        }
        for hint in &mut hints[..n] {
            *hint = Zones::prefetch_node(*hint);
        }
        for &hint in &hints[..n] {
            Zones::prefetch_parent(hint);
        }
    }

    /// Answers one query: clears `out`, writes the response into it (unless the verdict is
    /// [`Verdict::Drop`] or [`Verdict::Invalid`]). Never panics, whatever `query` holds; allocates only if `out` has
    /// less capacity than the response needs.
    pub fn answer(&self, query: &[u8], transport: Transport, out: &mut Vec<u8>) -> Verdict {
        out.clear();
        let Ok(header) = Header::parse(query) else {
            return Verdict::Invalid;
        };
        if header.is_response() {
            return Verdict::Invalid;
        }
        if header.opcode() != Opcode::QUERY {
            header_only(out, &header, Rcode::NOTIMP);
            return Verdict::Error;
        }
        let view = match QueryView::parse(query) {
            Ok(v) => v,
            Err(QueryError::NoHeader) => return Verdict::Invalid,
            Err(QueryError::Malformed(h, _)) => {
                header_only(out, &h, Rcode::FORMERR);
                return Verdict::Error;
            }
        };
        // A name inside a zone is answered from it: its labels are not special. (The name
        // stays where it was made: moving it into `in_zone` copied its 385 octets.)
        let mut qname = QName::empty();
        let in_zone = match &self.config.zones {
            Some(zones) if (view.qclass == Class::IN || view.qclass == Class::ANY) && qname.read(view.qname_wire()) => {
                zones.find(&qname).map(|z| (&qname, z))
            }
            _ => None,
        };
        let specials = if in_zone.is_some() || self.config.zones_only {
            Specials::default()
        } else {
            Specials::scan(view.labels())
        };
        if specials.drop || self.cap.as_ref().is_some_and(|c| !c.admit()) {
            return Verdict::Drop;
        }
        let mut delay = specials.delay;
        if self.has_rules {
            let k = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
            if self.config.drop.is_some_and(|r| r.selects(k)) {
                return Verdict::Drop;
            }
            for rule in &self.config.delays {
                if rule.ratio.selects(k) {
                    delay = delay.max(Some(rule.delay));
                }
            }
        }
        self.respond(&view, &specials, in_zone, transport, out);
        Verdict::Reply { delay: delay.filter(|d| !d.is_zero()) }
    }

    fn respond(
        &self,
        view: &QueryView<'_>,
        sp: &Specials,
        in_zone: Option<(&QName, &Zone)>,
        transport: Transport,
        out: &mut Vec<u8>,
    ) {
        let bad_version = view.edns.is_some_and(|e| e.version != 0);
        if let (Some((q, zone)), false) = (in_zone, bad_version) {
            start_response(out, view, response_flags(&view.header, true, Rcode::NOERROR));
            let a = zone.answer(q, view.qtype.0, out);
            out[2..4].copy_from_slice(&response_flags(&view.header, a.authoritative, a.rcode).to_be_bytes());
            let limit = size_limit(view, transport);
            let opt_len = if view.edns.is_some() { 11 } else { 0 };
            if out.len() + opt_len > limit && a.additional > 0 && !a.referral {
                // The additional section is optional: leave it out rather than truncate.
                out.truncate(a.additional_at);
                out[10..12].fill(0);
            }
            if out.len() + opt_len > limit {
                truncate_to_question(out, view.question_end);
            }
            if let Some(e) = view.edns {
                push_response_opt(out, self.config.edns_size, a.rcode, e.dnssec_ok);
            }
            return;
        }
        let rcode = if bad_version {
            Rcode(16) // BADVERS
        } else if (view.qclass != Class::IN && view.qclass != Class::ANY) || self.config.zones_only {
            Rcode::REFUSED
        } else if sp.fail {
            Rcode::SERVFAIL
        } else if sp.nx {
            Rcode::NXDOMAIN
        } else {
            Rcode::NOERROR
        };
        let authoritative = matches!(rcode, Rcode::NOERROR | Rcode::NXDOMAIN);
        start_response(out, view, response_flags(&view.header, authoritative, rcode));
        if rcode == Rcode::NOERROR {
            let ttl = self.config.ttl;
            match view.qtype {
                QType::A => push_answer(out, QType::A, Class::IN, ttl, &A_RDATA),
                QType::AAAA => push_answer(out, QType::AAAA, Class::IN, ttl, &AAAA_RDATA),
                QType::TXT | QType::ANY => match sp.size {
                    None => push_answer(out, QType::TXT, Class::IN, ttl, TXT_RDATA),
                    Some(n) => {
                        let at = begin_answer(out, QType::TXT, Class::IN, ttl);
                        push_txt_of_size(out, n);
                        end_record(out, at);
                    }
                },
                _ => {}
            }
        }
        let limit = size_limit(view, transport);
        let opt_len = if view.edns.is_some() { 11 } else { 0 };
        if out.len() + opt_len > limit {
            truncate_to_question(out, view.question_end);
        }
        if let Some(e) = view.edns {
            push_response_opt(out, self.config.edns_size, rcode, e.dnssec_ok);
        }
    }
}

/// The smallest TTL of the records of a response (OPT aside), None if it has none or cannot
/// be read: what an HTTP cache may keep it for.
pub(crate) fn min_ttl(resp: &[u8]) -> Option<u32> {
    let h = Header::parse(resp).ok()?;
    let mut at = volley_wire::HEADER_LEN;
    for _ in 0..h.qdcount {
        at = volley_wire::skip_name(resp, at).ok()? + 4;
    }
    let mut min = None;
    for _ in 0..(h.ancount as usize + h.nscount as usize + h.arcount as usize) {
        at = volley_wire::skip_name(resp, at).ok()?;
        let f = resp.get(at..at + 10)?;
        if u16::from_be_bytes([f[0], f[1]]) != QType::OPT.0 {
            let ttl = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
            min = Some(min.map_or(ttl, |m: u32| m.min(ttl)));
        }
        at += 10 + u16::from_be_bytes([f[8], f[9]]) as usize;
    }
    min
}

/// The largest response the transport takes: over UDP max(512, the query's EDNS size), or 512.
fn size_limit(view: &QueryView<'_>, transport: Transport) -> usize {
    match (transport, view.edns) {
        (Transport::Udp, Some(e)) => (e.udp_size as usize).max(CLASSIC_UDP),
        (Transport::Udp, None) => CLASSIC_UDP,
        (_, _) => MAX_MESSAGE,
    }
}

/// Appends TXT RDATA of exactly `n` octets: character-strings of at most 255 octets each
/// (one length octet + up to 254 octets of `x`); the last one may be shorter (a lone length
/// octet 0 when one octet remains).
fn push_txt_of_size(out: &mut Vec<u8>, mut n: usize) {
    while n > 0 {
        let chunk = n.min(255);
        out.push((chunk - 1) as u8);
        out.resize(out.len() + chunk - 1, FILL);
        n -= chunk;
    }
}

/// Rejects a config that cannot work (used by `start`).
pub(crate) fn validate(config: &AnswerConfig) -> Result<(), String> {
    for r in config.delays.iter().map(|d| &d.ratio).chain(config.drop.iter()) {
        r.validate()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod cap_tests {
    use super::*;

    #[test]
    fn cap_admits_per_window() {
        let c = RateCap::new(100);
        let admitted = (0..50).filter(|_| c.admit()).count();
        assert_eq!(admitted, 10, "100 qps = 10 per 100 ms window");
    }
}
