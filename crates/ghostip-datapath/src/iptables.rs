//! Parser of `iptables-save` / `ip6tables-save` dumps of kube-proxy's iptables mode.
//!
//! See [`parse_reader`] (streaming) and [`parse_str`]. The parser reads line by line and
//! keeps only a compact graph of kube-proxy chains (entry rules, chain-to-chain jumps,
//! DNAT targets); the dump text itself is never held. When the dump ends, every entry
//! rule (`KUBE-SERVICES`, `KUBE-NODEPORTS`, and the userspace-era `KUBE-PORTALS-*` /
//! `KUBE-NODEPORT-*`) is followed through `KUBE-FW-*`, `KUBE-EXT-*`, `KUBE-XLB-*`,
//! `KUBE-SVC-*`, `KUBE-SVL-*` and `KUBE-SEP-*` chains to the DNAT targets it can reach.
//!
//! Layouts handled: kube-proxy ≥ 1.28 (comments unquoted when they have no space,
//! `-d IP` without `/32`, `KUBE-SVL`/`KUBE-EXT`), 1.10–1.27 (`KUBE-XLB`, `KUBE-FW`,
//! `-d IP/32`), and the userspace proxier (`KUBE-PORTALS-*`, DNAT directly in
//! `KUBE-SVC-*`). Filter-table `… has no endpoints` REJECT rules become frontends
//! without backends, flagged `no-endpoints`. Partial dumps (`iptables-save | grep`) are
//! read as far as they go: when a `KUBE-SEP-*` chain is missing, the endpoint named in
//! the jump's comment (`ns/svc:port -> 10.0.0.1:80`) is used and counted as unknown.
//!
//! # Errors
//! Only input with no iptables-save line at all is an error; everything else is skipped
//! and counted in [`crate::SkipStats`].

use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;

use memchr::memmem::Finder;

use crate::error::ParseError;
use crate::format::Format;
use crate::model::{
    Backend, Frontend, FrontendKind, LbTable, Location, Protocol, ServiceRef, any_addr,
};
use crate::text::{
    FxMap, LineSink, Tokens, drive_bytes, drive_reader, drive_str, parse_host, unescape,
};

/// What the parser expected when a dump has no iptables-save line at all.
const EXPECTED: &str =
    "iptables-save output (`*table`, `:CHAIN POLICY [p:b]`, `-A CHAIN …`, `COMMIT`)";

/// Parses an `iptables-save` dump held in memory.
pub fn parse_str(input: &str) -> Result<LbTable, ParseError> {
    let mut p = Parser::default();
    drive_str(input, &mut p);
    p.finish()
}

/// Parses an `iptables-save` dump held in memory as bytes (invalid UTF-8 is tolerated).
pub fn parse_bytes(input: &[u8]) -> Result<LbTable, ParseError> {
    let mut p = Parser::default();
    drive_bytes(input, &mut p);
    p.finish()
}

