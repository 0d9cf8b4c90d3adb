//! Capture files: pcap (libpcap, microsecond and nanosecond, either byte order, and the
//! "modified" Kuznetzov variant) and pcapng, read as a stream of packets in bounded memory.
//!
//! The files are parsed by pcap-parser's streaming readers; this module picks the reader from
//! the first four bytes (naming compressed files and other things that are not captures), keeps
//! pcapng's interfaces (link type, snap length, time resolution and offset), turns timestamps to
//! nanoseconds, and counts bytes and packets so that a break is reported where it is. Packets
//! come out one at a time through [`CaptureReader::next_packet`], borrowing the reader's buffer:
//! memory is that buffer ([`BUFFER`] bytes), whatever the size of the file. A file that ends in
//! the middle of a record, or whose next record is nonsense, yields [`CaptureError::Truncated`]
//! naming the byte offset and the packet number where it broke; every packet before that point
//! has been delivered. Obsolete pcapng Packet Blocks (type 2, replaced by the Enhanced Packet
//! Block in 2004's drafts) are skipped: pcap-parser does not read them, and no current tool
//! writes them.

mod layers;

use std::io::{self, Read};
use std::sync::{Arc, Mutex};

use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{Block, LegacyPcapReader, PcapBlockOwned, PcapError, PcapNGReader};

pub use layers::{decode, Decoded, DropReason, Transport};

/// Link types (the `LINKTYPE_*` values of tcpdump.org) this crate decodes.
pub mod linktype {
    /// BSD loopback: 4-byte address family in the capturing host's byte order.
    pub const NULL: u32 = 0;
    /// Ethernet (with 802.1Q / 802.1ad VLAN tags).
    pub const ETHERNET: u32 = 1;
    /// Raw IP on some BSDs (value 12 in their DLT space).
    pub const RAW_BSD12: u32 = 12;
    /// Raw IP on OpenBSD (value 14 in its DLT space).
    pub const RAW_BSD14: u32 = 14;
    /// Raw IPv4 or IPv6, version from the first nibble.
    pub const RAW: u32 = 101;
    /// OpenBSD loopback: 4-byte address family in network byte order.
    pub const LOOP: u32 = 108;
    /// Linux cooked capture v1 (`tcpdump -i any`, 16-byte header).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4 only.
    pub const IPV4: u32 = 228;
    /// Raw IPv6 only.
    pub const IPV6: u32 = 229;
    /// Linux cooked capture v2 (20-byte header).
    pub const LINUX_SLL2: u32 = 276;
}

/// The largest packet record accepted (256 KiB, libpcap's own maximum snap length). A record
/// header claiming more is taken as corruption: reading stops there, as for a truncated file.
pub const MAX_RECORD: usize = 262_144;

/// The read buffer: a record of [`MAX_RECORD`] bytes with room for a pcapng block's options. A
/// block that does not fit is taken as corruption.
pub const BUFFER: usize = MAX_RECORD + 65_536 + 4096;

/// At most this many interfaces per pcapng section (a corrupt file cannot make us keep more).
const MAX_INTERFACES: usize = 65_536;

/// One packet of a capture, borrowed from the reader until the next call.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The link type of the interface it was captured on (see [`linktype`]).
    pub linktype: u32,
    /// The bytes captured (possibly fewer than were on the wire: see `orig_len`).
    pub data: &'a [u8],
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// Byte offset of the packet's record in the file.
    pub offset: u64,
    /// 0-based number of the packet in the file.
    pub index: u64,
}

/// The container format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// libpcap format with microsecond timestamps.
    PcapMicro,
    /// libpcap format with nanosecond timestamps.
    PcapNano,
    /// pcapng.
    Pcapng,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::PcapMicro => "pcap (microsecond timestamps)",
            Format::PcapNano => "pcap (nanosecond timestamps)",
            Format::Pcapng => "pcapng",
        })
    }
}

/// Why a capture cannot be read (further).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Not a pcap or pcapng file at all (checked on the first bytes).
    #[error("not a pcap or pcapng capture: {0}")]
    NotACapture(String),
    /// The file ends, or turns to garbage, in the middle: every packet before `offset` was read.
    #[error("capture truncated at byte {offset} (packet {packet}): {reason}")]
    Truncated {
        /// Byte offset where the broken record starts.
        offset: u64,
        /// 1-based number of the packet that could not be read.
        packet: u64,
        /// What was wrong there.
        reason: String,
    },
    /// An I/O error other than an early end of file.
    #[error("read error at byte {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: io::Error,
    },
}

