//! Link specs: what the command line and profile files say a link does.
//!
//! A spec is a list of items, applied in order (a later setting replaces an earlier one):
//! - a profile: a built-in name (`4g`, `lossy-4g`, `3g`) or the path of a TOML file;
//! - settings, `KEY=VALUE[,KEY=VALUE...]`, for both directions, or for one with `up:` (from
//!   the namespace towards the host) or `down:` (back).
//!
//! Keys (docs/link.md): `delay`, `jitter` (durations: `20ms`, `150us`), `dist`
//! (uniform|normal|pareto), `order` (reorder|keep), `loss` (`0.5%`), `burst` (mean burst length
//! in packets: Gilbert-Elliott loss), `dup`, `reorder` (`1%`), `rate` (`10mbit`, `500kbit`,
//! `1gbit`, `64000bit`), `queue` (packets), `queue-bytes`, `outage` (`5s-7s`, repeatable),
//! `loss-during` (`5s-10s`, repeatable: the loss applies inside these windows only),
//! `trace` (a mahimahi `mm-link` file).

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use crate::model::{DirConfig, Dist, LinkConfig, Loss, Nanos, QueueLimit, Rate, Trace};

/// The settings of one direction as given, checked for contradictions at the end.
#[derive(Debug, Clone, Default)]
struct DirDraft {
    delay: Option<Nanos>,
    jitter: Option<Nanos>,
    dist: Option<Dist>,
    keep_order: Option<bool>,
    loss: Option<f64>,
    burst: Option<f64>,
    dup: Option<f64>,
    reorder: Option<f64>,
    rate: Option<Rate>,
    queue: Option<QueueLimit>,
    outages: Vec<(Nanos, Nanos)>,
    loss_windows: Vec<(Nanos, Nanos)>,
}

/// Which directions a setting applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Both,
    Up,
    Down,
}

/// A link spec being built from its items.
#[derive(Debug, Clone, Default)]
pub struct SpecBuilder {
    up: DirDraft,
    down: DirDraft,
}

/// The bottleneck queue's limit when none is given, in packets (netem's default `limit`).
pub const DEFAULT_QUEUE: u64 = 1000;

/// The built-in profiles (crates/link/profiles/), exactly as seeds/001 defines them.
const BUILTIN: &[(&str, &str)] = &[
    ("4g", include_str!("../profiles/4g.toml")),
    ("lossy-4g", include_str!("../profiles/lossy-4g.toml")),
    ("3g", include_str!("../profiles/3g.toml")),
];

/// The built-in profile names.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// Parses a whole spec: the items of `volley link` or of `--link` (whitespace-separated).
pub fn parse(items: &[String]) -> Result<LinkConfig, String> {
    let mut b = SpecBuilder::default();
    for item in items {
        b.item(item)?;
    }
    b.finish().map_err(|e| format!("link '{}': {e}", items.join(" ")))
}

