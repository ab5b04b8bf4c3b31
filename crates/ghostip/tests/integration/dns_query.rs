//! `dns::query` against real in-process DNS servers: answers and TTLs, SRV additionals, NXDOMAIN/NODATA, rcode failures, truncation → TCP, timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::dns_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use dns_support::{Behavior, FakeDns, TestServer, Zone, blackhole_udp, ip, name};
use ghostip::layers::dns::query::{QueryConfig, Transport, query};
use ghostip_core::{FailureReason, HeldTarget, Target};
use ghostip_session::layers::dns::names::QueryType;
use hickory_proto::op::ResponseCode;

const WEB: &str = "web.prod.svc.cluster.local.";

fn config(timeout_ms: u64) -> QueryConfig {
    QueryConfig {
        timeout: Duration::from_millis(timeout_ms),
        tcp_on_truncation: true,
    }
}

async fn pod(addr: &str) -> (TestServer<FakeDns>, FakeDns) {
    let fake = FakeDns::new(Zone::default());
    let server = TestServer::start(ip(addr), fake.clone()).await;
    (server, fake)
}

/// A target held for `ttl` seconds and not used yet.
fn held_for(target: Target, ttl: u32) -> HeldTarget {
    HeldTarget {
        target,
        ttl: Some(ttl),
        last_used: None,
    }
}

#[tokio::test]
async fn a_answer_carries_ips_ttls_and_rcode() {
    let (server, fake) = pod("127.0.10.1").await;
    fake.zone.set_addrs(WEB, &["10.244.1.7", "10.244.2.9"], 30);

    let answer = query(server.addr, &name(WEB), QueryType::A, &config(1000))
        .await
        .unwrap();

    assert_eq!(answer.rcode, ResponseCode::NoError);
    assert_eq!(answer.transport, Transport::Udp);
    assert!(answer.authoritative);
    assert!(!answer.truncated);
    let mut held = answer.held();
    held.sort_by_key(|h| h.target);
    assert_eq!(
        held,
        vec![
            held_for(Target::ip(ip("10.244.1.7")), 30),
            held_for(Target::ip(ip("10.244.2.9")), 30),
        ]
    );
    assert!(answer.latency < Duration::from_secs(1));
    assert_eq!(
        fake.udp_queries.load(Ordering::SeqCst),
        1,
        "one query, no retry"
    );
}

#[tokio::test]
async fn aaaa_answer_holds_ipv6_only() {
    let (server, fake) = pod("127.0.10.2").await;
    fake.zone.set_addrs(WEB, &["10.244.1.7", "fd00::7"], 5);

    let answer = query(server.addr, &name(WEB), QueryType::Aaaa, &config(1000))
        .await
        .unwrap();

    assert_eq!(answer.held(), vec![held_for(Target::ip(ip("fd00::7")), 5)]);
}

#[tokio::test]
async fn srv_answer_resolves_targets_from_additionals() {
    let (server, fake) = pod("127.0.10.3").await;
    let srv = "_grpc._tcp.web.prod.svc.cluster.local.";
    fake.zone.set_srv(
        srv,
        &[
            ("web-0.web.prod.svc.cluster.local.", 9090, "10.244.1.7"),
            ("web-1.web.prod.svc.cluster.local.", 9090, "10.244.2.9"),
        ],
        30,
    );

    let answer = query(server.addr, &name(srv), QueryType::Srv, &config(1000))
        .await
        .unwrap();

    assert_eq!(answer.srv.len(), 2);
    assert!(
        answer
            .srv
            .iter()
            .all(|s| s.port == 9090 && s.ttl == 30 && s.weight == 100)
    );
    assert_eq!(answer.additional_addrs.len(), 2);
    let mut held = answer.held();
    held.sort_by_key(|h| h.target);
    assert_eq!(
        held,
        vec![
            held_for(Target::socket(ip("10.244.1.7"), 9090), 30),
            held_for(Target::socket(ip("10.244.2.9"), 9090), 30),
        ]
    );
}

#[tokio::test]
async fn nxdomain_is_an_empty_answer_not_a_failure() {
    let (server, _fake) = pod("127.0.10.4").await;

    let answer = query(
        server.addr,
        &name("gone.prod.svc.cluster.local."),
        QueryType::A,
        &config(1000),
    )
    .await
    .unwrap();

    assert_eq!(answer.rcode, ResponseCode::NXDomain);
    assert!(answer.is_empty());
    assert!(answer.held().is_empty());
}

#[tokio::test]
async fn nodata_is_an_empty_answer_not_a_failure() {
    let (server, fake) = pod("127.0.10.5").await;
    fake.zone.set_addrs(WEB, &["10.244.1.7"], 30);

    let answer = query(server.addr, &name(WEB), QueryType::Aaaa, &config(1000))
        .await
        .unwrap();

    assert_eq!(answer.rcode, ResponseCode::NoError);
    assert!(answer.is_empty());
}

