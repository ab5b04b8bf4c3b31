//! The components layer's pure model: what this node's kube-proxy said in its `/metrics`, the Service changes it had to sync, and the `component-stalled` judgement.
//!
//! The agent's adapter scrapes kube-proxy and hands each scrape to [`KubeProxyModel::on_scrape`]
//! with its time; the session hands the model every truth event. Judged with
//! [`component_stalled`](crate::components::component_stalled) at the time the adapter passes:
//!
//! - **Changes**: the Services whose endpoints a live watch event changed (an `Apply` or a
//!   `Delete` after the first sync; a relist's replay after a truth gap is left out, its
//!   receive time says nothing of when kube-proxy saw it), restricted to the Services
//!   kube-proxy programs (a ClusterIP, not `ExternalName`, no
//!   `service.kubernetes.io/service-proxy-name` label). At most [`MAX_CHANGES`] are kept;
//!   the oldest decide, newer ones past the bound are only counted.
//! - **Allowed wait**: `--min-sync-period` + the scrape period + the time one sync takes
//!   (the bound of the bucket of kube-proxy's own `kubeproxy_sync_proxy_rules_duration_seconds`
//!   that holds 99 % of its syncs), and a change up to [`CHANGE_SLACK`] after the last sync
//!   counts as synced (kube-proxy may be handed the change before ghostip).
//! - **Answering**: judged at the scrape's time with the last-sync timestamp it reported.
//! - **Refused** (nothing listens on the metrics address, after it answered before): the
//!   process is gone, so no sync happened since the last good scrape; judged at the last
//!   refused scrape with that good scrape's timestamp, and without the scrape period in the
//!   allowed wait: the adapter scrapes again as soon as a change has waited
//!   `--min-sync-period` + one sync ([`KubeProxyModel::rescrape_at`]). The strongest
//!   evidence: its rules stay in place and age with every change.
//! - **Failing otherwise** (a timeout, a bad answer): judged as of the last good scrape, no
//!   more; a slow endpoint is not a stopped one.
//! - **Never answered** (no kube-proxy on this node, or another metrics address): unknown,
//!   never stalled.

pub mod coredns;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use ghostip_core::truth::{ServiceChange, Truth};
use ghostip_core::{Layer, ServiceKey, Time};
use serde::Serialize;

use crate::components::{
    Histogram, KubeProxyMetrics, ProxyVerdict, StallBounds, component_stalled,
};
use crate::layer::{LayerCx, LayerModel};
use crate::truth_event::{Received, TruthEvent};

/// The components layer: what the cluster's own components say of themselves.
pub const COMPONENTS: Layer = Layer::new("components");

/// The Service label that hands a Service to another proxy than kube-proxy (kept by the
/// session's truth whatever `-l`).
pub const PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";

/// The component name of kube-proxy in findings and metrics.
pub const KUBE_PROXY: &str = "kube-proxy";

/// Unsynced Service changes kept: the oldest decide the verdict, later ones beyond this are
/// counted only. 4096 changes at the 10 s default scrape period is 400 changes a second
/// between two scrapes, far above a cluster's endpoint churn, in about 200 KB.
pub const MAX_CHANGES: usize = 4096;

/// A sync up to this long before ghostip received a change counts as carrying it: both watch
/// the same API server and kube-proxy may be handed the change first.
pub const CHANGE_SLACK: Duration = Duration::from_secs(1);

/// The window of kube-proxy's network-programming p99: the scrapes of the last 5 minutes.
pub const P99_WINDOW: Duration = Duration::from_secs(300);

/// Scrapes kept for the p99 window (5 minutes at a 5 s scrape period).
const MAX_HISTOGRAMS: usize = 64;

/// Services named in a stalled finding, at most.
const MAX_NAMED: usize = 10;

/// How kube-proxy's metrics endpoint answered its last scrape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Endpoint {
    /// Not scraped yet.
    #[default]
    NotScraped,
    /// It answered with its metrics.
    Answering,
    /// The connection was refused: nothing listens there.
    Refused,
    /// Another failure (a timeout, an HTTP error, text that does not parse).
    Failing,
}

/// A scrape that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeFailure {
    /// The connection was refused (nothing listens on the address).
    pub refused: bool,
    /// What failed, for `/status`.
    pub error: String,
}

/// A stalled kube-proxy, as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stalled {
    /// [`KUBE_PROXY`].
    pub component: &'static str,
    /// Its last sync, as it reported it.
    pub last_sync: Time,
    /// The oldest Service change after it.
    pub oldest_change: Time,
    /// From that change to the judgement, seconds.
    pub waited_s: f64,
    /// What it was allowed to wait, seconds.
    pub allowed_s: f64,
    /// Service changes since its last sync (kept and counted past [`MAX_CHANGES`]).
    pub missed_changes: u64,
    /// The Services of those changes, at most 10.
    pub missed_services: Vec<String>,
    /// `endpoint-gone` (its metrics endpoint refuses) or `sync-not-advancing`.
    pub evidence: &'static str,
}

