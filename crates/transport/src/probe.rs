//! One query, one answer, blocking: for `volley query` and for the check before a run that
//! something is listening at the target (saves a user a run of timeouts on a typo'd port).

use std::cell::{Cell, RefCell};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::rc::Rc;
use std::time::{Duration, Instant};

use volley_metrics::{Close, ErrorKind, Handshake, Unexpected};

use crate::{spawn_lane, Exchange, Lane, LaneOptions, Scheme, Target, Token};

/// Why a one-shot exchange got no answer.
#[derive(Debug)]
pub enum OneShotError {
    /// Nothing listens there, or it cannot be reached: the text names target and reason.
    Unreachable(String),
    /// Something may listen but no answer came in time (or the connection closed first).
    NoAnswer(String),
    /// The server answered, but with no DNS message, for a reason of its own (a DoH status
    /// such as 503, a content type other than `application/dns-message`), not because the
    /// request was wrong.
    NotDns(String),
}

impl std::fmt::Display for OneShotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OneShotError::Unreachable(s) | OneShotError::NoAnswer(s) | OneShotError::NotDns(s) => f.write_str(s),
        }
    }
}

/// Sends `query` (a whole DNS message) to `target` over `scheme` and waits up to `timeout`
/// for the response whose ID matches. Returns the response and the time it took. Encrypted
/// transports use the default TLS settings (see [`exchange_with`]).
pub fn exchange(
    target: &Target,
    scheme: Scheme,
    query: &[u8],
    timeout: Duration,
) -> Result<(Vec<u8>, Duration), OneShotError> {
    exchange_with(target, scheme, query, timeout, &LaneOptions::default())
}

/// As [`exchange`], with the lane options (TLS, HTTP version and method) of a run. DoT,
/// DoH and DoQ run the load generator's own drivers for the one query (DoH and DoQ send it
/// with ID 0, as RFC 8484 and 9250 ask). The time includes connecting.
pub fn exchange_with(
    target: &Target,
    scheme: Scheme,
    query: &[u8],
    timeout: Duration,
    opts: &LaneOptions,
) -> Result<(Vec<u8>, Duration), OneShotError> {
    let t = timeout.max(Duration::from_millis(10));
    if scheme.is_encrypted() {
        return one_query(target, scheme, query, t, opts);
    }
    let unreachable = |e: io::Error| match e.kind() {
        io::ErrorKind::ConnectionRefused => OneShotError::Unreachable(format!(
            "nothing is listening at {scheme}://{} (connection refused)",
            target.addr
        )),
        _ => OneShotError::Unreachable(format!("cannot reach {scheme}://{}: {e}", target.addr)),
    };
    let silent = || OneShotError::NoAnswer(format!("no answer from {scheme}://{} within {t:?}", target.addr));
    let id = query.get(..2).map(|b| [b[0], b[1]]);
    let start = Instant::now();
    match scheme {
        Scheme::Udp => {
            let s = crate::udp::connect(target.addr, None).map_err(unreachable)?;
            s.set_nonblocking(false).map_err(unreachable)?;
            s.send(query).map_err(unreachable)?;
            let mut buf = vec![0u8; 65_535];
            loop {
                let left = t.checked_sub(start.elapsed()).filter(|d| !d.is_zero()).ok_or_else(silent)?;
                s.set_read_timeout(Some(left)).map_err(unreachable)?;
                match s.recv(&mut buf) {
                    Ok(n) if n >= 2 && Some([buf[0], buf[1]]) == id => return Ok((buf[..n].to_vec(), start.elapsed())),
                    Ok(_) => continue,
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        return Err(silent())
                    }
                    Err(e) => return Err(unreachable(e)),
                }
            }
        }
        _ => {
            let mut s = TcpStream::connect_timeout(&target.addr, t).map_err(unreachable)?;
            let _ = s.set_nodelay(true);
            let mut framed = (query.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(query);
            s.write_all(&framed).map_err(unreachable)?;
            loop {
                let left = t.checked_sub(start.elapsed()).filter(|d| !d.is_zero()).ok_or_else(silent)?;
                s.set_read_timeout(Some(left)).map_err(unreachable)?;
                let mut len = [0u8; 2];
                s.read_exact(&mut len).map_err(|_| silent())?;
                let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
                s.read_exact(&mut msg).map_err(|_| silent())?;
                if msg.len() >= 2 && Some([msg[0], msg[1]]) == id {
                    return Ok((msg, start.elapsed()));
                }
            }
        }
    }
}

/// What the check before a run saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A DNS response came back.
    Answered,
    /// No response in time: maybe the server drops this query. The run goes on.
    Silent,
    /// The server answered with no DNS message (see [`OneShotError::NotDns`]), as it may
    /// answer the run's queries: the run goes on and counts them as failures.
    NotDns(String),
}

/// Sends `query` once; an error means nothing listens at the target (refused), it cannot be
/// reached, or the request is wrong for it (a DoH path or method it does not serve).
pub fn probe(target: &Target, query: &[u8], timeout: Duration) -> Result<Probe, String> {
    probe_with(target, query, timeout, &LaneOptions::default())
}

