//! Pure decoder of conntrack netlink dumps (`NFNL_SUBSYS_CTNETLINK` messages) into the
//! same [`CtEntry`] as the `conntrack -L` text parser.
//!
//! See [`NetlinkDecoder`]: feed it the bytes read from a `NETLINK_NETFILTER` socket after
//! an `IPCTNL_MSG_CT_GET` dump request, in whatever pieces the reads return; messages
//! split across reads are reassembled. [`decode_dump`] decodes a whole dump held in
//! memory. Message bodies are decoded with `netlink-packet-netfilter` 0.4; the attributes
//! it leaves untyped (`CTA_ID`, `CTA_USE`, `CTA_ZONE`, counters, ICMP ids, SELinux
//! context) are decoded here. No socket is opened: the netlink adapter does the IO.
//!
//! [`ViewDecoder`] decodes the same stream without allocating per flow, handing over a
//! borrowed [`CtView`] of each; it is what the agent reads the kernel's table with.
//!
//! # Errors
//! A message header whose length is impossible (framing lost) and a netlink error
//! message (the kernel refused the dump, e.g. `EPERM` without `CAP_NET_ADMIN`) are
//! errors; a message whose body does not decode is skipped and counted.

use std::net::IpAddr;

use netlink_packet_core::{NetlinkMessage, NetlinkPayload, Nla};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoInfo, ProtoInfoTCP, ProtoTuple, Status,
    Tuple,
};
use netlink_packet_netfilter::{NetfilterMessage, NetfilterMessageInner};

use crate::conntrack::{ConntrackTable, CtEntry, CtTuple};
use crate::error::ParseError;
use crate::format::Format;
use crate::model::{Location, SkipStats};

mod view;

pub use view::{CtMessageKind, CtView, IPS_ASSURED, IPS_OFFLOAD, IPS_SEEN_REPLY, ViewDecoder};

/// Size of a netlink message header.
const NLMSG_HDRLEN: usize = 16;
/// Largest message accepted (a conntrack entry is a few hundred bytes).
const MAX_MESSAGE: usize = 1 << 20;
/// Message types below this are netlink control messages (noop, error, done, overrun).
const NLMSG_MIN_TYPE: u16 = 0x10;
/// Netfilter subsystem of conntrack messages (high byte of the message type).
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;

const CTA_COUNTERS_ORIG: u16 = 9;
const CTA_COUNTERS_REPLY: u16 = 10;
const CTA_USE: u16 = 11;
const CTA_ID: u16 = 12;
const CTA_SECCTX: u16 = 13;
const CTA_ZONE: u16 = 18;
const CTA_COUNTERS_PACKETS: u16 = 1;
const CTA_COUNTERS_BYTES: u16 = 2;
const CTA_SECCTX_NAME: u16 = 1;
const CTA_PROTO_ICMP_ID: u16 = 4;
const CTA_PROTO_ICMP_TYPE: u16 = 5;
const CTA_PROTO_ICMP_CODE: u16 = 6;
const CTA_PROTO_ICMPV6_ID: u16 = 7;
const CTA_PROTO_ICMPV6_TYPE: u16 = 8;
const CTA_PROTO_ICMPV6_CODE: u16 = 9;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// Decodes a conntrack netlink dump held in memory (all messages, `NLMSG_DONE` optional).
pub fn decode_dump(bytes: &[u8]) -> Result<ConntrackTable, ParseError> {
    let mut entries = Vec::new();
    let mut d = NetlinkDecoder::new();
    d.push(bytes, |e| entries.push(e))?;
    let skipped = d.finish()?;
    Ok(ConntrackTable { entries, skipped })
}

/// Incremental decoder of a conntrack netlink dump.
#[derive(Debug, Default)]
pub struct NetlinkDecoder(Stream);

impl NetlinkDecoder {
    /// A decoder at the start of a dump.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `NLMSG_DONE` was seen: the dump is complete.
    pub fn is_done(&self) -> bool {
        self.0.done
    }

