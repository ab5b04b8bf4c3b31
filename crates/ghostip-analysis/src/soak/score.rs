//! Matching ghostip's findings and gaps against the faults of the ground truth, and the process metrics' verdict.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::Time;
use serde::Serialize;

use super::model::{Fault, GroundTruth, MetricSample, SoakFinding, SoakGap, is_judged};

/// RSS is judged against its level this long after the soak started (start-up allocations,
/// caches filling).
pub const RSS_SETTLE: Duration = Duration::from_secs(5 * 60);
/// How far RSS may move from its level after [`RSS_SETTLE`], in percent, before the verdict
/// says it grew.
pub const RSS_TOLERANCE_PCT: f64 = 5.0;

/// Everything the scorer reads, parsed.
#[derive(Clone, Debug)]
pub struct ScoreInput {
    /// `ground-truth.json`.
    pub truth: GroundTruth,
    /// Every finding of every ledger.
    pub findings: Vec<SoakFinding>,
    /// Every truth gap of every ledger.
    pub gaps: Vec<SoakGap>,
    /// Every scrape of every process.
    pub samples: Vec<MetricSample>,
    /// The `component-stalled:` lines of the agents' logs: the exact time each node was
    /// called stalled (the scrapes only bracket it).
    pub stalled_logged: Vec<StalledSample>,
}

/// The first finding (or, for an API server fault, the first gap) that caught a fault.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Detection {
    /// When ghostip flagged it (see [`SoakFinding::flagged_at`]) or opened the gap.
    pub at: Time,
    /// Seconds from `stale_from` (or `start`) to `at`, at least 0.
    pub after_secs: f64,
    /// The ledger file.
    pub ledger: String,
    /// The path (or `truth-gap`).
    pub path_id: String,
    /// The target IP, for a finding.
    pub target: Option<IpAddr>,
}

/// One fault's score.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultScore {
    /// The fault as the ground truth gives it.
    #[serde(flatten)]
    pub fault: Fault,
    /// Whether it counts in `faults detected`: detectable and of a known kind.
    pub scored: bool,
    /// `detected`, `late` (flagged only after the fault ended: counted as missed), `missed`,
    /// `gap recorded`, `no gap recorded` (API server faults not scored) or `context`.
    pub status: String,
    /// The first detection, if any.
    pub detection: Option<Detection>,
    /// Judged findings this fault explains (not false positives).
    pub explained: usize,
}

/// A judged finding no fault explains.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FalsePositive {
    /// The finding, with the ledger it came from.
    pub finding: SoakFinding,
    /// When ghostip flagged it.
    pub flagged_at: Time,
    /// Why it is false.
    pub reason: String,
}

/// A DNS window judged over its lag while a `corefile-changed` fault promised a longer cache:
/// listed apart, not a false positive (ghostip's expected lag had not followed the Corefile).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LagUnderCache {
    /// The `corefile-changed` fault.
    pub fault_id: String,
    /// Its `cache` seconds.
    pub cache_secs: u64,
    /// The finding.
    pub finding: SoakFinding,
}

/// RSS and CPU of one process over the soak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessScore {
    /// `watch` or `agent-node-N`.
    pub source: String,
    /// Scrapes read.
    pub scrapes: usize,
    /// RSS bytes over time.
    pub rss: Vec<(Time, f64)>,
    /// RSS at the first scrape at or after minute 5 of the soak (of the process's life, for
    /// a process restarted during the soak: the life with the largest move).
    pub rss_level: Option<f64>,
    /// The largest move from that level afterwards within the same life, signed, percent.
    pub rss_change_pct: Option<f64>,
    /// The largest RSS seen.
    pub rss_max: Option<f64>,
    /// CPU seconds used between the first and the last scrape, across restarts.
    pub cpu_seconds: Option<f64>,
    /// Mean CPU between the first and the last scrape, percent of one core.
    pub cpu_mean_pct: Option<f64>,
    /// Whether RSS stayed within [`RSS_TOLERANCE_PCT`] of its level (`None`: no scrape after
    /// minute 5 with RSS).
    pub rss_ok: Option<bool>,
}

