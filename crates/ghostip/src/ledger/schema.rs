//! The ledger's schema, its ordered migrations, and the checks made before touching a file.
//!
//! `PRAGMA user_version` holds the schema version and `PRAGMA application_id` marks the
//! file as a ghostip ledger. Migrations run in order, each in its own transaction that
//! also bumps `user_version`, so a crash leaves the file at one version or the next.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::error::{LedgerError, sql_error};

/// `PRAGMA application_id` of a ghostip ledger ("ghip").
pub const APPLICATION_ID: i64 = 0x6768_6970;

/// The schema version this binary writes (the last migration).
pub const SCHEMA_VERSION: i64 = 2;

/// One schema migration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    /// The version the file has after this migration (1, 2, …, consecutive).
    pub version: i64,
    /// What it does, for humans.
    #[allow(dead_code)]
    pub name: &'static str,
    /// The SQL, run in one transaction.
    pub sql: &'static str,
}

/// Every migration, oldest first. Never edit a released one: append a new one.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial schema",
        sql: V1,
    },
    Migration {
        version: 2,
        name: "findings keep the trigger time and why it was not t0",
        sql: V2,
    },
];

/// Times are INTEGER unix nanoseconds (`*_ns`); IPs are canonical text (`IpAddr` display,
/// IPv4-mapped IPv6 folded to IPv4); booleans are 0/1.
const V1: &str = r#"
-- Who owned which IP when: one row per (pod, IP) ownership, [start_ns, closed_ns).
CREATE TABLE ip_intervals (
    id              INTEGER PRIMARY KEY,
    ip              TEXT    NOT NULL,
    pod_namespace   TEXT    NOT NULL,
    pod_name        TEXT    NOT NULL,
    pod_uid         TEXT    NOT NULL,
    node            TEXT,
    owner_kind      TEXT,
    owner_name      TEXT,
    created_ns      INTEGER,            -- metadata.creationTimestamp
    ready_ns        INTEGER,            -- first time ghostip saw it ready
    terminating_ns  INTEGER,            -- metadata.deletionTimestamp
    grace_period_s  INTEGER,
    prestop_s       INTEGER,
    gone_ns         INTEGER,            -- the pod object disappeared, or its IP changed
    opened_ns       INTEGER NOT NULL,   -- when ghostip first saw this ownership
    start_ns        INTEGER NOT NULL,   -- start of ownership (see docs/LEDGER.md)
    closed_ns       INTEGER,            -- NULL while open
    end_reason      TEXT,               -- gone | ip-changed | reused | relist
    approximate     INTEGER NOT NULL DEFAULT 0,
    CHECK (closed_ns IS NULL OR closed_ns >= start_ns)
);
CREATE INDEX ip_intervals_ip_start ON ip_intervals (ip, start_ns);
CREATE UNIQUE INDEX ip_intervals_open_ip ON ip_intervals (ip) WHERE closed_ns IS NULL;
CREATE INDEX ip_intervals_open_pod ON ip_intervals (pod_uid, pod_name) WHERE closed_ns IS NULL;
-- Intervals closed by IP reuse whose pod has not disappeared yet (few at any time).
CREATE INDEX ip_intervals_not_gone ON ip_intervals (pod_uid, pod_name) WHERE gone_ns IS NULL AND closed_ns IS NOT NULL;
CREATE INDEX ip_intervals_closed ON ip_intervals (closed_ns) WHERE closed_ns IS NOT NULL;

