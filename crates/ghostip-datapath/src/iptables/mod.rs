//! Parser of `iptables-save` / `ip6tables-save` dumps of kube-proxy's iptables mode.
//!
//! See [`parse_reader`] (streaming) and [`parse_str`]. The parser reads line by line and
//! keeps only a compact graph of kube-proxy chains (entry rules, chain-to-chain jumps,
//! DNAT targets); the dump text itself is never held. When the dump ends, every entry
//! rule (`KUBE-SERVICES`, `KUBE-NODEPORTS`, and the userspace-era `KUBE-PORTALS-*` /
//! `KUBE-NODEPORT-*`) is followed through `KUBE-FW-*`, `KUBE-EXT-*`, `KUBE-XLB-*`,
//! `KUBE-SVC-*`, `KUBE-SVL-*` and `KUBE-SEP-*` chains to the DNAT targets it can reach.
//! [`parse_reader_into`] hands each frontend to a [`FrontendSink`] as it is resolved.
//!
//! The graph has no chain map: kube-proxy chain names are packed into sortable 83-bit
//! keys, DNAT targets and jumps are appended to vectors as they come, and the end is a
//! sort-merge (legacy `iptables-save` lists chains sorted, so the sorts are checks). The
//! lines that make up nearly all of a large dump (chain declarations, masquerade marks,
//! `KUBE-SEP` DNATs, `KUBE-SVC` jumps, session affinity's included) are read as bytes
//! without UTF-8 validation or tokenizing; every other line takes the general path with
//! the same results.
//!
//! Layouts handled: kube-proxy ≥ 1.28 (comments unquoted when they have no space,
//! `-d IP` without `/32`, `KUBE-SVL`/`KUBE-EXT`), 1.10–1.27 (`KUBE-XLB`, `KUBE-FW`,
//! `-d IP/32`), and the userspace proxier (`KUBE-PORTALS-*`, DNAT directly in
//! `KUBE-SVC-*`). Filter-table `… has no endpoints` REJECT rules become frontends
//! without backends, flagged `no-endpoints`. Partial dumps (`iptables-save | grep`) are
//! read as far as they go: when a `KUBE-SEP-*` chain is missing, the endpoint named in
//! the jump's comment (`ns/svc:port -> 10.0.0.1:80`) is used and counted as unknown.
//!
//! # Modules
//! - this file: the entry points, the parser's state and which path reads a line;
//! - `tokenized`: the general path, any rule line tokenized (reads every line the byte paths
//!   decline); `comment`: what kube-proxy's rule comments say;
//! - the byte paths, each declining what it does not match so that the general path reads
//!   it: `rule_scan` (declarations, masquerade marks, and DNATs and jumps in any option
//!   order), `dnat_jump_layout` (kube-proxy's `KUBE-SEP` DNAT and `KUBE-SVC` jump layouts in
//!   one pass), `service_rule_layout` (`KUBE-SERVICES` / `KUBE-NODEPORTS` rules in one pass),
//!   `line_start` (the common layouts read where a line starts, before its end is known);
//! - `chain_key`: chain classes and packed chain keys; `words`: word-at-a-time compares;
//! - `resolve`: the chain graph followed from each entry rule to its DNAT targets;
//! - `tests`: the byte paths against the general path (property tests), keys, resolution.
//!
//! # Errors
//! Only input with no iptables-save line at all is an error; everything else is skipped
//! and counted in [`crate::SkipStats`].

mod chain_key;
mod comment;
mod dnat_jump_layout;
mod line_start;
mod resolve;
mod rule_scan;
mod service_rule_layout;
mod tokenized;
mod words;

use std::io::BufRead;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::error::ParseError;
use crate::format::Format;
use crate::model::{FrontendKind, LbTable, Location, Protocol, ServiceRef, SkipStats};
use crate::packed::FrontendSink;
use crate::text::{
    ByteLineSink, FxMap, LineSink, OVERLONG_LINE, drive_raw, drive_reader_raw, utf8,
};
use chain_key::{ChainKey, pack_chain};
use resolve::{JumpRow, PAddr, Run};
use words::same_name;

/// What the parser expected when a dump has no iptables-save line at all.
const EXPECTED: &str =
    "iptables-save output (`*table`, `:CHAIN POLICY [p:b]`, `-A CHAIN …`, `COMMIT`)";

/// Parses an `iptables-save` dump held in memory.
pub fn parse_str(input: &str) -> Result<LbTable, ParseError> {
    parse_bytes(input.as_bytes())
}

/// Parses an `iptables-save` dump held in memory as bytes (invalid UTF-8 is tolerated).
pub fn parse_bytes(input: &[u8]) -> Result<LbTable, ParseError> {
    let mut p = Parser::default();
    drive_raw(input, &mut p);
    into_table(p)
}

