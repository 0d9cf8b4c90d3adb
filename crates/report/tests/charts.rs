//! Charts: each chart's data asserted through the pure function that builds it, from results
//! with known contents; then the SVG and PNG drawings checked to be valid and non-empty.

mod common;

use common::*;
use volley_metrics::Histogram;
use volley_report::*;

/// 5 seconds, 200 answers a second (100 µs .. 1.099 ms, every 4th NXDOMAIN), and 10 timeouts
/// in the last second.
fn known() -> NamedRun {
    named("udp", &Spec { nxdomain_every: Some(4), timed_out: 10, ..Spec::default() })
}

fn points(c: &ChartData, name: &str) -> Vec<(f64, f64)> {
    c.series_named(name).unwrap_or_else(|| panic!("no series {name:?} in {:?}", names(c))).points.clone()
}

fn names(c: &ChartData) -> Vec<String> {
    c.series.iter().map(|s| s.name.clone()).collect()
}

#[test]
fn response_rate_is_answered_share_of_each_seconds_fates_by_rcode() {
    let run = known();
    let c = response_rate_series(std::slice::from_ref(&run));
    assert_eq!(c.id, "response_rate");
    assert_eq!(names(&c), vec!["answered", "NOERROR", "NXDOMAIN"]);
    let answered = points(&c, "answered");
    assert_eq!(answered.len(), 5);
    for (k, (x, y)) in answered.iter().enumerate() {
        assert_eq!(*x, k as f64);
        let want = if k == 4 { 200.0 * 100.0 / 210.0 } else { 100.0 };
        assert!((y - want).abs() < 1e-9, "second {k}: {y} != {want}");
    }
    let nx = points(&c, "NXDOMAIN");
    assert!((nx[0].1 - 25.0).abs() < 1e-9, "{nx:?}");
    assert!((nx[4].1 - 50.0 * 100.0 / 210.0).abs() < 1e-9);
    assert!((points(&c, "NOERROR")[1].1 - 75.0).abs() < 1e-9);
    assert_eq!(c.y.range, Some((0.0, 100.0)));

    // Several runs: one set of lines each, named after the run.
    let other = named("tcp", &Spec { transport: "tcp", ..Spec::default() });
    let c = response_rate_series(&[run, other]);
    assert_eq!(names(&c), vec!["udp: answered", "udp: NOERROR", "udp: NXDOMAIN", "tcp: answered", "tcp: NOERROR"]);
    assert!(c.series.iter().filter(|s| s.name.starts_with("tcp")).all(|s| s.run == 1));
}

#[test]
fn percentile_plot_comes_from_the_exact_histogram() {
    let run = known();
    let r = &run.result;
    let c = latency_percentile_series(std::slice::from_ref(&run));
    assert_eq!(c.x.scale, Scale::LogReversed);
    assert_eq!(c.y.scale, Scale::Log);
    let p = points(&c, "");
    assert_eq!(p.len(), SLOWEST_PERCENTILES.len());
    assert_eq!(p[0].0, 100.0);
    assert_eq!(p.last().unwrap().0, 0.01);
    let at = |s: f64| p.iter().find(|q| q.0 == s).unwrap().1 as u64;
    // The point at the slowest 1 % is the run's p99, at 50 % its p50, at 0.1 % its p99.9.
    assert_eq!(at(1.0), r.latency.p99_ns);
    assert_eq!(at(50.0), r.latency.p50_ns);
    assert_eq!(at(0.1), r.latency.p999_ns);
    let h = Histogram::from_sparse(&r.latency.histogram);
    assert_eq!(at(100.0), h.quantile(0.0));
    assert_eq!(at(0.01), r.latency.max_ns);
    // Slower percentiles never show a shorter time.
    assert!(p.windows(2).all(|w| w[1].1 >= w[0].1), "{p:?}");
    // 1000 values from 100 µs to 1.099 ms: p99 is about 1.089 ms (within 0.1 %).
    assert!((at(1.0) as f64 - 1_089_000.0).abs() < 1_100.0, "{}", at(1.0));

    // A run without answers has no points.
    let empty = named("none", &Spec { latencies: vec![], timed_out: 3, ..Spec::default() });
    let c = latency_percentile_series(&[run, empty]);
    assert!(c.series_named("none").unwrap().points.is_empty());
}

