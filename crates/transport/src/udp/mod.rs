//! DNS over UDP: a connected socket per lane, queries and answers in batches of datagrams.

pub(crate) mod mmsg;
pub mod xdp;

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use volley_metrics::{Departure, ErrorKind, WireStats};

use crate::stamp::TxPending;
use crate::{deliver, error_kind, meter, Exchange, IdTable, Lane, LaneOptions, Token, TxStamps};

pub use mmsg::Batch;

/// Opens a non-blocking UDP socket connected to `addr` from `local` (any address when
/// `None`), with large buffers.
pub fn connect(addr: SocketAddr, local: Option<std::net::IpAddr>) -> io::Result<std::net::UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(ip) = local {
        crate::source::bind_to(&socket2::SockRef::from(&s), ip, false)?;
    }
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.connect(&addr.into())?;
    Ok(s.into())
}

/// A lane's socket, made before its driver runs (so that a run can make all of them before
/// its clock starts): connected, with kernel receive stamps on when the kernel allows them,
/// and transmit stamps when asked for.
pub struct Prepared {
    sock: std::net::UdpSocket,
    stamped: bool,
    tx: Option<TxStamps>,
}

/// Makes a lane's socket: [`connect`], kernel receive time stamps on, and transmit stamps
/// too when `tx` (each datagram's departure read back from the socket's error queue).
pub fn prepare(addr: SocketAddr, local: Option<std::net::IpAddr>, tx: Option<TxStamps>) -> io::Result<Prepared> {
    let sock = connect(addr, local)?;
    // Answers are timed by the kernel when they arrive, so reading them later (in batches, or
    // in lazy mode) does not change their latency.
    let fd = sock.as_raw_fd();
    let tx = tx.filter(|&m| match m {
        TxStamps::Each => crate::stamp::enable_tx(fd).is_ok(),
        TxStamps::Ends => crate::stamp::enable_sparse_tx(fd).is_ok(),
    });
    let stamped = tx.is_some() || crate::stamp::enable(fd).is_ok();
    Ok(Prepared { sock, stamped, tx })
}

/// The driver of one UDP lane: sends what the engine queues, delivers what comes back. What
/// crosses the wire is reported per batch of datagrams: payload plus IP and UDP headers.
///
/// The socket was made beforehand ([`prepare`]); the batch buffers are the thread's (see
/// [`Batch::take`]), borrowed for each system call, so that a lane costs its socket, its
/// table of IDs and its task, however many lanes a thread has. A lane with nothing
/// outstanding waits only for its next query: it costs nothing until then.
pub async fn drive<X: Exchange>(
    prepared: io::Result<Prepared>,
    addr: SocketAddr,
    lane: Rc<Lane>,
    x: Rc<X>,
    opts: LaneOptions,
) {
    let sock = prepared.and_then(|p| {
        let sock = match opts.udp_lazy_receive {
            Some(_) => Sock::Raw(p.sock),
            None => UdpSocket::from_std(p.sock).map(Sock::Tokio)?,
        };
        Ok((sock, p.stamped, p.tx))
    });
    let (sock, stamped, tx) = match sock {
        Ok(s) => s,
        Err(e) => {
            let kind = error_kind(&e);
            let now = x.now();
            for t in lane.take_queued() {
                x.failed(t, kind, now);
            }
            x.event("udp_socket_error");
            return;
        }
    };
    let fd = sock.as_raw_fd();
    let header = meter::udp_header(addr);
    let mut ids = IdTable::with_capacity(64);
    let out_size = 512.max(opts.udp_payload.min(65_535));
    let in_size = opts.udp_payload.clamp(512, 65_535);
    let mut tokens: Vec<Token> = Vec::new();
    // Queries whose transmit stamps are still to be read (None: no transmit stamps).
    let mut pending = tx.map(|_| TxPending::default());
    let ends = tx == Some(TxStamps::Ends);
    loop {
        while lane.queued() > 0 {
            let mut out = Batch::take(out_size);
            send_batch(&sock, fd, &lane, &*x, &mut ids, &mut out, &mut tokens, header, pending.as_mut(), ends).await;
            out.give_back();
            // The stamps wait on the error queue, in the socket's receive buffer: they are read
            // with the answers, and here when a batch's worth piled up (no answers coming).
            if let Some(p) = pending.as_mut().filter(|p| p.len() >= mmsg::BATCH) {
                read_stamps(fd, p, &*x);
            }
        }
        if let Some(poll) = opts.udp_lazy_receive {
            // Scheduled loads with many queries a lane: read what arrived whenever this lane
            // wakes to send, or every `poll` while it has answers to come, instead of waking
            // for every answer. With nothing outstanding the lane sleeps until its next query.
            receive(&sock, fd, in_size, &mut ids, &*x, header, stamped, pending.as_mut());
            if lane.closing() {
                return;
            }
            if lane.in_flight() == 0 {
                forget_stamps(pending.as_mut());
                lane.wait().await;
                continue;
            }
            tokio::select! {
                biased;
                _ = lane.wait() => {}
                _ = tokio::time::sleep(poll) => {}
            }
            continue;
        }
        if lane.closing() {
            return;
        }
        if lane.in_flight() == 0 {
            forget_stamps(pending.as_mut());
        }
        let Sock::Tokio(registered) = &sock else { unreachable!("a raw socket is only used with lazy receive") };
        tokio::select! {
            biased;
            r = registered.readable() => {
                if r.is_err() {
                    return;
                }
                receive(&sock, fd, in_size, &mut ids, &*x, header, stamped, pending.as_mut());
            }
            _ = lane.wait() => {}
        }
    }
}

