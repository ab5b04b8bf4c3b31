//! Draws a rollout's removed IPs as one bar per IP per path over time, for a terminal.
//!
//! See [`picture`]. The time axis runs from the rollout's t0 (its first truth change, else the
//! start of the observation) to the last convergence (else the end), scaled to the width, its
//! times counted from the start of the observation like the tables':
//!
//! ```text
//! removed IPs per path, +2.0s → +17.0s  (─ served, █ served after removal, │ removed, ✕ died)
//! 10.244.3.10 10.244.1.5 cor…  ────│████████
//! 10.244.3.11 10.244.2.9 cor…  ────│██
//! truth changes                ▲   ▲
//!                              +2.0s  +17.0s
//! ```

use std::fmt::Write as _;

use ghostip_core::Time;

use super::Report;
use crate::printer::table::{abbreviate_path, middle_ellipsis, offset};

/// At most this many bars; the rest are counted.
const MAX_BARS: usize = 40;

/// The picture of `report`'s removed IPs in lines of at most `width` characters; empty when
/// nothing was removed.
pub fn picture(report: &Report, width: usize) -> String {
    let rows: Vec<_> = report.timeline.iter().filter(|t| t.removed).collect();
    if rows.is_empty() {
        return String::new();
    }
    let start = report
        .changes
        .iter()
        .map(|c| c.at)
        .min()
        .unwrap_or(report.started);
    let end = report
        .stale
        .iter()
        .filter_map(|w| w.converged_by.or(w.last_wrong))
        .max()
        .unwrap_or(report.finished)
        .max(start);
    let span_ms = (end.as_millisecond() - start.as_millisecond()).max(1);
    let descs: Vec<&str> = rows
        .iter()
        .map(|t| {
            report
                .paths
                .iter()
                .find(|p| p.id == t.path)
                .map_or(t.path.as_str(), |p| p.description.as_str())
        })
        .collect();
    let width = width.max(12);
    let longest = rows
        .iter()
        .zip(&descs)
        .map(|(t, d)| {
            format!("{} {}", t.ip, abbreviate_path(d, usize::MAX))
                .chars()
                .count()
        })
        .max()
        .unwrap_or(0);
    let label_w = longest.min((width * 2 / 5).max(4));
    // The IP whole, then as much of the path as fits (its IP first).
    let labels: Vec<String> = rows
        .iter()
        .zip(&descs)
        .map(|(t, d)| {
            let ip = t.ip.to_string();
            let room = label_w.saturating_sub(ip.chars().count() + 1);
            if room >= 8 {
                format!("{ip} {}", abbreviate_path(d, room))
            } else {
                middle_ellipsis(&format!("{ip} {d}"), label_w)
            }
        })
        .collect();
    let bar_w = width.saturating_sub(label_w + 2).max(1);
    let col = |t: Time| -> usize {
        let ms = (t.as_millisecond() - start.as_millisecond()).clamp(0, span_ms);
        let c = ms as f64 / span_ms as f64 * (bar_w - 1) as f64;
        (c.round() as usize).min(bar_w - 1)
    };
    let cell_start = |i: usize| start.as_millisecond() + span_ms * i as i64 / bar_w as i64;

    let mut out = String::new();
    let head = format!(
        "removed IPs per path, {} → {}  (─ served, █ served after removal, │ removed, ✕ died)",
        offset(Some(start), report.started),
        offset(Some(end), report.started)
    );
    for l in crate::printer::table::wrap(&head, width, 2) {
        let _ = writeln!(out, "{l}");
    }
    for (t, label) in rows.iter().zip(&labels).take(MAX_BARS) {
        let mut bar: Vec<char> = (0..bar_w)
            .map(|i| {
                let (a, b) = (cell_start(i), cell_start(i + 1));
                let served = t.segments.iter().any(|s| {
                    s.start.as_millisecond() < b.max(a + 1) && s.end.as_millisecond() >= a
                });
                let after = t.removed_at.is_some_and(|r| a >= r.as_millisecond());
                match (served, after) {
                    (true, true) => '█',
                    (true, false) => '─',
                    _ => ' ',
                }
            })
            .collect();
        if let Some(r) = t.removed_at {
            bar[col(r)] = '│';
        }
        if let Some(d) = t.died_at.filter(|d| *d >= start && *d <= end) {
            bar[col(d)] = '✕';
        }
        let bar: String = bar.into_iter().collect();
        let _ = writeln!(
            out,
            "{:<label_w$}  {}",
            middle_ellipsis(label, label_w),
            bar.trim_end()
        );
    }
    if rows.len() > MAX_BARS {
        let more = format!(
            "… {} more (all of them: -o json or --html)",
            rows.len() - MAX_BARS
        );
        let _ = writeln!(out, "{}", middle_ellipsis(&more, width));
    }
    let mut marks = vec![' '; bar_w];
    for c in &report.changes {
        if c.at >= start && c.at <= end {
            marks[col(c.at)] = '▲';
        }
    }
    let marks: String = marks.into_iter().collect();
    let _ = writeln!(
        out,
        "{:<label_w$}  {}",
        middle_ellipsis("truth changes", label_w),
        marks.trim_end()
    );
    let (a, b) = (
        offset(Some(start), report.started),
        offset(Some(end), report.started),
    );
    let gap = bar_w.saturating_sub(a.chars().count() + b.chars().count());
    let scale = if gap > 0 {
        format!("{a}{}{b}", " ".repeat(gap))
    } else {
        middle_ellipsis(&format!("{a} {b}"), bar_w)
    };
    let _ = writeln!(out, "{:<label_w$}  {scale}", "");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::net::IpAddr;

    use super::super::tests::{at, sample};
    use super::*;
    use ghostip_session::report::{ChangeRow, Segment, TimelineRow};

    fn with_timeline(ips: usize) -> Report {
        let mut r = sample(ips.min(4));
        r.changes = vec![ChangeRow {
            at: at(2.0),
            received: at(2.1),
            service: "shop/web".into(),
            added: Vec::new(),
            removed: Vec::new(),
            trigger: None,
            t0_correction: None,
        }];
        r.timeline = (0..ips)
            .map(|i| TimelineRow {
                path: r.paths[i % 2].id.clone(),
                ip: format!("10.244.3.{}", 10 + i % 200)
                    .parse::<IpAddr>()
                    .unwrap(),
                removed: true,
                removed_at: Some(at(4.0)),
                died_at: Some(at(8.0)),
                segments: vec![Segment {
                    start: at(0.0),
                    end: at(14.3),
                }],
            })
            .collect();
        r
    }

    fn longest(s: &str) -> usize {
        s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn wide_terminals_get_one_bar_per_ip_and_path() {
        let p = picture(&with_timeline(2), 120);
        assert!(longest(&p) <= 120, "{p}");
        let bars: Vec<&str> = p.lines().filter(|l| l.starts_with("10.244.3.")).collect();
        assert_eq!(bars.len(), 2, "{p}");
        for b in &bars {
            // Served before the removal, removed, served after it, died, then gone.
            let bar = b.split("  ").last().unwrap();
            let removed = bar.find('│').expect(b);
            let stale = bar.find('█').expect(b);
            let died = bar.find('✕').expect(b);
            assert!(bar.starts_with('─'), "{b}");
            assert!(removed < stale && stale < died, "{b}");
        }
        assert!(p.contains("truth changes"), "{p}");
        assert!(p.contains('▲'), "{p}");
        // Times count from the start of the observation, as in the tables.
        assert!(p.contains("+2.0s") && p.contains("+15.0s"), "{p}");
    }

    #[test]
    fn narrow_terminals_still_fit() {
        for w in [0, 5, 12] {
            let p = picture(&with_timeline(3), w);
            assert!(longest(&p) <= w.max(12), "{w}:\n{p}");
        }
        for w in [20, 30, 40, 80] {
            let p = picture(&with_timeline(3), w);
            assert!(longest(&p) <= w, "{w}:\n{p}");
            assert_eq!(
                p.lines().filter(|l| l.starts_with("10.")).count(),
                3,
                "{w}:\n{p}"
            );
        }
    }

    #[test]
    fn nothing_removed_draws_nothing() {
        assert_eq!(picture(&sample(0), 80), "");
        let mut r = with_timeline(2);
        r.timeline.iter_mut().for_each(|t| t.removed = false);
        assert_eq!(picture(&r, 80), "");
    }

    #[test]
    fn many_ips_are_capped_and_counted() {
        let p = picture(&with_timeline(100), 80);
        assert!(longest(&p) <= 80, "{p}");
        assert_eq!(
            p.lines().filter(|l| l.starts_with("10.")).count(),
            MAX_BARS,
            "{p}"
        );
        assert!(p.contains("… 60 more"), "{p}");
    }
}
