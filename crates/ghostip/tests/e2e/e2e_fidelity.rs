//! End-to-end tests of what ghostip measures against the lab's real components: when a node
//! agent calls a stale datapath over its expected lag, what `ghostip check -A` finds on a
//! stale node, how fast `ghostip watch` notices an API server that stopped, and the windows
//! it measures across that outage.
//!
//! - `stale-node-datapath`: agents on node-1 and node-2 listen on their node's address (so
//!   they require a bearer token) and stand behind hostNetwork pods in `ghostip-agent` (how
//!   `check` finds them). node-2's stale kube-dns backend is "over expected lag" from the
//!   first read past its lag while the tracking is still open; `ghostip check -A` run from
//!   node-1 exits 1 and names node-2, its backend and its path.
//! - `apiserver-outage`: `ghostip watch -n demo` on node-1; `ghostip_truth_synced` drops to 0
//!   within 5 s of the API server stopping and comes back after the relist; no window of the
//!   rollout around the outage is called over its Corefile's promise unless an independent
//!   `dig` loop on the same server saw the IP after the promise ran out (CoreDNS's own
//!   informer may relist later than ghostip's watch: then the staleness is real).
//!
//! Needs a running lab (2 nodes) and root; `#[ignore]`d. Run with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_fidelity::`
//! while holding the lab lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lab_support;
use lab_support::agent::{Agent, AgentOptions, node_ip};
use lab_support::{KillOnDrop, lab, node1_metrics, require_lab, run, start_watch};

use ghostip::ledger::Ledger;
use serde_json::{Value, json};

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn ms(t: &Value) -> i64 {
    t.as_str()
        .unwrap()
        .parse::<jiff::Timestamp>()
        .unwrap()
        .as_millisecond()
}

/// Runs `lab/scenarios/NAME ARGS…`: its `RESULT` JSON, asserted reproduced.
fn scenario(name: &str, args: &[&str]) -> Value {
    let (code, out, err) = run(lab(&format!("scenarios/{name}")).args(args));
    let result: Value = out
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_else(|| panic!("no RESULT from {name} ({code}):\n{out}\n{err}"));
    assert_eq!(result["reproduced"], true, "{name}: {result}");
    result
}

fn kubectl(args: &[&str]) -> (i32, String, String) {
    run(lab("kubectl").args(args))
}

/// The hostNetwork pods `ghostip check` finds the agents by (the DaemonSet's namespace and
/// label), one per node.
fn agent_pods() -> String {
    let mut docs = vec![json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "ghostip-agent"}
    })];
    for node in ["node-1", "node-2"] {
        docs.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("ghostip-agent-{node}"),
                "namespace": "ghostip-agent",
                "labels": {"app.kubernetes.io/name": "ghostip-agent"}
            },
            "spec": {
                "nodeName": node,
                "hostNetwork": true,
                "containers": [{"name": "agent", "image": "ghostip"}],
                "tolerations": [{"operator": "Exists"}]
            }
        }));
    }
    docs.iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Deletes the agent pods' namespace and heals node-2 even when an assertion failed.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = run(lab("kube-proxy").args(["start", "node-2"]));
        let _ = kubectl(&[
            "delete",
            "namespace",
            "ghostip-agent",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=60s",
        ]);
    }
}

