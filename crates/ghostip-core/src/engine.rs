//! The staleness engine: compares what each path holds with the truth and measures windows.
//!
//! The engine is a pure state machine. Adapters register paths, tell it what each
//! layer should hold ([`Engine::set_desired`]), feed it [`Observation`]s and the current
//! time ([`Engine::tick`]), and read back [`Tracking`]s and [`EngineEvent`]s.
//!
//! # Rules
//! - A target that leaves the truth opens a **stale** tracking on every path of the
//!   layer; a target that joins opens a **missing** tracking. Its window starts at the
//!   change time t0.
//! - Each observation of a path updates its trackings: a stale target still held moves
//!   `last_wrong`; the first observation without it sets `converged_by`. A target that
//!   reappears (a flapping path) clears `converged_by` again.
//! - A tracking whose path still held the target at an observation later than the
//!   expected lag (plus the tolerance) after t0 is **over expected lag** from then on,
//!   open or not ([`EngineEvent::OverExpectedLag`]).
//! - A tracking is final once it stayed converged for `settle`; its verdict compares
//!   the window with the path's expected lag: the path let go between the last
//!   observation that still held the target and the first that did not, and the window
//!   is judged at the middle of those bounds. A path never seen wrong after t0 is within.
//! - Nothing is judged before the truth synced, and nothing across a truth gap: a
//!   tracking that overlaps a gap is reported as unjudged.
//! - A path whose observations fail says nothing about staleness; failures are counted.
//! - A path registered with [`Judging::StaleOnly`] (a node's conntrack table: no flow to
//!   a live endpoint is normal) is judged for staleness only: it never opens a missing
//!   tracking, and its arrivals are not dated.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::model::{
    ChangeTime, FailureReason, Layer, Observation, ObservationResult, PathIdx, PathInfo, Scope,
    ServiceKey, Target, Time,
};

mod target_set;
pub use target_set::TargetSet;

/// Tunables of the engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// How long a target must stay converged before its window is final.
    pub settle: Duration,
    /// Slack added to the expected lag before a window counts as over it
    /// (TTLs are whole seconds; a cache entry filled just before t0 expires up to 1 s later).
    pub tolerance: Duration,
    /// Minimum time before a tracking is declared stuck (DESIGN: max(10 × expected lag, 5 min)).
    pub stuck_floor: Duration,
    /// Multiple of the expected lag after which a tracking is stuck.
    pub stuck_factor: u32,
    /// How many final trackings to keep in memory for reports.
    pub history_limit: usize,
    /// How long the time of a target's departure or arrival is remembered to date a later
    /// observation that holds it (or lacks it) when no tracking is open any more.
    pub change_memory: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            settle: Duration::from_secs(3),
            tolerance: Duration::from_secs(1),
            stuck_floor: Duration::from_secs(300),
            stuck_factor: 10,
            history_limit: 100_000,
            change_memory: Duration::from_secs(3600),
        }
    }
}

/// Whether a path still served a removed target or did not yet serve an added one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Discrepancy {
    /// The path served a target after it left the truth.
    Stale,
    /// The path did not serve a target that is in the truth.
    Missing,
}

/// What the engine judges on a path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Judging {
    /// Stale targets (held after they left the truth) and missing ones (in the truth, not
    /// held yet): a path that should hold the whole desired set (DNS answers, a datapath).
    #[default]
    StaleAndMissing,
    /// Stale targets only: a path that holds what clients happen to use of the desired set
    /// (a conntrack table's flows), where holding none of it is normal.
    StaleOnly,
}

/// Why a tracking has no verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unjudged {
    /// ghostip's own view of the API was not synced during the window.
    TruthGap,
    /// The target returned to the truth before the path converged.
    Readded,
    /// The target left the truth before the path ever served it.
    Withdrawn,
    /// The path disappeared (e.g. the CoreDNS pod was removed) before it converged.
    PathRemoved,
}

/// The verdict on one tracking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict", content = "reason")]
pub enum Verdict {
    /// Still open: not converged, not yet stuck.
    Pending,
    /// Converged within the path's expected lag.
    WithinExpectedLag,
    /// Converged, but later than the path's expected lag: the layer misbehaves.
    OverExpectedLag,
    /// Not converged after max(stuck factor × expected lag, stuck floor).
    Stuck,
    /// Measured but not judged.
    Unjudged(Unjudged),
}

impl Verdict {
    /// A short human label.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Pending => "pending",
            Verdict::WithinExpectedLag => "within expected lag",
            Verdict::OverExpectedLag => "over expected lag",
            Verdict::Stuck => "stuck",
            Verdict::Unjudged(Unjudged::TruthGap) => "unjudged (truth gap)",
            Verdict::Unjudged(Unjudged::Readded) => "unjudged (re-added)",
            Verdict::Unjudged(Unjudged::Withdrawn) => "unjudged (withdrawn)",
            Verdict::Unjudged(Unjudged::PathRemoved) => "unjudged (path removed)",
        }
    }

    /// Whether this verdict is a finding (stale beyond what the configuration promises).
    pub fn is_finding(&self) -> bool {
        matches!(self, Verdict::OverExpectedLag | Verdict::Stuck)
    }
}

