//! The agent's conntrack reader against a real kernel: real flows between network
//! namespaces this test creates, read back over netlink by `conntrack_reader`, compared
//! with `conntrack -L` of the same table, and judged by the conntrack layer's model.
//!
//! Three namespaces joined by veth pairs, as a node and its pods: the "node" routes between
//! a client pod (10.244.1.10, fd00:1::10) and a server namespace holding three pod
//! addresses (10.244.3.53, .71, .72, fd00:3::71), and DNATs two "ClusterIPs" like
//! kube-proxy (kube-dns 10.96.0.10:53/udp → 10.244.3.53:53, web 10.96.5.5:80/tcp →
//! 10.244.3.71:8080). Sockets are made by threads moved into the namespaces
//! (`setns`); the reader runs in a thread moved into the node's. Every packet stays
//! between these namespaces.
//!
//! Ignored unless run as root with `GHOSTIP_NETNS_TESTS=1`, under the lab lock:
//! `flock /tmp/ghostip-lab.lock env GHOSTIP_NETNS_TESTS=1 cargo test -p ghostip --test
//! conntrack_kernel -- --ignored --test-threads=1`. Namespaces get unique names and are
//! deleted when the test ends (also on failure).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use ghostip::layers::conntrack::reader::{self, ReadError};
use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, PodRecord, ServicePort, ServiceRecord, SliceRecord,
};
use ghostip_core::{PodRef, Protocol, ServiceKey, Target, Time};
use ghostip_datapath::conntrack;
use ghostip_session::layers::conntrack::ConntrackModel;
use ghostip_session::layers::conntrack::flows::FlowKey;
use ghostip_session::{
    Received, ResourceKind, Session, SessionConfig, SyncState, TruthEvent, TruthObject,
};
use ghostip_testkit::env::require_netns;
use ghostip_testkit::records::pod_record;
use rustix::thread::CapabilitySet;

use crate::netns_support;

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace deleted on drop.
struct Netns(String);

