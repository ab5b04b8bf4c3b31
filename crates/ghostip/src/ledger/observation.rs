//! Observations, stored as runs: identical consecutive results of one path for one
//! service become one row with a count and first/last times.
//!
//! "Identical" compares the answer set (targets, ignoring TTLs) or the failure; TTLs
//! decrement on every probe, so only the run's first and last minimum TTL are kept.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ghostip_core::{Observation, ObservationResult, PathInfo, ServiceKey, Target, Time};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::error::Inner;
use super::time::{duration_ns, from_ns, ns_duration, to_ns};

/// What [`Ledger::record_observation`](super::Ledger::record_observation) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservationWrite {
    /// The result differed from the previous one of the path and service: a new run.
    Inserted,
    /// Same result as the previous one: the run's count and last time moved.
    Merged,
}

/// A run of identical consecutive observations of one path for one service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservationRun {
    /// Path id (`PathInfo::id`).
    pub path_id: String,
    /// Path kind (`PathKind::as_str`), as stored: text, so a kind this binary does not
    /// know (a ledger a newer one wrote) reads back as it is.
    pub path_kind: String,
    /// Service.
    pub service: ServiceKey,
    /// First observation of the run.
    pub first: Time,
    /// Last observation of the run.
    pub last: Time,
    /// Observations in the run.
    pub count: u64,
    /// The answer set, sorted; `None` for a failure.
    pub answer: Option<Vec<Target>>,
    /// Smallest TTL of the run's first answer.
    pub min_ttl: Option<u32>,
    /// Smallest TTL of the run's last answer.
    pub last_min_ttl: Option<u32>,
    /// Failure reason label (`timeout`, `servfail`, …); `None` for an answer.
    pub failure: Option<String>,
    /// Failure description.
    pub failure_detail: Option<String>,
    /// Latency of the run's first observation.
    pub latency: Option<Duration>,
    /// Largest latency in the run.
    pub max_latency: Option<Duration>,
}

fn answer_text(targets: &BTreeSet<Target>) -> Result<String, Inner> {
    let list: Vec<String> = targets.iter().map(ToString::to_string).collect();
    serde_json::to_string(&list).map_err(|e| Inner::InvalidData(format!("answer: {e}")))
}

fn parse_target(s: &str) -> Option<Target> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(Target::ip(ip));
    }
    s.parse::<SocketAddr>()
        .ok()
        .map(|sa| Target::socket(sa.ip(), sa.port()))
}

fn parse_answer(text: &str) -> Result<Vec<Target>, Inner> {
    let list: Vec<String> = serde_json::from_str(text)
        .map_err(|e| Inner::InvalidData(format!("answer {text:?}: {e}")))?;
    list.iter()
        .map(|s| parse_target(s).ok_or_else(|| Inner::InvalidData(format!("answer target {s:?}"))))
        .collect()
}

/// Stores one observation, merging it into the previous run when the result is the same.
pub(crate) fn record(
    conn: &Connection,
    path: &PathInfo,
    obs: &Observation,
) -> Result<ObservationWrite, Inner> {
    let at = to_ns(obs.at)?;
    let latency = obs.latency.map(duration_ns);
    let (outcome, answer, min_ttl, failure, detail) = match &obs.result {
        ObservationResult::Held(held) => {
            let set: BTreeSet<Target> = held
                .iter()
                .map(|h| Target {
                    ip: h.target.ip.to_canonical(),
                    port: h.target.port,
                })
                .collect();
            let min_ttl = held.iter().filter_map(|h| h.ttl).min();
            ("held", Some(answer_text(&set)?), min_ttl, None, None)
        }
        ObservationResult::Failed(reason) => (
            "failed",
            None,
            None,
            Some(reason.label()),
            Some(reason.to_string()),
        ),
    };
    let svc = &obs.service;
    let last: Option<(i64, String, Option<String>, Option<String>)> = conn
        .prepare_cached(
            "SELECT id, outcome, answer, failure_detail FROM observations \
             WHERE path_id = ?1 AND svc_namespace = ?2 AND svc_name = ?3 ORDER BY id DESC LIMIT 1",
        )?
        .query_row(params![path.id, svc.namespace, svc.name], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    if let Some((id, l_outcome, l_answer, l_detail)) = last
        && l_outcome == outcome
        && l_answer == answer
        && l_detail == detail
    {
        {
            conn.prepare_cached(
                "UPDATE observations SET last_ns = max(last_ns, ?2), count = count + 1, last_min_ttl = ?3, \
                 max_latency_ns = CASE WHEN ?4 IS NULL THEN max_latency_ns \
                                       WHEN max_latency_ns IS NULL THEN ?4 \
                                       ELSE max(max_latency_ns, ?4) END \
                 WHERE id = ?1",
            )?
            .execute(params![id, at, min_ttl, latency])?;
            return Ok(ObservationWrite::Merged);
        }
    }
    conn.prepare_cached(
        "INSERT INTO observations (path_id, path_kind, svc_namespace, svc_name, first_ns, last_ns, count, outcome, \
         answer, min_ttl, last_min_ttl, failure, failure_detail, latency_ns, max_latency_ns) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, 1, ?6, ?7, ?8, ?8, ?9, ?10, ?11, ?11)",
    )?
    .execute(params![
        path.id,
        path.kind.as_str(),
        svc.namespace,
        svc.name,
        at,
        outcome,
        answer,
        min_ttl,
        failure,
        detail,
        latency
    ])?;
    Ok(ObservationWrite::Inserted)
}

/// The runs of one path for one service, oldest first.
pub(crate) fn runs(
    conn: &Connection,
    path_id: &str,
    service: &ServiceKey,
) -> Result<Vec<ObservationRun>, Inner> {
    type Raw = (
        String,
        i64,
        i64,
        i64,
        Option<String>,
        Option<u32>,
        Option<u32>,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<i64>,
    );
    let rows: Vec<Raw> = conn
        .prepare_cached(
            "SELECT path_kind, first_ns, last_ns, count, answer, min_ttl, last_min_ttl, failure, failure_detail, \
             latency_ns, max_latency_ns FROM observations \
             WHERE path_id = ?1 AND svc_namespace = ?2 AND svc_name = ?3 ORDER BY id",
        )?
        .query_map(params![path_id, service.namespace, service.name], |r| {
            Raw::try_from(r)
        })?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter()
        .map(
            |(
                kind,
                first,
                last,
                count,
                answer,
                min_ttl,
                last_min_ttl,
                failure,
                failure_detail,
                lat,
                max_lat,
            )| {
                Ok(ObservationRun {
                    path_id: path_id.to_string(),
                    path_kind: kind,
                    service: service.clone(),
                    first: from_ns(first)?,
                    last: from_ns(last)?,
                    count: u64::try_from(count).unwrap_or(0),
                    answer: answer.as_deref().map(parse_answer).transpose()?,
                    min_ttl,
                    last_min_ttl,
                    failure,
                    failure_detail,
                    latency: lat.map(ns_duration),
                    max_latency: max_lat.map(ns_duration),
                })
            },
        )
        .collect()
}
