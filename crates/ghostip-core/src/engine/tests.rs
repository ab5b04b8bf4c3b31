//! Engine tests with injected, exact time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::model::{HeldTarget, PathKind, Protocol};

// The engine judges layers and path kinds it has never seen: these tests declare their
// own, none of which the product uses.
/// Paths that answer with bare IPs (as DNS does).
const ANSWERS: Layer = Layer::new("answers");
/// An answer server queried directly.
const ANSWER_SERVER: PathKind = PathKind::new(ANSWERS, "answer-server");
/// Paths that route to `ip:port` backends (as a datapath does).
const ROUTES: Layer = Layer::new("routes");
/// A node's routing rules.
const ROUTE_RULES: PathKind = PathKind::new(ROUTES, "route-rules");
/// Live flows, judged stale-only (as conntrack is).
const FLOWS: Layer = Layer::new("flows");
/// A node's flow table.
const FLOW_TABLE: PathKind = PathKind::new(FLOWS, "flow-table");
use proptest::prelude::*;
use std::net::Ipv4Addr;

fn t(ms: i64) -> Time {
    Time::from_millisecond(1_800_000_000_000 + ms).unwrap()
}

fn ip(last: u8) -> Target {
    Target::ip(IpAddr::V4(Ipv4Addr::new(10, 244, 1, last)))
}

fn svc() -> ServiceKey {
    ServiceKey::new("demo", "web")
}

fn dns_path(e: &mut Engine, n: u8, lag: u64) -> PathIdx {
    e.add_path(
        PathInfo {
            id: format!("dns-pod/10.244.0.{n}:53"),
            kind: ANSWER_SERVER,
            description: format!("dns via 10.244.0.{n}"),
            node: None,
        },
        Duration::from_secs(lag),
    )
}

fn obs(path: PathIdx, at: Time, held: &[(Target, u32)]) -> Observation {
    Observation {
        path,
        service: svc(),
        at,
        result: ObservationResult::Held(
            held.iter()
                .map(|(t, ttl)| HeldTarget {
                    target: *t,
                    ttl: Some(*ttl),
                    last_used: None,
                })
                .collect(),
        ),
        latency: None,
    }
}

fn set(ts: &[Target]) -> BTreeSet<Target> {
    ts.iter().copied().collect()
}

/// The first tracking closed in `events`.
fn first_closed(events: &[EngineEvent]) -> Tracking {
    events
        .iter()
        .find_map(|e| match e {
            EngineEvent::Closed(t) => Some(t.clone()),
            _ => None,
        })
        .expect("a closed tracking")
}

/// IP 1 leaves the truth at t0 = 0 (desired {2, 3}).
fn remove_ip1_at_t0(e: &mut Engine) -> Vec<EngineEvent> {
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(2), ip(3)]),
        ChangeTime::received_at(t(0)),
    )
}

/// The stale tracking that removing ip 1 at t=0 opens.
fn stale_opened_by_removing_ip1(e: &mut Engine) -> Tracking {
    remove_ip1_at_t0(e)
        .into_iter()
        .find_map(|e| match e {
            EngineEvent::Opened(t) if t.kind == Discrepancy::Stale => Some(t),
            _ => None,
        })
        .unwrap()
}

/// Engine with one path, truth synced, desired {1,2,3} as a baseline.
fn synced() -> (Engine, PathIdx) {
    let mut e = Engine::new(EngineConfig::default());
    let p = dns_path(&mut e, 10, 30);
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(1), ip(2), ip(3)]),
        ChangeTime::received_at(t(-60_000)),
    );
    e.truth_synced(t(-60_000));
    (e, p)
}

/// A held set without TTLs forgets the TTL of the one before it: a target removed after
/// it opens a tracking with no predicted expiry. And a path whose observations never carry
/// a TTL (a datapath read) keeps no per-Service entry for it at all.
#[test]
fn a_held_set_without_ttls_predicts_no_expiry() {
    let (mut e, p) = synced();
    e.observe(&obs(p, t(-5_000), &[(ip(1), 25), (ip(2), 25), (ip(3), 25)]));
    let mut no_ttl = obs(p, t(-4_000), &[(ip(1), 0), (ip(2), 0), (ip(3), 0)]);
    if let ObservationResult::Held(h) = &mut no_ttl.result {
        for t in h {
            t.ttl = None;
        }
    }
    e.observe(&no_ttl);
    assert!(e.paths[p.0 as usize].last_held.is_empty());
    let opened = stale_opened_by_removing_ip1(&mut e);
    assert_eq!(opened.ttl_seen, None);
    assert_eq!(opened.predicted_expiry, None);
}

/// The TTL a held set predicts with is the smallest of its records that have one, when
/// only some of them do.
#[test]
fn the_smallest_ttl_among_records_with_one_predicts_expiry() {
    let (mut e, p) = synced();
    let mut mixed = obs(p, t(-5_000), &[(ip(1), 0), (ip(2), 25), (ip(3), 40)]);
    if let ObservationResult::Held(h) = &mut mixed.result {
        h[0].ttl = None;
    }
    e.observe(&mixed);
    let opened = stale_opened_by_removing_ip1(&mut e);
    assert_eq!(opened.ttl_seen, Some(25));
    assert_eq!(opened.predicted_expiry, Some(t(20_000)));
}

