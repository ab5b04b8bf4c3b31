//! End-to-end test of the soak on the real-node lab, in its 3-minute form
//! (`lab/scenarios/soak --minutes 3 --roll-every 60`): Deployments rolled while faults from the
//! seeded schedule hit the lab, with the watch and the agents installed from
//! `deploy/helm/ghostip` running throughout, then `ghostip soak-score` over what the soak
//! recorded (docs/SOAK.md).
//!
//! - The schedule puts a scored fault first (a node whose kube-proxy is stopped while a
//!   removal happens): every scored fault is detected, flagged within 10 s of the change, and
//!   no finding is left that no fault explains.
//! - The ground truth is the soak's own record: faults with their window and the IPs the
//!   stopped node kept, rollouts with their removed IPs.
//! - Every kube-proxy fault's node is called `component-stalled` by its agent (the log line
//!   the soak collects), and no healthy node is.
//! - The lab is whole afterwards: every node's kube-proxy runs and the Corefile the soak
//!   found is back.
//!
//! Needs the real-node lab (`lab/up --node-kind real`, ghostip installed) and root;
//! `#[ignore]`d. scripts/test runs it with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_soak::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use serde_json::Value;

use crate::e2e_nodes::require_real_nodes;
use crate::lab_support::{self, run};

#[test]
#[ignore = "needs the real-node lab (lab/up --node-kind real, ghostip installed, GHOSTIP_LAB=1, root)"]
fn a_short_soak_detects_every_scored_fault_with_no_false_positive() {
    require_real_nodes();
    let corefile_before = corefile();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let (code, r) = lab_support::scenario(
        "soak",
        &[
            "--minutes",
            "3",
            "--roll-every",
            "60",
            "--seed",
            "1",
            "--ghostip",
            env!("CARGO_BIN_EXE_ghostip"),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let score: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("score.json")).unwrap()).unwrap();
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("ground-truth.json")).unwrap())
            .unwrap();
    eprintln!("ground truth: {truth:#}");
    eprintln!(
        "score: {}",
        serde_json::to_string_pretty(&score["faults"]).unwrap()
    );
    assert!(!truth["ended"].is_null(), "{truth}");
    let faults = truth["faults"].as_array().unwrap();
    let first = &faults[0];
    assert!(
        ["datapath-frozen", "kube-proxy-stopped"].contains(&first["kind"].as_str().unwrap()),
        "the schedule starts with a scored fault: {first}"
    );
    assert!(
        !first["stale_ips"].as_array().unwrap().is_empty(),
        "{first}"
    );
    assert!(!first["end"].is_null(), "every fault ends: {first}");
    assert!(!truth["rollouts"].as_array().unwrap().is_empty(), "{truth}");
    assert!(score["scored"].as_u64().unwrap() >= 1, "{score}");
    assert_eq!(score["detected"], score["scored"], "{}", score["headline"]);
    assert_eq!(
        score["false_positives"].as_array().unwrap().len(),
        0,
        "{:#}",
        score["false_positives"]
    );
    for f in score["faults"].as_array().unwrap() {
        if f["status"] == "detected" {
            let after = f["detection"]["after_secs"].as_f64().unwrap();
            assert!(
                after <= 10.0,
                "a stale node flagged {after} s after the change: {f}"
            );
        }
    }
    // The agents' own word on kube-proxy: every kube-proxy fault's node was called
    // component-stalled (its agent's log line; how it compares with the detection is
    // reported, not asserted: the two are a second or two apart), and no healthy node was.
    let stalled = &score["component_stalled"];
    eprintln!("component-stalled: {stalled:#}");
    for f in stalled["faults"].as_array().unwrap() {
        assert!(!f["first_seen"].is_null(), "{f}");
    }
    assert!(
        stalled["unexplained"].as_array().unwrap().is_empty(),
        "{stalled}"
    );
    assert_eq!(code, 0, "{r}");
    // The lab is whole: kube-proxy on every node, the Corefile as the soak found it.
    for n in truth["nodes"].as_array().unwrap() {
        let name = format!("kube-proxy-{}", n.as_str().unwrap());
        let (c, o, e) = run(lab_support::lab("component").args(["status", &name]));
        assert_eq!(c, 0, "{name}: {o}{e}");
    }
    assert_eq!(corefile(), corefile_before);
}

fn corefile() -> String {
    let (code, out, err) = run(lab_support::lab("kubectl").args([
        "-n",
        "kube-system",
        "get",
        "configmap",
        "coredns",
        "-o",
        "jsonpath={.data.Corefile}",
    ]));
    assert_eq!(code, 0, "{err}");
    out
}
