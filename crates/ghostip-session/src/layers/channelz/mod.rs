//! The channelz layer: a gRPC client's own balancer, read through channelz, judged for staleness only: subchannels that still point at an address the target's Service no longer lists.
//!
//! Pure: no IO, time passed in. A client that balances on its side (grpc-go `dns:///` with
//! `round_robin`, grpc-java `round_robin`) keeps one subchannel per address its resolver
//! returned and re-resolves only when a connection fails (grpc-go at most once per 30 s) or a
//! server's `MaxConnectionAge` closes it; until then it keeps pods that left the Service.
//!
//! The adapter reads one opted-in client pod's channelz ([`ClientRead`]: each top channel's
//! target and each subchannel's address and connectivity state, nothing else) and hands it to
//! [`ChannelzModel::on_read`]. Every channel whose target names a Service
//! ([`service_of_target`]: `dns:///web.demo.svc.cluster.local:50051`, `web.demo:50051`,
//! `web:50051` in the client's namespace) is one engine path, `channelz/<ns>/<pod>/<target>`,
//! registered with [`Judging::StaleOnly`]: its desired set is the Service's endpoints (every
//! endpoint of its slices, ready or terminating, on every port of the slice, as for
//! conntrack: a subchannel to a terminating pod still draining is not stale), and each read
//! is one observation holding the addresses of its subchannels that are not `SHUTDOWN`. A
//! subchannel address the Service no longer lists opens a stale window from the moment it
//! left (t0) to the first read without it, judged against the path's expected lag.

pub mod budget;
pub mod drain;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ghostip_core::engine::{Engine, Judging};
use ghostip_core::truth::ServiceChange;
use ghostip_core::{
    ChangeTime, HeldTarget, Layer, Observation, ObservationResult, PathIdx, PathInfo, PathKind,
    ServiceKey, Target, Time,
};
use serde::Serialize;

use crate::layer::{LayerCx, LayerModel, touched_services};
use crate::layers::conntrack::desired;
use crate::truth_event::{Received, TruthEvent, TruthKey};

/// gRPC clients' balancers, read through channelz.
pub const CHANNELZ: Layer = Layer::new("channelz");
/// One channel of one client pod (`channelz/<ns>/<pod>/<target>`).
pub const GRPC_CHANNEL: PathKind = PathKind::new(CHANNELZ, "grpc-channel");

/// The expected lag of a client path when its pod does not say otherwise: grpc-go
/// re-resolves at most once every 30 s after a connection fails, and the DNS answer it gets
/// may be up to the cluster DNS TTL (5 s by default) old.
pub const DEFAULT_EXPECTED_LAG: Duration = Duration::from_secs(35);

/// A subchannel's connectivity state, as channelz reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConnState {
    /// Not reported.
    Unknown,
    /// No connection, none being made.
    Idle,
    /// Connecting.
    Connecting,
    /// Connected.
    Ready,
    /// The last connection attempt failed; the balancer retries with backoff.
    TransientFailure,
    /// Removed from the balancer: it no longer holds the address.
    Shutdown,
}

impl ConnState {
    /// The state from channelz's `ChannelConnectivityState.State` number.
    pub fn from_proto(n: i32) -> Self {
        match n {
            1 => Self::Idle,
            2 => Self::Connecting,
            3 => Self::Ready,
            4 => Self::TransientFailure,
            5 => Self::Shutdown,
            _ => Self::Unknown,
        }
    }

    /// Whether a subchannel in this state still holds its address (the balancer keeps it
    /// and will connect to it again).
    pub fn holds(self) -> bool {
        self != Self::Shutdown
    }
}

/// One subchannel: its address (`None` when channelz did not give one that parses) and
/// state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubchannelRead {
    /// The address the subchannel connects to.
    pub address: Option<SocketAddr>,
    /// Its connectivity state.
    pub state: ConnState,
}

/// One top channel: its target and its subchannels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelRead {
    /// The target the client dialed (`dns:///web.demo.svc.cluster.local:50051`).
    pub target: String,
    /// Its subchannels, as far as read.
    pub subchannels: Vec<SubchannelRead>,
}