/// Parses an `iptables-save` dump from a reader, line by line.
pub fn parse_reader<R: BufRead>(reader: R) -> Result<LbTable, ParseError> {
    let mut p = Parser::default();
    drive_reader(reader, Format::Iptables, &mut p)?;
    p.finish()
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

// === impl Parser ===

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Table {
    /// No `*table` line seen (grep output): treated like `nat`.
    Unknown,
    Nat,
    Filter,
    Other,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Services,
    NodePorts,
    ExternalServices,
    Portals,
    UserspaceNodePorts,
    Svc,
    Svl,
    Ext,
    Fw,
    Xlb,
    Sep,
    Helper,
    OtherKube,
    NonKube,
}

fn classify(chain: &str) -> Class {
    let Some(rest) = chain.strip_prefix("KUBE-") else {
        return Class::NonKube;
    };
    match rest {
        "SERVICES" => Class::Services,
        "NODEPORTS" => Class::NodePorts,
        "EXTERNAL-SERVICES" => Class::ExternalServices,
        "PORTALS-CONTAINER" | "PORTALS-HOST" => Class::Portals,
        "NODEPORT-CONTAINER" | "NODEPORT-HOST" => Class::UserspaceNodePorts,
        "MARK-MASQ"
        | "MARK-DROP"
        | "POSTROUTING"
        | "FORWARD"
        | "FIREWALL"
        | "PROXY-FIREWALL"
        | "KUBELET-CANARY"
        | "PROXY-CANARY"
        | "LOAD-BALANCER"
        | "NODE-PORT"
        | "IPVS-FILTER"
        | "IPVS-OUT-FILTER"
        | "SOURCE-RANGES-FIREWALL"
        | "EXTERNAL-SERVICES-FIREWALL" => Class::Helper,
        _ if rest.starts_with("SVC-") => Class::Svc,
        _ if rest.starts_with("SVL-") => Class::Svl,
        _ if rest.starts_with("EXT-") => Class::Ext,
        _ if rest.starts_with("FW-") => Class::Fw,
        _ if rest.starts_with("XLB-") => Class::Xlb,
        _ if rest.starts_with("SEP-") => Class::Sep,
        _ => Class::OtherKube,
    }
}

fn is_lb_chain(c: Class) -> bool {
    matches!(
        c,
        Class::Svc | Class::Svl | Class::Ext | Class::Fw | Class::Xlb | Class::Sep
    )
}

/// Targets that mark, accept or return: not load-balancing.
fn is_mark_target(t: &str) -> bool {
    matches!(
        t,
        "KUBE-MARK-MASQ"
            | "KUBE-MARK-DROP"
            | "RETURN"
            | "MARK"
            | "ACCEPT"
            | "MASQUERADE"
            | "KUBE-NODEPORTS"
            | "KUBE-POSTROUTING"
            | "KUBE-NODE-PORT"
            | "KUBE-LOAD-BALANCER"
            | "KUBE-PROXY-FIREWALL"
            | "KUBE-EXTERNAL-SERVICES"
            | "KUBE-FIREWALL"
            | "CONNMARK"
    )
}

/// One rule of an entry chain: a frontend and the chain it jumps to.
struct Entry {
    ip: Option<IpAddr>,
    port: u16,
    proto: Protocol,
    kind: FrontendKind,
    service: Option<ServiceRef>,
    target: u32,
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

static FIND_TO_DEST: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"--to-destination "));
static FIND_RCHECK: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b" --rcheck"));

/// A DNAT target, compact (`SocketAddr` is 32 bytes; this is 20).
type Addr = (IpAddr, u16);

/// A kube-proxy chain name packed into 83 bits (see [`pack_chain`]), stored as three
/// `u32`s so that a map entry with its id is 16 bytes (a `(u64, u32)` key made it 24).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ChainKey([u32; 3]);

impl std::hash::Hash for ChainKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let [lo, mid, hi] = self.0;
        state.write_u64(u64::from(lo) | (u64::from(mid) << 32));
        state.write_u32(hi);
    }
}

/// kube-proxy chain names are `KUBE-XXX-` plus 16 base32 characters: 83 bits, packed
/// into a [`ChainKey`], so chains are interned without a heap allocation each.
fn pack_chain(name: &str) -> Option<ChainKey> {
    let rest = name.as_bytes().strip_prefix(b"KUBE-")?;
    let (tag, suffix): (u32, &[u8]) = match rest {
        [b'S', b'V', b'C', b'-', s @ ..] => (1, s),
        [b'S', b'V', b'L', b'-', s @ ..] => (2, s),
        [b'E', b'X', b'T', b'-', s @ ..] => (3, s),
        [b'S', b'E', b'P', b'-', s @ ..] => (4, s),
        [b'F', b'W', b'-', s @ ..] => (5, s),
        [b'X', b'L', b'B', b'-', s @ ..] => (6, s),
        _ => return None,
    };
    let suffix: &[u8; 16] = suffix.try_into().ok()?;
    let (a, b) = suffix.split_at(8);
    let a = base32_40(a)?;
    let b = base32_40(b)?;
    // 40 + 40 bits of hash and a 3-bit tag, in three words.
    Some(ChainKey([
        a as u32,
        ((a >> 32) | (b << 8)) as u32,
        ((b >> 24) as u32) | (tag << 16),
    ]))
}

/// Base32 digit values (RFC 4648 alphabet, `A`–`Z`, `2`–`7`); 0x80 marks other bytes.
static BASE32: [u8; 256] = {
    let mut t = [0x80u8; 256];
    let mut i = 0;
    while i < 26 {
        t[b'A' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'2' as usize + i] = 26 + i as u8;
        i += 1;
    }
    t
};

