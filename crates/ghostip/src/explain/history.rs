//! Where the history of an IP comes from: the ledger or a truth-history file.

use std::net::IpAddr;

use crate::ledger::{Ledger, LedgerError, Membership, Ownership};

/// Everything known about one IP: who owned it when, and which Services it was an endpoint of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpHistory {
    /// Ownership intervals, in any order (never overlapping for one IP).
    pub ownerships: Vec<Ownership>,
    /// Endpoint memberships (empty when the source has no Services).
    pub memberships: Vec<Membership>,
}

/// A lookup failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The ledger could not be read.
    #[error("reading the history of {ip} from the ledger")]
    Ledger {
        /// The IP looked up.
        ip: IpAddr,
        /// The cause.
        #[source]
        source: LedgerError,
    },
}

/// A source of IP histories.
pub trait HistorySource {
    /// The history of `ip` (empty when the source never saw it).
    ///
    /// # Errors
    /// [`HistoryError`] when the source cannot be read.
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError>;

    /// A short description for reports (`ledger /var/lib/ghostip/ghostip.db`).
    fn describe(&self) -> String;

    /// Whether the source knows Services (endpoint memberships).
    fn has_services(&self) -> bool;
}

impl HistorySource for Ledger {
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError> {
        let err = |source| HistoryError::Ledger { ip, source };
        Ok(IpHistory {
            ownerships: self.history(ip).map_err(err)?,
            memberships: self.memberships_of(ip).map_err(err)?,
        })
    }

    fn describe(&self) -> String {
        format!("ledger {}", self.path().display())
    }

    fn has_services(&self) -> bool {
        true
    }
}

impl<T: HistorySource + ?Sized> HistorySource for &T {
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError> {
        (**self).lookup(ip)
    }

    fn describe(&self) -> String {
        (**self).describe()
    }

    fn has_services(&self) -> bool {
        (**self).has_services()
    }
}
