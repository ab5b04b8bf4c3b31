//! Lines are bytes: a non-UTF-8 byte hides no failure, a line of NULs costs one pass, and a
//! stream that fails part way (a truncated gzip, junk after the last member) has every byte
//! decompressed before the failure scanned.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use ghostip_logs::{
    Kind, RAW_EXCERPT_MAX, ScanError, ScanOptions, Scanner, open_reader, scan_bytes,
};

fn opts() -> ScanOptions {
    ScanOptions {
        fallback_year: Some(2024),
        ..ScanOptions::default()
    }
}

#[test]
fn a_latin1_byte_hides_no_failure() {
    // 50 timeouts, each line holding a Latin-1 "é" (0xE9, not UTF-8), before and after the
    // target, in several writers' shapes.
    let mut data = Vec::new();
    for i in 0..50u8 {
        let line: &[u8] = match i % 5 {
            0 => b"2024-05-01T15:42:10Z caf\xe9 dial tcp 10.0.0.1:80: i/o timeout\n",
            1 => b"2024/05/01 15:42:10 dial tcp 10.0.0.1:80: i/o timeout (r\xe9seau)\n",
            2 => b"2024-05-01 15:42:10.123 ERROR [main] Cr\xe9dit - java.net.SocketTimeoutException: connect timed out: /10.0.0.1:80\n",
            3 => b"2024/05/01 15:42:10 [error] 7#7: *1 upstream timed out (110: Connection timed out) while connecting to upstream, client: 10.0.0.9, server: caf\xe9, upstream: \"http://10.0.0.1:80/\", host: \"shop\"\n",
            _ => b"2024-05-01T15:42:10Z \xc3 broken utf-8 \xff dial tcp 10.0.0.1:80: i/o timeout \xe9\n",
        };
        data.extend_from_slice(line);
    }
    let (found, stats) = scan_bytes(&data, opts()).unwrap();
    assert_eq!(found.len(), 50, "{found:#?}");
    assert!(found.iter().all(|f| f.kind == Kind::Timeout));
    assert!(found.iter().all(|f| f.target == "10.0.0.1:80".parse().ok()));
    assert_eq!(stats.binary_lines, 0);
    assert!(stats.warnings().iter().all(|w| !w.contains("binary")));
    // The excerpt is text (the byte decoded as U+FFFD).
    assert!(found[0].raw.contains("caf\u{fffd}"), "{}", found[0].raw);
}

#[test]
fn the_excerpt_of_a_line_of_latin1_stays_within_its_bound() {
    // Every 0xE9 is shown as U+FFFD (three bytes): the excerpt is cut again after decoding
    // (found by fuzzing once such lines were scanned).
    let mut line = b"2024-05-01T15:42:10Z dial tcp 10.0.0.1:80: i/o timeout ".to_vec();
    line.extend_from_slice(&[0xE9; 4000]);
    line.push(b'\n');
    let (found, _) = scan_bytes(&line, opts()).unwrap();
    assert_eq!(found.len(), 1);
    assert!(
        found[0].raw.len() <= RAW_EXCERPT_MAX,
        "{}",
        found[0].raw.len()
    );
    assert!(found[0].raw.ends_with('\u{fffd}'));
}

/// The fastest of `rounds` scans of `data` (the least disturbed by other processes).
fn fastest_scan(data: &[u8], rounds: usize) -> Duration {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            let (found, stats) = scan_bytes(data, opts()).unwrap();
            let took = t.elapsed();
            assert_eq!(found.len(), 1);
            assert!(stats.binary_lines > 0);
            took
        })
        .min()
        .unwrap_or_default()
}

/// `total` bytes of lines of `line` NULs each, and one failure after them.
fn nul_lines(total: usize, line: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(total + 100);
    while data.len() < total {
        data.resize(data.len() + line, 0);
        data.push(b'\n');
    }
    data.extend_from_slice(b"dial tcp 10.0.0.1:80: connect: connection refused\n");
    data
}

