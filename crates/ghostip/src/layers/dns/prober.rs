//! The DNS prober: one task that asks every DNS path about Service names, in bursts after truth changes and in a slow sweep, within one global query budget.
//!
//! See [`Prober::run`] for the entry point and [`ProbeCommand`] for how the caller steers
//! it. Scheduling, in priority order:
//!
//! 1. **Bursts** ([`ProbeCommand::Burst`]): every `burst_interval` (default 250 ms) a round
//!    of queries is owed, one per (name, path) of the Service. Owed queries go out as fast
//!    as the budget allows, bursts taking turns (round-robin), so when the budget is too
//!    small every burst degrades equally. Queries still owed when the next round starts
//!    are dropped and counted in [`StatsSnapshot::skipped`]; each burst keeps a cursor
//!    that carries over rounds, so under a small budget every (name, path) is still
//!    probed in turn. A burst ends on [`ProbeCommand::StopBurst`] or at its deadline.
//! 2. **Sweep** ([`ProbeCommand::SetSweep`]): every (name, path) of every headless
//!    Service once per `sweep_period` (default 30 s), spaced evenly, using only the budget
//!    the bursts leave. Time lost to bursts is not caught up: the sweep resumes at its pace
//!    where it stopped.
//!
//! Every query takes a cell of the [`Budget`] (GCRA, burst 1) before it is sent, so the
//! budget is never exceeded, whatever the number of bursts, names and paths. Queries run
//! concurrently (at most `max_in_flight`), each bounded by its own timeout. Results go out
//! as [`ProbeEvent`]s, each carrying the engine's [`Observation`]; counters for metrics
//! are in [`ProbeStats`]. Cancelling the token stops the task and aborts queries in flight
//! at once.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ghostip_core::{Observation, ObservationResult, PathKind, ServiceKey, Time};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::Name;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::budget::{Budget, DEFAULT_QUERIES_PER_SECOND};
use super::query::{self, DnsAnswer, QueryConfig, QueryError, Transport};
use crate::clock::TokioClock;
use ghostip_core::Clock;
use ghostip_session::layers::dns::names::{ProbeName, QueryType};
use ghostip_session::layers::dns::probe::{ProbeCommand, ProbePath};

/// Sends one query to one server. [`HickoryTransport`] is the real one; tests of the
/// scheduler substitute their own.
pub trait DnsTransport: Send + Sync + 'static {
    /// One uncached query (see [`query::query`]).
    fn query(
        &self,
        server: SocketAddr,
        name: &Name,
        qtype: QueryType,
    ) -> impl Future<Output = Result<DnsAnswer, QueryError>> + Send;
}

/// Queries through hickory-net ([`query::query`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct HickoryTransport {
    /// Timeout and TCP fallback.
    pub config: QueryConfig,
}

impl DnsTransport for HickoryTransport {
    fn query(
        &self,
        server: SocketAddr,
        name: &Name,
        qtype: QueryType,
    ) -> impl Future<Output = Result<DnsAnswer, QueryError>> + Send {
        query::query(server, name, qtype, &self.config)
    }
}

/// Schedules and limits of the prober.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProberConfig {
    /// Global query budget (default 100/s).
    pub queries_per_second: NonZeroU32,
    /// Time between two rounds of a burst (default 250 ms).
    pub burst_interval: Duration,
    /// Time for one full sweep over every headless name on every path (default 30 s).
    pub sweep_period: Duration,
    /// Queries outstanding at once (default 256; queries time out, so this only bites
    /// when many paths time out at a high budget).
    pub max_in_flight: usize,
}

impl Default for ProberConfig {
    fn default() -> Self {
        Self {
            queries_per_second: DEFAULT_QUERIES_PER_SECOND,
            burst_interval: Duration::from_millis(250),
            sweep_period: Duration::from_secs(30),
            max_in_flight: 256,
        }
    }
}

/// Why a query was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeSource {
    /// Part of a burst after a truth change.
    Burst,
    /// Part of the slow sweep.
    Sweep,
}

impl ProbeSource {
    /// `burst` or `sweep`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeSource::Burst => "burst",
            ProbeSource::Sweep => "sweep",
        }
    }
}

