//! `ghostip explain` as a user runs it: against a ledger written through the ledger's own API,
//! against the lab client's real log and pod watch stream (`tests/fixtures/lab-cacheclient/`),
//! over the shared client-error corpus (read in place), and on bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use ghostip::ledger::Ledger;
use ghostip_core::truth::{EndpointRecord, PodRecord};
use ghostip_core::{ChangeTime, PodRef, ServiceKey, Time};
use serde_json::Value;

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
        pod: pref(name),
        ips: vec![ip(addr)],
        node: Some("node-1".into()),
        owner_kind: Some("ReplicaSet".into()),
        owner_name: Some(rs.into()),
        created: Some(t(created)),
        ready_since: Some(t(created + 2.0)),
        deletion: None,
        grace_period_seconds: Some(30),
        prestop_seconds: None,
        host_network: false,
        labels: BTreeMap::new(),
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

fn ghostip() -> Command {
    let mut c = Command::cargo_bin("ghostip").unwrap();
    c.env_remove("GHOSTIP_DB").env("HOME", "/nonexistent-home");
    c
}

fn json(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| {
        panic!("bad JSON ({e}): {}", String::from_utf8_lossy(out));
    })
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

    let out = ghostip()
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
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["client.log", "ghostip.db"]);

    // The table, as a snapshot (the temporary path redacted).
    let out = ghostip()
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
    let out = ghostip()
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
    ghostip()
        .args(["explain", "--db", "/nonexistent/x.db", "-"])
        .write_stdin("2024-05-01T10:00:00Z all good\n")
        .assert()
        .code(0)
        .stdout(predicates::str::contains("No connection failures"));
    ghostip()
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
    ghostip()
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
    ghostip()
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

    let out = ghostip()
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
    assert!(err.contains("binary or non-UTF-8 line(s) skipped"), "{err}");
    assert!(err.contains("have no year"), "{err}");
    assert_eq!(x["report"]["groups"][0]["approximate_time"], true);

    let out = ghostip()
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
    let out = ghostip()
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
    let out = ghostip()
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

/// The shared corpus, read in place: the CLI finds exactly what the library finds, per input.
#[test]
fn shared_corpus_through_the_cli() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/client-errors");
    if !dir.is_dir() {
        eprintln!("skipped: {} is absent", dir.display());
        return;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut want = 0u64;
    for f in &files {
        let (failures, _) = ghostip_logs::scan_reader(
            ghostip_logs::open_reader(std::fs::File::open(f).unwrap()).unwrap(),
            ghostip_logs::ScanOptions::default(),
        )
        .unwrap();
        want += failures.len() as u64;
    }
    let out = ghostip()
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
        let mut c = ghostip();
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
        let mut c = ghostip();
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
        let mut c = ghostip();
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
    let out = ghostip()
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
    ghostip()
        .args(["explain", "--target", "10.244.3"])
        .arg(&plain)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("is not an IP or IP:PORT"));
}
