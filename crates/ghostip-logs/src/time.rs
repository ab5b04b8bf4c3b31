//! Reads the timestamp a log line starts with and finds where its message begins.
//!
//! Recognized prefixes, possibly stacked (`kubectl logs --timestamps` before an Envoy line, a
//! syslog header before a klog header): syslog PRI `<30>`, RFC 3339 / ISO 8601 with `T` or space,
//! `,` or `.` fractions and optional zone (kubectl, logback, Python logging, CoreDNS, zap), RFC
//! 5424 `1 2024-…`, BSD syslog / journald `Mar 19 08:02:43 host proc[pid]:`, klog
//! `E0319 08:02:43.743872 89518 file.go:322]`, Go log and nginx `2017/05/23 21:52:25`, Envoy
//! `[2020-09-24T13:31:37.980Z]`, logfmt `time=…` / `ts=…`, JSON keys (`"time"`, `"timestamp"`,
//! `"@timestamp"`, `"ts"`, `"start_time"`), JavaScript `Mon Jun 02 2025 13:24:11 GMT+0000`, and
//! linkerd2-proxy's uptime `[     0.001881s]` (skipped, it is not a time).

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};

use crate::lit::lit;

/// The zone a timestamp was written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Zone {
    /// An explicit offset in seconds (`Z` is 0).
    Offset(i32),
    /// None written: local time of the writer.
    Unknown,
}

/// A timestamp as read from the line, before the caller's defaults are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawTime {
    pub year: Option<i16>,
    pub month: i8,
    pub day: i8,
    pub hour: i8,
    pub minute: i8,
    pub second: i8,
    pub nanos: i32,
    pub zone: Zone,
}

impl RawTime {
    /// True when the time needs no default (year and zone both written).
    pub fn is_complete(&self) -> bool {
        self.year.is_some() && self.zone != Zone::Unknown
    }

    /// Converts with defaults: `year`, else the year inferred from the input, else
    /// `fallback_year` (both assumed). Returns the timestamp and whether the year / the zone were
    /// assumed.
    pub fn resolve(
        &self,
        year: Option<i16>,
        inferred_year: Option<i16>,
        fallback_year: Option<i16>,
        tz: Option<&TimeZone>,
    ) -> Option<Resolved> {
        let (y, year_assumed) = match (self.year, year, inferred_year.or(fallback_year)) {
            (Some(y), _, _) | (None, Some(y), _) => (y, false),
            (None, None, Some(y)) => (y, true),
            (None, None, None) => return None,
        };
        let dt = DateTime::new(
            y,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanos,
        )
        .ok()?;
        let (ts, zone_assumed) = match (self.zone, tz) {
            (Zone::Offset(secs), _) => (
                Offset::from_seconds(secs).ok()?.to_timestamp(dt).ok()?,
                false,
            ),
            (Zone::Unknown, Some(tz)) => (tz.to_timestamp(dt).ok()?, false),
            (Zone::Unknown, None) => (Offset::UTC.to_timestamp(dt).ok()?, true),
        };
        Some(Resolved {
            at: ts,
            year_assumed,
            zone_assumed,
        })
    }
}

/// A resolved timestamp and what had to be assumed for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub at: Timestamp,
    pub year_assumed: bool,
    pub zone_assumed: bool,
}

/// Where the message starts and the best timestamp of the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefix {
    pub time: Option<RawTime>,
    pub msg_start: usize,
}

