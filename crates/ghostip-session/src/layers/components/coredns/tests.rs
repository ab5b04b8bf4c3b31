//! CoreDNS's programming histogram from its own exposition text, with exact times: between
//! two scrapes, across a restart, over a range, every pod together.

use ghostip_core::truth::{AddressType, EndpointPort, EndpointRecord, SliceRecord};
use ghostip_core::{PodRef, Protocol};

use super::*;

/// CoreDNS's own test expectation of the histogram (tests/fixtures/coredns/README.md).
const REAL: &str =
    include_str!("../../../../tests/fixtures/coredns/dns_programming_metrics_test.txt");

/// CoreDNS's bucket bounds: `ExponentialBuckets(0.001, 2, 20)`.
const BOUNDS: [f64; 20] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384, 32.768, 65.536, 131.072, 262.144, 524.288,
];

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

/// CoreDNS's exposition of the histogram with `observed` (kind, bucket bound, count) in it,
/// line for line as it writes it (HELP, TYPE, each kind's buckets, `_sum`, `_count`).
fn exposition(observed: &[(&str, f64, u64)], sum: f64) -> String {
    let mut out = format!(
        "# HELP {DNS_PROGRAMMING} Histogram of the time (in seconds) it took to program a dns instance.\n# TYPE {DNS_PROGRAMMING} histogram\n"
    );
    let kinds: std::collections::BTreeSet<&str> = observed.iter().map(|(k, _, _)| *k).collect();
    for kind in kinds {
        let at = |le: f64| -> u64 {
            observed
                .iter()
                .filter(|(k, b, _)| *k == kind && *b <= le)
                .map(|(_, _, n)| n)
                .sum()
        };
        for le in BOUNDS {
            out += &format!(
                "{DNS_PROGRAMMING}_bucket{{service_kind=\"{kind}\",le=\"{le}\"}} {}\n",
                at(le)
            );
        }
        let total = at(f64::INFINITY);
        out +=
            &format!("{DNS_PROGRAMMING}_bucket{{service_kind=\"{kind}\",le=\"+Inf\"}} {total}\n");
        out += &format!("{DNS_PROGRAMMING}_sum{{service_kind=\"{kind}\"}} {sum}\n");
        out += &format!("{DNS_PROGRAMMING}_count{{service_kind=\"{kind}\"}} {total}\n");
    }
    out
}

fn said(observed: &[(&str, f64, u64)]) -> CoreDnsMetrics {
    CoreDnsMetrics::from_text(&exposition(observed, 1.0)).unwrap()
}

const H: &str = HEADLESS_WITH_SELECTOR;

#[test]
fn coredns_own_text_parses_per_service_kind() {
    let m = CoreDnsMetrics::from_text(REAL).unwrap();
    assert_eq!(m.kinds.keys().collect::<Vec<_>>(), [H]);
    let h = &m.kinds[H];
    assert_eq!(h.buckets.len(), 21);
    assert_eq!((h.count, h.sum), (2.0, 3.0));
    // One change programmed in (0.512, 1.024], one in (1.024, 2.048]: rank 1.98 is the second.
    assert_eq!(h.bucket_bound(0.99), Some(2.048));
    // The generator below writes exactly what CoreDNS wrote.
    assert_eq!(exposition(&[(H, 1.024, 1), (H, 2.048, 1)], 3.0), REAL);
    // Other metrics and an unlabelled series do not disturb it; bad text names its line.
    let mixed = format!("coredns_dns_requests_total{{server=\"dns://:53\"}} 7\n{REAL}");
    assert_eq!(CoreDnsMetrics::from_text(&mixed).unwrap(), m);
    let e = CoreDnsMetrics::from_text("coredns_build_info{version=\"1.11\" 1\n").unwrap_err();
    assert_eq!(e.line, 1);
    assert_eq!(
        CoreDnsMetrics::from_text("").unwrap(),
        CoreDnsMetrics::default()
    );
}

