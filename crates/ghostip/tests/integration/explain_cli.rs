//! `ghostip explain` as a user runs it: against a ledger written through the ledger's own API,
//! against the lab client's real log and pod watch stream (`tests/fixtures/lab-cacheclient/`),
//! over the shared client-error corpus (read in place), and on bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ghostip::ledger::Ledger;
use ghostip_core::truth::{EndpointRecord, PodRecord};
use ghostip_core::{ChangeTime, PodRef, ServiceKey, Time};
use ghostip_datapath::layers::{CONNTRACK, CONNTRACK_TABLE};
use ghostip_testkit::records::pod_record;
use serde_json::Value;

use crate::common::{ghostip_wide, json};

fn t(s: f64) -> Time {
    Time::from_millisecond(1_700_000_000_000 + (s * 1000.0) as i64).unwrap()
}

/// A log line time, RFC 3339 like Go's slog prints it.
fn lt(s: f64) -> String {
    t(s).strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pref(name: &str) -> PodRef {
    PodRef {
        namespace: "shop".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn pod(name: &str, rs: &str, addr: &str, created: f64) -> PodRecord {
    PodRecord {
        node: Some("node-1".into()),
        owner_kind: Some("ReplicaSet".into()),
        owner_name: Some(rs.into()),
        created: Some(t(created)),
        ready_since: Some(t(created + 2.0)),
        grace_period_seconds: Some(30),
        ..pod_record(pref(name), vec![ip(addr)])
    }
}

fn ep(name: &str, addr: &str, terminating: bool) -> EndpointRecord {
    EndpointRecord {
        ip: ip(addr),
        ready: !terminating,
        serving: true,
        terminating,
        pod: Some(pref(name)),
        node: Some("node-1".into()),
        hostname: None,
    }
}

fn change(s: f64) -> ChangeTime {
    ChangeTime {
        t0: t(s),
        received: t(s + 0.05),
        from_trigger_annotation: true,
        corrected: None,
    }
}

/// shop/web: web-a (.10), web-b (.11), web-c (.12) from t=0. A rollout deletes web-a and web-b
/// at t=100 (gone at 101); at t=200 a pod of another Deployment gets web-b's IP.
fn write_ledger(path: &Path) {
    let svc = ServiceKey::new("shop", "web");
    let mut l = Ledger::open(path).unwrap();
    let rs = "web-7c9d8f5b4";
    let pods = [
        pod("web-a", rs, "10.244.1.10", 0.0),
        pod("web-b", rs, "10.244.1.11", 0.0),
        pod("web-c", rs, "10.244.1.12", 0.0),
    ];
    for p in &pods {
        l.apply_pod(p, t(0.1)).unwrap();
    }
    l.sync_memberships(
        &svc,
        &[
            ep("web-a", "10.244.1.10", false),
            ep("web-b", "10.244.1.11", false),
            ep("web-c", "10.244.1.12", false),
        ],
        change(3.0),
    )
    .unwrap();
    for p in &pods[..2] {
        let mut d = p.clone();
        d.deletion = Some(t(130.0));
        l.apply_pod(&d, t(100.05)).unwrap();
    }
    l.sync_memberships(
        &svc,
        &[
            ep("web-a", "10.244.1.10", true),
            ep("web-b", "10.244.1.11", true),
            ep("web-c", "10.244.1.12", false),
        ],
        change(100.0),
    )
    .unwrap();
    for p in &pods[..2] {
        l.pod_gone(&p.pod, t(101.0)).unwrap();
    }
    l.sync_memberships(&svc, &[ep("web-c", "10.244.1.12", false)], change(101.0))
        .unwrap();
    l.apply_pod(
        &pod("api-x", "api-5f6a7b8c9", "10.244.1.11", 200.0),
        t(200.1),
    )
    .unwrap();
}

fn client_log() -> String {
    let lines = [
        (
            100.5,
            "err=\"dial tcp 10.244.1.10:8080: connect: connection refused\"",
        ),
        (
            105.0,
            "err=\"dial tcp 10.244.1.10:8080: connect: connection refused\"",
        ),
        (
            105.5,
            "err=\"dial tcp 10.244.1.10:8080: connect: connection refused\"",
        ),
        (
            106.0,
            "err=\"read tcp 10.244.2.9:40312->10.244.1.10:8080: read: connection reset by peer\"",
        ),
        (107.0, "err=\"dial tcp 10.244.1.10:8080: i/o timeout\""),
        (
            110.0,
            "err=\"dial tcp 10.244.1.11:8080: connect: connection refused\"",
        ),
        (
            120.0,
            "err=\"dial tcp 10.244.1.12:8080: connect: connection refused\"",
        ),
        (
            121.0,
            "err=\"dial tcp 52.1.2.3:443: connect: connection refused\"",
        ),
        (
            122.0,
            "err=\"lookup web.shop.svc.cluster.local on 10.96.0.10:53: read udp 10.244.2.9:5353->10.96.0.10:53: i/o timeout\"",
        ),
    ];
    let mut s = String::new();
    for (at, msg) in lines {
        s.push_str(&format!(
            "time={} level=INFO msg=\"request ok\" addr=10.244.1.12:8080\n",
            lt(at - 0.2)
        ));
        s.push_str(&format!(
            "time={} level=ERROR msg=\"request failed\" {msg}\n",
            lt(at)
        ));
    }
    s
}

/// (peer, class) → errors.
fn classes(x: &Value) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for g in x["report"]["groups"].as_array().unwrap() {
        *m.entry((
            g["peer"].as_str().unwrap().to_owned(),
            g["class"].as_str().unwrap().to_owned(),
        ))
        .or_default() += g["errors"].as_u64().unwrap();
    }
    m
}

#[test]
fn joins_with_a_real_ledger_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ghostip.db");
    write_ledger(&db);
    let log = dir.path().join("client.log");
    std::fs::write(&log, client_log()).unwrap();
    let before = std::fs::read(&db).unwrap();
    let names = |dir: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    // The writer that made it left its lock file (`ghostip.db.lock`) beside it.
    let files_before = names(dir.path());

    let out = ghostip_wide()
        .args(["explain", "--db"])
        .arg(&db)
        .arg(&log)
        .args(["-o", "json"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    let got = classes(&x);
    let want: BTreeMap<(String, String), u64> = [
        (("10.244.1.10", "terminating_target"), 1),
        (("10.244.1.10", "stale_client_cache"), 2),
        (("10.244.1.10", "pooled_connection"), 1),
        (("10.244.1.10", "blackholed"), 1),
        (("10.244.1.11", "ip_reused"), 1),
        (("10.244.1.12", "not_staleness"), 1),
        (("52.1.2.3", "stale_target"), 1),
        (("dns:web.shop.svc.cluster.local", "dns_path"), 1),
    ]
    .into_iter()
    .map(|((p, c), n)| ((p.to_owned(), c.to_owned()), n))
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        x["history"]["distinct_ips"], 4,
        "one lookup per distinct IP"
    );
    let windows = x["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 1, "{windows:?}");
    assert_eq!(
        windows[0]["label"], "22:15 rollout of shop/deploy/web",
        "{windows:?}"
    );
    assert_eq!(windows[0]["errors"], 6);
    // Errors on the removed pods' IPs are attributed to the Service they had left.
    for g in x["report"]["groups"].as_array().unwrap() {
        if g["peer"] == "10.244.1.10" || g["peer"] == "10.244.1.12" {
            assert_eq!(g["service"], "shop/web", "{g}");
        }
    }
    // Read-only: the file is byte for byte the same and no side file appeared.
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(names(dir.path()), files_before);
    assert_eq!(
        files_before,
        ["client.log", "ghostip.db", "ghostip.db.lock"]
    );

    // The table, as a snapshot (the temporary path redacted).
    let out = ghostip_wide()
        .args(["explain", "--db"])
        .arg(&db)
        .arg(&log)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let table = String::from_utf8(out.stdout)
        .unwrap()
        .replace(&db.display().to_string(), "[DB]");
    insta::assert_snapshot!("ledger_join_table", table);
}

#[test]
fn a_missing_ledger_is_reported_and_never_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let out = ghostip_wide()
        .args(["explain", "--db"])
        .arg(&db)
        .arg("-")
        .write_stdin(client_log())
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no ledger at"), "{err}");
    assert!(!db.exists());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("Without a ledger"), "{table}");
}

#[test]
fn nothing_found_exits_0_and_bad_input_exits_2_naming_the_file() {
    ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-"])
        .write_stdin("2024-05-01T10:00:00Z all good\n")
        .assert()
        .code(0)
        .stdout(predicates::str::contains("No connection failures"));
    ghostip_wide()
        .args([
            "explain",
            "--db",
            "/nonexistent/x.db",
            "/nonexistent/app.log",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "ghostip: opening /nonexistent/app.log",
        ));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("pods.json");
    std::fs::write(
        &bad,
        "{\"kind\":\"List\",\"items\":[]}\n{\"kind\": \"Service\"}\n",
    )
    .unwrap();
    ghostip_wide()
        .args(["explain", "--truth-history"])
        .arg(&bad)
        .arg("-")
        .write_stdin("")
        .assert()
        .code(2)
        .stderr(predicates::str::contains(format!(
            "{}:2: expected a Pod",
            bad.display()
        )));
    ghostip_wide()
        .args(["explain", "--tz", "Mars/Olympus", "-"])
        .write_stdin("")
        .assert()
        .code(2)
        .stderr(predicates::str::contains("reading --tz Mars/Olympus"));
}

#[test]
fn garbled_gzip_and_yearless_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut raw = Vec::new();
    raw.extend_from_slice(b"\x00\x01\x02binary \xff\xfe garbage connection refused\n");
    raw.extend_from_slice(
        b"Mar 19 08:02:43 node-1 app[42]: dial tcp 10.244.1.10:8080: connect: connection refused\n",
    );
    let gz = dir.path().join("app.log.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(&raw).unwrap();
    enc.finish().unwrap();

    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-o", "json"])
        .arg(&gz)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    assert_eq!(x["report"]["total"], 1);
    assert_eq!(x["stats"]["binary_lines"], 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 binary line(s) (NUL bytes) skipped"),
        "{err}"
    );
    assert!(err.contains("have no year"), "{err}");
    assert_eq!(x["report"]["groups"][0]["approximate_time"], true);

    let out = ghostip_wide()
        .args([
            "explain",
            "--db",
            "/nonexistent/x.db",
            "--year",
            "2024",
            "--tz",
            "+02:00",
            "-o",
            "json",
        ])
        .arg(&gz)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("have no year"), "{err}");
    assert!(!err.contains("have no zone"), "{err}");
    assert_eq!(x["report"]["groups"][0]["first"], "2024-03-19T06:02:43Z");
    assert_eq!(x["report"]["groups"][0]["approximate_time"], false);
}

