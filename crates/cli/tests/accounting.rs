//! Every query is accounted for exactly once, whatever the target does: drops, delays, dies,
//! resets or closes connections. sent == answered + timed_out + failed + in_flight.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn drop_one_in_ten_times_out_exactly_one_in_ten() {
    for t in ["udp", "tcp"] {
        // A fresh server per transport: the drop rule counts queries globally.
        let s = Server::start_with(&["--drop", "1/10"]);
        let url = s.url(t);
        let r = run_volley(&[&url, "--name", "www.example.test", "-n", "1000", "-c", "20", "-t", "500ms"]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(v["status"], "complete");
        assert_eq!(total(v, "issued"), 1000, "{t}:\n{:#}", v["totals"]);
        assert_eq!(total(v, "timed_out"), 100, "{t}: 1 in 10 dropped:\n{:#}", v["totals"]);
        assert_eq!(total(v, "answered"), 900, "{t}:\n{:#}", v["totals"]);
        assert_eq!(total(v, "failed"), 0, "{t}:\n{:#}", v["totals"]);
        assert_eq!(total(v, "in_flight"), 0, "{t}:\n{:#}", v["totals"]);
    }
}

/// `--trace-queries N`: the run's first N queries one by one, in order of issue, each with the
/// fate it has in the totals: one query at a time against a server dropping 1 in 10 (the 10th,
/// 20th, ... query it sees, `volley run`'s probe query counted), so every 10th query timed out;
/// queries past N are in the totals only.
#[test]
fn trace_of_the_first_queries_has_their_fates() {
    let s = Server::start_with(&["--drop", "1/10"]);
    let url = s.udp_url();
    let r = run_volley(&[
        &url,
        "--name",
        "www.example.test",
        "-n",
        "60",
        "-c",
        "1",
        "-t",
        "300ms",
        "--trace-queries",
        "35",
    ]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(total(v, "timed_out"), 6, "{:#}", v["totals"]);
    let t = &v["query_trace"];
    assert_eq!(t["limit"], 35);
    let qs = t["queries"].as_array().unwrap();
    assert_eq!(qs.len(), 35, "the first 35 queries, no more");
    let mut last_issue = 0;
    for (i, q) in qs.iter().enumerate() {
        assert_eq!(q["index"], i as u64, "{q}");
        let issued = q["issued_ns"].as_u64().unwrap();
        assert!(issued >= last_issue, "in order of issue: {q}");
        last_issue = issued;
        if q["fate"] == "timed_out" {
            assert!(q["latency_ns"].is_null(), "{q}");
        } else {
            assert_eq!(q["fate"], "answered", "query {i}: {q}");
            assert_eq!(q["detail"], "NOERROR", "{q}");
            let l = q["latency_ns"].as_u64().unwrap();
            assert!(l > 0 && l <= v["latency"]["max_ns"].as_u64().unwrap(), "{q}");
        }
    }
    let dropped: Vec<usize> = (0..qs.len()).filter(|&i| qs[i]["fate"] == "timed_out").collect();
    assert!(dropped.len() >= 3 && dropped[0] < 10, "{dropped:?}");
    assert!(dropped.windows(2).all(|w| w[1] - w[0] == 10), "every 10th query: {dropped:?}");
    // Without the flag: no trace.
    let r = run_volley(&[&url, "--name", "www.example.test", "-n", "5", "-t", "300ms"]);
    assert!(r.ok().get("query_trace").is_none());
    // At most 10,000: bad input, exit 2.
    let r = run_volley(&[&url, "-n", "5", "--trace-queries", "10001"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--trace-queries"), "{}", r.stderr);
}

#[test]
fn drop_label_never_answered() {
    let s = Server::start();
    let r = run_volley(&[&s.udp_url(), "--name", "x.drop.test", "-n", "50", "-c", "10", "-t", "300ms"]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(total(v, "timed_out"), 50, "{:#}", v["totals"]);
    assert_eq!(total(v, "answered"), 0);
    assert_eq!(v["latency"]["count"].as_u64(), Some(0));
}

#[test]
fn delay_one_in_25_past_the_timeout() {
    let s = Server::start_with(&["--delay", "1s:1/25"]);
    let r = run_volley(&[&s.udp_url(), "--name", "www.example.test", "-n", "500", "-c", "10", "-t", "500ms"]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(total(v, "issued"), 500);
    assert_eq!(total(v, "timed_out"), 20, "1 in 25 answered after 1 s, past the 500 ms timeout:\n{:#}", v["totals"]);
    assert_eq!(total(v, "answered"), 480, "{:#}", v["totals"]);
    // An answer that comes after its query timed out is not counted as answered.
    assert!(unexpected(v, "late") <= 20, "{:#}", v["totals"]);
}

#[test]
fn responder_killed_mid_run() {
    for t in ["udp", "tcp"] {
        let mut s = Server::start();
        let url = s.url(t);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.json");
        let mut child = Command::new(volley())
            .args(["run", &url, "--name", "www.example.test", "-c", "10", "-l", "4s", "-t", "500ms"])
            .args(["--progress", "never", "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start volley run");
        thread::sleep(Duration::from_secs(1));
        s.kill();
        let status = wait_bounded(&mut child, RUN_WAIT).expect("volley run finishes after its target died");
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert_eq!(status.code(), Some(0), "{t}: a run whose target dies is still a finished run; stderr:\n{stderr}");
        let v = read_results(&out).expect("results written");
        check_accounting(&v);
        assert_eq!(v["status"], "complete");
        assert!(total(&v, "answered") > 0, "{t}: answers before the kill:\n{:#}", v["totals"]);
        assert!(
            total(&v, "timed_out") + total(&v, "failed") > 0,
            "{t}: queries after the kill time out or fail:\n{:#}",
            v["totals"]
        );
        if total(&v, "failed") > 0 {
            assert!(map_sum(&v["totals"]["errors"]) > 0, "{t}: failures have a kind:\n{:#}", v["totals"]);
        }
    }
}

/// How a misbehaving TCP server ends each connection after reading one query.
#[derive(Clone, Copy, PartialEq)]
enum Close {
    /// SO_LINGER 0: the close sends RST.
    Reset,
    /// An ordinary close: FIN.
    Fin,
}

/// A TCP server on 127.0.0.1 that accepts, reads one DNS query (length-prefixed) and closes
/// the connection without answering. Stops when dropped; bounded by a deadline regardless.
struct BadTcpServer {
    port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    handle: Option<thread::JoinHandle<()>>,
}

impl BadTcpServer {
    fn start(close: Close) -> BadTcpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let (stop2, accepted2) = (stop.clone(), accepted.clone());
        let handle = thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        accepted2.fetch_add(1, Ordering::Relaxed);
                        conn.set_nonblocking(false).unwrap();
                        conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                        let mut len = [0u8; 2];
                        if conn.read_exact(&mut len).is_ok() {
                            let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                            let _ = conn.read_exact(&mut q);
                        }
                        if close == Close::Reset {
                            let linger = libc::linger { l_onoff: 1, l_linger: 0 };
                            let rc = unsafe {
                                libc::setsockopt(
                                    conn.as_raw_fd(),
                                    libc::SOL_SOCKET,
                                    libc::SO_LINGER,
                                    &linger as *const libc::linger as *const libc::c_void,
                                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                                )
                            };
                            assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
                        }
                        drop(conn);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(2)),
                    Err(e) => panic!("accept: {e}"),
                }
            }
        });
        BadTcpServer { port, stop, accepted, handle: Some(handle) }
    }
}

