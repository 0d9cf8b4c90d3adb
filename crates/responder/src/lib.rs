//! The volley responder: a DNS server that answers deterministically, on every transport,
//! from one sans-IO answer engine ([`Answerer`]).
//!
//! Transports are one module each (`udp`, `tcp`; DoT, DoH and DoQ come later) and only move
//! bytes: they hand each query to [`Answerer::answer`] and carry out its [`Verdict`].
//!
//! ```no_run
//! let responder = volley_responder::start(volley_responder::ResponderConfig::default()).unwrap();
//! for (transport, addr) in responder.addresses() {
//!     println!("listening {transport} {addr}");
//! }
//! responder.stop();
//! ```

mod answer;
mod duration;
mod server;
mod stats;
mod tcp;
mod udp;

pub use answer::{AnswerConfig, Answerer, DelayRule, Ratio, Transport, Verdict, MAX_LABEL_DELAY, MAX_TXT_SIZE};
pub use duration::parse_duration;
pub use server::{start, Responder, ResponderConfig, ResponderError};
pub use stats::Stats;
