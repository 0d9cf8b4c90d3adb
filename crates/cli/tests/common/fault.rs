//! The fault campaign (docs/reliability.md, "Fault campaign"): `volley run` on one transport at
//! a fixed rate while one fault strikes at a known moment, and what must hold of every such
//! run: the accounting balances, no query has two fates, the run ends within its duration plus
//! its timeout, the generator's memory stays bounded, and the results name what happened.
//!
//! Faults of the network come from the emulated link (`--link`: `outage`, `loss-during`);
//! faults of the server from `volley serve` itself (SIGKILL and a restart on the same ports, a
//! restart with another certificate, its stream-reset faults) or from a small proxy between
//! the generator and the server ([`Proxy`]) that, at a known moment, resets every connection,
//! stops reading (the server "reads nothing": its TCP window fills), or corrupts answers in
//! flight. Every random choice (the link's, the proxy's) comes from one seed, printed with
//! each cell, so a failing cell can be replayed.
//!
//! Used by `tests/faults.rs` (a few cells as tests) and by its ignored test `campaign` (the
//! whole matrix, run by `bench/fault_campaign.sh`).

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// The seven transports, as the table names them.
pub const TRANSPORTS: [&str; 7] = ["udp", "tcp", "dot", "doh1.1", "doh2", "doh3", "doq"];

/// One fault of the campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No fault: the baseline of each transport (its memory is the yardstick).
    None,
    /// The link down for 2 s (`outage`).
    LinkDown,
    /// A burst of loss: Gilbert-Elliott, 50 % in bursts of 40 packets, for 1 s.
    LossBurst,
    /// 30 % loss each way for 5 s.
    Loss30,
    /// The server SIGKILLed and started again on the same ports at once.
    Kill,
    /// The server resets every connection open at the moment, twice, 2 s apart (a proxy sends
    /// RST); over QUIC, where only a stateless reset ends a connection abruptly (the kill's
    /// row), the server resets streams instead (DoQ 1 in 5 with DOQ_INTERNAL_ERROR, DoH/3
    /// with H3_INTERNAL_ERROR).
    Reset,
    /// The server reads nothing for 3 s: the proxy stops reading from the generator (TCP: a
    /// small receive buffer, the window fills; UDP and QUIC: the socket's buffer overflows).
    Stall,
    /// Answers corrupted in flight for 2 s: one byte of one in four of the server's segments
    /// or datagrams changed.
    Corrupt,
    /// The server restarted (SIGTERM) with a certificate the generator does not trust.
    CertChange,
}

impl Fault {
    pub const ALL: [Fault; 9] = [
        Fault::None,
        Fault::LinkDown,
        Fault::LossBurst,
        Fault::Loss30,
        Fault::Kill,
        Fault::Reset,
        Fault::Stall,
        Fault::Corrupt,
        Fault::CertChange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::LinkDown => "link down 2 s",
            Fault::LossBurst => "loss burst",
            Fault::Loss30 => "30 % loss 5 s",
            Fault::Kill => "SIGKILL + restart",
            Fault::Reset => "server resets",
            Fault::Stall => "server reads nothing 3 s",
            Fault::Corrupt => "answers corrupted 2 s",
            Fault::CertChange => "certificate changes",
        }
    }

    /// Whether the fault means something on `transport` (UDP has no certificate and no
    /// connection to reset).
    pub fn applies(self, transport: &str) -> bool {
        !(transport == "udp" && matches!(self, Fault::Reset | Fault::CertChange))
    }
}

/// A run's schedule: the rate, how long, the timeout, when the fault strikes (seconds after
/// `volley run` starts), and the seed of every random choice.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub rate: u32,
    pub duration_s: f64,
    pub timeout_s: f64,
    pub at_s: f64,
    pub seed: u64,
    /// What the run's end may take past its duration plus its timeout: the worker's last
    /// sweep, its connections' closes, and a shared machine's scheduling.
    pub slack_s: f64,
}

impl Plan {
    /// The campaign's plan: 200 qps for 10 s, a 1 s timeout, the fault at second 3.
    pub fn campaign(seed: u64) -> Plan {
        Plan { rate: 200, duration_s: 10.0, timeout_s: 1.0, at_s: 3.0, seed, slack_s: 0.5 }
    }

