//! Client transports: how queries reach a server and answers come back.
//!
//! One folder per transport (`udp/`, `tcp/`; DoT, DoH and DoQ join the same way). A
//! transport knows sockets, framing and connections, and nothing of load models or
//! statistics: the load engine hands it queries through a [`Lane`] and learns their fate
//! through the [`Exchange`] trait it implements. A lane is one socket or connection slot;
//! its driver task reconnects when the server closes.

mod exchange;
mod idtable;
mod lane;
pub mod probe;
pub mod target;
pub mod tcp;
pub mod udp;

use std::rc::Rc;

pub use exchange::{deliver, error_kind, Exchange, Token};
pub use idtable::IdTable;
pub use lane::Lane;
pub use target::{Scheme, Target, TargetError};

/// Settings every transport's lanes share.
#[derive(Debug, Clone)]
pub struct LaneOptions {
    /// Largest response expected over UDP (receive buffer per datagram).
    pub udp_payload: usize,
    /// Most queries outstanding on one lane (DNS IDs are 16 bits).
    pub max_in_flight: u32,
    /// How long a connection attempt may take.
    pub connect_timeout: std::time::Duration,
}

impl Default for LaneOptions {
    fn default() -> Self {
        LaneOptions { udp_payload: 4096, max_in_flight: 65_000, connect_timeout: std::time::Duration::from_secs(5) }
    }
}

/// Starts the driver task of one lane on the current `LocalSet`.
pub fn spawn_lane<X: Exchange + 'static>(target: &Target, lane: Rc<Lane>, x: Rc<X>, opts: &LaneOptions) {
    lane.set_capacity(opts.max_in_flight);
    match target.scheme {
        Scheme::Udp => {
            tokio::task::spawn_local(udp::drive(target.addr, lane, x, opts.clone()));
        }
        Scheme::Tcp => {
            tokio::task::spawn_local(tcp::drive(target.addr, lane, x, opts.clone()));
        }
    }
}
