//! End-to-end: `ghostip audit --cluster` in the lab reads the real objects the coredns-cache
//! scenario deploys (headless demo/web, the classic kubeadm Corefile in kube-system/coredns)
//! and predicts the stale window that scenario measures.
//!
//! Needs a running lab (`lab/up`) and root; `#[ignore]`d so `cargo test` never touches a
//! cluster. `scripts/test` runs it with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_audit::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::lab_support;
use lab_support::{lab, require_lab, run};

use serde_json::Value;

/// Deploys demo/web (3 replicas, headless) with the classic Corefile and `prestop` seconds.
fn setup(prestop: u32) {
    let (code, out, err) = run(lab("scenarios/coredns-cache").args([
        "--corefile",
        "classic",
        "--prestop",
        &prestop.to_string(),
        "--setup-only",
    ]));
    assert_eq!(code, 0, "scenario setup failed:\n{out}\n{err}");
}

/// `ghostip audit --cluster -n demo -o json` from node-1.
fn audit() -> (i32, Value, String) {
    let (code, out, err) = run(lab("exec").args([
        "node-1",
        env!("CARGO_BIN_EXE_ghostip"),
        "audit",
        "--cluster",
        "-n",
        "demo",
        "--request-timeout",
        "20s",
        "-o",
        "json",
    ]));
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}\n{err}"));
    (code, v, err)
}

fn dns_findings(v: &Value) -> Vec<&Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "GIP-DNS-001")
        .collect()
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn cluster_audit_predicts_the_coredns_cache_window() {
    require_lab();
    // The scenario as in the demo: no preStop, classic Corefile (kubernetes ttl 30, cache 30).
    setup(0);
    let (code, v, err) = audit();
    eprintln!("{}", serde_json::to_string_pretty(&v["findings"]).unwrap());
    assert_eq!(code, 1, "{err}");
    let layer = &v["dns"][0];
    assert_eq!(layer["role"], "cluster-dns");
    assert_eq!(layer["object"]["name"], "coredns");
    assert_eq!(layer["object"]["origin"]["file"], "cluster");
    assert_eq!(layer["cache_lag_s"], 30);
    let f = dns_findings(&v);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0]["object"]["kind"], "Deployment");
    assert_eq!(f[0]["object"]["namespace"], "demo");
    assert_eq!(f[0]["object"]["name"], "web");
    assert_eq!(f[0]["figures"]["dns_lag_s"], 30);
    assert_eq!(f[0]["figures"]["prestop_cover_s"], 0);
    assert_eq!(f[0]["figures"]["exposure_s"], 30);
    // Pods and ReplicaSets of the Deployment are audited through it, not once per replica.
    assert!(
        v["inputs"]["owned"].as_u64().unwrap() >= 4,
        "{}",
        v["inputs"]
    );

    // With a 30 s preStop sleep the window is covered: no DNS finding.
    setup(30);
    let (_, v, err) = audit();
    assert!(dns_findings(&v).is_empty(), "{:#?}\n{err}", v["findings"]);
    assert_eq!(v["services"][0]["budget_s"], 30);
}
