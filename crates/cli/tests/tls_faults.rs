//! Certificate verification and faults on the encrypted transports. A failed verification
//! stops `volley run` before load with one line naming the reason; every other fault is a
//! measurement: each query ends with its own error kind (tls, http_status, content_type,
//! goaway, stream_reset, quic_stream_reset, quic_closed, idle_timeout, reset), the run ends,
//! and the accounting equation balances.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;

/// A run of `-n N -c 10` with a short query timeout against `url`, trusting `ca`.
fn run_n(url: &str, ca: &str, name: &str, n: u64, extra: &[&str]) -> RunResult {
    let n = n.to_string();
    let mut args = vec![url, "--ca", ca, "--name", name, "-n", &n, "-c", "10", "-t", "3s"];
    args.extend_from_slice(extra);
    run_volley(&args)
}

/// A run that ended (status complete) with its accounting balanced; returns the results.
fn ended(r: &RunResult) -> &serde_json::Value {
    let v = r.ok();
    check_accounting(v);
    assert_eq!(v["status"], "complete", "{v:#}");
    assert_eq!(total(v, "in_flight"), 0, "{:#}", v["totals"]);
    v
}

/// Every query either answered or failed with `kind`, and at least `min` failed so.
fn answered_or(v: &serde_json::Value, kind: &str, min: u64) {
    let failed = total(v, "failed");
    assert_eq!(error_count(v, kind), failed, "every failure is {kind}:\n{:#}\n{:#}", v["totals"], v["connections"]);
    assert!(failed >= min, "at least {min} {kind} failures:\n{:#}\n{:#}", v["totals"], v["connections"]);
    assert_eq!(total(v, "answered") + failed + total(v, "timed_out") + total(v, "unsent"), total(v, "issued"));
    assert_eq!(total(v, "timed_out"), 0, "no timeouts:\n{:#}", v["totals"]);
}

// ---------------------------------------------------------------------------------------------
// Certificate verification
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_issuer_is_one_line_exit_2() {
    let s = Server::start_encrypted(&[]);
    for t in ["tls", "https", "h3", "quic"] {
        let url = s.url(t);
        let r = run_volley(&[&url, "-n", "50"]);
        let line = assert_usage_error(&r);
        let l = line.to_lowercase().replace(['_', ' '], "");
        assert!(l.contains("unknownissuer"), "{t}: names the reason (unknown issuer): {line}");
    }
    // A self-signed leaf on a real server (unbound), not trusted without --ca.
    let p = unbound_tls();
    let r = run_volley(&[&format!("tls://127.0.0.1:{}", p.port("dot")), "--name", "www.example.test", "-n", "50"]);
    let line = assert_usage_error(&r);
    assert!(line.to_lowercase().replace(['_', ' '], "").contains("unknownissuer"), "unbound: {line}");
}

#[test]
fn wrong_ca_is_one_line_exit_2() {
    let s = Server::start_encrypted(&[]);
    let other = TestCert::new();
    for t in ["tls", "quic"] {
        let r = run_volley(&[&s.url(t), "--ca", &other.cert_str(), "-n", "50"]);
        let line = assert_usage_error(&r);
        assert!(line.to_lowercase().contains("certificate"), "{t}: {line}");
    }
}

#[test]
fn wrong_sni_is_one_line_exit_2_naming_the_name() {
    let s = Server::start_encrypted(&[]);
    for t in ["tls", "https", "h3", "quic"] {
        let r = run_volley(&[&s.url(t), "--ca", s.ca_str(), "--sni", "wrong.name", "-n", "50"]);
        let line = assert_usage_error(&r);
        assert!(line.contains("wrong.name"), "{t}: names the name: {line}");
    }
    // The right name, given explicitly, verifies.
    let r = run_volley(&[&s.url("tls"), "--ca", s.ca_str(), "--sni", "localhost", "-n", "50"]);
    assert_eq!(total(ended(&r), "answered"), 50);
}

