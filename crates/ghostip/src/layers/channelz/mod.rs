//! The channelz layer's IO: one bounded gRPC read of an opted-in client pod's channelz ([`reader`]), the pods that opted in ([`discovery`]), and `watch`'s adapter that reads them at a bounded rate and feeds the pure model (`ghostip_session::layers::channelz`).

pub(crate) mod adapter;
pub mod budget;
pub mod discovery;
pub mod metrics;
pub mod poll;
pub mod proto;
pub mod reader;

use ghostip_session::LayerModel;
use ghostip_session::layers::channelz::{CHANNELZ, ChannelzModel, drain::ClientsLetGo};

use super::Registration;

/// The channelz layer's registration: its model in every session (it has paths only where
/// clients are read), its adapter in `watch`, its part of `drain-wait`.
pub(super) const LAYER: Registration = Registration {
    layer: CHANNELZ,
    model: |_| Some(Box::new(ChannelzModel::default()) as Box<dyn LayerModel>),
    node: None,
    cluster: Some(adapter::start),
    drain: Some(|_| Box::new(ClientsLetGo::new())),
    metrics: Some(|m| std::sync::Arc::new(metrics::ChannelzMetrics::register(m))),
};
