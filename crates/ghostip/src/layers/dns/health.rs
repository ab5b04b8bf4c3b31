//! The agent's DNS health check: the kube-dns ClusterIP through this node's datapath every round and the CoreDNS pod IPs in turn, within this agent's share of the cluster's DNS budget, judged by the runtime's [`DnsHealth`].
//!
//! The share ([`AgentRates`]) follows the node count (the agents' DaemonSet, see
//! [`crate::kube::node_count`]) and the CoreDNS pods: it sets the rounds here, the rate of
//! the prober's budget and which Services' bursts this node probes (the burst sample).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use futures::future::LocalBoxFuture;
use ghostip_core::{FailureReason, HeldTarget, Layer, Observation, ObservationResult, Time};
use ghostip_session::layers::dns::DnsModel;
use ghostip_session::layers::dns::budget::{
    AgentFlags, AgentRates, BURST_SAMPLE, ClusterBudget, in_burst_sample,
};
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
    /// This agent's share of `--cluster-qps` and the rates it gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetStatus>,
}

/// The `budget` part of the DNS section of `/status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct BudgetStatus {
    /// `--cluster-qps`; `null` when off.
    pub cluster_qps: Option<u32>,
    /// The node count sharing it (the agents' DaemonSet); `null` until read.
    pub nodes: Option<u32>,
    /// Queries per second this agent may send.
    pub share_qps: f64,
    /// Of which the health rounds.
    pub health_qps: f64,
    /// What is left for bursts.
    pub burst_qps: f64,
    /// The ClusterIP probe's interval, seconds.
    pub cluster_ip_interval_s: f64,
    /// A CoreDNS pod IP every this many rounds; `null`: only after a failing ClusterIP probe.
    pub pod_every: Option<u32>,
    /// Whether only a sample of nodes probes each Service's bursts.
    pub sampled_bursts: bool,
    /// How long a stale node takes to be flagged, seconds.
    pub time_to_flag_s: f64,
    /// The share does not pay for one ClusterIP probe per interval.
    pub over_budget: bool,
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
        let args = setup.args;
        let flags = agent_flags(args);
        let (count_tx, count_rx) = watch::channel(None);
        if flags.cluster.is_some() {
            tokio::spawn(crate::kube::node_count::follow_node_count(
                setup.client.clone(),
                args.daemonset_namespace.clone(),
                args.daemonset.clone(),
                count_tx,
                p.cancel_token().child_token(),
            ));
        }
        let share = Share::new(flags, setup.node, count_rx, p);
        let check = DnsHealthCheck::start(
            setup.node,
            service.clone(),
            name,
            share,
            QueryConfig {
                timeout: args.dns.query_timeout,
                ..QueryConfig::default()
            },
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
    share: Share,
}

/// The flags an agent's DNS rates come from.
fn agent_flags(args: &crate::cli::AgentArgs) -> AgentFlags {
    AgentFlags {
        cluster: ClusterBudget::from_flag(args.cluster_qps),
        qps: args.dns.qps,
        health_interval: args.dns_health_interval,
        query_timeout: args.dns.query_timeout,
    }
}

/// This agent's share of the cluster's DNS budget, kept up to date with the node count and
/// the CoreDNS pods.
struct Share {
    flags: AgentFlags,
    node_count: watch::Receiver<Option<u32>>,
    /// The node count the burst sample reads (0: unknown, no burst).
    sample_nodes: Arc<AtomicU32>,
    rates: watch::Sender<AgentRates>,
    /// The health rounds' own cells (`None`: the prober's budget, without a cluster budget).
    health_budget: Option<Budget>,
    prober_budget: Budget,
    last: Option<(Option<u32>, u32)>,
}

