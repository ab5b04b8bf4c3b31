//! `ghostip agent`: one per node; diffs this node's load-balancer datapath with the truth and probes this node's DNS paths.
//!
//! The same session, engine, prober, ledger and metrics as `ghostip watch`, plus:
//! - one datapath path (`iptables/<node>`, …) whose desired sets come from the truth on
//!   every change ([`DatapathTracker`]) and whose observations come from reads of the
//!   datapath: re-reads after each truth change until converged (bounded), and a
//!   periodic full audit whose period adapts to the measured CPU cost ([`CostCap`]);
//! - DNS health: one query per DNS path of this node every `--dns-health-interval`
//!   inside the prober's global budget, judged by [`DnsHealth`].
//!
//! The truth is node-scoped where the API allows (Pods by `spec.nodeName`). A reader
//! that fails (a missing capability, a missing tool) is reported with its cause and the
//! rest keeps working. SIGTERM ends the agent within 5 s.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use futures::StreamExt;
use ghostip_core::engine::{Discrepancy, EngineEvent, Tracking};
use ghostip_core::{
    FailureReason, HeldTarget, Layer, Observation, ObservationResult, PathIdx, PathInfo, PathKind,
    ServiceKey, Target, Time,
};
use ghostip_datapath::RunsIn;
use hickory_proto::rr::Name;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::pipeline::{Pipeline, Step};
use super::session::{ServiceFilter, Session};
use super::{Outcome, kube_connect, open_ledger, probe_settings, session_config};
use crate::agent::cilium::{CiliumTarget, read_cilium};
use crate::agent::cost::{CostCap, CostConfig, ReadReason, ReadSchedule};
use crate::agent::health::{DnsHealth, HealthConfig, HealthVerdict, PathHealth};
use crate::agent::readers::{self, Datapath, ReadOutcome, ReaderError};
use crate::agent::tracker::DatapathTracker;
use crate::cli::{AgentArgs, DatapathChoice, GlobalArgs, OutputFormat};
use crate::dns::budget::Budget;
use crate::dns::paths::DnsPath;
use crate::dns::query::{self, QueryConfig, QueryType};
use crate::kube::{SyncState, SystemClock, WatchScope, watch_truth};
use crate::ledger::{LedgerOp, LedgerWriter, RetentionPruner, WriterOptions};
use crate::metrics::{ErrorLabels, Metrics, QueryLabels};

/// Labels of the agent's read counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadLabels {
    datapath: String,
    reason: String,
}

/// Labels of the agent's reader errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadErrorLabels {
    datapath: String,
    error: String,
}

/// Labels of node gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

/// The agent's own metrics, next to the fixed ones.
#[derive(Clone, Default)]
struct AgentMetrics {
    read_cpu: Gauge<f64, AtomicU64>,
    read_cpu_total: Counter<f64, AtomicU64>,
    audit_period: Gauge<f64, AtomicU64>,
    reads: Family<ReadLabels, Counter>,
    read_errors: Family<ReadErrorLabels, Counter>,
    dns_cluster_ip_failing: Family<NodeLabels, Gauge>,
}

impl AgentMetrics {
    fn register(m: &mut Metrics) -> Self {
        let a = Self::default();
        let r = m.registry_mut();
        r.register(
            "ghostip_datapath_read_cpu_seconds",
            "CPU seconds of the last datapath read (the dumping program plus parsing)",
            a.read_cpu.clone(),
        );
        r.register(
            "ghostip_datapath_read_cpu_seconds",
            "CPU seconds spent on datapath reads",
            a.read_cpu_total.clone(),
        );
        r.register(
            "ghostip_datapath_audit_period_seconds",
            "Period between two full datapath audits, chosen from the measured cost and --max-cpu",
            a.audit_period.clone(),
        );
        r.register(
            "ghostip_datapath_reads",
            "Datapath reads, by reason (initial, reread, audit)",
            a.reads.clone(),
        );
        r.register(
            "ghostip_datapath_read_errors",
            "Datapath reads that failed, by error (privilege, not-installed, absent, timeout, parse, ...)",
            a.read_errors.clone(),
        );
        r.register(
            "ghostip_dns_cluster_ip_failing",
            "1 while DNS through the kube-dns ClusterIP fails from this node and the CoreDNS pod IPs answer",
            a.dns_cluster_ip_failing.clone(),
        );
        a
    }
}