fn lab_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lab-cacheclient")
        .join(name)
}

/// The lab client's real log against the pod watch stream captured in the same run.
#[test]
fn lab_client_log_with_the_captured_truth_history() {
    let out = ghostip_wide()
        .args(["explain", "--truth-history"])
        .arg(lab_fixture("pods-watch.json"))
        .arg(lab_fixture("client.log"))
        .args(["-o", "json"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let mut x = json(&out.stdout);
    x["inputs"] = Value::Null;
    x["history"]["source"] = Value::Null;
    insta::assert_json_snapshot!("lab_client_truth_history", x);

    // Without any history: the same failures, classified by kind only.
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db"])
        .arg(lab_fixture("client.log"))
        .assert()
        .code(1)
        .get_output()
        .clone();
    insta::assert_snapshot!(
        "lab_client_without_history",
        String::from_utf8(out.stdout).unwrap()
    );
}

/// The files of the shared client-error corpus (read in place), sorted; the test fails
/// naming the folder where the corpus is absent.
fn shared_client_errors() -> Vec<PathBuf> {
    let dir = ghostip_testkit::env::fixtures("client-errors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The shared corpus, read in place: the CLI finds exactly what the library finds, per input.
#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn shared_corpus_through_the_cli() {
    let files = shared_client_errors();
    let mut want = 0u64;
    for f in &files {
        let (failures, _) = ghostip_logs::scan_reader(
            ghostip_logs::open_reader(std::fs::File::open(f).unwrap()).unwrap(),
            ghostip_logs::ScanOptions::default(),
        )
        .unwrap();
        want += failures.len() as u64;
    }
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-o", "json"])
        .args(&files)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    assert!(want > 0);
    assert_eq!(x["report"]["total"], want);
    assert_eq!(x["stats"]["failures"], want);
    eprintln!(
        "{} files, {want} failures, per format {}",
        files.len(),
        x["stats"]["per_format"]
    );
}

/// Every input of the shared corpus, alone, is a table at 80 columns: long host names take an
/// ellipsis, port and server lists wrap after a comma; nothing is wider.
#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn shared_corpus_fits_80_columns_as_tables() {
    let files = shared_client_errors();
    for f in &files {
        let out = ghostip_wide()
            .env("COLUMNS", "80")
            .args(["explain", "--db", "/nonexistent/x.db"])
            .arg(f)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 80,
                "{}: a line of {} columns:\n{text}",
                f.display(),
                line.chars().count()
            );
        }
        assert!(
            !text.lines().any(|l| l.starts_with("target: ")),
            "{}: key: value lists at 80 columns:\n{text}",
            f.display()
        );
    }
}

