//! `volley run --xdp`: UDP through AF_XDP over a veth pair into a network namespace each test
//! makes (addresses of its own), against `volley serve` and unbound in the namespace: answers
//! the same as over kernel sockets, receive times from the XDP program, `--bind` ranges, the
//! interface's other traffic passed to the kernel, the per-second series; and the one-line
//! refusals (loopback, no such interface, no permission).

mod common;

use std::fs;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A veth pair: `host` in this namespace, its peer in namespace `ns`, with an IPv4 /24 and an
/// IPv6 /64 of their own. Deleted (namespace and pair) when dropped.
struct Veth {
    ns: String,
    host: String,
    v4: (String, String),
    v6: (String, String),
}

fn ip(args: &[&str]) {
    let out = run_cmd(Command::new(require("ip")).args(args), Duration::from_secs(20));
    assert!(out.status.success(), "ip {}: {}", args.join(" "), out.stderr);
}

impl Veth {
    fn new(tag: u8) -> Veth {
        Veth::with_queues(tag, 1, 1)
    }

    /// A pair whose host end has `queues` receive and transmit queues, and the namespace's
    /// end `peer_queues`.
    fn with_queues(tag: u8, queues: u32, peer_queues: u32) -> Veth {
        let pid = std::process::id();
        let ns = format!("volley-xdp-{pid}-{tag}");
        let host = format!("vx{}{tag}h", pid % 100_000);
        let peer = format!("vx{}{tag}n", pid % 100_000);
        // A subnet per process and test, so that tests running at once never share a route.
        let net = 100 + pid % 100;
        let v4 = (format!("10.{net}.{tag}.1"), format!("10.{net}.{tag}.2"));
        let v6 = (format!("fd00:{net}:{tag}::1"), format!("fd00:{net}:{tag}::2"));
        ip(&["netns", "add", &ns]);
        let v = Veth { ns, host, v4, v6 };
        let (q, pq) = (queues.to_string(), peer_queues.to_string());
        ip(&[
            "link",
            "add",
            &v.host,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "numrxqueues",
            &pq,
            "numtxqueues",
            &pq,
        ]);
        ip(&["link", "set", &peer, "netns", &v.ns]);
        ip(&["addr", "add", &format!("{}/24", v.v4.0), "dev", &v.host]);
        ip(&["-6", "addr", "add", &format!("{}/64", v.v6.0), "dev", &v.host, "nodad"]);
        ip(&["link", "set", &v.host, "up"]);
        let inside = |args: &[&str]| {
            let mut a = vec!["netns", "exec", &v.ns, "ip"];
            a.extend_from_slice(args);
            ip(&a);
        };
        inside(&["addr", "add", &format!("{}/24", v.v4.1), "dev", &peer]);
        inside(&["-6", "addr", "add", &format!("{}/64", v.v6.1), "dev", &peer, "nodad"]);
        inside(&["link", "set", &peer, "up"]);
        inside(&["link", "set", "lo", "up"]);
        v
    }

    /// `ip netns exec NS volley`: volley run in the namespace.
    fn volley_inside(&self) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns]).arg(volley());
        cmd
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = Command::new("ip").args(["link", "del", &self.host]).stderr(Stdio::null()).status();
    }
}

/// `volley serve` in the namespace on `addr` (UDP only, one thread).
fn serve(v: &Veth, addr: &str) -> Server {
    Server::start_via(v.volley_inside(), &["--listen", addr, "--no-tcp", "-T", "1"])
}

fn event(v: &Value, name: &str) -> u64 {
    v["events"][name].as_u64().unwrap_or(0)
}

/// Every query answered NOERROR, nothing else: see [`check_answered`].
fn check_all_answered(r: &RunResult, what: &str) -> u64 {
    let answered = check_answered(r, what);
    let v = r.ok();
    assert_eq!(rcode(v, "NOERROR"), answered, "{what}: {:#}", v["totals"]);
    answered
}

