//! The test harness shared by the integration tests of the `volley` binary.
//!
//! Everything here talks to real processes on loopback only (127.0.0.0/8 or ::1): the `volley`
//! binary under test, and real peers (unbound, kdig, dnsperf) installed by
//! `scripts/install-deps.sh`. A missing peer is a failure, never a skip. Every wait is bounded.

#![allow(dead_code)] // Each test file uses a different part of the harness.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a server may take to print its `listening` lines or to answer a first query.
pub const STARTUP_WAIT: Duration = Duration::from_secs(20);
/// The most a single `volley run` in a test may take before it is killed and the test fails.
pub const RUN_WAIT: Duration = Duration::from_secs(180);

/// The `volley` binary built by cargo for these tests.
pub fn volley() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_volley"))
}

// ---------------------------------------------------------------------------------------------
// Peers
// ---------------------------------------------------------------------------------------------

/// Finds a peer binary on PATH or in the usual system directories (unbound lives in /usr/sbin,
/// which is not on every PATH). Panics — a test failure, not a skip — when it is missing.
pub fn require(bin: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    for d in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        dirs.push(PathBuf::from(d));
    }
    for d in dirs {
        let p = d.join(bin);
        if p.is_file() {
            return p;
        }
    }
    panic!("peer {bin} not installed: run scripts/install-deps.sh");
}

// ---------------------------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------------------------

/// A port number free on 127.0.0.1 for both UDP and TCP at the time of the call (bound, then
/// released). Another process may take it afterwards; callers that need certainty retry.
pub fn free_port() -> u16 {
    for _ in 0..100 {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind a TCP port on 127.0.0.1");
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("found no port free for both UDP and TCP on 127.0.0.1 in 100 tries");
}

/// A TCP port on 127.0.0.1 with nothing listening on it (bound, then released).
pub fn closed_tcp_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a TCP port on 127.0.0.1");
    l.local_addr().unwrap().port()
}

/// A UDP port on 127.0.0.1 with nothing bound to it (bound, then released).
pub fn closed_udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP port on 127.0.0.1");
    s.local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

/// Reads a pipe to the end on a thread, so that a child never blocks on a full pipe.
fn drain<R: Read + Send + 'static>(mut r: R) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Waits for a child at most `limit`; kills it and returns None when it is still running.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => panic!("waiting for child {}: {e}", child.id()),
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// The result of a finished command: exit status and everything it printed.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a command to completion with stdin closed, within `limit`, capturing both outputs.
pub fn run_cmd(cmd: &mut Command, limit: Duration) -> Output {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let status = wait_bounded(&mut child, limit);
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Output { status, stdout, stderr },
        None => panic!("{shown} still running after {limit:?}; killed.\nstdout:\n{stdout}\nstderr:\n{stderr}"),
    }
}

/// Sends a signal to a child process (by its own pid only).
pub fn signal(child: &Child, sig: libc::c_int) {
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill({}, {sig}) failed: {}", child.id(), std::io::Error::last_os_error());
}

// ---------------------------------------------------------------------------------------------
// The responder: `volley serve`
// ---------------------------------------------------------------------------------------------

/// A running `volley serve -p 0 [args]`, killed when dropped.
pub struct Server {
    child: Child,
    udp: Option<SocketAddr>,
    tcp: Option<SocketAddr>,
    /// Every `listening KIND ADDR` line seen at start: udp, tcp, dot, doh, doh3, doq.
    listeners: Vec<(String, SocketAddr)>,
    /// The CA file written by `--ca-out` (see [`Server::start_encrypted`]).
    ca: Option<PathBuf>,
    /// Keeps the directory of `ca` alive as long as the server.
    _dir: Option<tempfile::TempDir>,
    stderr: Option<JoinHandle<String>>,
}

impl Server {
    /// Starts the responder on ephemeral ports with the default flags.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts `volley serve -p 0 ARGS...` and waits (bounded) for its `listening udp ADDR` and
    /// `listening tcp ADDR` lines (only the ones not turned off with --no-udp / --no-tcp), and
    /// for the `listening dot|doh|doh3|doq ADDR` lines of the encrypted listeners asked for
    /// with `--dot-port`, `--doh-port`, `--doh3-port`, `--doq-port`.
    pub fn start_with(args: &[&str]) -> Server {
        Server::start_command(Command::new(volley()), args)
    }

    /// As [`Server::start_with`], under an open-files limit of `limit` (soft and hard, set
    /// by `prlimit`, which then runs volley itself).
    pub fn start_with_open_files(limit: u32, args: &[&str]) -> Server {
        let mut cmd = Command::new(require("prlimit"));
        cmd.arg(format!("--nofile={limit}:{limit}")).arg(volley());
        Server::start_command(cmd, args)
    }

    /// As [`Server::start_with`], on the CPUs `cpus` only (`taskset -c CPUS`).
    pub fn start_pinned(cpus: &str, args: &[&str]) -> Server {
        let mut cmd = Command::new(require("taskset"));
        cmd.arg("-c").arg(cpus).arg(volley());
        Server::start_command(cmd, args)
    }

    /// Starts `CMD serve -p 0 ARGS...`, where CMD runs volley (`ip netns exec NS volley`,
    /// `taskset -c 1 volley`), as [`Server::start_with`] says.
    pub fn start_via(cmd: Command, args: &[&str]) -> Server {
        Server::start_command(cmd, args)
    }

