//! The kube-proxy model with exact times: scrapes and Service changes in, the judgement out;
//! and in a session, which truth events count as changes.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;

use ghostip_core::truth::{EndpointPort, EndpointRecord, ServicePort, ServiceRecord, SliceRecord};
use ghostip_core::{Protocol, ServiceKey};

use super::*;
use crate::session::{Session, SessionConfig};
use crate::sync::SyncState;
use crate::truth_event::{ResourceKind, TruthObject};

const MIN_SYNC: Duration = Duration::from_secs(1);
const SCRAPE: Duration = Duration::from_secs(10);

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

/// kube-proxy's answer with its last sync at `t(sync)`, in its exposition format.
fn said(sync: i64) -> KubeProxyMetrics {
    KubeProxyMetrics::from_text(&format!(
        "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_timestamp_seconds {}e+00\n",
        1_800_000_000 + sync
    ))
    .unwrap()
}

fn refused() -> Result<KubeProxyMetrics, ScrapeFailure> {
    Err(ScrapeFailure {
        refused: true,
        error: "connection refused".into(),
    })
}

fn dns() -> ServiceKey {
    ServiceKey::new("kube-system", "kube-dns")
}

#[test]
fn a_healthy_proxy_with_changes_and_an_advancing_sync_is_never_stalled() {
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    // An hour of a change every 3 s, each synced 1 s later, scraped every 10 s; judged
    // every second.
    for s in 0..3600 {
        if s % 3 == 0 {
            m.on_change(t(s), dns());
        }
        if s % 10 == 0 {
            // The last sync: 1 s after the newest change at least 1 s old.
            let sync = s - (s - 1).rem_euclid(3);
            m.on_scrape(t(s), Ok(said(sync)));
        }
        let j = m.judge();
        assert_eq!(j.stalled, None, "at {s}s: {j:?}");
    }
    // The kept changes stay bounded by what the last sync did not cover.
    assert!(m.judge().pending_changes <= 4);
}

#[test]
fn a_stopped_proxy_and_one_service_change_is_stalled_after_min_sync_without_the_scrape_lag() {
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    m.on_scrape(t(0), Ok(said(-5)));
    assert_eq!(m.rescrape_at(), None, "answering: the period decides");
    // Stopped at 5 s: its metrics endpoint refuses from the next scrape on.
    m.on_scrape(t(10), refused());
    assert_eq!(m.judge().endpoint, Endpoint::Refused);
    m.on_scrape(t(500), refused());
    assert_eq!(m.judge().stalled, None, "no change: nothing to sync");
    assert_eq!(m.rescrape_at(), None);
    // A CoreDNS pod replaced at 600 s: a scrape is due once it waited 1 s (+ 100 ms).
    m.on_change(t(600), dns());
    let due = t(600).checked_add(Duration::from_millis(1100)).unwrap();
    assert_eq!(m.rescrape_at(), Some(due));
    // Refused at exactly 1 s: still within.
    m.on_scrape(t(601), refused());
    assert_eq!(m.judge().stalled, None);
    assert_eq!(m.rescrape_at(), Some(due));
    m.on_scrape(due, refused());
    assert_eq!(m.rescrape_at(), None, "settled");
    let j = m.judge();
    assert_eq!(
        j.stalled,
        Some(Stalled {
            component: KUBE_PROXY,
            last_sync: t(-5),
            oldest_change: t(600),
            waited_s: 1.1,
            allowed_s: 1.0,
            missed_changes: 1,
            missed_services: vec!["kube-system/kube-dns".into()],
            evidence: "endpoint-gone",
        })
    );
    assert_eq!((j.failing_since, j.allowed_s), (Some(t(10)), 1.0));
    // Restarted: it syncs everything and answers again.
    m.on_scrape(t(620), Ok(said(615)));
    let j = m.judge();
    assert_eq!((j.stalled, j.pending_changes), (None, 0));
}

#[test]
fn a_proxy_answering_with_a_sync_that_does_not_advance_is_stalled() {
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    m.on_scrape(t(0), Ok(said(0)));
    m.on_change(t(3), dns());
    m.on_change(t(4), ServiceKey::new("prod", "web"));
    m.on_scrape(t(10), Ok(said(0)));
    assert_eq!(m.judge().stalled, None, "7 s waited, as of the scrape");
    m.on_scrape(t(20), Ok(said(0)));
    // Judged as of the scrape at 20 s, however late the judgement runs.
    let s = m.judge().stalled.unwrap();
    assert_eq!((s.waited_s, s.evidence), (17.0, "sync-not-advancing"));
    assert_eq!(s.missed_changes, 2);
    assert_eq!(s.missed_services, ["kube-system/kube-dns", "prod/web"]);
}

