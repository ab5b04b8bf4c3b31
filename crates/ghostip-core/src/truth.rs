//! The truth: what each Service should resolve and route to, from trimmed EndpointSlices and Services.
//!
//! Adapters feed watch events in ([`Truth::apply_slice`], [`Truth::delete_slice`], relists);
//! the store answers what each layer should hold ([`Truth::dns_answers`],
//! [`Truth::lb_backends`]) and reports which services changed, with their change time.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

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

/// An endpoint as the store keeps it: 56 bytes and no allocation of its own instead of
/// five strings, because a large cluster has 100 k+ of them.
///
/// The pod's namespace and the node name are shared between endpoints (one interned
/// [`Place`] per namespace and node), a UUID pod UID is kept as 16 bytes, the pod name is a
/// span of its slice's name buffer (so [`StoredSlice::pod`] and [`StoredSlice::record`]
/// answer for it), and the rare parts (a UID that is not a UUID, a hostname) live in a
/// separate box that most endpoints do not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    ip: IpAddr,
    flags: u8,
    /// The pod UID when it is a canonical UUID (flag `UUID`).
    uuid: [u8; 16],
    place: Arc<Place>,
    /// Where the pod's name is in its slice's [`StoredSlice::pod_names`] (flag `POD`).
    pod_name_at: u32,
    pod_name_len: u16,
    rare: Option<Box<Rare>>,
}

const READY: u8 = 1;
const SERVING: u8 = 2;
const TERMINATING: u8 = 4;
const UUID: u8 = 8;
/// The endpoint has a pod (`targetRef`).
const POD: u8 = 16;

/// The pod's namespace and the endpoint's node, shared by every endpoint with both.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Place {
    namespace: Option<Box<str>>,
    node: Option<Box<str>>,
}

/// What few endpoints have.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rare {
    /// A pod UID that is not a canonical UUID.
    uid: Option<Box<str>>,
    hostname: Option<Box<str>>,
    /// A pod name too long for the slice's name buffer (longer than Kubernetes allows).
    pod_name: Option<Box<str>>,
}

/// A Kubernetes UID: 16 bytes when it is a canonical (lowercase) UUID, as the API gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Uid {
    Uuid(u128),
    Other(Box<str>),
}

impl Uid {
    fn new(s: &str) -> Self {
        Self::parse_uuid(s).map_or_else(|| Uid::Other(s.into()), Uid::Uuid)
    }

    fn parse_uuid(s: &str) -> Option<u128> {
        let b = s.as_bytes();
        if b.len() != 36 {
            return None;
        }
        let mut v: u128 = 0;
        for (i, c) in b.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if *c != b'-' {
                    return None;
                }
                continue;
            }
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            v = (v << 4) | u128::from(d);
        }
        Some(v)
    }

    fn text(&self) -> String {
        match self {
            Uid::Other(s) => s.to_string(),
            Uid::Uuid(v) => {
                let h = format!("{v:032x}");
                format!(
                    "{}-{}-{}-{}-{}",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                )
            }
        }
    }
}

impl Endpoint {
    /// First address of the endpoint.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// `conditions.ready`.
    pub fn ready(&self) -> bool {
        self.flags & READY != 0
    }

    /// `conditions.serving`.
    pub fn serving(&self) -> bool {
        self.flags & SERVING != 0
    }

    /// `conditions.terminating`.
    pub fn terminating(&self) -> bool {
        self.flags & TERMINATING != 0
    }

    /// `nodeName`.
    pub fn node(&self) -> Option<&str> {
        self.place.node.as_deref()
    }

    /// `hostname`.
    pub fn hostname(&self) -> Option<&str> {
        self.rare.as_ref()?.hostname.as_deref()
    }
}

/// Namespace and node pairs shared by every endpoint that mentions them.
#[derive(Debug, Default)]
struct Names(HashSet<Arc<Place>>);

