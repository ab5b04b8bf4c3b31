//! The agent's conntrack adapter: reads the node's conntrack table over netlink within the CPU cap, feeds each complete read to the layer's pure model, and reports the stale flows.
//!
//! Reads are paced like the datapath's, by their own [`ReadSchedule`] and [`CostCap`]
//! (same `--max-cpu`, `--min-audit-period`, `--max-audit-period`, `--reread-interval`,
//! `--reread-for`): after a truth change that removed an endpoint, re-reads while the
//! path has unconverged trackings or a flow waits for its confirming read; otherwise a
//! periodic audit whose period follows the measured cost. Each read runs on a blocking
//! thread and comes back through a channel.
//!
//! The path (`conntrack/<node>`) is registered at the first successful read. A table that
//! cannot be read at all (no `nf_conntrack_netlink`, no `CAP_NET_ADMIN`) is said once in
//! the log, the JSON output and `/status`, and retried every `--max-audit-period`; if it
//! was readable before, its path is dropped (open trackings close unjudged) until it is
//! readable again. Every other layer keeps running.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ghostip_core::{
    FailureReason, Layer, Observation, ObservationResult, PathIdx, Protocol, ServiceKey, Target,
    Time,
};
use ghostip_session::layers::conntrack::{ConntrackModel, ReadOutcome, StaleFlow};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::super::pipeline::Pipeline;
use super::datapath::Outputs;
use super::metrics::{ConntrackErrorLabels, ConntrackReadLabels, StaleFlowLabels};
use super::status::{Printer, emit_events, lock};
use crate::agent::conntrack_reader::{self, FlowRead, ReadError};
use crate::agent::cost::{CostCap, CostConfig, ReadReason, ReadSchedule};
use crate::agent::readers::{thread_cpu, thread_cpu_since};
use crate::cli::AgentArgs;
use crate::ledger::LedgerOp;

/// The `conntrack` section of `/status`.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct ConntrackStatus {
    /// The engine path, once the table was read.
    pub path: Option<String>,
    /// Why the table cannot be read now.
    pub error: Option<String>,
    /// Capability the agent lacks, when that is why.
    pub missing_capability: Option<String>,
    pub reads: u64,
    pub read_cpu_total_s: f64,
    pub audit_period_s: f64,
    pub last_read: ConntrackReadView,
    /// Flows of this node's pods to endpoints that left their Service, confirmed by two
    /// consecutive reads.
    pub stale_flows: Vec<StaleFlow>,
    /// Flows to removed endpoints seen in the last read only (waiting for the next).
    pub unconfirmed_flows: usize,
}

/// The last complete read.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct ConntrackReadView {
    pub reason: Option<ReadReason>,
    pub at: Option<Time>,
    /// dump + parse + join.
    pub cpu_s: f64,
    /// The receive calls: the kernel walking and copying its table.
    pub dump_cpu_s: f64,
    /// Decoding the messages and aggregating the flows.
    pub parse_cpu_s: f64,
    /// Joining the flows with the truth and judging them.
    pub join_cpu_s: f64,
    pub wall_s: f64,
    pub bytes: u64,
    pub entries: u64,
    /// Live entries of this node's pods.
    pub counted: u64,
    pub flows: usize,
    pub attributed: usize,
    pub services: usize,
    pub withheld: usize,
    pub skipped_unknown: u64,
}

/// The conntrack layer's JSON lines (`-o json`).
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum CtLine<'a> {
    ConntrackRead {
        #[serde(flatten)]
        read: &'a ConntrackReadView,
        audit_period_s: f64,
        stale_flows: usize,
    },
    ConntrackError {
        error: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        capability: Option<&'a str>,
    },
    StaleFlow {
        change: &'a str,
        #[serde(flatten)]
        flow: &'a StaleFlow,
    },
    /// A stale flow that is gone (closed, or the endpoint's address came back).
    #[serde(rename = "stale-flow")]
    StaleFlowEnded {
        change: &'a str,
        service: &'a ServiceKey,
        proto: Protocol,
        client_ip: IpAddr,
        #[serde(skip_serializing_if = "Option::is_none")]
        via: Option<Target>,
        target: Target,
    },
}

