//! Generated variants: a realistic mixed log with 1 % error lines scans to exactly the failures
//! the generator wrote; the third write-up's incident aggregates to its table; arbitrary bytes
//! never panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;

use ghostip_logs::{
    Aggregator, Class, ConnFailure, Kind, ScanOptions, Scanner, classify, scan_bytes,
};
use ghostip_testkit::logs::{GenConfig, GenSummary, LogGenerator};
use proptest::prelude::*;

#[test]
fn generated_mix_scans_to_what_was_written() {
    let mut gen_ = LogGenerator::new(GenConfig {
        seed: 7,
        error_ratio: 0.01,
        ..GenConfig::default()
    });
    let mut data = Vec::new();
    let mut expected = Vec::new();
    let mut sum = GenSummary::default();
    while data.len() < 6 << 20 {
        let before = data.len();
        let e = gen_.next_line(&mut data);
        sum.record(data.len() - before, e);
        if let Some(e) = e {
            expected.push(e);
        }
    }
    let (got, stats) = scan_bytes(
        &data,
        ScanOptions {
            year: Some(2024),
            ..ScanOptions::default()
        },
    )
    .unwrap();
    assert!(sum.errors > 300, "{sum:?}");
    assert_eq!(got.len() as u64, sum.errors, "stats {stats:?}");
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(
            (g.kind, g.format, g.target),
            (e.kind, e.format, e.target),
            "{}",
            g.raw
        );
        assert!(g.timestamp.is_some(), "{}", g.raw);
    }
    assert_eq!(stats.unknown_lines, 0, "{:?}", stats.unknown_shapes);
    assert_eq!(stats.binary_lines, 0);
    assert_eq!(stats.lines, sum.lines);
    // The near-miss lines were candidates and were dismissed.
    assert!(stats.dismissed_lines > 0);
    let ratio = stats.candidate_lines as f64 / stats.lines as f64;
    assert!(ratio < 0.02, "candidate ratio {ratio}");
}

/// The third write-up: during a rollout, 47 errors between 15:42:10 and 15:43:22, 31 "Connection
/// refused: connect" and 16 "Connection reset by peer", aimed at IPs of pods the rollout removed
/// (10.244.3.71 and its neighbours), from a JDK 17 service using Spring Cloud LoadBalancer and
/// OkHttp. Written as the client's logback output would look.
fn incident_log() -> String {
    let mut out = String::new();
    let start = 15 * 3600 + 42 * 60 + 10;
    let ips = ["10.244.3.71", "10.244.3.71", "10.244.2.40", "10.244.1.19"];
    for i in 0..47u32 {
        // Spread 47 errors over 72 s: first at 15:42:10, last at 15:43:22.
        let t = start + (i * 72) / 46;
        let (h, m, s) = (t / 3600, t / 60 % 60, t % 60);
        let ip = ips[(i % 4) as usize];
        out.push_str(&format!(
            "2024-05-01 {h:02}:{m:02}:{s:02}.{:03} ERROR 1 --- [nio-8080-exec-{}] c.e.order.InventoryClient : inventory call failed\n",
            i * 7 % 1000,
            i % 10
        ));
        if i % 3 == 1 {
            out.push_str(
                "java.net.SocketException: Connection reset by peer\n\tat java.base/sun.nio.ch.SocketDispatcher.read0(Native Method)\n",
            );
        } else {
            out.push_str(&format!(
                "java.net.ConnectException: Failed to connect to /{ip}:8080\n\tat okhttp3.internal.connection.RealConnection.connectSocket(RealConnection.kt:297)\nCaused by: java.net.ConnectException: Connection refused: connect\n\tat java.base/sun.nio.ch.Net.connect0(Native Method)\n"
            ));
        }
        out.push_str(&format!(
            "2024-05-01 {h:02}:{m:02}:{s:02}.{:03}  INFO 1 --- [nio-8080-exec-{}] c.e.order.OrderController : GET /orders/{i} 503\n",
            i * 7 % 1000 + 1,
            i % 10
        ));
    }
    out
}

