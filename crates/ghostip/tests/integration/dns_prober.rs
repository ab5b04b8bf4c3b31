//! The prober against real in-process DNS servers on loopback addresses: records changed under it while probing, a caching front that keeps a removed IP until its TTL expires, failures per path, prompt shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::dns_support;

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use dns_support::prober::Running;
use dns_support::{Behavior, CachingFront, FakeDns, TestServer, Zone, blackhole_udp, ip, name};
use ghostip::clock::TokioClock;
use ghostip::layers::dns::prober::{ProbeEvent, ProberConfig};
use ghostip::layers::dns::query::{QueryConfig, Transport};
use ghostip_core::Clock;
use ghostip_core::{FailureReason, ObservationResult, PathIdx, PathKind, ServiceKey, Target, Time};
use ghostip_session::layers::dns::names::{ProbeName, QueryType, ServiceNames};
use ghostip_session::layers::dns::paths::DnsPath;
use ghostip_session::layers::dns::probe::{ProbeCommand, ProbePath};
use ghostip_session::layers::dns::{DNS_CLUSTER_IP, DNS_NODE_LOCAL, DNS_OVERRIDE, DNS_POD};

const WEB: &str = "web.prod.svc.cluster.local.";

fn start(config: ProberConfig, query: QueryConfig) -> Running {
    let transport = ghostip::layers::dns::prober::HickoryTransport { config: query };
    Running::spawn(config, transport, TokioClock::new())
}

fn path(idx: u32, kind: PathKind, server: std::net::SocketAddr) -> ProbePath {
    ProbePath {
        idx: PathIdx(idx),
        path: DnsPath::new(kind, server, None, None),
    }
}

fn web() -> ServiceKey {
    ServiceKey::new("prod", "web")
}

fn web_a() -> Vec<ProbeName> {
    vec![ProbeName {
        name: name(WEB),
        qtype: QueryType::A,
    }]
}

fn ips_of(e: &ProbeEvent) -> Vec<IpAddr> {
    match &e.observation.result {
        ObservationResult::Held(h) => {
            let mut v: Vec<IpAddr> = h.iter().map(|t| t.target.ip).collect();
            v.sort();
            v
        }
        ObservationResult::Failed(r) => panic!("unexpected failure on {}: {r}", e.path_id),
    }
}

/// When the query behind an observation was sent.
fn sent_at(e: &ProbeEvent) -> Time {
    e.observation
        .at
        .checked_sub(e.observation.latency.unwrap_or_default())
        .unwrap()
}

fn fast() -> ProberConfig {
    ProberConfig {
        queries_per_second: NonZeroU32::new(200).unwrap(),
        burst_interval: Duration::from_millis(100),
        ..ProberConfig::default()
    }
}

