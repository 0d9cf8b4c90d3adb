#![no_main]
//! Pipelined HTTP/1.1 DoH responses.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_transport::fuzzing::http1(data));