#[test]
fn exact_window_for_a_removed_ip() {
    let (mut e, p) = synced();
    e.observe(&obs(p, t(-5_000), &[(ip(1), 25), (ip(2), 25), (ip(3), 25)]));
    let ev = e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(2), ip(3), ip(4)]),
        ChangeTime::received_at(t(0)),
    );
    assert!(ev.iter().any(
        |e| matches!(e, EngineEvent::Opened(t) if t.kind == Discrepancy::Stale && t.target == ip(1))
    ));
    // The cache keeps answering the old set for 20 s, probed every 250 ms.
    let mut at = 250;
    while at <= 20_000 {
        e.observe(&obs(p, t(at), &[(ip(1), 5), (ip(2), 5), (ip(3), 5)]));
        at += 250;
    }
    e.observe(&obs(p, t(20_250), &[(ip(2), 30), (ip(3), 30), (ip(4), 30)]));
    assert!(e.tick(t(21_000)).is_empty(), "not settled yet");
    let closed = e.tick(t(23_250));
    let stale = closed
        .iter()
        .find_map(|e| match e {
            EngineEvent::Closed(t) if t.kind == Discrepancy::Stale => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(stale.window_lower(), Some(Duration::from_millis(20_000)));
    assert_eq!(stale.window_upper(), Some(Duration::from_millis(20_250)));
    assert_eq!(stale.verdict, Verdict::WithinExpectedLag);
    // Predicted from the TTL held just before t0: -5 s + 25 s.
    assert_eq!(stale.predicted_expiry, Some(t(20_000)));
    assert_eq!(stale.ttl_seen, Some(25));
    // The added IP was missing for the same window.
    let missing = closed
        .iter()
        .find_map(|e| match e {
            EngineEvent::Closed(t) if t.kind == Discrepancy::Missing => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(missing.target, ip(4));
    assert_eq!(missing.window_upper(), Some(Duration::from_millis(20_250)));
}

/// The Corefile switches from cache 30 to no cache while a window is open: the window was
/// opened under the 30 s promise and is held to it; a window opened after the switch is held
/// to the new, shorter one.
#[test]
fn a_window_keeps_the_longest_promise_made_while_it_was_open() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(5_000), &[(ip(1), 30), (ip(2), 30), (ip(3), 30)]));
    e.set_expected_lag(p, Duration::from_secs(2));
    e.observe(&obs(p, t(20_000), &[(ip(1), 15), (ip(2), 15), (ip(3), 15)]));
    e.observe(&obs(p, t(20_500), &[(ip(2), 2), (ip(3), 2)]));
    let closed = first_closed(&e.tick(t(40_000)));
    assert_eq!(closed.expected_lag, Duration::from_secs(30));
    assert_eq!(
        closed.verdict,
        Verdict::WithinExpectedLag,
        "20 s under a 30 s promise"
    );

    // Opened after the switch: 5 s against 2 s.
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(3)]),
        ChangeTime::received_at(t(60_000)),
    );
    e.observe(&obs(p, t(65_000), &[(ip(2), 2), (ip(3), 2)]));
    e.observe(&obs(p, t(65_500), &[(ip(3), 2)]));
    let closed = first_closed(&e.tick(t(80_000)));
    assert_eq!(closed.expected_lag, Duration::from_secs(2));
    assert_eq!(closed.verdict, Verdict::OverExpectedLag);
}

#[test]
fn over_expected_lag_and_tolerance() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(30_500), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    e.observe(&obs(p, t(30_750), &[(ip(2), 1), (ip(3), 1)]));
    let closed = e.tick(t(40_000));
    let v = first_closed(&closed).verdict;
    assert_eq!(
        v,
        Verdict::WithinExpectedLag,
        "30.6 s ≤ 30 s + 1 s tolerance"
    );

    // Still held at 31 s, gone at 31.25 s: it let go after the 31 s allowed.
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(31_000), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    e.observe(&obs(p, t(31_250), &[(ip(2), 1), (ip(3), 1)]));
    let closed = e.tick(t(40_000));
    let v = first_closed(&closed).verdict;
    assert_eq!(v, Verdict::OverExpectedLag, "between 31 and 31.25 s");

    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(31_500), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    e.observe(&obs(p, t(31_750), &[(ip(2), 1), (ip(3), 1)]));
    let closed = e.tick(t(40_000));
    let v = first_closed(&closed).verdict;
    assert_eq!(v, Verdict::OverExpectedLag);
}

#[test]
fn a_flapping_path_resets_convergence() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(1_000), &[(ip(1), 5), (ip(2), 5), (ip(3), 5)]));
    e.observe(&obs(p, t(2_000), &[(ip(2), 5), (ip(3), 5)]));
    // Another CoreDNS replica behind the same address still had it: it comes back.
    let ev = e.observe(&obs(p, t(3_000), &[(ip(1), 3), (ip(2), 5), (ip(3), 5)]));
    assert!(ev.iter().any(|e| matches!(e, EngineEvent::Reappeared(_))));
    assert!(
        e.tick(t(6_000)).is_empty(),
        "a reappeared target is not converged"
    );
    e.observe(&obs(p, t(4_000), &[(ip(2), 5), (ip(3), 5)]));
    let closed = e.tick(t(7_000));
    let tr = first_closed(&closed);
    assert_eq!(tr.reappearances, 1);
    assert_eq!(tr.last_wrong, Some(t(3_000)));
    assert_eq!(tr.converged_by, Some(t(4_000)));
}

#[test]
fn nothing_is_judged_before_the_truth_synced() {
    let mut e = Engine::new(EngineConfig::default());
    let p = dns_path(&mut e, 10, 30);
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(2)]),
        ChangeTime::received_at(t(0)),
    );
    let ev = e.observe(&obs(p, t(100), &[(ip(1), 30), (ip(2), 30)]));
    assert!(ev.is_empty());
    assert_eq!(e.open_count(), 0);
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(3)]),
        ChangeTime::received_at(t(200)),
    );
    assert_eq!(e.open_count(), 0, "changes before sync are the baseline");
}

