//! `BPF_MAP_LOOKUP_BATCH` (Linux 5.6+) on a hash map through the raw `bpf(2)` syscall: many keys and values per call, for the Cilium map reader.
//!
//! # Why this module allows `unsafe`
//! aya 0.14 has no batch API and neither libc nor rustix wraps `bpf(2)`, so the call is
//! `libc::syscall(SYS_bpf, BPF_MAP_LOOKUP_BATCH, &attr, size_of(attr))`: unsafe because
//! the kernel reads `attr` and writes through the pointers in it. It is the crate's only
//! unsafe code outside the binary's allocator, and the one `unsafe` block
//! ([`lookup_batch_call`]) relies on these invariants, each held by the code around it:
//! - **Layout.** `attr` is [`BatchAttr`], `#[repr(C)]`, field for field the `batch` member
//!   of the kernel's uapi `union bpf_attr` (`include/uapi/linux/bpf.h`: `in_batch`,
//!   `out_batch`, `keys`, `values` as `__aligned_u64`, `count` and `map_fd` as `__u32`,
//!   `elem_flags` and `flags` as `__u64`): 56 bytes, no padding, checked at compile time.
//!   The size passed is that size; the kernel treats the rest of its union as zero.
//! - **Buffer sizes.** `count`, which bounds what the kernel writes, is computed from the
//!   buffers themselves: `min(keys.len() / key_size, values.len() / value_size)`, so
//!   `keys` holds `count × key_size` bytes and `values` `count × value_size`. The batch
//!   tokens (`in_batch`, `out_batch`) are [`TOKEN_WORDS`] `u64`s (32 bytes): a hash map
//!   writes a `u32` bucket index, the generic batch of other maps a key, and the reader
//!   only batches keys of at most 32 bytes (checked before the call).
//! - **Lifetimes.** Every buffer is a borrow (`&mut` for what the kernel writes) held for
//!   the whole call; the kernel keeps no pointer after it returns.
//! - **The fd.** `map_fd` comes from a [`BorrowedFd`] of aya's `MapData`, borrowed for
//!   the call's duration: the map cannot be closed meanwhile.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `BPF_MAP_LOOKUP_BATCH` in `enum bpf_cmd`.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// The kernel's internal `ENOTSUPP` (not in libc), returned by maps without batch ops.
const ENOTSUPP: i32 = 524;
/// `u64` words of a batch token: room for a 32-byte key.
pub const TOKEN_WORDS: usize = 4;
/// Entries asked for per call at the start (grown when one hash bucket holds more).
pub const BATCH_ENTRIES: u32 = 4096;
/// `EINTR`s tolerated in one map's read before it fails.
const MAX_INTERRUPTS: u32 = 64;

/// The `batch` member of the kernel's `union bpf_attr`.
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const _: () = assert!(std::mem::size_of::<BatchAttr>() == 56);

/// What the errno of one batch call means for the read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `ENOENT`: the map is exhausted; the call's `count` entries are the last ones.
    End,
    /// `ENOSPC`: the next hash bucket holds more entries than asked for: ask for more.
    Grow,
    /// `EINTR`: repeat the same call.
    Retry,
    /// `EINVAL`, `ENOTSUPP`, `EOPNOTSUPP`, `EPERM`: this kernel or map does no batch
    /// lookups (before 5.6 the command is unknown): read the map key by key instead.
    Unsupported,
    /// Anything else: the read fails.
    Fail,
}

/// The meaning of `errno` from `BPF_MAP_LOOKUP_BATCH`.
pub fn classify(errno: i32) -> Step {
    match errno {
        libc::ENOENT => Step::End,
        libc::ENOSPC => Step::Grow,
        libc::EINTR => Step::Retry,
        libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM | ENOTSUPP => Step::Unsupported,
        _ => Step::Fail,
    }
}

/// The entry count after `ENOSPC` at `current`: doubled, at most `cap` (the map's
/// `max_entries`); `None` when `current` is already there.
pub fn grown(current: u32, cap: u32) -> Option<u32> {
    let cap = cap.max(1);
    (current < cap).then(|| current.saturating_mul(2).min(cap))
}

/// Why a batched read stopped short.
#[derive(Debug)]
pub enum BatchError {
    /// The kernel or the map does no batch lookups ([`Step::Unsupported`]).
    Unsupported(io::Error),
    /// The call failed otherwise.
    Failed(io::Error),
}

/// How a batched read went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchRun {
    /// `bpf(2)` calls made.
    pub calls: u64,
    /// Times the batch was grown after `ENOSPC`.
    pub grown: u32,
    /// Whether `on_batch` asked to stop before the end.
    pub stopped: bool,
}

