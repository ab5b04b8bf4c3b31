//! The audit rules: each Service's staleness budget chain against its pods' termination budget.
//!
//! [`audit`] is pure: it takes an [`Inventory`] and returns an [`AuditReport`] whose findings
//! each carry a stable rule id ([`RULES`]), a severity, the object, the numbers and the fix.
//!
//! # The budget chain of a headless Service
//!
//! A removed pod's IP can stay in answers for `dns` seconds: the cluster DNS's cache lag
//! ([`ghostip_core::corefile::ExpectedLag::cache_lag`]: `kubernetes … ttl`, `cache` cap, MINTTL
//! floor, `disable success`), or NodeLocal DNSCache's lag behind it when a forwarding cache
//! is present. A caller that caches answers itself adds its own cache: the JVM's
//! `networkaddress.cache.ttl` / `-Dsun.net.inetaddr.ttl` (30 s by default), or a TTL declared
//! with the [`CLIENT_TTL_ANNOTATION`] annotation on the caller or on the Service. The sum is
//! the budget. The pod covers `min(preStop, terminationGracePeriodSeconds)` of it by still
//! accepting connections while it is already out of the EndpointSlice (nothing with
//! `publishNotReadyAddresses`, which keeps terminating pods in DNS until they are gone). The
//! rest is the time callers may dial an IP nobody listens on, every rollout.
//!
//! # Layout
//!
//! One file per rule family, each adding its findings: `dns` (GIP-DNS-*: the Corefiles read
//! and the budget against preStop), `client` (GIP-CLIENT-*: client DNS caches, callers,
//! gRPC ports), `grpc` (GIP-GRPC-*: gRPC servers behind headless Services, their `dns:///`
//! clients and `MaxConnectionAge`), `term` (GIP-TERM-*: preStop and grace period), `roll` (GIP-ROLL-*: update
//! strategies), `probe` (GIP-PROBE-*), `svc` (GIP-SVC-*). `budget` holds the arithmetic they
//! share (the DNS chain's lag, budget, cover, exposure and the fix's targets); `id` the rule
//! ids and their descriptions.

mod budget;
mod client;
mod dns;
mod grpc;
mod id;
mod jvm;
mod probe;
mod roll;
mod svc;
mod term;

use std::collections::{BTreeMap, BTreeSet};

use ghostip_core::ServiceKey;
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service};
use serde::Serialize;
use thiserror::Error;

use super::inventory::{
    InputCounts, InputProblem, Inventory, ObjectRef, Origin, Rollout, ServiceInfo, Workload,
};
use budget::DnsChain;
pub use budget::{Contribution, DRAIN_WAIT_ABOVE_S, SHUTDOWN_MARGIN, StalenessBudget};
use client::{
    CallerCache, ClientCache, client_cache, names_service, service_client_cache, workload_hosts,
};
use dns::{corefile_findings, dns_chain};
use grpc::{ClientSignals, client_signals};
pub use grpc::{
    GRPC_GO_MIN_RESOLUTION_INTERVAL_S, GRPC_ROLE_ANNOTATION, GRPC_TARGETS_ANNOTATION,
    MAX_CONNECTION_AGE_ANNOTATION, MAX_CONNECTION_AGE_GRACE_ANNOTATION,
};
pub use id::{RULES, RuleId, RuleInfo, Severity, UnknownRule};

/// Annotation declaring how long the callers of a Service (on the Service) or a workload's own
/// clients (on the workload or its pod template) cache DNS answers, in seconds (`-1`: forever).
pub const CLIENT_TTL_ANNOTATION: &str = "ghostip.io/client-dns-cache-ttl";
/// Annotation declaring what a pod's liveness probe depends on: `dns`, `downstream` or `none`.
pub const HEALTH_DEPENDS_ANNOTATION: &str = "ghostip.io/health-depends-on";

