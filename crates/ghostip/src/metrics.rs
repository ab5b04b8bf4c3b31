//! Prometheus metrics with the names fixed in DESIGN.md; no IP or pod name is ever a label.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use ghostip_core::engine::{Discrepancy, EngineEvent, Tracking, Verdict};
use ghostip_core::{Layer, PathKind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of `ghostip_stale_window_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WindowLabels {
    /// Layer.
    pub layer: String,
    /// Path kind.
    pub path_kind: String,
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub service: String,
}

/// Labels of `ghostip_stale_endpoints`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StaleLabels {
    /// Layer.
    pub layer: String,
    /// Path kind.
    pub path_kind: String,
    /// Node the path is seen from ("" when not node-local).
    pub node: String,
}

/// Labels of `ghostip_stuck_paths`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StuckLabels {
    /// Layer.
    pub layer: String,
    /// Node ("" when not node-local).
    pub node: String,
}

/// Labels of `ghostip_probe_queries_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    /// Path kind.
    pub path_kind: String,
}

/// Labels of `ghostip_probe_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Path kind.
    pub path_kind: String,
    /// Failure reason label (timeout, servfail, refused, rcode, network, unreadable).
    pub reason: String,
}

/// Labels of `ghostip_drain_wait_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainLabels {
    /// `endpoint`, `dns`, `datapath`, `connections`, or `total` for the whole wait.
    pub layer: String,
}

/// Labels of `ghostip_ledger_write_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LedgerErrorLabels {
    /// `full`, `io`, `readonly`, `busy`, `corrupt`, `other` (a failed commit, retried),
    /// `invalid` (a bad write, dropped alone) or `dropped` (a write given up).
    pub reason: String,
}

fn window_histogram() -> Histogram {
    Histogram::new([
        0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0, 120.0, 300.0, 900.0,
    ])
}

/// All of ghostip's metrics, in one owned registry.
pub struct Metrics {
    registry: Registry,
    /// `ghostip_stale_window_seconds`.
    pub stale_window: Family<WindowLabels, Histogram, fn() -> Histogram>,
    /// `ghostip_stale_endpoints`.
    pub stale_endpoints: Family<StaleLabels, Gauge>,
    /// `ghostip_over_lag_endpoints`.
    pub over_lag_endpoints: Family<StaleLabels, Gauge>,
    /// `ghostip_stuck_paths`.
    pub stuck_paths: Family<StuckLabels, Gauge>,
    /// `ghostip_probe_queries_total`.
    pub probe_queries: Family<QueryLabels, Counter>,
    /// `ghostip_probe_errors_total`.
    pub probe_errors: Family<ErrorLabels, Counter>,
    /// `ghostip_truth_synced`.
    pub truth_synced: Gauge<i64, AtomicI64>,
    /// `ghostip_drain_wait_seconds`.
    pub drain_wait: Family<DrainLabels, Histogram, fn() -> Histogram>,
    /// `ghostip_ledger_write_errors_total`.
    pub ledger_write_errors: Family<LedgerErrorLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let stale_window = Family::<WindowLabels, Histogram>::new_with_constructor(
            window_histogram as fn() -> Histogram,
        );
        registry.register(
            "ghostip_stale_window_seconds",
            "Seconds a path kept serving an endpoint after it left the truth (upper bound of the window)",
            stale_window.clone(),
        );
        let stale_endpoints = Family::<StaleLabels, Gauge>::default();
        registry.register(
            "ghostip_stale_endpoints",
            "Endpoints a path serves now although they left the truth",
            stale_endpoints.clone(),
        );
        let over_lag_endpoints = Family::<StaleLabels, Gauge>::default();
        registry.register(
            "ghostip_over_lag_endpoints",
            "Stale or missing endpoints a path has held wrong longer than its expected lag, not converged yet",
            over_lag_endpoints.clone(),
        );
        let stuck_paths = Family::<StuckLabels, Gauge>::default();
        registry.register(
            "ghostip_stuck_paths",
            "Paths with at least one stuck endpoint",
            stuck_paths.clone(),
        );
        let probe_queries = Family::<QueryLabels, Counter>::default();
        registry.register(
            "ghostip_probe_queries",
            "Probe queries sent",
            probe_queries.clone(),
        );
        let probe_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "ghostip_probe_errors",
            "Probe queries that failed",
            probe_errors.clone(),
        );
        let truth_synced = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "ghostip_truth_synced",
            "1 when ghostip's view of the Kubernetes API is synced, 0 during a truth gap",
            truth_synced.clone(),
        );
        let drain_wait = Family::<DrainLabels, Histogram>::new_with_constructor(
            window_histogram as fn() -> Histogram,
        );
        registry.register(
            "ghostip_drain_wait_seconds",
            "Seconds `ghostip drain-wait` waited for each layer to let go of a terminating pod's IP (layer total: the whole wait)",
            drain_wait.clone(),
        );
        let ledger_write_errors = Family::<LedgerErrorLabels, Counter>::default();
        registry.register(
            "ghostip_ledger_write_errors",
            "Ledger commits that failed, by reason (full, io, readonly, busy, corrupt, other: kept and retried; invalid: a bad write dropped alone), and writes dropped (reason dropped)",
            ledger_write_errors.clone(),
        );
        Self {
            registry,
            drain_wait,
            ledger_write_errors,
            stale_window,
            stale_endpoints,
            over_lag_endpoints,
            stuck_paths,
            probe_queries,
            probe_errors,
            truth_synced,
        }
    }

    /// The registry, for commands that export metrics of their own (the agent's audit cost).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Text exposition (OpenMetrics).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail except on a formatter error, which it never returns.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The ledger writer's error hook: counts into `ghostip_ledger_write_errors_total`.
    pub fn ledger_error_hook(&self) -> crate::ledger::ErrorHook {
        let errors = self.ledger_write_errors.clone();
        Box::new(move |reason| {
            errors
                .get_or_create(&LedgerErrorLabels {
                    reason: reason.to_string(),
                })
                .inc();
        })
    }

    /// Records a closed stale window.
    pub fn observe_event(
        &self,
        ev: &EngineEvent,
        kind_of: impl Fn(&Tracking) -> Option<(Layer, PathKind)>,
    ) {
        if let EngineEvent::Closed(t) = ev {
            if t.kind != Discrepancy::Stale || matches!(t.verdict, Verdict::Unjudged(_)) {
                return;
            }
            let (Some((layer, kind)), Some(window)) = (kind_of(t), t.window_upper()) else {
                return;
            };
            self.stale_window
                .get_or_create(&WindowLabels {
                    layer: layer.to_string(),
                    path_kind: kind.to_string(),
                    namespace: t.service.namespace.clone(),
                    service: t.service.name.clone(),
                })
                .observe(window.as_secs_f64());
        }
    }
}