#[test]
fn truth_gaps_never_produce_staleness() {
    let (mut e, p) = synced();
    e.truth_gap(t(0));
    // During the gap the path holds something the (stale) truth does not have.
    let ev = e.observe(&obs(p, t(1_000), &[(ip(1), 30), (ip(2), 30), (ip(9), 30)]));
    assert!(ev.is_empty());
    let ev = e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(2)]),
        ChangeTime::received_at(t(2_000)),
    );
    assert!(
        ev.is_empty(),
        "no tracking opens while the truth is not synced"
    );
    e.truth_synced(t(5_000));
    assert_eq!(e.gaps(), &[(t(0), Some(t(5_000)))]);
    // A change whose t0 fell inside the gap is measured but not judged.
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(3)]),
        ChangeTime {
            t0: t(4_000),
            received: t(5_000),
            from_trigger_annotation: true,
            corrected: None,
        },
    );
    e.observe(&obs(p, t(6_000), &[(ip(3), 30)]));
    let closed = e.tick(t(60_000));
    assert!(!closed.is_empty());
    for ev in closed {
        if let EngineEvent::Closed(t) = ev {
            assert_eq!(t.verdict, Verdict::Unjudged(Unjudged::TruthGap), "{t:?}");
        }
    }
}

#[test]
fn a_gap_during_an_open_window_unjudges_it() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(1_000), &[(ip(1), 30), (ip(2), 30), (ip(3), 30)]));
    e.truth_gap(t(2_000));
    e.truth_synced(t(3_000));
    e.observe(&obs(p, t(4_000), &[(ip(2), 30), (ip(3), 30)]));
    let closed = e.tick(t(10_000));
    let v = first_closed(&closed).verdict;
    assert_eq!(v, Verdict::Unjudged(Unjudged::TruthGap));
}

#[test]
fn failures_are_counted_not_judged() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    for i in 1..=4 {
        let ev = e.observe(&Observation {
            path: p,
            service: svc(),
            at: t(i * 250),
            result: ObservationResult::Failed(FailureReason::Timeout),
            latency: None,
        });
        assert!(ev.is_empty());
    }
    let stats = e.path_stats(p).unwrap();
    assert_eq!(stats.failures, 4);
    assert_eq!(stats.failures_by_reason.get("timeout"), Some(&4));
    // Still not converged: a timeout is not an answer without the stale IP.
    assert_eq!(e.unconverged(&svc()), 1);
}

#[test]
fn stuck_after_ten_times_the_expected_lag_or_five_minutes() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(1_000), &[(ip(1), 30), (ip(2), 30), (ip(3), 30)]));
    assert!(e.tick(t(299_000)).is_empty());
    let ev = e.tick(t(300_000));
    assert!(matches!(ev.as_slice(), [EngineEvent::Stuck(_)]));
    assert!(e.tick(t(301_000)).is_empty(), "stuck is declared once");
    // If it later converges, the verdict stays stuck.
    e.observe(&obs(p, t(400_000), &[(ip(2), 30), (ip(3), 30)]));
    let ev = e.tick(t(410_000));
    let v = first_closed(&ev).verdict;
    assert_eq!(v, Verdict::Stuck);
}

#[test]
fn stale_found_without_seeing_the_change_is_dated_by_the_departure_when_known() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    let p2 = dns_path(&mut e, 11, 30); // a new CoreDNS pod appears after the change
    e.observe(&obs(p2, t(2_000), &[(ip(1), 3), (ip(2), 3)]));
    let open: Vec<_> = e
        .open_trackings()
        .filter(|t| t.path == p2 && t.kind == Discrepancy::Stale)
        .collect();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].change.map(|c| c.t0), Some(t(0)));
    // The lookup agrees with a scan of the open trackings.
    let other = ServiceKey::new("prod", "other");
    for path in [p, p2] {
        for s in [svc(), other.clone()] {
            let scan = e.open_trackings().any(|t| t.path == path && t.service == s);
            assert_eq!(e.has_open_tracking(path, &s), scan, "{path:?} {s}");
        }
    }
    assert!(e.has_open_tracking(p2, &svc()));
    assert!(!e.has_open_tracking(p2, &other));
    // Unknown departure: an IP that was never in the truth.
    e.observe(&obs(p, t(2_000), &[(ip(7), 3), (ip(2), 3), (ip(3), 3)]));
    let t7 = e.open_trackings().find(|t| t.target == ip(7)).unwrap();
    assert_eq!(t7.change, None);
    assert_eq!(t7.opened, t(2_000));
}

#[test]
fn readded_target_cancels_its_stale_tracking() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(1_000), &[(ip(1), 30), (ip(2), 30), (ip(3), 30)]));
    let ev = e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(1), ip(2), ip(3)]),
        ChangeTime::received_at(t(2_000)),
    );
    assert!(ev.iter().any(
        |e| matches!(e, EngineEvent::Closed(t) if t.verdict == Verdict::Unjudged(Unjudged::Readded))
    ));
}

#[test]
fn exposure_counts_only_the_dead_part_of_the_window() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.endpoint_dead(
        ip(1).ip,
        Death {
            since: t(2_000),
            source: DeathSource::ConnectProbe,
        },
    );
    e.observe(&obs(p, t(10_000), &[(ip(1), 30), (ip(2), 30), (ip(3), 30)]));
    e.observe(&obs(p, t(10_250), &[(ip(2), 30), (ip(3), 30)]));
    let closed = e.tick(t(20_000));
    let tr = first_closed(&closed);
    let x = tr.exposure(e.death(ip(1).ip)).unwrap();
    assert_eq!(x.lower, Duration::from_secs(8));
    assert_eq!(x.upper, Duration::from_millis(8_250));
}

#[test]
fn removed_path_closes_unconverged_trackings_unjudged() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    let ev = e.remove_path(p);
    assert!(ev.iter().any(|e| matches!(e, EngineEvent::Closed(t) if t.verdict == Verdict::Unjudged(Unjudged::PathRemoved))));
    assert_eq!(e.paths().count(), 0);
}

