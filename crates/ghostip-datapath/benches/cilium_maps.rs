//! Decoding Cilium's load-balancer maps from bytes: 10 000 ClusterIP services with 15 backends
//! each (150 000 backend slots, 150 000 backends), against parsing the same maps printed as
//! `cilium-dbg bpf lb list -o json` with the existing parser, in the same run. The two tables
//! are checked equal before anything is timed.
//!
//! `CARGO_TARGET_DIR=… cargo bench -p ghostip-datapath --bench cilium_maps`
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ghostip_datapath::cilium::parse_bpf_lb_list;
use ghostip_datapath::cilium_maps::{LbMaps, MapDump, decode};

const SERVICES: u32 = 10_000;
const PER_SERVICE: u32 = 15;
const ROUTABLE: u8 = 1 << 6;

/// The maps laid out as the structs of `bpf/lib/lb.h`, and the same maps as bpf lb list JSON.
fn generate() -> (LbMaps, String) {
    let mut svc = MapDump::new("cilium_lb4_services_v2", 12, 12).unwrap();
    let mut be = MapDump::new("cilium_lb4_backends_v3", 4, 12).unwrap();
    let mut rev = MapDump::new("cilium_lb4_reverse_nat", 2, 6).unwrap();
    let mut json = String::from("{");
    for s in 0..SERVICES {
        let vip = [10, 96, (s >> 8) as u8, s as u8];
        let rev_nat = (s + 1) as u16;
        let key = |slot: u16| {
            let mut k = vip.to_vec();
            k.extend(53u16.to_be_bytes());
            k.extend(slot.to_ne_bytes());
            k.extend([17, 0, 0, 0]);
            k
        };
        let value = |backend_id: u32, count: u16, flags: u8| {
            let mut v = backend_id.to_ne_bytes().to_vec();
            v.extend(count.to_ne_bytes());
            v.extend(rev_nat.to_be_bytes());
            v.extend([flags, 0, 0, 0]);
            v
        };
        svc.push(&key(0), &value(0, PER_SERVICE as u16, ROUTABLE));
        let mut r = vip.to_vec();
        r.extend(53u16.to_be_bytes());
        rev.push(&rev_nat.to_be_bytes(), &r);
        if s > 0 {
            json.push(',');
        }
        let fe = format!("{}.{}.{}.{}:53/UDP", vip[0], vip[1], vip[2], vip[3]);
        write!(
            json,
            "\"{fe} (0)\":[\"0.0.0.0:0 ({rev_nat}) (0) [ClusterIP]\""
        )
        .unwrap();
        for b in 0..PER_SERVICE {
            let id = s * PER_SERVICE + b + 1;
            let ip = [10, 128 + (id >> 16) as u8, (id >> 8) as u8, id as u8];
            svc.push(&key((b + 1) as u16), &value(id, 0, 0));
            let mut v = ip.to_vec();
            v.extend(53u16.to_be_bytes());
            v.extend([17, 0, 0, 0, 0, 0]);
            be.push(&id.to_ne_bytes(), &v);
            write!(
                json,
                ",\"{}.{}.{}.{}:53/UDP ({rev_nat}) ({})\"",
                ip[0],
                ip[1],
                ip[2],
                ip[3],
                b + 1
            )
            .unwrap();
        }
        json.push(']');
    }
    json.push('}');
    (
        LbMaps {
            maps: vec![svc, be, rev],
        },
        json,
    )
}

fn cilium_maps(c: &mut Criterion) {
    let (maps, json) = generate();
    let decoded = decode(&maps);
    let parsed = parse_bpf_lb_list(&json).unwrap();
    assert_eq!(
        decoded, parsed,
        "the decoded maps and the parsed listing differ"
    );
    assert_eq!(decoded.backend_count(), (SERVICES * PER_SERVICE) as usize);
    println!(
        "maps: {} bytes of keys and values; bpf lb list -o json: {} bytes; {} frontends, {} backends",
        maps.bytes(),
        json.len(),
        decoded.frontends.len(),
        decoded.backend_count()
    );
    let mut g = c.benchmark_group("cilium lb maps 10k svc 150k backends");
    g.throughput(Throughput::Elements(u64::from(SERVICES * PER_SERVICE)));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(15));
    g.bench_function("ghostip cilium_maps::decode", |b| {
        b.iter(|| decode(black_box(&maps)).frontends.len())
    });
    g.bench_function("baseline parse_bpf_lb_list (-o json)", |b| {
        b.iter(|| parse_bpf_lb_list(black_box(&json)).unwrap().frontends.len())
    });
    g.finish();
}

criterion_group!(benches, cilium_maps);
criterion_main!(benches);
