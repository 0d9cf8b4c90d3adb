//! The HTML report: written from results with known contents, checked to reference nothing
//! outside itself, then opened in headless Chromium (Debian's `chromium`, installed by
//! scripts/install-deps.sh; a missing Chromium is a failure, never a skip): its DOM dumped and
//! asserted, a screenshot taken, no console message, and no network request made by the page
//! (Chromium's own net log read back).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use volley_report::*;

fn chromium() -> PathBuf {
    for d in ["/usr/bin", "/usr/local/bin", "/snap/bin"] {
        for name in ["chromium", "chromium-browser"] {
            let p = Path::new(d).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("chromium is not installed: run scripts/install-deps.sh (Debian package `chromium`)");
}

/// Runs headless Chromium on `page` with `extra` flags; returns (stdout, stderr, net log).
fn run_chromium(page: &Path, extra: &[String], dir: &Path) -> (String, String, serde_json::Value) {
    let profile = tempfile::tempdir().unwrap();
    let netlog = dir.join(format!("netlog-{}.json", extra.len()));
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--enable-logging=stderr",
        "--v=0",
        // Nothing can leave the machine, whatever the browser itself tries.
        "--host-resolver-rules=MAP * ~NOTFOUND",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("--log-net-log={}", netlog.display()))
    .args(extra)
    .arg(format!("file://{}", page.display()))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = cmd.spawn().expect("start chromium");
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let start = Instant::now();
    let out = match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(out) => out.expect("chromium output"),
        Err(_) => {
            kill(id);
            panic!("chromium did not finish within {:?}", start.elapsed());
        }
    };
    assert!(out.status.success(), "chromium failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let log = std::fs::read_to_string(&netlog).unwrap_or_default();
    // Chromium may leave the net log without its closing brackets when it exits quickly.
    let log: serde_json::Value = serde_json::from_str(&log)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", log.trim_end().trim_end_matches(','))))
        .unwrap_or_else(|e| panic!("net log {}: {e}", netlog.display()));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned(), log)
}

/// Kills a process this test started, by its id.
fn kill(pid: u32) {
    let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
}

/// URLs of network requests made on behalf of the page (a `file://` document), from a net
/// log: URL_REQUEST_START_JOB events whose network isolation key is the file origin.
/// Chromium's own background requests (updates, time, accounts) are not the page's.
fn page_requests(log: &serde_json::Value) -> Vec<String> {
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_u64();
    let Some(events) = log["events"].as_array() else { return Vec::new() };
    events
        .iter()
        .filter(|e| e["type"].as_u64() == start_job)
        .filter(|e| e["params"]["network_isolation_key"].as_str().is_some_and(|k| k.contains("file://")))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .collect()
}

fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught")).collect()
}

fn runs() -> Vec<NamedRun> {
    // 1013 queries sent, 1000 answered; on the wire 2026 packets out and 1500 in.
    let wire = volley_metrics::WireStats {
        bytes_out: 162_080,
        bytes_in: 120_000,
        packets_out: 2026,
        packets_in: 1500,
        retransmits: 0,
    };
    let mut udp =
        named("udp-run", &Spec { nxdomain_every: Some(4), timed_out: 10, failed: 3, wire, ..Spec::default() });
    udp.result.warnings.push("the generator fell behind <by 2 ms> & more".into());
    let tcp = named("tcp-run", &tcp_spec());
    vec![udp, tcp]
}

/// Everything the HTML must not hold for a browser to fetch anything.
fn assert_self_contained(html: &str) {
    for needle in ["http://", "https://", "<script", "<link", "<img", "<iframe", "@import", "url(", "src=", "//cdn"] {
        assert!(!html.contains(needle), "the report contains {needle:?}");
    }
    for href in html.split("href=\"").skip(1) {
        assert!(href.starts_with('#'), "a link leaves the page: {}", &href[..href.len().min(60)]);
    }
}

