//! One observation session: the truth, the engine, the DNS paths and the recorder, fed by events.
//!
//! `watch`, `rollout` and `check` all run a session; they differ in how long it lives and
//! what they do with its events. The session itself does no IO: it turns truth events and
//! probe events into engine calls and into [`ProbeCommand`]s for the prober.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ghostip_core::corefile::{Corefile, ExpectedLag};
use ghostip_core::engine::{Death, DeathSource, Discrepancy, Engine, EngineConfig, EngineEvent};
use ghostip_core::truth::{PodRecord, ServiceChange, Truth};
use ghostip_core::{
    ChangeTime, Layer, ObservationResult, PathIdx, PathKind, Protocol, ServiceKey, Target, Time,
};

use crate::dns::names::{NameConfig, service_names, sweep_names};
use crate::dns::paths::{DnsPath, PathConfig, diff_with_truth};
use crate::dns::prober::{ProbeCommand, ProbeEvent, ProbePath};
use crate::kube::{Received, SyncState, SyncTransition, TruthEvent, apply_to_truth};
use crate::report::{ChangeRow, PathFacts, Segment, TimelineRow};

/// Which services a session looks at.
#[derive(Clone, Debug, Default)]
pub struct ServiceFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only these services (rollout: the workload's services).
    pub only: Option<BTreeSet<ServiceKey>>,
    /// Label selector terms `(key, Some(value) | None for existence, negated)`.
    pub selector: Vec<(String, Option<String>, bool)>,
}

impl ServiceFilter {
    /// Parses a `-l` selector (`a=b,c!=d,e,!f`).
    pub fn parse_selector(sel: &str) -> Vec<(String, Option<String>, bool)> {
        sel.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                if let Some((k, v)) = t.split_once("!=") {
                    (k.trim().to_string(), Some(v.trim().to_string()), true)
                } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                    (k.trim().to_string(), Some(v.trim().to_string()), false)
                } else if let Some(k) = t.strip_prefix('!') {
                    (k.trim().to_string(), None, true)
                } else {
                    (t.to_string(), None, false)
                }
            })
            .collect()
    }

    fn matches(&self, truth: &Truth, key: &ServiceKey) -> bool {
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| ns != &key.namespace)
        {
            return false;
        }
        if self.only.as_ref().is_some_and(|only| !only.contains(key)) {
            return false;
        }
        let Some(svc) = truth.service(key) else {
            return false;
        };
        self.selector.iter().all(|(k, v, neg)| {
            let hit = match v {
                Some(v) => svc.labels.get(k) == Some(v),
                None => svc.labels.contains_key(k),
            };
            hit != *neg
        })
    }
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// DNS path discovery.
    pub paths: PathConfig,
    /// DNS names.
    pub names: NameConfig,
    /// Services of interest.
    pub filter: ServiceFilter,
    /// Engine tunables.
    pub engine: EngineConfig,
    /// Keep a per-observation timeline (rollout reports).
    pub record_timeline: bool,
    /// Longest a burst runs after a change.
    pub burst_limit: Duration,
}

/// A removed IP the caller should connect-probe to measure exposure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Address to probe.
    pub target: SocketAddr,
    /// Stop probing after this long.
    pub for_at_most: Duration,
}

/// What a session step asks the caller to do.
#[derive(Debug, Default)]
pub struct Actions {
    /// Commands for the DNS prober.
    pub probe: Vec<ProbeCommand>,
    /// Connect probes to start.
    pub connect: Vec<ConnectRequest>,
    /// Engine events (for the ledger, metrics and live progress).
    pub events: Vec<EngineEvent>,
    /// Truth sync transitions (gaps).
    pub sync: Vec<SyncTransition>,
    /// The Services whose endpoints the truth event changed (all of them, filter or not).
    pub changes: Vec<ServiceChange>,
}

