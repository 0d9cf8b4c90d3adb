//! volley's experiments (docs/experiments.md): each study's experiment as data, a TOML file
//! naming its runs (a matrix over transport, connection lifetime, key type, link, connections,
//! TLS resumption, repetitions), the figure each column shows, the study's own figures and the
//! checks of its finding. One runner measures them all with the engine and the embedded
//! responder (or targets the user names); the verdicts are computed from the measured figures.

pub mod check;
pub mod figures;
pub mod fuzzing;
pub mod output;
pub mod runner;
pub mod servers;
pub mod spec;

pub use check::{evaluate, Evaluation, Verdict};
pub use runner::{run, Options, Outcome, Progress};
pub use spec::{parse, Spec};

/// The built-in experiments: (name, file text), in the order `list` shows them.
pub const BUILTIN: &[(&str, &str)] = &[
    ("head-of-line", include_str!("../experiments/head-of-line.toml")),
    ("overhead", include_str!("../experiments/overhead.toml")),
    ("transport-cost", include_str!("../experiments/transport-cost.toml")),
    ("clients-served", include_str!("../experiments/clients-served.toml")),
    ("handshakes", include_str!("../experiments/handshakes.toml")),
    ("network-profiles", include_str!("../experiments/network-profiles.toml")),
];

/// A built-in experiment by name, or a file (`NAME.toml` or a path); its text and the name
/// errors use for it.
pub fn load(name_or_path: &str) -> Result<(String, String), ExperimentError> {
    if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        return Ok((format!("{n}.toml (built in)"), text.to_string()));
    }
    if name_or_path.ends_with(".toml") || name_or_path.contains('/') {
        let text = std::fs::read_to_string(name_or_path)
            .map_err(|e| ExperimentError::Usage(format!("{name_or_path}: {e}")))?;
        return Ok((name_or_path.to_string(), text));
    }
    let known: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
    Err(ExperimentError::Usage(format!(
        "no experiment '{name_or_path}' (built in: {}; or a FILE.toml)",
        known.join(", ")
    )))
}

/// Errors of the experiment layer.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A mistake in an experiment file.
    #[error("{file}:{line}: {message}")]
    Spec { file: String, line: usize, message: String },
    /// Bad input otherwise (a name, a flag's value).
    #[error("{0}")]
    Usage(String),
    /// Setting a step up failed (the responder, a link, a target).
    #[error("{0}")]
    Setup(String),
    /// A run failed.
    #[error("{0}")]
    Run(String),
    #[error("{0}")]
    Io(String),
}

impl ExperimentError {
    /// Whether it is the user's input that is wrong (exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, ExperimentError::Spec { .. } | ExperimentError::Usage(_) | ExperimentError::Setup(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A limit search's step fails on answers missing beyond chance: one drop among 70 queries
    /// passes 99 %, 3 % missing of 1,500 does not, nor 10 % of 100.
    #[test]
    fn answered_beyond_chance() {
        use runner::answered_bound;
        assert!(answered_bound(69, 70) >= 0.99);
        assert!(answered_bound(1492, 1500) >= 0.99);
        assert!(answered_bound(1455, 1500) < 0.99);
        assert!(answered_bound(90, 100) < 0.99);
        assert_eq!(answered_bound(100, 100), 1.0);
        assert_eq!(answered_bound(0, 0), 0.0);
        assert!(answered_bound(0, 1000) < 0.01);
    }

    /// Every built-in experiment reads, and names only known figures, columns and rows.
    #[test]
    fn builtins_parse() {
        for (name, text) in BUILTIN {
            let spec = parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(spec.name, *name);
            assert!(!runner::steps(&spec, true).is_empty());
            // Every row a check names is made by the runs (with --quick some checks may name
            // rows not made: they say "n/a"), every baseline row with --quick too.
            for quick in [false, true] {
                let rows: Vec<String> = runner::steps(&spec, quick).into_iter().map(|s| s.row).collect();
                for c in spec.checks.iter().filter(|_| !quick) {
                    for r in c.row.iter().chain(&c.to).chain(c.higher.iter().flatten()).chain(c.lower.iter().flatten())
                    {
                        assert!(rows.contains(r), "{name}: check '{}' names row '{r}' not made", c.says);
                    }
                }
                for c in &spec.columns {
                    for r in c.ratio_to.iter().chain(&c.factor_of) {
                        assert!(rows.contains(r), "{name}: column '{}' baseline '{r}' not made", c.name);
                    }
                }
            }
        }
    }