fn print(printer: &Printer, line: &CtLine<'_>) {
    if printer.json
        && let Ok(s) = serde_json::to_string(line)
    {
        println!("{s}");
    }
}

type ReadResult = (ReadReason, Time, Result<FlowRead, ReadError>);

/// A stale flow's identity across reads.
type FlowId = (ServiceKey, Protocol, IpAddr, Option<Target>, Target);

fn flow_id(f: &StaleFlow) -> FlowId {
    (f.service.clone(), f.proto, f.client_ip, f.via, f.target)
}

/// The conntrack reads of one node.
pub(super) struct ConntrackReads {
    node: String,
    lag: Duration,
    /// The Service failed reads are attributed to (a read has none of its own).
    failure_service: ServiceKey,
    cap: CostCap,
    schedule: ReadSchedule,
    read_tx: mpsc::Sender<ReadResult>,
    read_rx: mpsc::Receiver<ReadResult>,
    tasks: JoinSet<()>,
    last_error: Option<String>,
    timeout: Duration,
    kill: Arc<AtomicBool>,
    /// Stale flows reported, to report their end.
    reported: BTreeSet<FlowId>,
}

impl ConntrackReads {
    /// The reads of the session's [`ConntrackModel`] (registered where the session is
    /// built).
    pub fn start(
        args: &AgentArgs,
        node: &str,
        failure_service: ServiceKey,
        kill: Arc<AtomicBool>,
    ) -> Self {
        let (read_tx, read_rx) = mpsc::channel(4);
        Self {
            node: node.to_string(),
            lag: args.datapath_lag,
            failure_service,
            cap: CostCap::new(CostConfig {
                max_cpu: args.max_cpu / 100.0,
                min_period: args.min_audit_period,
                max_period: args.max_audit_period,
                ..CostConfig::default()
            }),
            schedule: ReadSchedule::new(args.reread_interval, args.reread_for),
            read_tx,
            read_rx,
            tasks: JoinSet::new(),
            last_error: None,
            timeout: args.read_timeout,
            kill,
            reported: BTreeSet::new(),
        }
    }

    fn path(p: &Pipeline) -> Option<PathIdx> {
        p.session
            .layer::<ConntrackModel>()
            .and_then(ConntrackModel::path)
    }

    /// After a truth event: an endpoint that left a Service asks for a read.
    pub fn on_truth(&mut self, p: &mut Pipeline, now: Time, synced: bool) {
        let removed = p
            .session
            .layer_mut::<ConntrackModel>()
            .is_some_and(ConntrackModel::take_removed);
        if removed && synced {
            self.schedule.on_change(now);
        }
    }

    /// Starts the next read when one is due and the CPU budget allows it.
    pub fn start_due(&mut self, p: &Pipeline, now: Time, synced: bool) {
        let Some(model) = p.session.layer::<ConntrackModel>() else {
            return;
        };
        let busy = model.unconverged(&p.session.engine) || model.pending();
        if synced
            && let Some(reason) = self.schedule.due(now, busy)
            && self.cap.may_read(now)
        {
            self.schedule.started(now);
            let clients = model.client_ips();
            let tx = self.read_tx.clone();
            let timeout = self.timeout;
            let kill = Arc::clone(&self.kill);
            self.tasks.spawn_blocking(move || {
                let r = conntrack_reader::read_flows(clients, timeout, &kill);
                let _ = tx.blocking_send((reason, now, r));
            });
        }
        while self.tasks.try_join_next().is_some() {}
    }

    /// Feeds the reads that finished to the model, the ledger, the metrics and `/status`.
    pub async fn finish_reads(&mut self, p: &mut Pipeline, out: &Outputs<'_>, now: Time) {
        while let Ok((reason, started, result)) = self.read_rx.try_recv() {
            match result {
                Ok(read) => self.read_done(p, out, reason, started, read, now).await,
                Err(ReadError::Cancelled) => {}
                Err(e) => self.read_failed(p, out, &e, now).await,
            }
        }
    }

