//! Finds connection-tracking entries that still send traffic to removed endpoints, and attributes them to pods.
//!
//! Three kinds of finding ([`StaleFlowKind`]):
//! - **DNS backend**: a UDP (or TCP) entry towards the cluster DNS Service
//!   (`kube-system/kube-dns` by default) whose backend is no longer one of its endpoints:
//!   either through the ClusterIP (original destination = a kube-dns ClusterIP, DNATed
//!   to a removed pod IP: the classic stale-conntrack DNS failure) or sent directly to an
//!   IP that was a DNS endpoint.
//! - **Removed backend**: an entry through another Service's ClusterIP (port and protocol
//!   one of its ports) DNATed to an IP that is no longer among that Service's endpoints.
//!   The truth alone says so; the ledger only adds which pod had the IP. An IP some other
//!   pod has now is still a finding here: the flow was the Service's, its packets reach
//!   the new owner.
//! - **Removed peer**: any other TCP or UDP flow whose destination (after DNAT) is an IP no
//!   endpoint and no pod has any more, but a pod had: a client that still sends to a pod
//!   Kubernetes removed (a JVM DNS cache, a registry list, a pooled connection), or through
//!   the ClusterIP of a Service the truth no longer has. Needs the ledger.
//!
//! Who owned an IP comes from [`OwnershipFacts`], which the caller fills from the IP
//! ledger (current owner and former owner with its removal time): the audit is pure.
//! [`ConntrackAudit::lookups`] says which IPs the caller must look up first. Entries are
//! fed one at a time ([`ConntrackAudit::push`]), so a large table can be streamed with
//! [`crate::conntrack::for_each_entry`] without keeping it.
//!
//! Entries that no longer carry traffic are not findings: TCP states other than
//! `SYN_SENT`, `SYN_RECV` and `ESTABLISHED`, and `[DESTROY]` events, are counted as closing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::truth::Truth;
use ghostip_core::{PodRef, ServiceKey, Target, Time};
use serde::Serialize;

use crate::conntrack::{ConntrackTable, CtEntry};

/// What the ledger knows about one IP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IpFacts {
    /// The pod that owns the IP now (`None`: no pod does, or it is not a pod IP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<PodRef>,
    /// The last pod that owned it before, if it is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub former: Option<FormerOwner>,
}

/// A pod that owned an IP and is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FormerOwner {
    /// The pod.
    pub pod: PodRef,
    /// When its ownership ended (the pod was removed), where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Time>,
    /// Services the IP was an endpoint of while that pod owned it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceKey>,
}

/// Ownership facts per IP, filled by the caller (from `ghostip whois` / the ledger).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnershipFacts {
    by_ip: HashMap<IpAddr, IpFacts>,
}

impl OwnershipFacts {
    /// No facts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what is known about `ip`.
    pub fn insert(&mut self, ip: IpAddr, facts: IpFacts) {
        self.by_ip.insert(ip.to_canonical(), facts);
    }

    /// What is known about `ip`.
    pub fn get(&self, ip: IpAddr) -> Option<&IpFacts> {
        self.by_ip.get(&ip.to_canonical())
    }

    /// Number of IPs with facts.
    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    /// Whether no IP has facts.
    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }
}

/// Tunables of the audit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditConfig {
    /// The cluster DNS Service.
    pub dns_service: ServiceKey,
    /// When the table was read, for "removed N s ago".
    pub now: Option<Time>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            dns_service: ServiceKey::new("kube-system", "kube-dns"),
            now: None,
        }
    }
}

/// Which problem a stale flow shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StaleFlowKind {
    /// Towards a removed backend of the cluster DNS Service.
    DnsBackend,
    /// Through a Service's ClusterIP to a backend no longer among its endpoints.
    RemovedBackend,
    /// Towards an IP no endpoint and no pod has any more.
    RemovedPeer,
}