/// How long after an API server outage a DNS or datapath window may start late and still be
/// the outage's: CoreDNS's and kube-proxy's informers come back with client-go's reflector
/// backoff (800 ms doubling to 30 s, jitter 1.0: up to 60 s) and then relist.
pub const APISERVER_AFTERMATH: Duration = Duration::from_secs(90);

fn aftermath() -> jiff::SignedDuration {
    jiff::SignedDuration::try_from(APISERVER_AFTERMATH).unwrap_or_default()
}

/// How long after a kube-proxy fault ended a node may still read `component-stalled`: a
/// scrape period (15 s) and kube-proxy's restart and first sync.
pub const STALLED_SLACK: Duration = Duration::from_secs(30);

/// What the agents' `component-stalled` said over the soak: their log lines, and their scraped
/// `ghostip_component_stalled` gauges.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentStalled {
    /// Agent scrapes that carried the gauge.
    pub scrapes: usize,
    /// Per kube-proxy fault on a node (`kube-proxy-stopped`, `datapath-frozen`).
    pub faults: Vec<StalledFault>,
    /// Log lines and scrapes that called a node stalled outside every kube-proxy fault on it
    /// (and [`STALLED_SLACK`] after): a healthy node called stalled.
    pub unexplained: Vec<StalledSample>,
}

/// `component-stalled` during one kube-proxy fault.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StalledFault {
    /// The fault.
    pub fault_id: String,
    /// Its node.
    pub node: String,
    /// The first time within the fault the node was called stalled: its agent's log line,
    /// else the first scrape that read the gauge at 1.
    pub first_seen: Option<Time>,
    /// Seconds from the fault's `stale_from` (else start) to that scrape, at least 0.
    pub after_secs: Option<f64>,
    /// Whether that came no later than the fault's detection (the first stale backend
    /// flagged); `None` without both. From a scrape alone it is late by up to a scrape
    /// period (15 s).
    pub before_detection: Option<bool>,
}

/// One time a node was called stalled: a scrape, or a line of its agent's log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StalledSample {
    /// `agent-<node>` (a scrape) or `agent-<node>.log` (a log line).
    pub source: String,
    /// The node.
    pub node: String,
    /// The scrape's time.
    pub at: Time,
}

/// The whole score.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Score {
    /// The answer in one line.
    pub headline: String,
    /// Exit 0: every scored fault detected, no false positive.
    pub clean: bool,
    /// Seed of the schedule.
    pub seed: Option<u64>,
    /// Start of the soak.
    pub started: Time,
    /// End of the soak as written (`None`: interrupted).
    pub ended: Option<Time>,
    /// The end used: `ended`, else the last record read.
    pub soak_end: Time,
    /// Scored faults detected.
    pub detected: usize,
    /// Scored faults.
    pub scored: usize,
    /// The longest time to detection of a detected fault, seconds.
    pub max_detection_secs: Option<f64>,
    /// Per fault.
    pub faults: Vec<FaultScore>,
    /// Judged findings no fault explains.
    pub false_positives: Vec<FalsePositive>,
    /// Over-lag DNS windows under a longer `corefile-changed` cache.
    pub lag_under_cache: Vec<LagUnderCache>,
    /// Findings read in all (judged or not).
    pub findings: usize,
    /// Judged findings (over expected lag or stuck).
    pub judged: usize,
    /// Truth gaps the ledgers recorded.
    pub truth_gaps: Vec<SoakGap>,
    /// Per process.
    pub processes: Vec<ProcessScore>,
    /// The agents' `component-stalled` against the kube-proxy faults (`None`: no scrape
    /// carried the gauge).
    pub component_stalled: Option<ComponentStalled>,
    /// Every judged finding, for the chart: (flagged at, layer, node).
    pub ticks: Vec<(Time, String, Option<String>)>,
}

fn secs_between(from: Time, to: Time) -> f64 {
    (to.as_millisecond() - from.as_millisecond()) as f64 / 1000.0
}

