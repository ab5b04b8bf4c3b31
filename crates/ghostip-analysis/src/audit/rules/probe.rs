//! GIP-PROBE-*: liveness probes that fail on a slow dependency, workloads without a readiness
//! probe.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, PodSpec, Probe};

use super::client::hosts_in;
use super::{Finding, HEALTH_DEPENDS_ANNOTATION, RuleId, Severity};
use crate::audit::inventory::Workload;

/// GIP-PROBE-001: a liveness probe with `timeoutSeconds` ≤ 1 on a container whose health
/// depends on DNS or a downstream.
pub(super) fn liveness_with_dependency(
    w: &Workload,
    c: &Container,
    hosts: &BTreeSet<String>,
) -> Option<Finding> {
    let p = c.liveness_probe.as_ref()?;
    let timeout = p.timeout_seconds.unwrap_or(1);
    if timeout > 1 {
        return None;
    }
    let dep = health_dependency(w, p, hosts)?;
    Some(Finding {
        rule: RuleId::Probe001,
        severity: Severity::Warning,
        object: w.obj.clone(),
        service: None,
        caveats: Vec::new(),
        message: format!(
            "container {}: liveness probe times out after {timeout} s{} and {dep}: a slow DNS answer (a lookup retry alone takes 5 s) fails it, and {} failures restart a healthy container (CrashLoopBackOff)",
            c.name,
            if p.timeout_seconds.is_none() { " (default)" } else { "" },
            p.failure_threshold.unwrap_or(3)
        ),
        fix: "timeoutSeconds ≥ 5 on the liveness probe and keep dependencies out of it (check them in the readiness probe instead)".to_string(),
        figures: BTreeMap::from([("timeout_s", i64::from(timeout))]),
    })
}

/// GIP-PROBE-002: a workload behind a Service without any readiness probe.
pub(super) fn no_readiness_probe(
    w: &Workload,
    spec: &PodSpec,
    behind_service: bool,
) -> Option<Finding> {
    let applies = behind_service
        && !spec.containers.iter().any(|c| c.readiness_probe.is_some())
        && matches!(
            w.obj.kind.as_str(),
            "Deployment" | "StatefulSet" | "DaemonSet"
        );
    applies.then(|| Finding {
        rule: RuleId::Probe002,
        severity: Severity::Note,
        object: w.obj.clone(),
        service: None,
        caveats: Vec::new(),
        message: "no container has a readiness probe: new pods are published as soon as they start, before they accept connections".to_string(),
        fix: "a readinessProbe on the serving container (httpGet or tcpSocket on its port)".to_string(),
        figures: BTreeMap::new(),
    })
}

/// Why a liveness probe depends on DNS or a downstream, if it does.
fn health_dependency(w: &Workload, p: &Probe, hosts: &BTreeSet<String>) -> Option<String> {
    if let Some(v) = w.annotation(HEALTH_DEPENDS_ANNOTATION) {
        return match v.trim() {
            "none" | "" => None,
            other => Some(format!(
                "its health depends on {other} ({HEALTH_DEPENDS_ANNOTATION})"
            )),
        };
    }
    let remote = |h: &str| {
        let h = h.trim().to_ascii_lowercase();
        !(h.is_empty() || h == "localhost" || h.parse::<std::net::IpAddr>().is_ok())
    };
    if let Some(h) = p.http_get.as_ref().and_then(|g| g.host.as_deref())
        && remote(h)
    {
        return Some(format!("the probe resolves host {h}"));
    }
    if let Some(h) = p.tcp_socket.as_ref().and_then(|g| g.host.as_deref())
        && remote(h)
    {
        return Some(format!("the probe resolves host {h}"));
    }
    if let Some(cmd) = p.exec.as_ref().and_then(|e| e.command.as_ref()) {
        let text = cmd.join(" ");
        for tool in ["nslookup", "dig", "getent", "host"] {
            if text
                .split_whitespace()
                .any(|t| t.rsplit('/').next() == Some(tool))
            {
                return Some(format!("the probe runs {tool}, a DNS lookup"));
            }
        }
        let mut probe_hosts = BTreeSet::new();
        hosts_in(&text, false, &mut probe_hosts);
        if let Some(h) = probe_hosts.iter().find(|h| remote(h)) {
            return Some(format!("the probe reaches {h}"));
        }
    }
    // An application health handler (HTTP, gRPC, exec) in a pod that talks to other hosts
    // may check them: the argocd-repo-server case (health waits on `lookup argocd-redis`).
    let app_handler = p.http_get.is_some() || p.grpc.is_some() || p.exec.is_some();
    let downstream: Vec<&String> = hosts.iter().filter(|h| remote(h)).collect();
    if app_handler && !downstream.is_empty() {
        let names: Vec<&str> = downstream.iter().take(3).map(|s| s.as_str()).collect();
        return Some(format!(
            "the pod talks to {}{}, which its health handler may wait on",
            names.join(", "),
            if downstream.len() > 3 { ", …" } else { "" }
        ));
    }
    None
}
