//! End-to-end test of `ghostip agent` in the lab: real kube-proxy (iptables or nftables
//! mode), real CoreDNS, the `stale-node-datapath` scenario.
//!
//! One agent per node, each in its node's network namespace (`lab/exec node-N`). The
//! scenario freezes kube-proxy on node-2 and deletes a CoreDNS pod; the test then asserts
//! on the agents' JSON lines, `/metrics`, `/status` and ledgers (never on log text):
//! node-2 reports the kube-dns ClusterIP's stale backend (the dead CoreDNS pod IP) within
//! 60 s of the deletion and DNS through the ClusterIP failing while the pod IPs answer;
//! node-1 converges within its expected lag and stays healthy; once kube-proxy on node-2
//! restarts, node-2's finding clears. Both agents exit 0 within 5 s of SIGTERM.
//!
//! Needs a running lab and root; `#[ignore]`d. `scripts/test` runs it with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_agent::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lab_support;
use lab_support::agent::Agent;
use lab_support::{lab, require_lab, run};

use ghostip::ledger::Ledger;
use serde_json::Value;

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Restarts kube-proxy on node-2 even when an assertion failed.
struct HealNode2;

impl Drop for HealNode2 {
    fn drop(&mut self) {
        let _ = run(lab("kube-proxy").args(["start", "node-2"]));
    }
}

fn is_tracking(v: &Value, change: &str, path_prefix: &str, target: &str, kind: &str) -> bool {
    v["event"] == "tracking"
        && v["change"] == change
        && v["layer"] == "datapath"
        && v["service"] == "kube-system/kube-dns"
        && v["path"]
            .as_str()
            .is_some_and(|p| p.starts_with(path_prefix))
        && v["target"] == target
        && v["kind"] == kind
}

