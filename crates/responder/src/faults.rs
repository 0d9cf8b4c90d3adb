//! Faults: the responder misbehaving on purpose, so that tests can provoke each error kind
//! of the generator. Written `NAME=VALUE` (`--fault`, repeatable); every fault is
//! deterministic: "N/M" selects the last N of each block of M requests it applies to,
//! numbered over the whole server like `--drop`, and "after N" counts per connection.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::answer::Ratio;

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `http-status=CODE[:N/M]`: DoH (HTTP/1.1, 2, 3) answers with this status (100..=599,
    /// not 200) and an empty body instead of the DNS answer, for every request or N of every M.
    HttpStatus {
        /// The status code.
        status: u16,
        /// Which requests; None: all.
        ratio: Option<Ratio>,
    },
    /// `content-type=TYPE[:N/M]`: DoH answers carry this content type instead of
    /// `application/dns-message` (the body is still the DNS answer).
    ContentType {
        /// The content type, e.g. `text/plain`.
        value: String,
        /// Which requests; None: all.
        ratio: Option<Ratio>,
    },
    /// `goaway-after=N`: after the N-th request on a connection, HTTP/2 sends GOAWAY (graceful:
    /// requests already sent are answered, then the connection closes), HTTP/3 sends GOAWAY,
    /// and HTTP/1.1 answers the N-th request with `connection: close` and closes.
    GoawayAfter(u64),
    /// `rst-stream=N/M`: N of every M DoH requests get no answer but a stream reset: HTTP/2
    /// RST_STREAM INTERNAL_ERROR, HTTP/3 stream reset H3_INTERNAL_ERROR; over HTTP/1.1 the
    /// connection is closed without a response.
    RstStream(Ratio),
    /// `refuse-stream=N/M`: N of every M HTTP/2 requests are refused unprocessed: RST_STREAM
    /// REFUSED_STREAM before the request is read (RFC 9113 section 8.7: the client may send it
    /// again). HTTP/1.1 and HTTP/3 requests are not selected.
    RefuseStream(Ratio),
    /// `tcp-reset-after=N`: TCP and DoT answer the first N queries of a connection; when
    /// query N+1 arrives the connection is reset (RST: SO_LINGER 0 and close), unanswered.
    /// `0` resets at the first query.
    TcpResetAfter(u64),
    /// `quic-stream-reset=N/M`: N of every M DoQ queries get no answer: the stream is reset
    /// with DOQ_INTERNAL_ERROR (0x1) (RESET_STREAM and STOP_SENDING).
    QuicStreamReset(Ratio),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ratio = |r: &Option<Ratio>| r.map(|r| format!(":{r}")).unwrap_or_default();
        match self {
            Fault::HttpStatus { status, ratio: r } => write!(f, "http-status={status}{}", ratio(r)),
            Fault::ContentType { value, ratio: r } => write!(f, "content-type={value}{}", ratio(r)),
            Fault::GoawayAfter(n) => write!(f, "goaway-after={n}"),
            Fault::RstStream(r) => write!(f, "rst-stream={r}"),
            Fault::RefuseStream(r) => write!(f, "refuse-stream={r}"),
            Fault::TcpResetAfter(n) => write!(f, "tcp-reset-after={n}"),
            Fault::QuicStreamReset(r) => write!(f, "quic-stream-reset={r}"),
        }
    }
}

/// The names, for messages.
pub const FAULT_NAMES: &str = "http-status=CODE[:N/M], content-type=TYPE[:N/M], goaway-after=N, rst-stream=N/M, \
                               refuse-stream=N/M, tcp-reset-after=N, quic-stream-reset=N/M";

