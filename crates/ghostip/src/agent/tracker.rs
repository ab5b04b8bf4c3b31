//! The node's datapath as one engine path: which Services a truth event touches, their desired backends on this node, and the observations of each read.
//!
//! Pure: no IO, time passed in. [`DatapathTracker::on_truth`] is called after the
//! session applied a truth event (so the truth is current); it sets the desired set of
//! every touched Service on the datapath path (`iptables/node-2`) with
//! [`Engine::set_desired_on_path`] and says whether the datapath should be re-read soon.
//! [`DatapathTracker::on_read`] feeds one read's table to the engine through
//! `ghostip_datapath::against_truth::for_each_observation`.

use ghostip_core::engine::{Discrepancy, Engine, EngineEvent};
use ghostip_core::truth::{ServiceChange, Truth};
use ghostip_core::{ChangeTime, Observation, PathIdx, ServiceKey, Time};
use ghostip_datapath::PackedTable;
use ghostip_datapath::against_truth::{self, Family};

use crate::kube::TruthEvent;

/// What a truth event meant for the datapath.
#[derive(Debug, Default)]
pub struct TruthOutcome {
    /// Engine events (trackings opened or closed unjudged).
    pub events: Vec<EngineEvent>,
    /// The desired backends of some Service changed: re-read the datapath soon.
    pub changed: bool,
}

/// What one read meant.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Engine events.
    pub events: Vec<EngineEvent>,
    /// Observations made (for the ledger: only those of Services with open trackings).
    pub recorded: Vec<Observation>,
    /// Services observed.
    pub services: usize,
    /// Frontends that map to no Service.
    pub unknown_frontends: usize,
}

/// The tracker of one node's datapath path.
///
/// It keeps no copy of the truth: which Services an event touched comes from the truth
/// itself (at 10 k Services and 20 k slices a slice-to-Service map of its own was about
/// 6 MiB), and which Services have a set on the path from the engine.
#[derive(Debug)]
pub struct DatapathTracker {
    node: String,
    path: PathIdx,
    family: Family,
}

impl DatapathTracker {
    /// A tracker for `path` (already registered with the engine) on `node`.
    pub fn new(node: impl Into<String>, path: PathIdx) -> Self {
        Self {
            node: node.into(),
            path,
            family: Family::V4,
        }
    }

    /// The engine path.
    pub fn path(&self) -> PathIdx {
        self.path
    }

    /// The address family the datapath reader returns (IPv4 for `iptables-save`).
    pub fn set_family(&mut self, family: Family) {
        self.family = family;
    }

    /// Applies a truth event the session already applied to `truth`; `changes` are the
    /// Services whose endpoints the truth said changed with it ([`ServiceChange`]s: the slice's
    /// Service and the one it left, a deleted slice's Service, the slices and Services a
    /// relist missed).
    ///
    /// A Service event re-derives that Service's set whatever the truth reported: its ports,
    /// NodePorts and traffic policies shape the datapath, not its DNS answers.
    pub fn on_truth(
        &mut self,
        truth: &Truth,
        engine: &mut Engine,
        event: &TruthEvent,
        changes: &[ServiceChange],
        at: Time,
    ) -> TruthOutcome {
        let mut out = TruthOutcome::default();
        let own = match event {
            TruthEvent::ServiceApplied(s) => Some(&s.key),
            TruthEvent::ServiceDeleted(k) => Some(k),
            _ => None,
        };
        if let Some(key) = own.filter(|k| !changes.iter().any(|c| &c.service == *k)) {
            self.set_desired(truth, engine, key, ChangeTime::received_at(at), &mut out);
        }
        // Before the truth synced (and during a gap) the engine only takes the sets as a
        // baseline, so the initial LIST opens no trackings.
        for c in changes {
            self.set_desired(truth, engine, &c.service, c.at, &mut out);
        }
        out
    }

