//! End-to-end tests on a Cilium lab (`lab/up --node-kind real --cni cilium`): cilium-agent
//! v1.20.2 on every real node, kube-proxy replacement, no kube-proxy; ghostip installed from
//! `deploy/helm/ghostip` with its own image.
//!
//! - The agent reads Cilium's pinned load-balancer maps itself: `ghostip datapath show
//!   --from-bpf` on a node lists exactly what `cilium-dbg bpf lb list -o json` lists there,
//!   read back to back and compared as ghostip's own parser reads Cilium's output.
//! - The second incident (`lab/scenarios/cilium-stale-backend`): node-2's Cilium frozen while
//!   a CoreDNS pod is replaced; its map keeps the dead backend, DNS through the ClusterIP
//!   fails now and then from node-2 only, a pod with a 1 s DNS liveness probe goes into
//!   CrashLoopBackOff. node-2's agent names the stale backend and its former pod within 10 s
//!   of the change while node-1's stays clean, `check -A` names node-2, and the finding
//!   clears within 10 s of node-2's Cilium being restarted.
//! - drain-wait as the kubelet runs it (`deploy/drain-wait`) lets go only when every node's
//!   agent, reading its Cilium maps, and the DNS paths dropped the pod: no client connect to a
//!   removed IP, where a rollout without a hook has some.
//!
//! Needs the Cilium lab (2 nodes or more) and root; `#[ignore]`d. scripts/test runs it with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_cilium::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use crate::e2e_nodes::{bare_and_drained, now_s, wait_until};
use crate::lab_support::{kubectl, lab, repo, require_lab, run};

use serde_json::Value;

/// Fails unless the lab runs Cilium nodes.
fn require_cilium_lab() {
    require_lab();
    let cni = std::fs::read_to_string("/var/lib/ghostip-lab/cni").unwrap_or_default();
    assert_eq!(
        cni.trim(),
        "cilium",
        "these tests need the Cilium lab: lab/up --node-kind real --cni cilium"
    );
}

fn now_ms() -> f64 {
    now_s() * 1000.0
}

/// A command in a node's network and mount namespaces (those of its containerd: its bpffs at
/// /sys/fs/bpf, its Cilium's socket), through the lab's `node_exec`.
fn on_node(node: &str, cmd: &str) -> (i32, String, String) {
    run(Command::new("bash").arg("-c").arg(format!(
        ". {}/lab/lib.sh && node_exec {node} {cmd}",
        repo().display()
    )))
}

/// `ghostip check -A` from node-1 with the lab's kubeconfig, as JSON: (exit code, report).
fn check() -> (i32, Value) {
    let mut cmd = lab("exec");
    cmd.args(["node-1", env!("CARGO_BIN_EXE_ghostip")]);
    cmd.args(["--kubeconfig", "/var/lib/ghostip-lab/admin.kubeconfig"]);
    let (code, out, _) = run(cmd.args(["-o", "json", "check", "-A", "--request-timeout", "10s"]));
    (code, serde_json::from_str(&out).unwrap_or(Value::Null))
}

/// The datapath findings of `node` for `target` in a `check -A` report.
fn node_finding<'a>(report: &'a Value, node: &str, target: &str) -> Option<&'a Value> {
    report["node_findings"]
        .as_array()?
        .iter()
        .find(|f| f["node"] == node && f["layer"] == "datapath" && f["target"] == target)
}

/// The frontends and their backends of a normalized table (`datapath show -o json`), as
/// comparable lines.
fn table_lines(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let frontends = v["frontends"]
        .as_array()
        .or_else(|| v["table"]["frontends"].as_array())
        .unwrap_or_else(|| panic!("no frontends in {v}"));
    for f in frontends {
        let mut fe = f.clone();
        let backends = fe
            .as_object_mut()
            .and_then(|o| o.remove("backends"))
            .unwrap_or(Value::Null);
        out.insert(format!("frontend {fe}"));
        for b in backends.as_array().into_iter().flatten() {
            out.insert(format!("{fe} -> {b}"));
        }
    }
    out
}

/// Kills the frozen agent and starts node-2's Cilium again, and uncordons node-2, even when
/// an assertion failed.
struct HealNode2;

