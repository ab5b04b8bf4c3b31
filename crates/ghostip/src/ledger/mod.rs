//! The ledger keeps ghostip's history in SQLite: IP ownership intervals, endpoint
//! memberships, observations, findings and truth gaps.
//!
//! It is an IO adapter (rusqlite, bundled SQLite): the pure core never sees it, and
//! every time it stores is passed in by the caller. See [`Ledger`] for the entry point,
//! [`LedgerWriter`] for the batching writer thread the async `watch` command feeds, and
//! [`Ledger::whois`] with [`render_whois_table`] for `ghostip whois`. The schema, the
//! interval rules and retention are described in `docs/LEDGER.md`.
//!
//! # Files
//! [`Ledger::open_default`] uses [`default_db_path`]: `$GHOSTIP_DB`, else
//! `/var/lib/ghostip/ghostip.db` as root, else `$XDG_STATE_HOME/ghostip/ghostip.db` or
//! `~/.local/state/ghostip/ghostip.db`. Parent directories are created.
//!
//! # Errors
//! Every error is a [`LedgerError`] naming the file. A file that is not SQLite, is
//! corrupt, belongs to another application or has a newer schema is refused before
//! anything is written to it: nothing stored is ever reset.
//!
//! # Writers
//! [`Ledger::open`] takes the ledger's writer lock (`flock` on `<db>.lock`, see
//! [`lock_path`]) before it touches the file and holds it while the `Ledger` lives: one
//! writer per ledger, and a second one gets [`LedgerError::Locked`] naming the holder's PID.
//! [`Ledger::open_read_only`] takes no lock and runs beside the writer.
//!
//! # Crash safety
//! WAL mode, `synchronous=NORMAL`, and every write in a transaction: after a crash or
//! SIGKILL the file opens with every committed transaction (a power loss may drop the
//! last few) and none half-applied. `tests/integration/ledger_crash.rs` kills a writer repeatedly
//! and checks.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ghostip_analysis::ownership::{Membership, Ownership, Whois};
use ghostip_core::truth::{EndpointRecord, PodRecord};
use ghostip_core::{ChangeTime, Observation, PathInfo, PodRef, ServiceKey, Time};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};

mod at;
mod error;
mod finding;
mod lock;
mod membership;
mod observation;
mod ownership;
mod path;
mod relist;
mod schema;
mod time;
mod writer;

pub use at::{AtParseError, parse_at};
pub use error::LedgerError;
pub use finding::{FindingKind, FindingRecord, TruthGap};
pub use lock::lock_path;
pub use observation::{ObservationRun, ObservationWrite};
pub use path::{ROOT_DB_PATH, default_db_path, default_db_path_from};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use writer::{
    DROPPED, ErrorHook, LedgerHealth, LedgerSender, LedgerWriter, RetentionPruner, WriterOptions,
    WriterStats, failure_reason,
};

use error::{Inner, sql_error};
use relist::{RelistKind, Relists};
use time::to_ns;

