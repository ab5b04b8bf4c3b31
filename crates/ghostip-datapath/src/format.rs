//! The dump formats, one descriptor each in one table: names, how `--format auto` recognizes
//! them, their parsers, and the command that dumps them on a node.
//!
//! [`FORMATS`] is the table (in the order the CLI lists them) and [`Format`] its key: a format
//! is added by adding one entry to the `formats!` invocation below, which declares both. The
//! CLI's `--format` and the agent's `--datapath` choices, the agent's `auto` detection order,
//! the engine's path kind and the parser dispatch of [`crate::parse`] all read the table.
//! [`detect_format`] runs the table's detectors.

use std::fmt;
use std::io::BufRead;
use std::str::FromStr;

use ghostip_core::PathKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Parsed;
use crate::against_truth::Family;
use crate::error::ParseError;
use crate::layers::{CILIUM, CONNTRACK_TABLE, IPTABLES, IPVS, NFTABLES};
use crate::model::{LbTable, Location, SkipStats};
use crate::packed::PackedTable;
use crate::text::{ByteLineSink, OVERLONG_LINE, drive_raw, drive_reader_raw, utf8};
use crate::{cilium, conntrack, iptables, ipvs, nft};

/// Parses a whole input.
pub type ParseFn = fn(&[u8]) -> Result<Parsed, ParseError>;
/// Parses a stream.
pub type ReadFn = fn(&mut dyn BufRead) -> Result<Parsed, ParseError>;
/// Streams a load-balancer dump into a [`PackedTable`]; returns what was skipped.
pub type ReadPackedFn = fn(&mut dyn BufRead, &mut PackedTable) -> Result<SkipStats, ParseError>;
/// Whether a line (or a JSON document's text) is of a format.
pub type LineTest = fn(&str) -> bool;

/// What one dump format is and how it is read.
#[derive(Debug)]
pub struct FormatInfo {
    /// The key.
    pub format: Format,
    /// The name `--format` takes and JSON writes.
    pub name: &'static str,
    /// Other names `--format` accepts.
    pub aliases: &'static [&'static str],
    /// One line for `--help`: which tool output this is.
    pub help: &'static str,
    /// What a parse of it produces.
    pub table: TableKind,
    /// How `--format auto` recognizes it.
    pub detect: Detect,
    /// Parses the whole input.
    pub parse: ParseFn,
    /// Parses a stream (line by line where the format allows).
    pub read: ReadFn,
    /// Streams a load-balancer dump into a [`PackedTable`] without building the `LbTable`
    /// (`None`: parsed into an `LbTable`, then packed).
    pub read_packed: Option<ReadPackedFn>,
    /// The command that prints it on a node, and how the agent reads it.
    pub dump: Dump,
}

/// What a format's parse produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// A load-balancer table ([`crate::LbTable`]).
    LoadBalancer,
    /// Tracked connections ([`crate::ConntrackTable`]).
    Connections,
}

/// How `--format auto` recognizes a format ([`detect_format`]).
#[derive(Debug)]
pub struct Detect {
    /// A JSON document of this format (tried first, on input starting with `{` or `[`).
    pub json: Option<LineTest>,
    /// A line only this format prints (a header, its rule syntax): decisive on any line.
    pub marker: Option<LineTest>,
    /// A line shaped like one of its rows: weaker than every format's marker, tried in
    /// rank order (lowest first) when no marker matches the line.
    pub row: Option<(u8, LineTest)>,
}

/// The command that prints a format on a node, and what it shows.
#[derive(Debug)]
pub struct Dump {
    /// Program and arguments; alternatives are tried in order when the program is missing
    /// (Cilium before 1.15 names its CLI `cilium`).
    pub argv: &'static [&'static [&'static str]],
    /// The engine's path kind of the datapath it shows.
    pub path_kind: PathKind,
    /// The address families the command's output holds.
    pub family: Family,
    /// How `ghostip agent` reads it (`None`: the agent does not).
    pub agent: Option<AgentRead>,
}

/// How `ghostip agent` reads a format (its `--datapath` choice is the path kind's name).
#[derive(Debug)]
pub struct AgentRead {
    /// Where the command runs.
    pub runs_in: RunsIn,
    /// Position in `--datapath auto`'s tries (lowest first); `None`: never guessed.
    pub auto_rank: Option<u8>,
    /// One line for `--help`.
    pub help: &'static str,
}

/// Where the agent runs a dump command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunsIn {
    /// A local program in the node's network namespace.
    Node,
    /// The Cilium agent container on the node, through the Kubernetes exec API.
    CiliumAgentPod,
}