    /// Starts `CMD serve -p 0 ARGS...` (CMD runs volley) as [`Server::start_with`] says.
    fn start_command(mut cmd: Command, args: &[&str]) -> Server {
        let want_udp = !args.contains(&"--no-udp");
        let want_tcp = !args.contains(&"--no-tcp");
        let want_enc: Vec<&str> =
            [("--dot-port", "dot"), ("--doh-port", "doh"), ("--doh3-port", "doh3"), ("--doq-port", "doq")]
                .iter()
                .filter(|(flag, _)| args.contains(flag))
                .map(|(_, kind)| *kind)
                .collect();
        cmd.arg("serve").arg("-p").arg("0").args(args);
        let shown = format!("{cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
        let stderr = drain(child.stderr.take().unwrap());

        // Lines go through a channel so that the wait for them is bounded; the reader thread
        // keeps draining stdout for the life of the server.
        let (tx, rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    // Nobody listens any more: keep reading so the server never blocks.
                    continue;
                }
            }
        });

        let mut server =
            Server { child, udp: None, tcp: None, listeners: Vec::new(), ca: None, _dir: None, stderr: Some(stderr) };
        let deadline = Instant::now() + STARTUP_WAIT;
        let mut seen = Vec::new();
        let missing_enc = |s: &Server| want_enc.iter().any(|k| !s.listeners.iter().any(|(l, _)| l == k));
        while (want_udp && server.udp.is_none()) || (want_tcp && server.tcp.is_none()) || missing_enc(&server) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = parse_listening(&line, "udp") {
                        server.udp = Some(addr);
                    } else if let Some(addr) = parse_listening(&line, "tcp") {
                        server.tcp = Some(addr);
                    }
                    for kind in ["udp", "tcp", "dot", "doh", "doh3", "doq"] {
                        if let Some(addr) = parse_listening(&line, kind) {
                            server.listeners.push((kind.to_string(), addr));
                        }
                    }
                    seen.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let err = server.kill_and_stderr();
                    panic!(
                        "{shown}: no `listening` lines within {STARTUP_WAIT:?}.\nstdout so far:\n{}\nstderr:\n{err}",
                        seen.join("\n")
                    );
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // stdout closed: the server is exiting; take its status before reaping.
                    let status = wait_bounded(&mut server.child, Duration::from_secs(5));
                    let err = server.kill_and_stderr();
                    panic!(
                        "{shown} exited ({status:?}) before printing its `listening` lines.\nstdout:\n{}\nstderr:\n{err}",
                        seen.join("\n")
                    );
                }
            }
        }
        server
    }

    fn kill_and_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    }

    pub fn udp_addr(&self) -> SocketAddr {
        self.udp.expect("this server has no UDP listener")
    }

    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp.expect("this server has no TCP listener")
    }

    /// `udp://ADDR` for `volley run`.
    pub fn udp_url(&self) -> String {
        format!("udp://{}", self.udp_addr())
    }

    /// `tcp://ADDR` for `volley run`.
    pub fn tcp_url(&self) -> String {
        format!("tcp://{}", self.tcp_addr())
    }

    /// The URL for `transport`: "udp", "tcp", and for a server started with the encrypted
    /// listeners "tls" (DoT), "https" (DoH/1.1 and /2), "h3" (DoH/3), "quic" (DoQ).
    pub fn url(&self, transport: &str) -> String {
        match transport {
            "udp" => self.udp_url(),
            "tcp" => self.tcp_url(),
            "tls" => format!("tls://{}", self.listener("dot")),
            "https" => format!("https://{}/dns-query", self.listener("doh")),
            "h3" => format!("h3://{}/dns-query", self.listener("doh3")),
            "quic" => format!("quic://{}", self.listener("doq")),
            other => panic!("no such transport in these tests: {other}"),
        }
    }

    /// Starts the responder with UDP, TCP and every encrypted listener (DoT, DoH, DoH/3, DoQ)
    /// on free ports, its certificate generated at start and its CA written to a temporary
    /// file ([`Server::ca`]); `args` are added.
    pub fn start_encrypted(args: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir for the responder's CA");
        let ca = dir.path().join("ca.pem");
        let ca_s = ca.to_str().unwrap().to_string();
        let mut all: Vec<&str> =
            vec!["--dot-port", "0", "--doh-port", "0", "--doh3-port", "0", "--doq-port", "0", "--ca-out", &ca_s];
        all.extend_from_slice(args);
        let mut s = Server::start_with(&all);
        // The CA is written before the listeners are announced; wait (bounded) all the same.
        let deadline = Instant::now() + STARTUP_WAIT;
        while !fs::read_to_string(&ca).map(|t| t.contains("BEGIN CERTIFICATE")).unwrap_or(false) {
            assert!(Instant::now() < deadline, "volley serve wrote no CA to {}", ca.display());
            thread::sleep(Duration::from_millis(20));
        }
        s.ca = Some(ca);
        s._dir = Some(dir);
        s
    }

    /// The address of the `listening KIND ADDR` line (udp, tcp, dot, doh, doh3, doq).
    pub fn listener(&self, kind: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(k, _)| k == kind)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("this server has no {kind} listener"))
    }

    /// The CA file the server wrote (servers from [`Server::start_encrypted`]).
    pub fn ca(&self) -> &Path {
        self.ca.as_deref().expect("this server was started without --ca-out")
    }

    /// The CA file as a &str, for command lines.
    pub fn ca_str(&self) -> &str {
        self.ca().to_str().unwrap()
    }

    /// Stops the server with SIGTERM, waits (bounded) and returns what it printed on stderr
    /// (its `stats ...` line).
    pub fn terminate(&mut self) -> String {
        self.signal(libc::SIGTERM);
        let status = self.wait(Duration::from_secs(10));
        let err = self.kill_and_stderr();
        assert!(status.is_some(), "volley serve still running 10 s after SIGTERM; stderr:\n{err}");
        err
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to the server.
    pub fn signal(&self, sig: libc::c_int) {
        signal(&self.child, sig);
    }

    /// Waits (bounded) for the server to exit; None when it is still running after `limit`
    /// (it is then killed).
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        wait_bounded(&mut self.child, limit)
    }

    /// Kills the server now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Parses `listening udp 127.0.0.1:5300` (also `[::1]:5300`).
