//! `ghostip datapath show|diff`: offline node datapath dumps, printed or compared with a truth file.
//!
//! The adapter part: reads the dump (a file or standard input, streamed into the parser),
//! the truth file and, for conntrack dumps, the IP ownership facts from the ledger; the
//! comparison itself is `ghostip_datapath::{against_truth, conntrack_audit}`. The dump and
//! the truth are each read up to `--max-input-size` ([`crate::input`]).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Cursor, Read};
use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context as _, bail};
use ghostip_core::{ServiceKey, Time};
use ghostip_datapath::against_truth::{self, NodeDiff};
use ghostip_datapath::conntrack_audit::{
    AuditConfig, ConntrackAudit, ConntrackReport, FormerOwner, IpFacts, OwnershipFacts,
};
use ghostip_datapath::{
    ConntrackTable, Format, LbTable, Parsed, SkipStats, detect_format, parse_reader,
};
use serde::Serialize;

use super::{Outcome, print_json};
use crate::cli::{
    DatapathArgs, DatapathCommand, DatapathDiffArgs, DumpSource, GlobalArgs, OutputFormat,
};
use crate::input::{self, InputError, Limited};
use crate::kube::truth_file::read_truth;
use crate::ledger::{Ledger, parse_at};
use crate::printer::{Layout, Table, fit_text};

/// How much of a dump is read before `--format auto` decides.
const PEEK: usize = 64 * 1024;

pub(super) fn run(g: &GlobalArgs, args: DatapathArgs) -> anyhow::Result<Outcome> {
    match args.command {
        DatapathCommand::Show(a) => show(g, &a.source),
        DatapathCommand::Diff(a) => diff(g, a),
    }
}

fn source_name(p: &Path) -> String {
    if p.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        p.display().to_string()
    }
}

/// Reads and parses the dump, streaming it into the parser; no more than
/// `--max-input-size` bytes are read.
fn read_dump(src: &DumpSource) -> anyhow::Result<(Format, Parsed)> {
    let name = source_name(&src.from_file);
    let opened = input::open(&src.from_file, src.max_input_size).map_err(|e| match e {
        InputError::Io(e) => anyhow::Error::new(e).context(format!("opening {name}")),
        e => anyhow::Error::new(e).context(format!("reading {name}")),
    })?;
    let limited = Limited::new(opened, src.max_input_size);
    let exceeded = limited.exceeded();
    let too_large = || {
        anyhow::Error::new(InputError::TooLarge {
            limit: src.max_input_size,
        })
        .context(format!("reading {name}"))
    };
    let mut input = BufReader::with_capacity(1 << 20, limited);
    let mut head = Vec::with_capacity(PEEK);
    if let Err(e) = (&mut input).take(PEEK as u64).read_to_end(&mut head) {
        if exceeded.get() {
            return Err(too_large());
        }
        return Err(anyhow::Error::new(e).context(format!("reading {name}")));
    }
    let format = match src.format.format() {
        Some(f) => f,
        None => match detect_format(&head) {
            Some(f) => f,
            None => bail!(
                "reading {name}: cannot tell which datapath dump this is; pass --format (one of: {})",
                Format::names()
            ),
        },
    };
    let reader: Box<dyn BufRead> = Box::new(BufReader::with_capacity(
        1 << 20,
        Cursor::new(head).chain(input),
    ));
    let parsed = parse_reader(format, reader);
    if exceeded.get() {
        return Err(too_large());
    }
    let parsed = parsed.with_context(|| format!("parsing {name}"))?;
    Ok((format, parsed))
}

fn show(g: &GlobalArgs, src: &DumpSource) -> anyhow::Result<Outcome> {
    let (_, parsed) = read_dump(src)?;
    match g.output {
        OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
        OutputFormat::Json => print_json(&parsed)?,
        OutputFormat::Table | OutputFormat::Wide => {
            let layout = g.output.layout();
            let text = match &parsed {
                Parsed::Lb(t) => render_lb_table(t),
                Parsed::Conntrack(t) => render_conntrack(t, &layout),
            };
            crate::printer::print_text(&fit_text(&text, &layout));
        }
    }
    Ok(Outcome::Clean)
}

/// `ip:port`, IPv6 in brackets.
fn socket(ip: IpAddr, port: u16) -> String {
    ghostip_core::Target::socket(ip, port).to_string()
}

