//! The shared vocabulary: services, endpoints, pods, targets, layers and paths.
//!
//! Every layer (DNS, datapath, conntrack, …) reports what it holds in these types, so
//! the engine can compare any path with the truth without knowing where the
//! observation came from. Layers and path kinds are open: the core names none of them
//! (see [`Layer`]).

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// A point in time. Injected by adapters; the core never reads a clock.
pub type Time = Timestamp;

/// `namespace/name` of a Kubernetes Service.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceKey {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
}

impl ServiceKey {
    /// Builds a key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The DNS name CoreDNS answers for this Service in `zone` (e.g. `cluster.local`).
    pub fn dns_name(&self, zone: &str) -> String {
        format!(
            "{}.{}.svc.{}.",
            self.name,
            self.namespace,
            zone.trim_end_matches('.')
        )
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Identity of one pod incarnation. The uid tells two pods of the same name apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodRef {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub name: String,
    /// `metadata.uid`; empty when the source did not carry it.
    pub uid: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Transport protocol of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        })
    }
}

/// What a path routes or resolves to: an IP, with a port where the layer has one.
///
/// DNS answers are bare IPs (`port: None`); datapath backends carry their port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Target {
    /// Address.
    pub ip: IpAddr,
    /// Port, where the layer routes to a port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl Target {
    /// A bare IP target (DNS answers).
    pub fn ip(ip: IpAddr) -> Self {
        Self { ip, port: None }
    }

    /// An `ip:port` target (load-balancer backends).
    pub fn socket(ip: IpAddr, port: u16) -> Self {
        Self {
            ip,
            port: Some(port),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.ip, self.port) {
            (ip, None) => write!(f, "{ip}"),
            (IpAddr::V4(ip), Some(p)) => write!(f, "{ip}:{p}"),
            (IpAddr::V6(ip), Some(p)) => write!(f, "[{ip}]:{p}"),
        }
    }
}

/// A kind of copy of the truth (`dns`, `datapath`, `conntrack`, …).
///
/// The vocabulary is open: the core declares no layer. Each layer declares its own
/// constant next to its model (e.g. `ghostip_session::layers::dns::DNS`), so a new layer
/// is added without touching the core. Serializes as its id (`"dns"`); where text comes
/// back (the ledger, an agent's `/status`), it stays text, so an unknown id is not an error.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Layer(&'static str);

impl Layer {
    /// A layer named `id`, lowercase kebab-case (`[a-z0-9]` words joined by single `-`).
    ///
    /// Declare layers as `const` items: a malformed id then fails the build (the check
    /// runs at compile time).
    pub const fn new(id: &'static str) -> Self {
        assert!(is_vocab_name(id), "a layer id is lowercase kebab-case");
        Self(id)
    }

    /// The id used in metrics labels, reports and the ledger.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Debug for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Layer({})", self.0)
    }
}

impl Serialize for Layer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

/// The kind of a path (`dns-pod`, `iptables`, …), a metrics label with bounded cardinality.
///
/// Open like [`Layer`]: each layer declares its kinds as constants next to its own.
/// Two kinds are equal when their layer and name are; serializes as its name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathKind {
    layer: Layer,
    name: &'static str,
}

impl PathKind {
    /// A kind of path of `layer` named `name`, lowercase kebab-case like a layer id.
    ///
    /// Declare kinds as `const` items: a malformed name then fails the build.
    pub const fn new(layer: Layer, name: &'static str) -> Self {
        assert!(
            is_vocab_name(name),
            "a path kind name is lowercase kebab-case"
        );
        Self { layer, name }
    }

    /// The name used in metrics labels, reports and the ledger.
    pub const fn as_str(self) -> &'static str {
        self.name
    }

    /// The layer this kind of path belongs to.
    pub const fn layer(self) -> Layer {
        self.layer
    }
}

impl fmt::Display for PathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Debug for PathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PathKind({}/{})", self.layer.0, self.name)
    }
}

impl Serialize for PathKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name)
    }
}

/// Whether `s` is a valid layer id or path kind name: non-empty words of `[a-z0-9]`
/// joined by single `-`, e.g. `dns-cluster-ip`. Usable in `const` context.
pub const fn is_vocab_name(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b[0] == b'-' || b[b.len() - 1] == b'-' {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let ok = c.is_ascii_lowercase() || c.is_ascii_digit() || (c == b'-' && b[i - 1] != b'-');
        if !ok {
            return false;
        }
        i += 1;
    }
    true
}

/// One concrete copy of the truth: `dns via 10.244.1.5 (coredns-abc)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PathInfo {
    /// Stable identifier, e.g. `dns-pod/10.244.1.5:53` or `iptables/node-2`.
    pub id: String,
    /// Kind of path.
    pub kind: PathKind,
    /// Human description: `dns via 10.244.1.5 (kube-system/coredns-abc)`.
    pub description: String,
    /// Node the path is seen from, where it is node-local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl PathInfo {
    /// The layer of this path.
    pub fn layer(&self) -> Layer {
        self.kind.layer()
    }
}

