//! Fuzz target: the conntrack parser never panics; the slice and reader entry points agree.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let from_bytes = ghostip_datapath::conntrack::parse_bytes(data);
    let from_reader = ghostip_datapath::conntrack::parse_reader(data);
    assert_eq!(from_bytes, from_reader);
});
