//! The agent's conntrack adapter: reads the node's conntrack table over netlink within the CPU cap, feeds each complete read to the layer's pure model, and reports the stale flows.
//!
//! Reads are paced like the datapath's, by their own
//! [`ReadSchedule`](ghostip_session::pacing::ReadSchedule) and
//! [`CostCap`](ghostip_session::pacing::CostCap) (same `--max-cpu`, `--min-audit-period`, `--max-audit-period`, `--reread-interval`,
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

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ghostip_core::{Layer, PathIdx, Protocol, ServiceKey, Target, Time};
use ghostip_datapath::layers::CONNTRACK;
use ghostip_session::layers::conntrack::{ConntrackModel, ReadOutcome, StaleFlow};
use serde::Serialize;

use futures::future::LocalBoxFuture;
use ghostip_session::pacing::ReadReason;

use super::metrics::{
    ConntrackErrorLabels, ConntrackMetrics, ConntrackReadLabels, StaleFlowLabels,
};
use super::reader::{self, FlowRead, ReadError};
use crate::layers::datapath::readers::{thread_cpu, thread_cpu_since};
use crate::layers::node::{IpStaleFlow, IpView, NodeOutputs, Printer, TrackingView, emit_events};
use crate::layers::reads::Reads;
use crate::layers::{LayerAdapter, LayerSnapshot, NodeSetup};
use crate::ledger::LedgerOp;
use crate::pipeline::Pipeline;

/// The `conntrack` section of `/status`.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ConntrackStatus {
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
pub(crate) struct ConntrackReadView {
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
}

fn print(printer: &Printer, line: &CtLine<'_>) {
    printer.line(line);
}

/// A stale flow's identity across reads.
type FlowId = (ServiceKey, Protocol, IpAddr, Option<Target>, Target);

fn flow_id(f: &StaleFlow) -> FlowId {
    (f.service.clone(), f.proto, f.client_ip, f.via, f.target)
}

impl LayerSnapshot for ConntrackStatus {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The confirmed stale flows of this node's pods to `ip`.
    fn answer_ip(&self, ip: IpAddr, _open: &[TrackingView], view: &mut IpView) {
        view.stale_flows.extend(
            self.stale_flows
                .iter()
                .filter(|f| f.confirmed && f.target.ip.to_canonical() == ip)
                .map(|f| IpStaleFlow {
                    node: view.node.clone(),
                    client: f.client_ip,
                    client_pod: f.client_pod.as_ref().map(ToString::to_string),
                    original_dst: f.via.unwrap_or(f.target).to_string(),
                    since: f.left_at.unwrap_or(f.first_seen),
                }),
        );
    }

    fn problem(&self) -> Option<String> {
        self.error.clone()
    }
}

/// Starts the reads of the session's [`ConntrackModel`] (registered with the session's
/// other models); the path is added at the first successful read.
pub(super) fn start<'a>(
    setup: &'a NodeSetup<'a>,
    _p: &'a mut Pipeline,
) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>> {
    Box::pin(async move {
        let adapter = ConntrackReads {
            node: setup.node.to_string(),
            lag: setup.args.datapath_lag,
            ignored: setup
                .args
                .conntrack_ignore_namespaces
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect(),
            reads: Reads::new(
                setup.args,
                setup.dns_service.clone(),
                Arc::clone(setup.kill),
            ),
            reported: BTreeMap::new(),
            out: setup.out.clone(),
            metrics: setup.out.metrics_of(CONNTRACK),
            status: Arc::new(ConntrackStatus::default()),
        };
        Ok(Some(Box::new(adapter) as Box<dyn LayerAdapter>))
    })
}

/// The conntrack reads of one node.
struct ConntrackReads {
    node: String,
    lag: Duration,
    /// Namespaces whose pods are ghostip's own probers, not clients.
    ignored: Vec<String>,
    reads: Reads<Result<FlowRead, ReadError>>,
    /// Stale flows reported, as last seen, to report their end.
    reported: BTreeMap<FlowId, StaleFlow>,
    out: NodeOutputs,
    metrics: Arc<ConntrackMetrics>,
    status: Arc<ConntrackStatus>,
}

