//! Parser of `conntrack -L` / `conntrack -E` text, plain or `-o extended`
//! (the `/proc/net/nf_conntrack` line format), into a [`ConntrackTable`].
//!
//! See [`parse_reader`], or [`for_each_entry`] to filter a large table while streaming
//! without keeping it. Each line is one flow: optional event tag (`[NEW]`, `[UPDATE]`,
//! `[DESTROY]`), optional `ipv4 2` family prefix, protocol name and number, timeout
//! (absent in `[DESTROY]` events), protocol state, the original tuple, the reply tuple,
//! flags (`[UNREPLIED]`, `[ASSURED]`) and trailing fields (`mark=`, `zone=`, `use=`,
//! `id=`, `secctx=`, `delta-time=`, per-direction `packets=`/`bytes=`).
//!
//! The reply tuple's source differs from the original destination when the flow was
//! DNATed: that is the backend a ClusterIP flow is pinned to ([`CtEntry::dnat_target`]).
//! Summary lines (`conntrack v1.4.6 (conntrack-tools): 50 flow entries have been shown.`,
//! written to stderr) are ignored wherever a capture of both streams put them: alone, glued
//! to the end of an entry, or inside one, whose rest then starts the next line and is joined
//! back. A line cut short inside its reply tuple (after the reply's source) keeps its entry:
//! the reply's source is the DNAT target, the cut token is dropped, a missing reply
//! destination is taken to be the original source, and the entry is flagged
//! `reply-cut-short` and counted as unknown. Lines with unparsable addresses (anonymized
//! `xxx.xxx.xxx.xxx`) are unknown.
//!
//! A table holds each flow once (the kernel keys its entries by the original tuple and the
//! zone), so a flow listed again starts the next snapshot (a transcript of two runs of
//! `conntrack -L`): the table is the last one's (`SkipStats::earlier_snapshots`). Event lines
//! (`-E`, which repeat a flow as it changes) are a stream, not a snapshot, and never start
//! one; [`for_each_entry`], which keeps nothing, does not look for snapshots.
//!
//! # Errors
//! Only input with no conntrack line at all is an error.

use std::collections::HashSet;
use std::io::BufRead;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::error::ParseError;
use crate::format::Format;
use crate::model::{Location, SkipStats};
use crate::text::{LineSink, OVERLONG_LINE, drive_bytes, drive_reader, drive_str};

const EXPECTED: &str = "conntrack -L output (`tcp 6 117 ESTABLISHED src=… dst=… …`)";

/// Flows from a conntrack dump.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackTable {
    /// One entry per flow line, in dump order.
    pub entries: Vec<CtEntry>,
    /// Lines that were not turned into entries.
    pub skipped: SkipStats,
}

/// One tracked flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtEntry {
    /// `NEW`, `UPDATE` or `DESTROY` for `conntrack -E` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Layer-4 protocol name (`tcp`, `udp`, `sctp`, `icmp`, …).
    pub proto: String,
    /// Layer-4 protocol number.
    pub proto_num: u8,
    /// Seconds until the entry expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
    /// Protocol state (`ESTABLISHED`, `TIME_WAIT`, `CLOSED`, …); none for UDP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Original direction.
    pub orig: CtTuple,
    /// Reply direction.
    pub reply: CtTuple,
    /// `[UNREPLIED]`: no packet seen in the reply direction.
    pub unreplied: bool,
    /// `[ASSURED]`: traffic seen both ways; not evicted early.
    pub assured: bool,
    /// Other bracketed flags (`OFFLOAD`, `HW_OFFLOAD`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Connection mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<u32>,
    /// Conntrack zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<u16>,
    /// Conntrack id (`-o id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// Reference count (`use=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_count: Option<u32>,
    /// Seconds since the entry was created (`delta-time=`, needs `nf_conntrack_timestamp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_time: Option<u64>,
    /// SELinux context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secctx: Option<String>,
}

