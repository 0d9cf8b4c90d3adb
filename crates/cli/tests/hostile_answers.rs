//! Network input never panics the generator, and every hostile answer lands in exactly one
//! place: a server over UDP and over TCP that answers each query in its own bad way (a runt,
//! a cut question, a compression loop, another question, another ID, the answer twice, a
//! FORMERR with no question, the query reflected). The strategy is named by the query's first
//! label (`s0`..`s8`), so the expected counts are exact.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// The messages sent back for `q`, by the strategy its first label names (`sN.test`).
fn replies(q: &[u8]) -> Vec<Vec<u8>> {
    if q.len() < 17 || q[12] != 2 || q[13] != b's' {
        return Vec::new();
    }
    let mut ok = q.to_vec();
    ok[2] |= 0x80; // QR
    ok[3] = 0x80; // RA, NOERROR
    match q[14] {
        b'0' => vec![ok],
        // A runt: not even a header.
        b'1' => vec![vec![0xab; 7]],
        // The header promises a question that is cut short.
        b'2' => vec![ok[..15].to_vec()],
        // The question's name is a compression pointer to itself.
        b'3' => {
            let mut m = ok[..12].to_vec();
            m[10] = 0; // no OPT record after it
            m[11] = 0;
            m.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
            vec![m]
        }
        // Another question under this query's ID.
        b'4' => {
            ok[13] = b'x';
            vec![ok]
        }
        // The right answer under another ID.
        b'5' => {
            ok[0] ^= 0x55;
            ok[1] ^= 0x55;
            vec![ok]
        }
        // The answer twice.
        b'6' => vec![ok.clone(), ok],
        // FORMERR without a question (what servers send for a message they cannot parse).
        b'7' => {
            let mut m = ok[..12].to_vec();
            m[3] = 0x81;
            m[4..12].fill(0);
            vec![m]
        }
        // The query itself, reflected (QR clear): not a response.
        b'8' => vec![q.to_vec()],
        _ => Vec::new(),
    }
}

