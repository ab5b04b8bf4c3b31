//! Relist and recovery semantics of the truth watches, driven by synthetic `watcher::Event`
//! streams (no HTTP, no cluster) and an injected clock, so every timestamp is exact.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use ghostip::kube::{
    BackoffPolicy, Clock, ConfigMapRef, Received, ResourceKind, SyncState, SyncTransition,
    TruthEvent, TruthKey, TruthObject, apply_to_truth, corefile_events_from, events_from,
};
use ghostip_core::model::{ServiceKey, Time};
use ghostip_core::truth::{ServiceRecord, Truth};
use ghostip_testkit::records::headless_service;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use serde_json::json;

type Item<K> = Result<Event<K>, watcher::Error>;

/// A clock that ticks one second per reading, from 2026-11-30T05:00:00Z.
fn ticking_clock() -> Arc<dyn Clock> {
    let n = Arc::new(AtomicI64::new(0));
    Arc::new(move || t(n.fetch_add(1, Ordering::SeqCst)))
}

fn t(offset_secs: i64) -> Time {
    Time::from_second(1_796_014_800 + offset_secs).unwrap()
}

/// A stream factory that plays `scripts` one after the other, then idles forever.
fn scripted<K: Send + 'static>(
    scripts: Vec<Vec<Item<K>>>,
) -> impl FnMut() -> BoxStream<'static, Item<K>> + Send {
    let mut scripts = scripts.into_iter();
    move || match scripts.next() {
        Some(items) => stream::iter(items).boxed(),
        None => stream::pending().boxed(),
    }
}

async fn take(s: impl Stream<Item = Received> + Unpin, n: usize) -> Vec<Received> {
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        s.take(n).collect::<Vec<_>>(),
    )
    .await
    .unwrap()
}

fn slice(name: &str, service: &str, ips: &[&str]) -> EndpointSlice {
    let endpoints: Vec<_> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080}]
    }))
    .unwrap()
}

fn headless(name: &str) -> ServiceRecord {
    headless_service(ServiceKey::new("shop", name))
}

fn ips(v: &[&str]) -> std::collections::BTreeSet<IpAddr> {
    v.iter().map(|s| s.parse().unwrap()).collect()
}

