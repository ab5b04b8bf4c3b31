//! The agent's components adapter: scrapes this node's kube-proxy metrics every `--kube-proxy-scrape-period`, feeds each scrape to the pure [`KubeProxyModel`], and reports `component-stalled` in `/status`, the metrics and the JSON lines.
//!
//! One scrape at a time, off the agent's loop (a task), bounded by
//! [`scrape::TIMEOUT`] and [`scrape::MAX_BODY`]. While kube-proxy's endpoint refuses, a
//! Service change brings the next scrape forward to when its wait settles
//! ([`KubeProxyModel::rescrape_at`]).

use std::sync::Arc;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use ghostip_core::{Layer, Time};
use ghostip_session::components::KubeProxyMetrics;
use ghostip_session::layers::components::{
    COMPONENTS, Judgement, KUBE_PROXY, KubeProxyModel, ScrapeFailure, Stalled,
};
use serde::Serialize;
use tokio::task::JoinHandle;

use super::metrics::{ComponentLabels, ComponentMetrics};
use super::scrape::{self, MetricsUrl, ScrapeError};
use crate::layers::node::NodeOutputs;
use crate::layers::{LayerAdapter, LayerSnapshot, NodeSetup};
use crate::pipeline::Pipeline;

/// The `components` section of `/status`.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ComponentsStatus {
    /// This node's kube-proxy, when scraped.
    pub kube_proxy: Option<KubeProxyView>,
}

/// What `/status` shows of kube-proxy.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct KubeProxyView {
    /// Where its metrics are scraped.
    pub url: String,
    /// `--kube-proxy-scrape-period`, seconds.
    pub scrape_period_s: f64,
    #[serde(flatten)]
    pub judgement: Judgement,
}

impl LayerSnapshot for ComponentsStatus {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    fn problem(&self) -> Option<String> {
        let s = self.kube_proxy.as_ref()?.judgement.stalled.as_ref()?;
        Some(describe(s))
    }
}

/// One sentence for a stalled kube-proxy.
pub(crate) fn describe(s: &Stalled) -> String {
    format!(
        "{} stalled ({}): last sync {}, {} Service change{} waiting, the oldest {:.0}s (allowed {:.0}s)",
        s.component,
        s.evidence,
        s.last_sync,
        s.missed_changes,
        if s.missed_changes == 1 { "" } else { "s" },
        s.waited_s,
        s.allowed_s
    )
}

/// The components layer's JSON lines (`-o json`).
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum ComponentLine<'a> {
    ComponentStalled {
        node: &'a str,
        change: &'a str,
        #[serde(flatten)]
        stalled: &'a Stalled,
    },
    ComponentScrapeError {
        node: &'a str,
        component: &'a str,
        url: &'a str,
        error: &'a str,
    },
}

/// Starts the kube-proxy scrapes unless `--kube-proxy-metrics off`; registers the model
/// with the session.
pub(super) fn start<'a>(
    setup: &'a NodeSetup<'a>,
    p: &'a mut Pipeline,
) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>> {
    Box::pin(async move {
        let args = setup.args;
        if args.kube_proxy_metrics == "off" {
            return Ok(None);
        }
        let url = MetricsUrl::parse(&args.kube_proxy_metrics)
            .map_err(|e| anyhow::anyhow!("--kube-proxy-metrics: {e}"))?;
        p.session.register(KubeProxyModel::new(
            args.kube_proxy_min_sync_period,
            args.kube_proxy_scrape_period,
        ));
        tracing::info!(node = %setup.node, url = %url, period_s = args.kube_proxy_scrape_period.as_secs_f64(), "scraping kube-proxy's metrics");
        Ok(Some(Box::new(KubeProxyScrapes {
            node: setup.node.to_string(),
            url,
            period: args.kube_proxy_scrape_period,
            next: None,
            inflight: None,
            last_error: None,
            stalled: None,
            out: setup.out.clone(),
            metrics: setup.out.metrics_of(COMPONENTS),
            status: Arc::new(ComponentsStatus::default()),
        }) as Box<dyn LayerAdapter>))
    })
}

/// The scrapes of this node's kube-proxy.
struct KubeProxyScrapes {
    node: String,
    url: MetricsUrl,
    period: Duration,
    /// When the next scrape is due (`None`: now).
    next: Option<Time>,
    inflight: Option<(Time, JoinHandle<Result<String, ScrapeError>>)>,
    /// The last scrape error said, to say each once.
    last_error: Option<String>,
    /// The stalled finding reported, to report its end.
    stalled: Option<Stalled>,
    out: NodeOutputs,
    metrics: Arc<ComponentMetrics>,
    status: Arc<ComponentsStatus>,
}

