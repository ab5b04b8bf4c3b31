//! Snapshot tests of every parser over dumps written by hand in the shape of real output
//! and over real `iptables-save` / `nft -j` captures of generated rules
//! (`tests/data/capture.sh`), plus typed-error and format-detection tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::IpAddr;
use std::path::PathBuf;

use ghostip_datapath::{
    BackendState, Format, FrontendKind, LbTable, ParseError, Parsed, Protocol, cilium, conntrack,
    detect_format, iptables, ipvs, nft, parse, parse_reader,
};
use ghostip_testkit::dumps::{GenModel, GenSpec};

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text(name: &str) -> String {
    String::from_utf8(data(name)).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn lb(format: Format, name: &str) -> LbTable {
    let bytes = data(name);
    assert_eq!(
        detect_format(&bytes),
        Some(format),
        "{name}: detected format"
    );
    match parse(format, &bytes).unwrap() {
        Parsed::Lb(t) => t,
        Parsed::Conntrack(_) => panic!("{name}: conntrack table"),
    }
}

#[test]
fn iptables_real_capture_of_generated_rules() {
    // Made by tests/data/capture.sh: generator → iptables-restore → iptables-save.
    let t = lb(
        Format::Iptables,
        "iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt",
    );
    let mut spec = GenSpec::new(12, 40);
    spec.empty_every = 6;
    let expected = GenModel::generate(&spec).expected(Format::Iptables);
    assert_eq!(t.frontends, expected.frontends);
    assert_eq!(t.skipped.unknown, 0, "{:?}", t.skipped);
    insta::assert_yaml_snapshot!("iptables_real_capture", t);
}

#[test]
fn iptables_reader_and_str_agree() {
    let bytes = data("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt");
    let a = iptables::parse_reader(&bytes[..]).unwrap();
    let b = iptables::parse_str(std::str::from_utf8(&bytes).unwrap()).unwrap();
    let c = iptables::parse_bytes(&bytes).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c);
}

#[test]
fn iptables_json_snapshot_pins_the_serde_shape() {
    let dump = "*nat\n\
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU\n\
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.1.5:53\" -j KUBE-SEP-AAAAAAAAAAAAAAAA\n\
-A KUBE-SEP-AAAAAAAAAAAAAAAA -p udp -m comment --comment kube-system/kube-dns:dns -m udp -j DNAT --to-destination 10.244.1.5:53\n\
-A KUBE-BOGUS -j ACCEPT\n\
this line is not iptables-save\n\
COMMIT\n";
    let t = iptables::parse_str(dump).unwrap();
    insta::assert_json_snapshot!("iptables_json_shape", t);
    let back: LbTable = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
    assert_eq!(back, t);
}

#[test]
fn iptables_older_layouts() {
    // kube-proxy 1.10-1.23: KUBE-FW → KUBE-XLB for local traffic policy, `-d IP/32`,
    // DNAT to IPv6 endpoints, `-c` counters.
    let dump = "*nat\n\
[0:0] -A KUBE-SERVICES -d 1.2.3.4/32 -p tcp -m comment --comment \"default/web:http loadbalancer IP\" -m tcp --dport 80 -j KUBE-FW-AAAAAAAAAAAAAAAA\n\
[0:0] -A KUBE-FW-AAAAAAAAAAAAAAAA -m comment --comment \"default/web:http loadbalancer IP\" -j KUBE-MARK-MASQ\n\
[0:0] -A KUBE-FW-AAAAAAAAAAAAAAAA -m comment --comment \"default/web:http loadbalancer IP\" -j KUBE-XLB-AAAAAAAAAAAAAAAA\n\
[0:0] -A KUBE-FW-AAAAAAAAAAAAAAAA -m comment --comment \"default/web:http loadbalancer IP\" -j KUBE-MARK-DROP\n\
[0:0] -A KUBE-XLB-AAAAAAAAAAAAAAAA -m comment --comment \"Balancing rule 0 for default/web:http\" -j KUBE-SEP-BBBBBBBBBBBBBBBB\n\
[0:0] -A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -m comment --comment \"default/web:http\" -m tcp -j DNAT --to-destination [fd00::5]:8080\n\
COMMIT\n";
    let t = iptables::parse_str(dump).unwrap();
    let fe = t.frontend(ip("1.2.3.4"), 80, Protocol::Tcp).unwrap();
    assert_eq!(fe.kind, FrontendKind::LoadBalancer);
    assert_eq!(fe.backends.len(), 1);
    assert_eq!(fe.backends[0].ip, ip("fd00::5"));
    assert_eq!(t.skipped.unknown, 0);
}

