//! `merge` and `compare` on hand-built results with known answers.

mod common;

use common::*;
use volley_metrics::{Histogram, LatencySummary, Status};
use volley_report::*;

fn lat_a() -> Vec<u64> {
    (0..3000u64).map(|i| 80_000 + i * i % 700_000).collect()
}

fn lat_b() -> Vec<u64> {
    (0..2000u64).map(|i| 300_000 + i * 7919 % 9_000_000).collect()
}

#[test]
fn merged_histograms_equal_one_run_over_all_values() {
    let a = named("a", &Spec { latencies: lat_a(), nxdomain_every: Some(10), timed_out: 4, ..Spec::default() });
    let b = named("b", &Spec { latencies: lat_b(), failed: 2, ..Spec::default() });
    let m = merge_runs(&[a.clone(), b.clone()], vec!["volley".into(), "merge".into()]).unwrap();
    let r = &m.result;

    let mut all = Histogram::new(3);
    for v in lat_a().into_iter().chain(lat_b()) {
        all.record(v);
    }
    let one = LatencySummary::of(&all);
    assert_eq!(r.latency.count, 5000);
    assert_eq!(
        (r.latency.min_ns, r.latency.p50_ns, r.latency.p90_ns, r.latency.p99_ns, r.latency.p999_ns, r.latency.max_ns),
        (one.min_ns, one.p50_ns, one.p90_ns, one.p99_ns, one.p999_ns, one.max_ns)
    );
    assert_eq!(r.latency.mean_ns, one.mean_ns);
    assert_eq!(r.latency.histogram, one.histogram);
    // The merged p99 is neither part's p99.
    assert_ne!(r.latency.p99_ns, a.result.latency.p99_ns);
    assert_ne!(r.latency.p99_ns, b.result.latency.p99_ns);

    // Counts add, the equation still holds, derived figures are recomputed.
    let t = &r.totals;
    assert_eq!(t.sent, a.result.totals.sent + b.result.totals.sent);
    assert_eq!((t.answered, t.timed_out, t.failed), (5000, 4, 2));
    assert!(t.balanced());
    assert_eq!(t.rcodes.get("NXDOMAIN"), Some(&300));
    assert_eq!(t.rcodes.get("NOERROR"), Some(&4700));
    assert_eq!(t.errors.get("reset"), Some(&2));
    assert_eq!(t.bytes_out, a.result.totals.bytes_out + b.result.totals.bytes_out);
    assert_eq!(r.qps.answered, 1000.0);
    assert_eq!(r.generator.threads, 2);
    assert!((r.generator.cpu_s - 1.0).abs() < 1e-9);
    assert!((r.generator.cpu_us_per_answer - 200.0).abs() < 1e-9);
    assert_eq!(r.status, Status::Complete);
    assert_eq!(r.load.concurrency, Some(20));
    assert_eq!(r.command, vec!["volley", "merge"]);
    assert_eq!(m.parts.len(), 2);
    assert_eq!(m.parts[1].command, b.result.command);

    // Same start: series rows add second by second, and each row's histogram is exact too.
    assert_eq!(r.series.len(), a.result.series.len().max(b.result.series.len()));
    for (k, row) in r.series.iter().enumerate() {
        let (ra, rb) = (&a.result.series[k], &b.result.series[k]);
        assert_eq!(row.sent, ra.sent + rb.sent);
        assert_eq!(row.answered, ra.answered + rb.answered);
        let mut h = Histogram::from_sparse(&ra.latency.histogram);
        h.merge(&Histogram::from_sparse(&rb.latency.histogram));
        assert_eq!(row.latency.p99_ns, h.quantile(0.99));
    }
    assert_eq!(r.series.iter().map(|s| s.sent).sum::<u64>(), t.sent);
}

