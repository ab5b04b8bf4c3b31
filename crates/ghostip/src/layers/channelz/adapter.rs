//! `watch`'s channelz adapter: finds the opted-in client pods, reads each one's channelz at a bounded rate, and feeds the reads to the model, the ledger, the metrics and the log.
//!
//! Bounded everywhere: pods are listed every `--channelz-discovery-interval` (pages of 500, at most
//! [`MAX_LIST_PAGES`](super::discovery::MAX_LIST_PAGES)); at most `--channelz-max-clients` pods are read, each at most once per
//! `--channelz-interval`, `--channelz-concurrency` reads in flight, each read within its
//! own [`ReadBounds`], every gRPC request of every read within `--channelz-qps` (the
//! schedule and the budget: [`Poller`]). A pod that cannot be read is an error for that pod (logged when it
//! changes, counted, shown in the snapshot); the other pods and layers keep going.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use ghostip_core::{Layer, Time};
use ghostip_session::layers::channelz::{
    CHANNELZ, ChannelzModel, ClientPod, ReadOutcome, StaleSubchannel,
};
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::budget::ReadBudget;
use super::discovery::{ListError, OptedIn, list_opted_in};
use super::metrics::{ChannelzMetrics, ChannelzReadLabels};
use super::poll::{PollConfig, PolledRead, Poller, grpc_reader};
use super::reader::ReadBounds;
use crate::cli::ChannelzArgs;
use crate::layers::{ClusterSetup, LayerAdapter, LayerSnapshot};
use crate::ledger::LedgerOp;
use crate::pipeline::Pipeline;

/// One client's state in the snapshot.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClientStatus {
    /// Where its channelz is served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channelz: Option<SocketAddr>,
    /// The last successful read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_read: Option<Time>,
    /// Channels and subchannels in it.
    pub channels: usize,
    /// Subchannels in it.
    pub subchannels: usize,
    /// It stopped at a bound.
    pub truncated: bool,
    /// Seconds between its last two reads: the effective interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<f64>,
    /// Why the pod cannot be read now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The layer's section of a snapshot.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChannelzStatus {
    /// Opted-in pods, `namespace/name`.
    pub clients: BTreeMap<String, ClientStatus>,
    /// Stale subchannels in the clients' last reads.
    pub stale: Vec<StaleSubchannel>,
    /// Why the pods cannot be listed, when they cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery_error: Option<String>,
    /// Opted-in pods left out by `--channelz-max-clients`.
    pub skipped: usize,
    /// The request budget and what it costs.
    pub budget: BudgetStatus,
}

/// The request budget in a snapshot.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BudgetStatus {
    /// `--channelz-qps`.
    pub qps: u32,
    /// Requests sent.
    pub requests: u64,
    /// Time requests waited for their slot, summed.
    pub waited_seconds: f64,
    /// `--channelz-interval`.
    pub interval_seconds: f64,
    /// The longest time between two reads of one client, over the clients' last reads:
    /// above `interval_seconds` when the budget cannot cover every client once per interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_interval_seconds: Option<f64>,
}

impl LayerSnapshot for ChannelzStatus {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    fn problem(&self) -> Option<String> {
        self.discovery_error.clone()
    }
}

/// The adapter.
pub struct ChannelzReads {
    client: kube::Client,
    cfg: ChannelzArgs,
    pods: BTreeMap<ClientPod, OptedIn>,
    /// The pods last handed to the poller differ from `pods`.
    pods_changed: bool,
    next_discovery: Option<Time>,
    discovery: Option<JoinHandle<Result<Vec<OptedIn>, ListError>>>,
    to_poller: watch::Sender<BTreeMap<ClientPod, SocketAddr>>,
    from_poller: mpsc::Receiver<PolledRead>,
    poller: JoinHandle<()>,
    cancel: CancellationToken,
    budget: ReadBudget,
    /// Requests and wait already counted in the metrics.
    counted: (u64, Duration),
    /// Each pod's last effective interval.
    intervals: BTreeMap<ClientPod, Duration>,
    metrics: Arc<ChannelzMetrics>,
    status: Arc<ChannelzStatus>,
}