/// Shared handle.
pub type SharedMetrics = Arc<Metrics>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_the_documented_ones() {
        let m = Metrics::new();
        m.truth_synced.set(1);
        m.probe_queries
            .get_or_create(&QueryLabels {
                path_kind: "dns-pod".into(),
            })
            .inc();
        m.probe_errors
            .get_or_create(&ErrorLabels {
                path_kind: "dns-pod".into(),
                reason: "timeout".into(),
            })
            .inc();
        m.stale_endpoints
            .get_or_create(&StaleLabels {
                layer: "dns".into(),
                path_kind: "dns-pod".into(),
                node: String::new(),
            })
            .set(2);
        m.over_lag_endpoints
            .get_or_create(&StaleLabels {
                layer: "datapath".into(),
                path_kind: "iptables".into(),
                node: "node-2".into(),
            })
            .set(1);
        m.stuck_paths
            .get_or_create(&StuckLabels {
                layer: "dns".into(),
                node: String::new(),
            })
            .set(0);
        m.stale_window
            .get_or_create(&WindowLabels {
                layer: "dns".into(),
                path_kind: "dns-pod".into(),
                namespace: "demo".into(),
                service: "web".into(),
            })
            .observe(29.5);
        (m.ledger_error_hook())("full");
        let text = m.encode();
        for name in [
            "ghostip_truth_synced 1",
            "ghostip_probe_queries_total{path_kind=\"dns-pod\"} 1",
            "ghostip_probe_errors_total{path_kind=\"dns-pod\",reason=\"timeout\"} 1",
            "ghostip_stale_endpoints{layer=\"dns\",path_kind=\"dns-pod\",node=\"\"} 2",
            "ghostip_over_lag_endpoints{layer=\"datapath\",path_kind=\"iptables\",node=\"node-2\"} 1",
            "ghostip_stuck_paths{layer=\"dns\",node=\"\"} 0",
            "ghostip_stale_window_seconds_bucket{",
            "ghostip_ledger_write_errors_total{reason=\"full\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
    }
}