impl Share {
    /// The share before anything is known; in a cluster budget, bursts go through the
    /// sample from now on.
    fn new(
        flags: AgentFlags,
        node: &str,
        node_count: watch::Receiver<Option<u32>>,
        p: &mut Pipeline,
    ) -> Self {
        let rates = Self::rates_of(&flags, None, 1);
        let sample_nodes = Arc::new(AtomicU32::new(0));
        let health_budget = flags
            .cluster
            .map(|_| Budget::per_second_f64(rates.health_qps));
        let prober_budget = p.budget();
        if flags.cluster.is_some() {
            // The slow sweep of every headless name is watch's; this agent's prober only
            // bursts, for the Services whose sample holds this node.
            p.sweep = false;
            prober_budget.set_rate(rates.burst_qps);
            let node = node.to_string();
            let nodes = Arc::clone(&sample_nodes);
            p.set_burst_filter(Box::new(move |service: &ghostip_core::ServiceKey| {
                let n = nodes.load(Ordering::Relaxed);
                n > 0 && in_burst_sample(service, &node, n, BURST_SAMPLE)
            }));
        }
        let (tx, _) = watch::channel(rates);
        Self {
            flags,
            node_count,
            sample_nodes,
            rates: tx,
            health_budget,
            prober_budget,
            last: None,
        }
    }

    fn rates_of(flags: &AgentFlags, nodes: Option<u32>, dns_pods: u32) -> AgentRates {
        match (flags.cluster, nodes) {
            (None, _) => AgentRates::derive(flags, 1, dns_pods),
            (Some(_), Some(n)) => AgentRates::derive(flags, n, dns_pods),
            (Some(_), None) => AgentRates::unknown_count(flags, dns_pods),
        }
    }

    /// Recomputes the rates when the node count or the number of CoreDNS pods changed.
    fn update(&mut self, dns_pods: u32, node: &str) {
        let nodes = *self.node_count.borrow_and_update();
        if self.last == Some((nodes, dns_pods)) {
            return;
        }
        self.last = Some((nodes, dns_pods));
        let r = Self::rates_of(&self.flags, nodes, dns_pods);
        if self.flags.cluster.is_some() {
            self.sample_nodes
                .store(nodes.unwrap_or(0), Ordering::Relaxed);
            self.prober_budget.set_rate(r.burst_qps);
            if let Some(b) = &self.health_budget {
                b.set_rate(r.health_qps);
            }
        }
        if r.over_budget {
            tracing::warn!(node, nodes = ?nodes, share_qps = r.share, cluster_ip_interval_s = r.cluster_ip_interval.as_secs_f64(), time_to_flag_s = r.time_to_flag.as_secs_f64(), "this agent's share of --cluster-qps does not pay for one ClusterIP probe per --dns-health-interval: the probe runs as often as the share allows");
        } else {
            tracing::info!(node, nodes = ?nodes, dns_pods, share_qps = r.share, health_qps = r.health_qps, burst_qps = r.burst_qps, pod_every = ?r.pod_every, time_to_flag_s = r.time_to_flag.as_secs_f64(), "DNS probe rates");
        }
        self.rates.send_replace(r);
    }

    /// The share as `/status` shows it.
    fn status(&self) -> Option<BudgetStatus> {
        let (nodes, _) = self.last?;
        let r = *self.rates.borrow();
        Some(BudgetStatus {
            cluster_qps: self.flags.cluster.map(|c| c.cluster_qps),
            nodes,
            share_qps: r.share,
            health_qps: r.health_qps,
            burst_qps: r.burst_qps,
            cluster_ip_interval_s: r.cluster_ip_interval.as_secs_f64(),
            pod_every: r.pod_every,
            sampled_bursts: r.sampled_bursts,
            time_to_flag_s: r.time_to_flag.as_secs_f64(),
            over_budget: r.over_budget,
        })
    }
}

impl LayerAdapter for DnsHealthCheck {
    fn layer(&self) -> Layer {
        DNS
    }

    fn on_truth(&mut self, p: &mut Pipeline, _now: Time, _synced: bool) {
        self.follow_paths(p);
        self.update_share();
    }

    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        _now: Time,
        _synced: bool,
    ) -> LocalBoxFuture<'a, ()> {
        self.update_share();
        Box::pin(self.drain(p))
    }

    fn snapshot(&self) -> Arc<dyn LayerSnapshot> {
        Arc::clone(&self.status) as Arc<dyn LayerSnapshot>
    }
}

