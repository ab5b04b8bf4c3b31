//! The `cache` plugin's settings (caps, MINTTL, `disable`, `serve_stale`, `prefetch`,
//! `keepttl`) and what they add to a lag.

use std::time::Duration;

use crate::corefile::args::{go_duration, int_arg, plugin_err, plugin_zones};
use crate::corefile::syntax::Directive;
use crate::corefile::zone::{best_zone, normalize_zone, shown, zone_contains};
use crate::corefile::{
    CorefileError, DEFAULT_DENIAL_MAX_TTL, DEFAULT_MIN_TTL, DEFAULT_SERVE_STALE,
    DEFAULT_SUCCESS_MAX_TTL,
};

/// Settings of one `cache` plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CacheSettings {
    pub(super) line: usize,
    pub(super) zones: Vec<String>,
    pub(super) success_max: u64,
    pub(super) success_min: u64,
    pub(super) denial_max: u64,
    pub(super) denial_min: u64,
    pub(super) disable_success: Vec<String>,
    pub(super) disable_denial: Vec<String>,
    pub(super) serve_stale: Option<(Duration, bool)>,
    pub(super) prefetch: Option<(u64, Duration, u64)>,
    pub(super) keepttl: bool,
    pub(super) ignored: Vec<String>,
}

pub(super) fn success_cached(c: &CacheSettings, name: &str, notes: &mut Vec<String>) -> bool {
    disabled_for(&c.disable_success, name, "success", notes)
}

pub(super) fn denial_cached(c: &CacheSettings, name: &str, notes: &mut Vec<String>) -> bool {
    disabled_for(&c.disable_denial, name, "denial", notes)
}

/// Whether the cache kind still caches `name` given its `disable` zones; notes partial disables.
fn disabled_for(zones: &[String], name: &str, kind: &str, notes: &mut Vec<String>) -> bool {
    if let Some(z) = best_zone(zones, name) {
        notes.push(format!(
            "disable {kind} {}: {kind} answers for {name} are never cached",
            shown(z, name)
        ));
        return false;
    }
    for z in zones.iter().filter(|z| zone_contains(name, z)) {
        notes.push(format!(
            "disable {kind} {z}: only names under {z} skip the {kind} cache"
        ));
    }
    true
}

pub(super) fn stale_window(
    c: &CacheSettings,
    cached: bool,
    notes: &mut Vec<String>,
) -> Option<Duration> {
    let (d, verify) = c.serve_stale?;
    if !cached {
        return None;
    }
    if verify {
        notes.push(format!(
            "serve_stale {}s verify: an expired entry is served (TTL 0) only when the source fails to answer",
            d.as_secs()
        ));
    } else {
        notes.push(format!(
            "serve_stale {}s immediate: the first query after expiry (within {}s) still gets the expired answer with TTL 0 while the entry refreshes",
            d.as_secs(),
            d.as_secs()
        ));
    }
    Some(d)
}

pub(super) fn prefetch_keepttl_notes(c: &CacheSettings, ttl: u64, notes: &mut Vec<String>) {
    if let Some((amount, dur, pct)) = c.prefetch {
        notes.push(format!(
            "prefetch {amount} {}s {pct}%: popular entries are refreshed early, which never extends the bound (a refreshed entry is at most {ttl} s old)",
            dur.as_secs()
        ));
    }
    if c.keepttl {
        notes.push(format!(
            "keepttl: cache hits carry the full TTL {ttl} s instead of the remaining one, so client caches may keep a removed IP up to the cache lag plus {ttl} s"
        ));
    }
}

fn positive_ttl(line: usize, plugin: &str, s: &str) -> Result<u64, CorefileError> {
    let v = int_arg(line, plugin, "TTL", s)?;
    u64::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
        plugin_err(
            line,
            plugin,
            format!("cache TTL can not be zero or negative: {v}"),
        )
    })
}

