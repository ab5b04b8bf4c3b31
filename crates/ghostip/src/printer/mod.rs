//! The one home of ghostip's views: every command's human (and JSON/SARIF/HTML) output.
//!
//! - [`table`]: the layout to the terminal's width (tables with typed columns, prose, the
//!   fallback lists) and the writes to stdout/stderr, re-exported here;
//! - [`sanitize`]: escaping of control characters in text from logs and the cluster;
//! - [`rollout`]: `rollout`'s report tables, timeline picture and HTML;
//! - [`audit`]: `audit`'s listing, table, JSON and SARIF;
//! - [`explain`]: `explain`'s table;
//! - [`whois`]: `whois`' table and JSON;
//! - [`datapath`]: `datapath show` and `datapath diff`.
//!
//! `check`'s and `agent status`' views stay beside their commands for now.

pub mod audit;
pub mod datapath;
pub mod explain;
pub mod rollout;
pub mod sanitize;
pub mod soak;
pub mod table;
pub mod whois;

pub use table::{
    Column, DEFAULT_WIDTH, Fit, Layout, PLAIN_BELOW, Table, abbreviate_path, fit_text,
    middle_ellipsis, offset, print_text, stdout_failure, wrap, write_stderr, write_stdout,
    write_stdout_line,
};
