//! Fuzz target: the iptables-save parser never panics; the slice, reader and str entry points agree, and the agent's packed path reads the same frontends and backends.
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let from_bytes = ghostip_datapath::iptables::parse_bytes(data);
    let from_reader = ghostip_datapath::iptables::parse_reader(data);
    assert_eq!(from_bytes, from_reader);
    if let Ok(s) = std::str::from_utf8(data) {
        assert_eq!(ghostip_datapath::iptables::parse_str(s), from_bytes);
    }
    let packed =
        ghostip_datapath::parse_reader_packed(ghostip_datapath::Format::Iptables, data);
    match (&from_bytes, packed) {
        (Ok(table), Ok(Some(packed))) => {
            let packed = &packed;
            // The packed table does not merge two descriptions of one frontend; compare
            // (frontend, active backend) pairs.
            let rows: BTreeSet<_> = table
                .frontends
                .iter()
                .flat_map(|f| {
                    f.backends
                        .iter()
                        .filter(|b| b.state == ghostip_datapath::BackendState::Active)
                        .map(move |b| (f.ip, f.port, f.protocol, b.ip, b.port))
                })
                .collect();
            let packed_rows: BTreeSet<_> = packed
                .frontends
                .iter()
                .flat_map(|f| {
                    packed
                        .backends(f)
                        .iter()
                        .filter(|b| b.is_active())
                        .map(move |b| (f.ip, f.port, f.protocol, packed.ip(b), b.port()))
                })
                .collect();
            assert_eq!(rows, packed_rows);
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!("entry points disagree: {a:?} vs {b:?}"),
    }
});
