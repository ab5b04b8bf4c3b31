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
//!
//! A watch stream notices a dead API server only when its connection fails, which can take
//! many seconds (a stopped server's streams closed 11 s later in the lab). [`watch_truth`]
//! therefore also probes `GET /readyz` ([`api_liveness`], every second, bounded by a short
//! timeout): after two failed probes in a row it emits [`TruthEvent::ApiUnreachable`] (a
//! truth gap for every watch from then) and makes every watch drop its stream and relist
//! ([`RelistSignal`]), so the gap ends with a complete relist once the server answers.

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
use tokio::sync::watch as signal;
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

/// The API server's liveness probe ([`api_liveness`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivenessProbe {
    /// Time between the starts of two probes.
    pub interval: Duration,
    /// A probe without an answer within this long failed.
    pub timeout: Duration,
    /// Failed probes in a row after which the API server is unreachable.
    pub failures: u32,
}

impl Default for LivenessProbe {
    /// `GET /readyz` every second, failed after 1 s, unreachable after two failures: a
    /// stopped API server (`/readyz` fails at once while it shuts down) is noticed within
    /// about 2 s, one that hangs within about 4 s.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            failures: 2,
        }
    }
}

/// Makes the watches built with it drop their stream and start over with a LIST.
#[derive(Clone, Debug)]
pub struct RelistSignal(signal::Receiver<u64>);

/// Sends a [`RelistSignal`].
#[derive(Debug)]
pub struct RelistTrigger(signal::Sender<u64>);

