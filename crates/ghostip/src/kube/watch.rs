//! Turns kube-runtime watcher streams into one stream of timestamped [`TruthEvent`]s.
//!
//! See [`watch_truth`]; [`events_from`] and [`corefile_events_from`] take any stream factory,
//! so tests drive the same code with synthetic `watcher::Event` streams.
//!
//! # Recovery
//!
//! On any watcher error the stream emits [`TruthEvent::WatchFailed`], drops the watch, sleeps
//! the next backoff delay and starts a new watch, whose first step is a full LIST. A watch
//! stream that ends is restarted the same way, without a gap: the new LIST covers it.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use ghostip_core::model::{PodRef, ServiceKey};

use super::client::Connection;
use super::convert::{corefile_text, pod_record, service_record, slice_record};
use super::{Clock, ConfigMapRef, Received, ResourceKind, TruthEvent, TruthKey, TruthObject};

/// How long to wait before restarting a failed watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackoffPolicy {
    /// kube-runtime's `DefaultBackoff` (client-go's: 0.8 s doubling to 30 s, with jitter).
    KubeDefault,
    /// Doubling from `initial` up to `max`, reset after every successful relist.
    Capped {
        /// First delay.
        initial: Duration,
        /// Largest delay.
        max: Duration,
    },
}

impl Default for BackoffPolicy {
    /// 0.8 s doubling to 4 s: the truth resumes within 5 s of the API server coming back.
    fn default() -> Self {
        BackoffPolicy::Capped {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(4),
        }
    }
}

impl BackoffPolicy {
    fn build(self) -> Box<dyn Backoff> {
        match self {
            BackoffPolicy::KubeDefault => Box::new(DefaultBackoff::default()),
            BackoffPolicy::Capped { initial, max } => Box::new(CappedBackoff {
                initial,
                max,
                next: initial,
            }),
        }
    }
}

struct CappedBackoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Iterator for CappedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.next.min(self.max);
        self.next = self.next.saturating_mul(2).min(self.max);
        Some(d)
    }
}

impl Backoff for CappedBackoff {
    fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchScope {
    /// `-n NAMESPACE` for EndpointSlices, Services and Pods; `None` for all namespaces.
    pub namespace: Option<String>,
    /// Watch Pods (for the IP ledger).
    pub pods: bool,
    /// Only the Pods scheduled on this node (`spec.nodeName` field selector; the agent).
    pub pods_on_node: Option<String>,
    /// Corefile ConfigMaps to watch, each by name.
    pub corefiles: Vec<ConfigMapRef>,
    /// Restart delay after a failed watch.
    pub backoff: BackoffPolicy,
}

impl Default for WatchScope {
    fn default() -> Self {
        Self {
            namespace: None,
            pods: true,
            pods_on_node: None,
            corefiles: vec![ConfigMapRef::coredns(), ConfigMapRef::node_local_dns()],
            backoff: BackoffPolicy::default(),
        }
    }
}

impl WatchScope {
    /// The watches this scope starts, for [`super::SyncState::new`].
    pub fn kinds(&self) -> Vec<ResourceKind> {
        let mut kinds = vec![ResourceKind::EndpointSlices, ResourceKind::Services];
        if self.pods {
            kinds.push(ResourceKind::Pods);
        }
        kinds.extend(self.corefiles.iter().cloned().map(ResourceKind::ConfigMap));
        kinds
    }
}

/// A Kubernetes type the truth watches, and how its objects become [`TruthEvent`]s.
pub trait TruthSource: Resource + Clone + DeserializeOwned + Debug + Send + 'static {
    /// The watch this type is.
    const KIND: ResourceKind;

    /// Whether a malformed version deletes the object's earlier, usable version (a slice that
    /// can no longer be read must not linger in the truth).
    const MALFORMED_DELETES: bool = false;

    /// The object as the truth keeps it; `None` (logged) when it is malformed.
    fn object(&self) -> Option<TruthObject>;

    /// Its key, for deletions.
    fn key(&self) -> Option<TruthKey>;
}

