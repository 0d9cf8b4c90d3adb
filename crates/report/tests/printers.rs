//! Printers over `RunResult`s built the way the engine builds them: workers record into
//! `Recorder`s, a `Collector` merges their seconds, and the result is assembled from that.

use std::path::Path;
use std::sync::mpsc;

use volley_metrics::{
    Collector, ErrorKind, GeneratorInfo, LatencySummary, LoadInfo, Progress, Qps, Recorder, RunResult, Status,
    TargetInfo, Totals, Unexpected, SCHEMA,
};
use volley_report::*;

const S: u64 = 1_000_000_000;

/// What a sample run does: `answered` answers (1 in 1000 NXDOMAIN, 1 in 500 truncated), then
/// timeouts, failures (reset, refused alternately) and `in_flight` queries never ended, spread
/// over `seconds` seconds and two workers; 3 late answers come in as unexpected.
struct Plan {
    answered: u64,
    timed_out: u64,
    failed: u64,
    in_flight: u64,
    seconds: u64,
    open_loop: bool,
    /// Every 4th query waits for stream credit, every 100th for a connection; the closed
    /// loop's queries on the wire peak at 3 per worker.
    waits: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan { answered: 9990, timed_out: 8, failed: 2, in_flight: 0, seconds: 10, open_loop: false, waits: false }
    }
}

fn sample(plan: Plan) -> RunResult {
    let (tx, rx) = mpsc::channel();
    let mut workers = [Recorder::new(0, 0, tx.clone()), Recorder::new(1, 0, tx)];
    let sent = plan.answered + plan.timed_out + plan.failed + plan.in_flight;
    let step = plan.seconds * S / sent.max(1);
    let mut in_flight = [0u64; 2];
    for i in 0..sent {
        let w = &mut workers[(i % 2) as usize];
        let t = i * step;
        w.issued(t, 0);
        w.sent(t, 0);
        w.wrote(40, 0);
        if plan.open_loop {
            w.lateness(i % 50 * 1_000);
            if plan.waits {
                w.schedule_lateness(i % 50 * 10);
            }
        }
        if plan.waits && i % 4 == 0 {
            w.transport_wait(volley_metrics::Wait::StreamCredit, 2_000_000);
        } else if plan.waits && i % 100 == 1 {
            w.transport_wait(volley_metrics::Wait::Connecting, 5_000_000);
        }
        if i < plan.answered {
            let latency = 100_000 + (i * 7919 % 400) * 1_000;
            let rcode = if i % 1000 == 999 { 3 } else { 0 };
            w.answered(t + latency, latency, rcode, i % 500 == 1, 60, 0);
        } else if i < plan.answered + plan.timed_out {
            w.timed_out(t + 1, 0);
        } else if i < plan.answered + plan.timed_out + plan.failed {
            let kind = if i % 2 == 0 { ErrorKind::Reset } else { ErrorKind::Refused };
            w.failed(t + 1, kind, 0);
        } else {
            in_flight[(i % 2) as usize] += 1;
        }
    }
    workers[0].unexpected(plan.seconds * S - 1, Unexpected::Late, 60);
    workers[1].unexpected(plan.seconds * S - 1, Unexpected::Late, 60);
    workers[1].unexpected(plan.seconds * S - 1, Unexpected::UnknownId, 60);
    if plan.waits {
        for w in &mut workers {
            w.peak_on_wire(3);
        }
    }
    let [a, b] = workers;
    a.finish(plan.seconds * S, in_flight[0], &[], 600_000_000);
    b.finish(plan.seconds * S, in_flight[1], &[], 630_000_000);

    let mut c = Collector::new(2);
    for m in rx.try_iter() {
        c.absorb(m);
    }
    assert!(c.done());
    let got = c.finish();
    let totals = Totals::from_counters(&got.totals, got.in_flight);
    let duration_s = plan.seconds as f64;
    let cpu_s = got.cpu_ns as f64 / 1e9;
    RunResult {
        schema: SCHEMA.to_string(),
        volley_version: "0.1.0".into(),
        status: Status::Complete,
        command: vec!["volley".into(), "run".into(), "udp://127.0.0.1:5353".into()],
        started_at: "2025-01-02T03:04:05.678Z".into(),
        started_unix_ms: 1_735_787_045_678,
        duration_s,
        elapsed_s: duration_s + 0.25,
        setup_s: Some(0.01),
        target: TargetInfo {
            url: "udp://127.0.0.1:5353".into(),
            transport: "udp".into(),
            address: "127.0.0.1:5353".into(),
        },
        load: LoadInfo {
            model: if plan.open_loop { "open" } else { "closed" }.into(),
            concurrency: (!plan.open_loop).then_some(100),
            rate: plan.open_loop.then_some(1000.0),
            duration_s: Some(duration_s),
            count: None,
            clients: None,
            client_rate: None,
            timeout_ms: 5000,
            threads: 2,
            connections: 2,
            queries: "name:example.com A".into(),
            udp_retry_ms: None,
            udp_tries: None,
            tc_fallback: false,
        },
        qps: Qps {
            issued: totals.issued as f64 / duration_s,
            sent: totals.sent as f64 / duration_s,
            answered: totals.answered as f64 / duration_s,
        },
        latency: LatencySummary::of(&got.latency),
        service_time: Some(LatencySummary::of(&got.send.service_time)),
        generator_delay: Some(LatencySummary::of(&got.send.generator_delay)),
        send_stamps: Some(volley_metrics::SendStamps {
            kernel: got.send.kernel,
            between: got.send.between,
            fallback: got.send.fallback,
        }),
        send_lateness: plan.open_loop.then(|| LatencySummary::of(&got.lateness)),
        schedule_lateness: plan.open_loop.then(|| LatencySummary::of(&got.schedule_lateness)),
        transport_wait: volley_metrics::TransportWait::of(&got.waits),
        peak_on_wire: (got.peak_on_wire > 0).then_some(got.peak_on_wire),
        generator: GeneratorInfo {
            cpu_s,
            cpu_us_per_answer: if totals.answered > 0 { cpu_s * 1e6 / totals.answered as f64 } else { 0.0 },
            threads: 2,
        },
        target_cpu: None,
        host: None,
        link: None,
        qlog_dir: None,
        connections: None,
        groups: Vec::new(),
        totals,
        series: got.series,
        events: [("connect".to_string(), 2u64), ("icmp_unreachable".to_string(), 1)].into_iter().collect(),
        warnings: Vec::new(),
        part: None,
        scale: None,
        query_trace: None,
    }
}