/// A stale or missing backend the datapath holds now, for `/status` and JSON lines.
#[derive(Clone, Debug, Serialize)]
struct TrackingView {
    path: String,
    layer: Layer,
    service: String,
    target: String,
    kind: String,
    verdict: String,
    /// When the truth changed (or the tracking was opened).
    since: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_seen: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    converged_by: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    former_pod: Option<String>,
}

/// The last read.
#[derive(Clone, Debug, Default, Serialize)]
struct ReadView {
    reason: Option<ReadReason>,
    at: Option<Time>,
    cpu_s: f64,
    child_cpu_s: f64,
    parse_cpu_s: f64,
    /// CPU of comparing the table with the truth (the engine's observations).
    diff_cpu_s: f64,
    wall_s: f64,
    bytes: u64,
    frontends: usize,
    backends: usize,
    services: usize,
    unknown_frontends: usize,
    skipped_unknown: u64,
}

/// What `/status` serves.
#[derive(Clone, Debug, Default, Serialize)]
struct AgentStatus {
    node: String,
    datapath: Option<String>,
    datapath_error: Option<String>,
    /// Capability a reader lacks, when that is why it failed.
    missing_capability: Option<String>,
    truth_synced: bool,
    max_cpu_percent: f64,
    audit_period_s: f64,
    reads: u64,
    read_cpu_total_s: f64,
    last_read: ReadView,
    /// Open stale/missing trackings of this node's paths (datapath and DNS).
    open: Vec<TrackingView>,
    dns: Option<HealthVerdict>,
    dns_paths: Vec<PathHealth>,
}

/// One JSON line of `-o json`.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum Line<'a> {
    Started {
        node: &'a str,
        datapath: Option<&'a str>,
        listen: String,
    },
    Synced {
        at: Time,
    },
    Read {
        #[serde(flatten)]
        read: &'a ReadView,
        audit_period_s: f64,
        stale_now: usize,
    },
    ReaderError {
        datapath: &'a str,
        error: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        capability: Option<&'a str>,
    },
    Tracking {
        change: &'a str,
        #[serde(flatten)]
        tracking: &'a TrackingView,
    },
    DnsHealth {
        #[serde(flatten)]
        verdict: &'a HealthVerdict,
        paths: &'a [PathHealth],
    },
    Stopped {
        at: Time,
    },
}

