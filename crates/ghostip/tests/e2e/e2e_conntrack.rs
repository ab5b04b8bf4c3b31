//! End-to-end test of the agent's conntrack layer in the lab: a client pod on node-1 keeps a
//! pooled (kept-alive, idle) connection to a backend pod on node-2; the backend pod is
//! deleted without its FIN or RST reaching the client (dropped in the pod's own namespace:
//! the shape of a pod whose node vanished), so the client's connection stays ESTABLISHED in
//! node-1's conntrack after the endpoint left its Service. The agent on node-1 must report
//! the stale flow while it exists (JSON line, `/status` with client pod, dead IP, former
//! owner and how long it outlived the endpoint, `ghostip_stale_flows`, an engine tracking on
//! `conntrack/node-1`) and clear it once the client closes the connection; node-2's agent,
//! which the flow only crosses, reports nothing; node-1's ledger keeps the finding. A second
//! test starts an agent without CAP_NET_ADMIN: conntrack is said unreadable once, naming the
//! capability, and the other layers keep running.
//!
//! The client connection is made by this test from a thread moved into the client pod's
//! network namespace (`setns`), so it closes when the test says so. Needs a running lab and
//! root; `#[ignore]`d. Run under the lab lock with
//! `GHOSTIP_LAB=1 cargo test -p ghostip --test e2e -- --ignored --test-threads=1 e2e_conntrack::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lab_support;
use crate::netns_support;
use lab_support::agent::{Agent, AgentOptions};
use lab_support::{lab, require_lab, run};

use ghostip::ledger::Ledger;
use serde_json::Value;

const NS: &str = "ctdemo";

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn kubectl(args: &[&str]) -> String {
    let (code, out, err) = run(lab("kubectl").args(args));
    assert_eq!(code, 0, "kubectl {args:?}: {err}");
    out
}

/// Deletes the test's namespace even when an assertion failed.
struct Namespace;

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run(lab("kubectl").args(["delete", "namespace", NS, "--wait=false"]));
    }
}

/// The conntrack part of an agent's `/status`.
fn conntrack(agent: &Agent) -> Value {
    agent.status()["layers"]["conntrack"].clone()
}