#[test]
fn iptables_garbage_is_a_typed_error() {
    let err = iptables::parse_str("hello\nworld\n").unwrap_err();
    match &err {
        ParseError::Unexpected {
            format, location, ..
        } => {
            assert_eq!(*format, Format::Iptables);
            assert_eq!(location.to_string(), "line 1");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("expected iptables-save output"),
        "{err}"
    );
    // An empty dump is a valid (empty) ruleset.
    assert!(iptables::parse_str("").unwrap().frontends.is_empty());
}

#[test]
fn nft_real_captures_of_generated_rules() {
    let t = lb(Format::NftJson, "nft-j_gen-12svc-40ep_nft-1.0.6.json");
    let mut spec = GenSpec::new(12, 40);
    spec.empty_every = 6;
    assert_eq!(
        t.frontends,
        GenModel::generate(&spec)
            .expected(Format::NftJson)
            .frontends
    );
    assert_eq!(t.skipped.unknown, 0, "{:?}", t.skipped);
    insta::assert_yaml_snapshot!("nft_real_capture", t);

    let t = lb(
        Format::NftJson,
        "nft-j_gen-6svc-14ep-inline-dnat_nft-1.0.6.json",
    );
    let mut spec = GenSpec::new(6, 14);
    spec.nft_inline_dnat = true;
    assert_eq!(
        t.frontends,
        GenModel::generate(&spec)
            .expected(Format::NftJson)
            .frontends
    );
    assert_eq!(t.skipped.unknown, 0, "{:?}", t.skipped);
}

#[test]
fn nft_ip_and_ip6_documents_in_a_row_and_unknown_constructs() {
    let ip4 = r#"{"nftables": [{"metainfo": {"version": "1.1.3"}},
 {"table": {"family": "ip", "name": "kube-proxy", "handle": 1}},
 {"map": {"family": "ip", "name": "service-ips", "table": "kube-proxy", "type": ["ipv4_addr", "inet_proto", "inet_service"], "map": "verdict",
   "elem": [[{"concat": ["10.96.0.10", "udp", 53]}, {"goto": {"target": "service-FY5PMXPG-kube-system/kube-dns/udp/dns"}}],
            [{"concat": ["10.96.0.11", "udp", "fifty-three"]}, {"goto": {"target": "x"}}]]}},
 {"rule": {"family": "ip", "table": "kube-proxy", "chain": "service-FY5PMXPG-kube-system/kube-dns/udp/dns", "handle": 4,
   "expr": [{"fib": {"result": "type", "flags": ["saddr"]}}, {"vmap": {"key": {"numgen": {"mode": "random", "mod": 2, "offset": 0}},
     "data": {"set": [[0, {"goto": {"target": "endpoint-A-kube-system/kube-dns/udp/dns__10.244.1.5/53"}}], [1, {"goto": {"target": "endpoint-B-kube-system/kube-dns/udp/dns__10.244.1.6/53"}}]]}}}]}},
 {"rule": {"family": "ip", "table": "kube-proxy", "chain": "endpoint-A-kube-system/kube-dns/udp/dns__10.244.1.5/53", "handle": 5,
   "expr": [{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "udp"}}, {"dnat": {"addr": "10.244.1.5", "port": 53}}]}},
 {"rule": {"family": "ip", "table": "kube-proxy", "chain": "endpoint-B-kube-system/kube-dns/udp/dns__10.244.1.6/53", "handle": 6,
   "expr": [{"dnat": {"addr": {"something-new": 1}}}]}},
 {"flowtable": {"family": "ip", "table": "kube-proxy", "name": "f"}},
 {"quantum-thing": {"table": "kube-proxy"}},
 {"rule": {"family": "ip", "table": "nat", "chain": "KUBE-SERVICES", "expr": []}}
]}"#;
    let ip6 = r#"{"nftables": [{"map": {"family": "ip6", "name": "service-ips", "table": "kube-proxy", "map": "verdict",
   "elem": [[{"concat": ["fd00:10:96::a", "udp", 53]}, {"goto": {"target": "service-FY5PMXPG-kube-system/kube-dns/udp/dns"}}]]}},
 {"rule": {"family": "ip6", "table": "kube-proxy", "chain": "service-FY5PMXPG-kube-system/kube-dns/udp/dns", "handle": 9,
   "expr": [{"dnat": {"family": "ip6", "addr": {"map": {"key": {"numgen": {"mode": "random", "mod": 1, "offset": 0}}, "data": {"set": [[0, {"concat": ["fd00:10:244::5", 53]}]]}}}}}]}}]}"#;
    let both = format!("{ip4}\n{ip6}\n");
    assert_eq!(detect_format(both.as_bytes()), Some(Format::NftJson));
    let t = nft::parse_str(&both).unwrap();
    insta::assert_yaml_snapshot!("nft_two_documents", t);
    let fe = t.frontend(ip("10.96.0.10"), 53, Protocol::Udp).unwrap();
    assert_eq!(fe.backends.len(), 1, "endpoint B has an unknown dnat shape");
    assert_eq!(
        fe.service.as_ref().unwrap().to_string(),
        "kube-system/kube-dns:dns"
    );
    let fe6 = t.frontend(ip("fd00:10:96::a"), 53, Protocol::Udp).unwrap();
    assert_eq!(fe6.backends[0].ip, ip("fd00:10:244::5"));
    assert!(t.skipped.unknown >= 3, "{:?}", t.skipped);
    // The reader gives the same table.
    assert_eq!(nft::parse_reader(both.as_bytes()).unwrap(), t);
}

#[test]
fn nft_errors_name_the_position() {
    let err = nft::parse_str("{\"nftables\": [{\"table\": {}},").unwrap_err();
    match err {
        ParseError::Json { location, .. } => assert_eq!(location.to_string(), "line 1 column 28"),
        other => panic!("{other:?}"),
    }
    let err = nft::parse_str("{\"something\": 1}").unwrap_err();
    assert!(err.to_string().contains("nftables"), "{err}");
    let err = nft::parse_str("").unwrap_err();
    assert!(matches!(err, ParseError::Json { .. }), "{err:?}");
}

#[test]
fn ipvsadm_list_and_save() {
    let t = lb(Format::Ipvsadm, "ipvsadm-Ln_weight0.txt");
    insta::assert_yaml_snapshot!("ipvsadm_list", t);
    let dns = t.frontend(ip("10.96.0.10"), 53, Protocol::Udp).unwrap();
    let stale = dns
        .backends
        .iter()
        .find(|b| b.ip == ip("10.244.2.7"))
        .unwrap();
    assert_eq!(stale.weight, Some(0));
    assert_eq!(stale.state, BackendState::Terminating);
    assert_eq!(
        t.skipped
            .unknown_by_reason
            .get("firewall-mark virtual server"),
        Some(&1)
    );

    let s = lb(Format::Ipvsadm, "ipvsadm-save-n.txt");
    insta::assert_yaml_snapshot!("ipvsadm_save", s);
    let dns = s.frontend(ip("10.96.0.10"), 53, Protocol::Udp).unwrap();
    assert_eq!(
        dns.backends
            .iter()
            .filter(|b| b.state == BackendState::Terminating)
            .count(),
        1
    );
    assert!(
        s.frontend(ip("10.101.4.20"), 80, Protocol::Tcp)
            .unwrap()
            .flags
            .contains(&"persistent=10800".to_string())
    );
    let err = ipvs::parse_str("no ipvs here").unwrap_err();
    assert!(matches!(
        err,
        ParseError::Unexpected {
            format: Format::Ipvsadm,
            ..
        }
    ));
}

