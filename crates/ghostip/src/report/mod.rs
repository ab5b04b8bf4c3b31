//! Reports built from the engine's trackings: one model, printed as a table, JSON or an HTML timeline.

pub mod html;
pub mod sanitize;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use ghostip_core::engine::{Death, DeathSource, Discrepancy, Engine, Tracking, Verdict};
use ghostip_core::{PathIdx, PathInfo, ServiceKey, Time};
use serde::Serialize;

/// A change of the truth, as marked on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct ChangeRow {
    /// t0.
    pub at: Time,
    /// When ghostip received it.
    pub received: Time,
    /// Service.
    pub service: String,
    /// IPs that joined the DNS answer.
    pub added: Vec<IpAddr>,
    /// IPs that left it.
    pub removed: Vec<IpAddr>,
}

/// One path, with what its configuration promises and how reads went.
#[derive(Clone, Debug, Serialize)]
pub struct PathRow {
    /// Stable id.
    pub id: String,
    /// Kind.
    pub kind: String,
    /// Description.
    pub description: String,
    /// Expected lag in seconds.
    pub expected_lag_s: f64,
    /// TTL the path hands to clients, when known.
    pub client_ttl_s: Option<f64>,
    /// How the expected lag was derived.
    pub lag_notes: Vec<String>,
    /// Observations.
    pub observations: u64,
    /// Failed observations.
    pub failures: u64,
    /// Failures by reason.
    pub failures_by_reason: BTreeMap<String, u64>,
}

/// One (path, endpoint) discrepancy.
#[derive(Clone, Debug, Serialize)]
pub struct WindowRow {
    /// Path id.
    pub path: String,
    /// Path description.
    pub path_description: String,
    /// Service.
    pub service: String,
    /// stale or missing.
    pub kind: Discrepancy,
    /// The endpoint's IP (with port for datapath layers).
    pub target: String,
    /// The pod that owned the IP (from the truth or the ledger).
    pub pod: Option<String>,
    /// t0 of the change (None: found stale without seeing the change).
    pub t0: Option<Time>,
    /// t0 came from the trigger-time annotation.
    pub t0_from_annotation: bool,
    /// Last observation that was still wrong.
    pub last_wrong: Option<Time>,
    /// First observation after which the path was right.
    pub converged_by: Option<Time>,
    /// Window lower bound (s).
    pub window_lower_s: Option<f64>,
    /// Window upper bound (s).
    pub window_upper_s: Option<f64>,
    /// Expiry predicted from the TTL seen around t0.
    pub predicted_expiry: Option<Time>,
    /// Predicted window (s): predicted expiry − t0.
    pub predicted_window_s: Option<f64>,
    /// TTL seen around t0.
    pub ttl_seen: Option<u32>,
    /// Expected lag (s).
    pub expected_lag_s: f64,
    /// Verdict.
    pub verdict: Verdict,
    /// Exposure lower bound (s): part of the window after the endpoint died.
    pub exposure_lower_s: Option<f64>,
    /// Exposure upper bound (s).
    pub exposure_upper_s: Option<f64>,
    /// How the endpoint's death was established.
    pub death_source: Option<DeathSource>,
    /// How often it came back after being dropped.
    pub reappearances: u32,
}

/// One bar segment of the HTML timeline: a path held an IP from `start` to `end`.
#[derive(Clone, Debug, Serialize)]
pub struct Segment {
    /// Start.
    pub start: Time,
    /// End (the last observation that held it).
    pub end: Time,
}

/// The timeline of one IP on one path.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineRow {
    /// Path id.
    pub path: String,
    /// IP.
    pub ip: IpAddr,
    /// Whether the IP left the truth during the report.
    pub removed: bool,
    /// When it left the truth.
    pub removed_at: Option<Time>,
    /// When it died.
    pub died_at: Option<Time>,
    /// Periods the path served it.
    pub segments: Vec<Segment>,
}

/// Everything a rollout or check report shows.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What was observed (`deployment/web in demo`, or `check`).
    pub subject: String,
    /// Start of observation.
    pub started: Time,
    /// End of observation.
    pub finished: Time,
    /// Notes (rollout completed, timeouts, truth gaps).
    pub notes: Vec<String>,
    /// Truth changes.
    pub changes: Vec<ChangeRow>,
    /// Paths.
    pub paths: Vec<PathRow>,
    /// Stale windows.
    pub stale: Vec<WindowRow>,
    /// Missing windows.
    pub missing: Vec<WindowRow>,
    /// Per (path, IP) timeline.
    pub timeline: Vec<TimelineRow>,
    /// Summary.
    pub summary: Summary,
}

