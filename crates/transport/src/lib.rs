//! volley-transport