async fn status_handler(State(status): State<Arc<Mutex<AgentStatus>>>) -> impl IntoResponse {
    let body = {
        let st = status.lock().unwrap_or_else(PoisonError::into_inner);
        serde_json::to_string_pretty(&*st).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    };
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// Where the datapath is read from.
#[derive(Clone)]
enum Source {
    Local(Datapath),
    Cilium(Datapath, kube::Client, CiliumTarget),
}

impl Source {
    fn datapath(&self) -> Datapath {
        match self {
            Source::Local(d) | Source::Cilium(d, ..) => *d,
        }
    }

    async fn read(
        self,
        timeout: Duration,
        cancel: Arc<AtomicBool>,
    ) -> Result<ReadOutcome, ReaderError> {
        match self {
            Source::Local(d) => readers::read_datapath(d, timeout, cancel).await,
            Source::Cilium(d, client, target) => read_cilium(d, client, &target, timeout).await,
        }
    }
}

/// The result of a DNS health probe.
struct HealthProbe {
    path: DnsPath,
    at: Time,
    failure: Option<FailureReason>,
    latency: Duration,
    held: Vec<HeldTarget>,
}

struct Printer {
    json: bool,
}

impl Printer {
    fn line(&self, l: &Line<'_>) {
        if self.json
            && let Ok(s) = serde_json::to_string(l)
        {
            println!("{s}");
        }
    }
}

pub(super) async fn run(g: &GlobalArgs, args: AgentArgs) -> anyhow::Result<Outcome> {
    if !(args.max_cpu > 0.0 && args.max_cpu <= 100.0) {
        anyhow::bail!(
            "invalid --max-cpu {}: expected a percentage of one core in (0, 100]",
            args.max_cpu
        );
    }
    if args.node_name.trim().is_empty() {
        anyhow::bail!(
            "--node-name is empty: pass the node's name (NODE_NAME from the downward API)"
        );
    }
    let node = args.node_name.clone();
    let printer = Printer {
        json: g.output == OutputFormat::Json,
    };
    let conn = kube_connect(g).await?;
    let ledger = open_ledger(g)?;
    let db_path = ledger.path().to_path_buf();
    let writer = LedgerWriter::spawn(ledger, WriterOptions::default())
        .context("starting the ledger writer")?;
    let mut metrics = Metrics::new();
    let am = AgentMetrics::register(&mut metrics);
    let metrics = Arc::new(metrics);
    let ready = Arc::new(AtomicBool::new(false));
    let status = Arc::new(Mutex::new(AgentStatus {
        node: node.clone(),
        max_cpu_percent: args.max_cpu,
        ..AgentStatus::default()
    }));
    let cancel = CancellationToken::new();
    let kill_readers = Arc::new(AtomicBool::new(false));

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let app = crate::http::router(Arc::clone(&metrics), Arc::clone(&ready)).merge(
        Router::new()
            .route("/status", get(status_handler))
            .with_state(Arc::clone(&status)),
    );
    let http_cancel = cancel.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { http_cancel.cancelled().await })
            .await
    });
    let signal_cancel = cancel.clone();
    let signal_kill = Arc::clone(&kill_readers);
    tokio::spawn(async move {
        super::shutdown_signal().await;
        tracing::info!("shutdown requested");
        signal_kill.store(true, Ordering::Relaxed);
        signal_cancel.cancel();
    });

    // Which datapath: given, or detected by reading each candidate once.
    let mut first_read: Option<ReadOutcome> = None;
    let source = match args.datapath {
        DatapathChoice::Read(dp) if dp.runs_in() == RunsIn::Node => Some(Source::Local(dp)),
        DatapathChoice::Read(dp) => Some(Source::Cilium(
            dp,
            conn.client.clone(),
            CiliumTarget {
                namespace: args.cilium_namespace.clone(),
                selector: args.cilium_selector.clone(),
                container: args.cilium_container.clone(),
                node: node.clone(),
            },
        )),
        DatapathChoice::Auto => {
            let d = readers::detect(args.read_timeout, Arc::clone(&kill_readers)).await;
            for (dp, why) in &d.rejected {
                tracing::info!(datapath = %dp, reason = %why, "datapath candidate not used");
            }
            match d.chosen {
                Some((dp, outcome)) => {
                    first_read = Some(outcome);
                    Some(Source::Local(dp))
                }
                None => {
                    let why = d
                        .rejected
                        .iter()
                        .map(|(dp, e)| format!("{dp}: {e}"))
                        .collect::<Vec<_>>()
                        .join("; ");
                    tracing::error!(reasons = %why, "no kube-proxy datapath found on this node; only DNS paths are probed");
                    let mut st = lock(&status);
                    st.datapath_error = Some(format!("no datapath detected ({why})"));
                    st.missing_capability = d.rejected.iter().find_map(|(_, e)| {
                        e.contains("CAP_NET_ADMIN")
                            .then(|| "CAP_NET_ADMIN".to_string())
                    });
                    None
                }
            }
        }
    };
    let dp_name = source.as_ref().map(|s| s.datapath().as_str());
    lock(&status).datapath = dp_name.map(str::to_string);
    tracing::info!(node = %node, datapath = dp_name.unwrap_or("none"), listen = %args.listen, db = %db_path.display(), api = %conn.origin, "ghostip agent started");
    printer.line(&Line::Started {
        node: &node,
        datapath: dp_name,
        listen: args.listen.to_string(),
    });

    let scope = WatchScope {
        namespace: None,
        pods_on_node: Some(node.clone()),
        ..WatchScope::default()
    };
    let truth = watch_truth(&conn, &scope, Arc::new(SystemClock));
    let mut cfg = session_config(&args.dns, ServiceFilter::default(), false);
    cfg.paths.node = Some(node.clone());
    let dns_service = cfg.paths.dns_service.clone();
    let zone = cfg.names.zone.clone();
    let mut session = Session::new(cfg, SyncState::new(Time::now(), scope.kinds()));
    let mut tracker = source.as_ref().map(|s| {
        let kind = s.datapath().path_kind();
        let info = PathInfo {
            id: format!("{}/{node}", kind.as_str()),
            kind,
            description: format!("datapath {} on {node}", kind.as_str()),
            node: Some(node.clone()),
        };
        let idx = session.engine.add_path(info, args.datapath_lag);
        let mut t = DatapathTracker::new(node.clone(), idx);
        t.set_family(s.datapath().family());
        t
    });
    let dp_path_info = tracker
        .as_ref()
        .and_then(|t| session.engine.path(t.path()).cloned());
    // Sweeps of headless names are the watch's job; the agent probes them on bursts only
    // (the sweep period is long) and checks DNS health on its own schedule.
    let settings = probe_settings(&args.dns, Duration::from_secs(300))?;
    metrics.truth_synced.set(0);
    let mut p = Pipeline::start(
        session,
        truth.boxed(),
        settings,
        Some(writer.sender()),
        Some(Arc::clone(&metrics)),
        cancel.clone(),
    );

    // DNS health task.
    let (paths_tx, paths_rx) = watch::channel(Vec::<DnsPath>::new());
    let (health_tx, mut health_rx) = mpsc::channel::<HealthProbe>(256);
    let health_name = Name::from_ascii(format!(
        "{}.{}.svc.{}.",
        dns_service.name,
        dns_service.namespace,
        zone.trim_end_matches('.')
    ))
    .with_context(|| format!("building the DNS health name for {dns_service} in zone {zone}"))?;
    tokio::spawn(health_loop(
        paths_rx,
        p.budget(),
        health_name,
        QueryConfig {
            timeout: args.dns.query_timeout,
            ..QueryConfig::default()
        },
        args.dns_health_interval,
        health_tx,
        cancel.child_token(),
    ));
    let mut health = DnsHealth::new(HealthConfig::default());
    let mut last_verdict = HealthVerdict::Unknown;

    // Datapath reads.
    let mut cap = CostCap::new(CostConfig {
        max_cpu: args.max_cpu / 100.0,
        min_period: args.min_audit_period,
        max_period: args.max_audit_period,
        ..CostConfig::default()
    });
    let mut schedule = ReadSchedule::new(args.reread_interval, args.reread_for);
    let (read_tx, mut read_rx) =
        mpsc::channel::<(ReadReason, Time, Result<ReadOutcome, ReaderError>)>(4);
    let mut read_tasks: JoinSet<()> = JoinSet::new();
    let mut last_read_error: Option<String> = None;
    // The detection read counts as the first one once the truth is synced.
    let mut pending_first = first_read.map(|o| (Time::now(), o));

    let mut pruner = RetentionPruner::new(args.retention);
    let mut synced_sent = false;
    let mut paths_sent: Vec<String> = Vec::new();
    let mut open_before: BTreeMap<(PathIdx, ServiceKey, Target, Discrepancy), bool> =
        BTreeMap::new();
    loop {
        let step = p.next().await;
        let now = Time::now();
        match step {
            Step::Stopped => break,
            Step::Truth(r, changes) => {
                ready.store(p.session.judging(), Ordering::Relaxed);
                if let crate::kube::TruthEvent::WatchFailed { kind, error } = &r.event {
                    tracing::warn!(%kind, %error, "watch failed; retrying with backoff (truth gap)");
                }
                if let Some(t) = tracker.as_mut() {
                    let out = t.on_truth(
                        &p.session.truth,
                        &mut p.session.engine,
                        &r.event,
                        &changes,
                        r.at,
                    );
                    if out.changed && synced_sent {
                        schedule.on_change(now);
                    }
                    emit_events(&printer, &p, &out.events);
                    p.engine_events(out.events).await;
                }
                if !synced_sent && p.session.synced() {
                    synced_sent = true;
                    tracing::info!("truth synced");
                    printer.line(&Line::Synced { at: r.at });
                }
                let ids: Vec<String> = p
                    .session
                    .dns_paths()
                    .iter()
                    .map(|d| d.id().to_string())
                    .collect();
                if ids != paths_sent {
                    health.retain_paths(&ids);
                    paths_sent = ids;
                    let _ = paths_tx.send(p.session.dns_paths().to_vec());
                }
            }
            Step::Tick(now) => {
                ready.store(p.session.judging(), Ordering::Relaxed);
                pruner.tick(now, &writer.sender()).await;
            }
            Step::Probe => {}
        }

        // Finished reads.
        let mut results = Vec::new();
        if synced_sent && let Some((at, o)) = pending_first.take() {
            schedule.started(at);
            results.push((ReadReason::Initial, at, Ok(o)));
        }
        while let Ok(r) = read_rx.try_recv() {
            results.push(r);
        }
        for (reason, started, result) in results {
            let Some(t) = tracker.as_mut() else { continue };
            let dp = source.as_ref().map_or("none", |s| s.datapath().as_str());
            match result {
                Ok(o) => {
                    let before = readers::thread_cpu();
                    let out = t.on_read(&p.session.truth, &mut p.session.engine, &o.table, started);
                    let diff_cpu = readers::thread_cpu_since(before);
                    // The audit's cost: the dump program, the parse and the diff.
                    cap.record(now, o.cpu() + diff_cpu);
                    let period = cap.audit_period();
                    schedule.finished(now, period);
                    if let Some(info) = &dp_path_info {
                        for obs in out.recorded {
                            let _ = writer
                                .sender()
                                .send(LedgerOp::Observation {
                                    path: info.clone(),
                                    observation: obs,
                                })
                                .await;
                        }
                    }
                    emit_events(&printer, &p, &out.events);
                    p.engine_events(out.events).await;
                    let stale_now = t.stale_now(&p.session.engine);
                    let view = ReadView {
                        reason: Some(reason),
                        at: Some(started),
                        cpu_s: (o.cpu() + diff_cpu).as_secs_f64(),
                        child_cpu_s: o.child_cpu.as_secs_f64(),
                        parse_cpu_s: o.parse_cpu.as_secs_f64(),
                        diff_cpu_s: diff_cpu.as_secs_f64(),
                        wall_s: o.wall.as_secs_f64(),
                        bytes: o.bytes,
                        frontends: o.table.frontends.len(),
                        backends: o.table.backend_count(),
                        services: out.services,
                        unknown_frontends: out.unknown_frontends,
                        skipped_unknown: o.table.skipped.unknown,
                    };
                    am.read_cpu.set(view.cpu_s);
                    am.read_cpu_total.inc_by(view.cpu_s);
                    am.audit_period.set(period.as_secs_f64());
                    am.reads
                        .get_or_create(&ReadLabels {
                            datapath: dp.to_string(),
                            reason: reason.as_str().to_string(),
                        })
                        .inc();
                    if reason != ReadReason::Reread {
                        tracing::info!(
                            datapath = dp,
                            reason = reason.as_str(),
                            cpu_s = view.cpu_s,
                            child_cpu_s = view.child_cpu_s,
                            parse_cpu_s = view.parse_cpu_s,
                            diff_cpu_s = view.diff_cpu_s,
                            wall_s = view.wall_s,
                            bytes = view.bytes,
                            frontends = view.frontends,
                            backends = view.backends,
                            audit_period_s = period.as_secs_f64(),
                            stale_now,
                            "datapath read"
                        );
                    }
                    printer.line(&Line::Read {
                        read: &view,
                        audit_period_s: period.as_secs_f64(),
                        stale_now,
                    });
                    last_read_error = None;
                    let (reads, spent) = cap.totals();
                    let mut st = lock(&status);
                    st.last_read = view;
                    st.audit_period_s = period.as_secs_f64();
                    st.reads = reads;
                    st.read_cpu_total_s = spent.as_secs_f64();
                    st.datapath_error = None;
                    st.missing_capability = None;
                }
                Err(e) => {
                    let period = cap.audit_period();
                    schedule.finished(now, period);
                    am.read_errors
                        .get_or_create(&ReadErrorLabels {
                            datapath: dp.to_string(),
                            error: e.label().to_string(),
                        })
                        .inc();
                    let text = e.to_string();
                    if last_read_error.as_deref() != Some(text.as_str()) {
                        tracing::error!(datapath = dp, error = %text, capability = e.missing_capability().unwrap_or(""), "reading the datapath failed; DNS probing continues");
                        printer.line(&Line::ReaderError {
                            datapath: dp,
                            error: text.clone(),
                            capability: e.missing_capability(),
                        });
                        last_read_error = Some(text.clone());
                    }
                    // The datapath is unreadable: say so to the engine (counted, not stale).
                    if let Some(info) = &dp_path_info {
                        let obs = Observation {
                            path: t.path(),
                            service: dns_service.clone(),
                            at: now,
                            result: ObservationResult::Failed(FailureReason::Unreadable(
                                text.clone(),
                            )),
                            latency: None,
                        };
                        let _ = p.session.engine.observe(&obs);
                        let _ = writer
                            .sender()
                            .send(LedgerOp::Observation {
                                path: info.clone(),
                                observation: obs,
                            })
                            .await;
                    }
                    let mut st = lock(&status);
                    st.datapath_error = Some(text);
                    st.missing_capability = e.missing_capability().map(str::to_string);
                }
            }
        }

        // Start the next read when due and within the CPU budget.
        if synced_sent
            && let (Some(src), Some(t)) = (source.as_ref(), tracker.as_ref())
            && let Some(reason) = schedule.due(now, t.unconverged(&p.session.engine))
            && cap.may_read(now)
        {
            schedule.started(now);
            let src = src.clone();
            let tx = read_tx.clone();
            let timeout = args.read_timeout;
            let kill = Arc::clone(&kill_readers);
            read_tasks.spawn(async move {
                let r = src.read(timeout, kill).await;
                let _ = tx.send((reason, now, r)).await;
            });
        }
        while read_tasks.try_join_next().is_some() {}

        // DNS health.
        let mut health_changed = false;
        while let Ok(h) = health_rx.try_recv() {
            let kind = h.path.info.kind;
            metrics
                .probe_queries
                .get_or_create(&QueryLabels {
                    path_kind: kind.to_string(),
                })
                .inc();
            if let Some(f) = &h.failure {
                metrics
                    .probe_errors
                    .get_or_create(&ErrorLabels {
                        path_kind: kind.to_string(),
                        reason: f.label().to_string(),
                    })
                    .inc();
            }
            health.record(
                h.path.id(),
                kind,
                h.at,
                h.failure.as_ref().map(ToString::to_string),
            );
            health_changed = true;
            if let Some((idx, info)) = p
                .session
                .engine
                .paths()
                .find(|(_, i)| i.id == h.path.id())
                .map(|(i, info)| (i, info.clone()))
            {
                let observation = Observation {
                    path: idx,
                    service: dns_service.clone(),
                    at: h.at,
                    result: match h.failure {
                        Some(f) => ObservationResult::Failed(f),
                        None => ObservationResult::Held(h.held),
                    },
                    latency: Some(h.latency),
                };
                let _ = writer
                    .sender()
                    .send(LedgerOp::Observation {
                        path: info,
                        observation,
                    })
                    .await;
            }
        }
        if health_changed {
            let verdict = health.verdict();
            let paths = health.paths();
            // One line per change of state, not per probe.
            if std::mem::discriminant(&verdict) != std::mem::discriminant(&last_verdict) {
                if verdict.is_finding() {
                    tracing::warn!(node = %node, verdict = ?verdict, "DNS through the kube-dns ClusterIP fails from this node while the CoreDNS pods answer");
                } else {
                    tracing::info!(node = %node, verdict = ?verdict, "DNS health");
                }
                printer.line(&Line::DnsHealth {
                    verdict: &verdict,
                    paths: &paths,
                });
            }
            am.dns_cluster_ip_failing
                .get_or_create(&NodeLabels { node: node.clone() })
                .set(i64::from(verdict.is_finding()));
            last_verdict = verdict.clone();
            let mut st = lock(&status);
            st.dns = Some(verdict);
            st.dns_paths = paths;
        }

        // Status snapshot of open trackings; trackings the engine closed or declared stuck
        // on its own tick are reported here.
        {
            let engine = &p.session.engine;
            let open: Vec<TrackingView> = engine
                .open_trackings()
                .filter_map(|t| view(&p, t))
                .collect();
            let mut now_open = BTreeMap::new();
            for t in engine.open_trackings() {
                now_open.insert((t.path, t.service.clone(), t.target, t.kind), t.was_stuck);
            }
            for (key, was_stuck) in &now_open {
                if *was_stuck
                    && open_before.get(key) == Some(&false)
                    && let Some(t) = engine.open_trackings().find(|t| {
                        (t.path, &t.service, t.target, t.kind) == (key.0, &key.1, key.2, key.3)
                    })
                {
                    emit_events(&printer, &p, &[EngineEvent::Stuck(t.clone())]);
                }
            }
            for key in open_before.keys().filter(|k| !now_open.contains_key(*k)) {
                if let Some(t) = engine.closed_trackings().iter().rev().find(|t| {
                    (t.path, &t.service, t.target, t.kind) == (key.0, &key.1, key.2, key.3)
                }) {
                    emit_events(&printer, &p, &[EngineEvent::Closed(t.clone())]);
                }
            }
            open_before = now_open;
            let mut st = lock(&status);
            st.open = open;
            st.truth_synced = p.session.judging();
        }
    }

    // Clean shutdown within 5 s: kill readers, stop probing, flush the ledger with a deadline.
    kill_readers.store(true, Ordering::Relaxed);
    read_tasks.abort_all();
    p.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(2), p.flush()).await;
    drop(p);
    let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
    let closed = tokio::time::timeout(
        Duration::from_secs(1),
        tokio::task::spawn_blocking(move || writer.close()),
    )
    .await;
    if closed.is_err() {
        tracing::warn!(
            "the ledger writer did not finish within the shutdown deadline; committed data is safe"
        );
    }
    printer.line(&Line::Stopped { at: Time::now() });
    tracing::info!("ghostip agent stopped");
    Ok(Outcome::Clean)
}

