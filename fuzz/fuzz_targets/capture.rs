#![no_main]
//! pcap and pcapng files, extracted to clients.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_replay::fuzzing::capture(data));
