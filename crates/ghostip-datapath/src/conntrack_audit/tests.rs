//! Tests of the conntrack audit over real `conntrack -L` captures (tests/data).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::conntrack;
use ghostip_core::Protocol;
use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, ServicePort, ServiceRecord, SliceRecord,
    TrafficPolicy,
};
use std::net::Ipv4Addr;

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pod(ns: &str, name: &str) -> PodRef {
    PodRef {
        namespace: ns.into(),
        name: name.into(),
        uid: String::new(),
    }
}

fn data(name: &str) -> ConntrackTable {
    let text = std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR")))
        .unwrap();
    conntrack::parse_str(&text).unwrap()
}

/// A Service with one cluster IP and its endpoints (name, pod, ip) in one slice.
fn service(
    truth: &mut Truth,
    key: &ServiceKey,
    cluster_ip: &str,
    ports: &[(&str, u16, u16, Protocol)],
    eps: &[(&str, &str)],
) {
    truth.apply_service(
        ServiceRecord {
            key: key.clone(),
            cluster_ips: vec![ip(cluster_ip)],
            headless: false,
            service_type: "ClusterIP".into(),
            publish_not_ready: false,
            internal_traffic_policy: TrafficPolicy::Cluster,
            external_traffic_policy: TrafficPolicy::Cluster,
            ports: ports
                .iter()
                .map(|(n, p, _, proto)| ServicePort {
                    name: Some((*n).into()),
                    port: *p,
                    protocol: *proto,
                    node_port: None,
                })
                .collect(),
            has_selector: true,
            labels: Default::default(),
        },
        t(0),
    );
    truth.apply_slice(
        SliceRecord {
            namespace: key.namespace.clone(),
            name: format!("{}-1", key.name),
            service: key.name.clone(),
            address_type: AddressType::IPv4,
            endpoints: eps
                .iter()
                .map(|(name, a)| EndpointRecord {
                    ip: ip(a),
                    ready: true,
                    serving: true,
                    terminating: false,
                    pod: Some(pod(&key.namespace, name)),
                    node: None,
                    hostname: None,
                })
                .collect(),
            ports: ports
                .iter()
                .map(|(n, _, tp, proto)| EndpointPort {
                    name: Some((*n).into()),
                    port: *tp,
                    protocol: *proto,
                })
                .collect(),
            trigger_time: None,
        },
        t(0),
    );
}

fn dns_key() -> ServiceKey {
    ServiceKey::new("kube-system", "kube-dns")
}

/// The cluster of `capture-conntrack-pods.sh` after two removals: the CoreDNS pod
/// 10.244.3.53 was replaced by 10.244.3.54, the web pod 10.244.3.71 by 10.244.3.73;
/// 10.244.3.72 (an `api` pod) is alive, the client is `prod/order-7c9`.
fn pods_cluster() -> (Truth, OwnershipFacts) {
    let mut truth = Truth::new();
    service(
        &mut truth,
        &dns_key(),
        "10.96.0.10",
        &[
            ("dns", 53, 53, Protocol::Udp),
            ("dns-tcp", 53, 53, Protocol::Tcp),
        ],
        &[("coredns-new", "10.244.3.54")],
    );
    service(
        &mut truth,
        &ServiceKey::new("prod", "stock"),
        "10.96.5.5",
        &[("http", 80, 8080, Protocol::Tcp)],
        &[("stock-5d8-y", "10.244.3.73")],
    );
    service(
        &mut truth,
        &ServiceKey::new("prod", "api"),
        "10.96.5.6",
        &[("grpc", 9000, 9000, Protocol::Tcp)],
        &[("api-1", "10.244.3.72")],
    );
    let mut facts = OwnershipFacts::new();
    facts.insert(
        ip("10.244.1.10"),
        IpFacts {
            owner: Some(pod("prod", "order-7c9")),
            former: None,
        },
    );
    facts.insert(
        ip("10.244.3.53"),
        IpFacts {
            owner: None,
            former: Some(FormerOwner {
                pod: pod("kube-system", "coredns-old"),
                removed: Some(t(100)),
                services: vec![dns_key()],
            }),
        },
    );
    facts.insert(
        ip("10.244.3.71"),
        IpFacts {
            owner: None,
            former: Some(FormerOwner {
                pod: pod("prod", "stock-5d8-x"),
                removed: Some(t(153)),
                services: vec![ServiceKey::new("prod", "stock")],
            }),
        },
    );
    (truth, facts)
}

