//! Streams a log through the literal prefilter and the extractors, merging multi-line events.
//!
//! See [`Scanner`] for the entry point. Memory stays flat: the scanner reads into one buffer of
//! about 512 KiB (256 KiB reads, scanned while they are still in the core's cache; 16 KiB of
//! history for the look-back), which grows to at most about 1.3 MiB for a long line; a line of
//! 1 MiB or more is examined on its first MiB only, and lines without a needle are never
//! copied, parsed or allocated for.
//!
//! A scan has two stages: the line stage ([`crate::lines`]) finds candidate lines and extracts
//! what each says, with no state across lines; the merge stage (here) applies, in input order,
//! what does cross lines. An input can be cut into segments ([`crate::segments`]):
//! the segments go through line stages independently (on the caller's threads) and their
//! candidates through the one merge stage in input order, with the same result as the
//! sequential scan.
//!
//! # Multi-line events
//! A failure on a line that has no timestamp of its own and looks like a continuation (a
//! `Caused by:`, a stack frame, a Node.js `code: 'ECONNRESET'` property, or a bare exception line
//! with no stack frame since the previous failure) within 40 lines of the previous failure, with
//! no timestamped line in between, is merged into it when the two agree (same target or one
//! unknown, same kind or one generic): the merged event keeps the first line and the most specific
//! kind, target and format. A failure without its own time takes the time of the
//! closest preceding line that has one, at most 32 lines back. These look-backs (stack frames,
//! timestamps) see at most the 16 KiB of whole lines before the line, however the input was
//! read.

use std::io::Read;
use std::sync::{Arc, OnceLock};

use memchr::memmem::Finder;

use crate::extract::{Continuation, Extracted, Extractors};
use crate::lines::{Candidate, Found, INITIAL_BUF, LineScan, MERGE_WINDOW, UnknownLine};
use crate::model::{ConnFailure, ScanOptions, ScanStats, UnknownShape};
use crate::prefilter::Prefilter;
use crate::time::{RawTime, Resolved};

/// At most this many distinct unknown shapes keep an example.
pub(crate) const MAX_UNKNOWN_SHAPES: usize = 32;
const LOOKBACK_LINES: u64 = 32;

/// Errors of a scan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    /// Reading the input failed. Not retryable by the scanner; the failures emitted so far are
    /// valid.
    #[error("reading the log input failed")]
    Io(#[source] std::io::Error),
    /// The literal matchers could not be built (a bug: they are constants).
    #[error("building the literal matchers failed")]
    Build,
}

/// The automata are immutable and built from constants: build them once per process.
fn automata() -> Option<&'static (Prefilter, Extractors)> {
    static CELL: OnceLock<Option<(Prefilter, Extractors)>> = OnceLock::new();
    CELL.get_or_init(|| Some((crate::prefilter::build_prefilter()?, Extractors::new()?)))
        .as_ref()
}

struct Pending {
    failure: ConnFailure,
    grpc_creating: bool,
}

/// A streaming scanner for connection failures in logs.
///
/// One scanner reads one input ([`Scanner::scan`]); line numbers start at 1 for each call. Its
/// [`ScanStats`] accumulate over calls.
pub struct Scanner {
    pub(crate) lines: LineScan,
    pub(crate) merge: Merge,
    pub(crate) stats: ScanStats,
    /// Lines of the segments applied so far (see [`Scanner::apply_segment`]).
    pub(crate) segment_base: u64,
}

/// The merge stage: the state that crosses lines.
pub(crate) struct Merge {
    pub(crate) opts: ScanOptions,
    pending: Option<Pending>,
    inferred_year: Option<i16>,
    /// The last line applied (a focused scan's windows of neighbouring ranges overlap).
    applied_to: u64,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("opts", &self.merge.opts)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

// === impl Scanner ===

impl Scanner {
    /// A scanner with the caller's year / zone defaults.
    pub fn new(opts: ScanOptions) -> Result<Scanner, ScanError> {
        Ok(Scanner {
            lines: Scanner::line_stage(&opts)?,
            merge: Merge {
                opts,
                pending: None,
                inferred_year: None,
                applied_to: 0,
            },
            stats: ScanStats::default(),
            segment_base: 0,
        })
    }

    /// A fresh line stage with these options.
    pub(crate) fn line_stage(opts: &ScanOptions) -> Result<LineScan, ScanError> {
        let (prefilter, ex) = automata().ok_or(ScanError::Build)?;
        let focus = opts
            .target
            .and_then(|t| t.literal())
            .map(|l| Arc::new(Finder::new(l.as_bytes()).into_owned()));
        Ok(LineScan::new(prefilter, ex, opts.skip_binary_check, focus))
    }

