//! The conntrack model in a session, with exact times: truth events in, complete reads of
//! real `conntrack -L` lines in, engine events and stale flows out.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::engine::{EngineEvent, Tracking, Unjudged, Verdict};
use ghostip_core::truth::{
    EndpointPort, EndpointRecord, PodRecord, ServicePort, ServiceRecord, SliceRecord,
};
use ghostip_core::{PodRef, Protocol, ServiceKey, Target, Time};

use super::flows::{CollectedFlows, FlowCollector};
use super::*;
use crate::session::{Actions, Session, SessionConfig};
use crate::sync::SyncState;
use crate::truth_event::{Received, ResourceKind, TruthEvent, TruthKey, TruthObject};

const NODE: &str = "node-1";
const LAG: Duration = Duration::from_secs(2);

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sock(s: &str) -> Target {
    let a: std::net::SocketAddr = s.parse().unwrap();
    Target::socket(a.ip(), a.port())
}

fn pod(ns: &str, name: &str) -> PodRef {
    PodRef {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn service(
    ns: &str,
    name: &str,
    cluster_ip: Option<&str>,
    ports: &[(u16, Protocol)],
) -> ServiceRecord {
    ServiceRecord {
        key: ServiceKey::new(ns, name),
        cluster_ips: cluster_ip.map(ip).into_iter().collect(),
        headless: cluster_ip.is_none(),
        service_type: "ClusterIP".into(),
        publish_not_ready: false,
        internal_traffic_policy: Default::default(),
        external_traffic_policy: Default::default(),
        ports: ports
            .iter()
            .map(|(port, protocol)| ServicePort {
                name: None,
                port: *port,
                protocol: *protocol,
                node_port: None,
            })
            .collect(),
        has_selector: true,
        labels: BTreeMap::new(),
    }
}

/// One slice of `ns/svc` with `(ip, pod name, ready)` endpoints on `ports`.
fn slice(
    ns: &str,
    svc: &str,
    endpoints: &[(&str, &str, bool)],
    ports: &[(u16, Protocol)],
) -> SliceRecord {
    SliceRecord {
        namespace: ns.into(),
        name: format!("{svc}-abc"),
        service: svc.into(),
        address_type: ghostip_core::truth::AddressType::IPv4,
        endpoints: endpoints
            .iter()
            .map(|(a, name, ready)| EndpointRecord {
                ip: ip(a),
                ready: *ready,
                serving: true,
                terminating: !*ready,
                pod: Some(pod(ns, name)),
                node: Some("node-3".into()),
                hostname: None,
            })
            .collect(),
        ports: ports
            .iter()
            .map(|(port, protocol)| EndpointPort {
                name: None,
                port: *port,
                protocol: *protocol,
            })
            .collect(),
        trigger_time: None,
    }
}

fn pod_record(p: PodRef, ips: &[&str], host_network: bool) -> PodRecord {
    PodRecord {
        node: Some(NODE.into()),
        host_network,
        ..ghostip_testkit::records::pod_record(p, ips.iter().map(|a| ip(a)).collect())
    }
}

const WEB: &[(u16, Protocol)] = &[(8080, Protocol::Tcp)];
const DNS: &[(u16, Protocol)] = &[(53, Protocol::Udp), (53, Protocol::Tcp)];

fn web_slice(endpoints: &[(&str, &str, bool)]) -> TruthEvent {
    TruthEvent::Apply(TruthObject::Slice(slice("prod", "web", endpoints, WEB)))
}

fn feed(s: &mut Session, event: TruthEvent, at: Time) -> Actions {
    s.on_truth(&Received { at, event })
}

/// A synced session with the conntrack model attached: `prod/web` (ClusterIP 10.96.5.5:80
/// → 10.244.3.71, .72 on 8080), `kube-system/kube-dns` (10.96.0.10:53 → 10.244.3.53,
/// 10.244.2.54), headless `prod/backend` (10.244.2.20:8080), and this node's pods
/// `prod/order-7c9` (10.244.1.10) and the host-network `kube-system/kube-proxy-x`.
fn session() -> (Session, PathIdx) {
    let kinds = [
        ResourceKind::EndpointSlices,
        ResourceKind::Services,
        ResourceKind::Pods,
    ];
    let mut s = Session::new(SessionConfig::default(), SyncState::new(t(0), kinds));
    s.register(ConntrackModel::new(NODE));
    let at = t(0);
    feed(&mut s, TruthEvent::Init(ResourceKind::Services), at);
    for svc in [
        service("prod", "web", Some("10.96.5.5"), &[(80, Protocol::Tcp)]),
        service("kube-system", "kube-dns", Some("10.96.0.10"), DNS),
        service("prod", "backend", None, WEB),
    ] {
        feed(&mut s, TruthEvent::InitApply(TruthObject::Service(svc)), at);
    }
    feed(&mut s, TruthEvent::InitDone(ResourceKind::Services), at);
    feed(&mut s, TruthEvent::Init(ResourceKind::EndpointSlices), at);
    for sl in [
        slice(
            "prod",
            "web",
            &[
                ("10.244.3.71", "web-0", true),
                ("10.244.3.72", "web-1", true),
            ],
            WEB,
        ),
        slice(
            "kube-system",
            "kube-dns",
            &[
                ("10.244.3.53", "coredns-a", true),
                ("10.244.2.54", "coredns-b", true),
            ],
            DNS,
        ),
        slice(
            "prod",
            "backend",
            &[("10.244.2.20", "backend-0", true)],
            WEB,
        ),
    ] {
        feed(&mut s, TruthEvent::InitApply(TruthObject::Slice(sl)), at);
    }
    feed(
        &mut s,
        TruthEvent::InitDone(ResourceKind::EndpointSlices),
        at,
    );
    feed(&mut s, TruthEvent::Init(ResourceKind::Pods), at);
    for (p, ips, host) in [
        (pod("prod", "order-7c9"), vec!["10.244.1.10"], false),
        (
            pod("kube-system", "kube-proxy-x"),
            vec!["10.200.0.11"],
            true,
        ),
    ] {
        let record = pod_record(p, &ips, host);
        feed(&mut s, TruthEvent::InitApply(TruthObject::Pod(record)), at);
    }
    feed(&mut s, TruthEvent::InitDone(ResourceKind::Pods), at);
    assert!(s.synced());
    let (path, _) = s
        .with_layer_cx::<ConntrackModel, _>(|m, cx| m.attach(cx, LAG, at))
        .unwrap();
    (s, path)
}

const WEB_FLOW: &str = "tcp 6 431999 ESTABLISHED src=10.244.1.10 dst=10.96.5.5 sport=51000 dport=80 src=10.244.3.71 dst=10.244.1.10 sport=8080 dport=51000 [ASSURED] mark=0 use=1";
const WEB_FLOW_2: &str = "tcp 6 431990 ESTABLISHED src=10.244.1.10 dst=10.96.5.5 sport=51004 dport=80 src=10.244.3.71 dst=10.244.1.10 sport=8080 dport=51004 [ASSURED] mark=0 use=1";
const WEB_FLOW_LIVE: &str = "tcp 6 431999 ESTABLISHED src=10.244.1.10 dst=10.96.5.5 sport=51001 dport=80 src=10.244.3.72 dst=10.244.1.10 sport=8080 dport=51001 [ASSURED] mark=0 use=1";
const DNS_FLOW: &str = "udp 17 29 src=10.244.1.10 dst=10.96.0.10 sport=40001 dport=53 [UNREPLIED] src=10.244.3.53 dst=10.244.1.10 sport=53 dport=40001 mark=0 use=1";
const BACKEND_FLOW: &str = "tcp 6 431999 ESTABLISHED src=10.244.1.10 dst=10.244.2.20 sport=52000 dport=8080 src=10.244.2.20 dst=10.244.1.10 sport=8080 dport=52000 [ASSURED] mark=0 use=1";
/// The node itself (the agent's connect probe) and the host-network pod's address.
const NODE_FLOW: &str = "tcp 6 119 SYN_SENT src=10.200.0.11 dst=10.244.3.71 sport=53000 dport=8080 [UNREPLIED] src=10.244.3.71 dst=10.200.0.11 sport=8080 dport=53000 mark=0 use=1";

/// The flows the adapter would collect from a dump made of `lines`.
fn collected(s: &Session, lines: &[&str]) -> CollectedFlows {
    let clients = s.layer::<ConntrackModel>().unwrap().client_ips();
    let mut c = FlowCollector::new(clients);
    let text = lines.join("\n");
    if !text.is_empty() {
        let table = ghostip_datapath::conntrack::parse_str(&text).unwrap();
        for e in &table.entries {
            c.push(e);
        }
    }
    c.finish()
}

fn read(s: &mut Session, lines: &[&str], at: Time) -> (ReadOutcome, Actions) {
    let flows = collected(s, lines);
    s.with_layer_cx::<ConntrackModel, _>(|m, cx| m.on_read(cx, &flows, at))
        .unwrap()
}

fn stale_flows(s: &Session) -> Vec<StaleFlow> {
    s.layer::<ConntrackModel>()
        .unwrap()
        .stale_flows()
        .cloned()
        .collect()
}

fn opened(events: &[EngineEvent]) -> Vec<&Tracking> {
    events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::Opened(t) => Some(t),
            _ => None,
        })
        .collect()
}

