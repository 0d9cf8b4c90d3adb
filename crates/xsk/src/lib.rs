//! volley-xsk: AF_XDP by hand (`if_xdp.h`, `bpf(2)`), below the crates that use it (the UDP
//! transport's `--xdp` path and the link's `--device xdp`).
//!
//! - `ring`: an AF_XDP socket, its UMEM (frames in the process's memory) and its four rings;
//! - `bpf`: the XDP programs (assembled instruction by instruction, no compiler or libbpf),
//!   their socket maps, and the calls that load and attach them.

pub mod bpf;
pub mod ring;

pub use ring::{Umem, FRAME};
