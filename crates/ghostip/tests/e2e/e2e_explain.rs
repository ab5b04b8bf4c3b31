//! End-to-end test of `ghostip explain` in the lab cluster: a real client with its own 30 s DNS
//! cache (`lab/cacheclient`) dials the pods of demo/web from a pod network namespace while
//! `kubectl rollout restart` replaces them and `ghostip watch` keeps the ledger; `explain` then
//! classifies the client's real errors against that ledger.
//!
//! Needs a running lab (`lab/up`), `lab/build cacheclient` and root; `#[ignore]`d so plain
//! `cargo test` never touches a cluster. `scripts/test` runs it with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_explain::`.
//! With `GHOSTIP_CAPTURE=DIR` it also copies the client log and the pod watch stream there
//! (that is how `tests/fixtures/lab-cacheclient/` was made).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::lab_support;
use lab_support::{
    cacheclient, kubectl, lab, replace_client_pod, require_lab, run, start_watch, stop, web_pods,
    web_rollout_status,
};

use serde_json::Value;

const WATCH_PORT: u16 = 19755;

const CLIENT_POD: &str = r#"{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "cacheclient", "namespace": "demo", "labels": {"app": "cacheclient"}},
  "spec": {"containers": [{"name": "client", "image": "cacheclient",
    "ports": [{"containerPort": 9000}]}]}
}"#;

