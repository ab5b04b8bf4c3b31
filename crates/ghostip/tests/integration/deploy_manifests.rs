//! The deploy/ manifests: every document parses into its Kubernetes type without losing a
//! field (a typo or a misplaced field fails the round trip), the container arguments parse
//! with ghostip's own CLI, and the security properties the docs promise hold: read-only
//! RBAC without Secrets, ConfigMaps only by name in kube-system, pods/exec only in the
//! opt-in Cilium file, the agent's exact capabilities, NODE_NAME from the downward API,
//! resources set, alert rules on metrics ghostip exports, the two namespaces' Pod Security
//! levels (the watch pod meets "restricted" where it is enforced), the watch's ledger on a
//! claim with a single writer, the agent's own PriorityClass, and the krew manifest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ghostip::cli::Command;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, PodSpec, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::deploy_support;
use crate::exported_metrics;
use deploy_support::{deploy_dir, documents_of, parse_cli};

/// Every document of every deploy/*.yaml, with its file name.
fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<String> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    let out = documents_of(&names);
    assert!(
        out.len() >= 15,
        "expected the whole deploy/ set, found {}",
        out.len()
    );
    out
}

/// Parses `doc` as `T` and checks nothing was dropped or changed on the way back.
fn typed<T: DeserializeOwned + serde::Serialize>(file: &str, doc: &Value) -> T {
    let what = format!(
        "{file}: {} {}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    );
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&t).unwrap();
    if &back != doc {
        panic!(
            "{what}: fields lost or changed by the schema (unknown or misplaced field?)\n{}",
            first_difference("", doc, &back)
        );
    }
    t
}

fn first_difference(at: &str, a: &Value, b: &Value) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    None => return format!("{at}.{k}: not in the schema"),
                    Some(w) if v != w => return first_difference(&format!("{at}.{k}"), v, w),
                    _ => {}
                }
            }
            format!(
                "{at}: the schema added {:?}",
                y.keys().filter(|k| !x.contains_key(*k)).collect::<Vec<_>>()
            )
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find(|(_, (v, w))| v != w)
            .map(|(i, (v, w))| first_difference(&format!("{at}[{i}]"), v, w))
            .unwrap_or_default(),
        _ => format!("{at}: {a} became {b}"),
    }
}

