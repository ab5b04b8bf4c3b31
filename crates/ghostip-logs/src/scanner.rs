//! Streams a log through the literal prefilter and the extractors, merging multi-line events.
//!
//! See [`Scanner`] for the entry point. Memory stays flat: the scanner reads into one buffer of
//! about 2 MiB (1 MiB reads, at most 1 MiB of an unfinished line, 16 KiB of history for the
//! look-back), lines longer than that are examined on their first MiB only, and lines without a
//! needle are never copied, parsed or allocated for.
//!
//! # Multi-line events
//! A failure on a line that has no timestamp of its own and looks like a continuation (a
//! `Caused by:`, a stack frame, a Node.js `code: 'ECONNRESET'` property, or a bare exception line
//! with no stack frame since the previous failure) within 40 lines of the previous failure, with
//! no timestamped line in between, is merged into it when the two agree (same target or one
//! unknown, same kind or one generic): the merged event keeps the first line and the most specific
//! kind, target and format. A failure without its own time takes the time of the
//! closest preceding line that has one, at most 32 lines back.

use std::io::{ErrorKind, Read};
use std::sync::OnceLock;

use crate::extract::{
    Continuation, Extracted, Extractors, Outcome, continuation, extract, is_frame, shape_key,
};
use crate::model::{ConnFailure, Kind, ScanOptions, ScanStats, UnknownShape, excerpt};
use crate::prefilter::Prefilter;
use crate::time::{Prefix, Resolved, parse_prefix};

/// At most this many distinct unknown shapes keep an example.
pub(crate) const MAX_UNKNOWN_SHAPES: usize = 32;
const READ_CHUNK: usize = 1 << 20;
const INITIAL_BUF: usize = 64 << 10;
const MAX_LINE: usize = 1 << 20;
const HISTORY: usize = 16 << 10;
const MERGE_WINDOW: u64 = 40;
const LOOKBACK_LINES: usize = 32;

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
    opts: ScanOptions,
    prefilter: &'static Prefilter,
    ex: &'static Extractors,
    stats: ScanStats,
    pending: Option<Pending>,
    inferred_year: Option<i16>,
    scratch: Vec<usize>,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("opts", &self.opts)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

// === impl Scanner ===

