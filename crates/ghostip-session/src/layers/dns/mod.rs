//! The DNS layer: every DNS path (each CoreDNS pod, the kube-dns ClusterIP, NodeLocal DNSCache, `--dns-server` overrides) should answer a headless Service's name with its ready endpoints.
//!
//! [`DnsModel`] is the layer's pure model. On every truth event it:
//! - derives the paths from the DNS Service's endpoints ([`paths`]) and registers them;
//! - sets the Service's desired answer set on every DNS path at once: its ready endpoints
//!   (all of them with `publishNotReadyAddresses`) of both families, and with SRV probing
//!   their `ip:port` per named port;
//! - reads the Corefiles (`kube-system/coredns`, `kube-system/node-local-dns`) for each
//!   path's expected lag and the TTL it hands to clients;
//! - asks the prober ([`probe::ProbeCommand`]) for a burst of queries on the Service's
//!   [`names`] after a change, and a slow sweep of every headless Service.
//!
//! The prober in the binary crate turns the commands into queries and the answers into
//! observations; [`DnsModel::scope`] says which desired targets an answer speaks for (A:
//! IPv4, AAAA: IPv6, SRV: the named port's `ip:port`), so a dual-stack Service is judged per
//! family.
//! [`health`] judges the kube-dns ClusterIP against the pod IPs from one node.

pub mod budget;
pub mod drain;
pub mod health;
pub mod load;
pub mod names;
pub mod paths;
pub mod probe;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ghostip_core::corefile::{Corefile, ExpectedLag};
use ghostip_core::engine::Engine;
use ghostip_core::truth::{AddressType, ServiceChange, Truth};
use ghostip_core::{Layer, PathIdx, PathKind, Scope, ServiceKey, Target, Time};

use crate::layer::{LayerCx, LayerModel};
use crate::report::PathFacts;
use crate::truth_event::{Received, TruthObject};
use names::{
    NameConfig, ProbeName, QueryType, ServiceNames, protocol_label, service_names, sweep_names,
};
use paths::{DnsPath, PathConfig, diff_with_truth};
use probe::{ProbeCommand, ProbePath};

/// The least expected lag of a DNS path, whatever the Corefile caches: CoreDNS answers
/// cluster names from its informer, which follows an EndpointSlice change within its
/// programming duration (`coredns_kubernetes_dns_programming_duration_seconds`, about a
/// second), and t0 is known to the second. A Corefile that does not cache cluster names
/// (kubeadm's `disable success cluster.local`) would otherwise give 0 s, and every 1-second
/// window would be over it (found by the soak, `lab/scenarios/soak`).
pub const MIN_DNS_LAG: Duration = Duration::from_secs(2);

/// The DNS layer: answers of every DNS path.
pub const DNS: Layer = Layer::new("dns");
/// A CoreDNS (kube-dns) pod queried at its pod IP.
pub const DNS_POD: PathKind = PathKind::new(DNS, "dns-pod");
/// The kube-dns Service queried at its ClusterIP (goes through a node's datapath).
pub const DNS_CLUSTER_IP: PathKind = PathKind::new(DNS, "dns-cluster-ip");
/// NodeLocal DNSCache (169.254.20.10 by default).
pub const DNS_NODE_LOCAL: PathKind = PathKind::new(DNS, "dns-node-local");
/// A DNS server given on the command line.
pub const DNS_OVERRIDE: PathKind = PathKind::new(DNS, "dns-override");
/// The DNS layer's path kinds, in the order [`paths::discover`] lists them.
pub const DNS_KINDS: [PathKind; 4] = [DNS_POD, DNS_CLUSTER_IP, DNS_NODE_LOCAL, DNS_OVERRIDE];

/// The DNS layer's settings.
#[derive(Clone, Debug)]
pub struct DnsConfig {
    /// Path discovery.
    pub paths: PathConfig,
    /// Names to probe.
    pub names: NameConfig,
    /// Longest a burst runs after a change.
    pub burst_limit: Duration,
}

impl Default for DnsConfig {
    fn default() -> Self {
        Self {
            paths: PathConfig::default(),
            names: NameConfig::default(),
            burst_limit: Duration::from_secs(600),
        }
    }
}