/// Starts `watch`'s channelz adapter.
pub(crate) fn start<'a>(
    setup: &'a ClusterSetup<'a>,
    p: &'a mut Pipeline,
) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>> {
    Box::pin(async move {
        let cfg = setup.channelz.clone();
        let bounds = ReadBounds {
            deadline: cfg.channelz_deadline,
            max_subchannels: cfg.channelz_max_subchannels as usize,
            ..ReadBounds::default()
        };
        let qps = NonZeroU32::new(cfg.channelz_qps).unwrap_or(NonZeroU32::MIN);
        let budget = ReadBudget::new(qps);
        let poll = PollConfig {
            interval: cfg.channelz_interval,
            concurrency: cfg.channelz_concurrency as usize,
            bounds,
        };
        let (to_poller, pods_rx) = watch::channel(BTreeMap::new());
        // Bounded: a read waits here while the pipeline is busy.
        let (out, from_poller) = mpsc::channel(256);
        let cancel = p.cancel_token().child_token();
        let poller = tokio::spawn(Poller::new(poll, Some(budget.clone()), grpc_reader()).run(
            pods_rx,
            out,
            cancel.clone(),
        ));
        let status = ChannelzStatus {
            budget: BudgetStatus {
                qps: qps.get(),
                interval_seconds: cfg.channelz_interval.as_secs_f64(),
                ..BudgetStatus::default()
            },
            ..ChannelzStatus::default()
        };
        Ok(Some(Box::new(ChannelzReads {
            client: setup.client.clone(),
            cfg,
            pods: BTreeMap::new(),
            pods_changed: false,
            next_discovery: None,
            discovery: None,
            to_poller,
            from_poller,
            poller,
            cancel,
            budget,
            counted: (0, Duration::ZERO),
            intervals: BTreeMap::new(),
            metrics: setup.metrics_of(CHANNELZ),
            status: Arc::new(status),
        }) as Box<dyn LayerAdapter>))
    })
}

impl LayerAdapter for ChannelzReads {
    fn layer(&self) -> Layer {
        CHANNELZ
    }

    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        now: Time,
        synced: bool,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            self.finish_discovery(p, now).await;
            while let Ok(done) = self.from_poller.try_recv() {
                self.read_done(p, done).await;
            }
            self.count_budget();
            if synced && self.pods_changed {
                let pods = self
                    .pods
                    .iter()
                    .filter_map(|(k, o)| o.channelz.as_ref().ok().map(|a| (k.clone(), *a)))
                    .collect();
                self.to_poller.send_replace(pods);
                self.pods_changed = false;
            }
        })
    }

    fn snapshot(&self) -> Arc<dyn LayerSnapshot> {
        Arc::clone(&self.status) as Arc<dyn LayerSnapshot>
    }

    fn shutdown(&mut self) {
        self.cancel.cancel();
        self.poller.abort();
        if let Some(d) = self.discovery.take() {
            d.abort();
        }
    }
}

