//! DNS probing: asks every DNS path (each CoreDNS pod, the kube-dns ClusterIP, NodeLocal DNSCache, overrides) what it answers for headless Service names.
//!
//! See [`Prober`](prober::Prober) for the entry point. The pieces, each usable alone:
//!
//! - [`query`](mod@query): one uncached query to one server (UDP, no retries, TCP on
//!   truncation), with rcode, records, TTLs, latency and transport, or a failure mapped
//!   onto [`FailureReason`](ghostip_core::FailureReason).
//! - [`prober`]: event-driven bursts and a slow sweep within one global [`Budget`](budget::Budget).
//! - [`connect`](mod@connect): a TCP connect probe, to measure exposure.
//! - [`health`]: the agent's check of DNS from its node (the ClusterIP against the pod IPs).
//!
//! The pure side (paths from the truth, names, desired answers, Corefile lags, the health
//! verdict) is `ghostip_session::layers::dns`.
//!
//! How it works, the budget and the paths are described in `docs/DNS.md`.

pub mod budget;
pub mod connect;
pub mod health;
pub mod metrics;
pub mod prober;
pub mod query;

use ghostip_session::LayerModel;
use ghostip_session::layers::dns::DnsModel;

use super::Registration;

/// The DNS layer's registration: its model in every command's session (the prober is the
/// pipeline's own), the health check in the agent.
pub(super) const LAYER: Registration = Registration {
    layer: ghostip_session::layers::dns::DNS,
    model: |setup| Some(Box::new(DnsModel::new(setup.dns.clone())) as Box<dyn LayerModel>),
    node: Some(health::start),
    cluster: None,
    drain: Some(|ip| Box::new(ghostip_session::layers::dns::drain::DnsLetGo::new(ip))),
    metrics: Some(|m| std::sync::Arc::new(metrics::DnsHealthMetrics::register(m))),
};
