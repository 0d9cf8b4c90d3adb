//! Simulated clients: many clients, each with its own connections and its own timing, whose
//! connection behaviour comes from a profile — data, not code (TOML; built-ins in
//! `crates/engine/profiles/`, documented in docs/clients.md).

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use volley_transport::{ConnPolicy, LaneOptions, Scheme, Target};

/// How a client treats its connections: a profile file, checked, its policies resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// Connections a client holds in parallel (connection-based transports); its queries go
    /// to them in turn.
    pub connections: u32,
    /// Open the connections when the client starts (browsers), not at its first query.
    pub connect_at_start: bool,
    /// The client's query rate (qps) at or below which `light` applies, above it `busy`.
    pub light_rate: f64,
    /// Connection policy under light traffic.
    pub light: ConnPolicy,
    /// Connection policy under heavier traffic; None: `light` at any rate.
    pub busy: Option<ConnPolicy>,
    /// UDP: ask a truncated answer's question again over TCP (stub resolvers).
    pub tcp_on_truncation: bool,
    /// UDP: send a query again after this long without an answer (None: the run's timeout
    /// shared by `udp_tries`), ...
    pub udp_retry: Option<Duration>,
    /// ... up to this many sends in all (None, or 1: never again).
    pub udp_tries: Option<u32>,
}

/// A profile as written (TOML), with where each checked value stands in the text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    #[serde(default)]
    description: String,
    connections: Option<Spanned<u32>>,
    #[serde(default)]
    connect_at_start: bool,
    light_rate: Option<Spanned<f64>>,
    #[serde(default)]
    light: PolicyFile,
    busy: Option<PolicyFile>,
    #[serde(default)]
    tcp_on_truncation: bool,
    udp_retry: Option<Spanned<String>>,
    udp_tries: Option<Spanned<u32>>,
}

/// A connection policy as written in a profile.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    queries_per_connection: Option<Spanned<u64>>,
    lifetime: Option<Spanned<String>>,
    idle_timeout: Option<Spanned<String>>,
}

/// Parses duration text (the command line's syntax: `10s`, `500ms`).
pub type ParseDuration<'a> = &'a dyn Fn(&str) -> Result<Duration, String>;

/// Where in a profile's text a problem is: `FILE:LINE: message`.
struct Place<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Place<'_> {
    /// The error `msg` at `span` of the file, on one line (values quoted from the file may
    /// hold line ends: escaped).
    fn at(&self, span: Option<std::ops::Range<usize>>, msg: impl std::fmt::Display) -> String {
        let msg = volley_wire::display::one_line(&msg.to_string(), usize::MAX);
        match span {
            Some(s) => {
                let line =
                    self.text.as_bytes()[..s.start.min(self.text.len())].iter().filter(|&&b| b == b'\n').count() + 1;
                format!("{}:{line}: {msg}", self.origin)
            }
            None => format!("{}: {msg}", self.origin),
        }
    }
}

impl PolicyFile {
    fn resolve(&self, at: &Place, table: &str, parse: ParseDuration) -> Result<ConnPolicy, String> {
        if let Some(q) = &self.queries_per_connection {
            if *q.get_ref() == 0 {
                return Err(at.at(Some(q.span()), format!("{table}.queries_per_connection must be at least 1")));
            }
        }
        let dur = |v: &Option<Spanned<String>>, key: &str| -> Result<Option<Duration>, String> {
            let Some(v) = v else { return Ok(None) };
            match parse(v.get_ref()) {
                Ok(d) if !d.is_zero() => Ok(Some(d)),
                Ok(_) => Err(at.at(Some(v.span()), format!("{table}.{key} must be above 0"))),
                Err(e) => Err(at.at(Some(v.span()), format!("{table}.{key}: {e}"))),
            }
        };
        Ok(ConnPolicy {
            max_queries: self.queries_per_connection.as_ref().map(|q| *q.get_ref()),
            lifetime: dur(&self.lifetime, "lifetime")?,
            idle: dur(&self.idle_timeout, "idle_timeout")?,
        })
    }
}

