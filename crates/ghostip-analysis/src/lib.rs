//! The pure domain of `ghostip audit` and `ghostip explain`: data in, data out, time passed in.
//!
//! - [`audit`]: manifests and Corefiles (as text) into an inventory, per-Service staleness
//!   budgets and findings with stable rule ids;
//! - [`explain`]: connection failures found in client logs joined with the history of each
//!   target IP, rollout windows, and the truth-history parser (Pod JSON as text);
//! - [`ownership`]: the history records of an IP (ownerships, endpoint memberships) the
//!   ledger stores and a truth-history file rebuilds;
//! - [`pod`]: a Pod object into the core's trimmed record, preStop sleeps.
//!
//! Nothing here reads files, opens the ledger, spawns threads or reads the clock: the
//! `ghostip` binary does that and prints the results (`printer/`).
#![forbid(unsafe_code)]

pub mod audit;
pub mod explain;
pub mod ownership;
pub mod pod;
pub mod soak;
