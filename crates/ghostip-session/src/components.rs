//! The components' own word: kube-proxy's metrics read from Prometheus text exposition, the p99 of its network programming latency over a window, and the judgement that a kube-proxy stalled.
//!
//! Pure: the caller scrapes `/metrics` and passes the text and the times. The agent's
//! `components` layer (`layers::components`) keeps the scrapes and the Service changes and
//! judges with them.
//!
//! - [`parse_exposition`] reads the text format (`# HELP`/`# TYPE` and comments skipped, labels
//!   with `\\`, `\"`, `\n` escapes, `+Inf`/`-Inf`/`NaN`, an optional timestamp); a line it
//!   cannot read is an error naming the line.
//! - [`KubeProxyMetrics::from_text`] takes `kubeproxy_sync_proxy_rules_last_timestamp_seconds`
//!   and the `kubeproxy_network_programming_duration_seconds` histogram.
//! - [`Histogram::p99_since`] gives the 99th percentile of what was observed between two scrapes,
//!   interpolated inside its bucket as Prometheus' `histogram_quantile` does.
//! - [`component_stalled`] judges a kube-proxy whose last sync has not advanced past a Service
//!   change for longer than its `--min-sync-period` plus the audit period.

use std::collections::BTreeMap;
use std::time::Duration;

use ghostip_core::Time;

/// The last full or partial sync of kube-proxy's rules, Unix seconds (a gauge).
pub const LAST_SYNC: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
/// From an endpoint change to the rules programmed, seconds (a histogram).
pub const PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
/// How long one sync of the rules took, seconds (a histogram).
pub const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric name (`…_bucket`, `…_sum`, `…_count` for a histogram's series).
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A line of exposition text that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}: {text:?}")]
pub struct MetricsError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub what: &'static str,
    /// The line (at most 120 characters of it).
    pub text: String,
}

/// Every sample of a Prometheus text exposition.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, MetricsError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |what| MetricsError {
            line: i + 1,
            what,
            text: line.chars().take(120).collect(),
        };
        out.push(parse_sample(line).map_err(err)?);
    }
    Ok(out)
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn parse_sample(line: &str) -> Result<Sample, &'static str> {
    let end = line
        .char_indices()
        .find(|(i, c)| !is_name_char(*c, *i == 0))
        .map_or(line.len(), |(i, _)| i);
    if end == 0 {
        return Err("no metric name");
    }
    let name = &line[..end];
    let mut rest = &line[end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (l, r) = parse_labels(after)?;
        labels = l;
        rest = r;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = parse_value(value).ok_or("not a number")?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>().map_err(|_| "not a timestamp")?;
    }
    if fields.next().is_some() {
        return Err("text after the timestamp");
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The labels after `{`, and what follows the closing `}`.
#[allow(clippy::type_complexity)]
fn parse_labels(mut s: &str) -> Result<(Vec<(String, String)>, &str), &'static str> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(r) = s.strip_prefix('}') {
            return Ok((labels, r));
        }
        let end = s
            .char_indices()
            .find(|(i, c)| !is_name_char(*c, *i == 0) || *c == ':')
            .map_or(s.len(), |(i, _)| i);
        if end == 0 {
            return Err("bad label name");
        }
        let key = s[..end].to_string();
        s = s[end..].trim_start();
        s = s.strip_prefix('=').ok_or("no `=` after a label name")?;
        s = s.trim_start();
        s = s.strip_prefix('"').ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err("unterminated label value"),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    _ => return Err("bad escape in a label value"),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key, value));
        s = s[close + 1..].trim_start();
        if let Some(r) = s.strip_prefix(',') {
            s = r;
        } else if !s.starts_with('}') {
            return Err("expected `,` or `}` after a label");
        }
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// A cumulative histogram at one scrape: bucket upper bounds with their counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// `(le, cumulative count)`, by `le`, `+Inf` last.
    pub buckets: Vec<(f64, f64)>,
    /// `_count`.
    pub count: f64,
    /// `_sum`.
    pub sum: f64,
}

