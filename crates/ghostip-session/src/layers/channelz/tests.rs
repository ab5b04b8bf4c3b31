//! The channelz model in a session, with exact times: truth events in, reads of a client's
//! channelz in, engine events, stale subchannels and the drain part's views out.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ghostip_core::engine::{Discrepancy, EngineEvent, Tracking, Verdict};
use ghostip_core::truth::{EndpointPort, EndpointRecord, SliceRecord};
use ghostip_core::{PodRef, Protocol, ServiceKey, Target, Time};

use super::drain::{ClientReport, ClientsLetGo, holders};
use super::*;
use crate::drain::{LayerView, LetGo};
use crate::session::{Actions, Session, SessionConfig};
use crate::sync::SyncState;
use crate::truth_event::{Received, ResourceKind, TruthEvent, TruthKey, TruthObject};

const LAG: Duration = Duration::from_secs(35);
const TARGET: &str = "dns:///web.demo.svc.cluster.local:50051";

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn client() -> ClientPod {
    ClientPod {
        namespace: "demo".into(),
        name: "client-0".into(),
    }
}

/// `demo/web`'s one slice: `(ip, pod)` endpoints, ready, on 50051.
fn web_slice(endpoints: &[(&str, &str)]) -> TruthEvent {
    TruthEvent::Apply(TruthObject::Slice(SliceRecord {
        namespace: "demo".into(),
        name: "web-abc".into(),
        service: "web".into(),
        address_type: ghostip_core::truth::AddressType::IPv4,
        endpoints: endpoints
            .iter()
            .map(|(ip, pod)| EndpointRecord {
                ip: ip.parse().unwrap(),
                ready: true,
                serving: true,
                terminating: false,
                pod: Some(PodRef {
                    namespace: "demo".into(),
                    name: (*pod).into(),
                    uid: String::new(),
                }),
                node: Some("node-1".into()),
                hostname: None,
            })
            .collect(),
        ports: vec![EndpointPort {
            name: Some("grpc".into()),
            port: 50051,
            protocol: Protocol::Tcp,
        }],
        trigger_time: None,
    }))
}

fn feed(s: &mut Session, event: TruthEvent, at: Time) -> Actions {
    s.on_truth(&Received { at, event })
}

/// A synced session with the channelz model: headless `demo/web` on 10.244.1.7 (web-a)
/// and 10.244.2.8 (web-b).
fn session() -> Session {
    let kinds = [ResourceKind::EndpointSlices, ResourceKind::Services];
    let mut s = Session::new(SessionConfig::default(), SyncState::new(t(0), kinds));
    s.register(ChannelzModel::new(LAG));
    feed(&mut s, TruthEvent::Init(ResourceKind::Services), t(0));
    let svc = ghostip_testkit::records::headless_service(ServiceKey::new("demo", "web"));
    feed(
        &mut s,
        TruthEvent::InitApply(TruthObject::Service(svc)),
        t(0),
    );
    feed(&mut s, TruthEvent::InitDone(ResourceKind::Services), t(0));
    feed(&mut s, TruthEvent::Init(ResourceKind::EndpointSlices), t(0));
    let TruthEvent::Apply(o) = web_slice(&[("10.244.1.7", "web-a"), ("10.244.2.8", "web-b")])
    else {
        unreachable!()
    };
    feed(&mut s, TruthEvent::InitApply(o), t(0));
    feed(
        &mut s,
        TruthEvent::InitDone(ResourceKind::EndpointSlices),
        t(0),
    );
    assert!(s.synced());
    s
}

fn channel(target: &str, subs: &[(&str, ConnState)]) -> ChannelRead {
    ChannelRead {
        target: target.into(),
        subchannels: subs
            .iter()
            .map(|(a, state)| SubchannelRead {
                address: Some(addr(a)),
                state: *state,
            })
            .collect(),
    }
}

fn read_of(channels: Vec<ChannelRead>) -> ClientRead {
    ClientRead {
        channels,
        truncated: false,
    }
}