const BUILTIN: &[(&str, &str)] = &[
    ("stub", include_str!("../profiles/stub.toml")),
    ("forwarder", include_str!("../profiles/forwarder.toml")),
    ("browser", include_str!("../profiles/browser.toml")),
];

impl Profile {
    /// The built-in profile names.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// A built-in profile by name, or a profile file (TOML) by path. Errors name the file.
    pub fn load(name_or_path: &str, parse: ParseDuration) -> Result<Profile, String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::parse(text, name_or_path, parse);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            format!(
                "unknown profile '{name_or_path}': not a built-in ({}) and not a readable file ({e})",
                Profile::builtin_names().join(", ")
            )
        })?;
        Profile::parse(&text, name_or_path, parse)
    }

    /// Parses and checks a profile; errors are one line, `ORIGIN:LINE: ...` (`origin`
    /// names the file).
    pub fn parse(text: &str, origin: &str, parse: ParseDuration) -> Result<Profile, String> {
        let at = Place { text, origin };
        let f: ProfileFile = toml::from_str(text).map_err(|e| {
            // One line: TOML's message may carry more lines of detail.
            let msg = e.message().lines().next().unwrap_or("invalid TOML").to_string();
            at.at(e.span(), msg)
        })?;
        let connections = match &f.connections {
            Some(c) if *c.get_ref() == 0 => return Err(at.at(Some(c.span()), "connections must be at least 1")),
            Some(c) => *c.get_ref(),
            None => 1,
        };
        let light_rate = match &f.light_rate {
            Some(r) if !(*r.get_ref() >= 0.0 && r.get_ref().is_finite()) => {
                return Err(at.at(Some(r.span()), "light_rate must be a number of queries per second"))
            }
            Some(r) => *r.get_ref(),
            None => 1.0,
        };
        let udp_retry = match &f.udp_retry {
            None => None,
            Some(v) => match parse(v.get_ref()) {
                Ok(d) if !d.is_zero() => Some(d),
                Ok(_) => return Err(at.at(Some(v.span()), "udp_retry must be above 0")),
                Err(e) => return Err(at.at(Some(v.span()), format!("udp_retry: {e}"))),
            },
        };
        let udp_tries = match &f.udp_tries {
            Some(n) if *n.get_ref() == 0 => {
                return Err(at.at(Some(n.span()), "udp_tries must be at least 1 (the first send)"))
            }
            Some(n) => Some(*n.get_ref()),
            None => None,
        };
        if let (Some(v), None | Some(1)) = (&f.udp_retry, udp_tries) {
            return Err(at.at(Some(v.span()), "udp_retry needs udp_tries of 2 or more (the sends in all)"));
        }
        let light = f.light.resolve(&at, "light", parse)?;
        let busy = f.busy.as_ref().map(|b| b.resolve(&at, "busy", parse)).transpose()?;
        Ok(Profile {
            name: f.name,
            description: f.description,
            connections,
            connect_at_start: f.connect_at_start,
            light_rate,
            light,
            busy,
            tcp_on_truncation: f.tcp_on_truncation,
            udp_retry,
            udp_tries,
        })
    }

    /// The connection policy for a client sending `rate` queries per second.
    pub fn policy_for(&self, rate: f64) -> ConnPolicy {
        match self.busy {
            Some(b) if rate > self.light_rate => b,
            _ => self.light,
        }
    }
}

/// How a client spaces its queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrivals {
    /// Evenly, at the client's rate, each client at its own phase.
    #[default]
    Constant,
    /// A Poisson process at the client's rate (exponential gaps).
    Poisson,
}