impl DnsHealthCheck {
    /// Starts the probing task: `name` (the DNS Service's own name) on this node's DNS
    /// paths in rounds paced by `share`, each query taking a cell of its budget.
    fn start(
        node: &str,
        service: ghostip_core::ServiceKey,
        name: Name,
        share: Share,
        config: QueryConfig,
        cancel: CancellationToken,
        out: NodeOutputs,
    ) -> Self {
        let (paths_tx, paths_rx) = watch::channel(Vec::<DnsPath>::new());
        let (tx, rx) = mpsc::channel(256);
        let budget = share
            .health_budget
            .clone()
            .unwrap_or_else(|| share.prober_budget.clone());
        tokio::spawn(health_loop(
            paths_rx,
            budget,
            name,
            config,
            share.rates.subscribe(),
            tx,
            cancel,
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
            share,
        }
    }

    /// Follows the node count and the CoreDNS pods into this agent's rates.
    fn update_share(&mut self) {
        let pods = self
            .paths_sent
            .iter()
            .filter(|id| id.starts_with("dns-pod/"))
            .count();
        self.share
            .update(u32::try_from(pods).unwrap_or(u32::MAX).max(1), &self.node);
        let budget = self.share.status();
        if self.status.budget != budget {
            let mut status = (*self.status).clone();
            status.budget = budget;
            self.status = Arc::new(status);
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
            budget: self.share.status(),
        });
    }
}

