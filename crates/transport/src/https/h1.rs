//! DoH over HTTP/1.1 with pipelining (RFC 9112 section 9.3): up to `depth` requests written
//! back to back on one keep-alive connection, their responses read in the order of the
//! requests. hyper's client sends one request at a time, so this framing writes requests and
//! parses responses itself (httparse, the parser hyper uses), and runs on the same stream loop
//! as TCP and DoT ([`crate::stream::serve`]).
//!
//! When the request at the head of the line has ended in the engine (timed out), every
//! response behind it waits for it: the connection is given up ([`Framing::stalled`]), and the
//! requests still on it end by their own timeouts.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use volley_metrics::{Close, ErrorKind};

use super::{base64url, ended, open, setup, Metered, DNS_MESSAGE, MAX_MESSAGE};
use crate::stream::{self, Buffers, Framing, Served};
use crate::{tls, DohMethod, Exchange, Lane, LaneOptions, Target, Token};

/// Most header fields read in one response.
const MAX_HEADERS: usize = 48;
/// Largest response head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// HTTP/1.1 requests of one lane, and the queries they carry in order.
pub(crate) struct H1Framing {
    method: DohMethod,
    /// `GET ` + path + `?dns=` (or `&dns=`), or `POST ` + path + ` HTTP/1.1`.
    start: String,
    /// Header lines after the request line, ending before the blank line (POST: before
    /// Content-Length).
    headers: String,
    depth: usize,
    /// Queries whose requests are written, oldest first.
    fifo: VecDeque<Token>,
    /// A chunked body being put together.
    body: Vec<u8>,
    /// The head of the line timed out: the rest end by their own timeouts, not as failures.
    abandoned: bool,
    /// The server said `Connection: close`: no more requests on this connection; the queries
    /// still waiting in the lane go on the next one, and so do the requests written after the
    /// one it closed with (sent again, see [`stream::unanswered`]).
    closing: bool,
    watch: Duration,
}

impl H1Framing {
    pub(crate) fn new(target: &Target, method: DohMethod, depth: u32, watch: Duration) -> H1Framing {
        let sep = if target.path.contains('?') { '&' } else { '?' };
        let start = match method {
            DohMethod::Get => format!("GET {}{sep}dns=", target.path),
            DohMethod::Post => format!("POST {} HTTP/1.1\r\n", target.path),
        };
        let mut headers = format!("Host: {}\r\nAccept: {DNS_MESSAGE}\r\n", target.authority());
        if method == DohMethod::Post {
            headers.push_str(&format!("Content-Type: {DNS_MESSAGE}\r\n"));
        }
        H1Framing {
            method,
            start,
            headers,
            depth: depth.max(1) as usize,
            fifo: VecDeque::new(),
            body: Vec::new(),
            abandoned: false,
            closing: false,
            watch,
        }
    }