#[test]
fn real_pod_flows_are_attributed_to_client_and_former_owner() {
    let table = data("conntrack-L_netns-pods_conntrack-1.4.7.txt");
    let (truth, facts) = pods_cluster();
    let cfg = AuditConfig {
        now: Some(t(200)),
        ..AuditConfig::default()
    };
    let a = ConntrackAudit::new(&truth, &facts, cfg.clone());
    // Sources and destinations that are not current endpoints must be looked up.
    assert_eq!(
        a.lookups(&table),
        BTreeSet::from([ip("10.244.1.10"), ip("10.244.3.53"), ip("10.244.3.71")])
    );
    let r = audit(&table, &truth, &facts, cfg);
    assert_eq!(r.entries, 6);
    assert_eq!(r.live, 5, "the CLOSE_WAIT flow is closing");
    let lines: Vec<String> = r.stale.iter().map(ToString::to_string).collect();
    insta::assert_snapshot!(lines.join("\n"));
    let kinds: Vec<(StaleFlowKind, Option<Target>, Target)> =
        r.stale.iter().map(|f| (f.kind, f.via, f.target)).collect();
    let sock = |a: &str, p| Target::socket(ip(a), p);
    assert_eq!(
        kinds,
        vec![
            (StaleFlowKind::DnsBackend, None, sock("10.244.3.53", 53)),
            (
                StaleFlowKind::DnsBackend,
                Some(sock("10.96.0.10", 53)),
                sock("10.244.3.53", 53)
            ),
            (
                StaleFlowKind::RemovedBackend,
                Some(sock("10.96.5.5", 80)),
                sock("10.244.3.71", 8080)
            ),
            (StaleFlowKind::RemovedPeer, None, sock("10.244.3.71", 7000)),
        ]
    );
    let web = &r.stale[2];
    assert_eq!(web.service, Some(ServiceKey::new("prod", "stock")));
    assert_eq!(web.client_pod, Some(pod("prod", "order-7c9")));
    assert_eq!(web.former_owner, Some(pod("prod", "stock-5d8-x")));
    assert_eq!(web.removed_ago, Some(Duration::from_secs(47)));
    assert_eq!(r.stale[3].unreplied, 1);
}

#[test]
fn nothing_is_stale_while_the_pods_are_endpoints() {
    let table = data("conntrack-L_netns-pods_conntrack-1.4.7.txt");
    let mut truth = Truth::new();
    service(
        &mut truth,
        &dns_key(),
        "10.96.0.10",
        &[("dns", 53, 53, Protocol::Udp)],
        &[("coredns-a", "10.244.3.53")],
    );
    service(
        &mut truth,
        &ServiceKey::new("prod", "stock"),
        "10.96.5.5",
        &[("http", 80, 8080, Protocol::Tcp)],
        &[("stock-5d8-x", "10.244.3.71")],
    );
    // Even with a stale ledger entry, a current endpoint is not a removed peer.
    let (_, facts) = pods_cluster();
    let r = audit(&table, &truth, &facts, AuditConfig::default());
    assert!(r.is_clean(), "{r:#?}");
}

/// A flow sent straight to an IP a new pod has now may be the new owner's; one through a
/// Service's ClusterIP to that IP is the Service's flow, and the IP is not its endpoint.
#[test]
fn an_ip_reused_by_a_new_pod_is_stale_only_through_the_service() {
    let table = data("conntrack-L_netns-pods_conntrack-1.4.7.txt");
    let (truth, mut facts) = pods_cluster();
    facts.insert(
        ip("10.244.3.71"),
        IpFacts {
            owner: Some(pod("other", "reuser")),
            former: Some(FormerOwner {
                pod: pod("prod", "stock-5d8-x"),
                removed: Some(t(153)),
                services: vec![],
            }),
        },
    );
    let r = audit(&table, &truth, &facts, AuditConfig::default());
    let to_71: Vec<(StaleFlowKind, Option<Target>)> = r
        .stale
        .iter()
        .filter(|f| f.target.ip == ip("10.244.3.71"))
        .map(|f| (f.kind, f.via))
        .collect();
    assert_eq!(
        to_71,
        [(
            StaleFlowKind::RemovedBackend,
            Some(Target::socket(ip("10.96.5.5"), 80))
        )],
        "{r:#?}"
    );
}

