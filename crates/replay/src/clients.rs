//! The clients file, `volley.clients/1`: the clients of a capture and their queries, compact
//! and readable one client at a time. The format is specified byte by byte in `docs/pcap.md`;
//! in short:
//!
//! ```text
//! header   "volley.clients/1\n"  u16 header_len (40)
//!          u64 capture_start_ns  u64 duration_ns  u64 clients  u64 queries
//!          u32 tick_ns  u32 flags (bit 0: addresses anonymised)
//! client   u32 block_len  varint id  u8 addr_kind [addr]  varint query_count  record*
//! record   varint delta_ticks  u8 flags  varint qtype  [varint qclass]  [u16 edns_size]
//!          varint name_ref (0: literal wire-form name follows; k: the client's k-th literal)
//! ```
//!
//! Integers are big-endian; varints are unsigned LEB128. Clients are sorted by the time of
//! their first query. The first record's delta counts from the capture start, the others from
//! the previous query of the same client.
//!
//! [`ClientsFile::open`] gives a [`ClientsReader`]: the [`Header`], then one [`Client`] at a
//! time (memory: the largest client), or [`ClientsReader::skip_client`] to pass over a client
//! without decoding it (taking a fraction of the clients). [`ClientsWriter`] writes a file
//! atomically (temporary file, fsync, rename).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use volley_wire::{Class, Name, QType};

/// The first bytes of every clients file; the version is part of it.
pub const MAGIC: &[u8; 17] = b"volley.clients/1\n";
/// Length of the fixed header fields after `MAGIC` and the `header_len` field itself.
pub const HEADER_FIELDS_LEN: u16 = 40;
/// Total header length of files this version writes.
pub const HEADER_LEN: u64 = MAGIC.len() as u64 + 2 + HEADER_FIELDS_LEN as u64;
/// Each client's name dictionary stops growing at this many names.
pub const DICT_MAX: usize = 65_536;

/// Record flag bits.
pub mod flag {
    /// Recursion desired.
    pub const RD: u8 = 0x01;
    /// Checking disabled.
    pub const CD: u8 = 0x02;
    /// Authentic data (set by some stubs to ask for the AD bit in the answer).
    pub const AD: u8 = 0x04;
    /// An EDNS OPT record was present: a u16 UDP payload size follows the type.
    pub const EDNS: u8 = 0x08;
    /// DNSSEC OK (only with EDNS).
    pub const DO: u8 = 0x10;
    /// The query was captured over TCP.
    pub const TCP: u8 = 0x20;
    /// The class is not IN: a varint class follows the type.
    pub const CLASS: u8 = 0x40;
    /// Reserved: must be zero.
    pub const RESERVED: u8 = 0x80;
}

/// The file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Time of the capture's first packet, nanoseconds since the Unix epoch.
    pub capture_start_ns: u64,
    /// From the first to the last packet of the capture, nanoseconds.
    pub duration_ns: u64,
    /// Number of client blocks.
    pub clients: u64,
    /// Number of query records in all blocks.
    pub queries: u64,
    /// Unit of the time deltas, nanoseconds: 1000 when every timestamp of the capture was a
    /// whole microsecond, 1 otherwise.
    pub tick_ns: u32,
    /// Source addresses were withheld (`volley pcap --anonymize`).
    pub anonymized: bool,
}

/// One query of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientQuery {
    /// When it was sent, nanoseconds after the capture's start.
    pub offset_ns: u64,
    pub qname: Name,
    pub qtype: QType,
    pub qclass: Class,
    /// Recursion desired.
    pub rd: bool,
    /// Checking disabled.
    pub cd: bool,
    /// Authentic data bit of the query.
    pub ad: bool,
    /// DNSSEC OK (EDNS).
    pub dnssec_ok: bool,
    /// The EDNS UDP payload size when the query carried an OPT record.
    pub edns: Option<u16>,
    /// Captured over TCP (informative: a replay chooses its own transport).
    pub tcp: bool,
}