fn closed(events: &[EngineEvent]) -> Vec<&Tracking> {
    events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::Closed(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// The pooled-connection case: a client pod's connection through the web ClusterIP stays
/// pinned to web-0 after web-0 left the Service. The flow is a finding only from the
/// second read that saw it, with the client pod, the dead IP, its former owner, when it
/// left and how long the flow outlived it; the window runs from the departure to the first
/// read without the flow, judged against the expected lag.
#[test]
fn a_pooled_connection_to_a_removed_pod_is_stale_until_it_closes() {
    let (mut s, path) = session();
    let web = ServiceKey::new("prod", "web");
    // Before the change: flows to live backends are nothing to say.
    let (out, actions) = read(
        &mut s,
        &[WEB_FLOW, WEB_FLOW_LIVE, DNS_FLOW, NODE_FLOW],
        t(1),
    );
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    assert_eq!((out.flows, out.attributed), (3, 3));
    assert_eq!(out.services, 2);
    assert!(out.recorded.is_empty());
    assert!(stale_flows(&s).is_empty());

    // web-0 leaves the Service at 10 s; web-2 joins.
    let actions = feed(
        &mut s,
        web_slice(&[
            ("10.244.3.72", "web-1", true),
            ("10.244.3.73", "web-2", true),
        ]),
        t(10),
    );
    let dead = sock("10.244.3.71:8080");
    let o = opened(&actions.events);
    assert_eq!(o.len(), 1, "{:?}", actions.events);
    assert_eq!((o[0].path, o[0].target), (path, dead));
    assert_eq!(
        o[0].kind,
        Discrepancy::Stale,
        "a conntrack path is never missing"
    );
    assert!(s.layer_mut::<ConntrackModel>().unwrap().take_removed());

    // 11 s: the connection is still there, seen once: not held yet, web not observed.
    let (out, actions) = read(&mut s, &[WEB_FLOW, WEB_FLOW_LIVE, NODE_FLOW], t(11));
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    assert_eq!(out.withheld, 1);
    let m = s.layer::<ConntrackModel>().unwrap();
    assert!(m.pending());
    assert_eq!(m.stale_counts(), (0, 0));
    assert!(!stale_flows(&s)[0].confirmed);

    // 15 s: seen again (another source port joined the pool): a confirmed stale flow.
    let (out, actions) = read(&mut s, &[WEB_FLOW, WEB_FLOW_2, WEB_FLOW_LIVE], t(15));
    assert!(
        opened(&actions.events).is_empty(),
        "already open since 10 s"
    );
    assert_eq!(out.recorded.len(), 1);
    assert_eq!(out.recorded[0].service, web);
    let flows = stale_flows(&s);
    assert_eq!(
        flows,
        vec![StaleFlow {
            service: web.clone(),
            proto: Protocol::Tcp,
            client_ip: ip("10.244.1.10"),
            client_pod: Some(pod("prod", "order-7c9")),
            via: Some(sock("10.96.5.5:80")),
            target: dead,
            former_owner: Some("prod/web-0".into()),
            left_at: Some(t(10)),
            first_seen: t(11),
            last_seen: t(15),
            // The newer of its two connections carried a packet in the second before the
            // read: its middle.
            last_packet: Some(t(14) + Duration::from_millis(500)),
            outlived_by: Some(Duration::from_secs(5)),
            entries: 2,
            unreplied: 0,
            max_timeout_s: Some(431_999),
            confirmed: true,
        }]
    );
    let m = s.layer::<ConntrackModel>().unwrap();
    assert!(!m.pending() && m.unconverged(s.engine()));
    assert_eq!(m.stale_counts(), (1, 2));
    let open = s.engine().open_trackings().next().unwrap();
    assert_eq!(open.last_wrong, Some(t(15)));

    // 20 s: the client closed it. Converged; closed after the 3 s settle, over the lag.
    let (out, actions) = read(&mut s, &[WEB_FLOW_LIVE], t(20));
    assert!(
        matches!(actions.events.as_slice(), [EngineEvent::Converging(t)] if t.target == dead),
        "{:?}",
        actions.events
    );
    assert_eq!(out.recorded.len(), 1);
    assert!(stale_flows(&s).is_empty());
    let events = s.tick(t(23));
    let c = closed(&events);
    assert_eq!(c.len(), 1, "{events:?}");
    assert_eq!(c[0].window_lower(), Some(Duration::from_secs(5)));
    assert_eq!(c[0].window_upper(), Some(Duration::from_secs(10)));
    assert_eq!(c[0].verdict, Verdict::OverExpectedLag);
    assert_eq!(s.engine().open_count(), 0);
    // No missing tracking ever opened for web-2, which no flow goes to.
    assert!(
        s.engine()
            .closed_trackings()
            .iter()
            .all(|t| t.kind == Discrepancy::Stale)
    );
}

/// A flow a dump caught once (it ended during the read, or the table changed under the
/// dump) is never a finding: the removed endpoint's tracking converges at the next read
/// without the flow, with nothing held, no reappearance and a verdict within the lag.
#[test]
fn a_flow_seen_in_one_read_only_is_never_a_finding() {
    let (mut s, path) = session();
    feed(&mut s, web_slice(&[("10.244.3.72", "web-1", true)]), t(10));
    let (_, actions) = read(&mut s, &[WEB_FLOW], t(11));
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    let (_, actions) = read(&mut s, &[], t(12));
    assert!(
        matches!(actions.events.as_slice(), [EngineEvent::Converging(t)] if t.path == path && t.last_wrong.is_none()),
        "{:?}",
        actions.events
    );
    let events = s.tick(t(15));
    let c = closed(&events);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].reappearances, c[0].last_wrong), (0, None));
    assert_eq!(c[0].verdict, Verdict::WithinExpectedLag);

    // A ClusterIP flow pinned to an address that was never an endpoint (it left before the
    // agent started): no tracking from one read, one opened (undated) from two.
    let ghost = "tcp 6 431999 ESTABLISHED src=10.244.1.10 dst=10.96.5.5 sport=51009 dport=80 src=10.244.3.9 dst=10.244.1.10 sport=8080 dport=51009 [ASSURED] mark=0 use=1";
    assert!(read(&mut s, &[ghost], t(20)).1.events.is_empty());
    assert!(read(&mut s, &[], t(21)).1.events.is_empty());
    assert!(read(&mut s, &[ghost], t(22)).1.events.is_empty());
    let (_, actions) = read(&mut s, &[ghost], t(23));
    let o = opened(&actions.events);
    assert_eq!(o.len(), 1, "{:?}", actions.events);
    assert_eq!(
        (o[0].target, o[0].change, o[0].opened),
        (sock("10.244.3.9:8080"), None, t(23))
    );
    let flow = &stale_flows(&s)[0];
    assert!(flow.confirmed);
    assert_eq!(
        (flow.left_at, flow.outlived_by, &flow.former_owner),
        (None, None, &None)
    );
    assert_eq!(flow.first_seen, t(22));
}

