#![no_main]
//! Queries on a TCP or DoT connection as the responder reads them (RFC 7766 framing).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_responder::fuzzing::stream(data));
