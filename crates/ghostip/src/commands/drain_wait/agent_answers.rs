//! Asks every node's agent whether its datapath still routes a Service to the IP (`GET /v1/ips/{ip}` on the node's address), authenticated with the drain's own token.
//!
//! The agents are found as pods (namespace and label selector of the DaemonSet), each
//! reached at its host IP. Each request is bounded; a node whose agent does not answer is
//! reported with why, and the drain's fallback budget stands in for it.

use std::net::IpAddr;

use ghostip_core::Time;
use ghostip_session::layers::datapath::drain::NodeReport;
use serde::Deserialize;

use crate::agent_client::{Agent, AgentClient, check_node};

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

/// Asks one agent whether its node's datapath still routes a Service to `ip`.
///
/// # Errors
/// A one-line reason: the agent did not answer (see [`AgentClient::get`]), answered for
/// another node, or reads no datapath.
pub(super) async fn ask(
    client: &AgentClient,
    agent: &Agent,
    ip: IpAddr,
) -> Result<NodeReport, String> {
    let body = client.get(agent, &format!("/v1/ips/{ip}")).await?;
    read_answer(agent, &body)
}

/// Reads an agent's answer to `/v1/ips/{ip}` (pure: the body as received).
///
/// # Errors
/// A one-line reason: the body is not the answer's JSON, names another node than `agent`'s,
/// or says the agent reads no datapath.
pub fn read_answer(agent: &Agent, body: &[u8]) -> Result<NodeReport, String> {
    let r: IpReport = serde_json::from_slice(body)
        .map_err(|e| format!("unreadable answer from {}: {e}", agent.addr))?;
    check_node(agent, r.node.as_deref().unwrap_or_default())?;
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