impl Scanner {
    /// A scanner with the caller's year / zone defaults.
    pub fn new(opts: ScanOptions) -> Result<Scanner, ScanError> {
        let (prefilter, ex) = automata().ok_or(ScanError::Build)?;
        Ok(Scanner {
            opts,
            prefilter,
            ex,
            stats: ScanStats::default(),
            pending: None,
            inferred_year: None,
            scratch: Vec::new(),
        })
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
        mut reader: R,
        sink: &mut dyn FnMut(ConnFailure),
    ) -> Result<(), ScanError> {
        let cap = HISTORY + MAX_LINE + READ_CHUNK;
        // Start small (cheap for small inputs) and grow to `cap` at most.
        let mut buf = vec![0u8; INITIAL_BUF];
        let mut filled = 0usize;
        let mut pos = 0usize; // first unprocessed byte, a line start
        let mut hist = 0usize; // first byte kept for the look-back, a line start
        let mut eof = false;
        let mut skipping = false; // inside the rest of an overlong line
        let mut newlines: u64 = 0; // newlines before `pos`
        let mut open_line = false; // bytes after the last newline were processed
        loop {
            // Drop what is older than the history window.
            let keep_from = if pos - hist > HISTORY {
                let from = pos - HISTORY;
                memchr::memchr(b'\n', &buf[from..pos]).map_or(pos, |i| from + i + 1)
            } else {
                hist
            };
            if keep_from > 0 {
                buf.copy_within(keep_from..filled, 0);
                filled -= keep_from;
                pos -= keep_from;
                hist = keep_from.max(hist) - keep_from;
            }
            while !eof {
                if filled == buf.len() {
                    if buf.len() >= cap {
                        break;
                    }
                    let grown = (buf.len() * 2).min(cap);
                    buf.resize(grown, 0);
                }
                match reader.read(&mut buf[filled..]) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        filled += n;
                        self.stats.bytes += n as u64;
                        if filled - pos >= READ_CHUNK {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.flush(sink);
                        return Err(ScanError::Io(e));
                    }
                }
            }
            if skipping {
                match memchr::memchr(b'\n', &buf[pos..filled]) {
                    Some(i) => {
                        pos += i + 1;
                        newlines += 1;
                        skipping = false;
                        open_line = false;
                        hist = pos;
                    }
                    None => {
                        pos = filled;
                        hist = pos;
                        if eof {
                            break;
                        }
                        continue;
                    }
                }
            }
            let end = if eof {
                filled
            } else {
                memchr::memrchr(b'\n', &buf[pos..filled]).map_or(pos, |i| pos + i + 1)
            };
            if end > pos {
                newlines += self.process(&buf[..end], hist, pos, newlines, sink);
                open_line = buf[end - 1] != b'\n';
                pos = end;
            } else if !eof && filled - pos >= MAX_LINE {
                self.stats.overlong_lines += 1;
                self.process(&buf[..pos + MAX_LINE], hist, pos, newlines, sink);
                pos = filled;
                hist = pos;
                skipping = true;
                open_line = true;
            }
            if eof && pos >= filled {
                break;
            }
        }
        self.stats.lines += newlines + u64::from(open_line);
        self.flush(sink);
        Ok(())
    }

    /// Scans bytes already in memory (a file the caller read or memory-mapped) without copying
    /// them, calling `sink` with every failure in input order. Same failures and counts as
    /// [`Scanner::scan`] over the same bytes, except that a line longer than 1 MiB is always cut
    /// at 1 MiB here (`scan` may keep up to about 2 MiB of a line that fits its buffer).
    pub fn scan_slice(&mut self, data: &[u8], sink: &mut dyn FnMut(ConnFailure)) {
        self.stats.bytes += data.len() as u64;
        let mut pos = 0usize;
        let mut newlines: u64 = 0;
        let mut open_line = false;
        while pos < data.len() {
            let hist = if pos > HISTORY {
                let from = pos - HISTORY;
                memchr::memchr(b'\n', &data[from..pos]).map_or(pos, |i| from + i + 1)
            } else {
                0
            };
            let want = (pos + READ_CHUNK).min(data.len());
            let end = if want == data.len() {
                want
            } else {
                memchr::memrchr(b'\n', &data[pos..want]).map_or(pos, |i| pos + i + 1)
            };
            if end > pos {
                newlines += self.process(&data[..end], hist, pos, newlines, sink);
                open_line = data[end - 1] != b'\n';
                pos = end;
            } else {
                // No newline within the next MiB: an overlong line.
                self.stats.overlong_lines += 1;
                self.process(&data[..pos + MAX_LINE], hist, pos, newlines, sink);
                match memchr::memchr(b'\n', &data[pos + MAX_LINE..]) {
                    Some(i) => {
                        pos += MAX_LINE + i + 1;
                        newlines += 1;
                        open_line = false;
                    }
                    None => {
                        pos = data.len();
                        open_line = true;
                    }
                }
            }
        }
        self.stats.lines += newlines + u64::from(open_line);
        self.flush(sink);
    }

    /// Scans the lines of `hay[a..]` (which ends at a newline or at the end of input); `hay[hist..a]`
    /// is history for the look-back. Returns the number of newlines in `hay[a..]`.
    fn process(
        &mut self,
        hay: &[u8],
        hist: usize,
        a: usize,
        newlines_before: u64,
        sink: &mut dyn FnMut(ConnFailure),
    ) -> u64 {
        let b = hay.len();
        if !self.opts.skip_binary_check {
            self.count_garbled(hay, a, b);
        }
        let mut at = a;
        let mut cursor = a;
        let mut nl = 0u64;
        while at < b {
            let Some((ms, me)) = self.prefilter.find(hay, at..b) else {
                break;
            };
            let ls = memchr::memrchr(b'\n', &hay[at..ms]).map_or(at, |i| at + i + 1);
            let le = memchr::memchr(b'\n', &hay[me..b]).map_or(b, |i| me + i);
            nl += memchr::memchr_iter(b'\n', &hay[cursor..ls]).count() as u64;
            cursor = ls;
            self.stats.candidate_lines += 1;
            self.handle_line(hay, hist, ls, le, newlines_before + nl + 1, sink);
            at = le + 1;
        }
        nl + memchr::memchr_iter(b'\n', &hay[cursor.min(b)..b]).count() as u64
    }

    /// Counts lines of `hay[a..b]` that hold a NUL byte or invalid UTF-8.
    fn count_garbled(&mut self, hay: &[u8], a: usize, b: usize) {
        let region = &hay[a..b];
        let nul = memchr::memchr(0, region).is_some();
        if !nul && (region.is_ascii() || std::str::from_utf8(region).is_ok()) {
            return;
        }
        self.scratch.clear();
        let line_start = |p: usize| memchr::memrchr(b'\n', &region[..p]).map_or(0, |i| i + 1);
        let line_end =
            |p: usize| memchr::memchr(b'\n', &region[p..]).map_or(region.len(), |i| p + i);
        let mut s = 0;
        while s < region.len() {
            match std::str::from_utf8(&region[s..]) {
                Ok(_) => break,
                Err(e) => {
                    let bad = s + e.valid_up_to();
                    self.scratch.push(line_start(bad));
                    s = line_end(bad) + 1;
                }
            }
        }
        for p in memchr::memchr_iter(0, region) {
            self.scratch.push(line_start(p));
        }
        self.scratch.sort_unstable();
        self.scratch.dedup();
        self.stats.binary_lines += self.scratch.len() as u64;
    }

    fn handle_line(
        &mut self,
        hay: &[u8],
        hist: usize,
        ls: usize,
        le: usize,
        line_no: u64,
        sink: &mut dyn FnMut(ConnFailure),
    ) {
        let mut line = &hay[ls..le];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        if memchr::memchr(0, line).is_some() || std::str::from_utf8(line).is_err() {
            if self.opts.skip_binary_check {
                self.stats.binary_lines += 1;
            }
            return;
        }
        let prefix = parse_prefix(line);
        if let Some(y) = prefix.time.and_then(|t| t.year) {
            self.inferred_year = Some(y);
        }
        match extract(line, prefix.msg_start, self.ex) {
            Outcome::Dismissed => self.stats.dismissed_lines += 1,
            Outcome::Unknown { kind, emit } => {
                self.record_unknown(kind, line, &prefix, line_no);
                if let Some(e) = emit {
                    self.accept(e, line, &prefix, &hay[hist..ls], line_no, sink);
                }
            }
            Outcome::Failure(e) => self.accept(e, line, &prefix, &hay[hist..ls], line_no, sink),
        }
    }

    fn record_unknown(&mut self, kind: Option<Kind>, line: &[u8], prefix: &Prefix, line_no: u64) {
        self.stats.unknown_lines += 1;
        let key = shape_key(kind, &line[prefix.msg_start..]);
        if let Some(s) = self
            .stats
            .unknown_shapes
            .iter_mut()
            .find(|s| s.shape == key)
        {
            s.count += 1;
        } else if self.stats.unknown_shapes.len() < MAX_UNKNOWN_SHAPES {
            self.stats.unknown_shapes.push(UnknownShape {
                shape: key,
                count: 1,
                example_line_no: line_no,
                example: excerpt(line),
            });
        }
    }

    fn resolve(&mut self, t: crate::time::RawTime) -> Option<Resolved> {
        t.resolve(
            self.opts.year,
            self.inferred_year,
            self.opts.fallback_year,
            self.opts.tz.as_ref(),
        )
    }

    /// The time of the closest preceding line that has one, at most 32 lines back in `before`.
    fn lookback_time(&mut self, before: &[u8]) -> Option<Resolved> {
        let mut end = before.len();
        for _ in 0..LOOKBACK_LINES {
            if end == 0 {
                return None;
            }
            let body = &before[..end - 1]; // drop the newline that ends this line
            let start = memchr::memrchr(b'\n', body).map_or(0, |i| i + 1);
            if let Some(t) = parse_prefix(&body[start..]).time {
                return self.resolve(t);
            }
            end = start;
        }
        None
    }

    fn accept(
        &mut self,
        e: Extracted,
        line: &[u8],
        prefix: &Prefix,
        before: &[u8],
        line_no: u64,
        sink: &mut dyn FnMut(ConnFailure),
    ) {
        let msg = &line[prefix.msg_start..];
        if let Some(p) = &mut self.pending {
            let gap = line_no.saturating_sub(p.failure.end_line_no);
            let dup_grpc =
                p.grpc_creating && e.grpc_create_failed && gap <= 3 && p.failure.target == e.target;
            let shape_continues = match continuation(msg) {
                Continuation::No => false,
                Continuation::Part => true,
                Continuation::Exception => !frame_within(before, gap.saturating_sub(1)),
            };
            let continues = gap <= MERGE_WINDOW
                && prefix.time.is_none()
                && shape_continues
                && !record_started_within(before, gap.saturating_sub(1));
            if (dup_grpc || continues) && compatible(&p.failure, &e) {
                merge(&mut p.failure, e, line_no);
                p.grpc_creating = false;
                return;
            }
        }
        self.flush(sink);
        let resolved = match prefix.time {
            Some(t) => self.resolve(t),
            None => self.lookback_time(before),
        };
        if let Some(r) = resolved {
            self.stats.assumed_year += u64::from(r.year_assumed);
            self.stats.assumed_zone += u64::from(r.zone_assumed);
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
                raw: excerpt(line),
            },
        });
    }

    fn flush(&mut self, sink: &mut dyn FnMut(ConnFailure)) {
        if let Some(p) = self.pending.take() {
            let f = p.failure;
            self.stats.failures += 1;
            self.stats.undated += u64::from(f.timestamp.is_none());
            *self.stats.per_format.entry(f.format).or_default() += 1;
            *self.stats.per_kind.entry(f.kind).or_default() += 1;
            sink(f);
        }
    }
}

/// True when one of the last `lines` lines of `before` starts with a timestamp, i.e. a new log
/// record began after the pending event.
fn record_started_within(before: &[u8], lines: u64) -> bool {
    let mut end = before.len();
    for _ in 0..lines.min(MERGE_WINDOW) {
        if end == 0 {
            return false;
        }
        let body = &before[..end - 1];
        let start = memchr::memrchr(b'\n', body).map_or(0, |i| i + 1);
        if parse_prefix(&body[start..]).time.is_some() {
            return true;
        }
        end = start;
    }
    false
}

/// True when one of the last `lines` lines of `before` is a stack frame.
fn frame_within(before: &[u8], lines: u64) -> bool {
    let mut end = before.len();
    for _ in 0..lines.min(MERGE_WINDOW) {
        if end == 0 {
            return false;
        }
        let body = &before[..end - 1];
        let start = memchr::memrchr(b'\n', body).map_or(0, |i| i + 1);
        if is_frame(&body[start..]) {
            return true;
        }
        end = start;
    }
    false
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