/// Prometheus Operator objects, as far as these manifests use them (unknown fields rejected).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ServiceMonitor {
    api_version: String,
    kind: String,
    metadata: Value,
    spec: ServiceMonitorSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ServiceMonitorSpec {
    selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    namespace_selector: BTreeMap<String, Vec<String>>,
    endpoints: Vec<MonitorEndpoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct MonitorEndpoint {
    port: String,
    path: String,
    interval: String,
    scrape_timeout: String,
    honor_labels: bool,
    /// The endpoints require a token: Prometheus presents its ServiceAccount's.
    bearer_token_file: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PrometheusRule {
    api_version: String,
    kind: String,
    metadata: Value,
    spec: RuleSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RuleGroup {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(default, rename = "for")]
    for_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

fn rules_of(doc: &Value) -> Vec<PolicyRule> {
    match doc["kind"].as_str() {
        Some("ClusterRole") => typed::<ClusterRole>("", doc).rules.unwrap_or_default(),
        Some("Role") => typed::<Role>("", doc).rules.unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn container_args(spec: &PodSpec) -> Vec<String> {
    spec.containers[0].args.clone().unwrap_or_default()
}

#[test]
fn every_document_round_trips_through_its_schema() {
    let mut kinds = BTreeMap::<String, usize>::new();
    for (file, doc) in documents() {
        let kind = doc["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no kind"))
            .to_string();
        match kind.as_str() {
            "Namespace" => drop(typed::<Namespace>(&file, &doc)),
            "PersistentVolumeClaim" => drop(typed::<PersistentVolumeClaim>(&file, &doc)),
            "PriorityClass" => drop(typed::<PriorityClass>(&file, &doc)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(&file, &doc)),
            "ClusterRole" => drop(typed::<ClusterRole>(&file, &doc)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(&file, &doc)),
            "Role" => drop(typed::<Role>(&file, &doc)),
            "RoleBinding" => drop(typed::<RoleBinding>(&file, &doc)),
            "DaemonSet" => drop(typed::<DaemonSet>(&file, &doc)),
            "Deployment" => drop(typed::<Deployment>(&file, &doc)),
            "Service" => drop(typed::<Service>(&file, &doc)),
            "ValidatingAdmissionPolicy" => drop(typed::<ValidatingAdmissionPolicy>(&file, &doc)),
            "ValidatingAdmissionPolicyBinding" => {
                drop(typed::<ValidatingAdmissionPolicyBinding>(&file, &doc))
            }
            "ServiceMonitor" => {
                let _: ServiceMonitor = serde_json::from_value(doc.clone())
                    .unwrap_or_else(|e| panic!("{file}: ServiceMonitor: {e}"));
            }
            "PrometheusRule" => {
                let _: PrometheusRule = serde_json::from_value(doc.clone())
                    .unwrap_or_else(|e| panic!("{file}: PrometheusRule: {e}"));
            }
            "Kustomization" => {
                for r in doc["resources"].as_array().unwrap() {
                    let r = r.as_str().unwrap();
                    assert!(
                        deploy_dir().join(r).is_file(),
                        "{file}: missing resource {r}"
                    );
                }
            }
            other => panic!("{file}: unexpected kind {other}"),
        }
        *kinds.entry(kind).or_default() += 1;
    }
    eprintln!("deploy/ documents by kind: {kinds:?}");
    for k in [
        "DaemonSet",
        "Deployment",
        "ClusterRole",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(kinds.contains_key(k), "no {k} in deploy/");
    }
}

#[test]
fn rbac_is_read_only_and_least_privilege() {
    for (file, doc) in documents() {
        let namespace = doc["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        for rule in rules_of(&doc) {
            let resources = rule.resources.clone().unwrap_or_default();
            let verbs: BTreeSet<String> = rule.verbs.iter().cloned().collect();
            assert!(
                !resources
                    .iter()
                    .any(|r| r == "*" || r.starts_with("secrets")),
                "{file}: {rule:?}"
            );
            assert!(!verbs.contains("*"), "{file}: {rule:?}");
            if resources.iter().any(|r| r == "pods/exec") {
                assert_eq!(
                    file, "cilium-exec.yaml",
                    "pods/exec outside the opt-in file"
                );
                assert_eq!(namespace, "kube-system");
                continue;
            }
            let read: BTreeSet<String> = ["get", "list", "watch"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            assert!(verbs.is_subset(&read), "{file}: writes granted: {rule:?}");
            if resources.iter().any(|r| r == "configmaps") {
                assert_eq!(doc["kind"], "Role", "{file}: ConfigMaps cluster-wide");
                assert_eq!(namespace, "kube-system");
                let names = rule.resource_names.clone().unwrap_or_default();
                assert_eq!(
                    names,
                    vec!["coredns".to_string(), "node-local-dns".to_string()]
                );
            }
            if resources.iter().any(|r| r == "daemonsets") {
                // The agents' node count: their own DaemonSet, by name, in their namespace.
                assert_eq!(doc["kind"], "Role", "{file}: DaemonSets cluster-wide");
                assert_eq!(namespace, "ghostip-agent");
                assert_eq!(
                    rule.resource_names.clone().unwrap_or_default(),
                    vec!["ghostip-agent".to_string()]
                );
            }
            for r in &resources {
                assert!(
                    [
                        "endpointslices",
                        "services",
                        "pods",
                        "configmaps",
                        "events",
                        "daemonsets"
                    ]
                    .contains(&r.as_str()),
                    "{file}: unexpected resource {r}"
                );
            }
        }
    }
    // The Cilium exec grant is fenced by an admission policy bound to Deny.
    let docs = documents();
    let vap = docs
        .iter()
        .find(|(_, d)| d["kind"] == "ValidatingAdmissionPolicy")
        .map(|(f, d)| typed::<ValidatingAdmissionPolicy>(f, d))
        .expect("a ValidatingAdmissionPolicy for pods/exec");
    let spec = vap.spec.unwrap();
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert!(rules.iter().any(|r| {
        r.resources
            .as_ref()
            .is_some_and(|x| x.contains(&"pods/exec".to_string()))
    }));
    let binding = docs
        .iter()
        .find(|(_, d)| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .map(|(f, d)| typed::<ValidatingAdmissionPolicyBinding>(f, d))
        .unwrap();
    assert_eq!(
        binding.spec.unwrap().validation_actions.unwrap(),
        vec!["Deny".to_string()]
    );
    // The policy pins the whole argv of every command the agent runs in the Cilium pod (the
    // format table's), and nothing looser.
    let expr = spec.validations.unwrap()[0].expression.clone();
    let cilium = ghostip_datapath::FORMATS
        .iter()
        .filter(|f| {
            f.dump
                .agent
                .as_ref()
                .is_some_and(|a| a.runs_in == ghostip_datapath::RunsIn::CiliumAgentPod)
        })
        .flat_map(|f| f.dump.argv.iter());
    let mut pinned = 0;
    for argv in cilium {
        let list = argv
            .iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(", ");
        assert!(
            expr.contains(&format!("object.command == [{list}]")),
            "{argv:?} not pinned: {expr}"
        );
        pinned += 1;
    }
    assert_eq!(pinned, 2, "cilium-dbg and cilium");
    assert_eq!(expr.matches("object.command").count(), pinned, "{expr}");
}

#[test]
fn agent_daemonset_has_what_the_agent_needs_and_no_more() {
    let (file, doc) = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "DaemonSet")
        .unwrap();
    let ds: DaemonSet = typed(&file, &doc);
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
    assert_eq!(pod.service_account_name.as_deref(), Some("ghostip-agent"));
    let c = &pod.containers[0];
    let sc = c.security_context.clone().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_ne!(sc.privileged, Some(true));
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.drop.unwrap(), vec!["ALL".to_string()]);
    assert_eq!(
        caps.add.unwrap(),
        vec![
            "NET_ADMIN".to_string(),
            "NET_RAW".to_string(),
            "BPF".to_string()
        ]
    );
    // Cilium's pinned maps: the host's bpffs, read-only, and no other host path.
    let host_paths: Vec<String> = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            v.host_path
                .as_ref()
                .map(|h| format!("{}={}", v.name, h.path))
        })
        .collect();
    assert_eq!(host_paths, ["bpffs=/sys/fs/bpf"]);
    let bpffs = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "bpffs")
        .unwrap();
    assert_eq!(
        (bpffs.mount_path.as_str(), bpffs.read_only),
        ("/sys/fs/bpf", Some(true))
    );
    let env = c.env.clone().unwrap();
    let node = env.iter().find(|e| e.name == "NODE_NAME").unwrap();
    let field = node
        .value_from
        .clone()
        .unwrap()
        .field_ref
        .unwrap()
        .field_path;
    assert_eq!(field, "spec.nodeName");
    let res = c.resources.clone().unwrap();
    for k in ["cpu", "memory"] {
        assert!(
            res.requests.as_ref().unwrap().contains_key(k),
            "request {k}"
        );
        assert!(res.limits.as_ref().unwrap().contains_key(k), "limit {k}");
    }
    // The arguments are real flags of `ghostip agent` (NODE_NAME comes from the env).
    let cli = parse_cli(&container_args(&pod), &["--node-name", "node-a"]);
    let Command::Agent(a) = cli.command else {
        panic!("the DaemonSet does not run `ghostip agent`")
    };
    assert_eq!(a.listen.port(), 9754);
    assert!(a.max_cpu > 0.0 && a.max_cpu <= 5.0);
}

#[test]
fn watch_deployment_runs_unprivileged() {
    let (file, doc) = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "Deployment")
        .unwrap();
    let d: Deployment = typed(&file, &doc);
    let pod = d.spec.unwrap().template.spec.unwrap();
    assert_ne!(pod.host_network, Some(true));
    assert_eq!(
        pod.security_context.clone().unwrap().run_as_non_root,
        Some(true)
    );
    let sc = pod.containers[0].security_context.clone().unwrap();
    assert_eq!(sc.capabilities.unwrap().add, None);
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let cli = parse_cli(&container_args(&pod), &[]);
    assert!(matches!(cli.command, Command::Watch(_)));
}