    async fn read_done(
        &mut self,
        p: &mut Pipeline,
        out: &Outputs<'_>,
        reason: ReadReason,
        started: Time,
        read: FlowRead,
        now: Time,
    ) {
        if Self::path(p).is_none() {
            let lag = self.lag;
            if let Some((path, actions)) = p
                .session
                .with_layer_cx::<ConntrackModel, _>(|m, cx| m.attach(cx, lag, started))
            {
                p.act(actions).await;
                let id = p.session.engine.path(path).map(|i| i.id.clone());
                tracing::info!(node = %self.node, path = id.as_deref().unwrap_or(""), "conntrack readable; its path is judged");
                lock(out.status).conntrack.path = id;
            }
        }
        let before = thread_cpu();
        let Some((outcome, actions)) = p
            .session
            .with_layer_cx::<ConntrackModel, _>(|m, cx| m.on_read(cx, &read.flows, started))
        else {
            return;
        };
        let join_cpu = thread_cpu_since(before);
        let s = &read.stats;
        let cost = s.dump_cpu + s.parse_cpu + join_cpu;
        self.cap.record(now, cost);
        let period = self.cap.audit_period();
        self.schedule.finished(now, period);
        self.record(p, out, &outcome).await;
        emit_events(out.printer, p, &actions.events);
        p.act(actions).await;
        let view = ConntrackReadView {
            reason: Some(reason),
            at: Some(started),
            cpu_s: cost.as_secs_f64(),
            dump_cpu_s: s.dump_cpu.as_secs_f64(),
            parse_cpu_s: s.parse_cpu.as_secs_f64(),
            join_cpu_s: join_cpu.as_secs_f64(),
            wall_s: s.wall.as_secs_f64(),
            bytes: s.bytes,
            entries: read.flows.entries,
            counted: read.flows.counted,
            flows: outcome.flows,
            attributed: outcome.attributed,
            services: outcome.services,
            withheld: outcome.withheld,
            skipped_unknown: s.skipped_unknown,
        };
        if self.last_error.take().is_some() {
            tracing::info!(node = %self.node, "conntrack readable again");
        }
        let (stale, unconfirmed) = self.report_flows(p, out);
        let entries: u64 = stale.iter().map(|f| u64::from(f.entries)).sum();
        let am = out.metrics;
        am.stale_flows
            .get_or_create(&StaleFlowLabels {
                layer: Layer::Conntrack.to_string(),
                node: self.node.clone(),
            })
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
        am.conntrack_reads
            .get_or_create(&ConntrackReadLabels {
                reason: reason.as_str().to_string(),
            })
            .inc();
        am.conntrack_read_cpu.set(view.cpu_s);
        am.conntrack_entries
            .set(i64::try_from(view.entries).unwrap_or(i64::MAX));
        if reason != ReadReason::Reread {
            tracing::info!(
                node = %self.node,
                reason = reason.as_str(),
                cpu_s = view.cpu_s,
                dump_cpu_s = view.dump_cpu_s,
                parse_cpu_s = view.parse_cpu_s,
                join_cpu_s = view.join_cpu_s,
                entries = view.entries,
                flows = view.flows,
                stale_flows = stale.len(),
                audit_period_s = period.as_secs_f64(),
                "conntrack read"
            );
        }
        print(
            out.printer,
            &CtLine::ConntrackRead {
                read: &view,
                audit_period_s: period.as_secs_f64(),
                stale_flows: stale.len(),
            },
        );
        let (reads, spent) = self.cap.totals();
        let mut st = lock(out.status);
        let ct = &mut st.conntrack;
        ct.last_read = view;
        ct.reads = reads;
        ct.read_cpu_total_s = spent.as_secs_f64();
        ct.audit_period_s = period.as_secs_f64();
        ct.stale_flows = stale;
        ct.unconfirmed_flows = unconfirmed;
        ct.error = None;
        ct.missing_capability = None;
    }

    /// Sends the observations worth keeping to the ledger.
    async fn record(&self, p: &Pipeline, out: &Outputs<'_>, outcome: &ReadOutcome) {
        for obs in &outcome.recorded {
            if let Some(path) = p.session.engine.path(obs.path) {
                let _ = out
                    .ledger
                    .send(LedgerOp::Observation {
                        path: path.clone(),
                        observation: obs.clone(),
                    })
                    .await;
            }
        }
    }