/// One client: a source address of the capture and its queries in the order sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// 0-based, in order of first query.
    pub id: u64,
    /// The source address, None when anonymised.
    pub addr: Option<IpAddr>,
    /// Whether the client used IPv6 (kept when anonymised).
    pub ipv6: bool,
    pub queries: Vec<ClientQuery>,
}

impl Client {
    /// Offset of the first query (0 for a client without queries, which files never hold).
    pub fn first_offset_ns(&self) -> u64 {
        self.queries.first().map_or(0, |q| q.offset_ns)
    }
}

/// An error reading a clients file: the file, the byte offset, what was wrong.
#[derive(Debug)]
pub struct ClientsError {
    pub path: PathBuf,
    pub offset: u64,
    pub kind: ClientsErrorKind,
}

#[derive(Debug)]
pub enum ClientsErrorKind {
    Io(io::Error),
    /// Not a volley clients file (magic).
    NotClients,
    /// A clients file of another version.
    Version(String),
    /// The file ends early.
    Truncated(String),
    /// Bytes that cannot be what the format says.
    Corrupt(String),
}

impl fmt::Display for ClientsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        match &self.kind {
            ClientsErrorKind::Io(e) if self.offset == 0 => write!(f, "{p}: {e}"),
            ClientsErrorKind::Io(e) => write!(f, "{p}: at byte {}: {e}", self.offset),
            ClientsErrorKind::NotClients => write!(f, "{p}: not a volley clients file (make one with `volley pcap`)"),
            ClientsErrorKind::Version(v) => {
                write!(f, "{p}: clients file of version {v}; this volley reads volley.clients/1")
            }
            ClientsErrorKind::Truncated(w) => write!(f, "{p}: truncated at byte {}: {w}", self.offset),
            ClientsErrorKind::Corrupt(w) => write!(f, "{p}: corrupt at byte {}: {w}", self.offset),
        }
    }
}

impl std::error::Error for ClientsError {}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encodes one client's records: its name dictionary and the time of its previous query.
#[derive(Debug, Default)]
pub struct RecordEncoder {
    buf: Vec<u8>,
    dict: HashMap<Vec<u8>, u32>,
    prev_ticks: u64,
    count: u64,
    first_ns: Option<u64>,
    /// Bytes held by the dictionary (keys and an estimate of the table's overhead).
    dict_bytes: usize,
}

impl RecordEncoder {
    pub fn new() -> RecordEncoder {
        RecordEncoder::default()
    }

    /// Appends a query. `offset_ns` below the previous one's is raised to it (order is kept).
    pub fn push(&mut self, q: &ClientQuery, tick_ns: u32) {
        self.first_ns.get_or_insert(q.offset_ns);
        let ticks = q.offset_ns / tick_ns.max(1) as u64;
        let delta = ticks.saturating_sub(self.prev_ticks);
        self.prev_ticks += delta;
        put_varint(&mut self.buf, delta);
        let mut f = 0;
        if q.rd {
            f |= flag::RD;
        }
        if q.cd {
            f |= flag::CD;
        }
        if q.ad {
            f |= flag::AD;
        }
        if q.edns.is_some() {
            f |= flag::EDNS;
            if q.dnssec_ok {
                f |= flag::DO;
            }
        }
        if q.tcp {
            f |= flag::TCP;
        }
        if q.qclass != Class::IN {
            f |= flag::CLASS;
        }
        self.buf.push(f);
        put_varint(&mut self.buf, q.qtype.0 as u64);
        if q.qclass != Class::IN {
            put_varint(&mut self.buf, q.qclass.0 as u64);
        }
        if let Some(size) = q.edns {
            self.buf.extend_from_slice(&size.to_be_bytes());
        }
        match self.dict.get(q.qname.wire()) {
            Some(&i) => put_varint(&mut self.buf, i as u64 + 1),
            None => {
                self.buf.push(0);
                self.buf.extend_from_slice(q.qname.wire());
                if self.dict.len() < DICT_MAX {
                    let i = self.dict.len() as u32;
                    self.dict.insert(q.qname.wire().to_vec(), i);
                    self.dict_bytes += q.qname.wire().len() + 48;
                }
            }
        }
        self.count += 1;
    }