/// One group of a mixture: a share of the clients, a profile, a target.
#[derive(Debug, Clone)]
pub struct Group {
    pub weight: f64,
    pub profile: Profile,
    pub target: Target,
    /// Queries per second of each of the group's clients (unused in a replay).
    pub rate: f64,
    /// Lane settings of the group's transport, with the profile's light policy applied
    /// (`lane.conn`).
    pub lane: LaneOptions,
    /// The policy a client's connections follow while its own rate is above the profile's
    /// `light_rate` (the profile's busy policy, with the command line's flags applied).
    pub busy: Option<ConnPolicy>,
    /// Where truncated UDP answers are asked again (stub profile): TCP to the same server.
    pub fallback: Option<Target>,
    /// UDP: how the group's clients send a query again when no answer comes (the profile's
    /// `udp_retry` and `udp_tries`, or the command line's).
    pub udp_retry: Option<crate::UdpRetry>,
}

impl Group {
    /// Whether each client of this group has connections of its own (UDP clients share a
    /// worker's sockets).
    pub fn per_client_lanes(&self) -> bool {
        self.target.scheme != Scheme::Udp
    }
}

/// Simulated clients.
#[derive(Debug, Clone)]
pub struct ClientsLoad {
    pub count: u64,
    pub arrivals: Arrivals,
    pub groups: Vec<Group>,
    /// Replay: each client sends a captured client's queries at their captured times.
    pub replay: Option<std::sync::Arc<Replay>>,
}

/// Captured clients to replay: each one's queries as (offset from the capture's start, index
/// into the run's query set). Built by the command line from a clients file.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub clients: Vec<Vec<(u64, u32)>>,
    /// From the capture's first to its last query, ns.
    pub span_ns: u64,
}

impl Replay {
    /// Which captured client simulated client `i` of `n` replays, and how much later it starts.
    /// Fewer clients than captured: an even sample. More: the capture's clients repeat, each
    /// repetition shifted by an equal share of the capture's span and wrapped round it (the
    /// engine plays the shifted tail first), so the load is the capture's times n/clients,
    /// evenly over the span.
    pub fn source_of(&self, i: u64, n: u64) -> (u32, u64) {
        let c = self.clients.len().max(1) as u64;
        if n <= c {
            return ((i * c / n.max(1)) as u32, 0);
        }
        let reps = n.div_ceil(c);
        let rep = i / c;
        ((i % c) as u32, self.span_ns / reps * rep)
    }

    /// Queries in all captured clients.
    pub fn queries(&self) -> usize {
        self.clients.iter().map(Vec::len).sum()
    }
}

impl ClientsLoad {
    /// Queries per second of all clients together (None in a replay).
    pub fn total_rate(&self) -> Option<f64> {
        if self.replay.is_some() {
            return None;
        }
        let mut n = vec![0u64; self.groups.len()];
        for g in self.assignments() {
            n[g as usize] += 1;
        }
        Some(self.groups.iter().zip(n).map(|(g, k)| g.rate * k as f64).sum())
    }

    /// Each group's name, unique within the run: `PROFILE@SCHEME`; groups that would share
    /// one add their clients' rate (`PROFILE:QPS@SCHEME`), then, if still alike, their place
    /// in the mixture (`#N`, from 1). Merges match groups by name.
    pub fn group_names(&self) -> Vec<String> {
        let base = |g: &Group| format!("{}@{}", g.profile.name, g.target.scheme);
        let rated = |g: &Group| format!("{}:{}@{}", g.profile.name, g.rate, g.target.scheme);
        let count = |f: &dyn Fn(&Group) -> String, n: &str| self.groups.iter().filter(|g| f(g) == n).count();
        self.groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let b = base(g);
                if count(&base, &b) == 1 {
                    return b;
                }
                let r = rated(g);
                if count(&rated, &r) == 1 {
                    return r;
                }
                format!("{r}#{}", i + 1)
            })
            .collect()
    }

    /// Each client's rate when every group has the same; None otherwise (or in a replay).
    pub fn client_rate(&self) -> Option<f64> {
        let r = self.groups.first()?.rate;
        (self.replay.is_none() && self.groups.iter().all(|g| g.rate == r)).then_some(r)
    }

    /// The group of every client: dealt by weight, interleaved (each next client goes to the
    /// group furthest below its share), so any prefix of clients has the mixture's proportions.
    pub fn assignments(&self) -> Vec<u16> {
        let total: f64 = self.groups.iter().map(|g| g.weight.max(0.0)).sum();
        let mut given = vec![0f64; self.groups.len()];
        (0..self.count)
            .map(|i| {
                if self.groups.len() <= 1 || total <= 0.0 {
                    return 0;
                }
                let n = (i + 1) as f64;
                let mut best = 0;
                let mut best_gap = f64::MIN;
                for (k, g) in self.groups.iter().enumerate() {
                    let gap = n * g.weight.max(0.0) / total - given[k];
                    if gap > best_gap + 1e-9 {
                        best = k;
                        best_gap = gap;
                    }
                }
                given[best] += 1.0;
                best as u16
            })
            .collect()
    }
}

