//! Whole-message decoding and dig-like presentation, for `volley query`.
//!
//! [`format_message`] prints a message the way dig does: header, OPT pseudosection, then
//! question, answer, authority and additional sections. RDATA of A, AAAA, NS, CNAME, PTR,
//! DNAME, MX, TXT, SOA and SRV is decoded; anything else (or RDATA that does not decode) is
//! shown in the RFC 3597 form `\# LEN HEX`. Never panics, whatever the bytes.

use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::name::parse_name;
use crate::{Class, Header, Name, QType, Rcode, WireError, HEADER_LEN};

/// One resource record, with its RDATA located in the message (for names compressed in RDATA).
struct Record {
    name: Name,
    rtype: QType,
    class: u16,
    ttl: u32,
    rdata_at: usize,
    rdata_len: usize,
}

struct Question {
    name: Name,
    qtype: QType,
    class: Class,
}

fn read_u16(msg: &[u8], at: usize) -> Result<u16, WireError> {
    let b = msg.get(at..at + 2).ok_or(WireError::Truncated)?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}

fn read_u32(msg: &[u8], at: usize) -> Result<u32, WireError> {
    let b = msg.get(at..at + 4).ok_or(WireError::Truncated)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn opcode_name(op: u8) -> String {
    match op {
        0 => "QUERY".into(),
        1 => "IQUERY".into(),
        2 => "STATUS".into(),
        4 => "NOTIFY".into(),
        5 => "UPDATE".into(),
        6 => "DSO".into(),
        v => format!("RESERVED{v}"),
    }
}

/// Decodes a whole message into dig-like text (ending with a newline).
///
/// Errors when the header, a question or a record runs past the end or holds a bad name;
/// trailing bytes after the last record are ignored.
pub fn format_message(msg: &[u8]) -> Result<String, WireError> {
    let h = Header::parse(msg)?;
    let mut at = HEADER_LEN;
    let mut questions = Vec::new();
    for _ in 0..h.qdcount {
        let (name, end) = parse_name(msg, at)?;
        let qtype = QType(read_u16(msg, end)?);
        let class = Class(read_u16(msg, end + 2)?);
        questions.push(Question { name, qtype, class });
        at = end + 4;
    }
    let mut sections: [Vec<Record>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for (s, count) in [h.ancount, h.nscount, h.arcount].into_iter().enumerate() {
        for _ in 0..count {
            let (name, end) = parse_name(msg, at)?;
            let rtype = QType(read_u16(msg, end)?);
            let class = read_u16(msg, end + 2)?;
            let ttl = read_u32(msg, end + 4)?;
            let rdata_len = read_u16(msg, end + 8)? as usize;
            let rdata_at = end + 10;
            if rdata_at + rdata_len > msg.len() {
                return Err(WireError::Truncated);
            }
            sections[s].push(Record { name, rtype, class, ttl, rdata_at, rdata_len });
            at = rdata_at + rdata_len;
        }
    }
    // The OPT record (first one) carries the EDNS part of the RCODE.
    let opt_index = sections[2].iter().position(|r| r.rtype == QType::OPT);
    let opt = opt_index.map(|i| &sections[2][i]);
    let rcode = Rcode(opt.map_or(0, |o| ((o.ttl >> 24) as u16) << 4) | h.rcode().0);

    let mut o = String::with_capacity(256);
    let _ = writeln!(o, ";; ->>HEADER<<- opcode: {}, status: {}, id: {}", opcode_name(h.opcode().0), rcode, h.id);
    let mut flags = Vec::new();
    for (bit, n) in [
        (Header::QR, "qr"),
        (Header::AA, "aa"),
        (Header::TC, "tc"),
        (Header::RD, "rd"),
        (Header::RA, "ra"),
        (0x0040, "z"),
        (Header::AD, "ad"),
        (Header::CD, "cd"),
    ] {
        if h.flags & bit != 0 {
            flags.push(n);
        }
    }
    let _ = writeln!(
        o,
        ";; flags: {}; QUERY: {}, ANSWER: {}, AUTHORITY: {}, ADDITIONAL: {}",
        flags.join(" "),
        h.qdcount,
        h.ancount,
        h.nscount,
        h.arcount
    );
    if let Some(opt) = opt {
        let version = (opt.ttl >> 16) as u8;
        let eflags = opt.ttl as u16;
        let mut fl = String::new();
        if eflags & 0x8000 != 0 {
            fl.push_str(" do");
        }
        if eflags & 0x7FFF != 0 {
            let _ = write!(fl, "; MBZ: 0x{:04x}", eflags & 0x7FFF);
        }
        let _ = write!(o, "\n;; OPT PSEUDOSECTION:\n; EDNS: version: {version}, flags:{fl}; udp: {}\n", opt.class);
        // Options: code, length, data.
        let data = &msg[opt.rdata_at..opt.rdata_at + opt.rdata_len];
        let mut i = 0;
        while i + 4 <= data.len() {
            let code = u16::from_be_bytes([data[i], data[i + 1]]);
            let len = u16::from_be_bytes([data[i + 2], data[i + 3]]) as usize;
            let Some(v) = data.get(i + 4..i + 4 + len) else {
                let _ = writeln!(o, "; OPT={code}: (truncated)");
                break;
            };
            let name = match code {
                3 => "NSID".to_string(),
                8 => "CLIENT-SUBNET".to_string(),
                10 => "COOKIE".to_string(),
                11 => "TCP-KEEPALIVE".to_string(),
                12 => "PADDING".to_string(),
                15 => "EDE".to_string(),
                c => format!("OPT={c}"),
            };
            let _ = writeln!(o, "; {name}: {}", hex(v));
            i += 4 + len;
        }
    }
    if !questions.is_empty() {
        o.push_str("\n;; QUESTION SECTION:\n");
        for q in &questions {
            let _ = writeln!(o, ";{}\t\t{}\t{}", q.name, q.class, q.qtype);
        }
    }
    for (s, title) in ["ANSWER", "AUTHORITY", "ADDITIONAL"].into_iter().enumerate() {
        let records: Vec<&Record> =
            sections[s].iter().enumerate().filter(|(i, _)| s != 2 || Some(*i) != opt_index).map(|(_, r)| r).collect();
        if records.is_empty() {
            continue;
        }
        let _ = write!(o, "\n;; {title} SECTION:\n");
        for r in records {
            let _ = writeln!(o, "{}\t{}\t{}\t{}\t{}", r.name, r.ttl, Class(r.class), r.rtype, rdata_text(msg, r));
        }
    }
    o.push('\n');
    Ok(o)
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02X}");
    }
    s
}

