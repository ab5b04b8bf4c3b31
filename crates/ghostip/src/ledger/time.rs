//! Conversions between [`Time`] and the ledger's INTEGER unix nanoseconds.

use std::time::Duration;

use ghostip_core::Time;

use super::error::Inner;

/// Unix nanoseconds of `t`; times outside i64 nanoseconds (years 1677 to 2262) are an error.
pub(crate) fn to_ns(t: Time) -> Result<i64, Inner> {
    i64::try_from(t.as_nanosecond()).map_err(|_| Inner::TimeOutOfRange(t))
}

/// [`to_ns`] for optional times.
pub(crate) fn opt_to_ns(t: Option<Time>) -> Result<Option<i64>, Inner> {
    t.map(to_ns).transpose()
}

/// The time of stored unix nanoseconds.
pub(crate) fn from_ns(ns: i64) -> Result<Time, Inner> {
    Time::from_nanosecond(i128::from(ns))
        .map_err(|e| Inner::InvalidData(format!("time {ns} ns: {e}")))
}

/// [`from_ns`] for optional values.
pub(crate) fn opt_from_ns(ns: Option<i64>) -> Result<Option<Time>, Inner> {
    ns.map(from_ns).transpose()
}

/// Nanoseconds of a duration, saturating at i64::MAX (292 years).
pub(crate) fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A stored non-negative nanosecond count as a duration (negative values read as zero).
pub(crate) fn ns_duration(ns: i64) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}
