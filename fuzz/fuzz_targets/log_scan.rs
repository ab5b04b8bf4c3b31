//! Fuzzes the `explain` log scanner (every format extractor is reached through it): arbitrary
//! bytes must never panic, and the failures and counts must stay consistent. A focused scan
//! (`--target`) on the first failure's IPv4 address keeps only failures aimed at it, and gives
//! the same result read as a stream and in place. The full scan gives the same result in small
//! segments, scanned out of order by two line stages and merged in order (what `ghostip
//! explain`'s threads do).
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use ghostip_logs::{
    Aggregator, ConnFailure, RAW_EXCERPT_MAX, ScanOptions, ScanStats, Scanner, Target, classify,
    look_back_start, scan_bytes, segment_cuts,
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
    let _ = (report.headline(), report.table_cells());

    // In segments of 97 bytes, the later ones scanned first.
    if let Ok(Some(cuts)) = segment_cuts(data, data.len() as u64, 97) {
        let Ok(mut sc) = Scanner::new(opts.clone()) else {
            panic!("the scanner builds from constants");
        };
        let (Ok(mut a), Ok(mut b)) = (sc.segment_scanner(), sc.segment_scanner()) else {
            panic!("the scanner builds from constants");
        };
        let mut scanned: Vec<_> = cuts
            .windows(2)
            .enumerate()
            .rev()
            .map(|(i, w)| {
                let from = look_back_start(w[0]);
                let bytes = &data[from as usize..w[1] as usize];
                let stage = if i % 2 == 0 { &mut a } else { &mut b };
                stage.scan(bytes, (w[0] - from) as usize)
            })
            .collect();
        scanned.reverse();
        let mut got = Vec::new();
        sc.begin_segments();
        for seg in scanned {
            sc.apply_segment(seg, &mut |f| got.push(f));
        }
        sc.end_segments(&mut |f| got.push(f));
        assert_eq!(got, failures);
        assert_eq!(sc.stats(), &stats);
    }

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
        match how {
            0 => drop(sc.scan(data, &mut |f| out.push(f))),
            _ => sc.scan_slice(data, &mut |f| out.push(f)),
        }
        (out, sc.into_stats())
    };
    let (want, want_stats) = run(0);
    assert!(want.iter().all(|f| target.matches(f)));
    assert_eq!(want.len() as u64, want_stats.failures);
    {
        let (got, got_stats) = run(1);
        assert_eq!(got, want);
        assert_eq!(got_stats, want_stats);
    }
});
