//! Compares a node's load-balancer table with the Kubernetes truth: engine observations and a one-shot diff.
//!
//! Every frontend of an [`LbTable`] is mapped to the Service port it serves through an
//! index built from the truth's [`ServiceRecord`]s ([`ServiceIndex`]): cluster IPs and
//! NodePorts by address, external and load-balancer addresses through the service name
//! the dump carries (kube-proxy comments and chain names, Cilium service names).
//!
//! - [`observations`]: one [`Observation`] per Service per datapath path, holding the
//!   backends of all its frontends, so the [`ghostip_core::engine::Engine`] judges a
//!   datapath exactly like a DNS path; compare it with [`desired`] set through
//!   [`ghostip_core::engine::Engine::set_desired_on_path`].
//! - [`diff`]: a snapshot comparison per frontend ([`NodeDiff`]): stale backends, missing
//!   backends, missing frontends and services, frontends of unknown services.
//!
//! Kubernetes semantics come from [`Truth::lb_backends`]: ready endpoints, serving and
//! terminating ones when none is ready, narrowed to the node's own endpoints for traffic
//! policy `Local` (`internalTrafficPolicy` for cluster IPs, `externalTrafficPolicy` for
//! NodePorts, external and load-balancer addresses). Pure: time is passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::truth::{ServiceRecord, TrafficPolicy, Truth};
use ghostip_core::{HeldTarget, Observation, ObservationResult, PathIdx, ServiceKey, Target, Time};
use serde::Serialize;

use crate::model::{Backend, BackendState, Frontend, FrontendKind, LbTable, Protocol, ServiceRef};
use crate::packed::{PackedBackend, PackedTable};
use crate::text::FxMap;

/// Most unknown frontends described in [`NodeDiff::unknown_samples`].
pub const MAX_UNKNOWN_SAMPLES: usize = 16;

/// Which address families a datapath path holds (an `iptables-save` dump is IPv4 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// Both.
    Both,
}

impl Family {
    /// Whether `ip` belongs to this family.
    pub fn contains(self, ip: IpAddr) -> bool {
        match self {
            Family::V4 => ip.is_ipv4(),
            Family::V6 => ip.is_ipv6(),
            Family::Both => true,
        }
    }

    /// The families of a table's frontends (IPv4 for an empty table).
    pub fn of_table(table: &LbTable) -> Family {
        let v4 = table.frontends.iter().any(|f| f.ip.is_ipv4());
        let v6 = table.frontends.iter().any(|f| f.ip.is_ipv6());
        match (v4, v6) {
            (true, true) => Family::Both,
            (false, true) => Family::V6,
            _ => Family::V4,
        }
    }
}

/// A frontend address as the diff reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FrontendAddr {
    /// Address (`0.0.0.0` / `::` for NodePorts on every local address).
    pub ip: IpAddr,
    /// Port.
    pub port: u16,
    /// Protocol.
    pub protocol: Protocol,
    /// Kind of service address.
    pub kind: FrontendKind,
}

impl FrontendAddr {
    fn of(f: &Frontend) -> Self {
        Self {
            ip: f.ip,
            port: f.port,
            protocol: f.protocol,
            kind: f.kind,
        }
    }
}

impl std::fmt::Display for FrontendAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = Target::socket(self.ip, self.port);
        write!(f, "{t}/{} {}", self.protocol, self.kind)
    }
}

/// The Service port a frontend serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMatch<'a> {
    /// The Service.
    pub service: &'a ServiceRecord,
    /// The Service port's name (`None` for an unnamed port).
    pub port_name: Option<&'a str>,
    /// Whether the frontend is reached from outside (NodePort, external, load balancer):
    /// `externalTrafficPolicy` applies; otherwise `internalTrafficPolicy`.
    pub external: bool,
}

