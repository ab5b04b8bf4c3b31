//! The normalized load-balancer table every datapath parser produces.
//!
//! One [`LbTable`] holds the frontends a node's datapath serves (ClusterIP, NodePort,
//! external and load-balancer addresses), each with the backends it sends traffic to,
//! plus [`SkipStats`]: what the parser saw but did not turn into table rows.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::format::Format;

/// Most skip samples kept per parse (the counters keep counting past it).
pub const MAX_SKIP_SAMPLES: usize = 16;

/// Longest excerpt of an input line kept in a [`SkipSample`], in bytes.
pub const MAX_EXCERPT: usize = 160;

/// What one datapath holds: frontends with their backends, and what was skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbTable {
    /// The dump format this table was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// Frontends, sorted by address, port and protocol.
    pub frontends: Vec<Frontend>,
    /// Lines or objects that were not turned into rows, counted by reason.
    pub skipped: SkipStats,
}

impl LbTable {
    /// An empty table read from `format`.
    pub fn new(format: Format) -> Self {
        Self {
            format: Some(format),
            frontends: Vec::new(),
            skipped: SkipStats::default(),
        }
    }

    /// Number of backends over all frontends.
    pub fn backend_count(&self) -> usize {
        self.frontends.iter().map(|f| f.backends.len()).sum()
    }

    /// The frontend serving `ip:port/protocol`, if any.
    pub fn frontend(&self, ip: IpAddr, port: u16, protocol: Protocol) -> Option<&Frontend> {
        self.frontends
            .iter()
            .find(|f| f.ip == ip && f.port == port && f.protocol == protocol)
    }

    /// Sorts frontends and their backends, and merges duplicate frontends and backends.
    ///
    /// Every parser calls this before returning, so tables compare equal when they
    /// describe the same datapath whatever order the dump listed it in.
    pub fn normalize(&mut self) {
        // A stable sort keeps duplicates in input order: the first absorbs the others.
        let mut sorted = std::mem::take(&mut self.frontends);
        sorted.sort_by_key(Frontend::key);
        let mut merged: Vec<Frontend> = Vec::with_capacity(sorted.len());
        for f in sorted {
            match merged.last_mut() {
                Some(last) if last.key() == f.key() => last.absorb(f),
                _ => merged.push(f),
            }
        }
        for f in &mut merged {
            f.normalize();
        }
        self.frontends = merged;
    }
}

/// One address a datapath load-balances: `ip:port/protocol` and where it sends traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frontend {
    /// Frontend address. NodePorts that match any local address use `0.0.0.0` (or `::`).
    pub ip: IpAddr,
    /// Frontend port.
    pub port: u16,
    /// Transport protocol.
    pub protocol: Protocol,
    /// What kind of service address this is.
    pub kind: FrontendKind,
    /// The Kubernetes service port this frontend belongs to, when the dump names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
    /// Backends, sorted by address and port.
    pub backends: Vec<Backend>,
    /// Extra facts from the dump, e.g. `no-endpoints`, `scheduler=rr`, `non-routable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

impl Frontend {
    /// A frontend with no backends, no service and no flags.
    pub fn new(ip: IpAddr, port: u16, protocol: Protocol, kind: FrontendKind) -> Self {
        Self {
            ip,
            port,
            protocol,
            kind,
            service: None,
            backends: Vec::new(),
            flags: Vec::new(),
        }
    }

    /// The identity of a frontend inside one table.
    pub fn key(&self) -> (IpAddr, u16, Protocol) {
        (self.ip, self.port, self.protocol)
    }

    /// Adds a flag once.
    pub fn add_flag(&mut self, flag: impl Into<String>) {
        let flag = flag.into();
        if !self.flags.contains(&flag) {
            self.flags.push(flag);
        }
    }

    /// Merges another description of the same frontend into this one.
    pub fn absorb(&mut self, other: Frontend) {
        if self.kind == FrontendKind::Unknown
            || (self.kind == FrontendKind::External && other.kind != FrontendKind::Unknown)
        {
            self.kind = other.kind;
        }
        if self.service.is_none() {
            self.service = other.service;
        }
        self.backends.extend(other.backends);
        for flag in other.flags {
            self.add_flag(flag);
        }
    }

    pub(crate) fn normalize(&mut self) {
        self.backends.sort_by_key(|a| (a.ip, a.port));
        // Keep one entry per ip:port; the first (after the sort, stable) wins.
        self.backends
            .dedup_by(|b, a| a.ip == b.ip && a.port == b.port);
        self.backends.shrink_to_fit();
        self.flags.sort();
        self.flags.dedup();
    }
}

/// One place a frontend sends traffic to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backend {
    /// Backend address (usually a pod IP; a node IP for host-network pods).
    pub ip: IpAddr,
    /// Backend port.
    pub port: u16,
    /// What the datapath says about this backend.
    pub state: BackendState,
    /// Scheduling weight, when the datapath has one (IPVS, Cilium Maglev).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

