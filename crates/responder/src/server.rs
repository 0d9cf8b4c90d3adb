//! Starting and stopping the responder: sockets, threads, stop signal, stats.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use thiserror::Error;
use tokio::sync::watch;

use crate::answer::{self, AnswerConfig, Answerer, Transport};
use crate::ctx::Ctx;
use crate::faults::{Active, Fault};
use crate::stats::{Counters, Stats};
use crate::tls::{TlsConfig, TlsCounters};

/// Everything the responder needs to start. Plain data; the command line fills it in.
///
/// Ports: `None` turns a transport off, `Some(0)` takes any free port. UDP and TCP are on by
/// default; DoT, DoH, DoH/3 and DoQ are off unless given a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Address to bind (default 127.0.0.1).
    pub listen: IpAddr,
    /// UDP port (default `Some(0)`).
    pub udp_port: Option<u16>,
    /// TCP port (default `Some(0)`).
    pub tcp_port: Option<u16>,
    /// DoT port, TCP (default `None`).
    pub dot_port: Option<u16>,
    /// DoH port, TCP: HTTP/1.1 and HTTP/2 chosen by ALPN (default `None`).
    pub doh_port: Option<u16>,
    /// DoH over HTTP/3 port, UDP (default `None`).
    pub doh3_port: Option<u16>,
    /// DoQ port, UDP (default `None`).
    pub doq_port: Option<u16>,
    /// I/O threads per transport; 0 means one per available core (default 0).
    pub threads: usize,
    /// A connection with nothing received, nothing pending and nothing written for this
    /// long is closed (TCP and DoT: FIN; HTTP/2: GOAWAY; HTTP/1.1: FIN when no request
    /// comes on a kept-alive connection; QUIC: the transport's idle timeout, which clients
    /// see as such) (default 10 s).
    pub idle_timeout: Duration,
    /// Most concurrent streams per HTTP/2 or QUIC connection (default 100).
    pub max_streams: u32,
    /// Close a connection gracefully after answering this many queries on it (TCP and DoT:
    /// FIN after the last answer; HTTP/2 and HTTP/3: GOAWAY, then close when its streams are
    /// done; HTTP/1.1: `connection: close` on the last response; DoQ: CONNECTION_CLOSE with
    /// DOQ_NO_ERROR once the last stream is answered). None: no limit (default).
    pub max_queries_per_conn: Option<u64>,
    /// TCP and DoT: answer the queries of a connection in the order they arrived, an answer
    /// ready early waiting behind a delayed one (as a server that works through a
    /// connection's queries one at a time does; RFC 7766 allows either). Off: each answer
    /// leaves as soon as it is ready (default).
    pub in_order: bool,
    /// The most connections each connection-oriented listener (TCP, DoT, DoH, DoH/3, DoQ) holds
    /// at once, over all its threads; more are closed right after accept (QUIC: refused with
    /// CONNECTION_REFUSED). None: no limit (default).
    pub max_conns: Option<u64>,
    /// A query or request begun on a connection must arrive whole within this long (TCP and
    /// DoT: a message whose length prefix came; HTTP/1.1 and HTTP/2: a POST body; TLS and
    /// QUIC: the handshake, bounded by the idle timeout too), else the connection is closed
    /// and counted as `closed_slow` (default 5 s). Bytes dribbled in do not extend it, as
    /// they do the idle timeout: this is what ends slowloris and stalled length prefixes.
    pub request_timeout: Duration,
    /// The most TLS (DoT, DoH) or QUIC (DoQ, DoH/3) handshakes in progress per listener,
    /// over all its threads; meanwhile new TCP connections wait in the kernel's accept queue,
    /// QUIC ones are refused and counted as `refused_handshakes`. None: no limit (default `Some(1024)`).
    pub max_handshakes: Option<u64>,
    /// TCP and DoT: the most answer bytes a connection may hold unsent (written but not yet
    /// taken by the peer, plus delayed answers waiting); beyond it the connection reads
    /// nothing more until the client reads (default 256 KiB).
    pub max_pending_bytes: usize,
    /// At most this many queries per second from each client IP address, on every transport
    /// (a token bucket per address); the rest get no DNS answer and are counted as
    /// `rate_limited` (dropped over UDP, TCP and DoT; DoH answers 429, DoQ resets the
    /// stream). None: no limit (default).
    pub max_qps_per_client: Option<u64>,
    /// UDP: at most this many error answers (FORMERR, NOTIMP: to messages that are no query
    /// the server can read) a second from each UDP thread; the rest are withheld and counted
    /// as `errors_withheld`, as unbound's workers send at most 100 a second. A flood of junk
    /// from forged sources then costs each datagram a read and a look at its header, not a
    /// send, and reflects nothing. None: every error answered (default
    /// `Some(`[`UDP_ERROR_RATE`]`)`).
    pub udp_error_rate: Option<u32>,
    /// The DoH path (default `/dns-query`).
    pub doh_path: String,
    /// Certificates, tickets, 0-RTT.
    pub tls: TlsConfig,
    /// QUIC address validation: answer every Initial from an unvalidated address with a
    /// Retry (default off).
    pub retry: bool,
    /// QUIC address validation tokens (NEW_TOKEN frames, RFC 9000 section 8.1.3) sent on each
    /// connection, which let the client's later connections from the same address skip the
    /// anti-amplification limit and Retry (default 2, as quinn's; 0: none sent or accepted).
    pub quic_tokens: u32,
    /// Send the tokens but accept none: every connection's address stays unvalidated until its
    /// handshake, token or not, as seeds/002 found DoQ resolvers behave (default off).
    pub quic_tokens_ignored: bool,
    /// UDP: send same-size answers to one address as one segmented train (UDP_SEGMENT)
    /// (default on). Off: one message per answer, so that a capture on the sending host shows
    /// each answer as its own packet (a packet capture sees a train before segmentation).
    pub udp_gso: bool,
    /// The receive buffer (SO_RCVBUF) of each UDP, DoQ and DoH/3 socket, in bytes, as asked of
    /// the kernel (which doubles it for its bookkeeping and caps it at `net.core.rmem_max`)
    /// (default 4 MiB). Deep: a load generator's bursts are queued rather than lost. Under a
    /// flood a deep queue is one a good query waits in; the kernel's default (212,992 on
    /// Linux, what unbound and dnsdist keep) loses some queries instead.
    pub udp_recv_buffer: usize,
    /// DoQ and DoH/3: a qlog trace of each connection in this directory (`--qlog`).
    pub qlog: Option<std::path::PathBuf>,
    /// Misbehaviour on purpose (see [`Fault`]).
    pub faults: Vec<Fault>,
    /// What to answer.
    pub answer: AnswerConfig,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
            udp_port: Some(0),
            tcp_port: Some(0),
            dot_port: None,
            doh_port: None,
            doh3_port: None,
            doq_port: None,
            threads: 0,
            idle_timeout: Duration::from_secs(10),
            max_streams: 100,
            max_queries_per_conn: None,
            in_order: false,
            max_conns: None,
            request_timeout: Duration::from_secs(5),
            max_handshakes: Some(1024),
            max_pending_bytes: 256 * 1024,
            max_qps_per_client: None,
            udp_error_rate: Some(UDP_ERROR_RATE),
            doh_path: "/dns-query".to_string(),
            tls: TlsConfig::default(),
            retry: false,
            quic_tokens: 2,
            quic_tokens_ignored: false,
            udp_gso: true,
            udp_recv_buffer: UDP_RECV_BUFFER,
            qlog: None,
            faults: Vec::new(),
            answer: AnswerConfig::default(),
        }
    }
}

