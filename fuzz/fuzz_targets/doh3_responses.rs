#![no_main]
//! HTTP/3 DoH responses: the h3 client over an in-memory QUIC connection, the server's streams from the fuzzer.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_transport::fuzzing::http3(data));
