#![no_main]
//! Client profile TOML files.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_engine::fuzzing::profile(data));