impl LayerAdapter for ConntrackReads {
    fn layer(&self) -> Layer {
        CONNTRACK
    }

    /// An endpoint that left a Service asks for a read.
    fn on_truth(&mut self, p: &mut Pipeline, now: Time, synced: bool) {
        let removed = p
            .session
            .layer_mut::<ConntrackModel>()
            .is_some_and(ConntrackModel::take_removed);
        if removed && synced {
            self.reads.schedule.on_change(now);
        }
    }

    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        now: Time,
        synced: bool,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            self.finish_reads(p, now).await;
            self.start_due(p, now, synced);
        })
    }

    fn snapshot(&self) -> Arc<dyn LayerSnapshot> {
        Arc::clone(&self.status) as Arc<dyn LayerSnapshot>
    }

    fn shutdown(&mut self) {
        self.reads.shutdown();
    }
}

impl ConntrackReads {
    fn path(p: &Pipeline) -> Option<PathIdx> {
        p.session
            .layer::<ConntrackModel>()
            .and_then(ConntrackModel::path)
    }

    /// Starts the next read when one is due and the CPU budget allows it.
    fn start_due(&mut self, p: &Pipeline, now: Time, synced: bool) {
        let Some(model) = p.session.layer::<ConntrackModel>() else {
            return;
        };
        let busy = model.unconverged(p.session.engine()) || model.pending();
        if let Some(reason) = self.reads.begin(now, synced, busy) {
            let clients = model.client_ips_outside(&self.ignored);
            let timeout = self.reads.timeout;
            let kill = Arc::clone(&self.reads.kill);
            self.reads.spawn_blocking(reason, now, move || {
                reader::read_flows(clients, timeout, &kill)
            });
        }
    }

    /// Feeds the reads that finished to the model, the ledger, the metrics and `/status`.
    async fn finish_reads(&mut self, p: &mut Pipeline, now: Time) {
        while let Some((reason, started, result)) = self.reads.next() {
            match result {
                Ok(read) => self.read_done(p, reason, started, read, now).await,
                Err(ReadError::Cancelled) => {}
                Err(e) => self.read_failed(p, &e, now).await,
            }
        }
    }