    /// Queries pushed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Offset of the first query pushed.
    pub fn first_ns(&self) -> Option<u64> {
        self.first_ns
    }

    /// The encoded records.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes held (records and dictionary), for memory accounting.
    pub fn memory(&self) -> usize {
        self.buf.capacity() + self.dict_bytes
    }
}

/// Writes a clients file: header, then client blocks, then [`ClientsWriter::finish`] patches
/// the counts into the header.
pub struct ClientsWriter<W: Write + Seek> {
    w: W,
    header: Header,
    block: Vec<u8>,
}

impl<W: Write + Seek> ClientsWriter<W> {
    /// Starts a file; `header.clients` and `header.queries` are counted by the writer.
    pub fn new(mut w: W, header: Header) -> io::Result<ClientsWriter<W>> {
        let header = Header { clients: 0, queries: 0, tick_ns: header.tick_ns.max(1), ..header };
        w.write_all(&encode_header(&header))?;
        Ok(ClientsWriter { w, header, block: Vec::new() })
    }

    /// The unit of time deltas this file uses.
    pub fn tick_ns(&self) -> u32 {
        self.header.tick_ns
    }

    /// Writes a client with the next id; its queries must be in order of `offset_ns` (a query
    /// earlier than the one before is moved to that one's time). A client without queries is
    /// not written. Returns the id given, if written.
    pub fn add_client(&mut self, addr: Option<IpAddr>, ipv6: bool, queries: &[ClientQuery]) -> io::Result<Option<u64>> {
        if queries.is_empty() {
            return Ok(None);
        }
        let mut enc = RecordEncoder::new();
        for q in queries {
            enc.push(q, self.header.tick_ns);
        }
        self.add_encoded(addr, ipv6, &enc).map(Some)
    }

    /// Writes a client whose records were encoded with this file's tick.
    pub fn add_encoded(&mut self, addr: Option<IpAddr>, ipv6: bool, enc: &RecordEncoder) -> io::Result<u64> {
        let id = self.header.clients;
        let b = &mut self.block;
        b.clear();
        put_varint(b, id);
        match (addr, self.header.anonymized) {
            (Some(IpAddr::V4(a)), false) => {
                b.push(4);
                b.extend_from_slice(&a.octets());
            }
            (Some(IpAddr::V6(a)), false) => {
                b.push(6);
                b.extend_from_slice(&a.octets());
            }
            _ => b.push(if ipv6 || matches!(addr, Some(IpAddr::V6(_))) { 0x86 } else { 0x84 }),
        }
        put_varint(b, enc.count());
        let len = b.len() + enc.bytes().len();
        let len = u32::try_from(len).map_err(|_| io::Error::other("client block larger than 4 GiB"))?;
        self.w.write_all(&len.to_be_bytes())?;
        self.w.write_all(b)?;
        self.w.write_all(enc.bytes())?;
        self.header.clients += 1;
        self.header.queries += enc.count();
        Ok(id)
    }

    /// Patches the header and flushes; returns the final header and the writer.
    pub fn finish(mut self) -> io::Result<(Header, W)> {
        self.w.seek(SeekFrom::Start(0))?;
        self.w.write_all(&encode_header(&self.header))?;
        self.w.seek(SeekFrom::End(0))?;
        self.w.flush()?;
        Ok((self.header, self.w))
    }
}