/// The layer a fault shows in: its `layer`, else the one its kind implies (`None`: any).
fn fault_layer(f: &Fault) -> Option<&str> {
    if let Some(l) = f.layer.as_deref() {
        return Some(l);
    }
    match f.kind.as_str() {
        "kube-proxy-stopped" | "datapath-frozen" => Some("datapath"),
        "coredns-replaced" | "corefile-changed" => Some("dns"),
        _ => None,
    }
}

/// How `fault` explains finding `f`, if it does: same layer and node where the fault names
/// them, and the finding's stale interval meets the fault's window. A stale (or stuck) finding
/// must also aim at one of the fault's `stale_ips`, when it names some: only such a finding
/// detects the fault. A `missing` finding (the layer lacks an endpoint that joined) is
/// explained without a target: a frozen layer misses what joins as it keeps what left.
fn explains(fault: &Fault, f: &SoakFinding, soak_end: Time) -> Option<Explains> {
    if fault_layer(fault).is_some_and(|l| l != f.layer) {
        return None;
    }
    if fault
        .node
        .as_deref()
        .is_some_and(|n| f.node.as_deref() != Some(n))
    {
        return None;
    }
    if !(f.t0 <= fault.end_or(soak_end) && f.until(soak_end) >= fault.start) {
        return None;
    }
    if f.kind == "missing" {
        return Some(Explains::Missing);
    }
    if !fault.stale_ips.is_empty()
        && !fault
            .stale_ips
            .iter()
            .any(|ip| ip.to_canonical() == f.target.to_canonical())
    {
        return None;
    }
    Some(Explains::Detects)
}

/// How a fault explains a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Explains {
    /// A stale (or stuck) finding on what the fault made a layer keep: a detection.
    Detects,
    /// A `missing` finding of the frozen layer: explained, not a detection.
    Missing,
}

fn within(t: Time, start: Time, end: Time) -> bool {
    start <= t && t <= end
}

/// The end of an interrupted soak: the last time any record names.
fn last_record(input: &ScoreInput, started: Time) -> Time {
    let mut end = started;
    for f in &input.findings {
        end = end.max(f.flagged_at()).max(f.converged_by.unwrap_or(f.t0));
    }
    for g in &input.gaps {
        end = end.max(g.end.unwrap_or(g.start));
    }
    for s in &input.samples {
        end = end.max(s.at);
    }
    end
}