fn open_datapath_stale(status: &Value) -> Vec<String> {
    status["open"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["layer"] == "datapath" && t["kind"] == "stale" && t["converged_by"].is_null())
        .map(|t| t["target"].as_str().unwrap().to_string())
        .collect()
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn agent_reports_the_stale_node_datapath_and_clears_after_kube_proxy_restarts() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let mut n1 = Agent::start(dir.path(), "node-1");
    let mut n2 = Agent::start(dir.path(), "node-2");
    for a in [&n1, &n2] {
        a.wait_for("synced line", Duration::from_secs(60), |v| {
            v["event"] == "synced"
        });
        let read = a.wait_for("first datapath read", Duration::from_secs(60), |v| {
            v["event"] == "read"
        });
        assert!(read["frontends"].as_u64().unwrap() > 0, "{read}");
        a.wait_for("healthy DNS", Duration::from_secs(60), |v| {
            v["event"] == "dns-health" && v["state"] == "healthy"
        });
    }
    let started = n2.lines()[0]["layers"]["datapath"]
        .as_str()
        .unwrap()
        .to_string();
    eprintln!("agents synced; datapath {started}");

    // The incident: node-2's kube-proxy frozen, one CoreDNS pod deleted.
    let _heal = HealNode2;
    let (code, out, err) =
        run(lab("scenarios/stale-node-datapath").args(["--keep-stale", "--queries", "10"]));
    let result: Value = out
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_else(|| panic!("no RESULT from the scenario ({code}):\n{out}\n{err}"));
    assert_eq!(
        result["reproduced"], true,
        "scenario did not reproduce: {result}"
    );
    let dead: IpAddr = result["dead_ip"].as_str().unwrap().parse().unwrap();
    let deleted_ms = result["delete_unix_ms"].as_u64().unwrap() as u128;
    let stale_target = format!("{dead}:53");
    let dp_prefix = format!("{started}/");

    // node-2: the stale backend, within 60 s of the deletion.
    let opened = n2.wait_for("stale datapath backend", Duration::from_secs(60), |v| {
        is_tracking(v, "opened", &dp_prefix, &stale_target, "stale")
    });
    let seen_after = Duration::from_millis((unix_ms() - deleted_ms) as u64);
    eprintln!(
        "node-2 reported {stale_target} stale; checked {seen_after:?} after the deletion: {opened}"
    );
    assert!(seen_after <= Duration::from_secs(60), "{seen_after:?}");
    assert_eq!(opened["path"], format!("{started}/node-2"));
    // A read of node-2's rules confirmed it (not only the truth change): `last_seen` is the
    // read that still held the dead backend, within 60 s of the deletion.
    let st2 = n2.status();
    assert!(
        open_datapath_stale(&st2).contains(&stale_target),
        "node-2 /status: {st2}"
    );
    let held = st2["open"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == stale_target.as_str() && t["kind"] == "stale")
        .unwrap();
    let last_seen: jiff::Timestamp = held["last_seen"].as_str().unwrap().parse().unwrap();
    let read_after_ms = last_seen.as_millisecond() - deleted_ms as i64;
    eprintln!("node-2's rules read holding {stale_target} {read_after_ms} ms after the deletion");
    assert!((0..=60_000).contains(&read_after_ms), "{read_after_ms} ms");
    // The per-IP answer drain-wait reads: node-2's datapath holds the dead IP for kube-dns,
    // seen by a read that started after the deletion.
    let held2 = n2.ip(dead);
    eprintln!("node-2 /v1/ips/{dead}: {held2}");
    assert_eq!(held2["node"], "node-2");
    assert_eq!(held2["synced"], true);
    assert_eq!(held2["datapath"], started.as_str());
    assert!(held2["error"].is_null(), "{held2}");
    assert!(
        held2["holding"]
            .as_array()
            .unwrap()
            .contains(&Value::from(format!(
                "kube-system/kube-dns -> {stale_target}"
            ))),
        "{held2}"
    );
    let read_at: jiff::Timestamp = held2["read_at"].as_str().unwrap().parse().unwrap();
    assert!(read_at.as_millisecond() >= deleted_ms as i64, "{held2}");
    let stale_gauge = n2
        .metric(&format!(
            "ghostip_stale_endpoints{{layer=\"datapath\",path_kind=\"{started}\",node=\"node-2\"}}"
        ))
        .unwrap();
    assert!(stale_gauge >= 1.0, "{stale_gauge}");

    // node-2: DNS through the ClusterIP fails while the CoreDNS pod IPs answer.
    let failing = n2.wait_for("ClusterIP DNS failure", Duration::from_secs(60), |v| {
        v["event"] == "dns-health" && v["state"] == "cluster-ip-failing"
    });
    eprintln!("node-2 DNS: {failing}");
    assert_eq!(
        n2.metric("ghostip_dns_cluster_ip_failing{node=\"node-2\"}"),
        Some(1.0)
    );
    assert!(
        n2.metric("ghostip_probe_errors_total{path_kind=\"dns-cluster-ip\"")
            .is_some_and(|n| n >= 1.0)
    );

    // node-1: converged within its expected lag, DNS healthy, nothing stale now.
    let closed1 = n1.wait_for("node-1 convergence", Duration::from_secs(30), |v| {
        is_tracking(v, "closed", &dp_prefix, &stale_target, "stale")
    });
    assert_eq!(closed1["verdict"], "within expected lag", "{closed1}");
    let st1 = n1.status();
    assert!(
        open_datapath_stale(&st1).is_empty(),
        "node-1 /status: {st1}"
    );
    assert_eq!(
        st1["layers"]["dns"]["health"]["state"], "healthy",
        "node-1 /status: {st1}"
    );
    assert!(
        st1["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("node-1: ")),
        "node-1 /status leads with its summary: {st1}"
    );
    let ip1 = n1.ip(dead);
    assert_eq!(ip1["holding"], serde_json::json!([]), "node-1: {ip1}");
    let read_at: jiff::Timestamp = ip1["read_at"].as_str().unwrap().parse().unwrap();
    assert!(
        read_at.as_millisecond() >= deleted_ms as i64,
        "node-1: {ip1}"
    );
    assert_eq!(
        n1.metric("ghostip_dns_cluster_ip_failing{node=\"node-1\"}"),
        Some(0.0)
    );
    assert!(
        !n1.lines()
            .iter()
            .any(|v| v["event"] == "dns-health" && v["state"] == "cluster-ip-failing"),
        "node-1 reported DNS failures"
    );

    // Heal: kube-proxy on node-2 restarts and syncs; the finding clears.
    let (code, out, err) = run(lab("kube-proxy").args(["start", "node-2"]));
    assert_eq!(code, 0, "kube-proxy start: {out}\n{err}");
    let healed_at = Instant::now();
    let closed2 = n2.wait_for("node-2 convergence", Duration::from_secs(60), |v| {
        is_tracking(v, "closed", &dp_prefix, &stale_target, "stale")
    });
    eprintln!(
        "node-2 converged {:?} after the restart: {closed2}",
        healed_at.elapsed()
    );
    assert_eq!(closed2["verdict"], "over expected lag", "{closed2}");
    assert!(open_datapath_stale(&n2.status()).is_empty());
    let ip2 = n2.ip(dead);
    assert_eq!(
        ip2["holding"],
        serde_json::json!([]),
        "node-2 healed: {ip2}"
    );
    let start = Instant::now();
    loop {
        let lines = n2.lines();
        let healthy_again = lines
            .iter()
            .skip_while(|v| !(v["event"] == "dns-health" && v["state"] == "cluster-ip-failing"))
            .any(|v| v["event"] == "dns-health" && v["state"] == "healthy");
        if healthy_again {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            n2.dump();
            panic!("node-2: DNS through the ClusterIP did not recover within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "node-2 DNS healthy again {:?} after the restart",
        healed_at.elapsed()
    );
    assert_eq!(
        n2.metric(&format!(
            "ghostip_stale_endpoints{{layer=\"datapath\",path_kind=\"{started}\",node=\"node-2\"}}"
        )),
        Some(0.0)
    );

    // SIGTERM: both exit 0 within 5 s.
    for a in [&mut n1, &mut n2] {
        let (code, took) = a.terminate();
        eprintln!("{} exited {code:?} in {took:?}", a.node);
        assert_eq!(code, Some(0), "{}", a.node);
        assert!(took <= Duration::from_secs(5), "{}: {took:?}", a.node);
    }

    // The ledgers: node-2 holds the over-lag stale finding for the dead backend; node-1's
    // finding for it is within the expected lag.
    let l2 = Ledger::open_existing(&n2.db).unwrap();
    let f2 = l2.findings_for_ip(dead).unwrap();
    assert!(
        f2.iter().any(|f| f.path_id == format!("{started}/node-2")
            && f.target.port == Some(53)
            && f.verdict == "over expected lag"
            && f.former_pod.is_some()),
        "node-2 findings: {f2:#?}"
    );
    let l1 = Ledger::open_existing(&n1.db).unwrap();
    let f1 = l1.findings_for_ip(dead).unwrap();
    assert!(
        f1.iter()
            .filter(|f| f.path_id.starts_with(&dp_prefix))
            .all(|f| f.verdict == "within expected lag"),
        "node-1 findings: {f1:#?}"
    );
}

/// Without CAP_NET_ADMIN and CAP_NET_RAW (dropped from the bounding set of the root agent
/// with setpriv) the datapath reader fails with an error naming the capability, and the
/// agent keeps watching the truth and probing DNS.
#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn agent_without_net_admin_names_the_capability_and_keeps_probing_dns() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let mut a =
        Agent::start_without_net_admin(dir.path(), "node-1", 9755, &["--datapath", "iptables"]);
    let err = a.wait_for("reader error", Duration::from_secs(60), |v| {
        v["event"] == "reader-error"
    });
    eprintln!("{err}");
    assert_eq!(err["capability"], "CAP_NET_ADMIN", "{err}");
    assert!(err["error"].as_str().unwrap().contains("iptables-save"));
    a.wait_for("synced line", Duration::from_secs(60), |v| {
        v["event"] == "synced"
    });
    a.wait_for("healthy DNS", Duration::from_secs(60), |v| {
        v["event"] == "dns-health" && v["state"] == "healthy"
    });
    let st = a.status();
    assert_eq!(
        st["layers"]["datapath"]["missing_capability"], "CAP_NET_ADMIN",
        "{st}"
    );
    assert_eq!(st["truth_synced"], true, "{st}");
    assert!(
        a.metric("ghostip_datapath_read_errors_total{datapath=\"iptables\",error=\"privilege\"}")
            .is_some_and(|n| n >= 1.0)
    );
    assert!(
        a.metric("ghostip_probe_queries_total{path_kind=\"dns-pod\"}")
            .is_some_and(|n| n >= 1.0)
    );
    let (code, took) = a.terminate();
    assert_eq!(code, Some(0));
    assert!(took <= Duration::from_secs(5), "{took:?}");
}