fn parse_listening(line: &str, transport: &str) -> Option<SocketAddr> {
    let mut words = line.split_whitespace();
    if words.next()? != "listening" || words.next()? != transport {
        return None;
    }
    words.next()?.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// unbound
// ---------------------------------------------------------------------------------------------

/// A running unbound on 127.0.0.1 (UDP and TCP on one free port) answering `local-data`
/// records from a static local zone; killed when dropped.
pub struct Unbound {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// Records every unbound test can rely on: `www.example.test` A, AAAA and TXT.
pub const UNBOUND_DATA: &[&str] = &[
    "www.example.test. 300 IN A 192.0.2.1",
    "www.example.test. 300 IN AAAA 2001:db8::1",
    "www.example.test. 300 IN TXT \"volley\"",
    "mail.example.test. 300 IN MX 10 www.example.test.",
];

impl Unbound {
    /// Starts unbound with `local-zone: "example.test." static` and `local_data` records.
    pub fn start(local_data: &[&str]) -> Unbound {
        Unbound::start_on("127.0.0.1", local_data)
    }

    /// The same, listening on `interface` (e.g. 0.0.0.0, for a client behind `volley link`),
    /// open to 127.0.0.0/8 and the links' 10.213.0.0/16.
    pub fn start_on(interface: &str, local_data: &[&str]) -> Unbound {
        let bin = require("unbound");
        let mut last_err = String::new();
        // The port is chosen by binding port 0 and releasing it; another process may take it in
        // between, so try a few times.
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir for unbound");
            let port = free_port();
            let mut conf = String::new();
            conf.push_str("server:\n");
            conf.push_str("  username: \"\"\n  chroot: \"\"\n");
            conf.push_str(&format!("  directory: \"{}\"\n", dir.path().display()));
            conf.push_str("  pidfile: \"\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n");
            conf.push_str("  num-threads: 1\n  do-ip6: no\n");
            conf.push_str(&format!("  interface: {interface}@{port}\n"));
            conf.push_str("  access-control: 127.0.0.0/8 allow\n  access-control: 10.213.0.0/16 allow\n");
            conf.push_str("  incoming-num-tcp: 256\n");
            conf.push_str("  module-config: \"iterator\"\n");
            conf.push_str("  local-zone: \"example.test.\" static\n");
            for rr in local_data {
                // Single quotes let the record hold double quotes (TXT).
                conf.push_str(&format!("  local-data: '{rr}'\n"));
            }
            let conf_path = dir.path().join("unbound.conf");
            fs::write(&conf_path, conf).expect("write unbound.conf");
            let log_path = dir.path().join("unbound.log");
            let log = fs::File::create(&log_path).expect("create unbound.log");
            let child = Command::new(&bin)
                .arg("-d")
                .arg("-c")
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let mut ub = Unbound { child, port, dir };
            match ub.wait_ready() {
                Ok(()) => return ub,
                Err(e) => {
                    ub.kill();
                    last_err = format!("{e}\nunbound.log:\n{}", fs::read_to_string(&log_path).unwrap_or_default());
                }
            }
        }
        panic!("unbound did not start: {last_err}");
    }

    /// Polls (bounded) until unbound answers `www.example.test A` over UDP and TCP.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_WAIT;
        let addr = self.addr();
        let query = build_query(0x5151, "www.example.test", 1, None);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("unbound exited early: {status}"));
            }
            let udp_ok = udp_exchange(addr, &query, Duration::from_millis(200)).is_ok();
            let tcp_ok = udp_ok && tcp_exchange(addr, &query, Duration::from_millis(500)).is_ok();
            if udp_ok && tcp_ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("unbound on {addr} did not answer within {STARTUP_WAIT:?}"));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// unbound's process id (it runs in the foreground, as this child).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn url(&self, transport: &str) -> String {
        format!("{transport}://127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Unbound {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// `volley run`
// ---------------------------------------------------------------------------------------------

/// What a `volley run` left behind: exit status, outputs and the parsed results file.
#[derive(Debug)]
pub struct RunResult {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The parsed `--output` file, None when no file was written.
    pub json: Option<Value>,
    /// Where `--output` pointed (inside `dir`).
    pub output: PathBuf,
    pub dir: tempfile::TempDir,
}

impl RunResult {
    /// The results, asserting that the run exited 0 and wrote them.
    pub fn ok(&self) -> &Value {
        assert_eq!(
            self.status.code(),
            Some(0),
            "volley run should exit 0; status {}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self.json.as_ref().unwrap_or_else(|| panic!("volley run wrote no results at {}", self.output.display()))
    }
}

/// Runs `volley run ARGS... --progress never -o TMPFILE` to completion (bounded) and returns
/// its exit status, outputs and parsed results.
pub fn run_volley(args: &[&str]) -> RunResult {
    run_volley_in(Command::new(volley()), args)
}

/// As [`run_volley`], on the CPUs `cpus` only (`taskset -c CPUS`), through the command
/// `wrap` (e.g. `nice -n 10`; empty: none).
pub fn run_volley_pinned(cpus: &str, wrap: &[&str], args: &[&str]) -> RunResult {
    let mut cmd = Command::new(require("taskset"));
    cmd.arg("-c").arg(cpus).args(wrap).arg(volley());
    run_volley_in(cmd, args)
}

/// Runs `CMD run ARGS...` (CMD runs volley) as [`run_volley`] says.
pub fn run_volley_in(mut cmd: Command, args: &[&str]) -> RunResult {
    let dir = tempfile::tempdir().expect("temp dir for results");
    let output = dir.path().join("results.json");
    cmd.arg("run").args(args).arg("--progress").arg("never").arg("-o").arg(&output);
    let out = run_cmd(&mut cmd, RUN_WAIT);
    let json = read_results(&output);
    RunResult { status: out.status, stdout: out.stdout, stderr: out.stderr, json, output, dir }
}

/// Parses a results file; None when it does not exist, a panic when it is not valid JSON.
pub fn read_results(path: &Path) -> Option<Value> {
    let text = fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}\n{text}", path.display())))
}

/// Writes a query file (dnsperf format) into `dir` and returns its path.
pub fn write_queries(dir: &Path, name: &str, lines: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut f = fs::File::create(&path).expect("create queries file");
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
    path
}

/// `totals.KEY` as an integer (0 when absent only for the maps; the counters must exist).
pub fn total(v: &Value, key: &str) -> u64 {
    v["totals"][key].as_u64().unwrap_or_else(|| panic!("totals.{key} missing or not an integer in\n{v:#}"))
}

/// `totals.rcodes.NAME`, 0 when absent (maps omit zero entries).
pub fn rcode(v: &Value, name: &str) -> u64 {
    map_entry(&v["totals"]["rcodes"], name)
}

/// `totals.errors.NAME`, 0 when absent.
pub fn error_count(v: &Value, name: &str) -> u64 {
    map_entry(&v["totals"]["errors"], name)
}

/// `totals.unexpected.NAME`, 0 when absent.
pub fn unexpected(v: &Value, name: &str) -> u64 {
    map_entry(&v["totals"]["unexpected"], name)
}

fn map_entry(map: &Value, name: &str) -> u64 {
    match map.get(name) {
        None | Some(Value::Null) => 0,
        Some(x) => x.as_u64().unwrap_or_else(|| panic!("{name} is not an integer: {x}")),
    }
}

/// Sum of all entries of a count map (rcodes, errors).
pub fn map_sum(map: &Value) -> u64 {
    match map {
        Value::Null => 0,
        Value::Object(m) => m.values().map(|x| x.as_u64().expect("count map entry is an integer")).sum(),
        other => panic!("expected a map of counts, got {other}"),
    }
}

/// The accounting every results file must satisfy:
/// - schema `volley.results/1`;
/// - issued == answered + timed_out + failed + unsent + in_flight, sent <= issued;
/// - the rcodes sum to answered, the unsent reasons to unsent; truncated <= answered, but for
///   the truncated answers asked again over TCP (event `tcp_retries_after_truncation`), which
///   are no fate;
/// - the per-second series sum to the totals for issued, sent, answered, timed_out, failed
///   and unsent;
/// - latency percentiles are ordered and latency.count <= answered.
pub fn check_accounting(v: &Value) {
    assert_eq!(v["schema"], "volley.results/1", "schema in\n{v:#}");
    let issued = total(v, "issued");
    let sent = total(v, "sent");
    let answered = total(v, "answered");
    let timed_out = total(v, "timed_out");
    let failed = total(v, "failed");
    let unsent = total(v, "unsent");
    let in_flight = total(v, "in_flight");
    assert_eq!(
        issued,
        answered + timed_out + failed + unsent + in_flight,
        "issued ({issued}) != answered ({answered}) + timed_out ({timed_out}) + failed ({failed}) + unsent \
         ({unsent}) + in_flight ({in_flight})"
    );
    assert!(sent <= issued, "sent {sent} > issued {issued}");
    assert_eq!(map_sum(&v["totals"]["rcodes"]), answered, "rcodes must sum to answered in\n{:#}", v["totals"]);
    assert_eq!(
        map_sum(&v["totals"]["unsent_reasons"]),
        unsent,
        "unsent_reasons must sum to unsent in\n{:#}",
        v["totals"]
    );
    let over_tcp = v["events"]["tcp_retries_after_truncation"].as_u64().unwrap_or(0);
    assert!(total(v, "truncated") <= answered + over_tcp, "truncated > answered in\n{:#}", v["totals"]);

    let series = v["series"].as_array().unwrap_or_else(|| panic!("series missing or not an array in\n{v:#}"));
    for key in ["issued", "sent", "answered", "timed_out", "failed", "unsent"] {
        let sum: u64 = series
            .iter()
            .map(|s| s[key].as_u64().unwrap_or_else(|| panic!("series entry without integer {key}: {s}")))
            .sum();
        assert_eq!(sum, total(v, key), "series {key} sum {sum} != totals.{key}");
    }
    for (i, s) in series.iter().enumerate() {
        assert!(s["second"].as_u64().is_some(), "series[{i}].second missing: {s}");
    }
    let mut seconds: Vec<u64> = series.iter().map(|s| s["second"].as_u64().unwrap()).collect();
    let n = seconds.len();
    seconds.dedup();
    assert_eq!(seconds.len(), n, "series seconds repeat");
    assert!(seconds.windows(2).all(|w| w[0] < w[1]), "series seconds not increasing: {seconds:?}");

    let lat = &v["latency"];
    let count = lat["count"].as_u64().unwrap_or_else(|| panic!("latency.count missing in\n{v:#}"));
    assert!(count <= answered, "latency.count {count} > answered {answered}");
    if count > 0 {
        let keys = ["min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"];
        let vals: Vec<u64> =
            keys.iter().map(|k| lat[*k].as_u64().unwrap_or_else(|| panic!("latency.{k} missing in {lat}"))).collect();
        assert!(vals.windows(2).all(|w| w[0] <= w[1]), "latency percentiles not ordered: {lat}");
        let mean = lat["mean_ns"].as_f64().unwrap_or_else(|| panic!("latency.mean_ns missing in {lat}"));
        assert!(mean >= vals[0] as f64 && mean <= vals[5] as f64, "mean outside [min, max]: {lat}");
    }
}

/// Asserts the one-line error convention: exit 2 and exactly one line on stderr starting with
/// `volley: error:`. Returns that line.
pub fn assert_usage_error(r: &RunResult) -> String {
    assert_eq!(r.status.code(), Some(2), "expected exit 2; status {}\nstderr:\n{}", r.status, r.stderr);
    let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got:\n{}", r.stderr);
    assert!(lines[0].starts_with("volley: error:"), "stderr should start with `volley: error:`: {}", lines[0]);
    assert!(!r.output.exists(), "no results file may be written on error, but {} exists", r.output.display());
    lines[0].to_string()
}

// ---------------------------------------------------------------------------------------------
// Raw DNS: enough to send a query and read a response without the code under test.
// ---------------------------------------------------------------------------------------------

/// Builds a query with RD set: `name` (no trailing dot needed), `qtype`, class IN, and an OPT
/// record advertising `edns` octets when given.
pub fn build_query(id: u16, name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x01, 0x00]); // RD
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    m.extend_from_slice(&(edns.is_some() as u16).to_be_bytes());
    for label in name.trim_end_matches('.').split('.').filter(|l| !l.is_empty()) {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    if let Some(size) = edns {
        m.push(0); // root
        m.extend_from_slice(&41u16.to_be_bytes());
        m.extend_from_slice(&size.to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 0]); // ext-rcode, version, flags
        m.extend_from_slice(&[0, 0]); // rdlen
    }
    m
}

