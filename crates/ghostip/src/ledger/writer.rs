//! A dedicated thread that owns the [`Ledger`] and commits queued writes in batches.
//!
//! Producers (async tasks or threads) send [`LedgerOp`]s into a bounded channel; the
//! thread takes everything queued (up to `max_batch`) and commits it in one
//! transaction. A full channel makes producers wait (backpressure) instead of growing
//! memory.
//!
//! # Failures
//! A batch that fails because of the write itself (a time out of range, a constraint) is
//! retried one write per transaction, so the bad write is dropped alone. A batch that fails
//! because of the storage (disk full, I/O error, corruption, read-only file, a lock held too
//! long: see [`failure_reason`]) is kept, in order, and retried every
//! [`WriterOptions::retry_every`] while new writes queue behind it, up to
//! [`WriterOptions::retry_limit`] writes; past that, new writes are dropped and counted.
//! Nothing stored is deleted or rewritten to make room. [`WriterStats::failing_since`] says
//! since when commits fail (the command goes unready and exits after its bound); every
//! failed commit and dropped write is reported to the error hook (the
//! `ghostip_ledger_write_errors_total{reason}` counter). Logging is bounded: one line the
//! first time a reason occurs, then at most one line per reason and minute with a count,
//! and one line when writes recover.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::ErrorCode;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

use super::{Ledger, LedgerError, LedgerOp};

/// Tunables of a [`LedgerWriter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// Channel capacity, in writes.
    pub capacity: usize,
    /// Most writes committed in one transaction.
    pub max_batch: usize,
    /// Most writes kept in memory, in order, while commits fail for the storage; later
    /// writes are dropped (counted) until a commit succeeds.
    pub retry_limit: usize,
    /// How often a failed commit is retried.
    pub retry_every: Duration,
}

impl Default for WriterOptions {
    /// A membership write carries a Service's endpoints (about 4 KiB at 15 endpoints), so
    /// what may wait is bounded in writes: while the initial list of a large cluster outruns
    /// SQLite, 8 192 queued plus 4 096 batched writes were tens of MiB of the process's peak.
    /// Backpressure costs nothing there (the list waits for the writer), and 512-write
    /// transactions keep the ingest rate (docs/BENCHMARKS.md, "Ledger").
    ///
    /// While the storage fails, 8 192 writes are kept for retry (at most about 32 MiB of
    /// membership writes; minutes of a large cluster's changes, as long as a full disk takes
    /// to be noticed and freed within the exit bound), retried every second.
    fn default() -> Self {
        Self {
            capacity: 256,
            max_batch: 512,
            retry_limit: 8192,
            retry_every: Duration::from_secs(1),
        }
    }
}

/// What [`LedgerWriter::health`] says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerHealth {
    /// The last commit succeeded (or none was tried).
    Ok,
    /// Commits fail for the storage (the last error): the command is not ready.
    Failing(String),
    /// They have failed for at least the bound: the command should exit (code 2).
    GiveUp(String),
}

/// Reported to the error hook for every write dropped (a bad write alone, or one past
/// [`WriterOptions::retry_limit`]), as the `reason` of `ghostip_ledger_write_errors_total`.
pub const DROPPED: &str = "dropped";

/// Called by the writer thread with a reason label for every failed commit (see
/// [`failure_reason`]) and every dropped write ([`DROPPED`]).
pub type ErrorHook = Box<dyn Fn(&'static str) + Send>;

/// Counters of a [`LedgerWriter`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub batches: u64,
    /// Writes committed.
    pub committed_ops: u64,
    /// Writes dropped: a write that failed alone, or one past the retry bound.
    pub failed_ops: u64,
    /// The last failure, with its causes.
    pub last_error: Option<String>,
    /// Since when commits fail for the storage (`None` while they succeed).
    pub failing_since: Option<Instant>,
    /// Commits that failed (each retry counts).
    pub failed_commits: u64,
    /// Writes kept for retry now.
    pub pending_ops: u64,
    /// Lines logged about failures and recoveries.
    pub log_lines: u64,
}

// Nearly every message is an `Op`, so boxing it would add an allocation per write
// without saving channel memory.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Msg {
    Op(LedgerOp),
    Flush(oneshot::Sender<()>),
    Close,
}

/// A cloneable handle that queues writes to a [`LedgerWriter`].
#[derive(Clone, Debug)]
pub struct LedgerSender {
    tx: mpsc::Sender<Msg>,
}

/// Prunes rows older than the retention once an hour, for long-running commands
/// (`watch`, `agent`) that call [`RetentionPruner::tick`] on every tick.
#[derive(Debug)]
pub struct RetentionPruner {
    retention: std::time::Duration,
    last: tokio::time::Instant,
}

