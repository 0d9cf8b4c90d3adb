//! Reassembly of DNS-over-TCP messages (RFC 7766: each message preceded by its 16-bit length)
//! from the client side of TCP flows, in bounded memory.
//!
//! Each flow (source address and port → destination address and port) keeps the next sequence
//! number it expects and the bytes of the message it is in the middle of. Segments are placed
//! by sequence number: retransmissions and duplicates are dropped, overlaps trimmed, segments
//! that arrive early are held (up to [`Limits::max_out_of_order`] bytes per flow) until the gap
//! fills. A gap that never fills (a segment the capture lost) makes the flow lose its framing:
//! the partial message is counted as incomplete and the flow skips data until its next SYN.
//!
//! Memory is bounded: one partial message (at most 65,537 bytes) plus the held segments per
//! flow, and at most [`Limits::max_flows`] flows; a flow idle for [`Limits::idle_ns`] of capture
//! time is expired, and when the table is full the least recently active flow is.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// A flow's key: source address and port, destination address and port.
pub type FlowKey = (IpAddr, u16, IpAddr, u16);

/// Bounds on reassembly state.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most flows tracked at once.
    pub max_flows: usize,
    /// Most bytes held in early (out-of-order) segments per flow.
    pub max_out_of_order: usize,
    /// A flow without a segment for this long (capture time) is expired.
    pub idle_ns: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_flows: 100_000, max_out_of_order: 65_536, idle_ns: 120_000_000_000 }
    }
}

/// Counters of what reassembly did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Segments that repeated bytes already seen (retransmissions, duplicates).
    pub retransmitted: u64,
    /// Segments that arrived before an earlier one and were held.
    pub out_of_order: u64,
    /// Messages begun but never completed: the flow closed or expired, or the capture lost a
    /// segment in the middle of them.
    pub incomplete: u64,
    /// Segments ignored because their flow had lost its framing (after a lost segment, until a SYN).
    pub unsynced_segments: u64,
    /// Flows expired for idleness or evicted because the table was full.
    pub expired_flows: u64,
}

#[derive(Debug)]
struct Flow {
    /// Next sequence number expected; None until the first segment.
    next_seq: Option<u32>,
    /// Bytes of the message in progress (its length prefix included).
    buf: Vec<u8>,
    /// Capture time of the segment that carried the first byte of `buf`.
    buf_ts: u64,
    /// Early segments by sequence number: (capture time, bytes).
    early: BTreeMap<u32, (u64, Vec<u8>)>,
    early_bytes: usize,
    /// Framing lost: skip data until the next SYN.
    lost: bool,
    last_ts: u64,
}

impl Flow {
    fn new(ts: u64) -> Flow {
        Flow {
            next_seq: None,
            buf: Vec::new(),
            buf_ts: ts,
            early: BTreeMap::new(),
            early_bytes: 0,
            lost: false,
            last_ts: ts,
        }
    }

    /// Whether a message was begun and not finished.
    fn partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// The reassembler. Feed it client-to-server segments with [`Reassembler::segment`]; complete
/// messages come out through the callback, with the capture time of their first byte.
#[derive(Debug)]
pub struct Reassembler {
    flows: HashMap<FlowKey, Flow>,
    limits: Limits,
    /// Messages take the time of the segment that completed them, not of their first byte.
    last_byte: bool,
    stats: TcpStats,
    last_sweep: u64,
}

/// One segment of a flow, as decoded from a packet.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    pub ts_ns: u64,
    pub seq: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    pub payload: &'a [u8],
}

impl Default for Reassembler {
    fn default() -> Self {
        Reassembler::new(Limits::default())
    }
}

impl Reassembler {
    pub fn new(limits: Limits) -> Reassembler {
        Reassembler { flows: HashMap::new(), limits, last_byte: false, stats: TcpStats::default(), last_sweep: 0 }
    }

    /// Messages come out with the capture time of the segment that carried their last byte
    /// (when a receiver has the whole message), instead of their first.
    pub fn stamp_last_byte(mut self) -> Reassembler {
        self.last_byte = true;
        self
    }