impl Names {
    fn place(&mut self, namespace: Option<&str>, node: Option<&str>) -> Arc<Place> {
        let place = Place {
            namespace: namespace.map(Box::from),
            node: node.map(Box::from),
        };
        if let Some(a) = self.0.get(&place) {
            return a.clone();
        }
        let a = Arc::new(place);
        self.0.insert(a.clone());
        a
    }

    /// The compact form of `e`; its pod name goes to the end of `pod_names`.
    fn endpoint(&mut self, e: EndpointRecord, pod_names: &mut String) -> Endpoint {
        let mut flags = 0;
        for (on, bit) in [
            (e.ready, READY),
            (e.serving, SERVING),
            (e.terminating, TERMINATING),
        ] {
            if on {
                flags |= bit;
            }
        }
        let mut uuid = [0; 16];
        let mut rare = Rare {
            uid: None,
            hostname: e.hostname.map(String::into_boxed_str),
            pod_name: None,
        };
        let (mut pod_name_at, mut pod_name_len) = (0, 0);
        let namespace = match e.pod {
            Some(p) => {
                flags |= POD;
                match Uid::new(&p.uid) {
                    Uid::Uuid(v) => {
                        uuid = v.to_be_bytes();
                        flags |= UUID;
                    }
                    Uid::Other(s) => rare.uid = Some(s),
                }
                match (u32::try_from(pod_names.len()), u16::try_from(p.name.len())) {
                    (Ok(at), Ok(len)) => {
                        pod_names.push_str(&p.name);
                        (pod_name_at, pod_name_len) = (at, len);
                    }
                    _ => rare.pod_name = Some(p.name.into_boxed_str()),
                }
                Some(p.namespace)
            }
            None => None,
        };
        Endpoint {
            ip: e.ip,
            flags,
            uuid,
            place: self.place(namespace.as_deref(), e.node.as_deref()),
            pod_name_at,
            pod_name_len,
            rare: (rare.uid.is_some() || rare.hostname.is_some() || rare.pod_name.is_some())
                .then(|| Box::new(rare)),
        }
    }
}

/// A slice as the store keeps it: a [`SliceRecord`] with compact [`Endpoint`]s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSlice {
    /// Namespace of the slice (and of its Service).
    pub namespace: String,
    /// Name of the slice.
    pub name: String,
    /// The Service it belongs to.
    pub service: String,
    /// Address family.
    pub address_type: AddressType,
    /// Endpoints.
    pub endpoints: Vec<Endpoint>,
    /// The pod names of the endpoints, one after the other (one allocation per slice
    /// instead of one per endpoint).
    pod_names: Box<str>,
    /// Applied since the last [`Truth::begin_slice_relist`].
    relisted: bool,
    /// Ports.
    pub ports: Vec<EndpointPort>,
    /// `endpoints.kubernetes.io/last-change-trigger-time`, when present and parseable.
    pub trigger_time: Option<Time>,
    /// When ghostip received this version.
    pub received: Time,
}

impl StoredSlice {
    /// The key of the owning Service.
    pub fn service_key(&self) -> ServiceKey {
        ServiceKey::new(&self.namespace, &self.service)
    }

    /// Name of the pod of an endpoint of this slice (`targetRef`), without allocating.
    pub fn pod_name<'a>(&'a self, e: &'a Endpoint) -> Option<&'a str> {
        if e.flags & POD == 0 {
            return None;
        }
        if let Some(name) = e.rare.as_ref().and_then(|r| r.pod_name.as_deref()) {
            return Some(name);
        }
        let at = usize::try_from(e.pod_name_at).ok()?;
        self.pod_names.get(at..at + usize::from(e.pod_name_len))
    }