impl FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Fault, String> {
        let (name, value) =
            s.split_once('=').ok_or_else(|| format!("'{s}': expected NAME=VALUE, one of {FAULT_NAMES}"))?;
        let bad = |why: &str| format!("'{s}': {why}");
        let count = |v: &str| v.trim().parse::<u64>().map_err(|_| bad("expected a whole number"));
        let ratio = |v: &str| v.parse::<Ratio>().map_err(|e| bad(&e));
        let with_ratio = |v: &str| -> Result<(String, Option<Ratio>), String> {
            match v.rsplit_once(':') {
                Some((x, r)) => Ok((x.to_string(), Some(ratio(r)?))),
                None => Ok((v.to_string(), None)),
            }
        };
        match name.trim() {
            "http-status" => {
                let (code, ratio) = with_ratio(value)?;
                let status = code.trim().parse::<u16>().map_err(|_| bad("expected an HTTP status such as 503"))?;
                if !(100..=599).contains(&status) || status == 200 {
                    return Err(bad("the status must be 100..=599 and not 200"));
                }
                Ok(Fault::HttpStatus { status, ratio })
            }
            "content-type" => {
                let (value, ratio) = with_ratio(value)?;
                if value.is_empty() || http::HeaderValue::from_str(&value).is_err() {
                    return Err(bad("expected a content type such as text/plain"));
                }
                Ok(Fault::ContentType { value, ratio })
            }
            "goaway-after" => Ok(Fault::GoawayAfter(count(value)?.max(1))),
            "rst-stream" => Ok(Fault::RstStream(ratio(value)?)),
            "refuse-stream" => Ok(Fault::RefuseStream(ratio(value)?)),
            "tcp-reset-after" => Ok(Fault::TcpResetAfter(count(value)?)),
            "quic-stream-reset" => Ok(Fault::QuicStreamReset(ratio(value)?)),
            other => Err(format!("'{s}': unknown fault '{other}' (known: {FAULT_NAMES})")),
        }
    }
}

/// A fault selected N of every M times: its own global counter.
#[derive(Debug)]
pub(crate) struct Selector {
    ratio: Option<Ratio>,
    seq: AtomicU64,
}

impl Selector {
    fn new(ratio: Option<Ratio>) -> Selector {
        Selector { ratio, seq: AtomicU64::new(0) }
    }

    /// Whether this request is selected (always, without a ratio).
    pub fn hit(&self) -> bool {
        match self.ratio {
            None => true,
            Some(r) => r.selects(self.seq.fetch_add(1, Ordering::Relaxed) + 1),
        }
    }
}

/// The faults in force, ready for the transports.
#[derive(Debug, Default)]
pub(crate) struct Active {
    pub http_status: Option<(http::StatusCode, Selector)>,
    pub content_type: Option<(http::HeaderValue, Selector)>,
    pub goaway_after: Option<u64>,
    pub rst_stream: Option<Selector>,
    pub refuse_stream: Option<Selector>,
    pub tcp_reset_after: Option<u64>,
    pub quic_stream_reset: Option<Selector>,
}

impl Active {
    /// Checks and compiles the configured faults (a later one of a kind replaces an earlier one).
    pub fn new(faults: &[Fault]) -> Result<Active, String> {
        let mut a = Active::default();
        for f in faults {
            match f {
                Fault::HttpStatus { status, ratio } => {
                    let code = http::StatusCode::from_u16(*status).map_err(|_| format!("fault {f}: bad status"))?;
                    a.http_status = Some((code, Selector::new(*ratio)));
                }
                Fault::ContentType { value, ratio } => {
                    let v = http::HeaderValue::from_str(value).map_err(|_| format!("fault {f}: bad content type"))?;
                    a.content_type = Some((v, Selector::new(*ratio)));
                }
                Fault::GoawayAfter(n) => a.goaway_after = Some(*n),
                Fault::RstStream(r) => {
                    r.validate()?;
                    a.rst_stream = Some(Selector::new(Some(*r)));
                }
                Fault::RefuseStream(r) => {
                    r.validate()?;
                    a.refuse_stream = Some(Selector::new(Some(*r)));
                }
                Fault::TcpResetAfter(n) => a.tcp_reset_after = Some(*n),
                Fault::QuicStreamReset(r) => {
                    r.validate()?;
                    a.quic_stream_reset = Some(Selector::new(Some(*r)));
                }
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        for s in [
            "http-status=503",
            "http-status=404:1/10",
            "content-type=text/plain",
            "content-type=text/plain:2/5",
            "goaway-after=3",
            "rst-stream=1/10",
            "refuse-stream=1/4",
            "tcp-reset-after=0",
            "quic-stream-reset=1/10",
        ] {
            assert_eq!(s.parse::<Fault>().unwrap().to_string(), s);
        }
        for bad in ["http-status=200", "http-status=99", "x=1", "rst-stream=2/1", "goaway-after=x", "nothing"] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
        let a = Active::new(&["rst-stream=1/3".parse().unwrap()]).unwrap();
        let s = a.rst_stream.unwrap();
        assert_eq!((0..6).map(|_| s.hit()).collect::<Vec<_>>(), [false, false, true, false, false, true]);
    }
}