impl ResponderConfig {
    /// Whether a transport that needs a certificate is on.
    pub fn needs_tls(&self) -> bool {
        self.dot_port.is_some() || self.doh_port.is_some() || self.doh3_port.is_some() || self.doq_port.is_some()
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

/// Raised once to stop every thread: an atomic flag plus an eventfd that the UDP threads'
/// `ppoll` and the I/O threads' runtimes watch. Made before the threads, so that the eventfd
/// is in every thread's descriptor table under the same number: raising it writes to the
/// object they all watch. (A tokio channel would wake an I/O thread's runtime through that
/// runtime's own eventfd, by a number that means nothing in another thread's table.)
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
    tls_counters: Arc<TlsCounters>,
    ca_pem: Option<String>,
    stop: Arc<StopSignal>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder").field("addresses", &self.addresses).finish_non_exhaustive()
    }
}

impl Responder {
    /// One entry per listener, with the port actually bound, in this order: UDP, TCP, DoT,
    /// DoH, DoH/3, DoQ (those that run).
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
        s.tls_resumed += self.tls_counters.quic_resumed.load(Ordering::Relaxed);
        s
    }

    /// A reader of the CPU time (user + system) the responder's threads have used so far,
    /// nanoseconds, that outlives this borrow (for another thread: the engine reads it at the
    /// start and end of a run and each second). It reads the threads' CPU-time clocks, which
    /// the kernel lets only this process read; a thread that has ended (the responder stopped)
    /// reads as nothing.
    pub fn cpu_clock(&self) -> impl Fn() -> u64 + Send + Sync + 'static {
        use std::os::unix::thread::JoinHandleExt;
        let clocks: Vec<libc::clockid_t> = self
            .threads
            .iter()
            .filter_map(|t| {
                let mut id: libc::clockid_t = 0;
                // SAFETY: the thread is alive (joined only when the responder stops); the call
                // writes into a variable we own.
                (unsafe { libc::pthread_getcpuclockid(t.as_pthread_t(), &mut id) } == 0).then_some(id)
            })
            .collect();
        move || {
            clocks
                .iter()
                .filter_map(|&id| {
                    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                    // SAFETY: clock_gettime writes into the timespec we own; a clock whose
                    // thread ended returns an error.
                    (unsafe { libc::clock_gettime(id, &mut ts) } == 0)
                        .then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
                })
                .sum()
        }
    }

    /// The generated CA certificate (PEM) that clients must trust to verify the responder;
    /// None when the certificate came from files or no TLS transport runs.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Stops every thread and waits for them. Answers still waiting for their delay are not sent.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.raise();
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