impl RetentionPruner {
    /// How often pruning runs.
    const EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

    /// A pruner whose first run is an hour from now.
    pub fn new(retention: std::time::Duration) -> Self {
        Self {
            retention,
            last: tokio::time::Instant::now(),
        }
    }

    /// Queues a prune of rows older than `now - retention` when an hour has passed.
    pub async fn tick(&mut self, now: ghostip_core::Time, sender: &LedgerSender) {
        if self.last.elapsed() < Self::EVERY {
            return;
        }
        self.last = tokio::time::Instant::now();
        if let Ok(cutoff) = now.checked_sub(self.retention) {
            let _ = sender.send(LedgerOp::Prune { older_than: cutoff }).await;
        }
    }
}

// === impl LedgerSender ===

impl LedgerSender {
    /// Queues a write, waiting while the channel is full.
    pub async fn send(&self, op: LedgerOp) -> Result<(), LedgerError> {
        self.tx
            .send(Msg::Op(op))
            .await
            .map_err(|_| LedgerError::WriterClosed)
    }

    /// Queues a write from synchronous code, blocking while the channel is full.
    /// Must not be called from an async task (use [`LedgerSender::send`]).
    pub fn blocking_send(&self, op: LedgerOp) -> Result<(), LedgerError> {
        self.tx
            .blocking_send(Msg::Op(op))
            .map_err(|_| LedgerError::WriterClosed)
    }

    /// Waits until every write queued before this call is committed (or failed).
    pub async fn flush(&self) -> Result<(), LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Msg::Flush(tx))
            .await
            .map_err(|_| LedgerError::WriterClosed)?;
        rx.await.map_err(|_| LedgerError::WriterClosed)
    }

    /// [`LedgerSender::flush`] from synchronous code (not from an async task).
    pub fn blocking_flush(&self) -> Result<(), LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .blocking_send(Msg::Flush(tx))
            .map_err(|_| LedgerError::WriterClosed)?;
        rx.blocking_recv().map_err(|_| LedgerError::WriterClosed)
    }
}

/// Owns the ledger on a dedicated thread; see the module docs.
///
/// Dropping it without [`LedgerWriter::close`] lets the thread finish the queue in the
/// background once every [`LedgerSender`] is gone.
#[derive(Debug)]
pub struct LedgerWriter {
    sender: LedgerSender,
    thread: Option<JoinHandle<Ledger>>,
    stats: Arc<Mutex<WriterStats>>,
}

// === impl LedgerWriter ===

impl LedgerWriter {
    /// Starts the writer thread (named `ghostip-ledger`).
    pub fn spawn(ledger: Ledger, options: WriterOptions) -> Result<Self, LedgerError> {
        Self::spawn_with_error_hook(ledger, options, Box::new(|_| {}))
    }

    /// [`LedgerWriter::spawn`], reporting failures to `hook` (from the writer thread).
    pub fn spawn_with_error_hook(
        ledger: Ledger,
        options: WriterOptions,
        hook: ErrorHook,
    ) -> Result<Self, LedgerError> {
        let (tx, rx) = mpsc::channel(options.capacity.max(1));
        let stats = Arc::new(Mutex::new(WriterStats::default()));
        let worker = Worker {
            ledger,
            stats: Arc::clone(&stats),
            pending: Vec::new(),
            max_batch: options.max_batch.max(1),
            retry_limit: options.retry_limit.max(1),
            retry_every: options.retry_every,
            next_retry: crate::clock::monotonic_now(),
            hook,
            log: FailureLog::default(),
        };
        let thread = std::thread::Builder::new()
            .name("ghostip-ledger".into())
            .spawn(move || run(worker, rx))
            .map_err(LedgerError::WriterSpawn)?;
        Ok(Self {
            sender: LedgerSender { tx },
            thread: Some(thread),
            stats,
        })
    }

    /// Another handle for queueing writes.
    pub fn sender(&self) -> LedgerSender {
        self.sender.clone()
    }

    /// See [`LedgerSender::send`].
    pub async fn send(&self, op: LedgerOp) -> Result<(), LedgerError> {
        self.sender.send(op).await
    }

    /// See [`LedgerSender::blocking_send`].
    pub fn blocking_send(&self, op: LedgerOp) -> Result<(), LedgerError> {
        self.sender.blocking_send(op)
    }

    /// See [`LedgerSender::flush`].
    pub async fn flush(&self) -> Result<(), LedgerError> {
        self.sender.flush().await
    }

    /// See [`LedgerSender::blocking_flush`].
    pub fn blocking_flush(&self) -> Result<(), LedgerError> {
        self.sender.blocking_flush()
    }

