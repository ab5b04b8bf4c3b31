//! The batching writer thread: ordering, batching, backpressure, flush, failures and close.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::IpAddr;

use ghostip::ledger::{Ledger, LedgerError, LedgerOp, LedgerWriter, WriterOptions};
use ghostip_core::truth::PodRecord;
use ghostip_core::{PodRef, Time};
use ghostip_testkit::records::pod_record;

fn t(s: i64) -> Time {
    Time::from_second(1_700_000_000 + s).unwrap()
}

fn pod(i: u32, created: i64) -> PodRecord {
    let pod = PodRef {
        namespace: "ns".into(),
        name: format!("p{i}"),
        uid: format!("u{i}"),
    };
    PodRecord {
        created: Some(t(created)),
        ..pod_record(pod, vec![ip(i)])
    }
}

fn ip(i: u32) -> IpAddr {
    IpAddr::V4((0x0a00_0000 + (i % 1000)).into())
}

#[test]
fn writes_arrive_in_order_in_few_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let ledger = Ledger::open(&path).unwrap();
    // Another connection holds the write lock while the ops are queued, so the writer finds
    // a backlog however the threads are scheduled: what it then does with it is the claim.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let writer = LedgerWriter::spawn(
        ledger,
        WriterOptions {
            capacity: 4096,
            max_batch: 500,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    // 3000 pods on 1000 IPs: each IP is reused twice, so order matters.
    for i in 0..3000u32 {
        writer
            .blocking_send(LedgerOp::ApplyPod {
                pod: pod(i, i64::from(i)),
                at: t(i64::from(i)),
            })
            .unwrap();
    }
    // Well inside the ledger's busy timeout (5 s): the writer waits, it does not fail.
    std::thread::sleep(std::time::Duration::from_millis(200));
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    let (ledger, stats) = writer.close().unwrap();
    assert_eq!(stats.committed_ops, 3000);
    assert_eq!(stats.failed_ops, 0);
    // At most the batch it took before the lock, then 500 at a time.
    assert!(
        stats.batches <= 1 + 3000 / 500 + 1,
        "batched: {} transactions",
        stats.batches
    );
    let h = ledger.history(ip(7)).unwrap();
    assert_eq!(
        h.iter().map(|o| o.pod.name.as_str()).collect::<Vec<_>>(),
        ["p7", "p1007", "p2007"]
    );
    assert!(ledger.verify().unwrap().is_ok());
}

#[test]
fn async_producers_flush_and_another_connection_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let writer =
        LedgerWriter::spawn(Ledger::open(&path).unwrap(), WriterOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for task in 0..4u32 {
            let sender = writer.sender();
            tasks.push(tokio::spawn(async move {
                for i in 0..250u32 {
                    let n = task * 250 + i;
                    sender
                        .send(LedgerOp::ApplyPod {
                            pod: pod(n, 0),
                            at: t(0),
                        })
                        .await
                        .unwrap();
                }
                sender.flush().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    // Flushed means committed: a second connection (as `ghostip whois` would) sees it all.
    let reader = Ledger::open_read_only(&path).unwrap();
    for i in [0, 249, 250, 999] {
        assert_eq!(
            reader.whois(ip(i), t(1)).unwrap().at_time.unwrap().pod.name,
            format!("p{i}")
        );
    }
    let (_, stats) = writer.close().unwrap();
    assert_eq!(stats.committed_ops, 1000);
}

#[test]
fn a_bad_write_is_dropped_without_losing_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let writer = LedgerWriter::spawn(
        Ledger::open(dir.path().join("w.db")).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    let sender = writer.sender();
    sender
        .blocking_send(LedgerOp::ApplyPod {
            pod: pod(1, 0),
            at: t(0),
        })
        .unwrap();
    sender
        .blocking_send(LedgerOp::ApplyPod {
            pod: pod(2, 0),
            at: Time::MAX,
        })
        .unwrap();
    sender
        .blocking_send(LedgerOp::ApplyPod {
            pod: pod(3, 0),
            at: t(0),
        })
        .unwrap();
    sender.blocking_flush().unwrap();
    let stats = writer.stats();
    assert_eq!((stats.committed_ops, stats.failed_ops), (2, 1));
    assert!(
        stats
            .last_error
            .unwrap()
            .contains("outside the ledger's range")
    );
    let (ledger, _) = writer.close().unwrap();
    assert!(ledger.whois(ip(1), t(1)).unwrap().at_time.is_some());
    assert!(ledger.whois(ip(2), t(1)).unwrap().at_time.is_none());
    assert!(ledger.whois(ip(3), t(1)).unwrap().at_time.is_some());
    // After close, senders get a typed error.
    assert!(matches!(
        sender.blocking_send(LedgerOp::BeginPodRelist),
        Err(LedgerError::WriterClosed)
    ));
}

#[test]
fn a_relist_spanning_batches_works() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("w.db")).unwrap();
    for i in 0..100 {
        ledger.apply_pod(&pod(i, 0), t(0)).unwrap();
    }
    let writer = LedgerWriter::spawn(
        ledger,
        WriterOptions {
            capacity: 8,
            max_batch: 7,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    writer.blocking_send(LedgerOp::BeginPodRelist).unwrap();
    for i in 0..50 {
        writer
            .blocking_send(LedgerOp::ApplyPod {
                pod: pod(i, 0),
                at: t(10),
            })
            .unwrap();
    }
    writer
        .blocking_send(LedgerOp::FinishPodRelist { at: t(10) })
        .unwrap();
    let (ledger, stats) = writer.close().unwrap();
    assert!(stats.batches > 5);
    assert!(ledger.whois(ip(10), t(11)).unwrap().at_time.is_some());
    let gone = ledger.whois(ip(60), t(11)).unwrap();
    assert!(gone.at_time.is_none());
    assert!(gone.before.unwrap().approximate);
}