#[tokio::test]
async fn failure_rcodes_map_onto_failure_reasons() {
    let (server, fake) = pod("127.0.10.6").await;
    fake.zone.set_addrs(WEB, &["10.244.1.7"], 30);
    let cases = [
        (ResponseCode::ServFail, FailureReason::Servfail),
        (ResponseCode::Refused, FailureReason::Refused),
        (
            ResponseCode::NotImp,
            FailureReason::Rcode("NOTIMP".to_string()),
        ),
        (
            ResponseCode::FormErr,
            FailureReason::Rcode("FORMERR".to_string()),
        ),
    ];
    for (rcode, reason) in cases {
        fake.set_behavior(Behavior::Rcode(rcode));
        let err = query(server.addr, &name(WEB), QueryType::A, &config(1000))
            .await
            .unwrap_err();
        assert_eq!(err.reason, reason, "{rcode}");
        assert_eq!(err.rcode, Some(rcode));
        assert_eq!(err.transport, Transport::Udp);
    }
}

#[tokio::test]
async fn truncated_udp_answer_is_asked_again_over_tcp() {
    let (server, fake) = pod("127.0.10.7").await;
    let ips: Vec<String> = (0..200)
        .map(|i| format!("10.244.{}.{}", i / 100, i % 100 + 1))
        .collect();
    let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    fake.zone.set_addrs(WEB, &refs, 30);
    fake.set_behavior(Behavior::TruncateUdp);

    let answer = query(server.addr, &name(WEB), QueryType::A, &config(1000))
        .await
        .unwrap();

    assert_eq!(answer.transport, Transport::Tcp);
    assert!(!answer.truncated);
    assert_eq!(answer.held().len(), 200);
    assert_eq!(fake.udp_queries.load(Ordering::SeqCst), 1);
    assert_eq!(fake.tcp_queries.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn truncated_answer_is_kept_when_tcp_is_disabled() {
    let (server, fake) = pod("127.0.10.8").await;
    fake.zone.set_addrs(WEB, &["10.244.1.7"], 30);
    fake.set_behavior(Behavior::TruncateUdp);
    let cfg = QueryConfig {
        tcp_on_truncation: false,
        ..config(1000)
    };

    let answer = query(server.addr, &name(WEB), QueryType::A, &cfg)
        .await
        .unwrap();

    assert_eq!(answer.transport, Transport::Udp);
    assert!(answer.truncated);
    assert_eq!(fake.tcp_queries.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn silent_udp_server_is_a_timeout_after_one_datagram() {
    let hole = blackhole_udp(ip("127.0.10.9")).await;
    let addr = hole.local_addr().unwrap();

    let err = query(addr, &name(WEB), QueryType::A, &config(200))
        .await
        .unwrap_err();

    assert_eq!(err.reason, FailureReason::Timeout);
    assert_eq!(err.transport, Transport::Udp);
    assert!(
        err.latency >= Duration::from_millis(200),
        "{:?}",
        err.latency
    );
    assert!(
        err.latency < Duration::from_millis(1500),
        "{:?}",
        err.latency
    );
    let mut buf = [0u8; 512];
    let mut datagrams = 0;
    while hole.try_recv_from(&mut buf).is_ok() {
        datagrams += 1;
    }
    assert_eq!(datagrams, 1, "no retries");
}

#[tokio::test]
async fn silent_tcp_after_truncation_is_a_tcp_timeout() {
    let (server, fake) = pod("127.0.10.10").await;
    fake.zone.set_addrs(WEB, &["10.244.1.7"], 30);
    fake.set_behavior(Behavior::TruncateUdpSilentTcp);

    let err = query(server.addr, &name(WEB), QueryType::A, &config(200))
        .await
        .unwrap_err();

    assert_eq!(err.reason, FailureReason::Timeout);
    assert_eq!(err.transport, Transport::Tcp);
}

#[tokio::test]
async fn refused_tcp_connection_after_truncation_is_a_network_failure() {
    let fake = FakeDns::new(Zone::default());
    fake.set_behavior(Behavior::TruncateUdp);
    let server = TestServer::start_udp_only(ip("127.0.10.11"), fake).await;

    let err = query(server.addr, &name(WEB), QueryType::A, &config(500))
        .await
        .unwrap_err();

    assert_eq!(err.transport, Transport::Tcp);
    assert!(
        matches!(err.reason, FailureReason::Network(_)),
        "{:?}",
        err.reason
    );
    assert_eq!(err.reason.label(), "network");
}
