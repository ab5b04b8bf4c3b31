//! Fuzzes the truth-history reader of `ghostip explain --truth-history FILE` (Pod JSON
//! documents and watch events, back to back): arbitrary text must never panic, every error
//! names the file and a line inside it, and a history that is read has, per IP, intervals in
//! order that never overlap.
#![no_main]

use std::net::IpAddr;
use std::path::Path;

use ghostip_analysis::explain::{HistorySource, TruthHistory, TruthHistoryError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match TruthHistory::parse(Path::new("h.json"), text) {
        Ok(h) => {
            // Every IP the text could name: look each up once.
            let ips: Vec<IpAddr> = text
                .split(|c: char| !(c.is_ascii_hexdigit() || c == '.' || c == ':'))
                .filter_map(|w| w.parse().ok())
                .take(64)
                .collect();
            for ip in ips {
                let Ok(got) = h.lookup(ip) else {
                    panic!("a truth history answers every lookup");
                };
                for pair in got.ownerships.windows(2) {
                    assert!(pair[0].start <= pair[1].start);
                    let closed = pair[0].closed;
                    assert!(closed.is_some_and(|c| c <= pair[1].start.max(pair[0].start)));
                }
                for o in &got.ownerships {
                    assert!(o.closed.is_none_or(|c| c >= o.start));
                }
            }
            assert!(h.describe().contains("h.json"));
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("h.json:"), "{msg}");
            if let TruthHistoryError::Invalid { line, .. } = e {
                assert!(line >= 1 && line <= text.lines().count().max(1) + 1, "{line}");
            }
        }
    }
});
