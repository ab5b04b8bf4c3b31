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
            // Only the first line can be longer than a read (the others are in this round's
            // bytes); it is overlong when its first MAX_LINE bytes hold no newline and more
            // bytes follow (the same rule as `scan_slice`).
            let first_nl = memchr::memchr(b'\n', &buf[pos..filled.min(pos + MAX_LINE)]);
            if first_nl.is_none() && filled - pos > MAX_LINE {
                self.counts.overlong_lines += 1;
                self.process(&buf[..pos + MAX_LINE], hist, pos, newlines, emit);
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
                newlines += self.process(&buf[..end], hist, pos, newlines, emit);
                open_line = buf[end - 1] != b'\n';
                pos = end;
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
        self.scan_slice_range(data, 0, data.len(), emit);
    }

    /// Scans the lines of `data[start..end]` (`start` a line start, `end` a line start or the
    /// end of `data`) without copying them; the lines before `start` are the look-back history,
    /// as [`scan_reader`](Self::scan_reader) sees them after the same bytes. Line numbers
    /// count from `start`.
    pub fn scan_slice_range(
        &mut self,
        data: &[u8],
        start: usize,
        end: usize,
        emit: &mut dyn FnMut(Candidate),
    ) {
        let data = &data[..end.min(data.len())];
        let len = data.len();
        let mut pos = start.min(len);
        self.counts.bytes += (len - pos) as u64;
        let mut hist = history_start(data, 0, pos);
        let mut newlines: u64 = 0;
        let mut open_line = false;
        while pos < len {
            hist = history_start(data, hist, pos);
            let first_nl = memchr::memchr(b'\n', &data[pos..len.min(pos + MAX_LINE)]);
            if first_nl.is_none() && len - pos > MAX_LINE {
                // An overlong line: its first MiB only.
                self.counts.overlong_lines += 1;
                self.process(&data[..pos + MAX_LINE], hist, pos, newlines, emit);
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
            newlines += self.process(&data[..end], hist, pos, newlines, emit);
            open_line = data[end - 1] != b'\n';
            pos = end;
        }
        self.counts.lines += newlines + u64::from(open_line);
    }

    /// Scans the lines of `hay[a..]` (which ends at a newline or at the end of input);
    /// `hay[hist..a]` is history for the look-back. Returns the number of newlines in `hay[a..]`.
    ///
    /// Each byte is read twice: by the prefilter, and by [`tally`], which counts newlines (for
    /// line numbers) and checks for NUL and non-ASCII bytes in the same pass; only a region
    /// with such bytes is examined again, line by line, for garbled lines.
    fn process(
        &mut self,
        hay: &[u8],
        hist: usize,
        a: usize,
        newlines_before: u64,
        emit: &mut dyn FnMut(Candidate),
    ) -> u64 {
        let b = hay.len();
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
            self.handle_line(hay, hist, ls, le, newlines_before + nl + 1, emit);
            at = le + 1;
        }
        let t = tally(&hay[cursor.min(b)..b]);
        if !(self.skip_binary_check || clean && t.clean) {
            self.count_garbled(hay, a, b);
        }
        nl + t.newlines
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

/// What [`tally`] found in a run of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tally {
    newlines: u64,
    /// No NUL and no byte above 0x7F (so no garbled line).
    clean: bool,
}

/// Counts the newlines of `s` and checks that it holds no NUL and only ASCII, in one pass over
/// 64-byte blocks with per-lane counters that the compiler turns into vector instructions.
fn tally(s: &[u8]) -> Tally {
    const W: usize = 64;
    let (blocks, rest) = s.as_chunks::<W>();
    let mut newlines = 0u64;
    let mut low = [u8::MAX; W];
    let mut any = [0u8; W];
    // A lane counter holds at most 255: sum them every 255 blocks.
    for run in blocks.chunks(255) {
        let mut count = [0u8; W];
        for block in run {
            for (((c, l), o), &x) in count
                .iter_mut()
                .zip(low.iter_mut())
                .zip(any.iter_mut())
                .zip(block)
            {
                *c += u8::from(x == b'\n');
                *l = (*l).min(x);
                *o |= x;
            }
        }
        newlines += count.iter().map(|&c| u64::from(c)).sum::<u64>();
    }
    let mut clean = low.iter().all(|&l| l != 0) && any.iter().all(|&o| o < 0x80);
    for &x in rest {
        newlines += u64::from(x == b'\n');
        clean &= x != 0 && x < 0x80;
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
            clean: s.iter().all(|&x| x != 0 && x < 0x80),
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
        fn tally_is_a_newline_count_and_a_nul_or_non_ascii_check(
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
