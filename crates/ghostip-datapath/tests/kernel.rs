//! Real kernel state: kube-proxy-shaped rules loaded into a network namespace this test
//! creates, read back with the real `iptables-save` / `nft -j`, parsed and compared with a
//! matching truth; real conntrack entries of real flows between namespaces, attributed.
//!
//! Ignored unless run as root with `GHOSTIP_NETNS_TESTS=1`:
//! `GHOSTIP_NETNS_TESTS=1 cargo test -p ghostip-datapath --test kernel -- --ignored --test-threads=1`.
//! Every namespace gets a unique name and is deleted when the test ends (also on failure).
//! No packet leaves the namespaces: the iptables and nftables tests send no traffic; the
//! conntrack test's flows stay between the namespaces it creates.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use ghostip_core::truth::{EndpointRecord, Truth};
use ghostip_core::{PodRef, ServiceKey, Target, Time};
use ghostip_datapath::against_truth::{NodeDiff, diff};
use ghostip_datapath::conntrack_audit::{
    AuditConfig, ConntrackAudit, FormerOwner, IpFacts, OwnershipFacts, StaleFlowKind,
};
use ghostip_datapath::{conntrack, iptables, nft};
use ghostip_testkit::dumps::{GenModel, GenSpec, OTHER_NODE, THIS_NODE};
use ghostip_testkit::env::require_netns;