#[test]
fn without_service_changes_it_is_never_stalled_however_old_the_sync() {
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    m.on_scrape(t(0), Ok(said(-86_400)));
    assert_eq!(m.judge().stalled, None, "answering, a day old");
    for s in [10, 3600, 86_400 * 30] {
        m.on_scrape(t(s), refused());
        assert_eq!(m.judge().stalled, None, "refused at {s}s");
        assert_eq!(m.rescrape_at(), None);
    }
}

#[test]
fn a_slow_or_never_answering_endpoint_is_not_stalled_by_itself() {
    // Never answered (no kube-proxy here): unknown, whatever changes.
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    m.on_scrape(t(0), refused());
    m.on_change(t(1), dns());
    assert_eq!(m.judge().stalled, None);
    // Timing out after a good scrape: judged as of that scrape only.
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    m.on_scrape(t(0), Ok(said(0)));
    m.on_change(t(5), dns());
    m.on_scrape(
        t(10),
        Err(ScrapeFailure {
            refused: false,
            error: "timed out after 2s".into(),
        }),
    );
    let j = m.judge();
    assert_eq!((j.endpoint, j.stalled), (Endpoint::Failing, None));
}

#[test]
fn one_sync_as_long_as_kube_proxy_measured_it_is_allowed_too() {
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    // 99 % of its syncs take up to 8 s (a large cluster's iptables).
    let text = "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"4\"} 50\n\
                kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"8\"} 100\n\
                kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"+Inf\"} 100\n\
                kubeproxy_sync_proxy_rules_duration_seconds_count 100\n\
                kubeproxy_sync_proxy_rules_last_timestamp_seconds 1800000000\n";
    m.on_scrape(t(0), Ok(KubeProxyMetrics::from_text(text).unwrap()));
    m.on_change(t(2), dns());
    m.on_scrape(t(21), Ok(KubeProxyMetrics::from_text(text).unwrap()));
    let j = m.judge();
    assert_eq!(
        (j.allowed_s, j.stalled),
        (19.0, None),
        "waited 19 s: within"
    );
    m.on_scrape(t(22), Ok(KubeProxyMetrics::from_text(text).unwrap()));
    assert_eq!(m.judge().stalled.unwrap().waited_s, 20.0);
}

#[test]
fn changes_past_the_bound_are_counted_not_kept() {
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    m.on_scrape(t(0), Ok(said(0)));
    for i in 0..MAX_CHANGES + 10 {
        m.on_change(t(2), ServiceKey::new("ns", format!("s{i}")));
    }
    assert_eq!(m.changes.len(), MAX_CHANGES);
    m.on_scrape(t(20), Ok(said(0)));
    let s = m.judge().stalled.unwrap();
    assert_eq!(s.missed_changes, MAX_CHANGES as u64 + 10);
    assert_eq!(s.missed_services.len(), MAX_NAMED);
}

#[test]
fn programming_p99_over_the_window_of_scrapes() {
    let mut m = KubeProxyModel::new(MIN_SYNC, SCRAPE);
    let text = |fast: u32, slow: u32| {
        format!(
            "kubeproxy_network_programming_duration_seconds_bucket{{le=\"1\"}} {fast}\n\
             kubeproxy_network_programming_duration_seconds_bucket{{le=\"4\"}} {}\n\
             kubeproxy_network_programming_duration_seconds_bucket{{le=\"+Inf\"}} {}\n\
             kubeproxy_network_programming_duration_seconds_count {}\n",
            fast + slow,
            fast + slow,
            fast + slow
        )
    };
    m.on_scrape(
        t(0),
        Ok(KubeProxyMetrics::from_text(&text(100, 0)).unwrap()),
    );
    assert_eq!(m.judge().programming_p99_s, None, "one scrape: no window");
    // 100 more, all in (1, 4]: their p99 is 1 + 3 × 0.99.
    m.on_scrape(
        t(10),
        Ok(KubeProxyMetrics::from_text(&text(100, 100)).unwrap()),
    );
    let j = m.judge();
    assert_eq!(j.programming_window, Some((t(0), t(10))));
    assert!((j.programming_p99_s.unwrap() - 3.97).abs() < 1e-9);
    // Scrapes beyond the window drop out: the slow ones are 6 minutes old.
    for s in (20..=400).step_by(10) {
        m.on_scrape(
            t(s),
            Ok(KubeProxyMetrics::from_text(&text(100 + s as u32, 100)).unwrap()),
        );
    }
    let j = m.judge();
    assert!(j.programming_window.unwrap().0 >= t(100));
    assert_eq!(
        j.programming_p99_s,
        Some(0.99),
        "all in (0, 1]: interpolated"
    );
}

