//! Peak memory of a `watch` session holding a synthetic truth: 10 k headless Services with
//! 15 endpoints each (150 k endpoints) and their pods, applied through the same truth events
//! the kube watchers emit, then one A answer per Service on each of 3 DNS paths.
//!
//! `cargo run --release -p ghostip --example session_rss [SERVICES] [ENDPOINTS_PER_SERVICE]`
//! prints VmHWM (peak RSS) before and after, from /proc/self/status.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
// A measuring tool: it times what it runs with the system's clocks.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use ghostip::kube::{Received, ResourceKind, SyncState, TruthEvent, TruthObject};
use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, PodRecord, ServiceRecord, SliceRecord,
};
use ghostip_core::{
    HeldTarget, Observation, ObservationResult, PodRef, Protocol, ServiceKey, Target, Time,
};
use ghostip_session::layers::dns::DNS_POD;
use ghostip_session::layers::dns::{DnsConfig, DnsModel};
use ghostip_session::{Session, SessionConfig};
use ghostip_testkit::records::headless_service;

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn vm_hwm_kib() -> u64 {
    status_kib("VmHWM:")
}

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + n))
}

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let services = args.first().copied().unwrap_or(10_000);
    let per = args.get(1).copied().unwrap_or(15);
    let before = vm_hwm_kib();
    let t = Time::now();
    let kinds = [
        ResourceKind::EndpointSlices,
        ResourceKind::Services,
        ResourceKind::Pods,
    ];
    let mut s = Session::new(SessionConfig::default(), SyncState::new(t, kinds.clone()))
        .with_layer(DnsModel::new(DnsConfig::default()));
    let rx = |event| Received { at: t, event };
    for k in &kinds {
        s.on_truth(&rx(TruthEvent::Init(k.clone())));
    }
    let mut n = 0u32;
    for i in 0..services {
        let key = ServiceKey::new(format!("ns-{}", i % 100), format!("svc-{i}"));
        s.on_truth(&rx(TruthEvent::InitApply(TruthObject::Service(
            ServiceRecord {
                labels: BTreeMap::from([("app".to_string(), format!("svc-{i}"))]),
                ..headless_service(key.clone())
            },
        ))));
        let mut endpoints = Vec::new();
        for j in 0..per {
            n += 1;
            let pod = PodRef {
                namespace: key.namespace.clone(),
                name: format!("svc-{i}-{j}"),
                // Pod UIDs are UUIDs, as the API server gives them.
                uid: format!("{i:08x}-7c9d-4e1f-8a2b-{n:012x}"),
            };
            s.on_truth(&rx(TruthEvent::InitApply(TruthObject::Pod(PodRecord {
                pod: pod.clone(),
                ips: vec![ip(n)],
                node: Some(format!("node-{}", n % 50)),
                owner_kind: Some("ReplicaSet".into()),
                owner_name: Some(format!("svc-{i}-7c9")),
                created: Some(t),
                ready_since: Some(t),
                deletion: None,
                grace_period_seconds: Some(30),
                prestop_seconds: None,
                host_network: false,
                labels: BTreeMap::new(),
            }))));
            endpoints.push(EndpointRecord {
                ip: ip(n),
                ready: true,
                serving: true,
                terminating: false,
                pod: Some(pod),
                node: Some(format!("node-{}", n % 50)),
                hostname: None,
            });
        }
        s.on_truth(&rx(TruthEvent::InitApply(TruthObject::Slice(
            SliceRecord {
                namespace: key.namespace.clone(),
                name: format!("svc-{i}-abcde"),
                service: key.name.clone(),
                address_type: AddressType::IPv4,
                endpoints,
                ports: vec![EndpointPort {
                    name: Some("http".into()),
                    port: 8080,
                    protocol: Protocol::Tcp,
                }],
                trigger_time: Some(t),
            },
        ))));
    }
    for k in &kinds {
        s.on_truth(&rx(TruthEvent::InitDone(k.clone())));
    }
    let after_truth = vm_hwm_kib();
    // Three DNS paths each answered once per service (the sweep).
    let paths: Vec<_> = (0..3)
        .map(|p| {
            s.add_path(
                ghostip_core::PathInfo {
                    id: format!("dns-pod/10.96.{p}.1:53"),
                    kind: DNS_POD,
                    description: String::new(),
                    node: None,
                },
                std::time::Duration::from_secs(30),
            )
        })
        .collect();
    let mut n = 0u32;
    for i in 0..services {
        let key = ServiceKey::new(format!("ns-{}", i % 100), format!("svc-{i}"));
        let held: Vec<HeldTarget> = (0..per)
            .map(|_| {
                n += 1;
                HeldTarget {
                    target: Target::ip(ip(n)),
                    ttl: Some(30),
                    last_used: None,
                }
            })
            .collect();
        for p in &paths {
            s.observe(&Observation {
                path: *p,
                service: key.clone(),
                at: t,
                result: ObservationResult::Held(held.clone()),
                latency: None,
            });
        }
    }
    let after = vm_hwm_kib();
    println!(
        "services {services}, endpoints {}: peak RSS {:.1} MiB at start, {:.1} MiB with the truth, {:.1} MiB after one sweep on 3 paths; slices {}",
        services * per,
        before as f64 / 1024.0,
        after_truth as f64 / 1024.0,
        after as f64 / 1024.0,
        s.truth().slice_count()
    );
    println!(
        "resident now (VmRSS): {:.1} MiB",
        status_kib("VmRSS:") as f64 / 1024.0
    );
}
