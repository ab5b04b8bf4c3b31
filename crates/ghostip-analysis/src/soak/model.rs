//! The ground truth a soak writes and ghostip's records as the scorer takes them.

use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::Time;
use serde::{Deserialize, Serialize};

/// `ground-truth.json`: what the soak did, when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// Seed of the fault schedule.
    #[serde(default)]
    pub seed: Option<u64>,
    /// When the soak started.
    pub started: Time,
    /// When it ended; `None` if it was interrupted.
    #[serde(default)]
    pub ended: Option<Time>,
    /// The lab's nodes.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Faults injected.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Rollouts made.
    #[serde(default)]
    pub rollouts: Vec<Rollout>,
}

/// One injected fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// Id in the schedule (`f3`).
    pub id: String,
    /// `kube-proxy-stopped`, `coredns-replaced`, `apiserver-stopped`, `agent-killed`,
    /// `corefile-changed`, `datapath-frozen`; another kind is context, not scored.
    pub kind: String,
    /// The node it hit, for node faults.
    #[serde(default)]
    pub node: Option<String>,
    /// Start.
    pub start: Time,
    /// End; `None` if the soak was interrupted while it lasted.
    #[serde(default)]
    pub end: Option<Time>,
    /// IPs a layer kept after they left the truth because of this fault.
    #[serde(default)]
    pub stale_ips: Vec<IpAddr>,
    /// From when those IPs were stale.
    #[serde(default)]
    pub stale_from: Option<Time>,
    /// Whether ghostip must detect it.
    #[serde(default)]
    pub detectable: bool,
    /// The layer it shows in (`datapath`, `dns`, …).
    #[serde(default)]
    pub layer: Option<String>,
    /// `corefile-changed`: the new `cache` seconds (`None`: no cache plugin).
    #[serde(default)]
    pub cache: Option<u64>,
}

impl Fault {
    /// The fault kinds the soak writes; another kind is reported as context and never scored.
    pub const KNOWN_KINDS: &'static [&'static str] = &[
        "kube-proxy-stopped",
        "coredns-replaced",
        "apiserver-stopped",
        "agent-killed",
        "corefile-changed",
        "datapath-frozen",
    ];

    /// Whether the soak writes this kind.
    pub fn known(&self) -> bool {
        Self::KNOWN_KINDS.contains(&self.kind.as_str())
    }

    /// A truth gap of the API server: ghostip must record a gap and judge nothing.
    pub fn is_truth_gap(&self) -> bool {
        self.kind == "apiserver-stopped"
    }

    /// Whether its detection is scored: detectable and of a known kind.
    pub fn scored(&self) -> bool {
        self.detectable && self.known()
    }

    /// The end, or `soak_end` while it was open when the soak stopped.
    pub fn end_or(&self, soak_end: Time) -> Time {
        self.end.unwrap_or(soak_end)
    }

    /// From when ghostip could see it: `stale_from`, else `start`.
    pub fn visible_from(&self) -> Time {
        self.stale_from.unwrap_or(self.start)
    }
}

/// One rollout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    /// `namespace/name` of the Deployment.
    pub deployment: String,
    /// When it was started.
    pub at: Time,
    /// Pod IPs it removed.
    #[serde(default)]
    pub removed_ips: Vec<IpAddr>,
}

/// A finding as the scorer takes it: a ledger's finding with the file it came from and the
/// node its path is seen from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SoakFinding {
    /// The ledger file's name (`agent-node-2.db`).
    pub ledger: String,
    /// `stale`, `missing` or `stuck`.
    pub kind: String,
    /// Layer of the path.
    pub layer: String,
    /// Path id.
    pub path_id: String,
    /// Node of the path, when node-local.
    pub node: Option<String>,
    /// `namespace/name` of the Service.
    pub service: String,
    /// Target IP.
    pub target: IpAddr,
    /// When the target left the truth.
    pub t0: Time,
    /// When ghostip received the change.
    pub received: Time,
    /// First observation after which the path was right.
    pub converged_by: Option<Time>,
    /// The path's expected lag.
    #[serde(with = "opt_secs")]
    pub expected_lag: Option<Duration>,
    /// The window, t0 to `converged_by`.
    #[serde(with = "opt_secs")]
    pub window: Option<Duration>,
    /// The verdict as stored (`over expected lag`, `stuck`, `within expected lag`, …).
    pub verdict: String,
}

impl SoakFinding {
    /// The earliest time ghostip could have flagged it: when its expected lag ran out after
    /// t0, never before it received the change (the ledger stores no flag time).
    pub fn flagged_at(&self) -> Time {
        let due = self
            .expected_lag
            .and_then(|l| jiff::SignedDuration::try_from(l).ok())
            .and_then(|l| self.t0.checked_add(l).ok())
            .unwrap_or(self.received);
        due.max(self.received)
    }

