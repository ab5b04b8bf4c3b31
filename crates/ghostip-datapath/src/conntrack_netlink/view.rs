//! Allocation-free decoder of conntrack netlink dumps: walks each message's attributes in place and hands every flow over as a borrowed [`CtView`].
//!
//! [`ViewDecoder`] is fed the same bytes as [`NetlinkDecoder`](super::NetlinkDecoder) and
//! follows the same rules (framing, control messages, what is skipped and counted), but
//! reads the netlink attribute TLVs straight from the message with bounds-checked slices:
//! no attribute vectors, no owned entry, nothing allocated per flow. [`CtView::to_entry`]
//! builds the owned [`CtEntry`] of a view when one is needed; it equals what
//! `NetlinkDecoder` builds from the same message.
//!
//! The attribute layout is fixed (message → tuple → IP/protocol; message → protocol info
//! → TCP), so the walk is at most three levels deep whatever the input says: a nested
//! attribute cannot make it loop or recurse.
//!
//! # Errors
//! As [`NetlinkDecoder`](super::NetlinkDecoder): an impossible message length (framing
//! lost) and a netlink error message are errors; a message whose attributes do not decode
//! (a length past the end, a value of the wrong size) is skipped and counted as unknown.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::conntrack::{CtEntry, CtTuple};
use crate::error::ParseError;
use crate::model::{Location, SkipStats};

use super::{
    CTA_COUNTERS_ORIG, CTA_COUNTERS_REPLY, CTA_ID, CTA_PROTO_ICMP_CODE, CTA_PROTO_ICMP_ID,
    CTA_PROTO_ICMP_TYPE, CTA_PROTO_ICMPV6_CODE, CTA_PROTO_ICMPV6_ID, CTA_PROTO_ICMPV6_TYPE,
    CTA_SECCTX, CTA_SECCTX_NAME, CTA_USE, CTA_ZONE, Control, NFNL_SUBSYS_CTNETLINK, NLA_TYPE_MASK,
    NLMSG_HDRLEN, NLMSG_MIN_TYPE, Stream, TupleParts, be_u16, be_u32, control, counters,
    message_type, nested, proto_name, tcp_state,
};

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_STATUS: u16 = 3;
const CTA_PROTOINFO: u16 = 4;
const CTA_TIMEOUT: u16 = 7;
const CTA_MARK: u16 = 8;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const CTA_PROTOINFO_TCP: u16 = 1;
const CTA_PROTOINFO_TCP_STATE: u16 = 1;
const CTA_PROTOINFO_TCP_WSCALE_ORIGINAL: u16 = 2;
const CTA_PROTOINFO_TCP_WSCALE_REPLY: u16 = 3;
const CTA_PROTOINFO_TCP_FLAGS_ORIGINAL: u16 = 4;
const CTA_PROTOINFO_TCP_FLAGS_REPLY: u16 = 5;
/// `nfgenmsg`: family, version, resource id.
const NFGENMSG_LEN: usize = 4;
const IPCTNL_MSG_CT_NEW: u8 = 0;
const IPCTNL_MSG_CT_GET: u8 = 1;
const IPCTNL_MSG_CT_DELETE: u8 = 2;

/// `IPS_SEEN_REPLY`: a packet was seen in the reply direction.
pub const IPS_SEEN_REPLY: u32 = 1 << 1;
/// `IPS_ASSURED`: traffic seen both ways; not evicted early.
pub const IPS_ASSURED: u32 = 1 << 2;
/// `IPS_OFFLOAD`: the flow is offloaded to the flow table.
pub const IPS_OFFLOAD: u32 = 1 << 14;

/// Which conntrack message carried the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtMessageKind {
    /// `IPCTNL_MSG_CT_NEW`: a dump entry, or a new/updated flow event.
    New,
    /// `IPCTNL_MSG_CT_GET`.
    Get,
    /// `IPCTNL_MSG_CT_DELETE`: the flow ended (`[DESTROY]`).
    Delete,
}