#[test]
fn the_p99_between_two_scrapes_is_of_what_happened_between_them() {
    let mut ring = ScrapeRing::default();
    // Before: 100 slow changes (in the 8.192 s bucket).
    ring.push(t(0), said(&[(H, 8.192, 100)]));
    // Then 200 fast ones (in the 16 ms bucket).
    ring.push(t(15), said(&[(H, 8.192, 100), (H, 0.016, 200)]));
    let (h, a, b) = ring.between(H, t(0), t(15)).unwrap();
    assert_eq!((a, b, h.count), (t(0), t(15), 200.0));
    assert_eq!(h.bucket_bound(0.99), Some(0.016));
    // Since CoreDNS started, the slow ones dominate the tail: the window matters.
    let (_, latest) = ring.scrapes.back().unwrap();
    assert_eq!(latest.kinds[H].bucket_bound(0.99), Some(8.192));
    // One scrape at or before the range and none after it: no difference to read.
    assert_eq!(ring.between(H, t(-60), t(0)), None);
    // A kind with no observation is an empty difference, not an error.
    let (none, _, _) = ring.between(CLUSTER_IP, t(0), t(15)).unwrap();
    assert_eq!(none.bucket_bound(0.99), None);
}

#[test]
fn a_counter_reset_starts_the_ring_anew() {
    let mut ring = ScrapeRing::default();
    ring.push(t(0), said(&[(H, 8.192, 100)]));
    ring.push(t(15), said(&[(H, 8.192, 150)]));
    // The pod restarted: its count is 2 now, below 150.
    ring.push(t(30), CoreDnsMetrics::from_text(REAL).unwrap());
    assert_eq!((ring.len(), ring.resets), (1, 1));
    ring.push(t(45), said(&[(H, 1.024, 1), (H, 2.048, 1), (H, 0.004, 3)]));
    // Only what followed the restart: 3 changes in the 4 ms bucket, none of the slow ones.
    let (h, a, b) = ring.between(H, t(0), t(45)).unwrap();
    assert_eq!((a, b, h.count), (t(30), t(45), 3.0));
    assert_eq!(h.bucket_bound(0.99), Some(0.004));
    // A kind that vanished (its series gone after a restart) is a reset too.
    ring.push(t(60), said(&[(CLUSTER_IP, 0.001, 1)]));
    assert_eq!((ring.len(), ring.resets), (1, 2));
    // A scrape not later than the last is ignored.
    ring.push(t(60), said(&[(CLUSTER_IP, 0.001, 5)]));
    ring.push(t(50), said(&[(CLUSTER_IP, 0.001, 5)]));
    assert_eq!(ring.len(), 1);
}