/// Eight base32 digits as a 40-bit number, `None` if one is not a base32 digit.
fn base32_40(digits: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    let mut bad = 0u8;
    for &c in digits {
        let d = BASE32.get(usize::from(c)).copied().unwrap_or(0x80);
        bad |= d;
        v = (v << 5) | u64::from(d & 0x1f);
    }
    (bad & 0x80 == 0).then_some(v)
}

/// Position of the last ` -j ` in a rule (the rule's target).
fn rfind_jump(b: &[u8]) -> Option<usize> {
    let mut end = b.len();
    while let Some(j) = memchr::memrchr(b'j', b.get(..end).unwrap_or_default()) {
        if let Some(p) = j.checked_sub(2)
            && b.get(p..p + 4) == Some(b" -j ")
        {
            return Some(p);
        }
        end = j;
    }
    None
}

#[derive(Default)]
struct Parser {
    table: Option<Table>,
    saw_iptables: bool,
    first_foreign: Option<(usize, String)>,
    v6: bool,
    packed: FxMap<ChainKey, u32>,
    /// The chain of the previous rule: rules of one chain are consecutive in a dump, so
    /// most rules find their own chain here without a hash lookup.
    last_from: Option<(ChainKey, u32)>,
    names: FxMap<Box<str>, u32>,
    next_id: u32,
    /// Chain-to-chain jumps (from, to).
    jumps: Vec<(u32, u32)>,
    /// DNAT targets (from, target).
    dnats: Vec<(u32, Addr)>,
    /// Chains with a DNAT rule seen so far.
    has_dnat: Vec<bool>,
    /// Endpoints named by jump comments, kept only while the target chain has no DNAT.
    hints: FxMap<u32, Addr>,
    /// `:KUBE-…` chain declarations seen since the last rule.
    declared: usize,
    affinity: Vec<u32>,
    entries: Vec<Entry>,
    no_endpoints: Vec<NoEndpoints>,
    table_out: LbTable,
}

/// The fields of one `-A` rule that matter here.
#[derive(Default)]
struct Rule<'a> {
    dst: Option<&'a str>,
    dst_neg: bool,
    proto: Option<&'a str>,
    dport: Option<&'a str>,
    comment: Option<&'a str>,
    dst_local: bool,
    target: Option<&'a str>,
    to_dest: Option<&'a str>,
    affinity: bool,
    match_set: bool,
}

fn parse_rule<'a>(toks: &mut Tokens<'a>) -> Rule<'a> {
    let mut r = Rule::default();
    let mut neg = false;
    while let Some(t) = toks.next() {
        match t {
            "!" => {
                neg = true;
                continue;
            }
            "-d" | "--destination" | "--dst" => {
                r.dst = toks.next();
                r.dst_neg = neg;
            }
            "-p" | "--protocol" => {
                let v = toks.next();
                if !neg {
                    r.proto = v;
                }
            }
            "--dport" | "--destination-port" => {
                let v = toks.next();
                if !neg {
                    r.dport = v;
                }
            }
            "--comment" => r.comment = toks.next(),
            "--dst-type" => {
                let v = toks.next();
                if !neg && v == Some("LOCAL") {
                    r.dst_local = true;
                }
            }
            "-j" | "--jump" | "-g" | "--goto" => r.target = toks.next(),
            "--to-destination" => r.to_dest = toks.next(),
            "--rcheck" => r.affinity = true,
            "--match-set" => {
                r.match_set = true;
                toks.next();
            }
            "-m" | "--match" | "-s" | "--source" | "--src" | "-i" | "-o" | "--src-type"
            | "--mode" | "--probability" | "--name" | "--seconds" | "--mask" | "--sport"
            | "--source-port" | "--mark" | "--ctstate" | "--state" | "--set-xmark"
            | "--or-mark" | "--xor-mark" | "--reject-with" | "--nfacct-name" => {
                toks.next();
            }
            _ => {}
        }
        neg = false;
    }
    r
}

/// Kind named by the suffix of an entry comment (`ns/svc:port cluster IP`).
fn kind_from_comment(comment: &str) -> Option<FrontendKind> {
    if comment.ends_with("cluster IP") {
        Some(FrontendKind::ClusterIp)
    } else if comment.ends_with("external IP") {
        Some(FrontendKind::ExternalIp)
    } else if comment.ends_with("loadbalancer IP") {
        Some(FrontendKind::LoadBalancer)
    } else {
        None
    }
}