/// One flow of a netlink dump, borrowed from the message it was decoded from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtView<'a> {
    /// Which message carried it.
    pub kind: CtMessageKind,
    /// Address family of the `nfgenmsg` header (`AF_INET` 2, `AF_INET6` 10).
    pub family: u8,
    /// Layer-4 protocol number of the original tuple (0 when absent).
    pub proto: u8,
    /// Original direction, with its counters when the dump has them.
    pub orig: CtTuple,
    /// Reply direction.
    pub reply: CtTuple,
    /// `CTA_PROTOINFO_TCP_STATE` as the kernel numbers it (TCP only).
    pub tcp_state: Option<u8>,
    /// `CTA_STATUS` bits (0 when absent).
    pub status: u32,
    /// Seconds until the entry expires.
    pub timeout: Option<u32>,
    /// Connection mark.
    pub mark: Option<u32>,
    /// Conntrack zone.
    pub zone: Option<u16>,
    /// Conntrack id.
    pub id: Option<u32>,
    /// Reference count.
    pub use_count: Option<u32>,
    /// SELinux context name, as its raw bytes.
    pub secctx: Option<&'a [u8]>,
}

impl CtView<'_> {
    /// `[DESTROY]`: the flow ended.
    pub fn is_destroy(&self) -> bool {
        self.kind == CtMessageKind::Delete
    }

    /// `[UNREPLIED]`: nothing seen in the reply direction.
    pub fn unreplied(&self) -> bool {
        self.status & IPS_SEEN_REPLY == 0
    }

    /// `[ASSURED]`.
    pub fn assured(&self) -> bool {
        self.status & IPS_ASSURED != 0
    }

    /// The protocol's name as `conntrack -L` writes it (`unknown` for others).
    pub fn proto_name(&self) -> &'static str {
        proto_name(self.proto)
    }

    /// The TCP state's name (`ESTABLISHED`, …), when it is a known one.
    pub fn tcp_state_name(&self) -> Option<&'static str> {
        self.tcp_state.and_then(tcp_state)
    }

    /// The owned entry of this flow.
    pub fn to_entry(&self) -> CtEntry {
        CtEntry {
            event: self.is_destroy().then(|| "DESTROY".to_string()),
            proto: self.proto_name().to_string(),
            proto_num: self.proto,
            timeout: self.timeout,
            state: self.tcp_state_name().map(str::to_string),
            orig: self.orig.clone(),
            reply: self.reply.clone(),
            unreplied: self.unreplied(),
            assured: self.assured(),
            flags: if self.status & IPS_OFFLOAD != 0 {
                vec!["OFFLOAD".into()]
            } else {
                Vec::new()
            },
            mark: self.mark,
            zone: self.zone,
            id: self.id,
            use_count: self.use_count,
            delta_time: None,
            secctx: self.secctx.map(|n| {
                String::from_utf8_lossy(n)
                    .trim_end_matches('\0')
                    .to_string()
            }),
        }
    }
}

/// Incremental, allocation-free decoder of a conntrack netlink dump.
#[derive(Debug, Default)]
pub struct ViewDecoder(Stream);

impl ViewDecoder {
    /// A decoder at the start of a dump.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `NLMSG_DONE` was seen: the dump is complete.
    pub fn is_done(&self) -> bool {
        self.0.done
    }

    /// Feeds the next bytes read from the socket, calling `f` for every flow decoded.
    pub fn push<F: FnMut(&CtView<'_>)>(
        &mut self,
        bytes: &[u8],
        mut f: F,
    ) -> Result<(), ParseError> {
        self.0.push(bytes, |msg, offset, done, skipped| {
            message(msg, offset, done, skipped, &mut f)
        })
    }

    /// Ends the dump; bytes of an incomplete message left over are an error.
    pub fn finish(self) -> Result<SkipStats, ParseError> {
        self.0.finish()
    }
}