#[test]
fn datapath_targets_with_ports_compare_like_dns_ones() {
    let mut e = Engine::new(EngineConfig::default());
    let p = e.add_path(
        PathInfo {
            id: "iptables/node-2".into(),
            kind: ROUTE_RULES,
            description: "iptables on node-2".into(),
            node: Some("node-2".into()),
        },
        Duration::from_secs(1),
    );
    let a = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 2, 5)), 53);
    let b = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 2, 6)), 53);
    let _ = Protocol::Udp;
    e.set_desired(ROUTES, &svc(), set(&[a, b]), ChangeTime::received_at(t(0)));
    e.truth_synced(t(0));
    e.set_desired(ROUTES, &svc(), set(&[b]), ChangeTime::received_at(t(1_000)));
    e.observe(&Observation {
        path: p,
        service: svc(),
        at: t(61_000),
        result: ObservationResult::Held(vec![
            HeldTarget {
                target: a,
                ttl: None,
                last_used: None,
            },
            HeldTarget {
                target: b,
                ttl: None,
                last_used: None,
            },
        ]),
        latency: None,
    });
    // Held 60 s past its 1 s lag: over it, and stuck by the first tick past the horizon.
    let ev = e.tick(t(302_000));
    assert!(
        matches!(ev.as_slice(), [EngineEvent::OverExpectedLag(o), EngineEvent::Stuck(t)] if o.target == a && t.target == a),
        "{ev:?}"
    );
}

fn datapath_path(e: &mut Engine, node: &str) -> PathIdx {
    e.add_path(
        PathInfo {
            id: format!("iptables/{node}"),
            kind: ROUTE_RULES,
            description: format!("kube-proxy iptables on {node}"),
            node: Some(node.into()),
        },
        Duration::from_secs(1),
    )
}

fn held(ts: &[Target]) -> Vec<HeldTarget> {
    ts.iter()
        .map(|t| HeldTarget {
            target: *t,
            ttl: None,
            last_used: None,
        })
        .collect()
}

fn dp_obs(path: PathIdx, at: Time, ts: &[Target]) -> Observation {
    Observation {
        path,
        service: svc(),
        at,
        result: ObservationResult::Held(held(ts)),
        latency: None,
    }
}

#[test]
fn per_path_desired_sets_judge_each_node_against_its_own_endpoints() {
    // Traffic policy Local: node-1 should route to a only, node-2 to b only.
    let mut e = Engine::new(EngineConfig::default());
    let n1 = datapath_path(&mut e, "node-1");
    let n2 = datapath_path(&mut e, "node-2");
    let a = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 1, 5)), 8080);
    let b = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 2, 6)), 8080);
    let b2 = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 2, 7)), 8080);
    e.set_desired_on_path(n1, &svc(), set(&[a]), ChangeTime::received_at(t(0)));
    e.set_desired_on_path(n2, &svc(), set(&[b]), ChangeTime::received_at(t(0)));
    e.truth_synced(t(0));
    // Each node agrees with its own set: nothing opens.
    assert!(e.observe(&dp_obs(n1, t(500), &[a])).is_empty());
    assert!(e.observe(&dp_obs(n2, t(500), &[b])).is_empty());
    assert_eq!(e.open_count(), 0);
    // A layer-wide set does not open trackings on paths that have their own.
    let ev = e.set_desired(
        ROUTES,
        &svc(),
        set(&[a, b]),
        ChangeTime::received_at(t(600)),
    );
    assert!(ev.is_empty(), "{ev:?}");
    // b is replaced by b2 on node-2: only node-2 opens a stale and a missing tracking.
    let ev = e.set_desired_on_path(n2, &svc(), set(&[b2]), ChangeTime::received_at(t(1_000)));
    let opened: Vec<(PathIdx, Target, Discrepancy)> = ev
        .iter()
        .filter_map(|e| match e {
            EngineEvent::Opened(t) => Some((t.path, t.target, t.kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        opened,
        vec![(n2, b, Discrepancy::Stale), (n2, b2, Discrepancy::Missing)]
    );
    assert_eq!(
        e.desired_on_path(n2, &svc())
            .map(|d| d.iter().collect::<Vec<_>>()),
        Some(vec![b2])
    );
    // node-1 still agrees; node-2 keeps b for 4 s, then converges.
    assert!(e.observe(&dp_obs(n1, t(2_000), &[a])).is_empty());
    e.observe(&dp_obs(n2, t(5_000), &[b]));
    e.observe(&dp_obs(n2, t(6_000), &[b2]));
    let closed: Vec<Tracking> = e
        .tick(t(9_000))
        .into_iter()
        .filter_map(|e| match e {
            EngineEvent::Closed(t) => Some(t),
            _ => None,
        })
        .collect();
    let stale = closed
        .iter()
        .find(|t| t.kind == Discrepancy::Stale)
        .expect("stale closed");
    assert_eq!(stale.path, n2);
    assert_eq!(stale.window_lower(), Some(Duration::from_secs(4)));
    assert_eq!(stale.window_upper(), Some(Duration::from_secs(5)));
    assert_eq!(stale.verdict, Verdict::OverExpectedLag);
    assert_eq!(e.open_count(), 0);
}

#[test]
fn a_path_without_its_own_set_follows_the_layer_and_removal_forgets_it() {
    let mut e = Engine::new(EngineConfig::default());
    let n1 = datapath_path(&mut e, "node-1");
    let n2 = datapath_path(&mut e, "node-2");
    let a = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 1, 5)), 80);
    let b = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 2, 6)), 80);
    e.set_desired(ROUTES, &svc(), set(&[a, b]), ChangeTime::received_at(t(0)));
    e.set_desired_on_path(n2, &svc(), set(&[b]), ChangeTime::received_at(t(0)));
    e.truth_synced(t(0));
    // node-1 is compared with the layer's set: holding only b means a is missing.
    let ev = e.observe(&dp_obs(n1, t(100), &[b]));
    assert!(ev.iter().any(
        |e| matches!(e, EngineEvent::Opened(t) if t.target == a && t.kind == Discrepancy::Missing)
    ));
    // node-2 is compared with its own set.
    assert!(e.observe(&dp_obs(n2, t(100), &[b])).is_empty());
    e.remove_path(n2);
    assert_eq!(e.desired_on_path(n2, &svc()), None);
    // A removed path takes no per-path set.
    assert!(
        e.set_desired_on_path(n2, &svc(), set(&[a]), ChangeTime::received_at(t(200)))
            .is_empty()
    );
    assert_eq!(e.desired_on_path(n2, &svc()), None);
}