/// `ns/svc:port` from a comment, skipping the userspace-era `portal for ` prefix.
fn service_from_comment(comment: &str) -> Option<ServiceRef> {
    let c = comment.strip_prefix("portal for ").unwrap_or(comment);
    let first = c.split(' ').next()?;
    ServiceRef::parse_kube_proxy(first)
}

/// The endpoint named by `… -> 10.0.0.1:80` in a jump's comment.
fn hint_from_comment(comment: &str) -> Option<SocketAddr> {
    let (_, after) = comment.rsplit_once(" -> ")?;
    crate::text::parse_socket(after.trim())
}

impl Parser {
    fn intern(&mut self, name: &str) -> u32 {
        let next = self.next_id;
        let id = match pack_chain(name) {
            Some(key) => *self.packed.entry(key).or_insert(next),
            None => match self.names.get(name) {
                Some(&id) => id,
                None => {
                    self.names.insert(name.into(), next);
                    next
                }
            },
        };
        if id == next {
            self.next_id = self.next_id.saturating_add(1);
        }
        id
    }

    /// [`Parser::intern`] for the chain a rule belongs to, remembering the last one.
    fn intern_from(&mut self, chain: &str) -> u32 {
        let Some(key) = pack_chain(chain) else {
            return self.intern(chain);
        };
        if let Some((k, id)) = self.last_from
            && k == key
        {
            return id;
        }
        let next = self.next_id;
        let id = *self.packed.entry(key).or_insert(next);
        if id == next {
            self.next_id = self.next_id.saturating_add(1);
        }
        self.last_from = Some((key, id));
        id
    }

    fn chain_has_dnat(&self, c: u32) -> bool {
        self.has_dnat.get(c as usize).copied().unwrap_or(false)
    }

    fn add_dnat(&mut self, from: u32, addr: Addr) {
        let i = from as usize;
        if self.has_dnat.len() <= i {
            let len = (i + 1).max(self.has_dnat.len() * 2);
            self.has_dnat.resize(len, false);
        }
        if let Some(h) = self.has_dnat.get_mut(i) {
            *h = true;
        }
        if !self.hints.is_empty() {
            self.hints.remove(&from);
        }
        self.dnats.push((from, addr));
    }

    fn unknown(&mut self, no: usize, reason: &'static str, line: &str) {
        self.table_out
            .skipped
            .unknown(Location::Line(no), reason, line);
    }

    fn ignore(&mut self, reason: &'static str) {
        self.table_out.skipped.ignore(reason);
    }

