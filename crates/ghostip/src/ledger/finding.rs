//! Findings (stale, missing and stuck endpoints per path) and truth gaps.

use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::{PodRef, ServiceKey, Target, Time};
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use super::error::Inner;
use super::ownership::canonical_ip;
use super::time::{duration_ns, from_ns, ns_duration, opt_from_ns, opt_to_ns, to_ns};

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FindingKind {
    /// The path served the target after it left the truth.
    Stale,
    /// The path did not serve a target of the truth.
    Missing,
    /// The path had not converged after the stuck horizon.
    Stuck,
}

impl FindingKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Stale => "stale",
            FindingKind::Missing => "missing",
            FindingKind::Stuck => "stuck",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [FindingKind::Stale, FindingKind::Missing, FindingKind::Stuck]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// A finding as the ledger stores it: plain data, mapped from the engine's types by the caller.
///
/// One finding per (path, service, target, t0): recording the same key again updates it.
/// Durations serialize as seconds (a float).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingRecord {
    /// Stale, missing or stuck.
    pub kind: FindingKind,
    /// The layer of the path (`Layer::as_str`). Stored and read back as text, like
    /// `path_kind`: a layer this binary does not know reads back as it is.
    pub layer: String,
    /// Path id (`PathInfo::id`).
    pub path_id: String,
    /// Path kind (`PathKind::as_str`).
    pub path_kind: String,
    /// The Service.
    pub service: ServiceKey,
    /// The endpoint the path was wrong about.
    pub target: Target,
    /// Change time of the truth.
    pub t0: Time,
    /// When ghostip received the change.
    pub received: Time,
    /// The trigger-time annotation of the change, taken as t0 or not.
    #[serde(default)]
    pub trigger: Option<Time>,
    /// Why the trigger time was not taken as t0 (`before-last-seen`, `far-before-received`,
    /// `after-received`): t0 is then `received`.
    #[serde(default)]
    pub t0_correction: Option<String>,
    /// Last observation at which the path was still wrong (for a conntrack backend only
    /// connects went to, their last SYN).
    pub last_seen: Option<Time>,
    /// First observation after which the path was right.
    pub converged_by: Option<Time>,
    /// The window, t0 to `converged_by` (its upper bound; `last_seen` gives the lower).
    #[serde(with = "opt_secs")]
    pub window: Option<Duration>,
    /// The path's expected lag.
    #[serde(with = "opt_secs")]
    pub expected_lag: Option<Duration>,
    /// The engine's verdict, kebab-case (`within-expected-lag`, `over-expected-lag`, `stuck`, …).
    pub verdict: String,
    /// Part of the window during which the endpoint was dead.
    #[serde(with = "opt_secs")]
    pub exposure: Option<Duration>,
    /// The pod that owned the target's IP before it left.
    pub former_pod: Option<PodRef>,
}

/// A period when ghostip's view of the API was not synced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthGap {
    /// Start.
    pub start: Time,
    /// End; `None` while open.
    pub end: Option<Time>,
    /// Why (e.g. `starting`, `watch error: …`).
    pub reason: String,
}

