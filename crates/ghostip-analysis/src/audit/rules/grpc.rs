//! GIP-GRPC-*: gRPC servers behind headless Services, the clients that balance over them with
//! `dns:///`, and whether the server's `MaxConnectionAge` makes those clients re-resolve.
//!
//! A gRPC client resolving a headless Service (`dns:///api.demo.svc.cluster.local:9090`)
//! keeps the address list it resolved and asks its resolver again only when a connection
//! closes (grpc-go `clientconn.go`: "Refresh the name resolver on any connection loss"), and
//! grpc-go's DNS resolver runs at most once per `MinResolutionInterval`, 30 s by default
//! (`internal/resolver/dns/dns_resolver.go`, settable with
//! `resolver/dns.SetMinResolutionInterval`). A server `MaxConnectionAge` (gRFC A9) sends
//! GOAWAY to every connection that old (grpc-go adds ±10 % jitter), which closes it once
//! `MaxConnectionAgeGrace` has let its streams end, so clients re-resolve on a schedule.
//!
//! How servers, their `MaxConnectionAge` and their clients are recognised is ghostip's own
//! convention, listed in docs/AUDIT.md; the annotations, flags and variables read here are
//! not gRPC standards.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ghostip_core::corefile::parse_go_duration;
use k8s_openapi::api::core::v1::Container;

use super::client::names_service;
use super::{Ctx, Finding, RuleId, Severity};
use crate::audit::inventory::{InputProblem, ServiceInfo, Workload};

/// Annotation marking a workload as a gRPC server (`"server"`).
pub const GRPC_ROLE_ANNOTATION: &str = "ghostip.io/grpc";
/// Annotation declaring a gRPC server's `MaxConnectionAge` (a Go duration, `30s`).
pub const MAX_CONNECTION_AGE_ANNOTATION: &str = "ghostip.io/grpc-max-connection-age";
/// Annotation declaring a gRPC server's `MaxConnectionAgeGrace` (a Go duration, `10s`).
pub const MAX_CONNECTION_AGE_GRACE_ANNOTATION: &str = "ghostip.io/grpc-max-connection-age-grace";
/// Annotation listing a workload's gRPC targets (`dns:///api.demo.svc.cluster.local:9090`,
/// separated by commas or spaces).
pub const GRPC_TARGETS_ANNOTATION: &str = "ghostip.io/grpc-targets";
/// The channelz opt-in annotation (also read by `ghostip channelz`).
const CHANNELZ_PORT_ANNOTATION: &str = "ghostip.io/channelz-port";
/// The channelz opt-in container port name.
const CHANNELZ_PORT_NAME: &str = "channelz";
/// grpc-go's default minimum interval between two DNS resolutions of one channel
/// (`MinResolutionInterval`, google.golang.org/grpc v1.85.0).
pub const GRPC_GO_MIN_RESOLUTION_INTERVAL_S: i64 = 30;
/// The lab's measured delay until the first failed call after a pod was removed, with no
/// `MaxConnectionAge` (docs/AUDIT.md).
const LAB_FIRST_INCIDENT: &str = "15 s of failed calls per rollout with grpc-go, 30 s with grpc-java (lab/scenarios/grpc-headless)";

/// One of the two server settings, and how ghostip reads it.
#[derive(Clone, Copy)]
struct Setting {
    /// What it is called in grpc-go.
    name: &'static str,
    annotation: &'static str,
    /// The flag, written `--flag=VALUE`, `--flag VALUE`, `-flag=VALUE` or `-flag VALUE`.
    flag: &'static str,
    env: &'static str,
}

const MAX_AGE: Setting = Setting {
    name: "MaxConnectionAge",
    annotation: MAX_CONNECTION_AGE_ANNOTATION,
    flag: "max-connection-age",
    env: "GRPC_MAX_CONNECTION_AGE",
};

const MAX_AGE_GRACE: Setting = Setting {
    name: "MaxConnectionAgeGrace",
    annotation: MAX_CONNECTION_AGE_GRACE_ANNOTATION,
    flag: "max-connection-age-grace",
    env: "GRPC_MAX_CONNECTION_AGE_GRACE",
};

