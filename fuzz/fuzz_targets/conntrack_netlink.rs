//! Fuzz target: the conntrack netlink decoder never panics; feeding the bytes in two
//! pieces decodes the same as feeding them at once.
#![no_main]

use ghostip_datapath::conntrack_netlink::{NetlinkDecoder, decode_dump};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = decode_dump(data);
    let split = data.len() / 2;
    let mut d = NetlinkDecoder::new();
    let mut entries = Vec::new();
    let first = d.push(data.get(..split).unwrap_or_default(), |e| entries.push(e));
    let second =
        first.and_then(|()| d.push(data.get(split..).unwrap_or_default(), |e| entries.push(e)));
    let pieces = second.and_then(|()| d.finish());
    assert_eq!(whole.is_ok(), pieces.is_ok());
    if let (Ok(w), Ok(_)) = (whole, pieces) {
        assert_eq!(w.entries, entries);
    }
});
