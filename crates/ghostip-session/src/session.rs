//! One observation session: the truth, the engine and the registered layers, fed by events.
//!
//! `watch`, `rollout`, `check` and the per-node agent all run a session; they differ in
//! which layers they register, how long it lives and what they do with its output. The
//! session does no IO: it applies truth events to the [`Truth`], hands each one to every
//! [`LayerModel`] (which sets its paths' desired sets on the [`Engine`]), and returns
//! [`Actions`] for the adapters. It also keeps what every report needs whatever the layer:
//! who owned each removed IP, when it left, the per (path, IP) timeline, and when removed
//! endpoints died (exposure).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::engine::{Death, DeathSource, Discrepancy, Engine, EngineConfig, EngineEvent};
use ghostip_core::truth::{PodRecord, ServiceChange, Truth};
use ghostip_core::{ChangeTime, Observation, ObservationResult, PathIdx, Scope, ServiceKey, Time};

use crate::filter::ServiceFilter;
use crate::layer::{ConnectRequest, LayerCx, LayerModel};
use crate::report::{ChangeRow, PathFacts, Segment, TimelineRow};
use crate::sync::{SyncState, SyncTransition, apply_to_truth};
use crate::truth_event::{Received, TruthEvent, TruthKey, TruthObject};

/// Session settings.
#[derive(Clone, Debug, Default)]
pub struct SessionConfig {
    /// Services of interest.
    pub filter: ServiceFilter,
    /// Engine tunables.
    pub engine: EngineConfig,
    /// Keep a per-observation timeline (rollout reports).
    pub record_timeline: bool,
}

/// What a session step asks the caller to do.
#[derive(Debug, Default)]
pub struct Actions {
    /// Connect probes to start (exposure).
    pub connect: Vec<ConnectRequest>,
    /// Engine events (for the ledger, metrics and live progress).
    pub events: Vec<EngineEvent>,
    /// Truth sync transitions (gaps).
    pub sync: Vec<SyncTransition>,
    /// The Services whose endpoints the truth event changed (all of them, filter or not).
    pub changes: Vec<ServiceChange>,
}

/// What the session remembers of recent changes, whatever the layer: removals and their
/// former owners, for reports and findings. Forgotten after the engine's `change_memory`
/// unless a tracking is still open for the IP.
#[derive(Debug, Default)]
pub struct ChangeMemory {
    /// Former owner of IPs removed during the session (not every pod: memory stays
    /// proportional to changes, not to the cluster), with when it was noted.
    former: HashMap<IpAddr, (String, Time)>,
    /// IPs whose death is measured by a connect probe (estimates are not used for them).
    pub(crate) probed: BTreeSet<IpAddr>,
    /// IPs removed from a layer-wide desired set during the session, with when.
    removed_at: HashMap<IpAddr, Time>,
    changes: Vec<ChangeRow>,
    /// When old changes were last forgotten.
    last_forget: Option<Time>,
}

impl ChangeMemory {
    /// The former owner (`namespace/name`) of an IP removed during the session.
    pub(crate) fn former_pod(&self, ip: IpAddr) -> Option<&str> {
        self.former.get(&ip).map(|(pod, _)| pod.as_str())
    }

    pub(crate) fn record_change(
        &mut self,
        service: &ServiceKey,
        at: ChangeTime,
        removed: &[IpAddr],
        added: &[IpAddr],
        synced: bool,
    ) {
        for ip in removed {
            self.removed_at.insert(*ip, at.t0);
        }
        if !synced {
            return;
        }
        // One row per Service and moment, each IP once: a layer's targets may carry the same IP
        // several times (A and each SRV port of the DNS layer), and several layers record the
        // same truth change.
        let key = service.to_string();
        if !self
            .changes
            .last()
            .is_some_and(|c| c.at == at.t0 && c.service == key)
        {
            self.changes.push(ChangeRow {
                at: at.t0,
                received: at.received,
                trigger: at.trigger(),
                t0_correction: at.corrected.map(|c| c.to_string()),
                service: key,
                added: Vec::new(),
                removed: Vec::new(),
            });
        }
        if let Some(row) = self.changes.last_mut() {
            for (ips, new) in [(&mut row.removed, removed), (&mut row.added, added)] {
                ips.extend_from_slice(new);
                ips.sort_unstable();
                ips.dedup();
            }
        }
    }
}

