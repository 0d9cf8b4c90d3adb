//! DNS wire format, sans-IO: the layer every other layer speaks through.
//!
//! Nothing here touches a socket or a clock. The generator uses [`query`] to build
//! queries and [`Header`]/[`question_key`] to match responses cheaply on the hot path;
//! the responder uses [`parse_query`] and [`response`] to answer; `volley query`
//! uses [`display`] to print a whole message the way dig/kdig do.

pub mod display;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod header;
mod name;
pub mod query;
pub mod response;
mod types;

pub use display::{format_message, rfc3339};
pub use error::WireError;
pub use header::{Header, HEADER_LEN};
pub use name::{parse_name, skip_name, Name};
pub use query::{parse_query, push_opt, question_key, Edns, ParsedQuery, QueryError, QueryOptions, QueryTemplate};
pub use response::QueryView;
pub use types::{Class, Opcode, QType, Rcode};

/// The largest DNS message (a TCP frame's 16-bit length).
pub const MAX_MESSAGE: usize = 65_535;
/// Classic UDP payload limit without EDNS (RFC 1035).
pub const CLASSIC_UDP: usize = 512;