/// A reader over any [`Read`] that yields packets of a pcap or pcapng file.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    state: State,
    /// The last I/O error of the source (pcap-parser reports only that reading failed).
    io_error: Arc<Mutex<Option<io::Error>>>,
    /// Bytes consumed: the offset of the next record.
    offset: u64,
    /// Length of the record last returned, consumed at the next call.
    pending: usize,
    /// Packets delivered.
    index: u64,
}

enum Inner<R: Read> {
    Pcap(LegacyPcapReader<Source<R>>),
    Pcapng(PcapNGReader<Source<R>>),
}

/// What the headers read so far say about the packets that follow.
struct State {
    format: Format,
    /// The link type of a pcap file (pcapng's are per interface).
    linktype: u32,
    /// pcapng: the interfaces of the current section.
    interfaces: Vec<Interface>,
    /// Timestamp of the last timed packet, given to Simple Packet Blocks (which have none).
    last_ts: u64,
    /// pcapng: the current section's byte order.
    big_endian: bool,
}

/// The length a pcapng block that is not a section header claims, when it is shorter than any
/// block can be (type, length and length again: 12 bytes). pcap-parser 0.17 subtracts 12 from
/// a Process Information Block's length unchecked: an overflow, a panic where overflow checks
/// are on (debug builds, fuzzing), found by the capture fuzz target; such a block is refused
/// here before pcap-parser reads it.
fn short_block(data: &[u8], big_endian: bool) -> Option<u32> {
    let h = data.get(..8)?;
    // The section header's type reads the same in either byte order.
    if h[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        return None;
    }
    let len = [h[4], h[5], h[6], h[7]];
    let len = if big_endian { u32::from_be_bytes(len) } else { u32::from_le_bytes(len) };
    (len < 12).then_some(len)
}

/// A pcapng interface, as its Interface Description Block declares it.
#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    /// The if_tsresol option: units of 10^-n seconds, or of 2^-n with the top bit set.
    /// (pcap-parser's `ts_resolution` refuses every power of 2: it compares the byte, top bit
    /// included, with 63.)
    tsresol: u8,
    /// Seconds added to every timestamp (if_tsoffset).
    offset_s: i64,
}

impl Interface {
    /// A timestamp in this interface's units, in nanoseconds (saturating).
    fn to_ns(self, ts: u64) -> u64 {
        let ns = match (self.tsresol & 0x80 != 0, (self.tsresol & 0x7f) as u32) {
            (false, e) if e <= 9 => ts as u128 * 10u128.pow(9 - e),
            (false, e) => ts as u128 / 10u128.checked_pow(e - 9).unwrap_or(u128::MAX),
            (true, e) => (ts as u128 * 1_000_000_000) >> e,
        };
        ns.min(u64::MAX as u128) as u64
    }
}

/// The file's bytes for pcap-parser: the magic read already, then the rest. Each read fills
/// the buffer it is given up to the end of the data (pcap-parser parses a file header from its
/// first read), and keeps the I/O error that pcap-parser's `ReadError` does not carry.
struct Source<R: Read> {
    magic: [u8; 4],
    at: usize,
    r: R,
    error: Arc<Mutex<Option<io::Error>>>,
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        while self.at < 4 && got < buf.len() {
            buf[got] = self.magic[self.at];
            (self.at, got) = (self.at + 1, got + 1);
        }
        match read_full(&mut self.r, &mut buf[got..]) {
            Ok(n) => Ok(got + n),
            Err(e) => {
                let kind = e.kind();
                *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                Err(kind.into())
            }
        }
    }
}

/// What one block read by pcap-parser was, with no borrow of the reader kept.
enum Step {
    /// A packet: its time, link type, where its bytes are in the reader's data, original length.
    Packet { ts_ns: u64, linktype: u32, at: usize, len: usize, orig_len: u32 },
    /// Headers, interface descriptions and other blocks.
    Skip,
    /// A record that reads but makes no sense.
    Corrupt(String),
}

/// pcap-parser's error, without the borrowed input (whose bytes its `Display` would print).
enum Fail {
    Eof,
    Incomplete,
    UnexpectedEof,
    Read,
    TooLong,
    Invalid(String),
}