/// What [`ServiceIndex::lookup_parts`] needs of a frontend.
#[derive(Clone, Copy, Debug)]
pub struct FrontendParts<'f> {
    /// Address.
    pub ip: IpAddr,
    /// Port.
    pub port: u16,
    /// Protocol.
    pub protocol: Protocol,
    /// Kind of service address.
    pub kind: FrontendKind,
    /// The Service port the dump names, if any.
    pub service: Option<&'f ServiceRef>,
}

/// Frontend → Service port, built once from the truth's Services.
///
/// The Services are listed once, in the truth's order (which is key order), and the maps
/// name a Service port by its position there (`PortAt`, 8 bytes) rather than by a
/// reference and a port name (24 bytes): smaller tables to fill and probe, and a caller
/// that numbers Services ([`for_each_observation`]) gets the number from the lookup
/// instead of from a map of its own. A Service named by the dump (external and
/// load-balancer addresses) is found by a binary search of that list, not through a
/// third map of every Service's name, which only a few hundred frontends need.
#[derive(Debug, Default)]
pub struct ServiceIndex<'a> {
    services: Vec<&'a ServiceRecord>,
    cluster: FxMap<(IpAddr, u16, ghostip_core::Protocol), PortAt>,
    node_ports: FxMap<(u16, ghostip_core::Protocol), PortAt>,
}

/// A Service port of a [`ServiceIndex`]: the Service's position in its list and the
/// port's position in the Service's `ports`.
#[derive(Clone, Copy, Debug)]
struct PortAt {
    service: u32,
    port: u32,
}

const PROTOCOLS: [ghostip_core::Protocol; 3] = [
    ghostip_core::Protocol::Tcp,
    ghostip_core::Protocol::Udp,
    ghostip_core::Protocol::Sctp,
];

impl<'a> ServiceIndex<'a> {
    /// Indexes every non-headless Service of `truth`.
    pub fn new(truth: &'a Truth) -> Self {
        let mut ix = ServiceIndex {
            services: Vec::with_capacity(truth.service_count()),
            ..ServiceIndex::default()
        };
        ix.cluster.reserve(truth.service_count());
        for (service, svc) in (0u32..).zip(truth.services()) {
            ix.services.push(svc);
            if svc.headless {
                continue;
            }
            for (port, p) in (0u32..).zip(&svc.ports) {
                let at = PortAt { service, port };
                for ip in &svc.cluster_ips {
                    ix.cluster.insert((*ip, p.port, p.protocol), at);
                }
                if let Some(np) = p.node_port {
                    ix.node_ports.insert((np, p.protocol), at);
                }
            }
        }
        ix
    }

