#![no_main]
//! Link specs (volley link, --link).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_link::fuzzing::spec(data));