/// The Pod Security level a namespace of deploy/ enforces.
fn enforced_level(namespace: &str) -> String {
    let (file, doc) = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "Namespace" && d["metadata"]["name"] == namespace)
        .unwrap_or_else(|| panic!("no Namespace {namespace} in deploy/"));
    let ns: Namespace = typed(&file, &doc);
    ns.metadata.labels.unwrap()["pod-security.kubernetes.io/enforce"].clone()
}

/// Why `pod` would be refused by Pod Security "restricted" (empty when it is admitted):
/// the baseline checks that apply to these manifests, then restricted's own.
fn restricted_violations(pod: &PodSpec) -> Vec<String> {
    let mut v = Vec::new();
    for (what, on) in [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ] {
        if on == Some(true) {
            v.push(what.to_string());
        }
    }
    for vol in pod.volumes.iter().flatten() {
        if vol.host_path.is_some() {
            v.push(format!("hostPath volume {}", vol.name));
        }
    }
    let pod_sc = pod.security_context.clone().unwrap_or_default();
    let pod_seccomp = pod_sc.seccomp_profile.as_ref().map(|p| p.type_.clone());
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let sc = c.security_context.clone().unwrap_or_default();
        if sc.privileged == Some(true) {
            v.push(format!("{}: privileged", c.name));
        }
        if sc.allow_privilege_escalation != Some(false) {
            v.push(format!("{}: allowPrivilegeEscalation not false", c.name));
        }
        let caps = sc.capabilities.clone().unwrap_or_default();
        if !caps.drop.unwrap_or_default().iter().any(|d| d == "ALL") {
            v.push(format!("{}: capabilities not dropped", c.name));
        }
        for add in caps.add.unwrap_or_default() {
            if add != "NET_BIND_SERVICE" {
                v.push(format!("{}: adds {add}", c.name));
            }
        }
        if sc.run_as_non_root.or(pod_sc.run_as_non_root) != Some(true) {
            v.push(format!("{}: runAsNonRoot not true", c.name));
        }
        if sc.run_as_user.or(pod_sc.run_as_user) == Some(0) {
            v.push(format!("{}: runAsUser 0", c.name));
        }
        let seccomp = sc.seccomp_profile.map(|p| p.type_).or(pod_seccomp.clone());
        if !matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")) {
            v.push(format!("{}: no RuntimeDefault seccomp profile", c.name));
        }
        for p in c.ports.iter().flatten() {
            if p.host_port.is_some_and(|h| h != 0) {
                v.push(format!("{}: hostPort", c.name));
            }
        }
    }
    v
}

