//! The agent's datapath adapter: picks the node's datapath, runs its reads within the CPU cap, and feeds each read to the layer's pure model.
//!
//! Reads are paced by the runtime's [`ReadSchedule`] (re-reads after a truth change until
//! converged, then a periodic audit) and [`CostCap`] (the audit period follows the
//! measured CPU cost of a read); each read runs in its own task and comes back through a
//! channel, so the agent's loop never waits on a dump program.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use ghostip_core::{Layer, PathInfo, Time};
use ghostip_datapath::RunsIn;
use ghostip_datapath::layers::DATAPATH;
use ghostip_session::layers::datapath::DatapathModel;
use ghostip_session::pacing::ReadReason;
use serde::Serialize;

use super::cilium::{CiliumTarget, read_cilium};
use super::cilium_maps::{has_cilium_maps, read_cilium_maps};
use super::metrics::{DatapathMetrics, ReadErrorLabels, ReadLabels};
use super::readers::{self, Datapath, ReadOutcome, ReaderError};
use crate::cli::{AgentArgs, CiliumRead, DatapathChoice};
use crate::layers::node::{IpView, NodeOutputs, TrackingView, emit_events};
use crate::layers::reads::Reads;
use crate::layers::{LayerAdapter, LayerSnapshot, NodeSetup};
use crate::ledger::LedgerOp;
use crate::pipeline::Pipeline;

/// Where the datapath is read from.
#[derive(Clone)]
enum Source {
    Local(Datapath),
    Cilium(Datapath, kube::Client, CiliumTarget),
    /// Cilium's pinned BPF maps in this directory.
    CiliumMaps(Datapath, PathBuf),
}

impl Source {
    pub fn datapath(&self) -> Datapath {
        match self {
            Source::Local(d) | Source::Cilium(d, ..) | Source::CiliumMaps(d, _) => *d,
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
            Source::CiliumMaps(_, dir) => read_cilium_maps(dir, timeout).await,
        }
    }
}

/// Which datapath: given, or detected by reading each candidate once (that read counts as
/// the first one). `Err` when nothing was found (only DNS paths are probed, `/status` says
/// why: the error and the capability a reader lacked).
async fn choose_source(
    args: &AgentArgs,
    client: &kube::Client,
    node: &str,
    kill: &Arc<AtomicBool>,
) -> Result<(Source, Option<ReadOutcome>), (String, Option<String>)> {
    let source = match args.datapath {
        DatapathChoice::Read(dp) if dp.runs_in() == RunsIn::Node => Source::Local(dp),
        DatapathChoice::Read(dp) if args.cilium_read == CiliumRead::Maps => {
            Source::CiliumMaps(dp, args.cilium_bpf_dir.clone())
        }
        DatapathChoice::Read(dp) => Source::Cilium(
            dp,
            client.clone(),
            CiliumTarget {
                namespace: args.cilium_namespace.clone(),
                selector: args.cilium_selector.clone(),
                container: args.cilium_container.clone(),
                node: node.to_string(),
            },
        ),
        DatapathChoice::Auto => {
            // A node whose bpffs holds Cilium's services map is a Cilium node: its maps are
            // what serves the pods' service traffic, whatever kube-proxy left behind.
            let mut cilium_rejected = None;
            if has_cilium_maps(&args.cilium_bpf_dir)
                && let Some(dp) = Datapath::all().find(|d| d.runs_in() == RunsIn::CiliumAgentPod)
            {
                let source = Source::CiliumMaps(dp, args.cilium_bpf_dir.clone());
                match source
                    .clone()
                    .read(args.read_timeout, Arc::clone(kill))
                    .await
                {
                    Ok(outcome) => return Ok((source, Some(outcome))),
                    Err(e) => {
                        tracing::warn!(datapath = %dp, error = %e, "Cilium's maps are pinned but could not be read");
                        cilium_rejected = Some((dp, e.to_string()));
                    }
                }
            }
            let mut d = readers::detect(args.read_timeout, Arc::clone(kill)).await;
            d.rejected.extend(cilium_rejected);
            for (dp, why) in &d.rejected {
                tracing::info!(datapath = %dp, reason = %why, "datapath candidate not used");
            }
            match d.chosen {
                Some((dp, outcome)) => return Ok((Source::Local(dp), Some(outcome))),
                None => {
                    let why = d
                        .rejected
                        .iter()
                        .map(|(dp, e)| format!("{dp}: {e}"))
                        .collect::<Vec<_>>()
                        .join("; ");
                    tracing::error!(reasons = %why, "no kube-proxy datapath found on this node; only DNS paths are probed");
                    let capability = d.rejected.iter().find_map(|(_, e)| {
                        ["CAP_NET_ADMIN", "CAP_BPF"]
                            .into_iter()
                            .find(|c| e.contains(c))
                            .map(str::to_string)
                    });
                    return Err((format!("no datapath detected ({why})"), capability));
                }
            }
        }
    };
    Ok((source, None))
}

