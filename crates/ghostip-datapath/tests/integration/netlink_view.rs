//! The allocation-free conntrack netlink decoder ([`ViewDecoder`]) against the owned one
//! ([`NetlinkDecoder`]): the same entries and the same skip counts on generated dumps
//! (every attribute the kernel sends, both families, events, split reads), on corrupted
//! ones, and on the kernel capture in `tests/data`.
#![cfg(feature = "netlink")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::IpAddr;
use std::path::PathBuf;

use ghostip_datapath::SkipStats;
use ghostip_datapath::conntrack_netlink::{CtMessageKind, NetlinkDecoder, ViewDecoder};
use ghostip_datapath::{CtEntry, ParseError};
use proptest::prelude::*;

const NLA_F_NESTED: u16 = 0x8000;

/// A netlink attribute: header, value, padding.
fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&u16::try_from(4 + value.len()).unwrap().to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(value);
    while a.len() % 4 != 0 {
        a.push(0);
    }
    a
}

fn nested(kind: u16, parts: &[Vec<u8>]) -> Vec<u8> {
    nla(kind | NLA_F_NESTED, &parts.concat())
}

fn message(kind: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&u32::try_from(16 + payload.len()).unwrap().to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(payload);
    while m.len() % 4 != 0 {
        m.push(0);
    }
    m
}

#[derive(Clone, Debug)]
struct GenTuple {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
}

/// One generated flow: which optional attributes it has is part of the case.
#[derive(Clone, Debug)]
struct GenFlow {
    msg: u8,
    v6: bool,
    proto: u8,
    orig: GenTuple,
    reply: GenTuple,
    icmp: (u8, u8, u16),
    tcp_state: Option<u8>,
    tcp_extra: bool,
    status: Option<u32>,
    timeout: Option<u32>,
    mark: Option<u32>,
    zone: Option<u16>,
    id: Option<u32>,
    use_count: Option<u32>,
    counters: Option<(u64, u64, u64, u64)>,
    secctx: Option<String>,
    unmodeled: Vec<u16>,
    drop_reply: bool,
}

fn tuple(t: &GenTuple, proto: u8, icmp: (u8, u8, u16)) -> Vec<u8> {
    let ip = |a: &IpAddr| match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let (s, d) = if t.src.is_ipv4() { (1, 2) } else { (3, 4) };
    let ips = nested(1, &[nla(s, &ip(&t.src)), nla(d, &ip(&t.dst))]);
    let mut p = vec![nla(1, &[proto])];
    match proto {
        1 | 58 => {
            let base = if proto == 1 { 4 } else { 7 };
            p.push(nla(base, &icmp.2.to_be_bytes()));
            p.push(nla(base + 1, &[icmp.0]));
            p.push(nla(base + 2, &[icmp.1]));
        }
        47 => {}
        _ => {
            p.push(nla(2, &t.sport.to_be_bytes()));
            p.push(nla(3, &t.dport.to_be_bytes()));
        }
    }
    [ips, nested(2, &p)].concat()
}

