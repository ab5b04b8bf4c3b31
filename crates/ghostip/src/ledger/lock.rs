//! The writer lock: at most one process writes a ledger at a time.
//!
//! A writable open ([`Ledger::open`](super::Ledger::open)) takes an exclusive `flock` on
//! `<db>.lock` beside the database before it touches the database, and holds it as long as
//! the [`Ledger`](super::Ledger) lives (for `watch`, `agent` and `rollout`: the whole
//! process). The holder writes its PID into the file, so a refused writer can name it.
//!
//! Why a side file and `flock`: SQLite takes POSIX (`fcntl`) locks on the database itself,
//! and closing any descriptor of a file drops every `fcntl` lock the process holds on it;
//! `flock` locks belong to one open file description, so they neither disturb SQLite's nor
//! let two opens in one process share the lock. The kernel drops the lock when the process
//! dies however it dies (SIGKILL included), so there is never a stale lock to clean up; the
//! file itself stays (removing it would let a process that opened the old file and one that
//! creates a new one both hold "the" lock).

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::LedgerError;

/// How long a writable open waits for a lock this process itself held before: a child that
/// another thread forked while the lock was held keeps it until it execs.
const OWN_RELEASE_WAIT: Duration = Duration::from_millis(500);

/// Holds the writer lock of one ledger until dropped.
#[derive(Debug)]
pub(crate) struct WriterLock {
    _file: File,
}

/// The lock file of the ledger at `db`: `<db>.lock`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

impl WriterLock {
    /// Takes the writer lock of the ledger at `db` without waiting.
    ///
    /// # Errors
    /// [`LedgerError::Locked`] (with the holder's PID when it could be read) when another
    /// open holds it; [`LedgerError::LockFile`] when the lock file cannot be opened or locked.
    pub(crate) fn acquire(db: &Path) -> Result<Self, LedgerError> {
        let lock = lock_path(db);
        let lock_error = |source| LedgerError::LockFile {
            path: db.to_path_buf(),
            lock: lock.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(lock_error)?;
        let mut waited = Duration::ZERO;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let pid = holder_pid(&lock);
                    // This process held it and let go: a child forked meanwhile by another
                    // thread shares the lock's file until it execs (the descriptor closes on
                    // exec), a few milliseconds at most.
                    if pid == Some(std::process::id()) && waited < OWN_RELEASE_WAIT {
                        std::thread::sleep(Duration::from_millis(10));
                        waited += Duration::from_millis(10);
                        continue;
                    }
                    return Err(LedgerError::Locked {
                        path: db.to_path_buf(),
                        pid,
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(lock_error(e)),
            }
        }
        // The PID only names the holder in a refusal; the lock is what excludes. A full
        // disk may refuse even these few bytes: the refusal then says "another process".
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}", std::process::id()));
        Ok(Self { _file: file })
    }
}

/// The PID the holder wrote. It writes it right after locking, so an empty file is retried
/// a few times (at most 10 reads, 10 ms apart).
fn holder_pid(lock: &Path) -> Option<u32> {
    for attempt in 0..10 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut text = String::new();
        let read = File::open(lock).and_then(|f| f.take(32).read_to_string(&mut text));
        if read.is_err() {
            return None;
        }
        if let Ok(pid) = text.trim().parse() {
            return Some(pid);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// A lock this process released while a copy of its descriptor lives on (as in a child
    /// forked by another thread and not yet exec'd: here a duplicate closed 50 ms later) is
    /// taken once the copy is gone, not refused as held by another writer.
    #[test]
    fn a_lock_released_while_a_forked_copy_lives_is_taken_once_the_copy_closes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.db");
        let held = WriterLock::acquire(&db).unwrap();
        let copy = held._file.try_clone().unwrap();
        drop(held);
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(copy);
        });
        let again = WriterLock::acquire(&db);
        closer.join().unwrap();
        assert!(again.is_ok(), "{again:?}");
    }

    #[test]
    fn two_locks_on_one_ledger_conflict_and_the_holder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.db");
        let held = WriterLock::acquire(&db).unwrap();
        match WriterLock::acquire(&db) {
            Err(LedgerError::Locked { path, pid }) => {
                assert_eq!(path, db);
                assert_eq!(pid, Some(std::process::id()));
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        // Another ledger beside it is not affected.
        let other = WriterLock::acquire(&dir.path().join("m.db")).unwrap();
        drop(held);
        drop(other);
        let again = WriterLock::acquire(&db).unwrap();
        drop(again);
        assert_eq!(lock_path(&db), dir.path().join("l.db.lock"));
    }

    #[test]
    fn an_unreadable_pid_is_not_invented() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("l.db.lock");
        std::fs::write(&lock, "not a pid").unwrap();
        assert_eq!(holder_pid(&lock), None);
        std::fs::write(&lock, "4242\n").unwrap();
        assert_eq!(holder_pid(&lock), Some(4242));
    }
}