/// A lane's socket: registered with the runtime (its answers wake the thread), or, for
/// scheduled loads that read answers when they wake to send, not registered at all, so that
/// neither arriving answers nor freed send buffer space wake the thread between sends.
enum Sock {
    Tokio(UdpSocket),
    Raw(std::net::UdpSocket),
}

impl Sock {
    fn as_raw_fd(&self) -> i32 {
        match self {
            Sock::Tokio(s) => s.as_raw_fd(),
            Sock::Raw(s) => s.as_raw_fd(),
        }
    }

    /// Runs a non-blocking system call on the socket (through the runtime's readiness when
    /// registered).
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            Sock::Tokio(s) => s.try_io(interest, f),
            Sock::Raw(_) => f(),
        }
    }

    /// Waits until a send may succeed again (the send buffer was full).
    async fn writable(&self) {
        match self {
            Sock::Tokio(s) => {
                let _ = s.writable().await;
            }
            Sock::Raw(_) => tokio::time::sleep(std::time::Duration::from_micros(200)).await,
        }
    }
}

/// A lane with nothing outstanding needs no stamps: its queue of queries waiting for them
/// is let go (a million sockets of simulated clients, each idle most of the time, hold no
/// memory for it), and stamps still to come for them match nothing.
fn forget_stamps(pending: Option<&mut TxPending>) {
    if let Some(p) = pending {
        p.forget();
    }
}

/// Reads the transmit stamps waiting on the socket's error queue and hands them to the engine,
/// on the run's clock.
fn read_stamps<X: Exchange>(fd: i32, pending: &mut TxPending, x: &X) {
    if pending.is_empty() {
        return;
    }
    // The clocks once per read, after it: every stamp read is at or before that now.
    let mut clocks = None;
    crate::stamp::read_tx(fd, |id, at| {
        let &mut (now, s) = clocks.get_or_insert_with(|| (x.now(), crate::stamp::realtime_shift(&|| x.now())));
        let at = at.saturating_sub(s).min(now);
        pending.stamp_at(id, at, |t, at, between| {
            x.stamped(t, at, if between { Departure::Between } else { Departure::Kernel })
        });
    });
}

/// Reads every datagram waiting on the socket, in batches, and hands them to the engine with
/// their kernel receive time (after the transmit stamps of the queries they answer).
#[allow(clippy::too_many_arguments)]
fn receive<X: Exchange>(
    sock: &Sock,
    fd: i32,
    size: usize,
    ids: &mut IdTable,
    x: &X,
    header: u64,
    stamped: bool,
    pending: Option<&mut TxPending>,
) {
    if let Some(p) = pending {
        read_stamps(fd, p, x);
    }
    let mut inb = Batch::take(size);
    receive_into(sock, fd, &mut inb, ids, x, header, stamped);
    inb.give_back();
}

