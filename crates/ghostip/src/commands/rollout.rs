//! `ghostip rollout KIND/NAME`: observe (or trigger) a rollout and report each stale window per path.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::StreamExt;
use ghostip_core::engine::Discrepancy;
use ghostip_core::{ServiceKey, Time};
use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use super::{
    Outcome, dns_config, kube_connect, new_session, open_ledger, print_json, probe_settings,
    session_config,
};
use crate::cli::{GlobalArgs, OutputFormat, RolloutArgs};
use crate::clock::SystemClock;
use crate::kube::{Connection, SyncState, WatchScope, watch_truth};
use crate::ledger::{LedgerWriter, WriterOptions};
use crate::pipeline::{Pipeline, Step};
use crate::printer::rollout::{self as report, html};
use ghostip_session::ServiceFilter;
use ghostip_session::layers::dns::DnsModel;
use ghostip_session::layers::dns::probe::ProbeCommand;
use ghostip_session::report::{Report, path_rows, summarize, window_row};

/// A workload kind ghostip can observe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Deployment,
    StatefulSet,
    DaemonSet,
}

fn parse_workload(s: &str) -> anyhow::Result<(Kind, String)> {
    let Some((kind, name)) = s.split_once('/') else {
        bail!("`{s}` is not KIND/NAME (e.g. deployment/web)");
    };
    let kind = match kind.to_ascii_lowercase().as_str() {
        "deployment" | "deployments" | "deploy" | "deployment.apps" => Kind::Deployment,
        "statefulset" | "statefulsets" | "sts" | "statefulset.apps" => Kind::StatefulSet,
        "daemonset" | "daemonsets" | "ds" | "daemonset.apps" => Kind::DaemonSet,
        other => {
            bail!("unsupported workload kind `{other}` (use deployment, statefulset or daemonset)")
        }
    };
    if name.is_empty() {
        bail!("`{s}` has no name");
    }
    Ok((kind, name.to_string()))
}

/// Template labels and whether the rollout is complete.
struct WorkloadState {
    labels: BTreeMap<String, String>,
    complete: bool,
}

async fn workload_state(
    conn: &Connection,
    ns: &str,
    kind: Kind,
    name: &str,
) -> anyhow::Result<WorkloadState> {
    let c = conn.client.clone();
    let what = format!("{kind:?} {ns}/{name}").to_lowercase();
    Ok(match kind {
        Kind::Deployment => {
            let d = Api::<Deployment>::namespaced(c, ns)
                .get(name)
                .await
                .with_context(|| format!("reading {what}"))?;
            let spec = d.spec.unwrap_or_default();
            let st = d.status.unwrap_or_default();
            let want = spec.replicas.unwrap_or(1);
            let generation = d.metadata.generation.unwrap_or(0);
            WorkloadState {
                labels: spec
                    .template
                    .metadata
                    .and_then(|m| m.labels)
                    .unwrap_or_default(),
                complete: st.observed_generation.unwrap_or(0) >= generation
                    && st.updated_replicas.unwrap_or(0) == want
                    && st.replicas.unwrap_or(0) == want
                    && st.available_replicas.unwrap_or(0) == want,
            }
        }
        Kind::StatefulSet => {
            let s = Api::<StatefulSet>::namespaced(c, ns)
                .get(name)
                .await
                .with_context(|| format!("reading {what}"))?;
            let spec = s.spec.unwrap_or_default();
            let st = s.status.unwrap_or_default();
            let want = spec.replicas.unwrap_or(1);
            WorkloadState {
                labels: spec
                    .template
                    .metadata
                    .and_then(|m| m.labels)
                    .unwrap_or_default(),
                complete: st.observed_generation.unwrap_or(0) >= s.metadata.generation.unwrap_or(0)
                    && st.updated_replicas.unwrap_or(0) == want
                    && st.ready_replicas.unwrap_or(0) == want
                    && st.current_revision == st.update_revision,
            }
        }
        Kind::DaemonSet => {
            let d = Api::<DaemonSet>::namespaced(c, ns)
                .get(name)
                .await
                .with_context(|| format!("reading {what}"))?;
            let spec = d.spec.unwrap_or_default();
            let st = d.status.unwrap_or_default();
            WorkloadState {
                labels: spec
                    .template
                    .metadata
                    .and_then(|m| m.labels)
                    .unwrap_or_default(),
                complete: st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
                    && st.updated_number_scheduled.unwrap_or(0) == st.desired_number_scheduled
                    && st.number_available.unwrap_or(0) == st.desired_number_scheduled,
            }
        }
    })
}