/// Headline figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Largest stale window (upper bound) in seconds.
    pub max_stale_window_s: f64,
    /// Largest exposure (upper bound) in seconds.
    pub max_exposure_s: f64,
    /// Windows over the expected lag.
    pub over_expected_lag: usize,
    /// Stuck or not converged at the end.
    pub stuck_or_unconverged: usize,
    /// Stale windows that exposed clients to a dead endpoint.
    pub exposed: usize,
    /// Whether the report has a finding (exit code 1).
    pub finding: bool,
}

/// Extra facts about paths the engine does not hold.
#[derive(Clone, Debug, Default)]
pub struct PathFacts {
    /// TTL the path hands to clients.
    pub client_ttl: Option<Duration>,
    /// How the expected lag was derived.
    pub notes: Vec<String>,
}

/// Builds window rows from trackings.
pub fn window_row(
    t: &Tracking,
    path: Option<&PathInfo>,
    death: Option<Death>,
    pod: Option<String>,
) -> WindowRow {
    let exposure = t.exposure(death);
    let start = t.change.map(|c| c.t0);
    WindowRow {
        path: path.map(|p| p.id.clone()).unwrap_or_default(),
        path_description: path.map(|p| p.description.clone()).unwrap_or_default(),
        service: t.service.to_string(),
        kind: t.kind,
        target: t.target.to_string(),
        pod,
        t0: start,
        t0_from_annotation: t.change.is_some_and(|c| c.from_trigger_annotation),
        last_wrong: t.last_wrong,
        converged_by: t.converged_by,
        window_lower_s: t.window_lower().map(|d| d.as_secs_f64()),
        window_upper_s: t.window_upper().map(|d| d.as_secs_f64()),
        predicted_expiry: t.predicted_expiry,
        predicted_window_s: match (t.predicted_expiry, start) {
            (Some(e), Some(s)) => Some(e.duration_since(s).as_secs_f64().max(0.0)),
            _ => None,
        },
        ttl_seen: t.ttl_seen,
        expected_lag_s: t.expected_lag.as_secs_f64(),
        verdict: t.verdict,
        exposure_lower_s: exposure.map(|x| x.lower.as_secs_f64()),
        exposure_upper_s: exposure.map(|x| x.upper.as_secs_f64()),
        death_source: exposure.map(|x| x.death.source),
        reappearances: t.reappearances,
    }
}

/// Path rows from the engine.
pub fn path_rows(engine: &Engine, facts: &BTreeMap<PathIdx, PathFacts>) -> Vec<PathRow> {
    engine
        .paths()
        .map(|(idx, info)| {
            let stats = engine.path_stats(idx).cloned().unwrap_or_default();
            let f = facts.get(&idx).cloned().unwrap_or_default();
            PathRow {
                id: info.id.clone(),
                kind: info.kind.to_string(),
                description: info.description.clone(),
                expected_lag_s: engine.expected_lag(idx).unwrap_or_default().as_secs_f64(),
                client_ttl_s: f.client_ttl.map(|d| d.as_secs_f64()),
                lag_notes: f.notes,
                observations: stats.observations,
                failures: stats.failures,
                failures_by_reason: stats.failures_by_reason,
            }
        })
        .collect()
}

/// Computes the summary and the finding flag.
pub fn summarize(stale: &[WindowRow], missing: &[WindowRow]) -> Summary {
    let mut s = Summary::default();
    for r in stale.iter().chain(missing) {
        if r.verdict == Verdict::OverExpectedLag {
            s.over_expected_lag += 1;
        }
        if matches!(r.verdict, Verdict::Stuck | Verdict::Pending) {
            s.stuck_or_unconverged += 1;
        }
    }
    for r in stale {
        s.max_stale_window_s = s.max_stale_window_s.max(r.window_upper_s.unwrap_or(0.0));
        s.max_exposure_s = s.max_exposure_s.max(r.exposure_upper_s.unwrap_or(0.0));
        // Exposed only when a path was seen serving the endpoint after it died (lower bound).
        if r.exposure_lower_s.unwrap_or(0.0) > 0.0 {
            s.exposed += 1;
        }
    }
    s.finding = s.over_expected_lag > 0 || s.stuck_or_unconverged > 0 || s.exposed > 0;
    s
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |s| format!("{s:.2}s"))
}

