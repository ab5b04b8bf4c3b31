//! Human (table) and machine (JSON) renderings of a [`Whois`] answer.

use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::Time;

use ghostip_analysis::ownership::{EndReason, Ownership, Whois};

use super::table::{Column, Layout, Table, fit_text, offset};

/// The `whois` answer as a table laid out for `layout`: one row each for the owner before, at
/// and after `at`.
///
/// ```text
/// IP 10.244.1.7 at 2026-01-02T15:04:05Z
/// WHEN    POD              UID       NODE    OWNER                 FROM                  UNTIL                 NOTES
/// before  default/web-abc  1b2c3d4e  node-1  ReplicaSet/web-7c9    2026-01-02T14:00:00Z  2026-01-02T15:00:00Z  pod gone; ended 4m5s before
/// ```
pub fn render_whois_table(whois: &Whois, ip: IpAddr, at: Time, layout: &Layout) -> String {
    let mut table = Table::new();
    table.set_columns(vec![
        Column::keep("WHEN"),
        Column::name("POD"),
        Column::keep("UID"),
        Column::name("NODE"),
        Column::name("OWNER"),
        Column::keep("FROM"),
        Column::keep("UNTIL"),
        Column::wrap("NOTES"),
    ]);
    table.wide_only(&["UID"]);
    table.add_row(row(whois, "before", whois.before.as_ref(), at, layout));
    table.add_row(row(whois, "at", whois.at_time.as_ref(), at, layout));
    table.add_row(row(whois, "after", whois.after.as_ref(), at, layout));
    let mut out = format!("IP {} at {}\n", ip.to_canonical(), fmt_time(at));
    out.push_str(&table.render(layout));
    // No owner known (an agent's ledger holds only its node's pods): the slices' word.
    if whois.before.is_none() && whois.at_time.is_none() && whois.after.is_none() {
        for x in &whois.left_endpoints {
            let pod = x.pod.as_ref().map_or_else(
                || "a pod the slice did not name".to_string(),
                |p| p.to_string(),
            );
            out.push_str(&format!(
                "left the endpoints of {} {} ({pod}, as its slice named it)\n",
                x.service,
                fmt_time(x.at)
            ));
        }
    }
    fit_text(&out, layout)
}

/// The `whois` answer as JSON: `{"ip", "at", "at_time", "before", "after", "left_endpoints"}`,
/// times in RFC 3339. `left_endpoints` says when the IP stopped being a ready endpoint of
/// each Service while these pods owned it.
pub fn whois_json(whois: &Whois, ip: IpAddr, at: Time) -> serde_json::Value {
    serde_json::json!({
        "ip": ip.to_canonical(),
        "at": at,
        "at_time": whois.at_time,
        "before": whois.before,
        "after": whois.after,
        "left_endpoints": whois.left_endpoints,
    })
}

/// FROM and UNTIL: RFC 3339 with `-o wide`, else relative to `at` (`-5m35s`).
fn stamp(t: Time, at: Time, layout: &Layout) -> String {
    if layout.wide {
        fmt_time(t)
    } else {
        offset(Some(t), at)
    }
}

fn row(whois: &Whois, when: &str, o: Option<&Ownership>, at: Time, layout: &Layout) -> Vec<String> {
    let Some(o) = o else {
        let what = if when == "at" {
            "(no known owner)"
        } else {
            "-"
        };
        return vec![when.to_string(), what.to_string()];
    };
    let owner = match (&o.owner_kind, &o.owner_name) {
        (Some(k), Some(n)) => format!("{k}/{n}"),
        (None, Some(n)) => n.clone(),
        _ => "-".to_string(),
    };
    let until = match o.closed {
        Some(c) if o.approximate => format!("~{}", stamp(c, at, layout)),
        Some(c) => stamp(c, at, layout),
        None => "(open)".to_string(),
    };
    vec![
        when.to_string(),
        o.pod.to_string(),
        o.pod.uid.chars().take(8).collect(),
        o.node.clone().unwrap_or_else(|| "-".into()),
        owner,
        stamp(o.start, at, layout),
        until,
        notes(whois, when, o, at),
    ]
}

fn notes(whois: &Whois, when: &str, o: &Ownership, at: Time) -> String {
    let mut notes = Vec::new();
    // The deletionTimestamp is the request plus the grace period: the request is when the
    // pod started terminating.
    if let Some(deadline) = o.terminating {
        let grace = jiff::SignedDuration::from_secs(o.grace_period_seconds.unwrap_or(0).max(0));
        let requested = deadline.checked_sub(grace).unwrap_or(deadline).max(o.start);
        notes.push(format!("terminating from {}", fmt_time(requested)));
    }
    for x in whois.exits_of(o) {
        notes.push(format!(
            "left the endpoints of {} {}",
            x.service,
            fmt_time(x.at)
        ));
    }
    match o.end_reason {
        Some(EndReason::Gone) => notes.push("pod gone".to_string()),
        Some(EndReason::IpChanged) => notes.push("pod's IP changed".to_string()),
        Some(EndReason::Reused) => notes.push("IP taken by the next pod".to_string()),
        Some(EndReason::Relist) => notes.push("missing at relist, end approximate".to_string()),
        None => {}
    }
    if let (Some(g), Some(c)) = (o.gone, o.closed)
        && g > c
    {
        notes.push(format!("pod gone {}", fmt_time(g)));
    }
    match when {
        "before" => {
            if let Some(c) = o.closed {
                notes.push(format!("ended {} before", fmt_duration(since(c, at))));
            }
        }
        "at" => notes.push(format!("owner for {}", fmt_duration(since(o.start, at)))),
        _ => notes.push(format!(
            "started {} after",
            fmt_duration(since(at, o.start))
        )),
    }
    notes.join("; ")
}

fn since(from: Time, to: Time) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// RFC 3339, to the millisecond.
fn fmt_time(t: Time) -> String {
    t.round(jiff::Unit::Millisecond).unwrap_or(t).to_string()
}

/// `350ms`, `4.2s`, `5m3s`, `2h0m5s`, `3d4h`.
fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 86_400 {
        format!("{}d{}h", s / 86_400, s % 86_400 / 3_600)
    } else if s >= 3_600 {
        format!("{}h{}m{}s", s / 3_600, s % 3_600 / 60, s % 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else if s >= 1 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(Duration::from_millis(350)), "350ms");
        assert_eq!(fmt_duration(Duration::from_millis(4_200)), "4.2s");
        assert_eq!(fmt_duration(Duration::from_secs(303)), "5m3s");
        assert_eq!(fmt_duration(Duration::from_secs(7_205)), "2h0m5s");
        assert_eq!(
            fmt_duration(Duration::from_secs(3 * 86_400 + 4 * 3_600)),
            "3d4h"
        );
    }

    #[test]
    fn empty_answer_still_has_three_rows() {
        let at: Time = "2026-01-02T15:04:05Z".parse().unwrap();
        let out = render_whois_table(
            &Whois::default(),
            "10.0.0.1".parse().unwrap(),
            at,
            &Layout::fixed(80),
        );
        assert!(
            out.starts_with("IP 10.0.0.1 at 2026-01-02T15:04:05Z\n"),
            "{out}"
        );
        assert!(out.contains("(no known owner)"), "{out}");
        assert_eq!(out.lines().count(), 5, "{out}");
    }
}
