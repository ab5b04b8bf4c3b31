//! IP ownership intervals: which pod held an IP, from when until when.
//!
//! Rules (see `docs/LEDGER.md`): at most one open interval per IP; intervals of one IP
//! never overlap; a pod taking an IP whose interval is still open closes it at the new
//! owner's start; re-applying a pod that already holds an open interval continues it.

use std::net::IpAddr;

use ghostip_core::truth::PodRecord;
use ghostip_core::{PodRef, Time};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::error::Inner;
use super::relist::{self, RelistKind, Relists};
use super::time::{from_ns, opt_from_ns, opt_to_ns, to_ns};
use ghostip_analysis::ownership::{EndReason, EndpointExit, Membership, Ownership, Whois};

/// The text an IP is stored as: its display form, IPv4-mapped IPv6 folded to IPv4.
pub(crate) fn canonical_ip(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}

/// The columns `raw` reads, as a macro so statements are `&'static str` (no formatting per call).
macro_rules! cols {
    () => {
        "id, ip, pod_namespace, pod_name, pod_uid, node, owner_kind, owner_name, created_ns, ready_ns, \
         terminating_ns, grace_period_s, prestop_s, gone_ns, opened_ns, start_ns, closed_ns, end_reason, approximate"
    };
}

struct Raw {
    id: i64,
    ip: String,
    pod: PodRef,
    node: Option<String>,
    owner_kind: Option<String>,
    owner_name: Option<String>,
    created: Option<i64>,
    ready: Option<i64>,
    terminating: Option<i64>,
    grace: Option<i64>,
    prestop: Option<i64>,
    gone: Option<i64>,
    opened: i64,
    start: i64,
    closed: Option<i64>,
    end_reason: Option<String>,
    approximate: bool,
}

fn raw(r: &Row<'_>) -> rusqlite::Result<Raw> {
    Ok(Raw {
        id: r.get(0)?,
        ip: r.get(1)?,
        pod: PodRef {
            namespace: r.get(2)?,
            name: r.get(3)?,
            uid: r.get(4)?,
        },
        node: r.get(5)?,
        owner_kind: r.get(6)?,
        owner_name: r.get(7)?,
        created: r.get(8)?,
        ready: r.get(9)?,
        terminating: r.get(10)?,
        grace: r.get(11)?,
        prestop: r.get(12)?,
        gone: r.get(13)?,
        opened: r.get(14)?,
        start: r.get(15)?,
        closed: r.get(16)?,
        end_reason: r.get(17)?,
        approximate: r.get(18)?,
    })
}

impl Raw {
    fn into_ownership(self) -> Result<Ownership, Inner> {
        let ip = self
            .ip
            .parse()
            .map_err(|_| Inner::InvalidData(format!("ip_intervals.ip {:?}", self.ip)))?;
        let end_reason = match self.end_reason.as_deref() {
            None => None,
            Some(s) => Some(
                EndReason::parse(s)
                    .ok_or_else(|| Inner::InvalidData(format!("end_reason {s:?}")))?,
            ),
        };
        Ok(Ownership {
            ip,
            pod: self.pod,
            node: self.node,
            owner_kind: self.owner_kind,
            owner_name: self.owner_name,
            start: from_ns(self.start)?,
            closed: opt_from_ns(self.closed)?,
            end_reason,
            approximate: self.approximate,
            created: opt_from_ns(self.created)?,
            ready: opt_from_ns(self.ready)?,
            terminating: opt_from_ns(self.terminating)?,
            gone: opt_from_ns(self.gone)?,
            opened: from_ns(self.opened)?,
            grace_period_seconds: self.grace,
            prestop_seconds: self.prestop.and_then(|s| u64::try_from(s).ok()),
        })
    }
}

fn close(
    conn: &Connection,
    id: i64,
    at: i64,
    reason: EndReason,
    gone: Option<i64>,
    approximate: bool,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE ip_intervals SET closed_ns = max(?2, start_ns), end_reason = ?3, gone_ns = coalesce(gone_ns, ?4), \
         approximate = ?5 WHERE id = ?1",
    )?
    .execute(params![id, at, reason.as_str(), gone, approximate])?;
    Ok(())
}

