//! Discovers the DNS paths to probe from the truth: each CoreDNS pod, the kube-dns ClusterIP, NodeLocal DNSCache, overrides.
//!
//! See [`discover`] for the path set the truth implies and [`diff_with_truth`] for what
//! changed since the current set (CoreDNS pods come and go). Path ids are stable:
//! `dns-pod/10.244.1.5:53`, `dns-cluster-ip/10.96.0.10:53`,
//! `dns-node-local/169.254.20.10:53`, `dns-override/192.0.2.1:53`; with a vantage node
//! set ([`PathConfig::node`]) they end in `@node-2`.
//!
//! # Errors
//! Only [`parse_server`] fails, on a malformed `--dns-server` value.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use ghostip_core::truth::{AddressType, Truth};
use ghostip_core::{PathInfo, PathKind, Protocol, ServiceKey};

use super::{DNS_CLUSTER_IP, DNS_KINDS, DNS_NODE_LOCAL, DNS_OVERRIDE, DNS_POD};

/// NodeLocal DNSCache's default link-local listen address.
pub const DEFAULT_NODE_LOCAL: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(169, 254, 20, 10)), 53);

/// Port used when neither the EndpointSlice nor the Service names a `dns` UDP port.
pub const DEFAULT_DNS_PORT: u16 = 53;

/// The port name CoreDNS's Service and EndpointSlices use for DNS over UDP.
pub const DNS_PORT_NAME: &str = "dns";

/// Which paths to derive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathConfig {
    /// The cluster DNS Service (default `kube-system/kube-dns`).
    pub dns_service: ServiceKey,
    /// Probe every CoreDNS pod at its pod IP.
    pub pods: bool,
    /// Probe the DNS Service's ClusterIP(s).
    pub cluster_ip: bool,
    /// NodeLocal DNSCache address, when enabled by a flag or detected by the caller.
    pub node_local: Option<SocketAddr>,
    /// `--dns-server IP[:PORT]` overrides.
    pub overrides: Vec<SocketAddr>,
    /// Node the queries are sent from (the per-node agent); `None` for `watch`.
    pub node: Option<String>,
}

impl Default for PathConfig {
    fn default() -> Self {
        Self {
            dns_service: ServiceKey::new("kube-system", "kube-dns"),
            pods: true,
            cluster_ip: true,
            node_local: None,
            overrides: Vec::new(),
            node: None,
        }
    }
}

/// One DNS path: where to send queries and how the engine names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DnsPath {
    /// Identity and description.
    pub info: PathInfo,
    /// Server address queried.
    pub server: SocketAddr,
}

impl DnsPath {
    /// A path of `kind` to `server`, described by `what` (e.g. `kube-system/coredns-abc`).
    pub fn new(kind: PathKind, server: SocketAddr, what: Option<&str>, node: Option<&str>) -> Self {
        let id = path_id(kind, server, node);
        // Port 53 goes without saying in descriptions; ids always carry it.
        let shown = if server.port() == DEFAULT_DNS_PORT {
            server.ip().to_string()
        } else {
            server.to_string()
        };
        let via = match kind {
            DNS_CLUSTER_IP => format!("dns via ClusterIP {shown}"),
            DNS_NODE_LOCAL => format!("dns via NodeLocal DNSCache {shown}"),
            _ => format!("dns via {shown}"),
        };
        let mut description = match what {
            Some(w) => format!("{via} ({w})"),
            None => via,
        };
        if let Some(n) = node {
            description.push_str(" from ");
            description.push_str(n);
        }
        Self {
            info: PathInfo {
                id,
                kind,
                description,
                node: node.map(str::to_string),
            },
            server,
        }
    }

    /// The stable id.
    pub fn id(&self) -> &str {
        &self.info.id
    }
}

/// The stable id of a DNS path: `<kind>/<ip:port>`, plus `@<node>` when seen from a node.
pub fn path_id(kind: PathKind, server: SocketAddr, node: Option<&str>) -> String {
    match node {
        Some(n) => format!("{}/{server}@{n}", kind.as_str()),
        None => format!("{}/{server}", kind.as_str()),
    }
}

/// What changed between two path sets, by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathDiff {
    /// Paths to start probing.
    pub added: Vec<DnsPath>,
    /// Paths to stop probing.
    pub removed: Vec<DnsPath>,
    /// Same id, new description (e.g. a new CoreDNS pod reusing an IP): the new version.
    pub changed: Vec<DnsPath>,
}

impl PathDiff {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// A malformed `--dns-server` value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid DNS server {value:?}: expected IP or IP:PORT (IPv6 with a port as [IP]:PORT)")]
pub struct ServerParseError {
    /// The value given.
    pub value: String,
}

/// Parses `IP`, `IP:PORT`, `IPv6` or `[IPv6]:PORT`; the port defaults to 53.
///
/// # Errors
/// [`ServerParseError`] when the value is none of those.
pub fn parse_server(value: &str) -> Result<SocketAddr, ServerParseError> {
    let v = value.trim();
    if let Ok(addr) = v.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bare = v
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(v);
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, DEFAULT_DNS_PORT))
        .map_err(|_| ServerParseError {
            value: value.to_string(),
        })
}

