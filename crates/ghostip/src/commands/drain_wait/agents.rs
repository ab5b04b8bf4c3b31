//! Asks every node's agent whether its datapath still routes a Service to the IP (`GET /v1/ips/{ip}` on the node's address), authenticated with the drain's own token.
//!
//! The agents are found as pods (namespace and label selector of the DaemonSet), each
//! reached at its host IP. Each request is bounded; a node whose agent does not answer is
//! reported with why, and the drain's fallback budget stands in for it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Context as _;
use ghostip_core::Time;
use ghostip_session::drain::NodeReport;
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

/// Largest answer read from an agent.
const MAX_BODY: usize = 256 * 1024;

/// One node's agent.
#[derive(Clone, Debug)]
pub(super) struct Agent {
    /// Node name.
    pub node: String,
    /// Where its endpoint listens.
    pub addr: SocketAddr,
}

/// The agents running now, from their pods.
pub(super) async fn find(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
    port: u16,
    timeout: Duration,
) -> anyhow::Result<Vec<Agent>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().labels(selector);
    let pods = tokio::time::timeout(timeout, api.list(&lp))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} ms", timeout.as_millis()))?
        .with_context(|| format!("listing the agent pods ({selector}) in {namespace}"))?;
    let mut agents: Vec<Agent> = pods
        .items
        .iter()
        .filter_map(|p| {
            let status = p.status.as_ref()?;
            let ip: IpAddr = status.host_ip.as_deref()?.parse().ok()?;
            let node = p.spec.as_ref()?.node_name.clone()?;
            (status.phase.as_deref() == Some("Running")).then_some(Agent {
                node,
                addr: SocketAddr::new(ip, port),
            })
        })
        .collect();
    agents.sort_by(|a, b| a.node.cmp(&b.node));
    agents.dedup_by(|a, b| a.node == b.node);
    Ok(agents)
}

/// What `/v1/ips/{ip}` answers.
#[derive(Debug, Deserialize)]
struct IpReport {
    node: Option<String>,
    synced: bool,
    read_at: Option<Time>,
    #[serde(default)]
    holding: Vec<String>,
    #[serde(default)]
    datapath: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// An HTTP client for the agents.
pub(super) struct AgentClient {
    http: Client<HttpConnector, Empty<Bytes>>,
    bearer: Option<Bearer>,
    timeout: Duration,
}

impl AgentClient {
    /// A client presenting `bearer` (the drain's own credentials), each request bounded by
    /// `timeout`.
    pub fn new(bearer: Option<Bearer>, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        Self {
            http: Client::builder(TokioExecutor::new()).build(connector),
            bearer,
            timeout,
        }
    }

    /// Asks one agent about `ip`.
    pub async fn ask(&self, agent: &Agent, ip: IpAddr) -> Result<NodeReport, String> {
        let uri = format!("http://{}/v1/ips/{ip}", agent.addr);
        let mut req = hyper::Request::get(&uri);
        if let Some(b) = &self.bearer {
            let token = b
                .token()
                .map_err(|e| format!("reading the drain's token: {e}"))?;
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        let answer = tokio::time::timeout(self.timeout, async {
            let resp = self.http.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, body))
        })
        .await
        .map_err(|_| format!("no answer within {} ms", self.timeout.as_millis()))??;
        let (status, body) = answer;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(format!(
                "HTTP {status} from {}: {}",
                agent.addr,
                text.trim().chars().take(200).collect::<String>()
            ));
        }
        let r: IpReport = serde_json::from_slice(&body)
            .map_err(|e| format!("unreadable answer from {}: {e}", agent.addr))?;
        if r.node.as_deref().is_some_and(|n| n != agent.node) {
            return Err(format!(
                "{} answered as node {:?}, not {}",
                agent.addr, r.node, agent.node
            ));
        }
        if r.datapath.is_none() {
            return Err(format!(
                "the agent reads no datapath{}",
                r.error.map(|e| format!(" ({e})")).unwrap_or_default()
            ));
        }
        Ok(NodeReport {
            read_at: r.read_at,
            synced: r.synced,
            holding: r.holding,
        })
    }
}
