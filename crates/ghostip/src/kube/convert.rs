//! Converts k8s-openapi objects into the core's trimmed records, keeping only what ghostip needs.
//!
//! See [`slice_record`], [`service_record`] and [`pod_record`]. A whole object that cannot be
//! used (no name, no `kubernetes.io/service-name` label) is a [`Malformed`] error the watcher
//! logs and skips; a bad part of a usable object (an unparseable endpoint address, a port out
//! of range) is logged with `tracing::warn!` and left out, so one bad endpoint never hides the
//! rest of its slice.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ghostip_core::model::{PodRef, Protocol, ServiceKey, Time};
use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, PodRecord, ServicePort, ServiceRecord, SliceRecord,
    TrafficPolicy,
};
use k8s_openapi::api::core::v1::{ConfigMap, Container, LifecycleHandler, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use thiserror::Error;
use tracing::{debug, warn};

/// Label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Annotation with the time of the change that triggered the slice update (RFC 3339).
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

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

fn malformed(kind: &'static str, meta: &ObjectMeta, reason: impl Into<String>) -> Malformed {
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

/// Converts an EndpointSlice.
///
/// Conditions default as the API documents them: `ready` nil is true, `serving` nil is the
/// value of `ready`, `terminating` nil is false. Only an endpoint's first address counts.
///
/// # Errors
///
/// [`Malformed`] when the slice has no namespace/name, no `kubernetes.io/service-name` label
/// or an unknown address type.
pub fn slice_record(slice: &EndpointSlice) -> Result<SliceRecord, Malformed> {
    const KIND: &str = "EndpointSlice";
    let meta = &slice.metadata;
    let (namespace, name) = object_key(KIND, meta)?;
    let service = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .filter(|s| !s.is_empty())
        .cloned()
        .ok_or_else(|| malformed(KIND, meta, format!("no {SERVICE_NAME_LABEL} label")))?;
    let address_type = match slice.address_type.as_str() {
        "IPv4" => AddressType::IPv4,
        "IPv6" => AddressType::IPv6,
        "FQDN" => AddressType::Fqdn,
        other => {
            return Err(malformed(
                KIND,
                meta,
                format!("unknown addressType {other:?}"),
            ));
        }
    };
    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for ep in &slice.endpoints {
        let Some(first) = ep.addresses.first() else {
            warn!(%namespace, slice = %name, "Endpoint without addresses skipped.");
            continue;
        };
        if address_type == AddressType::Fqdn {
            // FQDN endpoints are not IPs; ghostip does not follow them.
            continue;
        }
        let ip: IpAddr = match first.parse() {
            Ok(ip) => ip,
            Err(_) => {
                warn!(%namespace, slice = %name, address = %first, "Unparseable endpoint address skipped.");
                continue;
            }
        };
        let conditions = ep.conditions.as_ref();
        let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
        let serving = conditions.and_then(|c| c.serving).unwrap_or(ready);
        let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
        let pod = ep
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .and_then(|r| {
                Some(PodRef {
                    namespace: r.namespace.clone().unwrap_or_else(|| namespace.clone()),
                    name: r.name.clone()?,
                    uid: r.uid.clone().unwrap_or_default(),
                })
            });
        endpoints.push(EndpointRecord {
            ip,
            ready,
            serving,
            terminating,
            pod,
            node: ep.node_name.clone(),
            hostname: ep.hostname.clone(),
        });
    }
    let mut ports = Vec::new();
    for p in slice.ports.iter().flatten() {
        // A port without a number means "all ports" (selector-less slices); nothing to route to.
        let Some(number) = p.port else { continue };
        let Ok(port) = u16::try_from(number) else {
            warn!(%namespace, slice = %name, port = number, "Port out of range skipped.");
            continue;
        };
        let Some(protocol) = protocol(p.protocol.as_deref()) else {
            warn!(%namespace, slice = %name, protocol = ?p.protocol, "Unknown port protocol skipped.");
            continue;
        };
        ports.push(EndpointPort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            port,
            protocol,
        });
    }
    let trigger_time = meta.annotations.as_ref().and_then(|a| a.get(TRIGGER_TIME_ANNOTATION)).and_then(|v| {
        v.parse::<Time>()
            .inspect_err(|e| debug!(%namespace, slice = %name, value = %v, error = %e, "Unparseable trigger time ignored."))
            .ok()
    });
    Ok(SliceRecord {
        namespace,
        name,
        service,
        address_type,
        endpoints,
        ports,
        trigger_time,
    })
}

fn protocol(p: Option<&str>) -> Option<Protocol> {
    match p.unwrap_or("TCP") {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

fn traffic_policy(p: Option<&str>) -> TrafficPolicy {
    match p {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    }
}

/// Converts a Service.
///
/// # Errors
///
/// [`Malformed`] when it has no namespace or name.
pub fn service_record(svc: &Service) -> Result<ServiceRecord, Malformed> {
    const KIND: &str = "Service";
    let meta = &svc.metadata;
    let (namespace, name) = object_key(KIND, meta)?;
    let spec = svc.spec.clone().unwrap_or_default();
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let ips: Vec<String> = match &spec.cluster_ips {
        Some(ips) if !ips.is_empty() => ips.clone(),
        _ => spec.cluster_ip.iter().cloned().collect(),
    };
    let mut cluster_ips = Vec::new();
    for ip in ips
        .iter()
        .filter(|ip| !ip.is_empty() && ip.as_str() != "None")
    {
        match ip.parse::<IpAddr>() {
            Ok(ip) => cluster_ips.push(ip),
            Err(_) => {
                warn!(%namespace, service = %name, cluster_ip = %ip, "Unparseable cluster IP skipped.")
            }
        }
    }
    let mut ports = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Ok(port) = u16::try_from(p.port) else {
            warn!(%namespace, service = %name, port = p.port, "Service port out of range skipped.");
            continue;
        };
        let Some(protocol) = protocol(p.protocol.as_deref()) else {
            warn!(%namespace, service = %name, protocol = ?p.protocol, "Unknown service port protocol skipped.");
            continue;
        };
        ports.push(ServicePort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            port,
            protocol,
            node_port: p.node_port.and_then(|n| u16::try_from(n).ok()),
        });
    }
    Ok(ServiceRecord {
        key: ServiceKey::new(namespace, name),
        cluster_ips,
        headless,
        service_type: spec
            .type_
            .clone()
            .unwrap_or_else(|| "ClusterIP".to_string()),
        publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
        internal_traffic_policy: traffic_policy(spec.internal_traffic_policy.as_deref()),
        external_traffic_policy: traffic_policy(spec.external_traffic_policy.as_deref()),
        ports,
        has_selector: spec.selector.as_ref().is_some_and(|s| !s.is_empty()),
        labels: meta.labels.clone().unwrap_or_default(),
    })
}

/// Converts a Pod.
///
/// # Errors
///
/// [`Malformed`] when it has no namespace or name.
pub fn pod_record(pod: &Pod) -> Result<PodRecord, Malformed> {
    const KIND: &str = "Pod";
    let meta = &pod.metadata;
    let (namespace, name) = object_key(KIND, meta)?;
    let status = pod.status.as_ref();
    let spec = pod.spec.as_ref();
    let raw_ips: Vec<&str> = match status.and_then(|s| s.pod_ips.as_ref()) {
        Some(ips) if !ips.is_empty() => ips.iter().map(|p| p.ip.as_str()).collect(),
        _ => status
            .and_then(|s| s.pod_ip.as_deref())
            .into_iter()
            .collect(),
    };
    let mut ips = Vec::new();
    for ip in raw_ips.into_iter().filter(|ip| !ip.is_empty()) {
        match ip.parse::<IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => warn!(%namespace, pod = %name, pod_ip = %ip, "Unparseable pod IP skipped."),
        }
    }
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

/// The `Corefile` key of a ConfigMap.
pub fn corefile_text(cm: &ConfigMap) -> Option<&str> {
    cm.data
        .as_ref()
        .and_then(|d: &BTreeMap<String, String>| d.get(super::COREFILE_KEY))
        .map(String::as_str)
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn ts(s: &str) -> Time {
        s.parse().unwrap()
    }

    #[test]
    fn slice_conditions_default_as_documented() {
        let s = slice(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "namespace": "shop", "name": "web-abc12",
                "labels": {"kubernetes.io/service-name": "web"},
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-30T05:00:00Z"},
                "managedFields": [{"manager": "kube-controller-manager"}]
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.5", "10.244.1.99"], "nodeName": "node-1", "hostname": "web-0",
                 "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "shop", "uid": "u-0"}},
                {"addresses": ["10.244.2.6"], "conditions": {"ready": false}},
                {"addresses": ["10.244.3.7"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["not-an-ip"]},
                {"addresses": []}
            ],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"},
                      {"name": "all"}, {"port": 70000}]
        }));
        let r = slice_record(&s).unwrap();
        assert_eq!(r.service, "web");
        assert_eq!(r.service_key(), ServiceKey::new("shop", "web"));
        assert_eq!(r.trigger_time, Some(ts("2026-11-30T05:00:00Z")));
        assert_eq!(
            r.endpoints.len(),
            3,
            "the bad address and the empty endpoint are skipped"
        );
        let e0 = &r.endpoints[0];
        assert_eq!(
            e0.ip,
            "10.244.1.5".parse::<IpAddr>().unwrap(),
            "first address only"
        );
        assert!(e0.ready && e0.serving && !e0.terminating);
        assert_eq!(
            e0.pod,
            Some(PodRef {
                namespace: "shop".into(),
                name: "web-0".into(),
                uid: "u-0".into()
            })
        );
        assert_eq!(e0.node.as_deref(), Some("node-1"));
        assert_eq!(e0.hostname.as_deref(), Some("web-0"));
        let e1 = &r.endpoints[1];
        assert!(
            !e1.ready && !e1.serving && !e1.terminating,
            "serving nil = ready"
        );
        let e2 = &r.endpoints[2];
        assert!(!e2.ready && e2.serving && e2.terminating);
        assert_eq!(
            r.ports,
            vec![
                EndpointPort {
                    name: Some("http".into()),
                    port: 8080,
                    protocol: Protocol::Tcp
                },
                EndpointPort {
                    name: None,
                    port: 53,
                    protocol: Protocol::Udp
                },
            ]
        );
    }

    #[test]
    fn slices_without_service_label_or_with_odd_types_are_malformed() {
        let s = slice(
            json!({"metadata": {"namespace": "a", "name": "b"}, "addressType": "IPv4", "endpoints": []}),
        );
        let err = slice_record(&s).unwrap_err();
        assert_eq!(err.name, "b");
        assert!(
            err.to_string().contains("kubernetes.io/service-name"),
            "{err}"
        );
        let s = slice(
            json!({"metadata": {"namespace": "a", "name": "b", "labels": {SERVICE_NAME_LABEL: "x"}},
                             "addressType": "Carrier-Pigeon", "endpoints": []}),
        );
        assert!(slice_record(&s).is_err());
        let s = slice(
            json!({"metadata": {"name": "b", "labels": {SERVICE_NAME_LABEL: "x"}}, "addressType": "IPv4"}),
        );
        assert!(slice_record(&s).is_err(), "no namespace");
    }

    #[test]
    fn null_endpoints_fqdn_and_bad_trigger_time() {
        // The shape of a real watch event: "endpoints": null.
        let s = slice(
            json!({"metadata": {"namespace": "default", "name": "kubernetes",
                                          "labels": {SERVICE_NAME_LABEL: "kubernetes"},
                                          "annotations": {TRIGGER_TIME_ANNOTATION: "yesterday"}},
                             "addressType": "IPv4", "endpoints": null, "ports": null}),
        );
        let r = slice_record(&s).unwrap();
        assert!(r.endpoints.is_empty() && r.ports.is_empty());
        assert_eq!(r.trigger_time, None);
        let s = slice(
            json!({"metadata": {"namespace": "a", "name": "ext", "labels": {SERVICE_NAME_LABEL: "ext"}},
                             "addressType": "FQDN", "endpoints": [{"addresses": ["example.org"]}]}),
        );
        let r = slice_record(&s).unwrap();
        assert_eq!(r.address_type, AddressType::Fqdn);
        assert!(r.endpoints.is_empty());
    }

    #[test]
    fn services() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"namespace": "shop", "name": "web", "labels": {"app": "web"}},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "publishNotReadyAddresses": true,
                     "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
        }))
        .unwrap();
        let r = service_record(&svc).unwrap();
        assert!(r.headless && r.publish_not_ready && r.has_selector);
        assert!(r.cluster_ips.is_empty());
        assert_eq!(r.service_type, "ClusterIP");
        assert_eq!(
            r.ports,
            vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Protocol::Tcp,
                node_port: None
            }]
        );
        assert_eq!(r.labels.get("app").map(String::as_str), Some("web"));

        let svc: Service = serde_json::from_value(json!({
            "metadata": {"namespace": "kube-system", "name": "kube-dns"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a", "bogus"],
                     "internalTrafficPolicy": "Local", "externalTrafficPolicy": "Local",
                     "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]}
        }))
        .unwrap();
        let r = service_record(&svc).unwrap();
        assert!(!r.headless && !r.has_selector);
        assert_eq!(r.cluster_ips.len(), 2, "the bogus IP is skipped");
        assert_eq!(r.internal_traffic_policy, TrafficPolicy::Local);
        assert_eq!(r.external_traffic_policy, TrafficPolicy::Local);
        assert_eq!(r.ports[0].node_port, Some(30053));
        assert_eq!(r.service_type, "NodePort");
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

    #[test]
    fn corefile_key() {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"namespace": "kube-system", "name": "coredns"},
            "data": {"Corefile": ".:53 {\n}\n", "NodeHosts": "x"}
        }))
        .unwrap();
        assert_eq!(corefile_text(&cm), Some(".:53 {\n}\n"));
        assert_eq!(corefile_text(&ConfigMap::default()), None);
    }
}