    /// The Services, in the truth's order (a [`ServiceIndex::position`] is an index
    /// here), once the lookups are done: the maps are freed.
    fn into_services(self) -> Vec<&'a ServiceRecord> {
        self.services
    }

    /// The Service port `f` serves, if the truth knows it.
    pub fn lookup(&self, f: &Frontend) -> Option<PortMatch<'a>> {
        self.lookup_parts(&FrontendParts {
            ip: f.ip,
            port: f.port,
            protocol: f.protocol,
            kind: f.kind,
            service: f.service.as_ref(),
        })
    }

    /// [`ServiceIndex::lookup`] of a frontend given by its parts.
    pub fn lookup_parts(&self, f: &FrontendParts<'_>) -> Option<PortMatch<'a>> {
        let (at, external) = self.find(f)?;
        let svc = *self.services.get(at.service as usize)?;
        let port = svc.ports.get(at.port as usize)?;
        Some(PortMatch {
            service: svc,
            port_name: port.name.as_deref(),
            external,
        })
    }

    /// The position in [`ServiceIndex::into_services`] of the Service `f` serves: what
    /// [`ServiceIndex::lookup_parts`] finds, without reading the Service's record for a
    /// cluster IP or a NodePort.
    fn position(&self, f: &FrontendParts<'_>) -> Option<u32> {
        self.find(f).map(|(at, _)| at.service)
    }

    /// The Service port `f` serves and whether it is reached from outside.
    fn find(&self, f: &FrontendParts<'_>) -> Option<(PortAt, bool)> {
        let protocols: &[ghostip_core::Protocol] = match f.protocol.to_core() {
            Some(p) => &[p][..],
            None => &PROTOCOLS[..],
        };
        let one = |p: ghostip_core::Protocol| protocols.contains(&p);
        if matches!(f.kind, FrontendKind::ClusterIp | FrontendKind::Unknown) {
            for p in protocols {
                if let Some(at) = self.cluster.get(&(f.ip, f.port, *p)) {
                    return Some((*at, false));
                }
            }
        }
        if matches!(f.kind, FrontendKind::NodePort | FrontendKind::Unknown) {
            for p in protocols {
                if let Some(at) = self.node_ports.get(&(f.port, *p)) {
                    return Some((*at, true));
                }
            }
        }
        // External and load-balancer addresses (and anything else the dump names): the
        // list is in key order, (namespace, name).
        let r = f.service?;
        let service = self
            .services
            .binary_search_by(|svc| {
                (svc.key.namespace.as_str(), svc.key.name.as_str())
                    .cmp(&(r.namespace.as_str(), r.name.as_str()))
            })
            .ok()?;
        let svc = *self.services.get(service)?;
        if svc.headless {
            return None;
        }
        let port = svc.ports.iter().position(|p| {
            one(p.protocol)
                && (p.name.as_deref().unwrap_or("") == r.port_name
                    || (r.port_name.is_empty() && svc.ports.len() == 1))
        })?;
        Some((
            PortAt {
                service: u32::try_from(service).ok()?,
                port: u32::try_from(port).ok()?,
            },
            f.kind != FrontendKind::ClusterIp,
        ))
    }
}

/// What `f` must route to (`required`) and what it may route to without being stale
/// (`allowed`, a superset) on `node`.
///
/// For an external frontend with `externalTrafficPolicy: Local`, kube-proxy still sends
/// traffic from pods to every endpoint (its pod-CIDR short-circuit to the cluster-wide
/// chain), so cluster-wide endpoints are allowed and only the node's own are required.
fn expected(
    truth: &Truth,
    m: &PortMatch<'_>,
    node: Option<&str>,
) -> (BTreeSet<Target>, BTreeSet<Target>) {
    let policy = if m.external {
        m.service.external_traffic_policy
    } else {
        m.service.internal_traffic_policy
    };
    let local = policy == TrafficPolicy::Local;
    let required = truth.lb_backends(&m.service.key, m.port_name, node, local);
    let mut allowed = required.clone();
    if local && m.external {
        allowed.extend(truth.lb_backends(&m.service.key, m.port_name, node, false));
    }
    (required, allowed)
}

/// Whether the datapath is only draining `b`: it is not active, and the truth still lists
/// its IP as an endpoint of the service (e.g. Cilium `terminating` while the pod terminates).
fn draining(truth: &Truth, key: &ServiceKey, b: &Backend) -> bool {
    b.state != BackendState::Active && truth.endpoint(key, b.ip).is_some()
}

/// The set a datapath path on `node` should hold for `key` ([`Truth::datapath_backends`]
/// restricted to the path's address family): what to give
/// [`ghostip_core::engine::Engine::set_desired_on_path`].
pub fn desired(
    truth: &Truth,
    key: &ServiceKey,
    node: Option<&str>,
    family: Family,
) -> BTreeSet<Target> {
    truth
        .datapath_backends(key, node)
        .into_iter()
        .filter(|t| family.contains(t.ip))
        .collect()
}

/// The engine's view of one datapath read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatapathObservations {
    /// One per Service the path should serve (an empty set when the dump has none of its
    /// frontends), sorted by service.
    pub observations: Vec<Observation>,
    /// Frontends that map to no Service of the truth.
    pub unknown_frontends: usize,
    /// Backends left out because the datapath only drains them (see [`diff`]).
    pub draining: usize,
}

