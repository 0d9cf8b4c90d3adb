//! From a capture to clients: every packet is decoded, DNS messages found (UDP datagrams, TCP
//! streams reassembled), queries kept and grouped by source address, everything else counted
//! by the reason it was dropped.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Read, Seek, Write};
use std::net::IpAddr;

use volley_wire::{parse_query, Header as DnsHeader};

use crate::capture::{decode, CaptureError, CaptureReader, DropReason, Format, Packet, Transport};
use crate::clients::{decode_encoder, secs, ClientQuery, ClientsWriter, Header, RecordEncoder};
use crate::tcp::{FlowKey, Limits, Reassembler, Segment, TcpStats};

/// What to keep.
#[derive(Debug, Clone)]
pub struct Options {
    /// DNS server ports: a packet to one of them is client traffic (default: 53).
    pub ports: Vec<u16>,
    /// Queries from these sources are dropped (e.g. the resolver's own queries upstream).
    pub exclude_src: Vec<IpAddr>,
    /// When not empty, only queries sent to one of these addresses are kept.
    pub resolvers: Vec<IpAddr>,
    /// Withhold the source addresses in the clients file.
    pub anonymize: bool,
    /// Bounds of TCP reassembly.
    pub tcp_limits: Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ports: vec![53],
            exclude_src: vec![],
            resolvers: vec![],
            anonymize: false,
            tcp_limits: Limits::default(),
        }
    }
}

/// Everything counted while reading a capture. Each packet is counted once in `packets` and
/// once under exactly one of: `not_ip`, `other_protocol`, `fragment`, `malformed_packets`,
/// `not_dns_port`, `udp_dns`, `tcp_dns`. DNS messages found in `udp_dns` packets and in the
/// reassembled TCP streams are each counted once under exactly one of: `queries`,
/// `responses`, `malformed_messages`, `not_query`, `excluded_src`, `not_to_resolver`.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub format: Option<Format>,
    /// Packets read.
    pub packets: u64,
    /// Link layer not IPv4/IPv6 (ARP, unknown link type).
    pub not_ip: u64,
    /// IP but neither UDP nor TCP.
    pub other_protocol: u64,
    /// IP fragments (not reassembled).
    pub fragment: u64,
    /// Link, IP, UDP or TCP header inconsistent or cut short.
    pub malformed_packets: u64,
    /// UDP or TCP, but neither port is a DNS port.
    pub not_dns_port: u64,
    /// UDP packets to or from a DNS port.
    pub udp_dns: u64,
    /// TCP segments to or from a DNS port (with or without data).
    pub tcp_dns: u64,
    /// Queries kept.
    pub queries: u64,
    /// ... of which over UDP / TCP.
    pub udp_queries: u64,
    pub tcp_queries: u64,
    /// Responses (QR set), UDP and reassembled TCP.
    pub responses: u64,
    /// DNS messages that do not parse (header, question, records).
    pub malformed_messages: u64,
    /// Queries of another opcode than QUERY (NOTIFY, UPDATE, ...).
    pub not_query: u64,
    /// Queries from an address given with `--exclude-src`.
    pub excluded_src: u64,
    /// Queries to an address not given with `--resolver`.
    pub not_to_resolver: u64,
    /// TCP reassembly: client side (queries).
    pub tcp_client: TcpStats,
    /// TCP reassembly: server side (responses).
    pub tcp_server: TcpStats,
    /// Packets whose timestamp is earlier than the packet before.
    pub ts_backwards: u64,
    /// The capture broke here: every packet before was read.
    pub truncated: Option<String>,
    /// First and last packet times (ns since the epoch).
    pub first_ts: Option<u64>,
    pub last_ts: u64,
    /// Times of the first and last query kept, ns after the capture start.
    pub first_query: Option<u64>,
    pub last_query: u64,
    /// Queries per client, in client id order.
    pub per_client: Vec<u64>,
    /// Bytes of the clients file.
    pub output_bytes: u64,
    /// Peak memory held for clients while reading (encoded queries and name dictionaries).
    pub client_memory: usize,
}

