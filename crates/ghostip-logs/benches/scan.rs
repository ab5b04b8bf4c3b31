//! Criterion benchmark of the `explain` scanner over an in-memory generated log (mixed formats,
//! 1 % error lines). The side-by-side comparison with ripgrep on a large file is
//! `examples/explain_bench.rs` (see docs/BENCHMARKS.md).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ghostip_logs::{ScanOptions, Scanner};
use ghostip_testkit::logs::{GenConfig, LogGenerator};

fn generated(error_ratio: f64, bytes: usize) -> Vec<u8> {
    let mut generator = LogGenerator::new(GenConfig {
        error_ratio,
        ..GenConfig::default()
    });
    let mut data = Vec::with_capacity(bytes + 4096);
    generator.fill(&mut data, bytes);
    data
}

fn scan(data: &[u8]) -> u64 {
    let Ok(mut scanner) = Scanner::new(ScanOptions {
        year: Some(2024),
        ..ScanOptions::default()
    }) else {
        return 0;
    };
    let mut n = 0u64;
    if scanner.scan(data, &mut |_| n += 1).is_err() {
        return 0;
    }
    n
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("explain_scan");
    group.sample_size(20);
    for (name, ratio) in [
        ("mixed_1pct", 0.01),
        ("mixed_0pct", 0.0),
        ("mixed_10pct", 0.1),
    ] {
        let data = generated(ratio, 16 << 20);
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.bench_function(name, |b| b.iter(|| scan(black_box(&data))));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
