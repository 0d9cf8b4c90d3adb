//! Queries matched to their answers on the wire, sans-IO: packets in (a capture time and a
//! frame), latency histograms out, per transport.
//!
//! A query is known by its client address and port, its server address and port, its DNS ID
//! and its question (name, case-insensitive, type and class: [`volley_wire::question_key`]);
//! its answer is the first response with the same five. UDP datagrams are messages as they
//! are; TCP streams are reassembled in each direction ([`volley_replay::tcp`], RFC 7766
//! length prefixes), a message taking the capture time of the segment that carried its last
//! byte (when the receiver has it whole: tshark's time of a reassembled message too). A message is a query or a response by its QR bit, so the matcher needs no telling
//! which side is the server; a filter on the server's address keeps other traffic out.
//!
//! Memory is bounded: at most [`MAX_PENDING`] queries wait for their answers per transport
//! (beyond it a new query is counted `overflow` and not matched), a query unanswered for the
//! expiry time (capture time) is counted `unanswered` and forgotten, and TCP reassembly keeps
//! its own bounds.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};
use volley_metrics::Histogram;
use volley_replay::capture::{decode, Transport};
use volley_replay::tcp::{Reassembler, Segment};
use volley_wire::{question_key, Header};

/// Most queries waiting for an answer at once, per transport.
pub const MAX_PENDING: usize = 1 << 20;

/// Significant figures of the wire's histograms: those of a run's totals.
pub const SIGFIG: u8 = 3;

/// The transports whose messages can be read on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Udp,
    Tcp,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// What the wire showed for one transport: counts of DNS messages and how they matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCounts {
    /// Queries seen (QR clear, one question).
    pub queries: u64,
    /// Queries whose answer was seen: the histogram's count.
    pub matched: u64,
    /// Queries whose answer was not seen within the expiry time, or by the end of the capture.
    pub unanswered: u64,
    /// Responses that answered no query waiting (the query came before the capture, or the
    /// response repeats one already matched).
    pub unmatched_responses: u64,
    /// Queries seen again (same addresses, ports, ID and question) while the first still
    /// waited: the later one is kept.
    pub repeated: u64,
    /// Queries not kept because [`MAX_PENDING`] were already waiting.
    pub overflow: u64,
    /// Messages that are not DNS (no header, no single question).
    pub not_dns: u64,
}

/// Counts of the packets the matcher was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketCounts {
    /// Packets taken.
    pub packets: u64,
    /// Packets to or from the server (all packets without a filter) carrying UDP or TCP.
    pub kept: u64,
    /// Packets that are not IP carrying UDP or TCP, or are malformed or fragments.
    pub undecodable: u64,
}

/// A query's identity: client, server, DNS ID, question key.
type Key = (IpAddr, u16, IpAddr, u16, u16, u64);

#[derive(Debug)]
struct Side {
    pending: HashMap<Key, u64>,
    hist: Histogram,
    counts: WireCounts,
}

impl Side {
    fn new() -> Side {
        Side { pending: HashMap::new(), hist: Histogram::new(SIGFIG), counts: WireCounts::default() }
    }

    fn message(&mut self, ts: u64, src: SocketAddr, dst: SocketAddr, msg: &[u8]) {
        let (Ok(h), Ok(q)) = (Header::parse(msg), question_key(msg)) else {
            self.counts.not_dns += 1;
            return;
        };
        if h.is_response() {
            match self.pending.remove(&(dst.ip(), dst.port(), src.ip(), src.port(), h.id, q)) {
                Some(sent) => {
                    self.counts.matched += 1;
                    self.hist.record(ts.saturating_sub(sent));
                }
                None => self.counts.unmatched_responses += 1,
            }
        } else {
            self.counts.queries += 1;
            let key = (src.ip(), src.port(), dst.ip(), dst.port(), h.id, q);
            if self.pending.len() >= MAX_PENDING && !self.pending.contains_key(&key) {
                self.counts.overflow += 1;
                return;
            }
            if self.pending.insert(key, ts).is_some() {
                self.counts.repeated += 1;
            }
        }
    }

    fn expire(&mut self, now: u64, after_ns: u64) {
        let before = self.pending.len();
        self.pending.retain(|_, &mut sent| now.saturating_sub(sent) < after_ns);
        self.counts.unanswered += (before - self.pending.len()) as u64;
    }
}

/// The matcher: feed it packets in capture order with [`Matcher::packet`], then
/// [`Matcher::finish`].
#[derive(Debug)]
pub struct Matcher {
    server: Option<SocketAddr>,
    expire_ns: u64,
    last_sweep: u64,
    udp: Side,
    tcp: Side,
    reasm: Reassembler,
    packets: PacketCounts,
}

/// One transport's result: its histogram of wire latencies (nanoseconds) and its counts.
#[derive(Debug, Clone)]
pub struct WireResult {
    pub proto: Proto,
    pub latency: Histogram,
    pub counts: WireCounts,
}

