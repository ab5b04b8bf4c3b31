//! The datapath layer's metrics: the cost of reads, their errors and the audit period the cost cap chose.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;

/// Labels of the agent's read counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    /// The `datapath` label.
    pub datapath: String,
    /// The `reason` label.
    pub reason: String,
}

/// Labels of the agent's reader errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadErrorLabels {
    /// The `datapath` label.
    pub datapath: String,
    /// The `error` label.
    pub error: String,
}

/// The datapath layer's metrics.
#[derive(Clone, Default)]
pub struct DatapathMetrics {
    /// `ghostip_datapath_read_cpu_seconds` (last read).
    pub read_cpu: Gauge<f64, AtomicU64>,
    /// `ghostip_datapath_read_cpu_seconds_total`.
    pub read_cpu_total: Counter<f64, AtomicU64>,
    /// `ghostip_datapath_audit_period_seconds`.
    pub audit_period: Gauge<f64, AtomicU64>,
    /// `ghostip_datapath_reads_total`.
    pub reads: Family<ReadLabels, Counter>,
    /// `ghostip_datapath_read_errors_total`.
    pub read_errors: Family<ReadErrorLabels, Counter>,
}

impl DatapathMetrics {
    /// Registers them in `m`'s registry.
    pub fn register(m: &mut Metrics) -> Self {
        let a = Self::default();
        let r = m.registry_mut();
        r.register(
            "ghostip_datapath_read_cpu_seconds",
            "CPU seconds of the last datapath read (the dumping program plus parsing)",
            a.read_cpu.clone(),
        );
        r.register(
            "ghostip_datapath_read_cpu_seconds",
            "CPU seconds spent on datapath reads",
            a.read_cpu_total.clone(),
        );
        r.register(
            "ghostip_datapath_audit_period_seconds",
            "Period between two full datapath audits, chosen from the measured cost and --max-cpu",
            a.audit_period.clone(),
        );
        r.register(
            "ghostip_datapath_reads",
            "Datapath reads, by reason (initial, reread, audit)",
            a.reads.clone(),
        );
        r.register(
            "ghostip_datapath_read_errors",
            "Datapath reads that failed, by error (privilege, not-installed, absent, timeout, parse, ...)",
            a.read_errors.clone(),
        );
        a
    }
}
