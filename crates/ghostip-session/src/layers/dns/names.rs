//! The DNS names to probe for headless Services: A (and AAAA) for the Service name, SRV per named port.
//!
//! See [`service_names`] for one Service (what a burst probes) and [`sweep_names`] for
//! every headless Service (what the slow sweep probes).
//!
//! # Errors
//! [`NameError`] when a namespace, Service or port name does not make a valid DNS name
//! (Kubernetes validates them, so this means a malformed object).

use std::fmt;

use ghostip_core::truth::{AddressType, Truth};
use ghostip_core::{Protocol, ServiceKey};
use hickory_proto::rr::{Name, RecordType};

/// Record type of a probe query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueryType {
    /// IPv4 addresses.
    A,
    /// IPv6 addresses.
    Aaaa,
    /// Service records (`_port._proto.name`), with addresses in the additional section.
    Srv,
}

impl QueryType {
    /// The wire record type.
    pub fn record_type(self) -> RecordType {
        match self {
            QueryType::A => RecordType::A,
            QueryType::Aaaa => RecordType::AAAA,
            QueryType::Srv => RecordType::SRV,
        }
    }

    /// Upper-case mnemonic (`A`, `AAAA`, `SRV`).
    pub fn as_str(self) -> &'static str {
        match self {
            QueryType::A => "A",
            QueryType::Aaaa => "AAAA",
            QueryType::Srv => "SRV",
        }
    }
}

impl fmt::Display for QueryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Cluster DNS zone used when none is configured.
pub const DEFAULT_ZONE: &str = "cluster.local";

/// Which names to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameConfig {
    /// Cluster DNS zone (`cluster.local`).
    pub zone: String,
    /// Also probe `_<port>._<proto>.<service>` SRV names for named ports.
    pub srv: bool,
}

impl Default for NameConfig {
    fn default() -> Self {
        Self {
            zone: DEFAULT_ZONE.to_string(),
            srv: false,
        }
    }
}

/// One question to ask every path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeName {
    /// Fully qualified name.
    pub name: Name,
    /// Record type.
    pub qtype: QueryType,
}

impl ProbeName {
    /// An SRV name's port and protocol, its first two labels without their underscores
    /// (`("http", "tcp")` of `_http._tcp.web.prod.svc.cluster.local.`), lower-cased; `None`
    /// for an A or AAAA name, or an SRV name not of that form.
    pub fn srv_port(&self) -> Option<(String, String)> {
        if self.qtype != QueryType::Srv {
            return None;
        }
        let mut labels = self
            .name
            .iter()
            .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase());
        let port = labels.next()?.strip_prefix('_')?.to_string();
        let proto = labels.next()?.strip_prefix('_')?.to_string();
        Some((port, proto))
    }
}

impl fmt::Display for ProbeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.qtype, self.name)
    }
}

/// The names of one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceNames {
    /// The Service.
    pub service: ServiceKey,
    /// Its names.
    pub names: Vec<ProbeName>,
}

/// A name that is not valid DNS.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot build a DNS name for {service}: {name:?} is not a valid name ({message})")]
pub struct NameError {
    /// The Service.
    pub service: ServiceKey,
    /// The text that did not parse.
    pub name: String,
    /// The parser's complaint.
    pub message: String,
}

/// The A name of `key` whatever its kind: a ClusterIP Service's name answers its ClusterIP
/// (what `check` asks every DNS path for the DNS Service itself).
///
/// # Errors
/// [`NameError`] when the name does not parse.
pub fn service_a_name(key: &ServiceKey, config: &NameConfig) -> Result<ProbeName, NameError> {
    Ok(ProbeName {
        name: parse(key, &key.dns_name(&config.zone))?,
        qtype: QueryType::A,
    })
}

