//! Dump formats and `--format auto` detection.
//!
//! See [`detect_format`] for the entry point and [`Format`] for the names the CLI accepts.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A dump format one of the parsers reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `iptables-save` / `ip6tables-save` of kube-proxy iptables mode (any table layout
    /// since the userspace proxier; `-c` counters accepted).
    Iptables,
    /// `nft -j list table ip kube-proxy` (and `ip6`, or `list ruleset`).
    NftJson,
    /// `ipvsadm -Ln` (also `--exact`, `--stats`, `--persistent-conn`) and `ipvsadm-save -n`.
    Ipvsadm,
    /// `cilium[-dbg] service list` text, Cilium 1.7 to 1.19.
    CiliumServiceList,
    /// `cilium[-dbg] service list -o json` (or `service get ID -o json`).
    CiliumServiceJson,
    /// `cilium[-dbg] bpf lb list`, text or `-o json`.
    CiliumBpfLbList,
    /// `cilium-dbg shell -- db/show frontends` (Cilium 1.17+ load-balancer tables).
    CiliumDbFrontends,
    /// `lb/maps-dump` of the Cilium load-balancer shell (`BE:`/`SVC:`/`REV:` lines).
    CiliumLbMaps,
    /// `conntrack -L` / `-E`, plain or `-o extended` (same as `/proc/net/nf_conntrack`).
    Conntrack,
}

impl Format {
    /// Every format, in the order the CLI lists them.
    pub const ALL: [Format; 9] = [
        Format::Iptables,
        Format::NftJson,
        Format::Ipvsadm,
        Format::CiliumServiceList,
        Format::CiliumServiceJson,
        Format::CiliumBpfLbList,
        Format::CiliumDbFrontends,
        Format::CiliumLbMaps,
        Format::Conntrack,
    ];

    /// The name used by `--format`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Iptables => "iptables",
            Format::NftJson => "nft-json",
            Format::Ipvsadm => "ipvsadm",
            Format::CiliumServiceList => "cilium-service-list",
            Format::CiliumServiceJson => "cilium-service-json",
            Format::CiliumBpfLbList => "cilium-bpf-lb-list",
            Format::CiliumDbFrontends => "cilium-db-frontends",
            Format::CiliumLbMaps => "cilium-lb-maps",
            Format::Conntrack => "conntrack",
        }
    }

    /// Whether this format describes connections ([`crate::ConntrackTable`]) rather than
    /// a load-balancer table.
    pub fn is_conntrack(self) -> bool {
        self == Format::Conntrack
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown `--format` name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown format {0:?}; known: iptables, nft-json, ipvsadm, cilium-service-list, cilium-service-json, cilium-bpf-lb-list, cilium-db-frontends, cilium-lb-maps, conntrack"
)]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let f = match s {
            "iptables" | "iptables-save" | "ip6tables-save" => Format::Iptables,
            "nft-json" | "nft" | "nftables" => Format::NftJson,
            "ipvsadm" | "ipvsadm-save" | "ipvs" => Format::Ipvsadm,
            "cilium-service-list" => Format::CiliumServiceList,
            "cilium-service-json" => Format::CiliumServiceJson,
            "cilium-bpf-lb-list" => Format::CiliumBpfLbList,
            "cilium-db-frontends" => Format::CiliumDbFrontends,
            "cilium-lb-maps" => Format::CiliumLbMaps,
            "conntrack" => Format::Conntrack,
            _ => return Err(UnknownFormat(s.to_string())),
        };
        Ok(f)
    }
}

/// How much of the input [`detect_format`] looks at.
const DETECT_WINDOW: usize = 64 * 1024;