/// A generated log of about 10 MiB (three 4 MiB segments for the parallel scan) with a
/// multi-line Java event across the first segment cut and yearless lines after it.
fn generated_log() -> Vec<u8> {
    use ghostip_testkit::logs::{GenConfig, LogGenerator};
    let mut g = LogGenerator::new(GenConfig {
        seed: 77,
        error_ratio: 0.02,
        ..GenConfig::default()
    });
    let mut data = Vec::new();
    g.fill(&mut data, (4 << 20) - 100);
    // Its first line runs over the 4 MiB mark, so the lines that continue it start the next
    // segment.
    data.extend_from_slice(
        b"2024-05-01 15:42:10.123 ERROR [http-nio-8080-exec-7] c.e.shop.InventoryClient - GET /inventory/items failed after retries; giving up and returning 503 to the caller\n\
          java.net.SocketException: Connection reset\n\
          \tat java.base/sun.nio.ch.NioSocketImpl.implRead(NioSocketImpl.java:323)\n\
          Caused by: java.net.ConnectException: Failed to connect to inventory/10.244.3.71:8080\n\
          Mar 19 08:02:43 node-1 app[42]: dial tcp 10.244.1.10:8080: connect: connection refused\n",
    );
    g.fill(&mut data, 6 << 20);
    data.extend_from_slice(b"dial tcp 10.244.1.11:8080: connect: connection refused");
    data
}

#[test]
fn threads_gzip_and_stdin_give_the_one_thread_json() {
    let dir = tempfile::tempdir().unwrap();
    let data = generated_log();
    let plain = dir.path().join("app.log");
    std::fs::write(&plain, &data).unwrap();
    let gz = dir.path().join("app.log.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(&data).unwrap();
    enc.finish().unwrap();

    let run = |threads: &str, file: &Path, stdin: bool| {
        let mut c = ghostip_wide();
        c.args(["explain", "--db", "/nonexistent/x.db", "--threads", threads]);
        c.args(["-o", "json"]);
        if stdin {
            c.arg("-").pipe_stdin(file).unwrap();
        } else {
            c.arg(file);
        }
        let out = c.assert().code(1).get_output().clone();
        let mut x = json(&out.stdout);
        x["inputs"] = Value::Null;
        x
    };
    let one = run("1", &plain, false);
    assert!(
        one["report"]["total"].as_u64().unwrap() > 500,
        "{}",
        one["report"]["total"]
    );
    assert_eq!(one["stats"]["bytes"].as_u64(), Some(data.len() as u64));
    // The event across the cut is one failure: the reset's line, the target of its cause.
    let joined = one["report"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["peer"] == "10.244.3.71" && g["by_kind"]["reset"].as_u64() >= Some(1));
    assert!(joined, "{}", one["report"]);
    for threads in ["2", "3", "8"] {
        assert_eq!(run(threads, &plain, false), one, "--threads {threads}");
    }
    assert_eq!(run("3", &gz, false), one, "gzip");
    assert_eq!(run("3", &plain, true), one, "stdin");
}

/// [`generated_log`] written to `dir/app.log`, not modified for an hour: `--mmap auto` maps it
/// (a fresh file would be read).
fn settled_log(dir: &Path) -> (PathBuf, Vec<u8>) {
    let data = generated_log();
    let plain = dir.join("app.log");
    std::fs::write(&plain, &data).unwrap();
    let f = std::fs::File::options().write(true).open(&plain).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .unwrap();
    (plain, data)
}

#[test]
fn a_mapped_file_gives_the_json_of_the_read_path() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, data) = settled_log(dir.path());

    let run = |threads: &str, mmap: &str| {
        let mut c = ghostip_wide();
        c.args(["explain", "--db", "/nonexistent/x.db", "--threads", threads]);
        c.args(["--mmap", mmap, "-o", "json"]).arg(&plain);
        let out = c.assert().code(1).get_output().clone();
        json(&out.stdout)
    };
    let read = run("1", "never");
    assert!(
        read["report"]["total"].as_u64().unwrap() > 500,
        "{}",
        read["report"]["total"]
    );
    assert_eq!(read["stats"]["bytes"].as_u64(), Some(data.len() as u64));
    for threads in ["1", "2", "3"] {
        assert_eq!(
            run(threads, "auto"),
            read,
            "--mmap auto --threads {threads}"
        );
        assert_eq!(
            run(threads, "never"),
            read,
            "--mmap never --threads {threads}"
        );
    }
}