#[test]
fn cilium_service_list_text_states() {
    let t = lb(Format::CiliumServiceList, "cilium-service-list_1.19.txt");
    insta::assert_yaml_snapshot!("cilium_service_list", t);
    let udp = t.frontend(ip("10.96.0.10"), 53, Protocol::Udp).unwrap();
    let states: Vec<_> = udp
        .backends
        .iter()
        .map(|b| b.state.as_str().to_string())
        .collect();
    assert_eq!(states, ["active", "active", "maintenance"]);
    let tcp = t.frontend(ip("10.96.0.10"), 53, Protocol::Tcp).unwrap();
    assert!(
        tcp.backends
            .iter()
            .any(|b| b.state == BackendState::Quarantined)
    );
    assert!(
        t.frontend(ip("10.96.3.4"), 8080, Protocol::Tcp)
            .unwrap()
            .backends
            .is_empty()
    );
}

#[test]
fn cilium_service_json() {
    let t = lb(Format::CiliumServiceJson, "cilium-service-list.json");
    insta::assert_yaml_snapshot!("cilium_service_json", t);
    let dns = t.frontend(ip("10.96.0.10"), 53, Protocol::Udp).unwrap();
    assert_eq!(dns.backends.len(), 3, "status.realized wins over spec");
    assert_eq!(
        dns.backends
            .iter()
            .find(|b| b.ip == ip("10.244.1.201"))
            .unwrap()
            .state,
        BackendState::Quarantined
    );
    assert_eq!(t.skipped.unknown, 1, "the service without frontend-address");
    let err = cilium::parse_service_json(b"[{\"spec\": ").unwrap_err();
    assert!(matches!(
        err,
        ParseError::Json {
            format: Format::CiliumServiceJson,
            ..
        }
    ));
}

#[test]
fn cilium_bpf_lb_list_text_and_json() {
    let t = lb(Format::CiliumBpfLbList, "cilium-bpf-lb-list_1.18.txt");
    insta::assert_yaml_snapshot!("cilium_bpf_lb_list", t);
    let np = t.frontend(ip("0.0.0.0"), 31940, Protocol::Tcp).unwrap();
    assert_eq!(np.kind, FrontendKind::NodePort);
    assert!(np.flags.contains(&"backend-id-77-not-found".to_string()));
    let v6 = t.frontend(ip("fd00:10:96::a"), 53, Protocol::Udp).unwrap();
    assert_eq!(v6.kind, FrontendKind::ClusterIp);
    assert_eq!(v6.backends.len(), 1);

    let j = lb(Format::CiliumBpfLbList, "cilium-bpf-lb-list.json");
    insta::assert_yaml_snapshot!("cilium_bpf_lb_list_json", j);
    assert_eq!(
        j.frontend(ip("10.96.0.10"), 53, Protocol::Udp)
            .unwrap()
            .backends
            .len(),
        2
    );
}

#[test]
fn cilium_db_frontends_and_lb_maps() {
    let t = lb(Format::CiliumDbFrontends, "cilium-db-frontends.txt");
    insta::assert_yaml_snapshot!("cilium_db_frontends", t);
    let dns = t.frontend(ip("10.96.0.10"), 53, Protocol::Tcp).unwrap();
    assert_eq!(
        dns.service.as_ref().unwrap().to_string(),
        "kube-system/kube-dns:dns-tcp"
    );
    assert_eq!(dns.backends[1].state, BackendState::Terminating);

    let m = lb(Format::CiliumLbMaps, "cilium-lb-maps.txt");
    insta::assert_yaml_snapshot!("cilium_lb_maps", m);
    let fe = m.frontend(ip("10.96.116.33"), 8081, Protocol::Tcp).unwrap();
    assert_eq!(fe.backends.len(), 3);
    assert!(
        m.frontend(ip("0.0.0.0"), 30081, Protocol::Tcp)
            .unwrap()
            .flags
            .contains(&"backend-id-9-not-found".to_string())
    );
}

#[test]
fn cilium_unknown_output_names_the_supported_formats() {
    let err = cilium::parse_any(b"KVStore: Ok\nKubernetes: Ok 1.34\n").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(
        err,
        ParseError::Unsupported {
            family: "cilium",
            ..
        }
    ));
    assert!(
        msg.contains("cilium-dbg service list") && msg.contains("bpf lb list"),
        "{msg}"
    );
    assert!(cilium::parse_any(&data("cilium-lb-maps.txt")).is_ok());
}

#[test]
fn conntrack_entries() {
    let bytes = data("conntrack-L.txt");
    assert_eq!(detect_format(&bytes), Some(Format::Conntrack));
    let t = conntrack::parse_bytes(&bytes).unwrap();
    insta::assert_json_snapshot!("conntrack_entries", t);
    assert_eq!(t.entries.len(), 7);
    let stale = &t.entries[0];
    assert!(stale.unreplied);
    assert_eq!(stale.dnat_target(), Some((ip("10.244.1.6"), Some(53))));
    assert_eq!(t.entries[2].id, Some(3_155_182_208));
    assert_eq!(t.entries[3].orig.icmp_id, Some(41));
    assert_eq!(t.entries[4].mark, Some(0x10));
    assert_eq!(t.entries[6].event.as_deref(), Some("DESTROY"));
    assert_eq!(
        t.skipped.ignored_by_reason.get("conntrack summary line"),
        Some(&1)
    );

    // Streaming with a filter keeps only what the callback keeps.
    let mut dns_to_dead = Vec::new();
    let skipped = conntrack::for_each_entry(&bytes[..], |e| {
        if e.orig.dport == Some(53) && e.reply.src == ip("10.244.1.6") {
            dns_to_dead.push(e);
        }
    })
    .unwrap();
    assert_eq!(dns_to_dead.len(), 2);
    assert_eq!(skipped, t.skipped);
    let err = conntrack::parse_str("total garbage\n").unwrap_err();
    assert!(matches!(
        err,
        ParseError::Unexpected {
            format: Format::Conntrack,
            ..
        }
    ));
}