/// When the truth changed, as Kubernetes says and as ghostip received it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeTime {
    /// `endpoints.kubernetes.io/last-change-trigger-time` when present and plausible, else
    /// `received` (see [`T0Correction`]).
    pub t0: Time,
    /// When ghostip's watch delivered the change.
    pub received: Time,
    /// Whether `t0` came from the trigger-time annotation.
    pub from_trigger_annotation: bool,
    /// The trigger-time annotation ghostip did not take as t0, and why (`t0` is then
    /// `received`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected: Option<T0Correction>,
}

impl ChangeTime {
    /// A change known only by its receive time.
    pub fn received_at(at: Time) -> Self {
        Self {
            t0: at,
            received: at,
            from_trigger_annotation: false,
            corrected: None,
        }
    }

    /// The change a write of an EndpointSlice stands for: its trigger-time annotation when
    /// what ghostip itself observed allows it, else the receive time.
    ///
    /// `last_seen` is when ghostip received the version this write replaces: every endpoint
    /// this write removes was still listed then, so the change cannot predate it (by more
    /// than the second the API server rounds condition times down to: a trigger time is a
    /// pod's Ready `lastTransitionTime`, whole seconds).
    /// `max_lead` bounds how long before its receive time the write's cause may lie (the
    /// EndpointSlice controller writes within a second or so of a change; a trigger time
    /// tens of seconds older is a change the controller saw late, e.g. a Ready flap just
    /// after an API server outage, not the one this write makes). A trigger time after the
    /// receive time (clocks that differ) is corrected too.
    pub fn bounded(
        trigger: Option<Time>,
        received: Time,
        last_seen: Option<Time>,
        max_lead: Duration,
    ) -> Self {
        let Some(trigger) = trigger else {
            return Self::received_at(received);
        };
        let reason = if trigger > received {
            Some(T0CorrectionReason::AfterReceived)
        } else if let Some(seen) = last_seen.filter(|seen| {
            seen.duration_since(trigger) > jiff::SignedDuration::from_secs(TRIGGER_ROUNDING_S)
        }) {
            Some(T0CorrectionReason::BeforeLastSeen { last_seen: seen })
        } else if received.duration_since(trigger)
            > jiff::SignedDuration::try_from(max_lead).unwrap_or(jiff::SignedDuration::MAX)
        {
            Some(T0CorrectionReason::FarBeforeReceived { max_lead })
        } else {
            None
        };
        match reason {
            None => Self {
                t0: trigger,
                received,
                from_trigger_annotation: true,
                corrected: None,
            },
            Some(reason) => Self {
                t0: received,
                received,
                from_trigger_annotation: false,
                corrected: Some(T0Correction { trigger, reason }),
            },
        }
    }

    /// The trigger time the change carried, taken as t0 or not.
    pub fn trigger(&self) -> Option<Time> {
        match (self.from_trigger_annotation, self.corrected) {
            (true, _) => Some(self.t0),
            (false, Some(c)) => Some(c.trigger),
            (false, None) => None,
        }
    }
}

/// Condition times, and so trigger times, are whole seconds: a trigger time may lie up to
/// this long before the change it stands for.
const TRIGGER_ROUNDING_S: i64 = 1;

/// A trigger time ghostip did not take as t0 (it took the receive time instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct T0Correction {
    /// The `last-change-trigger-time` annotation of the write.
    pub trigger: Time,
    /// Why it was not taken.
    pub reason: T0CorrectionReason,
}

/// Why a trigger time was not taken as t0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum T0CorrectionReason {
    /// Earlier than a version of the slice ghostip received that still listed the endpoints
    /// this write changes.
    BeforeLastSeen {
        /// When that version was received.
        last_seen: Time,
    },
    /// More than `max_lead` before ghostip received the write.
    FarBeforeReceived {
        /// The bound.
        #[serde(with = "secs_f64")]
        max_lead: Duration,
    },
    /// Later than ghostip received the write (the API server's clock is ahead).
    AfterReceived,
}

impl T0CorrectionReason {
    /// A short label (`before-last-seen`, `far-before-received`, `after-received`), as the
    /// ledger stores it.
    pub fn label(&self) -> &'static str {
        match self {
            T0CorrectionReason::BeforeLastSeen { .. } => "before-last-seen",
            T0CorrectionReason::FarBeforeReceived { .. } => "far-before-received",
            T0CorrectionReason::AfterReceived => "after-received",
        }
    }
}

impl fmt::Display for T0Correction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trigger = self.trigger.strftime("%T%.3f");
        match self.reason {
            T0CorrectionReason::BeforeLastSeen { last_seen } => write!(
                f,
                "trigger time {trigger} predates the version received at {} that still listed the endpoint",
                last_seen.strftime("%T%.3f")
            ),
            T0CorrectionReason::FarBeforeReceived { max_lead } => write!(
                f,
                "trigger time {trigger} is more than {:.0} s before the write was received",
                max_lead.as_secs_f64()
            ),
            T0CorrectionReason::AfterReceived => {
                write!(f, "trigger time {trigger} is after the write was received")
            }
        }
    }
}