#[test]
fn each_component_runs_in_a_namespace_of_its_pod_security_level() {
    let docs = documents();
    let pod_of = |kind: &str| -> (String, PodSpec) {
        let (file, doc) = docs.iter().find(|(_, d)| d["kind"] == kind).unwrap();
        let ns = doc["metadata"]["namespace"].as_str().unwrap().to_string();
        let spec = match kind {
            "Deployment" => typed::<Deployment>(file, doc).spec.unwrap().template.spec,
            _ => typed::<DaemonSet>(file, doc).spec.unwrap().template.spec,
        };
        (ns, spec.unwrap())
    };
    let (watch_ns, watch) = pod_of("Deployment");
    let (agent_ns, agent) = pod_of("DaemonSet");
    assert_ne!(watch_ns, agent_ns, "one namespace for both");
    assert_eq!(enforced_level(&watch_ns), "restricted");
    assert_eq!(enforced_level(&agent_ns), "privileged");
    assert_eq!(restricted_violations(&watch), Vec::<String>::new());
    // The agent needs what only "privileged" admits: that is why it has its own namespace.
    let refused = restricted_violations(&agent);
    for why in ["hostNetwork", "agent: adds NET_ADMIN", "agent: runAsUser 0"] {
        assert!(refused.iter().any(|r| r == why), "{why}: {refused:?}");
    }
    // Every namespaced object sits in one of the two (or kube-system for the Corefile and
    // Cilium grants), and every ServiceAccount subject names the namespace of its account.
    for (file, d) in &docs {
        if let Some(ns) = d["metadata"]["namespace"].as_str() {
            assert!(
                [watch_ns.as_str(), agent_ns.as_str(), "kube-system"].contains(&ns),
                "{file}: {} in {ns}",
                d["metadata"]["name"]
            );
        }
        for subj in d["subjects"].as_array().into_iter().flatten() {
            if d["metadata"]["name"] == "ghostip-metrics-reader" {
                continue; // Prometheus's own account, wherever it runs
            }
            let want = if subj["name"] == "ghostip-agent" {
                &agent_ns
            } else {
                &watch_ns
            };
            assert_eq!(
                subj["namespace"].as_str(),
                Some(want.as_str()),
                "{file}: {subj}"
            );
        }
    }
    // The Cilium exec fence names the agent's account in its namespace.
    let (_, vap) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "ValidatingAdmissionPolicy")
        .unwrap();
    let cond = vap["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        cond.contains(&format!("'system:serviceaccount:{agent_ns}:ghostip-agent'")),
        "{cond}"
    );
}

