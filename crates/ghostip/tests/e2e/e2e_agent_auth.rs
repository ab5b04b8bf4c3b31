//! End-to-end test of the agent's authentication against the lab's real API server: an
//! agent listening on its node address (not loopback, so `--auth auto` requires tokens)
//! asks the API server to review every caller's token (TokenReview) and access
//! (SubjectAccessReview on the non-resource URL).
//!
//! Callers: no token and a forged one (401), a ServiceAccount without any grant (403), a
//! ServiceAccount bound to a ClusterRole with `nonResourceURLs: ["/v1/ips", "/v1/ips/*"]`
//! (200 on `/v1/ips/{ip}`, 403 on `/status`), the lab's admin token (`system:masters`: 200
//! everywhere). A second agent with `--auth-audience ghostip` takes only tokens issued for
//! that audience. `/healthz` and `/readyz` need no token. Denials are logged without the
//! token.
//!
//! Needs a running lab and root; `#[ignore]`d. Run with
//! `GHOSTIP_LAB=1 cargo test -p ghostip --test e2e -- --ignored --test-threads=1 e2e_agent_auth::`
//! while holding the lab lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::lab_support;
use lab_support::{KillOnDrop, lab, require_lab, run};

const NS: &str = "ghostip-authtest";
const NODE_IP: &str = "10.200.0.11";

/// The RBAC objects of the test: one ServiceAccount granted the per-IP endpoint, one not.
const RBAC: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: ghostip-authtest
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: drain-waiter
  namespace: ghostip-authtest
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: stranger
  namespace: ghostip-authtest
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ghostip-authtest-drain-wait
rules:
  - nonResourceURLs: ["/v1/ips", "/v1/ips/*"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ghostip-authtest-drain-wait
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ghostip-authtest-drain-wait
subjects:
  - kind: ServiceAccount
    name: drain-waiter
    namespace: ghostip-authtest
"#;

fn kubectl(args: &[&str]) -> (i32, String, String) {
    run(lab("kubectl").args(args))
}

/// Deletes the test's objects even when an assertion failed.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "clusterrolebinding,clusterrole",
            "ghostip-authtest-drain-wait",
            "--ignore-not-found",
        ]);
        let _ = kubectl(&[
            "delete",
            "namespace",
            NS,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

fn token(sa: &str, audience: Option<&str>) -> String {
    let mut args = vec!["create", "token", sa, "-n", NS, "--duration", "10m"];
    if let Some(a) = audience {
        args.extend(["--audience", a]);
    }
    let (code, out, err) = kubectl(&args);
    assert_eq!(code, 0, "kubectl create token {sa}: {err}");
    out.trim().to_string()
}

/// An agent on node-1 listening on the node address.
struct Agent {
    child: KillOnDrop,
    log: PathBuf,
    port: u16,
}

impl Agent {
    fn start(dir: &Path, port: u16, extra: &[&str]) -> Agent {
        let log = dir.join(format!("agent-{port}.log"));
        let listen = format!("{NODE_IP}:{port}");
        let child = lab("exec")
            .arg("node-1")
            .args([env!("CARGO_BIN_EXE_ghostip"), "--db"])
            .arg(dir.join(format!("agent-{port}.db")))
            .args([
                "agent",
                "--node-name",
                "node-1",
                "--datapath",
                "iptables",
                "--listen",
                &listen,
            ])
            .args(extra)
            .env("GHOSTIP_JSON_LOGS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawn the agent");
        let a = Agent {
            child: KillOnDrop(Some(child)),
            log,
            port,
        };
        let start = Instant::now();
        while a.get(None, "/healthz").0 != 200 {
            if start.elapsed() > Duration::from_secs(30) {
                panic!("agent on :{port} not serving /healthz:\n{}", a.log_text());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        a
    }

    /// GET from the hub (another host than the node): (status code, body).
    fn get(&self, token: Option<&str>, path: &str) -> (u16, String) {
        let url = format!("http://{NODE_IP}:{}{path}", self.port);
        let mut cmd = lab("exec");
        cmd.args([
            "hub",
            "curl",
            "-sS",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
        ]);
        let header;
        if let Some(t) = token {
            header = format!("Authorization: Bearer {t}");
            cmd.args(["-H", &header]);
        }
        cmd.arg(&url);
        let (code, out, _) = run(&mut cmd);
        if code != 0 {
            return (0, String::new());
        }
        let (body, status) = out.rsplit_once('\n').unwrap_or(("", "0"));
        (status.trim().parse().unwrap_or(0), body.to_string())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn terminate(&mut self) -> Option<i32> {
        self.child.terminate().0
    }
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn the_agent_authenticates_and_authorizes_callers_with_the_api_server() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let rbac = dir.path().join("rbac.yaml");
    std::fs::write(&rbac, RBAC).unwrap();
    let _cleanup = Cleanup;
    let (code, out, err) = kubectl(&["apply", "-f", rbac.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let allowed = token("drain-waiter", None);
    let denied = token("stranger", None);
    let admin = std::fs::read_to_string("/var/lib/ghostip-lab/token")
        .unwrap()
        .trim()
        .to_string();

    let mut agent = Agent::start(dir.path(), 9760, &[]);
    let ip = "/v1/ips/10.244.1.7";
    assert_eq!(agent.get(None, "/healthz").0, 200);
    assert_ne!(agent.get(None, "/readyz").0, 401);
    for path in [ip, "/status", "/metrics"] {
        assert_eq!(agent.get(None, path).0, 401, "no token: {path}");
        assert_eq!(
            agent.get(Some("not-a-real-token"), path).0,
            401,
            "forged token: {path}"
        );
        assert_eq!(agent.get(Some(&denied), path).0, 403, "stranger: {path}");
    }
    let (code, body) = agent.get(Some(&allowed), ip);
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["node"], "node-1", "{v}");
    assert!(v["holding"].is_array(), "{v}");
    // Granted /v1/ips/*, not /status.
    let (code, body) = agent.get(Some(&allowed), "/status");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("system:serviceaccount:ghostip-authtest:drain-waiter"),
        "{body}"
    );
    assert_eq!(agent.get(Some(&allowed), "/v1/ips/not-an-ip").0, 400);
    // system:masters may read everything.
    assert_eq!(agent.get(Some(&admin), "/status").0, 200);
    assert_eq!(agent.get(Some(&admin), "/metrics").0, 200);

    // Tokens bound to an audience: the second agent takes only those issued for `ghostip`.
    let mut aud_agent = Agent::start(dir.path(), 9761, &["--auth-audience", "ghostip"]);
    let for_ghostip = token("drain-waiter", Some("ghostip"));
    assert_eq!(aud_agent.get(Some(&allowed), ip).0, 401);
    assert_eq!(aud_agent.get(Some(&for_ghostip), ip).0, 200);
    assert_eq!(
        agent.get(Some(&for_ghostip), ip).0,
        401,
        "not for the API server"
    );
    assert_eq!(aud_agent.terminate(), Some(0));

    assert_eq!(agent.terminate(), Some(0));
    let log = agent.log_text();
    assert!(log.contains("request forbidden"), "{log}");
    assert!(log.contains("drain-waiter"), "{log}");
    for t in [&allowed, &denied, &admin, &for_ghostip] {
        assert!(!log.contains(t.as_str()), "a token in the log");
    }
    assert!(!log.contains("not-a-real-token"), "a token in the log");
}
