//! Reports built from the engine's trackings: one model, printed as a table, JSON or an HTML timeline.

pub mod html;
pub mod picture;
pub mod sanitize;

use std::fmt::Write as _;

use ghostip_core::{ServiceKey, Time};

use crate::printer::{Layout, Table, fit_text, offset};

pub use ghostip_session::report::*;

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |s| format!("{s:.2}s"))
}

/// A time of day with `-o wide`, else relative to the report's start (`+12.3s`).
fn clock(t: Option<Time>, started: Time, layout: &Layout) -> String {
    if !layout.wide {
        return offset(t, started);
    }
    t.map_or_else(
        || "-".to_string(),
        |t| t.strftime("%H:%M:%S%.3f").to_string(),
    )
}

/// Renders the report as text tables laid out for `layout`.
pub fn render_table(r: &Report, layout: &Layout) -> String {
    let clock = |t: Option<Time>| clock(t, r.started, layout);
    // t0 of a window, marked `*` when it is the receive time that replaced an implausible
    // trigger time.
    let left_at = |w: &WindowRow| {
        let at = clock(w.t0);
        if w.t0_correction.is_some() {
            format!("{at}*")
        } else {
            at
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} → {}",
        r.subject,
        r.started.strftime("%F %T"),
        r.finished.strftime("%T")
    );
    if !layout.wide {
        let _ = writeln!(
            out,
            "  times: seconds since {}",
            r.started.strftime("%T%.3f")
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    let mut paths = Table::new();
    paths.set_header(vec![
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
    let _ = writeln!(out, "\nDNS paths\n{}", paths.render(layout));
    if r.stale.is_empty() {
        let _ = writeln!(out, "\nNo path served a removed endpoint.");
    } else {
        let mut t = Table::new();
        t.set_header(vec![
            "PATH",
            "IP",
            "POD",
            "LEFT AT",
            "LAST SEEN",
            "WINDOW",
            "PREDICTED",
            "EXPECTED",
            "VERDICT",
            "EXPOSURE",
        ]);
        t.wide_only(&["LEFT AT", "LAST SEEN", "PREDICTED", "EXPECTED"]);
        for w in &r.stale {
            t.add_row(vec![
                w.path_description.clone(),
                w.target.clone(),
                w.pod.clone().unwrap_or_else(|| "-".into()),
                left_at(w),
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
        let _ = writeln!(
            out,
            "\nRemoved endpoints still served (stale windows)\n{}",
            t.render(layout)
        );
    }
    if !r.missing.is_empty() {
        let mut t = Table::new();
        t.set_header(vec![
            "PATH",
            "IP",
            "POD",
            "ADDED AT",
            "SERVED FROM",
            "WINDOW",
            "VERDICT",
        ]);
        t.wide_only(&["ADDED AT"]);
        for w in &r.missing {
            t.add_row(vec![
                w.path_description.clone(),
                w.target.clone(),
                w.pod.clone().unwrap_or_else(|| "-".into()),
                left_at(w),
                clock(w.converged_by),
                secs(w.window_upper_s),
                w.verdict.label().to_string(),
            ]);
        }
        let _ = writeln!(
            out,
            "\nAdded endpoints not yet served (missing windows)\n{}",
            t.render(layout)
        );
    }
    let corrected: std::collections::BTreeSet<&str> = r
        .stale
        .iter()
        .chain(&r.missing)
        .filter_map(|w| w.t0_correction.as_deref())
        .collect();
    for c in corrected {
        let _ = writeln!(
            out,
            "* t0 is when ghostip received the change: {c}; the window is measured from what ghostip observed."
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
    fit_text(&out, layout)
}

/// Keys a set of services for display.
pub fn service_list(services: &[ServiceKey]) -> String {
    services
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use ghostip_core::engine::{Discrepancy, Verdict};

    use super::*;

    pub(crate) fn at(s: f64) -> Time {
        Time::from_millisecond(1_700_000_000_000 + (s * 1000.0) as i64).unwrap()
    }

    fn window(ip: &str, pod: &str, path: &str, kind: Discrepancy) -> WindowRow {
        WindowRow {
            path: format!("dns-pod/{path}:53"),
            path_description: format!("dns via {path} (kube-system/coredns-7db6d8ff4d-krb2q)"),
            service: "shop/web".into(),
            kind,
            target: ip.into(),
            pod: Some(pod.into()),
            t0: Some(at(2.0)),
            t0_from_annotation: false,
            t0_received: Some(at(2.0)),
            t0_trigger: None,
            t0_correction: None,
            last_wrong: Some(at(14.3)),
            converged_by: Some(at(15.0)),
            window_lower_s: Some(12.3),
            window_upper_s: Some(13.0),
            predicted_expiry: Some(at(32.0)),
            predicted_window_s: Some(30.0),
            ttl_seen: Some(30),
            expected_lag_s: 35.0,
            verdict: Verdict::WithinExpectedLag,
            exposure_lower_s: Some(0.0),
            exposure_upper_s: Some(1.5),
            death_source: None,
            reappearances: 0,
        }
    }

    /// A rollout of many pods seen through two paths.
    pub(crate) fn sample(stale: usize) -> Report {
        let paths = ["10.244.1.5", "10.244.2.9"];
        let stale: Vec<WindowRow> = (0..stale)
            .map(|i| {
                window(
                    &format!("10.244.3.{}", 10 + i),
                    &format!("shop/web-6c9f8d7b5-{i:05}"),
                    paths[i % 2],
                    Discrepancy::Stale,
                )
            })
            .collect();
        let missing = vec![window(
            "10.244.3.99",
            "shop/web-6c9f8d7b5-zzzzz",
            paths[0],
            Discrepancy::Missing,
        )];
        Report {
            subject: "deployment/web in shop".into(),
            started: at(0.0),
            finished: at(40.0),
            notes: vec![
                "rollout completed; every path converged before the end of the observation".into(),
            ],
            changes: Vec::new(),
            paths: paths
                .iter()
                .map(|p| PathRow {
                    id: format!("dns-pod/{p}:53"),
                    kind: "dns-pod".into(),
                    description: format!("dns via {p} (kube-system/coredns-7db6d8ff4d-krb2q)"),
                    expected_lag_s: 35.0,
                    client_ttl_s: Some(30.0),
                    lag_notes: Vec::new(),
                    observations: 120,
                    failures: 2,
                    failures_by_reason: [("timeout".to_string(), 2)].into_iter().collect(),
                })
                .collect(),
            summary: summarize(&stale, &missing),
            stale,
            missing,
            timeline: Vec::new(),
        }
    }

    fn longest(s: &str) -> usize {
        s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn the_tables_fit_80_columns_with_times_since_the_start() {
        let out = render_table(&sample(4), &Layout::fixed(80));
        assert!(longest(&out) <= 80, "{out}");
        assert!(out.contains("10.244.3.13"), "{out}");
        assert!(out.contains("+15.0s"), "{out}");
        assert!(out.contains("10.244.1.5 coredns-"), "{out}");
        assert!(
            !out.contains("LEFT AT") && !out.contains("LAST SEEN"),
            "{out}"
        );
    }

    #[test]
    fn narrow_terminals_get_lists_and_wide_the_full_columns() {
        let out = render_table(&sample(2), &Layout::fixed(30));
        assert!(longest(&out) <= 30, "{out}");
        assert!(out.contains("ip: 10.244.3.10"), "{out}");
        let out = render_table(&sample(2), &Layout::WIDE);
        assert!(
            out.contains("dns via 10.244.1.5 (kube-system/coredns-7db6d8ff4d-krb2q)"),
            "{out}"
        );
        assert!(
            out.contains("LEFT AT") && out.contains("PREDICTED"),
            "{out}"
        );
        assert!(
            out.contains(&at(14.3).strftime("%H:%M:%S%.3f").to_string()),
            "{out}"
        );
    }
}