impl Histogram {
    /// The histogram `name` among `samples`, its series of every other label summed.
    pub fn from_samples(samples: &[Sample], name: &str) -> Option<Self> {
        let bucket = format!("{name}_bucket");
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        let mut h = Histogram::default();
        let mut seen = false;
        for s in samples {
            if s.name == bucket {
                let le = s.label("le").and_then(parse_value)?;
                if le.is_nan() {
                    return None;
                }
                // Ordered by the float's bits: every `le` here is non-negative or +Inf.
                let e = by_le.entry(le.max(0.0).to_bits()).or_insert((le, 0.0));
                e.1 += s.value;
                seen = true;
            } else if s.name == format!("{name}_count") {
                h.count += s.value;
                seen = true;
            } else if s.name == format!("{name}_sum") {
                h.sum += s.value;
            }
        }
        h.buckets = by_le.into_values().collect();
        seen.then_some(h)
    }

    /// The `q` quantile (0 to 1) of what was observed since `earlier` (a scrape of the same
    /// histogram before; `None`: since the process started); `None` when nothing was. A
    /// counter that went down (the process restarted) counts from zero. Inside a bucket the
    /// value is interpolated linearly from its lower bound (0 for the first); a quantile in
    /// the `+Inf` bucket is the highest finite bound.
    pub fn quantile_since(&self, earlier: Option<&Histogram>, q: f64) -> Option<f64> {
        let reset = earlier.is_some_and(|e| e.count > self.count);
        let before = |le: f64| -> f64 {
            match earlier {
                Some(e) if !reset => e
                    .buckets
                    .iter()
                    .find(|(b, _)| *b == le)
                    .map_or(0.0, |(_, c)| *c),
                _ => 0.0,
            }
        };
        let window: Vec<(f64, f64)> = self
            .buckets
            .iter()
            .map(|(le, c)| (*le, (c - before(*le)).max(0.0)))
            .collect();
        let total = window.last()?.1;
        if total <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total;
        let mut lower = 0.0;
        let mut below = 0.0;
        for (le, c) in &window {
            if *c >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                if *c <= below {
                    return Some(*le);
                }
                return Some(lower + (le - lower) * (rank - below) / (c - below));
            }
            lower = *le;
            below = *c;
        }
        Some(lower)
    }

    /// The upper bound of the bucket that holds the `q` quantile of every observation (the
    /// highest finite bound when it is in `+Inf`); `None` when nothing was observed.
    pub fn bucket_bound(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total;
        let finite = self
            .buckets
            .iter()
            .filter(|(le, _)| le.is_finite())
            .map(|(le, _)| *le)
            .reduce(f64::max);
        self.buckets
            .iter()
            .find(|(_, c)| *c >= rank)
            .and_then(|(le, _)| if le.is_finite() { Some(*le) } else { finite })
    }

    /// What was observed since `earlier` (a scrape of the same histogram before; `None`:
    /// since the process started): each bucket's count less `earlier`'s at the same bound, at
    /// least 0. A count that went down (the process restarted) counts from zero.
    pub fn since(&self, earlier: Option<&Histogram>) -> Histogram {
        let base = earlier.filter(|e| e.count <= self.count);
        let before = |le: f64| -> f64 {
            base.and_then(|e| e.buckets.iter().find(|(b, _)| *b == le))
                .map_or(0.0, |(_, c)| *c)
        };
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|(le, c)| (*le, (c - before(*le)).max(0.0)))
                .collect(),
            count: (self.count - base.map_or(0.0, |e| e.count)).max(0.0),
            sum: (self.sum - base.map_or(0.0, |e| e.sum)).max(0.0),
        }
    }

    /// Adds `other`'s observations (another process's histogram of the same metric) bucket
    /// by bucket; a bound only one of them has is kept with its own count.
    pub fn add(&mut self, other: &Histogram) {
        let mut by_le: BTreeMap<u64, (f64, f64)> = self
            .buckets
            .iter()
            .map(|(le, c)| (le.max(0.0).to_bits(), (*le, *c)))
            .collect();
        for (le, c) in &other.buckets {
            by_le.entry(le.max(0.0).to_bits()).or_insert((*le, 0.0)).1 += c;
        }
        self.buckets = by_le.into_values().collect();
        self.count += other.count;
        self.sum += other.sum;
    }

    /// The 99th percentile since `earlier` ([`Histogram::quantile_since`]).
    pub fn p99_since(&self, earlier: Option<&Histogram>) -> Option<f64> {
        self.quantile_since(earlier, 0.99)
    }
}

