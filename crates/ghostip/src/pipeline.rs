//! The async pipeline around a [`Session`]: truth watch, the DNS layer's prober, connect probes, the node-local layer adapters, ledger, metrics.
//!
//! [`Pipeline::next`] waits for whatever happens first (a truth event, a probe answer, a
//! connect result, the 250 ms tick) and applies it to the session, forwarding the DNS
//! model's commands to the prober and writes to the ledger. Every command's session has
//! the DNS layer ([`DnsModel`]) and its prober; the agent adds its node-local
//! [`LayerAdapter`]s ([`crate::layers::LAYERS`]), which the pipeline keeps and drives
//! ([`Pipeline::adapters_on_truth`] after a truth event, [`Pipeline::step_adapters`] after
//! every step), each feeding its reads to its model and the engine events through
//! [`Pipeline::act`].

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use ghostip_core::engine::{Discrepancy, EngineEvent, Tracking, Verdict};
use ghostip_core::truth::ServiceChange;
use ghostip_core::{Layer, Time};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::clock::TokioClock;
use crate::kube::{Received, ResourceKind, SyncTransition, TruthEvent, TruthKey, TruthObject};
use crate::layers::LayerAdapter;
use crate::layers::dns::budget::Budget;
use crate::layers::dns::connect::ConnectProber;
use crate::layers::dns::prober::{ProbeEvent, ProbeStats, Prober, ProberConfig};
use crate::layers::dns::query::QueryConfig;
use crate::ledger::{FindingKind, FindingRecord, LedgerOp, LedgerSender, LedgerWriter};
use crate::metrics::{ErrorLabels, Metrics, QueryLabels, StaleLabels, StuckLabels};
use ghostip_core::Clock;
use ghostip_session::layers::components::coredns::CoreDnsModel;
use ghostip_session::layers::dns::DnsModel;
use ghostip_session::layers::dns::probe::ProbeCommand;
use ghostip_session::{Actions, ConnectRequest, Session};

/// What happened in one step.
#[derive(Debug)]
pub enum Step {
    /// A truth event was applied.
    Truth {
        /// The event.
        received: Box<Received>,
        /// The Services whose endpoints it changed.
        changes: Vec<ServiceChange>,
        /// The engine events the layers' reactions produced (already sent to the ledger and
        /// the metrics).
        events: Vec<EngineEvent>,
    },
    /// A probe answer was applied.
    Probe,
    /// Time advanced.
    Tick(Time),
    /// The truth stream ended (only in tests) or the pipeline was cancelled.
    Stopped,
}

/// Probing settings.
#[derive(Clone, Debug)]
pub struct ProbeSettings {
    /// Global budget.
    pub qps: NonZeroU32,
    /// Burst interval.
    pub interval: Duration,
    /// Sweep period.
    pub sweep: Duration,
    /// Per-query timeout.
    pub query_timeout: Duration,
}

/// The running pipeline.
pub struct Pipeline {
    /// The session.
    pub session: Session,
    truth: BoxStream<'static, Received>,
    probe_tx: mpsc::Sender<ProbeCommand>,
    probe_rx: mpsc::Receiver<ProbeEvent>,
    dead_tx: mpsc::Sender<(IpAddr, Time)>,
    dead_rx: mpsc::Receiver<(IpAddr, Time)>,
    connect: Arc<ConnectProber<TokioClock>>,
    connect_tasks: JoinSet<()>,
    ledger: Option<LedgerSender>,
    metrics: Option<Arc<Metrics>>,
    stats: Arc<ProbeStats>,
    budget: Budget,
    reported: crate::layers::dns::prober::StatsSnapshot,
    ticker: tokio::time::Interval,
    clock: TokioClock,
    cancel: CancellationToken,
    /// Engine events seen (for live progress).
    pub events_seen: u64,
    /// Stop a service's burst once nothing is left to measure (`watch`); a rollout keeps
    /// probing its own services until it ends.
    pub auto_stop_bursts: bool,
    adapters: Vec<Box<dyn LayerAdapter>>,
    burst_filter: Option<BurstFilter>,
    /// Whether the DNS model's sweep reaches the prober (an agent under a cluster budget
    /// leaves the sweep to `watch`).
    pub sweep: bool,
}