#[test]
fn detection_tolerates_prompts_and_ci_prefixes() {
    let cases: [(&str, Option<Format>); 8] = [
        (
            "$ sudo iptables-save\n# Generated by iptables-save v1.8.7\n*nat\n",
            Some(Format::Iptables),
        ),
        (
            "user@n:~$ iptables-save | grep KUBE\n-A KUBE-SERVICES -d 10.0.0.1/32 -j KUBE-SVC-X\n",
            Some(Format::Iptables),
        ),
        (
            "Stdout:\n \t ID   Frontend   Service Type   Backend\n",
            Some(Format::CiliumServiceList),
        ),
        (
            "\t 73   10.10.0.72:30396       NodePort       1 => 10.10.1.82:69\n",
            Some(Format::CiliumServiceList),
        ),
        (
            "$ ipvsadm | grep -2 10.1.2.3\nTCP  10.1.2.3:6379 rr\n",
            Some(Format::Ipvsadm),
        ),
        (
            "    [NEW] udp      17 30 src=1.1.1.1 dst=2.2.2.2 sport=1 dport=53 [UNREPLIED] src=2.2.2.2 dst=1.1.1.1 sport=53 dport=1\n",
            Some(Format::Conntrack),
        ),
        (
            "[1454500.910215] nf_conntrack: table full, dropping packet\n",
            None,
        ),
        ("", None),
    ];
    for (input, want) in cases {
        assert_eq!(detect_format(input.as_bytes()), want, "{input:?}");
    }
    for f in Format::all() {
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
    }
    assert!("bogus".parse::<Format>().is_err());
}

#[test]
fn parse_reader_dispatches_every_format() {
    for (format, name) in [
        (
            Format::Iptables,
            "iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt",
        ),
        (Format::NftJson, "nft-j_gen-12svc-40ep_nft-1.0.6.json"),
        (Format::Ipvsadm, "ipvsadm-save-n.txt"),
        (Format::CiliumServiceList, "cilium-service-list_1.19.txt"),
        (Format::CiliumServiceJson, "cilium-service-list.json"),
        (Format::CiliumBpfLbList, "cilium-bpf-lb-list_1.18.txt"),
        (Format::CiliumDbFrontends, "cilium-db-frontends.txt"),
        (Format::CiliumLbMaps, "cilium-lb-maps.txt"),
        (Format::Conntrack, "conntrack-L.txt"),
    ] {
        let bytes = data(name);
        assert_eq!(
            parse_reader(format, &bytes[..]).unwrap(),
            parse(format, &bytes).unwrap(),
            "{name}"
        );
    }
    let _ = text("conntrack-L.txt");
}

#[test]
fn readers_with_tiny_buffers_and_invalid_utf8_agree_with_slices() {
    use std::io::BufReader;
    let mut ipt = data("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt");
    // A line with invalid UTF-8 and a CRLF line in the middle.
    let at = ipt.len() / 2;
    let cut = at + ipt[at..].iter().position(|b| *b == b'\n').unwrap() + 1;
    ipt.splice(
        cut..cut,
        b"-A KUBE-SERVICES \xff\xfe bogus\r\n".iter().copied(),
    );
    for cap in [1, 7, 64, 4096] {
        let r = iptables::parse_reader(BufReader::with_capacity(cap, &ipt[..])).unwrap();
        assert_eq!(r, iptables::parse_bytes(&ipt).unwrap(), "capacity {cap}");
        let ct = data("conntrack-L.txt");
        let r = conntrack::parse_reader(BufReader::with_capacity(cap, &ct[..])).unwrap();
        assert_eq!(r, conntrack::parse_bytes(&ct).unwrap(), "capacity {cap}");
        let iv = data("ipvsadm-Ln_weight0.txt");
        let r = ipvs::parse_reader(BufReader::with_capacity(cap, &iv[..])).unwrap();
        assert_eq!(r, ipvs::parse_bytes(&iv).unwrap(), "capacity {cap}");
    }
    let t = iptables::parse_bytes(&ipt).unwrap();
    assert_eq!(
        t.skipped.ignored_by_reason.get("rule without target"),
        Some(&1),
        "{:?}",
        t.skipped
    );
}

#[cfg(feature = "netlink")]
#[test]
fn conntrack_netlink_dump_decodes_like_the_text_of_the_same_table() {
    use ghostip_datapath::conntrack_netlink::{NetlinkDecoder, decode_dump};
    // Both made by tests/data/capture-conntrack.sh from one kernel conntrack table.
    let bin = data("conntrack-netlink-dump_netns-dnat.bin");
    let text = conntrack::parse_bytes(&data("conntrack-L_netns-dnat_conntrack-1.4.7.txt")).unwrap();
    let decoded = decode_dump(&bin).unwrap();
    assert_eq!(decoded.entries.len(), 4);
    assert_eq!(decoded.skipped.unknown, 0, "{:?}", decoded.skipped);
    let key = |e: &ghostip_datapath::CtEntry| {
        format!(
            "{} {} {:?} {:?} {:?} {:?} {} {} {:?} {:?}",
            e.proto,
            e.proto_num,
            e.state,
            e.orig,
            e.reply,
            e.mark,
            e.unreplied,
            e.assured,
            e.use_count,
            e.zone
        )
    };
    let mut a: Vec<String> = decoded.entries.iter().map(key).collect();
    let mut b: Vec<String> = text.entries.iter().map(key).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    let dns = decoded
        .entries
        .iter()
        .find(|e| e.proto == "udp" && !e.unreplied)
        .unwrap();
    assert_eq!(dns.dnat_target(), Some((ip("10.244.1.5"), Some(5353))));
    assert!(
        decoded
            .entries
            .iter()
            .all(|e| e.id.is_some() && e.timeout.is_some())
    );

    // Any split of the byte stream decodes the same.
    for chunk in [1, 3, 17, 100] {
        let mut d = NetlinkDecoder::new();
        let mut got = Vec::new();
        for piece in bin.chunks(chunk) {
            d.push(piece, |e| got.push(e)).unwrap();
        }
        assert!(d.is_done());
        d.finish().unwrap();
        assert_eq!(got, decoded.entries, "chunk {chunk}");
    }
    // A truncated dump and a broken header are typed errors with a byte offset.
    let err = decode_dump(&bin[..bin.len() - 7]).unwrap_err();
    assert!(
        err.to_string().contains("complete netlink message"),
        "{err}"
    );
    let err = decode_dump(&[3, 0, 0, 0, 0, 0]).unwrap_err();
    assert!(err.to_string().contains("byte 0"), "{err}");
}

