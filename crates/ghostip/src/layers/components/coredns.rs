//! `watch`'s CoreDNS scrapes: every `--coredns-metrics-interval`, each CoreDNS pod's `/metrics` (the cluster DNS Service's endpoints) is read and fed to the pure [`CoreDnsModel`], whose p99 goes to the metrics, `/status` and beside each DNS finding.
//!
//! One scrape per pod at a time, off the loop (a task each), bounded by [`scrape::TIMEOUT`]
//! and [`scrape::MAX_BODY`]. A pod's failure is logged when it first appears or changes and
//! never stops the watch; the pods follow the truth (a pod that leaves the Service is
//! forgotten, its scrape in flight aborted).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use ghostip_core::{Layer, ServiceKey, Time};
use ghostip_session::layers::components::COMPONENTS;
use ghostip_session::layers::components::coredns::{
    CLUSTER_IP, CoreDnsMetrics, CoreDnsModel, HEADLESS_WITH_SELECTOR, HEADLESS_WITHOUT_SELECTOR,
    PodView, STATUS_WINDOW, ScrapeTarget, scrape_targets,
};
use serde::Serialize;
use tokio::task::JoinHandle;

use super::metrics::{ComponentMetrics, CoreDnsLabels};
use super::scrape::{self, MetricsUrl, ScrapeError};
use crate::layers::{ClusterSetup, LayerAdapter, LayerSnapshot};
use crate::pipeline::Pipeline;

/// The component name of CoreDNS in metrics.
pub(crate) const COREDNS: &str = "coredns";

/// The `components` section of `watch`'s `/status`.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct CoreDnsStatus {
    /// `--coredns-metrics-interval`, seconds.
    pub scrape_period_s: f64,
    /// The window of each pod's p99, seconds.
    pub p99_window_s: f64,
    /// Each CoreDNS pod: its last scrape, error and p99 per `service_kind`.
    pub coredns: Vec<PodStatus>,
}

/// One CoreDNS pod in `/status`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PodStatus {
    /// Where it is scraped.
    pub url: String,
    #[serde(flatten)]
    pub view: PodView,
}

impl LayerSnapshot for CoreDnsStatus {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// Starts the CoreDNS scrapes unless `--coredns-metrics-interval 0`; registers the model with
/// the session.
pub(super) fn start<'a>(
    setup: &'a ClusterSetup<'a>,
    p: &'a mut Pipeline,
) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>> {
    Box::pin(async move {
        if setup.coredns_interval.is_zero() {
            return Ok(None);
        }
        p.session.register(CoreDnsModel::new());
        tracing::info!(service = %setup.dns_service, period_s = setup.coredns_interval.as_secs_f64(), "scraping CoreDNS's metrics");
        Ok(Some(Box::new(CoreDnsScrapes::new(
            setup.dns_service.clone(),
            setup.coredns_interval,
            setup.metrics_of(COMPONENTS),
        )) as Box<dyn LayerAdapter>))
    })
}

/// A scrape in flight: when it started and its task.
type Inflight = (Time, JoinHandle<Result<String, ScrapeError>>);

/// The scrapes of every CoreDNS pod.
pub(crate) struct CoreDnsScrapes {
    dns_service: ServiceKey,
    period: Duration,
    /// The pods to scrape, from the truth.
    targets: Vec<ScrapeTarget>,
    /// A truth event came since the pods were last read from the truth.
    truth_changed: bool,
    /// When each pod's next scrape is due.
    next: BTreeMap<String, Time>,
    inflight: BTreeMap<String, Inflight>,
    /// The last error logged per pod, to log each once.
    last_error: BTreeMap<String, String>,
    metrics: Arc<ComponentMetrics>,
    status: Arc<CoreDnsStatus>,
}

impl CoreDnsScrapes {
    pub(crate) fn new(
        dns_service: ServiceKey,
        period: Duration,
        metrics: Arc<ComponentMetrics>,
    ) -> Self {
        Self {
            dns_service,
            period,
            targets: Vec::new(),
            truth_changed: true,
            next: BTreeMap::new(),
            inflight: BTreeMap::new(),
            last_error: BTreeMap::new(),
            metrics,
            status: Arc::new(CoreDnsStatus::default()),
        }
    }

    /// Follows the DNS Service's endpoints after a truth event: forgets the pods that left it.
    fn follow(&mut self, p: &mut Pipeline) {
        if !std::mem::take(&mut self.truth_changed) {
            return;
        }
        let targets = scrape_targets(p.session.truth(), &self.dns_service);
        if targets == self.targets {
            return;
        }
        self.targets = targets;
        let keep: Vec<&str> = self.targets.iter().map(|t| t.pod.as_str()).collect();
        self.next.retain(|k, _| keep.contains(&k.as_str()));
        self.last_error.retain(|k, _| keep.contains(&k.as_str()));
        self.inflight.retain(|k, (_, h)| {
            let kept = keep.contains(&k.as_str());
            if !kept {
                h.abort();
            }
            kept
        });
        if let Some(m) = p.session.layer_mut::<CoreDnsModel>() {
            m.retain_pods(keep.iter().copied());
        }
        let gone: Vec<CoreDnsLabels> = self
            .status
            .coredns
            .iter()
            .filter(|s| !keep.contains(&s.view.pod.as_str()))
            .flat_map(|s| {
                s.view.p99_5m_s.keys().map(|k| CoreDnsLabels {
                    pod: s.view.pod.clone(),
                    service_kind: k.clone(),
                })
            })
            .collect();
        for l in gone {
            self.metrics.coredns_p99.remove(&l);
        }
    }