/// A context bound to `layer` over the session's parts, borrowed apart from its layers.
fn layer_cx<'a>(
    layer: ghostip_core::Layer,
    truth: &'a Truth,
    engine: &'a mut Engine,
    filter: &'a ServiceFilter,
    synced: bool,
    memory: &'a mut ChangeMemory,
    actions: &'a mut Actions,
) -> LayerCx<'a> {
    LayerCx {
        layer,
        truth,
        engine,
        filter,
        synced,
        events: &mut actions.events,
        connect: &mut actions.connect,
        memory,
    }
}

/// The session.
pub struct Session {
    cfg: SessionConfig,
    truth: Truth,
    engine: Engine,
    sync: SyncState,
    synced_once: bool,
    layers: Vec<Box<dyn LayerModel>>,
    memory: ChangeMemory,
    timeline: BTreeMap<(PathIdx, IpAddr), Vec<Segment>>,
    last_obs: HashMap<(PathIdx, ServiceKey), Time>,
}

impl Session {
    /// A session with the given watches to wait for and no layer yet.
    pub fn new(cfg: SessionConfig, sync: SyncState) -> Self {
        Self {
            engine: Engine::new(cfg.engine.clone()),
            cfg,
            truth: Truth::new(),
            sync,
            synced_once: false,
            layers: Vec::new(),
            memory: ChangeMemory::default(),
            timeline: BTreeMap::new(),
            last_obs: HashMap::new(),
        }
    }

    /// The truth as the session applied it.
    pub fn truth(&self) -> &Truth {
        &self.truth
    }

    /// The engine: paths, trackings, verdicts.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Registers a path outside any layer's truth reaction (an adapter that found its path,
    /// such as a node's datapath once detected).
    pub fn add_path(&mut self, info: ghostip_core::PathInfo, expected_lag: Duration) -> PathIdx {
        self.engine.add_path(info, expected_lag)
    }

    /// Ends the session: closes every open tracking unjudged where it must be, and returns
    /// every tracking (the rollout report's input).
    pub fn finish(&mut self) -> Vec<ghostip_core::engine::Tracking> {
        self.engine.finish()
    }

    /// Registers a layer: from now on it sees every truth event.
    pub fn register(&mut self, layer: impl LayerModel) {
        self.layers.push(Box::new(layer));
    }

    /// Registers a layer built elsewhere (a registration table).
    pub fn register_boxed(&mut self, layer: Box<dyn LayerModel>) {
        self.layers.push(layer);
    }

    /// Registers a layer (builder form).
    #[must_use]
    pub fn with_layer(mut self, layer: impl LayerModel) -> Self {
        self.register(layer);
        self
    }

    /// The registered layer of type `T`, for its adapter.
    pub fn layer<T: LayerModel>(&self) -> Option<&T> {
        self.layers
            .iter()
            .find_map(|l| (&**l as &dyn std::any::Any).downcast_ref::<T>())
    }

    /// The registered layer of type `T`, mutably.
    pub fn layer_mut<T: LayerModel>(&mut self) -> Option<&mut T> {
        self.layers
            .iter_mut()
            .find_map(|l| (&mut **l as &mut dyn std::any::Any).downcast_mut::<T>())
    }