#[test]
fn report_is_self_contained_and_complete() {
    let runs = runs();
    let mut out = Vec::new();
    write_html_report(&runs, &mut out).unwrap();
    let html = String::from_utf8(out).unwrap();
    assert_self_contained(&html);
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Two run sections and the comparison; the exact command, shell-quoted.
    assert_eq!(html.matches("<section class=\"run\"").count(), 2);
    assert!(html.contains("id=\"comparison\""));
    assert!(html.contains("<pre class=\"command\">volley run udp://127.0.0.1:5353 -l 5s --name &#39;it&#39;\\&#39;&#39;s here&#39;</pre>"), "{}", html.lines().find(|l| l.contains("class=\"command\"")).unwrap_or(""));
    // The accounting equation, balanced.
    assert!(
        html.contains("issued = answered + timed out + failed + unsent + in flight: 1013 = 1000 + 10 + 3 + 0 + 0 ✓")
    );
    // Warnings are escaped.
    assert!(html.contains("the generator fell behind &lt;by 2 ms&gt; &amp; more"));
    // Charts: 6 combined (both runs) + 4 for the UDP run (no connections, no handshakes) + 6 for TCP.
    assert_eq!(html.matches("<figure class=\"chart\"").count(), 16);
    assert_eq!(html.matches("<svg").count(), 16);
}

/// A mixture's groups get a table of their own, each group on a row with its rate and counts.
#[test]
fn report_shows_the_groups_of_a_mixture() {
    let mut run = named("mix", &tcp_spec());
    let group = |name: &str, clients: u64, rate: Option<f64>| volley_metrics::GroupSummary {
        name: name.into(),
        profile: name.split(['@', ':']).next().unwrap_or_default().into(),
        target: run.result.target.clone(),
        clients,
        client_rate: rate,
        totals: run.result.totals.clone(),
        latency: run.result.latency.clone(),
        connections: None,
    };
    run.result.groups = vec![group("stub:1@udp", 80, Some(1.0)), group("browser:5@https", 20, Some(5.0))];
    let mut out = Vec::new();
    write_html_report(&[run], &mut out).unwrap();
    let html = String::from_utf8(out).unwrap();
    assert!(html.contains("<h3>Groups of clients</h3>"), "no groups section");
    assert!(
        html.contains("<td>stub:1@udp</td><td class=\"n\">80</td><td class=\"n\">1</td>"),
        "{}",
        html.lines().find(|l| l.contains("stub:1")).unwrap_or("")
    );
    assert!(html.contains("<td>browser:5@https</td><td class=\"n\">20</td><td class=\"n\">5</td>"));
    // Runs without groups have none.
    let mut out = Vec::new();
    write_html_report(&runs(), &mut out).unwrap();
    assert!(!String::from_utf8(out).unwrap().contains("Groups of clients"));
}

