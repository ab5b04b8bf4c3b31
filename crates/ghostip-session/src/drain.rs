//! Whether every layer has let go of one pod IP: the judgment `ghostip drain-wait` waits on before a terminating pod may stop serving.
//!
//! Pure, time passed in. The adapter feeds a [`DrainModel`] what it learns while the pod is
//! in its preStop hook, and asks [`DrainModel::decide`] after each step:
//!
//! - **the endpoint** ([`EndpointState`]): until the EndpointSlices show the IP `ready:
//!   false` / `terminating: true`, or no longer list it, nothing else is judged — no layer
//!   has a reason to let go of a ready endpoint. The moment it left the ready set is t0.
//! - **each DNS path** ([`DnsPathHold`]): the path lets go at the first answer after t0 that
//!   no longer holds the IP, and the clients it answered let go when the TTL it handed out
//!   with the IP expires: every answer that held it pushes the let-go time to `answer + TTL`.
//!   A path that does not cache the cluster domain answered fresh until t0, so its clients
//!   may keep the IP until t0 + the TTL such answers carry (the Corefile's `client_ttl`).
//! - **each node's datapath** ([`NodeReport`]): the node's agent read its datapath after t0
//!   and no Service routes to the IP any more.
//! - **established connections** (optional): none left to the pod's listening ports.
//!
//! The wait never passes `max_wait` after the start ([`Release::Bound`]); a layer it cannot
//! see ([`LayerView::Unknown`]) is named, and instead of its let-go time the model waits for
//! the fallback budget (the audit's staleness budget for the Service), never zero.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::{Observation, ObservationResult, Time};
use serde::Serialize;

/// Where the pod's IP stands in the truth.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum EndpointState {
    /// Not known yet (the truth has not synced).
    Unknown,
    /// Some EndpointSlice lists the IP ready: nothing lets go of a ready endpoint.
    Ready,
    /// Every slice that lists the IP shows it not ready (terminating); since when.
    Terminating {
        /// When it left the ready set (the slice's change time).
        since: Time,
    },
    /// No slice lists the IP (the pod left, or it never was an endpoint).
    NotListed {
        /// When that was first seen.
        since: Time,
    },
}

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

/// One DNS path as the drain sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DnsPathHold {
    /// Path id.
    pub path: String,
    /// Whether the path caches the cluster domain (a caching path reveals, in its first
    /// answer, the expiry of every copy it handed out; one that does not cache answered fresh
    /// until t0).
    pub caches: bool,
    /// TTL a fresh answer carries to clients.
    pub client_ttl: Duration,
    /// Last answer that still held the IP.
    pub last_held: Option<Time>,
    /// Latest expiry of an answer that held the IP (answer time + TTL).
    pub expiry: Option<Time>,
    /// First answer after t0 (and after the last one that held it) without the IP.
    pub first_without: Option<Time>,
    /// The last query failed, with why.
    pub failing: Option<String>,
}

impl DnsPathHold {
    /// When this path and the clients it answered let go, once the path no longer answers
    /// with the IP; `None` while it still does (or has not answered since t0).
    fn let_go(&self, t0: Time) -> Option<Time> {
        let dropped = self.first_without?;
        let mut at = dropped;
        if let Some(e) = self.expiry {
            at = at.max(e);
        }
        if !self.caches {
            at = at.max(t0.checked_add(self.client_ttl).unwrap_or(t0));
        }
        Some(at)
    }
}

/// One layer's state for the log line and the decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum LayerView {
    /// The layer let go at `at`.
    LetGo {
        /// When.
        at: Time,
    },
    /// The layer still holds the IP (or its clients may); `until` when that is known.
    Holding {
        /// Why.
        why: String,
        /// When it will let go at the latest, when known (a TTL expiry).
        #[serde(skip_serializing_if = "Option::is_none")]
        until: Option<Time>,
    },
    /// The layer could not be checked: the fallback budget stands in for it.
    Unknown {
        /// Why.
        why: String,
    },
}