    /// Whether commits succeed; `exit_after` is how long they may fail without a pause
    /// before the caller should give up ([`LedgerHealth::GiveUp`]).
    pub fn health(&self, exit_after: Duration) -> LedgerHealth {
        let s = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(since) = s.failing_since else {
            return LedgerHealth::Ok;
        };
        let error = s.last_error.clone().unwrap_or_default();
        if since.elapsed() >= exit_after {
            LedgerHealth::GiveUp(error)
        } else {
            LedgerHealth::Failing(error)
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> WriterStats {
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Commits everything queued, stops the thread and gives the ledger back. While the
    /// storage fails, the writes kept for retry get one last attempt and are lost if it fails.
    /// Blocks: from async code, call it in `spawn_blocking`. Later sends fail with
    /// [`LedgerError::WriterClosed`].
    pub fn close(mut self) -> Result<(Ledger, WriterStats), LedgerError> {
        // The thread may already be gone (it panicked); joining tells.
        let _ = self.sender.tx.blocking_send(Msg::Close);
        let thread = self.thread.take().ok_or(LedgerError::WriterClosed)?;
        let ledger = thread.join().map_err(|_| LedgerError::WriterClosed)?;
        Ok((ledger, self.stats()))
    }
}

fn run(mut w: Worker, mut rx: mpsc::Receiver<Msg>) -> Ledger {
    let mut closing = false;
    while !closing {
        if w.is_failing() {
            // Keep taking writes (up to the retry bound) so producers never block on a
            // broken disk; retry when due.
            loop {
                match rx.try_recv() {
                    Ok(msg) => w.handle(msg, &mut closing, &mut rx),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closing = true;
                        break;
                    }
                }
            }
            if closing {
                // One last attempt before the thread stops.
                w.next_retry = crate::clock::monotonic_now();
            }
            w.commit();
            if !closing && w.is_failing() {
                std::thread::sleep(w.retry_every.clamp(Duration::from_millis(1), POLL));
            }
            continue;
        }
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            w.handle(msg, &mut closing, &mut rx);
            next = rx.try_recv().ok();
        }
        w.commit();
    }
    if !w.pending.is_empty() {
        let n = w.pending.len() as u64;
        w.drop_writes(n);
        tracing::error!(
            writes = n,
            "The ledger writer stopped with writes it could not store; they are lost."
        );
    }
    w.ledger
}

/// How often a failing writer looks at its channel between retries.
const POLL: Duration = Duration::from_millis(50);

/// The writer thread's state.
struct Worker {
    ledger: Ledger,
    stats: Arc<Mutex<WriterStats>>,
    /// Writes not committed yet, in order.
    pending: Vec<LedgerOp>,
    max_batch: usize,
    retry_limit: usize,
    retry_every: Duration,
    next_retry: Instant,
    hook: ErrorHook,
    log: FailureLog,
}

impl Worker {
    fn is_failing(&self) -> bool {
        self.lock().failing_since.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WriterStats> {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn handle(&mut self, msg: Msg, closing: &mut bool, rx: &mut mpsc::Receiver<Msg>) {
        match msg {
            Msg::Op(op) => {
                if self.is_failing() && self.pending.len() >= self.retry_limit {
                    self.drop_writes(1);
                    self.log
                        .note(DROPPED, "the retry bound is reached", &self.stats);
                    return;
                }
                self.pending.push(op);
                if !self.is_failing() && self.pending.len() >= self.max_batch {
                    self.commit();
                }
            }
            Msg::Flush(done) => {
                // While failing, a flush does not wait for the storage to come back.
                if !self.is_failing() {
                    self.commit();
                }
                let _ = done.send(());
            }
            Msg::Close => {
                // Refuse new writes, but commit everything already queued.
                *closing = true;
                rx.close();
            }
        }
    }

    fn drop_writes(&mut self, n: u64) {
        self.lock().failed_ops += n;
        for _ in 0..n {
            (self.hook)(DROPPED);
        }
    }

    /// Commits the pending writes, `max_batch` at a time; stops at a storage failure,
    /// keeping what is left for the next retry.
    fn commit(&mut self) {
        if self.is_failing() && crate::clock::monotonic_now() < self.next_retry {
            return;
        }
        while !self.pending.is_empty() {
            let n = self.pending.len().min(self.max_batch);
            match self.ledger.apply_batch(&self.pending[..n]) {
                Ok(()) => self.committed(n, 1),
                Err(e) => match failure_reason(&e) {
                    Some(reason) => return self.storage_failed(reason, &e),
                    None => {
                        if !self.one_by_one(n) {
                            return;
                        }
                    }
                },
            }
        }
        self.lock().pending_ops = 0;
    }

    /// After a batch failed for one of its writes: its first `n` writes one per
    /// transaction, dropping the bad ones. False when the storage failed meanwhile.
    fn one_by_one(&mut self, n: usize) -> bool {
        for _ in 0..n {
            match self.ledger.apply_batch(&self.pending[..1]) {
                Ok(()) => self.committed(1, 1),
                Err(e) => match failure_reason(&e) {
                    Some(reason) => {
                        self.storage_failed(reason, &e);
                        return false;
                    }
                    None => {
                        self.pending.remove(0);
                        let text = chain(&e);
                        self.log.note("invalid", &text, &self.stats);
                        let mut s = self.lock();
                        s.failed_ops += 1;
                        s.last_error = Some(text);
                        drop(s);
                        (self.hook)("invalid");
                    }
                },
            }
        }
        true
    }

    fn committed(&mut self, n: usize, batches: u64) {
        self.pending.drain(..n);
        let mut s = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        s.batches += batches;
        s.committed_ops += n as u64;
        s.pending_ops = self.pending.len() as u64;
        if let Some(since) = s.failing_since.take() {
            s.log_lines += 1;
            tracing::info!(
                failed_for_s = since.elapsed().as_secs_f64(),
                failed_commits = s.failed_commits,
                "Ledger writes succeed again; the writes kept meanwhile are being stored."
            );
            drop(s);
            self.log = FailureLog::default();
        }
    }

    fn storage_failed(&mut self, reason: &'static str, e: &LedgerError) {
        let text = chain(e);
        self.log.note(reason, &text, &self.stats);
        let mut s = self.lock();
        s.failed_commits += 1;
        s.failing_since
            .get_or_insert_with(crate::clock::monotonic_now);
        s.last_error = Some(text);
        s.pending_ops = self.pending.len() as u64;
        drop(s);
        (self.hook)(reason);
        self.next_retry = crate::clock::monotonic_now() + self.retry_every;
    }
}

/// The `reason` label of a failure of the storage, which retrying the same writes later may
/// get past: `full`, `io`, `readonly`, `busy`, `corrupt` or `other`. `None` when the write
/// itself is at fault (a time out of range, a constraint, a value SQLite refuses): retrying
/// it can never succeed.
pub fn failure_reason(e: &LedgerError) -> Option<&'static str> {
    match e {
        LedgerError::Corrupt { .. } | LedgerError::NotADatabase { .. } => Some("corrupt"),
        LedgerError::Sqlite { source, .. } => match source.sqlite_error_code()? {
            ErrorCode::DiskFull => Some("full"),
            ErrorCode::SystemIoFailure
            | ErrorCode::CannotOpen
            | ErrorCode::OutOfMemory
            | ErrorCode::FileLockingProtocolFailed => Some("io"),
            ErrorCode::ReadOnly | ErrorCode::PermissionDenied => Some("readonly"),
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some("busy"),
            ErrorCode::ConstraintViolation
            | ErrorCode::TypeMismatch
            | ErrorCode::TooBig
            | ErrorCode::ParameterOutOfRange
            | ErrorCode::ApiMisuse => None,
            _ => Some("other"),
        },
        LedgerError::TimeOutOfRange { .. } | LedgerError::InvalidData { .. } => None,
        _ => Some("other"),
    }
}

/// Bounded failure logging: per reason, one line the first time, then at most one line a
/// minute with how many failures it stands for. Reset when writes recover.
#[derive(Default)]
struct FailureLog {
    /// Per reason: when its last line was logged and the failures since.
    reasons: BTreeMap<&'static str, (Instant, u64)>,
}

impl FailureLog {
    /// At most one line per reason and this period.
    const EVERY: Duration = Duration::from_secs(60);

    fn note(&mut self, reason: &'static str, error: &str, stats: &Mutex<WriterStats>) {
        let now = crate::clock::monotonic_now();
        let logged = match self.reasons.get_mut(reason) {
            None => {
                self.reasons.insert(reason, (now, 0));
                tracing::error!(
                    reason,
                    error,
                    "Ledger write failed; failed writes are kept and retried (see docs/LEDGER.md, \"Write failures\")."
                );
                true
            }
            Some((last, since)) => {
                *since += 1;
                if now.duration_since(*last) >= Self::EVERY {
                    tracing::warn!(
                        reason,
                        error,
                        failures = *since,
                        "Ledger writes still failing."
                    );
                    *last = now;
                    *since = 0;
                    true
                } else {
                    false
                }
            }
        };
        if logged {
            stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .log_lines += 1;
        }
    }
}

/// The error and its causes, `a: b: c`.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
