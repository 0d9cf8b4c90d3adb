//! The responder under abuse (issue 16): HTTP/2 rapid reset, slowloris and stalled length
//! prefixes, each against the real `volley serve` while a well-behaved `volley run` asks at a
//! modest rate beside it. Each test asserts that the responder's memory (VmRSS, sampled
//! through the attack) stays under the bound docs/reliability.md states, that the good client
//! had every query answered (counts, not times), that the server turned the attack away where
//! a limit applies (its stats line), and that it stopped cleanly (no panic).
//! The attacks are those of the abuse harness (`examples/abuse.rs`), at test sizes.

#[path = "common/abuse.rs"]
mod attacks;
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;

/// The most resident memory the responder may reach under these attacks (debug build,
/// two I/O threads): docs/reliability.md, "The responder under abuse".
const RSS_BOUND_KIB: u64 = 64 * 1024;

/// VmRSS of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the responder's /proc status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc status")
}

/// Samples a process's VmRSS every 50 ms until stopped; the peak.
struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    handle: thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (s, p) = (stop.clone(), peak.clone());
        let handle = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(pid), Ordering::Relaxed);
                thread::sleep(Duration::from_millis(50));
            }
        });
        Sampler { stop, peak, handle }
    }

    fn peak(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
        self.peak.load(Ordering::Relaxed)
    }
}

/// A counter of the responder's `stats` line.
fn stat(stats: &str, key: &str) -> u64 {
    stats
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in the stats line:\n{stats}"))
}

/// Runs `plan` against the server while a good client asks `url` at 40 queries per second
/// for 6 s (it starts a second after the attack); returns the attack's tally, the good
/// client's results, the peak RSS and the stats line.
fn under_attack(
    s: &mut Server,
    plan: attacks::Plan,
    url: &str,
) -> (Arc<attacks::Tally>, serde_json::Value, u64, String) {
    under_attack_with(s, plan, url, &[])
}

/// [`under_attack`], the good client with these options too.
fn under_attack_with(
    s: &mut Server,
    plan: attacks::Plan,
    url: &str,
    extra: &[&str],
) -> (Arc<attacks::Tally>, serde_json::Value, u64, String) {
    let pid = s.pid();
    let before = rss_kib(pid);
    let sampler = Sampler::start(pid);
    let attack = thread::spawn(move || attacks::run(plan));
    thread::sleep(Duration::from_secs(1));
    let ca = s.ca_str().to_string();
    let mut args = vec![url, "--ca", &ca, "-Q", "40", "-l", "6s", "-t", "3s", "--name", "www.example.test"];
    args.extend_from_slice(extra);
    let good = run_volley(&args);
    let tally = attack.join().expect("the attack thread");
    let peak = sampler.peak();
    let v = good.ok().clone();
    check_accounting(&v);
    let stats = s.terminate();
    assert!(!stats.contains("panicked"), "the responder panicked:\n{stats}");
    eprintln!("rss before {before} KiB, peak {peak} KiB; {stats}");
    (tally, v, peak, stats)
}

/// Every query of the good client answered.
fn all_answered(v: &serde_json::Value) {
    let issued = total(v, "issued");
    assert!(issued >= 200, "the good client asked ({issued}):\n{:#}", v["totals"]);
    assert_eq!(total(v, "answered"), issued, "every query of the good client answered:\n{:#}", v["totals"]);
}

fn plan(attack: attacks::Attack, proto: attacks::Proto, target: std::net::SocketAddr, conns: usize) -> attacks::Plan {
    attacks::Plan {
        attack,
        proto,
        target,
        conns,
        duration: Duration::from_secs(8),
        interval: Duration::from_millis(250),
        sources: 1,
    }
}

