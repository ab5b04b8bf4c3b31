//! Chain names of kube-proxy's iptables mode: their class ([`ChainClass`]) and the sortable
//! 83-bit key a load-balancing chain's name packs into ([`ChainKey`]), so that the chain graph
//! needs no map of names.
//!
//! Tests (`tests.rs`): `packed_keys_sort_like_the_names`, and the property tests
//! `base32_word_agrees_with_digits`, `lb_tag_agrees_with_chain_class` and
//! `prefixes_sort_like_keys`.

use super::words::word_at;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ChainClass {
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

pub(super) fn chain_class(chain: &[u8]) -> ChainClass {
    let Some(rest) = chain.strip_prefix(b"KUBE-".as_slice()) else {
        return ChainClass::NonKube;
    };
    match rest {
        b"SERVICES" => ChainClass::Services,
        b"NODEPORTS" => ChainClass::NodePorts,
        b"EXTERNAL-SERVICES" => ChainClass::ExternalServices,
        b"PORTALS-CONTAINER" | b"PORTALS-HOST" => ChainClass::Portals,
        b"NODEPORT-CONTAINER" | b"NODEPORT-HOST" => ChainClass::UserspaceNodePorts,
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
        | b"EXTERNAL-SERVICES-FIREWALL" => ChainClass::Helper,
        _ if rest.starts_with(b"SVC-") => ChainClass::Svc,
        _ if rest.starts_with(b"SVL-") => ChainClass::Svl,
        _ if rest.starts_with(b"EXT-") => ChainClass::Ext,
        _ if rest.starts_with(b"FW-") => ChainClass::Fw,
        _ if rest.starts_with(b"XLB-") => ChainClass::Xlb,
        _ if rest.starts_with(b"SEP-") => ChainClass::Sep,
        _ => ChainClass::OtherKube,
    }
}

pub(super) fn is_lb_chain(c: ChainClass) -> bool {
    matches!(
        c,
        ChainClass::Svc
            | ChainClass::Svl
            | ChainClass::Ext
            | ChainClass::Fw
            | ChainClass::Xlb
            | ChainClass::Sep
    )
}

/// A chain name as an 83-bit key that sorts like the name: a 3-bit tag for the chain
/// kind (`KUBE-EXT` < `KUBE-FW` < `KUBE-SEP` < `KUBE-SVC` < `KUBE-SVL` < `KUBE-XLB`)
/// then the 16 base32 characters of kube-proxy's hash, 5 bits each (see
/// [`pack_chain`]). Names of another shape get tag 7 and an interned number.
/// Three `u32`s, so rows holding a key stay 4-byte aligned.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct ChainKey {
    pub(super) hi: u32,
    pub(super) mid: u32,
    pub(super) lo: u32,
}

impl ChainKey {
    /// Tag for names that do not pack (interned).
    pub(super) const NAMED: u32 = 7;

    pub(super) fn named(id: u32) -> Self {
        Self {
            hi: Self::NAMED << 16,
            mid: 0,
            lo: id,
        }
    }

    pub(super) fn tag(self) -> usize {
        (self.hi >> 16) as usize & 7
    }

    /// 32 bits that sort like the key (equal keys have equal prefixes, a smaller key never
    /// a larger prefix): the tag, then the first 29 bits of kube-proxy's hash, or the
    /// interned number of another name.
    pub(super) fn prefix(self) -> u32 {
        if self.tag() == Self::NAMED as usize {
            (Self::NAMED << 29) | self.lo.min((1 << 29) - 1)
        } else {
            ((self.tag() as u32) << 29) | (self.body() >> 35) as u32
        }
    }

    /// The 64 bits below the tag: uniformly spread for kube-proxy's hashed names, so a
    /// position in a sorted array can be interpolated from them.
    pub(super) fn body(self) -> u64 {
        (u64::from(self.hi & 0xffff) << 48) | (u64::from(self.mid) << 16) | u64::from(self.lo >> 16)
    }
}

/// kube-proxy chain names are `KUBE-XXX-` plus 16 base32 characters: packed into a
/// [`ChainKey`] without a heap allocation, in the order of the names.
pub(super) fn pack_chain(name: &[u8]) -> Option<ChainKey> {
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
pub(super) fn lb_tag(name: &[u8]) -> Option<(u32, usize)> {
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
pub(super) fn packed_len(b: &[u8]) -> usize {
    if b.get(5..8) == Some(b"FW-") { 24 } else { 25 }
}

/// Eight base32 digits as a 40-bit number, `None` if one is not a base32 digit: the
/// eight bytes are checked and converted together in one 64-bit word (two range tests
/// per byte lane, then three shift-and-merge steps that pack the 5-bit values).
pub(super) fn base32_40(digits: &[u8]) -> Option<u64> {
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
