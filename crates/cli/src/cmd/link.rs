//! `volley link`: runs a command in a network namespace whose only way out is an emulated link.

use clap::Args;
use volley_link::{spec, Link, LinkReport};
use volley_metrics::{Histogram, LatencySummary, LinkDirection, LinkInfo, LinkSecond, LinkSecondDir, SecondLatency};

use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Impairments (items applied in order; a later one replaces an earlier setting):
  PROFILE               a built-in (4g, lossy-4g, 3g) or a TOML file (docs/link.md)
  KEY=VALUE[,...]       both directions: the delay is added each way (RTT + 2 x delay)
  up:KEY=VALUE[,...]    namespace to host only      down:KEY=VALUE[,...]  host to namespace
  Keys: delay=20ms jitter=2ms dist=uniform|normal|pareto order=reorder|keep loss=0.5%
        burst=4 (Gilbert-Elliott: mean burst length) dup=1% reorder=1% rate=10mbit
        queue=100 (packets) queue-bytes=64000 outage=5s-7s trace=FILE (mahimahi mm-link)
  The built-ins are seeds/001's figures on the way up (as tc netem on the client's egress):
  4g +53.3 ms, 1 ms jitter, 0.5 % loss; lossy-4g the same with 1.5 %; 3g +150 ms, 8 ms, 2.5 %.

The command sees the host at $VOLLEY_LINK_HOST (a server on the host must listen there or on
0.0.0.0) and has $VOLLEY_LINK_LOCAL itself; over IPv6, $VOLLEY_LINK_HOST6 and
$VOLLEY_LINK_LOCAL6 (a server listening on :: has both). Lines from volley link go to stderr.

Examples:
  volley serve --listen 0.0.0.0 --port 5353 &
  volley link delay=20ms -- sh -c 'volley query udp://$VOLLEY_LINK_HOST:5353 example.test'
  volley link 4g --seed 7 -- sh -c 'kdig @$VOLLEY_LINK_HOST -p 5353 example.test'
  volley link up:rate=1mbit,queue=50 down:loss=1%,burst=3 -- sh -c 'dnsperf -s $VOLLEY_LINK_HOST ...'

Exit status: the command's (128+N when killed by signal N); 2 bad input or no link possible.";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct LinkArgs {
    /// Impairments: profiles and KEY=VALUE settings (see below); none: a transparent link.
    #[arg(value_name = "IMPAIRMENT")]
    pub impairments: Vec<String>,

    /// Seed of every random choice (loss, jitter, ...): the same seed repeats a run packet for
    /// packet [default: a random one, printed].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// How packets cross between the namespace and the host: tun (a TUN device on each side)
    /// or xdp (veth pairs, the forwarder's ends read and written through AF_XDP sockets:
    /// cheaper per packet; needs AF_XDP and XDP in the kernel) [default: $VOLLEY_LINK_DEVICE,
    /// else tun]. `--link` on run, bench, limit and query takes $VOLLEY_LINK_DEVICE.
    #[arg(long, value_name = "tun|xdp")]
    pub device: Option<String>,

    /// The command to run inside the link's namespace, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn run(a: LinkArgs) -> CliResult {
    let cfg = spec::parse(&a.impairments).map_err(CliError::usage)?;
    let seed = a.seed.unwrap_or_else(volley_link::rng::random_seed);
    let device = match &a.device {
        Some(d) => d.parse::<volley_link::Device>(),
        None => volley_link::Device::from_env(),
    }
    .map_err(|e| CliError::usage(format!("--device: {e}")))?;
    let link = Link::start_on(device, cfg.clone(), seed).map_err(CliError::usage)?;
    eprintln!(
        "volley link: host {} ($VOLLEY_LINK_HOST), namespace {} ($VOLLEY_LINK_LOCAL){}, seed {seed}, device {}",
        link.addrs.host,
        link.addrs.local,
        match (link.addrs.host6, link.addrs.local6) {
            (Some(h), Some(l)) => format!("; host {h} ($VOLLEY_LINK_HOST6), namespace {l} ($VOLLEY_LINK_LOCAL6)"),
            _ => String::new(),
        },
        device.name()
    );
    eprintln!("volley link: up: {}; down: {}", cfg.up.describe(), cfg.down.describe());
    let status = link.run_command(&a.command);
    let report = link.finish().map_err(CliError::failure)?;
    let status = status.map_err(CliError::usage)?;
    print_report(&report);
    // A run behind the link says it in its own warnings; a command's run here.
    if let Some(w) = report.host.as_ref().and_then(volley_metrics::host::steal_warning) {
        eprintln!("volley link: warning: {w}");
    }
    let code = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    std::process::exit(code);
}

