//! `--truth-history FILE`: the file read up to `--max-input-size`, then parsed by
//! [`TruthHistory::parse`].

use std::path::{Path, PathBuf};

use ghostip_analysis::explain::{TruthHistory, TruthHistoryError};

use crate::input::{InputError, read_all, show_size};

/// A truth-history file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TruthReadError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than the bound (`--max-input-size`).
    #[error("{path}: larger than {} (--max-input-size; raise it if this history is real)", show_size(*limit))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound, in bytes.
        limit: u64,
    },
    /// A document is not JSON, or not a Pod, List or watch event.
    #[error(transparent)]
    Invalid(#[from] TruthHistoryError),
}

/// Reads and parses `path` (`-`: standard input), at most `limit` bytes: a larger file is
/// refused unread, a stream read no further than one byte past the bound.
///
/// # Errors
/// [`TruthReadError::Invalid`] naming the file and the line of the bad document;
/// [`TruthReadError::TooLarge`] past the bound.
pub fn read_truth_history(path: &Path, limit: u64) -> Result<TruthHistory, TruthReadError> {
    let read = |source| TruthReadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let bytes = match read_all(path, limit) {
        Ok(b) => b,
        Err(InputError::TooLarge { limit }) => {
            return Err(TruthReadError::TooLarge {
                path: path.to_path_buf(),
                limit,
            });
        }
        Err(InputError::Io(e)) => return Err(read(e)),
    };
    let text = String::from_utf8(bytes)
        .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    Ok(TruthHistory::parse(path, &text)?)
}