/// One line per event: `relist`/`synced` for a LIST's start and end, `+`/`-` for objects
/// applied (listed or watched) and deleted.
fn short(ev: &TruthEvent) -> String {
    match ev {
        TruthEvent::InitApply(o) | TruthEvent::Apply(o) => match o {
            TruthObject::Slice(s) => format!("slice+ {}", s.name),
            TruthObject::Service(s) => format!("svc+ {}", s.key.name),
            TruthObject::Pod(p) => format!("pod+ {}", p.pod.name),
            TruthObject::Corefile { configmap, .. } => format!("corefile {configmap}"),
        },
        TruthEvent::Delete(k) => match k {
            TruthKey::Slice { name, .. } => format!("slice- {name}"),
            TruthKey::Service(k) => format!("svc- {}", k.name),
            TruthKey::Pod(p) => format!("pod- {} {}", p.name, p.uid),
            TruthKey::Corefile(c) => format!("corefile- {c}"),
        },
        TruthEvent::Init(k) => format!("relist {k}"),
        TruthEvent::InitDone(k) => format!("synced {k}"),
        TruthEvent::WatchFailed { kind, .. } => format!("failed {kind}"),
        TruthEvent::ApiUnreachable { .. } => "api unreachable".to_string(),
        TruthEvent::ApiReachable => "api reachable".to_string(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_slice_missing_from_a_relist_is_deleted_and_a_watch_error_is_a_gap() {
    let first = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(slice("web-a", "web", &["10.0.0.1"]))),
        Ok(Event::InitApply(slice("web-b", "web", &["10.0.0.2"]))),
        Ok(Event::InitApply(slice("api-a", "api", &["10.0.1.1"]))),
        Ok(Event::InitDone),
        Ok(Event::Apply(slice("web-a", "web", &["10.0.0.3"]))),
        Err(watcher::Error::NoResourceVersion),
    ];
    // While the watch was down web-b was deleted: the relist no longer has it.
    let second = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(slice("web-a", "web", &["10.0.0.3"]))),
        Ok(Event::InitApply(slice("api-a", "api", &["10.0.1.1"]))),
        Ok(Event::InitDone),
    ];
    let s = events_from::<EndpointSlice, _, _>(
        scripted(vec![first, second]),
        ticking_clock(),
        BackoffPolicy::default(),
    );
    let events = take(s, 11).await;
    let got: Vec<String> = events.iter().map(|r| short(&r.event)).collect();
    assert_eq!(
        got,
        vec![
            "relist endpointslices",
            "slice+ web-a",
            "slice+ web-b",
            "slice+ api-a",
            "synced endpointslices",
            "slice+ web-a",
            "failed endpointslices",
            "relist endpointslices",
            "slice+ web-a",
            "slice+ api-a",
            "synced endpointslices",
        ]
    );
    // One clock reading per watcher item.
    assert_eq!(events[0].at, t(0));
    assert_eq!(events[4].at, t(4));
    assert_eq!(events[6].at, t(6));
    assert!(
        matches!(&events[6].event, TruthEvent::WatchFailed { error, .. } if error.contains("resourceVersion"))
    );

    let mut truth = Truth::new();
    truth.apply_service(headless("web"), t(-1));
    truth.apply_service(headless("api"), t(-1));
    let mut sync = SyncState::new(
        t(-10),
        [ResourceKind::EndpointSlices, ResourceKind::Services],
    );
    let mut transitions = Vec::new();
    let mut changes = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        transitions.extend(sync.observe(ev));
        changes.push(apply_to_truth(&mut truth, ev));
        if i == 4 {
            assert_eq!(
                truth.dns_answers(&ServiceKey::new("shop", "web")),
                ips(&["10.0.0.1", "10.0.0.2"])
            );
        }
    }
    // The relist's end deleted web-b: web changed, at the time InitDone was received.
    let relist_done = &changes[10];
    assert_eq!(relist_done.len(), 1);
    assert_eq!(relist_done[0].service, ServiceKey::new("shop", "web"));
    assert_eq!(relist_done[0].at.t0, t(10));
    assert_eq!(
        truth.dns_answers(&ServiceKey::new("shop", "web")),
        ips(&["10.0.0.3"])
    );
    assert_eq!(
        truth.dns_answers(&ServiceKey::new("shop", "api")),
        ips(&["10.0.1.1"])
    );
    assert_eq!(truth.slice_count(), 2);
    // Re-applying an unchanged slice during the relist is no change.
    assert!(changes[8].is_empty() && changes[9].is_empty());

    assert_eq!(
        transitions,
        vec![
            SyncTransition::GapEnded {
                kind: ResourceKind::EndpointSlices,
                since: t(-10),
                at: t(4)
            },
            SyncTransition::GapStarted {
                kind: ResourceKind::EndpointSlices,
                at: t(6),
                error: "no metadata.resourceVersion in watch result (does resource support watch?)"
                    .into(),
            },
            SyncTransition::GapEnded {
                kind: ResourceKind::EndpointSlices,
                since: t(6),
                at: t(10)
            },
        ]
    );
    // Services never synced in this test: the truth is still in its initial gap.
    assert!(!sync.truth_synced());
    assert_eq!(sync.truth_gap_since(), Some(t(-10)));
    assert!(sync.is_synced(&ResourceKind::EndpointSlices));
}

#[tokio::test(start_paused = true)]
async fn the_restart_waits_the_backoff() {
    let first: Vec<Item<EndpointSlice>> = vec![
        Ok(Event::Init),
        Ok(Event::InitDone),
        Err(watcher::Error::NoResourceVersion),
    ];
    let second: Vec<Item<EndpointSlice>> = vec![Err(watcher::Error::NoResourceVersion)];
    let third: Vec<Item<EndpointSlice>> = vec![Ok(Event::Init), Ok(Event::InitDone)];
    let start = tokio::time::Instant::now();
    let clock: Arc<dyn Clock> = Arc::new(move || t(start.elapsed().as_millis() as i64 / 100));
    let s = events_from::<EndpointSlice, _, _>(
        scripted(vec![first, second, third]),
        clock,
        BackoffPolicy::default(),
    );
    let events = take(s, 6).await;
    let got: Vec<String> = events.iter().map(|r| short(&r.event)).collect();
    assert_eq!(got[2], "failed endpointslices");
    assert_eq!(got[3], "failed endpointslices");
    assert_eq!(got[5], "synced endpointslices");
    // Clock unit: 100 ms. Failure at 0; the retry waits 0.8 s, fails; the next waits 1.6 s.
    assert_eq!(events[2].at, t(0));
    assert_eq!(events[3].at, t(8));
    assert_eq!(events[5].at, t(24));
}

