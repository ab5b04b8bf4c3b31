//! The DNS paths a drain watches and what each promises: the same discovery and Corefile semantics as the DNS layer, read once from the API.
//!
//! The paths are each CoreDNS pod and the kube-dns ClusterIP (from `kube-system/kube-dns`'s
//! Service and EndpointSlices, [`discover`]), NodeLocal DNSCache when its Corefile exists,
//! and — always, since the pod itself resolves through them — the nameservers of its own
//! `/etc/resolv.conf`. Whether a path caches the cluster domain and the TTL its fresh
//! answers carry come from the Corefile's [`ExpectedLag`]. What cannot be read (no RBAC in
//! `kube-system`, no Corefile) is said, and the fallback budget stands in for it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ghostip_core::corefile::{Corefile, ExpectedLag};
use ghostip_core::truth::Truth;
use ghostip_core::{ServiceKey, Time};
use ghostip_session::layers::dns::paths::{DEFAULT_DNS_PORT, DnsPath, PathConfig, discover};
use ghostip_session::layers::dns::{DNS_NODE_LOCAL, DNS_OVERRIDE};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;

use crate::kube::convert::{corefile_text, service_record, slice_record};

/// The DNS side of a drain.
pub(super) struct DnsPlan {
    /// Paths, with whether each caches the cluster domain and the TTL fresh answers carry.
    pub paths: Vec<(DnsPath, bool, Duration)>,
    /// The cluster DNS budget the Corefile implies (cache lag + client TTL), the drain's
    /// fallback for what it cannot see; with where it came from.
    pub budget: Option<(Duration, String)>,
    /// What could not be read.
    pub unknown: Vec<String>,
    /// The Corefiles read (CoreDNS's, then NodeLocal DNSCache's), for the audit's budget.
    pub corefiles: Vec<String>,
}

/// Reads the DNS Service, its slices and the Corefiles (each read bounded by `timeout`).
pub(super) async fn plan(
    client: Option<&kube::Client>,
    zone: &str,
    timeout: Duration,
    at: Time,
) -> DnsPlan {
    let mut unknown = Vec::new();
    let mut paths = Vec::new();
    let mut coredns: Option<ExpectedLag> = None;
    let mut node_local: Option<(SocketAddr, ExpectedLag)> = None;
    let mut corefiles = Vec::new();
    if let Some(client) = client {
        match read_corefile(client, "coredns", timeout).await {
            Ok(Some(text)) => {
                match Corefile::parse(&text).and_then(|c| c.expected_lag(zone)) {
                    Ok(lag) => coredns = Some(lag),
                    Err(e) => unknown.push(format!("kube-system/coredns Corefile: {e}")),
                }
                corefiles.push(text);
                if let Ok(Some(text)) = read_corefile(client, "node-local-dns", timeout).await
                    && let Ok(c) = Corefile::parse(&text)
                    && let Ok(lag) = c.expected_lag_behind(zone, coredns.as_ref())
                {
                    node_local =
                        Some((ghostip_session::layers::dns::paths::DEFAULT_NODE_LOCAL, lag));
                    corefiles.push(text);
                }
            }
            Ok(None) => unknown.push("no Corefile in kube-system/coredns".into()),
            Err(e) => unknown.push(format!("reading kube-system/coredns: {e}")),
        }
        match dns_truth(client, timeout, at).await {
            Ok(truth) => {
                let cfg = PathConfig {
                    node_local: node_local.as_ref().map(|(a, _)| *a),
                    ..PathConfig::default()
                };
                for p in discover(&truth, &cfg) {
                    let lag = match p.info.kind {
                        DNS_NODE_LOCAL => node_local.as_ref().map(|(_, l)| l),
                        _ => coredns.as_ref(),
                    };
                    paths.push(with_lag(p, lag));
                }
            }
            Err(e) => unknown.push(format!(
                "the CoreDNS pods and the kube-dns ClusterIP (reading kube-system/kube-dns: {e})"
            )),
        }
    } else {
        unknown.push("the CoreDNS pods and the kube-dns ClusterIP (no API server)".into());
    }
    // The pod's own resolvers: what its clients ask, whatever else is readable.
    for server in resolv_conf_servers() {
        if paths.iter().any(|(p, _, _)| p.server == server) {
            continue;
        }
        let lag = coredns.as_ref();
        paths.push(with_lag(
            DnsPath::new(DNS_OVERRIDE, server, Some("/etc/resolv.conf"), None),
            lag,
        ));
    }
    let budget = coredns.as_ref().map(|l| {
        let total = l.cache_lag + l.client_ttl;
        (
            node_local
                .as_ref()
                .map_or(total, |(_, nl)| total.max(nl.cache_lag + nl.client_ttl)),
            format!(
                "DNS budget of kube-system/coredns: cache lag {} s + client TTL {} s",
                l.cache_lag.as_secs(),
                l.client_ttl.as_secs()
            ),
        )
    });
    DnsPlan {
        paths,
        budget,
        unknown,
        corefiles,
    }
}

/// A path with whether it caches and its clients' TTL; without a Corefile, the kubernetes
/// plugin's default (no cache assumed, TTL 5 s) is the optimistic guess, so an unknown
/// Corefile is also reported as unknown by the caller.
fn with_lag(p: DnsPath, lag: Option<&ExpectedLag>) -> (DnsPath, bool, Duration) {
    match lag {
        Some(l) => (p, !l.cache_lag.is_zero(), l.client_ttl),
        None => (p, false, Duration::from_secs(5)),
    }
}

async fn read_corefile(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
) -> Result<Option<String>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    match tokio::time::timeout(timeout, api.get_opt(name)).await {
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(cm)) => Ok(cm.as_ref().and_then(corefile_text).map(str::to_string)),
    }
}

/// The kube-dns Service and its slices, as a truth of their own.
async fn dns_truth(client: &kube::Client, timeout: Duration, at: Time) -> Result<Truth, String> {
    let key = ServiceKey::new("kube-system", "kube-dns");
    let svc_api: Api<Service> = Api::namespaced(client.clone(), &key.namespace);
    let slice_api: Api<EndpointSlice> = Api::namespaced(client.clone(), &key.namespace);
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={}", key.name));
    let (svc, slices) = tokio::time::timeout(timeout, async {
        tokio::join!(svc_api.get_opt(&key.name), slice_api.list(&lp))
    })
    .await
    .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))?;
    let mut truth = Truth::new();
    if let Some(svc) = svc.map_err(|e| e.to_string())? {
        let record = service_record(&svc).map_err(|e| e.to_string())?;
        truth.apply_service(record, at);
    }
    for s in slices.map_err(|e| e.to_string())?.items {
        if let Ok(r) = slice_record(&s) {
            truth.apply_slice(r, at);
        }
    }
    Ok(truth)
}

/// `nameserver` lines of `/etc/resolv.conf` (port 53).
fn resolv_conf_servers() -> Vec<SocketAddr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .map(|t| parse_resolv_conf(&t))
        .unwrap_or_default()
}

fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, DEFAULT_DNS_PORT))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_nameservers_are_read() {
        let text = "search demo.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\n# nameserver 1.1.1.1\nnameserver fd00::a\noptions ndots:5\n";
        assert_eq!(
            parse_resolv_conf(text),
            vec![
                "10.96.0.10:53".parse().unwrap(),
                "[fd00::a]:53".parse().unwrap()
            ]
        );
    }
}