/// The DNS layer's model.
#[derive(Debug)]
pub struct DnsModel {
    cfg: DnsConfig,
    corefile: Option<(String, ExpectedLag)>,
    corefile_error: Option<String>,
    /// NodeLocal DNSCache's Corefile (`kube-system/node-local-dns`), when the cluster has one.
    node_local_corefile: Option<(String, Corefile)>,
    paths: Vec<DnsPath>,
    path_idx: BTreeMap<String, PathIdx>,
    /// The sweep was set up at the first sync.
    swept: bool,
    /// Bursts run at least until then (a rollout probes its services until it ends).
    min_burst_until: Option<Time>,
    outbox: Vec<ProbeCommand>,
}

impl DnsModel {
    /// A model with no path yet (they come with the DNS Service's endpoints).
    pub fn new(cfg: DnsConfig) -> Self {
        Self {
            cfg,
            corefile: None,
            corefile_error: None,
            node_local_corefile: None,
            paths: Vec::new(),
            path_idx: BTreeMap::new(),
            swept: false,
            min_burst_until: None,
            outbox: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DnsConfig {
        &self.cfg
    }

    /// Commands for the prober since the last call.
    pub fn take_commands(&mut self) -> Vec<ProbeCommand> {
        std::mem::take(&mut self.outbox)
    }

    /// Bursts run at least until `until` (a rollout keeps probing its Services until it ends).
    pub fn set_min_burst_until(&mut self, until: Time) {
        self.min_burst_until = Some(until);
    }

    /// Which of `service`'s desired targets an answer to `probe` speaks for (see
    /// [`answer_scope`]).
    pub fn scope(&self, truth: &Truth, service: &ServiceKey, probe: &ProbeName) -> Option<Scope> {
        answer_scope(truth, service, probe, &self.cfg.names)
    }

    /// The Corefile's expected lag, if one was seen, and why it is missing otherwise.
    pub fn expected_lag(&self) -> Result<Option<&ExpectedLag>, &str> {
        match (&self.corefile, &self.corefile_error) {
            (Some((_, lag)), _) => Ok(Some(lag)),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(None),
        }
    }

    /// The current DNS paths.
    pub fn dns_paths(&self) -> &[DnsPath] {
        &self.paths
    }

    /// The engine index of a DNS path.
    pub fn path_idx(&self, id: &str) -> Option<PathIdx> {
        self.path_idx.get(id).copied()
    }

    /// Headless Services with a selector in scope.
    pub fn services(&self, cx: &LayerCx<'_>) -> Vec<ServiceKey> {
        in_scope(cx)
    }

    fn lag_for_paths(&self) -> Duration {
        self.corefile
            .as_ref()
            .map_or(Duration::from_secs(5), |(_, l)| l.cache_lag)
            .max(MIN_DNS_LAG)
    }

    /// NodeLocal DNSCache's expected lag: its own cache in front of the cluster's CoreDNS.
    fn node_local_lag(&self) -> Option<(String, ExpectedLag)> {
        let (name, corefile) = self.node_local_corefile.as_ref()?;
        let upstream = self.corefile.as_ref().map(|(_, l)| l);
        match corefile.expected_lag_behind(&self.cfg.names.zone, upstream) {
            Ok(lag) => Some((name.clone(), lag)),
            Err(e) => {
                tracing::warn!(configmap = %name, error = %e, "NodeLocal DNSCache lag unknown");
                None
            }
        }
    }

    /// The expected lag of one path: NodeLocal DNSCache paths add their own cache.
    fn lag_for(&self, kind: PathKind) -> Duration {
        match (kind, self.node_local_lag()) {
            (DNS_NODE_LOCAL, Some((_, l))) => l.cache_lag.max(MIN_DNS_LAG),
            _ => self.lag_for_paths(),
        }
    }

    fn update_lags(&self, cx: &mut LayerCx<'_>) {
        for p in &self.paths {
            if let Some(idx) = self.path_idx.get(p.id()) {
                cx.set_expected_lag(*idx, self.lag_for(p.info.kind));
            }
        }
    }

    fn on_corefile(&mut self, cx: &mut LayerCx<'_>, object: &TruthObject) {
        let TruthObject::Corefile { configmap, text } = object else {
            return;
        };
        if configmap.name == "coredns" {
            match Corefile::parse(text).and_then(|c| c.expected_lag(&self.cfg.names.zone)) {
                Ok(lag) => {
                    self.corefile = Some((configmap.to_string(), lag));
                    self.corefile_error = None;
                }
                Err(e) => self.corefile_error = Some(format!("{configmap}: {e}")),
            }
        } else if configmap.name == "node-local-dns" {
            match Corefile::parse(text) {
                Ok(c) => self.node_local_corefile = Some((configmap.to_string(), c)),
                Err(e) => {
                    self.node_local_corefile = None;
                    tracing::warn!(%configmap, error = %e, "NodeLocal DNSCache Corefile not understood");
                }
            }
        } else {
            return;
        }
        self.update_lags(cx);
    }

    fn set_desired(
        &mut self,
        cx: &mut LayerCx<'_>,
        key: &ServiceKey,
        c: &ServiceChange,
        now: Time,
    ) {
        let desired = desired_answers(cx.truth, key, &self.cfg.names);
        let burst = self.burst_duration();
        let change = cx.set_desired(key, desired, c.at, burst);
        if !change.events {
            return;
        }
        if let Ok(names) = service_names(cx.truth, key, &self.cfg.names) {
            let mut until = now.checked_add(burst).unwrap_or(now);
            if let Some(min) = self.min_burst_until {
                until = until.max(min);
            }
            self.outbox.push(ProbeCommand::Burst {
                service: key.clone(),
                names,
                until,
            });
        }
    }

    fn burst_duration(&self) -> Duration {
        // Long enough to see the slowest path converge, bounded so probing always ends.
        let lag = self.lag_for_paths();
        (lag * 3 + Duration::from_secs(15)).min(self.cfg.burst_limit)
    }

    fn sweep(&self, cx: &LayerCx<'_>) -> Vec<ServiceNames> {
        let wanted: BTreeSet<ServiceKey> = in_scope(cx).into_iter().collect();
        sweep_names(cx.truth, &self.cfg.names)
            .into_iter()
            .filter(|s| wanted.contains(&s.service))
            .collect()
    }

    fn refresh_paths(&mut self, cx: &mut LayerCx<'_>) {
        let diff = diff_with_truth(&self.paths, cx.truth, &self.cfg.paths);
        if diff.is_empty() && !self.paths.is_empty() {
            return;
        }
        for p in diff.removed {
            if let Some(idx) = self.path_idx.remove(p.id()) {
                cx.remove_path(idx);
            }
            self.paths.retain(|q| q.id() != p.id());
        }
        for p in diff.added.into_iter().chain(diff.changed) {
            let idx = cx.add_path(p.info.clone(), self.lag_for(p.info.kind));
            self.path_idx.insert(p.id().to_string(), idx);
            self.paths.retain(|q| q.id() != p.id());
            self.paths.push(p);
        }
        let probe_paths: Vec<ProbePath> = self
            .paths
            .iter()
            .filter_map(|p| {
                self.path_idx.get(p.id()).map(|idx| ProbePath {
                    idx: *idx,
                    path: p.clone(),
                })
            })
            .collect();
        self.outbox.push(ProbeCommand::SetPaths(probe_paths));
    }
}

/// The answers every DNS path should give for `key`: its endpoints' IPs (each family is
/// judged by its own question, see [`answer_scope`]) and, with SRV names probed
/// (`names.srv`), their `ip:port` for every named port.
pub fn desired_answers(truth: &Truth, key: &ServiceKey, names: &NameConfig) -> BTreeSet<Target> {
    let mut desired: BTreeSet<Target> =
        truth.dns_answers(key).into_iter().map(Target::ip).collect();
    if names.srv
        && let Some(svc) = truth.service(key)
        && svc.headless
    {
        for slice in truth
            .slices_of(key)
            .filter(|s| s.address_type != AddressType::Fqdn)
        {
            let named = slice
                .ports
                .iter()
                .filter(|p| p.name.as_deref().is_some_and(|n| !n.is_empty()));
            for port in named {
                desired.extend(
                    slice
                        .endpoints
                        .iter()
                        .filter(|e| e.ready() || svc.publish_not_ready)
                        .map(|e| Target::socket(e.ip(), port.port)),
                );
            }
        }
    }
    desired
}

/// Which of `service`'s desired targets ([`desired_answers`]) an answer to `probe` speaks
/// for: A answers the IPv4 endpoints, AAAA the IPv6 ones, SRV `_name._proto` the `ip:port`
/// of the ports named so. `None` (not judged): an SRV name of no port the truth knows, or
/// SRV answers while SRV names are not probed (`names.srv` off: their targets are not
/// desired).
pub fn answer_scope(
    truth: &Truth,
    service: &ServiceKey,
    probe: &ProbeName,
    names: &NameConfig,
) -> Option<Scope> {
    match probe.qtype {
        QueryType::A => Some(Scope::Ipv4),
        QueryType::Aaaa => Some(Scope::Ipv6),
        QueryType::Srv if names.srv => {
            let (port_name, proto) = probe.srv_port()?;
            let ports: BTreeSet<u16> = truth
                .slices_of(service)
                .flat_map(|s| s.ports.iter())
                .filter(|p| {
                    p.name.as_deref() == Some(port_name.as_str())
                        && protocol_label(p.protocol) == proto
                })
                .map(|p| p.port)
                .collect();
            (!ports.is_empty()).then(|| Scope::Ports(ports.into_iter().collect()))
        }
        QueryType::Srv => None,
    }
}

/// Headless Services with a selector that the command looks at.
fn in_scope(cx: &LayerCx<'_>) -> Vec<ServiceKey> {
    cx.truth
        .services()
        .filter(|s| s.headless && s.has_selector)
        .map(|s| s.key.clone())
        .filter(|k| cx.filter.matches(cx.truth, k))
        .collect()
}

impl LayerModel for DnsModel {
    fn layer(&self) -> Layer {
        DNS
    }

    fn on_truth(&mut self, cx: &mut LayerCx<'_>, r: &Received, changes: &[ServiceChange]) {
        if let Some(object) = r.event.applied() {
            self.on_corefile(cx, object);
        }
        for c in changes {
            if c.service == self.cfg.paths.dns_service {
                self.refresh_paths(cx);
            }
            if !cx.filter.matches(cx.truth, &c.service)
                && cx
                    .engine
                    .desired(DNS, &c.service)
                    .is_none_or(|d| d.is_empty())
            {
                continue;
            }
            self.set_desired(cx, &c.service, c, r.at);
        }
        if cx.synced && !self.swept {
            self.swept = true;
            self.refresh_paths(cx);
            let sweep = self.sweep(cx);
            self.outbox.push(ProbeCommand::SetSweep(sweep));
        }
    }

    fn path_facts(&self, _engine: &Engine, out: &mut BTreeMap<PathIdx, PathFacts>) {
        let node_local = self.node_local_lag();
        for p in &self.paths {
            let Some(idx) = self.path_idx.get(p.id()) else {
                continue;
            };
            let own = match (&node_local, p.info.kind) {
                (Some((name, lag)), DNS_NODE_LOCAL) => Some((name, lag)),
                _ => None,
            };
            let f = match own.or(self.corefile.as_ref().map(|(n, l)| (n, l))) {
                Some((name, lag)) => PathFacts {
                    client_ttl: Some(lag.client_ttl),
                    notes: std::iter::once(format!("from {name}"))
                        .chain(lag.notes.iter().cloned())
                        .collect(),
                },
                None => PathFacts {
                    client_ttl: None,
                    notes: vec![self.corefile_error.clone().unwrap_or_else(|| {
                        "no Corefile seen: assumed the kubernetes plugin's default TTL of 5 s"
                            .into()
                    })],
                },
            };
            out.insert(*idx, f);
        }
    }
}
