//! Property tests: render a cluster with the generator (iptables-save text, nft JSON),
//! parse it back, and get exactly the table the cluster implies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::{Ipv4Addr, SocketAddrV4};

use ghostip_datapath::{Format, Protocol, ServiceRef, iptables, nft};
use ghostip_testkit::dumps::{GenModel, GenService, GenSpec};
use proptest::prelude::*;

fn service_strategy(i: usize) -> impl Strategy<Value = GenService> {
    (
        prop::sample::select(vec![Protocol::Tcp, Protocol::Udp, Protocol::Sctp]),
        1u16..,
        prop::collection::vec((any::<u32>(), 1u16..), 0..6),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec!["", "http", "dns-tcp", "p80"]),
    )
        .prop_map(
            move |(protocol, port, eps, nodeport, ext, affinity, local, pname)| {
                let n = i as u32;
                let endpoints: Vec<SocketAddrV4> = eps
                    .into_iter()
                    .map(|(ip, p)| SocketAddrV4::new(Ipv4Addr::from(ip), p))
                    .collect();
                let has_eps = !endpoints.is_empty();
                GenService {
                    service: ServiceRef::new(format!("ns{}", i % 3), format!("svc-{i}"), pname),
                    protocol,
                    cluster_ip: Ipv4Addr::from(0x0a60_0000 + n),
                    port,
                    node_port: nodeport.then_some(30000 + i as u16),
                    external_ips: if ext {
                        vec![Ipv4Addr::from(0xc612_0000 + n)]
                    } else {
                        vec![]
                    },
                    lb_ips: if ext && affinity {
                        vec![Ipv4Addr::from(0xcb00_0000 + n)]
                    } else {
                        vec![]
                    },
                    local: local && has_eps && (nodeport || ext),
                    affinity,
                    endpoints,
                }
            },
        )
}

fn model_strategy() -> impl Strategy<Value = GenModel> {
    (0usize..8, any::<bool>(), any::<bool>()).prop_flat_map(|(n, inline, comments)| {
        let services: Vec<_> = (0..n).map(service_strategy).collect();
        services.prop_map(move |services| GenModel {
            services,
            nft_inline_dnat: inline,
            endpoint_comments: comments,
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn iptables_save_round_trip(model in model_strategy()) {
        let dump = model.iptables_save();
        let t = iptables::parse_str(&dump).unwrap();
        prop_assert_eq!(&t.frontends, &model.expected(Format::Iptables).frontends, "dump:\n{}", dump);
        prop_assert_eq!(t.skipped.unknown, 0);
        // Streaming gives the same table.
        prop_assert_eq!(iptables::parse_reader(dump.as_bytes()).unwrap(), t);
    }

    #[test]
    fn nft_json_round_trip(model in model_strategy()) {
        let dump = model.nft_json();
        let t = nft::parse_str(&dump).unwrap();
        prop_assert_eq!(&t.frontends, &model.expected(Format::NftJson).frontends, "dump:\n{}", dump);
        prop_assert_eq!(t.skipped.unknown, 0);
        prop_assert_eq!(nft::parse_reader(dump.as_bytes()).unwrap(), t);
    }

    #[test]
    fn generated_specs_round_trip(services in 0usize..40, endpoints in 0usize..200, empty in 0usize..5, inline in any::<bool>()) {
        let mut spec = GenSpec::new(services, endpoints);
        spec.empty_every = empty;
        spec.nft_inline_dnat = inline;
        let model = GenModel::generate(&spec);
        let t = iptables::parse_str(&model.iptables_save()).unwrap();
        prop_assert_eq!(t.frontends, model.expected(Format::Iptables).frontends);
        let t = nft::parse_str(&model.nft_json()).unwrap();
        prop_assert_eq!(t.frontends, model.expected(Format::NftJson).frontends);
    }
}

#[test]
fn large_generated_dump_round_trips() {
    let model = GenModel::generate(&GenSpec::new(500, 7_500));
    let dump = model.iptables_save();
    let t = iptables::parse_reader(dump.as_bytes()).unwrap();
    let expected = model.expected(Format::Iptables);
    assert_eq!(t.frontends, expected.frontends);
    assert_eq!(t.backend_count(), expected.backend_count());
    let t = nft::parse_reader(model.nft_json().as_bytes()).unwrap();
    assert_eq!(t.frontends, model.expected(Format::NftJson).frontends);
}
