//! The DNS layer's node metric: whether DNS through the kube-dns ClusterIP fails from this node.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;

/// Labels of node gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// The `node` label.
    pub node: String,
}

/// The DNS health check's metrics.
#[derive(Clone, Default)]
pub struct DnsHealthMetrics {
    /// `ghostip_dns_cluster_ip_failing`.
    pub dns_cluster_ip_failing: Family<NodeLabels, Gauge>,
}

impl DnsHealthMetrics {
    /// Registers them in `m`'s registry.
    pub fn register(m: &mut Metrics) -> Self {
        let a = Self::default();
        let r = m.registry_mut();
        r.register(
            "ghostip_dns_cluster_ip_failing",
            "1 while DNS through the kube-dns ClusterIP fails from this node and the CoreDNS pod IPs answer",
            a.dns_cluster_ip_failing.clone(),
        );
        a
    }
}
