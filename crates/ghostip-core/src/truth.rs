//! The truth: what each Service should resolve and route to, from trimmed EndpointSlices and Services.
//!
//! Adapters feed watch events in ([`Truth::apply_slice`], [`Truth::delete_slice`], relists);
//! the store answers what each layer should hold ([`Truth::dns_answers`],
//! [`Truth::lb_backends`]) and reports which services changed, with their change time.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::model::{ChangeTime, PodRef, Protocol, ServiceKey, Target, Time};

/// One address of an EndpointSlice, trimmed to what ghostip needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRecord {
    /// First address of the endpoint (Kubernetes uses only the first one).
    pub ip: IpAddr,
    /// `conditions.ready` (nil means true).
    pub ready: bool,
    /// `conditions.serving` (nil means the value of ready).
    pub serving: bool,
    /// `conditions.terminating` (nil means false).
    pub terminating: bool,
    /// `targetRef` when it names a Pod.
    pub pod: Option<PodRef>,
    /// `nodeName`.
    pub node: Option<String>,
    /// `hostname`, used for per-pod DNS names of headless Services.
    pub hostname: Option<String>,
}

/// A port of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EndpointPort {
    /// Port name (matches the Service port name).
    pub name: Option<String>,
    /// Port number on the endpoint.
    pub port: u16,
    /// Protocol.
    pub protocol: Protocol,
}

/// Address family of a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddressType {
    /// IPv4 addresses.
    IPv4,
    /// IPv6 addresses.
    IPv6,
    /// FQDN addresses (ignored by ghostip).
    Fqdn,
}

/// A trimmed EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceRecord {
    /// Namespace of the slice (and of its Service).
    pub namespace: String,
    /// Name of the slice.
    pub name: String,
    /// The Service it belongs to (`kubernetes.io/service-name` label).
    pub service: String,
    /// Address family.
    pub address_type: AddressType,
    /// Endpoints.
    pub endpoints: Vec<EndpointRecord>,
    /// Ports.
    pub ports: Vec<EndpointPort>,
    /// `endpoints.kubernetes.io/last-change-trigger-time`, when present and parseable.
    pub trigger_time: Option<Time>,
}

impl SliceRecord {
    /// The key of the owning Service.
    pub fn service_key(&self) -> ServiceKey {
        ServiceKey::new(&self.namespace, &self.service)
    }
}

/// A port of a Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicePort {
    /// Port name.
    pub name: Option<String>,
    /// Service port.
    pub port: u16,
    /// Protocol.
    pub protocol: Protocol,
    /// NodePort, if allocated.
    pub node_port: Option<u16>,
}

/// Traffic policy of a Service for one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TrafficPolicy {
    /// Any endpoint in the cluster.
    #[default]
    Cluster,
    /// Only endpoints on the node that received the traffic.
    Local,
}

/// A trimmed Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRecord {
    /// Namespace and name.
    pub key: ServiceKey,
    /// `spec.clusterIPs`, empty for headless Services.
    pub cluster_ips: Vec<IpAddr>,
    /// `clusterIP: None`.
    pub headless: bool,
    /// `spec.type`.
    pub service_type: String,
    /// `spec.publishNotReadyAddresses`.
    pub publish_not_ready: bool,
    /// `spec.internalTrafficPolicy`.
    pub internal_traffic_policy: TrafficPolicy,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: TrafficPolicy,
    /// `spec.ports`.
    pub ports: Vec<ServicePort>,
    /// `spec.selector` is set (slices are managed by the EndpointSlice controller).
    pub has_selector: bool,
    /// Labels, for `-l` selection.
    pub labels: BTreeMap<String, String>,
}

/// A trimmed Pod, for the IP ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    /// Identity.
    pub pod: PodRef,
    /// `status.podIPs`.
    pub ips: Vec<IpAddr>,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// Controller owner, e.g. `ReplicaSet/web-7c9`.
    pub owner_kind: Option<String>,
    /// Controller owner name.
    pub owner_name: Option<String>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Time>,
    /// Last transition of the Ready condition to True.
    pub ready_since: Option<Time>,
    /// `metadata.deletionTimestamp`.
    pub deletion: Option<Time>,
    /// `metadata.deletionGracePeriodSeconds` or `spec.terminationGracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// Longest preStop delay of its containers, when it is a recognizable sleep.
    pub prestop_seconds: Option<u64>,
    /// `spec.hostNetwork`: the IP is the node's, not the pod's.
    pub host_network: bool,
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

