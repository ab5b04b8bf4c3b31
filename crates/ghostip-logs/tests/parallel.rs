//! The parallel scan of a seekable input gives the sequential scan's failures, line numbers and
//! counts, however the input is cut into segments and whatever the number of threads: events
//! spanning segment cuts, years inferred from earlier segments, unknown-shape examples, binary,
//! overlong and unterminated lines.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::num::NonZeroUsize;

use ghostip_logs::{ConnFailure, ParallelOptions, ReadAt, ScanOptions, ScanStats, Scanner};
use ghostip_testkit::logs::{GenConfig, LogGenerator};
use proptest::prelude::*;

fn opts() -> ScanOptions {
    ScanOptions {
        fallback_year: Some(2020),
        ..ScanOptions::default()
    }
}

fn sequential(data: &[u8]) -> (Vec<ConnFailure>, ScanStats) {
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut out = Vec::new();
    scanner.scan(data, &mut |f| out.push(f)).unwrap();
    (out, scanner.into_stats())
}

fn parallel<S: ReadAt + ?Sized>(
    src: &S,
    len: u64,
    threads: usize,
    segment: u64,
) -> (Vec<ConnFailure>, ScanStats) {
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut out = Vec::new();
    let par = ParallelOptions {
        threads: NonZeroUsize::new(threads).unwrap(),
        segment_bytes: segment,
    };
    scanner
        .scan_parallel(src, len, par, &mut |f| out.push(f))
        .unwrap();
    (out, scanner.into_stats())
}

/// Lines whose meaning depends on lines before them, and lines the scanner skips or cuts.
fn tricky(i: usize) -> Vec<u8> {
    let mut s = String::new();
    // A Java event over five lines: the kind comes from the first, the target from the last.
    s.push_str(&format!(
        "2024-05-01 15:42:{:02}.123 ERROR [main] c.e.Client - call failed\n\
         java.net.SocketException: Connection reset\n\
         \tat java.base/sun.nio.ch.NioSocketImpl.implRead(NioSocketImpl.java:323)\n\
         \tat a.b.C.call(C.java:{i})\n\
         Caused by: java.net.ConnectException: Failed to connect to inventory/10.244.3.{}:8080\n",
        i % 60,
        i % 250
    ));
    // Yearless klog and syslog lines: their year comes from the last full timestamp on a
    // candidate line, here one that is dismissed, which may be in an earlier segment.
    s.push_str(&format!(
        "{}-03-19T08:02:00Z probe config: timeoutSeconds=30\n",
        2010 + i % 10
    ));
    s.push_str(&format!(
        "E0319 08:02:{:02}.743872   89518 reflector.go:322] Get \"https://10.96.0.1:443/api\": dial tcp 10.96.0.1:443: connect: connection refused\n",
        i % 60
    ));
    s.push_str(&format!(
        "Mar 19 08:03:{:02} node-1 app[77]: dial tcp 10.44.0.{}:9090: i/o timeout\n",
        i % 60,
        i % 200
    ));
    // A Node.js error object: the bare `Error:` line and its properties form one event, timed
    // by the line before it.
    s.push_str(&format!(
        "2023-02-0{}T10:00:00Z request failed\n\
         Error: connect ECONNREFUSED 10.0.0.{}:3000\n    at TCPConnectWrap.afterConnect [as oncomplete] (net.js:1141:16) {{\n  errno: -111,\n  code: 'ECONNREFUSED',\n  syscall: 'connect'\n}}\n",
        1 + i % 9,
        i % 250
    ));
    // grpc-go logs one dial failure twice.
    s.push_str(&format!(
        "I0501 15:42:11.000000       1 clientconn.go:1] Creating new client transport to \"{{Addr: \\\"10.1.2.{}:50051\\\"}}\": connection error: desc = \"transport: Error while dialing dial tcp 10.1.2.{}:50051: connect: connection refused\"\n\
         W0501 15:42:11.000100       1 clientconn.go:2] grpc: addrConn.createTransport failed to connect to {{10.1.2.{}:50051}}. Err: connection error: desc = \"transport: Error while dialing dial tcp 10.1.2.{}:50051: connect: connection refused\". Reconnecting...\n",
        i % 200, i % 200, i % 200, i % 200
    ));
    // Unknown shapes (more than the 32 that keep an example, over all blocks).
    let word: String = [b'a' + (i % 26) as u8, b'a' + (i / 26 % 26) as u8]
        .iter()
        .map(|&c| char::from(c))
        .collect();
    s.push_str(&format!(
        "zz{word} gremlin: connection refused by the other side\n"
    ));
    // Garbled lines and a CRLF line.
    let mut out = s.into_bytes();
    out.extend_from_slice(b"\x00\x01 connection refused\n\xff\xfe reset by peer\n");
    out.extend_from_slice(b"dial tcp 10.7.7.7:80: connect: connection refused\r\n");
    // Long lines: the look-back of the untimed failure after them is cut at 16 KiB.
    for _ in 0..3 {
        out.extend_from_slice(&[b'x'; 6000]);
        out.push(b'\n');
    }
    out.extend_from_slice(b"java.net.ConnectException: Connection refused: /10.9.0.1:8443\n");
    out
}

