//! The one injected source of wall-clock time: the core never reads a clock, adapters pass one in.
//!
//! Pure code takes a [`Time`] argument; code that must ask for the time itself (the kube
//! watchers stamping events, the probes stamping answers) takes a [`Clock`]. The binary
//! crate provides the real ones (the system clock, and a clock that follows tokio's paused
//! time in tests); [`FixedClock`] and closures serve pure tests.

use std::sync::Arc;

use crate::model::Time;

/// Reads the current time.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> Time;
}

impl<F> Clock for F
where
    F: Fn() -> Time + Send + Sync + 'static,
{
    fn now(&self) -> Time {
        self()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Time {
        (**self).now()
    }
}

/// A clock that always says the same time (tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedClock(pub Time);

impl Clock for FixedClock {
    fn now(&self) -> Time {
        self.0
    }
}
