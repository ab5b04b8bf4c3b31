//! The ledger's API: opening and refusing files, IP ownership, memberships,
//! observations, findings, truth gaps, retention and the `whois` renderings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ghostip::ledger::{
    APPLICATION_ID, FindingKind, FindingRecord, Ledger, LedgerError, LedgerOp, ObservationWrite,
    SCHEMA_VERSION, parse_at,
};
use ghostip::printer::whois::{render_whois_table, whois_json};
use ghostip_analysis::ownership::EndReason;
use ghostip_core::truth::{EndpointRecord, PodRecord};
use ghostip_core::{
    ChangeTime, FailureReason, HeldTarget, Observation, ObservationResult, PathIdx, PathInfo,
    PodRef, ServiceKey, Target, Time,
};
use ghostip_session::layers::dns::{DNS, DNS_POD};
use ghostip_testkit::records::pod_record;

fn t(s: i64) -> Time {
    Time::from_second(1_700_000_000 + s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pref(name: &str) -> PodRef {
    PodRef {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn pod(name: &str, ips: &[&str], created: i64) -> PodRecord {
    PodRecord {
        node: Some("node-1".into()),
        owner_kind: Some("ReplicaSet".into()),
        owner_name: Some("web-7c9".into()),
        created: Some(t(created)),
        grace_period_seconds: Some(30),
        ..pod_record(pref(name), ips.iter().map(|s| ip(s)).collect())
    }
}

fn fresh() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("ghostip.db")).unwrap();
    (dir, ledger)
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

fn svc() -> ServiceKey {
    ServiceKey::new("default", "web")
}

fn ep(addr: &str, ready: bool, serving: bool, terminating: bool, name: &str) -> EndpointRecord {
    EndpointRecord {
        ip: ip(addr),
        ready,
        serving,
        terminating,
        pod: Some(pref(name)),
        node: Some("node-1".into()),
        hostname: None,
    }
}

// --- opening ---

#[test]
fn open_creates_directories_enables_wal_and_sets_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/ghostip.db");
    let ledger = Ledger::open(&path).unwrap();
    assert_eq!(ledger.schema_version(), SCHEMA_VERSION);
    assert_eq!(ledger.path(), path);
    drop(ledger);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(app, APPLICATION_ID);
}

#[test]
fn reopening_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ghostip.db");
    let mut ledger = Ledger::open(&path).unwrap();
    ledger.apply_pod(&pod("a", &["10.0.0.1"], 0), t(1)).unwrap();
    drop(ledger);
    let ledger = Ledger::open(&path).unwrap();
    assert_eq!(ledger.history(ip("10.0.0.1")).unwrap().len(), 1);
}

#[test]
fn an_empty_file_becomes_a_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    std::fs::write(&path, b"").unwrap();
    assert_eq!(
        Ledger::open(&path).unwrap().schema_version(),
        SCHEMA_VERSION
    );
}

fn checkpointed(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

#[test]
fn a_newer_schema_is_refused_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ghostip.db");
    let mut ledger = Ledger::open(&path).unwrap();
    ledger.apply_pod(&pod("a", &["10.0.0.1"], 0), t(1)).unwrap();
    drop(ledger);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    checkpointed(&path);
    let before = bytes(&path);
    let err = Ledger::open(&path).unwrap_err();
    match &err {
        LedgerError::NewerSchema {
            found, supported, ..
        } => {
            assert_eq!(*found, SCHEMA_VERSION + 1);
            assert_eq!(*supported, SCHEMA_VERSION);
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("newer"),
        "{msg}"
    );
    assert_eq!(bytes(&path), before, "the file must not change");
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let content = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &content).unwrap();
    let err = Ledger::open(&path).unwrap_err();
    assert!(matches!(err, LedgerError::NotADatabase { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(bytes(&path), content.as_bytes());
}

#[test]
fn a_corrupt_ledger_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ghostip.db");
    drop(Ledger::open(&path).unwrap());
    checkpointed(&path);
    // Keep the 100-byte header, garble the rest of page 1 (the schema).
    let mut data = bytes(&path);
    for b in data.iter_mut().take(4096).skip(100) {
        *b = 0xa5;
    }
    std::fs::write(&path, &data).unwrap();
    let err = Ledger::open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            LedgerError::Corrupt { .. } | LedgerError::NotADatabase { .. }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(bytes(&path), data);
}

#[test]
fn another_applications_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE recipes (name TEXT); INSERT INTO recipes VALUES ('soup');",
        )
        .unwrap();
    }
    let before = bytes(&path);
    let err = Ledger::open(&path).unwrap_err();
    assert!(
        matches!(err, LedgerError::ForeignDatabase { .. }),
        "{err:?}"
    );
    assert_eq!(bytes(&path), before);
}

#[test]
fn open_existing_does_not_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.db");
    assert!(matches!(
        Ledger::open_existing(&path),
        Err(LedgerError::NotFound { .. })
    ));
    assert!(!path.exists());
}

// --- IP ownership ---

