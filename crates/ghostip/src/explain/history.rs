//! The ledger as a source of IP histories for the join.

use std::net::IpAddr;

use ghostip_analysis::explain::{FlowWindow, HistoryError, HistorySource, IpHistory};
use ghostip_datapath::layers::CONNTRACK_TABLE;

use crate::ledger::{FindingRecord, Ledger, LedgerError};

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

impl HistorySource for Ledger {
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError> {
        let err = |source: LedgerError| HistoryError::Source {
            ip,
            source_name: "the ledger",
            source: Box::new(source),
        };
        Ok(IpHistory {
            ownerships: self.history(ip).map_err(err)?,
            memberships: self.memberships_of(ip).map_err(err)?,
            flows: self
                .findings_for_ip(ip)
                .map_err(err)?
                .iter()
                .filter_map(flow_window)
                .collect(),
        })
    }

    fn describe(&self) -> String {
        format!("ledger {}", self.path().display())
    }

    fn has_services(&self) -> bool {
        true
    }
}