/// The names to probe for `key`.
///
/// - Unknown Service (deleted, or not synced yet): its A name only, since stale answers
///   for a deleted Service are exactly what a burst watches.
/// - Known, not headless: nothing (its name resolves to the ClusterIP, not to pods).
/// - Headless: A unless it has IPv6 slices only; AAAA when it has IPv6 slices; with
///   `config.srv`, SRV for every named port.
///
/// # Errors
/// [`NameError`] when a name does not parse.
pub fn service_names(
    truth: &Truth,
    key: &ServiceKey,
    config: &NameConfig,
) -> Result<Vec<ProbeName>, NameError> {
    let base = key.dns_name(&config.zone);
    let Some(svc) = truth.service(key) else {
        return Ok(vec![ProbeName {
            name: parse(key, &base)?,
            qtype: QueryType::A,
        }]);
    };
    if !svc.headless {
        return Ok(Vec::new());
    }
    let (mut v4, mut v6) = (false, false);
    for slice in truth.slices_of(key) {
        match slice.address_type {
            AddressType::IPv4 => v4 = true,
            AddressType::IPv6 => v6 = true,
            AddressType::Fqdn => {}
        }
    }
    let mut names = Vec::new();
    let name = parse(key, &base)?;
    if v4 || !v6 {
        names.push(ProbeName {
            name: name.clone(),
            qtype: QueryType::A,
        });
    }
    if v6 {
        names.push(ProbeName {
            name,
            qtype: QueryType::Aaaa,
        });
    }
    if config.srv {
        for port in &svc.ports {
            let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            names.push(ProbeName {
                name: parse(key, &srv_name(port_name, port.protocol, &base))?,
                qtype: QueryType::Srv,
            });
        }
    }
    // The sweep keeps these for every headless Service: no spare room.
    names.shrink_to_fit();
    Ok(names)
}

/// The names of every headless Service, for the sweep. Services whose names do not
/// parse are left out and logged.
pub fn sweep_names(truth: &Truth, config: &NameConfig) -> Vec<ServiceNames> {
    truth
        .services()
        .filter(|s| s.headless)
        .filter_map(|s| match service_names(truth, &s.key, config) {
            Ok(names) if !names.is_empty() => Some(ServiceNames {
                service: s.key.clone(),
                names,
            }),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "skipping service in DNS sweep");
                None
            }
        })
        .collect()
}

/// The SRV name of a Service's named port: `_http._tcp.<base>`, `base` being the Service's
/// own name (`web.demo.svc.cluster.local.`).
pub fn srv_name(port_name: &str, protocol: Protocol, base: &str) -> String {
    format!("_{port_name}._{}.{base}", protocol_label(protocol))
}

/// The protocol's label in an SRV name (`_tcp`, `_udp`, `_sctp`), without the underscore.
pub fn protocol_label(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

fn parse(service: &ServiceKey, text: &str) -> Result<Name, NameError> {
    Name::from_ascii(text).map_err(|e| NameError {
        service: service.clone(),
        name: text.to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A ClusterIP Service has no names to sweep, but its A name is still asked for.
    #[test]
    fn the_a_name_of_a_cluster_ip_service() {
        let key = ServiceKey::new("kube-system", "kube-dns");
        let n = service_a_name(&key, &NameConfig::default()).unwrap();
        assert_eq!(n.qtype, QueryType::A);
        assert_eq!(n.name.to_ascii(), "kube-dns.kube-system.svc.cluster.local.");
    }

    /// An SRV name gives its port and protocol; an A name, or an SRV name without the
    /// underscored labels, none.
    #[test]
    fn the_port_and_protocol_of_an_srv_name() {
        let probe = |name: &str, qtype| ProbeName {
            name: Name::from_ascii(name).unwrap(),
            qtype,
        };
        let srv = probe("_HTTP._tcp.web.prod.svc.cluster.local.", QueryType::Srv);
        assert_eq!(srv.srv_port(), Some(("http".into(), "tcp".into())));
        let a = probe("_http._tcp.web.prod.svc.cluster.local.", QueryType::A);
        assert_eq!(a.srv_port(), None);
        let bare = probe("web.prod.svc.cluster.local.", QueryType::Srv);
        assert_eq!(bare.srv_port(), None);
    }
}