impl Matcher {
    /// A matcher of the traffic to and from `server` (all traffic when None); a query waits
    /// for its answer `expire_ns` of capture time at most.
    pub fn new(server: Option<SocketAddr>, expire_ns: u64) -> Matcher {
        Matcher {
            server,
            expire_ns: expire_ns.max(1),
            last_sweep: 0,
            udp: Side::new(),
            tcp: Side::new(),
            reasm: Reassembler::default().stamp_last_byte(),
            packets: PacketCounts::default(),
        }
    }

    /// Takes one packet: its capture time (nanoseconds, any epoch, the same for every packet),
    /// the link type of its frame (`volley_replay::capture::linktype`) and the frame.
    pub fn packet(&mut self, ts_ns: u64, linktype: u32, frame: &[u8]) {
        self.packet_segmented(ts_ns, linktype, frame, None)
    }

    /// [`Matcher::packet`] for a packet that may be a UDP segmentation offload train (a
    /// capture on the host that sends it sees the train as one packet): `udp_segment`, the
    /// train's segment size, splits its payload into the datagrams it carries.
    pub fn packet_segmented(&mut self, ts_ns: u64, linktype: u32, frame: &[u8], udp_segment: Option<usize>) {
        self.packets.packets += 1;
        if ts_ns >= self.last_sweep.saturating_add(1_000_000_000) {
            self.last_sweep = ts_ns;
            self.udp.expire(ts_ns, self.expire_ns);
            self.tcp.expire(ts_ns, self.expire_ns);
        }
        let d = match decode(linktype, frame) {
            Ok(d) => d,
            Err(_) => {
                self.packets.undecodable += 1;
                return;
            }
        };
        let src = SocketAddr::new(d.src, d.sport);
        let dst = SocketAddr::new(d.dst, d.dport);
        if let Some(s) = self.server {
            if src != s && dst != s {
                return;
            }
        }
        self.packets.kept += 1;
        match d.transport {
            Transport::Udp => match udp_segment.filter(|&n| n > 0) {
                Some(n) => {
                    for datagram in d.payload.chunks(n) {
                        self.udp.message(ts_ns, src, dst, datagram)
                    }
                }
                None => self.udp.message(ts_ns, src, dst, d.payload),
            },
            Transport::Tcp { seq, syn, fin, rst } => {
                let tcp = &mut self.tcp;
                let seg = Segment { ts_ns, seq, syn, fin, rst, payload: d.payload };
                self.reasm
                    .segment((d.src, d.sport, d.dst, d.dport), seg, &mut |ts, msg| tcp.message(ts, src, dst, msg));
            }
        }
    }