impl LayerAdapter for KubeProxyScrapes {
    fn layer(&self) -> Layer {
        COMPONENTS
    }

    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        now: Time,
        _synced: bool,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            self.finish(p).await;
            self.start_due(p, now);
            self.judge(p);
        })
    }

    fn snapshot(&self) -> Arc<dyn LayerSnapshot> {
        Arc::clone(&self.status) as Arc<dyn LayerSnapshot>
    }

    fn shutdown(&mut self) {
        if let Some((_, h)) = self.inflight.take() {
            h.abort();
        }
    }
}

impl KubeProxyScrapes {
    /// Starts a scrape every period, and at once when kube-proxy's endpoint refuses and a
    /// Service change has waited long enough to settle whether it is stalled.
    fn start_due(&mut self, p: &Pipeline, now: Time) {
        let settle = p
            .session
            .layer::<KubeProxyModel>()
            .and_then(KubeProxyModel::rescrape_at);
        let due = match (self.next, settle) {
            (Some(n), Some(s)) => Some(n.min(s)),
            (n, _) => n,
        };
        if self.inflight.is_some() || due.is_some_and(|d| now < d) {
            return;
        }
        let url = self.url.clone();
        let handle =
            tokio::spawn(
                async move { scrape::scrape(&url, scrape::TIMEOUT, scrape::MAX_BODY).await },
            );
        self.inflight = Some((now, handle));
        self.next = Some(now.checked_add(self.period).unwrap_or(now));
    }

    /// Feeds a finished scrape to the model.
    async fn finish(&mut self, p: &mut Pipeline) {
        let Some((started, handle)) = self.inflight.take_if(|(_, h)| h.is_finished()) else {
            return;
        };
        let result = self
            .metrics
            .scraped(KUBE_PROXY, handle, KubeProxyMetrics::from_text)
            .await;
        let result = match result {
            Ok(m) => {
                if self.last_error.take().is_some() {
                    tracing::info!(node = %self.node, url = %self.url, "kube-proxy's metrics answer again");
                }
                Ok(m)
            }
            Err(e) => {
                let text = e.to_string();
                if self.last_error.as_deref() != Some(&text) {
                    tracing::warn!(node = %self.node, url = %self.url, error = %text, "scraping kube-proxy's metrics failed");
                    self.out.printer.line(&ComponentLine::ComponentScrapeError {
                        node: &self.node,
                        component: KUBE_PROXY,
                        url: &self.url.to_string(),
                        error: &text,
                    });
                    self.last_error = Some(text.clone());
                }
                Err(ScrapeFailure {
                    refused: e.is_refused(),
                    error: text,
                })
            }
        };
        if let Some(m) = p.session.layer_mut::<KubeProxyModel>() {
            m.on_scrape(started, result);
        }
    }

    /// Judges the model; reports a stalled kube-proxy when it starts and ends.
    fn judge(&mut self, p: &Pipeline) {
        let Some(model) = p.session.layer::<KubeProxyModel>() else {
            return;
        };
        let judgement = model.judge();
        let labels = ComponentLabels {
            node: self.node.clone(),
            component: KUBE_PROXY.into(),
        };
        self.metrics
            .stalled
            .get_or_create(&labels)
            .set(i64::from(judgement.stalled.is_some()));
        if let Some(p99) = judgement.programming_p99_s {
            self.metrics.programming_p99.get_or_create(&labels).set(p99);
        }
        match (&self.stalled, &judgement.stalled) {
            (None, Some(s)) => {
                tracing::warn!(node = %self.node, component = KUBE_PROXY, last_sync = %s.last_sync, oldest_change = %s.oldest_change, waited_s = s.waited_s, allowed_s = s.allowed_s, missed_changes = s.missed_changes, services = %s.missed_services.join(","), evidence = s.evidence, "component-stalled: kube-proxy's last sync does not advance past Service changes");
                self.out.printer.line(&ComponentLine::ComponentStalled {
                    node: &self.node,
                    change: "opened",
                    stalled: s,
                });
            }
            (Some(before), None) => {
                tracing::info!(node = %self.node, component = KUBE_PROXY, last_sync = judgement.last_sync.map(|t| t.to_string()).unwrap_or_default(), "component-stalled cleared: kube-proxy synced");
                self.out.printer.line(&ComponentLine::ComponentStalled {
                    node: &self.node,
                    change: "cleared",
                    stalled: before,
                });
            }
            _ => {}
        }
        self.stalled.clone_from(&judgement.stalled);
        Arc::make_mut(&mut self.status).kube_proxy = Some(KubeProxyView {
            url: self.url.to_string(),
            scrape_period_s: self.period.as_secs_f64(),
            judgement,
        });
    }
}
