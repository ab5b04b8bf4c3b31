//! Predicts, from configuration alone, how long callers will keep dialing removed pod IPs.
//!
//! `ghostip audit` reads Services, workload pod templates and Corefiles (from files or a
//! cluster), computes each Service's staleness budget chain (DNS cache lag, NodeLocal
//! DNSCache, client caches) and compares it with the termination budget of the pods behind
//! it (preStop, grace period, rollout strategy, probes). Everything here is pure:
//!
//! - [`inventory`]: the objects looked at, trimmed, each with the file and line it came from;
//! - [`load`]: YAML/JSON text (multi-document, `List`s, Helm output) into the inventory;
//! - [`rules`]: the rule engine and its stable rule ids.
//!
//! The `ghostip` binary reads files and lists objects (`commands/audit.rs`) and prints the
//! report as text, JSON or SARIF 2.1.0 (`printer/audit.rs`); docs/AUDIT.md describes every
//! rule.

pub mod inventory;
pub mod load;
pub mod rules;

pub use inventory::{Inventory, Origin};
pub use rules::{
    AuditConfig, AuditReport, BudgetError, Contribution, Finding, RULES, RuleId, Severity,
    StalenessBudget, audit, staleness_budget, staleness_budget_from_parts,
};
