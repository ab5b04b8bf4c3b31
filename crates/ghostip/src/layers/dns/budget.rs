//! The global query budget: a GCRA rate limiter with burst 1, so probes never exceed it.
//!
//! See [`Budget`]. Every DNS query the [`Prober`](super::Prober) sends takes one cell;
//! cells are spaced at least `1 s / rate` apart (the period is rounded *up* to whole
//! nanoseconds, so any one-second window holds at most `rate` cells). The limiter runs on
//! tokio's clock, so `start_paused` tests see exact rates.

use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
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

/// A shared rate budget (cheap to clone; clones share the cells and the rate).
#[derive(Clone, Debug)]
pub struct Budget {
    inner: Arc<RwLock<Inner>>,
    clock: TokioTime,
}

#[derive(Debug)]
struct Inner {
    limiter: Arc<Limiter>,
    period: Duration,
}

/// The longest spacing a budget takes: a rate below one cell an hour is one an hour.
const LONGEST_PERIOD: Duration = Duration::from_secs(3600);

impl Inner {
    fn new(period: Duration, clock: TokioTime) -> Self {
        let period = period.clamp(Duration::from_nanos(1), LONGEST_PERIOD);
        let quota = Quota::with_period(period)
            .unwrap_or(Quota::per_hour(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::MIN);
        Self {
            limiter: Arc::new(RateLimiter::direct_with_clock(quota, clock)),
            period,
        }
    }
}

/// The spacing of `rate` cells per second, rounded up to whole nanoseconds.
fn period_of(rate: f64) -> Duration {
    if rate.is_nan() || rate <= 0.0 {
        return LONGEST_PERIOD;
    }
    let nanos = (1e9 / rate).ceil();
    if nanos >= LONGEST_PERIOD.as_nanos() as f64 {
        LONGEST_PERIOD
    } else {
        Duration::from_nanos(nanos as u64)
    }
}

impl Budget {
    /// At most `rate` cells per second, never two closer than `1 s / rate`.
    pub fn per_second(rate: NonZeroU32) -> Self {
        let period = Duration::from_nanos(1_000_000_000u64.div_ceil(u64::from(rate.get())));
        Self::with_period(period)
    }

    /// At most `rate` cells per second, a fraction too (`0.6`: one cell every 1.67 s); a rate
    /// of zero or below is one cell an hour.
    pub fn per_second_f64(rate: f64) -> Self {
        Self::with_period(period_of(rate))
    }

    fn with_period(period: Duration) -> Self {
        let clock = TokioTime {
            anchor: Instant::now(),
        };
        Self {
            inner: Arc::new(RwLock::new(Inner::new(period, clock))),
            clock,
        }
    }

    /// Changes the rate of every clone from now on (the cluster's node count changed).
    pub fn set_rate(&self, rate: f64) {
        let period = period_of(rate);
        let mut inner = self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if inner.period != period {
            *inner = Inner::new(period, self.clock);
        }
    }

    fn limiter(&self) -> Arc<Limiter> {
        let inner = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&inner.limiter)
    }

    /// Takes a cell now, or says how long until one is free (nothing is taken then).
    pub fn try_acquire(&self) -> Result<(), Duration> {
        self.limiter()
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Waits until a cell is free and takes it.
    pub async fn acquire(&self) {
        while let Err(wait) = self.try_acquire() {
            // A rate raised meanwhile is seen within a second.
            tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
        }
    }

    /// Minimum spacing between two cells.
    pub fn period(&self) -> Duration {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .period
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

    #[tokio::test(start_paused = true)]
    async fn fractional_rates_and_a_rate_changed_while_running() {
        let b = Budget::per_second_f64(0.5);
        assert_eq!(b.period(), Duration::from_secs(2));
        let start = Instant::now();
        let count = |b: &Budget, secs: u64| {
            let b = b.clone();
            async move {
                let until = Instant::now() + Duration::from_secs(secs);
                let mut n = 0;
                loop {
                    b.acquire().await;
                    if Instant::now() >= until {
                        return n;
                    }
                    n += 1;
                }
            }
        };
        // Cells at 0, 2, 4, 6 and 8 s.
        assert_eq!(count(&b, 10).await, 5);
        b.set_rate(4.0);
        assert_eq!(b.period(), Duration::from_millis(250));
        let n = count(&b, 10).await;
        assert!((39..=41).contains(&n), "{n}");
        assert!(start.elapsed() >= Duration::from_secs(20));
        assert_eq!(Budget::per_second_f64(0.0).period(), LONGEST_PERIOD);
        assert_eq!(Budget::per_second_f64(-1.0).period(), LONGEST_PERIOD);
    }
}