/// One direction of a flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (TCP, UDP, SCTP, DCCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    /// Destination port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    /// ICMP type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
    /// ICMP identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_id: Option<u16>,
    /// Packets in this direction (`nf_conntrack_acct`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    /// Bytes in this direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl CtEntry {
    /// The address the flow was DNATed to (reply source), when it differs from the
    /// original destination: the backend a ClusterIP flow is pinned to.
    /// A reply source port that is not known (a line cut short) says nothing about the port.
    pub fn dnat_target(&self) -> Option<(IpAddr, Option<u16>)> {
        let port_changed = self.reply.sport.is_some() && self.reply.sport != self.orig.dport;
        (self.reply.src != self.orig.dst || port_changed)
            .then_some((self.reply.src, self.reply.sport))
    }
}

/// Parses a conntrack dump held in memory.
pub fn parse_str(input: &str) -> Result<ConntrackTable, ParseError> {
    let mut p = Parser::collecting();
    drive_str(input, &mut p);
    p.finish_table()
}

/// Parses a conntrack dump held in memory as bytes.
pub fn parse_bytes(input: &[u8]) -> Result<ConntrackTable, ParseError> {
    let mut p = Parser::collecting();
    drive_bytes(input, &mut p);
    p.finish_table()
}

/// Parses a conntrack dump from a reader, line by line.
pub fn parse_reader<R: BufRead>(reader: R) -> Result<ConntrackTable, ParseError> {
    let mut p = Parser::collecting();
    drive_reader(reader, Format::Conntrack, &mut p)?;
    p.finish_table()
}

/// Streams a conntrack dump, calling `f` for each entry instead of keeping them; returns
/// what was skipped. Memory stays flat however many flows the table holds.
pub fn for_each_entry<R: BufRead, F: FnMut(CtEntry)>(
    reader: R,
    f: F,
) -> Result<SkipStats, ParseError> {
    let mut p = Parser {
        sink: Sink::Callback(Box::new(f)),
        ..Parser::collecting()
    };
    drive_reader(reader, Format::Conntrack, &mut p)?;
    p.check()?;
    Ok(p.skipped)
}

/// Whether `line` looks like a conntrack entry (for format detection).
pub(crate) fn looks_like_entry(line: &str) -> bool {
    let mut toks = line.split_ascii_whitespace().peekable();
    if toks
        .peek()
        .is_some_and(|t| t.starts_with('[') && t.ends_with(']'))
    {
        toks.next();
    }
    if toks.peek().is_some_and(|t| matches!(*t, "ipv4" | "ipv6")) {
        toks.next();
        toks.next();
    }
    let (Some(proto), Some(num)) = (toks.next(), toks.next()) else {
        return false;
    };
    is_proto_name(proto) && num.parse::<u8>().is_ok() && line.contains("src=")
}

fn is_proto_name(s: &str) -> bool {
    matches!(
        s,
        "tcp" | "udp" | "sctp" | "icmp" | "icmpv6" | "dccp" | "gre" | "udplite" | "unknown"
    )
}

enum Sink<'f> {
    Collect(Vec<CtEntry>),
    Callback(Box<dyn FnMut(CtEntry) + 'f>),
}

struct Parser<'f> {
    sink: Sink<'f>,
    skipped: SkipStats,
    saw: bool,
    first_foreign: Option<(usize, String)>,
    /// The head of an entry a glued summary line cut (see [`Parser::summary`]), with its
    /// line number: the next line goes on with it.
    pending: Option<(usize, String)>,
    /// The flows of this snapshot (collecting parsers only): one seen again starts the next.
    flows: HashSet<FlowKey>,
}

/// What the kernel keys a conntrack entry by: the original tuple (protocol, addresses,
/// ports or ICMP identity) and the zone.
type FlowKey = (
    u8,
    Option<u16>,
    IpAddr,
    IpAddr,
    Option<u16>,
    Option<u16>,
    Option<(u8, u8, u16)>,
);

fn flow_key(e: &CtEntry) -> FlowKey {
    let o = &e.orig;
    let icmp = match (o.icmp_type, o.icmp_code, o.icmp_id) {
        (None, None, None) => None,
        (t, c, i) => Some((t.unwrap_or(0), c.unwrap_or(0), i.unwrap_or(0))),
    };
    (e.proto_num, e.zone, o.src, o.dst, o.sport, o.dport, icmp)
}

