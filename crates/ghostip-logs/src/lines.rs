//! The line stage of a scan: reads a range of input into a bounded buffer, runs the literal
//! prefilter over it and turns each candidate line into a [`Candidate`].
//!
//! The line stage keeps no state that crosses lines besides counts and the last year seen, so
//! ranges of one input can be scanned independently (on several threads) and their candidates
//! handed, in input order, to the merge stage ([`crate::scanner`]), which holds the state that
//! does cross lines (the pending multi-line event, the inferred year, the unknown shapes).
//! Everything the merge stage needs from the bytes before a line (the look-back) is computed
//! here, from at most [`HISTORY`] bytes before the line, so that it is the same whichever way
//! the input was cut into ranges.
//!
//! # Focused scans
//! With a [`Target`](crate::Target) that has one spelling (IPv4), the prefilter and the
//! extractors run only on the windows around the lines that hold that spelling (found with a
//! `memmem` search, about as fast as reading the bytes): the lines a multi-line event holding
//! such a line can span (see [`LineScan::window`]). Those windows are a function of the bytes
//! alone, so a range examines the lines of its own hits' windows even where they lie in the
//! neighbouring ranges (a range's buffer keeps twice the history, so that a line before the range
//! has its own look-back), and the merge stage skips a line it has already applied. Lines the
//! line stage examines are counted by the merge stage (`Candidate::counted` is false), once.

use std::io::{ErrorKind, Read};
use std::sync::Arc;

use memchr::memmem::Finder;

use crate::extract::{
    Continuation, Extracted, Extractors, Outcome, continuation, extract, is_frame,
    may_continue_record, shape_key,
};
use crate::model::{ScanStats, excerpt};
use crate::prefilter::Prefilter;
use crate::time::{RawTime, parse_prefix};

/// Bytes per read, and per pass of the prefilter and the line counter: small enough that the
/// bytes a read just copied are still in the core's cache (L2) when they are scanned.
pub(crate) const READ_CHUNK: usize = 256 << 10;
/// Initial buffer size (grows to [`buffer_cap`]; a read buffer holds about 512 KiB unless a line
/// is longer).
pub(crate) const INITIAL_BUF: usize = 64 << 10;
/// A line of this many bytes or more (before its newline) is overlong: only its first MiB is
/// examined, however the input is read.
pub(crate) const MAX_LINE: usize = 1 << 20;
/// The look-back sees at most this many bytes before a line (cut at a line start).
pub(crate) const HISTORY: usize = 16 << 10;
/// A continuation line merges into a failure at most this many lines before it.
pub(crate) const MERGE_WINDOW: u64 = 40;

/// The most the read buffer grows to (a focused scan keeps twice the history).
pub(crate) const fn buffer_cap() -> usize {
    2 * HISTORY + MAX_LINE + READ_CHUNK
}

/// A candidate line that is not dismissed (a focused scan also emits dismissed and garbled
/// ones, for the merge stage's count): what the merge stage needs to know about it.
#[derive(Debug)]
pub(crate) struct Candidate {
    /// Line number within the range (1-based; a focused scan's window may reach lines before
    /// the range, numbered 0 and less).
    pub line_no: i64,
    /// Whether the line stage counted the line (`candidate_lines`, `dismissed_lines`); a
    /// focused scan leaves that to the merge stage, which sees each line once.
    pub counted: bool,
    /// The extractors dismissed the line (only emitted by a focused scan, for the count).
    pub dismissed: bool,
    /// Year of the last timestamp with a year on a candidate line of the range, this one
    /// included.
    pub year: Option<i16>,
    /// Set when the line has a failure phrase in a shape no extractor knows.
    pub unknown: Option<UnknownLine>,
    /// The failure the line reports, if any.
    pub found: Option<Found>,
}

/// An unknown shape, with its example.
#[derive(Debug)]
pub(crate) struct UnknownLine {
    pub shape: String,
    pub example: String,
}

