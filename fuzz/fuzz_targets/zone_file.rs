#![no_main]
//! Zone files as `volley serve --zone` reads them, and answers from what they load.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_responder::fuzzing::zone_file(data));
