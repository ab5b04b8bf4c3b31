//! The ledger writer when the storage fails: nothing already stored is lost, failed writes
//! are kept (bounded) and stored once the storage recovers, failures are counted and
//! reported as health, and logging is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ghostip::ledger::{Ledger, LedgerHealth, LedgerOp, LedgerWriter, WriterOptions};
use ghostip_core::truth::PodRecord;
use ghostip_core::{PodRef, Time};
use ghostip_testkit::records::pod_record;

fn t(s: i64) -> Time {
    Time::from_second(1_700_000_000 + s).unwrap()
}

fn ip(i: u32) -> IpAddr {
    IpAddr::V4((0x0a00_0000 + i).into())
}

fn pod(i: u32) -> PodRecord {
    let pod = PodRef {
        namespace: "demo".into(),
        // Long names: each write takes room, so a capped file fills quickly.
        name: format!("web-{i}-{}", "x".repeat(200)),
        uid: format!("uid-{i}"),
    };
    PodRecord {
        node: Some("node-1".into()),
        owner_kind: Some("ReplicaSet".into()),
        owner_name: Some("web-7c9".into()),
        created: Some(t(0)),
        grace_period_seconds: Some(30),
        ..pod_record(pod, vec![ip(i)])
    }
}

fn apply(i: u32) -> LedgerOp {
    LedgerOp::ApplyPod {
        pod: pod(i),
        at: t(1),
    }
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Another connection holds SQLite's write lock longer than the busy timeout (5 s), so the
/// writer's commits fail (`SQLITE_BUSY`) as on a storage that refuses writes for a while.
/// Before, the writes of the failed batch were retried once each and dropped; now they are
/// kept and stored once the lock is released.
#[test]
fn writes_that_failed_on_the_storage_are_stored_when_it_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut ledger = Ledger::open(&path).unwrap();
    ledger.apply_pod(&pod(0), t(0)).unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let writer = LedgerWriter::spawn(ledger, WriterOptions::default()).unwrap();
    for i in 1..=3 {
        writer.blocking_send(apply(i)).unwrap();
    }
    wait_until("a failure reported", Duration::from_secs(60), || {
        writer.stats().last_error.is_some()
    });
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    wait_until(
        "every write stored after the storage recovered",
        Duration::from_secs(30),
        || writer.stats().committed_ops == 3,
    );
    let (ledger, stats) = writer.close().unwrap();
    assert_eq!(stats.failed_ops, 0, "{stats:?}");
    for i in 0..=3 {
        assert!(
            ledger.whois(ip(i), t(2)).unwrap().at_time.is_some(),
            "pod {i}"
        );
    }
}

/// A file capped at its current size (`max_page_count`: `SQLITE_FULL`, as on a full disk):
/// the writer reports `full` through the hook and its health, keeps at most `retry_limit`
/// writes and drops (and counts) the rest, logs a bounded number of lines however often it
/// retries, and every row stored before is intact.
#[test]
fn a_full_ledger_is_reported_bounded_and_loses_nothing_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut ledger = Ledger::open(&path).unwrap();
    for i in 0..20 {
        ledger.apply_pod(&pod(i), t(0)).unwrap();
    }
    let cap = ledger.set_max_page_count(1).unwrap();
    assert!(cap > 1, "the cap is the file's current size, {cap} pages");
    let reasons = Arc::new(Mutex::new(BTreeMap::<&'static str, u64>::new()));
    let hook_reasons = Arc::clone(&reasons);
    let writer = LedgerWriter::spawn_with_error_hook(
        ledger,
        WriterOptions {
            capacity: 16,
            max_batch: 10,
            retry_limit: 100,
            retry_every: Duration::from_millis(1),
        },
        Box::new(move |reason| *hook_reasons.lock().unwrap().entry(reason).or_default() += 1),
    )
    .unwrap();
    assert_eq!(
        writer.health(Duration::from_secs(60)),
        LedgerHealth::Ok,
        "healthy before any failure"
    );
    let sent = 2000u32;
    for i in 100..100 + sent {
        writer.blocking_send(apply(i)).unwrap();
    }
    // Hundreds of retries, 1 ms apart.
    wait_until("retries", Duration::from_secs(60), || {
        writer.stats().failed_commits >= 300
    });
    let stats = writer.stats();
    assert!(stats.failing_since.is_some(), "{stats:?}");
    assert!(stats.pending_ops <= 100, "{stats:?}");
    assert!(
        stats.log_lines <= 3,
        "{} lines for {} failed commits",
        stats.log_lines,
        stats.failed_commits
    );
    assert!(matches!(
        writer.health(Duration::from_secs(60)),
        LedgerHealth::Failing(e) if e.contains("full")
    ));
    assert!(matches!(
        writer.health(Duration::ZERO),
        LedgerHealth::GiveUp(e) if e.contains("full")
    ));
    {
        let r = reasons.lock().unwrap();
        assert!(r.get("full").copied().unwrap_or(0) >= 300, "{r:?}");
        assert!(r.get("dropped").copied().unwrap_or(0) > 0, "{r:?}");
    }
    // A flush does not wait for the storage.
    writer.blocking_flush().unwrap();
    let (ledger, stats) = writer.close().unwrap();
    // Every write is either stored or counted as dropped.
    assert_eq!(
        stats.committed_ops + stats.failed_ops,
        u64::from(sent),
        "{stats:?}"
    );
    assert_eq!(
        reasons.lock().unwrap().get("dropped").copied(),
        Some(stats.failed_ops)
    );
    drop(ledger);
    let reader = Ledger::open_read_only(&path).unwrap();
    for i in 0..20 {
        assert!(
            reader.whois(ip(i), t(1)).unwrap().at_time.is_some(),
            "pod {i}"
        );
    }
    assert!(reader.verify().unwrap().is_ok());
}
