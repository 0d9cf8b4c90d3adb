#![no_main]
//! RFC 7766 length-prefixed answers on a TCP or DoT stream.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_transport::fuzzing::length_prefixed(data));
