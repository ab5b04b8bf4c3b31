//! The conntrack layer's IO: a netlink dump of the node's conntrack table ([`reader`]) and the agent's adapter that paces the reads, feeds them to the pure model (`ghostip_session::layers::conntrack`) and reports stale flows.

pub(crate) mod adapter;
pub mod metrics;
pub mod reader;

use ghostip_session::LayerModel;
use ghostip_session::layers::conntrack::ConntrackModel;

use super::Registration;

/// The conntrack layer's registration: its model and adapter run in the agent only (a
/// session with a node).
pub(super) const LAYER: Registration = Registration {
    layer: ghostip_datapath::layers::CONNTRACK,
    model: |setup| {
        setup
            .node
            .map(|n| Box::new(ConntrackModel::new(n.to_string())) as Box<dyn LayerModel>)
    },
    node: Some(adapter::start),
    cluster: None,
    drain: None,
    metrics: Some(|m| std::sync::Arc::new(metrics::ConntrackMetrics::register(m))),
};
