//! End-to-end test of `ghostip drain-wait` in the lab cluster: a real client loop resolves the
//! headless Service through CoreDNS and connects to each answer while `ghostip rollout
//! --restart` replaces the pods of demo/web; once with no preStop hook, once with drain-wait
//! as the pods' preStop hook (podsync runs it in the pod's network namespace, as the kubelet
//! would), and the rollout's own stale-window measurement says when each layer let go.
//!
//! drain-wait runs as the pods' ServiceAccount (demo/default) with exactly the RBAC of
//! `deploy/drain-wait/rbac.yaml`, and asks a real `ghostip agent` on each node (listening on
//! the node's address, tokens reviewed by the API server) whether its datapath let go.
//!
//! Needs a running lab (`lab/up`), `lab/build cacheclient` and root; `#[ignore]`d so plain
//! `cargo test` never touches a cluster. `scripts/test` runs it with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_drain::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::lab_support;
use lab_support::{
    KillOnDrop, cacheclient, kubectl, kubectl_stdin, lab, replace_client_pod, repo, require_lab,
    rollout_web, run, stop, web_pods, web_pods_jsonpath, web_rollout_status,
};

use serde_json::Value;

/// drain-wait's probe interval in these tests.
const INTERVAL_S: f64 = 0.5;

/// The lab's nodes and their addresses (lab/lib.sh's node_ip).
const NODES: [(&str, &str); 2] = [("node-1", "10.200.0.11"), ("node-2", "10.200.0.12")];

/// Port of the test's agents.
const AGENT_PORT: u16 = 9754;

/// What drain-wait runs with: a kubeconfig holding demo/default's token (granted by
/// deploy/drain-wait/rbac.yaml) and an agent on each node; removed again when dropped.
struct DrainSetup {
    kubeconfig: PathBuf,
    rbac: PathBuf,
    _agents: Vec<KillOnDrop>,
}

impl Drop for DrainSetup {
    fn drop(&mut self) {
        let _ = run(lab("kubectl")
            .args(["delete", "--ignore-not-found", "-f"])
            .arg(&self.rbac));
    }
}

