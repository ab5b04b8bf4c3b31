//! Parse-side benchmarks: a generated kube-proxy dump for 10 k services / 150 k endpoints,
//! parsed by ghostip and, in the same run, read by a plain baseline over the same bytes; a
//! 100 000-entry conntrack netlink dump decoded by `ViewDecoder` against `NetlinkDecoder`.
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

/// The kernel capture's conntrack messages repeated to 100 000 entries, then `NLMSG_DONE`.
fn netlink_dump() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/conntrack-netlink-dump_netns-dnat.bin"
    );
    let capture = std::fs::read(path).unwrap();
    // Split the capture into its messages; the last one is NLMSG_DONE.
    let mut messages = Vec::new();
    let mut at = 0;
    while at + 4 <= capture.len() {
        let len = u32::from_ne_bytes(capture[at..at + 4].try_into().unwrap()) as usize;
        let end = (at + len.next_multiple_of(4)).min(capture.len());
        messages.push(&capture[at..end]);
        at = end;
    }
    let (done, entries) = messages.split_last().unwrap();
    let mut dump = Vec::new();
    for _ in 0..100_000 / entries.len() {
        for m in entries {
            dump.extend_from_slice(m);
        }
    }
    dump.extend_from_slice(done);
    dump
}

fn conntrack_netlink(c: &mut Criterion) {
    use ghostip_datapath::conntrack_netlink::{NetlinkDecoder, ViewDecoder};
    let dump = netlink_dump();
    println!("conntrack netlink dump: {} bytes", dump.len());
    let mut g = c.benchmark_group("conntrack-netlink 100k entries");
    g.throughput(Throughput::Elements(100_000));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    // Pushed in 32 KiB pieces, as the kernel's dump batches arrive.
    g.bench_function("baseline NetlinkDecoder (owned CtEntry)", |b| {
        b.iter(|| {
            let mut d = NetlinkDecoder::new();
            let mut n = 0u64;
            for piece in black_box(&dump[..]).chunks(32 * 1024) {
                d.push(piece, |e| n += u64::from(e.proto_num)).unwrap();
            }
            d.finish().unwrap();
            n
        })
    });
    g.bench_function("ghostip ViewDecoder (borrowed CtView)", |b| {
        b.iter(|| {
            let mut d = ViewDecoder::new();
            let mut n = 0u64;
            for piece in black_box(&dump[..]).chunks(32 * 1024) {
                d.push(piece, |v| n += u64::from(v.proto)).unwrap();
            }
            d.finish().unwrap();
            n
        })
    });
    g.finish();
}

criterion_group!(benches, iptables_save, nft_json, conntrack_netlink);
criterion_main!(benches);
