//! Converts k8s-openapi objects into the core's trimmed records, keeping only what ghostip needs.
//!
//! See [`slice_record`], [`service_record`] and [`pod_record`]. A whole object that cannot be
//! used (no name, no `kubernetes.io/service-name` label) is a [`Malformed`] error the watcher
//! logs and skips; a bad part of a usable object (an unparseable endpoint address, a port out
//! of range) is logged with `tracing::warn!` and left out, so one bad endpoint never hides the
//! rest of its slice.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ghostip_analysis::pod::{Malformed, malformed, object_key, unparseable_pod_ips};
use ghostip_core::model::{PodRef, Protocol, ServiceKey, Time};
use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, PodRecord, ServicePort, ServiceRecord, SliceRecord,
    TrafficPolicy,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tracing::{debug, warn};

/// Label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Annotation with the time of the change that triggered the slice update (RFC 3339).
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

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

/// Converts a Pod ([`ghostip_analysis::pod::pod_record`]), logging each IP it leaves out
/// because it does not parse.
///
/// # Errors
///
/// [`Malformed`] when it has no namespace or name.
pub fn pod_record(pod: &Pod) -> Result<PodRecord, Malformed> {
    let rec = ghostip_analysis::pod::pod_record(pod)?;
    for ip in unparseable_pod_ips(pod) {
        warn!(namespace = %rec.pod.namespace, pod = %rec.pod.name, pod_ip = %ip, "Unparseable pod IP skipped.");
    }
    Ok(rec)
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