/// Why a message's attributes did not decode.
#[derive(Debug)]
pub(super) struct Malformed(&'static str);

fn message<F: FnMut(&CtView<'_>)>(
    msg: &[u8],
    offset: usize,
    done: &mut bool,
    skipped: &mut SkipStats,
    f: &mut F,
) -> Result<(), ParseError> {
    let msg_type = message_type(msg);
    let body = msg.get(NLMSG_HDRLEN..).unwrap_or_default();
    if msg_type < NLMSG_MIN_TYPE {
        return control(msg_type, body, offset, done, skipped).map(|c| match c {
            Control::Handled => {}
            Control::Undecodable(why) => undecodable(skipped, offset, why),
        });
    }
    if msg_type >> 8 != NFNL_SUBSYS_CTNETLINK {
        skipped.ignore("netlink message of another subsystem");
        return Ok(());
    }
    let Some((header, attrs)) = body.split_at_checked(NFGENMSG_LEN) else {
        undecodable(
            skipped,
            offset,
            "a netfilter message shorter than its header",
        );
        return Ok(());
    };
    let kind = match msg_type.to_le_bytes()[0] {
        IPCTNL_MSG_CT_NEW => CtMessageKind::New,
        IPCTNL_MSG_CT_GET => CtMessageKind::Get,
        IPCTNL_MSG_CT_DELETE => CtMessageKind::Delete,
        _ => {
            // Other conntrack messages (statistics, expectations' replies) still have to
            // be well-formed attribute lists.
            match check_attrs(attrs) {
                Ok(()) => skipped.ignore("netlink message of another subsystem"),
                Err(why) => undecodable(skipped, offset, why),
            }
            return Ok(());
        }
    };
    let family = header.first().copied().unwrap_or(0);
    // Attribute counts go to `skipped` only once the whole message decoded.
    let mut not_modeled = 0u64;
    match entry(attrs, kind, family, &mut not_modeled) {
        Err(Malformed(why)) => undecodable(skipped, offset, why),
        Ok(view) => {
            for _ in 0..not_modeled {
                skipped.ignore("conntrack attribute not modeled");
            }
            match view {
                Some(v) => f(&v),
                None => skipped.unknown(
                    Location::ByteOffset(offset),
                    "conntrack message without both tuples",
                    "",
                ),
            }
        }
    }
    Ok(())
}

fn undecodable(skipped: &mut SkipStats, offset: usize, why: &str) {
    skipped.unknown(
        Location::ByteOffset(offset),
        "undecodable netlink message",
        why,
    );
}

/// The attributes of a buffer, `(type, value)`, strictly: a header or a length that does
/// not fit is an error, after which the walk stops.
pub(super) struct Attrs<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Attrs<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<(u16, &'a [u8]), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.at..).filter(|r| !r.is_empty())?;
        let parsed = (|| {
            let h = rest
                .get(..4)
                .ok_or(Malformed("an attribute header cut short"))?;
            let len = usize::from(u16::from_ne_bytes([h[0], h[1]]));
            let kind = u16::from_ne_bytes([h[2], h[3]]) & NLA_TYPE_MASK;
            if len < 4 {
                return Err(Malformed("an attribute length below its header"));
            }
            let value = rest
                .get(4..len)
                .ok_or(Malformed("an attribute length past the end"))?;
            Ok((len, kind, value))
        })();
        match parsed {
            Ok((len, kind, value)) => {
                self.at = self.at.saturating_add(len.next_multiple_of(4));
                Some(Ok((kind, value)))
            }
            Err(e) => {
                self.at = self.buf.len();
                Some(Err(e))
            }
        }
    }
}

/// Whether `buf` is a well-formed attribute list (its values are not looked at).
pub(super) fn check_attrs(buf: &[u8]) -> Result<(), &'static str> {
    Attrs::new(buf).try_for_each(|a| a.map(drop).map_err(|Malformed(why)| why))
}

fn exact_u8(v: &[u8], what: &'static str) -> Result<u8, Malformed> {
    match v {
        [b] => Ok(*b),
        _ => Err(Malformed(what)),
    }
}

fn exact_be_u16(v: &[u8], what: &'static str) -> Result<u16, Malformed> {
    let b: [u8; 2] = v.try_into().map_err(|_| Malformed(what))?;
    Ok(u16::from_be_bytes(b))
}

fn exact_be_u32(v: &[u8], what: &'static str) -> Result<u32, Malformed> {
    let b: [u8; 4] = v.try_into().map_err(|_| Malformed(what))?;
    Ok(u32::from_be_bytes(b))
}

fn ip(v: &[u8]) -> Result<IpAddr, Malformed> {
    if let Ok(b) = <[u8; 4]>::try_from(v) {
        return Ok(IpAddr::V4(Ipv4Addr::from(b)));
    }
    let b: [u8; 16] = v
        .try_into()
        .map_err(|_| Malformed("an address of neither 4 nor 16 bytes"))?;
    Ok(IpAddr::V6(Ipv6Addr::from(b)))
}

