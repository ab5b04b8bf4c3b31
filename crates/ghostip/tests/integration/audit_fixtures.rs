//! Audits the real-world samples of `../shared/fixtures/{coredns,k8s-objects}/`, read in place,
//! and snapshots the findings (insta).
//!
//! - each Corefile sample (kubeadm, coredns/deployment, EKS, k3s, RKE2, AKS LocalDNS, OpenShift,
//!   NodeLocal DNSCache, Nomad) is audited together with the headless Service and bare Pods of
//!   the Kubernetes website's DNS example; forwarding caches (NodeLocal DNSCache, AKS LocalDNS)
//!   are put in front of the kube-up addon's classic Corefile, the way they are deployed.
//!   Templates are rendered first the way their installers do; the unrendered text is also
//!   audited as published (`corefile_as_published__*`: placeholders named in caveats, or a
//!   refusal with a line number, never a panic);
//! - the whole `k8s-objects/` directory (Deployments with preStop sleep 180 beyond their grace
//!   period, ingress-nginx's `/wait-shutdown` hook, the KYAML Pod, broken samples) is audited
//!   the way `ghostip audit -f DIR` reads it.
//!
//! Ignored by default (`needs the fixture corpus`): run with `--ignored`, they fail when the corpus
//! (`$GHOSTIP_FIXTURES`, default `../shared/fixtures`) is absent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use ghostip::printer::audit as render;
use ghostip_analysis::audit::load::{FileKind, add_manifest};
use ghostip_analysis::audit::{AuditConfig, Inventory, audit};

/// The fixture corpus (`$GHOSTIP_FIXTURES` or `../shared/fixtures`), with its `coredns/` and
/// `k8s-objects/` folders; the test fails naming what is absent.
fn fixtures() -> PathBuf {
    ghostip_testkit::env::fixtures("coredns");
    ghostip_testkit::env::fixtures("k8s-objects");
    ghostip_testkit::env::fixtures_root()
}

const DNS_EXAMPLE: &str =
    "k8s-objects/headless-service+pods_hostname-subdomain_k8s-website-dns-pod-service_2020.yaml";
const CLASSIC_UPSTREAM: &str =
    "coredns/Corefile_k8s-cluster-addons-coredns.yaml.base_coredns-v1.14.2.template";