/// How long a writer waits for another connection's lock before failing with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Default retention: closed intervals, observations, findings and gaps older than this are pruned.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// One write, as queued to a [`LedgerWriter`] or passed to [`Ledger::apply_batch`].
/// Each variant mirrors the [`Ledger`] method of the same name.
#[derive(Clone, Debug, PartialEq)]
pub enum LedgerOp {
    /// [`Ledger::apply_pod`].
    ApplyPod {
        /// The pod's current state.
        pod: PodRecord,
        /// When it was received.
        at: Time,
    },
    /// [`Ledger::pod_gone`].
    PodGone {
        /// The pod.
        pod: PodRef,
        /// When its deletion was received.
        at: Time,
    },
    /// [`Ledger::begin_pod_relist`].
    BeginPodRelist,
    /// [`Ledger::finish_pod_relist`].
    FinishPodRelist {
        /// When the relist completed.
        at: Time,
    },
    /// [`Ledger::membership_change`].
    MembershipChange {
        /// The Service.
        service: ServiceKey,
        /// The endpoint IP.
        ip: IpAddr,
        /// Its state, or `None` when it left.
        endpoint: Option<EndpointRecord>,
        /// Change time.
        at: ChangeTime,
    },
    /// [`Ledger::sync_memberships`].
    SyncMemberships {
        /// The Service.
        service: ServiceKey,
        /// All its endpoints now.
        endpoints: Vec<EndpointRecord>,
        /// Change time.
        at: ChangeTime,
    },
    /// [`Ledger::begin_membership_relist`].
    BeginMembershipRelist,
    /// [`Ledger::finish_membership_relist`].
    FinishMembershipRelist {
        /// When the relist completed.
        at: Time,
    },
    /// [`Ledger::record_observation`].
    Observation {
        /// The path observed.
        path: PathInfo,
        /// What it held.
        observation: Observation,
    },
    /// [`Ledger::record_finding`].
    Finding(FindingRecord),
    /// [`Ledger::truth_gap_start`].
    TruthGapStart {
        /// Start.
        at: Time,
        /// Why.
        reason: String,
    },
    /// [`Ledger::truth_gap_end`].
    TruthGapEnd {
        /// End.
        at: Time,
    },
    /// [`Ledger::prune`].
    Prune {
        /// Cutoff.
        older_than: Time,
    },
}

/// Rows deleted by [`Ledger::prune`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneStats {
    /// Closed IP ownership intervals.
    pub ip_intervals: usize,
    /// Ended memberships (with their state changes).
    pub memberships: usize,
    /// Observation runs.
    pub observations: usize,
    /// Findings.
    pub findings: usize,
    /// Closed truth gaps.
    pub truth_gaps: usize,
}

/// Result of [`Ledger::verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Lines of `PRAGMA integrity_check` (`["ok"]` when sound).
    pub integrity: Vec<String>,
    /// Broken ledger invariants (overlapping intervals, several open intervals per IP, …).
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// Whether SQLite and the ledger invariants are both sound.
    pub fn is_ok(&self) -> bool {
        self.integrity.len() == 1 && self.integrity[0] == "ok" && self.problems.is_empty()
    }
}

/// The SQLite ledger. Synchronous: use it from one thread, or through a [`LedgerWriter`].
///
/// Every write method runs in its own transaction; [`Ledger::apply_batch`] runs many in one.
#[derive(Debug)]
pub struct Ledger {
    // Dropped before the lock: the connection is closed when another writer may open.
    conn: Connection,
    path: PathBuf,
    schema_version: i64,
    /// The writer lock of a writable open; `None` for a read-only one.
    _lock: Option<lock::WriterLock>,
}

// === impl Ledger ===