#[test]
fn latency_over_time_has_p50_p99_and_the_band_between() {
    let run = known();
    let c = latency_over_time_series(std::slice::from_ref(&run));
    let p50 = points(&c, "p50");
    let p99 = points(&c, "p99");
    assert_eq!(p50.len(), 5);
    for (k, row) in run.result.series.iter().enumerate().take(5) {
        assert_eq!(p50[k], (k as f64, row.latency.p50_ns as f64));
        assert_eq!(p99[k], (k as f64, row.latency.p99_ns as f64));
        assert_eq!(c.bands[0].points[k], (k as f64, row.latency.p50_ns as f64, row.latency.p99_ns as f64));
    }
    assert_eq!(c.series_named("p99").unwrap().style, Style::Dashed);
}

#[test]
fn qps_is_queries_and_answers_per_second() {
    let run = known();
    let c = qps_series(std::slice::from_ref(&run));
    let sent: Vec<f64> = points(&c, "sent").iter().map(|p| p.1).collect();
    let answered: Vec<f64> = points(&c, "answered").iter().map(|p| p.1).collect();
    // The run ends exactly at 5 s: the series has an empty sixth row.
    assert_eq!(sent, vec![200.0, 200.0, 200.0, 200.0, 210.0, 0.0]);
    assert_eq!(answered, vec![200.0, 200.0, 200.0, 200.0, 200.0, 0.0]);
}

#[test]
fn connections_over_time_and_handshake_cdf() {
    let udp = known();
    let tcp = named("tcp", &tcp_spec());
    let c = connections_series(&[udp.clone(), tcp.clone()]);
    // The UDP run has no connection lines.
    assert!(c.series.iter().all(|s| s.run == 1), "{:?}", names(&c));
    let active = points(&c, "tcp: active");
    assert_eq!(active[0], (0.0, 20.0));
    assert_eq!(active.last().unwrap().1, 10.0);
    assert_eq!(points(&c, "tcp: opened")[0].1, 20.0);
    assert_eq!(points(&c, "tcp: resumed")[0].1, 10.0);
    assert_eq!(points(&c, "tcp: handshakes")[0].1, 10.0);
    assert_eq!(points(&c, "tcp: closed").iter().map(|p| p.1).sum::<f64>(), 10.0);
    assert!(c.series_named("tcp: failed").is_none(), "zero lines are left out");

    let h = handshake_cdf_series(&[udp, tcp.clone()]);
    assert_eq!(names(&h), vec!["tcp (tcp)"]);
    let p = points(&h, "tcp (tcp)");
    let total = tcp.result.connections.as_ref().unwrap().handshake_total.as_ref().unwrap();
    assert_eq!(p.len(), total.histogram.len());
    assert_eq!(p.last().unwrap().1, 100.0);
    assert!(p.windows(2).all(|w| w[1].0 > w[0].0 && w[1].1 > w[0].1));
    // 20 handshakes from 50 µs to 69 µs: the first is 5 % of connections.
    assert!((p[0].1 - 5.0).abs() < 1e-9);
    assert!((p[0].0 - 50_000.0).abs() <= 50.0, "{p:?}");
}