impl SpecBuilder {
    /// One item: a profile, or `[up:|down:]KEY=VALUE,...`.
    pub fn item(&mut self, item: &str) -> Result<(), String> {
        let item = item.trim();
        if item.is_empty() {
            return Err("empty link setting".into());
        }
        let (which, rest) = if let Some(r) = item.strip_prefix("up:") {
            (Which::Up, r)
        } else if let Some(r) = item.strip_prefix("down:") {
            (Which::Down, r)
        } else {
            (Which::Both, item)
        };
        if !rest.contains('=') {
            if which != Which::Both {
                return Err(format!(
                    "'{item}': a profile applies to both directions; write settings after up: or down:"
                ));
            }
            return self.profile(rest);
        }
        for kv in rest.split(',') {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(format!("'{kv}' in '{item}': expected KEY=VALUE"));
            };
            self.set(which, k.trim(), v.trim(), None).map_err(|e| format!("'{item}': {e}"))?;
        }
        Ok(())
    }

    fn profile(&mut self, name_or_path: &str) -> Result<(), String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return self.profile_text(text, name_or_path, None);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            format!(
                "unknown link profile '{name_or_path}': not a built-in ({}) and not a readable file ({e})",
                builtin_names().join(", ")
            )
        })?;
        self.profile_text(&text, name_or_path, Path::new(name_or_path).parent())
    }

    /// A profile's text (TOML). Errors are one line, `ORIGIN:LINE: ...`.
    pub fn profile_text(&mut self, text: &str, origin: &str, dir: Option<&Path>) -> Result<(), String> {
        let at = |span: Option<std::ops::Range<usize>>, msg: &dyn std::fmt::Display| match span {
            Some(s) => {
                let line = text.as_bytes()[..s.start.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1;
                format!("{origin}:{line}: {msg}")
            }
            None => format!("{origin}: {msg}"),
        };
        let f: ProfileFile = toml::from_str(text).map_err(|e| {
            let msg = e.message().lines().next().unwrap_or("invalid TOML").to_string();
            at(e.span(), &msg)
        })?;
        for (which, table) in [(Which::Both, &f.both), (Which::Up, &f.up), (Which::Down, &f.down)] {
            let Some(table) = table else { continue };
            for (k, v) in table {
                let text = match v.get_ref() {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(x) => x.to_string(),
                    _ => return Err(at(Some(v.span()), &format!("{k}: expected a string or a number"))),
                };
                self.set(which, k, &text, dir).map_err(|e| at(Some(v.span()), &e))?;
            }
        }
        // Contradictions within the file, at the file.
        self.clone().finish().map_err(|e| at(None, &e))?;
        Ok(())
    }

    fn set(&mut self, which: Which, key: &str, value: &str, dir: Option<&Path>) -> Result<(), String> {
        let dirs: Vec<&mut DirDraft> = match which {
            Which::Both => vec![&mut self.up, &mut self.down],
            Which::Up => vec![&mut self.up],
            Which::Down => vec![&mut self.down],
        };
        let err = |m: String| format!("{key}: {m}");
        // Parse once; apply to each direction.
        enum V {
            Delay(Nanos),
            Jitter(Nanos),
            Dist(Dist),
            Keep(bool),
            Loss(f64),
            Burst(f64),
            Dup(f64),
            Reorder(f64),
            Rate(Rate),
            Queue(QueueLimit),
            Outage(Nanos, Nanos),
            LossDuring(Nanos, Nanos),
        }
        let v = match key {
            "delay" => V::Delay(duration(value).map_err(err)?),
            "jitter" => V::Jitter(duration(value).map_err(err)?),
            "dist" | "distribution" => V::Dist(match value {
                "uniform" => Dist::Uniform,
                "normal" => Dist::Normal,
                "pareto" => Dist::Pareto,
                _ => return Err(err(format!("'{value}' is not uniform, normal or pareto"))),
            }),
            "order" => V::Keep(match value {
                "keep" => true,
                "reorder" => false,
                _ => return Err(err(format!("'{value}' is not keep or reorder"))),
            }),
            "loss" => {
                let p = percent(value).map_err(err)?;
                if p >= 1.0 {
                    return Err(err("must be below 100%".into()));
                }
                V::Loss(p)
            }
            "burst" => match value.parse::<f64>() {
                Ok(b) if b.is_finite() && b >= 1.0 => V::Burst(b),
                _ => return Err(err(format!("'{value}' is not a mean burst length of at least 1 packet"))),
            },
            "dup" | "duplicate" => V::Dup(percent(value).map_err(err)?),
            "reorder" => V::Reorder(percent(value).map_err(err)?),
            "rate" => V::Rate(Rate::Bits(rate(value).map_err(err)?)),
            "trace" => {
                let path = match dir {
                    Some(d) if Path::new(value).is_relative() => d.join(value),
                    _ => Path::new(value).to_path_buf(),
                };
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| err(format!("cannot read '{}': {e}", path.display())))?;
                V::Rate(Rate::Trace(Arc::new(Trace::parse(&text, &path.display().to_string())?)))
            }
            "queue" => match value.parse::<u64>() {
                Ok(n) if n >= 1 => V::Queue(QueueLimit::Packets(n)),
                _ => return Err(err(format!("'{value}' is not a number of packets (at least 1)"))),
            },
            "queue-bytes" => match value.parse::<u64>() {
                Ok(n) if n >= 1 => V::Queue(QueueLimit::Bytes(n)),
                _ => return Err(err(format!("'{value}' is not a number of bytes (at least 1)"))),
            },
            "outage" | "loss-during" => {
                let Some((a, b)) = value.split_once('-') else {
                    return Err(err(format!("'{value}' is not FROM-TO (e.g. 5s-7s)")));
                };
                let (a, b) = (seconds(a).map_err(err)?, seconds(b).map_err(err)?);
                if a >= b {
                    return Err(err(format!("'{value}' ends before it starts")));
                }
                if key == "outage" {
                    V::Outage(a, b)
                } else {
                    V::LossDuring(a, b)
                }
            }
            _ => {
                return Err(format!(
                    "unknown setting '{key}' (delay, jitter, dist, order, loss, burst, dup, reorder, rate, \
                     trace, queue, queue-bytes, outage, loss-during)"
                ))
            }
        };
        for d in dirs {
            match &v {
                V::Delay(x) => d.delay = Some(*x),
                V::Jitter(x) => d.jitter = Some(*x),
                V::Dist(x) => d.dist = Some(*x),
                V::Keep(x) => d.keep_order = Some(*x),
                V::Loss(x) => d.loss = Some(*x),
                V::Burst(x) => d.burst = Some(*x),
                V::Dup(x) => d.dup = Some(*x),
                V::Reorder(x) => d.reorder = Some(*x),
                V::Rate(x) => d.rate = Some(x.clone()),
                V::Queue(x) => d.queue = Some(*x),
                V::Outage(a, b) => d.outages.push((*a, *b)),
                V::LossDuring(a, b) => d.loss_windows.push((*a, *b)),
            }
        }
        Ok(())
    }

    /// The checked configuration.
    pub fn finish(self) -> Result<LinkConfig, String> {
        Ok(LinkConfig {
            up: self.up.finish().map_err(|e| format!("up: {e}"))?,
            down: self.down.finish().map_err(|e| format!("down: {e}"))?,
        })
    }
}

