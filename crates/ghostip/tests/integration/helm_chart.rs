//! deploy/helm/ghostip rendered by a real `helm template`: with default values it gives the
//! kustomize base (the same objects, field for field, plus Helm's own labels); Cilium exec
//! and the monitoring objects render deploy/cilium-exec.yaml and deploy/monitoring.yaml; the
//! values for the listen addresses, the CPU cap, the ledger's volume and the image change
//! what they name, and the container arguments parse with ghostip's CLI.
//!
//! Needs helm: `GHOSTIP_HELM=PATH cargo test -p ghostip --test integration -- --ignored helm_chart::`
//! (`lab/build helm` builds it from its Go module; scripts/test runs these).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;

use ghostip::cli::{Command, DatapathChoice};
use serde_json::Value;

use crate::deploy_support;
use deploy_support::{ALL_OPTIONAL, documents_of, helm_template, parse_cli};

/// Labels Helm adds to every object's metadata; the kustomize base has none of them.
const HELM_LABELS: &[&str] = &[
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
];

/// Objects by (kind, namespace, name), Helm's labels removed (after checking they are set).
fn by_key(docs: Vec<Value>, from_helm: bool) -> BTreeMap<(String, String, String), Value> {
    let mut out = BTreeMap::new();
    for mut d in docs {
        if from_helm {
            let what = d.to_string();
            let labels = d["metadata"]["labels"]
                .as_object_mut()
                .unwrap_or_else(|| panic!("no labels: {what}"));
            for l in HELM_LABELS {
                assert!(labels.remove(*l).is_some(), "{l} missing: {what}");
            }
        }
        let key = (
            d["kind"].as_str().unwrap().to_string(),
            d["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            d["metadata"]["name"].as_str().unwrap().to_string(),
        );
        assert!(out.insert(key.clone(), d).is_none(), "{key:?} twice");
    }
    out
}

fn base(files: &[&str]) -> BTreeMap<(String, String, String), Value> {
    by_key(
        documents_of(files).into_iter().map(|(_, d)| d).collect(),
        false,
    )
}

fn render(args: &[&str]) -> BTreeMap<(String, String, String), Value> {
    by_key(
        helm_template(args).unwrap_or_else(|e| panic!("helm template {args:?}: {e}")),
        true,
    )
}

/// Asserts that every object of `want` is rendered, identical.
fn assert_renders(
    got: &BTreeMap<(String, String, String), Value>,
    want: &BTreeMap<(String, String, String), Value>,
) {
    for (key, w) in want {
        let g = got
            .get(key)
            .unwrap_or_else(|| panic!("{key:?} not rendered; rendered: {:?}", got.keys()));
        assert_eq!(
            g,
            w,
            "{key:?} differs:\nrendered {}\nbase     {}",
            serde_json::to_string(g).unwrap(),
            serde_json::to_string(w).unwrap()
        );
    }
}

fn pod_args(docs: &BTreeMap<(String, String, String), Value>, kind: &str) -> Vec<String> {
    let (_, d) = docs.iter().find(|(k, _)| k.0 == kind).unwrap();
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn pod_spec<'a>(docs: &'a BTreeMap<(String, String, String), Value>, kind: &str) -> &'a Value {
    let (_, d) = docs.iter().find(|(k, _)| k.0 == kind).unwrap();
    &d["spec"]["template"]["spec"]
}