/// One complete read of a client's channelz.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientRead {
    /// Its top channels.
    pub channels: Vec<ChannelRead>,
    /// The read stopped at its bound (channels or subchannels): what was not read is not
    /// judged, and channels not in the read are not taken as closed.
    pub truncated: bool,
}

/// The address in a subchannel's channelz target: grpc-go gives `10.244.1.7:50051`,
/// grpc-java its address groups, `[[[/10.244.1.7:50051]/{}]]`. The first `ip:port` found
/// (see [`parse_addresses`] for all of them).
pub fn parse_address(text: &str) -> Option<SocketAddr> {
    parse_addresses(text).into_iter().next()
}

/// Every address in a subchannel's channelz target, in order, without repeats.
///
/// grpc-go's target is one `ip:port`. grpc-java's is the subchannel's list of address groups,
/// each `[addresses]/{attributes}`, an address being Java's `InetSocketAddress` text:
/// `/10.244.1.7:50051`, `web-a.demo/10.244.1.7:50051` with a host name, `/[fd00:0:0:0:0:0:0:7]:50051`
/// for IPv6 (JDK 14 on) or `/fd00:0:0:0:0:0:0:7:50051` (JDK 13 and older, no brackets). A
/// subchannel with several addresses (a dual-stack endpoint's group; grpc-java's older
/// `pick_first`, one subchannel for the whole list) tries each in turn, so it holds all of them.
pub fn parse_addresses(text: &str) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    if let Ok(a) = text.trim().parse::<SocketAddr>() {
        out.push(a);
        return out;
    }
    for t in text.split(['/', '{', '}', ',', ' ']) {
        let t = t.trim_start_matches('[').trim_end_matches(']');
        let a = t
            .parse::<SocketAddr>()
            .ok()
            .or_else(|| format!("[{t}").parse::<SocketAddr>().ok())
            .or_else(|| java_unbracketed_v6(t));
        if let Some(a) = a
            && !out.contains(&a)
        {
            out.push(a);
        }
    }
    out
}

/// JDK 13 and older print an IPv6 socket address without brackets, always in eight groups:
/// `fd00:0:0:0:0:0:0:7:50051`. Only that full form is taken, so `fd00::7:80` stays
/// ambiguous and unread.
fn java_unbracketed_v6(t: &str) -> Option<SocketAddr> {
    let (host, port) = t.rsplit_once(':')?;
    if host.split(':').count() != 8 {
        return None;
    }
    let ip = host.parse::<std::net::Ipv6Addr>().ok()?;
    Some(SocketAddr::new(IpAddr::V6(ip), port.parse().ok()?))
}

/// The Service a channel's target names, for a client in `namespace`: the host of
/// `dns:///host:port`, `dns://authority/host:port` or a bare `host:port` is `name`,
/// `name.ns`, `name.ns.svc` or `name.ns.svc.<zone>`. An IP address, another scheme or any
/// other name names none.
pub fn service_of_target(target: &str, namespace: &str) -> Option<ServiceKey> {
    let rest = match target.split_once("://") {
        Some(("dns", rest)) => rest.split_once('/').map_or(rest, |(_, host)| host),
        Some(_) => return None,
        None => target.strip_prefix("dns:").unwrap_or(target),
    };
    let host = match rest.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => rest,
    };
    let host = host.trim_end_matches('.');
    if host.is_empty() || host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
        return None;
    }
    let labels: Vec<&str> = host.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !labels.iter().all(label_ok) {
        return None;
    }
    match labels.as_slice() {
        [name] => Some(ServiceKey::new(namespace, *name)),
        [name, ns] | [name, ns, "svc"] => Some(ServiceKey::new(*ns, *name)),
        [name, ns, "svc", _zone @ ..] => Some(ServiceKey::new(*ns, *name)),
        _ => None,
    }
}

/// A client pod, `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ClientPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ClientPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A subchannel whose address the target's Service no longer lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaleSubchannel {
    /// The client pod.
    pub client: String,
    /// The channel's target.
    pub channel: String,
    /// The Service the target names.
    pub service: String,
    /// The subchannel's address.
    pub address: SocketAddr,
    /// Its state in the last read.
    pub state: ConnState,
    /// The pod that owned the address when it left, where the session saw it leave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub former_owner: Option<String>,
    /// The first read that saw it.
    pub first_seen: Time,
    /// The last read that saw it.
    pub last_seen: Time,
}