    async fn read_done(
        &mut self,
        p: &mut Pipeline,
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
                let id = p.session.engine().path(path).map(|i| i.id.clone());
                tracing::info!(node = %self.node, path = id.as_deref().unwrap_or(""), "conntrack readable; its path is judged");
                Arc::make_mut(&mut self.status).path = id;
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
        self.reads.cap.record(now, cost);
        let period = self.reads.cap.audit_period();
        self.reads.schedule.finished(now, period);
        self.record(p, &outcome).await;
        emit_events(&self.out.printer, p, &actions.events);
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
        if self.reads.recovered() {
            tracing::info!(node = %self.node, "conntrack readable again");
        }
        let (stale, unconfirmed) = self.report_flows(p);
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
            &self.out.printer,
            &CtLine::ConntrackRead {
                read: &view,
                audit_period_s: period.as_secs_f64(),
                stale_flows: stale.len(),
            },
        );
        publish_read(
            &self.node,
            &self.metrics,
            Arc::make_mut(&mut self.status),
            ReadPublication {
                view,
                stale,
                unconfirmed,
                totals: self.reads.cap.totals(),
                period,
            },
        );
    }

    /// Sends the observations worth keeping to the ledger.
    async fn record(&self, p: &Pipeline, outcome: &ReadOutcome) {
        let out = &self.out;
        for obs in &outcome.recorded {
            if let Some(path) = p.session.engine().path(obs.path) {
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
    fn report_flows(&mut self, p: &Pipeline) -> (Vec<StaleFlow>, usize) {
        let out = &self.out;
        let Some(model) = p.session.layer::<ConntrackModel>() else {
            return (Vec::new(), 0);
        };
        let (confirmed, waiting): (Vec<&StaleFlow>, Vec<&StaleFlow>) =
            model.stale_flows().partition(|f| f.confirmed);
        let now: BTreeMap<FlowId, StaleFlow> = confirmed
            .iter()
            .map(|f| (flow_id(f), (*f).clone()))
            .collect();
        for f in confirmed
            .iter()
            .filter(|f| !self.reported.contains_key(&flow_id(f)))
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
                &out.printer,
                &CtLine::StaleFlow {
                    change: "opened",
                    flow: f,
                },
            );
        }
        for (id, f) in self
            .reported
            .iter()
            .filter(|(id, _)| !now.contains_key(*id))
        {
            tracing::info!(
                node = %self.node,
                service = %id.0,
                client = %id.2,
                target = %id.4,
                last_packet = f.last_packet.map(|t| t.to_string()).unwrap_or_default(),
                "conntrack: the stale flow ended"
            );
            print(
                &out.printer,
                &CtLine::StaleFlow {
                    change: "cleared",
                    flow: f,
                },
            );
        }
        self.reported = now;
        (confirmed.into_iter().cloned().collect(), waiting.len())
    }

    async fn read_failed(&mut self, p: &mut Pipeline, e: &ReadError, now: Time) {
        let unreadable = e.is_unreadable();
        let period = if unreadable {
            self.reads.cap.config().max_period
        } else {
            self.reads.cap.audit_period()
        };
        self.reads.schedule.finished(now, period);
        let text = e.to_string();
        let capability = e.missing_capability();
        if self.reads.new_error(&text) {
            tracing::error!(node = %self.node, error = %text, capability = capability.unwrap_or(""), "reading conntrack failed; the other layers keep running");
            print(
                &self.out.printer,
                &CtLine::ConntrackError {
                    error: &text,
                    capability,
                },
            );
        }
        if let Some(path) = Self::path(p) {
            if unreadable {
                // Not a copy ghostip can see any more: its trackings would only go stuck.
                if let Some(((), actions)) = p
                    .session
                    .with_layer_cx::<ConntrackModel, _>(|m, cx| m.detach(cx))
                {
                    emit_events(&self.out.printer, p, &actions.events);
                    p.act(actions).await;
                }
                self.reported.clear();
            } else {
                // One bad read: counted by the engine, never read as staleness.
                self.reads
                    .observe_failure(p, &self.out, path, now, &text)
                    .await;
            }
        }
        publish_error(
            &self.node,
            &self.metrics,
            Arc::make_mut(&mut self.status),
            e,
        );
    }
}

/// What one complete read publishes.
struct ReadPublication {
    view: ConntrackReadView,
    stale: Vec<StaleFlow>,
    unconfirmed: usize,
    /// Reads and CPU spent since the agent started.
    totals: (u64, Duration),
    period: Duration,
}

fn stale_flows_gauge<'m>(
    metrics: &'m ConntrackMetrics,
    node: &str,
) -> impl std::ops::Deref<Target = prometheus_client::metrics::gauge::Gauge> + 'm {
    metrics.stale_flows.get_or_create(&StaleFlowLabels {
        layer: CONNTRACK.to_string(),
        node: node.to_string(),
    })
}

/// Puts a complete read in `/status`'s conntrack section and the metrics: the stale-flow
/// gauge counts the conntrack entries of the confirmed stale flows.
fn publish_read(
    node: &str,
    metrics: &ConntrackMetrics,
    ct: &mut ConntrackStatus,
    r: ReadPublication,
) {
    let entries: u64 = r.stale.iter().map(|f| u64::from(f.entries)).sum();
    stale_flows_gauge(metrics, node).set(i64::try_from(entries).unwrap_or(i64::MAX));
    if let Some(reason) = r.view.reason {
        metrics
            .conntrack_reads
            .get_or_create(&ConntrackReadLabels {
                reason: reason.as_str().to_string(),
            })
            .inc();
    }
    metrics.conntrack_read_cpu.set(r.view.cpu_s);
    metrics
        .conntrack_entries
        .set(i64::try_from(r.view.entries).unwrap_or(i64::MAX));
    let (reads, spent) = r.totals;
    ct.last_read = r.view;
    ct.reads = reads;
    ct.read_cpu_total_s = spent.as_secs_f64();
    ct.audit_period_s = r.period.as_secs_f64();
    ct.stale_flows = r.stale;
    ct.unconfirmed_flows = r.unconfirmed;
    ct.error = None;
    ct.missing_capability = None;
}