#[test]
fn lines_of_nuls_cost_one_pass_whatever_their_length() {
    // The same 4 MiB as 4 KiB lines and as 256 KiB lines: linear work takes about the same time
    // for both; work quadratic in the line (the cost per NUL growing with the line) takes 64
    // times as long for the long lines. The bound leaves a factor of 8 for noise (the fastest
    // of 3 runs each, measured in the same test).
    let total = 4 << 20;
    let short = nul_lines(total, 4 << 10);
    let long = nul_lines(total, 256 << 10);
    let (_, s) = scan_bytes(&short, opts()).unwrap();
    assert_eq!(s.binary_lines, 1024);
    let (_, s) = scan_bytes(&long, opts()).unwrap();
    assert_eq!(s.binary_lines, 16);
    let t_short = fastest_scan(&short, 3);
    let t_long = fastest_scan(&long, 3);
    assert!(
        t_long < t_short * 8 + Duration::from_millis(20),
        "256 KiB lines {t_long:?}, 4 KiB lines {t_short:?}"
    );
}

#[test]
fn nul_lines_are_counted_once_each() {
    let data = b"\x00\x00\x00\nok\n\x00a\x00b\x00\nx\x00\n\n\x00".to_vec();
    let (_, s) = scan_bytes(&data, opts()).unwrap();
    assert_eq!(s.binary_lines, 4);
    assert_eq!(s.lines, 6);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// The lines of a log with `n` failures, one per line, numbered in their target's port.
fn failures(n: usize) -> Vec<u8> {
    let mut data = Vec::new();
    for i in 0..n {
        data.extend_from_slice(
            format!(
                "2024-05-01T15:42:10Z dial tcp 10.0.{}.{}:{}: connect: connection refused\n",
                i / 250 % 250,
                i % 250,
                1000 + i % 50_000
            )
            .as_bytes(),
        );
    }
    data
}

/// What a decoder gives before it fails: the bytes a scan must see.
fn decompressed_before_error(gz: &[u8]) -> Vec<u8> {
    let mut r = flate2::read::MultiGzDecoder::new(gz);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

fn scan_stream(input: Vec<u8>) -> (usize, Result<(), ScanError>) {
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut n = 0;
    let r = scanner.scan(
        open_reader(std::io::Cursor::new(input)).unwrap(),
        &mut |_| {
            n += 1;
        },
    );
    (n, r)
}

#[test]
fn a_truncated_gzip_has_every_decompressed_line_scanned_then_fails() {
    let log = failures(40_000);
    let gz = gzip(&log);
    for cut in [gz.len() / 3, gz.len() / 2, gz.len() - 9, gz.len() - 1] {
        let part = gz[..cut].to_vec();
        let seen = decompressed_before_error(&part);
        assert!(!seen.is_empty() && seen.len() <= log.len());
        let (want, _) = scan_bytes(&seen, opts()).unwrap();
        let (got, r) = scan_stream(part);
        assert!(matches!(r, Err(ScanError::Io(_))), "cut {cut}: {r:?}");
        assert_eq!(got, want.len(), "cut {cut} of {}", gz.len());
    }
}

#[test]
fn junk_after_a_complete_gzip_loses_no_line() {
    let log = failures(40_000);
    let mut gz = gzip(&log);
    gz.extend_from_slice(b"junk!!");
    let (got, r) = scan_stream(gz);
    assert!(matches!(r, Err(ScanError::Io(_))), "{r:?}");
    assert_eq!(got, 40_000);
}

#[test]
fn a_read_error_mid_line_scans_the_line_read_so_far() {
    /// Gives `data`, then fails.
    struct ThenFail<'a>(&'a [u8]);
    impl Read for ThenFail<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let mut log = failures(3);
    log.extend_from_slice(b"dial tcp 10.9.9.9:80: connect: connection refused");
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut got = Vec::new();
    let r = scanner.scan(ThenFail(&log), &mut |f| got.push(f));
    assert!(matches!(r, Err(ScanError::Io(_))), "{r:?}");
    assert_eq!(got.len(), 4);
    assert_eq!(got[3].target, "10.9.9.9:80".parse().ok());
    assert_eq!(scanner.stats().lines, 4);
}