impl GenFlow {
    fn bytes(&self) -> Vec<u8> {
        let mut attrs = vec![nla(
            1 | NLA_F_NESTED,
            &tuple(&self.orig, self.proto, self.icmp),
        )];
        if !self.drop_reply {
            attrs.push(nla(
                2 | NLA_F_NESTED,
                &tuple(&self.reply, self.proto, self.icmp),
            ));
        }
        if let Some(s) = self.status {
            attrs.push(nla(3, &s.to_be_bytes()));
        }
        if let Some(s) = self.tcp_state {
            let mut tcp = vec![nla(1, &[s])];
            if self.tcp_extra {
                tcp.push(nla(2, &[7]));
                tcp.push(nla(3, &[7]));
                tcp.push(nla(4, &[0x23, 0x23]));
                tcp.push(nla(5, &[0x23, 0x23]));
            }
            attrs.push(nested(4, &[nested(1, &tcp)]));
        }
        if let Some(t) = self.timeout {
            attrs.push(nla(7, &t.to_be_bytes()));
        }
        if let Some(m) = self.mark {
            attrs.push(nla(8, &m.to_be_bytes()));
        }
        if let Some((p1, b1, p2, b2)) = self.counters {
            attrs.push(nested(
                9,
                &[nla(1, &p1.to_be_bytes()), nla(2, &b1.to_be_bytes())],
            ));
            attrs.push(nested(
                10,
                &[nla(1, &p2.to_be_bytes()), nla(2, &b2.to_be_bytes())],
            ));
        }
        if let Some(u) = self.use_count {
            attrs.push(nla(11, &u.to_be_bytes()));
        }
        if let Some(i) = self.id {
            attrs.push(nla(12, &i.to_be_bytes()));
        }
        if let Some(c) = &self.secctx {
            let mut name = c.as_bytes().to_vec();
            name.push(0);
            attrs.push(nested(13, &[nla(1, &name)]));
        }
        if let Some(z) = self.zone {
            attrs.push(nla(18, &z.to_be_bytes()));
        }
        for k in &self.unmodeled {
            attrs.push(nla(*k, &[1, 2, 3, 4, 5, 6, 7, 8]));
        }
        let family = if self.v6 { 10 } else { 2 };
        let mut payload = vec![family, 0, 0, 0];
        payload.extend(attrs.concat());
        message((1 << 8) | u16::from(self.msg), 0x2, &payload)
    }
}

fn addr(v6: bool) -> impl Strategy<Value = IpAddr> {
    if v6 {
        any::<[u8; 16]>().prop_map(IpAddr::from).boxed()
    } else {
        any::<[u8; 4]>().prop_map(IpAddr::from).boxed()
    }
}

fn gen_tuple(v6: bool) -> impl Strategy<Value = GenTuple> {
    (addr(v6), addr(v6), any::<u16>(), any::<u16>()).prop_map(|(src, dst, sport, dport)| GenTuple {
        src,
        dst,
        sport,
        dport,
    })
}

fn gen_flow() -> impl Strategy<Value = GenFlow> {
    any::<bool>().prop_flat_map(|v6| {
        (
            (
                prop_oneof![Just(0u8), Just(1), Just(2)],
                prop_oneof![
                    Just(6u8),
                    Just(17),
                    Just(1),
                    Just(58),
                    Just(132),
                    Just(47),
                    any::<u8>()
                ],
                gen_tuple(v6),
                gen_tuple(v6),
                any::<(u8, u8, u16)>(),
                proptest::option::of(0u8..12),
                any::<bool>(),
            ),
            (
                proptest::option::of(prop_oneof![
                    Just(0u32),
                    Just(0xe),
                    Just(0xa),
                    Just(0x4000 | 0xe),
                    any::<u32>()
                ]),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u16>()),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<(u64, u64, u64, u64)>()),
                proptest::option::of("[a-z_:]{1,24}"),
                proptest::collection::vec(
                    prop_oneof![Just(5u16), Just(6), Just(15), Just(20)],
                    0..3,
                ),
                proptest::bool::weighted(0.05),
            ),
        )
            .prop_map(move |(a, b)| GenFlow {
                msg: a.0,
                v6,
                proto: a.1,
                orig: a.2,
                reply: a.3,
                icmp: a.4,
                tcp_state: a.5,
                tcp_extra: a.6,
                status: b.0,
                timeout: b.1,
                mark: b.2,
                zone: b.3,
                id: b.4,
                use_count: b.5,
                counters: b.6,
                secctx: b.7,
                unmodeled: b.8,
                drop_reply: b.9,
            })
    })
}

fn dump(flows: &[GenFlow], ack: bool) -> Vec<u8> {
    let mut b = Vec::new();
    if ack {
        b.extend(message(2, 0x100, &[0; 20]));
    }
    for f in flows {
        b.extend(f.bytes());
    }
    b.extend(message(3, 0x2, &0i32.to_ne_bytes()));
    b
}

/// What a decoder made of a stream: the entries and skip counts, or the error.
type Outcome = Result<(Vec<CtEntry>, bool, SkipStats), ParseError>;

fn owned(bytes: &[u8], cuts: &[usize]) -> Outcome {
    let mut d = NetlinkDecoder::new();
    let mut got = Vec::new();
    for piece in pieces(bytes, cuts) {
        d.push(piece, |e| got.push(e))?;
    }
    let done = d.is_done();
    Ok((got, done, d.finish()?))
}