fn generated(bytes: usize, seed: u64, every: usize) -> Vec<u8> {
    let mut g = LogGenerator::new(GenConfig {
        seed,
        error_ratio: 0.03,
        ..GenConfig::default()
    });
    let mut data = Vec::new();
    let mut i = 0;
    while data.len() < bytes {
        g.fill(&mut data, every);
        data.extend_from_slice(&tricky(i));
        i += 1;
    }
    data
}

/// The same scans over bytes in memory, in place (what a memory-mapped file gets): one thread
/// (`scan_slice`) and `threads` threads (`scan_parallel_slice`).
fn in_place(data: &[u8], threads: usize, segment: u64) -> [(Vec<ConnFailure>, ScanStats); 2] {
    let mut one = Scanner::new(opts()).unwrap();
    let mut one_out = Vec::new();
    one.scan_slice(data, &mut |f| one_out.push(f));
    let mut par = Scanner::new(opts()).unwrap();
    let mut par_out = Vec::new();
    let po = ParallelOptions {
        threads: NonZeroUsize::new(threads).unwrap(),
        segment_bytes: segment,
    };
    par.scan_parallel_slice(data, po, &mut |f| par_out.push(f))
        .unwrap();
    [(one_out, one.into_stats()), (par_out, par.into_stats())]
}

fn assert_same(data: &[u8], threads: usize, segment: u64) {
    let (want, want_stats) = sequential(data);
    for (i, (got, got_stats)) in in_place(data, threads, segment).into_iter().enumerate() {
        let what = ["scan_slice", "scan_parallel_slice"][i];
        assert_eq!(got, want, "{what}, threads {threads}, segment {segment}");
        assert_eq!(
            got_stats, want_stats,
            "{what}, threads {threads}, segment {segment}"
        );
    }
    let (got, got_stats) = parallel(data, data.len() as u64, threads, segment);
    assert_eq!(
        got.len(),
        want.len(),
        "threads {threads}, segment {segment}"
    );
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "threads {threads}, segment {segment}");
    }
    assert_eq!(
        got_stats, want_stats,
        "threads {threads}, segment {segment}"
    );
}

#[test]
fn any_segment_size_gives_the_sequential_result() {
    let mut data = generated(3 << 20, 21, 40_000);
    // An overlong line (cut at 1 MiB, counted) and a last line without a newline.
    let mut long =
        b"2024-05-01T15:43:00Z dial tcp 10.8.8.8:80: connect: connection refused ".to_vec();
    long.resize(long.len() + (2500 << 10), b'y');
    long.extend_from_slice(b" dial tcp 10.8.8.9:80: connect: connection refused\n");
    let mid = data.len() / 2;
    let at = mid + data[mid..].iter().position(|&c| c == b'\n').unwrap() + 1;
    data.splice(at..at, long);
    data.extend_from_slice(b"dial tcp 10.6.6.6:80: connect: connection refused");

    let (want, stats) = sequential(&data);
    assert!(want.len() > 500, "{}", want.len());
    assert!(stats.overlong_lines == 1 && stats.binary_lines > 0 && stats.unknown_lines > 32);
    assert!(stats.unknown_shapes.len() == 32);
    assert!(want.iter().any(|f| f.end_line_no > f.line_no));
    for (threads, segment) in [(2, 1 << 20), (2, 65_536), (3, 4096), (4, 777), (8, 4 << 20)] {
        assert_same(&data, threads, segment);
    }
}

#[test]
fn one_line_segments_give_the_sequential_result() {
    // Every line its own segment: every multi-line event spans a cut.
    let data = generated(200 << 10, 5, 8_000);
    assert_same(&data, 2, 1);
    assert_same(&data, 3, 1);
}

#[test]
fn a_line_too_long_for_the_boundary_search_falls_back_to_one_thread() {
    let mut data = generated(300 << 10, 9, 20_000);
    data.extend_from_slice(b"dial tcp 10.5.5.5:80: connect: connection refused ");
    data.resize(data.len() + (5 << 20), b'z');
    data.push(b'\n');
    data.extend_from_slice(&generated(300 << 10, 10, 20_000));
    assert_same(&data, 2, 64 << 10);
}

#[test]
fn empty_and_tiny_inputs() {
    for data in [
        &b""[..],
        b"\n",
        b"x",
        b"dial tcp 10.0.0.1:80: connect: connection refused",
    ] {
        assert_same(data, 2, 1);
    }
}

/// A source whose large reads (not the 4 KiB probes for line starts) fail from an offset on.
struct FailsAt<'a> {
    data: &'a [u8],
    at: u64,
}

impl ReadAt for FailsAt<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        if buf.len() > 8192 && offset + buf.len() as u64 > self.at {
            return Err(std::io::Error::other("disk on fire"));
        }
        self.data.read_at(buf, offset)
    }
}

