//! Capture files: pcap (libpcap, microsecond and nanosecond, either byte order, and the
//! "modified" Kuznetzov variant) and pcapng, read as a stream of packets in bounded memory.
//!
//! [`CaptureReader::new`] looks at the first four bytes and picks the format. Packets come out
//! one at a time through [`CaptureReader::next_packet`], borrowing a buffer the reader reuses:
//! memory is one packet (at most [`MAX_RECORD`] bytes) plus the read buffer, whatever the size
//! of the file. A file that ends in the middle of a record, or whose next record header is
//! nonsense, yields [`CaptureError::Truncated`] naming the byte offset and the packet number
//! where it broke; every packet before that point has been delivered.

mod layers;
mod pcap;
mod pcapng;

use std::io::{self, Read};

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
}

enum Inner<R: Read> {
    Pcap(pcap::PcapReader<R>),
    Pcapng(pcapng::PcapngReader<R>),
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
        let inner = match magic {
            [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d]
            | [0x34, 0xcd, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xcd, 0x34] => Inner::Pcap(pcap::PcapReader::new(r, magic)?),
            [0x0a, 0x0d, 0x0d, 0x0a] => Inner::Pcapng(pcapng::PcapngReader::new(r)?),
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
        Ok(CaptureReader { inner })
    }

    /// The container format.
    pub fn format(&self) -> Format {
        match &self.inner {
            Inner::Pcap(p) => p.format(),
            Inner::Pcapng(_) => Format::Pcapng,
        }
    }

    /// The next packet; `Ok(None)` at a clean end of file.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        match &mut self.inner {
            Inner::Pcap(p) => p.next_packet(),
            Inner::Pcapng(p) => p.next_packet(),
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        match &self.inner {
            Inner::Pcap(p) => p.offset(),
            Inner::Pcapng(p) => p.offset(),
        }
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