/// Parses an `iptables-save` dump from a reader, line by line.
pub fn parse_reader<R: BufRead>(reader: R) -> Result<LbTable, ParseError> {
    let mut p = Parser::default();
    drive_reader_raw(reader, Format::Iptables, &mut p)?;
    into_table(p)
}

/// Parses an `iptables-save` dump from a reader and hands each frontend to `sink` as it
/// is resolved, without building an [`LbTable`]; returns what was skipped. Frontends
/// are not merged or sorted (see [`crate::PackedTable`]).
pub fn parse_reader_into<R: BufRead>(
    reader: R,
    sink: &mut impl FrontendSink,
) -> Result<SkipStats, ParseError> {
    let mut p = Parser::default();
    drive_reader_raw(reader, Format::Iptables, &mut p)?;
    p.finish_into(sink)
}

fn into_table(p: Parser) -> Result<LbTable, ParseError> {
    let mut out = LbTable::new(Format::Iptables);
    out.skipped = p.finish_into(&mut out)?;
    out.normalize();
    Ok(out)
}

/// Strips the `[packets:bytes] ` prefix of `iptables-save -c`.
pub(crate) fn strip_counters(line: &str) -> &str {
    if let Some(rest) = line.strip_prefix('[')
        && let Some((counters, after)) = rest.split_once(']')
        && counters.bytes().all(|b| b.is_ascii_digit() || b == b':')
    {
        return after.trim_start();
    }
    line
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Table {
    /// No `*table` line seen (grep output): treated like `nat`.
    Unknown,
    Nat,
    Filter,
    Other,
}

/// One rule of an entry chain: a frontend and the chain it jumps to.
struct Entry {
    ip: Option<IpAddr>,
    port: u16,
    proto: Protocol,
    kind: FrontendKind,
    /// The comment's `ns/svc:port`, checked by [`ServiceRef::parse_kube_proxy`] (one
    /// allocation instead of three until the frontend is built).
    service: Option<Box<str>>,
    target: ChainKey,
    line: usize,
}

/// A frontend the filter table rejects or drops.
struct NoEndpoints {
    ip: Option<IpAddr>,
    port: u16,
    proto: Protocol,
    kind: FrontendKind,
    service: Option<ServiceRef>,
    flag: &'static str,
}

#[derive(Default)]
struct Parser {
    table: Option<Table>,
    saw_iptables: bool,
    first_foreign: Option<(usize, String)>,
    v6: bool,
    /// Chain names that do not pack, interned (tag 7 keys).
    names: FxMap<Box<str>, u32>,
    /// IPv6 addresses of DNAT targets and hints ([`PAddr`] indexes).
    v6_addrs: Vec<Ipv6Addr>,
    /// DNAT targets (from chain, address), in dump order.
    dnats: Vec<(ChainKey, PAddr)>,
    /// Chain-to-chain jumps, grouped in runs of one source chain: `runs[i]` is the source
    /// chain and the index of its first row in `jumps` (rules of a chain are consecutive
    /// in a dump, so the source is stored once per chain).
    runs: Vec<Run>,
    /// (target chain, endpoint named by the jump's comment).
    jumps: Vec<JumpRow>,
    /// The name and key of the last packed jump source (see [`Parser::source_key`]).
    last_source: ([u8; 32], usize, Option<ChainKey>),
    /// `:KUBE-…` chain declarations seen since the last rule.
    declared: usize,
    /// Masquerade, mark and return rules (see [`Parser::ignore_mark`]).
    marks: u64,
    affinity: Vec<ChainKey>,
    entries: Vec<Entry>,
    no_endpoints: Vec<NoEndpoints>,
    skipped: SkipStats,
    /// The `*table` lines seen: one seen again starts a new snapshot (several runs of
    /// `iptables-save` in one input).
    tables: Vec<String>,
    /// Tests: read every line through the general path (the fast paths must not change
    /// any result).
    #[cfg(test)]
    general_only: bool,
}

impl Parser {
    #[cfg(test)]
    fn general_only(&self) -> bool {
        self.general_only
    }

    #[cfg(not(test))]
    fn general_only(&self) -> bool {
        false
    }

    /// The key of a chain name: packed, or interned when it has another shape.
    fn key_of(&mut self, name: &str) -> ChainKey {
        if let Some(k) = pack_chain(name.as_bytes()) {
            return k;
        }
        let next = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        match self.names.get(name) {
            Some(&id) => ChainKey::named(id),
            None => {
                self.names.insert(name.into(), next);
                ChainKey::named(next)
            }
        }
    }

    /// [`pack_chain`] of a jump rule's own chain. A chain's rules are consecutive, so the
    /// name is usually the previous jump's: comparing 25 bytes is cheaper than packing them.
    fn source_key(&mut self, chain: &[u8]) -> Option<ChainKey> {
        let (bytes, len, key) = &mut self.last_source;
        if key.is_some() && same_name(bytes.get(..*len).unwrap_or_default(), chain) {
            return *key;
        }
        let packed = pack_chain(chain)?;
        if let Some(dst) = bytes.get_mut(..chain.len()) {
            dst.copy_from_slice(chain);
            *len = chain.len();
            *key = Some(packed);
        }
        Some(packed)
    }

    fn paddr(&mut self, sa: SocketAddr) -> PAddr {
        match sa.ip() {
            IpAddr::V4(ip) => PAddr {
                ip: u32::from(ip),
                port: sa.port(),
                family: 4,
            },
            IpAddr::V6(ip) => {
                let idx = u32::try_from(self.v6_addrs.len()).unwrap_or(u32::MAX);
                self.v6_addrs.push(ip);
                PAddr {
                    ip: idx,
                    port: sa.port(),
                    family: 6,
                }
            }
        }
    }

    fn add_dnat(&mut self, from: ChainKey, sa: SocketAddr) {
        let a = self.paddr(sa);
        self.dnats.push((from, a));
    }

    fn add_jump(&mut self, from: ChainKey, to: ChainKey, hint: Option<SocketAddr>) {
        let hint = match hint {
            Some(sa) => self.paddr(sa),
            None => PAddr::NONE,
        };
        if self.runs.last().is_none_or(|r| r.0 != from) {
            let at = u32::try_from(self.jumps.len()).unwrap_or(u32::MAX);
            self.runs.push((from, at));
        }
        self.jumps.push((to, hint));
    }

    /// A table seen before starts again at line `no`: the input holds several snapshots
    /// (runs of `iptables-save`), and only the last is read. What was read so far is
    /// dropped; the skip counts say so ([`SkipStats::new_snapshot`]).
    fn new_snapshot(&mut self, no: usize) {
        let mut skipped = std::mem::take(&mut self.skipped);
        skipped.new_snapshot(Location::Line(no));
        *self = Parser {
            v6: self.v6,
            saw_iptables: true,
            skipped,
            #[cfg(test)]
            general_only: self.general_only,
            ..Parser::default()
        };
    }

    fn unknown(&mut self, no: usize, reason: &'static str, line: &str) {
        self.skipped.unknown(Location::Line(no), reason, line);
    }

    fn ignore(&mut self, reason: &'static str) {
        self.skipped.ignore(reason);
    }

    /// A masquerade, mark or return rule (a third of a large dump): counted here and
    /// added to the skip counts once, at the end.
    fn ignore_mark(&mut self) {
        self.marks += 1;
    }

    /// A rule line: iptables-save declares a table's chains before its rules, so the row
    /// vectors are sized once from the declarations instead of grown.
    fn rule_seen(&mut self) {
        self.saw_iptables = true;
        if self.declared > 0 {
            let n = std::mem::take(&mut self.declared);
            self.dnats.reserve(n);
            self.jumps.reserve(n);
        }
    }
}

impl LineSink for Parser {
    fn line(&mut self, no: usize, raw: &str) {
        let line = raw.trim();
        if line.is_empty() {
            return;
        }
        let first = line.as_bytes().first().copied().unwrap_or(b' ');
        match first {
            b'#' => {
                if line.contains("ip6tables-save") {
                    self.v6 = true;
                }
            }
            b'*' => {
                self.saw_iptables = true;
                if self.tables.iter().any(|t| t == line) {
                    self.new_snapshot(no);
                }
                self.tables.push(line.to_string());
                self.table = Some(match line {
                    "*nat" => Table::Nat,
                    "*filter" => Table::Filter,
                    _ => Table::Other,
                });
            }
            b':' => {
                self.saw_iptables = true;
                if line.starts_with(":KUBE-") {
                    self.declared += 1;
                }
            }
            _ if line == "COMMIT" => {
                self.saw_iptables = true;
                self.table = None;
            }
            _ => {
                let body = strip_counters(line);
                if let Some(rest) = body
                    .strip_prefix("-A ")
                    .or_else(|| body.strip_prefix("-I "))
                {
                    self.rule_seen();
                    self.rule(no, line, rest);
                } else {
                    if self.first_foreign.is_none() {
                        self.first_foreign = Some((no, crate::model::excerpt(line)));
                    }
                    self.unknown(no, "not an iptables-save line", line);
                }
            }
        }
    }

    fn overlong(&mut self, no: usize, head: &str) {
        if self.first_foreign.is_none() {
            self.first_foreign = Some((no, crate::model::excerpt(head)));
        }
        self.unknown(no, OVERLONG_LINE, head);
    }
}

impl ByteLineSink for Parser {
    fn line_bytes(&mut self, no: usize, raw: &[u8]) {
        if self.general_only() || !self.byte_line(no, raw) {
            self.line(no, &utf8(raw));
        }
    }

    fn overlong_bytes(&mut self, no: usize, head: &[u8]) {
        self.overlong(no, &utf8(head));
    }

    fn line_at(&mut self, rest: &[u8]) -> Option<usize> {
        Parser::line_at(self, rest)
    }
}

#[cfg(test)]
mod tests;