#[test]
fn target_keeps_the_full_reports_groups_for_that_address_in_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, _) = settled_log(dir.path());
    let run = |extra: &[&str]| {
        let mut c = ghostip_wide();
        c.args([
            "explain",
            "--db",
            "/nonexistent/x.db",
            "--year",
            "2024",
            "-o",
            "json",
        ]);
        c.args(extra).arg(&plain);
        json(&c.assert().code(1).get_output().stdout)
    };
    let full = run(&[]);
    let groups_of = |x: &Value, peer: &str| -> Vec<Value> {
        x["report"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["peer"] == peer)
            .cloned()
            .collect()
    };
    // The multi-line Java event across the first segment cut, and a busy generated address.
    for peer in ["10.244.3.71", "10.244.3.70"] {
        let want = groups_of(&full, peer);
        assert!(!want.is_empty(), "{peer}");
        for (threads, mmap) in [("1", "never"), ("2", "never"), ("2", "auto"), ("3", "auto")] {
            let x = run(&["--target", peer, "--threads", threads, "--mmap", mmap]);
            assert_eq!(x["only_target"], peer);
            assert_eq!(
                x["report"]["groups"].as_array().unwrap(),
                &want,
                "{peer} --threads {threads} --mmap {mmap}"
            );
        }
    }
    // A port narrows it; the table says what was kept.
    let x = run(&["--target", "10.244.3.71:8080"]);
    assert_eq!(x["report"]["total"], 1, "{}", x["report"]);
    let out = ghostip_wide()
        .args([
            "explain",
            "--db",
            "/nonexistent/x.db",
            "--target",
            "10.244.3.71:9",
        ])
        .arg(&plain)
        .assert()
        .code(0)
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("No connection failures aimed at 10.244.3.71:9 in "),
        "{text}"
    );
    ghostip_wide()
        .args(["explain", "--target", "10.244.3"])
        .arg(&plain)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("is not an IP or IP:PORT"));
}

/// A log of `size` bytes of ordinary lines with a refused connection every 64 KiB, written to
/// `path` and not modified for an hour (so that `--mmap auto` maps it); returns the number of
/// failures in it.
fn write_settled(path: &Path, size: usize) -> u64 {
    let ok = format!(
        "{} level=INFO msg=\"request ok\" addr=10.244.1.12:8080 took=3ms\n",
        lt(1.0)
    );
    let failed = format!(
        "{} level=ERROR msg=\"request failed\" err=\"dial tcp 10.244.1.10:8080: connect: connection refused\"\n",
        lt(2.0)
    );
    let mut data = String::with_capacity(size + 4096);
    let mut failures = 0;
    let mut next = 0;
    while data.len() < size {
        if data.len() >= next {
            data.push_str(&failed);
            failures += 1;
            next += 64 << 10;
        }
        data.push_str(&ok);
    }
    std::fs::write(path, data).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .unwrap();
    failures
}

/// logrotate's `copytruncate` cuts a log while `explain` scans it in place: the scan must not
/// die (a truncated mapping raises SIGBUS). The truncation waits for the scan's read lease, so
/// the report holds the whole file. Several rounds, the truncation at different moments of the
/// scan; each bounded by the scan of 48 MiB and the kernel's lease-break time.
#[test]
fn a_log_truncated_while_it_is_scanned_in_place_does_not_crash_explain() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    for round in 0..5u64 {
        let failures = write_settled(&path, 48 << 20);
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_ghostip"))
            .env_remove("GHOSTIP_DB")
            .env("HOME", "/nonexistent-home")
            .args(["explain", "--db", "/nonexistent/x.db", "--threads", "2"])
            .args(["--mmap", "auto", "-o", "json"])
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(40 + 70 * round));
        // copytruncate: open for writing, cut to nothing.
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_len(0).unwrap();
        drop(f);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.signal().is_none(),
            "round {round}: killed by signal {:?}; stderr: {stderr}",
            out.status.signal()
        );
        // Exit 1 with the failures read (all of them when the scan's lease held the
        // truncation off), 0 and nothing when the truncation came before the scan.
        let x = json(&out.stdout);
        let total = x["report"]["total"].as_u64().unwrap();
        match out.status.code() {
            Some(1) => assert!(total > 0 && total <= failures, "round {round}: {stderr}"),
            Some(0) => assert_eq!(total, 0, "round {round}: {stderr}"),
            other => panic!("round {round}: exit {other:?}: {stderr}"),
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}

