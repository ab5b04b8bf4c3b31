//! Fuzz target: format detection plus the detected parser never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((format, parsed)) = ghostip_datapath::parse_auto(data) {
        // Whatever was detected, parsing through a reader gives the same result.
        let again = ghostip_datapath::parse_reader(format, data);
        assert_eq!(parsed.is_ok(), again.is_ok());
    }
    let _ = ghostip_datapath::cilium::parse_any(data);
});
