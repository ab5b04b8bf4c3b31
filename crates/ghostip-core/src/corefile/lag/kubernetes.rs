//! The `kubernetes` plugin's TTL and the lag of a server answering from it, under its cache.

use super::cache::{
    CacheSettings, denial_cached, prefetch_keepttl_notes, stale_window, success_cached,
};
use super::{LagFigures, clamp_ttl, secs};
use crate::corefile::CorefileError;
use crate::corefile::DEFAULT_KUBERNETES_TTL;
use crate::corefile::args::{int_arg, plugin_err};
use crate::corefile::syntax::Directive;
use std::time::Duration;

pub(super) fn kubernetes_lag(
    ttl: u32,
    cache: Option<&CacheSettings>,
    name: &str,
    notes: &mut Vec<String>,
) -> LagFigures {
    let t = u64::from(ttl);
    // Negative answers carry the SOA, whose TTL CoreDNS caps at 300 s.
    let neg = t.min(300);
    notes.push(format!(
        "kubernetes plugin answers with TTL {t} s (negative answers: SOA TTL {neg} s)"
    ));
    let Some(c) = cache else {
        notes.push("no cache plugin covers this name: CoreDNS answers from its informer store, TTL untouched".into());
        return (Duration::ZERO, secs(t), Duration::ZERO, secs(neg), None);
    };
    let d = clamp_ttl(t, c.success_min, c.success_max);
    let n = clamp_ttl(neg, c.denial_min, c.denial_max);
    notes.push(format!(
        "cache (line {}): every reply gets TTL min(max({t}, MINTTL {}), MAXTTL {}) = {d} s, cached or not",
        c.line, c.success_min, c.success_max
    ));
    if t < c.success_min {
        notes.push(format!(
            "the MINTTL floor raises the kubernetes TTL {t} s to {} s",
            c.success_min
        ));
    }
    let cached = success_cached(c, name, notes);
    let cache_lag = if cached {
        notes.push(format!(
            "a cached answer is served until its TTL runs out: up to {d} s after the kubernetes plugin dropped the IP"
        ));
        d
    } else {
        0
    };
    let denial_cached = denial_cached(c, name, notes);
    let denial_lag = if denial_cached { n } else { 0 };
    let stale = stale_window(c, cached, notes);
    prefetch_keepttl_notes(c, d, notes);
    (secs(cache_lag), secs(d), secs(denial_lag), secs(n), stale)
}

pub(super) fn kubernetes_ttl(k: &Directive) -> Result<u32, CorefileError> {
    let mut ttl = DEFAULT_KUBERNETES_TTL;
    for sub in k.block_lines().iter().filter(|s| s.name == "ttl") {
        let Some(arg) = sub.args.first() else {
            return Err(plugin_err(sub.line, "kubernetes", "ttl needs a value"));
        };
        let t = int_arg(sub.line, "kubernetes", "ttl", arg)?;
        ttl = u32::try_from(t)
            .ok()
            .filter(|t| *t <= 3600)
            .ok_or_else(|| {
                plugin_err(
                    sub.line,
                    "kubernetes",
                    format!("ttl must be in range [0, 3600]: {t}"),
                )
            })?;
    }
    Ok(ttl)
}
