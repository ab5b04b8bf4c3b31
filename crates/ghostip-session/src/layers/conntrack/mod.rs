//! The conntrack layer: one node's connection-tracking table as one engine path, judged for staleness only: flows of this node's pods that still go to an endpoint Kubernetes removed.
//!
//! Pure: no IO, time passed in. [`ConntrackModel`] is the layer's model. Its path
//! (`conntrack/node-2`, [`CONNTRACK_TABLE`]) is registered with
//! [`Judging::StaleOnly`]: a flow to a live endpoint is the normal case and no flow at all
//! says nothing, so only stale targets are judged. For every Service the path's desired
//! set is its current endpoints, every endpoint the slices list (ready or terminating: a
//! connection draining from a terminating pod is not stale) on every port of its slices,
//! and every endpoint without a pod its slices listed during the session (the API server's
//! own address leaves `default/kubernetes` while it restarts, but does not die).
//!
//! The adapter reads the table (a netlink dump streamed through
//! [`FlowCollector`](flows::FlowCollector)) and hands each **complete** dump to
//! [`ConntrackModel::on_read`], which joins the flows with the truth:
//! - a flow DNATed from a Service address (ClusterIP and port, the kube-dns ClusterIP
//!   included) belongs to that Service, with the backend it is pinned to;
//! - a flow sent straight to an IP that left a Service during the session (a pooled
//!   connection, a cached DNS answer, a registry list), on one of that Service's ports,
//!   belongs to that Service; an IP that joined any Service again since is not judged
//!   (a new pod may own it);
//! - other flows (to live endpoints without DNAT, to addresses ghostip never saw as
//!   endpoints) are not attributed.
//!
//! Each read yields one observation per Service with flows or with an open tracking on the
//! path: the backends its live flows point at. A backend that is not an endpoint any more
//! is held only when a flow to it was also seen in the previous complete read (the same
//! protocol, client, destination and backend; source ports may differ): a flow that a
//! dump caught only once (ended during the read, or a half-read table) is never a finding.
//! A Service with such an unconfirmed flow is not observed in that read, so an open
//! tracking is neither converged nor reopened by it; the adapter reads again soon
//! ([`ConntrackModel::pending`]). The engine then judges windows as for any path: from
//! the endpoint's departure (t0) to the first read without a flow to it; a held stale
//! backend that only connects go to carries their last SYN ([`HeldTarget::last_used`]), so
//! the window's lower bound is when the client last tried it, not the read that saw it (an
//! established connection is held at the read, however idle).

pub mod flows;

use ghostip_datapath::layers::{CONNTRACK, CONNTRACK_TABLE};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::engine::{Discrepancy, Engine, Judging};
use ghostip_core::truth::{AddressType, ServiceChange, Truth};
use ghostip_core::{
    ChangeTime, HeldTarget, Layer, Observation, ObservationResult, PathIdx, PathInfo, PodRef,
    Protocol, ServiceKey, Target, Time,
};
use serde::Serialize;

use crate::layer::{LayerCx, LayerModel, touched_services};
use crate::truth_event::{Received, ResourceKind, TruthEvent, TruthKey, TruthObject};
use flows::{CollectedFlows, FlowKey};

/// The path a node's conntrack table is registered as, judged for staleness only.
pub fn path_info(node: &str) -> (PathInfo, Judging) {
    let kind = CONNTRACK_TABLE;
    (
        PathInfo {
            id: format!("{}/{node}", kind.as_str()),
            kind,
            description: format!("conntrack on {node}"),
            node: Some(node.to_string()),
        },
        Judging::StaleOnly,
    )
}

/// The endpoints a node's conntrack path should hold flows to for `key`: every endpoint
/// of its slices (any condition) on every port of that slice.
pub fn desired(truth: &Truth, key: &ServiceKey) -> BTreeSet<Target> {
    truth
        .slices_of(key)
        .filter(|s| s.address_type != AddressType::Fqdn)
        .flat_map(|s| {
            s.endpoints.iter().flat_map(move |e| {
                s.ports
                    .iter()
                    .map(move |p| Target::socket(e.ip().to_canonical(), p.port))
            })
        })
        .collect()
}

