//! End-to-end test of the client-cache scenario: a real JVM client (`lab/javaclient`: the JVM's
//! address cache, OkHttp's keep-alive pool) calls the pods of javademo/backend while `kubectl
//! rollout restart` replaces them; the pods drain on SIGTERM (listener closed, open connections
//! left unread) and exit. The client's log must show both kernel refusals (listener gone, IP
//! still routed) and resets (pooled connections the exiting pod held) aimed at the removed IPs,
//! and `ghostip explain` must name the layer and the former pod of each, from a `kubectl get pods
//! --watch` capture and from a ledger. The agent of the client's node reports the flows that
//! outlive their endpoint while the client sends them, and the last packet it saw agrees with
//! the client's own last call within 1 s. Without client-side caches and with a preStop
//! longer than the DNS budget, no call fails and the agent reports no stale flow.
//!
//! Needs a running lab (`lab/up`), `lab/build podsync registry javaclient` and root; `#[ignore]`d
//! so plain `cargo test` never touches a cluster. Run with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_client_cache::`.
//! With `GHOSTIP_CAPTURE=DIR` it also copies the client log, the pod watch capture, the ledger and
//! the watch's log there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use crate::lab_support;
use lab_support::agent::{Agent, AgentOptions};
use lab_support::{require_lab, run, start_watch, stop};

use ghostip::ledger::FindingKind;
use serde_json::Value;

const WATCH_PORT: u16 = 19756;
/// The port of the agent on the client's node (node-1).
const AGENT_PORT: u16 = 19757;

/// The agent of the client's node (node-1), synced: it reads node-1's conntrack table, and its
/// ledger keeps the flows that outlived their endpoint.
fn client_node_agent(dir: &Path) -> Agent {
    let agent = Agent::start_with(
        dir,
        "node-1",
        AgentOptions {
            port: AGENT_PORT,
            ..AgentOptions::default()
        },
    );
    agent.wait_for("synced line", std::time::Duration::from_secs(60), |v| {
        v["event"] == "synced"
    });
    agent
}

/// Runs the scenario; returns its exit code and its `RESULT` JSON.
fn scenario(args: &[&str]) -> (i32, Value) {
    lab_support::scenario("client-cache", args)
}

fn explain(history: &[&str], log: &Path) -> (i32, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ghostip"));
    cmd.arg("explain")
        .args(["--tz", "UTC"])
        .args(history)
        .arg(log)
        .args(["-o", "json"]);
    let (code, out, err) = run(&mut cmd);
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}\n{err}"));
    eprintln!("explain {history:?}: exit {code}");
    for g in v["report"]["groups"].as_array().unwrap() {
        eprintln!(
            "  {:<12} {:<20} {:>4} {}",
            g["peer"].as_str().unwrap(),
            g["class"].as_str().unwrap(),
            g["errors"],
            g["by_kind"]
        );
    }
    (code, v)
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Checks one explanation against the scenario's own counts: every failure is aimed at a removed
/// pod IP, the kinds add up to the client's summary, each kind has the class its owner's state
/// allows, and each target's owner at its first failure is the pod the rollout removed. Returns
/// the classes seen.
fn check(x: &Value, r: &Value, old: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut classes = BTreeSet::new();
    for g in x["report"]["groups"].as_array().unwrap() {
        let peer = g["peer"].as_str().unwrap();
        assert!(
            old.contains_key(peer),
            "error aimed at {peer}, not a removed pod IP: {g}"
        );
        let class = g["class"].as_str().unwrap();
        classes.insert(class.to_string());
        let window = g["window"].as_str().unwrap_or_default();
        assert!(
            window.ends_with("of javademo/deploy/backend"),
            "window {window:?}: {g}"
        );
        for (kind, n) in g["by_kind"].as_object().unwrap() {
            *kinds.entry(kind.clone()).or_default() += count(n);
            let allowed: &[&str] = match kind.as_str() {
                // A pooled connection the exiting pod reset.
                "reset" => &["pooled_connection"],
                // A new connection to a draining pod: listener closed, IP still routed. A stale
                // cache aiming at a pod already gone would be the other.
                "refused" => &["terminating_target", "stale_client_cache"],
                // A connect to the IP once the pod and its route were gone (blackholed), or,
                // where the history only knows the deletion deadline, still "terminating".
                "timeout" => &["blackholed", "terminating_target"],
                other => panic!("{n} unexpected {other} errors: {g}"),
            };
            assert!(
                allowed.contains(&class),
                "{n} {kind} classified {class}: {g}"
            );
        }
    }
    for kind in ["refused", "reset", "timeout", "other"] {
        assert_eq!(
            kinds.get(kind).copied().unwrap_or(0),
            count(&r["errors"][kind]),
            "explain's {kind} count against the client's summary"
        );
    }
    for t in x["targets"].as_array().unwrap() {
        let ip = t["ip"].as_str().unwrap();
        let pod = t["owner_at_first_error"]["pod"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            Some(pod.trim_start_matches("javademo/")),
            old.get(ip).map(String::as_str),
            "the former pod of {ip}: {t}"
        );
    }
    classes
}

