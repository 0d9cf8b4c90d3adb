#![no_main]
//! Link profile TOML files.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_link::fuzzing::profile(data));
