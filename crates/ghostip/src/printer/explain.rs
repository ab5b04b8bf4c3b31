//! The table view of `ghostip explain`'s [`Explanation`]: window sentences, the error table,
//! the classes, the owners of the target IPs, with every text from a log or the cluster
//! escaped.

use std::fmt::Write as _;

use ghostip_analysis::explain::{Explanation, TargetFacts, TargetSummary};
use ghostip_logs::Report;
use serde::Serialize;

use super::sanitize::{escape_controls, escape_controls_keep_newlines};
use super::table::{Column, Layout, Table, fit_text};

/// The table output. Everything in it that came from a log or the cluster (targets, hosts,
/// Services, windows, pods, file names) has its control characters escaped: a log line
/// cannot drive the reader's terminal.
pub fn explanation_table(x: &Explanation, layout: &Layout) -> String {
    let out = table_text(x, layout);
    fit_text(&escape_controls_keep_newlines(&out), layout)
}

fn table_text(x: &Explanation, layout: &Layout) -> String {
    let mut out = String::new();
    let aimed = x
        .only_target
        .as_ref()
        .map_or(String::new(), |t| format!(" aimed at {t}"));
    if x.report.total == 0 {
        let _ = writeln!(
            out,
            "No connection failures{aimed} in {} line(s) of {} input(s).",
            x.stats.lines,
            x.inputs.len()
        );
    } else {
        if !aimed.is_empty() {
            let _ = writeln!(out, "Only failures{aimed}.\n");
        }
        for w in &x.windows {
            let _ = writeln!(out, "{}", w.sentence);
        }
        if !x.windows.is_empty() {
            out.push('\n');
        }
        // The cells escaped before the columns are laid out.
        let mut report = x.report.clone();
        let esc = |s: &mut String| {
            if let std::borrow::Cow::Owned(e) = escape_controls(s) {
                *s = e;
            }
        };
        for g in &mut report.groups {
            esc(&mut g.peer);
            g.service.iter_mut().for_each(esc);
            g.window.iter_mut().for_each(esc);
        }
        out.push_str(&report.headline());
        out.push_str("\n\n");
        let mut cells = report.table_cells().into_iter();
        let mut table = Table::new();
        table.set_columns(
            cells
                .next()
                .unwrap_or_default()
                .into_iter()
                .map(column)
                .collect(),
        );
        table.wide_only(&["FORMATS"]);
        // KINDS holds the counts per kind: at a narrow width the sum goes first.
        table.drop_to_fit(&["ERRORS"]);
        for row in cells {
            table.add_row(row);
        }
        out.push_str(&table.render(layout));
        out.push_str(&footer(&report));
    }
    let known: Vec<&TargetSummary> = x.targets.iter().filter(|t| t.known).collect();
    if !known.is_empty() {
        out.push_str("\nOwners of the target IPs:\n");
        for t in known {
            let at = t
                .owner_at_first_error
                .as_ref()
                .map_or("no pod".to_owned(), state_text);
            let now = t.owner_now.as_ref().map_or("no pod".to_owned(), state_text);
            let _ = writeln!(
                out,
                "  {}  at first error {}: {at}; now: {now}",
                t.ip,
                t.first_error
                    .map_or("-".to_owned(), |x| x.strftime("%H:%M:%S").to_string()),
            );
            if let Some(af) = &t.agent_flows {
                let _ = writeln!(out, "    {}", escape_controls(&af.sentence(t.errors)));
            }
            for h in &t.held {
                let _ = writeln!(out, "    {}", escape_controls(&h.sentence()));
            }
        }
    }
    if let Some(h) = &x.history {
        let _ = writeln!(
            out,
            "\nHistory: {} ({} distinct IP(s) looked up).",
            h.source, h.distinct_ips
        );
    }
    if x.filtered_out > 0 {
        let _ = writeln!(
            out,
            "{} failure(s) outside --since/--until left out.",
            x.filtered_out
        );
    }
    for e in &x.read_errors {
        let _ = writeln!(
            out,
            "\nIncomplete: reading {} failed; the report holds what was read before.",
            escape_controls(&e.to_string())
        );
    }
    out
}

/// The column of a header of the error table (`ghostip_logs::Report::table_cells` names them,
/// `DNS SERVER`, `SERVICE` and `WINDOW` only when a failure has one).
fn column(header: String) -> Column {
    match header.as_str() {
        "TARGET" => Column::target(header),
        "DNS SERVER" => Column::addr(header),
        "PORTS" | "CLASS" | "WINDOW" | "KINDS" | "FIRST" | "LAST" | "FORMATS" => {
            Column::wrap(header)
        }
        "ERRORS" => Column::keep(header),
        _ => Column::name(header),
    }
}

/// What follows the error table: each class with its count and meaning, then the ledger note.
fn footer(report: &Report) -> String {
    let mut out = String::new();
    if !report.by_class.is_empty() {
        out.push('\n');
        for (c, n) in &report.by_class {
            let _ = writeln!(out, "{:<20} {n:>6}  {}", c.as_str(), c.description());
        }
    }
    if let Some(note) = report.ledger_note() {
        let _ = write!(out, "\nWithout a ledger: {note}\n");
    }
    out
}

fn state_text(t: &TargetFacts) -> String {
    let mut s = format!("{} ({}", t.pod, serde_plain(&t.state));
    if let Some(since) = t.terminating_since {
        let _ = write!(s, ", deletion requested {}", since.strftime("%H:%M:%S"));
    }
    if let Some(until) = t.until {
        let _ = write!(
            s,
            ", held the IP until {}{}",
            if t.approximate { "~" } else { "" },
            until.strftime("%H:%M:%S")
        );
    }
    s.push(')');
    s
}

fn serde_plain<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use ghostip_analysis::explain::{Explainer, TimeFilter};
    use ghostip_logs::{ScanOptions, scan_bytes};

    use super::*;

    #[test]
    fn without_history_says_what_the_ledger_would_add() {
        let log = b"2024-05-01T15:42:10Z dial tcp 10.244.3.71:8080: connect: connection refused\n\
                    2024-05-01T15:50:00Z lookup web on 10.96.0.10:53: read udp 10.244.1.2:4242->10.96.0.10:53: i/o timeout\n";
        let (failures, stats) = scan_bytes(log, ScanOptions::default()).unwrap();
        let mut e = Explainer::new(
            None,
            TimeFilter {
                since: None,
                until: Some("2024-05-01T15:45:00Z".parse().unwrap()),
            },
        );
        for f in &failures {
            e.add(f);
        }
        let x = e.finish(vec!["a.log".into()], stats).unwrap();
        assert!(x.note.is_some());
        let table = explanation_table(&x, &Layout::fixed(80));
        assert!(table.contains("Without a ledger"), "{table}");
        assert!(table.contains("10.244.3.71  8080"), "{table}");
    }
}