/// `--link SPEC` of `volley run`: the plan's targets (see [`behind_link`]).
pub fn plan_behind_link(spec: &str, seed: Option<u64>, plan: &mut volley_engine::Plan) -> CliResult<BehindLink> {
    let link = start_link(spec, seed)?;
    link.reach_plan(plan);
    link.enter()?;
    Ok(link)
}

/// `--link SPEC`: starts the link, reaches loopback targets at its host end, and moves the
/// calling thread (and so every thread it starts) into the link's namespace.
pub fn behind_link(
    spec: &str,
    seed: Option<u64>,
    targets: Vec<&mut volley_transport::Target>,
) -> CliResult<BehindLink> {
    let link = start_link(spec, seed)?;
    link.reach(targets);
    link.enter()?;
    Ok(link)
}

/// Starts the link of `--link SPEC` (the calling thread stays on the host: see
/// [`BehindLink::enter`]) and says so on stderr.
pub fn start_link(spec: &str, seed: Option<u64>) -> CliResult<BehindLink> {
    let items: Vec<String> = spec.split_whitespace().map(str::to_string).collect();
    let cfg = spec::parse(&items).map_err(|e| CliError::usage(format!("--link: {e}")))?;
    let seed = seed.unwrap_or_else(volley_link::rng::random_seed);
    let link = Link::start(cfg.clone(), seed).map_err(|e| CliError::usage(format!("--link: {e}")))?;
    eprintln!(
        "volley link: host {}{}, namespace {}, seed {seed}, device {}; up: {}; down: {}",
        link.addrs.host,
        link.addrs.host6.map_or(String::new(), |h| format!(" and {h}")),
        link.addrs.local,
        link.device.name(),
        cfg.up.describe(),
        cfg.down.describe()
    );
    Ok(BehindLink {
        link,
        spec: spec.to_string(),
        up: cfg.up.describe(),
        down: cfg.down.describe(),
        part: Part::default(),
        prev: None,
    })
}

/// A run's link, with what its results say of it.
pub struct BehindLink {
    link: Link,
    spec: String,
    up: String,
    down: String,
    /// Since the start of the current part (a run; in `volley bench`, a transport's run).
    part: Part,
    /// The last sample's counters (the next second's figures are the difference).
    prev: Prev,
}

/// What the link did over a part of its life, from its samples.
struct Part {
    /// The counters at the part's start.
    base: (volley_link::Counters, volley_link::Counters),
    lateness: Histogram,
    up_queue_delay: Histogram,
    down_queue_delay: Histogram,
    cpu0: std::time::Duration,
    series: Vec<LinkSecond>,
}

impl Default for Part {
    fn default() -> Part {
        Part {
            base: Default::default(),
            lateness: Histogram::new(3),
            up_queue_delay: Histogram::new(3),
            down_queue_delay: Histogram::new(3),
            cpu0: Default::default(),
            series: Vec::new(),
        }
    }
}

impl BehindLink {
    /// The link's host end (where a target for the namespace listens).
    pub fn host(&self) -> std::net::IpAddr {
        std::net::IpAddr::V4(self.link.addrs.host)
    }

    /// The error of a target that could not be reached through the link (refused at the
    /// link's host end, or no route from the namespace): one line that names the link and says
    /// where the server must listen. Other errors as they are.
    pub fn unreachable(&self, e: CliError) -> CliError {
        let host6 = self.link.addrs.host6.map(std::net::IpAddr::V6);
        match unreachable_through(&e.message, &self.spec, self.host(), host6) {
            Some(message) => CliError::usage(message),
            None => e,
        }
    }

