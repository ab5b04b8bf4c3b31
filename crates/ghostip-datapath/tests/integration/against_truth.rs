//! Tests of the datapath-vs-truth comparison over generated clusters and real captures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ghostip_core::engine::{Discrepancy, Engine, EngineConfig, EngineEvent, Verdict};
use ghostip_core::truth::{
    EndpointPort, EndpointRecord, ServicePort, ServiceRecord, SliceRecord, TrafficPolicy, Truth,
};
use ghostip_core::{ChangeTime, ObservationResult, PathIdx, PathInfo, ServiceKey, Target, Time};
use ghostip_datapath::against_truth::*;
use ghostip_datapath::layers::IPTABLES;
use ghostip_datapath::{
    Backend, BackendState, Format, Frontend, FrontendKind, LbTable, PackedTable, Protocol,
    iptables, ipvs, nft,
};
use ghostip_testkit::dumps::{GenModel, GenSpec, OTHER_NODE, THIS_NODE};
use proptest::prelude::*;

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn spec() -> GenSpec {
    let mut s = GenSpec::new(12, 40);
    s.empty_every = 6;
    s
}

fn data(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Replaces the endpoints of `model`'s service `i` in `truth` (one slice per service).
fn set_endpoints(
    truth: &mut Truth,
    model: &GenModel,
    i: usize,
    ips: &[(Ipv4Addr, &str)],
    at: Time,
    trigger: Option<Time>,
) {
    let (_, slices) = model.truth_records();
    let mut slice = slices[i].clone();
    let port = model.services[i]
        .endpoints
        .first()
        .map_or(8080, |e| e.port());
    let svc = &model.services[i];
    slice.ports = vec![EndpointPort {
        name: (!svc.service.port_name.is_empty()).then(|| svc.service.port_name.clone()),
        port,
        protocol: svc.protocol.to_core().unwrap(),
    }];
    slice.endpoints = ips
        .iter()
        .map(|(ip, node)| EndpointRecord {
            ip: IpAddr::V4(*ip),
            ready: true,
            serving: true,
            terminating: false,
            pod: None,
            node: Some((*node).to_string()),
            hostname: None,
        })
        .collect();
    slice.trigger_time = trigger;
    truth.apply_slice(slice, at);
}

#[test]
fn generated_dumps_and_real_captures_agree_with_their_truth() {
    let model = GenModel::generate(&spec());
    let truth = model.truth(t(0));
    let real_ipt =
        iptables::parse_str(&data("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt")).unwrap();
    let real_nft = nft::parse_str(&data("nft-j_gen-12svc-40ep_nft-1.0.6.json")).unwrap();
    for (name, table) in [
        ("expected iptables", model.expected(Format::Iptables)),
        ("expected nft", model.expected(Format::NftJson)),
        ("real iptables-save", real_ipt),
        ("real nft -j", real_nft),
    ] {
        for node in [Some(THIS_NODE), Some(OTHER_NODE), None] {
            let d = diff(&table, &truth, node, Some(t(10)));
            assert!(d.is_clean(), "{name} on {node:?}: {d:#?}");
            assert_eq!(d.unknown_frontends, 0, "{name}");
            assert_eq!(d.frontends_checked, table.frontends.len(), "{name}");
        }
    }
}

#[test]
fn a_removed_endpoint_is_stale_on_every_frontend_of_its_service_with_time_since_change() {
    let mut s = spec();
    s.nodeport_every = 1;
    s.external_ip_every = 1;
    let model = GenModel::generate(&s);
    let table = iptables::parse_str(&model.iptables_save()).unwrap();
    let mut truth = model.truth(t(0));
    // Service 0 loses its second endpoint at t=100 (trigger time), dump taken at t=147.
    let svc = &model.services[0];
    let keep: Vec<(Ipv4Addr, &str)> = svc
        .endpoints
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(i, e)| (*e.ip(), if i == 0 { THIS_NODE } else { OTHER_NODE }))
        .collect();
    set_endpoints(&mut truth, &model, 0, &keep, t(101), Some(t(100)));
    let d = diff(&table, &truth, Some(THIS_NODE), Some(t(147)));
    let gone = Target::socket(IpAddr::V4(*svc.endpoints[1].ip()), svc.endpoints[1].port());
    let kinds: Vec<FrontendKind> = d.stale.iter().map(|r| r.frontend.kind).collect();
    assert_eq!(
        kinds,
        // Sorted by frontend address: the NodePort's 0.0.0.0 first.
        vec![
            FrontendKind::NodePort,
            FrontendKind::ClusterIp,
            FrontendKind::ExternalIp
        ],
        "{d:#?}"
    );
    for r in &d.stale {
        assert_eq!(r.backend, gone);
        assert_eq!(
            r.service,
            ServiceKey::new(&svc.service.namespace, &svc.service.name)
        );
        assert_eq!(r.state, Some(BackendState::Active));
        assert_eq!(r.changed_at, Some(t(100)));
        assert_eq!(r.since_change, Some(Duration::from_secs(47)));
    }
    assert!(d.missing.is_empty() && d.services_missing.is_empty());
    assert!(!d.is_clean());
}