#[test]
#[ignore = "needs the lab cluster (lab/up), lab/build cacheclient and root"]
fn explain_classifies_a_real_clients_errors_during_a_rollout_against_the_ledger() {
    require_lab();
    let (code, out, err) =
        run(lab("scenarios/coredns-cache").args(["--corefile", "classic", "--setup-only"]));
    assert_eq!(code, 0, "scenario setup failed:\n{out}\n{err}");
    let bin = cacheclient();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let client_log = dir.path().join("client.log");
    let pods_watch = dir.path().join("pods-watch.json");

    // The client pod (podsync runs `serve` in it; the client runs beside it in its netns).
    replace_client_pod(dir.path(), "cacheclient", CLIENT_POD);
    let old = web_pods();
    assert_eq!(old.len(), 3, "three web pods before the rollout: {old:?}");

    // ghostip watch keeps the ledger; a kubectl watch records the truth-history format.
    let mut watch = start_watch(
        env!("CARGO_BIN_EXE_ghostip"),
        &db,
        "demo",
        WATCH_PORT,
        &dir.path().join("watch.log"),
    );
    let mut kwatch = lab("kubectl")
        .args([
            "-n",
            "demo",
            "get",
            "pods",
            "-o",
            "json",
            "--watch",
            "--output-watch-events",
        ])
        .stdin(Stdio::null())
        .stdout(File::create(&pods_watch).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // The client: resolves web.demo once, keeps the answer 30 s (like a JVM), dials every 100 ms.
    let mut client = lab("exec")
        .args(["demo/cacheclient"])
        .arg(bin)
        .args([
            "-name",
            "web.demo.svc.cluster.local",
            "-port",
            "8080",
            "-cache-ttl",
            "30s",
            "-interval",
            "100ms",
            "-dial-timeout",
            "500ms",
            "-duration",
            "75s",
            "-max-dials",
            "1000",
        ])
        .stdin(Stdio::null())
        .stdout(File::create(&client_log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    kubectl(&["-n", "demo", "rollout", "restart", "deploy/web"]);
    web_rollout_status("120s");
    // The client stops by itself after 75 s (its -duration); wait at most 90 s.
    let waited = Instant::now();
    while client.try_wait().unwrap().is_none() && waited.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(500));
    }
    stop(&mut client);
    stop(&mut kwatch);
    stop(&mut watch);
    let new = web_pods();
    eprintln!("old pods {old:?}\nnew pods {new:?}");

    if let Some(capture) = std::env::var_os("GHOSTIP_CAPTURE") {
        let capture = PathBuf::from(capture);
        std::fs::create_dir_all(&capture).unwrap();
        std::fs::copy(&client_log, capture.join("client.log")).unwrap();
        std::fs::copy(&pods_watch, capture.join("pods-watch.json")).unwrap();
        let _ = std::fs::copy(
            "/var/lib/ghostip-lab/logs/podsync.jsonl",
            capture.join("podsync.jsonl"),
        );
    }

    let explain = |history: &[&str]| -> (i32, Value) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ghostip"));
        cmd.arg("explain")
            .args(history)
            .arg(&client_log)
            .args(["-o", "json"]);
        let (code, out, err) = run(&mut cmd);
        eprintln!("explain {history:?}: exit {code}\n{err}");
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}\n{err}"));
        (code, v)
    };
    let (code, x) = explain(&["--db", db.to_str().unwrap()]);
    let groups = x["report"]["groups"].as_array().unwrap();
    for g in groups {
        eprintln!(
            "  {:<14} {:<20} {:<10} {:<40} {:>4} {}",
            g["peer"].as_str().unwrap(),
            g["class"].as_str().unwrap(),
            g["service"].as_str().unwrap_or("-"),
            g["window"].as_str().unwrap_or("-"),
            g["errors"],
            g["by_kind"]
        );
    }
    for w in x["windows"].as_array().unwrap() {
        eprintln!("  {}", w["sentence"].as_str().unwrap());
    }
    assert_eq!(code, 1, "staleness found: exit 1");
    assert!(
        x["history"]["source"]
            .as_str()
            .unwrap()
            .starts_with("ledger ")
    );
    let total = x["report"]["total"].as_u64().unwrap();
    assert!(
        total >= 10,
        "the client kept dialing removed IPs: {total} errors"
    );

    // Every error aims at an IP of a pod the rollout removed, and the join says so.
    let old_ips: BTreeSet<&str> = old.keys().map(String::as_str).collect();
    let stale_classes = [
        "stale_client_cache",
        "blackholed",
        "terminating_target",
        "pooled_connection",
    ];
    let mut hit = BTreeSet::new();
    for g in groups {
        let peer = g["peer"].as_str().unwrap();
        assert!(
            old_ips.contains(peer),
            "error aimed at {peer}, not an old pod IP: {g}"
        );
        hit.insert(peer.to_string());
        let class = g["class"].as_str().unwrap();
        assert!(stale_classes.contains(&class), "class {class}: {g}");
        assert_eq!(g["service"], "demo/web", "{g}");
        let window = g["window"].as_str().unwrap_or_default();
        assert!(
            window.ends_with("rollout of demo/deploy/web"),
            "window {window:?}: {g}"
        );
        // Timeouts are the blackholed dead IPs; refusals happen while the pod still exists.
        for (kind, n) in g["by_kind"].as_object().unwrap() {
            match kind.as_str() {
                "timeout" | "no_route" => assert_eq!(class, "blackholed", "{n} {kind}: {g}"),
                "refused" => assert!(
                    class == "terminating_target" || class == "stale_client_cache",
                    "{n} refused: {g}"
                ),
                _ => {}
            }
        }
    }
    assert_eq!(hit.len(), 3, "errors aimed at all three old IPs: {hit:?}");
    let windows = x["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 1, "one rollout window");
    assert_eq!(windows[0]["pods"].as_array().unwrap().len(), 3);
    let targets = x["targets"].as_array().unwrap();
    assert_eq!(
        x["history"]["distinct_ips"], 3,
        "one lookup per distinct IP"
    );
    for t in targets {
        let owner = &t["owner_at_first_error"];
        let name = owner["pod"].as_str().unwrap().trim_start_matches("demo/");
        assert_eq!(
            Some(name),
            old.get(t["ip"].as_str().unwrap()).map(String::as_str),
            "the ledger names the removed pod: {t}"
        );
    }

    // The same log against the kubectl watch stream (truth-history format) agrees per IP.
    let (code2, y) = explain(&["--truth-history", pods_watch.to_str().unwrap()]);
    assert_eq!(code2, 1);
    let per_ip = |v: &Value| -> BTreeMap<String, u64> {
        v["report"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| (g["peer"].as_str().unwrap().to_string(), 0))
            .collect::<BTreeMap<_, _>>()
            .into_keys()
            .map(|ip| {
                let n = v["report"]["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|g| g["peer"] == ip.as_str())
                    .map(|g| g["errors"].as_u64().unwrap())
                    .sum();
                (ip, n)
            })
            .collect()
    };
    assert_eq!(per_ip(&x), per_ip(&y));
    assert_eq!(
        y["windows"].as_array().unwrap().len(),
        1,
        "{}",
        y["windows"]
    );

    // `--target` on each removed IP gives the full report's groups for it, ledger join included.
    // Only the window's name may differ: it is made from the removals of the pods the kept
    // failures aimed at, here one ("removal of" rather than "rollout of").
    let unnamed = |g: &Value| -> Value {
        let mut g = g.clone();
        let window = g["window"].as_str().unwrap_or_default().to_owned();
        assert!(window.ends_with(" of demo/deploy/web"), "window {window:?}");
        g["window"] = Value::Null;
        g
    };
    for ip in &hit {
        let (code3, z) = explain(&["--db", db.to_str().unwrap(), "--target", ip]);
        assert_eq!(code3, 1, "--target {ip}");
        let want: Vec<Value> = groups
            .iter()
            .filter(|g| g["peer"] == ip.as_str())
            .map(unnamed)
            .collect();
        let got: Vec<Value> = z["report"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(unnamed)
            .collect();
        assert_eq!(got, want, "--target {ip}");
    }

    let _ =
        run(lab("kubectl").args(["-n", "demo", "delete", "pod", "cacheclient", "--wait=false"]));
}
