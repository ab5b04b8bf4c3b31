//! What the agent shows: the `/status` document, the per-IP answer of `/v1/ips/{ip}`, its JSON lines (`-o json`) and the log lines of tracking changes.
//!
//! Both endpoints read a snapshot that the agent's loop publishes under one mutex after
//! each step; a handler holds the lock only to copy what it serves.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ghostip_core::engine::{EngineEvent, Tracking};
use ghostip_core::{Layer, Time};
use ghostip_session::layers::datapath::DATAPATH;
use serde::Serialize;

use super::super::pipeline::Pipeline;
use super::conntrack::ConntrackStatus;
use crate::agent::cost::ReadReason;
use crate::agent::health::{HealthVerdict, PathHealth};

/// A stale or missing backend the datapath holds now, for `/status` and JSON lines.
#[derive(Clone, Debug, Serialize)]
pub(super) struct TrackingView {
    pub path: String,
    pub layer: Layer,
    pub service: String,
    pub target: String,
    /// The target's address, to answer `/v1/ips/{ip}`.
    #[serde(skip)]
    pub ip: IpAddr,
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
    /// When the read started: what it saw is the datapath at that time or later.
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
    pub conntrack: ConntrackStatus,
}

/// The shared `/status` document.
pub(super) type SharedStatus = Arc<Mutex<AgentStatus>>;

/// Locks the status (a poisoned lock still holds a usable document).
pub(super) fn lock(s: &Mutex<AgentStatus>) -> MutexGuard<'_, AgentStatus> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The routes that read the status: `/status` and `/v1/ips/{ip}`.
pub(super) fn routes(status: SharedStatus) -> Router {
    Router::new()
        .route("/status", get(status_handler))
        .route("/v1/ips/{ip}", get(ip_handler))
        .with_state(status)
}