#[test]
fn http2_rapid_reset_is_bounded_and_others_are_answered() {
    let mut s = Server::start_encrypted(&["-T", "2"]);
    let p = plan(attacks::Attack::RapidReset, attacks::Proto::Doh2, s.listener("doh"), 4);
    let url = s.url("https");
    let (tally, v, peak, stats) = under_attack(&mut s, p, &url);
    let sent = tally.sent.load(Ordering::Relaxed);
    assert!(sent >= 1000, "the attack sent requests and reset them ({sent})");
    // The server ends a connection that resets streams this fast (h2's limit on streams
    // reset before they are taken: GOAWAY ENHANCE_YOUR_CALM), and the attacker reconnects.
    assert!(tally.closed_by_server.load(Ordering::Relaxed) >= 1, "the server closed the attacking connections");
    assert!(peak < RSS_BOUND_KIB, "responder RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB");
    all_answered(&v);
    assert!(stat(&stats, "doh_connections") >= 2, "{stats}");
}

#[test]
fn slowloris_connections_are_closed_and_others_are_answered() {
    let mut s = Server::start_encrypted(&["-T", "2", "--request-timeout", "2s"]);
    // 300 connections over TCP, each a byte every 250 ms: a query (36 bytes) would take 9 s.
    let p = plan(attacks::Attack::Slowloris, attacks::Proto::Tcp, s.tcp_addr(), 300);
    let url = s.url("tls");
    let (tally, v, peak, stats) = under_attack(&mut s, p, &url);
    assert_eq!(tally.sent.load(Ordering::Relaxed), 0, "no dribbled query came whole");
    assert!(tally.opened.load(Ordering::Relaxed) >= 300);
    // Each one closed after --request-timeout, by the server (and opened again).
    let slow = stat(&stats, "closed_slow");
    assert!(slow >= 300, "every slowloris connection closed by the request timeout: closed_slow={slow}");
    assert!(tally.closed_by_server.load(Ordering::Relaxed) >= 300);
    assert!(peak < RSS_BOUND_KIB, "responder RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB");
    all_answered(&v);
}

#[test]
fn stalled_length_prefixes_are_closed_and_others_are_answered() {
    let mut s = Server::start_encrypted(&["-T", "2", "--request-timeout", "2s"]);
    // 300 DoT connections announcing 65,535 bytes and sending ten.
    let p = plan(attacks::Attack::Stall, attacks::Proto::Dot, s.listener("dot"), 300);
    let url = s.url("tls");
    let (tally, v, peak, stats) = under_attack(&mut s, p, &url);
    assert!(tally.sent.load(Ordering::Relaxed) >= 300);
    let slow = stat(&stats, "closed_slow");
    assert!(slow >= 300, "every stalled connection closed by the request timeout: closed_slow={slow}");
    assert!(peak < RSS_BOUND_KIB, "responder RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB");
    all_answered(&v);
}

/// The most connections seen waiting in a listener's accept queue (`ss -ltn`: Recv-Q of the
/// listening socket), sampled every 5 ms until `stop`.
fn accept_queue_peak(port: u16, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    let ss = require("ss");
    thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            let out = std::process::Command::new(&ss).args(["-Hltn", &format!("sport = :{port}")]).output();
            if let Ok(o) = out {
                for line in String::from_utf8_lossy(&o.stdout).lines() {
                    if let Some(q) = line.split_whitespace().nth(1).and_then(|q| q.parse::<u64>().ok()) {
                        peak = peak.max(q);
                    }
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
        peak
    })
}

#[test]
fn handshakes_beyond_the_limit_wait_and_others_are_answered() {
    // Bursts of 400 DoT connections (each handshakes, idles until the server closes it after
    // 1 s, and comes back), against a limit of 16 handshakes in progress: the accept loop
    // takes no more while 16 are under way, so the others wait in the kernel's accept queue
    // (seen there), none is turned away, and a good client beside them is answered in full.
    let mut s = Server::start_encrypted(&["-T", "1", "--max-handshakes", "16", "--idle-timeout", "1s"]);
    let mut p = plan(attacks::Attack::Idle, attacks::Proto::Dot, s.listener("dot"), 400);
    p.duration = Duration::from_secs(8);
    let stop = Arc::new(AtomicBool::new(false));
    let queue = accept_queue_peak(s.listener("dot").port(), stop.clone());
    let url = s.url("tls");
    let (tally, v, peak, stats) = under_attack(&mut s, p, &url);
    stop.store(true, Ordering::Relaxed);
    let queued = queue.join().unwrap();
    assert!(queued > 16, "connections waited in the accept queue (at most {queued} seen)");
    assert_eq!(stat(&stats, "refused_handshakes"), 0, "one thread: none turned away: {stats}");
    assert_eq!(tally.failed.load(Ordering::Relaxed), 0, "every attacking connection was served in turn");
    assert!(tally.opened.load(Ordering::Relaxed) >= 400);
    assert!(peak < RSS_BOUND_KIB, "responder RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB");
    all_answered(&v);
}

