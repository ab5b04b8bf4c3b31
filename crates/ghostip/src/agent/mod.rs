//! The per-node agent's parts: datapath readers (IO), the audit cost cap, the datapath tracker and DNS path health (pure).
//!
//! `commands/agent.rs` wires them around the same session, engine, prober, ledger and
//! metrics as `ghostip watch`. See docs/AGENT.md.
//!
//! | module | what | IO |
//! |---|---|---|
//! | [`readers`] | run `iptables-save -t nat` / `nft -j list table ip kube-proxy` / `ipvsadm-save -n`, stream into the parser, measure CPU; detect the datapath | processes |
//! | [`cilium`] | `cilium-dbg service list -o json` in this node's Cilium agent pod through the exec API | Kubernetes API |
//! | [`cost`] | CPU-seconds token bucket and the audit period it implies | none |
//! | [`tracker`] | truth events → desired backends of the datapath path; reads → observations | none |
//! | [`health`] | DNS ClusterIP vs pod IPs from this node | none |

pub mod cilium;
pub mod cost;
pub mod health;
pub mod readers;
pub mod tracker;
