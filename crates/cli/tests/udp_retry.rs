//! A stub resolver's ways over UDP (issue 13, item 7): `--udp-retry DUR --udp-tries N` sends a
//! query again when no answer came, each query keeping one fate and its latency from its first
//! send; `--tc-fallback` asks a truncated answer's question again over TCP. Observed against
//! `volley serve` (its `stats` line counts every query it read) and through an emulated lossy
//! link (`--link`).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

fn show(v: &Value) -> String {
    format!(
        "totals:\n{:#}\nevents:\n{:#}\nlatency p50 {} p99 {}",
        v["totals"], v["events"], v["latency"]["p50_ns"], v["latency"]["p99_ns"]
    )
}

fn event(v: &Value, name: &str) -> u64 {
    v["events"][name].as_u64().unwrap_or(0)
}

/// Sends beyond each query's first, from `totals.tries` ({"2": n, "3": m, ...}).
fn sends_again(v: &Value) -> u64 {
    v["totals"]["tries"].as_object().map_or(0, |m| {
        m.iter().map(|(k, n)| (k.trim_end_matches('+').parse::<u64>().unwrap() - 1) * n.as_u64().unwrap()).sum()
    })
}

/// Queries sent more than once, from `totals.tries`.
fn queries_sent_again(v: &Value) -> u64 {
    v["totals"]["tries"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// The most a count of `n` independent events of probability `p` lies above its expectation
/// here: 4 standard deviations, and 3 for tiny expectations.
fn binomial_high(n: u64, p: f64) -> f64 {
    let mean = n as f64 * p;
    mean + 4.0 * (mean * (1.0 - p)).sqrt() + 3.0
}

/// The least such a count lies below its expectation: 4 standard deviations.
fn binomial_low(n: u64, p: f64) -> f64 {
    let mean = n as f64 * p;
    mean - 4.0 * (mean * (1.0 - p)).sqrt()
}

/// One run against a fresh `volley serve ARGS` (one thread); its results and the responder's
/// `stats` line.
fn against(serve: &[&str], run: &[&str]) -> (Value, String) {
    let mut args = vec!["-T", "1"];
    args.extend_from_slice(serve);
    let mut s = Server::start_with(&args);
    let url = s.udp_url();
    let mut a = vec![url.as_str()];
    a.extend_from_slice(run);
    let r = run_volley(&a);
    let stats = s.terminate();
    let v = r.ok().clone();
    check_accounting(&v);
    assert_eq!(v["status"], "complete", "{v:#}");
    (v, stats)
}

/// The responder drops 1 query in 5. Without a retry, a fifth of the queries time out; with
/// `--udp-retry 100ms --udp-tries 3` a query is lost only when each of its three sends is
/// (about 0.2^3 of them), and no query has two fates. The responder read each query once per
/// send: the retransmissions counted are what it saw beyond the run's queries (and its one
/// probe query). The retried answers came at least the retry's delay after the first send,
/// which the tail shows.
#[test]
fn retries_recover_dropped_queries_and_are_counted() {
    let load = ["-c", "20", "-n", "3000", "-t", "1s", "--connections", "4"];
    let (plain, _) = against(&["--drop", "1/5"], &load);
    let n = total(&plain, "sent");
    let lost = total(&plain, "timed_out");
    assert!(lost * 10 >= n * 19 / 10 && lost * 10 <= n * 21 / 10, "a fifth lost without a retry:\n{}", show(&plain));
    assert_eq!(event(&plain, "udp_retries"), 0);

    let mut with_retry = load.to_vec();
    with_retry.extend(["--udp-retry", "100ms", "--udp-tries", "3"]);
    let (v, stats) = against(&["--drop", "1/5"], &with_retry);
    assert_eq!((v["load"]["udp_retry_ms"].as_f64(), v["load"]["udp_tries"].as_u64()), (Some(100.0), Some(3)));
    assert!(plain["load"]["udp_retry_ms"].is_null() && plain["load"]["tc_fallback"].is_null());
    let sent = total(&v, "sent");
    assert_eq!(total(&v, "issued"), 3000, "{}", show(&v));
    assert_eq!(total(&v, "answered") + total(&v, "timed_out"), 3000, "{}", show(&v));
    let timed_out = total(&v, "timed_out");
    assert!(
        (timed_out as f64) <= binomial_high(sent, 0.2f64.powi(3)),
        "{timed_out} of {sent} timed out: about 0.2^3 expected with three tries\n{}",
        show(&v)
    );
    let retries = event(&v, "udp_retries");
    assert!(retries as f64 >= sent as f64 * 0.15, "about a fifth sent again: {retries} of {sent}\n{}", show(&v));
    // Counted once each: the event, and per query in `tries`.
    assert_eq!(sends_again(&v), retries, "{}", show(&v));
    assert!(v["totals"]["tries"]["3"].as_u64().unwrap_or(0) > 0, "some went out three times:\n{}", show(&v));
    // What the responder read: each query once per send, and the probe.
    assert_eq!(serve_stat(&stats, "queries"), sent + retries + 1, "{stats}\n{}", show(&v));
    // A dropped query is never answered: nothing came twice.
    assert_eq!(map_sum(&v["totals"]["unexpected"]), 0, "{}", show(&v));
    // A fifth of the answers came after a retry (100 ms or more after the first send): the
    // tail, but not the median, is above the retry's delay.
    let (p50, p99) = (v["latency"]["p50_ns"].as_u64().unwrap(), v["latency"]["p99_ns"].as_u64().unwrap());
    assert!(p99 >= 100_000_000, "p99 {p99} ns: the retried answers count from their first send\n{}", show(&v));
    assert!(p50 < 100_000_000, "p50 {p50} ns: most were answered at once\n{}", show(&v));
}

/// The responder delays 1 answer in 5 by 300 ms; the client sends again after 100 ms. Both
/// sends of such a query are answered: the first answer is its fate, the other comes late
/// (counted as `late`, never a second fate). When the second send's answer is delayed too, the
/// first send's answer wins (`udp_answers_to_earlier_send`).
#[test]
fn a_second_answer_is_late_never_a_second_fate() {
    let (v, stats) = against(
        &["--delay", "300ms:1/5"],
        &["-Q", "200", "-l", "2s", "-t", "1s", "--udp-retry", "100ms", "--udp-tries", "2"],
    );
    let sent = total(&v, "sent");
    assert_eq!(total(&v, "answered"), sent, "every query answered once:\n{}", show(&v));
    let retries = event(&v, "udp_retries");
    assert!(retries as f64 >= sent as f64 * 0.15, "{}", show(&v));
    assert_eq!(queries_sent_again(&v), retries, "two tries at most: one resend per query\n{}", show(&v));
    assert_eq!(serve_stat(&stats, "queries"), sent + retries + 1, "{stats}");
    let late = unexpected(&v, "late");
    // Each retried query has two answers; the run ends once every query has its fate, so the
    // delayed answers of the last 300 ms may not arrive.
    assert!(late > 0 && late <= retries, "late {late}, retries {retries}\n{}", show(&v));
    assert_eq!(unexpected(&v, "unknown_id"), 0, "{}", show(&v));
    let earlier = event(&v, "udp_answers_to_earlier_send");
    assert!(earlier <= retries, "{}", show(&v));
    // Duplicates of retried queries say nothing of a short timeout: no warning that they do.
    let warnings = v["warnings"].to_string();
    assert!(!warnings.contains("answers came after"), "{warnings}");
}

/// Queries for a 2000-octet TXT record: every UDP answer is truncated (TC=1), and with
/// `--tc-fallback` each question is asked again over TCP to the same port, on a connection of
/// its own: each query's fate is its TCP answer (NOERROR), the truncated answer is counted in
/// `truncated`, the TCP send in `tries` and `tcp_retries_after_truncation`; the responder saw
/// as many queries over UDP (plus the probe) and as many TCP connections.
#[test]
fn truncated_answers_are_asked_again_over_tcp() {
    let port = free_port().to_string();
    let mut s = Server::start_with(&["-T", "1", "--udp-port", &port, "--tcp-port", &port]);
    let r = run_volley(&[
        &s.udp_url(),
        "-c",
        "10",
        "-n",
        "300",
        "--name",
        "size-2000.test",
        "--qtype",
        "TXT",
        "--tc-fallback",
    ]);
    let stats = s.terminate();
    let v = r.ok();
    check_accounting(v);
    assert_eq!(v["load"]["tc_fallback"], true);
    assert_eq!(total(v, "issued"), 300, "each retry is its query's, not a query of its own:\n{}", show(v));
    assert_eq!(total(v, "answered"), 300, "{}", show(v));
    assert_eq!(rcode(v, "NOERROR"), 300, "{}", show(v));
    assert_eq!(total(v, "truncated"), 300, "{}", show(v));
    assert_eq!(event(v, "tcp_retries_after_truncation"), 300, "{}", show(v));
    assert_eq!(v["totals"]["tries"]["2"].as_u64(), Some(300), "{}", show(v));
    assert_eq!(conn_total(v, "opened"), 300, "a connection per retry:\n{:#}", v["connections"]);
    // The answers' sizes are the TCP ones (the whole record), not the truncated ones.
    assert!(total(v, "bytes_in") > 300 * 2000, "{}", show(v));
    assert_eq!(serve_stat(&stats, "tcp_connections"), 300, "{stats}");
    assert_eq!(serve_stat(&stats, "truncated"), 301, "every UDP answer, the probe's too: {stats}");
    assert_eq!(serve_stat(&stats, "queries"), 601, "{stats}");
}

/// A UDP run without `--tc-fallback` takes the truncated answer as the fate, as before.
#[test]
fn without_the_fallback_a_truncated_answer_is_the_fate() {
    let (v, _) = against(&[], &["-c", "5", "-n", "100", "--name", "size-2000.test", "--qtype", "TXT"]);
    assert_eq!(total(&v, "answered"), 100);
    assert_eq!(total(&v, "truncated"), 100);
    assert_eq!(event(&v, "tcp_retries_after_truncation"), 0);
    assert!(v["totals"]["tries"].is_null(), "{}", show(&v));
}

/// Contradictory or misplaced retry flags: one line, exit 2.
#[test]
fn bad_retry_flags_are_refused() {
    for (args, want) in [
        (&["tcp://127.0.0.1:53", "--udp-retry", "1s"][..], "apply to UDP"),
        (&["tls://127.0.0.1:853", "--tc-fallback"][..], "apply to UDP"),
        (&["udp://127.0.0.1:53", "--udp-retry", "5s"][..], "never sent"),
        (&["udp://127.0.0.1:53", "--udp-retry", "1s", "-t", "500ms"][..], "never sent"),
        (&["udp://127.0.0.1:53", "--udp-tries", "1"][..], "at least 2"),
        (&["udp://127.0.0.1:53", "--udp-retry", "0s"][..], "above 0"),
        (&["udp://127.0.0.1:53", "--udp-retry", "soon"][..], "soon"),
    ] {
        let r = run_volley(args);
        let line = if args.contains(&"soon") {
            assert_eq!(r.status.code(), Some(2), "{args:?}: {}", r.stderr);
            r.stderr.clone()
        } else {
            assert_usage_error(&r)
        };
        assert!(line.contains(want), "{args:?}: {line}");
    }
}

/// A bad retry in a profile file is refused at its line, and a retry the profile's tries and
/// the run's timeout make impossible is refused too.
#[test]
fn a_profile_retry_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, "name = \"p\"\nudp_tries = 2\nudp_retry = \"0ms\"\n").unwrap();
    let r = run_volley(&["udp://127.0.0.1:53", "--clients", "2", "--profile", p.to_str().unwrap()]);
    let line = assert_usage_error(&r);
    assert!(line.contains("p.toml:3: udp_retry must be above 0"), "{line}");
    std::fs::write(&p, "name = \"p\"\nudp_tries = 2\nudp_retry = \"10s\"\n").unwrap();
    let r = run_volley(&["udp://127.0.0.1:53", "--clients", "2", "--profile", p.to_str().unwrap(), "-t", "2s"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("profile p") && line.contains("never sent"), "{line}");
}

/// Simulated `stub` clients send a query again at half the timeout (glibc's two attempts
/// sharing it): against a responder that drops 1 query in 5, their retries show, and fewer
/// time out than were dropped.
#[test]
fn stub_clients_send_again_at_half_the_timeout() {
    let (v, stats) = against(
        &["--drop", "1/5"],
        &["--clients", "20", "--client-rate", "20", "--profile", "stub", "-l", "2s", "-t", "400ms"],
    );
    assert_eq!((v["load"]["udp_retry_ms"].as_f64(), v["load"]["udp_tries"].as_u64()), (Some(200.0), Some(2)));
    let sent = total(&v, "sent");
    let retries = event(&v, "udp_retries");
    let dropped = serve_stat(&stats, "dropped");
    assert!(retries > 0 && sends_again(&v) == retries, "{}", show(&v));
    assert_eq!(serve_stat(&stats, "queries"), sent + retries + 1, "{stats}");
    assert!(total(&v, "timed_out") * 2 < dropped, "{dropped} dropped\n{}", show(&v));
    // Retried answers count from the first send: 200 ms at least.
    assert!(v["latency"]["max_ns"].as_u64().unwrap() >= 200_000_000, "{}", show(&v));
}

/// `volley run --link up:loss=20% --udp-retry 100ms --udp-tries 3`: the link drops a fifth of
/// the datagrams on the way up, independently (a fixed seed); a query times out only when its
/// three sends are all lost (binomial bounds), and the link's count of datagrams up is the
/// queries, their retransmissions and the probe.
#[test]
fn retries_through_a_lossy_link() {
    let server = Server::start_with(&["--listen", "0.0.0.0", "-T", "1"]);
    let port = server.udp_addr().port();
    let dir = tempfile::tempdir().unwrap();
    let (out, v) = link_run(
        &["up:loss=20%", "--seed", "7"],
        port,
        "-Q 1000 -n 3000 -t 1s --udp-retry 100ms --udp-tries 3",
        dir.path(),
    );
    let sent = total(&v, "sent");
    let retries = event(&v, "udp_retries");
    let timed_out = total(&v, "timed_out");
    assert!(
        (timed_out as f64) <= binomial_high(sent, 0.2f64.powi(3)),
        "{timed_out} of {sent}: about 0.2^3 expected\n{}\n{}",
        show(&v),
        out.stderr
    );
    assert!((timed_out as f64) >= binomial_low(sent, 0.2f64.powi(3)), "{timed_out} of {sent}\n{}", show(&v));
    // Each send is lost with the link's probability: the first sends and the resends alike.
    let resent_low = binomial_low(sent, 0.2) + binomial_low(sent, 0.04);
    assert!((retries as f64) >= resent_low, "{retries} retries of {sent}\n{}", show(&v));
    assert_eq!(link_counter(&out.stderr, "up", "in"), sent + retries + 1, "{}\n{}", out.stderr, show(&v));
}

/// `volley link ARGS -- volley run udp://HOST:PORT RUN_ARGS -o FILE`: its output and results.
fn link_run(link_args: &[&str], port: u16, run_args: &str, dir: &Path) -> (Output, Value) {
    let out_file = dir.join("r.json");
    let script =
        format!("exec \"$V\" run udp://$VOLLEY_LINK_HOST:{port} {run_args} --progress never -o {}", out_file.display());
    let mut cmd = Command::new(volley());
    cmd.arg("link").args(link_args).arg("--").arg("sh").arg("-c").arg(&script).env("V", volley());
    let out = run_cmd(&mut cmd, RUN_WAIT);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let v = read_results(&out_file).expect("results written inside the link");
    check_accounting(&v);
    (out, v)
}
