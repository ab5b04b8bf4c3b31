//! Size-bounded reading of command inputs: whole documents (the `--truth` file, `audit -f`
//! manifests) and streamed dumps (`datapath --from-file`), a file or standard input.
//!
//! A regular file larger than the bound is refused from its metadata, before any byte is
//! read; a stream (a pipe, standard input, `/dev/zero`) is read through a counter that stops
//! one byte past the bound, so an endless input costs at most the bound in memory and time.
//! The default, [`DEFAULT_MAX_INPUT`] (512 MiB), is at least 4 times the size of each input at
//! 10 000 Services / 150 000 endpoints (docs/DATAPATH.md, "Input size bound").

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::rc::Rc;

/// The default bound on one input: 512 MiB.
pub const DEFAULT_MAX_INPUT: u64 = 512 * 1024 * 1024;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Past the bound.
    #[error(
        "larger than {} (--max-input-size; raise it if this input is real)",
        show_size(*limit)
    )]
    TooLarge {
        /// The bound, in bytes.
        limit: u64,
    },
    /// The read failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// `512 MiB`, `1 GiB`, `4096 bytes`: a size as `--help` and errors print it.
pub fn show_size(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{} {name}", n / unit);
        }
    }
    format!("{n} bytes")
}

/// Parses a size: bytes, or with a binary suffix (`Ki`, `Mi`, `Gi`, also `KiB`, `MiB`,
/// `GiB`) as kubectl quantities are written. Zero is refused (nothing could be read).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = t.split_at(digits);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "Ki" | "KiB" => 1 << 10,
        "Mi" | "MiB" => 1 << 20,
        "Gi" | "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (expected bytes, or Ki, Mi, Gi)"
            ));
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a size such as 512Mi or 1073741824"))?;
    match n.checked_mul(mult) {
        Some(0) => Err(format!("`{s}`: the bound must be above zero")),
        Some(v) => Ok(v),
        None => Err(format!("`{s}`: too large")),
    }
}

/// Opens `path` (`-`: standard input) for a bounded read: a regular file larger than
/// `limit` is refused here, from its metadata.
pub fn open(path: &Path, limit: u64) -> Result<Box<dyn Read>, InputError> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(io::stdin().lock()));
    }
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() > limit {
        return Err(InputError::TooLarge { limit });
    }
    Ok(Box::new(file))
}

/// Reads all of `path` (`-`: standard input), at most `limit` bytes: a larger input is
/// [`InputError::TooLarge`] after reading one byte past the bound.
pub fn read_all(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    read_all_from(open(path, limit)?, limit)
}

/// Reads all of `r`, at most `limit` bytes (see [`read_all`]).
pub fn read_all_from<R: Read>(r: R, limit: u64) -> Result<Vec<u8>, InputError> {
    let mut buf = Vec::new();
    r.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(InputError::TooLarge { limit });
    }
    Ok(buf)
}

/// A reader that yields at most `limit` bytes of its input and fails the read that would go
/// past them, recording that it did ([`Limited::exceeded`]): a streamed parser stops there
/// whatever its own error says, and the caller reports the bound.
pub struct Limited<R> {
    inner: R,
    left: u64,
    exceeded: Rc<Cell<bool>>,
}

impl<R: Read> Limited<R> {
    /// Wraps `inner`, allowing `limit` bytes.
    pub fn new(inner: R, limit: u64) -> Self {
        Self {
            inner,
            left: limit,
            exceeded: Rc::new(Cell::new(false)),
        }
    }

    /// A flag set once the input went past the bound (shared: it outlives the reader).
    pub fn exceeded(&self) -> Rc<Cell<bool>> {
        Rc::clone(&self.exceeded)
    }
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // One byte more tells a stream that ends at the bound from a larger one.
            let mut one = [0u8; 1];
            return match self.inner.read(&mut one)? {
                0 => Ok(0),
                _ => {
                    self.exceeded.set(true);
                    Err(io::Error::other("input larger than its size bound"))
                }
            };
        }
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.inner.read(buf.get_mut(..want).unwrap_or_default())?;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("512Mi"), Ok(512 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12MB").is_err());
        assert!(parse_size("Mi").is_err());
        assert!(parse_size("99999999999Gi").is_err());
        assert_eq!(show_size(DEFAULT_MAX_INPUT), "512 MiB");
        assert_eq!(show_size(1 << 30), "1 GiB");
        assert_eq!(show_size(1000), "1000 bytes");
    }

    #[test]
    fn a_stream_is_read_up_to_its_bound_and_refused_one_byte_past_it() {
        // Exactly the bound: read whole.
        assert_eq!(read_all_from(&[7u8; 100][..], 100).unwrap().len(), 100);
        // One byte past: refused.
        assert!(matches!(
            read_all_from(&[7u8; 101][..], 100),
            Err(InputError::TooLarge { limit: 100 })
        ));
        // An endless stream stops at the bound plus one.
        let mut counted = io::repeat(0).take(u64::MAX);
        assert!(read_all_from(&mut counted, 1000).is_err());
        assert_eq!(u64::MAX - counted.limit(), 1001);
        // The streaming reader: the bound is readable, the byte after fails and is flagged.
        let mut l = Limited::new(&[1u8; 10][..], 10);
        let flag = l.exceeded();
        let mut out = Vec::new();
        l.read_to_end(&mut out).unwrap();
        assert_eq!((out.len(), flag.get()), (10, false));
        let mut l = Limited::new(io::repeat(1), 10);
        let flag = l.exceeded();
        let mut out = Vec::new();
        assert!(l.read_to_end(&mut out).is_err());
        assert_eq!((out.len(), flag.get()), (10, true));
    }
}