fn viewed(bytes: &[u8], cuts: &[usize]) -> Outcome {
    let mut d = ViewDecoder::new();
    let mut got = Vec::new();
    for piece in pieces(bytes, cuts) {
        d.push(piece, |v| got.push(v.to_entry()))?;
    }
    let done = d.is_done();
    Ok((got, done, d.finish()?))
}

fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

fn assert_agree(bytes: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let (a, b) = (owned(bytes, cuts), viewed(bytes, cuts));
    match (&a, &b) {
        (Ok((ea, da, sa)), Ok((eb, db, sb))) => {
            prop_assert_eq!(ea, eb);
            prop_assert_eq!(da, db);
            // Counts, not the samples: the decoders word a malformed message's cause
            // differently.
            prop_assert_eq!((sa.ignored, sa.unknown), (sb.ignored, sb.unknown));
            prop_assert_eq!(&sa.ignored_by_reason, &sb.ignored_by_reason);
            prop_assert_eq!(&sa.unknown_by_reason, &sb.unknown_by_reason);
        }
        (Err(ea), Err(eb)) => prop_assert_eq!(ea.to_string(), eb.to_string()),
        _ => prop_assert!(false, "owned {a:?}\nview {b:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Generated dumps: every entry and every skip count agree, however the stream is cut.
    #[test]
    fn view_decodes_generated_dumps_like_the_owned_decoder(
        flows in proptest::collection::vec(gen_flow(), 0..12),
        ack in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..4),
    ) {
        let bytes = dump(&flows, ack);
        let whole = viewed(&bytes, &[]).unwrap();
        let complete = flows.iter().filter(|f| !f.drop_reply).count();
        prop_assert_eq!(whole.0.len(), complete);
        prop_assert!(whole.1);
        assert_agree(&bytes, &cuts)?;
    }

    /// Corrupted dumps (bytes overwritten, a cut end): the same entries, skip counts or
    /// error, and no panic.
    #[test]
    fn view_decodes_corrupted_dumps_like_the_owned_decoder(
        flows in proptest::collection::vec(gen_flow(), 1..6),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let mut bytes = dump(&flows, false);
        for (at, b) in &edits {
            let n = bytes.len();
            bytes[at % n] = *b;
        }
        if let Some(c) = cut {
            bytes.truncate(c % (bytes.len() + 1));
        }
        assert_agree(&bytes, &[])?;
    }
}

#[test]
fn view_kind_family_and_flags_of_a_generated_flow() {
    let flow = GenFlow {
        msg: 2,
        v6: true,
        proto: 6,
        orig: GenTuple {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::a".parse().unwrap(),
            sport: 40000,
            dport: 80,
        },
        reply: GenTuple {
            src: "fd00::b".parse().unwrap(),
            dst: "fd00::1".parse().unwrap(),
            sport: 8080,
            dport: 40000,
        },
        icmp: (0, 0, 0),
        tcp_state: Some(3),
        tcp_extra: true,
        status: Some(0xe),
        timeout: Some(120),
        mark: None,
        zone: Some(3),
        id: None,
        use_count: None,
        counters: None,
        secctx: Some("system_u:object_r:unlabeled_t:s0".into()),
        unmodeled: vec![],
        drop_reply: false,
    };
    let bytes = dump(&[flow], false);
    let mut d = ViewDecoder::new();
    let mut seen = 0;
    d.push(&bytes, |v| {
        seen += 1;
        assert_eq!(v.kind, CtMessageKind::Delete);
        assert!(v.is_destroy());
        assert_eq!((v.family, v.proto, v.proto_name()), (10, 6, "tcp"));
        assert_eq!(v.tcp_state_name(), Some("ESTABLISHED"));
        assert!(!v.unreplied() && v.assured());
        assert_eq!(v.orig.dport, Some(80));
        assert_eq!(v.reply.src, "fd00::b".parse::<IpAddr>().unwrap());
        assert_eq!((v.timeout, v.zone, v.mark), (Some(120), Some(3), None));
        assert_eq!(v.secctx, Some(&b"system_u:object_r:unlabeled_t:s0\0"[..]));
    })
    .unwrap();
    assert_eq!(seen, 1);
    assert!(d.is_done());
}

/// The kernel capture (`tests/data/capture-conntrack.sh`): the same entries, with the
/// stream cut anywhere.
#[test]
fn view_decodes_the_kernel_capture_like_the_owned_decoder() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/conntrack-netlink-dump_netns-dnat.bin");
    let bin = std::fs::read(&p).unwrap();
    let (entries, done, skipped) = viewed(&bin, &[]).unwrap();
    assert_eq!(entries.len(), 4);
    assert!(done);
    assert_eq!(skipped.unknown, 0);
    for cut in 0..=bin.len() {
        assert_agree(&bin, &[cut]).unwrap();
    }
    // A truncated dump and a broken header are the same typed errors.
    assert_agree(&bin[..bin.len() - 7], &[]).unwrap();
    assert!(viewed(&bin[..bin.len() - 7], &[]).is_err());
    assert!(
        viewed(&[3, 0, 0, 0, 0, 0], &[])
            .unwrap_err()
            .to_string()
            .contains("byte 0")
    );
}

