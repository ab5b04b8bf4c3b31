//! Engine throughput: observations per second on one core, against a baseline that only
//! builds the same observations' answer sets (the unavoidable cost of having them).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ghostip_core::engine::{Engine, EngineConfig};
use ghostip_core::{
    ChangeTime, HeldTarget, Layer, Observation, ObservationResult, PathIdx, PathInfo, PathKind,
    ServiceKey, Target, Time,
};

/// A layer of bare-IP answers, declared here: the engine takes any layer.
const ANSWERS: Layer = Layer::new("answers");
const ANSWER_SERVER: PathKind = PathKind::new(ANSWERS, "answer-server");
const SERVICES: usize = 1_000;
const PATHS: usize = 3;
const OBS: usize = 100_000;

fn ip(s: usize, i: usize) -> Target {
    Target::ip(IpAddr::V4(Ipv4Addr::new(
        10,
        (s / 250) as u8,
        (s % 250) as u8,
        i as u8,
    )))
}

fn setup() -> (Engine, Vec<Observation>) {
    let mut e = Engine::new(EngineConfig {
        settle: Duration::from_millis(100),
        ..EngineConfig::default()
    });
    let paths: Vec<PathIdx> = (0..PATHS)
        .map(|p| {
            e.add_path(
                PathInfo {
                    id: format!("dns-pod/{p}"),
                    kind: ANSWER_SERVER,
                    description: String::new(),
                    node: None,
                },
                Duration::from_secs(30),
            )
        })
        .collect();
    let t0 = Time::from_second(1_800_000_000).unwrap();
    let services: Vec<ServiceKey> = (0..SERVICES)
        .map(|s| ServiceKey::new("bench", format!("svc-{s}")))
        .collect();
    for (s, key) in services.iter().enumerate() {
        let set: BTreeSet<Target> = (1..=3).map(|i| ip(s, i)).collect();
        e.set_desired(ANSWERS, key, set, ChangeTime::received_at(t0));
    }
    e.truth_synced(t0);
    // A rollout on every tenth service, so a share of observations hits open trackings.
    for (s, key) in services
        .iter()
        .enumerate()
        .filter(|(s, _)| s.is_multiple_of(10))
    {
        let set: BTreeSet<Target> = (2..=4).map(|i| ip(s, i)).collect();
        e.set_desired(ANSWERS, key, set, ChangeTime::received_at(t0));
    }
    let obs = (0..OBS)
        .map(|n| {
            let s = n % SERVICES;
            let stale = s.is_multiple_of(10) && n < OBS / 2;
            let held = (if stale { 1..=3 } else { 2..=4 })
                .map(|i| HeldTarget {
                    target: ip(s, i),
                    ttl: Some(30),
                    last_used: None,
                })
                .collect();
            Observation {
                path: paths[n % PATHS],
                service: services[s].clone(),
                // 10 µs apart: 100 k observations span one second, four ticks.
                at: t0
                    .checked_add(Duration::from_micros(n as u64 * 10))
                    .unwrap(),
                result: ObservationResult::Held(held),
                latency: None,
            }
        })
        .collect();
    (e, obs)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(OBS as u64));
    g.sample_size(10);
    g.bench_function("observe", |b| {
        b.iter_batched(
            setup,
            |(mut e, obs)| {
                for (i, o) in obs.iter().enumerate() {
                    black_box(e.observe(o));
                    // The pipeline ticks every 250 ms of (here simulated) time.
                    if i % 25_000 == 24_999 {
                        black_box(e.tick(o.at));
                    }
                }
                (e, obs) // dropped outside the measurement
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function("baseline_answer_sets", |b| {
        b.iter_batched(
            setup,
            |(e, obs)| {
                for o in &obs {
                    if let ObservationResult::Held(h) = &o.result {
                        let set: BTreeSet<Target> = h.iter().map(|h| h.target).collect();
                        black_box(set);
                    }
                }
                (e, obs)
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