/// How the death of an endpoint was established.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeathSource {
    /// A TCP connect probe to the removed IP:port failed.
    ConnectProbe,
    /// Estimated from the pod's deletion time plus its preStop delay.
    PodTermination,
    /// The pod object disappeared.
    PodGone,
}

/// When a target stopped accepting connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Death {
    /// From this instant on, connections to the IP failed.
    pub since: Time,
    /// How that was established.
    pub source: DeathSource,
}

/// Part of a stale window during which the path sent clients to a dead endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exposure {
    /// Lower bound: from death (or t0) to the last observation that still served it.
    pub lower: Duration,
    /// Upper bound: to the first observation after which it was gone.
    pub upper: Duration,
    /// The death the exposure is measured from.
    pub death: Death,
}

/// One (path, service, target) discrepancy being measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tracking {
    /// Path.
    pub path: PathIdx,
    /// Service.
    pub service: ServiceKey,
    /// Target.
    pub target: Target,
    /// Stale or missing.
    pub kind: Discrepancy,
    /// When the truth changed; `None` when the discrepancy was found without seeing
    /// the change (e.g. the first observation after start already held a removed IP).
    pub change: Option<ChangeTime>,
    /// When the tracking was opened (t0, or the observation that found it).
    pub opened: Time,
    /// Last observation at which the path was still wrong about this target; for a stale
    /// target whose observation said when the path last used it
    /// ([`HeldTarget::last_used`](crate::HeldTarget::last_used)), that time.
    pub last_wrong: Option<Time>,
    /// First observation after `last_wrong` at which the path was right.
    pub converged_by: Option<Time>,
    /// Expiry predicted from the TTL the path returned around t0 (observation time + TTL).
    pub predicted_expiry: Option<Time>,
    /// TTL the path handed out in its first answer after t0 that still held the target.
    pub ttl_seen: Option<u32>,
    /// How often the target came back after the path had dropped it.
    pub reappearances: u32,
    /// The longest expected lag the path had while the tracking was open (a Corefile change
    /// that shortens it applies to windows opened after it).
    pub expected_lag: Duration,
    /// Verdict.
    pub verdict: Verdict,
    /// Overlaps a truth gap.
    pub gap: bool,
    /// Declared stuck at some point (a stuck tracking that later converges keeps this).
    pub was_stuck: bool,
}

impl Tracking {
    fn start(&self) -> Time {
        self.change.map_or(self.opened, |c| c.t0)
    }

    /// Window lower bound: t0 to the last observation that was still wrong.
    pub fn window_lower(&self) -> Option<Duration> {
        let start = self.start();
        Some(match self.last_wrong {
            Some(w) => non_negative(w.duration_since(start)),
            None => Duration::ZERO,
        })
    }

    /// Window upper bound: t0 to the first observation after which the path was right.
    pub fn window_upper(&self) -> Option<Duration> {
        self.converged_by
            .map(|c| non_negative(c.duration_since(self.start())))
    }

    /// Whether an observation later than the expected lag plus `tolerance` after t0 still
    /// found the path wrong (the window's lower bound is past it). Nothing is judged across
    /// a truth gap.
    pub fn past_expected_lag(&self, tolerance: Duration) -> bool {
        !self.gap
            && self.last_wrong.is_some()
            && self.window_lower().unwrap_or_default() > self.expected_lag + tolerance
    }

    /// The window a verdict judges: the middle of its bounds (the path let go between the
    /// last observation that still held the target and the first that did not). Zero when
    /// no observation after t0 found the path wrong; the lower bound while it has not
    /// converged.
    pub fn judged_window(&self) -> Duration {
        let lower = self.window_lower().unwrap_or_default();
        if self.last_wrong.is_none() {
            return Duration::ZERO;
        }
        match self.window_upper() {
            Some(upper) if upper > lower => lower + (upper - lower) / 2,
            _ => lower,
        }
    }

    /// The part of the window during which the target was dead.
    pub fn exposure(&self, death: Option<Death>) -> Option<Exposure> {
        let death = death?;
        if self.kind != Discrepancy::Stale {
            return None;
        }
        let from = if death.since > self.start() {
            death.since
        } else {
            self.start()
        };
        let lower = self
            .last_wrong
            .map_or(Duration::ZERO, |w| non_negative(w.duration_since(from)));
        let upper = self
            .converged_by
            .map_or(lower, |c| non_negative(c.duration_since(from)));
        Some(Exposure {
            lower,
            upper,
            death,
        })
    }
}

/// What changed, for the ledger, metrics and live displays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EngineEvent {
    /// A discrepancy started being measured.
    Opened(Tracking),
    /// A path dropped a stale target (or served a missing one) for the first time, or again.
    Converging(Tracking),
    /// A target came back on a path that had dropped it.
    Reappeared(Tracking),
    /// An observation later than the path's expected lag (plus the tolerance) after t0 still
    /// found the path wrong: the tracking is over its expected lag from now on.
    OverExpectedLag(Tracking),
    /// A tracking was declared stuck.
    Stuck(Tracking),
    /// A tracking reached its final verdict.
    Closed(Tracking),
}

