//! Pure parsers that turn node datapath dumps into one normalized load-balancer table.
//!
//! See [`parse`] for the entry point, [`detect_format`] for `--format auto`, [`LbTable`]
//! for the table every load-balancer parser produces and [`ConntrackTable`] for
//! connection-tracking dumps; [`parse_reader_packed`] reads a stream into the compact
//! [`PackedTable`] an audit needs, without building the `LbTable`. Nothing here does IO or spawns processes: inputs are `&str`,
//! `&[u8]` or [`std::io::BufRead`] readers, read line by line where the format allows.
//!
//! | format | module | tool output |
//! |---|---|---|
//! | `iptables` | [`iptables`] | `iptables-save` of kube-proxy iptables mode |
//! | `nft-json` | [`nft`] | `nft -j list table ip kube-proxy` (or `ip6`, `list ruleset`) |
//! | `ipvsadm` | [`ipvs`] | `ipvsadm -Ln`, `ipvsadm-save -n` |
//! | `cilium-*` | [`cilium`] | `cilium-dbg service list` (text, JSON), `bpf lb list`, `db/show frontends`, `lb/maps-dump` |
//! | (map bytes) | [`cilium_maps`] | Cilium's pinned `cilium_lb{4,6}_*` maps, key and value bytes |
//! | `conntrack` | [`conntrack`] | `conntrack -L`, `-E`, `-o extended` |
//! | (bytes) | `conntrack_netlink` (feature `netlink`, default) | conntrack netlink dump messages |
//! | (sockets) | [`socket_table`] | `/proc/net/tcp`, `/proc/net/tcp6` |
//!
//! # Errors
//! A [`ParseError`] means the input as a whole is not the format asked for. Unknown or
//! damaged lines, rules, chains and fields inside a readable dump are skipped and counted
//! in [`SkipStats`]; no input makes a parser panic (every parser is fuzzed).
#![forbid(unsafe_code)]

pub mod against_truth;
pub mod cilium;
pub mod cilium_maps;
pub mod conntrack;
pub mod conntrack_audit;
#[cfg(feature = "netlink")]
pub mod conntrack_netlink;
mod error;
mod format;
pub mod iptables;
pub mod ipvs;
pub mod layers;
mod model;
pub mod nft;
mod packed;
mod secs;
pub mod socket_table;
mod text;

use std::io::BufRead;

pub use conntrack::{ConntrackTable, CtEntry, CtTuple};
pub use error::ParseError;
pub use format::{
    AgentRead, Detect, Dump, FORMATS, Format, FormatInfo, LineTest, ParseFn, ReadFn, ReadPackedFn,
    RunsIn, TableKind, UnknownFormat, detect_format,
};
pub use model::*;
pub use packed::{FrontendSink, PackedBackend, PackedFrontend, PackedTable};
pub use text::{MAX_LINE, OVERLONG_LINE};

/// What a parser produced: a load-balancer table or a connection table.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Parsed {
    /// From every format except `conntrack`.
    Lb(LbTable),
    /// From `conntrack`.
    Conntrack(ConntrackTable),
}

/// Parses `input` as `format` (the parser of its [`FormatInfo`]).
pub fn parse(format: Format, input: &[u8]) -> Result<Parsed, ParseError> {
    (format.info().parse)(input)
}

/// Parses `input` with the format [`detect_format`] finds; `None` when none is found.
pub fn parse_auto(input: &[u8]) -> Option<(Format, Result<Parsed, ParseError>)> {
    let format = detect_format(input)?;
    Some((format, parse(format, input)))
}

/// Parses a stream as `format`. Line-oriented formats (`iptables`, `ipvsadm`,
/// `conntrack`) and `nft-json` are read incrementally; Cilium outputs, which are small,
/// are read whole.
pub fn parse_reader<R: BufRead>(format: Format, mut reader: R) -> Result<Parsed, ParseError> {
    (format.info().read)(&mut reader)
}

/// Parses a stream of a load-balancer `format` into a [`PackedTable`], for audits:
/// `iptables` and `nft-json` hand each frontend to the table as it is resolved, so the whole
/// [`LbTable`] never exists; other formats are parsed into one and packed. `None` for
/// `conntrack`, which is not a load-balancer table.
pub fn parse_reader_packed<R: BufRead>(
    format: Format,
    mut reader: R,
) -> Result<Option<PackedTable>, ParseError> {
    let info = format.info();
    match info.read_packed {
        Some(read) => {
            let mut t = PackedTable::new(format);
            t.skipped = read(&mut reader, &mut t)?;
            t.shrink_to_fit();
            Ok(Some(t))
        }
        None => match (info.read)(&mut reader)? {
            Parsed::Lb(t) => Ok(Some(PackedTable::from(t))),
            Parsed::Conntrack(_) => Ok(None),
        },
    }
}
