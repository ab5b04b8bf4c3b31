//! The datapath layer's part of a drain: when every node's datapath, as its agent reports it, stopped routing to the pod's IP.
//!
//! A node lets go once its agent read the datapath after t0 (with its view of the truth
//! synced) and no Service routes to the IP any more. A node whose agent cannot be asked is
//! unknown: the drain's fallback budget stands in for it.

use std::collections::BTreeMap;

use ghostip_core::Time;
use serde::Serialize;

use crate::drain::{LayerStatus, LayerView, LetGo};

/// What a node's agent says about the IP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeReport {
    /// When the agent last read its datapath.
    pub read_at: Option<Time>,
    /// The agent's view of the truth is synced.
    pub synced: bool,
    /// Services the node's datapath still routes to the IP although it left them.
    pub holding: Vec<String>,
}

/// Every node's datapath's hold on one IP, as the nodes' agents answer.
#[derive(Clone, Debug, Default)]
pub struct NodesLetGo {
    nodes: BTreeMap<String, Result<NodeReport, String>>,
    /// Nodes are not checked at all, with why (no agent reachable or none deployed).
    unknown: Option<String>,
}

impl NodesLetGo {
    /// No node heard from yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// What a node's agent reported, or why it could not be asked.
    pub fn on_node(&mut self, node: &str, report: Result<NodeReport, String>) {
        self.nodes.insert(node.to_string(), report);
    }

    /// Nodes cannot be checked at all.
    pub fn unknown(&mut self, why: impl Into<String>) {
        self.unknown = Some(why.into());
    }
}

impl LetGo for NodesLetGo {
    fn views(&self, t0: Time, _now: Time, out: &mut Vec<LayerStatus>) {
        if let Some(why) = &self.unknown {
            out.push(LayerStatus {
                layer: "datapath",
                path: "*".into(),
                view: LayerView::Unknown { why: why.clone() },
            });
            return;
        }
        for (node, report) in &self.nodes {
            let view = match report {
                Err(why) => LayerView::Unknown { why: why.clone() },
                Ok(r) if !r.synced => LayerView::Holding {
                    why: "the agent's view of the truth is not synced".into(),
                    until: None,
                },
                Ok(r) if r.read_at.is_none_or(|at| at < t0) => LayerView::Holding {
                    why: "the agent has not read its datapath since the IP left the endpoints"
                        .into(),
                    until: None,
                },
                Ok(r) if !r.holding.is_empty() => LayerView::Holding {
                    why: format!("still routes {} to the IP", r.holding.join(", ")),
                    until: None,
                },
                Ok(r) => LayerView::LetGo {
                    at: r.read_at.unwrap_or(t0),
                },
            };
            out.push(LayerStatus {
                layer: "datapath",
                path: node.clone(),
                view,
            });
        }
    }
}
