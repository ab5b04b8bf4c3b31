//! `ghostip audit` contract: exit codes, `-o json` and SARIF 2.1.0 shapes, unreadable files
//! named by file and line while the others are still audited, SARIF refused elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use predicates::prelude::*;

use crate::common::{assert_exit_2, audit_case, dead_kubeconfig, ghostip_wide, json};

#[test]
fn exit_codes_follow_the_worst_finding() {
    // Notes only (the Corefile summary, no readiness probe): clean.
    ghostip_wide()
        .args(["audit", "-f"])
        .arg(audit_case("GIP-DNS-001-neg.yaml"))
        .assert()
        .code(0)
        .stdout(predicate::str::contains("GIP-DNS-003"))
        .stdout(predicate::str::contains("0 errors, 0 warnings"));
    // A warning.
    ghostip_wide()
        .args(["audit", "-f"])
        .arg(audit_case("GIP-DNS-001-pos.yaml"))
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "expect up to 60 s of dials to dead IPs per rollout",
        ))
        .stdout(predicate::str::contains(
            "fix: preStop exec `ghostip drain-wait` with terminationGracePeriodSeconds ≥ 70 s",
        ))
        .stdout(predicate::str::contains(
            "or a fixed preStop sleep ≥ 60 s with terminationGracePeriodSeconds ≥ 70 s",
        ));
}

/// `ghostip audit -o FORMAT -f CASE…` over files of tests/data/audit: its output as JSON,
/// once the exit code is `code`.
fn audit_output(format: &str, cases: &[&str], code: i32) -> serde_json::Value {
    let mut cmd = ghostip_wide();
    cmd.args(["audit", "-o", format]);
    for case in cases {
        cmd.arg("-f").arg(audit_case(case));
    }
    json(&cmd.assert().code(code).get_output().stdout)
}

#[test]
fn json_output_has_findings_budgets_and_layers() {
    let v = audit_output("json", &["GIP-DNS-001-pos.yaml"], 1);
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "GIP-DNS-001")
        .unwrap();
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["object"]["kind"], "Deployment");
    assert_eq!(f["object"]["origin"]["line"], 36);
    assert_eq!(f["service"]["name"], "web");
    assert_eq!(f["figures"]["exposure_s"], 60);
    assert_eq!(f["figures"]["dns_lag_s"], 30);
    assert_eq!(f["figures"]["client_cache_s"], 30);
    assert_eq!(v["services"][0]["budget_s"], 60);
    assert_eq!(v["dns"][0]["role"], "cluster-dns");
    assert_eq!(v["dns"][0]["cache_lag_s"], 30);
    assert_eq!(v["summary"]["warning"], 1);
    assert_eq!(v["inputs"]["files"], 1);
}

#[test]
fn sarif_output_is_sarif_2_1_0() {
    let v = audit_output(
        "sarif",
        &["GIP-TERM-001-pos.yaml", "GIP-CLIENT-002-pos.yaml"],
        1,
    );
    assert_eq!(v["version"], "2.1.0");
    assert_eq!(
        v["$schema"],
        "https://json.schemastore.org/sarif-2.1.0.json"
    );
    let run = &v["runs"][0];
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), ghostip_analysis::audit::RULES.len());
    assert!(rules.iter().all(|r| r["id"].is_string()
        && r["shortDescription"]["text"].is_string()
        && r["defaultConfiguration"]["level"].is_string()));
    let results = run["results"].as_array().unwrap();
    let term = results
        .iter()
        .find(|r| r["ruleId"] == "GIP-TERM-001")
        .unwrap();
    assert_eq!(term["level"], "warning");
    let idx = term["ruleIndex"].as_u64().unwrap() as usize;
    assert_eq!(rules[idx]["id"], "GIP-TERM-001");
    assert!(term["message"]["text"].as_str().unwrap().contains("Fix: "));
    let phys = &term["locations"][0]["physicalLocation"];
    assert!(
        phys["artifactLocation"]["uri"]
            .as_str()
            .unwrap()
            .ends_with("GIP-TERM-001-pos.yaml")
    );
    assert_eq!(phys["region"]["startLine"], 2);
    assert_eq!(
        term["locations"][0]["logicalLocations"][0]["fullyQualifiedName"],
        "demo/Deployment/worker"
    );
    assert!(results.iter().any(|r| r["ruleId"] == "GIP-CLIENT-002"));
    assert_eq!(run["invocations"][0]["executionSuccessful"], true);
}

#[test]
fn a_bad_yaml_file_is_named_with_its_line_and_the_rest_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        audit_case("GIP-TERM-001-pos.yaml"),
        dir.path().join("good.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels: [a\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    let assert = ghostip_wide()
        .args(["audit", "-f"])
        .arg(dir.path())
        .assert()
        .code(2)
        .stdout(predicate::str::contains("GIP-TERM-001"))
        .stderr(predicate::str::starts_with(
            "ghostip: 1 input could not be read, the rest was audited:",
        ))
        .stderr(
            predicate::str::is_match(r"bad\.yaml:[56]: does not parse as YAML or JSON").unwrap(),
        );
    let out = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    assert!(out.contains("from 2 files; 1 input not read"), "{out}");
    // JSON lists the problem too, and SARIF reports it as a failed execution.
    let out = ghostip_wide()
        .args(["audit", "-o", "sarif", "-f"])
        .arg(dir.path())
        .assert()
        .code(2)
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let inv = &v["runs"][0]["invocations"][0];
    assert_eq!(inv["executionSuccessful"], false);
    let note = &inv["toolExecutionNotifications"][0];
    assert_eq!(note["level"], "error");
    assert!(
        note["locations"][0]["physicalLocation"]["region"]["startLine"]
            .as_u64()
            .is_some()
    );
}

