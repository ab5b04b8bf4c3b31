//! The typed error every parser returns when a dump cannot be read at all.
//!
//! Damaged or unknown lines inside an otherwise readable dump are not errors: they are
//! skipped and counted in [`crate::SkipStats`]. A [`ParseError`] means the input as a
//! whole is not what the parser expects.
//!
//! # Recovery
//! None of these are retryable with the same input. `Unexpected` and `Unsupported` usually
//! mean the wrong `--format` was given; `Read` is an IO error of the reader passed in.

use std::borrow::Cow;

use crate::format::Format;
use crate::model::Location;

/// Why a dump could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The input does not look like `format` at all.
    #[error("{format}: {location}: expected {expected}, found {found:?}")]
    Unexpected {
        /// The format the parser reads.
        format: Format,
        /// Where the first unexpected content was.
        location: Location,
        /// What the parser expected there.
        expected: Cow<'static, str>,
        /// The start of what it found.
        found: String,
    },
    /// A JSON document is not valid JSON (truncated, unterminated, wrong top-level type).
    #[error("{format}: {location}: expected {expected}: {message}")]
    Json {
        /// The format the parser reads.
        format: Format,
        /// Line and column from the JSON reader, or a JSON path.
        location: Location,
        /// What was expected.
        expected: Cow<'static, str>,
        /// The JSON reader's message.
        message: String,
    },
    /// A family of tools (Cilium) printed output in a format this crate does not know.
    #[error("unsupported {family} output ({detail}); supported formats: {supported}")]
    Unsupported {
        /// Tool family, e.g. `cilium`.
        family: &'static str,
        /// What was seen instead.
        detail: String,
        /// The formats that are supported, comma separated.
        supported: String,
    },
    /// The reader failed.
    #[error("{format}: read error after line {line}: {message}")]
    Read {
        /// The format the parser reads.
        format: Format,
        /// Last line read completely.
        line: usize,
        /// The IO error's message.
        message: String,
    },
}

impl ParseError {
    pub(crate) fn unexpected(
        format: Format,
        location: Location,
        expected: impl Into<Cow<'static, str>>,
        found: &str,
    ) -> Self {
        ParseError::Unexpected {
            format,
            location,
            expected: expected.into(),
            found: crate::model::excerpt(found),
        }
    }

    pub(crate) fn json(format: Format, err: &serde_json::Error, expected: &'static str) -> Self {
        ParseError::Json {
            format,
            location: Location::LineColumn(err.line(), err.column()),
            expected: Cow::Borrowed(expected),
            message: err.to_string(),
        }
    }
}
