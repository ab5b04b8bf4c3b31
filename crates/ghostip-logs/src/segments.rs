//! Cuts one input into segments that can be scanned independently (by the caller, on as many
//! threads as it likes) and merged in input order into the sequential scan's result.
//!
//! The input is cut at line starts ([`segment_cuts`]) into segments of about a nominal size.
//! A segment is scanned from bytes in memory by a [`SegmentScanner`] (a line stage of its own,
//! [`Scanner::segment_scanner`]): the caller gives it the segment's bytes preceded by the up to
//! [`LOOK_BACK`] bytes before it ([`look_back_start`]), which the look-back (stack frames,
//! timestamps of continuation lines) may read. The [`ScannedSegment`]s then go, in input
//! order, through the scanner's one merge stage ([`Scanner::apply_segment`] between
//! [`Scanner::begin_segments`] and [`Scanner::end_segments`]), so multi-line events, inferred
//! years, line numbers and unknown-shape examples come out as if one pass had read the input.
//! [`Scanner::scan_segments`] does all of it on the calling thread, over bytes in memory.
//!
//! Nothing here reads a file or starts a thread: the caller reads the bytes (`ghostip
//! explain` reads segments of a file with positional reads on several threads).

use crate::lines::{Candidate, HISTORY, LineScan, MAX_LINE};
use crate::model::{ConnFailure, ScanStats};
use crate::scanner::{ScanError, Scanner};

/// How far past a segment's nominal end the next line start is looked for; beyond it (a line
/// of several MiB there) [`segment_cuts`] gives up and the input is scanned in one pass.
pub const BOUNDARY_SEARCH: u64 = 4 * MAX_LINE as u64;
/// Bytes per probe read when looking for a line start.
const PROBE: usize = 4 << 10;
/// The bytes before a segment's start that its scan may read (the look-back sees at most
/// 16 KiB of whole lines before a line; one more byte tells whether the first of them starts
/// a line).
pub const LOOK_BACK: usize = HISTORY + 1;

/// A source read at explicit offsets (the caller's file, through `pread(2)`, or bytes in
/// memory), from which [`segment_cuts`] reads its probes.
pub trait ReadAt {
    /// Reads into `buf` from `offset`; returns the bytes read, 0 at the end.
    ///
    /// # Errors
    /// The read failed.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let start = usize::try_from(offset).map_or(self.len(), |o| o.min(self.len()));
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// Fills `buf` from `offset` as far as the source goes; returns the bytes read (fewer than
/// `buf.len()` only at the source's end).
///
/// # Errors
/// A read failed (interrupted reads are retried).
pub fn read_full<S: ReadAt + ?Sized>(
    src: &S,
    buf: &mut [u8],
    offset: u64,
) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The segment boundaries of the first `len` bytes of `src` for segments of about `segment`
/// bytes: 0, then the first line start at or after each nominal cut, and `len` (at least two
/// entries; a segment ends at the next one). `None` when a line start is further than
/// [`BOUNDARY_SEARCH`] past a nominal cut: scan such an input in one pass. A source shorter
/// than `len` (a file truncated meanwhile) ends the cuts where it ends.
///
/// # Errors
/// A probe read failed.
pub fn segment_cuts<S: ReadAt + ?Sized>(
    src: &S,
    len: u64,
    segment: u64,
) -> std::io::Result<Option<Vec<u64>>> {
    let mut cuts = vec![0u64];
    let mut probe = vec![0u8; PROBE];
    let mut nominal = segment.max(1);
    while nominal < len {
        // A line starts at `nominal` when the byte before it is a newline.
        let mut at = nominal - 1;
        let cut = loop {
            if at - (nominal - 1) > BOUNDARY_SEARCH {
                return Ok(None);
            }
            let want = usize::try_from(len - at).map_or(PROBE, |l| l.min(PROBE));
            let n = read_full(src, &mut probe[..want], at)?;
            if let Some(i) = memchr::memchr(b'\n', &probe[..n]) {
                break at + i as u64 + 1;
            }
            at += n as u64;
            if n < want || at >= len {
                break len;
            }
        };
        if cut >= len {
            break;
        }
        cuts.push(cut);
        nominal = cut + segment.max(1);
    }
    cuts.push(len);
    Ok(Some(cuts))
}

/// Where the bytes handed to [`SegmentScanner::scan`] for a segment starting at `start` begin:
/// [`LOOK_BACK`] bytes before it, or the input's start.
pub fn look_back_start(start: u64) -> u64 {
    start.saturating_sub(LOOK_BACK as u64)
}

/// The line stage of one thread: scans segments in any order, independently.
pub struct SegmentScanner {
    lines: LineScan,
}

impl std::fmt::Debug for SegmentScanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentScanner").finish_non_exhaustive()
    }
}

/// What one segment holds, for the merge stage ([`Scanner::apply_segment`]).
pub struct ScannedSegment {
    candidates: Vec<Candidate>,
    counts: ScanStats,
    year: Option<i16>,
}