    fn set_desired(
        &mut self,
        truth: &Truth,
        engine: &mut Engine,
        key: &ServiceKey,
        change: ChangeTime,
        out: &mut TruthOutcome,
    ) {
        let before = engine.desired_on_path(self.path, key);
        // A Service never given a set (e.g. deleted before the truth listed it): nothing to say.
        if truth.service(key).is_none() && before.is_none() {
            return;
        }
        let set = against_truth::desired(truth, key, Some(&self.node), self.family);
        // `desired_on_path` is sorted, like the set's iteration order.
        if before.is_some_and(|before| before.iter().eq(set.iter().copied())) {
            return;
        }
        out.changed = true;
        out.events
            .extend(engine.set_desired_on_path(self.path, key, set, change));
    }

    /// Feeds one read of the datapath: one observation per Service, made and fed to the
    /// engine one at a time (`against_truth::for_each_observation`).
    pub fn on_read(
        &mut self,
        truth: &Truth,
        engine: &mut Engine,
        table: &PackedTable,
        at: Time,
    ) -> ReadOutcome {
        let mut out = ReadOutcome::default();
        let path = self.path;
        let counts =
            against_truth::for_each_observation(table, truth, path, self.family, at, |o| {
                let events = engine.observe(o);
                if !events.is_empty() || engine.has_open_tracking(path, &o.service) {
                    out.recorded.push(o.clone());
                }
                out.events.extend(events);
            });
        out.services = counts.services;
        out.unknown_frontends = counts.unknown_frontends;
        out
    }

    /// Stale backends this path serves now (open, unconverged stale trackings).
    pub fn stale_now(&self, engine: &Engine) -> usize {
        engine
            .open_trackings()
            .filter(|t| {
                t.path == self.path && t.kind == Discrepancy::Stale && t.converged_by.is_none()
            })
            .count()
    }