/// Every query answered (at whatever RCODE), nothing else: the books balance, no timeout, no
/// stray answer, one latency sample per answer, each answer's receive time the XDP program's
/// (none fell back to the time the ring was read), and the path named in the events (native
/// XDP on veth).
fn check_answered(r: &RunResult, what: &str) -> u64 {
    let v = r.ok();
    check_accounting(v);
    let issued = total(v, "issued");
    let answered = total(v, "answered");
    assert!(answered > 0, "{what}: nothing answered:\n{v:#}\n{}", r.stderr);
    assert_eq!(answered, issued, "{what}: every query answered over the veth:\n{:#}\n{}", v["totals"], r.stderr);
    assert_eq!(total(v, "timed_out"), 0, "{what}");
    assert_eq!(total(v, "failed"), 0, "{what}: {:#}", v["totals"]);
    assert_eq!(map_sum(&v["totals"]["unexpected"]), 0, "{what}: {:#}", v["totals"]);
    assert_eq!(v["latency"]["count"].as_u64(), Some(answered), "{what}");
    assert!(event(v, "xdp_native_copy") >= 1, "{what}: the path in the events: {:#}", v["events"]);
    assert!(r.stderr.contains("native XDP, copy mode"), "{what}: {}", r.stderr);
    // Read every millisecond at a fixed rate, an answer without the program's stamp would
    // carry the read's time: the program stamps every frame it redirects.
    assert_eq!(event(v, "xdp_rx_time_fallback"), 0, "{what}: receive times from the RX path: {:#}", v["events"]);
    answered
}

/// The same queries over AF_XDP (`xdp`) and over kernel sockets (`plain`), against the same
/// server: the same answers, by RCODE, truncation and bytes in all (each query's answer is a
/// function of its question: a byte lost, added or changed on the way, or an answer handed to
/// the wrong query, shows). volley has already checked each answer's ID and question.
fn same_answers(xdp: &Value, plain: &Value, what: &str) {
    assert_eq!(total(xdp, "answered"), total(plain, "answered"), "{what}");
    assert_eq!(xdp["totals"]["rcodes"], plain["totals"]["rcodes"], "{what}: answers by RCODE");
    assert_eq!(total(xdp, "truncated"), total(plain, "truncated"), "{what}");
    assert_eq!(
        total(xdp, "bytes_in"),
        total(plain, "bytes_in"),
        "{what}: answers' bytes over AF_XDP and over a socket"
    );
    assert_eq!(total(xdp, "bytes_out"), total(plain, "bytes_out"), "{what}: the same queries");
}

/// Queries whose answers differ in size and RCODE: against `volley serve` A, AAAA, TXT, a
/// 700-octet TXT and NXDOMAIN; against [`unbound_in`]'s data the same types and NXDOMAIN.
const MIXED: [&str; 5] = [
    "www.example.test A",
    "www.example.test AAAA",
    "www.example.test TXT",
    "size-700.example.test TXT",
    "nx.example.test A",
];

fn map_sum(m: &Value) -> u64 {
    m.as_object().map_or(0, |o| o.values().filter_map(Value::as_u64).sum())
}

/// Bytes of DNS per answer: the same over AF_XDP as over a kernel socket when the answers are
/// the same (their content went through whole).
fn bytes_per_answer(v: &Value) -> f64 {
    total(v, "bytes_in") as f64 / total(v, "answered") as f64
}

fn closed_and_open_loop(v: &Veth, server: &str, url: &str) {
    let s = serve(v, server);
    let port = s.udp_addr().port();
    let url = format!("udp://{url}:{port}");
    let closed = run_volley(&[&url, "--xdp", &v.host, "--name", "www.example.test", "-c", "16", "-n", "20000"]);
    assert_eq!(check_all_answered(&closed, "closed loop"), 20_000);
    let open = run_volley(&[&url, "--xdp", &v.host, "--name", "www.example.test", "-Q", "2000", "-l", "2s"]);
    let answered = check_all_answered(&open, "open loop");
    assert!(answered >= 3_900, "2 s at 2000 qps: {answered}");
    // The same queries over kernel sockets: answers of the same size.
    let plain = run_volley(&[&url, "--name", "www.example.test", "-c", "4", "-n", "200"]);
    let p = plain.ok();
    assert_eq!(total(p, "answered"), 200, "{:#}", p["totals"]);
    assert_eq!(bytes_per_answer(closed.ok()), bytes_per_answer(p), "answers' bytes over AF_XDP and over a socket");
    assert_eq!(event(p, "xdp_native_copy"), 0, "the socket path stays the default");
    // Answers of several sizes and RCODEs, the same over both paths.
    let dir = tempfile::tempdir().unwrap();
    let file = write_queries(dir.path(), "mixed.txt", &MIXED);
    let file = file.to_str().unwrap();
    let mixed = run_volley(&[&url, "--xdp", &v.host, "-d", file, "-c", "8", "-n", "5000"]);
    assert_eq!(check_answered(&mixed, "mixed"), 5_000);
    let m = mixed.ok();
    assert_eq!(rcode(m, "NXDOMAIN"), 1_000, "{:#}", m["totals"]);
    assert_eq!(rcode(m, "NOERROR"), 4_000, "{:#}", m["totals"]);
    let plain = run_volley(&[&url, "-T", "1", "-d", file, "-c", "8", "-n", "5000"]);
    same_answers(m, plain.ok(), "mixed answers from volley serve");
}

