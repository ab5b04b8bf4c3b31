//! The agent's pacing flags: zero or inverted bounds (an audit period of 0 s, a minimum above
//! the maximum, a zero re-read interval or read timeout) exit 2 with a message naming the
//! flag, before the agent reaches the API server or reads anything.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use predicates::prelude::*;

fn agent(flags: &[&str]) -> assert_cmd::assert::Assert {
    assert_cmd::Command::cargo_bin("ghostip")
        .unwrap()
        .env_remove("KUBECONFIG")
        .env_remove("GHOSTIP_DB")
        .env("HOME", "/nonexistent-home")
        .timeout(std::time::Duration::from_secs(30))
        .args(["agent", "--node-name", "node-1"])
        .args(flags)
        .assert()
}

#[test]
fn zero_and_inverted_pacing_bounds_exit_2_naming_the_flag() {
    for (flags, names) in [
        (&["--max-audit-period", "0s"][..], "--max-audit-period"),
        (&["--min-audit-period", "0s"][..], "--min-audit-period"),
        (&["--min-audit-period", "500ms"][..], "--min-audit-period"),
        (
            &["--min-audit-period", "2m", "--max-audit-period", "1m"][..],
            "--max-audit-period 60s: it is below --min-audit-period 120s",
        ),
        (&["--reread-interval", "0s"][..], "--reread-interval"),
        (&["--read-timeout", "0s"][..], "--read-timeout"),
        (&["--max-cpu", "0"][..], "--max-cpu"),
    ] {
        let out = agent(flags)
            .code(2)
            .stderr(predicate::str::starts_with("ghostip: invalid "))
            .get_output()
            .clone();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(names), "{flags:?}: {stderr}");
    }
}

#[test]
fn bounds_at_their_limits_pass_validation() {
    // Accepted flags get as far as the API server, which is not configured here: the error is
    // about the cluster, not the flags.
    let out = agent(&[
        "--min-audit-period",
        "1s",
        "--max-audit-period",
        "1s",
        "--reread-interval",
        "100ms",
        "--read-timeout",
        "1s",
    ])
    .code(2)
    .get_output()
    .clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("invalid --"), "{stderr}");
}
