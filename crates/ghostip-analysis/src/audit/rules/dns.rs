//! GIP-DNS-*: the DNS layers read from Corefiles, `serve_stale`, and each headless Service's
//! budget against what its pods' preStop covers.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ghostip_core::corefile::{AnswerSource, Corefile, CorefileError, ExpectedLag};

use super::budget::{
    DnsChain, Layer, SHUTDOWN_MARGIN, SMALL_DNS_LAG, cover_s, describe, dns_lag_after_fix, large,
    secs_i64,
};
use super::client::CallerCache;
use super::term::{PreStop, grace, pod_prestop};
use super::{Ctx, DnsLayer, Finding, RuleId, Severity};
use crate::audit::inventory::{InputProblem, Inventory, ObjectRef, ServiceInfo, Workload};

/// The DNS layers of the inventory's Corefiles: the cluster DNS that lags most, and the node
/// cache in front of it that lags most. A forwarding Corefile that does not send the zone to
/// the cluster DNS is left out of the chain and named.
pub(super) fn dns_chain(inv: &Inventory, zone: &str, problems: &mut Vec<InputProblem>) -> DnsChain {
    let mut not_counted = Vec::new();
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
        let caveat = match fronts_cluster_dns(&parsed, zone) {
            Ok(c) => c,
            Err(why) => {
                not_counted.push((obj, why));
                continue;
            }
        };
        let mut lag = match parsed.expected_lag_behind(zone, cluster.as_ref().map(|c| &c.lag)) {
            Ok(l) => l,
            Err(e) => {
                problems.push(corefile_problem(&obj, &e));
                continue;
            }
        };
        if let Some(c) = caveat {
            lag.notes.push(c.clone());
            lag.caveats.push(c);
        }
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
        not_counted,
    }
}

/// Whether a forwarding Corefile is a cache in front of the cluster DNS for `zone`: it gives
/// the zone a server block of its own (NodeLocal DNSCache, AKS LocalDNS), or its root zone
/// forwards to a cluster DNS placeholder or a private address (with a caveat). `Err` says
/// where it sends the zone instead.
fn fronts_cluster_dns(parsed: &Corefile, zone: &str) -> Result<Option<String>, String> {
    let listeners = parsed
        .expected_lags(zone, None)
        .map_err(|e| e.to_string())?;
    let mut root_targets: Vec<String> = Vec::new();
    for l in &listeners {
        let AnswerSource::Forward { to } = &l.lag.source else {
            continue;
        };
        if l.zone != "." {
            return Ok(None);
        }
        if to.iter().any(|t| cluster_dns_target(t)) {
            return Ok(Some(format!(
                "its root zone forwards {zone} to {}, taken as the cluster DNS",
                to.join(" ")
            )));
        }
        root_targets.extend(to.iter().cloned());
    }
    Err(format!(
        "its root zone forwards {zone} to {}, not to a cluster DNS address",
        if root_targets.is_empty() {
            "nothing".to_string()
        } else {
            root_targets.join(" ")
        }
    ))
}

/// A forward target that can be the cluster DNS: a placeholder named for it
/// (`__PILLAR__CLUSTER__DNS__`), or a private, link-local or unique-local address (a Service
/// IP), unlike public resolvers, host names and `/etc/resolv.conf`.
fn cluster_dns_target(target: &str) -> bool {
    let upper = target.to_ascii_uppercase().replace('_', "");
    if upper.contains("CLUSTERDNS") || upper.contains("KUBEDNS") {
        return true;
    }
    let t = target.strip_prefix("dns://").unwrap_or(target);
    let host = match t.parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => t
            .rsplit_once(':')
            .and_then(|(h, _)| h.trim_matches(['[', ']']).parse::<IpAddr>().ok()),
    };
    match host {
        Some(IpAddr::V4(ip)) => ip.is_private() || ip.is_link_local(),
        Some(IpAddr::V6(ip)) => ip.is_unique_local() || ip.is_unicast_link_local(),
        None => false,
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
        caveats: lag.caveats.clone(),
    }
}

