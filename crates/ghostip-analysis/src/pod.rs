//! Converts a Pod object into the core's trimmed [`PodRecord`], and reads preStop sleeps.
//!
//! The watcher (`ghostip`'s `kube/convert.rs`, which logs the IPs left out) and the
//! truth-history parser ([`crate::explain::TruthHistory`]) share it; audit reads preStop
//! hooks with [`prestop_seconds`].

use std::net::IpAddr;

use ghostip_core::model::PodRef;
use ghostip_core::truth::PodRecord;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use thiserror::Error;

/// An object ghostip cannot use at all.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("skipping {kind} {namespace}/{name}: {reason}")]
pub struct Malformed {
    /// Resource kind.
    pub kind: &'static str,
    /// Namespace (may be empty when missing).
    pub namespace: String,
    /// Name (may be empty when missing).
    pub name: String,
    /// What is wrong.
    pub reason: String,
}

/// A [`Malformed`] naming the object of `meta` (empty namespace or name when missing).
pub fn malformed(kind: &'static str, meta: &ObjectMeta, reason: impl Into<String>) -> Malformed {
    Malformed {
        kind,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        reason: reason.into(),
    }
}

/// Namespace and name, both required.
pub fn object_key(kind: &'static str, meta: &ObjectMeta) -> Result<(String, String), Malformed> {
    match (meta.namespace.as_deref(), meta.name.as_deref()) {
        (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(malformed(kind, meta, "missing namespace or name")),
    }
}

/// The IP texts of a Pod: `status.podIPs`, else `status.podIP`, empty ones left out.
fn pod_ip_texts(pod: &Pod) -> impl Iterator<Item = &str> {
    let status = pod.status.as_ref();
    let raw_ips: Vec<&str> = match status.and_then(|s| s.pod_ips.as_ref()) {
        Some(ips) if !ips.is_empty() => ips.iter().map(|p| p.ip.as_str()).collect(),
        _ => status
            .and_then(|s| s.pod_ip.as_deref())
            .into_iter()
            .collect(),
    };
    raw_ips.into_iter().filter(|ip| !ip.is_empty())
}

/// The IPs of a Pod that do not parse, which [`pod_record`] leaves out.
pub fn unparseable_pod_ips(pod: &Pod) -> Vec<&str> {
    pod_ip_texts(pod)
        .filter(|ip| ip.parse::<IpAddr>().is_err())
        .collect()
}

/// Converts a Pod.
///
/// # Errors
///
/// [`Malformed`] when it has no namespace or name.
///
/// An IP that does not parse is left out ([`unparseable_pod_ips`] lists them for a caller
/// that logs).
pub fn pod_record(pod: &Pod) -> Result<PodRecord, Malformed> {
    const KIND: &str = "Pod";
    let meta = &pod.metadata;
    let (namespace, name) = object_key(KIND, meta)?;
    let status = pod.status.as_ref();
    let spec = pod.spec.as_ref();
    let ips = pod_ip_texts(pod)
        .filter_map(|ip| ip.parse::<IpAddr>().ok())
        .collect();
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let ready_since = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let prestop_seconds = spec.and_then(|s| {
        let restartable_init = s
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        s.containers
            .iter()
            .chain(restartable_init)
            .filter_map(container_prestop_seconds)
            .max()
    });
    Ok(PodRecord {
        pod: PodRef {
            namespace,
            name,
            uid: meta.uid.clone().unwrap_or_default(),
        },
        ips,
        node: spec.and_then(|s| s.node_name.clone()),
        owner_kind: owner.map(|o| o.kind.clone()),
        owner_name: owner.map(|o| o.name.clone()),
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        ready_since,
        deletion: meta.deletion_timestamp.as_ref().map(|t| t.0),
        grace_period_seconds: meta
            .deletion_grace_period_seconds
            .or_else(|| spec.and_then(|s| s.termination_grace_period_seconds)),
        prestop_seconds,
        host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        labels: meta.labels.clone().unwrap_or_default(),
    })
}

fn container_prestop_seconds(c: &Container) -> Option<u64> {
    c.lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(prestop_seconds)
}

/// The delay a preStop hook adds before the container is signalled, when it is a recognizable
/// sleep: the native `sleep: {seconds: N}` action, `exec: ["sleep", "N"]`, or a shell whose
/// script starts with `sleep N` (`["/bin/sh", "-c", "sleep 5 && nginx -s quit"]`). Anything
/// else (httpGet, tcpSocket, other commands) is `None`: its duration is unknown.
pub fn prestop_seconds(handler: &LifecycleHandler) -> Option<u64> {
    if let Some(sleep) = &handler.sleep {
        return u64::try_from(sleep.seconds).ok();
    }
    handler
        .exec
        .as_ref()
        .and_then(|e| e.command.as_deref())
        .and_then(sleep_command_seconds)
}

/// Seconds slept by a `sleep` command line, directly or as the first step of a shell script.
pub fn sleep_command_seconds(cmd: &[String]) -> Option<u64> {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    match cmd {
        [prog, args @ ..] if base(prog) == "sleep" => sleep_args_seconds(args),
        [prog, flag, script, ..]
            if matches!(base(prog).as_str(), "sh" | "bash" | "ash" | "dash" | "zsh")
                && flag.starts_with('-')
                && flag.contains('c') =>
        {
            script_sleep_seconds(script)
        }
        _ => None,
    }
}

/// `sleep` arguments: GNU sleep sums them, each a number with an optional s/m/h/d suffix.
fn sleep_args_seconds(args: &[String]) -> Option<u64> {
    if args.is_empty() {
        return None;
    }
    let mut total = 0.0f64;
    for a in args {
        let (num, mult) = match a.chars().last()? {
            's' => (&a[..a.len() - 1], 1.0),
            'm' => (&a[..a.len() - 1], 60.0),
            'h' => (&a[..a.len() - 1], 3600.0),
            'd' => (&a[..a.len() - 1], 86400.0),
            _ => (a.as_str(), 1.0),
        };
        let v: f64 = num.parse().ok()?;
        if !v.is_finite() || v < 0.0 {
            return None;
        }
        total += v * mult;
    }
    // Whole seconds, rounding a fractional sleep up: the hook lasts at least that long.
    let secs = total.ceil();
    (secs <= u64::MAX as f64).then_some(secs as u64)
}

/// The leading `sleep N` of a shell script (`sleep 5; nginx -s quit`, `exec sleep 10`).
fn script_sleep_seconds(script: &str) -> Option<u64> {
    let first = script
        .split(['\n', ';', '&', '|'])
        .map(str::trim)
        .find(|s| !s.is_empty())?;
    let words: Vec<String> = first.split_whitespace().map(str::to_string).collect();
    let words = match words.first().map(String::as_str) {
        Some("exec") => &words[1..],
        _ => &words[..],
    };
    match words {
        [prog, args @ ..] if prog.rsplit('/').next() == Some("sleep") => sleep_args_seconds(args),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use ghostip_core::model::Time;
    use serde_json::json;

    fn ts(s: &str) -> Time {
        s.parse().unwrap()
    }

    #[test]
    fn pods() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "namespace": "shop", "name": "web-7c9-abcde", "uid": "uid-1",
                "creationTimestamp": "2026-11-30T04:00:00Z",
                "deletionTimestamp": "2026-11-30T05:00:00Z", "deletionGracePeriodSeconds": 30,
                "labels": {"app": "web"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x"},
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9", "uid": "rs", "controller": true}
                ]
            },
            "spec": {
                "nodeName": "node-2", "terminationGracePeriodSeconds": 60,
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always",
                     "lifecycle": {"preStop": {"sleep": {"seconds": 12}}}},
                    {"name": "init", "lifecycle": {"preStop": {"sleep": {"seconds": 99}}}}
                ],
                "containers": [
                    {"name": "app", "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5 && nginx -s quit"]}}}},
                    {"name": "side", "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": 8080}}}}
                ]
            },
            "status": {
                "podIP": "10.244.2.9",
                "podIPs": [{"ip": "10.244.2.9"}, {"ip": "fd00::9"}, {"ip": "garbage"}],
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T04:00:01Z"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T04:00:09Z"}
                ]
            }
        }))
        .unwrap();
        let r = pod_record(&pod).unwrap();
        assert_eq!(
            r.pod,
            PodRef {
                namespace: "shop".into(),
                name: "web-7c9-abcde".into(),
                uid: "uid-1".into()
            }
        );
        assert_eq!(
            r.ips,
            vec![
                "10.244.2.9".parse::<IpAddr>().unwrap(),
                "fd00::9".parse().unwrap()
            ]
        );
        assert_eq!(
            unparseable_pod_ips(&pod),
            vec!["garbage"],
            "left out, listed"
        );
        assert_eq!(r.node.as_deref(), Some("node-2"));
        assert_eq!(
            (r.owner_kind.as_deref(), r.owner_name.as_deref()),
            (Some("ReplicaSet"), Some("web-7c9"))
        );
        assert_eq!(r.created, Some(ts("2026-11-30T04:00:00Z")));
        assert_eq!(r.ready_since, Some(ts("2026-11-30T04:00:09Z")));
        assert_eq!(r.deletion, Some(ts("2026-11-30T05:00:00Z")));
        assert_eq!(
            r.grace_period_seconds,
            Some(30),
            "deletionGracePeriodSeconds wins"
        );
        assert_eq!(
            r.prestop_seconds,
            Some(12),
            "longest of app (5), side (httpGet) and the sidecar (12)"
        );
        assert!(!r.host_network);

        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "kube-system", "name": "kube-proxy-x"},
            "spec": {"hostNetwork": true, "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "c", "lifecycle": {"preStop": {"httpGet": {"port": 1}}}}]},
            "status": {"podIP": "192.168.1.10",
                       "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T04:00:09Z"}]}
        }))
        .unwrap();
        let r = pod_record(&pod).unwrap();
        assert!(r.host_network);
        assert!(unparseable_pod_ips(&pod).is_empty());
        assert_eq!(r.ips, vec!["192.168.1.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(r.ready_since, None, "not ready");
        assert_eq!(r.prestop_seconds, None, "httpGet has no known duration");
        assert_eq!(r.grace_period_seconds, Some(30));
        assert_eq!(r.pod.uid, "");
        assert!(pod_record(&Pod::default()).is_err());
    }

    #[test]
    fn sleep_commands() {
        let cmd = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(sleep_command_seconds(&cmd(&["sleep", "10"])), Some(10));
        assert_eq!(sleep_command_seconds(&cmd(&["/bin/sleep", "1m"])), Some(60));
        assert_eq!(sleep_command_seconds(&cmd(&["sleep", "0.5"])), Some(1));
        assert_eq!(sleep_command_seconds(&cmd(&["sleep", "1", "2s"])), Some(3));
        assert_eq!(
            sleep_command_seconds(&cmd(&["/bin/sh", "-c", "sleep 15"])),
            Some(15)
        );
        assert_eq!(
            sleep_command_seconds(&cmd(&["sh", "-ec", "exec sleep 7"])),
            Some(7)
        );
        assert_eq!(
            sleep_command_seconds(&cmd(&["bash", "-c", "sleep 5; nginx -s quit"])),
            Some(5)
        );
        assert_eq!(
            sleep_command_seconds(&cmd(&[
                "sh",
                "-c",
                "nginx -s quit; while killall -0 nginx; do sleep 1; done"
            ])),
            None
        );
        assert_eq!(sleep_command_seconds(&cmd(&["/wait-shutdown"])), None);
        assert_eq!(sleep_command_seconds(&cmd(&["sleep", "infinity"])), None);
        assert_eq!(sleep_command_seconds(&cmd(&["sleep"])), None);
        assert_eq!(sleep_command_seconds(&cmd(&["sleep", "-1"])), None);
        assert_eq!(sleep_command_seconds(&[]), None);
    }
}
