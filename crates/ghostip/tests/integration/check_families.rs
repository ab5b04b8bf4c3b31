//! `ghostip check` on a dual-stack headless Service with a named port, against a real DNS
//! server: A answers are judged against the IPv4 endpoints, AAAA against the IPv6 ones, the
//! SRV name of the named port against the endpoints' `ip:port`, and each wrong answer is a
//! finding (exit 1).
//!
//! The binary runs as it does in a cluster: it lists the truth from an API server (here an
//! in-process fake over HTTP on loopback serving the Service and its EndpointSlices) and asks
//! its DNS path (`--dns-server`, an in-process hickory server over real UDP).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::dns_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use dns_support::{FakeDns, TestServer, Zone, ip};
use serde_json::{Value, json};

const NAME: &str = "web.prod.svc.cluster.local.";
const SRV_NAME: &str = "_http._tcp.web.prod.svc.cluster.local.";
const V4: [&str; 2] = ["10.244.1.5", "10.244.2.6"];
const V6: [&str; 2] = ["fd00::5", "fd00::6"];

/// The headless Service `prod/web` (port `http`, dual-stack).
fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": "prod", "name": "web", "resourceVersion": "1"},
        "spec": {
            "clusterIP": "None", "clusterIPs": ["None"], "type": "ClusterIP",
            "ipFamilies": ["IPv4", "IPv6"],
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
        }
    })
}

fn slice(name: &str, family: &str, ips: &[&str]) -> Value {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|a| {
            json!({
                "addresses": [a],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "node-1",
                "targetRef": {"kind": "Pod", "namespace": "prod",
                              "name": format!("web-{}", a.rsplit(['.', ':']).next().unwrap()),
                              "uid": format!("uid-{a}")}
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "prod", "name": name, "resourceVersion": "1",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": family,
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    })
}

/// What the fake API server lists: the Service and its two slices of `v4` and `v6`.
#[derive(Clone)]
struct Truth(Arc<Mutex<(Vec<&'static str>, Vec<&'static str>)>>);

impl Truth {
    fn set(&self, v4: &[&'static str], v6: &[&'static str]) {
        *self.0.lock().unwrap() = (v4.to_vec(), v6.to_vec());
    }

    fn answer(&self, uri: &Uri) -> axum::response::Response {
        let list = |kind: &str, items: Vec<Value>| {
            axum::Json(json!({"apiVersion": "v1", "kind": kind,
                              "metadata": {"resourceVersion": "1"}, "items": items}))
            .into_response()
        };
        let path = uri.path();
        if path.ends_with("/services") {
            list("ServiceList", vec![service()])
        } else if path.ends_with("/endpointslices") {
            let (v4, v6) = self.0.lock().unwrap().clone();
            list(
                "EndpointSliceList",
                vec![slice("web-v4", "IPv4", &v4), slice("web-v6", "IPv6", &v6)],
            )
        } else if path.ends_with("/pods") {
            list("PodList", Vec::new())
        } else {
            let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                "code": 404, "reason": "NotFound", "message": "not found"});
            (StatusCode::NOT_FOUND, axum::Json(status)).into_response()
        }
    }
}

/// Serves `truth` over HTTP on loopback; a kubeconfig naming it, in `dir`.
async fn api_server(truth: Truth, dir: &Path) -> PathBuf {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let truth = truth.clone();
        async move { truth.answer(&uri) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: 'http://{addr}'}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: u}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    kubeconfig
}

/// `ghostip -o json check -n prod` with `dns` as its only DNS path: (exit code, report).
async fn check(kubeconfig: &Path, dns: SocketAddr, extra: &[&str]) -> (i32, Value) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ghostip"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-o", "json", "check", "-n", "prod", "--no-agents"])
        .args(["--no-pod-paths", "--no-cluster-ip", "--dns-server"])
        .arg(dns.to_string())
        .args(["--query-timeout", "2s", "--request-timeout", "10s"])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("check ends within 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), report)
}

/// The rows of `prod/web`: (query, state, stale targets).
fn rows(report: &Value) -> Vec<(String, String, Vec<String>)> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["service"] == "prod/web")
        .map(|r| {
            let stale = r["stale"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect();
            (
                r["query"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
                stale,
            )
        })
        .collect()
}

fn row(query: &str, state: &str, stale: &[&str]) -> (String, String, Vec<String>) {
    (
        query.to_string(),
        state.to_string(),
        stale.iter().map(ToString::to_string).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_judges_aaaa_and_srv_answers_per_family_and_named_port() {
    let dir = tempfile::tempdir().unwrap();
    let truth = Truth(Arc::default());
    truth.set(&V4, &V6);
    let kubeconfig = api_server(truth.clone(), dir.path()).await;
    let zone = Zone::default();
    // The DNS Service's own name is asked too; with no kube-dns Service listed any answer
    // will do.
    zone.set_addrs(
        "kube-dns.kube-system.svc.cluster.local.",
        &["10.96.0.10"],
        30,
    );
    let all = [V4[0], V4[1], V6[0], V6[1]];
    zone.set_service(NAME, SRV_NAME, 8080, &all, 30);
    let server = TestServer::start(ip("127.0.0.1"), FakeDns::new(zone.clone())).await;

    // Every answer is right: each question has its row, none a finding.
    let (code, report) = check(&kubeconfig, server.addr, &[]).await;
    assert_eq!(
        rows(&report),
        [
            row("A", "ok", &[]),
            row("AAAA", "ok", &[]),
            row("SRV _http._tcp", "ok", &[])
        ],
        "{report}"
    );
    let srv = &report["results"][2];
    assert_eq!(
        srv["expected"],
        json!([
            "10.244.1.5:8080",
            "10.244.2.6:8080",
            "[fd00::5]:8080",
            "[fd00::6]:8080"
        ]),
        "{srv}"
    );
    assert_eq!(code, 0, "{report}");

    // fd00::5 left the endpoints; the server still hands it out in AAAA answers only.
    truth.set(&V4, &["fd00::6"]);
    zone.set_service(NAME, SRV_NAME, 8080, &[V4[0], V4[1], "fd00::6"], 30);
    zone.set_addrs(NAME, &all, 30);
    let (code, report) = check(&kubeconfig, server.addr, &[]).await;
    assert_eq!(
        rows(&report),
        [
            row("A", "ok", &[]),
            row("AAAA", "stale", &["fd00::5"]),
            row("SRV _http._tcp", "ok", &[])
        ],
        "{report}"
    );
    assert_eq!(code, 1, "a stale AAAA answer is a finding: {report}");

    // 10.244.1.5 left; the A answer lets go of it, the SRV answer still names it.
    truth.set(&[V4[1]], &V6);
    zone.set_service(NAME, SRV_NAME, 8080, &all, 30);
    zone.set_addrs(NAME, &[V4[1], V6[0], V6[1]], 30);
    let (code, report) = check(&kubeconfig, server.addr, &[]).await;
    assert_eq!(
        rows(&report),
        [
            row("A", "ok", &[]),
            row("AAAA", "ok", &[]),
            row("SRV _http._tcp", "stale", &["10.244.1.5:8080"])
        ],
        "{report}"
    );
    assert_eq!(code, 1, "a stale SRV target is a finding: {report}");

    // `--no-srv`: the SRV name is not asked, so nothing is judged on it.
    let (code, report) = check(&kubeconfig, server.addr, &["--no-srv"]).await;
    assert_eq!(
        rows(&report),
        [row("A", "ok", &[]), row("AAAA", "ok", &[])],
        "{report}"
    );
    assert_eq!(code, 0, "{report}");
    server.stop().await;
}
