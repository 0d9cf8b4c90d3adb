//! The pcapng format (draft-ietf-opsawg-pcapng): a sequence of blocks `type, length, body,
//! length`, each section opened by a Section Header Block that fixes its byte order, packets in
//! Enhanced (6), Simple (3) or obsolete (2) Packet Blocks, per-interface link type and time
//! resolution from Interface Description Blocks. Other blocks are skipped.

use std::io::Read;

use super::{read_full, CaptureError, Packet, MAX_RECORD};

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const OPB: u32 = 2;
const SPB: u32 = 3;
const EPB: u32 = 6;
/// The largest block accepted: a packet of [`MAX_RECORD`] bytes plus generous room for options.
const MAX_BLOCK: usize = MAX_RECORD + 65_536;
/// At most this many interfaces per section (a corrupt file cannot make us allocate more).
const MAX_INTERFACES: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    /// Timestamp units: `Pow10(6)` means microseconds (the default).
    resol: Resol,
    /// Seconds added to every timestamp (if_tsoffset).
    offset_s: i64,
}

#[derive(Debug, Clone, Copy)]
enum Resol {
    Pow10(u8),
    Pow2(u8),
}

impl Resol {
    fn to_ns(self, ts: u64) -> u64 {
        match self {
            Resol::Pow10(e) if e <= 9 => ts.saturating_mul(10u64.pow(9 - e as u32)),
            Resol::Pow10(e) => {
                let d = 10u128.checked_pow(e as u32 - 9).unwrap_or(u128::MAX);
                (ts as u128 / d) as u64
            }
            Resol::Pow2(e) => {
                let ns = (ts as u128 * 1_000_000_000) >> e.min(127);
                ns.min(u64::MAX as u128) as u64
            }
        }
    }
}

pub(crate) struct PcapngReader<R: Read> {
    r: R,
    big_endian: bool,
    interfaces: Vec<Interface>,
    offset: u64,
    index: u64,
    /// The body of the current block (without type and lengths).
    body: Vec<u8>,
    /// Timestamp of the last timed packet, given to Simple Packet Blocks (which have none).
    last_ts: u64,
    /// True once the first block (always a SHB: its type was the magic) is pending.
    first: bool,
}