#[test]
fn queries_over_the_per_client_rate_are_not_answered_and_counted() {
    // One client at 200 queries per second for 3 s against --max-qps-per-client 50, over UDP
    // and then TCP: about a quarter answered, the rest counted as rate_limited, never more
    // answered than the bucket allows in the time the runs took.
    let mut s = Server::start_with(&["-T", "2", "--max-qps-per-client", "50"]);
    let started = std::time::Instant::now();
    let mut issued = 0;
    let mut answered = 0;
    for url in [s.udp_url(), s.tcp_url()] {
        let r = run_volley(&[&url, "-Q", "200", "-l", "3s", "-t", "1s", "--name", "www.example.test"]);
        let v = r.ok().clone();
        check_accounting(&v);
        issued += total(&v, "issued");
        answered += total(&v, "answered");
        assert!(total(&v, "answered") >= 100, "{url}: the client's share was answered:\n{:#}", v["totals"]);
        assert!(total(&v, "timed_out") >= 100, "{url}: the rest was not:\n{:#}", v["totals"]);
    }
    let secs = started.elapsed().as_secs() + 1;
    let stats = s.terminate();
    let limited = stat(&stats, "rate_limited");
    assert!(answered <= 50 * secs + 2 * 50, "{answered} answered in {secs} s at 50 per second");
    // Every query the server took is answered or counted as turned away (the run's check
    // queries included in the server's counts).
    assert_eq!(stat(&stats, "answered") + limited, stat(&stats, "queries"), "{stats}");
    assert!(limited + answered >= issued, "{limited} limited + {answered} answered < {issued} issued");
}

/// Sends `n` NOTIMP-worthy messages (opcode 2, STATUS) from one socket to `addr`, then reads
/// answers until none comes for 500 ms; how many came back.
fn error_answers(addr: std::net::SocketAddr, n: u16) -> u64 {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr).unwrap();
    for id in 0..n {
        let mut q = build_query(id, "www.example.test", 1, None);
        q[2] |= 2 << 3;
        sock.send(&q).unwrap();
    }
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut buf = [0u8; 512];
    let mut got = 0;
    while let Ok(len) = sock.recv(&mut buf) {
        assert_eq!((len, buf[3] & 0x0F), (12, 4), "a header-only NOTIMP answer");
        got += 1;
    }
    got
}

#[test]
fn udp_error_answers_beyond_their_rate_are_withheld_and_counted() {
    // One UDP thread, 5 error answers a second: of 200 junk messages at once at most two
    // seconds' worth is answered, the rest counted as withheld; a well-formed query is
    // answered meanwhile; with `off` all 200 are answered.
    let mut s = Server::start_with(&["-T", "1", "--udp-error-rate", "5"]);
    let got = error_answers(s.udp_addr(), 200);
    assert!((1..=10).contains(&got), "{got} error answers at 5 a second");
    let good = udp_exchange(s.udp_addr(), &build_query(7, "www.example.test", 1, None), Duration::from_secs(5))
        .expect("a query is answered while errors are withheld");
    assert_eq!(parse_msg(&good).unwrap().answers.len(), 1);
    let stats = s.terminate();
    assert_eq!(stat(&stats, "errors_withheld"), 200 - got, "{stats}");
    assert_eq!(stat(&stats, "answered") + stat(&stats, "errors_withheld"), stat(&stats, "queries"), "{stats}");

    let mut s = Server::start_with(&["-T", "1", "--udp-error-rate", "off"]);
    assert_eq!(error_answers(s.udp_addr(), 200), 200, "--udp-error-rate off answers every error");
    assert_eq!(stat(&s.terminate(), "errors_withheld"), 0);
    for bad in ["0", "many", "4294967296"] {
        let out = run_cmd(
            std::process::Command::new(volley()).args(["serve", "--udp-error-rate", bad]),
            Duration::from_secs(10),
        );
        assert_eq!(out.status.code(), Some(2), "--udp-error-rate {bad}: {}", out.stderr);
        assert!(out.stderr.contains("--udp-error-rate"), "--udp-error-rate {bad}: {}", out.stderr);
    }
}