impl TruthSource for EndpointSlice {
    const KIND: ResourceKind = ResourceKind::EndpointSlices;
    const MALFORMED_DELETES: bool = true;

    fn object(&self) -> Option<TruthObject> {
        slice_record(self)
            .inspect_err(|e| warn!(error = %e, "Malformed EndpointSlice skipped."))
            .ok()
            .map(TruthObject::Slice)
    }

    fn key(&self) -> Option<TruthKey> {
        let (namespace, name) = (
            self.metadata.namespace.clone()?,
            self.metadata.name.clone()?,
        );
        Some(TruthKey::Slice { namespace, name })
    }
}

impl TruthSource for Service {
    const KIND: ResourceKind = ResourceKind::Services;

    fn object(&self) -> Option<TruthObject> {
        service_record(self)
            .inspect_err(|e| warn!(error = %e, "Malformed Service skipped."))
            .ok()
            .map(TruthObject::Service)
    }

    fn key(&self) -> Option<TruthKey> {
        let (ns, name) = (
            self.metadata.namespace.clone()?,
            self.metadata.name.clone()?,
        );
        Some(TruthKey::Service(ServiceKey::new(ns, name)))
    }
}

impl TruthSource for Pod {
    const KIND: ResourceKind = ResourceKind::Pods;

    fn object(&self) -> Option<TruthObject> {
        pod_record(self)
            .inspect_err(|e| warn!(error = %e, "Malformed Pod skipped."))
            .ok()
            .map(TruthObject::Pod)
    }

    fn key(&self) -> Option<TruthKey> {
        let (namespace, name) = (
            self.metadata.namespace.clone()?,
            self.metadata.name.clone()?,
        );
        Some(TruthKey::Pod(PodRef {
            namespace,
            name,
            uid: self.uid().unwrap_or_default(),
        }))
    }
}

/// The events of one applied object: the object, or for a malformed one the deletion of
/// its earlier version where that matters.
fn applied<K: TruthSource>(o: &K, wrap: fn(TruthObject) -> TruthEvent) -> Vec<TruthEvent> {
    match o.object() {
        Some(object) => vec![wrap(object)],
        None if K::MALFORMED_DELETES => o.key().map(TruthEvent::Delete).into_iter().collect(),
        None => Vec::new(),
    }
}

fn translate<K: TruthSource>(ev: Event<K>) -> Vec<TruthEvent> {
    match ev {
        Event::Init => vec![TruthEvent::Init(K::KIND)],
        Event::InitApply(o) => applied(&o, TruthEvent::InitApply),
        Event::Apply(o) => applied(&o, TruthEvent::Apply),
        Event::Delete(o) => o.key().map(TruthEvent::Delete).into_iter().collect(),
        Event::InitDone => vec![TruthEvent::InitDone(K::KIND)],
    }
}

/// Tracks one Corefile ConfigMap across relists, to report it gone when a relist misses it.
struct CorefileTranslator {
    cm: ConfigMapRef,
    present: bool,
    seen_in_relist: bool,
}

impl CorefileTranslator {
    fn translate(&mut self, ev: Event<ConfigMap>) -> Vec<TruthEvent> {
        let kind = ResourceKind::ConfigMap(self.cm.clone());
        match ev {
            Event::Init => {
                self.seen_in_relist = false;
                vec![TruthEvent::Init(kind)]
            }
            Event::InitApply(cm) => self.applied(&cm, TruthEvent::InitApply),
            Event::Apply(cm) => self.applied(&cm, TruthEvent::Apply),
            Event::Delete(cm) => {
                if cm.metadata.name.as_deref() != Some(self.cm.name.as_str()) {
                    return Vec::new();
                }
                self.gone()
            }
            Event::InitDone => {
                let mut out = if self.seen_in_relist {
                    Vec::new()
                } else {
                    self.gone()
                };
                out.push(TruthEvent::InitDone(kind));
                out
            }
        }
    }

