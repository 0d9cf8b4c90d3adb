//! Queries: building them once (generator) and reading them (responder).

use crate::name::{parse_name, skip_name};
use crate::{Class, Header, Name, QType, WireError, HEADER_LEN};

/// EDNS(0) settings of a query (RFC 6891).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// Requester's UDP payload size.
    pub udp_size: u16,
    /// DNSSEC OK bit.
    pub dnssec_ok: bool,
    /// EDNS version (0 is the only defined one).
    pub version: u8,
}

impl Default for Edns {
    fn default() -> Self {
        Edns { udp_size: 1232, dnssec_ok: false, version: 0 }
    }
}

/// Options for a query built by the generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryOptions {
    pub recursion_desired: bool,
    pub checking_disabled: bool,
    pub edns: Option<Edns>,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions { recursion_desired: true, checking_disabled: false, edns: Some(Edns::default()) }
    }
}

/// A query prepared once and stamped with an ID per send.
///
/// The question's key is computed at build time so that matching a response costs one hash
/// of the response's question and a compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryTemplate {
    wire: Vec<u8>,
    question_end: usize,
    key: u64,
}

impl QueryTemplate {
    pub fn new(name: &Name, qtype: QType, opts: QueryOptions) -> QueryTemplate {
        let mut wire = Vec::with_capacity(HEADER_LEN + name.wire().len() + 4 + 11);
        let mut flags = 0;
        if opts.recursion_desired {
            flags |= Header::RD;
        }
        if opts.checking_disabled {
            flags |= Header::CD;
        }
        Header { id: 0, flags, qdcount: 1, ancount: 0, nscount: 0, arcount: opts.edns.is_some() as u16 }
            .push(&mut wire);
        wire.extend_from_slice(name.wire());
        wire.extend_from_slice(&qtype.0.to_be_bytes());
        wire.extend_from_slice(&Class::IN.0.to_be_bytes());
        let question_end = wire.len();
        if let Some(e) = opts.edns {
            push_opt(&mut wire, e.udp_size, 0, e.version, e.dnssec_ok);
        }
        let key = key_of(&wire[HEADER_LEN..question_end]);
        QueryTemplate { wire, question_end, key }
    }

    /// The query with ID 0.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// Mutable access for callers that rewrite label bytes in place (random labels);
    /// they must call [`QueryTemplate::rekey`] afterwards.
    pub fn wire_mut(&mut self) -> &mut [u8] {
        &mut self.wire
    }

    /// Recomputes the question key after the wire bytes changed.
    pub fn rekey(&mut self) {
        self.key = key_of(&self.wire[HEADER_LEN..self.question_end]);
    }

    /// The hash a matching response's question must have (see [`question_key`]).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Writes the query with `id` into `out` (cleared first).
    #[inline]
    pub fn write(&self, id: u16, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.wire);
        crate::header::set_id(out, id);
    }

    pub fn len(&self) -> usize {
        self.wire.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wire.is_empty()
    }
}