/// Entries from one client to one removed destination, aggregated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaleFlow {
    /// Which problem.
    pub kind: StaleFlowKind,
    /// Layer-4 protocol (`udp`, `tcp`, …).
    pub proto: String,
    /// Source address of the original direction.
    pub client_ip: IpAddr,
    /// The pod that owns the client IP now, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_pod: Option<PodRef>,
    /// The Service address the client sent to, when the flow was DNATed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<Target>,
    /// The Service of that address, for a removed backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceKey>,
    /// Where the traffic goes (after DNAT).
    pub target: Target,
    /// The pod that owned the target IP, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub former_owner: Option<PodRef>,
    /// When that pod was removed, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<Time>,
    /// Time from the removal to the read.
    #[serde(skip_serializing_if = "Option::is_none", with = "crate::secs")]
    pub removed_ago: Option<Duration>,
    /// Conntrack entries aggregated here (one per source port).
    pub entries: usize,
    /// Of which `[UNREPLIED]` (nothing answered).
    pub unreplied: usize,
    /// Longest remaining timeout among them, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_timeout: Option<u32>,
}

impl fmt::Display for StaleFlow {
    /// `client pod prod/order-7c9 still sends to 10.244.3.71 (was prod/stock-5d8-x, removed 47 s ago)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.client_pod {
            Some(p) => write!(f, "client pod {p} ({})", self.client_ip)?,
            None => write!(f, "client {}", self.client_ip)?,
        }
        write!(f, " still sends {} to {}", self.proto, self.target)?;
        if let Some(v) = self.via {
            write!(f, " via {v}")?;
        }
        let mut was = Vec::new();
        if let Some(p) = &self.former_owner {
            was.push(format!("was {p}"));
        }
        match (self.removed_ago, self.removed_at) {
            (Some(d), _) => was.push(format!("removed {} s ago", d.as_secs())),
            (None, Some(at)) => was.push(format!("removed at {at}")),
            _ => {}
        }
        if self.kind == StaleFlowKind::DnsBackend {
            was.push("no longer a DNS endpoint".to_string());
        }
        if let Some(s) = &self.service {
            was.push(format!("no longer an endpoint of {s}"));
        }
        if !was.is_empty() {
            write!(f, " ({})", was.join(", "))?;
        }
        write!(
            f,
            ": {} entr{}",
            self.entries,
            if self.entries == 1 { "y" } else { "ies" }
        )?;
        if self.unreplied > 0 {
            write!(f, ", {} unreplied", self.unreplied)?;
        }
        Ok(())
    }
}

/// What the audit found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConntrackReport {
    /// Entries read.
    pub entries: usize,
    /// TCP/UDP entries that may carry traffic (the rest are other protocols, closing TCP
    /// states or `[DESTROY]` events).
    pub live: usize,
    /// Stale flows, DNS ones first, then by client and target.
    pub stale: Vec<StaleFlow>,
}

impl ConntrackReport {
    /// Whether nothing is stale.
    pub fn is_clean(&self) -> bool {
        self.stale.is_empty()
    }
}

type FlowKey = (StaleFlowKind, String, IpAddr, Option<Target>, Target);

/// The streaming audit: build it once per read, [`push`](Self::push) every entry, then
/// [`finish`](Self::finish).
#[derive(Debug)]
pub struct ConntrackAudit<'a> {
    cfg: AuditConfig,
    facts: &'a OwnershipFacts,
    /// Every current endpoint IP of any Service, with its pod.
    endpoints: HashMap<IpAddr, Option<PodRef>>,
    dns_endpoints: BTreeSet<IpAddr>,
    dns_frontends: BTreeSet<(IpAddr, u16)>,
    dns_ports: BTreeSet<u16>,
    /// Every Service's ClusterIP, port and protocol, with the index of its endpoints.
    service_frontends: HashMap<(IpAddr, u16, ghostip_core::Protocol), usize>,
    /// Each Service and its endpoint IPs (of any slice, in any condition).
    service_endpoints: Vec<(ServiceKey, BTreeSet<IpAddr>)>,
    flows: BTreeMap<FlowKey, StaleFlow>,
    entries: usize,
    live: usize,
}