    /// What was counted so far.
    pub fn stats(&self) -> &ScanStats {
        &self.stats
    }

    /// Consumes the scanner, returning its counts.
    pub fn into_stats(self) -> ScanStats {
        self.stats
    }

    /// Reads `reader` to its end, calling `sink` with every failure in input order.
    ///
    /// Wrap gzip input with [`crate::open_reader`] first.
    pub fn scan<R: Read>(
        &mut self,
        reader: R,
        sink: &mut dyn FnMut(ConnFailure),
    ) -> Result<(), ScanError> {
        let mut buf = vec![0u8; INITIAL_BUF];
        self.merge.start_input();
        let merge = &mut self.merge;
        let stats = &mut self.stats;
        let r = self.lines.scan_reader(reader, &mut buf, 0, &mut |c| {
            merge.candidate(c, 0, stats, sink);
        });
        self.end_range();
        self.merge.flush(&mut self.stats, sink);
        r.map_err(ScanError::Io)
    }

    /// Scans bytes already in memory (a file the caller read or memory-mapped) without copying
    /// them, calling `sink` with every failure in input order. Same failures and counts as
    /// [`Scanner::scan`] over the same bytes.
    pub fn scan_slice(&mut self, data: &[u8], sink: &mut dyn FnMut(ConnFailure)) {
        self.merge.start_input();
        let merge = &mut self.merge;
        let stats = &mut self.stats;
        self.lines.scan_slice(data, &mut |c| {
            merge.candidate(c, 0, stats, sink);
        });
        self.end_range();
        self.merge.flush(&mut self.stats, sink);
    }

    /// Takes the line stage's counts and year at the end of a range.
    fn end_range(&mut self) {
        let counts = std::mem::take(&mut self.lines.counts);
        self.stats.merge(&counts);
        self.merge.end_range(self.lines.year.take());
    }
}

// === impl Merge ===

impl Merge {
    /// A new input: its lines count from 1.
    pub(crate) fn start_input(&mut self) {
        self.applied_to = 0;
    }

    /// Applies one candidate of a range whose first line is line `base + 1` of the input. A
    /// line applied already (by the window of a neighbouring range) is skipped.
    pub(crate) fn candidate(
        &mut self,
        c: Candidate,
        base: u64,
        stats: &mut ScanStats,
        sink: &mut dyn FnMut(ConnFailure),
    ) {
        let Some(line_no) = base.checked_add_signed(c.line_no) else {
            return;
        };
        if line_no <= self.applied_to {
            return;
        }
        self.applied_to = line_no;
        if !c.counted {
            stats.candidate_lines += 1;
            stats.dismissed_lines += u64::from(c.dismissed);
        }
        if let Some(y) = c.year {
            self.inferred_year = Some(y);
        }
        if let Some(u) = c.unknown {
            record_unknown(stats, u, line_no);
        }
        if let Some(f) = c.found {
            self.accept(f, line_no, stats, sink);
        }
    }

    /// The end of a range: `year` is the range's last year (dismissed lines count too).
    pub(crate) fn end_range(&mut self, year: Option<i16>) {
        if year.is_some() {
            self.inferred_year = year;
        }
    }

    fn resolve(&self, t: RawTime) -> Option<Resolved> {
        t.resolve(
            self.opts.year,
            self.inferred_year,
            self.opts.fallback_year,
            self.opts.tz.as_ref(),
        )
    }

