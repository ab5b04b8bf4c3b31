//! Scans log files given on the command line and prints every failure, the stats and the table's cells (tab-separated).

use std::fs::File;

use ghostip_logs::{Aggregator, ScanOptions, Scanner, classify, open_reader};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut agg = Aggregator::new();
    for path in std::env::args().skip(1) {
        let mut scanner = Scanner::new(ScanOptions {
            year: Some(2024),
            ..ScanOptions::default()
        })?;
        let reader = open_reader(File::open(&path)?)?;
        println!("== {path}");
        scanner.scan(reader, &mut |f| {
            println!(
                "  L{}-{} {:?} {} target={:?} host={:?} dns={:?}@{:?} ts={:?}{} flags={:?}",
                f.line_no,
                f.end_line_no,
                f.kind,
                f.format,
                f.target,
                f.host,
                f.dns_name,
                f.dns_server,
                f.timestamp.map(|t| t.to_string()),
                if f.approximate_time { "~" } else { "" },
                f.response_flags
            );
            agg.add(&f, classify(&f));
        })?;
        let s = scanner.stats();
        println!(
            "  stats: lines={} cand={} fail={} dismissed={} unknown={} binary={} {:?}",
            s.lines,
            s.candidate_lines,
            s.failures,
            s.dismissed_lines,
            s.unknown_lines,
            s.binary_lines,
            s.unknown_shapes
                .iter()
                .map(|u| (&u.shape, u.count))
                .collect::<Vec<_>>()
        );
    }
    let report = agg.report(false);
    println!("{}", report.headline());
    for row in report.table_cells() {
        println!("{}", row.join("\t"));
    }
    Ok(())
}