#[test]
fn a_truncated_gzip_reports_what_was_read_then_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str(&format!(
            "{} level=ERROR msg=\"request failed\" err=\"dial tcp 10.244.1.{}:8080: connect: connection refused\"\n",
            lt(f64::from(i)),
            i % 200
        ));
    }
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(text.as_bytes()).unwrap();
    let gz = enc.finish().unwrap();
    let cut = gz.len() / 2;
    let broken = dir.path().join("app.log.1.gz");
    std::fs::write(&broken, &gz[..cut]).unwrap();
    let whole = dir.path().join("app.log");
    std::fs::write(&whole, client_log()).unwrap();

    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-o", "json"])
        .arg(&broken)
        .arg(&whole)
        .assert()
        .code(2)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    let total = x["report"]["total"].as_u64().unwrap();
    // Part of the gzip, and all of the next input.
    assert!(total > 9 + 1000 && total < 9 + 20_000, "{total}");
    let e = &x["read_errors"][0];
    assert_eq!(e["input"], broken.display().to_string());
    let offset = e["offset"].as_u64().unwrap();
    assert!(offset > 0 && offset < text.len() as u64, "{e}");
    assert_eq!(e["compressed_offset"].as_u64(), Some(cut as u64), "{e}");
    assert_eq!(x["read_errors"].as_array().unwrap().len(), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "ghostip: reading {} at byte {offset} of the decompressed text (byte {cut} of the gzip file): ",
            broken.display()
        )),
        "{err}"
    );
    // The table too: the report, then what is missing.
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db"])
        .arg(&broken)
        .assert()
        .code(2)
        .get_output()
        .clone();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains(" errors (refused), between "), "{table}");
    assert!(
        table.contains(&format!(
            "Incomplete: reading {} at byte {offset}",
            broken.display()
        )),
        "{table}"
    );
}

#[test]
fn loopback_and_link_local_targets_are_not_staleness() {
    let log = [
        "2024-05-01T15:42:10Z dial tcp 127.0.0.1:15000: connect: connection refused",
        "2024-05-01T15:42:11Z Get \"http://169.254.169.254/latest/meta-data/\": dial tcp 169.254.169.254:80: i/o timeout",
        "2024-05-01T15:42:12Z dial tcp [::1]:9090: connect: connection refused",
        "2024-05-01T15:42:13Z dial tcp [fe80::1]:80: connect: no route to host",
    ]
    .join("\n");
    for db in [None, Some("ledger")] {
        let dir = tempfile::tempdir().unwrap();
        let mut c = ghostip_wide();
        c.args(["explain", "-o", "json", "--db"]);
        match db {
            // With a ledger: never looked up.
            Some(_) => {
                let path = dir.path().join("ghostip.db");
                write_ledger(&path);
                c.arg(path);
            }
            None => {
                c.arg("/nonexistent/x.db");
            }
        }
        let out = c.arg("-").write_stdin(log.clone()).assert().code(0);
        let x = json(&out.get_output().stdout);
        let got = classes(&x);
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got.keys().all(|(_, c)| c == "local_target"), "{got:?}");
        if db.is_some() {
            assert_eq!(x["history"]["distinct_ips"], 0);
        }
    }
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-"])
        .write_stdin(log)
        .assert()
        .code(0)
        .get_output()
        .clone();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("local-target") && table.contains("never a pod IP"),
        "{table}"
    );
}

#[test]
fn dns_lookup_failures_name_the_host_and_the_dns_server() {
    let log = [
        "2024-05-01T15:42:10Z dial tcp: lookup argocd-redis: i/o timeout",
        "2024-05-01T15:42:11Z dial tcp: lookup argocd-redis on 10.96.0.10:53: read udp 10.244.0.5:40000->10.96.0.10:53: i/o timeout",
        "2024-05-01T15:42:12Z lookup foo.bar.svc.cluster.local on 169.254.20.10:53: server misbehaving",
    ]
    .join("\n");
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-o", "json", "-"])
        .write_stdin(log.clone())
        .assert()
        .code(1)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    let groups = x["report"]["groups"].as_array().unwrap();
    let redis = groups
        .iter()
        .find(|g| g["peer"] == "dns:argocd-redis")
        .unwrap();
    assert_eq!(redis["dns_name"], "argocd-redis");
    assert_eq!(redis["errors"], 2);
    assert_eq!(redis["dns_servers"], serde_json::json!(["10.96.0.10:53"]));
    let foo = groups
        .iter()
        .find(|g| g["dns_name"] == "foo.bar.svc.cluster.local")
        .unwrap();
    assert_eq!(foo["dns_servers"], serde_json::json!(["169.254.20.10:53"]));
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-"])
        .write_stdin(log)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let table = String::from_utf8(out.stdout).unwrap();
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}: {table}"))
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(table.contains("DNS SERVER"), "{table}");
    assert_eq!(row("dns:argocd-redis"), "dns:argocd-redis - 10.96.0.10:53");
    assert_eq!(
        row("dns:foo.bar"),
        "dns:foo.bar.svc.cluster.local - 169.254.20.10:53"
    );
}

