//! Finds connection failures (target IP:port, time, kind) in client error logs, classifies and
//! aggregates them: the pure core of `ghostip explain`.
//!
//! See [`Scanner`] for the entry point: it streams any [`std::io::Read`] (wrap gzip with
//! [`open_reader`]), runs a literal prefilter over whole buffers so that ordinary lines cost
//! almost nothing, and hands candidate lines to per-format extractors (gRPC-go, grpc-java, Java,
//! OkHttp, Apache HttpClient, reactor-netty, Go net, Envoy text and JSON, nginx, Node.js, Python,
//! linkerd2-proxy, CoreDNS, curl). Each failure is a [`ConnFailure`]. [`classify`] gives its
//! class by error kind; [`classify_with_owner`] applies the ledger's facts about who owned the IP;
//! [`Aggregator`] groups them per target, class, Service and rollout window and renders a table.
//!
//! A regular file can also be scanned on several threads with [`Scanner::scan_parallel`]
//! (positional reads through [`ReadAt`], segments merged in file order: the same failures and
//! counts as the sequential scan), or, once [`map_settled`] has mapped it, in place with
//! [`Scanner::scan_slice`] and [`Scanner::scan_parallel_slice`] (no copy into read buffers).
//!
//! The crate does no IO besides reading the caller's reader or [`ReadAt`] source and mapping a
//! file the caller opened, and has no clock: years and zones missing from log timestamps come
//! from [`ScanOptions`], the current time for [`map_settled`] from the caller.
//!
//! ```
//! use ghostip_logs::{Aggregator, Kind, ScanOptions, Scanner, classify};
//!
//! let log = "2024/05/01 15:42:10 [error] 7#7: *1 connect() failed (111: Connection refused) \
//!            while connecting to upstream, client: 10.0.0.9, server: _, \
//!            upstream: \"http://10.244.3.71:8080/\", host: \"shop\"\n";
//! let mut scanner = Scanner::new(ScanOptions { year: None, ..ScanOptions::default() })?;
//! let mut agg = Aggregator::new();
//! scanner.scan(log.as_bytes(), &mut |f| {
//!     assert_eq!(f.kind, Kind::Refused);
//!     assert_eq!(f.target, "10.244.3.71:8080".parse().ok());
//!     agg.add(&f, classify(&f));
//! })?;
//! assert!(agg.report(false).headline().starts_with("1 error (refused)"));
//! # Ok::<(), ghostip_logs::ScanError>(())
//! ```
//!
//! # Errors
//! Only reading can fail ([`ScanError::Io`]). Bad input never does: binary and non-UTF-8 lines
//! are skipped and counted, unknown shapes are counted with one example each
//! ([`ScanStats::unknown_shapes`]), timestamps without year or zone are marked approximate.

// `unsafe` is denied everywhere but in `mmap` (mapping a settled file and releasing scanned
// pages; the module doc gives the reason, the risk and its mitigation).
#![deny(unsafe_code)]

mod addr;
mod aggregate;
mod classify;
mod extract;
mod formats;
mod lines;
mod lit;
mod mmap;
mod model;
mod parallel;
mod prefilter;
mod reader;
mod scanner;
mod time;

pub use aggregate::{Aggregator, Group, Report};
pub use classify::{
    Class, OwnerFacts, class_of_kind, classify, classify_with_owner, is_local_address,
    is_loopback_name,
};
pub use mmap::{MappedLog, map_settled};
pub use model::{
    ConnFailure, FOCUS_LINES, Format, Kind, RAW_EXCERPT_MAX, ScanOptions, ScanStats, Target,
    UnknownShape,
};
pub use parallel::{ParallelOptions, ReadAt};
pub use prefilter::prefilter_needles;
pub use reader::{is_gzip, open_reader, open_reader_gz};
pub use scanner::{ScanError, Scanner, scan_bytes, scan_reader};
