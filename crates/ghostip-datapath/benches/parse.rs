//! Parse-side benchmarks: a generated kube-proxy dump for 10 k services / 150 k endpoints,
//! parsed by ghostip and, in the same run, read by a plain baseline over the same bytes.
//!
//! `CARGO_TARGET_DIR=… cargo bench -p ghostip-datapath --bench parse`
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::io::BufRead;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ghostip_datapath::{iptables, nft};
use ghostip_testkit::dumps::{GenModel, GenSpec};

fn iptables_save(c: &mut Criterion) {
    let model = GenModel::generate(&GenSpec::new(10_000, 150_000));
    let dump = model.iptables_save();
    println!(
        "iptables-save dump: {} bytes, {} lines",
        dump.len(),
        dump.lines().count()
    );
    let mut g = c.benchmark_group("iptables-save 10k svc 150k ep");
    g.throughput(Throughput::Bytes(dump.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("baseline BufRead::lines count", |b| {
        b.iter(|| black_box(dump.as_bytes()).lines().count())
    });
    g.bench_function("baseline read_until count", |b| {
        b.iter(|| {
            let mut r = black_box(dump.as_bytes());
            let mut buf = Vec::with_capacity(512);
            let mut n = 0usize;
            while r.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
                n += 1;
                buf.clear();
            }
            n
        })
    });
    g.bench_function("ghostip parse_reader", |b| {
        b.iter(|| {
            iptables::parse_reader(black_box(dump.as_bytes()))
                .unwrap()
                .frontends
                .len()
        })
    });
    g.bench_function("ghostip parse_str", |b| {
        b.iter(|| {
            iptables::parse_str(black_box(&dump))
                .unwrap()
                .frontends
                .len()
        })
    });
    g.finish();
}

fn nft_json(c: &mut Criterion) {
    let model = GenModel::generate(&GenSpec::new(10_000, 150_000));
    let json = model.nft_json();
    println!("nft -j dump: {} bytes", json.len());
    let mut g = c.benchmark_group("nft-json 10k svc 150k ep");
    g.throughput(Throughput::Bytes(json.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(30));
    g.bench_function("baseline serde_json IgnoredAny", |b| {
        b.iter(|| {
            serde_json::from_slice::<serde::de::IgnoredAny>(black_box(json.as_bytes())).unwrap()
        })
    });
    g.bench_function("ghostip parse_slice", |b| {
        b.iter(|| {
            nft::parse_slice(black_box(json.as_bytes()))
                .unwrap()
                .frontends
                .len()
        })
    });
    g.finish();
}

criterion_group!(benches, iptables_save, nft_json);
criterion_main!(benches);
