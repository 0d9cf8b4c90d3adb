//! OpenMetrics text of a finished run and of a run in progress.

mod common;

use common::*;
use volley_metrics::Progress;
use volley_report::*;

fn sample_value(text: &str, series: &str) -> f64 {
    let line = text.lines().find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '));
    let line = line.unwrap_or_else(|| panic!("no sample {series} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Every sample line belongs to a family declared before it, and the text ends with `# EOF`.
fn check_format(text: &str) {
    assert!(text.ends_with("# EOF\n"), "{text}");
    let mut families: Vec<String> = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            families.push(rest.split(' ').next().unwrap().to_string());
        } else if !l.starts_with('#') {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(families.iter().any(|f| name.starts_with(f.as_str())), "sample before its family: {l}");
        }
    }
}

#[test]
fn a_finished_run() {
    let run = named("udp", &Spec { nxdomain_every: Some(4), timed_out: 10, failed: 3, ..Spec::default() });
    let mut out = Vec::new();
    write_openmetrics(&run.result, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    println!("{text}");
    check_format(&text);
    assert_eq!(sample_value(&text, "volley_queries_total{fate=\"sent\"}"), 1013.0);
    assert_eq!(sample_value(&text, "volley_queries_total{fate=\"answered\"}"), 1000.0);
    assert_eq!(sample_value(&text, "volley_queries_total{fate=\"timed_out\"}"), 10.0);
    assert_eq!(sample_value(&text, "volley_answers_total{rcode=\"NXDOMAIN\"}"), 250.0);
    assert_eq!(sample_value(&text, "volley_errors_total{kind=\"reset\"}"), 3.0);
    assert_eq!(sample_value(&text, "volley_bytes_total{direction=\"out\"}"), 1013.0 * 40.0);
    assert!(text.contains("volley_run_info{target=\"udp://127.0.0.1:5353\",transport=\"udp\""));
    // Cumulative buckets: non-decreasing, +Inf = count; 1000 values from 100 µs to 1.099 ms.
    let buckets: Vec<(String, f64)> = text
        .lines()
        .filter(|l| l.starts_with("volley_latency_seconds_bucket"))
        .map(|l| (l.split('"').nth(1).unwrap().to_string(), l.rsplit(' ').next().unwrap().parse().unwrap()))
        .collect();
    assert_eq!(buckets.len(), LATENCY_BOUNDS_NS.len() + 1);
    assert!(buckets.windows(2).all(|w| w[1].1 >= w[0].1));
    assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), 1000.0));
    let at = |le: &str| buckets.iter().find(|b| b.0 == le).unwrap().1;
    assert_eq!(at("0.00005"), 0.0);
    assert_eq!(at("0.0001"), 0.0, "the bucket of 100 µs reaches above 100 µs: counted above the bound");
    assert!((at("0.001") - 901.0).abs() <= 2.0, "{}", at("0.001"));
    assert_eq!(at("0.0025"), 1000.0);
    assert_eq!(sample_value(&text, "volley_latency_seconds_count"), 1000.0);
    let sum = sample_value(&text, "volley_latency_seconds_sum");
    assert!((sum - 0.5995).abs() < 0.002, "{sum}");
    assert!(!text.contains("volley_wire_"), "no wire families without totals.wire");
    // The set-up before the clock: absent from results that have none, given apart otherwise.
    assert!(!text.contains("volley_setup_seconds"), "no set-up in results without setup_s");
    let mut with_setup = run.result.clone();
    with_setup.setup_s = Some(0.125);
    let mut out = Vec::new();
    write_openmetrics(&with_setup, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    check_format(&text);
    assert_eq!(sample_value(&text, "volley_setup_seconds"), 0.125);
}

