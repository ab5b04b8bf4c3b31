//! What the Kubernetes API told ghostip, as the watcher's events (kube-rs's `Init`, `InitApply`, `InitDone`, `Apply`, `Delete`) over the core's trimmed records.
//!
//! The kube adapter converts every object on arrival into a [`TruthObject`] and stamps each
//! event with the time it was received ([`Received`]). A watch starts with a LIST:
//! [`TruthEvent::Init`], one [`TruthEvent::InitApply`] per object, [`TruthEvent::InitDone`].
//! Any object applied before but not listed in the `InitApply` events of a relist was
//! deleted while the watch was down ([`crate::sync::apply_to_truth`] deletes it); the
//! resource is synced from `InitDone` on. [`TruthEvent::WatchFailed`] starts a truth gap
//! that the next `InitDone` ends; [`TruthEvent::ApiUnreachable`] (the API server stopped
//! answering a liveness probe) starts one for every watch, each ended by its relist.

use std::fmt;

use ghostip_core::model::{PodRef, ServiceKey, Time};
use ghostip_core::truth::{PodRecord, ServiceRecord, SliceRecord};

/// The Corefile ConfigMap key (CoreDNS and NodeLocal DNSCache both use it).
pub const COREFILE_KEY: &str = "Corefile";

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

/// An object of the truth, trimmed to what ghostip keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TruthObject {
    /// An EndpointSlice.
    Slice(SliceRecord),
    /// A Service.
    Service(ServiceRecord),
    /// A Pod.
    Pod(PodRecord),
    /// A Corefile ConfigMap's `Corefile` key.
    Corefile {
        /// The ConfigMap.
        configmap: ConfigMapRef,
        /// Its `Corefile` key.
        text: String,
    },
}

impl TruthObject {
    /// The key a later [`TruthEvent::Delete`] of this object carries.
    pub fn key(&self) -> TruthKey {
        match self {
            TruthObject::Slice(s) => TruthKey::Slice {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
            },
            TruthObject::Service(s) => TruthKey::Service(s.key.clone()),
            TruthObject::Pod(p) => TruthKey::Pod(p.pod.clone()),
            TruthObject::Corefile { configmap, .. } => TruthKey::Corefile(configmap.clone()),
        }
    }
}

/// Which object a [`TruthEvent::Delete`] removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TruthKey {
    /// An EndpointSlice (deleted, or no longer belonging to a Service).
    Slice {
        /// Namespace.
        namespace: String,
        /// Slice name.
        name: String,
    },
    /// A Service.
    Service(ServiceKey),
    /// A Pod.
    Pod(PodRef),
    /// A Corefile ConfigMap (deleted, lost its `Corefile` key, or missing from a relist).
    Corefile(ConfigMapRef),
}

/// What the API told us, in the watcher's vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TruthEvent {
    /// A LIST of one resource starts: objects applied before and not re-listed until
    /// [`TruthEvent::InitDone`] are gone.
    Init(ResourceKind),
    /// One object of the LIST.
    InitApply(TruthObject),
    /// The LIST is complete: unlisted objects are deleted and the resource is synced (a truth
    /// gap of this resource ends).
    InitDone(ResourceKind),
    /// An object was added or changed.
    Apply(TruthObject),
    /// An object was deleted.
    Delete(TruthKey),
    /// The watch failed, or the API server stopped answering: a truth gap starts until the
    /// next [`TruthEvent::InitDone`].
    WatchFailed {
        /// Which watch.
        kind: ResourceKind,
        /// The error, as text.
        error: String,
    },
    /// The API server stopped answering its liveness probe (`/readyz`), although the watch
    /// streams may not have noticed yet: a truth gap starts for every watch, each ended by
    /// the `InitDone` of its relist (the adapter restarts the watches).
    ApiUnreachable {
        /// The probe's error, as text.
        error: String,
    },
    /// The API server answers its liveness probe again (the gap still ends with the relists).
    ApiReachable,
}

impl TruthEvent {
    /// The object an `InitApply` or `Apply` carries.
    pub fn applied(&self) -> Option<&TruthObject> {
        match self {
            TruthEvent::InitApply(o) | TruthEvent::Apply(o) => Some(o),
            _ => None,
        }
    }
}

/// A [`TruthEvent`] and when ghostip received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// Receive time, from the injected clock.
    pub at: Time,
    /// The event.
    pub event: TruthEvent,
}
