//! The lag of a forwarding server (NodeLocal DNSCache, AKS LocalDNS) in front of its upstream.

use super::cache::{
    CacheSettings, denial_cached, prefetch_keepttl_notes, stale_window, success_cached,
};
use super::{ExpectedLag, LagFigures, clamp_ttl, secs};

pub(super) fn forward_lag(
    to: &[String],
    cache: Option<&CacheSettings>,
    name: &str,
    upstream: Option<&ExpectedLag>,
    notes: &mut Vec<String>,
) -> LagFigures {
    notes.push(format!("{name} is forwarded to {}", to.join(" ")));
    let (up_lag, up_ttl, up_nlag, up_nttl, up_stale) = match upstream {
        Some(u) => {
            notes.push(format!(
                "upstream lags up to {} s and hands out TTL {} s",
                u.cache_lag.as_secs(),
                u.client_ttl.as_secs()
            ));
            (
                u.cache_lag.as_secs(),
                Some(u.client_ttl.as_secs()),
                u.denial_lag.as_secs(),
                Some(u.denial_ttl.as_secs()),
                u.serve_stale,
            )
        }
        None => {
            notes.push("upstream unknown: assuming its TTLs reach this cache's maximum; add the upstream's own lag".into());
            (0, None, 0, None, None)
        }
    };
    let Some(c) = cache else {
        notes.push(
            "no cache plugin covers this name: answers pass through with the upstream's TTL".into(),
        );
        return (
            secs(up_lag),
            secs(up_ttl.unwrap_or(0)),
            secs(up_nlag),
            secs(up_nttl.unwrap_or(0)),
            up_stale,
        );
    };
    // An answer fetched at t ≤ t0 + up_lag with remaining TTL r is kept for clamp(r, min, max).
    // If r ≥ min it expires no later than the upstream's horizon (t + r) and no later than
    // t + max; if r < min the floor keeps it for min past the upstream's expiry.
    let chained = |up_lag: u64, up_ttl: Option<u64>, min: u64, max: u64| -> (u64, u64) {
        let horizon = up_ttl.map_or(max, |t| t.max(up_lag));
        let lag = horizon
            .min(up_lag.saturating_add(max))
            .max(up_lag.saturating_add(min.min(max)));
        (lag, clamp_ttl(up_ttl.unwrap_or(max), min, max))
    };
    let (lag, ttl) = chained(up_lag, up_ttl, c.success_min, c.success_max);
    let (nlag, nttl) = chained(up_nlag, up_nttl, c.denial_min, c.denial_max);
    notes.push(format!(
        "cache (line {}): keeps an upstream answer with remaining TTL r for min(max(r, MINTTL {}), MAXTTL {}); clients get TTL {ttl} s",
        c.line, c.success_min, c.success_max
    ));
    let cached = success_cached(c, name, notes);
    let cache_lag = if cached {
        if upstream.is_some() && lag > up_lag {
            notes.push(format!(
                "worst case: an answer fetched just before the upstream expired it is kept {} s more (MINTTL floor or own TTL): {lag} s",
                lag - up_lag
            ));
        } else {
            notes.push(format!(
                "a cached answer may be served up to {lag} s after the change"
            ));
        }
        lag
    } else {
        up_lag
    };
    let denial_lag = if denial_cached(c, name, notes) {
        nlag
    } else {
        up_nlag
    };
    let stale = stale_window(c, cached, notes).or(up_stale);
    prefetch_keepttl_notes(c, ttl, notes);
    (
        secs(cache_lag),
        secs(ttl),
        secs(denial_lag),
        secs(nttl),
        stale,
    )
}