/// Renders installer placeholders: kubeadm's Go template, coredns/deployment's sed variables,
/// kube-up's and NodeLocal's `__…__` values; drops a leading ConfigMap key line.
fn render_template(text: &str) -> String {
    let mut t = text.to_string();
    for (k, v) in [
        ("__PILLAR__DNS__DOMAIN__", "cluster.local"),
        ("__DNS__DOMAIN__", "cluster.local"),
        ("CLUSTER_DOMAIN", "cluster.local"),
        ("REVERSE_CIDRS", "in-addr.arpa ip6.arpa"),
        ("UPSTREAMNAMESERVER", "/etc/resolv.conf"),
        ("FEDERATIONS", ""),
        ("STUBDOMAINS", ""),
    ] {
        t = t.replace(k, v);
    }
    let mut out = String::new();
    let mut rest = t.as_str();
    while let Some(start) = rest.find("{{") {
        let (before, after) = rest.split_at(start);
        let Some(end) = after.find("}}") else { break };
        let action = after[2..end].trim_matches('-').trim();
        out.push_str(before);
        out.push_str(match action {
            ".DNSDomain" => "cluster.local",
            ".UpstreamNameserver" => "/etc/resolv.conf",
            ".MinikubeHostIP" => "192.168.49.1",
            ".MinikubeHostFQDN" => "host.minikube.internal",
            _ => "",
        });
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    match out.strip_prefix("Corefile\n") {
        Some(s) => s.to_string(),
        None => out,
    }
}

fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Adds a Corefile sample as `audit` would read it (ConfigMap YAML or raw), rendered.
fn add_corefile(inv: &mut Inventory, dir: &Path, rel: &str) {
    let raw = read(dir, rel);
    let rendered = render_template(&raw);
    match FileKind::of(Path::new(rel)) {
        Some(FileKind::Manifest) => {
            if let Err(p) = add_manifest(inv, rel, &rendered) {
                inv.problems.push(p);
            }
        }
        _ => inv.add_corefile_file(rel, rendered),
    }
}

fn snapshot_name(file: &str) -> String {
    file.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn corefile_samples_against_the_dns_example() {
    let dir = fixtures();
    let mut names: Vec<String> = std::fs::read_dir(dir.join("coredns"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{names:?}");
    let mut with_lag = 0;
    for name in &names {
        let rel = format!("coredns/{name}");
        // Unrendered, as published: never a panic, every failure names a line or the file;
        // a template is audited as it is (its placeholders named) and snapshotted too.
        let raw_text = read(&dir, &rel);
        let mut raw = Inventory::new("default");
        raw.add_corefile_file(&rel, raw_text.clone());
        let as_published = audit(&raw, &AuditConfig::default());
        if render_template(&raw_text) != raw_text {
            insta::assert_snapshot!(
                format!("corefile_as_published__{}", snapshot_name(name)),
                render::table(&as_published)
            );
        }

        let mut inv = Inventory::new("default");
        add_corefile(&mut inv, &dir, &rel);
        let text = inv
            .corefiles
            .first()
            .map(|c| c.text.clone())
            .unwrap_or_default();
        let forwards = ghostip_core::corefile::Corefile::parse(&text)
            .ok()
            .and_then(|c| c.expected_lag("cluster.local").ok())
            .is_some_and(|l| {
                matches!(
                    l.source,
                    ghostip_core::corefile::AnswerSource::Forward { .. }
                )
            });
        if forwards {
            add_corefile(&mut inv, &dir, CLASSIC_UPSTREAM);
        }
        add_manifest(&mut inv, DNS_EXAMPLE, &read(&dir, DNS_EXAMPLE)).unwrap();
        let report = audit(&inv, &AuditConfig::default());
        if !report.dns.is_empty() {
            with_lag += 1;
        }
        println!(
            "{name}: {} DNS layer(s), {} finding(s), {} input problem(s)",
            report.dns.len(),
            report.findings.len(),
            report.problems.len()
        );
        insta::assert_snapshot!(
            format!("corefile__{}", snapshot_name(name)),
            render::table(&report)
        );
    }
    // Only kube-dns's dnsmasq arguments and the RKE2 paste (a shell line above the YAML) are
    // not Corefiles ghostip can read.
    assert!(with_lag >= names.len() - 2, "{with_lag} of {}", names.len());
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn nodelocal_in_front_of_kubeadm_classic_adds_its_own_floor() {
    let dir = fixtures();
    let mut inv = Inventory::new("default");
    add_corefile(
        &mut inv,
        &dir,
        "coredns/Corefile_k8s-cluster-addons-nodelocaldns.yaml_k8s-dns-node-cache-1.26.4.template",
    );
    add_corefile(&mut inv, &dir, CLASSIC_UPSTREAM);
    add_manifest(&mut inv, DNS_EXAMPLE, &read(&dir, DNS_EXAMPLE)).unwrap();
    let report = audit(&inv, &AuditConfig::default());
    let roles: Vec<(&str, u64)> = report.dns.iter().map(|l| (l.role, l.cache_lag_s)).collect();
    assert_eq!(roles, [("cluster-dns", 30), ("node-cache", 35)]);
    assert_eq!(report.services[0].budget_s, Some(35));
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn k8s_objects_directory() {
    let dir = fixtures();
    let mut inv = Inventory::new("default");
    let mut names: Vec<String> = std::fs::read_dir(dir.join("k8s-objects"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut read_files = 0;
    for name in names {
        let rel = format!("k8s-objects/{name}");
        if FileKind::of(Path::new(&rel)) != Some(FileKind::Manifest) {
            continue;
        }
        read_files += 1;
        if let Err(p) = add_manifest(&mut inv, &rel, &read(&dir, &rel)) {
            inv.problems.push(p);
        }
    }
    assert!(read_files > 10);
    add_corefile(&mut inv, &dir, CLASSIC_UPSTREAM);
    let report = audit(&inv, &AuditConfig::default());
    // The broken samples are named with their line; the rest is still audited.
    assert!(
        report.problems.iter().all(|p| p.origin.line.is_some()),
        "{:?}",
        report.problems
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.rule == ghostip_analysis::audit::RuleId::Term001
                && f.object.name == "nginx-deployment"),
        "preStop 180 s > grace 120 s must be found"
    );
    insta::assert_snapshot!("k8s_objects_directory", render::table(&report));
}