#[test]
fn a_read_error_stops_the_scan_after_the_failures_before_it() {
    let data = generated(2 << 20, 3, 30_000);
    let (want, _) = sequential(&data);
    let src = FailsAt {
        data: &data,
        at: (data.len() as u64) * 3 / 4,
    };
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut got = Vec::new();
    let par = ParallelOptions {
        threads: NonZeroUsize::new(2).unwrap(),
        segment_bytes: 64 << 10,
    };
    let r = scanner.scan_parallel(&src, data.len() as u64, par, &mut |f| got.push(f));
    assert!(matches!(r, Err(ghostip_logs::ScanError::Io(_))), "{r:?}");
    assert!(!got.is_empty() && got.len() < want.len());
    assert_eq!(got[..got.len() - 1], want[..got.len() - 1]);
}

#[test]
fn a_file_shorter_than_announced_ends_where_the_reads_end() {
    // A log truncated while it is read (copytruncate): the reads come back short.
    let data = generated(1 << 20, 4, 30_000);
    let (want, _) = sequential(&data);
    let (got, stats) = parallel(&data[..], data.len() as u64 + 100_000, 2, 64 << 10);
    assert_eq!(got, want);
    assert_eq!(stats.bytes, data.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_lines_and_cuts_agree(
        lines in proptest::collection::vec(
            "[ -~]{0,60}|dial tcp 10\\.0\\.0\\.[0-9]:80: connect: connection refused|\tat x\\.Y\\(Y\\.java:1\\)|Caused by: java\\.net\\.ConnectException: Connection refused: /10\\.1\\.1\\.[0-9]:80|java\\.net\\.SocketException: Connection reset|2024-05-01T15:42:1[0-9]Z x|Mar 19 08:02:43 h p\\[1\\]: dial tcp 10\\.2\\.2\\.2:53: i/o timeout|  code: 'ECONNRESET',|Error: read ECONNRESET|q[a-z]{2} thing: connection refused",
            0..120,
        ),
        threads in 2usize..5,
        segment in 1u64..400,
    ) {
        let text = lines.join("\n");
        let (want, want_stats) = sequential(text.as_bytes());
        let (got, got_stats) = parallel(text.as_bytes(), text.len() as u64, threads, segment);
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(&got_stats, &want_stats);
        for (got, got_stats) in in_place(text.as_bytes(), threads, segment) {
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(&got_stats, &want_stats);
        }
    }
}

#[test]
fn lines_around_the_overlong_limit_are_cut_the_same_in_every_path() {
    // A line of 1 MiB or more is overlong and examined on its first MiB only, whichever way
    // the bytes arrive (reads of any alignment, or in place).
    let phrase = b" dial tcp 10.7.7.7:80: connect: connection refused";
    let max = 1usize << 20;
    for body in [
        max - phrase.len() - 1,
        max - phrase.len(),
        max - 1,
        max,
        max + 1,
    ] {
        for lead in [0usize, 1, 100_000, 300_000] {
            let mut data = b"x\n".repeat(lead / 2);
            let mut line = vec![b'y'; body.saturating_sub(phrase.len())];
            line.extend_from_slice(phrase);
            data.extend_from_slice(&line);
            data.extend_from_slice(b"\ndial tcp 10.6.6.6:80: connect: connection refused\n");
            let (want, stats) = sequential(&data);
            let overlong = line.len() >= max;
            assert_eq!(
                stats.overlong_lines,
                u64::from(overlong),
                "line {}",
                line.len()
            );
            // The phrase ends the line: it is whole in the first MiB up to a 1 MiB line.
            let found = if line.len() <= max { 2 } else { 1 };
            assert_eq!(want.len(), found, "line {}", line.len());
            assert_same(&data, 2, 64 << 10);
        }
    }
}

#[test]
fn a_mapped_file_scans_like_the_read_path() {
    let data = generated(3 << 20, 11, 30_000);
    let dir = std::env::temp_dir().join(format!("ghostip-logs-mapped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("app.log");
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    let map = ghostip_logs::map_settled(&file, later, std::time::Duration::ZERO)
        .unwrap()
        .unwrap();
    let (want, want_stats) = sequential(&data);
    for (threads, segment) in [(1, 64 << 10), (2, 64 << 10), (3, 1 << 20), (2, 8 << 20)] {
        let mut scanner = Scanner::new(opts()).unwrap();
        let mut got = Vec::new();
        let po = ParallelOptions {
            threads: NonZeroUsize::new(threads).unwrap(),
            segment_bytes: segment,
        };
        scanner.scan_mapped(&map, po, &mut |f| got.push(f)).unwrap();
        assert_eq!(got, want, "threads {threads}, segment {segment}");
        assert_eq!(scanner.into_stats(), want_stats, "threads {threads}");
    }
    drop(map);
    std::fs::remove_dir_all(&dir).unwrap();
}
