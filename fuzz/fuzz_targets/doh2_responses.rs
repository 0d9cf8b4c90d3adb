#![no_main]
//! HTTP/2 DoH responses: the h2 client over an in-memory connection, the server's frames from the fuzzer.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_transport::fuzzing::http2(data));
