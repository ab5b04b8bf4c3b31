//! Classifies connection failures: by error kind alone, or with the facts of who owned the target
//! IP at the error time and now (the ledger join, done by the caller).

use std::net::IpAddr;

use serde::Serialize;

use crate::model::{ConnFailure, Kind};

/// Why a connection failed, as far as the log (and the ledger, when joined) can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Refused, no ledger: a stale cache, registry or DNS answer, or the pod is gone.
    StaleTarget,
    /// Reset: a pooled connection to a terminated pod.
    PooledConnection,
    /// Timeout or no route: blackholed, a dead IP or a datapath dropping packets.
    Blackholed,
    /// DNS lookup timeout or server failure: the DNS path (check that node's datapath).
    DnsPath,
    /// DNS name not found: a deleted Service, or a cached negative answer.
    NameNotFound,
    /// Unavailable without a cause in the log (gRPC `Unavailable`, Envoy `UF`/`UH`).
    Unavailable,
    /// Another connect error (`operation not permitted`, a bare "failed to connect").
    Unclassified,
    /// The target is a loopback, link-local or unspecified address (127.0.0.0/8, `::1`,
    /// 169.254.0.0/16, `fe80::/10`, `0.0.0.0`, `::`) or a loopback name (`localhost`,
    /// `localhost.localdomain`, `*.localhost`): never a pod IP, so not staleness (a
    /// local sidecar or agent, the node's metadata service).
    LocalTarget,
    /// Ledger: no pod owned the IP at the error time: a stale client cache, registry or DNS.
    StaleClientCache,
    /// Ledger: the owning pod was terminating: clients still sent to it (preStop too short).
    TerminatingTarget,
    /// Ledger: a live, ready pod owned the IP: not staleness, an application-level failure.
    NotStaleness,
    /// Ledger: a pod owned the IP but was not ready (starting or failing probes).
    NotReadyTarget,
    /// Ledger: the IP now belongs to a different pod than at the error time: IP reuse.
    IpReused,
    /// Ledger: a gRPC client's own balancer (read through its channelz) still held the
    /// removed IP at the error time: the client's copy, which it drops only when it
    /// re-resolves.
    StaleClientBalancer,
}