impl DirDraft {
    fn finish(self) -> Result<DirConfig, String> {
        let loss = match (self.loss, self.burst) {
            (None, None) => Loss::None,
            (Some(0.0), _) => Loss::None,
            (Some(p), None) => Loss::Random(p),
            (Some(rate), Some(mean_burst)) => Loss::Burst { rate, mean_burst },
            (None, Some(_)) => return Err("burst needs a loss rate (loss=...)".into()),
        };
        if !self.loss_windows.is_empty() && self.loss.is_none() {
            return Err("loss-during needs a loss rate (loss=...)".into());
        }
        let rate = self.rate.unwrap_or_default();
        if self.queue.is_some() && rate == Rate::Unlimited {
            return Err("a queue limit needs a rate or a trace: without a bottleneck nothing queues".into());
        }
        // A bottleneck always has a limit (netem's default, 1000 packets): an unbounded queue
        // would grow with the run under overload.
        let queue = match (&rate, self.queue) {
            (Rate::Unlimited, _) => None,
            (_, Some(q)) => Some(q),
            (_, None) => Some(QueueLimit::Packets(DEFAULT_QUEUE)),
        };
        let delay = self.delay.unwrap_or(0);
        let reorder = self.reorder.unwrap_or(0.0);
        if reorder > 0.0 && delay == 0 {
            return Err("reorder sends some packets without the delay: it needs a delay".into());
        }
        Ok(DirConfig {
            outages: self.outages,
            loss,
            loss_windows: self.loss_windows,
            duplicate: self.dup.unwrap_or(0.0),
            delay,
            jitter: self.jitter.unwrap_or(0),
            dist: self.dist.unwrap_or_default(),
            keep_order: self.keep_order.unwrap_or(false),
            reorder,
            rate,
            queue,
        })
    }
}

/// A profile file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    #[allow(dead_code)] // Documentation for the reader of the file.
    name: Option<String>,
    #[allow(dead_code)]
    description: Option<String>,
    both: Option<std::collections::BTreeMap<String, Spanned<toml::Value>>>,
    up: Option<std::collections::BTreeMap<String, Spanned<toml::Value>>>,
    down: Option<std::collections::BTreeMap<String, Spanned<toml::Value>>>,
}