    /// Feeds the next bytes read from the socket, calling `f` for every flow decoded.
    pub fn push<F: FnMut(CtEntry)>(&mut self, bytes: &[u8], mut f: F) -> Result<(), ParseError> {
        self.0.push(bytes, |msg, offset, done, skipped| {
            message(msg, offset, done, skipped, &mut f)
        })
    }

    /// Ends the dump; bytes of an incomplete message left over are an error.
    pub fn finish(self) -> Result<SkipStats, ParseError> {
        self.0.finish()
    }
}

/// What both decoders keep across reads: the framing, whether the dump ended, what was
/// skipped.
#[derive(Debug, Default)]
struct Stream {
    framing: Framing,
    done: bool,
    skipped: SkipStats,
}

impl Stream {
    /// Hands every complete message to `on_message` with its offset, the end-of-dump flag
    /// and the skip counts.
    fn push(
        &mut self,
        bytes: &[u8],
        mut on_message: impl FnMut(&[u8], usize, &mut bool, &mut SkipStats) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        let Self {
            framing,
            done,
            skipped,
        } = self;
        framing.push(bytes, |msg, offset| on_message(msg, offset, done, skipped))
    }

    fn finish(self) -> Result<SkipStats, ParseError> {
        self.framing.finish()?;
        Ok(self.skipped)
    }
}

/// Netlink message framing across reads: messages split between reads are reassembled,
/// whole messages are handed over in place.
#[derive(Debug, Default)]
struct Framing {
    /// The start of a message whose rest has not arrived yet.
    pending: Vec<u8>,
    /// Padding bytes of the last message still to come in the next push.
    skip_pad: usize,
    /// Stream offset of `pending[0]` (of the next byte pushed when nothing is pending).
    offset: usize,
}

