//! The ledger's error type, naming the database file in every message.

use std::io;
use std::path::{Path, PathBuf};

use ghostip_core::Time;
use rusqlite::ErrorCode;

/// Errors of the ledger.
///
/// Opening never resets or rewrites a file it does not recognise: every open error
/// leaves the file as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// No default path: `$GHOSTIP_DB`, `$XDG_STATE_HOME` and `$HOME` are all unset.
    /// Not retryable; pass `--db PATH` or set `GHOSTIP_DB`.
    #[error("no default ledger path: set GHOSTIP_DB or HOME, or pass --db PATH")]
    NoDefaultPath,

    /// The parent directory of the database could not be created. Not retryable.
    #[error("cannot create the ledger directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },

    /// Another process (or another open in this one) holds the ledger's writer lock
    /// (`<db>.lock`): one writer per ledger. Nothing was read or written. Not retryable
    /// while it runs; readers ([`Ledger::open_read_only`](super::Ledger::open_read_only))
    /// are not affected. The message leaves the file to the caller's context ("opening the
    /// ledger PATH").
    #[error("another ghostip process{} is writing it", pid.map(|p| format!(" (PID {p})")).unwrap_or_default())]
    Locked {
        /// The database file.
        path: PathBuf,
        /// The holder's PID, as it wrote it into the lock file (in its PID namespace).
        pid: Option<u32>,
    },

    /// The lock file beside the database could not be created or locked. Not retryable.
    #[error("cannot lock {lock} for writing {path}")]
    LockFile {
        /// The database file.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },

    /// [`Ledger::open_existing`](super::Ledger::open_existing) found no file.
    #[error("no ledger at {path} (run `ghostip watch` first, or pass --db PATH)")]
    NotFound {
        /// The file.
        path: PathBuf,
    },

    /// [`Ledger::open_read_only`](super::Ledger::open_read_only) found an empty file or an
    /// older schema, which only a writable open migrates. Nothing was changed.
    #[error(
        "{path} has ledger schema version {found}, this ghostip reads version {supported}; nothing was changed (open it once with `ghostip watch --db {path}` to migrate it)"
    )]
    NotCurrent {
        /// The file.
        path: PathBuf,
        /// Its `PRAGMA user_version`.
        found: i64,
        /// The version this binary reads.
        supported: i64,
    },

    /// The file is not an SQLite database. Nothing was changed.
    #[error(
        "{path} is not an SQLite database; nothing was changed (move it away or pass another --db)"
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
    },

    /// SQLite reports the file as corrupt. Nothing was changed by ghostip.
    #[error(
        "{path} is corrupt; nothing was changed (keep a copy, then try `sqlite3 {path} .recover`)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// SQLite's report.
        #[source]
        source: rusqlite::Error,
    },

    /// The file was written by a newer ghostip with a schema this binary does not know.
    /// Nothing was changed; use a newer ghostip.
    #[error(
        "{path} has ledger schema version {found}, newer than this ghostip supports ({supported}); nothing was changed (use a newer ghostip)"
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its `PRAGMA user_version`.
        found: i64,
        /// The newest version this binary knows.
        supported: i64,
    },

    /// The file is an SQLite database of another application. Nothing was changed.
    #[error(
        "{path} is an SQLite database but not a ghostip ledger (application_id {application_id:#x}, user_version {user_version}); nothing was changed"
    )]
    ForeignDatabase {
        /// The file.
        path: PathBuf,
        /// Its `PRAGMA application_id`.
        application_id: i64,
        /// Its `PRAGMA user_version`.
        user_version: i64,
    },

    /// WAL mode could not be enabled (e.g. the file system lacks shared memory support).
    #[error("cannot enable WAL mode on {path} (journal_mode stayed {mode})")]
    WalUnavailable {
        /// The file.
        path: PathBuf,
        /// The journal mode SQLite reported.
        mode: String,
    },

    /// Any other SQLite error. `SQLITE_BUSY` (another writer held the lock longer than
    /// the busy timeout) is retryable; others usually are not.
    #[error("ledger {path}: SQLite error")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rusqlite::Error,
    },

    /// A time outside the range the ledger stores (i64 nanoseconds: years 1677 to 2262).
    #[error("time {time} is outside the ledger's range (years 1677 to 2262)")]
    TimeOutOfRange {
        /// The time.
        time: Time,
    },

    /// A stored value could not be read back (the file was edited by hand?).
    #[error("ledger {path}: invalid stored value: {detail}")]
    InvalidData {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },

    /// The writer thread could not be started.
    #[error("cannot start the ledger writer thread")]
    WriterSpawn(#[source] io::Error),

    /// The writer thread has stopped (closed, or it panicked); the operation was not stored.
    #[error("the ledger writer has stopped")]
    WriterClosed,
}

/// Errors inside a transaction, before the file name is attached.
#[derive(Debug)]
pub(crate) enum Inner {
    Sql(rusqlite::Error),
    TimeOutOfRange(Time),
    InvalidData(String),
}

impl From<rusqlite::Error> for Inner {
    fn from(e: rusqlite::Error) -> Self {
        Inner::Sql(e)
    }
}

impl Inner {
    /// Attaches the database file and classifies SQLite errors.
    pub(crate) fn at(self, path: &Path) -> LedgerError {
        match self {
            Inner::Sql(e) => sql_error(path, e),
            Inner::TimeOutOfRange(time) => LedgerError::TimeOutOfRange { time },
            Inner::InvalidData(detail) => LedgerError::InvalidData {
                path: path.to_path_buf(),
                detail,
            },
        }
    }
}

/// Classifies an SQLite error: not-a-database and corruption get their own variants.
pub(crate) fn sql_error(path: &Path, e: rusqlite::Error) -> LedgerError {
    let path = path.to_path_buf();
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => LedgerError::NotADatabase { path },
        Some(ErrorCode::DatabaseCorrupt) => LedgerError::Corrupt { path, source: e },
        _ => LedgerError::Sqlite { path, source: e },
    }
}