#[test]
fn report_renders_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    write_html_report_file(&runs(), &page).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);

    // The DOM as Chromium built it.
    let (dom, stderr, log) = run_chromium(&page, &["--dump-dom".to_string()], dir.path());
    assert!(console_lines(&stderr).is_empty(), "console messages: {:?}", console_lines(&stderr));
    assert!(page_requests(&log).is_empty(), "the page made network requests: {:?}", page_requests(&log));
    assert_eq!(dom.matches("<figure class=\"chart\"").count(), 16, "charts in the DOM");
    assert!(dom.matches("<svg").count() >= 16);
    for chart in ["response_rate", "latency_percentiles", "latency_over_time", "qps", "connections", "handshake_cdf"] {
        assert!(dom.contains(&format!("data-chart=\"{chart}\"")), "chart {chart} missing");
    }
    // Tables filled: the comparison, the summaries, errors by kind, RCODEs.
    assert!(dom.contains("<table class=\"compare\">"));
    let compare = &dom[dom.find("<table class=\"compare\">").unwrap()..];
    let compare = &compare[..compare.find("</table>").unwrap()];
    assert!(
        compare.contains("answers/s") && compare.contains("latency p99") && compare.contains("x</td>"),
        "{compare}"
    );
    assert!(compare.contains("<td>packets out/query</td><td class=\"n\">2.00</td><td class=\"n\">-</td>"), "{compare}");
    assert_eq!(dom.matches("<table class=\"summary\">").count(), 2);
    // Wire bytes and packets, headers included, per query sent and per answer.
    assert!(dom.contains(
        "<td>wire out (headers included)</td><td class=\"n\">162.1kB, 2026 packets</td><td class=\"n\">160B, 2.00 packets/query</td>"
    ));
    assert!(dom.contains(
        "<td>wire in (headers included)</td><td class=\"n\">120.0kB, 1500 packets</td><td class=\"n\">120B, 1.50 packets/answer</td>"
    ));
    assert!(dom.contains("<td>answered</td><td class=\"n\">1000</td>"));
    let errors = &dom[dom.find("<table class=\"errors\">").expect("errors table")..];
    assert!(errors[..errors.find("</table>").unwrap()].contains("<td>reset</td><td class=\"n\">3</td>"));
    assert!(dom.contains("<td>NXDOMAIN</td><td class=\"n\">250</td>"));
    assert!(dom.contains("class=\"equation ok\""));
    // Legends of both runs inside the combined charts.
    assert!(dom.contains("udp-run: answered") && dom.contains("tcp-run (tcp)"));

    // A screenshot, kept where the test can be looked at when VOLLEY_REPORT_SHOT is set.
    let shot = dir.path().join("report.png");
    let (_, stderr, log) = run_chromium(
        &page,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,4000".to_string(),
            "--hide-scrollbars".into(),
        ],
        dir.path(),
    );
    assert!(console_lines(&stderr).is_empty(), "console messages: {:?}", console_lines(&stderr));
    assert!(page_requests(&log).is_empty(), "the page made network requests: {:?}", page_requests(&log));
    let png_bytes = std::fs::read(&shot).expect("screenshot written");
    assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    let mut reader = png::Decoder::new(std::io::Cursor::new(&png_bytes[..])).read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (1280, 4000));
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut buf).unwrap();
    let coloured = buf.chunks(3).filter(|p| p.len() == 3 && (p[0] as i32 - p[2] as i32).abs() > 60).count();
    assert!(coloured > 1000, "the screenshot shows no coloured chart lines ({coloured} pixels)");
    if let Some(keep) = std::env::var_os("VOLLEY_REPORT_SHOT") {
        std::fs::copy(&shot, keep).unwrap();
        std::fs::copy(&page, dir.path().join("..").join("volley-report.html")).ok();
    }
}

#[test]
fn the_network_check_catches_a_page_that_fetches() {
    // The detector itself: a page with a remote image is caught (nothing leaves the machine:
    // every host name resolves to nothing).
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><p>x</p><img src=\"https://example.invalid/x.png\"><script>console.error('boom')</script>",
    )
    .unwrap();
    let (_, stderr, log) = run_chromium(&page, &["--dump-dom".to_string()], dir.path());
    assert!(page_requests(&log).iter().any(|u| u.contains("example.invalid")), "{:?}", page_requests(&log));
    assert!(!console_lines(&stderr).is_empty());
}

#[test]
fn single_run_report_has_no_comparison() {
    let run = named("only", &Spec::default());
    let mut out = Vec::new();
    write_html_report(&[run], &mut out).unwrap();
    let html = String::from_utf8(out).unwrap();
    assert_self_contained(&html);
    assert!(!html.contains("id=\"comparison\""));
    assert_eq!(html.matches("<section class=\"run\"").count(), 1);
    assert!(html.contains("<p class=\"errors muted\">none</p>"));
}

