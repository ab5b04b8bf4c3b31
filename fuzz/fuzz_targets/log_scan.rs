//! Fuzzes the `explain` log scanner (every format extractor is reached through it): arbitrary
//! bytes must never panic, and the failures and counts must stay consistent.
#![no_main]

use ghostip_logs::{Aggregator, RAW_EXCERPT_MAX, ScanOptions, classify, scan_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = ScanOptions {
        year: Some(2024),
        ..ScanOptions::default()
    };
    let Ok((failures, stats)) = scan_bytes(data, opts) else {
        return;
    };
    assert_eq!(failures.len() as u64, stats.failures);
    assert!(stats.lines <= data.len() as u64);
    let mut agg = Aggregator::new();
    for f in &failures {
        assert!(f.raw.len() <= RAW_EXCERPT_MAX);
        assert!(f.line_no >= 1 && f.line_no <= f.end_line_no);
        assert!(f.end_line_no <= stats.lines.max(1));
        agg.add(f, classify(f));
    }
    let report = agg.report(false);
    assert_eq!(report.total, stats.failures);
    let _ = report.render_table();
});
