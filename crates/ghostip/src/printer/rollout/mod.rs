//! `ghostip rollout`'s report (the model of `ghostip_session::report`) printed as tables, a
//! timeline picture ([`picture`]) or an HTML timeline ([`html`]).

pub mod html;
pub mod picture;

use std::fmt::Write as _;

use ghostip_core::engine::Verdict;
use ghostip_core::{ServiceKey, Time};

use super::table::{Column, Layout, Table, fit_text, offset};

use ghostip_session::report::*;

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

/// A window's verdict as one short word, worst first in [`rank`]: `stuck`, `over-lag`,
/// `pending` (not converged when the report ended), `exposed` (within the expected lag, but
/// a path served the endpoint after it stopped accepting connections), `unjudged`, `ok`.
pub fn verdict_word(w: &WindowRow) -> &'static str {
    match w.verdict {
        Verdict::Stuck => "stuck",
        Verdict::OverExpectedLag => "over-lag",
        Verdict::Pending => "pending",
        Verdict::Unjudged(_) => "unjudged",
        Verdict::WithinExpectedLag if w.exposure_lower_s.unwrap_or(0.0) > 0.0 => "exposed",
        Verdict::WithinExpectedLag => "ok",
    }
}

/// How bad a [`verdict_word`] is (higher is worse).
fn rank(word: &str) -> u8 {
    match word {
        "stuck" => 5,
        "over-lag" => 4,
        "pending" => 3,
        "exposed" => 2,
        "unjudged" => 1,
        _ => 0,
    }
}

/// One endpoint that changed, over every path that had a window for it.
#[derive(Debug)]
struct EndpointRow<'a> {
    ip: String,
    pod: Option<&'a str>,
    paths: usize,
    /// Smallest lower bound and largest upper bound over the paths; `None` upper: still open.
    window: (Option<f64>, Option<f64>),
    /// Largest lower and upper bounds of the exposure over the paths.
    exposure: (Option<f64>, Option<f64>),
    word: &'static str,
}

/// The windows grouped per endpoint (the IP; an SRV target's `ip:port` counts as its IP), in
/// the order of their IPs.
fn endpoints(windows: &[WindowRow]) -> Vec<EndpointRow<'_>> {
    let mut by_ip: std::collections::BTreeMap<(Option<std::net::IpAddr>, String), Vec<&WindowRow>> =
        std::collections::BTreeMap::new();
    for w in windows {
        let ip = w.target.parse::<std::net::IpAddr>().ok().or_else(|| {
            w.target
                .parse::<std::net::SocketAddr>()
                .ok()
                .map(|a| a.ip())
        });
        let shown = ip.map_or_else(|| w.target.clone(), |ip| ip.to_string());
        by_ip.entry((ip, shown)).or_default().push(w);
    }
    by_ip
        .into_iter()
        .map(|((_, ip), ws)| {
            let paths: std::collections::BTreeSet<&str> =
                ws.iter().map(|w| w.path.as_str()).collect();
            let lower = ws.iter().filter_map(|w| w.window_lower_s).reduce(f64::min);
            let upper = if ws.iter().any(|w| w.window_upper_s.is_none()) {
                None
            } else {
                ws.iter().filter_map(|w| w.window_upper_s).reduce(f64::max)
            };
            let exposure = (
                ws.iter()
                    .filter_map(|w| w.exposure_lower_s)
                    .reduce(f64::max),
                ws.iter()
                    .filter_map(|w| w.exposure_upper_s)
                    .reduce(f64::max),
            );
            let word = ws
                .iter()
                .map(|w| verdict_word(w))
                .max_by_key(|w| rank(w))
                .unwrap_or("ok");
            EndpointRow {
                ip,
                pod: ws.iter().find_map(|w| w.pod.as_deref()),
                paths: paths.len(),
                window: (lower, upper),
                exposure,
                word,
            }
        })
        .collect()
}