    fn rule(&mut self, no: usize, full_line: &str, body: &str) {
        let body = body.trim_start_matches(' ');
        let (chain, rest) = match memchr::memchr(b' ', body.as_bytes()) {
            Some(i) => (
                body.get(..i).unwrap_or_default(),
                body.get(i..).unwrap_or_default(),
            ),
            None => (body, ""),
        };
        if chain.is_empty() {
            self.unknown(no, "rule without chain name", full_line);
            return;
        }
        let mut toks = Tokens::new(rest);
        let class = classify(chain);
        if body.as_bytes().ends_with(b" -j KUBE-MARK-MASQ") && class != Class::OtherKube {
            // Masquerade marks: a third of a large dump; no need to tokenize them.
            return self.ignore("masquerade/mark/return rule");
        }
        let table = self.table.unwrap_or(Table::Unknown);
        match (table, class) {
            (Table::Other, _) => return self.ignore("rule in a table other than nat/filter"),
            (_, Class::NonKube) => return self.ignore("rule in a non-kube-proxy chain"),
            (_, Class::Helper) => return self.ignore("rule in a kube-proxy helper chain"),
            (_, Class::OtherKube) => {
                return self.unknown(no, "rule in an unknown KUBE-* chain", full_line);
            }
            _ => {}
        }
        if table != Table::Filter && self.fast_path(class, chain, body) {
            return;
        }
        let mut r = parse_rule(&mut toks);
        let comment = r.comment.map(unescape);
        let comment = comment.as_deref().unwrap_or("");
        if let Some(d) = r.dst
            && d.contains(':')
        {
            self.v6 = true;
        }
        // "has no endpoints" REJECT / "has no local endpoints" DROP, in any table.
        if matches!(r.target, Some("REJECT") | Some("DROP")) {
            if comment.contains("has no endpoints") || comment.contains("has no local endpoints") {
                return self.no_endpoints(no, full_line, class, &r, comment);
            }
            return self.ignore("REJECT/DROP rule");
        }
        if table == Table::Filter {
            return self.ignore("filter-table rule");
        }
        if class == Class::ExternalServices {
            return self.ignore("rule in a kube-proxy helper chain");
        }
        let Some(target) = r.target.take() else {
            return self.ignore("rule without target");
        };
        if is_mark_target(target) {
            return self.ignore("masquerade/mark/return rule");
        }
        if r.match_set {
            return self.ignore("ipset match (IPVS mode helper)");
        }
        match class {
            Class::Services | Class::NodePorts | Class::Portals | Class::UserspaceNodePorts => {
                self.entry(no, full_line, class, &r, target, comment);
            }
            Class::Svc | Class::Svl | Class::Ext | Class::Fw | Class::Xlb | Class::Sep => {
                let from = self.intern_from(chain);
                if r.affinity {
                    self.affinity.push(from);
                }
                if target == "DNAT" {
                    match r.to_dest.and_then(|d| parse_dnat(d, self.v6)) {
                        Some(sa) => self.add_dnat(from, (sa.ip(), sa.port())),
                        None => {
                            self.unknown(no, "DNAT without a valid --to-destination", full_line)
                        }
                    }
                } else if is_lb_chain(classify(target)) {
                    let to = self.intern(target);
                    if !self.chain_has_dnat(to)
                        && let Some(sa) = hint_from_comment(comment)
                    {
                        self.hints.insert(to, (sa.ip(), sa.port()));
                    }
                    self.jumps.push((from, to));
                } else {
                    self.unknown(no, "jump to an unknown target", full_line);
                }
            }
            _ => self.unknown(no, "rule in an unknown KUBE-* chain", full_line),
        }
    }

    /// Reads the two rule shapes that make up most of a large dump without tokenizing
    /// them: `KUBE-SEP-… -j DNAT --to-destination ADDR` and `KUBE-SVC-… -j KUBE-SEP-…`.
    /// Returns `false` (nothing recorded) when the rule needs the general path.
    fn fast_path(&mut self, class: Class, chain: &str, body: &str) -> bool {
        let bytes = body.as_bytes();
        if memchr::memchr(b'\\', bytes).is_some() {
            return false;
        }
        let Some(idx) = rfind_jump(bytes) else {
            return false;
        };
        let after = body.get(idx + 4..).unwrap_or_default();
        let target = after.split(' ').next().unwrap_or_default();
        let rest = after.get(target.len()..).unwrap_or_default();
        match class {
            Class::Sep if target == "DNAT" => {
                // kube-proxy writes `--to-destination` right after `-j DNAT`.
                let at = if rest.starts_with(" --to-destination ") {
                    1
                } else {
                    match FIND_TO_DEST.find(rest.as_bytes()) {
                        Some(at) => at,
                        None => return false,
                    }
                };
                let dest = rest.get(at + 17..).unwrap_or_default();
                let dest = dest.split(' ').next().unwrap_or_default();
                let Some(sa) = crate::text::parse_socket(dest) else {
                    return false;
                };
                let from = self.intern_from(chain);
                self.add_dnat(from, (sa.ip(), sa.port()));
                true
            }
            Class::Svc | Class::Svl | Class::Ext | Class::Fw | Class::Xlb
                if rest.trim().is_empty() && is_lb_chain(classify(target)) =>
            {
                let to = self.intern(target);
                if !self.chain_has_dnat(to) {
                    // The comment may name the endpoint: the general path keeps it.
                    return false;
                }
                let from = self.intern_from(chain);
                if FIND_RCHECK.find(bytes).is_some() {
                    self.affinity.push(from);
                }
                self.jumps.push((from, to));
                true
            }
            _ => false,
        }
    }

