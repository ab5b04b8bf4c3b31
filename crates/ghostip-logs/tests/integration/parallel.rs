//! An input scanned in segments (each by a line stage of its own, merged in input order: what
//! the caller's threads do) gives the sequential scan's failures, line numbers and counts,
//! however it is cut: events spanning segment cuts, years inferred from earlier segments,
//! unknown-shape examples, binary, overlong and unterminated lines.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use ghostip_logs::{ConnFailure, ScanOptions, ScanStats, Scanner, look_back_start, segment_cuts};
use ghostip_testkit::logs::LogGenerator;
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

/// Scans `data` in segments of about `segment` bytes: `None` when no cut could be made (a line
/// too long for the boundary search: the caller scans such an input in one pass).
fn segmented(data: &[u8], segment: u64) -> Option<(Vec<ConnFailure>, ScanStats)> {
    let cuts = segment_cuts(data, data.len() as u64, segment).unwrap()?;
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut out = Vec::new();
    scanner
        .scan_segments(data, &cuts, &mut |f| out.push(f))
        .unwrap();
    Some((out, scanner.into_stats()))
}

/// The segments of `data` scanned out of order (last first, as threads may finish them) and
/// applied in input order: the same as in order.
fn out_of_order(data: &[u8], segment: u64) -> Option<(Vec<ConnFailure>, ScanStats)> {
    let cuts = segment_cuts(data, data.len() as u64, segment).unwrap()?;
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut stages = [
        scanner.segment_scanner().unwrap(),
        scanner.segment_scanner().unwrap(),
    ];
    let mut scanned: Vec<_> = cuts
        .windows(2)
        .enumerate()
        .rev()
        .map(|(i, w)| {
            let from = look_back_start(w[0]) as usize;
            stages[i % 2].scan(&data[from..w[1] as usize], (w[0] - from as u64) as usize)
        })
        .collect();
    scanned.reverse();
    let mut out = Vec::new();
    scanner.begin_segments();
    for seg in scanned {
        scanner.apply_segment(seg, &mut |f| out.push(f));
    }
    scanner.end_segments(&mut |f| out.push(f));
    Some((out, scanner.into_stats()))
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
    LogGenerator::interleaved(seed, 0.03, bytes, every, tricky)
}

fn assert_same(data: &[u8], segment: u64) {
    let (want, want_stats) = sequential(data);
    let mut one = Scanner::new(opts()).unwrap();
    let mut got = Vec::new();
    one.scan_slice(data, &mut |f| got.push(f));
    assert_eq!(got, want, "scan_slice");
    assert_eq!(one.into_stats(), want_stats, "scan_slice");
    let Some((got, got_stats)) = segmented(data, segment) else {
        // No cut: the caller scans in one pass; so does the out-of-order scan.
        assert!(out_of_order(data, segment).is_none());
        return;
    };
    assert_eq!(got.len(), want.len(), "segment {segment}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "segment {segment}");
    }
    assert_eq!(got_stats, want_stats, "segment {segment}");
    let (got, got_stats) = out_of_order(data, segment).unwrap();
    assert_eq!(got, want, "out of order, segment {segment}");
    assert_eq!(got_stats, want_stats, "out of order, segment {segment}");
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
    for segment in [1 << 20, 65_536, 4096, 777, 4 << 20] {
        assert_same(&data, segment);
    }
}

#[test]
fn one_line_segments_give_the_sequential_result() {
    // Every line its own segment: every multi-line event spans a cut.
    let data = generated(200 << 10, 5, 8_000);
    assert_same(&data, 1);
    assert_same(&data, 2);
}

#[test]
fn a_line_too_long_for_the_boundary_search_falls_back_to_one_thread() {
    let mut data = generated(300 << 10, 9, 20_000);
    data.extend_from_slice(b"dial tcp 10.5.5.5:80: connect: connection refused ");
    data.resize(data.len() + (5 << 20), b'z');
    data.push(b'\n');
    data.extend_from_slice(&generated(300 << 10, 10, 20_000));
    assert!(segmented(&data, 64 << 10).is_none());
    assert_same(&data, 64 << 10);
}

#[test]
fn empty_and_tiny_inputs() {
    for data in [
        &b""[..],
        b"\n",
        b"x",
        b"dial tcp 10.0.0.1:80: connect: connection refused",
    ] {
        assert_same(data, 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_lines_and_cuts_agree(
        lines in proptest::collection::vec(
            "[ -~]{0,60}|dial tcp 10\\.0\\.0\\.[0-9]:80: connect: connection refused|\tat x\\.Y\\(Y\\.java:1\\)|Caused by: java\\.net\\.ConnectException: Connection refused: /10\\.1\\.1\\.[0-9]:80|java\\.net\\.SocketException: Connection reset|2024-05-01T15:42:1[0-9]Z x|Mar 19 08:02:43 h p\\[1\\]: dial tcp 10\\.2\\.2\\.2:53: i/o timeout|  code: 'ECONNRESET',|Error: read ECONNRESET|q[a-z]{2} thing: connection refused",
            0..120,
        ),
        segment in 1u64..400,
    ) {
        let text = lines.join("\n");
        let (want, want_stats) = sequential(text.as_bytes());
        let (got, got_stats) = segmented(text.as_bytes(), segment).unwrap();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(&got_stats, &want_stats);
        let (got, got_stats) = out_of_order(text.as_bytes(), segment).unwrap();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(&got_stats, &want_stats);
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
            assert_same(&data, 64 << 10);
        }
    }
}