    /// Logs and prints the stale flows that appeared or ended with this read; returns the
    /// confirmed ones and the number waiting for confirmation.
    fn report_flows(&mut self, p: &Pipeline, out: &Outputs<'_>) -> (Vec<StaleFlow>, usize) {
        let Some(model) = p.session.layer::<ConntrackModel>() else {
            return (Vec::new(), 0);
        };
        let (confirmed, waiting): (Vec<&StaleFlow>, Vec<&StaleFlow>) =
            model.stale_flows().partition(|f| f.confirmed);
        let now: BTreeSet<FlowId> = confirmed.iter().map(|f| flow_id(f)).collect();
        for f in confirmed
            .iter()
            .filter(|f| !self.reported.contains(&flow_id(f)))
        {
            tracing::warn!(
                node = %self.node,
                service = %f.service,
                client = %f.client_ip,
                client_pod = f.client_pod.as_ref().map(ToString::to_string).unwrap_or_default(),
                target = %f.target,
                via = f.via.map(|v| v.to_string()).unwrap_or_default(),
                former_owner = f.former_owner.as_deref().unwrap_or(""),
                outlived_by_s = f.outlived_by.map_or(0.0, |d| d.as_secs_f64()),
                entries = f.entries,
                "conntrack: a pod still has flows to an endpoint that left its Service"
            );
            print(
                out.printer,
                &CtLine::StaleFlow {
                    change: "opened",
                    flow: f,
                },
            );
        }
        for id in self.reported.difference(&now) {
            tracing::info!(node = %self.node, service = %id.0, client = %id.2, target = %id.4, "conntrack: the stale flow ended");
            print(
                out.printer,
                &CtLine::StaleFlowEnded {
                    change: "cleared",
                    service: &id.0,
                    proto: id.1,
                    client_ip: id.2,
                    via: id.3,
                    target: id.4,
                },
            );
        }
        self.reported = now;
        (confirmed.into_iter().cloned().collect(), waiting.len())
    }

    async fn read_failed(&mut self, p: &mut Pipeline, out: &Outputs<'_>, e: &ReadError, now: Time) {
        let unreadable = e.is_unreadable();
        let period = if unreadable {
            self.cap.config().max_period
        } else {
            self.cap.audit_period()
        };
        self.schedule.finished(now, period);
        out.metrics
            .conntrack_read_errors
            .get_or_create(&ConntrackErrorLabels {
                error: e.label().to_string(),
            })
            .inc();
        let text = e.to_string();
        let capability = e.missing_capability();
        if self.last_error.as_deref() != Some(text.as_str()) {
            tracing::error!(node = %self.node, error = %text, capability = capability.unwrap_or(""), "reading conntrack failed; the other layers keep running");
            print(
                out.printer,
                &CtLine::ConntrackError {
                    error: &text,
                    capability,
                },
            );
            self.last_error = Some(text.clone());
        }
        if let Some(path) = Self::path(p) {
            if unreadable {
                // Not a copy ghostip can see any more: its trackings would only go stuck.
                if let Some(((), actions)) = p
                    .session
                    .with_layer_cx::<ConntrackModel, _>(|m, cx| m.detach(cx))
                {
                    emit_events(out.printer, p, &actions.events);
                    p.act(actions).await;
                }
                self.reported.clear();
                out.metrics
                    .stale_flows
                    .get_or_create(&StaleFlowLabels {
                        layer: Layer::Conntrack.to_string(),
                        node: self.node.clone(),
                    })
                    .set(0);
            } else {
                // One bad read: counted by the engine, never read as staleness.
                let obs = Observation {
                    path,
                    service: self.failure_service.clone(),
                    at: now,
                    result: ObservationResult::Failed(FailureReason::Unreadable(text.clone())),
                    latency: None,
                };
                let _ = p.session.observe(&obs);
                if let Some(info) = p.session.engine.path(path) {
                    let _ = out
                        .ledger
                        .send(LedgerOp::Observation {
                            path: info.clone(),
                            observation: obs,
                        })
                        .await;
                }
            }
        }
        let mut st = lock(out.status);
        let ct = &mut st.conntrack;
        ct.error = Some(text);
        ct.missing_capability = capability.map(str::to_string);
        if unreadable {
            ct.path = None;
            ct.stale_flows.clear();
            ct.unconfirmed_flows = 0;
        }
    }

    /// Stops reads in flight.
    pub fn shutdown(&mut self) {
        self.tasks.abort_all();
    }
}