/// A stale flow: a pod of this node still sending to an endpoint that left its Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaleFlow {
    /// The Service the backend left.
    #[serde(serialize_with = "display")]
    pub service: ServiceKey,
    /// Layer-4 protocol.
    pub proto: Protocol,
    /// The client's address.
    pub client_ip: IpAddr,
    /// The client pod (a pod of this node), `namespace/name` in JSON.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "display_opt"
    )]
    pub client_pod: Option<PodRef>,
    /// The Service address the client sent to, when the flow was DNATed.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "display_opt"
    )]
    pub via: Option<Target>,
    /// Where the flow goes: the removed endpoint.
    #[serde(serialize_with = "display")]
    pub target: Target,
    /// The pod that owned the target when it left (`namespace/name`), where the session saw
    /// it leave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub former_owner: Option<String>,
    /// When the target left the Service (t0), where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_at: Option<Time>,
    /// The first complete read that saw the flow.
    pub first_seen: Time,
    /// The last complete read that saw it.
    pub last_seen: Time,
    /// When its newest packet went out, as of `last_seen` (TCP: from the entries'
    /// remaining timeouts, within half a second): when the client last sent, which reads
    /// made once a second can only bracket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_packet: Option<Time>,
    /// How long the flow outlived the endpoint: from `left_at` to `last_seen`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "secs_f64",
        rename = "outlived_by_s"
    )]
    pub outlived_by: Option<Duration>,
    /// Conntrack entries of the flow (one per source port).
    pub entries: u32,
    /// Of which `[UNREPLIED]`.
    pub unreplied: u32,
    /// Longest remaining timeout among them, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_timeout_s: Option<u32>,
    /// Seen in two consecutive complete reads: held as stale by the engine. An
    /// unconfirmed flow is not a finding yet.
    pub confirmed: bool,
}

fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn display_opt<T: std::fmt::Display, S: serde::Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

fn secs_f64<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// What one read meant.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Observations made (for the ledger: only those of Services with open trackings).
    pub recorded: Vec<Observation>,
    /// Aggregated flows read.
    pub flows: usize,
    /// Of which attributed to a Service.
    pub attributed: usize,
    /// Services observed.
    pub services: usize,
    /// Services not observed because a flow to a removed endpoint is not confirmed yet.
    pub withheld: usize,
}

/// An endpoint that left a Service during the session.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Departure {
    service: ServiceKey,
    port: u16,
    at: ChangeTime,
}

/// The model of one node's conntrack path.
///
/// It keeps no copy of the truth's endpoints: the desired sets are the engine's, and only
/// the endpoints that left a Service during the session are remembered (forgotten after the
/// engine's change memory unless a tracking is open for them), with this node's pods.
#[derive(Debug)]
pub struct ConntrackModel {
    node: String,
    /// The engine path, once the table was read (a node without conntrack has none).
    path: Option<PathIdx>,
    /// This node's pods (not host-network), by IP: the clients.
    pods: HashMap<IpAddr, PodRef>,
    /// Pods listed by a running relist of Pods.
    relisted: Option<HashSet<PodRef>>,
    /// Endpoints that left a Service during the session, by IP.
    departed: HashMap<IpAddr, Vec<Departure>>,
    /// Flows to non-endpoints in the last complete read (confirmed or not).
    stale: BTreeMap<FlowKey, StaleFlow>,
    /// Per Service, the endpoints its slices listed during the session without a pod
    /// (`targetRef`): the API server's own address in `default/kubernetes`, a hand-written
    /// slice to a host. They stay valid targets after they leave the slice.
    hosts: HashMap<ServiceKey, BTreeSet<Target>>,
    /// A desired set lost a target since the adapter last asked.
    removed: bool,
    last_forget: Option<Time>,
}

impl ConntrackModel {
    /// A model for `node`; its path is registered by [`ConntrackModel::attach`].
    pub fn new(node: impl Into<String>) -> Self {
        Self {
            node: node.into(),
            path: None,
            pods: HashMap::new(),
            relisted: None,
            departed: HashMap::new(),
            stale: BTreeMap::new(),
            hosts: HashMap::new(),
            removed: false,
            last_forget: None,
        }
    }

    /// The engine path, when attached.
    pub fn path(&self) -> Option<PathIdx> {
        self.path
    }

    /// Registers the node's conntrack path (the table is readable) with its expected lag
    /// and gives it every Service's desired set, as of `at`. Its arrivals are not dated
    /// ([`Judging::StaleOnly`]).
    pub fn attach(&mut self, cx: &mut LayerCx<'_>, expected_lag: Duration, at: Time) -> PathIdx {
        if let Some(p) = self.path {
            return p;
        }
        let (info, judging) = path_info(&self.node);
        let path = cx.add_path_judging(info, expected_lag, judging);
        self.path = Some(path);
        let keys: Vec<ServiceKey> = cx.truth.services().map(|s| s.key.clone()).collect();
        for key in keys {
            let set = self.desired_set(cx.truth, &key);
            cx.set_desired_on_path(path, &key, set, ChangeTime::received_at(at));
        }
        path
    }