/// Services in `ns` whose selector matches the pod template labels.
async fn services_of(
    conn: &Connection,
    ns: &str,
    labels: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<(ServiceKey, bool)>> {
    let list = Api::<Service>::namespaced(conn.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing services in {ns}"))?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|s| {
            let spec = s.spec?;
            let sel = spec.selector.filter(|m| !m.is_empty())?;
            sel.iter().all(|(k, v)| labels.get(k) == Some(v)).then(|| {
                let headless = spec.cluster_ip.as_deref() == Some("None");
                (
                    ServiceKey::new(ns, s.metadata.name.unwrap_or_default()),
                    headless,
                )
            })
        })
        .collect())
}

async fn restart(conn: &Connection, ns: &str, kind: Kind, name: &str) -> anyhow::Result<()> {
    // The same patch `kubectl rollout restart` sends.
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": crate::clock::wall_now().to_string()
    }}}}});
    let pp = PatchParams::default();
    let c = conn.client.clone();
    let r = match kind {
        Kind::Deployment => Api::<Deployment>::namespaced(c, ns)
            .patch(name, &pp, &Patch::Merge(&patch))
            .await
            .map(|_| ()),
        Kind::StatefulSet => Api::<StatefulSet>::namespaced(c, ns)
            .patch(name, &pp, &Patch::Merge(&patch))
            .await
            .map(|_| ()),
        Kind::DaemonSet => Api::<DaemonSet>::namespaced(c, ns)
            .patch(name, &pp, &Patch::Merge(&patch))
            .await
            .map(|_| ()),
    };
    r.with_context(|| format!("restarting {kind:?} {ns}/{name}").to_lowercase())
}

fn progress() -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.enable_steady_tick(Duration::from_millis(120));
    Some(pb)
}

