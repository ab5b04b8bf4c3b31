//! What the agent serves: the `/status` document (a summary first, then the open trackings and one section per layer) and the per-IP answer of `/v1/ips/{ip}`.
//!
//! Both endpoints read a snapshot that the agent's loop publishes under one mutex after
//! each step; a handler holds the lock only to copy what it serves.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ghostip_core::Layer;
use serde::Serialize;
use serde::ser::SerializeMap as _;

use crate::layers::LayerSnapshot;
use crate::layers::node::{IpView, TrackingView};

/// What `/status` serves.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct AgentStatus {
    /// One sentence: what is wrong on this node now, or that every layer matches the truth.
    pub summary: String,
    pub node: String,
    pub truth_synced: bool,
    pub max_cpu_percent: f64,
    /// Open stale/missing trackings of this node's paths (every layer's).
    pub open: Vec<TrackingView>,
    /// One section per running layer, by layer id.
    #[serde(serialize_with = "layer_sections")]
    pub layers: BTreeMap<Layer, Arc<dyn LayerSnapshot>>,
}

/// `layers` as `{ "<id>": <section> }`.
fn layer_sections<S: serde::Serializer>(
    layers: &BTreeMap<Layer, Arc<dyn LayerSnapshot>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(layers.len()))?;
    for (layer, snap) in layers {
        m.serialize_entry(layer.as_str(), &snap.to_json())?;
    }
    m.end()
}

impl AgentStatus {
    /// What each running layer reads on this node (`datapath: iptables`); `null` where the
    /// layer has no choice to report.
    pub fn sources(&self) -> BTreeMap<String, Option<String>> {
        self.layers
            .iter()
            .map(|(l, s)| (l.to_string(), s.source()))
            .collect()
    }

    /// Fills `summary` from the open trackings and the layers' own problems.
    pub fn summarize(&mut self) {
        self.summary = summary(self);
    }
}

/// The answer first: not synced yet; how many targets are held past their expected lag and
/// where; how many changes still converge within it; the layers that cannot be read.
fn summary(st: &AgentStatus) -> String {
    let mut parts = Vec::new();
    if !st.truth_synced {
        parts.push("the truth is not synced: nothing is judged".to_string());
    } else {
        let open: Vec<&TrackingView> = st
            .open
            .iter()
            .filter(|t| t.converged_by.is_none())
            .collect();
        let findings: Vec<&&TrackingView> = open
            .iter()
            .filter(|t| t.verdict == "over expected lag" || t.verdict == "stuck")
            .collect();
        if findings.is_empty() && open.is_empty() {
            parts.push("every path matches the truth".to_string());
        } else if !findings.is_empty() {
            let mut paths: Vec<&str> = findings.iter().map(|t| t.path.as_str()).collect();
            paths.sort_unstable();
            paths.dedup();
            let stuck = findings.iter().filter(|t| t.verdict == "stuck").count();
            parts.push(format!(
                "{} target{} held past the expected lag ({} stuck) on {}",
                findings.len(),
                if findings.len() == 1 { "" } else { "s" },
                stuck,
                paths.join(", ")
            ));
        }
        let converging = open.len()
            - open
                .iter()
                .filter(|t| t.verdict == "over expected lag" || t.verdict == "stuck")
                .count();
        if converging > 0 {
            parts.push(format!(
                "{converging} change{} converging within the expected lag",
                if converging == 1 { "" } else { "s" }
            ));
        }
    }
    for (layer, snap) in &st.layers {
        if let Some(problem) = snap.problem() {
            parts.push(format!("{layer}: {problem}"));
        }
    }
    format!("{}: {}", st.node, parts.join("; "))
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

/// The answer for `ip` from the status document: each layer adds what it knows.
pub(super) fn ip_view(st: &AgentStatus, ip: IpAddr) -> IpView {
    let ip = ip.to_canonical();
    let mut view = IpView {
        node: st.node.clone(),
        synced: st.truth_synced,
        read_at: None,
        datapath: None,
        error: None,
        holding: Vec::new(),
        stale_flows: Vec::new(),
    };
    for snap in st.layers.values() {
        snap.answer_ip(ip, &st.open, &mut view);
    }
    view
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::layers::conntrack::adapter::ConntrackStatus;
    use crate::layers::datapath::adapter::{DatapathStatus, ReadView};
    use axum::body::Body;
    use axum::extract::Request;
    use ghostip_core::Time;
    use ghostip_core::{PodRef, Protocol, ServiceKey, Target};
    use ghostip_datapath::layers::CONNTRACK;
    use ghostip_datapath::layers::DATAPATH;
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
            truth_synced: true,
            layers: BTreeMap::from([(
                DATAPATH,
                Arc::new(DatapathStatus {
                    datapath: Some("iptables".to_string()),
                    last_read: ReadView {
                        at: Some(t("2026-03-19T08:00:05.250Z")),
                        ..ReadView::default()
                    },
                    ..DatapathStatus::default()
                }) as Arc<dyn LayerSnapshot>,
            )]),
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
            layers: BTreeMap::from([(
                DATAPATH,
                Arc::new(DatapathStatus {
                    error: Some("no datapath detected (iptables: not found)".to_string()),
                    ..DatapathStatus::default()
                }) as Arc<dyn LayerSnapshot>,
            )]),
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
        let stale_flows = vec![
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
        st.layers.insert(
            CONNTRACK,
            Arc::new(ConntrackStatus {
                stale_flows,
                ..ConntrackStatus::default()
            }),
        );
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

    /// `/status` leads with one sentence, then one section per running layer under
    /// `layers`, keyed by the layer's id.
    #[tokio::test]
    async fn status_leads_with_the_summary_and_has_one_section_per_layer() {
        let mut st = status();
        st.open[0].verdict = "over expected lag".to_string();
        st.open[1].verdict = "stuck".to_string();
        st.layers.insert(
            CONNTRACK,
            Arc::new(ConntrackStatus {
                error: Some("netlink: permission denied".to_string()),
                ..ConntrackStatus::default()
            }),
        );
        st.summarize();
        // The summary is the first key of the document.
        let body = serde_json::to_string(&st).unwrap();
        assert!(body.starts_with("{\"summary\":\"node-2: "), "{body}");
        let (code, v) = get_json(st, "/status").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            v["summary"],
            "node-2: 2 targets held past the expected lag (1 stuck) on iptables/node-2; \
             5 changes converging within the expected lag; conntrack: netlink: permission denied"
        );
        let keys: Vec<&str> = v["layers"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["conntrack", "datapath"]);
        assert_eq!(v["layers"]["datapath"]["datapath"], "iptables");
        assert_eq!(
            v["layers"]["conntrack"]["error"],
            "netlink: permission denied"
        );
    }

    #[test]
    fn the_summary_says_when_nothing_is_judged_or_everything_matches() {
        let mut st = AgentStatus {
            node: "node-1".to_string(),
            ..AgentStatus::default()
        };
        st.summarize();
        assert_eq!(
            st.summary,
            "node-1: the truth is not synced: nothing is judged"
        );
        st.truth_synced = true;
        st.summarize();
        assert_eq!(st.summary, "node-1: every path matches the truth");
    }
}