mod opt_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(d)?
            .map(|s| Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

const COLS: &str = "kind, layer, path_id, path_kind, svc_namespace, svc_name, target_ip, target_port, t0_ns, \
                    received_ns, last_seen_ns, converged_by_ns, window_ns, expected_lag_ns, verdict, exposure_ns, \
                    former_pod_namespace, former_pod_name, former_pod_uid, trigger_ns, t0_correction";

/// Stores a finding, or updates the one with the same (path, service, target, t0). Returns its id.
pub(crate) fn record(conn: &Connection, f: &FindingRecord) -> Result<i64, Inner> {
    let target = Target {
        ip: f.target.ip.to_canonical(),
        port: f.target.port,
    };
    let pod = f.former_pod.as_ref();
    let id = conn
        .prepare_cached(&format!(
            "INSERT INTO findings (target, {COLS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22) \
             ON CONFLICT (path_id, svc_namespace, svc_name, target, t0_ns) DO UPDATE SET \
             kind = excluded.kind, layer = excluded.layer, path_kind = excluded.path_kind, \
             received_ns = excluded.received_ns, last_seen_ns = excluded.last_seen_ns, \
             converged_by_ns = excluded.converged_by_ns, window_ns = excluded.window_ns, \
             expected_lag_ns = excluded.expected_lag_ns, verdict = excluded.verdict, \
             exposure_ns = excluded.exposure_ns, former_pod_namespace = excluded.former_pod_namespace, \
             former_pod_name = excluded.former_pod_name, former_pod_uid = excluded.former_pod_uid, \
             trigger_ns = excluded.trigger_ns, t0_correction = excluded.t0_correction \
             RETURNING id"
        ))?
        .query_row(
            params![
                target.to_string(),
                f.kind.as_str(),
                f.layer.as_str(),
                f.path_id,
                f.path_kind.as_str(),
                f.service.namespace,
                f.service.name,
                canonical_ip(target.ip),
                target.port,
                to_ns(f.t0)?,
                to_ns(f.received)?,
                opt_to_ns(f.last_seen)?,
                opt_to_ns(f.converged_by)?,
                f.window.map(duration_ns),
                f.expected_lag.map(duration_ns),
                f.verdict,
                f.exposure.map(duration_ns),
                pod.map(|p| &p.namespace),
                pod.map(|p| &p.name),
                pod.map(|p| &p.uid),
                opt_to_ns(f.trigger)?,
                f.t0_correction,
            ],
            |r| r.get(0),
        )?;
    Ok(id)
}

type RawFinding = (
    (
        String,
        String,
        String,
        String,
        String,
        String,
        String,
        Option<u16>,
    ),
    (
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        String,
        Option<i64>,
    ),
    (Option<String>, Option<String>, Option<String>),
    (Option<i64>, Option<String>),
);

fn raw(r: &Row<'_>) -> rusqlite::Result<RawFinding> {
    Ok((
        (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        ),
        (
            r.get(8)?,
            r.get(9)?,
            r.get(10)?,
            r.get(11)?,
            r.get(12)?,
            r.get(13)?,
            r.get(14)?,
            r.get(15)?,
        ),
        (r.get(16)?, r.get(17)?, r.get(18)?),
        (r.get(19)?, r.get(20)?),
    ))
}

fn into_record(raw: RawFinding) -> Result<FindingRecord, Inner> {
    let ((kind, layer, path_id, path_kind, svc_ns, svc_name, ip, port), times, pod, t0) = raw;
    let (trigger, t0_correction) = t0;
    let (t0, received, last_seen, converged_by, window, expected_lag, verdict, exposure) = times;
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| Inner::InvalidData(format!("finding target ip {ip:?}")))?;
    Ok(FindingRecord {
        kind: FindingKind::parse(&kind)
            .ok_or_else(|| Inner::InvalidData(format!("finding kind {kind:?}")))?,
        layer,
        path_id,
        path_kind,
        service: ServiceKey::new(svc_ns, svc_name),
        target: Target { ip, port },
        t0: from_ns(t0)?,
        received: from_ns(received)?,
        trigger: opt_from_ns(trigger)?,
        t0_correction,
        last_seen: opt_from_ns(last_seen)?,
        converged_by: opt_from_ns(converged_by)?,
        window: window.map(ns_duration),
        expected_lag: expected_lag.map(ns_duration),
        verdict,
        exposure: exposure.map(ns_duration),
        former_pod: match pod {
            (Some(namespace), Some(name), uid) => Some(PodRef {
                namespace,
                name,
                uid: uid.unwrap_or_default(),
            }),
            _ => None,
        },
    })
}

