//! Fuzz target: the conntrack netlink decoders never panic; feeding the bytes in two
//! pieces decodes the same as feeding them at once; the allocation-free `ViewDecoder`
//! yields the same entries, skip counts and errors as the owned `NetlinkDecoder`.
#![no_main]

use ghostip_datapath::conntrack_netlink::{NetlinkDecoder, ViewDecoder, decode_dump};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = decode_dump(data);
    let split = data.len() / 2;
    let (first, rest) = data.split_at(split);
    let mut d = NetlinkDecoder::new();
    let mut entries = Vec::new();
    let pieces = d
        .push(first, |e| entries.push(e))
        .and_then(|()| d.push(rest, |e| entries.push(e)))
        .and_then(|()| d.finish());
    assert_eq!(whole.is_ok(), pieces.is_ok());

    let mut v = ViewDecoder::new();
    let mut views = Vec::new();
    let viewed = v
        .push(first, |e| views.push(e.to_entry()))
        .and_then(|()| v.push(rest, |e| views.push(e.to_entry())))
        .and_then(|()| v.finish());
    match (&whole, &viewed) {
        (Ok(w), Ok(s)) => {
            assert_eq!(w.entries, views);
            assert_eq!((w.skipped.ignored, w.skipped.unknown), (s.ignored, s.unknown));
            assert_eq!(w.skipped.ignored_by_reason, s.ignored_by_reason);
            assert_eq!(w.skipped.unknown_by_reason, s.unknown_by_reason);
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("decoders disagree: owned {whole:?}, view {viewed:?}"),
    }
    if let (Ok(w), Ok(_)) = (whole, pieces) {
        assert_eq!(w.entries, entries);
    }
});
