//! The clocks the adapters inject into the pure runtime: the system's wall clock, and one that follows tokio's (pausable) time.
//!
//! There is one clock trait, [`ghostip_core::Clock`]. The kube watchers stamp every truth
//! event with [`SystemClock`]; probes stamp each observation when the answer arrives with
//! [`TokioClock`], which derives wall time from tokio's monotonic clock through a fixed
//! anchor, so it follows `tokio::time::pause`/`advance` in tests and never jumps with NTP
//! in production. [`TokioClock::instant_at`] maps a wall-clock deadline from the pure
//! runtime back onto tokio's clock.
//!
//! This module is the only place that reads the system's clocks (clippy.toml disallows
//! `Time::now`, `SystemTime::now` and `Instant::now` elsewhere): [`wall_now`] for the edge's
//! wall-clock stamps, [`monotonic_now`] for adapters measuring elapsed time (timeouts,
//! deadlines, durations they report). tokio's `Instant::now` stays allowed: it follows
//! `tokio::time::pause` in tests.

use std::time::Duration;

use ghostip_core::Clock;
use ghostip_core::Time;
use tokio::time::Instant;

/// The system's wall clock ([`jiff::Timestamp::now`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Time {
        wall_now()
    }
}

/// The system's wall clock, now: what [`SystemClock`] reads. For the commands' edge (stamping
/// what they print or store); code below it takes a [`Clock`] or a [`Time`].
#[allow(clippy::disallowed_methods)] // the one read of the system's wall clock
pub fn wall_now() -> Time {
    Time::now()
}

/// A monotonic instant of the system's clock, for adapters that measure elapsed time (reader
/// timeouts, HTTP admission, the ledger writer's retries, durations in reports, tests).
#[allow(clippy::disallowed_methods)] // the one read of the system's monotonic clock
pub fn monotonic_now() -> std::time::Instant {
    std::time::Instant::now()
}

/// Wall time = `anchor_time + (tokio::time::Instant::now() - anchor_instant)`.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    instant: Instant,
    wall: Time,
}

impl TokioClock {
    /// Anchored at the current tokio instant and the current system time.
    pub fn new() -> Self {
        Self {
            instant: Instant::now(),
            wall: wall_now(),
        }
    }

    /// Anchored at a given pair (tests: a fixed wall time for a paused clock).
    pub fn anchored(instant: Instant, wall: Time) -> Self {
        Self { instant, wall }
    }

    /// The wall time of a tokio instant (instants before the anchor map to the anchor minus the gap).
    pub fn at(&self, instant: Instant) -> Time {
        let result = if instant >= self.instant {
            self.wall.checked_add(instant.duration_since(self.instant))
        } else {
            self.wall.checked_sub(self.instant.duration_since(instant))
        };
        result.unwrap_or(self.wall)
    }

    /// The tokio instant of a wall time (times before the anchor map to the anchor).
    pub fn instant_at(&self, wall: Time) -> Instant {
        let ahead = Duration::try_from(wall.duration_since(self.wall)).unwrap_or(Duration::ZERO);
        self.instant + ahead
    }

    /// Time elapsed since the anchor, on tokio's clock.
    pub fn elapsed(&self) -> Duration {
        self.instant.elapsed()
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Time {
        self.at(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time() {
        let wall: Time = "2026-11-30T05:00:00Z".parse().unwrap();
        let clock = TokioClock::anchored(Instant::now(), wall);
        assert_eq!(clock.now(), wall);
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(
            clock.now(),
            "2026-11-30T05:00:01.5Z".parse::<Time>().unwrap()
        );
        let before = clock.at(clock.instant.checked_sub(Duration::from_secs(1)).unwrap());
        assert_eq!(before, "2026-11-30T04:59:59Z".parse::<Time>().unwrap());
    }
}