    /// Feeds every finished scrape to the model.
    async fn finish(&mut self, p: &mut Pipeline) {
        let done: Vec<String> = self
            .inflight
            .iter()
            .filter(|(_, (_, h))| h.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for pod in done {
            let Some((started, handle)) = self.inflight.remove(&pod) else {
                continue;
            };
            let result = self
                .metrics
                .scraped(COREDNS, handle, CoreDnsMetrics::from_text)
                .await;
            let url = self.url_of(&pod);
            let result = match result {
                Ok(m) => {
                    if self.last_error.remove(&pod).is_some() {
                        tracing::info!(pod = %pod, url = %url, "CoreDNS's metrics answer again");
                    }
                    Ok(m)
                }
                Err(e) => {
                    let text = e.to_string();
                    if self.last_error.get(&pod) != Some(&text) {
                        tracing::warn!(pod = %pod, url = %url, error = %text, "scraping CoreDNS's metrics failed; the watch goes on");
                        self.last_error.insert(pod.clone(), text.clone());
                    }
                    Err(text)
                }
            };
            if let Some(m) = p.session.layer_mut::<CoreDnsModel>() {
                m.on_scrape(&pod, started, result);
            }
        }
    }

    fn url_of(&self, pod: &str) -> String {
        self.targets
            .iter()
            .find(|t| t.pod == pod)
            .map(|t| format!("http://{}/metrics", t.authority))
            .unwrap_or_default()
    }

    /// Starts the scrape of each pod that is due and has none in flight.
    fn start_due(&mut self, now: Time) {
        for t in &self.targets {
            if self.inflight.contains_key(&t.pod) || self.next.get(&t.pod).is_some_and(|d| now < *d)
            {
                continue;
            }
            let url = MetricsUrl {
                authority: t.authority.clone(),
                path: "/metrics".into(),
            };
            let handle = tokio::spawn(async move {
                scrape::scrape(&url, scrape::TIMEOUT, scrape::MAX_BODY).await
            });
            self.inflight.insert(t.pod.clone(), (now, handle));
            self.next
                .insert(t.pod.clone(), now.checked_add(self.period).unwrap_or(now));
        }
    }

    /// Publishes each pod's p99 in the metrics and `/status`.
    fn publish(&mut self, p: &Pipeline) {
        let Some(model) = p.session.layer::<CoreDnsModel>() else {
            return;
        };
        let pods: Vec<PodStatus> = model
            .views()
            .into_iter()
            .map(|view| PodStatus {
                url: self.url_of(&view.pod),
                view,
            })
            .collect();
        for s in &pods {
            for kind in [
                CLUSTER_IP,
                HEADLESS_WITH_SELECTOR,
                HEADLESS_WITHOUT_SELECTOR,
            ] {
                let labels = CoreDnsLabels {
                    pod: s.view.pod.clone(),
                    service_kind: kind.into(),
                };
                // No observation in the window: no series, rather than the last value.
                match s.view.p99_5m_s.get(kind) {
                    Some(v) => {
                        self.metrics.coredns_p99.get_or_create(&labels).set(*v);
                    }
                    None => {
                        self.metrics.coredns_p99.remove(&labels);
                    }
                }
            }
        }
        self.status = Arc::new(CoreDnsStatus {
            scrape_period_s: self.period.as_secs_f64(),
            p99_window_s: STATUS_WINDOW.as_secs_f64(),
            coredns: pods,
        });
    }
}

impl LayerAdapter for CoreDnsScrapes {
    fn layer(&self) -> Layer {
        COMPONENTS
    }

    fn on_truth(&mut self, _p: &mut Pipeline, _now: Time, _synced: bool) {
        self.truth_changed = true;
    }

    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        now: Time,
        _synced: bool,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            self.follow(p);
            let finished = self.inflight.values().any(|(_, h)| h.is_finished());
            self.finish(p).await;
            self.start_due(now);
            if finished || self.status.coredns.len() != self.targets.len() {
                self.publish(p);
            }
        })
    }

    fn snapshot(&self) -> Arc<dyn LayerSnapshot> {
        Arc::clone(&self.status) as Arc<dyn LayerSnapshot>
    }

    fn shutdown(&mut self) {
        for (_, (_, h)) in std::mem::take(&mut self.inflight) {
            h.abort();
        }
    }
}