/// The session.
pub struct Session {
    cfg: SessionConfig,
    /// The truth.
    pub truth: Truth,
    /// The engine.
    pub engine: Engine,
    sync: SyncState,
    synced_once: bool,
    corefile: Option<(String, ExpectedLag)>,
    corefile_error: Option<String>,
    /// NodeLocal DNSCache's Corefile (`kube-system/node-local-dns`), when the cluster has one.
    node_local_corefile: Option<(String, Corefile)>,
    paths: Vec<DnsPath>,
    path_idx: BTreeMap<String, PathIdx>,
    /// Former owner of IPs removed during the session (not every pod: memory stays
    /// proportional to changes, not to the cluster), with when it was noted.
    former: HashMap<IpAddr, (String, Time)>,
    /// IPs whose death is measured by a connect probe (estimates are not used for them).
    probed: BTreeSet<IpAddr>,
    /// IPs removed from the DNS truth during the session, with when.
    removed_at: HashMap<IpAddr, Time>,
    changes: Vec<ChangeRow>,
    timeline: BTreeMap<(PathIdx, IpAddr), Vec<Segment>>,
    last_obs: HashMap<(PathIdx, ServiceKey), Time>,
    /// When old changes were last forgotten.
    last_forget: Option<Time>,
    /// Bursts run at least until then (a rollout probes its services until it ends).
    pub min_burst_until: Option<tokio::time::Instant>,
}