-- Endpoint membership of an IP in a Service (port-less), with its state changes.
CREATE TABLE memberships (
    id                INTEGER PRIMARY KEY,
    svc_namespace     TEXT    NOT NULL,
    svc_name          TEXT    NOT NULL,
    ip                TEXT    NOT NULL,
    pod_namespace     TEXT,
    pod_name          TEXT,
    pod_uid           TEXT,
    node              TEXT,
    ready             INTEGER NOT NULL,  -- current state
    serving           INTEGER NOT NULL,
    terminating       INTEGER NOT NULL,
    start_t0_ns       INTEGER NOT NULL,
    start_received_ns INTEGER NOT NULL,
    end_t0_ns         INTEGER,
    end_received_ns   INTEGER,           -- NULL while a member
    approximate       INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX memberships_open ON memberships (svc_namespace, svc_name, ip) WHERE end_received_ns IS NULL;
CREATE INDEX memberships_ip ON memberships (ip, start_t0_ns);
CREATE INDEX memberships_end ON memberships (end_received_ns) WHERE end_received_ns IS NOT NULL;

CREATE TABLE membership_states (
    id            INTEGER PRIMARY KEY,
    membership_id INTEGER NOT NULL REFERENCES memberships (id) ON DELETE CASCADE,
    t0_ns         INTEGER NOT NULL,
    received_ns   INTEGER NOT NULL,
    ready         INTEGER NOT NULL,
    serving       INTEGER NOT NULL,
    terminating   INTEGER NOT NULL
);
CREATE INDEX membership_states_membership ON membership_states (membership_id);

-- Observations, deduplicated: one row per run of identical consecutive results
-- of one path for one service.
CREATE TABLE observations (
    id             INTEGER PRIMARY KEY,
    path_id        TEXT    NOT NULL,
    path_kind      TEXT    NOT NULL,
    svc_namespace  TEXT    NOT NULL,
    svc_name       TEXT    NOT NULL,
    first_ns       INTEGER NOT NULL,
    last_ns        INTEGER NOT NULL,
    count          INTEGER NOT NULL,
    outcome        TEXT    NOT NULL CHECK (outcome IN ('held', 'failed')),
    answer         TEXT,               -- JSON array of "ip" / "ip:port", sorted
    min_ttl        INTEGER,            -- smallest TTL in the run's first answer
    last_min_ttl   INTEGER,            -- smallest TTL in the run's last answer
    failure        TEXT,               -- reason label (timeout, servfail, ...)
    failure_detail TEXT,
    latency_ns     INTEGER,            -- of the run's first observation
    max_latency_ns INTEGER
);
CREATE INDEX observations_path_service ON observations (path_id, svc_namespace, svc_name);
CREATE INDEX observations_last ON observations (last_ns);

-- Findings: one row per (path, service, target, t0), updated as the engine learns more.
CREATE TABLE findings (
    id                   INTEGER PRIMARY KEY,
    kind                 TEXT    NOT NULL,   -- stale | missing | stuck
    layer                TEXT    NOT NULL,
    path_id              TEXT    NOT NULL,
    path_kind            TEXT    NOT NULL,
    svc_namespace        TEXT    NOT NULL,
    svc_name             TEXT    NOT NULL,
    target               TEXT    NOT NULL,   -- "ip" or "ip:port"
    target_ip            TEXT    NOT NULL,
    target_port          INTEGER,
    t0_ns                INTEGER NOT NULL,
    received_ns          INTEGER NOT NULL,
    last_seen_ns         INTEGER,
    converged_by_ns      INTEGER,
    window_ns            INTEGER,
    expected_lag_ns      INTEGER,
    verdict              TEXT    NOT NULL,
    exposure_ns          INTEGER,
    former_pod_namespace TEXT,
    former_pod_name      TEXT,
    former_pod_uid       TEXT
);
CREATE UNIQUE INDEX findings_key ON findings (path_id, svc_namespace, svc_name, target, t0_ns);
CREATE INDEX findings_ip ON findings (target_ip, t0_ns);
CREATE INDEX findings_t0 ON findings (t0_ns);

-- Periods when ghostip's view of the API was not synced.
CREATE TABLE truth_gaps (
    id       INTEGER PRIMARY KEY,
    start_ns INTEGER NOT NULL,
    end_ns   INTEGER,
    reason   TEXT    NOT NULL,
    CHECK (end_ns IS NULL OR end_ns >= start_ns)
);
CREATE INDEX truth_gaps_start ON truth_gaps (start_ns);
"#;

/// A finding's t0 is the receive time when the trigger-time annotation was implausible
/// (ChangeTime::bounded): the annotation is kept beside it, with the reason.
const V2: &str = r#"
ALTER TABLE findings ADD COLUMN trigger_ns INTEGER;      -- the trigger-time annotation, taken as t0 or not
ALTER TABLE findings ADD COLUMN t0_correction TEXT;      -- why it was not t0: before-last-seen | far-before-received | after-received
"#;

/// Connection-scoped state: which relists are running and what they have seen.
/// Temporary tables roll back with the transaction that changed them and vanish with
/// the connection, so a crash mid-relist simply cancels it.
pub(crate) const TEMP_TABLES: &str = r#"
CREATE TEMP TABLE IF NOT EXISTS relists (kind TEXT PRIMARY KEY);
CREATE TEMP TABLE IF NOT EXISTS pod_relist_seen (id INTEGER PRIMARY KEY);
CREATE TEMP TABLE IF NOT EXISTS membership_relist_seen (id INTEGER PRIMARY KEY);
"#;

fn header(conn: &Connection) -> rusqlite::Result<(i64, i64, i64)> {
    let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let objects: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    Ok((app, version, objects))
}

fn check(
    path: &Path,
    (application_id, user_version, objects): (i64, i64, i64),
    supported: i64,
) -> Result<(), LedgerError> {
    let ours = application_id == APPLICATION_ID;
    let fresh = application_id == 0 && user_version == 0 && objects == 0;
    if !ours && !fresh {
        return Err(LedgerError::ForeignDatabase {
            path: path.to_path_buf(),
            application_id,
            user_version,
        });
    }
    if user_version > supported {
        return Err(LedgerError::NewerSchema {
            path: path.to_path_buf(),
            found: user_version,
            supported,
        });
    }
    Ok(())
}

/// The schema version of a file that passed [`precheck`] (0 for an empty file).
pub(crate) fn version(conn: &Connection, path: &Path) -> Result<i64, LedgerError> {
    header(conn)
        .map(|(_, version, _)| version)
        .map_err(|e| sql_error(path, e))
}

/// Refuses foreign and newer files. Reads only: safe on any file.
pub(crate) fn precheck(
    conn: &Connection,
    path: &Path,
    migrations: &[Migration],
) -> Result<(), LedgerError> {
    let supported = migrations.last().map_or(0, |m| m.version);
    check(
        path,
        header(conn).map_err(|e| sql_error(path, e))?,
        supported,
    )
}

/// Refuses foreign and newer files (reading only), then applies the missing migrations.
/// Returns the schema version of the file afterwards.
pub(crate) fn check_and_migrate(
    conn: &mut Connection,
    path: &Path,
    migrations: &[Migration],
) -> Result<i64, LedgerError> {
    let supported = migrations.last().map_or(0, |m| m.version);
    let sql = |e| sql_error(path, e);
    let before = header(conn).map_err(sql)?;
    check(path, before, supported)?;
    for m in migrations.iter().filter(|m| m.version > before.1) {
        // Immediate: take the write lock first, then re-read, so two processes opening a
        // fresh file at once migrate it once.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let now = header(&tx).map_err(sql)?;
        check(path, now, supported)?;
        if now.1 >= m.version {
            continue;
        }
        tx.execute_batch(m.sql).map_err(sql)?;
        tx.pragma_update(None, "user_version", m.version)
            .map_err(sql)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(sql)?;
        tx.commit().map_err(sql)?;
    }
    let (_, version, _) = header(conn).map_err(sql)?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn migrations_are_consecutive_and_end_at_schema_version() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "migration {} ({})", i, m.name);
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }

    #[test]
    fn migrations_run_in_order_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let m1 = Migration {
            version: 1,
            name: "a",
            sql: "CREATE TABLE a (x INTEGER); INSERT INTO a VALUES (1);",
        };
        let m2 = Migration {
            version: 2,
            name: "b",
            sql: "CREATE TABLE b (y INTEGER); INSERT INTO a VALUES (2);",
        };
        let mut conn = Connection::open(&path).unwrap();
        assert_eq!(check_and_migrate(&mut conn, &path, &[m1]).unwrap(), 1);
        assert_eq!(check_and_migrate(&mut conn, &path, &[m1]).unwrap(), 1);
        assert_eq!(check_and_migrate(&mut conn, &path, &[m1, m2]).unwrap(), 2);
        assert_eq!(check_and_migrate(&mut conn, &path, &[m1, m2]).unwrap(), 2);
        let rows: Vec<i64> = conn
            .prepare("SELECT x FROM a ORDER BY x")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(rows, vec![1, 2]);
        // An older binary (knowing only m1) refuses the file.
        let err = check_and_migrate(&mut conn, &path, &[m1]).unwrap_err();
        assert!(
            matches!(
                err,
                LedgerError::NewerSchema {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn failed_migration_leaves_previous_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let m1 = Migration {
            version: 1,
            name: "a",
            sql: "CREATE TABLE a (x INTEGER);",
        };
        let bad = Migration {
            version: 2,
            name: "bad",
            sql: "CREATE TABLE b (y INTEGER); SELECT * FROM nonexistent;",
        };
        let mut conn = Connection::open(&path).unwrap();
        assert!(check_and_migrate(&mut conn, &path, &[m1, bad]).is_err());
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 1);
        let b: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'b'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(b, 0, "the failed migration rolled back");
    }
}