/// As [`probe`], with the run's lane options (TLS settings: a certificate that does not
/// verify is an error that says why).
pub fn probe_with(target: &Target, query: &[u8], timeout: Duration, opts: &LaneOptions) -> Result<Probe, String> {
    match exchange_with(target, target.scheme, query, timeout, opts) {
        Ok(_) => Ok(Probe::Answered),
        Err(OneShotError::NoAnswer(_)) => Ok(Probe::Silent),
        Err(OneShotError::NotDns(e)) => Ok(Probe::NotDns(e)),
        Err(OneShotError::Unreachable(e)) => Err(e),
    }
}

/// What [`probe_addresses`] found: the target at the address that answered (or, when none
/// did but one could be reached, the first reached), how it answered, and why each address
/// tried before it did not do.
#[derive(Debug)]
pub struct Probed {
    pub target: Target,
    pub probe: Probe,
    pub passed: Vec<String>,
}

/// Probes each address of `target` in turn (IPv6 and IPv4 alike, as dig and kdig do) until
/// one answers: a name whose first address has nothing listening is measured at the one that
/// does. An error lists every address's failure.
pub fn probe_addresses(target: &Target, query: &[u8], timeout: Duration, opts: &LaneOptions) -> Result<Probed, String> {
    let mut passed = Vec::new();
    let mut silent: Option<Target> = None;
    let addrs = if target.addrs.is_empty() { vec![target.addr] } else { target.addrs.clone() };
    for a in addrs {
        let t = target.at(a);
        match probe_with(&t, query, timeout, opts) {
            Ok(Probe::Silent) => {
                passed.push(format!("{a}: no answer within {timeout:?}"));
                silent.get_or_insert(t);
            }
            Ok(probe) => return Ok(Probed { target: t, probe, passed }),
            Err(e) => passed.push(e),
        }
    }
    match silent {
        Some(target) => Ok(Probed { target, probe: Probe::Silent, passed }),
        None if passed.len() == 1 => Err(passed.remove(0)),
        None => Err(format!("no address of '{}' could be reached: {}", target.host, passed.join("; "))),
    }
}

/// The engine side of a one-query run: holds the query, takes its fate.
struct One {
    query: Vec<u8>,
    start: Instant,
    fate: RefCell<Option<Result<Vec<u8>, ErrorKind>>>,
    why: RefCell<Option<String>>,
    /// The HTTP status of an `http_status` failure.
    status: Cell<Option<u16>>,
    done: tokio::sync::Notify,
    live: Cell<bool>,
}

impl One {
    fn end(&self, r: Result<Vec<u8>, ErrorKind>) {
        if self.live.replace(false) {
            *self.fate.borrow_mut() = Some(r);
            self.done.notify_one();
        }
    }
}

impl Exchange for One {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64 + 1
    }
    fn encode(&self, _: Token, id: u16, out: &mut Vec<u8>) -> bool {
        out.clear();
        out.extend_from_slice(&self.query);
        if out.len() >= 2 {
            out[..2].copy_from_slice(&id.to_be_bytes());
        }
        self.live.get()
    }
    fn sent(&self, _: Token, _: usize, _: u64) {}
    fn response(&self, _: Token, msg: &[u8], _: u64) {
        self.end(Ok(msg.to_vec()));
    }
    fn failed(&self, _: Token, kind: ErrorKind, _: u64) {
        self.end(Err(kind));
    }
    fn unexpected(&self, _: Unexpected, _: usize, _: u64) {}
    fn is_live(&self, _: Token) -> bool {
        self.live.get()
    }
    fn conn_opened(&self, _: &Handshake, _: u64) {}
    fn conn_failed(&self, _: ErrorKind, _: u64) {}
    fn conn_failed_why(&self, _: ErrorKind, why: &str, _: u64) {
        self.why.borrow_mut().get_or_insert_with(|| why.to_string());
    }
    fn conn_closed(&self, _: Close, _: u64) {}
    fn wire(&self, _: &volley_metrics::WireStats) {}
    fn event(&self, what: &str) {
        if let Some(code) = what.strip_prefix(crate::https::HTTP_STATUS_EVENT) {
            self.status.set(code.parse().ok());
        }
    }
}