impl Backend {
    /// An active backend without weight.
    pub fn active(ip: IpAddr, port: u16) -> Self {
        Self {
            ip,
            port,
            state: BackendState::Active,
            weight: None,
        }
    }

    /// The backend as the core's `ip:port` target.
    pub fn target(&self) -> ghostip_core::Target {
        ghostip_core::Target::socket(self.ip, self.port)
    }
}

/// What kind of service address a frontend is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FrontendKind {
    /// A Service's cluster IP.
    #[serde(rename = "ClusterIP")]
    ClusterIp,
    /// A NodePort (on every local address, or the one given).
    #[serde(rename = "NodePort")]
    NodePort,
    /// An address from `spec.externalIPs`.
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    /// A load-balancer ingress address.
    #[serde(rename = "LoadBalancer")]
    LoadBalancer,
    /// An external IP or a load-balancer address: the dump does not tell them apart
    /// (kube-proxy nftables mode sends both through the same `external-…` chain).
    #[serde(rename = "External")]
    External,
    /// The dump does not say (IPVS, Cilium HostPort or LocalRedirect, unknown flags).
    #[serde(rename = "Unknown")]
    Unknown,
}

impl FrontendKind {
    /// The name used in JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            FrontendKind::ClusterIp => "ClusterIP",
            FrontendKind::NodePort => "NodePort",
            FrontendKind::ExternalIp => "ExternalIP",
            FrontendKind::LoadBalancer => "LoadBalancer",
            FrontendKind::External => "External",
            FrontendKind::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for FrontendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Transport protocol of a frontend: the core's [`ghostip_core::Protocol`] plus `Any`,
/// which some dumps need (convert with [`Protocol::to_core`] and `From`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
    /// Not stated by the dump (old Cilium formats) or any protocol.
    Any,
}

impl Protocol {
    /// Parses `tcp`, `TCP`, `6`, `udp`, `17`, `sctp`, `132`, `any`; `None` otherwise.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "tcp" | "TCP" | "Tcp" | "6" => Some(Protocol::Tcp),
            "udp" | "UDP" | "Udp" | "17" => Some(Protocol::Udp),
            "sctp" | "SCTP" | "Sctp" | "132" => Some(Protocol::Sctp),
            "any" | "ANY" | "NONE" | "all" => Some(Protocol::Any),
            _ => None,
        }
    }

    /// The core protocol; `None` for [`Protocol::Any`].
    pub fn to_core(self) -> Option<ghostip_core::Protocol> {
        match self {
            Protocol::Tcp => Some(ghostip_core::Protocol::Tcp),
            Protocol::Udp => Some(ghostip_core::Protocol::Udp),
            Protocol::Sctp => Some(ghostip_core::Protocol::Sctp),
            Protocol::Any => None,
        }
    }

    /// Upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
            Protocol::Any => "ANY",
        }
    }
}

impl From<ghostip_core::Protocol> for Protocol {
    fn from(p: ghostip_core::Protocol) -> Self {
        match p {
            ghostip_core::Protocol::Tcp => Protocol::Tcp,
            ghostip_core::Protocol::Udp => Protocol::Udp,
            ghostip_core::Protocol::Sctp => Protocol::Sctp,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `namespace/name:port-name` of a Kubernetes service port.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceRef {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// Port name; empty for an unnamed port or when the dump does not carry it.
    #[serde(default)]
    pub port_name: String,
}

impl ServiceRef {
    /// Builds a reference from its parts.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        port_name: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            port_name: port_name.into(),
        }
    }

    /// Parses kube-proxy's `ns/name:port` (port optional, as in `default/nginx cluster IP`).
    pub fn parse_kube_proxy(s: &str) -> Option<ServiceRef> {
        let (ns, name, port) = Self::kube_proxy_parts(s)?;
        Some(ServiceRef::new(ns, name, port))
    }

    /// The namespace, name and port name of kube-proxy's `ns/name:port`, without
    /// allocating (for callers that only check the shape).
    pub(crate) fn kube_proxy_parts(s: &str) -> Option<(&str, &str, &str)> {
        let (ns, rest) = s.split_once('/')?;
        let (name, port) = match rest.split_once(':') {
            Some((n, p)) => (n, p),
            None => (rest, ""),
        };
        if ns.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        Some((ns, name, port))
    }
}

impl fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port_name.is_empty() {
            write!(f, "{}/{}", self.namespace, self.name)
        } else {
            write!(f, "{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }
}

/// What the datapath says about a backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum BackendState {
    /// Receives new connections.
    Active,
    /// Draining: IPVS weight 0, Cilium `terminating`. Only serves when nothing is active
    /// (Cilium) or for existing connections (IPVS).
    Terminating,
    /// Cilium: failed health checks, taken out of rotation.
    Quarantined,
    /// Cilium: put in maintenance by an operator.
    Maintenance,
    /// A state this crate does not know, as written in the dump.
    Unknown(String),
}

impl BackendState {
    /// Parses a state word (`active`, `terminating`, `quarantined`, `maintenance`, …).
    pub fn parse(s: &str) -> BackendState {
        match s.to_ascii_lowercase().as_str() {
            "active" => BackendState::Active,
            "terminating" | "terminating-not-serving" | "terminating_not_serving" => {
                BackendState::Terminating
            }
            "quarantined" => BackendState::Quarantined,
            "maintenance" => BackendState::Maintenance,
            _ => BackendState::Unknown(s.to_string()),
        }
    }

