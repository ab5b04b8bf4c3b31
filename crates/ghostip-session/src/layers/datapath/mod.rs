//! The datapath layer: one node's load balancer (kube-proxy iptables/nftables/IPVS, Cilium) as one engine path, with the Services' desired backends on that node and the observations of each read.
//!
//! Pure: no IO, time passed in. [`DatapathModel`] is the layer's model: on every truth
//! event it sets the desired backends of every touched Service on its path
//! (`iptables/node-2`, traffic policy `Local` narrowed to the node) and notes that the
//! datapath should be re-read soon. [`DatapathModel::on_read`] feeds one read's table to the
//! engine through `ghostip_datapath::against_truth::for_each_observation`. The session's [`pacing`](crate::pacing) paces
//! the reads: re-reads after a change until converged, and a periodic full audit whose
//! period follows the measured CPU cost.

pub mod drain;

use ghostip_core::engine::{Discrepancy, Engine};
use ghostip_core::truth::ServiceChange;
use ghostip_core::{ChangeTime, Layer, Observation, PathIdx, ServiceKey, Time};
use ghostip_datapath::PackedTable;
use ghostip_datapath::against_truth::{self, Family};
use ghostip_datapath::layers::DATAPATH;

use crate::layer::{LayerCx, LayerModel, touched_services};
use crate::truth_event::Received;

/// What one read meant.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Observations made (for the ledger: only those of Services with open trackings).
    pub recorded: Vec<Observation>,
    /// Services observed.
    pub services: usize,
    /// Frontends that map to no Service.
    pub unknown_frontends: usize,
}

/// The model of one node's datapath path.
///
/// It keeps no copy of the truth: which Services an event touched comes from the truth
/// itself (at 10 k Services and 20 k slices a slice-to-Service map of its own was about
/// 6 MiB), and which Services have a set on the path from the engine.
#[derive(Debug)]
pub struct DatapathModel {
    node: String,
    path: PathIdx,
    family: Family,
    /// A Service's desired backends changed since the adapter last asked.
    changed: bool,
}