/// Scores a soak.
pub fn score(input: &ScoreInput) -> Score {
    let truth = &input.truth;
    let soak_end = truth
        .ended
        .unwrap_or_else(|| last_record(input, truth.started));
    let mut faults: Vec<FaultScore> = truth
        .faults
        .iter()
        .map(|f| FaultScore {
            fault: f.clone(),
            scored: f.scored(),
            status: String::new(),
            detection: None,
            explained: 0,
        })
        .collect();
    let mut false_positives = Vec::new();
    let mut lag_under_cache = Vec::new();
    let mut ticks = Vec::new();
    let mut judged = 0;
    let mut sorted: Vec<&SoakFinding> = input.findings.iter().collect();
    sorted.sort_by_key(|f| (f.flagged_at(), f.t0));
    for f in sorted {
        if !is_judged(&f.verdict) {
            continue;
        }
        judged += 1;
        let flagged = f.flagged_at();
        ticks.push((flagged, f.layer.clone(), f.node.clone()));
        let gap = truth.faults.iter().find(|g| {
            g.is_truth_gap()
                && (within(flagged, g.start, g.end_or(soak_end))
                    || within(f.t0, g.start, g.end_or(soak_end)))
        });
        if let Some(g) = gap {
            false_positives.push(FalsePositive {
                finding: f.clone(),
                flagged_at: flagged,
                reason: format!(
                    "judged during {} ({}): a truth gap must be a gap",
                    g.id, g.kind
                ),
            });
            continue;
        }
        let under_cache = truth.faults.iter().find_map(|c| {
            let cache = c.cache?;
            let promise = Duration::from_secs(cache);
            (c.kind == "corefile-changed"
                && f.layer == "dns"
                && within(f.t0, c.start, c.end_or(soak_end))
                && f.expected_lag.is_none_or(|l| l < promise)
                && f.window.is_none_or(|w| w <= promise))
            .then(|| (c.id.clone(), cache))
        });
        if let Some((fault_id, cache_secs)) = under_cache {
            lag_under_cache.push(LagUnderCache {
                fault_id,
                cache_secs,
                finding: f.clone(),
            });
            continue;
        }
        let mut explained = false;
        for fs in faults.iter_mut() {
            let fault = &fs.fault;
            if !fault.known() || fault.is_truth_gap() {
                continue;
            }
            let Some(how) = explains(fault, f, soak_end) else {
                continue;
            };
            explained = true;
            fs.explained += 1;
            if how == Explains::Detects && fs.detection.is_none() {
                fs.detection = Some(Detection {
                    at: flagged,
                    after_secs: secs_between(fault.visible_from(), flagged).max(0.0),
                    ledger: f.ledger.clone(),
                    path_id: f.path_id.clone(),
                    target: Some(f.target),
                });
            }
        }
        if !explained
            && let Some(i) = faults.iter().position(|fs| {
                let g = &fs.fault;
                g.is_truth_gap()
                    && matches!(f.layer.as_str(), "dns" | "datapath")
                    && g.end.is_some_and(|end| {
                        f.t0 > end && f.t0 <= end.checked_add(aftermath()).unwrap_or(end)
                    })
            })
        {
            // The components' own watches come back after the outage with client-go's
            // backoff: a change right after it reaches them late.
            faults[i].explained += 1;
            explained = true;
        }
        if !explained {
            let rollout = truth
                .rollouts
                .iter()
                .filter(|r| r.removed_ips.contains(&f.target) && r.at <= flagged)
                .max_by_key(|r| r.at);
            let reason = match rollout {
                Some(r) => format!(
                    "no fault explains it (removed by rollout {} at {})",
                    r.deployment, r.at
                ),
                None => "no fault explains it".to_string(),
            };
            false_positives.push(FalsePositive {
                finding: f.clone(),
                flagged_at: flagged,
                reason,
            });
        }
    }
    for fs in faults.iter_mut() {
        let end = fs.fault.end_or(soak_end);
        if fs.fault.is_truth_gap() {
            let gap = input
                .gaps
                .iter()
                .filter(|g| g.start <= end && g.end.unwrap_or(soak_end) >= fs.fault.start)
                .min_by_key(|g| g.start);
            fs.detection = gap.map(|g| Detection {
                at: g.start,
                after_secs: secs_between(fs.fault.start, g.start).max(0.0),
                ledger: g.ledger.clone(),
                path_id: "truth-gap".to_string(),
                target: None,
            });
        }
        fs.status = match (&fs.detection, fs.fault.is_truth_gap(), fs.scored) {
            (Some(_), true, false) => "gap recorded",
            (None, true, false) => "no gap recorded",
            (_, _, false) => "context",
            (Some(d), _, true) if d.at > end => "late",
            (Some(_), _, true) => "detected",
            (None, _, true) => "missed",
        }
        .to_string();
    }
    let scored = faults.iter().filter(|f| f.scored).count();
    let detected_faults: Vec<&FaultScore> =
        faults.iter().filter(|f| f.status == "detected").collect();
    let detected = detected_faults.len();
    let max_detection_secs = detected_faults
        .iter()
        .filter_map(|f| f.detection.as_ref().map(|d| d.after_secs))
        .reduce(f64::max);
    let processes = processes(&input.samples, truth.started);
    let component_stalled = component_stalled(
        &input.samples,
        &input.stalled_logged,
        &faults,
        truth.started,
        soak_end,
    );
    let clean = detected == scored
        && false_positives.is_empty()
        && component_stalled
            .as_ref()
            .is_none_or(|c| c.unexplained.is_empty());
    let headline = headline(
        detected,
        scored,
        false_positives.len(),
        max_detection_secs,
        &processes,
        lag_under_cache.len(),
        component_stalled.as_ref(),
    );
    Score {
        headline,
        clean,
        seed: truth.seed,
        started: truth.started,
        ended: truth.ended,
        soak_end,
        detected,
        scored,
        max_detection_secs,
        faults,
        false_positives,
        lag_under_cache,
        findings: input.findings.len(),
        judged,
        truth_gaps: input.gaps.clone(),
        processes,
        component_stalled,
        ticks,
    }
}