    /// Ends the capture: queries still waiting are unanswered. Returns each transport seen.
    pub fn finish(mut self) -> (Vec<WireResult>, PacketCounts) {
        self.reasm.finish();
        let mut out = Vec::new();
        for (proto, mut side) in [(Proto::Udp, self.udp), (Proto::Tcp, self.tcp)] {
            side.counts.unanswered += side.pending.len() as u64;
            if side.counts.queries + side.counts.unmatched_responses + side.counts.not_dns > 0 {
                out.push(WireResult { proto, latency: side.hist, counts: side.counts });
            }
        }
        (out, self.packets)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use volley_replay::capture::linktype;

    /// A raw IPv4 packet (link type RAW) carrying UDP or TCP.
    pub(crate) fn ipv4(src: SocketAddr, dst: SocketAddr, tcp: Option<(u32, bool)>, payload: &[u8]) -> Vec<u8> {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (src.ip(), dst.ip()) else { panic!("v4") };
        let l4 = if tcp.is_some() { 20 } else { 8 };
        let total = 20 + l4 + payload.len();
        let mut p = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64];
        p.push(if tcp.is_some() { 6 } else { 17 });
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&s.octets());
        p.extend_from_slice(&d.octets());
        p.extend_from_slice(&src.port().to_be_bytes());
        p.extend_from_slice(&dst.port().to_be_bytes());
        match tcp {
            Some((seq, syn)) => {
                p.extend_from_slice(&seq.to_be_bytes());
                p.extend_from_slice(&[0, 0, 0, 0, 0x50, if syn { 0x02 } else { 0x18 }, 0xff, 0xff, 0, 0, 0, 0]);
            }
            None => {
                p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
                p.extend_from_slice(&[0, 0]);
            }
        }
        p.extend_from_slice(payload);
        p
    }

    fn msg(id: u16, response: bool, name: &[u8]) -> Vec<u8> {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&[if response { 0x81 } else { 0x01 }, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        m.extend_from_slice(name);
        m.extend_from_slice(&[0, 1, 0, 1]);
        m
    }

    #[test]
    fn udp_by_id_and_question() {
        let (c, s) = ("127.0.0.2:4000".parse().unwrap(), "127.0.0.1:53".parse().unwrap());
        let other: SocketAddr = "127.0.0.1:54".parse().unwrap();
        let mut m = Matcher::new(Some(s), 5_000_000_000);
        let www = b"\x03www\x04test\x00";
        let ftp = b"\x03ftp\x04test\x00";
        m.packet(1_000, linktype::RAW, &ipv4(c, s, None, &msg(7, false, www)));
        m.packet(1_100, linktype::RAW, &ipv4(c, s, None, &msg(8, false, www)));
        m.packet(1_200, linktype::RAW, &ipv4(c, other, None, &msg(9, false, www))); // not the server's
        m.packet(3_000, linktype::RAW, &ipv4(s, c, None, &msg(8, true, www))); // 1,900
        m.packet(2_500, linktype::RAW, &ipv4(s, c, None, &msg(7, true, ftp))); // other question
        m.packet(3_000, linktype::RAW, &ipv4(s, c, None, &msg(7, true, b"\x03WWW\x04TEST\x00"))); // 2,000
        m.packet(3_100, linktype::RAW, &ipv4(s, c, None, &msg(7, true, www))); // again
        m.packet(3_200, linktype::RAW, &[0x45, 0]);
        let (r, p) = m.finish();
        assert_eq!(r.len(), 1);
        let u = &r[0];
        assert_eq!(u.proto, Proto::Udp);
        assert_eq!(u.counts, WireCounts { queries: 2, matched: 2, unmatched_responses: 2, ..WireCounts::default() });
        assert_eq!(u.latency.min(), 1_900);
        assert_eq!(u.latency.max(), 2_000);
        assert_eq!(p, PacketCounts { packets: 8, kept: 6, undecodable: 1 });
    }

    #[test]
    fn udp_segmentation_train() {
        let (c, s) = ("127.0.0.2:4000".parse().unwrap(), "127.0.0.1:53".parse().unwrap());
        let mut m = Matcher::new(Some(s), 5_000_000_000);
        let www = b"\x03www\x04test\x00";
        for id in 1..=3 {
            m.packet(1_000, linktype::RAW, &ipv4(c, s, None, &msg(id, false, www)));
        }
        // Three answers of one size in one train, the last one shorter (as UDP_SEGMENT allows).
        let mut train = Vec::new();
        let size = msg(1, true, www).len() + 4;
        for id in 1..=2 {
            let mut a = msg(id, true, www);
            a.extend_from_slice(&[0; 4]);
            train.extend_from_slice(&a);
        }
        train.extend_from_slice(&msg(3, true, www));
        m.packet_segmented(2_000, linktype::RAW, &ipv4(s, c, None, &train), Some(size));
        let (r, _) = m.finish();
        assert_eq!(r[0].counts, WireCounts { queries: 3, matched: 3, ..WireCounts::default() });
    }

    #[test]
    fn tcp_reassembled_both_ways_and_expiry() {
        let (c, s) = ("127.0.0.2:4000".parse().unwrap(), "127.0.0.1:53".parse().unwrap());
        let mut m = Matcher::new(None, 2_000_000_000);
        let framed = |ms: &[Vec<u8>]| {
            let mut v = Vec::new();
            for x in ms {
                v.extend_from_slice(&(x.len() as u16).to_be_bytes());
                v.extend_from_slice(x);
            }
            v
        };
        let www = b"\x03www\x04test\x00";
        let q = framed(&[msg(1, false, www), msg(2, false, www)]);
        m.packet(0, linktype::RAW, &ipv4(c, s, Some((99, true)), &[]));
        m.packet(0, linktype::RAW, &ipv4(s, c, Some((499, true)), &[]));
        m.packet(10, linktype::RAW, &ipv4(c, s, Some((100, false)), &q[..5]));
        m.packet(20, linktype::RAW, &ipv4(c, s, Some((105, false)), &q[5..]));
        // Both answers in one segment, in the other order.
        let a = framed(&[msg(2, true, www), msg(1, true, www)]);
        m.packet(1_000, linktype::RAW, &ipv4(s, c, Some((500, false)), &a));
        // A third query, never answered: expired a second after the expiry time.
        let q3 = framed(&[msg(3, false, www)]);
        m.packet(2_000, linktype::RAW, &ipv4(c, s, Some((100 + q.len() as u32, false)), &q3));
        m.packet(4_000_000_000, linktype::RAW, &ipv4(s, c, Some((500 + a.len() as u32, false)), &[]));
        let (r, _) = m.finish();
        let t = r.iter().find(|r| r.proto == Proto::Tcp).unwrap();
        assert_eq!(t.counts, WireCounts { queries: 3, matched: 2, unanswered: 1, ..WireCounts::default() });
        // A message's time is its last byte's: 20 for both.
        assert_eq!((t.latency.min(), t.latency.max()), (980, 980));
    }
}