/// Records the current state of a pod (watch `Apply`/`InitApply`).
pub(crate) fn apply_pod(
    conn: &Connection,
    relists: &Relists,
    pod: &PodRecord,
    at: Time,
) -> Result<(), Inner> {
    // A host-network pod's IP is its node's: it owns nothing.
    if pod.host_network {
        return Ok(());
    }
    let at_ns = to_ns(at)?;
    let relisting = relists.active(RelistKind::Pods);
    let mut ips: Vec<String> = Vec::with_capacity(pod.ips.len());
    for ip in &pod.ips {
        let ip = canonical_ip(*ip);
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    let p = &pod.pod;

    // This pod's open intervals: continued if it still lists their IP, else ended now.
    let mine: Vec<Raw> = conn
        .prepare_cached(concat!(
            "SELECT ",
            cols!(),
            " FROM ip_intervals WHERE pod_uid = ?1 AND pod_name = ?2 AND pod_namespace = ?3 AND closed_ns IS NULL"
        ))?
        .query_map(params![p.uid, p.name, p.namespace], raw)?
        .collect::<rusqlite::Result<_>>()?;
    for row in mine.iter().filter(|r| !ips.contains(&r.ip)) {
        close(
            conn,
            row.id,
            at_ns,
            EndReason::IpChanged,
            Some(at_ns),
            relisting,
        )?;
    }

    let created = opt_to_ns(pod.created)?;
    let ready = opt_to_ns(pod.ready_since)?;
    let terminating = opt_to_ns(pod.deletion)?;
    let prestop = pod
        .prestop_seconds
        .map(|s| i64::try_from(s).unwrap_or(i64::MAX));
    for ip in &ips {
        let id = match mine.iter().find(|r| &r.ip == ip) {
            Some(row) => {
                // Continue the interval; fill in what became known.
                let node = pod.node.clone().or(row.node.clone());
                let owner_kind = pod.owner_kind.clone().or(row.owner_kind.clone());
                let owner_name = pod.owner_name.clone().or(row.owner_name.clone());
                let n_created = row.created.or(created);
                let n_ready = row.ready.or(ready);
                let n_terminating = row.terminating.or(terminating);
                // The grace period that came with the first deletionTimestamp stays: the
                // kubelet's final delete sets it to 0, and deletionTimestamp minus the grace
                // is when the deletion was requested.
                let n_grace = if row.terminating.is_some() {
                    row.grace.or(pod.grace_period_seconds)
                } else {
                    pod.grace_period_seconds.or(row.grace)
                };
                let n_prestop = prestop.or(row.prestop);
                let changed = node != row.node
                    || owner_kind != row.owner_kind
                    || owner_name != row.owner_name
                    || n_created != row.created
                    || n_ready != row.ready
                    || n_terminating != row.terminating
                    || n_grace != row.grace
                    || n_prestop != row.prestop;
                if changed {
                    conn.prepare_cached(
                        "UPDATE ip_intervals SET node = ?2, owner_kind = ?3, owner_name = ?4, created_ns = ?5, \
                         ready_ns = ?6, terminating_ns = ?7, grace_period_s = ?8, prestop_s = ?9 WHERE id = ?1",
                    )?
                    .execute(params![
                        row.id,
                        node,
                        owner_kind,
                        owner_name,
                        n_created,
                        n_ready,
                        n_terminating,
                        n_grace,
                        n_prestop
                    ])?;
                }
                row.id
            }
            None => {
                // The IP's latest interval: open only if another pod holds the IP
                // (an IP's open interval is always its latest).
                let latest: Option<(i64, i64, Option<i64>)> = conn
                    .prepare_cached(
                        "SELECT id, start_ns, closed_ns FROM ip_intervals WHERE ip = ?1 \
                         ORDER BY start_ns DESC, id DESC LIMIT 1",
                    )?
                    .query_row([ip], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                let wanted = created.map_or(at_ns, |c| c.min(at_ns));
                let start = match latest {
                    Some((prev, prev_start, None)) => {
                        // IP reuse while the previous owner's interval is open: it ends where this one starts.
                        let start = wanted.max(prev_start);
                        close(conn, prev, start, EndReason::Reused, None, relisting)?;
                        start
                    }
                    Some((_, _, Some(end))) => wanted.max(end),
                    None => wanted,
                };
                conn.prepare_cached(
                    "INSERT INTO ip_intervals (ip, pod_namespace, pod_name, pod_uid, node, owner_kind, owner_name, \
                     created_ns, ready_ns, terminating_ns, grace_period_s, prestop_s, opened_ns, start_ns) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                )?
                .execute(params![
                    ip,
                    p.namespace,
                    p.name,
                    p.uid,
                    pod.node,
                    pod.owner_kind,
                    pod.owner_name,
                    created,
                    ready,
                    terminating,
                    pod.grace_period_seconds,
                    prestop,
                    at_ns,
                    start
                ])?;
                conn.last_insert_rowid()
            }
        };
        if relisting {
            relist::mark(conn, RelistKind::Pods, id)?;
        }
    }
    Ok(())
}

/// Records that a pod object disappeared (watch `Delete`).
pub(crate) fn pod_gone(
    conn: &Connection,
    relists: &Relists,
    pod: &PodRef,
    at: Time,
) -> Result<(), Inner> {
    let at_ns = to_ns(at)?;
    let relisting = relists.active(RelistKind::Pods);
    conn.prepare_cached(
        "UPDATE ip_intervals SET closed_ns = max(?4, start_ns), end_reason = 'gone', gone_ns = coalesce(gone_ns, ?4), \
         approximate = ?5 WHERE pod_namespace = ?1 AND pod_name = ?2 AND pod_uid = ?3 AND closed_ns IS NULL",
    )?
    .execute(params![pod.namespace, pod.name, pod.uid, at_ns, relisting])?;
    // Intervals already closed by IP reuse learn when their pod went away.
    conn.prepare_cached(
        "UPDATE ip_intervals SET gone_ns = ?4 \
         WHERE pod_namespace = ?1 AND pod_name = ?2 AND pod_uid = ?3 AND gone_ns IS NULL AND closed_ns IS NOT NULL",
    )?
    .execute(params![pod.namespace, pod.name, pod.uid, at_ns])?;
    Ok(())
}

/// Who owned `ip` at `at`, with the owners just before and after.
pub(crate) fn whois(conn: &Connection, addr: IpAddr, at: Time) -> Result<Whois, Inner> {
    let ip = canonical_ip(addr);
    let at_ns = to_ns(at)?;
    let last_started = conn
        .prepare_cached(concat!(
            "SELECT ",
            cols!(),
            " FROM ip_intervals WHERE ip = ?1 AND start_ns <= ?2 ORDER BY start_ns DESC, id DESC LIMIT 1"
        ))?
        .query_row(params![ip, at_ns], raw)
        .optional()?;
    let after = conn
        .prepare_cached(concat!(
            "SELECT ",
            cols!(),
            " FROM ip_intervals WHERE ip = ?1 AND start_ns > ?2 ORDER BY start_ns ASC, id ASC LIMIT 1"
        ))?
        .query_row(params![ip, at_ns], raw)
        .optional()?;
    let (at_time, before) = match last_started {
        Some(cur) if cur.closed.is_none_or(|c| c > at_ns) => {
            // Intervals never overlap, so the one before it is the previous by (start, id).
            let before = conn
                .prepare_cached(concat!(
                    "SELECT ",
                    cols!(),
                    " FROM ip_intervals WHERE ip = ?1 AND start_ns <= ?2 AND id <> ?3 \
                     ORDER BY start_ns DESC, id DESC LIMIT 1"
                ))?
                .query_row(params![ip, cur.start, cur.id], raw)
                .optional()?;
            (Some(cur), before)
        }
        other => (None, other),
    };
    let mut w = Whois {
        at_time: at_time.map(Raw::into_ownership).transpose()?,
        before: before.map(Raw::into_ownership).transpose()?,
        after: after.map(Raw::into_ownership).transpose()?,
        left_endpoints: super::membership::of_ip(conn, addr)?
            .iter()
            .filter_map(Membership::exit)
            .collect(),
    };
    // Only the exits of the owners shown; with no owner known at all (an agent's ledger
    // holds only its own node's pods), every exit, whose slices name the pod.
    if w.before.is_some() || w.at_time.is_some() || w.after.is_some() {
        let shown: Vec<EndpointExit> = [&w.before, &w.at_time, &w.after]
            .into_iter()
            .flatten()
            .flat_map(|o| w.exits_of(o))
            .cloned()
            .collect();
        w.left_endpoints = shown;
    }
    Ok(w)
}

/// Every ownership of `ip`, oldest first.
pub(crate) fn history(conn: &Connection, ip: IpAddr) -> Result<Vec<Ownership>, Inner> {
    let ip = canonical_ip(ip);
    let rows: Vec<Raw> = conn
        .prepare_cached(concat!(
            "SELECT ",
            cols!(),
            " FROM ip_intervals WHERE ip = ?1 ORDER BY start_ns, id"
        ))?
        .query_map([ip], raw)?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter().map(Raw::into_ownership).collect()
}
