//! The ledger as a source of IP histories for the join.

use std::net::IpAddr;

use ghostip_analysis::explain::{FlowWindow, HeldWindow, HistoryError, HistorySource, IpHistory};
use ghostip_datapath::layers::CONNTRACK_TABLE;

use ghostip_session::layers::channelz::CHANNELZ;

use crate::ledger::{FindingKind, FindingRecord, Ledger, LedgerError};

/// The flows of a ledger finding of a conntrack path (`None` for other paths).
fn flow_window(f: &FindingRecord) -> Option<FlowWindow> {
    (f.path_kind == CONNTRACK_TABLE.as_str()).then(|| FlowWindow {
        path: f.path_id.clone(),
        service: f.service.to_string(),
        target: f.target.to_string(),
        former_pod: f
            .former_pod
            .as_ref()
            .map(|p| format!("{}/{}", p.namespace, p.name)),
        since: f.t0,
        until: f.converged_by.or(f.last_seen),
        last_used: f.last_seen,
    })
}

/// The window of a ledger finding of a client-side layer (channelz: a gRPC client's
/// balancer) over a removed endpoint (`None` for other paths).
fn held_window(f: &FindingRecord) -> Option<HeldWindow> {
    (f.layer == CHANNELZ.as_str() && f.kind != FindingKind::Missing).then(|| HeldWindow {
        layer: f.layer.clone(),
        path: f.path_id.clone(),
        service: f.service.to_string(),
        target: f.target.to_string(),
        since: f.t0,
        until: f.converged_by,
        last_seen: f.last_seen,
    })
}

impl HistorySource for Ledger {
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError> {
        let err = |source: LedgerError| HistoryError::Source {
            ip,
            source_name: "the ledger",
            source: Box::new(source),
        };
        let findings = self.findings_for_ip(ip).map_err(err)?;
        Ok(IpHistory {
            ownerships: self.history(ip).map_err(err)?,
            memberships: self.memberships_of(ip).map_err(err)?,
            flows: findings.iter().filter_map(flow_window).collect(),
            held: findings.iter().filter_map(held_window).collect(),
        })
    }

    fn describe(&self) -> String {
        format!("ledger {}", self.path().display())
    }

    fn has_services(&self) -> bool {
        true
    }
}
