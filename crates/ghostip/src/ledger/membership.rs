//! Endpoint membership intervals: when an IP was an endpoint of a Service, and in what state.

use std::collections::HashSet;
use std::net::IpAddr;

use ghostip_core::truth::EndpointRecord;
use ghostip_core::{ChangeTime, PodRef, ServiceKey};
use rusqlite::{Connection, OptionalExtension, params};

use ghostip_analysis::ownership::{Membership, MembershipState};

use super::error::Inner;
use super::ownership::canonical_ip;
use super::relist::{self, RelistKind, Relists};
use super::time::{from_ns, opt_from_ns, to_ns};

struct Open {
    id: i64,
    ready: bool,
    serving: bool,
    terminating: bool,
    pod_namespace: Option<String>,
    pod_name: Option<String>,
    pod_uid: Option<String>,
    node: Option<String>,
}

fn insert_state(
    conn: &Connection,
    id: i64,
    t0: i64,
    received: i64,
    ep: &EndpointRecord,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO membership_states (membership_id, t0_ns, received_ns, ready, serving, terminating) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![id, t0, received, ep.ready, ep.serving, ep.terminating])?;
    Ok(())
}

fn close(
    conn: &Connection,
    id: i64,
    t0: i64,
    received: i64,
    approximate: bool,
) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE memberships SET end_t0_ns = ?2, end_received_ns = ?3, approximate = ?4 WHERE id = ?1")?
        .execute(params![id, t0, received, approximate])?;
    Ok(())
}

/// `endpoint` is the IP's current state in the Service, or `None` when it left.
pub(crate) fn change(
    conn: &Connection,
    relists: &Relists,
    service: &ServiceKey,
    ip: IpAddr,
    endpoint: Option<&EndpointRecord>,
    at: ChangeTime,
) -> Result<(), Inner> {
    let ip = canonical_ip(ip);
    let (t0, received) = (to_ns(at.t0)?, to_ns(at.received)?);
    let relisting = relists.active(RelistKind::Memberships);
    let open = conn
        .prepare_cached(
            "SELECT id, ready, serving, terminating, pod_namespace, pod_name, pod_uid, node FROM memberships \
             WHERE svc_namespace = ?1 AND svc_name = ?2 AND ip = ?3 AND end_received_ns IS NULL",
        )?
        .query_row(params![service.namespace, service.name, ip], |r| {
            Ok(Open {
                id: r.get(0)?,
                ready: r.get(1)?,
                serving: r.get(2)?,
                terminating: r.get(3)?,
                pod_namespace: r.get(4)?,
                pod_name: r.get(5)?,
                pod_uid: r.get(6)?,
                node: r.get(7)?,
            })
        })
        .optional()?;
    let Some(ep) = endpoint else {
        if let Some(open) = open {
            close(conn, open.id, t0, received, relisting)?;
        }
        return Ok(());
    };
    let pod = ep.pod.as_ref();
    let id = match open {
        None => {
            conn.prepare_cached(
                "INSERT INTO memberships (svc_namespace, svc_name, ip, pod_namespace, pod_name, pod_uid, node, \
                 ready, serving, terminating, start_t0_ns, start_received_ns) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                service.namespace,
                service.name,
                ip,
                pod.map(|p| &p.namespace),
                pod.map(|p| &p.name),
                pod.map(|p| &p.uid),
                ep.node,
                ep.ready,
                ep.serving,
                ep.terminating,
                t0,
                received
            ])?;
            let id = conn.last_insert_rowid();
            insert_state(conn, id, t0, received, ep)?;
            id
        }
        Some(open) => {
            if (open.ready, open.serving, open.terminating)
                != (ep.ready, ep.serving, ep.terminating)
            {
                conn.prepare_cached("UPDATE memberships SET ready = ?2, serving = ?3, terminating = ?4 WHERE id = ?1")?
                    .execute(params![open.id, ep.ready, ep.serving, ep.terminating])?;
                insert_state(conn, open.id, t0, received, ep)?;
            }
            let same_pod = open.pod_namespace.as_deref() == pod.map(|p| p.namespace.as_str())
                && open.pod_name.as_deref() == pod.map(|p| p.name.as_str())
                && open.pod_uid.as_deref() == pod.map(|p| p.uid.as_str());
            if (pod.is_some() && !same_pod) || (ep.node.is_some() && open.node != ep.node) {
                conn.prepare_cached(
                    "UPDATE memberships SET pod_namespace = coalesce(?2, pod_namespace), \
                     pod_name = coalesce(?3, pod_name), pod_uid = coalesce(?4, pod_uid), \
                     node = coalesce(?5, node) WHERE id = ?1",
                )?
                .execute(params![
                    open.id,
                    pod.map(|p| &p.namespace),
                    pod.map(|p| &p.name),
                    pod.map(|p| &p.uid),
                    ep.node
                ])?;
            }
            open.id
        }
    };
    if relisting {
        relist::mark(conn, RelistKind::Memberships, id)?;
    }
    Ok(())
}