/// Whether a fault stops kube-proxy on its node.
fn stops_kube_proxy(f: &Fault) -> bool {
    matches!(f.kind.as_str(), "kube-proxy-stopped" | "datapath-frozen") && f.node.is_some()
}

fn component_stalled(
    samples: &[MetricSample],
    logged: &[StalledSample],
    faults: &[FaultScore],
    started: Time,
    soak_end: Time,
) -> Option<ComponentStalled> {
    let slack = jiff::SignedDuration::try_from(STALLED_SLACK).unwrap_or_default();
    let window = |f: &Fault| {
        let end = f.end_or(soak_end);
        (f.start, end.checked_add(slack).unwrap_or(end))
    };
    let mut scrapes = 0;
    let mut stalled: Vec<StalledSample> = Vec::new();
    for s in samples {
        let (Some(flag), Some(node)) = (s.component_stalled, s.source.strip_prefix("agent-"))
        else {
            continue;
        };
        scrapes += 1;
        if flag {
            stalled.push(StalledSample {
                source: s.source.clone(),
                node: node.to_string(),
                at: s.at,
            });
        }
    }
    if scrapes == 0 && logged.is_empty() {
        return None;
    }
    // An agent's log goes back to its start, before the soak's: only the soak's own time.
    stalled.extend(
        logged
            .iter()
            .filter(|s| within(s.at, started, soak_end))
            .cloned(),
    );
    stalled.sort_by_key(|s| s.at);
    let kube_proxy: Vec<&FaultScore> = faults
        .iter()
        .filter(|f| stops_kube_proxy(&f.fault))
        .collect();
    let per_fault = kube_proxy
        .iter()
        .map(|fs| {
            let f = &fs.fault;
            let node = f.node.clone().unwrap_or_default();
            let (from, to) = window(f);
            let first_seen = stalled
                .iter()
                .find(|s| s.node == node && within(s.at, from, to))
                .map(|s| s.at);
            StalledFault {
                fault_id: f.id.clone(),
                node,
                first_seen,
                after_secs: first_seen.map(|t| secs_between(f.visible_from(), t).max(0.0)),
                before_detection: first_seen
                    .zip(fs.detection.as_ref())
                    .map(|(t, d)| t <= d.at),
            }
        })
        .collect();
    let unexplained = stalled
        .into_iter()
        .filter(|s| {
            !kube_proxy.iter().any(|fs| {
                let (from, to) = window(&fs.fault);
                fs.fault.node.as_deref() == Some(s.node.as_str()) && within(s.at, from, to)
            })
        })
        .collect();
    Some(ComponentStalled {
        scrapes,
        faults: per_fault,
        unexplained,
    })
}

fn headline(
    detected: usize,
    scored: usize,
    fps: usize,
    max_detection: Option<f64>,
    processes: &[ProcessScore],
    under_cache: usize,
    stalled: Option<&ComponentStalled>,
) -> String {
    let mut parts = vec![
        format!("faults detected {detected}/{scored}"),
        format!("false positives {fps}"),
    ];
    if let Some(s) = max_detection {
        parts.push(format!("flagged in {s:.1} s (max)"));
    }
    // The process whose RSS moved most after minute 5 (the first one on a tie).
    let judged: Vec<(&str, f64)> = processes
        .iter()
        .filter_map(|p| p.rss_change_pct.map(|c| (p.source.as_str(), c)))
        .collect();
    if let Some((source, pct)) = judged
        .iter()
        .copied()
        .reduce(|a, b| if b.1.abs() > a.1.abs() { b } else { a })
    {
        let of = if judged.len() > 1 {
            format!(" (worst of {})", judged.len())
        } else {
            String::new()
        };
        parts.push(format!(
            "{source} RSS {pct:+.1} % after minute {}{of}",
            RSS_SETTLE.as_secs() / 60
        ));
    }
    if under_cache > 0 {
        parts.push(format!(
            "{under_cache} over-lag DNS windows under a longer cache"
        ));
    }
    if let Some(c) = stalled {
        let seen = c.faults.iter().filter(|f| f.first_seen.is_some()).count();
        parts.push(format!(
            "component-stalled in {seen}/{} kube-proxy faults, {} on a healthy node",
            c.faults.len(),
            c.unexplained.len()
        ));
    }
    parts.join(", ")
}