impl DatapathModel {
    /// A model for `path` (already registered with the engine) on `node`.
    pub fn new(node: impl Into<String>, path: PathIdx) -> Self {
        Self {
            node: node.into(),
            path,
            family: Family::V4,
            changed: false,
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

    /// Whether some Service's desired backends changed since the last call (re-read the
    /// datapath soon).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    fn set_desired(&mut self, cx: &mut LayerCx<'_>, key: &ServiceKey, change: ChangeTime) {
        // A Service never given a set (e.g. deleted before the truth listed it): nothing to say.
        if cx.truth.service(key).is_none() && cx.engine().desired_on_path(self.path, key).is_none()
        {
            return;
        }
        let set = against_truth::desired(cx.truth, key, Some(&self.node), self.family);
        if cx.set_desired_on_path(self.path, key, set, change) {
            self.changed = true;
        }
    }

    /// Feeds one read of the datapath: one observation per Service, made and fed to the
    /// engine one at a time (`against_truth::for_each_observation`).
    pub fn on_read(&mut self, cx: &mut LayerCx<'_>, table: &PackedTable, at: Time) -> ReadOutcome {
        let mut out = ReadOutcome::default();
        let path = self.path;
        let counts =
            against_truth::for_each_observation(table, cx.truth, path, self.family, at, |o| {
                let before = cx.events().len();
                cx.observe(o);
                if cx.events().len() > before || cx.engine().has_open_tracking(path, &o.service) {
                    out.recorded.push(o.clone());
                }
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

impl LayerModel for DatapathModel {
    fn layer(&self) -> Layer {
        DATAPATH
    }

    /// A Service event re-derives that Service's set whatever the truth reported: its ports,
    /// NodePorts and traffic policies shape the datapath, not its DNS answers. Before the
    /// truth synced (and during a gap) the engine only takes the sets as a baseline, so the
    /// initial LIST opens no trackings.
    fn on_truth(&mut self, cx: &mut LayerCx<'_>, r: &Received, changes: &[ServiceChange]) {
        for (key, at) in touched_services(r, changes) {
            self.set_desired(cx, key, at);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use ghostip_core::engine::{EngineEvent, Tracking};
    use ghostip_core::{PathInfo, Target};
    use ghostip_datapath::{Format, PackedTable};
    use ghostip_testkit::dumps::{GenModel, GenSpec, THIS_NODE};

    use super::*;
    use crate::session::{Actions, Session, SessionConfig};
    use crate::sync::SyncState;
    use crate::truth_event::{ResourceKind, TruthEvent, TruthKey, TruthObject};
    use ghostip_datapath::layers::IPTABLES;

    fn t(s: i64) -> Time {
        Time::from_second(1_800_000_000 + s).unwrap()
    }

    /// A session with this node's datapath path registered and its model.
    fn session() -> (Session, PathIdx) {
        let kinds = [ResourceKind::EndpointSlices, ResourceKind::Services];
        let mut s = Session::new(SessionConfig::default(), SyncState::new(t(0), kinds));
        let path = s.add_path(
            PathInfo {
                id: format!("iptables/{THIS_NODE}"),
                kind: IPTABLES,
                description: "datapath".into(),
                node: Some(THIS_NODE.into()),
            },
            Duration::from_secs(2),
        );
        s.register(DatapathModel::new(THIS_NODE, path));
        (s, path)
    }

    fn feed(s: &mut Session, event: TruthEvent, at: Time) -> (Actions, bool) {
        let actions = s.on_truth(&Received { at, event });
        let changed = s
            .layer_mut::<DatapathModel>()
            .is_some_and(DatapathModel::take_changed);
        (actions, changed)
    }

    fn packed(model: &GenModel) -> PackedTable {
        let dump = model.iptables_save();
        ghostip_datapath::parse_reader_packed(Format::Iptables, dump.as_bytes())
            .unwrap()
            .unwrap()
    }

    /// The initial LIST of both resources; returns whether each slice asked for a re-read.
    fn list(s: &mut Session, model: &GenModel, at: Time) -> Vec<bool> {
        let (services, slices) = model.truth_records();
        feed(s, TruthEvent::Init(ResourceKind::Services), at);
        for svc in services {
            feed(s, TruthEvent::InitApply(TruthObject::Service(svc)), at);
        }
        feed(s, TruthEvent::InitDone(ResourceKind::Services), at);
        feed(s, TruthEvent::Init(ResourceKind::EndpointSlices), at);
        let changed = slices
            .into_iter()
            .map(|slice| feed(s, TruthEvent::InitApply(TruthObject::Slice(slice)), at).1)
            .collect();
        feed(s, TruthEvent::InitDone(ResourceKind::EndpointSlices), at);
        changed
    }

    /// The path's sets follow the truth's own changes: a slice deleted by name and a slice
    /// that a relist (after a watch gap) no longer lists both empty their Service's set, and
    /// only then is a re-read asked for; a deleted Service that never had a set says nothing.
    #[test]
    fn deleted_and_unlisted_slices_empty_their_services_sets() {
        let model = GenModel::generate(&GenSpec::new(3, 9));
        let (services, slices) = model.truth_records();
        let (mut s, path) = session();
        assert!(
            list(&mut s, &model, t(0))
                .into_iter()
                .all(|changed| changed)
        );
        let key = |i: usize| services[i].key.clone();
        for i in 0..3 {
            assert!(
                !s.engine()
                    .desired_on_path(path, &key(i))
                    .unwrap()
                    .is_empty()
            );
        }

        // Deleted by name: the truth knows the slice's Service.
        let gone = TruthEvent::Delete(TruthKey::Slice {
            namespace: slices[0].namespace.clone(),
            name: slices[0].name.clone(),
        });
        assert!(feed(&mut s, gone, t(5)).1);
        assert!(
            s.engine()
                .desired_on_path(path, &key(0))
                .is_some_and(|d| d.is_empty())
        );

        // A relist that misses slice 1: the truth deletes it when the relist ends.
        feed(&mut s, TruthEvent::Init(ResourceKind::EndpointSlices), t(9));
        for slice in slices.iter().skip(2).cloned() {
            assert!(
                !feed(
                    &mut s,
                    TruthEvent::InitApply(TruthObject::Slice(slice)),
                    t(9)
                )
                .1
            );
        }
        let (_, changed) = feed(
            &mut s,
            TruthEvent::InitDone(ResourceKind::EndpointSlices),
            t(9),
        );
        assert!(changed);
        assert!(
            s.engine()
                .desired_on_path(path, &key(1))
                .is_some_and(|d| d.is_empty())
        );
        assert!(
            !s.engine()
                .desired_on_path(path, &key(2))
                .unwrap()
                .is_empty()
        );

        // Nothing changes for a Service the path never had.
        let stranger = ServiceKey::new("elsewhere", "unknown");
        let event = TruthEvent::Delete(TruthKey::Service(stranger.clone()));
        assert!(!feed(&mut s, event, t(10)).1);
        assert!(s.engine().desired_on_path(path, &stranger).is_none());
    }

    /// A read of the real parser's packed table: an agreeing dump changes nothing; a dump
    /// missing one endpoint opens one tracking and records that Service's observation.
    #[test]
    fn packed_reads_are_judged_service_by_service() {
        let model = GenModel::generate(&GenSpec::new(20, 90));
        let (mut s, _) = session();
        list(&mut s, &model, t(0));
        let read = |s: &mut Session, table: &PackedTable, at: Time| {
            s.with_layer_cx::<DatapathModel, _>(|m, cx| m.on_read(cx, table, at))
                .unwrap()
        };
        let (clean, actions) = read(&mut s, &packed(&model), t(1));
        assert_eq!(clean.services, s.truth().services().count());
        assert_eq!(clean.unknown_frontends, 0);
        assert!(actions.events.is_empty(), "{:?}", actions.events);
        assert!(clean.recorded.is_empty());
        let mut lagging = model.clone();
        let gone = lagging.services[0].endpoints.remove(0);
        let (out, actions) = read(&mut s, &packed(&lagging), t(2));
        let opened: Vec<&Tracking> = actions
            .events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::Opened(tr) => Some(tr),
                _ => None,
            })
            .collect();
        assert_eq!(opened.len(), 1, "{:?}", actions.events);
        assert_eq!(opened[0].kind, Discrepancy::Missing);
        assert_eq!(
            opened[0].target,
            Target::socket(std::net::IpAddr::V4(*gone.ip()), gone.port())
        );
        assert_eq!(out.recorded.len(), 1);
        assert_eq!(
            out.recorded[0].service.name,
            lagging.services[0].service.name
        );
        let model = s.layer::<DatapathModel>().unwrap();
        assert!(model.unconverged(s.engine()));
    }
}