#[test]
fn a_missing_file_is_an_error() {
    assert_exit_2(
        ghostip_wide().args(["audit", "-f", "/nonexistent/manifests.yaml"]),
        "/nonexistent/manifests.yaml: cannot read",
    );
}

#[test]
fn audit_needs_files_or_cluster() {
    assert_exit_2(ghostip_wide().arg("audit"), "--filename");
}

#[test]
fn other_commands_refuse_sarif() {
    assert_exit_2(
        ghostip_wide().args(["whois", "10.0.0.1", "-o", "sarif"]),
        "[possible values: table, wide, json]",
    );
    assert_exit_2(
        ghostip_wide().args(["-o", "sarif", "whois", "10.0.0.1"]),
        "only audit writes sarif",
    );
}

#[test]
fn namespace_flag_scopes_manifests() {
    // demo/web is out of scope in another namespace: only the Corefile summary remains.
    ghostip_wide()
        .args(["audit", "-n", "other", "-f"])
        .arg(audit_case("GIP-DNS-001-pos.yaml"))
        .assert()
        .code(0)
        .stdout(predicate::str::contains("dials to dead IPs").not());
}

#[test]
fn standard_input_is_read_with_dash() {
    let text = std::fs::read_to_string(audit_case("GIP-TERM-001-pos.yaml")).unwrap();
    ghostip_wide()
        .args(["audit", "-f", "-"])
        .write_stdin(text)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "Deployment demo/worker  (<stdin>:2)",
        ));
}

#[test]
fn cluster_mode_names_an_unreachable_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dead_kubeconfig(dir.path());
    ghostip_wide()
        .args([
            "audit",
            "--cluster",
            "--request-timeout",
            "5s",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "ghostip: listing objects to audit: Kubernetes API server unreachable",
        ))
        .stderr(predicate::str::contains("hint:"));
}

#[test]
fn a_directory_without_files_to_audit_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let shown = dir.path().display().to_string();
    ghostip_wide()
        .args(["audit", "-f"])
        .arg(dir.path())
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(format!(
            "ghostip: no files to audit: {shown}: no .yaml, .yml, .json or Corefile file in this directory"
        )));
    // Other files, and a manifest in a subdirectory that only -R reads.
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    std::fs::create_dir(dir.path().join("apps")).unwrap();
    std::fs::copy(
        audit_case("GIP-TERM-001-pos.yaml"),
        dir.path().join("apps/worker.yaml"),
    )
    .unwrap();
    assert_exit_2(
        ghostip_wide().args(["audit", "-f"]).arg(dir.path()),
        "(subdirectories are read with -R)",
    );
    ghostip_wide()
        .args(["audit", "-R", "-f"])
        .arg(dir.path())
        .assert()
        .code(1)
        .stdout(predicate::str::contains("GIP-TERM-001"));
    // Beside a file that is audited, the empty directory is still an unread input.
    let empty = tempfile::tempdir().unwrap();
    ghostip_wide()
        .args(["audit", "-f"])
        .arg(audit_case("GIP-TERM-001-pos.yaml"))
        .arg("-f")
        .arg(empty.path())
        .assert()
        .code(2)
        .stdout(predicate::str::contains("GIP-TERM-001"))
        .stderr(predicate::str::contains(format!(
            "{}: no .yaml, .yml, .json or Corefile file in this directory",
            empty.path().display()
        )));
}

use crate::width_support;

/// The audit listing fits 80 and 30 columns; `-o wide` keeps each finding's message on its line.
#[test]
fn the_listing_fits_the_terminal_and_wide_keeps_whole_lines() {
    use width_support::{assert_fits, assert_wider};
    let run = |columns: &str, output: &str| {
        ghostip_wide()
            .env("COLUMNS", columns)
            .args(["audit", "-o", output, "-f"])
            .arg(audit_case("GIP-DNS-001-pos.yaml"))
            .assert()
            .code(1)
            .get_output()
            .stdout
            .clone()
    };
    assert_fits(&run("80", "table"), 80);
    assert_fits(&run("30", "table"), 30);
    let wide = assert_wider(&run("80", "wide"), 80);
    let table = String::from_utf8(run("1000", "table")).unwrap();
    assert_eq!(wide, table, "wide is the listing as it is written");
}

