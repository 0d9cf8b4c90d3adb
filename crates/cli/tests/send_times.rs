//! Each query's departure is the kernel's transmit stamp (UDP, TCP), and its time is split
//! in two: the generator's delay (issue or schedule to departure) and the service time
//! (departure to the answer's kernel receive time). Closed loop reports the service time as
//! its latency; open loop's latency is the response time from the schedule, the sum of the two.

mod common;

use std::process::{Command, Stdio};

use common::{require, run_volley, run_volley_pinned, Server};
use serde_json::Value;

/// The tests of this file one at a time: the busy-core test compares timings, which the
/// others' runs would disturb.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_u64().unwrap_or_else(|| panic!("{path:?} in {v:#}"))
}

/// The mean of a results histogram (`{"sigfig": 3, "buckets": [[value, count], ...]}`,
/// values at bucket tops).
fn hist_mean(h: &Value) -> f64 {
    let (mut sum, mut n) = (0f64, 0f64);
    for b in h["buckets"].as_array().unwrap() {
        let (v, c) = (b[0].as_f64().unwrap(), b[1].as_f64().unwrap());
        sum += v * c;
        n += c;
    }
    sum / n
}

/// Closed loop over UDP and TCP: every query that left was timed by the kernel (by default
/// each by its own stamp; over UDP with `--tx-stamps ends` some datagrams of each batch by
/// their own stamps, the ones between by a time between them), the service time counts every answer,
/// and it is the run's latency. With `--tx-stamps off` every departure is volley's clock, and
/// says so.
#[test]
fn the_kernel_times_every_departure_over_udp_and_tcp() {
    let _serial = one_at_a_time();
    let s = Server::start_with(&["-T", "1"]);
    for url in [s.udp_url(), s.tcp_url()] {
        let r = run_volley(&[&url, "-c", "4", "-n", "3000", "-T", "1"]);
        let v = r.ok();
        let sent = u(v, &["totals", "sent"]);
        let answered = u(v, &["totals", "answered"]);
        assert_eq!(sent, 3000, "{url}: {:#}", v["totals"]);
        assert_eq!(u(v, &["send_stamps", "kernel"]), sent, "{url}: {:#}", v["send_stamps"]);
        assert_eq!(u(v, &["send_stamps", "between"]), 0, "{url}");
        assert_eq!(u(v, &["send_stamps", "fallback"]), 0, "{url}");
        assert_eq!(u(v, &["service_time", "count"]), answered, "{url}");
        assert_eq!(u(v, &["generator_delay", "count"]), sent, "{url}");
        // Closed loop: the latency is the service time, answer for answer.
        assert_eq!(v["latency"]["histogram"], v["service_time"]["histogram"], "{url}");
        assert!(r.stdout.contains("generator"), "{url}: {}", r.stdout);

        // Sixteen in flight: batches of several datagrams, of which some ask for their stamps
        // over UDP; TCP stamps each write either way.
        let r = run_volley(&[&url, "-c", "16", "-n", "3000", "-T", "1", "--tx-stamps", "ends"]);
        let v = r.ok();
        let (kernel, between) = (u(v, &["send_stamps", "kernel"]), u(v, &["send_stamps", "between"]));
        assert_eq!(kernel + between, u(v, &["totals", "sent"]), "{url}: {:#}", v["send_stamps"]);
        assert_eq!(u(v, &["send_stamps", "fallback"]), 0, "{url}");
        if url.starts_with("tcp") {
            assert_eq!(between, 0, "{url}: each write is stamped");
        } else {
            assert!(kernel > 0 && between > 0, "{url}: {:#}", v["send_stamps"]);
        }

        let r = run_volley(&[&url, "-c", "4", "-n", "500", "-T", "1", "--tx-stamps", "off"]);
        let v = r.ok();
        assert_eq!(u(v, &["send_stamps", "kernel"]), 0, "{url}: {:#}", v["send_stamps"]);
        assert_eq!(u(v, &["send_stamps", "fallback"]), u(v, &["totals", "sent"]), "{url}");
        assert!(r.stdout.contains("departures timed by volley's clock"), "{url}: {}", r.stdout);
    }
}

/// The encrypted transports' runs: transport, extra flags.
const ENCRYPTED: [(&str, &[&str]); 7] = [
    ("tls", &[]),
    ("https", &["--http", "1.1", "--h1-pipeline", "8"]),
    ("https", &["--http", "1.1"]),
    ("https", &["--http", "2"]),
    ("https", &["--http", "2", "--doh-method", "get"]),
    ("h3", &[]),
    ("quic", &[]),
];