fn encode_header(h: &Header) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN as usize);
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&HEADER_FIELDS_LEN.to_be_bytes());
    v.extend_from_slice(&h.capture_start_ns.to_be_bytes());
    v.extend_from_slice(&h.duration_ns.to_be_bytes());
    v.extend_from_slice(&h.clients.to_be_bytes());
    v.extend_from_slice(&h.queries.to_be_bytes());
    v.extend_from_slice(&h.tick_ns.to_be_bytes());
    v.extend_from_slice(&(h.anonymized as u32).to_be_bytes());
    v
}

/// Clients files are written whole or not at all (see [`volley_atomic`]).
pub use volley_atomic::AtomicFile;

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// Entry point for reading clients files.
pub struct ClientsFile;

impl ClientsFile {
    /// Opens a file and reads its header.
    pub fn open(path: impl AsRef<Path>) -> Result<ClientsReader<BufReader<File>>, ClientsError> {
        let path = path.as_ref();
        let err = |e| ClientsError { path: path.to_path_buf(), offset: 0, kind: ClientsErrorKind::Io(e) };
        let f = File::open(path).map_err(err)?;
        let len = f.metadata().map_err(err)?.len();
        ClientsReader::new(BufReader::with_capacity(1 << 18, f), path, Some(len))
    }
}

/// Reads a clients file one client at a time. An [`Iterator`] of `Result<Client, ClientsError>`;
/// after an error it yields nothing more.
pub struct ClientsReader<R: Read> {
    r: R,
    path: PathBuf,
    header: Header,
    offset: u64,
    len: Option<u64>,
    read_clients: u64,
    read_queries: u64,
    block: Vec<u8>,
    failed: bool,
}

