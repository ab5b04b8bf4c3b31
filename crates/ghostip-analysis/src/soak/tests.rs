#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::time::Duration;

use super::*;
use crate::soak::model::{Fault, GroundTruth, MetricSample, Rollout, SoakFinding, SoakGap};

fn t(hms: &str) -> Time {
    format!("2026-12-05T{hms}Z").parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn truth(faults: Vec<Fault>) -> GroundTruth {
    GroundTruth {
        seed: Some(7),
        started: t("10:00:00"),
        ended: Some(t("10:30:00")),
        nodes: vec!["node-1".into(), "node-2".into(), "node-3".into()],
        faults,
        rollouts: vec![Rollout {
            deployment: "default/web-h".into(),
            at: t("10:20:00"),
            removed_ips: vec![ip("10.244.3.9")],
        }],
    }
}

fn kube_proxy(start: &str, end: Option<&str>) -> Fault {
    Fault {
        id: "f3".into(),
        kind: "kube-proxy-stopped".into(),
        node: Some("node-2".into()),
        start: t(start),
        end: end.map(t),
        stale_ips: vec![ip("10.244.1.6")],
        stale_from: Some(t("10:04:31")),
        detectable: true,
        layer: Some("datapath".into()),
        cache: None,
    }
}

fn fault(id: &str, kind: &str, start: &str, end: &str) -> Fault {
    Fault {
        id: id.into(),
        kind: kind.into(),
        node: None,
        start: t(start),
        end: Some(t(end)),
        stale_ips: vec![],
        stale_from: None,
        detectable: false,
        layer: None,
        cache: None,
    }
}

fn finding(layer: &str, node: &str, target: &str, t0: &str, lag_ms: u64) -> SoakFinding {
    SoakFinding {
        ledger: format!("agent-{node}.db"),
        kind: "stale".into(),
        layer: layer.into(),
        path_id: format!("iptables/{node}"),
        node: Some(node.into()),
        service: "default/web-h".into(),
        target: ip(target),
        t0: t(t0),
        received: t(t0),
        converged_by: None,
        expected_lag: Some(Duration::from_millis(lag_ms)),
        window: None,
        verdict: "over expected lag".into(),
    }
}

fn input(truth: GroundTruth, findings: Vec<SoakFinding>) -> ScoreInput {
    ScoreInput {
        truth,
        findings,
        gaps: vec![],
        samples: vec![],
        stalled_logged: vec![],
    }
}

#[test]
fn a_stale_node_flagged_after_its_lag_is_detected_with_the_time_it_took() {
    let mut f = finding("datapath", "node-2", "10.244.1.6", "10:04:31", 2_000);
    f.received = t("10:04:31.4");
    f.converged_by = Some(t("10:05:41"));
    let s = score(&input(
        truth(vec![kube_proxy("10:04:10", Some("10:05:40"))]),
        vec![f],
    ));
    assert_eq!(s.faults[0].status, "detected");
    let d = s.faults[0].detection.as_ref().unwrap();
    assert_eq!(d.at, t("10:04:33"));
    assert_eq!(d.after_secs, 2.0);
    assert_eq!(d.ledger, "agent-node-2.db");
    assert_eq!((s.detected, s.scored), (1, 1));
    assert!(s.false_positives.is_empty());
    assert!(s.clean);
    assert!(
        s.headline
            .starts_with("faults detected 1/1, false positives 0, flagged in 2.0 s (max)"),
        "{}",
        s.headline
    );
}

#[test]
fn a_fault_no_finding_matches_is_missed() {
    // Right node and IP, wrong layer; right layer and IP, wrong node.
    let findings = vec![
        finding("dns", "node-2", "10.244.1.6", "10:04:31", 1_000),
        finding("datapath", "node-1", "10.244.1.6", "10:04:31", 1_000),
    ];
    let s = score(&input(
        truth(vec![kube_proxy("10:04:10", Some("10:05:40"))]),
        findings,
    ));
    assert_eq!(s.faults[0].status, "missed");
    assert_eq!((s.detected, s.scored), (0, 1));
    assert_eq!(s.false_positives.len(), 2);
    assert!(!s.clean);
}

#[test]
fn a_frozen_nodes_missing_endpoints_are_explained_but_do_not_detect_it() {
    // The node's datapath lacks the pod that joined (10.244.3.8) as it keeps the one that
    // left: explained by the fault, never a false positive, and not its detection; the same
    // finding on another node, or after the fault, is false.
    let mut missing = finding("datapath", "node-2", "10.244.3.8", "10:04:45", 2_000);
    missing.kind = "missing".into();
    missing.converged_by = Some(t("10:05:41"));
    let mut elsewhere = missing.clone();
    elsewhere.node = Some("node-1".into());
    elsewhere.ledger = "agent-node-1.db".into();
    let mut after = missing.clone();
    after.t0 = t("10:06:00");
    after.received = t("10:06:00");
    after.converged_by = Some(t("10:06:30"));
    let s = score(&input(
        truth(vec![kube_proxy("10:04:10", Some("10:05:40"))]),
        vec![missing.clone(), elsewhere, after],
    ));
    assert_eq!(s.faults[0].explained, 1);
    assert_eq!(s.faults[0].status, "missed");
    assert_eq!(s.false_positives.len(), 2, "{:#?}", s.false_positives);
    // With the stale one, it is detected by that one.
    let stale = finding("datapath", "node-2", "10.244.1.6", "10:04:31", 2_000);
    let s = score(&input(
        truth(vec![kube_proxy("10:04:10", Some("10:05:40"))]),
        vec![missing, stale],
    ));
    assert_eq!(s.faults[0].status, "detected");
    assert_eq!(s.faults[0].explained, 2);
    let d = s.faults[0].detection.as_ref().unwrap();
    assert_eq!(d.target, Some(ip("10.244.1.6")));
    assert!(s.clean);
}

#[test]
fn a_finding_flagged_only_after_the_fault_ended_is_late_and_not_detected() {
    // Lag of 80 s: flagged at 10:05:51, the fault ended at 10:05:40.
    let f = finding("datapath", "node-2", "10.244.1.6", "10:04:31", 80_000);
    let s = score(&input(
        truth(vec![kube_proxy("10:04:10", Some("10:05:40"))]),
        vec![f],
    ));
    assert_eq!(s.faults[0].status, "late");
    assert_eq!(s.faults[0].detection.as_ref().unwrap().at, t("10:05:51"));
    assert_eq!(s.detected, 0);
    assert!(s.false_positives.is_empty(), "explained, not false");
    assert!(!s.clean);
}

#[test]
fn a_dns_window_right_after_an_api_server_outage_is_its_aftermath() {
    // The outage ends at 10:12:00; CoreDNS's informer comes back late, so a rollout at
    // 10:12:40 is answered late: the outage's, within 90 s of its end. The same window at
    // 10:14:00, or a conntrack one at 10:12:40, is false.
    let gap = fault("f4", "apiserver-stopped", "10:10:00", "10:12:00");
    let findings = vec![
        finding("dns", "node-1", "10.244.2.2", "10:12:40", 2_000),
        finding("dns", "node-1", "10.244.2.3", "10:14:00", 2_000),
        finding("conntrack", "node-1", "10.244.2.4", "10:12:40", 2_000),
    ];
    let s = score(&input(truth(vec![gap]), findings));
    assert_eq!(s.faults[0].explained, 1);
    let fps: Vec<_> = s
        .false_positives
        .iter()
        .map(|f| f.finding.target.to_string())
        .collect();
    assert_eq!(fps, vec!["10.244.2.4", "10.244.2.3"]);
}

#[test]
fn a_finding_judged_during_an_api_server_outage_is_a_false_positive() {
    let gap = fault("f4", "apiserver-stopped", "10:10:00", "10:12:00");
    let f = finding("datapath", "node-1", "10.244.2.2", "10:10:30", 1_000);
    let mut inp = input(truth(vec![gap]), vec![f]);
    inp.gaps.push(SoakGap {
        ledger: "watch.db".into(),
        start: t("10:10:02.5"),
        end: Some(t("10:12:03")),
        reason: "watch error: connection refused".into(),
    });
    let s = score(&inp);
    assert_eq!(s.faults[0].status, "gap recorded");
    assert_eq!(s.faults[0].detection.as_ref().unwrap().after_secs, 2.5);
    assert!(!s.faults[0].scored);
    assert_eq!(s.false_positives.len(), 1);
    assert!(
        s.false_positives[0]
            .reason
            .contains("f4 (apiserver-stopped)"),
        "{}",
        s.false_positives[0].reason
    );
    assert_eq!(s.truth_gaps.len(), 1);
    assert!(!s.clean);
    // Without a gap recorded, the fault says so.
    let s = score(&input(
        truth(vec![fault(
            "f4",
            "apiserver-stopped",
            "10:10:00",
            "10:12:00",
        )]),
        vec![],
    ));
    assert_eq!(s.faults[0].status, "no gap recorded");
    assert!(s.clean, "an API server fault is not scored");
}

#[test]
fn an_unexplained_finding_is_a_false_positive_with_its_evidence() {
    let mut rolled = finding("datapath", "node-3", "10.244.3.9", "10:20:01", 1_000);
    rolled.ledger = "agent-node-3.db".into();
    let mut within = finding("datapath", "node-3", "10.244.3.8", "10:20:01", 1_000);
    within.verdict = "within expected lag".into();
    let mut unjudged = finding("dns", "node-1", "10.244.3.7", "10:20:01", 1_000);
    unjudged.verdict = "unjudged (truth gap)".into();
    let s = score(&input(truth(vec![]), vec![rolled, within, unjudged]));
    assert_eq!((s.findings, s.judged), (3, 1));
    assert_eq!(s.false_positives.len(), 1);
    let fp = &s.false_positives[0];
    assert_eq!(fp.flagged_at, t("10:20:02"));
    assert_eq!(fp.finding.ledger, "agent-node-3.db");
    assert_eq!(
        fp.reason,
        "no fault explains it (removed by rollout default/web-h at 2026-12-05T10:20:00Z)"
    );
    assert!(!s.clean);
}

#[test]
fn an_interrupted_soak_ends_at_its_last_record_and_open_faults_stay_open() {
    let mut tr = truth(vec![kube_proxy("10:04:10", None)]);
    tr.ended = None;
    let f = finding("datapath", "node-2", "10.244.1.6", "10:04:31", 3_000);
    let mut inp = input(tr, vec![f]);
    inp.samples.push(MetricSample {
        component_stalled: None,
        source: "watch".into(),
        at: t("10:06:15"),
        rss_bytes: Some(1e8),
        cpu_seconds: Some(1.0),
    });
    let s = score(&inp);
    assert_eq!(s.ended, None);
    assert_eq!(s.soak_end, t("10:06:15"));
    assert_eq!(s.faults[0].status, "detected");
    assert_eq!(s.faults[0].detection.as_ref().unwrap().after_secs, 3.0);
    assert!(s.clean);
}

#[test]
fn over_lag_dns_windows_under_a_longer_cache_are_listed_apart() {
    let mut c = fault("f5", "corefile-changed", "10:15:00", "10:25:00");
    c.cache = Some(30);
    let mut f = finding("dns", "node-1", "10.244.2.9", "10:16:00", 5_000);
    f.path_id = "dns-pod/10.244.0.3:53".into();
    f.window = Some(Duration::from_secs(25));
    let mut beyond = f.clone();
    beyond.window = Some(Duration::from_secs(45));
    let s = score(&input(truth(vec![c]), vec![f, beyond]));
    assert_eq!(s.lag_under_cache.len(), 1);
    assert_eq!(s.lag_under_cache[0].cache_secs, 30);
    // 45 s is beyond even the new promise: explained by the Corefile change, which is not
    // scored, so not false either.
    assert!(s.false_positives.is_empty());
    assert_eq!(s.faults[0].explained, 1);
    assert_eq!(s.faults[0].status, "context");
}

#[test]
fn an_unknown_fault_kind_is_context_and_explains_nothing() {
    let mut f = fault("f9", "disk-filled", "10:01:00", "10:02:00");
    f.detectable = true;
    f.node = Some("node-1".into());
    let s = score(&input(
        truth(vec![f]),
        vec![finding(
            "datapath",
            "node-1",
            "10.244.0.5",
            "10:01:10",
            1_000,
        )],
    ));
    assert_eq!(s.faults[0].status, "context");
    assert!(!s.faults[0].scored);
    assert_eq!(s.scored, 0);
    assert_eq!(s.false_positives.len(), 1);
}

fn sample(source: &str, at: &str, rss_mb: f64, cpu: f64) -> MetricSample {
    MetricSample {
        component_stalled: None,
        source: source.into(),
        at: t(at),
        rss_bytes: Some(rss_mb * 1e6),
        cpu_seconds: Some(cpu),
    }
}

/// An agent killed at minute 12 starts again small: its new life is judged from its own
/// minute 5, and its CPU counts both lives.
#[test]
fn a_restarted_process_is_judged_from_its_own_minute_5() {
    let samples = vec![
        sample("agent-node-2", "10:00:00", 17.0, 0.0),
        sample("agent-node-2", "10:05:00", 18.0, 1.0),
        sample("agent-node-2", "10:11:00", 18.3, 2.0),
        // Killed; the kubelet starts it again.
        sample("agent-node-2", "10:12:00", 15.0, 0.5),
        sample("agent-node-2", "10:17:00", 17.0, 1.5),
        sample("agent-node-2", "10:30:00", 17.5, 3.5),
    ];
    let mut inp = input(truth(vec![]), vec![]);
    inp.samples = samples;
    let s = score(&inp);
    let a = &s.processes[0];
    // First life: 18.0 -> 18.3 (+1.7 %); second: 17.0 -> 17.5 (+2.9 %), not 15 -> 17.5.
    assert_eq!(a.rss_level, Some(17e6));
    assert!(
        (a.rss_change_pct.unwrap() - 0.5 / 17.0 * 100.0).abs() < 1e-9,
        "{:?}",
        a.rss_change_pct
    );
    assert_eq!(a.rss_ok, Some(true));
    assert!(
        (a.cpu_seconds.unwrap() - 5.5).abs() < 1e-9,
        "{:?}",
        a.cpu_seconds
    );
}

#[test]
fn rss_is_judged_against_its_level_after_minute_5() {
    let samples = vec![
        sample("watch", "10:00:00", 50.0, 0.0),
        sample("watch", "10:05:00", 200.0, 3.0),
        sample("watch", "10:10:00", 204.0, 6.0),
        sample("watch", "10:30:00", 209.0, 18.0),
        sample("agent-node-1", "10:00:00", 40.0, 0.0),
        sample("agent-node-1", "10:05:00", 100.0, 1.0),
        sample("agent-node-1", "10:30:00", 106.0, 2.0),
        sample("agent-node-2", "10:01:00", 40.0, 0.0),
    ];
    let mut inp = input(truth(vec![]), vec![]);
    inp.samples = samples;
    let s = score(&inp);
    let by = |src: &str| s.processes.iter().find(|p| p.source == src).unwrap();
    let w = by("watch");
    assert_eq!(w.rss_level, Some(200e6));
    assert!((w.rss_change_pct.unwrap() - 4.5).abs() < 1e-9);
    assert_eq!(w.rss_ok, Some(true));
    assert_eq!(w.cpu_seconds, Some(18.0));
    assert!((w.cpu_mean_pct.unwrap() - 1.0).abs() < 1e-9);
    let a = by("agent-node-1");
    assert!((a.rss_change_pct.unwrap() - 6.0).abs() < 1e-9);
    assert_eq!(a.rss_ok, Some(false));
    assert_eq!(by("agent-node-2").rss_ok, None, "no scrape after minute 5");
    assert!(
        s.headline
            .ends_with("agent-node-1 RSS +6.0 % after minute 5 (worst of 2)"),
        "{}",
        s.headline
    );
    assert!(s.clean, "RSS does not change the exit code");
}

#[test]
fn the_chart_is_escaped_and_balanced() {
    let mut f = kube_proxy("10:04:10", Some("10:05:40"));
    f.id = "f<3>&".into();
    let mut inp = input(
        truth(vec![f]),
        vec![finding(
            "datapath",
            "node-2",
            "10.244.1.6",
            "10:04:31",
            2_000,
        )],
    );
    inp.samples = vec![
        sample("watch", "10:00:00", 50.0, 0.0),
        sample("watch", "10:10:00", 60.0, 1.0),
    ];
    let svg = crate::soak::svg::render(&score(&inp));
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("f&lt;3&gt;&amp; kube-proxy-stopped node-2 — detected"));
    assert!(svg.contains("<polyline"));
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    assert_eq!(
        svg.matches("<title>").count(),
        svg.matches("</title>").count()
    );
}