#[test]
fn series_align_by_wall_clock_second() {
    let a = named("a", &Spec::default());
    let mut b = named("b", &Spec { start_ms: Spec::default().start_ms + 2000, ..Spec::default() });
    b.result.status = Status::Interrupted;
    b.result.warnings.push("b's warning".into());
    let m = merge_runs(&[a.clone(), b.clone()], vec![]).unwrap();
    let r = &m.result;
    assert_eq!(r.started_unix_ms, a.result.started_unix_ms);
    assert_eq!(m.parts[1].offset_s, 2);
    assert_eq!(r.series.len(), b.result.series.len() + 2);
    for (k, row) in r.series.iter().enumerate() {
        let sa = a.result.series.get(k).map_or(0, |s| s.sent);
        let sb = k.checked_sub(2).and_then(|j| b.result.series.get(j)).map_or(0, |s| s.sent);
        assert_eq!(row.sent, sa + sb, "second {k}");
        assert_eq!(row.second as usize, k);
    }
    assert_eq!(r.status, Status::Interrupted, "interrupted if any part was");
    assert_eq!(r.warnings, vec!["b's warning".to_string()]);

    // A start 2.4 s later is shifted by 2 s, with a warning naming the part.
    let c = named("c", &Spec { start_ms: Spec::default().start_ms + 2400, ..Spec::default() });
    let m = merge_runs(&[a, c], vec![]).unwrap();
    assert_eq!(m.parts[1].offset_s, 2);
    assert!(
        m.result.warnings.iter().any(|w| w.contains("c started 2400 ms") && w.contains("400 ms")),
        "{:?}",
        m.result.warnings
    );
}

#[test]
fn connections_merge_exactly() {
    let mut a = named("a", &tcp_spec());
    let mut b = named("b", &Spec { handshakes: (0..10).map(|k| (90_000 + k * 3_000, 0)).collect(), ..tcp_spec() });
    a.result.connections.as_mut().unwrap().in_progress = 2;
    b.result.connections.as_mut().unwrap().in_progress = 3;
    let m = merge_runs(&[a.clone(), b.clone()], vec![]).unwrap();
    let c = m.result.connections.as_ref().unwrap();
    assert_eq!(c.opened, 30);
    assert_eq!(c.in_progress, 5, "attempts in progress at the end add up");
    assert_eq!(c.resumed, 15);
    let mut text = Vec::new();
    write_text(&m.result, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("conns      30 opened, 5 in progress at the end"), "{text}");
    let mut all = Histogram::new(3);
    for (hs, _) in tcp_spec().handshakes.iter().chain(b_handshakes().iter()) {
        all.record(*hs);
    }
    let total = c.handshake_total.as_ref().unwrap();
    assert_eq!(total.count, 30);
    assert_eq!(total.p99_ns, all.quantile(0.99));
    assert_eq!(total.p50_ns, all.quantile(0.5));
    assert_eq!(m.result.series[0].connections.as_ref().unwrap().opened, 30);
}

fn b_handshakes() -> Vec<(u64, u64)> {
    (0..10).map(|k| (90_000 + k * 3_000, 0)).collect()
}

#[test]
fn incompatible_inputs_are_refused_naming_the_file() {
    let a = named("a", &Spec::default());
    let mut b = named("b", &Spec::default());
    b.result.schema = "volley.results/2".into();
    let e = merge_runs(&[a.clone(), b], vec![]).unwrap_err();
    assert!(e.to_string().starts_with("b: unsupported results schema \"volley.results/2\""), "{e}");

    let mut c = named("c", &Spec::default());
    c.result.latency.histogram.sigfig = 2;
    let e = merge_runs(&[a.clone(), c], vec![]).unwrap_err();
    assert!(e.to_string().starts_with("c: latency histogram has 2 significant figures, a has 3"), "{e}");

    // Files: the schema is checked when read, naming the file.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("future.json");
    let mut v = serde_json::to_value(&a.result).unwrap();
    v["schema"] = "volley.results/2".into();
    std::fs::write(&p, v.to_string()).unwrap();
    let e = NamedRun::read(&p, None).unwrap_err();
    assert!(e.to_string().contains("future.json: unsupported results schema \"volley.results/2\""), "{e}");
}

