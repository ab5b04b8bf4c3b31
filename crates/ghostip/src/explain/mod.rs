//! The IO of `ghostip explain` around the pure join of `ghostip_analysis::explain`.
//!
//! - [`scan_positional`]: log files read by positional reads in segments on several threads,
//!   no memory map;
//! - the ledger as a [`ghostip_analysis::explain::HistorySource`] (opened read-only);
//! - [`read_truth_history`]: a truth-history file read up to `--max-input-size` and parsed.

mod history;
mod read;
mod truth_file;

pub use read::{FileScan, Positional, SEGMENT_BYTES, scan_positional};
pub use truth_file::{TruthReadError, read_truth_history};