/// Observation and failure counts of one path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathStats {
    /// Observations received.
    pub observations: u64,
    /// Failed observations.
    pub failures: u64,
    /// Failures by reason label.
    pub failures_by_reason: BTreeMap<String, u64>,
    /// The last failure and when.
    pub last_failure: Option<(Time, FailureReason)>,
    /// Last successful observation.
    pub last_success: Option<Time>,
}

#[derive(Debug)]
struct PathState {
    info: PathInfo,
    expected_lag: Duration,
    judging: Judging,
    removed: bool,
    stats: PathStats,
    /// When each service (interned id) was last held with a TTL, and that TTL.
    ///
    /// Only the time and the smallest TTL are kept (a DNS answer's records share the
    /// TTL of their cached RRset): 16 bytes per (path, service) instead of the whole set.
    /// A held set without TTLs removes the entry instead of storing "no TTL": it predicts
    /// nothing, and a datapath path (whose reads never carry TTLs) then keeps no entry at
    /// all, where it used to insert one per Service on every read (10 000 hash inserts
    /// and about 0.5 MiB at 10 000 Services).
    last_held: FxHashMap<u32, (Time, u32)>,
}

/// What one layer should hold for one service.
///
/// Sized for clusters with 100 k+ endpoints: the set is a [`TargetSet`] (8 bytes per IPv4
/// target) and only changes made while judging are dated, for `change_memory`.
#[derive(Debug, Default)]
struct Desired {
    set: TargetSet,
    /// Targets that left, with when, so a later observation can date its staleness. Sorted.
    departed: Vec<(Target, ChangeTime)>,
    /// Targets that joined and when. Sorted.
    arrived: Vec<(Target, ChangeTime)>,
}

impl Desired {
    fn contains(&self, t: &Target) -> bool {
        self.set.contains(t)
    }

    fn departed(&self, t: &Target) -> Option<ChangeTime> {
        dated(&self.departed, t)
    }

    fn arrived(&self, t: &Target) -> Option<ChangeTime> {
        dated(&self.arrived, t)
    }

    /// Forgets change times received before `horizon`.
    fn forget_before(&mut self, horizon: Time) {
        self.departed.retain(|(_, c)| c.received >= horizon);
        self.arrived.retain(|(_, c)| c.received >= horizon);
        self.departed.shrink_to_fit();
        self.arrived.shrink_to_fit();
    }
}

fn dated(v: &[(Target, ChangeTime)], t: &Target) -> Option<ChangeTime> {
    v.binary_search_by(|(k, _)| k.cmp(t)).ok().map(|i| v[i].1)
}

fn set_dated(v: &mut Vec<(Target, ChangeTime)>, t: Target, c: ChangeTime) {
    match v.binary_search_by(|(k, _)| k.cmp(&t)) {
        Ok(i) => v[i].1 = c,
        Err(i) => v.insert(i, (t, c)),
    }
}

fn unset_dated(v: &mut Vec<(Target, ChangeTime)>, t: &Target) {
    if let Ok(i) = v.binary_search_by(|(k, _)| k.cmp(t)) {
        v.remove(i);
    }
}

/// (path, interned service id, target, kind): all `Copy`, so lookups never allocate.
type TrackKey = (PathIdx, u32, Target, Discrepancy);

/// The engine.
#[derive(Debug)]
pub struct Engine {
    cfg: EngineConfig,
    paths: Vec<PathState>,
    /// Interned services: observations name services by key, the hot maps use the id.
    service_ids: FxHashMap<ServiceKey, u32>,
    desired: FxHashMap<(Layer, u32), Desired>,
    /// Per-path desired sets (node-local datapaths), which take precedence over `desired`.
    path_desired: FxHashMap<(PathIdx, u32), Desired>,
    open: BTreeMap<TrackKey, Tracking>,
    /// Open trackings per (path, service): the hot path asks this one hash map whether
    /// anything is being measured before it compares sets.
    open_per_service: FxHashMap<(PathIdx, u32), u32>,
    closed: Vec<Tracking>,
    deaths: HashMap<IpAddr, Death>,
    truth_synced: bool,
    gap_since: Option<Time>,
    gaps: Vec<(Time, Option<Time>)>,
    /// When dated changes were last forgotten.
    last_forget: Option<Time>,
}

