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
//! # Errors
//! Only input with no iptables-save line at all is an error; everything else is skipped
//! and counted in [`crate::SkipStats`].

use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::sync::LazyLock;

use memchr::memmem::{Finder, FinderRev};

use crate::error::ParseError;
use crate::format::Format;
use crate::model::{
    Backend, Frontend, FrontendKind, LbTable, Location, Protocol, ServiceRef, SkipStats, any_addr,
};
use crate::packed::FrontendSink;
use crate::text::{
    ByteLineSink, FxMap, LineSink, Tokens, drive_raw, drive_reader_raw, parse_host, unescape, utf8,
};

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

fn classify(chain: &[u8]) -> Class {
    let Some(rest) = chain.strip_prefix(b"KUBE-".as_slice()) else {
        return Class::NonKube;
    };
    match rest {
        b"SERVICES" => Class::Services,
        b"NODEPORTS" => Class::NodePorts,
        b"EXTERNAL-SERVICES" => Class::ExternalServices,
        b"PORTALS-CONTAINER" | b"PORTALS-HOST" => Class::Portals,
        b"NODEPORT-CONTAINER" | b"NODEPORT-HOST" => Class::UserspaceNodePorts,
        b"MARK-MASQ"
        | b"MARK-DROP"
        | b"POSTROUTING"
        | b"FORWARD"
        | b"FIREWALL"
        | b"PROXY-FIREWALL"
        | b"KUBELET-CANARY"
        | b"PROXY-CANARY"
        | b"LOAD-BALANCER"
        | b"NODE-PORT"
        | b"IPVS-FILTER"
        | b"IPVS-OUT-FILTER"
        | b"SOURCE-RANGES-FIREWALL"
        | b"EXTERNAL-SERVICES-FIREWALL" => Class::Helper,
        _ if rest.starts_with(b"SVC-") => Class::Svc,
        _ if rest.starts_with(b"SVL-") => Class::Svl,
        _ if rest.starts_with(b"EXT-") => Class::Ext,
        _ if rest.starts_with(b"FW-") => Class::Fw,
        _ if rest.starts_with(b"XLB-") => Class::Xlb,
        _ if rest.starts_with(b"SEP-") => Class::Sep,
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

static FIND_TO_DEST: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"--to-destination "));
static FIND_RCHECK: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b" --rcheck"));
static FIND_COMMENT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b" --comment "));
static FIND_ARROW: LazyLock<FinderRev<'static>> = LazyLock::new(|| FinderRev::new(b" -> "));

/// A chain name as an 83-bit key that sorts like the name: a 3-bit tag for the chain
/// kind (`KUBE-EXT` < `KUBE-FW` < `KUBE-SEP` < `KUBE-SVC` < `KUBE-SVL` < `KUBE-XLB`)
/// then the 16 base32 characters of kube-proxy's hash, 5 bits each (see
/// [`pack_chain`]). Names of another shape get tag 7 and an interned number.
/// Three `u32`s, so rows holding a key stay 4-byte aligned.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct ChainKey {
    hi: u32,
    mid: u32,
    lo: u32,
}

impl ChainKey {
    /// Tag for names that do not pack (interned).
    const NAMED: u32 = 7;

    fn named(id: u32) -> Self {
        Self {
            hi: Self::NAMED << 16,
            mid: 0,
            lo: id,
        }
    }

    fn tag(self) -> usize {
        (self.hi >> 16) as usize & 7
    }

    /// 32 bits that sort like the key (equal keys have equal prefixes, a smaller key never
    /// a larger prefix): the tag, then the first 29 bits of kube-proxy's hash, or the
    /// interned number of another name.
    fn prefix(self) -> u32 {
        if self.tag() == Self::NAMED as usize {
            (Self::NAMED << 29) | self.lo.min((1 << 29) - 1)
        } else {
            ((self.tag() as u32) << 29) | (self.body() >> 35) as u32
        }
    }

    /// The 64 bits below the tag: uniformly spread for kube-proxy's hashed names, so a
    /// position in a sorted array can be interpolated from them.
    fn body(self) -> u64 {
        (u64::from(self.hi & 0xffff) << 48) | (u64::from(self.mid) << 16) | u64::from(self.lo >> 16)
    }
}

/// kube-proxy chain names are `KUBE-XXX-` plus 16 base32 characters: packed into a
/// [`ChainKey`] without a heap allocation, in the order of the names.
fn pack_chain(name: &[u8]) -> Option<ChainKey> {
    let (tag, at) = lb_tag(name)?;
    let suffix: &[u8; 16] = name.get(at..)?.try_into().ok()?;
    let (a, b) = suffix.split_at(8);
    let a = base32_40(a)?;
    let b = base32_40(b)?;
    // tag << 80 | a << 40 | b, in three words.
    Some(ChainKey {
        hi: (tag << 16) | (a >> 24) as u32,
        mid: (((a & 0xff_ffff) << 8) | (b >> 32)) as u32,
        lo: b as u32,
    })
}

/// The tag of a load-balancing chain name (`KUBE-EXT-`, `KUBE-FW-`, `KUBE-SEP-`,
/// `KUBE-SVC-`, `KUBE-SVL-`, `KUBE-XLB-`: 1 to 6, in name order) and where the part after
/// its prefix starts; `None` for any other name. Its first eight bytes are read as one
/// word and compared with the six prefixes'.
#[inline(always)]
fn lb_tag(name: &[u8]) -> Option<(u32, usize)> {
    const fn w(s: &[u8; 8]) -> u64 {
        u64::from_le_bytes(*s)
    }
    const EXT: u64 = w(b"KUBE-EXT");
    const FW: u64 = w(b"KUBE-FW-");
    const SEP: u64 = w(b"KUBE-SEP");
    const SVC: u64 = w(b"KUBE-SVC");
    const SVL: u64 = w(b"KUBE-SVL");
    const XLB: u64 = w(b"KUBE-XLB");
    let tag = match word_at(name, 0)? {
        FW => return Some((2, 8)),
        EXT => 1,
        SEP => 3,
        SVC => 4,
        SVL => 5,
        XLB => 6,
        _ => return None,
    };
    (name.get(8) == Some(&b'-')).then_some((tag, 9))
}

/// The length a packed chain name starting `b` has: `KUBE-FW-` and 16 characters, or
/// `KUBE-XXX-` and 16 ([`pack_chain`] checks the rest).
fn packed_len(b: &[u8]) -> usize {
    if b.get(5..8) == Some(b"FW-") { 24 } else { 25 }
}

/// Eight bytes of `b` from `at` as a little-endian word, if there are eight.
fn word_at(b: &[u8], at: usize) -> Option<u64> {
    let w: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(w))
}

/// The lanes of `x` whose byte is a space or a control byte (below 0x21), as their high
/// bits. Exact for the lowest flagged lane (a borrow only flags lanes above a flagged one);
/// bytes from 0x80 up are never flagged.
fn space_or_control_lanes(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    x.wrapping_sub(0x21 * ONES) & !x & (0x80 * ONES)
}

