//! Starting and stopping the responder: sockets, threads, stop signal, stats.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use thiserror::Error;
use tokio::sync::watch;

use crate::answer::{self, AnswerConfig, Answerer, Transport};
use crate::stats::{Counters, Stats};

/// Everything the responder needs to start. Plain data; the command line fills it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Address to bind (default 127.0.0.1).
    pub listen: IpAddr,
    /// UDP port; `None` disables UDP, `Some(0)` takes any free port (default `Some(0)`).
    pub udp_port: Option<u16>,
    /// TCP port; `None` disables TCP, `Some(0)` takes any free port (default `Some(0)`).
    pub tcp_port: Option<u16>,
    /// I/O threads per transport; 0 means one per available core (default 0).
    pub threads: usize,
    /// A TCP connection with nothing received, nothing pending and nothing written for this
    /// long is closed with a FIN (default 10 s).
    pub idle_timeout: Duration,
    /// What to answer.
    pub answer: AnswerConfig,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
            udp_port: Some(0),
            tcp_port: Some(0),
            threads: 0,
            idle_timeout: Duration::from_secs(10),
            answer: AnswerConfig::default(),
        }
    }
}

/// Why the responder did not start.
#[derive(Debug, Error)]
pub enum ResponderError {
    /// A socket could not be bound (address in use, not local, no permission).
    #[error("cannot listen on {transport} {addr}: {source}")]
    Bind {
        transport: Transport,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The settings are inconsistent (e.g. a rule with M = 0, both transports off).
    #[error("{0}")]
    Config(String),
    /// Anything else from the operating system (threads, eventfd).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Raised once to stop the UDP threads: an atomic flag plus an eventfd their `ppoll` watches.
pub(crate) struct StopSignal {
    flag: AtomicBool,
    fd: OwnedFd,
}

impl StopSignal {
    fn new() -> io::Result<StopSignal> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(StopSignal { flag: AtomicBool::new(false), fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    fn raise(&self) {
        self.flag.store(true, Ordering::Relaxed);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd; it stays readable for every poller.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// A running responder. Dropping it stops it too.
pub struct Responder {
    addresses: Vec<(Transport, SocketAddr)>,
    counters: Vec<Arc<Counters>>,
    udp_stop: Arc<StopSignal>,
    tcp_stop: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder").field("addresses", &self.addresses).finish_non_exhaustive()
    }
}

impl Responder {
    /// One entry per listener: UDP first, then TCP, with the ports actually bound.
    pub fn addresses(&self) -> &[(Transport, SocketAddr)] {
        &self.addresses
    }

    /// The address of a transport's listener, if it runs.
    pub fn address(&self, transport: Transport) -> Option<SocketAddr> {
        self.addresses.iter().find(|(t, _)| *t == transport).map(|(_, a)| *a)
    }

    /// Totals so far, summed over every thread (cheap: a few relaxed loads per thread).
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for c in &self.counters {
            s += c.snapshot();
        }
        s
    }

    /// Stops every thread and waits for them. Answers still waiting for their delay are not sent.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.udp_stop.raise();
        let _ = self.tcp_stop.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn socket_for(addr: SocketAddr, ty: Type, proto: Protocol, reuse_port: bool) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    if ty == Type::STREAM {
        // Restarting right after a run must not fail on connections left in TIME_WAIT; a
        // listening socket still blocks the bind.
        s.set_reuse_address(true)?;
    }
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Binds a socket *without* SO_REUSEPORT and closes it: fails when the address is in use,
/// even by another process of the same user that set SO_REUSEPORT (which the group bind
/// below would otherwise join silently). Port 0 resolves to a free port.
fn probe(addr: SocketAddr, ty: Type, proto: Protocol) -> io::Result<SocketAddr> {
    let s = socket_for(addr, ty, proto, false)?;
    s.bind(&addr.into())?;
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::AddrNotAvailable, "no local address after bind"))
}

/// Binds `count` sockets to the same address with SO_REUSEPORT, after a probe that the
/// address is free (with port 0, the probe picks the port and every socket joins it).
fn bind_all(transport: Transport, addr: SocketAddr, count: usize) -> Result<(SocketAddr, Vec<Socket>), ResponderError> {
    let mut out = Vec::with_capacity(count);
    let err = |addr, source| ResponderError::Bind { transport, addr, source };
    let (ty, proto) = match transport {
        Transport::Udp => (Type::DGRAM, Protocol::UDP),
        Transport::Tcp => (Type::STREAM, Protocol::TCP),
    };
    let mut addr = probe(addr, ty, proto).map_err(|e| err(addr, e))?;
    for _ in 0..count {
        let s = socket_for(addr, ty, proto, true).map_err(|e| err(addr, e))?;
        if transport == Transport::Udp {
            // Best effort: deep buffers absorb bursts at high rates.
            let _ = s.set_recv_buffer_size(4 << 20);
            let _ = s.set_send_buffer_size(4 << 20);
        }
        s.bind(&addr.into()).map_err(|e| err(addr, e))?;
        if transport == Transport::Tcp {
            s.listen(4096).map_err(|e| err(addr, e))?;
        }
        if addr.port() == 0 {
            // Only if the probe could not tell the port (never on Linux): take the first one's.
            if let Some(local) = s.local_addr().ok().and_then(|a| a.as_socket()) {
                addr.set_port(local.port());
            }
        }
        out.push(s);
    }
    Ok((addr, out))
}

/// Binds every listener and starts the I/O threads. Returns once all sockets are bound, so
/// [`Responder::addresses`] can be printed and queried right away.
pub fn start(config: ResponderConfig) -> Result<Responder, ResponderError> {
    answer::validate(&config.answer).map_err(ResponderError::Config)?;
    if config.udp_port.is_none() && config.tcp_port.is_none() {
        return Err(ResponderError::Config("both UDP and TCP are disabled: nothing to serve".into()));
    }
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let answerer = Arc::new(Answerer::new(config.answer.clone()));
    let udp_stop = Arc::new(StopSignal::new()?);
    let (tcp_stop, tcp_stop_rx) = watch::channel(false);
    let mut addresses = Vec::new();
    let mut udp_sockets = Vec::new();
    let mut tcp_sockets = Vec::new();
    if let Some(port) = config.udp_port {
        let (a, s) = bind_all(Transport::Udp, SocketAddr::new(config.listen, port), threads)?;
        addresses.push((Transport::Udp, a));
        udp_sockets = s;
    }
    if let Some(port) = config.tcp_port {
        let (a, s) = bind_all(Transport::Tcp, SocketAddr::new(config.listen, port), threads)?;
        addresses.push((Transport::Tcp, a));
        tcp_sockets = s;
    }
    let mut responder =
        Responder { addresses, counters: Vec::new(), udp_stop: udp_stop.clone(), tcp_stop, threads: Vec::new() };
    for (i, s) in udp_sockets.into_iter().enumerate() {
        let counters = Arc::new(Counters::default());
        responder.counters.push(counters.clone());
        let (answerer, stop) = (answerer.clone(), udp_stop.clone());
        let t = std::thread::Builder::new()
            .name(format!("volley-udp-{i}"))
            .spawn(move || crate::udp::serve(s.into(), answerer, counters, stop))?;
        responder.threads.push(t);
    }
    for (i, s) in tcp_sockets.into_iter().enumerate() {
        let counters = Arc::new(Counters::default());
        responder.counters.push(counters.clone());
        let shared = crate::tcp::Shared { answerer: answerer.clone(), counters, idle_timeout: config.idle_timeout };
        let stop = tcp_stop_rx.clone();
        let t = std::thread::Builder::new().name(format!("volley-tcp-{i}")).spawn(move || {
            if let Err(e) = crate::tcp::serve(s.into(), shared, stop) {
                eprintln!("volley: tcp thread {i}: {e}");
            }
        })?;
        responder.threads.push(t);
    }
    Ok(responder)
}