fn service(name: &str, headless: bool, labels: &[(&str, &str)]) -> ServiceRecord {
    ServiceRecord {
        key: ServiceKey::new("prod", name),
        cluster_ips: if headless {
            vec![]
        } else {
            vec!["10.96.5.5".parse().unwrap()]
        },
        headless,
        service_type: "ClusterIP".into(),
        publish_not_ready: false,
        internal_traffic_policy: Default::default(),
        external_traffic_policy: Default::default(),
        ports: vec![ServicePort {
            name: None,
            port: 80,
            protocol: Protocol::Tcp,
            node_port: None,
        }],
        has_selector: true,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn slice(svc: &str, ip: &str) -> SliceRecord {
    SliceRecord {
        namespace: "prod".into(),
        name: format!("{svc}-abc"),
        service: svc.into(),
        address_type: ghostip_core::truth::AddressType::IPv4,
        endpoints: vec![EndpointRecord {
            ip: ip.parse().unwrap(),
            ready: true,
            serving: true,
            terminating: false,
            pod: None,
            node: Some("node-3".into()),
            hostname: None,
        }],
        ports: vec![EndpointPort {
            name: None,
            port: 8080,
            protocol: Protocol::Tcp,
        }],
        trigger_time: None,
    }
}

#[test]
fn in_a_session_only_live_changes_of_proxied_services_count() {
    let kinds = [ResourceKind::EndpointSlices, ResourceKind::Services];
    let mut s = Session::new(
        SessionConfig::default(),
        SyncState::new(t(0), kinds.clone()),
    );
    s.register(KubeProxyModel::new(MIN_SYNC, SCRAPE));
    let feed = |s: &mut Session, event, at| {
        s.on_truth(&Received { at, event });
    };
    let services = [
        service("web", false, &[]),
        service("backend", true, &[]),
        service(
            "mesh",
            false,
            &[("service.kubernetes.io/service-proxy-name", "other")],
        ),
    ];
    for kind in kinds {
        feed(&mut s, TruthEvent::Init(kind.clone()), t(0));
        for svc in &services {
            let name = svc.key.name.clone();
            let object = match &kind {
                ResourceKind::Services => TruthObject::Service(svc.clone()),
                _ => TruthObject::Slice(slice(&name, "10.244.3.1")),
            };
            feed(&mut s, TruthEvent::InitApply(object), t(0));
        }
        feed(&mut s, TruthEvent::InitDone(kind), t(0));
    }
    assert!(s.synced());
    let m = s.layer::<KubeProxyModel>().unwrap();
    assert_eq!(m.changes.len(), 0, "the first LIST is a baseline");
    for name in ["web", "backend", "mesh"] {
        feed(
            &mut s,
            TruthEvent::Apply(TruthObject::Slice(slice(name, "10.244.3.2"))),
            t(5),
        );
    }
    let m = s.layer::<KubeProxyModel>().unwrap();
    assert_eq!(
        m.changes.iter().cloned().collect::<Vec<_>>(),
        [(t(5), ServiceKey::new("prod", "web"))],
        "headless and other proxies' Services are not kube-proxy's"
    );
    // A relist after a gap replays a change: not counted.
    feed(&mut s, TruthEvent::Init(ResourceKind::EndpointSlices), t(9));
    feed(
        &mut s,
        TruthEvent::InitApply(TruthObject::Slice(slice("web", "10.244.3.3"))),
        t(9),
    );
    feed(
        &mut s,
        TruthEvent::InitDone(ResourceKind::EndpointSlices),
        t(9),
    );
    assert_eq!(s.layer::<KubeProxyModel>().unwrap().changes.len(), 1);
}