fn lock(s: &Mutex<AgentStatus>) -> std::sync::MutexGuard<'_, AgentStatus> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

fn view(p: &Pipeline, t: &Tracking) -> Option<TrackingView> {
    let info = p.session.engine.path(t.path)?;
    let start = t.change.map_or(t.opened, |c| c.t0);
    Some(TrackingView {
        path: info.id.clone(),
        layer: info.layer(),
        service: t.service.to_string(),
        target: t.target.to_string(),
        kind: format!("{:?}", t.kind).to_lowercase(),
        verdict: t.verdict.label().to_string(),
        since: start,
        last_seen: t.last_wrong,
        converged_by: t.converged_by,
        window_s: t.window_upper().map(|d| d.as_secs_f64()),
        former_pod: p.session.former_pod(t.target.ip),
    })
}

fn emit_events(printer: &Printer, p: &Pipeline, events: &[EngineEvent]) {
    for ev in events {
        let (change, t) = match ev {
            EngineEvent::Opened(t) => ("opened", t),
            EngineEvent::Converging(t) => ("converging", t),
            EngineEvent::Reappeared(t) => ("reappeared", t),
            EngineEvent::Stuck(t) => ("stuck", t),
            EngineEvent::Closed(t) => ("closed", t),
        };
        let Some(v) = view(p, t) else { continue };
        // Every truth change opens trackings on every node until its next read: only
        // verdicts that are findings are warnings.
        if v.layer == Layer::Datapath {
            match change {
                "stuck" => {
                    tracing::warn!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, "datapath stuck: still differs from the truth")
                }
                "closed" if t.verdict.is_finding() => {
                    tracing::warn!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, verdict = %v.verdict, window_s = v.window_s.unwrap_or(0.0), "datapath converged late")
                }
                "closed" => {
                    tracing::info!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, verdict = %v.verdict, window_s = v.window_s.unwrap_or(0.0), "datapath converged")
                }
                _ => {
                    tracing::debug!(path = %v.path, service = %v.service, target = %v.target, kind = %v.kind, change, "datapath tracking")
                }
            }
        }
        printer.line(&Line::Tracking {
            change,
            tracking: &v,
        });
    }
}

