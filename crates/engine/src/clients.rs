//! Simulated clients: many clients, each with its own connections and its own timing, whose
//! connection behaviour comes from a profile — data, not code (TOML; built-ins in
//! `crates/engine/profiles/`, documented in docs/clients.md).

use std::time::Duration;

use serde::Deserialize;
use volley_transport::{ConnPolicy, LaneOptions, Scheme, Target};

/// How a client treats its connections.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Connections a client holds in parallel (connection-based transports); its queries go
    /// to them in turn.
    #[serde(default = "one")]
    pub connections: u32,
    /// Open the connections when the client starts (browsers), not at its first query.
    #[serde(default)]
    pub connect_at_start: bool,
    /// The client's query rate (qps) at or below which `light` applies, above it `busy`.
    #[serde(default = "one_qps")]
    pub light_rate: f64,
    /// Connection policy under light traffic.
    #[serde(default)]
    pub light: PolicySpec,
    /// Connection policy under heavier traffic (default: the same as light).
    #[serde(default)]
    pub busy: Option<PolicySpec>,
    /// UDP: ask a truncated answer's question again over TCP (stub resolvers).
    #[serde(default)]
    pub tcp_on_truncation: bool,
}

fn one() -> u32 {
    1
}

fn one_qps() -> f64 {
    1.0
}

/// A connection policy as written in a profile.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    pub queries_per_connection: Option<u64>,
    pub lifetime: Option<String>,
    pub idle_timeout: Option<String>,
}

impl PolicySpec {
    fn policy(&self, parse: &dyn Fn(&str) -> Result<Duration, String>) -> Result<ConnPolicy, String> {
        let dur = |v: &Option<String>, what: &str| -> Result<Option<Duration>, String> {
            v.as_deref().map(|s| parse(s).map_err(|e| format!("{what}: {e}"))).transpose()
        };
        Ok(ConnPolicy {
            max_queries: self.queries_per_connection,
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
    pub fn load(name_or_path: &str) -> Result<Profile, String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::parse(text, name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            format!(
                "unknown profile '{name_or_path}': not a built-in ({}) and not a readable file ({e})",
                Profile::builtin_names().join(", ")
            )
        })?;
        Profile::parse(&text, name_or_path)
    }

    /// Parses a profile; `origin` names it in errors (`FILE:LINE: ...` where TOML tells the line).
    pub fn parse(text: &str, origin: &str) -> Result<Profile, String> {
        let p: Profile = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| text[..s.start.min(text.len())].lines().count().max(1));
            match line {
                Some(l) => format!("{origin}:{l}: {}", e.message()),
                None => format!("{origin}: {}", e.message()),
            }
        })?;
        if p.connections == 0 {
            return Err(format!("{origin}: connections must be at least 1"));
        }
        if !(p.light_rate >= 0.0 && p.light_rate.is_finite()) {
            return Err(format!("{origin}: light_rate must be a number of queries per second"));
        }
        Ok(p)
    }

    /// The connection policy for a client sending `rate` queries per second.
    pub fn policy_for(
        &self,
        rate: f64,
        parse: &dyn Fn(&str) -> Result<Duration, String>,
    ) -> Result<ConnPolicy, String> {
        let spec = match &self.busy {
            Some(b) if rate > self.light_rate => b,
            _ => &self.light,
        };
        spec.policy(parse).map_err(|e| format!("profile {}: {e}", self.name))
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
    /// Lane settings of the group's transport, with the profile's policy applied.
    pub lane: LaneOptions,
    /// Where truncated UDP answers are asked again (stub profile): TCP to the same server.
    pub fallback: Option<Target>,
}

impl Group {
    pub fn name(&self) -> String {
        format!("{}@{}", self.profile.name, self.target.scheme)
    }

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
    /// Queries per second of each client (unused in a replay).
    pub rate: f64,
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
            _ => Err(format!("bad {s}")),
        }
    }

    #[test]
    fn builtins_parse() {
        for n in Profile::builtin_names() {
            let p = Profile::load(n).unwrap();
            assert_eq!(p.name, n);
        }
        let b = Profile::load("browser").unwrap();
        assert_eq!(b.connections, 3);
        assert_eq!(b.policy_for(0.5, &dur).unwrap().idle, Some(Duration::from_secs(10)));
        assert_eq!(b.policy_for(20.0, &dur).unwrap().max_queries, Some(4));
        assert!(Profile::load("stub").unwrap().tcp_on_truncation);
    }

    #[test]
    fn errors_name_the_place() {
        let e = Profile::parse("name = \"x\"\nconnections = \"two\"\n", "p.toml").unwrap_err();
        assert!(e.starts_with("p.toml:2:"), "{e}");
        let e = Profile::parse("name = \"x\"\nbogus = 1\n", "p.toml").unwrap_err();
        assert!(e.starts_with("p.toml:") && e.contains("bogus"), "{e}");
        assert!(Profile::load("/nonexistent.toml").unwrap_err().contains("unknown profile"));
    }

    #[test]
    fn groups_follow_weights() {
        let t: Target = "udp://127.0.0.1:53".parse().unwrap();
        let g = |w: f64| Group {
            weight: w,
            profile: Profile::load("stub").unwrap(),
            target: t.clone(),
            lane: LaneOptions::default(),
            fallback: None,
        };
        let load = ClientsLoad {
            count: 100,
            rate: 1.0,
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