/// [`ResponderConfig::udp_recv_buffer`] by default, and each UDP socket's send buffer.
pub const UDP_RECV_BUFFER: usize = 4 << 20;
const UDP_SEND_BUFFER: usize = 4 << 20;
/// [`ResponderConfig::udp_error_rate`] by default: error answers a second per UDP thread, as
/// unbound's `ERROR_RATELIMIT`.
pub const UDP_ERROR_RATE: u32 = 100;

/// The smallest [`ResponderConfig::udp_recv_buffer`] accepted: a few datagrams of ordinary
/// size (the kernel's own floor is 2,304).
pub const MIN_UDP_RECV_BUFFER: usize = 4096;
/// The largest [`ResponderConfig::udp_recv_buffer`] accepted.
pub const MAX_UDP_RECV_BUFFER: usize = 1 << 30;

/// Binds `count` sockets to the same address with SO_REUSEPORT, after a probe that the
/// address is free (with port 0, the probe picks the port and every socket joins it). With
/// port 0, another process may take the port the probe picked between the probe's close and
/// the group's bind (seen in CI: a parallel test's client socket): then again, with a new one.
fn bind_all(
    transport: Transport,
    addr: SocketAddr,
    count: usize,
    recv_buffer: usize,
) -> Result<(SocketAddr, Vec<Socket>), ResponderError> {
    let mut tries = if addr.port() == 0 { 8 } else { 1 };
    loop {
        tries -= 1;
        match bind_group(transport, addr, count, recv_buffer) {
            Err(ResponderError::Bind { source, .. }) if tries > 0 && source.kind() == io::ErrorKind::AddrInUse => {}
            r => return r,
        }
    }
}

