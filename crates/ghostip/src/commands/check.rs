//! `ghostip check`: one-shot judgment of every path it can reach against the truth now: each headless Service's answers on each DNS path, each DNS path's own answer for the DNS Service, and each node's datapath and DNS health as the node agents judge them.
//!
//! Each headless Service is asked every question the DNS layer asks (A; AAAA with IPv6
//! endpoints; SRV of each named port unless `--no-srv`), and each answer is judged for the
//! targets it speaks for ([`answer_scope`]): A against the IPv4 endpoints, AAAA against the
//! IPv6 ones, SRV against the named port's `ip:port`.
//!
//! A path that fails to answer is a finding like a stale one (exit 1): from where `check`
//! runs, clients of that path fail too. The agents (`ghostip agent`, one per node) are found
//! as pods and asked for their `/status`; their open trackings over the expected lag (or
//! stuck) and a node whose kube-dns ClusterIP fails while the CoreDNS pods answer are
//! findings, named with the node, Service, backend, former pod and since when. An agent that
//! does not answer is a finding too (that node was not checked); agents that are not
//! deployed, or that the caller may not list, are a note.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use ghostip_core::engine::Discrepancy;
use ghostip_core::{Observation, ObservationResult, PathIdx, ServiceKey, Target, Time};
use ghostip_session::layers::components::COMPONENTS;
use ghostip_session::layers::dns::{DNS, DnsModel};
use ghostip_session::{Session, SyncState};
use serde::Serialize;

use super::{
    Outcome, dns_config, kube_connect, new_session, print_json, service_filter, session_config,
};
use crate::agent_client::{self, Agent, AgentClient, AgentSelector, AgentStatus};
use crate::cli::{AgentsArgs, CheckArgs, GlobalArgs, OutputFormat};
use crate::clock::SystemClock;
use crate::kube::{Connection, WatchScope, snapshot};
use crate::layers::dns::budget::Budget;
use crate::layers::dns::query::{QueryConfig, query};
use crate::printer::{Column, Layout, Table, fit_text};
use ghostip_session::ServiceFilter;
use ghostip_session::layers::dns::answer_scope;
use ghostip_session::layers::dns::names::{NameConfig, ProbeName, service_a_name, service_names};
use ghostip_session::layers::dns::paths::DnsPath;

/// One (service, question, path) comparison.
#[derive(Clone, Debug, Serialize)]
struct Row {
    service: String,
    /// The question asked: `A`, `AAAA`, or `SRV _port._proto` of a named port.
    query: String,
    path: String,
    state: &'static str,
    expected: Vec<String>,
    answered: Vec<String>,
    stale: Vec<String>,
    missing: Vec<String>,
    min_ttl: Option<u32>,
    error: Option<String>,
}

impl Row {
    /// Stale, missing, wrong or no answer: clients of this path get a wrong one.
    fn is_finding(&self) -> bool {
        self.state != "ok"
    }
}

/// One node agent: how it answered.
#[derive(Debug, Serialize)]
struct AgentRow {
    node: String,
    addr: String,
    /// `ok`, `findings`, `unsynced` (its truth is not synced: nothing judged) or `failed`.
    state: &'static str,
    datapath: Option<String>,
    datapath_error: Option<String>,
    dns: Option<String>,
    error: Option<String>,
}

/// A finding of a node agent: one stale or missing backend of its datapath (or DNS path)
/// past its expected lag, or its node's DNS through the ClusterIP failing.
#[derive(Debug, Serialize)]
struct NodeFinding {
    node: String,
    path: String,
    layer: String,
    service: String,
    target: Option<String>,
    kind: String,
    verdict: String,
    former_pod: Option<String>,
    since: Option<Time>,
    last_seen: Option<Time>,
    detail: Option<String>,
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
    let filter = service_filter(&args.scope);
    // The same session as watch, rollout and the agent, run once: every registered layer's
    // model takes the lists as a first sync; the DNS layer's paths and answers follow.
    let dns_cfg = dns_config(&args.dns);
    let kinds = scope.kinds();
    let mut session = new_session(
        session_config(filter.clone(), false),
        SyncState::new(at, kinds.clone()),
        &dns_cfg,
        None,
    );
    for r in snap.events(&kinds) {
        session.on_truth(&r);
    }
    let path_cfg = &dns_cfg.paths;
    let names_cfg = &dns_cfg.names;
    let paths: Vec<DnsPath> = session
        .layer::<DnsModel>()
        .map(|d| d.dns_paths().to_vec())
        .unwrap_or_default();
    let services: Vec<_> = session
        .truth()
        .services()
        .filter(|s| s.headless && s.has_selector)
        .map(|s| s.key.clone())
        .filter(|k| filter_matches(&filter, session.truth(), k))
        .collect();

