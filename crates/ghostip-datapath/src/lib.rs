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
pub mod conntrack;
pub mod conntrack_audit;
#[cfg(feature = "netlink")]
pub mod conntrack_netlink;
mod error;
mod format;
pub mod generate;
pub mod iptables;
pub mod ipvs;
mod model;
pub mod nft;
mod packed;
mod secs;
pub mod socket_table;
mod text;

use std::io::BufRead;

pub use conntrack::{ConntrackTable, CtEntry, CtTuple};
pub use error::ParseError;
pub use format::{Format, UnknownFormat, detect_format};
pub use model::*;
pub use packed::{FrontendSink, PackedBackend, PackedFrontend, PackedTable};

/// What a parser produced: a load-balancer table or a connection table.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Parsed {
    /// From every format except `conntrack`.
    Lb(LbTable),
    /// From `conntrack`.
    Conntrack(ConntrackTable),
}

/// Parses `input` as `format`.
pub fn parse(format: Format, input: &[u8]) -> Result<Parsed, ParseError> {
    Ok(match format {
        Format::Iptables => Parsed::Lb(iptables::parse_bytes(input)?),
        Format::NftJson => Parsed::Lb(nft::parse_slice(input)?),
        Format::Ipvsadm => Parsed::Lb(ipvs::parse_bytes(input)?),
        Format::CiliumServiceList => Parsed::Lb(cilium::parse_service_list(&lossy(input))?),
        Format::CiliumServiceJson => Parsed::Lb(cilium::parse_service_json(input)?),
        Format::CiliumBpfLbList => Parsed::Lb(cilium::parse_bpf_lb_list(&lossy(input))?),
        Format::CiliumDbFrontends => Parsed::Lb(cilium::parse_db_frontends(&lossy(input))?),
        Format::CiliumLbMaps => Parsed::Lb(cilium::parse_lb_maps(&lossy(input))?),
        Format::Conntrack => Parsed::Conntrack(conntrack::parse_bytes(input)?),
    })
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
    match format {
        Format::Iptables => Ok(Parsed::Lb(iptables::parse_reader(reader)?)),
        Format::NftJson => Ok(Parsed::Lb(nft::parse_reader(reader)?)),
        Format::Ipvsadm => Ok(Parsed::Lb(ipvs::parse_reader(reader)?)),
        Format::Conntrack => Ok(Parsed::Conntrack(conntrack::parse_reader(reader)?)),
        _ => {
            let mut buf = Vec::new();
            reader.read_to_end(&mut buf).map_err(|e| ParseError::Read {
                format,
                line: 0,
                message: e.to_string(),
            })?;
            parse(format, &buf)
        }
    }
}

/// Parses a stream of a load-balancer `format` into a [`PackedTable`], for audits:
/// `iptables` and `nft-json` hand each frontend to the table as it is resolved, so the whole
/// [`LbTable`] never exists; other formats are parsed into one and packed. `None` for
/// `conntrack`, which is not a load-balancer table.
pub fn parse_reader_packed<R: BufRead>(
    format: Format,
    reader: R,
) -> Result<Option<PackedTable>, ParseError> {
    match format {
        Format::Iptables => {
            let mut t = PackedTable::new(format);
            t.skipped = iptables::parse_reader_into(reader, &mut t)?;
            t.shrink_to_fit();
            Ok(Some(t))
        }
        Format::NftJson => {
            let mut t = PackedTable::new(format);
            t.skipped = nft::parse_reader_into(reader, &mut t)?;
            t.shrink_to_fit();
            Ok(Some(t))
        }
        _ => match parse_reader(format, reader)? {
            Parsed::Lb(t) => Ok(Some(PackedTable::from(t))),
            Parsed::Conntrack(_) => Ok(None),
        },
    }
}

fn lossy(input: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(input)
}
