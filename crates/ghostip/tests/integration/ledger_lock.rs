//! One writer per ledger: a second writable open (in this process or another) is refused
//! with the holder's PID, readers are unaffected, and the lock dies with its process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::Read as _;
use std::net::{IpAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use ghostip::ledger::Ledger;
use ghostip_core::truth::PodRecord;
use ghostip_core::{PodRef, Time};
use ghostip_testkit::records::pod_record;

use crate::common::{closed_port, dead_kubeconfig};

fn pod(i: u8) -> PodRecord {
    let pod = PodRef {
        namespace: "demo".into(),
        name: format!("web-{i}"),
        uid: format!("uid-{i}"),
    };
    PodRecord {
        node: Some("node-1".into()),
        created: Some(t(1)),
        grace_period_seconds: Some(30),
        ..pod_record(pod, vec![IpAddr::from([10, 244, 0, i])])
    }
}

fn t(s: i64) -> Time {
    Time::from_second(1_700_000_000 + s).unwrap()
}

fn ghostip(kubeconfig: &std::path::Path, db: &std::path::Path) -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("ghostip").unwrap();
    c.env_remove("KUBECONFIG")
        .env_remove("GHOSTIP_DB")
        .env("HOME", "/nonexistent-home")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--db")
        .arg(db)
        .timeout(Duration::from_secs(20));
    c
}

/// Every ownership interval still open, by pod name.
fn open_owners(db: &std::path::Path) -> Vec<String> {
    let l = Ledger::open_read_only(db).unwrap();
    (1..=3u8)
        .filter_map(|i| {
            l.whois(IpAddr::from([10, 244, 0, i]), t(1_000))
                .unwrap()
                .at_time
                .filter(|o| o.closed.is_none())
                .map(|o| o.pod.name)
        })
        .collect()
}

#[test]
fn a_second_writable_open_is_refused_naming_the_holder_and_readers_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ghostip.db");
    let mut first = Ledger::open(&path).unwrap();
    first.apply_pod(&pod(1), t(10)).unwrap();

    let err = Ledger::open(&path).expect_err("a second writer was let in");
    let text = err.to_string();
    let pid = format!("PID {}", std::process::id());
    assert!(text.contains(&pid), "{text}");
    assert!(text.contains("is writing it"), "{text}");
    assert!(
        Ledger::open_existing(&path).is_err(),
        "open_existing is a writable open too"
    );

    // A reader is not a writer: it opens and sees what the writer committed.
    let reader = Ledger::open_read_only(&path).unwrap();
    assert_eq!(
        reader
            .whois(IpAddr::from([10, 244, 0, 1]), t(11))
            .unwrap()
            .at_time
            .unwrap()
            .pod
            .name,
        "web-1"
    );
    drop(reader);

    // The lock goes with the ledger.
    drop(first);
    let second = Ledger::open(&path).unwrap();
    assert!(Ledger::open(&path).is_err());
    drop(second);
}

/// `watch` and `agent` on a ledger another process writes exit 2 at once, naming its PID,
/// with a hint; `whois` reads it meanwhile; nothing stored is touched (the second writer's
/// relist would close every open interval as "missing at relist").
#[test]
fn watch_and_agent_refuse_a_ledger_another_process_writes() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dead_kubeconfig(dir.path());
    let db = dir.path().join("ghostip.db");
    let mut holder = Ledger::open(&db).unwrap();
    for i in 1..=3 {
        holder.apply_pod(&pod(i), t(10)).unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    let pid = format!("(PID {})", std::process::id());
    for args in [
        &["watch", "--listen", "127.0.0.1:0"][..],
        &["agent", "--node-name", "n2", "--listen", "127.0.0.1:0"][..],
    ] {
        let out = ghostip(&kc, &db).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let line = format!(
            "ghostip: opening the ledger {}: another ghostip process {pid} is writing it",
            db.display()
        );
        assert!(err.contains(&line), "{args:?}: {err}");
        assert!(
            err.contains("hint: one writer per ledger"),
            "{args:?}: {err}"
        );
    }
    let out = ghostip(&kc, &db)
        .args(["whois", "10.244.0.2"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("web-2"));
    assert_eq!(std::fs::read(&db).unwrap(), before, "the file was written");
    assert_eq!(open_owners(&db), ["web-1", "web-2", "web-3"]);
    drop(holder);
}

fn http_ok(addr: &str) -> bool {
    use std::io::Write as _;
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200")
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `watch` holds the lock for its whole life (another writer is refused with its
/// PID), and SIGKILL releases it: the next writer opens the file.
#[test]
fn a_running_watch_holds_the_lock_until_it_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dead_kubeconfig(dir.path());
    let db = dir.path().join("ghostip.db");
    let port = closed_port();
    let addr = format!("127.0.0.1:{port}");
    let mut watch = KillOnDrop(
        Command::cargo_bin("ghostip")
            .unwrap()
            .env_remove("KUBECONFIG")
            .env_remove("GHOSTIP_DB")
            .arg("--kubeconfig")
            .arg(&kc)
            .arg("--db")
            .arg(&db)
            .args(["watch", "--listen", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while !http_ok(&addr) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "watch does not serve /healthz"
        );
        assert!(watch.0.try_wait().unwrap().is_none(), "watch exited");
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = Ledger::open(&db).expect_err("a second writer beside watch");
    let text = err.to_string();
    assert!(
        text.contains(&format!("PID {}", watch.0.id())),
        "the holder is the watch process: {text}"
    );
    watch.0.kill().unwrap();
    watch.0.wait().unwrap();
    Ledger::open(&db).expect("the lock died with the process");
}