/// Why `w` is taken for a gRPC server behind `svc`, or `None` when it is not one.
pub(super) fn server_evidence(svc: &ServiceInfo, w: &Workload) -> Option<String> {
    if let Some(p) = svc.ports.iter().find(|p| p.is_grpc() || p.is_h2c()) {
        let name = p
            .name
            .as_deref()
            .map(|n| format!("{n} "))
            .unwrap_or_default();
        return Some(match &p.app_protocol {
            Some(app) => format!("Service port {name}{} appProtocol {app}", p.port),
            None => format!("Service port {name}{}", p.port),
        });
    }
    if w.annotation(GRPC_ROLE_ANNOTATION)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("server"))
    {
        return Some(format!("{GRPC_ROLE_ANNOTATION}: server"));
    }
    let spec = w.template.spec.as_ref()?;
    spec.containers.iter().find_map(|c| {
        c.ports.iter().flatten().find_map(|p| {
            p.name
                .as_deref()
                .filter(|n| n.eq_ignore_ascii_case("grpc"))
                .map(|n| format!("container {} port {n} ({})", c.name, p.container_port))
        })
    })
}

/// A server setting as read: its value and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ReadSetting {
    pub(super) value: Duration,
    pub(super) source: String,
}

/// The setting of `w`: the annotation, else a container's flag, else its env variable. A value
/// that is not a Go duration is an input problem (and the setting counts as absent); `0` is
/// grpc-go's "not set" (infinite).
fn read_setting(w: &Workload, s: Setting, problems: &mut Vec<InputProblem>) -> Option<ReadSetting> {
    let mut found: Vec<(String, String)> = Vec::new();
    if let Some(v) = w.annotation(s.annotation) {
        found.push((v.to_string(), format!("annotation {}", s.annotation)));
    }
    for c in w.template.spec.iter().flat_map(|spec| &spec.containers) {
        if let Some(v) = flag_value(c, s.flag) {
            found.push((v, format!("container {} flag --{}", c.name, s.flag)));
        }
        for e in c.env.iter().flatten() {
            if e.name == s.env
                && let Some(v) = &e.value
            {
                found.push((v.clone(), format!("container {} env {}", c.name, s.env)));
            }
        }
    }
    for (v, source) in found {
        match parse_go_duration(v.trim()) {
            Some(d) if d.is_zero() => continue,
            Some(value) => return Some(ReadSetting { value, source }),
            None => {
                let message = format!(
                    "{}: {source}={v:?} is not a Go duration (e.g. 30s, 1m30s) for the server's {}",
                    w.obj, s.name
                );
                if !problems.iter().any(|p| p.message == message) {
                    problems.push(InputProblem {
                        origin: w.obj.origin.clone(),
                        message,
                    });
                }
            }
        }
    }
    None
}

/// The value of `--flag=V`, `--flag V`, `-flag=V` or `-flag V` in a container's command or
/// args (each argument split at whitespace, so a `sh -c` script counts too).
fn flag_value(c: &Container, flag: &str) -> Option<String> {
    let words: Vec<&str> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .flat_map(|a| a.split_whitespace())
        .collect();
    for (i, w) in words.iter().enumerate() {
        let Some(rest) = w.strip_prefix("--").or_else(|| w.strip_prefix('-')) else {
            continue;
        };
        if let Some(v) = rest.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return Some(v.trim_matches(['"', '\'']).to_string());
        }
        if rest == flag {
            return words
                .get(i + 1)
                .map(|v| v.trim_matches(['"', '\'']).to_string());
        }
    }
    None
}

/// Hosts of the `dns:` targets in `text`: `dns:///host:port`, `dns://authority/host:port`,
/// `dns:host:port`.
pub(super) fn dns_targets(text: &str, out: &mut BTreeSet<String>) {
    let lower = text.to_ascii_lowercase();
    let mut rest = lower.as_str();
    while let Some(i) = rest.find("dns:") {
        let preceded_by_word = rest[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let mut t = &rest[i + 4..];
        rest = t;
        if preceded_by_word {
            continue;
        }
        if let Some(after) = t.strip_prefix("//") {
            let Some(slash) = after.find('/') else {
                continue;
            };
            t = &after[slash + 1..];
        }
        let end = t
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
            .unwrap_or(t.len());
        let host = t[..end].trim_matches('.');
        if host.starts_with(|c: char| c.is_ascii_alphabetic()) {
            out.insert(host.to_string());
        }
    }
}

/// What makes a workload a gRPC client, read once per workload: its `dns:` targets (host and
/// where it was written) and its channelz opt-in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ClientSignals {
    targets: Vec<(String, String)>,
    channelz: Option<String>,
}