/// One process's scrapes, split into its lives: a CPU counter that goes back is a restart
/// (an agent killed and started again by its kubelet), and a life's memory is judged from
/// its own minute 5, not from its predecessor's.
fn lives<'a>(v: &[&'a MetricSample]) -> Vec<Vec<&'a MetricSample>> {
    let mut out: Vec<Vec<&MetricSample>> = Vec::new();
    let mut last_cpu: Option<f64> = None;
    for s in v {
        let restarted = matches!((last_cpu, s.cpu_seconds), (Some(a), Some(b)) if b < a);
        if restarted || out.is_empty() {
            out.push(Vec::new());
        }
        if let Some(c) = s.cpu_seconds {
            last_cpu = Some(c);
        }
        if let Some(life) = out.last_mut() {
            life.push(s);
        }
    }
    out
}

fn processes(samples: &[MetricSample], started: Time) -> Vec<ProcessScore> {
    let mut by_source: BTreeMap<&str, Vec<&MetricSample>> = BTreeMap::new();
    for s in samples {
        by_source.entry(s.source.as_str()).or_default().push(s);
    }
    let settle_after = |from: Time| {
        jiff::SignedDuration::try_from(RSS_SETTLE)
            .ok()
            .and_then(|d| from.checked_add(d).ok())
            .unwrap_or(from)
    };
    by_source
        .into_iter()
        .map(|(source, mut v)| {
            v.sort_by_key(|s| s.at);
            let rss: Vec<(Time, f64)> = v
                .iter()
                .filter_map(|s| s.rss_bytes.map(|r| (s.at, r)))
                .collect();
            // Per life: its level at its own minute 5 (the soak's for the first life) and
            // the largest move from it; the process's is the life with the largest move.
            let mut level = None;
            let mut change: Option<f64> = None;
            let mut cpu_used = 0.0;
            let mut cpu_span: Option<(Time, Time)> = None;
            for (i, life) in lives(&v).iter().enumerate() {
                let born = if i == 0 {
                    started
                } else {
                    life.first().map_or(started, |s| s.at)
                };
                let settle = settle_after(born);
                let settled: Vec<f64> = life
                    .iter()
                    .filter(|s| s.at >= settle)
                    .filter_map(|s| s.rss_bytes)
                    .collect();
                if let Some(&base) = settled.iter().find(|r| **r > 0.0) {
                    let moved = settled
                        .iter()
                        .map(|r| (r - base) / base * 100.0)
                        .reduce(|a, b| if b.abs() > a.abs() { b } else { a });
                    if let Some(m) = moved
                        && change.is_none_or(|c| m.abs() > c.abs())
                    {
                        change = Some(m);
                        level = Some(base);
                    }
                }
                let cpu: Vec<(Time, f64)> = life
                    .iter()
                    .filter_map(|s| s.cpu_seconds.map(|c| (s.at, c)))
                    .collect();
                if let (Some(a), Some(b)) = (cpu.first(), cpu.last()) {
                    // A life that starts after a restart used its first reading's seconds
                    // since it started.
                    cpu_used += (b.1 - if i == 0 { a.1 } else { 0.0 }).max(0.0);
                    cpu_span = Some(cpu_span.map_or((a.0, b.0), |(from, _)| (from, b.0)));
                }
            }
            let (cpu_seconds, cpu_mean_pct) = match cpu_span {
                Some((a, b)) if b > a => {
                    (Some(cpu_used), Some(cpu_used / secs_between(a, b) * 100.0))
                }
                _ => (None, None),
            };
            ProcessScore {
                source: source.to_string(),
                scrapes: v.len(),
                rss_max: rss.iter().map(|(_, r)| *r).reduce(f64::max),
                rss,
                rss_level: level,
                rss_change_pct: change,
                cpu_seconds,
                cpu_mean_pct,
                rss_ok: change.map(|c| c.abs() <= RSS_TOLERANCE_PCT),
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
