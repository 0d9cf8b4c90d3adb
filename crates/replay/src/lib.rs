//! Captures in, clients out: the first half of replay (issue 5, capability C5).
//!
//! [`capture`] reads pcap and pcapng files as a stream of packets and decodes their link, IP
//! and transport layers; [`tcp`] reassembles DNS-over-TCP messages from the client side of each
//! flow; [`extract`] keeps the queries, groups them by source address into clients and counts
//! everything it drops; [`clients`] is the `volley.clients/1` file those clients are written
//! to, and the reader the replay engine uses to stream them back.
//!
//! ```no_run
//! use volley_replay::ClientsFile;
//! let mut clients = ClientsFile::open("capture.clients")?;
//! println!("{} clients", clients.header().clients);
//! for client in clients.by_ref() {
//!     let client = client?;
//!     for q in &client.queries {
//!         println!("{} {} {} {}", client.id, q.offset_ns, q.qname, q.qtype);
//!     }
//! }
//! # Ok::<(), volley_replay::ClientsError>(())
//! ```

pub mod capture;
pub mod clients;
pub mod extract;
#[doc(hidden)]
pub mod fuzzing;
pub mod tcp;

pub use clients::{
    dump, Client, ClientQuery, ClientsError, ClientsErrorKind, ClientsFile, ClientsReader, ClientsWriter, Header,
};
pub use extract::{ExtractError, Extractor, Options, Report};