fn read(s: &mut Session, r: &ClientRead, at: Time) -> (ReadOutcome, Actions) {
    s.with_layer_cx::<ChannelzModel, _>(|m, cx| m.on_read(cx, &client(), r, at))
        .unwrap()
}

fn tracking(events: &[EngineEvent], f: fn(&EngineEvent) -> bool) -> Vec<&Tracking> {
    events
        .iter()
        .filter(|e| f(e))
        .map(|e| match e {
            EngineEvent::Opened(t)
            | EngineEvent::Converging(t)
            | EngineEvent::Reappeared(t)
            | EngineEvent::OverExpectedLag(t)
            | EngineEvent::Stuck(t)
            | EngineEvent::Closed(t) => t,
        })
        .collect()
}

use ConnState::{Idle, Ready, Shutdown, TransientFailure};

/// The rollout case: web-a leaves the Service at 10 s; the client's round_robin keeps its
/// subchannel (TRANSIENT_FAILURE once the server stopped) until the client re-resolves at
/// 52 s. The window runs from the departure (10 s) to the first read without it (52 s),
/// over the 35 s expected lag; the stale subchannel names the client, the channel, its state
/// and the pod that owned the address.
#[test]
fn a_subchannel_kept_after_its_pod_left_is_stale_until_the_client_re_resolves() {
    let mut s = session();
    let both = read_of(vec![channel(
        TARGET,
        &[("10.244.1.7:50051", Ready), ("10.244.2.8:50051", Ready)],
    )]);
    let (out, actions) = read(&mut s, &both, t(1));
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    assert_eq!(
        (out.channels, out.judged, out.subchannels, out.stale),
        (1, 1, 2, 0)
    );
    assert!(
        out.recorded.is_empty(),
        "nothing to record while all is well"
    );

    // web-a leaves at 10 s, web-c joins.
    let actions = feed(
        &mut s,
        web_slice(&[("10.244.2.8", "web-b"), ("10.244.3.9", "web-c")]),
        t(10),
    );
    let opened = tracking(&actions.events, |e| matches!(e, EngineEvent::Opened(_)));
    assert_eq!(opened.len(), 1, "{:?}", actions.events);
    assert_eq!(
        opened[0].target,
        Target::socket("10.244.1.7".parse().unwrap(), 50051)
    );
    assert_eq!(opened[0].kind, Discrepancy::Stale);
    assert_eq!(opened[0].expected_lag, LAG);

    // 12 s: the client still holds web-a, failing.
    let held = read_of(vec![channel(
        TARGET,
        &[
            ("10.244.1.7:50051", TransientFailure),
            ("10.244.2.8:50051", Ready),
        ],
    )]);
    let (out, _) = read(&mut s, &held, t(12));
    assert_eq!(out.stale, 1);
    assert_eq!(
        out.recorded.len(),
        1,
        "an open tracking's observations are recorded"
    );
    let stale: Vec<StaleSubchannel> = s
        .layer::<ChannelzModel>()
        .unwrap()
        .stale()
        .cloned()
        .collect();
    assert_eq!(
        stale,
        vec![StaleSubchannel {
            client: "demo/client-0".into(),
            channel: TARGET.into(),
            service: "demo/web".into(),
            address: addr("10.244.1.7:50051"),
            state: TransientFailure,
            former_owner: Some("demo/web-a".into()),
            first_seen: t(12),
            last_seen: t(12),
        }]
    );
    // 47 s: still held, past the expected lag and its 1 s tolerance.
    let (_, actions) = read(&mut s, &held, t(47));
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    let events = s.tick(t(47));
    assert_eq!(
        tracking(&events, |e| matches!(e, EngineEvent::OverExpectedLag(_))).len(),
        1,
        "{events:?}"
    );
    assert_eq!(
        s.layer::<ChannelzModel>()
            .unwrap()
            .stale()
            .next()
            .unwrap()
            .first_seen,
        t(12)
    );
    assert!(s.layer::<ChannelzModel>().unwrap().unconverged(s.engine()));

    // 52 s: re-resolved: web-b and web-c.
    let after = read_of(vec![channel(
        TARGET,
        &[("10.244.2.8:50051", Ready), ("10.244.3.9:50051", Idle)],
    )]);
    let (out, actions) = read(&mut s, &after, t(52));
    assert_eq!(out.stale, 0);
    let converging = tracking(&actions.events, |e| matches!(e, EngineEvent::Converging(_)));
    assert_eq!(converging.len(), 1, "{:?}", actions.events);
    assert_eq!(converging[0].converged_by, Some(t(52)));
    assert!(s.layer::<ChannelzModel>().unwrap().stale().next().is_none());
    let events = s.tick(t(56));
    let closed = tracking(&events, |e| matches!(e, EngineEvent::Closed(_)));
    assert_eq!(closed.len(), 1, "{events:?}");
    assert_eq!(closed[0].verdict, Verdict::OverExpectedLag);
    assert_eq!(closed[0].window_lower(), Some(Duration::from_secs(37)));
    assert_eq!(closed[0].window_upper(), Some(Duration::from_secs(42)));
}