impl From<PcapError<&[u8]>> for Fail {
    fn from(e: PcapError<&[u8]>) -> Fail {
        match e {
            PcapError::Eof => Fail::Eof,
            PcapError::Incomplete(_) => Fail::Incomplete,
            PcapError::UnexpectedEof => Fail::UnexpectedEof,
            PcapError::ReadError => Fail::Read,
            PcapError::BufferTooSmall => Fail::TooLong,
            PcapError::HeaderNotRecognized => Fail::Invalid("header not recognized".into()),
            PcapError::NomError(_, kind) | PcapError::OwnedNomError(_, kind) => {
                Fail::Invalid(format!("{} check failed", kind.description()))
            }
        }
    }
}

impl Fail {
    fn reason(&self) -> String {
        match self {
            Fail::Invalid(what) => what.clone(),
            _ => String::new(),
        }
    }
}

impl State {
    /// Takes a block read by pcap-parser. `data` is the address of the reader's data, which the
    /// block borrows: a packet is given as a range of it.
    fn step(&mut self, block: PcapBlockOwned<'_>, data: usize) -> Step {
        // (Out of range only were pcap-parser to hand over bytes not of its buffer: then the
        // packet is refused below, never read out of bounds.)
        let range = |bytes: &[u8]| ((bytes.as_ptr() as usize).wrapping_sub(data), bytes.len());
        match block {
            PcapBlockOwned::LegacyHeader(h) => {
                self.linktype = h.network.0 as u32 & 0xFFFF;
                Step::Skip
            }
            PcapBlockOwned::Legacy(b) => {
                let limit = if self.format == Format::PcapNano { 1_000_000_000 } else { 1_000_000 };
                if b.caplen as usize > MAX_RECORD {
                    return Step::Corrupt(format!("record header claims {} captured bytes (corrupt)", b.caplen));
                }
                if b.ts_usec >= limit {
                    return Step::Corrupt(format!(
                        "record header has a fraction of a second of {} (corrupt)",
                        b.ts_usec
                    ));
                }
                let frac = if limit == 1_000_000 { b.ts_usec as u64 * 1000 } else { b.ts_usec as u64 };
                let (at, len) = range(b.data);
                Step::Packet {
                    ts_ns: b.ts_sec as u64 * 1_000_000_000 + frac,
                    linktype: self.linktype,
                    at,
                    len,
                    orig_len: b.origlen,
                }
            }
            PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                self.big_endian = shb.big_endian();
                self.interfaces.clear();
                Step::Skip
            }
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                if self.interfaces.len() >= MAX_INTERFACES {
                    return Step::Corrupt(format!("more than {MAX_INTERFACES} interfaces in one section"));
                }
                self.interfaces.push(Interface {
                    linktype: idb.linktype.0 as u32 & 0xFFFF,
                    snaplen: idb.snaplen,
                    tsresol: idb.if_tsresol,
                    offset_s: idb.ts_offset(),
                });
                Step::Skip
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                let Some(iface) = self.interfaces.get(epb.if_id as usize).copied() else {
                    return Step::Corrupt(format!("packet on undeclared interface {} (corrupt)", epb.if_id));
                };
                let cap = epb.caplen as usize;
                if cap > MAX_RECORD || cap > epb.data.len() {
                    return Step::Corrupt(format!("packet block claims {cap} captured bytes, holds fewer (corrupt)"));
                }
                let ts = ((epb.ts_high as u64) << 32) | epb.ts_low as u64;
                let ns = iface.to_ns(ts) as i128;
                let ns = (ns + iface.offset_s as i128 * 1_000_000_000).clamp(0, u64::MAX as i128) as u64;
                self.last_ts = ns;
                let (at, _) = range(epb.data);
                Step::Packet { ts_ns: ns, linktype: iface.linktype, at, len: cap, orig_len: epb.origlen }
            }
            PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                let Some(iface) = self.interfaces.first().copied() else {
                    return Step::Corrupt("packet on undeclared interface 0 (corrupt)".into());
                };
                // The captured length: the original one cut by the snap length (data is padded).
                let snap = if iface.snaplen == 0 { u32::MAX } else { iface.snaplen };
                let (at, held) = range(spb.data);
                let len = (spb.origlen.min(snap) as usize).min(held);
                Step::Packet { ts_ns: self.last_ts, linktype: iface.linktype, at, len, orig_len: spb.origlen }
            }
            _ => Step::Skip,
        }
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file's first bytes and prepares to read packets. Errors when the data is not
    /// a capture (wrong magic, empty, compressed) or its file header is cut short.
    pub fn new(mut r: R) -> Result<CaptureReader<R>, CaptureError> {
        let mut magic = [0u8; 4];
        let got = read_full(&mut r, &mut magic).map_err(|source| CaptureError::Io { offset: 0, source })?;
        if got == 0 {
            return Err(CaptureError::NotACapture("the file is empty".into()));
        }
        if got < 4 {
            return Err(CaptureError::NotACapture(format!("only {got} bytes long")));
        }
        let io_error = Arc::new(Mutex::new(None));
        let source = Source { magic, at: 0, r, error: io_error.clone() };
        let opened = |e: PcapError<&[u8]>, what: &str| match e {
            PcapError::ReadError => match io_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(source) => CaptureError::Io { offset: 4, source },
                None => CaptureError::NotACapture(format!("{what} unreadable")),
            },
            PcapError::Incomplete(_) | PcapError::UnexpectedEof | PcapError::Eof => {
                CaptureError::NotACapture(format!("{what} cut short"))
            }
            PcapError::BufferTooSmall => CaptureError::NotACapture(format!("{what} longer than {BUFFER} bytes")),
            e => CaptureError::NotACapture(format!("{what} unreadable: {}", Fail::from(e).reason())),
        };
        let (inner, format) = match magic {
            [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d]
            | [0x34, 0xcd, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xcd, 0x34] => {
                let nanos = matches!(magic, [0x4d, 0x3c, 0xb2, 0xa1] | [0xa1, 0xb2, 0x3c, 0x4d]);
                let reader = LegacyPcapReader::new(BUFFER, source).map_err(|e| opened(e, "pcap file header"))?;
                (Inner::Pcap(reader), if nanos { Format::PcapNano } else { Format::PcapMicro })
            }
            [0x0a, 0x0d, 0x0d, 0x0a] => {
                let reader = PcapNGReader::new(BUFFER, source).map_err(|e| opened(e, "pcapng section header"))?;
                (Inner::Pcapng(reader), Format::Pcapng)
            }
            [0x1f, 0x8b, ..] => {
                return Err(CaptureError::NotACapture("gzip-compressed: decompress it first (gunzip)".into()))
            }
            [0x28, 0xb5, 0x2f, 0xfd] => {
                return Err(CaptureError::NotACapture("zstd-compressed: decompress it first (unzstd)".into()))
            }
            [0xfd, b'7', b'z', b'X'] => {
                return Err(CaptureError::NotACapture("xz-compressed: decompress it first (unxz)".into()))
            }
            m => {
                return Err(CaptureError::NotACapture(format!(
                    "unknown magic number {:02x}{:02x}{:02x}{:02x}",
                    m[0], m[1], m[2], m[3]
                )))
            }
        };
        Ok(CaptureReader {
            inner,
            state: State { format, linktype: 0, interfaces: Vec::new(), last_ts: 0, big_endian: false },
            io_error,
            offset: 0,
            pending: 0,
            index: 0,
        })
    }

    /// The container format.
    pub fn format(&self) -> Format {
        self.state.format
    }

    /// The next packet; `Ok(None)` at a clean end of file.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        loop {
            if self.pending > 0 {
                match &mut self.inner {
                    Inner::Pcap(r) => r.consume_noshift(self.pending),
                    Inner::Pcapng(r) => r.consume_noshift(self.pending),
                }
                self.offset += self.pending as u64;
                self.pending = 0;
            }
            let start = self.offset;
            let packet = self.index + 1;
            if let Inner::Pcapng(r) = &self.inner {
                if let Some(len) = short_block(r.data(), self.state.big_endian) {
                    let reason = format!("block claims a length of {len} bytes (corrupt)");
                    return Err(CaptureError::Truncated { offset: start, packet, reason });
                }
            }
            let state = &mut self.state;
            let next = match &mut self.inner {
                Inner::Pcap(r) => {
                    let data = r.data().as_ptr() as usize;
                    r.next().map(|(n, b)| (n, state.step(b, data))).map_err(Fail::from)
                }
                Inner::Pcapng(r) => {
                    let data = r.data().as_ptr() as usize;
                    r.next().map(|(n, b)| (n, state.step(b, data))).map_err(Fail::from)
                }
            };
            let truncated = |reason: String| CaptureError::Truncated { offset: start, packet, reason };
            let (n, step) = match next {
                Ok(next) => next,
                Err(Fail::Eof) => return Ok(None),
                Err(Fail::Incomplete) => {
                    let refilled = match &mut self.inner {
                        Inner::Pcap(r) => r.refill().is_ok(),
                        Inner::Pcapng(r) => r.refill().is_ok(),
                    };
                    if !refilled {
                        return Err(self.io_error(start));
                    }
                    continue;
                }
                Err(Fail::UnexpectedEof) => {
                    let left = self.data().len();
                    if left == 0 {
                        return Ok(None);
                    }
                    let what = if self.state.format == Format::Pcapng { "block" } else { "record" };
                    return Err(truncated(format!("{what} cut short ({left} bytes at the end of the file)")));
                }
                Err(Fail::Read) => return Err(self.io_error(start)),
                Err(Fail::TooLong) => {
                    return Err(truncated(format!("a record longer than {BUFFER} bytes (corrupt)")));
                }
                Err(Fail::Invalid(what)) => return Err(truncated(format!("unreadable record: {what} (corrupt)"))),
            };
            self.pending = n;
            match step {
                Step::Skip => {}
                Step::Corrupt(reason) => return Err(truncated(reason)),
                Step::Packet { ts_ns, linktype, at, len, orig_len } => {
                    if at.checked_add(len).is_none_or(|end| end > self.data().len()) {
                        return Err(truncated("a packet outside the record read (corrupt)".into()));
                    }
                    self.index += 1;
                    return Ok(Some(Packet {
                        ts_ns,
                        linktype,
                        data: &self.data()[at..at + len],
                        orig_len,
                        offset: start,
                        index: self.index - 1,
                    }));
                }
            }
        }
    }

    /// The reader's data from the record being read on.
    fn data(&self) -> &[u8] {
        match &self.inner {
            Inner::Pcap(r) => r.data(),
            Inner::Pcapng(r) => r.data(),
        }
    }

    fn io_error(&self, offset: u64) -> CaptureError {
        let source = self.io_error.lock().unwrap_or_else(|p| p.into_inner()).take();
        CaptureError::Io { offset, source: source.unwrap_or_else(|| io::Error::other("read error")) }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset + self.pending as u64
    }
}