    fn entry(
        &mut self,
        no: usize,
        full_line: &str,
        class: Class,
        r: &Rule<'_>,
        target: &str,
        comment: &str,
    ) {
        let tclass = classify(target);
        if !is_lb_chain(tclass) {
            return self.unknown(no, "entry rule jumps to an unknown target", full_line);
        }
        let Some(port) = r.dport.and_then(|p| p.parse::<u16>().ok()) else {
            return self.unknown(no, "entry rule without a valid --dport", full_line);
        };
        let proto = match r.proto {
            None => Protocol::Any,
            Some(p) => match Protocol::parse(p) {
                Some(p) => p,
                None => return self.unknown(no, "entry rule with an unknown protocol", full_line),
            },
        };
        let nodeport = matches!(class, Class::NodePorts | Class::UserspaceNodePorts);
        let ip = match (r.dst, r.dst_neg) {
            (Some(d), false) => match parse_host(d) {
                Some(ip) => Some(ip),
                None if nodeport => {
                    return self.ignore("NodePort rule for a destination range (localhost)");
                }
                None => {
                    return self.unknown(no, "entry rule with an invalid destination", full_line);
                }
            },
            _ if nodeport => None,
            _ => return self.unknown(no, "service rule without a destination", full_line),
        };
        let kind = if nodeport {
            FrontendKind::NodePort
        } else if let Some(k) = kind_from_comment(comment) {
            k
        } else {
            match (class, tclass) {
                (Class::Portals, _) => FrontendKind::ClusterIp,
                (_, Class::Fw) => FrontendKind::LoadBalancer,
                (_, Class::Ext | Class::Xlb) => FrontendKind::External,
                _ => FrontendKind::ClusterIp,
            }
        };
        let target = self.intern(target);
        self.entries.push(Entry {
            ip,
            port,
            proto,
            kind,
            service: service_from_comment(comment),
            target,
            line: no,
        });
    }

    fn no_endpoints(&mut self, no: usize, full_line: &str, class: Class, r: &Rule<'_>, c: &str) {
        let Some(port) = r.dport.and_then(|p| p.parse::<u16>().ok()) else {
            return self.unknown(no, "no-endpoints rule without a valid --dport", full_line);
        };
        let proto = r.proto.and_then(Protocol::parse).unwrap_or(Protocol::Any);
        let (ip, kind) = match r.dst.and_then(parse_host) {
            Some(ip) if class == Class::Services => (Some(ip), FrontendKind::ClusterIp),
            Some(ip) => (
                Some(ip),
                kind_from_words(c).unwrap_or(FrontendKind::External),
            ),
            None if r.dst_local || class == Class::NodePorts => (None, FrontendKind::NodePort),
            None => return self.unknown(no, "no-endpoints rule without a destination", full_line),
        };
        let flag = if c.contains("has no local endpoints") {
            "no-local-endpoints"
        } else {
            "no-endpoints"
        };
        self.no_endpoints.push(NoEndpoints {
            ip,
            port,
            proto,
            kind,
            service: service_from_comment(c),
            flag,
        });
    }