#[test]
fn an_added_endpoint_is_missing_and_services_absent_from_the_dump_are_reported() {
    let model = GenModel::generate(&spec());
    let table = model.expected(Format::Iptables);
    let mut truth = model.truth(t(0));
    let svc = &model.services[2];
    let mut ips: Vec<(Ipv4Addr, &str)> = svc
        .endpoints
        .iter()
        .map(|e| (*e.ip(), OTHER_NODE))
        .collect();
    ips.push((Ipv4Addr::new(100, 127, 0, 1), OTHER_NODE));
    set_endpoints(&mut truth, &model, 2, &ips, t(5), None);
    // A service the dump does not have at all, with two ports, and one with a port it lacks.
    let new = ServiceKey::new("shop", "cart");
    truth.apply_service(
        ServiceRecord {
            key: new.clone(),
            cluster_ips: vec![IpAddr::V4(Ipv4Addr::new(10, 96, 200, 1))],
            headless: false,
            service_type: "ClusterIP".into(),
            publish_not_ready: false,
            internal_traffic_policy: TrafficPolicy::Cluster,
            external_traffic_policy: TrafficPolicy::Cluster,
            ports: vec![
                ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    protocol: ghostip_core::Protocol::Tcp,
                    node_port: None,
                },
                ServicePort {
                    name: Some("grpc".into()),
                    port: 9000,
                    protocol: ghostip_core::Protocol::Tcp,
                    node_port: None,
                },
            ],
            has_selector: true,
            labels: Default::default(),
        },
        t(5),
    );
    let mut partial = truth
        .service(&ServiceKey::new(&svc.service.namespace, &svc.service.name))
        .unwrap()
        .clone();
    partial.ports.push(ServicePort {
        name: Some("extra".into()),
        port: 7777,
        protocol: ghostip_core::Protocol::Udp,
        node_port: None,
    });
    truth.apply_service(partial, t(5));
    let d = diff(&table, &truth, None, None);
    assert_eq!(d.missing.len(), 1, "{d:#?}");
    assert_eq!(
        d.missing[0].backend,
        Target::socket(
            IpAddr::V4(Ipv4Addr::new(100, 127, 0, 1)),
            svc.endpoints[0].port()
        )
    );
    assert_eq!(d.missing[0].since_change, None);
    assert_eq!(d.services_missing.len(), 1);
    assert_eq!(d.services_missing[0].service, new);
    assert_eq!(d.services_missing[0].frontends.len(), 2);
    assert_eq!(d.frontends_missing.len(), 1);
    assert_eq!(d.frontends_missing[0].frontend.port, 7777);
    assert!(d.stale.is_empty());
}

#[test]
fn frontends_of_services_the_truth_lacks_are_counted_not_judged() {
    let model = GenModel::generate(&spec());
    let table = model.expected(Format::NftJson);
    let (services, slices) = model.truth_records();
    let mut truth = Truth::new();
    for s in services.into_iter().skip(1) {
        truth.apply_service(s, t(0));
    }
    for s in slices.into_iter().skip(1) {
        truth.apply_slice(s, t(0));
    }
    let d = diff(&table, &truth, None, None);
    assert!(d.is_clean(), "{d:#?}");
    assert_eq!(d.unknown_frontends, 1);
    assert_eq!(d.unknown_samples.len(), 1);
    assert!(
        d.unknown_samples[0].contains("ns-0/svc-0"),
        "{:?}",
        d.unknown_samples
    );
}

