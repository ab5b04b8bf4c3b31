//! The deploy/ manifests and the Helm chart against the lab's real API server: server-side
//! dry runs (admission, defaulting, schema validation with unknown fields as errors, nothing
//! persisted; monitoring.yaml against the Prometheus Operator's own CRDs, which `lab/up`
//! installs), and Pod Security admission of the two namespaces: the watch pod is admitted
//! where "restricted" is enforced, the agent pod only where "privileged" is.
//!
//! Needs a running lab and root; `#[ignore]`d. `scripts/test` runs it with
//! `GHOSTIP_LAB=1 GHOSTIP_HELM=… cargo test --release -p ghostip --test e2e -- --ignored e2e_deploy::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::deploy_support;
use crate::lab_support;
use deploy_support::{ALL_OPTIONAL, deploy_dir, documents_of, helm_template};
use lab_support::{lab, require_lab, run};

/// `kubectl ARGS…` in the lab's hub namespace: (exit code, stdout, stderr).
fn kubectl(args: &[&str]) -> (i32, String, String) {
    run(lab("exec").arg("hub").arg("kubectl").args(args))
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Writes documents as one multi-document JSON stream kubectl reads.
fn write_docs(dir: &Path, name: &str, docs: &[Value]) -> PathBuf {
    let path = dir.join(name);
    let text: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
    std::fs::write(&path, text.join("\n")).unwrap();
    path
}

/// What the test created for real (namespaces, RBAC, the PriorityClass), deleted on drop,
/// waiting until the namespaces are gone so that the next test can create them again.
struct Created(Vec<PathBuf>);

impl Drop for Created {
    fn drop(&mut self) {
        for f in self.0.iter().rev() {
            let _ = kubectl(&[
                "delete",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=90s",
                "-f",
                path_str(f),
            ]);
        }
    }
}

/// Creates the namespaces, the ServiceAccounts and RBAC, and the agent's PriorityClass for
/// real: pods need them to exist even in a dry run.
fn create_prerequisites(dir: &Path) -> Created {
    let priority: Vec<Value> = documents_of(&["agent.yaml"])
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| d["kind"] == "PriorityClass")
        .collect();
    let files = vec![
        deploy_dir().join("namespace.yaml"),
        deploy_dir().join("rbac.yaml"),
        write_docs(dir, "priorityclass.json", &priority),
    ];
    let created = Created(files.clone());
    for f in &files {
        let (code, out, err) = kubectl(&["apply", "-f", path_str(f)]);
        assert_eq!(code, 0, "{}: {out}{err}", f.display());
    }
    created
}

/// `kubectl apply --dry-run=server --validate=strict -f FILE…`.
fn dry_run(files: &[PathBuf]) -> (i32, String, String) {
    let mut args = vec!["apply", "--dry-run=server", "--validate=strict"];
    for f in files {
        args.extend(["-f", path_str(f)]);
    }
    kubectl(&args)
}

/// A Pod with the pod template of the first `kind` in `docs`, in `namespace`.
fn pod_of(docs: &[(String, Value)], kind: &str, name: &str, namespace: &str) -> Value {
    let (_, d) = docs.iter().find(|(_, d)| d["kind"] == kind).unwrap();
    let t = &d["spec"]["template"];
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": t["metadata"]["labels"]},
        "spec": t["spec"],
    })
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn manifests_pass_a_server_side_dry_run_and_pod_security_admission() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let _created = create_prerequisites(dir.path());

    let files: Vec<PathBuf> = [
        "agent.yaml",
        "watch.yaml",
        "cilium-exec.yaml",
        "monitoring.yaml",
    ]
    .iter()
    .map(|f| deploy_dir().join(f))
    .collect();
    let (code, out, err) = dry_run(&files);
    eprintln!("{out}{err}");
    assert_eq!(code, 0, "server-side dry run failed:\n{out}\n{err}");
    for kind in [
        "daemonset.apps/ghostip-agent",
        "deployment.apps/ghostip-watch",
        "persistentvolumeclaim/ghostip-watch-db",
        "validatingadmissionpolicy.admissionregistration.k8s.io/ghostip-cilium-exec-only",
        "servicemonitor.monitoring.coreos.com/ghostip",
        "prometheusrule.monitoring.coreos.com/ghostip",
    ] {
        assert!(out.contains(kind), "{kind} not applied:\n{out}");
    }

    // Pod Security admission, as the API server enforces it on the pods the controllers
    // would create from these templates.
    let docs = documents_of(&["agent.yaml", "watch.yaml"]);
    let try_pod = |kind: &str, namespace: &str| {
        let mut pod = pod_of(
            &docs,
            kind,
            &format!("psa-{}", kind.to_lowercase()),
            namespace,
        );
        // The namespace's own ServiceAccount: an unknown one is refused before Pod Security
        // is asked.
        pod["spec"]["serviceAccountName"] = json!(if namespace == "ghostip" {
            "ghostip-watch"
        } else {
            "ghostip-agent"
        });
        let f = write_docs(dir.path(), &format!("{kind}-{namespace}.json"), &[pod]);
        dry_run(&[f])
    };
    let (code, out, err) = try_pod("Deployment", "ghostip");
    assert_eq!(
        code, 0,
        "the watch pod is refused where restricted:\n{out}{err}"
    );
    assert!(
        !err.contains("PodSecurity"),
        "warnings for the watch pod: {err}"
    );
    let (code, out, err) = try_pod("DaemonSet", "ghostip-agent");
    assert_eq!(
        code, 0,
        "the agent pod is refused in its namespace:\n{out}{err}"
    );
    let (code, out, err) = try_pod("DaemonSet", "ghostip");
    eprintln!("the agent pod where restricted is enforced: {err}");
    assert_ne!(code, 0, "restricted admitted the agent pod:\n{out}");
    assert!(
        err.contains("violates PodSecurity \"restricted:latest\"") && err.contains("hostNetwork"),
        "{err}"
    );
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root) and helm (GHOSTIP_HELM)"]
fn helm_chart_passes_a_server_side_dry_run() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let _created = create_prerequisites(dir.path());
    for (name, values) in [
        ("defaults", &[][..]),
        ("cilium-and-monitoring", ALL_OPTIONAL),
    ] {
        let docs = helm_template(values).unwrap_or_else(|e| panic!("helm template: {e}"));
        let f = write_docs(dir.path(), &format!("{name}.json"), &docs);
        let (code, out, err) = dry_run(&[f]);
        eprintln!("{name}:\n{out}{err}");
        assert_eq!(code, 0, "{name}: server-side dry run failed:\n{out}\n{err}");
        let applied = out.lines().count();
        assert_eq!(
            applied,
            docs.len(),
            "{name}: {applied} of {} objects",
            docs.len()
        );
        assert!(out.contains("daemonset.apps/ghostip-agent"), "{out}");
        if name != "defaults" {
            assert!(out.contains("validatingadmissionpolicybinding"), "{out}");
            assert!(
                out.contains("prometheusrule.monitoring.coreos.com/ghostip"),
                "{out}"
            );
        }
    }
}

