//! CoreDNS's own word on its DNS programming latency: `coredns_kubernetes_dns_programming_duration_seconds` per `service_kind`, a bounded ring of scrapes per CoreDNS pod, and its p99 over a time range.
//!
//! Pure: `watch`'s adapter scrapes each CoreDNS pod's `/metrics` and hands the text and the
//! scrape's time to [`CoreDnsModel::on_scrape`]; the model answers "what did CoreDNS say over
//! [from, to]" ([`CoreDnsModel::p99_over`]) for a DNS finding's window and for `/status`.
//!
//! - **Histogram**: CoreDNS observes, per Service kind (`cluster_ip`,
//!   `headless_with_selector`, `headless_without_selector`), the time from an endpoint
//!   change (the EndpointSlice's `endpoints.kubernetes.io/last-change-trigger-time`) to its
//!   own record of it, in buckets of 1 ms to 524 s.
//! - **Between two scrapes**: the later cumulative histogram less the earlier one; its p99 is
//!   the upper bound of the bucket that holds the 99th percentile (the highest finite bound
//!   when it falls in `+Inf`), so a figure is never finer than CoreDNS's buckets.
//! - **A range**: the scrapes bracketing it: the last at or before `from` (else the first
//!   kept) and the first at or after `to` (else the last); every pod's difference summed.
//! - **Ring**: at most [`MAX_SCRAPES`] scrapes over [`RING_SPAN`] per pod; a count that goes
//!   down (the pod restarted) clears the ring, which starts anew from that scrape.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::truth::{ServiceChange, Truth};
use ghostip_core::{Layer, ServiceKey, Time};
use serde::Serialize;

use super::COMPONENTS;
use crate::components::{Histogram, MetricsError, parse_exposition};
use crate::layer::{LayerCx, LayerModel};
use crate::truth_event::Received;

/// From an endpoint change to CoreDNS's record of it, seconds (a histogram by `service_kind`).
pub const DNS_PROGRAMMING: &str = "coredns_kubernetes_dns_programming_duration_seconds";

/// The `service_kind` of a ClusterIP Service.
pub const CLUSTER_IP: &str = "cluster_ip";
/// The `service_kind` of a headless Service with a selector.
pub const HEADLESS_WITH_SELECTOR: &str = "headless_with_selector";
/// The `service_kind` of a headless Service without a selector.
pub const HEADLESS_WITHOUT_SELECTOR: &str = "headless_without_selector";

/// The port CoreDNS serves `/metrics` on when the DNS Service names no `metrics` port: 9153,
/// kubeadm's Corefile (`prometheus :9153`).
pub const DEFAULT_METRICS_PORT: u16 = 9153;

/// How far back a pod's ring reaches: 30 minutes, so a DNS finding's window of up to about
/// half an hour still has a scrape before it.
pub const RING_SPAN: Duration = Duration::from_secs(30 * 60);

/// Scrapes kept per pod: 30 minutes at a 7.5 s period (120 at the 15 s default), a few KB
/// each.
pub const MAX_SCRAPES: usize = 240;

/// The window of the p99 in `/status` and the metrics: the last 5 minutes of scrapes.
pub const STATUS_WINDOW: Duration = Duration::from_secs(300);

/// CoreDNS pods scraped at most (the first by name): a cluster DNS deployment has a few
/// replicas; 64 bounds the scrapes of a misconfigured Service.
pub const MAX_PODS: usize = 64;

/// Distinct `service_kind` values kept from one scrape (CoreDNS has 3).
const MAX_KINDS: usize = 8;

/// The Service kind CoreDNS files a Service's programming latency under.
pub fn service_kind(headless: bool, has_selector: bool) -> &'static str {
    match (headless, has_selector) {
        (true, true) => HEADLESS_WITH_SELECTOR,
        (true, false) => HEADLESS_WITHOUT_SELECTOR,
        (false, _) => CLUSTER_IP,
    }
}

/// What one scrape of a CoreDNS pod says: the programming histogram per `service_kind`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CoreDnsMetrics {
    /// [`DNS_PROGRAMMING`] by `service_kind` (a kind CoreDNS never observed is absent).
    pub kinds: BTreeMap<String, Histogram>,
}

impl CoreDnsMetrics {
    /// Reads [`DNS_PROGRAMMING`] from exposition text (other metrics are ignored; at most 8
    /// kinds are kept).
    pub fn from_text(text: &str) -> Result<Self, MetricsError> {
        let samples = parse_exposition(text)?;
        let mut by_kind: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for s in samples {
            if !s.name.starts_with(DNS_PROGRAMMING) {
                continue;
            }
            let kind = s.label("service_kind").unwrap_or_default().to_string();
            if by_kind.len() >= MAX_KINDS && !by_kind.contains_key(&kind) {
                continue;
            }
            by_kind.entry(kind).or_default().push(s);
        }
        Ok(Self {
            kinds: by_kind
                .into_iter()
                .filter_map(|(k, s)| Histogram::from_samples(&s, DNS_PROGRAMMING).map(|h| (k, h)))
                .collect(),
        })
    }