impl Framing {
    /// Calls `on_message` with every complete message of `bytes` (after what is pending)
    /// and its stream offset; keeps an incomplete last one for the next push.
    fn push(
        &mut self,
        bytes: &[u8],
        mut on_message: impl FnMut(&[u8], usize) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        // Padding of the previous message that had not arrived yet.
        let skip = self.skip_pad.min(bytes.len());
        self.skip_pad -= skip;
        self.offset += skip;
        let bytes = bytes.get(skip..).unwrap_or_default();
        if self.pending.is_empty() {
            // The usual case: whole messages, read straight from the caller's buffer.
            let (at, result) = self.walk(bytes, &mut on_message);
            self.pending
                .extend_from_slice(bytes.get(at..).unwrap_or_default());
            self.offset += at;
            return result;
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(bytes);
        let (at, result) = self.walk(&pending, &mut on_message);
        pending.drain(..at.min(pending.len()));
        self.pending = pending;
        self.offset += at;
        result
    }

    /// The messages of `buf`: how many bytes they took, and the first error.
    fn walk(
        &mut self,
        buf: &[u8],
        on_message: &mut impl FnMut(&[u8], usize) -> Result<(), ParseError>,
    ) -> (usize, Result<(), ParseError>) {
        let mut at = 0;
        let result = loop {
            let rest = buf.get(at..).unwrap_or_default();
            let Some(header) = rest.get(..4) else {
                break Ok(());
            };
            let mut len_bytes = [0u8; 4];
            len_bytes.copy_from_slice(header);
            let len = u32::from_ne_bytes(len_bytes) as usize;
            if !(NLMSG_HDRLEN..=MAX_MESSAGE).contains(&len) {
                break Err(ParseError::unexpected(
                    Format::Conntrack,
                    Location::ByteOffset(self.offset + at),
                    "a netlink message header (length 16 bytes to 1 MiB)",
                    &format!("length {len}"),
                ));
            }
            let Some(msg) = rest.get(..len) else {
                break Ok(());
            };
            if let Err(e) = on_message(msg, self.offset + at) {
                break Err(e);
            }
            // Messages are 4-byte aligned: skip the padding, now or in the next push.
            let padded = len.next_multiple_of(4);
            at += padded.min(rest.len());
            self.skip_pad = padded.saturating_sub(rest.len());
        };
        (at, result)
    }

    /// Bytes of an incomplete message left over are an error.
    fn finish(&self) -> Result<(), ParseError> {
        if !self.pending.is_empty() {
            return Err(ParseError::unexpected(
                Format::Conntrack,
                Location::ByteOffset(self.offset),
                "a complete netlink message",
                &format!("{} trailing bytes", self.pending.len()),
            ));
        }
        Ok(())
    }
}

/// What a netlink control message (type below `NLMSG_MIN_TYPE`) was.
enum Control {
    /// Counted or acted on.
    Handled,
    /// Its body does not decode: why.
    Undecodable(&'static str),
}

/// Handles a netlink control message the way `netlink-packet-core` 0.9 reads it: `NLMSG_DONE`
/// ends the dump, an `NLMSG_ERROR` acknowledgement is ignored and a real error is one.
fn control(
    msg_type: u16,
    body: &[u8],
    offset: usize,
    done: &mut bool,
    skipped: &mut SkipStats,
) -> Result<Control, ParseError> {
    match msg_type {
        NLMSG_ERROR => {
            let Some(code) = body.get(..4) else {
                return Ok(Control::Undecodable(
                    "an error message shorter than its code",
                ));
            };
            let code = i32::from_ne_bytes([code[0], code[1], code[2], code[3]]);
            if code != 0 {
                return Err(refused(offset, code));
            }
            skipped.ignore("netlink ACK");
        }
        // The kernel may send NLMSG_DONE without a body.
        NLMSG_DONE if body.is_empty() || body.len() >= 4 => *done = true,
        NLMSG_DONE => return Ok(Control::Undecodable("a done message cut short")),
        NLMSG_NOOP | NLMSG_OVERRUN => skipped.ignore("netlink control message"),
        // Types 0 and 5 to 15 are read as nfnetlink control messages: a header and a
        // well-formed attribute list.
        _ => match body.get(4..).map(view::check_attrs) {
            None => {
                return Ok(Control::Undecodable(
                    "a netfilter message shorter than its header",
                ));
            }
            Some(Err(why)) => return Ok(Control::Undecodable(why)),
            Some(Ok(())) => skipped.ignore("netlink message of another subsystem"),
        },
    }
    Ok(Control::Handled)
}

/// The kernel's error answer to the dump.
fn refused(offset: usize, code: impl std::fmt::Display) -> ParseError {
    ParseError::unexpected(
        Format::Conntrack,
        Location::ByteOffset(offset),
        "conntrack messages",
        &format!("netlink error {code} (the kernel refused the dump)"),
    )
}

/// The type field of a netlink message header.
fn message_type(msg: &[u8]) -> u16 {
    u16::from_ne_bytes([
        msg.get(4).copied().unwrap_or(0),
        msg.get(5).copied().unwrap_or(0),
    ])
}

fn message<F: FnMut(CtEntry)>(
    msg: &[u8],
    offset: usize,
    done: &mut bool,
    skipped: &mut SkipStats,
    f: &mut F,
) -> Result<(), ParseError> {
    // Only conntrack (`NFNL_SUBSYS_CTNETLINK`) and netlink control messages are handed
    // to the decoder: the other netfilter subsystems' decoders of
    // netlink-packet-netfilter 0.4 can panic on malformed input (found by fuzzing).
    let msg_type = message_type(msg);
    if msg_type >= NLMSG_MIN_TYPE && msg_type >> 8 != NFNL_SUBSYS_CTNETLINK {
        skipped.ignore("netlink message of another subsystem");
        return Ok(());
    }
    let decoded = match NetlinkMessage::<NetfilterMessage>::deserialize(msg) {
        Ok(m) => m,
        Err(e) => {
            skipped.unknown(
                Location::ByteOffset(offset),
                "undecodable netlink message",
                &e.to_string(),
            );
            return Ok(());
        }
    };
    match decoded.payload {
        NetlinkPayload::Done(_) => {
            *done = true;
            Ok(())
        }
        NetlinkPayload::Error(e) => match e.code {
            None => {
                skipped.ignore("netlink ACK");
                Ok(())
            }
            Some(code) => Err(refused(offset, code)),
        },
        NetlinkPayload::InnerMessage(m) => {
            let (attrs, event) = match m.inner {
                NetfilterMessageInner::Conntrack(ConntrackMessage::New(a)) => (a, None),
                NetfilterMessageInner::Conntrack(ConntrackMessage::Get(a)) => (a, None),
                NetfilterMessageInner::Conntrack(ConntrackMessage::Delete(a)) => {
                    (a, Some("DESTROY".to_string()))
                }
                _ => {
                    skipped.ignore("netlink message of another subsystem");
                    return Ok(());
                }
            };
            match entry(&attrs, event, skipped) {
                Some(e) => f(e),
                None => skipped.unknown(
                    Location::ByteOffset(offset),
                    "conntrack message without both tuples",
                    "",
                ),
            }
            Ok(())
        }
        _ => {
            skipped.ignore("netlink control message");
            Ok(())
        }
    }
}

/// The value bytes of an untyped attribute.
fn value(nla: &impl Nla) -> Vec<u8> {
    let mut v = vec![0; nla.value_len()];
    nla.emit_value(&mut v);
    v
}

fn be_u16(v: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*v.first()?, *v.get(1)?]))
}