/// Findings with t0 at or after `since`, oldest first.
pub(crate) fn since(conn: &Connection, since: Time) -> Result<Vec<FindingRecord>, Inner> {
    let rows: Vec<RawFinding> = conn
        .prepare_cached(&format!(
            "SELECT {COLS} FROM findings WHERE t0_ns >= ?1 ORDER BY t0_ns, id"
        ))?
        .query_map([to_ns(since)?], raw)?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter().map(into_record).collect()
}

/// Findings about `ip` (any port), oldest first.
pub(crate) fn for_ip(conn: &Connection, ip: IpAddr) -> Result<Vec<FindingRecord>, Inner> {
    let rows: Vec<RawFinding> = conn
        .prepare_cached(&format!(
            "SELECT {COLS} FROM findings WHERE target_ip = ?1 ORDER BY t0_ns, id"
        ))?
        .query_map([canonical_ip(ip)], raw)?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter().map(into_record).collect()
}

/// Opens a truth gap unless one is open. Returns whether it opened one.
pub(crate) fn gap_start(conn: &Connection, at: Time, reason: &str) -> Result<bool, Inner> {
    let open: Option<i64> = conn
        .prepare_cached("SELECT id FROM truth_gaps WHERE end_ns IS NULL LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if open.is_some() {
        return Ok(false);
    }
    conn.prepare_cached("INSERT INTO truth_gaps (start_ns, reason) VALUES (?1, ?2)")?
        .execute(params![to_ns(at)?, reason])?;
    Ok(true)
}

/// Closes the open truth gap, if any. Returns whether one was open.
pub(crate) fn gap_end(conn: &Connection, at: Time) -> Result<bool, Inner> {
    let n = conn
        .prepare_cached("UPDATE truth_gaps SET end_ns = max(?1, start_ns) WHERE end_ns IS NULL")?
        .execute([to_ns(at)?])?;
    Ok(n > 0)
}

/// Gaps overlapping `[from, to]`, oldest first.
pub(crate) fn gaps(conn: &Connection, from: Time, to: Time) -> Result<Vec<TruthGap>, Inner> {
    let rows: Vec<(i64, Option<i64>, String)> = conn
        .prepare_cached(
            "SELECT start_ns, end_ns, reason FROM truth_gaps \
             WHERE start_ns <= ?2 AND (end_ns IS NULL OR end_ns >= ?1) ORDER BY start_ns, id",
        )?
        .query_map(params![to_ns(from)?, to_ns(to)?], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter()
        .map(|(s, e, reason)| {
            Ok(TruthGap {
                start: from_ns(s)?,
                end: opt_from_ns(e)?,
                reason,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::ledger::schema::{MIGRATIONS, check_and_migrate};

    /// A finding written by a binary of schema 1 reads back after the migration, without a
    /// trigger time; new findings keep theirs.
    #[test]
    fn findings_of_schema_1_read_back_after_the_migration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        let mut conn = Connection::open(&path).unwrap();
        assert_eq!(
            check_and_migrate(&mut conn, &path, &MIGRATIONS[..1]).unwrap(),
            1
        );
        conn.execute(
            "INSERT INTO findings (kind, layer, path_id, path_kind, svc_namespace, svc_name, target, \
             target_ip, t0_ns, received_ns, verdict) VALUES ('stale', 'dns', 'dns-pod/a', 'dns-pod', \
             'demo', 'web', '10.0.0.7', '10.0.0.7', 1000, 2000, 'within expected lag')",
            [],
        )
        .unwrap();
        assert_eq!(check_and_migrate(&mut conn, &path, MIGRATIONS).unwrap(), 2);
        let old = since(&conn, from_ns(0).unwrap()).unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(
            (old[0].trigger, old[0].t0_correction.as_deref()),
            (None, None)
        );
        let mut f = old[0].clone();
        f.t0 = from_ns(5_000_000_000).unwrap();
        f.received = f.t0;
        f.trigger = Some(from_ns(1_000_000_000).unwrap());
        f.t0_correction = Some("before-last-seen".into());
        record(&conn, &f).unwrap();
        let all = since(&conn, from_ns(0).unwrap()).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1], f);
    }
}