    /// Whether anything on this path is still unconverged (keep re-reading).
    pub fn unconverged(&self, engine: &Engine) -> bool {
        engine
            .open_trackings()
            .any(|t| t.path == self.path && t.converged_by.is_none())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use ghostip_core::engine::EngineConfig;
    use ghostip_core::{PathInfo, PathKind};
    use ghostip_datapath::{Format, PackedTable};
    use ghostip_testkit::dumps::{GenModel, GenSpec, THIS_NODE};

    use super::*;

    fn t(s: i64) -> Time {
        Time::from_second(1_800_000_000 + s).unwrap()
    }

    /// An engine with this node's datapath path registered.
    fn engine_with_path() -> (Engine, PathIdx) {
        let mut engine = Engine::new(EngineConfig::default());
        let path = engine.add_path(
            PathInfo {
                id: format!("iptables/{THIS_NODE}"),
                kind: PathKind::Iptables,
                description: "datapath".into(),
                node: Some(THIS_NODE.into()),
            },
            Duration::from_secs(2),
        );
        (engine, path)
    }

    fn packed(model: &GenModel) -> PackedTable {
        let dump = model.iptables_save();
        ghostip_datapath::parse_reader_packed(Format::Iptables, dump.as_bytes())
            .unwrap()
            .unwrap()
    }

    /// The path's sets follow the truth's own changes: a slice deleted by name and a slice
    /// that a relist (after a watch gap) no longer lists both empty their Service's set, and
    /// only then is a re-read asked for; a deleted Service that never had a set says nothing.
    #[test]
    fn deleted_and_unlisted_slices_empty_their_services_sets() {
        let model = GenModel::generate(&GenSpec::new(3, 9));
        let (services, slices) = model.truth_records();
        let mut truth = Truth::new();
        let (mut engine, path) = engine_with_path();
        let mut tracker = DatapathTracker::new(THIS_NODE, path);
        let mut feed = |truth: &mut Truth, engine: &mut Engine, event: TruthEvent, at: Time| {
            let changes = match &event {
                TruthEvent::ServiceApplied(s) => {
                    truth.apply_service(s.clone(), at).into_iter().collect()
                }
                TruthEvent::ServiceDeleted(k) => truth.delete_service(k, at).into_iter().collect(),
                TruthEvent::SliceApplied(s) => truth.apply_slice(s.clone(), at),
                TruthEvent::SliceDeleted { namespace, name } => truth
                    .delete_slice(namespace, name, at)
                    .into_iter()
                    .collect(),
                _ => Vec::new(),
            };
            tracker.on_truth(truth, engine, &event, &changes, at)
        };
        for svc in services.clone() {
            feed(
                &mut truth,
                &mut engine,
                TruthEvent::ServiceApplied(svc),
                t(0),
            );
        }
        for slice in slices.clone() {
            assert!(
                feed(
                    &mut truth,
                    &mut engine,
                    TruthEvent::SliceApplied(slice),
                    t(0)
                )
                .changed
            );
        }
        engine.truth_synced(t(0));
        let key = |i: usize| services[i].key.clone();
        for i in 0..3 {
            assert!(!engine.desired_on_path(path, &key(i)).unwrap().is_empty());
        }

        // Deleted by name: the truth knows the slice's Service.
        let gone = TruthEvent::SliceDeleted {
            namespace: slices[0].namespace.clone(),
            name: slices[0].name.clone(),
        };
        let out = feed(&mut truth, &mut engine, gone, t(5));
        assert!(out.changed);
        assert!(
            engine
                .desired_on_path(path, &key(0))
                .is_some_and(|d| d.is_empty())
        );

        // A relist that misses slice 1: the truth deletes it when the relist ends.
        truth.begin_slice_relist();
        for slice in slices.iter().skip(2).cloned() {
            assert!(
                !feed(
                    &mut truth,
                    &mut engine,
                    TruthEvent::SliceApplied(slice),
                    t(9)
                )
                .changed
            );
        }
        let changes = truth.finish_slice_relist(t(9));
        let done = TruthEvent::RelistDone(crate::kube::ResourceKind::EndpointSlices);
        let out = tracker.on_truth(&truth, &mut engine, &done, &changes, t(9));
        assert!(out.changed);
        assert!(
            engine
                .desired_on_path(path, &key(1))
                .is_some_and(|d| d.is_empty())
        );
        assert!(!engine.desired_on_path(path, &key(2)).unwrap().is_empty());

        // Nothing changes for a Service the path never had.
        let stranger = ghostip_core::ServiceKey::new("elsewhere", "unknown");
        let out = tracker.on_truth(
            &truth,
            &mut engine,
            &TruthEvent::ServiceDeleted(stranger.clone()),
            &[],
            t(10),
        );
        assert!(!out.changed);
        assert!(engine.desired_on_path(path, &stranger).is_none());
    }

    /// A read of the real parser's packed table: an agreeing dump changes nothing; a dump
    /// missing one endpoint opens one tracking and records that Service's observation.
    #[test]
    fn packed_reads_are_judged_service_by_service() {
        let model = GenModel::generate(&GenSpec::new(20, 90));
        let truth = model.truth(t(0));
        let (mut engine, path) = engine_with_path();
        let mut tracker = DatapathTracker::new(THIS_NODE, path);
        let (services, _) = model.truth_records();
        for svc in services {
            tracker.on_truth(
                &truth,
                &mut engine,
                &TruthEvent::ServiceApplied(svc),
                &[],
                t(0),
            );
        }
        engine.truth_synced(t(0));
        let clean = tracker.on_read(&truth, &mut engine, &packed(&model), t(1));
        assert_eq!(clean.services, truth.services().count());
        assert_eq!(clean.unknown_frontends, 0);
        assert!(clean.events.is_empty(), "{:?}", clean.events);
        assert!(clean.recorded.is_empty());
        let mut lagging = model.clone();
        let gone = lagging.services[0].endpoints.remove(0);
        let out = tracker.on_read(&truth, &mut engine, &packed(&lagging), t(2));
        let opened: Vec<_> = out
            .events
            .iter()
            .filter_map(|e| match e {
                ghostip_core::engine::EngineEvent::Opened(tr) => Some(tr),
                _ => None,
            })
            .collect();
        assert_eq!(opened.len(), 1, "{:?}", out.events);
        assert_eq!(opened[0].kind, Discrepancy::Missing);
        assert_eq!(
            opened[0].target,
            ghostip_core::Target::socket(std::net::IpAddr::V4(*gone.ip()), gone.port())
        );
        assert_eq!(out.recorded.len(), 1);
        assert_eq!(
            out.recorded[0].service.name,
            lagging.services[0].service.name
        );
        assert!(tracker.unconverged(&engine));
    }
}