fn clock(t: Option<Time>) -> String {
    t.map_or_else(
        || "-".to_string(),
        |t| t.strftime("%H:%M:%S%.3f").to_string(),
    )
}

/// Renders the report as text tables.
pub fn render_table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} → {}",
        r.subject,
        r.started.strftime("%F %T"),
        r.finished.strftime("%T")
    );
    for n in &r.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    let mut paths = Table::new();
    paths.load_style(UTF8_FULL_CONDENSED).set_header(vec![
        "PATH",
        "EXPECTED LAG",
        "CLIENT TTL",
        "QUERIES",
        "FAILURES",
    ]);
    for p in &r.paths {
        let failures = if p.failures == 0 {
            "0".to_string()
        } else {
            let by: Vec<String> = p
                .failures_by_reason
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect();
            format!("{} ({})", p.failures, by.join(", "))
        };
        paths.add_row(vec![
            p.description.clone(),
            format!("{:.0}s", p.expected_lag_s),
            p.client_ttl_s.map_or("-".into(), |t| format!("{t:.0}s")),
            p.observations.to_string(),
            failures,
        ]);
    }
    let _ = writeln!(out, "\nDNS paths\n{paths}");
    if r.stale.is_empty() {
        let _ = writeln!(out, "\nNo path served a removed endpoint.");
    } else {
        let mut t = Table::new();
        t.load_style(UTF8_FULL_CONDENSED).set_header(vec![
            "PATH",
            "REMOVED IP",
            "FORMER POD",
            "LEFT AT",
            "LAST SEEN",
            "WINDOW",
            "TTL@t0→",
            "EXPECTED",
            "VERDICT",
            "EXPOSURE",
        ]);
        for w in &r.stale {
            t.add_row(vec![
                w.path_description.clone(),
                w.target.clone(),
                w.pod.clone().unwrap_or_else(|| "-".into()),
                clock(w.t0),
                clock(w.last_wrong),
                match (w.window_lower_s, w.window_upper_s) {
                    (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}s"),
                    (Some(lo), None) => format!("≥{lo:.2}s (open)"),
                    _ => "-".into(),
                },
                secs(w.predicted_window_s),
                format!("{:.0}s", w.expected_lag_s),
                w.verdict.label().to_string(),
                match (w.exposure_lower_s, w.exposure_upper_s) {
                    (Some(lo), Some(hi)) if hi > 0.0 => format!("{lo:.1}–{hi:.1}s"),
                    (Some(_), Some(_)) => "0s".into(),
                    _ => "unknown".into(),
                },
            ]);
        }
        let _ = writeln!(out, "\nRemoved endpoints still served (stale windows)\n{t}");
    }
    if !r.missing.is_empty() {
        let mut t = Table::new();
        t.load_style(UTF8_FULL_CONDENSED).set_header(vec![
            "PATH",
            "ADDED IP",
            "POD",
            "ADDED AT",
            "SERVED FROM",
            "WINDOW",
            "VERDICT",
        ]);
        for w in &r.missing {
            t.add_row(vec![
                w.path_description.clone(),
                w.target.clone(),
                w.pod.clone().unwrap_or_else(|| "-".into()),
                clock(w.t0),
                clock(w.converged_by),
                secs(w.window_upper_s),
                w.verdict.label().to_string(),
            ]);
        }
        let _ = writeln!(
            out,
            "\nAdded endpoints not yet served (missing windows)\n{t}"
        );
    }
    let s = &r.summary;
    let _ = writeln!(
        out,
        "\nSummary: largest stale window {:.2}s, largest exposure {:.2}s; {} over expected lag, {} stuck or unconverged, {} exposed clients to a dead endpoint.",
        s.max_stale_window_s,
        s.max_exposure_s,
        s.over_expected_lag,
        s.stuck_or_unconverged,
        s.exposed
    );
    if s.exposed > 0 && s.over_expected_lag == 0 {
        let _ = writeln!(
            out,
            "Every path did what its configuration says, but clients were sent to endpoints that no longer accepted connections: add a preStop delay longer than the expected lag, or lower the cache/TTL."
        );
    }
    out
}

/// Keys a set of services for display.
pub fn service_list(services: &[ServiceKey]) -> String {
    services
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