#[test]
fn insecure_runs_and_says_so() {
    let s = Server::start_encrypted(&[]);
    for t in ["tls", "https", "h3", "quic"] {
        let r = run_volley(&[&s.url(t), "--insecure", "-n", "100", "-c", "10"]);
        let v = ended(&r);
        assert_eq!(total(v, "answered"), 100, "{t}:\n{:#}", v["totals"]);
        let warnings = v["warnings"].as_array().unwrap_or_else(|| panic!("no warnings array:\n{v:#}"));
        assert!(
            warnings.iter().any(|w| w.as_str().unwrap_or("").to_lowercase().contains("insecure")),
            "{t}: the results say the certificate was not verified: {warnings:?}"
        );
        assert!(r.stdout.to_lowercase().contains("insecure"), "{t}: the summary says so too:\n{}", r.stdout);
    }
    // volley bench: a line above its table, and each run's warnings.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "--target", &s.url("tls"), "--insecure", "-l", "1s", "-c", "4", "--progress", "never", "-o"])
        .arg(&json);
    let out = run_cmd(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    let notice = out.stdout.lines().filter(|l| l.starts_with("WARNING: --insecure")).count();
    assert_eq!(notice, 1, "one line says so:\n{}", out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let w = doc["runs"][0]["warnings"].to_string();
    assert!(w.contains("--insecure"), "the run's results say so: {w}");
}

// ---------------------------------------------------------------------------------------------
// tls: a handshake that fails after the probe
// ---------------------------------------------------------------------------------------------

/// A TCP front on 127.0.0.1: the first `pass` connections are relayed to `upstream` (so the
/// probe before a run succeeds); every later one gets plain text instead of a TLS handshake.
struct FlakyTls {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    handle: Option<thread::JoinHandle<()>>,
}

impl FlakyTls {
    fn start(upstream: Option<SocketAddr>, pass: usize) -> FlakyTls {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (stop2, acc2) = (stop.clone(), accepted.clone());
        let handle = thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        let i = acc2.fetch_add(1, Ordering::Relaxed);
                        match upstream {
                            Some(up) if i < pass => relay(c, up),
                            _ => {
                                thread::spawn(move || garbage(c));
                            }
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FlakyTls { addr, stop, accepted, handle: Some(handle) }
    }
}

impl Drop for FlakyTls {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn relay(client: TcpStream, upstream: SocketAddr) {
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) else { return };
    for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
        thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    }
}

fn garbage(mut c: TcpStream) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 4096];
    let _ = c.read(&mut buf); // the ClientHello
    let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\nthis is not TLS\r\n");
    let _ = c.shutdown(std::net::Shutdown::Both);
}

