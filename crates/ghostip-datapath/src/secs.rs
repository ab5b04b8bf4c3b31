//! Serde helper that writes an optional duration as seconds with millisecond precision.

use serde::Serializer;
use std::time::Duration;

/// Serializes `Some(d)` as fractional seconds, `None` as null.
#[allow(clippy::ref_option)]
pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64((d.as_millis() as f64) / 1000.0),
        None => s.serialize_none(),
    }
}