/// A load-balancer table: one line per frontend, one indented line per backend, what was
/// skipped, and a warning when the input held earlier snapshots.
fn render_lb_table(t: &LbTable) -> String {
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
    for w in warnings(&t.skipped) {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// What a user must know about how a dump was read.
fn warnings(skipped: &SkipStats) -> Vec<String> {
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

fn render_conntrack(t: &ConntrackTable, layout: &Layout) -> String {
    let mut table = Table::new();
    table.set_header(vec![
        "PROTO",
        "STATE",
        "TIMEOUT",
        "SOURCE",
        "DESTINATION",
        "DNAT TO",
        "FLAGS",
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

#[derive(Serialize)]
struct DiffJson<'a, T: Serialize> {
    format: Format,
    truth: TruthStats,
    /// How the dump was read, when a user must know (see [`warnings`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
    /// The dump and the truth share nothing (a finding: see `NodeDiff::compared_nothing`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    compared_nothing: bool,
    #[serde(flatten)]
    result: &'a T,
}

#[derive(Serialize)]
struct TruthStats {
    services: usize,
    endpoint_slices: usize,
}

fn diff(g: &GlobalArgs, a: DatapathDiffArgs) -> anyhow::Result<Outcome> {
    let now = crate::clock::wall_now();
    let at = parse_at(&a.at, now).with_context(|| format!("reading --at {}", a.at))?;
    let dns_service = match a.dns_service.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            ServiceKey::new(ns, name)
        }
        _ => bail!(
            "reading --dns-service {}: expected NAMESPACE/NAME",
            a.dns_service
        ),
    };
    let truth_name = a.truth.display().to_string();
    let bytes = input::read_all(&a.truth, a.source.max_input_size)
        .with_context(|| format!("reading the truth file {truth_name}"))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "reading the truth file {truth_name}: not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        )
    })?;
    let tf = read_truth(&text, &truth_name, at).context("reading the truth file")?;
    drop(text);
    let (format, parsed) = read_dump(&a.source)?;
    let stats = TruthStats {
        services: tf.services,
        endpoint_slices: tf.slices,
    };
    match parsed {
        Parsed::Lb(table) => {
            let d = against_truth::diff(&table, &tf.truth, a.node.as_deref(), Some(at));
            match g.output {
                OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
                OutputFormat::Json => print_json(&DiffJson {
                    format,
                    truth: stats,
                    warnings: warnings(&table.skipped),
                    compared_nothing: d.compared_nothing(),
                    result: &d,
                })?,
                OutputFormat::Table | OutputFormat::Wide => {
                    let layout = g.output.layout();
                    let mut text = render_node_diff(&d, &table, tf.services, &layout);
                    for w in warnings(&table.skipped) {
                        text.push_str(&format!("warning: {w}\n"));
                    }
                    crate::printer::print_text(&fit_text(&text, &layout));
                }
            }
            Ok(if d.is_clean() && !d.compared_nothing() {
                Outcome::Clean
            } else {
                Outcome::Finding
            })
        }
        Parsed::Conntrack(table) => {
            if table.entries.is_empty() {
                // Nothing to judge is not clean, as a diff that compared nothing is not.
                bail!(
                    "reading {}: no conntrack entries read ({} lines skipped): nothing to judge (an empty `conntrack -L` output is a table dumped in the wrong network namespace, without CAP_NET_ADMIN, or with a filter that matched nothing)",
                    source_name(&a.source.from_file),
                    table.skipped.total()
                );
            }
            let cfg = AuditConfig {
                dns_service,
                now: Some(at),
            };
            let empty = OwnershipFacts::new();
            let probe = ConntrackAudit::new(&tf.truth, &empty, cfg.clone());
            let lookups = probe.lookups(&table);
            let (facts, attributed) = match &g.db {
                Some(path) => {
                    let ledger =
                        Ledger::open_read_only(path).context("opening the history database")?;
                    (ownership_facts(&ledger, &lookups, at)?, true)
                }
                None => (OwnershipFacts::new(), false),
            };
            let mut audit = ConntrackAudit::new(&tf.truth, &facts, cfg);
            let mut excluded = 0usize;
            for e in &table.entries {
                if a.exclude_sources.contains(&e.orig.src) {
                    excluded += 1;
                    continue;
                }
                audit.push(e);
            }
            let r = audit.finish();
            let mut warnings = warnings(&table.skipped);
            if excluded > 0 {
                warnings.push(format!(
                    "{excluded} flow(s) from --exclude-source addresses not judged"
                ));
            }
            match g.output {
                OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
                OutputFormat::Json => print_json(&DiffJson {
                    format,
                    truth: stats,
                    warnings,
                    compared_nothing: false,
                    result: &r,
                })?,
                OutputFormat::Table | OutputFormat::Wide => {
                    let mut text = render_conntrack_report(&r, attributed);
                    for w in &warnings {
                        text.push_str(&format!("warning: {w}\n"));
                    }
                    crate::printer::print_text(&fit_text(&text, &g.output.layout()));
                }
            }
            Ok(if r.is_clean() {
                Outcome::Clean
            } else {
                Outcome::Finding
            })
        }
    }
}

/// What the ledger knows about each of `ips` at `at`: the owner then, or the last owner
/// before with its removal time and the Services it was an endpoint of.
pub(crate) fn ownership_facts(
    ledger: &Ledger,
    ips: &BTreeSet<IpAddr>,
    at: Time,
) -> anyhow::Result<OwnershipFacts> {
    let mut facts = OwnershipFacts::new();
    for ip in ips {
        let w = ledger
            .whois(*ip, at)
            .with_context(|| format!("looking up {ip} in the history database"))?;
        let owner = w.at_time.as_ref().map(|o| o.pod.clone());
        let former = match (&w.at_time, &w.before) {
            (None, Some(b)) => {
                let services = ledger
                    .memberships_of(*ip)
                    .with_context(|| format!("looking up the memberships of {ip}"))?
                    .into_iter()
                    .filter(|m| {
                        m.pod
                            .as_ref()
                            .is_none_or(|p| p.uid == b.pod.uid && p.name == b.pod.name)
                    })
                    .map(|m| m.service)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                Some(FormerOwner {
                    pod: b.pod.clone(),
                    removed: b.closed,
                    services,
                })
            }
            _ => None,
        };
        if owner.is_some() || former.is_some() {
            facts.insert(*ip, IpFacts { owner, former });
        }
    }
    Ok(facts)
}

fn since(d: Option<std::time::Duration>) -> String {
    d.map(|d| format!("{}s", d.as_secs())).unwrap_or_default()
}

fn render_node_diff(
    d: &NodeDiff,
    table: &LbTable,
    truth_services: usize,
    layout: &Layout,
) -> String {
    let mut t = Table::new();
    t.set_header(vec![
        "WHAT", "SERVICE", "FRONTEND", "BACKEND", "STATE", "SINCE",
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

fn render_conntrack_report(r: &ConntrackReport, attributed: bool) -> String {
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