impl Drop for BadTcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[test]
fn tcp_connections_reset_by_the_server() {
    let srv = BadTcpServer::start(Close::Reset);
    let url = format!("tcp://127.0.0.1:{}", srv.port);
    let r = run_volley(&[&url, "--name", "www.example.test", "-n", "200", "-c", "5", "-t", "1s"]);
    let v = r.ok();
    check_accounting(v);
    assert!(srv.accepted.load(Ordering::Relaxed) > 0);
    assert_eq!(total(v, "answered"), 0, "{:#}", v["totals"]);
    assert!(total(v, "failed") > 0, "resets fail queries:\n{:#}", v["totals"]);
    assert!(
        error_count(v, "reset") + error_count(v, "closed") > 0,
        "errors.reset or errors.closed expected:\n{:#}",
        v["totals"]
    );
}

#[test]
fn tcp_connections_closed_by_the_server() {
    let srv = BadTcpServer::start(Close::Fin);
    let url = format!("tcp://127.0.0.1:{}", srv.port);
    let r = run_volley(&[&url, "--name", "www.example.test", "-n", "200", "-c", "5", "-t", "1s"]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(total(v, "answered"), 0, "{:#}", v["totals"]);
    assert!(total(v, "failed") > 0, "closed connections fail queries:\n{:#}", v["totals"]);
    assert!(
        error_count(v, "closed") + error_count(v, "reset") > 0,
        "errors.closed (or reset, when the client wrote after the FIN) expected:\n{:#}",
        v["totals"]
    );
}
