//! `ghostip check`: one-shot comparison of each headless Service's answers on each DNS path with the truth now.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use ghostip_core::engine::{Discrepancy, Engine};
use ghostip_core::{ChangeTime, HeldTarget, Layer, Observation, ObservationResult, Target, Time};
use serde::Serialize;

use super::{Outcome, kube_connect, print_json};
use crate::cli::{CheckArgs, GlobalArgs, OutputFormat};
use crate::clock::SystemClock;
use crate::dns::budget::Budget;
use crate::dns::names::{NameConfig, service_names};
use crate::dns::paths::{PathConfig, discover};
use crate::dns::query::{QueryConfig, QueryType, query};
use crate::kube::{WatchScope, snapshot};
use crate::printer::{Layout, Table, fit_text};
use ghostip_session::ServiceFilter;

/// One (service, path) comparison.
#[derive(Debug, Serialize)]
struct Row {
    service: String,
    path: String,
    state: &'static str,
    expected: Vec<String>,
    answered: Vec<String>,
    stale: Vec<String>,
    missing: Vec<String>,
    min_ttl: Option<u32>,
    error: Option<String>,
}

pub(super) async fn run(g: &GlobalArgs, args: CheckArgs) -> anyhow::Result<Outcome> {
    let conn = kube_connect(g).await?;
    // The DNS paths live in kube-system, so the truth is listed cluster-wide and filtered after.
    let scope = WatchScope {
        namespace: None,
        ..WatchScope::default()
    };
    let snap = snapshot(&conn, &scope, args.request_timeout, &SystemClock)
        .await
        .context("reading the truth")?;
    let at = snap.at;
    let filter = ServiceFilter {
        namespace: args.scope.namespace.clone(),
        only: None,
        selector: args
            .scope
            .selector
            .as_deref()
            .map(ServiceFilter::parse_selector)
            .unwrap_or_default(),
    };
    let path_cfg = PathConfig {
        pods: !args.dns.no_pod_paths,
        cluster_ip: !args.dns.no_cluster_ip,
        node_local: args.dns.node_local,
        overrides: args.dns.dns_servers.clone(),
        ..PathConfig::default()
    };
    let paths = discover(&snap.truth, &path_cfg);
    let names_cfg = NameConfig {
        zone: args.dns.zone.clone(),
        ..NameConfig::default()
    };
    let services: Vec<_> = snap
        .truth
        .services()
        .filter(|s| s.headless && s.has_selector)
        .map(|s| s.key.clone())
        .filter(|k| filter_matches(&filter, &snap.truth, k))
        .collect();

    // The same engine as watch and rollout: the truth now is the baseline, every path is
    // observed once, and whatever does not match opens a tracking.
    let mut engine = Engine::new(ghostip_core::engine::EngineConfig::default());
    let idx: Vec<_> = paths
        .iter()
        .map(|p| engine.add_path(p.info.clone(), Duration::from_secs(5)))
        .collect();
    for key in &services {
        let set = snap
            .truth
            .dns_answers(key)
            .into_iter()
            .filter(std::net::IpAddr::is_ipv4)
            .map(Target::ip)
            .collect();
        engine.set_desired(Layer::Dns, key, set, ChangeTime::received_at(at));
    }
    engine.truth_synced(at);

    let qcfg = QueryConfig {
        timeout: args.dns.query_timeout,
        ..QueryConfig::default()
    };
    let qps = std::num::NonZeroU32::new(args.dns.qps).context("--qps must be at least 1")?;
    let budget = Budget::per_second(qps);
    let mut rows = Vec::new();
    for key in &services {
        let names = service_names(&snap.truth, key, &names_cfg)
            .with_context(|| format!("building DNS names of {key}"))?;
        let Some(name) = names.iter().find(|n| n.qtype == QueryType::A) else {
            continue;
        };
        let expected: Vec<String> = snap
            .truth
            .dns_answers(key)
            .iter()
            .filter(|i| i.is_ipv4())
            .map(|i| i.to_string())
            .collect();
        for (path, pidx) in paths.iter().zip(&idx) {
            budget.acquire().await;
            let started = std::time::Instant::now();
            let result = query(path.server, &name.name, name.qtype, &qcfg).await;
            let now = Time::now();
            let (obs_result, answered, min_ttl, error) = match result {
                Ok(ans) => {
                    let held: Vec<HeldTarget> = ans.held();
                    let answered = held.iter().map(|h| h.target.ip.to_string()).collect();
                    let min_ttl = held.iter().filter_map(|h| h.ttl).min();
                    (ObservationResult::Held(held), answered, min_ttl, None)
                }
                Err(e) => {
                    let reason = e.reason;
                    (
                        ObservationResult::Failed(reason.clone()),
                        Vec::new(),
                        None,
                        Some(reason.to_string()),
                    )
                }
            };
            let obs = Observation {
                path: *pidx,
                service: key.clone(),
                at: now,
                result: obs_result,
                latency: Some(started.elapsed()),
            };
            engine.observe(&obs);
            let open: Vec<_> = engine
                .open_trackings()
                .filter(|t| t.path == *pidx && &t.service == key)
                .collect();
            let stale: Vec<String> = open
                .iter()
                .filter(|t| t.kind == Discrepancy::Stale)
                .map(|t| t.target.to_string())
                .collect();
            let missing: Vec<String> = open
                .iter()
                .filter(|t| t.kind == Discrepancy::Missing)
                .map(|t| t.target.to_string())
                .collect();
            let state = match (&error, stale.is_empty(), missing.is_empty()) {
                (Some(_), _, _) => "failed",
                (None, true, true) => "ok",
                (None, false, _) => "stale",
                (None, true, false) => "missing",
            };
            rows.push(Row {
                service: key.to_string(),
                path: path.info.description.clone(),
                state,
                expected: expected.clone(),
                answered,
                stale,
                missing,
                min_ttl,
                error,
            });
        }
    }
    let bad = rows
        .iter()
        .filter(|r| matches!(r.state, "stale" | "missing"))
        .count();
    let failed = rows.iter().filter(|r| r.state == "failed").count();
    match g.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "at": at,
            "paths": paths.iter().map(|p| &p.info).collect::<Vec<_>>(),
            "results": rows,
            "stale_or_missing": bad,
            "failed": failed,
        }))?,
        OutputFormat::Table | OutputFormat::Wide => print!(
            "{}",
            render(&rows, paths.len(), services.len(), &g.output.layout())
        ),
        OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
    }
    Ok(if bad > 0 {
        Outcome::Finding
    } else {
        Outcome::Clean
    })
}