    /// The last time it was known wrong: `converged_by`, else open until `soak_end`.
    pub fn until(&self, soak_end: Time) -> Time {
        self.converged_by.unwrap_or(soak_end).max(self.t0)
    }
}

/// Whether a stored verdict is a judgement against the path (over its expected lag, or
/// stuck); within-lag windows and unjudged ones are context. Takes the label
/// (`over expected lag`) or kebab-case (`over-expected-lag`).
pub fn is_judged(verdict: &str) -> bool {
    let v = verdict.trim().replace('-', " ");
    v == "over expected lag" || v == "stuck"
}

/// The node a path is seen from: `@node` at the end of a DNS path id, the last segment of a
/// node datapath or conntrack path id (`iptables/node-2`), else the node of the ledger
/// (`agent-node-2.db`), else none.
pub fn finding_node(layer: &str, path_id: &str, ledger_node: Option<&str>) -> Option<String> {
    if let Some((_, node)) = path_id.rsplit_once('@')
        && !node.is_empty()
    {
        return Some(node.to_string());
    }
    if matches!(layer, "datapath" | "conntrack")
        && let Some((_, node)) = path_id.rsplit_once('/')
        && !node.is_empty()
    {
        return Some(node.to_string());
    }
    ledger_node.map(str::to_string)
}

/// A truth gap a ledger recorded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SoakGap {
    /// The ledger file's name.
    pub ledger: String,
    /// Start.
    pub start: Time,
    /// End; `None` if still open.
    pub end: Option<Time>,
    /// Why.
    pub reason: String,
}

/// One scrape of one process's `/metrics`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricSample {
    /// `watch` or `agent-node-N`.
    pub source: String,
    /// When it was scraped.
    pub at: Time,
    /// `process_resident_memory_bytes`.
    pub rss_bytes: Option<f64>,
    /// `process_cpu_seconds_total`.
    pub cpu_seconds: Option<f64>,
    /// An agent's `ghostip_component_stalled`: whether any component of its node was
    /// `component-stalled` at the scrape (`None`: the scrape has no such gauge).
    pub component_stalled: Option<bool>,
}

pub(crate) mod opt_secs {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn node_of_a_path() {
        assert_eq!(
            finding_node("datapath", "iptables/node-2", None).as_deref(),
            Some("node-2")
        );
        assert_eq!(
            finding_node("dns", "dns-pod/10.244.1.5:53@node-3", Some("node-1")).as_deref(),
            Some("node-3")
        );
        assert_eq!(
            finding_node("dns", "dns-pod/10.244.1.5:53", Some("node-1")).as_deref(),
            Some("node-1")
        );
        assert_eq!(finding_node("dns", "dns-pod/10.244.1.5:53", None), None);
    }

    /// The soak's file as the contract shows it: an open fault, a cache of `null`, an
    /// undetectable fault without IPs, a field this version does not know.
    #[test]
    fn ground_truth_reads_nulls_and_defaults() {
        let g: GroundTruth = serde_json::from_str(
            r#"{"seed": 7, "started": "2026-12-05T10:00:00Z", "ended": null,
                "nodes": ["node-1"], "schedule": "v2",
                "faults": [
                  {"id": "f1", "kind": "corefile-changed", "start": "2026-12-05T10:01:00Z",
                   "end": null, "cache": null},
                  {"id": "f2", "kind": "apiserver-stopped", "start": "2026-12-05T10:02:00Z",
                   "end": "2026-12-05T10:03:00Z", "detectable": false}
                ]}"#,
        )
        .unwrap();
        assert_eq!(g.ended, None);
        assert!(g.rollouts.is_empty());
        assert_eq!((g.faults[0].end, g.faults[0].cache), (None, None));
        assert!(!g.faults[0].detectable && g.faults[0].stale_ips.is_empty());
        assert!(g.faults[1].is_truth_gap() && !g.faults[1].scored());
        let err = serde_json::from_str::<GroundTruth>("{\n\"started\": 5}").unwrap_err();
        assert_eq!(err.line(), 2);
    }

    #[test]
    fn judged_verdicts() {
        assert!(is_judged("over expected lag"));
        assert!(is_judged("over-expected-lag"));
        assert!(is_judged("stuck"));
        assert!(!is_judged("within expected lag"));
        assert!(!is_judged("unjudged (truth gap)"));
        assert!(!is_judged("pending"));
    }
}