/// A `CTA_TUPLE_*` attribute, checking the sizes of its addresses, protocol and ports.
fn decode_tuple(v: &[u8]) -> Result<TupleParts, Malformed> {
    let mut t = TupleParts::default();
    for a in Attrs::new(v) {
        match a? {
            (CTA_TUPLE_IP, ips) => {
                for a in Attrs::new(ips) {
                    match a? {
                        (CTA_IP_V4_SRC | CTA_IP_V6_SRC, v) => t.src = Some(ip(v)?),
                        (CTA_IP_V4_DST | CTA_IP_V6_DST, v) => t.dst = Some(ip(v)?),
                        _ => {}
                    }
                }
            }
            (CTA_TUPLE_PROTO, protos) => {
                for a in Attrs::new(protos) {
                    match a? {
                        (CTA_PROTO_NUM, v) => {
                            t.proto = Some(exact_u8(v, "a protocol number not of 1 byte")?);
                        }
                        (CTA_PROTO_SRC_PORT, v) => {
                            t.sport = Some(exact_be_u16(v, "a port not of 2 bytes")?);
                        }
                        (CTA_PROTO_DST_PORT, v) => {
                            t.dport = Some(exact_be_u16(v, "a port not of 2 bytes")?);
                        }
                        (CTA_PROTO_ICMP_ID | CTA_PROTO_ICMPV6_ID, v) => t.icmp_id = be_u16(v),
                        (CTA_PROTO_ICMP_TYPE | CTA_PROTO_ICMPV6_TYPE, v) => {
                            t.icmp_type = v.first().copied();
                        }
                        (CTA_PROTO_ICMP_CODE | CTA_PROTO_ICMPV6_CODE, v) => {
                            t.icmp_code = v.first().copied();
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(t)
}

/// The TCP state of a `CTA_PROTOINFO`, checking the TCP attributes' sizes.
fn protoinfo(v: &[u8], state: &mut Option<u8>) -> Result<(), Malformed> {
    for a in Attrs::new(v) {
        let (CTA_PROTOINFO_TCP, tcp) = a? else {
            continue;
        };
        for a in Attrs::new(tcp) {
            match a? {
                (CTA_PROTOINFO_TCP_STATE, v) => {
                    *state = Some(exact_u8(v, "a TCP state not of 1 byte")?);
                }
                (CTA_PROTOINFO_TCP_WSCALE_ORIGINAL | CTA_PROTOINFO_TCP_WSCALE_REPLY, v) => {
                    exact_u8(v, "a TCP window scale not of 1 byte")?;
                }
                (CTA_PROTOINFO_TCP_FLAGS_ORIGINAL | CTA_PROTOINFO_TCP_FLAGS_REPLY, v)
                    if v.len() < 2 =>
                {
                    return Err(Malformed("TCP flags shorter than 2 bytes"));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn entry<'a>(
    attrs: &'a [u8],
    kind: CtMessageKind,
    family: u8,
    not_modeled: &mut u64,
) -> Result<Option<CtView<'a>>, Malformed> {
    let (mut orig, mut reply) = (None, None);
    let mut tcp_state = None;
    let mut status = None;
    let (mut timeout, mut mark, mut zone, mut id, mut use_count, mut secctx) =
        (None, None, None, None, None, None);
    let (mut c_orig, mut c_reply) = (None, None);
    for a in Attrs::new(attrs) {
        match a? {
            (CTA_TUPLE_ORIG, v) => orig = Some(decode_tuple(v)?),
            (CTA_TUPLE_REPLY, v) => reply = Some(decode_tuple(v)?),
            (CTA_PROTOINFO, v) => protoinfo(v, &mut tcp_state)?,
            (CTA_STATUS, v) => status = Some(exact_be_u32(v, "a status not of 4 bytes")?),
            (CTA_TIMEOUT, v) => timeout = Some(exact_be_u32(v, "a timeout not of 4 bytes")?),
            (CTA_MARK, v) => mark = Some(exact_be_u32(v, "a mark not of 4 bytes")?),
            (CTA_ID, v) => id = be_u32(v),
            (CTA_USE, v) => use_count = be_u32(v),
            (CTA_ZONE, v) => zone = be_u16(v),
            (CTA_COUNTERS_ORIG, v) => c_orig = counters(v),
            (CTA_COUNTERS_REPLY, v) => c_reply = counters(v),
            (CTA_SECCTX, v) => {
                secctx = nested(v)
                    .find(|(k, _)| *k == CTA_SECCTX_NAME)
                    .map(|(_, n)| n);
            }
            _ => *not_modeled += 1,
        }
    }
    let (Some(orig), Some(reply)) = (orig, reply) else {
        return Ok(None);
    };
    let (Some(orig_t), Some(reply_t)) = (orig.build(c_orig), reply.build(c_reply)) else {
        return Ok(None);
    };
    Ok(Some(CtView {
        kind,
        family,
        proto: orig.proto.unwrap_or(0),
        orig: orig_t,
        reply: reply_t,
        tcp_state,
        status: status.unwrap_or(0),
        timeout,
        mark,
        zone,
        id,
        use_count,
        secctx,
    }))
}