/// An undated failure after an unrelated line used to take that line's time, and so a class
/// from the ledger and a place in the rollout window.
#[test]
fn an_undated_failure_is_not_placed_in_a_rollout_window() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ghostip.db");
    write_ledger(&db);
    let mut log = client_log();
    log.push_str(&format!(
        "{} level=INFO msg=\"request ok\" addr=10.244.1.12:8080\n",
        lt(105.2)
    ));
    log.push_str("dial tcp 10.244.1.10:8080: connect: connection refused\n");
    let out = ghostip_wide()
        .args(["explain", "-o", "json", "--db"])
        .arg(&db)
        .arg("-")
        .write_stdin(log)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    let undated: Vec<&Value> = x["report"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["first"].is_null())
        .collect();
    assert_eq!(undated.len(), 1, "{}", x["report"]);
    assert_eq!(undated[0]["peer"], "10.244.1.10");
    assert_eq!(undated[0]["class"], "stale_target");
    assert!(undated[0]["window"].is_null());
    assert_eq!(x["windows"][0]["errors"], 6);
    assert_eq!(x["stats"]["undated"], 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 failure(s) have no time"), "{err}");
}

/// Java's `SocketException: Connection reset` names no peer: such resets are attributed to the
/// rollout under way at their time whose pods the same client's other errors aimed at.
#[test]
fn resets_without_a_peer_address_go_to_the_rollout_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ghostip.db");
    write_ledger(&db);
    let reset = |at: f64| {
        format!(
            "{} ERROR [pool-1-thread-3] c.e.shop.WebClient - GET /cart failed\njava.net.SocketException: Connection reset\n\tat java.base/sun.nio.ch.NioSocketImpl.implRead(NioSocketImpl.java:323)\n",
            lt(at)
        )
    };
    let client = dir.path().join("client.log");
    // Two during the rollout (its first removal at 100 s, its last error aimed at its pods at
    // 110 s), one long after it.
    std::fs::write(
        &client,
        client_log() + &reset(103.0) + &reset(108.5) + &reset(400.0),
    )
    .unwrap();
    // Another client, none of whose errors aimed at the rollout's pods.
    let other = dir.path().join("other.log");
    std::fs::write(&other, reset(104.0)).unwrap();

    let run = |table: bool| {
        let mut c = ghostip_wide();
        c.args(["explain", "--db"])
            .arg(&db)
            .arg(&client)
            .arg(&other);
        if !table {
            c.args(["-o", "json"]);
        }
        c.assert().code(1).get_output().clone()
    };
    let x = json(&run(false).stdout);
    let w = &x["windows"][0];
    assert_eq!(x["windows"].as_array().unwrap().len(), 1);
    assert_eq!(w["aimed_errors"], 6);
    assert_eq!(w["peerless_resets"], 2);
    assert_eq!(w["errors"], 8);
    let mut peerless: Vec<(String, u64)> = x["report"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["peer"] == "-")
        .map(|g| {
            (
                g["window"].as_str().unwrap_or("-").to_owned(),
                g["errors"].as_u64().unwrap(),
            )
        })
        .collect();
    peerless.sort();
    assert_eq!(
        peerless,
        [
            ("-".to_owned(), 2),
            ("22:15 rollout of shop/deploy/web".to_owned(), 2)
        ],
        "{}",
        x["report"]
    );
    let attributed = x["report"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["peer"] == "-" && !g["window"].is_null())
        .unwrap();
    assert_eq!(attributed["service"], "shop/web");
    assert_eq!(attributed["class"], "pooled_connection");
    assert_eq!(
        w["sentence"],
        "8 errors = 4 refused + 3 reset + 1 timeout, between 2023-11-14 22:15:00 and 22:15:10 UTC \
         (10 s): 6 aimed at IPs of the 2 pods removed by the 22:15 rollout of shop/deploy/web, \
         2 resets with no peer address during that rollout's window (8 of 13 errors)"
    );
    let table = String::from_utf8(run(true).stdout).unwrap();
    assert!(
        table.starts_with(w["sentence"].as_str().unwrap()),
        "{table}"
    );
}

#[test]
fn control_sequences_from_a_log_never_reach_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let log = [
        "2024-05-01T15:42:10Z requests.exceptions.ConnectionError: HTTPConnectionPool(host='web\u{1b}[2J\u{1b}]0;pwned\u{7}', port=80): Max retries exceeded (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object>: Failed to establish a new connection: [Errno 111] Connection refused'))",
        "2024-05-01T15:42:11Z odd\u{1b}[31m\u{9b}2J shape: connection refused",
    ]
    .join("\n");
    let file = dir.path().join("app\u{1b}[2J.log");
    std::fs::write(&file, &log).unwrap();
    let visible = |b: &[u8]| {
        let s = String::from_utf8(b.to_vec()).unwrap();
        assert!(
            !s.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reached the terminal: {s:?}"
        );
        s
    };
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db"])
        .arg(&file)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let table = visible(&out.stdout);
    let err = visible(&out.stderr);
    assert!(
        table.contains("host:web\\x1b[2J\\x1b]0;pwned\\x07"),
        "{table}"
    );
    // The unknown shape's example, in a warning.
    assert!(err.contains("odd\\x1b[31m\\u{9b}2J shape"), "{err}");
    // The JSON keeps the text as it was (serde escapes the C0 controls).
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-o", "json"])
        .arg(&file)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let raw = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(raw.contains("host:web\\u001b[2J"), "{raw}");
    let x = json(&out.stdout);
    assert!(
        x["report"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["peer"] == "host:web\u{1b}[2J\u{1b}]0;pwned\u{7}"),
        "{}",
        x["report"]
    );
    // File names in errors.
    let missing = dir.path().join("gone\u{1b}[2J.log");
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db"])
        .arg(&missing)
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = visible(&out.stderr);
    assert!(err.contains("gone\\x1b[2J.log"), "{err}");
}