#[tokio::test]
async fn caching_front_serves_a_removed_ip_until_its_ttl_expires() {
    // Two CoreDNS pods reading the same (API) zone, and a cache in front of the first.
    let zone = Zone::default();
    zone.set_addrs(WEB, &["10.244.1.7", "10.244.2.9"], 2);
    let pod_a = TestServer::start(ip("127.0.20.1"), FakeDns::new(zone.clone())).await;
    let pod_b = TestServer::start(ip("127.0.20.2"), FakeDns::new(zone.clone())).await;
    let front = TestServer::start(ip("127.0.20.3"), CachingFront::new(pod_a.addr, 30)).await;

    let r = start(fast(), QueryConfig::default());
    r.commands
        .send(ProbeCommand::SetPaths(vec![
            path(0, DNS_POD, pod_a.addr),
            path(1, DNS_POD, pod_b.addr),
            path(2, DNS_NODE_LOCAL, front.addr),
        ]))
        .await
        .unwrap();
    r.commands
        .send(ProbeCommand::Burst {
            service: web(),
            names: web_a(),
            until: r.clock.now().checked_add(Duration::from_secs(10)).unwrap(),
        })
        .await
        .unwrap();

    tokio::time::sleep(Duration::from_millis(400)).await;
    zone.set_addrs(WEB, &["10.244.2.9"], 2); // the pod behind 10.244.1.7 left the truth
    let changed = r.clock.now();
    tokio::time::sleep(Duration::from_millis(2300)).await;
    r.cancel.cancel();
    r.task.await.unwrap();

    let events = r.events.lock().unwrap().clone();
    let removed = ip("10.244.1.7");
    let kept = ip("10.244.2.9");
    // The pods answer from the truth: the first query sent after the change no longer has it.
    for pod in [PathIdx(0), PathIdx(1)] {
        let after: Vec<&ProbeEvent> = events
            .iter()
            .filter(|e| e.observation.path == pod && sent_at(e) > changed)
            .collect();
        assert!(after.len() >= 15, "{}", after.len());
        assert!(
            after.iter().all(|e| ips_of(e) == vec![kept]),
            "pod path {pod:?} converged at once"
        );
    }

    // The cache keeps the removed IP until its entry (TTL 2 s) expires. It filled the entry
    // while answering its first query: between that query's send and its answer.
    let front: Vec<&ProbeEvent> = events
        .iter()
        .filter(|e| e.observation.path == PathIdx(2))
        .collect();
    let first = front.iter().min_by_key(|e| e.observation.at).unwrap();
    let expiry_lo = sent_at(first).checked_add(Duration::from_secs(2)).unwrap();
    let expiry_hi = first
        .observation
        .at
        .checked_add(Duration::from_secs(2))
        .unwrap();
    let last_stale = front
        .iter()
        .filter(|e| ips_of(e).contains(&removed))
        .max_by_key(|e| e.observation.at)
        .unwrap();
    let first_fresh = front
        .iter()
        .filter(|e| !ips_of(e).contains(&removed))
        .map(|e| sent_at(e))
        .min()
        .unwrap();
    assert!(
        last_stale.observation.at > changed.checked_add(Duration::from_millis(1000)).unwrap(),
        "stale for over a second after the change"
    );
    assert!(
        sent_at(last_stale) < expiry_hi,
        "asked before the entry expired: {} vs {expiry_hi}",
        sent_at(last_stale)
    );
    assert!(
        first_fresh >= expiry_lo,
        "fresh only once the entry expired: {first_fresh} vs {expiry_lo}"
    );
    let gap = first_fresh.duration_since(sent_at(last_stale));
    assert!(
        gap.unsigned_abs() <= Duration::from_millis(500),
        "convergence seen within about one probe interval: {gap:?}"
    );
    let after_fresh: Vec<&&ProbeEvent> =
        front.iter().filter(|e| sent_at(e) >= first_fresh).collect();
    assert!(after_fresh.len() >= 3);
    assert!(
        after_fresh.iter().all(|e| ips_of(e) == vec![kept]),
        "never reappears"
    );

    // The TTLs handed out count down: 2 in the entry's first second, then 1.
    let ttls: Vec<u32> = front
        .iter()
        .filter(|e| e.observation.at < expiry_lo)
        .filter_map(|e| match &e.observation.result {
            ObservationResult::Held(h) => h.first().and_then(|t| t.ttl),
            ObservationResult::Failed(_) => None,
        })
        .collect();
    assert_eq!(ttls.first(), Some(&2));
    assert_eq!(ttls.last(), Some(&1));
    assert!(ttls.windows(2).all(|w| w[0] >= w[1]), "{ttls:?}");
    assert!(r.stats.snapshot().total_errors() == 0);
}