    /// Loopback targets (127.0.0.1, ::1, localhost's addresses are the namespace's own) are
    /// reached at the link's host end, once: ::1 at its IPv6 end where the link has one.
    pub fn reach(&self, targets: Vec<&mut volley_transport::Target>) {
        let host = self.host();
        let host6 = self.link.addrs.host6.map(std::net::IpAddr::V6);
        let to_host = |a: &mut std::net::SocketAddr| {
            if a.ip().is_loopback() {
                let h = if a.is_ipv6() { host6.unwrap_or(host) } else { host };
                *a = std::net::SocketAddr::new(h, a.port());
            }
        };
        for t in targets {
            to_host(&mut t.addr);
            let mut seen = Vec::new();
            for mut a in std::mem::take(&mut t.addrs) {
                to_host(&mut a);
                if !seen.contains(&a) {
                    seen.push(a);
                }
            }
            t.addrs = seen;
        }
    }

    /// [`BehindLink::reach`] for every target of a plan.
    pub fn reach_plan(&self, plan: &mut volley_engine::Plan) {
        let mut targets = vec![&mut plan.target];
        if let volley_engine::Load::Clients(c) = &mut plan.load {
            targets.extend(c.groups.iter_mut().map(|g| &mut g.target));
        }
        self.reach(targets);
    }

    /// Moves the calling thread into the link's namespace: the threads it starts, and the
    /// sockets they make, are born there.
    pub fn enter(&self) -> CliResult {
        self.link.enter().map_err(|e| CliError::usage(format!("--link: cannot enter the link's namespace: {e}")))
    }

    fn sample(&mut self) -> Option<volley_link::LinkSample> {
        let s = self.link.sample()?;
        self.part.lateness.merge(&s.lateness);
        self.part.up_queue_delay.merge(&s.up_queue_delay);
        self.part.down_queue_delay.merge(&s.down_queue_delay);
        Some(s)
    }

    /// A new part starts (in `volley bench`, each transport's run): its figures from here.
    pub fn mark(&mut self) {
        let s = self.link.sample();
        self.part = Part::default();
        if let Some(s) = s {
            self.part.base = (s.up, s.down);
            self.part.cpu0 = s.cpu;
            self.prev = Some((s.up, s.down));
        }
    }

    /// The end of second `second` of the run: the link's figures of that second.
    pub fn tick(&mut self, second: u64) {
        let Some(s) = self.sample() else { return };
        push_second(&mut self.part, &mut self.prev, second, &s);
    }

    /// The results' `link` of the part so far (since [`BehindLink::mark`]), and its warnings;
    /// the link goes on.
    pub fn part(&mut self) -> (LinkInfo, Vec<String>) {
        let s = self.sample();
        if let Some(s) = &s {
            push_rest(&mut self.part, &mut self.prev, s);
        }
        let (mut up, mut down) = s.as_ref().map(|s| (s.up, s.down)).unwrap_or_default();
        let sub = |c: &mut volley_link::Counters, b: &volley_link::Counters| {
            c.packets_in -= b.packets_in;
            c.bytes_in -= b.bytes_in;
            c.packets_out -= b.packets_out;
            c.bytes_out -= b.bytes_out;
            c.dropped_loss -= b.dropped_loss;
            c.dropped_queue -= b.dropped_queue;
            c.dropped_outage -= b.dropped_outage;
            c.reordered -= b.reordered;
            c.duplicated -= b.duplicated;
        };
        let held = up.held() + down.held();
        sub(&mut up, &self.part.base.0);
        sub(&mut down, &self.part.base.1);
        let p = &self.part;
        let info = LinkInfo {
            spec: self.spec.clone(),
            seed: self.link.seed,
            up: direction(self.up.clone(), &up, &p.up_queue_delay),
            down: direction(self.down.clone(), &down, &p.down_queue_delay),
            lateness: LatencySummary::of(&p.lateness),
            held_at_end: held,
            forwarder_cpu_s: s.as_ref().map_or(0.0, |s| s.cpu.saturating_sub(p.cpu0).as_secs_f64()),
            realtime: s.as_ref().is_some_and(|s| s.realtime),
            series: p.series.clone(),
        };
        let warnings = warnings(&p.lateness, &p.series);
        (info, warnings)
    }