#[test]
fn traffic_policy_local_requires_only_the_nodes_own_endpoints() {
    let mut s = spec();
    s.nodeport_every = 1;
    s.local_every = 1;
    let model = GenModel::generate(&s);
    let table = iptables::parse_str(&model.iptables_save()).unwrap();
    let mut truth = model.truth(t(0));
    // The NodePort of a Local service holds every endpoint (kube-proxy's pod-CIDR
    // short-circuit), which is allowed; a new endpoint on another node is required only
    // where it runs.
    let svc = &model.services[0];
    let mut ips: Vec<(Ipv4Addr, &str)> = svc
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| (*e.ip(), if i == 0 { THIS_NODE } else { OTHER_NODE }))
        .collect();
    ips.push((Ipv4Addr::new(100, 127, 0, 9), "node-3"));
    set_endpoints(&mut truth, &model, 0, &ips, t(1), None);
    let on1 = diff(&table, &truth, Some(THIS_NODE), None);
    let np_missing: Vec<&BackendDiff> = on1
        .missing
        .iter()
        .filter(|r| r.frontend.kind == FrontendKind::NodePort)
        .collect();
    assert!(np_missing.is_empty(), "{on1:#?}");
    // The cluster IP (internal policy Cluster) misses it on every node.
    assert_eq!(on1.missing.len(), 1);
    assert_eq!(on1.missing[0].frontend.kind, FrontendKind::ClusterIp);
    let on3 = diff(&table, &truth, Some("node-3"), None);
    assert_eq!(on3.missing.len(), 2, "{on3:#?}");
    assert!(on1.stale.is_empty() && on3.stale.is_empty());
}

#[test]
fn ipvs_weight_zero_is_draining_while_the_endpoint_exists_and_stale_after() {
    let table = ipvs::parse_str(&data("ipvsadm-Ln_weight0.txt")).unwrap();
    let dns = ServiceKey::new("kube-system", "kube-dns");
    let mut truth = Truth::new();
    truth.apply_service(
        ServiceRecord {
            key: dns.clone(),
            cluster_ips: vec![IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))],
            headless: false,
            service_type: "ClusterIP".into(),
            publish_not_ready: false,
            internal_traffic_policy: TrafficPolicy::Cluster,
            external_traffic_policy: TrafficPolicy::Cluster,
            ports: vec![
                ServicePort {
                    name: Some("dns".into()),
                    port: 53,
                    protocol: ghostip_core::Protocol::Udp,
                    node_port: None,
                },
                ServicePort {
                    name: Some("dns-tcp".into()),
                    port: 53,
                    protocol: ghostip_core::Protocol::Tcp,
                    node_port: None,
                },
                ServicePort {
                    name: Some("metrics".into()),
                    port: 9153,
                    protocol: ghostip_core::Protocol::Tcp,
                    node_port: None,
                },
            ],
            has_selector: true,
            labels: Default::default(),
        },
        t(0),
    );
    let ep = |ip: [u8; 4], ready: bool| EndpointRecord {
        ip: IpAddr::V4(Ipv4Addr::from(ip)),
        ready,
        serving: ready,
        terminating: !ready,
        pod: None,
        node: None,
        hostname: None,
    };
    let slice = |eps: Vec<EndpointRecord>| SliceRecord {
        namespace: "kube-system".into(),
        name: "kube-dns-x".into(),
        service: "kube-dns".into(),
        address_type: ghostip_core::truth::AddressType::IPv4,
        endpoints: eps,
        ports: vec![
            EndpointPort {
                name: Some("dns".into()),
                port: 53,
                protocol: ghostip_core::Protocol::Udp,
            },
            EndpointPort {
                name: Some("dns-tcp".into()),
                port: 53,
                protocol: ghostip_core::Protocol::Tcp,
            },
            EndpointPort {
                name: Some("metrics".into()),
                port: 9153,
                protocol: ghostip_core::Protocol::Tcp,
            },
        ],
        trigger_time: None,
    };
    truth.apply_slice(
        slice(vec![ep([10, 244, 1, 5], true), ep([10, 244, 2, 7], false)]),
        t(0),
    );
    let d = diff(&table, &truth, None, None);
    assert!(d.is_clean(), "{d:#?}");
    assert_eq!(d.draining, 3);
    // The terminating pod is gone: its weight-0 real servers are stale.
    truth.apply_slice(slice(vec![ep([10, 244, 1, 5], true)]), t(1));
    let d = diff(&table, &truth, None, None);
    assert_eq!(d.stale.len(), 3, "{d:#?}");
    assert!(
        d.stale
            .iter()
            .all(|r| r.backend.ip == IpAddr::V4(Ipv4Addr::new(10, 244, 2, 7))
                && r.state == Some(BackendState::Terminating))
    );
    assert_eq!(d.draining, 0);
    // Frontends of Services this truth lacks (apiserver, the web service) are counted.
    assert_eq!(d.unknown_frontends, 4);
}