#[test]
fn a_range_is_read_between_the_scrapes_that_bracket_it_every_pod_summed() {
    let mut m = CoreDnsModel::new();
    // Pod a: fast, then slow, then fast again.
    let a = [
        (t(0), said(&[(H, 0.004, 1)])),
        (t(15), said(&[(H, 0.004, 11)])),
        (t(30), said(&[(H, 0.004, 11), (H, 32.768, 10)])),
        (t(45), said(&[(H, 0.004, 21), (H, 32.768, 10)])),
    ];
    for (at, s) in a {
        m.on_scrape("kube-system/coredns-a", at, Ok(s));
    }
    let word = |m: &CoreDnsModel, from, to| m.p99_over(H, t(from), t(to));
    // Inside (15, 30): the scrapes at 15 and 30, the slow ten.
    let w = word(&m, 20, 25).unwrap();
    assert_eq!(
        (w.p99_s, w.observations, w.from, w.to, w.pods),
        (Some(32.768), 10.0, t(15), t(30), 1)
    );
    assert_eq!(w.service_kind, H);
    // On scrape times exactly: those scrapes.
    assert_eq!(word(&m, 0, 15).unwrap().p99_s, Some(0.004));
    assert_eq!(word(&m, 15, 45).unwrap().observations, 20.0);
    // Past the last scrape ("now", not scraped yet): up to the last one.
    let w = word(&m, 31, 100).unwrap();
    assert_eq!((w.p99_s, w.from, w.to), (Some(0.004), t(30), t(45)));
    // Before the first scrape: from the first one.
    assert_eq!(word(&m, -100, 10).unwrap().from, t(0));
    // Wholly after the last scrape: nothing spans it.
    assert_eq!(word(&m, 50, 60), None);
    // A second pod programmed 990 changes within 1 ms meanwhile: together, the p99 is theirs.
    m.on_scrape("kube-system/coredns-b", t(14), Ok(said(&[(H, 0.001, 5)])));
    m.on_scrape("kube-system/coredns-b", t(31), Ok(said(&[(H, 0.001, 995)])));
    let w = word(&m, 20, 25).unwrap();
    assert_eq!(
        (w.p99_s, w.observations, w.from, w.to, w.pods),
        (Some(0.001), 1000.0, t(14), t(31), 2)
    );
    // A failed scrape is kept as the pod's error, its ring untouched.
    m.on_scrape(
        "kube-system/coredns-b",
        t(46),
        Err("connection refused".into()),
    );
    assert_eq!(word(&m, 20, 25).unwrap().pods, 2);
    let views = m.views();
    assert_eq!(views.len(), 2);
    assert_eq!(views[1].error.as_deref(), Some("connection refused"));
    assert_eq!(
        (views[1].last_scrape, views[1].last_good),
        (Some(t(46)), Some(t(31)))
    );
    // Pod a's last 5 minutes: every scrape, 30 changes, 10 slow: the p99 is slow.
    assert_eq!(views[0].p99_5m_s.get(H), Some(&32.768));
    assert_eq!(views[0].p99_5m_s.get(CLUSTER_IP), None, "nothing observed");
    // A pod gone from the DNS Service is forgotten.
    m.retain_pods(["kube-system/coredns-a"]);
    assert_eq!(m.pods().len(), 1);
}

#[test]
fn the_ring_is_bounded_in_time_and_count() {
    let mut ring = ScrapeRing::default();
    for i in 0..300 {
        ring.push(t(i * 15), said(&[(H, 0.004, i as u64)]));
    }
    // 30 minutes at 15 s and the one scrape at or before the horizon.
    assert_eq!(ring.len(), 121);
    let (_, first, last) = ring.between(H, t(0), t(1_000_000)).unwrap();
    assert_eq!(
        (first, last),
        (t(299 * 15).checked_sub(RING_SPAN).unwrap(), t(299 * 15))
    );
    let mut fast = ScrapeRing::default();
    for i in 0..1000 {
        fast.push(t(i), said(&[(H, 0.004, i as u64)]));
    }
    assert_eq!(fast.len(), MAX_SCRAPES);
}

fn dns_slice(name: &str, metrics_port: Option<u16>, endpoints: Vec<EndpointRecord>) -> SliceRecord {
    let mut ports = vec![EndpointPort {
        name: Some("dns".into()),
        port: 53,
        protocol: Protocol::Udp,
    }];
    if let Some(p) = metrics_port {
        ports.push(EndpointPort {
            name: Some("metrics".into()),
            port: p,
            protocol: Protocol::Tcp,
        });
    }
    SliceRecord {
        namespace: "kube-system".into(),
        name: name.into(),
        service: "kube-dns".into(),
        address_type: AddressType::IPv4,
        endpoints,
        ports,
        trigger_time: None,
    }
}

fn endpoint(ip: &str, pod: Option<&str>, ready: bool, terminating: bool) -> EndpointRecord {
    EndpointRecord {
        ip: ip.parse().unwrap(),
        ready,
        serving: ready,
        terminating,
        pod: pod.map(|p| PodRef {
            namespace: "kube-system".into(),
            name: p.into(),
            uid: format!("uid-{p}"),
        }),
        node: Some("node-1".into()),
        hostname: None,
    }
}

