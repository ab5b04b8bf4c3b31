//! GIP-TERM-*: preStop hooks and the grace period, what covers a pod's removal.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::budget::{SHUTDOWN_MARGIN, secs_i64};
use super::{Ctx, Finding, RuleId, Severity};
use crate::audit::inventory::{ServiceInfo, Workload};
use crate::pod::prestop_seconds;

/// `terminationGracePeriodSeconds` when not set.
const DEFAULT_GRACE: i64 = 30;

/// A preStop hook's delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PreStop {
    /// No hook.
    None,
    /// A recognizable sleep of this many seconds.
    Sleep(u64),
    /// A hook of unknown duration (httpGet, tcpSocket, a command that is not a sleep).
    Unknown(&'static str),
}

pub(super) fn container_prestop(c: &Container) -> PreStop {
    let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else {
        return PreStop::None;
    };
    match prestop_seconds(h) {
        Some(s) => PreStop::Sleep(s),
        None if h.http_get.is_some() => PreStop::Unknown("httpGet"),
        None if h.exec.is_some() => PreStop::Unknown("exec"),
        None => PreStop::Unknown("tcpSocket"),
    }
}

/// The containers that serve traffic: those declaring ports, or all when none does.
fn serving(spec: &PodSpec) -> Vec<&Container> {
    let with_ports: Vec<&Container> = spec
        .containers
        .iter()
        .filter(|c| c.ports.as_ref().is_some_and(|p| !p.is_empty()))
        .collect();
    if with_ports.is_empty() {
        spec.containers.iter().collect()
    } else {
        with_ports
    }
}

/// The delay the pod keeps accepting connections after it left the EndpointSlice.
pub(super) fn pod_prestop(spec: &PodSpec) -> PreStop {
    let hooks: Vec<PreStop> = serving(spec).into_iter().map(container_prestop).collect();
    let known = hooks
        .iter()
        .filter_map(|h| match h {
            PreStop::None => Some(0),
            PreStop::Sleep(s) => Some(*s),
            PreStop::Unknown(_) => None,
        })
        .min();
    match known {
        Some(0) if hooks.iter().all(|h| *h == PreStop::None) => PreStop::None,
        Some(s) => PreStop::Sleep(s),
        None => hooks
            .into_iter()
            .find(|h| matches!(h, PreStop::Unknown(_)))
            .unwrap_or(PreStop::None),
    }
}

pub(super) fn grace(spec: &PodSpec) -> i64 {
    spec.termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE)
}

impl Ctx<'_> {
    pub(super) fn no_prestop_note(&mut self, svc: &ServiceInfo, w: &Workload) {
        let Some(spec) = &w.template.spec else { return };
        if !matches!(
            w.obj.kind.as_str(),
            "Deployment" | "StatefulSet" | "DaemonSet"
        ) {
            return;
        }
        if pod_prestop(spec) != PreStop::None {
            return;
        }
        let already = self
            .findings
            .iter()
            .any(|f| f.rule == RuleId::Term002 && f.object == w.obj);
        if already {
            return;
        }
        self.push(Finding {
            rule: RuleId::Term002,
            severity: Severity::Note,
            object: w.obj.clone(),
            service: Some(svc.key.clone()),
            caveats: Vec::new(),
            message: format!(
                "no preStop delay behind ClusterIP Service {}: the container is signalled as soon as the pod terminates, while kube-proxy on each node may still route new connections to it for a moment",
                svc.key
            ),
            fix: "preStop sleep 5 s (native `sleep: {seconds: 5}` or exec `sleep 5`)".to_string(),
            figures: BTreeMap::new(),
        });
    }
}

/// GIP-TERM-001: a container's preStop sleep that does not fit in the grace period.
pub(super) fn prestop_beyond_grace(w: &Workload, c: &Container, grace: i64) -> Option<Finding> {
    let PreStop::Sleep(s) = container_prestop(c) else {
        return None;
    };
    if secs_i64(s) < grace {
        return None;
    }
    Some(Finding {
        rule: RuleId::Term001,
        severity: Severity::Warning,
        object: w.obj.clone(),
        service: None,
        caveats: Vec::new(),
        message: format!(
            "container {}: preStop sleep {s} s does not fit in terminationGracePeriodSeconds {grace}: the kubelet kills the container when the grace period ends, {} the application could shut down",
            c.name,
            if secs_i64(s) > grace {
                "cutting the hook short before"
            } else {
                "before"
            }
        ),
        fix: format!(
            "terminationGracePeriodSeconds ≥ {} s (preStop + {SHUTDOWN_MARGIN} s for the application's shutdown), or a shorter preStop sleep",
            secs_i64(s) + SHUTDOWN_MARGIN
        ),
        figures: BTreeMap::from([("prestop_s", secs_i64(s)), ("termination_grace_s", grace)]),
    })
}