#[test]
fn whois_names_the_former_pod_and_when_it_left() {
    let (_d, mut l) = fresh();
    let mut a = pod("web-a", &["10.0.0.7"], 0);
    l.apply_pod(&a, t(1)).unwrap();
    a.ready_since = Some(t(3));
    l.apply_pod(&a, t(3)).unwrap();
    a.deletion = Some(t(100));
    l.apply_pod(&a, t(100)).unwrap();
    l.pod_gone(&a.pod, t(130)).unwrap();
    l.apply_pod(&pod("web-b", &["10.0.0.7"], 200), t(201))
        .unwrap();

    let w = l.whois(ip("10.0.0.7"), t(110)).unwrap();
    let at = w.at_time.clone().unwrap();
    assert_eq!(at.pod.name, "web-a");
    assert_eq!(at.start, t(0), "ownership starts at creation");
    assert_eq!(at.opened, t(1));
    assert_eq!(at.ready, Some(t(3)));
    assert_eq!(at.terminating, Some(t(100)));
    assert_eq!(at.closed, Some(t(130)));
    assert_eq!(at.gone, Some(t(130)));
    assert_eq!(at.end_reason, Some(EndReason::Gone));
    assert!(w.before.is_none());
    assert_eq!(w.after.as_ref().unwrap().pod.name, "web-b");

    // Between the two owners: nobody, with both neighbours.
    let w = l.whois(ip("10.0.0.7"), t(150)).unwrap();
    assert!(w.at_time.is_none());
    assert_eq!(w.before.as_ref().unwrap().pod.name, "web-a");
    assert_eq!(w.after.as_ref().unwrap().pod.name, "web-b");

    let w = l.whois(ip("10.0.0.7"), t(300)).unwrap();
    assert_eq!(w.at_time.as_ref().unwrap().pod.name, "web-b");
    assert_eq!(w.before.as_ref().unwrap().pod.name, "web-a");
    assert!(w.after.is_none());

    // Before anything and for unknown IPs: empty.
    assert_eq!(
        l.whois(ip("10.0.0.7"), t(-10))
            .unwrap()
            .after
            .unwrap()
            .pod
            .name,
        "web-a"
    );
    assert_eq!(l.whois(ip("10.9.9.9"), t(0)).unwrap(), Default::default());
}

/// The pod's deletionTimestamp is the request plus the grace period; whois says when the
/// deletion was requested and when the IP left the Service's endpoints (the slice marked it
/// terminating), not the deadline.
#[test]
fn whois_says_when_the_ip_left_the_endpoints_not_the_deletion_deadline() {
    let (_d, mut l) = fresh();
    let mut a = pod("web-a", &["10.0.0.7"], 0);
    a.ready_since = Some(t(3));
    l.apply_pod(&a, t(3)).unwrap();
    let at = |s: i64| ghostip_core::ChangeTime::received_at(t(s));
    l.sync_memberships(&svc(), &[ep("10.0.0.7", true, true, false, "web-a")], at(4))
        .unwrap();
    // Deleted at 100 s with 30 s of grace: deletionTimestamp 130 s.
    a.deletion = Some(t(130));
    l.apply_pod(&a, t(100)).unwrap();
    l.sync_memberships(
        &svc(),
        &[ep("10.0.0.7", false, true, true, "web-a")],
        at(100),
    )
    .unwrap();
    l.sync_memberships(&svc(), &[], at(112)).unwrap();
    l.pod_gone(&a.pod, t(112)).unwrap();

    let w = l.whois(ip("10.0.0.7"), t(105)).unwrap();
    assert_eq!(w.at_time.as_ref().unwrap().terminating, Some(t(130)));
    assert_eq!(w.left_endpoints.len(), 1, "{w:?}");
    let exit = &w.left_endpoints[0];
    assert_eq!((exit.at, exit.removed), (t(100), false));
    assert_eq!(exit.service, svc());
    let table = render_whois_table(&w, ip("10.0.0.7"), t(105), &ghostip::printer::Layout::WIDE);
    assert!(
        table.contains("terminating from 2023-11-14T22:15:00Z; left the endpoints of default/web 2023-11-14T22:15:00Z"),
        "{table}"
    );
    assert!(
        !table.contains("22:15:30"),
        "the deadline is not shown: {table}"
    );
    let json = whois_json(&w, ip("10.0.0.7"), t(105));
    assert_eq!(json["left_endpoints"][0]["at"], "2023-11-14T22:15:00Z");
    // A removal without a terminating state first is the exit.
    let (_d, mut l) = fresh();
    let b = pod("web-b", &["10.0.0.8"], 0);
    l.apply_pod(&b, t(1)).unwrap();
    l.sync_memberships(&svc(), &[ep("10.0.0.8", true, true, false, "web-b")], at(2))
        .unwrap();
    l.sync_memberships(&svc(), &[], at(50)).unwrap();
    let w = l.whois(ip("10.0.0.8"), t(60)).unwrap();
    assert_eq!(
        w.left_endpoints
            .iter()
            .map(|x| (x.at, x.removed))
            .collect::<Vec<_>>(),
        [(t(50), true)]
    );
}