impl Report {
    /// Messages that were not kept because the capture lost part of their TCP stream.
    pub fn tcp_incomplete(&self) -> u64 {
        self.tcp_client.incomplete
    }

    /// The human summary printed by `volley pcap`.
    pub fn render(&self, input: &str, output: &str) -> String {
        let mut s = String::new();
        let fmt = self.format.map_or("?".to_string(), |f| f.to_string());
        let _ = writeln!(s, "read {input} ({fmt}): {} packets", self.packets);
        if let Some(t) = &self.truncated {
            let _ = writeln!(s, "  warning: {t}; kept what came before");
        }
        let span = self.first_ts.map_or(0, |f| self.last_ts.saturating_sub(f));
        let _ = writeln!(s, "  capture span {} s", secs(span));
        let _ = writeln!(
            s,
            "kept {} queries ({} UDP, {} TCP) from {} clients -> {output} ({} bytes)",
            self.queries,
            self.udp_queries,
            self.tcp_queries,
            self.per_client.len(),
            self.output_bytes
        );
        if let Some(fq) = self.first_query {
            let _ = writeln!(s, "  queries from {} s to {} s after the capture start", secs(fq), secs(self.last_query));
        }
        let _ = writeln!(s, "dropped packets:");
        for (n, v) in [
            ("not_ip", self.not_ip),
            ("other_protocol", self.other_protocol),
            ("not_dns_port", self.not_dns_port),
            ("fragment", self.fragment),
            ("malformed", self.malformed_packets),
            ("truncated_capture", self.truncated.is_some() as u64),
        ] {
            let _ = writeln!(s, "  {n:<18} {v}");
        }
        let _ = writeln!(s, "dropped DNS messages:");
        for (n, v) in [
            ("response", self.responses),
            ("malformed", self.malformed_messages),
            ("not_query", self.not_query),
            ("excluded_src", self.excluded_src),
            ("not_to_resolver", self.not_to_resolver),
            ("tcp_incomplete", self.tcp_incomplete()),
        ] {
            let _ = writeln!(s, "  {n:<18} {v}");
        }
        let c = &self.tcp_client;
        if self.tcp_dns > 0 {
            let _ = writeln!(
                s,
                "tcp: {} segments, {} retransmitted, {} out of order, {} after a lost segment, {} flows expired",
                self.tcp_dns,
                c.retransmitted + self.tcp_server.retransmitted,
                c.out_of_order + self.tcp_server.out_of_order,
                c.unsynced_segments + self.tcp_server.unsynced_segments,
                c.expired_flows + self.tcp_server.expired_flows
            );
        }
        if self.ts_backwards > 0 {
            let _ = writeln!(s, "note: {} packets had a timestamp earlier than the packet before", self.ts_backwards);
        }
        s.push_str(&distribution(&self.per_client));
        s
    }
}

/// Queries per client: percentiles and a power-of-two histogram.
pub fn distribution(per_client: &[u64]) -> String {
    let mut s = String::new();
    if per_client.is_empty() {
        s.push_str("queries per client: no clients\n");
        return s;
    }
    let mut v = per_client.to_vec();
    v.sort_unstable();
    let pct = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let _ = writeln!(
        s,
        "queries per client: min {} p50 {} p90 {} p99 {} max {} mean {:.1}",
        v[0],
        pct(50.0),
        pct(90.0),
        pct(99.0),
        v[v.len() - 1],
        v.iter().sum::<u64>() as f64 / v.len() as f64
    );
    let mut buckets = [0u64; 64];
    for &n in &v {
        buckets[63 - n.max(1).leading_zeros() as usize] += 1;
    }
    let top = *buckets.iter().max().unwrap();
    for (i, &b) in buckets.iter().enumerate() {
        if b == 0 {
            continue;
        }
        let lo = 1u64 << i;
        let hi = (lo << 1) - 1;
        let range = if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") };
        let bar = "#".repeat(((b * 40).div_ceil(top)) as usize);
        let _ = writeln!(s, "  {range:>15} {b:>9} {bar}");
    }
    s
}