#[test]
fn coredns_pods_are_the_dns_service_endpoints_at_its_metrics_port() {
    let svc = ServiceKey::new("kube-system", "kube-dns");
    let mut truth = Truth::new();
    truth.apply_slice(
        dns_slice(
            "kube-dns-abc",
            Some(9253),
            vec![
                endpoint("10.244.0.2", Some("coredns-a"), true, false),
                endpoint("10.244.0.3", Some("coredns-gone"), false, true),
                endpoint("10.244.0.4", Some("coredns-starting"), false, false),
            ],
        ),
        t(0),
    );
    let mut v6 = dns_slice(
        "kube-dns-v6",
        None,
        vec![endpoint("fd00::5", None, true, false)],
    );
    v6.address_type = AddressType::IPv6;
    truth.apply_slice(v6, t(0));
    let targets = scrape_targets(&truth, &svc);
    assert_eq!(
        targets,
        [
            ScrapeTarget {
                pod: "fd00::5".into(),
                authority: "[fd00::5]:9153".into(),
            },
            ScrapeTarget {
                pod: "kube-system/coredns-a".into(),
                authority: "10.244.0.2:9253".into(),
            },
        ]
    );
    assert!(scrape_targets(&truth, &ServiceKey::new("kube-system", "other")).is_empty());
}

#[test]
fn beside_a_finding_the_kind_of_its_service_over_its_window() {
    let mut m = CoreDnsModel::new();
    m.on_scrape(
        "kube-system/coredns-a",
        t(0),
        Ok(said(&[(H, 0.004, 1), (CLUSTER_IP, 0.001, 1)])),
    );
    m.on_scrape(
        "kube-system/coredns-a",
        t(30),
        Ok(said(&[
            (H, 0.004, 1),
            (H, 4.096, 5),
            (CLUSTER_IP, 0.001, 9),
        ])),
    );
    let mut truth = Truth::new();
    let svc = |name: &str, headless: bool| ghostip_core::truth::ServiceRecord {
        key: ServiceKey::new("prod", name),
        cluster_ips: Vec::new(),
        headless,
        service_type: "ClusterIP".into(),
        publish_not_ready: false,
        internal_traffic_policy: Default::default(),
        external_traffic_policy: Default::default(),
        ports: Vec::new(),
        has_selector: true,
        labels: BTreeMap::new(),
    };
    truth.apply_service(svc("web", true), t(0));
    truth.apply_service(svc("api", false), t(0));
    let web = m
        .beside(&truth, &ServiceKey::new("prod", "web"), t(5), t(20))
        .unwrap();
    assert_eq!(
        (web.service_kind.as_str(), web.p99_s, web.observations),
        (H, Some(4.096), 5.0)
    );
    let api = m
        .beside(&truth, &ServiceKey::new("prod", "api"), t(5), t(20))
        .unwrap();
    assert_eq!(
        (api.service_kind.as_str(), api.p99_s, api.observations),
        (CLUSTER_IP, Some(0.001), 8.0)
    );
    // A Service gone from the truth: the headless kind, the one DNS findings are about.
    let gone = m
        .beside(&truth, &ServiceKey::new("prod", "gone"), t(5), t(20))
        .unwrap();
    assert_eq!(gone.service_kind, H);
    // An end before t0 (clock skew) reads as the instant t0.
    assert_eq!(
        m.beside(&truth, &ServiceKey::new("prod", "web"), t(5), t(1))
            .unwrap()
            .to,
        t(30)
    );
}

#[test]
fn a_service_is_filed_under_coredns_kind() {
    assert_eq!(service_kind(true, true), HEADLESS_WITH_SELECTOR);
    assert_eq!(service_kind(true, false), HEADLESS_WITHOUT_SELECTOR);
    assert_eq!(service_kind(false, true), CLUSTER_IP);
}