/// Repeated runs compared side by side (`volley compare --a ... --b ... --html`): the table holds
/// each side's median and range and the noise verdicts, the charts hold every run; opened in
/// Chromium with no console message and no network request.
#[test]
fn comparison_of_repeated_runs_renders_in_headless_chromium() {
    let side = |prefix: &str, cpu_ms: &[u64], transport: &'static str| -> Vec<NamedRun> {
        cpu_ms
            .iter()
            .enumerate()
            .map(|(i, ms)| {
                named(&format!("{prefix}{}", i + 1), &Spec { cpu_ns: ms * 1_000_000, transport, ..Spec::default() })
            })
            .collect()
    };
    // CPU per answer: old 100, 110, 120 µs; new 200, 210, 190 µs: beyond noise.
    let sides = vec![
        ("old".to_string(), side("old", &[110, 100, 120], "udp")),
        ("new".to_string(), side("new", &[200, 210, 190], "udp")),
    ];
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("compare.html");
    write_html_comparison_file(&sides, &page).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);

    let (dom, stderr, log) = run_chromium(&page, &["--dump-dom".to_string()], dir.path());
    assert!(console_lines(&stderr).is_empty(), "console messages: {:?}", console_lines(&stderr));
    assert!(page_requests(&log).is_empty(), "the page made network requests: {:?}", page_requests(&log));
    assert!(
        dom.contains("<li><b>old</b>: old1, old2, old3</li>") && dom.contains("<li><b>new</b>: new1, new2, new3</li>")
    );
    let compare = &dom[dom.find("<table class=\"compare\">").expect("compare table")..];
    let compare = &compare[..compare.find("</table>").unwrap()];
    assert!(compare.contains("<th class=\"n\">old (3 runs)</th>"), "{compare}");
    assert!(
        compare.contains(
            "<td>CPU/answer</td><td class=\"n\">110µs (100µs–120µs)</td><td class=\"n\">200µs (190µs–210µs)</td>\
             <td class=\"n\">1.82x</td><td class=\"n beyond\">beyond noise</td>"
        ),
        "{compare}"
    );
    assert!(compare.contains("<td class=\"n\">within noise</td>"), "{compare}");
    // Six runs, each with its section; the combined charts have every run in their legends.
    assert_eq!(dom.matches("<section class=\"run\"").count(), 6);
    let combined = &dom[dom.find("id=\"comparison\"").unwrap()..dom.find("id=\"run-1\"").unwrap()];
    assert_eq!(combined.matches("<figure class=\"chart\"").count(), 4, "UDP runs: no connection charts");
    for name in ["old1", "old3", "new1", "new3"] {
        assert!(combined.contains(&format!("{name}: answered")), "{name} missing from the response rate legend");
    }
}

/// A run behind an emulated link: its table (settings, counters per direction), its lateness,
/// and the chart of its drops and queue over time.
#[test]
fn report_shows_the_emulated_link() {
    use volley_metrics::{LinkCounters, LinkDirection, LinkInfo, LinkSecond, LinkSecondDir};
    let mut run = named("udp-run", &Spec::default());
    let counts = LinkCounters { packets_in: 1000, packets_out: 995, dropped_loss: 5, ..Default::default() };
    let series = (0..5)
        .map(|s| LinkSecond {
            second: s,
            up: LinkSecondDir { dropped_loss: 1, ..Default::default() },
            ..Default::default()
        })
        .collect();
    run.result.link = Some(LinkInfo {
        spec: "4g".into(),
        seed: 7,
        up: LinkDirection { settings: "loss 0.5%, delay 53.3ms".into(), counts, queue_delay: None },
        series,
        ..Default::default()
    });
    let mut out = Vec::new();
    write_html_report(&[run], &mut out).unwrap();
    let html = String::from_utf8(out).unwrap();
    assert!(html.contains("<h3>Emulated link: 4g (seed 7)</h3>"), "the link's heading");
    assert!(
        html.contains("<td>up</td><td class=\"n\">loss 0.5%, delay 53.3ms</td><td class=\"n\">1000</td><td class=\"n\">995</td><td class=\"n\">5</td>"),
        "the up row"
    );
    assert!(html.contains("Emulated link: drops and queue over time"), "the link's chart");
}