/// The last read.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ReadView {
    pub reason: Option<ReadReason>,
    /// When the read started: what it saw is the datapath at that time or later.
    pub at: Option<Time>,
    pub cpu_s: f64,
    pub child_cpu_s: f64,
    pub parse_cpu_s: f64,
    /// CPU of comparing the table with the truth (the engine's observations).
    pub diff_cpu_s: f64,
    pub wall_s: f64,
    pub bytes: u64,
    pub frontends: usize,
    pub backends: usize,
    pub services: usize,
    pub unknown_frontends: usize,
    pub skipped_unknown: u64,
}

/// The datapath's section of `/status`.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct DatapathStatus {
    /// The datapath read (`iptables`, `nftables`, `ipvs`, `cilium`), `null` when none was
    /// found.
    pub datapath: Option<String>,
    /// Why it cannot be read now (the last read failed, or none was found).
    pub error: Option<String>,
    /// Capability a reader lacks, when that is why it failed.
    pub missing_capability: Option<String>,
    pub audit_period_s: f64,
    pub reads: u64,
    pub read_cpu_total_s: f64,
    pub last_read: ReadView,
}

impl LayerSnapshot for DatapathStatus {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The datapath's part of `/v1/ips/{ip}`: which datapath, when it was last read, and the
    /// open, unconverged stale trackings of its path with this target IP.
    fn answer_ip(&self, ip: IpAddr, open: &[TrackingView], view: &mut IpView) {
        view.read_at = self.last_read.at;
        view.datapath.clone_from(&self.datapath);
        view.error.clone_from(&self.error);
        view.holding = open
            .iter()
            .filter(|t| {
                t.layer == DATAPATH
                    && t.kind == "stale"
                    && t.converged_by.is_none()
                    && t.ip.to_canonical() == ip
            })
            .map(|t| format!("{} -> {}", t.service, t.target))
            .collect();
    }

    fn source(&self) -> Option<String> {
        self.datapath.clone()
    }

    fn problem(&self) -> Option<String> {
        self.error.clone()
    }
}

/// The datapath's own JSON lines (`-o json`).
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum DatapathLine<'a> {
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
}

/// Chooses the node's datapath and starts its reads; the adapter reports in `/status` why
/// nothing is read when no datapath was found.
pub(super) fn start<'a>(
    setup: &'a NodeSetup<'a>,
    p: &'a mut Pipeline,
) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>> {
    Box::pin(async move {
        let adapter = match choose_source(setup.args, setup.client, setup.node, setup.kill).await {
            Ok((source, first_read)) => DatapathReads::start(p, source, first_read, setup),
            Err((error, missing_capability)) => DatapathReads {
                running: None,
                out: setup.out.clone(),
                metrics: setup.out.metrics_of(DATAPATH),
                status: Arc::new(DatapathStatus {
                    error: Some(error),
                    missing_capability,
                    ..DatapathStatus::default()
                }),
            },
        };
        Ok(Some(Box::new(adapter) as Box<dyn LayerAdapter>))
    })
}