/// An agent's ledger holds only its own node's pods: for a pod of another node, whois still
/// says when the IP left a Service's endpoints and which pod the slice named.
#[test]
fn whois_without_an_owner_gives_the_slices_word() {
    let (_d, mut l) = fresh();
    let at = |s: i64| ghostip_core::ChangeTime::received_at(t(s));
    l.sync_memberships(&svc(), &[ep("10.0.0.9", true, true, false, "web-c")], at(2))
        .unwrap();
    l.sync_memberships(&svc(), &[], at(50)).unwrap();
    let w = l.whois(ip("10.0.0.9"), t(60)).unwrap();
    assert!(w.at_time.is_none() && w.before.is_none() && w.after.is_none());
    assert_eq!(w.left_endpoints.len(), 1, "{w:?}");
    assert_eq!(
        w.left_endpoints[0].pod.as_ref().map(|p| p.name.as_str()),
        Some("web-c")
    );
    let table = render_whois_table(&w, ip("10.0.0.9"), t(60), &ghostip::printer::Layout::WIDE);
    assert!(
        table.contains(
            "left the endpoints of default/web 2023-11-14T22:14:10Z (default/web-c, as its slice named it)"
        ),
        "{table}"
    );
    // Once an owner is known, only its exits are shown.
    l.apply_pod(&pod("web-d", &["10.0.0.9"], 100), t(100))
        .unwrap();
    assert!(
        l.whois(ip("10.0.0.9"), t(110))
            .unwrap()
            .left_endpoints
            .is_empty()
    );
}

#[test]
fn ip_reuse_closes_the_open_interval_at_the_new_start() {
    let (_d, mut l) = fresh();
    l.apply_pod(&pod("a", &["10.0.0.1"], 0), t(0)).unwrap();
    // b gets the IP while a is still listed (a's status not yet updated).
    l.apply_pod(&pod("b", &["10.0.0.1"], 50), t(52)).unwrap();
    let h = l.history(ip("10.0.0.1")).unwrap();
    assert_eq!(h.len(), 2);
    assert_eq!(
        (h[0].pod.name.as_str(), h[0].closed, h[0].end_reason),
        ("a", Some(t(50)), Some(EndReason::Reused))
    );
    assert_eq!(h[0].gone, None);
    assert_eq!(
        (h[1].pod.name.as_str(), h[1].start, h[1].closed),
        ("b", t(50), None)
    );
    // When a's object finally goes, its interval learns when.
    l.pod_gone(&pref("a"), t(60)).unwrap();
    let h = l.history(ip("10.0.0.1")).unwrap();
    assert_eq!((h[0].closed, h[0].gone), (Some(t(50)), Some(t(60))));
    assert!(h[1].closed.is_none(), "b keeps the IP");
    assert!(l.verify().unwrap().is_ok());
}

#[test]
fn a_new_owner_never_starts_before_the_previous_one_ended() {
    let (_d, mut l) = fresh();
    l.apply_pod(&pod("a", &["10.0.0.1"], 0), t(0)).unwrap();
    l.pod_gone(&pref("a"), t(40)).unwrap();
    // b was created at 30 (while a was terminating) but the IP was a's until 40.
    l.apply_pod(&pod("b", &["10.0.0.1"], 30), t(45)).unwrap();
    let h = l.history(ip("10.0.0.1")).unwrap();
    assert_eq!(h[1].start, t(40));
    assert_eq!(h[1].created, Some(t(30)));
}

#[test]
fn reapplying_a_pod_continues_its_interval_and_fills_in_fields() {
    let (_d, mut l) = fresh();
    let mut a = pod("a", &["10.0.0.1"], 0);
    a.node = None;
    l.apply_pod(&a, t(1)).unwrap();
    a.node = Some("node-3".into());
    a.ready_since = Some(t(5));
    l.apply_pod(&a, t(5)).unwrap();
    a.ready_since = Some(t(9)); // flapped: the first ready time is kept
    a.deletion = Some(t(20));
    a.prestop_seconds = Some(10);
    l.apply_pod(&a, t(20)).unwrap();
    let h = l.history(ip("10.0.0.1")).unwrap();
    assert_eq!(h.len(), 1);
    let o = &h[0];
    assert_eq!(o.node.as_deref(), Some("node-3"));
    assert_eq!(o.ready, Some(t(5)));
    assert_eq!(o.terminating, Some(t(20)));
    assert_eq!(o.prestop_seconds, Some(10));
    assert_eq!(o.grace_period_seconds, Some(30));
    assert!(o.closed.is_none());
}

#[test]
fn the_kubelets_final_zero_grace_does_not_replace_the_requested_one() {
    let (_d, mut l) = fresh();
    let mut a = pod("a", &["10.0.0.1"], 0);
    l.apply_pod(&a, t(1)).unwrap();
    // `kubectl delete` (or a rollout): deletionTimestamp = request + 30 s grace.
    a.deletion = Some(t(50));
    a.grace_period_seconds = Some(30);
    l.apply_pod(&a, t(20)).unwrap();
    // The kubelet's last delete, after the containers stopped: grace 0, same timestamp.
    a.grace_period_seconds = Some(0);
    l.apply_pod(&a, t(45)).unwrap();
    let o = &l.history(ip("10.0.0.1")).unwrap()[0];
    assert_eq!(o.terminating, Some(t(50)));
    assert_eq!(
        o.grace_period_seconds,
        Some(30),
        "deletion requested at 50 - 30 = 20 s"
    );
    // Before any deletion a changed spec still updates it.
    let mut b = pod("b", &["10.0.0.2"], 0);
    l.apply_pod(&b, t(1)).unwrap();
    b.grace_period_seconds = Some(60);
    l.apply_pod(&b, t(2)).unwrap();
    assert_eq!(
        l.history(ip("10.0.0.2")).unwrap()[0].grace_period_seconds,
        Some(60)
    );
}