/// RFC 3597 generic form.
fn generic(data: &[u8]) -> String {
    if data.is_empty() {
        "\\# 0".to_string()
    } else {
        format!("\\# {} {}", data.len(), hex(data))
    }
}

/// A name inside RDATA (compression allowed); it must end within the RDATA.
fn rdata_name(msg: &[u8], at: usize, end: usize) -> Option<(Name, usize)> {
    let (n, next) = parse_name(msg, at).ok()?;
    (next <= end).then_some((n, next))
}

/// Character-strings, quoted and escaped as dig does.
fn txt_strings(data: &[u8]) -> Option<String> {
    let mut s = String::new();
    let mut i = 0;
    while i < data.len() {
        let len = data[i] as usize;
        let chunk = data.get(i + 1..i + 1 + len)?;
        if !s.is_empty() {
            s.push(' ');
        }
        s.push('"');
        for &c in chunk {
            match c {
                b'"' | b'\\' => {
                    s.push('\\');
                    s.push(c as char);
                }
                0x20..=0x7e => s.push(c as char),
                _ => {
                    let _ = write!(s, "\\{c:03}");
                }
            }
        }
        s.push('"');
        i += 1 + len;
    }
    if data.is_empty() {
        return None;
    }
    Some(s)
}

fn rdata_text(msg: &[u8], r: &Record) -> String {
    let start = r.rdata_at;
    let end = start + r.rdata_len;
    let data = &msg[start..end];
    decode_rdata(msg, r.rtype, data, start, end).unwrap_or_else(|| generic(data))
}