/// What one read meant.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Observations made (for the ledger).
    pub recorded: Vec<Observation>,
    /// Channels read.
    pub channels: usize,
    /// Of which judged (their target names a Service the truth knows).
    pub judged: usize,
    /// Subchannels read.
    pub subchannels: usize,
    /// Of which stale.
    pub stale: usize,
}

#[derive(Debug)]
struct ChannelPath {
    path: PathIdx,
    service: ServiceKey,
}

#[derive(Debug, Default)]
struct Client {
    /// By channel target.
    channels: BTreeMap<String, ChannelPath>,
    /// Stale subchannels in the last read, by (target, address).
    stale: BTreeMap<(String, SocketAddr), StaleSubchannel>,
    expected_lag: Option<Duration>,
}

/// The model of every opted-in client pod's channels.
#[derive(Debug)]
pub struct ChannelzModel {
    default_lag: Duration,
    clients: BTreeMap<ClientPod, Client>,
}

impl Default for ChannelzModel {
    fn default() -> Self {
        Self::new(DEFAULT_EXPECTED_LAG)
    }
}

impl ChannelzModel {
    /// A model whose paths expect `default_lag` unless a client says otherwise.
    pub fn new(default_lag: Duration) -> Self {
        Self {
            default_lag,
            clients: BTreeMap::new(),
        }
    }

    /// Sets a client's expected lag (its pod's annotation); `None`: the default.
    pub fn set_expected_lag(
        &mut self,
        cx: &mut LayerCx<'_>,
        pod: &ClientPod,
        lag: Option<Duration>,
    ) {
        let default = self.default_lag;
        let client = self.clients.entry(pod.clone()).or_default();
        if client.expected_lag == lag {
            return;
        }
        client.expected_lag = lag;
        for c in client.channels.values() {
            cx.set_expected_lag(c.path, lag.unwrap_or(default));
        }
    }

    /// The clients known, with their paths' count.
    pub fn clients(&self) -> impl Iterator<Item = (&ClientPod, usize)> {
        self.clients.iter().map(|(p, c)| (p, c.channels.len()))
    }

    /// Stale subchannels in every client's last read.
    pub fn stale(&self) -> impl Iterator<Item = &StaleSubchannel> {
        self.clients.values().flat_map(|c| c.stale.values())
    }

    /// Whether any client path has an open, unconverged tracking (read again soon).
    pub fn unconverged(&self, engine: &Engine) -> bool {
        let paths: BTreeSet<PathIdx> = self
            .clients
            .values()
            .flat_map(|c| c.channels.values().map(|p| p.path))
            .collect();
        engine
            .open_trackings()
            .any(|t| paths.contains(&t.path) && t.converged_by.is_none())
    }

    /// Drops a client (its pod is gone or no longer opted in): its paths' open trackings
    /// close unjudged.
    pub fn forget(&mut self, cx: &mut LayerCx<'_>, pod: &ClientPod) {
        if let Some(client) = self.clients.remove(pod) {
            for c in client.channels.into_values() {
                cx.remove_path(c.path);
            }
        }
    }