/// What the model says of kube-proxy now.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Judgement {
    /// How its metrics endpoint answered last.
    pub endpoint: Endpoint,
    /// The last scrape that answered.
    pub last_scrape: Option<Time>,
    /// Since when the scrapes fail.
    pub failing_since: Option<Time>,
    /// The last scrape's error.
    pub error: Option<String>,
    /// Its last sync of the rules, as it reported it.
    pub last_sync: Option<Time>,
    /// The longest a change may wait, seconds (min-sync-period + scrape period + one sync).
    pub allowed_s: f64,
    /// Service changes since its last sync known.
    pub pending_changes: u64,
    /// `component-stalled`, when it is.
    pub stalled: Option<Stalled>,
    /// p99 of `kubeproxy_network_programming_duration_seconds` over the window, seconds.
    pub programming_p99_s: Option<f64>,
    /// The window of that p99: first and last scrape.
    pub programming_window: Option<(Time, Time)>,
}

/// The model of this node's kube-proxy.
#[derive(Debug)]
pub struct KubeProxyModel {
    bounds: StallBounds,
    /// Unsynced changes as received, oldest first.
    changes: VecDeque<(Time, ServiceKey)>,
    /// Changes past [`MAX_CHANGES`], counted only.
    dropped: u64,
    last_good: Option<(Time, KubeProxyMetrics)>,
    programming: VecDeque<(Time, Histogram)>,
    endpoint: Endpoint,
    failing_since: Option<Time>,
    /// The last scrape that failed.
    last_failed: Option<Time>,
    error: Option<String>,
}

impl KubeProxyModel {
    /// A model judging with kube-proxy's `--min-sync-period` and the scrape period.
    pub fn new(min_sync_period: Duration, scrape_period: Duration) -> Self {
        Self {
            bounds: StallBounds {
                min_sync_period,
                audit_period: scrape_period,
                change_slack: CHANGE_SLACK,
            },
            changes: VecDeque::new(),
            dropped: 0,
            last_good: None,
            programming: VecDeque::new(),
            endpoint: Endpoint::NotScraped,
            failing_since: None,
            last_failed: None,
            error: None,
        }
    }

    /// A Service change kube-proxy must sync, received at `at`.
    pub fn on_change(&mut self, at: Time, service: ServiceKey) {
        if self.changes.len() >= MAX_CHANGES {
            self.dropped += 1;
        } else {
            self.changes.push_back((at, service));
        }
    }

    /// One scrape of its `/metrics`, started at `at`.
    pub fn on_scrape(&mut self, at: Time, result: Result<KubeProxyMetrics, ScrapeFailure>) {
        match result {
            Ok(m) => {
                self.endpoint = Endpoint::Answering;
                self.failing_since = None;
                self.error = None;
                if let Some(h) = &m.programming {
                    self.programming.push_back((at, h.clone()));
                    let horizon = at.checked_sub(P99_WINDOW).unwrap_or(at);
                    while self.programming.len() > 2
                        && (self.programming.len() > MAX_HISTOGRAMS
                            || self.programming.get(1).is_some_and(|(t, _)| *t <= horizon))
                    {
                        self.programming.pop_front();
                    }
                }
                if let Some(synced) = m.last_sync.and_then(unix_time) {
                    let up_to = synced
                        .checked_add(self.bounds.change_slack)
                        .unwrap_or(synced);
                    self.changes.retain(|(t, _)| *t > up_to);
                    if self.changes.is_empty() {
                        self.dropped = 0;
                    }
                }
                self.last_good = Some((at, m));
            }
            Err(f) => {
                self.endpoint = if f.refused {
                    Endpoint::Refused
                } else {
                    Endpoint::Failing
                };
                self.failing_since.get_or_insert(at);
                self.last_failed = Some(at);
                self.error = Some(f.error);
            }
        }
    }

    /// The bounds with one sync's duration as kube-proxy measured it.
    fn bounds(&self) -> StallBounds {
        let sync = self
            .last_good
            .as_ref()
            .and_then(|(_, m)| m.sync_duration.as_ref())
            .and_then(|h| h.bucket_bound(0.99))
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map_or(Duration::ZERO, Duration::from_secs_f64);
        StallBounds {
            min_sync_period: self.bounds.min_sync_period + sync,
            ..self.bounds
        }
    }

    /// The bounds once the endpoint refuses: no scrape lag, the adapter scrapes again when
    /// a change has waited long enough ([`Self::rescrape_at`]).
    fn gone_bounds(&self) -> StallBounds {
        StallBounds {
            audit_period: Duration::ZERO,
            ..self.bounds()
        }
    }