/// `GET /status`.
pub(super) async fn status_handler(State(status): State<SharedStatus>) -> impl IntoResponse {
    let body = {
        let st = lock(&status);
        serde_json::to_string_pretty(&*st).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    };
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// What `GET /v1/ips/{ip}` answers: whether this node's datapath still holds one IP.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(super) struct IpView {
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
pub(super) struct IpStaleFlow {
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
pub(super) fn ip_view(st: &AgentStatus, ip: IpAddr) -> IpView {
    let ip = ip.to_canonical();
    IpView {
        node: st.node.clone(),
        synced: st.truth_synced,
        read_at: st.last_read.at,
        datapath: st.datapath.clone(),
        error: st.datapath_error.clone(),
        holding: st
            .open
            .iter()
            .filter(|t| {
                t.layer == DATAPATH
                    && t.kind == "stale"
                    && t.converged_by.is_none()
                    && t.ip.to_canonical() == ip
            })
            .map(|t| format!("{} -> {}", t.service, t.target))
            .collect(),
        stale_flows: st
            .conntrack
            .stale_flows
            .iter()
            .filter(|f| f.confirmed && f.target.ip.to_canonical() == ip)
            .map(|f| IpStaleFlow {
                node: st.node.clone(),
                client: f.client_ip,
                client_pod: f.client_pod.as_ref().map(ToString::to_string),
                original_dst: f.via.unwrap_or(f.target).to_string(),
                since: f.left_at.unwrap_or(f.first_seen),
            })
            .collect(),
    }
}

/// `GET /v1/ips/{ip}`: 400 when `{ip}` is not an IP address.
pub(super) async fn ip_handler(
    State(status): State<SharedStatus>,
    Path(ip): Path<String>,
) -> Response {
    let Ok(addr) = ip.parse::<IpAddr>() else {
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": format!("`{ip}` is not an IP address") })),
        )
            .into_response();
    };
    let view = ip_view(&lock(&status), addr);
    Json(view).into_response()
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
            crate::printer::write_stdout_line(&s);
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
        ip: t.target.ip,
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
        if v.layer == DATAPATH {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use axum::body::Body;
    use axum::extract::Request;
    use ghostip_core::{PodRef, Protocol, ServiceKey, Target};
    use ghostip_session::layers::conntrack::StaleFlow;
    use ghostip_session::layers::dns::DNS;
    use tower::ServiceExt as _;

    fn t(s: &str) -> Time {
        s.parse().unwrap()
    }

    fn tracking(layer: Layer, path: &str, service: &str, target: &str, kind: &str) -> TrackingView {
        let ip = target
            .parse::<std::net::SocketAddr>()
            .map(|a| a.ip())
            .or_else(|_| target.parse::<IpAddr>())
            .unwrap();
        TrackingView {
            path: path.to_string(),
            layer,
            service: service.to_string(),
            target: target.to_string(),
            ip,
            kind: kind.to_string(),
            verdict: "open".to_string(),
            since: t("2026-03-19T08:00:00Z"),
            last_seen: Some(t("2026-03-19T08:00:05Z")),
            converged_by: None,
            window_s: None,
            former_pod: None,
            expected_lag_s: 2.0,
            t0_correction: None,
        }
    }

    /// node-2 with iptables: 10.244.1.7 held stale by two Services, converging in a third,
    /// missing in a fourth and still answered by DNS; other IPs held too.
    fn status() -> AgentStatus {
        let dp = "iptables/node-2";
        let dns = "dns-pod/10.244.1.5:53@node-2";
        let mut converging = tracking(DATAPATH, dp, "demo/db", "10.244.1.7:5432", "stale");
        converging.converged_by = Some(t("2026-03-19T08:00:06Z"));
        AgentStatus {
            node: "node-2".to_string(),
            datapath: Some("iptables".to_string()),
            truth_synced: true,
            last_read: ReadView {
                at: Some(t("2026-03-19T08:00:05.250Z")),
                ..ReadView::default()
            },
            open: vec![
                tracking(DATAPATH, dp, "demo/web", "10.244.1.7:8080", "stale"),
                tracking(DATAPATH, dp, "demo/web", "10.244.1.8:8080", "stale"),
                tracking(DATAPATH, dp, "demo/api", "10.244.1.7:9090", "stale"),
                converging,
                tracking(DATAPATH, dp, "demo/new", "10.244.1.7:80", "missing"),
                tracking(DNS, dns, "demo/web-headless", "10.244.1.7", "stale"),
                tracking(DATAPATH, dp, "demo/v6", "[fd00::7]:8080", "stale"),
                tracking(DATAPATH, dp, "demo/web", "10.244.1.70:8080", "stale"),
            ],
            ..AgentStatus::default()
        }
    }

    async fn get_json(status: AgentStatus, path: &str) -> (StatusCode, serde_json::Value) {
        let app = routes(Arc::new(Mutex::new(status)));
        let resp = app
            .oneshot(Request::builder().uri(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let code = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn an_ip_is_held_by_the_open_unconverged_stale_datapath_trackings_of_that_ip() {
        let (code, v) = get_json(status(), "/v1/ips/10.244.1.7").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            v,
            serde_json::json!({
                "node": "node-2",
                "synced": true,
                "read_at": "2026-03-19T08:00:05.25Z",
                "datapath": "iptables",
                "error": null,
                "holding": [
                    "demo/web -> 10.244.1.7:8080",
                    "demo/api -> 10.244.1.7:9090",
                ],
                "stale_flows": [],
            })
        );
        let (_, v) = get_json(status(), "/v1/ips/10.244.1.8").await;
        assert_eq!(
            v["holding"],
            serde_json::json!(["demo/web -> 10.244.1.8:8080"])
        );
        // IPv6, in any spelling.
        for path in [
            "/v1/ips/fd00::7",
            "/v1/ips/fd00:0:0:0:0:0:0:7",
            "/v1/ips/fd00%3A%3A7",
        ] {
            let (_, v) = get_json(status(), path).await;
            assert_eq!(
                v["holding"],
                serde_json::json!(["demo/v6 -> [fd00::7]:8080"]),
                "{path}"
            );
        }
        // An IP nothing holds.
        let (code, v) = get_json(status(), "/v1/ips/10.244.1.9").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(v["holding"], serde_json::json!([]));
    }

    #[tokio::test]
    async fn before_the_first_read_and_without_a_datapath_the_answer_says_so() {
        let st = AgentStatus {
            node: "node-3".to_string(),
            datapath_error: Some("no datapath detected (iptables: not found)".to_string()),
            ..AgentStatus::default()
        };
        let (code, v) = get_json(st, "/v1/ips/10.244.1.7").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            v,
            serde_json::json!({
                "node": "node-3",
                "synced": false,
                "read_at": null,
                "datapath": null,
                "error": "no datapath detected (iptables: not found)",
                "holding": [],
                "stale_flows": [],
            })
        );
    }

    #[tokio::test]
    async fn a_malformed_ip_is_400() {
        for path in ["/v1/ips/10.244.1", "/v1/ips/web", "/v1/ips/10.244.1.7:8080"] {
            let (code, v) = get_json(status(), path).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{path}");
            assert!(
                v["error"]
                    .as_str()
                    .unwrap()
                    .contains("is not an IP address"),
                "{v}"
            );
        }
    }

    /// A confirmed stale conntrack flow from `client` to `target`.
    fn flow(client: &str, via: Option<&str>, target: &str, left_at: Option<&str>) -> StaleFlow {
        let sock = |s: &str| {
            let a: std::net::SocketAddr = s.parse().unwrap();
            Target::socket(a.ip(), a.port())
        };
        StaleFlow {
            service: ServiceKey::new("demo", "web"),
            proto: Protocol::Tcp,
            client_ip: client.parse().unwrap(),
            client_pod: None,
            via: via.map(sock),
            target: sock(target),
            former_owner: Some("demo/web-0".into()),
            left_at: left_at.map(t),
            first_seen: t("2026-03-19T08:00:11Z"),
            last_seen: t("2026-03-19T08:00:15Z"),
            last_packet: Some(t("2026-03-19T08:00:14Z")),
            outlived_by: None,
            entries: 1,
            unreplied: 0,
            max_timeout_s: Some(431_999),
            confirmed: true,
        }
    }

    /// The conntrack layer's confirmed stale flows to the IP are listed with the node, the
    /// client, where the client sent them and since when; flows to other IPs and
    /// unconfirmed ones are not.
    #[tokio::test]
    async fn an_ip_lists_the_confirmed_stale_conntrack_flows_to_it() {
        let mut st = status();
        let mut pooled = flow(
            "10.244.2.10",
            Some("10.96.5.5:80"),
            "10.244.1.7:8080",
            Some("2026-03-19T08:00:10Z"),
        );
        pooled.client_pod = Some(PodRef {
            namespace: "demo".into(),
            name: "order-7c9".into(),
            uid: "u1".into(),
        });
        let direct = flow("10.244.2.11", None, "10.244.1.7:8080", None);
        let mut unconfirmed = flow("10.244.2.12", Some("10.96.5.5:80"), "10.244.1.7:8080", None);
        unconfirmed.confirmed = false;
        st.conntrack.stale_flows = vec![
            pooled,
            flow(
                "10.244.2.10",
                Some("10.96.5.5:80"),
                "10.244.1.70:8080",
                None,
            ),
            direct,
            unconfirmed,
            flow("fd00::10", Some("[fd00::96]:80"), "[fd00::7]:8080", None),
        ];
        let (code, v) = get_json(st.clone(), "/v1/ips/10.244.1.7").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            v["stale_flows"],
            serde_json::json!([
                {
                    "node": "node-2",
                    "client": "10.244.2.10",
                    "client_pod": "demo/order-7c9",
                    "original_dst": "10.96.5.5:80",
                    "since": "2026-03-19T08:00:10Z",
                },
                {
                    "node": "node-2",
                    "client": "10.244.2.11",
                    "client_pod": null,
                    "original_dst": "10.244.1.7:8080",
                    "since": "2026-03-19T08:00:11Z",
                },
            ])
        );
        // The datapath's answer is unchanged beside them.
        assert_eq!(v["holding"].as_array().map(Vec::len), Some(2));
        let v = ip_view(&st, "fd00:0:0:0:0:0:0:7".parse().unwrap());
        assert_eq!(v.stale_flows.len(), 1);
        assert_eq!(v.stale_flows[0].original_dst, "[fd00::96]:80");
        let v = ip_view(&st, "::ffff:10.244.1.70".parse().unwrap());
        assert_eq!(v.stale_flows.len(), 1);
        assert!(
            ip_view(&st, "10.244.1.9".parse().unwrap())
                .stale_flows
                .is_empty()
        );
    }

    #[test]
    fn ipv4_mapped_addresses_match_their_ipv4_trackings() {
        let v = ip_view(&status(), "::ffff:10.244.1.8".parse().unwrap());
        assert_eq!(v.holding, vec!["demo/web -> 10.244.1.8:8080".to_string()]);
    }
}