/// Appends an OPT pseudo-record (RFC 6891 6.1.2) with no options.
pub fn push_opt(out: &mut Vec<u8>, udp_size: u16, ext_rcode: u8, version: u8, dnssec_ok: bool) {
    out.push(0); // root owner
    out.extend_from_slice(&QType::OPT.0.to_be_bytes());
    out.extend_from_slice(&udp_size.to_be_bytes());
    out.push(ext_rcode);
    out.push(version);
    out.extend_from_slice(&(if dnssec_ok { 0x8000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
}

#[inline]
fn key_of(question: &[u8]) -> u64 {
    // FNV-1a over the lower-cased question (name + type + class).
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in question {
        h ^= b.to_ascii_lowercase() as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The key of a message's single question, for matching a response to the query sent.
/// Returns the key and the offset after the question. Case-insensitive (RFC 4343), so a
/// server that echoes with other case (0x20) still matches.
#[inline]
pub fn question_key(msg: &[u8]) -> Result<u64, WireError> {
    let h = Header::parse(msg)?;
    if h.qdcount != 1 {
        return Err(WireError::QuestionCount(h.qdcount));
    }
    // Question names are the first name in the message: never compressed in practice,
    // but follow a pointer if a server uses one.
    if msg.get(HEADER_LEN).is_some_and(|b| b & 0xC0 == 0) {
        let end = skip_name(msg, HEADER_LEN)? + 4;
        if end > msg.len() {
            return Err(WireError::Truncated);
        }
        Ok(key_of(&msg[HEADER_LEN..end]))
    } else {
        let (name, at) = parse_name(msg, HEADER_LEN)?;
        let tail = msg.get(at..at + 4).ok_or(WireError::Truncated)?;
        let mut q = name.wire().to_vec();
        q.extend_from_slice(tail);
        Ok(key_of(&q))
    }
}

/// A query as the responder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedQuery {
    pub header: Header,
    pub qname: Name,
    pub qtype: QType,
    pub qclass: Class,
    /// Offset just after the question: `msg[12..question_end]` is the question to echo.
    pub question_end: usize,
    /// The OPT record, if the query carried one.
    pub edns: Option<Edns>,
}

/// Why a query cannot be answered normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryError {
    /// Not even a header: drop it silently.
    NoHeader,
    /// A header was read but the rest is malformed: answer FORMERR with this header's ID.
    Malformed(Header, WireError),
}

/// Reads a query: header, exactly one question, and the OPT record from the additional section.
pub fn parse_query(msg: &[u8]) -> Result<ParsedQuery, QueryError> {
    let header = Header::parse(msg).map_err(|_| QueryError::NoHeader)?;
    let bad = |e| QueryError::Malformed(header, e);
    if header.qdcount != 1 {
        return Err(bad(WireError::QuestionCount(header.qdcount)));
    }
    let (qname, at) = parse_name(msg, HEADER_LEN).map_err(bad)?;
    let tail = msg.get(at..at + 4).ok_or(bad(WireError::Truncated))?;
    let qtype = QType(u16::from_be_bytes([tail[0], tail[1]]));
    let qclass = Class(u16::from_be_bytes([tail[2], tail[3]]));
    let question_end = at + 4;
    // Skip answer and authority records, then look for OPT among the additional ones.
    let mut pos = question_end;
    let mut edns = None;
    let records = header.ancount as usize + header.nscount as usize + header.arcount as usize;
    for i in 0..records {
        let name_end = skip_name(msg, pos).map_err(bad)?;
        let fixed = msg.get(name_end..name_end + 10).ok_or(bad(WireError::Truncated))?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let rdlen = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
        let next = name_end + 10 + rdlen;
        if next > msg.len() {
            return Err(bad(WireError::Truncated));
        }
        let additional = i >= header.ancount as usize + header.nscount as usize;
        if additional && rtype == QType::OPT.0 && edns.is_none() {
            edns = Some(Edns {
                udp_size: u16::from_be_bytes([fixed[2], fixed[3]]),
                version: fixed[5],
                dnssec_ok: fixed[6] & 0x80 != 0,
            });
        }
        pos = next;
    }
    Ok(ParsedQuery { header, qname, qtype, qclass, question_end, edns })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_parse() {
        let name: Name = "www.example.test".parse().unwrap();
        let t = QueryTemplate::new(&name, QType::AAAA, QueryOptions::default());
        let mut buf = Vec::new();
        t.write(0x1234, &mut buf);
        let q = parse_query(&buf).unwrap();
        assert_eq!(q.header.id, 0x1234);
        assert_eq!(q.header.flags, Header::RD);
        assert_eq!(q.qname, name);
        assert_eq!(q.qtype, QType::AAAA);
        assert_eq!(q.edns, Some(Edns::default()));
        assert_eq!(question_key(&buf).unwrap(), t.key());
        // case-insensitive key
        let up = QueryTemplate::new(&"WWW.EXAMPLE.TEST".parse().unwrap(), QType::AAAA, QueryOptions::default());
        assert_eq!(up.key(), t.key());
        let other = QueryTemplate::new(&name, QType::A, QueryOptions::default());
        assert_ne!(other.key(), t.key());
    }

    #[test]
    fn malformed() {
        assert_eq!(parse_query(&[1, 2, 3]), Err(QueryError::NoHeader));
        let name: Name = "a.test".parse().unwrap();
        let t = QueryTemplate::new(&name, QType::A, QueryOptions::default());
        let cut = &t.wire()[..t.wire().len() - 3];
        assert!(matches!(parse_query(cut), Err(QueryError::Malformed(_, WireError::Truncated))));
        // every prefix and every single-byte corruption parses or errors, never panics
        for i in 0..t.wire().len() {
            let _ = parse_query(&t.wire()[..i]);
            let _ = question_key(&t.wire()[..i]);
            for v in [0u8, 0x3f, 0xc0, 0xff] {
                let mut m = t.wire().to_vec();
                m[i] = v;
                let _ = parse_query(&m);
                let _ = question_key(&m);
            }
        }
    }
}
