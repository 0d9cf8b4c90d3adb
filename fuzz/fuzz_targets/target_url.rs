#![no_main]
//! Target URLs on the command line.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_transport::fuzzing::target(data));