/// A small fast generator for arrival gaps and phases (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// An exponential gap of mean `mean_ns`.
    pub fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        (-self.unit().ln() * mean_ns) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dur(s: &str) -> Result<Duration, String> {
        match s {
            "10s" => Ok(Duration::from_secs(10)),
            "0s" => Ok(Duration::ZERO),
            _ => Err(format!("invalid duration '{s}'")),
        }
    }

    fn load(n: &str) -> Result<Profile, String> {
        Profile::load(n, &dur)
    }

    fn parse(text: &str) -> Result<Profile, String> {
        Profile::parse(text, "p.toml", &dur)
    }

    #[test]
    fn builtins_parse() {
        for n in Profile::builtin_names() {
            let p = load(n).unwrap();
            assert_eq!(p.name, n);
        }
        let b = load("browser").unwrap();
        assert_eq!(b.connections, 3);
        assert_eq!(b.policy_for(0.5).idle, Some(Duration::from_secs(10)));
        assert_eq!(b.policy_for(20.0).max_queries, Some(4));
        let stub = load("stub").unwrap();
        assert!(stub.tcp_on_truncation);
        assert_eq!((stub.udp_retry, stub.udp_tries), (None, Some(2)), "glibc's two attempts, sharing the timeout");
        assert_eq!(
            parse("name = \"x\"\nudp_retry = \"10s\"\nudp_tries = 3\n").unwrap().udp_retry,
            Some(Duration::from_secs(10))
        );
    }

    #[test]
    fn errors_name_the_place() {
        let e = parse("name = \"x\"\nconnections = \"two\"\n").unwrap_err();
        assert!(e.starts_with("p.toml:2:"), "{e}");
        let e = parse("name = \"x\"\nbogus = 1\n").unwrap_err();
        assert!(e.starts_with("p.toml:2:") && e.contains("bogus"), "{e}");
        let e = parse("name = \"x\"\n[light\n").unwrap_err();
        assert!(e.starts_with("p.toml:2:") && !e.contains('\n'), "one line: {e}");
        assert!(load("/nonexistent.toml").unwrap_err().contains("unknown profile"));
        // A value quoted in the message, with a line end in it (found by the client_profile
        // fuzz target: fuzz/regressions/client_profile/).
        let e = parse("name = \"x\"\n[light]\nidle_timeout = \"19\\n9s\"\n").unwrap_err();
        assert_eq!(e, "p.toml:3: light.idle_timeout: invalid duration '19\\n9s'");
    }

    /// What the command line refuses, a profile refuses too, at its line.
    #[test]
    fn zero_and_bad_values_are_refused_at_their_line() {
        for (text, line, what) in [
            ("name = \"x\"\n\nconnections = 0\n", 3, "connections must be at least 1"),
            (
                "name = \"x\"\n[light]\nqueries_per_connection = 0\n",
                3,
                "light.queries_per_connection must be at least 1",
            ),
            ("name = \"x\"\n[light]\nlifetime = \"0s\"\n", 3, "light.lifetime must be above 0"),
            ("name = \"x\"\n[busy]\nidle_timeout = \"0s\"\n", 3, "busy.idle_timeout must be above 0"),
            ("name = \"x\"\n[light]\n\nlifetime = \"3 parsecs\"\n", 4, "light.lifetime: invalid duration '3 parsecs'"),
            ("name = \"x\"\nlight_rate = nan\n", 2, "light_rate must be"),
            ("name = \"x\"\nlight_rate = -1.0\n", 2, "light_rate must be"),
            ("name = \"x\"\nudp_tries = 2\nudp_retry = \"0s\"\n", 3, "udp_retry must be above 0"),
            ("name = \"x\"\nudp_retry = \"3 parsecs\"\n", 2, "udp_retry: invalid duration '3 parsecs'"),
            ("name = \"x\"\n\nudp_tries = 0\n", 3, "udp_tries must be at least 1"),
            ("name = \"x\"\nudp_retry = \"10s\"\n", 2, "udp_retry needs udp_tries of 2 or more"),
            ("name = \"x\"\nudp_retry = \"10s\"\nudp_tries = 1\n", 2, "udp_retry needs udp_tries"),
            ("name = \"x\"\nudp_tries = -1\n", 2, ""),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.starts_with(&format!("p.toml:{line}: {what}")), "{text:?}: {e}");
        }
    }

    #[test]
    fn groups_follow_weights() {
        let t: Target = "udp://127.0.0.1:53".parse().unwrap();
        let g = |w: f64| Group {
            weight: w,
            profile: load("stub").unwrap(),
            target: t.clone(),
            rate: 1.0,
            lane: LaneOptions::default(),
            busy: None,
            fallback: None,
            udp_retry: None,
        };
        let load = ClientsLoad {
            count: 100,
            arrivals: Arrivals::Constant,
            groups: vec![g(60.0), g(20.0), g(20.0)],
            replay: None,
        };
        let a = load.assignments();
        let mut n = [0u32; 3];
        for g in &a {
            n[*g as usize] += 1;
        }
        assert_eq!(n, [60, 20, 20]);
        let mut first10 = [0u32; 3];
        for g in &a[..10] {
            first10[*g as usize] += 1;
        }
        assert_eq!(first10, [6, 2, 2]);
    }

    #[test]
    fn group_names_are_unique() {
        let g = |p: &str, url: &str, rate: f64| Group {
            weight: 1.0,
            profile: load(p).unwrap(),
            target: url.parse().unwrap(),
            rate,
            lane: LaneOptions::default(),
            busy: None,
            fallback: None,
            udp_retry: None,
        };
        let load = |groups| ClientsLoad { count: 10, arrivals: Arrivals::Constant, groups, replay: None };
        let l = load(vec![
            g("stub", "udp://127.0.0.1:53", 1.0),
            g("browser", "https://127.0.0.1/dns-query", 0.5),
            g("browser", "https://127.0.0.1/dns-query", 5.0),
            g("forwarder", "tls://127.0.0.1:853", 2.0),
            g("forwarder", "tls://127.0.0.2:853", 2.0),
        ]);
        assert_eq!(
            l.group_names(),
            ["stub@udp", "browser:0.5@https", "browser:5@https", "forwarder:2@tls#4", "forwarder:2@tls#5"]
        );
        assert_eq!(l.client_rate(), None);
        assert_eq!(l.total_rate(), Some(2.0 * 1.0 + 2.0 * 0.5 + 2.0 * 5.0 + 2.0 * 2.0 + 2.0 * 2.0));
    }

    #[test]
    fn replay_scaling() {
        let r = Replay { clients: vec![vec![(0, 0)]; 4], span_ns: 1000 };
        assert_eq!((0..2).map(|i| r.source_of(i, 2)).collect::<Vec<_>>(), vec![(0, 0), (2, 0)]);
        let got: Vec<_> = (0..8).map(|i| r.source_of(i, 8)).collect();
        assert_eq!(got[..4], [(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert_eq!(got[4..], [(0, 500), (1, 500), (2, 500), (3, 500)]);
    }

    #[test]
    fn exponential_mean() {
        let mut r = Rng::new(7);
        let n = 20_000;
        let mean = (0..n).map(|_| r.exp_ns(1000.0)).sum::<u64>() as f64 / n as f64;
        assert!((mean - 1000.0).abs() < 50.0, "{mean}");
    }
}