/// `ghostip check -A` from node-1: (exit code, stdout, stderr).
fn check(json: bool) -> (i32, String, String) {
    let mut cmd = lab("exec");
    cmd.args(["node-1", env!("CARGO_BIN_EXE_ghostip")]);
    if json {
        cmd.args(["-o", "json"]);
    } else {
        // Whole rows: at the default 80 columns the node findings become `key: value` lists.
        cmd.args(["-o", "wide"]);
    }
    run(cmd.args(["check", "-A", "--request-timeout", "10s"]))
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn a_stale_node_is_over_its_lag_while_open_and_check_names_it() {
    require_lab();
    let _cleanup = Cleanup;
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("agents.json");
    std::fs::write(&manifest, agent_pods()).unwrap();
    let (code, out, err) = kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let running = || {
        let (_, out, _) = kubectl(&["-n", "ghostip-agent", "get", "pods", "-o", "json"]);
        serde_json::from_str::<Value>(&out).is_ok_and(|v| {
            let items = v["items"].as_array().cloned().unwrap_or_default();
            items.len() == 2
                && items
                    .iter()
                    .all(|p| p["status"]["phase"] == "Running" && p["status"]["hostIP"].is_string())
        })
    };
    let start = Instant::now();
    while !running() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the agent pods did not run"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // On the node's address (so they ask for a bearer token), where `check` calls them.
    let on_node_address = |node| {
        let host = node_ip(node);
        let opts = AgentOptions {
            host: &host,
            ..AgentOptions::default()
        };
        Agent::start_with(dir.path(), node, opts)
    };
    let n1 = on_node_address("node-1");
    let n2 = on_node_address("node-2");
    let mut audit_period_s: f64 = 0.0;
    for a in [&n1, &n2] {
        a.wait_for("synced line", Duration::from_secs(60), |v| {
            v["event"] == "synced"
        });
        let read = a.wait_for("first datapath read", Duration::from_secs(60), |v| {
            v["event"] == "read"
        });
        audit_period_s = audit_period_s.max(read["audit_period_s"].as_f64().unwrap());
        a.wait_for("healthy DNS", Duration::from_secs(60), |v| {
            v["event"] == "dns-health" && v["state"] == "healthy"
        });
    }
    let (code, out, err) = check(true);
    eprintln!("check -A before the incident: exit {code}\n{out}{err}");
    let before: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        before["agents"].as_array().map(Vec::len),
        Some(2),
        "both agents answered: {before}"
    );
    // Every DNS path is judged on the DNS Service's own name, with no headless Service.
    let dns_rows = before["results"].as_array().unwrap();
    assert!(
        dns_rows
            .iter()
            .any(|r| r["service"] == "kube-system/kube-dns" && r["state"] == "ok"),
        "{before}"
    );
    assert_eq!(code, 0, "a healthy lab: {before}");

    // The incident: node-2's kube-proxy frozen, one CoreDNS pod deleted.
    let result = scenario("stale-node-datapath", &["--keep-stale", "--queries", "10"]);
    let dead = result["dead_ip"].as_str().unwrap().to_string();
    let stale_target = format!("{dead}:53");
    let is_stale_backend = |v: &Value| {
        v["event"] == "tracking"
            && v["layer"] == "datapath"
            && v["service"] == "kube-system/kube-dns"
            && v["target"] == stale_target.as_str()
            && v["kind"] == "stale"
    };

    // node-2: over its expected lag from the first read past it, while still open.
    let over = n2.wait_for("over-lag line", Duration::from_secs(60), |v| {
        is_stale_backend(v) && v["change"] == "over-lag"
    });
    eprintln!("node-2: {over}");
    assert_eq!(over["verdict"], "over expected lag", "{over}");
    assert!(over["converged_by"].is_null(), "still open: {over}");
    let lag = over["expected_lag_s"].as_f64().unwrap();
    let held_s = (ms(&over["last_seen"]) - ms(&over["since"])) as f64 / 1000.0;
    eprintln!(
        "node-2 over expected lag after {held_s:.3} s (expected lag {lag} s, tolerance 1 s, audit period {audit_period_s} s)"
    );
    assert!(
        held_s <= lag + 1.0 + audit_period_s,
        "{held_s} s > lag {lag} + 1 s + audit period {audit_period_s} s"
    );
    assert!(
        !n2.lines()
            .iter()
            .any(|v| is_stale_backend(v) && v["change"] == "closed"),
        "the verdict came before the tracking closed"
    );

    // check -A from node-1 names node-2 and exits 1.
    let (code, out, err) = check(true);
    eprintln!("check -A during the incident: exit {code}\n{out}{err}");
    assert_eq!(code, 1, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let findings = report["node_findings"].as_array().unwrap();
    let on_node2: Vec<&Value> = findings
        .iter()
        .filter(|f| f["node"] == "node-2" && f["target"] == stale_target.as_str())
        .collect();
    assert_eq!(on_node2.len(), 1, "{report}");
    let f = on_node2[0];
    assert_eq!(f["service"], "kube-system/kube-dns", "{f}");
    assert_eq!(f["verdict"], "over expected lag", "{f}");
    assert!(f["since"].is_string(), "{f}");
    assert!(
        !findings
            .iter()
            .any(|f| f["node"] == "node-1" && f["layer"] == "datapath"),
        "node-1 is not stale: {report}"
    );
    let (code, table, err) = check(false);
    eprintln!("{table}{err}");
    assert_eq!(code, 1);
    assert!(
        table
            .lines()
            .any(|l| l.contains("node-2") && l.contains(&stale_target)),
        "{table}"
    );
}

/// `ghostip_truth_synced` of the watch on node-1 at `port`, if it answered.
/// An observer independent of ghostip: from node-1, `dig` asks each DNS server (the kube-dns
/// ClusterIP and each CoreDNS pod) for `name`'s A records and for the SRV records of its `http`
/// port every 200 ms, bounded by `seconds`; one line per round and server:
/// `unix_ms server ip… ip:port…` (an SRV target `10-244-1-73.web…` is the pod's IP).
fn start_dig_loop(servers: &[String], name: &str, seconds: u32, log: &Path) -> KillOnDrop {
    const LOOP: &str = r#"name=$1 end=$((SECONDS + $2)); shift 2
while ((SECONDS < end)); do
  for s in "$@"; do
    a=$(dig +short +time=1 +tries=1 "@$s" "$name" A | sort | tr '\n' ' ')
    v=$(dig +short +time=1 +tries=1 "@$s" "_http._tcp.$name" SRV |
      awk 'NF == 4 {split($4, h, "."); gsub("-", ".", h[1]); print h[1] ":" $3}' | sort | tr '\n' ' ')
    echo "$(date +%s%3N) $s $a $v"
  done
  sleep 0.2
done"#;
    let child = lab("exec")
        .args([
            "node-1",
            "bash",
            "-c",
            LOOP,
            "dig-loop",
            name,
            &seconds.to_string(),
        ])
        .args(servers)
        .stdin(Stdio::null())
        .stdout(File::create(log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    KillOnDrop(Some(child))
}

/// The dig loop's answers: (unix ms, server, IPs of the A answer and `ip:port`s of the SRV one).
fn dig_answers(log: &Path) -> Vec<(i64, String, Vec<String>)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let t = f.next()?.parse().ok()?;
            let server = f.next()?.to_string();
            Some((t, server, f.map(str::to_string).collect()))
        })
        .collect()
}