fn be_u32(v: &[u8]) -> Option<u32> {
    let b: [u8; 4] = v.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

fn be_u64(v: &[u8]) -> Option<u64> {
    let b: [u8; 8] = v.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

/// Nested attributes of a raw value the decoder does not check, `(type, value)`: the walk
/// stops at the first one that does not fit.
fn nested(v: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    view::Attrs::new(v).map_while(Result::ok)
}

/// The name `conntrack -L` gives a layer-4 protocol number.
fn proto_name(p: u8) -> &'static str {
    match p {
        6 => "tcp",
        17 => "udp",
        132 => "sctp",
        1 => "icmp",
        58 => "icmpv6",
        33 => "dccp",
        47 => "gre",
        136 => "udplite",
        _ => "unknown",
    }
}

fn tcp_state(s: u8) -> Option<&'static str> {
    Some(match s {
        0 => "NONE",
        1 => "SYN_SENT",
        2 => "SYN_RECV",
        3 => "ESTABLISHED",
        4 => "FIN_WAIT",
        5 => "CLOSE_WAIT",
        6 => "LAST_ACK",
        7 => "TIME_WAIT",
        8 => "CLOSE",
        9 => "SYN_SENT2",
        _ => return None,
    })
}

/// One tuple as decoded; fields the message lacks stay `None`.
#[derive(Default)]
struct TupleParts {
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    proto: Option<u8>,
    sport: Option<u16>,
    dport: Option<u16>,
    icmp_type: Option<u8>,
    icmp_code: Option<u8>,
    icmp_id: Option<u16>,
}