/// One query over an encrypted transport, by the load generator's driver for it.
fn one_query(
    target: &Target,
    scheme: Scheme,
    query: &[u8],
    t: Duration,
    opts: &LaneOptions,
) -> Result<(Vec<u8>, Duration), OneShotError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| OneShotError::Unreachable(format!("cannot start a runtime: {e}")))?;
    let target = Target { scheme, ..target.clone() };
    let x = Rc::new(One {
        query: query.to_vec(),
        start: Instant::now(),
        fate: RefCell::new(None),
        why: RefCell::new(None),
        status: Cell::new(None),
        done: tokio::sync::Notify::new(),
        live: Cell::new(true),
    });
    let mut opts = opts.clone();
    opts.connect_timeout = opts.connect_timeout.min(t);
    opts.query_timeout = t;
    let local = tokio::task::LocalSet::new();
    let fate = local.block_on(&rt, async {
        let lane = Rc::new(Lane::new());
        spawn_lane(&target, lane.clone(), x.clone(), &opts);
        lane.push(1);
        let r = tokio::time::timeout(t, async {
            while x.live.get() {
                x.done.notified().await;
            }
        })
        .await;
        lane.close();
        tokio::task::yield_now().await;
        r.ok().and_then(|_| x.fate.borrow_mut().take())
    });
    let took = x.start.elapsed();
    let why = x.why.borrow_mut().take();
    // QUIC ignores ICMP: when it got nothing, ask the port directly whether anyone is there.
    let quic = match scheme {
        Scheme::Quic | Scheme::H3 => true,
        Scheme::Https => opts.http_for(Scheme::Https) == crate::HttpVersion::Http3,
        _ => false,
    };
    if fate.is_none() && quic && udp_port_refused(target.addr) {
        return Err(OneShotError::Unreachable(format!("nothing is listening at {target} (ICMP port unreachable)")));
    }
    match fate {
        Some(Ok(msg)) => Ok((msg, took)),
        None => Err(OneShotError::NoAnswer(match why {
            Some(w) => format!("no answer from {target} within {t:?}: {w}"),
            None => format!("no answer from {target} within {t:?}"),
        })),
        Some(Err(kind)) => {
            let text = match (why, kind) {
                (Some(w), _) => w,
                (None, ErrorKind::HttpStatus) => {
                    let status = x.status.get().and_then(|c| http::StatusCode::from_u16(c).ok());
                    return Err(match status.map(|s| (s, wrong_request(s, opts.doh_method))) {
                        Some((s, Some(hint))) => {
                            OneShotError::Unreachable(format!("{target} answered HTTP status {s} ({hint})"))
                        }
                        Some((s, None)) => OneShotError::NotDns(format!("{target} answered HTTP status {s}, not 200")),
                        None => OneShotError::Unreachable(format!(
                            "{target} answered with an HTTP status other than 200 (is the path right?)"
                        )),
                    });
                }
                (None, ErrorKind::ContentType) => {
                    return Err(OneShotError::NotDns(format!(
                        "{target} answered with a content type other than application/dns-message"
                    )))
                }
                (None, k) => format!("query to {target} failed: {k}"),
            };
            match kind {
                ErrorKind::Refused | ErrorKind::Connect | ErrorKind::Tls | ErrorKind::Alpn => {
                    Err(OneShotError::Unreachable(text))
                }
                _ => Err(OneShotError::NoAnswer(text)),
            }
        }
    }
}

/// Whether a DoH status says the request itself is wrong for this server, and what to check:
/// the URL (a redirect, which volley does not follow; 404), the method (405; 414, a GET URL too
/// long; 415, a POST body it does not take) or the request's form (400). None: the status is
/// the server's own answer to a right request (403, 429, 503, ...), which a run measures.
fn wrong_request(status: http::StatusCode, method: crate::DohMethod) -> Option<String> {
    let other = match method {
        crate::DohMethod::Get => "post",
        crate::DohMethod::Post => "get",
    };
    Some(match status.as_u16() {
        300..=399 => "a redirect, which volley does not follow: use the URL it points to".to_string(),
        400 => "is the URL right? it refused the request".to_string(),
        404 => "is the path right?".to_string(),
        405 | 415 => format!("is the path right? or try --doh-method {other}"),
        414 => "the GET URL is too long: try --doh-method post".to_string(),
        _ => return None,
    })
}

/// Whether `addr` refuses UDP: one byte (no QUIC packet is that short, so a QUIC server drops
/// it) from a connected socket, which an ICMP port unreachable turns into ECONNREFUSED.
fn udp_port_refused(addr: std::net::SocketAddr) -> bool {
    let Ok(s) = crate::udp::connect(addr, None) else { return false };
    if s.set_nonblocking(false).is_err() || s.set_read_timeout(Some(Duration::from_millis(200))).is_err() {
        return false;
    }
    if let Err(e) = s.send(&[0]) {
        return e.kind() == io::ErrorKind::ConnectionRefused;
    }
    matches!(s.recv(&mut [0u8; 64]), Err(e) if e.kind() == io::ErrorKind::ConnectionRefused)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statuses that say the request is wrong stop a run (with what to check); the others are
    /// the server's answers, measured.
    #[test]
    fn wrong_requests_and_server_answers() {
        let hint = |s: u16, m| wrong_request(http::StatusCode::from_u16(s).unwrap(), m);
        for s in [301, 308, 400, 404, 405, 414, 415] {
            assert!(hint(s, crate::DohMethod::Post).is_some(), "{s}");
        }
        for s in [401, 403, 408, 429, 500, 502, 503, 504] {
            assert_eq!(hint(s, crate::DohMethod::Post), None, "{s}");
        }
        assert!(hint(405, crate::DohMethod::Post).unwrap().contains("--doh-method get"));
        assert!(hint(405, crate::DohMethod::Get).unwrap().contains("--doh-method post"));
    }
}
