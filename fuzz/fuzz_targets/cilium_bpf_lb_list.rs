//! Fuzz target: the cilium bpf lb list parser (text and JSON) never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ghostip_datapath::cilium::parse_bpf_lb_list(&String::from_utf8_lossy(data));
});