#[test]
fn the_restricted_check_refuses_what_the_level_refuses() {
    let (file, doc) = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "Deployment")
        .unwrap();
    let good = typed::<Deployment>(&file, &doc)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    type Mutation = Box<dyn Fn(&mut PodSpec)>;
    let mutations: Vec<(&str, Mutation)> = vec![
        ("hostNetwork", Box::new(|p| p.host_network = Some(true))),
        (
            "escalation",
            Box::new(|p| {
                let sc = p.containers[0].security_context.as_mut().unwrap();
                sc.allow_privilege_escalation = None;
            }),
        ),
        (
            "root",
            Box::new(|p| p.security_context.as_mut().unwrap().run_as_non_root = None),
        ),
        (
            "seccomp",
            Box::new(|p| p.security_context.as_mut().unwrap().seccomp_profile = None),
        ),
        (
            "capability",
            Box::new(|p| {
                let sc = p.containers[0].security_context.as_mut().unwrap();
                sc.capabilities.as_mut().unwrap().add = Some(vec!["NET_RAW".into()]);
            }),
        ),
    ];
    for (what, mutate) in mutations {
        let mut pod = good.clone();
        mutate(&mut pod);
        assert!(!restricted_violations(&pod).is_empty(), "{what} admitted");
    }
}

#[test]
fn watch_keeps_its_ledger_on_a_claim_with_one_writer() {
    let docs = documents();
    let (file, doc) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "Deployment")
        .unwrap();
    let d: Deployment = typed(file, doc);
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    // SQLite has one writer: the old pod stops before the new one opens the file.
    assert_eq!(spec.strategy.unwrap().type_.as_deref(), Some("Recreate"));
    let pod = spec.template.spec.unwrap();
    let c = &pod.containers[0];
    let db = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "GHOSTIP_DB")
        .unwrap();
    let db_dir = Path::new(db.value.as_deref().unwrap()).parent().unwrap();
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| Path::new(&m.mount_path) == db_dir)
        .expect("the ledger's directory is a mounted volume");
    let vol = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap();
    let claim = &vol
        .persistent_volume_claim
        .as_ref()
        .expect("the ledger is on a PersistentVolumeClaim")
        .claim_name;
    let (pfile, pdoc) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "PersistentVolumeClaim" && d["metadata"]["name"] == *claim)
        .unwrap_or_else(|| panic!("no claim {claim} in deploy/"));
    let pvc: PersistentVolumeClaim = typed(pfile, pdoc);
    assert_eq!(pvc.metadata.namespace, d.metadata.namespace);
    let pspec = pvc.spec.unwrap();
    assert_eq!(
        pspec.access_modes.unwrap(),
        vec!["ReadWriteOnce".to_string()]
    );
    let size = &pspec.resources.unwrap().requests.unwrap()["storage"].0;
    // docs/DEPLOY.md: 45 MB at 10 000 Services plus ~600 bytes per replacement kept 7 days
    // plus 64 MiB of WAL; at least a week of one full rollout a day of 150 000 endpoints.
    let gib: f64 = size.strip_suffix("Gi").unwrap().parse().unwrap();
    let need = 45e6 + 150_000.0 * 7.0 * 600.0 + 64.0 * 1024.0 * 1024.0;
    assert!(gib * 1024f64.powi(3) >= need, "{size} < {need} bytes");
}