/// The stale DNS conntrack case: a client's UDP "connection" to the kube-dns ClusterIP
/// stays pinned to a CoreDNS pod that was removed.
#[test]
fn udp_to_the_dns_cluster_ip_pinned_to_a_removed_coredns_pod() {
    let (mut s, _) = session();
    let dns = ServiceKey::new("kube-system", "kube-dns");
    read(&mut s, &[DNS_FLOW], t(1));
    let removed = TruthEvent::Apply(TruthObject::Slice(slice(
        "kube-system",
        "kube-dns",
        &[
            ("10.244.2.54", "coredns-b", true),
            ("10.244.3.60", "coredns-c", true),
        ],
        DNS,
    )));
    let actions = feed(&mut s, removed, t(30));
    // The Service's UDP and TCP ports are the same target: one stale tracking.
    assert_eq!(opened(&actions.events).len(), 1, "{:?}", actions.events);
    read(&mut s, &[DNS_FLOW], t(31));
    read(&mut s, &[DNS_FLOW], t(32));
    let f = &stale_flows(&s)[0];
    assert_eq!(f.service, dns);
    assert_eq!(f.proto, Protocol::Udp);
    assert_eq!(f.via, Some(sock("10.96.0.10:53")));
    assert_eq!(f.target, sock("10.244.3.53:53"));
    assert_eq!(f.former_owner.as_deref(), Some("kube-system/coredns-a"));
    assert_eq!(
        (f.unreplied, f.outlived_by),
        (1, Some(Duration::from_secs(2)))
    );
    assert_eq!(
        s.engine().open_trackings().next().unwrap().last_wrong,
        Some(t(32))
    );
}