/// `53.3ms`, `150us`, `2s`, `500ns`.
pub fn duration(s: &str) -> Result<Nanos, String> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" => return Err(format!("'{s}' needs a unit (ns, us, ms, s)")),
        _ => return Err(format!("'{s}' is not a duration (e.g. 20ms, 150us)")),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v * scale <= 3600e9 => Ok((v * scale).round() as Nanos),
        Ok(_) => Err(format!("'{s}' is longer than an hour")),
        Err(_) => Err(format!("'{s}' is not a duration (e.g. 20ms, 150us)")),
    }
}

/// Seconds for outages: `5s`, `2.5s`, `500ms` or a bare number of seconds.
fn seconds(s: &str) -> Result<Nanos, String> {
    let s = s.trim();
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * 1e9).round() as Nanos),
        Ok(_) => Err(format!("'{s}' is not a time in seconds")),
        Err(_) => duration(s),
    }
}

/// `0.5%` as 0.005.
fn percent(s: &str) -> Result<f64, String> {
    let Some(n) = s.strip_suffix('%') else {
        return Err(format!("'{s}' is not a percentage (e.g. 0.5%)"));
    };
    match n.trim().parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v / 100.0),
        _ => Err(format!("'{s}' is not a percentage from 0% to 100%")),
    }
}