/// A SHUTDOWN subchannel is one the balancer already dropped: it holds nothing. A client
/// that re-resolved within the expected lag gives a window within it.
#[test]
fn a_shutdown_subchannel_holds_nothing_and_a_quick_client_is_within_its_lag() {
    let mut s = session();
    let _ = read(
        &mut s,
        &read_of(vec![channel(TARGET, &[("10.244.1.7:50051", Ready)])]),
        t(1),
    );
    feed(&mut s, web_slice(&[("10.244.2.8", "web-b")]), t(10));
    let (out, actions) = read(
        &mut s,
        &read_of(vec![channel(
            TARGET,
            &[("10.244.1.7:50051", Shutdown), ("10.244.2.8:50051", Ready)],
        )]),
        t(13),
    );
    assert_eq!(out.stale, 0);
    let converging = tracking(&actions.events, |e| matches!(e, EngineEvent::Converging(_)));
    assert_eq!(converging.len(), 1, "{:?}", actions.events);
    let events = s.tick(t(17));
    let closed = tracking(&events, |e| matches!(e, EngineEvent::Closed(_)));
    assert_eq!(closed.len(), 1, "{events:?}");
    assert_eq!(closed[0].verdict, Verdict::WithinExpectedLag);
}

/// Channels whose target names no Service the truth knows are read but not judged, and
/// make no path; a channel the client closed converges its stale subchannels.
#[test]
fn unknown_targets_are_not_judged_and_a_closed_channel_holds_nothing() {
    let mut s = session();
    let r = read_of(vec![
        channel("passthrough:///10.0.0.1:443", &[("10.0.0.1:443", Ready)]),
        channel("dns:///other.demo:50051", &[("10.9.9.9:50051", Ready)]),
        channel(TARGET, &[("10.244.1.7:50051", Ready)]),
    ]);
    let (out, _) = read(&mut s, &r, t(1));
    assert_eq!((out.channels, out.judged), (3, 1));
    assert_eq!(s.engine().paths().count(), 1, "one path: the web channel");
    feed(&mut s, web_slice(&[("10.244.2.8", "web-b")]), t(10));
    let (out, _) = read(&mut s, &r, t(12));
    assert_eq!(out.stale, 1);
    // A truncated read without the channel says nothing of it.
    let (_, actions) = read(
        &mut s,
        &ClientRead {
            channels: Vec::new(),
            truncated: true,
        },
        t(14),
    );
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    // A complete one without it: closed, converged.
    let (_, actions) = read(&mut s, &read_of(Vec::new()), t(16));
    let converging = tracking(&actions.events, |e| matches!(e, EngineEvent::Converging(_)));
    assert_eq!(converging.len(), 1, "{:?}", actions.events);
    assert_eq!(converging[0].converged_by, Some(t(16)));
}

