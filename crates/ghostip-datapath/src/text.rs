//! Shared helpers for the line-oriented parsers: line drivers, a quote-aware tokenizer and
//! address parsing.
//!
//! The drivers feed one line at a time to a [`LineSink`], from a `&str`, a `&[u8]` or a
//! [`BufRead`] reader with one reused buffer, so memory does not grow with dump size.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};

use crate::error::ParseError;
use crate::format::Format;

/// A small, fast, non-cryptographic hasher for chain names (FxHash); inputs are dumps,
/// not adversarial network traffic.
#[derive(Default)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u64(&mut self, v: u64) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Longest line the line-oriented parsers read, in bytes before its `\n`: a longer line is
/// skipped and reported to the sink ([`LineSink::overlong`]) with its number and first
/// bytes, on every path (slice or stream), and a stream reader never holds more than this
/// of one line.
pub const MAX_LINE: usize = 1 << 20;

/// The skip reason of a line longer than [`MAX_LINE`].
pub const OVERLONG_LINE: &str = "line longer than 1 MiB (skipped)";

/// How many bytes of an overlong line are handed to the sink.
const OVERLONG_HEAD: usize = 256;

/// The first bytes of an overlong line.
fn overlong_head(line: &[u8]) -> &[u8] {
    line.get(..OVERLONG_HEAD.min(line.len())).unwrap_or(line)
}

/// A consumer of lines (1-based numbers, without the line terminator).
pub(crate) trait LineSink {
    fn line(&mut self, no: usize, line: &str);

    /// Line `no` was longer than [`MAX_LINE`] and is skipped; `head` is its start (as text,
    /// invalid UTF-8 replaced).
    fn overlong(&mut self, no: usize, head: &str);
}

/// Feeds every line of `input` to `sink`.
pub(crate) fn drive_str(input: &str, sink: &mut impl LineSink) {
    for (i, line) in input.split('\n').enumerate() {
        if line.len() > MAX_LINE {
            sink.overlong(i + 1, &utf8(overlong_head(line.as_bytes())));
            continue;
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        sink.line(i + 1, line);
    }
}

/// Feeds every line of `input` to `sink`; invalid UTF-8 is replaced by U+FFFD.
pub(crate) fn drive_bytes(input: &[u8], sink: &mut impl LineSink) {
    let mut no = 0;
    let mut start = 0;
    while start < input.len() {
        let end = memchr::memchr(b'\n', input.get(start..).unwrap_or_default())
            .map_or(input.len(), |i| start + i);
        no += 1;
        let raw = input.get(start..end).unwrap_or_default();
        if raw.len() > MAX_LINE {
            sink.overlong(no, &utf8(overlong_head(raw)));
        } else {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            sink.line(no, &utf8(raw));
        }
        start = end + 1;
    }
}

/// Feeds every line of `reader` to `sink` as text, reusing one buffer (lines that are
/// not UTF-8 get U+FFFD replacements, see [`utf8`]).
pub(crate) fn drive_reader<R: BufRead>(
    reader: R,
    format: Format,
    sink: &mut impl LineSink,
) -> Result<(), ParseError> {
    drive_reader_raw(reader, format, &mut AsText(sink))
}

/// Hands raw lines to a [`LineSink`] as text.
struct AsText<'a, S>(&'a mut S);

impl<S: LineSink> ByteLineSink for AsText<'_, S> {
    fn line_bytes(&mut self, no: usize, line: &[u8]) {
        self.0.line(no, &utf8(line));
    }

    fn overlong_bytes(&mut self, no: usize, head: &[u8]) {
        self.0.overlong(no, &utf8(head));
    }
}

/// A consumer of raw lines (1-based numbers, without the line terminator), for parsers
/// that read most lines as bytes and validate UTF-8 only where they need text.
pub(crate) trait ByteLineSink {
    fn line_bytes(&mut self, no: usize, line: &[u8]);

    /// Line `no` was longer than [`MAX_LINE`] and is skipped; `head` is its start.
    fn overlong_bytes(&mut self, no: usize, head: &[u8]);