    /// The tests' plan: shorter (4 s, the fault at second 1), the same shape; more slack, as
    /// the tests run beside each other (and other builds) on a loaded machine.
    pub fn short(seed: u64) -> Plan {
        Plan { rate: 200, duration_s: 4.0, timeout_s: 1.0, at_s: 1.0, seed, slack_s: 1.5 }
    }
}

// ---------------------------------------------------------------------------------------------
// A small deterministic random source (splitmix64)
// ---------------------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

// ---------------------------------------------------------------------------------------------
// The fault proxy
// ---------------------------------------------------------------------------------------------

/// What the proxy does, in seconds after its start.
#[derive(Debug, Clone, Default)]
pub struct ProxyFaults {
    /// At each moment, every TCP connection open then is reset (RST to the generator, FIN to
    /// the server).
    pub resets: Vec<f64>,
    /// Nothing is read from the generator in this window (TCP: its window fills; UDP: the
    /// socket's small buffer overflows).
    pub stall: Option<(f64, f64)>,
    /// In this window one byte of `corrupt_share` of the server's segments (TCP) or datagrams
    /// (UDP) is changed on its way to the generator.
    pub corrupt: Option<(f64, f64)>,
    pub corrupt_share: f64,
    pub seed: u64,
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct ProxyCounts {
    pub connections: AtomicU64,
    pub reset: AtomicU64,
    pub corrupted: AtomicU64,
    pub stalled: AtomicU64,
}

struct Shared {
    faults: ProxyFaults,
    start: Instant,
    stop: AtomicBool,
    counts: ProxyCounts,
}

impl Shared {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn within(w: Option<(f64, f64)>, t: f64) -> bool {
        w.is_some_and(|(a, b)| t >= a && t < b)
    }
}

/// A proxy on 127.0.0.1 in front of `upstream`, for TCP (TCP, DoT, DoH/1.1, DoH/2: the bytes
/// pass as they are, TLS included) or UDP (UDP, DoQ, DoH/3: one upstream socket per generator
/// socket). Stops when dropped.
pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    pub fn start(udp: bool, upstream: SocketAddr, faults: ProxyFaults) -> Proxy {
        let shared = Arc::new(Shared {
            faults,
            start: Instant::now(),
            stop: AtomicBool::new(false),
            counts: Default::default(),
        });
        let threads = Arc::new(Mutex::new(Vec::new()));
        let addr;
        if udp {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            if shared.faults.stall.is_some() {
                set_buf(sock.as_raw_fd(), libc::SO_RCVBUF, 4096);
            }
            sock.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            addr = sock.local_addr().unwrap();
            let (s, t) = (shared.clone(), threads.clone());
            let h = thread::spawn(move || udp_main(sock, upstream, s, t));
            threads.lock().unwrap().push(h);
        } else {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            if shared.faults.stall.is_some() {
                // Accepted sockets inherit it: a small window that the stall fills.
                set_buf(l.as_raw_fd(), libc::SO_RCVBUF, 4096);
            }
            l.set_nonblocking(true).unwrap();
            addr = l.local_addr().unwrap();
            let (s, t) = (shared.clone(), threads.clone());
            let h = thread::spawn(move || tcp_main(l, upstream, s, t));
            threads.lock().unwrap().push(h);
        }
        Proxy { addr, shared, threads }
    }

    pub fn counts(&self) -> &ProxyCounts {
        &self.shared.counts
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        loop {
            let h = self.threads.lock().unwrap().pop();
            match h {
                Some(h) => {
                    let _ = h.join();
                }
                None => break,
            }
        }
    }
}