    /// Drops the path (the table became unreadable): its open trackings close unjudged.
    pub fn detach(&mut self, cx: &mut LayerCx<'_>) {
        if let Some(p) = self.path.take() {
            cx.remove_path(p);
        }
        self.stale.clear();
        self.departed.clear();
    }

    /// The addresses of this node's pods: the clients whose flows count.
    pub fn client_ips(&self) -> Vec<IpAddr> {
        self.pods.keys().copied().collect()
    }

    /// The addresses of this node's pods outside `ignored` namespaces: the clients whose
    /// flows count when the pods of those namespaces are ghostip's own probers.
    pub fn client_ips_outside(&self, ignored: &[String]) -> Vec<IpAddr> {
        self.pods
            .iter()
            .filter(|(_, p)| !ignored.contains(&p.namespace))
            .map(|(ip, _)| *ip)
            .collect()
    }

    /// Whether an endpoint left a Service since the last call (read the table soon).
    pub fn take_removed(&mut self) -> bool {
        std::mem::take(&mut self.removed)
    }

    /// Whether the last read saw a flow to a removed endpoint that a second read must
    /// confirm (read again soon).
    pub fn pending(&self) -> bool {
        self.stale.values().any(|f| !f.confirmed)
    }

    /// Whether the path has open, unconverged trackings (keep re-reading).
    pub fn unconverged(&self, engine: &Engine) -> bool {
        self.path.is_some_and(|path| {
            engine
                .open_trackings()
                .any(|t| t.path == path && t.converged_by.is_none())
        })
    }

    /// Flows to removed endpoints in the last complete read, confirmed ones first.
    pub fn stale_flows(&self) -> impl Iterator<Item = &StaleFlow> {
        let confirmed = self.stale.values().filter(|f| f.confirmed);
        confirmed.chain(self.stale.values().filter(|f| !f.confirmed))
    }

    /// The path's desired set for `key`: its endpoints ([`desired`]) and every endpoint
    /// without a pod its slices listed during the session. Only a pod's address dies with
    /// its endpoint: the API server removes its own address from `default/kubernetes`
    /// when it stops and lists it again a minute or more after it is back, and the
    /// connections to it in between go to a live server, not to a ghost.
    fn desired_set(&mut self, truth: &Truth, key: &ServiceKey) -> BTreeSet<Target> {
        let mut set = desired(truth, key);
        if truth.service(key).is_none() {
            self.hosts.remove(key);
            return set;
        }
        let hosts: Vec<Target> = truth
            .slices_of(key)
            .filter(|s| s.address_type != AddressType::Fqdn)
            .flat_map(|s| {
                s.endpoints
                    .iter()
                    .filter(move |e| s.pod_name(e).is_none())
                    .flat_map(move |e| {
                        s.ports
                            .iter()
                            .map(move |p| Target::socket(e.ip().to_canonical(), p.port))
                    })
            })
            .collect();
        if !hosts.is_empty() {
            self.hosts.entry(key.clone()).or_default().extend(hosts);
        }
        if let Some(h) = self.hosts.get(key) {
            set.extend(h.iter().copied());
        }
        set
    }

    fn set_desired(&mut self, cx: &mut LayerCx<'_>, key: &ServiceKey, change: ChangeTime) {
        let Some(path) = self.path else { return };
        if cx.truth.service(key).is_none() && cx.engine().desired_on_path(path, key).is_none() {
            return;
        }
        let set = self.desired_set(cx.truth, key);
        let old: Vec<Target> = match cx.engine().desired_on_path(path, key) {
            Some(d) if d.iter().eq(set.iter().copied()) => return,
            Some(d) => d.iter().collect(),
            None => Vec::new(),
        };
        if cx.synced {
            for t in old.iter().filter(|t| !set.contains(t)) {
                if let Some(port) = t.port {
                    let list = self.departed.entry(t.ip).or_default();
                    list.retain(|d| !(d.service == *key && d.port == port));
                    list.push(Departure {
                        service: key.clone(),
                        port,
                        at: change,
                    });
                    self.removed = true;
                }
            }
            // An address that joins a Service again may belong to a new pod: flows to it
            // are not judged as flows to the one that left.
            for t in set.iter().filter(|t| old.binary_search(t).is_err()) {
                self.departed.remove(&t.ip);
            }
        }
        cx.set_desired_on_path(path, key, set, change);
    }

