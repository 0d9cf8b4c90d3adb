//! `volley serve` flags, seen from outside: addresses and ports, transports on and off, TTL,
//! EDNS size, idle timeout, IPv6 loopback, and a clean exit on SIGTERM.

mod common;

use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::Command;
use std::time::Duration;

use common::*;

fn ask(addr: SocketAddr, tcp: bool, name: &str, qtype: u16, edns: Option<u16>) -> Msg {
    let q = build_query(0x4242, name, qtype, edns);
    let raw = if tcp {
        tcp_exchange(addr, &q, Duration::from_secs(5))
    } else {
        udp_exchange(addr, &q, Duration::from_secs(5))
    }
    .unwrap_or_else(|e| panic!("{name} to {addr} ({}): {e}", if tcp { "tcp" } else { "udp" }));
    parse_msg(&raw).unwrap_or_else(|e| panic!("malformed response: {e}"))
}

#[test]
fn fixed_ports_and_listen_address() {
    let (u, t) = (free_port(), free_port());
    let s = Server::start_with(&["-l", "127.0.0.2", "--udp-port", &u.to_string(), "--tcp-port", &t.to_string()]);
    assert_eq!(s.udp_addr(), SocketAddr::from(([127, 0, 0, 2], u)));
    assert_eq!(s.tcp_addr(), SocketAddr::from(([127, 0, 0, 2], t)));
    assert_eq!(ask(s.udp_addr(), false, "www.example.test", 1, None).answers[0].rdata, [192, 0, 2, 1]);
    assert_eq!(ask(s.tcp_addr(), true, "www.example.test", 1, None).answers[0].rdata, [192, 0, 2, 1]);
}

#[test]
fn transports_turned_off() {
    let s = Server::start_with(&["--no-tcp"]);
    assert!(ask(s.udp_addr(), false, "www.example.test", 1, None).qr());
    // The server holds no TCP listener at all (another process may listen on any port, so
    // ask the kernel whose listeners there are rather than trying to connect).
    let ss = run_cmd(Command::new(require("ss")).args(["-Htlnp"]), Duration::from_secs(10));
    let mine = format!("pid={},", s.pid());
    assert!(!ss.stdout.lines().any(|l| l.contains(&mine)), "--no-tcp: a TCP listener of the server:\n{}", ss.stdout);

    let s = Server::start_with(&["--no-udp"]);
    assert!(ask(s.tcp_addr(), true, "www.example.test", 1, None).qr());
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(s.tcp_addr()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sock.send(&build_query(1, "www.example.test", 1, None)).unwrap();
    let mut buf = [0u8; 512];
    assert!(sock.recv(&mut buf).is_err(), "--no-udp: no UDP answer");
}

#[test]
fn ttl_flag() {
    let s = Server::start_with(&["--ttl", "60"]);
    for tcp in [false, true] {
        let addr = if tcp { s.tcp_addr() } else { s.udp_addr() };
        for qtype in [1u16, 28, 16] {
            let m = ask(addr, tcp, "www.example.test", qtype, None);
            assert_eq!(m.answers.len(), 1);
            assert_eq!(m.answers[0].ttl, 60, "qtype {qtype}");
        }
    }
    let s = Server::start();
    assert_eq!(ask(s.udp_addr(), false, "www.example.test", 1, None).answers[0].ttl, 300, "default TTL 300");
}

#[test]
fn edns_size_flag() {
    let s = Server::start_with(&["--edns-size", "4096"]);
    let m = ask(s.udp_addr(), false, "www.example.test", 1, Some(1232));
    assert_eq!(m.opt().expect("OPT echoed").class, 4096);
    // 3000 octets fit a 4096-octet buffer: no truncation over UDP.
    let m = ask(s.udp_addr(), false, "size-3000.test", 16, Some(4096));
    assert!(!m.tc(), "3000 octets fit the query's 4096-octet buffer");
    assert_eq!(m.answers[0].rdata.len(), 3000);
    // Without EDNS a UDP answer is limited to 512 octets.
    let m = ask(s.udp_addr(), false, "size-600.test", 16, None);
    assert!(m.tc(), "over 512 octets without EDNS: TC=1");
    assert!(m.opt().is_none());
}

#[test]
fn idle_tcp_connection_closed() {
    let s = Server::start_with(&["--idle-timeout", "300ms"]);
    let mut c = TcpStream::connect(s.tcp_addr()).unwrap();
    // Generous bound: the point is that the server closes, not how fast.
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut buf = [0u8; 16];
    match c.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("unexpected {n} octets on an idle connection"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the server did not close an idle connection within 15 s: {e}"),
    }
}

#[test]
fn ipv6_loopback() {
    UdpSocket::bind("[::1]:0").expect("IPv6 loopback (::1) unavailable on this machine: the suite needs it");
    let s = Server::start_with(&["-l", "::1"]);
    assert!(s.udp_addr().is_ipv6() && s.tcp_addr().is_ipv6(), "listening on ::1");
    assert_eq!(ask(s.udp_addr(), false, "www.example.test", 28, None).answers[0].rdata.len(), 16);
    for t in ["udp", "tcp"] {
        let url = s.url(t);
        assert!(url.contains("[::1]:"), "{url}");
        let r = run_volley(&[&url, "--name", "www.example.test", "-n", "200", "-c", "5"]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(total(v, "answered"), 200, "{t} over ::1:\n{:#}", v["totals"]);
    }
}

#[test]
fn sigterm_and_sigint_stop_the_server() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut s = Server::start();
        s.signal(sig);
        let status = s.wait(Duration::from_secs(10)).unwrap_or_else(|| panic!("still running 10 s after signal {sig}"));
        assert!(status.code().is_some(), "signal {sig}: exits by itself, not killed by the signal: {status}");
    }
}

