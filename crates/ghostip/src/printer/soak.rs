//! The table of `ghostip soak-score`: the answer first, then faults, false positives, truth gaps and processes.

use std::fmt::Write as _;

use ghostip_analysis::soak::{RSS_SETTLE, RSS_TOLERANCE_PCT, Score};
use ghostip_core::Time;

use super::table::{Column, Layout, Table, fit_text, offset};

/// The score as text laid out for `layout`. Times are offsets from the soak's start (RFC 3339
/// with `-o wide`).
///
/// ```text
/// faults detected 1/1, false positives 0, flagged in 2.0 s (max), watch RSS +1.8 % after minute 5
/// soak seed 7, 2026-12-05T10:00:00Z to 2026-12-05T10:30:00Z
///
/// FAULTS
/// ID  KIND                NODE    START   END     STATUS    AFTER  EVIDENCE
/// f3  kube-proxy-stopped  node-2  +4m10s  +5m40s  detected  2.0s   agent-node-2.db iptables/node-2 10.244.1.6
/// ```
pub fn render_soak_table(score: &Score, layout: &Layout) -> String {
    let at = |t: Time| stamp(t, score.started, layout);
    let mut out = format!("{}\n", score.headline);
    let seed = score.seed.map(|s| format!(" seed {s}")).unwrap_or_default();
    match score.ended {
        Some(end) => {
            let _ = writeln!(out, "soak{seed}, {} to {end}", score.started);
        }
        None => {
            let _ = writeln!(
                out,
                "soak{seed}, {} to (interrupted; scored up to its last record, {})",
                score.started, score.soak_end
            );
        }
    }

    out.push_str("\nFAULTS\n");
    if score.faults.is_empty() {
        out.push_str("(none injected)\n");
    } else {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::keep("ID"),
            Column::keep("KIND"),
            Column::keep("NODE"),
            Column::keep("START"),
            Column::keep("END"),
            Column::keep("STATUS"),
            Column::keep("AFTER"),
            Column::keep("EXPLAINED"),
            Column::wrap("EVIDENCE"),
        ]);
        t.drop_to_fit(&["EXPLAINED", "END"]);
        for f in &score.faults {
            let fault = &f.fault;
            let evidence = f.detection.as_ref().map_or("-".to_string(), |d| {
                let mut e = format!("{} {}", d.ledger, d.path_id);
                if let Some(ip) = d.target {
                    let _ = write!(e, " {ip}");
                }
                e
            });
            t.add_row(vec![
                fault.id.clone(),
                fault.kind.clone(),
                fault.node.clone().unwrap_or_else(|| "-".into()),
                at(fault.start),
                fault.end.map_or_else(|| "open".to_string(), at),
                f.status.clone(),
                f.detection
                    .as_ref()
                    .map_or("-".into(), |d| format!("{:.1}s", d.after_secs)),
                f.explained.to_string(),
                evidence,
            ]);
        }
        out.push_str(&t.render(layout));
    }

    let _ = write!(
        out,
        "\nFALSE POSITIVES ({} of {} judged findings)\n",
        score.false_positives.len(),
        score.judged
    );
    if score.false_positives.is_empty() {
        out.push_str("(none)\n");
    } else {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::keep("LAYER"),
            Column::keep("NODE"),
            Column::addr("TARGET"),
            Column::keep("SINCE"),
            Column::keep("FLAGGED"),
            Column::keep("VERDICT"),
            Column::keep("LEDGER"),
            Column::name("SERVICE"),
            Column::path("PATH"),
            Column::wrap("REASON"),
        ]);
        t.wide_only(&["SERVICE", "PATH"]);
        t.drop_to_fit(&["FLAGGED"]);
        for p in &score.false_positives {
            let f = &p.finding;
            t.add_row(vec![
                f.layer.clone(),
                f.node.clone().unwrap_or_else(|| "-".into()),
                f.target.to_string(),
                at(f.t0),
                at(p.flagged_at),
                if layout.wide {
                    f.verdict.clone()
                } else {
                    short_verdict(&f.verdict)
                },
                f.ledger.clone(),
                f.service.clone(),
                f.path_id.clone(),
                p.reason.clone(),
            ]);
        }
        out.push_str(&t.render(layout));
    }

    if !score.lag_under_cache.is_empty() {
        let _ = write!(
            out,
            "\nOVER LAG WHILE A COREFILE CHANGE PROMISED A LONGER CACHE ({})\n",
            score.lag_under_cache.len()
        );
        let mut t = Table::new();
        t.set_columns(vec![
            Column::keep("FAULT"),
            Column::keep("CACHE"),
            Column::path("PATH"),
            Column::addr("TARGET"),
            Column::keep("SINCE"),
            Column::keep("WINDOW"),
            Column::keep("EXPECTED"),
            Column::name("LEDGER"),
        ]);
        for l in &score.lag_under_cache {
            let f = &l.finding;
            let secs = |d: Option<std::time::Duration>| {
                d.map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64()))
            };
            t.add_row(vec![
                l.fault_id.clone(),
                format!("{}s", l.cache_secs),
                f.path_id.clone(),
                f.target.to_string(),
                at(f.t0),
                secs(f.window),
                secs(f.expected_lag),
                f.ledger.clone(),
            ]);
        }
        out.push_str(&t.render(layout));
    }

    let _ = write!(out, "\nTRUTH GAPS ({})\n", score.truth_gaps.len());
    if score.truth_gaps.is_empty() {
        out.push_str("(none recorded)\n");
    } else {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::name("LEDGER"),
            Column::keep("START"),
            Column::keep("END"),
            Column::wrap("REASON"),
        ]);
        for g in &score.truth_gaps {
            t.add_row(vec![
                g.ledger.clone(),
                at(g.start),
                g.end.map_or_else(|| "open".to_string(), at),
                g.reason.clone(),
            ]);
        }
        out.push_str(&t.render(layout));
    }

    if let Some(c) = &score.component_stalled {
        let _ = write!(
            out,
            "\nCOMPONENT-STALLED (the agents' ghostip_component_stalled, {} scrapes)\n",
            c.scrapes
        );
        let mut t = Table::new();
        t.set_columns(vec![
            Column::keep("FAULT"),
            Column::keep("NODE"),
            Column::keep("STALLED-SEEN"),
            Column::keep("AFTER"),
            Column::wrap("BEFORE-DETECTION"),
        ]);
        for f in &c.faults {
            t.add_row(vec![
                f.fault_id.clone(),
                f.node.clone(),
                f.first_seen.map_or_else(|| "never".to_string(), at),
                f.after_secs.map_or("-".into(), |a| format!("{a:.1}s")),
                match f.before_detection {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => "-".into(),
                },
            ]);
        }
        for u in &c.unexplained {
            t.add_row(vec![
                "-".into(),
                u.node.clone(),
                at(u.at),
                "-".into(),
                "a healthy node read stalled".into(),
            ]);
        }
        if c.faults.is_empty() && c.unexplained.is_empty() {
            out.push_str("(no kube-proxy fault, never stalled)\n");
        } else {
            out.push_str(&t.render(layout));
        }
    }

    let _ = write!(
        out,
        "\nPROCESSES (RSS judged against its level at minute {}, within {RSS_TOLERANCE_PCT} %)\n",
        RSS_SETTLE.as_secs() / 60
    );
    if score.processes.is_empty() {
        out.push_str("(no metrics scraped)\n");
    } else {
        let mut t = Table::new();
        t.set_columns(vec![
            Column::keep("SOURCE"),
            Column::keep("SCRAPES"),
            Column::keep("RSS-LEVEL"),
            Column::keep("RSS-MAX"),
            Column::keep("RSS-CHANGE"),
            Column::keep("CPU"),
            Column::keep("CPU-MEAN"),
            Column::wrap("VERDICT"),
        ]);
        let mib = |b: Option<f64>| b.map_or("-".into(), |b| format!("{:.1}MiB", b / 1_048_576.0));
        for p in &score.processes {
            t.add_row(vec![
                p.source.clone(),
                p.scrapes.to_string(),
                mib(p.rss_level),
                mib(p.rss_max),
                p.rss_change_pct.map_or("-".into(), |c| format!("{c:+.1}%")),
                p.cpu_seconds.map_or("-".into(), |c| format!("{c:.1}s")),
                p.cpu_mean_pct.map_or("-".into(), |c| format!("{c:.1}%")),
                match p.rss_ok {
                    Some(true) => format!("RSS within {RSS_TOLERANCE_PCT} %"),
                    Some(false) => format!("RSS moved more than {RSS_TOLERANCE_PCT} %"),
                    None => format!("no RSS scrape after minute {}", RSS_SETTLE.as_secs() / 60),
                },
            ]);
        }
        out.push_str(&t.render(layout));
    }
    fit_text(&out, layout)
}

/// `over lag` for `over expected lag` (either spelling); other verdicts as stored.
fn short_verdict(v: &str) -> String {
    if v.replace('-', " ") == "over expected lag" {
        "over lag".to_string()
    } else {
        v.to_string()
    }
}

/// RFC 3339 with `-o wide`, else relative to the soak's start (`+4m10s`).
fn stamp(t: Time, started: Time, layout: &Layout) -> String {
    if layout.wide {
        t.to_string()
    } else {
        offset(Some(t), started)
    }
}