/// A UDP and a TCP server on 127.0.0.1 that answer with [`replies`].
struct Hostile {
    udp: u16,
    tcp: u16,
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Hostile {
    fn start() -> Hostile {
        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(120);
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let (udp, tcp) = (u.local_addr().unwrap().port(), l.local_addr().unwrap().port());
        let s1 = stop.clone();
        let ut = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s1.load(Ordering::Relaxed) && Instant::now() < deadline {
                if let Ok((n, from)) = u.recv_from(&mut buf) {
                    for m in replies(&buf[..n]) {
                        let _ = u.send_to(&m, from);
                    }
                }
            }
        });
        let s2 = stop.clone();
        let tt = thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) && Instant::now() < deadline {
                match l.accept() {
                    Ok((c, _)) => {
                        let s = s2.clone();
                        thread::spawn(move || tcp_connection(c, s, deadline));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Hostile { udp, tcp, stop, threads: vec![ut, tt] }
    }
}

fn tcp_connection(mut c: TcpStream, stop: Arc<AtomicBool>, deadline: Instant) {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        match c.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(_) => return,
        }
        while pending.len() >= 2 {
            let len = u16::from_be_bytes([pending[0], pending[1]]) as usize;
            if pending.len() < 2 + len {
                break;
            }
            let q: Vec<u8> = pending.drain(..2 + len).skip(2).collect();
            for m in replies(&q) {
                let mut framed = (m.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&m);
                if c.write_all(&framed).is_err() {
                    return;
                }
            }
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn hostile_answers_each_have_one_place() {
    let h = Hostile::start();
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = (0..9).map(|i| format!("s{i}.test A")).collect();
    let lines: Vec<&str> = lines.iter().map(|s| s.as_str()).collect();
    let queries = write_queries(dir.path(), "q.txt", &lines);
    for (t, port) in [("udp", h.udp), ("tcp", h.tcp)] {
        let url = format!("{t}://127.0.0.1:{port}");
        // One query in flight at a time, in file order: each strategy 5 times. The timeout is
        // long enough for a loaded machine's answers, short enough for 15 of them to expire.
        let r = run_volley(&[&url, "-d", queries.to_str().unwrap(), "-n", "45", "-c", "1", "-t", "300ms"]);
        assert!(!r.stderr.contains("panicked"), "{t}: {}", r.stderr);
        let v = r.ok();
        check_accounting(v);
        let tot = &v["totals"];
        assert_eq!(v["status"], "complete", "{t}");
        assert_eq!(total(v, "issued"), 45, "{t}: {tot:#}");
        // s0, s6 (first copy) NOERROR; s7 FORMERR without a question is still an answer.
        assert_eq!(total(v, "answered"), 15, "{t}: {tot:#}");
        assert_eq!(rcode(v, "NOERROR"), 10, "{t}: {tot:#}");
        assert_eq!(rcode(v, "FORMERR"), 5, "{t}: {tot:#}");
        // s1 (a runt, not taken for any query), s5 (another ID) and s8 (not a response): no
        // answer to the query.
        assert_eq!(total(v, "timed_out"), 15, "{t}: {tot:#}");
        // s2 and s3 cannot be parsed past the header; s4 asks another question.
        assert_eq!(error_count(v, "malformed"), 10, "{t}: {tot:#}");
        assert_eq!(error_count(v, "mismatch"), 5, "{t}: {tot:#}");
        assert_eq!(total(v, "failed"), 15, "{t}: {tot:#}");
        // Counted apart, never as answers: the runts and the reflected queries, and the IDs of
        // no query in flight (s5, and s6's second copy).
        assert_eq!(unexpected(v, "malformed"), 10, "{t}: {tot:#}");
        assert_eq!(unexpected(v, "unknown_id"), 10, "{t}: {tot:#}");
        // 10 of 45 is more than stray: the run says so.
        let warned = v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("10 responses carried the ID of no query in flight"));
        assert!(warned, "{t}: {}", v["warnings"]);
    }
}

#[test]
fn a_reflecting_port_is_never_answered() {
    let h = Hostile::start();
    let dir = tempfile::tempdir().unwrap();
    let queries = write_queries(dir.path(), "q.txt", &["s8.test A"]);
    for (t, port) in [("udp", h.udp), ("tcp", h.tcp)] {
        let url = format!("{t}://127.0.0.1:{port}");
        let r = run_volley(&[&url, "-d", queries.to_str().unwrap(), "-n", "40", "-c", "20", "-t", "300ms"]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(total(v, "answered"), 0, "{t}: {:#}", v["totals"]);
        assert_eq!(total(v, "timed_out"), 40, "{t}: {:#}", v["totals"]);
        assert_eq!(unexpected(v, "malformed"), 40, "{t}: {:#}", v["totals"]);
        let warned = v["warnings"].as_array().unwrap().iter().any(|w| {
            w.as_str()
                .unwrap()
                .contains("40 messages came back that are not DNS responses (no header, or the QR bit clear)")
        });
        assert!(warned, "{t}: {}", v["warnings"]);
        assert!(r.stdout.contains("not DNS responses"), "{t}: the summary shows it: {}", r.stdout);
    }
}

#[test]
fn query_prints_or_refuses_each_hostile_answer() {
    let h = Hostile::start();
    for (t, port) in [("udp", h.udp), ("tcp", h.tcp)] {
        for i in 0..9 {
            let url = format!("{t}://127.0.0.1:{port}");
            let name = format!("s{i}.test");
            let out = run_cmd(
                std::process::Command::new(volley()).args(["query", &url, &name, "-t", "300ms"]),
                Duration::from_secs(30),
            );
            let code = out.status.code();
            assert!(!out.stderr.contains("panicked"), "{t} {name}: {}", out.stderr);
            // 0: a response (printed); 1: none in time (an answer under another ID, a runt, or
            // one that cannot be parsed is not the response).
            assert!(matches!(code, Some(0) | Some(1)), "{t} {name}: exit {code:?}\n{}", out.stderr);
            match i {
                0 | 6 => assert!(out.stdout.contains("NOERROR"), "{t} {name}: {}", out.stdout),
                7 => assert!(out.stdout.contains("FORMERR"), "{t} {name}: {}", out.stdout),
                // Printed as dig does, under a warning.
                4 => assert!(out.stdout.contains("WARNING: question section mismatch"), "{t} {name}: {}", out.stdout),
                8 => assert!(out.stdout.contains("WARNING: the QR bit is not set"), "{t} {name}: {}", out.stdout),
                2 | 3 => assert!(out.stdout.starts_with(";; malformed response"), "{t} {name}: {}", out.stdout),
                1 | 5 => assert_eq!(code, Some(1), "{t} {name}: {}{}", out.stdout, out.stderr),
                _ => {}
            }
        }
    }
}