/// The result of one query, for the engine and the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeEvent {
    /// What the path held for the Service (A/AAAA: bare IPs; SRV: `ip:port`), or why it
    /// could not be read. `at` is when the answer arrived.
    pub observation: Observation,
    /// Stable id of the path.
    pub path_id: String,
    /// Kind of the path.
    pub path_kind: PathKind,
    /// The question asked. An A observation covers only IPv4 endpoints, AAAA only IPv6.
    pub probe: ProbeName,
    /// Burst or sweep.
    pub source: ProbeSource,
    /// Response code, when a response came back.
    pub rcode: Option<ResponseCode>,
    /// Transport of the answer (or of the failed attempt).
    pub transport: Transport,
}

/// Counters for `ghostip_probe_queries_total` / `ghostip_probe_errors_total` and health.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Queries sent, by path kind and source.
    pub queries: BTreeMap<(PathKind, ProbeSource), u64>,
    /// Failed queries, by path kind and [`FailureReason::label`](ghostip_core::FailureReason::label).
    pub errors: BTreeMap<(PathKind, &'static str), u64>,
    /// Burst queries dropped because the budget (or `max_in_flight`) could not fit a round.
    pub skipped: u64,
    /// Answers that came over TCP after a truncated UDP answer.
    pub tcp_fallbacks: u64,
    /// Bursts running.
    pub active_bursts: usize,
    /// Queries outstanding.
    pub in_flight: usize,
}

impl StatsSnapshot {
    /// All queries sent.
    pub fn total_queries(&self) -> u64 {
        self.queries.values().sum()
    }