    /// Stops the link, prints its lines on stderr and returns the results' `link` (over the
    /// link's whole life) and the warnings of an emulator that fell behind.
    pub fn finish(self) -> CliResult<(LinkInfo, Vec<String>)> {
        let BehindLink { link, spec, up, down, mut part, mut prev } = self;
        let seed = link.seed;
        let r = link.finish().map_err(CliError::failure)?;
        push_rest(&mut part, &mut prev, &r.last);
        print_report(&r);
        let info = LinkInfo {
            spec,
            seed,
            up: direction(up, &r.up, &r.up_queue_delay),
            down: direction(down, &r.down, &r.down_queue_delay),
            lateness: LatencySummary::of(&r.lateness),
            held_at_end: r.held_at_end,
            forwarder_cpu_s: r.cpu.as_secs_f64(),
            realtime: r.realtime,
            series: part.series,
        };
        let warnings = warnings(&r.lateness, &info.series);
        Ok((info, warnings))
    }
}

type Prev = Option<(volley_link::Counters, volley_link::Counters)>;

/// Adds the row of `second` (from the previous sample, `prev`, to `s`) to the part's series.
fn push_second(part: &mut Part, prev: &mut Prev, second: u64, s: &volley_link::LinkSample) {
    let (pu, pd) = prev.unwrap_or_default();
    part.series.push(second_of(second, s, &pu, &pd));
    *prev = Some((s.up, s.down));
}

/// What the link did after the last whole second (the run's end: its last answers and
/// closing packets), as one more row, so that the rows add up to the totals; none where
/// nothing happened.
fn push_rest(part: &mut Part, prev: &mut Prev, s: &volley_link::LinkSample) {
    let (pu, pd) = prev.unwrap_or_default();
    if (s.up, s.down) == (pu, pd) && s.lateness.is_empty() {
        return;
    }
    let second = part.series.last().map_or(0, |l| l.second + 1);
    push_second(part, prev, second, s);
}

/// The row of `second`: what the link did from the sample of counters `pu`, `pd` (up, down)
/// to the sample `s`.
fn second_of(
    second: u64,
    s: &volley_link::LinkSample,
    pu: &volley_link::Counters,
    pd: &volley_link::Counters,
) -> LinkSecond {
    let dir = |c: &volley_link::Counters, p: &volley_link::Counters, queued: u64, q: &Histogram| LinkSecondDir {
        packets_in: c.packets_in - p.packets_in,
        bytes_in: c.bytes_in - p.bytes_in,
        packets_out: c.packets_out - p.packets_out,
        bytes_out: c.bytes_out - p.bytes_out,
        dropped_loss: c.dropped_loss - p.dropped_loss,
        dropped_queue: c.dropped_queue - p.dropped_queue,
        dropped_outage: c.dropped_outage - p.dropped_outage,
        queued,
        queue_delay_p99_ns: q.quantile(0.99),
        reordered: c.reordered - p.reordered,
        duplicated: c.duplicated - p.duplicated,
    };
    // The second's lateness at the per-second rows' precision (2 significant figures).
    let mut late = Histogram::new(2);
    for (v, n) in s.lateness.to_sparse().iter() {
        late.record_n(v, n);
    }
    LinkSecond {
        second,
        up: dir(&s.up, pu, s.up_queued, &s.up_queue_delay),
        down: dir(&s.down, pd, s.down_queued, &s.down_queue_delay),
        // At the row's precision: the p99 of merged rows is their merged histogram's.
        lateness_p99_ns: late.quantile(0.99),
        lateness_max_ns: s.lateness.max(),
        overdue: s.overdue,
        lateness: Some(SecondLatency::of(&late)),
    }
}

fn direction(settings: String, c: &volley_link::Counters, q: &Histogram) -> LinkDirection {
    LinkDirection { settings, counts: *c, queue_delay: (!q.is_empty()).then(|| LatencySummary::of(q)) }
}