/// The datapath reads of one node.
struct DatapathReads {
    /// `None` when no datapath was found.
    running: Option<Running>,
    out: NodeOutputs,
    metrics: Arc<DatapathMetrics>,
    status: Arc<DatapathStatus>,
}

/// A datapath being read.
struct Running {
    source: Source,
    path: PathInfo,
    reads: Reads<Result<ReadOutcome, ReaderError>>,
    /// The detection read counts as the first one once the truth is synced.
    pending_first: Option<(Time, ReadOutcome)>,
}

impl DatapathReads {
    /// Registers the datapath path and its model with the session.
    fn start(
        p: &mut Pipeline,
        source: Source,
        first_read: Option<ReadOutcome>,
        setup: &NodeSetup<'_>,
    ) -> Self {
        let node = setup.node;
        let kind = source.datapath().path_kind();
        let info = PathInfo {
            id: format!("{}/{node}", kind.as_str()),
            kind,
            description: format!("datapath {} on {node}", kind.as_str()),
            node: Some(node.to_string()),
        };
        let idx = p.session.add_path(info.clone(), setup.args.datapath_lag);
        let mut model = DatapathModel::new(node, idx);
        model.set_family(source.datapath().family());
        p.session.register(model);
        let status = Arc::new(DatapathStatus {
            datapath: Some(source.datapath().as_str().to_string()),
            ..DatapathStatus::default()
        });
        Self {
            running: Some(Running {
                source,
                path: info,
                reads: Reads::new(
                    setup.args,
                    setup.dns_service.clone(),
                    Arc::clone(setup.kill),
                ),
                pending_first: first_read.map(|o| (crate::clock::wall_now(), o)),
            }),
            out: setup.out.clone(),
            metrics: setup.out.metrics_of(DATAPATH),
            status,
        }
    }

    /// Feeds the reads that finished to the model, the ledger, the metrics and `/status`.
    async fn finish_reads(&mut self, p: &mut Pipeline, now: Time, synced: bool) {
        let Some(r) = self.running.as_mut() else {
            return;
        };
        let mut results = Vec::new();
        if synced && let Some((at, o)) = r.pending_first.take() {
            r.reads.schedule.started(at);
            results.push((ReadReason::Initial, at, Ok(o)));
        }
        while let Some(done) = r.reads.next() {
            results.push(done);
        }
        for (reason, started, result) in results {
            match result {
                Ok(o) => self.read_done(p, reason, started, o, now).await,
                Err(e) => self.read_failed(p, e, now).await,
            }
        }
    }