fn filter_matches(
    f: &ServiceFilter,
    truth: &ghostip_core::truth::Truth,
    key: &ghostip_core::ServiceKey,
) -> bool {
    if f.namespace.as_ref().is_some_and(|ns| ns != &key.namespace) {
        return false;
    }
    let Some(svc) = truth.service(key) else {
        return false;
    };
    f.selector.iter().all(|(k, v, neg)| {
        let hit = match v {
            Some(v) => svc.labels.get(k) == Some(v),
            None => svc.labels.contains_key(k),
        };
        hit != *neg
    })
}

fn render(rows: &[Row], paths: usize, services: usize, layout: &Layout) -> String {
    let mut out = String::new();
    let mut t = Table::new();
    t.set_header(vec![
        "SERVICE", "PATH", "STATE", "STALE", "MISSING", "TTL", "DETAIL",
    ]);
    let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *by_state.entry(r.state).or_default() += 1;
        t.add_row(vec![
            r.service.clone(),
            r.path.clone(),
            r.state.to_uppercase(),
            r.stale.join(" "),
            r.missing.join(" "),
            r.min_ttl.map_or("-".into(), |t| format!("{t}s")),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&t.render(layout));
    let counts: Vec<String> = by_state.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(
        out,
        "{services} headless services × {paths} DNS paths: {}",
        if counts.is_empty() {
            "nothing to check".into()
        } else {
            counts.join(", ")
        }
    );
    fit_text(&out, layout)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn rows() -> Vec<Row> {
        let ips = |n: usize| (0..n).map(|i| format!("10.244.3.{}", 10 + i)).collect();
        vec![
            Row {
                service: "shop/web-headless".into(),
                path: "dns via 10.244.1.5 (kube-system/coredns-7db6d8ff4d-krb2q)".into(),
                state: "stale",
                expected: ips(2),
                answered: ips(6),
                stale: ips(4),
                missing: Vec::new(),
                min_ttl: Some(30),
                error: None,
            },
            Row {
                service: "shop/web-headless".into(),
                path: "dns via ClusterIP 10.96.0.10 from node-2".into(),
                state: "failed",
                expected: ips(2),
                answered: Vec::new(),
                stale: Vec::new(),
                missing: Vec::new(),
                min_ttl: None,
                error: Some("no answer within 2s from 10.96.0.10:53 (3 attempts)".into()),
            },
        ]
    }

    #[test]
    fn the_table_fits_the_width_and_wide_keeps_it_whole() {
        for w in [80, 30] {
            let out = render(&rows(), 2, 1, &Layout::fixed(w));
            let longest = out.lines().map(|l| l.chars().count()).max().unwrap();
            assert!(longest <= w, "{w}:\n{out}");
            assert!(out.contains("10.244.3.13"), "{w}:\n{out}");
        }
        let out = render(&rows(), 2, 1, &Layout::WIDE);
        assert!(
            out.contains("no answer within 2s from 10.96.0.10:53 (3 attempts)"),
            "{out}"
        );
        assert!(
            out.contains("10.244.3.10 10.244.3.11 10.244.3.12 10.244.3.13"),
            "{out}"
        );
    }
}