impl Netns {
    fn new(role: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "gip-ct-{}-{}-{role}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        Netns(name)
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.0];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    fn exec(&self, cmd: &str, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.0, cmd];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Runs `f` on a thread moved into this namespace (sockets it makes stay there).
    fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        netns_support::enter(&Path::new("/run/netns").join(&self.0), f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The node, the client pod and the server pods, wired and DNATed.
struct Lab {
    node: Netns,
    cli: Netns,
    srv: Netns,
}

fn lab() -> Lab {
    let lab = Lab {
        node: Netns::new("node"),
        cli: Netns::new("cli"),
        srv: Netns::new("srv"),
    };
    let (node, cli, srv) = (&lab.node, &lab.cli, &lab.srv);
    node.ip(&[
        "link", "add", "vc", "type", "veth", "peer", "name", "eth0", "netns", &cli.0,
    ]);
    node.ip(&[
        "link", "add", "vs", "type", "veth", "peer", "name", "eth0", "netns", &srv.0,
    ]);
    for (ns, dev, addrs) in [
        (node, "vc", &["10.244.1.1/24", "fd00:1::1/64"][..]),
        (node, "vs", &["10.244.3.1/24", "fd00:3::1/64"][..]),
        (cli, "eth0", &["10.244.1.10/24", "fd00:1::10/64"][..]),
        (
            srv,
            "eth0",
            &[
                "10.244.3.53/24",
                "10.244.3.71/24",
                "10.244.3.72/24",
                "fd00:3::71/64",
            ][..],
        ),
    ] {
        for a in addrs {
            ns.ip(&["addr", "add", a, "dev", dev, "nodad"]);
        }
        ns.ip(&["link", "set", dev, "up"]);
        ns.ip(&["link", "set", "lo", "up"]);
    }
    cli.ip(&["route", "add", "default", "via", "10.244.1.1"]);
    cli.ip(&["-6", "route", "add", "default", "via", "fd00:1::1"]);
    srv.ip(&["route", "add", "default", "via", "10.244.3.1"]);
    srv.ip(&["-6", "route", "add", "default", "via", "fd00:3::1"]);
    node.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    node.exec("sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"]);
    let rules = "table ip kube-proxy {
  chain prerouting { type nat hook prerouting priority -100;
    ip daddr 10.96.0.10 udp dport 53 dnat to 10.244.3.53:53
    ip daddr 10.96.5.5 tcp dport 80 dnat to 10.244.3.71:8080
  }
}
table inet track {
  chain forward { type filter hook forward priority 0; ct state new accept; }
}
";
    // The ip nat table makes the kernel track IPv4 flows; the inet table (a `ct`
    // expression) makes it track IPv6 ones too.
    let file = std::env::temp_dir().join(format!("{}.nft", node.0));
    std::fs::write(&file, rules).unwrap();
    node.exec("nft", &["-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    lab
}

/// The sockets that keep the flows open.
#[allow(dead_code)]
struct Flows {
    listeners: Vec<TcpListener>,
    udp_server: UdpSocket,
    clients: Vec<TcpStream>,
    udp_client: UdpSocket,
}

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The client pod's flows: UDP through the kube-dns ClusterIP (answered), TCP through the
/// web ClusterIP, TCP straight to 10.244.3.72:9000 and to [fd00:3::71]:8080 (listeners
/// never accept: the kernel completes the handshake), and one TCP connection closed at
/// once.
fn flows(lab: &Lab) -> Flows {
    let (listeners, udp_server) = lab.srv.enter(|| {
        let l = ["10.244.3.71:8080", "10.244.3.72:9000", "[fd00:3::71]:8080"]
            .map(|a| TcpListener::bind(sock(a)).unwrap());
        let u = UdpSocket::bind(sock("10.244.3.53:53")).unwrap();
        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (l.into_iter().collect::<Vec<_>>(), u)
    });
    let answer = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let (n, from) = udp_server.recv_from(&mut buf).unwrap();
        udp_server.send_to(&buf[..n], from).unwrap();
        udp_server
    });
    let (clients, udp_client) = lab.cli.enter(|| {
        let u = UdpSocket::bind(sock("0.0.0.0:0")).unwrap();
        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        u.send_to(b"query", sock("10.96.0.10:53")).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = u.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"query");
        let t = Duration::from_secs(5);
        let c: Vec<TcpStream> = ["10.96.5.5:80", "10.244.3.72:9000", "[fd00:3::71]:8080"]
            .map(|a| TcpStream::connect_timeout(&sock(a), t).unwrap())
            .into_iter()
            .collect();
        let closed = TcpStream::connect_timeout(&sock("10.244.3.71:8080"), t).unwrap();
        drop(closed);
        (c, u)
    });
    let udp_server = answer.join().unwrap();
    // The node's own connection (a host-network process, a probe): never a client's.
    let own = lab.node.enter(|| {
        TcpStream::connect_timeout(&sock("10.244.3.72:9000"), Duration::from_secs(5)).unwrap()
    });
    let mut clients = clients;
    clients.push(own);
    std::thread::sleep(Duration::from_millis(200));
    Flows {
        listeners,
        udp_server,
        clients,
        udp_client,
    }
}

fn target(s: &str) -> Target {
    let a = sock(s);
    Target::socket(a.ip(), a.port())
}

fn key(proto: Protocol, client: &str, dst: &str, backend: &str) -> FlowKey {
    FlowKey {
        proto,
        client: client.parse().unwrap(),
        dst: target(dst),
        backend: target(backend),
    }
}

/// `(proto, src, dst, sport, dport)` of each entry's original direction.
type Tuple = (String, IpAddr, IpAddr, Option<u16>, Option<u16>);

fn tuple(e: &ghostip_datapath::CtEntry) -> Tuple {
    (
        e.proto.clone(),
        e.orig.src,
        e.orig.dst,
        e.orig.sport,
        e.orig.dport,
    )
}

const CLIENTS: [&str; 2] = ["10.244.1.10", "fd00:1::10"];

fn clients() -> Vec<IpAddr> {
    CLIENTS.iter().map(|c| c.parse().unwrap()).collect()
}

