//! The views of `ghostip datapath`: `show` (a load-balancer listing, a conntrack table) and
//! `diff` (a dump compared with the truth, conntrack's stale flows).

use std::net::IpAddr;

use ghostip_core::ServiceKey;
use ghostip_datapath::against_truth::NodeDiff;
use ghostip_datapath::conntrack_audit::ConntrackReport;
use ghostip_datapath::{ConntrackTable, LbTable, SkipStats};

use super::table::{Column, Layout, Table};

/// `ip:port`, IPv6 in brackets.
fn socket(ip: IpAddr, port: u16) -> String {
    ghostip_core::Target::socket(ip, port).to_string()
}

/// A load-balancer table: one line per frontend, one indented line per backend, what was
/// skipped, and a warning when the input held earlier snapshots.
pub fn lb_table(t: &LbTable) -> String {
    let mut out = String::new();
    for fe in &t.frontends {
        out.push_str(&format!(
            "{}/{} {}",
            socket(fe.ip, fe.port),
            fe.protocol,
            fe.kind
        ));
        if let Some(svc) = &fe.service {
            out.push_str(&format!(" {svc}"));
        }
        if !fe.flags.is_empty() {
            out.push_str(&format!(" [{}]", fe.flags.join(",")));
        }
        if fe.backends.is_empty() {
            out.push_str(" (no backends)");
        }
        out.push('\n');
        for be in &fe.backends {
            out.push_str(&format!("  -> {} {}", socket(be.ip, be.port), be.state));
            if let Some(w) = be.weight {
                out.push_str(&format!(" weight={w}"));
            }
            out.push('\n');
        }
    }
    out.push_str(&format!(
        "skipped: {} ignored, {} unknown\n",
        t.skipped.ignored, t.skipped.unknown
    ));
    for (reason, n) in &t.skipped.unknown_by_reason {
        out.push_str(&format!("  unknown {n}: {reason}\n"));
    }
    for w in read_warnings(&t.skipped) {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// What a user must know about how a dump was read.
pub fn read_warnings(skipped: &SkipStats) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = &skipped.earlier_snapshots {
        out.push(format!(
            "the input holds {} snapshots of this datapath (its header or a listed item repeats): only the last, from {}, was read",
            e.count + 1,
            e.last_from
        ));
    }
    out
}

/// A conntrack table: one row per entry, then the counts.
pub fn conntrack_table(t: &ConntrackTable, layout: &Layout) -> String {
    let mut table = Table::new();
    table.set_columns(vec![
        Column::keep("PROTO"),
        Column::keep("STATE"),
        Column::keep("TIMEOUT"),
        Column::addr("SOURCE"),
        Column::addr("DESTINATION"),
        Column::addr("DNAT TO"),
        Column::wrap("FLAGS"),
    ]);
    table.wide_only(&["TIMEOUT"]);
    let addr = |ip: IpAddr, port: Option<u16>| match port {
        Some(p) => ghostip_core::Target::socket(ip, p).to_string(),
        None => ip.to_string(),
    };
    for e in &t.entries {
        let mut flags = Vec::new();
        if e.unreplied {
            flags.push("UNREPLIED".to_string());
        }
        if e.assured {
            flags.push("ASSURED".to_string());
        }
        flags.extend(e.flags.iter().cloned());
        table.add_row(vec![
            e.proto.clone(),
            e.state.clone().unwrap_or_default(),
            e.timeout.map(|t| format!("{t}s")).unwrap_or_default(),
            addr(e.orig.src, e.orig.sport),
            addr(e.orig.dst, e.orig.dport),
            e.dnat_target()
                .map(|(ip, p)| addr(ip, p))
                .unwrap_or_default(),
            flags.join(","),
        ]);
    }
    let mut out = table.render(layout);
    out.push_str(&format!(
        "{} entries; skipped: {} ignored, {} unknown\n",
        t.entries.len(),
        t.skipped.ignored,
        t.skipped.unknown
    ));
    out
}

fn since(d: Option<std::time::Duration>) -> String {
    d.map(|d| format!("{}s", d.as_secs())).unwrap_or_default()
}

/// A load-balancer dump compared with the truth: the summary line, the table of what is
/// stale or missing (when anything is), the frontends of unknown Services.
pub fn node_diff(d: &NodeDiff, table: &LbTable, truth_services: usize, layout: &Layout) -> String {
    let mut t = Table::new();
    t.set_columns(vec![
        Column::wrap("WHAT"),
        Column::name("SERVICE"),
        Column::addr("FRONTEND"),
        Column::addr("BACKEND"),
        Column::keep("STATE"),
        Column::keep("SINCE"),
    ]);
    let svc = |s: &ServiceKey, p: &Option<String>| match p {
        Some(p) => format!("{s}:{p}"),
        None => s.to_string(),
    };
    for (what, rows) in [("stale", &d.stale), ("missing", &d.missing)] {
        for r in rows {
            t.add_row(vec![
                what.to_string(),
                svc(&r.service, &r.port_name),
                r.frontend.to_string(),
                r.backend.to_string(),
                r.state
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                since(r.since_change),
            ]);
        }
    }
    for m in &d.services_missing {
        for f in &m.frontends {
            t.add_row(vec![
                "service missing".to_string(),
                svc(&f.service, &f.port_name),
                f.frontend.to_string(),
                format!("({} backends)", f.backends),
                String::new(),
                since(f.since_change),
            ]);
        }
    }
    for f in &d.frontends_missing {
        t.add_row(vec![
            "frontend missing".to_string(),
            svc(&f.service, &f.port_name),
            f.frontend.to_string(),
            format!("({} backends)", f.backends),
            String::new(),
            since(f.since_change),
        ]);
    }
    let mut out = format!(
        "{}{} frontends checked: {} stale, {} missing backends, {} services and {} frontends missing; {} unknown frontends, {} draining backends (dump: {} frontends, {} unknown lines)\n",
        d.node
            .as_ref()
            .map(|n| format!("node {n}: "))
            .unwrap_or_default(),
        d.frontends_checked,
        d.stale.len(),
        d.missing.len(),
        d.services_missing.len(),
        d.frontends_missing.len(),
        d.unknown_frontends,
        d.draining,
        table.frontends.len(),
        table.skipped.unknown,
    );
    if d.compared_nothing() {
        out.push_str(&format!(
            "nothing compared: none of the dump's {} frontends belongs to one of the truth's {} Services, and the truth expects none on this node: the dump does not describe this truth (another cluster or node, a truth file without these Services, or rules that outlived every Service)\n",
            table.frontends.len(),
            truth_services,
        ));
    }
    if !d.is_clean() {
        out.push_str(&t.render(layout));
    }
    if !d.unknown_samples.is_empty() {
        out.push_str(&format!(
            "frontends of services not in the truth: {}{}\n",
            d.unknown_samples.join("; "),
            if d.unknown_frontends > d.unknown_samples.len() {
                "; …"
            } else {
                ""
            }
        ));
    }
    out
}

/// The stale flows of a conntrack dump.
pub fn conntrack_report(r: &ConntrackReport, attributed: bool) -> String {
    let mut out = format!(
        "{} entries, {} live: {} stale flows\n",
        r.entries,
        r.live,
        r.stale.len()
    );
    for f in &r.stale {
        out.push_str(&format!("{f}\n"));
    }
    if !attributed {
        out.push_str(
            "no history database given (--db): the pods that had the stale IPs are not named, and flows sent straight to removed pods (not through a Service) are not found\n",
        );
    }
    out
}