impl<R: Read> ClientsReader<R> {
    /// Reads the header from `r`; `name` is used in errors, `len` (the data's length, when
    /// known) to reject impossible block lengths before allocating.
    pub fn new(mut r: R, name: &Path, len: Option<u64>) -> Result<ClientsReader<R>, ClientsError> {
        let path = name.to_path_buf();
        let err = |offset: u64, kind| ClientsError { path: path.clone(), offset, kind };
        let mut magic = [0u8; 17];
        let got = crate::capture::read_full(&mut r, &mut magic).map_err(|e| err(0, ClientsErrorKind::Io(e)))?;
        if got < 11 || &magic[..11] != b"volley.clie" {
            return Err(err(0, ClientsErrorKind::NotClients));
        }
        if &magic != MAGIC {
            if MAGIC.starts_with(&magic[..got]) {
                return Err(err(got as u64, ClientsErrorKind::Truncated("in the header".into())));
            }
            let v = String::from_utf8_lossy(&magic[..got]).trim_end().to_string();
            return Err(err(0, ClientsErrorKind::Version(v)));
        }
        let mut offset = 17u64;
        let mut fill = |r: &mut R, buf: &mut [u8]| -> Result<(), ClientsError> {
            let got = crate::capture::read_full(r, buf).map_err(|e| err(offset, ClientsErrorKind::Io(e)))?;
            if got < buf.len() {
                return Err(err(offset + got as u64, ClientsErrorKind::Truncated("in the header".into())));
            }
            offset += got as u64;
            Ok(())
        };
        let mut hl = [0u8; 2];
        fill(&mut r, &mut hl)?;
        let hl = u16::from_be_bytes(hl) as usize;
        if hl < HEADER_FIELDS_LEN as usize {
            return Err(err(17, ClientsErrorKind::Corrupt(format!("header length {hl} below {HEADER_FIELDS_LEN}"))));
        }
        let mut h = vec![0u8; hl];
        fill(&mut r, &mut h)?;
        let u64_at = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().unwrap());
        let u32_at = |i: usize| u32::from_be_bytes(h[i..i + 4].try_into().unwrap());
        let header = Header {
            capture_start_ns: u64_at(0),
            duration_ns: u64_at(8),
            clients: u64_at(16),
            queries: u64_at(24),
            tick_ns: u32_at(32),
            anonymized: u32_at(36) & 1 != 0,
        };
        if header.tick_ns == 0 {
            return Err(err(19 + 32, ClientsErrorKind::Corrupt("tick of 0 ns".into())));
        }
        let offset = 19 + hl as u64;
        Ok(ClientsReader {
            r,
            path,
            header,
            offset,
            len,
            read_clients: 0,
            read_queries: 0,
            block: Vec::new(),
            failed: false,
        })
    }

    /// The file header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file's name, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Clients read or skipped so far.
    pub fn position(&self) -> u64 {
        self.read_clients
    }

    /// Reads the next client; `Ok(None)` after the last one.
    pub fn next_client(&mut self) -> Result<Option<Client>, ClientsError> {
        if !self.next_block()? {
            return Ok(None);
        }
        let at = self.offset - self.block.len() as u64;
        let c = decode_block(&self.block, self.header.tick_ns).map_err(|(i, w)| ClientsError {
            path: self.path.clone(),
            offset: at + i as u64,
            kind: ClientsErrorKind::Corrupt(w),
        });
        match c {
            Ok(c) => {
                self.read_queries += c.queries.len() as u64;
                Ok(Some(c))
            }
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// Passes over the next client without decoding its queries; false after the last one.
    pub fn skip_client(&mut self) -> Result<bool, ClientsError> {
        self.next_block()
    }

    /// Reads the next block into `self.block`.
    fn next_block(&mut self) -> Result<bool, ClientsError> {
        if self.failed {
            return Ok(false);
        }
        if self.read_clients >= self.header.clients {
            return Ok(false);
        }
        let res = self.read_block_inner();
        if res.is_err() {
            self.failed = true;
        }
        res
    }

    fn read_block_inner(&mut self) -> Result<bool, ClientsError> {
        let n = self.read_clients;
        let total = self.header.clients;
        let mut lb = [0u8; 4];
        let got = crate::capture::read_full(&mut self.r, &mut lb)
            .map_err(|e| self.err(self.offset, ClientsErrorKind::Io(e)))?;
        if got < 4 {
            return Err(self
                .err(self.offset + got as u64, ClientsErrorKind::Truncated(format!("after {n} of {total} clients"))));
        }
        self.offset += 4;
        let len = u32::from_be_bytes(lb) as u64;
        if let Some(flen) = self.len {
            if self.offset + len > flen {
                return Err(self.err(
                    self.offset - 4,
                    ClientsErrorKind::Truncated(format!(
                        "client {n} of {total} claims {len} bytes, the file has {} left",
                        flen - self.offset
                    )),
                ));
            }
        }
        // Without a known length, grow the buffer as data arrives rather than trusting `len`.
        self.block.clear();
        let got = (&mut self.r)
            .take(len)
            .read_to_end(&mut self.block)
            .map_err(|e| self.err(self.offset, ClientsErrorKind::Io(e)))?;
        self.offset += got as u64;
        if (got as u64) < len {
            return Err(self.err(
                self.offset,
                ClientsErrorKind::Truncated(format!("in client {n} of {total} ({got} of {len} bytes)")),
            ));
        }
        self.read_clients += 1;
        Ok(true)
    }

    fn err(&self, offset: u64, kind: ClientsErrorKind) -> ClientsError {
        ClientsError { path: self.path.clone(), offset, kind }
    }
}

impl<R: Read> Iterator for ClientsReader<R> {
    type Item = Result<Client, ClientsError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_client().transpose()
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

type DecodeErr = (usize, String);

impl Cursor<'_> {
    fn u8(&mut self, what: &str) -> Result<u8, DecodeErr> {
        let v = *self.b.get(self.at).ok_or((self.at, format!("block ends inside {what}")))?;
        self.at += 1;
        Ok(v)
    }

    fn bytes(&mut self, n: usize, what: &str) -> Result<&[u8], DecodeErr> {
        let s = self.b.get(self.at..self.at + n).ok_or((self.at, format!("block ends inside {what}")))?;
        self.at += n;
        Ok(s)
    }

    fn varint(&mut self, what: &str) -> Result<u64, DecodeErr> {
        let start = self.at;
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    break;
                }
                return Ok(v);
            }
        }
        Err((start, format!("{what}: varint longer than 64 bits")))
    }
}

