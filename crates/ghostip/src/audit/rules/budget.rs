//! The arithmetic the rule families share: the DNS chain's lag (cluster DNS and a node cache
//! in front of it), a Service's budget, and the targets the fixes name.

use ghostip_core::corefile::{AnswerSource, ExpectedLag};

use super::DnsLayer;
use crate::audit::inventory::ObjectRef;

/// Time left to the application's own shutdown after the preStop hook, in the suggested grace.
pub(super) const SHUTDOWN_MARGIN: i64 = 10;
/// A DNS cache lag that needs no fix: the floor of the `cache` plugin's MINTTL.
pub(super) const SMALL_DNS_LAG: u64 = 5;

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