    /// The pod of an endpoint of this slice (`targetRef`).
    pub fn pod(&self, e: &Endpoint) -> Option<PodRef> {
        let name = self.pod_name(e)?;
        let uid = if e.flags & UUID != 0 {
            Uid::Uuid(u128::from_be_bytes(e.uuid)).text()
        } else {
            e.rare
                .as_ref()
                .and_then(|r| r.uid.as_deref())
                .unwrap_or_default()
                .to_string()
        };
        Some(PodRef {
            namespace: e.place.namespace.as_deref().unwrap_or_default().to_string(),
            name: name.to_string(),
            uid,
        })
    }

    /// The record an endpoint of this slice was stored from.
    pub fn record(&self, e: &Endpoint) -> EndpointRecord {
        EndpointRecord {
            ip: e.ip,
            ready: e.ready(),
            serving: e.serving(),
            terminating: e.terminating(),
            pod: self.pod(e),
            node: e.node().map(str::to_string),
            hostname: e.hostname().map(str::to_string),
        }
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

/// How long before ghostip received an EndpointSlice write its trigger time may lie and
/// still be taken as t0 ([`ChangeTime::bounded`]).
pub const DEFAULT_MAX_TRIGGER_LEAD: Duration = Duration::from_secs(5);

/// The truth store. Pure: times are passed in by the caller.
#[derive(Debug)]
pub struct Truth {
    /// Services, boxed: a B-tree node holds eleven entries and is mostly half full, so
    /// small entries keep its empty room small.
    services: BTreeMap<ServiceKey, Box<StoredService>>,
    /// Slices by namespace, then slice name (looked up by `&str`, no key built per lookup).
    slices: BTreeMap<Box<str>, BTreeMap<Box<str>, Box<StoredSlice>>>,
    names: Names,
    /// Slice names per service (one or two for most), to recompute projections quickly.
    slices_by_service: BTreeMap<ServiceKey, Vec<Box<str>>>,
    /// A slice relist is running: slices not `relisted` when it ends are gone. (A mark
    /// per object, not a set of keys: at 20 000 slices the set was 3 MiB at the peak.)
    relisting_slices: bool,
    relisting_services: bool,
    /// See [`Truth::set_max_trigger_lead`].
    max_trigger_lead: Duration,
}

impl Default for Truth {
    fn default() -> Self {
        Self {
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            names: Names::default(),
            slices_by_service: BTreeMap::new(),
            relisting_slices: false,
            relisting_services: false,
            max_trigger_lead: DEFAULT_MAX_TRIGGER_LEAD,
        }
    }
}

/// A Service as the store keeps it.
#[derive(Debug)]
struct StoredService {
    record: ServiceRecord,
    /// Applied since the last [`Truth::begin_service_relist`].
    relisted: bool,
}

impl std::ops::Deref for StoredService {
    type Target = ServiceRecord;

    fn deref(&self) -> &ServiceRecord {
        &self.record
    }
}

impl Truth {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long before its receive time the trigger time of a slice write may lie and still
    /// be its t0 (default [`DEFAULT_MAX_TRIGGER_LEAD`]); see [`ChangeTime::bounded`].
    pub fn set_max_trigger_lead(&mut self, lead: Duration) {
        self.max_trigger_lead = lead;
    }

    /// All known services.
    pub fn services(&self) -> impl Iterator<Item = &ServiceRecord> {
        self.services.values().map(|s| &s.record)
    }

    /// Number of Services held.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    /// One service.
    pub fn service(&self, key: &ServiceKey) -> Option<&ServiceRecord> {
        self.services.get(key).map(|s| &s.record)
    }

    /// Slices of one service.
    pub fn slices_of<'a>(&'a self, key: &ServiceKey) -> impl Iterator<Item = &'a StoredSlice> + 'a {
        let in_namespace = self.slices.get(key.namespace.as_str());
        self.slices_by_service
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(move |name| in_namespace?.get(name).map(|s| &**s))
    }

    /// One slice by namespace and name.
    pub fn slice(&self, namespace: &str, name: &str) -> Option<&StoredSlice> {
        self.slices.get(namespace)?.get(name).map(|s| &**s)
    }

    /// Number of slices held.
    pub fn slice_count(&self) -> usize {
        self.slices.values().map(BTreeMap::len).sum()
    }

    fn add_slice_name(&mut self, key: ServiceKey, name: &str) {
        let names = self.slices_by_service.entry(key).or_default();
        if let Err(at) = names.binary_search_by(|n| (**n).cmp(name)) {
            names.insert(at, name.into());
            names.shrink_to_fit();
        }
    }

    fn remove_slice_name(&mut self, key: &ServiceKey, name: &str) {
        if let Some(names) = self.slices_by_service.get_mut(key) {
            names.retain(|n| &**n != name);
            if names.is_empty() {
                self.slices_by_service.remove(key);
            }
        }
    }

    /// Adds or replaces a Service. Returns the change when the answer set may differ.
    pub fn apply_service(&mut self, svc: ServiceRecord, received: Time) -> Option<ServiceChange> {
        let key = svc.key.clone();
        let before = self.dns_answers(&key);
        let before_policy = self
            .services
            .get(&key)
            .map(|s| (s.headless, s.publish_not_ready));
        self.services.insert(
            key.clone(),
            Box::new(StoredService {
                record: svc,
                relisted: true,
            }),
        );
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

    /// Adds or replaces a slice. Returns the change of its Service when its endpoints differ,
    /// and of the Service it left when its `kubernetes.io/service-name` label was edited.
    ///
    /// The change time is the slice's trigger time bounded by what ghostip observed
    /// ([`ChangeTime::bounded`]): for a write that replaces a version ghostip holds, not
    /// before that version was received and not more than the maximum lead before this
    /// one was; a new slice keeps its trigger time.
    pub fn apply_slice(&mut self, slice: SliceRecord, received: Time) -> Vec<ServiceChange> {
        // Not `into_iter().map().collect()`: that reuses the records' allocation in place,
        // which keeps twice the room the smaller stored endpoints need.
        let mut endpoints = Vec::with_capacity(slice.endpoints.len());
        let mut pod_names = String::new();
        endpoints.extend(
            slice
                .endpoints
                .into_iter()
                .map(|e| self.names.endpoint(e, &mut pod_names)),
        );
        let slice = StoredSlice {
            endpoints,
            pod_names: pod_names.into_boxed_str(),
            namespace: slice.namespace,
            name: slice.name,
            service: slice.service,
            address_type: slice.address_type,
            ports: slice.ports,
            trigger_time: slice.trigger_time,
            received,
            relisted: true,
        };
        let key = slice.service_key();
        let at = match self.slice(&slice.namespace, &slice.name) {
            Some(old) => ChangeTime::bounded(
                slice.trigger_time,
                received,
                Some(old.received),
                self.max_trigger_lead,
            ),
            None => ChangeTime::bounded(slice.trigger_time, received, None, Duration::MAX),
        };
        let mut changes = Vec::new();
        let changed = match self.slice(&slice.namespace, &slice.name) {
            None => true,
            Some(old) if old.service != slice.service => {
                // Moved between services: it leaves the old one, which changes too.
                let old_key = old.service_key();
                let had_endpoints = !old.endpoints.is_empty();
                self.remove_slice_name(&old_key, &slice.name);
                if had_endpoints {
                    changes.push(ServiceChange {
                        service: old_key,
                        at,
                    });
                }
                true
            }
            Some(old) => {
                old.endpoints != slice.endpoints
                    || old.pod_names != slice.pod_names
                    || old.ports != slice.ports
            }
        };
        self.add_slice_name(key.clone(), &slice.name);
        self.slices
            .entry(slice.namespace.as_str().into())
            .or_default()
            .insert(slice.name.as_str().into(), Box::new(slice));
        if changed {
            changes.push(ServiceChange { service: key, at });
        }
        changes
    }

    /// Removes a slice.
    pub fn delete_slice(
        &mut self,
        namespace: &str,
        name: &str,
        received: Time,
    ) -> Option<ServiceChange> {
        let in_namespace = self.slices.get_mut(namespace)?;
        let slice = in_namespace.remove(name)?;
        if in_namespace.is_empty() {
            self.slices.remove(namespace);
        }
        let key = slice.service_key();
        self.remove_slice_name(&key, name);
        Some(ServiceChange {
            service: key,
            at: ChangeTime::received_at(received),
        })
    }

    /// Starts a relist of slices: every slice not re-applied before
    /// [`Truth::finish_slice_relist`] is deleted.
    pub fn begin_slice_relist(&mut self) {
        for slice in self.slices.values_mut().flat_map(BTreeMap::values_mut) {
            slice.relisted = false;
        }
        self.relisting_slices = true;
    }

    /// Ends a slice relist; slices missing from it are deleted (a relist that misses an object means deleted).
    pub fn finish_slice_relist(&mut self, received: Time) -> Vec<ServiceChange> {
        if !std::mem::take(&mut self.relisting_slices) {
            return Vec::new();
        }
        let gone: Vec<(String, String)> = self
            .slices
            .iter()
            .flat_map(|(ns, in_namespace)| {
                in_namespace
                    .iter()
                    .filter(|(_, slice)| !slice.relisted)
                    .map(|(name, _)| (ns.to_string(), name.to_string()))
            })
            .collect();
        gone.into_iter()
            .filter_map(|(ns, name)| self.delete_slice(&ns, &name, received))
            .collect()
    }

    /// Starts a relist of services.
    pub fn begin_service_relist(&mut self) {
        for svc in self.services.values_mut() {
            svc.relisted = false;
        }
        self.relisting_services = true;
    }

    /// Ends a service relist; services missing from it are deleted.
    pub fn finish_service_relist(&mut self, received: Time) -> Vec<ServiceChange> {
        if !std::mem::take(&mut self.relisting_services) {
            return Vec::new();
        }
        let gone: Vec<ServiceKey> = self
            .services
            .iter()
            .filter(|(_, svc)| !svc.relisted)
            .map(|(k, _)| k.clone())
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
            .filter(|e| e.ready() || svc.publish_not_ready)
            .map(Endpoint::ip)
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
                if local && e.node() != node {
                    continue;
                }
                let t = Target::socket(e.ip, port.port);
                if e.ready() || svc.publish_not_ready {
                    ready.insert(t);
                } else if e.serving() && e.terminating() {
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
    pub fn endpoint(&self, key: &ServiceKey, ip: IpAddr) -> Option<&Endpoint> {
        self.slices_of(key)
            .flat_map(|s| s.endpoints.iter())
            .find(|e| e.ip == ip)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_stored_endpoint_is_56_bytes() {
        assert_eq!(std::mem::size_of::<Endpoint>(), 56);
    }
    use std::net::Ipv4Addr;

    fn t(s: i64) -> Time {
        Time::from_second(1_800_000_000 + s).unwrap()
    }

    fn endpoint(last: u8, uid: &str) -> EndpointRecord {
        EndpointRecord {
            ip: IpAddr::V4(Ipv4Addr::new(10, 244, 1, last)),
            ready: true,
            serving: true,
            terminating: false,
            pod: Some(PodRef {
                namespace: "shop".into(),
                name: format!("web-{last}"),
                uid: uid.into(),
            }),
            node: Some("node-1".into()),
            hostname: None,
        }
    }

    fn slice(service: &str, endpoints: Vec<EndpointRecord>) -> SliceRecord {
        SliceRecord {
            namespace: "shop".into(),
            name: "web-abcde".into(),
            service: service.into(),
            address_type: AddressType::IPv4,
            endpoints,
            ports: vec![],
            trigger_time: None,
        }
    }

    fn stored_records(truth: &Truth, key: &ServiceKey) -> Vec<EndpointRecord> {
        truth
            .slices_of(key)
            .flat_map(|s| s.endpoints.iter().map(|e| s.record(e)))
            .collect()
    }

    #[test]
    fn stored_endpoints_give_back_their_records() {
        let records = vec![
            endpoint(1, "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"),
            // Not canonical UUIDs: kept as text.
            endpoint(2, "0F1E2D3C-4B5A-4968-8776-A5B4C3D2E1F0"),
            endpoint(3, "uid-3"),
            EndpointRecord {
                pod: None,
                node: None,
                hostname: Some("web-4".into()),
                ..endpoint(4, "")
            },
        ];
        let mut truth = Truth::new();
        truth.apply_slice(slice("web", records.clone()), t(0));
        let key = ServiceKey::new("shop", "web");
        assert_eq!(stored_records(&truth, &key), records);
        // No room kept from the (larger) records.
        for s in truth.slices_of(&key) {
            assert_eq!(s.endpoints.capacity(), s.endpoints.len());
        }
        let e = truth.endpoint(&key, records[0].ip).unwrap();
        let s = truth.slices_of(&key).next().unwrap();
        assert_eq!(s.pod_name(e), Some("web-1"));
        assert_eq!(e.node(), Some("node-1"));
    }

    #[test]
    fn pod_names_round_trip_and_a_rename_is_a_change() {
        let named = |names: &[&str]| -> Vec<EndpointRecord> {
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut e = endpoint(u8::try_from(i).unwrap() + 1, "u");
                    if let Some(p) = e.pod.as_mut() {
                        p.name = (*name).to_string();
                    }
                    e
                })
                .collect()
        };
        let long = "p".repeat(usize::from(u16::MAX) + 1);
        let records = named(&["web-a", "", &long, "web-b"]);
        let mut truth = Truth::new();
        assert_eq!(
            truth.apply_slice(slice("web", records.clone()), t(0)).len(),
            1
        );
        let key = ServiceKey::new("shop", "web");
        assert_eq!(stored_records(&truth, &key), records);
        // Same lengths, other names: the endpoints' spans are equal, the slice is not.
        let renamed = named(&["web-c", "", &long, "web-d"]);
        assert_eq!(truth.apply_slice(slice("web", renamed), t(1)).len(), 1);
        assert!(
            truth
                .apply_slice(slice("web", named(&["web-c", "", &long, "web-d"])), t(2))
                .is_empty()
        );
    }

    #[test]
    fn a_slice_moved_between_services_changes_both() {
        let mut truth = Truth::new();
        let e = vec![endpoint(1, "u1")];
        assert_eq!(truth.apply_slice(slice("web", e.clone()), t(0)).len(), 1);
        // Same endpoints, label edited to another service.
        let changes = truth.apply_slice(slice("api", e), t(5));
        let services: Vec<String> = changes.iter().map(|c| c.service.to_string()).collect();
        assert_eq!(services, ["shop/web", "shop/api"]);
        assert_eq!(truth.slices_of(&ServiceKey::new("shop", "web")).count(), 0);
        assert_eq!(truth.slices_of(&ServiceKey::new("shop", "api")).count(), 1);
        // Re-applying the same slice changes nothing.
        let again = slice("api", vec![endpoint(1, "u1")]);
        assert!(truth.apply_slice(again, t(6)).is_empty());
    }

    fn ms(ms: i64) -> Time {
        Time::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    fn with_trigger(endpoints: Vec<EndpointRecord>, trigger: Time) -> SliceRecord {
        SliceRecord {
            trigger_time: Some(trigger),
            ..slice("web", endpoints)
        }
    }

    /// The apiserver-outage case: after the outage, the write that removed an endpoint
    /// carried the trigger time of a Ready flap 34.7 s earlier. The relist had shown the
    /// endpoint serving after that, and the trigger is far before the write: t0 is the
    /// receive time, the trigger time is kept as the correction.
    #[test]
    fn a_trigger_time_before_what_ghostip_saw_is_not_the_change_time() {
        let mut truth = Truth::new();
        let both = vec![endpoint(1, "u1"), endpoint(2, "u2")];
        truth.apply_slice(with_trigger(both.clone(), ms(-600_000)), ms(-600_000));
        // The relist after the outage: the same version, received again.
        assert!(
            truth
                .apply_slice(with_trigger(both, ms(-600_000)), ms(-20_000))
                .is_empty()
        );
        let flap = ms(-34_700);
        let changes = truth.apply_slice(with_trigger(vec![endpoint(2, "u2")], flap), ms(0));
        let at = changes[0].at;
        assert_eq!(at.t0, ms(0));
        assert_eq!(at.received, ms(0));
        assert!(!at.from_trigger_annotation);
        assert_eq!(at.trigger(), Some(flap));
        let c = at.corrected.unwrap();
        assert_eq!(c.trigger, flap);
        assert_eq!(
            c.reason,
            crate::model::T0CorrectionReason::BeforeLastSeen {
                last_seen: ms(-20_000)
            }
        );
        // Without the relist, the bound on the lead before the write corrects it.
        let mut truth = Truth::new();
        truth.apply_slice(
            with_trigger(vec![endpoint(1, "u1"), endpoint(2, "u2")], ms(-600_000)),
            ms(-600_000),
        );
        let changes = truth.apply_slice(with_trigger(vec![endpoint(2, "u2")], flap), ms(0));
        assert_eq!(changes[0].at.t0, ms(0));
        assert_eq!(
            changes[0].at.corrected.map(|c| c.reason.label()),
            Some("far-before-received")
        );
    }

    /// An ordinary write: the trigger time (a whole second, as condition times are) a
    /// moment before the write, even inside the second of the version before it, is t0.
    #[test]
    fn a_plausible_trigger_time_is_the_change_time() {
        let mut truth = Truth::new();
        truth.apply_slice(
            with_trigger(vec![endpoint(1, "u1"), endpoint(2, "u2")], ms(-3_000)),
            ms(-2_950),
        );
        // The previous version arrived at 10.350 s; the pod's transition, rounded down to
        // 10 s, arrives with the next write at 10.600 s.
        truth.apply_slice(
            with_trigger(
                vec![endpoint(1, "u1"), endpoint(2, "u2"), endpoint(3, "u3")],
                ms(9_000),
            ),
            ms(10_350),
        );
        let changes = truth.apply_slice(
            with_trigger(vec![endpoint(2, "u2"), endpoint(3, "u3")], ms(10_000)),
            ms(10_600),
        );
        let at = changes[0].at;
        assert_eq!(at.t0, ms(10_000));
        assert!(at.from_trigger_annotation);
        assert_eq!(at.corrected, None);
        // A new slice keeps its trigger time however old.
        let mut truth = Truth::new();
        let changes =
            truth.apply_slice(with_trigger(vec![endpoint(1, "u1")], ms(-3_600_000)), ms(0));
        assert_eq!(changes[0].at.t0, ms(-3_600_000));
        // A trigger time after the receive time (the API server's clock ahead) is not t0.
        let changes =
            truth.apply_slice(with_trigger(vec![endpoint(2, "u2")], ms(1_500)), ms(1_000));
        assert_eq!(changes[0].at.t0, ms(1_000));
        assert_eq!(
            changes[0].at.corrected.map(|c| c.reason.label()),
            Some("after-received")
        );
        // The lead bound is a setting.
        let mut truth = Truth::new();
        truth.set_max_trigger_lead(Duration::from_secs(60));
        truth.apply_slice(
            with_trigger(vec![endpoint(1, "u1")], ms(-600_000)),
            ms(-600_000),
        );
        let changes = truth.apply_slice(with_trigger(vec![endpoint(2, "u2")], ms(-34_700)), ms(0));
        assert_eq!(changes[0].at.t0, ms(-34_700));
    }
}
