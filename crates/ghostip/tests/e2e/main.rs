//! The end-to-end tests against the lab cluster (lab/up), as one test binary: one module per scenario.
//!
//! Every test is `#[ignore = "needs the lab (lab/up, …)"]`. The lab's state carries over from one
//! scenario to the next, so scripts/test runs the modules one at a time in a fixed order
//! (`cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_lab::`, …),
//! not in libtest's alphabetical order.
// The lab tests time real processes and stamp what they feed the lab with the wall clock.
#![allow(clippy::disallowed_methods)]

#[path = "../deploy_support/mod.rs"]
mod deploy_support;
#[path = "../lab_support/mod.rs"]
mod lab_support;
#[path = "../netns_support/mod.rs"]
mod netns_support;

mod e2e_agent;
mod e2e_agent_auth;
mod e2e_audit;
mod e2e_cilium;
mod e2e_client_cache;
mod e2e_conntrack;
mod e2e_deploy;
mod e2e_drain;
mod e2e_explain;
mod e2e_fidelity;
mod e2e_grpc;
mod e2e_lab;
mod e2e_nodes;
mod e2e_soak;
