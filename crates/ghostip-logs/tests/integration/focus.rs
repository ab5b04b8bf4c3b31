//! A focused scan (`ScanOptions::target`) finds the failures aimed at its address that the full
//! scan finds, and gives the same result however the input is read or cut into segments.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use ghostip_logs::{
    ConnFailure, ScanOptions, ScanStats, Scanner, Target, open_reader, segment_cuts,
};
use ghostip_testkit::logs::LogGenerator;
use proptest::prelude::*;

/// With `--year`: a focused scan infers the year of yearless timestamps (klog, syslog) from the
/// lines it examines only, where the full scan uses every candidate line before.
fn opts(target: Option<Target>) -> ScanOptions {
    ScanOptions {
        year: Some(2024),
        target,
        ..ScanOptions::default()
    }
}

fn sequential(data: &[u8], target: Option<Target>) -> (Vec<ConnFailure>, ScanStats) {
    let mut scanner = Scanner::new(opts(target)).unwrap();
    let mut out = Vec::new();
    scanner.scan(data, &mut |f| out.push(f)).unwrap();
    (out, scanner.into_stats())
}

/// The focused scan through every path: read, in place, and in segments (`scan_segments`, which
/// scans a focused scan in one pass: its windows cross segments).
fn every_path(
    data: &[u8],
    target: Target,
    _threads: usize,
    segment: u64,
) -> Vec<(&'static str, Vec<ConnFailure>, ScanStats)> {
    let mut out = Vec::new();
    let (f, s) = sequential(data, Some(target));
    out.push(("scan", f, s));
    let mut sc = Scanner::new(opts(Some(target))).unwrap();
    let mut f = Vec::new();
    sc.scan_slice(data, &mut |x| f.push(x));
    out.push(("scan_slice", f, sc.into_stats()));
    let mut sc = Scanner::new(opts(Some(target))).unwrap();
    assert!(!sc.segmentable());
    let mut f = Vec::new();
    let cuts = segment_cuts(data, data.len() as u64, segment)
        .unwrap()
        .unwrap_or_else(|| vec![0, data.len() as u64]);
    sc.scan_segments(data, &cuts, &mut |x| f.push(x)).unwrap();
    out.push(("scan_segments", f, sc.into_stats()));
    out
}

/// The addresses the failures are aimed at (IPv4 only: those get the focused line stage).
fn aimed_at(failures: &[ConnFailure]) -> BTreeSet<IpAddr> {
    failures
        .iter()
        .flat_map(|f| [f.target, f.dns_server])
        .flatten()
        .map(|a| a.ip())
        .filter(IpAddr::is_ipv4)
        .collect()
}

/// Asserts that each path's focused scan gives the full scan's failures aimed at `target`,
/// and that all paths agree on the counts.
fn assert_focused_like_full(data: &[u8], full: &[ConnFailure], target: Target, segment: u64) {
    let want: Vec<&ConnFailure> = full.iter().filter(|f| target.matches(f)).collect();
    let paths = every_path(data, target, 2, segment);
    let stats0 = paths[0].2.clone();
    for (what, got, stats) in paths {
        let got: Vec<&ConnFailure> = got.iter().collect();
        assert_eq!(got, want, "{what}, target {target}, segment {segment}");
        assert_eq!(stats.failures, want.len() as u64, "{what}, target {target}");
        assert_eq!(stats, stats0, "{what}, target {target}, segment {segment}");
    }
}

/// A generated log (realistic mix, 3 % error lines) with multi-line Java, Node.js and grpc-go
/// events, yearless lines and unknown shapes mixed in.
fn generated(bytes: usize, seed: u64) -> Vec<u8> {
    LogGenerator::interleaved(seed, 0.03, bytes, 30_000, |i| {
        format!(
                "2024-05-01 15:42:{:02}.123 ERROR [main] c.e.Client - call failed\n\
                 java.net.SocketException: Connection reset\n\
                 \tat java.base/sun.nio.ch.NioSocketImpl.implRead(NioSocketImpl.java:323)\n\
                 Caused by: java.net.ConnectException: Failed to connect to inventory/10.244.3.{}:8080\n\
                 2023-02-01T10:00:00Z request failed\n\
                 Error: connect ECONNREFUSED 10.0.0.{}:3000\n    at TCPConnectWrap.afterConnect (net.js:1141:16) {{\n  code: 'ECONNREFUSED',\n}}\n\
                 Mar 19 08:03:{:02} node-1 app[77]: dial tcp 10.244.3.{}:9090: i/o timeout\n",
                i % 60,
                i % 7,
                i % 5,
                i % 60,
                i % 7,
            )
            .into_bytes()
    })
}