struct ClientBuilder {
    addr: IpAddr,
    enc: RecordEncoder,
}

/// Reads a capture and collects clients; [`Extractor::write`] then writes the clients file.
pub struct Extractor {
    opts: Options,
    report: Report,
    index: HashMap<IpAddr, usize>,
    clients: Vec<ClientBuilder>,
    client_tcp: Reassembler,
    server_tcp: Reassembler,
    prev_ts: u64,
    /// Every kept query time (and the capture start) is a whole microsecond.
    whole_us: bool,
    memory: usize,
    scratch: Vec<u8>,
    found: Vec<(u64, usize, usize)>,
    /// The tick clients are encoded with while reading: 1000 for microsecond pcap (whose times
    /// are all whole microseconds), else 1 (re-encoded when writing if they all were).
    enc_tick: u32,
}

/// A capture that cannot be read at all.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ExtractError(#[from] pub CaptureError);

impl Extractor {
    pub fn new(opts: Options) -> Extractor {
        let limits = opts.tcp_limits;
        Extractor {
            opts,
            report: Report::default(),
            index: HashMap::new(),
            clients: Vec::new(),
            client_tcp: Reassembler::new(limits),
            server_tcp: Reassembler::new(limits),
            prev_ts: 0,
            whole_us: true,
            memory: 0,
            scratch: Vec::new(),
            found: Vec::new(),
            enc_tick: 1,
        }
    }