#[test]
fn a_changed_ip_closes_the_old_one() {
    let (_d, mut l) = fresh();
    l.apply_pod(&pod("a", &["10.0.0.1"], 0), t(0)).unwrap();
    l.apply_pod(&pod("a", &["10.0.0.2"], 0), t(10)).unwrap();
    let old = l.history(ip("10.0.0.1")).unwrap();
    assert_eq!(
        (old[0].closed, old[0].gone, old[0].end_reason),
        (Some(t(10)), Some(t(10)), Some(EndReason::IpChanged))
    );
    let new = l.history(ip("10.0.0.2")).unwrap();
    assert_eq!(new[0].start, t(0).max(t(0)));
    assert!(new[0].closed.is_none());
}

#[test]
fn dual_stack_and_ipv4_mapped_addresses() {
    let (_d, mut l) = fresh();
    l.apply_pod(&pod("a", &["::ffff:10.0.0.5", "fd00::5"], 0), t(0))
        .unwrap();
    assert_eq!(
        l.whois(ip("10.0.0.5"), t(1)).unwrap().at_time.unwrap().ip,
        ip("10.0.0.5")
    );
    assert_eq!(
        l.whois(ip("fd00:0:0::5"), t(1))
            .unwrap()
            .at_time
            .unwrap()
            .pod
            .name,
        "a"
    );
    l.pod_gone(&pref("a"), t(5)).unwrap();
    assert!(l.whois(ip("fd00::5"), t(6)).unwrap().at_time.is_none());
}

#[test]
fn host_network_pods_own_no_ip() {
    let (_d, mut l) = fresh();
    let mut a = pod("kube-proxy-x", &["192.168.0.2"], 0);
    a.host_network = true;
    l.apply_pod(&a, t(0)).unwrap();
    assert!(l.history(ip("192.168.0.2")).unwrap().is_empty());
}

#[test]
fn a_relist_after_restart_continues_open_intervals_and_closes_vanished_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ghostip.db");
    let mut l = Ledger::open(&path).unwrap();
    l.apply_pod(&pod("a", &["10.0.0.1"], 0), t(0)).unwrap();
    l.apply_pod(&pod("b", &["10.0.0.2"], 0), t(0)).unwrap();
    l.apply_pod(&pod("c", &["10.0.0.3"], 0), t(0)).unwrap();
    drop(l); // ghostip stops; b vanishes, c's IP goes to d while it is down

    let mut l = Ledger::open(&path).unwrap();
    l.begin_pod_relist().unwrap();
    l.apply_pod(&pod("a", &["10.0.0.1"], 0), t(500)).unwrap();
    l.apply_pod(&pod("d", &["10.0.0.3"], 300), t(500)).unwrap();
    assert_eq!(l.finish_pod_relist(t(500)).unwrap(), 1, "only b vanished");

    let a = l.history(ip("10.0.0.1")).unwrap();
    assert_eq!(a.len(), 1, "a continues, no duplicate");
    assert!(a[0].closed.is_none() && a[0].opened == t(0));
    let b = l.history(ip("10.0.0.2")).unwrap();
    assert_eq!(
        (b[0].closed, b[0].gone, b[0].end_reason, b[0].approximate),
        (Some(t(500)), Some(t(500)), Some(EndReason::Relist), true)
    );
    let c = l.history(ip("10.0.0.3")).unwrap();
    assert_eq!(
        (c[0].closed, c[0].end_reason, c[0].approximate),
        (Some(t(300)), Some(EndReason::Reused), true)
    );
    assert_eq!(c[1].pod.name, "d");
    // Outside a relist nothing is approximate, and finishing twice does nothing.
    assert_eq!(l.finish_pod_relist(t(600)).unwrap(), 0);
    assert!(l.verify().unwrap().is_ok());
}

#[test]
fn a_relist_interrupted_by_a_restart_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ghostip.db");
    let mut l = Ledger::open(&path).unwrap();
    l.apply_pod(&pod("a", &["10.0.0.1"], 0), t(0)).unwrap();
    l.begin_pod_relist().unwrap();
    drop(l);
    let mut l = Ledger::open(&path).unwrap();
    assert_eq!(l.finish_pod_relist(t(10)).unwrap(), 0);
    assert!(l.history(ip("10.0.0.1")).unwrap()[0].closed.is_none());
}