/// Rounds of queries, one every `rates`' ClusterIP interval: the node-local paths (the
/// ClusterIP, NodeLocal DNSCache) every round, the CoreDNS pod IPs as `rates` say
/// ([`AgentRates::pods_in_round`]), each query taking a cell of `budget`.
async fn health_loop(
    paths: watch::Receiver<Vec<DnsPath>>,
    budget: Budget,
    name: Name,
    config: QueryConfig,
    mut rates: watch::Receiver<AgentRates>,
    tx: mpsc::Sender<HealthProbe>,
    cancel: CancellationToken,
) {
    let mut round: u64 = 0;
    let mut cluster_ip_failed = false;
    let mut next = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let r = *rates.borrow_and_update();
        next = (next + r.cluster_ip_interval.max(Duration::from_millis(100)))
            .max(tokio::time::Instant::now());
        let (node_local, pods): (Vec<DnsPath>, Vec<DnsPath>) = paths
            .borrow()
            .iter()
            .filter(|p| matches!(p.info.kind, DNS_POD | DNS_CLUSTER_IP | DNS_NODE_LOCAL))
            .cloned()
            .partition(|p| p.info.kind != DNS_POD);
        let picked = r.pods_in_round(round, pods.len(), cluster_ip_failed);
        round += 1;
        let this_round = node_local
            .into_iter()
            .chain(picked.into_iter().filter_map(|i| pods.get(i).cloned()));
        let mut set = JoinSet::new();
        for path in this_round {
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
                let failed_cluster_ip = failure.is_some() && path.info.kind == DNS_CLUSTER_IP;
                let _ = tx
                    .send(HealthProbe {
                        path,
                        at: crate::clock::wall_now(),
                        failure,
                        latency: started.elapsed(),
                        held,
                    })
                    .await;
                failed_cluster_ip
            });
        }
        cluster_ip_failed = false;
        tokio::select! {
            () = cancel.cancelled() => return,
            () = async {
                while let Some(done) = set.join_next().await {
                    cluster_ip_failed |= done.unwrap_or(false);
                }
            } => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser as _;

    fn rates(extra: &[&str], nodes: Option<u32>, dns_pods: u32) -> AgentRates {
        let mut argv = vec!["ghostip", "agent", "--node-name", "node-2"];
        argv.extend_from_slice(extra);
        let cli = Cli::try_parse_from(argv).unwrap();
        let Command::Agent(args) = cli.command else {
            unreachable!()
        };
        Share::rates_of(&agent_flags(&args), nodes, dns_pods)
    }

    #[test]
    fn effective_rates_from_the_flags() {
        // Defaults on the 3-node lab (2 CoreDNS pods): 1 query per second at rest.
        let r = rates(&[], Some(3), 2);
        assert_eq!(r.health_qps, 1.0);
        assert_eq!(r.cluster_ip_interval, Duration::from_secs(2));
        assert!(r.sampled_bursts);
        // 5000 nodes: 0.6 per second, flagged within 9 s.
        let r = rates(&[], Some(5000), 2);
        assert!((r.health_qps - 0.6).abs() < 1e-9);
        assert_eq!(r.time_to_flag, Duration::from_secs(9));
        // The DaemonSet not read yet: the ClusterIP only.
        let r = rates(&[], None, 2);
        assert_eq!((r.health_qps, r.burst_qps, r.pod_every), (0.5, 0.0, None));
        // --cluster-qps 0: as before the budget, every path every round, up to --qps.
        let r = rates(&["--cluster-qps", "0", "--qps", "50"], None, 2);
        assert_eq!((r.health_qps, r.share), (1.5, 50.0));
        assert!(!r.sampled_bursts);
        // A longer interval and a smaller budget.
        let r = rates(
            &["--dns-health-interval", "4s", "--cluster-qps", "1000"],
            Some(1000),
            2,
        );
        // 900 / 1000 = 0.9/s: the ClusterIP every 4 s (0.25/s), a pod IP every round.
        assert_eq!(r.cluster_ip_interval, Duration::from_secs(4));
        assert_eq!(r.pod_every, Some(1));
        assert!((r.burst_qps - 0.4).abs() < 1e-9);
        assert_eq!(r.time_to_flag, Duration::from_secs(17));
    }

    #[tokio::test]
    async fn the_share_follows_the_node_count_into_the_budgets_and_the_status() {
        let cli = Cli::try_parse_from(["ghostip", "agent", "--node-name", "node-1"]).unwrap();
        let Command::Agent(args) = cli.command else {
            unreachable!()
        };
        let (count_tx, count_rx) = watch::channel(None);
        let (rates, _) = watch::channel(AgentRates::unknown_count(&agent_flags(&args), 2));
        let mut share = Share {
            flags: agent_flags(&args),
            node_count: count_rx,
            sample_nodes: Arc::new(AtomicU32::new(0)),
            rates,
            health_budget: Some(Budget::per_second_f64(0.5)),
            prober_budget: Budget::per_second_f64(0.0),
            last: None,
        };
        assert_eq!(share.status(), None);
        share.update(2, "node-1");
        let s = share.status().unwrap();
        assert_eq!((s.nodes, s.health_qps, s.burst_qps), (None, 0.5, 0.0));
        assert_eq!(share.sample_nodes.load(Ordering::Relaxed), 0);
        // The DaemonSet says 5000 nodes.
        count_tx.send_replace(Some(5000));
        share.update(2, "node-1");
        let s = share.status().unwrap();
        assert_eq!((s.cluster_qps, s.nodes), (Some(3366), Some(5000)));
        assert!((s.share_qps - 0.60588).abs() < 1e-9);
        assert_eq!(
            (s.pod_every, s.sampled_bursts, s.over_budget),
            (Some(5), true, false)
        );
        assert_eq!(s.time_to_flag_s, 9.0);
        assert_eq!(share.sample_nodes.load(Ordering::Relaxed), 5000);
        assert_eq!(
            share.health_budget.as_ref().unwrap().period(),
            Duration::from_nanos(1_666_666_667)
        );
        // 0.00588/s left for bursts: one cell every 170 s.
        assert_eq!(share.prober_budget.period().as_secs(), 170);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["nodes"], 5000);
        assert_eq!(json["pod_every"], 5);
    }
}
