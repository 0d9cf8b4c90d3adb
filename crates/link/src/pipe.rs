//! The scheduling core of one direction, sans-IO: packets and the time come in, packets and
//! the time each is due come out. No sockets, no clocks: the forwarder passes the monotonic
//! clock, the tests virtual time, and both get the same schedule from the same seed.
//!
//! Per packet, in this order (netem's, see docs/link.md):
//! 1. outage: inside an outage window the packet is dropped (`dropped_outage`);
//! 2. loss: independent or Gilbert-Elliott (`dropped_loss`), inside its windows if it has any
//!    (`loss-during`);
//! 3. duplication: with its probability a second copy follows the same path (`duplicated`);
//! 4. reorder: with its probability the packet skips the delay and leaves at once (netem's
//!    `reorder`, which needs a delay to mean anything);
//! 5. delay + jitter: `now + delay + jitter sample`; with `keep_order` (or a rate) no earlier
//!    than the packet before;
//! 6. rate and queue: a drop-tail queue (packets or bytes, `dropped_queue`) in front of the
//!    bottleneck, `tts = max(last_tts, now + delay) + len / rate` as netem computes it, or the
//!    delivery opportunities of a mahimahi trace;
//! 7. a packet due inside an outage window is dropped when it would leave (`dropped_outage`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use volley_metrics::Histogram;

use crate::model::{DirConfig, Dist, Loss, Nanos, QueueLimit, Rate, Trace, TRACE_OPPORTUNITY_BYTES};
use crate::rng::Rng;

/// What happened to the packets of one direction (the results' own type).
pub use volley_metrics::LinkCounters as Counters;

/// A packet on its way out.
#[derive(Debug)]
pub struct Departure<P> {
    pub packet: P,
    /// When it was due to leave.
    pub due: Nanos,
}

struct Slot<P> {
    due: Nanos,
    seq: u64,
    packet: P,
}

impl<P> PartialEq for Slot<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl<P> Eq for Slot<P> {}
impl<P> PartialOrd for Slot<P> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Slot<P> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// One direction of the link. `P` is the packet (its length is what the rate and the byte
/// counters see).
pub struct Pipe<P> {
    cfg: DirConfig,
    rng: Rng,
    start: Nanos,
    /// Gilbert-Elliott: in the bad state.
    bad: bool,
    held: BinaryHeap<Reverse<Slot<P>>>,
    seq: u64,
    /// The highest sequence number that has left (reordering is counted against it).
    highest_out: Option<u64>,
    /// The latest due time given so far (order keeping and the rate's reference point).
    last_due: Nanos,
    /// The bottleneck queue: (due, cumulative bytes up to and including this packet).
    queue: VecDeque<(Nanos, u64)>,
    /// Cumulative bytes of the packets that have left `queue`.
    queue_base: u64,
    queue_cum: u64,
    /// Trace rate: the current opportunity (absolute index) and the bytes left in it.
    op: u64,
    op_left: u32,
    pub counters: Counters,
    /// Time each packet waited in the bottleneck queue (rate or trace only), ns.
    pub queue_delay: Histogram,
    /// The same since it was last taken (per-second figures).
    pub queue_delay_since: Histogram,
}

impl<P: AsRef<[u8]>> Pipe<P> {
    /// A direction starting at `start` (outages count from there), its random choices from
    /// `seed`.
    pub fn new(cfg: DirConfig, seed: u64, start: Nanos) -> Pipe<P> {
        Pipe {
            cfg,
            rng: Rng::new(seed),
            start,
            bad: false,
            held: BinaryHeap::new(),
            seq: 0,
            highest_out: None,
            last_due: 0,
            queue: VecDeque::new(),
            queue_base: 0,
            queue_cum: 0,
            op: 0,
            op_left: 0,
            counters: Counters::default(),
            queue_delay: Histogram::new(3),
            queue_delay_since: Histogram::new(3),
        }
    }

    pub fn config(&self) -> &DirConfig {
        &self.cfg
    }

    fn in_outage(&self, t: Nanos) -> bool {
        let rel = t.saturating_sub(self.start);
        self.cfg.outages.iter().any(|&(a, b)| rel >= a && rel < b)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.unit() <= p
    }