const MANIFESTS: &str = "\
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: ctdemo}
spec:
  clusterIP: None
  selector: {app: ct-backend}
  ports: [{name: http, port: 8080, targetPort: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Pod
metadata:
  name: ct-backend
  namespace: ctdemo
  labels: {app: ct-backend}
  annotations: {ghostip.lab/serve-args: \"--keepalive\"}
spec:
  nodeName: node-2
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: registry.example/shop/backend:1.0
    ports: [{name: http, containerPort: 8080, protocol: TCP}]
    readinessProbe: {tcpSocket: {port: 8080}}
---
apiVersion: v1
kind: Pod
metadata: {name: ct-client, namespace: ctdemo}
spec:
  nodeName: node-1
  containers:
  - name: client
    image: registry.example/shop/order-client:1.0
    ports: [{containerPort: 9000}]
";

/// Applies the manifests and waits until both pods are Ready; returns the backend's IP and
/// the client pod's network namespace.
fn deploy(dir: &Path) -> (IpAddr, PathBuf) {
    let ns = dir.join("ns.yaml");
    std::fs::write(
        &ns,
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"),
    )
    .unwrap();
    kubectl(&["apply", "-f", ns.to_str().unwrap()]);
    let start = Instant::now();
    while run(lab("kubectl").args(["-n", NS, "get", "serviceaccount", "default"])).0 != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no default ServiceAccount"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let file = dir.join("ctdemo.yaml");
    std::fs::write(&file, MANIFESTS).unwrap();
    kubectl(&["apply", "-f", file.to_str().unwrap()]);
    for pod in ["ct-backend", "ct-client"] {
        kubectl(&[
            "-n",
            NS,
            "wait",
            "--for=condition=Ready",
            &format!("pod/{pod}"),
            "--timeout=90s",
        ]);
    }
    let ip = kubectl(&[
        "-n",
        NS,
        "get",
        "pod",
        "ct-backend",
        "-o",
        "jsonpath={.status.podIP}",
    ]);
    let env =
        std::fs::read_to_string(format!("/var/lib/ghostip-lab/pods/{NS}_ct-client.env")).unwrap();
    let netns = env
        .lines()
        .find_map(|l| l.strip_prefix("POD_NETNS="))
        .expect("POD_NETNS in the client pod's state file");
    (
        ip.trim().parse().unwrap(),
        Path::new("/run/netns").join(netns),
    )
}

/// A kept-alive HTTP/1.1 connection from the client pod to the backend, answered once and
/// then left idle, as a client's connection pool keeps it.
fn pooled_connection(client_netns: &Path, backend: IpAddr) -> TcpStream {
    netns_support::enter(client_netns, || {
        let mut c =
            TcpStream::connect_timeout(&SocketAddr::new(backend, 8080), Duration::from_secs(5))
                .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: backend\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).unwrap();
        assert!(
            String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        c
    })
}

fn is_conntrack_tracking(v: &Value, change: &str, target: &str) -> bool {
    v["event"] == "tracking"
        && v["change"] == change
        && v["layer"] == "conntrack"
        && v["path"] == "conntrack/node-1"
        && v["target"] == target
        && v["kind"] == "stale"
}

#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn agent_reports_a_pooled_connection_to_a_deleted_pod_until_it_closes() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let _ns = Namespace;
    let (backend, client_netns) = deploy(dir.path());
    let target = format!("{backend}:8080");
    let on = |node, port| {
        let opts = AgentOptions {
            port,
            ..AgentOptions::default()
        };
        Agent::start_with(dir.path(), node, opts)
    };
    let mut n1 = on("node-1", 9764);
    let mut n2 = on("node-2", 9765);
    for a in [&n1, &n2] {
        a.wait_for("synced line", Duration::from_secs(60), |v| {
            v["event"] == "synced"
        });
        a.wait_for("conntrack read", Duration::from_secs(60), |v| {
            v["event"] == "conntrack-read"
        });
    }
    let conn = pooled_connection(&client_netns, backend);
    eprintln!(
        "pooled connection {} -> {target}",
        conn.local_addr().unwrap()
    );
    // The backend's FIN and RST never leave its namespace.
    for flag in ["FIN", "RST"] {
        let (code, _, err) = run(lab("exec").args([
            &format!("{NS}/ct-backend"),
            "iptables",
            "-A",
            "OUTPUT",
            "-p",
            "tcp",
            "--sport",
            "8080",
            "--tcp-flags",
            flag,
            flag,
            "-j",
            "DROP",
        ]));
        assert_eq!(code, 0, "iptables in the backend pod: {err}");
    }
    let deleted_ms = unix_ms();
    kubectl(&["-n", NS, "delete", "pod", "ct-backend", "--wait=false"]);

    // node-1: the stale flow, confirmed, with the client pod and the former owner.
    let opened = n1.wait_for("stale flow", Duration::from_secs(90), |v| {
        v["event"] == "stale-flow" && v["change"] == "opened" && v["target"] == target.as_str()
    });
    let seen_after = Duration::from_millis((unix_ms() - deleted_ms) as u64);
    eprintln!("node-1 reported the stale flow {seen_after:?} after the deletion: {opened}");
    assert_eq!(opened["service"], "ctdemo/backend", "{opened}");
    assert_eq!(opened["client_pod"], "ctdemo/ct-client", "{opened}");
    assert_eq!(opened["proto"], "TCP");
    assert_eq!(opened["former_owner"], "ctdemo/ct-backend", "{opened}");
    assert_eq!(opened["confirmed"], true);
    let ct = conntrack(&n1);
    let flows = ct["stale_flows"].as_array().unwrap();
    let f = flows
        .iter()
        .find(|f| f["target"] == target.as_str())
        .unwrap_or_else(|| panic!("node-1 /status conntrack: {ct}"));
    assert_eq!(f["client_ip"], conn.local_addr().unwrap().ip().to_string());
    assert!(f["left_at"].is_string(), "{f}");
    assert!(f["outlived_by_s"].as_f64().unwrap() > 0.0, "{f}");
    assert!(
        flows.iter().all(|f| f["client_pod"].is_string()),
        "only pods are clients (the agents' own probes come from the node): {ct}"
    );
    assert!(
        n1.metric("ghostip_stale_flows{layer=\"conntrack\",node=\"node-1\"}")
            .unwrap()
            >= 1.0
    );
    // `/v1/ips/{ip}` lists it beside the datapath's answer: the client sent it to the pod
    // directly, stale since the pod left the Service.
    let answer: Value = serde_json::from_str(&n1.http(&format!("/v1/ips/{backend}"))).unwrap();
    eprintln!("node-1 /v1/ips/{backend}: {answer}");
    let listed = serde_json::json!({
        "node": "node-1",
        "client": f["client_ip"],
        "client_pod": "ctdemo/ct-client",
        "original_dst": target,
        "since": f["left_at"],
    });
    assert!(
        answer["stale_flows"].as_array().unwrap().contains(&listed),
        "{answer}"
    );
    n1.wait_for("conntrack tracking", Duration::from_secs(10), |v| {
        is_conntrack_tracking(v, "opened", &target)
    });
    // node-2 only forwards the flow: not its pod, not its finding.
    let ct2 = conntrack(&n2);
    assert!(
        ct2["stale_flows"].as_array().unwrap().is_empty(),
        "node-2: {ct2}"
    );
    let answer: Value = serde_json::from_str(&n2.http(&format!("/v1/ips/{backend}"))).unwrap();
    assert_eq!(
        answer["stale_flows"],
        serde_json::json!([]),
        "node-2: {answer}"
    );

    // Stays reported while the connection is open.
    std::thread::sleep(Duration::from_secs(6));
    let ct = conntrack(&n1);
    assert!(
        ct["stale_flows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["target"] == target.as_str()),
        "{ct}"
    );

    // The client closes it: its FIN moves the entry out of ESTABLISHED; the finding clears.
    drop(conn);
    let closed_at = Instant::now();
    let cleared = n1.wait_for("cleared stale flow", Duration::from_secs(60), |v| {
        v["event"] == "stale-flow" && v["change"] == "cleared" && v["target"] == target.as_str()
    });
    eprintln!(
        "node-1 cleared the stale flow {:?} after the close: {cleared}",
        closed_at.elapsed()
    );
    let closed = n1.wait_for("conntrack tracking closed", Duration::from_secs(30), |v| {
        is_conntrack_tracking(v, "closed", &target)
    });
    eprintln!("tracking closed: {closed}");
    assert_eq!(closed["verdict"], "over expected lag", "{closed}");
    assert!(conntrack(&n1)["stale_flows"].as_array().unwrap().is_empty());
    assert_eq!(
        n1.metric("ghostip_stale_flows{layer=\"conntrack\",node=\"node-1\"}"),
        Some(0.0)
    );

    for a in [&mut n1, &mut n2] {
        assert_eq!(a.terminate().0, Some(0), "{}", a.node);
    }
    let ledger = Ledger::open_existing(&n1.db).unwrap();
    let findings = ledger.findings_for_ip(backend).unwrap();
    assert!(
        findings.iter().any(|f| f.path_id == "conntrack/node-1"
            && f.target.port == Some(8080)
            && f.verdict == "over expected lag"
            && f.former_pod
                .as_ref()
                .is_some_and(|p| p.name == "ct-backend")),
        "node-1 findings: {findings:#?}"
    );
}

/// Without CAP_NET_ADMIN and CAP_NET_RAW (dropped from the bounding set with setpriv) the
/// conntrack table is unreadable: said once, naming the capability, in the JSON output and
/// `/status`; the truth syncs and DNS probes keep answering.
#[test]
#[ignore = "needs the lab (lab/up, GHOSTIP_LAB=1, root)"]
fn agent_without_net_admin_says_conntrack_is_unreadable_once() {
    require_lab();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Agent::start_without_net_admin(dir.path(), "node-1", 9766, &[]);
    let err = a.wait_for("conntrack error", Duration::from_secs(60), |v| {
        v["event"] == "conntrack-error"
    });
    eprintln!("{err}");
    assert_eq!(err["capability"], "CAP_NET_ADMIN", "{err}");
    a.wait_for("healthy DNS", Duration::from_secs(60), |v| {
        v["event"] == "dns-health" && v["state"] == "healthy"
    });
    let ct = conntrack(&a);
    assert_eq!(ct["missing_capability"], "CAP_NET_ADMIN", "{ct}");
    assert!(ct["path"].is_null(), "{ct}");
    assert!(
        a.metric("ghostip_conntrack_read_errors_total{error=\"privilege\"}")
            .is_some_and(|n| n >= 1.0)
    );
    let errors = a
        .lines()
        .iter()
        .filter(|v| v["event"] == "conntrack-error")
        .count();
    assert_eq!(errors, 1, "said once");
    assert_eq!(a.terminate().0, Some(0));
}
