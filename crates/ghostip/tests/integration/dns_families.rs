//! A dual-stack headless Service with a named port, judged per question against a real DNS
//! server: A answers against the IPv4 endpoints, AAAA against the IPv6 ones, the SRV name of
//! the named port against the endpoints' `ip:port`.
//!
//! The server is an in-process hickory server over real UDP; the queries are ghostip's own
//! ([`ghostip::layers::dns::query`]), the names and the judging the DNS layer's
//! ([`DnsModel::scope`]), the verdicts the engine's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::dns_support;

use std::net::SocketAddr;
use std::time::Duration;

use dns_support::{FakeDns, TestServer, Zone, ip};
use ghostip::layers::dns::query::{QueryConfig, query};
use ghostip_core::engine::Discrepancy;
use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, ServicePort, ServiceRecord, SliceRecord,
};
use ghostip_core::{Observation, ObservationResult, PathIdx, PodRef, Protocol, ServiceKey, Time};
use ghostip_session::layers::dns::names::{NameConfig, service_names};
use ghostip_session::layers::dns::paths::PathConfig;
use ghostip_session::layers::dns::{DnsConfig, DnsModel};
use ghostip_session::{
    Received, ResourceKind, Session, SessionConfig, SyncState, TruthEvent, TruthObject,
};
use ghostip_testkit::records::headless_service;

const NAME: &str = "web.prod.svc.cluster.local.";
const SRV_NAME: &str = "_http._tcp.web.prod.svc.cluster.local.";

fn key() -> ServiceKey {
    ServiceKey::new("prod", "web")
}

fn service() -> ServiceRecord {
    ServiceRecord {
        ports: vec![ServicePort {
            name: Some("http".into()),
            port: 80,
            protocol: Protocol::Tcp,
            node_port: None,
        }],
        ..headless_service(key())
    }
}

fn slice(name: &str, family: AddressType, ips: &[&str]) -> SliceRecord {
    SliceRecord {
        namespace: "prod".into(),
        name: name.into(),
        service: "web".into(),
        address_type: family,
        endpoints: ips
            .iter()
            .map(|a| EndpointRecord {
                ip: ip(a),
                ready: true,
                serving: true,
                terminating: false,
                pod: Some(PodRef {
                    namespace: "prod".into(),
                    name: format!("web-{}", a.rsplit(['.', ':']).next().unwrap()),
                    uid: format!("uid-{a}"),
                }),
                node: Some("node-1".into()),
                hostname: None,
            })
            .collect(),
        ports: vec![EndpointPort {
            name: Some("http".into()),
            port: 8080,
            protocol: Protocol::Tcp,
        }],
        trigger_time: None,
    }
}