#[cfg(feature = "netlink")]
#[test]
fn conntrack_netlink_ignores_other_subsystems_regression_fuzz() {
    // Found by the conntrack_netlink fuzz target: an nftables (NFNL_SUBSYS_NFTABLES) message
    // made netlink-packet-netfilter 0.4's nftables decoder panic. Only conntrack and
    // control messages are decoded now.
    let bytes: &[u8] = b"\xa4\x00\x00\x00\x09\x0a\x65\x00\x02\x80\x05\x00\x01\x00\x01\x02\x80\x05\x00\x04\x0a\x00\x11\x00\
        \x00\x00\x06\x00\x21\x00\xcf\x00\x06\x00\xc0\x00\x03\x00\x00\x35\x00\x00\x34\x00\x02\x80\x01\x80\
        \x08\x00\x01\x00\x0c\x60\x00\x0a\x08\x00\x02\x00\x0a\x60\x02\x80\x05\x00\x01\x00\x00\x00\x00\x00\
        \x00\x02\x68\x00\x11\x00\x00\x00\x06\x00\x21\x00\x02\x80\x14\x00\x01\x80\x80\x08\x00\x01\x02\x80\
        \x05\x00\x04\x0a\x1c\x00\x02\x80\x00\x01\x00\x11\x00\x00\x00\x06\x00\x21\x00\xcf\x06\x00\xc0\x00\
        \x03\x00\x01\x00\x02\x80\x05\x00\x04\x0a\x00\x02\x80\x2c\x05\x00\x01\x00\x11\x00\x00\x00\x06\x00\
        \x21\x00\x02\x80\x14\x00\x01\x80\x80\x08\x00\x01\x02\x80\x05\x00\x04\x0a\x00\x00\x02\x80\x05\x00\
        \x01\x00\x01\x80\x08\x00\x01\x00\x0a\x60\x00\x0a\x08\x00\x00\x01\x80\x14\x00\x01\x80\x08\x00\x01\
        \x00\x0a\x60\x00\x0a\x08\x00";
    let t = ghostip_datapath::conntrack_netlink::decode_dump(bytes);
    // The nftables message (164 bytes) is skipped, not decoded; what follows it is not a
    // whole message, which is named with its offset.
    let err = t.unwrap_err().to_string();
    assert!(
        err.contains("a complete netlink message") && err.contains("164"),
        "{err}"
    );
}

#[cfg(feature = "netlink")]
#[test]
fn conntrack_netlink_padding_split_across_reads() {
    use ghostip_datapath::conntrack_netlink::{NetlinkDecoder, decode_dump};
    // An 18-byte message of another netfilter subsystem (type 0x0a00), 2 bytes of padding,
    // then NLMSG_DONE. Found by the fuzzer: splitting right after the 18 bytes used to
    // read the padding as the next header.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&18u32.to_ne_bytes());
    bytes.extend_from_slice(&0x0a00u16.to_ne_bytes());
    bytes.extend_from_slice(&[0; 10]);
    bytes.extend_from_slice(&[2, 0, 0, 0]); // 2 body bytes (18 in all), 2 of padding
    bytes.extend_from_slice(&20u32.to_ne_bytes());
    bytes.extend_from_slice(&3u16.to_ne_bytes());
    bytes.extend_from_slice(&[0; 14]);
    let whole = decode_dump(&bytes).unwrap();
    for split in 1..bytes.len() {
        let mut d = NetlinkDecoder::new();
        d.push(&bytes[..split], |_| {}).unwrap();
        d.push(&bytes[split..], |_| {}).unwrap();
        assert!(d.is_done(), "split {split}");
        assert_eq!(d.finish().unwrap(), whole.skipped, "split {split}");
    }
}

/// `input` with a line of `len` bytes (`prefix`, then `x`s) inserted after its line `after`,
/// as a stream that never holds the long line: its head, the line, its tail.
fn with_long_line<'a>(
    input: &[u8],
    after: usize,
    prefix: &'a [u8],
    len: usize,
) -> (usize, impl std::io::Read + 'a) {
    use std::io::{Cursor, Read as _};
    let cut = input
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(after - 1)
        .map_or(input.len(), |(i, _)| i + 1);
    let (head, tail) = input.split_at(cut);
    let long = prefix
        .chain(std::io::repeat(b'x').take((len - prefix.len()) as u64))
        .chain(&b"\n"[..]);
    (
        after + 1,
        Cursor::new(head.to_vec())
            .chain(long)
            .chain(Cursor::new(tail.to_vec())),
    )
}