/// One try of [`bind_all`].
fn bind_group(
    transport: Transport,
    addr: SocketAddr,
    count: usize,
    recv_buffer: usize,
) -> Result<(SocketAddr, Vec<Socket>), ResponderError> {
    let mut out = Vec::with_capacity(count);
    let err = |addr, source| ResponderError::Bind { transport, addr, source };
    let datagram = transport.is_datagram();
    let (ty, proto) = if datagram { (Type::DGRAM, Protocol::UDP) } else { (Type::STREAM, Protocol::TCP) };
    let mut addr = probe(addr, ty, proto).map_err(|e| err(addr, e))?;
    for _ in 0..count {
        let s = socket_for(addr, ty, proto, true).map_err(|e| err(addr, e))?;
        if datagram {
            // Best effort (the kernel caps both at its rmem_max and wmem_max): deep buffers
            // absorb bursts at high rates.
            let _ = s.set_recv_buffer_size(recv_buffer);
            let _ = s.set_send_buffer_size(UDP_SEND_BUFFER);
        }
        s.bind(&addr.into()).map_err(|e| err(addr, e))?;
        if !datagram {
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

/// The listeners of one async I/O thread (one socket per transport that runs).
#[derive(Default)]
struct IoSockets {
    tcp: Option<Socket>,
    dot: Option<Socket>,
    doh: Option<Socket>,
    doh3: Option<Socket>,
    doq: Option<Socket>,
}

impl IoSockets {
    fn slots(&mut self) -> [&mut Option<Socket>; 5] {
        [&mut self.tcp, &mut self.dot, &mut self.doh, &mut self.doh3, &mut self.doq]
    }

    /// The descriptors' numbers, for a thread to take them over after
    /// [`own_descriptor_table`].
    fn raw(&mut self) -> [Option<RawFd>; 5] {
        self.slots().map(|s| s.as_ref().map(|s| s.as_raw_fd()))
    }

    /// Sockets from descriptor numbers of this thread's table.
    fn from_raw(raw: [Option<RawFd>; 5]) -> IoSockets {
        let mut s = IoSockets::default();
        for (slot, fd) in s.slots().into_iter().zip(raw) {
            // SAFETY: each number is one listener the spawning thread handed over and no longer
            // uses (it closed its copy, or forgot it where the table is shared).
            *slot = fd.map(|fd| unsafe { Socket::from_raw_fd(fd) });
        }
        s
    }
}

/// Gives the calling thread a descriptor table of its own (`unshare(CLONE_FILES)`), so that
/// the open-files limit bounds each I/O thread's connections, not the process's: T threads
/// may hold T times as many. (The generator's workers do the same.) False where the kernel
/// or a sandbox refuses: the thread then shares the process's table.
fn own_descriptor_table() -> bool {
    // SAFETY: unshare with CLONE_FILES only copies this thread's descriptor table.
    unsafe { libc::unshare(libc::CLONE_FILES) == 0 }
}

/// What every async I/O thread shares.
struct IoShared {
    answerer: Arc<Answerer>,
    idle_timeout: Duration,
    max_streams: u32,
    max_queries: Option<u64>,
    in_order: bool,
    limits: Arc<crate::policy::Limits>,
    request_timeout: Duration,
    max_pending_bytes: usize,
    client_rate: Option<Arc<crate::policy::ClientRate>>,
    doh_path: Arc<str>,
    faults: Arc<Active>,
    cache_control: http::HeaderValue,
    dot_tls: Option<Arc<rustls::ServerConfig>>,
    doh_tls: Option<Arc<rustls::ServerConfig>>,
    doh3_quic: Option<crate::quic::Config>,
    doq_quic: Option<crate::quic::Config>,
    retry: bool,
    zero_rtt: bool,
}

fn check(config: &ResponderConfig) -> Result<(), String> {
    answer::validate(&config.answer)?;
    let all = [config.udp_port, config.tcp_port, config.dot_port, config.doh_port, config.doh3_port, config.doq_port];
    if all.iter().all(Option::is_none) {
        return Err("every transport is disabled: nothing to serve".into());
    }
    if !config.doh_path.starts_with('/') || config.doh_path.bytes().any(|b| b <= b' ' || b == b'?' || b == 0x7f) {
        return Err(format!("invalid DoH path '{}': must start with '/', no spaces or '?'", config.doh_path));
    }
    if config.max_streams == 0 {
        return Err("max streams must be at least 1".into());
    }
    if config.max_queries_per_conn == Some(0) {
        return Err("max queries per connection must be at least 1".into());
    }
    if config.max_conns == Some(0) {
        return Err("max connections must be at least 1".into());
    }
    if config.max_handshakes == Some(0) {
        return Err("max handshakes must be at least 1".into());
    }
    if config.max_qps_per_client == Some(0) {
        return Err("max queries per second per client must be at least 1".into());
    }
    if config.request_timeout.is_zero() {
        return Err("request timeout must be greater than zero".into());
    }
    if !(MIN_UDP_RECV_BUFFER..=MAX_UDP_RECV_BUFFER).contains(&config.udp_recv_buffer) {
        return Err(format!(
            "UDP receive buffer must be {MIN_UDP_RECV_BUFFER} to {MAX_UDP_RECV_BUFFER} bytes, not {}",
            config.udp_recv_buffer
        ));
    }
    if config.max_pending_bytes < 65_537 {
        return Err("max pending bytes must be at least 65537 (one largest DNS message and its length)".into());
    }
    if config.tls.zero_rtt && !config.tls.tickets {
        return Err("0-RTT needs session resumption: --zero-rtt and --no-tickets do not go together".into());
    }
    Active::new(&config.faults)?;
    Ok(())
}

/// Binds every listener and starts the I/O threads. Returns once all sockets are bound (and
/// the certificate made), so [`Responder::addresses`] can be printed and queried right away.
pub fn start(config: ResponderConfig) -> Result<Responder, ResponderError> {
    check(&config).map_err(ResponderError::Config)?;
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let answerer = Arc::new(Answerer::new(config.answer.clone()));
    let stop = Arc::new(StopSignal::new()?);
    let tls_counters = Arc::new(TlsCounters::default());
    let client_rate = config.max_qps_per_client.map(|r| Arc::new(crate::policy::ClientRate::new(r)));

    // Certificates first (RSA keys take a moment), then the sockets.
    let mut ca_pem = None;
    let mut shared = IoShared {
        answerer: answerer.clone(),
        idle_timeout: config.idle_timeout,
        max_streams: config.max_streams,
        max_queries: config.max_queries_per_conn,
        in_order: config.in_order,
        limits: Arc::new(crate::policy::Limits::new(config.max_conns, config.max_handshakes)),
        request_timeout: config.request_timeout,
        max_pending_bytes: config.max_pending_bytes,
        client_rate: client_rate.clone(),
        doh_path: Arc::from(config.doh_path.as_str()),
        faults: Arc::new(Active::new(&config.faults).map_err(ResponderError::Config)?),
        cache_control: http::HeaderValue::from_str(&format!("max-age={}", config.answer.ttl))
            .map_err(|e| ResponderError::Config(e.to_string()))?,
        dot_tls: None,
        doh_tls: None,
        doh3_quic: None,
        doq_quic: None,
        retry: config.retry,
        zero_rtt: config.tls.zero_rtt,
    };
    if config.needs_tls() {
        let m = crate::tls::material(&config.tls, config.listen).map_err(ResponderError::Config)?;
        if let Some(path) = &config.tls.ca_out {
            let pem = m.ca_pem.as_deref().ok_or_else(|| {
                ResponderError::Config("--ca-out needs a generated certificate (not --cert/--key)".into())
            })?;
            volley_atomic::write(path, pem.as_bytes())
                .map_err(|e| ResponderError::Config(format!("cannot write the CA to {}: {e}", path.display())))?;
        }
        let tls = &config.tls;
        let cfg = |alpn: &[&[u8]], quic: bool| {
            crate::tls::server_config(&m, tls, alpn, quic.then_some(&tls_counters)).map_err(ResponderError::Config)
        };
        let quic = |alpn: &[u8], h3: bool| -> Result<crate::quic::Config, ResponderError> {
            crate::quic::config(
                cfg(&[alpn], true)?,
                &m.key,
                config.idle_timeout,
                config.max_streams,
                h3,
                config.udp_gso,
                config.quic_tokens,
                config.quic_tokens_ignored,
                config.qlog.clone(),
            )
            .map_err(ResponderError::Config)
        };
        if config.dot_port.is_some() {
            shared.dot_tls = Some(cfg(&[crate::dot::ALPN], false)?);
        }
        if config.doh_port.is_some() {
            shared.doh_tls = Some(cfg(crate::doh::ALPN, false)?);
        }
        if config.doh3_port.is_some() {
            shared.doh3_quic = Some(quic(crate::doh3::ALPN, true)?);
        }
        if config.doq_port.is_some() {
            shared.doq_quic = Some(quic(crate::doq::ALPN, false)?);
        }
        ca_pem = m.ca_pem;
    }

    let mut addresses = Vec::new();
    let mut io: Vec<IoSockets> = (0..threads).map(|_| IoSockets::default()).collect();
    let mut bind = |transport: Transport, port: Option<u16>| -> Result<Vec<Socket>, ResponderError> {
        let Some(port) = port else { return Ok(Vec::new()) };
        let (a, s) = bind_all(transport, SocketAddr::new(config.listen, port), threads, config.udp_recv_buffer)?;
        addresses.push((transport, a));
        Ok(s)
    };
    let udp_sockets = bind(Transport::Udp, config.udp_port)?;
    type Slot = fn(&mut IoSockets) -> &mut Option<Socket>;
    let slots: [(Transport, Option<u16>, Slot); 5] = [
        (Transport::Tcp, config.tcp_port, |s| &mut s.tcp),
        (Transport::Dot, config.dot_port, |s| &mut s.dot),
        (Transport::Doh, config.doh_port, |s| &mut s.doh),
        (Transport::Doh3, config.doh3_port, |s| &mut s.doh3),
        (Transport::Doq, config.doq_port, |s| &mut s.doq),
    ];
    for (transport, port, slot) in slots {
        for (i, s) in bind(transport, port)?.into_iter().enumerate() {
            *slot(&mut io[i]) = Some(s);
        }
    }
    let async_on = [config.tcp_port, config.dot_port, config.doh_port, config.doh3_port, config.doq_port]
        .iter()
        .any(Option::is_some);

    let mut responder =
        Responder { addresses, counters: Vec::new(), tls_counters, ca_pem, stop: stop.clone(), threads: Vec::new() };
    for (i, s) in udp_sockets.into_iter().enumerate() {
        let counters = Arc::new(Counters::default());
        responder.counters.push(counters.clone());
        let (answerer, stop, rate) = (answerer.clone(), stop.clone(), client_rate.clone());
        let limits = crate::udp::Limits { gso: config.udp_gso, client_rate: rate, error_rate: config.udp_error_rate };
        let t = std::thread::Builder::new()
            .name(format!("volley-udp-{i}"))
            .spawn(move || crate::udp::serve(s.into(), answerer, counters, stop, limits))?;
        responder.threads.push(t);
    }
    if async_on {
        let shared = Arc::new(shared);
        for (i, mut sockets) in io.into_iter().enumerate() {
            let counters = Arc::new(Counters::default());
            responder.counters.push(counters.clone());
            let (shared, stop) = (shared.clone(), stop.clone());
            // The thread takes its own table first, then its listeners by number (copies in
            // its table); this thread then closes its own copies, so that a listener lives
            // exactly as long as the thread that serves it.
            let raw = sockets.raw();
            let (own_tx, own_rx) = std::sync::mpsc::channel();
            let t = std::thread::Builder::new().name(format!("volley-io-{i}")).spawn(move || {
                let _ = own_tx.send(own_descriptor_table());
                if let Err(e) = io_thread(IoSockets::from_raw(raw), shared, counters, stop) {
                    eprintln!("volley: I/O thread {i}: {e}");
                }
            })?;
            if own_rx.recv() != Ok(true) {
                // One table: the thread's sockets are these very descriptors.
                for s in sockets.slots() {
                    if let Some(s) = s.take() {
                        let _ = s.into_raw_fd();
                    }
                }
            }
            drop(sockets);
            responder.threads.push(t);
        }
    }
    Ok(responder)
}

/// A channel of this thread's runtime that turns true once `signal` is raised.
fn watch_stop(signal: Arc<StopSignal>) -> watch::Receiver<bool> {
    struct Watched(Arc<StopSignal>);
    impl AsRawFd for Watched {
        fn as_raw_fd(&self) -> RawFd {
            self.0.fd()
        }
    }
    let (tx, rx) = watch::channel(false);
    tokio::task::spawn_local(async move {
        // SAFETY: the eventfd is the signal's, open as long as the Arc this AsyncFd holds.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(Watched(signal.clone()), tokio::io::Interest::READABLE)
        };
        match fd {
            // Never read: the eventfd stays readable once raised.
            Ok(fd) => drop(fd.readable().await),
            Err(_) => {
                while !signal.raised() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        let _ = tx.send(true);
    });
    rx
}

/// One async I/O thread: a current-thread runtime serving this thread's listeners of every
/// connection-oriented transport until `stop` turns true.
fn io_thread(
    sockets: IoSockets,
    shared: Arc<IoShared>,
    counters: Arc<Counters>,
    signal: Arc<StopSignal>,
) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let stop = watch_stop(signal);
        let ctx = std::rc::Rc::new(Ctx {
            answerer: shared.answerer.clone(),
            counters,
            idle_timeout: shared.idle_timeout,
            max_queries: shared.max_queries,
            in_order: shared.in_order,
            limits: shared.limits.clone(),
            request_timeout: shared.request_timeout,
            max_pending_bytes: shared.max_pending_bytes,
            client_rate: shared.client_rate.clone(),
            open_conns: std::cell::Cell::new(0),
            room: Default::default(),
            crowded_at: crate::ctx::crowded_at(),
            max_streams: shared.max_streams,
            doh_path: shared.doh_path.clone(),
            faults: shared.faults.clone(),
            cache_control: shared.cache_control.clone(),
            handshaker: Default::default(),
        });
        let mut tasks = Vec::new();
        if let Some(s) = sockets.tcp {
            tasks.push(tokio::task::spawn_local(crate::tcp::serve(s.into(), ctx.clone(), stop.clone())));
        }
        if let (Some(s), Some(tls)) = (sockets.dot, &shared.dot_tls) {
            tasks.push(tokio::task::spawn_local(crate::dot::serve(s.into(), ctx.clone(), tls.clone(), stop.clone())));
        }
        if let (Some(s), Some(tls)) = (sockets.doh, &shared.doh_tls) {
            tasks.push(tokio::task::spawn_local(crate::doh::serve(s.into(), ctx.clone(), tls.clone(), stop.clone())));
        }
        let (retry, zero_rtt) = (shared.retry, shared.zero_rtt);
        if let (Some(s), Some(q)) = (sockets.doh3, &shared.doh3_quic) {
            let ep = crate::quic::endpoint(s.into(), q)?;
            let f = crate::quic::accept_loop(
                ep,
                q.clone(),
                ctx.clone(),
                Transport::Doh3,
                retry,
                zero_rtt,
                stop.clone(),
                crate::doh3::connection,
            );
            tasks.push(tokio::task::spawn_local(async move {
                f.await;
                Ok(())
            }));
        }
        if let (Some(s), Some(q)) = (sockets.doq, &shared.doq_quic) {
            let ep = crate::quic::endpoint(s.into(), q)?;
            let f = crate::quic::accept_loop(
                ep,
                q.clone(),
                ctx.clone(),
                Transport::Doq,
                retry,
                zero_rtt,
                stop.clone(),
                crate::doq::connection,
            );
            tasks.push(tokio::task::spawn_local(async move {
                f.await;
                Ok(())
            }));
        }
        for t in tasks {
            match t.await {
                Ok(Err(e)) => return Err(e),
                _ => continue,
            }
        }
        Ok(())
    })
    // Dropping the runtime drops (closes) the connections still open.
}