    // Ask the agents while the DNS paths are probed.
    let agents = (!args.agents.no_agents).then(|| {
        let conn = conn.clone();
        let a = args.agents.clone();
        tokio::spawn(async move { ask_agents(&conn, &a).await })
    });

    let qcfg = QueryConfig {
        timeout: args.dns.query_timeout,
        ..QueryConfig::default()
    };
    let qps = std::num::NonZeroU32::new(args.dns.qps).context("--qps must be at least 1")?;
    let prober = Prober {
        budget: Budget::per_second(qps),
        config: qcfg,
    };
    let mut rows = dns_rows(&mut session, &paths, &services, names_cfg, &prober).await?;
    rows.extend(
        dns_service_rows(
            session.truth(),
            &paths,
            &path_cfg.dns_service,
            names_cfg,
            &prober,
        )
        .await?,
    );

    let mut notes = Vec::new();
    let (agent_rows, node_findings) = match agents {
        None => (Vec::new(), Vec::new()),
        Some(task) => match task.await {
            Ok(Ok(asked)) => judge_agents(asked, &filter, session.truth()),
            Ok(Err(e)) => {
                notes.push(format!(
                    "node datapaths not checked: {e:#} (deploy `ghostip agent`, or pass --no-agents)"
                ));
                (Vec::new(), Vec::new())
            }
            Err(e) => anyhow::bail!("asking the node agents: {e}"),
        },
    };
    if !args.agents.no_agents && agent_rows.is_empty() && notes.is_empty() {
        notes.push(format!(
            "no node agent runs ({} in {}): node datapaths not checked",
            args.agents.agents_selector, args.agents.agents_namespace
        ));
    }
    if !rows.is_empty() && rows.iter().all(|r| r.state == "failed") {
        notes.push(
            "no DNS path answered from here: run check where pod IPs and the ClusterIP are reachable (a node or a pod), or pass --no-pod-paths/--no-cluster-ip".into(),
        );
    }

    let failed = rows.iter().filter(|r| r.state == "failed").count();
    let findings = count_findings(&rows, &agent_rows, &node_findings);
    match g.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "at": at,
            "paths": paths.iter().map(|p| &p.info).collect::<Vec<_>>(),
            "results": rows,
            "stale_or_missing": rows.iter().filter(|r| matches!(r.state, "stale" | "missing")).count(),
            "failed": failed,
            "agents": agent_rows,
            "node_findings": node_findings,
            "notes": notes,
            "findings": findings,
        }))?,
        OutputFormat::Table | OutputFormat::Wide => crate::printer::print_text(&render(
            &rows,
            &agent_rows,
            &node_findings,
            &notes,
            paths.len(),
            services.len(),
            &g.output.layout(),
        )),
        OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
    }
    Ok(if findings > 0 {
        Outcome::Finding
    } else {
        Outcome::Clean
    })
}

/// Single DNS queries within the global budget.
struct Prober {
    budget: Budget,
    config: QueryConfig,
}

impl Prober {
    /// One query: what the path held, or why it failed, with its latency.
    async fn ask(&self, path: &DnsPath, name: &ProbeName) -> (ObservationResult, Time, Duration) {
        self.budget.acquire().await;
        let started = crate::clock::monotonic_now();
        let result = query(path.server, &name.name, name.qtype, &self.config).await;
        let now = crate::clock::wall_now();
        let result = match result {
            Ok(ans) => ObservationResult::Held(ans.held()),
            Err(e) => ObservationResult::Failed(e.reason),
        };
        (result, now, started.elapsed())
    }
}

/// What an observation says for a row: answered targets (IPs; `ip:port` of an SRV answer),
/// smallest TTL, error.
fn answer(result: &ObservationResult) -> (Vec<String>, Option<u32>, Option<String>) {
    match result {
        ObservationResult::Held(held) => (
            held.iter().map(|h| h.target.to_string()).collect(),
            held.iter().filter_map(|h| h.ttl).min(),
            None,
        ),
        ObservationResult::Failed(reason) => (Vec::new(), None, Some(reason.to_string())),
    }
}

