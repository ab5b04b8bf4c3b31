//! The node's datapath as one engine path: which Services a truth event touches, their desired backends on this node, and the observations of each read.
//!
//! Pure: no IO, time passed in. [`DatapathTracker::on_truth`] is called after the
//! session applied a truth event (so the truth is current); it sets the desired set of
//! every touched Service on the datapath path (`iptables/node-2`) with
//! [`Engine::set_desired_on_path`] and says whether the datapath should be re-read soon.
//! [`DatapathTracker::on_read`] feeds one read's table to the engine through
//! `ghostip_datapath::against_truth::observations`.

use std::collections::{BTreeSet, HashMap};

use ghostip_core::engine::{Discrepancy, Engine, EngineEvent};
use ghostip_core::truth::Truth;
use ghostip_core::{ChangeTime, Observation, PathIdx, ServiceKey, Time};
use ghostip_datapath::LbTable;
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
#[derive(Debug)]
pub struct DatapathTracker {
    node: String,
    path: PathIdx,
    family: Family,
    /// Which Service each EndpointSlice belongs to, to route a deletion.
    slice_owner: HashMap<(String, String), ServiceKey>,
    /// Services whose desired set was given to the engine.
    known: BTreeSet<ServiceKey>,
}

impl DatapathTracker {
    /// A tracker for `path` (already registered with the engine) on `node`.
    pub fn new(node: impl Into<String>, path: PathIdx) -> Self {
        Self {
            node: node.into(),
            path,
            family: Family::V4,
            slice_owner: HashMap::new(),
            known: BTreeSet::new(),
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

    /// Applies a truth event the session already applied to `truth`.
    pub fn on_truth(
        &mut self,
        truth: &Truth,
        engine: &mut Engine,
        event: &TruthEvent,
        at: Time,
    ) -> TruthOutcome {
        let mut out = TruthOutcome::default();
        let received = ChangeTime::received_at(at);
        let touched: Vec<(ServiceKey, ChangeTime)> = match event {
            TruthEvent::SliceApplied(s) => {
                let key = s.service_key();
                let old = self
                    .slice_owner
                    .insert((s.namespace.clone(), s.name.clone()), key.clone());
                let change = ChangeTime {
                    t0: s.trigger_time.unwrap_or(at),
                    received: at,
                    from_trigger_annotation: s.trigger_time.is_some(),
                };
                let mut v = vec![(key.clone(), change)];
                if let Some(old) = old.filter(|o| o != &key) {
                    v.push((old, received));
                }
                v
            }
            TruthEvent::SliceDeleted { namespace, name } => self
                .slice_owner
                .remove(&(namespace.clone(), name.clone()))
                .map(|k| vec![(k, received)])
                .unwrap_or_default(),
            TruthEvent::ServiceApplied(s) => vec![(s.key.clone(), received)],
            TruthEvent::ServiceDeleted(k) => vec![(k.clone(), received)],
            _ => Vec::new(),
        };
        // Before the truth synced (and during a gap) the engine only takes the sets as a
        // baseline, so the initial LIST opens no trackings.
        for (key, change) in touched {
            self.set_desired(truth, engine, &key, change, &mut out);
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
        let set = against_truth::desired(truth, key, Some(&self.node), self.family);
        if truth.service(key).is_none() && !self.known.contains(key) {
            return;
        }
        // `desired_on_path` is sorted, like the set's iteration order.
        if engine
            .desired_on_path(self.path, key)
            .is_some_and(|before| before.iter().eq(set.iter()))
        {
            return;
        }
        self.known.insert(key.clone());
        out.changed = true;
        out.events
            .extend(engine.set_desired_on_path(self.path, key, set, change));
    }

    /// Feeds one read of the datapath.
    pub fn on_read(
        &mut self,
        truth: &Truth,
        engine: &mut Engine,
        table: &LbTable,
        at: Time,
    ) -> ReadOutcome {
        let obs = against_truth::observations(table, truth, self.path, self.family, at);
        let mut out = ReadOutcome {
            services: obs.observations.len(),
            unknown_frontends: obs.unknown_frontends,
            ..ReadOutcome::default()
        };
        for o in obs.observations {
            let events = engine.observe(&o);
            let open = engine
                .open_trackings()
                .any(|t| t.path == self.path && t.service == o.service);
            if open || !events.is_empty() {
                out.recorded.push(o);
            }
            out.events.extend(events);
        }
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
