//! Finds the node agents (the pods of the `ghostip agent` DaemonSet) and reads what each one judges now from its `/status`.
//!
//! An agent listens on its node's address (`hostIP:9754`); off loopback it asks for a bearer
//! token, so requests present the caller's own Kubernetes credentials
//! ([`crate::kube::Bearer`]). Every request is bounded by a timeout and its answer by a size
//! limit; an agent that does not answer is reported with why, never waited for.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ghostip_core::Time;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde::Deserialize;

use crate::kube::Bearer;

/// Largest `/status` answer read from an agent.
const MAX_BODY: usize = 4 << 20;

/// Where the agents run: the DaemonSet's namespace, its pods' label selector and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSelector {
    /// Namespace of the agent pods.
    pub namespace: String,
    /// Label selector of the agent pods.
    pub selector: String,
    /// Port of their HTTP endpoint on the node's address.
    pub port: u16,
}

impl Default for AgentSelector {
    /// The namespace, label and port of `deploy/agent.yaml` and the Helm chart.
    fn default() -> Self {
        Self {
            namespace: "ghostip-agent".into(),
            selector: "app.kubernetes.io/name=ghostip-agent".into(),
            port: 9754,
        }
    }
}

/// One node's agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agent {
    /// Node name.
    pub node: String,
    /// Where its endpoint listens.
    pub addr: SocketAddr,
}

/// Why the agents could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// The list did not answer in time.
    #[error("listing the agent pods ({selector}) in {namespace}: no answer within {ms} ms")]
    Timeout {
        /// Namespace.
        namespace: String,
        /// Selector.
        selector: String,
        /// The timeout.
        ms: u128,
    },
    /// The API refused or failed the list.
    #[error("listing the agent pods ({selector}) in {namespace}")]
    List {
        /// Namespace.
        namespace: String,
        /// Selector.
        selector: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

/// The running agents (one per node, sorted by node), from their pods.
///
/// # Errors
/// [`FindError`] when the pods cannot be listed.
pub async fn find(
    client: &kube::Client,
    sel: &AgentSelector,
    timeout: Duration,
) -> Result<Vec<Agent>, FindError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &sel.namespace);
    let lp = ListParams::default().labels(&sel.selector);
    let pods = tokio::time::timeout(timeout, api.list(&lp))
        .await
        .map_err(|_| FindError::Timeout {
            namespace: sel.namespace.clone(),
            selector: sel.selector.clone(),
            ms: timeout.as_millis(),
        })?
        .map_err(|source| FindError::List {
            namespace: sel.namespace.clone(),
            selector: sel.selector.clone(),
            source,
        })?;
    Ok(running(&pods.items, sel.port))
}

/// The agents of the pods that run, at their host IP.
fn running(pods: &[Pod], port: u16) -> Vec<Agent> {
    let mut agents: Vec<Agent> = pods
        .iter()
        .filter_map(|p| {
            let status = p.status.as_ref()?;
            if status.phase.as_deref() != Some("Running") || p.metadata.deletion_timestamp.is_some()
            {
                return None;
            }
            let ip: IpAddr = status.host_ip.as_deref()?.parse().ok()?;
            let node = p.spec.as_ref()?.node_name.clone()?;
            Some(Agent {
                node,
                addr: SocketAddr::new(ip, port),
            })
        })
        .collect();
    agents.sort_by(|a, b| a.node.cmp(&b.node));
    agents.dedup_by(|a, b| a.node == b.node);
    agents
}

/// An open tracking of the agent (a stale or missing backend or answer of one of its paths).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AgentTracking {
    /// Path id (`iptables/node-2`, `dns-cluster-ip/10.96.0.10:53@node-2`).
    pub path: String,
    /// Layer (`datapath`, `dns`).
    pub layer: String,
    /// Service (`namespace/name`).
    pub service: String,
    /// The backend or answer (`10.244.1.5:53`).
    pub target: String,
    /// `stale` or `missing`.
    pub kind: String,
    /// The engine's verdict label (`pending`, `over expected lag`, `stuck`, …).
    pub verdict: String,
    /// When the truth changed.
    pub since: Option<Time>,
    /// The last read that still had it wrong.
    pub last_seen: Option<Time>,
    /// Set once the path got it right (the tracking closes a few seconds later).
    pub converged_by: Option<Time>,
    /// The pod that owned the IP before it left.
    pub former_pod: Option<String>,
    /// The path's expected lag (s).
    pub expected_lag_s: Option<f64>,
}