/// A row's state: `failed` (no answer), `stale`, `missing` or `ok`.
fn row_state(error: Option<&str>, stale: &[String], missing: &[String]) -> &'static str {
    match (error, stale.is_empty(), missing.is_empty()) {
        (Some(_), _, _) => "failed",
        (None, true, true) => "ok",
        (None, false, _) => "stale",
        (None, true, false) => "missing",
    }
}

/// Each headless Service's answers on each path, judged by the session's engine with the
/// DNS layer's desired answers and scopes, as watch and rollout judge them: the truth now is
/// the baseline, every question of the Service (A; AAAA with IPv6 endpoints; SRV of each
/// named port unless `--no-srv`) is asked once on every path, each answer is judged for the
/// targets it speaks for, and whatever does not match opens a tracking.
async fn dns_rows(
    session: &mut Session,
    paths: &[DnsPath],
    services: &[ServiceKey],
    names_cfg: &NameConfig,
    prober: &Prober,
) -> anyhow::Result<Vec<Row>> {
    let idx: Vec<Option<PathIdx>> = paths
        .iter()
        .map(|p| {
            session
                .engine()
                .paths()
                .find(|(_, info)| info.id == p.id())
                .map(|(i, _)| i)
        })
        .collect();
    let mut rows = Vec::new();
    for key in services {
        let names = service_names(session.truth(), key, names_cfg)
            .with_context(|| format!("building DNS names of {key}"))?;
        let desired: Vec<Target> = session
            .engine()
            .desired(DNS, key)
            .map(|d| d.iter().collect())
            .unwrap_or_default();
        for name in &names {
            let Some(scope) = answer_scope(session.truth(), key, name, names_cfg) else {
                continue;
            };
            let expected: Vec<String> = desired
                .iter()
                .filter(|t| scope.contains(t))
                .map(ToString::to_string)
                .collect();
            for (path, pidx) in paths.iter().zip(&idx) {
                let Some(pidx) = *pidx else { continue };
                let (result, now, latency) = prober.ask(path, name).await;
                let (answered, min_ttl, error) = answer(&result);
                session.observe_scoped(
                    &Observation {
                        path: pidx,
                        service: key.clone(),
                        at: now,
                        result,
                        latency: Some(latency),
                    },
                    &scope,
                );
                let open: Vec<_> = session
                    .engine()
                    .open_trackings()
                    .filter(|t| t.path == pidx && &t.service == key && scope.contains(&t.target))
                    .collect();
                let of_kind = |kind| -> Vec<String> {
                    open.iter()
                        .filter(|t| t.kind == kind)
                        .map(|t| t.target.to_string())
                        .collect()
                };
                let stale = of_kind(Discrepancy::Stale);
                let missing = of_kind(Discrepancy::Missing);
                let state = row_state(error.as_deref(), &stale, &missing);
                rows.push(Row {
                    service: key.to_string(),
                    query: question(name),
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
    }
    Ok(rows)
}

/// A question as a row names it: `A`, `AAAA`, or `SRV _http._tcp` (the SRV name's port and
/// protocol labels).
fn question(name: &ProbeName) -> String {
    match name.srv_port() {
        Some((port, proto)) => format!("SRV _{port}._{proto}"),
        None => name.qtype.as_str().to_string(),
    }
}

/// Each path's answer for the DNS Service's own name (its ClusterIP): a path is judged even
/// when no headless Service exists, and one that does not answer is a finding.
async fn dns_service_rows(
    truth: &ghostip_core::truth::Truth,
    paths: &[DnsPath],
    dns_service: &ServiceKey,
    names_cfg: &NameConfig,
    prober: &Prober,
) -> anyhow::Result<Vec<Row>> {
    let name = &service_a_name(dns_service, names_cfg)
        .with_context(|| format!("building the DNS name of {dns_service}"))?;
    // Its A answer is its ClusterIP; without the Service in the truth, any answer will do.
    let expected: Option<Vec<String>> = truth.service(dns_service).map(|s| {
        s.cluster_ips
            .iter()
            .filter(|i| i.is_ipv4())
            .map(ToString::to_string)
            .collect()
    });
    let mut rows = Vec::new();
    for path in paths {
        let (result, _, _) = prober.ask(path, name).await;
        let (mut answered, min_ttl, error) = answer(&result);
        answered.sort();
        let (stale, missing) = match &expected {
            Some(want) if error.is_none() => (
                answered
                    .iter()
                    .filter(|a| !want.contains(a))
                    .cloned()
                    .collect(),
                want.iter()
                    .filter(|w| !answered.contains(w))
                    .cloned()
                    .collect(),
            ),
            _ => (Vec::new(), Vec::new()),
        };
        let state = row_state(error.as_deref(), &stale, &missing);
        rows.push(Row {
            service: dns_service.to_string(),
            query: question(name),
            path: path.info.description.clone(),
            state,
            expected: expected.clone().unwrap_or_default(),
            answered,
            stale,
            missing,
            min_ttl,
            error,
        });
    }
    Ok(rows)
}

/// Every running agent's `/status`, or why the agents could not be listed.
async fn ask_agents(
    conn: &Connection,
    a: &AgentsArgs,
) -> anyhow::Result<Vec<(Agent, Result<AgentStatus, String>)>> {
    let sel = AgentSelector {
        namespace: a.agents_namespace.clone(),
        selector: a.agents_selector.clone(),
        port: a.agents_port,
    };
    let found = agent_client::find(&conn.client, &sel, a.agent_timeout).await?;
    let client = AgentClient::new(conn.bearer.clone(), a.agent_timeout);
    let answers = futures::future::join_all(found.iter().map(|agent| client.status(agent))).await;
    Ok(found.into_iter().zip(answers).collect())
}

/// The agents' answers as rows and findings. Open trackings of Services outside the
/// filter are left out; a node's DNS health concerns every Service and is always kept.
fn judge_agents(
    asked: Vec<(Agent, Result<AgentStatus, String>)>,
    filter: &ServiceFilter,
    truth: &ghostip_core::truth::Truth,
) -> (Vec<AgentRow>, Vec<NodeFinding>) {
    let mut rows = Vec::new();
    let mut findings = Vec::new();
    for (agent, answer) in asked {
        let st = match answer {
            Ok(st) => st,
            Err(e) => {
                rows.push(AgentRow {
                    node: agent.node,
                    addr: agent.addr.to_string(),
                    state: "failed",
                    datapath: None,
                    datapath_error: None,
                    dns: None,
                    error: Some(e),
                });
                continue;
            }
        };
        let before = findings.len();
        for t in st.open.iter().filter(|t| t.is_finding()) {
            let in_scope = t
                .service
                .split_once('/')
                .is_none_or(|(ns, n)| filter_matches(filter, truth, &ServiceKey::new(ns, n)));
            if !in_scope {
                continue;
            }
            findings.push(NodeFinding {
                node: agent.node.clone(),
                path: t.path.clone(),
                layer: t.layer.clone(),
                service: t.service.clone(),
                target: Some(t.target.clone()),
                kind: t.kind.clone(),
                verdict: t.verdict.clone(),
                former_pod: t.former_pod.clone(),
                since: t.since,
                last_seen: t.last_seen,
                detail: t.expected_lag_s.map(|l| format!("expected lag {l:.0}s")),
            });
        }
        if let Some(dns) = st.dns.as_ref().filter(|d| d.state == "cluster-ip-failing") {
            findings.push(NodeFinding {
                node: agent.node.clone(),
                path: dns.path.clone().unwrap_or_default(),
                layer: DNS.to_string(),
                service: "kube-system/kube-dns".into(),
                target: None,
                kind: "dns-health".into(),
                verdict: "cluster-ip-failing".into(),
                former_pod: None,
                since: None,
                last_seen: None,
                detail: Some(format!(
                    "the ClusterIP failed {} of {} probes while {} CoreDNS pods answered",
                    dns.failures.unwrap_or(0),
                    dns.probes.unwrap_or(0),
                    dns.pods_answering.unwrap_or(0)
                )),
            });
        }
        for c in &st.stalled_components {
            findings.push(NodeFinding {
                node: agent.node.clone(),
                path: format!("{}/{}", c.component, agent.node),
                layer: COMPONENTS.to_string(),
                service: match c.missed_services.as_slice() {
                    [] => "-".into(),
                    [one] => one.clone(),
                    [first, ..] => format!("{first} (+{})", c.missed_changes.saturating_sub(1)),
                },
                target: None,
                kind: "component-stalled".into(),
                verdict: "component-stalled".into(),
                former_pod: None,
                since: c.last_sync,
                last_seen: None,
                detail: Some(format!(
                    "{} stalled ({}): last sync {}, {} Service change{} since, the oldest waited {:.0}s (allowed {:.0}s): {}",
                    c.component,
                    c.evidence,
                    c.last_sync.map_or_else(|| "-".into(), |t| t.to_string()),
                    c.missed_changes,
                    if c.missed_changes == 1 { "" } else { "s" },
                    c.waited_s,
                    c.allowed_s,
                    c.missed_services.join(", ")
                )),
            });
        }
        let state = if !st.truth_synced {
            "unsynced"
        } else if findings.len() > before {
            "findings"
        } else {
            "ok"
        };
        rows.push(AgentRow {
            node: agent.node,
            addr: agent.addr.to_string(),
            state,
            datapath: st.datapath,
            datapath_error: st.datapath_error,
            dns: st.dns.map(|d| d.state),
            error: None,
        });
    }
    (rows, findings)
}

/// What makes `check` exit 1: every DNS row that is not ok (stale, missing, or no answer),
/// every node finding, and every agent that did not answer (its node was not checked).
fn count_findings(rows: &[Row], agents: &[AgentRow], node_findings: &[NodeFinding]) -> usize {
    rows.iter().filter(|r| r.is_finding()).count()
        + node_findings.len()
        + agents.iter().filter(|a| a.state == "failed").count()
}

/// Whether `-n`/`-l` select the Service; one the truth does not know (an agent's view may
/// be ahead of the snapshot) is in scope unless a label selector is given.
fn filter_matches(
    f: &ServiceFilter,
    truth: &ghostip_core::truth::Truth,
    key: &ghostip_core::ServiceKey,
) -> bool {
    match truth.service(key) {
        Some(_) => f.matches(truth, key),
        None => f.namespace.as_ref().is_none_or(|ns| ns == &key.namespace) && f.selector.is_empty(),
    }
}

fn clock(t: Option<Time>) -> String {
    t.map_or_else(|| "-".into(), |t| t.strftime("%H:%M:%S%.3f").to_string())
}

fn render(
    rows: &[Row],
    agents: &[AgentRow],
    node_findings: &[NodeFinding],
    notes: &[String],
    paths: usize,
    services: usize,
    layout: &Layout,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}\n",
        check_verdict(rows, agents, node_findings, paths, services)
    );
    let mut t = Table::new();
    t.set_columns(vec![
        Column::name("SERVICE"),
        Column::name("QUERY"),
        Column::path("PATH"),
        Column::keep("STATE"),
        Column::wrap("STALE"),
        Column::wrap("MISSING"),
        Column::keep("TTL"),
        Column::wrap("DETAIL"),
    ]);
    let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *by_state.entry(r.state).or_default() += 1;
        // The answer first: the answers that were right are rows only with `-o wide`.
        if r.state == "ok" && !layout.wide {
            continue;
        }
        t.add_row(vec![
            r.service.clone(),
            r.query.clone(),
            r.path.clone(),
            r.state.to_uppercase(),
            r.stale.join(" "),
            r.missing.join(" "),
            r.min_ttl.map_or("-".into(), |t| format!("{t}s")),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    if !t.is_empty() {
        out.push_str(&t.render(layout));
    }
    let counts: Vec<String> = by_state.iter().map(|(k, v)| format!("{v} {k}")).collect();
    if layout.wide {
        let _ = writeln!(
            out,
            "{services} headless services and the DNS Service × {paths} DNS paths: {}",
            if counts.is_empty() {
                "no DNS path to check".into()
            } else {
                counts.join(", ")
            }
        );
    }
    if !agents.is_empty() {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::name("NODE"),
            Column::name("AGENT"),
            Column::keep("STATE"),
            Column::name("DATAPATH"),
            Column::name("DNS"),
            Column::wrap("DETAIL"),
        ]);
        for a in agents {
            t.add_row(vec![
                a.node.clone(),
                a.addr.clone(),
                a.state.to_uppercase(),
                a.datapath.clone().unwrap_or_else(|| "-".into()),
                a.dns.clone().unwrap_or_else(|| "-".into()),
                a.error
                    .clone()
                    .or_else(|| a.datapath_error.clone())
                    .unwrap_or_default(),
            ]);
        }
        let _ = write!(out, "\nNode agents\n{}", t.render(layout));
    }
    if !node_findings.is_empty() {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::name("NODE"),
            Column::path("PATH"),
            Column::name("SERVICE"),
            Column::addr("BACKEND"),
            Column::name("POD"),
            Column::keep("SINCE"),
            Column::keep("LAST SEEN"),
            Column::wrap("VERDICT"),
        ]);
        for f in node_findings {
            t.add_row(vec![
                f.node.clone(),
                f.path.clone(),
                f.service.clone(),
                f.target.clone().unwrap_or_else(|| "-".into()),
                f.former_pod.clone().unwrap_or_else(|| "-".into()),
                clock(f.since),
                clock(f.last_seen),
                match &f.detail {
                    Some(d) => format!("{} ({d})", f.verdict),
                    None => f.verdict.clone(),
                },
            ]);
        }
        let _ = write!(out, "\nNode findings\n{}", t.render(layout));
    }
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    fit_text(&out, layout)
}