/// Whether an entry may still carry traffic.
fn is_live(e: &CtEntry) -> bool {
    if e.event.as_deref() == Some("DESTROY") {
        return false;
    }
    match e.proto.as_str() {
        "udp" | "udplite" => true,
        "tcp" | "sctp" => e.state.as_deref().is_none_or(|s| {
            matches!(
                s,
                "SYN_SENT" | "SYN_RECV" | "ESTABLISHED" | "COOKIE_WAIT" | "COOKIE_ECHOED"
            )
        }),
        _ => false,
    }
}

impl<'a> ConntrackAudit<'a> {
    /// An audit against `truth` with ownership `facts`.
    pub fn new(truth: &Truth, facts: &'a OwnershipFacts, cfg: AuditConfig) -> Self {
        let mut endpoints = HashMap::new();
        for svc in truth.services() {
            for slice in truth.slices_of(&svc.key) {
                for e in &slice.endpoints {
                    endpoints
                        .entry(e.ip().to_canonical())
                        .or_insert_with(|| slice.pod(e));
                }
            }
        }
        let mut service_frontends = HashMap::new();
        let mut service_endpoints = Vec::new();
        for svc in truth.services() {
            let ips: BTreeSet<IpAddr> = truth
                .slices_of(&svc.key)
                .flat_map(|s| s.endpoints.iter().map(|e| e.ip().to_canonical()))
                .collect();
            for ip in &svc.cluster_ips {
                for p in &svc.ports {
                    service_frontends.insert(
                        (ip.to_canonical(), p.port, p.protocol),
                        service_endpoints.len(),
                    );
                }
            }
            service_endpoints.push((svc.key.clone(), ips));
        }
        let mut dns_endpoints = BTreeSet::new();
        let mut dns_frontends = BTreeSet::new();
        let mut dns_ports = BTreeSet::from([53]);
        if let Some(svc) = truth.service(&cfg.dns_service) {
            for slice in truth.slices_of(&cfg.dns_service) {
                dns_endpoints.extend(slice.endpoints.iter().map(|e| e.ip().to_canonical()));
                dns_ports.extend(slice.ports.iter().map(|p| p.port));
            }
            for p in &svc.ports {
                for ip in &svc.cluster_ips {
                    dns_frontends.insert((ip.to_canonical(), p.port));
                }
            }
        }
        Self {
            cfg,
            facts,
            endpoints,
            dns_endpoints,
            dns_frontends,
            dns_ports,
            service_frontends,
            service_endpoints,
            flows: BTreeMap::new(),
            entries: 0,
            live: 0,
        }
    }

    /// The IPs whose owners the caller should look up before pushing entries: sources and
    /// (post-DNAT) destinations of live flows that are not current endpoints.
    pub fn lookups(&self, table: &ConntrackTable) -> BTreeSet<IpAddr> {
        let mut ips = BTreeSet::new();
        for e in table.entries.iter().filter(|e| is_live(e)) {
            let dst = e
                .dnat_target()
                .map_or(e.orig.dst, |(ip, _)| ip)
                .to_canonical();
            for ip in [e.orig.src.to_canonical(), dst] {
                if !self.endpoints.contains_key(&ip) {
                    ips.insert(ip);
                }
            }
        }
        ips
    }

