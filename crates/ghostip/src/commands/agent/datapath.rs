//! The agent's datapath adapter: picks the node's datapath, runs its reads within the CPU cap, and feeds each read to the layer's pure model.
//!
//! Reads are paced by the runtime's [`ReadSchedule`] (re-reads after a truth change until
//! converged, then a periodic audit) and [`CostCap`] (the audit period follows the
//! measured CPU cost of a read); each read runs in its own task and comes back through a
//! channel, so the agent's loop never waits on a dump program.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ghostip_core::{PathInfo, ServiceKey, Time};

use super::super::pipeline::Pipeline;
use super::metrics::{AgentMetrics, ReadErrorLabels, ReadLabels};
use super::reads::Reads;
use super::status::{Line, Printer, ReadView, SharedStatus, emit_events, lock};
use crate::agent::DatapathModel;
use ghostip_datapath::RunsIn;

use crate::agent::cilium::{CiliumTarget, read_cilium};
use crate::agent::cost::{CostCap, CostConfig, ReadReason};
use crate::agent::readers::{self, Datapath, ReadOutcome, ReaderError};
use crate::cli::{AgentArgs, DatapathChoice};
use crate::ledger::{LedgerOp, LedgerSender};

/// Where the datapath is read from.
#[derive(Clone)]
pub(super) enum Source {
    Local(Datapath),
    Cilium(Datapath, kube::Client, CiliumTarget),
}

impl Source {
    pub fn datapath(&self) -> Datapath {
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

/// Which datapath: given, or detected by reading each candidate once (that read counts as
/// the first one). `None` when nothing was found: only DNS paths are probed, `/status` says
/// why.
pub(super) async fn choose_source(
    args: &AgentArgs,
    client: &kube::Client,
    node: &str,
    kill: &Arc<AtomicBool>,
    status: &SharedStatus,
) -> (Option<Source>, Option<ReadOutcome>) {
    let source = match args.datapath {
        DatapathChoice::Read(dp) if dp.runs_in() == RunsIn::Node => Source::Local(dp),
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
            let d = readers::detect(args.read_timeout, Arc::clone(kill)).await;
            for (dp, why) in &d.rejected {
                tracing::info!(datapath = %dp, reason = %why, "datapath candidate not used");
            }
            match d.chosen {
                Some((dp, outcome)) => return (Some(Source::Local(dp)), Some(outcome)),
                None => {
                    let why = d
                        .rejected
                        .iter()
                        .map(|(dp, e)| format!("{dp}: {e}"))
                        .collect::<Vec<_>>()
                        .join("; ");
                    tracing::error!(reasons = %why, "no kube-proxy datapath found on this node; only DNS paths are probed");
                    let mut st = lock(status);
                    st.datapath_error = Some(format!("no datapath detected ({why})"));
                    st.missing_capability = d.rejected.iter().find_map(|(_, e)| {
                        e.contains("CAP_NET_ADMIN")
                            .then(|| "CAP_NET_ADMIN".to_string())
                    });
                    return (None, None);
                }
            }
        }
    };
    (Some(source), None)
}

/// The datapath reads of one node.
pub(super) struct DatapathReads {
    source: Source,
    path: PathInfo,
    reads: Reads<Result<ReadOutcome, ReaderError>>,
    /// The detection read counts as the first one once the truth is synced.
    pending_first: Option<(Time, ReadOutcome)>,
}

impl DatapathReads {
    /// Registers the datapath path and its model with the session.
    pub fn start(
        p: &mut Pipeline,
        source: Source,
        first_read: Option<ReadOutcome>,
        args: &AgentArgs,
        node: &str,
        failure_service: ServiceKey,
        kill: Arc<AtomicBool>,
    ) -> Self {
        let kind = source.datapath().path_kind();
        let info = PathInfo {
            id: format!("{}/{node}", kind.as_str()),
            kind,
            description: format!("datapath {} on {node}", kind.as_str()),
            node: Some(node.to_string()),
        };
        let idx = p.session.engine.add_path(info.clone(), args.datapath_lag);
        let mut model = DatapathModel::new(node, idx);
        model.set_family(source.datapath().family());
        p.session.register(model);
        Self {
            source,
            path: info,
            reads: Reads::new(args, failure_service, kill),
            pending_first: first_read.map(|o| (crate::clock::wall_now(), o)),
        }
    }

    fn name(&self) -> &'static str {
        self.source.datapath().as_str()
    }

    /// After a truth event: a changed desired set asks for re-reads.
    pub fn on_truth(&mut self, p: &mut Pipeline, now: Time, synced: bool) {
        let changed = p
            .session
            .layer_mut::<DatapathModel>()
            .is_some_and(DatapathModel::take_changed);
        if changed && synced {
            self.reads.schedule.on_change(now);
        }
    }

