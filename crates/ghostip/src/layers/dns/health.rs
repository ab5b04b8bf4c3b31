//! The agent's DNS health check: one query per DNS path of this node at a low rate, within the prober's budget, judged by the runtime's [`DnsHealth`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::future::LocalBoxFuture;
use ghostip_core::{FailureReason, HeldTarget, Layer, Observation, ObservationResult, Time};
use ghostip_session::layers::dns::DnsModel;
use ghostip_session::layers::dns::health::{DnsHealth, HealthConfig, HealthVerdict, PathHealth};
use ghostip_session::layers::dns::names::QueryType;
use ghostip_session::layers::dns::paths::DnsPath;
use ghostip_session::layers::dns::{DNS, DNS_CLUSTER_IP, DNS_NODE_LOCAL, DNS_POD};
use hickory_proto::rr::Name;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::budget::Budget;
use super::metrics::{DnsHealthMetrics, NodeLabels};
use super::query::{self, QueryConfig};
use crate::layers::node::NodeOutputs;
use crate::layers::{LayerAdapter, LayerSnapshot, NodeSetup};
use crate::ledger::LedgerOp;
use crate::metrics::{ErrorLabels, QueryLabels};
use crate::pipeline::Pipeline;

/// The DNS layer's section of the agent's `/status`: the health of DNS from this node.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct DnsHealthStatus {
    /// The verdict over every DNS path of this node; `null` before the first probe.
    pub health: Option<HealthVerdict>,
    /// Each path's last probes.
    pub paths: Vec<PathHealth>,
}

impl LayerSnapshot for DnsHealthStatus {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    fn problem(&self) -> Option<String> {
        self.health
            .as_ref()
            .filter(|v| v.is_finding())
            .map(|_| "DNS through the kube-dns ClusterIP fails from this node while the CoreDNS pods answer".to_string())
    }
}

/// The DNS health check's JSON line (`-o json`).
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum HealthLine<'a> {
    DnsHealth {
        #[serde(flatten)]
        verdict: &'a HealthVerdict,
        paths: &'a [PathHealth],
    },
}

/// Starts the node's DNS health check: the DNS Service's own name on every DNS path of this
/// node every `--dns-health-interval`, inside the prober's global budget.
pub(super) fn start<'a>(
    setup: &'a NodeSetup<'a>,
    p: &'a mut Pipeline,
) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>> {
    Box::pin(async move {
        let service = setup.dns_service;
        let name = Name::from_ascii(format!(
            "{}.{}.svc.{}.",
            service.name,
            service.namespace,
            setup.zone.trim_end_matches('.')
        ))
        .with_context(|| {
            format!(
                "building the DNS health name for {service} in zone {}",
                setup.zone
            )
        })?;
        let check = DnsHealthCheck::start(
            setup.node,
            service.clone(),
            name,
            p.budget(),
            QueryConfig {
                timeout: setup.args.dns.query_timeout,
                ..QueryConfig::default()
            },
            setup.args.dns_health_interval,
            p.cancel_token().child_token(),
            setup.out.clone(),
        );
        Ok(Some(Box::new(check) as Box<dyn LayerAdapter>))
    })
}

/// The result of one health probe.
struct HealthProbe {
    path: DnsPath,
    at: Time,
    failure: Option<FailureReason>,
    latency: Duration,
    held: Vec<HeldTarget>,
}

/// The health check of this node's DNS paths.
struct DnsHealthCheck {
    node: String,
    health: DnsHealth,
    last_verdict: HealthVerdict,
    paths_tx: watch::Sender<Vec<DnsPath>>,
    paths_sent: Vec<String>,
    rx: mpsc::Receiver<HealthProbe>,
    service: ghostip_core::ServiceKey,
    out: NodeOutputs,
    metrics: Arc<DnsHealthMetrics>,
    status: Arc<DnsHealthStatus>,
}

impl LayerAdapter for DnsHealthCheck {
    fn layer(&self) -> Layer {
        DNS
    }

