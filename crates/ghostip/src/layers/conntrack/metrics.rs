//! The conntrack layer's metrics: its reads, their errors and cost, and the stale flows of the last read.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;

/// Labels of the stale-flow gauge (no IP or pod: those are in `/status` and the ledger).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StaleFlowLabels {
    /// The `layer` label.
    pub layer: String,
    /// The `node` label.
    pub node: String,
}

/// Labels of the conntrack read counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConntrackReadLabels {
    /// The `reason` label.
    pub reason: String,
}

/// Labels of the conntrack read errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConntrackErrorLabels {
    /// The `error` label.
    pub error: String,
}

/// The conntrack layer's metrics.
#[derive(Clone, Default)]
pub struct ConntrackMetrics {
    /// `ghostip_stale_flows`.
    pub stale_flows: Family<StaleFlowLabels, Gauge>,
    /// `ghostip_conntrack_reads_total`.
    pub conntrack_reads: Family<ConntrackReadLabels, Counter>,
    /// `ghostip_conntrack_read_errors_total`.
    pub conntrack_read_errors: Family<ConntrackErrorLabels, Counter>,
    /// `ghostip_conntrack_read_cpu_seconds`.
    pub conntrack_read_cpu: Gauge<f64, AtomicU64>,
    /// `ghostip_conntrack_entries`.
    pub conntrack_entries: Gauge,
}

impl ConntrackMetrics {
    /// Registers them in `m`'s registry.
    pub fn register(m: &mut Metrics) -> Self {
        let a = Self::default();
        let r = m.registry_mut();
        r.register(
            "ghostip_stale_flows",
            "Conntrack entries of this node's pods to endpoints that left their Service, in the last complete read",
            a.stale_flows.clone(),
        );
        r.register(
            "ghostip_conntrack_reads",
            "Complete conntrack reads, by reason (initial, reread, audit)",
            a.conntrack_reads.clone(),
        );
        r.register(
            "ghostip_conntrack_read_errors",
            "Conntrack reads that failed or were not judged, by error (unavailable, privilege, interrupted, timeout, ...)",
            a.conntrack_read_errors.clone(),
        );
        r.register(
            "ghostip_conntrack_read_cpu_seconds",
            "CPU seconds of the last conntrack read (the kernel's dump, decoding, the join with the truth)",
            a.conntrack_read_cpu.clone(),
        );
        r.register(
            "ghostip_conntrack_entries",
            "Entries in the last complete conntrack read",
            a.conntrack_entries.clone(),
        );
        a
    }
}
