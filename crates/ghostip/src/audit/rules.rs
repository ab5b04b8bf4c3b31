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

use std::collections::{BTreeMap, BTreeSet};

use ghostip_core::ServiceKey;
use ghostip_core::corefile::{AnswerSource, Corefile, CorefileError, ExpectedLag};
use k8s_openapi::api::core::v1::{Container, PodSpec, Probe};
use serde::Serialize;

use super::inventory::{
    InputCounts, InputProblem, Inventory, ObjectRef, Rollout, ServiceInfo, Workload,
};
use crate::kube::convert::prestop_seconds;

/// Annotation declaring how long the callers of a Service (on the Service) or a workload's own
/// clients (on the workload or its pod template) cache DNS answers, in seconds (`-1`: forever).
pub const CLIENT_TTL_ANNOTATION: &str = "ghostip.io/client-dns-cache-ttl";
/// Annotation declaring what a pod's liveness probe depends on: `dns`, `downstream` or `none`.
pub const HEALTH_DEPENDS_ANNOTATION: &str = "ghostip.io/health-depends-on";

/// The JDK's positive DNS cache when no property sets it (no security manager): 30 s.
const JVM_DEFAULT_TTL: i64 = 30;
/// The JDK's negative DNS cache default: 10 s.
const JVM_DEFAULT_NEGATIVE_TTL: i64 = 10;
/// `terminationGracePeriodSeconds` when not set.
const DEFAULT_GRACE: i64 = 30;
/// Time left to the application's own shutdown after the preStop hook, in the suggested grace.
const SHUTDOWN_MARGIN: i64 = 10;
/// A DNS cache lag that needs no fix: the floor of the `cache` plugin's MINTTL.
const SMALL_DNS_LAG: u64 = 5;

/// How bad a finding is. Warnings and errors make `audit` exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; not a predicted failure.
    Note,
    /// Predicts errors during rollouts.
    Warning,
    /// Predicts errors that do not end by themselves.
    Error,
}

impl Severity {
    /// Lower-case name (also the SARIF level).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Note => "note",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// A rule's fixed description (docs/AUDIT.md lists the same table).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RuleInfo {
    /// Stable id.
    pub id: &'static str,
    /// Short name.
    pub name: &'static str,
    /// Usual severity (some findings are raised or lowered, see the rule).
    pub severity: Severity,
    /// What it checks.
    pub what: &'static str,
    /// Why it matters.
    pub why: &'static str,
}

/// Every rule.
pub const RULES: &[RuleInfo] = &[
    RuleInfo {
        id: "GIP-DNS-001",
        name: "dns-staleness-exceeds-termination",
        severity: Severity::Warning,
        what: "a headless Service's DNS staleness budget (cluster DNS and NodeLocal cache lag plus client caches) exceeds what the pods' preStop delay covers",
        why: "after every rollout callers keep dialing removed pod IPs for the difference: connection refused, then timeouts",
    },
    RuleInfo {
        id: "GIP-DNS-002",
        name: "serve-stale-on-cluster-domain",
        severity: Severity::Warning,
        what: "the cache serving the cluster domain has serve_stale",
        why: "an expired entry is served once more (TTL 0) after it expired, so a removed IP can come back long after the cache lag",
    },
    RuleInfo {
        id: "GIP-DNS-003",
        name: "dns-layer-lag",
        severity: Severity::Note,
        what: "how long a Corefile lets removed IPs of headless Services stay in answers, and the TTL it hands to clients",
        why: "the starting point of every Service's budget; shown so the figures behind the other findings are visible",
    },
    RuleInfo {
        id: "GIP-CLIENT-001",
        name: "client-caches-dns-forever",
        severity: Severity::Error,
        what: "a JVM caller caches DNS answers (or failures) forever: networkaddress.cache.ttl / sun.net.inetaddr.ttl = -1",
        why: "the caller keeps a removed pod's IP until it restarts, whatever DNS or preStop do",
    },
    RuleInfo {
        id: "GIP-CLIENT-002",
        name: "grpc-on-headless-service",
        severity: Severity::Warning,
        what: "a headless Service exposes a gRPC port",
        why: "gRPC clients balancing on the client side (dns:/// with round_robin) re-resolve only after a connection fails: removed pods are used until their connections break, new pods get no traffic until then",
    },
    RuleInfo {
        id: "GIP-TERM-001",
        name: "prestop-exceeds-grace-period",
        severity: Severity::Warning,
        what: "a container's preStop sleep is as long as or longer than terminationGracePeriodSeconds",
        why: "the grace period counts the preStop hook: the kubelet kills the container when it ends, so the application never shuts down cleanly and the hook is cut short",
    },
    RuleInfo {
        id: "GIP-TERM-002",
        name: "no-prestop-behind-service",
        severity: Severity::Note,
        what: "a workload behind a ClusterIP Service has no preStop delay",
        why: "kube-proxy on every node removes the endpoint some time after the pod starts terminating; connections routed meanwhile are refused",
    },
    RuleInfo {
        id: "GIP-ROLL-001",
        name: "headless-service-empty-during-rollout",
        severity: Severity::Warning,
        what: "a rollout can leave a headless Service with no ready endpoint (Recreate, or maxSurge 0 with maxUnavailable ≥ replicas)",
        why: "the name answers NXDOMAIN/NODATA meanwhile, and caches keep that denial after the new pods are ready",
    },
    RuleInfo {
        id: "GIP-ROLL-002",
        name: "rollout-without-surge",
        severity: Severity::Note,
        what: "a Deployment or StatefulSet behind a Service rolls out with maxSurge 0",
        why: "each step removes ready pods before their replacements are ready; the pods left take the load while callers still dial the removed ones",
    },
    RuleInfo {
        id: "GIP-PROBE-001",
        name: "liveness-timeout-with-dependency",
        severity: Severity::Warning,
        what: "a liveness probe with timeoutSeconds ≤ 1 on a pod whose health depends on DNS or a downstream",
        why: "a slow DNS answer or downstream makes the probe time out, the kubelet restarts a healthy container, and the pod ends in CrashLoopBackOff",
    },
    RuleInfo {
        id: "GIP-PROBE-002",
        name: "no-readiness-probe-behind-service",
        severity: Severity::Note,
        what: "a workload behind a Service has no readiness probe",
        why: "new pods are published in DNS and load balancers as soon as their containers start, before they accept connections",
    },
    RuleInfo {
        id: "GIP-SVC-001",
        name: "publish-not-ready-addresses",
        severity: Severity::Warning,
        what: "a Service sets publishNotReadyAddresses",
        why: "terminating and unready pods stay in DNS until they are deleted, so no preStop delay covers the DNS lag",
    },
];

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
    /// Rule id (`GIP-DNS-001`).
    pub rule: &'static str,
    /// Severity.
    pub severity: Severity,
    /// The object to change (the workload, Service or Corefile).
    pub object: ObjectRef,
    /// The Service concerned, when the finding is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceKey>,
    /// What will happen, with the numbers.
    pub message: String,
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

