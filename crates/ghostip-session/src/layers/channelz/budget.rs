//! The cluster-wide budget of channelz gRPC requests: a GCRA limiter with burst 1 that spaces requests at least `1 s / qps` apart.
//!
//! Pure: time is passed in as the time since any fixed origin the caller keeps (the
//! adapter uses a tokio instant, so paused-time tests see exact rates). Every request a
//! channelz read sends (each `GetTopChannels` page, each `GetSubchannel`) reserves one slot
//! with [`RequestBudget::reserve`] and is sent at the slot it was given. The period is
//! rounded *up* to whole nanoseconds, so any one-second window holds at most `qps` slots;
//! an idle budget saves nothing up (burst 1), so no window ever holds more. A batch of `n`
//! requests ([`RequestBudget::reserve_many`]) takes `n` consecutive slots and is sent at
//! the last: requests are never sent before their slot, so any window of `t` seconds holds
//! at most `qps × t + n` of them.

use std::num::NonZeroU32;
use std::time::Duration;

/// Slots of channelz requests, `1 s / qps` apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestBudget {
    qps: NonZeroU32,
    period: Duration,
    /// The earliest slot the next reservation can get.
    next: Duration,
    /// Slots given out.
    granted: u64,
    /// Time between asking and the slot, summed over every reservation.
    waited: Duration,
}

impl RequestBudget {
    /// A budget of `qps` requests per second.
    pub fn new(qps: NonZeroU32) -> Self {
        let period = Duration::from_nanos(1_000_000_000u64.div_ceil(u64::from(qps.get())));
        Self {
            qps,
            period,
            next: Duration::ZERO,
            granted: 0,
            waited: Duration::ZERO,
        }
    }

    /// Requests per second.
    pub fn qps(&self) -> NonZeroU32 {
        self.qps
    }

    /// The spacing of two slots.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Reserves the next slot for a request asked at `now`: returns when it may be sent
    /// (`now` or later). Slots are handed out in the order asked, at least one period apart.
    pub fn reserve(&mut self, now: Duration) -> Duration {
        let at = self.next.max(now);
        self.next = at.saturating_add(self.period);
        self.granted = self.granted.saturating_add(1);
        self.waited = self.waited.saturating_add(at.saturating_sub(now));
        at
    }

    /// Reserves `n` consecutive slots (at least one) for a batch asked at `now`: returns
    /// the last, when the whole batch may be sent.
    pub fn reserve_many(&mut self, now: Duration, n: u32) -> Duration {
        let first = self.next.max(now);
        let last = first.saturating_add(self.period.saturating_mul(n.max(1) - 1));
        self.next = last.saturating_add(self.period);
        self.granted = self.granted.saturating_add(u64::from(n.max(1)));
        self.waited = self
            .waited
            .saturating_add(last.saturating_sub(now).saturating_mul(n.max(1)));
        last
    }

    /// Slots given out so far.
    pub fn granted(&self) -> u64 {
        self.granted
    }

    /// Time requests spent waiting for their slot, summed.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qps(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn requests_asked_at_once_are_spaced_one_period_apart() {
        let mut b = RequestBudget::new(qps(200));
        assert_eq!(b.period(), ms(5));
        let slots: Vec<Duration> = (0..5).map(|_| b.reserve(ms(1000))).collect();
        assert_eq!(
            slots,
            vec![ms(1000), ms(1005), ms(1010), ms(1015), ms(1020)]
        );
        assert_eq!(b.granted(), 5);
        assert_eq!(b.waited(), ms(5 + 10 + 15 + 20));
    }

    #[test]
    fn an_idle_budget_saves_nothing_up() {
        let mut b = RequestBudget::new(qps(10));
        assert_eq!(b.reserve(ms(0)), ms(0));
        // Ten seconds idle: the next two are still a period apart.
        assert_eq!(b.reserve(ms(10_000)), ms(10_000));
        assert_eq!(b.reserve(ms(10_000)), ms(10_100));
        // Asked after its slot would have been: sent when asked, nothing waited.
        assert_eq!(b.reserve(ms(10_150)), ms(10_200));
        assert_eq!(b.reserve(ms(10_500)), ms(10_500));
        assert_eq!(b.waited(), ms(100 + 50));
    }

    /// The bound the docs promise: any one-second window holds at most `qps` slots, also
    /// when 1 s is not a whole number of periods (7 qps: 142 857 143 ns, rounded up).
    #[test]
    fn no_one_second_window_holds_more_than_qps() {
        for rate in [1, 7, 200, 999, 1000, 100_000] {
            let mut b = RequestBudget::new(qps(rate));
            let n = usize::try_from(rate).unwrap_or(usize::MAX) * 3 + 5;
            // Asked in bursts at uneven instants.
            let slots: Vec<Duration> = (0..n)
                .map(|i| b.reserve(Duration::from_micros((i as u64 / 17) * 3_001)))
                .collect();
            let k = usize::try_from(rate).unwrap_or(usize::MAX);
            for w in slots.windows(k + 1) {
                if let (Some(first), Some(last)) = (w.first(), w.last()) {
                    assert!(
                        *last - *first >= Duration::from_secs(1),
                        "{rate} qps: {} slots within {:?}",
                        k + 1,
                        *last - *first
                    );
                }
            }
        }
    }

    #[test]
    fn a_batch_takes_consecutive_slots_and_goes_at_the_last() {
        let mut b = RequestBudget::new(qps(200));
        assert_eq!(b.reserve(ms(0)), ms(0));
        // 20 slots from 5 ms: the batch goes at 100 ms; each of the 20 waited 100 ms.
        assert_eq!(b.reserve_many(ms(0), 20), ms(100));
        assert_eq!(b.reserve(ms(0)), ms(105));
        assert_eq!(b.granted(), 22);
        assert_eq!(b.waited(), ms(20 * 100 + 105));
        // A batch of none is one.
        assert_eq!(b.reserve_many(ms(1000), 0), ms(1000));
        assert_eq!(b.granted(), 23);
    }

    /// Batches of up to 32 sent at their last slot: any one-second window holds at most
    /// `qps + 32` requests, and the long run stays within `qps`.
    #[test]
    fn batches_stay_within_qps_plus_a_batch() {
        let mut b = RequestBudget::new(qps(500));
        let mut sent: Vec<Duration> = Vec::new();
        for i in 0..2000u32 {
            let n = 1 + (i * 7) % 32;
            let at = b.reserve_many(Duration::from_micros(u64::from(i) * 9_000), n);
            sent.extend(std::iter::repeat_n(at, n as usize));
        }
        for w in sent.windows(500 + 32 + 1) {
            if let (Some(first), Some(last)) = (w.first(), w.last()) {
                assert!(*last - *first >= Duration::from_secs(1));
            }
        }
        let (Some(first), Some(last)) = (sent.first(), sent.last()) else {
            return;
        };
        let span = (*last - *first).as_secs_f64();
        assert!(sent.len() as f64 <= 500.0 * span + 32.0);
    }

    #[test]
    fn a_slot_is_never_before_it_is_asked() {
        let mut b = RequestBudget::new(qps(3));
        for t in [0u64, 1, 2, 1000, 1001, 5000] {
            let now = ms(t);
            assert!(b.reserve(now) >= now);
        }
    }
}
