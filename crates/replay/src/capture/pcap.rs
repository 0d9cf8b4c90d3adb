//! The libpcap file format: a 24-byte file header, then records of a 16-byte header (24 in the
//! "modified" variant) and the captured bytes.

use std::io::Read;

use super::{read_full, CaptureError, Format, Packet, MAX_RECORD};

pub(crate) struct PcapReader<R: Read> {
    r: R,
    big_endian: bool,
    nanos: bool,
    /// Record header length: 16, or 24 for the modified (Kuznetzov) format.
    rec_len: usize,
    linktype: u32,
    offset: u64,
    index: u64,
    buf: Vec<u8>,
}

impl<R: Read> PcapReader<R> {
    /// `magic` has already been read from `r`.
    pub(crate) fn new(mut r: R, magic: [u8; 4]) -> Result<Self, CaptureError> {
        let big_endian = magic[0] == 0xa1;
        let m = if big_endian { u32::from_be_bytes(magic) } else { u32::from_le_bytes(magic) };
        let nanos = m == 0xa1b2_3c4d;
        let rec_len = if m == 0xa1b2_cd34 { 24 } else { 16 };
        let mut rest = [0u8; 20];
        let got = read_full(&mut r, &mut rest).map_err(|source| CaptureError::Io { offset: 4, source })?;
        if got < rest.len() {
            return Err(CaptureError::NotACapture(format!("pcap file header cut short ({} of 24 bytes)", 4 + got)));
        }
        let u32_at = |i: usize| {
            let b = [rest[i], rest[i + 1], rest[i + 2], rest[i + 3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        // rest: version (4), thiszone (4), sigfigs (4), snaplen (4), network (4)
        let linktype = u32_at(16) & 0xFFFF;
        Ok(PcapReader { r, big_endian, nanos, rec_len, linktype, offset: 24, index: 0, buf: Vec::with_capacity(2048) })
    }

    pub(crate) fn format(&self) -> Format {
        if self.nanos {
            Format::PcapNano
        } else {
            Format::PcapMicro
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    pub(crate) fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        let start = self.offset;
        let packet = self.index + 1;
        let mut hdr = [0u8; 24];
        let hdr = &mut hdr[..self.rec_len];
        let got = read_full(&mut self.r, hdr).map_err(|source| CaptureError::Io { offset: start, source })?;
        if got == 0 {
            return Ok(None);
        }
        if got < hdr.len() {
            return Err(CaptureError::Truncated {
                offset: start,
                packet,
                reason: format!("record header cut short ({got} of {} bytes)", hdr.len()),
            });
        }
        let sec = self.u32(&hdr[0..4]) as u64;
        let frac = self.u32(&hdr[4..8]) as u64;
        let incl = self.u32(&hdr[8..12]) as usize;
        let orig = self.u32(&hdr[12..16]);
        let limit = if self.nanos { 1_000_000_000 } else { 1_000_000 };
        if incl > MAX_RECORD || frac >= limit {
            return Err(CaptureError::Truncated {
                offset: start,
                packet,
                reason: if incl > MAX_RECORD {
                    format!("record header claims {incl} captured bytes (corrupt)")
                } else {
                    format!("record header has a fraction of a second of {frac} (corrupt)")
                },
            });
        }
        self.buf.resize(incl, 0);
        let got = read_full(&mut self.r, &mut self.buf)
            .map_err(|source| CaptureError::Io { offset: start + self.rec_len as u64, source })?;
        if got < incl {
            return Err(CaptureError::Truncated {
                offset: start,
                packet,
                reason: format!("packet data cut short ({got} of {incl} bytes)"),
            });
        }
        self.offset = start + (self.rec_len + incl) as u64;
        self.index += 1;
        let ts_ns = sec * 1_000_000_000 + if self.nanos { frac } else { frac * 1000 };
        Ok(Some(Packet {
            ts_ns,
            linktype: self.linktype,
            data: &self.buf,
            orig_len: orig,
            offset: start,
            index: self.index - 1,
        }))
    }
}