#[test]
fn ipv4_closed_and_open_loop_against_volley_serve() {
    let v = Veth::new(1);
    closed_and_open_loop(&v, &v.v4.1, &v.v4.1);
}

#[test]
fn ipv6_closed_and_open_loop_against_volley_serve() {
    let v = Veth::new(2);
    closed_and_open_loop(&v, &v.v6.1, &format!("[{}]", v.v6.1));
}

/// Simulated clients: a lane (and source port) each, all on the one AF_XDP socket of the
/// worker; every answer reaches its own lane.
#[test]
fn clients_share_the_socket_by_source_port() {
    let v = Veth::new(3);
    let s = serve(&v, &v.v4.1);
    let url = format!("udp://{}:{}", v.v4.1, s.udp_addr().port());
    let r = run_volley(&[&url, "--xdp", &v.host, "--clients", "50", "--client-rate", "20", "-l", "2s"]);
    let answered = check_all_answered(&r, "clients");
    assert!(answered >= 1_500, "50 clients at 20 qps for 2 s: {answered}");
}

/// unbound in the namespace, answering local data, over IPv4 and IPv6.
struct NsUnbound {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for NsUnbound {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unbound_in(v: &Veth) -> NsUnbound {
    let dir = tempfile::tempdir().unwrap();
    let conf = format!(
        "server:\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"\"\n  use-syslog: no\n  \
         logfile: \"\"\n  num-threads: 1\n  interface: {a}@53\n  interface: {b}@53\n  \
         access-control: 0.0.0.0/0 allow\n  access-control: ::/0 allow\n  module-config: \"iterator\"\n  \
         local-zone: \"example.test.\" static\n  local-data: 'www.example.test. 300 IN A 192.0.2.1'\n  \
         local-data: 'www.example.test. 300 IN AAAA 2001:db8::1'\n  \
         local-data: 'www.example.test. 300 IN TXT \"volley\"'\n  \
         local-data: 'size-700.example.test. 300 IN TXT \"{long}\" \"{long}\" \"{long}\"'\n",
        d = dir.path().display(),
        a = v.v4.1,
        b = v.v6.1,
        long = "x".repeat(230)
    );
    let path = dir.path().join("unbound.conf");
    fs::write(&path, conf).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &v.ns])
        .arg(require("unbound"))
        .arg("-d")
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start unbound in the namespace");
    let ub = NsUnbound { child, _dir: dir };
    // Ready once it answers over the veth (kernel sockets).
    let start = Instant::now();
    let addr: std::net::SocketAddr = format!("{}:53", v.v4.1).parse().unwrap();
    let query = build_query(0x5151, "www.example.test", 1, None);
    let ask = || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.set_read_timeout(Some(Duration::from_millis(200)))?;
        s.send_to(&query, addr)?;
        s.recv(&mut [0u8; 512])
    };
    while ask().is_err() {
        assert!(start.elapsed() < STARTUP_WAIT, "unbound did not answer in the namespace");
        thread::sleep(Duration::from_millis(50));
    }
    ub
}