#[test]
#[ignore = "needs network namespaces (root, GHOSTIP_NETNS_TESTS=1)"]
fn the_netlink_reader_reads_what_conntrack_lists_and_keeps_the_pods_live_flows() {
    require_netns("network namespaces, nft, conntrack");
    let lab = lab();
    let _flows = flows(&lab);
    let cancel = AtomicBool::new(false);
    let mut entries = Vec::new();
    let stats = lab
        .node
        .enter(|| {
            reader::dump(Duration::from_secs(30), &cancel, |v| {
                entries.push(v.to_entry())
            })
        })
        .unwrap();
    assert_eq!(stats.entries as usize, entries.len());
    assert_eq!(stats.skipped_unknown, 0, "{stats:?}");
    // The same table as `conntrack -L` lists it, both families.
    let mut listed = String::new();
    for family in ["ipv4", "ipv6"] {
        listed.push_str(&lab.node.exec("conntrack", &["-L", "-f", family]));
    }
    let text = conntrack::parse_str(&listed).unwrap();
    let ours: BTreeSet<Tuple> = entries.iter().map(tuple).collect();
    let theirs: BTreeSet<Tuple> = text.entries.iter().map(tuple).collect();
    assert_eq!(
        ours, theirs,
        "netlink: {entries:#?}\nconntrack -L:\n{listed}"
    );
    assert!(
        ours.iter().any(|t| t.1.is_ipv6()),
        "an IPv6 flow: {ours:#?}"
    );

    let read = lab
        .node
        .enter(|| reader::read_flows(clients(), Duration::from_secs(30), &cancel))
        .unwrap();
    let keys: BTreeSet<FlowKey> = read.flows.flows.iter().map(|f| f.key).collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            key(
                Protocol::Udp,
                "10.244.1.10",
                "10.96.0.10:53",
                "10.244.3.53:53"
            ),
            key(
                Protocol::Tcp,
                "10.244.1.10",
                "10.96.5.5:80",
                "10.244.3.71:8080"
            ),
            key(
                Protocol::Tcp,
                "10.244.1.10",
                "10.244.3.72:9000",
                "10.244.3.72:9000"
            ),
            key(
                Protocol::Tcp,
                "fd00:1::10",
                "[fd00:3::71]:8080",
                "[fd00:3::71]:8080"
            ),
        ]),
        "{:#?}",
        read.flows
    );
    assert!(read.flows.entries >= 6, "{:?}", read.flows);
    assert!(read.stats.datagrams >= 1 && read.stats.bytes > 0);
}

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn feed(s: &mut Session, event: TruthEvent, at: Time) {
    s.on_truth(&Received { at, event });
}

fn web_slice(ips: &[(&str, &str)]) -> SliceRecord {
    SliceRecord {
        namespace: "prod".into(),
        name: "web-abc".into(),
        service: "web".into(),
        address_type: AddressType::IPv4,
        endpoints: ips
            .iter()
            .map(|(ip, name)| EndpointRecord {
                ip: ip.parse().unwrap(),
                ready: true,
                serving: true,
                terminating: false,
                pod: Some(PodRef {
                    namespace: "prod".into(),
                    name: (*name).into(),
                    uid: String::new(),
                }),
                node: Some("node-3".into()),
                hostname: None,
            })
            .collect(),
        ports: vec![EndpointPort {
            name: None,
            port: 8080,
            protocol: Protocol::Tcp,
        }],
        trigger_time: None,
    }
}

