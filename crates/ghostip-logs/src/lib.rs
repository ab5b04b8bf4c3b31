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
//! An input can also be cut into segments scanned independently, on the caller's threads, and
//! merged in input order into the same result ([`segment_cuts`], [`Scanner::segment_scanner`],
//! [`Scanner::apply_segment`]); [`Scanner::scan_slice`] scans bytes already in memory.
//!
//! The crate does no IO besides reading the caller's reader (or [`ReadAt`] source), starts no
//! thread and has no clock: years and zones missing from log timestamps come from
//! [`ScanOptions`].
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
//! Only reading can fail ([`ScanError::Io`]). Bad input never does: binary lines (with a NUL
//! byte) are skipped and counted, lines are read as bytes whatever their encoding (a Latin-1 or
//! broken UTF-8 byte hides no failure), unknown shapes are counted with one example each
//! ([`ScanStats::unknown_shapes`]), timestamps without year or zone are marked approximate.

#![forbid(unsafe_code)]

mod addr;
mod aggregate;
mod classify;
mod extract;
mod formats;
mod lines;
mod lit;
mod model;
mod prefilter;
mod reader;
mod scanner;
mod segments;
mod time;

pub use aggregate::{Aggregator, Group, Report};
pub use classify::{
    Class, OwnerFacts, class_of_kind, classify, classify_with_owner, is_local_address,
    is_loopback_name,
};
pub use model::{
    ConnFailure, FOCUS_LINES, Format, Kind, RAW_EXCERPT_MAX, ScanOptions, ScanStats, Target,
    UnknownShape,
};
pub use prefilter::prefilter_needles;
pub use reader::{is_gzip, open_reader, open_reader_gz};
pub use scanner::{ScanError, Scanner, scan_bytes, scan_reader};
pub use segments::{
    BOUNDARY_SEARCH, LOOK_BACK, ReadAt, ScannedSegment, SegmentScanner, look_back_start, read_full,
    segment_cuts,
};
