//! The join of one failure with its target IP's history: who owned the IP at the error time and
//! now, in which state, for which Service, and which removal sent the client to a dead IP.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ghostip_core::{PodRef, ServiceKey, Time};
use ghostip_logs::{
    Class, ConnFailure, OwnerFacts, classify, classify_with_owner, is_local_address,
};
use jiff::SignedDuration;
use serde::Serialize;

use super::history::{HistoryError, HistorySource, IpHistory};
use super::windows::Workload;
use crate::ownership::{Membership, Ownership};

/// The state of the pod that owned an IP at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnerState {
    /// Ready and not terminating.
    Ready,
    /// Owned the IP but was not (yet) ready.
    NotReady,
    /// Had a deletion request (between the request and the end of its ownership).
    Terminating,
    /// No longer held the IP (deleted, or the IP changed): the last owner before the instant.
    Gone,
}

/// What a report shows about an owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TargetFacts {
    /// `namespace/name`.
    pub pod: String,
    /// Pod UID.
    pub uid: String,
    /// Node.
    pub node: Option<String>,
    /// Controller owner as `Kind/name`.
    pub owner: Option<String>,
    /// State at the instant.
    pub state: OwnerState,
    /// Start of its ownership of the IP.
    pub from: Time,
    /// End of its ownership (`None` while it holds the IP).
    pub until: Option<Time>,
    /// When its deletion was requested (`deletionTimestamp` minus the grace period).
    pub terminating_since: Option<Time>,
    /// The end of the ownership is an estimate.
    pub approximate: bool,
}

/// A pod removal that left a client aiming at a dead (or dying) IP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Removal {
    /// Identity of the removal: the pod UID (or `namespace/name` without one).
    pub key: String,
    /// The pod.
    pub pod: PodRef,
    /// Its workload.
    pub workload: Workload,
    /// When its removal started: the deletion request, else the end of its ownership.
    pub at: Time,
    /// When the pod stopped holding the IP, if it did.
    pub until: Option<Time>,
}

/// The result of joining one failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Joined {
    /// The class, from the owners when the IP's history is known, else from the error kind.
    pub class: Class,
    /// Whether the history knew the target IP (else the class is the error kind's).
    pub known_ip: bool,
    /// The owner at the error time (or the last one before it, [`OwnerState::Gone`]).
    pub at_error: Option<TargetFacts>,
    /// The owner now (the open interval at the end of the history).
    pub now: Option<TargetFacts>,
    /// The Service the IP was (or had last been) an endpoint of at the error time.
    pub service: Option<ServiceKey>,
    /// The removal behind the error, when the owner at the error time was terminating or gone.
    pub removal: Option<Removal>,
}

/// When the pod's deletion was requested, from every sign the history has, the earliest:
/// - `deletionTimestamp` minus the grace period (the API server sets it to the request time plus
///   the grace period; the ledger keeps the grace that came with the first deletionTimestamp,
///   but a history from elsewhere may hold the final `0` of the kubelet's last delete, so this
///   alone can be the deadline);
/// - the first time an EndpointSlice marked the pod's endpoint terminating (the ledger's
///   memberships);
/// - no later than the end of its ownership of the IP.
fn terminating_since(o: &Ownership, memberships: &[Membership]) -> Option<Time> {
    let from_deadline = o.terminating.map(|deadline| {
        let grace = o.grace_period_seconds.unwrap_or(0).max(0);
        deadline
            .checked_sub(SignedDuration::from_secs(grace))
            .unwrap_or(deadline)
    });
    let from_slice = memberships
        .iter()
        .filter(|m| {
            m.pod.as_ref().is_some_and(|p| {
                p.namespace == o.pod.namespace
                    && p.name == o.pod.name
                    && (p.uid.is_empty() || o.pod.uid.is_empty() || p.uid == o.pod.uid)
            })
        })
        .flat_map(|m| m.states.iter())
        .filter(|s| s.terminating && s.t0 >= o.start)
        .map(|s| s.t0)
        .min();
    let mut since = [from_deadline, from_slice].into_iter().flatten().min()?;
    if let Some(closed) = o.closed {
        since = since.min(closed);
    }
    Some(since.max(o.start))
}