    fn accept(
        &mut self,
        f: Found,
        line_no: u64,
        stats: &mut ScanStats,
        sink: &mut dyn FnMut(ConnFailure),
    ) {
        let e = f.e;
        // Whether the closest such line is at most `lines` lines back.
        let within = |back: Option<u64>, lines: u64| back.is_some_and(|b| b <= lines);
        if let Some(p) = &mut self.pending {
            let gap = line_no.saturating_sub(p.failure.end_line_no);
            let between = gap.saturating_sub(1);
            let dup_grpc =
                p.grpc_creating && e.grpc_create_failed && gap <= 3 && p.failure.target == e.target;
            let shape_continues = match f.continuation {
                Continuation::No => false,
                Continuation::Part => true,
                // A bare exception line after a complete stack trace is the next trace.
                Continuation::Exception => !within(f.frame_back, between),
            };
            // No new log record (a timestamped line) began after the pending event.
            let continues = gap <= MERGE_WINDOW
                && f.time.is_none()
                && shape_continues
                && !within(f.stamp_back.map(|s| s.0), between);
            if (dup_grpc || continues) && compatible(&p.failure, &e) {
                merge(&mut p.failure, e, line_no);
                p.grpc_creating = false;
                return;
            }
        }
        self.flush(stats, sink);
        // Without its own time: the time of the record it continues, at most 32 lines back.
        let continues_record = f.continuation != Continuation::No && f.in_record;
        let resolved = match f.time {
            Some(t) => self.resolve(t),
            None => f
                .stamp_back
                .filter(|(back, _)| *back <= LOOKBACK_LINES && continues_record)
                .and_then(|(_, t)| self.resolve(t)),
        };
        if let Some(r) = resolved {
            stats.assumed_year += u64::from(r.year_assumed);
            stats.assumed_zone += u64::from(r.zone_assumed);
        }
        self.pending = Some(Pending {
            grpc_creating: e.grpc_creating,
            failure: ConnFailure {
                line_no,
                end_line_no: line_no,
                timestamp: resolved.map(|r| r.at),
                approximate_time: resolved.is_some_and(|r| r.year_assumed || r.zone_assumed),
                target: e.target,
                host: e.host,
                dns_name: e.dns_name,
                dns_server: e.dns_server,
                kind: e.kind,
                format: e.format,
                response_flags: e.response_flags,
                raw: f.raw,
            },
        });
    }

    pub(crate) fn flush(&mut self, stats: &mut ScanStats, sink: &mut dyn FnMut(ConnFailure)) {
        if let Some(p) = self.pending.take() {
            let f = p.failure;
            if self.opts.target.is_some_and(|t| !t.matches(&f)) {
                return;
            }
            stats.failures += 1;
            stats.undated += u64::from(f.timestamp.is_none());
            *stats.per_format.entry(f.format).or_default() += 1;
            *stats.per_kind.entry(f.kind).or_default() += 1;
            sink(f);
        }
    }
}

fn record_unknown(stats: &mut ScanStats, u: UnknownLine, line_no: u64) {
    stats.unknown_lines += 1;
    if let Some(s) = stats.unknown_shapes.iter_mut().find(|s| s.shape == u.shape) {
        s.count += 1;
    } else if stats.unknown_shapes.len() < MAX_UNKNOWN_SHAPES {
        stats.unknown_shapes.push(UnknownShape {
            shape: u.shape,
            count: 1,
            example_line_no: line_no,
            example: u.example,
        });
    }
}

fn compatible(p: &ConnFailure, e: &Extracted) -> bool {
    let targets = p.target.is_none() || e.target.is_none() || p.target == e.target;
    let kinds = p.kind == e.kind
        || p.kind.is_generic()
        || e.kind.is_generic()
        || (p.kind.is_dns() && e.kind.is_dns());
    let names = p.dns_name.is_none() || e.dns_name.is_none() || p.dns_name == e.dns_name;
    targets && kinds && names
}

fn merge(p: &mut ConnFailure, e: Extracted, line_no: u64) {
    p.end_line_no = line_no;
    if p.kind.is_generic() && !e.kind.is_generic() {
        p.kind = e.kind;
    }
    if e.format.specificity() > p.format.specificity() {
        p.format = e.format;
    }
    p.target = p.target.or(e.target);
    if p.host.is_none() {
        p.host = e.host;
    }
    if p.dns_name.is_none() {
        p.dns_name = e.dns_name;
    }
    p.dns_server = p.dns_server.or(e.dns_server);
    if p.response_flags.is_none() {
        p.response_flags = e.response_flags;
    }
}

/// Scans a whole input into a vector (for tests and small inputs; prefer [`Scanner::scan`] with
/// a streaming sink for large ones).
pub fn scan_reader<R: Read>(
    reader: R,
    opts: ScanOptions,
) -> Result<(Vec<ConnFailure>, ScanStats), ScanError> {
    let mut scanner = Scanner::new(opts)?;
    let mut out = Vec::new();
    scanner.scan(reader, &mut |f| out.push(f))?;
    Ok((out, scanner.into_stats()))
}

/// Scans bytes already in memory.
pub fn scan_bytes(
    data: &[u8],
    opts: ScanOptions,
) -> Result<(Vec<ConnFailure>, ScanStats), ScanError> {
    scan_reader(data, opts)
}
