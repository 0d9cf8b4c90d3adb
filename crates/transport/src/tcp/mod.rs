//! DNS over TCP (RFC 7766): one connection per lane, 2-byte length prefix, queries
//! pipelined, answers in any order, and a new connection when the server closes.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use volley_metrics::{ErrorKind, Handshake};

use crate::meter::TcpMeter;
use crate::stamp::StampedTcp;
use crate::stream::{self, Buffers, Framing, Served};
use crate::{error_kind, Exchange, IdTable, Lane, LaneOptions};

/// Connects from `local` (any address when `None`) with TCP_NODELAY set (replies would
/// otherwise wait on Nagle and delayed ACKs), and puts a meter on the socket as soon as it
/// exists (before the SYN), so that a failed attempt is counted on the wire too.
pub(crate) async fn connect_metered(
    addr: SocketAddr,
    timeout: Duration,
    local: Option<IpAddr>,
    meter: &mut Option<TcpMeter>,
) -> io::Result<TcpStream> {
    let sock = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if let Some(ip) = local {
        crate::source::bind_to(&socket2::SockRef::from(&sock), ip, true)?;
    }
    *meter = TcpMeter::new(&sock, addr);
    let s = match tokio::time::timeout(timeout, sock.connect(addr)).await {
        Ok(r) => r?,
        Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    };
    s.set_nodelay(true)?;
    Ok(s)
}

/// A TCP connection made for TLS on top: the stream, how long the TCP handshake took, when it
/// ended (the run's clock) and what is left of the connect timeout for TLS.
pub(crate) struct Connected {
    pub s: TcpStream,
    pub tcp_ns: u64,
    pub done: u64,
    pub left: Duration,
}

/// Connects to `target` as [`connect_metered`] does, timed; the error names the target.
pub(crate) async fn connect_timed<X: Exchange + ?Sized>(
    target: &crate::Target,
    opts: &LaneOptions,
    x: &X,
    meter: &mut Option<TcpMeter>,
) -> Result<Connected, (ErrorKind, String)> {
    let began = x.now();
    let s = connect_metered(target.addr, opts.connect_timeout, opts.local, meter)
        .await
        .map_err(|e| (connect_error_kind(&e), format!("cannot connect to {}: {e}", target.addr)))?;
    let done = x.now();
    let tcp_ns = done - began;
    let left = opts.connect_timeout.saturating_sub(Duration::from_nanos(tcp_ns)).max(Duration::from_millis(1));
    Ok(Connected { s, tcp_ns, done, left })
}

/// The driver of one TCP lane. Every connection (attempts that failed included) reports its
/// bytes and packets on the wire from `TCP_INFO` when it ends ([`TcpMeter`]).
pub async fn drive<X: Exchange + 'static>(addr: SocketAddr, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    let mut backoff = stream::BACKOFF;
    let mut ids = IdTable::default();
    let mut bufs = Buffers::new();
    loop {
        if !stream::may_connect(&lane, &opts).await {
            return;
        }
        let began = x.now();
        let mut meter = None;
        let connecting = connect_metered(addr, opts.connect_timeout, opts.local, &mut meter);
        let Some(r) = stream::attempt(&lane, connecting).await else { return };
        let s = match r {
            Ok(s) => s,
            Err(e) => {
                if let Some(m) = meter {
                    m.finish(&lane, &x);
                }
                let kind = connect_error_kind(&e);
                x.conn_failed_why(kind, &e.to_string(), x.now());
                if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        backoff = stream::BACKOFF;
        if let Some(m) = meter.as_mut() {
            m.release();
        }
        let h = Handshake { tcp_ns: Some(x.now() - began), rtt_ns: rtt_ns(&s), ..Handshake::default() };
        x.conn_opened(&h, x.now());
        let s = StampedTcp::new(s, opts.tx_stamps.is_some());
        let served =
            stream::serve(&s, &s, &lane, &*x, &mut ids, &mut bufs, error_kind, &s.stamp(), opts.query_timeout).await;
        match served {
            Served::Turn(how) if ids.any_live(&*x) => {
                // Queries are still outstanding: the connection drains them in the background
                // while the lane goes on on a new one.
                let (mut ids, rbuf) = (std::mem::take(&mut ids), bufs.take_read());
                let (l, x2, timeout) = (lane.clone(), x.clone(), opts.query_timeout);
                tokio::task::spawn_local(async move {
                    let (lane, x) = (l, x2);
                    let rx = s.stamp();
                    stream::drain(&s, &lane, &*x, &mut ids, rbuf, error_kind, &rx, timeout).await;
                    close(s, meter, &lane, &x).await;
                });
                if stream::after_turn(&lane, how).await {
                    return;
                }
            }
            Served::Turn(how) => {
                // Nothing outstanding.
                bufs.clear();
                x.conn_closed(how, x.now());
                close(s, meter, &lane, &x).await;
                if stream::after_turn(&lane, how).await {
                    return;
                }
            }
            Served::Failed(kind) => {
                bufs.clear();
                let closing = stream::end_connection(&lane, &*x, &mut ids, kind);
                // FIN (graceful at the end of a run: after the last query's fate).
                if let Some(m) = meter {
                    m.finish_with(s.into_inner(), &lane, &x);
                }
                if closing || stream::after_server_close(&lane, &mut backoff).await {
                    return;
                }
            }
        }
    }
}

/// Ends a connection the client is done with: FIN (the meter sends it and reads the wire
/// counts, or the stream when there is none).
async fn close<X: Exchange + 'static>(mut s: StampedTcp, meter: Option<TcpMeter>, lane: &Rc<Lane>, x: &Rc<X>) {
    match meter {
        Some(m) => m.finish_with(s.into_inner(), lane, x),
        None => {
            let _ = s.shutdown().await;
        }
    }
}

/// The error kind of a failed TCP connect.
pub fn connect_error_kind(e: &io::Error) -> ErrorKind {
    // On connect, EADDRNOTAVAIL means no source port is left towards this server.
    if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
        return ErrorKind::LocalLimit;
    }
    match error_kind(e) {
        ErrorKind::Io => ErrorKind::Connect,
        k => k,
    }
}

pub use crate::stream::close_of;

/// Smoothed RTT of a TCP connection from TCP_INFO.
pub fn rtt_ns(s: &impl std::os::fd::AsRawFd) -> Option<u64> {
    // SAFETY: getsockopt writes at most `len` bytes into the tcp_info we own.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0 && info.tcpi_rtt > 0).then(|| info.tcpi_rtt as u64 * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_resources_running_out_have_their_own_kind() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(connect_error_kind(&e(libc::EMFILE)), ErrorKind::LocalLimit);
        assert_eq!(connect_error_kind(&e(libc::ENFILE)), ErrorKind::LocalLimit);
        // No source port left towards the server.
        assert_eq!(connect_error_kind(&e(libc::EADDRNOTAVAIL)), ErrorKind::LocalLimit);
        assert_eq!(connect_error_kind(&e(libc::ECONNREFUSED)), ErrorKind::Refused);
        assert_eq!(connect_error_kind(&e(libc::ETIMEDOUT)), ErrorKind::Connect);
        assert_eq!(error_kind(&e(libc::EMFILE)), ErrorKind::LocalLimit);
    }
}