pub(super) async fn run(g: &GlobalArgs, args: RolloutArgs) -> anyhow::Result<Outcome> {
    let (kind, name) = parse_workload(&args.workload)?;
    let ns = args.namespace.clone();
    let conn = kube_connect(g).await?;
    let state = workload_state(&conn, &ns, kind, &name).await?;
    let services = services_of(&conn, &ns, &state.labels).await?;
    let headless: BTreeSet<ServiceKey> = services
        .iter()
        .filter(|(_, h)| *h)
        .map(|(k, _)| k.clone())
        .collect();
    let mut notes = Vec::new();
    if headless.is_empty() {
        let names: Vec<String> = services.iter().map(|(k, _)| k.to_string()).collect();
        bail!(
            "no headless Service selects the pods of {}/{name} in {ns} (services: {}); DNS answers for a ClusterIP Service never change during a rollout",
            args.workload.split('/').next().unwrap_or("workload"),
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        );
    }
    let ledger = open_ledger(g)?;
    let writer = LedgerWriter::spawn(ledger, WriterOptions::default())
        .context("starting the ledger writer")?;

    let cancel = CancellationToken::new();
    let scope = WatchScope::default();
    let truth = watch_truth(&conn, &scope, std::sync::Arc::new(SystemClock));
    let filter = ServiceFilter {
        namespace: Some(ns.clone()),
        only: Some(headless.clone()),
        selector: Vec::new(),
    };
    let deadline = tokio::time::Instant::now() + args.timeout;
    // Probe the workload's Services for the whole observation (wall clock for the runtime).
    let burst_until = crate::clock::wall_now()
        .checked_add(args.timeout + args.settle)
        .unwrap_or_else(|_| crate::clock::wall_now());
    let mut session = new_session(
        session_config(filter, true),
        SyncState::new(crate::clock::wall_now(), scope.kinds()),
        &dns_config(&args.dns),
        None,
    );
    // A rollout measures DNS: its Services are probed for the whole observation.
    if let Some(dns) = session.layer_mut::<DnsModel>() {
        dns.set_min_burst_until(burst_until);
    }
    let settings = probe_settings(&args.dns, Duration::from_secs(3600))?;
    let mut p = Pipeline::start(
        session,
        truth.boxed(),
        settings,
        Some(writer.sender()),
        None,
        cancel.clone(),
    );
    p.auto_stop_bursts = false;
    let pb = progress();
    let started = crate::clock::wall_now();

    // 1. Wait until the truth synced.
    let sync_deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !p.session.synced() {
        if tokio::time::Instant::now() > sync_deadline {
            bail!(
                "the truth did not sync within 30 s ({}): is the API server reachable?",
                conn.origin
            );
        }
        if let Step::Stopped = p.next().await {
            bail!("the watch ended before it synced");
        }
    }
    // 2. Probe the workload's names on every path for the whole observation, so the TTL held
    //    at t0 is known and every change is seen at the probe interval.
    for key in &headless {
        if let Ok(names) = ghostip_session::layers::dns::names::service_names(
            p.session.truth(),
            key,
            &session_names(&args),
        ) {
            p.probe(ProbeCommand::Burst {
                service: key.clone(),
                names,
                until: burst_until,
            })
            .await;
        }
    }
    let baseline_until = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < baseline_until {
        p.next().await;
    }
    if p.session
        .layer::<DnsModel>()
        .is_none_or(|dns| dns.dns_paths().is_empty())
    {
        notes.push(
            "no DNS path found (no kube-dns endpoints and no --dns-server): nothing was probed"
                .into(),
        );
    }
    // 3. Trigger or wait.
    if args.restart {
        restart(&conn, &ns, kind, &name).await?;
        notes.push(format!(
            "rollout triggered at {} (rollout restart)",
            crate::clock::wall_now().strftime("%T%.3f")
        ));
    }
    let mut completed_at: Option<tokio::time::Instant> = None;
    let mut last_poll = tokio::time::Instant::now();
    let mut timed_out = false;
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            timed_out = true;
            break;
        }
        if now.duration_since(last_poll) >= Duration::from_secs(1) {
            last_poll = now;
            let st = workload_state(&conn, &ns, kind, &name).await;
            let changed = !p.session.changes().is_empty();
            match st {
                Ok(s) if s.complete && changed && completed_at.is_none() => {
                    completed_at = Some(now);
                    notes.push(format!(
                        "rollout complete at {}",
                        crate::clock::wall_now().strftime("%T%.3f")
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot read the workload; will retry")
                }
            }
        }
        if let Some(done) = completed_at {
            // Done once every tracking of the rollout closed, or the settle time ran out.
            let open = p
                .session
                .engine()
                .open_trackings()
                .filter(|t| headless.contains(&t.service))
                .count();
            if (open == 0 && now.duration_since(done) >= Duration::from_secs(2))
                || now.duration_since(done) >= args.settle
            {
                break;
            }
        }
        if let Step::Stopped = p.next().await {
            break;
        }
        if let Some(pb) = &pb {
            pb.set_message(live_message(&p, completed_at.is_some()));
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    if timed_out {
        notes.push(format!(
            "gave up after --timeout {:?}; open windows are reported as pending",
            args.timeout
        ));
    }
    for (s, e) in p.session.engine().gaps() {
        notes.push(format!(
            "truth gap from {} to {}: windows overlapping it are not judged",
            s.strftime("%T%.3f"),
            e.map_or("the end".into(), |e| e.strftime("%T%.3f").to_string())
        ));
    }
    let finished = crate::clock::wall_now();
    let report = build_report(
        &mut p,
        format!("rollout of {} in {ns}", args.workload),
        started,
        finished,
        notes,
        &headless,
    );
    p.flush().await;
    p.shutdown();
    drop(p);
    let (_, stats) = tokio::task::spawn_blocking(move || writer.close())
        .await
        .context("closing the ledger")??;
    tracing::debug!(?stats, "ledger writer closed");

    if let Some(path) = &args.html {
        std::fs::write(path, html::render(&report))
            .with_context(|| format!("writing {}", path.display()))?;
        crate::printer::write_stderr(&format!(
            "ghostip: timeline written to {}\n",
            crate::printer::sanitize::escape_controls(&path.display().to_string())
        ));
    }
    match g.output {
        OutputFormat::Json => print_json(&report)?,
        OutputFormat::Table | OutputFormat::Wide => {
            crate::printer::print_text(&report::render_table(&report, &g.output.layout()));
            if std::io::stdout().is_terminal() {
                let width = crate::printer::Layout::detect(false).width;
                let picture = report::picture::picture(&report, width);
                if !picture.is_empty() {
                    crate::printer::print_text(&format!("\n{picture}"));
                }
            }
        }
        OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
    }
    Ok(if report.summary.finding {
        Outcome::Finding
    } else {
        Outcome::Clean
    })
}

fn session_names(args: &RolloutArgs) -> ghostip_session::layers::dns::names::NameConfig {
    ghostip_session::layers::dns::names::NameConfig {
        zone: args.dns.zone.clone(),
        srv: !args.dns.no_srv,
    }
}

fn live_message(p: &Pipeline, complete: bool) -> String {
    let engine = p.session.engine();
    let stale = engine
        .open_trackings()
        .filter(|t| t.kind == Discrepancy::Stale && t.converged_by.is_none())
        .count();
    let max = engine
        .open_trackings()
        .chain(engine.closed_trackings())
        .filter(|t| t.kind == Discrepancy::Stale)
        .filter_map(|t| t.window_lower())
        .max()
        .unwrap_or_default();
    format!(
        "{} changes · {} removed IPs still served · largest window so far {:.1}s · {}",
        p.session.changes().len(),
        stale,
        max.as_secs_f64(),
        if complete {
            "rollout complete, waiting for caches"
        } else {
            "rolling out"
        }
    )
}

/// Builds the report for the given services.
pub(crate) fn build_report(
    p: &mut Pipeline,
    subject: String,
    started: Time,
    finished: Time,
    notes: Vec<String>,
    services: &BTreeSet<ServiceKey>,
) -> Report {
    let trackings = p.session.finish();
    let mut stale = Vec::new();
    let mut missing = Vec::new();
    for t in trackings.iter().filter(|t| services.contains(&t.service)) {
        let path = p.session.engine().path(t.path);
        // A removed endpoint's pod is its former owner; an added one's is in the truth.
        let pod = match t.kind {
            Discrepancy::Stale => p.session.former_pod(t.target.ip),
            Discrepancy::Missing => p.session.endpoint_pod(&t.service, t.target.ip),
        };
        let row = window_row(t, path, p.session.engine().death(t.target.ip), pod);
        match t.kind {
            Discrepancy::Stale => stale.push(row),
            Discrepancy::Missing => missing.push(row),
        }
    }
    stale.sort_by(|a, b| (a.t0, &a.target, &a.path).cmp(&(b.t0, &b.target, &b.path)));
    missing.sort_by(|a, b| (a.t0, &a.target, &a.path).cmp(&(b.t0, &b.target, &b.path)));
    let summary = summarize(&stale, &missing);
    let facts = p.session.path_facts();
    Report {
        subject,
        started,
        finished,
        notes,
        changes: p
            .session
            .changes()
            .iter()
            .filter(|c| services.iter().any(|s| s.to_string() == c.service))
            .cloned()
            .collect(),
        paths: path_rows(p.session.engine(), &facts),
        stale,
        missing,
        timeline: p.session.timeline(),
        summary,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn workloads_parse() {
        assert_eq!(
            parse_workload("deploy/web").unwrap(),
            (Kind::Deployment, "web".into())
        );
        assert_eq!(
            parse_workload("sts/db").unwrap(),
            (Kind::StatefulSet, "db".into())
        );
        assert!(parse_workload("web").is_err());
        assert!(parse_workload("pod/web").is_err());
        assert!(parse_workload("deploy/").is_err());
    }
}
