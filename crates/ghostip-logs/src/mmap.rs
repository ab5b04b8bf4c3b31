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
//! **The mitigation: a read lease.** [`map_settled`] maps a file only after it took a read lease
//! on it (`fcntl(F_SETLEASE, F_RDLCK)`, Linux). The kernel grants one only when no process has
//! the file open for writing, so a log still being written is read instead; and while the lease
//! is held, a process that opens the file for writing or truncates it (`truncate(2)`, `open`
//! with `O_TRUNC` or for writing, as `copytruncate` does) waits until the lease is released:
//! the map stays valid for the whole scan and the truncation happens after it. The wait is
//! bounded by the kernel (`/proc/sys/fs/lease-break-time`, 45 s by default): a scan still
//! running then would lose its lease, so [`MappedLog::intact`] tells the scan that a break has
//! begun and it reads the rest of the file with positional reads ([`MappedLog::file`]), which
//! end where a truncated file ends. The break notification is a signal (SIGIO by default, which
//! would end the process): the lease is taken with the signal set to SIGURG (ignored by
//! default) and then no owner, so none is sent. Where no lease is granted (another user's file
//! without `CAP_LEASE`, a file system without leases, not Linux) the file is read. Mapping also
//! waits until the file was not modified for `settle` (`ghostip explain` uses a few seconds),
//! and the caller can turn it off (`ghostip explain --mmap never`).
//!
//! What remains: one segment scan (4 MiB) taking longer than the lease-break time after a
//! writer began to wait, or a lease-break time set to 0.

#![allow(unsafe_code)]

use std::fs::File;
use std::ops::Deref;
use std::time::{Duration, SystemTime};

/// A read-only map of a whole regular file, under a read lease that holds off writers and
/// truncation while it lives (see the module doc).
#[derive(Debug)]
pub struct MappedLog {
    /// `None` only while dropping: unmapped before the lease is released.
    map: Option<memmap2::Mmap>,
    /// The file, holding the lease.
    file: File,
}

impl Deref for MappedLog {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }
}

impl Drop for MappedLog {
    fn drop(&mut self) {
        // Unmap first: a truncation the lease held off may proceed as soon as it is released.
        drop(self.map.take());
        lease::release(&self.file);
    }
}

impl MappedLog {
    /// Whether the lease is still held with no break begun: no process waits to write or
    /// truncate the file, so the map can be read. When it turns false, read the rest through
    /// [`MappedLog::file`] (the lease ends, and the truncation may happen, at the latest
    /// `/proc/sys/fs/lease-break-time` after the break began).
    pub fn intact(&self) -> bool {
        lease::held(&self.file)
    }