// === DNS layers ===

struct Layer {
    info: DnsLayer,
    lag: ExpectedLag,
}

struct DnsChain {
    cluster: Option<Layer>,
    node_cache: Option<Layer>,
}

impl DnsChain {
    /// The worst lag a caller may see, and how it is made up.
    fn lag(&self) -> Option<(u64, String, u64)> {
        let c = self.cluster.as_ref();
        let n = self.node_cache.as_ref();
        if c.is_none() && n.is_none() {
            return None;
        }
        let mut desc = Vec::new();
        let mut caching_layers = 0u64;
        if let Some(c) = c {
            desc.push(describe(&c.lag));
            if c.lag.cache_lag > std::time::Duration::ZERO {
                caching_layers += 1;
            }
        }
        if let Some(n) = n {
            desc.push(format!("NodeLocal DNSCache in front: {}", describe(&n.lag)));
            if n.lag.cache.as_ref().is_some_and(|c| c.success_cached) {
                caching_layers += 1;
            }
        }
        let lag = c
            .map(|l| l.info.cache_lag_s)
            .max(n.map(|l| l.info.cache_lag_s))
            .unwrap_or(0);
        Some((lag, desc.join("; "), caching_layers))
    }

    fn denial_lag(&self) -> Option<u64> {
        let c = self.cluster.as_ref().map(|l| l.info.denial_lag_s);
        let n = self.node_cache.as_ref().map(|l| l.info.denial_lag_s);
        c.max(n)
    }
}

fn describe(lag: &ExpectedLag) -> String {
    let mut parts = Vec::new();
    if let AnswerSource::Kubernetes { ttl } = lag.source {
        parts.push(format!("kubernetes ttl {ttl}"));
    }
    match &lag.cache {
        None => parts.push("no cache".to_string()),
        Some(c) => {
            let mut s = format!("cache {}", c.success_max.as_secs());
            if c.success_min.as_secs() != 5 {
                s.push_str(&format!(" MINTTL {}", c.success_min.as_secs()));
            }
            if !c.success_cached {
                s.push_str(" with success caching disabled");
            }
            parts.push(s);
        }
    }
    parts.join(", ")
}

fn dns_chain(inv: &Inventory, zone: &str, problems: &mut Vec<InputProblem>) -> DnsChain {
    let mut cluster: Vec<Layer> = Vec::new();
    let mut forwarders: Vec<(ObjectRef, Corefile)> = Vec::new();
    for cf in &inv.corefiles {
        let parsed = Corefile::parse(&cf.text);
        let lag = parsed
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|p| p.expected_lag(zone));
        let (parsed, lag) = match (parsed, lag) {
            (Ok(p), Ok(l)) => (p, l),
            (Err(e), _) | (_, Err(e)) => {
                problems.push(corefile_problem(&cf.obj, &e));
                continue;
            }
        };
        match lag.source {
            AnswerSource::Kubernetes { .. } => cluster.push(Layer {
                info: layer_info("cluster-dns", &cf.obj, &lag),
                lag,
            }),
            AnswerSource::Forward { .. } => forwarders.push((cf.obj.clone(), parsed)),
        }
    }
    // Several cluster DNS configurations (one per file in a directory of samples): the one
    // that lags most is the budget; each is still reported as a layer.
    let cluster = cluster.into_iter().reduce(|a, b| {
        if b.info.cache_lag_s > a.info.cache_lag_s {
            b
        } else {
            a
        }
    });
    let mut node_cache: Option<Layer> = None;
    for (obj, parsed) in forwarders {
        let lag = match parsed.expected_lag_behind(zone, cluster.as_ref().map(|c| &c.lag)) {
            Ok(l) => l,
            Err(e) => {
                problems.push(corefile_problem(&obj, &e));
                continue;
            }
        };
        let layer = Layer {
            info: layer_info("node-cache", &obj, &lag),
            lag,
        };
        if node_cache
            .as_ref()
            .is_none_or(|n| layer.info.cache_lag_s > n.info.cache_lag_s)
        {
            node_cache = Some(layer);
        }
    }
    DnsChain {
        cluster,
        node_cache,
    }
}

/// A Corefile that cannot be used: a raw file is named at the error's line; a ConfigMap at
/// its own line, with the line inside its Corefile in the message.
fn corefile_problem(obj: &ObjectRef, e: &CorefileError) -> InputProblem {
    if obj.kind == "Corefile" {
        let mut origin = obj.origin.clone();
        origin.line = e.line().or(origin.line);
        let text = e.to_string();
        let text = match text.split_once(": ") {
            Some((head, rest)) if head.starts_with("line ") => rest.to_string(),
            _ => text,
        };
        return InputProblem {
            origin,
            message: format!("not a usable Corefile: {text}"),
        };
    }
    InputProblem {
        origin: obj.origin.clone(),
        message: format!("{obj}: Corefile {e}"),
    }
}