#[test]
fn tls_handshake_failure_counted() {
    let s = Server::start_encrypted(&[]);
    let front = FlakyTls::start(Some(s.listener("dot")), 1);
    let url = format!("tls://{}", front.addr);
    let r = run_n(&url, s.ca_str(), "www.example.test", 200, &["--sni", "localhost"]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(v["status"], "complete", "{v:#}");
    assert!(front.accepted.load(Ordering::Relaxed) >= 2, "the run connected after the probe");
    assert!(error_count(v, "tls") > 0, "queries failed with tls:\n{:#}\n{:#}", v["totals"], v["connections"]);
    assert!(conn_map(v, &["errors"], "tls") > 0, "connection errors tls:\n{:#}", v["connections"]);
    assert_eq!(total(v, "answered"), 0, "{:#}", v["totals"]);
}

#[test]
fn plain_tcp_on_the_tls_port_is_one_line_exit_2() {
    let front = FlakyTls::start(None, 0);
    let r = run_volley(&[&format!("tls://{}", front.addr), "--insecure", "-n", "20", "-t", "2s"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("TLS"), "names TLS: {line}");
}

// ---------------------------------------------------------------------------------------------
// DoH: http_status, content_type, stream_reset, goaway
// ---------------------------------------------------------------------------------------------

/// The check before a run tells a wrong request from a server's own answer. A path the server
/// does not serve (404), a method it refuses (405) or a redirect is bad input: exit 2, one line
/// with what to check. A DoH server that answers 503, or with another content type, is
/// measured: one warning line on stderr (kept in the results' warnings), then the run, whose
/// queries fail as `http_status` / `content_type`; `volley query` says so with exit 1.
#[test]
fn probe_tells_wrong_requests_from_server_faults() {
    let s = Server::start_encrypted(&[]);
    let wrong_path = s.url("https").replace("/dns-query", "/dns-quer");
    let line = assert_usage_error(&run_volley(&[&wrong_path, "--ca", s.ca_str(), "-n", "10"]));
    assert!(line.contains("404") && line.contains("is the path right?"), "{line}");
    for (fault, hint) in [("http-status=405", "--doh-method get"), ("http-status=301", "redirect")] {
        let s = Server::start_encrypted(&["--fault", fault]);
        let line = assert_usage_error(&run_volley(&[&s.url("https"), "--ca", s.ca_str(), "-n", "10"]));
        assert!(line.contains(&fault[12..]) && line.contains(hint), "{fault}: {line}");
    }
    for (fault, kind, said) in [
        ("http-status=503", "http_status", "HTTP status 503"),
        ("content-type=text/plain", "content_type", "content type"),
    ] {
        let s = Server::start_encrypted(&["--fault", fault]);
        let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 50, &[]);
        let v = ended(&r);
        assert_eq!(error_count(v, kind), 50, "{fault}: measured, every query failed as {kind}:\n{:#}", v["totals"]);
        let warned: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(warned.len(), 1, "{fault}: one line on stderr:\n{}", r.stderr);
        assert!(warned[0].starts_with("volley: warning:") && warned[0].contains(said), "{fault}: {}", warned[0]);
        let kept =
            v["warnings"].as_array().is_some_and(|w| w.iter().any(|w| w.as_str().is_some_and(|w| w.contains(said))));
        assert!(kept, "{fault}: in the results' warnings:\n{:#}", v["warnings"]);
        let mut q = Command::new(volley());
        q.args(["query", &s.url("https"), "www.example.test", "--ca", s.ca_str()]);
        let out = run_cmd(&mut q, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(1), "{fault}: volley query got no DNS answer:\n{}", out.stderr);
        assert!(out.stderr.contains(said), "{fault}: {}", out.stderr);
    }
}

/// Every `http_status` failure's status is counted as event `http_status_NNN`.
fn statuses_told(v: &serde_json::Value, status: &str) {
    let failed = v["totals"]["errors"]["http_status"].as_u64();
    assert_eq!(v["events"][format!("http_status_{status}")].as_u64(), failed, "{:#}", v["events"]);
    assert_eq!(v["events"].as_object().map(|o| o.keys().filter(|k| k.starts_with("http_status_")).count()), Some(1));
}

#[test]
fn http_status_counted_doh2_and_doh3() {
    let s = Server::start_encrypted(&["--fault", "http-status=503:1/10"]);
    for t in ["https", "h3"] {
        let r = run_n(&s.url(t), s.ca_str(), "www.example.test", 500, &[]);
        let v = ended(&r);
        answered_or(v, "http_status", 40);
        statuses_told(v, "503");
        assert!(total(v, "answered") >= 400, "{t}: the other 9 in 10 answered:\n{:#}", v["totals"]);
    }
    // HTTP/1.1 too, one request at a time and pipelined: the connection goes on after a 503.
    let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 300, &["--http", "1.1"]);
    answered_or(ended(&r), "http_status", 20);
    statuses_told(ended(&r), "503");
    let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 300, &["--http", "1.1", "--h1-pipeline", "8"]);
    let v = ended(&r);
    answered_or(v, "http_status", 20);
    statuses_told(v, "503");
    assert_eq!(v["connections"]["closed"]["error"].as_u64(), None, "no connection broke:\n{:#}", v["connections"]);
}