use crate::width_support;

/// `explain` and `whois` fit 80 columns, turn into `key: value` lists at 30, and keep every
/// value whole with `-o wide`.
#[test]
fn tables_fit_the_terminal_and_wide_keeps_the_full_values() {
    use width_support::{assert_fits, assert_wider};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ghostip.db");
    write_ledger(&db);
    let explain = |columns: &str, output: &str| {
        ghostip_wide()
            .env("COLUMNS", columns)
            .args(["explain", "-o", output, "--truth-history"])
            .arg(lab_fixture("pods-watch.json"))
            .arg(lab_fixture("client.log"))
            .assert()
            .code(1)
            .get_output()
            .stdout
            .clone()
    };
    // With a history the table gains `terminating-target` classes and a rollout WINDOW: whole
    // at 120; at 80 still a table, CLASS broken after its hyphen and ERRORS (the sum of KINDS)
    // given way; `key: value` lists only at 30.
    let out = assert_fits(&explain("120", "table"), 120);
    assert!(
        out.lines()
            .any(|l| l.starts_with("TARGET") && l.contains("ERRORS")),
        "{out}"
    );
    let out = assert_fits(&explain("80", "table"), 80);
    let header = out.lines().find(|l| l.starts_with("TARGET"));
    let header: Vec<&str> = header.map_or(vec![], |h| h.split_whitespace().collect());
    assert_eq!(
        header,
        [
            "TARGET", "PORTS", "CLASS", "WINDOW", "KINDS", "FIRST", "LAST"
        ],
        "{out}"
    );
    assert!(
        out.contains("10.244.1.4") && out.contains("terminating-"),
        "{out}"
    );
    let out = assert_fits(&explain("30", "table"), 30);
    assert!(out.contains("target: "), "{out}");
    let out = assert_wider(&explain("80", "wide"), 80);
    assert!(out.contains("TARGET"), "{out}");

    let whois = |columns: &str, output: &str| {
        ghostip_wide()
            .env("COLUMNS", columns)
            .arg("--db")
            .arg(&db)
            .args(["whois", "10.244.1.11", "--at"])
            .arg(lt(100.5))
            .args(["-o", output])
            .assert()
            .code(0)
            .get_output()
            .stdout
            .clone()
    };
    let out = assert_fits(&whois("80", "table"), 80);
    assert!(out.contains("shop/web-b"), "{out}");
    // FROM and UNTIL count from --at.
    assert!(out.contains("-1m40s"), "{out}");
    let out = assert_fits(&whois("30", "table"), 30);
    assert!(out.contains("pod: shop/web-b"), "{out}");
    let out = assert_wider(&whois("80", "wide"), 80);
    assert!(
        out.contains("ReplicaSet/web-7c9d8f5b4") && out.contains("ReplicaSet/api-5f6a7b8c9"),
        "{out}"
    );
    assert!(out.contains("2023-11-14T22:13:20"), "{out}");
}

/// The stale flows node-1's agent saw to web-a's IP, 100 to 108 s.
fn conntrack_finding() -> ghostip::ledger::FindingRecord {
    ghostip::ledger::FindingRecord {
        kind: ghostip::ledger::FindingKind::Stale,
        layer: CONNTRACK.to_string(),
        path_id: "conntrack/node-1".into(),
        path_kind: CONNTRACK_TABLE.to_string(),
        service: ServiceKey::new("shop", "web"),
        target: ghostip_core::Target::socket(ip("10.244.1.10"), 8080),
        t0: t(100.0),
        received: t(100.05),
        trigger: None,
        t0_correction: None,
        last_seen: Some(t(107.0)),
        converged_by: Some(t(108.0)),
        window: Some(std::time::Duration::from_secs(8)),
        expected_lag: Some(std::time::Duration::from_secs(1)),
        verdict: "over-expected-lag".into(),
        exposure: None,
        former_pod: Some(pref("web-a")),
    }
}

/// `ghostip --db DB explain LOG -o json`, which finds staleness (exit 1).
fn joined_json(db: &Path, log: &Path) -> Value {
    let out = ghostip_wide()
        .arg("--db")
        .arg(db)
        .args(["explain", "-o", "json"])
        .arg(log)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    json(&out)
}

