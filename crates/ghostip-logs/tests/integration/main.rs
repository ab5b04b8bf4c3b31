//! The log scanner's integration tests as one test binary (one link instead of one per file).
//!
//! Each module is one former test file; test names are `module::test`. The corpus tests
//! (`corpus::`, and `focus::` on the real samples) read `../shared/fixtures` beside the clone, are
//! `#[ignore = "needs …"]` and run under `--ignored` (scripts/test).
// Tests read the system's clocks for their own timeouts; the scanner under test reads none.
#![allow(clippy::disallowed_methods)]

mod bytes;
mod corpus;
mod focus;
mod formats;
mod generated;
mod parallel;
