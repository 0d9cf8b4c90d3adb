//! Client transports: how queries reach a server and answers come back.
//!
//! One folder per transport (`udp/`, `tcp/`, `dot/`, `https/` for DoH over HTTP/1.1 and
//! HTTP/2, `h3/` for DoH over HTTP/3, `quic/` for DoQ), with `tls/` the client TLS they
//! share and `stream` the RFC 7766 framing TCP and DoT share. A transport knows sockets,
//! framing and connections, and nothing of load models or statistics: the load engine hands
//! it queries through a [`Lane`] and learns their fate through the [`Exchange`] trait it
//! implements. A lane is one socket or connection slot; its driver task reconnects when the
//! server closes.

pub mod dot;
mod exchange;
#[doc(hidden)]
pub mod fuzzing;
pub mod h3;
pub mod https;
mod idtable;
mod lane;
mod meter;
pub mod probe;
pub mod qlog;
pub mod quic;
pub mod sockopt;
mod source;
mod stamp;
mod stream;
pub mod target;
pub mod tcp;
pub mod tls;
pub mod udp;

use std::rc::Rc;

pub use exchange::{deliver, error_kind, Exchange, Token};
pub use idtable::IdTable;
pub use lane::{ConnPolicy, Lane};
pub use source::{ConnGate, Sources};
pub use target::{Scheme, Target, TargetError};
pub use tls::{TlsSettings, TlsVersion};

/// HTTP version of DNS over HTTPS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpVersion {
    /// HTTP/1.1: keep-alive, one request in flight per connection.
    Http1,
    /// HTTP/2: requests multiplexed on streams, up to the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    #[default]
    Http2,
    /// HTTP/3 over QUIC.
    Http3,
}

/// HTTP method of DNS over HTTPS (RFC 8484 section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DohMethod {
    /// `GET /dns-query?dns=BASE64URL` (no padding).
    Get,
    /// `POST` with the message as an `application/dns-message` body.
    #[default]
    Post,
}

/// Settings every transport's lanes share.
#[derive(Debug, Clone)]
pub struct LaneOptions {
    /// Largest response expected over UDP (receive buffer per datagram).
    pub udp_payload: usize,
    /// Most queries outstanding on one lane (DNS IDs are 16 bits).
    pub max_in_flight: u32,
    /// How long a connection attempt may take (TCP connect plus TLS, or QUIC handshake).
    pub connect_timeout: std::time::Duration,
    /// TLS settings for DoT, DoH and DoQ.
    pub tls: TlsSettings,
    /// HTTP version for `https://` targets (`h3://` is always HTTP/3).
    pub http: HttpVersion,
    /// HTTP method for DoH.
    pub doh_method: DohMethod,
    /// DoH over HTTP/1.1: requests in flight per connection (pipelining); 1: one at a time.
    pub h1_pipeline: u32,
    /// The run's query timeout: DoH and DoQ give up a request's stream after it (the engine
    /// has counted the query as timed out by then), so silent streams do not pile up.
    pub query_timeout: std::time::Duration,
    /// When the client replaces its connections (connection-based transports).
    pub conn: ConnPolicy,
    /// UDP: read answers when the lane wakes to send, or at least this often, rather than
    /// waking for each one (scheduled loads; answers keep their kernel receive time).
    pub udp_lazy_receive: Option<std::time::Duration>,
    /// Source addresses to spread lanes over (`--bind`); each lane takes the next one.
    pub sources: Option<Sources>,
    /// This lane's source address, taken from `sources` when the lane starts.
    pub local: Option<std::net::IpAddr>,
    /// A run-wide cap on new connections per second (`--conn-rate`).
    pub conn_gate: Option<ConnGate>,
    /// QUIC: send packets in segmentation-offload trains (UDP_SEGMENT), or one by one.
    pub udp_gso: bool,
    /// TLS: each lane keeps its own session store (simulated clients, each resuming only its
    /// own sessions) instead of the thread's shared one.
    pub own_sessions: bool,
    /// QUIC (DoQ, DoH/3): keep the address validation tokens servers send (NEW_TOKEN) and
    /// present one on the next connection to the same server name, as browsers and stubs do
    /// (`--quic-tokens`, on by default): a validated address spares the server's
    /// anti-amplification wait and Retry. Shared like the TLS session store (the thread's, or
    /// the lane's own with `own_sessions`).
    pub quic_tokens: bool,
    /// How many times a query that a connection's end left unprocessed is sent again
    /// (`--resend`; the engine decides, in [`Exchange::resend`]): its own timeout bounds it
    /// anyway. `u32::MAX`: no other bound.
    pub resend: u32,
    /// QUIC (DoQ, DoH/3): write a qlog trace of each connection into this directory (`--qlog`).
    pub qlog: Option<std::path::PathBuf>,
    /// Kernel transmit stamps (`--tx-stamps`, on by default): each query's departure is the
    /// kernel's send time where the transport supports it, volley's clock otherwise (None:
    /// off). The mode tells which UDP datagrams are stamped; the other transports stamp each
    /// write (TCP, TLS) or the first datagram after a stream is written (QUIC) either way.
    pub tx_stamps: Option<TxStamps>,
    /// UDP through AF_XDP (`--xdp`): the interface, program and socket map set up before the
    /// run; `None`: kernel sockets.
    pub xdp: Option<udp::xdp::Xdp>,
}