fn truth_synced(port: u16) -> Option<f64> {
    node1_metrics(port)?.lines().find_map(|l| {
        l.strip_prefix("ghostip_truth_synced ")
            .and_then(|v| v.trim().parse().ok())
    })
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn an_api_server_outage_is_a_gap_within_seconds_and_windows_keep_their_promise() {
    require_lab();
    const PORT: u16 = 9791;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("watch.db");
    let log = dir.path().join("watch.log");
    let watch = start_watch(env!("CARGO_BIN_EXE_ghostip"), &db, "demo", PORT, &log);
    let mut watch = KillOnDrop(Some(watch));

    // ghostip_truth_synced every 250 ms while the scenario runs (bounded: 10 min).
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut samples = Vec::new();
            while !done.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(600) {
                samples.push((unix_ms(), truth_synced(PORT)));
                std::thread::sleep(Duration::from_millis(250));
            }
            samples
        })
    };
    // The DNS servers ghostip probes, asked by dig as well.
    let mut servers = vec!["10.96.0.10".to_string()];
    servers.extend(lab_support::coredns_pod_ips());
    let dig_log = dir.path().join("dig.log");
    let mut digs = start_dig_loop(&servers, "web.demo.svc.cluster.local", 300, &dig_log);
    let started_ms = unix_ms();
    let result = scenario("apiserver-outage", &[]);
    // The relist after the outage, and the trackings' settling.
    let ready_ms = result["apiserver_ready_unix_ms"].as_i64().unwrap();
    let resynced = || truth_synced(PORT) == Some(1.0);
    let wait = Instant::now();
    while !resynced() && wait.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(15));
    done.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let (code, _) = watch.terminate();
    digs.terminate();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(0), "watch exit; log:\n{log_text}");

    let stop_ms = result["apiserver_stop_unix_ms"].as_i64().unwrap();
    let gap_seen = samples
        .iter()
        .find(|(t, v)| *t >= stop_ms && *v == Some(0.0))
        .map(|(t, _)| *t);
    let back = samples
        .iter()
        .find(|(t, v)| *t >= ready_ms && *v == Some(1.0))
        .map(|(t, _)| *t);
    eprintln!(
        "API server stopped at {stop_ms}, ready at {ready_ms}; truth_synced 0 after {:?} ms, 1 again {:?} ms after /readyz",
        gap_seen.map(|t| t - stop_ms),
        back.map(|t| t - ready_ms)
    );
    let gap_seen = gap_seen.unwrap_or_else(|| panic!("no gap seen; log:\n{log_text}"));
    assert!(
        gap_seen - stop_ms <= 5_000,
        "truth_synced dropped {} ms after the API server stopped",
        gap_seen - stop_ms
    );
    assert!(
        back.is_some(),
        "truth_synced never came back; log:\n{log_text}"
    );
    // Synced before the stop, unsynced from the sample that saw the gap until the relist.
    assert!(samples.iter().any(|(t, v)| *t < stop_ms && *v == Some(1.0)));

    // The ledger's gap starts when the probe noticed, and ends after the relist.
    let l = Ledger::open_read_only(&db).unwrap();
    let since = jiff::Timestamp::from_millisecond(started_ms).unwrap();
    let gaps = l.truth_gaps(since, jiff::Timestamp::now()).unwrap();
    eprintln!("truth gaps: {gaps:?}");
    let gap = gaps
        .iter()
        .find(|g| g.start.as_millisecond() >= stop_ms)
        .unwrap_or_else(|| panic!("no gap after the stop: {gaps:?}"));
    assert!(
        gap.start.as_millisecond() - stop_ms <= 5_000,
        "gap from {} ({} ms after the stop)",
        gap.start,
        gap.start.as_millisecond() - stop_ms
    );
    // It ends with the relist, once the API server was started again (the scenario's
    // /readyz time is when its own poll saw it, which may be later).
    let start_ms = result["apiserver_start_unix_ms"].as_i64().unwrap();
    assert!(
        gap.end.is_some_and(|e| e.as_millisecond() >= start_ms),
        "{gap:?}"
    );

    // Every window of the rollout around the outage against the Corefile's promise.
    let findings: Vec<_> = l
        .findings_since(since)
        .unwrap()
        .into_iter()
        .filter(|f| f.service.namespace == "demo" && f.service.name == "web")
        .collect();
    for f in &findings {
        eprintln!(
            "{:?} {} {} t0 {} (received {}, trigger {:?}, correction {:?}) window {:?} expected {:?}: {}",
            f.kind,
            f.path_id,
            f.target,
            f.t0,
            f.received,
            f.trigger,
            f.t0_correction,
            f.window,
            f.expected_lag,
            f.verdict
        );
    }
    assert!(
        findings.iter().any(|f| f.window.is_some()),
        "the rollout left measured windows"
    );
    // A window over its promise is a false verdict unless the path really still answered
    // with the IP after the promise ran out: after an outage CoreDNS's own informer may
    // relist later than ghostip's watch, and then the staleness is real. The dig loop
    // (every 200 ms per server, A and SRV) is the independent witness.
    let answers = dig_answers(&dig_log);
    assert!(!answers.is_empty(), "the dig loop answered nothing");
    let false_verdicts: Vec<_> = findings
        .iter()
        .filter(|f| f.verdict == "over expected lag")
        .filter(|f| {
            let server = f
                .path_id
                .split_once('/')
                .and_then(|(_, a)| a.rsplit_once(':'))
                .map_or("", |(ip, _)| ip);
            let promise_ms = f.expected_lag.map_or(0, |d| d.as_millis() as i64);
            let past_promise = f.t0.as_millisecond() + promise_ms + 250;
            let witnessed = answers.iter().find(|(t, s, ips)| {
                s == server && *t >= past_promise && ips.contains(&f.target.to_string())
            });
            match witnessed {
                Some((t, _, _)) => {
                    eprintln!(
                        "real: {} still answered {} {} ms after t0 (dig)",
                        f.path_id,
                        f.target,
                        t - f.t0.as_millisecond()
                    );
                    false
                }
                None => true,
            }
        })
        .collect();
    assert!(
        false_verdicts.is_empty(),
        "windows over their promise that no dig saw: {false_verdicts:#?}"
    );
}
