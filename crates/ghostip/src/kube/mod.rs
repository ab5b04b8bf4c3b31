//! Watches the Kubernetes API for the truth: EndpointSlices, Services, Pods and the CoreDNS Corefile.
//!
//! See [`watch_truth`] for the entry point of long-running commands, [`snapshot`] for one-shot
//! ones, and [`apply_to_truth`] / [`SyncState`] for what callers do with each [`Received`] event.
//!
//! Objects are converted on arrival into the core's trimmed records ([`convert`]) and dropped:
//! no whole object, managed field or reflector store is kept. Every event carries the time it
//! was received, read from an injected [`Clock`], so tests are exact.
//!
//! # Relists
//!
//! Each watch starts with a LIST: [`TruthEvent::RelistStarted`], one applied event per object,
//! [`TruthEvent::RelistDone`], then [`TruthEvent::Synced`]. An object applied before but missing
//! from a relist is deleted: [`apply_to_truth`] does that for slices and services through
//! `Truth::begin/finish_*_relist`; for pods the ledger does it with the same two events.
//!
//! # Recovery
//!
//! Any watch error yields [`TruthEvent::WatchFailed`] (a truth gap starts for that resource),
//! drops the watch, waits a backoff ([`BackoffPolicy`]) and starts over with a fresh LIST, so a
//! gap always ends with a complete relist and a [`TruthEvent::Synced`]; deletions missed while
//! the API was unreachable come out of that relist.
//!
//! # RBAC
//!
//! list/watch `endpointslices.discovery.k8s.io`, `services`, `pods` (cluster-wide, or in the
//! namespace given with `-n`); get/list/watch `configmaps` in `kube-system`, restricted to the
//! Corefile ConfigMaps by name (the watches use a `metadata.name` field selector). Never Secrets.

mod apply;
mod client;
pub mod convert;
mod error;
mod snapshot;
pub mod truth_file;
mod watch;

use std::fmt;

use ghostip_core::model::{PodRef, ServiceKey, Time};
use ghostip_core::truth::{PodRecord, ServiceRecord, SliceRecord};

pub use apply::{SyncState, SyncStatus, SyncTransition, apply_to_truth};
pub use client::{ClientOrigin, ConnectOptions, Connection, KubeconfigSource, connect};
pub use error::KubeError;
pub use snapshot::{Snapshot, snapshot};
pub use watch::{
    BackoffPolicy, TruthSource, WatchScope, corefile_events_from, events_from, watch_corefile,
    watch_endpoint_slices, watch_pods, watch_pods_selected, watch_services, watch_truth,
};

/// The Corefile ConfigMap key (CoreDNS and NodeLocal DNSCache both use it).
pub const COREFILE_KEY: &str = "Corefile";

/// Reads the current time; injected so tests control every timestamp.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> Time;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Time {
        Time::now()
    }
}

impl<F> Clock for F
where
    F: Fn() -> Time + Send + Sync + 'static,
{
    fn now(&self) -> Time {
        self()
    }
}

/// A ConfigMap by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConfigMapRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ConfigMapRef {
    /// Builds a reference.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// `kube-system/coredns` (kubeadm, EKS, k3s, …).
    pub fn coredns() -> Self {
        Self::new("kube-system", "coredns")
    }

    /// `kube-system/node-local-dns` (NodeLocal DNSCache).
    pub fn node_local_dns() -> Self {
        Self::new("kube-system", "node-local-dns")
    }
}

impl fmt::Display for ConfigMapRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One watched resource: its sync state is tracked separately.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceKind {
    /// `discovery.k8s.io/v1` EndpointSlices.
    EndpointSlices,
    /// Services.
    Services,
    /// Pods.
    Pods,
    /// One Corefile ConfigMap.
    ConfigMap(ConfigMapRef),
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourceKind::EndpointSlices => f.write_str("endpointslices"),
            ResourceKind::Services => f.write_str("services"),
            ResourceKind::Pods => f.write_str("pods"),
            ResourceKind::ConfigMap(r) => write!(f, "configmap {r}"),
        }
    }
}

/// What the API told us, converted to the core's records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TruthEvent {
    /// An EndpointSlice was listed, added or changed.
    SliceApplied(SliceRecord),
    /// An EndpointSlice was deleted (or no longer belongs to a Service).
    SliceDeleted {
        /// Namespace.
        namespace: String,
        /// Slice name.
        name: String,
    },
    /// A Service was listed, added or changed.
    ServiceApplied(ServiceRecord),
    /// A Service was deleted.
    ServiceDeleted(ServiceKey),
    /// A Pod was listed, added or changed.
    PodApplied(PodRecord),
    /// A Pod was deleted.
    PodDeleted(PodRef),
    /// A Corefile ConfigMap was listed, added or changed.
    Corefile {
        /// The ConfigMap.
        configmap: ConfigMapRef,
        /// Its `Corefile` key.
        text: String,
    },
    /// A Corefile ConfigMap was deleted, lost its `Corefile` key, or does not exist.
    CorefileRemoved(ConfigMapRef),
    /// A full LIST starts: objects applied before and not re-applied until
    /// [`TruthEvent::RelistDone`] are gone.
    RelistStarted(ResourceKind),
    /// The LIST is complete.
    RelistDone(ResourceKind),
    /// The resource is synced (follows [`TruthEvent::RelistDone`]); a truth gap ends.
    Synced(ResourceKind),
    /// The watch failed: a truth gap starts until the next [`TruthEvent::Synced`].
    WatchFailed {
        /// Which watch.
        kind: ResourceKind,
        /// The error, as text.
        error: String,
    },
}

/// A [`TruthEvent`] and when ghostip received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// Receive time, from the injected [`Clock`].
    pub at: Time,
    /// The event.
    pub event: TruthEvent,
}
