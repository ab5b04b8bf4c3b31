//! `ghostip drain-wait` under faults, without a cluster: no pod IP, an API server and an agent
//! that do not answer (closed loopback ports). A preStop hook must return 0 in every case,
//! within its bound, and say what it could not check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

use crate::common::closed_port;

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

/// The one JSON line of a drain run.
fn line_of(out: &std::process::Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {out:?}");
    serde_json::from_str(lines[0]).unwrap()
}

#[test]
fn an_ip_that_cannot_be_read_is_an_error_line_and_exit_0() {
    for (env, arg) in [(Some("garbage"), None), (None, Some("10.0.0.300"))] {
        let mut cmd = ghostip();
        cmd.args(["drain-wait", "--no-event"]);
        if let Some(v) = env {
            cmd.env("POD_IP", v);
        }
        if let Some(a) = arg {
            cmd.args(["--ip", a]);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let line = line_of(&out);
        let error = line["error"].as_str().unwrap();
        assert!(error.contains("is not an IP address"), "{line}");
        assert!(error.contains(env.or(arg).unwrap()), "{line}");
    }
}

#[test]
fn a_command_line_that_cannot_be_parsed_is_an_error_line_and_exit_0() {
    let out = ghostip()
        .args(["drain-wait", "--ip", "10.0.0.5", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let line = line_of(&out);
    assert!(
        line["error"].as_str().unwrap().contains("--no-such-flag"),
        "{line}"
    );
    // Help still exits 0 with help, and other commands still fail on bad flags.
    let help = ghostip().args(["drain-wait", "--help"]).output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--max-wait"));
    let other = ghostip()
        .args(["whois", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(2), "{other:?}");
}

/// A drain of 10.0.0.5 that asks no API server, agent or Event.
const LOCAL_DRAIN: [&str; 5] = [
    "drain-wait",
    "--no-event",
    "--no-agents",
    "--ip",
    "10.0.0.5",
];

/// Out-of-range bounds and values are named in `warnings` and replaced: a `--max-wait` too long
/// for a duration used to panic, one too long for a time made the hook return at once, a
/// `--qps 0` was taken silently.
#[test]
fn out_of_range_values_are_warned_and_clamped_and_the_drain_still_runs() {
    for max_wait in ["18446744073709551615s", "99999999d"] {
        let out = ghostip()
            .args(LOCAL_DRAIN)
            .args(["--fallback", "1s", "--qps", "0", "--interval", "0s"])
            .args(["--max-wait", max_wait])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        // Logs into a pipe carry no colour codes.
        assert!(
            !out.stderr.is_empty() && !out.stderr.contains(&0x1b),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = line_of(&out);
        // The grace period is unknown without an API server: 20 s, the documented default.
        assert_eq!(line["max_wait_s"], 20.0, "{line}");
        // It waited for the fallback, not 0.2 s.
        assert_eq!(line["release"], "let-go-with-fallback", "{line}");
        assert!(line["waited_s"].as_f64().unwrap() >= 1.0, "{line}");
        let warnings: Vec<&str> = line["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        for flag in ["--max-wait", "--qps", "--interval"] {
            assert!(
                warnings.iter().any(|w| w.starts_with(flag)),
                "{flag} not warned: {line}"
            );
        }
    }
}

/// SIGTERM while waiting ends the wait with what was seen: the JSON line, release `signal`,
/// exit 0 (it used to die by the signal, exit 143, with no line).
#[test]
fn sigterm_while_waiting_prints_the_line_and_exits_0() {
    let bin = assert_cmd::cargo::cargo_bin("ghostip");
    let mut child = std::process::Command::new(bin)
        .env_remove("POD_IP")
        .env_remove("KUBECONFIG")
        .args(LOCAL_DRAIN)
        .args(["--fallback", "25s", "--max-wait", "28s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let started = std::time::Instant::now();
    let out = loop {
        if child.try_wait().unwrap().is_some() {
            break child.wait_with_output().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let line = line_of(&out);
    assert_eq!(line["release"], "signal", "{line}");
    assert!(line["waited_s"].as_f64().unwrap() < 20.0, "{line}");
}
