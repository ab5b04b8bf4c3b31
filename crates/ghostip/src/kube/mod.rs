//! Watches the Kubernetes API for the truth: EndpointSlices, Services, Pods and the CoreDNS Corefile.
//!
//! See [`watch_truth`] for the entry point of long-running commands, [`snapshot`] for one-shot
//! ones, and [`apply_to_truth`] / [`SyncState`] for what callers do with each [`Received`] event.
//!
//! Objects are converted on arrival into the core's trimmed records ([`convert`]) and dropped:
//! no whole object, managed field or reflector store is kept. Every event carries the time it
//! was received, read from an injected [`Clock`], so tests are exact. The events, and how they
//! are applied, are the pure runtime's ([`ghostip_session::truth_event`], [`ghostip_session::sync`]).
//!
//! # Relists
//!
//! Each watch starts with a LIST: [`TruthEvent::Init`], one [`TruthEvent::InitApply`] per
//! object, [`TruthEvent::InitDone`] (the resource is synced). An object applied before but
//! missing from a relist is deleted: [`apply_to_truth`] does that for slices and services
//! through `Truth::begin/finish_*_relist`; for pods the ledger does it with the same events.
//!
//! # Recovery
//!
//! Any watch error yields [`TruthEvent::WatchFailed`] (a truth gap starts for that resource),
//! drops the watch, waits a backoff ([`BackoffPolicy`]) and starts over with a fresh LIST, so a
//! gap always ends with a complete relist and its [`TruthEvent::InitDone`]; deletions missed
//! while the API was unreachable come out of that relist. A liveness probe of `/readyz`
//! ([`api_liveness`]) notices a dead API server within seconds, before the watch streams do:
//! [`TruthEvent::ApiUnreachable`] starts the gap of every watch, and every watch relists.
//!
//! # RBAC
//!
//! list/watch `endpointslices.discovery.k8s.io`, `services`, `pods` (cluster-wide, or in the
//! namespace given with `-n`); get/list/watch `configmaps` in `kube-system`, restricted to the
//! Corefile ConfigMaps by name (the watches use a `metadata.name` field selector); the
//! non-resource URL `/readyz` (granted to every client by `system:public-info-viewer`).
//! Never Secrets.

mod client;
pub mod convert;
mod error;
pub mod node_count;
mod snapshot;
pub mod truth_file;
mod watch;

pub use client::{Bearer, ClientOrigin, ConnectOptions, Connection, KubeconfigSource, connect};
pub use error::KubeError;
pub use ghostip_core::Clock;
pub use ghostip_session::sync::{SyncState, SyncStatus, SyncTransition, apply_to_truth};
pub use ghostip_session::truth_event::{
    COREFILE_KEY, ConfigMapRef, Received, ResourceKind, TruthEvent, TruthKey, TruthObject,
};
pub use snapshot::{Snapshot, snapshot};
pub use watch::{
    BackoffPolicy, LivenessProbe, RelistSignal, RelistTrigger, TruthSource, WatchScope,
    api_liveness, corefile_events_from, events_from, relist_signal, relisting_events_from,
    watch_corefile, watch_endpoint_slices, watch_truth,
};