fn decode_block(b: &[u8], tick_ns: u32) -> Result<Client, DecodeErr> {
    let mut c = Cursor { b, at: 0 };
    let id = c.varint("the client id")?;
    let kind_at = c.at;
    let (addr, ipv6) = match c.u8("the address")? {
        4 => {
            let a: [u8; 4] = c.bytes(4, "the address")?.try_into().unwrap();
            (Some(IpAddr::V4(Ipv4Addr::from(a))), false)
        }
        6 => {
            let a: [u8; 16] = c.bytes(16, "the address")?.try_into().unwrap();
            (Some(IpAddr::V6(Ipv6Addr::from(a))), true)
        }
        0x84 => (None, false),
        0x86 => (None, true),
        k => return Err((kind_at, format!("unknown address kind {k:#x}"))),
    };
    let count_at = c.at;
    let count = c.varint("the query count")?;
    // Each record takes at least 4 bytes: no allocation beyond what the block can hold.
    if count > (b.len() as u64) / 4 + 1 {
        return Err((count_at, format!("{count} queries cannot fit in a block of {} bytes", b.len())));
    }
    let queries = decode_records(&mut c, count, tick_ns)?;
    if c.at != b.len() {
        return Err((c.at, format!("{} bytes after the last query", b.len() - c.at)));
    }
    Ok(Client { id, addr, ipv6, queries })
}

/// Decodes `count` records (the caller bounds `count` by the bytes available).
fn decode_records(c: &mut Cursor<'_>, count: u64, tick_ns: u32) -> Result<Vec<ClientQuery>, DecodeErr> {
    let mut queries = Vec::with_capacity(count as usize);
    let mut dict: Vec<Name> = Vec::new();
    let mut ticks: u64 = 0;
    for i in 0..count {
        let rec_at = c.at;
        let delta = c.varint("a time delta")?;
        ticks = ticks.checked_add(delta).ok_or((rec_at, "time overflows".to_string()))?;
        let offset_ns = ticks.checked_mul(tick_ns as u64).ok_or((rec_at, "time overflows".to_string()))?;
        let f_at = c.at;
        let f = c.u8("record flags")?;
        if f & flag::RESERVED != 0 {
            return Err((f_at, format!("reserved flag bit set ({f:#04x})")));
        }
        let t_at = c.at;
        let qtype = c.varint("a type")?;
        let qtype = u16::try_from(qtype).map_err(|_| (t_at, format!("type {qtype} above 65535")))?;
        let qclass = if f & flag::CLASS != 0 {
            let at = c.at;
            let v = c.varint("a class")?;
            Class(u16::try_from(v).map_err(|_| (at, format!("class {v} above 65535")))?)
        } else {
            Class::IN
        };
        let edns = if f & flag::EDNS != 0 {
            let s = c.bytes(2, "an EDNS size")?;
            Some(u16::from_be_bytes([s[0], s[1]]))
        } else {
            None
        };
        let r_at = c.at;
        let r = c.varint("a name reference")?;
        let qname = if r == 0 {
            let (name, end) = volley_wire::parse_name(c.b, c.at).map_err(|e| (c.at, format!("bad name: {e}")))?;
            // Literal names are stored uncompressed.
            if end - c.at != name.wire().len() {
                return Err((c.at, "compressed name in a literal".into()));
            }
            c.at = end;
            if dict.len() < DICT_MAX {
                dict.push(name.clone());
            }
            name
        } else {
            dict.get(r as usize - 1)
                .cloned()
                .ok_or((r_at, format!("name reference {r} beyond the {} names so far (query {i})", dict.len())))?
        };
        queries.push(ClientQuery {
            offset_ns,
            qname,
            qtype: QType(qtype),
            qclass,
            rd: f & flag::RD != 0,
            cd: f & flag::CD != 0,
            ad: f & flag::AD != 0,
            dnssec_ok: f & flag::DO != 0,
            edns,
            tcp: f & flag::TCP != 0,
        });
    }
    Ok(queries)
}