fn datapath_path(e: &mut Engine, node: &str) -> PathIdx {
    e.add_path(
        PathInfo {
            id: format!("iptables/{node}"),
            kind: IPTABLES,
            description: format!("kube-proxy iptables on {node}"),
            node: Some(node.into()),
        },
        Duration::from_secs(2),
    )
}

#[test]
fn the_engine_judges_a_datapath_from_its_observations_like_a_dns_path() {
    let model = GenModel::generate(&spec());
    let before = iptables::parse_str(&model.iptables_save()).unwrap();
    let mut truth = model.truth(t(0));
    let mut engine = Engine::new(EngineConfig::default());
    let path = datapath_path(&mut engine, THIS_NODE);
    let keys: Vec<ServiceKey> = truth.services().map(|s| s.key.clone()).collect();
    for k in &keys {
        engine.set_desired_on_path(
            path,
            k,
            desired(&truth, k, Some(THIS_NODE), Family::V4),
            ChangeTime::received_at(t(0)),
        );
    }
    engine.truth_synced(t(0));
    let obs = observations(&before, &truth, path, Family::V4, t(1));
    assert_eq!(obs.observations.len(), keys.len());
    assert_eq!(obs.unknown_frontends, 0);
    for o in &obs.observations {
        assert!(
            engine.observe(o).is_empty(),
            "agreeing dump opened something"
        );
    }
    // Service 0 loses its first endpoint at t=10; the node keeps it until t=40.
    let svc = &model.services[0];
    let key = ServiceKey::new(&svc.service.namespace, &svc.service.name);
    let rest: Vec<(Ipv4Addr, &str)> = svc
        .endpoints
        .iter()
        .skip(1)
        .map(|e| (*e.ip(), OTHER_NODE))
        .collect();
    set_endpoints(&mut truth, &model, 0, &rest, t(10), None);
    let ev = engine.set_desired_on_path(
        path,
        &key,
        desired(&truth, &key, Some(THIS_NODE), Family::V4),
        ChangeTime::received_at(t(10)),
    );
    assert!(matches!(ev.as_slice(), [EngineEvent::Opened(tr)] if tr.kind == Discrepancy::Stale));
    for at in [20, 40] {
        for o in observations(&before, &truth, path, Family::V4, t(at)).observations {
            engine.observe(&o);
        }
    }
    let mut after_model = model.clone();
    after_model.services[0].endpoints.remove(0);
    let after = iptables::parse_str(&after_model.iptables_save()).unwrap();
    for o in observations(&after, &truth, path, Family::V4, t(41)).observations {
        engine.observe(&o);
    }
    let closed: Vec<_> = engine
        .tick(t(45))
        .into_iter()
        .filter_map(|e| match e {
            EngineEvent::Closed(tr) => Some(tr),
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), 1);
    assert_eq!(
        closed[0].target,
        Target::socket(IpAddr::V4(*svc.endpoints[0].ip()), svc.endpoints[0].port())
    );
    assert_eq!(closed[0].window_lower(), Some(Duration::from_secs(30)));
    assert_eq!(closed[0].window_upper(), Some(Duration::from_secs(31)));
    assert_eq!(closed[0].verdict, Verdict::OverExpectedLag);
}