/// One [`Observation`] per Service for the datapath path `path` read at `at`: the
/// backends of all the Service's frontends (every port and kind) as held targets.
///
/// Every non-headless Service with a cluster IP of the path's family gets one, empty when
/// the dump has none of its frontends: a dump is the whole table, so absence means the
/// path routes nowhere.
pub fn observations(
    table: &LbTable,
    truth: &Truth,
    path: PathIdx,
    family: Family,
    at: Time,
) -> DatapathObservations {
    let index = ServiceIndex::new(truth);
    let mut held: BTreeMap<&ServiceKey, BTreeSet<Target>> = BTreeMap::new();
    for svc in truth.services() {
        if !svc.headless && svc.cluster_ips.iter().any(|ip| family.contains(*ip)) {
            held.insert(&svc.key, BTreeSet::new());
        }
    }
    let mut out = DatapathObservations::default();
    for f in &table.frontends {
        let Some(m) = index.lookup(f) else {
            out.unknown_frontends += 1;
            continue;
        };
        let set = held.entry(&m.service.key).or_default();
        for b in &f.backends {
            if draining(truth, &m.service.key, b) {
                out.draining += 1;
            } else {
                set.insert(b.target());
            }
        }
    }
    out.observations = held
        .into_iter()
        .map(|(key, set)| Observation {
            path,
            service: key.clone(),
            at,
            result: ObservationResult::Held(set.into_iter().map(HeldTarget::new).collect()),
            latency: None,
        })
        .collect();
    out
}

/// What [`for_each_observation`] saw besides the observations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObservationCounts {
    /// Observations made (one per Service).
    pub services: usize,
    /// Frontends that map to no Service of the truth.
    pub unknown_frontends: usize,
    /// Backends left out because the datapath only drains them.
    pub draining: usize,
}

