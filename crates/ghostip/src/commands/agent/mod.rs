//! `ghostip agent`: one per node; diffs this node's load-balancer datapath and conntrack table with the truth and probes this node's DNS paths.
//!
//! The same session, engine, prober, ledger and metrics as `ghostip watch`, with every
//! layer of [`crate::layers::LAYERS`] that has a node-local adapter started on the
//! pipeline: today DNS health (one query per DNS path of this node every
//! `--dns-health-interval`), the node's datapath (`iptables/<node>`, …: re-reads after each
//! truth change until converged, and a periodic audit whose period follows the measured CPU
//! cost) and its conntrack table (`conntrack/<node>`: flows of this node's pods to endpoints
//! that left their Service). The agent names no layer: `/status` has one section per layer.
//!
//! The truth is node-scoped where the API allows (Pods by `spec.nodeName`). A reader
//! that fails (a missing capability, a missing tool) is reported with its cause and the
//! rest keeps working. SIGTERM ends the agent within 5 s. [`run`] is the steps in order:
//! [`serve`] the HTTP endpoints, start the pipeline and the layers' adapters,
//! then [`step`] until stopped, then [`shut_down`].

mod status;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use ghostip_core::engine::{Discrepancy, EngineEvent, Verdict};
use ghostip_core::{PathIdx, ServiceKey, Target};
use ghostip_session::ServiceFilter;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{
    Outcome, dns_config, kube_connect, new_session, open_ledger, probe_settings, session_config,
};
use crate::cli::{AgentArgs, GlobalArgs, OutputFormat};
use crate::clock::SystemClock;
use crate::kube::{LivenessProbe, SyncState, TruthEvent, WatchScope, watch_truth};
use crate::layers::node::{Line, NodeOutputs, Printer, emit_events, view};
use crate::layers::{self, NodeSetup};
use crate::ledger::{LedgerWriter, RetentionPruner, WriterOptions};
use crate::metrics::Metrics;
use crate::pipeline::{Pipeline, Step};
use status::{AgentStatus, SharedStatus, lock};

/// Open trackings by identity, with whether each was stuck and over its expected lag, to
/// report what the engine changed on its own tick.
type OpenSet = BTreeMap<(PathIdx, ServiceKey, Target, Discrepancy), (bool, bool)>;