    /// Reads a whole capture. A capture that breaks in the middle is not an error: what came
    /// before is kept and [`Report::truncated`] says where. Errors only when the data is not a
    /// capture, or on an I/O error.
    pub fn read_capture<R: Read>(&mut self, r: R) -> Result<(), ExtractError> {
        let mut cap = CaptureReader::new(r)?;
        self.report.format = Some(cap.format());
        if cap.format() == Format::PcapMicro && self.report.packets == 0 {
            self.enc_tick = 1000;
        }
        loop {
            match cap.next_packet() {
                Ok(Some(p)) => self.packet(&p),
                Ok(None) => break,
                Err(e @ CaptureError::Truncated { .. }) => {
                    self.report.truncated = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Takes one packet.
    pub fn packet(&mut self, p: &Packet<'_>) {
        let r = &mut self.report;
        r.packets += 1;
        let start = *r.first_ts.get_or_insert(p.ts_ns);
        if p.ts_ns < self.prev_ts {
            r.ts_backwards += 1;
        }
        self.prev_ts = p.ts_ns;
        r.last_ts = r.last_ts.max(p.ts_ns);
        if start % 1000 != 0 {
            self.whole_us = false;
        }
        let d = match decode(p.linktype, p.data) {
            Ok(d) => d,
            Err(DropReason::NotIp) => return r.not_ip += 1,
            Err(DropReason::OtherProtocol) => return r.other_protocol += 1,
            Err(DropReason::Fragment) => return r.fragment += 1,
            Err(DropReason::Malformed) => return r.malformed_packets += 1,
        };
        let to_server = self.opts.ports.contains(&d.dport);
        let from_server = self.opts.ports.contains(&d.sport);
        if !to_server && !from_server {
            return r.not_dns_port += 1;
        }
        match d.transport {
            Transport::Udp => {
                r.udp_dns += 1;
                self.message(d.src, d.dst, p.ts_ns, d.payload, false);
            }
            Transport::Tcp { seq, syn, fin, rst } => {
                r.tcp_dns += 1;
                let key: FlowKey = (d.src, d.sport, d.dst, d.dport);
                let seg = Segment { ts_ns: p.ts_ns, seq, syn, fin, rst, payload: d.payload };
                // Messages are copied into a scratch buffer reused across packets: the callback
                // cannot borrow `self` while the reassembler does.
                let mut scratch = std::mem::take(&mut self.scratch);
                let mut found = std::mem::take(&mut self.found);
                scratch.clear();
                found.clear();
                let tcp = if to_server { &mut self.client_tcp } else { &mut self.server_tcp };
                tcp.segment(key, seg, &mut |ts, m| {
                    found.push((ts, scratch.len(), scratch.len() + m.len()));
                    scratch.extend_from_slice(m);
                });
                for &(ts, from, to) in &found {
                    self.message(d.src, d.dst, ts, &scratch[from..to], true);
                }
                self.scratch = scratch;
                self.found = found;
            }
        }
    }

    fn message(&mut self, src: IpAddr, dst: IpAddr, ts: u64, msg: &[u8], tcp: bool) {
        let r = &mut self.report;
        let Ok(h) = DnsHeader::parse(msg) else { return r.malformed_messages += 1 };
        if h.is_response() {
            return r.responses += 1;
        }
        if h.opcode().0 != 0 {
            return r.not_query += 1;
        }
        let Ok(q) = parse_query(msg) else { return r.malformed_messages += 1 };
        if self.opts.exclude_src.contains(&src) {
            return r.excluded_src += 1;
        }
        if !self.opts.resolvers.is_empty() && !self.opts.resolvers.contains(&dst) {
            return r.not_to_resolver += 1;
        }
        let offset_ns = ts.saturating_sub(r.first_ts.unwrap_or(ts));
        if offset_ns % 1000 != 0 {
            self.whole_us = false;
        }
        r.queries += 1;
        if tcp {
            r.tcp_queries += 1;
        } else {
            r.udp_queries += 1;
        }
        r.first_query.get_or_insert(offset_ns);
        r.last_query = r.last_query.max(offset_ns);
        let cq = ClientQuery {
            offset_ns,
            qname: q.qname,
            qtype: q.qtype,
            qclass: q.qclass,
            rd: h.flags & DnsHeader::RD != 0,
            cd: h.flags & DnsHeader::CD != 0,
            ad: h.flags & DnsHeader::AD != 0,
            dnssec_ok: q.edns.is_some_and(|e| e.dnssec_ok),
            edns: q.edns.map(|e| e.udp_size),
            tcp,
        };
        let i = *self.index.entry(src).or_insert_with(|| {
            self.clients.push(ClientBuilder { addr: src, enc: RecordEncoder::new() });
            self.clients.len() - 1
        });
        let enc = &mut self.clients[i].enc;
        let before = enc.memory();
        enc.push(&cq, self.enc_tick);
        self.memory = self.memory + enc.memory() - before;
        self.report.client_memory = self.report.client_memory.max(self.memory);
    }

    /// Ends the TCP flows still open; call after the last packet.
    pub fn finish(&mut self) {
        self.client_tcp.finish();
        self.server_tcp.finish();
        self.report.tcp_client = self.client_tcp.stats();
        self.report.tcp_server = self.server_tcp.stats();
    }

    /// The counters so far.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Writes the clients file (sorted by first query) to `w` and returns the report.
    pub fn write<W: Write + Seek>(mut self, w: W) -> io::Result<(Report, W)> {
        self.finish();
        let tick_ns = if self.whole_us { 1000 } else { 1 };
        let header = Header {
            capture_start_ns: self.report.first_ts.unwrap_or(0),
            duration_ns: self.report.first_ts.map_or(0, |f| self.report.last_ts - f),
            tick_ns,
            anonymized: self.opts.anonymize,
            ..Header::default()
        };
        let mut clients = std::mem::take(&mut self.clients);
        clients.sort_by_key(|c| (c.enc.first_ns(), c.addr));
        let mut out = ClientsWriter::new(w, header)?;
        let mut per_client = Vec::with_capacity(clients.len());
        for c in clients {
            let addr = if self.opts.anonymize { None } else { Some(c.addr) };
            let ipv6 = c.addr.is_ipv6();
            if tick_ns == self.enc_tick {
                out.add_encoded(addr, ipv6, &c.enc)?;
            } else {
                out.add_client(addr, ipv6, &decode_encoder(&c.enc, self.enc_tick))?;
            }
            per_client.push(c.enc.count());
        }
        let (_, mut w) = out.finish()?;
        self.report.output_bytes = w.stream_position()?;
        self.report.per_client = per_client;
        Ok((self.report, w))
    }
}
