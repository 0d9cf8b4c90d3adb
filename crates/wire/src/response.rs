//! Building responses without allocating: a borrowed view of a query and helpers that append
//! a header, the echoed question, answer records and an OPT record to a reused buffer.
//!
//! Generic on purpose: the responder's answer engine decides *what* to answer, this module
//! only knows *how* the bytes are laid out.

use crate::name::skip_name;
use crate::query::{Edns, QueryError};
use crate::{Class, Header, QType, Rcode, WireError, HEADER_LEN};

/// A query read in place: nothing is copied or allocated.
///
/// The question name must be uncompressed (it is the first name of the message, so a pointer
/// there could only point into the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryView<'a> {
    msg: &'a [u8],
    /// The header as received.
    pub header: Header,
    /// Question type.
    pub qtype: QType,
    /// Question class.
    pub qclass: Class,
    /// Offset just after the question: `msg[12..question_end]` is the question to echo.
    pub question_end: usize,
    /// The OPT record of the additional section, if any.
    pub edns: Option<Edns>,
}

impl<'a> QueryView<'a> {
    /// Reads header, exactly one question and the OPT record. Never panics, never allocates.
    ///
    /// Errors: [`QueryError::NoHeader`] for fewer than 12 bytes; otherwise
    /// [`QueryError::Malformed`] with the header, e.g. for `qdcount != 1`, a compressed or
    /// truncated question, records running past the end, or more than one OPT record.
    pub fn parse(msg: &'a [u8]) -> Result<QueryView<'a>, QueryError> {
        let header = Header::parse(msg).map_err(|_| QueryError::NoHeader)?;
        let bad = |e| QueryError::Malformed(header, e);
        if header.qdcount != 1 {
            return Err(bad(WireError::QuestionCount(header.qdcount)));
        }
        // Uncompressed question name: labels up to the root, 255 octets at most.
        let mut at = HEADER_LEN;
        loop {
            let len = *msg.get(at).ok_or(bad(WireError::Truncated))?;
            if len == 0 {
                at += 1;
                break;
            }
            if len & 0xC0 == 0xC0 {
                return Err(bad(WireError::BadPointer));
            }
            if len > 63 {
                return Err(bad(WireError::BadLabelType));
            }
            at += 1 + len as usize;
            if at - HEADER_LEN >= 255 {
                return Err(bad(WireError::NameTooLong));
            }
        }
        let tail = msg.get(at..at + 4).ok_or(bad(WireError::Truncated))?;
        let qtype = QType(u16::from_be_bytes([tail[0], tail[1]]));
        let qclass = Class(u16::from_be_bytes([tail[2], tail[3]]));
        let question_end = at + 4;
        let mut pos = question_end;
        let mut edns = None;
        let before_additional = header.ancount as usize + header.nscount as usize;
        let records = before_additional + header.arcount as usize;
        for i in 0..records {
            let name_end = skip_name(msg, pos).map_err(bad)?;
            let fixed = msg.get(name_end..name_end + 10).ok_or(bad(WireError::Truncated))?;
            let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
            let rdlen = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
            let next = name_end + 10 + rdlen;
            if next > msg.len() {
                return Err(bad(WireError::Truncated));
            }
            if i >= before_additional && rtype == QType::OPT.0 {
                if edns.is_some() {
                    // RFC 6891 6.1.1: more than one OPT is a FORMERR.
                    return Err(bad(WireError::BadNameText("more than one OPT record")));
                }
                edns = Some(Edns {
                    udp_size: u16::from_be_bytes([fixed[2], fixed[3]]),
                    version: fixed[5],
                    dnssec_ok: fixed[6] & 0x80 != 0,
                });
            }
            pos = next;
        }
        Ok(QueryView { msg, header, qtype, qclass, question_end, edns })
    }

    /// The whole message.
    pub fn message(&self) -> &'a [u8] {
        self.msg
    }

    /// The question name in wire form, as received (case preserved).
    pub fn qname_wire(&self) -> &'a [u8] {
        &self.msg[HEADER_LEN..self.question_end - 4]
    }

    /// The question (name, type, class) exactly as received.
    pub fn question(&self) -> &'a [u8] {
        &self.msg[HEADER_LEN..self.question_end]
    }

    /// The labels of the question name, leftmost first, without the root.
    pub fn labels(&self) -> Labels<'a> {
        Labels { wire: self.qname_wire() }
    }
}

/// Iterator over the labels of a validated, uncompressed wire name.
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    wire: &'a [u8],
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, rest) = self.wire.split_first()?;
        let len = len as usize;
        if len == 0 || len > rest.len() {
            self.wire = &[];
            return None;
        }
        let (label, rest) = rest.split_at(len);
        self.wire = rest;
        Some(label)
    }
}

/// Response flags derived from a query: QR set, opcode, RD and CD copied, `rcode`'s low four bits.
#[inline]
pub fn response_flags(query: &Header, authoritative: bool, rcode: Rcode) -> u16 {
    let mut flags = Header::QR | (query.flags & (0x7800 | Header::RD | Header::CD)) | (rcode.0 & 0xF);
    if authoritative {
        flags |= Header::AA;
    }
    flags
}

/// Clears `out` and writes a header-only response (all counts zero): for FORMERR and NOTIMP.
pub fn header_only(out: &mut Vec<u8>, query: &Header, rcode: Rcode) {
    out.clear();
    Header { id: query.id, flags: response_flags(query, false, rcode), ..Header::default() }.push(out);
}

/// Clears `out` and writes the response header (qdcount 1, other counts 0) and the question
/// echoed byte for byte. Afterwards `out.len() == query.question_end`.
pub fn start_response(out: &mut Vec<u8>, query: &QueryView<'_>, flags: u16) {
    out.clear();
    Header { id: query.header.id, flags, qdcount: 1, ..Header::default() }.push(out);
    out.extend_from_slice(query.question());
}

