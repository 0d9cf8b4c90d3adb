#![no_main]
//! Durations on the command line.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_responder::fuzzing::duration(data));