fn layer_info(role: &'static str, obj: &ObjectRef, lag: &ExpectedLag) -> DnsLayer {
    DnsLayer {
        role,
        object: obj.clone(),
        cache_lag_s: lag.cache_lag.as_secs(),
        client_ttl_s: lag.client_ttl.as_secs(),
        denial_lag_s: lag.denial_lag.as_secs(),
        serve_stale_s: lag.serve_stale.map(|d| d.as_secs()),
        notes: lag.notes.clone(),
    }
}

fn corefile_findings(chain: &DnsChain, zone: &str, out: &mut Vec<Finding>) {
    for layer in [&chain.cluster, &chain.node_cache].into_iter().flatten() {
        let i = &layer.info;
        let what = if i.role == "node-cache" {
            "NodeLocal DNSCache"
        } else {
            "cluster DNS"
        };
        out.push(Finding {
            rule: "GIP-DNS-003",
            severity: Severity::Note,
            object: i.object.clone(),
            service: None,
            message: format!(
                "{what} may serve a removed pod IP of a headless Service for up to {} s ({}), hands clients TTL {} s, and keeps a denial up to {} s",
                i.cache_lag_s,
                describe(&layer.lag),
                i.client_ttl_s,
                i.denial_lag_s
            ),
            fix: if i.cache_lag_s > SMALL_DNS_LAG {
                format!("`disable success {zone}` (or `cache 5`) bounds the cache lag; give pods a preStop sleep covering what remains")
            } else {
                "none needed for the DNS layer itself".to_string()
            },
            figures: BTreeMap::from([
                ("cache_lag_s", secs_i64(i.cache_lag_s)),
                ("client_ttl_s", secs_i64(i.client_ttl_s)),
                ("denial_lag_s", secs_i64(i.denial_lag_s)),
            ]),
        });
        if let Some(stale) = i.serve_stale_s {
            let verify = layer.lag.notes.iter().any(|n| n.contains(" verify:"));
            out.push(Finding {
                rule: "GIP-DNS-002",
                severity: if verify { Severity::Note } else { Severity::Warning },
                object: i.object.clone(),
                service: None,
                message: if verify {
                    format!("serve_stale {stale}s verify: when the upstream fails to answer, {what} serves an expired answer (possibly a removed IP) for up to {stale} s after it expired")
                } else {
                    format!("serve_stale {stale}s: after an entry expires, the next query within {stale} s still gets the old answer (possibly a removed IP) while it refreshes")
                },
                fix: format!("`disable success {zone}` in the cache block, or drop serve_stale for {zone}; if it is needed, use `serve_stale <duration> verify`"),
                figures: BTreeMap::from([("serve_stale_s", secs_i64(stale))]),
            });
        }
    }
}

fn secs_i64(s: u64) -> i64 {
    i64::try_from(s).unwrap_or(i64::MAX)
}

// === workloads ===

/// A preStop hook's delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PreStop {
    /// No hook.
    None,
    /// A recognizable sleep of this many seconds.
    Sleep(u64),
    /// A hook of unknown duration (httpGet, tcpSocket, a command that is not a sleep).
    Unknown(&'static str),
}

fn container_prestop(c: &Container) -> PreStop {
    let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else {
        return PreStop::None;
    };
    match prestop_seconds(h) {
        Some(s) => PreStop::Sleep(s),
        None if h.http_get.is_some() => PreStop::Unknown("httpGet"),
        None if h.exec.is_some() => PreStop::Unknown("exec"),
        None => PreStop::Unknown("tcpSocket"),
    }
}

fn containers(spec: &PodSpec) -> &[Container] {
    &spec.containers
}

/// The containers that serve traffic: those declaring ports, or all when none does.
fn serving(spec: &PodSpec) -> Vec<&Container> {
    let with_ports: Vec<&Container> = containers(spec)
        .iter()
        .filter(|c| c.ports.as_ref().is_some_and(|p| !p.is_empty()))
        .collect();
    if with_ports.is_empty() {
        containers(spec).iter().collect()
    } else {
        with_ports
    }
}

/// The delay the pod keeps accepting connections after it left the EndpointSlice.
fn pod_prestop(spec: &PodSpec) -> PreStop {
    let hooks: Vec<PreStop> = serving(spec).into_iter().map(container_prestop).collect();
    let known = hooks
        .iter()
        .filter_map(|h| match h {
            PreStop::None => Some(0),
            PreStop::Sleep(s) => Some(*s),
            PreStop::Unknown(_) => None,
        })
        .min();
    match known {
        Some(0) if hooks.iter().all(|h| *h == PreStop::None) => PreStop::None,
        Some(s) => PreStop::Sleep(s),
        None => hooks
            .into_iter()
            .find(|h| matches!(h, PreStop::Unknown(_)))
            .unwrap_or(PreStop::None),
    }
}

fn grace(spec: &PodSpec) -> i64 {
    spec.termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE)
}

/// What a workload's own clients do with DNS answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ClientCache {
    /// Positive cache in seconds (-1 forever) and where it comes from.
    positive: Option<(i64, String)>,
    /// Negative cache in seconds (-1 forever) and where it comes from.
    negative: Option<(i64, String)>,
}

const JVM_ENV: &[&str] = &[
    "JAVA_TOOL_OPTIONS",
    "JAVA_OPTS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
];

fn jvm_property(text: &str, names: &[&str]) -> Option<i64> {
    let mut found = None;
    for tok in text.split_whitespace() {
        let tok = tok.trim_matches(|c| c == '"' || c == '\'');
        let Some(prop) = tok.strip_prefix("-D") else {
            continue;
        };
        let Some((name, value)) = prop.split_once('=') else {
            continue;
        };
        if names.contains(&name)
            && let Ok(v) = value.trim().parse::<i64>()
        {
            // The last occurrence wins, as on the java command line.
            found = Some(v);
        }
    }
    found
}