    /// A mistake names the file and its line.
    #[test]
    fn errors_name_the_line() {
        const HEAD: &str = "name = \"x\"\ntitle = \"t\"\nsource = \"s\"\n";
        const COLUMN: &str = "[[columns]]\nname = \"q\"\nfigure = \"qps\"\n";
        for (body, column, starts) in [
            ("[[runs]]\ntransport = [\"udp\", \"dtt\"]\n", true, "x.toml:5: unknown transport 'dtt'"),
            ("[[runs]]\ncount = \"many\"\n", false, "x.toml:5: "),
            ("bogus = 1\n", false, "x.toml:4: "),
            (
                "[[runs]]\ntransport = [\"doq\"]\nconn_rate = 0\n",
                true,
                "x.toml:6: conn_rate 0: expected new connections per second above 0",
            ),
            ("[[runs]]\nserver = { idle_timeout = \"soon\" }\n", true, "x.toml:5: server.idle_timeout 'soon'"),
        ] {
            let text = format!("{HEAD}{body}{}", if column { COLUMN } else { "" });
            let e = parse("x.toml", &text).unwrap_err().to_string();
            assert!(e.starts_with(starts), "{e}");
        }
    }

    /// A few lines that would name more runs than anyone can measure (and whose plan would take
    /// the memory) are turned away with the line of their [[runs]] block.
    #[test]
    fn too_many_runs_are_refused() {
        const COLUMN: &str = "[[columns]]\nname = \"q\"\nfigure = \"qps\"\n";
        let list = |v: &str, n: usize| vec![v; n].join(", ");
        let text = format!(
            "name = \"x\"\ntitle = \"t\"\nsource = \"s\"\n[[runs]]\ntransport = [{}]\nkey = [{}]\nconnections = [{}]\n{COLUMN}",
            list("\"udp\"", 50),
            list("\"p256\"", 50),
            list("1", 50)
        );
        let e = parse("x.toml", &text).unwrap_err().to_string();
        assert!(e.starts_with("x.toml:4: the [[runs]] blocks name 125000 runs"), "{e}");
        let text =
            "name = \"x\"\ntitle = \"t\"\nsource = \"s\"\n[[runs]]\nrepetitions = 4000000000\n".to_string() + COLUMN;
        let e = parse("x.toml", &text).unwrap_err().to_string();
        assert!(e.contains("name 4000000000 runs"), "{e}");
        // The built-in experiments are far below the bound.
        let text = format!(
            "name = \"x\"\ntitle = \"t\"\nsource = \"s\"\n[[runs]]\ntransport = [{}]\n{COLUMN}",
            list("\"udp\"", 99)
        );
        assert!(parse("x.toml", &text).is_ok());
    }

