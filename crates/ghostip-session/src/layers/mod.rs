//! The built-in layers' pure models: [`dns`] (every DNS path) and [`datapath`] (one node's load balancer).
//!
//! Each implements [`LayerModel`](crate::LayerModel); the binary crate's adapters read the
//! paths (DNS queries, datapath dumps) and feed what they read back through the model.

pub mod conntrack;
pub mod datapath;
pub mod dns;