#[test]
fn queries_over_the_per_client_rate_over_doh_and_doq_are_turned_away_and_counted() {
    // --max-qps-per-client 50 applies to DoH (HTTP/1.1, HTTP/2, HTTP/3) and DoQ as to UDP
    // and TCP: one client at 200 queries per second for 3 s over each has about a quarter
    // answered; the rest are turned away at once (HTTP 429, a DoQ stream reset with
    // DOQ_EXCESSIVE_LOAD), fail at the client instead of timing out, and are counted by the
    // server as rate_limited. Then a client under the limit (20 per second) over DoH/2 and
    // DoQ has every query answered and none turned away.
    let mut s = Server::start_encrypted(&["-T", "2", "--max-qps-per-client", "50"]);
    let ca = s.ca_str().to_string();
    let started = std::time::Instant::now();
    let (mut over_issued, mut over_answered, mut over_failed) = (0, 0, 0);
    for (url, http) in [(s.url("https"), "2"), (s.url("https"), "1.1"), (s.url("h3"), "3"), (s.url("quic"), "")] {
        let mut args =
            vec![url.as_str(), "--ca", &ca, "-Q", "200", "-l", "3s", "-t", "1s", "--name", "www.example.test"];
        if !http.is_empty() {
            args.extend(["--http", http]);
        }
        // A full bucket at each run's start (it refills within a second).
        thread::sleep(Duration::from_millis(1100));
        let v = run_volley(&args).ok().clone();
        check_accounting(&v);
        let (answered, failed) = (total(&v, "answered"), total(&v, "failed"));
        eprintln!("{url} http {http}: {:#}", v["totals"]);
        assert!(answered >= 100, "{url} {http}: the client's share was answered:\n{:#}", v["totals"]);
        assert!(failed >= 100, "{url} {http}: the rest was turned away at once:\n{:#}", v["totals"]);
        assert!(map_sum(&v["totals"]["errors"]) >= failed, "{url} {http}: failures have a kind:\n{:#}", v["totals"]);
        if !http.is_empty() {
            assert!(error_count(&v, "http_status") >= 100, "{url} {http}: 429:\n{:#}", v["totals"]);
        }
        over_issued += total(&v, "issued");
        over_answered += answered;
        over_failed += failed;
    }
    let secs = started.elapsed().as_secs() + 1;
    assert!(over_answered <= 50 * secs + 4 * 50, "{over_answered} answered in {secs} s at 50 per second");
    let mut under_issued = 0;
    for url in [s.url("https"), s.url("quic")] {
        thread::sleep(Duration::from_millis(1100));
        let v = run_volley(&[&url, "--ca", &ca, "-Q", "20", "-l", "3s", "-t", "2s", "--name", "www.example.test"]);
        let v = v.ok().clone();
        check_accounting(&v);
        let issued = total(&v, "issued");
        assert!(issued >= 50, "{url}: the client under the limit asked ({issued})");
        assert_eq!(total(&v, "answered"), issued, "{url}: under the limit, all answered:\n{:#}", v["totals"]);
        under_issued += issued;
    }
    let stats = s.terminate();
    assert!(!stats.contains("panicked"), "{stats}");
    let limited = stat(&stats, "rate_limited");
    // Every query the server took is answered or turned away.
    assert_eq!(stat(&stats, "answered") + limited, stat(&stats, "queries"), "{stats}");
    // Those turned away are the over-limit clients' failures (and no more: the under-limit
    // clients lost none).
    assert!(limited >= over_failed, "{limited} rate_limited < {over_failed} failed at the clients: {stats}");
    assert!(
        limited <= over_issued - over_answered,
        "{limited} rate_limited > {over_issued} - {over_answered}: {stats}"
    );
    assert!(under_issued >= 100);
}

