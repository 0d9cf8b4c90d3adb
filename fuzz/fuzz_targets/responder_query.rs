#![no_main]
//! DNS queries as the responder's answer engine reads them.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_responder::fuzzing::query(data));