/// Whether this process probes a Service's bursts (the agent's burst sample).
pub type BurstFilter = Box<dyn Fn(&ghostip_core::ServiceKey) -> bool + Send>;

/// Whether the DNS model's command reaches the prober: a burst only when `bursts` accepts
/// its Service, the sweep only with `sweep`.
fn forwarded(cmd: &ProbeCommand, bursts: Option<&BurstFilter>, sweep: bool) -> bool {
    match (cmd, bursts) {
        (ProbeCommand::Burst { service, .. }, Some(accept)) => accept(service),
        (ProbeCommand::SetSweep(_), _) => sweep,
        _ => true,
    }
}

impl Pipeline {
    /// Starts the prober and wires everything.
    pub fn start(
        session: Session,
        truth: BoxStream<'static, Received>,
        probe: ProbeSettings,
        ledger: Option<LedgerSender>,
        metrics: Option<Arc<Metrics>>,
        cancel: CancellationToken,
    ) -> Self {
        let cfg = ProberConfig {
            queries_per_second: probe.qps,
            burst_interval: probe.interval,
            sweep_period: probe.sweep,
            ..ProberConfig::default()
        };
        let query = QueryConfig {
            timeout: probe.query_timeout,
            ..QueryConfig::default()
        };
        let prober = Prober::new(cfg, query);
        let stats = prober.stats();
        let budget = prober.budget();
        // Connect probes have their own small budget so exposure checks never starve DNS.
        let connect_budget = Budget::per_second(NonZeroU32::new(20).unwrap_or(NonZeroU32::MIN));
        let connect = Arc::new(ConnectProber::new(
            connect_budget,
            Duration::from_millis(500),
            TokioClock::new(),
        ));
        let (probe_tx, cmd_rx) = mpsc::channel(256);
        let (ev_tx, probe_rx) = mpsc::channel(4096);
        tokio::spawn(prober.run(cmd_rx, ev_tx, cancel.child_token()));
        let (dead_tx, dead_rx) = mpsc::channel(256);
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            session,
            truth,
            probe_tx,
            probe_rx,
            dead_tx,
            dead_rx,
            connect,
            connect_tasks: JoinSet::new(),
            ledger,
            metrics,
            stats,
            budget,
            reported: Default::default(),
            ticker,
            clock: TokioClock::new(),
            cancel,
            events_seen: 0,
            auto_stop_bursts: true,
            adapters: Vec::new(),
            burst_filter: None,
            sweep: true,
        }
    }

    /// Starts a pipeline that records to the ledger and exports its metrics (`watch`, the
    /// agent): `ghostip_truth_synced` reads 0 until the first relist completes.
    pub fn start_recording(
        session: Session,
        truth: BoxStream<'static, Received>,
        probe: ProbeSettings,
        ledger: LedgerSender,
        metrics: &Arc<Metrics>,
        cancel: CancellationToken,
    ) -> Self {
        metrics.truth_synced.set(0);
        Self::start(
            session,
            truth,
            probe,
            Some(ledger),
            Some(Arc::clone(metrics)),
            cancel,
        )
    }

    /// Adds a layer's adapter; the pipeline drives it from now on.
    pub fn add_adapter(&mut self, adapter: Box<dyn LayerAdapter>) {
        self.adapters.push(adapter);
    }

    /// The running adapters, in the order they were added.
    pub fn adapters(&self) -> &[Box<dyn LayerAdapter>] {
        &self.adapters
    }

    /// Tells every adapter that a truth event was applied.
    pub fn adapters_on_truth(&mut self, now: Time, synced: bool) {
        let mut adapters = std::mem::take(&mut self.adapters);
        for a in &mut adapters {
            a.on_truth(self, now, synced);
        }
        adapters.append(&mut self.adapters);
        self.adapters = adapters;
    }

    /// Lets every adapter feed what finished to the session and start what is due.
    pub async fn step_adapters(&mut self, now: Time, synced: bool) {
        let mut adapters = std::mem::take(&mut self.adapters);
        for a in &mut adapters {
            a.step(self, now, synced).await;
        }
        adapters.append(&mut self.adapters);
        self.adapters = adapters;
    }

    /// The ledger, when the command records (`watch`, the agent).
    pub fn ledger(&self) -> Option<&LedgerSender> {
        self.ledger.as_ref()
    }

    /// The token that stops the pipeline; adapters' background tasks take a child.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The prober's global query budget (other DNS probes share it).
    pub fn budget(&self) -> Budget {
        self.budget.clone()
    }

    /// From now on only the bursts of Services `filter` accepts go to the prober.
    pub fn set_burst_filter(&mut self, filter: BurstFilter) {
        self.burst_filter = Some(filter);
    }

    /// Sends a command to the prober (e.g. an extra burst).
    pub async fn probe(&self, cmd: ProbeCommand) {
        let _ = self.probe_tx.send(cmd).await;
    }

    /// Waits for and applies the next thing that happens.
    pub async fn next(&mut self) -> Step {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Step::Stopped,
            r = self.truth.next() => match r {
                Some(r) => {
                    let mut actions = self.session.on_truth(&r);
                    let changes = std::mem::take(&mut actions.changes);
                    let events = actions.events.clone();
                    self.ledger_truth(&r, &changes).await;
                    self.act(actions).await;
                    self.send_probe_commands().await;
                    Step::Truth { received: Box::new(r), changes, events }
                }
                None => Step::Stopped,
            },
            Some((ip, at)) = self.dead_rx.recv() => {
                self.session.on_dead(ip, at);
                Step::Probe
            }
            Some(ev) = self.probe_rx.recv() => {
                let scope = self.session.layer::<DnsModel>().and_then(|dns| {
                    dns.scope(self.session.truth(), &ev.observation.service, &ev.probe)
                });
                let events = match scope {
                    Some(scope) => self.session.observe_scoped(&ev.observation, &scope),
                    None => Vec::new(),
                };
                if let Some(l) = &self.ledger
                    && let Some(path) = self.session.engine().path(ev.observation.path) {
                        let _ = l.send(LedgerOp::Observation { path: path.clone(), observation: ev.observation.clone() }).await;
                    }
                self.engine_events(events).await;
                Step::Probe
            }
            _ = self.ticker.tick() => {
                let now = self.clock.now();
                let events = self.session.tick(now);
                self.engine_events(events).await;
                for svc in self.session.idle_services().into_iter().filter(|_| self.auto_stop_bursts) {
                    let _ = self.probe_tx.try_send(ProbeCommand::StopBurst { service: svc });
                }
                self.update_gauges();
                Step::Tick(now)
            }
        }
    }

    /// Forwards what the DNS model asked of the prober.
    async fn send_probe_commands(&mut self) {
        let commands = self
            .session
            .layer_mut::<DnsModel>()
            .map(DnsModel::take_commands)
            .unwrap_or_default();
        for cmd in commands {
            if forwarded(&cmd, self.burst_filter.as_ref(), self.sweep) {
                let _ = self.probe_tx.send(cmd).await;
            }
        }
    }

    /// Carries out a session step's actions: connect probes, truth gaps, engine events.
    pub async fn act(&mut self, actions: Actions) {
        for req in actions.connect {
            self.spawn_connect(req);
        }
        for t in &actions.sync {
            if let Some(l) = &self.ledger {
                let op = match t {
                    SyncTransition::GapStarted { at, error, kind } => LedgerOp::TruthGapStart {
                        at: *at,
                        reason: format!("{kind}: {error}"),
                    },
                    SyncTransition::GapEnded { at, .. } => LedgerOp::TruthGapEnd { at: *at },
                };
                let _ = l.send(op).await;
            }
            if let Some(m) = &self.metrics {
                m.truth_synced.set(i64::from(self.session.judging()));
            }
        }
        self.engine_events(actions.events).await;
    }

    fn spawn_connect(&mut self, req: ConnectRequest) {
        let prober = Arc::clone(&self.connect);
        let tx = self.dead_tx.clone();
        let cancel = self.cancel.child_token();
        self.connect_tasks.spawn(async move {
            let deadline = tokio::time::Instant::now() + req.for_at_most;
            // Bounded: one attempt per 250 ms until the endpoint stops accepting or the deadline.
            while tokio::time::Instant::now() < deadline && !cancel.is_cancelled() {
                let r = prober.probe(req.target).await;
                if !r.outcome.is_accepting() {
                    let _ = tx.send((req.target.ip(), r.at)).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    }

    /// Writes a truth event's pods and endpoint memberships to the ledger; a slice's changes
    /// carry the change time the truth gave them (its bounded trigger time).
    async fn ledger_truth(&self, r: &Received, changes: &[ServiceChange]) {
        let Some(l) = &self.ledger else { return };
        let op = match &r.event {
            TruthEvent::InitApply(TruthObject::Pod(p)) | TruthEvent::Apply(TruthObject::Pod(p)) => {
                LedgerOp::ApplyPod {
                    pod: p.clone(),
                    at: r.at,
                }
            }
            TruthEvent::Delete(TruthKey::Pod(p)) => LedgerOp::PodGone {
                pod: p.clone(),
                at: r.at,
            },
            TruthEvent::Init(ResourceKind::Pods) => LedgerOp::BeginPodRelist,
            TruthEvent::InitDone(ResourceKind::Pods) => LedgerOp::FinishPodRelist { at: r.at },
            TruthEvent::InitApply(TruthObject::Slice(s))
            | TruthEvent::Apply(TruthObject::Slice(s)) => {
                let key = s.service_key();
                let endpoints = self
                    .session
                    .truth()
                    .slices_of(&key)
                    .flat_map(|s| s.endpoints.iter().map(|e| s.record(e)))
                    .collect();
                let at = changes
                    .iter()
                    .find(|c| c.service == key)
                    .map_or_else(|| ghostip_core::ChangeTime::received_at(r.at), |c| c.at);
                LedgerOp::SyncMemberships {
                    service: key,
                    endpoints,
                    at,
                }
            }
            _ => return,
        };
        let _ = l.send(op).await;
    }

    /// Sends engine events to the metrics and, for closed, stuck and over-lag trackings, to
    /// the ledger (an open tracking's finding is updated when it closes).
    pub async fn engine_events(&mut self, events: Vec<EngineEvent>) {
        self.events_seen += events.len() as u64;
        for ev in events {
            if let Some(m) = &self.metrics {
                let engine = self.session.engine();
                m.observe_event(&ev, |t| engine.path(t.path).map(|p| (p.layer(), p.kind)));
            }
            let (EngineEvent::Closed(t) | EngineEvent::Stuck(t) | EngineEvent::OverExpectedLag(t)) =
                &ev
            else {
                continue;
            };
            if let EngineEvent::OverExpectedLag(t) = &ev {
                log_over_lag(&self.session, t);
            }
            if matches!(t.verdict, Verdict::Unjudged(_)) && t.kind == Discrepancy::Missing {
                continue;
            }
            if let Some(l) = &self.ledger
                && let Some(rec) = self.finding(t, matches!(ev, EngineEvent::Stuck(_)))
            {
                self.log_beside_coredns(&rec);
                let _ = l.send(LedgerOp::Finding(rec)).await;
            }
        }
    }

    /// Beside a DNS finding, what CoreDNS said over the same minutes (`watch` with
    /// `--coredns-metrics-interval`): its `dns_programming_duration` p99 over [t0,
    /// converged_by or now] for the Service's kind, in the log line only (the ledger's
    /// findings keep their schema). Not a judgement.
    fn log_beside_coredns(&self, rec: &FindingRecord) {
        if rec.layer != ghostip_session::layers::dns::DNS.as_str() {
            return;
        }
        let Some(model) = self.session.layer::<CoreDnsModel>() else {
            return;
        };
        let end = rec.converged_by.unwrap_or_else(|| self.clock.now());
        let word = model.beside(self.session.truth(), &rec.service, rec.t0, end);
        tracing::info!(
            path = %rec.path_id,
            service = %rec.service,
            target = %rec.target,
            verdict = %rec.verdict,
            t0 = %rec.t0,
            converged_by = rec.converged_by.map(|t| t.to_string()).unwrap_or_default(),
            component = "coredns",
            service_kind = word.as_ref().map(|w| w.service_kind.as_str()).unwrap_or_default(),
            component_p99_seconds = word.as_ref().and_then(|w| w.p99_s),
            component_observations = word.as_ref().map(|w| w.observations),
            component_from = word.as_ref().map(|w| w.from.to_string()).unwrap_or_default(),
            component_to = word.as_ref().map(|w| w.to.to_string()).unwrap_or_default(),
            component_pods = word.as_ref().map(|w| w.pods),
            "DNS finding beside CoreDNS's own programming latency over the same minutes"
        );
    }

    fn finding(&self, t: &Tracking, stuck: bool) -> Option<FindingRecord> {
        let path = self.session.engine().path(t.path)?;
        let change = t.change;
        let exposure = t
            .exposure(self.session.engine().death(t.target.ip))
            .map(|x| x.upper);
        // The pod behind the target: still listed (terminating), or gone.
        let former_pod = self
            .session
            .endpoint_pod(&t.service, t.target.ip)
            .and_then(|s| {
                s.split_once('/').map(|(ns, n)| ghostip_core::PodRef {
                    namespace: ns.into(),
                    name: n.into(),
                    uid: String::new(),
                })
            });
        Some(FindingRecord {
            kind: if stuck {
                FindingKind::Stuck
            } else if t.kind == Discrepancy::Stale {
                FindingKind::Stale
            } else {
                FindingKind::Missing
            },
            layer: path.layer().to_string(),
            path_id: path.id.clone(),
            path_kind: path.kind.to_string(),
            service: t.service.clone(),
            target: t.target,
            t0: change.map_or(t.opened, |c| c.t0),
            received: change.map_or(t.opened, |c| c.received),
            trigger: change.and_then(|c| c.trigger()),
            t0_correction: change
                .and_then(|c| c.corrected)
                .map(|c| c.reason.label().to_string()),
            last_seen: t.last_wrong,
            converged_by: t.converged_by,
            window: t.window_upper(),
            expected_lag: Some(t.expected_lag),
            verdict: t.verdict.label().to_string(),
            exposure,
            former_pod,
        })
    }

    fn update_gauges(&mut self) {
        let Some(m) = &self.metrics else { return };
        let snap = self.stats.snapshot();
        for ((kind, source), n) in &snap.queries {
            let key = (*kind, *source);
            let before = self.reported.queries.get(&key).copied().unwrap_or(0);
            m.probe_queries
                .get_or_create(&QueryLabels {
                    path_kind: kind.to_string(),
                })
                .inc_by(n.saturating_sub(before));
        }
        for ((kind, reason), n) in &snap.errors {
            let before = self
                .reported
                .errors
                .get(&(*kind, *reason))
                .copied()
                .unwrap_or(0);
            m.probe_errors
                .get_or_create(&ErrorLabels {
                    path_kind: kind.to_string(),
                    reason: (*reason).to_string(),
                })
                .inc_by(n.saturating_sub(before));
        }
        self.reported = snap;
        let engine = self.session.engine();
        let stale = engine.stale_now();
        let mut over_lag: std::collections::HashMap<ghostip_core::PathIdx, i64> =
            Default::default();
        for t in engine.open_trackings() {
            if t.verdict == Verdict::OverExpectedLag && t.converged_by.is_none() {
                *over_lag.entry(t.path).or_default() += 1;
            }
        }
        let mut stuck_by_node: std::collections::BTreeMap<(Layer, String), i64> =
            Default::default();
        for (idx, info) in engine.paths() {
            let node = info.node.clone().unwrap_or_default();
            m.stale_endpoints
                .get_or_create(&StaleLabels {
                    layer: info.layer().to_string(),
                    path_kind: info.kind.to_string(),
                    node: node.clone(),
                })
                .set(stale.get(&idx).copied().unwrap_or(0) as i64);
            m.over_lag_endpoints
                .get_or_create(&StaleLabels {
                    layer: info.layer().to_string(),
                    path_kind: info.kind.to_string(),
                    node: node.clone(),
                })
                .set(over_lag.get(&idx).copied().unwrap_or(0));
            let stuck = engine
                .open_trackings()
                .any(|t| t.path == idx && t.was_stuck && t.converged_by.is_none());
            *stuck_by_node.entry((info.layer(), node)).or_default() += i64::from(stuck);
        }
        for ((layer, node), n) in stuck_by_node {
            m.stuck_paths
                .get_or_create(&StuckLabels {
                    layer: layer.to_string(),
                    node,
                })
                .set(n);
        }
    }

    /// Probe statistics.
    pub fn stats(&self) -> crate::layers::dns::prober::StatsSnapshot {
        self.stats.snapshot()
    }

    /// Flushes the ledger.
    pub async fn flush(&self) {
        if let Some(l) = &self.ledger {
            let _ = l.flush().await;
        }
    }

    /// Brings the ledger's findings of the trackings still open (over their expected lag,
    /// or stuck) up to now: their last observation while wrong, so a reader of the ledger
    /// after this process ends sees how long they lasted, not when they first became
    /// findings.
    async fn record_open_findings(&self) {
        let Some(l) = &self.ledger else { return };
        let records: Vec<FindingRecord> = self
            .session
            .engine()
            .open_trackings()
            .filter(|t| t.verdict.is_finding())
            .filter_map(|t| self.finding(t, t.verdict == Verdict::Stuck))
            .collect();
        for rec in records {
            let _ = l.send(LedgerOp::Finding(rec)).await;
        }
    }

    /// Stops background tasks, the adapters' included.
    pub fn shutdown(&mut self) {
        self.cancel.cancel();
        self.connect_tasks.abort_all();
        for a in &mut self.adapters {
            a.shutdown();
        }
    }

    /// A clean shutdown within `flush` + 2 s: stops probing, flushes the ledger (at most
    /// `flush`), waits for the HTTP server (at most 1 s) and closes the ledger writer (at most
    /// 1 s; what it committed is safe either way).
    pub async fn close(
        mut self,
        flush: Duration,
        server: JoinHandle<std::io::Result<()>>,
        writer: LedgerWriter,
    ) {
        self.shutdown();
        let _ = tokio::time::timeout(flush, async {
            self.record_open_findings().await;
            self.flush().await;
        })
        .await;
        drop(self);
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
    }
}

/// A warning for a tracking that went past its path's expected lag while still open: the
/// layer misbehaves now, not only when (if) it converges.
fn log_over_lag(session: &Session, t: &Tracking) {
    let Some(path) = session.engine().path(t.path) else {
        return;
    };
    let since = t.change.map_or(t.opened, |c| c.t0);
    tracing::warn!(
        path = %path.id,
        layer = %path.layer(),
        service = %t.service,
        target = %t.target,
        kind = ?t.kind,
        since = %since,
        expected_lag_s = t.expected_lag.as_secs_f64(),
        last_seen = ?t.last_wrong,
        former_pod = session.endpoint_pod(&t.service, t.target.ip).unwrap_or_default(),
        "still serving past its expected lag"
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ghostip_core::ServiceKey;
    use ghostip_session::layers::dns::budget::in_burst_sample;

    #[test]
    fn an_agent_forwards_only_its_sampled_bursts_and_no_sweep() {
        let burst = |name: &str| ProbeCommand::Burst {
            service: ServiceKey::new("shop", name),
            names: Vec::new(),
            until: Time::from_second(1_800_000_000).unwrap(),
        };
        // The filter the agent installs: node-7 of 1000, about 3 per Service.
        let filter: BurstFilter = Box::new(|s: &ServiceKey| in_burst_sample(s, "node-7", 1000, 3));
        let names: Vec<String> = (0..2000).map(|i| format!("svc-{i}")).collect();
        let sent = names
            .iter()
            .filter(|n| forwarded(&burst(n), Some(&filter), false))
            .count();
        // 3 / 1000 of 2000 Services: 6 expected.
        assert!((1..=15).contains(&sent), "{sent}");
        let expected: Vec<&String> = names
            .iter()
            .filter(|n| in_burst_sample(&ServiceKey::new("shop", n.as_str()), "node-7", 1000, 3))
            .collect();
        assert_eq!(sent, expected.len());
        assert!(!forwarded(
            &ProbeCommand::SetSweep(Vec::new()),
            Some(&filter),
            false
        ));
        assert!(forwarded(
            &ProbeCommand::SetPaths(Vec::new()),
            Some(&filter),
            false
        ));
        let stop = ProbeCommand::StopBurst {
            service: ServiceKey::new("shop", "svc-0"),
        };
        assert!(forwarded(&stop, Some(&filter), false));
        // watch (no filter, sweeping): everything.
        assert!(forwarded(&burst("svc-0"), None, true));
        assert!(forwarded(&ProbeCommand::SetSweep(Vec::new()), None, true));
    }
}
