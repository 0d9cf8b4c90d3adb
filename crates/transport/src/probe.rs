//! A check before a run: is anything listening at the target? Saves a user from a run of
//! timeouts against a typo'd port.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::{Scheme, Target};

/// What the probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A DNS response came back.
    Answered,
    /// Connected (TCP) but no response in time, or no UDP response in time: maybe the
    /// server drops this query. The run goes on.
    Silent,
}

/// Sends `query` once and waits up to `timeout`. An error means nothing listens (refused)
/// or the address cannot be reached; its text names the target and the reason.
pub fn probe(target: &Target, query: &[u8], timeout: Duration) -> Result<Probe, String> {
    let t = timeout.max(Duration::from_millis(100));
    let why = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => format!("nothing is listening at {target} (connection refused)"),
        _ => format!("cannot reach {target}: {e}"),
    };
    match target.scheme {
        Scheme::Udp => {
            let s = crate::udp::connect(target.addr).map_err(why)?;
            s.set_nonblocking(false).map_err(why)?;
            s.set_read_timeout(Some(t)).map_err(why)?;
            s.send(query).map_err(why)?;
            let mut buf = [0u8; 4096];
            match s.recv(&mut buf) {
                Ok(_) => Ok(Probe::Answered),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    Ok(Probe::Silent)
                }
                Err(e) => Err(why(e)),
            }
        }
        Scheme::Tcp => {
            let mut s = TcpStream::connect_timeout(&target.addr, t).map_err(why)?;
            let _ = s.set_nodelay(true);
            s.set_read_timeout(Some(t)).map_err(why)?;
            let mut framed = (query.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(query);
            s.write_all(&framed).map_err(why)?;
            let mut len = [0u8; 2];
            match s.read_exact(&mut len) {
                Ok(()) => Ok(Probe::Answered),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    Ok(Probe::Silent)
                }
                // Accepted then closed: something listens, the run will show what it does.
                Err(_) => Ok(Probe::Silent),
            }
        }
    }
}
