#![no_main]
//! A DNS message as the generator reads an answer, and its dig-like display.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_wire::fuzzing::message(data));