    /// Checks one entry.
    pub fn push(&mut self, e: &CtEntry) {
        self.entries += 1;
        if !is_live(e) {
            return;
        }
        self.live += 1;
        let (dst_ip, dst_port, via) = match e.dnat_target() {
            Some((ip, port)) => (
                ip.to_canonical(),
                port,
                e.orig
                    .dport
                    .map(|p| Target::socket(e.orig.dst.to_canonical(), p)),
            ),
            None => (e.orig.dst.to_canonical(), e.orig.dport, None),
        };
        let target = match dst_port {
            Some(p) => Target::socket(dst_ip, p),
            None => Target::ip(dst_ip),
        };
        let facts = self.facts.get(dst_ip);
        let owned_now =
            self.endpoints.contains_key(&dst_ip) || facts.is_some_and(|f| f.owner.is_some());
        let mut service = None;
        let kind = if self.is_dns(e, dst_ip, dst_port, facts) {
            StaleFlowKind::DnsBackend
        } else if let Some(key) = self.removed_backend_of(e, dst_ip) {
            service = Some(key.clone());
            StaleFlowKind::RemovedBackend
        } else if !owned_now && facts.is_some_and(|f| f.former.is_some()) {
            StaleFlowKind::RemovedPeer
        } else {
            return;
        };
        let client_ip = e.orig.src.to_canonical();
        let client_pod = self
            .endpoints
            .get(&client_ip)
            .cloned()
            .flatten()
            .or_else(|| self.facts.get(client_ip).and_then(|f| f.owner.clone()));
        let former = facts.and_then(|f| f.former.as_ref());
        let removed_at = former.and_then(|f| f.removed);
        let removed_ago = removed_at
            .zip(self.cfg.now)
            .and_then(|(at, now)| Duration::try_from(now.duration_since(at)).ok());
        let key = (kind, e.proto.clone(), client_ip, via, target);
        let flow = self.flows.entry(key).or_insert_with(|| StaleFlow {
            kind,
            proto: e.proto.clone(),
            client_ip,
            client_pod,
            via,
            service,
            target,
            former_owner: former.map(|f| f.pod.clone()),
            removed_at,
            removed_ago,
            entries: 0,
            unreplied: 0,
            max_timeout: None,
        });
        flow.entries += 1;
        flow.unreplied += usize::from(e.unreplied);
        flow.max_timeout = flow.max_timeout.max(e.timeout);
    }

    /// The Service whose ClusterIP `e` was sent to, when it was DNATed to `dst_ip` and that
    /// IP is no longer one of the Service's endpoints.
    fn removed_backend_of(&self, e: &CtEntry, dst_ip: IpAddr) -> Option<&ServiceKey> {
        e.dnat_target()?;
        let protocol = match e.proto.as_str() {
            "tcp" => ghostip_core::Protocol::Tcp,
            "udp" | "udplite" => ghostip_core::Protocol::Udp,
            "sctp" => ghostip_core::Protocol::Sctp,
            _ => return None,
        };
        let frontend = (e.orig.dst.to_canonical(), e.orig.dport?, protocol);
        let (key, ips) = self
            .service_endpoints
            .get(*self.service_frontends.get(&frontend)?)?;
        (!ips.contains(&dst_ip)).then_some(key)
    }

    /// Whether `e` goes to a DNS backend that is no longer an endpoint of the DNS Service.
    fn is_dns(
        &self,
        e: &CtEntry,
        dst_ip: IpAddr,
        dst_port: Option<u16>,
        facts: Option<&IpFacts>,
    ) -> bool {
        if self.dns_endpoints.contains(&dst_ip) {
            return false;
        }
        let via_cluster_ip = e.dnat_target().is_some()
            && e.orig
                .dport
                .is_some_and(|p| self.dns_frontends.contains(&(e.orig.dst.to_canonical(), p)));
        if via_cluster_ip {
            return true;
        }
        // Sent directly to an IP that was a DNS endpoint and is no longer.
        dst_port.is_some_and(|p| self.dns_ports.contains(&p))
            && facts
                .and_then(|f| f.former.as_ref())
                .is_some_and(|f| f.services.contains(&self.cfg.dns_service))
            && facts.is_none_or(|f| f.owner.is_none())
    }

    /// The report.
    pub fn finish(self) -> ConntrackReport {
        ConntrackReport {
            entries: self.entries,
            live: self.live,
            stale: self.flows.into_values().collect(),
        }
    }
}

/// Audits a whole table: [`ConntrackAudit::new`], every entry, [`ConntrackAudit::finish`].
pub fn audit(
    table: &ConntrackTable,
    truth: &Truth,
    facts: &OwnershipFacts,
    cfg: AuditConfig,
) -> ConntrackReport {
    let mut a = ConntrackAudit::new(truth, facts, cfg);
    for e in &table.entries {
        a.push(e);
    }
    a.finish()
}

#[cfg(test)]
mod tests;