/// A connection made straight to a pod IP (a headless Service, a cached DNS answer) is
/// attributed through the departure it outlived; once the address joins a Service again
/// (a new pod may own it) the flow is no longer judged as stale.
#[test]
fn direct_flows_are_judged_through_the_departure_until_the_address_is_reused() {
    let (mut s, path) = session();
    let backend = ServiceKey::new("prod", "backend");
    // A live direct flow is not attributed (no DNAT, no departure).
    let (out, _) = read(&mut s, &[BACKEND_FLOW], t(1));
    assert_eq!(out.attributed, 0);
    let gone = TruthEvent::Apply(TruthObject::Slice(slice("prod", "backend", &[], WEB)));
    feed(&mut s, gone, t(10));
    read(&mut s, &[BACKEND_FLOW], t(11));
    let (out, _) = read(&mut s, &[BACKEND_FLOW], t(12));
    assert_eq!(out.attributed, 1);
    let f = &stale_flows(&s)[0];
    assert_eq!(
        (&f.service, f.via, f.target),
        (&backend, None, sock("10.244.2.20:8080"))
    );
    assert_eq!(f.former_owner.as_deref(), Some("prod/backend-0"));
    // The address comes back as another Service's endpoint: not attributed any more, and
    // the open tracking converges.
    let other = TruthEvent::Apply(TruthObject::Slice(slice(
        "prod",
        "web",
        &[
            ("10.244.3.71", "web-0", true),
            ("10.244.3.72", "web-1", true),
            ("10.244.2.20", "web-9", false),
        ],
        WEB,
    )));
    feed(&mut s, other, t(20));
    let (out, actions) = read(&mut s, &[BACKEND_FLOW], t(21));
    assert_eq!(out.attributed, 0);
    assert!(
        actions.events.iter().any(
            |e| matches!(e, EngineEvent::Converging(t) if t.path == path && t.service == backend)
        ),
        "{:?}",
        actions.events
    );
    assert!(stale_flows(&s).is_empty());
}