impl Drop for HealNode2 {
    fn drop(&mut self) {
        let _ = run(Command::new("bash").arg("-c").arg(format!(
            ". {}/lab/lib.sh && pid=$(proc_pid cilium-node-2) && kill -KILL \"$pid\"; true",
            repo().display()
        )));
        let _ = run(lab("component").args(["start", "cilium-node-2"]));
        let _ = run(lab("kubectl").args(["uncordon", "node-2"]));
    }
}

#[test]
#[ignore = "needs the Cilium lab (lab/up --node-kind real --cni cilium, GHOSTIP_LAB=1, root)"]
fn the_agent_reads_ciliums_maps_and_names_the_node_that_kept_a_dead_coredns_backend() {
    require_cilium_lab();
    let _heal = HealNode2;
    // Installed by lab/up: every agent answers, nothing found, its datapath Cilium's maps.
    let mut report = Value::Null;
    wait_until(
        "check -A exits 0 with every agent on Cilium's maps",
        Duration::from_secs(120),
        || {
            let (code, r) = check();
            report = r;
            code == 0
                && report["agents"].as_array().is_some_and(|a| {
                    !a.is_empty()
                        && a.iter()
                            .all(|a| a["datapath"].as_str().is_some_and(|d| d.contains("cilium")))
                })
        },
    );
    eprintln!("check -A on a healthy Cilium lab: {report}");

    // The map reader against Cilium's own: node-2's maps as ghostip reads them and as
    // `cilium-dbg bpf lb list -o json` lists them, back to back.
    let ghostip = env!("CARGO_BIN_EXE_ghostip");
    let mut ours = BTreeSet::new();
    let mut theirs = BTreeSet::new();
    let mut same = false;
    for _ in 0..5 {
        let (code, out, err) = on_node(
            "node-2",
            &format!("{ghostip} datapath show --from-bpf /sys/fs/bpf/tc/globals -o json"),
        );
        assert_eq!(code, 0, "datapath show --from-bpf: {out}{err}");
        ours = table_lines(&serde_json::from_str(&out).unwrap());
        let dump = tempfile::NamedTempFile::new().unwrap();
        let (code, out, err) = on_node(
            "node-2",
            &format!(
                "sh -c \"'$LAB_BIN/cilium-dbg' bpf lb list -o json > {}\"",
                dump.path().display()
            ),
        );
        assert_eq!(code, 0, "cilium-dbg bpf lb list -o json: {out}{err}");
        let (code, out, err) = run(Command::new(ghostip).args([
            "datapath",
            "show",
            "--format",
            "cilium-bpf-lb-list",
            "-o",
            "json",
            "-f",
            dump.path().to_str().unwrap(),
        ]));
        assert_eq!(code, 0, "datapath show of cilium-dbg's list: {out}{err}");
        theirs = table_lines(&serde_json::from_str(&out).unwrap());
        if ours == theirs {
            same = true;
            break;
        }
        // A Service changed between the two reads: read both again.
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(
        same,
        "node-2's maps: only ghostip {:#?}\nonly cilium-dbg {:#?}",
        ours.difference(&theirs).collect::<Vec<_>>(),
        theirs.difference(&ours).collect::<Vec<_>>()
    );
    assert!(
        ours.iter().any(|l| l.contains("10.96.0.10")),
        "the kube-dns ClusterIP is in the maps: {ours:#?}"
    );
    eprintln!(
        "node-2: ghostip and cilium-dbg list the same {} lines",
        ours.len()
    );

    // The incident. The scenario runs while the test asks check -A every second: when the
    // agents first name the dead backend, measured from the CoreDNS pod's deletion.
    let (result, first_named) = std::thread::scope(|s| {
        let scenario = s.spawn(|| {
            let (code, out, err) = run(lab("scenarios/cilium-stale-backend").args([
                "--keep-stale",
                "--queries",
                "16",
            ]));
            let result: Value = out
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .and_then(|j| serde_json::from_str(j).ok())
                .unwrap_or_else(|| panic!("no RESULT ({code}):\n{out}\n{err}"));
            eprintln!("{out}");
            result
        });
        let dead: Vec<String> = crate::lab_support::coredns_pod_ips();
        let mut first: Option<(f64, Value)> = None;
        while !scenario.is_finished() {
            let (code, r) = check();
            if first.is_none()
                && code == 1
                && dead
                    .iter()
                    .any(|ip| node_finding(&r, "node-2", &format!("{ip}:53")).is_some())
            {
                first = Some((now_ms(), r));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        (scenario.join().unwrap(), first)
    });
    assert_eq!(result["reproduced"], true, "{result}");
    let dead = result["dead_ip"].as_str().unwrap();
    let target = format!("{dead}:53");
    let (named_at, named) = first_named.expect("check -A never named node-2 during the scenario");
    let finding = node_finding(&named, "node-2", &target)
        .unwrap_or_else(|| panic!("node-2's finding is for another backend: {named}"));
    let delay_s = (named_at - result["delete_unix_ms"].as_f64().unwrap()) / 1000.0;
    eprintln!("node-2 named {target} {delay_s:.1} s after the CoreDNS pod was deleted: {finding}");
    assert!(
        finding["former_pod"]
            .as_str()
            .is_some_and(|p| p.contains(result["deleted_pod"].as_str().unwrap())),
        "the former pod of {target}: {finding}"
    );
    // The endpoint leaves the slice a moment after the delete call; check -A polls once a
    // second or so: 10 s from the change, with the poll's own time on top.
    assert!(delay_s <= 12.0, "named {delay_s:.1} s after the delete");
    let (code, report) = check();
    assert_eq!(code, 1, "{report}");
    assert!(
        node_finding(&report, "node-2", &target).is_some(),
        "{report}"
    );
    assert!(
        !report["node_findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["node"] != "node-2" && f["layer"] == "datapath"),
        "only node-2 is stale: {report}"
    );

    // node-2's Cilium restarted: the finding clears.
    let restart = now_ms();
    let (code, out, err) = run(Command::new("bash").arg("-c").arg(format!(
        ". {}/lab/lib.sh && pid=$(proc_pid cilium-node-2) && kill -KILL \"$pid\"",
        repo().display()
    )));
    assert_eq!(code, 0, "kill the frozen agent: {out}{err}");
    let (code, out, err) = run(lab("component").args(["start", "cilium-node-2"]));
    assert_eq!(code, 0, "start cilium-node-2: {out}{err}");
    let started = now_ms();
    kubectl(&["uncordon", "node-2"]);
    wait_until(
        "check -A no longer names node-2's dead backend",
        Duration::from_secs(120),
        || {
            let (_, r) = check();
            r != Value::Null && node_finding(&r, "node-2", &target).is_none()
        },
    );
    let cleared = now_ms();
    eprintln!(
        "node-2's Cilium ready {:.1} s after the restart; the finding cleared {:.1} s after it was ready",
        (started - restart) / 1000.0,
        (cleared - started) / 1000.0
    );
    assert!(
        cleared - started <= 10_000.0 + 3_000.0,
        "cleared {:.1} s after node-2's Cilium was ready",
        (cleared - started) / 1000.0
    );
    let _ = run(lab("kubectl").args(["delete", "namespace", "cilium-demo", "--wait=false"]));
}

/// drain-wait (`deploy/drain-wait`, run by the kubelet as the preStop hook) on Cilium nodes:
/// each pod's termination waits until every node's agent, reading its Cilium maps, and the
/// DNS paths let go of its IP. Without a hook a client fails on removed IPs; with it, none.
#[test]
#[ignore = "needs the Cilium lab (lab/up --node-kind real --cni cilium, GHOSTIP_LAB=1, root, lab/build cacheclient)"]
fn drain_wait_on_cilium_lets_no_client_connect_to_a_gone_pod() {
    require_cilium_lab();
    let dir = tempfile::Builder::new()
        .prefix("e2e-cilium.")
        .tempdir()
        .unwrap();
    let (bare, drained) = bare_and_drained(dir.path());
    eprintln!("drain comparison on Cilium nodes (classic Corefile, 3 replicas):");
    for (name, o) in [("no hook", &bare), ("drain-wait", &drained)] {
        eprintln!(
            "  {name:12} connects {:4}  failed to removed IPs {:3}  rollout {:5.1} s",
            o.connects, o.failed_to_removed, o.rollout_s
        );
    }
    let _ = run(lab("kubectl").args(["delete", "namespace", "demo", "--wait=false"]));
}
