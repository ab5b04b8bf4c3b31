//! The seam every layer plugs into: a pure [`LayerModel`] that registers its paths and desired sets with the engine as the truth changes.
//!
//! A layer is a kind of copy of the truth (DNS answers, a node's datapath, its conntrack
//! table, a client's registry list). Its model is pure: the [`Session`](crate::Session)
//! hands it every truth event after applying it, with a [`LayerCx`] through which it adds
//! and removes its paths, sets their expected lag and says what each path should hold.
//! What a path really holds reaches the engine as [`Observation`]s, made by the layer's IO
//! adapter in the binary crate (a DNS query, a datapath dump, a netlink read) and decoded by
//! the model; the engine, the ledger, the metrics and the reports compare and record them
//! without knowing which layer they came from.
//!
//! Adding a layer: a model implementing [`LayerModel`] (pure, here or beside its adapter),
//! an adapter that reads the path and feeds the observations, and one registration line
//! where the command builds its session. `docs/ARCHITECTURE.md` lists the files.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::engine::{Engine, EngineEvent, Judging};
use ghostip_core::truth::{ServiceChange, Truth};
use ghostip_core::{ChangeTime, Layer, Observation, PathIdx, PathInfo, ServiceKey, Target, Time};

use crate::filter::ServiceFilter;
use crate::report::PathFacts;
use crate::session::ChangeMemory;
use crate::truth_event::{Received, TruthEvent, TruthKey, TruthObject};

/// One layer's pure model. Its adapter reaches it by type through [`crate::Session::layer`]
/// (a `dyn LayerModel` upcasts to `dyn Any`).
pub trait LayerModel: Any + Send {
    /// The layer (`dns`, `datapath`, `conntrack`, …): the label of its paths in reports and
    /// metrics.
    fn layer(&self) -> Layer;

    /// A truth event the session already applied to `cx.truth`; `changes` are the Services
    /// whose endpoints it changed (a relist's deletions included). The model registers or
    /// drops paths and sets the desired sets of the Services it cares about.
    fn on_truth(&mut self, cx: &mut LayerCx<'_>, event: &Received, changes: &[ServiceChange]);

    /// Time passed (every 250 ms in the long-running commands).
    fn on_tick(&mut self, _cx: &mut LayerCx<'_>, _now: Time) {}

    /// What the layer knows about its paths beyond the engine (the TTL a DNS path hands
    /// to clients, how its expected lag was derived), for reports.
    fn path_facts(&self, _engine: &Engine, _out: &mut BTreeMap<PathIdx, PathFacts>) {}
}

/// What changed when a layer set a Service's layer-wide desired set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DesiredChange {
    /// Targets that left the set.
    pub removed: Vec<Target>,
    /// Targets that joined it.
    pub added: Vec<Target>,
    /// The engine opened or closed trackings.
    pub events: bool,
}

impl DesiredChange {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }
}

/// A removed endpoint to connect-probe, to learn when it stopped accepting connections
/// (exposure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Address to probe.
    pub target: std::net::SocketAddr,
    /// Stop probing after this long.
    pub for_at_most: Duration,
}

/// A layer's access to the truth and the engine during one session step.
pub struct LayerCx<'a> {
    /// The truth, already updated by the event.
    pub truth: &'a Truth,
    /// The engine: read through [`LayerCx::engine`], changed only through this context.
    pub(crate) engine: &'a mut Engine,
    /// The layer this context is bound to: its paths and desired sets are this layer's.
    pub(crate) layer: Layer,
    /// The Services the command looks at.
    pub filter: &'a ServiceFilter,
    /// The truth synced at least once (the initial LIST is a baseline, not a change).
    pub synced: bool,
    pub(crate) events: &'a mut Vec<EngineEvent>,
    pub(crate) connect: &'a mut Vec<ConnectRequest>,
    pub(crate) memory: &'a mut ChangeMemory,
}