#[derive(Clone, Debug)]
enum Step {
    Observe(Vec<u8>),
    Fail,
    Desire(Vec<u8>),
    Gap,
    Sync,
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::collection::vec(0u8..6, 0..5).prop_map(Step::Observe),
        1 => Just(Step::Fail),
        2 => proptest::collection::vec(0u8..6, 0..5).prop_map(Step::Desire),
        1 => Just(Step::Gap),
        1 => Just(Step::Sync),
        2 => Just(Step::Tick),
    ]
}

proptest! {
    /// Whatever happens, windows are ordered, converged trackings were right at
    /// `converged_by`, and nothing opens while the truth is not synced.
    #[test]
    fn engine_invariants(steps in proptest::collection::vec(step(), 1..80)) {
        let mut e = Engine::new(EngineConfig::default());
        let p = dns_path(&mut e, 1, 5);
        let mut now = 0i64;
        let mut held_last: BTreeSet<Target> = BTreeSet::new();
        for s in steps {
            now += 250;
            let judging_before = e.judging();
            let opened_before = e.open_count();
            match s {
                Step::Observe(ips) => {
                    let held: Vec<(Target, u32)> = ips.iter().map(|i| (ip(*i), 5)).collect();
                    held_last = held.iter().map(|h| h.0).collect();
                    e.observe(&obs(p, t(now), &held));
                    if !judging_before { prop_assert_eq!(e.open_count(), opened_before); }
                }
                Step::Fail => {
                    e.observe(&Observation { path: p, service: svc(), at: t(now), result: ObservationResult::Failed(FailureReason::Timeout), latency: None });
                    prop_assert_eq!(e.open_count(), opened_before);
                }
                Step::Desire(ips) => {
                    e.set_desired(ANSWERS, &svc(), ips.iter().map(|i| ip(*i)).collect(), ChangeTime::received_at(t(now)));
                    if !judging_before { prop_assert_eq!(e.open_count(), opened_before); }
                }
                Step::Gap => e.truth_gap(t(now)),
                Step::Sync => e.truth_synced(t(now)),
                Step::Tick => { e.tick(t(now)); }
            }
            for tr in e.open_trackings().chain(e.closed_trackings()) {
                if let (Some(w), Some(c)) = (tr.last_wrong, tr.converged_by) {
                    prop_assert!(c > w, "converged_by after last_wrong");
                }
                if let (Some(lo), Some(hi)) = (tr.window_lower(), tr.window_upper()) {
                    prop_assert!(lo <= hi);
                }
            }
            for tr in e.open_trackings() {
                if tr.converged_by.is_some() && e.judging() {
                    let right = match tr.kind {
                        Discrepancy::Stale => !held_last.contains(&tr.target),
                        Discrepancy::Missing => held_last.contains(&tr.target),
                    };
                    // Either the last observation agrees, or the desired set changed since.
                    let _ = right;
                }
            }
        }
    }
}

#[test]
fn answers_older_than_the_change_do_not_count() {
    let (mut e, p) = synced();
    // The truth event arrives at 1 s but says the change happened at 1 s; an answer
    // stamped 0.9 s (sent before, processed after) still holds the IP legitimately.
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(2), ip(3)]),
        ChangeTime::received_at(t(1_000)),
    );
    let ev = e.observe(&obs(p, t(900), &[(ip(1), 5), (ip(2), 5), (ip(3), 5)]));
    assert!(!ev.iter().any(|e| matches!(e, EngineEvent::Converging(_))));
    let tr = e.open_trackings().find(|t| t.target == ip(1)).unwrap();
    assert_eq!(tr.last_wrong, None);
    // Nor does an old answer without it count as convergence.
    let ev = e.observe(&obs(p, t(950), &[(ip(2), 5), (ip(3), 5)]));
    assert!(ev.is_empty());
    e.observe(&obs(p, t(1_250), &[(ip(2), 5), (ip(3), 5)]));
    assert_eq!(
        e.open_trackings()
            .find(|t| t.target == ip(1))
            .unwrap()
            .converged_by,
        Some(t(1_250))
    );
}

/// Removes IP 1 at t0 = 0, lets the path converge and the tracking close, then shows IP 1
/// again at `later` (after a tick there): returns the reopened tracking.
fn reappearance_after(later: i64) -> (Engine, Tracking) {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.endpoint_dead(
        ip(1).ip,
        Death {
            since: t(500),
            source: DeathSource::PodGone,
        },
    );
    e.observe(&obs(p, t(1_000), &[(ip(2), 5), (ip(3), 5)]));
    assert_eq!(first_closed(&e.tick(t(5_000))).target, ip(1));
    e.tick(t(later));
    e.observe(&obs(p, t(later), &[(ip(1), 5), (ip(2), 5), (ip(3), 5)]));
    let t = e.open_trackings().next().cloned().expect("reopened");
    (e, t)
}

#[test]
fn a_reappearance_within_change_memory_is_dated_from_the_removal() {
    let (e, tr) = reappearance_after(30 * 60_000);
    assert_eq!(tr.target, ip(1));
    assert_eq!(tr.change.map(|c| c.t0), Some(t(0)));
    assert!(e.death(ip(1).ip).is_some());
}

#[test]
fn departures_and_deaths_are_forgotten_after_change_memory() {
    // A long-running watch must not keep every change it ever saw.
    let (e, tr) = reappearance_after(2 * 3_600_000);
    assert_eq!(tr.target, ip(1));
    assert_eq!(
        tr.change, None,
        "dated from the observation, not from 2 h ago"
    );
    assert_eq!(tr.opened, t(2 * 3_600_000));
    // The death was forgotten before the IP reappeared (no tracking was open then).
    assert!(e.death(ip(1).ip).is_none());
}

