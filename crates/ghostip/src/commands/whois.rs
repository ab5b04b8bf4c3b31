//! `ghostip whois IP [--at TIME]`: who owned an IP then, and before and after, from the ledger.

use anyhow::Context as _;

use super::{Outcome, open_ledger_read_only, print_json};
use crate::cli::{GlobalArgs, OutputFormat, WhoisArgs};
use crate::ledger::parse_at;
use crate::printer::whois::{render_whois_table, whois_json};

pub(super) fn run(g: &GlobalArgs, args: WhoisArgs) -> anyhow::Result<Outcome> {
    let at = parse_at(&args.at, crate::clock::wall_now())
        .with_context(|| format!("reading --at {}", args.at))?;
    let ledger = open_ledger_read_only(g)?;
    let whois = ledger
        .whois(args.ip, at)
        .with_context(|| format!("looking up {}", args.ip))?;
    match g.output {
        OutputFormat::Json => print_json(&whois_json(&whois, args.ip, at))?,
        OutputFormat::Table | OutputFormat::Wide => {
            crate::printer::print_text(&render_whois_table(&whois, args.ip, at, &g.output.layout()))
        }
        OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
    }
    // whois answers a question; finding no owner is not an error.
    Ok(Outcome::Clean)
}