/// The length of the token `b` starts with: its bytes above the space (eight at a time).
fn graphic_len(b: &[u8]) -> usize {
    let mut n = 0;
    while let Some(x) = word_at(b, n) {
        let low = space_or_control_lanes(x);
        if low != 0 {
            return n + (low.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + b
        .get(n..)
        .unwrap_or_default()
        .iter()
        .take_while(|&&c| c > b' ')
        .count()
}

/// Eight base32 digits as a 40-bit number, `None` if one is not a base32 digit: the
/// eight bytes are checked and converted together in one 64-bit word (two range tests
/// per byte lane, then three shift-and-merge steps that pack the 5-bit values).
fn base32_40(digits: &[u8]) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let w: [u8; 8] = digits.try_into().ok()?;
    let x = u64::from_le_bytes(w);
    // Per byte lane (all below 0x80, so the additions do not carry into the next lane):
    // high bit set when the byte is >= lo, resp. clear when it is <= hi.
    let ge = |lo: u8| x.wrapping_add(u64::from(0x80 - lo) * ONES) & HIGH;
    let le = |hi: u8| !x.wrapping_add(u64::from(0x7f - hi) * ONES) & HIGH;
    let digit = ge(b'2') & le(b'7');
    let letter = ge(b'A') & le(b'Z');
    if x & HIGH != 0 || (digit | letter) != HIGH {
        return None;
    }
    // Digit values: `2`–`7` are 0–5, `A`–`Z` 6–31 (no lane borrows: every byte is valid).
    let v = x - u64::from(b'2') * ONES - (letter >> 7) * u64::from(b'A' - 6 - b'2');
    // Lane i holds digit i (the first character in the low byte): merge pairs, then
    // quads, then the two halves, first digit most significant.
    let t = ((v & 0x00ff_00ff_00ff_00ff) << 5) | ((v >> 8) & 0x00ff_00ff_00ff_00ff);
    let u = ((t & 0x0000_ffff_0000_ffff) << 10) | ((t >> 16) & 0x0000_ffff_0000_ffff);
    Some(((u & 0xffff_ffff) << 20) | (u >> 32))
}

/// Whether `b` starts with `s`, compared eight bytes at a time. Inlined with a literal
/// `s`, the loop unrolls into a few word compares instead of a call to `bcmp` (the
/// literals of kube-proxy's layouts are up to 42 bytes long).
#[inline(always)]
fn starts_with_words(b: &[u8], s: &[u8]) -> bool {
    if b.len() < s.len() {
        return false;
    }
    if s.len() < 8 {
        return b.get(..s.len()) == Some(s);
    }
    let mut at = 0;
    while at + 8 <= s.len() {
        if word_at(b, at) != word_at(s, at) {
            return false;
        }
        at += 8;
    }
    // The last word overlaps the one before it.
    at == s.len() || word_at(b, s.len() - 8) == word_at(s, s.len() - 8)
}

/// Whether `a` and `b` are the same chain name ([`starts_with_words`] of equal lengths).
#[inline(always)]
fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && starts_with_words(a, b)
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

/// The unread rest of a rule, for [`Parser::kube_layout`].
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    /// Consumes `s` when the rest starts with it.
    #[inline(always)]
    fn lit(&mut self, s: &[u8]) -> bool {
        if !starts_with_words(self.0, s) {
            return false;
        }
        self.0 = self.0.get(s.len()..).unwrap_or_default();
        true
    }

    /// A plain token up to the next space: not empty, and without a tab, quote or
    /// backslash (bytes that would make the tokenizer read it differently), nor a newline
    /// (so a cursor running past the end of a line, see [`Parser::line_at`], stops there).
    #[inline]
    fn word(&mut self) -> Option<&'a [u8]> {
        // Words here are short (`tcp`, a probability): eight bytes at a time while none
        // is a space, control byte, quote or backslash, then one byte at a time (which
        // decides), no memchr call.
        const ONES: u64 = 0x0101_0101_0101_0101;
        let has = |x: u64, c: u8| {
            let y = x ^ (u64::from(c) * ONES);
            y.wrapping_sub(ONES) & !y & (0x80 * ONES) != 0
        };
        let mut n = 0;
        while let Some(x) = word_at(self.0, n) {
            if space_or_control_lanes(x) != 0 || has(x, b'"') || has(x, b'\\') {
                break;
            }
            n += 8;
        }
        for &b in self.0.get(n..).unwrap_or_default() {
            match b {
                b' ' => break,
                b'\t' | b'"' | b'\\' | b'\n' => return None,
                _ => n += 1,
            }
        }
        if n == 0 {
            return None;
        }
        let (w, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(w)
    }

    /// The comment token: a quoted one without backslashes or newlines (its inside,
    /// `true`) or a plain word (`false`).
    fn comment(&mut self) -> Option<(&'a [u8], bool)> {
        let Some(r) = self.0.strip_prefix(b"\"") else {
            return self.word().map(|w| (w, false));
        };
        let q = memchr::memchr3(b'"', b'\\', b'\n', r)?;
        if r.get(q) != Some(&b'"') {
            return None;
        }
        let (inner, rest) = r.split_at_checked(q)?;
        self.0 = rest.get(1..).unwrap_or_default();
        Some((inner, true))
    }

    /// What kube-proxy writes in a `KUBE-SEP` chain before the DNAT address:
    /// ` -p P [-m comment --comment C] -m P -j DNAT --to-destination ` (the comment left
    /// out above 1 000 endpoints, `largeClusterEndpointsThreshold`, which is how a large
    /// dump looks; its TCP form compared as one literal first).
    #[inline(always)]
    fn dnat_head(&mut self) -> bool {
        self.lit(b" -p tcp -m tcp -j DNAT --to-destination ")
            || self.lit(b" -p ")
                && self.word().is_some()
                && (!self.lit(b" -m comment --comment ") || self.comment().is_some())
                && (!self.lit(b" -m recent --set --name ") || self.recent_tail())
                && self.lit(b" -m ")
                && self.word().is_some()
                && self.lit(b" -j DNAT --to-destination ")
    }

    /// The rest of the `recent` match kube-proxy writes for session affinity, after its
    /// `--name` (iptables-save prints the options in this order): `NAME --mask MASK
    /// --rsource`. The tokenizer reads NAME and MASK as option values whatever they say,
    /// and `--set`, `--reap` and `--rsource` change nothing, so the layout reads these
    /// rules as it does.
    fn recent_tail(&mut self) -> bool {
        self.word().is_some()
            && self.lit(b" --mask ")
            && self.word().is_some()
            && self.lit(b" --rsource")
    }

    /// What kube-proxy writes in a load-balancing chain before a jump's target:
    /// ` [-m comment --comment C] [-m statistic --mode random --probability N] -j `, or
    /// for session affinity ` [-m comment --comment C] -m recent --rcheck --seconds N
    /// --reap --name NAME --mask MASK --rsource -j `; gives the comment (empty when left
    /// out, as above 1 000 endpoints), whether it was quoted, and whether the rule checks
    /// affinity (`--rcheck`).
    #[inline(always)]
    fn jump_head(&mut self) -> Option<(&'a [u8], bool, bool)> {
        let (comment, quoted) = if self.lit(b" -m comment --comment ") {
            self.comment()?
        } else {
            (&[][..], false)
        };
        let affinity = self.lit(b" -m recent --rcheck --seconds ");
        if affinity
            && !(self.word().is_some() && self.lit(b" --reap --name ") && self.recent_tail())
        {
            return None;
        }
        if !affinity
            && self.lit(b" -m statistic --mode random --probability ")
            && self.word().is_none()
        {
            return None;
        }
        self.lit(b" -j ").then_some((comment, quoted, affinity))
    }
}

/// A jump run: source chain and the index of its first row in the jump rows.
type Run = (ChainKey, u32);
/// A jump row: target chain and the endpoint named by the jump's comment.
type JumpRow = (ChainKey, PAddr);

/// A backend address in 8 bytes: IPv4 inline, IPv6 as an index into the parser's list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct PAddr {
    ip: u32,
    port: u16,
    /// 0: none, 4: IPv4, 6: IPv6 (index).
    family: u16,
}

impl PAddr {
    const NONE: PAddr = PAddr {
        ip: 0,
        port: 0,
        family: 0,
    };

    /// Flag on a jump row's address: the target chain's one DNAT (see [`resolve_direct`]),
    /// not the endpoint named by the comment.
    const RESOLVED: u16 = 0x100;

    /// Flag on a DNAT row's address while [`drop_resolved_dnats`] runs: a jump took it.
    const TAKEN: u16 = 0x200;
}

/// Where the rows of one chain key are in a sorted array: each tag's band is found
/// once, then a key's position inside its band is interpolated from the key (hashed
/// names are spread evenly) and corrected by a galloping search, so a lookup touches a
/// cache line or two instead of the twenty a binary search would.
struct Bands {
    start: [usize; 9],
}

impl Bands {
    fn new<T>(v: &[T], k: impl Fn(&T) -> ChainKey) -> Self {
        let mut start = [0usize; 9];
        for (t, s) in start.iter_mut().enumerate() {
            *s = v.partition_point(|x| k(x).tag() < t);
        }
        start[8] = v.len();
        Self { start }
    }

    /// The band of `key`'s tag in `v` (its start) and the interpolated position of
    /// `key` in it.
    fn guess<'v, T>(
        &self,
        v: &'v [T],
        key: ChainKey,
        k: impl Fn(&T) -> ChainKey,
    ) -> (usize, &'v [T], usize) {
        let t = key.tag();
        let s = self.start.get(t).copied().unwrap_or(0);
        let e = self.start.get(t + 1).copied().unwrap_or(s);
        let band = v.get(s..e).unwrap_or_default();
        let n = band.len();
        let (Some(first), Some(last)) = (band.first(), band.last()) else {
            return (s, band, 0);
        };
        let (lo, hi, x) = (k(first).body(), k(last).body(), key.body());
        let g = if x <= lo {
            0
        } else if x >= hi {
            n - 1
        } else {
            let g = u128::from(x - lo) * (n as u128 - 1) / u128::from(hi - lo);
            usize::try_from(g).unwrap_or(n - 1).min(n - 1)
        };
        (s, band, g)
    }

    /// The rows of `key` in `v` (sorted by key).
    fn range<T>(&self, v: &[T], key: ChainKey, k: impl Fn(&T) -> ChainKey) -> Range<usize> {
        let (s, band, g) = self.guess(v, key, &k);
        let n = band.len();
        if n == 0 {
            return s..s;
        }
        let lower = |a: usize, b: usize| {
            a + band
                .get(a..b)
                .unwrap_or_default()
                .partition_point(|y| k(y) < key)
        };
        let below = |i: usize| band.get(i).is_some_and(|y| k(y) < key);
        let lb = if below(g) {
            let mut from = g + 1;
            let mut step = 1;
            loop {
                let i = g + step;
                if i >= n {
                    break lower(from, n);
                }
                if !below(i) {
                    break lower(from, i);
                }
                from = i + 1;
                step *= 2;
            }
        } else {
            let mut to = g;
            let mut step = 1;
            loop {
                if step > g {
                    break lower(0, to);
                }
                let i = g - step;
                if below(i) {
                    break lower(i + 1, to);
                }
                to = i;
                step *= 2;
            }
        };
        let mut ub = lb;
        while band.get(ub).is_some_and(|y| k(y) == key) {
            ub += 1;
        }
        s + lb..s + ub
    }
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
    /// Tests: read every line through the general path (the fast paths must not change
    /// any result).
    #[cfg(test)]
    general_only: bool,
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

/// The last space-separated token of `b` (all of `b` without a space).
fn last_token(b: &[u8]) -> &[u8] {
    b.get(memchr::memrchr(b' ', b).map_or(0, |i| i + 1)..)
        .unwrap_or_default()
}