    fn finish(mut self) -> Result<LbTable, ParseError> {
        if !self.saw_iptables
            && let Some((no, line)) = self.first_foreign.take()
        {
            return Err(ParseError::unexpected(
                Format::Iptables,
                Location::Line(no),
                EXPECTED,
                &line,
            ));
        }
        let mut out = std::mem::take(&mut self.table_out);
        out.format = Some(Format::Iptables);
        let n = self.next_id as usize;
        drop(std::mem::take(&mut self.names));
        drop(std::mem::take(&mut self.packed));
        drop(std::mem::take(&mut self.has_dnat));
        let (jumps, jump_starts) = csr(std::mem::take(&mut self.jumps), n);
        let (dnats, dnat_starts) = csr(std::mem::take(&mut self.dnats), n);
        let slice = |v: &'_ [(u32, u32)], starts: &[u32], c: u32| -> std::ops::Range<usize> {
            let lo = starts.get(c as usize).copied().unwrap_or(0) as usize;
            let hi = starts.get(c as usize + 1).copied().unwrap_or(0) as usize;
            lo.min(v.len())..hi.min(v.len())
        };
        let out_jumps = |c: u32| -> &[(u32, u32)] {
            jumps
                .get(slice(&jumps, &jump_starts, c))
                .unwrap_or_default()
        };
        let out_dnats = |c: u32| -> &[(u32, Addr)] {
            let lo = dnat_starts.get(c as usize).copied().unwrap_or(0) as usize;
            let hi = dnat_starts.get(c as usize + 1).copied().unwrap_or(0) as usize;
            dnats.get(lo..hi).unwrap_or_default()
        };
        let has_rules = |c: u32| !out_jumps(c).is_empty() || !out_dnats(c).is_empty();
        let mut affinity = vec![false; n];
        for c in &self.affinity {
            if let Some(a) = affinity.get_mut(*c as usize) {
                *a = true;
            }
        }
        let mut seen = vec![0u32; n];
        let mut stamp = 0u32;
        let mut stack = Vec::new();
        for e in &self.entries {
            stamp = stamp.wrapping_add(1);
            let mut fe = Frontend::new(
                e.ip.unwrap_or_else(|| any_addr(self.v6)),
                e.port,
                e.proto,
                e.kind,
            );
            fe.service = e.service.clone();
            stack.clear();
            stack.push(e.target);
            if let Some(s) = seen.get_mut(e.target as usize) {
                *s = stamp;
            }
            if !has_rules(e.target) {
                out.skipped.unknown(
                    Location::Line(e.line),
                    "entry rule jumps to a chain absent from the dump",
                    "",
                );
            }
            while let Some(c) = stack.pop() {
                if affinity.get(c as usize).copied().unwrap_or(false) {
                    fe.add_flag("session-affinity");
                }
                for (_, (ip, port)) in out_dnats(c) {
                    fe.backends.push(Backend::active(*ip, *port));
                }
                for &(_, to) in out_jumps(c) {
                    if !has_rules(to) {
                        match self.hints.get(&to) {
                            Some(&(ip, port)) => {
                                fe.backends.push(Backend::active(ip, port));
                                out.skipped.unknown(
                                    Location::Line(e.line),
                                    "endpoint taken from a jump comment (KUBE-SEP chain absent from the dump)",
                                    "",
                                );
                            }
                            None => out.skipped.unknown(
                                Location::Line(e.line),
                                "jump to a chain absent from the dump",
                                "",
                            ),
                        }
                    } else if let Some(s) = seen.get_mut(to as usize)
                        && *s != stamp
                    {
                        *s = stamp;
                        stack.push(to);
                    }
                }
            }
            out.frontends.push(fe);
        }
        for ne in self.no_endpoints.drain(..) {
            let mut fe = Frontend::new(
                ne.ip.unwrap_or_else(|| any_addr(self.v6)),
                ne.port,
                ne.proto,
                ne.kind,
            );
            fe.service = ne.service;
            fe.add_flag(ne.flag);
            out.frontends.push(fe);
        }
        out.normalize();
        Ok(out)
    }
}

/// Sorts `(from, …)` pairs by `from` and returns them with `starts`, so that the pairs of
/// chain `c` are `v[starts[c]..starts[c + 1]]` (compressed sparse rows).
fn csr<T>(mut v: Vec<(u32, T)>, n: usize) -> (Vec<(u32, T)>, Vec<u32>) {
    v.sort_unstable_by_key(|e| e.0);
    let mut starts = vec![0u32; n + 1];
    for (from, _) in &v {
        if let Some(s) = starts.get_mut(*from as usize + 1) {
            *s += 1;
        }
    }
    for i in 1..starts.len() {
        let prev = starts.get(i - 1).copied().unwrap_or(0);
        if let Some(s) = starts.get_mut(i) {
            *s += prev;
        }
    }
    (v, starts)
}

fn kind_from_words(comment: &str) -> Option<FrontendKind> {
    if comment.contains("external IP") {
        Some(FrontendKind::ExternalIp)
    } else if comment.contains("loadbalancer IP") {
        Some(FrontendKind::LoadBalancer)
    } else {
        None
    }
}

/// `10.0.0.1:80`, `[fd00::1]:80`, or (rare) a bare address with the service port unknown.
fn parse_dnat(d: &str, _v6: bool) -> Option<SocketAddr> {
    crate::text::parse_socket(d)
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
                    self.saw_iptables = true;
                    if self.declared > 0 {
                        // iptables-save declares a table's chains before its rules: size the
                        // chain index once instead of growing it.
                        let n = std::mem::take(&mut self.declared);
                        self.packed.reserve(n);
                        self.has_dnat.reserve(n);
                        self.dnats.reserve(n);
                        self.jumps.reserve(n);
                    }
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
}
