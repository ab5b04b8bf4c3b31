//! Reads a regular log file for `ghostip explain` with plain positional reads, in segments on
//! several threads, and merges them in file order through the scanner (`ghostip_logs` cuts and
//! scans the bytes; this module does the IO and runs the threads).
//!
//! No file is memory-mapped: a map of a file that another process truncates (logrotate's
//! `copytruncate`) raises SIGBUS on the next page read past the new end, which ends the
//! process. A read of a truncated file is short instead: the scan ends there, and
//! [`FileScan::shrank`] tells the caller to say so.
//!
//! Each scanning thread reads its segments ([`SEGMENT_BYTES`] nominal, cut at line starts;
//! thread `w` of `N` takes segments `w`, `w + N`, …) into one buffer it reuses, preceded by the
//! up to 16 KiB of lines before the segment that the scanner's look-back may read, and hands
//! what it found to the calling thread over a channel that holds one segment: memory is about
//! `N` × (segment + look-back), whatever the file's size. The calling thread applies the
//! segments in file order, so the failures, line numbers and counts are those of one thread
//! reading the file front to back.

use std::num::NonZeroUsize;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use ghostip_logs::{
    ConnFailure, ReadAt, ScanError, ScannedSegment, Scanner, look_back_start, read_full,
    segment_cuts,
};

/// Nominal segment size: large enough that the per-segment work (a probe for the cut, a
/// channel message, the look-back read twice) is noise, small enough that a thread's buffer
/// stays a few MiB.
pub const SEGMENT_BYTES: u64 = 4 << 20;

/// A source read at explicit offsets from several threads at once: a regular file
/// (`pread(2)`), or a test's stand-in.
pub trait Positional: Sync {
    /// Reads into `buf` from `offset`; returns the bytes read, 0 at the end.
    ///
    /// # Errors
    /// The read failed.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

#[cfg(unix)]
impl Positional for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

/// A [`Positional`] source as the scanner's [`ReadAt`].
struct Src<'a, P: ?Sized>(&'a P);

impl<P: Positional + ?Sized> ReadAt for Src<'_, P> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
}

/// A `Read` over `[pos, end)` of a [`Positional`] source; a source that ends early (a file
/// truncated while it is read) ends the range there.
struct RangeReader<'a, P: ?Sized> {
    src: &'a P,
    pos: u64,
    end: u64,
}

impl<P: Positional + ?Sized> std::io::Read for RangeReader<'_, P> {
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

/// How a file scan went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileScan {
    /// The file's length when it was opened (what the scan meant to read).
    pub len: u64,
    /// The bytes scanned: fewer than `len` when the file shrank under the reader.
    pub read: u64,
}

impl FileScan {
    /// Whether the file ended before `len` (it was truncated while it was read).
    pub fn shrank(&self) -> bool {
        self.read < self.len
    }
}

/// What a scanning thread sends for one segment: its scan, and whether its read came back
/// short (the file ends in it); or the read's error.
type SegmentResult = std::io::Result<(ScannedSegment, bool)>;