/// node-2's kube-proxy stopped 10:04:10–10:05:40, its stale backend flagged at 10:04:33.
fn stale_node_2() -> ScoreInput {
    input(
        truth(vec![kube_proxy("10:04:10", Some("10:05:40"))]),
        vec![finding(
            "datapath",
            "node-2",
            "10.244.1.6",
            "10:04:31",
            2_000,
        )],
    )
}

fn stalled_sample(source: &str, at: &str, stalled: bool) -> MetricSample {
    MetricSample {
        component_stalled: Some(stalled),
        ..sample(source, at, 20.0, 1.0)
    }
}

#[test]
fn component_stalled_is_timed_from_the_agents_log_and_false_on_a_healthy_node() {
    // node-2's kube-proxy stops 10:04:10–10:05:40; its stale backend is flagged at 10:04:33.
    let mut inp = stale_node_2();
    // Its agent logged component-stalled at 10:04:32.5; the scrapes saw it at 10:04:45 and,
    // kube-proxy restarting, still at 10:06:05 (within the slack); node-1 was read stalled
    // at 10:04:45 with no fault on it.
    inp.stalled_logged.push(StalledSample {
        source: "agent-node-2.log".into(),
        node: "node-2".into(),
        at: t("10:04:32.5"),
    });
    // A line of the agent's log from before the soak started says nothing of it.
    inp.stalled_logged.push(StalledSample {
        source: "agent-node-1.log".into(),
        node: "node-1".into(),
        at: t("09:58:00"),
    });
    inp.samples.extend([
        stalled_sample("agent-node-2", "10:04:30", false),
        stalled_sample("agent-node-2", "10:04:45", true),
        stalled_sample("agent-node-2", "10:06:05", true),
        stalled_sample("agent-node-1", "10:04:45", true),
        stalled_sample("agent-node-1", "10:05:00", false),
    ]);
    let s = score(&inp);
    let c = s.component_stalled.as_ref().unwrap();
    assert_eq!(c.scrapes, 5);
    assert_eq!(c.faults.len(), 1);
    let f = &c.faults[0];
    assert_eq!(f.first_seen, Some(t("10:04:32.5")));
    assert_eq!(f.after_secs, Some(1.5));
    assert_eq!(f.before_detection, Some(true));
    assert_eq!(c.unexplained.len(), 1);
    assert_eq!(c.unexplained[0].node, "node-1");
    assert_eq!(s.faults[0].status, "detected");
    assert!(!s.clean, "a healthy node called stalled is a false alarm");
    assert!(
        s.headline
            .ends_with("component-stalled in 1/1 kube-proxy faults, 1 on a healthy node"),
        "{}",
        s.headline
    );
    // Without the log line, the first scrape at 1 is all there is: after the detection.
    inp.stalled_logged.clear();
    inp.samples.retain(|x| x.source != "agent-node-1");
    let s = score(&inp);
    let f = &s.component_stalled.as_ref().unwrap().faults[0];
    assert_eq!(f.first_seen, Some(t("10:04:45")));
    assert_eq!(f.before_detection, Some(false));
    assert!(s.clean);
    // No gauge and no log line: nothing to say.
    let s = score(&input(
        truth(vec![kube_proxy("10:04:10", Some("10:05:40"))]),
        vec![],
    ));
    assert!(s.component_stalled.is_none());
}
