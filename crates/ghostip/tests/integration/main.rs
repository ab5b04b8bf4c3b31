//! The integration tests that need no lab and no kernel privileges, as one test binary (one link instead of one per file).
//!
//! Each module is one former test file; test names are `module::test` (e.g. `cargo test -p
//! ghostip --test integration -- audit_cli::`). Tests that need something outside the
//! repository are `#[ignore = "needs …"]` and run under `--ignored` (scripts/test): the fixture
//! corpus (`audit_fixtures::`, `explain_cli::` corpus tests) and helm (`helm_chart::`).
//! The support modules are shared with the `e2e` and `kernel` binaries.
// Tests read the system's clocks for their own timeouts and inputs; what they test takes its clock as an argument.
#![allow(clippy::disallowed_methods)]

#[path = "../deploy_support/mod.rs"]
mod deploy_support;
#[path = "../dns_support/mod.rs"]
mod dns_support;
#[path = "../exported_metrics/mod.rs"]
mod exported_metrics;
#[path = "../width_support/mod.rs"]
mod width_support;

mod agent_flags;
mod audit_cli;
mod audit_fixtures;
mod audit_rules;
mod channelz_read;
mod check_families;
mod cli;
mod cli_flags;
mod common;
mod datapath_cli;
mod deploy_manifests;
mod dns_budget;
mod dns_connect;
mod dns_families;
mod dns_paths;
mod dns_prober;
mod dns_query;
mod drain_wait_faults;
mod explain_cli;
mod explain_inputs;
mod grafana_dashboard;
mod helm_chart;
mod http_limits;
mod input_bounds_cli;
mod install;
mod kube_connect;
mod kube_mock_apiserver;
mod kube_relist;
mod ledger_api;
mod ledger_crash;
mod ledger_lock;
mod ledger_props;
mod ledger_write_failures;
mod ledger_writer;
mod soak_score_cli;
