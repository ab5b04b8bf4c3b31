//! The components layer's metrics: whether this node's kube-proxy is stalled, its scrapes, the network-programming p99 it reports, and CoreDNS's DNS-programming p99 per pod.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;

/// Labels of the per-component gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabels {
    /// The `node` label.
    pub node: String,
    /// The `component` label (`kube-proxy`).
    pub component: String,
}

/// Labels of CoreDNS's per-pod p99.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CoreDnsLabels {
    /// The `pod` label (`namespace/name`).
    pub pod: String,
    /// The `service_kind` label (`cluster_ip`, `headless_with_selector`,
    /// `headless_without_selector`).
    pub service_kind: String,
}

/// Labels of the scrape counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScrapeLabels {
    /// The `component` label (`kube-proxy`, `coredns`).
    pub component: String,
    /// The `result` label (`ok`, `refused`, `failed`).
    pub result: String,
}

/// The components layer's metrics.
#[derive(Clone, Default)]
pub struct ComponentMetrics {
    /// `ghostip_component_stalled`.
    pub stalled: Family<ComponentLabels, Gauge>,
    /// `ghostip_component_scrapes_total`.
    pub scrapes: Family<ScrapeLabels, Counter>,
    /// `ghostip_component_programming_p99_seconds`.
    pub programming_p99: Family<ComponentLabels, Gauge<f64, AtomicU64>>,
    /// `ghostip_coredns_programming_duration_p99_seconds`.
    pub coredns_p99: Family<CoreDnsLabels, Gauge<f64, AtomicU64>>,
}

impl ComponentMetrics {
    /// Awaits a finished scrape of `component`, parses its text with `parse` (a text that is
    /// not Prometheus' is an HTTP error) and counts it by result (`ok`, `refused`, `failed`).
    pub(crate) async fn scraped<T, E: std::fmt::Display>(
        &self,
        component: &str,
        handle: tokio::task::JoinHandle<Result<String, super::scrape::ScrapeError>>,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, super::scrape::ScrapeError> {
        use super::scrape::ScrapeError;
        let result = match handle.await {
            Ok(r) => r,
            Err(e) => Err(ScrapeError::Io(format!("the scrape task ended: {e}"))),
        };
        let result = result.and_then(|text| {
            parse(&text).map_err(|e| ScrapeError::Http(format!("not Prometheus text: {e}")))
        });
        let label = match &result {
            Ok(_) => "ok",
            Err(e) if e.is_refused() => "refused",
            Err(_) => "failed",
        };
        self.scrapes
            .get_or_create(&ScrapeLabels {
                component: component.into(),
                result: label.into(),
            })
            .inc();
        result
    }

    /// Registers them in `m`'s registry.
    pub fn register(m: &mut Metrics) -> Self {
        let a = Self::default();
        let r = m.registry_mut();
        r.register(
            "ghostip_component_stalled",
            "1 while the component is component-stalled: a Service change waited longer than its min-sync-period + the scrape period + one sync for its last sync to advance",
            a.stalled.clone(),
        );
        r.register(
            "ghostip_component_scrapes",
            "Scrapes of the component's metrics endpoint, by result (ok, refused, failed)",
            a.scrapes.clone(),
        );
        r.register(
            "ghostip_component_programming_p99_seconds",
            "p99 of the component's own network programming latency over the last 5 minutes of scrapes (kubeproxy_network_programming_duration_seconds)",
            a.programming_p99.clone(),
        );
        r.register(
            "ghostip_coredns_programming_duration_p99_seconds",
            "p99 (bucket upper bound) of CoreDNS's own coredns_kubernetes_dns_programming_duration_seconds over the last 5 minutes of the pod's scrapes, by pod and service_kind (watch, --coredns-metrics-interval)",
            a.coredns_p99.clone(),
        );
        a
    }
}
