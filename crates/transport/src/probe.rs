//! One query, one answer, blocking: for `volley query` and for the check before a run that
//! something is listening at the target (saves a user a run of timeouts on a typo'd port).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::{Scheme, Target};

/// Why a one-shot exchange got no answer.
#[derive(Debug)]
pub enum OneShotError {
    /// Nothing listens there, or it cannot be reached: the text names target and reason.
    Unreachable(String),
    /// Something may listen but no answer came in time (or the connection closed first).
    NoAnswer(String),
}

impl std::fmt::Display for OneShotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OneShotError::Unreachable(s) | OneShotError::NoAnswer(s) => f.write_str(s),
        }
    }
}

/// Sends `query` (a whole DNS message) to `target` over `scheme` and waits up to `timeout`
/// for the response whose ID matches. Returns the response and the time it took.
pub fn exchange(target: &Target, scheme: Scheme, query: &[u8], timeout: Duration) -> Result<(Vec<u8>, Duration), OneShotError> {
    let t = timeout.max(Duration::from_millis(10));
    let unreachable = |e: io::Error| match e.kind() {
        io::ErrorKind::ConnectionRefused => {
            OneShotError::Unreachable(format!("nothing is listening at {scheme}://{} (connection refused)", target.addr))
        }
        _ => OneShotError::Unreachable(format!("cannot reach {scheme}://{}: {e}", target.addr)),
    };
    let silent = || OneShotError::NoAnswer(format!("no answer from {scheme}://{} within {t:?}", target.addr));
    let id = query.get(..2).map(|b| [b[0], b[1]]);
    let start = Instant::now();
    match scheme {
        Scheme::Udp => {
            let s = crate::udp::connect(target.addr).map_err(unreachable)?;
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
        Scheme::Tcp => {
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
}

/// Sends `query` once; an error means nothing listens at the target (refused) or it cannot
/// be reached.
pub fn probe(target: &Target, query: &[u8], timeout: Duration) -> Result<Probe, String> {
    match exchange(target, target.scheme, query, timeout) {
        Ok(_) => Ok(Probe::Answered),
        Err(OneShotError::NoAnswer(_)) => Ok(Probe::Silent),
        Err(OneShotError::Unreachable(e)) => Err(e),
    }
}