/// One exchange over UDP from an ephemeral 127.0.0.1 port.
pub fn udp_exchange(server: SocketAddr, query: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if server.is_ipv6() { "[::1]:0".parse().unwrap() } else { "127.0.0.1:0".parse().unwrap() };
    let s = UdpSocket::bind(bind)?;
    s.connect(server)?;
    s.set_read_timeout(Some(timeout))?;
    s.send(query)?;
    let mut buf = vec![0u8; 65535];
    let n = s.recv(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// One exchange over TCP (2-octet length prefix).
pub fn tcp_exchange(server: SocketAddr, query: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&server, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    s.write_all(&framed)?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

/// A parsed resource record (owner name left out: the tests look at type, class and data).
#[derive(Debug, Clone)]
pub struct Rr {
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    pub rdata: Vec<u8>,
}

/// A parsed response: header fields, the raw question section, and the records.
#[derive(Debug, Clone)]
pub struct Msg {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
    /// The question section as it appears on the wire.
    pub question: Vec<u8>,
    pub answers: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
}

impl Msg {
    pub fn qr(&self) -> bool {
        self.flags & 0x8000 != 0
    }
    pub fn tc(&self) -> bool {
        self.flags & 0x0200 != 0
    }
    pub fn rd(&self) -> bool {
        self.flags & 0x0100 != 0
    }
    pub fn rcode(&self) -> u16 {
        self.flags & 0x000f
    }
    pub fn opt(&self) -> Option<&Rr> {
        self.additional.iter().find(|r| r.rtype == 41)
    }
}

fn skip_name(m: &[u8], mut pos: usize) -> Result<usize, String> {
    for _ in 0..128 {
        let len = *m.get(pos).ok_or("name runs past the end")? as usize;
        if len == 0 {
            return Ok(pos + 1);
        }
        if len & 0xc0 == 0xc0 {
            return Ok(pos + 2);
        }
        if len & 0xc0 != 0 {
            return Err(format!("bad label type at {pos}"));
        }
        pos += 1 + len;
    }
    Err("name with more than 128 labels".into())
}

fn u16_at(m: &[u8], pos: usize) -> Result<u16, String> {
    m.get(pos..pos + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or_else(|| format!("short message at {pos}"))
}

/// Parses a DNS message; Err on anything malformed (including trailing octets).
pub fn parse_msg(m: &[u8]) -> Result<Msg, String> {
    if m.len() < 12 {
        return Err(format!("message of {} octets is shorter than a header", m.len()));
    }
    let id = u16_at(m, 0)?;
    let flags = u16_at(m, 2)?;
    let qdcount = u16_at(m, 4)?;
    let counts = [u16_at(m, 6)?, u16_at(m, 8)?, u16_at(m, 10)?];
    let mut pos = 12;
    for _ in 0..qdcount {
        pos = skip_name(m, pos)? + 4;
    }
    if pos > m.len() {
        return Err("question runs past the end".into());
    }
    let question = m[12..pos].to_vec();
    let mut sections: [Vec<Rr>; 3] = Default::default();
    for (i, count) in counts.iter().enumerate() {
        for _ in 0..*count {
            pos = skip_name(m, pos)?;
            let rtype = u16_at(m, pos)?;
            let class = u16_at(m, pos + 2)?;
            let ttl = (u16_at(m, pos + 4)? as u32) << 16 | u16_at(m, pos + 6)? as u32;
            let rdlen = u16_at(m, pos + 8)? as usize;
            pos += 10;
            let rdata = m.get(pos..pos + rdlen).ok_or("rdata runs past the end")?.to_vec();
            pos += rdlen;
            sections[i].push(Rr { rtype, class, ttl, rdata });
        }
    }
    if pos != m.len() {
        return Err(format!("{} trailing octets", m.len() - pos));
    }
    let [answers, authority, additional] = sections;
    Ok(Msg { id, flags, qdcount, question, answers, authority, additional })
}

// ---------------------------------------------------------------------------------------------
// Encrypted transports: a test certificate, real servers speaking DoT/DoH/DoQ, checks of the
// results' `connections` block.
// ---------------------------------------------------------------------------------------------

/// A self-signed P-256 certificate for `localhost` and 127.0.0.1, marked CA:FALSE (rustls
/// rejects a self-signed CA:TRUE certificate as an end entity), made by openssl in a
/// temporary directory. Trust it with `--ca cert.pem`.
pub struct TestCert {
    dir: tempfile::TempDir,
}

impl TestCert {
    pub fn new() -> TestCert {
        let openssl = require("openssl");
        let dir = tempfile::tempdir().expect("temp dir for the test certificate");
        let out = run_cmd(
            Command::new(openssl)
                .current_dir(dir.path())
                .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
                .args(["-keyout", "key.pem", "-out", "cert.pem", "-days", "30", "-subj", "/CN=localhost"])
                .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
                .args(["-addext", "basicConstraints=critical,CA:FALSE"])
                .args(["-addext", "extendedKeyUsage=serverAuth"]),
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "openssl req failed: {}\n{}", out.stdout, out.stderr);
        TestCert { dir }
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.path().join("key.pem")
    }

    /// The certificate's path as a &str (for `--ca`).
    pub fn cert_str(&self) -> String {
        self.cert().to_str().unwrap().to_string()
    }
}

impl Default for TestCert {
    fn default() -> Self {
        TestCert::new()
    }
}

/// Asks `name A` with kdig over an encrypted transport (`mode`: `+tls`, `+https`,
/// `+https-get`, `+quic`), trusting `ca` and verifying the name `localhost`; returns kdig's
/// `+short` output (the addresses, one per line), or Err with what kdig printed. Bounded.
pub fn kdig_short(port: u16, mode: &str, ca: &Path, name: &str) -> Result<String, String> {
    let kdig = require("kdig");
    let out = run_cmd(
        Command::new(kdig)
            .arg("@127.0.0.1")
            .arg("-p")
            .arg(port.to_string())
            .arg(mode)
            .arg(format!("+tls-ca={}", ca.display()))
            .arg("+tls-hostname=localhost")
            .args(["+timeout=2", "+retry=0", "+short", name, "A"]),
        Duration::from_secs(15),
    );
    if out.status.success() && !out.stdout.trim().is_empty() {
        Ok(out.stdout.trim().to_string())
    } else {
        Err(format!("kdig {mode} -p {port} {name}: status {}\n{}{}", out.status, out.stdout, out.stderr))
    }
}

/// Asks `name A` with `q` (natesales/q) at `server` (e.g. `quic://127.0.0.1:853`,
/// `https://127.0.0.1:443/dns-query`) with `extra` flags, trusting `ca` (SSL_CERT_FILE, which
/// Go honours) and verifying the name `localhost`. Returns q's output or Err. Bounded.
pub fn q_query(server: &str, ca: &Path, name: &str, extra: &[&str]) -> Result<String, String> {
    let q = require("q");
    let out = run_cmd(
        Command::new(q)
            .env("SSL_CERT_FILE", ca)
            .env_remove("SSL_CERT_DIR")
            .arg(name)
            .arg("A")
            .arg(format!("@{server}"))
            .arg("--tls-server-name=localhost")
            .arg("--timeout=3s")
            .args(extra),
        Duration::from_secs(20),
    );
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!("q @{server} {name}: status {}\n{}{}", out.status, out.stdout, out.stderr))
    }
}

/// What a peer's readiness check asks: kdig over this mode at this port, or q at this URL.
pub enum Ready {
    /// `kdig +tls`, `+https`, ... at the port of this kind.
    Kdig(&'static str, &'static str),
    /// `q` at the URL made from the port of this kind (`{}` is replaced by the port).
    Q(&'static str, &'static str),
}

/// Writes a peer's configuration into its directory and returns its command line arguments;
/// given the directory, the certificate, and the port chosen for each listener kind.
pub type PeerSetup<'a> = dyn Fn(&Path, &TestCert, &dyn Fn(&str) -> u16) -> Vec<String> + 'a;

/// A real DNS server (unbound, kresd, named, dnsdist, dnsproxy) on free loopback ports with a
/// generated configuration in a temporary directory; killed when dropped.
pub struct Peer {
    pub name: &'static str,
    child: Child,
    ports: Vec<(&'static str, u16)>,
    dir: tempfile::TempDir,
    log: PathBuf,
    pub cert: TestCert,
}

impl Peer {
    /// Starts `bin` with the arguments and configuration files made by `setup(dir, ports)`
    /// (ports: one free port per kind in `kinds`), then polls (bounded) until every check in
    /// `ready` gets `expect` in its answer to `name`. Tries new ports up to 5 times.
    fn start(
        name: &'static str,
        bin: &str,
        kinds: &[&'static str],
        setup: &PeerSetup<'_>,
        ready: &[Ready],
        probe_name: &str,
        expect: &str,
    ) -> Peer {
        let bin = require(bin);
        require("kdig");
        let mut last_err = String::new();
        for _attempt in 0..5 {
            let cert = TestCert::new();
            let dir = tempfile::tempdir().expect("temp dir for a peer");
            let ports: Vec<(&'static str, u16)> = kinds.iter().map(|k| (*k, free_port())).collect();
            let port_of = |k: &str| ports.iter().find(|(n, _)| *n == k).map(|(_, p)| *p).unwrap();
            let args = setup(dir.path(), &cert, &port_of);
            let log = dir.path().join(format!("{name}.log"));
            let logf = fs::File::create(&log).expect("create peer log");
            let child = Command::new(&bin)
                .args(&args)
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(logf.try_clone().unwrap())
                .stderr(logf)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let mut peer = Peer { name, child, ports, dir, log, cert };
            match peer.wait_ready(ready, probe_name, expect) {
                Ok(()) => return peer,
                Err(e) => {
                    last_err = format!("{e}\n{name} log:\n{}", fs::read_to_string(&peer.log).unwrap_or_default());
                    peer.kill();
                }
            }
        }
        panic!("{name} did not start: {last_err}");
    }

    fn wait_ready(&mut self, ready: &[Ready], name: &str, expect: &str) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_WAIT;
        let ca = self.cert.cert();
        for check in ready {
            loop {
                if let Ok(Some(status)) = self.child.try_wait() {
                    return Err(format!("{} exited early: {status}", self.name));
                }
                let got = match check {
                    Ready::Kdig(mode, kind) => kdig_short(self.port(kind), mode, &ca, name),
                    Ready::Q(url, kind) => q_query(&url.replace("{}", &self.port(kind).to_string()), &ca, name, &[]),
                };
                match got {
                    Ok(out) if out.contains(expect) => break,
                    Ok(out) => return Err(format!("{} answered {name} with\n{out}\nnot {expect}", self.name)),
                    Err(e) if Instant::now() >= deadline => {
                        return Err(format!("{} not ready within {STARTUP_WAIT:?}: {e}", self.name))
                    }
                    Err(_) => thread::sleep(Duration::from_millis(100)),
                }
            }
        }
        Ok(())
    }

    /// Polls (bounded) until kdig `mode` at the port of `kind` gets `expect` for `name`.
    pub fn wait_answer(&self, mode: &str, kind: &str, name: &str, expect: &str) {
        let deadline = Instant::now() + STARTUP_WAIT;
        loop {
            match kdig_short(self.port(kind), mode, &self.cert.cert(), name) {
                Ok(out) if out.contains(expect) => return,
                r if Instant::now() >= deadline => {
                    panic!("{}: kdig {mode} {name} never got {expect}: {r:?}\n{}", self.name, self.log())
                }
                _ => thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The port of a listener kind (`udp`, `dot`, `doh`, `doq`, ...).
    pub fn port(&self, kind: &str) -> u16 {
        self.ports
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, p)| *p)
            .unwrap_or_else(|| panic!("{} has no {kind} port", self.name))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the peer logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// unbound with DoT (`dot`) and DoH/2 (`doh`, path /dns-query) and plain `udp`/`tcp`,
/// answering `www.example.test` A 192.0.2.1 from a static local zone.
pub fn unbound_tls() -> Peer {
    Peer::start(
        "unbound",
        "unbound",
        &["udp", "dot", "doh"],
        &|dir, cert, port| {
            let conf = format!(
                "server:\n  username: \"\"\n  chroot: \"\"\n  directory: \"{dir}\"\n  pidfile: \"\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n  num-threads: 1\n  do-ip6: no\n  interface: 127.0.0.1@{udp}\n  interface: 127.0.0.1@{dot}\n  interface: 127.0.0.1@{doh}\n  tls-port: {dot}\n  https-port: {doh}\n  http-endpoint: \"/dns-query\"\n  tls-service-key: \"{key}\"\n  tls-service-pem: \"{cert}\"\n  access-control: 127.0.0.0/8 allow\n  incoming-num-tcp: 256\n  module-config: \"iterator\"\n  local-zone: \"example.test.\" static\n  local-data: \"www.example.test. 300 IN A 192.0.2.1\"\n",
                dir = dir.display(),
                udp = port("udp"),
                dot = port("dot"),
                doh = port("doh"),
                key = cert.key().display(),
                cert = cert.cert().display(),
            );
            let path = dir.join("unbound.conf");
            fs::write(&path, conf).expect("write unbound.conf");
            vec!["-d".into(), "-c".into(), path.to_str().unwrap().into()]
        },
        &[Ready::Kdig("+tls", "dot"), Ready::Kdig("+https", "doh")],
        "www.example.test",
        "192.0.2.1",
    )
}

/// knot-resolver (kresd) with DoT (`dot`), DoH/2 (`doh`, path /dns-query) and `udp`; it
/// answers NXDOMAIN for `.test` by default, so a policy answers A 192.0.2.4 for every name
/// under `answer.test`.
pub fn kresd() -> Peer {
    Peer::start(
        "kresd",
        "kresd",
        &["udp", "dot", "doh"],
        &|dir, cert, port| {
            let conf = format!(
                "net.listen('127.0.0.1', {udp}, {{kind='dns'}})\nnet.listen('127.0.0.1', {dot}, {{kind='tls'}})\nnet.listen('127.0.0.1', {doh}, {{kind='doh2'}})\nnet.tls('{cert}', '{key}')\npolicy.add(policy.suffix(policy.ANSWER({{[kres.type.A]={{rdata=kres.str2ip('192.0.2.4'), ttl=300}}}}), {{todname('answer.test.')}}))\n",
                udp = port("udp"),
                dot = port("dot"),
                doh = port("doh"),
                cert = cert.cert().display(),
                key = cert.key().display(),
            );
            let path = dir.join("kresd.conf");
            fs::write(&path, conf).expect("write kresd.conf");
            let rundir = dir.join("run");
            fs::create_dir(&rundir).expect("kresd run dir");
            // The config path must be absolute: kresd reads it from inside its run directory.
            vec!["-n".into(), "-c".into(), path.to_str().unwrap().into(), rundir.to_str().unwrap().into()]
        },
        &[Ready::Kdig("+tls", "dot"), Ready::Kdig("+https", "doh")],
        "www.answer.test",
        "192.0.2.4",
    )
}

/// BIND 9 (named) with DoT (`dot`) and DoH/2 (`doh`, path /dns-query) and `udp`,
/// authoritative for `example.test` with `www.example.test` A 192.0.2.6.
pub fn named() -> Peer {
    Peer::start(
        "named",
        "named",
        &["udp", "dot", "doh"],
        &|dir, cert, port| {
            let zone = "$TTL 300\n@ IN SOA ns.example.test. admin.example.test. 1 3600 600 86400 300\n@ IN NS ns.example.test.\nns IN A 127.0.0.1\nwww IN A 192.0.2.6\n";
            fs::write(dir.join("example.test.zone"), zone).expect("write zone");
            let conf = format!(
                "tls local-tls {{ cert-file \"{cert}\"; key-file \"{key}\"; }};\nhttp local-http {{ endpoints {{ \"/dns-query\"; }}; }};\ncontrols {{ }};\noptions {{\n  directory \"{dir}\";\n  pid-file none;\n  session-keyfile \"{dir}/session.key\";\n  managed-keys-directory \"{dir}\";\n  listen-on port {udp} {{ 127.0.0.1; }};\n  listen-on port {dot} tls local-tls {{ 127.0.0.1; }};\n  listen-on port {doh} tls local-tls http local-http {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  recursion no;\n  dnssec-validation no;\n  allow-query {{ 127.0.0.0/8; }};\n}};\nzone \"example.test\" {{ type primary; file \"{dir}/example.test.zone\"; }};\n",
                cert = cert.cert().display(),
                key = cert.key().display(),
                dir = dir.display(),
                udp = port("udp"),
                dot = port("dot"),
                doh = port("doh"),
            );
            let path = dir.join("named.conf");
            fs::write(&path, conf).expect("write named.conf");
            vec!["-g".into(), "-n".into(), "1".into(), "-c".into(), path.to_str().unwrap().into()]
        },
        &[Ready::Kdig("+tls", "dot"), Ready::Kdig("+https", "doh")],
        "www.example.test",
        "192.0.2.6",
    )
}

/// dnsdist with DoT (`dot`), DoH (`doh`, path /dns-query) and `udp`: `spoof.test` is answered
/// A 192.0.2.5 by a SpoofAction; everything else goes to `backend` (dnsdist forwards queries
/// that came over DoT and DoH over TCP: the backend must serve UDP and TCP on one port, as
/// [`Unbound`] does).
pub fn dnsdist(backend: SocketAddr) -> Peer {
    dnsdist_with(backend, "")
}

/// [`dnsdist`] with more configuration lines (`extra`, Lua, e.g. `setMaxTCPQueriesPerConnection(20)`).
pub fn dnsdist_with(backend: SocketAddr, extra: &str) -> Peer {
    let p = Peer::start(
        "dnsdist",
        "dnsdist",
        &["udp", "dot", "doh"],
        &|dir, cert, port| {
            let conf = format!(
                "setSecurityPollSuffix('')\nsetACL({{'127.0.0.0/8'}})\nsetLocal('127.0.0.1:{udp}')\naddTLSLocal('127.0.0.1:{dot}', '{cert}', '{key}', {{provider='openssl'}})\naddDOHLocal('127.0.0.1:{doh}', '{cert}', '{key}', '/dns-query')\naddAction(QNameRule('spoof.test.'), SpoofAction('192.0.2.5'))\nnewServer({{address='{backend}', checkName='www.example.test.'}})\n{extra}\n",
                udp = port("udp"),
                dot = port("dot"),
                doh = port("doh"),
                cert = cert.cert().display(),
                key = cert.key().display(),
            );
            let path = dir.join("dnsdist.conf");
            fs::write(&path, conf).expect("write dnsdist.conf");
            vec!["--supervised".into(), "--disable-syslog".into(), "-C".into(), path.to_str().unwrap().into()]
        },
        &[Ready::Kdig("+tls", "dot"), Ready::Kdig("+https", "doh")],
        "spoof.test",
        "192.0.2.5",
    );
    // The backend is usable once dnsdist's health check has marked it up.
    p.wait_answer("+tls", "dot", "www.example.test", "192.0.2.1");
    p
}

/// AdGuard dnsproxy with DoQ (`doq`), DoH/2 and DoH/3 on one port (`doh`, TCP and UDP, path
/// /dns-query) and `udp`, answering `fixed.example.test` A 192.0.2.7 from a hosts file (its
/// upstream, 127.0.0.1:9, answers nothing).
pub fn dnsproxy() -> Peer {
    Peer::start(
        "dnsproxy",
        "dnsproxy",
        &["udp", "doq", "doh"],
        &|dir, cert, port| {
            let hosts = dir.join("hosts");
            fs::write(&hosts, "192.0.2.7 fixed.example.test\n").expect("write hosts");
            vec![
                "-l".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port("udp").to_string(),
                "-q".into(),
                port("doq").to_string(),
                "-s".into(),
                port("doh").to_string(),
                "--http3".into(),
                format!("--tls-crt={}", cert.cert().display()),
                format!("--tls-key={}", cert.key().display()),
                "--hosts-file-enabled".into(),
                format!("--hosts-files={}", hosts.display()),
                "-u".into(),
                "127.0.0.1:9".into(),
            ]
        },
        &[
            Ready::Kdig("+https", "doh"),
            Ready::Q("quic://127.0.0.1:{}", "doq"),
            Ready::Q("https://127.0.0.1:{}/dns-query", "doh"),
        ],
        "fixed.example.test",
        "192.0.2.7",
    )
}

/// A `connections` count map entry (`connections.errors`, `connections.closed`,
/// `connections.negotiated.alpn`, ...), 0 when absent.
pub fn conn_map(v: &Value, path: &[&str], name: &str) -> u64 {
    let mut m = &v["connections"];
    for p in path {
        m = &m[*p];
    }
    map_entry(m, name)
}

/// `connections.KEY` as an integer.
pub fn conn_total(v: &Value, key: &str) -> u64 {
    v["connections"][key].as_u64().unwrap_or_else(|| panic!("connections.{key} missing in\n{:#}", v["connections"]))
}

/// What an encrypted run must show about its connections.
pub struct Expect<'a> {
    /// The ALPN every connection agreed on, None when the server may agree on none (DoT).
    pub alpn: Option<&'a str>,
    /// `TLSv1.3` or `TLSv1.2`.
    pub tls_version: &'a str,
    /// QUIC (DoQ, DoH/3): `handshake_quic`; else TCP and TLS: `handshake_tcp`, `handshake_tls`.
    pub quic: bool,
}

/// Checks a complete run of `count` queries that were all answered with `rcode`, over an
/// encrypted transport, with the connections block: opened >= 1, no connection errors, the
/// negotiated ALPN and TLS version on every connection, and the handshake histograms.
pub fn check_encrypted_run(v: &Value, count: u64, rcode_name: &str, e: &Expect) {
    check_encrypted_run_lossy(v, count, rcode_name, e, 0);
}

/// [`check_encrypted_run`] against a peer that itself loses a few queries: up to `max_lost`
/// may fail as `closed` (the peer closed the connection with them in flight) or time out
/// (the peer never answered them), and only so; every other one is answered.
pub fn check_encrypted_run_lossy(v: &Value, count: u64, rcode_name: &str, e: &Expect, max_lost: u64) {
    check_accounting(v);
    assert_eq!(v["status"], "complete", "{v:#}");
    assert_eq!(total(v, "issued"), count, "-n {count}:\n{:#}", v["totals"]);
    let closed = v["totals"]["errors"]["closed"].as_u64().unwrap_or(0);
    assert_eq!(total(v, "failed"), closed, "no failure but server closes:\n{:#}", v["totals"]);
    let lost = closed + total(v, "timed_out");
    assert!(lost <= max_lost, "at most {max_lost} queries lost by the server:\n{:#}", v["totals"]);
    let answered = count - lost;
    assert_eq!(total(v, "answered"), answered, "every query answered:\n{:#}\n{:#}", v["totals"], v["connections"]);
    assert_eq!(rcode(v, rcode_name), answered, "every answer {rcode_name}:\n{:#}", v["totals"]);
    assert_eq!(total(v, "in_flight"), 0);
    assert_eq!(v["latency"]["count"].as_u64(), Some(answered), "one latency sample per answer");
    let c = &v["connections"];
    let opened = conn_total(v, "opened");
    assert!(opened >= 1, "no connection opened:\n{c:#}");
    assert_eq!(map_sum(&c["errors"]), 0, "connection errors:\n{c:#}");
    if let Some(alpn) = e.alpn {
        assert_eq!(conn_map(v, &["negotiated", "alpn"], alpn), opened, "ALPN {alpn} on every connection:\n{c:#}");
    }
    assert_eq!(
        conn_map(v, &["negotiated", "tls_version"], e.tls_version),
        opened,
        "{} on every connection:\n{c:#}",
        e.tls_version
    );
    let need: &[&str] = if e.quic { &["handshake_quic"] } else { &["handshake_tcp", "handshake_tls"] };
    for h in need {
        let n = c[*h]["count"].as_u64().unwrap_or_else(|| panic!("connections.{h} missing:\n{c:#}"));
        assert_eq!(n, opened, "one {h} sample per connection:\n{c:#}");
        assert!(c[*h]["max_ns"].as_u64().unwrap_or(0) > 0, "{h} of zero:\n{c:#}");
    }
    let absent: &[&str] = if e.quic { &["handshake_tcp", "handshake_tls"] } else { &["handshake_quic"] };
    for h in absent {
        assert!(c[*h].is_null() || c[*h]["count"].as_u64() == Some(0), "{h} on this transport:\n{c:#}");
    }
}

/// `stats ... KEY=N ...` from the responder's last stderr line.
pub fn serve_stat(stderr: &str, key: &str) -> u64 {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("stats "))
        .unwrap_or_else(|| panic!("no `stats` line on volley serve's stderr:\n{stderr}"));
    let pat = format!("{key}=");
    let w = line.split_whitespace().find(|w| w.starts_with(&pat)).unwrap_or_else(|| panic!("no {key}= in: {line}"));
    w[pat.len()..].parse().unwrap_or_else(|_| panic!("{key} is not a number in: {line}"))
}

// ---------------------------------------------------------------------------------------------
// Connections seen on the wire (iproute2 `ss`)
// ---------------------------------------------------------------------------------------------

/// How long tcpdump may take to start or to stop.
pub const CAPTURE_WAIT: Duration = Duration::from_secs(20);

/// A running tcpdump writing `lo` traffic on some ports to a file.
pub struct Capture {
    child: Child,
    stderr: Option<JoinHandle<String>>,
    path: PathBuf,
}

impl Capture {
    /// Starts tcpdump on `lo` for `port` and waits (bounded) until it listens.
    pub fn start(path: &Path, port: u16) -> Capture {
        Capture::start_filter(path, &format!("port {port}"))
    }

    /// Starts tcpdump on `lo` with a capture filter (`port 53 or port 853`) and waits (bounded)
    /// until it listens.
    pub fn start_filter(path: &Path, filter: &str) -> Capture {
        Capture::start_args(path, &[], filter)
    }

    /// [`Capture::start_filter`] with more tcpdump flags (e.g. `--time-stamp-precision nano`).
    pub fn start_args(path: &Path, extra: &[&str], filter: &str) -> Capture {
        let tcpdump = require("tcpdump");
        let mut child = Command::new(&tcpdump)
            // Immediate mode and a large buffer: a burst of 400 datagrams in a few milliseconds
            // must not be dropped by the kernel before tcpdump reads it.
            .args(["-i", "lo", "-n", "-U", "--immediate-mode", "-B", "65536"])
            .args(extra)
            .arg("-w")
            .arg(path)
            .arg(filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", tcpdump.display()));
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut all = String::new();
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                all.push_str(&l);
                all.push('\n');
                let _ = tx.send(l);
            }
            all
        });
        let deadline = Instant::now() + CAPTURE_WAIT;
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains("listening on") => break,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "tcpdump did not start capturing on lo within {CAPTURE_WAIT:?} (capturing needs root): {}",
                        stderr.join().unwrap_or_default()
                    );
                }
            }
        }
        // The socket filter is attached by now; a moment more for the ring to be live.
        thread::sleep(Duration::from_millis(300));
        Capture { child, stderr: Some(stderr), path: path.to_path_buf() }
    }

    /// Stops tcpdump (SIGINT to its pid), waits for it (bounded), and checks that the kernel
    /// dropped nothing.
    pub fn stop(mut self) -> PathBuf {
        // The last packets of the run (closes) are on the wire by now; let tcpdump write them.
        thread::sleep(Duration::from_millis(500));
        signal(&self.child, libc::SIGINT);
        let status = wait_bounded(&mut self.child, CAPTURE_WAIT);
        let err = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        let status =
            status.unwrap_or_else(|| panic!("tcpdump still running {CAPTURE_WAIT:?} after SIGINT; killed\n{err}"));
        assert!(status.success(), "tcpdump: {status}\n{err}");
        assert!(
            err.lines().any(|l| l.trim() == "0 packets dropped by kernel"),
            "tcpdump dropped packets: the capture is incomplete\n{err}"
        );
        self.path.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // Only when a test failed between start and stop: do not leave tcpdump running.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// TCP connections in state ESTABLISHED whose local port is `port` (the server's side of
/// each connection to a listener on `port`), counted by `ss -tn`. A missing `ss` is a
/// failure (iproute2: scripts/install-deps.sh).
pub fn ss_established(port: u16) -> usize {
    let ss = require("ss");
    let filter = format!("( sport = :{port} )");
    let out = run_cmd(Command::new(ss).args(["-Htn", "state", "established", &filter]), Duration::from_secs(10));
    assert!(out.status.success(), "ss failed: {}", out.stderr);
    out.stdout.lines().filter(|l| !l.trim().is_empty()).count()
}

/// The local addresses of the TCP and UDP sockets bound inside `range` (e.g. 127.0.1.0/29),
/// as `ss -Htun src RANGE` lists them: a client's source addresses seen by the kernel.
pub fn ss_sources(range: &str) -> std::collections::BTreeSet<String> {
    let ss = require("ss");
    let filter = format!("( src {range} )");
    let out = run_cmd(Command::new(ss).args(["-Htuna", &filter]), Duration::from_secs(10));
    assert!(out.status.success(), "ss failed: {}", out.stderr);
    out.stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter_map(|local| local.rsplit_once(':').map(|(ip, _)| ip.to_string()))
        .collect()
}

/// A `volley run ARGS... --progress never -q -o FILE` started in the background, killed when
/// dropped; [`BackgroundRun::finish`] waits for it (bounded) and parses its results.
pub struct BackgroundRun {
    child: Child,
    stderr: Option<JoinHandle<String>>,
    output: PathBuf,
    _dir: tempfile::TempDir,
}

impl BackgroundRun {
    pub fn start(args: &[&str]) -> BackgroundRun {
        let dir = tempfile::tempdir().expect("temp dir for results");
        let output = dir.path().join("results.json");
        let mut child = Command::new(volley())
            .arg("run")
            .args(args)
            .args(["--progress", "never", "-q", "-o"])
            .arg(&output)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start volley run");
        let stderr = Some(drain(child.stderr.take().unwrap()));
        BackgroundRun { child, stderr, output, _dir: dir }
    }

    /// The run's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the run (bounded by [`RUN_WAIT`]); its results, asserting exit 0.
    pub fn finish(mut self) -> Value {
        let status = wait_bounded(&mut self.child, RUN_WAIT);
        let err = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        assert_eq!(status.and_then(|s| s.code()), Some(0), "volley run: {status:?}\nstderr:\n{err}");
        read_results(&self.output).unwrap_or_else(|| panic!("volley run wrote no results; stderr:\n{err}"))
    }
}

impl Drop for BackgroundRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One TCP packet of a capture, as tshark reads it.
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket {
    /// Seconds from the capture's start.
    pub t: f64,
    /// tshark's number of its TCP connection.
    pub stream: u64,
    pub src_port: u16,
    pub syn: bool,
    pub fin: bool,
    /// Payload bytes.
    pub len: u64,
}

/// The TCP packets of capture `file`, in order.
pub fn tcp_packets(file: &Path) -> Vec<TcpPacket> {
    let out = run_cmd(
        Command::new(require("tshark")).arg("-r").arg(file).args([
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "frame.time_relative",
            "-e",
            "tcp.stream",
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.flags.syn",
            "-e",
            "tcp.flags.fin",
            "-e",
            "tcp.len",
        ]),
        CAPTURE_WAIT,
    );
    assert!(out.status.success(), "tshark: {}", out.stderr);
    let flag = |s: &str| s == "1" || s == "True";
    out.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 6, "tshark line {line:?}");
            TcpPacket {
                t: f[0].parse().unwrap_or_else(|_| panic!("time in {line:?}")),
                stream: f[1].parse().unwrap_or_else(|_| panic!("stream in {line:?}")),
                src_port: f[2].parse().unwrap_or_else(|_| panic!("port in {line:?}")),
                syn: flag(f[3]),
                fin: flag(f[4]),
                len: f[5].parse().unwrap_or(0),
            }
        })
        .collect()
}

