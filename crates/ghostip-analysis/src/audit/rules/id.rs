//! Rule ids, severities and the fixed description of every rule.
//!
//! A [`RuleId`] is an enum so a rule cannot be misspelt in code; its text form
//! (`GIP-DNS-001`) is what the table, JSON and SARIF outputs and docs/AUDIT.md show.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};
use thiserror::Error;

/// How bad a finding is. Warnings and errors make `audit` exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; not a predicted failure.
    Note,
    /// Predicts errors during rollouts.
    Warning,
    /// Predicts errors that do not end by themselves.
    Error,
}

impl Severity {
    /// Lower-case name (also the SARIF level).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Note => "note",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// A rule's fixed description (docs/AUDIT.md lists the same table).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RuleInfo {
    /// Stable id.
    pub id: RuleId,
    /// Short name.
    pub name: &'static str,
    /// Usual severity (some findings are raised or lowered, see the rule).
    pub severity: Severity,
    /// What it checks.
    pub what: &'static str,
    /// Why it matters.
    pub why: &'static str,
}

/// Every rule, in the order of [`RuleId::ALL`].
pub const RULES: &[RuleInfo; RuleId::ALL.len()] = &[
    RuleInfo {
        id: RuleId::Dns001,
        name: "dns-staleness-exceeds-termination",
        severity: Severity::Warning,
        what: "a headless Service's DNS staleness budget (cluster DNS and NodeLocal cache lag plus client caches) exceeds what the pods' preStop delay covers",
        why: "after every rollout callers keep dialing removed pod IPs for the difference: connection refused, then timeouts",
    },
    RuleInfo {
        id: RuleId::Dns002,
        name: "serve-stale-on-cluster-domain",
        severity: Severity::Warning,
        what: "the cache serving the cluster domain has serve_stale",
        why: "an expired entry is served once more (TTL 0) after it expired, so a removed IP can come back long after the cache lag",
    },
    RuleInfo {
        id: RuleId::Dns003,
        name: "dns-layer-lag",
        severity: Severity::Note,
        what: "how long a Corefile lets removed IPs of headless Services stay in answers, and the TTL it hands to clients",
        why: "the starting point of every Service's budget; shown so the figures behind the other findings are visible",
    },
    RuleInfo {
        id: RuleId::Client001,
        name: "client-caches-dns-forever",
        severity: Severity::Error,
        what: "a JVM caller caches DNS answers (or failures) forever: networkaddress.cache.ttl / sun.net.inetaddr.ttl = -1",
        why: "the caller keeps a removed pod's IP until it restarts, whatever DNS or preStop do",
    },
    RuleInfo {
        id: RuleId::Client002,
        name: "grpc-on-headless-service",
        severity: Severity::Warning,
        what: "a headless Service exposes a gRPC port",
        why: "gRPC clients balancing on the client side (dns:/// with round_robin) re-resolve only after a connection fails: removed pods are used until their connections break, new pods get no traffic until then",
    },
    RuleInfo {
        id: RuleId::Grpc001,
        name: "grpc-headless-without-max-connection-age",
        severity: Severity::Warning,
        what: "gRPC clients balance over a headless Service with dns:/// and its server sets no MaxConnectionAge",
        why: "the clients re-resolve only when a connection closes: a removed pod's address stays in their balancers until a call to it fails, new pods get no traffic until then; no configuration bounds it",
    },
    RuleInfo {
        id: RuleId::Grpc002,
        name: "grpc-max-connection-age-budget",
        severity: Severity::Note,
        what: "how long gRPC clients of a headless Service may keep a resolved address set, given the server's MaxConnectionAge",
        why: "MaxConnectionAge (+10 % jitter) + MaxConnectionAgeGrace + DNS lag + grpc-go's 30 s minimum re-resolution interval: the time a removed pod's address may stay in the clients' balancers",
    },
    RuleInfo {
        id: RuleId::Term001,
        name: "prestop-exceeds-grace-period",
        severity: Severity::Warning,
        what: "a container's preStop sleep is as long as or longer than terminationGracePeriodSeconds",
        why: "the grace period counts the preStop hook: the kubelet kills the container when it ends, so the application never shuts down cleanly and the hook is cut short",
    },
    RuleInfo {
        id: RuleId::Term002,
        name: "no-prestop-behind-service",
        severity: Severity::Note,
        what: "a workload behind a ClusterIP Service has no preStop delay",
        why: "kube-proxy on every node removes the endpoint some time after the pod starts terminating; connections routed meanwhile are refused",
    },
    RuleInfo {
        id: RuleId::Roll001,
        name: "headless-service-empty-during-rollout",
        severity: Severity::Warning,
        what: "a rollout can leave a headless Service with no ready endpoint (Recreate, or maxSurge 0 with maxUnavailable ≥ replicas)",
        why: "the name answers NXDOMAIN/NODATA meanwhile, and caches keep that denial after the new pods are ready",
    },
    RuleInfo {
        id: RuleId::Roll002,
        name: "rollout-without-surge",
        severity: Severity::Note,
        what: "a Deployment or StatefulSet behind a Service rolls out with maxSurge 0",
        why: "each step removes ready pods before their replacements are ready; the pods left take the load while callers still dial the removed ones",
    },
    RuleInfo {
        id: RuleId::Probe001,
        name: "liveness-timeout-with-dependency",
        severity: Severity::Warning,
        what: "a liveness probe with timeoutSeconds ≤ 1 on a pod whose health depends on DNS or a downstream",
        why: "a slow DNS answer or downstream makes the probe time out, the kubelet restarts a healthy container, and the pod ends in CrashLoopBackOff",
    },
    RuleInfo {
        id: RuleId::Probe002,
        name: "no-readiness-probe-behind-service",
        severity: Severity::Note,
        what: "a workload behind a Service has no readiness probe",
        why: "new pods are published in DNS and load balancers as soon as their containers start, before they accept connections",
    },
    RuleInfo {
        id: RuleId::Svc001,
        name: "publish-not-ready-addresses",
        severity: Severity::Warning,
        what: "a Service sets publishNotReadyAddresses",
        why: "terminating and unready pods stay in DNS until they are deleted, so no preStop delay covers the DNS lag",
    },
];