#[tokio::test]
async fn deleted_service_is_an_empty_answer_not_a_failure() {
    let zone = Zone::default();
    zone.set_addrs(WEB, &["10.244.1.7"], 30);
    let pod = TestServer::start(ip("127.0.20.11"), FakeDns::new(zone.clone())).await;
    let r = start(fast(), QueryConfig::default());
    r.commands
        .send(ProbeCommand::SetPaths(vec![path(0, DNS_POD, pod.addr)]))
        .await
        .unwrap();
    r.commands
        .send(ProbeCommand::Burst {
            service: web(),
            names: web_a(),
            until: r.clock.now().checked_add(Duration::from_secs(10)).unwrap(),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    zone.remove(WEB);
    let removed = r.clock.now();
    tokio::time::sleep(Duration::from_millis(350)).await;
    r.cancel.cancel();
    r.task.await.unwrap();

    let events = r.events.lock().unwrap().clone();
    let after: Vec<&ProbeEvent> = events.iter().filter(|e| sent_at(e) > removed).collect();
    assert!(after.len() >= 2);
    assert!(
        after
            .iter()
            .all(|e| e.observation.result == ObservationResult::Held(Vec::new()))
    );
    assert!(
        after
            .iter()
            .all(|e| e.rcode == Some(hickory_proto::op::ResponseCode::NXDomain))
    );
    let before: Vec<&ProbeEvent> = events
        .iter()
        .filter(|e| e.observation.at < removed)
        .collect();
    assert!(before.iter().all(|e| ips_of(e) == vec![ip("10.244.1.7")]));
}

#[tokio::test]
async fn every_path_is_swept_and_failures_are_counted_per_path_kind() {
    let zone = Zone::default();
    zone.set_addrs(WEB, &["10.244.1.7"], 30);
    let healthy = TestServer::start(ip("127.0.20.21"), FakeDns::new(zone.clone())).await;
    let failing = FakeDns::new(zone.clone());
    failing.set_behavior(Behavior::Rcode(hickory_proto::op::ResponseCode::ServFail));
    let failing = TestServer::start(ip("127.0.20.22"), failing).await;
    let truncating = FakeDns::new(zone.clone());
    truncating.set_behavior(Behavior::TruncateUdp);
    let truncating = TestServer::start(ip("127.0.20.23"), truncating).await;
    let hole = blackhole_udp(ip("127.0.20.24")).await;

    let config = ProberConfig {
        sweep_period: Duration::from_millis(400),
        ..fast()
    };
    let r = start(
        config,
        QueryConfig {
            timeout: Duration::from_millis(200),
            tcp_on_truncation: true,
        },
    );
    r.commands
        .send(ProbeCommand::SetPaths(vec![
            path(0, DNS_POD, healthy.addr),
            path(1, DNS_OVERRIDE, failing.addr),
            path(2, DNS_POD, truncating.addr),
            path(3, DNS_CLUSTER_IP, hole.local_addr().unwrap()),
        ]))
        .await
        .unwrap();
    r.commands
        .send(ProbeCommand::SetSweep(vec![ServiceNames {
            service: web(),
            names: web_a(),
        }]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    r.cancel.cancel();
    r.task.await.unwrap();

    let stats = r.stats.snapshot();
    let events = r.events.lock().unwrap().clone();
    assert!(
        stats
            .errors
            .get(&(DNS_OVERRIDE, "servfail"))
            .copied()
            .unwrap_or(0)
            >= 2,
        "{stats:?}"
    );
    assert!(
        stats
            .errors
            .get(&(DNS_CLUSTER_IP, "timeout"))
            .copied()
            .unwrap_or(0)
            >= 2,
        "{stats:?}"
    );
    assert_eq!(stats.errors.len(), 2, "{stats:?}");
    assert!(stats.tcp_fallbacks >= 2);
    for e in &events {
        match e.observation.path {
            PathIdx(0) => assert_eq!(ips_of(e), vec![ip("10.244.1.7")]),
            PathIdx(1) => assert_eq!(
                e.observation.result,
                ObservationResult::Failed(FailureReason::Servfail)
            ),
            PathIdx(2) => {
                assert_eq!(ips_of(e), vec![ip("10.244.1.7")]);
                assert_eq!(e.transport, Transport::Tcp);
            }
            _ => assert_eq!(
                e.observation.result,
                ObservationResult::Failed(FailureReason::Timeout)
            ),
        }
    }
    let held = events
        .iter()
        .find(|e| e.observation.path == PathIdx(0))
        .unwrap();
    assert_eq!(held.observation.service, web());
    match &held.observation.result {
        ObservationResult::Held(h) => assert_eq!(h[0].target, Target::ip(ip("10.244.1.7"))),
        ObservationResult::Failed(_) => unreachable!(),
    }
}

#[tokio::test]
async fn shutdown_is_prompt_with_queries_in_flight() {
    let holes = [
        blackhole_udp(ip("127.0.20.31")).await,
        blackhole_udp(ip("127.0.20.32")).await,
    ];
    let r = start(
        fast(),
        QueryConfig {
            timeout: Duration::from_secs(5),
            tcp_on_truncation: true,
        },
    );
    let paths = holes
        .iter()
        .enumerate()
        .map(|(i, h)| path(i as u32, DNS_POD, h.local_addr().unwrap()))
        .collect();
    r.commands
        .send(ProbeCommand::SetPaths(paths))
        .await
        .unwrap();
    r.commands
        .send(ProbeCommand::Burst {
            service: web(),
            names: web_a(),
            until: r.clock.now().checked_add(Duration::from_secs(60)).unwrap(),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(r.stats.snapshot().in_flight >= 4);

    let asked = std::time::Instant::now();
    r.cancel.cancel();
    tokio::time::timeout(Duration::from_millis(500), r.task)
        .await
        .expect("stops within 500 ms")
        .unwrap();
    assert!(asked.elapsed() < Duration::from_millis(500));
}