/// `10mbit`, `500kbit`, `1gbit`, `64000bit` (tc's units; bits per second).
fn rate(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let lower = lower.trim_end_matches("/s").trim_end_matches("ps");
    let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let scale = match unit {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => return Err(format!("'{s}' is not a rate in bits per second (e.g. 10mbit, 500kbit, 1gbit)")),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v * scale >= 1.0 && v * scale <= 1e12 => Ok((v * scale).round() as u64),
        _ => Err(format!("'{s}' is not a rate from 1bit to 1000gbit")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(items: &[&str]) -> Result<LinkConfig, String> {
        parse(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    const MS: Nanos = 1_000_000;

    #[test]
    fn builtins_are_the_studys_figures_on_the_way_up() {
        let c = p(&["4g"]).unwrap();
        assert_eq!(c.up.delay, 53_300_000);
        assert_eq!(c.up.jitter, MS);
        assert_eq!(c.up.loss, Loss::Random(0.005));
        assert!(c.down.is_transparent());
        let c = p(&["lossy-4g"]).unwrap();
        assert_eq!((c.up.delay, c.up.jitter, c.up.loss), (53_300_000, MS, Loss::Random(0.015)));
        let c = p(&["3g"]).unwrap();
        assert_eq!((c.up.delay, c.up.jitter, c.up.loss), (150 * MS, 8 * MS, Loss::Random(0.025)));
        assert!(c.down.is_transparent());
        for n in builtin_names() {
            assert!(p(&[n]).is_ok());
        }
    }

    #[test]
    fn settings_apply_per_direction_and_in_order() {
        let c = p(&["delay=20ms,jitter=2ms,dist=normal,order=keep", "down:loss=1%,burst=3"]).unwrap();
        assert_eq!((c.up.delay, c.down.delay), (20 * MS, 20 * MS));
        assert_eq!(c.up.dist, Dist::Normal);
        assert!(c.up.keep_order && c.down.keep_order);
        assert_eq!(c.up.loss, Loss::None);
        assert_eq!(c.down.loss, Loss::Burst { rate: 0.01, mean_burst: 3.0 });
        // A later item replaces an earlier one: a profile, then a change.
        let c = p(&["4g", "up:loss=0%", "rate=10mbit,queue-bytes=64000", "outage=5s-7s,outage=9-9.5"]).unwrap();
        assert_eq!(c.up.loss, Loss::None);
        assert_eq!(c.up.delay, 53_300_000);
        assert_eq!(c.down.rate, Rate::Bits(10_000_000));
        assert_eq!(c.down.queue, Some(QueueLimit::Bytes(64_000)));
        assert_eq!(c.up.outages, vec![(5_000_000_000, 7_000_000_000), (9_000_000_000, 9_500_000_000)]);
        assert_eq!(p(&["rate=500kbit"]).unwrap().up.rate, Rate::Bits(500_000));
        assert_eq!(p(&["rate=500kbit"]).unwrap().up.queue, Some(QueueLimit::Packets(DEFAULT_QUEUE)));
        assert_eq!(p(&["delay=5ms"]).unwrap().up.queue, None);
        assert_eq!(p(&["rate=1Gbit"]).unwrap().up.rate, Rate::Bits(1_000_000_000));
        assert_eq!(p(&["delay=150us"]).unwrap().up.delay, 150_000);
        let c = p(&["loss=30%,loss-during=3s-8s,loss-during=10-11"]).unwrap();
        assert_eq!(c.down.loss_windows, vec![(3_000_000_000, 8_000_000_000), (10_000_000_000, 11_000_000_000)]);
        assert_eq!(c.up.describe(), "loss 30% during 3s-8s and 10s-11s");
    }

    #[test]
    fn bad_values_are_refused_naming_them() {
        for (items, what) in [
            (&["delay=-5ms"][..], "delay"),
            (&["delay=5"][..], "needs a unit"),
            (&["loss=5"][..], "percentage"),
            (&["loss=100%"][..], "below 100%"),
            (&["loss=150%"][..], "percentage"),
            (&["burst=3"][..], "burst needs a loss rate"),
            (&["loss=1%,burst=0.5"][..], "burst"),
            (&["queue=10"][..], "needs a rate"),
            (&["rate=10mb"][..], "rate"),
            (&["rate=0bit"][..], "rate"),
            (&["reorder=5%"][..], "needs a delay"),
            (&["outage=7s-5s"][..], "ends before"),
            (&["loss-during=7s-5s"][..], "ends before"),
            (&["loss-during=1s-2s"][..], "loss-during needs a loss rate"),
            (&["dist=cauchy"][..], "uniform"),
            (&["bogus=1"][..], "unknown setting 'bogus'"),
            (&["5g"][..], "unknown link profile '5g'"),
            (&["up:4g"][..], "both directions"),
            (&["trace=/nonexistent"][..], "cannot read"),
        ] {
            let e = p(items).unwrap_err();
            assert!(e.contains(what), "{items:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn profile_files_errors_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("my.toml");
        let trace = dir.path().join("cell.trace");
        std::fs::write(&trace, "1\n2\n2\n5\n").unwrap();
        std::fs::write(&f, "name = \"mine\"\n[both]\ndelay = \"10ms\"\n[down]\ntrace = \"cell.trace\"\nqueue = 50\n")
            .unwrap();
        let path = f.display().to_string();
        let c = p(&[path.as_str()]).unwrap();
        assert_eq!((c.up.delay, c.down.delay), (10 * MS, 10 * MS));
        assert!(matches!(&c.down.rate, Rate::Trace(t) if t.ops.len() == 4));
        assert_eq!(c.down.queue, Some(QueueLimit::Packets(50)));
        for (text, line, what) in [
            ("[up]\ndelay = \"10ms\"\nloss = \"3\"\n", 3, "loss"),
            ("[up]\n\ndelay = true\n", 3, "expected a string"),
            ("[sideways]\ndelay = \"1ms\"\n", 1, "unknown field"),
            ("[up]\nqueue = 0\n", 2, "queue"),
            ("[up]\nfoo = 1\n", 2, "unknown setting"),
        ] {
            std::fs::write(&f, text).unwrap();
            let e = p(&[path.as_str()]).unwrap_err();
            assert!(e.contains(&format!("{path}:{line}: ")) && e.contains(what), "{text:?}: {e}");
        }
        std::fs::write(&f, "[up]\nqueue = 5\n").unwrap();
        let e = p(&[path.as_str()]).unwrap_err();
        assert!(e.contains(&format!("{path}: up: a queue limit needs a rate")), "{e}");
        std::fs::write(&trace, "1\nzz\n").unwrap();
        std::fs::write(&f, "[up]\ntrace = \"cell.trace\"\n").unwrap();
        let e = p(&[path.as_str()]).unwrap_err();
        assert!(e.contains("cell.trace:2:"), "{e}");
    }
}