/// [`BehindLink::unreachable`]'s line for the probe's error `msg` behind the link of `spec`
/// whose host end is `host` (and `host6`); None when `msg` is not about reaching the target.
fn unreachable_through(
    msg: &str,
    spec: &str,
    host: std::net::IpAddr,
    host6: Option<std::net::IpAddr>,
) -> Option<String> {
    let lower = msg.to_ascii_lowercase();
    let refused = ["connection refused", "port unreachable", "os error 111"].iter().any(|p| lower.contains(p));
    let no_route = ["network is unreachable", "no route to host", "os error 101", "os error 113"]
        .iter()
        .any(|p| lower.contains(p));
    let hosts = match host6 {
        Some(h6) => format!("{host} (or {h6})"),
        None => host.to_string(),
    };
    let listen = format!("a server on this host must listen on 0.0.0.0 (or ::) or on {hosts}");
    if refused {
        Some(format!(
            "--link '{spec}': {msg}: the target is reached through the link at its host end {hosts}, where nothing \
             listens; {listen} (one on 127.0.0.1 only is out of the link's reach)"
        ))
    } else if no_route {
        Some(format!(
            "--link '{spec}': {msg}: behind the link only its host end {hosts} can be reached; {listen}, and be given \
             as 127.0.0.1 or {host}"
        ))
    } else {
        None
    }
}

/// The warnings of a run whose emulator fell behind: its lateness, or its backlog of due
/// packets growing over the last seconds.
fn warnings(lateness: &Histogram, series: &[LinkSecond]) -> Vec<String> {
    let mut w: Vec<String> = lateness_warning(lateness).into_iter().collect();
    if let Some(g) = backlog_growing(series) {
        w.push(g);
    }
    w
}

/// The backlog (packets held past their due time) grew over the last three seconds, to 100
/// or more: the emulator could not keep up.
fn backlog_growing(series: &[LinkSecond]) -> Option<String> {
    let last: Vec<u64> = series.iter().rev().take(3).map(|s| s.overdue).collect();
    (last.len() == 3 && last[0] > last[1] && last[1] > last[2] && last[0] >= 100).then(|| {
        format!(
            "the link's emulator fell behind: {} packets past their due time and growing at the end; latencies include it",
            last[0]
        )
    })
}

/// The warning a run carries when the emulator fell behind.
pub fn lateness_warning(lateness: &Histogram) -> Option<String> {
    let p99 = lateness.quantile(0.99);
    (p99 > 100_000).then(|| {
        format!("the link's emulator fell behind: p99 lateness {} (above 100us); latencies include it", us(p99))
    })
}

fn us(ns: u64) -> String {
    format!("{:.0}us", ns as f64 / 1e3)
}

fn spread(h: &Histogram) -> String {
    format!("p50 {} p99 {} max {}", us(h.quantile(0.5)), us(h.quantile(0.99)), us(h.max()))
}

