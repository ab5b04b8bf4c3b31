//! What a source of IP histories answers (the ledger, a truth-history file), and how it fails.

use std::net::IpAddr;

use ghostip_core::Time;

use crate::ownership::{Membership, Ownership};

/// Everything known about one IP: who owned it when, which Services it was an endpoint of,
/// and the flows a node's agent saw outlive it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpHistory {
    /// Ownership intervals, in any order (never overlapping for one IP).
    pub ownerships: Vec<Ownership>,
    /// Endpoint memberships (empty when the source has no Services).
    pub memberships: Vec<Membership>,
    /// Conntrack flows to the IP that outlived its endpoint (a ledger kept by `ghostip
    /// agent`; empty elsewhere).
    pub flows: Vec<FlowWindow>,
    /// Client-side copies of the IP after it left its Service: a gRPC client's balancer
    /// read through channelz (a ledger kept by `ghostip watch`; empty elsewhere).
    pub held: Vec<HeldWindow>,
}

/// A client that still held a removed endpoint, as a ghostip layer saw it: from the moment
/// the endpoint left (`since`) to the read that found it dropped (`until`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HeldWindow {
    /// The layer that saw it (`channelz`).
    pub layer: String,
    /// The path (`channelz/<namespace>/<pod>/<target>`).
    pub path: String,
    /// The Service whose endpoint it was.
    pub service: String,
    /// The endpoint held (`ip:port`).
    pub target: String,
    /// When the endpoint left.
    pub since: Time,
    /// The first read without it (`None`: still held when the ledger was read).
    pub until: Option<Time>,
    /// The last read that still held it.
    pub last_seen: Option<Time>,
}

impl HeldWindow {
    /// Whether `at` falls while the client held the endpoint after it left.
    pub fn covers(&self, at: Time) -> bool {
        at >= self.since && self.until.is_none_or(|u| at <= u)
    }

    /// The client pod of a channelz path (`<namespace>/<pod>`), else the path.
    pub fn holder(&self) -> String {
        let rest = self
            .path
            .strip_prefix(&format!("{}/", self.layer))
            .unwrap_or(&self.path);
        let mut parts = rest.splitn(3, '/');
        match (parts.next(), parts.next()) {
            (Some(ns), Some(pod)) => format!("{ns}/{pod}"),
            _ => self.path.clone(),
        }
    }
}

/// Live conntrack flows to a removed endpoint, as a node's agent saw them: from the moment
/// the endpoint left (`since`) to the read that found them gone (`until`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowWindow {
    /// The agent's path (`conntrack/node-1`).
    pub path: String,
    /// The Service whose endpoint it was.
    pub service: String,
    /// The flows' destination (`ip:port`).
    pub target: String,
    /// The pod that held the IP.
    pub former_pod: Option<String>,
    /// When the endpoint left.
    pub since: Time,
    /// When the flows were gone (`None`: still open when the ledger was read): the read
    /// that found them gone, else the last that saw them.
    pub until: Option<Time>,
    /// When the client last held or tried them: the last read that saw them, or the last
    /// SYN of connects only.
    pub last_used: Option<Time>,
}

impl FlowWindow {
    /// Whether `at` falls while the flows were alive after the endpoint left.
    pub fn covers(&self, at: Time) -> bool {
        at >= self.since && self.until.is_none_or(|u| at <= u)
    }
}

/// A lookup failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The source could not be read.
    #[error("reading the history of {ip} from {source_name}")]
    Source {
        /// The IP looked up.
        ip: IpAddr,
        /// The source, as the message names it (`the ledger`).
        source_name: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A source of IP histories.
pub trait HistorySource {
    /// The history of `ip` (empty when the source never saw it).
    ///
    /// # Errors
    /// [`HistoryError`] when the source cannot be read.
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError>;

    /// A short description for reports (`ledger /var/lib/ghostip/ghostip.db`).
    fn describe(&self) -> String;

    /// Whether the source knows Services (endpoint memberships).
    fn has_services(&self) -> bool;
}

impl<T: HistorySource + ?Sized> HistorySource for &T {
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError> {
        (**self).lookup(ip)
    }

    fn describe(&self) -> String {
        (**self).describe()
    }

    fn has_services(&self) -> bool {
        (**self).has_services()
    }
}
