//! Whether every layer has let go of one pod IP: the judgment `ghostip drain-wait` waits on before a terminating pod may stop serving.
//!
//! Pure, time passed in. The adapter feeds a [`DrainModel`] what it learns while the pod is
//! in its preStop hook, and asks [`DrainModel::decide`] after each step:
//!
//! - **the endpoint** ([`EndpointState`]): until the EndpointSlices show the IP `ready:
//!   false` / `terminating: true`, or no longer list it, nothing else is judged — no layer
//!   has a reason to let go of a ready endpoint. The moment it left the ready set is t0.
//! - **each registered layer's part** ([`LetGo`]), declared next to the layer's model: DNS
//!   (`layers::dns::drain`: each path and the clients it answered, by the TTLs it handed
//!   out) and the nodes' datapaths (`layers::datapath::drain`: each node's agent read its
//!   datapath after t0 and no Service routes to the IP any more);
//! - **established connections** ([`ConnectionsLetGo`], optional): none left to the pod's
//!   listening ports.
//!
//! The wait never passes `max_wait` after the start ([`Release::Bound`]); a layer it cannot
//! see ([`LayerView::Unknown`]) is named, and instead of its let-go time the model waits for
//! the fallback budget (the audit's staleness budget for the Service), never zero.

use std::any::Any;
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::Time;
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
}

/// One layer's part of a drain: what it learnt of the pod's IP, judged from t0.
///
/// Each layer that can hold a copy of an endpoint declares one next to its model
/// (`layers::<name>::drain`); `ghostip drain-wait` registers every layer's part and feeds it
/// what its adapter learns, reaching it by type with [`DrainModel::part_mut`].
pub trait LetGo: Any + Send + std::fmt::Debug {
    /// The state of each of the layer's paths at `now`; `t0`: when the IP left the ready
    /// endpoints.
    fn views(&self, t0: Time, now: Time, out: &mut Vec<LayerStatus>);
}

/// The pod's own established connections: not a copy of the truth, but what a pod that stops
/// now would cut.
#[derive(Clone, Debug, Default)]
pub struct ConnectionsLetGo {
    path: String,
    connections: Option<(Time, usize)>,
    let_go: Option<Time>,
    unknown: Option<String>,
}

impl ConnectionsLetGo {
    /// Connections to `ip`'s listening ports.
    pub fn new(ip: IpAddr) -> Self {
        Self {
            path: format!("{ip} established"),
            ..Self::default()
        }
    }

    /// Established connections to the pod's listening ports, counted at `at`.
    pub fn on_count(&mut self, at: Time, established: usize) {
        self.connections = Some((at, established));
        if established == 0 {
            self.let_go.get_or_insert(at);
        } else {
            self.let_go = None;
        }
    }

    /// Connections cannot be counted.
    pub fn unknown(&mut self, why: impl Into<String>) {
        self.unknown = Some(why.into());
    }
}

impl LetGo for ConnectionsLetGo {
    fn views(&self, _t0: Time, _now: Time, out: &mut Vec<LayerStatus>) {
        let view = if let Some(why) = &self.unknown {
            LayerView::Unknown { why: why.clone() }
        } else {
            match (self.connections, self.let_go) {
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
            path: self.path.clone(),
            view,
        });
    }
}

/// The drain of one pod IP.
#[derive(Debug)]
pub struct DrainModel {
    cfg: DrainConfig,
    endpoint: EndpointState,
    /// Every registered layer's part, in registration order.
    parts: Vec<Box<dyn LetGo>>,
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
            parts: Vec::new(),
            unknown: Vec::new(),
        }
    }

    /// Registers a layer's part: from now on the decision asks it whether it let go.
    #[must_use]
    pub fn with_part(mut self, part: impl LetGo) -> Self {
        self.parts.push(Box::new(part));
        self
    }

    /// Registers a layer's part built elsewhere (a registration table).
    pub fn register(&mut self, part: Box<dyn LetGo>) {
        self.parts.push(part);
    }

    /// The registered part of type `T`, for its adapter.
    pub fn part_mut<T: LetGo>(&mut self) -> Option<&mut T> {
        self.parts
            .iter_mut()
            .find_map(|p| (&mut **p as &mut dyn Any).downcast_mut::<T>())
    }

    /// The registered part of type `T`.
    pub fn part<T: LetGo>(&self) -> Option<&T> {
        self.parts
            .iter()
            .find_map(|p| (&**p as &dyn Any).downcast_ref::<T>())
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
            for part in &self.parts {
                part.views(t0, now, &mut views);
            }
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
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ghostip_core::{HeldTarget, Observation, ObservationResult, PathIdx, ServiceKey, Target};

    use super::*;
    use crate::layers::datapath::drain::{NodeReport, NodesLetGo};
    use crate::layers::dns::drain::DnsLetGo;

    /// The drain model as `drain-wait` feeds it, one call per kind of news.
    trait Feed {
        fn add_dns_path(&mut self, path: &str, caches: bool, client_ttl: Duration);
        fn on_dns(&mut self, path: &str, obs: &Observation);
        fn on_node(&mut self, node: &str, report: Result<NodeReport, String>);
        fn on_connections(&mut self, at: Time, established: usize);
    }

    impl Feed for DrainModel {
        fn add_dns_path(&mut self, path: &str, caches: bool, client_ttl: Duration) {
            self.part_mut::<DnsLetGo>()
                .unwrap()
                .add_path(path, caches, client_ttl);
        }
        fn on_dns(&mut self, path: &str, obs: &Observation) {
            let t0 = self.t0();
            self.part_mut::<DnsLetGo>()
                .unwrap()
                .on_answer(path, obs, t0);
        }
        fn on_node(&mut self, node: &str, report: Result<NodeReport, String>) {
            self.part_mut::<NodesLetGo>().unwrap().on_node(node, report);
        }
        fn on_connections(&mut self, at: Time, established: usize) {
            self.part_mut::<ConnectionsLetGo>()
                .unwrap()
                .on_count(at, established);
        }
    }

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
        })
        .with_part(DnsLetGo::new(IP.parse().unwrap()))
        .with_part(NodesLetGo::new())
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
        let mut m = model(60, 30).with_part(ConnectionsLetGo::new(IP.parse().unwrap()));
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