/// A tuple under construction.
#[derive(Default)]
struct TupleAcc {
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    sport: Option<u16>,
    dport: Option<u16>,
    icmp_type: Option<u8>,
    icmp_code: Option<u8>,
    icmp_id: Option<u16>,
    packets: Option<u64>,
    bytes: Option<u64>,
    bad_addr: bool,
}

impl TupleAcc {
    fn build(self) -> Option<CtTuple> {
        Some(CtTuple {
            src: self.src?,
            dst: self.dst?,
            sport: self.sport,
            dport: self.dport,
            icmp_type: self.icmp_type,
            icmp_code: self.icmp_code,
            icmp_id: self.icmp_id,
            packets: self.packets,
            bytes: self.bytes,
        })
    }
}

fn num<T: std::str::FromStr>(v: &str) -> Option<T> {
    v.parse().ok()
}

fn mark(v: &str) -> Option<u32> {
    match v.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

impl<'f> Parser<'f> {
    fn collecting() -> Self {
        Self {
            sink: Sink::Collect(Vec::new()),
            skipped: SkipStats::default(),
            saw: false,
            first_foreign: None,
            pending: None,
            flows: HashSet::new(),
        }
    }

    fn check(&mut self) -> Result<(), ParseError> {
        self.flush_pending();
        if !self.saw
            && let Some((no, line)) = self.first_foreign.take()
        {
            return Err(ParseError::unexpected(
                Format::Conntrack,
                Location::Line(no),
                EXPECTED,
                &line,
            ));
        }
        Ok(())
    }

    fn finish_table(mut self) -> Result<ConntrackTable, ParseError> {
        self.check()?;
        let entries = match self.sink {
            Sink::Collect(v) => v,
            Sink::Callback(_) => Vec::new(),
        };
        Ok(ConntrackTable {
            entries,
            skipped: self.skipped,
        })
    }

    fn foreign(&mut self, no: usize, line: &str, reason: &'static str) {
        if self.first_foreign.is_none() {
            self.first_foreign = Some((no, crate::model::excerpt(line)));
        }
        self.skipped.unknown(Location::Line(no), reason, line);
    }

    fn entry(&mut self, no: usize, line: &str) {
        let toks: Vec<&str> = line.split_ascii_whitespace().collect();
        let read = match read_entry(&toks) {
            Err(Unread::NotConntrack) => return self.foreign(no, line, "not a conntrack line"),
            // Cut short inside the reply tuple (a truncated line, or one the summary line was
            // glued into): every token but the last is whole, so without the last one the
            // reply's source, the backend a DNATed flow is pinned to, is still known.
            Err(Unread::ReplyCutShort) => {
                let whole = toks.get(..toks.len().saturating_sub(1)).unwrap_or_default();
                match read_cut_entry(whole) {
                    Some(r) => {
                        self.skipped.unknown(
                            Location::Line(no),
                            "entry cut short in its reply tuple (kept with the reply's source)",
                            line,
                        );
                        Ok(r)
                    }
                    None => Err(Unread::Incomplete),
                }
            }
            other => other,
        };
        self.saw = true;
        let (entry, not_modeled) = match read {
            Ok(r) => r,
            Err(Unread::BadAddress) => {
                return self.skipped.unknown(
                    Location::Line(no),
                    "invalid address in a tuple",
                    line,
                );
            }
            Err(_) => {
                return self.skipped.unknown(
                    Location::Line(no),
                    "entry without both original and reply tuples",
                    line,
                );
            }
        };
        if let Sink::Collect(v) = &mut self.sink
            && entry.event.is_none()
            && !self.flows.insert(flow_key(&entry))
        {
            // A flow listed again: the next run of the dump starts here.
            v.clear();
            self.flows.clear();
            self.flows.insert(flow_key(&entry));
            self.skipped.new_snapshot(Location::Line(no));
        }
        for _ in 0..not_modeled {
            self.skipped.ignore("conntrack field not modeled");
        }
        match &mut self.sink {
            Sink::Collect(v) => v.push(entry),
            Sink::Callback(f) => f(entry),
        }
    }

    /// A line holding a conntrack-tools summary (`conntrack v1.4.6 (conntrack-tools): 3 flow
    /// entries have been shown.`, written to stderr) wherever it landed in the stdout text:
    /// alone, or inside an entry. What came before it on the line is an entry's head, which
    /// goes on at the start of the next line (the summary ends with its own newline); what
    /// came after it is read as a line.
    fn summary(&mut self, no: usize, raw: &str, at: usize, end: usize) {
        self.skipped.ignore("conntrack summary line");
        let before = raw.get(..at).unwrap_or_default().trim_start();
        if looks_like_entry(before) {
            self.pending = Some((no, before.to_string()));
        }
        let after = raw.get(end..).unwrap_or_default();
        if !after.trim().is_empty() {
            self.line(no, after);
        }
    }

    /// Reads the entry head the summary cut, if any: alone when `next` does not go on with it.
    fn flush_pending(&mut self) {
        if let Some((no, head)) = self.pending.take() {
            self.entry(no, &head);
        }
    }
}

/// Why a line gave no entry.
enum Unread {
    /// Not a conntrack line at all.
    NotConntrack,
    /// A tuple holds an address that does not parse.
    BadAddress,
    /// The line ends inside the reply tuple, after its source.
    ReplyCutShort,
    /// A tuple is missing otherwise.
    Incomplete,
}

/// An entry and how many of its fields are not modeled.
type Read = (CtEntry, usize);

/// The start and end (past its final `.`) of a conntrack-tools summary in `line`.
fn find_summary(line: &str) -> Option<(usize, usize)> {
    let tools = line.find("(conntrack-tools)")?;
    let at = line.get(..tools)?.rfind("conntrack v").unwrap_or(tools);
    let tail = line.get(tools..)?;
    let end = tail
        .find("have been ")
        .and_then(|h| tail.get(h..)?.find('.').map(|d| tools + h + d + 1))
        .unwrap_or(line.len());
    Some((at, end))
}

/// [`read_entry`] of the whole tokens of a line cut inside its reply tuple: the reply's
/// source is known; its destination and destination port, when cut off, are taken to be the
/// original source's (as for a flow without SNAT), its source port stays unknown when cut
/// off, and the entry is flagged `reply-cut-short`.
fn read_cut_entry(whole: &[&str]) -> Option<Read> {
    let (mut e, n) = read_entry_with(whole, true).ok()?;
    e.flags.push("reply-cut-short".to_string());
    Some((e, n))
}

fn read_entry(toks: &[&str]) -> Result<Read, Unread> {
    read_entry_with(toks, false)
}

/// Reads one entry's tokens. With `cut`, a reply tuple that ends after its source is
/// completed from the original tuple instead of failing.
fn read_entry_with(toks: &[&str], cut: bool) -> Result<Read, Unread> {
    let mut toks = toks.iter().copied().peekable();
    let mut event = None;
    if let Some(t) = toks
        .peek()
        .filter(|t| t.starts_with('[') && t.ends_with(']'))
    {
        event = t.get(1..t.len() - 1).map(str::to_string);
        toks.next();
    }
    if toks.peek().is_some_and(|t| matches!(*t, "ipv4" | "ipv6")) {
        toks.next();
        toks.next();
    }
    let (Some(proto), Some(proto_num)) = (toks.next(), toks.next().and_then(num::<u8>)) else {
        return Err(Unread::NotConntrack);
    };
    if !is_proto_name(proto) {
        return Err(Unread::NotConntrack);
    }
    let mut not_modeled = 0;
    let mut timeout = None;
    let mut state = None;
    let mut orig = TupleAcc::default();
    let mut reply = TupleAcc::default();
    let mut in_reply = false;
    let mut after_tuples = false;
    let mut e_unreplied = false;
    let mut e_assured = false;
    let mut flags = Vec::new();
    let (mut e_mark, mut zone, mut id, mut use_count, mut delta_time, mut secctx) =
        (None, None, None, None, None, None);
    for t in toks {
        if let Some((k, v)) = t.split_once('=') {
            let cur = if in_reply { &mut reply } else { &mut orig };
            match k {
                "src" => {
                    if cur.src.is_some() && !in_reply {
                        in_reply = true;
                    }
                    let cur = if in_reply { &mut reply } else { &mut orig };
                    match v.parse() {
                        Ok(ip) => cur.src = Some(ip),
                        Err(_) => cur.bad_addr = true,
                    }
                }
                "dst" => match v.parse() {
                    Ok(ip) => cur.dst = Some(ip),
                    Err(_) => cur.bad_addr = true,
                },
                "sport" => cur.sport = num(v),
                "dport" => cur.dport = num(v),
                "type" => cur.icmp_type = num(v),
                "code" => cur.icmp_code = num(v),
                "id" if cur.icmp_type.is_some() && cur.icmp_id.is_none() && !after_tuples => {
                    cur.icmp_id = num(v);
                }
                "packets" => cur.packets = num(v),
                "bytes" => cur.bytes = num(v),
                "mark" => {
                    after_tuples = true;
                    e_mark = mark(v);
                }
                "zone" => zone = num(v),
                "use" => {
                    after_tuples = true;
                    use_count = num(v);
                }
                "id" => id = num(v),
                "delta-time" => delta_time = num(v),
                "secctx" => secctx = Some(v.to_string()),
                _ => not_modeled += 1,
            }
        } else if let Some(flag) = t.strip_prefix('[').and_then(|f| f.strip_suffix(']')) {
            match flag {
                "UNREPLIED" => e_unreplied = true,
                "ASSURED" => {
                    after_tuples = true;
                    e_assured = true;
                }
                _ => flags.push(flag.to_string()),
            }
        } else if timeout.is_none() && state.is_none() && orig.src.is_none() {
            match t.parse::<u32>() {
                Ok(n) => timeout = Some(n),
                Err(_) => state = Some(t.to_string()),
            }
        } else if state.is_none() && orig.src.is_none() {
            state = Some(t.to_string());
        } else {
            not_modeled += 1;
        }
    }
    if orig.bad_addr {
        return Err(Unread::BadAddress);
    }
    // The line ends inside the reply tuple: after its source, before anything that follows
    // the tuples.
    let reply_cut = in_reply
        && !after_tuples
        && reply.src.is_some()
        && (reply.bad_addr || reply.dst.is_none() || reply.dport.is_none() && orig.dport.is_some());
    if reply_cut {
        if !cut || reply.bad_addr {
            return Err(Unread::ReplyCutShort);
        }
        reply.dst = reply.dst.or(orig.src);
        reply.dport = reply.dport.or(orig.sport);
    } else if reply.bad_addr {
        return Err(Unread::BadAddress);
    }
    let (Some(orig), Some(reply)) = (orig.build(), reply.build()) else {
        return Err(Unread::Incomplete);
    };
    Ok((
        CtEntry {
            event,
            proto: proto.to_string(),
            proto_num,
            timeout,
            state,
            orig,
            reply,
            unreplied: e_unreplied,
            assured: e_assured,
            flags,
            mark: e_mark,
            zone,
            id,
            use_count,
            delta_time,
            secctx,
        },
        not_modeled,
    ))
}

impl LineSink for Parser<'_> {
    fn line(&mut self, no: usize, raw: &str) {
        if let Some((pno, head)) = self.pending.take() {
            // The head a summary cut goes on at the start of this line, unless this line is
            // blank or an entry of its own.
            let rest = raw.trim_end();
            if rest.trim().is_empty() || looks_like_entry(rest.trim()) {
                self.entry(pno, &head);
            } else {
                let joined = format!("{head}{rest}");
                return self.line(pno, &joined);
            }
        }
        let line = raw.trim();
        if line.is_empty() {
            return;
        }
        if let Some((at, end)) = find_summary(raw) {
            return self.summary(no, raw, at, end);
        }
        self.entry(no, line);
    }

    fn overlong(&mut self, no: usize, head: &str) {
        self.flush_pending();
        self.foreign(no, head, OVERLONG_LINE);
    }
}
