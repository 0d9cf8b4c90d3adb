//! Building responses: owned by the responder work (see crates/responder).