/// One layer and path of the decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerStatus {
    /// `endpoint`, `dns`, `datapath`, `connections`.
    pub layer: &'static str,
    /// The path (`dns-pod/10.244.1.5:53`, `node-2`, the pod's ports).
    pub path: String,
    /// Its state.
    #[serde(flatten)]
    pub view: LayerView,
}

/// Why the wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Release {
    /// Every layer let go.
    LetGo,
    /// Every layer it could see let go, and the fallback budget covered those it could not.
    LetGoWithFallback,
    /// `max_wait` was reached with layers still holding.
    Bound,
    /// The hook was signalled (SIGTERM, SIGINT) with layers still holding.
    Signal,
}

/// The decision after a step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// `Some` when the pod may stop now.
    pub release: Option<Release>,
    /// Every layer, with its state.
    pub layers: Vec<LayerStatus>,
    /// The earliest time the decision can change by time alone (a TTL expiring, the
    /// fallback or the bound), for the adapter's sleep.
    pub next_deadline: Option<Time>,
}

/// Settings.
#[derive(Clone, Debug, PartialEq)]
pub struct DrainConfig {
    /// The pod's IP.
    pub ip: IpAddr,
    /// When the drain started (the preStop hook ran).
    pub started: Time,
    /// Never wait longer than this after `started`.
    pub max_wait: Duration,
    /// What stands in for a layer that cannot be checked: a wait from t0 (the audit's
    /// staleness budget for the Service), with where it came from.
    pub fallback: (Duration, String),
    /// Also wait for established connections to the pod's listening ports to close.
    pub wait_connections: bool,
}

/// The drain of one pod IP.
#[derive(Clone, Debug)]
pub struct DrainModel {
    cfg: DrainConfig,
    endpoint: EndpointState,
    dns: BTreeMap<String, DnsPathHold>,
    /// DNS could not be checked at all (no path reachable), with why.
    dns_unknown: Option<String>,
    nodes: BTreeMap<String, Result<NodeReport, String>>,
    /// Nodes are not checked at all, with why (no agent reachable or none deployed).
    nodes_unknown: Option<String>,
    connections: Option<(Time, usize)>,
    connections_let_go: Option<Time>,
    connections_unknown: Option<String>,
    /// Other parts that could not be checked (the endpoint without an API server, CoreDNS
    /// pods without RBAC in kube-system), with why.
    unknown: Vec<LayerStatus>,
}

impl DrainModel {
    /// A drain that knows nothing yet.
    pub fn new(cfg: DrainConfig) -> Self {
        Self {
            cfg,
            endpoint: EndpointState::Unknown,
            dns: BTreeMap::new(),
            dns_unknown: None,
            nodes: BTreeMap::new(),
            nodes_unknown: None,
            connections: None,
            connections_let_go: None,
            connections_unknown: None,
            unknown: Vec::new(),
        }
    }

    /// A part of `layer` (`endpoint`, `dns`, `datapath`) that cannot be checked: the fallback
    /// budget stands in for it.
    pub fn unknown(
        &mut self,
        layer: &'static str,
        path: impl Into<String>,
        why: impl Into<String>,
    ) {
        self.unknown.push(LayerStatus {
            layer,
            path: path.into(),
            view: LayerView::Unknown { why: why.into() },
        });
    }

    /// A better stand-in for what cannot be checked, learnt during the drain (the audit's
    /// budget once the pod's Service is known).
    pub fn set_fallback(&mut self, fallback: (Duration, String)) {
        self.cfg.fallback = fallback;
    }

    /// The settings.
    pub fn config(&self) -> &DrainConfig {
        &self.cfg
    }

    /// The endpoint's state in the truth.
    pub fn endpoint(&self) -> &EndpointState {
        &self.endpoint
    }

    /// t0: when the IP left the ready endpoints (or was first seen unlisted).
    pub fn t0(&self) -> Option<Time> {
        match self.endpoint {
            EndpointState::Terminating { since } | EndpointState::NotListed { since } => {
                Some(since)
            }
            EndpointState::Unknown | EndpointState::Ready => None,
        }
    }

