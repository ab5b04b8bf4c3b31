//! A self-contained SVG chart of a soak's score: faults as lanes, findings as ticks, RSS as lines.
//!
//! Time runs on x from the soak's start to its end. Above: one lane per fault, a bar from its
//! start to its end (green detected, red missed or late, grey context; an open end is drawn
//! to the soak's end and dashed), with a dot where ghostip detected it; then one lane per
//! layer and node with a tick per judged finding (red when a false positive). Below, on its
//! own axis in MiB: the RSS of each process as a line. No script, no external reference.

use std::fmt::Write as _;

use ghostip_core::Time;

use super::score::Score;

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 280.0;
const RIGHT: f64 = 70.0;
const LANE: f64 = 22.0;
const RSS_HEIGHT: f64 = 220.0;
const COLORS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
];

/// Escapes text for an XML attribute or element.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

struct Axis {
    start: i64,
    span: f64,
}

impl Axis {
    fn x(&self, t: Time) -> f64 {
        let ms = (t.as_millisecond() - self.start) as f64;
        LEFT + (ms / self.span).clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT)
    }
}

/// The chart of `score` as one SVG document.
pub fn render(score: &Score) -> String {
    let axis = Axis {
        start: score.started.as_millisecond(),
        span: ((score.soak_end.as_millisecond() - score.started.as_millisecond()) as f64).max(1.0),
    };
    let mut lanes: Vec<(String, Option<String>)> = score
        .ticks
        .iter()
        .map(|(_, l, n)| (l.clone(), n.clone()))
        .collect();
    lanes.sort();
    lanes.dedup();
    // The headline, broken after a comma to stay within the chart's width.
    let mut heading: Vec<String> = Vec::new();
    for part in score.headline.split(", ") {
        match heading.last_mut() {
            Some(line) if line.len() + part.len() <= 140 => {
                line.push_str(", ");
                line.push_str(part);
            }
            _ => heading.push(part.to_string()),
        }
    }
    let top = 32.0 + heading.len() as f64 * 18.0;
    let fault_h = score.faults.len() as f64 * LANE;
    let tick_top = top + fault_h + 10.0;
    let tick_h = lanes.len() as f64 * LANE;
    let rss_top = tick_top + tick_h + 40.0;
    let height = rss_top + RSS_HEIGHT + 70.0;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, line) in heading.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{}</text>",
            20 + i * 18,
            esc(line)
        );
    }
    // Time grid: a line every minute, or every 5 or 10 minutes on a long soak.
    let minutes = axis.span / 60_000.0;
    let step = if minutes > 120.0 {
        30
    } else if minutes > 40.0 {
        10
    } else if minutes > 10.0 {
        5
    } else {
        1
    };
    let mut m = 0;
    while f64::from(m) <= minutes {
        let x = LEFT + f64::from(m) * 60_000.0 / axis.span * (WIDTH - LEFT - RIGHT);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{m} min</text>",
            rss_top + RSS_HEIGHT,
            rss_top + RSS_HEIGHT + 16.0
        );
        m += step;
    }
    for (i, f) in score.faults.iter().enumerate() {
        let y = top + i as f64 * LANE;
        let fault = &f.fault;
        let color = match f.status.as_str() {
            "detected" | "gap recorded" => "#2ca02c",
            "missed" | "late" | "no gap recorded" => "#d62728",
            _ => "#999999",
        };
        let x1 = axis.x(fault.start);
        let x2 = axis.x(fault.end.unwrap_or(score.soak_end)).max(x1 + 2.0);
        let dash = if fault.end.is_none() {
            " stroke=\"#000\" stroke-dasharray=\"4 2\""
        } else {
            ""
        };
        let label = format!(
            "{} {}{} — {}",
            fault.id,
            fault.kind,
            fault
                .node
                .as_deref()
                .map(|n| format!(" {n}"))
                .unwrap_or_default(),
            f.status
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{x1:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"{dash}>\
             <title>{}</title></rect>",
            LEFT - 6.0,
            y + 15.0,
            esc(&label),
            y + 4.0,
            x2 - x1,
            LANE - 8.0,
            esc(&label)
        );
        if let Some(d) = &f.detection {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"black\"><title>detected after {:.1} s</title></circle>",
                axis.x(d.at),
                y + LANE / 2.0,
                d.after_secs
            );
        }
    }
    let fp_at: Vec<(Time, &str, Option<&str>)> = score
        .false_positives
        .iter()
        .map(|p| {
            (
                p.flagged_at,
                p.finding.layer.as_str(),
                p.finding.node.as_deref(),
            )
        })
        .collect();
    for (i, (layer, node)) in lanes.iter().enumerate() {
        let y = tick_top + i as f64 * LANE;
        let label = format!(
            "findings {layer} {}",
            node.as_deref().unwrap_or("(cluster)")
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#333\">{}</text>\
             <line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>",
            LEFT - 6.0,
            y + 15.0,
            esc(&label),
            y + LANE / 2.0,
            WIDTH - RIGHT,
            y + LANE / 2.0
        );
        for (t, l, n) in &score.ticks {
            if l != layer || n != node {
                continue;
            }
            let fp = fp_at
                .iter()
                .any(|(ft, fl, fnode)| ft == t && fl == l && *fnode == n.as_deref());
            let x = axis.x(*t);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2\"/>",
                y + 3.0,
                y + LANE - 3.0,
                if fp { "#d62728" } else { "#333" }
            );
        }
    }
    // RSS panel, its own axis in MiB.
    let max_rss = score
        .processes
        .iter()
        .filter_map(|p| p.rss_max)
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.1;
    let mib = max_rss / 1_048_576.0;
    let _ = writeln!(
        s,
        "<rect x=\"{LEFT}\" y=\"{rss_top:.1}\" width=\"{:.1}\" height=\"{RSS_HEIGHT}\" fill=\"none\" stroke=\"#888\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">RSS (MiB)</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{mib:.0}</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>",
        WIDTH - LEFT - RIGHT,
        LEFT - 6.0,
        rss_top + RSS_HEIGHT / 2.0,
        LEFT - 6.0,
        rss_top + 12.0,
        LEFT - 6.0,
        rss_top + RSS_HEIGHT
    );
    for (i, p) in score.processes.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<String> = p
            .rss
            .iter()
            .map(|(t, r)| {
                format!(
                    "{:.1},{:.1}",
                    axis.x(*t),
                    rss_top + RSS_HEIGHT - r / max_rss * RSS_HEIGHT
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{}</text>",
            points.join(" "),
            esc(&p.source),
            LEFT + i as f64 * 150.0,
            rss_top + RSS_HEIGHT + 40.0,
            esc(&format!(
                "{}{}",
                p.source,
                p.rss_change_pct
                    .map(|c| format!(" {c:+.1} %"))
                    .unwrap_or_default()
            ))
        );
    }
    s.push_str("</svg>\n");
    s
}