#[test]
fn long_doh_urls_are_turned_away_on_every_http_version_and_memory_stays_bounded() {
    // A DoH GET whose target passes 8 KiB is answered 414 URI Too Long on HTTP/1.1, HTTP/2 and
    // HTTP/3; one whose head passes 16 KiB (a 64 KiB URL) is turned away by the HTTP layer
    // before it is read whole: 431 (HTTP/1.1: hyper, then it closes; HTTP/2: h2, with the
    // stream refused; HTTP/3: h3). A 64 KiB URL is 65,536 octets of `dns=` over HTTP/1.1
    // (written raw); over HTTP/2 and HTTP/3 65,000, the longest URI the http crate's clients
    // hold. Then 64 connections send 64 KiB URLs over HTTP/1.1 in a loop while a good client
    // asks: memory stays under the bound and every good query is answered.
    let mut s = Server::start_encrypted(&["-T", "2"]);
    for (proto, addr, long) in [
        (attacks::Proto::Doh1, s.listener("doh"), 64 * 1024),
        (attacks::Proto::Doh2, s.listener("doh"), 65_000),
        (attacks::Proto::Doh3, s.listener("doh3"), 65_000),
    ] {
        // `AAAA` decodes to zeros: a query of 64 zero octets under 8 KiB is still answered.
        assert_eq!(attacks::long_get(proto, addr, 100), Ok(200), "{proto:?}: a short URL");
        assert_eq!(attacks::long_get(proto, addr, 12 * 1024), Ok(414), "{proto:?}: a 12 KiB URL");
        let got = attacks::long_get(proto, addr, long);
        assert_eq!(got, Ok(431), "{proto:?}: a URL of {long} octets");
    }
    let mut p = plan(attacks::Attack::LongUrl, attacks::Proto::Doh1, s.listener("doh"), 64);
    p.duration = Duration::from_secs(6);
    let url = s.url("https");
    let (tally, v, peak, stats) = under_attack(&mut s, p, &url);
    let responses = tally.responses.load(Ordering::Relaxed);
    assert!(responses >= 64, "the server answered the long URLs ({responses})");
    assert!(tally.closed_by_server.load(Ordering::Relaxed) >= 64, "and closed their connections");
    assert!(peak < RSS_BOUND_KIB, "responder RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB");
    all_answered(&v);
    assert!(stat(&stats, "doh_connections") >= 64, "{stats}");
}

/// A 0-RTT replay flood on `proto` against a server that takes early data (`--zero-rtt`):
/// returns the attack's tally, the good client's issued count and the server's stats line.
fn zero_rtt_replay(proto: attacks::Proto, listener: &str, good: &str) -> (Arc<attacks::Tally>, u64, String) {
    let mut s = Server::start_encrypted(&["-T", "2", "--zero-rtt", "--request-timeout", "2s"]);
    let mut p = plan(attacks::Attack::ZeroRttReplay, proto, s.listener(listener), 16);
    p.interval = Duration::from_millis(500);
    let url = s.url(good);
    let (tally, v, peak, stats) = under_attack(&mut s, p, &url);
    assert!(peak < RSS_BOUND_KIB, "{proto:?}: responder RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB");
    all_answered(&v);
    (tally, total(&v, "issued"), stats)
}