/// What one scrape of kube-proxy's `/metrics` says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeProxyMetrics {
    /// [`LAST_SYNC`], Unix seconds.
    pub last_sync: Option<f64>,
    /// [`PROGRAMMING`].
    pub programming: Option<Histogram>,
    /// [`SYNC_DURATION`].
    pub sync_duration: Option<Histogram>,
}

impl KubeProxyMetrics {
    /// Reads the two metrics from exposition text (other metrics are ignored).
    pub fn from_text(text: &str) -> Result<Self, MetricsError> {
        let samples = parse_exposition(text)?;
        Ok(Self {
            last_sync: samples
                .iter()
                .filter(|s| s.name == LAST_SYNC)
                .map(|s| s.value)
                .filter(|v| v.is_finite())
                .reduce(f64::max),
            programming: Histogram::from_samples(&samples, PROGRAMMING),
            sync_duration: Histogram::from_samples(&samples, SYNC_DURATION),
        })
    }
}

/// The bounds of [`component_stalled`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallBounds {
    /// kube-proxy's `--min-sync-period` (its config's `minSyncPeriod`, 1 s by default):
    /// the longest it waits before syncing a change.
    pub min_sync_period: Duration,
    /// How often the metrics are scraped: a sync is seen at most this late.
    pub audit_period: Duration,
    /// How long before ghostip received a change a sync may have carried it: kube-proxy
    /// watches the same API server and may be handed the change first.
    pub change_slack: Duration,
}

impl StallBounds {
    /// How long a change may wait for a sync before the proxy counts as stalled.
    pub fn allowed(&self) -> Duration {
        self.min_sync_period + self.audit_period
    }
}

/// The judgement of one kube-proxy.
#[derive(Clone, Debug, PartialEq)]
pub enum ProxyVerdict {
    /// No scrape with the last-sync metric yet.
    Unknown,
    /// Every Service change before the scrape is older than the last sync, or younger
    /// than the allowed wait.
    Syncing,
    /// `component-stalled`: the last sync is older than a Service change that has waited
    /// longer than allowed.
    Stalled {
        /// The last sync, as kube-proxy reported it.
        last_sync: Time,
        /// The oldest Service change after it.
        change: Time,
        /// From that change to the scrape.
        waited: Duration,
        /// [`StallBounds::allowed`].
        allowed: Duration,
    },
}