/// `kubectl exec` as the agent's ServiceAccount (impersonated by the lab's admin): the
/// admission policy's answer, or what came after admission.
fn exec_as_agent(pod: &str, container: &str, argv: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "--as=system:serviceaccount:ghostip-agent:ghostip-agent",
        "-n",
        "kube-system",
        "exec",
        pod,
        "-c",
        container,
        "--",
    ];
    args.extend_from_slice(argv);
    kubectl(&args)
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn the_cilium_exec_policy_admits_only_the_service_list_in_cilium_agent_pods() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let mut created = create_prerequisites(dir.path());
    // The opt-in grant and its policy, for real, and a stand-in Cilium agent pod.
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cilium-ab1cd", "namespace": "kube-system", "labels": {"k8s-app": "cilium"}},
        "spec": {"containers": [
            {"name": "cilium-agent", "image": "quay.io/cilium/cilium:v1.18.0"},
            {"name": "other", "image": "quay.io/cilium/cilium:v1.18.0"}
        ]},
    });
    let other = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "coredns-ab1cd", "namespace": "kube-system"},
        "spec": {"containers": [{"name": "cilium-agent", "image": "quay.io/cilium/cilium:v1.18.0"}]},
    });
    let pods = write_docs(dir.path(), "pods.json", &[pod, other]);
    for f in [deploy_dir().join("cilium-exec.yaml"), pods] {
        let (code, out, err) = kubectl(&["apply", "-f", path_str(&f)]);
        assert_eq!(code, 0, "{}: {out}{err}", f.display());
        created.0.push(f);
    }
    let denied = |(code, out, err): (i32, String, String)| {
        code != 0 && err.contains("ghostip-cilium-exec-only") && err.contains("denied")
            || out.contains("ghostip-cilium-exec-only")
    };
    // The policy may take a moment to be enforced after it is created: wait for the first
    // denial of a command it forbids (at most 30 s).
    let start = std::time::Instant::now();
    while !denied(exec_as_agent("cilium-ab1cd", "cilium-agent", &["sh"])) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the policy never denied `sh` in the Cilium pod"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // Denied: another argv, the same argv with an extra argument, another container,
    // another pod.
    for (pod, container, argv) in [
        (
            "cilium-ab1cd",
            "cilium-agent",
            &["cilium-dbg", "service", "list"][..],
        ),
        (
            "cilium-ab1cd",
            "cilium-agent",
            &["cilium-dbg", "service", "list", "-o", "json", "-v"][..],
        ),
        (
            "cilium-ab1cd",
            "cilium-agent",
            &["cilium-dbg", "bpf", "lb", "list"][..],
        ),
        (
            "cilium-ab1cd",
            "other",
            &["cilium-dbg", "service", "list", "-o", "json"][..],
        ),
        (
            "coredns-ab1cd",
            "cilium-agent",
            &["cilium-dbg", "service", "list", "-o", "json"][..],
        ),
    ] {
        let got = exec_as_agent(pod, container, argv);
        assert!(
            denied(got.clone()),
            "{pod}/{container} {argv:?} was admitted: {got:?}"
        );
    }
    // Admitted: both spellings of the service list. The lab has no kubelet to run them, so
    // the request fails after admission, never with the policy's denial.
    for argv in [
        &["cilium-dbg", "service", "list", "-o", "json"][..],
        &["cilium", "service", "list", "-o", "json"][..],
    ] {
        let got = exec_as_agent("cilium-ab1cd", "cilium-agent", argv);
        eprintln!("admitted {argv:?}: {got:?}");
        assert!(!denied(got.clone()), "{argv:?} was denied: {got:?}");
        assert!(
            !got.2.contains("Forbidden") || !got.2.contains("cannot create resource"),
            "RBAC refused {argv:?}: {got:?}"
        );
    }
}
