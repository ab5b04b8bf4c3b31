//! What the node-local layers report through: the agent's JSON lines, the ledger and the metrics, the tracking view of `/status` and the per-IP answer of `/v1/ips/{ip}`.

use std::net::IpAddr;

use ghostip_core::engine::{EngineEvent, Tracking};
use ghostip_core::{Layer, Time};
use serde::Serialize;

use super::LayerMetrics;
use crate::ledger::LedgerSender;
use crate::pipeline::Pipeline;

/// The DNS layer: its tracking changes are many (every path of every change) and are not
/// logged one by one; the node's own paths (datapath, conntrack) are.
const DNS_LAYER: Layer = ghostip_session::layers::dns::DNS;

/// Where the node-local adapters report.
#[derive(Clone)]
pub struct NodeOutputs {
    /// The JSON lines of `-o json`.
    pub printer: Printer,
    /// The ledger.
    pub ledger: LedgerSender,
    /// Each layer's node-local metrics ([`super::register_metrics`]).
    pub metrics: std::collections::BTreeMap<Layer, LayerMetrics>,
    /// The fixed metrics (probe counters).
    pub fixed: std::sync::Arc<crate::metrics::Metrics>,
}

impl NodeOutputs {
    /// `layer`'s metrics, when they were registered as a `T`; else a set of the same
    /// metrics that no registry exports (a layer started without its registration).
    pub fn metrics_of<T: Default + Send + Sync + 'static>(
        &self,
        layer: Layer,
    ) -> std::sync::Arc<T> {
        self.metrics
            .get(&layer)
            .and_then(|m| std::sync::Arc::clone(m).downcast::<T>().ok())
            .unwrap_or_default()
    }
}

/// A stale or missing target a path of this node holds now, for `/status` and JSON lines.
#[derive(Clone, Debug, Serialize)]
pub struct TrackingView {
    /// The path's id (`iptables/node-2`).
    pub path: String,
    /// Its layer.
    pub layer: Layer,
    /// The Service (`namespace/name`).
    pub service: String,
    /// The target (`ip` or `ip:port`).
    pub target: String,
    /// The target's address, to answer `/v1/ips/{ip}`.
    #[serde(skip)]
    pub ip: IpAddr,
    /// `stale` or `missing`.
    pub kind: String,
    /// The engine's verdict (`pending`, `over expected lag`, `stuck`, …).
    pub verdict: String,
    /// When the truth changed (or the tracking was opened).
    pub since: Time,
    /// The last observation that still held it wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Time>,
    /// The first observation without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub converged_by: Option<Time>,
    /// How long it lasted, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// The pod behind the target: the endpoint's pod while the slice still lists it
    /// (terminating), else the pod that owned the IP when it left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub former_pod: Option<String>,
    /// The path's expected lag: past it, the verdict is `over expected lag` at once.
    pub expected_lag_s: f64,
    /// Why `since` is the receive time rather than the slice's trigger time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t0_correction: Option<String>,
}

/// What `GET /v1/ips/{ip}` answers: whether this node's datapath still holds one IP.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IpView {
    /// The node that answers.
    pub node: String,
    /// The truth is synced (no truth gap): trackings are being opened and judged.
    pub synced: bool,
    /// When the last successful datapath read started; `null` before the first.
    pub read_at: Option<Time>,
    /// The datapath read (`iptables`, `nftables`, `ipvs`, `cilium`), `null` when none was
    /// found.
    pub datapath: Option<String>,
    /// Why the datapath cannot be read now (the last read failed, or none was found).
    pub error: Option<String>,
    /// The open, unconverged stale trackings of this node's datapath with this target IP,
    /// as `service -> target`.
    pub holding: Vec<String>,
    /// The conntrack layer's confirmed stale flows of this node's pods to this IP.
    pub stale_flows: Vec<IpStaleFlow>,
}