#[test]
fn focused_scans_find_the_full_scans_failures_for_every_target() {
    let data = generated(1 << 20, 11);
    let (full, _) = sequential(&data, None);
    let ips = aimed_at(&full);
    assert!(ips.len() > 20, "{}", ips.len());
    assert!(full.iter().any(|f| f.end_line_no > f.line_no));
    for ip in ips {
        for port in [None, Some(8080)] {
            assert_focused_like_full(&data, &full, Target { ip, port }, 64 << 10);
        }
    }
    // Tiny segments: every window crosses cuts.
    let cut = 200 << 10;
    let cut = cut + data[cut..].iter().position(|&c| c == b'\n').unwrap() + 1;
    let (full, _) = sequential(&data[..cut], None);
    for ip in ["10.244.3.3", "10.0.0.1"] {
        let target = Target {
            ip: ip.parse().unwrap(),
            port: None,
        };
        assert_focused_like_full(&data[..cut], &full, target, 777);
    }
}

#[test]
fn an_ipv6_target_is_looked_for_on_every_line() {
    let data = b"2024-05-01T15:42:10Z dial tcp [fd00::5]:8080: connect: connection refused\n\
                 2024-05-01T15:42:11Z dial tcp 10.0.0.5:8080: connect: connection refused\n\
                 2024-05-01T15:42:12Z dial tcp [fd00:0:0::5]:8080: connect: connection refused\n";
    let target = Target {
        ip: "fd00::5".parse().unwrap(),
        port: Some(8080),
    };
    let (got, stats) = sequential(data, Some(target));
    let lines: Vec<u64> = got.iter().map(|f| f.line_no).collect();
    assert_eq!(lines, [1, 3]);
    assert_eq!(stats.failures, 2);
    assert_eq!(stats.candidate_lines, 3);
}

#[test]
fn a_port_narrows_the_target_and_a_dns_server_counts() {
    let data = b"2024-05-01T15:42:10Z dial tcp 10.0.0.5:8080: connect: connection refused\n\
                 2024-05-01T15:42:11Z dial tcp 10.0.0.5:9090: connect: connection refused\n\
                 2024-05-01T15:42:12Z dial tcp 10.0.0.50:8080: connect: connection refused\n\
                 2024-05-01T15:42:13Z lookup api.example on 10.0.0.5:53: read udp 10.1.1.1:3333->10.0.0.5:53: i/o timeout\n\
                 2024-05-01T15:42:14Z dial tcp [::ffff:10.0.0.5]:8080: connect: connection refused\n";
    let ip: IpAddr = "10.0.0.5".parse().unwrap();
    let lines = |port| -> Vec<u64> {
        let (got, _) = sequential(data, Some(Target { ip, port }));
        got.iter().map(|f| f.line_no).collect()
    };
    assert_eq!(lines(None), [1, 2, 4, 5]);
    assert_eq!(lines(Some(8080)), [1, 5]);
    assert_eq!(lines(Some(53)), [4]);
    // The mapped spelling as the target is the IPv4 address.
    let mapped: IpAddr = "::ffff:10.0.0.5".parse().unwrap();
    let (got, _) = sequential(
        data,
        Some(Target {
            ip: mapped,
            port: None,
        }),
    );
    assert_eq!(
        got.iter().map(|f| f.line_no).collect::<Vec<_>>(),
        [1, 2, 4, 5]
    );
    let (all, _) = sequential(data, None);
    assert_eq!(all.len(), 5);
    assert_eq!(
        all[3].dns_server,
        Some(SocketAddr::new(ip, 53)),
        "{:?}",
        all[3]
    );
}