    /// Feeds one complete read of `pod`'s channelz, made at `at`.
    pub fn on_read(
        &mut self,
        cx: &mut LayerCx<'_>,
        pod: &ClientPod,
        read: &ClientRead,
        at: Time,
    ) -> ReadOutcome {
        let mut out = ReadOutcome {
            channels: read.channels.len(),
            ..ReadOutcome::default()
        };
        let default = self.default_lag;
        let client = self.clients.entry(pod.clone()).or_default();
        let lag = client.expected_lag.unwrap_or(default);
        let mut stale = BTreeMap::new();
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for ch in &read.channels {
            out.subchannels += ch.subchannels.len();
            let Some(service) = service_of_target(&ch.target, &pod.namespace) else {
                continue;
            };
            if cx.truth.service(&service).is_none() || !seen.insert(ch.target.as_str()) {
                continue;
            }
            out.judged += 1;
            let path = match client.channels.get(&ch.target) {
                Some(c) if c.service == service => c.path,
                _ => {
                    if let Some(old) = client.channels.remove(&ch.target) {
                        cx.remove_path(old.path);
                    }
                    let path = cx.add_path_judging(
                        PathInfo {
                            id: format!("{}/{pod}/{}", CHANNELZ.as_str(), ch.target),
                            kind: GRPC_CHANNEL,
                            description: format!("gRPC channel {} of {pod}", ch.target),
                            node: None,
                        },
                        lag,
                        Judging::StaleOnly,
                    );
                    let set = desired(cx.truth, &service);
                    cx.set_desired_on_path(path, &service, set, ChangeTime::received_at(at));
                    client.channels.insert(
                        ch.target.clone(),
                        ChannelPath {
                            path,
                            service: service.clone(),
                        },
                    );
                    path
                }
            };
            let live = cx.engine().desired_on_path(path, &service);
            let mut held: BTreeSet<Target> = BTreeSet::new();
            for sc in &ch.subchannels {
                let Some(addr) = sc.address.filter(|_| sc.state.holds()) else {
                    continue;
                };
                let target = Target::socket(addr.ip().to_canonical(), addr.port());
                held.insert(target);
                if live.is_some_and(|d| d.contains(&target)) {
                    continue;
                }
                let key = (ch.target.clone(), addr);
                let first_seen = client.stale.get(&key).map_or(at, |s| s.first_seen);
                stale.insert(
                    key,
                    StaleSubchannel {
                        client: pod.to_string(),
                        channel: ch.target.clone(),
                        service: service.to_string(),
                        address: addr,
                        state: sc.state,
                        former_owner: cx.former_pod(target.ip).map(str::to_string),
                        first_seen,
                        last_seen: at,
                    },
                );
            }
            out.stale += stale.keys().filter(|(t, _)| *t == ch.target).count();
            let o = Observation {
                path,
                service,
                at,
                result: ObservationResult::Held(
                    held.into_iter()
                        .map(|target| HeldTarget {
                            target,
                            ttl: None,
                            last_used: None,
                        })
                        .collect(),
                ),
                latency: None,
            };
            let before = cx.events().len();
            cx.observe(&o);
            if cx.events().len() > before || cx.engine().has_open_tracking(path, &o.service) {
                out.recorded.push(o);
            }
        }
        // A channel the client closed holds nothing: its open trackings converge.
        if !read.truncated {
            let gone: Vec<String> = client
                .channels
                .keys()
                .filter(|t| !seen.contains(t.as_str()))
                .cloned()
                .collect();
            for target in gone {
                if let Some(c) = client.channels.remove(&target) {
                    let o = Observation {
                        path: c.path,
                        service: c.service,
                        at,
                        result: ObservationResult::Held(Vec::new()),
                        latency: None,
                    };
                    cx.observe(&o);
                    out.recorded.push(o);
                    cx.remove_path(c.path);
                }
            }
        }
        client.stale = stale;
        out
    }

    fn set_desired(&mut self, cx: &mut LayerCx<'_>, key: &ServiceKey, change: ChangeTime) {
        let paths: Vec<PathIdx> = self
            .clients
            .values()
            .flat_map(|c| c.channels.values())
            .filter(|c| &c.service == key)
            .map(|c| c.path)
            .collect();
        if paths.is_empty() {
            return;
        }
        let set = desired(cx.truth, key);
        for path in paths {
            cx.set_desired_on_path(path, key, set.clone(), change);
        }
    }
}

impl LayerModel for ChannelzModel {
    fn layer(&self) -> Layer {
        CHANNELZ
    }

    /// A Service or slice change re-derives the sets of the paths whose target names it; a
    /// deleted pod's paths go.
    fn on_truth(&mut self, cx: &mut LayerCx<'_>, r: &Received, changes: &[ServiceChange]) {
        if let TruthEvent::Delete(TruthKey::Pod(pod)) = &r.event {
            let key = ClientPod {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
            };
            self.forget(cx, &key);
        }
        for (key, at) in touched_services(r, changes) {
            self.set_desired(cx, key, at);
        }
    }
}

#[cfg(test)]
mod tests;
