//! UDP sockets: made before the run's clock starts (so that many sockets at a low rate answer
//! from the first second as one socket does, with the set-up reported apart), and simulated
//! UDP clients each sending from a socket of their own, from their own source address with
//! `--bind`, sharing sockets evenly (and saying so before the run) when there are fewer.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A UDP responder of the test's own that answers every query (its question echoed, no
/// records) and counts the queries of each source address and port it saw.
struct Echo {
    addr: SocketAddr,
    seen: Arc<Mutex<HashMap<SocketAddr, u64>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start() -> Echo {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP port");
        sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let addr = sock.local_addr().unwrap();
        let seen: Arc<Mutex<HashMap<SocketAddr, u64>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop2.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
                if n < 12 {
                    continue;
                }
                *s2.lock().unwrap().entry(from).or_insert(0) += 1;
                buf[2] |= 0x80; // QR: a response, with the query's question (and OPT) as they came
                let _ = sock.send_to(&buf[..n], from);
            }
        });
        Echo { addr, seen, stop, thread: Some(thread) }
    }

    fn url(&self) -> String {
        format!("udp://{}", self.addr)
    }

    /// The sources seen from the addresses of 127.0.1.0/24 (the probe query before the run
    /// comes from 127.0.0.1), with their query counts.
    fn sources_in_range(&self) -> HashMap<SocketAddr, u64> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(a, _)| matches!(a.ip(), IpAddr::V4(v) if v.octets()[..3] == [127, 0, 1]))
            .map(|(a, n)| (*a, *n))
            .collect()
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn second(v: &Value, i: usize) -> &Value {
    &v["series"][i]
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// 1,000 UDP sockets at 200 qps: the sockets are made before the clock starts, so the first
/// second's latency is that of a one-socket run of the same load (before, the sockets and
/// their buffers were made on the clock: no answer at all in second 0, p90 of 1.7 s in
/// second 1), and the set-up is reported apart.
#[test]
fn many_udp_sockets_answer_from_the_first_second_as_one_does() {
    let s = Server::start_with(&["-T", "1"]);
    let run = |conns: &str| {
        let r = run_volley(&[&s.udp_url(), "-Q", "200", "-l", "3s", "--connections", conns, "-T", "1", "-q"]);
        let v = r.ok().clone();
        check_accounting(&v);
        assert_eq!(total(&v, "answered"), total(&v, "sent"), "every query answered\n{v:#}");
        v
    };
    let one = run("1");
    let many = run("1000");
    assert_eq!(u(&many["load"]["connections"]), 1000);
    for v in [&one, &many] {
        let setup = v["setup_s"].as_f64().unwrap_or_else(|| panic!("setup_s reported\n{v:#}"));
        assert!(setup > 0.0 && setup < v["elapsed_s"].as_f64().unwrap(), "set-up {setup} s, apart from the run");
        // Second 0 answers what it sent, as the later seconds do.
        let s0 = second(v, 0);
        assert!(u(&s0["answered"]) * 10 >= u(&s0["sent"]) * 9, "second 0 answered its queries\n{s0:#}");
    }
    // Second 0 of the 1,000 sockets against the one socket's run as a whole: within a generous
    // factor (a busy machine moves these), where making the sockets on the clock was 10,000x.
    let p90 = |v: &Value| u(&v["latency"]["p90_ns"]).max(1);
    let first = u(&second(&many, 0)["latency"]["p90_ns"]);
    assert!(
        first <= 20 * p90(&one),
        "second 0 p90 with 1000 sockets {first} ns against {} ns with one socket\n{:#}",
        p90(&one),
        many["series"]
    );
    assert!(p90(&many) <= 20 * p90(&one), "p90 {} ns with 1000 sockets, {} ns with one", p90(&many), p90(&one));
    // The text summary says how long the set-up took.
    let r = run_volley(&[&s.udp_url(), "-Q", "50", "-n", "20", "--connections", "10", "-T", "1"]);
    r.ok();
    assert!(r.stdout.contains("set-up before:"), "{}", r.stdout);
}

/// Simulated UDP clients with `--bind`: each sends from a socket of its own, from an address
/// of the range of its own (the responder sees one source per client); with `--connections`
/// fewer, they share sockets evenly and the run says so before it starts.
#[test]
fn simulated_udp_clients_send_from_their_own_sockets_and_addresses() {
    let echo = Echo::start();
    let url = echo.url();
    let r =
        run_volley(&[&url, "--clients", "50", "--client-rate", "4", "--bind", "127.0.1.0/24", "-l", "2s", "-T", "2"]);
    let v = r.ok();
    check_accounting(v);
    let seen = echo.sources_in_range();
    assert_eq!(seen.len(), 50, "one source address and port per client: {seen:?}");
    let ips: std::collections::HashSet<IpAddr> = seen.keys().map(|a| a.ip()).collect();
    assert_eq!(ips.len(), 50, "one address of the range per client: {ips:?}");
    assert_eq!(seen.values().sum::<u64>(), total(v, "sent"), "every query came from the range");
    assert!(seen.values().all(|&n| (4..=12).contains(&n)), "each client sent its own 4 qps: {seen:?}");
    assert_eq!(u(&v["load"]["connections"]), 50, "50 UDP sockets");
    assert!(!r.stderr.contains("share"), "no sharing said: {}", r.stderr);

    // 40 clients on 10 sockets: 4 each, said before the run and in the results.
    let echo = Echo::start();
    let url = echo.url();
    let r = run_volley(
        &[&url, "--clients", "40", "--client-rate", "4", "--bind", "127.0.1.0/24", "--connections", "10"]
            .iter()
            .copied()
            .chain(["-l", "2s", "-T", "2"])
            .collect::<Vec<_>>(),
    );
    let v = r.ok();
    let said = "40 simulated UDP clients share 10 UDP sockets, 4 clients per socket (--connections 10)";
    assert!(r.stderr.contains(said), "{}", r.stderr);
    assert!(v["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains(said)), "{v:#}");
    let seen = echo.sources_in_range();
    assert_eq!(seen.len(), 10, "{seen:?}");
    let (lo, hi) = (seen.values().min().unwrap(), seen.values().max().unwrap());
    assert!(hi - lo <= hi / 2 + 2, "the sockets carry even shares: {seen:?}");

    // More sockets asked for than clients: one each, said rather than done silently.
    let echo = Echo::start();
    let r = run_volley(&[&echo.url(), "--clients", "5", "--connections", "20", "-l", "1s", "-T", "1"]);
    r.ok();
    assert!(r.stderr.contains("--connections 20: the 5 simulated UDP clients have one socket each"), "{}", r.stderr);
    // Five client sockets and the probe's (whose port a client's may take after it closed).
    let n = echo.seen.lock().unwrap().len();
    assert!((5..=6).contains(&n), "{n} sources");
}

/// Fewer descriptors than clients: the clients share what the open-files limit allows, evenly,
/// and the run says how many per socket before it starts.
#[test]
fn udp_clients_beyond_the_open_files_limit_share_sockets_and_say_so() {
    let echo = Echo::start();
    let url = echo.url();
    let out = run_cmd(
        Command::new(require("prlimit"))
            .arg("--nofile=400:400")
            .arg(volley())
            .args(["run", &url, "--clients", "300", "--client-rate", "2", "--bind", "127.0.1.0/24"])
            .args(["-l", "2s", "-T", "1", "--progress", "never", "-q"]),
        RUN_WAIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    // 400 files, 256 kept for the rest: 144 sockets for 300 clients.
    let said = "300 simulated UDP clients share 144 UDP sockets, 2 to 3 clients per socket (the open-files limit: 400";
    assert!(out.stderr.contains(said), "{}", out.stderr);
    let seen = echo.sources_in_range();
    assert_eq!(seen.len(), 144, "{seen:?}");
}

/// `--connections` on simulated clients that hold connections of their own would do nothing:
/// a usage error.
#[test]
fn connections_flag_on_connected_clients_is_refused() {
    let s = Server::start();
    let r = run_volley(&[&s.tcp_url(), "--clients", "10", "--connections", "3", "-l", "1s"]);
    let e = assert_usage_error(&r);
    assert!(e.contains("--connections"), "{e}");
}
