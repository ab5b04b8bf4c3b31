//! The history records of an IP: which pod owned it when ([`Ownership`]) and when it was an
//! endpoint of a Service ([`Membership`]), as the ledger stores them and a truth-history file
//! rebuilds them.

use std::net::IpAddr;

use ghostip_core::{PodRef, ServiceKey, Time};
use serde::{Deserialize, Serialize};

/// Why an ownership interval closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// The pod object disappeared.
    Gone,
    /// The pod no longer lists this IP.
    IpChanged,
    /// Another pod appeared with this IP while this interval was open.
    Reused,
    /// The pod was missing from a relist (e.g. it vanished while ghostip was down).
    Relist,
}

impl EndReason {
    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Gone => "gone",
            EndReason::IpChanged => "ip-changed",
            EndReason::Reused => "reused",
            EndReason::Relist => "relist",
        }
    }

    /// The reason named `s` (as [`EndReason::as_str`] gives it).
    pub fn parse(s: &str) -> Option<Self> {
        [
            EndReason::Gone,
            EndReason::IpChanged,
            EndReason::Reused,
            EndReason::Relist,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One pod's ownership of one IP, `[start, closed)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    /// The IP.
    pub ip: IpAddr,
    /// The pod.
    pub pod: PodRef,
    /// Node the pod ran on.
    pub node: Option<String>,
    /// Controller owner kind, e.g. `ReplicaSet`.
    pub owner_kind: Option<String>,
    /// Controller owner name.
    pub owner_name: Option<String>,
    /// Start of the ownership: the pod's creation time when known (else when ghostip
    /// first saw it), never before the previous owner's end.
    pub start: Time,
    /// End of the ownership; `None` while open.
    pub closed: Option<Time>,
    /// Why it closed.
    pub end_reason: Option<EndReason>,
    /// The end is an estimate (the pod vanished while ghostip was not watching).
    pub approximate: bool,
    /// `metadata.creationTimestamp`.
    pub created: Option<Time>,
    /// First time ghostip saw the pod ready.
    pub ready: Option<Time>,
    /// `metadata.deletionTimestamp`: when the pod started terminating.
    pub terminating: Option<Time>,
    /// When the pod object disappeared (or stopped listing the IP).
    pub gone: Option<Time>,
    /// When ghostip first saw this ownership.
    pub opened: Time,
    /// Termination grace period, seconds.
    pub grace_period_seconds: Option<i64>,
    /// preStop sleep, seconds.
    pub prestop_seconds: Option<u64>,
}

impl Ownership {
    /// Whether the IP belonged to this pod at `at`.
    pub fn covers(&self, at: Time) -> bool {
        self.start <= at && self.closed.is_none_or(|c| c > at)
    }
}

/// Who owned an IP at a time, and the owners just before and after.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whois {
    /// The owner at the time asked, if any.
    pub at_time: Option<Ownership>,
    /// The previous owner: before `at_time`, or the last one that ended before the time asked.
    pub before: Option<Ownership>,
    /// The next owner to start after the time asked.
    pub after: Option<Ownership>,
    /// When the IP stopped being a ready endpoint while these pods owned it, per Service
    /// (from the ledger's memberships): when it left the endpoints, which a pod's
    /// `deletionTimestamp` (the request plus the grace period) is not.
    #[serde(default)]
    pub left_endpoints: Vec<EndpointExit>,
}

impl Whois {
    /// The exits of `o`'s tenure: endpoints naming its pod, or naming no pod and leaving
    /// while it owned the IP.
    pub fn exits_of<'a>(&'a self, o: &'a Ownership) -> impl Iterator<Item = &'a EndpointExit> + 'a {
        self.left_endpoints.iter().filter(move |x| match &x.pod {
            Some(p) => {
                p.namespace == o.pod.namespace
                    && p.name == o.pod.name
                    && (p.uid.is_empty() || o.pod.uid.is_empty() || p.uid == o.pod.uid)
            }
            None => o.start <= x.at && o.closed.is_none_or(|c| x.at <= c),
        })
    }
}

/// One state of an endpoint while it was a member, from a change time on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipState {
    /// Change time of the state (t0).
    pub t0: Time,
    /// When ghostip received it.
    pub received: Time,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
}

/// An IP's membership in a Service's endpoints (any port), with its state changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The Service.
    pub service: ServiceKey,
    /// The endpoint IP.
    pub ip: IpAddr,
    /// The pod behind the endpoint, when the slice named it.
    pub pod: Option<PodRef>,
    /// The endpoint's node.
    pub node: Option<String>,
    /// When it joined (t0).
    pub start_t0: Time,
    /// When ghostip received the join.
    pub start_received: Time,
    /// When it left (t0); `None` while a member.
    pub end_t0: Option<Time>,
    /// When ghostip received the leave.
    pub end_received: Option<Time>,
    /// The end is an estimate (it vanished while ghostip was not watching).
    pub approximate: bool,
    /// State changes, oldest first (the first is the state it joined with).
    pub states: Vec<MembershipState>,
}

/// When an IP stopped being a ready endpoint of a Service: what DNS stops answering and a
/// load balancer stops sending new connections to (while any other endpoint is ready).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointExit {
    /// The Service.
    pub service: ServiceKey,
    /// The pod behind the endpoint, when the slice named it.
    pub pod: Option<PodRef>,
    /// Change time (t0) of the first state that was no longer ready, or of the removal from
    /// the slice.
    pub at: Time,
    /// When ghostip received it.
    pub received: Time,
    /// Whether it is the removal from the slice (else the endpoint turned not ready, e.g.
    /// terminating, and left the slice later).
    pub removed: bool,
}

impl Membership {
    /// When this membership's endpoint stopped being ready after it had been: the first
    /// not-ready state after a ready one, else the membership's end while ready. `None`
    /// while it is still ready, or when it never was.
    pub fn exit(&self) -> Option<EndpointExit> {
        let exit = |at, received, removed| EndpointExit {
            service: self.service.clone(),
            pod: self.pod.clone(),
            at,
            received,
            removed,
        };
        let mut was_ready = false;
        for s in &self.states {
            if s.ready {
                was_ready = true;
            } else if was_ready {
                return Some(exit(s.t0, s.received, false));
            }
        }
        match (was_ready, self.end_t0, self.end_received) {
            (true, Some(at), Some(received)) => Some(exit(at, received, true)),
            _ => None,
        }
    }
}