impl Ledger {
    /// Opens (creating if needed) the ledger at `path` for writing, creating parent
    /// directories, enabling WAL and migrating the schema.
    ///
    /// First it takes the ledger's writer lock (`<db>.lock`, see [`lock_path`]) and holds it
    /// until the `Ledger` is dropped: one writer per ledger, whichever process it is in.
    ///
    /// # Errors
    /// [`LedgerError::Locked`] while another writable open holds the lock (naming its PID);
    /// then, like [`LedgerError::NotADatabase`], [`LedgerError::Corrupt`],
    /// [`LedgerError::ForeignDatabase`] and [`LedgerError::NewerSchema`], the file is left
    /// untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| LedgerError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let lock = lock::WriterLock::acquire(&path)?;
        let sql = |e| sql_error(&path, e);
        let mut conn = Connection::open(&path).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        conn.set_prepared_statement_cache_capacity(64);
        // Plans must not depend on bound values: otherwise SQLite marks statements with
        // range parameters for re-preparation, and the statement cache (which clears
        // bindings) makes every cached statement re-prepare on each use: 4x slower whois.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(sql)?;
        // Connection settings only: nothing here writes to the file. The page cache is 512 KiB:
        // the writer appends, and the cache fills up to its size with the file, so it is
        // resident memory every long-running process gains (16 MiB was 14 MiB of `watch` at
        // 150 k endpoints; 2 MiB was a 30-minute soak's +7 to +12 % RSS).
        conn.execute_batch(
            "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY; \
             PRAGMA cache_size = -512;",
        )
        .map_err(sql)?;
        schema::precheck(&conn, &path, schema::MIGRATIONS)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(sql)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(LedgerError::WalUnavailable { path, mode });
        }
        conn.execute_batch("PRAGMA journal_size_limit = 67108864;")
            .map_err(sql)?;
        let schema_version = schema::check_and_migrate(&mut conn, &path, schema::MIGRATIONS)?;
        conn.execute_batch(schema::TEMP_TABLES).map_err(sql)?;
        Ok(Self {
            conn,
            path,
            schema_version,
            _lock: Some(lock),
        })
    }

    /// Opens the ledger at the default path ([`default_db_path`]).
    pub fn open_default() -> Result<Self, LedgerError> {
        Self::open(default_db_path()?)
    }

    /// Opens an existing ledger for writing, as [`Ledger::open`] (taking the writer lock);
    /// [`LedgerError::NotFound`] when there is no file. To read only, beside a running
    /// writer, use [`Ledger::open_read_only`].
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let path = path.as_ref();
        if !path.exists() {
            return Err(LedgerError::NotFound {
                path: path.to_path_buf(),
            });
        }
        Self::open(path)
    }

    /// Opens an existing ledger for reading only (`explain`): never creates, migrates or
    /// writes the file, so it is safe on a ledger `watch` is writing and on a copy.
    ///
    /// # Errors
    /// [`LedgerError::NotFound`] without a file; [`LedgerError::NotCurrent`] for an empty
    /// file or an older schema (open it once with `ghostip watch`); the refusals of
    /// [`Ledger::open`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        use rusqlite::OpenFlags;
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(LedgerError::NotFound { path });
        }
        let sql = |e| sql_error(&path, e);
        // A writer in WAL mode keeps `-wal` while it runs. Without one nobody writes: open the
        // file as immutable, so that not even the `-wal` / `-shm` side files are created.
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let immutable = !Path::new(&wal).exists();
        let mut uri = String::from("file:");
        for c in path.to_string_lossy().chars() {
            match c {
                '?' => uri.push_str("%3f"),
                '#' => uri.push_str("%23"),
                '%' => uri.push_str("%25"),
                c => uri.push(c),
            }
        }
        uri.push_str(if immutable {
            "?mode=ro&immutable=1"
        } else {
            "?mode=ro"
        });
        let conn = Connection::open_with_flags(
            &uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        conn.set_prepared_statement_cache_capacity(64);
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(sql)?;
        schema::precheck(&conn, &path, schema::MIGRATIONS)?;
        let schema_version = schema::version(&conn, &path)?;
        if schema_version != SCHEMA_VERSION {
            return Err(LedgerError::NotCurrent {
                path,
                found: schema_version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(Self {
            conn,
            path,
            schema_version,
            _lock: None,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's schema version (equal to [`SCHEMA_VERSION`] once open).
    pub fn schema_version(&self) -> i64 {
        self.schema_version
    }

    fn write<T>(
        &mut self,
        f: impl FnOnce(&Connection, &mut Relists) -> Result<T, Inner>,
    ) -> Result<T, LedgerError> {
        let run = |conn: &mut Connection| -> Result<T, Inner> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut relists = Relists::load(&tx)?;
            let v = f(&tx, &mut relists)?;
            tx.commit()?;
            Ok(v)
        };
        run(&mut self.conn).map_err(|e| e.at(&self.path))
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, Inner>) -> Result<T, LedgerError> {
        let run = || -> Result<T, Inner> {
            // One snapshot for all statements of the read.
            let tx = self.conn.unchecked_transaction()?;
            let v = f(&tx)?;
            tx.commit()?;
            Ok(v)
        };
        run().map_err(|e| e.at(&self.path))
    }

    /// Records a pod's current state (watch `Apply`, or `InitApply` during a relist).
    ///
    /// For each IP of the pod: continues its open interval, or opens one (closing
    /// another pod's open interval on that IP at the new start). Open intervals of this
    /// pod on IPs it no longer lists end now (`ip-changed`). Host-network pods are ignored.
    pub fn apply_pod(&mut self, pod: &PodRecord, at: Time) -> Result<(), LedgerError> {
        self.write(|c, r| ownership::apply_pod(c, r, pod, at))
    }

    /// Records that a pod object disappeared: its open intervals end at `at` (`gone`).
    pub fn pod_gone(&mut self, pod: &PodRef, at: Time) -> Result<(), LedgerError> {
        self.write(|c, r| ownership::pod_gone(c, r, pod, at))
    }

    /// Starts a pod relist (after a restart or a watch reset). Pods applied until
    /// [`Ledger::finish_pod_relist`] are "seen"; a relist left unfinished (restart)
    /// is forgotten.
    pub fn begin_pod_relist(&mut self) -> Result<(), LedgerError> {
        self.write(|c, r| Ok(relist::begin(c, r, RelistKind::Pods)?))
    }

    /// Ends a pod relist: open intervals whose pod was not applied during it end at
    /// `at`, flagged approximate. Returns how many. Without a running relist, does nothing.
    pub fn finish_pod_relist(&mut self, at: Time) -> Result<usize, LedgerError> {
        self.write(|c, r| relist::finish(c, r, RelistKind::Pods, at))
    }

    /// Records an endpoint's state in a Service (`Some`), or that it left (`None`).
    /// A state equal to the current one is not stored again.
    pub fn membership_change(
        &mut self,
        service: &ServiceKey,
        ip: IpAddr,
        endpoint: Option<&EndpointRecord>,
        at: ChangeTime,
    ) -> Result<(), LedgerError> {
        self.write(|c, r| membership::change(c, r, service, ip, endpoint, at))
    }

    /// Makes `endpoints` the complete endpoint list of `service`: records each one's
    /// state and ends the memberships of IPs not listed.
    pub fn sync_memberships(
        &mut self,
        service: &ServiceKey,
        endpoints: &[EndpointRecord],
        at: ChangeTime,
    ) -> Result<(), LedgerError> {
        self.write(|c, r| membership::sync(c, r, service, endpoints, at))
    }

    /// Starts a membership relist (see [`Ledger::begin_pod_relist`]).
    pub fn begin_membership_relist(&mut self) -> Result<(), LedgerError> {
        self.write(|c, r| Ok(relist::begin(c, r, RelistKind::Memberships)?))
    }

    /// Ends a membership relist: memberships not touched during it end at `at`, approximately.
    pub fn finish_membership_relist(&mut self, at: Time) -> Result<usize, LedgerError> {
        self.write(|c, r| relist::finish(c, r, RelistKind::Memberships, at))
    }

    /// Stores an observation of `path`, merged into the previous run when its result
    /// (answer set ignoring TTLs, or failure) is the same.
    pub fn record_observation(
        &mut self,
        path: &PathInfo,
        obs: &Observation,
    ) -> Result<ObservationWrite, LedgerError> {
        self.write(|c, _| observation::record(c, path, obs))
    }

    /// Stores a finding, or updates the one with the same (path, service, target, t0).
    /// Returns its row id.
    pub fn record_finding(&mut self, finding: &FindingRecord) -> Result<i64, LedgerError> {
        self.write(|c, _| finding::record(c, finding))
    }

    /// Opens a truth gap at `at` unless one is open (a gap left open by a crash stays
    /// open: ghostip was not watching). Returns whether it opened one.
    pub fn truth_gap_start(&mut self, at: Time, reason: &str) -> Result<bool, LedgerError> {
        self.write(|c, _| finding::gap_start(c, at, reason))
    }

    /// Closes the open truth gap at `at`. Returns whether one was open.
    pub fn truth_gap_end(&mut self, at: Time) -> Result<bool, LedgerError> {
        self.write(|c, _| finding::gap_end(c, at))
    }

    /// Deletes what ended before `older_than`: closed ownership intervals, ended
    /// memberships, observation runs last seen before it, findings last updated before
    /// it, closed truth gaps. Open intervals are kept whatever their age.
    pub fn prune(&mut self, older_than: Time) -> Result<PruneStats, LedgerError> {
        self.write(|c, _| prune(c, older_than))
    }

    /// [`Ledger::prune`] with the cutoff `now - retention` (see [`DEFAULT_RETENTION`]).
    pub fn prune_retention(
        &mut self,
        now: Time,
        retention: Duration,
    ) -> Result<PruneStats, LedgerError> {
        let cutoff = now.checked_sub(retention).unwrap_or(Time::MIN);
        self.prune(cutoff)
    }

    /// Caps the file at `pages` pages for this connection (`PRAGMA max_page_count`, never
    /// below its current size): a write that would grow it further fails with `SQLITE_FULL`,
    /// as on a full disk, and stores nothing. Returns the cap in force.
    pub fn set_max_page_count(&mut self, pages: u64) -> Result<u64, LedgerError> {
        let pages = i64::try_from(pages).unwrap_or(i64::MAX);
        let cap: i64 = self
            .conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get(0)
            })
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(u64::try_from(cap).unwrap_or(0))
    }

    /// Applies `ops` in order in one transaction: all or nothing.
    pub fn apply_batch(&mut self, ops: &[LedgerOp]) -> Result<(), LedgerError> {
        self.write(|c, r| ops.iter().try_for_each(|op| apply_op(c, r, op)))
    }

    /// Who owned `ip` at `at`, and the owners just before and after.
    pub fn whois(&self, ip: IpAddr, at: Time) -> Result<Whois, LedgerError> {
        self.read(|c| ownership::whois(c, ip, at))
    }

    /// Every ownership interval of `ip`, oldest first.
    pub fn history(&self, ip: IpAddr) -> Result<Vec<Ownership>, LedgerError> {
        self.read(|c| ownership::history(c, ip))
    }

    /// Every Service membership of `ip`, oldest first, with state changes.
    pub fn memberships_of(&self, ip: IpAddr) -> Result<Vec<Membership>, LedgerError> {
        self.read(|c| membership::of_ip(c, ip))
    }

    /// The observation runs of one path for one service, oldest first.
    pub fn observation_runs(
        &self,
        path_id: &str,
        service: &ServiceKey,
    ) -> Result<Vec<ObservationRun>, LedgerError> {
        self.read(|c| observation::runs(c, path_id, service))
    }

    /// Findings with t0 at or after `since`, oldest first.
    pub fn findings_since(&self, since: Time) -> Result<Vec<FindingRecord>, LedgerError> {
        self.read(|c| finding::since(c, since))
    }

    /// Findings about `ip` (any port), oldest first.
    pub fn findings_for_ip(&self, ip: IpAddr) -> Result<Vec<FindingRecord>, LedgerError> {
        self.read(|c| finding::for_ip(c, ip))
    }

    /// Truth gaps overlapping `[from, to]`, oldest first.
    pub fn truth_gaps(&self, from: Time, to: Time) -> Result<Vec<TruthGap>, LedgerError> {
        self.read(|c| finding::gaps(c, from, to))
    }

    /// Checks the file (`PRAGMA integrity_check`, foreign keys) and the ledger's
    /// invariants. Reads every row: seconds on a large ledger.
    pub fn verify(&self) -> Result<VerifyReport, LedgerError> {
        self.read(verify)
    }
}

fn apply_op(c: &Connection, r: &mut Relists, op: &LedgerOp) -> Result<(), Inner> {
    match op {
        LedgerOp::ApplyPod { pod, at } => ownership::apply_pod(c, r, pod, *at),
        LedgerOp::PodGone { pod, at } => ownership::pod_gone(c, r, pod, *at),
        LedgerOp::BeginPodRelist => Ok(relist::begin(c, r, RelistKind::Pods)?),
        LedgerOp::FinishPodRelist { at } => relist::finish(c, r, RelistKind::Pods, *at).map(drop),
        LedgerOp::MembershipChange {
            service,
            ip,
            endpoint,
            at,
        } => membership::change(c, r, service, *ip, endpoint.as_ref(), *at),
        LedgerOp::SyncMemberships {
            service,
            endpoints,
            at,
        } => membership::sync(c, r, service, endpoints, *at),
        LedgerOp::BeginMembershipRelist => Ok(relist::begin(c, r, RelistKind::Memberships)?),
        LedgerOp::FinishMembershipRelist { at } => {
            relist::finish(c, r, RelistKind::Memberships, *at).map(drop)
        }
        LedgerOp::Observation { path, observation } => {
            observation::record(c, path, observation).map(drop)
        }
        LedgerOp::Finding(f) => finding::record(c, f).map(drop),
        LedgerOp::TruthGapStart { at, reason } => finding::gap_start(c, *at, reason).map(drop),
        LedgerOp::TruthGapEnd { at } => finding::gap_end(c, *at).map(drop),
        LedgerOp::Prune { older_than } => prune(c, *older_than).map(drop),
    }
}

fn prune(c: &Connection, older_than: Time) -> Result<PruneStats, Inner> {
    let cutoff = to_ns(older_than)?;
    let del = |sql: &str| c.execute(sql, [cutoff]);
    Ok(PruneStats {
        ip_intervals: del(
            "DELETE FROM ip_intervals WHERE closed_ns IS NOT NULL AND closed_ns < ?1",
        )?,
        // membership_states go with them (ON DELETE CASCADE).
        memberships: del(
            "DELETE FROM memberships WHERE end_received_ns IS NOT NULL AND end_received_ns < ?1",
        )?,
        observations: del("DELETE FROM observations WHERE last_ns < ?1")?,
        findings: del(
            "DELETE FROM findings WHERE coalesce(converged_by_ns, last_seen_ns, received_ns) < ?1",
        )?,
        truth_gaps: del("DELETE FROM truth_gaps WHERE end_ns IS NOT NULL AND end_ns < ?1")?,
    })
}

fn strings(c: &Connection, sql: &str) -> rusqlite::Result<Vec<String>> {
    c.prepare(sql)?
        .query_map([], |r| r.get::<_, String>(0))?
        .collect()
}

fn verify(c: &Connection) -> Result<VerifyReport, Inner> {
    let integrity = strings(c, "PRAGMA integrity_check")?;
    let mut problems = Vec::new();
    problems.extend(strings(
        c,
        "SELECT 'foreign key violation in ' || \"table\" || ' row ' || rowid FROM pragma_foreign_key_check LIMIT 20",
    )?);
    problems.extend(strings(
        c,
        "SELECT 'ip ' || ip || ': ' || count(*) || ' open intervals' FROM ip_intervals \
         WHERE closed_ns IS NULL GROUP BY ip HAVING count(*) > 1 LIMIT 20",
    )?);
    problems.extend(strings(
        c,
        "SELECT 'ip ' || ip || ': interval ' || id || ' starts before interval ' || prev_id || ' ends' FROM ( \
           SELECT ip, id, start_ns, \
                  lag(id) OVER w AS prev_id, lag(closed_ns) OVER w AS prev_closed \
           FROM ip_intervals WINDOW w AS (PARTITION BY ip ORDER BY start_ns, id)) \
         WHERE prev_id IS NOT NULL AND (prev_closed IS NULL OR prev_closed > start_ns) LIMIT 20",
    )?);
    problems.extend(strings(
        c,
        "SELECT 'interval ' || id || ' closes before it starts' FROM ip_intervals WHERE closed_ns < start_ns LIMIT 20",
    )?);
    problems.extend(strings(
        c,
        "SELECT 'service ' || svc_namespace || '/' || svc_name || ' ip ' || ip || ': ' || count(*) || \
         ' open memberships' FROM memberships WHERE end_received_ns IS NULL \
         GROUP BY svc_namespace, svc_name, ip HAVING count(*) > 1 LIMIT 20",
    )?);
    problems.extend(strings(
        c,
        "SELECT count(*) || ' open truth gaps' FROM truth_gaps WHERE end_ns IS NULL HAVING count(*) > 1",
    )?);
    Ok(VerifyReport {
        integrity,
        problems,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn cached_statements_are_not_re_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(dir.path().join("p.db")).unwrap();
        assert!(
            l.conn
                .db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG)
                .unwrap()
        );
        let sql = "SELECT id FROM ip_intervals WHERE ip = ?1 AND start_ns <= ?2 ORDER BY start_ns DESC LIMIT 1";
        for i in 0..10_i64 {
            let mut stmt = l.conn.prepare_cached(sql).unwrap();
            let _ = stmt
                .query_map(
                    rusqlite::params![format!("10.0.0.{i}"), i << 40],
                    |_| Ok(()),
                )
                .unwrap()
                .count();
        }
        let stmt = l.conn.prepare_cached(sql).unwrap();
        assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    fn plan(l: &Ledger, sql: &str) -> String {
        let mut stmt = l
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap();
        let rows = stmt.query_map([], |r| r.get::<_, String>(3)).unwrap();
        rows.map(|r| r.unwrap()).collect::<Vec<_>>().join(" | ")
    }

    /// The hot statements must use their indexes: a table scan here is what turns
    /// microsecond writes into seconds on a large ledger.
    #[test]
    fn hot_statements_use_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(dir.path().join("p.db")).unwrap();
        let cases = [
            (
                "SELECT id FROM ip_intervals WHERE ip = '1' AND start_ns <= 5 ORDER BY start_ns DESC, id DESC LIMIT 1",
                "ip_intervals_ip_start",
            ),
            (
                "SELECT id FROM ip_intervals WHERE ip = '1' AND start_ns > 5 ORDER BY start_ns ASC, id ASC LIMIT 1",
                "ip_intervals_ip_start",
            ),
            (
                "SELECT id FROM ip_intervals WHERE ip = '1' AND closed_ns IS NULL",
                "ip_intervals_open_ip",
            ),
            (
                "SELECT id, ip FROM ip_intervals WHERE pod_uid = 'u' AND pod_name = 'a' AND pod_namespace = 'n' \
                 AND closed_ns IS NULL",
                "ip_intervals_open_pod",
            ),
            (
                "UPDATE ip_intervals SET gone_ns = 1 WHERE pod_uid = 'u' AND pod_name = 'a' AND pod_namespace = 'n' \
                 AND gone_ns IS NULL AND closed_ns IS NOT NULL",
                "ip_intervals_not_gone",
            ),
            (
                "UPDATE ip_intervals SET closed_ns = 1 WHERE closed_ns IS NULL \
                 AND id NOT IN (SELECT id FROM temp.pod_relist_seen)",
                "ip_intervals_open_",
            ),
            (
                "UPDATE ip_intervals SET closed_ns = 1 WHERE pod_namespace = 'n' AND pod_name = 'a' AND pod_uid = 'u' \
                 AND closed_ns IS NULL",
                "ip_intervals_open_pod",
            ),
            (
                "DELETE FROM ip_intervals WHERE closed_ns IS NOT NULL AND closed_ns < 5",
                "ip_intervals_closed",
            ),
            (
                "SELECT id FROM memberships WHERE svc_namespace = 'n' AND svc_name = 's' AND ip = '1' \
                 AND end_received_ns IS NULL",
                "memberships_open",
            ),
            (
                "SELECT id FROM memberships WHERE svc_namespace = 'n' AND svc_name = 's' AND end_received_ns IS NULL",
                "memberships_open",
            ),
            (
                "SELECT id FROM observations WHERE path_id = 'p' AND svc_namespace = 'n' AND svc_name = 's' \
                 ORDER BY id DESC LIMIT 1",
                "observations_path_service",
            ),
        ];
        for (sql, index) in cases {
            let p = plan(&l, sql);
            assert!(p.contains(index), "{sql}\n  plan: {p}");
            assert!(!p.contains("TEMP B-TREE"), "{sql}\n  plan: {p}");
        }
    }
}