fn tuple(parts: &[Tuple]) -> TupleParts {
    let mut t = TupleParts::default();
    for p in parts {
        match p {
            Tuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => t.src = Some(*a),
                        IPTuple::DestinationAddress(a) => t.dst = Some(*a),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(protos) => {
                for pt in protos {
                    match pt {
                        ProtoTuple::Protocol(p) => t.proto = Some(u8::from(*p)),
                        ProtoTuple::SourcePort(p) => t.sport = Some(*p),
                        ProtoTuple::DestinationPort(p) => t.dport = Some(*p),
                        ProtoTuple::Other(nla) => {
                            let v = value(nla);
                            match nla.kind() & NLA_TYPE_MASK {
                                CTA_PROTO_ICMP_ID | CTA_PROTO_ICMPV6_ID => t.icmp_id = be_u16(&v),
                                CTA_PROTO_ICMP_TYPE | CTA_PROTO_ICMPV6_TYPE => {
                                    t.icmp_type = v.first().copied();
                                }
                                CTA_PROTO_ICMP_CODE | CTA_PROTO_ICMPV6_CODE => {
                                    t.icmp_code = v.first().copied();
                                }
                                _ => {}
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    t
}

impl TupleParts {
    fn build(&self, counters: Option<(u64, u64)>) -> Option<CtTuple> {
        Some(CtTuple {
            src: self.src?,
            dst: self.dst?,
            sport: self.sport,
            dport: self.dport,
            icmp_type: self.icmp_type,
            icmp_code: self.icmp_code,
            icmp_id: self.icmp_id,
            packets: counters.map(|c| c.0),
            bytes: counters.map(|c| c.1),
        })
    }
}

/// `(packets, bytes)` of a counters attribute, leniently: both must be there.
fn counters(v: &[u8]) -> Option<(u64, u64)> {
    let mut packets = None;
    let mut bytes = None;
    for (kind, val) in nested(v) {
        match kind {
            CTA_COUNTERS_PACKETS => packets = be_u64(val),
            CTA_COUNTERS_BYTES => bytes = be_u64(val),
            _ => {}
        }
    }
    Some((packets?, bytes?))
}

fn entry(
    attrs: &[ConntrackAttribute],
    event: Option<String>,
    skipped: &mut SkipStats,
) -> Option<CtEntry> {
    let mut orig = None;
    let mut reply = None;
    let mut state = None;
    let mut status = None;
    let (mut timeout, mut mark, mut zone, mut id, mut use_count, mut secctx) =
        (None, None, None, None, None, None);
    let (mut c_orig, mut c_reply) = (None, None);
    for a in attrs {
        match a {
            ConntrackAttribute::CtaTupleOrig(t) => orig = Some(tuple(t)),
            ConntrackAttribute::CtaTupleReply(t) => reply = Some(tuple(t)),
            ConntrackAttribute::CtaProtoInfo(infos) => {
                for info in infos {
                    if let ProtoInfo::TCP(tcp) = info {
                        for t in tcp {
                            if let ProtoInfoTCP::State(s) = t {
                                state = tcp_state(*s).map(str::to_string);
                            }
                        }
                    }
                }
            }
            ConntrackAttribute::CtaStatus(s) => status = Some(*s),
            ConntrackAttribute::CtaTimeout(t) => timeout = Some(*t),
            ConntrackAttribute::CtaMark(m) => mark = Some(*m),
            ConntrackAttribute::Other(nla) => {
                let v = value(nla);
                match nla.kind() & NLA_TYPE_MASK {
                    CTA_ID => id = be_u32(&v),
                    CTA_USE => use_count = be_u32(&v),
                    CTA_ZONE => zone = be_u16(&v),
                    CTA_COUNTERS_ORIG => c_orig = counters(&v),
                    CTA_COUNTERS_REPLY => c_reply = counters(&v),
                    CTA_SECCTX => {
                        secctx = nested(&v)
                            .find(|(k, _)| *k == CTA_SECCTX_NAME)
                            .map(|(_, n)| {
                                String::from_utf8_lossy(n)
                                    .trim_end_matches('\0')
                                    .to_string()
                            });
                    }
                    _ => skipped.ignore("conntrack attribute not modeled"),
                }
            }
            _ => skipped.ignore("conntrack attribute not modeled"),
        }
    }
    let (orig, reply) = (orig?, reply?);
    let proto = orig.proto.unwrap_or(0);
    let status = status.unwrap_or(Status::empty());
    Some(CtEntry {
        event,
        proto: proto_name(proto).to_string(),
        proto_num: proto,
        timeout,
        state,
        orig: orig.build(c_orig)?,
        reply: reply.build(c_reply)?,
        unreplied: !status.contains(Status::SeenReply),
        assured: status.contains(Status::Assured),
        flags: if status.contains(Status::Offload) {
            vec!["OFFLOAD".into()]
        } else {
            Vec::new()
        },
        mark,
        zone,
        id,
        use_count,
        delta_time: None,
        secctx,
    })
}
