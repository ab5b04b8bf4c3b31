//! The channelz layer's metrics: reads by result, the opted-in clients, the stale subchannels of the last reads, and the request budget.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::AtomicU64;

use crate::metrics::Metrics;

/// Labels of the read counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelzReadLabels {
    /// `ok`, `truncated`, or the error (`connect`, `timeout`, `unimplemented`, `protocol`).
    pub result: String,
}

/// The channelz layer's metrics (no pod or IP labels: those are in the log and the ledger).
#[derive(Clone, Default)]
pub struct ChannelzMetrics {
    /// `ghostip_channelz_reads_total`.
    pub reads: Family<ChannelzReadLabels, Counter>,
    /// `ghostip_channelz_clients`.
    pub clients: Gauge,
    /// `ghostip_channelz_stale_subchannels`.
    pub stale: Gauge,
    /// `ghostip_channelz_requests_total`.
    pub requests: Counter,
    /// `ghostip_channelz_budget_wait_seconds_total`.
    pub budget_wait: Counter<f64, AtomicU64>,
    /// `ghostip_channelz_effective_interval_seconds`.
    pub effective_interval: Gauge<f64, AtomicU64>,
}

impl ChannelzMetrics {
    /// Registers them in `m`'s registry.
    pub fn register(m: &mut Metrics) -> Self {
        let a = Self::default();
        let r = m.registry_mut();
        r.register(
            "ghostip_channelz_reads",
            "Reads of opted-in gRPC clients' channelz, by result (ok, truncated, connect, timeout, unimplemented, protocol)",
            a.reads.clone(),
        );
        r.register(
            "ghostip_channelz_clients",
            "Client pods that opted in to channelz reads (annotation ghostip.io/channelz-port or a port named channelz)",
            a.clients.clone(),
        );
        r.register(
            "ghostip_channelz_stale_subchannels",
            "Subchannels of opted-in clients whose address their target's Service no longer lists, in each client's last read",
            a.stale.clone(),
        );
        r.register(
            "ghostip_channelz_requests",
            "Channelz gRPC requests sent (GetTopChannels pages and GetSubchannel), within --channelz-qps",
            a.requests.clone(),
        );
        r.register(
            "ghostip_channelz_budget_wait_seconds",
            "Time channelz requests waited for their slot in --channelz-qps, summed",
            a.budget_wait.clone(),
        );
        r.register(
            "ghostip_channelz_effective_interval_seconds",
            "Longest time between two reads of one client in the clients' last reads: --channelz-interval, or more when --channelz-qps cannot cover every client once per interval",
            a.effective_interval.clone(),
        );
        a
    }
}
