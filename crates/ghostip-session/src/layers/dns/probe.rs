//! What the DNS layer asks its prober to do: which paths to query, the slow sweep's names, and bursts after a change.
//!
//! The prober (the binary crate's IO adapter) follows these commands within one global
//! query budget; deadlines are wall-clock [`Time`]s that it maps onto its own clock.

use ghostip_core::{PathIdx, ServiceKey, Time};

use super::names::{ProbeName, ServiceNames};
use super::paths::DnsPath;

/// A path to probe, with its engine index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbePath {
    /// The engine's index, copied into every observation.
    pub idx: PathIdx,
    /// Where to send queries and how the path is named.
    pub path: DnsPath,
}

/// Steering for the prober.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeCommand {
    /// Replace the set of paths (CoreDNS pods come and go). Bursts and the sweep continue
    /// over the new set.
    SetPaths(Vec<ProbePath>),
    /// Replace the sweep's names (every headless Service).
    SetSweep(Vec<ServiceNames>),
    /// Probe `service`'s `names` on every path every burst interval, from now until
    /// [`ProbeCommand::StopBurst`] or `until`. A burst for a Service already bursting
    /// replaces it and starts a new round at once.
    Burst {
        /// The Service whose truth changed.
        service: ServiceKey,
        /// Its names (see [`service_names`](super::names::service_names)).
        names: Vec<ProbeName>,
        /// Deadline (wall clock).
        until: Time,
    },
    /// End the burst of `service` (every path converged or is stuck).
    StopBurst {
        /// The Service.
        service: ServiceKey,
    },
}