impl ChannelzReads {
    async fn finish_discovery(&mut self, p: &mut Pipeline, now: Time) {
        if self.next_discovery.is_none_or(|t| now >= t) && self.discovery.is_none() {
            self.discovery = Some(tokio::spawn(list_opted_in(self.client.clone(), None)));
            self.next_discovery = now.checked_add(self.cfg.channelz_discovery_interval).ok();
        }
        let Some(handle) = self.discovery.take_if(|h| h.is_finished()) else {
            return;
        };
        let found = match handle.await {
            Ok(r) => r.map_err(|e| e.message),
            Err(e) => Err(format!("listing pods for channelz: {e}")),
        };
        let status = Arc::make_mut(&mut self.status);
        let found = match found {
            Ok(found) => {
                if status.discovery_error.take().is_some() {
                    tracing::info!("channelz: pods can be listed again");
                }
                found
            }
            Err(e) => {
                if status.discovery_error.as_deref() != Some(e.as_str()) {
                    tracing::error!(error = %e, "channelz: cannot list pods; no client is read, the other layers keep working");
                }
                status.discovery_error = Some(e);
                return;
            }
        };
        let max = self.cfg.channelz_max_clients as usize;
        let mut next: BTreeMap<ClientPod, OptedIn> = BTreeMap::new();
        for o in found {
            let key = ClientPod {
                namespace: o.namespace.clone(),
                name: o.name.clone(),
            };
            next.insert(key, o);
        }
        let skipped = next.len().saturating_sub(max);
        if skipped > 0 && status.skipped != skipped {
            tracing::warn!(
                skipped,
                max,
                "channelz: more opted-in pods than --channelz-max-clients; the rest are not read"
            );
        }
        status.skipped = skipped;
        let next: BTreeMap<ClientPod, OptedIn> = next.into_iter().take(max).collect();
        let gone: Vec<ClientPod> = self
            .pods
            .keys()
            .filter(|k| !next.contains_key(*k))
            .cloned()
            .collect();
        for pod in gone {
            self.intervals.remove(&pod);
            status.clients.remove(&pod.to_string());
            if let Some(((), actions)) = p
                .session
                .with_layer_cx::<ChannelzModel, _>(|m, cx| m.forget(cx, &pod))
            {
                p.act(actions).await;
            }
        }
        for (pod, o) in &next {
            let entry = status.clients.entry(pod.to_string()).or_default();
            entry.channelz = o.channelz.as_ref().ok().copied();
            if let Err(e) = &o.channelz {
                if entry.error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(pod = %pod, error = %e, "channelz: the pod opted in but cannot be read");
                }
                entry.error = Some(e.clone());
            }
        }
        self.metrics
            .clients
            .set(i64::try_from(next.len()).unwrap_or(i64::MAX));
        if self.pods != next {
            self.pods = next;
            self.pods_changed = true;
        }
    }

    /// Brings the budget's figures to the metrics and the snapshot.
    fn count_budget(&mut self) {
        let (requests, waited) = (self.budget.granted(), self.budget.waited());
        self.metrics
            .requests
            .inc_by(requests.saturating_sub(self.counted.0));
        self.metrics
            .budget_wait
            .inc_by(waited.saturating_sub(self.counted.1).as_secs_f64());
        self.counted = (requests, waited);
        let longest = self.intervals.values().max().map(Duration::as_secs_f64);
        self.metrics.effective_interval.set(longest.unwrap_or(0.0));
        let b = &mut Arc::make_mut(&mut self.status).budget;
        b.requests = requests;
        b.waited_seconds = waited.as_secs_f64();
        b.effective_interval_seconds = longest;
    }

    async fn read_done(&mut self, p: &mut Pipeline, done: PolledRead) {
        let PolledRead {
            pod,
            at,
            interval,
            result,
        } = done;
        let Some(opted) = self.pods.get(&pod) else {
            return;
        };
        let lag = opted.expected_lag;
        if let Some(i) = interval {
            self.intervals.insert(pod.clone(), i);
        }
        let status = Arc::make_mut(&mut self.status);
        let entry = status.clients.entry(pod.to_string()).or_default();
        entry.interval_seconds = interval.map(|i| i.as_secs_f64());
        let read = match result {
            Ok(r) => r,
            Err(e) => {
                self.metrics
                    .reads
                    .get_or_create(&ChannelzReadLabels {
                        result: e.label().into(),
                    })
                    .inc();
                let text = e.to_string();
                if entry.error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(pod = %pod, error = %text, "channelz: reading the client failed; the other clients and layers keep working");
                }
                entry.error = Some(text);
                return;
            }
        };
        if entry.error.take().is_some() {
            tracing::info!(pod = %pod, "channelz: the client can be read again");
        }
        entry.last_read = Some(at);
        entry.channels = read.channels.len();
        entry.subchannels = read.channels.iter().map(|c| c.subchannels.len()).sum();
        entry.truncated = read.truncated;
        self.metrics
            .reads
            .get_or_create(&ChannelzReadLabels {
                result: if read.truncated { "truncated" } else { "ok" }.into(),
            })
            .inc();
        let Some((outcome, actions)) = p.session.with_layer_cx::<ChannelzModel, _>(|m, cx| {
            m.set_expected_lag(cx, &pod, lag);
            m.on_read(cx, &pod, &read, at)
        }) else {
            return;
        };
        record(p, &outcome).await;
        p.act(actions).await;
        self.report_stale(p);
    }

    /// Logs the stale subchannels that appeared, and updates the snapshot and the gauge.
    fn report_stale(&mut self, p: &Pipeline) {
        let Some(model) = p.session.layer::<ChannelzModel>() else {
            return;
        };
        let status = Arc::make_mut(&mut self.status);
        let now: Vec<StaleSubchannel> = model.stale().cloned().collect();
        for s in &now {
            let known = status
                .stale
                .iter()
                .any(|o| o.client == s.client && o.channel == s.channel && o.address == s.address);
            if !known {
                tracing::warn!(
                    client = %s.client,
                    channel = %s.channel,
                    service = %s.service,
                    address = %s.address,
                    state = ?s.state,
                    former_owner = s.former_owner.as_deref().unwrap_or(""),
                    "channelz: a client's balancer still holds an address its Service no longer lists"
                );
            }
        }
        self.metrics
            .stale
            .set(i64::try_from(now.len()).unwrap_or(i64::MAX));
        status.stale = now;
    }
}

/// Sends the observations worth keeping to the ledger.
async fn record(p: &Pipeline, outcome: &ReadOutcome) {
    let Some(ledger) = p.ledger() else { return };
    for obs in &outcome.recorded {
        if let Some(path) = p.session.engine().path(obs.path) {
            let _ = ledger
                .send(LedgerOp::Observation {
                    path: path.clone(),
                    observation: obs.clone(),
                })
                .await;
        }
    }
}