    /// The endpoint as the truth shows it now. A terminating endpoint keeps the t0 it was
    /// first seen with.
    pub fn on_endpoint(&mut self, state: EndpointState) {
        match (&self.endpoint, &state) {
            (EndpointState::Terminating { .. }, EndpointState::Terminating { .. })
            | (EndpointState::NotListed { .. }, EndpointState::NotListed { .. }) => {}
            (EndpointState::Terminating { since }, EndpointState::NotListed { .. }) => {
                // Gone after terminating: t0 stays the moment it left the ready set.
                self.endpoint = EndpointState::NotListed { since: *since };
            }
            _ => self.endpoint = state,
        }
    }

    /// A DNS path to watch; `caches`: whether it caches the cluster domain, `client_ttl`:
    /// the TTL its fresh answers carry.
    pub fn add_dns_path(&mut self, path: &str, caches: bool, client_ttl: Duration) {
        let hold = self
            .dns
            .entry(path.to_string())
            .or_insert_with(|| DnsPathHold {
                path: path.to_string(),
                caches,
                client_ttl,
                last_held: None,
                expiry: None,
                first_without: None,
                failing: None,
            });
        hold.caches = caches;
        hold.client_ttl = client_ttl;
    }

    /// DNS cannot be checked (no path found or reachable); paths that can be are still
    /// judged.
    pub fn dns_unknown(&mut self, why: impl Into<String>) {
        self.dns_unknown = Some(why.into());
    }

    /// One answer of one DNS path for one of the pod's Services.
    pub fn on_dns(&mut self, path: &str, obs: &Observation) {
        let ip = self.cfg.ip;
        let t0 = self.t0();
        let Some(hold) = self.dns.get_mut(path) else {
            return;
        };
        match &obs.result {
            ObservationResult::Failed(reason) => hold.failing = Some(reason.to_string()),
            ObservationResult::Held(held) => {
                hold.failing = None;
                match held.iter().find(|h| h.target.ip == ip) {
                    Some(h) => {
                        hold.last_held = Some(hold.last_held.map_or(obs.at, |l| l.max(obs.at)));
                        let ttl = Duration::from_secs(u64::from(h.ttl.unwrap_or(0)));
                        let expiry = obs.at.checked_add(ttl).unwrap_or(obs.at);
                        hold.expiry = Some(hold.expiry.map_or(expiry, |e| e.max(expiry)));
                        hold.first_without = None;
                    }
                    None => {
                        // Only an answer after t0 says the path dropped the IP; before t0 it
                        // had no reason to hold it.
                        if t0.is_some_and(|t0| obs.at >= t0) && hold.first_without.is_none() {
                            hold.first_without = Some(obs.at);
                        }
                    }
                }
            }
        }
    }

    /// What a node's agent reported, or why it could not be asked.
    pub fn on_node(&mut self, node: &str, report: Result<NodeReport, String>) {
        self.nodes.insert(node.to_string(), report);
    }

    /// Nodes cannot be checked at all.
    pub fn nodes_unknown(&mut self, why: impl Into<String>) {
        self.nodes_unknown = Some(why.into());
    }

    /// Established connections to the pod's listening ports, counted at `at`.
    pub fn on_connections(&mut self, at: Time, established: usize) {
        self.connections = Some((at, established));
        if established == 0 {
            self.connections_let_go.get_or_insert(at);
        } else {
            self.connections_let_go = None;
        }
    }

    /// Connections cannot be counted.
    pub fn connections_unknown(&mut self, why: impl Into<String>) {
        self.connections_unknown = Some(why.into());
    }

    fn bound(&self) -> Time {
        self.cfg
            .started
            .checked_add(self.cfg.max_wait)
            .unwrap_or(self.cfg.started)
    }

    fn fallback_until(&self, t0: Time) -> Time {
        t0.checked_add(self.cfg.fallback.0).unwrap_or(t0)
    }