/// A deleted client pod's paths go (their trackings close unjudged).
#[test]
fn a_deleted_client_pod_drops_its_paths() {
    let mut s = session();
    let _ = read(
        &mut s,
        &read_of(vec![channel(TARGET, &[("10.244.1.7:50051", Ready)])]),
        t(1),
    );
    assert_eq!(s.layer::<ChannelzModel>().unwrap().clients().count(), 1);
    let pod = PodRef {
        namespace: "demo".into(),
        name: "client-0".into(),
        uid: String::new(),
    };
    feed(&mut s, TruthEvent::Delete(TruthKey::Pod(pod)), t(5));
    assert_eq!(s.layer::<ChannelzModel>().unwrap().clients().count(), 0);
    assert_eq!(s.engine().paths().count(), 0);
}

#[test]
fn targets_name_services_in_the_clients_namespace_or_their_own() {
    let web = Some(ServiceKey::new("demo", "web"));
    for target in [
        "dns:///web.demo.svc.cluster.local:50051",
        "dns:///web.demo.svc.cluster.local.:50051",
        "dns://10.96.0.10:53/web.demo.svc:50051",
        "dns:web.demo:50051",
        "web.demo:50051",
        "web:50051",
        "web",
    ] {
        assert_eq!(service_of_target(target, "demo"), web, "{target}");
    }
    assert_eq!(
        service_of_target("web.prod.svc.cluster.local:443", "demo"),
        Some(ServiceKey::new("prod", "web"))
    );
    for target in [
        "passthrough:///web:50051",
        "xds:///web",
        "10.244.1.7:50051",
        "dns:///[fd00::1]:50051",
        "dns:///Web.demo:1",
        "dns:///web.demo.other:50051",
        "",
    ] {
        assert_eq!(service_of_target(target, "demo"), None, "{target}");
    }
}

#[test]
fn subchannel_addresses_parse_from_grpc_go_and_grpc_java() {
    assert_eq!(
        parse_address("10.244.1.7:50051"),
        Some(addr("10.244.1.7:50051"))
    );
    assert_eq!(
        parse_address("[fd00::7]:50051"),
        Some(addr("[fd00::7]:50051"))
    );
    assert_eq!(
        parse_address("[[/10.244.1.7:50051]/{}]"),
        Some(addr("10.244.1.7:50051"))
    );
    assert_eq!(
        parse_address("[[web-a.demo/10.244.1.7:50051]/{}]"),
        Some(addr("10.244.1.7:50051"))
    );
    assert_eq!(
        parse_address("[[/[fd00::7]:50051]/{}]"),
        Some(addr("[fd00::7]:50051"))
    );
    for bad in ["", "web:50051", "10.244.1.7", "garbage\u{0}"] {
        assert_eq!(parse_address(bad), None, "{bad:?}");
    }
    // grpc-java 1.85 (the lab's grpcjava): the subchannel's list of address groups.
    assert_eq!(
        parse_address("[[[/127.0.0.1:46199]/{}]]"),
        Some(addr("127.0.0.1:46199"))
    );
    assert_eq!(
        parse_address("[[[web.demo.svc.cluster.local/10.244.1.7:50051]/{}]]"),
        Some(addr("10.244.1.7:50051"))
    );
    // JDK 14 on brackets an IPv6 socket address and prints all eight groups.
    assert_eq!(
        parse_address("[[[/[fd00:0:0:0:0:0:0:7]:50051]/{}]]"),
        Some(addr("[fd00::7]:50051"))
    );
    assert_eq!(ConnState::from_proto(4), TransientFailure);
    assert_eq!(ConnState::from_proto(99), ConnState::Unknown);
}

