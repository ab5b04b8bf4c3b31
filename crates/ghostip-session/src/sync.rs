//! Applies [`Received`] events to the core's [`Truth`] and tracks which watches are synced.
//!
//! See [`apply_to_truth`] (every command that keeps a truth) and [`SyncState`], which turns
//! watch failures and completed relists into truth-gap transitions.

use std::collections::BTreeMap;

use ghostip_core::model::Time;
use ghostip_core::truth::{ServiceChange, Truth};

use crate::truth_event::{Received, ResourceKind, TruthEvent, TruthKey, TruthObject};

/// Applies one event to the truth and returns the Services whose answers may have changed.
///
/// Slice and Service relists go through `Truth::begin_*_relist` / `finish_*_relist`, so any
/// object applied before and missing from the relist is deleted (and reported as changed).
/// Pod and Corefile events do not touch the truth.
pub fn apply_to_truth(truth: &mut Truth, ev: &Received) -> Vec<ServiceChange> {
    let at = ev.at;
    match &ev.event {
        TruthEvent::InitApply(o) | TruthEvent::Apply(o) => match o {
            TruthObject::Slice(s) => truth.apply_slice(s.clone(), at).into_iter().collect(),
            TruthObject::Service(s) => truth.apply_service(s.clone(), at).into_iter().collect(),
            TruthObject::Pod(_) | TruthObject::Corefile { .. } => Vec::new(),
        },
        TruthEvent::Delete(TruthKey::Slice { namespace, name }) => truth
            .delete_slice(namespace, name, at)
            .into_iter()
            .collect(),
        TruthEvent::Delete(TruthKey::Service(key)) => {
            truth.delete_service(key, at).into_iter().collect()
        }
        TruthEvent::Init(ResourceKind::EndpointSlices) => {
            truth.begin_slice_relist();
            Vec::new()
        }
        TruthEvent::InitDone(ResourceKind::EndpointSlices) => truth.finish_slice_relist(at),
        TruthEvent::Init(ResourceKind::Services) => {
            truth.begin_service_relist();
            Vec::new()
        }
        TruthEvent::InitDone(ResourceKind::Services) => truth.finish_service_relist(at),
        _ => Vec::new(),
    }
}

/// Whether one watch is synced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncStatus {
    /// Not synced since `since` (start, or the failure that began the gap).
    Unsynced {
        /// When the gap began.
        since: Time,
        /// The last error seen, if any.
        error: Option<String>,
    },
    /// Synced since `since`.
    Synced {
        /// When the last relist completed.
        since: Time,
    },
}

/// A change of one watch's sync status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncTransition {
    /// A synced watch failed: a truth gap starts at `at`.
    GapStarted {
        /// Which watch.
        kind: ResourceKind,
        /// When.
        at: Time,
        /// The error.
        error: String,
    },
    /// A watch synced: the gap `[since, at]` ends (the first one starts when ghostip starts).
    GapEnded {
        /// Which watch.
        kind: ResourceKind,
        /// When the gap began.
        since: Time,
        /// When it ended.
        at: Time,
    },
}

/// Per-watch sync status; the truth is synced when EndpointSlices and Services both are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncState {
    kinds: BTreeMap<ResourceKind, SyncStatus>,
}

impl SyncState {
    /// Every watch in `kinds` unsynced since `start`.
    pub fn new(start: Time, kinds: impl IntoIterator<Item = ResourceKind>) -> Self {
        let kinds = kinds
            .into_iter()
            .map(|k| {
                (
                    k,
                    SyncStatus::Unsynced {
                        since: start,
                        error: None,
                    },
                )
            })
            .collect();
        Self { kinds }
    }

    /// Updates the status from an event; returns the transitions of the watches whose gap
    /// starts or ends (one, or every synced watch when the API server is unreachable).
    /// Events of watches not given to [`SyncState::new`] register them.
    pub fn observe(&mut self, ev: &Received) -> Vec<SyncTransition> {
        match &ev.event {
            TruthEvent::ApiUnreachable { error } => {
                let mut started = Vec::new();
                for (kind, status) in &mut self.kinds {
                    match status {
                        SyncStatus::Synced { .. } => {
                            *status = SyncStatus::Unsynced {
                                since: ev.at,
                                error: Some(error.clone()),
                            };
                            started.push(SyncTransition::GapStarted {
                                kind: kind.clone(),
                                at: ev.at,
                                error: error.clone(),
                            });
                        }
                        SyncStatus::Unsynced { error: last, .. } => *last = Some(error.clone()),
                    }
                }
                started
            }
            other => self.observe_one(other, ev.at).into_iter().collect(),
        }
    }