/// Decodes records produced by a [`RecordEncoder`] with tick `tick_ns`.
pub(crate) fn decode_encoder(enc: &RecordEncoder, tick_ns: u32) -> Vec<ClientQuery> {
    let mut c = Cursor { b: enc.bytes(), at: 0 };
    decode_records(&mut c, enc.count(), tick_ns).expect("records written by this process decode")
}

// ---------------------------------------------------------------------------------------------
// Text dump
// ---------------------------------------------------------------------------------------------

/// Prints a clients file as text: `#` header lines, then one line per query:
/// `client offset_s source qname qtype class flags edns`.
pub fn dump<R: Read>(reader: &mut ClientsReader<R>, out: &mut dyn Write) -> Result<(), DumpError> {
    let h = *reader.header();
    writeln!(out, "# volley.clients/1")?;
    writeln!(out, "# capture_start {} ({} ns since the epoch)", rfc3339(h.capture_start_ns), h.capture_start_ns)?;
    writeln!(out, "# duration_s {}", secs(h.duration_ns))?;
    writeln!(out, "# clients {}", h.clients)?;
    writeln!(out, "# queries {}", h.queries)?;
    writeln!(out, "# tick_ns {}", h.tick_ns)?;
    writeln!(out, "# anonymized {}", if h.anonymized { "yes" } else { "no" })?;
    writeln!(out, "# client offset_s source qname qtype class flags edns")?;
    while let Some(c) = reader.next_client()? {
        let src = match c.addr {
            Some(a) => a.to_string(),
            None if c.ipv6 => "anon6".to_string(),
            None => "anon4".to_string(),
        };
        for q in &c.queries {
            let mut flags = Vec::new();
            for (on, n) in [(q.rd, "rd"), (q.cd, "cd"), (q.ad, "ad"), (q.dnssec_ok, "do"), (q.tcp, "tcp")] {
                if on {
                    flags.push(n);
                }
            }
            let flags = if flags.is_empty() { "-".to_string() } else { flags.join(",") };
            let edns = q.edns.map_or("-".to_string(), |s| s.to_string());
            writeln!(
                out,
                "{} {} {} {} {} {} {} {}",
                c.id,
                secs(q.offset_ns),
                src,
                q.qname,
                q.qtype,
                q.qclass,
                flags,
                edns
            )?;
        }
    }
    Ok(())
}

/// An error while dumping: reading the clients file or writing the text.
#[derive(Debug)]
pub enum DumpError {
    Read(ClientsError),
    Write(io::Error),
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpError::Read(e) => e.fmt(f),
            DumpError::Write(e) => write!(f, "writing the dump: {e}"),
        }
    }
}

impl std::error::Error for DumpError {}

impl From<ClientsError> for DumpError {
    fn from(e: ClientsError) -> Self {
        DumpError::Read(e)
    }
}

impl From<io::Error> for DumpError {
    fn from(e: io::Error) -> Self {
        DumpError::Write(e)
    }
}

/// Nanoseconds as seconds with 9 decimals, trailing zeros kept to 6 (microseconds).
pub fn secs(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    let f = ns % 1_000_000_000;
    if f % 1000 == 0 {
        format!("{s}.{:06}", f / 1000)
    } else {
        format!("{s}.{f:09}")
    }
}