macro_rules! formats {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident { $($field:ident: $value:expr),* $(,)? }
    )*) => {
        /// A dump format one of the parsers reads: the key of [`FORMATS`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Format {
            $($(#[doc = $doc])* $variant,)*
        }

        /// The descriptors, one static each.
        #[allow(non_upper_case_globals)]
        mod info {
            use super::*;
            $(pub(super) static $variant: FormatInfo =
                FormatInfo { format: Format::$variant, $($field: $value),* };)*
        }

        /// Every format's descriptor, in the order the CLI lists them.
        pub static FORMATS: &[&FormatInfo] = &[$(&info::$variant),*];

        impl Format {
            /// The descriptor.
            pub fn info(self) -> &'static FormatInfo {
                match self {
                    $(Format::$variant => &info::$variant,)*
                }
            }
        }
    };
}

/// Reads a whole stream, then parses it with `parse` (formats whose outputs are small).
fn whole(format: Format, r: &mut dyn BufRead, parse: ParseFn) -> Result<Parsed, ParseError> {
    let mut buf = Vec::new();
    r.read_to_end(&mut buf).map_err(|e| ParseError::Read {
        format,
        line: 0,
        message: e.to_string(),
    })?;
    parse(&buf)
}

/// A text dump with its overlong lines (over [`crate::MAX_LINE`]) left empty, and those lines'
/// numbers and first bytes: what the Cilium text parsers, which read their input whole,
/// get instead of the input, so that they skip and count overlong lines as the
/// line-oriented parsers do and a stream never holds such a line.
#[derive(Default)]
struct BoundedText {
    text: String,
    overlong: Vec<(usize, String)>,
}

impl ByteLineSink for BoundedText {
    fn line_bytes(&mut self, _no: usize, line: &[u8]) {
        self.text.push_str(&utf8(line));
        self.text.push('\n');
    }

    fn overlong_bytes(&mut self, no: usize, head: &[u8]) {
        self.text.push('\n');
        self.overlong.push((no, utf8(head).into_owned()));
    }
}

impl BoundedText {
    fn of_slice(input: &[u8]) -> Self {
        let mut t = BoundedText::default();
        drive_raw(input, &mut t);
        t
    }

    fn of_reader(format: Format, r: &mut dyn BufRead) -> Result<Self, ParseError> {
        let mut t = BoundedText::default();
        drive_reader_raw(r, format, &mut t)?;
        Ok(t)
    }

    /// Parses the text and counts the overlong lines in the table's skips.
    fn parse(self, parse: fn(&str) -> Result<LbTable, ParseError>) -> Result<Parsed, ParseError> {
        let mut table = parse(&self.text)?;
        for (no, head) in self.overlong {
            table
                .skipped
                .unknown(Location::Line(no), OVERLONG_LINE, &head);
        }
        Ok(Parsed::Lb(table))
    }
}

/// Whether a `cilium bpf lb list` input is its JSON form (read whole: its lines are not
/// bounded).
fn starts_json(input: &[u8]) -> bool {
    input
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{')
}

/// `cilium bpf lb list` from a stream: JSON read whole, text with bounded lines.
fn read_bpf_lb_list(r: &mut dyn BufRead) -> Result<Parsed, ParseError> {
    let format = Format::CiliumBpfLbList;
    let json = loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(ParseError::Read {
                    format,
                    line: 0,
                    message: e.to_string(),
                });
            }
        };
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => break buf.get(i) == Some(&b'{'),
            None if buf.is_empty() => break false,
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    };
    if json {
        whole(format, r, |b| {
            cilium::parse_bpf_lb_list(&String::from_utf8_lossy(b)).map(Parsed::Lb)
        })
    } else {
        BoundedText::of_reader(format, r)?.parse(cilium::parse_bpf_lb_list)
    }
}