    /// Reads the line at the start of `rest` (which runs on past it, to the end of the
    /// buffer) when the sink knows its layout, finding its end while reading it: returns
    /// the line's length, its `\n` being at that position, after recording exactly what
    /// [`ByteLineSink::line_bytes`] would have for it. `None` (nothing recorded) hands the
    /// line to the usual split on `\n`. Saves the newline search on the few layouts that
    /// make up nearly all of a large dump. The drivers never pass more than
    /// `MAX_LINE + 1` bytes, so a line it takes is never overlong.
    fn line_at(&mut self, _rest: &[u8]) -> Option<usize> {
        None
    }
}

/// `rest` cut to what [`ByteLineSink::line_at`] may see: a line it finds there is at most
/// [`MAX_LINE`] bytes long.
fn line_at_window(rest: &[u8]) -> &[u8] {
    rest.get(..(MAX_LINE + 1).min(rest.len())).unwrap_or(rest)
}

/// Feeds every line of `input` to `sink` as bytes (split on `\n`, a trailing `\r` removed).
pub(crate) fn drive_raw(input: &[u8], sink: &mut impl ByteLineSink) {
    let mut no = 0;
    let mut start = 0;
    loop {
        let rest = input.get(start..).unwrap_or_default();
        if let Some(len) = sink.line_at(line_at_window(rest)) {
            no += 1;
            start += len + 1;
            continue;
        }
        let end = memchr::memchr(b'\n', rest).map_or(input.len(), |i| start + i);
        no += 1;
        let raw = input.get(start..end).unwrap_or_default();
        if raw.len() > MAX_LINE {
            sink.overlong_bytes(no, overlong_head(raw));
        } else {
            sink.line_bytes(no, raw.strip_suffix(b"\r").unwrap_or(raw));
        }
        if end >= input.len() {
            return;
        }
        start = end + 1;
    }
}

/// Feeds every line of `reader` to `sink` as bytes, reusing one buffer: no UTF-8
/// validation here (the sink validates the lines it reads as text). A line is held (in the
/// carry between two buffers) only up to [`MAX_LINE`] bytes: past that it is reported as
/// overlong and the rest of it is read and dropped.
pub(crate) fn drive_reader_raw<R: BufRead>(
    mut reader: R,
    format: Format,
    sink: &mut impl ByteLineSink,
) -> Result<(), ParseError> {
    let mut carry: Vec<u8> = Vec::new();
    let mut no = 0;
    // Inside an overlong line (already reported): its bytes are dropped up to its `\n`.
    let mut skipping = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(ParseError::Read {
                    format,
                    line: no,
                    message: e.to_string(),
                });
            }
        };
        if buf.is_empty() {
            if !carry.is_empty() {
                no += 1;
                sink.line_bytes(no, carry.strip_suffix(b"\r").unwrap_or(&carry));
            }
            return Ok(());
        }
        let consumed = buf.len();
        let mut start = 0;
        loop {
            let rest = buf.get(start..).unwrap_or_default();
            if skipping {
                match memchr::memchr(b'\n', rest) {
                    Some(len) => {
                        skipping = false;
                        start += len + 1;
                        continue;
                    }
                    None => break,
                }
            }
            if carry.is_empty()
                && let Some(len) = sink.line_at(line_at_window(rest))
            {
                no += 1;
                start += len + 1;
                continue;
            }
            let Some(len) = memchr::memchr(b'\n', rest) else {
                if carry.len() + rest.len() > MAX_LINE {
                    no += 1;
                    report_overlong(sink, no, &mut carry, rest);
                    skipping = true;
                } else {
                    carry.extend_from_slice(rest);
                }
                break;
            };
            no += 1;
            let part = rest.get(..len).unwrap_or_default();
            if carry.len() + part.len() > MAX_LINE {
                report_overlong(sink, no, &mut carry, part);
            } else if carry.is_empty() {
                sink.line_bytes(no, part.strip_suffix(b"\r").unwrap_or(part));
            } else {
                carry.extend_from_slice(part);
                sink.line_bytes(no, carry.strip_suffix(b"\r").unwrap_or(&carry));
                carry.clear();
            }
            start += len + 1;
        }
        reader.consume(consumed);
    }
}

