//! `ghostip explain` on inputs that end badly or ask for nothing: a gzip cut short or followed
//! by junk (every decompressed line is scanned, then the error is reported), a log truncated
//! while it is read (a short read and a warning, never a signal), `--since` after `--until`,
//! `localhost` targets, and a ledger path with control characters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{ghostip_wide, json};

/// `n` refused connections, one a line.
fn refused(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "2024-05-01T15:42:{:02}Z level=ERROR msg=\"request failed\" err=\"dial tcp 10.244.{}.{}:8080: connect: connection refused\"\n",
            i % 60,
            i / 200 % 250,
            i % 200
        ));
    }
    text
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// The report's total and exit code of `explain -o json FILE`.
fn total(path: &Path) -> (u64, Option<i32>, String) {
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-o", "json"])
        .arg(path)
        .output()
        .unwrap();
    let x = json(&out.stdout);
    (
        x["report"]["total"].as_u64().unwrap(),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_truncated_gzip_has_every_decompressed_line_explained_then_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = refused(40_000);
    let gz = gzip(text.as_bytes());
    for cut in [gz.len() / 2, gz.len() * 9 / 10] {
        let broken = dir.path().join(format!("cut-{cut}.log.gz"));
        std::fs::write(&broken, &gz[..cut]).unwrap();
        // What a decoder gives before the error, as a plain file: the failures to find.
        let mut seen = Vec::new();
        let mut dec = flate2::read::MultiGzDecoder::new(&gz[..cut]);
        let mut buf = [0u8; 8192];
        while let Ok(n) = dec.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let plain = dir.path().join(format!("cut-{cut}.log"));
        std::fs::write(&plain, &seen).unwrap();
        let (want, code, _) = total(&plain);
        assert_eq!(code, Some(1));
        assert!(want > 1000, "{want}");
        let (got, code, err) = total(&broken);
        assert_eq!(code, Some(2), "{err}");
        assert_eq!(got, want, "cut at {cut} of {}", gz.len());
        assert!(err.contains("of the gzip file"), "{err}");
    }
}

#[test]
fn junk_after_a_complete_gzip_loses_no_failure() {
    let dir = tempfile::tempdir().unwrap();
    let mut gz = gzip(refused(40_000).as_bytes());
    gz.extend_from_slice(b"\x00junk!");
    let path = dir.path().join("app.log.gz");
    std::fs::write(&path, &gz).unwrap();
    let (got, code, err) = total(&path);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(got, 40_000);
}

/// Bytes the process read through `read(2)` and `pread(2)` so far (`/proc/PID/io`, `rchar`).
fn bytes_read(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("rchar: ").map(|v| v.trim().parse().ok()))
                .flatten()
        })
        .unwrap_or(0)
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// logrotate's `copytruncate` empties a log while `explain` reads it: the process is stopped
/// once it has read 4 MiB of a 64 MiB log, the file is truncated, the process continued. It
/// must end normally (a memory-mapped file raised SIGBUS here), report what it read and warn
/// that the file shrank. One thread and two (segments on threads).
#[test]
fn a_log_truncated_under_the_reader_is_a_short_read_and_a_warning() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    let mut text = String::new();
    let ok = "2024-05-01T15:42:10Z level=INFO msg=\"request ok\" addr=10.244.1.12:8080 took=3ms\n";
    let one = refused(1);
    while text.len() < 64 << 20 {
        text.push_str(&one);
        for _ in 0..500 {
            text.push_str(ok);
        }
    }
    let len = text.len() as u64;
    for threads in ["1", "2"] {
        std::fs::write(&path, &text).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ghostip"))
            .env_remove("GHOSTIP_DB")
            .env("HOME", "/nonexistent-home")
            .args(["explain", "--db", "/nonexistent/x.db", "--threads", threads])
            .args(["-o", "json"])
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Bounded: 20 s for the first 4 MiB.
        let t0 = Instant::now();
        while bytes_read(pid) < 4 << 20 && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(1));
        }
        signal(pid, "-STOP");
        let read_when_stopped = bytes_read(pid);
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_len(0).unwrap();
        drop(f);
        signal(pid, "-CONT");
        let mut stdout = Vec::new();
        let mut stderr = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(
            status.signal().is_none(),
            "--threads {threads}: killed by signal {:?}; stderr: {stderr}",
            status.signal()
        );
        let x = json(&stdout);
        let scanned = x["stats"]["bytes"].as_u64().unwrap();
        assert!(
            read_when_stopped >= 4 << 20 && read_when_stopped < len,
            "--threads {threads}: read {read_when_stopped} of {len} before the stop"
        );
        assert!(scanned < len, "--threads {threads}: {scanned} of {len}");
        assert!(
            stderr.contains("the file shrank while it was read")
                && stderr.contains(&format!("{len} bytes when opened")),
            "--threads {threads}: {stderr}"
        );
        let warned = x["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("shrank"));
        assert!(warned, "{}", x["warnings"]);
        // The failures in what was read (one per 500 lines), exit 1. One thread has read 4 MiB
        // in order; with two, the first segment's read may have come after the truncation (the
        // 4 MiB were the second's), and then nothing of the file is applied: exit 0.
        let found = x["report"]["total"].as_u64().unwrap();
        assert_eq!(found > 0, scanned > 0, "--threads {threads}: {stderr}");
        assert_eq!(status.code(), Some(i32::from(found > 0)), "{stderr}");
        if threads == "1" {
            assert!(scanned >= 4 << 20, "{scanned}");
        }
    }
}