/// Malformed attributes: a length past the end, a length below the header, an address of
/// the wrong size, a nested attribute whose length claims the whole message; each is one
/// counted skip, the next message still decodes.
#[test]
fn malformed_attributes_are_counted_skips() {
    let good = GenFlow {
        msg: 0,
        v6: false,
        proto: 17,
        orig: GenTuple {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.96.0.10".parse().unwrap(),
            sport: 5000,
            dport: 53,
        },
        reply: GenTuple {
            src: "10.0.1.5".parse().unwrap(),
            dst: "10.0.0.1".parse().unwrap(),
            sport: 53,
            dport: 5000,
        },
        icmp: (0, 0, 0),
        tcp_state: None,
        tcp_extra: false,
        status: Some(0x8),
        timeout: Some(30),
        mark: Some(0),
        zone: None,
        id: Some(1),
        use_count: Some(1),
        counters: None,
        secctx: None,
        unmodeled: vec![],
        drop_reply: false,
    };
    let ct = |attrs: &[u8]| {
        let mut p = vec![2, 0, 0, 0];
        p.extend_from_slice(attrs);
        message(0x100, 0x2, &p)
    };
    let bad = [
        // Length past the end.
        ct(&[0xff, 0x00, 0x01, 0x80, 0, 0, 0, 0]),
        // Length below the header.
        ct(&[0x02, 0x00, 0x03, 0x00]),
        // A 5-byte address.
        ct(&nested(1, &[nested(1, &[nla(1, &[1, 2, 3, 4, 5])])])),
        // A status of 3 bytes.
        ct(&nla(3, &[0, 0, 1])),
        // A header cut short.
        ct(&[0x08, 0x00]),
    ];
    let mut bytes = Vec::new();
    for b in &bad {
        bytes.extend_from_slice(b);
    }
    bytes.extend(dump(&[good], false));
    let (entries, done, skipped) = viewed(&bytes, &[]).unwrap();
    assert_eq!(entries.len(), 1);
    assert!(done);
    assert_eq!(skipped.unknown, 5, "{skipped:?}");
    assert_agree(&bytes, &[]).unwrap();
}

/// Found by the `conntrack_netlink` fuzz target: a message of type 0 (an nfnetlink control
/// message) whose attribute list is malformed is undecodable for both decoders, not a
/// message of another subsystem.
#[test]
fn a_control_message_with_malformed_attributes_is_undecodable_regression_fuzz() {
    let mut body = vec![2, 0, 0, 0];
    body.extend_from_slice(&[0x35, 0x00, 0x02, 0x80, 0, 0, 0, 0]);
    let mut bytes = message(0, 0, &body);
    bytes.extend(message(0, 0, &[2, 0, 0, 0]));
    bytes.extend(message(3, 0x2, &0i32.to_ne_bytes()));
    let (entries, done, skipped) = viewed(&bytes, &[]).unwrap();
    assert!(entries.is_empty() && done);
    assert_eq!((skipped.ignored, skipped.unknown), (1, 1), "{skipped:?}");
    assert_agree(&bytes, &[]).unwrap();
}