/// What to audit.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// The cluster DNS zone (`cluster.local`).
    pub zone: String,
    /// Only this namespace (Corefiles are always read).
    pub namespace: Option<String>,
    /// Label selector terms on Services `(key, value or None for existence, negated)`.
    pub selector: Vec<(String, Option<String>, bool)>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            zone: "cluster.local".to_string(),
            namespace: None,
            selector: Vec::new(),
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Rule id (`GIP-DNS-001` in outputs).
    pub rule: RuleId,
    /// Severity.
    pub severity: Severity,
    /// The object to change (the workload, Service or Corefile).
    pub object: ObjectRef,
    /// The Service concerned, when the finding is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceKey>,
    /// What will happen, with the numbers.
    pub message: String,
    /// What the figures assume and the input does not show (a Corefile's template
    /// placeholders, `import`s not followed, an upstream not read).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub caveats: Vec<String>,
    /// The concrete fix.
    pub fix: String,
    /// The numbers, in seconds (or counts), by name.
    pub figures: BTreeMap<&'static str, i64>,
}

/// One DNS layer as configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DnsLayer {
    /// `cluster-dns` (answers from the kubernetes plugin) or `node-cache` (forwards to it).
    pub role: &'static str,
    /// The ConfigMap or file.
    pub object: ObjectRef,
    /// How long it may serve a removed IP (for a node cache: including the cluster DNS's lag).
    pub cache_lag_s: u64,
    /// TTL handed to clients.
    pub client_ttl_s: u64,
    /// How long a negative answer may outlive the record's creation.
    pub denial_lag_s: u64,
    /// serve_stale window, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serve_stale_s: Option<u64>,
    /// How the figures were computed.
    pub notes: Vec<String>,
    /// What the figures assume and the Corefile does not show (also in `notes`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub caveats: Vec<String>,
}

/// The budget chain of one Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceBudget {
    /// The Service.
    pub service: ServiceKey,
    /// Headless.
    pub headless: bool,
    /// Workloads whose pods it selects.
    pub workloads: Vec<String>,
    /// Workloads whose pod specs name it.
    pub callers: Vec<String>,
    /// DNS lag (worst layer), when a Corefile was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_lag_s: Option<u64>,
    /// Longest client cache among the callers (-1: forever), when one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cache_s: Option<i64>,
    /// dns + client cache (headless only; `None` with a client caching forever).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<i64>,
}

/// The result of an audit.
#[derive(Clone, Debug, Serialize)]
pub struct AuditReport {
    /// What was read.
    pub inputs: InputCounts,
    /// What could not be read, by file and line.
    pub problems: Vec<InputProblem>,
    /// The DNS layers found.
    pub dns: Vec<DnsLayer>,
    /// Each Service's budget chain, headless first.
    pub services: Vec<ServiceBudget>,
    /// Findings, Corefiles first, then by Service (headless first), then by workload.
    pub findings: Vec<Finding>,
}

impl AuditReport {
    /// The highest severity found.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// Findings at each severity.
    pub fn count(&self, s: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == s).count()
    }
}