const CILIUM_PATH: PathKind = CILIUM;

formats! {
    /// `iptables-save` / `ip6tables-save` of kube-proxy iptables mode (any table layout
    /// since the userspace proxier; `-c` counters accepted).
    Iptables {
        name: "iptables",
        aliases: &["iptables-save", "ip6tables-save"],
        help: "`iptables-save` / `ip6tables-save` of kube-proxy in iptables mode",
        table: TableKind::LoadBalancer,
        detect: Detect { json: None, marker: Some(iptables_marker), row: None },
        parse: |b| iptables::parse_bytes(b).map(Parsed::Lb),
        read: |r| iptables::parse_reader(r).map(Parsed::Lb),
        read_packed: Some(|r, t| iptables::parse_reader_into(r, t)),
        dump: Dump {
            // The nat table holds every service → endpoint DNAT; the filter table only
            // adds `has no endpoints` REJECTs, which are not backends.
            argv: &[&["iptables-save", "-t", "nat"]],
            path_kind: IPTABLES,
            family: Family::V4,
            agent: Some(AgentRead {
                runs_in: RunsIn::Node,
                auto_rank: Some(1),
                help: "kube-proxy iptables mode (`iptables-save -t nat`)",
            }),
        },
    }
    /// `nft -j list table ip kube-proxy` (and `ip6`, or `list ruleset`).
    NftJson {
        name: "nft-json",
        aliases: &["nft", "nftables"],
        help: "`nft -j list table ip kube-proxy` (or `ip6`, or `nft -j list ruleset`)",
        table: TableKind::LoadBalancer,
        detect: Detect { json: Some(|t| t.contains("\"nftables\"")), marker: None, row: None },
        parse: |b| nft::parse_slice(b).map(Parsed::Lb),
        read: |r| nft::parse_reader(r).map(Parsed::Lb),
        read_packed: Some(|r, t| nft::parse_reader_into(r, t)),
        dump: Dump {
            argv: &[&["nft", "-j", "list", "table", "ip", "kube-proxy"]],
            path_kind: NFTABLES,
            family: Family::V4,
            agent: Some(AgentRead {
                runs_in: RunsIn::Node,
                auto_rank: Some(0),
                help: "kube-proxy nftables mode (`nft -j list table ip kube-proxy`)",
            }),
        },
    }
    /// `ipvsadm -Ln` (also `--exact`, `--stats`, `--persistent-conn`) and `ipvsadm-save -n`.
    Ipvsadm {
        name: "ipvsadm",
        aliases: &["ipvsadm-save", "ipvs"],
        help: "`ipvsadm -Ln` or `ipvsadm-save -n`",
        table: TableKind::LoadBalancer,
        detect: Detect {
            json: None,
            marker: Some(ipvsadm_marker),
            row: Some((0, ipvs::looks_like_virtual_server)),
        },
        parse: |b| ipvs::parse_bytes(b).map(Parsed::Lb),
        read: |r| ipvs::parse_reader(r).map(Parsed::Lb),
        read_packed: None,
        dump: Dump {
            argv: &[&["ipvsadm-save", "-n"]],
            path_kind: IPVS,
            family: Family::Both,
            agent: Some(AgentRead {
                runs_in: RunsIn::Node,
                // kube-proxy in IPVS mode also writes a few iptables rules, but no
                // `KUBE-SVC` chains: tried after iptables.
                auto_rank: Some(2),
                help: "kube-proxy IPVS mode (`ipvsadm-save -n`)",
            }),
        },
    }
    /// `cilium[-dbg] service list` text, Cilium 1.7 to 1.19.
    CiliumServiceList {
        name: "cilium-service-list",
        aliases: &[],
        help: "`cilium-dbg service list`",
        table: TableKind::LoadBalancer,
        detect: Detect {
            json: None,
            marker: Some(|l| l.contains("Frontend") && l.contains("Service Type") && l.contains("Backend")),
            row: Some((2, cilium::looks_like_service_list_row)),
        },
        parse: |b| BoundedText::of_slice(b).parse(cilium::parse_service_list),
        read: |r| {
            BoundedText::of_reader(Format::CiliumServiceList, r)?.parse(cilium::parse_service_list)
        },
        read_packed: None,
        dump: Dump {
            argv: &[&["cilium-dbg", "service", "list"], &["cilium", "service", "list"]],
            path_kind: CILIUM_PATH,
            family: Family::Both,
            agent: None,
        },
    }
    /// `cilium[-dbg] service list -o json` (or `service get ID -o json`).
    CiliumServiceJson {
        name: "cilium-service-json",
        aliases: &[],
        help: "`cilium-dbg service list -o json`",
        table: TableKind::LoadBalancer,
        detect: Detect {
            json: Some(|t| t.contains("\"frontend-address\"") || t.contains("\"backend-addresses\"")),
            marker: None,
            row: None,
        },
        parse: |b| cilium::parse_service_json(b).map(Parsed::Lb),
        read: |r| whole(Format::CiliumServiceJson, r, info::CiliumServiceJson.parse),
        read_packed: None,
        dump: Dump {
            argv: &[
                &["cilium-dbg", "service", "list", "-o", "json"],
                &["cilium", "service", "list", "-o", "json"],
            ],
            path_kind: CILIUM_PATH,
            family: Family::Both,
            agent: Some(AgentRead {
                runs_in: RunsIn::CiliumAgentPod,
                auto_rank: None,
                help: "Cilium: its pinned BPF load-balancer maps (--cilium-read maps, the \
                       default; needs CAP_BPF and the host's bpffs), or `cilium-dbg service \
                       list -o json` in this node's Cilium agent pod through the Kubernetes \
                       exec API (--cilium-read exec; needs `pods/exec` on the Cilium pods)",
            }),
        },
    }
    /// `cilium[-dbg] bpf lb list`, text or `-o json`.
    CiliumBpfLbList {
        name: "cilium-bpf-lb-list",
        aliases: &[],
        help: "`cilium-dbg bpf lb list` (text or `-o json`)",
        table: TableKind::LoadBalancer,
        detect: Detect {
            json: Some(bpf_lb_json),
            marker: Some(|l| l.contains("SERVICE ADDRESS") && l.contains("BACKEND")),
            row: Some((3, cilium::looks_like_bpf_lb_row)),
        },
        parse: |b| match starts_json(b) {
            true => cilium::parse_bpf_lb_list(&String::from_utf8_lossy(b)).map(Parsed::Lb),
            false => BoundedText::of_slice(b).parse(cilium::parse_bpf_lb_list),
        },
        read: read_bpf_lb_list,
        read_packed: None,
        dump: Dump {
            argv: &[&["cilium-dbg", "bpf", "lb", "list"], &["cilium", "bpf", "lb", "list"]],
            path_kind: CILIUM_PATH,
            family: Family::Both,
            agent: None,
        },
    }
    /// `cilium-dbg shell -- db/show frontends` (Cilium 1.17+ load-balancer tables).
    CiliumDbFrontends {
        name: "cilium-db-frontends",
        aliases: &[],
        help: "`cilium-dbg shell -- db/show frontends`",
        table: TableKind::LoadBalancer,
        detect: Detect {
            json: None,
            marker: Some(|l| l.starts_with("Address") && l.contains("ServiceName") && l.contains("Backends")),
            row: Some((1, cilium::looks_like_db_frontends_row)),
        },
        parse: |b| BoundedText::of_slice(b).parse(cilium::parse_db_frontends),
        read: |r| {
            BoundedText::of_reader(Format::CiliumDbFrontends, r)?.parse(cilium::parse_db_frontends)
        },
        read_packed: None,
        dump: Dump {
            argv: &[&["cilium-dbg", "shell", "--", "db/show", "frontends"]],
            path_kind: CILIUM_PATH,
            family: Family::Both,
            agent: None,
        },
    }
    /// `lb/maps-dump` of the Cilium load-balancer shell (`BE:`/`SVC:`/`REV:` lines).
    CiliumLbMaps {
        name: "cilium-lb-maps",
        aliases: &[],
        help: "Cilium `lb/maps-dump`",
        table: TableKind::LoadBalancer,
        detect: Detect {
            json: None,
            marker: Some(|l| l.starts_with("BE: ID=") || l.starts_with("SVC: ID=") || l.starts_with("REV: ID=")),
            row: None,
        },
        parse: |b| BoundedText::of_slice(b).parse(cilium::parse_lb_maps),
        read: |r| BoundedText::of_reader(Format::CiliumLbMaps, r)?.parse(cilium::parse_lb_maps),
        read_packed: None,
        dump: Dump {
            argv: &[&["cilium-dbg", "shell", "--", "lb/maps-dump"]],
            path_kind: CILIUM_PATH,
            family: Family::Both,
            agent: None,
        },
    }
    /// `conntrack -L` / `-E`, plain or `-o extended` (same as `/proc/net/nf_conntrack`).
    Conntrack {
        name: "conntrack",
        aliases: &[],
        help: "`conntrack -L` (or `-E`, `-o extended`)",
        table: TableKind::Connections,
        detect: Detect { json: None, marker: Some(conntrack::looks_like_entry), row: None },
        parse: |b| conntrack::parse_bytes(b).map(Parsed::Conntrack),
        read: |r| conntrack::parse_reader(r).map(Parsed::Conntrack),
        read_packed: None,
        dump: Dump {
            argv: &[&["conntrack", "-L"]],
            path_kind: CONNTRACK_TABLE,
            family: Family::Both,
            agent: None,
        },
    }
}

