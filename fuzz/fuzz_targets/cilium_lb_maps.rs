//! Fuzz target: the cilium lb/maps-dump parser never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ghostip_datapath::cilium::parse_lb_maps(&String::from_utf8_lossy(data));
});