/// unbound, over IPv4 and IPv6, closed and open loop: every query answered, with the answers
/// volley gets from the same unbound over kernel sockets.
#[test]
fn against_unbound_over_ipv4_and_ipv6() {
    let v = Veth::new(4);
    let _ub = unbound_in(&v);
    let dir = tempfile::tempdir().unwrap();
    let file = write_queries(dir.path(), "mixed.txt", &MIXED);
    let file = file.to_str().unwrap();
    for url in [format!("udp://{}:53", v.v4.1), format!("udp://[{}]:53", v.v6.1)] {
        let r = run_volley(&[&url, "--xdp", &v.host, "--name", "www.example.test", "-c", "8", "-n", "5000"]);
        assert_eq!(check_all_answered(&r, &url), 5_000);

        let closed = run_volley(&[&url, "--xdp", &v.host, "-d", file, "-c", "8", "-n", "5000"]);
        assert_eq!(check_answered(&closed, &url), 5_000);
        let c = closed.ok();
        assert_eq!(rcode(c, "NXDOMAIN"), 1_000, "{url}: nx.example.test in a static zone: {:#}", c["totals"]);
        assert_eq!(rcode(c, "NOERROR"), 4_000, "{url}: {:#}", c["totals"]);
        let plain = run_volley(&[&url, "-T", "1", "-d", file, "-c", "8", "-n", "5000"]);
        same_answers(c, plain.ok(), &format!("{url}: unbound's answers"));

        // Open loop: 4000 queries at 2000 a second, the file's five lines 800 times each.
        let open = run_volley(&[&url, "--xdp", &v.host, "-d", file, "-Q", "2000", "-n", "4000"]);
        assert_eq!(check_answered(&open, &url), 4_000);
        let o = open.ok();
        assert_eq!(o["load"]["model"], "open");
        assert_eq!(rcode(o, "NXDOMAIN"), 800, "{url}: {:#}", o["totals"]);
        assert_eq!(
            5 * total(o, "bytes_in"),
            4 * total(c, "bytes_in"),
            "{url}: the open loop's answers, 4/5 of the closed loop's"
        );
    }
}