#[test]
fn zero_rtt_replays_are_not_answered_and_others_are_answered() {
    // The original flight's early data is accepted and answered once; its replays (the same
    // bytes, on new connections or from new ports, 16 at a time for 8 s) resume nothing:
    // the server's session cache gives each ticket out once (rustls's stateful resumption,
    // which 0-RTT requires), so a replayed ClientHello gets a full handshake, its early data
    // is skipped unread, and the replayer (who has no keys) never finishes it.
    for (proto, listener, good) in [
        (attacks::Proto::Dot, "dot", "tls"),
        (attacks::Proto::Doq, "doq", "quic"),
        (attacks::Proto::Doh3, "doh3", "h3"),
    ] {
        let (tally, issued, stats) = zero_rtt_replay(proto, listener, good);
        eprintln!(
            "{proto:?}: {}",
            tally.json(&plan(attacks::Attack::ZeroRttReplay, proto, "127.0.0.1:1".parse().unwrap(), 16))
        );
        assert_eq!(tally.opened.load(Ordering::Relaxed), 1, "{proto:?}: the original flight was recorded");
        assert_eq!(tally.early_accepted.load(Ordering::Relaxed), 1, "{proto:?}: its early data was accepted");
        let replays = tally.sent.load(Ordering::Relaxed);
        assert!(replays >= 100, "{proto:?}: the flight was replayed ({replays})");
        assert_eq!(stat(&stats, "early_data"), 1, "{proto:?}: early data taken once, not on replays: {stats}");
        assert!(stat(&stats, "tls_resumed") <= 2, "{proto:?}: no replay resumed: {stats}");
        // The good client's queries, the run's check, the attacker's two: no replay answered.
        let answered = stat(&stats, "answered");
        assert!(answered <= issued + 4, "{proto:?}: {answered} answered for {issued} good queries: {stats}");
    }
}

#[test]
fn idle_tcp_connections_hold_little_memory_and_others_are_answered() {
    // 2,000 idle TCP connections: the responder's resident memory grows by less than 4 KiB
    // for each (its task, a 512-byte read buffer, the socket's registration; debug build,
    // measured 2.1 KiB). Before, every connection's future had room for a 4 KiB array that
    // only a closing connection uses, and a 2 KiB read buffer and a 512-byte answer buffer
    // were allocated before its first byte: 8.1 KiB each (docs/reliability.md).
    let mut s = Server::start_encrypted(&["-T", "1"]);
    let conns = 2000;
    let p = plan(attacks::Attack::Idle, attacks::Proto::Tcp, s.tcp_addr(), conns);
    let url = s.url("tcp");
    let pid = s.pid();
    let before = rss_kib(pid);
    let (tally, v, peak, stats) = under_attack(&mut s, p, &url);
    assert!(tally.opened.load(Ordering::Relaxed) >= conns as u64, "the idle connections were opened");
    assert!(stat(&stats, "tcp_connections") >= conns as u64, "{stats}");
    let per_conn = (peak.saturating_sub(before)) * 1024 / conns as u64;
    eprintln!("{conns} idle TCP connections: RSS {before} -> {peak} KiB, {per_conn} bytes each");
    assert!(per_conn < 4096, "{per_conn} bytes of resident memory per idle TCP connection");
    all_answered(&v);
}

#[test]
fn dribbling_doh1_connections_hold_little_memory_and_others_are_answered() {
    // 1,000 DoH/1.1 connections each dribbling a GET (a byte every 250 ms: the head of about
    // 100 bytes never comes whole within the attack, nor the idle timeout): the responder's
    // resident memory grows by less than 16 KiB for each (TLS, its task, the bytes of the head
    // so far; debug build, measured 13.1 KiB). Before, hyper had each connection from its
    // handshake and allocated its 8 KiB write buffer and a read buffer grown to 16 KiB at the
    // second byte: 31.5 KiB each (docs/reliability.md). The good client speaks HTTP/1.1
    // too, through the same first-head read.
    let mut s = Server::start_encrypted(&["-T", "1"]);
    let conns = 1000;
    let p = plan(attacks::Attack::Slowloris, attacks::Proto::Doh1, s.listener("doh"), conns);
    let url = s.url("https");
    let pid = s.pid();
    let before = rss_kib(pid);
    let (tally, v, peak, stats) = under_attack_with(&mut s, p, &url, &["--http", "1.1"]);
    assert!(tally.opened.load(Ordering::Relaxed) >= conns as u64, "the dribbling connections were opened");
    assert_eq!(tally.sent.load(Ordering::Relaxed), 0, "no dribbled request came whole");
    assert!(stat(&stats, "doh_connections") >= conns as u64, "{stats}");
    let per_conn = (peak.saturating_sub(before)) * 1024 / conns as u64;
    eprintln!("{conns} dribbling DoH/1.1 connections: RSS {before} -> {peak} KiB, {per_conn} bytes each");
    assert!(per_conn < 16 * 1024, "{per_conn} bytes of resident memory per dribbling DoH/1.1 connection");
    all_answered(&v);
}