fn drain_setup(dir: &Path) -> DrainSetup {
    // The component's RBAC for demo's default ServiceAccount.
    let rbac = std::fs::read_to_string(repo().join("deploy/drain-wait/rbac.yaml"))
        .unwrap()
        .replace("my-app", "demo");
    let rbac_path = dir.join("drain-wait-rbac.yaml");
    std::fs::write(&rbac_path, rbac).unwrap();
    for ns in ["demo", "ghostip-agent"] {
        let _ = run(lab("kubectl").args(["create", "namespace", ns]));
    }
    // The namespace's default ServiceAccount, which the controller-manager creates.
    let start = Instant::now();
    while run(lab("kubectl").args(["-n", "demo", "get", "serviceaccount", "default"])).0 != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no ServiceAccount demo/default within 30 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    kubectl(&["apply", "-f", rbac_path.to_str().unwrap()]);
    let token = kubectl(&[
        "create",
        "token",
        "default",
        "-n",
        "demo",
        "--duration",
        "1h",
    ]);
    let admin = std::fs::read_to_string("/var/lib/ghostip-lab/admin.kubeconfig").unwrap();
    let kc: String = admin
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("token:") {
                format!("    token: {}\n", token.trim())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let kubeconfig = dir.join("drain-wait.kubeconfig");
    std::fs::write(&kubeconfig, kc).unwrap();
    // One agent per node on the node's address: tokens reviewed by the API server.
    let mut agents = Vec::new();
    for (node, ip) in NODES {
        let child = lab("exec")
            .arg(node)
            .args([env!("CARGO_BIN_EXE_ghostip"), "--db"])
            .arg(dir.join(format!("agent-{node}.db")))
            .args([
                "agent",
                "--node-name",
                node,
                "--min-audit-period",
                "1s",
                "--listen",
            ])
            .arg(format!("{ip}:{AGENT_PORT}"))
            .env("GHOSTIP_JSON_LOGS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.join(format!("agent-{node}.log"))).unwrap())
            .spawn()
            .expect("spawn the agent");
        agents.push(KillOnDrop(Some(child)));
    }
    for (node, ip) in NODES {
        let start = Instant::now();
        loop {
            let (code, out, _) = run(lab("exec").args([
                node,
                "curl",
                "-s",
                "--max-time",
                "2",
                &format!("http://{ip}:{AGENT_PORT}/readyz"),
            ]));
            if code == 0 && out.contains("ok") {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the agent on {node} was not ready within 60 s: {out}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    DrainSetup {
        kubeconfig,
        rbac: rbac_path,
        _agents: agents,
    }
}

/// The test's scratch directory (client logs, agent logs, ledgers, the kubeconfig); kept for
/// reading after the run when `GHOSTIP_E2E_KEEP` is set.
fn scratch_dir() -> tempfile::TempDir {
    let mut dir = tempfile::Builder::new()
        .prefix("e2e-drain.")
        .tempdir()
        .unwrap();
    if std::env::var_os("GHOSTIP_E2E_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("scratch dir kept: {}", dir.path().display());
    }
    dir
}

/// The tests share one lab: run them one at a time even without `--test-threads=1`.
static LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lab_lock() -> std::sync::MutexGuard<'static, ()> {
    LAB.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How the web pods end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    /// No preStop: the listener closes at SIGTERM.
    None,
    /// `ghostip drain-wait` as the preStop hook.
    DrainWait,
    /// A guessed `sleep 30`.
    Sleep30,
    /// drain-wait with a 25 s grace period (a 15 s bound).
    DrainWaitShort,
}

/// demo/web with the given preStop hook (3 replicas, headless Service, port 8080), applied
/// over what `coredns-cache --setup-only` deployed; waits for the rollout that applying it
/// starts.
fn deploy_web(hook: Hook, setup: &DrainSetup) {
    let ghostip = env!("CARGO_BIN_EXE_ghostip");
    let kubeconfig = setup.kubeconfig.display();
    let agents: String = NODES
        .iter()
        .map(|(node, ip)| format!(r#", "--agent", "{node}={ip}:{AGENT_PORT}""#))
        .collect();
    let drain_wait = format!(
        r#""lifecycle": {{"preStop": {{"exec": {{"command": ["{ghostip}", "--kubeconfig", "{kubeconfig}", "drain-wait", "--interval", "500ms"{agents}]}}}}}},"#
    );
    let (lifecycle, grace) = match hook {
        Hook::None => (String::new(), 30),
        Hook::DrainWait => (drain_wait, 60),
        Hook::DrainWaitShort => (drain_wait, 25),
        Hook::Sleep30 => (
            r#""lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 30"]}}},"#
                .to_string(),
            40,
        ),
    };
    let manifest = format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {{"name": "web", "namespace": "demo", "labels": {{"app": "web"}}}},
  "spec": {{"replicas": 3, "selector": {{"matchLabels": {{"app": "web"}}}},
    "template": {{"metadata": {{"labels": {{"app": "web"}}}},
      "spec": {{"terminationGracePeriodSeconds": {grace},
        "containers": [{{"name": "web", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
          "args": ["netexec", "--http-port=8080"],
          "ports": [{{"name": "http", "containerPort": 8080, "protocol": "TCP"}}],
          {lifecycle}
          "env": [
            {{"name": "POD_IP", "valueFrom": {{"fieldRef": {{"fieldPath": "status.podIP"}}}}}},
            {{"name": "POD_NAME", "valueFrom": {{"fieldRef": {{"fieldPath": "metadata.name"}}}}}},
            {{"name": "POD_NAMESPACE", "valueFrom": {{"fieldRef": {{"fieldPath": "metadata.namespace"}}}}}}
          ]}}]}}}}}}}}"#
    );
    kubectl_stdin(&["apply", "-f", "-"], &manifest);
    web_rollout_status("300s");
    // The pods the change replaced finish terminating before the measured rollout starts.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        let out = web_pods_jsonpath("{range .items[*]}{.metadata.deletionTimestamp}{\"|\"}{end}");
        if out.split('|').all(str::is_empty) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

const CLIENT_POD: &str = r#"{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "drainclient", "namespace": "demo", "labels": {"app": "drainclient"}},
  "spec": {"containers": [{"name": "client", "image": "cacheclient",
    "ports": [{"containerPort": 9000}]}]}
}"#;

/// A client loop in a pod network namespace on node-1: every 100 ms it asks DNS (through the
/// pod's resolver, the kube-dns ClusterIP and CoreDNS) for web.demo and connects to the next
/// answer, bounded by `seconds` and 2000 connects.
fn start_client(log: &Path, seconds: u32) -> Child {
    lab("exec")
        .args(["demo/drainclient"])
        .arg(cacheclient())
        .args([
            "-name",
            "web.demo.svc.cluster.local",
            "-port",
            "8080",
            "-cache-ttl",
            "0s",
            "-interval",
            "100ms",
            "-dial-timeout",
            "500ms",
            "-duration",
            &format!("{seconds}s"),
            "-max-dials",
            "2000",
        ])
        .stdin(Stdio::null())
        .stdout(File::create(log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

pub(crate) fn unix(t: &Value) -> f64 {
    let ts: jiff::Timestamp = t.as_str().unwrap().parse().unwrap();
    ts.as_millisecond() as f64 / 1000.0
}

/// The client's connects: (unix time, address, ok).
pub(crate) fn client_dials(log: &Path) -> Vec<(f64, String, bool)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let ok = l.contains("msg=\"request ok\"");
            let failed = l.contains("msg=\"request failed\"");
            if !ok && !failed {
                return None;
            }
            let t = l.split("time=").nth(1)?.split_whitespace().next()?;
            let at: jiff::Timestamp = t.parse().ok()?;
            let addr = l.split("addr=").nth(1)?.split_whitespace().next()?;
            let ip = addr.rsplit_once(':')?.0.to_string();
            Some((at.as_millisecond() as f64 / 1000.0, ip, ok))
        })
        .collect()
}

/// How many of the client's last resolutions in a row answered exactly `ips`.
pub(crate) fn answers_in_a_row(log: &Path, ips: &BTreeSet<String>) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("msg=resolved"))
        .rev()
        .take_while(|l| {
            let set = l
                .split("ips=")
                .nth(1)
                .map(|s| s.trim_start_matches('"').trim_start_matches('['))
                .and_then(|s| s.split(']').next())
                .unwrap_or_default();
            let got: BTreeSet<String> = set.split_whitespace().map(str::to_string).collect();
            &got == ips
        })
        .count()
}

/// The DrainWait Events' JSON lines, by IP.
pub(crate) fn drain_lines() -> BTreeMap<String, Value> {
    let out = kubectl(&[
        "-n",
        "demo",
        "get",
        "events",
        "--field-selector",
        "reason=DrainWait",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let line: Value =
                serde_json::from_str(e["metadata"]["annotations"]["ghostip.io/drain"].as_str()?)
                    .ok()?;
            Some((line["ip"].as_str()?.to_string(), line))
        })
        .collect()
}

struct Outcome {
    /// Failed connects to IPs the rollout removed.
    failed_to_removed: usize,
    /// Successful connects to removed IPs after they left the endpoints.
    served_after_removal: usize,
    report: Value,
    drains: BTreeMap<String, Value>,
    /// Seconds from the restart until the last old pod was gone.
    rollout_s: f64,
}

/// One rollout of demo/web under `corefile` with `hook`, a client loop running through it.
fn rollout_with(corefile: &str, hook: Hook, dir: &Path, setup: &DrainSetup) -> Outcome {
    let (code, out, err) =
        run(lab("scenarios/coredns-cache").args(["--corefile", corefile, "--setup-only"]));
    assert_eq!(code, 0, "scenario setup failed:\n{out}\n{err}");
    deploy_web(hook, setup);
    kubectl(&[
        "-n",
        "demo",
        "delete",
        "events",
        "--field-selector",
        "reason=DrainWait",
    ]);
    replace_client_pod(dir, "drainclient", CLIENT_POD);
    let old = web_pods();
    assert_eq!(old.len(), 3, "three web pods before the rollout: {old:?}");
    let log = dir.join(format!("client-{corefile}-{hook:?}.log"));
    let mut client = start_client(&log, 150);
    // The DNS caches first hand out the pods that are there now (an answer cached during the
    // setup's own rollout lives for up to 30 s): the rollout starts from a known state.
    let current: BTreeSet<String> = old.keys().cloned().collect();
    let start = Instant::now();
    while answers_in_a_row(&log, &current) < 10 {
        assert!(
            start.elapsed() < Duration::from_secs(45),
            "the client was not handed {current:?} within 45 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let restarted = Instant::now();
    let db = dir.join(format!("ledger-{corefile}-{hook:?}.db"));
    let (report, rollout_s) = std::thread::scope(|s| {
        let measured = s.spawn(|| rollout_web(&db, None).1);
        // Until the last old pod is gone, its preStop hook done (drain-wait is bounded by
        // the grace period): how long the rollout took for the Deployment.
        let mut gone = None;
        while restarted.elapsed() < Duration::from_secs(100) {
            let now = web_pods();
            if old.keys().all(|ip| !now.contains_key(ip)) && drain_done(&old, hook) {
                gone = Some(restarted.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let report = measured.join().unwrap();
        let gone = gone.unwrap_or_else(|| panic!("old pods still there after 100 s: {old:?}"));
        (report, gone.as_secs_f64())
    });
    // The client runs on until every cache hands out only the new pods.
    let new: BTreeSet<String> = web_pods().into_keys().collect();
    let waited = Instant::now();
    while client.try_wait().unwrap().is_none()
        && answers_in_a_row(&log, &new) < 10
        && waited.elapsed() < Duration::from_secs(45)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    stop(&mut client);
    let drains = drain_lines();
    // When each old IP left the endpoints: the rollout's own t0 of its stale rows.
    let mut removed_at: BTreeMap<String, f64> = BTreeMap::new();
    for r in report["stale"].as_array().unwrap() {
        let ip = r["target"].as_str().unwrap().to_string();
        if let Some(t0) = r["t0"].as_str() {
            let t = unix(&Value::String(t0.into()));
            removed_at
                .entry(ip)
                .and_modify(|x| *x = x.min(t))
                .or_insert(t);
        }
    }
    let dials = client_dials(&log);
    let old_ips: BTreeSet<&String> = old.keys().collect();
    let failed_to_removed = dials
        .iter()
        .filter(|(_, ip, ok)| !ok && old_ips.contains(ip))
        .count();
    let served_after_removal = dials
        .iter()
        .filter(|(t, ip, ok)| *ok && removed_at.get(ip).is_some_and(|r| t > r))
        .count();
    eprintln!(
        "{corefile} {hook:?}: {} connects, {failed_to_removed} failed to removed IPs, {served_after_removal} served by removed IPs after they left, rollout {rollout_s:.1} s",
        dials.len()
    );
    Outcome {
        failed_to_removed,
        served_after_removal,
        report,
        drains,
        rollout_s,
    }
}

/// With drain-wait, every old pod recorded its drain.
fn drain_done(old: &BTreeMap<String, String>, hook: Hook) -> bool {
    hook != Hook::DrainWait || {
        let d = drain_lines();
        old.keys().all(|ip| d.contains_key(ip))
    }
}

/// When every layer let go of `ip` by the rollout's own measurement: the last DNS path's
/// convergence, and for a path that does not cache, t0 + the TTL it hands to clients.
pub(crate) fn measured_let_go(report: &Value, ip: &str) -> Option<f64> {
    let paths: BTreeMap<&str, &Value> = report["paths"]
        .as_array()?
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let mut latest: Option<f64> = None;
    for r in report["stale"].as_array()? {
        if r["target"].as_str()? != ip {
            continue;
        }
        let path = paths.get(r["path"].as_str()?)?;
        let t0 = unix(&r["t0"]);
        let converged = r["converged_by"]
            .as_str()
            .map_or(t0, |_| unix(&r["converged_by"]));
        let caches = path["expected_lag_s"].as_f64().unwrap_or(0.0) > 0.0;
        let fresh = if caches {
            t0
        } else {
            t0 + path["client_ttl_s"].as_f64().unwrap_or(0.0)
        };
        let at = converged.max(fresh);
        latest = Some(latest.map_or(at, |l: f64| l.max(at)));
    }
    latest
}

#[test]
#[ignore = "needs the lab cluster (lab/up), lab/build cacheclient and root"]
fn drain_wait_lets_no_client_connect_to_a_gone_pod() {
    require_lab();
    let _lab = lab_lock();
    let dir = scratch_dir();
    let setup = drain_setup(dir.path());

    // Without drain-wait: the classic Corefile keeps the old IPs in answers for up to 30 s and
    // the client is sent to pods that no longer listen.
    let bare = rollout_with("classic", Hook::None, dir.path(), &setup);
    assert!(
        bare.failed_to_removed > 0,
        "without a preStop hook the client must fail on removed IPs"
    );

    // With drain-wait: not one failed connect to a removed IP, although the client was still
    // sent to them after they left the endpoints.
    let drained = rollout_with("classic", Hook::DrainWait, dir.path(), &setup);
    assert_eq!(
        drained.failed_to_removed, 0,
        "drain-wait let a pod stop while a layer still sent clients to it"
    );
    assert!(
        drained.served_after_removal > 0,
        "the client was never sent to a removed IP: the test proves nothing"
    );
    assert_eq!(
        drained.drains.len(),
        3,
        "one drain per old pod: {:?}",
        drained.drains.keys()
    );
    for (ip, line) in &drained.drains {
        eprintln!("drain {ip}: {line}");
        assert_eq!(line["release"], "let-go", "{line}");
        let finished = unix(&line["finished"]);
        let let_go = measured_let_go(&drained.report, ip)
            .unwrap_or_else(|| panic!("the rollout measured no window for {ip}"));
        // Each wait ends within one probe interval + 1 s of the moment the last layer let
        // go by the rollout's own measurement (its probes run every 250 ms from node-1).
        assert!(
            (finished - let_go).abs() <= INTERVAL_S + 1.0,
            "{ip}: drain ended at {finished:.2}, the layers let go at {let_go:.2}"
        );
    }

    // The guessed sleep 30, for the comparison: as safe here, slower by design.
    let slept = rollout_with("classic", Hook::Sleep30, dir.path(), &setup);
    assert_eq!(slept.failed_to_removed, 0);
    // The benchmark's line (docs/BENCHMARKS.md): one lab run, the same Corefile.
    let convergence = drained
        .drains
        .keys()
        .filter_map(|ip| {
            let t0 = unix(&drained.drains[ip]["t0"]);
            Some(measured_let_go(&drained.report, ip)? - t0)
        })
        .fold(0.0_f64, f64::max);
    let per_pod = |field: &str| {
        drained
            .drains
            .values()
            .filter_map(|l| l[field].as_f64())
            .sum::<f64>()
            / drained.drains.len().max(1) as f64
    };
    eprintln!(
        "BENCH classic: rollout without a hook {:.1} s ({} failed connects), drain-wait {:.1} s ({} failed), sleep 30 {:.1} s ({} failed); measured convergence {convergence:.1} s; per drained pod {:.0} DNS queries, {:.0} agent requests, {:.1} s waited",
        bare.rollout_s,
        bare.failed_to_removed,
        drained.rollout_s,
        drained.failed_to_removed,
        slept.rollout_s,
        slept.failed_to_removed,
        per_pod("dns_queries"),
        per_pod("agent_requests"),
        per_pod("waited_s"),
    );
}

#[test]
#[ignore = "needs the lab cluster (lab/up), lab/build cacheclient and root"]
fn drain_wait_follows_what_the_corefile_hands_out() {
    require_lab();
    let _lab = lab_lock();
    let dir = scratch_dir();
    let setup = drain_setup(dir.path());

    // cache 5: the answers with the old IP are gone within 5 s, and so is the wait.
    let short = rollout_with("cache5", Hook::DrainWait, dir.path(), &setup);
    assert_eq!(short.failed_to_removed, 0);
    for (ip, line) in &short.drains {
        let waited = unix(&line["finished"]) - unix(&line["t0"]);
        eprintln!("cache5 drain {ip}: {waited:.2} s after t0");
        assert!(waited <= 7.0, "{ip}: waited {waited:.2} s with cache 5");
    }

    // The newest kubeadm Corefile caches nothing of the cluster domain: the paths drop the IP
    // at once, but clients keep the 30 s TTL they were handed; the wait says so.
    let fresh = rollout_with("kubeadm-new", Hook::DrainWait, dir.path(), &setup);
    assert_eq!(fresh.failed_to_removed, 0);
    for (ip, line) in &fresh.drains {
        let waited = unix(&line["finished"]) - unix(&line["t0"]);
        eprintln!("kubeadm-new drain {ip}: {waited:.2} s after t0");
        assert!(
            (29.0..=31.5).contains(&waited),
            "{ip}: waited {waited:.2} s, the TTL handed to clients is 30 s"
        );
        let layers = line["layers"].as_array().unwrap();
        assert!(layers.iter().any(|l| l["layer"] == "dns"), "{line}");
    }
}

/// Restarts node-2's kube-proxy and removes the ClusterIP Service, even when the test failed.
struct HealNode2;

impl Drop for HealNode2 {
    fn drop(&mut self) {
        let _ = run(lab("component").args(["start", "kube-proxy-node-2"]));
        let _ = run(lab("kubectl").args([
            "-n",
            "demo",
            "delete",
            "service",
            "web-cip",
            "--ignore-not-found",
        ]));
    }
}

#[test]
#[ignore = "needs the lab cluster (lab/up), lab/build cacheclient and root"]
fn drain_wait_runs_to_its_bound_and_names_a_node_that_never_lets_go() {
    require_lab();
    let _lab = lab_lock();
    let dir = scratch_dir();
    let setup = drain_setup(dir.path());
    let (code, out, err) =
        run(lab("scenarios/coredns-cache").args(["--corefile", "cache5", "--setup-only"]));
    assert_eq!(code, 0, "scenario setup failed:\n{out}\n{err}");
    deploy_web(Hook::DrainWaitShort, &setup);
    kubectl(&[
        "-n",
        "demo",
        "delete",
        "events",
        "--field-selector",
        "reason=DrainWait",
    ]);
    // A ClusterIP Service in front of the pods: the node datapaths route it to them.
    kubectl_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Service",
  "metadata": {"name": "web-cip", "namespace": "demo"},
  "spec": {"selector": {"app": "web"},
    "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#,
    );
    let _heal = HealNode2;
    std::thread::sleep(Duration::from_secs(5)); // both kube-proxies write its rules
    // node-2's kube-proxy stops (its rules stay): node-2 keeps routing to the old pod.
    let (code, out, err) = run(lab("component").args(["stop", "kube-proxy-node-2"]));
    assert_eq!(code, 0, "stopping kube-proxy on node-2:\n{out}\n{err}");
    let pods = web_pods();
    let (ip, pod) = pods.iter().next().expect("a web pod");
    let started = Instant::now();
    kubectl(&["-n", "demo", "delete", "pod", pod, "--wait=false"]);
    let line = loop {
        if let Some(l) = drain_lines().remove(ip) {
            break l;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no drain recorded for {ip} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("drain {ip}: {line}");
    assert_eq!(line["release"], "bound", "{line}");
    let (waited, bound) = (
        line["waited_s"].as_f64().unwrap(),
        line["max_wait_s"].as_f64().unwrap(),
    );
    assert!(
        (bound - 15.0).abs() < 0.5,
        "grace 25 s - margin 10 s: {line}"
    );
    assert!(
        waited >= bound - 0.5 && waited <= bound + 2.0,
        "waited {waited} s, bound {bound} s: {line}"
    );
    let layers = line["layers"].as_array().unwrap();
    let state_of = |node: &str| {
        layers
            .iter()
            .find(|l| l["layer"] == "datapath" && l["path"] == node)
            .map(|l| l["state"].as_str().unwrap().to_string())
    };
    assert_eq!(state_of("node-2").as_deref(), Some("holding"), "{line}");
    assert_eq!(state_of("node-1").as_deref(), Some("let-go"), "{line}");
    let why = layers
        .iter()
        .find(|l| l["path"] == "node-2")
        .and_then(|l| l["why"].as_str())
        .unwrap_or_default();
    assert!(why.contains("demo/web-cip"), "{why}");
}
