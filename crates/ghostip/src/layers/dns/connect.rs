//! TCP connect probe: does a (removed) endpoint still accept connections? Used to measure exposure.
//!
//! See [`connect`] for one probe and [`ConnectProber`] for probes paced by a [`Budget`].
//! A removed pod that still accepts means clients sent to it by a stale path were still
//! served; refused, timed out or unreachable means they were sent to a dead IP.
//!
//! The budget: [`ConnectProber::new`] takes any [`Budget`]. Pass a clone of the
//! [`Prober`](super::Prober)'s budget to count connects against the global DNS budget,
//! or its own small one ([`DEFAULT_CONNECTS_PER_SECOND`]); connect probes are few (one
//! per removed endpoint per interval), so their own budget is the default.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use ghostip_core::Time;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::budget::Budget;
use ghostip_core::Clock;

/// Default rate of a connect prober's own budget.
pub const DEFAULT_CONNECTS_PER_SECOND: NonZeroU32 = match NonZeroU32::new(20) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// Default time allowed for a connection to be accepted.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What a connect attempt found.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ConnectOutcome {
    /// The three-way handshake completed: something listens there.
    Accepted,
    /// RST: the host is up, nothing listens on the port.
    Refused,
    /// No answer within the timeout (a dead IP behind a bridge, a dropping firewall).
    Timeout,
    /// The network said no (host or network unreachable, other socket errors).
    Unreachable(String),
}

impl ConnectOutcome {
    /// Whether the endpoint still accepts connections.
    pub fn is_accepting(&self) -> bool {
        matches!(self, ConnectOutcome::Accepted)
    }

    /// A short, bounded label for metrics and reports.
    pub fn label(&self) -> &'static str {
        match self {
            ConnectOutcome::Accepted => "accepted",
            ConnectOutcome::Refused => "refused",
            ConnectOutcome::Timeout => "timeout",
            ConnectOutcome::Unreachable(_) => "unreachable",
        }
    }
}

impl fmt::Display for ConnectOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectOutcome::Unreachable(e) => write!(f, "unreachable: {e}"),
            other => f.write_str(other.label()),
        }
    }
}

/// One connect probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectProbe {
    /// Address probed.
    pub target: SocketAddr,
    /// What happened.
    pub outcome: ConnectOutcome,
    /// When the outcome was known.
    pub at: Time,
    /// From starting the connect to the outcome.
    pub latency: Duration,
}

/// Opens (and immediately closes) one TCP connection to `target`.
pub async fn connect(target: SocketAddr, timeout: Duration, clock: &impl Clock) -> ConnectProbe {
    let start = Instant::now();
    let outcome = match tokio::time::timeout(timeout, TcpStream::connect(target)).await {
        Ok(Ok(stream)) => {
            drop(stream);
            ConnectOutcome::Accepted
        }
        Ok(Err(e)) => outcome_of(&e),
        Err(_) => ConnectOutcome::Timeout,
    };
    ConnectProbe {
        target,
        outcome,
        at: clock.now(),
        latency: start.elapsed(),
    }
}

fn outcome_of(e: &io::Error) -> ConnectOutcome {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ConnectOutcome::Refused,
        io::ErrorKind::TimedOut => ConnectOutcome::Timeout,
        _ => ConnectOutcome::Unreachable(e.to_string()),
    }
}

/// Connect probes paced by a budget.
#[derive(Clone, Debug)]
pub struct ConnectProber<C> {
    budget: Budget,
    timeout: Duration,
    clock: C,
}

impl<C: Clock> ConnectProber<C> {
    /// Probes taking one cell of `budget` each, each allowed `timeout`.
    pub fn new(budget: Budget, timeout: Duration, clock: C) -> Self {
        Self {
            budget,
            timeout,
            clock,
        }
    }

    /// Waits for a cell of the budget, then probes `target`.
    pub async fn probe(&self, target: SocketAddr) -> ConnectProbe {
        self.budget.acquire().await;
        connect(target, self.timeout, &self.clock).await
    }

    /// The budget used.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_errors_map_onto_outcomes() {
        assert_eq!(
            outcome_of(&io::Error::from(io::ErrorKind::ConnectionRefused)),
            ConnectOutcome::Refused
        );
        assert_eq!(
            outcome_of(&io::Error::from(io::ErrorKind::TimedOut)),
            ConnectOutcome::Timeout
        );
        let unreachable = outcome_of(&io::Error::from(io::ErrorKind::HostUnreachable));
        assert_eq!(unreachable.label(), "unreachable");
        assert!(!unreachable.is_accepting());
    }
}