#[test]
#[ignore = "needs helm: GHOSTIP_HELM=PATH (lab/build helm; scripts/test runs it)"]
fn default_values_render_the_kustomize_base() {
    let got = render(&[]);
    let want = base(&["namespace.yaml", "rbac.yaml", "agent.yaml", "watch.yaml"]);
    assert_renders(&got, &want);
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    assert!(extra.is_empty(), "not in the kustomize base: {extra:?}");
    // Same RBAC rules, said once more on their own: the chart grants nothing else.
    for ((kind, _, name), d) in &got {
        if kind.ends_with("Role") {
            assert_eq!(
                d["rules"],
                want[&(
                    kind.clone(),
                    d["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    name.clone()
                )]["rules"]
            );
        }
    }
}

#[test]
#[ignore = "needs helm: GHOSTIP_HELM=PATH (lab/build helm; scripts/test runs it)"]
fn cilium_exec_and_monitoring_render_their_files() {
    let got = render(ALL_OPTIONAL);
    assert_renders(&got, &base(&["cilium-exec.yaml", "monitoring.yaml"]));
    let cli = parse_cli(&pod_args(&got, "DaemonSet"), &["--node-name", "node-a"]);
    let Command::Agent(a) = cli.command else {
        panic!("the DaemonSet does not run the agent")
    };
    let DatapathChoice::Read(d) = a.datapath else {
        panic!("the DaemonSet does not pick a datapath")
    };
    assert_eq!(d.runs_in(), ghostip_datapath::RunsIn::CiliumAgentPod);
    assert_eq!(a.cilium_read, ghostip::cli::CiliumRead::Exec);
    assert_eq!(a.cilium_namespace, "kube-system");
    assert_eq!(a.cilium_container, "cilium-agent");
    // Off by default: no exec grant, no Prometheus Operator objects.
    let plain = render(&[]);
    for k in plain.keys() {
        assert!(
            ![
                "ValidatingAdmissionPolicy",
                "ServiceMonitor",
                "PrometheusRule"
            ]
            .contains(&k.0.as_str())
                && k.2 != "ghostip-cilium-exec",
            "{k:?} rendered by default"
        );
    }
    // Another Cilium namespace moves the grant and the fence with it.
    let other = render(&[
        "--set",
        "cilium.exec=true",
        "--set",
        "cilium.namespace=cilium",
    ]);
    assert!(other.contains_key(&("Role".into(), "cilium".into(), "ghostip-cilium-exec".into())));
    let (_, vap) = other
        .iter()
        .find(|(k, _)| k.0 == "ValidatingAdmissionPolicy")
        .unwrap();
    let rule = vap["spec"]["validations"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(rule.contains("request.namespace == 'cilium'"), "{rule}");
}

#[test]
#[ignore = "needs helm: GHOSTIP_HELM=PATH (lab/build helm; scripts/test runs it)"]
fn values_change_what_they_name() {
    let got = render(&[
        "--set",
        "watch.listen=0.0.0.0:9100",
        "--set",
        "agent.listen=[$(HOST_IP)]:9200",
        "--set",
        "agent.maxCpu=0.5",
        "--set",
        "image.repository=registry.example/ghostip",
        "--set",
        "image.tag=1.2.3",
        "--set",
        "watch.db.size=5Gi",
        "--set",
        "watch.db.storageClass=fast",
        "--set",
        "agent.priorityClassName=system-node-critical",
    ]);
    let watch = pod_spec(&got, "Deployment");
    let agent = pod_spec(&got, "DaemonSet");
    for pod in [watch, agent] {
        assert_eq!(
            pod["containers"][0]["image"],
            "registry.example/ghostip:1.2.3"
        );
    }
    assert_eq!(watch["containers"][0]["ports"][0]["containerPort"], 9100);
    assert_eq!(agent["containers"][0]["ports"][0]["containerPort"], 9200);
    assert_eq!(
        agent["containers"][0]["livenessProbe"]["httpGet"]["port"],
        9200
    );
    let Command::Watch(w) = parse_cli(&pod_args(&got, "Deployment"), &[]).command else {
        panic!("not watch")
    };
    assert_eq!(w.listen.port(), 9100);
    let Command::Agent(a) = parse_cli(&pod_args(&got, "DaemonSet"), &["--node-name", "n"]).command
    else {
        panic!("not the agent")
    };
    assert_eq!((a.listen.port(), a.max_cpu), (9200, 0.5));
    let (_, pvc) = got
        .iter()
        .find(|(k, _)| k.0 == "PersistentVolumeClaim")
        .unwrap();
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(pvc["spec"]["storageClassName"], "fast");
    // Another PriorityClass: the chart's own is not rendered.
    assert_eq!(agent["priorityClassName"], "system-node-critical");
    assert!(!got.keys().any(|k| k.0 == "PriorityClass"));
    for (_, svc) in got.iter().filter(|(k, _)| k.0 == "Service") {
        let port = &svc["spec"]["ports"][0]["port"];
        assert!(port == 9100 || port == 9200, "{svc}");
    }

    // The ledger on an emptyDir: no claim.
    let ephemeral = render(&["--set", "watch.db.volume=emptyDir"]);
    assert!(!ephemeral.keys().any(|k| k.0 == "PersistentVolumeClaim"));
    let vol = &pod_spec(&ephemeral, "Deployment")["volumes"][0];
    assert_eq!(vol["emptyDir"]["sizeLimit"], "1Gi");

    // Mistakes are refused by the chart with a message naming the value.
    let err = helm_template(&["--set", "watch.db.volume=nfs"]).unwrap_err();
    assert!(err.contains("watch.db.volume"), "{err}");
    let err = helm_template(&["--set", "watch.listen=0.0.0.0"]).unwrap_err();
    assert!(err.contains("has no port"), "{err}");
    let err = helm_template(&[
        "--set",
        "watch.enabled=false",
        "--set",
        "agent.enabled=false",
    ])
    .unwrap_err();
    assert!(err.contains("enable agent, watch or both"), "{err}");

    // One component alone, and namespaces left to the operator.
    let only_watch = render(&[
        "--set",
        "agent.enabled=false",
        "--set",
        "namespaces.create=false",
    ]);
    assert!(
        only_watch
            .keys()
            .all(|k| !k.2.contains("agent") && k.0 != "Namespace"),
        "{:?}",
        only_watch.keys()
    );
    let (_, crb) = only_watch
        .iter()
        .find(|(k, _)| k.0 == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(crb["subjects"].as_array().unwrap().len(), 1);
}