/// A line over `MAX_LINE` bytes, read through the streaming reader (which never holds it)
/// and from memory, is skipped and counted as unknown with its line number, whatever the
/// format; the lines around it are read as without it.
#[test]
fn an_overlong_line_is_skipped_and_counted_with_its_line_number() {
    use ghostip_datapath::{Location, MAX_LINE, OVERLONG_LINE};
    use std::io::{BufReader, Read};
    let cases: [(Format, &str, &[u8]); 5] = [
        (
            Format::Iptables,
            "iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt",
            b"-A KUBE-SERVICES -d 10.96.0.9/32 -j KUBE-SVC-",
        ),
        (
            Format::Ipvsadm,
            "ipvsadm-Ln_weight0.txt",
            b"TCP  10.96.0.9:80 rr ",
        ),
        (
            Format::Conntrack,
            "conntrack-L.txt",
            b"udp      17 29 src=10.244.2.15 dst=10.96.0.10 ",
        ),
        (
            Format::CiliumServiceList,
            "cilium-service-list_1.19.txt",
            b"9    10.96.0.9:80/TCP   ClusterIP ",
        ),
        (
            Format::CiliumBpfLbList,
            "cilium-bpf-lb-list_1.18.txt",
            b"10.96.0.9:80/TCP (0)   ",
        ),
    ];
    for (format, name, prefix) in cases {
        let input = data(name);
        let plain = parse(format, &input).unwrap();
        for len in [MAX_LINE + 1, 3 * MAX_LINE + 17] {
            let (no, mut stream) = with_long_line(&input, 3, prefix, len);
            let mut whole = Vec::new();
            stream.read_to_end(&mut whole).unwrap();
            let (_, stream) = with_long_line(&input, 3, prefix, len);
            for got in [
                parse_reader(format, BufReader::with_capacity(64 * 1024, stream)).unwrap(),
                parse(format, &whole).unwrap(),
            ] {
                let (skipped, want_skipped, got_rows, want_rows) = match (&got, &plain) {
                    (Parsed::Lb(g), Parsed::Lb(w)) => (
                        &g.skipped,
                        &w.skipped,
                        format!("{:?}", g.frontends),
                        format!("{:?}", w.frontends),
                    ),
                    (Parsed::Conntrack(g), Parsed::Conntrack(w)) => (
                        &g.skipped,
                        &w.skipped,
                        format!("{:?}", g.entries),
                        format!("{:?}", w.entries),
                    ),
                    _ => panic!("{format}: table kinds differ"),
                };
                assert_eq!(got_rows, want_rows, "{format}, {len} bytes");
                assert_eq!(
                    skipped.unknown,
                    want_skipped.unknown + 1,
                    "{format}: {skipped:?}"
                );
                assert_eq!(
                    skipped.unknown_by_reason.get(OVERLONG_LINE),
                    Some(&1),
                    "{format}"
                );
                let sample = skipped
                    .samples
                    .iter()
                    .find(|s| s.reason == OVERLONG_LINE)
                    .unwrap();
                assert_eq!(sample.location, Location::Line(no), "{format}");
                assert!(
                    sample
                        .excerpt
                        .starts_with(std::str::from_utf8(prefix).unwrap().trim()),
                    "{format}: {}",
                    sample.excerpt
                );
            }
        }
        // A line of exactly `MAX_LINE` bytes is still read (as whatever it is).
        let (_, stream) = with_long_line(&input, 3, prefix, MAX_LINE);
        let got = parse_reader(format, BufReader::with_capacity(4096, stream)).unwrap();
        let skipped = match &got {
            Parsed::Lb(t) => &t.skipped,
            Parsed::Conntrack(t) => &t.skipped,
        };
        assert_eq!(
            skipped.unknown_by_reason.get(OVERLONG_LINE),
            None,
            "{format}"
        );
    }
    // Input of nothing but an overlong line is not the format: an error naming line 1.
    let (_, stream) = with_long_line(b"", 1, b"-A KUBE-SERVICES ", 2 * MAX_LINE);
    let err = iptables::parse_reader(BufReader::new(stream))
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 1"), "{err}");
}

/// The conntrack-tools summary goes to stderr: in a capture of both streams it lands
/// wherever stdout's buffer was cut, glued to the end of an entry or inside one (whose rest
/// then starts the next line). The entry is kept whole either way.
#[test]
fn conntrack_entries_with_the_summary_glued_on_are_kept() {
    let summary = "conntrack v1.4.6 (conntrack-tools): 3 flow entries have been shown.";
    let a = "udp      17 29 src=10.244.2.15 dst=10.96.0.10 sport=41000 dport=53 [UNREPLIED] src=10.244.1.6 dst=10.244.2.15 sport=53 dport=41000 mark=0 use=1";
    let b = "tcp      6 86399 ESTABLISHED src=10.244.2.15 dst=10.96.33.4 sport=52110 dport=8080 src=10.244.3.71 dst=10.244.2.15 sport=8080 dport=52110 [ASSURED] mark=0 use=1";
    let c = "udp      17 118 src=10.244.2.15 dst=10.96.0.10 sport=41012 dport=53 src=10.244.1.69 dst=10.244.2.15 sport=53 dport=41012 [ASSURED] mark=0 zone=1 use=1";
    let plain = conntrack::parse_str(&format!("{a}\n{b}\n{c}\n{summary}\n")).unwrap();
    assert_eq!(plain.entries.len(), 3);
    let cut = b.find("dst=10.244.2.15").unwrap() + "dst=10.2".len();
    for dump in [
        // Glued to the end of the last entry; stdout's newline follows the summary's.
        format!("{a}\n{b}\n{c}{summary}\n\n"),
        format!("{a}\n{b}\n{c}{summary}\n"),
        // Inside an entry: its rest starts the next line.
        format!("{a}\n{}{summary}\n{}\n{c}\n", &b[..cut], &b[cut..]),
        // Between two tokens.
        format!(
            "{a}\n{}{summary}\n{}\n{c}\n",
            &b[..b.find(" src=10.244.3.71").unwrap() + 1],
            &b[b.find("src=10.244.3.71").unwrap()..]
        ),
        // Interrupted with ^C.
        format!("{a}\n{b}\n{c}\n^C{summary}\n"),
    ] {
        let t = conntrack::parse_str(&dump).unwrap();
        assert_eq!(t.entries, plain.entries, "{dump}");
        assert_eq!(t.skipped.unknown, 0, "{dump}: {:?}", t.skipped);
        assert_eq!(
            t.skipped.ignored_by_reason.get("conntrack summary line"),
            Some(&1)
        );
        let streamed =
            conntrack::parse_reader(std::io::BufReader::with_capacity(7, dump.as_bytes())).unwrap();
        assert_eq!(streamed, t);
    }
}