    /// Verdicts come from the figures: head-of-line's with DoT not blocking and UDP blocking
    /// say "differs", and the real shape "holds".
    #[test]
    fn verdicts_are_computed() {
        let (_, text) = load("head-of-line").unwrap();
        let spec = parse("head-of-line", &text).unwrap();
        let fig = |held: f64| {
            let mut m = std::collections::BTreeMap::new();
            m.insert("held_up".to_string(), vec![held]);
            m.insert("delayed".to_string(), vec![4.0]);
            m.insert("slow".to_string(), vec![held + 4.0]);
            m.insert("p50_ms".to_string(), vec![1.0]);
            m.insert("max_ms".to_string(), vec![1000.0]);
            m
        };
        let shape = |udp: f64, dot: f64| -> check::Measured {
            vec![
                ("udp".into(), fig(udp)),
                ("dot".into(), fig(dot)),
                ("doh1".into(), fig(dot)),
                ("doh2".into(), fig(0.0)),
                ("doh3".into(), fig(0.0)),
                ("doq".into(), fig(0.0)),
            ]
        };
        let good = evaluate(&spec, &shape(0.0, 70.0));
        assert!(good.holds(), "{:?}", good.verdicts);
        let bad = evaluate(&spec, &shape(30.0, 0.0));
        assert!(!bad.holds());
        let udp = bad.rows.iter().find(|r| r.name == "udp").unwrap();
        assert_eq!(udp.verdict, "differs");
        let mut text = Vec::new();
        output::write_text(&spec, &bad, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("differs"), "{text}");
    }
    /// A figure repeated shows its lowest and highest beside the middle one; a ratio does not
    /// (its repetitions are of the figure before the ratio).
    #[test]
    fn repetitions_show_their_spread() {
        let (_, text) = load("transport-cost").unwrap();
        let spec = parse("transport-cost", &text).unwrap();
        let fig = |qps: Vec<f64>, cpu: f64| {
            let mut m = std::collections::BTreeMap::new();
            m.insert("qps".to_string(), qps);
            m.insert("server_cpu_us".to_string(), vec![cpu]);
            m
        };
        let measured: check::Measured = vec![
            ("udp".into(), fig(vec![100_000.0, 90_000.0, 120_000.0], 3.0)),
            ("tcp-100".into(), fig(vec![40_000.0], 9.0)),
        ];
        let ev = evaluate(&spec, &measured);
        let mut out = Vec::new();
        output::write_text(&spec, &ev, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let udp = out.lines().find(|l| l.starts_with("UDP ")).unwrap();
        assert!(
            udp.contains(&format!("{} [{}-{}]", check::num(100_000.0), check::num(90_000.0), check::num(120_000.0))),
            "{out}"
        );
        let tcp = out.lines().find(|l| l.starts_with("tcp-100")).unwrap();
        assert!(!tcp.contains('['), "one repetition, no spread: {tcp}");
        assert!(out.contains("(in square brackets: the lowest and highest"), "{out}");
    }

    /// clients-served judges by clients per server core: derived where the generator stopped a
    /// search (marked *), so the server's key types order the rows even when every search
    /// reached the same lower bound; a row derived the wrong way round makes a check differ.
    #[test]
    fn clients_served_verdicts_use_the_targets_figure() {
        let (_, text) = load("clients-served").unwrap();
        let spec = parse("clients-served", &text).unwrap();
        // Every search reached 800 (the generator's bound); the server's own figure differs.
        let fig = |per_core: f64| {
            let mut m = std::collections::BTreeMap::new();
            m.insert("limit".to_string(), vec![800.0]);
            m.insert("limit_target".to_string(), vec![per_core]);
            m.insert(figures::derived("limit_target"), vec![1.0]);
            m
        };
        let shape = |rsa2048: f64| -> check::Measured {
            vec![
                ("udp".into(), fig(40000.0)),
                ("tcp-idle10s".into(), fig(20000.0)),
                ("tcp-1q".into(), fig(6000.0)),
                ("dot-p256".into(), fig(10000.0)),
                ("dot-ed25519".into(), fig(9000.0)),
                ("dot-rsa2048".into(), fig(rsa2048)),
                ("dot-rsa3072".into(), fig(1000.0)),
                ("dot-ed25519-1q".into(), fig(800.0)),
                ("doh2-ed25519".into(), fig(5000.0)),
            ]
        };
        let good = evaluate(&spec, &shape(4000.0));
        assert!(good.holds(), "{:?}", good.verdicts);
        let dot = good.rows.iter().find(|r| r.name == "dot-ed25519").unwrap();
        assert!(dot.cells["per_core"].derived);
        assert_eq!(dot.cells["per_core"].measured, Some(9000.0));
        assert_eq!(dot.cells["fewer"].measured, Some(40000.0 / 9000.0));
        assert_eq!(dot.cells["clients"].measured, Some(800.0));
        let mut text = Vec::new();
        output::write_text(&spec, &good, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("9000*") && text.contains("(*: derived, not measured: limit_target"), "{text}");
        // RSA-2048 derived above P-256: the study's order does not hold.
        let bad = evaluate(&spec, &shape(12000.0));
        assert!(!bad.holds());
        assert_eq!(bad.rows.iter().find(|r| r.name == "dot-rsa2048").unwrap().verdict, "differs");
    }
}