#[test]
fn a_batch_is_all_or_nothing() {
    let (_d, mut l) = fresh();
    let ops = vec![
        LedgerOp::ApplyPod {
            pod: pod("a", &["10.0.0.1"], 0),
            at: t(0),
        },
        LedgerOp::ApplyPod {
            pod: pod("b", &["10.0.0.2"], 0),
            at: Time::MAX,
        },
    ];
    let err = l.apply_batch(&ops).unwrap_err();
    assert!(matches!(err, LedgerError::TimeOutOfRange { .. }), "{err:?}");
    assert!(l.history(ip("10.0.0.1")).unwrap().is_empty());
    l.apply_batch(&ops[..1]).unwrap();
    assert_eq!(l.history(ip("10.0.0.1")).unwrap().len(), 1);
}

// --- memberships ---

#[test]
fn memberships_record_joins_state_changes_and_leaves() {
    let (_d, mut l) = fresh();
    let s = svc();
    let ch = |n: i64| ChangeTime {
        t0: t(n),
        received: t(n) + Duration::from_millis(20),
        from_trigger_annotation: true,
        corrected: None,
    };
    l.sync_memberships(
        &s,
        &[
            ep("10.0.0.1", false, false, false, "a"),
            ep("10.0.0.2", true, true, false, "b"),
        ],
        ch(0),
    )
    .unwrap();
    l.sync_memberships(
        &s,
        &[
            ep("10.0.0.1", true, true, false, "a"),
            ep("10.0.0.2", true, true, false, "b"),
        ],
        ch(5),
    )
    .unwrap();
    l.membership_change(
        &s,
        ip("10.0.0.2"),
        Some(&ep("10.0.0.2", false, true, true, "b")),
        ch(10),
    )
    .unwrap();
    l.sync_memberships(&s, &[ep("10.0.0.1", true, true, false, "a")], ch(40))
        .unwrap();

    let m1 = l.memberships_of(ip("10.0.0.1")).unwrap();
    assert_eq!(m1.len(), 1);
    assert_eq!(
        m1[0].states.len(),
        2,
        "joined not ready, then ready; the unchanged sync stored nothing"
    );
    assert!(m1[0].end_t0.is_none());

    let m2 = l.memberships_of(ip("10.0.0.2")).unwrap();
    assert_eq!(m2.len(), 1);
    let m = &m2[0];
    assert_eq!(m.service, s);
    assert_eq!(m.pod.as_ref().unwrap().name, "b");
    assert_eq!(
        (m.start_t0, m.start_received),
        (t(0), t(0) + Duration::from_millis(20))
    );
    assert_eq!(
        m.states
            .iter()
            .map(|s| (s.ready, s.serving, s.terminating))
            .collect::<Vec<_>>(),
        vec![(true, true, false), (false, true, true)]
    );
    assert_eq!(m.end_t0, Some(t(40)));
    assert!(!m.approximate);

    // Rejoining opens a new membership.
    l.membership_change(
        &s,
        ip("10.0.0.2"),
        Some(&ep("10.0.0.2", true, true, false, "c")),
        ch(60),
    )
    .unwrap();
    assert_eq!(l.memberships_of(ip("10.0.0.2")).unwrap().len(), 2);
}

#[test]
fn a_membership_relist_closes_vanished_services() {
    let (_d, mut l) = fresh();
    let gone = ServiceKey::new("default", "old");
    l.sync_memberships(
        &svc(),
        &[ep("10.0.0.1", true, true, false, "a")],
        ChangeTime::received_at(t(0)),
    )
    .unwrap();
    l.sync_memberships(
        &gone,
        &[ep("10.0.0.9", true, true, false, "z")],
        ChangeTime::received_at(t(0)),
    )
    .unwrap();
    l.begin_membership_relist().unwrap();
    l.sync_memberships(
        &svc(),
        &[ep("10.0.0.1", true, true, false, "a")],
        ChangeTime::received_at(t(50)),
    )
    .unwrap();
    assert_eq!(l.finish_membership_relist(t(50)).unwrap(), 1);
    let m = l.memberships_of(ip("10.0.0.9")).unwrap();
    assert_eq!((m[0].end_received, m[0].approximate), (Some(t(50)), true));
    assert!(
        l.memberships_of(ip("10.0.0.1")).unwrap()[0]
            .end_received
            .is_none()
    );
}

// --- observations ---

fn path_info() -> PathInfo {
    PathInfo {
        id: "dns-pod/10.244.0.5:53".into(),
        kind: DNS_POD,
        description: "dns via 10.244.0.5 (kube-system/coredns-abc)".into(),
        node: None,
    }
}

fn held(at: i64, ips: &[(&str, u32)]) -> Observation {
    Observation {
        path: PathIdx(0),
        service: svc(),
        at: t(at),
        result: ObservationResult::Held(
            ips.iter()
                .map(|(a, ttl)| HeldTarget {
                    target: Target::ip(ip(a)),
                    ttl: Some(*ttl),
                    last_used: None,
                })
                .collect(),
        ),
        latency: Some(Duration::from_millis(at as u64 + 1)),
    }
}

fn failed(at: i64, reason: FailureReason) -> Observation {
    Observation {
        path: PathIdx(0),
        service: svc(),
        at: t(at),
        result: ObservationResult::Failed(reason),
        latency: None,
    }
}

