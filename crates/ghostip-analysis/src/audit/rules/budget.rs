//! The arithmetic the rule families share: the DNS chain's lag (cluster DNS and a node cache
//! in front of it), a Service's staleness budget with the chain of its contributions, what a
//! preStop covers of it, and the targets the fixes name.

use ghostip_core::ServiceKey;
use ghostip_core::corefile::{AnswerSource, ExpectedLag};
use serde::Serialize;

use super::DnsLayer;
use super::client::CallerCache;
use super::term::PreStop;
use crate::audit::inventory::{ObjectRef, ServiceInfo};

/// Time left to the application's own shutdown after the preStop hook, in the suggested grace.
pub const SHUTDOWN_MARGIN: i64 = 10;
/// A DNS cache lag that needs no fix: the floor of the `cache` plugin's MINTTL.
pub(super) const SMALL_DNS_LAG: u64 = 5;
/// A budget above this many seconds is large: a fixed preStop sleep covering it would slow
/// every rollout step by as much, so the fix advises `ghostip drain-wait` first, which waits
/// only as long as the layers actually hold the pod's IP.
pub const DRAIN_WAIT_ABOVE_S: i64 = 10;

/// One layer's contribution to a Service's staleness budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Contribution {
    /// `cluster-dns`, `node-cache` or `client-cache`.
    pub layer: &'static str,
    /// Seconds it adds to the budget (a node cache: beyond the cluster DNS behind it); `-1`:
    /// forever.
    pub seconds: i64,
    /// Where it is configured: the Corefile's ConfigMap or file, or the caller (`Deployment
    /// demo/checkout`, or the Service for a declared cache).
    pub source: String,
    /// How, in configuration words (`kubernetes ttl 30, cache 30`, `JVM cache 30 s (container
    /// app)`).
    pub detail: String,
}

/// How long after a pod leaves a Service's EndpointSlice its callers may still dial its IP,
/// from configuration: the DNS lag (cluster DNS, or NodeLocal DNSCache's lag behind it) plus
/// the longest DNS cache among the callers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StalenessBudget {
    /// The Service.
    pub service: ServiceKey,
    /// Headless: DNS hands out pod IPs. A ClusterIP Service's name answers its Service IP, so
    /// its budget is 0 here (the datapath's delay is not configuration).
    pub headless: bool,
    /// The DNS lag, when a Corefile was read (headless only).
    pub dns_lag_s: Option<u64>,
    /// The longest client cache among the callers (`-1`: forever), when one is known.
    pub client_cache_s: Option<i64>,
    /// DNS lag + client cache in seconds; `None` when a caller caches forever.
    pub total_s: Option<i64>,
    /// The contributions, DNS first.
    pub chain: Vec<Contribution>,
    /// What the figures assume and the input does not show.
    pub caveats: Vec<String>,
}

/// A Service's staleness budget from the DNS chain and its callers' caches.
pub(super) fn staleness(
    chain: &DnsChain,
    svc: &ServiceInfo,
    client: &CallerCache,
) -> StalenessBudget {
    let mut out = StalenessBudget {
        service: svc.key.clone(),
        headless: svc.headless,
        dns_lag_s: None,
        client_cache_s: client.positive.as_ref().map(|(t, _)| *t),
        total_s: Some(0),
        chain: Vec::new(),
        caveats: Vec::new(),
    };
    if !svc.headless {
        out.caveats.push(
            "a ClusterIP Service: its name answers the Service IP, not pod IPs; how long nodes keep routing to a removed pod is the datapath's delay (kube-proxy, Cilium), not configuration"
                .to_string(),
        );
        return out;
    }
    let dns = chain.lag().map(|(lag, _, _)| lag);
    out.dns_lag_s = dns;
    let cluster_lag = chain.cluster.as_ref().map_or(0, |c| c.info.cache_lag_s);
    for (layer, role) in [
        (&chain.cluster, "cluster-dns"),
        (&chain.node_cache, "node-cache"),
    ] {
        let Some(l) = layer else { continue };
        let own = if role == "node-cache" {
            l.info.cache_lag_s.saturating_sub(cluster_lag)
        } else {
            l.info.cache_lag_s
        };
        out.chain.push(Contribution {
            layer: role,
            seconds: secs_i64(own),
            source: l.info.object.to_string(),
            detail: describe(&l.lag),
        });
        out.caveats.extend(
            l.info
                .caveats
                .iter()
                .map(|c| format!("{}: {c}", l.info.object)),
        );
    }
    if dns.is_none() {
        out.caveats
            .push("no usable Corefile was read: the DNS lag is not counted".to_string());
    }
    if let Some((t, src)) = &client.positive {
        out.chain.push(Contribution {
            layer: "client-cache",
            seconds: *t,
            source: src.clone(),
            detail: if *t < 0 {
                "caches forever".to_string()
            } else {
                format!("caches {t} s")
            },
        });
    }
    if svc.publish_not_ready {
        out.caveats.push(
            "publishNotReadyAddresses keeps terminating pods in DNS: the budget runs from the pod's deletion, not from the start of its termination"
                .to_string(),
        );
    }
    out.total_s = match out.client_cache_s {
        Some(t) if t < 0 => None,
        c => Some(secs_i64(dns.unwrap_or(0)) + c.unwrap_or(0).max(0)),
    };
    out
}