/// Over every encrypted transport the kernel times the departures too: DoT and DoH (the stamp
/// of the write that carried the query's last TLS record: the stream loop's own writes, or
/// where hyper's and h2's writes end each request), DoQ and DoH/3 (the stamp of the first
/// datagram the QUIC endpoint sent after the query's stream was written and finished). The
/// results count the departures stamped and those that fell back to volley's clock: together,
/// every query sent; nearly all stamped (a QUIC endpoint numbers its datagrams itself, and
/// one it cannot see fail would cost the stamps after it: none here).
#[test]
fn encrypted_transports_are_stamped() {
    let _serial = one_at_a_time();
    let s = Server::start_encrypted(&["-T", "1"]);
    for (transport, extra) in ENCRYPTED {
        let url = s.url(transport);
        let mut args = vec![url.as_str(), "--ca", s.ca_str(), "-c", "8", "-n", "1000", "-T", "1"];
        args.extend_from_slice(extra);
        let v = run_volley(&args).ok().clone();
        let sent = u(&v, &["totals", "sent"]);
        assert_eq!(u(&v, &["totals", "answered"]), 1000, "{url} {extra:?}: {:#}", v["totals"]);
        let (kernel, fallback) = (u(&v, &["send_stamps", "kernel"]), u(&v, &["send_stamps", "fallback"]));
        eprintln!("{url} {extra:?}: {kernel} stamped by the kernel, {fallback} by volley's clock, of {sent}");
        assert_eq!(kernel + fallback, sent, "{url} {extra:?}");
        assert!(kernel * 100 >= sent * 99, "{url} {extra:?}: {kernel} of {sent} stamped");
        assert_eq!(u(&v, &["service_time", "count"]), 1000, "{url} {extra:?}");
        assert_eq!(v["latency"]["histogram"], v["service_time"]["histogram"], "{url} {extra:?}");

        let mut args = vec![url.as_str(), "--ca", s.ca_str(), "-c", "4", "-n", "200", "-T", "1", "--tx-stamps", "off"];
        args.extend_from_slice(extra);
        let v = run_volley(&args).ok().clone();
        assert_eq!(u(&v, &["send_stamps", "kernel"]), 0, "{url} {extra:?}: {:#}", v["send_stamps"]);
        assert_eq!(u(&v, &["send_stamps", "fallback"]), u(&v, &["totals", "sent"]), "{url} {extra:?}");
    }
}

/// Open loop over UDP and TCP: each query's response time (from its schedule) is its
/// generator delay plus its service time, so the histograms agree: the means add up within
/// the histograms' precision, and no response time is below the two minima's sum or above
/// the two maxima's.
#[test]
fn generator_delay_plus_service_time_is_the_response_time() {
    let _serial = one_at_a_time();
    let s = Server::start_with(&["-T", "1"]);
    for url in [s.udp_url(), s.tcp_url()] {
        let r = run_volley(&[&url, "-Q", "2000", "-n", "4000", "-T", "1"]);
        let v = r.ok();
        let stamped = u(v, &["send_stamps", "kernel"]) + u(v, &["send_stamps", "between"]);
        assert_eq!(stamped, u(v, &["totals", "sent"]), "{url}: {:#}", v["send_stamps"]);
        the_parts_add_up(&url, v, 4000);
        assert!(r.stdout.contains("service"), "{url}: {}", r.stdout);
    }
}

/// As above over the encrypted transports (DoQ, DoH/3, DoH/2 and DoH/1.1 through their
/// libraries, DoT), their departures stamped by the kernel.
#[test]
fn generator_delay_plus_service_time_is_the_response_time_encrypted() {
    let _serial = one_at_a_time();
    let s = Server::start_encrypted(&["-T", "1"]);
    for (transport, extra) in ENCRYPTED {
        let url = s.url(transport);
        let mut args = vec![url.as_str(), "--ca", s.ca_str(), "-Q", "1000", "-n", "2000", "-T", "1"];
        args.extend_from_slice(extra);
        let v = run_volley(&args).ok().clone();
        let (sent, kernel) = (u(&v, &["totals", "sent"]), u(&v, &["send_stamps", "kernel"]));
        assert!(kernel * 100 >= sent * 99, "{url} {extra:?}: {kernel} of {sent} stamped: {:#}", v["send_stamps"]);
        the_parts_add_up(&format!("{url} {extra:?}"), &v, 2000);
    }
}