/// The help's client examples are ones that work here: Debian's kdig 3.2.6 has no QUIC (its
/// `+quic` falls back to TCP, docs/serve.md), so DoQ is shown with q.
#[test]
fn help_examples_use_clients_that_speak_the_transport() {
    let out = run_cmd(Command::new(volley()).args(["serve", "--help"]), Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let kdig_quic = out.stdout.lines().any(|l| l.trim_start().starts_with("kdig") && l.contains("+quic"));
    assert!(!kdig_quic, "{}", out.stdout);
    assert!(out.stdout.contains("@quic://localhost:8853"), "a DoQ example:\n{}", out.stdout);
}

/// The receive buffer the kernel gave the server's UDP socket (`ss -m`: `rb`, twice what was
/// asked, as the kernel counts its bookkeeping too).
fn udp_rcvbuf(s: &Server) -> u64 {
    let port = s.udp_addr().port().to_string();
    let ss = run_cmd(
        Command::new(require("ss")).args(["-Huanm", "sport", "=", &format!(":{port}")]),
        Duration::from_secs(10),
    );
    let rb = ss.stdout.split(|c: char| c == ',' || c == '(' || c.is_whitespace()).find_map(|f| f.strip_prefix("rb"));
    rb.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no rb in ss -m for :{port}:\n{}", ss.stdout))
}

#[test]
fn udp_recv_buffer_flag() {
    let small = Server::start_with(&["-T", "1", "--udp-recv-buffer", "65536"]);
    assert_eq!(udp_rcvbuf(&small), 2 * 65536, "--udp-recv-buffer 65536");
    assert!(ask(small.udp_addr(), false, "www.example.test", 1, None).qr());
    // The default is deeper (4 MiB asked; the kernel caps it at net.core.rmem_max, 208 KiB
    // at the least on Linux).
    let default = Server::start_with(&["-T", "1"]);
    assert!(udp_rcvbuf(&default) > 2 * 65536, "the default buffer: {}", udp_rcvbuf(&default));
    for bad in ["100", "2000000000", "4m"] {
        let out = run_cmd(Command::new(volley()).args(["serve", "--udp-recv-buffer", bad]), Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(2), "--udp-recv-buffer {bad}: {}", out.stderr);
        assert!(out.stderr.contains("--udp-recv-buffer"), "--udp-recv-buffer {bad}: {}", out.stderr);
    }
}
