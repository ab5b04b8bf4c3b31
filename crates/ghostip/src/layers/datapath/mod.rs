//! The datapath layer's IO: reads a node's load-balancer datapath (kube-proxy's iptables, nftables or IPVS rules, Cilium's maps) within a CPU cap and feeds each read to the pure model (`ghostip_session::layers::datapath`).
//!
//! | module | what | IO |
//! |---|---|---|
//! | [`readers`] | run `iptables-save -t nat` / `nft -j list table ip kube-proxy` / `ipvsadm-save -n`, stream into the parser, measure CPU; detect the datapath | processes |
//! | [`cilium_maps`] | Cilium's pinned `cilium_lb{4,6}_*` BPF maps, opened with aya (`--cilium-read maps`, the default) | bpf syscalls |
//! | [`cilium`] | `cilium-dbg service list -o json` in this node's Cilium agent pod through the exec API (`--cilium-read exec`) | Kubernetes API |
//! | `adapter` | the agent's adapter: choose the datapath, pace the reads, `/status` section | tasks |

pub(crate) mod adapter;
pub mod bpf_batch;
pub mod cilium;
pub mod cilium_maps;
pub mod metrics;
pub mod readers;

use super::Registration;

/// The datapath layer's registration: no model until its adapter found the node's datapath.
pub(super) const LAYER: Registration = Registration {
    layer: ghostip_datapath::layers::DATAPATH,
    model: |_| None,
    node: Some(adapter::start),
    cluster: None,
    drain: Some(|_| Box::new(ghostip_session::layers::datapath::drain::NodesLetGo::new())),
    metrics: Some(|m| std::sync::Arc::new(metrics::DatapathMetrics::register(m))),
};
