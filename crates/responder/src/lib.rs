//! volley-responder