    /// When the endpoint refuses and a Service change waits for a sync: the time a scrape
    /// settles whether it waited too long (100 ms past the allowed wait), unless a refused
    /// scrape already came after it.
    pub fn rescrape_at(&self) -> Option<Time> {
        let (_, m) = self.last_good.as_ref()?;
        if self.endpoint != Endpoint::Refused {
            return None;
        }
        let bounds = self.gone_bounds();
        let synced = m.last_sync.and_then(unix_time)?;
        let up_to = synced.checked_add(bounds.change_slack).unwrap_or(synced);
        let oldest = self.changes.iter().map(|(t, _)| *t).find(|t| *t > up_to)?;
        let at = oldest
            .checked_add(bounds.allowed() + Duration::from_millis(100))
            .ok()?;
        (self.last_failed.is_none_or(|f| f < at)).then_some(at)
    }

    /// The judgement as of the last scrapes: their times decide, not the caller's clock.
    pub fn judge(&self) -> Judgement {
        let bounds = self.bounds();
        let times: Vec<Time> = self.changes.iter().map(|(t, _)| *t).collect();
        let (verdict, evidence) = match (&self.last_good, self.endpoint, self.last_failed) {
            (None, _, _) => (ProxyVerdict::Unknown, ""),
            (Some((_, m)), Endpoint::Refused, Some(failed)) => (
                component_stalled(failed, m.last_sync, &times, self.gone_bounds()),
                "endpoint-gone",
            ),
            (Some((at, m)), _, _) => (
                component_stalled(*at, m.last_sync, &times, bounds),
                "sync-not-advancing",
            ),
        };
        let last_sync = self
            .last_good
            .as_ref()
            .and_then(|(_, m)| m.last_sync)
            .and_then(unix_time);
        let pending = self.changes.len() as u64 + self.dropped;
        let stalled = match verdict {
            ProxyVerdict::Stalled {
                last_sync,
                change,
                waited,
                allowed,
            } => {
                let named: BTreeSet<String> = self
                    .changes
                    .iter()
                    .filter(|(t, _)| *t >= change)
                    .map(|(_, s)| s.to_string())
                    .collect();
                Some(Stalled {
                    component: KUBE_PROXY,
                    last_sync,
                    oldest_change: change,
                    waited_s: waited.as_secs_f64(),
                    allowed_s: allowed.as_secs_f64(),
                    missed_changes: pending,
                    missed_services: named.into_iter().take(MAX_NAMED).collect(),
                    evidence,
                })
            }
            ProxyVerdict::Unknown | ProxyVerdict::Syncing => None,
        };
        let (programming_p99_s, programming_window) =
            match (self.programming.front(), self.programming.back()) {
                (Some((t0, first)), Some((t1, last))) if t0 < t1 => {
                    (last.p99_since(Some(first)), Some((*t0, *t1)))
                }
                _ => (None, None),
            };
        Judgement {
            endpoint: self.endpoint,
            last_scrape: self.last_good.as_ref().map(|(t, _)| *t),
            failing_since: self.failing_since,
            error: self.error.clone(),
            last_sync,
            allowed_s: if self.endpoint == Endpoint::Refused {
                self.gone_bounds().allowed().as_secs_f64()
            } else {
                bounds.allowed().as_secs_f64()
            },
            pending_changes: pending,
            stalled,
            programming_p99_s,
            programming_window,
        }
    }
}

/// Unix seconds as a time, when representable.
fn unix_time(s: f64) -> Option<Time> {
    if !s.is_finite() {
        return None;
    }
    Time::from_nanosecond((s * 1e9).round() as i128).ok()
}

/// Whether kube-proxy programs `key`: it has a ClusterIP, is not `ExternalName`, and no
/// other proxy claims it (`service.kubernetes.io/service-proxy-name`). A Service the truth
/// no longer has (deleted) is left out.
pub fn proxied(truth: &Truth, key: &ServiceKey) -> bool {
    truth.service(key).is_some_and(|s| {
        !s.headless && s.service_type != "ExternalName" && !s.labels.contains_key(PROXY_NAME)
    })
}

impl LayerModel for KubeProxyModel {
    fn layer(&self) -> Layer {
        COMPONENTS
    }

    /// Live changes of the Services kube-proxy programs, after the first sync.
    fn on_truth(&mut self, cx: &mut LayerCx<'_>, r: &Received, changes: &[ServiceChange]) {
        if !cx.synced || !matches!(r.event, TruthEvent::Apply(_) | TruthEvent::Delete(_)) {
            return;
        }
        for c in changes {
            if proxied(cx.truth, &c.service) {
                self.on_change(c.at.received, c.service.clone());
            }
        }
    }
}