/// Offsets of the count fields in the header.
const ANCOUNT_AT: usize = 6;
const ARCOUNT_AT: usize = 10;

#[inline]
fn bump(out: &mut [u8], at: usize) {
    let v = u16::from_be_bytes([out[at], out[at + 1]]).wrapping_add(1);
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Starts an answer record whose owner is a compression pointer to the question name
/// (offset 12), and bumps ANCOUNT. Append the RDATA, then call [`end_record`] with the
/// returned offset. `out` must start with a header.
#[inline]
pub fn begin_answer(out: &mut Vec<u8>, rtype: QType, class: Class, ttl: u32) -> usize {
    bump(out, ANCOUNT_AT);
    out.extend_from_slice(&[0xC0, HEADER_LEN as u8]);
    out.extend_from_slice(&rtype.0.to_be_bytes());
    out.extend_from_slice(&class.0.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.len()
}

/// Writes the RDLENGTH of the record begun with [`begin_answer`] (`rdata_at` is its return value).
#[inline]
pub fn end_record(out: &mut [u8], rdata_at: usize) {
    let len = (out.len() - rdata_at) as u16;
    out[rdata_at - 2..rdata_at].copy_from_slice(&len.to_be_bytes());
}

/// Appends an answer record with the given RDATA (owner: pointer to the question name).
#[inline]
pub fn push_answer(out: &mut Vec<u8>, rtype: QType, class: Class, ttl: u32, rdata: &[u8]) {
    let at = begin_answer(out, rtype, class, ttl);
    out.extend_from_slice(rdata);
    end_record(out, at);
}

/// Appends an OPT record (no options) carrying `rcode`'s extended bits, and bumps ARCOUNT.
/// The header's low four RCODE bits are the caller's (see [`response_flags`]).
#[inline]
pub fn push_response_opt(out: &mut Vec<u8>, udp_size: u16, rcode: Rcode, dnssec_ok: bool) {
    bump(out, ARCOUNT_AT);
    crate::push_opt(out, udp_size, (rcode.0 >> 4) as u8, 0, dnssec_ok);
}

/// Drops every record after the question, sets TC=1 and zeroes the record counts: the
/// caller then appends the OPT record again if the query had one.
pub fn truncate_to_question(out: &mut Vec<u8>, question_end: usize) {
    out.truncate(question_end);
    if out.len() >= HEADER_LEN {
        out[2] |= (Header::TC >> 8) as u8;
        out[6..12].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_query, Name, QueryOptions, QueryTemplate};

    fn query(name: &str, qtype: QType) -> Vec<u8> {
        let t = QueryTemplate::new(&name.parse::<Name>().unwrap(), qtype, QueryOptions::default());
        let mut v = Vec::new();
        t.write(0x4242, &mut v);
        v
    }

    #[test]
    fn view_matches_parse_query() {
        let q = query("A.Example.test", QType::TXT);
        let v = QueryView::parse(&q).unwrap();
        let p = parse_query(&q).unwrap();
        assert_eq!(v.header, p.header);
        assert_eq!(v.qtype, p.qtype);
        assert_eq!(v.qclass, p.qclass);
        assert_eq!(v.question_end, p.question_end);
        assert_eq!(v.edns, p.edns);
        assert_eq!(v.qname_wire(), p.qname.wire());
        let labels: Vec<&[u8]> = v.labels().collect();
        assert_eq!(labels, vec![&b"A"[..], b"Example", b"test"]);
    }

    #[test]
    fn build() {
        let q = query("a.test", QType::A);
        let v = QueryView::parse(&q).unwrap();
        let mut out = Vec::new();
        start_response(&mut out, &v, response_flags(&v.header, true, Rcode::NOERROR));
        assert_eq!(out.len(), v.question_end);
        push_answer(&mut out, QType::A, Class::IN, 300, &[192, 0, 2, 1]);
        push_response_opt(&mut out, 1232, Rcode(16), false);
        let h = Header::parse(&out).unwrap();
        assert_eq!((h.id, h.qdcount, h.ancount, h.arcount), (0x4242, 1, 1, 1));
        assert!(h.is_response());
        assert_eq!(h.flags & Header::RD, Header::RD);
        let p = parse_query(&out).unwrap();
        assert_eq!(p.edns.unwrap().udp_size, 1232);
        // extended rcode 1 in the OPT TTL's first octet
        assert_eq!(out[out.len() - 6], 1);
        truncate_to_question(&mut out, v.question_end);
        let h = Header::parse(&out).unwrap();
        assert!(h.truncated());
        assert_eq!((h.ancount, h.arcount), (0, 0));
    }

    #[test]
    fn rejects() {
        let q = query("a.test", QType::A);
        assert_eq!(QueryView::parse(&q[..5]), Err(QueryError::NoHeader));
        let mut c = q.clone();
        c[12] = 0xC0;
        assert!(matches!(QueryView::parse(&c), Err(QueryError::Malformed(_, WireError::BadPointer))));
        // two OPT records
        let mut two = q.clone();
        two[11] = 2;
        let opt = q[q.len() - 11..].to_vec();
        two.extend_from_slice(&opt);
        assert!(QueryView::parse(&two).is_err());
        for i in 0..q.len() {
            let _ = QueryView::parse(&q[..i]);
            for b in [0u8, 1, 0x3f, 0x40, 0xc0, 0xff] {
                let mut m = q.clone();
                m[i] = b;
                if let Ok(v) = QueryView::parse(&m) {
                    let _ = v.labels().count();
                    let _ = v.question();
                }
            }
        }
    }
}