/// Clients are this node's pods as the Pod watch lists them: a host-network pod (whose
/// address is the node's) never is, a deleted pod stops being one, and a relist drops the
/// pods it no longer lists.
/// The API server removes its own address from `default/kubernetes` when it stops and lists
/// it again long after it is back; its clients' connections in between go to a live
/// server. An endpoint without a pod stays a valid target: no tracking, no stale flow. A
/// pod's address in the same position is judged (the first test).
#[test]
fn an_endpoint_without_a_pod_is_no_ghost_when_it_leaves() {
    let (mut s, path) = session();
    let api = ServiceKey::new("default", "kubernetes");
    let https = &[(443, Protocol::Tcp)];
    feed(
        &mut s,
        TruthEvent::Apply(TruthObject::Service(service(
            "default",
            "kubernetes",
            Some("10.96.0.1"),
            https,
        ))),
        t(1),
    );
    let mut sl = slice(
        "default",
        "kubernetes",
        &[("10.200.0.1", "-", true)],
        &[(6443, Protocol::Tcp)],
    );
    sl.endpoints[0].pod = None;
    sl.endpoints[0].node = None;
    let listed = sl.clone();
    feed(
        &mut s,
        TruthEvent::Apply(TruthObject::Slice(sl.clone())),
        t(1),
    );
    const API_FLOW: &str = "tcp 6 431999 ESTABLISHED src=10.244.1.10 dst=10.96.0.1 sport=41000 dport=443 src=10.200.0.1 dst=10.244.1.10 sport=6443 dport=41000 [ASSURED] mark=0 use=1";
    let (out, actions) = read(&mut s, &[API_FLOW], t(2));
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    assert_eq!(out.attributed, 1);

    // The API server stops: its slice is emptied.
    sl.endpoints.clear();
    let actions = feed(&mut s, TruthEvent::Apply(TruthObject::Slice(sl)), t(10));
    assert!(opened(&actions.events).is_empty(), "{:?}", actions.events);
    assert!(!s.layer_mut::<ConntrackModel>().unwrap().take_removed());
    for at in [11, 12, 60, 95] {
        let (_, actions) = read(&mut s, &[API_FLOW], t(at));
        assert!(actions.events.is_empty(), "{at}: {:?}", actions.events);
    }
    assert!(stale_flows(&s).is_empty(), "{:?}", stale_flows(&s));
    assert!(!s.engine().has_open_tracking(path, &api));

    // Listed again 85 s after: nothing to close either.
    let actions = feed(
        &mut s,
        TruthEvent::Apply(TruthObject::Slice(listed)),
        t(100),
    );
    assert!(actions.events.is_empty(), "{:?}", actions.events);

    // The Service deleted: its hosts are forgotten with it.
    assert!(
        s.layer::<ConntrackModel>()
            .unwrap()
            .hosts
            .contains_key(&api)
    );
    feed(
        &mut s,
        TruthEvent::Delete(TruthKey::Service(api.clone())),
        t(200),
    );
    assert!(
        !s.layer::<ConntrackModel>()
            .unwrap()
            .hosts
            .contains_key(&api)
    );
}