pub fn print_report(r: &LinkReport) {
    for (name, c, q) in [("up  ", &r.up, &r.up_queue_delay), ("down", &r.down, &r.down_queue_delay)] {
        let mut line = format!(
            "volley link: {name} in {} pkts {} B, out {} pkts {} B, dropped: loss {} queue {} outage {}, reordered {}, duplicated {}",
            c.packets_in,
            c.bytes_in,
            c.packets_out,
            c.bytes_out,
            c.dropped_loss,
            c.dropped_queue,
            c.dropped_outage,
            c.reordered,
            c.duplicated
        );
        if !q.is_empty() {
            line += &format!(", queueing delay {}", spread(q));
        }
        eprintln!("{line}");
    }
    let prio = if r.realtime { "real-time priority" } else { "ordinary priority" };
    let n = r.lateness.count();
    let mut line = format!("volley link: lateness {} over {n} packets ({prio})", spread(&r.lateness));
    line += &format!(", forwarder CPU {:.3}s", r.cpu.as_secs_f64());
    if n > 0 {
        line += &format!(" ({:.2}us per packet)", r.cpu.as_secs_f64() * 1e6 / n as f64);
    }
    if r.held_at_end > 0 {
        line += &format!(", {} still held at the end", r.held_at_end);
    }
    if r.write_errors > 0 {
        line += &format!(", {} refused by the kernel", r.write_errors);
    }
    if let Some(h) = r.host.filter(|h| h.steal_s > 0.0) {
        line += &format!(", host steal {:.1}% of {} CPUs", h.steal_share * 100.0, h.cpus);
    }
    if let Some(w) = lateness_warning(&r.lateness) {
        line += &format!(" (warning: {w})");
    }
    eprintln!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A histogram of `n` values of `ns` each, and `tail` values of `tail_ns`.
    fn lateness(n: u64, ns: u64, tail: u64, tail_ns: u64) -> Histogram {
        let mut h = Histogram::new(3);
        h.record_n(ns, n);
        if tail > 0 {
            h.record_n(tail_ns, tail);
        }
        h
    }

    #[test]
    fn lateness_warns_just_above_100us_at_p99_and_not_just_below() {
        // Every packet as late: p99 is that lateness.
        let w = lateness_warning(&lateness(1000, 101_000, 0, 0)).expect("p99 101 us warns");
        assert!(w.contains("fell behind") && w.contains("p99 lateness 101us"), "{w}");
        assert_eq!(lateness_warning(&lateness(1000, 99_000, 0, 0)), None, "p99 99 us");
        // p99 is what counts, not the tail beyond it: 1.5 % at 150 us warns, 0.5 % at 10 ms
        // does not.
        assert!(lateness_warning(&lateness(985, 10_000, 15, 150_000)).is_some());
        assert_eq!(lateness_warning(&lateness(995, 10_000, 5, 10_000_000)), None);
        assert_eq!(lateness_warning(&Histogram::new(3)), None, "no packets");
    }

    fn series(overdue: &[u64]) -> Vec<LinkSecond> {
        overdue
            .iter()
            .enumerate()
            .map(|(i, &o)| LinkSecond { second: i as u64, overdue: o, ..Default::default() })
            .collect()
    }

    #[test]
    fn a_backlog_growing_over_the_last_3_seconds_warns_and_one_that_is_not_does_not() {
        let w = backlog_growing(&series(&[0, 0, 50, 120, 400])).expect("growing to 400 over 3 s");
        assert!(w.contains("400 packets past their due time"), "{w}");
        // Grew, but not over each of the last three seconds.
        assert_eq!(backlog_growing(&series(&[50, 120, 400, 400])), None, "steady at the end");
        assert_eq!(backlog_growing(&series(&[50, 400, 120, 300])), None, "fell in between");
        // Growing, but small: under 100 at the end.
        assert_eq!(backlog_growing(&series(&[10, 40, 99])), None);
        assert!(backlog_growing(&series(&[10, 40, 100])).is_some(), "100 is enough");
        // Fewer than three seconds: no verdict.
        assert_eq!(backlog_growing(&series(&[100, 1000])), None);
        assert_eq!(backlog_growing(&[]), None);
    }

    #[test]
    fn an_unreachable_target_names_the_link_and_where_to_listen() {
        let host: std::net::IpAddr = "10.213.7.1".parse().unwrap();
        for msg in [
            "nothing is listening at udp://10.213.7.1:53 (connection refused)",
            "nothing is listening at quic://10.213.7.1:853 (ICMP port unreachable)",
            "cannot connect to 10.213.7.1:853: Connection refused (os error 111)",
        ] {
            let m = unreachable_through(msg, "delay=5ms", host, None).unwrap_or_else(|| panic!("{msg}"));
            assert!(m.starts_with("--link 'delay=5ms': ") && m.contains(msg), "{m}");
            assert!(m.contains("listen on 0.0.0.0") && m.contains("10.213.7.1") && m.contains("127.0.0.1"), "{m}");
            assert!(!m.contains('\n'), "one line: {m}");
        }
        let m = unreachable_through(
            "cannot reach udp://192.0.2.7:53: Network is unreachable (os error 101)",
            "4g",
            host,
            None,
        )
        .unwrap();
        assert!(m.contains("only its host end 10.213.7.1 can be reached") && m.contains("0.0.0.0"), "{m}");
        let six = Some("fd76:6c69:6e6b::1c:1".parse().unwrap());
        let m = unreachable_through("connection refused", "4g", host, six).unwrap();
        assert!(m.contains("10.213.7.1 (or fd76:6c69:6e6b::1c:1)"), "{m}");
        // Not about reaching the target: as it was.
        assert_eq!(unreachable_through("invalid name 'a..b'", "4g", host, None), None);
        assert_eq!(unreachable_through("certificate verify failed", "4g", host, None), None);
    }

    #[test]
    fn warnings_carry_both_causes() {
        let w = warnings(&lateness(1000, 500_000, 0, 0), &series(&[200, 300, 400]));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("p99 lateness") && w[1].contains("growing"), "{w:?}");
        assert!(warnings(&lateness(1000, 5_000, 0, 0), &series(&[400, 300, 200])).is_empty());
    }
}