    /// Whether the pod may stop now, and every layer's state.
    pub fn decide(&self, now: Time) -> Decision {
        let mut layers = Vec::new();
        let mut deadlines = vec![self.bound()];
        let mut holding = false;
        let mut unknown = false;
        let endpoint_view = match &self.endpoint {
            EndpointState::Unknown => LayerView::Holding {
                why: "the truth has not synced yet".into(),
                until: None,
            },
            EndpointState::Ready => LayerView::Holding {
                why: "an EndpointSlice still lists the IP ready".into(),
                until: None,
            },
            EndpointState::Terminating { since } | EndpointState::NotListed { since } => {
                LayerView::LetGo { at: *since }
            }
        };
        let t0 = self.t0();
        holding |= t0.is_none();
        layers.push(LayerStatus {
            layer: "endpoint",
            path: self.cfg.ip.to_string(),
            view: endpoint_view,
        });
        if let Some(t0) = t0 {
            let mut views = Vec::new();
            self.dns_views(t0, now, &mut views);
            self.node_views(t0, &mut views);
            self.connection_views(&mut views);
            views.extend(self.unknown.iter().cloned());
            for s in views {
                match &s.view {
                    LayerView::Holding { until, .. } => {
                        holding = true;
                        deadlines.extend(*until);
                    }
                    LayerView::Unknown { .. } => unknown = true,
                    LayerView::LetGo { .. } => {}
                }
                layers.push(s);
            }
        }
        let fallback_pending = unknown && t0.is_some_and(|t0| now < self.fallback_until(t0));
        if let Some(t0) = t0.filter(|_| unknown) {
            deadlines.push(self.fallback_until(t0));
        }
        let release = if !holding && !fallback_pending && t0.is_some() {
            Some(if unknown {
                Release::LetGoWithFallback
            } else {
                Release::LetGo
            })
        } else if now >= self.bound() {
            Some(Release::Bound)
        } else {
            None
        };
        let next_deadline = deadlines.into_iter().filter(|d| *d > now).min();
        Decision {
            release,
            layers,
            next_deadline,
        }
    }

    fn dns_views(&self, t0: Time, now: Time, out: &mut Vec<LayerStatus>) {
        if let Some(why) = &self.dns_unknown {
            out.push(LayerStatus {
                layer: "dns",
                path: "*".into(),
                view: LayerView::Unknown { why: why.clone() },
            });
        }
        for hold in self.dns.values() {
            let view = match hold.let_go(t0) {
                Some(at) if at <= now => LayerView::LetGo { at },
                Some(at) => LayerView::Holding {
                    why: if hold.expiry.is_some_and(|e| e >= at) {
                        "clients may hold an answer with the IP until its TTL expires".into()
                    } else {
                        format!(
                            "fresh answers until t0 carried TTL {} s to clients",
                            hold.client_ttl.as_secs()
                        )
                    },
                    until: Some(at),
                },
                None if hold.failing.is_some() && hold.last_held.is_none() => LayerView::Unknown {
                    why: format!(
                        "the path does not answer: {}",
                        hold.failing.as_deref().unwrap_or_default()
                    ),
                },
                None if hold.last_held.is_some() => LayerView::Holding {
                    why: "the path still answers with the IP".into(),
                    until: hold.expiry,
                },
                None => LayerView::Holding {
                    why: "no answer since the IP left the endpoints".into(),
                    until: None,
                },
            };
            out.push(LayerStatus {
                layer: "dns",
                path: hold.path.clone(),
                view,
            });
        }
    }

