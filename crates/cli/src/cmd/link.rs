//! `volley link`: runs a command in a network namespace whose only way out is an emulated link.

use clap::Args;
use volley_link::{spec, Link, LinkReport};
use volley_metrics::{Histogram, LatencySummary, LinkDirection, LinkInfo};

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
0.0.0.0) and has $VOLLEY_LINK_LOCAL itself. Lines from volley link go to stderr.

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

    /// The command to run inside the link's namespace, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn run(a: LinkArgs) -> CliResult {
    let cfg = spec::parse(&a.impairments).map_err(CliError::usage)?;
    let seed = a.seed.unwrap_or_else(volley_link::rng::random_seed);
    let link = Link::start(cfg.clone(), seed).map_err(CliError::usage)?;
    eprintln!(
        "volley link: host {} ($VOLLEY_LINK_HOST), namespace {} ($VOLLEY_LINK_LOCAL), seed {seed}",
        link.addrs.host, link.addrs.local
    );
    eprintln!("volley link: up: {}; down: {}", cfg.up.describe(), cfg.down.describe());
    let status = link.run_command(&a.command);
    let report = link.finish().map_err(CliError::failure)?;
    let status = status.map_err(CliError::usage)?;
    print_report(&report);
    let code = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    std::process::exit(code);
}

/// `--link SPEC` of `volley run`: the plan's targets (see [`behind_link`]).
pub fn plan_behind_link(spec: &str, seed: Option<u64>, plan: &mut volley_engine::Plan) -> CliResult<BehindLink> {
    let mut targets = vec![&mut plan.target];
    if let volley_engine::Load::Clients(c) = &mut plan.load {
        targets.extend(c.groups.iter_mut().map(|g| &mut g.target));
    }
    behind_link(spec, seed, targets)
}

/// `--link SPEC`: starts the link, reaches loopback targets at its host end, and moves the
/// calling thread (and so every thread it starts) into the link's namespace.
pub fn behind_link(
    spec: &str,
    seed: Option<u64>,
    targets: Vec<&mut volley_transport::Target>,
) -> CliResult<BehindLink> {
    let items: Vec<String> = spec.split_whitespace().map(str::to_string).collect();
    let cfg = spec::parse(&items).map_err(|e| CliError::usage(format!("--link: {e}")))?;
    let seed = seed.unwrap_or_else(volley_link::rng::random_seed);
    let link = Link::start(cfg.clone(), seed).map_err(|e| CliError::usage(format!("--link: {e}")))?;
    let host = std::net::IpAddr::V4(link.addrs.host);
    // Loopback (127.0.0.1, ::1, localhost's addresses) is the namespace's own: such a target
    // is reached at the link's host end, once.
    let reach = |t: &mut volley_transport::Target| {
        let to_host = |a: &mut std::net::SocketAddr| {
            if a.ip().is_loopback() {
                *a = std::net::SocketAddr::new(host, a.port());
            }
        };
        to_host(&mut t.addr);
        let mut seen = Vec::new();
        for mut a in std::mem::take(&mut t.addrs) {
            to_host(&mut a);
            if !seen.contains(&a) {
                seen.push(a);
            }
        }
        t.addrs = seen;
    };
    for t in targets {
        reach(t);
    }
    link.enter().map_err(|e| CliError::usage(format!("--link: cannot enter the link's namespace: {e}")))?;
    eprintln!(
        "volley link: host {}, namespace {}, seed {seed}; up: {}; down: {}",
        link.addrs.host,
        link.addrs.local,
        cfg.up.describe(),
        cfg.down.describe()
    );
    Ok(BehindLink { link, spec: spec.to_string(), up: cfg.up.describe(), down: cfg.down.describe() })
}

/// A run's link, with what its results say of it.
pub struct BehindLink {
    link: Link,
    spec: String,
    up: String,
    down: String,
}

impl BehindLink {
    /// Stops the link, prints its lines on stderr and returns the results' `link` and the
    /// warning of an emulator that fell behind.
    pub fn finish(self) -> CliResult<(LinkInfo, Option<String>)> {
        let seed = self.link.seed;
        let r = self.link.finish().map_err(CliError::failure)?;
        print_report(&r);
        let dir = |settings: String, c: &volley_link::Counters, q: &Histogram| LinkDirection {
            settings,
            counts: *c,
            queue_delay: (!q.is_empty()).then(|| LatencySummary::of(q)),
        };
        let info = LinkInfo {
            spec: self.spec,
            seed,
            up: dir(self.up, &r.up, &r.up_queue_delay),
            down: dir(self.down, &r.down, &r.down_queue_delay),
            lateness: LatencySummary::of(&r.lateness),
            held_at_end: r.held_at_end,
            forwarder_cpu_s: r.cpu.as_secs_f64(),
            realtime: r.realtime,
        };
        Ok((info, lateness_warning(&r)))
    }
}

/// The warning a run carries when the emulator fell behind.
pub fn lateness_warning(r: &LinkReport) -> Option<String> {
    let p99 = r.lateness.quantile(0.99);
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
    if let Some(w) = lateness_warning(r) {
        line += &format!(" (warning: {w})");
    }
    eprintln!("{line}");
}
