//! The global query budget: a GCRA rate limiter with burst 1, so probes never exceed it.
//!
//! See [`Budget`]. Every DNS query the [`Prober`](super::Prober) sends takes one cell;
//! cells are spaced at least `1 s / rate` apart (the period is rounded *up* to whole
//! nanoseconds, so any one-second window holds at most `rate` cells). The limiter runs on
//! tokio's clock, so `start_paused` tests see exact rates.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

/// Default global DNS query budget, queries per second.
pub const DEFAULT_QUERIES_PER_SECOND: NonZeroU32 = match NonZeroU32::new(100) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// governor's view of tokio time: the time since an anchor instant.
#[derive(Clone, Copy, Debug)]
struct TokioTime {
    anchor: Instant,
}

impl GovernorClock for TokioTime {
    type Instant = Duration;

    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.anchor)
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioTime, NoOpMiddleware<Duration>>;

/// A shared rate budget (cheap to clone; clones share the cells).
#[derive(Clone, Debug)]
pub struct Budget {
    limiter: Arc<Limiter>,
    clock: TokioTime,
    rate: NonZeroU32,
    period: Duration,
}

impl Budget {
    /// At most `rate` cells per second, never two closer than `1 s / rate`.
    pub fn per_second(rate: NonZeroU32) -> Self {
        let period = Duration::from_nanos(1_000_000_000u64.div_ceil(u64::from(rate.get())));
        let quota = Quota::with_period(period)
            .unwrap_or(Quota::per_second(rate))
            .allow_burst(NonZeroU32::MIN);
        let clock = TokioTime {
            anchor: Instant::now(),
        };
        Self {
            limiter: Arc::new(RateLimiter::direct_with_clock(quota, clock)),
            clock,
            rate,
            period,
        }
    }

    /// Takes a cell now, or says how long until one is free (nothing is taken then).
    pub fn try_acquire(&self) -> Result<(), Duration> {
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Waits until a cell is free and takes it.
    pub async fn acquire(&self) {
        while let Err(wait) = self.try_acquire() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Cells per second.
    pub fn rate(&self) -> NonZeroU32 {
        self.rate
    }

    /// Minimum spacing between two cells.
    pub fn period(&self) -> Duration {
        self.period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn spacing_is_rounded_up() {
        let b = Budget::per_second(NonZeroU32::new(3).unwrap_or(NonZeroU32::MIN));
        assert_eq!(b.period(), Duration::from_nanos(333_333_334));
        let start = Instant::now();
        let mut n = 0;
        while start.elapsed() < Duration::from_secs(1) {
            b.acquire().await;
            if start.elapsed() < Duration::from_secs(1) {
                n += 1;
            }
        }
        assert_eq!(n, 3);
    }
}