/// Reports line `no`, made of `carry` then `more`, as overlong, and empties the carry.
fn report_overlong(sink: &mut impl ByteLineSink, no: usize, carry: &mut Vec<u8>, more: &[u8]) {
    if carry.len() < OVERLONG_HEAD {
        let take = (OVERLONG_HEAD - carry.len()).min(more.len());
        carry.extend_from_slice(more.get(..take).unwrap_or_default());
    }
    sink.overlong_bytes(no, overlong_head(carry));
    carry.clear();
    carry.shrink_to(OVERLONG_HEAD);
}

/// The line as text: borrowed when it is valid UTF-8 (the common case, checked with the
/// fast validator), with U+FFFD replacements otherwise.
pub(crate) fn utf8(raw: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(raw) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(raw),
    }
}

/// Splits a line into whitespace-separated tokens; `"…"` is one token (quotes removed,
/// escapes kept: see [`unescape`]).
pub(crate) struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Tokens<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        Self { rest: s }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.rest.as_bytes();
        let start = bytes.iter().position(|&b| b != b' ' && b != b'\t')?;
        if bytes.get(start) == Some(&b'"') {
            // Quoted: find the closing quote that is not escaped.
            let mut i = start + 1;
            while let Some(&b) = bytes.get(i) {
                match b {
                    b'\\' => i += 2,
                    b'"' => break,
                    _ => i += 1,
                }
            }
            let end = i.min(bytes.len());
            let inner = self.rest.get(start + 1..end).unwrap_or_default();
            self.rest = self
                .rest
                .get((end + 1).min(bytes.len())..)
                .unwrap_or_default();
            return Some(inner);
        }
        let len = bytes
            .get(start..)
            .unwrap_or_default()
            .iter()
            .position(|&b| b == b' ' || b == b'\t')
            .unwrap_or(bytes.len() - start);
        let tok = self.rest.get(start..start + len).unwrap_or_default();
        self.rest = self.rest.get(start + len..).unwrap_or_default();
        Some(tok)
    }
}

/// Removes backslash escapes from a quoted token (`\"` → `"`, `\\` → `\`).
pub(crate) fn unescape(s: &str) -> Cow<'_, str> {
    if !s.contains('\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Parses `1.2.3.4:80` or `[fd00::1]:80`.
pub(crate) fn parse_socket(s: &str) -> Option<SocketAddr> {
    if let Some(sa) = parse_socket_v4_plain(s.as_bytes()) {
        return Some(sa);
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa);
    }
    None
}