/// GIP-DNS-003 for every layer, and GIP-DNS-002 where it serves stale answers.
pub(super) fn corefile_findings(chain: &DnsChain, zone: &str, out: &mut Vec<Finding>) {
    for layer in [&chain.cluster, &chain.node_cache].into_iter().flatten() {
        let i = &layer.info;
        let what = if i.role == "node-cache" {
            "NodeLocal DNSCache"
        } else {
            "cluster DNS"
        };
        out.push(Finding {
            rule: RuleId::Dns003,
            severity: Severity::Note,
            object: i.object.clone(),
            service: None,
            caveats: i.caveats.clone(),
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
                rule: RuleId::Dns002,
                severity: if verify { Severity::Note } else { Severity::Warning },
                object: i.object.clone(),
                service: None,
                caveats: Vec::new(),
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
    for (obj, why) in &chain.not_counted {
        out.push(Finding {
            rule: RuleId::Dns003,
            severity: Severity::Note,
            object: obj.clone(),
            service: None,
            caveats: Vec::new(),
            message: format!(
                "a forwarding server, not counted in any budget: {why}"
            ),
            fix: format!(
                "none if it does not sit in front of the cluster DNS; if it does, give {zone} a server block of its own forwarding to the cluster DNS Service IP"
            ),
            figures: BTreeMap::new(),
        });
    }
}

impl Ctx<'_> {
    /// GIP-DNS-001: the budget a workload's preStop does not cover.
    pub(super) fn budget_finding(
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
        let cover = cover_s(prestop, grace, svc.publish_not_ready);
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

        // The Corefile change that bounds the DNS lag, and the budget left after it.
        let mut dns_fix = None;
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
            dns_fix = Some(f);
            dns_after = dns_lag_after_fix(*lag, *layers);
        }
        let target = secs_i64(dns_after) + client.positive.as_ref().map_or(0, |(t, _)| (*t).max(0));
        let mut fixes = Vec::new();
        if large(budget, grace) && !svc.publish_not_ready {
            // drain-wait first: it waits only as long as the layers hold the IP; a sleep
            // covering the worst case is waited in full at every rollout step.
            let need = budget + SHUTDOWN_MARGIN;
            let grace_text = if grace >= need {
                format!("terminationGracePeriodSeconds {grace} s already leaves it {budget} s")
            } else {
                format!("terminationGracePeriodSeconds ≥ {need} s")
            };
            fixes.push(format!(
                "preStop exec `ghostip drain-wait` with {grace_text}: it returns once DNS, the node datapaths and the client TTL have let go of the pod IP (at most --max-wait, by default the grace period − {SHUTDOWN_MARGIN} s)"
            ));
            fixes.push(format!(
                "or a fixed preStop sleep ≥ {budget} s with terminationGracePeriodSeconds ≥ {need} s, waited in full by every pod at each rollout step"
            ));
            if let Some(f) = dns_fix {
                let mut text = format!("{f} lowers the budget to {target} s");
                if !large(target, grace) {
                    text.push_str(&format!(", which a preStop sleep ≥ {target} s covers"));
                    if grace < target + SHUTDOWN_MARGIN {
                        text.push_str(&format!(
                            " with terminationGracePeriodSeconds ≥ {} s",
                            target + SHUTDOWN_MARGIN
                        ));
                    }
                }
                fixes.push(text);
            }
        } else {
            fixes.extend(dns_fix);
            if svc.publish_not_ready {
                fixes.push("publishNotReadyAddresses: false".to_string());
            }
            if target > cover {
                fixes.push(format!("preStop sleep ≥ {target} s"));
            }
            if grace < target + SHUTDOWN_MARGIN {
                fixes.push(format!(
                    "terminationGracePeriodSeconds ≥ {} s",
                    target + SHUTDOWN_MARGIN
                ));
            }
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
            rule: RuleId::Dns001,
            severity: if matches!(prestop, PreStop::Unknown(_)) && !svc.publish_not_ready {
                Severity::Note
            } else {
                Severity::Warning
            },
            object: w.obj.clone(),
            service: Some(svc.key.clone()),
            caveats: Vec::new(),
            message: msg,
            fix: fixes.join("; "),
            figures,
        });
    }
}