#[test]
fn since_after_until_is_an_error_naming_both() {
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db"])
        .args([
            "--since",
            "2024-05-01T16:00:00Z",
            "--until",
            "2024-05-01T15:00:00Z",
        ])
        .arg("-")
        .write_stdin(refused(3))
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--since 2024-05-01T16:00:00Z is later than --until 2024-05-01T15:00:00Z"),
        "{err}"
    );
    // Relative times too; equal bounds are an empty window, not an error.
    ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db"])
        .args(["--since", "-5m", "--until", "-2h", "-"])
        .write_stdin("")
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "--since -5m is later than --until -2h",
        ));
    ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db"])
        .args([
            "--since",
            "2024-05-01T15:00:00Z",
            "--until",
            "2024-05-01T15:00:00Z",
            "-",
        ])
        .write_stdin(refused(3))
        .assert()
        .code(0);
}

#[test]
fn localhost_targets_are_local_never_stale() {
    let log = [
        "2024-05-01T15:42:10Z urllib3.exceptions.MaxRetryError: HTTPConnectionPool(host='localhost', port=8080): Max retries exceeded with url: /api (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused',))",
        "2024-05-01T15:42:11Z urllib3.exceptions.MaxRetryError: HTTPConnectionPool(host='api.localhost', port=80): Max retries exceeded with url: / (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused',))",
        "2024-05-01T15:42:12Z urllib3.exceptions.MaxRetryError: HTTPConnectionPool(host='localhost.localdomain', port=80): Max retries exceeded with url: / (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused',))",
    ]
    .join("\n");
    let out = ghostip_wide()
        .args(["explain", "--db", "/nonexistent/x.db", "-o", "json", "-"])
        .write_stdin(log)
        .assert()
        .code(0)
        .get_output()
        .clone();
    let x = json(&out.stdout);
    let groups = x["report"]["groups"].as_array().unwrap();
    assert_eq!(x["report"]["total"], 3, "{x}");
    assert!(
        groups.iter().all(|g| g["class"] == "local_target"),
        "{groups:?}"
    );
}

#[test]
fn the_missing_ledger_warning_escapes_the_path() {
    let out = ghostip_wide()
        .args([
            "explain",
            "--db",
            "/nonexistent/\x1b[2J\x1b]0;owned\x07/x.db",
            "-",
        ])
        .write_stdin(refused(1))
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
    assert!(
        err.contains("no ledger at /nonexistent/\\x1b[2J\\x1b]0;owned\\x07/x.db"),
        "{err}"
    );
}

/// `--truth-history` is read up to `--max-input-size`: an endless stream stops one byte past
/// it and a larger file is refused unread, each an error naming the file and the bound (it
/// grew until a memory limit stopped it).
#[test]
fn a_truth_history_past_the_bound_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    std::fs::write(&log, "").unwrap();
    let sparse = dir.path().join("pods.json");
    let f = std::fs::File::create(&sparse).unwrap();
    f.set_len(2 * 1024 * 1024 + 1).unwrap();
    for history in [Path::new("/dev/zero"), sparse.as_path()] {
        let out = ghostip_wide()
            .arg("explain")
            .arg("--truth-history")
            .arg(history)
            .args(["--max-input-size", "2Mi"])
            .arg(&log)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&history.display().to_string()) && err.contains("larger than 2 MiB"),
            "{err}"
        );
    }
}
