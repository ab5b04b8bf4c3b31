//! Crash safety: a child process writes to the ledger as fast as it can and is
//! SIGKILLed at random moments, again and again; after every kill the ledger must
//! open, pass `PRAGMA integrity_check` and keep its invariants (no overlapping
//! intervals per IP, at most one open interval per IP), and committed rows never vanish.
//!
//! The child is this test binary re-executed with `GHOSTIP_LEDGER_CRASH_CHILD` set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ghostip::ledger::{FindingKind, FindingRecord, Ledger, LedgerOp, LedgerWriter, WriterOptions};
use ghostip_core::truth::{EndpointRecord, PodRecord};
use ghostip_core::{
    ChangeTime, HeldTarget, Observation, ObservationResult, PathIdx, PathInfo, PodRef, ServiceKey,
    Target, Time,
};
use ghostip_session::layers::dns::{DNS, DNS_POD};
use ghostip_testkit::records::pod_record;
use ghostip_testkit::rng::Rng;

const CHILD_ENV: &str = "GHOSTIP_LEDGER_CRASH_CHILD";
const ROUNDS: u32 = 16;
const BUDGET: Duration = Duration::from_secs(90);

fn ip(i: u64) -> IpAddr {
    IpAddr::V4([10, 1, (i / 250) as u8, (i % 250) as u8].into())
}

fn pod(i: u64, generation: u64, addr: u64, at: Time) -> PodRecord {
    let pod = PodRef {
        namespace: "crash".into(),
        name: format!("p{i}"),
        uid: format!("p{i}-{generation}"),
    };
    PodRecord {
        node: Some(format!("node-{}", i % 3)),
        owner_kind: Some("ReplicaSet".into()),
        owner_name: Some("crash-1".into()),
        created: Some(at),
        grace_period_seconds: Some(30),
        ..pod_record(pod, vec![ip(addr)])
    }
}