#[test]
fn content_type_counted_doh2_and_doh3() {
    let s = Server::start_encrypted(&["--fault", "content-type=text/plain:1/10"]);
    for t in ["https", "h3"] {
        let r = run_n(&s.url(t), s.ca_str(), "www.example.test", 500, &[]);
        let v = ended(&r);
        answered_or(v, "content_type", 40);
        assert!(total(v, "answered") >= 400, "{t}:\n{:#}", v["totals"]);
    }
    let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 300, &["--http", "1.1", "--h1-pipeline", "8"]);
    answered_or(ended(&r), "content_type", 20);
}

#[test]
fn stream_reset_counted_doh2() {
    let s = Server::start_encrypted(&["--fault", "rst-stream=1/10"]);
    let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 500, &[]);
    let v = ended(&r);
    answered_or(v, "stream_reset", 40);
}

/// A stream the HTTP/2 server refused unprocessed (REFUSED_STREAM, `refuse-stream=1/4`) is no
/// failure but sent again, once (event `resent_refused_stream`); a query refused a second time
/// fails as `refused_stream`, never as `stream_reset`.
#[test]
fn refused_stream_resent_doh2() {
    let s = Server::start_encrypted(&["--fault", "refuse-stream=1/4"]);
    let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 400, &["-T", "1"]);
    let v = ended(&r);
    let resent = v["events"]["resent_refused_stream"].as_u64().unwrap_or(0);
    // The server refuses 1 in 4 of the streams it gets, resends included: about 133 of 533.
    assert!(resent >= 80, "refused streams sent again:\n{:#}\n{:#}", v["totals"], v["events"]);
    answered_or(v, "refused_stream", 0);
    assert!(error_count(v, "refused_stream") < resent / 2, "most resends answered:\n{:#}", v["totals"]);
    assert_eq!(v["events"].as_object().map(|o| o.len()), Some(1), "no other event:\n{:#}", v["events"]);
}

/// On HTTP/3 a reset request stream is a QUIC stream reset.
#[test]
fn stream_reset_counted_doh3() {
    let s = Server::start_encrypted(&["--fault", "rst-stream=1/10"]);
    let r = run_n(&s.url("h3"), s.ca_str(), "www.example.test", 500, &[]);
    let v = ended(&r);
    answered_or(v, "quic_stream_reset", 40);
}

/// HTTP/3 GOAWAY after 50 requests per connection: counted where it ended connections
/// (`server_goaway`), and every query is answered: the requests the server refused per
/// GOAWAY (those already on the way when it came, at or beyond its stream ID) go again on the
/// client's next connection (event `resent_goaway`). The client moves to a new connection as
/// soon as the GOAWAY comes, so whether any query is refused is a race: not asserted.
#[test]
fn goaway_counted_doh3() {
    let s = Server::start_encrypted(&["--fault", "goaway-after=50"]);
    let r = run_n(&s.url("h3"), s.ca_str(), "www.example.test", 500, &[]);
    let v = ended(&r);
    assert!(
        conn_map(v, &["closed"], "server_goaway") >= 1,
        "goaway counted:\n{:#}\n{:#}",
        v["totals"],
        v["connections"]
    );
    assert_eq!(total(v, "answered"), 500, "{:#}\n{:#}", v["totals"], v["events"]);
}

/// After a GOAWAY the client opens a new connection and goes on: a GOAWAY ends one
/// connection, not the measurement.
fn goaway_then_reconnect(t: &str) {
    let s = Server::start_encrypted(&["--fault", "goaway-after=50"]);
    let r = run_n(&s.url(t), s.ca_str(), "www.example.test", 500, &["-T", "1"]);
    let v = ended(&r);
    let c = &v["connections"];
    assert!(conn_total(v, "opened") >= 5, "{t}: a new connection after each GOAWAY:\n{c:#}");
    // Every connection takes 50 requests: at least 400 of 500 answered even if each GOAWAY
    // cost the queries in flight on its connection.
    assert!(total(v, "answered") >= 400, "{t}: answered after reconnecting:\n{:#}\n{c:#}", v["totals"]);
    assert_eq!(total(v, "failed"), error_count(v, "goaway"), "{t}: failures are goaway:\n{:#}", v["totals"]);
}