impl Engine {
    /// An engine with no paths; the truth counts as not synced until [`Engine::truth_synced`].
    pub fn new(cfg: EngineConfig) -> Self {
        Self {
            cfg,
            paths: Vec::new(),
            service_ids: FxHashMap::default(),
            desired: FxHashMap::default(),
            path_desired: FxHashMap::default(),
            open: BTreeMap::new(),
            open_per_service: FxHashMap::default(),
            closed: Vec::new(),
            deaths: HashMap::new(),
            truth_synced: false,
            gap_since: None,
            gaps: Vec::new(),
            last_forget: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Registers a path judged for stale and missing targets. Registering the same id
    /// again revives and returns the old index.
    pub fn add_path(&mut self, info: PathInfo, expected_lag: Duration) -> PathIdx {
        self.add_path_judging(info, expected_lag, Judging::StaleAndMissing)
    }

    /// Registers a path with what is judged on it ([`Judging::StaleOnly`]: no missing
    /// trackings). Registering the same id again revives and returns the old index.
    pub fn add_path_judging(
        &mut self,
        info: PathInfo,
        expected_lag: Duration,
        judging: Judging,
    ) -> PathIdx {
        if let Some(i) = self.paths.iter().position(|p| p.info.id == info.id) {
            let p = &mut self.paths[i];
            p.removed = false;
            p.expected_lag = expected_lag;
            p.judging = judging;
            p.info = info;
            return PathIdx(i as u32);
        }
        self.paths.push(PathState {
            info,
            expected_lag,
            judging,
            removed: false,
            stats: PathStats::default(),
            last_held: FxHashMap::default(),
        });
        PathIdx((self.paths.len() - 1) as u32)
    }

    /// Marks a path as gone (e.g. its CoreDNS pod was removed); its open trackings close unjudged.
    pub fn remove_path(&mut self, path: PathIdx) -> Vec<EngineEvent> {
        let Some(p) = self.paths.get_mut(path.0 as usize) else {
            return Vec::new();
        };
        p.removed = true;
        p.last_held.clear();
        self.path_desired.retain(|k, _| k.0 != path);
        let keys: Vec<TrackKey> = self.open.keys().filter(|k| k.0 == path).cloned().collect();
        let mut events = Vec::new();
        for k in keys {
            if let Some(mut t) = self.remove_open(&k) {
                if t.converged_by.is_none() && t.verdict != Verdict::OverExpectedLag {
                    t.verdict = Verdict::Unjudged(Unjudged::PathRemoved);
                } else {
                    t.verdict = self.judge(&t);
                }
                events.push(EngineEvent::Closed(t.clone()));
                self.push_closed(t);
            }
        }
        events
    }

    /// Updates a path's expected lag (e.g. the Corefile changed).
    pub fn set_expected_lag(&mut self, path: PathIdx, lag: Duration) {
        if let Some(p) = self.paths.get_mut(path.0 as usize) {
            p.expected_lag = lag;
        }
    }

    /// A registered path.
    pub fn path(&self, path: PathIdx) -> Option<&PathInfo> {
        self.paths.get(path.0 as usize).map(|p| &p.info)
    }

    /// The expected lag of a path.
    pub fn expected_lag(&self, path: PathIdx) -> Option<Duration> {
        self.paths.get(path.0 as usize).map(|p| p.expected_lag)
    }

    /// What is judged on a path.
    pub fn path_judging(&self, path: PathIdx) -> Option<Judging> {
        self.paths.get(path.0 as usize).map(|p| p.judging)
    }

    fn stale_only(&self, path: PathIdx) -> bool {
        self.path_judging(path) == Some(Judging::StaleOnly)
    }

    /// All registered paths that are not removed.
    pub fn paths(&self) -> impl Iterator<Item = (PathIdx, &PathInfo)> {
        self.paths
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.removed)
            .map(|(i, p)| (PathIdx(i as u32), &p.info))
    }

    /// Counters of a path.
    pub fn path_stats(&self, path: PathIdx) -> Option<&PathStats> {
        self.paths.get(path.0 as usize).map(|p| &p.stats)
    }

    /// Whether the truth is synced and no gap is open.
    pub fn judging(&self) -> bool {
        self.truth_synced && self.gap_since.is_none()
    }

    /// The truth finished its initial list (or a relist after a gap).
    pub fn truth_synced(&mut self, at: Time) {
        self.truth_synced = true;
        if let Some(since) = self.gap_since.take()
            && let Some(g) = self
                .gaps
                .iter_mut()
                .rev()
                .find(|g| g.0 == since && g.1.is_none())
        {
            g.1 = Some(at);
        }
    }

    /// The truth watch went down: a gap starts. Open trackings are marked unjudged.
    pub fn truth_gap(&mut self, at: Time) {
        if self.gap_since.is_some() || !self.truth_synced {
            return;
        }
        self.gap_since = Some(at);
        self.gaps.push((at, None));
        for t in self.open.values_mut() {
            t.gap = true;
        }
    }

    /// Truth gaps seen so far (start, end).
    pub fn gaps(&self) -> &[(Time, Option<Time>)] {
        &self.gaps
    }

    /// Records when an endpoint stopped accepting connections (the earliest wins).
    pub fn endpoint_dead(&mut self, ip: IpAddr, death: Death) {
        self.deaths
            .entry(ip)
            .and_modify(|d| {
                if death.since < d.since {
                    *d = death;
                }
            })
            .or_insert(death);
    }

    /// An endpoint accepts connections again (its IP was reused by a new pod).
    pub fn endpoint_alive(&mut self, ip: IpAddr) {
        self.deaths.remove(&ip);
    }

    /// When an endpoint died, if known.
    pub fn death(&self, ip: IpAddr) -> Option<Death> {
        self.deaths.get(&ip).copied()
    }

    /// What `layer` should hold for `service` now. Before the truth synced this only
    /// sets the baseline; afterwards the difference opens trackings on every path of the
    /// layer, except paths given their own set with [`Engine::set_desired_on_path`].
    pub fn set_desired(
        &mut self,
        layer: Layer,
        service: &ServiceKey,
        set: BTreeSet<Target>,
        change: ChangeTime,
    ) -> Vec<EngineEvent> {
        let judging = self.judging();
        let sid = self.intern(service);
        let dated = Dating {
            departures: self.truth_synced,
            arrivals: self.truth_synced,
        };
        let entry = self.desired.entry((layer, sid)).or_default();
        let (removed, added) = update_desired(entry, set, change, dated);
        if !judging || (removed.is_empty() && added.is_empty()) {
            return Vec::new();
        }
        let path_ids: Vec<PathIdx> = self
            .paths
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                !p.removed
                    && p.info.layer() == layer
                    && !self.path_desired.contains_key(&(PathIdx(*i as u32), sid))
            })
            .map(|(i, _)| PathIdx(i as u32))
            .collect();
        let mut events = Vec::new();
        for path in path_ids {
            self.open_for_change(path, sid, service, &removed, &added, change, &mut events);
        }
        events
    }

    /// What one path should hold for `service` now, when it differs from path to path
    /// (a node's datapath: traffic policy `Local` narrows to the node's own endpoints).
    ///
    /// Once set, observations of that path for that service are compared with this set
    /// instead of the layer's, and [`Engine::set_desired`] no longer opens trackings on it.
    pub fn set_desired_on_path(
        &mut self,
        path: PathIdx,
        service: &ServiceKey,
        set: BTreeSet<Target>,
        change: ChangeTime,
    ) -> Vec<EngineEvent> {
        let judging = self.judging();
        let sid = self.intern(service);
        if self.paths.get(path.0 as usize).is_none_or(|p| p.removed) {
            return Vec::new();
        }
        // A stale-only path never dates an arrival: nothing reads it, and a path
        // registered after the truth synced would date every target of the cluster.
        let dated = Dating {
            departures: self.truth_synced,
            arrivals: self.truth_synced && !self.stale_only(path),
        };
        let entry = self.path_desired.entry((path, sid)).or_default();
        let (removed, added) = update_desired(entry, set, change, dated);
        let mut events = Vec::new();
        if judging && !(removed.is_empty() && added.is_empty()) {
            self.open_for_change(path, sid, service, &removed, &added, change, &mut events);
        }
        events
    }

    /// The set `path` should hold for `service`, when it was set per path.
    pub fn desired_on_path(&self, path: PathIdx, service: &ServiceKey) -> Option<&TargetSet> {
        let sid = *self.service_ids.get(service)?;
        self.path_desired.get(&(path, sid)).map(|d| &d.set)
    }

    /// Opens stale trackings for `removed` and missing ones for `added` on one path.
    #[allow(clippy::too_many_arguments)]
    fn open_for_change(
        &mut self,
        path: PathIdx,
        sid: u32,
        service: &ServiceKey,
        removed: &[Target],
        added: &[Target],
        change: ChangeTime,
        events: &mut Vec<EngineEvent>,
    ) {
        for t in removed {
            // A missing target that leaves again before it was served is withdrawn.
            self.close_unjudged(
                path,
                sid,
                *t,
                Discrepancy::Missing,
                Unjudged::Withdrawn,
                events,
            );
            self.open_tracking(
                path,
                sid,
                service,
                *t,
                Discrepancy::Stale,
                Some(change),
                change.t0,
                events,
            );
        }
        let stale_only = self.stale_only(path);
        for t in added {
            self.close_unjudged(path, sid, *t, Discrepancy::Stale, Unjudged::Readded, events);
            if stale_only {
                continue;
            }
            self.open_tracking(
                path,
                sid,
                service,
                *t,
                Discrepancy::Missing,
                Some(change),
                change.t0,
                events,
            );
        }
    }

    /// The set `layer` should hold for `service`.
    pub fn desired(&self, layer: Layer, service: &ServiceKey) -> Option<&TargetSet> {
        let sid = *self.service_ids.get(service)?;
        self.desired.get(&(layer, sid)).map(|d| &d.set)
    }

    fn intern(&mut self, service: &ServiceKey) -> u32 {
        if let Some(id) = self.service_ids.get(service) {
            return *id;
        }
        let id = self.service_ids.len() as u32;
        self.service_ids.insert(service.clone(), id);
        id
    }

    fn close_unjudged(
        &mut self,
        path: PathIdx,
        sid: u32,
        target: Target,
        kind: Discrepancy,
        why: Unjudged,
        events: &mut Vec<EngineEvent>,
    ) {
        if let Some(mut t) = self.remove_open(&(path, sid, target, kind)) {
            if t.verdict != Verdict::OverExpectedLag {
                t.verdict = Verdict::Unjudged(why);
            }
            events.push(EngineEvent::Closed(t.clone()));
            self.push_closed(t);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn open_tracking(
        &mut self,
        path: PathIdx,
        sid: u32,
        service: &ServiceKey,
        target: Target,
        kind: Discrepancy,
        change: Option<ChangeTime>,
        opened: Time,
        events: &mut Vec<EngineEvent>,
    ) {
        let key = (path, sid, target, kind);
        if self.open.contains_key(&key) {
            return;
        }
        let Some(p) = self.paths.get(path.0 as usize) else {
            return;
        };
        // The TTL the path handed out just before the change predicts when a cache lets go.
        let mut predicted_expiry = None;
        let mut ttl_seen = None;
        if kind == Discrepancy::Stale
            && let Some((at, ttl)) = p.last_held.get(&sid).copied()
        {
            predicted_expiry = at.checked_add(Duration::from_secs(u64::from(ttl))).ok();
            ttl_seen = Some(ttl);
        }
        let t = Tracking {
            path,
            service: service.clone(),
            target,
            kind,
            change,
            opened,
            last_wrong: None,
            converged_by: None,
            predicted_expiry,
            ttl_seen,
            reappearances: 0,
            expected_lag: p.expected_lag,
            verdict: Verdict::Pending,
            gap: self.gap_since.is_some() || change.is_some_and(|c| self.in_gap(c.t0)),
            was_stuck: false,
        };
        events.push(EngineEvent::Opened(t.clone()));
        self.insert_open(key, t);
    }

    fn insert_open(&mut self, key: TrackKey, t: Tracking) {
        if self.open.insert(key, t).is_none() {
            *self.open_per_service.entry((key.0, key.1)).or_default() += 1;
        }
    }

    fn remove_open(&mut self, key: &TrackKey) -> Option<Tracking> {
        let t = self.open.remove(key)?;
        if let Some(n) = self.open_per_service.get_mut(&(key.0, key.1)) {
            *n -= 1;
            if *n == 0 {
                self.open_per_service.remove(&(key.0, key.1));
            }
        }
        Some(t)
    }

    fn in_gap(&self, at: Time) -> bool {
        self.gaps
            .iter()
            .any(|(s, e)| at >= *s && e.is_none_or(|e| at <= e))
    }

    /// Feeds one observation that holds every target of its path (see [`Scope::All`]).
    pub fn observe(&mut self, obs: &Observation) -> Vec<EngineEvent> {
        self.observe_scoped(obs, &Scope::All)
    }

    /// Feeds one observation that speaks only for the targets in `scope`: held targets
    /// outside it are ignored, desired ones outside it are neither missing nor converged.
    pub fn observe_scoped(&mut self, obs: &Observation, scope: &Scope) -> Vec<EngineEvent> {
        let mut events = Vec::new();
        let judging = self.judging();
        let sid = self.service_ids.get(&obs.service).copied();
        let Some(p) = self.paths.get_mut(obs.path.0 as usize) else {
            return events;
        };
        if p.removed {
            return events;
        }
        p.stats.observations += 1;
        let held = match &obs.result {
            ObservationResult::Failed(reason) => {
                p.stats.failures += 1;
                *p.stats
                    .failures_by_reason
                    .entry(reason.label().to_string())
                    .or_default() += 1;
                p.stats.last_failure = Some((obs.at, reason.clone()));
                return events;
            }
            ObservationResult::Held(h) => h,
        };
        p.stats.last_success = Some(obs.at);
        // Unknown services have no truth to compare with.
        let Some(sid) = sid else { return events };
        let layer = p.info.layer();
        let expected_lag = p.expected_lag;
        let stale_only = p.judging == Judging::StaleOnly;
        if !held.is_empty() {
            // A datapath read holds 10 000s of targets and no TTL: asking whether there is
            // one is a shorter loop than taking the smallest, and a DNS answer says yes at
            // its first record.
            let min_ttl = if held.iter().any(|h| h.ttl.is_some()) {
                held.iter().filter_map(|h| h.ttl).min()
            } else {
                None
            };
            match min_ttl {
                Some(ttl) => {
                    p.last_held.insert(sid, (obs.at, ttl));
                }
                // The last held set had no TTL: no prediction, as before this one had one.
                None if !p.last_held.is_empty() => {
                    p.last_held.remove(&sid);
                }
                None => {}
            }
        }
        if !judging {
            return events;
        }
        let Some(desired) = self
            .path_desired
            .get(&(obs.path, sid))
            .or_else(|| self.desired.get(&(layer, sid)))
        else {
            return events;
        };
        let first = (obs.path, sid, min_target(), Discrepancy::Stale);
        let has_open = self.open_on(obs.path, sid);
        // A datapath read holds its targets sorted: one pass over both usually decides;
        // DNS answers come in any order and take the searches.
        let agrees = if stale_only {
            held.iter()
                .all(|h| scope.contains(&h.target) && desired.contains(&h.target))
        } else if *scope == Scope::All {
            held.len() == desired.set.len()
                && (desired.set.equals_in_order(held, |h| h.target)
                    || held.iter().all(|h| desired.contains(&h.target)))
        } else {
            held.iter()
                .all(|h| scope.contains(&h.target) && desired.contains(&h.target))
                && desired.set.iter().filter(|t| scope.contains(t)).count() == held.len()
        };
        if agrees && !has_open {
            return events; // The common case: the path is right and nothing is being measured.
        }
        let holds = |t: &Target| held.iter().any(|h| h.target == *t);
        // Stale: held but not desired. Missing: desired but not held.
        let stale_now: Vec<(&crate::HeldTarget, Option<ChangeTime>)> = held
            .iter()
            .filter(|h| scope.contains(&h.target) && !desired.contains(&h.target))
            .map(|h| (h, desired.departed(&h.target)))
            .collect();
        let missing_now: Vec<(Target, Option<ChangeTime>)> = if stale_only {
            Vec::new()
        } else {
            desired
                .set
                .iter()
                .filter(|t| scope.contains(t) && !holds(t))
                .map(|t| (t, desired.arrived(&t)))
                .collect()
        };

        let wrong = stale_now
            .into_iter()
            .map(|(h, change)| (h.target, Discrepancy::Stale, h.ttl, h.last_used, change))
            .chain(
                missing_now
                    .into_iter()
                    .map(|(t, change)| (t, Discrepancy::Missing, None, None, change)),
            );
        for (target, kind, ttl, used, change) in wrong {
            // An answer from before the change was right to hold (or lack) the target
            // (answers can arrive after the truth event that changed it).
            if change.is_some_and(|c| c.t0 > obs.at) {
                continue;
            }
            let key = (obs.path, sid, target, kind);
            if !self.open.contains_key(&key) {
                self.open_tracking(
                    obs.path,
                    sid,
                    &obs.service,
                    target,
                    kind,
                    change,
                    obs.at,
                    &mut events,
                );
            }
            if let Some(t) = self.open.get_mut(&key) {
                // A window is held to the longest promise made while it was open: a Corefile
                // that shortens the cache does not make what the old one cached late.
                t.expected_lag = t.expected_lag.max(expected_lag);
                if t.ttl_seen.is_none()
                    && let Some(ttl) = ttl
                {
                    t.ttl_seen = Some(ttl);
                    t.predicted_expiry =
                        obs.at.checked_add(Duration::from_secs(u64::from(ttl))).ok();
                }
                // When the layer says when it last used the target (the last SYN of connects),
                // that is when the path was last wrong; never later than the observation,
                // never earlier than what an earlier one said.
                let wrong_at = used.filter(|u| *u <= obs.at).unwrap_or(obs.at);
                t.last_wrong = Some(t.last_wrong.map_or(wrong_at, |w| w.max(wrong_at)));
                if t.converged_by.take().is_some() {
                    t.reappearances += 1;
                    events.push(EngineEvent::Reappeared(t.clone()));
                }
            }
        }
        // Everything open on this (path, service) that the observation got right converges.
        for (k, t) in self
            .open
            .range_mut(first..)
            .take_while(|(k, _)| k.0 == obs.path && k.1 == sid)
        {
            let right = scope.contains(&k.2)
                && match k.3 {
                    Discrepancy::Stale => !holds(&k.2),
                    Discrepancy::Missing => holds(&k.2),
                };
            // Only answers given after the change say anything about convergence.
            if right && t.converged_by.is_none() && t.start() <= obs.at {
                t.converged_by = Some(obs.at);
                events.push(EngineEvent::Converging(t.clone()));
            }
        }
        events
    }

    /// Advances time: marks trackings past their expected lag, closes trackings that stayed
    /// converged for `settle`, declares stuck ones.
    pub fn tick(&mut self, now: Time) -> Vec<EngineEvent> {
        self.forget_old_changes(now);
        let mut events = Vec::new();
        let mut to_close = Vec::new();
        let tolerance = self.cfg.tolerance;
        for (k, t) in self.open.iter_mut() {
            if t.verdict == Verdict::Pending && t.past_expected_lag(tolerance) {
                t.verdict = Verdict::OverExpectedLag;
                events.push(EngineEvent::OverExpectedLag(t.clone()));
            }
            if let Some(c) = t.converged_by {
                if now.duration_since(c)
                    >= jiff::SignedDuration::try_from(self.cfg.settle).unwrap_or_default()
                {
                    to_close.push(*k);
                }
                continue;
            }
            if t.was_stuck || t.gap {
                continue;
            }
            let horizon =
                (t.expected_lag.saturating_mul(self.cfg.stuck_factor)).max(self.cfg.stuck_floor);
            let start = t.change.map_or(t.opened, |c| c.t0);
            if non_negative(now.duration_since(start)) >= horizon {
                t.was_stuck = true;
                t.verdict = Verdict::Stuck;
                events.push(EngineEvent::Stuck(t.clone()));
            }
        }
        for k in to_close {
            if let Some(mut t) = self.remove_open(&k) {
                t.verdict = self.judge(&t);
                events.push(EngineEvent::Closed(t.clone()));
                self.push_closed(t);
            }
        }
        events
    }

    /// Forgets dated departures and arrivals older than `change_memory`, once a minute, so
    /// a long-running watch does not grow with every change it ever saw.
    fn forget_old_changes(&mut self, now: Time) {
        let Some(horizon) = self.change_horizon_due(now) else {
            return;
        };
        for d in self
            .desired
            .values_mut()
            .chain(self.path_desired.values_mut())
        {
            d.forget_before(horizon);
        }
        let open_ips: std::collections::HashSet<IpAddr> =
            self.open.keys().map(|k| k.2.ip).collect();
        self.deaths
            .retain(|ip, d| d.since >= horizon || open_ips.contains(ip));
    }

    /// The oldest change time [`EngineConfig::change_memory`] keeps at `now`, or `None`
    /// when forgetting is not due: at most once a minute per `last`, which the caller keeps.
    ///
    /// The engine forgets its own dated changes with it; a caller that keeps per-change
    /// state of its own (the `watch` session) forgets with the same horizon.
    pub fn change_horizon(&self, last: &mut Option<Time>, now: Time) -> Option<Time> {
        const EVERY: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);
        if last.is_some_and(|t| now.duration_since(t) < EVERY) {
            return None;
        }
        *last = Some(now);
        let memory = jiff::SignedDuration::try_from(self.cfg.change_memory)
            .unwrap_or(jiff::SignedDuration::MAX);
        now.checked_sub(memory).ok()
    }

    fn change_horizon_due(&mut self, now: Time) -> Option<Time> {
        let mut last = self.last_forget;
        let horizon = self.change_horizon(&mut last, now);
        self.last_forget = last;
        horizon
    }

    /// Closes every open tracking now (end of a rollout report); open ones keep `Pending` or `Stuck`.
    pub fn finish(&mut self) -> Vec<Tracking> {
        let open = std::mem::take(&mut self.open);
        self.open_per_service.clear();
        for (_, mut t) in open {
            if t.converged_by.is_some() {
                t.verdict = self.judge(&t);
            }
            self.push_closed(t);
        }
        self.closed.clone()
    }

    fn judge(&self, t: &Tracking) -> Verdict {
        // Over its expected lag once is over for good (what was published stays true).
        if t.verdict == Verdict::OverExpectedLag {
            return Verdict::OverExpectedLag;
        }
        if t.gap {
            return Verdict::Unjudged(Unjudged::TruthGap);
        }
        if t.was_stuck {
            return Verdict::Stuck;
        }
        if t.judged_window() <= t.expected_lag + self.cfg.tolerance {
            Verdict::WithinExpectedLag
        } else {
            Verdict::OverExpectedLag
        }
    }

    fn push_closed(&mut self, t: Tracking) {
        if self.closed.len() >= self.cfg.history_limit && !self.closed.is_empty() {
            self.closed.remove(0);
        }
        self.closed.push(t);
    }

    /// Open trackings.
    pub fn open_trackings(&self) -> impl Iterator<Item = &Tracking> {
        self.open.values()
    }

    /// Whether `path` has an open tracking for `service`: two hash lookups, where a scan
    /// of [`Engine::open_trackings`] would cost one step per open tracking.
    pub fn has_open_tracking(&self, path: PathIdx, service: &ServiceKey) -> bool {
        // Nothing open (a converged node) needs no hash of the name.
        !self.open_per_service.is_empty()
            && self
                .service_ids
                .get(service)
                .is_some_and(|sid| self.open_on(path, *sid))
    }

    /// Whether `path` has an open tracking for the Service numbered `sid`.
    fn open_on(&self, path: PathIdx, sid: u32) -> bool {
        self.open_per_service
            .get(&(path, sid))
            .is_some_and(|n| *n > 0)
    }

    /// Closed trackings, oldest first (bounded by `history_limit`).
    pub fn closed_trackings(&self) -> &[Tracking] {
        &self.closed
    }

    /// Whether any open tracking of `service` is not converged yet.
    pub fn unconverged(&self, service: &ServiceKey) -> usize {
        self.open
            .values()
            .filter(|t| &t.service == service && t.converged_by.is_none())
            .count()
    }

    /// Open, unconverged stale trackings per path (for the `ghostip_stale_endpoints` gauge).
    pub fn stale_now(&self) -> HashMap<PathIdx, usize> {
        let mut m = HashMap::new();
        for (k, t) in &self.open {
            if k.3 == Discrepancy::Stale && t.converged_by.is_none() {
                *m.entry(k.0).or_default() += 1;
            }
        }
        m
    }

    /// Number of open trackings (all services).
    pub fn open_count(&self) -> usize {
        self.open.len()
    }
}