fn set_buf(fd: i32, opt: libc::c_int, bytes: libc::c_int) {
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            &bytes as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

fn corrupt(rng: &mut Rng, buf: &mut [u8]) {
    if buf.is_empty() {
        return;
    }
    let i = (rng.next() % buf.len() as u64) as usize;
    buf[i] ^= (rng.next() % 255 + 1) as u8;
}

fn tcp_main(l: TcpListener, upstream: SocketAddr, s: Arc<Shared>, threads: Arc<Mutex<Vec<JoinHandle<()>>>>) {
    let mut id = 0u64;
    while !s.stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((c, _)) => {
                id += 1;
                s.counts.connections.fetch_add(1, Ordering::Relaxed);
                let s2 = s.clone();
                let h = thread::spawn(move || tcp_conn(c, upstream, s2, id));
                threads.lock().unwrap().push(h);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(1)),
            Err(_) => thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn tcp_conn(client: TcpStream, upstream: SocketAddr, s: Arc<Shared>, id: u64) {
    let Ok(server) = TcpStream::connect(upstream) else { return };
    let _ = client.set_nonblocking(false);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let born = s.now();
    let mut rng = Rng(s.faults.seed ^ id.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut buf = vec![0u8; 16384];
    let mut stalled_once = false;
    loop {
        if s.stop.load(Ordering::Relaxed) {
            break;
        }
        let now = s.now();
        if s.faults.resets.iter().any(|&r| born < r && now >= r) {
            // SO_LINGER 0, then close: RST.
            let linger = libc::linger { l_onoff: 1, l_linger: 0 };
            unsafe {
                libc::setsockopt(
                    client.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    &linger as *const libc::linger as *const libc::c_void,
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                );
            }
            s.counts.reset.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let stalled = Shared::within(s.faults.stall, now);
        if stalled && !stalled_once {
            stalled_once = true;
            s.counts.stalled.fetch_add(1, Ordering::Relaxed);
        }
        let mut fds = [
            libc::pollfd { fd: server.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: client.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        let n = if stalled { 1 } else { 2 };
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), n, 5) };
        if rc <= 0 {
            continue;
        }
        if fds[0].revents != 0 {
            match (&server).read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    if Shared::within(s.faults.corrupt, now) && rng.unit() < s.faults.corrupt_share {
                        corrupt(&mut rng, &mut buf[..k]);
                        s.counts.corrupted.fetch_add(1, Ordering::Relaxed);
                    }
                    if (&client).write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
            }
        }
        if n == 2 && fds[1].revents != 0 {
            match (&client).read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    if (&server).write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
            }
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = server.shutdown(std::net::Shutdown::Both);
}

fn udp_main(sock: UdpSocket, upstream: SocketAddr, s: Arc<Shared>, threads: Arc<Mutex<Vec<JoinHandle<()>>>>) {
    let mut flows: HashMap<SocketAddr, UdpSocket> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    let mut stalled_once = false;
    while !s.stop.load(Ordering::Relaxed) {
        if Shared::within(s.faults.stall, s.now()) {
            if !stalled_once {
                stalled_once = true;
                s.counts.stalled.fetch_add(1, Ordering::Relaxed);
            }
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        let (k, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        if !flows.contains_key(&from) {
            let up = UdpSocket::bind("127.0.0.1:0").unwrap();
            up.connect(upstream).unwrap();
            up.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            s.counts.connections.fetch_add(1, Ordering::Relaxed);
            let (r, back, s2) = (up.try_clone().unwrap(), sock.try_clone().unwrap(), s.clone());
            let id = flows.len() as u64 + 1;
            let h = thread::spawn(move || {
                let mut rng = Rng(s2.faults.seed ^ id.wrapping_mul(0x2545_f491_4f6c_dd1d));
                let mut buf = vec![0u8; 65536];
                while !s2.stop.load(Ordering::Relaxed) {
                    let Ok(k) = r.recv(&mut buf) else { continue };
                    if Shared::within(s2.faults.corrupt, s2.now()) && rng.unit() < s2.faults.corrupt_share {
                        corrupt(&mut rng, &mut buf[..k]);
                        s2.counts.corrupted.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = back.send_to(&buf[..k], from);
                }
            });
            threads.lock().unwrap().push(h);
            flows.insert(from, up);
        }
        let _ = flows[&from].send(&buf[..k]);
    }
}

// ---------------------------------------------------------------------------------------------
// One cell: a transport, a fault, a run
// ---------------------------------------------------------------------------------------------

/// What one run gave, and what broke.
#[derive(Debug)]
pub struct Cell {
    pub transport: &'static str,
    pub fault: Fault,
    pub plan: Plan,
    /// The results (None when the run wrote none).
    pub results: Option<Value>,
    pub exit: Option<i32>,
    pub stderr: String,
    /// Seconds from the start of `volley run` to its exit.
    pub wall_s: f64,
    /// The generator's peak resident set (wait4's ru_maxrss), KiB.
    pub peak_rss_kib: u64,
    /// What the fault's machinery did (proxy resets, corrupted segments, restarts).
    pub fault_note: String,
    /// Everything that must hold and did not.
    pub violations: Vec<String>,
}

fn url_of(transport: &str, addr: SocketAddr) -> (String, Vec<&'static str>) {
    match transport {
        "udp" => (format!("udp://{addr}"), vec![]),
        "tcp" => (format!("tcp://{addr}"), vec![]),
        "dot" => (format!("tls://{addr}"), vec![]),
        "doh1.1" => (format!("https://{addr}/dns-query"), vec!["--http", "1.1"]),
        "doh2" => (format!("https://{addr}/dns-query"), vec!["--http", "2"]),
        "doh3" => (format!("h3://{addr}/dns-query"), vec![]),
        "doq" => (format!("quic://{addr}"), vec![]),
        t => panic!("no transport {t}"),
    }
}

fn listener_kind(transport: &str) -> &'static str {
    match transport {
        "udp" => "udp",
        "tcp" => "tcp",
        "dot" => "dot",
        "doh1.1" | "doh2" => "doh",
        "doh3" => "doh3",
        "doq" => "doq",
        t => panic!("no transport {t}"),
    }
}

fn is_udp(transport: &str) -> bool {
    matches!(transport, "udp" | "doh3" | "doq")
}

fn secs(s: f64) -> String {
    format!("{s}s")
}

/// The server's arguments: every listener, on the given ports (0: any), with `cert`.
fn serve_args(ports: Option<&HashMap<&str, u16>>, cert: &TestCert, listen: &str, extra: &[String]) -> Vec<String> {
    let port = |k: &str| ports.map(|p| p[k]).unwrap_or(0).to_string();
    let mut a: Vec<String> = vec![
        "--listen".into(),
        listen.into(),
        "-T".into(),
        "1".into(),
        "--udp-port".into(),
        port("udp"),
        "--tcp-port".into(),
        port("tcp"),
        "--dot-port".into(),
        port("dot"),
        "--doh-port".into(),
        port("doh"),
        "--doh3-port".into(),
        port("doh3"),
        "--doq-port".into(),
        port("doq"),
        "--cert".into(),
        cert.cert_str(),
        "--key".into(),
        cert.key().to_str().unwrap().into(),
    ];
    a.extend(extra.iter().cloned());
    a
}

fn start_server(args: &[String]) -> Server {
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    Server::start_with(&a)
}

/// Starts `volley serve` on the same ports again (the responder's listeners take their ports
/// with SO_REUSEADDR: the dead server's connections in TIME_WAIT do not hold them).
fn restart_server(args: &[String]) -> Server {
    start_server(args)
}

/// Runs one cell: starts the server (and the proxy, or the link), runs `volley run` at
/// `plan.rate` for `plan.duration_s`, strikes with `fault` at `plan.at_s`, and checks what
/// must hold.
// The run is reaped by wait4 (for its peak RSS), which clippy does not see.
#[allow(clippy::zombie_processes)]
pub fn run_cell(transport: &'static str, fault: Fault, plan: Plan) -> Cell {
    let cert = TestCert::new();
    let kind = listener_kind(transport);
    let link = matches!(fault, Fault::LinkDown | Fault::LossBurst | Fault::Loss30);
    let listen = if link { "0.0.0.0" } else { "127.0.0.1" };
    let mut extra: Vec<String> = Vec::new();
    if fault == Fault::Reset && transport == "doq" {
        extra.extend(["--fault".into(), "quic-stream-reset=1/5".into()]);
    }
    if fault == Fault::Reset && transport == "doh3" {
        extra.extend(["--fault".into(), "rst-stream=1/5".into()]);
    }
    let args = serve_args(None, &cert, listen, &extra);
    let mut server = start_server(&args);
    let ports: HashMap<&str, u16> =
        ["udp", "tcp", "dot", "doh", "doh3", "doq"].iter().map(|k| (*k, server.listener(k).port())).collect();
    let target = server.listener(kind);
    let target = SocketAddr::from(([127, 0, 0, 1], target.port()));

    let (a, d) = (plan.at_s, plan.duration_s);
    let proxy_faults = match fault {
        Fault::Reset if !matches!(transport, "doq" | "doh3" | "udp") => {
            Some(ProxyFaults { resets: vec![a, a + 2.0], seed: plan.seed, ..Default::default() })
        }
        Fault::Stall => Some(ProxyFaults { stall: Some((a, a + 3.0)), seed: plan.seed, ..Default::default() }),
        Fault::Corrupt => Some(ProxyFaults {
            corrupt: Some((a, a + 2.0)),
            corrupt_share: 0.25,
            seed: plan.seed,
            ..Default::default()
        }),
        _ => None,
    };
    let (url, mut run_args) = url_of(transport, target);
    let rate = plan.rate.to_string();
    let (dur, tmo) = (secs(d), secs(plan.timeout_s));
    let link_spec = match fault {
        Fault::LinkDown => Some(format!("delay=1ms outage={}s-{}s", a, a + 2.0)),
        Fault::LossBurst => Some(format!("delay=1ms loss=50%,burst=40,loss-during={}s-{}s", a, a + 1.0)),
        Fault::Loss30 => Some(format!("delay=1ms loss=30%,loss-during={}s-{}s", a, a + 5.0)),
        _ => None,
    };
    let seed = plan.seed.to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let ca = cert.cert_str();

    // The proxy starts with the run: its moments count from the same instant.
    let proxy = proxy_faults.map(|f| Proxy::start(is_udp(transport), target, f));
    let url = match &proxy {
        Some(p) => url_of(transport, p.addr).0,
        None => url,
    };
    let mut cmd = Command::new(volley());
    cmd.arg("run").arg(&url).args(["--ca", &ca, "-Q", &rate, "-l", &dur, "-t", &tmo]);
    cmd.args(["--name", "www.example.test", "--progress", "never", "-q", "-o"]).arg(&out);
    if let Some(spec) = &link_spec {
        run_args.extend(["--link", spec.as_str(), "--link-seed", seed.as_str()]);
    }
    cmd.args(&run_args);
    let shown = format!("{cmd:?}");
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let mut err_pipe = child.stderr.take().unwrap();
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let pid = child.id() as libc::pid_t;

    // The server's faults at their moment, from this thread, while the run goes on.
    let mut fault_note = String::new();
    let mut other_cert = None;
    let server_after;
    if matches!(fault, Fault::Kill | Fault::CertChange) {
        thread::sleep(Duration::from_secs_f64(a));
        if fault == Fault::Kill {
            server.kill();
            drop(server);
            server_after = Some(restart_server(&serve_args(Some(&ports), &cert, listen, &extra)));
            fault_note = format!("SIGKILL at {a} s, up again after {:.2} s", started.elapsed().as_secs_f64() - a);
        } else {
            let other = other_cert.insert(TestCert::new());
            let stats = server.terminate();
            drop(server);
            let answered = serve_stat(&stats, "answered");
            server_after = Some(restart_server(&serve_args(Some(&ports), other, listen, &extra)));
            fault_note = format!(
                "SIGTERM at {a} s ({answered} answered), up again with an untrusted certificate after {:.2} s",
                started.elapsed().as_secs_f64() - a
            );
        }
    } else {
        server_after = Some(server);
    }

    // Wait (bounded) and take the generator's peak RSS from wait4.
    let limit = Duration::from_secs_f64(d + plan.timeout_s + 60.0);
    let mut status: libc::c_int = 0;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut hung = false;
    loop {
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if rc == pid {
            break;
        }
        assert!(rc == 0, "wait4: {}", std::io::Error::last_os_error());
        if started.elapsed() > limit {
            hung = true;
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
            assert_eq!(rc, pid);
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let wall_s = started.elapsed().as_secs_f64();
    let stderr = err_reader.join().unwrap_or_default();
    let exit = if libc::WIFEXITED(status) { Some(libc::WEXITSTATUS(status)) } else { None };
    if let Some(p) = &proxy {
        let c = p.counts();
        let f = |x: &AtomicU64| x.load(Ordering::Relaxed);
        fault_note = match fault {
            Fault::Reset => format!("{} connections reset", f(&c.reset)),
            Fault::Stall => format!("{} connections stalled", f(&c.stalled)),
            Fault::Corrupt => format!("{} segments corrupted", f(&c.corrupted)),
            _ => String::new(),
        };
    }
    if fault == Fault::Reset && matches!(transport, "doq" | "doh3") {
        fault_note = "stream resets, 1 in 5".into();
    }
    drop(proxy);
    drop(server_after);
    drop(other_cert);
    let results = read_results(&out);
    let mut cell = Cell {
        transport,
        fault,
        plan,
        results,
        exit,
        stderr,
        wall_s,
        peak_rss_kib: ru.ru_maxrss as u64,
        fault_note,
        violations: vec![],
    };
    if hung {
        cell.violations.push(format!("still running after {limit:?}: killed"));
    }
    cell.check();
    cell
}

fn num(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64().unwrap_or(0)
}

fn sum_map(m: &Value) -> u64 {
    m.as_object().map(|o| o.values().filter_map(|x| x.as_u64()).sum()).unwrap_or(0)
}

impl Cell {
    fn t(&self, key: &str) -> u64 {
        self.results.as_ref().map(|v| num(v, &["totals", key])).unwrap_or(0)
    }

    /// The bound on the run's end: its duration plus its timeout, and the plan's slack.
    pub fn end_bound(&self) -> f64 {
        self.plan.duration_s + self.plan.timeout_s + self.plan.slack_s
    }

    fn check(&mut self) {
        let mut bad = Vec::new();
        if self.stderr.contains("panicked") {
            bad.push("panicked".to_string());
        }
        if self.exit != Some(0) {
            bad.push(format!("exit {:?}: {}", self.exit, self.stderr.lines().last().unwrap_or("")));
        }
        let Some(v) = self.results.as_ref() else {
            bad.push("no results".into());
            self.violations.extend(bad);
            return;
        };
        let t = |k: &str| num(v, &["totals", k]);
        let (issued, sent, answered, timed_out, failed, unsent, in_flight) =
            (t("issued"), t("sent"), t("answered"), t("timed_out"), t("failed"), t("unsent"), t("in_flight"));
        if issued != answered + timed_out + failed + unsent + in_flight {
            bad.push(format!(
                "issued {issued} != answered {answered} + timed out {timed_out} + failed {failed} + unsent {unsent} + in flight {in_flight}"
            ));
        }
        if sent > issued {
            bad.push(format!("sent {sent} > issued {issued}"));
        }
        // An answered or timed-out query left (once: `sent` counts each query once); a failed
        // or in-flight one may have. So no query counted twice among those that left.
        if answered + timed_out > sent || sent > answered + timed_out + failed + in_flight {
            bad.push(format!(
                "sent {sent} outside answered {answered} + timed out {timed_out} .. + failed {failed} + in flight {in_flight}"
            ));
        }
        for (m, total, what) in
            [("rcodes", answered, "answered"), ("errors", failed, "failed"), ("unsent_reasons", unsent, "unsent")]
        {
            let s = sum_map(&v["totals"][m]);
            if s != total {
                bad.push(format!("{m} sum to {s}, {what} is {total}"));
            }
        }
        if let Some(series) = v["series"].as_array() {
            for key in ["issued", "sent", "answered", "timed_out", "failed", "unsent"] {
                let s: u64 = series.iter().map(|x| x[key].as_u64().unwrap_or(0)).sum();
                if s != t(key) {
                    bad.push(format!("series {key} sum {s} != {}", t(key)));
                }
            }
        }
        if v["status"] != "complete" {
            bad.push(format!("status {}", v["status"]));
        }
        if in_flight != 0 {
            bad.push(format!("{in_flight} in flight at the end"));
        }
        let elapsed = v["elapsed_s"].as_f64().unwrap_or(f64::MAX);
        if elapsed > self.end_bound() {
            let late = num(v, &["schedule_lateness", "max_ns"]) as f64 / 1e9;
            bad.push(format!(
                "ended after {elapsed:.2} s, past {:.1} s (the scheduler's lateness at most {late:.3} s)",
                self.end_bound()
            ));
        }
        // The expected rate was kept: a fault must not stop the schedule.
        let want = (self.plan.rate as f64 * self.plan.duration_s) as u64;
        if issued + issued / 50 + 2 < want {
            bad.push(format!("issued {issued} of the {want} scheduled"));
        }
        if self.fault != Fault::None && self.named().is_empty() {
            bad.push("the results name nothing of the fault".into());
        }
        self.violations.extend(bad);
    }

    /// What the results say happened: error kinds, unsent reasons, timeouts, the closes that
    /// were not the generator's own, resent queries, unexpected messages, the link's drops.
    pub fn named(&self) -> String {
        let Some(v) = self.results.as_ref() else { return String::new() };
        let mut parts = Vec::new();
        let map = |m: &Value| -> Vec<(String, u64)> {
            let mut x: Vec<(String, u64)> = m
                .as_object()
                .map(|o| o.iter().filter_map(|(k, n)| n.as_u64().filter(|n| *n > 0).map(|n| (k.clone(), n))).collect())
                .unwrap_or_default();
            x.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            x
        };
        let join = |x: Vec<(String, u64)>| x.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ");
        let timed_out = self.t("timed_out");
        if timed_out > 0 {
            parts.push(format!("timed out {timed_out}"));
        }
        let e = map(&v["totals"]["errors"]);
        if !e.is_empty() {
            parts.push(format!("errors: {}", join(e)));
        }
        let u = map(&v["totals"]["unsent_reasons"]);
        if !u.is_empty() {
            parts.push(format!("unsent: {}", join(u)));
        }
        let closed: Vec<(String, u64)> = map(&v["connections"]["closed"])
            .into_iter()
            .filter(|(k, _)| !k.starts_with("client_") && k != "run_end")
            .collect();
        if !closed.is_empty() {
            parts.push(format!("closed: {}", join(closed)));
        }
        let cf = num(v, &["connections", "failed"]);
        if cf > 0 {
            let ce = map(&v["connections"]["errors"]);
            parts.push(format!("connects failed {cf} ({})", join(ce)));
        }
        let resent: Vec<(String, u64)> = map(&v["events"])
            .into_iter()
            .filter(|(k, _)| k.starts_with("resent_") || k.starts_with("server_") || k == "framing_lost")
            .collect();
        if !resent.is_empty() {
            parts.push(join(resent));
        }
        let un = map(&v["totals"]["unexpected"]);
        if !un.is_empty() {
            parts.push(format!("unexpected: {}", join(un)));
        }
        let l = &v["link"];
        if !l.is_null() {
            let d = |k: &str| num(l, &["up", k]) + num(l, &["down", k]);
            let (o, lo) = (d("dropped_outage"), d("dropped_loss"));
            if o + lo > 0 {
                parts.push(format!("link dropped {} packets", o + lo));
            }
        }
        if parts.is_empty() && self.fault == Fault::Corrupt && matches!(self.transport, "doq" | "doh3") {
            // QUIC authenticates every packet: a corrupted one is dropped and its data comes
            // again, which only the latency shows.
            let max = num(v, &["latency", "max_ns"]) as f64 / 1e6;
            parts.push(format!(
                "none (QUIC drops a corrupted packet; the server sends it again): latency max {max:.0} ms"
            ));
        }
        parts.join("; ")
    }

    /// The row of the campaign's table.
    pub fn row(&self) -> String {
        let t = |k: &str| self.t(k);
        let ok = if self.violations.is_empty() {
            "yes".to_string()
        } else {
            format!("**no**: {}", self.violations.join("; "))
        };
        let elapsed = self.results.as_ref().and_then(|v| v["elapsed_s"].as_f64()).unwrap_or(f64::NAN);
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} / {:.1} | {:.1} | {} | {} | {} |",
            self.transport,
            self.fault.name(),
            t("issued"),
            t("sent"),
            t("answered"),
            t("timed_out"),
            t("failed"),
            t("unsent"),
            t("in_flight"),
            elapsed,
            self.end_bound(),
            self.peak_rss_kib as f64 / 1024.0,
            self.named().replace('|', "/"),
            self.fault_note,
            ok
        )
    }
}

/// The table's header.
pub fn table_header() -> String {
    "| transport | fault | issued | sent | answered | timed out | failed | unsent | in flight | ended (s) / bound | peak RSS (MiB) | what the results name | the fault did | holds |\n\
     | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"
        .to_string()
}