fn client_cache(w: &Workload, problems: &mut Vec<InputProblem>) -> ClientCache {
    let mut out = ClientCache::default();
    if let Some(v) = w.annotation(CLIENT_TTL_ANNOTATION)
        && let Some(t) = ttl_annotation(&w.obj, v, problems)
    {
        out.positive = Some((t, format!("{CLIENT_TTL_ANNOTATION}={t}")));
    }
    let Some(spec) = &w.template.spec else {
        return out;
    };
    for c in containers(spec) {
        let mut texts: Vec<String> = Vec::new();
        let mut jvm = false;
        for e in c.env.as_deref().unwrap_or_default() {
            if JVM_ENV.contains(&e.name.as_str()) {
                jvm = true;
                if let Some(v) = &e.value {
                    texts.push(v.clone());
                }
            }
        }
        let cmdline: Vec<&String> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .collect();
        if cmdline
            .first()
            .is_some_and(|p| p.rsplit('/').next() == Some("java"))
        {
            jvm = true;
        }
        texts.extend(cmdline.iter().map(|s| s.to_string()));
        let text = texts.join(" ");
        let pos = jvm_property(&text, &["sun.net.inetaddr.ttl", "networkaddress.cache.ttl"]);
        let neg = jvm_property(
            &text,
            &[
                "sun.net.inetaddr.negative.ttl",
                "networkaddress.cache.negative.ttl",
            ],
        );
        if pos.is_some() || neg.is_some() {
            jvm = true;
        }
        if !jvm {
            continue;
        }
        let name = &c.name;
        let (p, psrc) = match pos {
            Some(v) => (v, format!("JVM cache {} (container {name})", ttl_text(v))),
            None => (
                JVM_DEFAULT_TTL,
                format!("JVM default cache 30 s (container {name}, no networkaddress.cache.ttl)"),
            ),
        };
        let (n, nsrc) = match neg {
            Some(v) => (
                v,
                format!("JVM negative cache {} (container {name})", ttl_text(v)),
            ),
            None => (
                JVM_DEFAULT_NEGATIVE_TTL,
                format!("JVM default negative cache 10 s (container {name})"),
            ),
        };
        if out.positive.as_ref().is_none_or(|(cur, _)| longer(p, *cur)) {
            out.positive = Some((p, psrc));
        }
        if out.negative.as_ref().is_none_or(|(cur, _)| longer(n, *cur)) {
            out.negative = Some((n, nsrc));
        }
    }
    out
}

/// The value of [`CLIENT_TTL_ANNOTATION`]: seconds, `-1` for forever; anything else is an
/// input problem on `obj`.
fn ttl_annotation(obj: &ObjectRef, v: &str, problems: &mut Vec<InputProblem>) -> Option<i64> {
    match v.trim().parse::<i64>() {
        Ok(t) if t >= -1 => Some(t),
        _ => {
            problems.push(InputProblem {
                origin: obj.origin.clone(),
                message: format!(
                    "{obj}: annotation {CLIENT_TTL_ANNOTATION}={v:?} must be a number of \
                     seconds (-1: forever)"
                ),
            });
            None
        }
    }
}

/// Whether cache TTL `a` keeps answers longer than `b` (-1 is forever).
fn longer(a: i64, b: i64) -> bool {
    match (a < 0, b < 0) {
        (true, _) => b >= 0,
        (false, true) => false,
        (false, false) => a > b,
    }
}

fn ttl_text(v: i64) -> String {
    if v < 0 {
        "forever".to_string()
    } else {
        format!("{v} s")
    }
}

/// Host names a pod spec mentions: env values, command and args.
fn referenced_hosts(spec: &PodSpec) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for c in containers(spec) {
        for e in c.env.as_deref().unwrap_or_default() {
            let Some(v) = &e.value else { continue };
            let hostish_var = [
                "_HOST",
                "_HOSTNAME",
                "_ADDR",
                "_ADDRESS",
                "_SERVICE",
                "_SERVER",
            ]
            .iter()
            .any(|s| e.name.to_ascii_uppercase().ends_with(s));
            hosts_in(v, hostish_var, &mut out);
        }
        for s in c.command.iter().flatten().chain(c.args.iter().flatten()) {
            hosts_in(s, false, &mut out);
        }
    }
    out
}

/// Host-like words of `text`: after `//` or `@`, before `:<digit>`, fully qualified cluster
/// names, or the whole value of a `*_HOST`-style variable.
fn hosts_in(text: &str, whole_is_host: bool, out: &mut BTreeSet<String>) {
    let is_host_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let bytes = text.as_bytes();
    let mut start = None;
    for (i, ch) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        if i < text.len() && is_host_char(ch) {
            if start.is_none() {
                start = Some(i);
            }
            continue;
        }
        let Some(s) = start.take() else { continue };
        let word = text[s..i].trim_matches('.').to_ascii_lowercase();
        if word.is_empty() || !word.starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue;
        }
        let after_scheme = s >= 2 && &bytes[s - 2..s] == b"//" || s >= 1 && bytes[s - 1] == b'@';
        let before_port =
            bytes.get(i) == Some(&b':') && bytes.get(i + 1).is_some_and(|b| b.is_ascii_digit());
        let whole = whole_is_host && s == 0 && i == text.len();
        let cluster_name = word.contains(".svc");
        if after_scheme || before_port || whole || cluster_name {
            out.insert(word);
        }
    }
}