/// One line's failure and its context.
#[derive(Debug)]
pub(crate) struct Found {
    pub e: Extracted,
    /// The line's own timestamp.
    pub time: Option<RawTime>,
    /// Whether the line may continue the previous event.
    pub continuation: Continuation,
    /// How many lines back (1 = the line right before, at most [`MERGE_WINDOW`]) the closest
    /// stack frame is; only computed for [`Continuation::Exception`] lines.
    pub frame_back: Option<u64>,
    /// How many lines back (at most [`MERGE_WINDOW`]) the closest line with a timestamp is, and
    /// that timestamp; only computed for lines without a timestamp of their own.
    pub stamp_back: Option<(u64, RawTime)>,
    /// Whether every line between that line and this one may continue a log record
    /// ([`may_continue_record`]): then this line may belong to the record it began.
    pub in_record: bool,
    /// The line, bounded.
    pub raw: String,
}

/// The line stage over one or more ranges: the automata, its counts and the last year seen.
pub(crate) struct LineScan {
    prefilter: &'static Prefilter,
    ex: &'static Extractors,
    skip_binary_check: bool,
    /// Bytes, lines, candidate, dismissed, binary and overlong lines (the rest stays 0).
    pub counts: ScanStats,
    /// See [`Candidate::year`].
    pub year: Option<i16>,
    /// A focused scan's literal.
    focus: Option<Arc<Finder<'static>>>,
    /// Focused scan: the range-relative number of the last line examined, and of the last line
    /// the windows so far reach (examined as soon as the bytes that hold it are).
    examined_to: i64,
    forward_to: i64,
    /// Focused scan of a slice: the end of the furthest line examined (windows reach past the
    /// range's end).
    pub reached: usize,
}

/// The first line start at or after `at - HISTORY` in `hay[hist..at]` (`hist` and `at` are line
/// starts): where the look-back of a line starting at `at` begins. The same in every buffer that
/// holds those bytes, so the look-back does not depend on how the input was read.
pub(crate) fn history_start(hay: &[u8], hist: usize, at: usize) -> usize {
    keep_start(hay, hist, at, HISTORY)
}

/// The first line start at or after `at - keep` in `hay[hist..at]`, as [`history_start`].
fn keep_start(hay: &[u8], hist: usize, at: usize, keep: usize) -> usize {
    if at - hist <= keep {
        return hist;
    }
    let from = at - keep;
    // `hay[at - 1]` is a newline (`at` is a line start after `hist`), so this always finds one.
    memchr::memchr(b'\n', &hay[from - 1..at]).map_or(at, |i| from + i)
}

impl LineScan {
    /// A line stage; `focus`: the literal of a focused scan.
    pub fn new(
        prefilter: &'static Prefilter,
        ex: &'static Extractors,
        skip_binary_check: bool,
        focus: Option<Arc<Finder<'static>>>,
    ) -> LineScan {
        LineScan {
            prefilter,
            ex,
            skip_binary_check,
            counts: ScanStats::default(),
            year: None,
            focus,
            examined_to: i64::MIN,
            forward_to: i64::MIN,
            reached: 0,
        }
    }

    /// Whether this is a focused scan.
    pub fn focused(&self) -> bool {
        self.focus.is_some()
    }

    /// How many bytes before a line the buffer keeps (what a range's look-back may read).
    pub fn keep(&self) -> usize {
        if self.focused() { 2 * HISTORY } else { HISTORY }
    }

    /// A new range: no line of it examined yet.
    fn start_range(&mut self) {
        self.examined_to = i64::MIN;
        self.forward_to = i64::MIN;
        self.reached = 0;
    }