#[test]
fn control_characters_from_manifests_and_file_names_are_escaped() {
    // A manifest is data from outside: a name holding `ESC [2J` would clear the reader's
    // screen if printed as it is.
    let text = std::fs::read_to_string(audit_case("GIP-TERM-001-pos.yaml"))
        .unwrap()
        .replacen("name: worker", "name: \"work\\e[2Jer\"", 1);
    assert!(
        text.contains("\\e[2J"),
        "the case names its Deployment worker"
    );
    let out = ghostip_wide()
        .args(["audit", "-f", "-"])
        .write_stdin(text)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(out.contains("demo/work\\x1b[2Jer"), "{out}");

    // An error quoting a file name: the same on stderr.
    let err = ghostip_wide()
        .args(["audit", "-f", "/nonexistent/gone\x1b]0;pwned\x07.yaml"])
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(err).unwrap();
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
    assert!(err.contains("gone\\x1b]0;pwned\\x07.yaml"), "{err}");
}

/// Writes each document of the audit case `case` to its own file in `dir` (as a chart's
/// templates would be), `edit` applied to the whole text first.
fn split_case(dir: &std::path::Path, case: &str, edit: impl Fn(String) -> String) {
    let text = edit(std::fs::read_to_string(audit_case(case)).unwrap());
    for (i, doc) in text.split("\n---\n").enumerate() {
        std::fs::write(dir.join(format!("{i}.yaml")), doc).unwrap();
    }
}

fn audit_dir(dir: &std::path::Path, format: &str, code: i32) -> Vec<u8> {
    ghostip_wide()
        .args(["audit", "-o", format, "-f"])
        .arg(dir)
        .assert()
        .code(code)
        .get_output()
        .stdout
        .clone()
}

#[test]
fn a_manifest_directory_with_a_grpc_server_without_max_connection_age() {
    let dir = tempfile::tempdir().unwrap();
    split_case(dir.path(), "GIP-GRPC-001-pos.yaml", |t| t);

    let v = json(&audit_dir(dir.path(), "json", 1));
    let findings = v["findings"].as_array().unwrap();
    let f = findings
        .iter()
        .find(|f| f["rule"] == "GIP-GRPC-001")
        .unwrap();
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["object"]["kind"], "Deployment");
    assert_eq!(f["object"]["name"], "api");
    assert!(
        f["object"]["origin"]["file"]
            .as_str()
            .unwrap()
            .ends_with("1.yaml")
    );
    assert_eq!(f["service"]["name"], "api");
    assert_eq!(f["figures"]["grpc_clients"], 1);
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "headless gRPC Service demo/api (Service port grpc 9090): clients Deployment demo/web \
         balance over it with dns:/// and the server Deployment demo/api sets no MaxConnectionAge"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("measured in the lab: first incident 15 s of failed calls per rollout with grpc-go, 30 s with grpc-java"),
        "{msg}"
    );
    // The specific finding replaces the generic one about the port.
    assert!(!findings.iter().any(|f| f["rule"] == "GIP-CLIENT-002"));

    let table = String::from_utf8(audit_dir(dir.path(), "table", 1)).unwrap();
    assert!(table.contains("GIP-GRPC-001"), "{table}");
    assert!(
        table.contains("fix: give the server a preStop delay"),
        "{table}"
    );

    let sarif = json(&audit_dir(dir.path(), "sarif", 1));
    let run = &sarif["runs"][0];
    let r = run["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ruleId"] == "GIP-GRPC-001")
        .unwrap();
    assert_eq!(r["level"], "warning");
    let idx = r["ruleIndex"].as_u64().unwrap() as usize;
    assert_eq!(run["tool"]["driver"]["rules"][idx]["id"], "GIP-GRPC-001");
}

#[test]
fn a_manifest_directory_with_max_connection_age_gets_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    split_case(dir.path(), "GIP-GRPC-002-pos.yaml", |t| t);
    let v = json(&audit_dir(dir.path(), "json", 0));
    let lag = v["dns"][0]["cache_lag_s"].as_i64().unwrap();
    assert!(lag > 0);
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "GIP-GRPC-002")
        .unwrap();
    assert_eq!(f["severity"], "note");
    assert_eq!(f["figures"]["max_connection_age_jittered_s"], 33);
    assert_eq!(f["figures"]["max_connection_age_grace_s"], 10);
    assert_eq!(f["figures"]["dns_lag_s"], lag);
    assert_eq!(f["figures"]["resolver_min_interval_s"], 30);
    assert_eq!(f["figures"]["budget_s"], 33 + 10 + lag + 30);

    // Declared through the server's flag instead, and a duration that is not one: exit 2,
    // the file and line named, the rest still audited (the server counts as without).
    let bad = tempfile::tempdir().unwrap();
    split_case(bad.path(), "GIP-GRPC-002-pos.yaml", |t| {
        t.replace(
            "grpc-max-connection-age: 30s",
            "grpc-max-connection-age: half-a-minute",
        )
    });
    let out = ghostip_wide()
        .args(["audit", "-f"])
        .arg(bad.path())
        .assert()
        .code(2)
        .get_output()
        .clone();
    let all =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        all.contains("\"half-a-minute\" is not a Go duration"),
        "{all}"
    );
    assert!(all.contains("1.yaml:"), "{all}");
    assert!(all.contains("GIP-GRPC-001"), "{all}");
}
