use crate::{types::Opcode, Rcode, WireError};

/// Length of the fixed DNS header.
pub const HEADER_LEN: usize = 12;

/// The 12-byte DNS header (RFC 1035 4.1.1), read without touching the rest of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub id: u16,
    /// Second 16-bit word: QR, opcode, AA, TC, RD, RA, Z, AD, CD, RCODE (low 4 bits).
    pub flags: u16,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
}

impl Header {
    pub const QR: u16 = 0x8000;
    pub const AA: u16 = 0x0400;
    pub const TC: u16 = 0x0200;
    pub const RD: u16 = 0x0100;
    pub const RA: u16 = 0x0080;
    pub const AD: u16 = 0x0020;
    pub const CD: u16 = 0x0010;

    /// Reads the header; a few nanoseconds, safe for the per-query hot path.
    #[inline]
    pub fn parse(msg: &[u8]) -> Result<Header, WireError> {
        if msg.len() < HEADER_LEN {
            return Err(WireError::ShortHeader);
        }
        let w = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
        Ok(Header { id: w(0), flags: w(2), qdcount: w(4), ancount: w(6), nscount: w(8), arcount: w(10) })
    }

    /// Writes the header into the first 12 bytes of `out`.
    #[inline]
    pub fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.id.to_be_bytes());
        out[2..4].copy_from_slice(&self.flags.to_be_bytes());
        out[4..6].copy_from_slice(&self.qdcount.to_be_bytes());
        out[6..8].copy_from_slice(&self.ancount.to_be_bytes());
        out[8..10].copy_from_slice(&self.nscount.to_be_bytes());
        out[10..12].copy_from_slice(&self.arcount.to_be_bytes());
    }

    /// Appends the header to `out`.
    pub fn push(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + HEADER_LEN, 0);
        self.write(&mut out[at..]);
    }

    #[inline]
    pub fn is_response(&self) -> bool {
        self.flags & Self::QR != 0
    }
    #[inline]
    pub fn truncated(&self) -> bool {
        self.flags & Self::TC != 0
    }
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode(((self.flags >> 11) & 0xF) as u8)
    }
    /// The header's 4-bit RCODE (EDNS extended bits live in the OPT record).
    #[inline]
    pub fn rcode(&self) -> Rcode {
        Rcode(self.flags & 0xF)
    }
    #[inline]
    pub fn set_rcode(&mut self, rcode: Rcode) {
        self.flags = (self.flags & !0xF) | (rcode.0 & 0xF);
    }
}

/// Overwrites the message ID in place (used to stamp a prepared query).
#[inline]
pub fn set_id(msg: &mut [u8], id: u16) {
    msg[0..2].copy_from_slice(&id.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h =
            Header { id: 0xBEEF, flags: Header::QR | Header::RD | 3, qdcount: 1, ancount: 2, nscount: 0, arcount: 1 };
        let mut v = Vec::new();
        h.push(&mut v);
        let p = Header::parse(&v).unwrap();
        assert_eq!(p, h);
        assert!(p.is_response());
        assert_eq!(p.rcode(), Rcode::NXDOMAIN);
        assert_eq!(Header::parse(&v[..11]), Err(WireError::ShortHeader));
    }
}
