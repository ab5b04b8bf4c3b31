//! The components layer's IO: bounded scrapes of a component's Prometheus endpoint ([`scrape`]) and the agent's adapter that feeds this node's kube-proxy metrics to the pure model (`ghostip_session::layers::components`) and reports `component-stalled`.

pub(crate) mod adapter;
pub(crate) mod coredns;
pub mod metrics;
pub mod scrape;

#[cfg(test)]
mod coredns_tests;
#[cfg(test)]
mod tests;

use super::Registration;

/// The components layer's registration: its kube-proxy adapter runs in the agent, its CoreDNS
/// adapter in `watch`; each registers its model when it starts (not when turned off).
pub(super) const LAYER: Registration = Registration {
    layer: ghostip_session::layers::components::COMPONENTS,
    model: |_| None,
    node: Some(adapter::start),
    cluster: Some(coredns::start),
    drain: None,
    metrics: Some(|m| std::sync::Arc::new(metrics::ComponentMetrics::register(m))),
};
