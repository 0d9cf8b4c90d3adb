//! What a link does to the packets of one direction: the settings, as data.

use std::sync::Arc;

/// Nanoseconds (virtual or monotonic time, durations).
pub type Nanos = u64;

/// The shape of the jitter around the delay (netem's `distribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dist {
    /// Uniform in `delay ± jitter` (netem's default without a table).
    #[default]
    Uniform,
    /// Normal, standard deviation `jitter`.
    Normal,
    /// Pareto (shape 3), shifted to mean `delay`, standard deviation `jitter`: a long right tail.
    Pareto,
}

impl Dist {
    pub fn name(self) -> &'static str {
        match self {
            Dist::Uniform => "uniform",
            Dist::Normal => "normal",
            Dist::Pareto => "pareto",
        }
    }
}

/// Which packets are lost.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Loss {
    #[default]
    None,
    /// Each packet independently with this probability (0..=1).
    Random(f64),
    /// Gilbert-Elliott (the simple Gilbert model: every packet in the bad state is lost, none in
    /// the good one), with this long-run loss rate (0..1) and mean burst length in packets (>= 1).
    Burst { rate: f64, mean_burst: f64 },
}

/// A bottleneck's capacity.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Rate {
    #[default]
    Unlimited,
    /// Bits per second (> 0).
    Bits(u64),
    /// Delivery opportunities from a mahimahi `mm-link` trace.
    Trace(Arc<Trace>),
}

/// A mahimahi `mm-link` trace: each line is one delivery opportunity of 1500 bytes at that
/// millisecond; the trace repeats after its last line.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Opportunity times within one period, nanoseconds, non-decreasing.
    pub ops: Vec<Nanos>,
    /// The period: the last line's time (> 0).
    pub period: Nanos,
}

/// Bytes one trace opportunity delivers (mahimahi's MTU-sized opportunity).
pub const TRACE_OPPORTUNITY_BYTES: u32 = 1500;

impl Trace {
    /// Parses mahimahi's format: one integer millisecond per line, non-decreasing, the last
    /// above 0. Errors are `ORIGIN:LINE: message`.
    pub fn parse(text: &str, origin: &str) -> Result<Trace, String> {
        let mut ops = Vec::new();
        let mut last = 0u64;
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() {
                continue;
            }
            let ms: u64 =
                l.parse().map_err(|_| format!("{origin}:{}: '{l}' is not a whole number of milliseconds", i + 1))?;
            if ms < last {
                return Err(format!("{origin}:{}: {ms} comes before the previous line's {last}", i + 1));
            }
            if ms > 1_000_000_000 {
                return Err(format!("{origin}:{}: {ms} ms is beyond any trace's length", i + 1));
            }
            last = ms;
            ops.push(ms * 1_000_000);
        }
        if ops.is_empty() || last == 0 {
            return Err(format!("{origin}: a trace needs at least one line above 0 ms"));
        }
        Ok(Trace { ops, period: last * 1_000_000 })
    }

    /// Mean capacity in bits per second.
    pub fn mean_bps(&self) -> f64 {
        self.ops.len() as f64 * TRACE_OPPORTUNITY_BYTES as f64 * 8.0 / (self.period as f64 / 1e9)
    }
}

/// The bottleneck queue's limit (drop-tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    Packets(u64),
    Bytes(u64),
}

/// Everything one direction does, in the order it does it (see `Pipe`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DirConfig {
    /// Windows `[from, to)` after the link's start in which every packet is dropped.
    pub outages: Vec<(Nanos, Nanos)>,
    pub loss: Loss,
    /// Windows `[from, to)` after the link's start outside which `loss` does not apply; empty:
    /// it applies all the time.
    pub loss_windows: Vec<(Nanos, Nanos)>,
    /// Probability (0..=1) that a packet is sent twice.
    pub duplicate: f64,
    /// One-way delay.
    pub delay: Nanos,
    /// Jitter around the delay (see `Dist`).
    pub jitter: Nanos,
    pub dist: Dist,
    /// Jitter keeps the packets' order (each leaves no earlier than the one before); netem's
    /// default is false: jitter reorders.
    pub keep_order: bool,
    /// Probability (0..=1) that a packet skips the delay and leaves at once (netem's `reorder`).
    pub reorder: f64,
    pub rate: Rate,
    /// The bottleneck queue's limit; None: unbounded (specs always give a rate one, see
    /// `spec::DEFAULT_QUEUE`).
    pub queue: Option<QueueLimit>,
}

impl DirConfig {
    /// True when this direction changes nothing.
    pub fn is_transparent(&self) -> bool {
        *self == DirConfig::default()
    }

    /// A one-line description (`delay 20ms jitter 1ms uniform loss 0.5%`, or `none`).
    pub fn describe(&self) -> String {
        let mut p = Vec::new();
        let ms = |n: Nanos| format!("{}ms", fmt_num(n as f64 / 1e6));
        let pct = |f: f64| format!("{}%", fmt_num(f * 100.0));
        for (a, b) in &self.outages {
            p.push(format!("outage {}s-{}s", fmt_num(*a as f64 / 1e9), fmt_num(*b as f64 / 1e9)));
        }
        match self.loss {
            Loss::None => {}
            Loss::Random(r) => p.push(format!("loss {}", pct(r))),
            Loss::Burst { rate, mean_burst } => {
                p.push(format!("loss {} in bursts of {}", pct(rate), fmt_num(mean_burst)))
            }
        }
        if self.loss != Loss::None && !self.loss_windows.is_empty() {
            let w: Vec<String> = self
                .loss_windows
                .iter()
                .map(|(a, b)| format!("{}s-{}s", fmt_num(*a as f64 / 1e9), fmt_num(*b as f64 / 1e9)))
                .collect();
            if let Some(last) = p.last_mut() {
                last.push_str(&format!(" during {}", w.join(" and ")));
            }
        }
        if self.duplicate > 0.0 {
            p.push(format!("duplicate {}", pct(self.duplicate)));
        }
        if self.delay > 0 {
            p.push(format!("delay {}", ms(self.delay)));
        }
        if self.jitter > 0 {
            let order = if self.keep_order { "keeps order" } else { "reorders" };
            p.push(format!("jitter {} {} ({order})", ms(self.jitter), self.dist.name()));
        }
        if self.reorder > 0.0 {
            p.push(format!("reorder {}", pct(self.reorder)));
        }
        match &self.rate {
            Rate::Unlimited => {}
            Rate::Bits(b) => p.push(format!("rate {}", fmt_rate(*b as f64))),
            Rate::Trace(t) => p.push(format!("rate from a trace (mean {})", fmt_rate(t.mean_bps()))),
        }
        match self.queue {
            None if !matches!(self.rate, Rate::Unlimited) => p.push("queue unbounded".into()),
            None => {}
            Some(QueueLimit::Packets(n)) => p.push(format!("queue {n} packets")),
            Some(QueueLimit::Bytes(n)) => p.push(format!("queue {n} bytes")),
        }
        if p.is_empty() {
            "none".into()
        } else {
            p.join(", ")
        }
    }
}

/// Both directions: `up` from the namespace (the generator) towards the host (the target),
/// `down` back.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkConfig {
    pub up: DirConfig,
    pub down: DirConfig,
}

fn fmt_num(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

fn fmt_rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{}Gbit/s", fmt_num(bps / 1e9))
    } else if bps >= 1e6 {
        format!("{}Mbit/s", fmt_num(bps / 1e6))
    } else if bps >= 1e3 {
        format!("{}kbit/s", fmt_num(bps / 1e3))
    } else {
        format!("{}bit/s", fmt_num(bps))
    }
}