    fn lost(&mut self, t: Nanos) -> bool {
        if !self.cfg.loss_windows.is_empty() {
            let rel = t.saturating_sub(self.start);
            if !self.cfg.loss_windows.iter().any(|&(a, b)| rel >= a && rel < b) {
                return false;
            }
        }
        match self.cfg.loss {
            Loss::None => false,
            Loss::Random(p) => self.chance(p),
            Loss::Burst { rate, mean_burst } => {
                // Simple Gilbert: leave the bad state with r = 1/B (mean sojourn B packets),
                // enter it with p = rate * r / (1 - rate) (stationary P(bad) = rate).
                let r = 1.0 / mean_burst;
                let p = rate * r / (1.0 - rate);
                if self.bad {
                    if self.chance(r) {
                        self.bad = false;
                    }
                } else if self.chance(p) {
                    self.bad = true;
                }
                self.bad
            }
        }
    }

    /// The delay of one packet: delay plus a jitter sample, never below 0.
    fn sample_delay(&mut self) -> Nanos {
        let (d, j) = (self.cfg.delay as f64, self.cfg.jitter as f64);
        if j == 0.0 {
            return self.cfg.delay;
        }
        let x = match self.cfg.dist {
            Dist::Uniform => (2.0 * self.rng.unit() - 1.0) * j,
            Dist::Normal => self.rng.normal() * j,
            Dist::Pareto => {
                // Shape 3: std = xm * sqrt(3)/2, mean = 1.5 xm.
                let xm = 2.0 * j / 3f64.sqrt();
                xm / self.rng.unit().powf(1.0 / 3.0) - 1.5 * xm
            }
        };
        (d + x).max(0.0) as Nanos
    }

    /// A packet comes in at `now` (non-decreasing from call to call).
    pub fn push(&mut self, now: Nanos, packet: P)
    where
        P: Clone,
    {
        self.counters.packets_in += 1;
        self.counters.bytes_in += packet.as_ref().len() as u64;
        if self.in_outage(now) {
            self.counters.dropped_outage += 1;
            return;
        }
        if self.lost(now) {
            self.counters.dropped_loss += 1;
            return;
        }
        if self.chance(self.cfg.duplicate) {
            self.counters.duplicated += 1;
            self.schedule(now, packet.clone());
        }
        self.schedule(now, packet);
    }

    fn schedule(&mut self, now: Nanos, packet: P) {
        let len = packet.as_ref().len() as u64;
        if self.chance(self.cfg.reorder) {
            // netem: straight to the head of the queue, sent at once.
            return self.hold(now, packet);
        }
        let ready = now + self.sample_delay();
        let due = match &self.cfg.rate {
            Rate::Unlimited if self.cfg.keep_order => ready.max(self.last_due),
            Rate::Unlimited => ready,
            _ => {
                // The queue as it stands when this packet reaches it: those not yet gone.
                while self.queue.front().is_some_and(|&(d, _)| d <= now) {
                    let (_, cum) = self.queue.pop_front().expect("front exists");
                    self.queue_base = cum;
                }
                let gone = self.queue.partition_point(|&(d, _)| d <= ready);
                let before = if gone == 0 { self.queue_base } else { self.queue[gone - 1].1 };
                let (pkts, bytes) = ((self.queue.len() - gone) as u64, self.queue_cum - before);
                let full = match self.cfg.queue {
                    Some(QueueLimit::Packets(n)) => pkts >= n,
                    Some(QueueLimit::Bytes(n)) => bytes + len > n,
                    None => false,
                };
                if full {
                    self.counters.dropped_queue += 1;
                    return;
                }
                let start = ready.max(self.last_due);
                let due = match &self.cfg.rate {
                    Rate::Bits(bps) => start + (len * 8 * 1_000_000_000).div_ceil(*bps),
                    Rate::Trace(t) => {
                        let t = t.clone();
                        self.trace_due(&t, start, len)
                    }
                    Rate::Unlimited => unreachable!("handled above"),
                };
                self.queue_delay.record(start - ready);
                self.queue_delay_since.record(start - ready);
                self.queue_cum += len;
                self.queue.push_back((due, self.queue_cum));
                due
            }
        };
        self.last_due = self.last_due.max(due);
        self.hold(due, packet);
    }

