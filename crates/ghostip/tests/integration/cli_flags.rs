//! Flag contracts: each command's `-o` takes only the formats it writes (help and errors
//! name them), probing flags are bounded (exit 2 naming the accepted range), listen
//! addresses take both families. None of these commands gets as far as the API server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use predicates::prelude::*;

use crate::common::assert_exit_2;

fn ghostip() -> assert_cmd::Command {
    let mut c = crate::common::ghostip();
    c.timeout(std::time::Duration::from_secs(30));
    c
}

/// The `-o` line of a command's help and the ones after it up to the next flag.
fn output_help(args: &[&str]) -> String {
    let out = ghostip().args(args).arg("--help").assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let mut lines = text.lines().skip_while(|l| !l.contains("--output"));
    let mut help = lines.next().unwrap_or_default().to_string();
    for l in lines {
        if l.trim_start().starts_with('-') {
            break;
        }
        help.push('\n');
        help.push_str(l);
    }
    help
}

#[test]
fn sarif_on_a_command_that_does_not_write_it_is_exit_2_naming_what_it_takes() {
    ghostip()
        .args(["check", "-o", "sarif"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("sarif"))
        .stderr(predicate::str::contains("table"))
        .stderr(predicate::str::contains("json"));
    // Before the command name (the global flag): refused before anything runs.
    ghostip()
        .args([
            "-o",
            "sarif",
            "check",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::diff(
            "ghostip: -o sarif: `ghostip check` takes table, wide or json (only audit writes sarif)\n",
        ));
    assert_exit_2(
        ghostip().args(["-o", "sarif", "whois", "10.0.0.1"]),
        "`ghostip whois` takes table, wide or json",
    );
    assert_exit_2(
        ghostip().args(["-o", "json", "watch"]),
        "`ghostip watch` takes only table",
    );
}

#[test]
fn an_unknown_format_is_exit_2_naming_the_formats() {
    assert_exit_2(
        ghostip().args(["check", "-o", "yaml"]),
        "[possible values: table, wide, json]",
    );
    assert_exit_2(
        ghostip().args(["audit", "-o", "yaml", "-f", "-"]),
        "[possible values: table, wide, json, sarif]",
    );
    assert_exit_2(
        ghostip().args(["-o", "yaml", "check"]),
        "possible values: table, wide, json, sarif",
    );
    // The agent's table is its log: it takes no `wide`.
    assert_exit_2(
        ghostip().args(["agent", "--node-name", "n", "-o", "wide"]),
        "[possible values: table, json]",
    );
}

#[test]
fn each_command_help_lists_only_the_formats_it_writes() {
    for cmd in [
        &["check"][..],
        &["rollout"],
        &["whois"],
        &["agent"],
        &["explain"],
        &["datapath"],
        &["datapath", "show"],
        &["datapath", "diff"],
    ] {
        let help = output_help(cmd);
        assert!(help.contains("json"), "{cmd:?}: {help}");
        assert!(!help.contains("sarif"), "{cmd:?}: {help}");
    }
    let audit = output_help(&["audit"]);
    assert!(audit.contains("sarif"), "{audit}");
    assert_eq!(output_help(&["watch"]), "", "watch writes no report");
}

#[test]
fn accepted_formats_still_work_in_either_position() {
    // `datapath show` reads a file and prints it: the flag reaches the command from before
    // the command name, after it, and after the subcommand.
    for args in [
        vec![
            "-o", "json", "datapath", "show", "--format", "iptables", "-f", "-",
        ],
        vec![
            "datapath", "-o", "json", "show", "--format", "iptables", "-f", "-",
        ],
        vec![
            "datapath", "show", "--format", "iptables", "-f", "-", "-o", "json",
        ],
    ] {
        let out = ghostip()
            .args(&args)
            .write_stdin("*nat\nCOMMIT\n")
            .assert()
            .success();
        let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON: {e}"));
        assert!(v.is_object(), "{args:?}: {v}");
    }
}

#[test]
fn probing_flags_are_bounded() {
    for (args, range) in [
        (&["check", "--qps", "0"][..], "1..=1000"),
        (&["check", "--qps", "5000"], "1..=1000"),
        (&["agent", "--node-name", "n", "--qps", "1001"], "1..=1000"),
        (&["check", "--interval", "0s"], "expected 50ms to 1m"),
        (
            &["rollout", "deploy/web", "--interval", "10m"],
            "expected 50ms to 1m",
        ),
        (&["watch", "--sweep", "0s"], "expected 1s to 24h"),
        (&["watch", "--sweep", "2d"], "expected 1s to 24h"),
        (&["check", "--query-timeout", "0s"], "expected 10ms to 30s"),
        (
            &["agent", "--node-name", "n", "--dns-health-interval", "0s"],
            "expected 100ms to 1h",
        ),
    ] {
        assert_exit_2(ghostip().args(args), range);
    }
}

#[test]
fn listen_addresses_take_both_families_and_refuse_an_unbracketed_ipv6() {
    ghostip()
        .args(["watch", "--listen", "fd00::1:9753"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("needs brackets"))
        .stderr(predicate::str::contains("[fd00::1]:9754"));
    assert_exit_2(
        ghostip().args(["agent", "--node-name", "n", "--listen", "10.0.0.1"]),
        "has no port",
    );
}