    /// The registered layer of type `T` with a context to feed what it read to the engine;
    /// `f`'s engine events and connect requests come back as [`Actions`].
    pub fn with_layer_cx<T: LayerModel, R>(
        &mut self,
        f: impl FnOnce(&mut T, &mut LayerCx<'_>) -> R,
    ) -> Option<(R, Actions)> {
        let mut actions = Actions::default();
        let layer = self
            .layers
            .iter_mut()
            .find_map(|l| (&mut **l as &mut dyn std::any::Any).downcast_mut::<T>())?;
        let mut cx = layer_cx(
            layer.layer(),
            &self.truth,
            &mut self.engine,
            &self.cfg.filter,
            self.synced_once,
            &mut self.memory,
            &mut actions,
        );
        let r = f(layer, &mut cx);
        Some((r, actions))
    }

    /// Whether the truth synced at least once.
    pub fn synced(&self) -> bool {
        self.synced_once
    }

    /// Whether the truth is synced now (no gap).
    pub fn judging(&self) -> bool {
        self.engine.judging()
    }

    /// The sync state of every watch.
    pub fn sync_state(&self) -> &SyncState {
        &self.sync
    }

    /// The Services the command looks at.
    pub fn filter(&self) -> &ServiceFilter {
        &self.cfg.filter
    }

    /// Handles one truth event.
    pub fn on_truth(&mut self, r: &Received) -> Actions {
        let mut actions = Actions::default();
        if let Some(TruthObject::Pod(pod)) = r.event.applied() {
            self.on_pod(pod);
        }
        // Owners of the endpoints a slice event may remove, read before the truth forgets them.
        let owners = self.owners_before(&r.event);
        // Service labels only serve `-l`: without a selector the truth does not keep them
        // (a BTreeMap node per Service is 5 MB at 10 k Services), but for the one that says
        // another proxy than kube-proxy programs the Service (the components layer).
        let unlabeled;
        let r = match &r.event {
            TruthEvent::InitApply(TruthObject::Service(svc))
            | TruthEvent::Apply(TruthObject::Service(svc))
                if self.cfg.filter.selector.is_empty()
                    && svc
                        .labels
                        .keys()
                        .any(|k| k != crate::layers::components::PROXY_NAME) =>
            {
                let mut svc = svc.clone();
                svc.labels
                    .retain(|k, _| k == crate::layers::components::PROXY_NAME);
                let object = TruthObject::Service(svc);
                unlabeled = Received {
                    at: r.at,
                    event: match r.event {
                        TruthEvent::InitApply(_) => TruthEvent::InitApply(object),
                        _ => TruthEvent::Apply(object),
                    },
                };
                &unlabeled
            }
            _ => r,
        };
        let changes = apply_to_truth(&mut self.truth, r);
        for c in &changes {
            for (ip, pod) in owners
                .iter()
                .filter(|(_, (svc, _))| svc == &c.service)
                .map(|(ip, (_, p))| (ip, p))
            {
                // Still listed by another slice of the Service: not removed.
                if self.truth.endpoint(&c.service, *ip).is_some() {
                    continue;
                }
                self.memory
                    .former
                    .entry(*ip)
                    .or_insert_with(|| (pod.clone(), r.at));
            }
        }
        let transitions = self.sync.observe(r);
        if let Some(SyncTransition::GapStarted { at, .. }) = transitions
            .iter()
            .find(|t| matches!(t, SyncTransition::GapStarted { .. }))
        {
            self.engine.truth_gap(*at);
        }
        let gap_ended = transitions
            .iter()
            .any(|t| matches!(t, SyncTransition::GapEnded { .. }));
        let first_sync = gap_ended && self.sync.truth_synced() && !self.synced_once;
        if first_sync {
            self.synced_once = true;
            tracing::info!(
                services = self.truth.services().count(),
                slices = self.truth.slice_count(),
                removed_while_listing = self.memory.former.len(),
                "truth synced"
            );
        }
        self.for_each_layer(&mut actions, |layer, cx| layer.on_truth(cx, r, &changes));
        if gap_ended && self.sync.truth_synced() {
            self.engine.truth_synced(r.at);
        }
        actions.sync.extend(transitions);
        actions.changes = changes;
        actions
    }

    fn for_each_layer(
        &mut self,
        actions: &mut Actions,
        mut f: impl FnMut(&mut dyn LayerModel, &mut LayerCx<'_>),
    ) {
        for layer in &mut self.layers {
            let mut cx = layer_cx(
                layer.layer(),
                &self.truth,
                &mut self.engine,
                &self.cfg.filter,
                self.synced_once,
                &mut self.memory,
                actions,
            );
            f(layer.as_mut(), &mut cx);
        }
    }

    /// Owners of the endpoints an event may remove from their Service, read before the truth
    /// forgets them: those of the stored slice that its new version no longer lists (all of
    /// them when the slice is deleted or moves to another Service). Nothing on the initial
    /// list, where every slice is new.
    fn owners_before(&self, ev: &TruthEvent) -> Vec<(IpAddr, (ServiceKey, String))> {
        let (old, new) = match ev {
            TruthEvent::InitApply(TruthObject::Slice(s))
            | TruthEvent::Apply(TruthObject::Slice(s)) => {
                match self.truth.slice(&s.namespace, &s.name) {
                    Some(old) if old.service == s.service => (old, Some(s)),
                    Some(old) => (old, None),
                    None => return Vec::new(),
                }
            }
            TruthEvent::Delete(TruthKey::Slice { namespace, name }) => {
                match self.truth.slice(namespace, name) {
                    Some(old) => (old, None),
                    None => return Vec::new(),
                }
            }
            _ => return Vec::new(),
        };
        let key = old.service_key();
        old.endpoints
            .iter()
            .filter(|e| new.is_none_or(|n| !n.endpoints.iter().any(|ne| ne.ip == e.ip())))
            .filter_map(|e| old.pod(e).map(|p| (e.ip(), (key.clone(), p.to_string()))))
            .collect()
    }

    fn on_pod(&mut self, pod: &PodRecord) {
        if pod.host_network {
            return;
        }
        for ip in &pod.ips {
            if let Some(del) = pod.deletion {
                // Estimated death: deletion + preStop (the container keeps serving during preStop).
                let since = del
                    .checked_add(Duration::from_secs(pod.prestop_seconds.unwrap_or(0)))
                    .unwrap_or(del);
                if !self.memory.probed.contains(ip) {
                    self.engine.endpoint_dead(
                        *ip,
                        Death {
                            since,
                            source: DeathSource::PodTermination,
                        },
                    );
                }
            } else if pod.ready_since.is_some() && self.engine.death(*ip).is_some() {
                // A new, ready pod owns a dead IP again: it accepts connections.
                self.engine.endpoint_alive(*ip);
            }
        }
    }

    /// A connect probe found `ip` dead at `at`.
    pub fn on_dead(&mut self, ip: IpAddr, at: Time) {
        self.engine.endpoint_dead(
            ip,
            Death {
                since: at,
                source: DeathSource::ConnectProbe,
            },
        );
    }

    /// Feeds one observation of any layer's path to the engine (and the timeline).
    pub fn observe(&mut self, o: &Observation) -> Vec<EngineEvent> {
        self.observe_scoped(o, &Scope::All)
    }

    /// Feeds one observation that speaks only for the targets in `scope` (a DNS answer of
    /// one family or one SRV port; see [`Engine::observe_scoped`]).
    pub fn observe_scoped(&mut self, o: &Observation, scope: &Scope) -> Vec<EngineEvent> {
        if self.cfg.record_timeline
            && let ObservationResult::Held(held) = &o.result
        {
            let prev = self.last_obs.insert((o.path, o.service.clone()), o.at);
            for h in held {
                let segs = self.timeline.entry((o.path, h.target.ip)).or_default();
                match segs.last_mut() {
                    // Extend the bar when the previous observation of this service also held it.
                    Some(s) if prev.is_some_and(|p| p <= s.end) => s.end = o.at,
                    _ => segs.push(Segment {
                        start: o.at,
                        end: o.at,
                    }),
                }
            }
        }
        self.engine.observe_scoped(o, scope)
    }

    /// Advances time: closes and judges trackings, lets every layer act on time.
    pub fn tick(&mut self, now: Time) -> Vec<EngineEvent> {
        let mut actions = Actions {
            events: self.engine.tick(now),
            ..Actions::default()
        };
        self.for_each_layer(&mut actions, |layer, cx| layer.on_tick(cx, now));
        self.forget_old_changes(now);
        actions.events
    }

    /// Forgets changes, removal times and former owners older than the engine's
    /// `change_memory`, except for IPs a tracking is still open for: a long-running `watch`
    /// stays proportional to recent changes, not to every change it ever saw.
    fn forget_old_changes(&mut self, now: Time) {
        let m = &mut self.memory;
        let Some(horizon) = self.engine.change_horizon(&mut m.last_forget, now) else {
            return;
        };
        let open: HashSet<IpAddr> = self.engine.open_trackings().map(|t| t.target.ip).collect();
        let keep = |ip: &IpAddr, at: Time| at >= horizon || open.contains(ip);
        m.removed_at.retain(|ip, at| keep(ip, *at));
        m.former.retain(|ip, (_, at)| keep(ip, *at));
        let removed_at = &m.removed_at;
        m.probed
            .retain(|ip| open.contains(ip) || removed_at.contains_key(ip));
        m.changes
            .retain(|c| c.received >= horizon || c.removed.iter().any(|ip| open.contains(ip)));
    }

    /// Services with recent changes and nothing left to measure (their probing may stop).
    pub fn idle_services(&self) -> Vec<ServiceKey> {
        let busy: BTreeSet<&ServiceKey> =
            self.engine.open_trackings().map(|t| &t.service).collect();
        self.memory
            .changes
            .iter()
            .filter_map(|c| c.service.split_once('/'))
            .map(|(ns, n)| ServiceKey::new(ns, n))
            .filter(|k| !busy.contains(k))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The former owner of an IP, as far as this session saw.
    pub fn former_pod(&self, ip: IpAddr) -> Option<String> {
        self.memory.former.get(&ip).map(|(pod, _)| pod.clone())
    }

    /// The pod behind `ip` among `service`'s endpoints now, else its former owner as far as
    /// this session saw (`namespace/name`).
    pub fn endpoint_pod(&self, service: &ServiceKey, ip: IpAddr) -> Option<String> {
        self.truth
            .slices_of(service)
            .find_map(|s| {
                let e = s.endpoints.iter().find(|e| e.ip() == ip)?;
                s.pod(e).map(|p| p.to_string())
            })
            .or_else(|| self.former_pod(ip))
    }

    /// When an IP left a layer-wide desired set during the session.
    pub fn removed_at(&self, ip: IpAddr) -> Option<Time> {
        self.memory.removed_at.get(&ip).copied()
    }

    /// Truth changes recorded since the first sync.
    pub fn changes(&self) -> &[ChangeRow] {
        &self.memory.changes
    }

    /// Facts about each path for reports, from the layers that know them.
    pub fn path_facts(&self) -> BTreeMap<PathIdx, PathFacts> {
        let mut m = BTreeMap::new();
        for layer in &self.layers {
            layer.path_facts(&self.engine, &mut m);
        }
        m
    }

    /// The per (path, IP) timeline.
    pub fn timeline(&self) -> Vec<TimelineRow> {
        let paths: BTreeMap<PathIdx, String> = self
            .engine
            .paths()
            .map(|(i, p)| (i, p.id.clone()))
            .collect();
        self.timeline
            .iter()
            .filter_map(|((idx, ip), segs)| {
                let path = paths.get(idx)?.clone();
                Some(TimelineRow {
                    path,
                    ip: *ip,
                    removed: self.memory.removed_at.contains_key(ip),
                    removed_at: self.memory.removed_at.get(ip).copied(),
                    died_at: self.engine.death(*ip).map(|d| d.since),
                    segments: segs.clone(),
                })
            })
            .collect()
    }

    /// Stale trackings open now, per path.
    pub fn stale_now(&self) -> HashMap<PathIdx, usize> {
        self.engine.stale_now()
    }

    /// Counts of open (unconverged) stale trackings.
    pub fn unconverged_stale(&self) -> usize {
        self.engine
            .open_trackings()
            .filter(|t| t.kind == Discrepancy::Stale && t.converged_by.is_none())
            .count()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::layers::dns::DNS_NODE_LOCAL;
    use crate::layers::dns::paths::PathConfig;
    use crate::layers::dns::{DnsConfig, DnsModel, MIN_DNS_LAG};
    use crate::truth_event::{ConfigMapRef, ResourceKind};
    use ghostip_core::truth::SliceRecord;
    use ghostip_core::{HeldTarget, PathKind, PodRef, Target};

    const CLASSIC: &str = "\
.:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
}
";

    const NODE_LOCAL: &str = "\
cluster.local:53 {
    errors
    cache {
        success 9984 30
        denial 9984 5
    }
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . 10.96.0.11 {
        force_tcp
    }
}
";

    /// A rollout's change as the DNS layer records it (the IP as an A target and as each SRV
    /// port's), and again by a second layer: one row, each IP once; another moment or Service
    /// is another row.
    #[test]
    fn a_change_lists_each_ip_once() {
        let t = Time::from_second(1_800_000_000).unwrap();
        let web = ServiceKey::new("demo", "web");
        let (a, b): (IpAddr, IpAddr) =
            ("10.244.1.7".parse().unwrap(), "10.244.2.9".parse().unwrap());
        let mut m = ChangeMemory::default();
        let at = ChangeTime::received_at(t);
        m.record_change(&web, at, &[a, a, b], &[], true);
        m.record_change(&web, at, &[b, a], &[], true);
        m.record_change(&web, at, &[], &[b], true);
        assert_eq!(m.changes.len(), 1);
        assert_eq!(m.changes[0].removed, vec![a, b]);
        assert_eq!(m.changes[0].added, vec![b]);
        m.record_change(&ServiceKey::new("demo", "web-cip"), at, &[a], &[], true);
        let later = ChangeTime::received_at(t.checked_add(Duration::from_secs(1)).unwrap());
        m.record_change(&web, later, &[a], &[], true);
        m.record_change(&web, later, &[a], &[], false);
        assert_eq!(m.changes.len(), 3);
    }

    fn session() -> (Session, Time) {
        let t = Time::from_second(1_800_000_000).unwrap();
        let kinds = vec![ResourceKind::EndpointSlices, ResourceKind::Services];
        let dns = DnsModel::new(DnsConfig {
            paths: PathConfig {
                node_local: Some("169.254.20.10:53".parse().unwrap()),
                cluster_ip: false,
                ..PathConfig::default()
            },
            ..DnsConfig::default()
        });
        let mut s = Session::new(SessionConfig::default(), SyncState::new(t, kinds.clone()))
            .with_layer(dns);
        for k in kinds {
            s.on_truth(&Received {
                at: t,
                event: TruthEvent::Init(k.clone()),
            });
            s.on_truth(&Received {
                at: t,
                event: TruthEvent::InitDone(k),
            });
        }
        (s, t)
    }

    fn corefile(s: &mut Session, t: Time, name: &str, text: &str) {
        s.on_truth(&Received {
            at: t,
            event: TruthEvent::Apply(TruthObject::Corefile {
                configmap: ConfigMapRef::new("kube-system", name),
                text: text.into(),
            }),
        });
    }

    /// What the DNS layer made of the coredns ConfigMap.
    fn coredns_lag(s: &Session) -> ghostip_core::corefile::ExpectedLag {
        s.layer::<DnsModel>()
            .unwrap()
            .expected_lag()
            .unwrap()
            .unwrap()
            .clone()
    }

    fn lag_of(s: &Session, kind: PathKind) -> Duration {
        s.engine
            .paths()
            .find(|(_, p)| p.kind == kind)
            .and_then(|(i, _)| s.engine.expected_lag(i))
            .expect("a path of that kind")
    }

    /// A Corefile that caches no cluster name still gives a DNS path the least lag CoreDNS's
    /// informer needs ([`MIN_DNS_LAG`]), not 0 s.
    #[test]
    fn a_corefile_without_a_cluster_cache_gives_the_least_dns_lag() {
        let (mut s, t) = session();
        corefile(
            &mut s,
            t,
            "coredns",
            &CLASSIC.replace(
                "cache 30",
                "cache 30 {\n        disable success cluster.local\n        disable denial cluster.local\n    }",
            ),
        );
        let coredns = coredns_lag(&s);
        assert_eq!(coredns.cache_lag, Duration::ZERO);
        assert_eq!(lag_of(&s, DNS_NODE_LOCAL), MIN_DNS_LAG);
        corefile(&mut s, t, "coredns", CLASSIC);
        assert_eq!(lag_of(&s, DNS_NODE_LOCAL), Duration::from_secs(30));
    }

    #[test]
    fn node_local_paths_add_their_own_cache_to_coredns_lag() {
        let (mut s, t) = session();
        assert!(s.synced());
        corefile(&mut s, t, "coredns", CLASSIC);
        let coredns = coredns_lag(&s);
        // Before NodeLocal DNSCache's Corefile is known, its path gets CoreDNS's lag.
        assert_eq!(lag_of(&s, DNS_NODE_LOCAL), coredns.cache_lag);
        corefile(&mut s, t, "node-local-dns", NODE_LOCAL);
        let node_local = lag_of(&s, DNS_NODE_LOCAL);
        // CoreDNS hands out the remaining TTL of its cached entry, so NodeLocal's copy
        // expires with it, plus up to NodeLocal's own 5 s minimum TTL.
        assert_eq!(coredns.cache_lag, Duration::from_secs(30));
        assert_eq!(node_local, Duration::from_secs(35));
        let facts = s.path_facts();
        let nl = s
            .engine
            .paths()
            .find(|(_, p)| p.kind == DNS_NODE_LOCAL)
            .map(|(i, _)| i)
            .unwrap();
        assert!(facts[&nl].notes[0].contains("node-local-dns"), "{facts:?}");
        // A later CoreDNS change updates the NodeLocal path too.
        corefile(
            &mut s,
            t,
            "coredns",
            &CLASSIC.replace("cache 30", "cache 5"),
        );
        assert!(lag_of(&s, DNS_NODE_LOCAL) < node_local);
    }

    fn headless_slice(ips: &[&str]) -> SliceRecord {
        SliceRecord {
            namespace: "prod".into(),
            name: "web-abc".into(),
            service: "web".into(),
            address_type: ghostip_core::truth::AddressType::IPv4,
            endpoints: ips
                .iter()
                .enumerate()
                .map(|(i, ip)| ghostip_core::truth::EndpointRecord {
                    ip: ip.parse().unwrap(),
                    ready: true,
                    serving: true,
                    terminating: false,
                    pod: Some(PodRef {
                        namespace: "prod".into(),
                        name: format!("web-{i}"),
                        uid: format!("uid-{ip}"),
                    }),
                    node: Some("node-1".into()),
                    hostname: None,
                })
                .collect(),
            ports: Vec::new(),
            trigger_time: None,
        }
    }

    /// An added endpoint's pod comes from the truth (it has no former owner); a removed
    /// one's from the session's memory.
    #[test]
    fn an_endpoint_pod_is_named_from_the_truth_or_the_former_owner() {
        let (mut s, t) = session();
        let key = ServiceKey::new("prod", "web");
        let slice = |ips: &[&str], at: Time| Received {
            at,
            event: TruthEvent::Apply(TruthObject::Slice(headless_slice(ips))),
        };
        s.on_truth(&slice(&["10.244.1.5", "10.244.2.6"], t));
        let t1 = t.checked_add(Duration::from_secs(10)).unwrap();
        s.on_truth(&slice(&["10.244.2.6"], t1));
        let added: IpAddr = "10.244.2.6".parse().unwrap();
        let gone: IpAddr = "10.244.1.5".parse().unwrap();
        assert_eq!(s.former_pod(added), None);
        assert_eq!(s.endpoint_pod(&key, added).as_deref(), Some("prod/web-0"));
        assert_eq!(s.endpoint_pod(&key, gone).as_deref(), Some("prod/web-0"));
        assert_eq!(s.endpoint_pod(&ServiceKey::new("prod", "api"), added), None);
    }

    #[test]
    fn a_long_watch_forgets_changes_older_than_change_memory() {
        let (mut s, t) = session();
        let key = ServiceKey::new("prod", "web");
        s.on_truth(&Received {
            at: t,
            event: TruthEvent::Apply(TruthObject::Service(
                ghostip_testkit::records::headless_service(key.clone()),
            )),
        });
        let slice = |ips: &[&str], at: Time| Received {
            at,
            event: TruthEvent::Apply(TruthObject::Slice(headless_slice(ips))),
        };
        s.on_truth(&slice(&["10.244.1.5", "10.244.2.6"], t));
        let t1 = t.checked_add(Duration::from_secs(10)).unwrap();
        s.on_truth(&slice(&["10.244.2.6"], t1));
        let gone: IpAddr = "10.244.1.5".parse().unwrap();
        // The arrival of both endpoints, then the removal of one.
        assert_eq!(s.changes().len(), 2);
        assert_eq!(s.former_pod(gone).as_deref(), Some("prod/web-0"));
        // Every path converges: it answers with the remaining endpoint only.
        let t2 = t1.checked_add(Duration::from_secs(2)).unwrap();
        let paths: Vec<PathIdx> = s.engine.paths().map(|(i, _)| i).collect();
        for path in paths {
            let _ = s.engine.observe(&Observation {
                path,
                service: key.clone(),
                at: t2,
                result: ObservationResult::Held(vec![HeldTarget {
                    target: Target::ip("10.244.2.6".parse().unwrap()),
                    ttl: Some(30),
                    last_used: None,
                }]),
                latency: None,
            });
        }
        // Within the change memory everything is kept ...
        let _ = s.tick(t1.checked_add(Duration::from_secs(1800)).unwrap());
        assert_eq!(s.engine.open_trackings().count(), 0);
        assert_eq!(s.changes().len(), 2);
        assert!(s.former_pod(gone).is_some());
        // ... after it, nothing (no tracking is open for the IP).
        let later = t1
            .checked_add(s.engine.config().change_memory + Duration::from_secs(120))
            .unwrap();
        let _ = s.tick(later);
        assert!(s.changes().is_empty());
        assert_eq!(s.former_pod(gone), None);
        assert!(s.memory.removed_at.is_empty() && s.memory.probed.is_empty());
    }

    #[test]
    fn only_removed_endpoints_get_a_former_owner() {
        let (mut s, t) = session();
        let key = ServiceKey::new("prod", "web");
        let applied = |slice: SliceRecord| Received {
            at: t,
            event: TruthEvent::Apply(TruthObject::Slice(slice)),
        };
        let named = |name: &str, ips: &[&str]| SliceRecord {
            name: name.into(),
            ..headless_slice(ips)
        };
        s.on_truth(&applied(named("web-abc", &["10.244.1.5", "10.244.2.6"])));
        // A second slice of the same Service (the EndpointSlice controller's empty one next to
        // a mirrored one, say) removes nothing.
        s.on_truth(&applied(named("web-def", &[])));
        assert!(s.memory.former.is_empty(), "{:?}", s.memory.former);
        // An endpoint moving to the other slice is not removed either.
        s.on_truth(&applied(named("web-def", &["10.244.2.6"])));
        s.on_truth(&applied(named("web-abc", &["10.244.1.5"])));
        assert!(s.memory.former.is_empty(), "{:?}", s.memory.former);
        // Deleting a slice removes its endpoints.
        s.on_truth(&Received {
            at: t,
            event: TruthEvent::Delete(TruthKey::Slice {
                namespace: "prod".into(),
                name: "web-abc".into(),
            }),
        });
        let gone: IpAddr = "10.244.1.5".parse().unwrap();
        assert_eq!(s.former_pod(gone).as_deref(), Some("prod/web-0"));
        assert_eq!(s.memory.former.len(), 1);
        assert!(
            s.truth
                .endpoint(&key, "10.244.2.6".parse().unwrap())
                .is_some()
        );
    }
}