pub(super) async fn run(g: &GlobalArgs, args: AgentArgs) -> anyhow::Result<Outcome> {
    validate(&args)?;
    let node = args.node_name.clone();
    let printer = Printer {
        json: g.output == OutputFormat::Json,
    };
    let conn = kube_connect(g).await?;
    let ledger = open_ledger(g)?;
    let db_path = ledger.path().to_path_buf();
    let mut metrics = Metrics::new();
    let writer = LedgerWriter::spawn_with_error_hook(
        ledger,
        WriterOptions::default(),
        metrics.ledger_error_hook(),
    )
    .context("starting the ledger writer")?;
    let layer_metrics = layers::register_metrics(&mut metrics, layers::Runs::Node);
    let metrics = Arc::new(metrics);
    let ready = Arc::new(AtomicBool::new(false));
    let status: SharedStatus = Arc::new(Mutex::new(AgentStatus {
        node: node.clone(),
        max_cpu_percent: args.max_cpu,
        ..AgentStatus::default()
    }));
    lock(&status).summarize();
    let cancel = CancellationToken::new();
    let kill_readers = Arc::new(AtomicBool::new(false));
    let server = serve(&args, &conn.client, &metrics, &ready, &status, &cancel)?;
    stop_on_signal(&cancel, &kill_readers);

    // The session: every layer's model seen from this node.
    // One agent per node probes the API server's liveness: every 5 s, not every second, so
    // a large cluster's agents stay a few requests per second in all.
    let scope = WatchScope {
        namespace: None,
        pods_on_node: Some(node.clone()),
        liveness: Some(LivenessProbe {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            failures: 2,
        }),
        ..WatchScope::default()
    };
    let truth = watch_truth(&conn, &scope, Arc::new(SystemClock));
    let mut dns = dns_config(&args.dns);
    dns.paths.node = Some(node.clone());
    let dns_service = dns.paths.dns_service.clone();
    let zone = dns.names.zone.clone();
    let session = new_session(
        session_config(ServiceFilter::default(), false),
        SyncState::new(crate::clock::wall_now(), scope.kinds()),
        &dns,
        Some(&node),
    );
    // Sweeps of headless names are the watch's job; the agent probes them on bursts only
    // (the sweep period is long) and checks DNS health on its own schedule.
    let settings = probe_settings(&args.dns, Duration::from_secs(300))?;
    let mut p = Pipeline::start_recording(
        session,
        truth.boxed(),
        settings,
        writer.sender(),
        &metrics,
        cancel.clone(),
    );
    let ledger_tx = writer.sender();
    let out = NodeOutputs {
        printer,
        ledger: ledger_tx.clone(),
        metrics: layer_metrics,
        fixed: Arc::clone(&metrics),
    };
    layers::start_node_adapters(
        &NodeSetup {
            args: &args,
            client: &conn.client,
            node: &node,
            dns_service: &dns_service,
            zone: &zone,
            kill: &kill_readers,
            out: &out,
        },
        &mut p,
    )
    .await;
    publish(&p, &status);
    let sources = lock(&status).sources();
    tracing::info!(node = %node, layers = %sources.iter().map(|(l, s)| format!("{l}={}", s.as_deref().unwrap_or("-"))).collect::<Vec<_>>().join(","), listen = %args.listen, db = %db_path.display(), api = %conn.origin, "ghostip agent started");
    printer.line(&Line::Started {
        node: &node,
        layers: &sources,
        listen: args.listen.to_string(),
    });

    let mut pruner = RetentionPruner::new(args.retention);
    let mut synced_sent = false;
    let mut open_before = OpenSet::new();
    let mut failed = Ok(());
    loop {
        let step = p.next().await;
        let now = crate::clock::wall_now();
        match step {
            Step::Stopped => break,
            Step::Truth {
                received, events, ..
            } => {
                if let TruthEvent::WatchFailed { kind, error } = &received.event {
                    tracing::warn!(%kind, %error, "watch failed; retrying with backoff (truth gap)");
                }
                emit_events(&printer, &p, &events);
                if !synced_sent && p.session.synced() {
                    synced_sent = true;
                    tracing::info!("truth synced");
                    printer.line(&Line::Synced { at: received.at });
                }
                p.adapters_on_truth(now, synced_sent);
            }
            Step::Tick(now) => {
                pruner.tick(now, &ledger_tx).await;
            }
            Step::Probe => {}
        }
        // Not ready while the ledger cannot be written; exit 2 past the bound.
        failed = super::watch::update_ready(
            &ready,
            p.session.judging(),
            &writer,
            args.ledger_failure_exit_after,
            &db_path,
        );
        if failed.is_err() {
            break;
        }
        p.step_adapters(now, synced_sent).await;
        report_open(&p, &printer, &status, &mut open_before);
        publish(&p, &status);
    }
    shut_down(p, writer, server, &kill_readers).await;
    printer.line(&Line::Stopped {
        at: crate::clock::wall_now(),
    });
    tracing::info!("ghostip agent stopped");
    failed.map(|()| Outcome::Clean)
}

/// The shortest `--min-audit-period` accepted: a full audit at most once a second. At 0 s the
/// agent read about 4 times a second at 3.4 % CPU against a 2 % `--max-cpu`, the measured
/// cost of a small read leaving out the process start and the loop around it.
const MIN_AUDIT_PERIOD_FLOOR: Duration = Duration::from_secs(1);

/// A duration as the flags take it (`500ms`, `10s`, `1m30s`).
struct DisplayDuration(Duration);

impl std::fmt::Display for DisplayDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        if d.subsec_millis() != 0 || d.is_zero() {
            write!(f, "{}ms", d.as_millis())
        } else {
            write!(f, "{}s", d.as_secs())
        }
    }
}

/// Rejects flag values the agent cannot honour: a CPU share outside (0, 100], an audit period
/// under [`MIN_AUDIT_PERIOD_FLOOR`] or a maximum below the minimum, a zero re-read interval or
/// read timeout, an empty node name.
fn validate(args: &AgentArgs) -> anyhow::Result<()> {
    if !(args.max_cpu > 0.0 && args.max_cpu <= 100.0) {
        anyhow::bail!(
            "invalid --max-cpu {}: expected a percentage of one core in (0, 100]",
            args.max_cpu
        );
    }
    if args.min_audit_period < MIN_AUDIT_PERIOD_FLOOR {
        anyhow::bail!(
            "invalid --min-audit-period {}: expected at least {} (a read's cost as measured \
             leaves out the process start and the agent's own loop; audits more often than \
             once a second went over --max-cpu)",
            DisplayDuration(args.min_audit_period),
            DisplayDuration(MIN_AUDIT_PERIOD_FLOOR)
        );
    }
    if args.max_audit_period < args.min_audit_period {
        anyhow::bail!(
            "invalid --max-audit-period {}: it is below --min-audit-period {}",
            DisplayDuration(args.max_audit_period),
            DisplayDuration(args.min_audit_period)
        );
    }
    for (flag, value) in [
        ("--reread-interval", args.reread_interval),
        ("--read-timeout", args.read_timeout),
    ] {
        if value.is_zero() {
            anyhow::bail!("invalid {flag} 0s: expected a duration above zero");
        }
    }
    if args.kube_proxy_metrics != "off" {
        crate::layers::components::scrape::MetricsUrl::parse(&args.kube_proxy_metrics).map_err(
            |e| anyhow::anyhow!("invalid --kube-proxy-metrics: {e} (`off` disables the scrapes)"),
        )?;
    }
    if args.node_name.trim().is_empty() {
        anyhow::bail!(
            "--node-name is empty: pass the node's name (NODE_NAME from the downward API)"
        );
    }
    Ok(())
}

