//! The tests against real kernel state in network namespaces, as one test binary: they need root (scripts/test runs them in its lab phase).
//!
//! `GHOSTIP_NETNS_TESTS=1 cargo test -p ghostip --test kernel -- --ignored --test-threads=1`.

#[path = "../netns_support/mod.rs"]
mod netns_support;

mod cilium_maps_kernel;
mod conntrack_kernel;