/// Every query of run `v` was answered (`n`), and its response time is its generator delay
/// plus its service time (see above).
fn the_parts_add_up(url: &str, v: &Value, n: u64) {
    let answered = u(v, &["totals", "answered"]);
    assert_eq!(u(v, &["service_time", "count"]), answered, "{url}");
    assert_eq!(u(v, &["latency", "count"]), answered, "{url}");
    // Every query was answered: the generator delays are those of the answered queries.
    assert_eq!(answered, n, "{url}: {:#}", v["totals"]);
    let (lat, gen, svc) = (&v["latency"], &v["generator_delay"], &v["service_time"]);
    let (ml, mg, ms) = (hist_mean(&lat["histogram"]), hist_mean(&gen["histogram"]), hist_mean(&svc["histogram"]));
    // 3 significant figures: each value within 0.1 % of its bucket's top; 1 µs more for the
    // nanoseconds a clock conversion moves a stamp.
    let slack = 0.002 * ml + 1_000.0;
    assert!((mg + ms - ml).abs() <= slack, "{url}: generator {mg:.0} + service {ms:.0} against response {ml:.0} ns");
    let p = |h: &Value, k: &str| h[k].as_u64().unwrap() as f64;
    assert!(
        p(lat, "min_ns") * 1.002 + 1_000.0 >= p(gen, "min_ns") + p(svc, "min_ns"),
        "{url}: {lat:#} {gen:#} {svc:#}"
    );
    assert!(p(lat, "max_ns") <= (p(gen, "max_ns") + p(svc, "max_ns")) * 1.002 + 1_000.0, "{url}");
    // Each part is at most the whole, percentile for percentile.
    for k in ["p50_ns", "p90_ns", "p99_ns"] {
        assert!(p(svc, k) <= p(lat, k) * 1.002 + 1_000.0, "{url}: service {k} over response");
        assert!(p(gen, k) <= p(lat, k) * 1.002 + 1_000.0, "{url}: generator {k} over response");
    }
}

/// A process that keeps CPU `cpu` busy until dropped.
struct Spinner(std::process::Child);

impl Spinner {
    fn on(cpu: &str) -> Spinner {
        let child = Command::new(require("taskset"))
            .args(["-c", cpu, "sh", "-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .expect("start a spinning process");
        Spinner(child)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One closed-loop run of volley on CPU 0 at the lowest priority (`nice 19`: a busy process
/// there comes first): the generator's delay p50 and the service time p50, ns.
fn delays(url: &str) -> (f64, f64, Value) {
    let r = run_volley_pinned("0", &["nice", "-n", "19"], &[url, "-c", "1", "-l", "2s", "-T", "1"]);
    let v = r.ok().clone();
    assert_eq!(u(&v, &["send_stamps", "fallback"]), 0, "{url}: {:#}", v["send_stamps"]);
    (u(&v, &["generator_delay", "p50_ns"]) as f64, u(&v, &["service_time", "p50_ns"]) as f64, v)
}

/// Another process busy on the generator's core (volley on CPU 0 below a spinning process;
/// the responder alone on CPU 1): the generator's delay grows (volley waits for the CPU
/// between issuing a query and sending it), and the service time, timed by the kernel at
/// both ends, grows at least ten times less. It may move a little: the responder, sent fewer queries a
/// second, idles longer between them and wakes more slowly (here 48 -> 116 µs at p50, while
/// the generator's delay went from 62 µs to 16 ms). One query at a time, so that late sends
/// never reach the responder in bursts that queue there. Compared as ratios against the same
/// run without the spinner; a pair is made again up to three times in all (a machine busy with
/// other work moves either run).
#[test]
fn a_busy_generator_core_shows_in_the_generator_delay_not_the_service_time() {
    let _serial = one_at_a_time();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        panic!("this test needs two CPUs (the generator's and the responder's)");
    }
    let s = Server::start_pinned("1", &["-T", "1"]);
    for url in [s.udp_url(), s.tcp_url()] {
        for attempt in 1..=3 {
            let (g0, s0, _) = delays(&url);
            let (g1, s1, v) = {
                let _busy = Spinner::on("0");
                delays(&url)
            };
            let (grew, service) = (g1 / g0.max(1.0), s1 / s0.max(1.0));
            eprintln!(
                "{url}: generator delay p50 {g0:.0} -> {g1:.0} ns (x{grew:.1}), service p50 {s0:.0} -> {s1:.0} ns (x{service:.1})"
            );
            if grew >= 10.0 && grew >= 10.0 * service {
                break;
            }
            assert!(
                attempt < 3,
                "{url}: the generator's delay grew x{grew:.1}, the service time x{service:.1}: {:#} {:#}",
                v["generator_delay"],
                v["service_time"]
            );
        }
    }
}