fn text(r: &RunResult) -> String {
    let mut out = Vec::new();
    write_text(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn assert_narrow(s: &str) {
    for l in s.lines() {
        assert!(l.chars().count() <= MAX_COLUMNS, "line over {MAX_COLUMNS} columns: {l:?}");
        assert_eq!(l, l.trim_end(), "trailing spaces: {l:?}");
    }
}

// ---- text ----------------------------------------------------------------------------------

#[test]
fn text_shows_the_equation_balanced() {
    let r = sample(Plan::default());
    let s = text(&r);
    println!("{s}");
    assert!(
        s.contains("fates      10000 issued = 9990 answered + 8 timed out + 2 failed + 0 unsent + 0 in flight  ✓"),
        "{s}"
    );
    assert!(!s.contains('✗') && !s.contains("WARNING"));
    assert!(s.contains("udp://127.0.0.1:5353"));
    assert!(s.contains("closed loop, concurrency 100, duration 10s, timeout 5s, 2 threads, 2 connections"));
    assert!(s.contains("status     complete"));
    assert!(!s.contains("INTERRUPTED"));
    assert!(s.lines().any(|l| l.starts_with("answered") && l.contains("9990") && l.contains("99.90%")));
    assert!(s.lines().any(|l| l.starts_with("timed out") && l.contains(" 8 ") && l.ends_with("0.08%")));
    assert!(s.contains("qps        1000 sent/s, 999 answered/s"), "{s}");
    // RCODEs with share of answers, errors and unexpected by kind.
    assert!(s.lines().any(|l| l.starts_with("rcodes") && l.contains("NOERROR") && l.contains("9981")), "{s}");
    assert!(s.lines().any(|l| l.contains("NXDOMAIN") && l.contains(" 9 ") && l.contains("0.09%")), "{s}");
    assert!(s.lines().any(|l| l.starts_with("errors") && l.contains("refused")));
    assert!(s.lines().any(|l| l.contains("reset") && l.contains(" 1 ")));
    assert!(s.lines().any(|l| l.starts_with("unexpected") && l.contains("late") && l.contains(" 2")));
    assert!(s.lines().any(|l| l.contains("unknown_id")));
    assert!(s.lines().any(|l| l.starts_with("events") && l.contains("connect") && l.trim_end().ends_with(" 2")));
    assert!(s.lines().any(|l| l.contains("icmp_unreachable")));
    assert!(s.lines().any(|l| l.starts_with("truncated") && l.contains("20")));
    // Latency in adaptive units, header and values aligned on the right edge.
    let head = s.lines().find(|l| l.contains("p99.9")).unwrap();
    let vals = s.lines().find(|l| l.starts_with("latency")).unwrap();
    assert!(vals.contains("µs") && vals.contains("(9990 answers)"), "{vals}");
    let max_end = head.find("max").unwrap() + 3;
    assert_eq!(vals.chars().nth(max_end - 1), Some('s'), "{head}\n{vals}");
    assert!(!s.contains("lateness"));
    assert!(s.contains("generator  CPU 1.230s, 123µs per answer, 2 threads"), "{s}");
    assert!(s.contains("bytes      400.0kB out (40B/query)"), "{s}");
    assert_narrow(&s);
}

#[test]
fn text_marks_an_unbalanced_run_loudly() {
    let mut r = sample(Plan::default());
    r.totals.issued += 5;
    let s = text(&r);
    assert!(
        s.contains("fates      10005 issued = 9990 answered + 8 timed out + 2 failed + 0 unsent + 0 in flight  ✗"),
        "{s}"
    );
    assert!(!s.contains('✓'));
    let warn = s.lines().find(|l| l.starts_with("WARNING")).expect("a warning line");
    assert!(warn.contains("5 queries have no fate"), "{warn}");
    assert_narrow(&s);
}

#[test]
fn text_shows_in_flight_and_interruption() {
    let mut r = sample(Plan { in_flight: 40, ..Plan::default() });
    r.status = Status::Interrupted;
    r.warnings.push("the run was interrupted after 10.00s of 60s; 40 queries were still in flight when it stopped, and they are counted as such".into());
    let s = text(&r);
    println!("{s}");
    assert!(s.lines().next().unwrap().contains("INTERRUPTED"), "{s}");
    assert!(s.contains("status     INTERRUPTED"));
    assert!(s.contains("10040 issued = 9990 answered + 8 timed out + 2 failed + 0 unsent + 40 in flight  ✓"), "{s}");
    assert!(s.lines().any(|l| l.starts_with("warnings   ! the run was interrupted")));
    assert_narrow(&s);
}

#[test]
fn text_open_loop_shows_rate_and_lateness() {
    let r = sample(Plan { open_loop: true, ..Plan::default() });
    let s = text(&r);
    println!("{s}");
    assert!(s.contains("open loop, rate 1000 qps, duration 10s"), "{s}");
    let late = s.lines().find(|l| l.starts_with("lateness")).expect("lateness row");
    assert!(late.contains("ns ") && late.contains("µs") && late.contains("(10000 sends)"), "{late}");
    assert_narrow(&s);
}

/// The lateness split into the scheduler's and the wait for the transport, the causes of the
/// wait, and the concurrency the server allowed: in the text, the HTML, the JSON (read back
/// equal) and a merge (added up exactly).
#[test]
fn transport_waits_are_shown_apart_from_the_schedulers_lateness() {
    let r = sample(Plan { open_loop: true, waits: true, ..Plan::default() });
    let s = text(&r);
    let row =
        |label: &str| s.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("{label}: {s}")).to_string();
    assert!(row("  scheduler").ends_with("(10000 sends)"), "{s}");
    // 2500 for stream credit (i % 4 == 0) and 75 for a connection (i % 100 == 1, odd).
    assert!(row("  transport").ends_with("(2600 waited)"), "{s}");
    let causes = row("waited for");
    assert!(
        causes.contains("stream_credit 2500 queries (5000ms in all), connecting 100 queries (500ms in all)"),
        "{causes}"
    );
    assert_narrow(&s);
    let w = r.transport_wait.as_ref().unwrap();
    assert_eq!((w.queries, w.causes["stream_credit"].queries), (2600, 2500));

    let mut json = Vec::new();
    write_json(&r, &mut json).unwrap();
    let back: RunResult = serde_json::from_slice(&json).unwrap();
    assert_eq!(back.transport_wait.as_ref().unwrap().causes, w.causes);
    assert_eq!(back.schedule_lateness.as_ref().unwrap().histogram, r.schedule_lateness.as_ref().unwrap().histogram);

    let mut html = Vec::new();
    write_html_report(&[NamedRun::new("a", r.clone())], &mut html).unwrap();
    let html = String::from_utf8(html).unwrap();
    assert!(html.contains("scheduler lateness") && html.contains("transport wait"), "{html}");
    assert!(html.contains("stream_credit 2500 queries"), "{html}");

    let m = merge_runs(&[NamedRun::new("a", r.clone()), NamedRun::new("b", r.clone())], vec![]).unwrap().result;
    let mw = m.transport_wait.as_ref().unwrap();
    assert_eq!((mw.queries, mw.wait.count, mw.causes["stream_credit"].queries), (5200, 5200, 5000));
    assert!((mw.causes["connecting"].total_s - 1.0).abs() < 1e-9);
    assert_eq!(m.schedule_lateness.as_ref().unwrap().count, 20_000);
    assert_eq!(m.peak_on_wire, Some(12));

    // A closed loop whose server allowed 6 of the 100 asked: the load line says so.
    let closed = sample(Plan { waits: true, ..Plan::default() });
    let s = text(&closed);
    assert!(s.contains("concurrency 100 (at most 6 on the wire: the server's limit)"), "{s}");
}

/// Connections: each part of the handshake on its own line, and the handshake over the RTT as
/// plain ratios (2.0: two round trips).
#[test]
fn text_shows_handshakes_and_their_round_trips() {
    let mut r = sample(Plan::default());
    let mut h = volley_metrics::ConnHistograms::default();
    for i in 0..10u64 {
        h.record(&volley_metrics::Handshake {
            tcp_ns: Some(100_000),
            tls_ns: Some(100_000 + i * 1_000),
            rtt_ns: Some(100_000),
            ..Default::default()
        });
    }
    let counts = volley_metrics::ConnCounters { opened: 10, ..Default::default() };
    r.connections = Some(volley_metrics::ConnectionSummary::of(&counts, &h));
    let t = text(&r);
    assert!(s_line(&t, "hs tcp").contains("(10 connections)"), "{t}");
    assert!(s_line(&t, "hs tls").contains("(10 connections)"), "{t}");
    let ratio = s_line(&t, "hs/rtt");
    assert!(ratio.contains("min 2.0 p50 2.0") && ratio.contains("max 2.1 (10 connections)"), "{ratio}");
}

#[test]
fn text_of_a_run_without_answers() {
    let r = sample(Plan { answered: 0, timed_out: 50, failed: 0, ..Plan::default() });
    let s = text(&r);
    assert!(s.contains("50 issued = 0 answered + 50 timed out + 0 failed + 0 unsent + 0 in flight  ✓"));
    assert!(s.contains("latency    no answers"));
    assert!(s.contains("rcodes     none (no answers)"));
    assert!(!s.contains("NaN") && !s.contains("inf"));
    assert_narrow(&s);
}

#[test]
fn huge_numbers_wrap_the_equation_instead_of_overflowing() {
    let mut r = sample(Plan::default());
    let t = &mut r.totals;
    (t.issued, t.answered, t.timed_out, t.failed, t.in_flight) =
        (40_000_000_000_000, 39_000_000_000_000, 333_333_333_333, 333_333_333_333, 333_333_333_334);
    let s = text(&r);
    assert!(s.contains("fates      40000000000000 issued = 39000000000000 answered + 333333333333 timed out\n"), "{s}");
    assert!(s.contains("\n           + 333333333333 failed + 0 unsent + 333333333334 in flight  ✓\n"), "{s}");
    assert!(s.contains("in flight  ✓"));
    assert_narrow(&s);
}

#[test]
fn text_shows_the_resolved_address_only_when_the_url_lacks_it() {
    let mut r = sample(Plan::default());
    assert!(s_line(&text(&r), "target") == "target     udp://127.0.0.1:5353");
    r.target.url = "tcp://dns.example.net".into();
    r.target.address = "192.0.2.53:53".into();
    assert_eq!(s_line(&text(&r), "target"), "target     tcp://dns.example.net (address 192.0.2.53:53)");
}

/// The machine's steal time: a line of its own where the hypervisor took any, in the JSON as
/// `host`, and nothing of it where it took none.
#[test]
fn text_and_json_show_the_hosts_steal_time() {
    let mut r = sample(Plan::default());
    r.host = Some(volley_metrics::HostInfo { cpus: 2, steal_s: 0.2, steal_share: 0.025 });
    let s = text(&r);
    assert_eq!(
        s_line(&s, "host"),
        "host       steal 0.20s over 2 CPUs (2.5% of their time: the hypervisor ran something else)"
    );
    assert_narrow(&s);
    let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
    assert_eq!(v["host"]["cpus"], 2);
    assert_eq!(v["host"]["steal_share"], 0.025);
    r.host = Some(volley_metrics::HostInfo { cpus: 2, steal_s: 0.0, steal_share: 0.0 });
    assert!(!text(&r).lines().any(|l| l.starts_with("host")));
    r.host = None;
    assert!(!json(&r).contains("\"host\""));
}

fn s_line(s: &str, label: &str) -> String {
    s.lines().find(|l| l.starts_with(label)).unwrap().to_string()
}

#[test]
fn fmt_ns_boundaries() {
    assert_eq!(fmt_ns(999), "999ns");
    assert_eq!(fmt_ns(1_000), "1.00µs");
    assert_eq!(fmt_ns(999_999), "1.00ms");
    assert_eq!(fmt_ns(1_500_000), "1.50ms");
    assert_eq!(fmt_ns(12_000_000_000), "12.0s");
}

#[cfg(target_os = "linux")]
#[test]
fn atomic_write_where_no_file_can_be_created_leaves_nothing() {
    // /proc refuses new files even to root, so this holds whoever runs the tests.
    let r = sample(Plan::default());
    let path = Path::new("/proc/volley-report-test.json");
    let e = write_json_file_atomic(&r, path).unwrap_err();
    assert!(e.to_string().contains("/proc/volley-report-test.json"), "{e}");
    assert!(!path.exists());
    assert!(!Path::new(&format!("/proc/.volley-report-test.json.tmp-{}", std::process::id())).exists());
}

// ---- JSON ----------------------------------------------------------------------------------

fn json(r: &RunResult) -> String {
    let mut out = Vec::new();
    write_json(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn json_round_trips_through_a_file() {
    let r = sample(Plan { open_loop: true, in_flight: 3, ..Plan::default() });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.json");
    write_json_file_atomic(&r, &path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("}\n") && text.contains("\n  \"schema\": \"volley.results/1\""));
    // One line per histogram bucket: `[value_ns, count]`.
    let (v, n) = r.latency.histogram.pairs()[0];
    assert!(text.contains(&format!("\"buckets\": [\n        [{v}, {n}],\n")), "{text}");
    // Still plain JSON for any reader.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["totals"]["sent"], r.totals.sent);
    let back = read_json_file(&path).unwrap();
    assert_eq!(back.totals, r.totals);
    assert_eq!(back.latency.histogram, r.latency.histogram);
    assert_eq!(back.latency.p99_ns, r.latency.p99_ns);
    assert_eq!(back.send_lateness.as_ref().unwrap().histogram, r.send_lateness.as_ref().unwrap().histogram);
    assert_eq!(back.series.len(), r.series.len());
    assert_eq!(back.status, r.status);
    assert_eq!(back.load.rate, Some(1000.0));
    assert_eq!(back.load.concurrency, None);
    // Everything: the re-serialised file is byte for byte the same.
    assert_eq!(json(&back), text);
    // Overwriting an existing file works and leaves only it.
    write_json_file_atomic(&back, &path).unwrap();
    assert_eq!(entries(dir.path()), vec!["run.json"]);
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn atomic_write_to_a_directory_fails_cleanly() {
    let r = sample(Plan::default());
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("results");
    std::fs::create_dir(&sub).unwrap();
    let e = write_json_file_atomic(&r, &sub).unwrap_err();
    assert!(e.to_string().contains(&*sub.to_string_lossy()), "{e}");
    assert!(e.to_string().contains("directory"), "{e}");
    assert_eq!(entries(dir.path()), vec!["results"]);
    assert!(entries(&sub).is_empty());
}

#[test]
fn atomic_write_into_a_missing_directory_names_the_path() {
    let r = sample(Plan::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope").join("run.json");
    let e = write_json_file_atomic(&r, &path).unwrap_err();
    assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
    assert!(entries(dir.path()).is_empty());
}

#[cfg(unix)]
#[test]
fn atomic_write_into_an_unwritable_directory_leaves_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let r = sample(Plan::default());
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("run.json"), "old contents").unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // root ignores directory permissions: then there is nothing this test can check.
    let probe = ro.join(".probe");
    if std::fs::write(&probe, "").is_ok() {
        let _ = std::fs::remove_file(&probe);
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
        eprintln!("skipped: directory permissions are not enforced for this user");
        return;
    }
    let path = ro.join("run.json");
    let e = write_json_file_atomic(&r, &path).unwrap_err();
    assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
    assert_eq!(entries(&ro), vec!["run.json"]);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "old contents");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn wrong_or_missing_schema_is_rejected_naming_the_file() {
    let r = sample(Plan::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.json");
    let mut v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
    v["schema"] = "volley.results/2".into();
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    let e = read_json_file(&path).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ReportError::Schema { .. }), "{msg}");
    assert!(msg.contains(&*path.to_string_lossy()) && msg.contains("\"volley.results/2\""), "{msg}");
    assert!(msg.contains("volley.results/1"), "{msg}");

    v.as_object_mut().unwrap().remove("schema");
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    let msg = read_json_file(&path).unwrap_err().to_string();
    assert!(msg.contains(&*path.to_string_lossy()) && msg.contains("no \"schema\""), "{msg}");

    std::fs::write(&path, "{ not json").unwrap();
    let e = read_json_file(&path).unwrap_err();
    assert!(matches!(e, ReportError::Json { .. }) && e.to_string().contains("future.json"), "{e}");

    let missing = dir.path().join("missing.json");
    let e = read_json_file(&missing).unwrap_err();
    assert!(matches!(e, ReportError::Io { .. }) && e.to_string().contains("missing.json"), "{e}");
}

#[test]
fn unknown_fields_are_ignored_when_reading() {
    let r = sample(Plan::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("newer.json");
    let mut v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
    v["added_later"] = serde_json::json!({"x": 1});
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    assert_eq!(read_json_file(&path).unwrap().totals, r.totals);
}

// ---- CSV -----------------------------------------------------------------------------------

#[test]
fn csv_columns_sum_to_totals() {
    let r = sample(Plan { in_flight: 5, ..Plan::default() });
    let mut out = Vec::new();
    write_csv_series(&r, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    let mut lines = s.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header,
        [
            "second",
            "sent",
            "answered",
            "timed_out",
            "failed",
            "truncated",
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "p999_ns",
            "max_ns",
            "issued",
            "unsent",
            "NOERROR",
            "NXDOMAIN",
            "error_refused",
            "error_reset",
            "unexpected_late",
            "unexpected_unknown_id"
        ]
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), r.series.len());
    assert!(rows.iter().all(|row| row.len() == header.len()));
    let sum = |name: &str| -> u64 {
        let i = header.iter().position(|h| *h == name).unwrap();
        rows.iter().map(|row| row[i].parse::<u64>().unwrap()).sum()
    };
    let t = &r.totals;
    assert_eq!(sum("issued"), t.issued);
    assert_eq!(sum("sent"), t.sent);
    assert_eq!(sum("unsent"), t.unsent);
    assert_eq!(sum("answered"), t.answered);
    assert_eq!(sum("timed_out"), t.timed_out);
    assert_eq!(sum("failed"), t.failed);
    assert_eq!(sum("truncated"), t.truncated);
    assert_eq!(sum("NOERROR"), t.rcodes["NOERROR"]);
    assert_eq!(sum("NXDOMAIN"), t.rcodes["NXDOMAIN"]);
    assert_eq!(sum("error_reset"), t.errors["reset"]);
    assert_eq!(sum("error_refused"), t.errors["refused"]);
    assert_eq!(sum("unexpected_late"), t.unexpected["late"]);
    assert_eq!(sum("second"), (0..r.series.len() as u64).sum::<u64>());
    // Latency cells: numbers where the second had answers, ordered p50 <= p99 <= max.
    let row = &rows[0];
    let v = |i: usize| row[i].parse::<u64>().unwrap();
    assert!(v(6) > 0 && v(6) <= v(8) && v(8) <= v(10));
}

#[test]
fn csv_has_the_connection_series_with_closes_by_how() {
    let mut r = sample(Plan { seconds: 3, ..Plan::default() });
    let by = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    let seconds = [
        (4, 4, 0, by(&[])),
        (2, 3, 3, by(&[("server_fin", 1), ("client_lifetime", 2)])),
        (0, 0, 3, by(&[("idle_timeout", 3)])),
    ];
    for (row, (active, opened, closed, closed_by)) in r.series.iter_mut().zip(seconds) {
        // The handshake times of the second's new connections: 100 µs each, and one of 2 ms.
        let handshake = (opened > 0).then(|| {
            let mut h = volley_metrics::Histogram::new(2);
            h.record_n(100_000, opened - 1);
            h.record(2_000_000);
            volley_metrics::SecondLatency::of(&h)
        });
        row.connections = Some(volley_metrics::SecondConnections {
            active,
            opened,
            closed,
            closed_by,
            failed: 0,
            resumed: 1,
            early_data_offered: opened,
            early_data_accepted: opened / 2,
            handshake_tcp: handshake.clone(),
            handshake,
            ..Default::default()
        });
    }
    let mut out = Vec::new();
    write_csv_series(&r, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    let mut lines = s.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} in {header:?}"));
    // The closes in `Close` order: server's before client's, idle timeout between.
    assert!(
        at("closed_server_fin") < at("closed_idle_timeout") && at("closed_idle_timeout") < at("closed_client_lifetime")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|row| row.len() == header.len()), "{s}");
    // The three seconds above, then any second without connection events (all zero).
    let col = |name: &str| {
        let v: Vec<u64> = rows.iter().map(|row| row[at(name)].parse::<u64>().unwrap()).collect();
        assert!(v[3..].iter().all(|&n| n == 0), "{name}: {v:?}");
        v[..3].to_vec()
    };
    assert_eq!(col("conns_active"), [4, 2, 0]);
    assert_eq!(col("conns_opened"), [4, 3, 0]);
    assert_eq!(col("conns_closed"), [0, 3, 3]);
    assert_eq!(col("conns_resumed"), [1, 1, 1]);
    assert_eq!(col("conns_early_offered"), [4, 3, 0]);
    assert_eq!(col("conns_early_accepted"), [2, 1, 0]);
    assert_eq!(col("closed_server_fin"), [0, 1, 0]);
    assert_eq!(col("closed_client_lifetime"), [0, 2, 0]);
    assert_eq!(col("closed_idle_timeout"), [0, 0, 3]);
    // Handshake percentiles of the seconds with new connections, empty cells otherwise.
    let hs = |name: &str| rows.iter().map(|row| row[at(name)].to_string()).collect::<Vec<_>>();
    let (p50, p99) = (hs("hs_p50_ns"), hs("hs_p99_ns"));
    assert!(p50[0].parse::<u64>().unwrap() < 110_000 && p99[0].parse::<u64>().unwrap() > 1_900_000, "{s}");
    assert!(p50[2].is_empty() && p99[2].is_empty(), "{s}");
    // The parts: TCP as recorded, no TLS or QUIC part.
    assert_eq!(hs("hs_tcp_p50_ns")[..2], p50[..2], "{s}");
    assert!(hs("hs_tls_p50_ns").iter().chain(hs("hs_quic_p50_ns").iter()).all(|c| c.is_empty()), "{s}");
}

#[test]
fn csv_leaves_latency_empty_without_answers() {
    let r = sample(Plan { answered: 0, timed_out: 20, failed: 0, seconds: 2, ..Plan::default() });
    let mut out = Vec::new();
    write_csv_series(&r, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    let first = s.lines().nth(1).unwrap();
    assert!(first.starts_with("0,10,0,10,0,0,,,,,"), "{s}");
}

// ---- progress ------------------------------------------------------------------------------

#[test]
fn progress_line_for_a_second() {
    let r = sample(Plan::default());
    let p = Progress { row: r.series[3].clone() };
    let line = progress_line(&p, 3.4, Some(10.0));
    assert!(line.starts_with("[  3s/10s]  qps 1000  answered 100.00%  p99 "), "{line}");
    assert!(line.ends_with("µs  timeouts 0  errors 0"), "{line}");
    assert!(!line.contains('\n') && !line.contains('\r'));
    let last = Progress { row: r.series[9].clone() };
    let line = progress_line(&last, 9.9, None);
    assert!(line.starts_with("[  9s]  qps 1000  answered 99.00%  p99 "), "{line}");
    assert!(line.contains("timeouts 8  errors 2"), "{line}");
    let mut empty = r.series[0].clone();
    (empty.issued, empty.sent, empty.answered, empty.timed_out, empty.failed) = (0, 0, 0, 0, 0);
    let line = progress_line(&Progress { row: empty.clone() }, 12.0, Some(3600.0));
    assert_eq!(line, "[  12s/3600s]  qps 0  answered -  p99 -  timeouts 0  errors 0");
    // Past the planned length, with nothing sent: the run waits for its last answers.
    let line = progress_line(&Progress { row: empty.clone() }, 4.0, Some(3.0));
    assert_eq!(line, "[  3s/3s]  qps 0  answered -  p99 -  timeouts 0  errors 0  waiting for the last answers");
    // With --target-pid, the target's CPU in that second.
    let mut row = r.series[3].clone();
    row.target_cpu_s = Some(0.854);
    assert!(progress_line(&Progress { row }, 3.4, None).ends_with("errors 0  target cpu 85%"));
    // Connection-based transports: open, opened and closed in that second, failed attempts.
    let mut row = r.series[3].clone();
    row.connections =
        Some(volley_metrics::SecondConnections { active: 64, opened: 3, closed: 2, ..Default::default() });
    assert!(progress_line(&Progress { row: row.clone() }, 3.4, None).ends_with("errors 0  conns 64 (+3 -2)"));
    row.connections.as_mut().unwrap().failed = 1;
    assert!(progress_line(&Progress { row }, 3.4, None).ends_with("errors 0  conns 64 (+3 -2 1 failed)"));
}

// ---- bench ---------------------------------------------------------------------------------

fn bench_row(transport: &str, qps: f64, note: Option<&str>) -> BenchRow {
    BenchRow {
        transport: transport.into(),
        qps,
        answered_ratio: 0.9998,
        p50_ns: 212_000,
        p99_ns: 1_500_000,
        cpu_us_per_answer: 4.25,
        connections: None,
        handshake_p50_ns: None,
        handshake_rtts: None,
        resumed: None,
        bytes_per_query: None,
        packets_per_query: None,
        target_cpu_us_per_answer: None,
        note: note.map(Into::into),
    }
}

#[test]
fn bench_table_ratios_and_alignment() {
    let rows = vec![
        bench_row("udp", 100_000.0, None),
        bench_row("tcp", 41_000.0, None),
        bench_row("doh2", 25_000.0, Some("HTTP/2, 1 connection per thread")),
    ];
    let mut out = Vec::new();
    write_bench_table(&rows, &mut out).unwrap();
    let s = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 4, "{s}");
    let words: Vec<&str> = lines[0].split("  ").map(str::trim).filter(|w| !w.is_empty()).collect();
    assert_eq!(words, ["transport", "qps", "qps vs udp", "answered", "p50", "p99", "gen CPU/query"]);
    let ratio = |l: &str| l.split_whitespace().nth(2).unwrap().to_string();
    assert!(lines[1].starts_with("udp") && ratio(lines[1]) == "1.00x", "{s}");
    assert_eq!(ratio(lines[2]), "0.41x", "{s}");
    assert_eq!(ratio(lines[3]), "0.25x", "{s}");
    assert!(lines[3].ends_with("  HTTP/2, 1 connection per thread"), "{s}");
    assert!(lines[1].contains("100000") && lines[1].contains("99.98%") && lines[1].contains("212µs"));
    assert!(lines[1].contains("1.50ms") && lines[1].ends_with("4.25µs"));
    // Right-aligned columns end at the same column in every line.
    let end = |l: &str, w: &str| l[..l.find(w).unwrap()].chars().count() + w.chars().count();
    assert_eq!(end(lines[0], "qps vs udp"), end(lines[1], "1.00x"));
    assert_eq!(end(lines[0], "qps"), end(lines[2], "41000"));

    let no_udp = vec![bench_row("tcp", 41_000.0, None)];
    let t = bench_table(&no_udp).lines();
    assert_eq!(t[1].split_whitespace().nth(2), Some("-"), "{t:?}");
}

#[test]
fn bench_rows_serialise() {
    let row = bench_row("dot", 12_345.5, Some("resumption off"));
    let back: BenchRow = serde_json::from_str(&serde_json::to_string(&row).unwrap()).unwrap();
    assert_eq!(back.transport, "dot");
    assert_eq!(back.note.as_deref(), Some("resumption off"));
    let plain: BenchRow = serde_json::from_str(
        r#"{"transport":"udp","qps":1.0,"answered_ratio":1.0,"p50_ns":1,"p99_ns":2,"cpu_us_per_answer":0.5}"#,
    )
    .unwrap();
    assert!(plain.note.is_none());
}

/// A part of a split run says which, and how it started; a coordinator's merge says how many
/// parts it holds, the skew, and loudly when parts are missing.
#[test]
fn text_names_the_part_and_the_merge_of_parts() {
    let mut r = sample(Plan::default());
    r.part = Some(volley_metrics::PartInfo {
        index: 1,
        count: 3,
        start: Some(volley_metrics::PartStart {
            planned_unix_ns: 0,
            late_ns: 42_000,
            clock_offset_ns: Some(-1_500_000),
            rtt_ns: Some(80_000),
        }),
    });
    let t = text(&r);
    assert!(t.contains("part       1 of 3 (this part's share of the run"), "{t}");
    assert!(t.contains("clock -1.500 ms from the coordinator's"), "{t}");
    r.part = None;
    r.scale = Some(volley_metrics::ScaleInfo {
        parts: 3,
        complete: false,
        missing_share: 1.0 / 3.0,
        start_unix_ns: 0,
        start_skew_ns: Some(300_000),
        part_list: (0..3)
            .map(|i| volley_metrics::ScalePart {
                index: i,
                status: if i == 1 { "lost".into() } else { "merged".into() },
                share: 1.0 / 3.0,
                peer: Some(format!("198.18.0.{}:4000", 10 + i)),
                clock_offset_ns: (i != 1).then_some(-2_000),
                rtt_ns: (i != 1).then_some(60_000),
                start_offset_ns: (i != 1).then_some(i64::from(i) * 150_000),
                reason: (i == 1).then(|| "it closed the connection before its results came".into()),
            })
            .collect(),
    });
    let t = text(&r);
    assert!(
        t.contains("parts      2 parts merged of 3, start skew") && t.contains("INCOMPLETE, 33.3% of the load missing"),
        "{t}"
    );
    assert!(t.contains("part 2: merged, 33.3% of the load, from 198.18.0.12:4000, started +0.300 ms"), "{t}");
    assert!(t.contains("part 1: lost, 33.3% of the load, from 198.18.0.11:4000 (it closed"), "{t}");
    // The HTML report's scale-out section: every part, its share, start offset, and the lost one.
    let mut html = Vec::new();
    write_html_report(&[NamedRun::new("merged", r.clone())], &mut html).unwrap();
    let html = String::from_utf8(html).unwrap();
    let section = &html[html.find("<h3>Scale out</h3>").expect("a scale-out section")..];
    let section = &section[..section.find("<h3>Summary</h3>").unwrap()];
    assert!(section.contains("2 of 3 parts merged") && section.contains("start skew 300"), "{section}");
    assert!(
        section.contains("INCOMPLETE: 33.3% of the load is missing: part 1 (lost, 33.3% of the load)"),
        "{section}"
    );
    for (i, offset) in [(0, "+0ns"), (2, "+300µs")] {
        let row = format!(
            "<td>{i}</td><td class=\"n\">merged</td><td class=\"n\">33.3%</td><td class=\"n\">198.18.0.{}:4000</td>",
            10 + i
        );
        assert!(section.contains(&row) && section.contains(offset), "{section}");
    }
    assert!(section.contains("<td>1</td><td class=\"n\">lost</td>"), "{section}");
    r.scale = None;
    let mut html = Vec::new();
    write_html_report(&[NamedRun::new("one", r)], &mut html).unwrap();
    assert!(!String::from_utf8(html).unwrap().contains("Scale out"), "no section for a run that is not split");
}
