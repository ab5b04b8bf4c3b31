//! The agent's DNS health check: one query per DNS path of this node at a low rate, within the prober's budget, judged by the runtime's [`DnsHealth`].

use std::time::Duration;

use ghostip_core::{FailureReason, HeldTarget, Observation, ObservationResult, PathKind, Time};
use hickory_proto::rr::Name;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::super::pipeline::Pipeline;
use super::datapath::Outputs;
use super::metrics::NodeLabels;
use super::status::{Line, lock};
use crate::agent::health::{DnsHealth, HealthConfig, HealthVerdict};
use crate::dns::DnsPath;
use crate::dns::budget::Budget;
use crate::dns::query::{self, QueryConfig, QueryType};
use crate::ledger::LedgerOp;
use crate::metrics::{ErrorLabels, Metrics, QueryLabels};
use ghostip_session::layers::dns::DnsModel;

/// The result of one health probe.
struct HealthProbe {
    path: DnsPath,
    at: Time,
    failure: Option<FailureReason>,
    latency: Duration,
    held: Vec<HeldTarget>,
}

/// The health check of this node's DNS paths.
pub(super) struct DnsHealthCheck {
    node: String,
    health: DnsHealth,
    last_verdict: HealthVerdict,
    paths_tx: watch::Sender<Vec<DnsPath>>,
    paths_sent: Vec<String>,
    rx: mpsc::Receiver<HealthProbe>,
    service: ghostip_core::ServiceKey,
}

impl DnsHealthCheck {
    /// Starts the probing task: `name` (the DNS Service's own name) every `interval` on
    /// every DNS path, each query taking a cell of `budget`.
    pub fn start(
        node: &str,
        service: ghostip_core::ServiceKey,
        name: Name,
        budget: Budget,
        config: QueryConfig,
        interval: Duration,
        cancel: CancellationToken,
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
        }
    }

    /// Follows the DNS layer's paths (CoreDNS pods come and go).
    pub fn follow_paths(&mut self, p: &Pipeline) {
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
    pub async fn drain(&mut self, p: &Pipeline, out: &Outputs<'_>, metrics: &Metrics) {
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
                .engine
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
            out.printer.line(&Line::DnsHealth {
                verdict: &verdict,
                paths: &paths,
            });
        }
        out.metrics
            .dns_cluster_ip_failing
            .get_or_create(&NodeLabels {
                node: self.node.clone(),
            })
            .set(i64::from(verdict.is_finding()));
        self.last_verdict = verdict.clone();
        let mut st = lock(out.status);
        st.dns = Some(verdict);
        st.dns_paths = paths;
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
