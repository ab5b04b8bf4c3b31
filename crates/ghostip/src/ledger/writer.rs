//! A dedicated thread that owns the [`Ledger`] and commits queued writes in batches.
//!
//! Producers (async tasks or threads) send [`LedgerOp`]s into a bounded channel; the
//! thread takes everything queued (up to `max_batch`) and commits it in one
//! transaction. A full channel makes producers wait (backpressure) instead of growing
//! memory. If a batch fails, its writes are retried one by one so one bad write does
//! not lose the others; failures are counted in [`WriterStats`] and logged.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};

use super::{Ledger, LedgerError, LedgerOp};

/// Tunables of a [`LedgerWriter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// Channel capacity, in writes.
    pub capacity: usize,
    /// Most writes committed in one transaction.
    pub max_batch: usize,
}

impl Default for WriterOptions {
    /// A membership write carries a Service's endpoints (about 4 KiB at 15 endpoints), so
    /// what may wait is bounded in writes: while the initial list of a large cluster outruns
    /// SQLite, 8 192 queued plus 4 096 batched writes were tens of MiB of the process's peak.
    /// Backpressure costs nothing there (the list waits for the writer), and 512-write
    /// transactions keep the ingest rate (docs/BENCHMARKS.md, "Ledger").
    fn default() -> Self {
        Self {
            capacity: 256,
            max_batch: 512,
        }
    }
}

/// Counters of a [`LedgerWriter`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub batches: u64,
    /// Writes committed.
    pub committed_ops: u64,
    /// Writes that failed even alone (dropped).
    pub failed_ops: u64,
    /// The last failure, with its causes.
    pub last_error: Option<String>,
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
        let (tx, rx) = mpsc::channel(options.capacity.max(1));
        let stats = Arc::new(Mutex::new(WriterStats::default()));
        let thread_stats = Arc::clone(&stats);
        let max_batch = options.max_batch.max(1);
        let thread = std::thread::Builder::new()
            .name("ghostip-ledger".into())
            .spawn(move || run(ledger, rx, max_batch, &thread_stats))
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

    /// The counters so far.
    pub fn stats(&self) -> WriterStats {
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Commits everything queued, stops the thread and gives the ledger back.
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

fn run(
    mut ledger: Ledger,
    mut rx: mpsc::Receiver<Msg>,
    max_batch: usize,
    stats: &Mutex<WriterStats>,
) -> Ledger {
    let mut ops = Vec::with_capacity(max_batch);
    let mut closing = false;
    while !closing {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Op(op) => ops.push(op),
                Msg::Flush(w) => {
                    commit(&mut ledger, &mut ops, stats);
                    let _ = w.send(());
                }
                Msg::Close => {
                    // Refuse new writes, but commit everything already queued.
                    closing = true;
                    rx.close();
                }
            }
            if ops.len() >= max_batch {
                commit(&mut ledger, &mut ops, stats);
            }
            next = rx.try_recv().ok();
        }
        commit(&mut ledger, &mut ops, stats);
    }
    ledger
}

fn commit(ledger: &mut Ledger, ops: &mut Vec<LedgerOp>, stats: &Mutex<WriterStats>) {
    if ops.is_empty() {
        return;
    }
    let n = ops.len() as u64;
    let batch = ledger.apply_batch(ops);
    let mut s = stats.lock().unwrap_or_else(PoisonError::into_inner);
    match batch {
        Ok(()) => {
            s.batches += 1;
            s.committed_ops += n;
        }
        Err(e) => {
            tracing::warn!(error = %chain(&e), writes = n, "Ledger batch failed; retrying its writes one by one.");
            let mut failed = 0u64;
            for op in ops.iter() {
                match ledger.apply_batch(std::slice::from_ref(op)) {
                    Ok(()) => {
                        s.batches += 1;
                        s.committed_ops += 1;
                    }
                    Err(e) => {
                        failed += 1;
                        s.last_error = Some(chain(&e));
                    }
                }
            }
            if failed > 0 {
                s.failed_ops += failed;
                tracing::error!(
                    failed,
                    error = s.last_error.as_deref().unwrap_or(""),
                    "Ledger writes dropped."
                );
            }
        }
    }
    ops.clear();
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