impl Session {
    /// A session with the given watches to wait for.
    pub fn new(cfg: SessionConfig, sync: SyncState) -> Self {
        Self {
            engine: Engine::new(cfg.engine.clone()),
            cfg,
            truth: Truth::new(),
            sync,
            synced_once: false,
            corefile: None,
            corefile_error: None,
            node_local_corefile: None,
            paths: Vec::new(),
            path_idx: BTreeMap::new(),
            former: HashMap::new(),
            probed: BTreeSet::new(),
            removed_at: HashMap::new(),
            changes: Vec::new(),
            timeline: BTreeMap::new(),
            last_obs: HashMap::new(),
            last_forget: None,
            min_burst_until: None,
        }
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

    /// The Corefile's expected lag, if one was seen, and why it is missing otherwise.
    pub fn expected_lag(&self) -> Result<Option<&ExpectedLag>, &str> {
        match (&self.corefile, &self.corefile_error) {
            (Some((_, lag)), _) => Ok(Some(lag)),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(None),
        }
    }

    /// Headless services in scope.
    pub fn services(&self) -> Vec<ServiceKey> {
        self.truth
            .services()
            .filter(|s| s.headless && s.has_selector)
            .map(|s| s.key.clone())
            .filter(|k| self.cfg.filter.matches(&self.truth, k))
            .collect()
    }

    /// The current DNS paths.
    pub fn dns_paths(&self) -> &[DnsPath] {
        &self.paths
    }

    fn lag_for_paths(&self) -> Duration {
        self.corefile
            .as_ref()
            .map_or(Duration::from_secs(5), |(_, l)| l.cache_lag)
    }

    /// NodeLocal DNSCache's expected lag: its own cache in front of the cluster's CoreDNS.
    fn node_local_lag(&self) -> Option<(String, ExpectedLag)> {
        let (name, corefile) = self.node_local_corefile.as_ref()?;
        let upstream = self.corefile.as_ref().map(|(_, l)| l);
        match corefile.expected_lag_behind(&self.cfg.names.zone, upstream) {
            Ok(lag) => Some((name.clone(), lag)),
            Err(e) => {
                tracing::warn!(configmap = %name, error = %e, "NodeLocal DNSCache lag unknown");
                None
            }
        }
    }

    /// The expected lag of one path: NodeLocal DNSCache paths add their own cache.
    fn lag_for(&self, kind: PathKind) -> Duration {
        match (kind, self.node_local_lag()) {
            (PathKind::DnsNodeLocal, Some((_, l))) => l.cache_lag,
            _ => self.lag_for_paths(),
        }
    }

    fn update_lags(&mut self) {
        let lags: Vec<(PathIdx, Duration)> = self
            .paths
            .iter()
            .filter_map(|p| {
                let idx = self.path_idx.get(p.id())?;
                Some((*idx, self.lag_for(p.info.kind)))
            })
            .collect();
        for (idx, lag) in lags {
            self.engine.set_expected_lag(idx, lag);
        }
    }

    fn desired_dns(&self, key: &ServiceKey) -> BTreeSet<Target> {
        // IPv4 only, to match the A answers the engine is fed (see `on_probe`).
        self.truth
            .dns_answers(key)
            .into_iter()
            .filter(IpAddr::is_ipv4)
            .map(Target::ip)
            .collect()
    }

    /// Handles one truth event.
    pub fn on_truth(&mut self, r: &Received) -> Actions {
        let mut actions = Actions::default();
        match &r.event {
            TruthEvent::PodApplied(pod) => self.on_pod(pod, r.at, &mut actions),
            // A deleted pod's IPs were already dated by deletion + preStop (PodApplied).
            TruthEvent::Corefile { configmap, text } if configmap.name == "coredns" => {
                match Corefile::parse(text).and_then(|c| c.expected_lag(&self.cfg.names.zone)) {
                    Ok(lag) => {
                        self.corefile = Some((configmap.to_string(), lag));
                        self.corefile_error = None;
                    }
                    Err(e) => self.corefile_error = Some(format!("{configmap}: {e}")),
                }
                self.update_lags();
            }
            TruthEvent::Corefile { configmap, text } if configmap.name == "node-local-dns" => {
                match Corefile::parse(text) {
                    Ok(c) => self.node_local_corefile = Some((configmap.to_string(), c)),
                    Err(e) => {
                        self.node_local_corefile = None;
                        tracing::warn!(%configmap, error = %e, "NodeLocal DNSCache Corefile not understood");
                    }
                }
                self.update_lags();
            }
            _ => {}
        }
        // Owners of the endpoints a slice event may remove, read before the truth forgets them.
        let owners = self.owners_before(&r.event);
        // Service labels only serve `-l`: without a selector the truth does not keep them
        // (a BTreeMap node per Service is 5 MB at 10 k Services).
        let unlabeled;
        let r = match &r.event {
            TruthEvent::ServiceApplied(svc)
                if self.cfg.filter.selector.is_empty() && !svc.labels.is_empty() =>
            {
                let mut svc = svc.clone();
                svc.labels = BTreeMap::new();
                unlabeled = Received {
                    at: r.at,
                    event: TruthEvent::ServiceApplied(svc),
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
                self.former
                    .entry(*ip)
                    .or_insert_with(|| (pod.clone(), r.at));
            }
            if c.service == self.cfg.paths.dns_service {
                self.refresh_paths(r.at, &mut actions);
            }
            if !self.cfg.filter.matches(&self.truth, &c.service)
                && self
                    .engine
                    .desired(Layer::Dns, &c.service)
                    .is_none_or(|d| d.is_empty())
            {
                continue;
            }
            self.set_desired(&c.service, c.at, &mut actions);
        }
        if let Some(t) = self.sync.observe(r) {
            match &t {
                SyncTransition::GapStarted { at, .. } => self.engine.truth_gap(*at),
                SyncTransition::GapEnded { .. } => {
                    if self.sync.truth_synced() {
                        if !self.synced_once {
                            self.synced_once = true;
                            tracing::info!(
                                services = self.truth.services().count(),
                                slices = self.truth.slice_count(),
                                removed_while_listing = self.former.len(),
                                "truth synced"
                            );
                            self.refresh_paths(r.at, &mut actions);
                            actions.probe.push(ProbeCommand::SetSweep(self.sweep()));
                        }
                        self.engine.truth_synced(r.at);
                    }
                }
            }
            actions.sync.push(t);
        }
        actions.changes = changes;
        actions
    }

    fn sweep(&self) -> Vec<crate::dns::names::ServiceNames> {
        let wanted: BTreeSet<ServiceKey> = self.services().into_iter().collect();
        sweep_names(&self.truth, &self.cfg.names)
            .into_iter()
            .filter(|s| wanted.contains(&s.service))
            .collect()
    }

    fn set_desired(&mut self, key: &ServiceKey, at: ChangeTime, actions: &mut Actions) {
        let desired = self.desired_dns(key);
        let old: BTreeSet<Target> = self
            .engine
            .desired(Layer::Dns, key)
            .map(|d| d.iter().collect())
            .unwrap_or_default();
        let events = self
            .engine
            .set_desired(Layer::Dns, key, desired.clone(), at);
        if old == desired {
            return;
        }
        let removed: Vec<IpAddr> = old.difference(&desired).map(|t| t.ip).collect();
        let added: Vec<IpAddr> = desired.difference(&old).map(|t| t.ip).collect();
        for ip in &removed {
            self.removed_at.insert(*ip, at.t0);
        }
        if self.synced_once {
            self.changes.push(ChangeRow {
                at: at.t0,
                received: at.received,
                service: key.to_string(),
                added: added.clone(),
                removed: removed.clone(),
            });
        }
        if !events.is_empty() {
            if let Ok(names) = service_names(&self.truth, key, &self.cfg.names) {
                let mut until = tokio::time::Instant::now() + self.burst_duration();
                if let Some(min) = self.min_burst_until {
                    until = until.max(min);
                }
                actions.probe.push(ProbeCommand::Burst {
                    service: key.clone(),
                    names,
                    until,
                });
            }
            // Exposure: connect-probe removed endpoints on their first TCP port.
            if let Some(port) = self.tcp_port(key) {
                for ip in &removed {
                    self.probed.insert(*ip);
                    actions.connect.push(ConnectRequest {
                        target: SocketAddr::new(*ip, port),
                        for_at_most: self.burst_duration(),
                    });
                }
            }
        }
        actions.events.extend(events);
    }

    fn burst_duration(&self) -> Duration {
        // Long enough to see the slowest path converge, bounded so probing always ends.
        let lag = self.lag_for_paths();
        (lag * 3 + Duration::from_secs(15)).min(self.cfg.burst_limit)
    }

    fn tcp_port(&self, key: &ServiceKey) -> Option<u16> {
        self.truth
            .slices_of(key)
            .flat_map(|s| s.ports.iter())
            .find(|p| p.protocol == Protocol::Tcp)
            .map(|p| p.port)
    }

    /// Owners of the endpoints an event may remove from their Service, read before the truth
    /// forgets them: those of the stored slice that its new version no longer lists (all of
    /// them when the slice is deleted or moves to another Service). Nothing on the initial
    /// list, where every slice is new.
    fn owners_before(&self, ev: &TruthEvent) -> Vec<(IpAddr, (ServiceKey, String))> {
        let (old, new) = match ev {
            TruthEvent::SliceApplied(s) => match self.truth.slice(&s.namespace, &s.name) {
                Some(old) if old.service == s.service => (old, Some(s)),
                Some(old) => (old, None),
                None => return Vec::new(),
            },
            TruthEvent::SliceDeleted { namespace, name } => match self.truth.slice(namespace, name)
            {
                Some(old) => (old, None),
                None => return Vec::new(),
            },
            _ => return Vec::new(),
        };
        let key = old.service_key();
        old.endpoints
            .iter()
            .filter(|e| new.is_none_or(|n| !n.endpoints.iter().any(|ne| ne.ip == e.ip())))
            .filter_map(|e| old.pod(e).map(|p| (e.ip(), (key.clone(), p.to_string()))))
            .collect()
    }

    fn on_pod(&mut self, pod: &PodRecord, _at: Time, _actions: &mut Actions) {
        if pod.host_network {
            return;
        }
        for ip in &pod.ips {
            if let Some(del) = pod.deletion {
                // Estimated death: deletion + preStop (the container keeps serving during preStop).
                let since = del
                    .checked_add(Duration::from_secs(pod.prestop_seconds.unwrap_or(0)))
                    .unwrap_or(del);
                if !self.probed.contains(ip) {
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

    fn refresh_paths(&mut self, _at: Time, actions: &mut Actions) {
        let diff = diff_with_truth(&self.paths, &self.truth, &self.cfg.paths);
        if diff.is_empty() && !self.paths.is_empty() {
            return;
        }
        for p in diff.removed {
            if let Some(idx) = self.path_idx.remove(p.id()) {
                actions.events.extend(self.engine.remove_path(idx));
            }
            self.paths.retain(|q| q.id() != p.id());
        }
        for p in diff.added.into_iter().chain(diff.changed) {
            let idx = self
                .engine
                .add_path(p.info.clone(), self.lag_for(p.info.kind));
            self.path_idx.insert(p.id().to_string(), idx);
            self.paths.retain(|q| q.id() != p.id());
            self.paths.push(p);
        }
        let probe_paths: Vec<ProbePath> = self
            .paths
            .iter()
            .filter_map(|p| {
                self.path_idx.get(p.id()).map(|idx| ProbePath {
                    idx: *idx,
                    path: p.clone(),
                })
            })
            .collect();
        actions.probe.push(ProbeCommand::SetPaths(probe_paths));
    }

    /// Handles one probe event.
    pub fn on_probe(&mut self, ev: &ProbeEvent) -> Vec<EngineEvent> {
        // The DNS truth is compared with A answers (IPv4); AAAA and SRV answers hold other
        // families or ports and would look like missing or stale endpoints.
        if ev.probe.qtype != crate::dns::query::QueryType::A {
            return Vec::new();
        }
        let o = &ev.observation;
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
        self.engine.observe(o)
    }

    /// Advances time.
    pub fn tick(&mut self, now: Time) -> Vec<EngineEvent> {
        let events = self.engine.tick(now);
        self.forget_old_changes(now);
        events
    }

    /// Forgets changes, removal times and former owners older than the engine's
    /// `change_memory`, except for IPs a tracking is still open for: a long-running `watch`
    /// stays proportional to recent changes, not to every change it ever saw.
    fn forget_old_changes(&mut self, now: Time) {
        let Some(horizon) = self.engine.change_horizon(&mut self.last_forget, now) else {
            return;
        };
        let open: HashSet<IpAddr> = self.engine.open_trackings().map(|t| t.target.ip).collect();
        let keep = |ip: &IpAddr, at: Time| at >= horizon || open.contains(ip);
        self.removed_at.retain(|ip, at| keep(ip, *at));
        self.former.retain(|ip, (_, at)| keep(ip, *at));
        self.probed
            .retain(|ip| open.contains(ip) || self.removed_at.contains_key(ip));
        self.changes
            .retain(|c| c.received >= horizon || c.removed.iter().any(|ip| open.contains(ip)));
    }

    /// Stop bursts for services with nothing left to measure.
    pub fn idle_services(&self) -> Vec<ServiceKey> {
        let busy: BTreeSet<&ServiceKey> =
            self.engine.open_trackings().map(|t| &t.service).collect();
        self.changes
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
        self.former.get(&ip).map(|(pod, _)| pod.clone())
    }

    /// Truth changes recorded since the first sync.
    pub fn changes(&self) -> &[ChangeRow] {
        &self.changes
    }

    /// Facts about each path for reports.
    pub fn path_facts(&self) -> BTreeMap<PathIdx, PathFacts> {
        let mut m = BTreeMap::new();
        let node_local = self.node_local_lag();
        for p in &self.paths {
            let Some(idx) = self.path_idx.get(p.id()) else {
                continue;
            };
            let own = match (&node_local, p.info.kind) {
                (Some((name, lag)), PathKind::DnsNodeLocal) => Some((name, lag)),
                _ => None,
            };
            let f = match own.or(self.corefile.as_ref().map(|(n, l)| (n, l))) {
                Some((name, lag)) => PathFacts {
                    client_ttl: Some(lag.client_ttl),
                    notes: std::iter::once(format!("from {name}"))
                        .chain(lag.notes.iter().cloned())
                        .collect(),
                },
                None => PathFacts {
                    client_ttl: None,
                    notes: vec![self.corefile_error.clone().unwrap_or_else(|| {
                        "no Corefile seen: assumed the kubernetes plugin's default TTL of 5 s"
                            .into()
                    })],
                },
            };
            m.insert(*idx, f);
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
                    removed: self.removed_at.contains_key(ip),
                    removed_at: self.removed_at.get(ip).copied(),
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
    use crate::kube::{ConfigMapRef, ResourceKind};
    use ghostip_core::truth::{ServiceRecord, SliceRecord};
    use ghostip_core::{HeldTarget, Observation, ObservationResult, PodRef, Target};

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

    fn session() -> (Session, Time) {
        let t = Time::from_second(1_800_000_000).unwrap();
        let kinds = vec![ResourceKind::EndpointSlices, ResourceKind::Services];
        let cfg = SessionConfig {
            paths: PathConfig {
                node_local: Some("169.254.20.10:53".parse().unwrap()),
                cluster_ip: false,
                ..PathConfig::default()
            },
            names: NameConfig::default(),
            filter: ServiceFilter::default(),
            engine: EngineConfig::default(),
            record_timeline: false,
            burst_limit: Duration::from_secs(600),
        };
        let mut s = Session::new(cfg, SyncState::new(t, kinds.clone()));
        for k in kinds {
            s.on_truth(&Received {
                at: t,
                event: TruthEvent::RelistStarted(k.clone()),
            });
            s.on_truth(&Received {
                at: t,
                event: TruthEvent::RelistDone(k.clone()),
            });
            s.on_truth(&Received {
                at: t,
                event: TruthEvent::Synced(k),
            });
        }
        (s, t)
    }

    fn corefile(s: &mut Session, t: Time, name: &str, text: &str) {
        s.on_truth(&Received {
            at: t,
            event: TruthEvent::Corefile {
                configmap: ConfigMapRef::new("kube-system", name),
                text: text.into(),
            },
        });
    }

    fn lag_of(s: &Session, kind: PathKind) -> Duration {
        s.engine
            .paths()
            .find(|(_, p)| p.kind == kind)
            .and_then(|(i, _)| s.engine.expected_lag(i))
            .expect("a path of that kind")
    }

    #[test]
    fn node_local_paths_add_their_own_cache_to_coredns_lag() {
        let (mut s, t) = session();
        assert!(s.synced());
        corefile(&mut s, t, "coredns", CLASSIC);
        let coredns = s.expected_lag().unwrap().unwrap().clone();
        // Before NodeLocal DNSCache's Corefile is known, its path gets CoreDNS's lag.
        assert_eq!(lag_of(&s, PathKind::DnsNodeLocal), coredns.cache_lag);
        corefile(&mut s, t, "node-local-dns", NODE_LOCAL);
        let node_local = lag_of(&s, PathKind::DnsNodeLocal);
        // CoreDNS hands out the remaining TTL of its cached entry, so NodeLocal's copy
        // expires with it, plus up to NodeLocal's own 5 s minimum TTL.
        assert_eq!(coredns.cache_lag, Duration::from_secs(30));
        assert_eq!(node_local, Duration::from_secs(35));
        let facts = s.path_facts();
        let nl = s
            .engine
            .paths()
            .find(|(_, p)| p.kind == PathKind::DnsNodeLocal)
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
        assert!(lag_of(&s, PathKind::DnsNodeLocal) < node_local);
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

    #[test]
    fn a_long_watch_forgets_changes_older_than_change_memory() {
        let (mut s, t) = session();
        let key = ServiceKey::new("prod", "web");
        s.on_truth(&Received {
            at: t,
            event: TruthEvent::ServiceApplied(ServiceRecord {
                key: key.clone(),
                cluster_ips: Vec::new(),
                headless: true,
                service_type: "ClusterIP".into(),
                publish_not_ready: false,
                internal_traffic_policy: Default::default(),
                external_traffic_policy: Default::default(),
                ports: Vec::new(),
                has_selector: true,
                labels: BTreeMap::new(),
            }),
        });
        let slice = |ips: &[&str], at: Time| Received {
            at,
            event: TruthEvent::SliceApplied(headless_slice(ips)),
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
        assert!(s.removed_at.is_empty() && s.probed.is_empty());
    }

    #[test]
    fn only_removed_endpoints_get_a_former_owner() {
        let (mut s, t) = session();
        let key = ServiceKey::new("prod", "web");
        let applied = |slice: SliceRecord| Received {
            at: t,
            event: TruthEvent::SliceApplied(slice),
        };
        let named = |name: &str, ips: &[&str]| SliceRecord {
            name: name.into(),
            ..headless_slice(ips)
        };
        s.on_truth(&applied(named("web-abc", &["10.244.1.5", "10.244.2.6"])));
        // A second slice of the same Service (the EndpointSlice controller's empty one next to
        // a mirrored one, say) removes nothing.
        s.on_truth(&applied(named("web-def", &[])));
        assert!(s.former.is_empty(), "{:?}", s.former);
        // An endpoint moving to the other slice is not removed either.
        s.on_truth(&applied(named("web-def", &["10.244.2.6"])));
        s.on_truth(&applied(named("web-abc", &["10.244.1.5"])));
        assert!(s.former.is_empty(), "{:?}", s.former);
        // Deleting a slice removes its endpoints.
        s.on_truth(&Received {
            at: t,
            event: TruthEvent::SliceDeleted {
                namespace: "prod".into(),
                name: "web-abc".into(),
            },
        });
        let gone: IpAddr = "10.244.1.5".parse().unwrap();
        assert_eq!(s.former_pod(gone).as_deref(), Some("prod/web-0"));
        assert_eq!(s.former.len(), 1);
        assert!(
            s.truth
                .endpoint(&key, "10.244.2.6".parse().unwrap())
                .is_some()
        );
    }
}