/// Makes `endpoints` the complete membership of `service`: members not listed leave.
pub(crate) fn sync(
    conn: &Connection,
    relists: &Relists,
    service: &ServiceKey,
    endpoints: &[EndpointRecord],
    at: ChangeTime,
) -> Result<(), Inner> {
    let mut listed = HashSet::with_capacity(endpoints.len());
    for ep in endpoints {
        // The first record of an IP wins (an IP can briefly sit in two slices).
        if listed.insert(canonical_ip(ep.ip)) {
            change(conn, relists, service, ep.ip, Some(ep), at)?;
        }
    }
    let open: Vec<(i64, String)> = conn
        .prepare_cached(
            "SELECT id, ip FROM memberships WHERE svc_namespace = ?1 AND svc_name = ?2 AND end_received_ns IS NULL",
        )?
        .query_map(params![service.namespace, service.name], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let relisting = relists.active(RelistKind::Memberships);
    let (t0, received) = (to_ns(at.t0)?, to_ns(at.received)?);
    for (id, ip) in open {
        if !listed.contains(&ip) {
            close(conn, id, t0, received, relisting)?;
        }
    }
    Ok(())
}

/// Every membership of `ip` in any Service, oldest first.
pub(crate) fn of_ip(conn: &Connection, ip: IpAddr) -> Result<Vec<Membership>, Inner> {
    type Row = (
        i64,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        bool,
    );
    let rows: Vec<Row> = conn
        .prepare_cached(
            "SELECT id, svc_namespace, svc_name, pod_namespace, pod_name, pod_uid, node, \
             start_t0_ns, start_received_ns, end_t0_ns, end_received_ns, approximate \
             FROM memberships WHERE ip = ?1 ORDER BY start_t0_ns, id",
        )?
        .query_map([canonical_ip(ip)], |r| Row::try_from(r))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (
        id,
        svc_ns,
        svc_name,
        pod_ns,
        pod_name,
        pod_uid,
        node,
        st0,
        srecv,
        et0,
        erecv,
        approximate,
    ) in rows
    {
        let states: Vec<(i64, i64, bool, bool, bool)> = conn
            .prepare_cached(
                "SELECT t0_ns, received_ns, ready, serving, terminating FROM membership_states \
                 WHERE membership_id = ?1 ORDER BY id",
            )?
            .query_map([id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let pod = match (pod_ns, pod_name) {
            (Some(namespace), Some(name)) => Some(PodRef {
                namespace,
                name,
                uid: pod_uid.unwrap_or_default(),
            }),
            _ => None,
        };
        out.push(Membership {
            service: ServiceKey::new(svc_ns, svc_name),
            ip: ip.to_canonical(),
            pod,
            node,
            start_t0: from_ns(st0)?,
            start_received: from_ns(srecv)?,
            end_t0: opt_from_ns(et0)?,
            end_received: opt_from_ns(erecv)?,
            approximate,
            states: states
                .into_iter()
                .map(|(t0, received, ready, serving, terminating)| {
                    Ok(MembershipState {
                        t0: from_ns(t0)?,
                        received: from_ns(received)?,
                        ready,
                        serving,
                        terminating,
                    })
                })
                .collect::<Result<_, Inner>>()?,
        });
    }
    Ok(out)
}