    pub fn stats(&self) -> TcpStats {
        self.stats
    }

    /// Flows currently tracked.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Takes one segment; calls `emit(ts_ns, message)` for each message it completes (the
    /// message without its length prefix; the time of its first byte, or of its last with
    /// [`Reassembler::stamp_last_byte`]).
    pub fn segment(&mut self, key: FlowKey, seg: Segment<'_>, emit: &mut dyn FnMut(u64, &[u8])) {
        self.sweep(seg.ts_ns);
        if !self.flows.contains_key(&key) {
            if seg.payload.is_empty() && !seg.syn {
                return; // a bare ACK/FIN/RST of a flow we do not know: nothing to keep
            }
            if self.flows.len() >= self.limits.max_flows {
                self.evict_oldest();
            }
        }
        let limits = self.limits;
        let last_byte = self.last_byte;
        let stats = &mut self.stats;
        let flow = self.flows.entry(key).or_insert_with(|| Flow::new(seg.ts_ns));
        flow.last_ts = flow.last_ts.max(seg.ts_ns);
        if seg.syn {
            if flow.partial() {
                stats.incomplete += 1;
            }
            *flow = Flow::new(seg.ts_ns);
            flow.next_seq = Some(seg.seq.wrapping_add(1));
        }
        if !seg.payload.is_empty() {
            if flow.lost {
                stats.unsynced_segments += 1;
            } else {
                let start = if seg.syn { seg.seq.wrapping_add(1) } else { seg.seq };
                place(flow, start, seg.ts_ns, seg.payload, limits, last_byte, stats, emit);
            }
        }
        if seg.fin || seg.rst {
            if let Some(f) = self.flows.remove(&key) {
                if f.partial() || !f.early.is_empty() {
                    self.stats.incomplete += 1;
                }
            }
        }
    }

    /// Ends every flow (end of capture): partial messages are counted as incomplete.
    pub fn finish(&mut self) {
        for (_, f) in self.flows.drain() {
            if f.partial() || !f.early.is_empty() {
                self.stats.incomplete += 1;
            }
        }
    }

    fn sweep(&mut self, now: u64) {
        // Once per second of capture time at most (a capture's times may be anything, up to
        // the end of u64: no sum that could overflow).
        if now.saturating_sub(self.last_sweep) < 1_000_000_000 {
            return;
        }
        self.last_sweep = now;
        let idle = self.limits.idle_ns;
        let stats = &mut self.stats;
        self.flows.retain(|_, f| {
            let keep = now.saturating_sub(f.last_ts) < idle;
            if !keep {
                stats.expired_flows += 1;
                if f.partial() || !f.early.is_empty() {
                    stats.incomplete += 1;
                }
            }
            keep
        });
    }

    fn evict_oldest(&mut self) {
        if let Some(k) = self.flows.iter().min_by_key(|(_, f)| f.last_ts).map(|(k, _)| *k) {
            let f = self.flows.remove(&k).unwrap();
            self.stats.expired_flows += 1;
            if f.partial() || !f.early.is_empty() {
                self.stats.incomplete += 1;
            }
        }
    }
}

/// Places `data` starting at sequence `seq` into the flow.
#[allow(clippy::too_many_arguments)]
fn place(
    flow: &mut Flow,
    seq: u32,
    ts: u64,
    data: &[u8],
    limits: Limits,
    last_byte: bool,
    stats: &mut TcpStats,
    emit: &mut dyn FnMut(u64, &[u8]),
) {
    let next = *flow.next_seq.get_or_insert(seq);
    let rel = seq.wrapping_sub(next) as i32;
    if rel < 0 {
        // Starts before what we expect: a retransmission, or an overlap with new bytes at the end.
        let skip = (-(rel as i64)) as usize;
        if skip >= data.len() {
            stats.retransmitted += 1;
            return;
        }
        stats.retransmitted += 1;
        append(flow, ts, &data[skip..], last_byte, emit);
    } else if rel > 0 {
        // Early: hold it until the gap fills, within bounds.
        if flow.early_bytes + data.len() > limits.max_out_of_order {
            lose(flow, stats);
            return;
        }
        stats.out_of_order += 1;
        flow.early_bytes += data.len();
        let e = flow.early.entry(seq).or_insert((ts, Vec::new()));
        if data.len() > e.1.len() {
            flow.early_bytes -= e.1.len();
            *e = (ts, data.to_vec());
        } else {
            flow.early_bytes -= data.len();
        }
        return;
    } else {
        append(flow, ts, data, last_byte, emit);
    }
    // Held segments that now fit.
    while let Some((&s, _)) = flow.early.iter().next() {
        let next = flow.next_seq.unwrap();
        let rel = s.wrapping_sub(next) as i32;
        if rel > 0 {
            break;
        }
        let (ets, bytes) = flow.early.remove(&s).unwrap();
        flow.early_bytes -= bytes.len();
        let skip = (-(rel as i64)) as usize;
        if skip < bytes.len() {
            // A held segment completes messages now: its bytes are whole once the gap filled.
            append(flow, if last_byte { ts } else { ets }, &bytes[skip..], last_byte, emit);
        }
    }
}

