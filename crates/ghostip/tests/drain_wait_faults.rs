//! `ghostip drain-wait` under faults, without a cluster: no pod IP, an API server and an agent
//! that do not answer (closed loopback ports). A preStop hook must return 0 in every case,
//! within its bound, and say what it could not check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::TcpListener;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn ghostip() -> Command {
    let mut cmd = Command::cargo_bin("ghostip").unwrap();
    for var in ["POD_IP", "POD_NAME", "POD_NAMESPACE", "KUBECONFIG"] {
        cmd.env_remove(var);
    }
    cmd.timeout(Duration::from_secs(30));
    cmd
}

#[test]
fn no_pod_ip_returns_at_once_with_an_error_line() {
    let out = ghostip()
        .args(["drain-wait", "--no-event"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["event"], "drain-wait");
    assert!(
        line["error"].as_str().unwrap().contains("no pod IP"),
        "{line}"
    );
}

#[test]
fn an_unreachable_api_server_and_agent_are_named_and_the_fallback_stands_in() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: away
  cluster: {{server: \"https://127.0.0.1:{}\", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: not-a-secret}}
contexts:
- name: away
  context: {{cluster: away, user: u}}
current-context: away
",
            closed_port()
        ),
    )
    .unwrap();
    let agent = format!("node-a=127.0.0.1:{}", closed_port());
    let out = ghostip()
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "drain-wait",
            "--ip",
            "10.0.0.5",
            "--pod-name",
            "web-1",
            "--pod-namespace",
            "demo",
            "--agent",
            &agent,
            "--fallback",
            "2s",
            "--max-wait",
            "8s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    // What could not be checked is covered by the fallback, not by the bound.
    assert_eq!(line["release"], "let-go-with-fallback", "{line}");
    let waited = line["waited_s"].as_f64().unwrap();
    assert!((2.0..8.0).contains(&waited), "{line}");
    assert!(line["api_gap_s"].as_f64().unwrap() > 0.0, "{line}");
    assert_eq!(line["dns_queries"], 0, "no names, no queries: {line}");
    let layers = line["layers"].as_array().unwrap();
    let unknown = |layer: &str, path: &str| {
        layers
            .iter()
            .find(|l| l["layer"] == layer && l["path"] == path && l["state"] == "unknown")
            .and_then(|l| l["why"].as_str())
            .unwrap_or_else(|| panic!("no unknown {layer} {path}: {line}"))
            .to_string()
    };
    assert!(unknown("datapath", "node-a").contains("127.0.0.1"));
    assert!(unknown("endpoint", "10.0.0.5").contains("assumed"));
    // The watch backs off while the API server is away: a handful of log lines, where a
    // retry loop without a pause wrote over 100 000 in the same time.
    let stderr_lines = out.stderr.split(|b| *b == b'\n').count();
    assert!(stderr_lines < 200, "{stderr_lines} lines on stderr");
}