#[test]
fn limit_search_steps_and_the_limit_marked() {
    let steps = |v: &[(f64, f64, u64)]| {
        v.iter().map(|&(load, answered_ratio, p99_ns)| LimitStep { load, answered_ratio, p99_ns }).collect()
    };
    let searches = vec![
        LimitResult {
            name: "udp".into(),
            unit: "clients".into(),
            steps: steps(&[(2000.0, 0.95, 9_000_000), (1000.0, 1.0, 1_000_000), (3000.0, 0.5, 900_000_000)]),
            limit: Some(2000.0),
        },
        LimitResult {
            name: "dot".into(),
            unit: "clients".into(),
            steps: steps(&[(100.0, 1.0, 2_000_000), (200.0, 0.6, 50_000_000)]),
            limit: None,
        },
    ];
    let c = limit_series(&searches);
    assert_eq!(points(&c, "udp"), vec![(1000.0, 100.0), (2000.0, 95.0), (3000.0, 50.0)]);
    assert_eq!(c.series_named("udp").unwrap().style, Style::Step);
    assert_eq!(c.markers, vec![Marker { label: "udp limit 2000".into(), run: 0, x: 2000.0 }]);
    assert_eq!(c.x.label, "load offered [clients]");
    let l = limit_latency_series(&searches);
    assert_eq!(points(&l, "dot"), vec![(100.0, 2_000_000.0), (200.0, 50_000_000.0)]);
    assert_eq!(l.y.scale, Scale::Log);
    let svg = render_svg(&c, CHART_SIZE).unwrap();
    assert!(svg.contains("udp limit 2000"));
}

fn check_svg(svg: &str, c: &ChartData) {
    assert!(svg.contains("<svg"), "not an SVG");
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{}: SVG does not parse: {e}", c.id));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(texts.iter().any(|t| t.contains(c.title.as_str())), "{}: no title in {texts:?}", c.id);
    for s in &c.series {
        let shown: String = s.name.chars().take(29).collect();
        assert!(texts.iter().any(|t| t.contains(shown.as_str())), "{}: no legend {:?}", c.id, s.name);
    }
    let lines = doc.descendants().filter(|n| n.has_tag_name("polyline") || n.has_tag_name("path")).count();
    assert!(lines > 0, "{}: nothing drawn", c.id);
}

fn check_png(png_bytes: &[u8], id: &str) {
    assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{id}: no PNG magic");
    let dec = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = dec.read_info().unwrap_or_else(|e| panic!("{id}: PNG does not decode: {e}"));
    let info = reader.info();
    assert_eq!((info.width, info.height), CHART_SIZE);
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut buf).unwrap();
    // Not a blank image: some pixels are not white, and some are coloured (the data lines).
    assert!(buf.iter().any(|b| *b < 128), "{id}: blank PNG");
}

#[test]
fn every_chart_renders_as_valid_svg_and_png() {
    let runs = [known(), named("tcp", &tcp_spec())];
    let charts = all_charts(&runs);
    let ids: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["response_rate", "latency_percentiles", "latency_over_time", "qps", "connections", "handshake_cdf"]
    );
    let dir = std::env::var_os("VOLLEY_CHART_DIR").map(std::path::PathBuf::from);
    for c in &charts {
        let svg = render_svg(c, CHART_SIZE).unwrap();
        check_svg(&svg, c);
        let png = render_png(c, CHART_SIZE).unwrap();
        check_png(&png, &c.id);
        if let Some(d) = &dir {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join(format!("{}.svg", c.id)), &svg).unwrap();
            std::fs::write(d.join(format!("{}.png", c.id)), &png).unwrap();
        }
    }
}

#[test]
fn an_empty_chart_still_draws() {
    let run = named("none", &Spec { latencies: vec![], timed_out: 3, ..Spec::default() });
    let c = latency_percentile_series(&[run]);
    assert!(c.is_empty());
    let svg = render_svg(&c, CHART_SIZE).unwrap();
    assert!(svg.contains("no data"));
    check_png(&render_png(&c, CHART_SIZE).unwrap(), "empty");
}

