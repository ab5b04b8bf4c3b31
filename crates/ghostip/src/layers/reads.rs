//! What the agent's node-local readers (the datapath's, conntrack's) share: when a read may start, the reads in flight and their results, the last error said, and the engine told of a failed read.
//!
//! Each reader has its own [`ReadSchedule`] and [`CostCap`]; a read runs off the agent's
//! loop (a task, or a blocking thread) and comes back through a channel as
//! `(reason, started, result)`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ghostip_core::{FailureReason, Observation, ObservationResult, PathIdx, ServiceKey, Time};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use ghostip_session::pacing::{CostCap, CostConfig, ReadReason, ReadSchedule};

use super::node::NodeOutputs;
use crate::cli::AgentArgs;
use crate::ledger::LedgerOp;
use crate::pipeline::Pipeline;

/// One finished read: why it ran, when it started, what it gave.
pub(crate) type Finished<T> = (ReadReason, Time, T);

/// The pacing and the reads in flight of one node-local reader; `T` is a read's result.
pub(crate) struct Reads<T> {
    /// The Service the observation of a failed read is attributed to (a read has none of
    /// its own).
    pub failure_service: ServiceKey,
    pub cap: CostCap,
    pub schedule: ReadSchedule,
    /// Longest one read may take.
    pub timeout: Duration,
    /// Set at shutdown: reads in flight stop.
    pub kill: Arc<AtomicBool>,
    tx: mpsc::Sender<Finished<T>>,
    rx: mpsc::Receiver<Finished<T>>,
    tasks: JoinSet<()>,
    last_error: Option<String>,
}

impl<T: Send + 'static> Reads<T> {
    /// A reader paced as the agent's flags say.
    pub fn new(args: &AgentArgs, failure_service: ServiceKey, kill: Arc<AtomicBool>) -> Self {
        let (tx, rx) = mpsc::channel(4);
        Self {
            failure_service,
            cap: cost_cap(args),
            schedule: ReadSchedule::new(args.reread_interval, args.reread_for),
            timeout: args.read_timeout,
            kill,
            tx,
            rx,
            tasks: JoinSet::new(),
            last_error: None,
        }
    }

    /// Why a read starts now, if one is due (`busy`: the path has something to confirm)
    /// and the CPU budget allows it; the schedule then counts it as started.
    pub fn begin(&mut self, now: Time, synced: bool, busy: bool) -> Option<ReadReason> {
        self.reap();
        if !synced {
            return None;
        }
        let reason = self.schedule.due(now, busy)?;
        if !self.cap.may_read(now) {
            return None;
        }
        self.schedule.started(now);
        Some(reason)
    }

    /// Runs `read` as a task; its result comes back through [`Reads::next`].
    pub fn spawn(
        &mut self,
        reason: ReadReason,
        now: Time,
        read: impl Future<Output = T> + Send + 'static,
    ) {
        let tx = self.tx.clone();
        self.tasks.spawn(async move {
            let r = read.await;
            let _ = tx.send((reason, now, r)).await;
        });
    }

    /// Runs `read` on a blocking thread; its result comes back through [`Reads::next`].
    pub fn spawn_blocking(
        &mut self,
        reason: ReadReason,
        now: Time,
        read: impl FnOnce() -> T + Send + 'static,
    ) {
        let tx = self.tx.clone();
        self.tasks.spawn_blocking(move || {
            let r = read();
            let _ = tx.blocking_send((reason, now, r));
        });
    }

    /// A read that finished, if any.
    pub fn next(&mut self) -> Option<Finished<T>> {
        self.rx.try_recv().ok()
    }

    /// Drops the tasks that ended.
    fn reap(&mut self) {
        while self.tasks.try_join_next().is_some() {}
    }

    /// Records the read's error; `true` when it differs from the last one said (say it
    /// then, once).
    pub fn new_error(&mut self, text: &str) -> bool {
        if self.last_error.as_deref() == Some(text) {
            return false;
        }
        self.last_error = Some(text.to_string());
        true
    }

    /// A read succeeded; `true` when the one before had failed.
    pub fn recovered(&mut self) -> bool {
        self.last_error.take().is_some()
    }

    /// Tells the engine and the ledger that `path` could not be read (counted, never read
    /// as staleness).
    pub async fn observe_failure(
        &self,
        p: &mut Pipeline,
        out: &NodeOutputs,
        path: PathIdx,
        now: Time,
        text: &str,
    ) {
        let obs = Observation {
            path,
            service: self.failure_service.clone(),
            at: now,
            result: ObservationResult::Failed(FailureReason::Unreadable(text.to_string())),
            latency: None,
        };
        let _ = p.session.observe(&obs);
        if let Some(info) = p.session.engine().path(path) {
            let _ = out
                .ledger
                .send(LedgerOp::Observation {
                    path: info.clone(),
                    observation: obs,
                })
                .await;
        }
    }

    /// Stops reads in flight.
    pub fn shutdown(&mut self) {
        self.tasks.abort_all();
    }
}

/// The CPU cap `--max-cpu`, `--min-audit-period` and `--max-audit-period` set for one
/// node-local reader (the datapath's, conntrack's: each has its own).
pub(crate) fn cost_cap(args: &AgentArgs) -> CostCap {
    CostCap::new(CostConfig {
        max_cpu: args.max_cpu / 100.0,
        min_period: args.min_audit_period,
        max_period: args.max_audit_period,
        ..CostConfig::default()
    })
}