    /// All failed queries.
    pub fn total_errors(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Live counters shared between the prober and its caller.
#[derive(Debug, Default)]
pub struct ProbeStats {
    inner: Mutex<StatsSnapshot>,
}

impl ProbeStats {
    /// A copy of the counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, StatsSnapshot> {
        // A panic while holding the lock cannot leave counters inconsistent: keep going.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The DNS prober. Build it, keep [`Prober::stats`] (and [`Prober::budget`] to share),
/// then spawn [`Prober::run`].
#[derive(Debug)]
pub struct Prober<T = HickoryTransport, C = TokioClock> {
    config: ProberConfig,
    transport: Arc<T>,
    clock: C,
    budget: Budget,
    stats: Arc<ProbeStats>,
}

impl Prober {
    /// A prober sending real queries with `query` settings, stamping observations with a
    /// [`TokioClock`] anchored now.
    pub fn new(config: ProberConfig, query: QueryConfig) -> Self {
        Self::with_transport(
            config,
            HickoryTransport { config: query },
            TokioClock::new(),
        )
    }
}

impl<T: DnsTransport, C: Clock + Clone> Prober<T, C> {
    /// A prober over any transport and clock.
    pub fn with_transport(config: ProberConfig, transport: T, clock: C) -> Self {
        Self {
            budget: Budget::per_second(config.queries_per_second),
            config,
            transport: Arc::new(transport),
            clock,
            stats: Arc::default(),
        }
    }

    /// Uses `budget` instead of a private one (e.g. to share it with connect probes).
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The query budget (clone it to share).
    pub fn budget(&self) -> Budget {
        self.budget.clone()
    }

    /// The live counters.
    pub fn stats(&self) -> Arc<ProbeStats> {
        Arc::clone(&self.stats)
    }

    /// Runs until `cancel` is cancelled: applies `commands`, sends queries, emits `events`.
    ///
    /// Returns promptly on cancellation (queries in flight are aborted). A closed
    /// `commands` channel keeps the last settings; a closed `events` channel drops results.
    pub async fn run(
        self,
        mut commands: mpsc::Receiver<ProbeCommand>,
        events: mpsc::Sender<ProbeEvent>,
        cancel: CancellationToken,
    ) {
        let mut schedule = Schedule::new(self.config);
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut commands_open = true;
        loop {
            let now = Instant::now();
            let skipped = schedule.tick(now);
            if skipped > 0 {
                self.stats.lock().skipped += skipped;
            }
            let mut wake = None;
            if tasks.len() < self.config.max_in_flight.max(1) {
                match schedule.next_due(now) {
                    Some(due) if due <= now => match self.budget.try_acquire() {
                        Ok(()) => {
                            if let Some(work) = schedule.pick(now) {
                                self.count_query(&work, &schedule, tasks.len() + 1);
                                self.dispatch(&mut tasks, work, &events);
                            }
                            continue;
                        }
                        Err(wait) => wake = Some(now + wait),
                    },
                    other => wake = other,
                }
            }
            // With every slot taken, owed burst queries wait; those still owed when the
            // next round starts are counted as skipped, as when the budget is short.
            self.note(&schedule, tasks.len());

            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(cmd) => schedule.apply(cmd, Instant::now(), self.clock.now()),
                    None => commands_open = false,
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                () = sleep_until(wake) => {}
            }
        }
        tasks.shutdown().await;
        self.note(&schedule, 0);
    }

    fn count_query(&self, work: &Work, schedule: &Schedule, in_flight: usize) {
        let mut s = self.stats.lock();
        *s.queries
            .entry((work.path.path.info.kind, work.source))
            .or_default() += 1;
        s.active_bursts = schedule.bursts.len();
        s.in_flight = in_flight;
    }

    fn note(&self, schedule: &Schedule, in_flight: usize) {
        let mut s = self.stats.lock();
        s.active_bursts = schedule.bursts.len();
        s.in_flight = in_flight;
    }

    fn dispatch(&self, tasks: &mut JoinSet<()>, work: Work, events: &mpsc::Sender<ProbeEvent>) {
        let transport = Arc::clone(&self.transport);
        let clock = self.clock.clone();
        let stats = Arc::clone(&self.stats);
        let events = events.clone();
        tasks.spawn(async move {
            let Work {
                path,
                service,
                probe,
                source,
            } = work;
            let result = transport
                .query(path.path.server, &probe.name, probe.qtype)
                .await;
            let at = clock.now();
            let kind = path.path.info.kind;
            let (result, latency, rcode, transport) = match result {
                Ok(answer) => {
                    if answer.transport == Transport::Tcp {
                        stats.lock().tcp_fallbacks += 1;
                    }
                    (
                        ObservationResult::Held(answer.held()),
                        answer.latency,
                        Some(answer.rcode),
                        answer.transport,
                    )
                }
                Err(e) => {
                    *stats
                        .lock()
                        .errors
                        .entry((kind, e.reason.label()))
                        .or_default() += 1;
                    tracing::debug!(error = %e, path = %path.path.info.id, "DNS probe failed");
                    (
                        ObservationResult::Failed(e.reason),
                        e.latency,
                        e.rcode,
                        e.transport,
                    )
                }
            };
            let event = ProbeEvent {
                observation: Observation {
                    path: path.idx,
                    service,
                    at,
                    result,
                    latency: Some(latency),
                },
                path_id: path.path.info.id.clone(),
                path_kind: kind,
                probe,
                source,
                rcode,
                transport,
            };
            // A closed receiver means the caller is shutting down; the result is moot.
            let _ = events.send(event).await;
        });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// One query to send.
#[derive(Debug)]
struct Work {
    path: Arc<ProbePath>,
    service: ServiceKey,
    probe: ProbeName,
    source: ProbeSource,
}

#[derive(Debug)]
struct BurstState {
    service: ServiceKey,
    names: Vec<ProbeName>,
    until: Instant,
    next_round: Instant,
    /// Queries of the current round not sent yet.
    owed: usize,
    /// Next item (name-major: all paths for the first name, then the next name), across rounds.
    cursor: usize,
}

#[derive(Debug)]
struct SweepEntry {
    service: ServiceKey,
    probe: ProbeName,
}

/// The pure part of the prober: what is due when, and what goes next.
#[derive(Debug)]
struct Schedule {
    config: ProberConfig,
    paths: Vec<Arc<ProbePath>>,
    bursts: Vec<BurstState>,
    /// Round-robin position among bursts.
    rr: usize,
    sweep: Vec<SweepEntry>,
    sweep_cursor: usize,
    sweep_next: Instant,
    sweep_spacing: Duration,
}

impl Schedule {
    fn new(config: ProberConfig) -> Self {
        Self {
            config,
            paths: Vec::new(),
            bursts: Vec::new(),
            rr: 0,
            sweep: Vec::new(),
            sweep_cursor: 0,
            sweep_next: Instant::now(),
            sweep_spacing: Duration::ZERO,
        }
    }

    fn burst_len(&self, b: &BurstState) -> usize {
        b.names.len() * self.paths.len()
    }

    fn sweep_len(&self) -> usize {
        self.sweep.len() * self.paths.len()
    }

    /// Applies a command at `now`, which is `now_wall` on the wall clock (deadlines come as
    /// wall-clock times from the pure runtime).
    fn apply(&mut self, cmd: ProbeCommand, now: Instant, now_wall: Time) {
        match cmd {
            ProbeCommand::SetPaths(paths) => {
                self.paths = paths.into_iter().map(Arc::new).collect();
                let p = self.paths.len();
                for b in &mut self.bursts {
                    let len = b.names.len() * p;
                    b.owed = b.owed.min(len);
                    b.cursor = if len == 0 { 0 } else { b.cursor % len };
                }
                self.reset_sweep_pace(now);
            }
            ProbeCommand::SetSweep(services) => {
                self.sweep = services
                    .into_iter()
                    .flat_map(|s| {
                        let service = s.service;
                        s.names.into_iter().map(move |probe| SweepEntry {
                            service: service.clone(),
                            probe,
                        })
                    })
                    .collect();
                self.reset_sweep_pace(now);
            }
            ProbeCommand::Burst {
                service,
                names,
                until,
            } => {
                let ahead = Duration::try_from(until.duration_since(now_wall)).unwrap_or_default();
                let until = now + ahead;
                if let Some(b) = self.bursts.iter_mut().find(|b| b.service == service) {
                    b.names = names;
                    b.until = until;
                    b.next_round = now;
                    b.owed = 0;
                    b.cursor = 0;
                } else if !names.is_empty() {
                    self.bursts.push(BurstState {
                        service,
                        names,
                        until,
                        next_round: now,
                        owed: 0,
                        cursor: 0,
                    });
                }
                self.bursts.retain(|b| !b.names.is_empty());
            }
            ProbeCommand::StopBurst { service } => self.bursts.retain(|b| b.service != service),
        }
    }

    fn reset_sweep_pace(&mut self, now: Instant) {
        let len = self.sweep_len();
        if len == 0 {
            self.sweep_cursor = 0;
            return;
        }
        self.sweep_cursor %= len;
        let nanos = self.config.sweep_period.as_nanos() / len as u128;
        self.sweep_spacing = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        // Never wait longer than one new spacing for the next sweep query.
        self.sweep_next = self.sweep_next.min(now + self.sweep_spacing);
    }

    /// Ends expired bursts and starts due rounds; returns the queries skipped.
    fn tick(&mut self, now: Instant) -> u64 {
        self.bursts.retain(|b| b.until > now);
        let p = self.paths.len();
        let interval = self.config.burst_interval;
        let mut skipped = 0;
        for b in &mut self.bursts {
            if now >= b.next_round {
                skipped += b.owed as u64;
                b.owed = b.names.len() * p;
                b.next_round += interval;
                if b.next_round <= now {
                    b.next_round = now + interval;
                }
            }
        }
        skipped
    }

    /// When the next query is due (`<= now`: now), or `None` when nothing is scheduled.
    fn next_due(&self, now: Instant) -> Option<Instant> {
        if self
            .bursts
            .iter()
            .any(|b| b.owed > 0 && self.burst_len(b) > 0)
        {
            return Some(now);
        }
        let bursts = self.bursts.iter().flat_map(|b| [b.next_round, b.until]);
        let sweep = (self.sweep_len() > 0).then_some(self.sweep_next);
        bursts.chain(sweep).min()
    }

    /// The next query: bursts first (round-robin), then the sweep if it is due.
    fn pick(&mut self, now: Instant) -> Option<Work> {
        let n = self.bursts.len();
        let p = self.paths.len();
        for i in 0..n {
            let idx = (self.rr + i) % n;
            let b = &mut self.bursts[idx];
            let len = b.names.len() * p;
            if b.owed == 0 || len == 0 {
                continue;
            }
            let k = b.cursor % len;
            b.cursor = (k + 1) % len;
            b.owed -= 1;
            // Not reduced modulo `n`: a burst added later is next in line.
            self.rr = idx + 1;
            let work = Work {
                path: Arc::clone(&self.paths[k % p]),
                service: b.service.clone(),
                probe: b.names[k / p].clone(),
                source: ProbeSource::Burst,
            };
            return Some(work);
        }
        let len = self.sweep_len();
        if len == 0 || now < self.sweep_next {
            return None;
        }
        let k = self.sweep_cursor % len;
        self.sweep_cursor = (k + 1) % len;
        self.sweep_next = (self.sweep_next + self.sweep_spacing).max(now);
        let entry = &self.sweep[k / p];
        Some(Work {
            path: Arc::clone(&self.paths[k % p]),
            service: entry.service.clone(),
            probe: entry.probe.clone(),
            source: ProbeSource::Sweep,
        })
    }
}
