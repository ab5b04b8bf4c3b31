//! Fuzz target: the iptables-save parser never panics; the slice, reader and str entry points agree.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let from_bytes = ghostip_datapath::iptables::parse_bytes(data);
    let from_reader = ghostip_datapath::iptables::parse_reader(data);
    assert_eq!(from_bytes, from_reader);
    if let Ok(s) = std::str::from_utf8(data) {
        assert_eq!(ghostip_datapath::iptables::parse_str(s), from_bytes);
    }
});