/// [`observations`] of a [`PackedTable`], handed to `emit` one at a time in Service
/// order, so that only one Service's held set exists at once: the same observations
/// as [`observations`] of the same dump. `emit` borrows each one (the same buffers are
/// refilled for the next Service); it clones the ones it keeps.
///
/// Frontends are grouped per Service by a counting sort (4 bytes per frontend), not
/// through a set per Service; a Service's targets are the backends of its frontends,
/// already sorted when it has one frontend. A Service is numbered by its position in
/// the truth (the [`ServiceIndex`] lookup gives it), and the truth lists Services in key
/// order, so walking the numbers in order emits in Service order with no map of numbers
/// and no sort.
pub fn for_each_observation(
    table: &PackedTable,
    truth: &Truth,
    path: PathIdx,
    family: Family,
    at: Time,
    mut emit: impl FnMut(&Observation),
) -> ObservationCounts {
    let index = ServiceIndex::new(truth);
    let mut counts = ObservationCounts::default();
    // Each frontend's Service number (`u32::MAX`: no Service).
    let mut service_of: Vec<u32> = Vec::with_capacity(table.frontends.len());
    for f in &table.frontends {
        let parts = FrontendParts {
            ip: f.ip,
            port: f.port,
            protocol: f.protocol,
            kind: f.kind,
            service: f.service.as_ref(),
        };
        match index.position(&parts) {
            Some(s) => service_of.push(s),
            None => {
                counts.unknown_frontends += 1;
                service_of.push(u32::MAX);
            }
        }
    }
    let services = index.into_services();
    // The frontends grouped by Service (a counting sort, frontends in table order within
    // a Service): `grouped[starts[s]..starts[s + 1]]` are Service `s`'s.
    let mut starts = vec![0u32; services.len() + 1];
    for &s in &service_of {
        if let Some(n) = starts.get_mut(s as usize + 1) {
            *n += 1;
        }
    }
    for i in 1..starts.len() {
        let prev = starts.get(i - 1).copied().unwrap_or(0);
        if let Some(n) = starts.get_mut(i) {
            *n += prev;
        }
    }
    let mut grouped = vec![0u32; starts.last().copied().unwrap_or(0) as usize];
    let mut next = starts.clone();
    for (fi, &s) in service_of.iter().enumerate() {
        if let Some(n) = next.get_mut(s as usize)
            && let Some(slot) = grouped.get_mut(*n as usize)
        {
            *slot = u32::try_from(fi).unwrap_or(u32::MAX);
            *n += 1;
        }
    }
    drop((service_of, next));
    // One observation, refilled for each Service: its name and held set reuse their memory.
    let mut obs = Observation {
        path,
        service: ServiceKey::new("", ""),
        at,
        result: ObservationResult::Held(Vec::new()),
        latency: None,
    };
    for (i, svc) in services.iter().enumerate() {
        let lo = starts.get(i).copied().unwrap_or(0) as usize;
        let hi = starts.get(i + 1).copied().unwrap_or(0) as usize;
        // Every non-headless Service with a cluster IP of the path's family is observed
        // (empty when the dump has none of its frontends), and any other the dump serves.
        if lo == hi && (svc.headless || !svc.cluster_ips.iter().any(|ip| family.contains(*ip))) {
            continue;
        }
        let key = &svc.key;
        let ObservationResult::Held(held) = &mut obs.result else {
            continue;
        };
        held.clear();
        // The first frontend that held anything: its targets are `held[..first]`, made
        // from the packed backends `first_raw`, of which `first_draining` were draining.
        let mut first = 0;
        let mut first_raw: &[PackedBackend] = &[];
        let mut first_draining = 0;
        for f in grouped
            .get(lo..hi)
            .unwrap_or_default()
            .iter()
            .filter_map(|&fi| table.frontends.get(fi as usize))
        {
            let raw = table.backends(f);
            // A NodePort or an external address usually repeats the cluster IP's backends.
            // The same packed backends make the same targets, which would be dropped again
            // below: comparing 8-byte backends skips making and comparing the targets.
            if raw == first_raw {
                counts.draining += first_draining;
                continue;
            }
            let start = held.len();
            let draining_before = counts.draining;
            for b in raw {
                if !b.is_active() && truth.endpoint(key, table.ip(b)).is_some() {
                    counts.draining += 1;
                } else {
                    held.push(HeldTarget {
                        target: table.target(b),
                        ttl: None,
                        last_used: None,
                    });
                }
            }
            if start == 0 {
                first = held.len();
                first_raw = raw;
                first_draining = counts.draining - draining_before;
            } else if held.get(start..) == held.get(..first) {
                held.truncate(start);
            }
        }
        // One frontend's backends come sorted and unique: only a Service whose frontends
        // (ports, NodePorts, external addresses) differ needs the sort.
        if !held.is_sorted_by(|a, b| a.target < b.target) {
            held.sort_unstable_by_key(|h| h.target);
            held.dedup_by_key(|h| h.target);
        }
        counts.services += 1;
        // Field by field: a derived `clone_from` would allocate new strings.
        obs.service.namespace.clone_from(&key.namespace);
        obs.service.name.clone_from(&key.name);
        emit(&obs);
    }
    counts
}

/// Options of [`diff_with`].
#[derive(Clone, Debug, Default)]
pub struct DiffOptions<'a> {
    /// The node the dump was taken on (for traffic policy `Local`); `None` treats the
    /// dump as node-independent (Local policies then expect every endpoint).
    pub node: Option<&'a str>,
    /// When the dump was taken, to compute the time since each service last changed.
    pub now: Option<Time>,
    /// When each service last changed, where the caller knows better than the slices'
    /// `endpoints.kubernetes.io/last-change-trigger-time` annotation.
    pub last_change: Option<&'a BTreeMap<ServiceKey, Time>>,
    /// Families the dump covers; `None`: the families of its frontends.
    pub family: Option<Family>,
}

/// One backend a frontend routes to but should not, or should route to but does not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackendDiff {
    /// The Service.
    pub service: ServiceKey,
    /// The Service port's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_name: Option<String>,
    /// The frontend.
    pub frontend: FrontendAddr,
    /// The backend.
    pub backend: Target,
    /// What the datapath says about it (stale backends only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<BackendState>,
    /// When the truth last changed for this service, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<Time>,
    /// Time from that change to the dump, where both are known.
    #[serde(skip_serializing_if = "Option::is_none", with = "crate::secs")]
    pub since_change: Option<Duration>,
}