/// One query per DNS path every `interval`, each taking a cell of the global budget.
async fn health_loop(
    paths: watch::Receiver<Vec<DnsPath>>,
    budget: Budget,
    name: Name,
    config: QueryConfig,
    interval: Duration,
    tx: mpsc::Sender<HealthProbe>,
    cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let round: Vec<DnsPath> = paths
            .borrow()
            .iter()
            .filter(|p| {
                matches!(
                    p.info.kind,
                    PathKind::DnsPod | PathKind::DnsClusterIp | PathKind::DnsNodeLocal
                )
            })
            .cloned()
            .collect();
        let mut set = JoinSet::new();
        for path in round {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = budget.acquire() => {}
            }
            let name = name.clone();
            let tx = tx.clone();
            set.spawn(async move {
                let started = tokio::time::Instant::now();
                let r = query::query(path.server, &name, QueryType::A, &config).await;
                let (failure, held) = match r {
                    Ok(a) => (None, a.held()),
                    Err(e) => (Some(e.reason), Vec::new()),
                };
                let _ = tx
                    .send(HealthProbe {
                        path,
                        at: Time::now(),
                        failure,
                        latency: started.elapsed(),
                        held,
                    })
                    .await;
            });
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = async { while set.join_next().await.is_some() {} } => {}
        }
    }
}