#[test]
fn agent_priority_class_is_its_own_and_never_preempts() {
    let docs = documents();
    let (file, doc) = docs.iter().find(|(_, d)| d["kind"] == "DaemonSet").unwrap();
    let ds: DaemonSet = typed(file, doc);
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let name = pod.priority_class_name.clone().unwrap();
    let (pfile, pdoc) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "PriorityClass" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the agent's PriorityClass {name} is not in deploy/"));
    let pc: PriorityClass = typed(pfile, pdoc);
    assert_eq!(pc.preemption_policy.as_deref(), Some("Never"));
    assert_ne!(pc.global_default, Some(true));
    // Above ordinary workloads (0), below the system classes (2 000 000 000 and up).
    assert!(pc.value > 0 && pc.value < 1_000_000_000, "{}", pc.value);
    // The agent's ledger is on an emptyDir with a limit; its retention keeps it inside.
    let vol = pod
        .volumes
        .clone()
        .unwrap()
        .into_iter()
        .find(|v| v.name == "state")
        .unwrap();
    let limit = vol.empty_dir.unwrap().size_limit.unwrap().0;
    assert_eq!(limit, "512Mi");
    let cli = parse_cli(&container_args(&pod), &["--node-name", "node-a"]);
    let Command::Agent(a) = cli.command else {
        panic!("not the agent")
    };
    assert!(
        a.retention <= std::time::Duration::from_secs(86_400),
        "{:?}",
        a.retention
    );
}

#[test]
fn alerts_use_metrics_ghostip_exports() {
    // Every ghostip_* series an alert reads is exported, with the labels it groups by (the
    // series' own or the scrape target's): see tests/exported_metrics.
    let series = exported_metrics::exported();
    let (_, doc) = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "PrometheusRule")
        .unwrap();
    let rule: PrometheusRule = serde_json::from_value(doc).unwrap();
    let mut alerts = 0;
    let mut read = BTreeSet::new();
    for r in rule.spec.groups.iter().flat_map(|g| &g.rules) {
        alerts += 1;
        read.extend(exported_metrics::check_promql(&r.alert, &r.expr, &series));
    }
    assert!(alerts >= 3);
    // The findings each layer exports have an alert: stale datapath/DNS endpoints, stuck
    // paths, the conntrack layer's stale flows.
    for metric in [
        "ghostip_stale_endpoints",
        "ghostip_stuck_paths",
        "ghostip_stale_flows",
    ] {
        assert!(read.contains(metric), "no alert reads {metric}: {read:?}");
    }
}

