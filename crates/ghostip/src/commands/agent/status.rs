//! What the agent shows: the `/status` document, its JSON lines (`-o json`) and the log lines of tracking changes.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use ghostip_core::engine::{EngineEvent, Tracking};
use ghostip_core::{Layer, Time};
use serde::Serialize;

use super::super::pipeline::Pipeline;
use crate::agent::cost::ReadReason;
use crate::agent::health::{HealthVerdict, PathHealth};

/// A stale or missing backend the datapath holds now, for `/status` and JSON lines.
#[derive(Clone, Debug, Serialize)]
pub(super) struct TrackingView {
    pub path: String,
    pub layer: Layer,
    pub service: String,
    pub target: String,
    pub kind: String,
    pub verdict: String,
    /// When the truth changed (or the tracking was opened).
    pub since: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub converged_by: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub former_pod: Option<String>,
    /// The path's expected lag: past it, the verdict is `over expected lag` at once.
    pub expected_lag_s: f64,
    /// Why `since` is the receive time rather than the slice's trigger time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t0_correction: Option<String>,
}

/// The last read.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct ReadView {
    pub reason: Option<ReadReason>,
    pub at: Option<Time>,
    pub cpu_s: f64,
    pub child_cpu_s: f64,
    pub parse_cpu_s: f64,
    /// CPU of comparing the table with the truth (the engine's observations).
    pub diff_cpu_s: f64,
    pub wall_s: f64,
    pub bytes: u64,
    pub frontends: usize,
    pub backends: usize,
    pub services: usize,
    pub unknown_frontends: usize,
    pub skipped_unknown: u64,
}

/// What `/status` serves.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct AgentStatus {
    pub node: String,
    pub datapath: Option<String>,
    pub datapath_error: Option<String>,
    /// Capability a reader lacks, when that is why it failed.
    pub missing_capability: Option<String>,
    pub truth_synced: bool,
    pub max_cpu_percent: f64,
    pub audit_period_s: f64,
    pub reads: u64,
    pub read_cpu_total_s: f64,
    pub last_read: ReadView,
    /// Open stale/missing trackings of this node's paths (datapath and DNS).
    pub open: Vec<TrackingView>,
    pub dns: Option<HealthVerdict>,
    pub dns_paths: Vec<PathHealth>,
}

/// The shared `/status` document.
pub(super) type SharedStatus = Arc<Mutex<AgentStatus>>;

/// Locks the status (a poisoned lock still holds a usable document).
pub(super) fn lock(s: &Mutex<AgentStatus>) -> MutexGuard<'_, AgentStatus> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `GET /status`.
pub(super) async fn status_handler(State(status): State<SharedStatus>) -> impl IntoResponse {
    let body = {
        let st = lock(&status);
        serde_json::to_string_pretty(&*st).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    };
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// One JSON line of `-o json`.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub(super) enum Line<'a> {
    Started {
        node: &'a str,
        datapath: Option<&'a str>,
        listen: String,
    },
    Synced {
        at: Time,
    },
    Read {
        #[serde(flatten)]
        read: &'a ReadView,
        audit_period_s: f64,
        stale_now: usize,
    },
    ReaderError {
        datapath: &'a str,
        error: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        capability: Option<&'a str>,
    },
    Tracking {
        change: &'a str,
        #[serde(flatten)]
        tracking: &'a TrackingView,
    },
    DnsHealth {
        #[serde(flatten)]
        verdict: &'a HealthVerdict,
        paths: &'a [PathHealth],
    },
    Stopped {
        at: Time,
    },
}

/// Writes JSON lines to stdout with `-o json`.
pub(super) struct Printer {
    pub json: bool,
}

impl Printer {
    pub fn line(&self, l: &Line<'_>) {
        if self.json
            && let Ok(s) = serde_json::to_string(l)
        {
            println!("{s}");
        }
    }
}

/// A tracking as `/status` and the JSON lines show it.
pub(super) fn view(p: &Pipeline, t: &Tracking) -> Option<TrackingView> {
    let info = p.session.engine.path(t.path)?;
    let start = t.change.map_or(t.opened, |c| c.t0);
    Some(TrackingView {
        path: info.id.clone(),
        layer: info.layer(),
        service: t.service.to_string(),
        target: t.target.to_string(),
        kind: format!("{:?}", t.kind).to_lowercase(),
        verdict: t.verdict.label().to_string(),
        since: start,
        last_seen: t.last_wrong,
        converged_by: t.converged_by,
        window_s: t.window_upper().map(|d| d.as_secs_f64()),
        former_pod: p.session.former_pod(t.target.ip),
        expected_lag_s: t.expected_lag.as_secs_f64(),
        t0_correction: t.change.and_then(|c| c.corrected).map(|c| c.to_string()),
    })
}

/// Logs and prints engine events: only verdicts that are findings are warnings (every truth
/// change opens trackings on every node until its next read).
pub(super) fn emit_events(printer: &Printer, p: &Pipeline, events: &[EngineEvent]) {
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
        if v.layer == Layer::Datapath {
            match change {
                "stuck" => {
                    tracing::warn!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, "datapath stuck: still differs from the truth")
                }
                "closed" if t.verdict.is_finding() => {
                    tracing::warn!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, verdict = %v.verdict, window_s = v.window_s.unwrap_or(0.0), "datapath converged late")
                }
                "closed" => {
                    tracing::info!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, verdict = %v.verdict, window_s = v.window_s.unwrap_or(0.0), "datapath converged")
                }
                _ => {
                    tracing::debug!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, change, "datapath tracking")
                }
            }
        }
        printer.line(&Line::Tracking {
            change,
            tracking: &v,
        });
    }
}