fn receive_into<X: Exchange>(
    sock: &Sock,
    fd: i32,
    inb: &mut Batch,
    ids: &mut IdTable,
    x: &X,
    header: u64,
    stamped: bool,
) {
    let registered = matches!(sock, Sock::Tokio(_));
    loop {
        // A short batch most likely emptied the socket: the closure then says WouldBlock, so
        // that the runtime clears the socket's readiness now (unless a datagram came since it
        // was seen) rather than after one more system call that would find nothing.
        let mut short = None;
        let got = sock.try_io(Interest::READABLE, || {
            let n = inb.recv(fd)?;
            if registered && n < inb.capacity() {
                short = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let got = match (got, short) {
            (Err(e), Some(n)) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            (got, _) => got,
        };
        match got {
            Ok(n) => {
                let now = x.now();
                // Kernel stamps are CLOCK_REALTIME; the run's clock is CLOCK_MONOTONIC.
                let shift = if stamped { crate::stamp::realtime_shift(&|| x.now()) } else { 0 };
                let mut bytes = 0;
                for i in 0..n {
                    bytes += inb.len_of(i) as u64;
                    let at = match inb.stamp(i) {
                        0 => now,
                        s => s.saturating_sub(shift).min(now),
                    };
                    deliver(inb.msg(i), ids, x, at);
                }
                if n > 0 {
                    let n = n as u64;
                    x.wire(&WireStats { bytes_in: bytes + n * header, packets_in: n, ..WireStats::default() });
                }
                if n < inb.capacity() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // ICMP port unreachable for an earlier datagram: not tied to a query.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => x.event("udp_icmp_refused"),
            Err(_) => {
                x.event("udp_recv_error");
                return;
            }
        }
    }
}

/// Takes up to one batch of queued queries, stamps IDs, sends them with one system call
/// (more if the kernel takes part of it). `header`: IP and UDP header bytes per datagram.
#[allow(clippy::too_many_arguments)]
async fn send_batch<X: Exchange>(
    sock: &Sock,
    fd: i32,
    lane: &Lane,
    x: &X,
    ids: &mut IdTable,
    out: &mut Batch,
    tokens: &mut Vec<Token>,
    header: u64,
    mut pending: Option<&mut TxPending>,
    ends: bool,
) {
    out.count = 0;
    tokens.clear();
    while !out.is_full() {
        let Some(t) = lane.pop() else { break };
        let Some(id) = ids.insert(t, |o| x.is_live(o)) else {
            x.failed(t, ErrorKind::Overload, x.now());
            continue;
        };
        if !x.encode(t, id, out.next_buf()) {
            ids.remove(id);
            continue;
        }
        out.commit();
        tokens.push(t);
    }
    let mut from = 0;
    while from < out.count {
        let ends = ends && pending.is_some();
        match sock.try_io(Interest::WRITABLE, || out.send_asking(fd, from, ends)) {
            Ok(n) => {
                let now = x.now();
                let mut bytes = 0;
                let (last, whole) = (out.count - 1, from + n == out.count);
                let asks = |i: usize| mmsg::asks_stamp(from, last, i);
                for (i, &t) in tokens.iter().enumerate().skip(from).take(n) {
                    bytes += out.len_of(i) as u64;
                    x.sent(t, out.len_of(i), now);
                    if let Some(p) = pending.as_deref_mut() {
                        // The kernel numbers the datagrams it stamps as they leave, from 0.
                        if !ends || asks(i) {
                            let id = p.next;
                            p.push(id, t);
                            p.next += 1;
                        } else if whole || (i..from + n).any(asks) {
                            // Between two stamped datagrams of the call (the next one's number
                            // is the next). A call the kernel took only part of left its last
                            // unsent: the ones after its last stamped one that left have no
                            // stamp after them, and keep volley's clock.
                            let (a, b) = (
                                (from..i).rev().find(|&j| asks(j)).unwrap_or(from),
                                (i..=last).find(|&j| asks(j)).unwrap_or(last),
                            );
                            p.push_between(p.next, t, (i - a) as f32 / (b - a) as f32);
                        }
                    }
                }
                let k = n as u64;
                x.wire(&WireStats { bytes_out: bytes + k * header, packets_out: k, ..WireStats::default() });
                from += n;
            }
            // A datagram that did not leave takes no number: the kernel gives its count back
            // when a send fails (`hold_tskey` in __ip_append_data).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => sock.writable().await,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => x.event("udp_icmp_refused"),
            Err(e) => {
                // This datagram cannot leave: it fails; the rest are tried again.
                let now = x.now();
                let msg = out.msg(from);
                if msg.len() >= 2 {
                    ids.remove(u16::from_be_bytes([msg[0], msg[1]]));
                }
                x.failed(tokens[from], error_kind(&e), now);
                from += 1;
            }
        }
    }
}