    /// Whether a count went down since `earlier`: the process restarted.
    fn reset_since(&self, earlier: &CoreDnsMetrics) -> bool {
        earlier.kinds.iter().any(|(k, e)| {
            self.kinds
                .get(k)
                .map_or(e.count > 0.0, |now| now.count < e.count)
        })
    }
}

/// One pod's scrapes, oldest first, since it last restarted.
#[derive(Clone, Debug, Default)]
pub struct ScrapeRing {
    scrapes: VecDeque<(Time, CoreDnsMetrics)>,
    /// Times the ring started anew on a counter reset.
    pub resets: u64,
}

impl ScrapeRing {
    /// Adds a scrape taken at `at` (later than every kept one; an earlier one is ignored).
    /// A count lower than the last scrape's starts the ring anew.
    pub fn push(&mut self, at: Time, m: CoreDnsMetrics) {
        if let Some((last_at, last)) = self.scrapes.back() {
            if at <= *last_at {
                return;
            }
            if m.reset_since(last) {
                self.scrapes.clear();
                self.resets += 1;
            }
        }
        self.scrapes.push_back((at, m));
        let horizon = at.checked_sub(RING_SPAN).unwrap_or(at);
        while self.scrapes.len() > MAX_SCRAPES
            || (self.scrapes.len() > 2 && self.scrapes.get(1).is_some_and(|(t, _)| *t <= horizon))
        {
            self.scrapes.pop_front();
        }
    }

    /// Scrapes kept.
    pub fn len(&self) -> usize {
        self.scrapes.len()
    }

    /// No scrape kept.
    pub fn is_empty(&self) -> bool {
        self.scrapes.is_empty()
    }

    /// The time of the last scrape kept.
    pub fn last(&self) -> Option<Time> {
        self.scrapes.back().map(|(t, _)| *t)
    }

    /// What `kind` observed between the scrapes bracketing [`from`, `to`] (see the module
    /// doc), with their times; `None` without two scrapes that span part of it.
    pub fn between(&self, kind: &str, from: Time, to: Time) -> Option<(Histogram, Time, Time)> {
        let earlier = self
            .scrapes
            .iter()
            .rev()
            .find(|(t, _)| *t <= from)
            .or_else(|| self.scrapes.front())?;
        let later = self
            .scrapes
            .iter()
            .find(|(t, _)| *t >= to)
            .or_else(|| self.scrapes.back())?;
        if later.0 <= earlier.0 {
            return None;
        }
        // A kind CoreDNS had not observed yet is absent: zero before.
        let h = match later.1.kinds.get(kind) {
            Some(h) => h.since(earlier.1.kinds.get(kind)),
            None => Histogram::default(),
        };
        Some((h, earlier.0, later.0))
    }
}

/// What CoreDNS said of one `service_kind` over a range, every pod together.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentWord {
    /// The `service_kind`.
    pub service_kind: String,
    /// The p99 (bucket upper bound), seconds; `None` when nothing was observed.
    pub p99_s: Option<f64>,
    /// Changes CoreDNS observed in the range (every pod's count).
    pub observations: f64,
    /// The earliest scrape used.
    pub from: Time,
    /// The latest scrape used.
    pub to: Time,
    /// Pods with two scrapes spanning the range.
    pub pods: usize,
}

/// Where to scrape one CoreDNS pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScrapeTarget {
    /// `namespace/name` of the pod (its IP when the endpoint names none).
    pub pod: String,
    /// `IP:PORT` (`[IP]:PORT` for IPv6).
    pub authority: String,
}

/// The CoreDNS pods to scrape: the ready or serving, not terminating, endpoints of
/// `dns_service`, at its port named `metrics` (else [`DEFAULT_METRICS_PORT`]); at most
/// [`MAX_PODS`], by pod name.
pub fn scrape_targets(truth: &Truth, dns_service: &ServiceKey) -> Vec<ScrapeTarget> {
    let mut out = BTreeMap::new();
    for slice in truth.slices_of(dns_service) {
        let port = slice
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some("metrics"))
            .map_or(DEFAULT_METRICS_PORT, |p| p.port);
        for e in &slice.endpoints {
            if e.terminating() || !(e.ready() || e.serving()) {
                continue;
            }
            let ip = e.ip();
            let pod = slice
                .pod(e)
                .map_or_else(|| ip.to_string(), |p| format!("{}/{}", p.namespace, p.name));
            let authority = match ip {
                IpAddr::V4(v4) => format!("{v4}:{port}"),
                IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            };
            out.entry(pod).or_insert(authority);
        }
    }
    out.into_iter()
        .take(MAX_PODS)
        .map(|(pod, authority)| ScrapeTarget { pod, authority })
        .collect()
}

