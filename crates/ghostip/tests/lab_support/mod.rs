//! What the end-to-end tests share: the repository, the lab's scripts, the GHOSTIP_LAB gate.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod agent;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Fails the test unless the lab was asked for (GHOSTIP_LAB=1): every caller is an ignored
/// test, so reaching here without it means `--ignored` was run without a lab.
pub fn require_lab() {
    if std::env::var_os("GHOSTIP_LAB").is_none() {
        ghostip_testkit::env::missing(
            "GHOSTIP_LAB is not set: the end-to-end tests need a running lab (lab/up) and \
             GHOSTIP_LAB=1 (scripts/test runs them)",
        );
    }
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
/// Runs `lab/scenarios/NAME ARGS…`, prints its output, and returns its exit code and the JSON
/// of its last `RESULT` line.
pub fn scenario(name: &str, args: &[&str]) -> (i32, serde_json::Value) {
    let (code, out, err) = run(lab(&format!("scenarios/{name}")).args(args));
    eprintln!("{out}");
    let result = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("{name}: no RESULT line (exit {code}):\n{err}"));
    (code, serde_json::from_str(result).unwrap())
}

pub fn lab(script: &str) -> Command {
    Command::new(repo().join("lab").join(script))
}

/// SIGTERM to a process the test started (by its PID), then wait for it, at most 15 s.
pub fn stop(child: &mut Child) {
    let _ = run(Command::new("kill").args(["-TERM", &child.id().to_string()]));
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The metrics page served on node-1's 127.0.0.1:`port` (a `ghostip watch --listen`), if any.
pub fn node1_metrics(port: u16) -> Option<String> {
    let (code, out, _) = run(lab("exec").args([
        "node-1",
        "curl",
        "-s",
        "--max-time",
        "2",
        &format!("http://127.0.0.1:{port}/metrics"),
    ]));
    (code == 0 && !out.is_empty()).then_some(out)
}

/// Whether the `ghostip watch` serving metrics on node-1's 127.0.0.1:`port` has synced its truth.
pub fn watch_synced(port: u16) -> bool {
    node1_metrics(port).is_some_and(|m| {
        m.lines()
            .any(|l| l.starts_with("ghostip_truth_synced ") && l.ends_with(" 1"))
    })
}

/// Starts `ghostip watch -n NAMESPACE --listen 127.0.0.1:PORT` with its ledger at `db` in node-1
/// (stderr to `log`) and waits, at most 30 s, until it has synced.
pub fn start_watch(ghostip: &str, db: &Path, namespace: &str, port: u16, log: &Path) -> Child {
    let watch = lab("exec")
        .args(["node-1", ghostip, "--db"])
        .arg(db)
        .args(["watch", "-n", namespace, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !watch_synced(port) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "ghostip watch did not sync within 30 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    watch
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

/// `kubectl ARGS…` in the lab; its stdout. Fails the test when kubectl fails.
pub fn kubectl(args: &[&str]) -> String {
    let (code, out, err) = run(lab("kubectl").args(args));
    assert_eq!(code, 0, "kubectl {args:?} failed:\n{out}\n{err}");
    out
}

/// `kubectl ARGS…` with `stdin` as its input (e.g. `apply -f -`). Fails the test when kubectl
/// fails.
pub fn kubectl_stdin(args: &[&str], stdin: &str) {
    use std::io::Write as _;
    let mut child = lab("kubectl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Replaces demo's pod `name` with `manifest` (written to `dir/client.json`) and waits up to
/// 60 s for it to be Ready.
pub fn replace_client_pod(dir: &Path, name: &str, manifest: &str) {
    let _ = run(lab("kubectl").args(["-n", "demo", "delete", "pod", name, "--wait=true"]));
    let path = dir.join("client.json");
    std::fs::write(&path, manifest).unwrap();
    kubectl(&["apply", "-f", path.to_str().unwrap()]);
    kubectl(&[
        "-n",
        "demo",
        "wait",
        "--for=condition=Ready",
        &format!("pod/{name}"),
        "--timeout=60s",
    ]);
}

/// Runs `ghostip rollout deploy/web -n demo --restart -o json` (and `--html` when given) on
/// node-1: its exit code (0 or 1, else the test fails), report and standard error.
pub fn rollout_web(db: &Path, html: Option<&Path>) -> (i32, serde_json::Value, String) {
    let mut cmd = lab("exec");
    cmd.args(["node-1", env!("CARGO_BIN_EXE_ghostip"), "--db"])
        .arg(db);
    cmd.args([
        "rollout",
        "deploy/web",
        "-n",
        "demo",
        "--restart",
        "--timeout",
        "150s",
        "-o",
        "json",
    ]);
    if let Some(h) = html {
        cmd.arg("--html").arg(h);
    }
    let (code, out, err) = run(&mut cmd);
    assert!(
        code == 0 || code == 1,
        "rollout failed with {code}:\n{out}\n{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}\n{err}"));
    (code, v, err)
}

/// Where `lab/build` put cacheclient (found in the hub's PATH).
pub fn cacheclient() -> PathBuf {
    let (code, out, err) = run(lab("exec").args(["hub", "sh", "-c", "command -v cacheclient"]));
    assert_eq!(
        code, 0,
        "cacheclient not built (run lab/build cacheclient): {err}"
    );
    PathBuf::from(out.trim())
}

/// `kubectl get` of demo/web's pods printed with the jsonpath `template`.
pub fn web_pods_jsonpath(template: &str) -> String {
    kubectl(&[
        "-n",
        "demo",
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        &format!("jsonpath={template}"),
    ])
}

/// Waits (up to `timeout`, e.g. "120s") for demo/web's rollout to complete.
pub fn web_rollout_status(timeout: &str) {
    kubectl(&[
        "-n",
        "demo",
        "rollout",
        "status",
        "deploy/web",
        &format!("--timeout={timeout}"),
    ]);
}

/// demo/web's pods: pod IP → pod name.
pub fn web_pods() -> std::collections::BTreeMap<String, String> {
    let out =
        web_pods_jsonpath("{range .items[*]}{.status.podIP}{\" \"}{.metadata.name}{\"\\n\"}{end}");
    out.lines()
        .filter_map(|l| {
            let (ip, name) = l.split_once(' ')?;
            (!ip.is_empty()).then(|| (ip.to_string(), name.to_string()))
        })
        .collect()
}

/// The CoreDNS pods' IPs (`k8s-app=kube-dns` in kube-system), in the API server's order.
pub fn coredns_pod_ips() -> Vec<String> {
    kubectl(&[
        "-n",
        "kube-system",
        "get",
        "pods",
        "-l",
        "k8s-app=kube-dns",
        "-o",
        "jsonpath={.items[*].status.podIP}",
    ])
    .split_whitespace()
    .map(str::to_string)
    .collect()
}