/// JDK 13 and older print an IPv6 socket address without brackets (`/fd00:0:0:0:0:0:0:7:50051`):
/// read in its full eight-group form only, where the last group is unambiguously the port.
#[test]
fn a_grpc_java_ipv6_address_from_an_old_jdk_parses() {
    assert_eq!(
        parse_address("[[[/fd00:0:0:0:0:0:0:7:50051]/{}]]"),
        Some(addr("[fd00::7]:50051"))
    );
    assert_eq!(
        parse_address("[[web-a.demo/fd00:0:0:0:0:0:0:7:50051]/{}]"),
        Some(addr("[fd00::7]:50051"))
    );
    // Compressed or without a port: not Java's text, not guessed.
    for bad in [
        "[[/fd00::7:50051]/{}]",
        "[[/fd00:0:0:0:0:0:0:7]/{}]",
        "fd00:0:0:0:0:0:0:7",
    ] {
        assert_eq!(parse_address(bad), None, "{bad:?}");
    }
}

/// A grpc-java subchannel over several addresses (`pick_first` over a list, a dual-stack
/// endpoint) holds each of them: all are read, in order, once each.
#[test]
fn every_address_of_a_grpc_java_address_group_is_read() {
    assert_eq!(
        parse_addresses(
            "[[[/10.244.1.7:50051, /[fd00:0:0:0:0:0:0:7]:50051]/{}], [[/10.244.2.9:50051]/{}], [[/10.244.1.7:50051]/{}]]"
        ),
        vec![
            addr("10.244.1.7:50051"),
            addr("[fd00::7]:50051"),
            addr("10.244.2.9:50051")
        ]
    );
    assert_eq!(
        parse_addresses("10.244.1.7:50051"),
        vec![addr("10.244.1.7:50051")]
    );
    assert!(parse_addresses("[[/web:50051]/{}]").is_empty());
}

/// drain-wait's part: a client lets go with its first read after t0 that holds no
/// subchannel to the IP; one read before t0 or still holding it holds; an unreadable one is
/// unknown; no client adds nothing.
#[test]
fn the_drain_part_lets_go_when_no_client_holds_the_ip() {
    let ip: IpAddr = "10.244.1.7".parse().unwrap();
    let mut part = ClientsLetGo::new();
    let mut out = Vec::new();
    part.views(t(10), t(11), &mut out);
    assert!(out.is_empty(), "no opted-in client: nothing to wait for");

    let holding = read_of(vec![channel(
        TARGET,
        &[("10.244.1.7:50051", TransientFailure)],
    )]);
    assert_eq!(
        holders(&holding, ip),
        vec![format!("{TARGET} (TransientFailure)")]
    );
    let shut = read_of(vec![channel(TARGET, &[("10.244.1.7:50051", Shutdown)])]);
    assert!(holders(&shut, ip).is_empty());

    let views = |part: &ClientsLetGo| {
        let mut out = Vec::new();
        part.views(t(10), t(20), &mut out);
        out.into_iter()
            .map(|s| (s.path, s.view))
            .collect::<BTreeMap<_, _>>()
    };
    part.on_client(
        "demo/client-0",
        Ok(ClientReport {
            read_at: t(9),
            holding: Vec::new(),
        }),
    );
    part.on_client("demo/client-1", Err("channelz: connection refused".into()));
    let v = views(&part);
    assert!(
        matches!(v["demo/client-0"], LayerView::Holding { .. }),
        "read before t0"
    );
    assert!(matches!(v["demo/client-1"], LayerView::Unknown { .. }));
    part.on_client(
        "demo/client-0",
        Ok(ClientReport {
            read_at: t(12),
            holding: holders(&holding, ip),
        }),
    );
    assert!(matches!(
        views(&part)["demo/client-0"],
        LayerView::Holding { .. }
    ));
    part.on_client(
        "demo/client-0",
        Ok(ClientReport {
            read_at: t(15),
            holding: holders(&shut, ip),
        }),
    );
    part.forget("demo/client-1");
    let v = views(&part);
    assert_eq!(v.len(), 1);
    assert_eq!(v["demo/client-0"], LayerView::LetGo { at: t(15) });
}
