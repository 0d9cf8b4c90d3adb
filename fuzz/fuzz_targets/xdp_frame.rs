#![no_main]
//! Ethernet frames on an AF_XDP socket's RX ring (`--xdp`).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| volley_transport::fuzzing::xdp_frame(data));