/// A line cut short inside its reply tuple (a truncated capture) still names the backend a
/// ClusterIP flow was DNATed to: the entry is kept with the reply's source as its DNAT
/// target (the cut token dropped), flagged and counted.
#[test]
fn a_conntrack_entry_cut_in_its_reply_tuple_keeps_its_dnat_target() {
    let full = "tcp      6 86399 ESTABLISHED src=10.244.2.15 dst=10.96.33.4 sport=52110 dport=8080 src=10.244.3.71 dst=10.244.2.15 sport=8080 dport=52110 [ASSURED] mark=0 use=1";
    for (cut_after, port) in [
        ("src=10.244.3.71 dst=10.244.2.", None),
        ("src=10.244.3.71 dst=10.244.2.15", None),
        ("src=10.244.3.71 dst=10.244.2.15 sport=80", None),
        (
            "src=10.244.3.71 dst=10.244.2.15 sport=8080 dport",
            Some(8080),
        ),
    ] {
        let line = &full[..full.find(cut_after).unwrap() + cut_after.len()];
        let t = conntrack::parse_str(&format!("{line}\n")).unwrap();
        assert_eq!(t.entries.len(), 1, "{line}: {:?}", t.skipped);
        let e = &t.entries[0];
        assert_eq!(e.orig.dst, ip("10.96.33.4"));
        assert_eq!(e.dnat_target(), Some((ip("10.244.3.71"), port)), "{line}");
        assert!(e.flags.contains(&"reply-cut-short".to_string()), "{line}");
        assert_eq!(t.skipped.unknown, 1, "{line}");
    }
    // Cut inside the reply's source itself: nothing of the reply is sure.
    let line = &full[..full.find("src=10.244.3.71").unwrap() + "src=10.244.3.7".len()];
    let t = conntrack::parse_str(&format!("{line}\n")).unwrap();
    assert!(t.entries.is_empty(), "{:?}", t.entries);
    // A whole entry is never flagged, nor one that ends with a whole reply tuple (as
    // `conntrack -E` events do).
    let events = &full[..full.find(" [ASSURED]").unwrap()];
    for line in [full, events] {
        let t = conntrack::parse_str(line).unwrap();
        assert!(t.entries[0].flags.is_empty());
        assert_eq!(t.skipped.unknown, 0);
        assert_eq!(
            t.entries[0].dnat_target(),
            Some((ip("10.244.3.71"), Some(8080)))
        );
    }
}

/// `conntrack -L -p udp` (no TCP line), `-E -p udp` events and `/proc/net/nf_conntrack` UDP
/// lines are detected as conntrack, with a prompt or the summary first.
#[test]
fn udp_only_conntrack_output_is_detected() {
    let udp = "udp      17 29 src=10.244.1.10 dst=10.96.0.10 sport=39670 dport=53 src=10.244.3.53 dst=10.244.1.10 sport=53 dport=39670 mark=0 use=1\n";
    for dump in [
        udp.to_string(),
        format!("# conntrack -L -p udp\n{udp}"),
        format!("conntrack v1.4.6 (conntrack-tools): 1 flow entries have been shown.\n{udp}"),
        format!("    [NEW] {}", udp.replace(" mark=0 use=1", "")),
        format!("ipv4     2 {udp}"),
        "[DESTROY] udp      17 src=10.244.2.15 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.6 dst=10.244.2.15 sport=53 dport=40000\n".to_string(),
    ] {
        assert_eq!(detect_format(dump.as_bytes()), Some(Format::Conntrack), "{dump}");
    }
}

