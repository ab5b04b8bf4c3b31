//! The thin async side of the channelz request budget: one pure [`RequestBudget`] shared by every read, on tokio's clock.
//!
//! A request asks [`ReadBudget::acquire`] for its slot and sleeps until it; the read's
//! deadline is pushed back by the time it waited (see `reader`), so a read stretched by
//! the budget is not a timeout.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ghostip_session::layers::channelz::budget::RequestBudget;
use tokio::time::Instant;

/// The budget shared by every channelz read of one `watch` (cheap to clone; clones share it).
#[derive(Clone, Debug)]
pub struct ReadBudget {
    inner: Arc<Mutex<RequestBudget>>,
    origin: Instant,
}

impl ReadBudget {
    /// `qps` channelz requests per second, summed over every read.
    pub fn new(qps: NonZeroU32) -> Self {
        Self {
            inner: Arc::new(Mutex::new(RequestBudget::new(qps))),
            origin: Instant::now(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut RequestBudget) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits for the next request's slot: returns when it was asked and the slot.
    pub async fn acquire(&self) -> (Instant, Instant) {
        self.acquire_many(1).await
    }

    /// Reserves `n` consecutive slots now, without waiting: returns when they were asked
    /// and the last, when the batch may be sent (so a caller can move its deadline first).
    pub fn reserve_many(&self, n: u32) -> (Instant, Instant) {
        let asked = Instant::now();
        let slot =
            self.origin + self.with(|b| b.reserve_many(asked.duration_since(self.origin), n));
        (asked, slot)
    }

    /// Waits for `n` consecutive slots, the batch sent at the last: returns when it was
    /// asked and that slot.
    pub async fn acquire_many(&self, n: u32) -> (Instant, Instant) {
        let (asked, slot) = self.reserve_many(n);
        if slot > asked {
            tokio::time::sleep_until(slot).await;
        }
        (asked, slot)
    }

    /// Requests per second.
    pub fn qps(&self) -> NonZeroU32 {
        self.with(|b| b.qps())
    }

    /// Requests let through so far.
    pub fn granted(&self) -> u64 {
        self.with(|b| b.granted())
    }

    /// Time requests waited for their slot, summed.
    pub fn waited(&self) -> Duration {
        self.with(|b| b.waited())
    }
}