fn digits(b: &[u8], at: usize, n: usize) -> Option<u32> {
    let s = b.get(at..at + n)?;
    let mut v = 0u32;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

fn small(v: u32) -> Option<i8> {
    i8::try_from(v).ok()
}

/// Parses `.123456789` or `,123` at `at`; returns nanoseconds and bytes used.
fn fraction(b: &[u8], at: usize) -> (i32, usize) {
    match b.get(at) {
        Some(b'.' | b',') => {}
        _ => return (0, 0),
    }
    let n = b[at + 1..]
        .iter()
        .take(12)
        .take_while(|c| c.is_ascii_digit())
        .count();
    if n == 0 {
        return (0, 0);
    }
    let mut nanos: i64 = 0;
    for (k, &c) in b[at + 1..at + 1 + n].iter().enumerate() {
        if k < 9 {
            nanos = nanos * 10 + i64::from(c - b'0');
        }
    }
    for _ in n..9 {
        nanos *= 10;
    }
    (i32::try_from(nanos).unwrap_or(0), n + 1)
}

/// Parses `Z`, `+hh:mm`, `+hhmm`, `+hh`, ` UTC` at `at`.
fn zone(b: &[u8], at: usize) -> (Zone, usize) {
    match b.get(at) {
        Some(b'Z' | b'z') => (Zone::Offset(0), 1),
        Some(&sign @ (b'+' | b'-')) => {
            let Some(h) = digits(b, at + 1, 2) else {
                return (Zone::Unknown, 0);
            };
            let (m, used) = if b.get(at + 3) == Some(&b':') {
                (digits(b, at + 4, 2), 6)
            } else {
                (digits(b, at + 3, 2), 5)
            };
            let (m, used) = match m {
                Some(m) => (m, used),
                None => (0, 3),
            };
            let secs = i32::try_from(h * 3600 + m * 60).unwrap_or(0);
            let secs = if sign == b'-' { -secs } else { secs };
            (Zone::Offset(secs), used)
        }
        Some(b' ') if b.get(at + 1..at + 4) == Some(b"UTC") => (Zone::Offset(0), 4),
        _ => (Zone::Unknown, 0),
    }
}

/// `YYYY-MM-DD[T ]hh:mm:ss[.frac][zone]` at `at`.
pub(crate) fn iso(b: &[u8], at: usize) -> Option<(RawTime, usize)> {
    let y = digits(b, at, 4)?;
    if b.get(at + 4) != Some(&b'-') || b.get(at + 7) != Some(&b'-') {
        return None;
    }
    let mo = digits(b, at + 5, 2)?;
    let d = digits(b, at + 8, 2)?;
    match b.get(at + 10) {
        Some(b'T' | b't' | b' ') => {}
        _ => return None,
    }
    let (h, mi, s, used) = hms(b, at + 11)?;
    let mut i = at + 11 + used;
    let (nanos, f) = fraction(b, i);
    i += f;
    let (z, zl) = zone(b, i);
    i += zl;
    Some((
        RawTime {
            year: i16::try_from(y).ok(),
            month: small(mo)?,
            day: small(d)?,
            hour: h,
            minute: mi,
            second: s,
            nanos,
            zone: z,
        },
        i - at,
    ))
}

/// `hh:mm:ss` at `at`.
fn hms(b: &[u8], at: usize) -> Option<(i8, i8, i8, usize)> {
    let h = digits(b, at, 2)?;
    if b.get(at + 2) != Some(&b':') || b.get(at + 5) != Some(&b':') {
        return None;
    }
    let mi = digits(b, at + 3, 2)?;
    let s = digits(b, at + 6, 2)?;
    Some((small(h)?, small(mi)?, small(s)?, 8))
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

fn month(b: &[u8], at: usize) -> Option<i8> {
    let m = b.get(at..at + 3)?;
    MONTHS
        .iter()
        .position(|x| x.as_slice() == m)
        .and_then(|i| i8::try_from(i + 1).ok())
}

/// `YYYY/MM/DD hh:mm:ss[.frac]` (Go log, nginx error log) at `at`.
fn slashed(b: &[u8], at: usize) -> Option<(RawTime, usize)> {
    let y = digits(b, at, 4)?;
    if b.get(at + 4) != Some(&b'/') || b.get(at + 7) != Some(&b'/') || b.get(at + 10) != Some(&b' ')
    {
        return None;
    }
    let mo = digits(b, at + 5, 2)?;
    let d = digits(b, at + 8, 2)?;
    let (h, mi, s, used) = hms(b, at + 11)?;
    let i = at + 11 + used;
    let (nanos, f) = fraction(b, i);
    Some((
        RawTime {
            year: i16::try_from(y).ok(),
            month: small(mo)?,
            day: small(d)?,
            hour: h,
            minute: mi,
            second: s,
            nanos,
            zone: Zone::Unknown,
        },
        i + f - at,
    ))
}

/// BSD syslog `Mmm dd hh:mm:ss` (day may be space-padded) at `at`.
fn syslog(b: &[u8], at: usize) -> Option<(RawTime, usize)> {
    let mo = month(b, at)?;
    if b.get(at + 3) != Some(&b' ') {
        return None;
    }
    let mut i = at + 4;
    if b.get(i) == Some(&b' ') {
        i += 1;
    }
    let dn = b[i.min(b.len())..]
        .iter()
        .take(3)
        .take_while(|c| c.is_ascii_digit())
        .count();
    if dn == 0 || dn > 2 {
        return None;
    }
    let d = digits(b, i, dn)?;
    i += dn;
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let (h, mi, s, used) = hms(b, i + 1)?;
    i += 1 + used;
    let (nanos, f) = fraction(b, i);
    i += f;
    Some((
        RawTime {
            year: None,
            month: mo,
            day: small(d)?,
            hour: h,
            minute: mi,
            second: s,
            nanos,
            zone: Zone::Unknown,
        },
        i - at,
    ))
}

/// klog `Lmmdd hh:mm:ss.uuuuuu` at `at` (L one of I W E F).
fn klog(b: &[u8], at: usize) -> Option<(RawTime, usize)> {
    if !matches!(b.get(at), Some(b'I' | b'W' | b'E' | b'F')) {
        return None;
    }
    let mo = digits(b, at + 1, 2)?;
    let d = digits(b, at + 3, 2)?;
    if b.get(at + 5) != Some(&b' ') {
        return None;
    }
    let (h, mi, s, used) = hms(b, at + 6)?;
    let i = at + 6 + used;
    let (nanos, f) = fraction(b, i);
    Some((
        RawTime {
            year: None,
            month: small(mo)?,
            day: small(d)?,
            hour: h,
            minute: mi,
            second: s,
            nanos,
            zone: Zone::Unknown,
        },
        i + f - at,
    ))
}

/// JavaScript `Date.toString()`: `Mon Jun 02 2025 13:24:11 GMT+0000` at `at`.
fn js_date(b: &[u8], at: usize) -> Option<(RawTime, usize)> {
    let wd = b.get(at..at + 4)?;
    if !wd[..3].iter().all(u8::is_ascii_alphabetic) || wd[3] != b' ' {
        return None;
    }
    let mo = month(b, at + 4)?;
    if b.get(at + 7) != Some(&b' ')
        || b.get(at + 10) != Some(&b' ')
        || b.get(at + 15) != Some(&b' ')
    {
        return None;
    }
    let d = digits(b, at + 8, 2)?;
    let y = digits(b, at + 11, 4)?;
    let (h, mi, s, used) = hms(b, at + 16)?;
    let mut i = at + 16 + used;
    let mut z = Zone::Unknown;
    if b.get(i..i + 4) == Some(b" GMT") {
        let (zz, zl) = zone(b, i + 4);
        z = zz;
        i += 4 + zl;
    }
    Some((
        RawTime {
            year: i16::try_from(y).ok(),
            month: mo,
            day: small(d)?,
            hour: h,
            minute: mi,
            second: s,
            nanos: 0,
            zone: z,
        },
        i - at,
    ))
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

/// Skips a syslog host and tag (`host proc[pid]: `) after the syslog time; returns the offset
/// of the message, or `at` when the shape does not fit.
fn syslog_tag(b: &[u8], at: usize) -> usize {
    let i = skip_ws(b, at);
    let host_end = i + b[i..].iter().take(256).take_while(|&&c| c != b' ').count();
    let j = host_end + 1;
    let tag_len = b.get(j..).map_or(0, |r| {
        r.iter()
            .take(128)
            .take_while(|&&c| c != b' ' && c != b':')
            .count()
    });
    let k = j + tag_len;
    if tag_len > 0 && b.get(k) == Some(&b':') {
        return skip_ws(b, k + 1);
    }
    at
}

/// Skips klog's `  89518 file.go:322] ` after its time.
fn klog_tail(b: &[u8], at: usize) -> usize {
    let i = skip_ws(b, at);
    let pid = b[i.min(b.len())..]
        .iter()
        .take(12)
        .take_while(|c| c.is_ascii_digit())
        .count();
    if pid == 0 {
        return at;
    }
    let j = i + pid;
    match memchr::memchr(b']', &b[j..b.len().min(j + 200)]) {
        Some(p) => skip_ws(b, j + p + 1),
        None => at,
    }
}

/// A time value after a JSON key: a string in one of the ISO shapes, or epoch seconds.
fn json_time(b: &[u8]) -> Option<RawTime> {
    let keys = [
        lit!(b"\"time\""),
        lit!(b"\"timestamp\""),
        lit!(b"\"@timestamp\""),
        lit!(b"\"ts\""),
        lit!(b"\"start_time\""),
    ];
    for key in keys {
        for p in key.find_iter(b) {
            let mut i = skip_ws(b, p + key.needle().len());
            if b.get(i) != Some(&b':') {
                continue;
            }
            i = skip_ws(b, i + 1);
            match b.get(i) {
                Some(b'"') => {
                    if let Some((t, _)) = iso(b, i + 1).or_else(|| slashed(b, i + 1)) {
                        return Some(t);
                    }
                }
                Some(c) if c.is_ascii_digit() => {
                    if let Some(t) = epoch(b, i) {
                        return Some(t);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// Epoch seconds (zap's `"ts":1591234567.123`) or milliseconds (13 digits).
fn epoch(b: &[u8], at: usize) -> Option<RawTime> {
    let n = b[at..]
        .iter()
        .take(14)
        .take_while(|c| c.is_ascii_digit())
        .count();
    let whole = i64::from(digits(b, at, n.min(9))?);
    let whole = if n > 9 {
        let rest = i64::from(digits(b, at + 9, n - 9)?);
        whole * 10i64.pow(u32::try_from(n - 9).ok()?) + rest
    } else {
        whole
    };
    let ts = match n {
        10 => {
            let (nanos, _) = fraction(b, at + n);
            Timestamp::new(whole, nanos).ok()?
        }
        13 => Timestamp::from_millisecond(whole).ok()?,
        _ => return None,
    };
    let dt = Offset::UTC.to_datetime(ts);
    Some(RawTime {
        year: Some(dt.year()),
        month: dt.month(),
        day: dt.day(),
        hour: dt.hour(),
        minute: dt.minute(),
        second: dt.second(),
        nanos: dt.subsec_nanosecond(),
        zone: Zone::Offset(0),
    })
}

/// logfmt `time=…` / `ts=…` (quoted or not) at the start of `b[at..]`.
fn logfmt_time(b: &[u8], at: usize) -> Option<RawTime> {
    let rest = b.get(at..)?;
    let vstart = if rest.starts_with(b"time=") {
        5
    } else if rest.starts_with(b"ts=") {
        3
    } else {
        return None;
    };
    let mut i = at + vstart;
    if b.get(i) == Some(&b'"') {
        i += 1;
    }
    iso(b, i).map(|(t, _)| t)
}

/// Reads the prefix of `line`: the best timestamp and where the message starts.
///
/// When several timestamps are stacked (kubectl's, then the application's), the first complete
/// one (year and zone written) wins; otherwise the first one found.
pub(crate) fn parse_prefix(line: &[u8]) -> Prefix {
    let mut best: Option<RawTime> = None;
    let keep = |t: RawTime, best: &mut Option<RawTime>| match best {
        Some(b) if b.is_complete() => {}
        Some(_) if !t.is_complete() => {}
        _ => *best = Some(t),
    };
    let mut i = skip_ws(line, 0);
    // JSON objects and pretty-printed JSON members carry their time in a key.
    if matches!(line.get(i), Some(b'{' | b'"'))
        && let Some(t) = json_time(line)
    {
        keep(t, &mut best);
    }
    for _ in 0..4 {
        let start = i;
        // Syslog PRI.
        if line.get(i) == Some(&b'<') {
            let n = line[i + 1..]
                .iter()
                .take(4)
                .take_while(|c| c.is_ascii_digit())
                .count();
            if n > 0 && line.get(i + 1 + n) == Some(&b'>') {
                i += n + 2;
                // RFC 5424 version.
                if line.get(i) == Some(&b'1') && line.get(i + 1) == Some(&b' ') {
                    i += 2;
                }
            }
        }
        if let Some(t) = logfmt_time(line, i) {
            keep(t, &mut best);
            break;
        }
        if let Some((t, n)) = iso(line, i) {
            keep(t, &mut best);
            i = skip_ws(line, i + n);
        } else if let Some((t, n)) = slashed(line, i) {
            keep(t, &mut best);
            i = skip_ws(line, i + n);
        } else if let Some((t, n)) = js_date(line, i) {
            keep(t, &mut best);
            i = skip_ws(line, i + n);
        } else if let Some((t, n)) = syslog(line, i) {
            keep(t, &mut best);
            i = syslog_tag(line, i + n);
        } else if let Some((t, n)) = klog(line, i) {
            keep(t, &mut best);
            i = klog_tail(line, i + n);
        } else if line.get(i) == Some(&b'[') {
            // Envoy `[2020-…]`, or linkerd2-proxy's `[   0.001881s]` uptime.
            if let Some((t, n)) = iso(line, i + 1) {
                if line.get(i + 1 + n) == Some(&b']') {
                    keep(t, &mut best);
                    i = skip_ws(line, i + n + 2);
                }
            } else {
                let j = skip_ws(line, i + 1);
                let n = line[j.min(line.len())..]
                    .iter()
                    .take(16)
                    .take_while(|c| c.is_ascii_digit() || **c == b'.')
                    .count();
                if n > 0 && line.get(j + n..j + n + 2) == Some(b"s]") {
                    i = skip_ws(line, j + n + 2);
                }
            }
        }
        if i == start {
            break;
        }
    }
    Prefix {
        time: best,
        msg_start: i.min(line.len()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn ts(line: &str) -> Option<String> {
        let p = parse_prefix(line.as_bytes());
        let r = p.time?.resolve(Some(2019), None, None, None)?;
        Some(r.at.to_string())
    }

    #[test]
    fn year_precedence() {
        let t = parse_prefix(b"Mar 19 08:02:43 host app[1]: x")
            .time
            .unwrap();
        let y = |r: Option<Resolved>| r.map(|r| (r.at.to_string(), r.year_assumed));
        assert_eq!(t.resolve(None, None, None, None), None);
        assert_eq!(
            y(t.resolve(None, None, Some(2026), None)),
            Some(("2026-03-19T08:02:43Z".into(), true))
        );
        assert_eq!(
            y(t.resolve(None, Some(2025), Some(2026), None)),
            Some(("2025-03-19T08:02:43Z".into(), true))
        );
        assert_eq!(
            y(t.resolve(Some(2024), Some(2025), Some(2026), None)),
            Some(("2024-03-19T08:02:43Z".into(), false))
        );
    }

    #[test]
    fn stacked_prefixes() {
        assert_eq!(
            ts("2020-11-22T20:04:54.223002528Z [2020-11-22T20:04:32.765Z] \"GET /x\" 500"),
            Some("2020-11-22T20:04:54.223002528Z".into())
        );
        assert_eq!(
            ts(
                "<30>Mar 19 08:02:43 host kubelet[89518]: E0319 08:02:43.743872   89518 r.go:322] x"
            ),
            Some("2019-03-19T08:02:43Z".into())
        );
        let line =
            b"<30>Mar 19 08:02:43 host kubelet[89518]: E0319 08:02:43.743872   89518 r.go:322] msg";
        let p = parse_prefix(line);
        assert_eq!(&line[p.msg_start..], b"msg");
    }

    #[test]
    fn single_prefixes() {
        for (line, want) in [
            ("2017/05/23 21:52:25 [error] x", "2017-05-23T21:52:25Z"),
            (
                "2019-10-22 14:01:22,214 WARNING x",
                "2019-10-22T14:01:22.214Z",
            ),
            (
                "Mon Jun 02 2025 13:24:11 GMT+0200 [error] x",
                "2025-06-02T11:24:11Z",
            ),
            (
                "time=2026-01-03T23:17:48.232653954Z level=info",
                "2026-01-03T23:17:48.232653954Z",
            ),
            (
                "{\"level\":\"error\",\"ts\":1591234567.5,\"msg\":\"x\"}",
                "2020-06-04T01:36:07.5Z",
            ),
            (
                "    \"timestamp\": \"2023-09-05 19:00:16.934Z\",",
                "2023-09-05T19:00:16.934Z",
            ),
            (
                "W0926 11:51:48.827795       1 c.go:1120] x",
                "2019-09-26T11:51:48.827795Z",
            ),
        ] {
            assert_eq!(ts(line).as_deref(), Some(want), "{line}");
        }
        assert_eq!(ts("no time here"), None);
    }

    #[test]
    fn linkerd_uptime_is_skipped() {
        let line = b"[     0.001881s]  INFO ThreadId(01) linkerd2_proxy: x";
        let p = parse_prefix(line);
        assert!(p.time.is_none());
        assert!(line[p.msg_start..].starts_with(b"INFO"));
    }
}