pub(super) fn cache_settings(
    c: &Directive,
    server_zones: &[String],
) -> Result<CacheSettings, CorefileError> {
    let mut s = CacheSettings {
        line: c.line,
        zones: Vec::new(),
        success_max: DEFAULT_SUCCESS_MAX_TTL,
        success_min: DEFAULT_MIN_TTL,
        denial_max: DEFAULT_DENIAL_MAX_TTL,
        denial_min: DEFAULT_MIN_TTL,
        disable_success: Vec::new(),
        disable_denial: Vec::new(),
        serve_stale: None,
        prefetch: None,
        keepttl: false,
        ignored: Vec::new(),
    };
    let mut args: &[String] = &c.args;
    // The first argument is the TTL when it is an integer, otherwise a zone.
    if let Some(first) = args.first()
        && let Ok(v) = first.parse::<i64>()
    {
        let ttl = u64::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
            plugin_err(
                c.line,
                "cache",
                format!("cache TTL can not be zero or negative: {v}"),
            )
        })?;
        s.success_max = ttl;
        s.denial_max = ttl;
        args = &args[1..];
    }
    s.zones = plugin_zones(args, server_zones);
    for sub in c.block_lines() {
        let line = sub.line;
        match sub.name.as_str() {
            "success" | "denial" => {
                let Some(cap) = sub.args.first() else {
                    return Err(plugin_err(
                        line,
                        "cache",
                        format!("{} needs a capacity", sub.name),
                    ));
                };
                int_arg(line, "cache", "capacity", cap)?;
                let (max, min) = if sub.name == "success" {
                    (&mut s.success_max, &mut s.success_min)
                } else {
                    (&mut s.denial_max, &mut s.denial_min)
                };
                if let Some(t) = sub.args.get(1) {
                    *max = positive_ttl(line, "cache", t)?;
                }
                if let Some(m) = sub.args.get(2) {
                    let v = int_arg(line, "cache", "MINTTL", m)?;
                    *min = u64::try_from(v).map_err(|_| {
                        plugin_err(
                            line,
                            "cache",
                            format!("cache min TTL can not be negative: {v}"),
                        )
                    })?;
                }
            }
            "prefetch" => {
                if sub.args.is_empty() || sub.args.len() > 3 {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "prefetch takes AMOUNT [DURATION] [PERCENTAGE%]",
                    ));
                }
                let amount = int_arg(line, "cache", "prefetch amount", &sub.args[0])?;
                let amount = u64::try_from(amount).map_err(|_| {
                    plugin_err(
                        line,
                        "cache",
                        format!("prefetch amount should be positive: {amount}"),
                    )
                })?;
                let dur = match sub.args.get(1) {
                    Some(d) => go_duration(line, "cache", d)?,
                    None => Duration::from_secs(60),
                };
                let pct = match sub.args.get(2) {
                    Some(p) => {
                        let Some(num) = p.strip_suffix('%') else {
                            return Err(plugin_err(
                                line,
                                "cache",
                                format!("percentage must end with '%': {p:?}"),
                            ));
                        };
                        let n = int_arg(line, "cache", "percentage", num)?;
                        u64::try_from(n)
                            .ok()
                            .filter(|n| (10..=90).contains(n))
                            .ok_or_else(|| {
                                plugin_err(
                                    line,
                                    "cache",
                                    format!("percentage should fall in range [10, 90]: {n}"),
                                )
                            })?
                    }
                    None => 10,
                };
                s.prefetch = Some((amount, dur, pct));
            }
            "serve_stale" => {
                if sub.args.len() > 2 {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "serve_stale takes [DURATION] [REFRESH_MODE]",
                    ));
                }
                let d = match sub.args.first() {
                    Some(d) => go_duration(line, "cache", d)?,
                    None => DEFAULT_SERVE_STALE,
                };
                let verify = match sub.args.get(1).map(|m| m.to_ascii_lowercase()) {
                    None => false,
                    Some(m) if m == "immediate" => false,
                    Some(m) if m == "verify" => true,
                    Some(m) => {
                        return Err(plugin_err(
                            line,
                            "cache",
                            format!("invalid value for serve_stale refresh mode: {m}"),
                        ));
                    }
                };
                s.serve_stale = Some((d, verify));
            }
            "servfail" => {
                let [d] = sub.args.as_slice() else {
                    return Err(plugin_err(line, "cache", "servfail takes one DURATION"));
                };
                if go_duration(line, "cache", d)? > Duration::from_secs(300) {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "caching SERVFAIL responses over 5 minutes is not permitted",
                    ));
                }
            }
            "disable" => {
                let Some(kind) = sub.args.first() else {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "disable takes success|denial [ZONES...]",
                    ));
                };
                // No zones means the root; a later `disable` of the same kind replaces an earlier one.
                let zones: Vec<String> = if sub.args.len() > 1 {
                    sub.args[1..].iter().map(|z| normalize_zone(z)).collect()
                } else {
                    vec![".".to_string()]
                };
                match kind.as_str() {
                    "success" => s.disable_success = zones,
                    "denial" => s.disable_denial = zones,
                    other => {
                        return Err(plugin_err(
                            line,
                            "cache",
                            format!(
                                "cache type for disable must be \"success\" or \"denial\", got {other:?}"
                            ),
                        ));
                    }
                }
            }
            "keepttl" => {
                if !sub.args.is_empty() {
                    return Err(plugin_err(line, "cache", "keepttl takes no arguments"));
                }
                s.keepttl = true;
            }
            other => s.ignored.push(other.to_string()),
        }
    }
    Ok(s)
}