#[test]
fn a_dump_without_a_service_is_an_empty_observation() {
    let model = GenModel::generate(&spec());
    let truth = model.truth(t(0));
    let empty = LbTable::new(Format::Iptables);
    let obs = observations(&empty, &truth, PathIdx(0), Family::V4, t(1));
    assert_eq!(obs.observations.len(), model.services.len());
    assert!(
        obs.observations
            .iter()
            .all(|o| o.result == ObservationResult::Held(Vec::new()))
    );
    let d = diff(&empty, &truth, None, None);
    assert_eq!(d.services_missing.len(), model.services.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Removing any endpoints from the truth makes exactly those stale on each frontend of
    /// their service; adding new ones makes exactly those missing; nothing else changes.
    #[test]
    fn stale_and_missing_are_exactly_the_truth_changes(
        services in 1usize..20,
        endpoints in 0usize..60,
        nodeports in 0usize..4,
        drop_mask in proptest::collection::vec(any::<bool>(), 60),
        add in proptest::collection::vec(0usize..20, 0..5),
    ) {
        let mut s = GenSpec::new(services, endpoints);
        s.nodeport_every = nodeports;
        let model = GenModel::generate(&s);
        let table = iptables::parse_str(&model.iptables_save()).unwrap();
        let mut truth = model.truth(t(0));
        let mut want_stale = BTreeSet::new();
        let mut want_missing = BTreeSet::new();
        let mut k = 0usize;
        for (i, svc) in model.services.iter().enumerate() {
            let frontends = table.frontends.iter().filter(|f| f.service.as_ref() == Some(&svc.service)).count();
            let mut ips = Vec::new();
            let mut changed = false;
            for e in &svc.endpoints {
                let drop = drop_mask.get(k).copied().unwrap_or(false);
                k += 1;
                if drop {
                    changed = true;
                    for n in 0..frontends { want_stale.insert((i, n, Target::socket(IpAddr::V4(*e.ip()), e.port()))); }
                } else {
                    ips.push((*e.ip(), OTHER_NODE));
                }
            }
            let extra = add.iter().filter(|a| **a == i).count();
            if !svc.endpoints.is_empty() {
                for j in 0..extra {
                    changed = true;
                    let ip = Ipv4Addr::new(100, 126, i as u8, j as u8);
                    ips.push((ip, OTHER_NODE));
                    for n in 0..frontends { want_missing.insert((i, n, Target::socket(IpAddr::V4(ip), svc.endpoints[0].port()))); }
                }
            }
            if changed {
                set_endpoints(&mut truth, &model, i, &ips, t(1), None);
            }
        }
        let d = diff(&table, &truth, Some(OTHER_NODE), None);
        let index = |r: &BackendDiff| model.services.iter().position(|s| s.service.name == r.service.name).unwrap();
        let count = |rows: &[BackendDiff]| -> BTreeSet<(usize, usize, Target)> {
            let mut seen: BTreeMap<(usize, Target), usize> = BTreeMap::new();
            rows.iter().map(|r| {
                let i = index(r);
                let n = seen.entry((i, r.backend)).or_default();
                *n += 1;
                (i, *n - 1, r.backend)
            }).collect()
        };
        // A service whose endpoints all went away falls back to nothing: its frontends'
        // backends are all stale, as the mask says.
        prop_assert_eq!(count(&d.stale), want_stale);
        prop_assert_eq!(count(&d.missing), want_missing);
        prop_assert!(d.services_missing.is_empty() && d.frontends_missing.is_empty());
        prop_assert_eq!(d.unknown_frontends, 0);
    }
}

/// `for_each_observation` over the packed table gives the observations `observations`
/// gives over the full table: stale backends, draining ones and unknown frontends included.
#[test]
fn packed_observations_are_the_observations_of_the_full_table() {
    let model = GenModel::generate(&spec());
    let dump = model.iptables_save();
    let mut truth = model.truth(t(0));
    // The truth drops service 0's first endpoint; the dump still routes to it.
    let rest: Vec<(Ipv4Addr, &str)> = model.services[0]
        .endpoints
        .iter()
        .skip(1)
        .map(|e| (*e.ip(), OTHER_NODE))
        .collect();
    set_endpoints(&mut truth, &model, 0, &rest, t(10), None);
    let table = iptables::parse_str(&dump).unwrap();
    // A variant with a draining backend (an endpoint's IP, not active) and a frontend of
    // no Service.
    let mut odd = table.clone();
    let f = odd
        .frontends
        .iter_mut()
        .find(|f| f.backends.len() > 1)
        .unwrap();
    f.backends[1].state = BackendState::Terminating;
    odd.frontends.push(Frontend::new(
        "10.1.2.3".parse().unwrap(),
        81,
        Protocol::Tcp,
        FrontendKind::ClusterIp,
    ));
    // A Service with several frontends whose backends differ (each frontend's sorted list
    // is then not the Service's): one frontend gains a stray backend that sorts first.
    let shared = odd
        .frontends
        .iter()
        .filter_map(|f| f.service.as_ref())
        .find(|s| {
            odd.frontends
                .iter()
                .filter(|f| f.service.as_ref() == Some(*s))
                .count()
                > 1
        })
        .cloned()
        .unwrap();
    let mut extra = odd.clone();
    let f = extra
        .frontends
        .iter_mut()
        .rfind(|f| f.service.as_ref() == Some(&shared))
        .unwrap();
    f.backends
        .push(Backend::active("10.0.0.1".parse().unwrap(), 80));
    // The same backend draining on every frontend of that Service: its repeated frontends
    // count their draining backends too.
    let mut drained = table.clone();
    let ip = drained
        .frontends
        .iter()
        .find(|f| f.service.as_ref() == Some(&shared))
        .and_then(|f| f.backends.get(1))
        .unwrap()
        .ip;
    for f in &mut drained.frontends {
        if f.service.as_ref() == Some(&shared) {
            for b in &mut f.backends {
                if b.ip == ip {
                    b.state = BackendState::Terminating;
                }
            }
        }
    }
    let want = observations(&drained, &truth, PathIdx(3), Family::V4, t(20));
    assert!(want.draining > 1, "{}", want.draining);
    for full in [&table, &odd, &extra, &drained] {
        let want = observations(full, &truth, PathIdx(3), Family::V4, t(20));
        let packed = PackedTable::from(full.clone());
        let mut got = Vec::new();
        let counts = for_each_observation(&packed, &truth, PathIdx(3), Family::V4, t(20), |o| {
            got.push(o.clone())
        });
        assert_eq!(got, want.observations);
        assert_eq!(counts.services, want.observations.len());
        assert_eq!(counts.unknown_frontends, want.unknown_frontends);
        assert_eq!(counts.draining, want.draining);
    }
    let want = observations(&odd, &truth, PathIdx(3), Family::V4, t(20));
    assert_eq!((want.unknown_frontends, want.draining), (1, 1));
    // The streaming parse straight into a packed table observes the same.
    let streamed = ghostip_datapath::parse_reader_packed(Format::Iptables, dump.as_bytes())
        .unwrap()
        .unwrap();
    assert_eq!(streamed.backend_count(), table.backend_count());
    let mut got = Vec::new();
    for_each_observation(&streamed, &truth, PathIdx(3), Family::V4, t(20), |o| {
        got.push(o.clone())
    });
    let want = observations(&table, &truth, PathIdx(3), Family::V4, t(20));
    assert_eq!(got, want.observations);
    let stale = &got
        .iter()
        .find(|o| o.service.name == model.services[0].service.name)
        .unwrap()
        .result;
    assert!(
        matches!(stale, ObservationResult::Held(h) if h.len() == model.services[0].endpoints.len())
    );
}

/// `for_each_observation` numbers Services by their place in the truth and walks the
/// numbers in order: the observations stay those of `observations` whatever the truth
/// holds between them (headless Services, Services of the other family, ones without a
/// cluster IP) and for every family filter (with IPv6, only the Services the dump serves
/// are observed, none of them through the filter).
#[test]
fn packed_observations_skip_the_services_the_path_does_not_serve() {
    let model = GenModel::generate(&spec());
    let dump = model.iptables_save();
    let mut truth = model.truth(t(0));
    let (services, _) = model.truth_records();
    let near = |i: usize, suffix: &str| {
        let mut s = services[i].clone();
        s.key.name.push_str(suffix);
        s
    };
    // Key order puts each right after (or before) a Service of the dump.
    let mut headless = near(1, "-a");
    headless.headless = true;
    headless.cluster_ips.clear();
    let mut v6 = near(2, "-a");
    v6.cluster_ips = vec!["fd00::2".parse().unwrap()];
    v6.ports.iter_mut().for_each(|p| p.node_port = None);
    let mut no_ip = near(3, "-a");
    no_ip.cluster_ips.clear();
    no_ip.ports.iter_mut().for_each(|p| p.node_port = None);
    let mut first = services[0].clone();
    first.key.namespace = String::from("a");
    first.cluster_ips = vec!["10.255.0.1".parse().unwrap()];
    first.ports.iter_mut().for_each(|p| p.node_port = None);
    for s in [headless, v6, no_ip, first] {
        truth.apply_service(s, t(1));
    }
    let table = iptables::parse_str(&dump).unwrap();
    let packed = PackedTable::from(table.clone());
    for family in [Family::V4, Family::V6, Family::Both] {
        let want = observations(&table, &truth, PathIdx(1), family, t(20));
        let mut got = Vec::new();
        let counts = for_each_observation(&packed, &truth, PathIdx(1), family, t(20), |o| {
            got.push(o.clone())
        });
        assert_eq!(got, want.observations, "{family:?}");
        assert_eq!(counts.services, want.observations.len());
        assert_eq!(counts.unknown_frontends, want.unknown_frontends);
        assert!(!got.is_empty());
    }
}