/// Puts a failed read in `/status`'s conntrack section and the metrics. A table that
/// cannot be read at all has no path and no stale flows any more.
fn publish_error(node: &str, metrics: &ConntrackMetrics, ct: &mut ConntrackStatus, e: &ReadError) {
    metrics
        .conntrack_read_errors
        .get_or_create(&ConntrackErrorLabels {
            error: e.label().to_string(),
        })
        .inc();
    ct.error = Some(e.to_string());
    ct.missing_capability = e.missing_capability().map(str::to_string);
    if e.is_unreadable() {
        stale_flows_gauge(metrics, node).set(0);
        ct.path = None;
        ct.stale_flows.clear();
        ct.unconfirmed_flows = 0;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use ghostip_core::PodRef;

    use super::*;
    use crate::metrics::Metrics;

    fn t(s: &str) -> Time {
        s.parse().unwrap()
    }

    fn sock(s: &str) -> Target {
        let a: std::net::SocketAddr = s.parse().unwrap();
        Target::socket(a.ip(), a.port())
    }

    /// order-7c9's pooled connection through the web ClusterIP, pinned to web-0 which
    /// left the Service 5 s before the read.
    fn stale_flow() -> StaleFlow {
        StaleFlow {
            service: ServiceKey::new("prod", "web"),
            proto: Protocol::Tcp,
            client_ip: "10.244.1.10".parse().unwrap(),
            client_pod: Some(PodRef {
                namespace: "prod".into(),
                name: "order-7c9".into(),
                uid: "u1".into(),
            }),
            via: Some(sock("10.96.5.5:80")),
            target: sock("10.244.3.71:8080"),
            former_owner: Some("prod/web-0".into()),
            left_at: Some(t("2026-03-19T08:00:10Z")),
            first_seen: t("2026-03-19T08:00:11Z"),
            last_seen: t("2026-03-19T08:00:15Z"),
            last_packet: Some(t("2026-03-19T08:00:14Z")),
            outlived_by: Some(Duration::from_secs(5)),
            entries: 2,
            unreplied: 0,
            max_timeout_s: Some(431_999),
            confirmed: true,
        }
    }

    fn publication(stale: Vec<StaleFlow>) -> ReadPublication {
        ReadPublication {
            view: ConntrackReadView {
                reason: Some(ReadReason::Reread),
                at: Some(t("2026-03-19T08:00:15Z")),
                entries: 120,
                counted: 3,
                flows: 2,
                ..ConntrackReadView::default()
            },
            stale,
            unconfirmed: 1,
            totals: (4, Duration::from_millis(30)),
            period: Duration::from_secs(60),
        }
    }

    fn metrics() -> (Metrics, ConntrackMetrics) {
        let mut m = Metrics::new();
        let a = ConntrackMetrics::register(&mut m);
        (m, a)
    }

    fn sample<'t>(text: &'t str, series: &str) -> Option<&'t str> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    /// A read with one confirmed stale flow: `/status` names the client pod, the dead IP,
    /// the former owner, since when and by how long it outlived it; the gauge counts its
    /// entries by layer and node only; the next read without it sets the gauge to 0.
    #[tokio::test]
    async fn a_read_puts_stale_flows_in_status_and_the_gauge() {
        let (m, a) = metrics();
        let mut st = ConntrackStatus {
            path: Some("conntrack/node-1".into()),
            error: Some("an earlier error".into()),
            ..ConntrackStatus::default()
        };
        publish_read("node-1", &a, &mut st, publication(vec![stale_flow()]));
        let text = m.encode();
        assert_eq!(
            sample(
                &text,
                "ghostip_stale_flows{layer=\"conntrack\",node=\"node-1\"}"
            ),
            Some("2"),
            "{text}"
        );
        assert_eq!(
            sample(&text, "ghostip_conntrack_reads_total{reason=\"reread\"}"),
            Some("1"),
            "{text}"
        );
        assert_eq!(sample(&text, "ghostip_conntrack_entries"), Some("120"));
        let v = st.to_json();
        let ct = &v;
        assert_eq!(ct["path"], "conntrack/node-1");
        assert_eq!(ct["error"], serde_json::Value::Null);
        assert_eq!(
            (ct["reads"].as_u64(), ct["unconfirmed_flows"].as_u64()),
            (Some(4), Some(1))
        );
        assert_eq!(ct["last_read"]["reason"], "reread");
        assert_eq!(
            ct["stale_flows"],
            serde_json::json!([{
                "service": "prod/web",
                "proto": "TCP",
                "client_ip": "10.244.1.10",
                "client_pod": "prod/order-7c9",
                "via": "10.96.5.5:80",
                "target": "10.244.3.71:8080",
                "former_owner": "prod/web-0",
                "left_at": "2026-03-19T08:00:10Z",
                "first_seen": "2026-03-19T08:00:11Z",
                "last_seen": "2026-03-19T08:00:15Z",
                "last_packet": "2026-03-19T08:00:14Z",
                "outlived_by_s": 5.0,
                "entries": 2,
                "unreplied": 0,
                "max_timeout_s": 431_999,
                "confirmed": true,
            }])
        );
        publish_read("node-1", &a, &mut st, publication(Vec::new()));
        let text = m.encode();
        assert_eq!(
            sample(
                &text,
                "ghostip_stale_flows{layer=\"conntrack\",node=\"node-1\"}"
            ),
            Some("0")
        );
        assert!(st.stale_flows.is_empty());
    }

    /// A table that cannot be read at all (no CAP_NET_ADMIN) says so in `/status` with the
    /// capability, drops its path and stale flows and zeroes the gauge; a read that was
    /// only interrupted keeps what the last complete read found.
    #[tokio::test]
    async fn an_unreadable_table_is_said_in_status_and_clears_the_gauge() {
        let (m, a) = metrics();
        let mut st = ConntrackStatus {
            path: Some("conntrack/node-1".into()),
            ..ConntrackStatus::default()
        };
        publish_read("node-1", &a, &mut st, publication(vec![stale_flow()]));
        publish_error("node-1", &a, &mut st, &ReadError::Interrupted);
        assert_eq!(st.stale_flows.len(), 1);
        assert!(st.path.is_some());
        let text = m.encode();
        assert_eq!(
            sample(
                &text,
                "ghostip_stale_flows{layer=\"conntrack\",node=\"node-1\"}"
            ),
            Some("2")
        );
        let denied = ReadError::Privilege {
            detail: "Operation not permitted (os error 1)".into(),
        };
        publish_error("node-1", &a, &mut st, &denied);
        let text = m.encode();
        assert_eq!(
            sample(
                &text,
                "ghostip_stale_flows{layer=\"conntrack\",node=\"node-1\"}"
            ),
            Some("0")
        );
        assert_eq!(
            sample(
                &text,
                "ghostip_conntrack_read_errors_total{error=\"privilege\"}"
            ),
            Some("1")
        );
        assert_eq!(
            sample(
                &text,
                "ghostip_conntrack_read_errors_total{error=\"interrupted\"}"
            ),
            Some("1")
        );
        let v = st.to_json();
        let ct = &v;
        assert_eq!(ct["missing_capability"], "CAP_NET_ADMIN");
        assert!(
            ct["error"].as_str().unwrap().contains("CAP_NET_ADMIN"),
            "{ct}"
        );
        assert_eq!(ct["path"], serde_json::Value::Null);
        assert_eq!(ct["stale_flows"], serde_json::json!([]));
    }
}