impl std::fmt::Debug for ScannedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScannedSegment")
            .field("candidates", &self.candidates.len())
            .field("bytes", &self.counts.bytes)
            .field("lines", &self.counts.lines)
            .finish_non_exhaustive()
    }
}

impl ScannedSegment {
    /// The segment's bytes (those after its look-back).
    pub fn bytes(&self) -> u64 {
        self.counts.bytes
    }
}

impl SegmentScanner {
    /// Scans the segment `bytes[at..]`, `bytes[..at]` being the bytes before it: all of them
    /// from [`look_back_start`] of the segment's start, or fewer when the input has fewer (then
    /// `bytes` starts at the input's start, or `at` is 0 and so does the segment). `at` must be
    /// a line start (the byte before it a newline), as every cut of [`segment_cuts`] is. The
    /// segment ends where `bytes` ends: a last line without its newline is scanned as the end of
    /// the input.
    pub fn scan(&mut self, bytes: &[u8], at: usize) -> ScannedSegment {
        let mut candidates = Vec::new();
        let at = at.min(bytes.len());
        self.lines
            .scan_slice_range(bytes, at, bytes.len(), &mut |c| candidates.push(c));
        ScannedSegment {
            candidates,
            counts: std::mem::take(&mut self.lines.counts),
            year: self.lines.year.take(),
        }
    }
}

impl Scanner {
    /// Whether this scan's input may be cut into segments: not for a focused scan (an IPv4
    /// `target`), whose windows reach into the neighbouring segments; scan that in one pass.
    pub fn segmentable(&self) -> bool {
        self.merge.opts.target.is_none_or(|t| t.literal().is_none())
    }

    /// A line stage with this scanner's options, for one scanning thread.
    ///
    /// # Errors
    /// Only a bug ([`ScanError::Build`]).
    pub fn segment_scanner(&self) -> Result<SegmentScanner, ScanError> {
        Ok(SegmentScanner {
            lines: Scanner::line_stage(&self.merge.opts)?,
        })
    }

    /// A new input, to be read in segments: its lines count from 1.
    pub fn begin_segments(&mut self) {
        self.merge.start_input();
        self.segment_base = 0;
    }

    /// Applies the input's next segment (segments in input order), calling `sink` with the
    /// failures it completes.
    pub fn apply_segment(&mut self, seg: ScannedSegment, sink: &mut dyn FnMut(ConnFailure)) {
        let base = self.segment_base;
        for c in seg.candidates {
            self.merge.candidate(c, base, &mut self.stats, sink);
        }
        self.segment_base += seg.counts.lines;
        self.stats.merge(&seg.counts);
        self.merge.end_range(seg.year);
    }

    /// The end of the input (also after an error or a short read): the pending event goes to
    /// `sink`.
    pub fn end_segments(&mut self, sink: &mut dyn FnMut(ConnFailure)) {
        self.merge.flush(&mut self.stats, sink);
    }

    /// Scans `data` cut at `cuts` (from [`segment_cuts`]), one segment after the other on this
    /// thread: the same failures, line numbers and counts as [`Scanner::scan_slice`] (which a
    /// scan that is not [`segmentable`](Scanner::segmentable) runs instead).
    ///
    /// # Errors
    /// Only a bug ([`ScanError::Build`]).
    pub fn scan_segments(
        &mut self,
        data: &[u8],
        cuts: &[u64],
        sink: &mut dyn FnMut(ConnFailure),
    ) -> Result<(), ScanError> {
        if !self.segmentable() {
            self.scan_slice(data, sink);
            return Ok(());
        }
        let mut stage = self.segment_scanner()?;
        self.begin_segments();
        let len = data.len() as u64;
        for w in cuts.windows(2) {
            let (start, end) = (w[0].min(len), w[1].min(len));
            let from = look_back_start(start);
            let bytes = &data[to_usize(from)..to_usize(end)];
            let seg = stage.scan(bytes, to_usize(start - from));
            self.apply_segment(seg, sink);
        }
        self.end_segments(sink);
        Ok(())
    }
}

/// An offset of a slice (so it fits).
fn to_usize(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn cuts_fall_on_line_starts() {
        let data = b"aaaa\nbb\ncccccc\nd\n";
        let cuts = segment_cuts(&data[..], data.len() as u64, 3)
            .unwrap()
            .unwrap();
        assert_eq!(cuts, vec![0, 5, 8, 15, 17]);
        for c in &cuts[1..cuts.len() - 1] {
            assert_eq!(data[*c as usize - 1], b'\n');
        }
        // One segment, and a source shorter than announced.
        assert_eq!(
            segment_cuts(&data[..], 17, 100).unwrap().unwrap(),
            vec![0, 17]
        );
        assert_eq!(
            segment_cuts(&data[..6], 17, 3).unwrap().unwrap(),
            vec![0, 5, 17]
        );
    }

    #[test]
    fn a_line_longer_than_the_search_gives_no_cuts() {
        let mut data = vec![b'x'; BOUNDARY_SEARCH as usize + 10_000];
        data.push(b'\n');
        assert!(
            segment_cuts(&data[..], data.len() as u64, 10)
                .unwrap()
                .is_none()
        );
    }
}