impl LayerCx<'_> {
    /// The layer this context is bound to.
    pub fn layer(&self) -> Layer {
        self.layer
    }

    /// The engine, to read (paths, desired sets, open trackings).
    pub fn engine(&self) -> &Engine {
        self.engine
    }

    /// Registers a path of this layer with the engine.
    pub fn add_path(&mut self, info: PathInfo, expected_lag: Duration) -> PathIdx {
        debug_assert_eq!(
            info.kind.layer(),
            self.layer,
            "a layer registers its own paths"
        );
        self.engine.add_path(info, expected_lag)
    }

    /// Registers a path of this layer that the engine judges as `judging` says (a path
    /// judged for staleness only).
    pub fn add_path_judging(
        &mut self,
        info: PathInfo,
        expected_lag: Duration,
        judging: Judging,
    ) -> PathIdx {
        debug_assert_eq!(
            info.kind.layer(),
            self.layer,
            "a layer registers its own paths"
        );
        self.engine.add_path_judging(info, expected_lag, judging)
    }

    /// Drops a path: its open trackings close unjudged.
    pub fn remove_path(&mut self, path: PathIdx) {
        let events = self.engine.remove_path(path);
        self.events.extend(events);
    }

    /// Changes a path's expected lag (the configuration changed).
    pub fn set_expected_lag(&mut self, path: PathIdx, lag: Duration) {
        self.engine.set_expected_lag(path, lag);
    }

    /// Sets what every path of this layer should hold for `service` (DNS: the same answer on
    /// every server). Removals are remembered for reports, with the former owner; removed
    /// endpoints of a Service with a TCP port are connect-probed (`probe_for`) to measure
    /// exposure.
    pub fn set_desired(
        &mut self,
        service: &ServiceKey,
        set: BTreeSet<Target>,
        at: ChangeTime,
        probe_for: Duration,
    ) -> DesiredChange {
        let old: BTreeSet<Target> = self
            .engine
            .desired(self.layer, service)
            .map(|d| d.iter().collect())
            .unwrap_or_default();
        let events = self
            .engine
            .set_desired(self.layer, service, set.clone(), at);
        let mut change = DesiredChange {
            removed: old.difference(&set).copied().collect(),
            added: set.difference(&old).copied().collect(),
            events: !events.is_empty(),
        };
        if change.is_empty() {
            change.events = false;
            self.events.extend(events);
            return change;
        }
        let removed: Vec<IpAddr> = change.removed.iter().map(|t| t.ip).collect();
        let added: Vec<IpAddr> = change.added.iter().map(|t| t.ip).collect();
        self.memory
            .record_change(service, at, &removed, &added, self.synced);
        if !events.is_empty()
            && let Some(port) = tcp_port(self.truth, service)
        {
            for ip in &removed {
                self.memory.probed.insert(*ip);
                self.connect.push(ConnectRequest {
                    target: std::net::SocketAddr::new(*ip, port),
                    for_at_most: probe_for,
                });
            }
        }
        self.events.extend(events);
        change
    }

    /// Sets what one path should hold for `service` when it differs from path to path
    /// (a node's datapath: traffic policy `Local` narrows it). Returns whether the set
    /// changed.
    pub fn set_desired_on_path(
        &mut self,
        path: PathIdx,
        service: &ServiceKey,
        set: BTreeSet<Target>,
        at: ChangeTime,
    ) -> bool {
        // `desired_on_path` is sorted, like the set's iteration order.
        let before = self.engine.desired_on_path(path, service);
        if before.is_some_and(|before| before.iter().eq(set.iter().copied())) {
            return false;
        }
        let events = self.engine.set_desired_on_path(path, service, set, at);
        self.events.extend(events);
        true
    }

    /// Feeds one observation to the engine.
    pub fn observe(&mut self, observation: &Observation) {
        let events = self.engine.observe(observation);
        self.events.extend(events);
    }

    /// Engine events produced so far in this step.
    pub fn events(&self) -> &[EngineEvent] {
        self.events
    }

    /// The pod (`namespace/name`) that owned `ip` when it left a Service during the
    /// session, whatever the layer.
    pub fn former_pod(&self, ip: IpAddr) -> Option<&str> {
        self.memory.former_pod(ip)
    }
}

/// The Services a truth event touches, with their change times: the Service an event about
/// a Service names (dated by its receipt) unless the truth reports it among `changes`, then
/// every Service in `changes`. Layers whose desired sets follow a Service's own fields as well
/// as its endpoints re-derive these.
pub fn touched_services<'a>(
    r: &'a Received,
    changes: &'a [ServiceChange],
) -> Vec<(&'a ServiceKey, ChangeTime)> {
    let own = match &r.event {
        TruthEvent::InitApply(TruthObject::Service(s))
        | TruthEvent::Apply(TruthObject::Service(s)) => Some(&s.key),
        TruthEvent::Delete(TruthKey::Service(k)) => Some(k),
        _ => None,
    };
    own.filter(|k| !changes.iter().any(|c| &c.service == *k))
        .map(|k| (k, ChangeTime::received_at(r.at)))
        .into_iter()
        .chain(changes.iter().map(|c| (&c.service, c.at)))
        .collect()
}

/// A Service's first TCP port, the one exposure is measured on.
pub fn tcp_port(truth: &Truth, key: &ServiceKey) -> Option<u16> {
    truth
        .slices_of(key)
        .flat_map(|s| s.ports.iter())
        .find(|p| p.protocol == ghostip_core::Protocol::Tcp)
        .map(|p| p.port)
}