/// Reads until `buf` is full or the end of the data; returns how many bytes were read.
pub(crate) fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(btype: u32, body: &[u8]) -> Vec<u8> {
        let len = (12 + body.len()) as u32;
        let mut b = btype.to_le_bytes().to_vec();
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(body);
        b.extend_from_slice(&len.to_le_bytes());
        b
    }

    /// A Process Information Block shorter than any block (found by fuzzing: pcap-parser's
    /// length arithmetic overflows on it): the capture is corrupt there, no panic.
    #[test]
    fn pcapng_short_block() {
        let mut f =
            block(0x0A0D0D0A, &[0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        f.extend_from_slice(&0x8000_0001u32.to_le_bytes());
        f.extend_from_slice(&8u32.to_le_bytes());
        f.extend_from_slice(&[0; 16]);
        let mut r = CaptureReader::new(&f[..]).unwrap();
        match r.next_packet() {
            Err(CaptureError::Truncated { offset: 28, packet: 1, reason }) => {
                assert!(reason.contains("length of 8"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// if_tsresol in powers of 2 (the top bit set): pcap-parser's own `ts_resolution` refuses
    /// them all, the reader converts them itself.
    #[test]
    fn pcapng_power_of_two_resolution_and_offset() {
        let mut f =
            block(0x0A0D0D0A, &[0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        let mut idb = vec![1, 0, 0, 0, 0, 0, 0, 0];
        idb.extend_from_slice(&[9, 0, 1, 0, 0x8a, 0, 0, 0]); // if_tsresol = 2^-10
        idb.extend_from_slice(&[14, 0, 8, 0]); // if_tsoffset = 5 s
        idb.extend_from_slice(&5i64.to_le_bytes());
        idb.extend_from_slice(&[0, 0, 0, 0]);
        f.extend_from_slice(&block(1, &idb));
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&1536u32.to_le_bytes()); // 1.5 s
        epb.extend_from_slice(&3u32.to_le_bytes());
        epb.extend_from_slice(&3u32.to_le_bytes());
        epb.extend_from_slice(&[1, 2, 3, 0]);
        f.extend_from_slice(&block(6, &epb));
        let mut r = CaptureReader::new(&f[..]).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.ts_ns, p.linktype, p.data, p.offset), (6_500_000_000, 1, &[1u8, 2, 3][..], 28 + 44));
        assert!(r.next_packet().unwrap().is_none());
        assert_eq!(r.offset(), f.len() as u64);
    }
}