/// Whether the kube-proxy scraped at `scraped_at` (reporting `last_sync`, Unix seconds)
/// stalled: a Service change at or before the scrape, later than its last sync plus
/// `bounds.change_slack`, that waited longer than `bounds.allowed()`. `changes` are the times this node's Services changed, in
/// any order. The last sync is kube-proxy's node clock; a node clock behind by more than the
/// allowed wait reads as a stall.
pub fn component_stalled(
    scraped_at: Time,
    last_sync: Option<f64>,
    changes: &[Time],
    bounds: StallBounds,
) -> ProxyVerdict {
    let Some(last) = last_sync.filter(|s| s.is_finite()) else {
        return ProxyVerdict::Unknown;
    };
    let Ok(last_sync) = Time::from_nanosecond((last * 1e9).round() as i128) else {
        return ProxyVerdict::Unknown;
    };
    let allowed = bounds.allowed();
    let synced_up_to = last_sync
        .checked_add(bounds.change_slack)
        .unwrap_or(last_sync);
    let oldest = changes
        .iter()
        .filter(|c| **c > synced_up_to && **c <= scraped_at)
        .min();
    let Some(change) = oldest else {
        return ProxyVerdict::Syncing;
    };
    let waited = Duration::try_from(scraped_at.duration_since(*change)).unwrap_or_default();
    if waited > allowed {
        ProxyVerdict::Stalled {
            last_sync,
            change: *change,
            waited,
            allowed,
        }
    } else {
        ProxyVerdict::Syncing
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Written in the shape kube-proxy's k8s.io/component-base registry exposes (HELP and
    /// TYPE lines, `[ALPHA]` stability, `le` buckets, a gauge in exponent notation): the
    /// fixture corpus holds no metrics text to read instead.
    const KUBE_PROXY: &str = r#"# HELP kubeproxy_network_programming_duration_seconds [ALPHA] In Cluster Network Programming Latency in seconds
# TYPE kubeproxy_network_programming_duration_seconds histogram
kubeproxy_network_programming_duration_seconds_bucket{le="0.25"} 2
kubeproxy_network_programming_duration_seconds_bucket{le="0.5"} 10
kubeproxy_network_programming_duration_seconds_bucket{le="1"} 50
kubeproxy_network_programming_duration_seconds_bucket{le="2"} 90
kubeproxy_network_programming_duration_seconds_bucket{le="5"} 99
kubeproxy_network_programming_duration_seconds_bucket{le="+Inf"} 100
kubeproxy_network_programming_duration_seconds_sum 112.5
kubeproxy_network_programming_duration_seconds_count 100
# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds
# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.001"} 0
kubeproxy_sync_proxy_rules_duration_seconds_count 7
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.8000000123e+09
"#;

    fn t(s: i64) -> Time {
        Time::from_second(s).unwrap()
    }

    #[test]
    fn kube_proxy_text() {
        let m = KubeProxyMetrics::from_text(KUBE_PROXY).unwrap();
        assert_eq!(m.last_sync, Some(1_800_000_012.3));
        let h = m.programming.unwrap();
        assert_eq!(h.buckets.len(), 6);
        assert_eq!(h.buckets[5], (f64::INFINITY, 100.0));
        assert_eq!((h.count, h.sum), (100.0, 112.5));
        // Since start: rank 99 is the 99th of 100, the last one of the (2, 5] bucket.
        assert_eq!(h.p99_since(None), Some(5.0));
        // The median: rank 50 ends the (0.5, 1] bucket.
        assert_eq!(h.quantile_since(None, 0.5), Some(1.0));
        // Rank 30: 20 of the 40 in (0.5, 1].
        assert_eq!(h.quantile_since(None, 0.3), Some(0.75));
        assert_eq!(h.bucket_bound(0.99), Some(5.0));
        assert_eq!(
            h.bucket_bound(0.995),
            Some(5.0),
            "in +Inf: the highest finite bound"
        );
        assert_eq!(h.bucket_bound(0.5), Some(1.0));
        // The sync durations: 7 syncs, none under 1 ms, no other bucket written.
        let sync = m.sync_duration.unwrap();
        assert_eq!(sync.count, 7.0);
    }

    #[test]
    fn p99_over_a_window_between_two_scrapes() {
        let earlier = KubeProxyMetrics::from_text(KUBE_PROXY)
            .unwrap()
            .programming
            .unwrap();
        // 100 more observations: 98 under 0.25 s, 2 in (2, 5].
        let later_text = KUBE_PROXY
            .replace(r#"{le="0.25"} 2"#, r#"{le="0.25"} 100"#)
            .replace(r#"{le="0.5"} 10"#, r#"{le="0.5"} 108"#)
            .replace(r#"{le="1"} 50"#, r#"{le="1"} 148"#)
            .replace(r#"{le="2"} 90"#, r#"{le="2"} 188"#)
            .replace(r#"{le="5"} 99"#, r#"{le="5"} 199"#)
            .replace(r#"{le="+Inf"} 100"#, r#"{le="+Inf"} 200"#)
            .replace("_count 100", "_count 200");
        let later = KubeProxyMetrics::from_text(&later_text)
            .unwrap()
            .programming
            .unwrap();
        // In the window: rank 99 of 100 is the first of the 2 in (2, 5]: 2 + 3 × 1/2.
        assert_eq!(later.p99_since(Some(&earlier)), Some(3.5));
        // Nothing new: no quantile.
        assert_eq!(later.p99_since(Some(&later)), None);
        // A restart (the count went down) counts from zero.
        assert_eq!(earlier.p99_since(Some(&later)), Some(5.0));
        // Everything in +Inf: the highest finite bound.
        let inf = Histogram {
            buckets: vec![(1.0, 0.0), (f64::INFINITY, 3.0)],
            count: 3.0,
            sum: 30.0,
        };
        assert_eq!(inf.p99_since(None), Some(1.0));
    }

    #[test]
    fn exposition_details_and_errors() {
        let s = parse_exposition(
            "a_b:c{x=\"1\",y=\"q\\\"\\\\\\n\",} 3 1700000000000\n  \nm NaN\nn -Inf\n",
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].label("y"), Some("q\"\\\n"));
        assert_eq!(s[0].value, 3.0);
        assert!(s[1].value.is_nan());
        assert_eq!(s[2].value, f64::NEG_INFINITY);
        let e = parse_exposition("# ok\nm{x=\"1\"} 1\nm{x=1} 2\n").unwrap_err();
        assert_eq!((e.line, e.what), (3, "label value not quoted"));
        assert_eq!(
            e.to_string(),
            "line 3: label value not quoted: \"m{x=1} 2\""
        );
        for (text, what) in [
            ("m{x=\"1\" 2", "expected `,` or `}` after a label"),
            ("m{x=\"1", "unterminated label value"),
            ("m", "no value"),
            ("m one", "not a number"),
            ("m 1 two", "not a timestamp"),
            ("m 1 2 3", "text after the timestamp"),
            ("{x=\"1\"} 1", "no metric name"),
            ("m{x=\"\\t\"} 1", "bad escape in a label value"),
        ] {
            assert_eq!(parse_exposition(text).unwrap_err().what, what, "{text}");
        }
        // Without the metrics: nothing, not an error.
        let m = KubeProxyMetrics::from_text("other 1\n").unwrap();
        assert_eq!(m, KubeProxyMetrics::default());
    }

    #[test]
    fn stalled_after_min_sync_period_plus_the_audit_period() {
        let bounds = StallBounds {
            min_sync_period: Duration::from_secs(1),
            audit_period: Duration::from_secs(10),
            change_slack: Duration::ZERO,
        };
        let last = Some(1_800_000_000.0);
        // A change 5 s after the last sync, scraped 11 s after the change: just allowed.
        assert_eq!(
            component_stalled(t(1_800_000_016), last, &[t(1_800_000_005)], bounds),
            ProxyVerdict::Syncing
        );
        // 12 s after it: stalled, the oldest unsynced change named.
        assert_eq!(
            component_stalled(
                t(1_800_000_017),
                last,
                &[t(1_800_000_009), t(1_800_000_005), t(1_799_999_990)],
                bounds
            ),
            ProxyVerdict::Stalled {
                last_sync: t(1_800_000_000),
                change: t(1_800_000_005),
                waited: Duration::from_secs(12),
                allowed: Duration::from_secs(11),
            }
        );
        // No change since the last sync (an idle proxy's timestamp does not move): fine.
        assert_eq!(
            component_stalled(t(1_800_003_600), last, &[t(1_799_999_990)], bounds),
            ProxyVerdict::Syncing
        );
        // The sync advanced past the change.
        assert_eq!(
            component_stalled(
                t(1_800_000_030),
                Some(1_800_000_006.0),
                &[t(1_800_000_005)],
                bounds
            ),
            ProxyVerdict::Syncing
        );
        // A change after the scrape is not judged by it.
        assert_eq!(
            component_stalled(t(1_800_000_030), last, &[t(1_800_000_031)], bounds),
            ProxyVerdict::Syncing
        );
        assert_eq!(
            component_stalled(t(1_800_000_030), None, &[t(1_800_000_001)], bounds),
            ProxyVerdict::Unknown
        );
        // A sync up to the slack before ghostip received a change carried it: kube-proxy's
        // watch delivered it first.
        let slack = StallBounds {
            change_slack: Duration::from_secs(1),
            ..bounds
        };
        assert_eq!(
            component_stalled(t(1_800_000_030), last, &[t(1_800_000_001)], slack),
            ProxyVerdict::Syncing
        );
        assert!(matches!(
            component_stalled(t(1_800_000_030), last, &[t(1_800_000_002)], slack),
            ProxyVerdict::Stalled { .. }
        ));
    }
}