#[test]
#[ignore = "needs the lab cluster (lab/up), lab/build podsync registry javaclient, and root"]
fn a_jvm_client_keeps_calling_removed_pods_and_explain_names_each_layer() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let client_log = dir.path().join("client.log");

    // A ledger kept while the scenario runs, besides the scenario's own pod watch capture.
    let mut watch = start_watch(
        env!("CARGO_BIN_EXE_ghostip"),
        &db,
        "javademo",
        WATCH_PORT,
        &dir.path().join("watch.log"),
    );
    eprintln!("ghostip watch: ledger {}", db.display());
    let mut agent = client_node_agent(dir.path());
    let (code, r) = scenario(&[
        "--jvm-ttl",
        "30",
        "--keep-log",
        client_log.to_str().unwrap(),
        "--json",
        dir.path().join("result.json").to_str().unwrap(),
    ]);
    let watch_log = dir.path().join("watch.log");
    let tail = || {
        let log = std::fs::read_to_string(&watch_log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    assert!(
        watch.try_wait().unwrap().is_none(),
        "ghostip watch exited during the scenario:\n{}",
        tail()
    );
    stop(&mut watch);
    let (agent_exit, _) = agent.terminate();
    assert_eq!(agent_exit, Some(0), "node-1's agent on SIGTERM");
    let node1_db = agent.db.clone();
    if let Some(capture) = std::env::var_os("GHOSTIP_CAPTURE") {
        let capture = std::path::PathBuf::from(capture);
        std::fs::create_dir_all(&capture).unwrap();
        let pods_watch = r["data"]["pods_watch"].as_str().unwrap_or_default();
        for (from, to) in [
            (client_log.as_path(), "client.log"),
            (Path::new(pods_watch), "pods-watch.json"),
            (watch_log.as_path(), "watch.log"),
            (db.as_path(), "ledger.db"),
            (node1_db.as_path(), "agent-node-1.db"),
            (agent.out_path(), "agent-node-1.jsonl"),
        ] {
            let _ = std::fs::copy(from, capture.join(to));
        }
    }
    assert_eq!(code, 0, "symptom not reproduced: {}", r["reason"]);

    // The client logged real refusals and resets, all aimed at the removed pod IPs.
    let old: BTreeMap<String, String> = r["old_pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["ip"].as_str().unwrap().to_string(),
                p["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(old.len(), 3, "three pods before the rollout: {old:?}");
    let to_removed = &r["errors_to_removed"];
    assert!(count(&to_removed["refused"]) > 0, "{to_removed}");
    assert!(count(&to_removed["reset"]) > 0, "{to_removed}");
    let removed_total: u64 = ["refused", "reset", "timeout", "other"]
        .iter()
        .map(|k| count(&to_removed[k]))
        .sum();
    assert_eq!(
        removed_total,
        count(&r["failed"]),
        "every failed call aimed at a removed IP"
    );
    for x in r["removed"].as_array().unwrap() {
        assert!(
            x["left_slice_s"].as_f64().is_some(),
            "{x}: left the EndpointSlice"
        );
        assert!(
            x["exposure_s"].as_f64().is_some_and(|e| e > 0.0),
            "{x}: called after it left the EndpointSlice"
        );
    }

    // ghostip audit on what the scenario applied (the client pod's JAVA_TOOL_OPTIONS, the
    // Corefile in use): its budget for the Service bounds the exposure the client measured.
    let manifests = r["data"]["manifests"].as_str().unwrap();
    let (code, out, err) = run(Command::new(env!("CARGO_BIN_EXE_ghostip"))
        .args(["audit", "-R", "-f", manifests, "-o", "json"]));
    assert!(
        code == 0 || code == 1,
        "audit failed ({code}):\n{out}\n{err}"
    );
    let audit: Value = serde_json::from_str(&out).unwrap();
    let budget = audit["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["service"]["namespace"] == "javademo" && s["service"]["name"] == "backend")
        .unwrap_or_else(|| panic!("no budget for javademo/backend: {audit}"));
    assert_eq!(
        budget["client_cache_s"], 30,
        "the JVM cache of the caller: {budget}"
    );
    let predicted = budget["budget_s"].as_f64().unwrap();
    let measured = r["max_exposure_s"].as_f64().unwrap();
    eprintln!("audit budget {predicted} s ({budget}); measured exposure {measured:.1} s");
    assert!(
        measured <= predicted + 1.0,
        "the client kept calling a removed IP {measured:.1} s, past the audit's budget {predicted} s"
    );

    // explain from the pod watch capture (what an operator without a ledger has) ...
    let pods_watch = r["data"]["pods_watch"].as_str().unwrap();
    let (code, x) = explain(&["--truth-history", pods_watch], &client_log);
    assert_eq!(code, 1, "staleness found: exit 1");
    let classes = check(&x, &r, &old);
    assert!(classes.contains("pooled_connection"), "{classes:?}");

    // ... and from the ledger, which knows when each pod was really gone.
    let (code, y) = explain(&["--db", db.to_str().unwrap()], &client_log);
    assert_eq!(
        code,
        1,
        "staleness found: exit 1; ghostip watch's log ends with:\n{}",
        tail()
    );
    let classes = check(&y, &r, &old);
    for g in y["report"]["groups"].as_array().unwrap() {
        assert_eq!(g["service"], "javademo/backend", "{g}");
    }
    assert!(classes.contains("pooled_connection"), "{classes:?}");
    assert!(
        classes.contains("terminating_target") || classes.contains("stale_client_cache"),
        "refusals: {classes:?}"
    );

    // From the agent's ledger: the failures joined with the flows the agent saw outlive their
    // endpoint on node-1. (Its truth is its node's: the owners of node-2's pods are the
    // cluster ledger's to tell, so only the join is judged here.) How many failures fall
    // inside those windows depends on when the client's pooled connections close; that the
    // agent saw them outlive the endpoint does not.
    let (code, z) = explain(&["--db", node1_db.to_str().unwrap()], &client_log);
    assert_eq!(code, 1, "staleness found: exit 1");
    let joined: Vec<&Value> = z["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.get("agent_flows"))
        .collect();
    let on_flows: u64 = joined.iter().map(|j| count(&j["failures_on_flows"])).sum();
    let resets: u64 = joined.iter().map(|j| count(&j["resets_on_flows"])).sum();
    eprintln!(
        "node-1's agent saw flows outlive {} removed endpoints; {on_flows} failures ({resets} resets) fell on them: {joined:?}",
        joined.len()
    );
    assert!(
        !joined.is_empty(),
        "node-1's agent saw no flow of the client outlive a removed endpoint"
    );
    for j in &joined {
        assert_eq!(j["paths"], serde_json::json!(["conntrack/node-1"]), "{j}");
        for pod in j["former_pods"].as_array().unwrap() {
            let pod = pod.as_str().unwrap().trim_start_matches("javademo/");
            assert!(old.values().any(|p| p == pod), "{pod} was not removed: {j}");
        }
    }
    if count(&r["errors"]["timeout"]) > 0 {
        assert!(
            classes.contains("blackholed"),
            "timeouts after the pods were gone: {classes:?}"
        );
    }

    // The agent reported those flows while the client still sent them, cleared each, and
    // its last packet agrees with the client's own last call to the IP within 1 s.
    let agreed = flows_agree_with_the_client(&agent.lines(), &r, &old, &node1_db);
    assert!(
        agreed > 0,
        "node-1's agent reported no stale flow of the client to compare"
    );
}

/// The agent's `stale-flow` lines against the client's own timestamps (`by_target`): every
/// flow reported `opened` was to a removed pod IP, first seen while the client still called
/// it, and `cleared` before the agent stopped, its last packet within 1 s of the client's
/// last call to that IP, and so is the end of the window its ledger kept (what `explain`
/// reports). Returns how many flows were compared.
fn flows_agree_with_the_client(
    lines: &[Value],
    r: &Value,
    old: &BTreeMap<String, String>,
    db: &Path,
) -> usize {
    let ledger = ghostip::ledger::Ledger::open_existing(db).unwrap();
    let ms = |v: &Value| v.as_i64().unwrap() as f64 / 1000.0;
    let secs = |v: &Value| {
        let t: jiff::Timestamp = v.as_str().unwrap().parse().unwrap();
        t.as_nanosecond() as f64 / 1e9
    };
    let of = |change: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["event"] == "stale-flow" && l["change"] == change)
            .collect()
    };
    let (opened, cleared) = (of("opened"), of("cleared"));
    for o in &opened {
        let target = o["target"].as_str().unwrap();
        let ip = target.rsplit_once(':').unwrap().0;
        assert!(
            old.contains_key(ip),
            "a stale flow to {target}, not a removed pod: {o}"
        );
        assert_eq!(o["client_pod"], "javademo/javaclient", "{o}");
        let by = &r["by_target"][target];
        assert!(
            secs(&o["first_seen"]) <= ms(&by["last_call_unix_ms"]),
            "reported after the client's last call to {target} ({by}): {o}"
        );
        let c = cleared
            .iter()
            .find(|c| c["target"] == o["target"] && c["client_ip"] == o["client_ip"])
            .unwrap_or_else(|| panic!("the stale flow to {target} never cleared: {o}"));
        let last_packet = secs(&c["last_packet"]);
        let last_call = ms(&by["last_call_unix_ms"]);
        eprintln!(
            "stale flow to {target}: left {} · agent first saw {} · last packet {} · cleared by {} · client's last call {:.3} s after the last packet",
            o["left_at"],
            o["first_seen"],
            c["last_packet"],
            c["last_seen"],
            last_call - last_packet
        );
        assert!(
            (last_packet - last_call).abs() <= 1.0,
            "{target}: the agent's last packet {} against the client's last call {last_call:.3}: {c}",
            c["last_packet"]
        );
        let kept: Vec<f64> = ledger
            .findings_for_ip(ip.parse().unwrap())
            .unwrap()
            .iter()
            .filter(|f| f.layer == ghostip_datapath::layers::CONNTRACK.as_str())
            .filter_map(|f| f.last_seen)
            .map(|t| t.as_nanosecond() as f64 / 1e9)
            .collect();
        let ledger_end = kept.iter().copied().reduce(f64::max);
        eprintln!("  the ledger's window for {ip} was last wrong {ledger_end:?}");
        assert!(
            ledger_end.is_some_and(|e| (e - last_call).abs() <= 1.0),
            "{target}: the ledger's window ends {ledger_end:?}, the client's last call {last_call:.3}"
        );
    }
    opened.len()
}

#[test]
#[ignore = "needs the lab cluster (lab/up), lab/build podsync registry javaclient, and root"]
fn without_client_caches_and_a_prestop_beyond_the_dns_budget_no_call_fails() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let mut agent = client_node_agent(dir.path());
    let (code, r) = scenario(&[
        "--jvm-ttl",
        "0",
        "--no-pool",
        "--prestop",
        "35",
        "--corefile",
        "classic",
    ]);
    let lines = agent.lines();
    let (agent_exit, _) = agent.terminate();
    assert_eq!(r["expect_clean"], true, "{r}");
    assert_eq!(code, 0, "{}", r["reason"]);
    assert_eq!(count(&r["failed"]), 0, "{}", r["errors"]);
    assert_eq!(agent_exit, Some(0), "node-1's agent on SIGTERM");
    // No false positive: the client's flows went to endpoints still listed (terminating pods
    // that serve through their preStop) and ended before they left; the agent read the table
    // through the rollout and reported none of them.
    let reads: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "conntrack-read")
        .collect();
    let stale: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "stale-flow")
        .collect();
    let attributed = reads.iter().map(|l| count(&l["attributed"])).max();
    eprintln!(
        "node-1's agent: {} conntrack reads, up to {attributed:?} flows of Services in one, {} stale-flow lines",
        reads.len(),
        stale.len()
    );
    assert!(
        attributed.is_some_and(|n| n > 0),
        "the agent saw the client's flows to javademo/backend"
    );
    assert!(stale.is_empty(), "false positives: {stale:?}");
    let findings = ghostip::ledger::Ledger::open_existing(&agent.db)
        .unwrap()
        .findings_since(jiff::Timestamp::UNIX_EPOCH)
        .unwrap();
    // Each old pod's last flows were measured closing as it left (the window from its
    // departure to the first read without them), all within the path's expected lag.
    let conntrack: Vec<_> = findings
        .iter()
        .filter(|f| f.layer == ghostip_datapath::layers::CONNTRACK.as_str())
        .collect();
    let longest = conntrack.iter().filter_map(|f| f.window).max();
    eprintln!(
        "node-1's ledger: {} conntrack windows, the longest {longest:?}",
        conntrack.len()
    );
    assert!(
        conntrack
            .iter()
            .all(|f| f.verdict == "within expected lag" && f.kind == FindingKind::Stale),
        "conntrack findings beyond the expected lag in the agent's ledger: {conntrack:?}"
    );
    // Not vacuous: the client did call every old pod, and each left the EndpointSlice.
    for x in r["removed"].as_array().unwrap() {
        let ip = x["ip"].as_str().unwrap();
        let t = &r["by_target"][format!("{ip}:8080")];
        assert!(count(&t["ok"]) > 0, "{ip}: {t}");
        assert!(x["left_slice_s"].as_f64().is_some(), "{x}");
    }
}