impl AgentTracking {
    /// Whether the agent judges it a finding now: over its expected lag or stuck, and not
    /// converged.
    pub fn is_finding(&self) -> bool {
        self.converged_by.is_none()
            && matches!(self.verdict.as_str(), "over expected lag" | "stuck")
    }
}

/// The DNS health judgement of the agent's node.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AgentDnsHealth {
    /// `unknown`, `healthy` or `cluster-ip-failing`.
    pub state: String,
    /// The ClusterIP path, when failing.
    pub path: Option<String>,
    /// Failed probes of the ClusterIP in the window.
    pub failures: Option<u64>,
    /// Probes in the window.
    pub probes: Option<u64>,
    /// CoreDNS pod paths that answered.
    pub pods_answering: Option<u64>,
}

/// A component of the agent's node judged `component-stalled` (`layers.components`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AgentComponentStalled {
    /// `kube-proxy`.
    pub component: String,
    /// Its last sync, as it reported it.
    pub last_sync: Option<Time>,
    /// The oldest Service change after it.
    pub oldest_change: Option<Time>,
    /// From that change to the judgement (s).
    pub waited_s: f64,
    /// What it was allowed to wait (s).
    pub allowed_s: f64,
    /// Service changes since its last sync.
    pub missed_changes: u64,
    /// Their Services, at most 10.
    pub missed_services: Vec<String>,
    /// `endpoint-gone` or `sync-not-advancing`.
    pub evidence: String,
}

/// What an agent's `/status` says, as far as `check` reads it: the layers' sections
/// (`layers.datapath`, `layers.dns`) or, from an agent of an earlier version, the same fields
/// at the top level.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, from = "RawStatus")]
pub struct AgentStatus {
    /// The node the agent runs on.
    pub node: String,
    /// The datapath it reads (`iptables`, `nftables`, `ipvs`, `cilium`).
    pub datapath: Option<String>,
    /// Why its datapath cannot be read.
    pub datapath_error: Option<String>,
    /// Whether its truth is synced (nothing is judged otherwise).
    pub truth_synced: bool,
    /// Open trackings of its paths.
    pub open: Vec<AgentTracking>,
    /// DNS health from its node.
    pub dns: Option<AgentDnsHealth>,
    /// Its node's components judged stalled.
    pub stalled_components: Vec<AgentComponentStalled>,
}

/// `/status` as served: one section per layer; sections of layers `check` does not know
/// are ignored.
#[derive(Default, Deserialize)]
#[serde(default)]
struct RawStatus {
    node: String,
    truth_synced: bool,
    open: Vec<AgentTracking>,
    layers: std::collections::BTreeMap<String, serde_json::Value>,
    /// An earlier agent's top-level fields.
    datapath: Option<String>,
    datapath_error: Option<String>,
    dns: Option<AgentDnsHealth>,
}

impl From<RawStatus> for AgentStatus {
    fn from(r: RawStatus) -> Self {
        let section = |layer: &str, field: &str| {
            r.layers
                .get(layer)
                .and_then(|v| v.get(field))
                .filter(|v| !v.is_null())
                .cloned()
        };
        let text = |v: Option<serde_json::Value>| v.and_then(|v| v.as_str().map(str::to_string));
        Self {
            datapath: text(section("datapath", "datapath")).or(r.datapath),
            datapath_error: text(section("datapath", "error")).or(r.datapath_error),
            dns: section("dns", "health")
                .and_then(|v| serde_json::from_value(v).ok())
                .or(r.dns),
            stalled_components: section("components", "kube_proxy")
                .and_then(|v| v.get("stalled").cloned())
                .and_then(|v| serde_json::from_value(v).ok())
                .into_iter()
                .collect(),
            node: r.node,
            truth_synced: r.truth_synced,
            open: r.open,
        }
    }
}

