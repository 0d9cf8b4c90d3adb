//! DNS over TCP (RFC 7766): one connection per lane, 2-byte length prefix, queries
//! pipelined, answers in any order, and a new connection when the server closes.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::TcpStream;
use volley_metrics::{Close, ErrorKind, Handshake};

use crate::{deliver, error_kind, Exchange, IdTable, Lane, LaneOptions};

const READ_CHUNK: usize = 64 * 1024;

/// Connects with TCP_NODELAY set (replies would otherwise wait on Nagle and delayed ACKs).
pub async fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let s = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(r) => r?,
        Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    };
    s.set_nodelay(true)?;
    Ok(s)
}

/// The driver of one TCP lane.
pub async fn drive<X: Exchange>(addr: SocketAddr, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    let mut backoff = Duration::from_millis(20);
    let mut ids = IdTable::default();
    loop {
        if lane.closing() {
            return;
        }
        let began = x.now();
        let stream = match connect(addr, opts.connect_timeout).await {
            Ok(s) => s,
            Err(e) => {
                let kind = error_kind(&e);
                let kind = if kind == ErrorKind::Io { ErrorKind::Connect } else { kind };
                let now = x.now();
                x.conn_failed(kind, now);
                for t in lane.take_queued() {
                    x.failed(t, kind, now);
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = closed(&lane) => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        backoff = Duration::from_millis(20);
        let h = Handshake { tcp_ns: Some(x.now() - began), rtt_ns: rtt_ns(&stream), ..Handshake::default() };
        x.conn_opened(&h, x.now());
        let kind = serve(&stream, &lane, &*x, &mut ids).await;
        let now = x.now();
        for t in ids.drain() {
            if x.is_live(t) {
                x.failed(t, kind, now);
            }
        }
        if lane.closing() {
            // Graceful end: FIN after the last query's fate.
            x.conn_closed(Close::ClientEnd, now);
            return;
        }
        x.conn_closed(close_of(kind), now);
    }
}

/// How a connection ended, from the error its queries got.
pub fn close_of(kind: ErrorKind) -> Close {
    match kind {
        ErrorKind::Closed => Close::ServerFin,
        ErrorKind::Reset => Close::ServerReset,
        _ => Close::Error,
    }
}

/// Smoothed RTT of a TCP connection from TCP_INFO.
pub fn rtt_ns(s: &impl std::os::fd::AsRawFd) -> Option<u64> {
    // SAFETY: getsockopt writes at most `len` bytes into the tcp_info we own.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len)
    };
    (r == 0 && info.tcpi_rtt > 0).then(|| info.tcpi_rtt as u64 * 1000)
}

async fn closed(lane: &Lane) {
    while !lane.closing() {
        lane.wait().await;
    }
}

/// Runs one connection until it ends; returns the error kind its outstanding queries get.
async fn serve<X: Exchange>(s: &TcpStream, lane: &Lane, x: &X, ids: &mut IdTable) -> ErrorKind {
    let mut wbuf: Vec<u8> = Vec::with_capacity(4096);
    let mut woff = 0;
    let mut rbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut msg: Vec<u8> = Vec::with_capacity(512);
    loop {
        // Frame every queued query into the write buffer.
        while let Some(t) = lane.pop() {
            let Some(id) = ids.insert(t, |o| x.is_live(o)) else {
                x.failed(t, ErrorKind::Overload, x.now());
                continue;
            };
            if !x.encode(t, id, &mut msg) {
                ids.remove(id);
                continue;
            }
            wbuf.extend_from_slice(&(msg.len() as u16).to_be_bytes());
            wbuf.extend_from_slice(&msg);
            x.sent(t, msg.len(), x.now());
        }
        // Write as much as the socket takes now.
        while woff < wbuf.len() {
            match s.try_write(&wbuf[woff..]) {
                Ok(n) => woff += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return error_kind(&e),
            }
        }
        if woff == wbuf.len() {
            wbuf.clear();
            woff = 0;
        }
        if lane.closing() {
            return ErrorKind::Closed;
        }
        let pending_write = woff < wbuf.len();
        tokio::select! {
            biased;
            r = s.readable() => {
                if r.is_err() {
                    return ErrorKind::Io;
                }
                if rbuf.capacity() - rbuf.len() < READ_CHUNK / 2 {
                    rbuf.reserve(READ_CHUNK);
                }
                match s.try_read_buf(&mut rbuf) {
                    Ok(0) => return ErrorKind::Closed,
                    Ok(_) => {
                        let now = x.now();
                        let mut at = 0;
                        while rbuf.len() - at >= 2 {
                            let len = u16::from_be_bytes([rbuf[at], rbuf[at + 1]]) as usize;
                            if rbuf.len() - at - 2 < len {
                                break;
                            }
                            deliver(&rbuf[at + 2..at + 2 + len], ids, x, now);
                            at += 2 + len;
                        }
                        rbuf.drain(..at);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return error_kind(&e),
                }
            }
            r = s.writable(), if pending_write => {
                if r.is_err() {
                    return ErrorKind::Io;
                }
            }
            _ = lane.wait(), if !pending_write => {}
        }
    }
}
