//! Fuzzes the `explain` log scanner (every format extractor is reached through it): arbitrary
//! bytes must never panic, and the failures and counts must stay consistent. A focused scan
//! (`--target`) on the first failure's IPv4 address keeps only failures aimed at it, and gives
//! the same result read as a stream, in place, and in place on two threads over small segments.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroUsize;

use ghostip_logs::{
    Aggregator, ConnFailure, ParallelOptions, RAW_EXCERPT_MAX, ScanOptions, ScanStats, Scanner,
    Target, classify, scan_bytes,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = ScanOptions {
        year: Some(2024),
        ..ScanOptions::default()
    };
    let Ok((failures, stats)) = scan_bytes(data, opts.clone()) else {
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

    let ip = failures
        .iter()
        .find_map(|f| f.target.map(|t| t.ip()).filter(IpAddr::is_ipv4))
        .unwrap_or(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let target = Target { ip, port: None };
    let focused = ScanOptions {
        target: Some(target),
        ..opts
    };
    let run = |how: u8| -> (Vec<ConnFailure>, ScanStats) {
        let Ok(mut sc) = Scanner::new(focused.clone()) else {
            panic!("the scanner builds from constants");
        };
        let mut out = Vec::new();
        let two = ParallelOptions {
            threads: NonZeroUsize::MIN.saturating_add(1),
            segment_bytes: 97,
        };
        match how {
            0 => drop(sc.scan(data, &mut |f| out.push(f))),
            1 => sc.scan_slice(data, &mut |f| out.push(f)),
            _ => drop(sc.scan_parallel_slice(data, two, &mut |f| out.push(f))),
        }
        (out, sc.into_stats())
    };
    let (want, want_stats) = run(0);
    assert!(want.iter().all(|f| target.matches(f)));
    assert_eq!(want.len() as u64, want_stats.failures);
    for how in [1, 2] {
        let (got, got_stats) = run(how);
        assert_eq!(got, want);
        assert_eq!(got_stats, want_stats);
    }
});
