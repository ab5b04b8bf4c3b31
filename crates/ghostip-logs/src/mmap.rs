//! Maps a settled regular log file into memory, so that the scanner reads its bytes in place
//! instead of having the kernel copy every page into a read buffer.
//!
//! This module is the crate's one exception to "no `unsafe`" (the crate root denies it; only
//! this module allows it, for two calls: `memmap2::MmapOptions::map`, and the `MADV_DONTNEED`
//! advice with which [`MappedLog::release`] drops pages that were scanned).
//!
//! **Why.** With `read(2)` or `pread(2)` the kernel copies each page-cache page into the
//! scanner's buffer before the scanner reads it again: 18 % of one thread's time when scanning a
//! cached 200 MiB log (`perf record`, see `docs/BENCHMARKS.md`, "`ghostip explain` (the
//! command) against ripgrep"). A private read-only map lets the prefilter run over the
//! page-cache pages themselves, as ripgrep does for a single file.
//!
//! **The risk.** A mapping stays valid only while the file keeps its length: if another process
//! truncates the file while it is mapped (logrotate's `copytruncate` does exactly that to a log
//! that is still being written), reading a page past the new end raises SIGBUS, which ends the
//! process. A file rewritten in place would change bytes under the scan.
//!
//! **The mitigation.** [`map_settled`] maps only regular, non-empty files whose modification
//! time is at least `settle` before `now` (the caller passes both; `ghostip explain` uses a few
//! seconds): a log still being written or just rotated is read through the normal path
//! instead, and the caller can turn mapping off (`ghostip explain --mmap never`). What remains
//! is a file that was quiet for `settle` and is truncated during the scan.

#![allow(unsafe_code)]

use std::fs::File;
use std::ops::Deref;
use std::time::{Duration, SystemTime};

/// A read-only map of a whole regular file.
#[derive(Debug)]
pub struct MappedLog {
    map: memmap2::Mmap,
}

impl Deref for MappedLog {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl MappedLog {
    /// Drops this process's mapping of the pages of `range` (`MADV_DONTNEED`; the range is
    /// widened down to a page boundary) once they were scanned, so that the resident set does
    /// not grow with the file. The pages stay in the kernel's page cache; reading them again
    /// maps them again, with the same bytes.
    pub fn release(&self, range: std::ops::Range<usize>) {
        let end = range.end.min(self.map.len());
        if range.start >= end {
            return;
        }
        // SAFETY: the map is private, read-only and never written, so MADV_DONTNEED has no
        // private copy to discard: it only drops page-table entries, and a later read faults
        // the same file bytes back in. Slices into the map keep seeing the same bytes (with the
        // caveat of the map itself: another process changing the file, see the module doc).
        let advised = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                range.start,
                end - range.start,
            )
        };
        // Only advice: if the kernel refuses, the pages simply stay mapped.
        let _ = advised;
    }
}

/// Maps `file` when it is a regular, non-empty file last modified at least `settle` before
/// `now`; `Ok(None)` (read it instead) otherwise, also when its modification time is unknown
/// or in the future.
///
/// # Errors
/// Reading the file's metadata or mapping it failed.
pub fn map_settled(
    file: &File,
    now: SystemTime,
    settle: Duration,
) -> std::io::Result<Option<MappedLog>> {
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() == 0 {
        return Ok(None);
    }
    let settled = meta
        .modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .is_some_and(|age| age >= settle);
    if !settled {
        return Ok(None);
    }
    let Ok(len) = usize::try_from(meta.len()) else {
        return Ok(None);
    };
    // SAFETY: the map is read-only and private to this process; no Rust reference to it
    // outlives `MappedLog`. What the compiler cannot check is that no other process changes
    // the file while it is mapped: the file was not modified for `settle` (checked above), and
    // the residual risk (a truncation during the scan raises SIGBUS) is documented at the top
    // of this module and in docs/EXPLAIN.md.
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(file)? };
    // Advice only: the scan reads each segment front to back.
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Some(MappedLog { map }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::io::Write;

    fn temp_file(name: &str, bytes: &[u8]) -> (std::path::PathBuf, File) {
        let dir = std::env::temp_dir().join(format!("ghostip-logs-mmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let mut f = File::create(&path).unwrap();
        f.write_all(bytes).unwrap();
        drop(f);
        (path.clone(), File::open(&path).unwrap())
    }

    #[test]
    fn maps_only_settled_regular_non_empty_files() {
        let (path, file) = temp_file("settled.log", b"one\ntwo\n");
        let mtime = file.metadata().unwrap().modified().unwrap();
        let settle = Duration::from_secs(5);
        // Written just now: read, not mapped.
        assert!(map_settled(&file, mtime, settle).unwrap().is_none());
        assert!(
            map_settled(&file, mtime + Duration::from_secs(4), settle)
                .unwrap()
                .is_none()
        );
        // A modification time in the future (clock skew): not mapped.
        assert!(
            map_settled(&file, mtime - Duration::from_secs(60), settle)
                .unwrap()
                .is_none()
        );
        let map = map_settled(&file, mtime + settle, settle).unwrap().unwrap();
        assert_eq!(&map[..], b"one\ntwo\n");
        // Released pages read back the same.
        map.release(0..map.len());
        // Past the end: nothing to release.
        map.release(map.len()..map.len() + 4096);
        assert_eq!(&map[..], b"one\ntwo\n");
        drop(map);
        std::fs::remove_file(&path).unwrap();

        let (path, empty) = temp_file("empty.log", b"");
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert!(map_settled(&empty, later, settle).unwrap().is_none());
        std::fs::remove_file(&path).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn does_not_map_what_is_not_a_regular_file() {
        let dir = File::open(std::env::temp_dir()).unwrap();
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert!(map_settled(&dir, later, Duration::ZERO).unwrap().is_none());
    }
}