/// A cluster-IP frontend of a Service port absent from the dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MissingFrontend {
    /// The Service.
    pub service: ServiceKey,
    /// The Service port's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_name: Option<String>,
    /// The frontend that should exist.
    pub frontend: FrontendAddr,
    /// Backends it should route to.
    pub backends: usize,
    /// When the truth last changed for this service, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<Time>,
    /// Time from that change to the dump.
    #[serde(skip_serializing_if = "Option::is_none", with = "crate::secs")]
    pub since_change: Option<Duration>,
}

/// A Service none of whose cluster-IP frontends is in the dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MissingService {
    /// The Service.
    pub service: ServiceKey,
    /// Its cluster-IP frontends, all absent.
    pub frontends: Vec<MissingFrontend>,
}

/// How one node's datapath differs from the truth.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeDiff {
    /// The node, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Frontends mapped to a Service port and compared.
    pub frontends_checked: usize,
    /// Backends the datapath routes to that the truth no longer has.
    pub stale: Vec<BackendDiff>,
    /// Backends the truth has that the datapath does not route to.
    pub missing: Vec<BackendDiff>,
    /// Services with none of their cluster-IP frontends in the dump.
    pub services_missing: Vec<MissingService>,
    /// Cluster-IP frontends absent while other frontends of their Service are present.
    pub frontends_missing: Vec<MissingFrontend>,
    /// Frontends that map to no Service of the truth (deleted Services, or ones the truth
    /// file does not contain).
    pub unknown_frontends: usize,
    /// The first [`MAX_UNKNOWN_SAMPLES`] of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_samples: Vec<String>,
    /// Non-active backends (IPVS weight 0, Cilium terminating, …) whose IP the truth still
    /// lists as an endpoint: draining, not stale.
    pub draining: usize,
}

impl NodeDiff {
    /// Whether nothing is stale or missing.
    pub fn is_clean(&self) -> bool {
        self.stale.is_empty()
            && self.missing.is_empty()
            && self.services_missing.is_empty()
            && self.frontends_missing.is_empty()
    }

    /// Whether the dump and the truth share nothing: no frontend of the dump belongs to a
    /// Service of the truth, and the truth expects none on this node. Such a diff is clean
    /// only because nothing was compared: the dump does not describe this truth.
    pub fn compared_nothing(&self) -> bool {
        self.frontends_checked == 0
            && self.services_missing.is_empty()
            && self.frontends_missing.is_empty()
    }
}

/// [`diff_with`] with the node and the time of the dump, change times from the slices.
pub fn diff(table: &LbTable, truth: &Truth, node: Option<&str>, now: Option<Time>) -> NodeDiff {
    diff_with(
        table,
        truth,
        &DiffOptions {
            node,
            now,
            ..DiffOptions::default()
        },
    )
}

/// What one Service port should route to on one node, for one side of its traffic policy.
#[derive(Debug, Default)]
struct PortExpect {
    /// Required backends, sorted.
    required: Vec<Target>,
    /// Allowed backends (a superset of `required`), sorted.
    allowed: Vec<Target>,
}

/// Everything a diff needs from the truth for one node, computed once: the frontend index,
/// each Service port's required and allowed backends (for internal and external traffic),
/// each Service's endpoint IPs and last change time.
///
/// Build it once per truth change ([`NodeExpectations::new`]) and compare any number of
/// dumps of that node with [`NodeExpectations::diff`]: the comparison is then one pass over
/// the dump's frontends with hash lookups and binary searches, no tree walk of the truth.
#[derive(Debug)]
pub struct NodeExpectations<'a> {
    truth: &'a Truth,
    index: ServiceIndex<'a>,
    node: Option<String>,
    ports: FxMap<(&'a ServiceKey, Option<&'a str>, bool), PortExpect>,
    /// Endpoint IPs per Service (any condition), sorted: a non-active backend whose IP is
    /// still one of them is draining.
    endpoint_ips: FxMap<&'a ServiceKey, Vec<IpAddr>>,
    changed: FxMap<&'a ServiceKey, Time>,
}