/// The whole layer on real reads: web-0 (10.244.3.71) leaves the web Service while the
/// client pod's connection through the ClusterIP stays pinned to it; two real dumps later
/// the model holds one confirmed stale flow with the client pod and the former owner.
#[test]
#[ignore = "needs network namespaces (root, GHOSTIP_NETNS_TESTS=1)"]
fn real_reads_of_a_connection_pinned_to_a_removed_pod_make_a_stale_flow() {
    require_netns("network namespaces, nft, conntrack");
    let lab = lab();
    let _flows = flows(&lab);
    let kinds = [
        ResourceKind::EndpointSlices,
        ResourceKind::Services,
        ResourceKind::Pods,
    ];
    let mut s = Session::new(
        SessionConfig::default(),
        SyncState::new(t(0), kinds.clone()),
    )
    .with_layer(ConntrackModel::new("node-1"));
    let web = ServiceKey::new("prod", "web");
    for k in kinds {
        feed(&mut s, TruthEvent::Init(k.clone()), t(0));
        match k {
            ResourceKind::Services => {
                let svc = ServiceRecord {
                    key: web.clone(),
                    cluster_ips: vec!["10.96.5.5".parse().unwrap()],
                    headless: false,
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
                    labels: Default::default(),
                };
                feed(
                    &mut s,
                    TruthEvent::InitApply(TruthObject::Service(svc)),
                    t(0),
                );
            }
            ResourceKind::EndpointSlices => {
                let slice = web_slice(&[("10.244.3.71", "web-0"), ("10.244.3.72", "web-1")]);
                feed(
                    &mut s,
                    TruthEvent::InitApply(TruthObject::Slice(slice)),
                    t(0),
                );
            }
            ResourceKind::Pods => {
                let pod = PodRef {
                    namespace: "prod".into(),
                    name: "order-7c9".into(),
                    uid: String::new(),
                };
                let pod = PodRecord {
                    node: Some("node-1".into()),
                    ..pod_record(pod, clients())
                };
                feed(&mut s, TruthEvent::InitApply(TruthObject::Pod(pod)), t(0));
            }
            ResourceKind::ConfigMap(_) => {}
        }
        feed(&mut s, TruthEvent::InitDone(k), t(0));
    }
    s.with_layer_cx::<ConntrackModel, _>(|m, cx| m.attach(cx, Duration::from_secs(2), t(0)))
        .unwrap();
    let slice = web_slice(&[("10.244.3.72", "web-1")]);
    feed(&mut s, TruthEvent::Apply(TruthObject::Slice(slice)), t(10));
    let cancel = AtomicBool::new(false);
    for at in [t(11), t(12)] {
        let clients = s.layer::<ConntrackModel>().unwrap().client_ips();
        let read = lab
            .node
            .enter(|| reader::read_flows(clients, Duration::from_secs(30), &cancel))
            .unwrap();
        s.with_layer_cx::<ConntrackModel, _>(|m, cx| m.on_read(cx, &read.flows, at))
            .unwrap();
    }
    let stale: Vec<_> = s
        .layer::<ConntrackModel>()
        .unwrap()
        .stale_flows()
        .cloned()
        .collect();
    assert_eq!(stale.len(), 1, "{stale:#?}");
    let f = &stale[0];
    assert!(f.confirmed);
    assert_eq!(f.service, web);
    assert_eq!(
        f.client_pod.as_ref().map(|p| p.name.as_str()),
        Some("order-7c9")
    );
    assert_eq!(f.via, Some(target("10.96.5.5:80")));
    assert_eq!(f.target, target("10.244.3.71:8080"));
    assert_eq!(f.former_owner.as_deref(), Some("prod/web-0"));
    assert_eq!(f.outlived_by, Some(Duration::from_secs(2)));
    // The connection's last packet, from the kernel's timer (the reads are dated on the
    // test's clock, the packets went out on the real one a few seconds before); the
    // tracking was last wrong at the read that saw the connection, however idle.
    let last_packet = f.last_packet.expect("an ESTABLISHED entry's last packet");
    assert!(
        last_packet <= t(12) && last_packet >= t(-18),
        "{last_packet}"
    );
    let open: Vec<_> = s.engine().open_trackings().collect();
    assert_eq!(open.len(), 1, "{open:#?}");
    assert_eq!(open[0].last_wrong, Some(t(12)));
}

/// Without CAP_NET_ADMIN (dropped from the reading thread's effective set) the kernel
/// refuses the dump and the error names the capability; a set cancel flag ends a dump.
#[test]
#[ignore = "needs network namespaces (root, GHOSTIP_NETNS_TESTS=1)"]
fn without_cap_net_admin_the_error_names_it() {
    require_netns("network namespaces, nft, conntrack");
    let node = Netns::new("node");
    let err = node
        .enter(|| {
            let mut caps = rustix::thread::capabilities(None).unwrap();
            caps.effective.remove(CapabilitySet::NET_ADMIN);
            rustix::thread::set_capabilities(None, caps).unwrap();
            reader::dump(Duration::from_secs(30), &AtomicBool::new(false), |_| {})
        })
        .unwrap_err();
    assert!(matches!(err, ReadError::Privilege { .. }), "{err}");
    assert_eq!(err.missing_capability(), Some("CAP_NET_ADMIN"));
    assert!(err.to_string().contains("CAP_NET_ADMIN"), "{err}");
    let cancelled =
        node.enter(|| reader::dump(Duration::from_secs(30), &AtomicBool::new(true), |_| {}));
    assert!(
        matches!(cancelled, Err(ReadError::Cancelled)),
        "{cancelled:?}"
    );
}