#[test]
fn goaway_then_reconnect_doh2() {
    goaway_then_reconnect("https");
}

#[test]
fn goaway_then_reconnect_doh3() {
    goaway_then_reconnect("h3");
}

/// HTTP/1.1's GOAWAY is `Connection: close` on the N-th response: a pipelining client sends
/// nothing more on that connection, and the queries still waiting go on the next one, as do
/// the requests already written after the N-th (sent again: event `resent_closed`). None fails.
#[test]
fn connection_close_then_reconnect_doh11_pipelined() {
    let s = Server::start_encrypted(&["--fault", "goaway-after=50"]);
    let r = run_n(
        &s.url("https"),
        s.ca_str(),
        "www.example.test",
        500,
        &["-T", "1", "--http", "1.1", "--h1-pipeline", "4"],
    );
    let v = ended(&r);
    let c = &v["connections"];
    let opened = conn_total(v, "opened");
    assert!(opened >= 10, "a new connection after each close:\n{c:#}");
    assert_eq!(total(v, "answered"), 500, "{:#}\n{c:#}", v["totals"]);
    assert!(conn_map(v, &["closed"], "server_fin") >= 9, "closed by the server:\n{c:#}");
}

/// `rst-stream` over HTTP/1.1 closes the connection without a response: one request at a time
/// on one connection, each such request is sent again on the next connection (event
/// `resent_closed`, never selected again: it is the server's next request) and answered.
#[test]
fn closed_without_response_resent_doh11() {
    let s = Server::start_encrypted(&["--fault", "rst-stream=1/10"]);
    let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 200, &["--http", "1.1", "--connections", "1"]);
    let v = ended(&r);
    assert_eq!(total(v, "answered"), 200, "{:#}\n{:#}", v["totals"], v["connections"]);
    // 1 in 10 of the server's requests (the run's, its resends and the probe): about 22.
    let resent = v["events"]["resent_closed"].as_u64().unwrap_or(0);
    assert!((18..=24).contains(&resent), "each closed request sent again:\n{:#}", v["events"]);
    assert!(conn_map(v, &["closed"], "server_fin") >= 18, "{:#}", v["connections"]);
}

/// Who closed the connection and how: the server's GOAWAY, not a bare FIN.
#[test]
fn goaway_close_recorded_doh2() {
    let s = Server::start_encrypted(&["--fault", "goaway-after=50"]);
    let r = run_n(&s.url("https"), s.ca_str(), "www.example.test", 500, &["-T", "1"]);
    let v = ended(&r);
    assert!(
        conn_map(v, &["closed"], "server_goaway") >= 1,
        "connections closed by GOAWAY recorded as server_goaway:\n{:#}",
        v["connections"]
    );
    // Its error code: a graceful GOAWAY is NO_ERROR.
    assert!(
        v["events"]["server_goaway_NO_ERROR"].as_u64().unwrap_or(0) >= 1,
        "the GOAWAY's code as event server_goaway_NO_ERROR:\n{:#}",
        v["events"]
    );
}

// ---------------------------------------------------------------------------------------------
// DoT: reset
// ---------------------------------------------------------------------------------------------