/// `1 path`, `3 paths`.
fn n_of(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The answer first: one paragraph saying whether every DNS answer was current and every node
/// agent clean, naming what was not.
fn check_verdict(
    rows: &[Row],
    agents: &[AgentRow],
    node_findings: &[NodeFinding],
    paths: usize,
    services: usize,
) -> String {
    let mut parts = Vec::new();
    let count = |state: &str| rows.iter().filter(|r| r.state == state).count();
    let (stale, missing, failed) = (count("stale"), count("missing"), count("failed"));
    if rows.is_empty() {
        parts.push("No DNS path to check.".to_string());
    } else if stale + missing + failed == 0 {
        parts.push(format!(
            "Every DNS answer was current: {} from {} for {} and the DNS Service.",
            n_of(rows.len(), "answer"),
            n_of(paths, "path"),
            n_of(services, "headless Service"),
        ));
    } else {
        let names = |state: &str| {
            let mut by_service: BTreeMap<&str, usize> = BTreeMap::new();
            for r in rows.iter().filter(|r| r.state == state) {
                *by_service.entry(r.service.as_str()).or_default() += 1;
            }
            let mut v: Vec<String> = by_service
                .iter()
                .take(3)
                .map(|(s, n)| format!("{s} on {n} {}", if *n == 1 { "path" } else { "paths" }))
                .collect();
            if by_service.len() > 3 {
                v.push(format!("{} more Services", by_service.len() - 3));
            }
            v.join(", ")
        };
        let mut bad = Vec::new();
        if stale > 0 {
            bad.push(format!(
                "{stale} still held a removed endpoint ({})",
                names("stale")
            ));
        }
        if missing > 0 {
            bad.push(format!(
                "{missing} lacked a current endpoint ({})",
                names("missing")
            ));
        }
        if failed > 0 {
            bad.push(format!("{failed} did not answer ({})", names("failed")));
        }
        parts.push(format!(
            "Of {} DNS answers from {paths} paths, {}.",
            rows.len(),
            bad.join("; ")
        ));
    }
    if !agents.is_empty() {
        let failed = agents.iter().filter(|a| a.state == "failed").count();
        let unsynced = agents.iter().filter(|a| a.state == "unsynced").count();
        let mut nodes: Vec<&str> = node_findings.iter().map(|f| f.node.as_str()).collect();
        nodes.dedup();
        let mut s = if node_findings.is_empty() {
            format!(
                "{} node {} reported no stale datapath or DNS finding",
                agents.len() - failed - unsynced,
                if agents.len() - failed - unsynced == 1 {
                    "agent"
                } else {
                    "agents"
                }
            )
        } else {
            format!(
                "{} {} on {}",
                node_findings.len(),
                if node_findings.len() == 1 {
                    "node finding"
                } else {
                    "node findings"
                },
                nodes.join(", ")
            )
        };
        if failed > 0 {
            s.push_str(&format!(
                "; {failed} of {} agents did not answer",
                agents.len()
            ));
        }
        if unsynced > 0 {
            s.push_str(&format!("; {unsynced} not yet synced (nothing judged)"));
        }
        parts.push(format!("{s}."));
    }
    parts.join(" ")
}

#[cfg(test)]
mod render_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn rows() -> Vec<Row> {
        let ips = |n: usize| (0..n).map(|i| format!("10.244.3.{}", 10 + i)).collect();
        vec![
            Row {
                service: "shop/web-headless".into(),
                query: "A".into(),
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
                query: "A".into(),
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
    fn the_verdict_leads_and_only_wrong_answers_are_rows_without_wide() {
        let mut all = rows();
        let mut ok = all[0].clone();
        ok.state = "ok";
        ok.stale = Vec::new();
        ok.path = "dns via 10.244.2.9 (kube-system/coredns-7db6d8ff4d-zzzzz)".into();
        all.push(ok);
        let out = render(&all, &[], &[], &[], 3, 1, &Layout::fixed(200));
        let first = out.lines().next().unwrap();
        assert!(
            first.starts_with("Of 3 DNS answers from 3 paths, 1 still held a removed endpoint (shop/web-headless on 1 path); 1 did not answer"),
            "{out}"
        );
        assert!(!out.contains("10.244.2.9"), "{out}");
        let wide = render(&all, &[], &[], &[], 3, 1, &Layout::WIDE);
        assert!(wide.contains("10.244.2.9"), "{wide}");
        let clean = render(&all[2..], &[], &[], &[], 1, 1, &Layout::fixed(200));
        assert!(
            clean.starts_with(
                "Every DNS answer was current: 1 answer from 1 path for 1 headless Service"
            ),
            "{clean}"
        );
        assert!(!clean.contains("SERVICE"), "{clean}");
    }

    #[test]
    fn the_table_fits_the_width_and_wide_keeps_it_whole() {
        for w in [80, 30] {
            let out = render(&rows(), &[], &[], &[], 2, 1, &Layout::fixed(w));
            let longest = out.lines().map(|l| l.chars().count()).max().unwrap();
            assert!(longest <= w, "{w}:\n{out}");
            assert!(out.contains("10.244.3.13"), "{w}:\n{out}");
        }
        let out = render(&rows(), &[], &[], &[], 2, 1, &Layout::WIDE);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use ghostip_core::truth::Truth;

    fn agent(node: &str, n: u8) -> Agent {
        Agent {
            node: node.into(),
            addr: format!("10.200.0.{}:9754", 10 + n).parse().unwrap(),
        }
    }

    fn status(v: serde_json::Value) -> AgentStatus {
        serde_json::from_value(v).unwrap()
    }

    /// node-1 clean, node-2 with its kube-dns backend stale past the lag and DNS through the
    /// ClusterIP failing, node-3 refusing the token.
    fn asked() -> Vec<(Agent, Result<AgentStatus, String>)> {
        vec![
            (
                agent("node-1", 1),
                Ok(status(serde_json::json!({
                    "node": "node-1", "datapath": "iptables", "truth_synced": true,
                    "open": [{"path": "iptables/node-1", "layer": "datapath",
                              "service": "kube-system/kube-dns", "target": "10.244.1.3:53",
                              "kind": "stale", "verdict": "pending",
                              "since": "2026-03-19T08:00:00Z", "expected_lag_s": 2.0}],
                    "dns": {"state": "healthy"}
                }))),
            ),
            (
                agent("node-2", 2),
                Ok(status(serde_json::json!({
                    "node": "node-2", "datapath": "iptables", "truth_synced": true,
                    "open": [{"path": "iptables/node-2", "layer": "datapath",
                              "service": "kube-system/kube-dns", "target": "10.244.1.3:53",
                              "kind": "stale", "verdict": "over expected lag",
                              "since": "2026-03-19T08:00:00Z",
                              "last_seen": "2026-03-19T08:00:41Z",
                              "former_pod": "kube-system/coredns-abc", "expected_lag_s": 2.0}],
                    "dns": {"state": "cluster-ip-failing",
                            "path": "dns-cluster-ip/10.96.0.10:53@node-2",
                            "failures": 4, "probes": 10, "pods_answering": 2}
                }))),
            ),
            (
                agent("node-3", 3),
                Err("HTTP 401 Unauthorized from 10.200.0.13:9754: invalid bearer token".into()),
            ),
        ]
    }

    #[test]
    fn agents_findings_name_the_node_backend_former_pod_and_since_when() {
        let (rows, findings) = judge_agents(asked(), &ServiceFilter::default(), &Truth::new());
        let states: Vec<_> = rows.iter().map(|r| (r.node.as_str(), r.state)).collect();
        assert_eq!(
            states,
            [
                ("node-1", "ok"),
                ("node-2", "findings"),
                ("node-3", "failed")
            ]
        );
        assert_eq!(findings.len(), 2, "{findings:?}");
        let stale = &findings[0];
        assert_eq!(stale.node, "node-2");
        assert_eq!(stale.service, "kube-system/kube-dns");
        assert_eq!(stale.target.as_deref(), Some("10.244.1.3:53"));
        assert_eq!(stale.former_pod.as_deref(), Some("kube-system/coredns-abc"));
        assert_eq!(stale.since, Some("2026-03-19T08:00:00Z".parse().unwrap()));
        assert_eq!(stale.verdict, "over expected lag");
        let dns = &findings[1];
        assert_eq!(
            (dns.node.as_str(), dns.kind.as_str()),
            ("node-2", "dns-health")
        );
        assert_eq!(dns.path, "dns-cluster-ip/10.96.0.10:53@node-2");
        // Two node findings and an agent that did not answer: exit 1.
        assert_eq!(count_findings(&[], &rows, &findings), 3);
        let table = render(&[], &rows, &findings, &[], 0, 0, &Layout::WIDE);
        assert!(
            table.lines().any(|l| l.contains("node-2")
                && l.contains("10.244.1.3:53")
                && l.contains("kube-system/coredns-abc")),
            "{table}"
        );
        assert!(table.contains("invalid bearer token"), "{table}");
    }

    /// A stalled kube-proxy in an agent's `/status` (`layers.components`) is a node finding
    /// on its own, with no stale backend: the agent's row says `findings` and check exits 1.
    #[test]
    fn a_stalled_kube_proxy_is_a_node_finding() {
        let asked = vec![
            (
                agent("node-2", 2),
                Ok(status(serde_json::json!({
                    "node": "node-2", "truth_synced": true, "open": [],
                    "layers": {"components": {"kube_proxy": {
                        "url": "http://127.0.0.1:10249/metrics", "endpoint": "refused",
                        "stalled": {"component": "kube-proxy",
                                    "last_sync": "2026-03-19T08:00:00Z",
                                    "oldest_change": "2026-03-19T08:10:00Z",
                                    "waited_s": 12.0, "allowed_s": 11.0, "missed_changes": 2,
                                    "missed_services": ["kube-system/kube-dns", "prod/web"],
                                    "evidence": "endpoint-gone"}}}}
                }))),
            ),
            (
                agent("node-1", 1),
                Ok(status(serde_json::json!({
                    "node": "node-1", "truth_synced": true, "open": [],
                    "layers": {"components": {"kube_proxy": {"endpoint": "answering", "stalled": null}}}
                }))),
            ),
        ];
        let (rows, findings) = judge_agents(asked, &ServiceFilter::default(), &Truth::new());
        let states: Vec<_> = rows.iter().map(|r| (r.node.as_str(), r.state)).collect();
        assert_eq!(states, [("node-2", "findings"), ("node-1", "ok")]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let f = &findings[0];
        assert_eq!(
            (
                f.kind.as_str(),
                f.layer.as_str(),
                f.path.as_str(),
                f.service.as_str()
            ),
            (
                "component-stalled",
                "components",
                "kube-proxy/node-2",
                "kube-system/kube-dns (+1)"
            )
        );
        assert_eq!(f.since, Some("2026-03-19T08:00:00Z".parse().unwrap()));
        assert_eq!(count_findings(&[], &rows, &findings), 1);
        let table = render(&[], &rows, &findings, &[], 0, 0, &Layout::WIDE);
        assert!(
            table.contains("endpoint-gone") && table.contains("prod/web"),
            "{table}"
        );
    }

    /// A tracking of a Service outside `-n` is left out; the node's DNS health is kept.
    #[test]
    fn a_namespace_scope_keeps_the_nodes_dns_health_only() {
        let filter = ServiceFilter {
            namespace: Some("demo".into()),
            ..ServiceFilter::default()
        };
        let (_, findings) = judge_agents(asked(), &filter, &Truth::new());
        let kinds: Vec<_> = findings.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["dns-health"]);
    }

    fn row(state: &'static str, error: Option<&str>) -> Row {
        Row {
            service: "kube-system/kube-dns".into(),
            query: "A".into(),
            path: "ClusterIP 10.96.0.10".into(),
            state,
            expected: vec!["10.96.0.10".into()],
            answered: Vec::new(),
            stale: Vec::new(),
            missing: Vec::new(),
            min_ttl: None,
            error: error.map(Into::into),
        }
    }

    /// A path that does not answer is a finding like a stale one; clean agents and paths
    /// are not.
    #[test]
    fn a_failed_path_is_a_finding() {
        let ok = [row("ok", None)];
        assert_eq!(count_findings(&ok, &[], &[]), 0);
        let failed = [row("ok", None), row("failed", Some("timeout"))];
        assert_eq!(count_findings(&failed, &[], &[]), 1);
        let (rows, _) = judge_agents(
            asked().into_iter().take(1).collect(),
            &ServiceFilter::default(),
            &Truth::new(),
        );
        assert_eq!(count_findings(&ok, &rows, &[]), 0);
    }
}