    fn node_views(&self, t0: Time, out: &mut Vec<LayerStatus>) {
        if let Some(why) = &self.nodes_unknown {
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

    fn connection_views(&self, out: &mut Vec<LayerStatus>) {
        if !self.cfg.wait_connections {
            return;
        }
        let path = format!("{} established", self.cfg.ip);
        let view = if let Some(why) = &self.connections_unknown {
            LayerView::Unknown { why: why.clone() }
        } else {
            match (self.connections, self.connections_let_go) {
                (_, Some(at)) => LayerView::LetGo { at },
                (Some((_, n)), None) => LayerView::Holding {
                    why: format!("{n} established connection(s) to the pod's ports"),
                    until: None,
                },
                (None, None) => LayerView::Holding {
                    why: "connections not counted yet".into(),
                    until: None,
                },
            }
        };
        out.push(LayerStatus {
            layer: "connections",
            path,
            view,
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ghostip_core::{HeldTarget, PathIdx, ServiceKey, Target};

    use super::*;

    const IP: &str = "10.244.1.7";

    fn t(s: f64) -> Time {
        Time::from_second(1_800_000_000)
            .unwrap()
            .checked_add(Duration::from_secs_f64(s))
            .unwrap()
    }

    fn model(max_wait: u64, fallback: u64) -> DrainModel {
        DrainModel::new(DrainConfig {
            ip: IP.parse().unwrap(),
            started: t(0.0),
            max_wait: Duration::from_secs(max_wait),
            fallback: (Duration::from_secs(fallback), "audit budget".into()),
            wait_connections: false,
        })
    }

    fn answer(at: f64, ips: &[&str], ttl: u32) -> Observation {
        Observation {
            path: PathIdx(0),
            service: ServiceKey::new("demo", "web"),
            at: t(at),
            result: ObservationResult::Held(
                ips.iter()
                    .map(|ip| HeldTarget {
                        target: Target::ip(ip.parse().unwrap()),
                        ttl: Some(ttl),
                        last_used: None,
                    })
                    .collect(),
            ),
            latency: None,
        }
    }

    /// Nothing lets go of a ready endpoint: the drain waits for the slices first, and the
    /// bound ends it whatever the layers say.
    #[test]
    fn a_ready_endpoint_holds_until_the_bound() {
        let mut m = model(20, 30);
        m.on_endpoint(EndpointState::Ready);
        let d = m.decide(t(5.0));
        assert_eq!(d.release, None);
        assert_eq!(d.next_deadline, Some(t(20.0)));
        assert_eq!(m.decide(t(20.0)).release, Some(Release::Bound));
    }

    /// A caching path (classic Corefile, cache 30): clients keep the cached answer until the
    /// cache entry's TTL runs out, which the path's answers reveal; the wait ends then.
    #[test]
    fn a_caching_path_lets_go_when_its_cached_answer_expires() {
        let mut m = model(60, 30);
        m.add_dns_path("dns-pod/a", true, Duration::from_secs(30));
        m.on_endpoint(EndpointState::Terminating { since: t(0.2) });
        m.on_dns("dns-pod/a", &answer(0.5, &[IP, "10.244.2.9"], 22));
        m.on_dns("dns-pod/a", &answer(10.0, &[IP, "10.244.2.9"], 12));
        let d = m.decide(t(10.0));
        assert_eq!(d.release, None);
        assert_eq!(d.next_deadline, Some(t(22.5)));
        m.on_dns("dns-pod/a", &answer(22.6, &["10.244.2.9"], 30));
        let d = m.decide(t(22.6));
        assert_eq!(d.release, Some(Release::LetGo));
        assert!(
            d.layers
                .iter()
                .any(|l| l.layer == "dns" && l.view == LayerView::LetGo { at: t(22.6) })
        );
    }

    /// A path that does not cache (the newest kubeadm Corefile) drops the IP at once, but
    /// every client that asked just before t0 holds a fresh answer for its TTL.
    #[test]
    fn a_non_caching_path_holds_for_the_ttl_handed_to_clients() {
        let mut m = model(60, 30);
        m.add_dns_path("dns-pod/a", false, Duration::from_secs(30));
        m.on_endpoint(EndpointState::Terminating { since: t(0.2) });
        m.on_dns("dns-pod/a", &answer(0.4, &["10.244.2.9"], 30));
        let d = m.decide(t(1.0));
        assert_eq!(d.release, None);
        assert_eq!(d.next_deadline, Some(t(30.2)));
        assert!(matches!(
            &d.layers[1].view,
            LayerView::Holding { why, .. } if why.contains("TTL 30 s")
        ));
        assert_eq!(m.decide(t(30.2)).release, Some(Release::LetGo));
    }

    /// An answer from before t0 says nothing: the path had no reason to drop the IP yet.
    #[test]
    fn answers_before_t0_do_not_count_as_let_go() {
        let mut m = model(60, 30);
        m.add_dns_path("dns-pod/a", true, Duration::from_secs(5));
        m.on_endpoint(EndpointState::Ready);
        m.on_dns("dns-pod/a", &answer(0.1, &["10.244.2.9"], 5));
        m.on_endpoint(EndpointState::Terminating { since: t(0.5) });
        assert_eq!(m.decide(t(1.0)).release, None);
        m.on_dns("dns-pod/a", &answer(1.2, &["10.244.2.9"], 5));
        assert_eq!(m.decide(t(1.2)).release, Some(Release::LetGo));
    }

    /// A node whose datapath still routes to the IP holds the drain until the bound, and is
    /// named; a node that read its datapath after t0 without the IP lets go.
    #[test]
    fn a_node_that_still_routes_to_the_ip_is_named_at_the_bound() {
        let mut m = model(25, 30);
        m.on_endpoint(EndpointState::Terminating { since: t(0.2) });
        m.on_node(
            "node-1",
            Ok(NodeReport {
                read_at: Some(t(1.5)),
                synced: true,
                holding: vec![],
            }),
        );
        m.on_node(
            "node-2",
            Ok(NodeReport {
                read_at: Some(t(1.6)),
                synced: true,
                holding: vec!["demo/web:8080".into()],
            }),
        );
        assert_eq!(m.decide(t(10.0)).release, None);
        let d = m.decide(t(25.0));
        assert_eq!(d.release, Some(Release::Bound));
        let held: Vec<&str> = d
            .layers
            .iter()
            .filter(|l| matches!(l.view, LayerView::Holding { .. }))
            .map(|l| l.path.as_str())
            .collect();
        assert_eq!(held, vec!["node-2"]);
    }

    /// A read from before t0 proves nothing about the IP's removal.
    #[test]
    fn a_node_read_before_t0_holds() {
        let mut m = model(25, 30);
        m.on_endpoint(EndpointState::Terminating { since: t(2.0) });
        m.on_node(
            "node-1",
            Ok(NodeReport {
                read_at: Some(t(1.0)),
                synced: true,
                holding: vec![],
            }),
        );
        assert_eq!(m.decide(t(3.0)).release, None);
    }

    /// An unreachable agent is unknown: the fallback budget from t0 stands in for it, never
    /// zero, and the release says so.
    #[test]
    fn an_unknown_layer_waits_for_the_fallback_budget() {
        let mut m = model(60, 12);
        m.on_endpoint(EndpointState::Terminating { since: t(1.0) });
        m.on_node("node-3", Err("connection refused".into()));
        let d = m.decide(t(2.0));
        assert_eq!(d.release, None);
        assert_eq!(d.next_deadline, Some(t(13.0)));
        assert_eq!(m.decide(t(13.0)).release, Some(Release::LetGoWithFallback));
    }

    /// With --wait-connections, established connections hold the drain until they close.
    #[test]
    fn established_connections_hold_when_asked() {
        let mut m = DrainModel::new(DrainConfig {
            wait_connections: true,
            ..model(60, 30).cfg
        });
        m.on_endpoint(EndpointState::NotListed { since: t(0.5) });
        m.on_connections(t(1.0), 3);
        assert_eq!(m.decide(t(1.0)).release, None);
        m.on_connections(t(4.0), 0);
        assert_eq!(m.decide(t(4.0)).release, Some(Release::LetGo));
    }

    /// A terminating endpoint that later leaves the slices keeps its t0.
    #[test]
    fn t0_is_when_the_ip_left_the_ready_set() {
        let mut m = model(60, 30);
        m.on_endpoint(EndpointState::Terminating { since: t(0.3) });
        m.on_endpoint(EndpointState::NotListed { since: t(9.0) });
        assert_eq!(m.t0(), Some(t(0.3)));
    }
}