impl<R: Read> PcapngReader<R> {
    /// The SHB block type (the magic) has already been read from `r`.
    pub(crate) fn new(r: R) -> Result<Self, CaptureError> {
        let mut p = PcapngReader {
            r,
            big_endian: false,
            interfaces: Vec::new(),
            offset: 0,
            index: 0,
            body: Vec::with_capacity(4096),
            last_ts: 0,
            first: true,
        };
        // Read the first section header now, so that a file that is not pcapng after all
        // (the magic is only 4 bytes of CR/LF) is refused up front.
        match p.read_block() {
            Ok(Some(SHB)) => Ok(p),
            Ok(_) => Err(CaptureError::NotACapture("pcapng section header missing".into())),
            Err(CaptureError::Truncated { reason, .. }) => {
                Err(CaptureError::NotACapture(format!("pcapng section header unreadable: {reason}")))
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    fn u16(&self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.big_endian {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    fn truncated(&self, offset: u64, reason: String) -> CaptureError {
        CaptureError::Truncated { offset, packet: self.index + 1, reason }
    }

    /// Reads one block into `self.body` and returns its type; `Ok(None)` at a clean end.
    /// Section headers and interface descriptions are interpreted here.
    fn read_block(&mut self) -> Result<Option<u32>, CaptureError> {
        let start = self.offset;
        let mut head = [0u8; 12];
        let (btype_raw, len_raw);
        if self.first {
            // The block type (the magic) was read by CaptureReader::new.
            self.first = false;
            let got =
                read_full(&mut self.r, &mut head[4..12]).map_err(|source| CaptureError::Io { offset: 4, source })?;
            if got < 8 {
                return Err(self.truncated(start, "section header cut short".into()));
            }
            head[0..4].copy_from_slice(&SHB.to_le_bytes());
        } else {
            let got =
                read_full(&mut self.r, &mut head[..8]).map_err(|source| CaptureError::Io { offset: start, source })?;
            if got == 0 {
                return Ok(None);
            }
            if got < 8 {
                return Err(self.truncated(start, format!("block header cut short ({got} of 8 bytes)")));
            }
            if u32::from_le_bytes([head[0], head[1], head[2], head[3]]) == SHB {
                // A new section: its byte-order magic follows the length.
                let got = read_full(&mut self.r, &mut head[8..12])
                    .map_err(|source| CaptureError::Io { offset: start + 8, source })?;
                if got < 4 {
                    return Err(self.truncated(start, "section header cut short".into()));
                }
            }
        }
        let is_shb = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) == SHB;
        let already;
        if is_shb {
            match [head[8], head[9], head[10], head[11]] {
                [0x4d, 0x3c, 0x2b, 0x1a] => self.big_endian = false,
                [0x1a, 0x2b, 0x3c, 0x4d] => self.big_endian = true,
                _ => return Err(self.truncated(start, "section header with a bad byte-order magic".into())),
            }
            self.interfaces.clear();
            btype_raw = SHB;
            len_raw = self.u32(&head[4..8]);
            already = 12usize;
        } else {
            btype_raw = self.u32(&head[0..4]);
            len_raw = self.u32(&head[4..8]);
            already = 8;
        }
        let total = len_raw as usize;
        if total < 12 || total % 4 != 0 || total > MAX_BLOCK || total < already + 4 {
            return Err(self
                .truncated(start, format!("block of type {btype_raw:#x} claims a length of {total} bytes (corrupt)")));
        }
        // The body after what was read already, plus the trailing length.
        let rest = total - already;
        self.body.resize(rest, 0);
        let got = read_full(&mut self.r, &mut self.body)
            .map_err(|source| CaptureError::Io { offset: start + already as u64, source })?;
        if got < rest {
            return Err(self.truncated(start, format!("block cut short ({} of {total} bytes)", already + got)));
        }
        let trailer = self.u32(&self.body[rest - 4..]);
        if trailer != len_raw {
            return Err(self.truncated(start, format!("block lengths disagree ({len_raw} and {trailer}) (corrupt)")));
        }
        self.body.truncate(rest - 4);
        self.offset = start + total as u64;
        match btype_raw {
            SHB => {
                // body: version major/minor (4), section length (8), options: nothing we need.
            }
            IDB => {
                if self.body.len() < 8 {
                    return Err(self.truncated(start, "interface description too short".into()));
                }
                if self.interfaces.len() >= MAX_INTERFACES {
                    return Err(self.truncated(start, "more than 65536 interfaces in one section".into()));
                }
                let linktype = self.u16(&self.body[0..2]) as u32;
                let snaplen = self.u32(&self.body[4..8]);
                let mut iface = Interface { linktype, snaplen, resol: Resol::Pow10(6), offset_s: 0 };
                let mut at = 8;
                while at + 4 <= self.body.len() {
                    let code = self.u16(&self.body[at..at + 2]);
                    let len = self.u16(&self.body[at + 2..at + 4]) as usize;
                    let val = match self.body.get(at + 4..at + 4 + len) {
                        Some(v) => v,
                        None => break,
                    };
                    match (code, len) {
                        (0, _) => break,
                        (9, 1) => {
                            let v = val[0];
                            iface.resol = if v & 0x80 != 0 { Resol::Pow2(v & 0x7f) } else { Resol::Pow10(v) };
                        }
                        (14, 8) => {
                            let b = [val[0], val[1], val[2], val[3], val[4], val[5], val[6], val[7]];
                            iface.offset_s =
                                if self.big_endian { i64::from_be_bytes(b) } else { i64::from_le_bytes(b) };
                        }
                        _ => {}
                    }
                    at += 4 + len.div_ceil(4) * 4;
                }
                self.interfaces.push(iface);
            }
            _ => {}
        }
        Ok(Some(btype_raw))
    }

    pub(crate) fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        loop {
            let start = self.offset;
            let Some(btype) = self.read_block()? else { return Ok(None) };
            let (iface_id, ts, cap, orig, data_at) = match btype {
                EPB | OPB => {
                    if self.body.len() < 20 {
                        return Err(self.truncated(start, "packet block too short".into()));
                    }
                    let id = if btype == EPB {
                        self.u32(&self.body[0..4]) as usize
                    } else {
                        self.u16(&self.body[0..2]) as usize
                    };
                    let ts = ((self.u32(&self.body[4..8]) as u64) << 32) | self.u32(&self.body[8..12]) as u64;
                    let cap = self.u32(&self.body[12..16]) as usize;
                    let orig = self.u32(&self.body[16..20]);
                    (id, Some(ts), cap, orig, 20)
                }
                SPB => {
                    if self.body.len() < 4 {
                        return Err(self.truncated(start, "simple packet block too short".into()));
                    }
                    let orig = self.u32(&self.body[0..4]);
                    let snap =
                        self.interfaces.first().map_or(u32::MAX, |i| if i.snaplen == 0 { u32::MAX } else { i.snaplen });
                    let cap = (orig.min(snap) as usize).min(self.body.len() - 4);
                    (0, None, cap, orig, 4)
                }
                _ => continue,
            };
            let Some(iface) = self.interfaces.get(iface_id).copied() else {
                return Err(self.truncated(start, format!("packet on undeclared interface {iface_id} (corrupt)")));
            };
            if data_at + cap > self.body.len() {
                return Err(
                    self.truncated(start, format!("packet block claims {cap} captured bytes, holds fewer (corrupt)"))
                );
            }
            let ts_ns = match ts {
                Some(ts) => {
                    let ns = iface.resol.to_ns(ts);
                    let ns = (ns as i128 + iface.offset_s as i128 * 1_000_000_000).clamp(0, u64::MAX as i128) as u64;
                    self.last_ts = ns;
                    ns
                }
                None => self.last_ts,
            };
            self.index += 1;
            return Ok(Some(Packet {
                ts_ns,
                linktype: iface.linktype,
                data: &self.body[data_at..data_at + cap],
                orig_len: orig,
                offset: start,
                index: self.index - 1,
            }));
        }
    }
}