#[test]
fn identical_consecutive_observations_become_one_run() {
    let (_d, mut l) = fresh();
    let p = path_info();
    let w = |l: &mut Ledger, o: &Observation| l.record_observation(&p, o).unwrap();
    assert_eq!(
        w(&mut l, &held(0, &[("10.0.0.1", 30), ("10.0.0.2", 30)])),
        ObservationWrite::Inserted
    );
    // Same set in another order, TTLs counting down: merged.
    assert_eq!(
        w(&mut l, &held(1, &[("10.0.0.2", 29), ("10.0.0.1", 29)])),
        ObservationWrite::Merged
    );
    assert_eq!(
        w(&mut l, &held(2, &[("10.0.0.1", 28), ("10.0.0.2", 28)])),
        ObservationWrite::Merged
    );
    assert_eq!(
        w(&mut l, &held(3, &[("10.0.0.1", 27)])),
        ObservationWrite::Inserted
    );
    assert_eq!(
        w(&mut l, &failed(4, FailureReason::Timeout)),
        ObservationWrite::Inserted
    );
    assert_eq!(
        w(&mut l, &failed(5, FailureReason::Timeout)),
        ObservationWrite::Merged
    );
    assert_eq!(
        w(&mut l, &failed(6, FailureReason::Servfail)),
        ObservationWrite::Inserted
    );
    assert_eq!(w(&mut l, &held(7, &[])), ObservationWrite::Inserted);

    let runs = l.observation_runs(&p.id, &svc()).unwrap();
    assert_eq!(runs.len(), 5);
    let r = &runs[0];
    assert_eq!((r.first, r.last, r.count), (t(0), t(2), 3));
    assert_eq!(
        r.answer.as_ref().unwrap(),
        &vec![Target::ip(ip("10.0.0.1")), Target::ip(ip("10.0.0.2"))]
    );
    assert_eq!((r.min_ttl, r.last_min_ttl), (Some(30), Some(28)));
    assert_eq!(
        (r.latency, r.max_latency),
        (
            Some(Duration::from_millis(1)),
            Some(Duration::from_millis(3))
        )
    );
    assert_eq!(r.path_kind, DNS_POD.as_str());
    assert_eq!(
        (runs[2].failure.as_deref(), runs[2].count),
        (Some("timeout"), 2)
    );
    assert!(runs[2].answer.is_none());
    assert_eq!(runs[3].failure_detail.as_deref(), Some("SERVFAIL"));
    assert_eq!(
        runs[4].answer.as_deref(),
        Some(&[][..]),
        "an empty answer is an answer"
    );
    // Another service on the same path has its own runs.
    assert!(
        l.observation_runs(&p.id, &ServiceKey::new("default", "other"))
            .unwrap()
            .is_empty()
    );
}

// --- findings and gaps ---

fn finding(path: &str, t0: i64) -> FindingRecord {
    FindingRecord {
        kind: FindingKind::Stale,
        layer: DNS.to_string(),
        path_id: path.into(),
        path_kind: DNS_POD.to_string(),
        service: svc(),
        target: Target::ip(ip("10.0.0.7")),
        t0: t(t0),
        received: t(t0) + Duration::from_millis(40),
        trigger: Some(t(t0)),
        t0_correction: None,
        last_seen: Some(t(t0 + 28)),
        converged_by: None,
        window: None,
        expected_lag: Some(Duration::from_secs(30)),
        verdict: "pending".into(),
        exposure: Some(Duration::from_millis(1500)),
        former_pod: Some(pref("web-a")),
    }
}

#[test]
fn findings_are_upserted_per_path_service_target_and_t0() {
    let (_d, mut l) = fresh();
    let mut f = finding("dns-pod/a", 100);
    let id = l.record_finding(&f).unwrap();
    f.converged_by = Some(t(129));
    f.window = Some(Duration::from_secs(29));
    f.verdict = "within-expected-lag".into();
    assert_eq!(l.record_finding(&f).unwrap(), id, "same key, same row");
    l.record_finding(&finding("dns-pod/b", 100)).unwrap();
    l.record_finding(&finding("dns-pod/a", 500)).unwrap();

    let all = l.findings_since(t(0)).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], f, "round trip");
    assert_eq!(l.findings_since(t(200)).unwrap().len(), 1);
    assert_eq!(l.findings_for_ip(ip("10.0.0.7")).unwrap().len(), 3);
    let json = serde_json::to_value(&f).unwrap();
    assert_eq!(json["window"], 29.0);
    assert_eq!(json["exposure"], 1.5);
    assert_eq!(json["kind"], "stale");
    let back: FindingRecord = serde_json::from_value(json).unwrap();
    assert_eq!(back, f);
    // A window measured from the receive time keeps the trigger time it did not take.
    let mut c = finding("dns-pod/c", 700);
    c.t0 = c.received;
    c.trigger = Some(t(665));
    c.t0_correction = Some("far-before-received".into());
    l.record_finding(&c).unwrap();
    let back = l.findings_since(t(700)).unwrap();
    assert_eq!(back, vec![c]);
}