/// The [`ClientSignals`] of `w`: `dns:` targets in [`GRPC_TARGETS_ANNOTATION`], env values, the
/// command and args; the channelz opt-in (annotation, or a container port named `channelz`).
pub(super) fn client_signals(w: &Workload) -> ClientSignals {
    let mut out = ClientSignals::default();
    let mut add = |text: &str, place: String| {
        let mut hosts = BTreeSet::new();
        dns_targets(text, &mut hosts);
        out.targets
            .extend(hosts.into_iter().map(|h| (h, place.clone())));
    };
    if let Some(v) = w.annotation(GRPC_TARGETS_ANNOTATION) {
        add(v, GRPC_TARGETS_ANNOTATION.to_string());
    }
    let containers = w.template.spec.iter().flat_map(|spec| &spec.containers);
    for c in containers.clone() {
        for e in c.env.iter().flatten() {
            if let Some(v) = &e.value {
                add(v, format!("container {} env {}", c.name, e.name));
            }
        }
        for a in c.command.iter().flatten().chain(c.args.iter().flatten()) {
            add(a, format!("container {} args", c.name));
        }
    }
    out.channelz = if w.annotation(CHANNELZ_PORT_ANNOTATION).is_some() {
        Some(format!("channelz opt-in ({CHANNELZ_PORT_ANNOTATION})"))
    } else {
        containers
            .flat_map(|c| c.ports.iter().flatten())
            .any(|p| p.name.as_deref() == Some(CHANNELZ_PORT_NAME))
            .then(|| format!("channelz opt-in (container port {CHANNELZ_PORT_NAME})"))
    };
    out
}

/// Why a workload in `from_ns` with `signals` is taken for a gRPC client of `svc`, or `None`:
/// a `dns:` target naming the Service; else the channelz opt-in on a workload that names the
/// Service (`names_it`, the callers the budget counts).
pub(super) fn client_evidence(
    svc: &ServiceInfo,
    signals: &ClientSignals,
    from_ns: &str,
    names_it: bool,
    zone: &str,
) -> Option<String> {
    if let Some((h, place)) = signals
        .targets
        .iter()
        .find(|(h, _)| names_service(h, &svc.key, from_ns, zone))
    {
        return Some(format!("dns:///{h} in {place}"));
    }
    let optin = signals.channelz.as_ref().filter(|_| names_it)?;
    Some(format!("{optin} and names the Service"))
}

/// Whole seconds, rounded up.
fn ceil_s(d: Duration) -> i64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(s).unwrap_or(i64::MAX)
}

/// `MaxConnectionAge` plus grpc-go's +10 % jitter, in whole seconds rounded up.
pub(super) fn max_age_with_jitter_s(d: Duration) -> i64 {
    ceil_s(d.saturating_add(d / 10))
}

