//! Fuzz target: the nft JSON parser never panics; the slice and reader entry points agree.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let from_slice = ghostip_datapath::nft::parse_slice(data);
    let from_reader = ghostip_datapath::nft::parse_reader(data);
    assert_eq!(from_slice.is_ok(), from_reader.is_ok());
    if let (Ok(a), Ok(b)) = (from_slice, from_reader) {
        assert_eq!(a, b);
    }
});