#[test]
fn a_multi_line_event_is_whole_when_the_address_is_on_its_last_line() {
    // The event begins on the second line (UNAVAILABLE), the address is on the fifth; it ends with a
    // `Caused by` after it, and the next record begins 45 lines later.
    let mut s = String::from(
        "2024-05-01 15:42:10.123 ERROR [main] c.e.Client - call failed\n\
         io.grpc.StatusRuntimeException: UNAVAILABLE: io exception\n\
         \tat io.grpc.stub.ClientCalls.toStatusRuntimeException(ClientCalls.java:271)\n\
         \tat io.grpc.stub.ClientCalls.getUnchecked(ClientCalls.java:252)\n\
         Caused by: io.netty.channel.AbstractChannel$AnnotatedConnectException: finishConnect(..) failed: Connection refused: /10.244.3.70:8080\n\
         \tat io.netty.channel.unix.Errors.newConnectException0(Errors.java:155)\n\
         Caused by: java.net.ConnectException: finishConnect(..) failed: Connection refused\n",
    );
    for i in 0..45 {
        s.push_str(&format!("\tat a.b.C.m{i}(C.java:{i})\n"));
    }
    s.push_str("2024-05-01 15:42:11.000 INFO [main] c.e.Client - retrying\n");
    let target = Target {
        ip: "10.244.3.70".parse().unwrap(),
        port: Some(8080),
    };
    let (full, _) = sequential(s.as_bytes(), None);
    assert_eq!(full.len(), 1);
    assert_eq!((full[0].line_no, full[0].end_line_no), (2, 7));
    for (what, got, _) in every_path(s.as_bytes(), target, 2, 100) {
        assert_eq!(got, full, "{what}");
    }
}

#[test]
fn a_yearless_line_takes_the_year_of_the_closest_dated_line_before() {
    // Without --year: the full scan takes the year of the last failure line with one (line 1);
    // a focused scan on 10.0.0.9 examines neither line 1 nor line 2, and reads the year off the
    // closest line with one (line 2).
    let data = b"2023-06-01T10:00:00Z dial tcp 10.0.0.1:80: connect: connection refused\n\
                 2023-06-01T10:00:01Z served GET /\n\
                 E0601 10:00:02.000000       1 client.go:88] dial tcp 10.0.0.9:9090: i/o timeout\n";
    let target = Target {
        ip: "10.0.0.9".parse().unwrap(),
        port: None,
    };
    let no_year = |target| ScanOptions {
        fallback_year: Some(2020),
        target,
        ..ScanOptions::default()
    };
    let scan = |o: ScanOptions| {
        let mut out = Vec::new();
        let mut sc = Scanner::new(o).unwrap();
        sc.scan(&data[..], &mut |f| out.push(f)).unwrap();
        out
    };
    let full = scan(no_year(None));
    let focused = scan(no_year(Some(target)));
    assert_eq!(focused.len(), 1);
    assert_eq!(focused[0], full[1]);
    assert!(
        focused[0]
            .timestamp
            .unwrap()
            .to_string()
            .starts_with("2023-06-01T10:00:02")
    );
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn focused_scans_of_the_corpus_find_what_the_full_scans_find() {
    let dir = ghostip_testkit::env::fixtures("client-errors");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let mut data = Vec::new();
        std::io::Read::read_to_end(
            &mut open_reader(std::fs::File::open(&path).unwrap()).unwrap(),
            &mut data,
        )
        .unwrap();
        let (full, _) = sequential(&data, None);
        for ip in aimed_at(&full) {
            assert_focused_like_full(&data, &full, Target { ip, port: None }, 4096);
            checked += 1;
        }
    }
    println!("{checked} (file, address) pairs");
    assert!(checked > 20, "{checked}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// However the input is read or cut, a focused scan gives one result.
    #[test]
    fn focused_scans_agree_across_paths_and_cuts(
        lines in proptest::collection::vec(
            "[ -~]{0,60}|dial tcp 10\\.0\\.0\\.[0-3]:80: connect: connection refused|\tat x\\.Y\\(Y\\.java:1\\)|Caused by: java\\.net\\.ConnectException: Connection refused: /10\\.0\\.0\\.[0-3]:80|java\\.net\\.SocketException: Connection reset|2024-05-01T15:42:1[0-9]Z x|2024-05-01T15:42:1[0-9]Z dial tcp 10\\.0\\.0\\.[0-3]:80: i/o timeout|  code: 'ECONNRESET',|Error: read ECONNRESET|q[a-z]{2} thing: connection refused|10\\.0\\.0\\.[0-3] mentioned",
            0..160,
        ),
        octet in 0u8..4,
        threads in 2usize..5,
        segment in 1u64..600,
    ) {
        let text = lines.join("\n");
        let target = Target { ip: IpAddr::from([10, 0, 0, octet]), port: None };
        let paths = every_path(text.as_bytes(), target, threads, segment);
        let (_, want, want_stats) = &paths[0];
        for (what, got, stats) in &paths[1..] {
            prop_assert_eq!(got, want, "{}", what);
            prop_assert_eq!(stats, want_stats, "{}", what);
        }
    }
}