/// A Unix time in nanoseconds as an RFC 3339 UTC timestamp (nanoseconds shown).
pub fn rfc3339(ns: u64) -> String {
    volley_wire::rfc3339(ns, 9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(offset_ns: u64, name: &str, qtype: QType, edns: Option<u16>) -> ClientQuery {
        ClientQuery {
            offset_ns,
            qname: name.parse().unwrap(),
            qtype,
            qclass: Class::IN,
            rd: true,
            cd: false,
            ad: false,
            dnssec_ok: edns.is_some(),
            edns,
            tcp: false,
        }
    }

    fn sample(tick: u32) -> (Vec<u8>, Vec<Client>) {
        let mut cur = io::Cursor::new(Vec::new());
        let header = Header {
            capture_start_ns: 1_700_000_000_123_456_000,
            duration_ns: 5_000_000_000,
            tick_ns: tick,
            ..Header::default()
        };
        let mut w = ClientsWriter::new(&mut cur, header).unwrap();
        let a = vec![
            q(1_000, "www.example.test", QType::A, Some(1232)),
            q(2_000, "www.example.test", QType::AAAA, Some(1232)),
            q(3_000_000, "other.test", QType::TXT, None),
            q(4_000_000, "www.example.test", QType::A, None),
        ];
        let mut b = vec![q(500_000, "b.test", QType::MX, None)];
        b[0].qclass = Class::CH;
        b[0].tcp = true;
        b[0].cd = true;
        w.add_client(Some("127.0.0.2".parse().unwrap()), false, &a).unwrap();
        w.add_client(Some("::1".parse().unwrap()), true, &b).unwrap();
        let (h, _) = w.finish().unwrap();
        assert_eq!((h.clients, h.queries), (2, 5));
        let clients = vec![
            Client { id: 0, addr: Some("127.0.0.2".parse().unwrap()), ipv6: false, queries: a },
            Client { id: 1, addr: Some("::1".parse().unwrap()), ipv6: true, queries: b },
        ];
        (cur.into_inner(), clients)
    }

    fn read_all(bytes: &[u8]) -> Result<(Header, Vec<Client>), ClientsError> {
        let mut r = ClientsReader::new(bytes, Path::new("mem.clients"), Some(bytes.len() as u64))?;
        let h = *r.header();
        let c = r.by_ref().collect::<Result<Vec<_>, _>>()?;
        Ok((h, c))
    }

    #[test]
    fn round_trip() {
        for tick in [1, 1000] {
            let (bytes, clients) = sample(tick);
            let (h, got) = read_all(&bytes).unwrap();
            assert_eq!(h.tick_ns, tick);
            assert_eq!(got, clients);
        }
        // Skipping needs no decoding.
        let (bytes, _) = sample(1000);
        let mut r = ClientsReader::new(&bytes[..], Path::new("m"), None).unwrap();
        assert!(r.skip_client().unwrap());
        assert_eq!(r.next_client().unwrap().unwrap().id, 1);
        assert!(r.next_client().unwrap().is_none());
    }

    #[test]
    fn every_prefix_and_flip_is_an_error_or_a_file() {
        let (bytes, _) = sample(1000);
        for i in 0..bytes.len() {
            let e = read_all(&bytes[..i]).unwrap_err();
            assert!(e.to_string().starts_with("mem.clients: "), "{e}");
            for v in [0x00, 0x01, 0x7f, 0x80, 0xc0, 0xff] {
                let mut m = bytes.clone();
                m[i] = v;
                let _ = read_all(&m);
                let _ = ClientsReader::new(&m[..], Path::new("m"), None).map(|r| r.count());
            }
        }
    }

    #[test]
    fn text() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(1_709_251_200_000_000_001), "2024-03-01T00:00:00.000000001Z");
        assert_eq!(secs(1_500_000), "0.001500");
        let (bytes, _) = sample(1);
        let mut r = ClientsReader::new(&bytes[..], Path::new("m"), None).unwrap();
        let mut out = Vec::new();
        dump(&mut r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("0 0.000001 127.0.0.2 www.example.test. A IN rd,do 1232\n"), "{text}");
        assert!(text.contains("1 0.000500 ::1 b.test. MX CH rd,cd,tcp -\n"), "{text}");
    }
}