/// What a pod's preStop covers of a budget: the sleep, cut at the grace period; nothing when
/// the duration is unknown or terminating pods stay in DNS (`publishNotReadyAddresses`).
pub(super) fn cover_s(prestop: PreStop, grace: i64, publish_not_ready: bool) -> i64 {
    match prestop {
        _ if publish_not_ready => 0,
        PreStop::None | PreStop::Unknown(_) => 0,
        PreStop::Sleep(s) => secs_i64(s).min(grace),
    }
}

/// Whether a budget is large: above [`DRAIN_WAIT_ABOVE_S`], or a preStop sleep covering it
/// would not end before the grace period does.
pub(super) fn large(budget: i64, grace: i64) -> bool {
    budget > DRAIN_WAIT_ABOVE_S || budget >= grace
}

/// The DNS lag left once every caching layer is bounded by `cache 5` / `disable success`.
pub(super) fn dns_lag_after_fix(lag: u64, caching_layers: u64) -> u64 {
    lag.min(SMALL_DNS_LAG * caching_layers.max(1))
}

/// One DNS layer: what is reported, and the lag it was computed from.
pub(super) struct Layer {
    pub(super) info: DnsLayer,
    pub(super) lag: ExpectedLag,
}

/// The cluster DNS and the node cache in front of it, as far as Corefiles were read.
pub(super) struct DnsChain {
    pub(super) cluster: Option<Layer>,
    pub(super) node_cache: Option<Layer>,
    /// Forwarding Corefiles that do not send the zone to the cluster DNS, and where they do.
    pub(super) not_counted: Vec<(ObjectRef, String)>,
}

impl DnsChain {
    /// The worst lag a caller may see, and how it is made up.
    pub(super) fn lag(&self) -> Option<(u64, String, u64)> {
        let c = self.cluster.as_ref();
        let n = self.node_cache.as_ref();
        if c.is_none() && n.is_none() {
            return None;
        }
        let mut desc = Vec::new();
        let mut caching_layers = 0u64;
        if let Some(c) = c {
            desc.push(describe(&c.lag));
            if c.lag.cache_lag > std::time::Duration::ZERO {
                caching_layers += 1;
            }
        }
        if let Some(n) = n {
            desc.push(format!("NodeLocal DNSCache in front: {}", describe(&n.lag)));
            if n.lag.cache.as_ref().is_some_and(|c| c.success_cached) {
                caching_layers += 1;
            }
        }
        let lag = c
            .map(|l| l.info.cache_lag_s)
            .max(n.map(|l| l.info.cache_lag_s))
            .unwrap_or(0);
        Some((lag, desc.join("; "), caching_layers))
    }

    pub(super) fn denial_lag(&self) -> Option<u64> {
        let c = self.cluster.as_ref().map(|l| l.info.denial_lag_s);
        let n = self.node_cache.as_ref().map(|l| l.info.denial_lag_s);
        c.max(n)
    }
}

/// `kubernetes ttl 30, cache 30`: the settings behind a lag, in Corefile words.
pub(super) fn describe(lag: &ExpectedLag) -> String {
    let mut parts = Vec::new();
    if let AnswerSource::Kubernetes { ttl } = lag.source {
        parts.push(format!("kubernetes ttl {ttl}"));
    }
    match &lag.cache {
        None => parts.push("no cache".to_string()),
        Some(c) => {
            let mut s = format!("cache {}", c.success_max.as_secs());
            if c.success_min.as_secs() != 5 {
                s.push_str(&format!(" MINTTL {}", c.success_min.as_secs()));
            }
            if !c.success_cached {
                s.push_str(" with success caching disabled");
            }
            parts.push(s);
        }
    }
    parts.join(", ")
}

/// Seconds as the signed figures findings carry.
pub(super) fn secs_i64(s: u64) -> i64 {
    i64::try_from(s).unwrap_or(i64::MAX)
}
