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
use ghostip_datapath::against_truth;
use ghostip_datapath::conntrack_audit::{
    AuditConfig, ConntrackAudit, FormerOwner, IpFacts, OwnershipFacts,
};
use ghostip_datapath::{Format, Parsed, detect_format, parse_reader};
use serde::Serialize;

use super::{Outcome, print_json};
use crate::cli::{
    DatapathArgs, DatapathCommand, DatapathDiffArgs, DumpSource, GlobalArgs, OutputFormat,
};
use crate::input::{self, InputError, Limited};
use crate::kube::truth_file::read_truth;
use crate::ledger::{Ledger, parse_at};
use crate::printer::datapath::{self, read_warnings};
use crate::printer::fit_text;

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
    let file = match (&src.from_bpf, &src.from_file) {
        (Some(dir), _) => {
            let maps = crate::layers::datapath::cilium_maps::read_maps(dir)
                .with_context(|| format!("reading Cilium's maps in {}", dir.display()))?;
            let table = ghostip_datapath::cilium_maps::decode(&maps);
            return Ok((Format::CiliumBpfLbList, Parsed::Lb(table)));
        }
        (None, Some(file)) => file,
        (None, None) => bail!("no dump: pass --from-file DUMP or --from-bpf DIR"),
    };
    let name = source_name(file);
    let opened = input::open(file, src.max_input_size).map_err(|e| match e {
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
                Parsed::Lb(t) => datapath::lb_table(t),
                Parsed::Conntrack(t) => datapath::conntrack_table(t, &layout),
            };
            crate::printer::print_text(&fit_text(&text, &layout));
        }
    }
    Ok(Outcome::Clean)
}

#[derive(Serialize)]
struct DiffJson<'a, T: Serialize> {
    format: Format,
    truth: TruthStats,
    /// How the dump was read, when a user must know (see [`read_warnings`]).
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
                    warnings: read_warnings(&table.skipped),
                    compared_nothing: d.compared_nothing(),
                    result: &d,
                })?,
                OutputFormat::Table | OutputFormat::Wide => {
                    let layout = g.output.layout();
                    let mut text = datapath::node_diff(&d, &table, tf.services, &layout);
                    for w in read_warnings(&table.skipped) {
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
                    a.source
                        .from_file
                        .as_deref()
                        .map_or_else(|| "Cilium's maps".to_string(), source_name),
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
            let mut warnings = read_warnings(&table.skipped);
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
                    let mut text = datapath::conntrack_report(&r, attributed);
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