    fn applied(&mut self, cm: &ConfigMap, wrap: fn(TruthObject) -> TruthEvent) -> Vec<TruthEvent> {
        if cm.metadata.name.as_deref() != Some(self.cm.name.as_str()) {
            return Vec::new();
        }
        match corefile_text(cm) {
            Some(text) => {
                self.present = true;
                self.seen_in_relist = true;
                vec![wrap(TruthObject::Corefile {
                    configmap: self.cm.clone(),
                    text: text.to_string(),
                })]
            }
            None => {
                warn!(configmap = %self.cm, "ConfigMap has no Corefile key; ignored.");
                self.gone()
            }
        }
    }

    fn gone(&mut self) -> Vec<TruthEvent> {
        if std::mem::replace(&mut self.present, false) {
            vec![TruthEvent::Delete(TruthKey::Corefile(self.cm.clone()))]
        } else {
            Vec::new()
        }
    }
}

/// Timestamped events of one kind, from watcher streams made by `make`: called once at start
/// and again after every failure or end of stream.
pub fn events_from<K, M, S>(
    make: M,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received>
where
    K: TruthSource,
    M: FnMut() -> S + Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    drive(K::KIND, make, translate::<K>, clock, backoff)
}

/// Timestamped events of one Corefile ConfigMap, from watcher streams made by `make`.
pub fn corefile_events_from<M, S>(
    cm: ConfigMapRef,
    make: M,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received>
where
    M: FnMut() -> S + Send + 'static,
    S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Send + 'static,
{
    let mut t = CorefileTranslator {
        cm: cm.clone(),
        present: false,
        seen_in_relist: false,
    };
    drive(
        ResourceKind::ConfigMap(cm),
        make,
        move |ev| t.translate(ev),
        clock,
        backoff,
    )
}

struct Driver<K, M, T> {
    kind: ResourceKind,
    make: M,
    translate: T,
    current: Option<BoxStream<'static, Result<Event<K>, watcher::Error>>>,
    backoff: Box<dyn Backoff>,
    wait: Option<Duration>,
    clock: Arc<dyn Clock>,
}

fn drive<K, M, S, T>(
    kind: ResourceKind,
    make: M,
    translate: T,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received>
where
    K: Send + 'static,
    M: FnMut() -> S + Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    T: FnMut(Event<K>) -> Vec<TruthEvent> + Send + 'static,
{
    let driver = Driver {
        kind,
        make,
        translate,
        current: None,
        backoff: backoff.build(),
        wait: None,
        clock,
    };
    stream::unfold(driver, |mut d| async move {
        loop {
            if d.current.is_none() {
                if let Some(delay) = d.wait.take() {
                    tokio::time::sleep(delay).await;
                }
                d.current = Some((d.make)().boxed());
            }
            let Some(current) = d.current.as_mut() else { continue };
            match current.next().await {
                Some(Ok(ev)) => {
                    let at = d.clock.now();
                    if matches!(ev, Event::InitDone) {
                        d.backoff.reset();
                    }
                    let events = (d.translate)(ev);
                    if !events.is_empty() {
                        let batch: Vec<Received> = events.into_iter().map(|event| Received { at, event }).collect();
                        return Some((batch, d));
                    }
                }
                Some(Err(e)) => {
                    let at = d.clock.now();
                    d.current = None;
                    d.wait = d.backoff.next();
                    warn!(kind = %d.kind, error = %e, retry_in = ?d.wait, "Watch failed; restarting with a fresh list.");
                    let event = TruthEvent::WatchFailed { kind: d.kind.clone(), error: e.to_string() };
                    return Some((vec![Received { at, event }], d));
                }
                None => {
                    d.current = None;
                    d.wait = d.backoff.next();
                    debug!(kind = %d.kind, "Watch stream ended; restarting with a fresh list.");
                }
            }
        }
    })
    .flat_map(stream::iter)
    .boxed()
}

/// Watches EndpointSlices in `namespace` (all namespaces when `None`).
pub fn watch_endpoint_slices(
    client: kube::Client,
    namespace: Option<&str>,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received> {
    let api: Api<EndpointSlice> = scoped_api(client, namespace);
    events_from(
        move || watcher::watcher(api.clone(), list_config()),
        clock,
        backoff,
    )
}

/// Watches Services in `namespace` (all namespaces when `None`).
pub fn watch_services(
    client: kube::Client,
    namespace: Option<&str>,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received> {
    let api: Api<Service> = scoped_api(client, namespace);
    events_from(
        move || watcher::watcher(api.clone(), list_config()),
        clock,
        backoff,
    )
}

/// Watches Pods in `namespace` (all namespaces when `None`).
pub fn watch_pods(
    client: kube::Client,
    namespace: Option<&str>,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received> {
    watch_pods_selected(client, namespace, None, clock, backoff)
}

/// Watches Pods in `namespace`, only those on `node` when given (`spec.nodeName` field
/// selector: the API server filters, so a node agent never receives the whole cluster's pods).
pub fn watch_pods_selected(
    client: kube::Client,
    namespace: Option<&str>,
    node: Option<&str>,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received> {
    let api: Api<Pod> = scoped_api(client, namespace);
    let config = match node {
        Some(n) => list_config().fields(&format!("spec.nodeName={n}")),
        None => list_config(),
    };
    events_from(
        move || watcher::watcher(api.clone(), config.clone()),
        clock,
        backoff,
    )
}

/// Watches one Corefile ConfigMap, selected by name (a `metadata.name` field selector, so
/// RBAC can restrict the grant to that name).
pub fn watch_corefile(
    client: kube::Client,
    cm: ConfigMapRef,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received> {
    let api: Api<ConfigMap> = Api::namespaced(client, &cm.namespace);
    let config = list_config().fields(&format!("metadata.name={}", cm.name));
    corefile_events_from(
        cm,
        move || watcher::watcher(api.clone(), config.clone()),
        clock,
        backoff,
    )
}

/// Watches everything in `scope`, merged into one stream. The stream never ends; failures
/// are [`TruthEvent::WatchFailed`] events and every watch restarts on its own.
pub fn watch_truth(
    conn: &Connection,
    scope: &WatchScope,
    clock: Arc<dyn Clock>,
) -> BoxStream<'static, Received> {
    let ns = scope.namespace.as_deref();
    let client = &conn.client;
    let mut streams = vec![
        watch_endpoint_slices(client.clone(), ns, clock.clone(), scope.backoff),
        watch_services(client.clone(), ns, clock.clone(), scope.backoff),
    ];
    if scope.pods {
        streams.push(watch_pods_selected(
            client.clone(),
            ns,
            scope.pods_on_node.as_deref(),
            clock.clone(),
            scope.backoff,
        ));
    }
    for cm in &scope.corefiles {
        streams.push(watch_corefile(
            client.clone(),
            cm.clone(),
            clock.clone(),
            scope.backoff,
        ));
    }
    stream::select_all(streams).boxed()
}

/// Objects per page of the initial LIST (kube-rs defaults to 500).
///
/// A page is decoded whole before the watcher hands its objects out one by one: 500
/// EndpointSlices of 15 endpoints are about 6 MB of decoded objects in flight, which the
/// allocator keeps after the list is done. 100 per page is a fifth of that for 5x the
/// requests (200 instead of 40 at 20 000 slices).
const LIST_PAGE_SIZE: u32 = 100;

/// The watcher configuration every truth watch starts from.
fn list_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

fn scoped_api<K>(client: kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn capped_backoff_doubles_and_resets() {
        let mut b = BackoffPolicy::Capped {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(4),
        }
        .build();
        let got: Vec<u128> = (0..5).map(|_| b.next().unwrap().as_millis()).collect();
        assert_eq!(got, vec![800, 1600, 3200, 4000, 4000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(800)));
    }

    #[test]
    fn scope_kinds() {
        let kinds = WatchScope::default().kinds();
        assert_eq!(kinds.len(), 5);
        let none = WatchScope {
            pods: false,
            corefiles: vec![],
            ..WatchScope::default()
        };
        assert_eq!(
            none.kinds(),
            vec![ResourceKind::EndpointSlices, ResourceKind::Services]
        );
    }
}