    /// Feeds the reads that finished to the model, the ledger, the metrics and `/status`.
    pub async fn finish_reads(
        &mut self,
        p: &mut Pipeline,
        out: &Outputs<'_>,
        now: Time,
        synced: bool,
    ) {
        let mut results = Vec::new();
        if synced && let Some((at, o)) = self.pending_first.take() {
            self.reads.schedule.started(at);
            results.push((ReadReason::Initial, at, Ok(o)));
        }
        while let Some(r) = self.reads.next() {
            results.push(r);
        }
        for (reason, started, result) in results {
            match result {
                Ok(o) => self.read_done(p, out, reason, started, o, now).await,
                Err(e) => self.read_failed(p, out, e, now).await,
            }
        }
    }

    async fn read_done(
        &mut self,
        p: &mut Pipeline,
        out: &Outputs<'_>,
        reason: ReadReason,
        started: Time,
        o: ReadOutcome,
        now: Time,
    ) {
        let dp = self.name();
        let before = readers::thread_cpu();
        let Some((model_out, actions)) = p
            .session
            .with_layer_cx::<DatapathModel, _>(|m, cx| m.on_read(cx, &o.table, started))
        else {
            return;
        };
        let diff_cpu = readers::thread_cpu_since(before);
        // The audit's cost: the dump program, the parse and the diff.
        self.reads.cap.record(now, o.cpu() + diff_cpu);
        let period = self.reads.cap.audit_period();
        self.reads.schedule.finished(now, period);
        for obs in model_out.recorded {
            let _ = out
                .ledger
                .send(LedgerOp::Observation {
                    path: self.path.clone(),
                    observation: obs,
                })
                .await;
        }
        emit_events(out.printer, p, &actions.events);
        p.act(actions).await;
        let stale_now = p
            .session
            .layer::<DatapathModel>()
            .map_or(0, |m| m.stale_now(&p.session.engine));
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
        let am = out.metrics;
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
        out.printer.line(&Line::Read {
            read: &view,
            audit_period_s: period.as_secs_f64(),
            stale_now,
        });
        self.reads.recovered();
        let (reads, spent) = self.reads.cap.totals();
        let mut st = lock(out.status);
        st.last_read = view;
        st.audit_period_s = period.as_secs_f64();
        st.reads = reads;
        st.read_cpu_total_s = spent.as_secs_f64();
        st.datapath_error = None;
        st.missing_capability = None;
    }

    async fn read_failed(
        &mut self,
        p: &mut Pipeline,
        out: &Outputs<'_>,
        e: ReaderError,
        now: Time,
    ) {
        let dp = self.name();
        // A killed read's CPU counts like a finished read's: the next one waits for it.
        let cpu = e.cpu();
        if !cpu.is_zero() {
            self.reads.cap.record(now, cpu);
            out.metrics.read_cpu_total.inc_by(cpu.as_secs_f64());
        }
        let period = self.reads.cap.audit_period();
        self.reads.schedule.finished(now, period);
        out.metrics
            .read_errors
            .get_or_create(&ReadErrorLabels {
                datapath: dp.to_string(),
                error: e.label().to_string(),
            })
            .inc();
        let text = e.to_string();
        if self.reads.new_error(&text) {
            tracing::error!(datapath = dp, error = %text, capability = e.missing_capability().unwrap_or(""), "reading the datapath failed; DNS probing continues");
            out.printer.line(&Line::ReaderError {
                datapath: dp,
                error: text.clone(),
                capability: e.missing_capability(),
            });
        }
        // The datapath is unreadable: say so to the engine (counted, not stale).
        if let Some(path) = p.session.layer::<DatapathModel>().map(DatapathModel::path) {
            self.reads.observe_failure(p, out, path, now, &text).await;
        }
        let mut st = lock(out.status);
        st.datapath_error = Some(text);
        st.missing_capability = e.missing_capability().map(str::to_string);
    }

    /// Starts the next read when one is due and the CPU budget allows it.
    pub fn start_due(&mut self, p: &Pipeline, now: Time, synced: bool) {
        let unconverged = p
            .session
            .layer::<DatapathModel>()
            .is_some_and(|m| m.unconverged(&p.session.engine));
        if let Some(reason) = self.reads.begin(now, synced, unconverged) {
            let read = self
                .source
                .clone()
                .read(self.reads.timeout, Arc::clone(&self.reads.kill));
            self.reads.spawn(reason, now, read);
        }
    }

    /// Stops reads in flight.
    pub fn shutdown(&mut self) {
        self.reads.shutdown();
    }
}

/// The CPU cap `--max-cpu`, `--min-audit-period` and `--max-audit-period` set for one
/// node-local reader (the datapath's, conntrack's: each has its own).
pub(super) fn cost_cap(args: &AgentArgs) -> CostCap {
    CostCap::new(CostConfig {
        max_cpu: args.max_cpu / 100.0,
        min_period: args.min_audit_period,
        max_period: args.max_audit_period,
        ..CostConfig::default()
    })
}

/// Where the agent's adapters report.
pub(super) struct Outputs<'a> {
    pub printer: &'a Printer,
    pub ledger: &'a LedgerSender,
    pub metrics: &'a AgentMetrics,
    pub status: &'a SharedStatus,
}