impl Ctx<'_> {
    /// GIP-GRPC-001 / GIP-GRPC-002 for a headless Service. Returns whether the Service's
    /// gRPC servers are all known to set `MaxConnectionAge` or a finding here already covers
    /// them, in which case GIP-CLIENT-002 (the generic warning) is not added.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn grpc_max_connection_age(
        &mut self,
        svc: &ServiceInfo,
        backing: &[usize],
        workloads: &[&Workload],
        callers: &[usize],
        dns_lag: Option<u64>,
        problems: &mut Vec<InputProblem>,
    ) -> bool {
        let servers: Vec<(usize, String)> = backing
            .iter()
            .filter_map(|&i| server_evidence(svc, workloads[i]).map(|e| (i, e)))
            .collect();
        if servers.is_empty() {
            return false;
        }
        let zone = self.cfg.zone.clone();
        let clients: Vec<(String, String)> = workloads
            .iter()
            .enumerate()
            .filter(|(i, _)| !backing.contains(i))
            .filter_map(|(i, w)| {
                let signals = self.grpc_clients.get(i)?;
                client_evidence(svc, signals, &w.obj.namespace, callers.contains(&i), &zone).map(
                    |e| {
                        (
                            format!("{} {}/{}", w.obj.kind, w.obj.namespace, w.obj.name),
                            e,
                        )
                    },
                )
            })
            .collect();
        let mut all_set = true;
        let mut covered = false;
        for (i, evidence) in &servers {
            let w = workloads[*i];
            let age = read_setting(w, MAX_AGE, problems);
            let grace = read_setting(w, MAX_AGE_GRACE, problems);
            all_set &= age.is_some();
            if clients.is_empty() {
                continue;
            }
            covered = true;
            let names: Vec<&str> = clients.iter().map(|(n, _)| n.as_str()).collect();
            let how: Vec<String> = clients.iter().map(|(n, e)| format!("{n}: {e}")).collect();
            let mut figures = BTreeMap::from([(
                "grpc_clients",
                i64::try_from(clients.len()).unwrap_or(i64::MAX),
            )]);
            let Some(age) = age else {
                self.push(Finding {
                    rule: RuleId::Grpc001,
                    severity: Severity::Warning,
                    object: w.obj.clone(),
                    service: Some(svc.key.clone()),
                    caveats: Vec::new(),
                    message: format!(
                        "headless gRPC Service {} ({evidence}): clients {} balance over it with dns:/// and the server {} {}/{} sets no MaxConnectionAge: a removed pod's address stays in the clients' balancers until a call to it fails (budget: unbounded by configuration; measured in the lab: first incident {LAB_FIRST_INCIDENT}). Clients found by: {}",
                        svc.key,
                        names.join(", "),
                        w.obj.kind,
                        w.obj.namespace,
                        w.obj.name,
                        how.join("; "),
                    ),
                    fix: format!(
                        "give the server a preStop delay (ghostip drain-wait, or a sleep) of at least the clients' 30 s re-resolution (grpc-go's minimum interval, the JVM's address cache) plus the DNS budget and 5 s, so a removed pod still answers until its clients drop it (the lab: no failed call with 45 s under `cache 30`); MaxConnectionAge (e.g. 30s, with MaxConnectionAgeGrace, declared with the annotation {MAX_CONNECTION_AGE_ANNOTATION}) makes clients re-resolve on a schedule and lets the audit bound the budget, but alone it did not shorten the burst in the lab (10 s: the same failures)"
                    ),
                    figures,
                });
                continue;
            };
            let age_s = ceil_s(age.value);
            let jittered = max_age_with_jitter_s(age.value);
            let grace_s = grace.as_ref().map_or(0, |g| ceil_s(g.value));
            let mut caveats = Vec::new();
            if grace.is_none() {
                caveats.push(
                    "MaxConnectionAgeGrace not set (grpc-go's default is infinite): streams open at the GOAWAY keep the old connection until they end; counted as 0 s".to_string(),
                );
            }
            let dns = match dns_lag {
                Some(l) => i64::try_from(l).unwrap_or(i64::MAX),
                None => {
                    caveats.push(
                        "no cluster DNS Corefile read: its cache lag is not counted".to_string(),
                    );
                    0
                }
            };
            let budget = jittered
                .saturating_add(grace_s)
                .saturating_add(dns)
                .saturating_add(GRPC_GO_MIN_RESOLUTION_INTERVAL_S);
            figures.insert("max_connection_age_s", age_s);
            figures.insert("max_connection_age_jittered_s", jittered);
            figures.insert("max_connection_age_grace_s", grace_s);
            figures.insert("dns_lag_s", dns);
            figures.insert("resolver_min_interval_s", GRPC_GO_MIN_RESOLUTION_INTERVAL_S);
            figures.insert("budget_s", budget);
            let grace_text = match &grace {
                Some(g) => format!("MaxConnectionAgeGrace {grace_s} s ({})", g.source),
                None => "MaxConnectionAgeGrace not set".to_string(),
            };
            self.push(Finding {
                rule: RuleId::Grpc002,
                severity: Severity::Note,
                object: w.obj.clone(),
                service: Some(svc.key.clone()),
                caveats,
                message: format!(
                    "headless gRPC Service {} ({evidence}): clients {} re-resolve it at least every MaxConnectionAge: budget {budget} s = MaxConnectionAge {age_s} s ({}) + 10 % jitter = {jittered} s, + {grace_text}, + DNS lag {dns} s, + grpc-go's minimum re-resolution interval {GRPC_GO_MIN_RESOLUTION_INTERVAL_S} s",
                    svc.key,
                    names.join(", "),
                    age.source,
                ),
                fix: "a preStop delay (ghostip drain-wait, or a sleep) covering the budget keeps a removed pod serving while clients still hold its address; a shorter MaxConnectionAge, a bounded MaxConnectionAgeGrace or `cache 5` on the cluster DNS shortens the budget".to_string(),
                figures,
            });
        }
        all_set || covered
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::audit::Inventory;
    use crate::audit::load::add_manifest;
    use crate::audit::rules::{AuditConfig, AuditReport, audit};

    /// A headless Service `demo/api` (port named `port_name`) and its server Deployment with
    /// `server_extra` spliced into its pod template's container.
    fn server(port: &str, pod_annotations: &str, container_extra: &str) -> String {
        format!(
            r#"apiVersion: v1
kind: Service
metadata: {{name: api, namespace: demo}}
spec:
  clusterIP: None
  selector: {{app: api}}
  ports:
  - {port}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: api, namespace: demo}}
spec:
  selector: {{matchLabels: {{app: api}}}}
  template:
    metadata:
      labels: {{app: api}}
      annotations: {{{pod_annotations}}}
    spec:
      containers:
      - name: server
        image: api
{container_extra}
"#
        )
    }

    /// A Deployment `demo/<name>` with `annotations` on its pod template and `container_extra`
    /// in its container.
    fn client(name: &str, annotations: &str, container_extra: &str) -> String {
        format!(
            r#"---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: demo}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {{{annotations}}}
    spec:
      containers:
      - name: app
        image: {name}
{container_extra}
"#
        )
    }

    fn run(text: &str) -> AuditReport {
        let mut inv = Inventory::new("default");
        add_manifest(&mut inv, "case.yaml", text).unwrap_or_else(|e| panic!("{e}"));
        audit(&inv, &AuditConfig::default())
    }

    fn rules(r: &AuditReport) -> Vec<&str> {
        r.findings
            .iter()
            .map(|f| f.rule.as_str())
            .filter(|id| id.starts_with("GIP-GRPC") || *id == "GIP-CLIENT-002")
            .collect()
    }

    const ENV_CLIENT: &str = "        env:\n        - {name: API_TARGET, value: \"dns:///api.demo.svc.cluster.local:9090\"}";

    #[test]
    fn a_server_without_max_connection_age_is_flagged_with_its_clients() {
        let r = run(&(server("{name: grpc, port: 9090}", "", "") + &client("web", "", ENV_CLIENT)));
        assert_eq!(rules(&r), ["GIP-GRPC-001"], "{:#?}", r.findings);
        let f = &r
            .findings
            .iter()
            .find(|f| f.rule == RuleId::Grpc001)
            .unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.object.name, "api");
        assert!(
            f.message.contains("headless gRPC Service demo/api"),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains("clients Deployment demo/web balance over it with dns:///")
        );
        assert!(f.message.contains("sets no MaxConnectionAge"));
        assert!(f.message.contains("unbounded by configuration"));
        assert!(f.message.contains("env API_TARGET"), "{}", f.message);
        assert!(f.fix.contains("MaxConnectionAge (e.g. 30s"));
        assert!(f.fix.contains("preStop delay"));
        assert_eq!(f.figures["grpc_clients"], 1);
    }

    #[test]
    fn a_server_with_max_connection_age_gets_the_budget_instead() {
        let r = run(&(server(
            "{name: grpc, port: 9090}",
            "ghostip.io/grpc-max-connection-age: 30s, ghostip.io/grpc-max-connection-age-grace: 10s",
            "",
        ) + &client("web", "", ENV_CLIENT)));
        assert_eq!(rules(&r), ["GIP-GRPC-002"], "{:#?}", r.findings);
        let f = r
            .findings
            .iter()
            .find(|f| f.rule == RuleId::Grpc002)
            .unwrap();
        assert_eq!(f.severity, Severity::Note);
        assert_eq!(f.figures["max_connection_age_s"], 30);
        assert_eq!(f.figures["max_connection_age_jittered_s"], 33);
        assert_eq!(f.figures["max_connection_age_grace_s"], 10);
        assert_eq!(f.figures["resolver_min_interval_s"], 30);
        // No Corefile in the input: the DNS lag is 0 and said to be missing.
        assert_eq!(f.figures["dns_lag_s"], 0);
        assert_eq!(f.figures["budget_s"], 33 + 10 + 30);
        assert!(f.message.contains("budget 73 s"), "{}", f.message);
        assert!(
            f.caveats
                .iter()
                .any(|c| c.contains("no cluster DNS Corefile"))
        );
    }

    #[test]
    fn the_dns_lag_of_the_corefile_is_added() {
        let corefile = r#"---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        kubernetes cluster.local in-addr.arpa ip6.arpa
        cache 30
        forward . /etc/resolv.conf
    }