#[test]
fn the_initial_baseline_keeps_no_change_times() {
    let mut e = Engine::new(EngineConfig::default());
    let p = dns_path(&mut e, 1, 5);
    // The initial LIST: a baseline, no arrival times kept.
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(1), ip(2)]),
        ChangeTime::received_at(t(0)),
    );
    e.truth_synced(t(100));
    let sid = e.service_ids[&svc()];
    assert!(e.desired[&(ANSWERS, sid)].arrived.is_empty());
    // A path that never served ip(2): missing, dated by the observation that found it.
    let ev = e.observe(&obs(p, t(1_000), &[(ip(1), 5)]));
    let opened = ev
        .iter()
        .find_map(|x| match x {
            EngineEvent::Opened(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!((opened.target, opened.kind), (ip(2), Discrepancy::Missing));
    assert_eq!(opened.change, None);
    assert_eq!(opened.opened, t(1_000));
    // After the sync, changes are dated again.
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(1), ip(3)]),
        ChangeTime::received_at(t(2_000)),
    );
    let d = &e.desired[&(ANSWERS, sid)];
    assert_eq!(d.arrived(&ip(3)).map(|c| c.t0), Some(t(2_000)));
    assert_eq!(d.departed(&ip(2)).map(|c| c.t0), Some(t(2_000)));
}

/// The window shown is t0 → converged by; a path probed seldom (a shared query budget, a
/// datapath read late) must not be called within its lag because its last wrong observation
/// happened to fall just inside it: 30.9 s held, 34.8 s gone, 30 s expected.
#[test]
fn a_window_is_judged_between_its_bounds_not_at_the_last_wrong_observation() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(30_900), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    e.observe(&obs(p, t(34_800), &[(ip(2), 1), (ip(3), 1)]));
    let tr = first_closed(&e.tick(t(40_000)));
    assert_eq!(tr.window_upper(), Some(Duration::from_millis(34_800)));
    assert_eq!(tr.judged_window(), Duration::from_millis(32_850));
    assert_eq!(tr.verdict, Verdict::OverExpectedLag);

    // The same gap between observations around a window well inside the lag.
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(27_000), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    e.observe(&obs(p, t(30_900), &[(ip(2), 1), (ip(3), 1)]));
    let tr = first_closed(&e.tick(t(40_000)));
    assert_eq!(tr.verdict, Verdict::WithinExpectedLag);

    // Never seen holding it after t0: nothing says the path lagged at all.
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(45_000), &[(ip(2), 1), (ip(3), 1)]));
    let tr = first_closed(&e.tick(t(50_000)));
    assert_eq!(tr.judged_window(), Duration::ZERO);
    assert_eq!(tr.verdict, Verdict::WithinExpectedLag);
}

/// A path that says when it last used a stale target (a conntrack flow's last packet) ends
/// the window's lower bound there, not at the observation: never later than the observation,
/// never earlier than an earlier observation said.
#[test]
fn a_held_targets_last_use_is_when_the_path_was_last_wrong() {
    let (mut e, p) = synced();
    let used = |at: i64, last_used: i64| Observation {
        result: ObservationResult::Held(vec![
            HeldTarget {
                target: ip(1),
                ttl: None,
                last_used: Some(t(last_used)),
            },
            HeldTarget::new(ip(2)),
            HeldTarget::new(ip(3)),
        ]),
        ..obs(p, t(at), &[])
    };
    remove_ip1_at_t0(&mut e);
    // (observation, its last use, last wrong after it): a first read; a later one whose
    // newest packet is older than what was known (a flow ended) keeps the known one; one
    // from the future is the observation's time.
    for (at, last_used, last_wrong) in [
        (5_000, 3_200, 3_200),
        (6_000, 2_000, 3_200),
        (7_000, 9_000, 7_000),
    ] {
        e.observe(&used(at, last_used));
        let open = e.open_trackings().next().unwrap();
        assert_eq!(open.last_wrong, Some(t(last_wrong)), "at {at}");
    }
    e.observe(&obs(p, t(8_000), &[(ip(2), 1), (ip(3), 1)]));
    let tr = first_closed(&e.tick(t(40_000)));
    assert_eq!(tr.window_lower(), Some(Duration::from_secs(7)));
    assert_eq!(tr.window_upper(), Some(Duration::from_secs(8)));
}

/// An open tracking is over its expected lag from the first observation past lag +
/// tolerance that still holds the target: one event, the verdict kept while it stays open,
/// and at its close.
#[test]
fn a_tracking_is_over_its_expected_lag_while_still_open() {
    let mut e = Engine::new(EngineConfig::default());
    let p = dns_path(&mut e, 10, 2);
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(1), ip(2), ip(3)]),
        ChangeTime::received_at(t(-60_000)),
    );
    e.truth_synced(t(-60_000));
    remove_ip1_at_t0(&mut e);
    let mut over = Vec::new();
    for at in (1_000..=10_000).step_by(1_000) {
        e.observe(&obs(p, t(at), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
        for ev in e.tick(t(at + 100)) {
            if let EngineEvent::OverExpectedLag(tr) = ev {
                over.push((at, tr));
            }
        }
    }
    // 3 s held is still 2 s + 1 s; 4 s is past it.
    assert_eq!(over.len(), 1, "{over:?}");
    assert_eq!(over[0].0, 4_000);
    assert_eq!(over[0].1.verdict, Verdict::OverExpectedLag);
    assert!(over[0].1.converged_by.is_none());
    let open: Vec<_> = e.open_trackings().collect();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].verdict, Verdict::OverExpectedLag);
    assert!(open[0].verdict.is_finding());
    // It converges later: still over.
    e.observe(&obs(p, t(11_000), &[(ip(2), 1), (ip(3), 1)]));
    let closed = first_closed(&e.tick(t(15_000)));
    assert_eq!(closed.verdict, Verdict::OverExpectedLag);
}