/// A rule's stable id. Its text form (`GIP-DNS-001`, see [`RuleId::as_str`]) never changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleId {
    /// `GIP-DNS-001`.
    Dns001,
    /// `GIP-DNS-002`.
    Dns002,
    /// `GIP-DNS-003`.
    Dns003,
    /// `GIP-CLIENT-001`.
    Client001,
    /// `GIP-CLIENT-002`.
    Client002,
    /// `GIP-GRPC-001`.
    Grpc001,
    /// `GIP-GRPC-002`.
    Grpc002,
    /// `GIP-TERM-001`.
    Term001,
    /// `GIP-TERM-002`.
    Term002,
    /// `GIP-ROLL-001`.
    Roll001,
    /// `GIP-ROLL-002`.
    Roll002,
    /// `GIP-PROBE-001`.
    Probe001,
    /// `GIP-PROBE-002`.
    Probe002,
    /// `GIP-SVC-001`.
    Svc001,
}

impl RuleId {
    /// Every rule id, in the order of [`RULES`].
    pub const ALL: [RuleId; 14] = [
        Self::Dns001,
        Self::Dns002,
        Self::Dns003,
        Self::Client001,
        Self::Client002,
        Self::Grpc001,
        Self::Grpc002,
        Self::Term001,
        Self::Term002,
        Self::Roll001,
        Self::Roll002,
        Self::Probe001,
        Self::Probe002,
        Self::Svc001,
    ];

    /// The id as written in outputs and docs (`GIP-DNS-001`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Dns001 => "GIP-DNS-001",
            Self::Dns002 => "GIP-DNS-002",
            Self::Dns003 => "GIP-DNS-003",
            Self::Client001 => "GIP-CLIENT-001",
            Self::Client002 => "GIP-CLIENT-002",
            Self::Grpc001 => "GIP-GRPC-001",
            Self::Grpc002 => "GIP-GRPC-002",
            Self::Term001 => "GIP-TERM-001",
            Self::Term002 => "GIP-TERM-002",
            Self::Roll001 => "GIP-ROLL-001",
            Self::Roll002 => "GIP-ROLL-002",
            Self::Probe001 => "GIP-PROBE-001",
            Self::Probe002 => "GIP-PROBE-002",
            Self::Svc001 => "GIP-SVC-001",
        }
    }

    /// The position of the rule in [`RULES`] (SARIF's `ruleIndex`).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The rule's fixed description.
    pub fn info(self) -> &'static RuleInfo {
        &RULES[self.index()]
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for RuleId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A text that is not the id of any rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown rule id {0:?} (ids look like GIP-DNS-001)")]
pub struct UnknownRule(pub String);

impl FromStr for RuleId {
    type Err = UnknownRule;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|id| id.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownRule(s.to_string()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_listed_in_id_order_and_ids_round_trip() {
        assert_eq!(RULES.len(), RuleId::ALL.len());
        for (i, id) in RuleId::ALL.into_iter().enumerate() {
            assert_eq!(RULES[i].id, id);
            assert_eq!(id.index(), i);
            assert_eq!(id.info().id, id);
            assert_eq!(id.as_str().parse::<RuleId>(), Ok(id));
            assert_eq!(serde_json::to_value(id).unwrap(), id.as_str());
        }
        assert_eq!(format!("{:<14}|", RuleId::Dns001), "GIP-DNS-001   |");
        assert!("GIP-DNS-01".parse::<RuleId>().is_err());
    }
}
