//! The volley responder: a DNS server that answers deterministically, on every transport,
//! from one sans-IO answer engine ([`Answerer`]).
//!
//! Transports are one module each and only move bytes: they hand each query to
//! [`Answerer::answer`] and carry out its [`Verdict`]. `udp` has its own threads
//! (`recvmmsg`/`sendmmsg`); `tcp`, `dot` (the TCP code over TLS), `doh` (HTTP/1.1 and
//! HTTP/2), `doh3` (HTTP/3) and `doq` share async I/O threads, one current-thread runtime
//! each, with one SO_REUSEPORT listener per transport per thread. `tls` makes or loads the
//! certificate; `faults` makes the responder misbehave on purpose.
//!
//! ```no_run
//! let config = volley_responder::ResponderConfig { dot_port: Some(0), ..Default::default() };
//! let responder = volley_responder::start(config).unwrap();
//! for (transport, addr) in responder.addresses() {
//!     println!("listening {transport} {addr}");
//! }
//! let _trust_this = responder.ca_pem();
//! responder.stop();
//! ```

mod answer;
mod ctx;
mod delayed;
mod doh;
mod doh3;
mod doq;
mod dot;
mod duration;
mod faults;
#[doc(hidden)]
pub mod fuzzing;
mod policy;
mod quic;
mod server;
mod stats;
mod tcp;
mod tls;
mod udp;
pub mod zone;

pub use answer::{AnswerConfig, Answerer, DelayRule, Ratio, Transport, Verdict, MAX_LABEL_DELAY, MAX_TXT_SIZE};
pub use duration::parse_duration;
pub use faults::{Fault, FAULT_NAMES};
pub use server::{
    start, Responder, ResponderConfig, ResponderError, MAX_UDP_RECV_BUFFER, MIN_UDP_RECV_BUFFER, UDP_ERROR_RATE,
    UDP_RECV_BUFFER,
};
pub use stats::Stats;
pub use tls::{CertSource, KeyType, TlsConfig, MAX_CHAIN_BYTES};
pub use zone::{load as load_zones, Zone, ZoneError, Zones};