fn selects(svc: &ServiceInfo, w: &Workload) -> bool {
    if svc.selector.is_empty() || svc.key.namespace != w.obj.namespace {
        return false;
    }
    let labels = w.pod_labels();
    svc.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn selector_matches(cfg: &AuditConfig, svc: &ServiceInfo) -> bool {
    cfg.selector.iter().all(|(k, v, neg)| {
        let hit = match v {
            Some(v) => svc.labels.get(k) == Some(v),
            None => svc.labels.contains_key(k),
        };
        hit != *neg
    })
}

// === the audit ===

/// Runs every rule over `inv`.
pub fn audit(inv: &Inventory, cfg: &AuditConfig) -> AuditReport {
    let mut problems = inv.problems.clone();
    let chain = dns_chain(inv, &cfg.zone, &mut problems);
    let mut findings = Vec::new();
    corefile_findings(&chain, &cfg.zone, &mut findings);

    let in_scope = |ns: &str| cfg.namespace.as_deref().is_none_or(|n| n == ns);
    let mut services: Vec<&ServiceInfo> = inv
        .services
        .iter()
        .filter(|s| in_scope(&s.key.namespace) && selector_matches(cfg, s))
        .collect();
    services.sort_by(|a, b| b.headless.cmp(&a.headless).then_with(|| a.key.cmp(&b.key)));
    let workloads: Vec<&Workload> = inv
        .workloads
        .iter()
        .filter(|w| in_scope(&w.obj.namespace))
        .collect();
    let caches: Vec<ClientCache> = workloads
        .iter()
        .map(|w| client_cache(w, &inv.config_maps, &mut problems))
        .collect();
    let hosts: Vec<BTreeSet<String>> = workloads.iter().map(|w| workload_hosts(w)).collect();

    let mut budgets = Vec::new();
    let mut backing_any: BTreeSet<usize> = BTreeSet::new();
    let grpc_clients: Vec<ClientSignals> = workloads.iter().map(|w| client_signals(w)).collect();
    let mut ctx = Ctx {
        cfg,
        chain: &chain,
        findings: &mut findings,
        grpc_clients: &grpc_clients,
    };
    for svc in &services {
        let backing: Vec<usize> = (0..workloads.len())
            .filter(|i| selects(svc, workloads[*i]))
            .collect();
        backing_any.extend(backing.iter().copied());
        let callers = callers_of(svc, &workloads, &hosts, &cfg.zone);
        let client = service_client_cache(svc, &callers, &workloads, &caches, &mut problems);
        let budget = ctx.service(
            svc,
            &backing,
            &workloads,
            &client,
            &callers,
            &caches,
            &mut problems,
        );
        budgets.push(budget);
    }
    let with_selector = !cfg.selector.is_empty();
    for (i, w) in workloads.iter().enumerate() {
        if with_selector && !backing_any.contains(&i) {
            continue;
        }
        workload_findings(w, &hosts[i], backing_any.contains(&i), &mut findings);
    }

    AuditReport {
        inputs: inv.counts.clone(),
        problems,
        dns: [chain.cluster.as_ref(), chain.node_cache.as_ref()]
            .into_iter()
            .flatten()
            .map(|l| l.info.clone())
            .collect(),
        services: budgets,
        findings,
    }
}

/// The workloads (indices into `workloads`) whose pod specs name `svc`.
fn callers_of(
    svc: &ServiceInfo,
    workloads: &[&Workload],
    hosts: &[BTreeSet<String>],
    zone: &str,
) -> Vec<usize> {
    (0..workloads.len())
        .filter(|&i| {
            hosts.get(i).is_some_and(|hs| {
                hs.iter()
                    .any(|h| names_service(h, &svc.key, &workloads[i].obj.namespace, zone))
            })
        })
        .collect()
}

/// The staleness budget [`audit`] computes for one Service of `inv`: the DNS chain of the
/// inventory's Corefiles plus the longest DNS cache among the workloads that name the Service
/// (and a cache declared on it with [`CLIENT_TTL_ANNOTATION`]). `None` when `inv` has no such
/// Service. Unusable Corefiles and malformed annotations become caveats.
pub fn staleness_budget(
    inv: &Inventory,
    service: &ServiceKey,
    cfg: &AuditConfig,
) -> Option<StalenessBudget> {
    let svc = inv.services.iter().find(|s| s.key == *service)?;
    let workloads: Vec<&Workload> = inv.workloads.iter().collect();
    let hosts: Vec<BTreeSet<String>> = workloads.iter().map(|w| workload_hosts(w)).collect();
    let callers = callers_of(svc, &workloads, &hosts, &cfg.zone);
    Some(budget_with_callers(inv, svc, &workloads, &callers, cfg))
}

/// [`staleness_budget`] from the parts instead of an inventory: the Corefile texts (the
/// cluster DNS's, and NodeLocal DNSCache's when there is one), the Service, and the pod
/// templates of its callers (all taken as callers, whatever they name).
///
/// # Errors
///
/// [`BudgetError::Service`] when the Service cannot be read (no name).
pub fn staleness_budget_from_parts(
    corefiles: &[&str],
    service: &Service,
    callers: &[PodTemplateSpec],
    cfg: &AuditConfig,
) -> Result<StalenessBudget, BudgetError> {
    let namespace = service
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let mut inv = Inventory::new(namespace.clone());
    for (i, text) in corefiles.iter().enumerate() {
        inv.add_corefile_file(&format!("Corefile {}", i + 1), (*text).to_string());
    }
    let value = serde_json::to_value(service).map_err(|e| BudgetError::Service(e.to_string()))?;
    inv.add_value(value, &Origin::cluster(), &[]);
    if let Some(p) = inv.problems.first() {
        return Err(BudgetError::Service(p.message.clone()));
    }
    let Some(svc) = inv.services.first().cloned() else {
        return Err(BudgetError::Service("not a Service".to_string()));
    };
    let templates: Vec<Workload> = callers
        .iter()
        .enumerate()
        .map(|(i, t)| Workload {
            obj: ObjectRef {
                kind: "PodTemplate".to_string(),
                namespace: namespace.clone(),
                name: t
                    .metadata
                    .as_ref()
                    .and_then(|m| m.name.clone())
                    .unwrap_or_else(|| format!("caller-{}", i + 1)),
                origin: Origin::cluster(),
            },
            replicas: None,
            rollout: Rollout::None,
            template: t.clone(),
            annotations: BTreeMap::new(),
        })
        .collect();
    let workloads: Vec<&Workload> = templates.iter().collect();
    let all: Vec<usize> = (0..workloads.len()).collect();
    Ok(budget_with_callers(&inv, &svc, &workloads, &all, cfg))
}

fn budget_with_callers(
    inv: &Inventory,
    svc: &ServiceInfo,
    workloads: &[&Workload],
    callers: &[usize],
    cfg: &AuditConfig,
) -> StalenessBudget {
    let mut problems = Vec::new();
    let chain = dns_chain(inv, &cfg.zone, &mut problems);
    let caches: Vec<ClientCache> = workloads
        .iter()
        .map(|w| client_cache(w, &inv.config_maps, &mut problems))
        .collect();
    let client = service_client_cache(svc, callers, workloads, &caches, &mut problems);
    let mut b = budget::staleness(&chain, svc, &client);
    b.caveats
        .extend(problems.iter().map(|p| format!("not read: {p}")));
    b
}

/// A Service given to [`staleness_budget_from_parts`] that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BudgetError {
    /// No name, or not a Service.
    #[error("the Service cannot be read: {0}")]
    Service(String),
}