/// Options whose next token [`parse_rule`] reads as their value.
fn takes_value(tok: &[u8]) -> bool {
    matches!(
        tok,
        b"-d"
            | b"--destination"
            | b"--dst"
            | b"-p"
            | b"--protocol"
            | b"--dport"
            | b"--destination-port"
            | b"--comment"
            | b"--dst-type"
            | b"-j"
            | b"--jump"
            | b"-g"
            | b"--goto"
            | b"--to-destination"
            | b"--match-set"
            | b"-m"
            | b"--match"
            | b"-s"
            | b"--source"
            | b"--src"
            | b"-i"
            | b"-o"
            | b"--src-type"
            | b"--mode"
            | b"--probability"
            | b"--name"
            | b"--seconds"
            | b"--mask"
            | b"--sport"
            | b"--source-port"
            | b"--mark"
            | b"--ctstate"
            | b"--state"
            | b"--set-xmark"
            | b"--or-mark"
            | b"--xor-mark"
            | b"--reject-with"
            | b"--nfacct-name"
    )
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
    ServiceRef::parse_kube_proxy(service_token(comment)?)
}

/// The `ns/svc:port` token of a comment, when it is one.
fn service_token(comment: &str) -> Option<&str> {
    let c = comment.strip_prefix("portal for ").unwrap_or(comment);
    let first = c.split(' ').next()?;
    ServiceRef::kube_proxy_parts(first).map(|_| first)
}

/// The endpoint named by `… -> 10.0.0.1:80` in a jump's comment.
fn hint_from_comment(comment: &str) -> Option<SocketAddr> {
    let (_, after) = comment.rsplit_once(" -> ")?;
    crate::text::parse_socket(after.trim())
}

/// The part after the last ` -> ` was not UTF-8 (the general path then reads the line).
struct NotUtf8;