/// One CoreDNS pod's scrapes and how its last one went.
#[derive(Clone, Debug, Default)]
pub struct PodScrapes {
    /// Its scrapes since it last restarted.
    pub ring: ScrapeRing,
    /// The last scrape attempted.
    pub last_scrape: Option<Time>,
    /// The last scrape's error (`None`: it answered).
    pub error: Option<String>,
}

/// What `/status` shows of one CoreDNS pod.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodView {
    /// `namespace/name`.
    pub pod: String,
    /// The last scrape attempted.
    pub last_scrape: Option<Time>,
    /// The last good scrape.
    pub last_good: Option<Time>,
    /// The last scrape's error.
    pub error: Option<String>,
    /// Times its counters went down (restarts) since it was first scraped.
    pub resets: u64,
    /// p99 per `service_kind` over the last [`STATUS_WINDOW`] of its scrapes, seconds.
    pub p99_5m_s: BTreeMap<String, f64>,
}

/// The CoreDNS pods' scrapes: the components layer's part in `watch`.
#[derive(Clone, Debug, Default)]
pub struct CoreDnsModel {
    pods: BTreeMap<String, PodScrapes>,
}

impl CoreDnsModel {
    /// A model with no pod yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps only the pods named in `pods` (a pod gone from the DNS Service is forgotten).
    pub fn retain_pods<'a>(&mut self, pods: impl IntoIterator<Item = &'a str>) {
        let keep: std::collections::BTreeSet<&str> = pods.into_iter().collect();
        self.pods.retain(|p, _| keep.contains(p.as_str()));
    }

    /// One scrape of `pod` started at `at`: its metrics or what failed.
    pub fn on_scrape(&mut self, pod: &str, at: Time, result: Result<CoreDnsMetrics, String>) {
        if !self.pods.contains_key(pod) && self.pods.len() >= MAX_PODS {
            return;
        }
        let s = self.pods.entry(pod.to_string()).or_default();
        s.last_scrape = Some(at);
        match result {
            Ok(m) => {
                s.error = None;
                s.ring.push(at, m);
            }
            Err(e) => s.error = Some(e),
        }
    }

    /// The pods scraped, by name.
    pub fn pods(&self) -> &BTreeMap<String, PodScrapes> {
        &self.pods
    }

    /// What every pod said of `kind` over [`from`, `to`]; `None` when no pod has two scrapes
    /// spanning part of it.
    pub fn p99_over(&self, kind: &str, from: Time, to: Time) -> Option<ComponentWord> {
        let mut sum = Histogram::default();
        let mut span: Option<(Time, Time)> = None;
        let mut pods = 0;
        for s in self.pods.values() {
            let Some((h, a, b)) = s.ring.between(kind, from, to) else {
                continue;
            };
            sum.add(&h);
            pods += 1;
            span = Some(span.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
        }
        let (from, to) = span?;
        Some(ComponentWord {
            service_kind: kind.to_string(),
            p99_s: sum.bucket_bound(0.99),
            observations: sum.count,
            from,
            to,
            pods,
        })
    }

    /// What CoreDNS said beside a DNS finding of `service` over [`t0`, `end`] (its
    /// `converged_by`, or now while open): the p99 of the kind CoreDNS files the Service
    /// under ([`service_kind`]; a Service the truth no longer has counts as headless with a
    /// selector, the kind the DNS layer probes). Not a judgement: the finding stands as it is.
    pub fn beside(
        &self,
        truth: &Truth,
        service: &ServiceKey,
        t0: Time,
        end: Time,
    ) -> Option<ComponentWord> {
        let kind = truth.service(service).map_or(HEADLESS_WITH_SELECTOR, |s| {
            service_kind(s.headless, s.has_selector)
        });
        self.p99_over(kind, t0, end.max(t0))
    }

    /// Each pod's view for `/status`: its p99 per kind over the [`STATUS_WINDOW`] before its
    /// last good scrape.
    pub fn views(&self) -> Vec<PodView> {
        self.pods
            .iter()
            .map(|(pod, s)| {
                let last_good = s.ring.last();
                let mut p99 = BTreeMap::new();
                if let Some(to) = last_good {
                    let from = to.checked_sub(STATUS_WINDOW).unwrap_or(to);
                    for kind in [
                        CLUSTER_IP,
                        HEADLESS_WITH_SELECTOR,
                        HEADLESS_WITHOUT_SELECTOR,
                    ] {
                        if let Some(v) = s
                            .ring
                            .between(kind, from, to)
                            .and_then(|(h, _, _)| h.bucket_bound(0.99))
                        {
                            p99.insert(kind.to_string(), v);
                        }
                    }
                }
                PodView {
                    pod: pod.clone(),
                    last_scrape: s.last_scrape,
                    last_good,
                    error: s.error.clone(),
                    resets: s.ring.resets,
                    p99_5m_s: p99,
                }
            })
            .collect()
    }
}

impl LayerModel for CoreDnsModel {
    fn layer(&self) -> Layer {
        COMPONENTS
    }

    fn on_truth(&mut self, _cx: &mut LayerCx<'_>, _r: &Received, _changes: &[ServiceChange]) {}
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
