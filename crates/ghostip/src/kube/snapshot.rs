//! One-shot LIST of Services, EndpointSlices, Pods and Corefiles into a [`Truth`], for `check`.
//!
//! See [`snapshot`]. The same conversions as the watches are used; nothing is watched.

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use tracing::warn;

use ghostip_core::model::Time;
use ghostip_core::truth::{PodRecord, Truth};

use super::client::{ClientOrigin, Connection};
use super::convert::{corefile_text, pod_record, service_record, slice_record};
use super::error::KubeError;
use super::watch::WatchScope;
use super::{Clock, ConfigMapRef, Received, ResourceKind, TruthEvent, TruthObject};
use ghostip_analysis::pod::Malformed;

const PAGE_SIZE: u32 = 500;

/// The truth as listed once.
#[derive(Debug)]
pub struct Snapshot {
    /// Services and slices.
    pub truth: Truth,
    /// Pods (empty when the scope does not list pods).
    pub pods: Vec<PodRecord>,
    /// Corefiles found, by ConfigMap; a missing or unreadable ConfigMap is left out.
    pub corefiles: Vec<(ConfigMapRef, String)>,
    /// Objects skipped as malformed.
    pub skipped: Vec<Malformed>,
    /// When the lists completed (from the clock).
    pub at: Time,
    /// Every object listed, as the watcher would have delivered it.
    objects: Vec<(ResourceKind, TruthObject)>,
}

impl Snapshot {
    /// The lists as a watcher delivers a first sync: for each of `kinds`, `Init`, one
    /// `InitApply` per object and `InitDone`, all received when the lists completed. A
    /// session fed these is synced on exactly this truth.
    pub fn events(&self, kinds: &[ResourceKind]) -> Vec<Received> {
        let at = self.at;
        let mut out = Vec::with_capacity(self.objects.len() + 2 * kinds.len());
        for kind in kinds {
            out.push(Received {
                at,
                event: TruthEvent::Init(kind.clone()),
            });
            out.extend(
                self.objects
                    .iter()
                    .filter(|(k, _)| k == kind)
                    .map(|(_, o)| Received {
                        at,
                        event: TruthEvent::InitApply(o.clone()),
                    }),
            );
            out.push(Received {
                at,
                event: TruthEvent::InitDone(kind.clone()),
            });
        }
        out
    }
}

/// Lists the truth once, within `timeout`.
///
/// # Errors
///
/// [`KubeError::Timeout`], [`KubeError::Unreachable`], [`KubeError::Forbidden`] or
/// [`KubeError::Api`], each naming the server, kubeconfig and context. Corefile ConfigMaps
/// that are missing or forbidden are only logged.
pub async fn snapshot(
    conn: &Connection,
    scope: &WatchScope,
    timeout: Duration,
    clock: &dyn Clock,
) -> Result<Snapshot, KubeError> {
    match tokio::time::timeout(timeout, list_everything(conn, scope, clock)).await {
        Ok(result) => result,
        Err(_) => Err(KubeError::Timeout {
            origin: conn.origin.clone(),
            after: timeout,
        }),
    }
}

async fn list_everything(
    conn: &Connection,
    scope: &WatchScope,
    clock: &dyn Clock,
) -> Result<Snapshot, KubeError> {
    let ns = scope.namespace.as_deref();
    let origin = &conn.origin;
    let services: Vec<Service> = list_all(&scoped(conn, ns), origin, "services").await?;
    let slices: Vec<EndpointSlice> = list_all(&scoped(conn, ns), origin, "endpointslices").await?;
    let pods: Vec<Pod> = if scope.pods {
        list_all(&scoped(conn, ns), origin, "pods").await?
    } else {
        Vec::new()
    };
    let mut corefiles = Vec::new();
    for cm in &scope.corefiles {
        let api: Api<ConfigMap> = Api::namespaced(conn.client.clone(), &cm.namespace);
        match api.get_opt(&cm.name).await {
            Ok(Some(obj)) => match corefile_text(&obj) {
                Some(text) => corefiles.push((cm.clone(), text.to_string())),
                None => warn!(configmap = %cm, "ConfigMap has no Corefile key; ignored."),
            },
            Ok(None) => {}
            Err(kube::Error::Api(status)) => {
                warn!(configmap = %cm, code = status.code, message = %status.message, "Cannot read Corefile ConfigMap.");
            }
            Err(e) => return Err(KubeError::from_request(origin, "configmaps", e)),
        }
    }

    let at = clock.now();
    let mut truth = Truth::new();
    let mut skipped = Vec::new();
    let mut objects = Vec::new();
    for svc in &services {
        match service_record(svc) {
            Ok(r) => {
                objects.push((ResourceKind::Services, TruthObject::Service(r.clone())));
                truth.apply_service(r, at);
            }
            Err(m) => skipped.push(m),
        }
    }
    for slice in &slices {
        match slice_record(slice) {
            Ok(r) => {
                objects.push((ResourceKind::EndpointSlices, TruthObject::Slice(r.clone())));
                truth.apply_slice(r, at);
            }
            Err(m) => skipped.push(m),
        }
    }
    let mut pod_records = Vec::with_capacity(pods.len());
    for pod in &pods {
        match pod_record(pod) {
            Ok(r) => {
                objects.push((ResourceKind::Pods, TruthObject::Pod(r.clone())));
                pod_records.push(r);
            }
            Err(m) => skipped.push(m),
        }
    }
    for (configmap, text) in &corefiles {
        objects.push((
            ResourceKind::ConfigMap(configmap.clone()),
            TruthObject::Corefile {
                configmap: configmap.clone(),
                text: text.clone(),
            },
        ));
    }
    for m in &skipped {
        warn!(error = %m, "Malformed object skipped.");
    }
    Ok(Snapshot {
        truth,
        pods: pod_records,
        corefiles,
        skipped,
        at,
        objects,
    })
}

fn scoped<K>(conn: &Connection, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(conn.client.clone(), ns),
        None => Api::all(conn.client.clone()),
    }
}

/// Every page of a LIST.
async fn list_all<K>(
    api: &Api<K>,
    origin: &ClientOrigin,
    resource: &'static str,
) -> Result<Vec<K>, KubeError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(PAGE_SIZE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| KubeError::from_request(origin, resource, e))?;
        items.extend(page.items);
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => {
                params = ListParams::default().limit(PAGE_SIZE).continue_token(token)
            }
            _ => return Ok(items),
        }
    }
}