fn decode_rdata(msg: &[u8], rtype: QType, data: &[u8], start: usize, end: usize) -> Option<String> {
    let u16_at = |i: usize| data.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let u32_at = |i: usize| data.get(i..i + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    match rtype.0 {
        1 => {
            let b: [u8; 4] = data.try_into().ok()?;
            Some(Ipv4Addr::from(b).to_string())
        }
        28 => {
            let b: [u8; 16] = data.try_into().ok()?;
            Some(Ipv6Addr::from(b).to_string())
        }
        2 | 5 | 12 | 39 => {
            let (n, next) = rdata_name(msg, start, end)?;
            (next == end).then(|| n.to_string())
        }
        15 => {
            let pref = u16_at(0)?;
            let (n, next) = rdata_name(msg, start + 2, end)?;
            (next == end).then(|| format!("{pref} {n}"))
        }
        16 => txt_strings(data),
        6 => {
            let (mname, a) = rdata_name(msg, start, end)?;
            let (rname, b) = rdata_name(msg, a, end)?;
            if end - b != 20 {
                return None;
            }
            let f = |i| u32_at(b - start + i);
            Some(format!("{mname} {rname} {} {} {} {} {}", f(0)?, f(4)?, f(8)?, f(12)?, f(16)?))
        }
        33 => {
            let (prio, weight, port) = (u16_at(0)?, u16_at(2)?, u16_at(4)?);
            let (n, next) = rdata_name(msg, start + 6, end)?;
            (next == end).then(|| format!("{prio} {weight} {port} {n}"))
        }
        _ => None,
    }
}

/// Text from outside (a file's value, a parser's message quoting it) made fit for a one-line
/// error: control characters (line ends included) escaped, and cut after `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max.saturating_add(8)));
    for (n, c) in text.chars().enumerate() {
        if n == max {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A Unix time in nanoseconds as an RFC 3339 UTC timestamp with `frac_digits` digits of the
/// second (0 to 9), e.g. `2026-11-21T03:04:05.678Z` with 3: for the timestamps results and
/// clients files carry.
pub fn rfc3339(unix_ns: u64, frac_digits: u32) -> String {
    let secs = unix_ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    let mut out = format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", rem / 3600, rem / 60 % 60, rem % 60);
    let digits = frac_digits.min(9);
    if digits > 0 {
        let frac = unix_ns % 1_000_000_000 / 10u64.pow(9 - digits);
        out.push_str(&format!(".{frac:0width$}", width = digits as usize));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{begin_answer, end_record, push_answer, push_response_opt, response_flags, start_response};
    use crate::{QueryOptions, QueryTemplate, QueryView};

    fn response() -> Vec<u8> {
        let t = QueryTemplate::new(&"www.Example.test".parse().unwrap(), QType::A, QueryOptions::default());
        let mut q = Vec::new();
        t.write(1234, &mut q);
        let v = QueryView::parse(&q).unwrap();
        let mut out = Vec::new();
        start_response(&mut out, &v, response_flags(&v.header, true, Rcode::NOERROR));
        push_answer(&mut out, QType::A, Class::IN, 300, &[192, 0, 2, 1]);
        push_answer(&mut out, QType::AAAA, Class::IN, 300, &[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        push_answer(&mut out, QType::TXT, Class::IN, 60, b"\x06volley\x04a\"b\\\x02\x01x");
        // MX 10 mail.<ptr to question>
        push_answer(&mut out, QType::MX, Class::IN, 60, &[0, 10, 4, b'm', b'a', b'i', b'l', 0xC0, 12]);
        push_answer(&mut out, QType::CNAME, Class::IN, 60, &[0xC0, 12]);
        // SOA: ns.<ptr> host.<ptr> 1 2 3 4 5
        let at = begin_answer(&mut out, QType::SOA, Class::IN, 60);
        out.extend_from_slice(&[2, b'n', b's', 0xC0, 12, 4, b'h', b'o', b's', b't', 0xC0, 12]);
        for v in 1u32..=5 {
            out.extend_from_slice(&v.to_be_bytes());
        }
        end_record(&mut out, at);
        push_answer(&mut out, QType(33), Class::IN, 60, &[0, 1, 0, 2, 0, 53, 0xC0, 12]);
        push_answer(&mut out, QType(99), Class::IN, 60, &[]);
        push_answer(&mut out, QType(65280), Class::IN, 60, &[0xAB, 0xCD]);
        push_answer(&mut out, QType::A, Class::IN, 60, &[1, 2, 3]); // bad length: generic
        push_response_opt(&mut out, 1232, Rcode::NOERROR, true);
        out
    }

    #[test]
    fn dig_like() {
        let text = format_message(&response()).unwrap();
        let want = [
            ";; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1234",
            ";; flags: qr aa rd; QUERY: 1, ANSWER: 10, AUTHORITY: 0, ADDITIONAL: 1",
            ";; OPT PSEUDOSECTION:",
            "; EDNS: version: 0, flags: do; udp: 1232",
            ";; QUESTION SECTION:",
            ";www.Example.test.\t\tIN\tA",
            ";; ANSWER SECTION:",
            "www.Example.test.\t300\tIN\tA\t192.0.2.1",
            "www.Example.test.\t300\tIN\tAAAA\t2001:db8::1",
            "www.Example.test.\t60\tIN\tTXT\t\"volley\" \"a\\\"b\\\\\" \"\\001x\"",
            "www.Example.test.\t60\tIN\tMX\t10 mail.www.Example.test.",
            "www.Example.test.\t60\tIN\tCNAME\twww.Example.test.",
            "www.Example.test.\t60\tIN\tSOA\tns.www.Example.test. host.www.Example.test. 1 2 3 4 5",
            "www.Example.test.\t60\tIN\tSRV\t1 2 53 www.Example.test.",
            "www.Example.test.\t60\tIN\tSPF\t\\# 0",
            "www.Example.test.\t60\tIN\tTYPE65280\t\\# 2 ABCD",
            "www.Example.test.\t60\tIN\tA\t\\# 3 010203",
        ];
        for w in want {
            assert!(text.lines().any(|l| l == w), "missing line {w:?} in\n{text}");
        }
        assert!(!text.contains("ADDITIONAL SECTION"), "OPT is shown only as the pseudosection");
    }

    #[test]
    fn extended_rcode() {
        let mut m = response();
        let n = m.len();
        m[n - 6] = 1; // OPT ext rcode 1 → BADVERS (16)
        assert!(format_message(&m).unwrap().contains("status: BADVERS"));
        assert_eq!(format_message(&m[..5]), Err(WireError::ShortHeader));
    }

    #[test]
    fn never_panics() {
        let m = response();
        for i in 0..=m.len() {
            let _ = format_message(&m[..i]);
        }
        for i in 0..m.len() {
            for b in [0u8, 1, 0x3f, 0x40, 0x7f, 0x80, 0xc0, 0xc1, 0xff] {
                let mut c = m.clone();
                c[i] = b;
                let _ = format_message(&c);
            }
        }
        let mut x: u32 = 12345;
        for _ in 0..20_000 {
            let len = (x % 120) as usize;
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = format_message(&v);
        }
    }
}