/// Without the ledger, the truth alone shows the flows through a ClusterIP to an IP that is
/// no longer among the Service's endpoints; who had the IP stays unknown, and a flow sent
/// straight to an IP (an address outside the cluster, for all the audit knows) is not
/// claimed.
#[test]
fn flows_through_a_cluster_ip_to_a_removed_backend_need_no_ledger() {
    let table = data("conntrack-L_netns-pods_conntrack-1.4.7.txt");
    let (truth, _) = pods_cluster();
    let r = audit(
        &table,
        &truth,
        &OwnershipFacts::new(),
        AuditConfig::default(),
    );
    let kinds: Vec<(StaleFlowKind, Option<Target>, Target)> =
        r.stale.iter().map(|f| (f.kind, f.via, f.target)).collect();
    let sock = |a: &str, p| Target::socket(ip(a), p);
    assert_eq!(
        kinds,
        [
            (
                StaleFlowKind::DnsBackend,
                Some(sock("10.96.0.10", 53)),
                sock("10.244.3.53", 53)
            ),
            (
                StaleFlowKind::RemovedBackend,
                Some(sock("10.96.5.5", 80)),
                sock("10.244.3.71", 8080)
            ),
        ],
        "{r:#?}"
    );
    let web = &r.stale[1];
    assert_eq!((&web.former_owner, web.client_pod.as_ref()), (&None, None));
    assert_eq!(
        web.to_string(),
        "client 10.244.1.10 still sends tcp to 10.244.3.71:8080 via 10.96.5.5:80 (no longer an endpoint of prod/stock): 1 entry"
    );
}

#[test]
fn stale_dns_conntrack_through_the_cluster_ip_in_the_dnat_capture() {
    // capture-conntrack.sh: 10.96.0.10:53 DNATed to 10.244.1.5:5353 (UDP) and
    // 10.244.1.6:5354 (TCP). The UDP backend was removed; the TCP one is current.
    let table = data("conntrack-L_netns-dnat_conntrack-1.4.7.txt");
    let mut truth = Truth::new();
    service(
        &mut truth,
        &dns_key(),
        "10.96.0.10",
        &[
            ("dns", 53, 5353, Protocol::Udp),
            ("dns-tcp", 53, 5354, Protocol::Tcp),
        ],
        &[("coredns-b", "10.244.1.6")],
    );
    let r = audit(
        &table,
        &truth,
        &OwnershipFacts::new(),
        AuditConfig::default(),
    );
    assert_eq!(r.stale.len(), 1, "{r:#?}");
    let f = &r.stale[0];
    assert_eq!(f.kind, StaleFlowKind::DnsBackend);
    assert_eq!(f.proto, "udp");
    assert_eq!(f.target, Target::socket(ip("10.244.1.5"), 5353));
    assert_eq!((f.entries, f.unreplied), (2, 1));
    assert_eq!(f.max_timeout, Some(29));
}

#[test]
fn destroy_events_and_closing_states_are_not_live() {
    let mut truth = Truth::new();
    service(
        &mut truth,
        &dns_key(),
        "10.96.0.10",
        &[("dns", 53, 53, Protocol::Udp)],
        &[],
    );
    let text = "[DESTROY] udp      17 src=10.244.1.10 dst=10.96.0.10 sport=1 dport=53 src=10.244.9.9 dst=10.244.1.10 sport=53 dport=1\n\
tcp      6 100 TIME_WAIT src=10.244.1.10 dst=10.96.0.10 sport=2 dport=53 src=10.244.9.9 dst=10.244.1.10 sport=53 dport=2 [ASSURED] mark=0 use=1\n\
udp      17 20 src=10.244.1.10 dst=10.96.0.10 sport=3 dport=53 [UNREPLIED] src=10.244.9.9 dst=10.244.1.10 sport=53 dport=3 mark=0 use=1\n";
    let table = conntrack::parse_str(text).unwrap();
    let r = audit(
        &table,
        &truth,
        &OwnershipFacts::new(),
        AuditConfig::default(),
    );
    assert_eq!((r.entries, r.live, r.stale.len()), (3, 1, 1));
    let _ = Ipv4Addr::LOCALHOST;
}