/// One `BPF_MAP_LOOKUP_BATCH`: `Ok(n)` entries written, or the errno with the entries
/// written before it (meaningful for `ENOENT` only).
fn lookup_batch_call(
    fd: BorrowedFd<'_>,
    in_batch: Option<&[u64; TOKEN_WORDS]>,
    out_batch: &mut [u64; TOKEN_WORDS],
    sizes: (usize, usize),
    keys: &mut [u8],
    values: &mut [u8],
    flags: u64,
) -> Result<u32, (i32, u32)> {
    let (key_size, value_size) = sizes;
    if key_size == 0 || value_size == 0 || key_size > TOKEN_WORDS * 8 {
        return Err((libc::EINVAL, 0));
    }
    let fits = (keys.len() / key_size).min(values.len() / value_size);
    let count = u32::try_from(fits).unwrap_or(u32::MAX);
    let mut attr = BatchAttr {
        in_batch: in_batch.map_or(0, |t| t.as_ptr() as u64),
        out_batch: out_batch.as_mut_ptr() as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count,
        map_fd: fd.as_raw_fd() as u32,
        elem_flags: 0,
        flags,
    };
    // SAFETY: see the module doc: `attr` has the uapi layout and its size is passed;
    // `count` entries fit `keys` and `values`; the tokens hold 32 bytes and key_size is at
    // most that; every buffer and `fd` are borrowed for the whole call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_BATCH,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>(),
        )
    };
    // The kernel writes back how many entries it filled (never more than it was given).
    let filled = attr.count.min(count);
    if ret < 0 {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err((errno, filled));
    }
    Ok(filled)
}

/// Reads every entry of the hash map `fd` (keys of `key_size`, values of `value_size`,
/// `max_entries` as the kernel reports it) in batches of `entries` (grown on `ENOSPC` up
/// to `max_entries`), handing each batch's keys and values, packed as the kernel writes
/// them, to `on_batch`; `on_batch` returning `false` stops the read. `flags` is the
/// call's `flags` field: 0, except in tests that make the kernel refuse the call
/// (`EINVAL`) to exercise the caller's fallback.
pub fn read_hash(
    fd: BorrowedFd<'_>,
    sizes: (usize, usize),
    max_entries: u32,
    entries: u32,
    flags: u64,
    mut on_batch: impl FnMut(&[u8], &[u8]) -> bool,
) -> Result<BatchRun, BatchError> {
    let (key_size, value_size) = sizes;
    let mut count = entries.clamp(1, max_entries.max(1));
    let mut keys = vec![0u8; count as usize * key_size];
    let mut values = vec![0u8; count as usize * value_size];
    let mut in_tok = [0u64; TOKEN_WORDS];
    let mut out_tok = [0u64; TOKEN_WORDS];
    let mut first = true;
    let mut run = BatchRun::default();
    let mut interrupts = 0u32;
    loop {
        run.calls += 1;
        let result = lookup_batch_call(
            fd,
            (!first).then_some(&in_tok),
            &mut out_tok,
            sizes,
            &mut keys,
            &mut values,
            flags,
        );
        let (filled, end) = match result {
            Ok(n) => (n, false),
            Err((errno, n)) => match classify(errno) {
                Step::End => (n, true),
                Step::Grow => {
                    let Some(next) = grown(count, max_entries) else {
                        return Err(BatchError::Failed(io::Error::other(format!(
                            "BPF_MAP_LOOKUP_BATCH: a hash bucket holds more than {count} \
                             entries, the map's max_entries"
                        ))));
                    };
                    count = next;
                    keys.resize(count as usize * key_size, 0);
                    values.resize(count as usize * value_size, 0);
                    run.grown += 1;
                    continue;
                }
                Step::Retry if interrupts < MAX_INTERRUPTS => {
                    interrupts += 1;
                    continue;
                }
                Step::Unsupported => {
                    return Err(BatchError::Unsupported(io::Error::from_raw_os_error(errno)));
                }
                Step::Retry | Step::Fail => {
                    return Err(BatchError::Failed(io::Error::from_raw_os_error(errno)));
                }
            },
        };
        let n = filled as usize;
        if n > 0 && !on_batch(&keys[..n * key_size], &values[..n * value_size]) {
            run.stopped = true;
            return Ok(run);
        }
        if end {
            return Ok(run);
        }
        if n == 0 {
            // A successful call always returns at least one entry; not looping forever
            // on one that does not.
            return Err(BatchError::Failed(io::Error::other(
                "BPF_MAP_LOOKUP_BATCH returned no entries and no end",
            )));
        }
        in_tok = out_tok;
        first = false;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn errnos_map_to_steps() {
        assert_eq!(classify(libc::ENOENT), Step::End);
        assert_eq!(classify(libc::ENOSPC), Step::Grow);
        assert_eq!(classify(libc::EINTR), Step::Retry);
        for e in [libc::EINVAL, libc::EOPNOTSUPP, libc::EPERM, 524] {
            assert_eq!(classify(e), Step::Unsupported, "errno {e}");
        }
        for e in [libc::EFAULT, libc::EBADF, libc::ENOMEM, libc::EACCES] {
            assert_eq!(classify(e), Step::Fail, "errno {e}");
        }
    }

    #[test]
    fn a_batch_grows_by_doubling_up_to_max_entries() {
        assert_eq!(grown(4096, 262_144), Some(8192));
        assert_eq!(grown(200_000, 262_144), Some(262_144));
        assert_eq!(grown(262_144, 262_144), None);
        assert_eq!(grown(1, 0), None);
        assert_eq!(grown(u32::MAX - 1, u32::MAX), Some(u32::MAX));
    }

    #[test]
    fn a_key_longer_than_the_token_is_refused_before_the_call() {
        use std::os::fd::AsFd;
        let fd = std::fs::File::open("/dev/null").unwrap();
        let mut out = [0u64; TOKEN_WORDS];
        let (mut k, mut v) = (vec![0u8; 40], vec![0u8; 4]);
        let r = lookup_batch_call(fd.as_fd(), None, &mut out, (40, 4), &mut k, &mut v, 0);
        assert_eq!(r, Err((libc::EINVAL, 0)));
    }
}
