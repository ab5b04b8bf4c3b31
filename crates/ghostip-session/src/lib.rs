//! Pure runtime of ghostip: truth events and how they are applied, the observation session and the layer models, with no IO and time injected.
//!
//! The binary crate's adapters (kube-rs watchers, the DNS prober, datapath readers, the
//! ledger) turn the world into [`Received`] truth events and [`Observation`]s
//! (`ghostip_core::Observation`) and carry out what a [`Session`] asks for; everything
//! between is here, driven by tests with exact times.
//!
//! - [`truth_event`]: the watcher's events (`Init`, `InitApply`, `InitDone`, `Apply`,
//!   `Delete`) over the core's trimmed records;
//! - [`sync`]: applying them to the `Truth`, and which watches are synced (truth gaps);
//! - [`session`]: truth + engine + registered layers, the memory of recent changes, the
//!   timeline;
//! - [`layer`]: the [`LayerModel`] seam every layer plugs into;
//! - [`layers`]: the built-in DNS, datapath and conntrack models;
//! - [`pacing`]: when a node-local read may run: the CPU-seconds budget of reads and the
//!   audit period it implies, re-reads after a change (every reader's, not one layer's);
//! - [`report`]: the report model the printers print;
//! - [`components`]: the components' own word (kube-proxy's metrics, `component-stalled`).
//!
//! [`Observation`]: ghostip_core::Observation
#![forbid(unsafe_code)]

pub mod components;
pub mod drain;
pub mod filter;
pub mod layer;
pub mod layers;
pub mod pacing;
pub mod report;
pub mod session;
pub mod sync;
pub mod truth_event;

pub use filter::ServiceFilter;
pub use layer::{ConnectRequest, DesiredChange, LayerCx, LayerModel};
pub use session::{Actions, ChangeMemory, Session, SessionConfig};
pub use sync::{SyncState, SyncStatus, SyncTransition, apply_to_truth};
pub use truth_event::{
    COREFILE_KEY, ConfigMapRef, Received, ResourceKind, TruthEvent, TruthKey, TruthObject,
};