#[tokio::test(start_paused = true)]
async fn services_missing_from_a_relist_are_deleted() {
    let svc = |name: &str| -> Service {
        serde_json::from_value(json!({"metadata": {"namespace": "shop", "name": name},
                                      "spec": {"clusterIP": "None", "selector": {"app": name}}}))
        .unwrap()
    };
    let first = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(svc("web"))),
        Ok(Event::InitApply(svc("old"))),
        Ok(Event::InitDone),
    ];
    let second = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(svc("web"))),
        Ok(Event::InitDone),
    ];
    let mut scripts = vec![first, second].into_iter();
    // The first stream ends instead of failing: the restart is not a gap.
    let make = move || match scripts.next() {
        Some(v) => stream::iter(v).boxed(),
        None => stream::pending().boxed(),
    };
    let events = take(
        events_from::<Service, _, _>(make, ticking_clock(), BackoffPolicy::default()),
        7,
    )
    .await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, TruthEvent::WatchFailed { .. }))
    );
    let mut truth = Truth::new();
    let mut sync = SyncState::new(t(-1), [ResourceKind::Services]);
    let mut deleted = Vec::new();
    for ev in &events {
        sync.observe(ev);
        let changes = apply_to_truth(&mut truth, ev);
        if matches!(ev.event, TruthEvent::InitDone(_)) {
            deleted.extend(changes.into_iter().map(|c| c.service.name));
        }
    }
    assert_eq!(deleted, vec!["old".to_string()]);
    assert!(truth.service(&ServiceKey::new("shop", "web")).is_some());
    assert!(truth.service(&ServiceKey::new("shop", "old")).is_none());
    assert!(sync.all_synced());
}

#[tokio::test(start_paused = true)]
async fn a_slice_that_loses_its_service_label_leaves_the_truth() {
    let mut unlabeled = slice("web-a", "web", &["10.0.0.1"]);
    unlabeled.metadata.labels = None;
    let script = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(slice("web-a", "web", &["10.0.0.1"]))),
        Ok(Event::InitDone),
        Ok(Event::Apply(unlabeled)),
    ];
    let events = take(
        events_from::<EndpointSlice, _, _>(
            scripted(vec![script]),
            ticking_clock(),
            BackoffPolicy::default(),
        ),
        4,
    )
    .await;
    assert_eq!(short(&events[3].event), "slice- web-a");
    let mut truth = Truth::new();
    truth.apply_service(headless("web"), t(-1));
    for ev in &events {
        apply_to_truth(&mut truth, ev);
    }
    assert!(
        truth
            .dns_answers(&ServiceKey::new("shop", "web"))
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn pods_pass_through_with_their_uid() {
    let pod = |name: &str, uid: &str| -> Pod {
        serde_json::from_value(
            json!({"metadata": {"namespace": "shop", "name": name, "uid": uid},
                                      "status": {"podIP": "10.0.0.9"}}),
        )
        .unwrap()
    };
    let script = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(pod("web-0", "u1"))),
        Ok(Event::InitDone),
        Ok(Event::Delete(pod("web-0", "u1"))),
    ];
    let events = take(
        events_from::<Pod, _, _>(
            scripted(vec![script]),
            ticking_clock(),
            BackoffPolicy::default(),
        ),
        4,
    )
    .await;
    let got: Vec<String> = events.iter().map(|r| short(&r.event)).collect();
    assert_eq!(
        got,
        vec!["relist pods", "pod+ web-0", "synced pods", "pod- web-0 u1"]
    );
    let mut truth = Truth::new();
    assert!(
        events
            .iter()
            .all(|e| apply_to_truth(&mut truth, e).is_empty())
    );
}

#[tokio::test(start_paused = true)]
async fn corefile_changes_and_disappears() {
    let cm = |text: &str| -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"namespace": "kube-system", "name": "coredns"},
                                      "data": {"Corefile": text}}),
        )
        .unwrap()
    };
    let first = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(cm(".:53 {\n cache 30\n}\n"))),
        Ok(Event::InitDone),
        Ok(Event::Apply(cm(".:53 {\n cache 5\n}\n"))),
        Err(watcher::Error::NoResourceVersion),
    ];
    // Deleted while the watch was down: the relist is empty.
    let second = vec![Ok(Event::Init), Ok(Event::InitDone)];
    let r = ConfigMapRef::coredns();
    let s = corefile_events_from(
        r.clone(),
        scripted(vec![first, second]),
        ticking_clock(),
        BackoffPolicy::default(),
    );
    let events = take(s, 8).await;
    let got: Vec<String> = events.iter().map(|r| short(&r.event)).collect();
    assert_eq!(
        got,
        vec![
            "relist configmap kube-system/coredns",
            "corefile kube-system/coredns",
            "synced configmap kube-system/coredns",
            "corefile kube-system/coredns",
            "failed configmap kube-system/coredns",
            "relist configmap kube-system/coredns",
            "corefile- kube-system/coredns",
            "synced configmap kube-system/coredns",
        ]
    );
    assert!(matches!(
        &events[3].event,
        TruthEvent::Apply(TruthObject::Corefile { text, .. }) if text.contains("cache 5")
    ));
    let mut sync = SyncState::new(t(-1), [ResourceKind::ConfigMap(r.clone())]);
    let transitions: Vec<_> = events.iter().flat_map(|e| sync.observe(e)).collect();
    assert_eq!(transitions.len(), 3);
    assert!(sync.is_synced(&ResourceKind::ConfigMap(r)));
}