fn refused(args: &[&str], wrap: &[&str], says: &str) {
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(volley());
            c
        }
        None => Command::new(volley()),
    };
    cmd.arg("run").args(args);
    let out = run_cmd(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{args:?}: exit 2\n{}\n{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line:\n{}", out.stderr);
    assert!(lines[0].contains(says), "{args:?}: {}", lines[0]);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let v = Veth::new(5);
    let url = format!("udp://{}:53", v.v4.1);
    refused(&["udp://127.0.0.1:53", "--xdp", "-n", "1"], &[], "loopback");
    refused(&["udp://127.0.0.1:53", "--xdp", "lo", "-n", "1"], &[], "loopback");
    refused(&[&url, "--xdp", "volleynosuch0", "-n", "1"], &[], "does not exist");
    refused(&[&url, "--xdp", "lo", "-n", "1"], &[], "loopback");
    refused(&[&format!("tcp://{}:53", v.v4.1), "--xdp", "-n", "1"], &[], "only UDP");
    refused(&[&url, "--xdp", "-T", "2", "-n", "1"], &[], "2 worker threads need 2 queues");
    // Root without its capabilities.
    refused(
        &[&url, "--xdp", &v.host, "-n", "1"],
        &[&require("setpriv").to_string_lossy(), "--bounding-set=-all", "--inh-caps=-all"],
        "needs root",
    );

    // One program per interface: a second run while the first holds it.
    let s = serve(&v, &v.v4.1);
    let url = format!("udp://{}:{}", v.v4.1, s.udp_addr().port());
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("first.err");
    let mut first = Command::new(volley())
        .args(["run", &url, "--xdp", &v.host, "-Q", "100", "-l", "3s", "--progress", "never", "-o"])
        .arg(dir.path().join("first.json"))
        .stdout(Stdio::null())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !fs::read_to_string(&err).unwrap_or_default().contains("--xdp:") {
        assert!(start.elapsed() < STARTUP_WAIT, "the first run did not start");
        thread::sleep(Duration::from_millis(20));
    }
    refused(&[&url, "--xdp", &v.host, "-n", "1"], &[], "already has an XDP program");
    assert_eq!(wait_bounded(&mut first, RUN_WAIT).and_then(|s| s.code()), Some(0));
    let v1 = read_results(&dir.path().join("first.json")).unwrap();
    check_accounting(&v1);
    assert_eq!(total(&v1, "answered"), total(&v1, "issued"), "the first run undisturbed");
}

/// A replay over AF_XDP: clients captured on loopback (three sources, five queries each),
/// turned into a clients file, replayed at the server behind the veth.
#[test]
fn replay_over_xdp() {
    let v = Veth::new(6);
    let s = serve(&v, &v.v4.1);
    let url = format!("udp://{}:{}", v.v4.1, s.udp_addr().port());
    let local = Server::start_with(&["-T", "1", "--no-tcp"]);
    let port = local.udp_addr().port();
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("clients.pcap");
    let cap = Capture::start(&pcap, port);
    for c in 0..3u16 {
        let sock = std::net::UdpSocket::bind(format!("127.0.0.{}:0", c + 2)).unwrap();
        for q in 0..5u16 {
            sock.send_to(&build_query(c * 10 + q, &format!("q{q}.c{c}.example.test"), 1, None), ("127.0.0.1", port))
                .unwrap();
            thread::sleep(Duration::from_millis(10));
        }
    }
    let _ = cap.stop();
    let clients = dir.path().join("clients.json");
    let r = run_cmd(
        Command::new(volley()).arg("pcap").arg(&pcap).arg("-o").arg(&clients).args(["--port", &port.to_string()]),
        Duration::from_secs(30),
    );
    assert_eq!(r.status.code(), Some(0), "volley pcap: {}", r.stderr);
    let r = run_volley(&[&url, "--xdp", &v.host, "--replay", clients.to_str().unwrap()]);
    assert_eq!(r.ok()["load"]["model"], "replay");
    assert_eq!(check_all_answered(&r, "replay"), 15);
}

/// Two workers, each with its AF_XDP socket on its own queue of a two-queue veth pair; worker
/// i's lanes take source ports i modulo 2. Answers arrive on whichever queue the other end of
/// the pair sent them on: spread by its hash, some reach the other worker's socket, which hands
/// them over; all on queue 0 (the other end with one transmit queue), worker 1's every answer
/// is handed over. Every query is answered and the books balance both ways.
#[test]
fn workers_each_on_their_own_queue() {
    let args = ["-T", "2", "--connections", "16", "--name", "www.example.test"];
    let handed = |v: &Value| event(v, "xdp_answers_handed_over");

    let v = Veth::with_queues(7, 2, 2);
    let s = serve(&v, &v.v4.1);
    let url = format!("udp://{}:{}", v.v4.1, s.udp_addr().port());
    let spread = run_volley(&[&[url.as_str(), "--xdp", &v.host][..], &args, &["-Q", "4000", "-l", "2s"]].concat());
    let answered = check_all_answered(&spread, "spread by the pair's hash");
    assert_eq!(answered, 8_000, "2 s at 4000 qps");
    assert!(spread.stderr.contains("queues 0-1 (one per worker)"), "{}", spread.stderr);
    assert_eq!(event(spread.ok(), "xdp_native_copy"), 2, "a socket per worker");
    let h = handed(spread.ok());
    assert!(h > 0 && h < answered, "16 ports over 2 queues: some answers on the other worker's: {h}");
    // The closed loop too (the other worker's socket wakes it).
    let closed = run_volley(&[&[url.as_str(), "--xdp", &v.host][..], &args, &["-c", "32", "-n", "20000"]].concat());
    assert_eq!(check_all_answered(&closed, "closed loop, spread"), 20_000);
    drop(s);
    drop(v);

    // The server's end sends on one queue: every answer arrives on queue 0, worker 0's.
    let v = Veth::with_queues(8, 2, 1);
    let s = serve(&v, &v.v4.1);
    let url = format!("udp://{}:{}", v.v4.1, s.udp_addr().port());
    let one = run_volley(&[&[url.as_str(), "--xdp", &v.host][..], &args, &["-Q", "4000", "-l", "2s"]].concat());
    let answered = check_all_answered(&one, "all on queue 0");
    assert_eq!(answered, 8_000, "2 s at 4000 qps");
    assert_eq!(handed(one.ok()), answered / 2, "worker 1's half of the queries, every answer handed over");
}

/// `volley bench --xdp`: under the UDP target's row, the same target through AF_XDP.
#[test]
fn bench_adds_an_xdp_row() {
    let v = Veth::new(9);
    let s = serve(&v, &v.v4.1);
    let url = format!("udp://{}:{}", v.v4.1, s.udp_addr().port());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = run_cmd(
        Command::new(volley())
            .args([
                "bench",
                "--target",
                &url,
                "--xdp",
                &v.host,
                "-l",
                "1s",
                "-c",
                "16",
                "-T",
                "1",
                "--progress",
                "never",
            ])
            .arg("-o")
            .arg(&json),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["transport"].as_str().unwrap()).collect();
    assert_eq!(names, ["udp", "udp-xdp"], "{}", out.stdout);
    for (row, run) in rows.iter().zip(doc["runs"].as_array().unwrap()) {
        assert!(row["qps"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["answered_ratio"].as_f64().unwrap() > 0.99, "{row}");
        check_accounting(run);
    }
    assert_eq!(event(&doc["runs"][0], "xdp_native_copy"), 0, "the udp row over sockets");
    assert_eq!(event(&doc["runs"][1], "xdp_native_copy"), 1, "the udp-xdp row through AF_XDP");
    assert!(out.stdout.contains("udp-xdp"), "{}", out.stdout);
    // Without a UDP target there is nothing to send through AF_XDP.
    let out = run_cmd(
        Command::new(volley()).args(["bench", "--target", "tcp://127.0.0.1:53", "--xdp", "-l", "1s"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("no --target udp://"), "{}", out.stderr);
}

/// Packets from `src` to UDP port `port` counted by a rule of the namespace's INPUT chain
/// ([`count_from`]).
fn counted(v: &Veth, src: &str, port: u16) -> u64 {
    let out = run_cmd(
        Command::new("ip").args(["netns", "exec", &v.ns]).arg(require("iptables")).args(["-w", "-nvxL", "INPUT"]),
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "iptables -L: {}", out.stderr);
    let dport = format!("dpt:{port}");
    out.stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 9 && f[7] == src && f.contains(&dport.as_str()))
        .and_then(|f| f[0].parse().ok())
        .unwrap_or_else(|| panic!("no rule counting {src} to {port}:\n{}", out.stdout))
}

/// Has the namespace count the UDP packets from `src` to `port` (a rule that accepts them, as
/// the chain's policy would).
fn count_from(v: &Veth, src: &str, port: u16) {
    let p = port.to_string();
    let out = run_cmd(
        Command::new("ip")
            .args(["netns", "exec", &v.ns])
            .arg(require("iptables"))
            .args(["-w", "-A", "INPUT", "-s", src, "-p", "udp", "--dport", &p, "-j", "ACCEPT"]),
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "iptables -A: {}", out.stderr);
}

/// `--bind` with `--xdp`: lanes take the range's addresses in turn (two more addresses on the
/// host's end), each frame from its lane's address, and the answers to every one come back.
/// The namespace counts the queries by source address.
#[test]
fn bind_range_spreads_the_sources() {
    let v = Veth::new(10);
    let net = v.v4.0.rsplit_once('.').unwrap().0.to_string();
    // 10.N.10.4/30: .5 and .6 (network and broadcast addresses left out).
    let (a, b) = (format!("{net}.5"), format!("{net}.6"));
    for addr in [&a, &b] {
        ip(&["addr", "add", &format!("{addr}/32"), "dev", &v.host]);
    }
    let s = serve(&v, &v.v4.1);
    let port = s.udp_addr().port();
    for src in [&v.v4.0, &a, &b] {
        count_from(&v, src, port);
    }
    let url = format!("udp://{}:{port}", v.v4.1);
    let bind = format!("{net}.4/30");
    // 1000 lanes, 500 on each address: the kernel gives some the same port on both (its
    // ephemeral range holds about 28,000), which one lane holds for the run: answers are told
    // apart by their destination port alone.
    let r = run_volley(&[&url, "--xdp", &v.host, "--bind", &bind, "--connections", "1000", "-c", "1000", "-n", "4000"]);
    assert_eq!(check_all_answered(&r, "--bind"), 4_000);
    let (from_a, from_b) = (counted(&v, &a, port), counted(&v, &b, port));
    // The one query from the route's own address: the probe before the run, over a kernel
    // socket.
    assert_eq!(counted(&v, &v.v4.0, port), 1, "only the probe from the route's own address");
    assert!(from_a > 0 && from_b > 0, "both addresses of the range used: {from_a} and {from_b}");
    assert_eq!(from_a + from_b, 4_000, "every query from the range, once");
    // Open loop, each lane at its own share of the rate.
    let r = run_volley(&[&url, "--xdp", &v.host, "--bind", &bind, "--connections", "8", "-Q", "2000", "-n", "2000"]);
    assert_eq!(check_all_answered(&r, "--bind, open loop"), 2_000);
    let (a2, b2) = (counted(&v, &a, port) - from_a, counted(&v, &b, port) - from_b);
    assert_eq!(counted(&v, &v.v4.0, port), 2, "the second run's probe");
    assert_eq!((a2, b2), (1_000, 1_000), "8 lanes over 2 addresses in turn, the queries in turn over the lanes");
}

/// While `--xdp` holds the interface, the kernel still gets every other frame on it: UDP to
/// another port of the namespace and TCP, over kernel sockets, are answered (the XDP program
/// passes all but the target's answers). The run's per-second series add up to its totals,
/// and `volley report` renders the file.
#[test]
fn other_traffic_passes_and_the_series_adds_up() {
    let v = Veth::new(11);
    let s = serve(&v, &v.v4.1);
    let other = Server::start_via(v.volley_inside(), &["--listen", &v.v4.1, "-T", "1"]);
    let url = format!("udp://{}:{}", v.v4.1, s.udp_addr().port());
    let attached = || {
        let out = run_cmd(Command::new("ip").args(["link", "show", "dev", &v.host]), Duration::from_secs(20));
        out.stdout.contains("prog/xdp")
    };
    assert!(!attached(), "no XDP program before the run");
    let run = {
        let (url, host) = (url.clone(), v.host.clone());
        thread::spawn(move || {
            run_volley(&[&url, "--xdp", &host, "--name", "www.example.test", "-Q", "1000", "-l", "4s"])
        })
    };
    let start = Instant::now();
    while !attached() {
        assert!(start.elapsed() < STARTUP_WAIT, "the run did not attach its program");
        thread::sleep(Duration::from_millis(20));
    }
    for i in 0..20u16 {
        let q = build_query(0x7000 + i, "www.example.test", 1, None);
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        sock.send_to(&q, other.udp_addr()).unwrap();
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap_or_else(|e| panic!("UDP query {i} to another port: no answer ({e})"));
        let m = parse_msg(&buf[..n]).unwrap();
        assert_eq!((m.id, m.qr(), m.rcode(), m.answers.len()), (0x7000 + i, true, 0, 1), "UDP {i}: {m:?}");
        let q = build_query(0x7100 + i, "www.example.test", 28, None);
        let a = tcp_exchange(other.tcp_addr(), &q, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("TCP query {i}: no answer ({e})"));
        let m = parse_msg(&a).unwrap();
        assert_eq!((m.id, m.qr(), m.rcode(), m.answers.len()), (0x7100 + i, true, 0, 1), "TCP {i}: {m:?}");
    }
    assert!(attached(), "the queries went while the program was attached");
    let r = run.join().unwrap();
    let answered = check_all_answered(&r, "beside other traffic");
    assert_eq!(answered, 4_000, "4 s at 1000 qps");
    let start = Instant::now();
    while attached() {
        assert!(start.elapsed() < STARTUP_WAIT, "the program goes with the run");
        thread::sleep(Duration::from_millis(20));
    }

    // The per-second series: every count and every answer's latency sample in some second.
    let res = r.ok();
    let series = res["series"].as_array().unwrap();
    assert!(series.len() >= 4, "a row per second of 4 s: {}", series.len());
    let sum = |f: &dyn Fn(&Value) -> u64| series.iter().map(f).sum::<u64>();
    for key in ["issued", "sent", "answered", "timed_out", "failed", "truncated"] {
        assert_eq!(sum(&|row| row[key].as_u64().unwrap()), total(res, key), "series {key}");
    }
    for (name, n) in res["totals"]["rcodes"].as_object().unwrap() {
        assert_eq!(sum(&|row| row["rcodes"][name].as_u64().unwrap_or(0)), n.as_u64().unwrap(), "series rcodes {name}");
    }
    let samples = |row: &Value| {
        row["latency"]["histogram"]["buckets"].as_array().map_or(0, |b| b.iter().map(|e| e[1].as_u64().unwrap()).sum())
    };
    assert_eq!(sum(&samples), answered, "the seconds' latency histograms hold every answer");
    for row in &series[..4] {
        assert!(row["answered"].as_u64().unwrap() > 0, "answers in each second of the run: {row}");
    }

    // volley report: the HTML report and the series as CSV.
    let file = r.output.to_str().unwrap();
    let html = r.dir.path().join("report.html");
    let out = run_cmd(Command::new(volley()).args(["report", file, "-o"]).arg(&html), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "volley report: {}", out.stderr);
    let page = fs::read_to_string(&html).unwrap();
    assert!(page.contains("<section class=\"run\""), "a section for the run");
    let out = run_cmd(Command::new(volley()).args(["report", file, "--csv", "-"]), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "volley report --csv: {}", out.stderr);
    let mut lines = out.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "answered").unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), series.len(), "a CSV row per second");
    assert_eq!(rows.iter().map(|r| r[col].parse::<u64>().unwrap()).sum::<u64>(), answered, "CSV answered");
}