/// The child: relists, then writes through the batching writer until killed.
fn child(path: &Path, seed: u64) -> ! {
    let mut rng = Rng(seed | 1);
    let mut ledger = Ledger::open(path).unwrap();
    let now = || Time::now();
    // A restart: relist half the pods; the others vanished while "down".
    ledger.begin_pod_relist().unwrap();
    for i in 0..100 {
        if rng.below(2) == 0 {
            ledger.apply_pod(&pod(i, 0, i, now()), now()).unwrap();
        }
    }
    ledger.finish_pod_relist(now()).unwrap();
    let writer = LedgerWriter::spawn(
        ledger,
        WriterOptions {
            capacity: 4096,
            max_batch: 2048,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let svc = ServiceKey::new("crash", "web");
    let path_info = PathInfo {
        id: "dns-pod/10.9.0.1:53".into(),
        kind: DNS_POD,
        description: "dns".into(),
        node: None,
    };
    let mut generation = 1;
    let mut announced = false;
    loop {
        for _ in 0..512 {
            let at = now();
            let op = match rng.below(10) {
                0..=4 => {
                    generation += 1;
                    LedgerOp::ApplyPod {
                        pod: pod(rng.below(100), generation, rng.below(64), at),
                        at,
                    }
                }
                5 => LedgerOp::PodGone {
                    pod: PodRef {
                        namespace: "crash".into(),
                        name: format!("p{}", rng.below(100)),
                        uid: format!("p{}-{}", rng.below(100), generation),
                    },
                    at,
                },
                6 => LedgerOp::SyncMemberships {
                    service: svc.clone(),
                    endpoints: (0..rng.below(6))
                        .map(|_| EndpointRecord {
                            ip: ip(rng.below(64)),
                            ready: rng.below(2) == 0,
                            serving: true,
                            terminating: rng.below(4) == 0,
                            pod: None,
                            node: None,
                            hostname: None,
                        })
                        .collect(),
                    at: ChangeTime::received_at(at),
                },
                7 => LedgerOp::Observation {
                    path: path_info.clone(),
                    observation: Observation {
                        path: PathIdx(0),
                        service: svc.clone(),
                        at,
                        result: ObservationResult::Held(vec![HeldTarget {
                            target: Target::ip(ip(rng.below(3))),
                            ttl: Some(30),
                            last_used: None,
                        }]),
                        latency: Some(Duration::from_micros(rng.below(5000))),
                    },
                },
                8 => LedgerOp::Finding(FindingRecord {
                    kind: FindingKind::Stale,
                    layer: DNS.to_string(),
                    path_id: path_info.id.clone(),
                    path_kind: DNS_POD.to_string(),
                    service: svc.clone(),
                    target: Target::ip(ip(rng.below(64))),
                    t0: at,
                    received: at,
                    trigger: None,
                    t0_correction: None,
                    last_seen: Some(at),
                    converged_by: None,
                    window: None,
                    expected_lag: Some(Duration::from_secs(30)),
                    verdict: "pending".into(),
                    exposure: None,
                    former_pod: None,
                }),
                _ if rng.below(2) == 0 => LedgerOp::TruthGapStart {
                    at,
                    reason: "crash test".into(),
                },
                _ => LedgerOp::TruthGapEnd { at },
            };
            writer.blocking_send(op).unwrap();
        }
        if !announced {
            writer.blocking_flush().unwrap();
            let mut out = std::io::stdout().lock();
            writeln!(out, "ready").unwrap();
            out.flush().unwrap();
            announced = true;
        }
    }
}

/// The child process of the test below, which re-executes this binary with `--ignored
/// --exact ledger_crash::crash_child`; alone it has no ledger to write and fails.
#[test]
#[ignore = "the child process of sigkill_during_writes_leaves_a_consistent_ledger"]
fn crash_child() {
    let path = std::env::var_os(CHILD_ENV)
        .unwrap_or_else(|| panic!("{CHILD_ENV} is not set: run only as the crash test's child"));
    let seed = std::env::var("GHOSTIP_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    child(Path::new(&path), seed);
}

fn count(path: &Path, table: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn sigkill_during_writes_leaves_a_consistent_ledger() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let exe = std::env::current_exe().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let started = Instant::now();
    let (mut kills, mut mid_open_kills, mut wal_recoveries) = (0, 0, 0);
    let mut last_intervals = 0;
    for round in 0..ROUNDS {
        if started.elapsed() > BUDGET {
            break;
        }
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "ledger_crash::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .env("GHOSTIP_CRASH_SEED", (seed ^ u64::from(round)).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if round % 3 == 2 {
            // Anywhere, including while opening, migrating or relisting.
            std::thread::sleep(Duration::from_millis(rng.below(60)));
            mid_open_kills += 1;
        } else {
            // While the writer is busy with large batches. (The harness prints
            // "test crash_child ... " before the child's own "ready".)
            let stdout = child.stdout.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let ready = BufReader::new(stdout)
                    .lines()
                    .any(|l| l.is_ok_and(|l| l.trim_end().ends_with("ready")));
                let _ = tx.send(ready);
            });
            let ready = rx.recv_timeout(Duration::from_secs(60));
            if ready != Ok(true) {
                let _ = child.kill();
                panic!("round {round}: the child never started writing ({ready:?})");
            }
            std::thread::sleep(Duration::from_millis(20 + rng.below(400)));
        }
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child was killed, not finished");
        kills += 1;

        if !path.exists() {
            continue; // killed before it created the file
        }
        // A non-empty WAL left behind means reopening has to recover from it.
        let wal = dir.path().join("crash.db-wal");
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
            wal_recoveries += 1;
        }
        let ledger =
            Ledger::open(&path).unwrap_or_else(|e| panic!("round {round}: reopen failed: {e:?}"));
        let report = ledger.verify().unwrap();
        assert!(report.is_ok(), "round {round}: {report:?}");
        drop(ledger);
        let intervals = count(&path, "ip_intervals");
        assert!(
            intervals >= last_intervals,
            "round {round}: committed intervals vanished"
        );
        last_intervals = intervals;
    }
    eprintln!(
        "{kills} kills ({mid_open_kills} at random times from start, {wal_recoveries} reopened from a WAL) in {:?}; \
         {last_intervals} intervals, {} memberships, {} observation runs",
        started.elapsed(),
        count(&path, "memberships"),
        count(&path, "observations"),
    );
    assert!(kills >= 3, "only {kills} kills within the time budget");
    assert!(last_intervals > 0, "nothing was ever committed");
    assert!(wal_recoveries > 0, "no kill left a WAL to recover from");
}