/// Guesses the format of a dump from its first 64 KiB, for `--format auto`.
///
/// Shell prompts, `kubectl exec` notices, CI log prefixes and blank lines before the
/// output are tolerated. Returns `None` when no line is decisive.
pub fn detect_format(input: &[u8]) -> Option<Format> {
    let window = input.get(..DETECT_WINDOW.min(input.len())).unwrap_or(input);
    let text = String::from_utf8_lossy(window);
    let trimmed = text.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Some(f) = detect_json(trimmed)
    {
        return Some(f);
    }
    for raw in text.lines() {
        if let Some(f) = detect_line(raw) {
            return Some(f);
        }
    }
    None
}

fn detect_json(text: &str) -> Option<Format> {
    if text.contains("\"nftables\"") {
        return Some(Format::NftJson);
    }
    if text.contains("\"frontend-address\"") || text.contains("\"backend-addresses\"") {
        return Some(Format::CiliumServiceJson);
    }
    // `cilium bpf lb list -o json`: {"10.96.0.1:443": ["172.18.0.3:6443 (1) (1)", …]}
    let t = text.trim_start().strip_prefix('{')?.trim_start();
    let t = t.strip_prefix('"')?;
    let (key, rest) = t.split_once('"')?;
    if crate::text::parse_socket(key.split(['/', ' ']).next().unwrap_or(key)).is_some()
        && rest
            .trim_start()
            .strip_prefix(':')?
            .trim_start()
            .starts_with('[')
    {
        return Some(Format::CiliumBpfLbList);
    }
    None
}

/// The decisive format of one line, if any.
fn detect_line(raw: &str) -> Option<Format> {
    let line = raw.trim();
    if line.is_empty() {
        return None;
    }
    // iptables-save
    if line.starts_with("# Generated by iptables-save")
        || line.starts_with("# Generated by ip6tables-save")
        || matches!(line, "*nat" | "*filter" | "*mangle" | "*raw" | "*security")
    {
        return Some(Format::Iptables);
    }
    // ipvsadm
    if line.starts_with("IP Virtual Server version")
        || line.starts_with("Prot LocalAddress:Port")
        || line.starts_with("-A -t ")
        || line.starts_with("-A -u ")
        || line.starts_with("-A --sctp-service ")
        || line.starts_with("-A -f ")
        || line.starts_with("-a -t ")
        || line.starts_with("-a -u ")
        || line.starts_with("--add-service ")
    {
        return Some(Format::Ipvsadm);
    }
    let line = crate::iptables::strip_counters(line);
    if let Some(rest) = line
        .strip_prefix("-A ")
        .or_else(|| line.strip_prefix("-I "))
    {
        let mut it = rest.split_ascii_whitespace();
        if let (Some(chain), Some(opt)) = (it.next(), it.next())
            && !chain.starts_with('-')
            && (opt.starts_with('-') || opt == "!")
        {
            return Some(Format::Iptables);
        }
    }
    if line.starts_with(":KUBE-") && line.contains(" [") {
        return Some(Format::Iptables);
    }
    // Cilium table headers
    if line.contains("SERVICE ADDRESS") && line.contains("BACKEND") {
        return Some(Format::CiliumBpfLbList);
    }
    if line.contains("Frontend") && line.contains("Service Type") && line.contains("Backend") {
        return Some(Format::CiliumServiceList);
    }
    if line.starts_with("Address") && line.contains("ServiceName") && line.contains("Backends") {
        return Some(Format::CiliumDbFrontends);
    }
    if line.starts_with("BE: ID=") || line.starts_with("SVC: ID=") || line.starts_with("REV: ID=") {
        return Some(Format::CiliumLbMaps);
    }
    if crate::conntrack::looks_like_entry(line) {
        return Some(Format::Conntrack);
    }
    if crate::ipvs::looks_like_virtual_server(line) {
        return Some(Format::Ipvsadm);
    }
    if crate::cilium::looks_like_db_frontends_row(line) {
        return Some(Format::CiliumDbFrontends);
    }
    if crate::cilium::looks_like_service_list_row(line) {
        return Some(Format::CiliumServiceList);
    }
    if crate::cilium::looks_like_bpf_lb_row(line) {
        return Some(Format::CiliumBpfLbList);
    }
    None
}