/// Copies every row of `table` matching `filter` with `set` (column, SQL value) replacing
/// those columns: rows "written by a newer binary", with plain SQL.
fn copy_rows(conn: &rusqlite::Connection, table: &str, filter: &str, set: &[(&str, &str)]) {
    let cols: Vec<String> = conn
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let cols: Vec<&str> = cols
        .iter()
        .map(String::as_str)
        .filter(|c| *c != "id")
        .collect();
    let values: Vec<&str> = cols
        .iter()
        .map(|c| set.iter().find(|(k, _)| k == c).map_or(*c, |(_, v)| *v))
        .collect();
    let n = conn
        .execute(
            &format!(
                "INSERT INTO {table} ({}) SELECT {} FROM {table} WHERE {filter}",
                cols.join(", "),
                values.join(", ")
            ),
            [],
        )
        .unwrap();
    assert!(n > 0, "no row of {table} matched {filter}");
}

/// A layer and path kind this binary has never heard of (a gRPC channelz layer, written by
/// a newer binary into a ledger this one made) read back as the text stored, through
/// every read path, next to the rows it knows.
#[test]
fn rows_of_a_layer_and_kind_this_binary_does_not_know_read_back_as_text() {
    let (d, mut l) = fresh();
    let p = path_info();
    l.record_observation(&p, &held(0, &[("10.0.0.7", 30)]))
        .unwrap();
    l.record_finding(&finding("dns-pod/a", 100)).unwrap();
    drop(l);
    let db = d.path().join("ghostip.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let path = "'grpc-channelz/web-7c9'";
        let kind = "'grpc-channelz'";
        copy_rows(
            &conn,
            "observations",
            "path_kind = 'dns-pod'",
            &[("path_id", path), ("path_kind", kind)],
        );
        copy_rows(
            &conn,
            "findings",
            "path_kind = 'dns-pod'",
            &[("path_id", path), ("path_kind", kind), ("layer", "'grpc'")],
        );
    }
    let l = Ledger::open_read_only(&db).unwrap();
    let runs = l.observation_runs("grpc-channelz/web-7c9", &svc()).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].path_kind, "grpc-channelz");
    let all = l.findings_since(t(0)).unwrap();
    let kinds: Vec<(&str, &str)> = all
        .iter()
        .map(|f| (f.layer.as_str(), f.path_kind.as_str()))
        .collect();
    assert_eq!(kinds, [("dns", "dns-pod"), ("grpc", "grpc-channelz")]);
    assert_eq!(l.findings_for_ip(ip("10.0.0.7")).unwrap(), all);
    let json = serde_json::to_value(&all[1]).unwrap();
    assert_eq!(
        (&json["layer"], &json["path_kind"], &json["path_id"]),
        (
            &serde_json::json!("grpc"),
            &serde_json::json!("grpc-channelz"),
            &serde_json::json!("grpc-channelz/web-7c9")
        )
    );
    let back: FindingRecord = serde_json::from_value(json).unwrap();
    assert_eq!(back, all[1]);
}

#[test]
fn truth_gaps_open_once_and_close() {
    let (_d, mut l) = fresh();
    assert!(l.truth_gap_start(t(0), "starting").unwrap());
    assert!(
        !l.truth_gap_start(t(1), "watch error").unwrap(),
        "a gap is already open"
    );
    assert!(l.truth_gap_end(t(3)).unwrap());
    assert!(!l.truth_gap_end(t(4)).unwrap());
    assert!(l.truth_gap_start(t(10), "watch error: 500").unwrap());
    let gaps = l.truth_gaps(t(-100), t(100)).unwrap();
    assert_eq!(gaps.len(), 2);
    assert_eq!(
        (gaps[0].start, gaps[0].end, gaps[0].reason.as_str()),
        (t(0), Some(t(3)), "starting")
    );
    assert_eq!(gaps[1].end, None);
    assert_eq!(l.truth_gaps(t(4), t(9)).unwrap().len(), 0);
    assert_eq!(l.truth_gaps(t(2), t(2)).unwrap().len(), 1);
}

// --- retention ---