fn at(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

/// What the server answers: A and AAAA of the Service name, and its SRV name with one
/// record per address on port 8080.
fn serve(zone: &Zone, addrs: &[&str]) {
    zone.set_service(NAME, SRV_NAME, 8080, addrs, 30);
}

/// A session whose only DNS path is `server`, synced with the Service and its two slices.
fn session(server: SocketAddr) -> (Session, PathIdx) {
    let kinds = vec![ResourceKind::EndpointSlices, ResourceKind::Services];
    let dns = DnsModel::new(DnsConfig {
        paths: PathConfig {
            pods: false,
            cluster_ip: false,
            overrides: vec![server],
            ..PathConfig::default()
        },
        names: NameConfig {
            srv: true,
            ..NameConfig::default()
        },
        ..DnsConfig::default()
    });
    let mut s = Session::new(
        SessionConfig::default(),
        SyncState::new(at(0), kinds.clone()),
    )
    .with_layer(dns);
    let objects = [
        TruthObject::Service(service()),
        TruthObject::Slice(slice(
            "web-v4",
            AddressType::IPv4,
            &["10.244.1.5", "10.244.2.6"],
        )),
        TruthObject::Slice(slice("web-v6", AddressType::IPv6, &["fd00::5", "fd00::6"])),
    ];
    for k in kinds {
        let init = |event| Received { at: at(0), event };
        s.on_truth(&init(TruthEvent::Init(k.clone())));
        for o in &objects {
            let fits = matches!(
                (&k, o),
                (ResourceKind::Services, TruthObject::Service(_))
                    | (ResourceKind::EndpointSlices, TruthObject::Slice(_))
            );
            if fits {
                s.on_truth(&init(TruthEvent::InitApply(o.clone())));
            }
        }
        s.on_truth(&init(TruthEvent::InitDone(k)));
    }
    assert!(s.synced());
    let path = s
        .engine()
        .paths()
        .map(|(i, _)| i)
        .next()
        .expect("the override path");
    (s, path)
}

/// Asks every name of the Service once, at `now`, and feeds each answer for what it speaks.
async fn probe_round(s: &mut Session, path: PathIdx, server: SocketAddr, now: Time) {
    let cfg = NameConfig {
        srv: true,
        ..NameConfig::default()
    };
    let names = service_names(s.truth(), &key(), &cfg).unwrap();
    let qtypes: Vec<&str> = names.iter().map(|n| n.qtype.as_str()).collect();
    assert_eq!(qtypes, ["A", "AAAA", "SRV"]);
    let qcfg = QueryConfig {
        timeout: Duration::from_secs(2),
        ..QueryConfig::default()
    };
    for probe in names {
        let answer = query(server, &probe.name, probe.qtype, &qcfg)
            .await
            .unwrap();
        let obs = Observation {
            path,
            service: key(),
            at: now,
            result: ObservationResult::Held(answer.held()),
            latency: None,
        };
        let scope = s
            .layer::<DnsModel>()
            .unwrap()
            .scope(s.truth(), &key(), &probe)
            .expect("every question of the Service is judged");
        s.observe_scoped(&obs, &scope);
    }
}

/// (target, kind, converged) of every open tracking.
fn open(s: &Session) -> Vec<(String, Discrepancy, bool)> {
    s.engine()
        .open_trackings()
        .map(|t| (t.target.to_string(), t.kind, t.converged_by.is_some()))
        .collect()
}

#[tokio::test]
async fn a_dual_stack_service_is_judged_per_family_and_per_named_port() {
    let zone = Zone::default();
    let all = ["10.244.1.5", "10.244.2.6", "fd00::5", "fd00::6"];
    serve(&zone, &all);
    let server = TestServer::start(ip("127.0.0.1"), FakeDns::new(zone.clone())).await;
    let (mut s, path) = session(server.addr);

    // Every answer is right: nothing is missing (an A answer says nothing about the IPv6
    // endpoints, nor about their ports).
    probe_round(&mut s, path, server.addr, at(1)).await;
    assert_eq!(open(&s), vec![]);

    // fd00::5 leaves the endpoints; the server keeps answering with it (AAAA and SRV).
    s.on_truth(&Received {
        at: at(10),
        event: TruthEvent::Apply(TruthObject::Slice(slice(
            "web-v6",
            AddressType::IPv6,
            &["fd00::6"],
        ))),
    });
    probe_round(&mut s, path, server.addr, at(11)).await;
    assert_eq!(
        open(&s),
        vec![
            ("fd00::5".to_string(), Discrepancy::Stale, false),
            ("[fd00::5]:8080".to_string(), Discrepancy::Stale, false),
        ],
        "only the removed IPv6 endpoint, in its AAAA and SRV forms, is stale"
    );

    // The server lets go: both converge; the IPv4 endpoints were never in question.
    serve(&zone, &["10.244.1.5", "10.244.2.6", "fd00::6"]);
    probe_round(&mut s, path, server.addr, at(14)).await;
    assert_eq!(
        open(&s),
        vec![
            ("fd00::5".to_string(), Discrepancy::Stale, true),
            ("[fd00::5]:8080".to_string(), Discrepancy::Stale, true),
        ]
    );
    let closed = s.tick(at(60));
    assert_eq!(s.engine().open_trackings().count(), 0, "{closed:?}");

    // An IPv4 endpoint leaves; the SRV answer drops it first, the A answer keeps it.
    s.on_truth(&Received {
        at: at(100),
        event: TruthEvent::Apply(TruthObject::Slice(slice(
            "web-v4",
            AddressType::IPv4,
            &["10.244.2.6"],
        ))),
    });
    zone.set_addrs(NAME, &["10.244.1.5", "10.244.2.6", "fd00::6"], 30);
    zone.set_srv(
        SRV_NAME,
        &[
            ("10-244-2-6.web.prod.svc.cluster.local.", 8080, "10.244.2.6"),
            ("fd00--6.web.prod.svc.cluster.local.", 8080, "fd00::6"),
        ],
        30,
    );
    probe_round(&mut s, path, server.addr, at(101)).await;
    assert_eq!(
        open(&s),
        vec![
            ("10.244.1.5".to_string(), Discrepancy::Stale, false),
            ("10.244.1.5:8080".to_string(), Discrepancy::Stale, true),
        ]
    );
    server.stop().await;
}