    /// The state word.
    pub fn as_str(&self) -> &str {
        match self {
            BackendState::Active => "active",
            BackendState::Terminating => "terminating",
            BackendState::Quarantined => "quarantined",
            BackendState::Maintenance => "maintenance",
            BackendState::Unknown(s) => s,
        }
    }
}

impl From<String> for BackendState {
    fn from(s: String) -> Self {
        BackendState::parse(&s)
    }
}

impl From<BackendState> for String {
    fn from(s: BackendState) -> Self {
        s.as_str().to_string()
    }
}

impl fmt::Display for BackendState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where in the input something was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Location {
    /// 1-based line number of a text dump.
    Line(usize),
    /// 1-based line and column of a JSON document.
    LineColumn(usize, usize),
    /// A JSON path such as `nftables[12].rule.expr[1].dnat`.
    JsonPath(String),
    /// Byte offset in a binary stream (netlink dumps).
    ByteOffset(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(n) => write!(f, "line {n}"),
            Location::LineColumn(l, c) => write!(f, "line {l} column {c}"),
            Location::JsonPath(p) => write!(f, "{p}"),
            Location::ByteOffset(o) => write!(f, "byte {o}"),
        }
    }
}

/// One skipped line or object, kept for diagnostics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipSample {
    /// Where it was.
    pub location: Location,
    /// Why it was skipped.
    pub reason: String,
    /// The start of the line or object (at most [`MAX_EXCERPT`] bytes).
    pub excerpt: String,
}

/// What a parser saw but did not turn into table rows, counted by reason.
///
/// `ignored` is input that was understood and is not load-balancing state (other tables,
/// masquerade marks, headers). `unknown` is input that was not understood: unknown rules,
/// chains or fields, damaged lines. Neither stops the parse.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipStats {
    /// Understood, not load-balancing state.
    pub ignored: u64,
    /// Not understood.
    pub unknown: u64,
    /// `ignored` by reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ignored_by_reason: BTreeMap<String, u64>,
    /// `unknown` by reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown_by_reason: BTreeMap<String, u64>,
    /// The first few unknown items (at most [`MAX_SKIP_SAMPLES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<SkipSample>,
    /// Snapshots of the same datapath the input held before the one that was read (a
    /// terminal transcript of several runs of the dump command): not read, their lines not
    /// counted here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier_snapshots: Option<EarlierSnapshots>,
}

/// Snapshots of one datapath that came before the last one in an input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierSnapshots {
    /// How many came before the one read.
    pub count: u64,
    /// Where the snapshot that was read starts.
    pub last_from: Location,
}

impl SkipStats {
    /// Counts one understood item that carries no load-balancing state.
    pub fn ignore(&mut self, reason: &str) {
        self.ignored += 1;
        bump(&mut self.ignored_by_reason, reason);
    }

    /// Counts one item that was not understood, keeping a sample while there is room.
    pub fn unknown(&mut self, location: Location, reason: &str, text: &str) {
        self.unknown += 1;
        bump(&mut self.unknown_by_reason, reason);
        if self.samples.len() < MAX_SKIP_SAMPLES {
            self.samples.push(SkipSample {
                location,
                reason: reason.to_string(),
                excerpt: excerpt(text),
            });
        }
    }

    /// A new snapshot of the same datapath starts at `at` (its header or a listed item
    /// repeats): what was counted so far belonged to an earlier one and is dropped, the
    /// earlier one counted.
    pub fn new_snapshot(&mut self, at: Location) {
        let count = self.earlier_snapshots.as_ref().map_or(0, |e| e.count) + 1;
        *self = SkipStats {
            earlier_snapshots: Some(EarlierSnapshots {
                count,
                last_from: at,
            }),
            ..SkipStats::default()
        };
    }

    /// Total of ignored and unknown items.
    pub fn total(&self) -> u64 {
        self.ignored + self.unknown
    }
}

fn bump(map: &mut BTreeMap<String, u64>, reason: &str) {
    match map.get_mut(reason) {
        Some(n) => *n += 1,
        None => {
            map.insert(reason.to_string(), 1);
        }
    }
}

/// The first [`MAX_EXCERPT`] bytes of `text`, cut at a character boundary.
pub(crate) fn excerpt(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_EXCERPT {
        return text.to_string();
    }
    let mut end = MAX_EXCERPT;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut s = text.get(..end).unwrap_or_default().to_string();
    s.push('…');
    s
}

/// The unspecified address of the family of `v6`.
pub(crate) fn any_addr(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}