#[test]
fn clients_follow_this_nodes_pods() {
    let (mut s, _) = session();
    let clients = |s: &Session| {
        let mut v = s.layer::<ConntrackModel>().unwrap().client_ips();
        v.sort();
        v
    };
    assert_eq!(clients(&s), vec![ip("10.244.1.10")]);
    let other = pod_record(pod("prod", "batch-1"), &["10.244.1.11"], false);
    feed(
        &mut s,
        TruthEvent::Apply(TruthObject::Pod(other.clone())),
        t(1),
    );
    let elsewhere = PodRecord {
        node: Some("node-2".into()),
        ..pod_record(pod("prod", "far"), &["10.244.2.99"], false)
    };
    feed(&mut s, TruthEvent::Apply(TruthObject::Pod(elsewhere)), t(1));
    assert_eq!(clients(&s), vec![ip("10.244.1.10"), ip("10.244.1.11")]);
    feed(
        &mut s,
        TruthEvent::Delete(TruthKey::Pod(pod("prod", "order-7c9"))),
        t(2),
    );
    assert_eq!(clients(&s), vec![ip("10.244.1.11")]);
    feed(&mut s, TruthEvent::Init(ResourceKind::Pods), t(3));
    let record = pod_record(pod("prod", "order-new"), &["10.244.1.12"], false);
    feed(
        &mut s,
        TruthEvent::InitApply(TruthObject::Pod(record)),
        t(3),
    );
    feed(&mut s, TruthEvent::InitDone(ResourceKind::Pods), t(3));
    assert_eq!(clients(&s), vec![ip("10.244.1.12")]);
    // The node's own flows never count, whatever they point at.
    let (out, _) = read(&mut s, &[NODE_FLOW], t(4));
    assert_eq!(out.flows, 0);
}