/// The DNS paths the truth implies, sorted by kind then id, without duplicates.
///
/// CoreDNS pods are the endpoints of `config.dns_service` that are ready or still
/// serving (a terminating CoreDNS pod still answers and is still worth watching), at the
/// slice's `dns` UDP port (53 when none is named). ClusterIPs come from the Service
/// record, at its `dns` UDP port.
pub fn discover(truth: &Truth, config: &PathConfig) -> Vec<DnsPath> {
    let node = config.node.as_deref();
    // Kinds sort in `DNS_KINDS` order (pods, ClusterIPs, NodeLocal, overrides), not by name.
    let rank = |kind: PathKind| DNS_KINDS.iter().position(|k| *k == kind);
    let mut paths: BTreeMap<(Option<usize>, String), DnsPath> = BTreeMap::new();
    let mut add = |p: DnsPath| {
        paths
            .entry((rank(p.info.kind), p.info.id.clone()))
            .or_insert(p);
    };

    if config.pods {
        for slice in truth.slices_of(&config.dns_service) {
            if slice.address_type == AddressType::Fqdn {
                continue;
            }
            let port = slice
                .ports
                .iter()
                .find(|p| p.protocol == Protocol::Udp && p.name.as_deref() == Some(DNS_PORT_NAME))
                .map_or(DEFAULT_DNS_PORT, |p| p.port);
            for e in slice.endpoints.iter().filter(|e| e.ready() || e.serving()) {
                let what = match slice.pod(e) {
                    Some(pod) => pod.to_string(),
                    None => format!("{} endpoint", config.dns_service),
                };
                add(DnsPath::new(
                    DNS_POD,
                    SocketAddr::new(e.ip(), port),
                    Some(&what),
                    node,
                ));
            }
        }
    }

    if config.cluster_ip
        && let Some(svc) = truth.service(&config.dns_service)
    {
        let port = svc
            .ports
            .iter()
            .find(|p| p.protocol == Protocol::Udp && p.name.as_deref() == Some(DNS_PORT_NAME))
            .map_or(DEFAULT_DNS_PORT, |p| p.port);
        let what = config.dns_service.to_string();
        for ip in &svc.cluster_ips {
            add(DnsPath::new(
                DNS_CLUSTER_IP,
                SocketAddr::new(*ip, port),
                Some(&what),
                node,
            ));
        }
    }

    if let Some(addr) = config.node_local {
        add(DnsPath::new(DNS_NODE_LOCAL, addr, None, node));
    }

    for addr in &config.overrides {
        add(DnsPath::new(
            DNS_OVERRIDE,
            *addr,
            Some("--dns-server"),
            node,
        ));
    }

    paths.into_values().collect()
}

/// Compares the current path set with a desired one, by id.
pub fn diff(current: &[DnsPath], desired: &[DnsPath]) -> PathDiff {
    let old: BTreeMap<&str, &DnsPath> = current.iter().map(|p| (p.id(), p)).collect();
    let new: BTreeMap<&str, &DnsPath> = desired.iter().map(|p| (p.id(), p)).collect();
    let mut out = PathDiff::default();
    for (id, p) in &new {
        match old.get(id) {
            None => out.added.push((*p).clone()),
            Some(o) if o != p => out.changed.push((*p).clone()),
            Some(_) => {}
        }
    }
    out.removed = old
        .iter()
        .filter(|(id, _)| !new.contains_key(*id))
        .map(|(_, p)| (*p).clone())
        .collect();
    out
}

/// What changed between `current` and the paths the truth implies now.
pub fn diff_with_truth(current: &[DnsPath], truth: &Truth, config: &PathConfig) -> PathDiff {
    diff(current, &discover(truth, config))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The names are the labels, ledger text and JSON of earlier releases; discovery lists
    /// the kinds in this order, not by name.
    #[test]
    fn dns_kinds_keep_their_names_and_order() {
        let names: Vec<&str> = DNS_KINDS.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "dns-pod",
                "dns-cluster-ip",
                "dns-node-local",
                "dns-override"
            ]
        );
        assert!(DNS_KINDS.iter().all(|k| k.layer() == super::super::DNS));
        assert_eq!(super::super::DNS.as_str(), "dns");
    }

    #[test]
    fn parses_servers() {
        assert_eq!(
            parse_server("10.96.0.10").unwrap(),
            "10.96.0.10:53".parse().unwrap()
        );
        assert_eq!(
            parse_server("10.96.0.10:5353").unwrap(),
            "10.96.0.10:5353".parse().unwrap()
        );
        assert_eq!(
            parse_server("fd00::a").unwrap(),
            "[fd00::a]:53".parse().unwrap()
        );
        assert_eq!(
            parse_server("[fd00::a]").unwrap(),
            "[fd00::a]:53".parse().unwrap()
        );
        assert_eq!(
            parse_server("[fd00::a]:5353").unwrap(),
            "[fd00::a]:5353".parse().unwrap()
        );
        assert!(parse_server("coredns").is_err());
        assert!(parse_server("10.0.0.1:99999").is_err());
    }

    #[test]
    fn ids_and_descriptions() {
        let p = DnsPath::new(
            DNS_POD,
            "10.244.1.5:53".parse().unwrap(),
            Some("kube-system/coredns-abc"),
            None,
        );
        assert_eq!(p.id(), "dns-pod/10.244.1.5:53");
        assert_eq!(
            p.info.description,
            "dns via 10.244.1.5 (kube-system/coredns-abc)"
        );
        let p = DnsPath::new(
            DNS_CLUSTER_IP,
            "[fd00::a]:53".parse().unwrap(),
            None,
            Some("node-2"),
        );
        assert_eq!(p.id(), "dns-cluster-ip/[fd00::a]:53@node-2");
        assert_eq!(p.info.description, "dns via ClusterIP fd00::a from node-2");
        assert_eq!(p.info.node.as_deref(), Some("node-2"));
        let p = DnsPath::new(
            DNS_OVERRIDE,
            "127.0.0.1:5353".parse().unwrap(),
            Some("--dns-server"),
            None,
        );
        assert_eq!(p.info.description, "dns via 127.0.0.1:5353 (--dns-server)");
        assert_eq!(p.info.node, None);
    }
}
