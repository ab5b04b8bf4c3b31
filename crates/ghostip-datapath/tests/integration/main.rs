//! The datapath parsers' integration tests as one test binary (one link instead of one per file); the kernel tests stay in `kernel.rs`, which needs root.
//!
//! Each module is one former test file; test names are `module::test`. The corpus tests
//! (`corpus::`) read `../shared/fixtures` beside the clone, are `#[ignore = "needs …"]` and run
//! under `--ignored` (scripts/test).

mod against_truth;
mod corpus;
mod netlink_view;
mod parsers;
mod roundtrip;