    fn observe_one(&mut self, event: &TruthEvent, at: Time) -> Option<SyncTransition> {
        match event {
            TruthEvent::WatchFailed { kind, error } => {
                let status = self
                    .kinds
                    .entry(kind.clone())
                    .or_insert(SyncStatus::Unsynced {
                        since: at,
                        error: None,
                    });
                match status {
                    SyncStatus::Synced { .. } => {
                        *status = SyncStatus::Unsynced {
                            since: at,
                            error: Some(error.clone()),
                        };
                        Some(SyncTransition::GapStarted {
                            kind: kind.clone(),
                            at,
                            error: error.clone(),
                        })
                    }
                    SyncStatus::Unsynced { error: last, .. } => {
                        *last = Some(error.clone());
                        None
                    }
                }
            }
            TruthEvent::InitDone(kind) => {
                let previous = self
                    .kinds
                    .insert(kind.clone(), SyncStatus::Synced { since: at });
                match previous {
                    Some(SyncStatus::Synced { .. }) => None,
                    Some(SyncStatus::Unsynced { since, .. }) => Some(SyncTransition::GapEnded {
                        kind: kind.clone(),
                        since,
                        at,
                    }),
                    None => Some(SyncTransition::GapEnded {
                        kind: kind.clone(),
                        since: at,
                        at,
                    }),
                }
            }
            _ => None,
        }
    }

    /// The status of one watch.
    pub fn status(&self, kind: &ResourceKind) -> Option<&SyncStatus> {
        self.kinds.get(kind)
    }

    /// Whether one watch is synced.
    pub fn is_synced(&self, kind: &ResourceKind) -> bool {
        matches!(self.kinds.get(kind), Some(SyncStatus::Synced { .. }))
    }

    /// EndpointSlices and Services are synced: the truth may be judged
    /// (`ghostip_truth_synced` 1).
    pub fn truth_synced(&self) -> bool {
        self.is_synced(&ResourceKind::EndpointSlices) && self.is_synced(&ResourceKind::Services)
    }

    /// Every registered watch is synced.
    pub fn all_synced(&self) -> bool {
        self.kinds
            .values()
            .all(|s| matches!(s, SyncStatus::Synced { .. }))
    }

    /// When the current truth gap began, if EndpointSlices or Services are unsynced.
    pub fn truth_gap_since(&self) -> Option<Time> {
        [ResourceKind::EndpointSlices, ResourceKind::Services]
            .iter()
            .filter_map(|k| match self.kinds.get(k) {
                Some(SyncStatus::Unsynced { since, .. }) => Some(*since),
                _ => None,
            })
            .min()
    }

    /// All watches and their status.
    pub fn iter(&self) -> impl Iterator<Item = (&ResourceKind, &SyncStatus)> {
        self.kinds.iter()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(s: i64) -> Time {
        Time::from_second(1_800_000_000 + s).unwrap()
    }

    fn at(s: i64, event: TruthEvent) -> Received {
        Received { at: t(s), event }
    }

    /// The API server stops answering its probe before any watch stream notices: every
    /// synced watch is in a gap from then, and each one's relist ends its own gap.
    #[test]
    fn an_unreachable_api_server_starts_a_gap_for_every_watch_until_each_relists() {
        let kinds = [
            ResourceKind::EndpointSlices,
            ResourceKind::Services,
            ResourceKind::Pods,
        ];
        let mut s = SyncState::new(t(0), kinds.clone());
        for k in &kinds {
            s.observe(&at(1, TruthEvent::InitDone(k.clone())));
        }
        assert!(s.truth_synced() && s.all_synced());
        let down = s.observe(&at(
            10,
            TruthEvent::ApiUnreachable {
                error: "GET /readyz: connection refused".into(),
            },
        ));
        assert_eq!(down.len(), 3);
        assert!(
            down.iter()
                .all(|d| matches!(d, SyncTransition::GapStarted { at, .. } if *at == t(10)))
        );
        assert!(!s.truth_synced());
        assert_eq!(s.truth_gap_since(), Some(t(10)));
        // The streams fail later: the gap keeps its start.
        let later = s.observe(&at(
            21,
            TruthEvent::WatchFailed {
                kind: ResourceKind::EndpointSlices,
                error: "stream closed".into(),
            },
        ));
        assert!(later.is_empty());
        assert!(s.observe(&at(22, TruthEvent::ApiReachable)).is_empty());
        assert!(!s.truth_synced(), "a reachable API server is not a relist");
        assert!(
            s.observe(&at(
                23,
                TruthEvent::ApiUnreachable {
                    error: "again".into()
                }
            ))
            .is_empty()
        );
        let ended = s.observe(&at(30, TruthEvent::InitDone(ResourceKind::EndpointSlices)));
        assert!(
            matches!(ended.as_slice(), [SyncTransition::GapEnded { since, at, .. }] if *since == t(10) && *at == t(30))
        );
        assert!(!s.truth_synced());
        s.observe(&at(31, TruthEvent::InitDone(ResourceKind::Services)));
        assert!(s.truth_synced());
        assert!(!s.all_synced());
        s.observe(&at(32, TruthEvent::InitDone(ResourceKind::Pods)));
        assert!(s.all_synced());
    }
}