/// The flow lost bytes for good: drop what it holds and skip until the next SYN.
fn lose(flow: &mut Flow, stats: &mut TcpStats) {
    if flow.partial() || !flow.early.is_empty() {
        stats.incomplete += 1;
    }
    flow.buf = Vec::new();
    flow.early.clear();
    flow.early_bytes = 0;
    flow.lost = true;
}

/// Appends in-order bytes and emits every message they complete.
fn append(flow: &mut Flow, ts: u64, mut data: &[u8], last_byte: bool, emit: &mut dyn FnMut(u64, &[u8])) {
    flow.next_seq = Some(flow.next_seq.unwrap_or(0).wrapping_add(data.len() as u32));
    while !data.is_empty() {
        if flow.buf.is_empty() {
            flow.buf_ts = ts;
            // Fast path: whole messages straight from the segment, without copying.
            if data.len() >= 2 {
                let len = u16::from_be_bytes([data[0], data[1]]) as usize;
                if data.len() >= 2 + len {
                    emit(ts, &data[2..2 + len]);
                    data = &data[2 + len..];
                    continue;
                }
            }
        }
        // Slow path: complete the length prefix, then the message, in the flow's buffer.
        let want = if flow.buf.len() < 2 {
            2 - flow.buf.len()
        } else {
            2 + u16::from_be_bytes([flow.buf[0], flow.buf[1]]) as usize - flow.buf.len()
        };
        let take = want.min(data.len());
        flow.buf.extend_from_slice(&data[..take]);
        data = &data[take..];
        if flow.buf.len() >= 2 {
            let len = u16::from_be_bytes([flow.buf[0], flow.buf[1]]) as usize;
            if flow.buf.len() == 2 + len {
                emit(if last_byte { ts } else { flow.buf_ts }, &flow.buf[2..]);
                flow.buf.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> FlowKey {
        ("127.0.0.2".parse().unwrap(), 40000, "127.0.0.1".parse().unwrap(), 53)
    }

    fn framed(msgs: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for m in msgs {
            v.extend_from_slice(&(m.len() as u16).to_be_bytes());
            v.extend_from_slice(m);
        }
        v
    }

    fn seg(ts: u64, seq: u32, payload: &[u8]) -> Segment<'_> {
        Segment { ts_ns: ts, seq, syn: false, fin: false, rst: false, payload }
    }

    fn run(r: &mut Reassembler, segs: &[Segment<'_>]) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        for s in segs {
            r.segment(key(), *s, &mut |ts, m| out.push((ts, m.to_vec())));
        }
        out
    }

    #[test]
    fn split_several_and_retransmitted() {
        let stream = framed(&[b"first", b"second message", b"3"]);
        let isn = u32::MAX - 3; // sequence numbers wrap in the middle
        let mut r = Reassembler::default();
        let syn = Segment { ts_ns: 1, seq: isn, syn: true, fin: false, rst: false, payload: &[] };
        let base = isn.wrapping_add(1);
        let out = run(
            &mut r,
            &[
                syn,
                seg(10, base, &stream[..1]),                   // half a length prefix
                seg(20, base.wrapping_add(1), &stream[1..5]),  // rest of the prefix and 3 bytes
                seg(25, base.wrapping_add(1), &stream[1..5]),  // retransmission
                seg(30, base.wrapping_add(3), &stream[3..12]), // overlap: first done, second begun
                seg(40, base.wrapping_add(12), &stream[12..]), // rest: second and third
            ],
        );
        assert_eq!(out, vec![(10, b"first".to_vec()), (30, b"second message".to_vec()), (40, b"3".to_vec())]);
        assert_eq!(r.stats().retransmitted, 2);
        r.finish();
        assert_eq!(r.stats().incomplete, 0);
    }

    /// Found by fuzzing (fuzz/regressions/capture/tcp-sweep-time-overflow.pcapng): a capture's
    /// times may be anything; one at the end of u64 after a sweep overflowed the next sweep's
    /// time. Flows idle past the limit are still swept, once per second of capture time.
    #[test]
    fn times_at_the_end_of_u64() {
        let stream = framed(&[b"aaaa"]);
        let mut r = Reassembler::default();
        let far = u64::MAX - 10;
        assert!(run(&mut r, &[seg(far, 0, &stream[..3])]).is_empty());
        assert_eq!(run(&mut r, &[seg(u64::MAX, 3, &stream[3..])]), vec![(far, b"aaaa".to_vec())]);
        let mut r = Reassembler::default();
        run(&mut r, &[seg(1_000_000_000, 0, &stream[..3])]);
        let other = ("127.0.0.3".parse().unwrap(), 40000, "127.0.0.1".parse().unwrap(), 53);
        r.segment(other, seg(u64::MAX, 0, &stream[..3]), &mut |_, _| {});
        assert_eq!((r.stats().expired_flows, r.flows()), (1, 1));
    }

    #[test]
    fn last_byte_times() {
        let stream = framed(&[b"first", b"second message"]);
        let mut r = Reassembler::default().stamp_last_byte();
        let out = run(
            &mut r,
            &[
                seg(10, 0, &stream[..4]),
                seg(20, 4, &stream[4..10]),   // first done, second begun
                seg(30, 13, &stream[13..]),   // early: held
                seg(40, 10, &stream[10..13]), // the gap filled at 40: second done
            ],
        );
        assert_eq!(out, vec![(20, b"first".to_vec()), (40, b"second message".to_vec())]);
    }

    #[test]
    fn out_of_order_and_loss() {
        let stream = framed(&[b"aaaa", b"bbbb"]);
        let mut r = Reassembler::default();
        let out = run(&mut r, &[seg(1, 94, &stream[..2]), seg(5, 100, &stream[6..]), seg(3, 96, &stream[2..6])]);
        assert_eq!(out, vec![(1, b"aaaa".to_vec()), (5, b"bbbb".to_vec())]);
        assert_eq!(r.stats().out_of_order, 1);
        // a gap that never fills, then the flow ends: one incomplete message
        let mut r = Reassembler::new(Limits { max_out_of_order: 4, ..Limits::default() });
        let out = run(&mut r, &[seg(1, 0, &stream[..3]), seg(2, 5, &stream[5..])]);
        assert!(out.is_empty());
        assert_eq!(r.stats().incomplete, 1);
        assert_eq!(run(&mut r, &[seg(3, 3, &stream[3..5])]), vec![]);
        assert_eq!(r.stats().unsynced_segments, 1);
    }

    #[test]
    fn bounded_flows() {
        let mut r = Reassembler::new(Limits { max_flows: 10, ..Limits::default() });
        for p in 0..100u16 {
            let k = ("127.0.0.2".parse().unwrap(), p, "127.0.0.1".parse().unwrap(), 53);
            r.segment(k, seg(p as u64, 0, &[0, 9, 1]), &mut |_, _| {});
        }
        assert_eq!(r.flows(), 10);
        assert_eq!(r.stats().incomplete, 90);
        // idle expiry
        r.segment(key(), seg(1_000_000_000_000, 0, &[0, 9, 1]), &mut |_, _| {});
        assert_eq!(r.flows(), 1);
    }
}