    fn on_truth(&mut self, p: &mut Pipeline, _now: Time, _synced: bool) {
        self.follow_paths(p);
    }

    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        _now: Time,
        _synced: bool,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(self.drain(p))
    }

    fn snapshot(&self) -> Arc<dyn LayerSnapshot> {
        Arc::clone(&self.status) as Arc<dyn LayerSnapshot>
    }
}

impl DnsHealthCheck {
    /// Starts the probing task: `name` (the DNS Service's own name) every `interval` on
    /// every DNS path, each query taking a cell of `budget`.
    #[allow(clippy::too_many_arguments)] // one call site, each argument named there
    fn start(
        node: &str,
        service: ghostip_core::ServiceKey,
        name: Name,
        budget: Budget,
        config: QueryConfig,
        interval: Duration,
        cancel: CancellationToken,
        out: NodeOutputs,
    ) -> Self {
        let (paths_tx, paths_rx) = watch::channel(Vec::<DnsPath>::new());
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(health_loop(
            paths_rx, budget, name, config, interval, tx, cancel,
        ));
        Self {
            node: node.to_string(),
            health: DnsHealth::new(HealthConfig::default()),
            last_verdict: HealthVerdict::Unknown,
            paths_tx,
            paths_sent: Vec::new(),
            rx,
            service,
            metrics: out.metrics_of(DNS),
            out,
            status: Arc::new(DnsHealthStatus::default()),
        }
    }

    /// Follows the DNS layer's paths (CoreDNS pods come and go).
    fn follow_paths(&mut self, p: &Pipeline) {
        let Some(dns) = p.session.layer::<DnsModel>() else {
            return;
        };
        let ids: Vec<String> = dns.dns_paths().iter().map(|d| d.id().to_string()).collect();
        if ids != self.paths_sent {
            self.health.retain_paths(&ids);
            self.paths_sent = ids;
            let _ = self.paths_tx.send(dns.dns_paths().to_vec());
        }
    }

    /// Records the probes that came back: metrics, ledger, verdict, `/status`.
    async fn drain(&mut self, p: &Pipeline) {
        let out = &self.out;
        let metrics = &*out.fixed;
        let mut changed = false;
        while let Ok(h) = self.rx.try_recv() {
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
            self.health.record(
                h.path.id(),
                kind,
                h.at,
                h.failure.as_ref().map(ToString::to_string),
            );
            changed = true;
            if let Some((idx, info)) = p
                .session
                .engine()
                .paths()
                .find(|(_, i)| i.id == h.path.id())
                .map(|(i, info)| (i, info.clone()))
            {
                let observation = Observation {
                    path: idx,
                    service: self.service.clone(),
                    at: h.at,
                    result: match h.failure {
                        Some(f) => ObservationResult::Failed(f),
                        None => ObservationResult::Held(h.held),
                    },
                    latency: Some(h.latency),
                };
                let _ = out
                    .ledger
                    .send(LedgerOp::Observation {
                        path: info,
                        observation,
                    })
                    .await;
            }
        }
        if !changed {
            return;
        }
        let verdict = self.health.verdict();
        let paths = self.health.paths();
        // One line per change of state, not per probe.
        if std::mem::discriminant(&verdict) != std::mem::discriminant(&self.last_verdict) {
            if verdict.is_finding() {
                tracing::warn!(node = %self.node, verdict = ?verdict, "DNS through the kube-dns ClusterIP fails from this node while the CoreDNS pods answer");
            } else {
                tracing::info!(node = %self.node, verdict = ?verdict, "DNS health");
            }
            out.printer.line(&HealthLine::DnsHealth {
                verdict: &verdict,
                paths: &paths,
            });
        }
        self.metrics
            .dns_cluster_ip_failing
            .get_or_create(&NodeLabels {
                node: self.node.clone(),
            })
            .set(i64::from(verdict.is_finding()));
        self.last_verdict = verdict.clone();
        self.status = Arc::new(DnsHealthStatus {
            health: Some(verdict),
            paths,
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
            .filter(|p| matches!(p.info.kind, DNS_POD | DNS_CLUSTER_IP | DNS_NODE_LOCAL))
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
                        at: crate::clock::wall_now(),
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
