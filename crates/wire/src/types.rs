use std::fmt;
use std::str::FromStr;

use crate::WireError;

/// A record type (RFC 1035 3.2.2 and later registries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QType(pub u16);

const TYPES: &[(&str, u16)] = &[
    ("A", 1),
    ("NS", 2),
    ("CNAME", 5),
    ("SOA", 6),
    ("NULL", 10),
    ("PTR", 12),
    ("HINFO", 13),
    ("MX", 15),
    ("TXT", 16),
    ("RP", 17),
    ("AAAA", 28),
    ("LOC", 29),
    ("SRV", 33),
    ("NAPTR", 35),
    ("CERT", 37),
    ("DNAME", 39),
    ("OPT", 41),
    ("DS", 43),
    ("SSHFP", 44),
    ("RRSIG", 46),
    ("NSEC", 47),
    ("DNSKEY", 48),
    ("NSEC3", 50),
    ("NSEC3PARAM", 51),
    ("TLSA", 52),
    ("SMIMEA", 53),
    ("CDS", 59),
    ("CDNSKEY", 60),
    ("OPENPGPKEY", 61),
    ("CSYNC", 62),
    ("ZONEMD", 63),
    ("SVCB", 64),
    ("HTTPS", 65),
    ("SPF", 99),
    ("TKEY", 249),
    ("TSIG", 250),
    ("IXFR", 251),
    ("AXFR", 252),
    ("ANY", 255),
    ("URI", 256),
    ("CAA", 257),
];

impl QType {
    pub const A: QType = QType(1);
    pub const NS: QType = QType(2);
    pub const CNAME: QType = QType(5);
    pub const SOA: QType = QType(6);
    pub const PTR: QType = QType(12);
    pub const MX: QType = QType(15);
    pub const TXT: QType = QType(16);
    pub const AAAA: QType = QType(28);
    pub const OPT: QType = QType(41);
    pub const ANY: QType = QType(255);

    /// The mnemonic, if the type has one.
    pub fn name(self) -> Option<&'static str> {
        TYPES.iter().find(|(_, v)| *v == self.0).map(|(n, _)| *n)
    }
}

impl FromStr for QType {
    type Err = WireError;
    /// Accepts mnemonics in any case and the RFC 3597 form `TYPE123`.
    fn from_str(s: &str) -> Result<Self, WireError> {
        if let Some((_, v)) = TYPES.iter().find(|(n, _)| n.eq_ignore_ascii_case(s)) {
            return Ok(QType(*v));
        }
        if s.len() > 4 && s[..4].eq_ignore_ascii_case("TYPE") {
            if let Ok(v) = s[4..].parse::<u16>() {
                return Ok(QType(v));
            }
        }
        Err(WireError::UnknownType)
    }
}

impl fmt::Display for QType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "TYPE{}", self.0),
        }
    }
}

/// A record class; IN almost always.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Class(pub u16);

impl Class {
    pub const IN: Class = Class(1);
    pub const CH: Class = Class(3);
    pub const ANY: Class = Class(255);
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => f.write_str("IN"),
            3 => f.write_str("CH"),
            4 => f.write_str("HS"),
            254 => f.write_str("NONE"),
            255 => f.write_str("ANY"),
            v => write!(f, "CLASS{v}"),
        }
    }
}

/// Header opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opcode(pub u8);

impl Opcode {
    pub const QUERY: Opcode = Opcode(0);
}

/// A response code; values above 15 come from the EDNS extended RCODE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rcode(pub u16);

impl Rcode {
    pub const NOERROR: Rcode = Rcode(0);
    pub const FORMERR: Rcode = Rcode(1);
    pub const SERVFAIL: Rcode = Rcode(2);
    pub const NXDOMAIN: Rcode = Rcode(3);
    pub const NOTIMP: Rcode = Rcode(4);
    pub const REFUSED: Rcode = Rcode(5);

    /// The mnemonic used in summaries and results (`NOERROR`, `NXDOMAIN`, ... or `RCODE23`).
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        let n = match self.0 {
            0 => "NOERROR",
            1 => "FORMERR",
            2 => "SERVFAIL",
            3 => "NXDOMAIN",
            4 => "NOTIMP",
            5 => "REFUSED",
            6 => "YXDOMAIN",
            7 => "YXRRSET",
            8 => "NXRRSET",
            9 => "NOTAUTH",
            10 => "NOTZONE",
            11 => "DSOTYPENI",
            16 => "BADVERS",
            23 => "BADCOOKIE",
            v => return format!("RCODE{v}").into(),
        };
        n.into()
    }
}

impl fmt::Display for Rcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qtype_text() {
        assert_eq!("aaaa".parse::<QType>().unwrap(), QType::AAAA);
        assert_eq!("TYPE65".parse::<QType>().unwrap(), QType(65));
        assert_eq!(QType(65).to_string(), "HTTPS");
        assert_eq!(QType(65280).to_string(), "TYPE65280");
        assert!("BOGUS".parse::<QType>().is_err());
        assert!("TYPE".parse::<QType>().is_err());
        assert_eq!(Rcode(3).to_string(), "NXDOMAIN");
        assert_eq!(Rcode(99).to_string(), "RCODE99");
    }
}
