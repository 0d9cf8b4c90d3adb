#![no_main]
//! volley.clients/1 files.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_replay::fuzzing::clients(data));