    /// The mapped file, for positional reads once the map is no longer [`intact`](Self::intact).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Drops this process's mapping of the pages of `range` (`MADV_DONTNEED`; the range is
    /// widened down to a page boundary) once they were scanned, so that the resident set does
    /// not grow with the file. The pages stay in the kernel's page cache; reading them again
    /// maps them again, with the same bytes.
    pub fn release(&self, range: std::ops::Range<usize>) {
        let Some(map) = &self.map else {
            return;
        };
        let end = range.end.min(map.len());
        if range.start >= end {
            return;
        }
        // SAFETY: the map is private, read-only and never written, so MADV_DONTNEED has no
        // private copy to discard: it only drops page-table entries, and a later read faults
        // the same file bytes back in. Slices into the map keep seeing the same bytes (with the
        // caveat of the map itself: another process changing the file, see the module doc).
        let advised = unsafe {
            map.unchecked_advise_range(
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
/// `now` on which a read lease is granted (no process has it open for writing; see the module
/// doc); `Ok(None)` (read it instead) otherwise, also when its modification time is unknown or
/// in the future. The lease is held until the [`MappedLog`] is dropped.
///
/// # Errors
/// Reading the file's metadata, duplicating its descriptor or mapping it failed.
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
    let file = file.try_clone()?;
    if !lease::take(&file) {
        return Ok(None);
    }
    // From here on the lease is released on every path (the drop of `leased`).
    let mut leased = MappedLog { map: None, file };
    // The length under the lease: a truncation before it was taken is seen here.
    let Ok(len) = usize::try_from(leased.file.metadata()?.len()) else {
        return Ok(None);
    };
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: the map is read-only and private to this process; no Rust reference to it
    // outlives `MappedLog`. What the compiler cannot check is that no other process changes
    // the file while it is mapped: the read lease taken above holds off every writer and
    // truncation until it is released after the map is dropped (the module doc gives the
    // residual case: a scan outliving the kernel's lease-break time, which the scan watches
    // for with `intact`).
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(&leased.file)? };
    // Advice only: the scan reads each segment front to back.
    let _ = map.advise(memmap2::Advice::Sequential);
    leased.map = Some(map);
    Ok(Some(leased))
}

/// Read leases (`fcntl(2)`, Linux): the one guard a map has against truncation.
#[cfg(target_os = "linux")]
mod lease {
    use std::fs::File;
    use std::os::fd::AsRawFd;

    /// `F_SETSIG` of the kernel's generic `fcntl.h`, on the architectures that use it (the
    /// `libc` crate defines it for musl only).
    const F_SETSIG: Option<libc::c_int> = if cfg!(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64"
    )) {
        Some(10)
    } else {
        None
    };

    /// Takes a read lease on `file`, with no signal at a break; false when refused (the file is
    /// open for writing somewhere, not ours without `CAP_LEASE`, or on a file system without
    /// leases).
    pub(super) fn take(file: &File) -> bool {
        let fd = file.as_raw_fd();
        // SAFETY: `fcntl` with integer arguments on a descriptor `file` keeps open; no memory
        // is passed. F_SETSIG and F_SETOWN change only how this open file's lease breaks are
        // signalled: first SIGURG (ignored by default) instead of SIGIO (which would end the
        // process), then no owner at all, so no signal is sent.
        unsafe {
            if let Some(setsig) = F_SETSIG
                && libc::fcntl(fd, setsig, libc::SIGURG) != 0
            {
                return false;
            }
            if libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) != 0 {
                return false;
            }
            if libc::fcntl(fd, libc::F_SETOWN, 0) != 0 {
                libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK);
                return false;
            }
        }
        true
    }

    /// Whether the read lease is held with no break pending (`F_GETLEASE` gives `F_UNLCK` as
    /// soon as a writer waits).
    pub(super) fn held(file: &File) -> bool {
        // SAFETY: as in `take`: an integer query on an open descriptor.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLEASE) == libc::F_RDLCK }
    }

    /// Releases the lease (a writer held off goes on).
    pub(super) fn release(file: &File) {
        // SAFETY: as in `take`.
        unsafe {
            libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK);
        }
    }
}

/// Without read leases nothing holds off a truncation: no file is mapped.
#[cfg(not(target_os = "linux"))]
mod lease {
    use std::fs::File;

    pub(super) fn take(_: &File) -> bool {
        false
    }

    pub(super) fn held(_: &File) -> bool {
        false
    }

    pub(super) fn release(_: &File) {}
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

    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_open_for_writing_is_not_mapped() {
        let (path, file) = temp_file("written.log", b"one\ntwo\n");
        let later = SystemTime::now() + Duration::from_secs(3600);
        let writer = File::options().append(true).open(&path).unwrap();
        assert!(map_settled(&file, later, Duration::ZERO).unwrap().is_none());
        drop(writer);
        assert!(map_settled(&file, later, Duration::ZERO).unwrap().is_some());
        std::fs::remove_file(&path).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_truncation_waits_for_the_map_and_the_map_sees_it_coming() {
        let (path, file) = temp_file("rotated.log", &b"dial tcp 10.0.0.1:80\n".repeat(1000));
        let later = SystemTime::now() + Duration::from_secs(3600);
        let map = map_settled(&file, later, Duration::ZERO).unwrap().unwrap();
        assert!(map.intact());
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // logrotate's copytruncate: open for writing, truncate to 0.
        let truncate = {
            let (path, done) = (path.clone(), std::sync::Arc::clone(&done));
            std::thread::spawn(move || {
                let f = File::options().write(true).open(&path).unwrap();
                f.set_len(0).unwrap();
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        // The writer waits; the map says a break has begun (bounded: 10 s).
        let t0 = std::time::Instant::now();
        while map.intact() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!map.intact());
        assert!(!done.load(std::sync::atomic::Ordering::SeqCst));
        // Still mapped and whole: every page reads.
        assert_eq!(map.len(), 21_000);
        assert!(map.iter().filter(|&&b| b == b'\n').count() == 1000);
        drop(map);
        truncate.join().unwrap();
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
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
