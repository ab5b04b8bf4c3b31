//! Fuzz target: the cilium db/show frontends parser never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ghostip_datapath::cilium::parse_db_frontends(&String::from_utf8_lossy(data));
});