/// Scans the first `len` bytes of `src` (a regular file: its length when opened) on `threads`
/// threads, calling `sink` on this thread with every failure in file order: the failures,
/// line numbers and counts of one pass. One thread, a file of one segment, a focused scan (its
/// windows cross segments) or a line too long to cut at are read in one pass on this thread.
/// A file that shrinks under the reader ends where the reads end (the segments after the
/// first short one are not applied).
///
/// # Errors
/// A read failed ([`ScanError::Io`]; the failures in the segments before it were emitted).
pub fn scan_positional<P: Positional + ?Sized>(
    scanner: &mut Scanner,
    src: &P,
    len: u64,
    threads: NonZeroUsize,
    segment_bytes: u64,
    sink: &mut dyn FnMut(ConnFailure),
) -> Result<FileScan, ScanError> {
    let before = scanner.stats().bytes;
    let read = |s: &Scanner| FileScan {
        len,
        read: s.stats().bytes - before,
    };
    let cuts = if threads.get() > 1 && len > segment_bytes && scanner.segmentable() {
        segment_cuts(&Src(src), len, segment_bytes).map_err(ScanError::Io)?
    } else {
        None
    };
    let Some(cuts) = cuts else {
        let reader = RangeReader {
            src,
            pos: 0,
            end: len,
        };
        scanner.scan(reader, sink)?;
        return Ok(read(scanner));
    };
    let segments = cuts.len() - 1;
    let threads = threads.get().min(segments);
    let mut stages = Vec::with_capacity(threads);
    for _ in 0..threads {
        stages.push(scanner.segment_scanner()?);
    }
    scanner.begin_segments();
    let cuts = &cuts[..];
    let result = std::thread::scope(|s| {
        let mut rxs: Vec<Receiver<SegmentResult>> = Vec::with_capacity(threads);
        for (w, mut stage) in stages.into_iter().enumerate() {
            let (tx, rx): (SyncSender<SegmentResult>, _) = sync_channel(1);
            rxs.push(rx);
            s.spawn(move || {
                let mut buf = Vec::new();
                for i in (w..segments).step_by(threads) {
                    let msg = read_segment(src, cuts[i], cuts[i + 1], &mut buf)
                        .map(|(at, n, short)| (stage.scan(&buf[..n], at), short));
                    let failed = msg.is_err();
                    // A closed channel: the merge stopped (an error, a short read).
                    if tx.send(msg).is_err() || failed {
                        return;
                    }
                }
            });
        }
        for i in 0..segments {
            let Ok(msg) = rxs[i % threads].recv() else {
                return Err(ScanError::Io(std::io::Error::other(
                    "a scanning thread stopped early",
                )));
            };
            let (seg, short) = msg.map_err(ScanError::Io)?;
            scanner.apply_segment(seg, sink);
            if short {
                // The file ends in this segment: what later segments read is not this file.
                break;
            }
        }
        // Dropping the receivers stops the threads at their next segment.
        Ok(())
    });
    scanner.end_segments(sink);
    result.map(|()| read(scanner))
}