/// How a Service's answer changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceChange {
    /// The Service.
    pub service: ServiceKey,
    /// When it changed.
    pub at: ChangeTime,
}

/// The truth store. Pure: times are passed in by the caller.
#[derive(Debug, Default)]
pub struct Truth {
    services: BTreeMap<ServiceKey, ServiceRecord>,
    /// Slices by (namespace, slice name).
    slices: BTreeMap<(String, String), SliceRecord>,
    /// Slice names per service, to recompute projections quickly.
    slices_by_service: BTreeMap<ServiceKey, BTreeSet<String>>,
    relist_slices: Option<HashSet<(String, String)>>,
    relist_services: Option<HashSet<ServiceKey>>,
}

impl Truth {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// All known services.
    pub fn services(&self) -> impl Iterator<Item = &ServiceRecord> {
        self.services.values()
    }

    /// One service.
    pub fn service(&self, key: &ServiceKey) -> Option<&ServiceRecord> {
        self.services.get(key)
    }

    /// Slices of one service.
    pub fn slices_of<'a>(&'a self, key: &ServiceKey) -> impl Iterator<Item = &'a SliceRecord> + 'a {
        let ns = key.namespace.clone();
        self.slices_by_service
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(move |name| self.slices.get(&(ns.clone(), name.clone())))
    }

    /// Number of slices held.
    pub fn slice_count(&self) -> usize {
        self.slices.len()
    }

    /// Adds or replaces a Service. Returns the change when the answer set may differ.
    pub fn apply_service(&mut self, svc: ServiceRecord, received: Time) -> Option<ServiceChange> {
        if let Some(seen) = self.relist_services.as_mut() {
            seen.insert(svc.key.clone());
        }
        let key = svc.key.clone();
        let before = self.dns_answers(&key);
        let before_policy = self
            .services
            .get(&key)
            .map(|s| (s.headless, s.publish_not_ready));
        self.services.insert(key.clone(), svc);
        let after = self.dns_answers(&key);
        let after_policy = self
            .services
            .get(&key)
            .map(|s| (s.headless, s.publish_not_ready));
        (before != after || before_policy != after_policy).then(|| ServiceChange {
            service: key,
            at: ChangeTime::received_at(received),
        })
    }

    /// Removes a Service.
    pub fn delete_service(&mut self, key: &ServiceKey, received: Time) -> Option<ServiceChange> {
        self.services.remove(key).map(|_| ServiceChange {
            service: key.clone(),
            at: ChangeTime::received_at(received),
        })
    }

    /// Adds or replaces a slice. Returns the change of its Service when its endpoints differ.
    pub fn apply_slice(&mut self, slice: SliceRecord, received: Time) -> Option<ServiceChange> {
        let id = (slice.namespace.clone(), slice.name.clone());
        if let Some(seen) = self.relist_slices.as_mut() {
            seen.insert(id.clone());
        }
        let key = slice.service_key();
        let changed = self
            .slices
            .get(&id)
            .is_none_or(|old| old.endpoints != slice.endpoints || old.ports != slice.ports);
        // A slice that moved between services (label edited) leaves the old one.
        let mut moved_from = None;
        if let Some(old) = self.slices.get(&id)
            && old.service != slice.service
        {
            moved_from = Some(old.service_key());
        }
        if let Some(old_key) = moved_from
            && let Some(set) = self.slices_by_service.get_mut(&old_key)
        {
            set.remove(&slice.name);
        }
        let at = ChangeTime {
            t0: slice.trigger_time.unwrap_or(received),
            received,
            from_trigger_annotation: slice.trigger_time.is_some(),
        };
        self.slices_by_service
            .entry(key.clone())
            .or_default()
            .insert(slice.name.clone());
        self.slices.insert(id, slice);
        changed.then_some(ServiceChange { service: key, at })
    }

    /// Removes a slice.
    pub fn delete_slice(
        &mut self,
        namespace: &str,
        name: &str,
        received: Time,
    ) -> Option<ServiceChange> {
        let slice = self
            .slices
            .remove(&(namespace.to_string(), name.to_string()))?;
        let key = slice.service_key();
        if let Some(set) = self.slices_by_service.get_mut(&key) {
            set.remove(name);
            if set.is_empty() {
                self.slices_by_service.remove(&key);
            }
        }
        Some(ServiceChange {
            service: key,
            at: ChangeTime::received_at(received),
        })
    }

    /// Starts a relist of slices: every slice not re-applied before
    /// [`Truth::finish_slice_relist`] is deleted.
    pub fn begin_slice_relist(&mut self) {
        self.relist_slices = Some(HashSet::new());
    }

    /// Ends a slice relist; slices missing from it are deleted (a relist that misses an object means deleted).
    pub fn finish_slice_relist(&mut self, received: Time) -> Vec<ServiceChange> {
        let Some(seen) = self.relist_slices.take() else {
            return Vec::new();
        };
        let gone: Vec<(String, String)> = self
            .slices
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|(ns, name)| self.delete_slice(&ns, &name, received))
            .collect()
    }

    /// Starts a relist of services.
    pub fn begin_service_relist(&mut self) {
        self.relist_services = Some(HashSet::new());
    }

    /// Ends a service relist; services missing from it are deleted.
    pub fn finish_service_relist(&mut self, received: Time) -> Vec<ServiceChange> {
        let Some(seen) = self.relist_services.take() else {
            return Vec::new();
        };
        let gone: Vec<ServiceKey> = self
            .services
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        gone.iter()
            .filter_map(|k| self.delete_service(k, received))
            .collect()
    }

    /// The A/AAAA answers CoreDNS should give for a headless Service:
    /// ready endpoints, or all endpoints with `publishNotReadyAddresses`.
    /// Empty for unknown or non-headless services.
    pub fn dns_answers(&self, key: &ServiceKey) -> BTreeSet<IpAddr> {
        let Some(svc) = self.services.get(key) else {
            return BTreeSet::new();
        };
        if !svc.headless {
            return BTreeSet::new();
        }
        self.slices_of(key)
            .filter(|s| s.address_type != AddressType::Fqdn)
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.ready || svc.publish_not_ready)
            .map(|e| e.ip)
            .collect()
    }

    /// The backends a load balancer on `node` should route `key`'s port `port_name` to:
    /// ready endpoints; serving+terminating ones when none is ready; narrowed to the
    /// node's own endpoints when `local` (traffic policy Local).
    pub fn lb_backends(
        &self,
        key: &ServiceKey,
        port_name: Option<&str>,
        node: Option<&str>,
        local: bool,
    ) -> BTreeSet<Target> {
        let Some(svc) = self.services.get(key) else {
            return BTreeSet::new();
        };
        let mut ready = BTreeSet::new();
        let mut fallback = BTreeSet::new();
        for slice in self
            .slices_of(key)
            .filter(|s| s.address_type != AddressType::Fqdn)
        {
            let Some(port) = slice.ports.iter().find(|p| p.name.as_deref() == port_name) else {
                continue;
            };
            for e in &slice.endpoints {
                if local && e.node.as_deref() != node {
                    continue;
                }
                let t = Target::socket(e.ip, port.port);
                if e.ready || svc.publish_not_ready {
                    ready.insert(t);
                } else if e.serving && e.terminating {
                    fallback.insert(t);
                }
            }
        }
        if ready.is_empty() { fallback } else { ready }
    }

    /// Everything a node's load balancer should route `key` to, over all its ports:
    /// the union of [`Truth::lb_backends`] per port, narrowed to `node`'s endpoints only
    /// when both traffic policies are `Local` (or the internal one is `Local` and the
    /// Service has no external frontends, i.e. type ClusterIP). The set a datapath path
    /// is compared with ([`crate::engine::Engine::set_desired_on_path`]).
    pub fn datapath_backends(&self, key: &ServiceKey, node: Option<&str>) -> BTreeSet<Target> {
        let Some(svc) = self.services.get(key) else {
            return BTreeSet::new();
        };
        if svc.headless {
            return BTreeSet::new();
        }
        let external = svc.service_type == "NodePort" || svc.service_type == "LoadBalancer";
        let local = svc.internal_traffic_policy == TrafficPolicy::Local
            && (!external || svc.external_traffic_policy == TrafficPolicy::Local);
        svc.ports
            .iter()
            .flat_map(|p| self.lb_backends(key, p.name.as_deref(), node, local))
            .collect()
    }

    /// The latest `last-change-trigger-time` among a service's slices, when any has one.
    pub fn last_trigger_time(&self, key: &ServiceKey) -> Option<Time> {
        self.slices_of(key).filter_map(|s| s.trigger_time).max()
    }

    /// The endpoint record for `ip` among a service's slices.
    pub fn endpoint(&self, key: &ServiceKey, ip: IpAddr) -> Option<&EndpointRecord> {
        self.slices_of(key)
            .flat_map(|s| s.endpoints.iter())
            .find(|e| e.ip == ip)
    }
}
