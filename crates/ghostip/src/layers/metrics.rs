//! The node-local layers' own metrics, registered next to the fixed ones: datapath read cost and errors, the audit period, DNS ClusterIP health, conntrack reads and stale flows.

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

/// Labels of node gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// The `node` label.
    pub node: String,
}

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

/// The node-local layers' metrics.
#[derive(Clone, Default)]
pub struct AgentMetrics {
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
    /// `ghostip_dns_cluster_ip_failing`.
    pub dns_cluster_ip_failing: Family<NodeLabels, Gauge>,
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

impl AgentMetrics {
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
        r.register(
            "ghostip_dns_cluster_ip_failing",
            "1 while DNS through the kube-dns ClusterIP fails from this node and the CoreDNS pod IPs answer",
            a.dns_cluster_ip_failing.clone(),
        );
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