/// Serves `/metrics`, `/healthz`, `/readyz`, `/status` and `/v1/ips/{ip}` on `--listen`,
/// bounded, and authenticated where `--auth` asks for it.
fn serve(
    args: &AgentArgs,
    client: &kube::Client,
    metrics: &Arc<Metrics>,
    ready: &Arc<AtomicBool>,
    status: &SharedStatus,
    cancel: &CancellationToken,
) -> anyhow::Result<JoinHandle<std::io::Result<()>>> {
    let app = crate::http::router(Arc::clone(metrics), Arc::clone(ready))
        .merge(status::routes(Arc::clone(status)));
    crate::http::start(args.listen, &args.auth, client, app, cancel)
}

/// SIGTERM or Ctrl-C: kill datapath readers and stop the loop.
fn stop_on_signal(cancel: &CancellationToken, kill_readers: &Arc<AtomicBool>) {
    let signal_cancel = cancel.clone();
    let signal_kill = Arc::clone(kill_readers);
    tokio::spawn(async move {
        super::shutdown_signal().await;
        tracing::info!("shutdown requested");
        signal_kill.store(true, Ordering::Relaxed);
        signal_cancel.cancel();
    });
}

/// Updates `/status` with the open trackings, and reports the trackings the engine declared
/// stuck or closed on its own tick.
fn report_open(p: &Pipeline, printer: &Printer, status: &SharedStatus, open_before: &mut OpenSet) {
    let engine = p.session.engine();
    let open = engine.open_trackings().filter_map(|t| view(p, t)).collect();
    let mut now_open = OpenSet::new();
    for t in engine.open_trackings() {
        let over = t.verdict == Verdict::OverExpectedLag;
        now_open.insert(
            (t.path, t.service.clone(), t.target, t.kind),
            (t.was_stuck, over),
        );
    }
    for (key, (was_stuck, over)) in &now_open {
        let (stuck_before, over_before) = open_before.get(key).copied().unwrap_or_default();
        let find = || {
            engine
                .open_trackings()
                .find(|t| (t.path, &t.service, t.target, t.kind) == (key.0, &key.1, key.2, key.3))
        };
        if *over
            && !over_before
            && let Some(t) = find()
        {
            emit_events(printer, p, &[EngineEvent::OverExpectedLag(t.clone())]);
        }
        if *was_stuck
            && open_before.contains_key(key)
            && !stuck_before
            && let Some(t) = find()
        {
            emit_events(printer, p, &[EngineEvent::Stuck(t.clone())]);
        }
    }
    for key in open_before.keys().filter(|k| !now_open.contains_key(*k)) {
        if let Some(t) = engine
            .closed_trackings()
            .iter()
            .rev()
            .find(|t| (t.path, &t.service, t.target, t.kind) == (key.0, &key.1, key.2, key.3))
        {
            emit_events(printer, p, &[EngineEvent::Closed(t.clone())]);
        }
    }
    *open_before = now_open;
    let mut st = lock(status);
    st.open = open;
    st.truth_synced = p.session.judging();
}

/// Publishes every layer's section of `/status`, and the summary that leads it.
fn publish(p: &Pipeline, status: &SharedStatus) {
    let sections = layers::snapshots(p);
    let mut st = lock(status);
    st.layers = sections;
    st.summarize();
}

/// Clean shutdown within 5 s: kill readers, stop probing, flush the ledger with a deadline.
async fn shut_down(
    p: Pipeline,
    writer: LedgerWriter,
    server: JoinHandle<std::io::Result<()>>,
    kill_readers: &AtomicBool,
) {
    kill_readers.store(true, Ordering::Relaxed);
    p.close(Duration::from_secs(2), server, writer).await;
}