    async fn read_done(
        &mut self,
        p: &mut Pipeline,
        reason: ReadReason,
        started: Time,
        o: ReadOutcome,
        now: Time,
    ) {
        let Some(r) = self.running.as_mut() else {
            return;
        };
        let out = &self.out;
        let dp = r.source.datapath().as_str();
        let before = readers::thread_cpu();
        let Some((model_out, actions)) = p
            .session
            .with_layer_cx::<DatapathModel, _>(|m, cx| m.on_read(cx, &o.table, started))
        else {
            return;
        };
        let diff_cpu = readers::thread_cpu_since(before);
        // The audit's cost: the dump program, the parse and the diff.
        r.reads.cap.record(now, o.cpu() + diff_cpu);
        let period = r.reads.cap.audit_period();
        r.reads.schedule.finished(now, period);
        for obs in model_out.recorded {
            let _ = out
                .ledger
                .send(LedgerOp::Observation {
                    path: r.path.clone(),
                    observation: obs,
                })
                .await;
        }
        emit_events(&out.printer, p, &actions.events);
        p.act(actions).await;
        let stale_now = p
            .session
            .layer::<DatapathModel>()
            .map_or(0, |m| m.stale_now(p.session.engine()));
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
            services: model_out.services,
            unknown_frontends: model_out.unknown_frontends,
            skipped_unknown: o.table.skipped.unknown,
        };
        let am = &self.metrics;
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
        out.printer.line(&DatapathLine::Read {
            read: &view,
            audit_period_s: period.as_secs_f64(),
            stale_now,
        });
        r.reads.recovered();
        let (reads, spent) = r.reads.cap.totals();
        let st = Arc::make_mut(&mut self.status);
        st.last_read = view;
        st.audit_period_s = period.as_secs_f64();
        st.reads = reads;
        st.read_cpu_total_s = spent.as_secs_f64();
        st.error = None;
        st.missing_capability = None;
    }

    async fn read_failed(&mut self, p: &mut Pipeline, e: ReaderError, now: Time) {
        let Some(r) = self.running.as_mut() else {
            return;
        };
        let out = &self.out;
        let dp = r.source.datapath().as_str();
        // A killed read's CPU counts like a finished read's: the next one waits for it.
        let cpu = e.cpu();
        if !cpu.is_zero() {
            r.reads.cap.record(now, cpu);
            self.metrics.read_cpu_total.inc_by(cpu.as_secs_f64());
        }
        let period = r.reads.cap.audit_period();
        r.reads.schedule.finished(now, period);
        self.metrics
            .read_errors
            .get_or_create(&ReadErrorLabels {
                datapath: dp.to_string(),
                error: e.label().to_string(),
            })
            .inc();
        let text = e.to_string();
        if r.reads.new_error(&text) {
            tracing::error!(datapath = dp, error = %text, capability = e.missing_capability().unwrap_or(""), "reading the datapath failed; DNS probing continues");
            out.printer.line(&DatapathLine::ReaderError {
                datapath: dp,
                error: text.clone(),
                capability: e.missing_capability(),
            });
        }
        // The datapath is unreadable: say so to the engine (counted, not stale).
        if let Some(path) = p.session.layer::<DatapathModel>().map(DatapathModel::path) {
            r.reads.observe_failure(p, out, path, now, &text).await;
        }
        let st = Arc::make_mut(&mut self.status);
        st.error = Some(text);
        st.missing_capability = e.missing_capability().map(str::to_string);
    }

    /// Starts the next read when one is due and the CPU budget allows it.
    fn start_due(&mut self, p: &Pipeline, now: Time, synced: bool) {
        let Some(r) = self.running.as_mut() else {
            return;
        };
        let unconverged = p
            .session
            .layer::<DatapathModel>()
            .is_some_and(|m| m.unconverged(p.session.engine()));
        if let Some(reason) = r.reads.begin(now, synced, unconverged) {
            let read = r
                .source
                .clone()
                .read(r.reads.timeout, Arc::clone(&r.reads.kill));
            r.reads.spawn(reason, now, read);
        }
    }
}

impl LayerAdapter for DatapathReads {
    fn layer(&self) -> Layer {
        DATAPATH
    }

    /// A changed desired set asks for re-reads.
    fn on_truth(&mut self, p: &mut Pipeline, now: Time, synced: bool) {
        let Some(r) = self.running.as_mut() else {
            return;
        };
        let changed = p
            .session
            .layer_mut::<DatapathModel>()
            .is_some_and(DatapathModel::take_changed);
        if changed && synced {
            r.reads.schedule.on_change(now);
        }
    }

    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        now: Time,
        synced: bool,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            self.finish_reads(p, now, synced).await;
            self.start_due(p, now, synced);
        })
    }

    fn snapshot(&self) -> Arc<dyn LayerSnapshot> {
        Arc::clone(&self.status) as Arc<dyn LayerSnapshot>
    }

    fn shutdown(&mut self) {
        if let Some(r) = self.running.as_mut() {
            r.reads.shutdown();
        }
    }
}