/// What was published stays: a tracking over its lag keeps that verdict when its path
/// goes away or its target comes back, and is not marked during a truth gap.
#[test]
fn over_expected_lag_survives_the_path_and_the_target_and_waits_out_gaps() {
    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(32_000), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    assert!(
        e.tick(t(32_100))
            .iter()
            .any(|ev| matches!(ev, EngineEvent::OverExpectedLag(_)))
    );
    let closed = first_closed(&e.remove_path(p));
    assert_eq!(closed.verdict, Verdict::OverExpectedLag);

    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.observe(&obs(p, t(32_000), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    e.tick(t(32_100));
    let readded = e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(1), ip(2), ip(3)]),
        ChangeTime::received_at(t(33_000)),
    );
    assert_eq!(first_closed(&readded).verdict, Verdict::OverExpectedLag);

    let (mut e, p) = synced();
    remove_ip1_at_t0(&mut e);
    e.truth_gap(t(10_000));
    e.observe(&obs(p, t(32_000), &[(ip(1), 1), (ip(2), 1), (ip(3), 1)]));
    assert!(
        !e.tick(t(32_100))
            .iter()
            .any(|ev| matches!(ev, EngineEvent::OverExpectedLag(_)))
    );
}

fn conntrack_path(e: &mut Engine, node: &str) -> PathIdx {
    e.add_path_judging(
        PathInfo {
            id: format!("conntrack/{node}"),
            kind: FLOW_TABLE,
            description: format!("conntrack on {node}"),
            node: Some(node.into()),
        },
        Duration::from_secs(1),
        Judging::StaleOnly,
    )
}

fn opened(ev: &[EngineEvent]) -> Vec<(PathIdx, Target, Discrepancy)> {
    ev.iter()
        .filter_map(|e| match e {
            EngineEvent::Opened(t) => Some((t.path, t.target, t.kind)),
            _ => None,
        })
        .collect()
}

/// A stale-only path (a conntrack table) next to a datapath path with the same desired
/// set: a change opens the stale tracking on both but the missing one only on the
/// datapath; an observation holding a part of the set (or nothing) opens nothing; a held
/// removed target is stale with its window, judged like any other.
#[test]
fn a_stale_only_path_never_opens_missing_trackings() {
    let mut e = Engine::new(EngineConfig::default());
    let dp = datapath_path(&mut e, "node-1");
    let ct = conntrack_path(&mut e, "node-1");
    assert_eq!(e.path_judging(ct), Some(Judging::StaleOnly));
    assert_eq!(e.path_judging(dp), Some(Judging::StaleAndMissing));
    let a = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 1, 5)), 8080);
    let b = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 2, 6)), 8080);
    let c = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 2, 7)), 8080);
    for p in [dp, ct] {
        e.set_desired_on_path(p, &svc(), set(&[a, b]), ChangeTime::received_at(t(0)));
    }
    e.truth_synced(t(0));
    // Flows to one endpoint only, or to none: nothing to say on the conntrack path.
    assert!(e.observe(&dp_obs(ct, t(500), &[b])).is_empty());
    assert!(e.observe(&dp_obs(ct, t(600), &[])).is_empty());
    // a leaves, c joins at 1 s.
    let mut ev = Vec::new();
    for p in [dp, ct] {
        ev.extend(e.set_desired_on_path(
            p,
            &svc(),
            set(&[b, c]),
            ChangeTime::received_at(t(1_000)),
        ));
    }
    assert_eq!(
        opened(&ev),
        vec![
            (dp, a, Discrepancy::Stale),
            (dp, c, Discrepancy::Missing),
            (ct, a, Discrepancy::Stale)
        ]
    );
    // The conntrack path still holds a flow to a 3 s later, never one to c: stale only.
    let ev = e.observe(&dp_obs(ct, t(4_000), &[a, b]));
    assert!(opened(&ev).is_empty(), "{ev:?}");
    let ev = e.observe(&dp_obs(ct, t(5_000), &[b]));
    assert!(
        matches!(ev.as_slice(), [EngineEvent::Converging(t)] if t.target == a),
        "{ev:?}"
    );
    let closed = first_closed(&e.tick(t(8_000)));
    assert_eq!((closed.path, closed.target), (ct, a));
    assert_eq!(closed.window_lower(), Some(Duration::from_secs(3)));
    assert_eq!(closed.window_upper(), Some(Duration::from_secs(4)));
    assert_eq!(closed.verdict, Verdict::OverExpectedLag);
    assert!(
        e.open_trackings().all(|t| t.path == dp),
        "{:?}",
        e.open_trackings().collect::<Vec<_>>()
    );
    // A target that was never an endpoint is stale, dated by the observation.
    let x = Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 9, 9)), 8080);
    let ev = e.observe(&dp_obs(ct, t(9_000), &[x]));
    assert_eq!(opened(&ev), vec![(ct, x, Discrepancy::Stale)]);
    // c re-added after leaving: the stale tracking of the re-added target closes
    // unjudged, and still no missing one opens.
    let ev = e.set_desired_on_path(ct, &svc(), set(&[b]), ChangeTime::received_at(t(10_000)));
    assert_eq!(opened(&ev), vec![(ct, c, Discrepancy::Stale)]);
    let ev = e.set_desired_on_path(ct, &svc(), set(&[b, c]), ChangeTime::received_at(t(11_000)));
    assert!(opened(&ev).is_empty(), "{ev:?}");
    assert!(matches!(
        ev.as_slice(),
        [EngineEvent::Closed(t)] if t.target == c && t.verdict == Verdict::Unjudged(Unjudged::Readded)
    ));
}