/// A run made with `--target-pid`: the target's CPU per second, as a share of one core.
#[test]
fn target_cpu_over_time_as_share_of_a_core() {
    let mut run = known();
    for (k, row) in run.result.series.iter_mut().enumerate() {
        row.target_cpu_s = Some(0.1 * (k + 1) as f64);
    }
    let plain = known();
    let runs = [run, plain];
    let c = target_cpu_series(&runs);
    assert_eq!(c.id, "target_cpu");
    assert_eq!(c.series.len(), 1, "only the run that measured its target has a line: {:?}", names(&c));
    let p = &c.series[0].points;
    assert_eq!(p.len(), runs[0].result.series.len());
    for (k, (x, y)) in p.iter().enumerate() {
        assert_eq!(*x, k as f64);
        assert!((y - 10.0 * (k + 1) as f64).abs() < 1e-9, "second {k}: {y}");
    }
    assert!(all_charts(&runs).iter().any(|c| c.id == "target_cpu"));
    assert!(!all_charts(&runs[1..]).iter().any(|c| c.id == "target_cpu"), "no chart without the figure");
    let svg = render_svg(&c, CHART_SIZE).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("Target CPU over time"));
    let png = render_png(&c, CHART_SIZE).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000);

    // The CSV gets a column for it.
    let mut out = Vec::new();
    write_csv_series(&runs[0].result, &mut out).unwrap();
    let csv = String::from_utf8(out).unwrap();
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().ends_with(",target_cpu_s"));
    assert!(lines.next().unwrap().ends_with(",0.100000"), "{csv}");
    let mut out = Vec::new();
    write_csv_series(&runs[1].result, &mut out).unwrap();
    assert!(!String::from_utf8(out).unwrap().contains("target_cpu_s"));
}

/// The emulated link over time: per second its drops by cause and its queues, both directions
/// added; a run without a link has no lines.
#[test]
fn link_drops_and_queue_over_time() {
    use volley_metrics::{LinkInfo, LinkSecond, LinkSecondDir};
    let mut run = known();
    let c = link_series(std::slice::from_ref(&run));
    assert!(c.is_empty(), "no link, no lines");
    let second = |s: u64, loss: u64, outage: u64, queued: u64| LinkSecond {
        second: s,
        up: LinkSecondDir { dropped_loss: loss, dropped_outage: outage, queued, ..Default::default() },
        down: LinkSecondDir { dropped_loss: 1, queued: 1, ..Default::default() },
        ..Default::default()
    };
    let series = vec![second(0, 2, 0, 5), second(1, 0, 40, 0), second(2, 3, 0, 7)];
    run.result.link = Some(LinkInfo { spec: "4g".into(), series, ..Default::default() });
    let c = link_series(std::slice::from_ref(&run));
    assert_eq!(c.id, "link");
    assert_eq!(names(&c), ["dropped: loss", "dropped: queue", "dropped: outage", "queued"]);
    assert_eq!(points(&c, "dropped: loss"), [(0.0, 3.0), (1.0, 1.0), (2.0, 4.0)]);
    assert_eq!(points(&c, "dropped: outage"), [(0.0, 0.0), (1.0, 40.0), (2.0, 0.0)]);
    assert_eq!(points(&c, "queued"), [(0.0, 6.0), (1.0, 1.0), (2.0, 8.0)]);
    assert!(all_charts(std::slice::from_ref(&run)).iter().any(|c| c.id == "link"));
}

/// The traced queries (`--trace-queries`): each answered query's response time against its
/// number, unanswered ones left out; no chart without a trace.
#[test]
fn query_trace_is_response_time_per_query() {
    use volley_metrics::{QueryTrace, TracedQuery};
    let mut run = known();
    assert!(query_trace_series(std::slice::from_ref(&run)).is_empty(), "no trace, no line");
    assert!(!all_charts(std::slice::from_ref(&run)).iter().any(|c| c.id == "query_trace"));
    let q = |index: u64, latency_ns: Option<u64>, fate: &str| TracedQuery {
        index,
        issued_ns: 0,
        latency_ns,
        fate: fate.into(),
        detail: None,
    };
    run.result.query_trace = Some(QueryTrace {
        limit: 4,
        queries: vec![
            q(0, Some(1_000_000), "answered"),
            q(1, None, "timed_out"),
            q(2, Some(1_000_000_000), "answered"),
            q(3, Some(2_000_000), "answered"),
        ],
    });
    let c = query_trace_series(std::slice::from_ref(&run));
    assert_eq!(c.id, "query_trace");
    assert_eq!(c.y.scale, Scale::Log);
    assert_eq!(c.series[0].points, [(0.0, 1e6), (2.0, 1e9), (3.0, 2e6)]);
    assert!(all_charts(std::slice::from_ref(&run)).iter().any(|c| c.id == "query_trace"));
    let svg = render_svg(&c, CHART_SIZE).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("Response time per query"));
}