#[test]
fn merged_file_records_its_parts_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let a = named("a", &Spec::default());
    let b = named("b", &Spec { start_ms: Spec::default().start_ms + 1000, ..Spec::default() });
    let m = merge_runs(&[a, b], vec!["volley".into(), "merge".into(), "a.json".into(), "b.json".into()]).unwrap();
    let path = dir.path().join("merged.json");
    write_merged_file(&m, &path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("}\n"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["merged_from"].as_array().unwrap().len(), 2);
    assert_eq!(v["merged_from"][1]["offset_s"], 1);
    // Any reader of volley.results/1 reads it; reports see the parts.
    let plain = read_json_file(&path).unwrap();
    assert_eq!(plain.totals, m.result.totals);
    let run = NamedRun::read(&path, Some("all")).unwrap();
    assert_eq!(run.name, "all");
    assert_eq!(run.merged_from.len(), 2);
    assert_eq!(run.merged_from[0].command, m.parts[0].command);
    // No temporary file left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// A file written before `issued` and `unsent` existed (its `sent` counted the queries issued)
/// reads as one written now, and merges with one: the equation holds, in the totals and the
/// series.
#[test]
fn files_without_issued_read_and_merge_as_issued() {
    let dir = tempfile::tempdir().unwrap();
    let new = build(&Spec::default());
    let mut old = serde_json::to_value(&new).unwrap();
    let strip = |o: &mut serde_json::Value| {
        let o = o.as_object_mut().unwrap();
        o.remove("issued");
        o.remove("unsent");
    };
    strip(&mut old["totals"]);
    strip(&mut old["qps"]);
    for row in old["series"].as_array_mut().unwrap() {
        strip(row);
    }
    let path = dir.path().join("old.json");
    std::fs::write(&path, old.to_string()).unwrap();
    let read = NamedRun::read(&path, None).unwrap();
    let t = &read.result.totals;
    assert_eq!((t.issued, t.unsent), (new.totals.sent, 0));
    assert!(t.balanced());
    assert_eq!(read.result.qps.issued, read.result.qps.sent);
    assert_eq!(read.result.series.iter().map(|r| r.issued).sum::<u64>(), t.issued);
    let m = merge_runs(&[read, NamedRun::new("new", new.clone())], vec!["volley".into(), "merge".into()]).unwrap();
    assert_eq!(m.result.totals.issued, 2 * new.totals.issued);
    assert!(m.result.totals.balanced(), "{:?}", m.result.totals);
    assert_eq!(m.result.series.iter().map(|r| r.issued).sum::<u64>(), m.result.totals.issued);
}

// ---- compare -------------------------------------------------------------------------------

fn figure(c: &Comparison, m: Metric) -> &Figure {
    c.figures.iter().find(|f| f.metric == m).unwrap_or_else(|| panic!("no {m:?}"))
}

#[test]
fn compare_single_runs_gives_ratios_and_no_noise_verdict() {
    let a = named("a", &Spec::default());
    let b = named("b", &Spec { seconds: 10, ..Spec::default() });
    let c = compare(&[("a".into(), vec![a]), ("b".into(), vec![b])]);
    let q = figure(&c, Metric::QpsAnswered);
    assert_eq!(q.groups[0].unwrap().median, 200.0);
    assert_eq!(q.groups[1].unwrap().median, 100.0);
    assert_eq!(q.ratios, vec![None, Some(0.5)]);
    assert_eq!(q.verdicts, vec![Verdict::Baseline, Verdict::NotKnown]);
    assert_eq!(figure(&c, Metric::AnsweredPct).groups[0].unwrap().median, 100.0);
    assert_eq!(figure(&c, Metric::BytesOutPerQuery).groups[0].unwrap().median, 40.0);
    assert_eq!(figure(&c, Metric::BytesInPerAnswer).groups[0].unwrap().median, 60.0);
    assert!(c.figures.iter().all(|f| f.metric != Metric::HandshakeP50), "UDP runs have no handshake row");
    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    println!("{s}");
    assert!(s
        .lines()
        .any(|l| l.starts_with("answers/s") && l.contains("200") && l.contains("100") && l.contains("0.50x")));
    assert!(s.contains("one run per side"));
}

#[test]
fn compare_repeated_runs_with_the_noise_rule() {
    let runs = |cpu_ms: &[u64]| -> Vec<NamedRun> {
        cpu_ms
            .iter()
            .enumerate()
            .map(|(i, ms)| named(&format!("r{i}"), &Spec { cpu_ns: ms * 1_000_000, ..Spec::default() }))
            .collect()
    };
    // CPU per answer (1000 answers): a = 100, 110, 120 µs; b = 190, 200, 210 µs.
    let a = runs(&[110, 100, 120]);
    let b = runs(&[200, 210, 190]);
    let c = compare(&[("a".into(), a), ("b".into(), b)]);
    let cpu = figure(&c, Metric::CpuUsPerAnswer);
    let (ga, gb) = (cpu.groups[0].unwrap(), cpu.groups[1].unwrap());
    assert!((ga.median - 110.0).abs() < 1e-9 && (ga.min - 100.0).abs() < 1e-9 && (ga.max - 120.0).abs() < 1e-9);
    assert_eq!(gb.n, 3);
    assert!((cpu.ratios[1].unwrap() - 200.0 / 110.0).abs() < 1e-9);
    assert_eq!(cpu.verdicts[1], Verdict::BeyondNoise);
    // Identical latencies on both sides: ranges overlap.
    assert_eq!(figure(&c, Metric::P99).verdicts[1], Verdict::WithinNoise);

    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    println!("{s}");
    let line = s.lines().find(|l| l.starts_with("CPU/answer")).unwrap();
    assert!(line.contains("110µs (100µs–120µs)") && line.contains("1.82x") && line.ends_with("beyond noise"), "{line}");
    assert!(s.lines().find(|l| l.starts_with("latency p99 ")).unwrap().ends_with("within noise"));
    assert!(s.contains("noise rule:"));
    assert!(s.lines().next().unwrap().contains("a (3 runs)"));

    let mut out = Vec::new();
    write_compare_json(&c, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let f = v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == "cpu_us_per_answer").unwrap();
    assert_eq!(f["verdicts"][1], "beyond_noise");
    assert_eq!(f["groups"][1]["n"], 3);
    assert_eq!(v["sides"][0]["runs"].as_array().unwrap().len(), 3);
}

#[test]
fn medians_and_ranges() {
    let g = GroupStat::of(&[3.0, 1.0, 10.0, 2.0]).unwrap();
    assert_eq!((g.median, g.min, g.max, g.n), (2.5, 1.0, 10.0, 4));
    assert!(GroupStat::of(&[]).is_none());
    let s = |v: &[f64]| GroupStat::of(v);
    assert_eq!(Verdict::of(s(&[1.0, 2.0]), s(&[2.0, 3.0])), Verdict::WithinNoise, "touching ranges overlap");
    assert_eq!(Verdict::of(s(&[1.0, 2.0]), s(&[2.5, 3.0])), Verdict::BeyondNoise);
    assert_eq!(Verdict::of(s(&[1.0]), s(&[5.0, 6.0])), Verdict::NotKnown);
    assert_eq!(Verdict::of(None, s(&[5.0, 6.0])), Verdict::NoData);
}

// ---- wire statistics: bytes and packets with headers -----------------------------------------

/// A run of 1010 queries (1000 answered, 10 timed out) with the given wire counts.
fn wire_run(name: &str, bytes_out: u64, bytes_in: u64, packets_out: u64, packets_in: u64) -> NamedRun {
    let wire = volley_metrics::WireStats { bytes_out, bytes_in, packets_out, packets_in, retransmits: 0 };
    named(name, &Spec { timed_out: 10, wire, ..Spec::default() })
}

#[test]
fn compare_wire_bytes_and_packets_per_query() {
    // udp: 101000 B and 1010 packets out for 1010 queries sent; 90000 B and 1000 packets in
    // for 1000 answers. tcp: 2.5 packets out per query, 1.5 in per answer. none: no wire.
    let udp = wire_run("udp", 101_000, 90_000, 1010, 1000);
    let tcp = wire_run("tcp", 151_500, 120_000, 2525, 1500);
    let none = named("none", &Spec { timed_out: 10, ..Spec::default() });
    let c = compare(&[("udp".into(), vec![udp]), ("tcp".into(), vec![tcp]), ("none".into(), vec![none])]);
    let med = |m: Metric| -> Vec<Option<f64>> { figure(&c, m).groups.iter().map(|g| g.map(|g| g.median)).collect() };
    assert_eq!(med(Metric::WireBytesOutPerQuery), vec![Some(100.0), Some(150.0), None]);
    assert_eq!(med(Metric::WireBytesInPerAnswer), vec![Some(90.0), Some(120.0), None]);
    assert_eq!(med(Metric::PacketsOutPerQuery), vec![Some(1.0), Some(2.5), None]);
    assert_eq!(med(Metric::PacketsInPerAnswer), vec![Some(1.0), Some(1.5), None]);
    assert_eq!(figure(&c, Metric::PacketsOutPerQuery).ratios, vec![None, Some(2.5), None]);
    assert_eq!(figure(&c, Metric::WireBytesInPerAnswer).ratios[1], Some(120.0 / 90.0));
    assert_eq!(figure(&c, Metric::PacketsInPerAnswer).verdicts[2], Verdict::NoData);
    // DNS message bytes are still their own rows: 40 B per query, 60 B per answer.
    assert_eq!(med(Metric::BytesOutPerQuery), vec![Some(40.0); 3]);

    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    println!("{s}");
    let line = |label: &str| s.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label}:\n{s}"));
    let cells = |label: &str| line(label)[label.len()..].split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(cells("packets out/query"), "1.00 2.50 2.50x - -");
    assert_eq!(cells("packets in/answer"), "1.00 1.50 1.50x - -");
    assert_eq!(cells("wire bytes out/query"), "100B 150B 1.50x - -");
    assert_eq!(cells("wire bytes in/answer"), "90B 120B 1.33x - -");

    let mut out = Vec::new();
    write_compare_json(&c, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let f = |m: &str| v["figures"].as_array().unwrap().iter().find(|f| f["metric"] == m).cloned().unwrap();
    assert_eq!(f("packets_out_per_query")["groups"][1]["median"], 2.5);
    assert_eq!(f("packets_in_per_answer")["groups"][0]["median"], 1.0);
    assert_eq!(f("wire_bytes_out_per_query")["label"], "wire bytes out/query");
    assert_eq!(f("wire_bytes_in_per_answer")["groups"][2], serde_json::Value::Null);
    assert_eq!(f("packets_out_per_query")["verdicts"][2], "no_data");

    // Runs without wire statistics have no wire rows at all.
    let c =
        compare(&[("a".into(), vec![named("a", &Spec::default())]), ("b".into(), vec![named("b", &Spec::default())])]);
    assert!(c.figures.iter().all(|f| !matches!(
        f.metric,
        Metric::WireBytesOutPerQuery
            | Metric::WireBytesInPerAnswer
            | Metric::PacketsOutPerQuery
            | Metric::PacketsInPerAnswer
    )));
}

#[test]
fn compare_packets_with_repeated_runs() {
    // Packets out per query: a = 1.00, 1.01, 1.02; b = 2.00, 2.50, 3.00: beyond noise, ratio of
    // medians 2.5 / 1.01.
    let side = |name: &str, packets: &[u64]| -> Vec<NamedRun> {
        packets.iter().enumerate().map(|(i, p)| wire_run(&format!("{name}{i}"), 101_000, 90_000, *p, 1000)).collect()
    };
    let c = compare(&[("a".into(), side("a", &[1020, 1010, 1030])), ("b".into(), side("b", &[2020, 2525, 3030]))]);
    let p = figure(&c, Metric::PacketsOutPerQuery);
    let (a, b) = (p.groups[0].unwrap(), p.groups[1].unwrap());
    assert_eq!((a.median, a.min, a.max, a.n), (1020.0 / 1010.0, 1.0, 1030.0 / 1010.0, 3));
    assert_eq!((b.median, b.min, b.max), (2.5, 2.0, 3.0));
    assert_eq!(p.verdicts[1], Verdict::BeyondNoise);
    assert_eq!(figure(&c, Metric::PacketsInPerAnswer).verdicts[1], Verdict::WithinNoise);
    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    let line = s.lines().find(|l| l.starts_with("packets out/query")).unwrap();
    assert!(line.contains("1.01 (1.00–1.02)") && line.contains("2.50 (2.00–3.00)") && line.ends_with("beyond noise"));
}

#[test]
fn draining_connections_merge() {
    let mut a = wire_run("a", 101_000, 90_000, 1010, 1000);
    let mut b = wire_run("b", 151_500, 120_000, 2525, 1500);
    // a drained 5 connections (2 draining at the end of its seconds), b 3 (1 at a time).
    for (run, started, draining, ended) in
        [(&mut a, 5, 2, [("answered", 4), ("timed_out", 1)]), (&mut b, 3, 1, [("answered", 2), ("run_end", 1)])]
    {
        let c = run.result.connections.get_or_insert_with(Default::default);
        c.draining = Some(volley_metrics::DrainSummary {
            started,
            peak: Some(draining),
            ended: ended.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        });
        for row in run.result.series.iter_mut() {
            row.connections = Some(volley_metrics::SecondConnections { active: 4, draining, ..Default::default() });
        }
    }
    let m = merge_runs(&[a, b], vec![]).unwrap();
    let d = m.result.connections.as_ref().unwrap().draining.as_ref().unwrap();
    assert_eq!(d.started, 8);
    assert_eq!(d.ended.get("answered"), Some(&6));
    assert_eq!((d.ended.get("timed_out"), d.ended.get("run_end")), (Some(&1), Some(&1)));
    // Runs made at the same time: their draining connections add up second by second.
    assert_eq!(d.peak, Some(3));
    let mut text = Vec::new();
    write_text(&m.result, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("8 drained (answered 6, run_end 1, timed_out 1; at most 3 at a second's end)"), "{text}");
    let mut csv = Vec::new();
    write_csv_series(&m.result, &mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "conns_draining").expect("conns_draining column");
    let second: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
    assert_eq!(second[col], "3", "{csv}");
}

#[test]
fn merge_adds_wire_counts_and_open_connections() {
    let mut a = wire_run("a", 101_000, 90_000, 1010, 1000);
    let mut b = wire_run("b", 151_500, 120_000, 2525, 1500);
    // Open connections at the end of each second: a holds 3, b 4 (from its second 1).
    for (run, active, from) in [(&mut a, 3, 0), (&mut b, 4, 1)] {
        for row in run.result.series.iter_mut().skip(from) {
            row.connections = Some(volley_metrics::SecondConnections { active, ..Default::default() });
        }
    }
    let m = merge_runs(&[a.clone(), b.clone()], vec![]).unwrap();
    let w = &m.result.totals.wire;
    assert_eq!((w.bytes_out, w.bytes_in, w.packets_out, w.packets_in), (252_500, 210_000, 3535, 2500));
    let active: Vec<u64> = m.result.series.iter().map(|r| r.connections.as_ref().map_or(0, |c| c.active)).collect();
    assert_eq!(active, vec![3, 7, 7, 7, 7, 7]);
    // Wire figures of the merged run: packets out per query over both parts' queries.
    assert_eq!(Metric::PacketsOutPerQuery.value(&m.result), Some(3535.0 / 2020.0));
    // Written and read back, the wire section is kept.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    write_merged_file(&m, &path).unwrap();
    assert_eq!(read_json_file(&path).unwrap().totals.wire, *w);
}

#[test]
fn merge_spans_the_wall_clock_and_warns_about_parts_not_made_together() {
    let base = Spec::default().start_ms;
    let a = named("a", &Spec::default());
    // Synchronised starts: the merged run lasts as long as the longest part.
    let b = named("b", &Spec { seconds: 4, ..Spec::default() });
    let m = merge_runs(&[a.clone(), b], vec![]).unwrap();
    assert_eq!((m.result.duration_s, m.result.elapsed_s), (5.0, 5.25));
    assert!(m.result.warnings.is_empty(), "{:?}", m.result.warnings);
    // A part started 2 s later: 7 s from the first start to the last end; rates over 7 s.
    let c = named("c", &Spec { start_ms: base + 2000, ..Spec::default() });
    let m = merge_runs(&[a.clone(), c], vec![]).unwrap();
    assert_eq!(m.result.duration_s, 7.0);
    assert_eq!(m.result.qps.answered, 2000.0 / 7.0);
    assert!(m.result.warnings.is_empty(), "{:?}", m.result.warnings);
    // A part started after the other had finished sending: not made at the same time.
    let d = named("d", &Spec { start_ms: base + 6000, ..Spec::default() });
    let m = merge_runs(&[a, d], vec![]).unwrap();
    assert_eq!(m.result.duration_s, 11.0);
    assert!(
        m.result.warnings.iter().any(|w| w.starts_with("merge: d started 1000 ms after the other parts had finished")),
        "{:?}",
        m.result.warnings
    );
}

// ---- the target's CPU time (--target-pid) -----------------------------------------------------

/// A run of 1000 answers whose target processes `pids` spent `cpu_s`.
fn target_run(name: &str, pids: &[u32], cpu_s: f64) -> NamedRun {
    let mut r = named(name, &Spec::default());
    r.result.target_cpu = Some(volley_metrics::TargetCpu::new(pids.to_vec(), cpu_s, r.result.totals.answered));
    r
}

#[test]
fn target_cpu_in_compare_text_and_openmetrics() {
    let a = target_run("unbound", &[100], 0.05);
    let b = target_run("kresd", &[200], 0.1);
    let none = named("none", &Spec::default());
    let c = compare(&[("unbound".into(), vec![a.clone()]), ("kresd".into(), vec![b]), ("none".into(), vec![none])]);
    let f = figure(&c, Metric::TargetCpuUsPerAnswer);
    let med: Vec<Option<f64>> = f.groups.iter().map(|g| g.map(|g| g.median)).collect();
    assert_eq!(med, vec![Some(50.0), Some(100.0), None]);
    assert_eq!(f.ratios[1], Some(2.0));
    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    let line = s.lines().find(|l| l.starts_with("target CPU/answer")).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(
        line["target CPU/answer".len()..].split_whitespace().collect::<Vec<_>>(),
        ["50.0µs", "100µs", "2.00x", "-", "-"]
    );
    // Runs without it have no such row.
    let c = compare(&[("x".into(), vec![named("x", &Spec::default())])]);
    assert!(c.figures.iter().all(|f| f.metric != Metric::TargetCpuUsPerAnswer));

    let mut out = Vec::new();
    write_text(&a.result, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    assert!(s.lines().any(|l| l.starts_with("target cpu 0.050s, 50.0µs per answer (pid 100)")), "{s}");
    let mut out = Vec::new();
    write_openmetrics(&a.result, &mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().contains("\nvolley_target_cpu_seconds_total 0.05\n"));
}

#[test]
fn merge_counts_a_shared_target_once_and_adds_different_ones() {
    // Two generators against the same server (pid 100) at the same time: each read its whole
    // CPU time; the merge keeps the longer reading. A third against another server adds.
    let m = merge_runs(&[target_run("a", &[100], 0.4), target_run("b", &[100], 0.5)], vec![]).unwrap();
    let t = m.result.target_cpu.clone().unwrap();
    assert_eq!((t.pids, t.cpu_s), (vec![100], 0.5));
    assert_eq!(t.cpu_us_per_answer, 0.5 * 1e6 / 2000.0);
    let m = merge_runs(&[target_run("a", &[100], 0.4), target_run("c", &[7, 300], 0.25)], vec![]).unwrap();
    let t = m.result.target_cpu.unwrap();
    assert_eq!((t.pids, t.cpu_s), (vec![7, 100, 300], 0.65));
    // Per second, the same rule.
    let with_seconds = |name: &str, pids: &[u32], cpu_s: f64, per_s: f64| {
        let mut r = target_run(name, pids, cpu_s);
        for row in &mut r.result.series {
            row.target_cpu_s = Some(per_s);
        }
        r
    };
    let m = merge_runs(
        &[
            with_seconds("a", &[100], 0.4, 0.08),
            with_seconds("b", &[100], 0.5, 0.1),
            with_seconds("c", &[7], 0.2, 0.04),
        ],
        vec![],
    )
    .unwrap();
    assert!(
        m.result.series.iter().all(|r| r.target_cpu_s.is_some_and(|c| (c - 0.14).abs() < 1e-12)),
        "{:?}",
        m.result.series.iter().map(|r| r.target_cpu_s).collect::<Vec<_>>()
    );
    assert!(merge_runs(&[named("x", &Spec::default()), named("y", &Spec::default())], vec![])
        .unwrap()
        .result
        .target_cpu
        .is_none());
}

#[test]
fn figures_read_back_from_json_exactly() {
    // merge, compare and report read results files back: a ratio written must read back as the
    // same f64, or a compared figure drifts by a unit in the last place from the run's own.
    let mut off = 0;
    for n in 1..3000u64 {
        for d in [7u64, 9, 61, 9999, 2_999_953] {
            let x = (n * 1_000_003) as f64 / d as f64;
            let back: f64 = serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap();
            off += usize::from(back != x);
        }
    }
    assert_eq!(off, 0, "{off} figures read back differently");
}

// ---- the emulated link (--link) -------------------------------------------------------------

/// A run behind a link that dropped `dropped` of 1000 packets up, with a p99 lateness of
/// `late_us`.
fn link_run(name: &str, dropped: u64, late_us: u64) -> NamedRun {
    use volley_metrics::{Histogram, LatencySummary, LinkCounters, LinkDirection, LinkInfo};
    let mut r = named(name, &Spec::default());
    let mut h = Histogram::new(3);
    h.record_n(late_us * 1000, 100);
    let counts =
        LinkCounters { packets_in: 1000, packets_out: 1000 - dropped, dropped_loss: dropped, ..Default::default() };
    r.result.link = Some(LinkInfo {
        spec: "4g".into(),
        up: LinkDirection { counts, ..Default::default() },
        lateness: LatencySummary::of(&h),
        ..Default::default()
    });
    r
}

/// compare: the share of packets the link dropped and its p99 lateness; runs without a link
/// have no such rows.
#[test]
fn link_rows_in_compare() {
    let c = compare(&[("a".into(), vec![link_run("a", 5, 40)]), ("b".into(), vec![link_run("b", 15, 80)])]);
    let f = figure(&c, Metric::LinkDroppedPct);
    let med: Vec<Option<f64>> = f.groups.iter().map(|g| g.map(|g| g.median)).collect();
    assert_eq!(med, vec![Some(0.5), Some(1.5)]);
    assert_eq!(f.better, Better::Lower);
    let late = figure(&c, Metric::LinkLatenessP99);
    let ratio = late.ratios[1].unwrap();
    assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
    let mut out = Vec::new();
    write_compare_text(&c, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    assert!(s.lines().any(|l| l.starts_with("link dropped") && l.contains("0.500%")), "{s}");
    let c = compare(&[("x".into(), vec![named("x", &Spec::default())])]);
    assert!(c.figures.iter().all(|f| f.metric != Metric::LinkDroppedPct && f.metric != Metric::LinkLatenessP99));
}

/// Parts of a split run (`--part I/N`) merged: each is recorded with its part; a part missing or
/// given twice is warned about (a merge then holds another share of the load than the run's).
#[test]
fn parts_of_a_split_run_are_recorded_and_missing_ones_named() {
    let part = |name: &str, index: u32, count: u32| {
        let mut r = named(name, &Spec::default());
        r.result.part = Some(volley_metrics::PartInfo { index, count, start: None });
        r
    };
    let m = merge_runs(&[part("a", 0, 3), part("b", 2, 3)], vec![]).unwrap();
    assert_eq!(m.parts[1].part.as_deref(), Some("2/3"));
    assert!(m.result.part.is_none() && m.result.scale.is_none());
    assert!(m.result.warnings.iter().any(|w| w == "merge: incomplete: parts 1/3 of the split run are missing"));
    let m = merge_runs(&[part("a", 0, 2), part("b", 0, 2), part("c", 1, 2)], vec![]).unwrap();
    assert!(m.result.warnings.iter().any(|w| w.contains("parts 0/2 of the split run are counted more than once")));
    let m = merge_runs(&[part("a", 0, 2), part("b", 1, 2)], vec![]).unwrap();
    assert!(!m.result.warnings.iter().any(|w| w.contains("split run")), "{:?}", m.result.warnings);
}
