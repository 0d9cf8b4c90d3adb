//! `volley experiment`: every built-in experiment runs with --quick against the embedded
//! responder and fills its table (every row, every column, the study's figures beside them);
//! head-of-line finds the blocking where the study did; verdicts are computed; a mistake in an
//! experiment file names FILE:LINE with exit code 2.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

/// Runs `volley experiment ARGS`.
fn experiment(args: &[&str]) -> Output {
    let mut cmd = Command::new(volley());
    cmd.arg("experiment").args(args);
    run_cmd(&mut cmd, RUN_WAIT)
}

/// Runs a built-in experiment with --quick, checks that its table has every row and column
/// measured, the study's figures shown, and returns the JSON document and the text.
fn quick(name: &str) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    quick_to(name, &dir.path().join("exp.json"))
}

/// `volley report --experiment PATH`: the HTML page, written beside the document.
fn html_report(path: &std::path::Path) -> String {
    let page = path.with_extension("html");
    let mut cmd = Command::new(volley());
    cmd.args(["report", "--experiment", path.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    let out = run_cmd(&mut cmd, RUN_WAIT);
    assert!(out.status.success(), "{}", out.stderr);
    std::fs::read_to_string(&page).unwrap()
}

/// [`quick`], the JSON document written to `path`.
fn quick_to(name: &str, path: &std::path::Path) -> (Value, String) {
    let out = experiment(&["run", name, "--quick", "--progress", "never", "-o", path.to_str().unwrap()]);
    assert!(out.status.success(), "{name}: {}\n{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(doc["schema"], "volley.experiment/1");
    assert_eq!(doc["spec"]["name"], name);
    assert_eq!(doc["quick"], true);
    let columns: Vec<String> =
        doc["spec"]["columns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
    let rows = doc["table"]["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{name}: no rows");
    let steps = doc["steps"].as_array().unwrap();
    for r in rows {
        let row = r["name"].as_str().unwrap();
        for c in &columns {
            let cell = &r["cells"][c];
            assert!(cell["measured"].is_number(), "{name}: row {row}, column {c} not measured: {cell}\n{}", out.stdout);
            if let Some(study) = cell["study"].as_f64() {
                // The study's figure is beside the measured one in the text.
                let label = format!("{}  ", r["label"].as_str().unwrap());
                let line = out.stdout.lines().find(|l| l.starts_with(&label)).unwrap();
                let shown = if study.fract() == 0.0 { format!("({study:.0}") } else { format!("({study}") };
                assert!(line.contains(&shown[..shown.len().min(4)]), "{name}: row {row}: {line}");
            }
        }
        // Every run of the row is there in full, and its accounting balances.
        let runs: Vec<&Value> = steps.iter().filter(|s| s["row"] == row).collect();
        assert!(!runs.is_empty(), "{name}: row {row} has no runs");
        for s in runs {
            for res in s["results"].as_array().unwrap() {
                assert_eq!(res["schema"], "volley.results/1");
                check_accounting(res);
            }
        }
    }
    // A verdict per check, computed (holds or not), and each in the text.
    for v in doc["table"]["verdicts"].as_array().unwrap() {
        assert!(v["holds"].is_boolean());
        assert!(out.stdout.contains(v["says"].as_str().unwrap()), "{name}: {v}");
    }
    (doc, out.stdout)
}

/// The measured value of a row's column.
fn cell(doc: &Value, row: &str, column: &str) -> f64 {
    let r = doc["table"]["rows"].as_array().unwrap().iter().find(|r| r["name"] == row).unwrap();
    r["cells"][column]["measured"].as_f64().unwrap()
}

/// seeds/003: 100 queries, 1 in 25 delayed by 1 s. The server delays exactly 4 on every
/// transport; DoT (answered in order, as the study's servers did) and pipelined DoH/1.1 hold
/// up queries behind them, UDP and DoH/2 hold up none; DoT answered out of order holds up none.
#[test]
fn head_of_line_blocks_dot_and_doh1_not_udp_and_doh2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hol.json");
    let (doc, text) = quick_to("head-of-line", &path);
    for row in ["udp", "dot", "doh1", "doh2", "doh3", "doq", "dot-ooo"] {
        assert_eq!(cell(&doc, row, "delayed"), 4.0, "{row}\n{text}");
    }
    for t in ["udp", "dot", "doh1", "doh2", "doh3", "doq"] {
        let row = format!("{t}-baseline");
        assert_eq!(cell(&doc, &row, "delayed"), 0.0, "{row}\n{text}");
        assert_eq!(cell(&doc, &row, "held_up"), 0.0, "{row}\n{text}");
    }
    timeline_of_every_query(&doc, &path, &text);
    assert!(cell(&doc, "dot", "held_up") >= 1.0, "{text}");
    assert!(cell(&doc, "doh1", "held_up") >= 1.0, "{text}");
    assert_eq!(cell(&doc, "udp", "held_up"), 0.0, "{text}");
    assert_eq!(cell(&doc, "doh2", "held_up"), 0.0, "{text}");
    assert_eq!(cell(&doc, "dot-ooo", "held_up"), 0.0, "{text}");
    assert_eq!(doc["holds"], true, "{text}");
}

/// Each query's response time in the head-of-line document: row -> latency (ms) by index.
fn traces(doc: &Value) -> Vec<(String, String, Vec<f64>)> {
    let mut out = Vec::new();
    for st in doc["steps"].as_array().unwrap() {
        let row = st["row"].as_str().unwrap().to_string();
        let trace = &st["results"][0]["query_trace"];
        assert_eq!(trace["limit"], 100, "{row}: {trace}");
        let qs = trace["queries"].as_array().unwrap();
        assert_eq!(qs.len(), 100, "{row}: a trace of every query");
        let lat: Vec<f64> = qs
            .iter()
            .enumerate()
            .map(|(i, q)| {
                assert_eq!(q["index"], i as u64, "{row}: in order of issue");
                assert_eq!(q["fate"], "answered", "{row}: {q}");
                q["latency_ns"].as_f64().unwrap() / 1e6
            })
            .collect();
        out.push((row, st["point"]["transport"].as_str().unwrap().to_string(), lat));
    }
    out
}

/// seeds/003's figure 1: every run keeps each query's response time in order of issue
/// (`query_trace`); the queries the server delayed (those slow over UDP: nothing holds one UDP
/// query up behind another) are slow on every transport, nothing is slow in the baseline, and
/// DoH/2 is slow on those alone. `volley report --experiment` draws a timeline per run: one per
/// transport in the baseline and in the delayed block, its delayed queries marked.
fn timeline_of_every_query(doc: &Value, path: &std::path::Path, text: &str) {
    let all = traces(doc);
    let slow = |lat: &[f64]| -> Vec<usize> { (0..lat.len()).filter(|&i| lat[i] >= 500.0).collect() };
    let udp = &all.iter().find(|(r, _, _)| r == "udp").unwrap().2;
    let delayed = slow(udp);
    assert_eq!(delayed.len() as f64, cell(doc, "udp", "delayed"), "{text}");
    for (row, transport, lat) in &all {
        if row.ends_with("-baseline") {
            assert!(slow(lat).is_empty(), "{row}: slow without a delay: {lat:?}");
        } else if transport == "doh3" || transport == "doq" {
            // Over QUIC the server may take two streams that left together in the other order
            // (the rule delays the Nth query it sees): as many slow as delayed, each next to a
            // delayed one, and none held up.
            let s = slow(lat);
            assert_eq!(s.len(), delayed.len(), "{row}: slow {s:?}, delayed {delayed:?}");
            for (&a, &b) in s.iter().zip(&delayed) {
                assert!(a.abs_diff(b) <= 2, "{row}: slow {s:?}, delayed {delayed:?}");
            }
        } else {
            for &i in &delayed {
                assert!(lat[i] >= 500.0, "{row}: delayed query {i} answered in {} ms", lat[i]);
            }
        }
    }
    let doh2 = &all.iter().find(|(r, _, _)| r == "doh2").unwrap().2;
    assert_eq!(slow(doh2), delayed, "DoH/2: only the delayed queries are slow");
    let dot = &all.iter().find(|(r, _, _)| r == "dot").unwrap().2;
    assert!(slow(dot).len() > delayed.len(), "DoT in order: queries held up behind the delayed ones");
    // In order, a query waits for the slow one before it, never for one after it: the
    // responder writes what it has when the request in hand waits (DoH/1.1 held every
    // pipelined answer until the first delayed one was answered).
    let first = delayed[0];
    for row in ["dot", "doh1"] {
        let lat = &all.iter().find(|(r, _, _)| r == row).unwrap().2;
        assert!(
            lat[..first].iter().all(|&l| l < 500.0),
            "{row}: held up before the first delayed query {first}: {lat:?}"
        );
    }

    let html = html_report(path);
    assert!(html.contains("data-chart=\"head-of-line_timelines\""), "no timeline figure");
    let charts: Vec<&str> =
        html.split("<svg class=\"timeline\"").skip(1).map(|c| &c[..c.find("</svg>").unwrap()]).collect();
    assert_eq!(charts.len(), all.len(), "one timeline per run");
    for (row, transport, _) in &all {
        let head = format!(" data-row=\"{row}\" data-transport=\"{transport}\"");
        let chart = charts.iter().find(|c| c.starts_with(&head)).unwrap_or_else(|| panic!("no timeline of {row}"));
        assert_eq!(chart.matches("<circle ").count(), 100, "{row}: a point per query");
        let marked = chart.matches("<circle class=\"delayed\"").count();
        if row.ends_with("-baseline") || row == "dot-ooo" {
            // No delay; or no UDP run in its block to tell the delays apart.
            assert_eq!(marked, 0, "{row}");
        } else {
            assert_eq!(marked, delayed.len(), "{row}: the delayed queries marked");
            for &i in &delayed {
                assert!(chart.contains(&format!("class=\"delayed\" data-q=\"{i}\"")), "{row}: query {i}");
            }
        }
    }
    let dot = charts.iter().find(|c| c.starts_with(" data-row=\"dot\"")).unwrap();
    assert!(dot.contains("class=\"held-up\""), "DoT's held-up queries marked");
    let doh2 = charts.iter().find(|c| c.starts_with(" data-row=\"doh2\"")).unwrap();
    assert!(!doh2.contains("class=\"held-up\""), "DoH/2 holds up none");
}

/// head-of-line against servers of the user's (`--target`): the server cannot say which answers
/// it delayed, so the UDP row's slow answers are taken as its own delays (nothing holds up UDP)
/// and `held_up` is a row's slow answers beyond them. The embedded responder started as an
/// external target (delaying 1 in 25 by 1 s, TCP and DoT in order) shows DoT holding up queries,
/// UDP none, as against the responder the experiment starts itself; without a UDP target no
/// `held_up` is derived.
#[test]
fn head_of_line_against_a_target_derives_held_up_from_udp() {
    let server = Server::start_encrypted(&["--delay", "1s:1/25", "--in-order"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hol.json");
    let (udp, dot) = (format!("udp={}", server.url("udp")), format!("dot={}", server.url("tls")));
    let out = experiment(&[
        "run",
        "head-of-line",
        "--quick",
        "--progress",
        "never",
        "--target",
        &udp,
        "--target",
        &dot,
        "--ca",
        server.ca_str(),
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let text = &out.stdout;
    // Its UDP row's slow answers: the server's 4 delays of 100 queries.
    assert_eq!(cell(&doc, "udp", "delayed"), 4.0, "{text}");
    assert_eq!(cell(&doc, "udp", "held_up"), 0.0, "{text}");
    assert_eq!(cell(&doc, "dot", "delayed"), 4.0, "{text}");
    assert!(cell(&doc, "dot", "held_up") >= 1.0, "DoT in order holds up queries: {text}");
    // Its slow answers are the delayed ones and the held-up ones.
    let dot_step = doc["steps"].as_array().unwrap().iter().find(|s| s["row"] == "dot").unwrap();
    assert_eq!(dot_step["figures"]["slow"].as_f64().unwrap(), 4.0 + cell(&doc, "dot", "held_up"));
    assert!(dot_step["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("UDP row's 4 slow")));
    // Rows on the embedded responder keep its own count.
    assert_eq!(cell(&doc, "doh2", "held_up"), 0.0, "{text}");
    // The dot-ooo block has no UDP row: nothing derived.
    let ooo = doc["table"]["rows"].as_array().unwrap().iter().find(|r| r["name"] == "dot-ooo").unwrap();
    assert!(ooo["cells"]["held_up"]["measured"].is_null(), "{ooo}");
    assert_eq!(doc["holds"], true, "{text}");

    // Without a UDP target: no held_up for the DoT target.
    let file = dir.path().join("dot-only.toml");
    std::fs::write(
        &file,
        "name = \"dot-only\"\ntitle = \"t\"\nsource = \"s\"\n[[runs]]\ntransport = [\"udp\", \"dot\"]\n\
         queries = \"random\"\ncount = 50\nconcurrency = 50\nconnections = [1]\ntimeout = \"5s\"\n\
         [[columns]]\nname = \"held_up\"\nfigure = \"held_up\"\n",
    )
    .unwrap();
    let out = experiment(&[
        "run",
        file.to_str().unwrap(),
        "--progress",
        "never",
        "--target",
        &dot,
        "--ca",
        server.ca_str(),
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let row = |n: &str| doc["table"]["rows"].as_array().unwrap().iter().find(|r| r["name"] == n).unwrap().clone();
    assert!(row("dot")["cells"]["held_up"]["measured"].is_null(), "{}", out.stdout);
    // The UDP row ran against the embedded responder, which counts its own delays (none here).
    assert_eq!(row("udp")["cells"]["held_up"]["measured"], 0.0, "{}", out.stdout);
}

#[test]
fn overhead_quick() {
    let (doc, _) = quick("overhead");
    // UDP is its own baseline.
    assert_eq!(cell(&doc, "udp", "bytes_x"), 1.0);
}

#[test]
fn transport_cost_quick() {
    quick("transport-cost");
}

/// Where a row's search stopped before the server's limit (the generator's pace, or the most
/// tried kept up), its clients per server core are derived from the server's CPU, marked * in
/// the text and the HTML report; where the server set the limit, they are the limit found.
#[test]
fn clients_served_quick() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exp.json");
    let (doc, text) = quick_to("clients-served", &path);
    let steps = doc["steps"].as_array().unwrap();
    let mut derived = 0;
    for r in doc["table"]["rows"].as_array().unwrap() {
        let row = r["name"].as_str().unwrap();
        let lower_bound = steps
            .iter()
            .filter(|s| s["row"] == row)
            .flat_map(|s| s["warnings"].as_array().unwrap())
            .any(|w| w.as_str().unwrap().contains("lower bound"));
        let cell = &r["cells"]["per_core"];
        assert_eq!(
            cell["derived"] == true,
            lower_bound,
            "{row}: derived where the search stopped first: {cell}\n{text}"
        );
        let line = text.lines().find(|l| l.starts_with(&format!("{}  ", r["label"].as_str().unwrap()))).unwrap();
        if lower_bound {
            derived += 1;
            assert!(line.contains('*'), "{row}: marked: {line}");
        } else {
            assert_eq!(cell["measured"], r["cells"]["clients"]["measured"], "{row}: the limit found\n{text}");
        }
    }
    if derived > 0 {
        assert!(text.contains("(*: derived, not measured: limit_target"), "{text}");
        let html = html_report(&path);
        assert!(html.contains("<p class=\"muted\" data-derived>"), "the HTML table says which cells are derived");
        assert!(html.contains("*</td>") || html.contains("* ("), "a derived cell is marked in the HTML table");
    }
}

#[test]
fn handshakes_quick() {
    let (doc, text) = quick("handshakes");
    // The link's RTT is seen: a TCP handshake is one round trip, TLS over TCP two.
    assert!((0.8..1.5).contains(&cell(&doc, "tcp", "rtts")), "{text}");
    assert!(cell(&doc, "dot-fresh", "rtts") > 1.6, "{text}");
    // Anti-amplification (seeds/002): with its small chain the DoQ server's first flight fits
    // in three times the client's Initial (1 RTT); with a 6,000-byte chain it waits for the
    // client's acknowledgement (2 RTTs), on every fresh connection. Resumed, the server sends
    // no certificate: only the first connection (of 4) takes 2.
    assert!(cell(&doc, "doq-fresh", "rtts") < 1.4, "{text}");
    assert_eq!(cell(&doc, "doq-fresh", "two_rtt"), 0.0, "{text}");
    assert!((1.6..2.5).contains(&cell(&doc, "doq-bigchain-fresh", "rtts")), "{text}");
    assert_eq!(cell(&doc, "doq-bigchain-fresh", "two_rtt"), 1.0, "{text}");
    assert!(cell(&doc, "doh3-bigchain-fresh", "rtts") > 1.6, "{text}");
    assert!(cell(&doc, "doq-bigchain-resumed", "two_rtt") < 0.5, "{text}");
    // Address validation tokens (NEW_TOKEN), TLS fresh: the client of the fresh rows keeps
    // none; with tokens, every connection after the first presents the previous one's (one
    // may now and then come too late: see the link test) and takes 1 RTT; a server that
    // ignores them (seeds/002's resolvers) keeps the second RTT for every one.
    assert_eq!(cell(&doc, "doq-bigchain-fresh", "tokens"), 0.0, "{text}");
    for row in ["doq-bigchain-token", "doh3-bigchain-token", "doq-bigchain-token-ignored"] {
        assert!(cell(&doc, row, "tokens") >= 0.5, "{row}: {text}");
    }
    assert!(cell(&doc, "doq-bigchain-token", "rtts") < 1.4, "{text}");
    assert!(cell(&doc, "doq-bigchain-token", "two_rtt") < 0.6, "{text}");
    assert!(cell(&doc, "doh3-bigchain-token", "rtts") < 1.4, "{text}");
    assert_eq!(cell(&doc, "doq-bigchain-token-ignored", "two_rtt"), 1.0, "{text}");
    let v = doc["table"]["verdicts"].as_array().unwrap();
    for check in ["skips the anti-amplification wait", "ignores the token"] {
        let c = v.iter().find(|v| v["says"].as_str().unwrap().contains(check)).unwrap();
        assert_eq!(c["holds"], true, "{c}");
    }
    let amp = v.iter().find(|v| v["says"].as_str().unwrap().contains("anti-amplification)")).unwrap();
    assert_eq!(amp["holds"], true, "{amp}");
}

#[test]
fn network_profiles_quick() {
    quick("network-profiles");
}

/// `list` names exactly the built-in experiments; `show` prints one's file.
#[test]
fn list_and_show() {
    let out = experiment(&["list"]);
    assert!(out.status.success(), "{}", out.stderr);
    let names: Vec<&str> =
        out.stdout.lines().filter(|l| !l.starts_with(' ')).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(
        names,
        ["head-of-line", "overhead", "transport-cost", "clients-served", "handshakes", "network-profiles"],
        "{}",
        out.stdout
    );
    let out = experiment(&["show", "head-of-line"]);
    assert!(out.status.success());
    assert!(out.stdout.contains("name = \"head-of-line\""), "{}", out.stdout);
    let out = experiment(&["show", "nonesuch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stderr.contains("no experiment 'nonesuch'"), "{}", out.stderr);
}

/// A mistake in a user's experiment file: one line naming FILE:LINE, exit code 2, nothing run.
#[test]
fn a_bad_file_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, usize, &str)] = &[
        // A transport that does not exist, on line 5.
        ("name = \"x\"\ntitle = \"t\"\nsource = \"s\"\n[[runs]]\ntransport = [\"udp\", \"dtt\"]\n[[columns]]\nname = \"q\"\nfigure = \"qps\"\n", 5, "unknown transport 'dtt'"),
        // A number where text belongs, on line 6.
        ("name = \"x\"\ntitle = \"t\"\nsource = \"s\"\n\n[[runs]]\ncount = \"many\"\n[[columns]]\nname = \"q\"\nfigure = \"qps\"\n", 6, ""),
        // A figure that does not exist, on line 8.
        ("name = \"x\"\ntitle = \"t\"\nsource = \"s\"\n[[runs]]\ncount = 1\n[[columns]]\nname = \"q\"\nfigure = \"qqs\"\n", 8, "unknown figure 'qqs'"),
        // Not TOML at all, line 2.
        ("name = \"x\"\ntitle = \n", 2, ""),
    ];
    for (i, (text, line, what)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = experiment(&["run", path.to_str().unwrap(), "--quick"]);
        assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
        let want = format!("volley: error: {}:{line}: ", path.display());
        assert!(out.stderr.starts_with(&want), "wanted {want}, got {}", out.stderr);
        assert!(out.stderr.contains(what), "{}", out.stderr);
        assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
        assert!(out.stdout.is_empty());
    }
}

/// A user's experiment whose check says the opposite of what is measured: the verdict,
/// computed from the run, is "differs" (and by how much).
#[test]
fn a_check_that_does_not_hold_says_differs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.toml");
    std::fs::write(
        &path,
        r#"name = "mine"
title = "UDP held up?"
source = "none"
[[runs]]
transport = ["udp"]
queries = "random"
count = 50
concurrency = 50
server = { delay = "600ms:1/25" }
[[columns]]
name = "held_up"
figure = "held_up"
[[columns]]
name = "delayed"
figure = "delayed"
[[checks]]
says = "UDP holds up at least 5"
column = "held_up"
row = "udp"
min = 5
"#,
    )
    .unwrap();
    let out = experiment(&["run", path.to_str().unwrap(), "--progress", "never"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("DIFFERS UDP holds up at least 5: held_up of udp 0, study at least 5"),
        "{}",
        out.stdout
    );
    let udp = out.stdout.lines().find(|l| l.starts_with("udp")).unwrap();
    assert!(udp.ends_with("differs"), "{udp}");
    let cells: Vec<&str> = udp.split_whitespace().collect();
    assert_eq!(cells, ["udp", "0", "2", "differs"], "two of 50 delayed, none held up: {udp}");
}

/// Against the embedded responder both ends of a connection are volley's: a step that could
/// not open its connections for want of open files is not measured, and says why, where it
/// would otherwise have shown its own EMFILE as the server's figure; the steps within the
/// limit run.
#[test]
fn connections_beyond_the_open_files_limit_are_not_measured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("files.toml");
    std::fs::write(
        &path,
        r#"name = "files"
title = "connections against the open-files limit"
source = "none"
[[runs]]
row = "{transport}-{connections}"
transport = ["tcp"]
connections = [10, 400]
concurrency = 20
count = 200
[[columns]]
name = "qps"
figure = "qps"
"#,
    )
    .unwrap();
    let json = dir.path().join("files.json");
    let mut cmd = Command::new(require("prlimit"));
    cmd.arg("--nofile=300:300").arg(volley()).arg("experiment").arg("run").arg(&path);
    cmd.args(["--progress", "never", "-o", json.to_str().unwrap()]);
    let out = run_cmd(&mut cmd, RUN_WAIT);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let row = |name: &str| out.stdout.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    let small = row("tcp-10 ");
    let qps: f64 = small.split_whitespace().nth(1).and_then(|q| q.parse().ok()).unwrap_or(0.0);
    assert!(qps > 0.0, "tcp-10 measured: {small}\n{}", out.stdout);
    let big = row("tcp-400 ");
    assert!(
        !big.is_empty() && big.split_whitespace().nth(1).and_then(|q| q.parse::<f64>().ok()).is_none(),
        "tcp-400 not measured: {big}\n{}",
        out.stdout
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let text = doc.to_string();
    assert!(
        text.contains("of 400 connections opened:") && text.contains("no open file left in volley's process"),
        "the step says why: {text}"
    );
}

/// `--server NAME`: volley writes the server's configuration, starts it on one core and
/// measures it over the transports it serves (`served`); the others are said not to be
/// measured. The server's CPU per query comes from its process, and the document names the
/// server (name, version, core, pid, the configuration written).
fn against_server(name: &str, served: &[&str]) {
    require(name);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exp.json");
    let out = experiment(&[
        "run",
        "overhead",
        "--quick",
        "--server",
        name,
        "--server-cpu",
        "0",
        "--progress",
        "never",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains(&format!("{name} started on core 0")), "{}", out.stderr);
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let server = &doc["server"];
    assert_eq!(server["name"], name, "{server}");
    assert_eq!(server["cpu"], 0, "{server}");
    assert!(!server["version"].as_str().unwrap().is_empty(), "{server}");
    assert!(server["config"].as_str().unwrap().contains("example.test"), "{server}");
    let pid = server["pid"].as_u64().unwrap();
    let mut measured = 0;
    for s in doc["steps"].as_array().unwrap() {
        let row = s["row"].as_str().unwrap();
        let transport = row.split('-').next().unwrap();
        if !served.contains(&transport) {
            assert!(s["results"].as_array().unwrap().is_empty(), "{row}");
            assert!(s["warnings"][0].as_str().unwrap().contains(&format!("{name} does not serve")), "{s}");
        } else {
            measured += 1;
            assert!(cell(&doc, row, "bytes") > 0.0, "{row}\n{}", out.stdout);
            let res = &s["results"][0];
            check_accounting(res);
            assert!(res["totals"]["answered"].as_u64().unwrap() > 0, "{row}: {res}");
            assert!(res["target_cpu"]["cpu_s"].as_f64().unwrap() > 0.0, "{row}: {name}'s CPU: {res}");
            let target = s["target"].as_str().unwrap();
            assert!(target.contains("127.0.0.1") || target.contains("localhost"), "{target}");
        }
    }
    // udp, and a fresh and a persistent row per connected transport served.
    assert_eq!(measured, 1 + 2 * (served.len() - 1), "{}", out.stdout);
    let doh3 = out.stdout.lines().find(|l| l.starts_with("DoH/3 fresh")).unwrap();
    assert!(doh3.ends_with("not measured"), "{doh3}");
    // Nothing of the server is left running.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "{name} {pid} still running");
}

#[test]
fn an_experiment_against_unbound_started_by_volley() {
    against_server("unbound", &["udp", "tcp", "dot", "doh2"]);
}

#[test]
fn an_experiment_against_kresd_started_by_volley() {
    against_server("kresd", &["udp", "tcp", "dot", "doh2"]);
}

/// dnsdist answers itself (SpoofAction, no backend).
#[test]
fn an_experiment_against_dnsdist_started_by_volley() {
    against_server("dnsdist", &["udp", "tcp", "dot", "doh2"]);
}

/// named (BIND 9) authoritative for a wildcard zone.
#[test]
fn an_experiment_against_named_started_by_volley() {
    against_server("named", &["udp", "tcp", "dot", "doh2"]);
}

/// `volley report --experiment`: the page of experiment documents holds each study's table
/// (every row), every check with its verdict, and the study's charts (each row's response time
/// or handshake-to-RTT CDF, a bar chart per column); a file of another schema is exit 2.
#[test]
fn report_of_experiments() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["report".to_string()];
    let mut docs = Vec::new();
    for name in ["head-of-line", "handshakes"] {
        let path = dir.path().join(format!("{name}.json"));
        let out = experiment(&["run", name, "--quick", "--progress", "never", "-o", path.to_str().unwrap()]);
        assert!(out.status.success(), "{name}: {}\n{}", out.stdout, out.stderr);
        docs.push(serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap()).unwrap());
        args.extend(["--experiment".to_string(), path.to_str().unwrap().to_string()]);
    }
    let page = dir.path().join("page.html");
    args.extend(["-o".to_string(), page.to_str().unwrap().to_string()]);
    let out = run_cmd(Command::new(volley()).args(&args), RUN_WAIT);
    assert!(out.status.success(), "{}", out.stderr);
    let html = std::fs::read_to_string(&page).unwrap();
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('\'', "&#39;");
    for doc in &docs {
        let name = doc["spec"]["name"].as_str().unwrap();
        assert!(html.contains(&esc(doc["spec"]["source"].as_str().unwrap())), "{name}: the study");
        for r in doc["table"]["rows"].as_array().unwrap() {
            assert!(html.contains(&format!("<td>{}</td>", esc(r["label"].as_str().unwrap()))), "{name}: row {r}");
        }
        let checks = doc["table"]["verdicts"].as_array().unwrap();
        for v in checks {
            let word = if v["holds"] == true { "holds" } else { "DIFFERS" };
            let line =
                format!("{word}</b> {}: {}", esc(v["says"].as_str().unwrap()), esc(v["detail"].as_str().unwrap()));
            assert!(html.contains(&line), "{name}: check {line}");
        }
        for c in doc["spec"]["columns"].as_array().unwrap() {
            let id = format!("data-chart=\"{name}_{}_bars\"", c["name"].as_str().unwrap());
            assert!(html.contains(&id), "{name}: {id}");
        }
    }
    assert_eq!(
        html.matches("<li data-check>").count(),
        docs.iter().map(|d| d["table"]["verdicts"].as_array().unwrap().len()).sum::<usize>()
    );
    // The studies' distributions: 003's response times, 002's handshakes in RTTs.
    for id in ["head-of-line_response_cdf", "handshakes_handshake_rtts"] {
        let at = html.find(&format!("data-chart=\"{id}\"")).unwrap_or_else(|| panic!("no chart {id}"));
        assert!(html[at..].split("</figure>").next().unwrap().contains("<polyline"), "{id} draws nothing");
    }
    // A results file is not an experiment: exit 2, naming it.
    let bogus = dir.path().join("bogus.json");
    std::fs::write(&bogus, r#"{"schema": "volley.results/1"}"#).unwrap();
    let out = run_cmd(
        Command::new(volley()).args(["report", "--experiment", bogus.to_str().unwrap(), "-o", page.to_str().unwrap()]),
        RUN_WAIT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("bogus.json") && out.stderr.contains("volley.experiment/1"), "{}", out.stderr);
}