/// A counter of one direction from volley link's closing lines (`up`/`down`, e.g. "loss").
pub fn link_counter(stderr: &str, dir: &str, key: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&format!("volley link: {dir} ")))
        .unwrap_or_else(|| panic!("no {dir} line in:\n{stderr}"));
    let words: Vec<&str> = line.split([' ', ',', ':']).filter(|w| !w.is_empty()).collect();
    let i = words.iter().position(|w| *w == key).unwrap_or_else(|| panic!("no {key} in {line}"));
    words[i + 1].parse().unwrap_or_else(|_| panic!("{key} in {line}"))
}

/// A pcap (raw IPv4, link type 101) of DNS queries for A of `q{i}.{zone}` (i: the packet's
/// number, also its DNS ID) to 10.0.0.53 port 53 from source port 12345: one `(source
/// address, seconds)` per packet.
pub fn query_capture(packets: &[([u8; 4], f64)], zone: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32.to_le_bytes().as_slice(), &2u16.to_le_bytes(), &4u16.to_le_bytes()] {
        out.extend_from_slice(v);
    }
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&101u32.to_le_bytes());
    for (i, &(src, t)) in packets.iter().enumerate() {
        let mut dns = vec![(i >> 8) as u8, i as u8, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in format!("q{i}.{zone}").split('.') {
            dns.push(l.len() as u8);
            dns.extend_from_slice(l.as_bytes());
        }
        dns.extend_from_slice(&[0, 0, 1, 0, 1]);
        let udp_len = 8 + dns.len();
        let ip_len = 20 + udp_len;
        let mut p = vec![0x45, 0, (ip_len >> 8) as u8, ip_len as u8, 0, 0, 0, 0, 64, 17, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&[10, 0, 0, 53]);
        p.extend_from_slice(&[0x30, 0x39, 0, 53, (udp_len >> 8) as u8, udp_len as u8, 0, 0]);
        p.extend_from_slice(&dns);
        let (s, us) = (t as u32, (t.fract() * 1e6) as u32);
        for v in [1_700_000_000 + s, us, p.len() as u32, p.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&p);
    }
    out
}