impl Class {
    /// Short name used in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::StaleTarget => "stale-target",
            Class::PooledConnection => "pooled-connection",
            Class::Blackholed => "blackholed",
            Class::DnsPath => "dns-path",
            Class::NameNotFound => "name-not-found",
            Class::Unavailable => "unavailable",
            Class::Unclassified => "unclassified",
            Class::LocalTarget => "local-target",
            Class::StaleClientCache => "stale-client-cache",
            Class::TerminatingTarget => "terminating-target",
            Class::NotStaleness => "not-staleness",
            Class::NotReadyTarget => "not-ready-target",
            Class::IpReused => "ip-reused",
            Class::StaleClientBalancer => "stale-client-balancer",
        }
    }

    /// Whether the class means a client was sent to an endpoint that was gone, going, or
    /// unreachable through a stale path: everything but [`Class::NotStaleness`],
    /// [`Class::NotReadyTarget`], [`Class::NameNotFound`], [`Class::Unavailable`],
    /// [`Class::Unclassified`] and [`Class::LocalTarget`]. `ghostip explain` exits 1 when any
    /// failure has such a class.
    pub fn is_staleness(self) -> bool {
        match self {
            Class::StaleTarget
            | Class::PooledConnection
            | Class::Blackholed
            | Class::DnsPath
            | Class::StaleClientCache
            | Class::TerminatingTarget
            | Class::IpReused
            | Class::StaleClientBalancer => true,
            Class::NameNotFound
            | Class::Unavailable
            | Class::Unclassified
            | Class::LocalTarget
            | Class::NotStaleness
            | Class::NotReadyTarget => false,
        }
    }

    /// One-line explanation for reports.
    pub fn description(self) -> &'static str {
        match self {
            Class::StaleTarget => "stale cache/registry/DNS or pod gone",
            Class::PooledConnection => "pooled connection to a terminated pod",
            Class::Blackholed => "blackholed (dead IP or datapath)",
            Class::DnsPath => "DNS path (check that node's datapath)",
            Class::NameNotFound => "name not found (deleted Service or cached negative answer)",
            Class::Unavailable => "upstream unavailable (the log gives no cause)",
            Class::Unclassified => "connect error (not classified)",
            Class::LocalTarget => {
                "not staleness: a loopback or link-local address is never a pod IP (local sidecar, agent, metadata service)"
            }
            Class::StaleClientCache => "stale client cache/registry/DNS (no pod owned the IP)",
            Class::TerminatingTarget => {
                "pod was terminating: clients still sent to it (preStop too short)"
            }
            Class::NotStaleness => "not staleness: a live, ready pod owned the IP (app-level)",
            Class::NotReadyTarget => "a pod owned the IP but was not ready",
            Class::IpReused => "IP reuse: the IP now belongs to a different pod",
            Class::StaleClientBalancer => {
                "stale client balancer: the client's gRPC balancer still held the removed IP (channelz)"
            }
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `ip` can never be a pod IP: loopback (127.0.0.0/8, `::1`), link-local
/// (169.254.0.0/16, `fe80::/10`) or unspecified (`0.0.0.0`, `::`), also written as an
/// IPv4-mapped IPv6 address.
pub fn is_local_address(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// Whether `host` names the loopback interface: `localhost`, `localhost.localdomain` or a name
/// under `.localhost` (RFC 6761 reserves them all for loopback), in any case, with or without
/// the root's trailing dot.
pub fn is_loopback_name(host: &str) -> bool {
    let h = host.strip_suffix('.').unwrap_or(host);
    let ends_with = |suffix: &str| {
        h.len() >= suffix.len()
            && h.is_char_boundary(h.len() - suffix.len())
            && h[h.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    h.eq_ignore_ascii_case("localhost")
        || h.eq_ignore_ascii_case("localhost.localdomain")
        || (h.len() > ".localhost".len() && ends_with(".localhost"))
}

/// Whether the failure is a connection (not a DNS lookup) aimed at a local address
/// ([`is_local_address`]) or at a loopback name ([`is_loopback_name`]).
fn aims_at_local_address(failure: &ConnFailure) -> bool {
    !failure.kind.is_dns()
        && (failure.target.is_some_and(|t| is_local_address(t.ip()))
            || failure.host.as_deref().is_some_and(is_loopback_name))
}

/// Classifies by error kind only (no ledger); a failure aimed at a loopback or link-local
/// address, or at a loopback name, is [`Class::LocalTarget`] whatever its kind.
pub fn classify(failure: &ConnFailure) -> Class {
    if aims_at_local_address(failure) {
        return Class::LocalTarget;
    }
    class_of_kind(failure.kind)
}

/// The class of an error kind without ledger facts.
pub fn class_of_kind(kind: Kind) -> Class {
    match kind {
        Kind::Refused => Class::StaleTarget,
        Kind::Reset => Class::PooledConnection,
        Kind::Timeout | Kind::NoRoute => Class::Blackholed,
        Kind::DnsTimeout => Class::DnsPath,
        Kind::DnsNotFound => Class::NameNotFound,
        Kind::Unavailable => Class::Unavailable,
        Kind::Other => Class::Unclassified,
    }
}

/// What the ledger knows about the pod that owned an IP at some instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnerFacts {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The pod was ready.
    pub ready: bool,
    /// The pod had a deletion timestamp (terminating).
    pub terminating: bool,
    /// The pod no longer existed (the IP's last owner, already deleted).
    pub gone: bool,
    /// The pod's UID (tells a recreated pod of the same name apart).
    pub uid: String,
}

impl OwnerFacts {
    fn live_ready(&self) -> bool {
        self.ready && !self.terminating && !self.gone
    }
}

/// Classifies with the ledger's facts about the target IP: `owner_at_error` owned it at the
/// error time, `owner_now` owns it now (`None`: no pod).
///
/// Rules, in order:
/// 1. DNS failures and failures without a target IP keep their kind's class; a failure aimed at
///    a loopback or link-local address or a loopback name is [`Class::LocalTarget`].
/// 2. A live, ready pod owned the IP at the error time → [`Class::NotStaleness`].
/// 3. A different live pod owns the IP now → [`Class::IpReused`].
/// 4. No pod (or a gone one) at the error time: reset → [`Class::PooledConnection`], timeout or
///    no route → [`Class::Blackholed`], anything else → [`Class::StaleClientCache`].
/// 5. A terminating pod: reset → [`Class::PooledConnection`], else
///    [`Class::TerminatingTarget`].
/// 6. A pod that was neither ready nor terminating → [`Class::NotReadyTarget`].
pub fn classify_with_owner(
    failure: &ConnFailure,
    owner_at_error: Option<&OwnerFacts>,
    owner_now: Option<&OwnerFacts>,
) -> Class {
    if failure.kind.is_dns() || failure.target.is_none() || aims_at_local_address(failure) {
        return classify(failure);
    }
    if owner_at_error.is_some_and(OwnerFacts::live_ready) {
        return Class::NotStaleness;
    }
    if let Some(now) = owner_now.filter(|n| !n.gone)
        && owner_at_error.is_none_or(|o| o.uid != now.uid)
    {
        return Class::IpReused;
    }
    match owner_at_error {
        None => dead_ip_class(failure.kind),
        Some(o) if o.gone => dead_ip_class(failure.kind),
        Some(o) if o.terminating => match failure.kind {
            Kind::Reset => Class::PooledConnection,
            _ => Class::TerminatingTarget,
        },
        Some(_) => Class::NotReadyTarget,
    }
}

fn dead_ip_class(kind: Kind) -> Class {
    match kind {
        Kind::Reset => Class::PooledConnection,
        Kind::Timeout | Kind::NoRoute => Class::Blackholed,
        _ => Class::StaleClientCache,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::model::Format;

    fn failure(kind: Kind) -> ConnFailure {
        ConnFailure::at(kind, Format::Java, "10.244.3.71:8080".parse().ok(), None)
    }

    fn pod(uid: &str, ready: bool, terminating: bool, gone: bool) -> OwnerFacts {
        OwnerFacts {
            pod: format!("ns/{uid}"),
            ready,
            terminating,
            gone,
            uid: uid.into(),
        }
    }

    #[test]
    fn without_ledger() {
        assert_eq!(classify(&failure(Kind::Refused)), Class::StaleTarget);
        assert_eq!(classify(&failure(Kind::Reset)), Class::PooledConnection);
        assert_eq!(classify(&failure(Kind::Timeout)), Class::Blackholed);
        assert_eq!(classify(&failure(Kind::DnsTimeout)), Class::DnsPath);
    }

    #[test]
    fn loopback_and_link_local_targets_are_never_staleness() {
        for target in [
            "127.0.0.1:8080",
            "127.10.0.1:80",
            "[::1]:8080",
            "169.254.169.254:80",
            "[fe80::1%2]:80",
            "[febf::1]:80",
            "[::ffff:127.0.0.1]:80",
            "0.0.0.0:80",
            "[::]:80",
        ] {
            for kind in [Kind::Refused, Kind::Reset, Kind::Timeout, Kind::NoRoute] {
                let mut f = failure(kind);
                f.target = target.parse().ok();
                assert!(f.target.is_some(), "{target}");
                assert_eq!(classify(&f), Class::LocalTarget, "{target} {kind}");
                // Whatever a history says about the address.
                let a = pod("a", false, false, true);
                assert_eq!(
                    classify_with_owner(&f, Some(&a), None),
                    Class::LocalTarget,
                    "{target}"
                );
                assert!(!classify(&f).is_staleness());
            }
        }
        // Pod and Service addresses, and the node-local DNS cache's (a DNS server, not a target).
        for target in [
            "10.244.3.71:8080",
            "[fd00::5]:80",
            "[fec0::1]:80",
            "169.255.0.1:80",
        ] {
            let mut f = failure(Kind::Refused);
            f.target = target.parse().ok();
            assert_eq!(classify(&f), Class::StaleTarget, "{target}");
        }
        let mut dns = failure(Kind::DnsTimeout);
        dns.target = None;
        dns.dns_server = "169.254.20.10:53".parse().ok();
        assert_eq!(classify(&dns), Class::DnsPath);
    }

    #[test]
    fn loopback_names_are_local_targets_never_staleness() {
        for host in [
            "localhost",
            "LocalHost",
            "localhost.",
            "localhost.localdomain",
            "api.localhost",
            "a.b.LOCALHOST.",
        ] {
            for (target, kind) in [
                (None, Kind::Refused),
                (None, Kind::Timeout),
                (Some("127.0.0.1:8080"), Kind::Refused),
                (Some("[::1]:80"), Kind::Reset),
            ] {
                let mut f = failure(kind);
                f.target = target.and_then(|t| t.parse().ok());
                f.host = Some(host.to_owned());
                assert_eq!(classify(&f), Class::LocalTarget, "{host} {target:?}");
                let a = pod("a", false, false, true);
                assert_eq!(
                    classify_with_owner(&f, Some(&a), None),
                    Class::LocalTarget,
                    "{host}"
                );
            }
        }
        // Names that only look like it, and a DNS failure for the name (the DNS path's).
        for host in [
            "localhost1",
            "mylocalhost",
            "localhost.example.com",
            ".localhost",
            "é.localhos",
        ] {
            assert!(!is_loopback_name(host), "{host}");
            let mut f = failure(Kind::Refused);
            f.target = None;
            f.host = Some(host.to_owned());
            assert_eq!(classify(&f), Class::StaleTarget, "{host}");
        }
        let mut dns = failure(Kind::DnsNotFound);
        dns.target = None;
        dns.host = Some("localhost".to_owned());
        assert_eq!(classify(&dns), Class::NameNotFound);
    }

    #[test]
    fn staleness_classes() {
        assert!(Class::StaleClientCache.is_staleness());
        assert!(Class::IpReused.is_staleness());
        assert!(Class::StaleClientBalancer.is_staleness());
        assert!(Class::Blackholed.is_staleness());
        assert!(!Class::NotStaleness.is_staleness());
        assert!(!Class::Unavailable.is_staleness());
        assert!(!Class::NameNotFound.is_staleness());
    }

    #[test]
    fn joined_rules() {
        let refused = failure(Kind::Refused);
        let reset = failure(Kind::Reset);
        let a = pod("a", true, false, false);
        let a_term = pod("a", false, true, false);
        let a_gone = pod("a", false, false, true);
        let b = pod("b", true, false, false);
        assert_eq!(
            classify_with_owner(&refused, None, None),
            Class::StaleClientCache
        );
        assert_eq!(
            classify_with_owner(&reset, Some(&a_term), None),
            Class::PooledConnection
        );
        assert_eq!(
            classify_with_owner(&reset, Some(&a_gone), None),
            Class::PooledConnection
        );
        assert_eq!(
            classify_with_owner(&refused, Some(&a), Some(&a)),
            Class::NotStaleness
        );
        assert_eq!(
            classify_with_owner(&refused, None, Some(&b)),
            Class::IpReused
        );
        assert_eq!(
            classify_with_owner(&refused, Some(&a_gone), Some(&b)),
            Class::IpReused
        );
        assert_eq!(
            classify_with_owner(&failure(Kind::Timeout), None, None),
            Class::Blackholed
        );
        assert_eq!(
            classify_with_owner(&refused, Some(&a_term), Some(&a_term)),
            Class::TerminatingTarget
        );
        assert_eq!(
            classify_with_owner(&refused, Some(&pod("c", false, false, false)), None),
            Class::NotReadyTarget
        );
    }
}