/// [`hint_from_comment`] of a comment's bytes, with the same result. The address after
/// the arrow has no `>`, so the last `>` is usually the arrow's; a plain IPv4 address
/// has nothing to trim and is read without UTF-8 validation.
fn hint_from_comment_bytes(comment: &[u8]) -> Result<Option<SocketAddr>, NotUtf8> {
    let arrow = match memchr::memrchr(b'>', comment) {
        Some(g) if g >= 2 && comment.get(g - 2..g + 2) == Some(b" -> ") => Some(g - 2),
        Some(_) => FIND_ARROW.rfind(comment),
        None => None,
    };
    let Some(p) = arrow else {
        return Ok(None);
    };
    let after = comment.get(p + 4..).unwrap_or_default();
    if let Some(sa) = crate::text::parse_socket_v4_plain(after) {
        return Ok(Some(sa));
    }
    let after = std::str::from_utf8(after).map_err(|_| NotUtf8)?;
    Ok(crate::text::parse_socket(after.trim()))
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
        let class = classify(chain.as_bytes());
        if body.as_bytes().ends_with(b" -j KUBE-MARK-MASQ") && class != Class::OtherKube {
            // Masquerade marks: a third of a large dump; no need to tokenize them.
            return self.ignore_mark();
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
        // Lines the byte path did not take (e.g. with `iptables-save -c` counters).
        if table != Table::Filter
            && !self.general_only()
            && self.fast_path(class, chain.as_bytes(), body.as_bytes())
        {
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
            return self.ignore_mark();
        }
        if r.match_set {
            return self.ignore("ipset match (IPVS mode helper)");
        }
        match class {
            Class::Services | Class::NodePorts | Class::Portals | Class::UserspaceNodePorts => {
                self.entry(no, full_line, class, &r, target, comment);
            }
            Class::Svc | Class::Svl | Class::Ext | Class::Fw | Class::Xlb | Class::Sep => {
                let from = self.key_of(chain);
                if r.affinity {
                    self.affinity.push(from);
                }
                if target == "DNAT" {
                    match r.to_dest.and_then(|d| parse_dnat(d, self.v6)) {
                        Some(sa) => self.add_dnat(from, sa),
                        None => {
                            self.unknown(no, "DNAT without a valid --to-destination", full_line)
                        }
                    }
                } else if is_lb_chain(classify(target.as_bytes())) {
                    let to = self.key_of(target);
                    self.add_jump(from, to, hint_from_comment(comment));
                } else {
                    self.unknown(no, "jump to an unknown target", full_line);
                }
            }
            _ => self.unknown(no, "rule in an unknown KUBE-* chain", full_line),
        }
    }

    /// Reads the lines that make up nearly all of a large dump as bytes, without UTF-8
    /// validation or tokenizing: chain declarations, masquerade marks,
    /// `KUBE-SEP-… -j DNAT --to-destination ADDR` and `KUBE-SVC-… -j KUBE-SEP-…`.
    /// Returns `false` (nothing recorded) when the line needs the general path, which
    /// then reads it exactly as if this one did not exist.
    fn fast_line(&mut self, no: usize, raw: &[u8]) -> bool {
        match raw.first() {
            Some(b':') => {
                self.saw_iptables = true;
                if raw.starts_with(b":KUBE-") {
                    self.declared += 1;
                }
                return true;
            }
            Some(b'-') => {}
            _ => return false,
        }
        // No leading or trailing space to trim (the general path trims Unicode space).
        if !raw.starts_with(b"-A KUBE-") || !raw.last().is_some_and(u8::is_ascii_graphic) {
            return false;
        }
        let body = raw.get(3..).unwrap_or_default();
        let Some(i) = memchr::memchr(b' ', body) else {
            return false;
        };
        let chain = body.get(..i).unwrap_or_default();
        let class = classify(chain);
        self.rule_seen();
        if body.ends_with(b" -j KUBE-MARK-MASQ") && class != Class::OtherKube {
            self.ignore_mark();
            return true;
        }
        let table = self.table.unwrap_or(Table::Unknown);
        match (table, class) {
            (Table::Other, _) => {
                self.ignore("rule in a table other than nat/filter");
                return true;
            }
            (_, Class::Helper) => {
                self.ignore("rule in a kube-proxy helper chain");
                return true;
            }
            (Table::Filter, _) | (_, Class::OtherKube | Class::NonKube) => return false,
            (_, Class::Services | Class::NodePorts) => {
                return self.entry_layout(no, raw, class, chain, body);
            }
            _ => {}
        }
        self.fast_path(class, chain, body)
    }

    /// The four layouts that make up nearly all of a large dump, read where their line
    /// starts, without searching for its end first (see [`ByteLineSink::line_at`]):
    /// a chain declaration `:KUBE-XXX-… - [0:0]`, and in the nat table the
    /// masquerade mark `-A KUBE-SEP-… -s ADDR -j KUBE-MARK-MASQ`, the DNAT rule and the
    /// jump of [`Parser::kube_layout`] with an IPv4 destination, resp. a packed target.
    /// Each layout ends with a packed chain name, an IPv4 address or a literal, so its
    /// `\n` is where the layout says; any other byte there, or any other shape, gives
    /// `None` with nothing recorded, and the line is split and read as before. What is
    /// recorded is what [`Parser::fast_line`] records for the same line.
    fn line_at(&mut self, rest: &[u8]) -> Option<usize> {
        if self.general_only() {
            return None;
        }
        match rest.first()? {
            b':' => {
                let name = rest.get(1..)?;
                let n = packed_len(name);
                if !name.starts_with(b"KUBE-")
                    || graphic_len(name.get(..n)?) != n
                    || !name.get(n..)?.starts_with(b" - [0:0]\n")
                {
                    return None;
                }
                self.saw_iptables = true;
                self.declared += 1;
                Some(1 + n + 8)
            }
            b'-' if self.table == Some(Table::Nat) => self.rule_at(rest),
            _ => None,
        }
    }

    /// The rule layouts of [`Parser::line_at`].
    fn rule_at(&mut self, rest: &[u8]) -> Option<usize> {
        let body = rest.strip_prefix(b"-A ")?;
        let n = packed_len(body);
        let chain = body.get(..n)?;
        let mut c = Cursor(body.get(n..)?);
        // Where the line's `\n` is, from what the cursor has left and the length of what
        // ends the line.
        let end = |c: &Cursor<'_>, tail: usize| rest.len() - c.0.len() + tail;
        if c.lit(b" -s ") {
            // The rule is ignored whatever its chain's hash, as long as the name is one
            // token of a load-balancing kind (what `fast_line` checks).
            if lb_tag(chain).is_none() || graphic_len(chain) != chain.len() {
                return None;
            }
            let addr = graphic_len(c.0);
            c.0 = c.0.get(addr..)?;
            if addr == 0
                || (c.lit(b" -m comment --comment ") && c.comment().is_none())
                || !c.lit(b" -j KUBE-MARK-MASQ\n")
            {
                return None;
            }
            self.rule_seen();
            self.ignore_mark();
            return Some(end(&c, 0) - 1);
        }
        if chain.get(5..9) == Some(b"SEP-") {
            let key = pack_chain(chain)?;
            if !c.dnat_head() {
                return None;
            }
            let (sa, len) = crate::text::parse_socket_v4_prefix(c.0)?;
            if c.0.get(len) != Some(&b'\n') {
                return None;
            }
            self.rule_seen();
            self.add_dnat(key, sa);
            return Some(end(&c, len));
        }
        let (comment, quoted, affinity) = c.jump_head()?;
        let t = packed_len(c.0);
        let to = pack_chain(c.0.get(..t)?)?;
        if c.0.get(t) != Some(&b'\n') {
            return None;
        }
        // An unquoted comment has no space, so it names no endpoint.
        let hint = if quoted {
            hint_from_comment_bytes(comment).ok()?
        } else {
            None
        };
        let from = self.source_key(chain)?;
        self.rule_seen();
        if affinity {
            self.affinity.push(from);
        }
        self.add_jump(from, to, hint);
        Some(end(&c, t))
    }

    /// The service rules kube-proxy writes in `KUBE-SERVICES` and `KUBE-NODEPORTS`
    /// (`[-d IP[/32]] -p P -m comment --comment C -m P --dport N -j KUBE-…`), matched in
    /// one pass like [`Parser::kube_layout`] and handed to [`Parser::entry`] exactly as
    /// the tokenizer would. Returns `false` (nothing recorded) for any other shape.
    fn entry_layout(
        &mut self,
        no: usize,
        raw: &[u8],
        class: Class,
        chain: &[u8],
        body: &[u8],
    ) -> bool {
        let Ok(full_line) = std::str::from_utf8(raw) else {
            return false;
        };
        fn text(b: &[u8]) -> Option<&str> {
            std::str::from_utf8(b).ok()
        }
        let mut c = Cursor(body.get(chain.len()..).unwrap_or_default());
        let dst = if c.lit(b" -d ") {
            match c.word().and_then(text) {
                Some(d) => Some(d),
                None => return false,
            }
        } else {
            None
        };
        let matched = (|| {
            if !c.lit(b" -p ") {
                return None;
            }
            let proto = c.word().and_then(text)?;
            if !c.lit(b" -m comment --comment ") {
                return None;
            }
            let (comment, _) = c.comment()?;
            let comment = text(comment)?;
            if !c.lit(b" -m ") {
                return None;
            }
            c.word()?;
            if !c.lit(b" --dport ") {
                return None;
            }
            let dport = c.word().and_then(text)?;
            if !c.lit(b" -j ") {
                return None;
            }
            // The target is the rest of the line; a packed name has no space or tab.
            pack_chain(c.0)?;
            Some((proto, comment, dport, text(c.0)?))
        })();
        let Some((proto, comment, dport, target)) = matched else {
            return false;
        };
        if dst.is_some_and(|d| d.contains(':')) {
            self.v6 = true;
        }
        let r = Rule {
            dst,
            proto: Some(proto),
            dport: Some(dport),
            comment: Some(comment),
            target: Some(target),
            ..Rule::default()
        };
        self.entry(no, full_line, class, &r, target, comment);
        true
    }

    fn fast_path(&mut self, class: Class, chain: &[u8], body: &[u8]) -> bool {
        if self.kube_layout(class, chain, body) {
            return true;
        }
        // One pass for backslashes (escapes), tabs (the tokenizer splits on them too,
        // the scans below only on spaces) and quotes: at most one quoted token, and the
        // target not inside or after it.
        let (mut q1, mut q2) = (None, None);
        for i in memchr::memchr3_iter(b'\\', b'"', b'\t', body) {
            if body.get(i) != Some(&b'"') || q2.is_some() {
                return false;
            }
            if q1.is_none() {
                q1 = Some(i);
            } else {
                q2 = Some(i);
            }
        }
        let Some(idx) = rfind_jump(body) else {
            return false;
        };
        if q2.is_some_and(|q| q > idx) || (q1.is_some() && q2.is_none()) {
            return false;
        }
        // `-j` must not be the value of the option before it (the tokenizer would read it so).
        if takes_value(last_token(body.get(..idx).unwrap_or_default())) {
            return false;
        }
        let after = body.get(idx + 4..).unwrap_or_default();
        let tlen = memchr::memchr(b' ', after).unwrap_or(after.len());
        let target = after.get(..tlen).unwrap_or_default();
        let rest = after.get(tlen..).unwrap_or_default();
        match class {
            Class::Sep if target == b"DNAT" => {
                // kube-proxy writes `--to-destination` right after `-j DNAT`.
                let at = if rest.starts_with(b" --to-destination ") {
                    1
                } else {
                    match FIND_TO_DEST.find(rest) {
                        // Not the value of the option before it.
                        Some(at)
                            if !takes_value(last_token(rest.get(..at).unwrap_or_default())) =>
                        {
                            at
                        }
                        _ => return false,
                    }
                };
                let from_dest = rest.get(at + 17..).unwrap_or_default();
                let end = memchr::memchr(b' ', from_dest).unwrap_or(from_dest.len());
                let dest = from_dest.get(..end).unwrap_or_default();
                // The tokenizer keeps the last `--to-destination`.
                if FIND_TO_DEST
                    .find(from_dest.get(end..).unwrap_or_default())
                    .is_some()
                {
                    return false;
                }
                let Some(sa) = crate::text::parse_socket_bytes(dest) else {
                    return false;
                };
                let Some(from) = pack_chain(chain) else {
                    return false;
                };
                self.add_dnat(from, sa);
                true
            }
            Class::Svc | Class::Svl | Class::Ext | Class::Fw | Class::Xlb
                if rest.is_empty() && is_lb_chain(classify(target)) =>
            {
                let (Some(from), Some(to)) = (self.source_key(chain), pack_chain(target)) else {
                    return false;
                };
                let hint = match (q1, q2) {
                    (Some(q1), Some(q2)) => {
                        // One quoted token: the comment, if `--comment` is right before it,
                        // is not itself the value of the option before it (`--comment
                        // --comment "…"`), and is the rule's last `--comment`.
                        let before = body.get(..q1).unwrap_or_default();
                        let Some(opt) = before.strip_suffix(b" --comment ") else {
                            return false;
                        };
                        if takes_value(last_token(opt))
                            || FIND_COMMENT
                                .find(body.get(q2..).unwrap_or_default())
                                .is_some()
                        {
                            return false;
                        }
                        let inner = body.get(q1 + 1..q2).unwrap_or_default();
                        match hint_from_comment_bytes(inner) {
                            Ok(h) => h,
                            Err(NotUtf8) => return false,
                        }
                    }
                    // No quote: an unquoted comment has no space, so it names no endpoint.
                    _ => None,
                };
                // `--rcheck` outside the quoted comment (the tokenizer's view).
                let (head, tail) = match (q1, q2) {
                    (Some(a), Some(b)) => (
                        body.get(..a).unwrap_or_default(),
                        body.get(b..).unwrap_or_default(),
                    ),
                    _ => (body, &[][..]),
                };
                if FIND_RCHECK.find(head).is_some() || FIND_RCHECK.find(tail).is_some() {
                    self.affinity.push(from);
                }
                self.add_jump(from, to, hint);
                true
            }
            _ => false,
        }
    }

    /// The two rule layouts kube-proxy writes for nearly every line of a large dump,
    /// matched in one left-to-right pass that reads each byte once:
    /// `KUBE-SEP-… -p P -m comment --comment C -m P -j DNAT --to-destination ADDR` and
    /// `KUBE-SVC-… -m comment --comment C [-m statistic --mode random --probability N]
    /// -j KUBE-…`, with session affinity's `recent` match where kube-proxy puts it (see
    /// [`Cursor::dnat_head`], [`Cursor::jump_head`]). The layout pins every token, so the
    /// tokenizer's view is known without the general scans (no other option, no second
    /// `-j` or `--comment`, no escape). Returns `false` (nothing recorded) for any other
    /// shape.
    fn kube_layout(&mut self, class: Class, chain: &[u8], body: &[u8]) -> bool {
        let mut c = Cursor(body.get(chain.len()..).unwrap_or_default());
        match class {
            Class::Sep => {
                if !c.dnat_head() {
                    return false;
                }
                // The address is the rest of the line: one token when it parses.
                let (Some(sa), Some(from)) =
                    (crate::text::parse_socket_bytes(c.0), pack_chain(chain))
                else {
                    return false;
                };
                self.add_dnat(from, sa);
                true
            }
            Class::Svc | Class::Svl | Class::Ext | Class::Fw | Class::Xlb => {
                let Some((comment, quoted, affinity)) = c.jump_head() else {
                    return false;
                };
                // The target is the rest of the line; a packed name has no space or tab.
                let (Some(from), Some(to)) = (self.source_key(chain), pack_chain(c.0)) else {
                    return false;
                };
                // An unquoted comment has no space, so it names no endpoint.
                let hint = if quoted {
                    match hint_from_comment_bytes(comment) {
                        Ok(h) => h,
                        Err(NotUtf8) => return false,
                    }
                } else {
                    None
                };
                if affinity {
                    self.affinity.push(from);
                }
                self.add_jump(from, to, hint);
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
        let tclass = classify(target.as_bytes());
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
        let target = self.key_of(target);
        self.entries.push(Entry {
            ip,
            port,
            proto,
            kind,
            service: service_token(comment).map(Box::from),
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

    /// Resolves every entry rule to its backends and hands each frontend to `sink`.
    fn finish_into(mut self, sink: &mut impl FrontendSink) -> Result<SkipStats, ParseError> {
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
        drop(std::mem::take(&mut self.names));
        let mut out = std::mem::take(&mut self.skipped);
        if self.marks > 0 {
            out.ignored += self.marks;
            *out.ignored_by_reason
                .entry("masquerade/mark/return rule".to_string())
                .or_insert(0) += self.marks;
        }
        // Sort-merge instead of a chain map: DNAT rows sorted by chain (legacy
        // iptables-save lists chains sorted, so this is one pass over sorted input), jump
        // runs sorted by source chain; lookups interpolate into them.
        let mut dnats = std::mem::take(&mut self.dnats);
        if !dnats.is_sorted_by_key(|d| d.0) {
            dnats.sort_by_key(|d| d.0);
        }
        let (runs, mut jumps) = sorted_runs(
            std::mem::take(&mut self.runs),
            std::mem::take(&mut self.jumps),
        );
        resolve_direct(&mut jumps, &mut dnats);
        let dnat_rows = dnats.len();
        drop_resolved_dnats(&mut dnats, &runs, &self.entries);
        let affinity = KeySet::new(std::mem::take(&mut self.affinity));
        let dnat_bands = Bands::new(&dnats, |d| d.0);
        let run_bands = Bands::new(&runs, |r| r.0);
        let dnats_of = |c: ChainKey| -> &[(ChainKey, PAddr)] {
            dnats
                .get(dnat_bands.range(&dnats, c, |d| d.0))
                .unwrap_or_default()
        };
        let run_of = |c: ChainKey| -> Option<usize> {
            let r = run_bands.range(&runs, c, |r| r.0);
            (!r.is_empty()).then_some(r.start)
        };
        let jumps_of = |run: usize| -> &[(ChainKey, PAddr)] {
            let lo = runs.get(run).map_or(0, |r| r.1 as usize);
            let hi = runs.get(run + 1).map_or(jumps.len(), |r| r.1 as usize);
            jumps.get(lo..hi).unwrap_or_default()
        };
        let v6_addrs = std::mem::take(&mut self.v6_addrs);
        let addr = |a: PAddr| -> Option<(IpAddr, u16)> {
            match a.family {
                4 => Some((IpAddr::V4(Ipv4Addr::from(a.ip)), a.port)),
                6 => v6_addrs
                    .get(a.ip as usize)
                    .map(|ip| (IpAddr::V6(*ip), a.port)),
                _ => None,
            }
        };
        let has_affinity = |c: ChainKey| affinity.contains(c);
        // Each DNAT is usually reached from one frontend, some from a NodePort or an
        // external address too.
        sink.expect(
            self.entries.len() + self.no_endpoints.len(),
            dnat_rows + dnat_rows / 4,
        );
        let mut seen = vec![0u32; runs.len()];
        let mut stamp = 0u32;
        let mut stack: Vec<(ChainKey, Option<usize>)> = Vec::new();
        for e in std::mem::take(&mut self.entries) {
            stamp = stamp.wrapping_add(1);
            let mut fe = Frontend::new(
                e.ip.unwrap_or_else(|| any_addr(self.v6)),
                e.port,
                e.proto,
                e.kind,
            );
            fe.service = e.service.as_deref().and_then(ServiceRef::parse_kube_proxy);
            let root = run_of(e.target);
            // A KUBE-SVC chain's jumps are its backends: sized once instead of grown.
            if let Some(r) = root {
                fe.backends.reserve(jumps_of(r).len());
            }
            if root.is_none() && dnats_of(e.target).is_empty() {
                out.unknown(
                    Location::Line(e.line),
                    "entry rule jumps to a chain absent from the dump",
                    "",
                );
            }
            if let Some(s) = root.and_then(|r| seen.get_mut(r)) {
                *s = stamp;
            }
            stack.clear();
            stack.push((e.target, root));
            while let Some((c, run)) = stack.pop() {
                if has_affinity(c) {
                    fe.add_flag("session-affinity");
                }
                for (_, a) in dnats_of(c) {
                    if let Some((ip, port)) = addr(*a) {
                        fe.backends.push(Backend::active(ip, port));
                    }
                }
                let Some(run) = run else { continue };
                for &(to, hint) in jumps_of(run) {
                    let to_run = run_of(to);
                    if to_run.is_none()
                        && hint.family & PAddr::RESOLVED != 0
                        && let Some((ip, port)) = addr(PAddr {
                            family: hint.family & !PAddr::RESOLVED,
                            ..hint
                        })
                    {
                        // A KUBE-SEP with one DNAT, resolved by the merge.
                        if has_affinity(to) {
                            fe.add_flag("session-affinity");
                        }
                        fe.backends.push(Backend::active(ip, port));
                        continue;
                    }
                    if let Some(r) = to_run {
                        if let Some(s) = seen.get_mut(r)
                            && *s != stamp
                        {
                            *s = stamp;
                            stack.push((to, Some(r)));
                        }
                        continue;
                    }
                    let to_dnats = dnats_of(to);
                    if !to_dnats.is_empty() {
                        // A chain of DNATs only (a KUBE-SEP): read in place.
                        if has_affinity(to) {
                            fe.add_flag("session-affinity");
                        }
                        for (_, a) in to_dnats {
                            if let Some((ip, port)) = addr(*a) {
                                fe.backends.push(Backend::active(ip, port));
                            }
                        }
                        continue;
                    }
                    match addr(hint) {
                        Some((ip, port)) => {
                            fe.backends.push(Backend::active(ip, port));
                            out.unknown(
                                Location::Line(e.line),
                                "endpoint taken from a jump comment (KUBE-SEP chain absent from the dump)",
                                "",
                            );
                        }
                        None => out.unknown(
                            Location::Line(e.line),
                            "jump to a chain absent from the dump",
                            "",
                        ),
                    }
                }
            }
            sink.frontend(fe);
        }
        for ne in std::mem::take(&mut self.no_endpoints) {
            let mut fe = Frontend::new(
                ne.ip.unwrap_or_else(|| any_addr(self.v6)),
                ne.port,
                ne.proto,
                ne.kind,
            );
            fe.service = ne.service;
            fe.add_flag(ne.flag);
            sink.frontend(fe);
        }
        Ok(out)
    }
}

/// A set of chain keys asked about once per jump (the chains with session affinity): a
/// bit per 16-bit key prefix answers most questions with one load from 8 KiB, and only
/// a set bit leads to the binary search. The tag is in the prefix, so the `KUBE-SEP`
/// targets of jumps never share a bit with the `KUBE-SVC` chains that carry affinity.
struct KeySet {
    bits: Vec<u64>,
    keys: Vec<ChainKey>,
}

impl KeySet {
    fn new(mut keys: Vec<ChainKey>) -> Self {
        keys.sort_unstable();
        keys.dedup();
        let mut bits = Vec::new();
        if !keys.is_empty() {
            bits = vec![0u64; (1 << 16) / 64];
            for k in &keys {
                let b = Self::bit(*k);
                if let Some(w) = bits.get_mut(b / 64) {
                    *w |= 1 << (b % 64);
                }
            }
        }
        Self { bits, keys }
    }

    fn bit(k: ChainKey) -> usize {
        (k.prefix() >> 16) as usize
    }

    fn contains(&self, k: ChainKey) -> bool {
        let b = Self::bit(k);
        self.bits
            .get(b / 64)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
            && self.keys.binary_search(&k).is_ok()
    }
}

/// Replaces the address of each jump row whose target is a chain with exactly one DNAT
/// row by that DNAT's address, flagged [`PAddr::RESOLVED`] (the comment's endpoint is only
/// used for targets without rules, so it is not needed there). `dnats` is sorted by key.
///
/// The jumps are read in their own order and each looks its target up in a bucket index
/// of the DNAT rows' largest tag band (the `KUBE-SEP` chains): the first row of each value
/// of the top 16 bits of the hash (256 KiB, stays in cache), then the two or three rows of
/// that bucket, which are consecutive. Each lookup is one cache miss that does not depend
/// on the previous one (sorting the jumps by target and merging, as before, chased a
/// dependent miss per jump through the sort); the jumps go in groups of [`GROUP`] whose
/// rows are touched first, so that many of these misses are in flight at once. Targets
/// of other tags (rare) use [`Bands::range`].
fn resolve_direct(jumps: &mut [JumpRow], dnats: &mut [(ChainKey, PAddr)]) {
    const BITS: u32 = 16;
    let bucket = |k: ChainKey| (k.body() >> (64 - BITS)) as usize;
    let bands = Bands::new(dnats, |d| d.0);
    let (tag, lo, hi) = (0..8)
        .map(|t| {
            let s = bands.start.get(t).copied().unwrap_or(0);
            let e = bands.start.get(t + 1).copied().unwrap_or(s);
            (t, s, e)
        })
        .max_by_key(|&(_, s, e)| e - s)
        .unwrap_or((0, 0, 0));
    // `first[b]..first[b + 1]`: the band's rows whose bucket is `b`.
    let mut first = vec![0u32; (1 << BITS) + 1];
    for (key, _) in dnats.get(lo..hi).unwrap_or_default() {
        if let Some(c) = first.get_mut(bucket(*key) + 1) {
            *c += 1;
        }
    }
    // Counts to starts: `first[b]` is where bucket `b` begins, `first[b + 1]` where it ends.
    let mut at = u32::try_from(lo).unwrap_or(u32::MAX);
    for c in first.iter_mut() {
        at = at.saturating_add(*c);
        *c = at;
    }
    let start = |b: usize| first.get(b).copied().unwrap_or(0) as usize;
    for group in jumps.chunks_mut(GROUP) {
        // First touch each jump's bucket with a short loop of independent loads, so the
        // processor has many of their cache misses in flight at once; the lookups below
        // then find the rows in cache. (Looked up one by one, the misses overlapped
        // little: a lookup is a long loop body with branches, and the processor reaches
        // only a few jumps ahead.)
        let mut touched = 0u32;
        for row in group.iter() {
            if row.0.tag() == tag {
                let at = start(bucket(row.0));
                touched ^= dnats.get(at).map_or(0, |r| r.0.lo);
            }
        }
        std::hint::black_box(touched);
        for row in group.iter_mut() {
            let range = if row.0.tag() == tag {
                let b = bucket(row.0);
                start(b)..start(b + 1)
            } else {
                bands.range(dnats, row.0, |d| d.0)
            };
            let Some(rows) = dnats.get_mut(range) else {
                continue;
            };
            let mut hit = rows.iter_mut().filter(|r| r.0 == row.0);
            if let (Some(taken), None) = (hit.next(), hit.next()) {
                let family = taken.1.family & !PAddr::TAKEN;
                row.1 = PAddr {
                    family: family | PAddr::RESOLVED,
                    ..taken.1
                };
                taken.1.family = family | PAddr::TAKEN;
            }
        }
    }
}

/// How many jumps [`resolve_direct`] touches before it looks them up.
const GROUP: usize = 32;

/// Drops the DNAT rows that jumps took in [`resolve_direct`] and that nothing else looks
/// up (a chain whose one DNAT was taken is looked up again only when an entry rule jumps
/// to it or it has jumps of its own), and gives their memory back: at 150 000 endpoints
/// that is nearly every row, 3 MB the resolution no longer needs while it builds the
/// frontends. `dnats` is sorted by chain.
fn drop_resolved_dnats(dnats: &mut Vec<(ChainKey, PAddr)>, runs: &[Run], entries: &[Entry]) {
    const KEEP: u16 = PAddr::TAKEN << 1;
    let bands = Bands::new(dnats, |d| d.0);
    let roots = entries.iter().map(|e| e.target);
    for key in roots.chain(runs.iter().map(|r| r.0)) {
        let range = bands.range(dnats, key, |d| d.0);
        for row in dnats.get_mut(range).unwrap_or_default() {
            row.1.family |= KEEP;
        }
    }
    // Nearly every row goes: the kept ones are copied out and the whole vector freed.
    let kept: Vec<(ChainKey, PAddr)> = dnats
        .iter()
        .filter(|(_, a)| a.family & PAddr::TAKEN == 0 || a.family & KEEP != 0)
        .map(|&(key, a)| {
            let family = a.family & !(PAddr::TAKEN | KEEP);
            (key, PAddr { family, ..a })
        })
        .collect();
    *dnats = kept;
}

/// Jump runs sorted by source chain with one run per chain. Dumps list a chain's rules
/// together and legacy iptables-save sorts chains, so this is usually a check; otherwise
/// the rows are regrouped (keeping each chain's rule order).
fn sorted_runs(runs: Vec<Run>, jumps: Vec<JumpRow>) -> (Vec<Run>, Vec<JumpRow>) {
    if runs.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0)) {
        return (runs, jumps);
    }
    let mut rows: Vec<(ChainKey, ChainKey, PAddr)> = Vec::with_capacity(jumps.len());
    for (i, &(from, lo)) in runs.iter().enumerate() {
        let hi = runs.get(i + 1).map_or(jumps.len(), |r| r.1 as usize);
        for &(to, hint) in jumps.get(lo as usize..hi).unwrap_or_default() {
            rows.push((from, to, hint));
        }
    }
    drop(jumps);
    rows.sort_by_key(|r| r.0);
    let mut runs = Vec::new();
    let mut jumps = Vec::with_capacity(rows.len());
    for (from, to, hint) in rows {
        if runs.last().is_none_or(|r: &Run| r.0 != from) {
            runs.push((from, u32::try_from(jumps.len()).unwrap_or(u32::MAX)));
        }
        jumps.push((to, hint));
    }
    (runs, jumps)
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
}

impl ByteLineSink for Parser {
    fn line_bytes(&mut self, no: usize, raw: &[u8]) {
        if self.general_only() || !self.fast_line(no, raw) {
            self.line(no, &utf8(raw));
        }
    }

    fn line_at(&mut self, rest: &[u8]) -> Option<usize> {
        Parser::line_at(self, rest)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ghostip_testkit::dumps::{GenModel, GenSpec};

    /// The nat table's rule lines of a generated dump reordered: the two halves
    /// interleaved, so chains are out of order and split into several runs.
    fn interleaved(dump: &str) -> String {
        let lines: Vec<&str> = dump.lines().collect();
        let nat = lines.iter().position(|l| *l == "*nat").unwrap();
        let commit = nat + lines[nat..].iter().position(|l| *l == "COMMIT").unwrap();
        let first_rule = nat
            + lines[nat..]
                .iter()
                .position(|l| l.starts_with("-A"))
                .unwrap();
        let rules = &lines[first_rule..commit];
        let (a, b) = rules.split_at(rules.len() / 2);
        let mut mixed: Vec<&str> = Vec::new();
        for i in 0..a.len().max(b.len()) {
            mixed.extend(b.get(i).copied());
            mixed.extend(a.get(i).copied());
        }
        let mut out: Vec<&str> = lines[..first_rule].to_vec();
        out.extend(mixed);
        out.extend(&lines[commit..]);
        out.join("\n")
    }

    #[test]
    fn unsorted_and_split_chains_give_the_same_table() {
        let dump = GenModel::generate(&GenSpec::new(60, 400)).iptables_save();
        let sorted = parse_str(&dump).unwrap();
        assert!(sorted.backend_count() >= 400, "{}", sorted.backend_count());
        let mixed = parse_str(&interleaved(&dump)).unwrap();
        assert_eq!(sorted.frontends, mixed.frontends);
        assert_eq!(sorted.skipped.unknown, mixed.skipped.unknown);
    }

    /// A `KUBE-SEP` chain whose one DNAT a jump resolves stays readable where it is also
    /// reached another way: straight from an entry rule, or as a chain with jumps of its own.
    #[test]
    fn resolved_dnats_stay_readable_from_entry_rules_and_chains_with_jumps() {
        let dump = "*nat
:KUBE-SERVICES - [0:0]
:KUBE-SEP-BBBBBBBBBBBBBBBB - [0:0]
:KUBE-SEP-CCCCCCCCCCCCCCCC - [0:0]
:KUBE-SEP-DDDDDDDDDDDDDDDD - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment \"default/a:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SERVICES -d 10.96.0.2/32 -p tcp -m comment --comment \"default/b:http cluster IP\" -m tcp --dport 80 -j KUBE-SEP-BBBBBBBBBBBBBBBB
-A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -m tcp -j DNAT --to-destination 10.244.1.5:8080
-A KUBE-SEP-CCCCCCCCCCCCCCCC -p tcp -m tcp -j DNAT --to-destination 10.244.1.6:8080
-A KUBE-SEP-CCCCCCCCCCCCCCCC -j KUBE-SEP-DDDDDDDDDDDDDDDD
-A KUBE-SEP-DDDDDDDDDDDDDDDD -p tcp -m tcp -j DNAT --to-destination 10.244.1.7:8080
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m statistic --mode random --probability 0.5 -j KUBE-SEP-BBBBBBBBBBBBBBBB
-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-CCCCCCCCCCCCCCCC
COMMIT
";
        let t = parse_str(dump).unwrap();
        let backends = |ip: &str| -> Vec<String> {
            let f = t.frontends.iter().find(|f| f.ip.to_string() == ip).unwrap();
            f.backends
                .iter()
                .map(|b| format!("{}:{}", b.ip, b.port))
                .collect()
        };
        assert_eq!(
            backends("10.96.0.1"),
            ["10.244.1.5:8080", "10.244.1.6:8080", "10.244.1.7:8080"]
        );
        assert_eq!(backends("10.96.0.2"), ["10.244.1.5:8080"]);
        let packed = crate::parse_reader_packed(Format::Iptables, dump.as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(packed.backend_count(), 4);
    }

    #[test]
    fn jump_comments_stand_in_for_absent_sep_chains() {
        // `iptables-save | grep KUBE-SVC`: the KUBE-SEP chains are not in the dump.
        let dump = "\
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.1.5:53\" -m statistic --mode random --probability 0.5 -j KUBE-SEP-AAAAAAAAAAAAAAAA
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.2.7:53\" -j KUBE-SEP-BBBBBBBBBBBBBBBB
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment kube-system/kube-dns:dns -j KUBE-SEP-CCCCCCCCCCCCCCCC
";
        let t = parse_str(dump).unwrap();
        assert_eq!(t.frontends.len(), 1);
        let backends: Vec<String> = t.frontends[0]
            .backends
            .iter()
            .map(|b| format!("{}:{}", b.ip, b.port))
            .collect();
        assert_eq!(backends, ["10.244.1.5:53", "10.244.2.7:53"]);
        let reasons = &t.skipped.unknown_by_reason;
        assert_eq!(
            reasons.get("endpoint taken from a jump comment (KUBE-SEP chain absent from the dump)"),
            Some(&2)
        );
        assert_eq!(
            reasons.get("jump to a chain absent from the dump"),
            Some(&1)
        );
        // Once the chains are there, their DNATs win over the comments.
        let full = format!(
            "{dump}-A KUBE-SEP-AAAAAAAAAAAAAAAA -p udp -m udp -j DNAT --to-destination 10.244.1.6:53\n\
-A KUBE-SEP-BBBBBBBBBBBBBBBB -p udp -m udp -j DNAT --to-destination 10.244.2.7:53\n\
-A KUBE-SEP-CCCCCCCCCCCCCCCC -p udp -m udp -j DNAT --to-destination 10.244.3.8:53\n"
        );
        let t = parse_str(&full).unwrap();
        let backends: Vec<String> = t.frontends[0]
            .backends
            .iter()
            .map(|b| format!("{}:{}", b.ip, b.port))
            .collect();
        assert_eq!(
            backends,
            ["10.244.1.6:53", "10.244.2.7:53", "10.244.3.8:53"]
        );
        assert_eq!(t.skipped.unknown, 0, "{:?}", t.skipped);
    }

    /// Base32 values digit by digit, the reference for [`base32_40`].
    fn base32_reference(digits: &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for &c in digits {
            let d = match c {
                b'2'..=b'7' => c - b'2',
                b'A'..=b'Z' => c - b'A' + 6,
                _ => return None,
            };
            v = (v << 5) | u64::from(d);
        }
        (digits.len() == 8).then_some(v)
    }

    proptest::proptest! {
        /// The word-at-a-time conversion agrees with the digit-by-digit one, on base32
        /// strings and on any bytes.
        #[test]
        fn base32_word_agrees_with_digits(
            s in "[2-7A-Z]{8}",
            any in proptest::collection::vec(proptest::prelude::any::<u8>(), 8),
            near in proptest::collection::vec(0x2fu8..0x5d, 8),
        ) {
            proptest::prop_assert_eq!(base32_40(s.as_bytes()), base32_reference(s.as_bytes()));
            proptest::prop_assert_eq!(base32_40(&any), base32_reference(&any));
            proptest::prop_assert_eq!(base32_40(&near), base32_reference(&near));
        }
    }

    #[test]
    fn base32_edges() {
        for s in [
            b"22222222",
            b"ZZZZZZZZ",
            b"77777777",
            b"AAAAAAAA",
            b"2A7Z2A7Z",
        ] {
            assert_eq!(base32_40(s), base32_reference(s), "{s:?}");
        }
        for s in [
            b"1AAAAAAA",
            b"AAAAAAA8",
            b"@AAAAAAA",
            b"AAAAAAA[",
            b"aAAAAAAA",
            b"AAAA\xffAAA",
        ] {
            assert_eq!(base32_40(s), None, "{s:?}");
        }
        assert_eq!(base32_40(b"AAAAAAA"), None);
    }

    #[test]
    fn packed_keys_sort_like_the_names() {
        let names = [
            "KUBE-EXT-22FAKWHLDKLP34RB",
            "KUBE-EXT-Z2FAKWHLDKLP34RB",
            "KUBE-FW-2222222222222222",
            "KUBE-SEP-2224LCQFH75Z3J6X",
            "KUBE-SEP-222ALCQFH75Z3J6X",
            "KUBE-SEP-ZZZZZZZZZZZZZZZ7",
            "KUBE-SEP-ZZZZZZZZZZZZZZZA",
            "KUBE-SVC-2232J6IWSDDVYEVN",
            "KUBE-SVL-AAAAAAAAAAAAAAAA",
            "KUBE-XLB-AAAAAAAAAAAAAAAA",
        ];
        let mut sorted = names;
        sorted.sort_unstable();
        let keys: Vec<ChainKey> = sorted
            .iter()
            .map(|n| pack_chain(n.as_bytes()).unwrap())
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert!(pack_chain(b"KUBE-SEP-A").is_none());
        assert!(pack_chain(b"KUBE-SEP-AAAAAAAAAAAAAAA1").is_none());
    }

    proptest::proptest! {
        /// The word compare of a chain name's prefix says what the classification says:
        /// a load-balancing chain exactly when `classify` does, on kube-proxy's names, on
        /// their near misses and on any bytes.
        #[test]
        fn lb_tag_agrees_with_classify(
            kind in "(KUBE-)?(EXT|FW|SEP|SVC|SVL|XLB|SERVICES|MARK-MASQ|EXTERNAL-SERVICES|E|F)?[-_]?",
            tail in "[2-7A-Z-]{0,20}",
            any in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..30),
        ) {
            for name in [format!("{kind}{tail}").into_bytes(), any] {
                proptest::prop_assert_eq!(
                    lb_tag(&name).is_some(),
                    is_lb_chain(classify(&name)),
                    "{:?}", String::from_utf8_lossy(&name)
                );
            }
        }

        /// The word compares agree with the slice ones.
        #[test]
        fn word_compares_agree_with_slices(
            a in proptest::collection::vec(b'a'..b'e', 0..48),
            b in proptest::collection::vec(b'a'..b'e', 0..48),
        ) {
            proptest::prop_assert_eq!(starts_with_words(&a, &b), a.starts_with(&b));
            proptest::prop_assert_eq!(same_name(&a, &b), a == b);
            let ext: Vec<u8> = b.iter().chain(&a).copied().collect();
            proptest::prop_assert!(starts_with_words(&ext, &b));
            proptest::prop_assert!(same_name(&a, &a.clone()));
        }
    }

    proptest::proptest! {
        /// The bucket lookup resolves exactly the jumps whose target has one DNAT row, as a
        /// scan of all rows does, with keys crowded in a few buckets or spread over all of
        /// them, several tags, and chains with no, one or two DNAT rows.
        #[test]
        fn resolve_direct_agrees_with_a_scan(
            raw in proptest::collection::vec((0u32..8, proptest::prelude::any::<u64>(), 0u8..3, 0u8..3), 0..3000),
            picks in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<bool>()), 0..3000),
        ) {
            let keys: Vec<ChainKey> = raw
                .iter()
                .map(|&(tag, body, spread, _)| {
                    let hi = (tag << 16) | match spread { 0 => 0, 1 => (body >> 60) as u32, _ => (body >> 48) as u32 & 0xffff };
                    ChainKey { hi, mid: (body >> 16) as u32 & if spread == 0 { 0xf } else { u32::MAX }, lo: body as u32 }
                })
                .collect();
            let mut dnats: Vec<(ChainKey, PAddr)> = Vec::new();
            for (i, (&key, &(_, _, _, rows))) in keys.iter().zip(&raw).enumerate() {
                for r in 0..rows {
                    dnats.push((key, PAddr { ip: i as u32, port: u16::from(r), family: 4 }));
                }
            }
            dnats.sort_by_key(|d| d.0);
            let mut jumps: Vec<JumpRow> = picks
                .iter()
                .filter(|_| !keys.is_empty())
                .map(|(at, own)| {
                    let key = if *own { keys[at.index(keys.len())] } else { ChainKey { hi: 4 << 16, mid: 7, lo: at.index(1000) as u32 } };
                    (key, PAddr::NONE)
                })
                .collect();
            let mut expected = jumps.clone();
            let mut expected_dnats = dnats.clone();
            for row in &mut expected {
                let hits: Vec<usize> = (0..expected_dnats.len()).filter(|&i| expected_dnats[i].0 == row.0).collect();
                if let [one] = hits[..] {
                    let a = expected_dnats[one].1;
                    let family = a.family & !PAddr::TAKEN;
                    row.1 = PAddr { family: family | PAddr::RESOLVED, ..a };
                    expected_dnats[one].1.family = family | PAddr::TAKEN;
                }
            }
            resolve_direct(&mut jumps, &mut dnats);
            proptest::prop_assert_eq!(jumps, expected);
            proptest::prop_assert_eq!(dnats, expected_dnats);
        }

        /// The affinity set answers exactly like a binary search of its sorted keys.
        #[test]
        fn key_set_is_a_sorted_search(
            keys in proptest::collection::vec((0u32..7, proptest::prelude::any::<u64>()), 0..40),
            probes in proptest::collection::vec((0u32..7, proptest::prelude::any::<u64>()), 0..40),
        ) {
            let key = |(tag, body): (u32, u64)| ChainKey {
                hi: (tag << 16) | (body >> 48) as u32,
                mid: (body >> 16) as u32,
                lo: (body as u32) << 16,
            };
            let keys: Vec<ChainKey> = keys.into_iter().map(key).collect();
            let set = KeySet::new(keys.clone());
            // Members, keys that share a member's bit (its prefix) but not the key, and others.
            let near = keys.iter().map(|k| ChainKey { lo: k.lo ^ (1 << 16), ..*k });
            for k in keys.iter().copied().chain(near).chain(probes.into_iter().map(key)) {
                proptest::prop_assert_eq!(set.contains(k), keys.contains(&k));
            }
        }

        /// A key's prefix never sorts against the key: `a < b` gives `prefix(a) <=
        /// prefix(b)`, for packed names and interned ones.
        #[test]
        fn prefixes_sort_like_keys(
            a in (0u32..8, proptest::prelude::any::<u64>()),
            b in (0u32..8, proptest::prelude::any::<u64>()),
        ) {
            let key = |(tag, body): (u32, u64)| if tag == ChainKey::NAMED {
                ChainKey::named(body as u32)
            } else {
                ChainKey { hi: (tag << 16) | (body >> 48) as u32, mid: (body >> 16) as u32, lo: (body as u32) << 16 }
            };
            let (ka, kb) = (key(a), key(b));
            if ka < kb {
                proptest::prop_assert!(ka.prefix() <= kb.prefix());
            }
            if ka == kb {
                proptest::prop_assert_eq!(ka.prefix(), kb.prefix());
            }
        }
    }

    #[test]
    fn kube_proxy_layouts_take_the_one_pass_path() {
        let dump = GenModel::generate(&GenSpec::new(40, 300)).iptables_save();
        let mut p = Parser::default();
        let (mut dnats, mut jumps, mut affinity) = (0, 0, 0);
        for line in dump.lines() {
            let Some(body) = line.strip_prefix("-A ") else {
                continue;
            };
            let chain = body.split(' ').next().unwrap();
            let class = classify(chain.as_bytes());
            let dnat = class == Class::Sep && line.contains(" -j DNAT ");
            let jump = class == Class::Svc && line.contains(" -j KUBE-SEP-");
            // Session affinity's rules included (`-m recent --set` / `--rcheck`).
            if dnat || jump {
                assert!(
                    p.kube_layout(class, chain.as_bytes(), body.as_bytes()),
                    "{line}"
                );
                dnats += usize::from(dnat);
                jumps += usize::from(jump);
                affinity += usize::from(line.contains(" --rcheck "));
            }
        }
        assert!(
            dnats >= 250 && jumps >= 250 && affinity >= 10,
            "{dnats} {jumps} {affinity}"
        );
        assert_eq!((p.dnats.len(), p.jumps.len()), (dnats, jumps));
        assert_eq!(p.affinity.len(), affinity);
        // Service rules with a packed target: the entry layout.
        let mut entries = 0;
        for (no, line) in dump.lines().enumerate() {
            let Some(body) = line.strip_prefix("-A ") else {
                continue;
            };
            let chain = body.split(' ').next().unwrap();
            let class = classify(chain.as_bytes());
            let target = body.rsplit(' ').next().unwrap();
            if matches!(class, Class::Services | Class::NodePorts)
                && pack_chain(target.as_bytes()).is_some()
            {
                assert!(
                    p.entry_layout(
                        no + 1,
                        line.as_bytes(),
                        class,
                        chain.as_bytes(),
                        body.as_bytes()
                    ),
                    "{line}"
                );
                entries += 1;
            }
        }
        assert!(entries >= 40, "{entries}");
        assert_eq!(p.entries.len(), entries);
        // Above 1 000 endpoints kube-proxy writes these rules without comments: lines of the
        // lab's real kube-proxy 1.36.3 at 150 007 endpoints (`lab/scenarios/large-truth
        // --cluster-ip`, `iptables-save -t nat` in node-1).
        let mut large = Parser::default();
        for body in [
            "KUBE-SEP-222G7KHXNUYF5DMR -p tcp -m tcp -j DNAT --to-destination 100.64.244.113:8080",
            "KUBE-SVC-225ZWSX6OBJKOH5T -m statistic --mode random --probability 0.06666666688 -j KUBE-SEP-MV6SZLZG344WRPS4",
            "KUBE-SVC-225ZWSX6OBJKOH5T -j KUBE-SEP-222G7KHXNUYF5DMR",
        ] {
            let chain = body.split(' ').next().unwrap();
            let class = classify(chain.as_bytes());
            assert!(
                large.kube_layout(class, chain.as_bytes(), body.as_bytes()),
                "{body}"
            );
        }
        assert_eq!((large.dnats.len(), large.jumps.len()), (1, 2));
        assert!(large.jumps.iter().all(|j| j.1 == PAddr::NONE));
        // And they give what the general path gives.
        let dump = "*nat
:KUBE-SEP-222G7KHXNUYF5DMR - [0:0]
:KUBE-SEP-MV6SZLZG344WRPS4 - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-225ZWSX6OBJKOH5T - [0:0]
-A KUBE-SEP-222G7KHXNUYF5DMR -s 100.64.244.113/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-222G7KHXNUYF5DMR -p tcp -m tcp -j DNAT --to-destination 100.64.244.113:8080
-A KUBE-SEP-MV6SZLZG344WRPS4 -s 100.64.30.9/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-MV6SZLZG344WRPS4 -p tcp -m tcp -j DNAT --to-destination 100.64.30.9:8080
-A KUBE-SERVICES -d 10.96.51.57/32 -p tcp -m comment --comment \"large/svc-4760:http cluster IP\" -m tcp --dport 8080 -j KUBE-SVC-225ZWSX6OBJKOH5T
-A KUBE-SVC-225ZWSX6OBJKOH5T ! -s 10.244.0.0/16 -d 10.96.51.57/32 -p tcp -m comment --comment \"large/svc-4760:http cluster IP\" -m tcp --dport 8080 -j KUBE-MARK-MASQ
-A KUBE-SVC-225ZWSX6OBJKOH5T -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-MV6SZLZG344WRPS4
-A KUBE-SVC-225ZWSX6OBJKOH5T -j KUBE-SEP-222G7KHXNUYF5DMR
COMMIT
";
        let fast = parse_str(dump).unwrap();
        assert_eq!(fast, general_path(dump));
        assert_eq!(fast.backend_count(), 2);
        // Another option anywhere, an escape or a second target: not this path.
        for body in [
            r#"KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m tcp -j DNAT --to-destination 10.0.0.1:80 -j X"#,
            r#"KUBE-SVC-AAAAAAAAAAAAAAAA -m statistic --mode random --probability 0.5 -m recent --rcheck -j KUBE-SEP-AAAAAAAAAAAAAAAA"#,
            r#"KUBE-SVC-AAAAAAAAAAAAAAAA -m statistic --mode random -j KUBE-SEP-AAAAAAAAAAAAAAAA"#,
            r#"KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m comment --comment "a"b" -m tcp -j DNAT --to-destination 10.0.0.1:80"#,
            r#"KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m comment --comment "a" -m tcp -j DNAT --to-destination 10.0.0.1:80 -j X"#,
            r#"KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m recent --comment "a" -m tcp -j DNAT --to-destination 10.0.0.1:80"#,
            r#"KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "a -> 10.0.0.1:80" -m statistic --mode random --probability 0.5 -j KUBE-SEP-AAAAAAAAAAAAAAAA --rcheck"#,
            r#"KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "a -> 10.0.0.1:80" -m statistic --mode random --probability	0.5 -j KUBE-SEP-AAAAAAAAAAAAAAAA"#,
            r#"KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "a -> 10.0.0.1:80" -m recent --rcheck -j KUBE-SEP-AAAAAAAAAAAAAAAA"#,
            r#"KUBE-SVC-AAAAAAAAAAAAAAAA -m recent --rcheck --seconds 10800 --reap --name X --mask M --rsource -m statistic --mode random --probability 0.5 -j KUBE-SEP-AAAAAAAAAAAAAAAA"#,
            r#"KUBE-SVC-AAAAAAAAAAAAAAAA -m recent --rcheck --seconds 10800 --reap --name "X" --mask M --rsource -j KUBE-SEP-AAAAAAAAAAAAAAAA"#,
            r#"KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m recent --set --name X --mask M -m tcp -j DNAT --to-destination 10.0.0.1:80"#,
        ] {
            let chain = body.split(' ').next().unwrap();
            let class = classify(chain.as_bytes());
            assert!(
                !p.kube_layout(class, chain.as_bytes(), body.as_bytes()),
                "{body}"
            );
        }
    }

    fn general_path(input: &str) -> LbTable {
        let mut p = Parser {
            general_only: true,
            ..Parser::default()
        };
        drive_raw(input.as_bytes(), &mut p);
        into_table(p).unwrap()
    }

    /// One edit of a dump line: the shapes the byte paths test for (quotes, backslashes,
    /// tabs, repeated or missing options, spaces around the line).
    fn edit(line: &str, kind: u8, at: usize) -> String {
        let toks: Vec<&str> = line.split(' ').collect();
        let i = at % toks.len().max(1);
        let mut t: Vec<String> = toks.iter().map(|s| (*s).to_string()).collect();
        match kind % 12 {
            0 => {
                t.remove(i);
            }
            1 => t.insert(i, toks[i].to_string()),
            2 => t[i].insert(0, '"'),
            3 => t[i].push('\\'),
            4 => t[i].push('\t'),
            5 => return format!(" {line}"),
            6 => return format!("{line} "),
            7 => t.insert(i, "--comment \"a -> 10.9.9.9:99\"".to_string()),
            8 => t.insert(i, "--to-destination 10.8.8.8:88".to_string()),
            // A line break inside a token or between two, and a CRLF line end: the reads
            // that find a line's end while reading it must see the same lines.
            9 => {
                let cut = at % (t[i].len() + 1);
                t[i].insert(cut, '\n');
            }
            10 => t[i].push('\n'),
            _ => return format!("{line}\r"),
        }
        t.join(" ")
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// The byte paths give exactly what the general path gives, on a generated dump
        /// with random edits of its lines.
        #[test]
        fn fast_paths_agree_with_the_general_path(
            edits in proptest::collection::vec((0usize..10_000, 0u8..12, 0usize..64), 0..12),
            large_cluster in proptest::bool::ANY,
            cap in 64usize..4096,
        ) {
            // Both of kube-proxy's layouts: with endpoint comments and without (above
            // 1 000 endpoints).
            let mut spec = GenSpec::new(8, 30);
            spec.large_cluster = Some(large_cluster);
            let dump = GenModel::generate(&spec).iptables_save();
            let mut lines: Vec<String> = dump.lines().map(str::to_string).collect();
            for (line, kind, at) in edits {
                let n = line % lines.len();
                lines[n] = edit(&lines[n], kind, at);
            }
            let text = lines.join("\n");
            let general = general_path(&text);
            proptest::prop_assert_eq!(&parse_str(&text).unwrap(), &general);
            // The streaming reader, with buffers that end inside lines.
            let small = std::io::BufReader::with_capacity(cap, text.as_bytes());
            proptest::prop_assert_eq!(&parse_reader(small).unwrap(), &general);
        }
    }

    proptest::proptest! {
        /// The interpolated lookup finds exactly the rows a linear scan finds.
        #[test]
        fn band_lookup_agrees_with_a_scan(
            raw in proptest::collection::vec((1u32..8, proptest::prelude::any::<u64>(), 0u32..3), 0..300),
            probes in proptest::collection::vec((1u32..8, proptest::prelude::any::<u64>()), 1..50),
        ) {
            let key = |tag: u32, v: u64| ChainKey { hi: (tag << 16) | (v >> 48) as u32 & 0xffff, mid: (v >> 16) as u32, lo: (v as u32) & 0xffff };
            let mut rows: Vec<(ChainKey, u32)> = Vec::new();
            for (tag, v, dup) in &raw {
                for d in 0..=*dup {
                    rows.push((key(*tag, *v), d));
                }
            }
            rows.sort_by_key(|r| r.0);
            let bands = Bands::new(&rows, |r| r.0);
            let existing: Vec<ChainKey> = rows.iter().map(|r| r.0).collect();
            for (i, (tag, v)) in probes.iter().enumerate() {
                // Half the probes hit a present key.
                let k = match existing.get(i * 7 % existing.len().max(1)) {
                    Some(k) if i % 2 == 0 => *k,
                    _ => key(*tag, *v),
                };
                let got = bands.range(&rows, k, |r| r.0);
                let lo = rows.iter().position(|r| r.0 == k);
                let n = rows.iter().filter(|r| r.0 == k).count();
                match lo {
                    Some(lo) => proptest::prop_assert_eq!(got, lo..lo + n),
                    None => proptest::prop_assert!(got.is_empty()),
                }
            }
        }
    }
}