impl<'a> NodeExpectations<'a> {
    /// Computes what every Service port of `truth` should route to on `node`;
    /// `last_change` overrides the slices' trigger times where given.
    pub fn new(
        truth: &'a Truth,
        node: Option<&str>,
        last_change: Option<&BTreeMap<ServiceKey, Time>>,
    ) -> Self {
        let mut ports = FxMap::default();
        let mut endpoint_ips = FxMap::default();
        let mut changed = FxMap::default();
        for svc in truth.services().filter(|s| !s.headless) {
            let mut ips: Vec<IpAddr> = Vec::new();
            let mut latest: Option<Time> = None;
            for slice in truth.slices_of(&svc.key) {
                ips.extend(slice.endpoints.iter().map(|e| e.ip()));
                latest = latest.max(slice.trigger_time);
            }
            ips.sort_unstable();
            ips.dedup();
            endpoint_ips.insert(&svc.key, ips);
            if let Some(at) = last_change
                .and_then(|m| m.get(&svc.key).copied())
                .or(latest)
            {
                changed.insert(&svc.key, at);
            }
            let same = svc.internal_traffic_policy == TrafficPolicy::Cluster
                && svc.external_traffic_policy == TrafficPolicy::Cluster;
            for p in &svc.ports {
                let port_name = p.name.as_deref();
                for external in [false, true] {
                    if external && same {
                        continue;
                    }
                    let m = PortMatch {
                        service: svc,
                        port_name,
                        external,
                    };
                    let (required, allowed) = expected(truth, &m, node);
                    ports.insert(
                        (&svc.key, port_name, external),
                        PortExpect {
                            required: required.into_iter().collect(),
                            allowed: allowed.into_iter().collect(),
                        },
                    );
                }
            }
        }
        Self {
            truth,
            index: ServiceIndex::new(truth),
            node: node.map(str::to_string),
            ports,
            endpoint_ips,
            changed,
        }
    }

    fn port(&self, m: &PortMatch<'a>) -> Option<&PortExpect> {
        let key = &m.service.key;
        self.ports
            .get(&(key, m.port_name, m.external))
            .or_else(|| self.ports.get(&(key, m.port_name, false)))
    }

    /// Whether the datapath only drains `b` (see [`diff_with`]).
    fn draining(&self, key: &ServiceKey, b: &Backend) -> bool {
        b.state != BackendState::Active
            && self
                .endpoint_ips
                .get(key)
                .is_some_and(|ips| ips.binary_search(&b.ip).is_ok())
    }

