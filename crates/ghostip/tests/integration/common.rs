//! Helpers the integration modules share: the binary under a clean environment, the test data
//! folders, a kubeconfig that points nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};

/// The `ghostip` binary with no kubeconfig, no ledger and no home directory of the caller's.
pub fn ghostip() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("ghostip").unwrap();
    c.env_remove("KUBECONFIG")
        .env_remove("GHOSTIP_DB")
        .env("HOME", "/nonexistent-home");
    c
}

/// [`ghostip`] on a terminal wide enough that no line wraps, for tests that read whole lines.
pub fn ghostip_wide() -> assert_cmd::Command {
    let mut c = ghostip();
    c.env("COLUMNS", "1000");
    c
}

/// A file of `tests/data/audit`.
pub fn audit_case(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/audit")
        .join(name)
}

/// A file of ghostip-datapath's `tests/data` (real dumps).
pub fn datapath_data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ghostip-datapath/tests/data")
        .join(name)
}

/// Standard error of a finished process, as text.
pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Standard output parsed as JSON; a parse failure shows the output.
pub fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| {
        panic!("bad JSON ({e}): {}", String::from_utf8_lossy(out));
    })
}

/// A loopback port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A kubeconfig in `dir` pointing at a loopback port where nothing listens.
pub fn dead_kubeconfig(dir: &Path) -> PathBuf {
    let port = closed_port();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: dead\n  context: {{cluster: c, user: u}}\ncurrent-context: dead\n"
        ),
    )
    .unwrap();
    path
}

/// Asserts that `cmd` exits 2 (a usage or input error) with `needle` in its standard error.
pub fn assert_exit_2(cmd: &mut assert_cmd::Command, needle: &str) {
    cmd.assert()
        .code(2)
        .stderr(predicates::str::contains(needle));
}

/// `ghostip ARGS` started with its three standard streams piped, on a terminal wide enough
/// that no line wraps.
pub fn spawn_piped(args: &[&str]) -> std::process::Child {
    use std::process::{Command, Stdio};
    Command::new(env!("CARGO_BIN_EXE_ghostip"))
        .args(args)
        .env("COLUMNS", "1000")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
