//! Truth records with every field a test does not care about left empty, to build on with
//! struct update syntax.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ghostip_core::truth::{PodRecord, ServiceRecord};
use ghostip_core::{PodRef, ServiceKey};

/// A Pod record with only its identity and IPs: no node, owner, times, grace period or
/// labels, not on the host network.
pub fn pod_record(pod: PodRef, ips: Vec<IpAddr>) -> PodRecord {
    PodRecord {
        pod,
        ips,
        node: None,
        owner_kind: None,
        owner_name: None,
        created: None,
        ready_since: None,
        deletion: None,
        grace_period_seconds: None,
        prestop_seconds: None,
        host_network: false,
        labels: BTreeMap::new(),
    }
}

/// A headless ClusterIP Service with a selector: no cluster IPs, ports or labels, traffic
/// policies `Cluster`, not publishing not-ready addresses.
pub fn headless_service(key: ServiceKey) -> ServiceRecord {
    ServiceRecord {
        key,
        cluster_ips: Vec::new(),
        headless: true,
        service_type: "ClusterIP".into(),
        publish_not_ready: false,
        internal_traffic_policy: Default::default(),
        external_traffic_policy: Default::default(),
        ports: Vec::new(),
        has_selector: true,
        labels: BTreeMap::new(),
    }
}