/// `text` with every whole occurrence of the address `from` (not part of a longer number)
/// replaced by `to`.
fn replace_addr(text: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let before = out.chars().last().or_else(|| rest[..i].chars().last());
        let before = rest[..i].chars().last().or(before);
        let after = rest[i + from.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit() || c == '.');
        out.push_str(&rest[..i]);
        out.push_str(if part(before) || part(after) {
            from
        } else {
            to
        });
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

/// Two runs of `conntrack -L` back to back, the second after a flow's backend moved: a flow
/// listed again starts the second snapshot, which is the table read; event lines, which
/// repeat a flow as it changes, never start one.
#[test]
fn two_conntrack_dumps_back_to_back_read_the_last() {
    use ghostip_datapath::{EarlierSnapshots, Location};
    let first = text("conntrack-L.txt");
    let second = replace_addr(&first, "10.244.3.71", "192.0.2.99");
    assert_ne!(first, second);
    let both = format!("{first}$ # the same command again\n{second}");
    let want = conntrack::parse_str(&second).unwrap();
    for got in [
        conntrack::parse_str(&both).unwrap(),
        conntrack::parse_reader(std::io::BufReader::with_capacity(64, both.as_bytes())).unwrap(),
    ] {
        assert_eq!(
            got.skipped.earlier_snapshots,
            Some(EarlierSnapshots {
                count: 1,
                last_from: Location::Line(first.lines().count() + 2),
            })
        );
        assert_eq!(got.entries, want.entries);
        assert!(
            got.entries.iter().all(
                |e| e.dnat_target().map(|(ip, _)| ip.to_string()) != Some("10.244.3.71".into())
            )
        );
    }
    // One run: no snapshot before it.
    assert_eq!(
        conntrack::parse_str(&first)
            .unwrap()
            .skipped
            .earlier_snapshots,
        None
    );
    // Events repeat a flow as it changes: one stream, not two snapshots.
    let ev = "[NEW] udp      17 30 src=10.0.0.1 dst=10.96.0.10 sport=4000 dport=53 [UNREPLIED] src=10.244.1.6 dst=10.0.0.1 sport=53 dport=4000\n\
              [UPDATE] udp      17 30 src=10.0.0.1 dst=10.96.0.10 sport=4000 dport=53 src=10.244.1.6 dst=10.0.0.1 sport=53 dport=4000\n\
              [DESTROY] udp      17 src=10.0.0.1 dst=10.96.0.10 sport=4000 dport=53 src=10.244.1.6 dst=10.0.0.1 sport=53 dport=4000\n";
    let t = conntrack::parse_str(ev).unwrap();
    assert_eq!((t.entries.len(), t.skipped.earlier_snapshots), (3, None));
    // The same tuple in two zones is two flows.
    let zones = "udp      17 29 src=10.0.0.1 dst=10.96.0.10 sport=1 dport=53 src=10.244.1.6 dst=10.0.0.1 sport=53 dport=1 zone=1\n\
                 udp      17 29 src=10.0.0.1 dst=10.96.0.10 sport=1 dport=53 src=10.244.1.6 dst=10.0.0.1 sport=53 dport=1 zone=2\n";
    let t = conntrack::parse_str(zones).unwrap();
    assert_eq!((t.entries.len(), t.skipped.earlier_snapshots), (2, None));
}

/// A terminal transcript of two runs of a dump command, the second after a backend moved:
/// the second run's table is read, not a merge of both, and the skip counts say how many
/// snapshots came before and where the one read starts (its repeated header).
#[test]
fn several_snapshots_in_one_dump_are_detected_and_the_last_is_read() {
    use ghostip_datapath::{EarlierSnapshots, Location};
    let cases: [(Format, &str, ghostip_datapath::LineTest); 8] = [
        (
            Format::Iptables,
            "iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt",
            |l| l.starts_with('*'),
        ),
        (Format::Ipvsadm, "ipvsadm-Ln_weight0.txt", |l| {
            l.starts_with("IP Virtual Server")
        }),
        // No header: the first virtual server declared again (`-A -t VIP:PORT`).
        (Format::Ipvsadm, "ipvsadm-save-n.txt", |l| {
            l.starts_with("-A")
        }),
        // No header: the first backend ID listed again.
        (Format::CiliumLbMaps, "cilium-lb-maps.txt", |l| {
            l.starts_with("BE:")
        }),
        (
            Format::CiliumServiceList,
            "cilium-service-list_1.19.txt",
            |l| l.starts_with("Frontend"),
        ),
        (
            Format::CiliumBpfLbList,
            "cilium-bpf-lb-list_1.18.txt",
            |l| l.starts_with("SERVICE ADDRESS"),
        ),
        (Format::CiliumDbFrontends, "cilium-db-frontends.txt", |l| {
            l.starts_with("Address")
        }),
        (
            Format::NftJson,
            "nft-j_gen-12svc-40ep_nft-1.0.6.json",
            |_| false,
        ),
    ];
    let table = |format: Format, input: &[u8]| match parse(format, input).unwrap() {
        Parsed::Lb(t) => t,
        Parsed::Conntrack(_) => panic!("{format}"),
    };
    for (format, name, header) in cases {
        let first = text(name);
        let moved = table(format, first.as_bytes())
            .frontends
            .iter()
            .find_map(|f| f.backends.first())
            .unwrap()
            .ip
            .to_string();
        let second = replace_addr(&first, &moved, "192.0.2.99");
        assert_ne!(first, second, "{name}");
        // JSON documents follow each other without a prompt between them.
        let prompt = if format == Format::NftJson {
            ""
        } else {
            "$ # the same command again\n"
        };
        let both = format!(
            "{first}{}{prompt}{second}",
            if first.ends_with('\n') { "" } else { "\n" }
        );
        let want = table(format, second.as_bytes());
        let last_from = if format == Format::NftJson {
            let v: serde_json::Value = serde_json::from_str(&first).unwrap();
            let n = v["nftables"].as_array().unwrap().len();
            let t = v["nftables"]
                .as_array()
                .unwrap()
                .iter()
                .position(|o| o.get("table").is_some())
                .unwrap();
            Location::JsonPath(format!("nftables[{}]", n + t))
        } else {
            Location::Line(first.lines().count() + 2 + first.lines().position(header).unwrap())
        };
        for got in [
            table(format, both.as_bytes()),
            match parse_reader(
                format,
                std::io::BufReader::with_capacity(100, both.as_bytes()),
            )
            .unwrap()
            {
                Parsed::Lb(t) => t,
                Parsed::Conntrack(_) => panic!(),
            },
        ] {
            let mut got = got;
            assert_eq!(
                got.skipped.earlier_snapshots.take(),
                Some(EarlierSnapshots {
                    count: 1,
                    last_from: last_from.clone()
                }),
                "{name}"
            );
            // The same table; the samples' line numbers are the transcript's.
            let samples = |t: &LbTable| -> Vec<(String, String)> {
                t.skipped
                    .samples
                    .iter()
                    .map(|s| (s.reason.clone(), s.excerpt.clone()))
                    .collect()
            };
            assert_eq!(samples(&got), samples(&want), "{name}");
            got.skipped.samples = want.skipped.samples.clone();
            assert_eq!(got, want, "{name}");
            assert!(
                got.frontends
                    .iter()
                    .flat_map(|f| &f.backends)
                    .all(|b| b.ip.to_string() != moved)
            );
        }
    }
    // Three runs: two earlier ones.
    let one = text("ipvsadm-Ln_weight0.txt");
    let t = ipvs::parse_str(&format!("{one}{one}{one}")).unwrap();
    assert_eq!(t.skipped.earlier_snapshots.map(|e| e.count), Some(2));
    let one = text("ipvsadm-save-n.txt");
    let t = ipvs::parse_str(&format!("{one}{one}{one}")).unwrap();
    assert_eq!(t.skipped.earlier_snapshots.map(|e| e.count), Some(2));
    // A Cilium maps dump that lists a service slot again (its backends in another dump).
    let slots = "SVC: ID=1 ADDR=10.96.0.1:443/TCP SLOT=0 FLAGS=ClusterIP\n\
                 SVC: ID=1 ADDR=10.96.0.1:443/TCP SLOT=1 BEID=1\n";
    let t = cilium::parse_lb_maps(&format!("{slots}{slots}")).unwrap();
    assert_eq!(
        t.skipped.earlier_snapshots,
        Some(EarlierSnapshots {
            count: 1,
            last_from: Location::Line(3)
        })
    );
    // The ip and ip6 tables of one ruleset, or iptables-save's filter and nat tables, are
    // one snapshot.
    let t =
        iptables::parse_str(&text("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt")).unwrap();
    assert_eq!(t.skipped.earlier_snapshots, None);
}
