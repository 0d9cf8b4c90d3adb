#![no_main]
//! DoQ answer streams: scripted chunks, FIN, resets, lost connections, refused 0-RTT.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_transport::fuzzing::doq(data));
