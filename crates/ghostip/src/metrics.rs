//! Prometheus metrics with the names fixed in DESIGN.md; no IP or pod name is ever a label.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};

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
    /// `process_resident_memory_bytes`, read from `/proc/self/status` at each encode (Linux).
    pub process_rss: Gauge<i64, AtomicI64>,
    /// `process_cpu_seconds_total`, read from `/proc/self/stat` at each encode (Linux).
    pub process_cpu: Gauge<f64, AtomicU64>,
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
        let process_rss = Gauge::<i64, AtomicI64>::default();
        let process_cpu = Gauge::<f64, AtomicU64>::default();
        if cfg!(target_os = "linux") {
            registry.register(
                "process_resident_memory_bytes",
                "Resident memory of this process in bytes (VmRSS of /proc/self/status, read at each scrape)",
                process_rss.clone(),
            );
            registry.register(
                "process_cpu_seconds_total",
                "User and system CPU time of this process in seconds (/proc/self/stat, read at each scrape)",
                process_cpu.clone(),
            );
        }
        Self {
            registry,
            process_rss,
            process_cpu,
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

    /// Text exposition (OpenMetrics), with the process's RSS and CPU read just before.
    pub fn encode(&self) -> String {
        self.read_process();
        let mut out = String::new();
        // Encoding into a String cannot fail except on a formatter error, which it never returns.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Sets `process_resident_memory_bytes` and `process_cpu_seconds_total` from `/proc/self`
    /// (Linux; elsewhere, and when a file cannot be read, they keep their last value).
    fn read_process(&self) {
        if !cfg!(target_os = "linux") {
            return;
        }
        if let Some(rss) = std::fs::read_to_string("/proc/self/status")
            .ok()
            .as_deref()
            .and_then(vm_rss_bytes)
        {
            self.process_rss.set(i64::try_from(rss).unwrap_or(i64::MAX));
        }
        if let Some(cpu) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .as_deref()
            .and_then(cpu_seconds)
        {
            self.process_cpu.set(cpu);
        }
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

/// `VmRSS:` of `/proc/self/status` (kB) in bytes.
fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let kb: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") | None => kb.checked_mul(1024),
        Some(_) => None,
    }
}

/// Clock ticks per second of the times in `/proc/*/stat`: Linux's `USER_HZ`, 100 on every
/// architecture ghostip is built for (x86_64, aarch64).
const USER_HZ: f64 = 100.0;

/// utime + stime of `/proc/self/stat` (fields 14 and 15), in seconds. The command name, field
/// 2, may hold spaces and parentheses, so the fields are counted after its last `)`.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state): utime is the 12th field after it, stime the 13th.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

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

    /// On Linux the process's own RSS and CPU are read at each encode, so a soak can follow
    /// them from the scrapes.
    #[cfg(target_os = "linux")]
    #[test]
    fn process_rss_and_cpu_are_read_at_encode() {
        let text = Metrics::new().encode();
        let samples = ghostip_session::components::parse_exposition(&text).unwrap();
        let value = |n: &str| samples.iter().find(|s| s.name == n).map(|s| s.value);
        let rss = value("process_resident_memory_bytes").unwrap();
        assert!(
            rss > 1_000_000.0,
            "a test binary has more than 1 MB resident: {rss}"
        );
        assert!(value("process_cpu_seconds_total").unwrap() >= 0.0);
    }

    #[test]
    fn proc_files_are_parsed() {
        assert_eq!(
            vm_rss_bytes("Name:\tghostip\nVmRSS:\t   18236 kB\nVmSwap:\t0 kB\n"),
            Some(18_236 * 1024)
        );
        assert_eq!(vm_rss_bytes("Name:\tghostip\n"), None);
        let stat =
            "4242 (gh ost) ip) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 125 0 0 20 0 5 0 1 2 3";
        assert_eq!(cpu_seconds(stat), Some(3.75));
        assert_eq!(cpu_seconds("4242 (x) S 1"), None);
    }
}