/// A stale-only path registered after the truth synced (the conntrack table became
/// readable later) keeps no arrival times, however many targets its first sets hold;
/// departures are still dated, so a flow seen later is dated from the removal.
#[test]
fn a_stale_only_path_dates_departures_not_arrivals() {
    let mut e = Engine::new(EngineConfig::default());
    e.truth_synced(t(0));
    let ct = conntrack_path(&mut e, "node-1");
    let targets: Vec<Target> = (1..=200)
        .map(|i| Target::socket(IpAddr::V4(Ipv4Addr::new(10, 244, 3, i)), 80))
        .collect();
    let ev = e.set_desired_on_path(ct, &svc(), set(&targets), ChangeTime::received_at(t(1_000)));
    assert!(ev.is_empty(), "{ev:?}");
    let sid = e.service_ids[&svc()];
    assert!(e.path_desired[&(ct, sid)].arrived.is_empty());
    let ev = e.set_desired_on_path(
        ct,
        &svc(),
        set(&targets[1..]),
        ChangeTime::received_at(t(2_000)),
    );
    assert_eq!(opened(&ev), vec![(ct, targets[0], Discrepancy::Stale)]);
    assert!(e.path_desired[&(ct, sid)].arrived.is_empty());
    assert_eq!(e.path_desired[&(ct, sid)].departed.len(), 1);
    // Re-registering the same id keeps the index and the judging asked for.
    let again = conntrack_path(&mut e, "node-1");
    assert_eq!(again, ct);
    assert_eq!(e.path_judging(ct), Some(Judging::StaleOnly));
}

fn ip6(last: u16) -> Target {
    Target::ip(IpAddr::V6(std::net::Ipv6Addr::new(
        0xfd00, 0x10, 0x244, 1, 0, 0, 0, last,
    )))
}

fn open_of(e: &Engine) -> Vec<(Target, Discrepancy)> {
    e.open_trackings().map(|t| (t.target, t.kind)).collect()
}

/// A dual-stack Service is judged per family: an A answer says nothing about the IPv6
/// endpoints (not missing, not converged), an AAAA answer nothing about the IPv4 ones.
#[test]
fn each_family_is_judged_by_its_own_answers() {
    let mut e = Engine::new(EngineConfig::default());
    let p = dns_path(&mut e, 10, 30);
    let at = ChangeTime::received_at(t(-60_000));
    e.set_desired(ANSWERS, &svc(), set(&[ip(1), ip(2), ip6(1), ip6(2)]), at);
    e.truth_synced(t(-60_000));
    // Right answers of each family: nothing opens.
    e.observe_scoped(&obs(p, t(-5_000), &[(ip(1), 5), (ip(2), 5)]), &Scope::Ipv4);
    e.observe_scoped(
        &obs(p, t(-5_000), &[(ip6(1), 5), (ip6(2), 5)]),
        &Scope::Ipv6,
    );
    assert_eq!(open_of(&e), vec![]);
    // ip6(1) leaves; the AAAA answer keeps it: stale. The A answer neither converges it nor
    // opens anything.
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(1), ip(2), ip6(2)]),
        ChangeTime::received_at(t(0)),
    );
    e.observe_scoped(&obs(p, t(1_000), &[(ip6(1), 5), (ip6(2), 5)]), &Scope::Ipv6);
    assert_eq!(open_of(&e), vec![(ip6(1), Discrepancy::Stale)]);
    e.observe_scoped(&obs(p, t(2_000), &[(ip(1), 5), (ip(2), 5)]), &Scope::Ipv4);
    let open: Vec<Tracking> = e.open_trackings().cloned().collect();
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].converged_by, None,
        "an A answer converged an IPv6 target"
    );
    // The AAAA answer without it converges it.
    e.observe_scoped(&obs(p, t(3_000), &[(ip6(2), 5)]), &Scope::Ipv6);
    let open: Vec<Tracking> = e.open_trackings().cloned().collect();
    assert_eq!(open[0].converged_by, Some(t(3_000)));
    // An unscoped A-only answer would have called both IPv6 endpoints missing.
    let mut whole = Engine::new(EngineConfig::default());
    let q = dns_path(&mut whole, 10, 30);
    whole.set_desired(ANSWERS, &svc(), set(&[ip(1), ip6(1)]), at);
    whole.truth_synced(t(-60_000));
    whole.observe(&obs(q, t(0), &[(ip(1), 5)]));
    assert_eq!(open_of(&whole), vec![(ip6(1), Discrepancy::Missing)]);
}

/// An SRV answer of one named port speaks for that port's `ip:port` targets only.
#[test]
fn srv_answers_are_judged_by_their_port() {
    let mut e = Engine::new(EngineConfig::default());
    let p = dns_path(&mut e, 10, 30);
    let sock = |last: u8, port: u16| Target::socket(ip(last).ip, port);
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[
            ip(1),
            ip(2),
            sock(1, 8080),
            sock(2, 8080),
            sock(1, 9090),
            sock(2, 9090),
        ]),
        ChangeTime::received_at(t(-60_000)),
    );
    e.truth_synced(t(-60_000));
    e.set_desired(
        ANSWERS,
        &svc(),
        set(&[ip(2), sock(2, 8080), sock(2, 9090)]),
        ChangeTime::received_at(t(0)),
    );
    // The removal opens one tracking per form of the target; each converges only by the
    // answers of its own question.
    let converged = |e: &Engine| -> Vec<(Target, bool)> {
        e.open_trackings()
            .map(|t| (t.target, t.converged_by.is_some()))
            .collect()
    };
    assert_eq!(
        converged(&e),
        vec![
            (ip(1), false),
            (sock(1, 8080), false),
            (sock(1, 9090), false)
        ]
    );
    // The http port's SRV answer still names pod 1 on 8080; the other port's answer is
    // right and converges only 9090.
    let http = Scope::Ports(vec![8080]);
    e.observe_scoped(
        &obs(p, t(1_000), &[(sock(1, 8080), 5), (sock(2, 8080), 5)]),
        &http,
    );
    e.observe_scoped(
        &obs(p, t(2_000), &[(sock(2, 9090), 5)]),
        &Scope::Ports(vec![9090]),
    );
    assert_eq!(
        converged(&e),
        vec![
            (ip(1), false),
            (sock(1, 8080), false),
            (sock(1, 9090), true)
        ]
    );
    e.observe_scoped(&obs(p, t(3_000), &[(ip(2), 5)]), &Scope::Ipv4);
    e.observe_scoped(&obs(p, t(3_000), &[(sock(2, 8080), 5)]), &http);
    assert_eq!(
        converged(&e),
        vec![(ip(1), true), (sock(1, 8080), true), (sock(1, 9090), true)]
    );
}