#[test]
fn third_write_up_table() {
    let log = incident_log();
    let mut scanner = Scanner::new(ScanOptions::default()).unwrap();
    let mut failures: Vec<ConnFailure> = Vec::new();
    scanner
        .scan(log.as_bytes(), &mut |f| failures.push(f))
        .unwrap();
    let mut agg = Aggregator::new();
    for f in &failures {
        agg.add_in(
            f,
            classify(f),
            Some("shop/inventory"),
            Some("rollout 15:42"),
        );
    }
    let report = agg.report(false);
    assert_eq!(report.total, 47);
    assert_eq!(report.by_kind.get(&Kind::Refused), Some(&31));
    assert_eq!(report.by_kind.get(&Kind::Reset), Some(&16));
    assert_eq!(report.by_class.get(&Class::StaleTarget), Some(&31));
    assert_eq!(report.by_class.get(&Class::PooledConnection), Some(&16));
    assert_eq!(
        report.headline(),
        "47 errors = 31 refused + 16 reset, between 2024-05-01 15:42:10 and 15:43:22 UTC (72 s)"
    );
    let table: String = report
        .table_cells()
        .iter()
        .map(|r| r.join("  ") + "\n")
        .collect();
    assert!(table.contains("10.244.3.71"));
    assert!(table.contains("shop/inventory"));
    // Resets without an IP in the exception line are attributed to "-" unless the frame names it.
    let refused_targets: BTreeMap<String, u64> = failures
        .iter()
        .filter(|f| f.kind == Kind::Refused)
        .fold(BTreeMap::new(), |mut m, f| {
            *m.entry(f.target.map_or("-".into(), |t| t.to_string()))
                .or_default() += 1;
            m
        });
    assert!(!refused_targets.contains_key("-"), "{refused_targets:?}");
    // JSON output is serde-serializable as is.
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"stale_target\""));
}

#[test]
fn scan_slice_agrees_with_scan() {
    let mut gen_ = LogGenerator::new(GenConfig {
        seed: 11,
        error_ratio: 0.05,
        ..GenConfig::default()
    });
    let mut data = Vec::new();
    gen_.fill(&mut data, 5 << 20);
    // A few non-UTF-8 lines and a missing final newline.
    data.extend_from_slice(b"\xff\xfe refused\ndial tcp 10.0.0.1:80: connect: connection refused");
    let opts = || ScanOptions {
        year: Some(2024),
        ..ScanOptions::default()
    };
    let (by_read, stats_read) = scan_bytes(&data, opts()).unwrap();
    let mut scanner = Scanner::new(opts()).unwrap();
    let mut by_slice = Vec::new();
    scanner.scan_slice(&data, &mut |f| by_slice.push(f));
    assert_eq!(by_read, by_slice);
    assert_eq!(&stats_read, scanner.stats());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn slice_and_read_agree_on_arbitrary_lines(
        lines in proptest::collection::vec("[ -~]{0,60}|dial tcp 10\\.0\\.0\\.[0-9]:80: connect: connection refused|\tat x|Caused by: java.net.ConnectException: Connection refused", 0..40)
    ) {
        let text = lines.join("\n");
        let (a, sa) = scan_bytes(text.as_bytes(), ScanOptions::default()).unwrap();
        let mut scanner = Scanner::new(ScanOptions::default()).unwrap();
        let mut b = Vec::new();
        scanner.scan_slice(text.as_bytes(), &mut |f| b.push(f));
        prop_assert_eq!(a, b);
        prop_assert_eq!(&sa, scanner.stats());
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let (v, s) = scan_bytes(&data, ScanOptions::default()).unwrap();
        prop_assert_eq!(v.len() as u64, s.failures);
        prop_assert!(s.lines <= data.len() as u64);
    }

    #[test]
    fn never_panics_on_mangled_failure_lines(
        prefix in "[ -~]{0,40}",
        line in prop::sample::select(vec![
            "dial tcp 10.42.3.17:9090: connect: connection refused",
            "[2020-09-24T13:31:37.980Z] \"PUT /x HTTP/1.1\" 503 UF,URX \"-\" \"-\" 0 91 3037 - \"-\" \"ua\" \"id\" \"a:1\" \"172.16.0.198:8761\" c",
            "{\"response_flags\":\"UC\",\"upstream_host\":\"10.0.0.1:80\"}",
            "java.net.ConnectException: Failed to connect to host/0:0:0:0:0:0:0:1%1:48555",
            "Error: connect ECONNREFUSED [fe80::1%eth0]:3000",
            "lookup x on 10.96.0.10:53: read udp 1.2.3.4:5->10.96.0.10:53: i/o timeout",
        ]),
        cut in 0usize..200,
        suffix in "[ -~]{0,40}",
    ) {
        let mut s = String::new();
        s.push_str(&prefix);
        let cut = cut.min(line.len());
        let cut = (0..=cut).rev().find(|c| line.is_char_boundary(*c)).unwrap_or(0);
        s.push_str(&line[..cut]);
        s.push_str(&suffix);
        s.push('\n');
        let r = scan_bytes(s.as_bytes(), ScanOptions::default());
        prop_assert!(r.is_ok());
    }
}