/// A reset connection (`tcp-reset-after=50`) is recorded as `server_reset`; the queries it
/// left unanswered are sent again first on the next connection (event `resent_reset`), within
/// its 50, so every query is answered.
#[test]
fn tcp_reset_counted_dot() {
    let s = Server::start_encrypted(&["--fault", "tcp-reset-after=50"]);
    let r = run_n(&s.url("tls"), s.ca_str(), "www.example.test", 500, &[]);
    let v = ended(&r);
    assert!(v["events"]["resent_reset"].as_u64() > Some(0), "{:#}", v["events"]);
    assert!(conn_map(v, &["closed"], "server_reset") >= 1, "{:#}", v["connections"]);
    assert!(conn_total(v, "opened") > 2, "reconnected after the resets:\n{:#}", v["connections"]);
    assert_eq!(total(v, "answered"), 500, "{:#}", v["totals"]);
}

// ---------------------------------------------------------------------------------------------
// QUIC: quic_stream_reset, idle_timeout, quic_closed
// ---------------------------------------------------------------------------------------------

#[test]
fn quic_stream_reset_counted_doq() {
    let s = Server::start_encrypted(&["--fault", "quic-stream-reset=1/10"]);
    let r = run_n(&s.url("quic"), s.ca_str(), "www.example.test", 500, &[]);
    let v = ended(&r);
    answered_or(v, "quic_stream_reset", 40);
}

/// The server never answers (`drop` names) and its QUIC idle timeout is 300 ms, well under
/// the query timeout: the connection dies of idleness with the queries on it.
#[test]
fn idle_timeout_counted_doq_and_doh3() {
    let s = Server::start_encrypted(&["--idle-timeout", "300ms"]);
    for t in ["quic", "h3"] {
        let r =
            run_volley(&[&s.url(t), "--ca", s.ca_str(), "--name", "x.drop.test", "-n", "20", "-c", "10", "-t", "20s"]);
        let v = ended(&r);
        assert_eq!(total(v, "answered"), 0);
        assert_eq!(error_count(v, "idle_timeout"), 20, "{t}: every query ended by idle_timeout:\n{:#}", v["totals"]);
        assert!(conn_map(v, &["closed"], "idle_timeout") >= 1, "{t}:\n{:#}", v["connections"]);
    }
}

/// `volley run ARGS --progress always -q -o FILE` in the background, and the moment its load
/// is on: its first progress line (after the run's first second).
struct LoadedRun {
    child: std::process::Child,
    out: std::path::PathBuf,
    stderr: thread::JoinHandle<String>,
    _dir: tempfile::TempDir,
}

impl LoadedRun {
    /// Starts the run and waits (bounded) for its first progress line.
    fn start(args: &[&str]) -> LoadedRun {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.json");
        let mut child = Command::new(volley())
            .arg("run")
            .args(args)
            .args(["--progress", "always", "-q", "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let stderr = thread::spawn(move || {
            let mut all = Vec::new();
            let mut buf = [0u8; 1024];
            let mut told = false;
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&buf[..n]);
                if !told && String::from_utf8_lossy(&all).contains("qps") {
                    told = true;
                    let _ = tx.send(());
                }
            }
            String::from_utf8_lossy(&all).into_owned()
        });
        let started = rx.recv_timeout(STARTUP_WAIT).is_ok();
        let run = LoadedRun { child, out, stderr, _dir: dir };
        assert!(started, "no progress line within {STARTUP_WAIT:?}: {}", run.finish_err());
        run
    }

    /// Kills the run and returns its stderr.
    fn finish_err(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.join().unwrap_or_default()
    }

    /// Waits for the run to end (exit 0); its results, balanced and complete.
    fn finish(mut self) -> serde_json::Value {
        let status = wait_bounded(&mut self.child, RUN_WAIT).expect("volley run ended");
        let err = self.stderr.join().unwrap_or_default();
        assert_eq!(status.code(), Some(0), "{err}");
        let v = read_results(&self.out).unwrap_or_else(|| panic!("no results; {err}"));
        check_accounting(&v);
        assert_eq!(v["status"], "complete");
        assert_eq!(total(&v, "in_flight"), 0);
        v
    }
}

