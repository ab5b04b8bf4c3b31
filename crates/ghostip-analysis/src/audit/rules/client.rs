//! GIP-CLIENT-*: what callers do with DNS answers (JVM caches, declared caches), which
//! workloads call a Service, and gRPC's client-side balancing on headless Services.

use std::collections::{BTreeMap, BTreeSet};

use ghostip_core::ServiceKey;
use k8s_openapi::api::core::v1::PodSpec;

use super::jvm::{JvmCache, jvm_cache};
use super::{CLIENT_TTL_ANNOTATION, Ctx, Finding, RuleId, Severity};
use crate::audit::inventory::{ConfigMapData, InputProblem, ObjectRef, ServiceInfo, Workload};

/// What a workload's own clients do with DNS answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ClientCache {
    /// Positive cache in seconds (-1 forever) and where it comes from.
    pub(super) positive: Option<(i64, String)>,
    /// Negative cache in seconds (-1 forever) and where it comes from.
    pub(super) negative: Option<(i64, String)>,
}

/// The DNS caches of a workload's clients: a declared [`CLIENT_TTL_ANNOTATION`], and the
/// longest cache among its JVM containers (see `jvm`).
pub(super) fn client_cache(
    w: &Workload,
    config_maps: &[ConfigMapData],
    problems: &mut Vec<InputProblem>,
) -> ClientCache {
    let mut out = ClientCache::default();
    if let Some(v) = w.annotation(CLIENT_TTL_ANNOTATION)
        && let Some(t) = ttl_annotation(&w.obj, v, problems)
    {
        out.positive = Some((t, format!("{CLIENT_TTL_ANNOTATION}={t}")));
    }
    let Some(spec) = &w.template.spec else {
        return out;
    };
    for c in &spec.containers {
        let Some(JvmCache {
            positive: (p, psrc),
            negative: (n, nsrc),
        }) = jvm_cache(c, spec, &w.obj.namespace, config_maps)
        else {
            continue;
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
pub(super) fn ttl_annotation(
    obj: &ObjectRef,
    v: &str,
    problems: &mut Vec<InputProblem>,
) -> Option<i64> {
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
pub(super) fn longer(a: i64, b: i64) -> bool {
    match (a < 0, b < 0) {
        (true, _) => b >= 0,
        (false, true) => false,
        (false, false) => a > b,
    }
}

pub(super) fn ttl_text(v: i64) -> String {
    if v < 0 {
        "forever".to_string()
    } else {
        format!("{v} s")
    }
}

/// Host names a workload's pod spec mentions.
pub(super) fn workload_hosts(w: &Workload) -> BTreeSet<String> {
    w.template
        .spec
        .as_ref()
        .map(referenced_hosts)
        .unwrap_or_default()
}

/// Host names a pod spec mentions: env values, command and args.
fn referenced_hosts(spec: &PodSpec) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for c in &spec.containers {
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
pub(super) fn hosts_in(text: &str, whole_is_host: bool, out: &mut BTreeSet<String>) {
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
pub(super) fn names_service(host: &str, svc: &ServiceKey, from_ns: &str, zone: &str) -> bool {
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

/// The longest client cache among a Service's callers, and where it comes from.
pub(super) struct CallerCache {
    pub(super) positive: Option<(i64, String)>,
    pub(super) negative: Option<(i64, String)>,
}

pub(super) fn service_client_cache(
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

impl Ctx<'_> {
    /// GIP-CLIENT-002: a gRPC port on a headless Service.
    pub(super) fn grpc_on_headless(&mut self, svc: &ServiceInfo) {
        let Some(p) = svc.ports.iter().find(|p| p.is_grpc()) else {
            return;
        };
        let port_text = format!("{} ({})", p.name.as_deref().unwrap_or("grpc"), p.port);
        self.push(Finding {
            rule: RuleId::Client002,
            severity: Severity::Warning,
            object: svc.obj.clone(),
            service: Some(svc.key.clone()),
            caveats: Vec::new(),
            message: format!(
                "gRPC port {port_text} on a headless Service: clients balancing with dns:/// + round_robin keep the IPs they resolved and re-resolve only after a connection fails (at most every 30 s in grpc-go): removed pods are dialed until their connections break, new pods get no traffic until then"
            ),
            fix: "server keepalive MaxConnectionAge (e.g. 30s) so clients reconnect and re-resolve; on SIGTERM, GracefulStop after a preStop sleep covering the DNS budget; or balance through a proxy (ClusterIP + L7 mesh)".to_string(),
            figures: BTreeMap::new(),
        });
    }

    /// GIP-CLIENT-001, once per caller and kind of cache.
    pub(super) fn forever_caches(&mut self, svc: &ServiceInfo, w: &Workload, cache: &ClientCache) {
        for (entry, what) in [
            (&cache.positive, "answers"),
            (&cache.negative, "failed lookups"),
        ] {
            let Some((t, src)) = entry else { continue };
            if *t >= 0 {
                continue;
            }
            let already = self.findings.iter().any(|f| {
                f.rule == RuleId::Client001 && f.object == w.obj && f.message.contains(what)
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
                rule: RuleId::Client001,
                severity: Severity::Error,
                object: w.obj.clone(),
                service: Some(svc.key.clone()),
                caveats: Vec::new(),
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
    fn cache_lengths_order_forever_last() {
        assert!(longer(-1, 30));
        assert!(!longer(30, -1));
        assert!(longer(31, 30));
        assert!(!longer(-1, -1));
    }
}