/// A network namespace deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ghostip-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name], None);
        Netns(name)
    }

    /// Runs `cmd args` inside the namespace, feeding `stdin`, returning stdout.
    fn exec(&self, cmd: &str, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
        let mut all = vec!["netns", "exec", &self.0, cmd];
        all.extend_from_slice(args);
        run("ip", &all, stdin)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(cmd: &str, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut child = Command::new(cmd)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn spec() -> GenSpec {
    let mut s = GenSpec::new(60, 400);
    s.nodeport_every = 4;
    s.loadbalancer_every = 9;
    s.external_ip_every = 7;
    s.local_every = 2;
    s.udp_every = 5;
    s.affinity_every = 11;
    s.empty_every = 13;
    s
}

/// The truth of `model` where service 0 lost its second endpoint and service 1 gained
/// 100.127.0.1 (on this node): what the kernel's rules no longer / do not yet match.
fn changed_truth(model: &GenModel) -> (Truth, Target, Target) {
    let (services, mut slices) = model.truth_records();
    let removed = slices[0].endpoints.remove(1);
    let mut added: EndpointRecord = slices[1].endpoints[0].clone();
    added.ip = IpAddr::V4(Ipv4Addr::new(100, 127, 0, 1));
    added.node = Some(THIS_NODE.into());
    slices[1].endpoints.push(added);
    let mut truth = Truth::new();
    for s in services {
        truth.apply_service(s, t(0));
    }
    let port0 = slices[0].ports[0].port;
    let port1 = slices[1].ports[0].port;
    for s in slices {
        truth.apply_slice(s, t(0));
    }
    (
        truth,
        Target::socket(removed.ip, port0),
        Target::socket(IpAddr::V4(Ipv4Addr::new(100, 127, 0, 1)), port1),
    )
}

fn assert_stale_and_missing(d: &NodeDiff, model: &GenModel, removed: Target, added: Target) {
    let svc0 = &model.services[0].service;
    let svc1 = &model.services[1].service;
    let stale: BTreeSet<(String, Target)> = d
        .stale
        .iter()
        .map(|r| (r.service.name.clone(), r.backend))
        .collect();
    let missing: BTreeSet<(String, Target)> = d
        .missing
        .iter()
        .map(|r| (r.service.name.clone(), r.backend))
        .collect();
    assert_eq!(
        stale,
        BTreeSet::from([(svc0.name.clone(), removed)]),
        "{d:#?}"
    );
    assert_eq!(
        missing,
        BTreeSet::from([(svc1.name.clone(), added)]),
        "{d:#?}"
    );
    assert!(d.services_missing.is_empty() && d.frontends_missing.is_empty());
}

#[test]
#[ignore = "needs network namespaces (root, GHOSTIP_NETNS_TESTS=1)"]
fn iptables_rules_in_a_real_kernel_diff_against_the_truth() {
    require_netns("network namespaces, iptables, nft, conntrack");
    let model = GenModel::generate(&spec());
    let ns = Netns::new();
    ns.exec(
        "iptables-restore",
        &[],
        Some(model.iptables_save().as_bytes()),
    );
    let saved = ns.exec("iptables-save", &[], None);
    let table = iptables::parse_bytes(&saved).unwrap();
    assert_eq!(table.skipped.unknown, 0, "{:?}", table.skipped);
    let truth = model.truth(t(0));
    for node in [THIS_NODE, OTHER_NODE] {
        let d = diff(&table, &truth, Some(node), Some(t(5)));
        assert!(d.is_clean(), "{node}: {d:#?}");
        assert_eq!(d.frontends_checked, table.frontends.len());
    }
    let (changed, removed, added) = changed_truth(&model);
    let d = diff(&table, &changed, Some(THIS_NODE), Some(t(5)));
    assert_stale_and_missing(&d, &model, removed, added);
    // A Service the kernel has no rules for is missing entirely.
    let mut more = GenSpec::new(61, 400);
    more.empty_every = 0;
    let bigger = GenModel::generate(&more);
    let (svcs, _) = bigger.truth_records();
    let mut truth = model.truth(t(0));
    truth.apply_service(svcs[60].clone(), t(1));
    let d = diff(&table, &truth, Some(THIS_NODE), None);
    assert_eq!(d.services_missing.len(), 1, "{d:#?}");
}

#[test]
#[ignore = "needs network namespaces (root, GHOSTIP_NETNS_TESTS=1)"]
fn nftables_rules_in_a_real_kernel_diff_against_the_truth() {
    require_netns("network namespaces, iptables, nft, conntrack");
    for inline in [false, true] {
        let mut s = spec();
        s.nft_inline_dnat = inline;
        let model = GenModel::generate(&s);
        let mut script = Vec::new();
        model.write_nft_script(&mut script).unwrap();
        let ns = Netns::new();
        ns.exec("nft", &["-f", "-"], Some(&script));
        let json = ns.exec("nft", &["-j", "list", "table", "ip", "kube-proxy"], None);
        let table = nft::parse_slice(&json).unwrap();
        assert_eq!(
            table.skipped.unknown, 0,
            "inline {inline}: {:?}",
            table.skipped
        );
        let truth = model.truth(t(0));
        let d = diff(&table, &truth, Some(THIS_NODE), None);
        assert!(d.is_clean(), "inline {inline}: {d:#?}");
        let (changed, removed, added) = changed_truth(&model);
        let d = diff(&table, &changed, Some(THIS_NODE), None);
        assert_stale_and_missing(&d, &model, removed, added);
    }
}

fn pod(ns: &str, name: &str) -> PodRef {
    PodRef {
        namespace: ns.into(),
        name: name.into(),
        uid: String::new(),
    }
}

#[test]
#[ignore = "needs network namespaces (root, GHOSTIP_NETNS_TESTS=1)"]
fn real_conntrack_entries_of_real_flows_are_attributed() {
    require_netns("network namespaces, iptables, nft, conntrack");
    let dir = std::env::temp_dir().join(format!("ghostip-ct-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("ct.txt");
    // The capture script makes the namespaces, the flows and reads `conntrack -L`.
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/capture-conntrack-pods.sh"
    );
    run("bash", &[script, out.to_str().unwrap()], None);
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let table = conntrack::parse_str(&text).unwrap();
    assert!(table.entries.len() >= 6, "{text}");

    // Truth after the removals: CoreDNS moved to .54, the web pod .71 is gone.
    let mut truth = Truth::new();
    let dns = ServiceKey::new("kube-system", "kube-dns");
    truth.apply_service(
        ghostip_core::truth::ServiceRecord {
            key: dns.clone(),
            cluster_ips: vec![IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))],
            headless: false,
            service_type: "ClusterIP".into(),
            publish_not_ready: false,
            internal_traffic_policy: Default::default(),
            external_traffic_policy: Default::default(),
            ports: vec![ghostip_core::truth::ServicePort {
                name: Some("dns".into()),
                port: 53,
                protocol: ghostip_core::Protocol::Udp,
                node_port: None,
            }],
            has_selector: true,
            labels: Default::default(),
        },
        t(0),
    );
    let mut facts = OwnershipFacts::new();
    facts.insert(
        "10.244.1.10".parse().unwrap(),
        IpFacts {
            owner: Some(pod("prod", "order-7c9")),
            former: None,
        },
    );
    facts.insert(
        "10.244.3.71".parse().unwrap(),
        IpFacts {
            owner: None,
            former: Some(FormerOwner {
                pod: pod("prod", "stock-5d8-x"),
                removed: Some(t(0)),
                services: vec![],
            }),
        },
    );
    let cfg = AuditConfig {
        now: Some(t(47)),
        ..AuditConfig::default()
    };
    let mut a = ConntrackAudit::new(&truth, &facts, cfg);
    conntrack::for_each_entry(text.as_bytes(), |e| a.push(&e)).unwrap();
    let r = a.finish();
    let lines: Vec<String> = r.stale.iter().map(ToString::to_string).collect();
    assert!(
        lines.iter().any(|l| l.starts_with(
            "client pod prod/order-7c9 (10.244.1.10) still sends tcp to 10.244.3.71:8080 via 10.96.5.5:80 (was prod/stock-5d8-x, removed 47 s ago)"
        )),
        "{lines:#?}"
    );
    assert!(
        r.stale.iter().any(|f| f.kind == StaleFlowKind::DnsBackend
            && f.via == Some(Target::socket("10.96.0.10".parse().unwrap(), 53))),
        "{lines:#?}"
    );
    // The live pod 10.244.3.72 and the closing flow are not findings.
    assert!(
        r.stale
            .iter()
            .all(|f| f.target.ip != "10.244.3.72".parse::<IpAddr>().unwrap())
    );
    assert!(r.live < r.entries, "the closing TCP flow is not live");
}