/// The server closes its QUIC connections (SIGTERM: CONNECTION_CLOSE with the application's
/// NO_ERROR) while queries wait on them: the close is recorded with its code, those queries
/// are sent again on a new connection (event `resent_quic_closed`), and with the server gone
/// they end by the reconnect failures (`connect`).
#[test]
fn quic_close_resends_doq_and_doh3() {
    for (t, code) in [("quic", "DOQ_NO_ERROR"), ("h3", "H3_NO_ERROR")] {
        let mut s = Server::start_encrypted(&[]);
        let dir = tempfile::tempdir().unwrap();
        // The first query (the probe) is answered; every second one is never answered.
        let queries = write_queries(dir.path(), "q.txt", &["www.example.test A", "x.drop.test A"]);
        let q = queries.to_str().unwrap();
        // Once the load is on, the run holds 10 unanswerable queries on its connection.
        let run =
            LoadedRun::start(&[&s.url(t), "--ca", s.ca_str(), "-n", "20", "-c", "10", "-t", "30s", "-T", "1", "-d", q]);
        let _ = s.terminate();
        let v = run.finish();
        let show = format!("{:#}\n{:#}\n{:#}", v["totals"], v["connections"], v["events"]);
        assert!(v["events"]["resent_quic_closed"].as_u64() >= Some(1), "{t}: sent again:\n{show}");
        assert_eq!(error_count(&v, "connect"), total(&v, "failed"), "{t}: then the reconnects failed:\n{show}");
        assert_eq!(conn_map(&v, &["closed"], "server_quic_close"), 1, "{t}:\n{show}");
        assert_eq!(v["events"][format!("server_quic_close_{code}")].as_u64(), Some(1), "{t}:\n{show}");
    }
}

/// A responder killed and started again (same UDP port, same `--cert` and `--key`) gets the
/// next packets of its old QUIC connections: it answers them with a stateless reset, which
/// the client believes because the reset key comes from the certificate's key. The client
/// ends that connection at once (`server_reset`) instead of waiting for its idle timeout,
/// sends the queries it held again on a new connection (`resent_stateless_reset`), and every
/// query at the fixed rate is answered.
#[test]
fn stateless_reset_after_a_restart_doq_and_doh3() {
    let cert = TestCert::new();
    let (c, k) = (cert.cert_str(), cert.key().to_str().unwrap().to_string());
    for (t, flag, kind) in [("quic", "--doq-port", "doq"), ("h3", "--doh3-port", "doh3")] {
        let mut s = Server::start_with(&["-T", "1", flag, "0", "--cert", &c, "--key", &k]);
        let port = s.listener(kind).port();
        let url = match t {
            "quic" => format!("quic://127.0.0.1:{port}"),
            _ => format!("h3://127.0.0.1:{port}/dns-query"),
        };
        let run = LoadedRun::start(&[&url, "--ca", &c, "--rate", "50", "-l", "3s", "-T", "1"]);
        s.kill();
        let p = port.to_string();
        let mut again = Server::start_with(&["-T", "1", flag, &p, "--cert", &c, "--key", &k]);
        let v = run.finish();
        let stats = again.terminate();
        let show = format!("{:#}\n{:#}\n{:#}\n{stats}", v["totals"], v["connections"], v["events"]);
        assert_eq!(conn_map(&v, &["closed"], "server_reset"), 1, "{t}: the stateless reset:\n{show}");
        let reset = v["events"]["resent_stateless_reset"].as_u64().unwrap_or(0) + error_count(&v, "stateless_reset");
        assert!(reset >= 1, "{t}: queries on the reset connection:\n{show}");
        assert!(conn_total(&v, "opened") >= 2, "{t}: a new connection:\n{show}");
        assert_eq!(total(&v, "answered"), total(&v, "issued"), "{t}: every query answered:\n{show}");
        assert!(serve_stat(&stats, "answered") >= 1, "{t}: by the new responder too:\n{show}");
    }
}