    /// Writes the request for DNS message `msg` into `out`.
    fn write_request(&self, msg: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(self.start.as_bytes());
        match self.method {
            DohMethod::Get => {
                let mut q = String::with_capacity(msg.len().div_ceil(3) * 4);
                base64url(msg, &mut q);
                out.extend_from_slice(q.as_bytes());
                out.extend_from_slice(b" HTTP/1.1\r\n");
                out.extend_from_slice(self.headers.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            DohMethod::Post => {
                out.extend_from_slice(self.headers.as_bytes());
                out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", msg.len()).as_bytes());
                out.extend_from_slice(msg);
            }
        }
    }
}

/// One parsed response: its length on the wire, and the DNS message or why there is none.
struct Parsed {
    used: usize,
    /// The status code.
    status: u16,
    fate: Result<std::ops::Range<usize>, ErrorKind>,
    /// 1xx: an interim response, answering no request.
    interim: bool,
    /// The body was chunked (its message is in the framing's `body`).
    chunked: bool,
    /// `Connection: close`: the server answers no request after this one.
    close: bool,
}

/// Parses the response at the start of `buf`; None: incomplete.
fn parse(buf: &[u8], body: &mut Vec<u8>) -> Result<Option<Parsed>, ErrorKind> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Err(ErrorKind::Malformed),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(ErrorKind::Malformed),
    };
    let code = resp.code.unwrap_or(0);
    let (mut length, mut chunked, mut dns, mut close) = (None, false, false, false);
    for h in resp.headers.iter() {
        let v = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            length = Some(v.parse::<usize>().map_err(|_| ErrorKind::Malformed)?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.to_ascii_lowercase().split(',').any(|c| c.trim() == "chunked");
        } else if h.name.eq_ignore_ascii_case("content-type") {
            dns = v.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case(DNS_MESSAGE));
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |= v.split(',').any(|o| o.trim().eq_ignore_ascii_case("close"));
        }
    }
    if (100..200).contains(&code) {
        return Ok(Some(Parsed {
            used: head,
            status: code,
            fate: Err(ErrorKind::HttpStatus),
            interim: true,
            chunked: false,
            close,
        }));
    }
    let fate = |range| match (code, dns) {
        (200, true) => Ok(range),
        (200, false) => Err(ErrorKind::ContentType),
        _ => Err(ErrorKind::HttpStatus),
    };
    if chunked {
        let Some(used) = dechunk(&buf[head..], body)? else { return Ok(None) };
        return Ok(Some(Parsed {
            used: head + used,
            status: code,
            fate: fate(0..body.len()),
            interim: false,
            chunked: true,
            close,
        }));
    }
    // 204 and 304 have no body; otherwise a pipelined response needs its length.
    let len = match (code, length) {
        (204 | 304, _) => 0,
        (_, Some(l)) => l,
        (_, None) => return Err(ErrorKind::Malformed),
    };
    if len > MAX_MESSAGE && code == 200 {
        return Err(ErrorKind::Malformed);
    }
    if buf.len() - head < len {
        return Ok(None);
    }
    Ok(Some(Parsed {
        used: head + len,
        status: code,
        fate: fate(head..head + len),
        interim: false,
        chunked: false,
        close,
    }))
}