"#;
        let text = server(
            "{name: grpc, port: 9090}",
            "ghostip.io/grpc-max-connection-age: 30s, ghostip.io/grpc-max-connection-age-grace: 10s",
            "",
        ) + &client("web", "", ENV_CLIENT)
            + corefile;
        let r = run(&text);
        let lag = r.dns.first().unwrap().cache_lag_s;
        assert!(lag > 0);
        let f = r
            .findings
            .iter()
            .find(|f| f.rule == RuleId::Grpc002)
            .unwrap();
        assert_eq!(f.figures["dns_lag_s"], i64::try_from(lag).unwrap());
        assert_eq!(
            f.figures["budget_s"],
            33 + 10 + 30 + i64::try_from(lag).unwrap()
        );
        assert!(f.caveats.is_empty(), "{:?}", f.caveats);
    }

    #[test]
    fn max_connection_age_is_read_from_flags_and_env() {
        let flag =
            "        args: [\"--max-connection-age=1m\", \"--max-connection-age-grace\", \"15s\"]";
        let r =
            run(&(server("{name: grpc, port: 9090}", "", flag) + &client("web", "", ENV_CLIENT)));
        let f = r
            .findings
            .iter()
            .find(|f| f.rule == RuleId::Grpc002)
            .unwrap();
        assert_eq!(f.figures["max_connection_age_s"], 60);
        assert_eq!(f.figures["max_connection_age_grace_s"], 15);
        assert!(
            f.message
                .contains("container server flag --max-connection-age")
        );

        let env = "        env:\n        - {name: GRPC_MAX_CONNECTION_AGE, value: 45s}";
        let r =
            run(&(server("{name: grpc, port: 9090}", "", env) + &client("web", "", ENV_CLIENT)));
        let f = r
            .findings
            .iter()
            .find(|f| f.rule == RuleId::Grpc002)
            .unwrap();
        assert_eq!(f.figures["max_connection_age_s"], 45);
        assert_eq!(f.figures["max_connection_age_grace_s"], 0);
        assert!(
            f.caveats
                .iter()
                .any(|c| c.contains("MaxConnectionAgeGrace not set"))
        );

        // 0 is grpc-go's "infinite".
        let zero = "        args: [\"-max-connection-age=0\"]";
        let r =
            run(&(server("{name: grpc, port: 9090}", "", zero) + &client("web", "", ENV_CLIENT)));
        assert_eq!(rules(&r), ["GIP-GRPC-001"]);
    }

    #[test]
    fn a_bad_duration_is_an_input_problem_naming_the_workload() {
        let r = run(&(server(
            "{name: grpc, port: 9090}",
            "ghostip.io/grpc-max-connection-age: thirty",
            "",
        ) + &client("web", "", ENV_CLIENT)));
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        let p = &r.problems[0];
        assert_eq!(p.origin.file, "case.yaml");
        assert!(p.origin.line.is_some());
        assert!(p.message.contains("Deployment demo/api"), "{}", p.message);
        assert!(
            p.message.contains("\"thirty\" is not a Go duration"),
            "{}",
            p.message
        );
        assert_eq!(rules(&r), ["GIP-GRPC-001"]);
    }

    #[test]
    fn clients_are_found_by_each_signal() {
        let srv = server("{name: grpc, port: 9090}", "", "");
        let names_it = "        env:\n        - {name: API_ADDR, value: \"api.demo:9090\"}";
        let cases = [
            (
                "ghostip.io/grpc-targets: \"dns:///api:9090, dns:///other:1\"",
                "",
                "grpc-targets",
            ),
            ("", ENV_CLIENT, "env API_TARGET"),
            (
                "",
                "        args: [\"--backend\", \"dns:///api.demo.svc:9090\"]",
                "container app args",
            ),
            (
                "ghostip.io/channelz-port: \"9901\"",
                names_it,
                "channelz opt-in (ghostip.io/channelz-port)",
            ),
            (
                "",
                &format!(
                    "{names_it}\n        ports:\n        - {{name: channelz, containerPort: 9901}}"
                ),
                "channelz opt-in (container port channelz)",
            ),
        ];
        for (annotations, extra, signal) in cases {
            let r = run(&(srv.clone() + &client("web", annotations, extra)));
            let f = r
                .findings
                .iter()
                .find(|f| f.rule == RuleId::Grpc001)
                .unwrap_or_else(|| panic!("{signal}: {:#?}", r.findings));
            assert!(f.message.contains(signal), "{signal}: {}", f.message);
        }
        // Neither a channelz opt-in that does not name the Service, nor a plain caller.
        for (annotations, extra) in [("ghostip.io/channelz-port: \"9901\"", ""), ("", names_it)] {
            let r = run(&(srv.clone() + &client("web", annotations, extra)));
            assert_eq!(rules(&r), ["GIP-CLIENT-002"], "{:#?}", r.findings);
        }
        // A dns:/// target in another namespace is not this Service.
        let other = "        env:\n        - {name: T, value: \"dns:///api.elsewhere:9090\"}";
        let r = run(&(srv + &client("web", "", other)));
        assert_eq!(rules(&r), ["GIP-CLIENT-002"]);
    }

    #[test]
    fn servers_are_found_by_port_app_protocol_container_port_or_annotation() {
        for (port, annotations, extra) in [
            (
                "{name: api, port: 9090, appProtocol: kubernetes.io/h2c}",
                "",
                "",
            ),
            ("{name: api, port: 9090, appProtocol: grpc}", "", ""),
            ("{name: api, port: 9090}", "ghostip.io/grpc: server", ""),
            (
                "{name: api, port: 9090}",
                "",
                "        ports:\n        - {name: grpc, containerPort: 9090}",
            ),
        ] {
            let r = run(&(server(port, annotations, extra) + &client("web", "", ENV_CLIENT)));
            assert!(
                r.findings.iter().any(|f| f.rule == RuleId::Grpc001),
                "{port} {annotations} {extra}: {:#?}",
                r.findings
            );
        }
    }

    #[test]
    fn a_headless_service_that_is_not_grpc_is_not_flagged() {
        let r = run(&(server("{name: http, port: 8080}", "", "") + &client("web", "", ENV_CLIENT)));
        assert!(rules(&r).is_empty(), "{:#?}", r.findings);
    }

    #[test]
    fn a_server_with_max_connection_age_and_no_known_client_gets_no_warning() {
        let r = run(&server(
            "{name: grpc, port: 9090}",
            "ghostip.io/grpc-max-connection-age: 30s",
            "",
        ));
        assert!(rules(&r).is_empty(), "{:#?}", r.findings);
        let r = run(&server("{name: grpc, port: 9090}", "", ""));
        assert_eq!(rules(&r), ["GIP-CLIENT-002"]);
    }

    fn targets(text: &str) -> Vec<String> {
        let mut out = BTreeSet::new();
        dns_targets(text, &mut out);
        out.into_iter().collect()
    }

    #[test]
    fn dns_targets_are_read_in_every_spelling() {
        assert_eq!(
            targets("dns:///api.demo.svc.cluster.local:9090"),
            ["api.demo.svc.cluster.local"]
        );
        assert_eq!(
            targets("--target=dns://10.96.0.10:53/api.demo:9090"),
            ["api.demo"]
        );
        assert_eq!(targets("dns:api:9090, dns:///other"), ["api", "other"]);
        assert!(targets("xdns:///api:9090 http://api:80 dns://no-slash").is_empty());
    }

    #[test]
    fn jitter_rounds_up() {
        assert_eq!(max_age_with_jitter_s(Duration::from_secs(30)), 33);
        assert_eq!(max_age_with_jitter_s(Duration::from_secs(5)), 6);
        assert_eq!(max_age_with_jitter_s(Duration::from_secs(60)), 66);
    }
}