#[test]
fn wire_bytes_and_packets() {
    let wire = volley_metrics::WireStats {
        bytes_out: 73_000,
        bytes_in: 89_000,
        packets_out: 1000,
        packets_in: 999,
        retransmits: 0,
    };
    let run = named("udp", &Spec { wire, ..Spec::default() });
    let mut out = Vec::new();
    write_openmetrics(&run.result, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    check_format(&text);
    assert!(text.contains("# TYPE volley_wire_bytes counter\n# UNIT volley_wire_bytes bytes\n"));
    assert_eq!(sample_value(&text, "volley_wire_bytes_total{direction=\"out\"}"), 73_000.0);
    assert_eq!(sample_value(&text, "volley_wire_bytes_total{direction=\"in\"}"), 89_000.0);
    assert_eq!(sample_value(&text, "volley_wire_packets_total{direction=\"out\"}"), 1000.0);
    assert_eq!(sample_value(&text, "volley_wire_packets_total{direction=\"in\"}"), 999.0);
}

/// A run behind an emulated link: its packets by direction and fate, its lateness.
#[test]
fn the_link_of_a_run() {
    use volley_metrics::{Histogram, LatencySummary, LinkCounters, LinkDirection, LinkInfo};
    let mut run = named("udp", &Spec::default());
    let mut h = Histogram::new(3);
    h.record_n(30_000, 99);
    h.record(2_000_000);
    let counts =
        LinkCounters { packets_in: 100, packets_out: 97, dropped_loss: 2, dropped_outage: 1, ..Default::default() };
    run.result.link = Some(LinkInfo {
        spec: "4g".into(),
        up: LinkDirection { counts, ..Default::default() },
        lateness: LatencySummary::of(&h),
        ..Default::default()
    });
    let mut out = Vec::new();
    write_openmetrics(&run.result, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    check_format(&text);
    let v = |fate: &str| sample_value(&text, &format!("volley_link_packets_total{{direction=\"up\",fate=\"{fate}\"}}"));
    assert_eq!(
        (v("in"), v("out"), v("dropped_loss"), v("dropped_outage"), v("dropped_queue")),
        (100.0, 97.0, 2.0, 1.0, 0.0)
    );
    assert_eq!(sample_value(&text, "volley_link_lateness_seconds_count"), 100.0);
    assert_eq!(sample_value(&text, "volley_link_lateness_seconds_bucket{le=\"0.0001\"}"), 99.0);
    // Without a link, no such families.
    let mut out = Vec::new();
    write_openmetrics(&named("udp", &Spec::default()).result, &mut out).unwrap();
    assert!(!String::from_utf8(out).unwrap().contains("volley_link"));
}

#[test]
fn connection_attempts_in_progress_at_the_end() {
    let mut run = named("tcp", &tcp_spec());
    run.result.connections.as_mut().unwrap().in_progress = 7;
    let mut out = Vec::new();
    write_openmetrics(&run.result, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    check_format(&text);
    assert_eq!(sample_value(&text, "volley_connections_total{event=\"opened\"}"), 20.0);
    assert_eq!(sample_value(&text, "volley_connections_in_progress"), 7.0);
}

#[test]
fn a_run_in_progress_and_its_file() {
    let run = named("tcp", &Spec { timed_out: 4, ..tcp_spec() });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("volley.prom");
    let mut live = LiveTotals::new();
    for row in &run.result.series {
        live.update_file(&Progress { row: row.clone() }, &path).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    println!("{text}");
    check_format(&text);
    let t = &run.result.totals;
    assert_eq!(sample_value(&text, "volley_queries_total{fate=\"sent\"}"), t.sent as f64);
    assert_eq!(sample_value(&text, "volley_queries_total{fate=\"answered\"}"), t.answered as f64);
    assert_eq!(sample_value(&text, "volley_in_flight"), 0.0);
    assert_eq!(sample_value(&text, "volley_latency_seconds_count"), 1000.0);
    assert_eq!(sample_value(&text, "volley_connections_total{event=\"opened\"}"), 20.0);
    assert_eq!(sample_value(&text, "volley_elapsed_seconds"), run.result.series.len() as f64);
    assert_eq!(live.latency().count(), 1000);
    // Only the metrics file is there: the temporary one was renamed over it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // Half way through: queries sent but without a fate yet show as in flight.
    let mut live = LiveTotals::new();
    let mut row = run.result.series[0].clone();
    row.answered -= 7;
    live.add(&row);
    let mut out = Vec::new();
    progress_metrics(&Progress { row }, &live, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(sample_value(&text, "volley_in_flight"), 7.0);
    assert!(!text.contains("volley_target_cpu"), "no target CPU without --target-pid");

    // With --target-pid: the target's CPU seconds so far.
    let mut live = LiveTotals::new();
    for (k, row) in run.result.series.iter().enumerate().take(3) {
        let row = volley_metrics::SecondRow { target_cpu_s: Some(0.25 * (k + 1) as f64), ..row.clone() };
        live.add(&row);
        if k == 2 {
            let mut out = Vec::new();
            progress_metrics(&Progress { row }, &live, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            check_format(&text);
            assert_eq!(sample_value(&text, "volley_target_cpu_seconds_total"), 1.5);
        }
    }
}

/// The merge of a split run's parts: how many were merged or missing, their share, the skew.
#[test]
fn the_parts_of_a_split_run() {
    let mut run = named("merged", &Spec::default()).result;
    run.scale = Some(volley_metrics::ScaleInfo {
        parts: 4,
        complete: false,
        missing_share: 0.25,
        start_unix_ns: 0,
        start_skew_ns: Some(450_000),
        part_list: (0..4)
            .map(|i| volley_metrics::ScalePart {
                index: i,
                status: if i == 3 { "never_came".into() } else { "merged".into() },
                share: 0.25,
                peer: None,
                clock_offset_ns: None,
                rtt_ns: None,
                start_offset_ns: None,
                reason: None,
            })
            .collect(),
    });
    let mut out = Vec::new();
    write_openmetrics(&run, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    check_format(&text);
    assert_eq!(sample_value(&text, "volley_scale_parts{state=\"merged\"}"), 3.0);
    assert_eq!(sample_value(&text, "volley_scale_parts{state=\"missing\"}"), 1.0);
    assert_eq!(sample_value(&text, "volley_scale_missing_share"), 0.25);
    assert_eq!(sample_value(&text, "volley_scale_start_skew_seconds"), 0.00045);
}