    /// When the last byte of a packet of `len` bytes that may start at `start` is delivered.
    fn trace_due(&mut self, t: &Trace, start: Nanos, len: u64) -> Nanos {
        let n = t.ops.len() as u64;
        let at = |k: u64| self.start + (k / n) * t.period + t.ops[(k % n) as usize];
        if self.op_left == 0 || at(self.op) < start {
            // Unused opportunities are lost (mahimahi): the first one at or after `start`.
            let rel = start.saturating_sub(self.start);
            let (cycle, within) = (rel / t.period, rel % t.period);
            let i = t.ops.partition_point(|&o| o < within) as u64;
            self.op = cycle * n + i;
            self.op_left = TRACE_OPPORTUNITY_BYTES;
        }
        let mut left = len;
        while left > self.op_left as u64 {
            left -= self.op_left as u64;
            self.op += 1;
            self.op_left = TRACE_OPPORTUNITY_BYTES;
        }
        self.op_left -= left as u32;
        let due = at(self.op);
        if self.op_left == 0 {
            self.op += 1;
            self.op_left = TRACE_OPPORTUNITY_BYTES;
        }
        due
    }

    fn hold(&mut self, due: Nanos, packet: P) {
        self.seq += 1;
        self.held.push(Reverse(Slot { due, seq: self.seq, packet }));
    }

    /// When the next packet is due; None when none is held.
    pub fn next_due(&self) -> Option<Nanos> {
        self.held.peek().map(|Reverse(s)| s.due)
    }

    /// Packets in the bottleneck queue at `now` (waiting for or on the wire; rate or trace
    /// only).
    pub fn queued(&self, now: Nanos) -> usize {
        self.queue.len() - self.queue.partition_point(|&(d, _)| d <= now)
    }