/// `ghostip --db DB explain LOG` as a table 1000 columns wide (exit 1).
fn joined_table(db: &Path, log: &Path) -> String {
    let out = ghostip_wide()
        .env("COLUMNS", "1000")
        .arg("--db")
        .arg(db)
        .arg("explain")
        .arg(log)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

/// A ledger kept by a node's agent also holds its conntrack findings: the flows to web-a's IP
/// that outlived its endpoint. explain joins the failures with them.
#[test]
fn failures_are_joined_with_the_flows_an_agent_saw_outlive_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    write_ledger(&db);
    Ledger::open(&db)
        .unwrap()
        .record_finding(&conntrack_finding())
        .unwrap();
    let log = dir.path().join("client.log");
    std::fs::write(&log, client_log()).unwrap();
    let x = joined_json(&db, &log);
    let target = |a: &str| {
        x["targets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["ip"] == a)
            .unwrap_or_else(|| panic!("no target {a}: {x}"))
            .clone()
    };
    // Five failures to web-a's IP between 100.5 and 107 s, all while the flows lived (100 to
    // the read that found them gone at 108 s), one of them a reset; their last packet went
    // out at 107 s, 7 s after the endpoint left.
    let web_a = target("10.244.1.10");
    assert_eq!(
        web_a["agent_flows"],
        serde_json::json!({
            "failures_on_flows": 5,
            "resets_on_flows": 1,
            "paths": ["conntrack/node-1"],
            "former_pods": ["shop/web-a"],
            "outlived_s": [7.0, 7.0],
        })
    );
    // web-b's IP: no flows were seen, nothing is claimed.
    assert!(target("10.244.1.11").get("agent_flows").is_none());
    let table = joined_table(&db, &log);
    assert!(
        table.contains(
            "5 failure(s) (1 resets), all on flows the agent on node-1 saw outlive pod shop/web-a by 7 s"
        ),
        "{table}"
    );
}

/// A finding of a layer and path kind this binary does not know (a newer binary's gRPC
/// channelz layer, written with plain SQL) about web-a's IP: `explain --db` and `whois`
/// read the ledger as before, and take the row for what it is (not conntrack flows).
#[test]
fn a_finding_of_an_unknown_layer_does_not_stop_explain_or_whois() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    write_ledger(&db);
    Ledger::open(&db)
        .unwrap()
        .record_finding(&conntrack_finding())
        .unwrap();
    let changed = rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE findings SET layer = 'grpc', path_kind = 'grpc-channelz', \
             path_id = 'grpc-channelz/web-7c9'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let log = dir.path().join("client.log");
    std::fs::write(&log, client_log()).unwrap();
    let x = joined_json(&db, &log);
    let web_a = x["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["ip"] == "10.244.1.10")
        .unwrap_or_else(|| panic!("no target 10.244.1.10: {x}"));
    assert!(web_a.get("agent_flows").is_none(), "{web_a}");
    // The same classes as with a ledger that never had the row.
    let plain = dir.path().join("plain.db");
    write_ledger(&plain);
    let out = ghostip_wide()
        .arg("--db")
        .arg(&plain)
        .args(["explain", "-o", "json"])
        .arg(&log)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    assert_eq!(classes(&x), classes(&json(&out)));
    let whois = ghostip_wide()
        .arg("--db")
        .arg(&db)
        .args(["whois", "10.244.1.10", "-o", "json"])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8_lossy(&whois).contains("web-a"));
}

/// What the watch records of a gRPC client's balancer (the channelz layer): shop/grpc-client
/// held web-a's address from when it left (100 s) to the read without it (131 s).
fn channelz_finding() -> ghostip::ledger::FindingRecord {
    ghostip::ledger::FindingRecord {
        layer: "channelz".into(),
        path_id: "channelz/shop/grpc-client/dns:///web.shop.svc.cluster.local:8080".into(),
        path_kind: "grpc-channel".into(),
        last_seen: Some(t(130.0)),
        converged_by: Some(t(131.0)),
        window: Some(std::time::Duration::from_secs(31)),
        expected_lag: Some(std::time::Duration::from_secs(35)),
        verdict: "within expected lag".into(),
        ..conntrack_finding()
    }
}

/// A gRPC client's failures to an address its own balancer still held (the watch's channelz
/// finding) are the balancer's staleness: class stale-client-balancer, with the window and
/// the failures within it; a failure after the window keeps the class the pod's history
/// gives.
#[test]
fn failures_within_a_balancers_window_are_the_balancers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    write_ledger(&db);
    Ledger::open(&db)
        .unwrap()
        .record_finding(&channelz_finding())
        .unwrap();
    // The lab client's lines, as grpc-go prints its errors.
    let line = |at: f64, addr: &str| {
        format!(
            "{} grpcclient: target=dns:///web.shop.svc.cluster.local:8080 call failed: rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial tcp {addr}: connect: connection refused\"\n",
            lt(at)
        )
    };
    let mut log_text = String::new();
    for at in [101.0, 110.0, 129.5] {
        log_text.push_str(&line(at, "10.244.1.10:8080"));
    }
    // Once the dead IP stops answering at all, the dial times out: still the balancer's.
    log_text.push_str(&format!(
        "{} grpcclient: target=dns:///web.shop.svc.cluster.local:8080 call failed: rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial tcp 10.244.1.10:8080: i/o timeout\"\n",
        lt(120.0)
    ));
    log_text.push_str(&line(140.0, "10.244.1.10:8080"));
    let log = dir.path().join("client.log");
    std::fs::write(&log, log_text).unwrap();
    let x = joined_json(&db, &log);
    let got = classes(&x);
    assert_eq!(
        got.get(&("10.244.1.10".to_owned(), "stale_client_balancer".to_owned())),
        Some(&4),
        "{got:?}"
    );
    assert_eq!(
        got.get(&("10.244.1.10".to_owned(), "stale_client_cache".to_owned())),
        Some(&1),
        "{got:?}"
    );
    let web_a = x["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["ip"] == "10.244.1.10")
        .unwrap()
        .clone();
    let held = &web_a["held"][0];
    assert_eq!(held["holder"], "shop/grpc-client", "{web_a}");
    assert_eq!(held["layer"], "channelz");
    assert_eq!(held["target"], "10.244.1.10:8080");
    assert_eq!(held["since"], "2023-11-14T22:15:00Z");
    assert_eq!(held["until"], "2023-11-14T22:15:31Z");
    assert_eq!(held["failures_within"], 4);
    assert_eq!(held["first_failure"], "2023-11-14T22:15:01Z");
    assert_eq!(held["last_failure"], "2023-11-14T22:15:29.5Z");
    let table = joined_table(&db, &log);
    assert!(
        table.contains(
            "the gRPC balancer of shop/grpc-client (channelz) held 10.244.1.10:8080 for 31.0 s after it left; 4 of these failures fall within it"
        ),
        "{table}"
    );
}