mod secs_f64 {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Whole seconds as a [`Duration`], for configuration values.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Index of a path registered with the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PathIdx(pub u32);

/// One target a path held, with the remaining TTL where the layer has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldTarget {
    /// What the path resolves or routes to.
    pub target: Target,
    /// Remaining TTL in seconds (DNS answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
    /// When the path last used the target, where the layer knows it more closely than the
    /// observation's own time (the last SYN of a client's connects to a removed pod): a
    /// stale target's window then ends there rather than at the observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<Time>,
}

impl HeldTarget {
    /// A target held, with no TTL and no time of last use.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            ttl: None,
            last_used: None,
        }
    }
}

/// Why a path could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureReason {
    /// No answer within the timeout.
    Timeout,
    /// The server answered SERVFAIL.
    Servfail,
    /// The server answered REFUSED.
    Refused,
    /// Another non-success response code (NXDOMAIN is not a failure: it is an empty answer).
    Rcode(String),
    /// The network said no (ICMP unreachable, connection refused, reset).
    Network(String),
    /// A reader could not read or parse the path's state.
    Unreadable(String),
}

impl FailureReason {
    /// A short, bounded label for metrics (`reason`).
    pub fn label(&self) -> &'static str {
        match self {
            FailureReason::Timeout => "timeout",
            FailureReason::Servfail => "servfail",
            FailureReason::Refused => "refused",
            FailureReason::Rcode(_) => "rcode",
            FailureReason::Network(_) => "network",
            FailureReason::Unreadable(_) => "unreadable",
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::Timeout => f.write_str("timeout"),
            FailureReason::Servfail => f.write_str("SERVFAIL"),
            FailureReason::Refused => f.write_str("REFUSED"),
            FailureReason::Rcode(c) => write!(f, "rcode {c}"),
            FailureReason::Network(e) => write!(f, "network error: {e}"),
            FailureReason::Unreadable(e) => write!(f, "unreadable: {e}"),
        }
    }
}

/// What one path held for one service at one instant, or why it could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObservationResult {
    /// The complete set the path held (an empty set is a valid answer, e.g. NXDOMAIN).
    Held(Vec<HeldTarget>),
    /// The path could not be read; says nothing about staleness.
    Failed(FailureReason),
}

/// Which of a path's desired targets one observation speaks for. A DNS path is asked
/// several questions about one Service: an A answer says which IPv4 addresses it hands out
/// and nothing about IPv6 ones, an SRV answer of one named port says which `ip:port` of
/// that port. Targets outside the scope are neither missing nor converged by it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    /// Every target (a datapath read holds all of them).
    #[default]
    All,
    /// Bare IPv4 addresses (an A answer).
    Ipv4,
    /// Bare IPv6 addresses (an AAAA answer).
    Ipv6,
    /// `ip:port` targets with one of these ports (an SRV answer of one named port).
    Ports(Vec<u16>),
}

impl Scope {
    /// Whether `t` is one of the targets an observation of this scope speaks for.
    pub fn contains(&self, t: &Target) -> bool {
        match self {
            Scope::All => true,
            Scope::Ipv4 => t.port.is_none() && t.ip.is_ipv4(),
            Scope::Ipv6 => t.port.is_none() && t.ip.is_ipv6(),
            Scope::Ports(ports) => t.port.is_some_and(|p| ports.contains(&p)),
        }
    }
}

/// One observation of one path for one service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The path, as registered with the engine.
    pub path: PathIdx,
    /// The service the observation is about.
    pub service: ServiceKey,
    /// When the observation was made (for a DNS query: when the answer arrived).
    pub at: Time,
    /// What it held.
    pub result: ObservationResult,
    /// Round-trip time of the probe, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Layer = Layer::new("test");
    const TEST_KIND: PathKind = PathKind::new(TEST, "test-path-2");

    #[test]
    fn vocab_names_are_lowercase_kebab() {
        for ok in ["dns", "dns-cluster-ip", "grpc-channelz", "ipv6", "a"] {
            assert!(is_vocab_name(ok), "{ok}");
        }
        for bad in [
            "", "-", "dns-", "-dns", "dns--pod", "Dns", "dns_pod", "dns pod", "dns.pod",
        ] {
            assert!(!is_vocab_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_kind_the_core_never_saw_serializes_as_its_name() -> Result<(), serde_json::Error> {
        assert_eq!(TEST_KIND.layer(), TEST);
        assert_eq!(TEST_KIND.to_string(), "test-path-2");
        let info = PathInfo {
            id: "test-path-2/a".into(),
            kind: TEST_KIND,
            description: "d".into(),
            node: None,
        };
        assert_eq!(info.layer(), TEST);
        assert_eq!(
            serde_json::to_string(&(TEST, info))?,
            r#"["test",{"id":"test-path-2/a","kind":"test-path-2","description":"d"}]"#
        );
        Ok(())
    }

    #[test]
    fn kinds_of_the_same_name_in_two_layers_differ() {
        const OTHER: Layer = Layer::new("other");
        assert_ne!(PathKind::new(TEST, "x"), PathKind::new(OTHER, "x"));
        assert_eq!(PathKind::new(TEST, "x"), PathKind::new(TEST, "x"));
    }
}