    fn on_pod_event(&mut self, event: &TruthEvent) {
        match event {
            TruthEvent::Init(ResourceKind::Pods) => self.relisted = Some(HashSet::new()),
            TruthEvent::InitDone(ResourceKind::Pods) => {
                if let Some(seen) = self.relisted.take() {
                    self.pods.retain(|_, p| seen.contains(p));
                }
            }
            TruthEvent::InitApply(TruthObject::Pod(p)) | TruthEvent::Apply(TruthObject::Pod(p)) => {
                self.pods.retain(|_, known| known != &p.pod);
                if let Some(seen) = self.relisted.as_mut() {
                    seen.insert(p.pod.clone());
                }
                let here = p.node.as_deref().is_none_or(|n| n == self.node);
                if !p.host_network && here {
                    for ip in &p.ips {
                        self.pods.insert(ip.to_canonical(), p.pod.clone());
                    }
                }
            }
            TruthEvent::Delete(TruthKey::Pod(pod)) => {
                self.pods
                    .retain(|_, p| !(p.namespace == pod.namespace && p.name == pod.name));
            }
            _ => {}
        }
    }

    /// The Services a flow belongs to, with whether its backend is a current endpoint.
    fn attribute<'t>(
        &'t self,
        key: &FlowKey,
        frontends: &HashMap<(IpAddr, u16, Protocol), &'t ServiceKey>,
        out: &mut Vec<&'t ServiceKey>,
    ) {
        out.clear();
        if key.dnat()
            && let Some(port) = key.dst.port
            && let Some(svc) = frontends.get(&(key.dst.ip, port, key.proto))
        {
            out.push(svc);
            return;
        }
        if let (Some(list), Some(port)) = (self.departed.get(&key.backend.ip), key.backend.port) {
            out.extend(list.iter().filter(|d| d.port == port).map(|d| &d.service));
        }
    }

    /// When `target` left `service`, as remembered or as its open tracking says.
    fn left_at(
        &self,
        engine: &Engine,
        path: PathIdx,
        service: &ServiceKey,
        target: Target,
    ) -> Option<Time> {
        let remembered = self.departed.get(&target.ip).and_then(|list| {
            list.iter()
                .find(|d| &d.service == service && Some(d.port) == target.port)
                .map(|d| d.at.t0)
        });
        remembered.or_else(|| {
            engine
                .open_trackings()
                .find(|t| {
                    t.path == path
                        && t.kind == Discrepancy::Stale
                        && &t.service == service
                        && t.target == target
                })
                .and_then(|t| t.change.map(|c| c.t0))
        })
    }

    /// Feeds one complete read of the table, made at `at`.
    pub fn on_read(
        &mut self,
        cx: &mut LayerCx<'_>,
        read: &CollectedFlows,
        at: Time,
    ) -> ReadOutcome {
        let mut out = ReadOutcome {
            flows: read.flows.len(),
            ..ReadOutcome::default()
        };
        let Some(path) = self.path else { return out };
        let truth = cx.truth;
        let mut frontends: HashMap<(IpAddr, u16, Protocol), &ServiceKey> = HashMap::new();
        if read.flows.iter().any(|f| f.key.dnat()) {
            for svc in truth.services() {
                for ip in &svc.cluster_ips {
                    for p in &svc.ports {
                        frontends.insert((ip.to_canonical(), p.port, p.protocol), &svc.key);
                    }
                }
            }
        }
        // Per Service: backends held (live, or stale and confirmed), and stale backends
        // seen only in this read.
        let mut held: BTreeMap<ServiceKey, BTreeSet<Target>> = BTreeMap::new();
        let mut unconfirmed: BTreeSet<(ServiceKey, Target)> = BTreeSet::new();
        let mut stale: BTreeMap<FlowKey, StaleFlow> = BTreeMap::new();
        // Per (Service, stale backend): when the client last tried it, where every flow to
        // it is connects only (their last SYN); else the read itself.
        let mut last_used: BTreeMap<(ServiceKey, Target), Option<Time>> = BTreeMap::new();
        let mut services = Vec::new();
        for flow in &read.flows {
            let key = &flow.key;
            self.attribute(key, &frontends, &mut services);
            if !services.is_empty() {
                out.attributed += 1;
            }
            for svc in &services {
                let live = cx
                    .engine
                    .desired_on_path(path, svc)
                    .is_some_and(|d| d.contains(&key.backend));
                if live {
                    held.entry((*svc).clone()).or_default().insert(key.backend);
                    continue;
                }
                let before = self.stale.get(key);
                let confirmed = before.is_some();
                if confirmed {
                    held.entry((*svc).clone()).or_default().insert(key.backend);
                    let packet = flow.last_tried(at);
                    last_used
                        .entry(((*svc).clone(), key.backend))
                        .and_modify(|u| *u = u.zip(packet).map(|(a, b)| a.max(b)))
                        .or_insert(packet);
                } else {
                    unconfirmed.insert(((*svc).clone(), key.backend));
                }
                let left_at = self.left_at(cx.engine(), path, svc, key.backend);
                let outlived_by =
                    left_at.and_then(|t| Duration::try_from(at.duration_since(t)).ok());
                stale.insert(
                    *key,
                    StaleFlow {
                        service: (*svc).clone(),
                        proto: key.proto,
                        client_ip: key.client,
                        client_pod: self.pods.get(&key.client).cloned(),
                        via: key.dnat().then_some(key.dst),
                        target: key.backend,
                        former_owner: cx.former_pod(key.backend.ip).map(str::to_string),
                        left_at,
                        first_seen: before.map_or(at, |b| b.first_seen),
                        last_seen: at,
                        last_packet: flow.last_packet(at),
                        outlived_by,
                        entries: flow.counts.entries,
                        unreplied: flow.counts.unreplied,
                        max_timeout_s: flow.counts.max_timeout,
                        confirmed,
                    },
                );
            }
        }
        // Services with an open tracking on the path are observed even without flows: that
        // is how a stale backend converges.
        let open: BTreeSet<ServiceKey> = cx
            .engine
            .open_trackings()
            .filter(|t| t.path == path)
            .map(|t| t.service.clone())
            .collect();
        let mut observed: BTreeSet<ServiceKey> = held.keys().cloned().collect();
        observed.extend(open);
        observed.extend(unconfirmed.iter().map(|(s, _)| s.clone()));
        for svc in observed {
            let targets = held.remove(&svc).unwrap_or_default();
            let waiting = unconfirmed
                .range((svc.clone(), min_target())..)
                .take_while(|(s, _)| *s == svc)
                .any(|(_, t)| !targets.contains(t));
            if waiting {
                out.withheld += 1;
                continue;
            }
            out.services += 1;
            let held_targets = targets
                .into_iter()
                .map(|target| HeldTarget {
                    target,
                    ttl: None,
                    last_used: last_used.get(&(svc.clone(), target)).copied().flatten(),
                })
                .collect();
            let o = Observation {
                path,
                service: svc,
                at,
                result: ObservationResult::Held(held_targets),
                latency: None,
            };
            let before = cx.events().len();
            cx.observe(&o);
            if cx.events().len() > before || cx.engine().has_open_tracking(path, &o.service) {
                out.recorded.push(o);
            }
        }
        self.stale = stale;
        out
    }

    /// Stale flows (confirmed) and their conntrack entries in the last read.
    pub fn stale_counts(&self) -> (usize, u64) {
        self.stale
            .values()
            .filter(|f| f.confirmed)
            .fold((0, 0), |(n, e), f| (n + 1, e + u64::from(f.entries)))
    }
}

fn min_target() -> Target {
    Target::ip(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
}

impl LayerModel for ConntrackModel {
    fn layer(&self) -> Layer {
        CONNTRACK
    }

    /// Pods of this node are the clients; a Service event re-derives that Service's set,
    /// a slice change the sets of the Services it changed.
    fn on_truth(&mut self, cx: &mut LayerCx<'_>, r: &Received, changes: &[ServiceChange]) {
        self.on_pod_event(&r.event);
        for (key, at) in touched_services(r, changes) {
            self.set_desired(cx, key, at);
        }
    }

    /// Forgets departures older than the engine's change memory, unless a tracking is
    /// still open for the address.
    fn on_tick(&mut self, cx: &mut LayerCx<'_>, now: Time) {
        let Some(horizon) = cx.engine().change_horizon(&mut self.last_forget, now) else {
            return;
        };
        let open: HashSet<IpAddr> = cx
            .engine
            .open_trackings()
            .filter(|t| Some(t.path) == self.path)
            .map(|t| t.target.ip)
            .collect();
        self.departed.retain(|ip, list| {
            list.retain(|d| d.at.received >= horizon || open.contains(ip));
            !list.is_empty()
        });
    }
}

#[cfg(test)]
mod tests;