    /// Packets held that were due at or before `now` (the emulator's backlog).
    pub fn overdue(&self, now: Nanos) -> usize {
        self.held.iter().filter(|Reverse(s)| s.due <= now).count()
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The next packet due at or before `now`, in order of due time (ties: arrival order).
    pub fn pop_due(&mut self, now: Nanos) -> Option<Departure<P>> {
        loop {
            if self.held.peek().is_none_or(|Reverse(s)| s.due > now) {
                return None;
            }
            let Reverse(s) = self.held.pop().expect("peeked");
            if self.in_outage(s.due) {
                self.counters.dropped_outage += 1;
                continue;
            }
            match self.highest_out {
                Some(h) if s.seq < h => self.counters.reordered += 1,
                _ => self.highest_out = Some(s.seq),
            }
            self.counters.packets_out += 1;
            self.counters.bytes_out += s.packet.as_ref().len() as u64;
            return Some(Departure { packet: s.packet, due: s.due });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const MS: Nanos = 1_000_000;
    const US: Nanos = 1_000;

    /// A packet: its number in the first 8 bytes, `len` bytes long.
    fn pkt(n: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len.max(8)];
        v[..8].copy_from_slice(&n.to_be_bytes());
        v
    }

    fn num(p: &[u8]) -> u64 {
        u64::from_be_bytes(p[..8].try_into().unwrap())
    }

    /// Pushes `n` packets of `len` bytes, one every `gap` from time 0, popping at each step;
    /// returns (number, arrival, departure) of every packet that left, in departure order.
    /// (packet number, arrival, departure).
    type Trip = (u64, Nanos, Nanos);

    fn drive(cfg: DirConfig, seed: u64, n: u64, gap: Nanos, len: usize) -> (Pipe<Vec<u8>>, Vec<Trip>) {
        let mut p = Pipe::new(cfg, seed, 0);
        let mut out = Vec::new();
        let collect = |p: &mut Pipe<Vec<u8>>, now: Nanos, out: &mut Vec<Trip>| {
            while let Some(d) = p.pop_due(now) {
                let i = num(&d.packet);
                out.push((i, i * gap, d.due));
            }
        };
        for i in 0..n {
            let now = i * gap;
            // Everything due before this arrival leaves first, at its own due time.
            while let Some(due) = p.next_due().filter(|&d| d < now) {
                collect(&mut p, due, &mut out);
            }
            p.push(now, pkt(i, len));
        }
        while let Some(due) = p.next_due() {
            collect(&mut p, due, &mut out);
        }
        (p, out)
    }

    #[test]
    fn fixed_delay_is_exact_and_keeps_order() {
        let cfg = DirConfig { delay: 20 * MS, ..Default::default() };
        let (p, out) = drive(cfg, 1, 1000, 100 * US, 100);
        assert_eq!(out.len(), 1000);
        for (k, &(i, at, due)) in out.iter().enumerate() {
            assert_eq!(i, k as u64);
            assert_eq!(due - at, 20 * MS);
        }
        assert_eq!(p.counters.packets_out, 1000);
        assert_eq!(p.counters.bytes_out, 100_000);
        assert_eq!(p.counters.reordered, 0);
        assert_eq!(p.counters.held(), 0);
    }

    #[test]
    fn nothing_leaves_before_its_time() {
        let mut p = Pipe::new(DirConfig { delay: 5 * MS, ..Default::default() }, 1, 0);
        p.push(0, pkt(0, 60));
        assert!(p.pop_due(5 * MS - 1).is_none());
        assert_eq!(p.next_due(), Some(5 * MS));
        assert_eq!(p.pop_due(5 * MS).unwrap().due, 5 * MS);
    }

    #[test]
    fn jitter_reorders_by_default_and_keeps_order_when_asked() {
        for dist in [Dist::Uniform, Dist::Normal, Dist::Pareto] {
            let cfg = DirConfig { delay: 10 * MS, jitter: 2 * MS, dist, ..Default::default() };
            let (p, out) = drive(cfg.clone(), 7, 5000, 100 * US, 100);
            assert_eq!(out.len(), 5000);
            assert!(p.counters.reordered > 100, "{dist:?}: {:?}", p.counters);
            // Departures are in order of due time whatever the arrival order.
            assert!(out.windows(2).all(|w| w[0].2 <= w[1].2));
            // The mean delay is the setting (uniform and normal: symmetric; pareto: shifted).
            let mean = out.iter().map(|&(_, a, d)| (d - a) as f64).sum::<f64>() / out.len() as f64;
            assert!((mean - 10e6).abs() < 0.1e6, "{dist:?}: mean {mean}");
            let sd =
                (out.iter().map(|&(_, a, d)| ((d - a) as f64 - mean).powi(2)).sum::<f64>() / out.len() as f64).sqrt();
            // Uniform ±j has sd j/sqrt(3); normal and pareto sd j.
            let want = if dist == Dist::Uniform { 2e6 / 3f64.sqrt() } else { 2e6 };
            assert!((sd / want - 1.0).abs() < 0.15, "{dist:?}: sd {sd} want {want}");

            let keep = DirConfig { keep_order: true, ..cfg };
            let (p, out) = drive(keep, 7, 5000, 100 * US, 100);
            assert_eq!(p.counters.reordered, 0);
            assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "{dist:?} keeps order");
            assert!(out.iter().all(|&(_, a, d)| d >= a), "never before its arrival");
        }
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other() {
        let cfg = DirConfig { delay: 10 * MS, jitter: 3 * MS, loss: Loss::Random(0.1), ..Default::default() };
        let (_, a) = drive(cfg.clone(), 42, 2000, 50 * US, 80);
        let (_, b) = drive(cfg.clone(), 42, 2000, 50 * US, 80);
        let (_, c) = drive(cfg, 43, 2000, 50 * US, 80);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn random_loss_within_three_sd() {
        let n = 200_000u64;
        let p = 0.015;
        let (pipe, out) = drive(DirConfig { loss: Loss::Random(p), ..Default::default() }, 3, n, US, 60);
        let lost = pipe.counters.dropped_loss as f64;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((lost - n as f64 * p).abs() < 3.0 * sd, "lost {lost}");
        assert_eq!(out.len() as u64 + pipe.counters.dropped_loss, n);
    }

    #[test]
    fn gilbert_elliott_rate_and_burst_length() {
        let n = 400_000u64;
        let cfg = DirConfig { loss: Loss::Burst { rate: 0.02, mean_burst: 4.0 }, ..Default::default() };
        let (pipe, out) = drive(cfg, 11, n, US, 60);
        let rate = pipe.counters.dropped_loss as f64 / n as f64;
        assert!((rate / 0.02 - 1.0).abs() < 0.1, "loss rate {rate}");
        // Bursts: runs of consecutive missing numbers.
        let mut seen = vec![false; n as usize];
        for &(i, _, _) in &out {
            seen[i as usize] = true;
        }
        let (mut bursts, mut lost, mut run) = (0u64, 0u64, 0u64);
        for s in seen.iter().chain(std::iter::once(&true)) {
            if !s {
                run += 1;
            } else if run > 0 {
                bursts += 1;
                lost += run;
                run = 0;
            }
        }
        let mean = lost as f64 / bursts as f64;
        assert!((mean / 4.0 - 1.0).abs() < 0.1, "mean burst {mean}");
        // Independent loss at the same rate has bursts of about 1/(1-p).
        let (_, out) = drive(DirConfig { loss: Loss::Random(0.02), ..Default::default() }, 11, n, US, 60);
        let kept: std::collections::HashSet<u64> = out.iter().map(|x| x.0).collect();
        let mut starts = 0;
        for i in 0..n {
            if !kept.contains(&i) && (i == 0 || kept.contains(&(i - 1))) {
                starts += 1;
            }
        }
        let mean_random = (n - kept.len() as u64) as f64 / starts as f64;
        assert!(mean_random < 1.1, "independent losses come alone: {mean_random}");
    }

    #[test]
    fn duplication_and_reorder_probabilities() {
        let n = 100_000u64;
        let cfg = DirConfig { delay: MS, duplicate: 0.05, reorder: 0.1, ..Default::default() };
        let (pipe, out) = drive(cfg, 5, n, 10 * US, 60);
        let c = pipe.counters;
        let sd = |p: f64| 3.0 * (n as f64 * p * (1.0 - p)).sqrt();
        assert!((c.duplicated as f64 - n as f64 * 0.05).abs() < sd(0.05), "{c:?}");
        assert_eq!(out.len() as u64, n + c.duplicated);
        // A packet sent at once overtakes the ~100 delayed ones before it: every one of those
        // leaves after it, so about 10 % of packets are counted as reordered... at least.
        let immediate = out.iter().filter(|&&(_, a, d)| d == a).count() as f64;
        let total = (n + c.duplicated) as f64;
        assert!((immediate - total * 0.1).abs() < 3.0 * (total * 0.09).sqrt(), "{immediate}");
        assert!(c.reordered > 0);
    }

    #[test]
    fn rate_paces_as_netem() {
        // 1 Mbit/s: a 125-byte packet takes 1 ms on the wire.
        let cfg = DirConfig { delay: 10 * MS, rate: Rate::Bits(1_000_000), ..Default::default() };
        let mut p: Pipe<Vec<u8>> = Pipe::new(cfg, 1, 0);
        for i in 0..10 {
            p.push(0, pkt(i, 125));
        }
        let dues: Vec<Nanos> = std::iter::from_fn(|| p.pop_due(u64::MAX).map(|d| d.due)).collect();
        let want: Vec<Nanos> = (1..=10).map(|k| 10 * MS + k * MS).collect();
        assert_eq!(dues, want);
        // The queueing delay of the k-th packet is (k - 1) ms.
        assert_eq!(p.queue_delay.count(), 10);
        assert!(p.queue_delay.max() >= 9 * MS - 10 * US);
        // After an idle gap the link starts afresh: tts = max(last_tts, now + delay) + len/rate.
        p.push(100 * MS, pkt(10, 125));
        assert_eq!(p.pop_due(u64::MAX).unwrap().due, 111 * MS);
    }

    #[test]
    fn queue_limits_drop_tail_in_packets_and_bytes() {
        // 8 kbit/s: a 100-byte packet takes 100 ms; a burst of 20 at once.
        for (limit, kept) in [(QueueLimit::Packets(5), 5), (QueueLimit::Bytes(750), 7)] {
            let cfg = DirConfig { rate: Rate::Bits(8_000), queue: Some(limit), ..Default::default() };
            let mut p: Pipe<Vec<u8>> = Pipe::new(cfg, 1, 0);
            for i in 0..20 {
                p.push(0, pkt(i, 100));
            }
            assert_eq!(p.counters.dropped_queue, 20 - kept, "{limit:?}");
            // The first packets were kept (drop-tail), in order.
            let out: Vec<u64> = std::iter::from_fn(|| p.pop_due(u64::MAX).map(|d| num(&d.packet))).collect();
            assert_eq!(out, (0..kept).collect::<Vec<_>>());
        }
        // As the queue drains, room comes back: one packet leaves every 100 ms.
        let cfg = DirConfig { rate: Rate::Bits(8_000), queue: Some(QueueLimit::Packets(2)), ..Default::default() };
        let mut p: Pipe<Vec<u8>> = Pipe::new(cfg, 1, 0);
        for i in 0..3 {
            p.push(0, pkt(i, 100));
        }
        assert_eq!(p.counters.dropped_queue, 1);
        p.push(100 * MS, pkt(3, 100));
        assert_eq!(p.counters.dropped_queue, 1, "the first has left at 100 ms");
        p.push(100 * MS, pkt(4, 100));
        assert_eq!(p.counters.dropped_queue, 2);
    }

    #[test]
    fn outages_drop_everything_in_their_window() {
        let cfg = DirConfig { delay: 10 * MS, outages: vec![(100 * MS, 200 * MS)], ..Default::default() };
        let (p, out) = drive(cfg, 1, 300, MS, 60);
        // Arrivals in [100, 200) ms are dropped at entry, and those that would leave in
        // [100, 200) ms (arrived in [90, 100)) when they would leave.
        let left: Vec<u64> = out.iter().map(|x| x.0).collect();
        let want: Vec<u64> = (0..90).chain(200..300).collect();
        assert_eq!(left, want);
        assert_eq!(p.counters.dropped_outage, 110);
    }

    #[test]
    fn loss_windows_confine_the_loss() {
        // 30 % loss in [1, 3) s only, packets every ms for 4 s.
        let cfg =
            DirConfig { loss: Loss::Random(0.3), loss_windows: vec![(1000 * MS, 3000 * MS)], ..Default::default() };
        let (p, out) = drive(cfg, 5, 4000, MS, 60);
        let passed = |a: u64, b: u64| out.iter().filter(|x| x.0 >= a && x.0 < b).count() as u64;
        assert_eq!(passed(0, 1000) + passed(3000, 4000), 2000, "nothing lost outside the window");
        let lost = 2000 - passed(1000, 3000);
        assert_eq!(lost, p.counters.dropped_loss);
        // 30 % of 2000 within three standard deviations (20.5).
        assert!((lost as f64 - 600.0).abs() < 62.0, "lost {lost}");
        // Gilbert-Elliott bursts inside a window too.
        let cfg = DirConfig {
            loss: Loss::Burst { rate: 0.5, mean_burst: 20.0 },
            loss_windows: vec![(1000 * MS, 2000 * MS)],
            ..Default::default()
        };
        let (p, out) = drive(cfg, 5, 3000, MS, 60);
        assert_eq!(out.iter().filter(|x| x.0 < 1000 || x.0 >= 2000).count(), 2000);
        assert!(p.counters.dropped_loss > 0);
    }

    #[test]
    fn trace_rate_follows_opportunities() {
        // Opportunities at 1, 1, 3 ms, period 3 ms: 3000 bytes at 1 ms... repeating.
        let t = Trace::parse("1\n1\n3\n", "t").unwrap();
        assert_eq!(t.period, 3 * MS);
        let cfg = DirConfig { rate: Rate::Trace(Arc::new(t)), ..Default::default() };
        let mut p: Pipe<Vec<u8>> = Pipe::new(cfg, 1, 0);
        for i in 0..5 {
            p.push(0, pkt(i, 1500));
        }
        let dues: Vec<Nanos> = std::iter::from_fn(|| p.pop_due(u64::MAX).map(|d| d.due)).collect();
        // 1, 1, 3, then the next period: 4, 4.
        assert_eq!(dues, vec![MS, MS, 3 * MS, 4 * MS, 4 * MS]);
        // Small packets share an opportunity; an idle link loses its unused opportunities.
        let t = Trace::parse("10\n20\n", "t").unwrap();
        let cfg = DirConfig { rate: Rate::Trace(Arc::new(t)), ..Default::default() };
        let mut p: Pipe<Vec<u8>> = Pipe::new(cfg, 1, 0);
        for i in 0..3 {
            p.push(0, pkt(i, 500));
        }
        p.push(0, pkt(3, 600));
        p.push(55 * MS, pkt(4, 100));
        let dues: Vec<Nanos> = std::iter::from_fn(|| p.pop_due(u64::MAX).map(|d| d.due)).collect();
        assert_eq!(dues, vec![10 * MS, 10 * MS, 10 * MS, 20 * MS, 60 * MS]);
        // Over many periods, the mean rate is the trace's.
        let t = Arc::new(Trace::parse(&(1..=100).map(|i| format!("{i}\n")).collect::<String>(), "t").unwrap());
        assert!((t.mean_bps() - 12e6).abs() < 1.0);
        let cfg = DirConfig { rate: Rate::Trace(t), ..Default::default() };
        let (p, out) = drive(cfg, 1, 20_000, 50 * US, 1000);
        let secs = out.last().unwrap().2 as f64 / 1e9;
        let bps = p.counters.bytes_out as f64 * 8.0 / secs;
        assert!((bps / 12e6 - 1.0).abs() < 0.02, "{bps}");
    }

    #[test]
    fn trace_errors_name_the_line() {
        assert!(Trace::parse("1\nx\n", "f").unwrap_err().starts_with("f:2:"));
        assert!(Trace::parse("5\n3\n", "f").unwrap_err().starts_with("f:2:"));
        assert!(Trace::parse("0\n", "f").is_err());
        assert!(Trace::parse("", "f").is_err());
    }
}