/// An HTTP client for the agents' endpoints.
pub struct AgentClient {
    http: Client<HttpConnector, Empty<Bytes>>,
    bearer: Option<Bearer>,
    timeout: Duration,
}

impl AgentClient {
    /// A client presenting `bearer` (the caller's Kubernetes token), each request bounded
    /// by `timeout`.
    pub fn new(bearer: Option<Bearer>, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        Self {
            http: Client::builder(TokioExecutor::new()).build(connector),
            bearer,
            timeout,
        }
    }

    /// `GET path` of one agent: the body of a successful answer.
    ///
    /// # Errors
    /// A one-line reason: no connection, no answer in time, or an HTTP error status (with
    /// the start of its body, control characters removed).
    pub async fn get(&self, agent: &Agent, path: &str) -> Result<Bytes, String> {
        let uri = format!("http://{}{path}", agent.addr);
        let mut req = hyper::Request::get(&uri);
        if let Some(b) = &self.bearer {
            let token = b
                .token()
                .map_err(|e| format!("reading the token to present: {e}"))?;
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        let (status, body) = tokio::time::timeout(self.timeout, async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| format!("GET {uri}: {e}"))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("GET {uri}: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        })
        .await
        .map_err(|_| {
            format!(
                "GET {uri}: no answer within {} ms",
                self.timeout.as_millis()
            )
        })??;
        check_status(agent, status, &body)?;
        Ok(body)
    }

    /// `GET /status` of one agent.
    ///
    /// # Errors
    /// A one-line reason: see [`AgentClient::get`]; also an unreadable document or an agent
    /// of another node.
    pub async fn status(&self, agent: &Agent) -> Result<AgentStatus, String> {
        let body = self.get(agent, "/status").await?;
        parse_status(agent, &body)
    }
}

/// An error status, with the start of its body (control characters removed).
fn check_status(agent: &Agent, status: hyper::StatusCode, body: &[u8]) -> Result<(), String> {
    if status.is_success() {
        return Ok(());
    }
    let text: String = String::from_utf8_lossy(body)
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    Err(format!("HTTP {status} from {}: {text}", agent.addr))
}

/// An agent's `/status`, checked.
fn parse_status(agent: &Agent, body: &[u8]) -> Result<AgentStatus, String> {
    let st: AgentStatus = serde_json::from_slice(body)
        .map_err(|e| format!("unreadable /status from {}: {e}", agent.addr))?;
    check_node(agent, &st.node)?;
    Ok(st)
}

/// An answer names the node it comes from; an agent reached at another node's address is
/// refused (an empty name is taken as the asked node's).
pub fn check_node(agent: &Agent, answered: &str) -> Result<(), String> {
    if !answered.is_empty() && answered != agent.node {
        return Err(format!(
            "{} answered as node {answered}, not {}",
            agent.addr, agent.node
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    /// The sections of `/status` as the agent serves them now, and an earlier agent's
    /// top-level fields, read to the same status.
    #[test]
    fn status_is_read_from_the_layer_sections_and_from_an_earlier_agent() {
        let now: AgentStatus = serde_json::from_value(serde_json::json!({
            "summary": "node-2: …",
            "node": "node-2",
            "truth_synced": true,
            "open": [],
            "layers": {
                "datapath": {"datapath": "nftables", "error": "nft: timeout"},
                "dns": {"health": {"state": "cluster-ip-failing", "failures": 3}},
                "grpc": {"anything": 1}
            }
        }))
        .unwrap_or_default();
        let before: AgentStatus = serde_json::from_value(serde_json::json!({
            "node": "node-2",
            "truth_synced": true,
            "datapath": "nftables",
            "datapath_error": "nft: timeout",
            "dns": {"state": "cluster-ip-failing", "failures": 3}
        }))
        .unwrap_or_default();
        assert_eq!(now, before);
        assert_eq!(now.datapath.as_deref(), Some("nftables"));
        assert_eq!(now.datapath_error.as_deref(), Some("nft: timeout"));
        assert_eq!(
            now.dns.map(|d| d.state),
            Some("cluster-ip-failing".to_string())
        );
    }

    fn pod(node: &str, host_ip: Option<&str>, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("ghostip-agent-{node}"), "namespace": "ghostip-agent"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "hostIP": host_ip},
        }))
        .unwrap()
    }

    #[test]
    fn running_agents_are_reached_at_their_host_ip() {
        let pods = [
            pod("node-2", Some("10.200.0.12"), "Running"),
            pod("node-1", Some("10.200.0.11"), "Running"),
            pod("node-3", Some("10.200.0.13"), "Pending"),
            pod("node-4", None, "Running"),
        ];
        assert_eq!(
            running(&pods, 9754),
            [
                Agent {
                    node: "node-1".into(),
                    addr: "10.200.0.11:9754".parse().unwrap()
                },
                Agent {
                    node: "node-2".into(),
                    addr: "10.200.0.12:9754".parse().unwrap()
                },
            ]
        );
    }

    fn agent() -> Agent {
        Agent {
            node: "node-2".into(),
            addr: "10.200.0.12:9754".parse().unwrap(),
        }
    }

    /// The document an agent serves (commands/agent/status.rs), trimmed to a stale
    /// datapath backend over its lag, a converging one, and failing ClusterIP DNS.
    #[test]
    fn a_status_document_reads_as_findings() {
        let body = serde_json::json!({
            "node": "node-2", "datapath": "iptables", "datapath_error": null,
            "truth_synced": true, "max_cpu_percent": 2.0, "audit_period_s": 10.0,
            "open": [
                {"path": "iptables/node-2", "layer": "datapath", "service": "kube-system/kube-dns",
                 "target": "10.244.1.3:53", "kind": "stale", "verdict": "over expected lag",
                 "since": "2026-03-19T08:00:00Z", "last_seen": "2026-03-19T08:00:41Z",
                 "former_pod": "kube-system/coredns-abc", "expected_lag_s": 2.0},
                {"path": "iptables/node-2", "layer": "datapath", "service": "demo/web",
                 "target": "10.244.1.9:8080", "kind": "stale", "verdict": "pending",
                 "since": "2026-03-19T08:00:40Z", "expected_lag_s": 2.0},
                {"path": "iptables/node-2", "layer": "datapath", "service": "demo/api",
                 "target": "10.244.1.8:80", "kind": "stale", "verdict": "over expected lag",
                 "since": "2026-03-19T08:00:00Z", "converged_by": "2026-03-19T08:00:42Z"}
            ],
            "dns": {"state": "cluster-ip-failing", "path": "dns-cluster-ip/10.96.0.10:53@node-2",
                    "failures": 4, "probes": 10, "pods_answering": 2},
            "dns_paths": []
        });
        let st = parse_status(&agent(), body.to_string().as_bytes()).unwrap();
        let findings: Vec<&str> = st
            .open
            .iter()
            .filter(|t| t.is_finding())
            .map(|t| t.target.as_str())
            .collect();
        assert_eq!(findings, ["10.244.1.3:53"]);
        assert_eq!(
            st.open[0].former_pod.as_deref(),
            Some("kube-system/coredns-abc")
        );
        let dns = st.dns.unwrap();
        assert_eq!(dns.state, "cluster-ip-failing");
        assert_eq!(dns.failures, Some(4));
    }

    #[test]
    fn refusals_and_strangers_are_errors_that_say_so() {
        let e = check_status(
            &agent(),
            hyper::StatusCode::UNAUTHORIZED,
            b"no token\x1b[2J",
        )
        .unwrap_err();
        assert!(e.contains("HTTP 401") && e.contains("no token"), "{e}");
        assert!(!e.contains('\x1b'), "{e:?}");
        let e = parse_status(&agent(), br#"{"node": "node-1"}"#).unwrap_err();
        assert!(e.contains("answered as node node-1"), "{e}");
        let e = parse_status(&agent(), b"<html>").unwrap_err();
        assert!(e.contains("unreadable /status"), "{e}");
    }
}