/// Decodes a chunked body at the start of `buf` into `out`; the bytes used, None: incomplete.
fn dechunk(buf: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, ErrorKind> {
    out.clear();
    let mut at = 0;
    loop {
        let Ok(httparse::Status::Complete((n, size))) = httparse::parse_chunk_size(&buf[at..]) else {
            return match httparse::parse_chunk_size(&buf[at..]) {
                Ok(httparse::Status::Partial) => Ok(None),
                _ => Err(ErrorKind::Malformed),
            };
        };
        at += n;
        let size = usize::try_from(size).map_err(|_| ErrorKind::Malformed)?;
        if size > MAX_MESSAGE.saturating_sub(out.len()) {
            return Err(ErrorKind::Malformed);
        }
        if size == 0 {
            // Trailer fields (none expected), then the blank line.
            loop {
                let Some(end) = buf[at..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
                at += end + 2;
                if end == 0 {
                    return Ok(Some(at));
                }
            }
        }
        if buf.len() - at < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&buf[at..at + size]);
        if &buf[at + size..at + size + 2] != b"\r\n" {
            return Err(ErrorKind::Malformed);
        }
        at += size + 2;
    }
}

impl Framing for H1Framing {
    fn has_room(&self) -> bool {
        self.fifo.len() < self.depth && !self.abandoned && !self.closing
    }

    fn frame<X: Exchange + ?Sized>(&mut self, t: Token, x: &X, msg: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
        if !x.encode(t, 0, msg) {
            return false;
        }
        self.write_request(msg, out);
        self.fifo.push_back(t);
        true
    }

    fn split<X: Exchange + ?Sized>(&mut self, buf: &[u8], x: &X, now: u64) -> Result<usize, ErrorKind> {
        let mut at = 0;
        while at < buf.len() {
            let Some(p) = parse(&buf[at..], &mut self.body)? else { break };
            at += p.used;
            if p.interim {
                continue;
            }
            // A response no request waits for: the stream is out of step.
            let t = self.fifo.pop_front().ok_or(ErrorKind::Malformed)?;
            self.closing |= p.close;
            match p.fate {
                Ok(r) if p.chunked => x.response(t, &self.body[r], now),
                Ok(r) => x.response(t, &buf[at - p.used..][r], now),
                Err(kind) => {
                    if kind == ErrorKind::HttpStatus {
                        super::note_status(x, p.status);
                    }
                    x.failed(t, kind, now)
                }
            }
        }
        if self.closing && self.fifo.is_empty() {
            // Every request it will answer is answered: end the connection as it asked.
            return Err(ErrorKind::Closed);
        }
        Ok(at)
    }

    fn drain(&mut self) -> Vec<Token> {
        let left: Vec<Token> = self.fifo.drain(..).collect();
        if std::mem::take(&mut self.abandoned) {
            // They end by their own timeouts (see the module's documentation).
            return Vec::new();
        }
        left
    }

    fn watch(&self) -> Option<Duration> {
        Some(self.watch)
    }

    fn stalled<X: Exchange + ?Sized>(&mut self, x: &X) -> bool {
        let stalled = self.fifo.front().is_some_and(|&t| !x.is_live(t));
        self.abandoned |= stalled;
        stalled
    }

    fn answered_all(&self) -> bool {
        self.fifo.is_empty()
    }

    fn any_live<X: Exchange + ?Sized>(&self, x: &X) -> bool {
        self.fifo.iter().any(|&t| x.is_live(t))
    }
}

/// The driver of one DoH lane over HTTP/1.1 with pipelining (`depth` > 1).
pub(super) async fn drive<X: Exchange + 'static>(target: Target, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    let Some((cfg, name, _)) = setup(&target, &lane, &*x, &opts, b"http/1.1", true).await else { return };
    let mut backoff = stream::BACKOFF;
    let mut bufs = Buffers::new();
    let watch = (opts.query_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        let Some((mut tls, hs, meter)) = open(&target, &cfg, &name, &opts, &lane, &x, b"http/1.1", &mut backoff).await
        else {
            return;
        };
        let meter = Metered(meter);
        let mut f = H1Framing::new(&target, opts.doh_method, opts.h1_pipeline, watch);
        let rx = tls.stamp();
        let served = {
            let (rd, wr) = tokio::io::split(&mut tls);
            stream::serve(rd, wr, &lane, &*x, &mut f, &mut bufs, tls::io_error_kind, &rx, opts.query_timeout).await
        };
        let failed = match served {
            Served::Turn(how) if f.any_live(&*x) && hs.get() == super::Hs::Open => {
                // Requests are still outstanding: the connection drains them (in order, as
                // HTTP/1.1 answers) in the background while the lane goes on on a new one.
                let rbuf = bufs.take_read();
                let (l, x2, timeout) = (lane.clone(), x.clone(), opts.query_timeout);
                tokio::task::spawn_local(async move {
                    let (lane, x) = (l, x2);
                    stream::drain(&mut tls, &lane, &*x, &mut f, rbuf, tls::io_error_kind, &rx, timeout).await;
                    let _ = tokio::time::timeout(Duration::from_millis(100), tls.shutdown()).await;
                    meter.finish(&lane, &x);
                });
                if stream::after_turn(&lane, how).await {
                    return;
                }
                None
            }
            Served::Turn(how) => {
                // close_notify and FIN; nothing is outstanding.
                bufs.clear();
                let _ = tokio::time::timeout(Duration::from_millis(100), tls.shutdown()).await;
                let failed = ended(&hs, &*x, &target, how);
                meter.finish(&lane, &x);
                if failed.is_none() && stream::after_turn(&lane, how).await {
                    return;
                }
                failed
            }
            Served::Failed(kind) => {
                bufs.clear();
                stream::unanswered(&lane, &*x, &f.drain(), kind);
                if lane.closing() {
                    ended(&hs, &*x, &target, Close::ClientEnd);
                    meter.finish(&lane, &x);
                    return;
                }
                let failed = ended(&hs, &*x, &target, stream::close_of(kind));
                meter.finish(&lane, &x);
                if failed.is_none() && stream::after_server_close(&lane, &mut backoff).await {
                    return;
                }
                failed
            }
        };
        if let Some(kind) = failed {
            if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(buf: &[u8]) -> Parsed {
        let mut body = Vec::new();
        parse(buf, &mut body).unwrap().unwrap()
    }

    #[test]
    fn parses_pipelined_responses() {
        let two = b"HTTP/1.1 200 OK\r\nContent-Type: application/dns-message\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\ncontent-type: Application/DNS-Message; x=1\r\ncontent-length: 2\r\n\r\nde";
        let p = ok(two);
        assert_eq!(p.fate.clone().unwrap(), 77..80);
        assert_eq!(&two[p.fate.unwrap()], b"abc");
        let q = ok(&two[p.used..]);
        assert_eq!(p.used + q.used, two.len());
        assert_eq!(&two[p.used..][q.fate.unwrap()], b"de");
    }

    #[test]
    fn incomplete_status_and_type() {
        let mut body = Vec::new();
        let full = b"HTTP/1.1 200 OK\r\nContent-Type: application/dns-message\r\nContent-Length: 3\r\n\r\nabc";
        for cut in [5, 40, full.len() - 1] {
            assert!(parse(&full[..cut], &mut body).unwrap().is_none(), "{cut}");
        }
        let e = ok(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy");
        assert_eq!((e.fate.unwrap_err(), e.used), (ErrorKind::HttpStatus, 44));
        let t = ok(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1\r\n\r\nx");
        assert_eq!(t.fate.unwrap_err(), ErrorKind::ContentType);
        assert!(ok(b"HTTP/1.1 100 Continue\r\n\r\n").interim);
        assert!(ok(b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n").close);
        assert!(!ok(b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n").close);
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n\r\n", &mut body).err(), Some(ErrorKind::Malformed));
        assert_eq!(parse(b"garbage\r\n\r\n", &mut body).err(), Some(ErrorKind::Malformed));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", &mut body).err(), Some(ErrorKind::Malformed));
    }

    /// Network input never panics: every prefix and every one-byte change of valid responses,
    /// and random bytes, parse to a response, an error or "incomplete".
    #[test]
    fn never_panics_on_mangled_input() {
        let valid: [&[u8]; 2] = [
            b"HTTP/1.1 200 OK\r\nContent-Type: application/dns-message\r\nContent-Length: 3\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        ];
        let mut body = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for v in valid {
            for cut in 0..=v.len() {
                let _ = parse(&v[..cut], &mut body);
            }
            for i in 0..v.len() {
                for b in [0u8, b'\r', b'\n', b'9', b'f', b':', 0xff] {
                    let mut m = v.to_vec();
                    m[i] = b;
                    let _ = parse(&m, &mut body);
                }
            }
        }
        for _ in 0..2000 {
            let len = (next() % 200) as usize;
            let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = parse(&junk, &mut body);
            let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            chunked.extend_from_slice(&junk);
            let _ = parse(&chunked, &mut body);
        }
        // A chunk size beyond any message is refused, not allocated.
        let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n";
        assert_eq!(parse(huge, &mut body).err(), Some(ErrorKind::Malformed));
    }

    #[test]
    fn chunked_bodies() {
        let mut body = Vec::new();
        let r = b"HTTP/1.1 200 OK\r\nContent-Type: application/dns-message\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\nNEXT";
        let p = parse(r, &mut body).unwrap().unwrap();
        assert!(p.chunked);
        assert_eq!(&body[p.fate.unwrap()], b"abcde");
        assert_eq!(&r[p.used..], b"NEXT");
        for cut in [90, r.len() - 6] {
            assert!(parse(&r[..cut], &mut body).unwrap().is_none(), "{cut}");
        }
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n";
        assert_eq!(parse(bad, &mut body).err(), Some(ErrorKind::Malformed));
    }
}