/// What every rule family's findings are added with.
struct Ctx<'a> {
    cfg: &'a AuditConfig,
    chain: &'a DnsChain,
    findings: &'a mut Vec<Finding>,
    /// What makes each workload (same indices) a gRPC client.
    grpc_clients: &'a [ClientSignals],
}

impl Ctx<'_> {
    #[allow(clippy::too_many_arguments)]
    fn service(
        &mut self,
        svc: &ServiceInfo,
        backing: &[usize],
        workloads: &[&Workload],
        client: &CallerCache,
        callers: &[usize],
        caches: &[ClientCache],
        problems: &mut Vec<InputProblem>,
    ) -> ServiceBudget {
        let dns = self.chain.lag();
        let staleness = budget::staleness(self.chain, svc, client);
        let budget = if svc.headless {
            staleness.total_s
        } else {
            None
        };

        if svc.publish_not_ready {
            self.publish_not_ready(svc, budget);
        }
        for &i in callers {
            self.forever_caches(svc, workloads[i], &caches[i]);
        }

        if svc.headless {
            let lag = dns.as_ref().map(|(l, _, _)| *l);
            let grpc_covered =
                self.grpc_max_connection_age(svc, backing, workloads, callers, lag, problems);
            if !grpc_covered {
                self.grpc_on_headless(svc);
            }
        }

        for &i in backing {
            let w = workloads[i];
            if svc.headless {
                self.budget_finding(svc, w, dns.as_ref(), client, budget);
                self.rollout_finding(svc, w, client);
            } else {
                self.no_prestop_note(svc, w);
            }
            self.surge_note(svc, w);
        }

        ServiceBudget {
            service: svc.key.clone(),
            headless: svc.headless,
            workloads: backing
                .iter()
                .map(|&i| workloads[i].obj.to_string())
                .collect(),
            callers: callers
                .iter()
                .map(|&i| workloads[i].obj.to_string())
                .collect(),
            dns_lag_s: staleness.dns_lag_s,
            client_cache_s: staleness.client_cache_s,
            budget_s: budget,
        }
    }

    fn push(&mut self, f: Finding) {
        self.findings.push(f);
    }
}

/// The findings about one workload alone, container by container (TERM-001, PROBE-001), then
/// PROBE-002.
fn workload_findings(
    w: &Workload,
    hosts: &BTreeSet<String>,
    behind_service: bool,
    out: &mut Vec<Finding>,
) {
    let Some(spec) = &w.template.spec else { return };
    let grace = term::grace(spec);
    for c in &spec.containers {
        out.extend(term::prestop_beyond_grace(w, c, grace));
        out.extend(probe::liveness_with_dependency(w, c, hosts));
    }
    out.extend(probe::no_readiness_probe(w, spec, behind_service));
}
