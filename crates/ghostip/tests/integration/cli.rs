//! CLI contract: exit codes, `-o json` shapes, error messages, and `watch` against an
//! unreachable API server (truth gap exported, clean shutdown on SIGTERM).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use predicates::prelude::*;

use crate::common::{assert_exit_2, closed_port, dead_kubeconfig, ghostip};

#[test]
fn help_and_version() {
    ghostip()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("rollout"));
    ghostip()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("ghostip "));
    ghostip()
        .args(["rollout", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--restart"));
}

#[test]
fn usage_errors_exit_2() {
    ghostip().arg("frobnicate").assert().code(2);
    ghostip().args(["whois", "not-an-ip"]).assert().code(2);
}

#[test]
fn missing_kubeconfig_is_an_error_naming_it() {
    ghostip()
        .args(["check", "--kubeconfig", "/nonexistent/kubeconfig"])
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with(
            "ghostip: connecting to Kubernetes: ",
        ))
        .stderr(predicate::str::contains("/nonexistent/kubeconfig"))
        .stderr(predicate::str::contains("hint:"));
}

#[test]
fn unreachable_api_server_is_exit_2_with_server_and_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dead_kubeconfig(dir.path());
    ghostip()
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["check", "-A", "--request-timeout", "3s"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("127.0.0.1"))
        .stderr(predicate::str::contains(kc.to_str().unwrap()));
    ghostip()
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["rollout", "deploy/web", "-n", "demo"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2);
}

#[test]
fn bad_workload_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dead_kubeconfig(dir.path());
    assert_exit_2(
        ghostip()
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["rollout", "web"]),
        "KIND/NAME",
    );
}

#[test]
fn whois_never_creates_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("missing.db");
    assert_exit_2(
        ghostip().arg("--db").arg(&db).args(["whois", "10.244.1.7"]),
        "missing.db",
    );
    assert!(!db.exists(), "whois created {}", db.display());
}

#[test]
fn whois_on_an_empty_ledger_is_clean_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    drop(ghostip::ledger::Ledger::open(&db).unwrap());
    let out = ghostip()
        .arg("--db")
        .arg(&db)
        .args(["whois", "10.244.1.7", "--at", "-5m", "-o", "json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["ip"], "10.244.1.7");
    assert!(v["at_time"].is_null() && v["before"].is_null() && v["after"].is_null());
    assert!(v["at"].is_string());
    ghostip()
        .arg("--db")
        .arg(&db)
        .args(["whois", "10.244.1.7"])
        .assert()
        .success()
        .stdout(predicate::str::contains("no known owner"));
}

#[test]
fn whois_bad_time_and_corrupt_db_are_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    assert_exit_2(
        ghostip()
            .arg("--db")
            .arg(&db)
            .args(["whois", "10.0.0.1", "--at", "yesterday-ish"]),
        "yesterday-ish",
    );
    let bad = dir.path().join("corrupt.db");
    std::fs::write(
        &bad,
        b"this is not a sqlite database, and it must survive untouched",
    )
    .unwrap();
    ghostip()
        .arg("--db")
        .arg(&bad)
        .args(["whois", "10.0.0.1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(bad.to_str().unwrap()));
    assert_eq!(
        std::fs::read(&bad).unwrap(),
        b"this is not a sqlite database, and it must survive untouched"
    );
}

fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn watch_exports_the_truth_gap_and_stops_on_sigterm_within_5s() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dead_kubeconfig(dir.path());
    let port = closed_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::cargo_bin("ghostip")
        .unwrap()
        .env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(&kc)
        .arg("--db")
        .arg(dir.path().join("w.db"))
        .args(["watch", "--listen", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded wait for the endpoint.
    let mut metrics = None;
    for _ in 0..100 {
        if let Some(m) = http_get(&addr, "/metrics") {
            metrics = Some(m);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(metrics) = metrics else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("watch does not serve /metrics");
    };
    assert!(metrics.contains("ghostip_truth_synced 0"), "{metrics}");
    assert!(
        http_get(&addr, "/healthz")
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        http_get(&addr, "/readyz")
            .unwrap()
            .starts_with("HTTP/1.1 503")
    );

    let pid = child.id().to_string();
    let started = Instant::now();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let mut status = None;
    while started.elapsed() < Duration::from_secs(8) {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("watch did not stop within 8 s of SIGTERM");
    };
    let took = started.elapsed();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        took < Duration::from_secs(5),
        "shutdown took {took:?}\n{err}"
    );
    assert!(status.success(), "{status:?}\n{err}");
    // Not a TTY: JSON log lines.
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with('{'), "JSON logs expected, got: {first}");
}

/// Runs `ghostip ARGS` with its stdout a pipe whose reader has gone (`| head -c 0`): every write
/// fails with EPIPE.
fn run_into_closed_pipe(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut child = Command::cargo_bin("ghostip")
        .unwrap()
        .env_remove("KUBECONFIG")
        .env_remove("GHOSTIP_DB")
        .env_remove("POD_IP")
        .env("HOME", "/nonexistent-home")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

/// `ghostip … | head` ends quietly, with the command's own exit code, where `println!` panicked
/// (exit 101, "failed printing to stdout: Broken pipe"); a write that fails otherwise (a full
/// disk) is an error, exit 2.
#[test]
fn a_closed_stdout_ends_quietly_and_a_failed_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    drop(ghostip::ledger::Ledger::open(&db).unwrap());
    let log = dir.path().join("app.log");
    let mut text = String::new();
    for i in 0..2000 {
        text.push_str(&format!(
            "2026-11-30T08:44:{:02}.{:03}Z ERROR dial tcp 10.244.{}.{}:8080: connect: connection refused\n",
            i % 60,
            i % 1000,
            i / 250,
            i % 250
        ));
    }
    std::fs::write(&log, text).unwrap();
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/audit/GIP-CLIENT-001-pos.yaml"
    );
    let os = |v: &[&str]| -> Vec<std::ffi::OsString> { v.iter().map(Into::into).collect() };
    let mut cases: Vec<Vec<std::ffi::OsString>> = vec![
        os(&["completions", "bash"]),
        os(&["audit", "-o", "json", "-f", manifest]),
        os(&["audit", "-f", manifest]),
        os(&["drain-wait", "--no-event"]),
    ];
    for o in ["json", "table"] {
        let mut c = os(&["explain", "-o", o]);
        c.push(log.clone().into());
        cases.push(c);
        let mut c = os(&["--db"]);
        c.push(db.clone().into());
        c.extend(os(&["whois", "10.244.1.7", "-o", o]));
        cases.push(c);
    }
    for args in cases {
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsString::as_os_str).collect();
        let out = run_into_closed_pipe(&refs);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {:?}\n{stderr}",
            out.status
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
    // /dev/full: every write fails with ENOSPC; the output is lost, so the command fails.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::cargo_bin("ghostip")
        .unwrap()
        .args(["audit", "-o", "json", "-f", manifest])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("ghostip: writing to stdout: "),
        "{out:?}"
    );
}