impl RelistTrigger {
    /// Every watch of the signal drops its stream and relists.
    pub fn relist(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A new relist trigger and the signal watches listen to.
pub fn relist_signal() -> (RelistTrigger, RelistSignal) {
    let (tx, rx) = signal::channel(0);
    (RelistTrigger(tx), RelistSignal(rx))
}

impl RelistSignal {
    /// `s`, ended at the next relist signal sent after this call.
    fn until_next<S: Stream + Send + 'static>(
        &self,
        s: S,
    ) -> impl Stream<Item = S::Item> + Send + use<S> {
        let mut rx = self.0.clone();
        rx.borrow_and_update();
        s.take_until(async move {
            // A dropped trigger never signals again.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
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
    /// Probe the API server's liveness; `None`: only failed watch streams start gaps.
    pub liveness: Option<LivenessProbe>,
}

impl Default for WatchScope {
    fn default() -> Self {
        Self {
            namespace: None,
            pods: true,
            pods_on_node: None,
            corefiles: vec![ConfigMapRef::coredns(), ConfigMapRef::node_local_dns()],
            backoff: BackoffPolicy::default(),
            liveness: Some(LivenessProbe::default()),
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
    relisting_events_from(make, clock, backoff, None)
}

/// [`events_from`], whose watch also drops its stream and relists on `relist`.
pub fn relisting_events_from<K, M, S>(
    make: M,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
    relist: Option<RelistSignal>,
) -> BoxStream<'static, Received>
where
    K: TruthSource,
    M: FnMut() -> S + Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    drive(
        K::KIND,
        relisting(make, relist),
        translate::<K>,
        clock,
        backoff,
    )
}

/// `make`, whose streams end at the next relist signal (the driver then relists).
fn relisting<M, S>(
    mut make: M,
    relist: Option<RelistSignal>,
) -> impl FnMut() -> BoxStream<'static, S::Item> + Send + 'static
where
    M: FnMut() -> S + Send + 'static,
    S: Stream + Send + 'static,
{
    move || match &relist {
        Some(r) => r.until_next(make()).boxed(),
        None => make().boxed(),
    }
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
    relisting_corefile_events_from(cm, make, clock, backoff, None)
}

/// [`corefile_events_from`], whose watch also drops its stream and relists on `relist`.
fn relisting_corefile_events_from<M, S>(
    cm: ConfigMapRef,
    make: M,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
    relist: Option<RelistSignal>,
) -> BoxStream<'static, Received>
where
    M: FnMut() -> S + Send + 'static,
    S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Send + 'static,
{
    let make = relisting(make, relist);
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

/// Watches one namespaced kind through `api`, relisting on `relist`.
fn watch_kind<K>(
    api: Api<K>,
    config: watcher::Config,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
    relist: Option<RelistSignal>,
) -> BoxStream<'static, Received>
where
    K: TruthSource + Sync,
    K::DynamicType: Default,
{
    relisting_events_from(
        move || watcher::watcher(api.clone(), config.clone()),
        clock,
        backoff,
        relist,
    )
}

/// Watches EndpointSlices in `namespace` (all namespaces when `None`).
pub fn watch_endpoint_slices(
    client: kube::Client,
    namespace: Option<&str>,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received> {
    let api: Api<EndpointSlice> = scoped_api(client, namespace);
    watch_kind(api, list_config(), clock, backoff, None)
}

fn pods_config(node: Option<&str>) -> watcher::Config {
    match node {
        Some(n) => list_config().fields(&format!("spec.nodeName={n}")),
        None => list_config(),
    }
}

/// Watches one Corefile ConfigMap, selected by name (a `metadata.name` field selector, so
/// RBAC can restrict the grant to that name).
pub fn watch_corefile(
    client: kube::Client,
    cm: ConfigMapRef,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
) -> BoxStream<'static, Received> {
    corefile_watch(client, cm, clock, backoff, None)
}

fn corefile_watch(
    client: kube::Client,
    cm: ConfigMapRef,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
    relist: Option<RelistSignal>,
) -> BoxStream<'static, Received> {
    let api: Api<ConfigMap> = Api::namespaced(client, &cm.namespace);
    let config = list_config().fields(&format!("metadata.name={}", cm.name));
    relisting_corefile_events_from(
        cm,
        move || watcher::watcher(api.clone(), config.clone()),
        clock,
        backoff,
        relist,
    )
}

/// Watches everything in `scope`, merged into one stream. The stream never ends; failures
/// are [`TruthEvent::WatchFailed`] events and every watch restarts on its own. With
/// `scope.liveness`, an API server that stops answering its probe is a
/// [`TruthEvent::ApiUnreachable`] and every watch relists.
pub fn watch_truth(
    conn: &Connection,
    scope: &WatchScope,
    clock: Arc<dyn Clock>,
) -> BoxStream<'static, Received> {
    let ns = scope.namespace.as_deref();
    let client = &conn.client;
    let (trigger, relist) = match scope.liveness {
        Some(_) => {
            let (t, r) = relist_signal();
            (Some(t), Some(r))
        }
        None => (None, None),
    };
    let mut streams = vec![
        watch_kind(
            scoped_api::<EndpointSlice>(client.clone(), ns),
            list_config(),
            clock.clone(),
            scope.backoff,
            relist.clone(),
        ),
        watch_kind(
            scoped_api::<Service>(client.clone(), ns),
            list_config(),
            clock.clone(),
            scope.backoff,
            relist.clone(),
        ),
    ];
    if scope.pods {
        streams.push(watch_kind(
            scoped_api::<Pod>(client.clone(), ns),
            pods_config(scope.pods_on_node.as_deref()),
            clock.clone(),
            scope.backoff,
            relist.clone(),
        ));
    }
    for cm in &scope.corefiles {
        streams.push(corefile_watch(
            client.clone(),
            cm.clone(),
            clock.clone(),
            scope.backoff,
            relist.clone(),
        ));
    }
    if let (Some(probe), Some(trigger)) = (scope.liveness, trigger) {
        streams.push(api_liveness(client.clone(), probe, clock, trigger));
    }
    stream::select_all(streams).boxed()
}

/// Probes `GET /readyz` every `probe.interval`: after `probe.failures` failed probes in a
/// row, emits [`TruthEvent::ApiUnreachable`] and sends `relist` (the watches drop their
/// streams, which may not have noticed yet, and relist once the server answers); after the
/// next successful probe, [`TruthEvent::ApiReachable`]. `/readyz` is readable by every
/// client (`system:public-info-viewer`) and fails as soon as a server starts shutting down.
pub fn api_liveness(
    client: kube::Client,
    probe: LivenessProbe,
    clock: Arc<dyn Clock>,
    relist: RelistTrigger,
) -> BoxStream<'static, Received> {
    struct State {
        client: kube::Client,
        probe: LivenessProbe,
        clock: Arc<dyn Clock>,
        relist: RelistTrigger,
        ticker: tokio::time::Interval,
        failed: u32,
        down: bool,
    }
    let mut ticker = tokio::time::interval(probe.interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = State {
        client,
        probe,
        clock,
        relist,
        ticker,
        failed: 0,
        down: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            st.ticker.tick().await;
            match readyz(&st.client, st.probe.timeout).await {
                Ok(()) => {
                    st.failed = 0;
                    if std::mem::take(&mut st.down) {
                        let at = st.clock.now();
                        debug!("API server answers /readyz again");
                        return Some((
                            Received {
                                at,
                                event: TruthEvent::ApiReachable,
                            },
                            st,
                        ));
                    }
                }
                Err(error) => {
                    st.failed = st.failed.saturating_add(1);
                    if !st.down && st.failed >= st.probe.failures.max(1) {
                        st.down = true;
                        let at = st.clock.now();
                        warn!(%error, failures = st.failed, "API server unreachable; truth gap, the watches relist when it answers");
                        st.relist.relist();
                        return Some((
                            Received {
                                at,
                                event: TruthEvent::ApiUnreachable { error },
                            },
                            st,
                        ));
                    }
                }
            }
        }
    })
    .boxed()
}

/// One `GET /readyz`, bounded by `timeout`.
async fn readyz(client: &kube::Client, timeout: Duration) -> Result<(), String> {
    let req = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, client.request_text(req)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("GET /readyz: {e}")),
        Err(_) => Err(format!(
            "GET /readyz: no answer within {} ms",
            timeout.as_millis()
        )),
    }
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
