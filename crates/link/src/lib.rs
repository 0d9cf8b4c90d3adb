//! volley-link: an emulated network link between a network namespace (the generator's side)
//! and the host (the target's side), in user space, with netem's semantics.
//!
//! - `model`: the settings of each direction, as data;
//! - `pipe`: the scheduling core, sans-IO (packets and time in, packets and due times out);
//! - `spec`: `--link` specs (`delay=20ms,loss=1%`, `up:`/`down:`), built-in and TOML profiles;
//! - `sys` and `run`: the namespace, the two devices (TUN, or veth pairs with AF_XDP sockets:
//!   `xdp`) and the forwarder thread.
//!
//! See docs/link.md.

#[doc(hidden)]
pub mod fuzzing;
pub mod model;
pub mod pipe;
pub mod rng;
pub mod spec;

pub use model::{DirConfig, Dist, LinkConfig, Loss, Nanos, QueueLimit, Rate, Trace};
pub use pipe::{Counters, Departure, Pipe};
pub mod run;
pub mod sys;
pub mod xdp;

pub use run::{Addresses, Device, Link, LinkError, LinkReport, LinkSample};
