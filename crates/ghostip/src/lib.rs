//! ghostip's IO adapters and commands around the pure core.
//!
//! `kube` watches the truth, `dns` probes DNS paths, `ledger` keeps the history in
//! SQLite, `metrics` and `http` export state, `printer` prints it, `commands` wire it together
//! for the CLI in `main.rs`. The pure domain of `audit` and `explain` is `ghostip_analysis`.
// Denied, not forbidden: `layers::datapath::bpf_batch` (the raw `bpf(2)` batch lookup aya
// lacks) is the one module that allows it, and says why.
#![deny(unsafe_code)]

pub mod agent_client;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod explain;
pub mod http;
pub mod input;
pub mod kube;
pub mod layers;
pub mod ledger;
pub mod metrics;
pub mod pipeline;
pub mod printer;
