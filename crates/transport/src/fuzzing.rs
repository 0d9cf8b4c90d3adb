//! Entry points of the fuzz targets (`fuzz/`) and of the corpus replay test: each takes
//! arbitrary bytes, as they would come from a server, and must never panic. Not an API.

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use volley_metrics::{Close, ErrorKind, Handshake, Unexpected, WireStats};

use crate::https::h1::H1Framing;
use crate::stream::Framing;
use crate::{DohMethod, Exchange, IdTable, Scheme, Target, Token};

/// An engine that reads answers as the real one does (header and question key) and checks
/// that no query gets two fates.
#[derive(Default)]
struct Sink {
    /// Bit per token (1..=64): it has had its fate.
    ended: Cell<u64>,
}

impl Sink {
    fn fate(&self, t: Token) {
        assert!((1..=64).contains(&t), "token {t} was never handed out");
        let bit = 1u64 << (t - 1);
        assert!(self.ended.get() & bit == 0, "token {t} got a second fate");
        self.ended.set(self.ended.get() | bit);
    }
}

/// A minimal query (header only, QDCOUNT 0) with ID `id`.
fn query(id: u16, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
}

impl Exchange for Sink {
    fn now(&self) -> u64 {
        0
    }
    fn encode(&self, _token: Token, id: u16, out: &mut Vec<u8>) -> bool {
        query(id, out);
        true
    }
    fn sent(&self, _token: Token, _bytes: usize, _now: u64) {}
    fn response(&self, token: Token, msg: &[u8], _now: u64) {
        self.fate(token);
        if let Ok(h) = volley_wire::Header::parse(msg) {
            let _ = (h.is_response(), h.rcode(), h.truncated());
        }
        let _ = volley_wire::question_key(msg);
    }
    fn failed(&self, token: Token, _kind: ErrorKind, _now: u64) {
        self.fate(token);
    }
    fn unexpected(&self, _kind: Unexpected, _bytes: usize, _now: u64) {}
    fn is_live(&self, token: Token) -> bool {
        (1..=64).contains(&token) && self.ended.get() & (1 << (token - 1)) == 0
    }
    fn conn_opened(&self, _h: &Handshake, _now: u64) {}
    fn conn_failed(&self, _kind: ErrorKind, _now: u64) {}
    fn conn_closed(&self, _how: Close, _now: u64) {}
    fn wire(&self, _w: &WireStats) {}
    fn event(&self, _what: &str) {}
}

/// Feeds `data` to `f` as a connection's reads would: in pieces whose sizes come from the
/// first byte, each appended to the read buffer and parsed, the bytes used dropped. Stops at
/// the error that would end the connection, then fails what is outstanding.
fn read_stream<F: Framing>(f: &mut F, x: &Sink, data: &[u8]) {
    let (step, data) = match data.split_first() {
        Some((&s, rest)) => (usize::from(s % 64) + 1, rest),
        None => return,
    };
    let mut rbuf = Vec::new();
    for (i, piece) in data.chunks(step).enumerate() {
        rbuf.extend_from_slice(piece);
        match f.split(&rbuf, x, i as u64) {
            Ok(used) => {
                assert!(used <= rbuf.len(), "used {used} of {} bytes", rbuf.len());
                rbuf.drain(..used);
            }
            Err(_) => {
                for t in f.drain() {
                    x.failed(t, ErrorKind::Closed, 0);
                }
                return;
            }
        }
        let _ = f.stalled(x);
        let _ = (f.answered_all(), f.any_live(x));
    }
}

/// RFC 7766 streams (TCP, DoT): 2-byte length prefixes, answers matched by DNS ID. 32
/// queries are outstanding (IDs from the table), then the bytes are read.
pub fn length_prefixed(data: &[u8]) {
    let x = Sink::default();
    let mut ids = IdTable::default();
    let (mut msg, mut out) = (Vec::new(), Vec::new());
    for t in 1..=32 {
        assert!(ids.frame(t, &x, &mut msg, &mut out));
    }
    read_stream(&mut ids, &x, data);
    // The framing writes what it is given, prefixed.
    let mut framed = Vec::new();
    crate::stream::frame(data, &mut framed);
    let mut seen = 0;
    let used = crate::stream::split_frames(&framed, |m| seen += m.len());
    if data.len() <= usize::from(u16::MAX) {
        assert_eq!((used, seen), (framed.len(), data.len()));
    }
}

/// HTTP/1.1 responses to pipelined DoH requests (GET or POST, by the first byte's low bit,
/// the pipelining depth from its next bits), read in order.
pub fn http1(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let method = if first & 1 == 0 { DohMethod::Get } else { DohMethod::Post };
    let depth = u32::from(first >> 1 & 15) + 1;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 443);
    let target = Target {
        scheme: Scheme::Https,
        host: "127.0.0.1".into(),
        port: 443,
        addr,
        addrs: vec![addr],
        path: "/dns-query".into(),
        url: "https://127.0.0.1/dns-query".into(),
    };
    let x = Sink::default();
    let mut f = H1Framing::new(&target, method, depth, Duration::from_secs(1));
    let (mut msg, mut out) = (Vec::new(), Vec::new());
    let mut t = 1;
    while f.has_room() {
        assert!(f.frame(t, &x, &mut msg, &mut out));
        t += 1;
    }
    read_stream(&mut f, &x, rest);
}

/// A target URL as given on the command line. Names are not resolved (no lookups while
/// fuzzing): the URL's syntax is checked, and an address literal parses whole.
pub fn target(data: &[u8]) {
    let Ok(url) = std::str::from_utf8(data) else { return };
    match crate::target::parse_url(url) {
        Ok(parts) if parts.host.parse::<IpAddr>().is_ok() => {
            let t: Target = url.parse().expect("a URL whose syntax is good and whose host is an address parses");
            assert_eq!((t.scheme, t.port, &t.path), (parts.scheme, parts.port, &parts.path));
            let _ = t.authority();
        }
        _ => {}
    }
}

/// A frame on an AF_XDP socket's RX ring (`--xdp`), read as an answer from 192.0.2.1:53 and
/// from [2001:db8::1]:53: whatever the bytes, the message read lies inside the frame.
pub fn xdp_frame(data: &[u8]) {
    for target in ["192.0.2.1:53", "[2001:db8::1]:53"] {
        let target: SocketAddr = target.parse().expect("an address");
        if let Some((_, msg)) = crate::udp::xdp::frame::parse(data, target) {
            assert!(msg.len() <= data.len());
        }
    }
}