fn facts(
    o: &Ownership,
    memberships: &[Membership],
    state: OwnerState,
) -> (OwnerFacts, TargetFacts) {
    let owner_facts = OwnerFacts {
        pod: o.pod.to_string(),
        ready: state == OwnerState::Ready,
        terminating: state == OwnerState::Terminating,
        gone: state == OwnerState::Gone,
        uid: o.pod.uid.clone(),
    };
    let target = TargetFacts {
        pod: o.pod.to_string(),
        uid: o.pod.uid.clone(),
        node: o.node.clone(),
        owner: match (&o.owner_kind, &o.owner_name) {
            (Some(k), Some(n)) => Some(format!("{k}/{n}")),
            _ => None,
        },
        state,
        from: o.start,
        until: o.closed,
        terminating_since: terminating_since(o, memberships),
        approximate: o.approximate,
    };
    (owner_facts, target)
}

/// Who owned the IP at `t`: the interval covering `t` (ready, not ready or terminating at `t`),
/// else the last one that ended at or before `t` ([`OwnerState::Gone`]), else nobody.
pub fn owner_at(h: &IpHistory, t: Time) -> Option<(&Ownership, OwnerFacts, TargetFacts)> {
    let ms = &h.memberships;
    let history = &h.ownerships;
    if let Some(o) = history.iter().find(|o| o.covers(t)) {
        let state = if terminating_since(o, ms).is_some_and(|s| s <= t) {
            OwnerState::Terminating
        } else if o.ready.is_some_and(|r| r <= t) {
            OwnerState::Ready
        } else {
            OwnerState::NotReady
        };
        let (f, tf) = facts(o, ms, state);
        return Some((o, f, tf));
    }
    history
        .iter()
        .filter(|o| o.closed.is_some_and(|c| c <= t))
        .max_by_key(|o| o.closed)
        .map(|o| {
            let (f, tf) = facts(o, ms, OwnerState::Gone);
            (o, f, tf)
        })
}

/// Who owns the IP now: the open interval, if any, in its latest known state.
pub fn owner_now(h: &IpHistory) -> Option<(&Ownership, OwnerFacts, TargetFacts)> {
    h.ownerships.iter().find(|o| o.closed.is_none()).map(|o| {
        let state = if o.terminating.is_some() {
            OwnerState::Terminating
        } else if o.ready.is_some() {
            OwnerState::Ready
        } else {
            OwnerState::NotReady
        };
        let (f, tf) = facts(o, &h.memberships, state);
        (o, f, tf)
    })
}

/// Whether a client-side layer held `target` (`ip:port`) after it left, at `t`.
fn held_at(h: &IpHistory, target: &str, t: Time) -> bool {
    h.held.iter().any(|w| w.target == target && w.covers(t))
}

/// A failure to an endpoint the client's own balancer still held is that balancer's
/// staleness, whatever else is true of the IP: refused, or timed out once the dead IP stops
/// answering at all (blackholed). An IP reused by a live pod, an application-level failure or
/// a pooled connection keep their class.
fn balancer_class(class: Class, held: bool) -> Class {
    match class {
        Class::StaleClientCache
        | Class::StaleTarget
        | Class::TerminatingTarget
        | Class::Blackholed
            if held =>
        {
            Class::StaleClientBalancer
        }
        other => other,
    }
}

/// The Service the IP was an endpoint of at `t`, else the one it had left last before `t`.
fn service_at(memberships: &[Membership], t: Time) -> Option<ServiceKey> {
    if let Some(m) = memberships
        .iter()
        .find(|m| m.start_t0 <= t && m.end_t0.is_none_or(|e| e > t))
    {
        return Some(m.service.clone());
    }
    memberships
        .iter()
        .filter(|m| m.end_t0.is_some_and(|e| e <= t))
        .max_by_key(|m| m.end_t0)
        .map(|m| m.service.clone())
}

fn removal_of(o: &Ownership, memberships: &[Membership]) -> Removal {
    let key = if o.pod.uid.is_empty() {
        o.pod.to_string()
    } else {
        o.pod.uid.clone()
    };
    Removal {
        key,
        pod: o.pod.clone(),
        workload: Workload::of(&o.pod, o.owner_kind.as_deref(), o.owner_name.as_deref()),
        at: terminating_since(o, memberships)
            .or(o.closed)
            .unwrap_or(o.start),
        until: o.closed,
    }
}