    /// Reads `reader` to its end through `buf`, whose first `prefilled` bytes are look-back
    /// history (a whole number of lines, ending at a newline, at most [`HISTORY`] bytes; a
    /// focused scan reads only whole inputs, from their start).
    /// Candidates go to `emit` in input order. On a read error every byte read before it is
    /// scanned (its last line as if the input ended there), then the error is returned.
    pub fn scan_reader<R: Read>(
        &mut self,
        mut reader: R,
        buf: &mut Vec<u8>,
        prefilled: usize,
        emit: &mut dyn FnMut(Candidate),
    ) -> std::io::Result<()> {
        let cap = buffer_cap();
        if buf.len() < INITIAL_BUF {
            buf.resize(INITIAL_BUF, 0);
        }
        let mut filled = prefilled;
        let mut pos = prefilled; // first unprocessed byte, a line start
        let mut hist = 0usize; // first byte kept for the look-back, a line start
        let mut eof = false;
        let mut skipping = false; // inside the rest of an overlong line
        let mut newlines: u64 = 0; // newlines before `pos`
        let mut open_line = false; // bytes after the last newline were processed
        let mut failed = None; // the read error that ended the input
        let keep = self.keep();
        self.start_range();
        loop {
            // Drop what is older than the history window.
            let keep_from = keep_start(buf, hist, pos, keep);
            if keep_from > 0 {
                buf.copy_within(keep_from..filled, 0);
                filled -= keep_from;
                pos -= keep_from;
                hist = 0;
            }
            // At most READ_CHUNK new bytes per round, scanned while they are in cache.
            let target = filled + READ_CHUNK;
            while !eof && filled < target {
                if filled == buf.len() {
                    if buf.len() >= cap {
                        break;
                    }
                    let grown = (buf.len() * 2).min(cap);
                    buf.resize(grown, 0);
                }
                let lim = target.min(buf.len());
                match reader.read(&mut buf[filled..lim]) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        filled += n;
                        self.counts.bytes += n as u64;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    // The bytes before the error are scanned first, to the last one (a
                    // truncated gzip's last decompressed lines), as at the end of input.
                    Err(e) => {
                        failed = Some(e);
                        eof = true;
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
            // Only the first line can be longer than a read (the others are in this round's
            // bytes); it is overlong when its first MAX_LINE bytes hold no newline and more
            // bytes follow (the same rule as `scan_slice`).
            let first_nl = memchr::memchr(b'\n', &buf[pos..filled.min(pos + MAX_LINE)]);
            if first_nl.is_none() && filled - pos > MAX_LINE {
                self.counts.overlong_lines += 1;
                self.process(
                    &buf[..pos + MAX_LINE],
                    pos + MAX_LINE,
                    hist,
                    pos,
                    newlines,
                    emit,
                );
                pos += MAX_LINE;
                hist = pos;
                skipping = true;
                open_line = true;
                continue;
            }
            let end = if eof {
                filled
            } else if first_nl.is_some() {
                memchr::memrchr(b'\n', &buf[pos..filled]).map_or(pos, |i| pos + i + 1)
            } else {
                pos // the first line is unfinished: read more
            };
            if end > pos {
                newlines += self.process(&buf[..end], end, hist, pos, newlines, emit);
                open_line = buf[end - 1] != b'\n';
                pos = end;
            }
            if eof && pos >= filled {
                break;
            }
        }
        self.counts.lines += newlines + u64::from(open_line);
        failed.map_or(Ok(()), Err)
    }

    /// Scans bytes already in memory without copying them (see `Scanner::scan_slice`).
    pub fn scan_slice(&mut self, data: &[u8], emit: &mut dyn FnMut(Candidate)) {
        self.scan_slice_range(data, 0, data.len(), emit);
    }

    /// Scans the lines of `data[start..end]` (`start` a line start, `end` a line start or the
    /// end of `data`) without copying them; the lines before `start` are the look-back history,
    /// as [`scan_reader`](Self::scan_reader) sees them after the same bytes. Line numbers
    /// count from `start`. A focused scan also examines lines after `end` (the windows of the
    /// range's last hits).
    pub fn scan_slice_range(
        &mut self,
        whole: &[u8],
        start: usize,
        end: usize,
        emit: &mut dyn FnMut(Candidate),
    ) {
        let data = &whole[..end.min(whole.len())];
        let len = data.len();
        let mut pos = start.min(len);
        self.counts.bytes += (len - pos) as u64;
        let keep = self.keep();
        self.start_range();
        // What `process` may look at past a chunk: the rest of the input when focused.
        let hay = if self.focused() { whole } else { data };
        let mut hist = keep_start(data, 0, pos, keep);
        let mut newlines: u64 = 0;
        let mut open_line = false;
        while pos < len {
            hist = keep_start(data, hist, pos, keep);
            let first_nl = memchr::memchr(b'\n', &data[pos..len.min(pos + MAX_LINE)]);
            if first_nl.is_none() && len - pos > MAX_LINE {
                // An overlong line: its first MiB only.
                self.counts.overlong_lines += 1;
                self.process(hay, pos + MAX_LINE, hist, pos, newlines, emit);
                match memchr::memchr(b'\n', &data[pos + MAX_LINE..]) {
                    Some(i) => {
                        pos += MAX_LINE + i + 1;
                        newlines += 1;
                        open_line = false;
                    }
                    None => {
                        pos = len;
                        open_line = true;
                    }
                }
                hist = pos;
                continue;
            }
            let want = (pos + READ_CHUNK).min(len);
            let end = if want == len {
                len
            } else {
                match memchr::memrchr(b'\n', &data[pos..want]) {
                    Some(i) => pos + i + 1,
                    // The first line is longer than a chunk (but not overlong).
                    None => first_nl.map_or(len, |i| pos + i + 1),
                }
            };
            newlines += self.process(hay, end, hist, pos, newlines, emit);
            open_line = data[end - 1] != b'\n';
            pos = end;
        }
        self.counts.lines += newlines + u64::from(open_line);
    }

    /// Scans the lines of `hay[a..b]` (which ends at a newline or at the end of input);
    /// `hay[hist..a]` is history for the look-back, and a focused scan's windows may examine
    /// lines of `hay[b..]`. Returns the number of newlines in `hay[a..b]`.
    ///
    /// Each byte is read twice: by the prefilter (by the focused scan's literal search), and by
    /// [`tally`], which counts newlines (for line numbers) and checks for NUL bytes in the same
    /// pass; only a region with a NUL is examined again, once, for the binary lines.
    fn process(
        &mut self,
        hay: &[u8],
        b: usize,
        hist: usize,
        a: usize,
        newlines_before: u64,
        emit: &mut dyn FnMut(Candidate),
    ) -> u64 {
        if let Some(focus) = self.focus.clone() {
            return self.process_focused(&focus, hay, b, hist, a, newlines_before, emit);
        }
        let hay = &hay[..b];
        let mut at = a;
        let mut cursor = a;
        let mut nl = 0u64;
        let mut clean = true;
        while at < b {
            let Some((ms, me)) = self.prefilter.find(hay, at..b) else {
                break;
            };
            let ls = memchr::memrchr(b'\n', &hay[at..ms]).map_or(at, |i| at + i + 1);
            let le = memchr::memchr(b'\n', &hay[me..b]).map_or(b, |i| me + i);
            let t = tally(&hay[cursor..ls]);
            nl += t.newlines;
            clean &= t.clean;
            cursor = ls;
            self.counts.candidate_lines += 1;
            self.handle_line(hay, hist, ls, le, line_number(newlines_before + nl), emit);
            at = le + 1;
        }
        let t = tally(&hay[cursor.min(b)..b]);
        if !(self.skip_binary_check || clean && t.clean) {
            self.count_garbled(hay, a, b);
        }
        nl + t.newlines
    }

    /// [`LineScan::process`] of a focused scan: the literal's hits instead of the prefilter's,
    /// and the windows around them.
    #[allow(clippy::too_many_arguments)]
    fn process_focused(
        &mut self,
        focus: &Finder<'_>,
        hay: &[u8],
        b: usize,
        hist: usize,
        a: usize,
        newlines_before: u64,
        emit: &mut dyn FnMut(Candidate),
    ) -> u64 {
        let first = line_number(newlines_before);
        // A window that earlier bytes could not hold goes on here.
        if self.forward_to > self.examined_to && self.examined_to < first {
            let last = self.forward_to;
            self.examine(hay, hist, a, first, last, first, emit);
        }
        let mut from = a;
        let mut cursor = a;
        let mut nl = 0u64;
        let mut clean = true;
        while from < b {
            let Some(i) = focus.find(&hay[from..b]) else {
                break;
            };
            let hit = from + i;
            let ls = memchr::memrchr(b'\n', &hay[cursor..hit]).map_or(cursor, |j| cursor + j + 1);
            let t = tally(&hay[cursor..ls]);
            nl += t.newlines;
            clean &= t.clean;
            cursor = ls;
            self.window(hay, hist, ls, line_number(newlines_before + nl), emit);
            from = memchr::memchr(b'\n', &hay[hit..b]).map_or(b, |j| hit + j + 1);
        }
        let t = tally(&hay[cursor.min(b)..b]);
        if !(self.skip_binary_check || clean && t.clean) {
            self.count_garbled(hay, a, b);
        }
        nl + t.newlines
    }

    /// Examines the window of the line that starts at `ls` (number `line`) and names the focused
    /// scan's target: the lines a multi-line event that holds it can span. A line with a
    /// timestamp cannot continue an event, so the window reaches back (when the line has none)
    /// to the closest line with one, and forward to the line before the next line with one: at
    /// most [`MERGE_WINDOW`] lines each way, and back at most [`HISTORY`] bytes. Lines already
    /// examined are left out.
    fn window(
        &mut self,
        hay: &[u8],
        hist: usize,
        ls: usize,
        line: i64,
        emit: &mut dyn FnMut(Candidate),
    ) {
        let window = MERGE_WINDOW as i64;
        let (mut start, mut start_line) = (ls, line);
        if !stamped(line_at(hay, ls)) {
            let want = line
                .saturating_sub(window)
                .max(self.examined_to.saturating_add(1));
            let bound = history_start(hay, hist, ls);
            while start_line > want && start > bound {
                start =
                    memchr::memrchr(b'\n', &hay[bound..start - 1]).map_or(bound, |j| bound + j + 1);
                start_line -= 1;
                if stamped(line_at(hay, start)) {
                    break;
                }
            }
        }
        let last = line.saturating_add(window);
        self.forward_to = self.forward_to.max(last);
        self.examine(hay, hist, start, start_line, last, line + 1, emit);
    }

    /// Runs the prefilter and the extractors over the lines from the one that starts at `pos`
    /// (number `line`) through line `last`, as far as `hay` holds them, leaving out lines
    /// already examined; an overlong line is examined on its first [`MAX_LINE`] bytes only.
    /// From line `stop_from` on, a line with a timestamp ends the window (it is not examined).
    #[allow(clippy::too_many_arguments)]
    fn examine(
        &mut self,
        hay: &[u8],
        hist: usize,
        mut pos: usize,
        mut line: i64,
        last: i64,
        stop_from: i64,
        emit: &mut dyn FnMut(Candidate),
    ) {
        let next_line =
            |p: usize| memchr::memchr(b'\n', &hay[p..]).map_or(hay.len(), |j| p + j + 1);
        while line <= self.examined_to && pos < hay.len() {
            pos = next_line(pos);
            line += 1;
        }
        // The lines from `run` (number `run_line`) on are scanned together.
        let (mut run, mut run_line) = (pos, line);
        while line <= last && pos < hay.len() {
            let end = next_line(pos);
            let le = if hay[end - 1] == b'\n' { end - 1 } else { end };
            let cut = le.min(pos + MAX_LINE);
            if line >= stop_from && stamped(&hay[pos..cut]) {
                self.forward_to = line - 1;
                break;
            }
            if le - pos >= MAX_LINE {
                self.scan_lines(hay, hist, run, pos, run_line, emit);
                if self.prefilter.find(&hay[..cut], pos..cut).is_some() {
                    self.handle_line(hay, hist, pos, cut, line, emit);
                }
                (run, run_line) = (end, line + 1);
            }
            self.examined_to = line;
            self.reached = self.reached.max(end);
            pos = end;
            line += 1;
        }
        self.scan_lines(hay, hist, run, pos, run_line, emit);
    }

    /// Runs the prefilter over the whole lines of `hay[p..q]` (the first numbered `line`) and
    /// hands each candidate line to the extractors.
    fn scan_lines(
        &mut self,
        hay: &[u8],
        hist: usize,
        p: usize,
        q: usize,
        line: i64,
        emit: &mut dyn FnMut(Candidate),
    ) {
        let (mut at, mut cursor, mut n) = (p, p, line);
        while at < q {
            let Some((ms, me)) = self.prefilter.find(hay, at..q) else {
                break;
            };
            let ls = memchr::memrchr(b'\n', &hay[at..ms]).map_or(at, |i| at + i + 1);
            let le = memchr::memchr(b'\n', &hay[me..q]).map_or(q, |i| me + i);
            let skipped = memchr::memchr_iter(b'\n', &hay[cursor..ls]).count();
            n = n.saturating_add(i64::try_from(skipped).unwrap_or(i64::MAX));
            cursor = ls;
            self.handle_line(hay, hist, ls, le, n, emit);
            at = le + 1;
        }
    }

    /// Counts the lines of `hay[a..b]` that hold a NUL byte (binary lines). Linear in the
    /// region: after a NUL the search goes on from the next line, so a line of NULs costs one
    /// pass over it.
    fn count_garbled(&mut self, hay: &[u8], a: usize, b: usize) {
        let region = &hay[a..b];
        let mut at = 0;
        while let Some(i) = memchr::memchr(0, &region[at..]) {
            self.counts.binary_lines += 1;
            match memchr::memchr(b'\n', &region[at + i..]) {
                Some(j) => at += i + j + 1,
                None => break,
            }
        }
    }

    fn handle_line(
        &mut self,
        hay: &[u8],
        hist: usize,
        ls: usize,
        le: usize,
        line_no: i64,
        emit: &mut dyn FnMut(Candidate),
    ) {
        let focused = self.focused();
        let mut line = &hay[ls..le];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        // What a focused scan emits for a line that yields no candidate, for the count.
        let bare = |dismissed| Candidate {
            line_no,
            counted: false,
            dismissed,
            year: None,
            unknown: None,
            found: None,
        };
        // A NUL byte makes the line binary; any other byte is text, whatever its encoding: the
        // extractors read bytes, so a Latin-1 or broken UTF-8 byte hides no failure.
        if memchr::memchr(0, line).is_some() {
            if self.skip_binary_check {
                self.counts.binary_lines += 1;
            }
            if focused {
                emit(bare(false));
            }
            return;
        }
        let prefix = parse_prefix(line);
        match prefix.time.map(|t| t.year) {
            Some(Some(y)) => self.year = Some(y),
            // A focused scan has not seen the failure lines before this one, whose year the
            // full scan gives a yearless timestamp: the closest line with a year stands in.
            Some(None) if focused => {
                let before = &hay[history_start(hay, hist, ls)..ls];
                if let Some((_, y)) =
                    nearest_back(before, |l| parse_prefix(l).time.and_then(|t| t.year))
                {
                    self.year = Some(y);
                }
            }
            _ => {}
        }
        let (unknown, e) = match extract(line, prefix.msg_start, self.ex) {
            Outcome::Dismissed => {
                if focused {
                    emit(Candidate {
                        year: self.year,
                        ..bare(true)
                    });
                } else {
                    self.counts.dismissed_lines += 1;
                }
                return;
            }
            Outcome::Unknown { kind, emit: e } => {
                let shape = UnknownLine {
                    shape: shape_key(kind, &line[prefix.msg_start..]),
                    example: excerpt(line),
                };
                (Some(shape), e)
            }
            Outcome::Failure(e) => (None, Some(e)),
        };
        let found = e.map(|e| {
            let before = &hay[history_start(hay, hist, ls)..ls];
            let continuation = continuation(&line[prefix.msg_start..]);
            let frame_back = if continuation == Continuation::Exception {
                nearest_back(before, |l| is_frame(l).then_some(())).map(|(j, ())| j)
            } else {
                None
            };
            let mut in_record = true;
            let stamp_back = if prefix.time.is_none() {
                nearest_back(before, |l| {
                    let t = parse_prefix(l).time;
                    in_record &= t.is_some() || may_continue_record(l);
                    t
                })
            } else {
                None
            };
            Found {
                e,
                time: prefix.time,
                continuation,
                frame_back,
                stamp_back,
                in_record,
                raw: excerpt(line),
            }
        });
        emit(Candidate {
            line_no,
            counted: !focused,
            dismissed: false,
            year: self.year,
            unknown,
            found,
        });
    }
}

/// The line that starts at `ls` (without its newline), at most [`MAX_LINE`] bytes of it.
fn line_at(hay: &[u8], ls: usize) -> &[u8] {
    let rest = &hay[ls..hay.len().min(ls + MAX_LINE)];
    memchr::memchr(b'\n', rest).map_or(rest, |i| &rest[..i])
}

/// Whether a line starts with a timestamp (it begins a log record, so it continues no event).
fn stamped(line: &[u8]) -> bool {
    parse_prefix(line).time.is_some()
}

/// The number of the line after `newlines` newlines of a range (1-based).
fn line_number(newlines: u64) -> i64 {
    i64::try_from(newlines)
        .unwrap_or(i64::MAX)
        .saturating_add(1)
}

/// What [`tally`] found in a run of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tally {
    newlines: u64,
    /// No NUL byte (so no binary line).
    clean: bool,
}

/// Counts the newlines of `s` and checks that it holds no NUL, in one pass over 64-byte
/// blocks with per-lane counters that the compiler turns into vector instructions.
fn tally(s: &[u8]) -> Tally {
    const W: usize = 64;
    let (blocks, rest) = s.as_chunks::<W>();
    let mut newlines = 0u64;
    let mut low = [u8::MAX; W];
    // A lane counter holds at most 255: sum them every 255 blocks.
    for run in blocks.chunks(255) {
        let mut count = [0u8; W];
        for block in run {
            for ((c, l), &x) in count.iter_mut().zip(low.iter_mut()).zip(block) {
                *c += u8::from(x == b'\n');
                *l = (*l).min(x);
            }
        }
        newlines += count.iter().map(|&c| u64::from(c)).sum::<u64>();
    }
    let mut clean = low.iter().all(|&l| l != 0);
    for &x in rest {
        newlines += u64::from(x == b'\n');
        clean &= x != 0;
    }
    Tally { newlines, clean }
}

/// The closest of the last [`MERGE_WINDOW`] lines of `before` (which ends with a newline) for
/// which `f` gives a value: how many lines back it is (1 = the last line) and the value.
fn nearest_back<T>(before: &[u8], mut f: impl FnMut(&[u8]) -> Option<T>) -> Option<(u64, T)> {
    let mut end = before.len();
    for back in 1..=MERGE_WINDOW {
        if end == 0 {
            return None;
        }
        let body = &before[..end - 1]; // drop the newline that ends this line
        let start = memchr::memrchr(b'\n', body).map_or(0, |i| i + 1);
        if let Some(x) = f(&body[start..]) {
            return Some((back, x));
        }
        end = start;
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use proptest::prelude::*;

    fn naive(s: &[u8]) -> Tally {
        Tally {
            newlines: s.iter().filter(|&&x| x == b'\n').count() as u64,
            clean: s.iter().all(|&x| x != 0),
        }
    }

    #[test]
    fn tally_counts_past_the_lane_counters() {
        // 300 blocks of newlines: each lane counter would overflow without the periodic sum.
        let s = vec![b'\n'; 64 * 300 + 17];
        assert_eq!(tally(&s), naive(&s));
        let mut s = b"plain ascii\n".repeat(5000);
        assert_eq!(tally(&s), naive(&s));
        s[40_001] = 0;
        assert_eq!(tally(&s), naive(&s));
        s[40_001] = 0xC3;
        assert_eq!(tally(&s), naive(&s));
    }

    proptest! {
        #[test]
        fn tally_is_a_newline_count_and_a_nul_check(
            s in proptest::collection::vec(
                prop_oneof![
                    8 => Just(b'\n'),
                    1 => Just(0u8),
                    1 => Just(0x80u8),
                    1 => Just(0xFFu8),
                    3000 => 1u8..0x80,
                ],
                0..1500,
            ),
        ) {
            prop_assert_eq!(tally(&s), naive(&s));
        }
    }
}
