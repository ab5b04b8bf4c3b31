//! Scans a regular file on several threads with the same failures, order and counts as the
//! sequential scan.
//!
//! See [`Scanner::scan_parallel`]. The input is cut at line starts into segments of about
//! [`ParallelOptions::segment_bytes`]; thread `w` of `N` scans segments `w`, `w + N`, … through
//! the line stage, reading each with [`ReadAt::read_at`] (positional reads, no shared file
//! offset, no memory map) into its own bounded buffer, after the up to 16 KiB of lines before
//! the segment that the look-back may need. The calling thread applies the segments' candidates
//! through the one merge stage in file order, so multi-line events, inferred years, line numbers
//! and unknown-shape examples come out as if one thread had read the file. Each thread has at
//! most one finished segment waiting, so memory is bounded by the number of threads, not by the
//! input. [`Scanner::scan_parallel_slice`] does the same over bytes already in memory (a
//! memory-mapped file), scanning each segment in place instead of reading it;
//! [`Scanner::scan_mapped`] also releases each segment's pages once scanned.

use std::io::Read;
use std::num::NonZeroUsize;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::lines::{Candidate, HISTORY, INITIAL_BUF, LineScan, MAX_LINE};
use crate::mmap::MappedLog;
use crate::model::{ConnFailure, ScanStats};
use crate::scanner::{ScanError, Scanner};

/// How far past a segment's nominal end the next line start is looked for; beyond it (a line
/// of several MiB there) the file is scanned sequentially.
const BOUNDARY_SEARCH: u64 = 4 * MAX_LINE as u64;
/// Bytes per probe read when looking for a line start.
const PROBE: usize = 4 << 10;

/// A source read at explicit offsets, from several threads at once: a regular file
/// (`pread(2)`), or bytes in memory.
pub trait ReadAt: Sync {
    /// Reads into `buf` from `offset`; returns the bytes read, 0 at the end.
    ///
    /// # Errors
    /// The read failed.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

#[cfg(unix)]
impl ReadAt for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let start = usize::try_from(offset).map_or(self.len(), |o| o.min(self.len()));
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// A mapped file read at offsets that drops each probe's pages as soon as it was read: where
/// the page cache holds the file in huge folios, one probe maps a whole 2 MiB folio, so the
/// probes for the segment cuts (one every 4 MiB) would otherwise map half the file before
/// the first segment is scanned.
struct ReleasingProbes<'a>(&'a MappedLog);

impl ReadAt for ReleasingProbes<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let n = ReadAt::read_at(&**self.0, buf, offset)?;
        let start = to_usize(offset);
        self.0.release(start..start.saturating_add(n));
        Ok(n)
    }
}

/// Threads and segment size of [`Scanner::scan_parallel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelOptions {
    /// Scanning threads (the calling thread only merges).
    pub threads: NonZeroUsize,
    /// Nominal segment size; a segment ends at the first line end after it.
    pub segment_bytes: u64,
}

impl ParallelOptions {
    /// `threads` threads, 4 MiB segments.
    pub fn new(threads: NonZeroUsize) -> ParallelOptions {
        ParallelOptions {
            threads,
            segment_bytes: 4 << 20,
        }
    }
}

/// A `Read` over `[pos, end)` of a [`ReadAt`] source. A source that ends early (a file
/// truncated while it is read) ends the range there.
struct RangeReader<'a, S: ?Sized> {
    src: &'a S,
    pos: u64,
    end: u64,
}

