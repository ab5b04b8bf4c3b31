//! Plugin argument helpers: zones given to a plugin, integers, Go durations, and their errors.

use std::time::Duration;

use super::error::CorefileError;
use super::zone::normalize_zone;

/// Zones from plugin arguments, or the server block's zones when there are none.
pub(super) fn plugin_zones(args: &[String], server_zones: &[String]) -> Vec<String> {
    if args.is_empty() {
        server_zones.to_vec()
    } else {
        args.iter().map(|a| normalize_zone(a)).collect()
    }
}

pub(super) fn plugin_err(line: usize, plugin: &str, message: impl Into<String>) -> CorefileError {
    CorefileError::InvalidPlugin {
        line,
        plugin: plugin.to_string(),
        message: message.into(),
    }
}

pub(super) fn int_arg(
    line: usize,
    plugin: &str,
    what: &str,
    s: &str,
) -> Result<i64, CorefileError> {
    s.parse::<i64>().map_err(|_| {
        plugin_err(
            line,
            plugin,
            format!("{what} must be an integer, got {s:?}"),
        )
    })
}

/// Parses a Go `time.ParseDuration` string ("300ms", "1h30m", "24h"); negative values are errors.
pub(super) fn go_duration(line: usize, plugin: &str, s: &str) -> Result<Duration, CorefileError> {
    parse_go_duration(s).ok_or_else(|| plugin_err(line, plugin, format!("invalid duration {s:?}")))
}

/// Parses a Go `time.ParseDuration` string (`"30s"`, `"1m30s"`, `"0"`); `None` when it is not one.
/// Negative durations other than `-0` are refused.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        // Go accepts "-0"; anything else negative is refused by the plugins we read.
        return (s
            .trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
            && s.len() > 1)
            .then_some(Duration::ZERO);
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        if num.is_empty() || num == "." {
            return None;
        }
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let nanos_per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut value = int.checked_mul(nanos_per)?;
        let mut scale = nanos_per;
        for d in frac.chars() {
            scale /= 10;
            let digit = u128::from(d.to_digit(10)?);
            value = value.checked_add(digit.checked_mul(scale)?)?;
        }
        total = total.checked_add(value)?;
        rest = tail;
    }
    let secs = u64::try_from(total / 1_000_000_000).ok()?;
    let nanos = u32::try_from(total % 1_000_000_000).ok()?;
    Some(Duration::new(secs, nanos))
}