/// Reads the segment `[start, end)` of `src` into `buf`, after the look-back bytes before it;
/// returns where the segment starts in `buf`, the bytes read, and whether the read came back
/// short. `buf` only grows (no zeroing of a reused buffer).
fn read_segment<P: Positional + ?Sized>(
    src: &P,
    start: u64,
    end: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<(usize, usize, bool)> {
    let from = look_back_start(start);
    let want = usize::try_from(end - from)
        .map_err(|_| std::io::Error::other("a segment larger than the address space"))?;
    if buf.len() < want {
        buf.resize(want, 0);
    }
    let n = read_full(&Src(src), &mut buf[..want], from)?;
    let at = usize::try_from(start - from).unwrap_or(usize::MAX);
    Ok((at, n, n < want))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use ghostip_logs::{ScanOptions, ScanStats};
    use ghostip_testkit::logs::LogGenerator;

    use super::*;

    fn opts() -> ScanOptions {
        ScanOptions {
            fallback_year: Some(2020),
            ..ScanOptions::default()
        }
    }

    /// A generated log of about `bytes` bytes, with multi-line Java events spanning cuts.
    fn generated(bytes: usize, seed: u64) -> Vec<u8> {
        LogGenerator::interleaved(seed, 0.05, bytes, 3_000, |i| {
            format!(
                    "2024-05-01 15:42:{:02}.123 ERROR [main] c.e.Client - call failed\n\
                     java.net.SocketException: Connection reset\n\
                     \tat a.b.C.call(C.java:{i})\n\
                     Caused by: java.net.ConnectException: Failed to connect to inventory/10.244.3.{}:8080\n\
                     Mar 19 08:03:{:02} node-1 app[77]: dial tcp 10.44.0.{}:9090: i/o timeout\n",
                    i % 60,
                    i % 250,
                    i % 60,
                    i % 200
            )
            .into_bytes()
        })
    }

    fn one_pass(data: &[u8]) -> (Vec<ConnFailure>, ScanStats) {
        let mut scanner = Scanner::new(opts()).unwrap();
        let mut out = Vec::new();
        scanner.scan(data, &mut |f| out.push(f)).unwrap();
        (out, scanner.into_stats())
    }

    /// Bytes in memory as a positional source.
    struct Mem<'a>(&'a [u8]);

    impl Positional for Mem<'_> {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            ReadAt::read_at(self.0, buf, offset)
        }
    }

    fn threaded<P: Positional + ?Sized>(
        src: &P,
        len: u64,
        threads: usize,
        segment: u64,
    ) -> (Result<FileScan, ScanError>, Vec<ConnFailure>, ScanStats) {
        let mut scanner = Scanner::new(opts()).unwrap();
        let mut out = Vec::new();
        let n = NonZeroUsize::new(threads).unwrap();
        let r = scan_positional(&mut scanner, src, len, n, segment, &mut |f| out.push(f));
        (r, out, scanner.into_stats())
    }

    #[test]
    fn threads_give_the_one_pass_result() {
        let data = generated(2 << 20, 7);
        let (want, want_stats) = one_pass(&data);
        assert!(want.len() > 1000 && want.iter().any(|f| f.end_line_no > f.line_no));
        let len = data.len() as u64;
        for (threads, segment) in [(1, 64 << 10), (2, 64 << 10), (3, 4096), (4, 1 << 20)] {
            let (r, got, stats) = threaded(&Mem(&data), len, threads, segment);
            assert_eq!(r.unwrap(), FileScan { len, read: len });
            assert_eq!(got, want, "threads {threads}, segment {segment}");
            assert_eq!(stats, want_stats, "threads {threads}, segment {segment}");
        }
    }

    /// A file that another process truncates to `to` bytes once `after` reads of more than a
    /// probe's size were made (logrotate's copytruncate under the scan).
    struct TruncatedUnderTheReader {
        file: std::fs::File,
        path: std::path::PathBuf,
        after: usize,
        to: u64,
        reads: AtomicUsize,
        done: AtomicBool,
    }

    impl Positional for TruncatedUnderTheReader {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            let n = Positional::read_at(&self.file, buf, offset)?;
            if buf.len() > 4096
                && self.reads.fetch_add(1, Ordering::SeqCst) + 1 >= self.after
                && !self.done.swap(true, Ordering::SeqCst)
            {
                let w = std::fs::OpenOptions::new().write(true).open(&self.path)?;
                w.set_len(self.to)?;
            }
            Ok(n)
        }
    }

    #[test]
    fn a_file_truncated_under_the_reader_ends_the_scan_with_a_short_read() {
        let data = generated(1 << 20, 3);
        let (want, _) = one_pass(&data);
        let len = data.len() as u64;
        let dir = tempfile::tempdir().unwrap();
        for (threads, to) in [(1, 0), (1, len / 3), (2, 0), (2, len / 3), (3, len / 2)] {
            let path = dir.path().join(format!("app-{threads}-{to}.log"));
            std::fs::write(&path, &data).unwrap();
            let src = TruncatedUnderTheReader {
                file: std::fs::File::open(&path).unwrap(),
                path: path.clone(),
                after: 1,
                to,
                reads: AtomicUsize::new(0),
                done: AtomicBool::new(false),
            };
            let (r, got, stats) = threaded(&src, len, threads, 64 << 10);
            let scan = r.unwrap();
            assert!(src.done.load(Ordering::SeqCst));
            assert!(scan.shrank(), "threads {threads}, to {to}: {scan:?}");
            assert_eq!(scan.read, stats.bytes);
            assert!(scan.read < len);
            // What was found is what the file held: the failures before the cut (the last may
            // be cut short, a multi-line event may end early).
            assert!(got.len() < want.len());
            let whole = got.len().saturating_sub(1);
            assert_eq!(got[..whole], want[..whole], "threads {threads}, to {to}");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), to);
        }
    }

    /// A source whose large reads fail from an offset on.
    struct FailsAt<'a> {
        data: &'a [u8],
        at: u64,
    }

    impl Positional for FailsAt<'_> {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            if buf.len() > 8192 && offset + buf.len() as u64 > self.at {
                return Err(std::io::Error::other("disk on fire"));
            }
            ReadAt::read_at(self.data, buf, offset)
        }
    }

    #[test]
    fn a_read_error_stops_the_scan_after_the_failures_before_it() {
        let data = generated(2 << 20, 5);
        let (want, _) = one_pass(&data);
        let src = FailsAt {
            data: &data,
            at: data.len() as u64 * 3 / 4,
        };
        for threads in [1, 2, 3] {
            let (r, got, _) = threaded(&src, data.len() as u64, threads, 64 << 10);
            assert!(matches!(r, Err(ScanError::Io(_))), "{r:?}");
            assert!(!got.is_empty() && got.len() < want.len());
            assert_eq!(got[..got.len() - 1], want[..got.len() - 1]);
        }
    }
}