/// Which UDP datagrams the kernel stamps as they leave (`--tx-stamps`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TxStamps {
    /// Every one (`each`, the default): a stamp of its own for each query, at the kernel's cost
    /// per stamp.
    #[default]
    Each,
    /// Of each system call that sends a batch (`ends`): the first, the second, every 8th after
    /// it and the last (`udp::mmsg::asks_stamp`); the ones between take a time between the
    /// two stamps around them, by their place in the batch: a fifth of the stamps at 100,000
    /// qps, but a stall inside a batch moves the ones between (docs/calibrate.md).
    Ends,
}

impl Default for LaneOptions {
    fn default() -> Self {
        LaneOptions {
            udp_payload: 4096,
            max_in_flight: 65_000,
            connect_timeout: std::time::Duration::from_secs(5),
            tls: TlsSettings::default(),
            http: HttpVersion::default(),
            doh_method: DohMethod::default(),
            h1_pipeline: 1,
            query_timeout: std::time::Duration::from_secs(5),
            conn: ConnPolicy::default(),
            udp_lazy_receive: None,
            sources: None,
            local: None,
            conn_gate: None,
            udp_gso: true,
            own_sessions: false,
            quic_tokens: true,
            resend: u32::MAX,
            qlog: None,
            tx_stamps: Some(TxStamps::default()),
            xdp: None,
        }
    }
}

impl LaneOptions {
    /// The HTTP version a DoH target is spoken with (`h3://` forces HTTP/3).
    pub fn http_for(&self, scheme: Scheme) -> HttpVersion {
        if scheme == Scheme::H3 {
            HttpVersion::Http3
        } else {
            self.http
        }
    }
}

/// Starts the driver task of one lane on the current `LocalSet`. The lane's connection policy
/// is its own (set where it was made, and changed as its client's traffic changes), not
/// `opts.conn`.
pub fn spawn_lane<X: Exchange + 'static>(target: &Target, lane: Rc<Lane>, x: Rc<X>, opts: &LaneOptions) {
    let local;
    let opts = match &opts.sources {
        Some(s) => {
            local = LaneOptions { local: Some(s.take()), ..opts.clone() };
            &local
        }
        None => opts,
    };
    lane.set_capacity(opts.max_in_flight);
    match target.scheme {
        Scheme::Udp if opts.xdp.is_some() => {
            let xdp = opts.xdp.as_ref().expect("matched");
            let p = udp::xdp::prepare(xdp, opts);
            tokio::task::spawn_local(udp::xdp::drive(p, target.addr, lane, x));
        }
        Scheme::Udp => {
            // The socket is made now, not when the driver first runs: a run makes its lanes'
            // sockets before its clock starts.
            let sock = udp::prepare(target.addr, opts.local, opts.tx_stamps);
            tokio::task::spawn_local(udp::drive(sock, target.addr, lane, x, opts.clone()));
        }
        Scheme::Tcp => {
            tokio::task::spawn_local(tcp::drive(target.addr, lane, x, opts.clone()));
        }
        Scheme::Tls => {
            tokio::task::spawn_local(dot::drive(target.clone(), lane, x, opts.clone()));
        }
        Scheme::Https | Scheme::H3 => match opts.http_for(target.scheme) {
            HttpVersion::Http1 => {
                tokio::task::spawn_local(https::drive_h1(target.clone(), lane, x, opts.clone()));
            }
            HttpVersion::Http2 => {
                tokio::task::spawn_local(https::drive_h2(target.clone(), lane, x, opts.clone()));
            }
            HttpVersion::Http3 => {
                tokio::task::spawn_local(h3::drive(target.clone(), lane, x, opts.clone()));
            }
        },
        Scheme::Quic => {
            tokio::task::spawn_local(quic::drive(target.clone(), lane, x, opts.clone()));
        }
    }
}
