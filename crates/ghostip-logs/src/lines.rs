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

use std::io::{ErrorKind, Read};

use crate::extract::{
    Continuation, Extracted, Extractors, Outcome, continuation, extract, is_frame, shape_key,
};
use crate::model::{ScanStats, excerpt};
use crate::prefilter::Prefilter;
use crate::time::{RawTime, parse_prefix};

/// Bytes per read.
pub(crate) const READ_CHUNK: usize = 1 << 20;
/// Initial buffer size (grows to [`buffer_cap`]).
pub(crate) const INITIAL_BUF: usize = 64 << 10;
/// Lines longer than this are examined on their first MiB only.
pub(crate) const MAX_LINE: usize = 1 << 20;
/// The look-back sees at most this many bytes before a line (cut at a line start).
pub(crate) const HISTORY: usize = 16 << 10;
/// A continuation line merges into a failure at most this many lines before it.
pub(crate) const MERGE_WINDOW: u64 = 40;

/// The most the read buffer grows to.
pub(crate) const fn buffer_cap() -> usize {
    HISTORY + MAX_LINE + READ_CHUNK
}

/// A candidate line that is not dismissed: what the merge stage needs to know about it.
#[derive(Debug)]
pub(crate) struct Candidate {
    /// Line number within the range (1-based).
    pub line_no: u64,
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
    scratch: Vec<usize>,
}

/// The first line start at or after `at - HISTORY` in `hay[hist..at]` (`hist` and `at` are line
/// starts): where the look-back of a line starting at `at` begins. The same in every buffer that
/// holds those bytes, so the look-back does not depend on how the input was read.
pub(crate) fn history_start(hay: &[u8], hist: usize, at: usize) -> usize {
    if at - hist <= HISTORY {
        return hist;
    }
    let from = at - HISTORY;
    // `hay[at - 1]` is a newline (`at` is a line start after `hist`), so this always finds one.
    memchr::memchr(b'\n', &hay[from - 1..at]).map_or(at, |i| from + i)
}

impl LineScan {
    pub fn new(
        prefilter: &'static Prefilter,
        ex: &'static Extractors,
        skip_binary_check: bool,
    ) -> LineScan {
        LineScan {
            prefilter,
            ex,
            skip_binary_check,
            counts: ScanStats::default(),
            year: None,
            scratch: Vec::new(),
        }
    }

    /// Reads `reader` to its end through `buf`, whose first `prefilled` bytes are look-back
    /// history (a whole number of lines, ending at a newline, at most [`HISTORY`] bytes).
    /// Candidates go to `emit` in input order. On a read error the candidates before it were
    /// emitted.
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
        loop {
            // Drop what is older than the history window.
            let keep_from = history_start(buf, hist, pos);
            if keep_from > 0 {
                buf.copy_within(keep_from..filled, 0);
                filled -= keep_from;
                pos -= keep_from;
                hist = 0;
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
                        self.counts.bytes += n as u64;
                        if filled - pos >= READ_CHUNK {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
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
                newlines += self.process(&buf[..end], hist, pos, newlines, emit);
                open_line = buf[end - 1] != b'\n';
                pos = end;
            } else if !eof && filled - pos >= MAX_LINE {
                self.counts.overlong_lines += 1;
                self.process(&buf[..pos + MAX_LINE], hist, pos, newlines, emit);
                pos = filled;
                hist = pos;
                skipping = true;
                open_line = true;
            }
            if eof && pos >= filled {
                break;
            }
        }
        self.counts.lines += newlines + u64::from(open_line);
        Ok(())
    }

    /// Scans bytes already in memory without copying them (see `Scanner::scan_slice`).
    pub fn scan_slice(&mut self, data: &[u8], emit: &mut dyn FnMut(Candidate)) {
        self.counts.bytes += data.len() as u64;
        let mut pos = 0usize;
        let mut hist = 0usize;
        let mut newlines: u64 = 0;
        let mut open_line = false;
        while pos < data.len() {
            hist = history_start(data, hist, pos);
            let want = (pos + READ_CHUNK).min(data.len());
            let end = if want == data.len() {
                want
            } else {
                memchr::memrchr(b'\n', &data[pos..want]).map_or(pos, |i| pos + i + 1)
            };
            if end > pos {
                newlines += self.process(&data[..end], hist, pos, newlines, emit);
                open_line = data[end - 1] != b'\n';
                pos = end;
            } else {
                // No newline within the next MiB: an overlong line.
                self.counts.overlong_lines += 1;
                self.process(&data[..pos + MAX_LINE], hist, pos, newlines, emit);
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
                hist = pos;
            }
        }
        self.counts.lines += newlines + u64::from(open_line);
    }

    /// Scans the lines of `hay[a..]` (which ends at a newline or at the end of input);
    /// `hay[hist..a]` is history for the look-back. Returns the number of newlines in `hay[a..]`.
    fn process(
        &mut self,
        hay: &[u8],
        hist: usize,
        a: usize,
        newlines_before: u64,
        emit: &mut dyn FnMut(Candidate),
    ) -> u64 {
        let b = hay.len();
        if !self.skip_binary_check {
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
            self.counts.candidate_lines += 1;
            self.handle_line(hay, hist, ls, le, newlines_before + nl + 1, emit);
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
        self.counts.binary_lines += self.scratch.len() as u64;
    }

    fn handle_line(
        &mut self,
        hay: &[u8],
        hist: usize,
        ls: usize,
        le: usize,
        line_no: u64,
        emit: &mut dyn FnMut(Candidate),
    ) {
        let mut line = &hay[ls..le];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        if memchr::memchr(0, line).is_some() || std::str::from_utf8(line).is_err() {
            if self.skip_binary_check {
                self.counts.binary_lines += 1;
            }
            return;
        }
        let prefix = parse_prefix(line);
        if let Some(y) = prefix.time.and_then(|t| t.year) {
            self.year = Some(y);
        }
        let (unknown, e) = match extract(line, prefix.msg_start, self.ex) {
            Outcome::Dismissed => {
                self.counts.dismissed_lines += 1;
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
            let stamp_back = if prefix.time.is_none() {
                nearest_back(before, |l| parse_prefix(l).time)
            } else {
                None
            };
            Found {
                e,
                time: prefix.time,
                continuation,
                frame_back,
                stamp_back,
                raw: excerpt(line),
            }
        });
        emit(Candidate {
            line_no,
            year: self.year,
            unknown,
            found,
        });
    }
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
