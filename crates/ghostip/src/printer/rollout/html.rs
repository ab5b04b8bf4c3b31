//! A self-contained HTML timeline of a report: one bar per IP per path, truth changes marked.

use std::fmt::Write as _;

use super::{Report, TimelineRow};
use ghostip_core::Time;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn secs_between(a: Time, b: Time) -> f64 {
    b.duration_since(a).as_secs_f64()
}

/// Renders the page. Everything (styles, SVG) is inline; no network access is needed to view it.
pub fn render(r: &Report) -> String {
    let total = secs_between(r.started, r.finished).max(1.0);
    let label_w = 330.0;
    let plot_w = 900.0;
    let row_h = 18.0;
    let x = |t: Time| label_w + (secs_between(r.started, t).clamp(0.0, total) / total) * plot_w;

    let mut rows: Vec<&TimelineRow> = r.timeline.iter().collect();
    rows.sort_by(|a, b| {
        (a.path.as_str(), !a.removed, a.ip).cmp(&(b.path.as_str(), !b.removed, b.ip))
    });
    let height = 60.0 + row_h * rows.len() as f64 + 40.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="monospace" font-size="11">"#,
        w = label_w + plot_w + 20.0
    );
    // Time axis every 5 s (or coarser for long reports).
    let step = [1.0, 5.0, 10.0, 30.0, 60.0, 300.0]
        .into_iter()
        .find(|s| total / s <= 20.0)
        .unwrap_or(600.0);
    let mut s = 0.0;
    while s <= total {
        let px = label_w + s / total * plot_w;
        let _ = write!(
            svg,
            r##"<line x1="{px}" y1="40" x2="{px}" y2="{y2}" stroke="#eee"/><text class="axis" x="{px}" y="34" text-anchor="middle" fill="#666">+{s:.0}s</text>"##,
            y2 = height - 30.0
        );
        s += step;
    }
    // Truth changes.
    for c in &r.changes {
        let px = x(c.at);
        let title = format!(
            "{} at {}: +{} −{}",
            c.service,
            c.at.strftime("%T%.3f"),
            c.added
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            c.removed
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let _ = write!(
            svg,
            r##"<line class="change" x1="{px}" y1="40" x2="{px}" y2="{y2}" stroke="#222" stroke-dasharray="3,3"><title>{t}</title></line>"##,
            y2 = height - 30.0,
            t = esc(&title)
        );
    }
    let mut y = 50.0;
    let mut last_path = "";
    for row in rows {
        if row.path != last_path {
            let _ = write!(
                svg,
                r##"<line x1="0" y1="{y}" x2="{w}" y2="{y}" stroke="#bbb"/>"##,
                w = label_w + plot_w
            );
            last_path = &row.path;
        }
        let label = format!("{}  {}", row.path, row.ip);
        // One group per (path, IP): what a reader (or a test in a browser) counts as a row.
        let _ = write!(
            svg,
            r##"<g class="row" data-path="{p}" data-ip="{ip}" data-removed="{removed}">"##,
            p = esc(&row.path),
            ip = row.ip,
            removed = row.removed
        );
        let _ = write!(
            svg,
            r##"<text x="4" y="{ty}" fill="{c}">{l}</text>"##,
            ty = y + 13.0,
            c = if row.removed { "#b00" } else { "#333" },
            l = esc(&label)
        );
        for seg in &row.segments {
            // Split each segment at removal and death so colours tell the story.
            let mut cuts = vec![(seg.start, "#4a7bd0", "served while in the truth")];
            if let Some(rm) = row.removed_at.filter(|t| *t > seg.start && *t < seg.end) {
                cuts.push((rm, "#f0a030", "served after it left the truth (stale)"));
            } else if row.removed_at.is_some_and(|t| t <= seg.start) {
                cuts[0] = (
                    seg.start,
                    "#f0a030",
                    "served after it left the truth (stale)",
                );
            }
            if let Some(d) = row.died_at {
                if d > seg.start && d < seg.end {
                    cuts.push((d, "#d03030", "served after the endpoint died (exposure)"));
                } else if d <= seg.start {
                    cuts.retain(|c| c.0 > seg.start);
                    cuts.insert(
                        0,
                        (
                            seg.start,
                            "#d03030",
                            "served after the endpoint died (exposure)",
                        ),
                    );
                }
            }
            cuts.sort_by_key(|c| c.0);
            for (i, (from, colour, what)) in cuts.iter().enumerate() {
                let to = cuts.get(i + 1).map_or(seg.end, |n| n.0);
                let (x1, x2) = (x(*from), x(to).max(x(*from) + 1.5));
                let _ = write!(
                    svg,
                    r##"<rect x="{x1:.1}" y="{ry}" width="{w:.1}" height="12" fill="{colour}"><title>{t}</title></rect>"##,
                    ry = y + 3.0,
                    w = x2 - x1,
                    t = esc(&format!(
                        "{} {}: {} from {} to {}",
                        row.path,
                        row.ip,
                        what,
                        from.strftime("%T%.3f"),
                        to.strftime("%T%.3f")
                    ))
                );
            }
        }
        svg.push_str("</g>");
        y += row_h;
    }
    svg.push_str("</svg>");

    let mut rows_html = String::new();
    for w in &r.stale {
        let _ = write!(
            rows_html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}s</td><td class=\"{}\">{}</td><td>{}</td></tr>",
            esc(&w.path_description),
            esc(&w.target),
            esc(w.pod.as_deref().unwrap_or("-")),
            w.t0.map_or("-".into(), |t| t.strftime("%T%.3f").to_string()),
            match (w.window_lower_s, w.window_upper_s) {
                (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}s"),
                (Some(lo), None) => format!("≥{lo:.2}s"),
                _ => "-".into(),
            },
            w.expected_lag_s,
            if w.verdict.is_finding() { "bad" } else { "ok" },
            esc(w.verdict.label()),
            match w.exposure_upper_s {
                Some(x) if x > 0.0 => format!("<span class=\"bad\">{x:.1}s</span>"),
                Some(_) => "0s".into(),
                None => "unknown".into(),
            }
        );
    }
    let notes: String = r
        .notes
        .iter()
        .map(|n| format!("<li>{}</li>", esc(n)))
        .collect();
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ghostip: {subject}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; }}
.bad {{ color: #b00; font-weight: bold; }} .ok {{ color: #070; }}
.legend span {{ display: inline-block; width: 14px; height: 10px; margin: 0 4px 0 14px; }}
</style></head><body>
<h1>{subject}</h1>
<p>{start} → {end} (UTC). Largest stale window <b>{maxw:.2}s</b>, largest exposure <b>{maxx:.2}s</b>.</p>
<ul>{notes}</ul>
<p class="legend"><span style="background:#4a7bd0"></span>served while in the truth<span style="background:#f0a030"></span>served after it left the truth<span style="background:#d03030"></span>served after the endpoint stopped accepting connections<span style="border-left:2px dashed #222;width:0"></span>truth change</p>
{svg}
<h2>Stale windows</h2>
<table><tr><th>path</th><th>removed IP</th><th>former pod</th><th>left at</th><th>window</th><th>expected lag</th><th>verdict</th><th>exposure</th></tr>{rows_html}</table>
</body></html>
"#,
        subject = esc(&r.subject),
        start = r.started.strftime("%F %T"),
        end = r.finished.strftime("%T"),
        maxw = r.summary.max_stale_window_s,
        maxx = r.summary.max_exposure_s,
    )
}
