//! Reports built from the engine's trackings: one model, printed as a table, JSON or an HTML timeline.

pub mod html;
pub mod sanitize;

use std::fmt::Write as _;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use ghostip_core::{ServiceKey, Time};

pub use ghostip_session::report::*;

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
