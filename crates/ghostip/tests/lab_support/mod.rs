//! What the end-to-end tests share: the repository, the lab's scripts, the GHOSTIP_LAB gate.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// SIGTERM, then waits at most 15 s (killed after that): the exit code (`None` when it had to
/// be killed or died of a signal) and how long the exit took.
pub fn terminate(mut child: Child) -> (Option<i32>, Duration) {
    let start = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st.code(), start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            return (None, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills a child process when dropped (a test that failed half-way leaves nothing running).
pub struct KillOnDrop(pub Option<Child>);

impl KillOnDrop {
    /// [`terminate`]s the child, if still there.
    pub fn terminate(&mut self) -> (Option<i32>, Duration) {
        match self.0.take() {
            Some(c) => terminate(c),
            None => (None, Duration::ZERO),
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
