//! Joins connection failures found in client logs with the history of who owned each target IP,
//! so that `ghostip explain` can say which errors were staleness and which rollout caused them.
//!
//! The join asks a [`HistorySource`] (the ledger, opened read-only by the `ghostip` binary, or
//! a truth-history file of Pod JSON parsed by [`TruthHistory::parse`]). A [`Joiner`] asks its
//! source once per distinct target IP and caches the answer, so a log with a million failures
//! aimed at twenty IPs costs twenty lookups. Rollout windows ([`rollout_windows`]) are computed
//! after the scan from the removals the join met: removals of pods of one workload (the
//! Deployment behind a ReplicaSet, a StatefulSet, …) less than [`WINDOW_GAP`] apart form one
//! window. [`Explainer`] aggregates the failures into an [`Explanation`].

mod history;
mod join;
mod report;
mod truth_file;
mod windows;

pub use history::{FlowWindow, HeldWindow, HistoryError, HistorySource, IpHistory};
pub use join::{Joined, Joiner, OwnerState, Removal, TargetFacts, owner_at, owner_now};
pub use report::{
    AgentFlows, Explainer, Explanation, HistoryInfo, ReadError, TargetSummary, TimeFilter,
    WindowSummary,
};
pub use truth_file::{TruthHistory, TruthHistoryError};
pub use windows::{RolloutWindow, WINDOW_GAP, Workload, rollout_windows};