/// [`parse_socket`] of bytes (not UTF-8: `None`).
pub(crate) fn parse_socket_bytes(b: &[u8]) -> Option<SocketAddr> {
    if let Some(sa) = parse_socket_v4_plain(b) {
        return Some(sa);
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The common shape of a DNAT target, `1.2.3.4:80` with no leading zeros, read without
/// the standard library's general parser. Anything else gives `None` and is left to
/// `SocketAddr::from_str`, so the accepted set and the values are the same.
pub(crate) fn parse_socket_v4_plain(b: &[u8]) -> Option<SocketAddr> {
    match parse_socket_v4_prefix(b) {
        Some((sa, end)) if end == b.len() => Some(sa),
        _ => None,
    }
}

/// [`parse_socket_v4_plain`] on the start of `b`: the address and where it ends (the
/// caller checks what follows).
pub(crate) fn parse_socket_v4_prefix(b: &[u8]) -> Option<(SocketAddr, usize)> {
    /// A decimal number of 1..=`max_digits` digits from `at`, no leading zero (a `0`
    /// is read alone, so a digit after it fails the caller's separator check); returns
    /// it and the position after it.
    #[inline(always)]
    fn number(b: &[u8], at: usize, max_digits: usize) -> Option<(u32, usize)> {
        let digit = |i: usize| {
            b.get(i)
                .map(|c| c.wrapping_sub(b'0'))
                .filter(|&c| c < 10)
                .map(u32::from)
        };
        let mut v = digit(at)?;
        let mut i = at + 1;
        if v != 0 {
            while i - at < max_digits {
                let Some(d) = digit(i) else { break };
                v = v * 10 + d;
                i += 1;
            }
        }
        Some((v, i))
    }
    let mut octets = [0u8; 4];
    let mut at = 0;
    for (k, o) in octets.iter_mut().enumerate() {
        let (v, next) = number(b, at, 3)?;
        *o = u8::try_from(v).ok()?;
        let sep = if k == 3 { b':' } else { b'.' };
        if b.get(next) != Some(&sep) {
            return None;
        }
        at = next + 1;
    }
    let (port, end) = number(b, at, 5)?;
    let port = u16::try_from(port).ok()?;
    Some((SocketAddr::new(IpAddr::from(octets), port), end))
}

/// Parses an address with an optional host prefix (`/32`, `/128`); other prefixes are not
/// single addresses and give `None`.
pub(crate) fn parse_host(s: &str) -> Option<IpAddr> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    match (prefix, ip) {
        (None, _) => Some(ip),
        (Some("32"), IpAddr::V4(_)) | (Some("128"), IpAddr::V6(_)) => Some(ip),
        _ => None,
    }
}

/// Parses an address (`1.2.3.4`, `fd00::1`, `[fd00::1]`).
pub(crate) fn parse_ip(s: &str) -> Option<IpAddr> {
    let s = s
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s);
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_handle_quotes_and_escapes() {
        let toks: Vec<_> = Tokens::new(r#"-A X -m comment --comment "a \"b\" c" -j Y"#).collect();
        assert_eq!(
            toks,
            vec![
                "-A",
                "X",
                "-m",
                "comment",
                "--comment",
                r#"a \"b\" c"#,
                "-j",
                "Y"
            ]
        );
        assert_eq!(unescape(r#"a \"b\" c"#), r#"a "b" c"#);
        // Unterminated quote: the rest of the line is the token.
        let toks: Vec<_> = Tokens::new(r#"--comment "abc"#).collect();
        assert_eq!(toks, vec!["--comment", "abc"]);
        let toks: Vec<_> = Tokens::new("\"").collect();
        assert_eq!(toks, vec![""]);
    }

    #[test]
    fn hosts_and_sockets() {
        assert_eq!(parse_host("10.0.0.1/32"), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(parse_host("10.0.0.0/8"), None);
        assert_eq!(parse_host("fd00::1/128"), Some("fd00::1".parse().unwrap()));
        assert_eq!(
            parse_socket("[fd00::1]:53"),
            Some("[fd00::1]:53".parse().unwrap())
        );
        assert_eq!(parse_socket("10.1.2.3:x"), None);
        // Shapes the fast IPv4 path leaves to the standard parser.
        for s in [
            "10.1.2.3:080",
            "010.1.2.3:80",
            "10.1.2.3:65536",
            "10.1.2.256:1",
            "1.2.3:4",
            "10.1.2.3:",
            "10.1.2.3:8080 ",
            "1.2.3.4.5:6",
            "10.1.2.3:00",
            "[::ffff:1.2.3.4]:9",
        ] {
            assert_eq!(parse_socket(s), s.parse().ok(), "{s}");
        }
    }

    proptest::proptest! {
        /// The fast IPv4 path accepts exactly what `SocketAddr::from_str` accepts, with
        /// the same value.
        #[test]
        fn socket_fast_path_agrees_with_std(s in "[0-9.:]{0,24}") {
            proptest::prop_assert_eq!(parse_socket(&s), s.parse::<SocketAddr>().ok());
        }

        #[test]
        fn socket_fast_path_agrees_with_std_near_valid(
            a in 0u32..300, b in 0u32..300, c in "0?[0-9]{1,3}", port in "0?[0-9]{1,6}",
        ) {
            let s = format!("{a}.{b}.{c}.7:{port}");
            proptest::prop_assert_eq!(parse_socket(&s), s.parse::<SocketAddr>().ok());
        }
    }
}