/// Whether `host` names `svc` from a pod in `from_ns`.
fn names_service(host: &str, svc: &ServiceKey, from_ns: &str, zone: &str) -> bool {
    let parts: Vec<&str> = host.split('.').collect();
    let zone_parts: Vec<&str> = zone.trim_matches('.').split('.').collect();
    if let Some(i) = parts.iter().position(|p| *p == "svc") {
        let rest = &parts[i + 1..];
        if (rest.is_empty() || rest == zone_parts.as_slice()) && i >= 2 {
            return parts[i - 2] == svc.name && parts[i - 1] == svc.namespace;
        }
        return false;
    }
    match parts.as_slice() {
        [name] => *name == svc.name && from_ns == svc.namespace,
        [name, ns] => *name == svc.name && *ns == svc.namespace,
        _ => false,
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
        .map(|w| client_cache(w, &mut problems))
        .collect();
    let hosts: Vec<BTreeSet<String>> = workloads
        .iter()
        .map(|w| {
            w.template
                .spec
                .as_ref()
                .map(referenced_hosts)
                .unwrap_or_default()
        })
        .collect();

    let mut budgets = Vec::new();
    let mut backing_any: BTreeSet<usize> = BTreeSet::new();
    let mut ctx = Ctx {
        cfg,
        chain: &chain,
        findings: &mut findings,
    };
    for svc in &services {
        let backing: Vec<usize> = (0..workloads.len())
            .filter(|i| selects(svc, workloads[*i]))
            .collect();
        backing_any.extend(backing.iter().copied());
        let callers: Vec<usize> = (0..workloads.len())
            .filter(|i| {
                hosts[*i]
                    .iter()
                    .any(|h| names_service(h, &svc.key, &workloads[*i].obj.namespace, &cfg.zone))
            })
            .collect();
        let client = service_client_cache(svc, &callers, &workloads, &caches, &mut problems);
        let budget = ctx.service(svc, &backing, &workloads, &client, &callers, &caches);
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

/// The longest client cache among a Service's callers, and where it comes from.
struct CallerCache {
    positive: Option<(i64, String)>,
    negative: Option<(i64, String)>,
}

fn service_client_cache(
    svc: &ServiceInfo,
    callers: &[usize],
    workloads: &[&Workload],
    caches: &[ClientCache],
    problems: &mut Vec<InputProblem>,
) -> CallerCache {
    let mut positive: Option<(i64, String)> = None;
    let mut negative: Option<(i64, String)> = None;
    if let Some(v) = svc.annotations.get(CLIENT_TTL_ANNOTATION)
        && let Some(t) = ttl_annotation(&svc.obj, v, problems)
    {
        let src = format!(
            "declared client cache {} ({CLIENT_TTL_ANNOTATION} on the Service)",
            ttl_text(t)
        );
        positive = Some((t, src));
    }
    for &i in callers {
        let w = workloads[i];
        if let Some((t, src)) = &caches[i].positive
            && positive.as_ref().is_none_or(|(cur, _)| longer(*t, *cur))
        {
            positive = Some((
                *t,
                format!(
                    "{src} in caller {} {}/{}",
                    w.obj.kind, w.obj.namespace, w.obj.name
                ),
            ));
        }
        if let Some((t, src)) = &caches[i].negative
            && negative.as_ref().is_none_or(|(cur, _)| longer(*t, *cur))
        {
            negative = Some((
                *t,
                format!(
                    "{src} in caller {} {}/{}",
                    w.obj.kind, w.obj.namespace, w.obj.name
                ),
            ));
        }
    }
    CallerCache { positive, negative }
}

struct Ctx<'a> {
    cfg: &'a AuditConfig,
    chain: &'a DnsChain,
    findings: &'a mut Vec<Finding>,
}

impl Ctx<'_> {
    fn service(
        &mut self,
        svc: &ServiceInfo,
        backing: &[usize],
        workloads: &[&Workload],
        client: &CallerCache,
        callers: &[usize],
        caches: &[ClientCache],
    ) -> ServiceBudget {
        let dns = self.chain.lag();
        let client_s = client.positive.as_ref().map(|(t, _)| *t);
        let forever = client_s.is_some_and(|t| t < 0);
        let budget = if svc.headless && !forever {
            Some(secs_i64(dns.as_ref().map_or(0, |d| d.0)) + client_s.unwrap_or(0).max(0))
        } else {
            None
        };

        if svc.publish_not_ready {
            self.publish_not_ready(svc, budget);
        }
        for &i in callers {
            self.forever_caches(svc, workloads[i], &caches[i]);
        }

        if svc.headless && svc.ports.iter().any(|p| p.is_grpc()) {
            let port = svc.ports.iter().find(|p| p.is_grpc());
            let port_text = port
                .map(|p| format!("{} ({})", p.name.as_deref().unwrap_or("grpc"), p.port))
                .unwrap_or_default();
            self.push(Finding {
                rule: "GIP-CLIENT-002",
                severity: Severity::Warning,
                object: svc.obj.clone(),
                service: Some(svc.key.clone()),
                message: format!(
                    "gRPC port {port_text} on a headless Service: clients balancing with dns:/// + round_robin keep the IPs they resolved and re-resolve only after a connection fails (at most every 30 s in grpc-go): removed pods are dialed until their connections break, new pods get no traffic until then"
                ),
                fix: "server keepalive MaxConnectionAge (e.g. 30s) so clients reconnect and re-resolve; on SIGTERM, GracefulStop after a preStop sleep covering the DNS budget; or balance through a proxy (ClusterIP + L7 mesh)".to_string(),
                figures: BTreeMap::new(),
            });
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
                .map(|&i| {
                    format!(
                        "{} {}/{}",
                        workloads[i].obj.kind, workloads[i].obj.namespace, workloads[i].obj.name
                    )
                })
                .collect(),
            callers: callers
                .iter()
                .map(|&i| {
                    format!(
                        "{} {}/{}",
                        workloads[i].obj.kind, workloads[i].obj.namespace, workloads[i].obj.name
                    )
                })
                .collect(),
            dns_lag_s: if svc.headless {
                dns.as_ref().map(|d| d.0)
            } else {
                None
            },
            client_cache_s: client_s,
            budget_s: budget,
        }
    }

    fn push(&mut self, f: Finding) {
        self.findings.push(f);
    }

    fn publish_not_ready(&mut self, svc: &ServiceInfo, budget: Option<i64>) {
        let message = if svc.headless {
            let after = match budget {
                Some(b) if b > 0 => {
                    format!(", so callers may dial a gone pod's IP for up to {b} s after it exits")
                }
                _ => String::new(),
            };
            format!(
                "publishNotReadyAddresses keeps terminating pods in DNS until they are deleted: \
                 no preStop delay covers the DNS lag{after}"
            )
        } else {
            "publishNotReadyAddresses routes traffic to unready and terminating pods".to_string()
        };
        self.push(Finding {
            rule: "GIP-SVC-001",
            severity: Severity::Warning,
            object: svc.obj.clone(),
            service: Some(svc.key.clone()),
            message,
            fix: "publishNotReadyAddresses: false, unless peers must find each other before \
                  they are ready (StatefulSet bootstrap); then use a separate headless Service \
                  for peer discovery"
                .to_string(),
            figures: budget
                .map(|b| BTreeMap::from([("budget_s", b)]))
                .unwrap_or_default(),
        });
    }

    /// GIP-CLIENT-001, once per caller and kind of cache.
    fn forever_caches(&mut self, svc: &ServiceInfo, w: &Workload, cache: &ClientCache) {
        for (entry, what) in [
            (&cache.positive, "answers"),
            (&cache.negative, "failed lookups"),
        ] {
            let Some((t, src)) = entry else { continue };
            if *t >= 0 {
                continue;
            }
            let already = self.findings.iter().any(|f| {
                f.rule == "GIP-CLIENT-001" && f.object == w.obj && f.message.contains(what)
            });
            if already {
                continue;
            }
            let fix = if what == "answers" {
                "-Dsun.net.inetaddr.ttl=5 (or networkaddress.cache.ttl=5 in java.security)"
            } else {
                "-Dsun.net.inetaddr.negative.ttl=1 (or networkaddress.cache.negative.ttl=1)"
            };
            self.push(Finding {
                rule: "GIP-CLIENT-001",
                severity: Severity::Error,
                object: w.obj.clone(),
                service: Some(svc.key.clone()),
                message: format!(
                    "{src}: this caller keeps DNS {what} until it restarts; \
                     a removed pod's IP of {} is dialed forever",
                    svc.key
                ),
                fix: fix.to_string(),
                figures: BTreeMap::from([("client_cache_s", -1)]),
            });
        }
    }

    fn budget_finding(
        &mut self,
        svc: &ServiceInfo,
        w: &Workload,
        dns: Option<&(u64, String, u64)>,
        client: &CallerCache,
        budget: Option<i64>,
    ) {
        let Some(budget) = budget else { return };
        let Some(spec) = &w.template.spec else { return };
        let grace = grace(spec);
        let prestop = pod_prestop(spec);
        let cover = if svc.publish_not_ready {
            0
        } else {
            match prestop {
                PreStop::None | PreStop::Unknown(_) => 0,
                PreStop::Sleep(s) => secs_i64(s).min(grace),
            }
        };
        if budget <= cover {
            return;
        }
        let exposure = budget - cover;
        let zone = &self.cfg.zone;
        let mut msg = match dns {
            Some((lag, desc, _)) => {
                format!("DNS may serve a removed IP for up to {lag} s ({desc})")
            }
            None => "DNS lag not counted (no Corefile was read: add the kube-system/coredns ConfigMap or use --cluster)".to_string(),
        };
        if let Some((t, src)) = &client.positive
            && *t > 0
        {
            msg.push_str(&format!(" + {src}"));
            if !src.contains(&format!("{t} s")) {
                msg.push_str(&format!(" ({t} s)"));
            }
        }
        match prestop {
            _ if svc.publish_not_ready => msg.push_str(
                ", but publishNotReadyAddresses keeps terminating pods in DNS, so preStop covers 0 s",
            ),
            PreStop::Unknown(kind) => msg.push_str(&format!(
                ", but the preStop hook ({kind}) has no known duration, counted as 0 s"
            )),
            PreStop::Sleep(s) if secs_i64(s) > grace => msg.push_str(&format!(
                ", but preStop sleep {s} s is cut at terminationGracePeriodSeconds {grace}, so it covers {cover} s"
            )),
            _ => msg.push_str(&format!(", but preStop covers {cover} s")),
        }
        msg.push_str(&format!(
            ": expect up to {exposure} s of dials to dead IPs per rollout"
        ));

        let mut fixes = Vec::new();
        let mut dns_after = dns.map_or(0, |d| d.0);
        if let Some((lag, _, layers)) = dns
            && *lag > SMALL_DNS_LAG
        {
            let mut f = format!("cache 5 or `disable success {zone}`");
            if let Some(c) = &self.chain.cluster {
                f.push_str(&format!(" in {}", c.info.object));
            }
            if let Some(n) = &self.chain.node_cache
                && n.lag
                    .cache
                    .as_ref()
                    .is_some_and(|c| c.success_cached && c.success_max.as_secs() > SMALL_DNS_LAG)
            {
                f.push_str(&format!(", `success <capacity> 5` in {}", n.info.object));
            }
            fixes.push(f);
            dns_after = (*lag).min(SMALL_DNS_LAG * (*layers).max(1));
        }
        if svc.publish_not_ready {
            fixes.push("publishNotReadyAddresses: false".to_string());
        }
        let target = secs_i64(dns_after) + client.positive.as_ref().map_or(0, |(t, _)| (*t).max(0));
        if target > cover {
            fixes.push(format!("preStop sleep ≥ {target} s"));
        }
        if grace < target + SHUTDOWN_MARGIN {
            fixes.push(format!(
                "terminationGracePeriodSeconds ≥ {} s",
                target + SHUTDOWN_MARGIN
            ));
        }
        let mut figures = BTreeMap::from([
            ("budget_s", budget),
            ("prestop_cover_s", cover),
            ("exposure_s", exposure),
            ("termination_grace_s", grace),
        ]);
        if let Some((lag, _, _)) = dns {
            figures.insert("dns_lag_s", secs_i64(*lag));
        }
        if let Some((t, _)) = &client.positive {
            figures.insert("client_cache_s", *t);
        }
        self.push(Finding {
            rule: "GIP-DNS-001",
            severity: if matches!(prestop, PreStop::Unknown(_)) && !svc.publish_not_ready {
                Severity::Note
            } else {
                Severity::Warning
            },
            object: w.obj.clone(),
            service: Some(svc.key.clone()),
            message: msg,
            fix: fixes.join("; "),
            figures,
        });
    }

    fn rollout_finding(&mut self, svc: &ServiceInfo, w: &Workload, client: &CallerCache) {
        let replicas = w.replicas.unwrap_or(1);
        let empties = match w.rollout {
            Rollout::Recreate => {
                Some("strategy Recreate removes every pod before new ones start".to_string())
            }
            Rollout::Rolling {
                max_surge: 0,
                max_unavailable,
            } if max_unavailable >= replicas
                && matches!(w.obj.kind.as_str(), "Deployment" | "StatefulSet") =>
            {
                Some(format!(
                    "replicas {replicas} with maxSurge 0 and maxUnavailable {max_unavailable}: the old pod{} leave{} before a replacement is ready",
                    if replicas == 1 { "" } else { "s" },
                    if replicas == 1 { "s" } else { "" }
                ))
            }
            _ => None,
        };
        let Some(why) = empties else { return };
        let denial = self.chain.denial_lag();
        let neg = client.negative.as_ref();
        let mut msg = format!(
            "{why}, so {} has no ready endpoint and answers NXDOMAIN/NODATA",
            svc.key
        );
        match denial {
            Some(d) if d > 0 => msg.push_str(&format!(
                "; DNS caches keep that denial up to {d} s after the new pod is ready"
            )),
            Some(_) => msg.push_str("; DNS does not cache the denial"),
            None => msg.push_str(" (denial cache not known: no Corefile read)"),
        }
        if let Some((t, src)) = neg {
            msg.push_str(&format!(", and {src} ({})", ttl_text(*t)));
        }
        let mut fix = match w.obj.kind.as_str() {
            "StatefulSet" => "replicas ≥ 2 (a StatefulSet never surges)".to_string(),
            _ => "strategy RollingUpdate with maxSurge ≥ 1 and maxUnavailable 0".to_string(),
        };
        if denial.is_some_and(|d| d > 0) {
            fix.push_str(&format!(
                "; `disable denial {}` in the cache block",
                self.cfg.zone
            ));
        }
        let mut figures = BTreeMap::from([("replicas", i64::from(replicas))]);
        if let Some(d) = denial {
            figures.insert("denial_lag_s", secs_i64(d));
        }
        self.push(Finding {
            rule: "GIP-ROLL-001",
            severity: Severity::Warning,
            object: w.obj.clone(),
            service: Some(svc.key.clone()),
            message: msg,
            fix,
            figures,
        });
    }

    fn surge_note(&mut self, svc: &ServiceInfo, w: &Workload) {
        let replicas = w.replicas.unwrap_or(1);
        if let Rollout::Rolling {
            max_surge: 0,
            max_unavailable,
        } = w.rollout
            && max_unavailable < replicas
            && matches!(w.obj.kind.as_str(), "Deployment" | "StatefulSet")
        {
            let already = self
                .findings
                .iter()
                .any(|f| f.rule == "GIP-ROLL-002" && f.object == w.obj);
            if already {
                return;
            }
            self.push(Finding {
                rule: "GIP-ROLL-002",
                severity: Severity::Note,
                object: w.obj.clone(),
                service: Some(svc.key.clone()),
                message: format!(
                    "maxSurge 0: each step removes {max_unavailable} of {replicas} ready pods before their replacements are ready, while callers still dial the removed ones"
                ),
                fix: if w.obj.kind == "StatefulSet" {
                    "a preStop sleep covering the DNS budget keeps removed pods serving meanwhile".to_string()
                } else {
                    "maxSurge ≥ 1 (e.g. 25%) with maxUnavailable 0".to_string()
                },
                figures: BTreeMap::from([
                    ("replicas", i64::from(replicas)),
                    ("max_unavailable", i64::from(max_unavailable)),
                ]),
            });
        }
    }

    fn no_prestop_note(&mut self, svc: &ServiceInfo, w: &Workload) {
        let Some(spec) = &w.template.spec else { return };
        if !matches!(
            w.obj.kind.as_str(),
            "Deployment" | "StatefulSet" | "DaemonSet"
        ) {
            return;
        }
        if pod_prestop(spec) != PreStop::None {
            return;
        }
        let already = self
            .findings
            .iter()
            .any(|f| f.rule == "GIP-TERM-002" && f.object == w.obj);
        if already {
            return;
        }
        self.push(Finding {
            rule: "GIP-TERM-002",
            severity: Severity::Note,
            object: w.obj.clone(),
            service: Some(svc.key.clone()),
            message: format!(
                "no preStop delay behind ClusterIP Service {}: the container is signalled as soon as the pod terminates, while kube-proxy on each node may still route new connections to it for a moment",
                svc.key
            ),
            fix: "preStop sleep 5 s (native `sleep: {seconds: 5}` or exec `sleep 5`)".to_string(),
            figures: BTreeMap::new(),
        });
    }
}

fn workload_findings(
    w: &Workload,
    hosts: &BTreeSet<String>,
    behind_service: bool,
    out: &mut Vec<Finding>,
) {
    let Some(spec) = &w.template.spec else { return };
    let grace = grace(spec);
    for c in containers(spec) {
        if let PreStop::Sleep(s) = container_prestop(c)
            && secs_i64(s) >= grace
        {
            out.push(Finding {
                rule: "GIP-TERM-001",
                severity: Severity::Warning,
                object: w.obj.clone(),
                service: None,
                message: format!(
                    "container {}: preStop sleep {s} s does not fit in terminationGracePeriodSeconds {grace}: the kubelet kills the container when the grace period ends, {} the application could shut down",
                    c.name,
                    if secs_i64(s) > grace { "cutting the hook short before" } else { "before" }
                ),
                fix: format!(
                    "terminationGracePeriodSeconds ≥ {} s (preStop + {SHUTDOWN_MARGIN} s for the application's shutdown), or a shorter preStop sleep",
                    secs_i64(s) + SHUTDOWN_MARGIN
                ),
                figures: BTreeMap::from([
                    ("prestop_s", secs_i64(s)),
                    ("termination_grace_s", grace),
                ]),
            });
        }
        if let Some(p) = &c.liveness_probe {
            let timeout = p.timeout_seconds.unwrap_or(1);
            if timeout <= 1
                && let Some(dep) = health_dependency(w, p, hosts)
            {
                out.push(Finding {
                    rule: "GIP-PROBE-001",
                    severity: Severity::Warning,
                    object: w.obj.clone(),
                    service: None,
                    message: format!(
                        "container {}: liveness probe times out after {timeout} s{} and {dep}: a slow DNS answer (a lookup retry alone takes 5 s) fails it, and {} failures restart a healthy container (CrashLoopBackOff)",
                        c.name,
                        if p.timeout_seconds.is_none() { " (default)" } else { "" },
                        p.failure_threshold.unwrap_or(3)
                    ),
                    fix: "timeoutSeconds ≥ 5 on the liveness probe and keep dependencies out of it (check them in the readiness probe instead)".to_string(),
                    figures: BTreeMap::from([("timeout_s", i64::from(timeout))]),
                });
            }
        }
    }
    if behind_service
        && !containers(spec).iter().any(|c| c.readiness_probe.is_some())
        && matches!(
            w.obj.kind.as_str(),
            "Deployment" | "StatefulSet" | "DaemonSet"
        )
    {
        out.push(Finding {
            rule: "GIP-PROBE-002",
            severity: Severity::Note,
            object: w.obj.clone(),
            service: None,
            message: "no container has a readiness probe: new pods are published as soon as they start, before they accept connections".to_string(),
            fix: "a readinessProbe on the serving container (httpGet or tcpSocket on its port)".to_string(),
            figures: BTreeMap::new(),
        });
    }
}

/// Why a liveness probe depends on DNS or a downstream, if it does.
fn health_dependency(w: &Workload, p: &Probe, hosts: &BTreeSet<String>) -> Option<String> {
    if let Some(v) = w.annotation(HEALTH_DEPENDS_ANNOTATION) {
        return match v.trim() {
            "none" | "" => None,
            other => Some(format!(
                "its health depends on {other} ({HEALTH_DEPENDS_ANNOTATION})"
            )),
        };
    }
    let remote = |h: &str| {
        let h = h.trim().to_ascii_lowercase();
        !(h.is_empty() || h == "localhost" || h.parse::<std::net::IpAddr>().is_ok())
    };
    if let Some(h) = p.http_get.as_ref().and_then(|g| g.host.as_deref())
        && remote(h)
    {
        return Some(format!("the probe resolves host {h}"));
    }
    if let Some(h) = p.tcp_socket.as_ref().and_then(|g| g.host.as_deref())
        && remote(h)
    {
        return Some(format!("the probe resolves host {h}"));
    }
    if let Some(cmd) = p.exec.as_ref().and_then(|e| e.command.as_ref()) {
        let text = cmd.join(" ");
        for tool in ["nslookup", "dig", "getent", "host"] {
            if text
                .split_whitespace()
                .any(|t| t.rsplit('/').next() == Some(tool))
            {
                return Some(format!("the probe runs {tool}, a DNS lookup"));
            }
        }
        let mut probe_hosts = BTreeSet::new();
        hosts_in(&text, false, &mut probe_hosts);
        if let Some(h) = probe_hosts.iter().find(|h| remote(h)) {
            return Some(format!("the probe reaches {h}"));
        }
    }
    // An application health handler (HTTP, gRPC, exec) in a pod that talks to other hosts
    // may check them: the argocd-repo-server case (health waits on `lookup argocd-redis`).
    let app_handler = p.http_get.is_some() || p.grpc.is_some() || p.exec.is_some();
    let downstream: Vec<&String> = hosts.iter().filter(|h| remote(h)).collect();
    if app_handler && !downstream.is_empty() {
        let names: Vec<&str> = downstream.iter().take(3).map(|s| s.as_str()).collect();
        return Some(format!(
            "the pod talks to {}{}, which its health handler may wait on",
            names.join(", "),
            if downstream.len() > 3 { ", …" } else { "" }
        ));
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_found_in_urls_host_ports_and_host_variables() {
        let mut h = BTreeSet::new();
        hosts_in("http://web.demo.svc.cluster.local:8080/x", false, &mut h);
        hosts_in("--redis argocd-redis:6379 --mode=web", false, &mut h);
        hosts_in("argocd-redis-ha", true, &mut h);
        hosts_in("just words here", false, &mut h);
        let h: Vec<&str> = h.iter().map(String::as_str).collect();
        assert_eq!(
            h,
            [
                "argocd-redis",
                "argocd-redis-ha",
                "web.demo.svc.cluster.local"
            ]
        );
    }

    #[test]
    fn service_names_resolve_like_search_paths() {
        let k = ServiceKey::new("demo", "web");
        assert!(names_service("web", &k, "demo", "cluster.local"));
        assert!(!names_service("web", &k, "other", "cluster.local"));
        assert!(names_service("web.demo", &k, "other", "cluster.local"));
        assert!(names_service("web.demo.svc", &k, "other", "cluster.local"));
        assert!(names_service(
            "web-0.web.demo.svc.cluster.local",
            &k,
            "x",
            "cluster.local"
        ));
        assert!(!names_service(
            "web.demo.svc.example.org",
            &k,
            "demo",
            "cluster.local"
        ));
        assert!(!names_service(
            "web.example.org",
            &k,
            "demo",
            "cluster.local"
        ));
    }

    #[test]
    fn jvm_properties_last_wins() {
        assert_eq!(
            jvm_property(
                "-Dsun.net.inetaddr.ttl=30 -Xmx1g -Dsun.net.inetaddr.ttl=-1",
                &["sun.net.inetaddr.ttl"]
            ),
            Some(-1)
        );
        assert_eq!(jvm_property("-Dfoo=1", &["sun.net.inetaddr.ttl"]), None);
    }

    #[test]
    fn cache_lengths_order_forever_last() {
        assert!(longer(-1, 30));
        assert!(!longer(30, -1));
        assert!(longer(31, 30));
        assert!(!longer(-1, -1));
    }
}