/// One row per endpoint: its IP, pod, share of the paths, window and verdict, and for removed
/// endpoints (`exposure`) how long clients could still reach it.
fn endpoint_table(rows: &[EndpointRow<'_>], n_paths: usize, exposure: bool) -> Table {
    let mut t = Table::new();
    let mut columns = vec![
        Column::keep("IP"),
        Column::name("POD"),
        Column::name("PATHS"),
        Column::wrap("WINDOW"),
    ];
    if exposure {
        columns.push(Column::wrap("EXPOSURE"));
    }
    columns.push(Column::wrap("VERDICT"));
    t.set_columns(columns);
    for e in rows {
        let mut row = vec![
            e.ip.clone(),
            e.pod.unwrap_or("-").to_string(),
            format!("{}/{n_paths}", e.paths),
            range(e.window),
        ];
        if exposure {
            row.push(match e.exposure {
                (Some(lo), Some(hi)) if hi > 0.0 && (hi - lo).abs() >= 0.05 => {
                    format!("{lo:.1}–{hi:.1}s")
                }
                (_, Some(hi)) if hi > 0.0 => format!("{hi:.1}s"),
                (_, Some(_)) => "0s".into(),
                _ => "unknown".into(),
            });
        }
        row.push(e.word.to_string());
        t.add_row(row);
    }
    t
}

fn range(window: (Option<f64>, Option<f64>)) -> String {
    match window {
        (Some(lo), Some(hi)) if (hi - lo).abs() < 0.005 => format!("{hi:.2}s"),
        (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}s"),
        (Some(lo), None) => format!("≥{lo:.2}s (open)"),
        (None, Some(hi)) => format!("≤{hi:.2}s"),
        (None, None) => "-".into(),
    }
}

/// "1.2 s" or "1.2–3.4 s" (seconds to one decimal).
fn span(lo: f64, hi: f64) -> String {
    if (hi - lo).abs() < 0.05 {
        format!("{hi:.1} s")
    } else {
        format!("{lo:.1}–{hi:.1} s")
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The answer first: one paragraph that says what the rollout did to the paths.
pub fn verdict(r: &Report) -> String {
    let stale = endpoints(&r.stale);
    let missing = endpoints(&r.missing);
    let n_paths = r.paths.len();
    let mut removed: std::collections::BTreeSet<String> = r
        .changes
        .iter()
        .flat_map(|c| c.removed.iter().map(ToString::to_string))
        .collect();
    removed.extend(stale.iter().map(|e| e.ip.clone()));
    let mut out = String::new();
    let noun = |rows: &[EndpointRow<'_>], n: usize, what: &str| {
        let kind = if rows.iter().all(|e| e.pod.is_some()) {
            "pod"
        } else {
            "endpoint"
        };
        if rows.len() == n {
            plural(n, &format!("{what} {kind}"), &format!("{what} {kind}s"))
        } else {
            format!(
                "{} of {}",
                rows.len(),
                plural(n, &format!("{what} {kind}"), &format!("{what} {kind}s"))
            )
        }
    };
    let paths_phrase = |rows: &[EndpointRow<'_>]| {
        let most = rows.iter().map(|e| e.paths).max().unwrap_or(0);
        if rows.iter().all(|e| e.paths == n_paths) && n_paths > 1 {
            format!("all {n_paths} paths")
        } else if n_paths <= 1 {
            "the path".to_string()
        } else {
            format!("up to {most} of {n_paths} paths")
        }
    };
    if stale.is_empty() {
        if removed.is_empty() {
            out.push_str("No endpoint was removed while observed");
        } else {
            out.push_str(&format!(
                "No path served the {} after it left the endpoints",
                plural(removed.len(), "removed endpoint", "removed endpoints")
            ));
        }
    } else {
        let lo = stale
            .iter()
            .filter_map(|e| e.window.0)
            .reduce(f64::min)
            .unwrap_or(0.0);
        let open = stale.iter().any(|e| e.window.1.is_none());
        let hi = stale
            .iter()
            .filter_map(|e| e.window.1.or(e.window.0))
            .reduce(f64::max)
            .unwrap_or(lo);
        out.push_str(&format!(
            "{} stayed in {} for {}",
            noun(&stale, removed.len().max(stale.len()), "removed"),
            paths_phrase(&stale),
            if open {
                format!("at least {lo:.1} s, still open at the end")
            } else {
                span(lo, hi)
            }
        ));
        let lag = r
            .stale
            .iter()
            .map(|w| w.expected_lag_s)
            .reduce(f64::max)
            .unwrap_or(0.0);
        let count = |word: &str| stale.iter().filter(|e| e.word == word).count();
        let (over, stuck, pending) = (count("over-lag"), count("stuck"), count("pending"));
        if over + stuck + pending == 0 {
            out.push_str(&format!(", within the expected lag of {lag:.0} s"));
        } else {
            let mut bad = Vec::new();
            if over > 0 {
                bad.push(format!("{over} over the expected lag of {lag:.0} s"));
            }
            if stuck > 0 {
                bad.push(format!("{stuck} stuck"));
            }
            if pending > 0 {
                bad.push(format!("{pending} not converged when observation ended"));
            }
            out.push_str(&format!(": {}", bad.join(", ")));
        }
        let exposed: Vec<f64> = stale
            .iter()
            .filter(|e| rank(e.word) >= rank("exposed"))
            .filter_map(|e| e.exposure.1)
            .filter(|x| *x > 0.0)
            .collect();
        if let Some(x) = exposed.iter().copied().reduce(f64::max) {
            out.push_str(&format!(
                "; clients were sent to {} that no longer accepted connections for up to {x:.1} s",
                plural(exposed.len(), "endpoint", "endpoints")
            ));
        }
    }
    out.push('.');
    if !missing.is_empty() {
        let hi = missing
            .iter()
            .filter_map(|e| e.window.1.or(e.window.0))
            .reduce(f64::max)
            .unwrap_or(0.0);
        let added: std::collections::BTreeSet<String> = r
            .changes
            .iter()
            .flat_map(|c| c.added.iter().map(ToString::to_string))
            .chain(missing.iter().map(|e| e.ip.clone()))
            .collect();
        let late = missing
            .iter()
            .filter(|e| rank(e.word) >= rank("pending"))
            .count();
        out.push_str(&format!(
            " {} {} missing from {} for up to {hi:.1} s{}.",
            noun(&missing, added.len(), "added"),
            if missing.len() == 1 { "was" } else { "were" },
            paths_phrase(&missing),
            if late > 0 {
                format!(" ({late} later than expected or never)")
            } else {
                ", within the expected lag".to_string()
            }
        ));
    }
    let s = &r.summary;
    if s.exposed > 0 && s.over_expected_lag == 0 {
        out.push_str(
            " Every path did what its configuration says, but clients were sent to endpoints that no longer accepted connections: add a preStop delay longer than the expected lag, or lower the cache/TTL.",
        );
    }
    out
}

/// Renders the report for `layout`: the verdict paragraph, one row per endpoint that changed,
/// and with `-o wide` the paths and every window per path.
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
    let _ = writeln!(out, "\n{}", verdict(r));
    if !r.notes.is_empty() {
        out.push('\n');
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let n_paths = r.paths.len();
    let stale = endpoints(&r.stale);
    if !stale.is_empty() {
        let t = endpoint_table(&stale, n_paths, true);
        let _ = write!(out, "\nRemoved endpoints\n{}", t.render(layout));
    }
    let missing = endpoints(&r.missing);
    if !missing.is_empty() {
        let t = endpoint_table(&missing, n_paths, false);
        let _ = write!(out, "\nAdded endpoints served late\n{}", t.render(layout));
    }
    if !layout.wide {
        let _ = writeln!(
            out,
            "\n(-o wide: every path and window; times as seconds since {})",
            r.started.strftime("%T%.3f")
        );
        return fit_text(&out, layout);
    }
    let mut paths = Table::new();
    paths.set_columns(vec![
        Column::path("PATH"),
        Column::keep("EXPECTED LAG"),
        Column::keep("CLIENT TTL"),
        Column::keep("QUERIES"),
        Column::wrap("FAILURES"),
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
    let _ = writeln!(out, "\nPaths\n{}", paths.render(layout));
    if !r.stale.is_empty() {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::path("PATH"),
            Column::keep("IP"),
            Column::name("POD"),
            Column::keep("LEFT AT"),
            Column::keep("LAST SEEN"),
            Column::wrap("WINDOW"),
            Column::keep("PREDICTED"),
            Column::keep("EXPECTED"),
            Column::wrap("VERDICT"),
            Column::wrap("EXPOSURE"),
        ]);
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
                verdict_word(w).to_string(),
                match (w.exposure_lower_s, w.exposure_upper_s) {
                    (Some(lo), Some(hi)) if hi > 0.0 => format!("{lo:.1}–{hi:.1}s"),
                    (Some(_), Some(_)) => "0s".into(),
                    _ => "unknown".into(),
                },
            ]);
        }
        let _ = writeln!(
            out,
            "\nRemoved endpoints, per path (stale windows)\n{}",
            t.render(layout)
        );
    }
    if !r.missing.is_empty() {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::path("PATH"),
            Column::keep("IP"),
            Column::name("POD"),
            Column::keep("ADDED AT"),
            Column::keep("SERVED FROM"),
            Column::wrap("WINDOW"),
            Column::wrap("VERDICT"),
        ]);
        for w in &r.missing {
            t.add_row(vec![
                w.path_description.clone(),
                w.target.clone(),
                w.pod.clone().unwrap_or_else(|| "-".into()),
                left_at(w),
                clock(w.converged_by),
                secs(w.window_upper_s),
                verdict_word(w).to_string(),
            ]);
        }
        let _ = writeln!(
            out,
            "\nAdded endpoints, per path (missing windows)\n{}",
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
    fn the_answer_leads_and_each_endpoint_is_one_row_at_80_columns() {
        let out = render_table(&sample(4), &Layout::fixed(80));
        assert!(longest(&out) <= 80, "{out}");
        let verdict_at = out
            .find("4 removed pods stayed in up to 1 of 2 paths")
            .unwrap();
        assert!(verdict_at < out.find("Removed endpoints").unwrap(), "{out}");
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("12.3–13.0 s, within the expected lag of 35 s."),
            "{out}"
        );
        assert!(
            flat.contains("1 added pod was missing from up to 1 of 2 paths for up to 13.0 s, within the expected lag."),
            "{out}"
        );
        // One row per endpoint, none per path.
        for i in 10..14 {
            assert_eq!(out.matches(&format!("10.244.3.{i}")).count(), 1, "{out}");
        }
        assert!(!out.contains("coredns-"), "{out}");
        assert!(
            !out.contains("LEFT AT") && !out.contains("LAST SEEN"),
            "{out}"
        );
        assert!(out.contains("1/2"), "{out}");
    }

    #[test]
    fn an_endpoint_row_spans_its_paths_and_takes_the_worst_word() {
        let mut r = sample(2);
        // Both endpoints on both paths; the second path of the first one over its lag.
        let mut extra = r.stale.clone();
        for (w, path) in extra.iter_mut().zip(["10.244.2.9", "10.244.1.5"]) {
            w.path = format!("dns-pod/{path}:53");
            w.window_lower_s = Some(40.0);
            w.window_upper_s = Some(41.0);
        }
        extra[0].verdict = Verdict::OverExpectedLag;
        extra[1].exposure_lower_s = Some(0.5);
        r.stale.extend(extra);
        r.summary = summarize(&r.stale, &r.missing);
        let out = render_table(&r, &Layout::fixed(100));
        let row = |ip: &str| out.lines().find(|l| l.starts_with(ip)).unwrap().to_string();
        let first = row("10.244.3.10");
        assert!(
            first.contains("2/2") && first.contains("12.30–41.00s") && first.ends_with("over-lag"),
            "{out}"
        );
        assert!(row("10.244.3.11").ends_with("exposed"), "{out}");
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("2 removed pods stayed in all 2 paths for 12.3–41.0 s: 1 over the expected lag of 35 s"), "{out}");
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
