//! What the end-to-end tests share: the repository, the lab's scripts, the GHOSTIP_LAB gate.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Whether the lab tests were asked for (GHOSTIP_LAB=1); prints why they are skipped otherwise.
pub fn lab_ready() -> bool {
    if std::env::var_os("GHOSTIP_LAB").is_none() {
        eprintln!(
            "skipped: set GHOSTIP_LAB=1 with a running lab (lab/up) to run the end-to-end tests"
        );
        return false;
    }
    true
}

/// Runs a command without stdin: (exit code, stdout, stderr).
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("spawn");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A lab script, e.g. `lab("scenarios/coredns-cache")`.
pub fn lab(script: &str) -> Command {
    Command::new(repo().join("lab").join(script))
}
