#![no_main]
//! Experiment files (TOML): read, checked and planned.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_experiment::fuzzing::spec(data));
