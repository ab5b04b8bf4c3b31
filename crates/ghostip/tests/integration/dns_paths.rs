//! DNS path discovery and probe names from a hand-built truth: CoreDNS pods, ClusterIP, NodeLocal, overrides, their diff as pods come and go, and the names of headless Services.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, ServicePort, ServiceRecord, SliceRecord,
    TrafficPolicy, Truth,
};
use ghostip_core::{PathKind, PodRef, Protocol, ServiceKey, Time};
use ghostip_session::layers::dns::names::{
    NameConfig, ProbeName, QueryType, service_names, sweep_names,
};
use ghostip_session::layers::dns::paths::{DnsPath, PathConfig, diff, diff_with_truth, discover};
use ghostip_session::layers::dns::{DNS_CLUSTER_IP, DNS_NODE_LOCAL, DNS_OVERRIDE, DNS_POD};
use hickory_proto::rr::Name;

fn t0() -> Time {
    "2026-11-30T05:00:00Z".parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn service(
    ns: &str,
    name: &str,
    cluster_ips: &[&str],
    ports: &[(Option<&str>, u16, Protocol)],
) -> ServiceRecord {
    ServiceRecord {
        key: ServiceKey::new(ns, name),
        cluster_ips: cluster_ips.iter().map(|s| ip(s)).collect(),
        headless: cluster_ips.is_empty(),
        service_type: "ClusterIP".to_string(),
        publish_not_ready: false,
        internal_traffic_policy: TrafficPolicy::Cluster,
        external_traffic_policy: TrafficPolicy::Cluster,
        ports: ports
            .iter()
            .map(|(n, p, proto)| ServicePort {
                name: n.map(str::to_string),
                port: *p,
                protocol: *proto,
                node_port: None,
            })
            .collect(),
        has_selector: true,
        labels: BTreeMap::new(),
    }
}

/// (ip, pod name, ready, serving)
type Ep<'a> = (&'a str, &'a str, bool, bool);

fn slice(
    ns: &str,
    svc: &str,
    name: &str,
    family: AddressType,
    eps: &[Ep<'_>],
    ports: &[(Option<&str>, u16, Protocol)],
) -> SliceRecord {
    SliceRecord {
        namespace: ns.to_string(),
        name: name.to_string(),
        service: svc.to_string(),
        address_type: family,
        endpoints: eps
            .iter()
            .map(|(addr, pod, ready, serving)| EndpointRecord {
                ip: ip(addr),
                ready: *ready,
                serving: *serving,
                terminating: !*ready && *serving,
                pod: Some(PodRef {
                    namespace: ns.to_string(),
                    name: pod.to_string(),
                    uid: format!("uid-{pod}"),
                }),
                node: Some("node-1".to_string()),
                hostname: None,
            })
            .collect(),
        ports: ports
            .iter()
            .map(|(n, p, proto)| EndpointPort {
                name: n.map(str::to_string),
                port: *p,
                protocol: *proto,
            })
            .collect(),
        trigger_time: None,
    }
}

const KUBE_DNS_PORTS: &[(Option<&str>, u16, Protocol)] = &[
    (Some("dns"), 53, Protocol::Udp),
    (Some("dns-tcp"), 53, Protocol::Tcp),
    (Some("metrics"), 9153, Protocol::Tcp),
];

fn cluster(coredns: &[Ep<'_>]) -> Truth {
    let mut truth = Truth::new();
    truth.apply_service(
        service("kube-system", "kube-dns", &["10.96.0.10"], KUBE_DNS_PORTS),
        t0(),
    );
    truth.apply_slice(
        slice(
            "kube-system",
            "kube-dns",
            "kube-dns-abc",
            AddressType::IPv4,
            coredns,
            KUBE_DNS_PORTS,
        ),
        t0(),
    );
    truth
}

fn ids(paths: &[DnsPath]) -> Vec<&str> {
    paths.iter().map(DnsPath::id).collect()
}

#[test]
fn discovers_every_kind_of_dns_path() {
    let truth = cluster(&[
        ("10.244.1.5", "coredns-a", true, true),
        ("10.244.2.6", "coredns-b", false, true), // terminating, still serving
        ("10.244.3.7", "coredns-c", false, false), // starting, not serving yet
    ]);
    let config = PathConfig {
        node_local: Some(ghostip_session::layers::dns::paths::DEFAULT_NODE_LOCAL),
        overrides: vec![sock("192.0.2.1:5353")],
        ..PathConfig::default()
    };

    let paths = discover(&truth, &config);

    assert_eq!(
        ids(&paths),
        [
            "dns-pod/10.244.1.5:53",
            "dns-pod/10.244.2.6:53",
            "dns-cluster-ip/10.96.0.10:53",
            "dns-node-local/169.254.20.10:53",
            "dns-override/192.0.2.1:5353",
        ]
    );
    let kinds: Vec<PathKind> = paths.iter().map(|p| p.info.kind).collect();
    assert_eq!(
        kinds,
        [
            DNS_POD,
            DNS_POD,
            DNS_CLUSTER_IP,
            DNS_NODE_LOCAL,
            DNS_OVERRIDE
        ]
    );
    assert_eq!(
        paths[0].info.description,
        "dns via 10.244.1.5 (kube-system/coredns-a)"
    );
    assert_eq!(
        paths[2].info.description,
        "dns via ClusterIP 10.96.0.10 (kube-system/kube-dns)"
    );
    assert_eq!(
        paths[3].info.description,
        "dns via NodeLocal DNSCache 169.254.20.10"
    );
    assert_eq!(
        paths[4].info.description,
        "dns via 192.0.2.1:5353 (--dns-server)"
    );
    assert_eq!(paths[0].server, sock("10.244.1.5:53"));
    assert!(paths.iter().all(|p| p.info.node.is_none()));
}

#[test]
fn node_local_is_off_unless_enabled_and_kinds_can_be_turned_off() {
    let truth = cluster(&[("10.244.1.5", "coredns-a", true, true)]);
    assert_eq!(
        ids(&discover(&truth, &PathConfig::default())),
        ["dns-pod/10.244.1.5:53", "dns-cluster-ip/10.96.0.10:53"]
    );
    let only_overrides = PathConfig {
        pods: false,
        cluster_ip: false,
        overrides: vec![sock("10.0.0.53:53")],
        ..PathConfig::default()
    };
    assert_eq!(
        ids(&discover(&truth, &only_overrides)),
        ["dns-override/10.0.0.53:53"]
    );
    assert!(discover(&Truth::new(), &PathConfig::default()).is_empty());
}

#[test]
fn dns_port_comes_from_the_slice_and_the_service() {
    let ports: &[(Option<&str>, u16, Protocol)] = &[
        (Some("dns"), 1053, Protocol::Udp),
        (Some("dns-tcp"), 1053, Protocol::Tcp),
    ];
    let mut truth = Truth::new();
    truth.apply_service(
        service(
            "kube-system",
            "kube-dns",
            &["10.96.0.10", "fd00::a"],
            &[(Some("dns"), 5353, Protocol::Udp)],
        ),
        t0(),
    );
    truth.apply_slice(
        slice(
            "kube-system",
            "kube-dns",
            "kube-dns-v4",
            AddressType::IPv4,
            &[("10.244.1.5", "coredns-a", true, true)],
            ports,
        ),
        t0(),
    );
    truth.apply_slice(
        slice(
            "kube-system",
            "kube-dns",
            "kube-dns-v6",
            AddressType::IPv6,
            &[("fd00:244::5", "coredns-a", true, true)],
            &[],
        ),
        t0(),
    );

    let paths = discover(&truth, &PathConfig::default());

    assert_eq!(
        ids(&paths),
        [
            "dns-pod/10.244.1.5:1053",
            "dns-pod/[fd00:244::5]:53",
            "dns-cluster-ip/10.96.0.10:5353",
            "dns-cluster-ip/[fd00::a]:5353",
        ]
    );
}

#[test]
fn a_vantage_node_is_part_of_every_id() {
    let truth = cluster(&[("10.244.1.5", "coredns-a", true, true)]);
    let config = PathConfig {
        node: Some("node-2".to_string()),
        ..PathConfig::default()
    };
    let paths = discover(&truth, &config);
    assert_eq!(
        ids(&paths),
        [
            "dns-pod/10.244.1.5:53@node-2",
            "dns-cluster-ip/10.96.0.10:53@node-2"
        ]
    );
    assert!(
        paths
            .iter()
            .all(|p| p.info.node.as_deref() == Some("node-2"))
    );
    assert!(paths[1].info.description.ends_with(" from node-2"));
}

#[test]
fn diff_follows_coredns_pods_coming_and_going() {
    let config = PathConfig::default();
    let before = discover(
        &cluster(&[
            ("10.244.1.5", "coredns-a", true, true),
            ("10.244.2.6", "coredns-b", true, true),
        ]),
        &config,
    );

    // coredns-a replaced by coredns-c on a new IP; coredns-b's IP reused by a new pod.
    let after = cluster(&[
        ("10.244.2.6", "coredns-d", true, true),
        ("10.244.3.7", "coredns-c", true, true),
    ]);
    let d = diff_with_truth(&before, &after, &config);

    assert_eq!(ids(&d.added), ["dns-pod/10.244.3.7:53"]);
    assert_eq!(ids(&d.removed), ["dns-pod/10.244.1.5:53"]);
    assert_eq!(ids(&d.changed), ["dns-pod/10.244.2.6:53"]);
    assert_eq!(
        d.changed[0].info.description,
        "dns via 10.244.2.6 (kube-system/coredns-d)"
    );

    let now = discover(&after, &config);
    assert!(diff(&now, &now).is_empty());
    let gone = diff(&now, &[]);
    assert_eq!(gone.removed.len(), 3);
    assert!(gone.added.is_empty());
}

fn names_of(names: &[ProbeName]) -> Vec<String> {
    names.iter().map(ToString::to_string).collect()
}

#[test]
fn headless_service_names() {
    let web_ports: &[(Option<&str>, u16, Protocol)] = &[
        (Some("grpc"), 9090, Protocol::Tcp),
        (None, 8080, Protocol::Tcp),
        (Some("gossip"), 7946, Protocol::Udp),
    ];
    let mut truth = Truth::new();
    truth.apply_service(service("prod", "web", &[], web_ports), t0());
    truth.apply_slice(
        slice(
            "prod",
            "web",
            "web-v4",
            AddressType::IPv4,
            &[("10.244.1.7", "web-0", true, true)],
            &[],
        ),
        t0(),
    );
    let web = ServiceKey::new("prod", "web");

    let plain = service_names(&truth, &web, &NameConfig::default()).unwrap();
    assert_eq!(names_of(&plain), ["A web.prod.svc.cluster.local."]);

    let with_srv = NameConfig {
        zone: "corp.example.".to_string(),
        srv: true,
    };
    assert_eq!(
        names_of(&service_names(&truth, &web, &with_srv).unwrap()),
        [
            "A web.prod.svc.corp.example.",
            "SRV _grpc._tcp.web.prod.svc.corp.example.",
            "SRV _gossip._udp.web.prod.svc.corp.example."
        ]
    );

    truth.apply_slice(
        slice(
            "prod",
            "web",
            "web-v6",
            AddressType::IPv6,
            &[("fd00::7", "web-0", true, true)],
            &[],
        ),
        t0(),
    );
    assert_eq!(
        names_of(&service_names(&truth, &web, &NameConfig::default()).unwrap()),
        [
            "A web.prod.svc.cluster.local.",
            "AAAA web.prod.svc.cluster.local."
        ]
    );
    let v6 = service_names(&truth, &web, &NameConfig::default()).unwrap();
    assert_eq!(v6[1].qtype, QueryType::Aaaa);
    assert_eq!(
        v6[1].name,
        Name::from_ascii("web.prod.svc.cluster.local.").unwrap()
    );
}

#[test]
fn ipv6_only_unknown_and_clusterip_services() {
    let mut truth = Truth::new();
    truth.apply_service(service("prod", "v6", &[], &[]), t0());
    truth.apply_slice(
        slice(
            "prod",
            "v6",
            "v6-x",
            AddressType::IPv6,
            &[("fd00::8", "v6-0", true, true)],
            &[],
        ),
        t0(),
    );
    truth.apply_service(service("prod", "api", &["10.96.5.5"], &[]), t0());
    let config = NameConfig::default();

    let v6 = service_names(&truth, &ServiceKey::new("prod", "v6"), &config).unwrap();
    assert_eq!(names_of(&v6), ["AAAA v6.prod.svc.cluster.local."]);
    assert!(
        service_names(&truth, &ServiceKey::new("prod", "api"), &config)
            .unwrap()
            .is_empty()
    );
    let deleted = service_names(&truth, &ServiceKey::new("prod", "gone"), &config).unwrap();
    assert_eq!(
        names_of(&deleted),
        ["A gone.prod.svc.cluster.local."],
        "a deleted Service is still worth asking about"
    );

    let sweep = sweep_names(&truth, &config);
    assert_eq!(sweep.len(), 1, "only headless Services are swept");
    assert_eq!(sweep[0].service, ServiceKey::new("prod", "v6"));
}