/// Which changes [`update_desired`] dates.
#[derive(Clone, Copy, Debug)]
struct Dating {
    /// Departures (and arrivals undoing one).
    departures: bool,
    /// Arrivals.
    arrivals: bool,
}

/// Replaces a desired set, remembering when targets left and joined; returns (removed, added).
///
/// Nothing is dated while the truth has never synced: the initial LIST is a baseline, not
/// a change, so its targets get no arrival time (at 150 k endpoints that map alone was
/// tens of MiB); nor are the arrivals of a stale-only path, which no tracking reads. An
/// observation that disagrees with the baseline opens a tracking dated by
/// the observation, as for any discrepancy found without seeing its change. Dated changes
/// are forgotten after `change_memory` ([`Engine::tick`]).
fn update_desired(
    entry: &mut Desired,
    set: BTreeSet<Target>,
    change: ChangeTime,
    dated: Dating,
) -> (Vec<Target>, Vec<Target>) {
    let old: BTreeSet<Target> = entry.set.iter().collect();
    let removed: Vec<Target> = old.difference(&set).copied().collect();
    let added: Vec<Target> = set.difference(&old).copied().collect();
    if dated.departures {
        for t in &removed {
            set_dated(&mut entry.departed, *t, change);
            unset_dated(&mut entry.arrived, t);
        }
        for t in &added {
            if dated.arrivals {
                set_dated(&mut entry.arrived, *t, change);
            }
            unset_dated(&mut entry.departed, t);
        }
    }
    if !removed.is_empty() || !added.is_empty() {
        entry.set = TargetSet::from_sorted(set);
    }
    (removed, added)
}

fn min_target() -> Target {
    Target {
        ip: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        port: None,
    }
}

fn non_negative(d: jiff::SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests;
