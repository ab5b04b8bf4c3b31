//! Tunes glibc's allocator for `ghostip agent`, whose peak memory is what a node pays for it.
//!
//! glibc gives each thread that allocates its own arena (up to eight per core) and raises
//! its mmap threshold every time a large block is freed. Both make an agent keep memory it
//! no longer uses: the truth's LIST pages are decoded on the runtime's worker threads, each
//! audit's parse runs on a blocking thread, and the megabytes one of them freed stay in its
//! arena where the others cannot reuse them, while the raised threshold moves the next
//! audit's large vectors from fresh mappings (returned when freed) into those arenas. One
//! arena and a fixed 128 KiB threshold took the agent's peak with 150 000 endpoints and a
//! full audit running from 69.1 to 63.2 MiB (docs/BENCHMARKS.md, "Agent").
//!
//! This module holds the crate's only `unsafe`: `mallopt(3)` has no safe wrapper.
#![allow(unsafe_code)]

/// Sets one arena and a fixed mmap threshold; call it before any other thread starts.
/// Does nothing outside glibc.
pub fn tune_for_agent() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only changes allocator parameters, takes no pointers, and is
        // called from `main` before the runtime starts any thread. A zero return (the value
        // was refused) leaves glibc's defaults, which are correct, only larger.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}