impl Format {
    /// Every format, in the order the CLI lists them.
    pub fn all() -> impl Iterator<Item = Format> {
        FORMATS.iter().map(|i| i.format)
    }

    /// The name used by `--format` and in JSON.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether this format describes connections ([`crate::ConntrackTable`]) rather than
    /// a load-balancer table.
    pub fn is_conntrack(self) -> bool {
        self.info().table == TableKind::Connections
    }

    /// Every format's name, comma separated (for error messages).
    pub fn names() -> String {
        Format::all()
            .map(Format::name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Format {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An unknown `--format` name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown format {0:?}; known: {known}", known = Format::names())]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    /// A format by its name or one of its aliases.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FORMATS
            .iter()
            .find(|i| i.name == s || i.aliases.contains(&s))
            .map(|i| i.format)
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

/// How much of the input [`detect_format`] looks at.
const DETECT_WINDOW: usize = 64 * 1024;

/// Guesses the format of a dump from its first 64 KiB, for `--format auto`.
///
/// JSON input is matched by each format's JSON detector; otherwise the first line that any
/// format's marker or row detector takes decides (markers first, then rows by rank). Shell
/// prompts, `kubectl exec` notices, CI log prefixes and blank lines before the output are
/// tolerated. Returns `None` when no line is decisive.
pub fn detect_format(input: &[u8]) -> Option<Format> {
    let window = input.get(..DETECT_WINDOW.min(input.len())).unwrap_or(input);
    let text = String::from_utf8_lossy(window);
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let json = FORMATS
            .iter()
            .find(|i| i.detect.json.is_some_and(|d| d(trimmed)));
        if let Some(i) = json {
            return Some(i.format);
        }
    }
    let mut rows: Vec<(u8, LineTest, Format)> = FORMATS
        .iter()
        .filter_map(|i| i.detect.row.map(|(rank, d)| (rank, d, i.format)))
        .collect();
    rows.sort_by_key(|r| r.0);
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let marker = FORMATS
            .iter()
            .find(|i| i.detect.marker.is_some_and(|d| d(line)));
        if let Some(i) = marker {
            return Some(i.format);
        }
        if let Some(r) = rows.iter().find(|r| (r.1)(line)) {
            return Some(r.2);
        }
    }
    None
}

/// `cilium bpf lb list -o json`: `{"10.96.0.1:443": ["172.18.0.3:6443 (1) (1)", …]}`.
fn bpf_lb_json(text: &str) -> bool {
    let Some(t) = text.trim_start().strip_prefix('{') else {
        return false;
    };
    let Some(t) = t.trim_start().strip_prefix('"') else {
        return false;
    };
    let Some((key, rest)) = t.split_once('"') else {
        return false;
    };
    crate::text::parse_socket(key.split(['/', ' ']).next().unwrap_or(key)).is_some()
        && rest
            .trim_start()
            .strip_prefix(':')
            .is_some_and(|r| r.trim_start().starts_with('['))
}

/// Lines only `iptables-save` prints: its header, table and chain lines, and rules
/// (`-A CHAIN -option …`, counters of `-c` allowed).
fn iptables_marker(line: &str) -> bool {
    if line.starts_with("# Generated by iptables-save")
        || line.starts_with("# Generated by ip6tables-save")
        || matches!(line, "*nat" | "*filter" | "*mangle" | "*raw" | "*security")
    {
        return true;
    }
    let line = iptables::strip_counters(line);
    if let Some(rest) = line
        .strip_prefix("-A ")
        .or_else(|| line.strip_prefix("-I "))
    {
        let mut it = rest.split_ascii_whitespace();
        if let (Some(chain), Some(opt)) = (it.next(), it.next())
            && !chain.starts_with('-')
            && (opt.starts_with('-') || opt == "!")
        {
            return true;
        }
    }
    line.starts_with(":KUBE-") && line.contains(" [")
}

/// Lines only `ipvsadm` prints: the list header and `ipvsadm-save` commands.
fn ipvsadm_marker(line: &str) -> bool {
    line.starts_with("IP Virtual Server version")
        || line.starts_with("Prot LocalAddress:Port")
        || [
            "-A -t ",
            "-A -u ",
            "-A --sctp-service ",
            "-A -f ",
            "-a -t ",
            "-a -u ",
            "--add-service ",
        ]
        .iter()
        .any(|p| line.starts_with(p))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_table_is_keyed_by_its_formats_and_names_are_unique() {
        let mut names = std::collections::BTreeSet::new();
        for (i, info) in FORMATS.iter().enumerate() {
            assert_eq!(info.format.info().name, info.name);
            assert_eq!(Format::all().nth(i), Some(info.format));
            for n in std::iter::once(&info.name).chain(info.aliases) {
                assert!(names.insert(*n), "{n} names two formats");
                assert_eq!(n.parse::<Format>(), Ok(info.format));
            }
            let json = serde_json::to_string(&info.format).unwrap();
            assert_eq!(json, format!("\"{}\"", info.name));
            assert_eq!(serde_json::from_str::<Format>(&json).unwrap(), info.format);
            assert!(!info.dump.argv.is_empty() && info.dump.argv.iter().all(|a| !a.is_empty()));
        }
        let err = "bogus".parse::<Format>().unwrap_err().to_string();
        assert!(err.contains("iptables, nft-json, ipvsadm"), "{err}");
    }

    #[test]
    fn agent_choices_have_distinct_path_kinds_and_auto_ranks() {
        let agent: Vec<&FormatInfo> = FORMATS
            .iter()
            .copied()
            .filter(|i| i.dump.agent.is_some())
            .collect();
        let kinds: std::collections::BTreeSet<_> = agent.iter().map(|i| i.dump.path_kind).collect();
        assert_eq!(kinds.len(), agent.len());
        let mut ranks: Vec<u8> = agent
            .iter()
            .filter_map(|i| i.dump.agent.as_ref().and_then(|a| a.auto_rank))
            .collect();
        let n = ranks.len();
        ranks.dedup();
        assert_eq!(ranks.len(), n);
        // A local program for every format the agent guesses.
        assert!(agent.iter().all(|i| {
            let a = i.dump.agent.as_ref().unwrap();
            a.auto_rank.is_none() || a.runs_in == RunsIn::Node
        }));
    }
}
