//! volley-engine
