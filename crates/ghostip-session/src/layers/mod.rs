//! The built-in layers' pure models: [`dns`] (every DNS path), [`datapath`] (one node's load balancer) [`conntrack`] (one node's connection-tracking table) and [`components`] (what this node's kube-proxy says of its own syncs).
//!
//! Each implements [`LayerModel`](crate::LayerModel); the binary crate's adapters read the
//! paths (DNS queries, datapath dumps) and feed what they read back through the model.
//! Each declares its layer id and path kinds next to its model ([`dns::DNS`],
//! [`datapath::DATAPATH`], [`conntrack::CONNTRACK`] and their kinds): the core names none.

pub mod channelz;
pub mod components;
pub mod conntrack;
pub mod datapath;
pub mod dns;
