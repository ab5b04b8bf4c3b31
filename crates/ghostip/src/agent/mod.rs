//! The per-node agent's IO adapters: datapath readers (processes, Cilium exec); the pure parts (the datapath model, the audit cost cap, DNS path health) are the runtime's.
//!
//! `commands/agent.rs` wires them around the same session, engine, prober, ledger and
//! metrics as `ghostip watch`. See docs/AGENT.md.
//!
//! | module | what | IO |
//! |---|---|---|
//! | [`readers`] | run `iptables-save -t nat` / `nft -j list table ip kube-proxy` / `ipvsadm-save -n`, stream into the parser, measure CPU; detect the datapath | processes |
//! | [`cilium`] | `cilium-dbg service list -o json` in this node's Cilium agent pod through the exec API | Kubernetes API |
//! | [`conntrack_reader`] | a conntrack netlink dump (`NETLINK_NETFILTER`), decoded and aggregated while it streams | netlink socket |
//! | [`cost`] | CPU-seconds token bucket and the audit period it implies (`ghostip_session::layers::datapath::cost`) | none |
//! | [`DatapathModel`] | truth events → desired backends of the datapath path; reads → observations | none |
//! | [`health`] | DNS ClusterIP vs pod IPs from this node (`ghostip_session::layers::dns::health`) | none |

pub mod cilium;
pub mod conntrack_reader;
pub mod readers;

pub use ghostip_session::layers::datapath::{DatapathModel, ReadOutcome as ModelReadOutcome, cost};
pub use ghostip_session::layers::dns::health;