/// deploy/krew/ghostip.yaml, as far as krew's `Plugin` (v1alpha2) goes (unknown fields rejected).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KrewPlugin {
    api_version: String,
    kind: String,
    metadata: KrewMetadata,
    spec: KrewSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KrewMetadata {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct KrewSpec {
    version: String,
    homepage: String,
    short_description: String,
    description: String,
    caveats: String,
    platforms: Vec<KrewPlatform>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KrewPlatform {
    selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    uri: String,
    sha256: String,
    files: Vec<KrewFile>,
    bin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KrewFile {
    from: String,
    to: String,
}

#[test]
fn krew_manifest_installs_the_binary_as_the_kubectl_plugin() {
    let path = deploy_dir().join("krew/ghostip.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let m: KrewPlugin = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("krew: {e}"));
    assert_eq!(
        m.api_version,
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m.kind, "Plugin");
    // Krew links `bin` as kubectl-<name>: the name the binary recognizes as the plugin's.
    assert_eq!(
        format!("kubectl-{}", m.metadata.name),
        ghostip::cli::KUBECTL_PLUGIN
    );
    assert_eq!(m.spec.version, format!("v{}", env!("CARGO_PKG_VERSION")));
    assert!(m.spec.short_description.len() <= 60);
    assert!(!m.spec.platforms.is_empty());
    let mut arches = BTreeSet::new();
    for p in &m.spec.platforms {
        let labels = p.selector.match_labels.clone().unwrap();
        assert_eq!(labels["os"], "linux");
        let arch = labels["arch"].clone();
        let archive = format!("ghostip-{}-linux-{arch}.tar.gz", m.spec.version);
        assert!(p.uri.ends_with(&format!("/{archive}")), "{}", p.uri);
        // A released digest, or the documented placeholder naming the archive.
        let hex = p.sha256.len() == 64
            && p.sha256
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
        assert!(
            hex || p.sha256 == format!("<sha256 of {archive}>"),
            "{arch}: {}",
            p.sha256
        );
        assert_eq!(p.bin, "ghostip");
        assert!(
            p.files.iter().any(|f| f.from == "ghostip" && f.to == "."),
            "{arch}: the binary is not installed"
        );
        assert!(arches.insert(arch), "two platforms for one arch");
    }
}

/// The drain-wait component: its one write is the Event on the pod; everything else it reads
/// is named (kube-system by resource name where RBAC allows); the agents' per-IP answer is a
/// non-resource URL; the preStop hook parses as `ghostip drain-wait` with the downward API's
/// env, and the grace period leaves drain-wait room beyond its margin.
#[test]
fn drain_wait_component_reads_what_it_needs_and_writes_only_its_event() {
    let dir = deploy_dir().join("drain-wait");
    let mut docs = Vec::new();
    for f in ["rbac.yaml", "drain-wait-patch.yaml"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        for d in deploy_support::yaml_documents(f, &text) {
            docs.push((f.to_string(), d));
        }
    }
    let mut writes = Vec::new();
    for (file, doc) in &docs {
        for rule in rules_of(doc) {
            let resources = rule.resources.clone().unwrap_or_default();
            assert!(
                !resources
                    .iter()
                    .any(|r| r == "*" || r.starts_with("secrets") || r.contains('/')),
                "{file}: {rule:?}"
            );
            for v in &rule.verbs {
                if !["get", "list", "watch"].contains(&v.as_str()) {
                    writes.push((resources.clone(), v.clone()));
                }
            }
            if let Some(urls) = &rule.non_resource_urls {
                assert_eq!(urls, &vec!["/v1/ips".to_string(), "/v1/ips/*".to_string()]);
                assert_eq!(rule.verbs, vec!["get".to_string()]);
            }
            if doc["metadata"]["namespace"] == "kube-system"
                && resources.iter().any(|r| r == "configmaps")
            {
                assert_eq!(
                    rule.resource_names.clone().unwrap_or_default(),
                    vec!["coredns".to_string(), "node-local-dns".to_string()]
                );
            }
        }
    }
    assert_eq!(
        writes,
        vec![(vec!["events".to_string()], "create".to_string())]
    );
    let (_, patch) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "Deployment")
        .unwrap();
    let spec = &patch["spec"]["template"]["spec"];
    let web = &spec["containers"][0];
    let cmd: Vec<String> = web["lifecycle"]["preStop"]["exec"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(cmd[0], "/ghostip-bin/ghostip");
    let cli = parse_cli(&cmd[1..], &[]);
    let Command::DrainWait(args) = cli.command else {
        panic!("not drain-wait: {cmd:?}");
    };
    let env: Vec<(&str, &str)> = web["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        env,
        vec![
            ("POD_IP", "status.podIP"),
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace")
        ]
    );
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    let ghostip::cli::Given::Ok(margin) = args.margin else {
        panic!("the component's --margin does not parse: {:?}", args.margin);
    };
    assert!(grace > margin.as_secs() + 30, "grace {grace} s");
}

#[test]
fn http_callers_are_reviewed_by_the_api_server() {
    let docs = documents();
    // The agent and the watch may review tokens (system:auth-delegator), nothing else built in.
    let bindings: Vec<&Value> = docs
        .iter()
        .map(|(_, d)| d)
        .filter(|d| d["kind"] == "ClusterRoleBinding")
        .collect();
    let mut builtin: Vec<(&str, Vec<&str>)> = bindings
        .iter()
        .filter(|b| {
            b["roleRef"]["name"]
                .as_str()
                .unwrap()
                .starts_with("system:")
        })
        .map(|b| {
            let subjects = b["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap())
                .collect();
            (b["roleRef"]["name"].as_str().unwrap(), subjects)
        })
        .collect();
    builtin.sort();
    assert_eq!(
        builtin,
        vec![(
            "system:auth-delegator",
            vec!["ghostip-agent", "ghostip-watch"]
        )]
    );
    // Both listen beyond loopback, so `--auth auto` requires tokens; the agent on the node's
    // address in either family.
    let agent = docs
        .iter()
        .find(|(_, d)| d["kind"] == "DaemonSet")
        .map(|(f, d)| typed::<DaemonSet>(f, d))
        .unwrap();
    let args = container_args(&agent.spec.unwrap().template.spec.unwrap());
    assert!(
        args.contains(&"--listen=[$(HOST_IP)]:9754".to_string()),
        "{args:?}"
    );
    // Prometheus may read /metrics and nothing else.
    let reader = docs
        .iter()
        .find(|(_, d)| {
            d["kind"] == "ClusterRole" && d["metadata"]["name"] == "ghostip-metrics-reader"
        })
        .map(|(f, d)| typed::<ClusterRole>(f, d))
        .expect("a ClusterRole for Prometheus");
    let rules = reader.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].non_resource_urls,
        Some(vec!["/metrics".to_string()])
    );
    assert_eq!(rules[0].verbs, vec!["get".to_string()]);
}

/// Every ghostip container of deploy/ (agent, watch, the drain-wait init container) runs the
/// one image `scripts/build-image` and the Containerfile build, `ghostip:<crate version>`,
/// and the Helm chart's appVersion (its default tag) is that version.
#[test]
fn every_ghostip_container_runs_the_image_of_this_version() {
    let want = format!("ghostip:{}", env!("CARGO_PKG_VERSION"));
    let mut docs = documents();
    let patch = "drain-wait-patch.yaml";
    let text = std::fs::read_to_string(deploy_dir().join("drain-wait").join(patch)).unwrap();
    for d in deploy_support::yaml_documents(patch, &text) {
        docs.push((format!("drain-wait/{patch}"), d));
    }
    let mut seen = Vec::new();
    for (file, doc) in &docs {
        let spec = &doc["spec"]["template"]["spec"];
        for list in ["initContainers", "containers"] {
            for c in spec[list].as_array().into_iter().flatten() {
                let image = c["image"].as_str().unwrap_or_default();
                let repo = image.split([':', '@']).next().unwrap_or_default();
                if repo == "ghostip" || repo.ends_with("/ghostip") {
                    let name = c["name"].as_str().unwrap_or("?");
                    assert_eq!(image, want, "{file}: container {name}");
                    seen.push(format!("{file}: {name}"));
                }
            }
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "agent.yaml: agent",
            "drain-wait/drain-wait-patch.yaml: ghostip-drain-wait-install",
            "watch.yaml: watch",
        ],
        "the ghostip containers of deploy/"
    );
    let chart = std::fs::read_to_string(deploy_dir().join("helm/ghostip/Chart.yaml")).unwrap();
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"'));
    assert_eq!(app_version, Some(env!("CARGO_PKG_VERSION")), "Chart.yaml");
}
