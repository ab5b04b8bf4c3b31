//! Parsing `--at` values: RFC 3339 timestamps, `-5m`-style relative times, and `now`.

use std::time::Duration;

use ghostip_core::Time;

/// Why an `--at` value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AtParseError {
    /// Nothing given.
    #[error(
        "empty time: give an RFC 3339 timestamp (2026-01-02T15:04:05Z), a relative time (-5m, -30s, -2h) or `now`"
    )]
    Empty,
    /// Neither a timestamp, a relative time nor `now`.
    #[error(
        "invalid time {input:?}: give an RFC 3339 timestamp with an offset (2026-01-02T15:04:05Z), a relative time (-5m, -30s, -2h, -1h30m) or `now`"
    )]
    Invalid {
        /// The value given.
        input: String,
    },
    /// A relative time reaching outside the representable range.
    #[error("relative time {input:?} is out of range")]
    OutOfRange {
        /// The value given.
        input: String,
    },
}

/// Parses an `--at` value against an injected `now`.
///
/// Accepts `now`; an RFC 3339 timestamp with offset (`2026-01-02T15:04:05Z`,
/// `2026-01-02T16:04:05.250+01:00`); or a time before now: `-` followed by one or more
/// `<number><unit>` with units `ms`, `s`, `m`, `h`, `d` (`-30s`, `-5m`, `-1h30m`).
pub fn parse_at(input: &str, now: Time) -> Result<Time, AtParseError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(AtParseError::Empty);
    }
    if s.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(rel) = s.strip_prefix('-') {
        let ago = parse_relative(rel).ok_or_else(|| AtParseError::Invalid {
            input: input.to_string(),
        })?;
        let ago = ago.ok_or_else(|| AtParseError::OutOfRange {
            input: input.to_string(),
        })?;
        return now.checked_sub(ago).map_err(|_| AtParseError::OutOfRange {
            input: input.to_string(),
        });
    }
    s.parse::<Time>().map_err(|_| AtParseError::Invalid {
        input: input.to_string(),
    })
}

/// `None`: malformed; `Some(None)`: too large.
fn parse_relative(mut rest: &str) -> Option<Option<Duration>> {
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    let mut overflow = false;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let (num, tail) = rest.split_at(digits);
        let (unit_ns, tail): (u128, &str) = if let Some(t) = tail.strip_prefix("ms") {
            (1_000_000, t)
        } else if let Some(t) = tail.strip_prefix('s') {
            (1_000_000_000, t)
        } else if let Some(t) = tail.strip_prefix('m') {
            (60 * 1_000_000_000, t)
        } else if let Some(t) = tail.strip_prefix('h') {
            (3_600 * 1_000_000_000, t)
        } else if let Some(t) = tail.strip_prefix('d') {
            (86_400 * 1_000_000_000, t)
        } else {
            return None;
        };
        match num
            .parse::<u64>()
            .ok()
            .and_then(|n| u128::from(n).checked_mul(unit_ns))
        {
            Some(ns) => total = total.saturating_add(ns),
            None => overflow = true,
        }
        rest = tail;
    }
    if overflow {
        return Some(None);
    }
    Some(u64::try_from(total).ok().map(Duration::from_nanos))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn now() -> Time {
        "2026-01-02T15:04:05Z".parse().unwrap()
    }

    #[test]
    fn now_and_timestamps() {
        assert_eq!(parse_at("now", now()).unwrap(), now());
        assert_eq!(parse_at(" NOW ", now()).unwrap(), now());
        assert_eq!(parse_at("2026-01-02T16:04:05+01:00", now()).unwrap(), now());
        let t = parse_at("2026-01-02T15:04:05.250Z", now()).unwrap();
        assert_eq!(t.as_millisecond() - now().as_millisecond(), 250);
    }

    #[test]
    fn relative_times() {
        let ago = |s: &str| now().as_millisecond() - parse_at(s, now()).unwrap().as_millisecond();
        assert_eq!(ago("-30s"), 30_000);
        assert_eq!(ago("-5m"), 300_000);
        assert_eq!(ago("-2h"), 7_200_000);
        assert_eq!(ago("-1d"), 86_400_000);
        assert_eq!(ago("-1h30m"), 5_400_000);
        assert_eq!(ago("-1500ms"), 1_500);
        assert_eq!(ago("-0s"), 0);
    }

    #[test]
    fn bad_values_are_typed_errors() {
        assert_eq!(parse_at("", now()), Err(AtParseError::Empty));
        for bad in [
            "-",
            "-5",
            "-m",
            "-5x",
            "5m",
            "+5m",
            "yesterday",
            "2026-01-02T15:04:05",
            "-5m3",
        ] {
            assert!(
                matches!(parse_at(bad, now()), Err(AtParseError::Invalid { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_at("-99999999999999999999d", now()),
            Err(AtParseError::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_at("-5000000d", now()),
            Err(AtParseError::OutOfRange { .. })
        ));
        let msg = parse_at("soon", now()).unwrap_err().to_string();
        assert!(msg.contains("RFC 3339") && msg.contains("-5m"), "{msg}");
    }
}