    /// Compares `table` (read at `now`, covering `family`; `None`: its frontends' families).
    pub fn diff(&self, table: &LbTable, now: Option<Time>, family: Option<Family>) -> NodeDiff {
        let truth = self.truth;
        let family = family.unwrap_or_else(|| Family::of_table(table));
        let changed = |key: &ServiceKey| -> (Option<Time>, Option<Duration>) {
            let at = self.changed.get(key).copied();
            let since = at
                .zip(now)
                .and_then(|(at, now)| Duration::try_from(now.duration_since(at)).ok());
            (at, since)
        };
        let mut out = NodeDiff {
            node: self.node.clone(),
            ..NodeDiff::default()
        };
        let mut seen: FxMap<(IpAddr, u16, ghostip_core::Protocol), ()> = FxMap::default();
        let empty = PortExpect::default();
        for f in &table.frontends {
            let Some(m) = self.index.lookup(f) else {
                out.unknown_frontends += 1;
                if out.unknown_samples.len() < MAX_UNKNOWN_SAMPLES {
                    let mut s = FrontendAddr::of(f).to_string();
                    if let Some(r) = &f.service {
                        s.push_str(&format!(" ({r})"));
                    }
                    out.unknown_samples.push(s);
                }
                continue;
            };
            out.frontends_checked += 1;
            let key = &m.service.key;
            if !m.external {
                for p in &m.service.ports {
                    if p.name.as_deref() == m.port_name
                        && f.protocol.to_core().is_none_or(|fp| fp == p.protocol)
                    {
                        seen.insert((f.ip, f.port, p.protocol), ());
                    }
                }
            }
            let pe = self.port(&m).unwrap_or(&empty);
            let mut rows: Option<(Option<Time>, Option<Duration>)> = None;
            let mut row = |backend: Target, state: Option<BackendState>| {
                let (changed_at, since_change) = *rows.get_or_insert_with(|| changed(key));
                BackendDiff {
                    service: key.clone(),
                    port_name: m.port_name.map(str::to_string),
                    frontend: FrontendAddr::of(f),
                    backend,
                    state,
                    changed_at,
                    since_change,
                }
            };
            for b in &f.backends {
                let t = b.target();
                if pe.allowed.binary_search(&t).is_ok() {
                    continue;
                }
                if self.draining(key, b) {
                    out.draining += 1;
                    continue;
                }
                out.stale.push(row(t, Some(b.state.clone())));
            }
            for t in &pe.required {
                let held = f
                    .backends
                    .binary_search_by(|b| (b.ip, b.port).cmp(&(t.ip, t.port.unwrap_or(0))))
                    .is_ok();
                if !held {
                    out.missing.push(row(*t, None));
                }
            }
        }
        // Cluster-IP frontends that should exist.
        for svc in truth.services().filter(|s| !s.headless) {
            let mut absent = Vec::new();
            let mut expected_here = 0usize;
            for p in &svc.ports {
                for ip in svc.cluster_ips.iter().filter(|ip| family.contains(**ip)) {
                    expected_here += 1;
                    if seen.contains_key(&(*ip, p.port, p.protocol)) {
                        continue;
                    }
                    let (changed_at, since_change) = changed(&svc.key);
                    let m = PortMatch {
                        service: svc,
                        port_name: p.name.as_deref(),
                        external: false,
                    };
                    absent.push(MissingFrontend {
                        service: svc.key.clone(),
                        port_name: p.name.clone(),
                        frontend: FrontendAddr {
                            ip: *ip,
                            port: p.port,
                            protocol: Protocol::from(p.protocol),
                            kind: FrontendKind::ClusterIp,
                        },
                        backends: self.port(&m).map_or(0, |pe| pe.required.len()),
                        changed_at,
                        since_change,
                    });
                }
            }
            if absent.is_empty() {
                continue;
            }
            if absent.len() == expected_here {
                out.services_missing.push(MissingService {
                    service: svc.key.clone(),
                    frontends: absent,
                });
            } else {
                out.frontends_missing.extend(absent);
            }
        }
        out.stale.sort_by(row_order);
        out.missing.sort_by(row_order);
        out
    }
}

/// Compares every frontend of `table` with what the truth says it should route to
/// ([`NodeExpectations::new`] then [`NodeExpectations::diff`]):
///
/// - stale: a backend the frontend routes to that is not allowed (not a ready endpoint,
///   nor a serving+terminating one when none is ready), unless the datapath only drains
///   it (non-active state, IP still an endpoint);
/// - missing: a required backend (after the node's `Local` narrowing) it does not route to;
/// - a Service port whose cluster-IP frontend is absent (for the families the dump covers);
/// - frontends of Services the truth does not have are counted.
pub fn diff_with(table: &LbTable, truth: &Truth, opts: &DiffOptions<'_>) -> NodeDiff {
    NodeExpectations::new(truth, opts.node, opts.last_change).diff(table, opts.now, opts.family)
}

fn row_order(a: &BackendDiff, b: &BackendDiff) -> std::cmp::Ordering {
    (&a.service, a.frontend, a.backend).cmp(&(&b.service, b.frontend, b.backend))
}