/// ghostip's own prober (the watch, in its namespace) asks CoreDNS pods straight: with its
/// namespace ignored, its pod is no client, and every other pod of the node still is.
#[test]
fn the_pods_of_an_ignored_namespace_are_no_clients() {
    let (mut s, _) = session();
    let watch = pod_record(pod("ghostip", "ghostip-watch-5d9"), &["10.244.1.20"], false);
    feed(&mut s, TruthEvent::Apply(TruthObject::Pod(watch)), t(1));
    let model = s.layer::<ConntrackModel>().unwrap();
    let mut all = model.client_ips();
    all.sort();
    assert_eq!(all, vec![ip("10.244.1.10"), ip("10.244.1.20")]);
    assert_eq!(
        model.client_ips_outside(&["ghostip".to_string()]),
        vec![ip("10.244.1.10")]
    );
    let mut none_ignored = model.client_ips_outside(&[]);
    none_ignored.sort();
    assert_eq!(none_ignored, all);
}

/// The table becomes unreadable: the path is dropped and its open trackings close
/// unjudged; read again later, it comes back with every Service's set and judges anew.
#[test]
fn detaching_closes_open_trackings_unjudged_and_attaching_again_resumes() {
    let (mut s, path) = session();
    feed(&mut s, web_slice(&[("10.244.3.72", "web-1", true)]), t(10));
    let (_, actions) = s
        .with_layer_cx::<ConntrackModel, _>(|m, cx| m.detach(cx))
        .unwrap();
    let c = closed(&actions.events);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].verdict, Verdict::Unjudged(Unjudged::PathRemoved));
    assert!(s.layer::<ConntrackModel>().unwrap().path().is_none());
    // Without a path a read is not judged.
    let (out, actions) = read(&mut s, &[WEB_FLOW], t(11));
    assert!(actions.events.is_empty() && out.services == 0);
    let (again, _) = s
        .with_layer_cx::<ConntrackModel, _>(|m, cx| m.attach(cx, LAG, t(20)))
        .unwrap();
    assert_eq!(again, path);
    let web = ServiceKey::new("prod", "web");
    assert_eq!(
        s.engine()
            .desired_on_path(path, &web)
            .map(|d| d.iter().collect::<Vec<_>>()),
        Some(vec![sock("10.244.3.72:8080")])
    );
    // The connection to web-0 outlived it: stale from the second read, dated by that read
    // (the departure happened while the path was away).
    read(&mut s, &[WEB_FLOW], t(21));
    let (_, actions) = read(&mut s, &[WEB_FLOW], t(22));
    let o = opened(&actions.events);
    assert_eq!(o.len(), 1, "{:?}", actions.events);
    assert_eq!((o[0].change, o[0].opened), (None, t(22)));
}
