#![no_main]
//! DoH requests as the responder checks them.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_responder::fuzzing::doh_request(data));