/// A confirmed stale conntrack flow to the asked IP, as `GET /v1/ips/{ip}` lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IpStaleFlow {
    /// The node of the flow.
    pub node: String,
    /// The client's address.
    pub client: IpAddr,
    /// The client pod (`namespace/name`), `null` when the address is no known pod.
    pub client_pod: Option<String>,
    /// Where the client sent the flow: the Service address when it was DNATed, else the
    /// endpoint itself.
    pub original_dst: String,
    /// When the endpoint left its Service, else the first read that saw the flow.
    pub since: Time,
}

/// The answer for `ip` from the status document.
/// One JSON line of `-o json`.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub(crate) enum Line<'a> {
    Started {
        node: &'a str,
        /// Each running layer, with what it reads on this node where it has a choice
        /// (`"datapath": "iptables"`).
        layers: &'a std::collections::BTreeMap<String, Option<String>>,
        listen: String,
    },
    Synced {
        at: Time,
    },
    Tracking {
        change: &'a str,
        #[serde(flatten)]
        tracking: &'a TrackingView,
    },
    Stopped {
        at: Time,
    },
}

/// Writes JSON lines to stdout with `-o json`.
#[derive(Clone, Copy, Debug)]
pub struct Printer {
    /// `-o json`: print the lines (else nothing).
    pub json: bool,
}

impl Printer {
    /// Prints `l` (a [`Line`], or a layer's own line with an `event` tag) as one JSON line.
    pub fn line(&self, l: &impl Serialize) {
        if self.json
            && let Ok(s) = serde_json::to_string(l)
        {
            crate::printer::write_stdout_line(&s);
        }
    }
}

/// A tracking as `/status` and the JSON lines show it.
pub(crate) fn view(p: &Pipeline, t: &Tracking) -> Option<TrackingView> {
    let info = p.session.engine().path(t.path)?;
    let start = t.change.map_or(t.opened, |c| c.t0);
    Some(TrackingView {
        path: info.id.clone(),
        layer: info.layer(),
        service: t.service.to_string(),
        target: t.target.to_string(),
        ip: t.target.ip,
        kind: format!("{:?}", t.kind).to_lowercase(),
        verdict: t.verdict.label().to_string(),
        since: start,
        last_seen: t.last_wrong,
        converged_by: t.converged_by,
        window_s: t.window_upper().map(|d| d.as_secs_f64()),
        // The pod behind the target: still listed (terminating), or gone.
        former_pod: p.session.endpoint_pod(&t.service, t.target.ip),
        expected_lag_s: t.expected_lag.as_secs_f64(),
        t0_correction: t.change.and_then(|c| c.corrected).map(|c| c.to_string()),
    })
}

/// Logs and prints engine events: only verdicts that are findings are warnings (every truth
/// change opens trackings on every node until its next read).
pub(crate) fn emit_events(printer: &Printer, p: &Pipeline, events: &[EngineEvent]) {
    for ev in events {
        let (change, t) = match ev {
            EngineEvent::Opened(t) => ("opened", t),
            EngineEvent::Converging(t) => ("converging", t),
            EngineEvent::Reappeared(t) => ("reappeared", t),
            EngineEvent::OverExpectedLag(t) => ("over-lag", t),
            EngineEvent::Stuck(t) => ("stuck", t),
            EngineEvent::Closed(t) => ("closed", t),
        };
        let Some(v) = view(p, t) else { continue };
        if v.layer != DNS_LAYER {
            match change {
                "stuck" => {
                    tracing::warn!(layer = %v.layer, path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, "stuck: still differs from the truth")
                }
                "closed" if t.verdict.is_finding() => {
                    tracing::warn!(layer = %v.layer, path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, verdict = %v.verdict, window_s = v.window_s.unwrap_or(0.0), "converged late")
                }
                "closed" => {
                    tracing::info!(layer = %v.layer, path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, verdict = %v.verdict, window_s = v.window_s.unwrap_or(0.0), "converged")
                }
                _ => {
                    tracing::debug!(layer = %v.layer, path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, change, "tracking changed")
                }
            }
        }
        printer.line(&Line::Tracking {
            change,
            tracking: &v,
        });
    }
}