#[test]
fn prune_deletes_what_ended_before_the_cutoff_and_keeps_open_history() {
    let (_d, mut l) = fresh();
    l.apply_pod(&pod("old", &["10.0.0.1"], 0), t(0)).unwrap();
    l.pod_gone(&pref("old"), t(10)).unwrap();
    l.apply_pod(&pod("ancient-but-running", &["10.0.0.2"], 0), t(0))
        .unwrap();
    l.apply_pod(&pod("new", &["10.0.0.1"], 1000), t(1000))
        .unwrap();
    l.sync_memberships(
        &svc(),
        &[ep("10.0.0.1", true, true, false, "old")],
        ChangeTime::received_at(t(0)),
    )
    .unwrap();
    l.sync_memberships(&svc(), &[], ChangeTime::received_at(t(10)))
        .unwrap();
    l.record_observation(&path_info(), &held(5, &[("10.0.0.1", 5)]))
        .unwrap();
    l.record_observation(&path_info(), &held(2000, &[("10.0.0.3", 5)]))
        .unwrap();
    l.record_finding(&finding("p", 0)).unwrap();
    l.truth_gap_start(t(0), "starting").unwrap();
    l.truth_gap_end(t(1)).unwrap();

    let stats = l.prune_retention(t(500), Duration::from_secs(100)).unwrap();
    assert_eq!(
        (
            stats.ip_intervals,
            stats.memberships,
            stats.observations,
            stats.findings,
            stats.truth_gaps
        ),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(l.history(ip("10.0.0.1")).unwrap().len(), 1);
    assert_eq!(
        l.history(ip("10.0.0.2")).unwrap().len(),
        1,
        "open intervals are kept whatever their age"
    );
    assert!(l.memberships_of(ip("10.0.0.1")).unwrap().is_empty());
    assert_eq!(
        l.observation_runs(&path_info().id, &svc()).unwrap().len(),
        1
    );
    assert!(l.verify().unwrap().is_ok());
}

// --- renderings ---

#[test]
fn whois_table_and_json() {
    let (_d, mut l) = fresh();
    let mut a = pod("web-a", &["10.0.0.7"], 0);
    l.apply_pod(&a, t(0)).unwrap();
    a.deletion = Some(t(100));
    l.apply_pod(&a, t(100)).unwrap();
    l.pod_gone(&a.pod, t(130)).unwrap();
    l.apply_pod(&pod("web-b", &["10.0.0.7"], 200), t(200))
        .unwrap();

    let at = parse_at("-5m", t(435)).unwrap();
    assert_eq!(at, t(135));
    let w = l.whois(ip("10.0.0.7"), at).unwrap();
    let table = render_whois_table(&w, ip("10.0.0.7"), at, &ghostip::printer::Layout::WIDE);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "IP 10.0.0.7 at 2023-11-14T22:15:35Z", "{table}");
    assert!(
        lines[1].split_whitespace().eq([
            "WHEN", "POD", "UID", "NODE", "OWNER", "FROM", "UNTIL", "NOTES"
        ]),
        "{table}"
    );
    assert!(lines[2].starts_with("before  default/web-a"), "{table}");
    assert!(
        table.contains("default/web-a") && table.contains("ReplicaSet/web-7c9"),
        "{table}"
    );
    assert!(table.contains("pod gone; ended 5.0s before"), "{table}");
    assert!(table.contains("(no known owner)"), "{table}");
    assert!(
        table.contains("default/web-b") && table.contains("started 1m5s after"),
        "{table}"
    );

    let json = whois_json(&w, ip("10.0.0.7"), at);
    assert_eq!(json["ip"], "10.0.0.7");
    assert_eq!(json["at"], "2023-11-14T22:15:35Z");
    assert!(json["at_time"].is_null());
    assert_eq!(json["before"]["pod"]["name"], "web-a");
    assert_eq!(json["before"]["closed"], "2023-11-14T22:15:30Z");
    assert_eq!(json["before"]["terminating"], "2023-11-14T22:15:00Z");
    assert_eq!(json["before"]["end_reason"], "gone");
    assert_eq!(json["after"]["start"], "2023-11-14T22:16:40Z");
    // Whois round-trips through JSON.
    let back: ghostip_analysis::ownership::Whois =
        serde_json::from_value(serde_json::to_value(&w).unwrap()).unwrap();
    assert_eq!(back, w);
}

#[test]
fn errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let blocker: PathBuf = dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    // The parent "directory" is a file.
    let err = Ledger::open(blocker.join("ghostip.db")).unwrap_err();
    assert!(matches!(err, LedgerError::CreateDir { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&blocker.display().to_string()),
        "{err}"
    );
}

// --- read-only opening (explain) ---

#[test]
fn read_only_open_never_creates_migrates_or_writes() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    assert!(matches!(
        Ledger::open_read_only(&missing),
        Err(LedgerError::NotFound { .. })
    ));
    assert!(!missing.exists());
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        Ledger::open_read_only(&empty),
        Err(LedgerError::NotCurrent { found: 0, .. })
    ));
    assert_eq!(bytes(&empty), b"");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"not a database at all, just some text").unwrap();
    assert!(Ledger::open_read_only(&text).is_err());

    // While a writer has the file open (WAL), a reader sees what it committed.
    let path = dir.path().join("ghostip.db");
    let mut writer = Ledger::open(&path).unwrap();
    writer.apply_pod(&pod("a", &["10.0.0.7"], 0), t(1)).unwrap();
    let reader = Ledger::open_read_only(&path).unwrap();
    assert_eq!(reader.history(ip("10.0.0.7")).unwrap().len(), 1);
    writer.apply_pod(&pod("b", &["10.0.0.8"], 2), t(3)).unwrap();
    assert_eq!(reader.history(ip("10.0.0.8")).unwrap().len(), 1);
    drop(reader);
    drop(writer);

    // Without a writer: immutable, no side files.
    let before = bytes(&path);
    let reader = Ledger::open_read_only(&path).unwrap();
    assert_eq!(
        reader
            .whois(ip("10.0.0.7"), t(5))
            .unwrap()
            .at_time
            .unwrap()
            .pod
            .name,
        "a"
    );
    drop(reader);
    assert_eq!(bytes(&path), before);
    assert!(!dir.path().join("ghostip.db-wal").exists());
    assert!(!dir.path().join("ghostip.db-shm").exists());
}