impl<S: ReadAt + ?Sized> Read for RangeReader<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let n = self.src.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Fills `buf` from `offset` as far as the source goes; returns the bytes read.
fn read_full<S: ReadAt + ?Sized>(src: &S, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
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

/// The segment starts: 0, then the first line start at or after each nominal cut, and `len`.
/// `None` when a line start is further than [`BOUNDARY_SEARCH`] from a nominal cut.
fn segment_cuts<S: ReadAt + ?Sized>(
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

/// Scans the segment `[start, end)` of the input with a thread's line stage and buffer.
type ScanSegment<'a> = dyn Fn(&mut LineScan, u64, u64, &mut Vec<u8>) -> Segment + Sync + 'a;

/// What one thread found in one segment.
struct Segment {
    candidates: Vec<Candidate>,
    counts: ScanStats,
    year: Option<i16>,
    error: Option<std::io::Error>,
}

/// An offset of a slice (so it fits).
fn to_usize(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

/// Scans `data[start..end]` in place, its look-back being the lines before `start`.
fn slice_segment(lines: &mut LineScan, data: &[u8], start: u64, end: u64) -> Segment {
    let mut candidates = Vec::new();
    lines.scan_slice_range(data, to_usize(start), to_usize(end), &mut |c| {
        candidates.push(c);
    });
    Segment {
        candidates,
        counts: std::mem::take(&mut lines.counts),
        year: lines.year.take(),
        error: None,
    }
}

/// Scans `[start, end)` after loading the look-back history before `start` into `buf`.
fn scan_segment<S: ReadAt + ?Sized>(
    lines: &mut LineScan,
    src: &S,
    start: u64,
    end: u64,
    buf: &mut Vec<u8>,
) -> Segment {
    let mut candidates = Vec::new();
    let error = load_history(src, start, buf)
        .and_then(|prefilled| {
            let reader = RangeReader {
                src,
                pos: start,
                end,
            };
            lines.scan_reader(reader, buf, prefilled, &mut |c| candidates.push(c))
        })
        .err();
    Segment {
        candidates,
        counts: std::mem::take(&mut lines.counts),
        year: lines.year.take(),
        error,
    }
}

/// Puts the lines that start at or after `start - HISTORY` and end before `start` at the front
/// of `buf` (what the sequential scan's buffer holds there); returns their length.
fn load_history<S: ReadAt + ?Sized>(
    src: &S,
    start: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    if buf.len() < INITIAL_BUF {
        buf.resize(INITIAL_BUF, 0);
    }
    let hist = HISTORY as u64;
    if start <= hist {
        // The file's start is a line start.
        let n = start as usize;
        let got = read_full(src, &mut buf[..n], 0)?;
        return Ok(if got == n { n } else { 0 });
    }
    // The line start at or after `start - HISTORY`: after the first newline from the byte
    // before it (the byte before `start` is one).
    let from = start - hist - 1;
    let n = HISTORY + 1;
    let got = read_full(src, &mut buf[..n], from)?;
    if got < n {
        return Ok(0);
    }
    let skip = memchr::memchr(b'\n', &buf[..n]).map_or(n, |i| i + 1);
    buf.copy_within(skip..n, 0);
    Ok(n - skip)
}

impl Scanner {
    /// Scans the first `len` bytes of `src` (a regular file: its length when opened) on
    /// `opts.threads` threads, calling `sink` on this thread with every failure in input order.
    /// Failures, line numbers and counts are those of [`Scanner::scan`] over the same bytes.
    ///
    /// A line of 1 MiB or more is cut at 1 MiB (as `scan` does); a line of more than 4 MiB at
    /// a segment cut makes the whole input go through the sequential scan. Bytes appended after
    /// `len` are not read; a file truncated while it is read ends where the reads end.
    ///
    /// # Errors
    /// A read failed ([`ScanError::Io`]; the failures before it were emitted).
    pub fn scan_parallel<S: ReadAt + ?Sized>(
        &mut self,
        src: &S,
        len: u64,
        opts: ParallelOptions,
        sink: &mut dyn FnMut(ConnFailure),
    ) -> Result<(), ScanError> {
        let sequential = |me: &mut Scanner, sink: &mut dyn FnMut(ConnFailure)| {
            me.scan(
                RangeReader {
                    src,
                    pos: 0,
                    end: len,
                },
                sink,
            )
        };
        // A focused scan's windows reach into the neighbouring segments, which a segment read
        // into a bounded buffer does not hold: read focused scans in one pass.
        let focused = self
            .merge
            .opts
            .target
            .is_some_and(|t| t.literal().is_some());
        if opts.threads.get() == 1 || len <= opts.segment_bytes || focused {
            return sequential(self, sink);
        }
        let Some(cuts) = segment_cuts(src, len, opts.segment_bytes).map_err(ScanError::Io)? else {
            return sequential(self, sink);
        };
        self.run_segments(&cuts, opts.threads, sink, &|lines, start, end, buf| {
            scan_segment(lines, src, start, end, buf)
        })
    }

    /// [`Scanner::scan_parallel`] over bytes already in memory (a memory-mapped file), without
    /// copying them: the same failures, line numbers and counts as [`Scanner::scan`] and
    /// [`Scanner::scan_slice`] over the same bytes.
    ///
    /// # Errors
    /// Only a bug: a scanning thread stopped early ([`ScanError::Worker`]).
    pub fn scan_parallel_slice(
        &mut self,
        data: &[u8],
        opts: ParallelOptions,
        sink: &mut dyn FnMut(ConnFailure),
    ) -> Result<(), ScanError> {
        let cuts = (opts.threads.get() > 1)
            .then(|| slice_cuts(data, opts))
            .flatten();
        let Some(cuts) = cuts else {
            self.scan_slice(data, sink);
            return Ok(());
        };
        self.run_segments(&cuts, opts.threads, sink, &|lines, start, end, _buf| {
            slice_segment(lines, data, start, end)
        })
    }

    /// Scans a mapped file as [`Scanner::scan_parallel_slice`] does (also with one thread: one
    /// scanning thread beside this one), releasing each segment's pages
    /// ([`MappedLog::release`]) once it is scanned, so that the resident set is bounded by the
    /// segments in flight, not by the file.
    ///
    /// A segment that starts after the map stopped being [`intact`](MappedLog::intact) (a
    /// process waits to write or truncate the file) is read with positional reads instead, as
    /// [`Scanner::scan_parallel`] reads it: the map stays valid only until the kernel ends the
    /// lease. The failures are the same unless the file then changes.
    ///
    /// # Errors
    /// A positional read failed ([`ScanError::Io`]); a scanning thread stopped early
    /// ([`ScanError::Worker`], a bug).
    pub fn scan_mapped(
        &mut self,
        map: &MappedLog,
        opts: ParallelOptions,
        sink: &mut dyn FnMut(ConnFailure),
    ) -> Result<(), ScanError> {
        let data: &[u8] = map;
        if !map.intact() {
            return self.scan_parallel(map.file(), data.len() as u64, opts, sink);
        }
        let Some(cuts) = in_memory_cuts(&ReleasingProbes(map), data.len(), opts) else {
            self.scan_slice(data, sink);
            map.release(0..data.len());
            return Ok(());
        };
        self.run_segments(&cuts, opts.threads, sink, &|lines, start, end, buf| {
            if !map.intact() {
                return scan_segment(lines, map.file(), start, end, buf);
            }
            let seg = slice_segment(lines, data, start, end);
            // The segment's look-back read the previous segment's last bytes again, after
            // (or while) the thread that scanned it released them; where the page cache holds
            // the file in huge folios, that one read maps a whole 2 MiB folio back in. So the
            // release covers the look-back too (twice the history for a focused scan), and the
            // lines a focused scan's windows examined past the segment's end; the previous
            // segment's own release covers the rest of it whichever thread ends last.
            let from = to_usize(start).saturating_sub(lines.keep() + 1);
            map.release(from..to_usize(end).max(lines.reached));
            seg
        })
    }

    /// Scans the segments between consecutive `cuts` on up to `threads` threads with `scan`,
    /// applying each segment's candidates on this thread in file order.
    fn run_segments(
        &mut self,
        cuts: &[u64],
        threads: NonZeroUsize,
        sink: &mut dyn FnMut(ConnFailure),
        scan: &ScanSegment<'_>,
    ) -> Result<(), ScanError> {
        self.merge.start_input();
        let segments = cuts.len() - 1;
        let threads = threads.get().min(segments);
        let result = std::thread::scope(|s| {
            let mut rxs: Vec<Receiver<Segment>> = Vec::with_capacity(threads);
            for w in 0..threads {
                let (tx, rx): (SyncSender<Segment>, _) = sync_channel(1);
                rxs.push(rx);
                let mut lines = Scanner::line_stage(&self.merge.opts)?;
                s.spawn(move || {
                    let mut buf = Vec::new();
                    for i in (w..segments).step_by(threads) {
                        let seg = scan(&mut lines, cuts[i], cuts[i + 1], &mut buf);
                        if tx.send(seg).is_err() {
                            return;
                        }
                    }
                });
            }
            let mut base = 0u64;
            for i in 0..segments {
                let seg = rxs[i % threads].recv().map_err(|_| ScanError::Worker)?;
                for c in seg.candidates {
                    self.merge.candidate(c, base, &mut self.stats, sink);
                }
                base += seg.counts.lines;
                self.stats.merge(&seg.counts);
                self.merge.end_range(seg.year);
                if let Some(e) = seg.error {
                    // Dropping the receivers stops the threads at their next segment.
                    return Err(ScanError::Io(e));
                }
            }
            Ok(())
        });
        self.merge.flush(&mut self.stats, sink);
        result
    }
}

/// Segment boundaries of an in-memory log, or `None` when it fits in one segment.
fn slice_cuts(data: &[u8], opts: ParallelOptions) -> Option<Vec<u64>> {
    in_memory_cuts(data, data.len(), opts)
}

/// Segment boundaries of `len` bytes in memory read through `src`, or `None` when they fit in
/// one segment.
fn in_memory_cuts<S: ReadAt + ?Sized>(
    src: &S,
    len: usize,
    opts: ParallelOptions,
) -> Option<Vec<u64>> {
    let len = len as u64;
    if len <= opts.segment_bytes {
        return None;
    }
    // Reading memory cannot fail.
    segment_cuts(src, len, opts.segment_bytes).ok().flatten()
}