/// Joins failures with a [`HistorySource`], looking each distinct IP up once.
#[derive(Debug)]
pub struct Joiner<S> {
    source: S,
    cache: HashMap<IpAddr, IpHistory>,
    removals: BTreeMap<String, Removal>,
}

impl<S: HistorySource> Joiner<S> {
    /// A joiner over `source`.
    pub fn new(source: S) -> Self {
        Joiner {
            source,
            cache: HashMap::new(),
            removals: BTreeMap::new(),
        }
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Distinct IPs looked up so far (one lookup each).
    pub fn lookups(&self) -> usize {
        self.cache.len()
    }

    /// The cached history of an IP looked up before.
    pub fn history(&self, ip: IpAddr) -> Option<&IpHistory> {
        self.cache.get(&ip)
    }

    /// Every removal met so far, by key.
    pub fn removals(&self) -> &BTreeMap<String, Removal> {
        &self.removals
    }

    /// Joins one failure. DNS failures, failures without a target IP or a time, and target IPs
    /// the history never saw keep the class of their error kind; loopback and link-local
    /// targets (never a pod IP) are not looked up.
    ///
    /// # Errors
    /// [`HistoryError`] when the source fails (the first time the IP is looked up).
    pub fn join(&mut self, f: &ConnFailure) -> Result<Joined, HistoryError> {
        let unjoined = Joined {
            class: classify(f),
            known_ip: false,
            at_error: None,
            now: None,
            service: None,
            removal: None,
        };
        let (Some(target), Some(t)) = (f.target, f.timestamp) else {
            return Ok(unjoined);
        };
        if f.kind.is_dns() || is_local_address(target.ip()) {
            return Ok(unjoined);
        }
        let ip = target.ip().to_canonical();
        if !self.cache.contains_key(&ip) {
            let h = self.source.lookup(ip)?;
            self.cache.insert(ip, h);
        }
        let Some(h) = self.cache.get(&ip) else {
            return Ok(unjoined);
        };
        let held = held_at(h, &target.to_string(), t);
        if h.ownerships.is_empty() {
            return Ok(Joined {
                service: service_at(&h.memberships, t),
                class: balancer_class(unjoined.class, held),
                ..unjoined
            });
        }
        let at = owner_at(h, t);
        let now = owner_now(h);
        let class = balancer_class(
            classify_with_owner(f, at.as_ref().map(|a| &a.1), now.as_ref().map(|n| &n.1)),
            held,
        );
        let removal = at
            .as_ref()
            .filter(|a| matches!(a.2.state, OwnerState::Terminating | OwnerState::Gone))
            .map(|a| removal_of(a.0, &h.memberships));
        if let Some(r) = &removal {
            self.removals
                .entry(r.key.clone())
                .or_insert_with(|| r.clone());
        }
        Ok(Joined {
            class,
            known_ip: true,
            at_error: at.map(|a| a.2),
            now: now.map(|n| n.2),
            service: service_at(&h.memberships, t),
            removal,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::cell::Cell;

    use ghostip_logs::{Format, Kind};

    use super::*;
    use crate::ownership::EndReason;

    fn ts(s: &str) -> Time {
        s.parse().unwrap()
    }

    fn own(ip: &str, uid: &str, start: &str) -> Ownership {
        Ownership {
            ip: ip.parse().unwrap(),
            pod: PodRef {
                namespace: "shop".into(),
                name: format!("web-7c9d8f5b4-{uid}"),
                uid: uid.into(),
            },
            node: Some("node-1".into()),
            owner_kind: Some("ReplicaSet".into()),
            owner_name: Some("web-7c9d8f5b4".into()),
            start: ts(start),
            closed: None,
            end_reason: None,
            approximate: false,
            created: Some(ts(start)),
            ready: Some(ts(start) + SignedDuration::from_secs(2)),
            terminating: None,
            gone: None,
            opened: ts(start),
            grace_period_seconds: Some(30),
            prestop_seconds: None,
        }
    }

    /// Deleted at `deleted` (deadline = deleted + 30 s grace), gone at `gone`.
    fn removed(mut o: Ownership, deleted: &str, gone: &str) -> Ownership {
        o.terminating = Some(ts(deleted) + SignedDuration::from_secs(30));
        o.closed = Some(ts(gone));
        o.gone = Some(ts(gone));
        o.end_reason = Some(EndReason::Gone);
        o
    }

    struct Fake {
        h: HashMap<IpAddr, IpHistory>,
        calls: Cell<u32>,
    }

    impl HistorySource for Fake {
        fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError> {
            self.calls.set(self.calls.get() + 1);
            Ok(self.h.get(&ip).cloned().unwrap_or_default())
        }
        fn describe(&self) -> String {
            "fake".into()
        }
        fn has_services(&self) -> bool {
            false
        }
    }

    fn failure(kind: Kind, target: &str, t: &str) -> ConnFailure {
        ConnFailure::at(kind, Format::GoNet, target.parse().ok(), Some(ts(t)))
    }

    fn joiner() -> Joiner<Fake> {
        let old = removed(
            own("10.244.1.5", "aaaa", "2024-05-01T15:00:00Z"),
            "2024-05-01T15:42:00Z",
            "2024-05-01T15:42:03Z",
        );
        let mut reused = own("10.244.1.9", "bbbb", "2024-05-01T15:00:00Z");
        reused.closed = Some(ts("2024-05-01T15:42:05Z"));
        reused.gone = Some(ts("2024-05-01T15:42:05Z"));
        reused.terminating = Some(ts("2024-05-01T15:42:31Z"));
        let new_owner = own("10.244.1.9", "cccc", "2024-05-01T15:50:00Z");
        let live = own("10.244.1.7", "dddd", "2024-05-01T15:00:00Z");
        let mut h = HashMap::new();
        h.insert(
            "10.244.1.5".parse().unwrap(),
            IpHistory {
                ownerships: vec![old],
                memberships: vec![],
                flows: vec![],
                held: vec![],
            },
        );
        h.insert(
            "10.244.1.9".parse().unwrap(),
            IpHistory {
                ownerships: vec![new_owner, reused],
                memberships: vec![],
                flows: vec![],
                held: vec![],
            },
        );
        h.insert(
            "10.244.1.7".parse().unwrap(),
            IpHistory {
                ownerships: vec![live],
                memberships: vec![],
                flows: vec![],
                held: vec![],
            },
        );
        Joiner::new(Fake {
            h,
            calls: Cell::new(0),
        })
    }

    #[test]
    fn classes_follow_the_owner_at_the_error_time() {
        let mut j = joiner();
        let refused_gone = j
            .join(&failure(
                Kind::Refused,
                "10.244.1.5:8080",
                "2024-05-01T15:42:10Z",
            ))
            .unwrap();
        assert_eq!(refused_gone.class, Class::StaleClientCache);
        assert_eq!(refused_gone.at_error.unwrap().state, OwnerState::Gone);
        let removal = refused_gone.removal.unwrap();
        assert_eq!(removal.at, ts("2024-05-01T15:42:00Z"), "request time");
        assert_eq!(removal.workload.to_string(), "shop/deploy/web");

        let refused_terminating = j
            .join(&failure(
                Kind::Refused,
                "10.244.1.5:8080",
                "2024-05-01T15:42:01Z",
            ))
            .unwrap();
        assert_eq!(refused_terminating.class, Class::TerminatingTarget);
        let reset = j
            .join(&failure(
                Kind::Reset,
                "10.244.1.5:8080",
                "2024-05-01T15:42:01Z",
            ))
            .unwrap();
        assert_eq!(reset.class, Class::PooledConnection);
        let timeout = j
            .join(&failure(
                Kind::Timeout,
                "10.244.1.5:8080",
                "2024-05-01T15:43:00Z",
            ))
            .unwrap();
        assert_eq!(timeout.class, Class::Blackholed);
        let live = j
            .join(&failure(
                Kind::Refused,
                "10.244.1.7:8080",
                "2024-05-01T15:43:00Z",
            ))
            .unwrap();
        assert_eq!(live.class, Class::NotStaleness);
        assert!(live.removal.is_none());
        let reuse = j
            .join(&failure(
                Kind::Refused,
                "10.244.1.9:8080",
                "2024-05-01T15:43:00Z",
            ))
            .unwrap();
        assert_eq!(reuse.class, Class::IpReused);
        assert_eq!(reuse.now.unwrap().uid, "cccc");
        // One lookup per distinct IP, whatever the number of failures.
        assert_eq!(j.source().calls.get(), 3);
        assert_eq!(j.lookups(), 3);
        assert_eq!(j.removals().len(), 2);
    }

    #[test]
    fn unknown_ips_dns_and_undated_failures_keep_the_kind_class() {
        let mut j = joiner();
        let unknown = j
            .join(&failure(
                Kind::Refused,
                "52.1.2.3:443",
                "2024-05-01T15:43:00Z",
            ))
            .unwrap();
        assert_eq!(unknown.class, Class::StaleTarget);
        assert!(!unknown.known_ip);
        let mut undated = failure(Kind::Refused, "10.244.1.5:8080", "2024-05-01T15:43:00Z");
        undated.timestamp = None;
        assert_eq!(j.join(&undated).unwrap().class, Class::StaleTarget);
        let dns = failure(Kind::DnsTimeout, "10.96.0.10:53", "2024-05-01T15:43:00Z");
        assert_eq!(j.join(&dns).unwrap().class, Class::DnsPath);
        assert_eq!(j.source().calls.get(), 1);
        // A local address is never a pod IP: not staleness, and not looked up.
        let local = j
            .join(&failure(
                Kind::Refused,
                "127.0.0.1:8080",
                "2024-05-01T15:43:00Z",
            ))
            .unwrap();
        assert_eq!(local.class, Class::LocalTarget);
        assert!(!local.known_ip);
        assert_eq!(j.source().calls.get(), 1);
    }

    #[test]
    fn removal_time_when_the_kept_grace_is_the_kubelets_final_zero() {
        // As recorded in the lab: deletionTimestamp = request + 30 s, but the last update (the
        // kubelet's grace-0 delete) left grace 0; the pod was gone 130 ms after the request.
        let mut o = own("10.244.1.3", "eeee", "2024-05-01T15:00:00Z");
        o.terminating = Some(ts("2024-05-01T15:42:30Z"));
        o.grace_period_seconds = Some(0);
        o.closed = Some(ts("2024-05-01T15:42:00.130Z"));
        let mut h = IpHistory {
            ownerships: vec![o.clone()],
            memberships: vec![],
            flows: vec![],
            held: vec![],
        };
        assert_eq!(
            removal_of(&o, &h.memberships).at,
            ts("2024-05-01T15:42:00.130Z")
        );
        // The EndpointSlice's terminating condition is earlier still.
        h.memberships.push(Membership {
            service: ServiceKey::new("shop", "web"),
            ip: o.ip,
            pod: Some(o.pod.clone()),
            node: None,
            start_t0: ts("2024-05-01T15:00:01Z"),
            start_received: ts("2024-05-01T15:00:01Z"),
            end_t0: Some(ts("2024-05-01T15:42:00.100Z")),
            end_received: None,
            approximate: false,
            states: vec![crate::ownership::MembershipState {
                t0: ts("2024-05-01T15:42:00.050Z"),
                received: ts("2024-05-01T15:42:00.060Z"),
                ready: false,
                serving: true,
                terminating: true,
            }],
        });
        assert_eq!(
            removal_of(&o, &h.memberships).at,
            ts("2024-05-01T15:42:00.050Z")
        );
        let (_, f, tf) = owner_at(&h, ts("2024-05-01T15:42:00.080Z")).unwrap();
        assert!(f.terminating);
        assert_eq!(tf.state, OwnerState::Terminating);
        assert_eq!(
            service_at(&h.memberships, ts("2024-05-01T15:43:00Z"))
                .unwrap()
                .to_string(),
            "shop/web"
        );
    }

    #[test]
    fn not_ready_before_ready_time() {
        let mut j = joiner();
        let early = j
            .join(&failure(
                Kind::Refused,
                "10.244.1.7:8080",
                "2024-05-01T15:00:01Z",
            ))
            .unwrap();
        assert_eq!(early.class, Class::NotReadyTarget);
    }
}
