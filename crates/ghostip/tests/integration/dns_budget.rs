//! The prober's scheduling on paused tokio time: the global budget is never exceeded, bursts preempt the sweep, small budgets degrade fairly, the sweep is spread over its period, paths change at run time.
//!
//! The transport here is a recorder (no sockets: paused time and real IO do not mix);
//! the hickory transport itself is tested against real servers in `dns_query.rs` and
//! `dns_prober.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::dns_support;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dns_support::prober::Running;
use ghostip::clock::TokioClock;
use ghostip::layers::dns::prober::{DnsTransport, ProbeEvent, ProbeSource, ProberConfig};
use ghostip::layers::dns::query::{DnsAnswer, QueryError, Transport};
use ghostip_core::Clock;
use ghostip_core::{
    FailureReason, HeldTarget, ObservationResult, PathIdx, ServiceKey, Target, Time,
};
use ghostip_session::layers::dns::DNS_POD;
use ghostip_session::layers::dns::names::{ProbeName, QueryType, ServiceNames};
use ghostip_session::layers::dns::paths::DnsPath;
use ghostip_session::layers::dns::probe::{ProbeCommand, ProbePath};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::Name;
use tokio::time::Instant;

/// One query as the transport saw it.
#[derive(Clone, Debug)]
struct Sent {
    at: Instant,
    server: SocketAddr,
    name: Name,
}

/// Answers every query with one A record after `latency`; servers in `silent` time out.
#[derive(Clone, Default)]
struct Recorder {
    log: Arc<Mutex<Vec<Sent>>>,
    latency: Duration,
    silent: HashSet<SocketAddr>,
    timeout: Duration,
}

impl DnsTransport for Recorder {
    fn query(
        &self,
        server: SocketAddr,
        name: &Name,
        qtype: QueryType,
    ) -> impl Future<Output = Result<DnsAnswer, QueryError>> + Send {
        let name = name.clone();
        let this = self.clone();
        async move {
            let start = Instant::now();
            this.log.lock().unwrap().push(Sent {
                at: start,
                server,
                name: name.clone(),
            });
            if this.silent.contains(&server) {
                tokio::time::sleep(this.timeout).await;
                return Err(QueryError {
                    server,
                    name,
                    qtype,
                    transport: Transport::Udp,
                    latency: start.elapsed(),
                    reason: FailureReason::Timeout,
                    rcode: None,
                });
            }
            tokio::time::sleep(this.latency).await;
            Ok(DnsAnswer {
                server,
                name: name.clone(),
                qtype,
                rcode: ResponseCode::NoError,
                addrs: vec![ghostip::layers::dns::query::AddrRecord {
                    name,
                    ip: IpAddr::V4(Ipv4Addr::new(10, 244, 0, 1)),
                    ttl: 30,
                }],
                srv: Vec::new(),
                additional_addrs: Vec::new(),
                authoritative: true,
                transport: Transport::Udp,
                truncated: false,
                latency: start.elapsed(),
            })
        }
    }
}

impl Recorder {
    fn sent(&self) -> Vec<Sent> {
        self.log.lock().unwrap().clone()
    }
}

type Harness = Running;

impl Harness {
    /// The wall time `secs` from now on the harness's clock.
    fn in_secs(&self, secs: u64) -> Time {
        self.clock
            .now()
            .checked_add(Duration::from_secs(secs))
            .unwrap()
    }

    fn start(config: ProberConfig, transport: Recorder) -> Self {
        let clock = TokioClock::anchored(Instant::now(), "2026-11-30T05:00:00Z".parse().unwrap());
        Running::spawn(config, transport, clock)
    }

    async fn send(&self, cmd: ProbeCommand) {
        self.commands.send(cmd).await.unwrap();
        // Let the prober apply it before time moves on.
        tokio::task::yield_now().await;
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

fn rate(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn paths(n: u8) -> Vec<ProbePath> {
    (0..n)
        .map(|i| {
            let server = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 244, i, 10)), 53);
            ProbePath {
                idx: PathIdx(u32::from(i)),
                path: DnsPath::new(DNS_POD, server, Some("kube-system/coredns"), None),
            }
        })
        .collect()
}

fn svc(i: usize) -> ServiceKey {
    ServiceKey::new("prod", format!("svc-{i}"))
}

fn a_name(key: &ServiceKey) -> ProbeName {
    ProbeName {
        name: Name::from_ascii(key.dns_name("cluster.local")).unwrap(),
        qtype: QueryType::A,
    }
}

fn names(key: &ServiceKey, n: usize) -> Vec<ProbeName> {
    (0..n)
        .map(|i| ProbeName {
            name: Name::from_ascii(format!("n{i}.{}", key.dns_name("cluster.local"))).unwrap(),
            qtype: QueryType::A,
        })
        .collect()
}

fn sweep(services: usize, names_each: usize) -> Vec<ServiceNames> {
    (0..services)
        .map(|i| {
            let key = ServiceKey::new("prod", format!("sweep-{i}"));
            ServiceNames {
                names: names(&key, names_each),
                service: key,
            }
        })
        .collect()
}

fn burst(h: &Harness, key: &ServiceKey, n: usize, for_secs: u64) -> ProbeCommand {
    ProbeCommand::Burst {
        service: key.clone(),
        names: names(key, n),
        until: h.in_secs(for_secs),
    }
}

/// The largest number of queries in any half-open window `[t, t + width)` starting at a query.
fn max_in_window(sent: &[Sent], width: Duration) -> usize {
    let mut times: Vec<Instant> = sent.iter().map(|s| s.at).collect();
    times.sort();
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t < times[i] + width)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn min_gap(sent: &[Sent]) -> Duration {
    let mut times: Vec<Instant> = sent.iter().map(|s| s.at).collect();
    times.sort();
    times
        .windows(2)
        .map(|w| w[1] - w[0])
        .min()
        .unwrap_or(Duration::MAX)
}

fn is_burst_query(s: &Sent) -> bool {
    !s.name.to_ascii().contains("sweep-")
}

#[tokio::test(start_paused = true)]
async fn budget_is_never_exceeded_across_bursts_and_sweep() {
    let config = ProberConfig {
        queries_per_second: rate(50),
        sweep_period: Duration::from_secs(2),
        ..ProberConfig::default()
    };
    let recorder = Recorder {
        latency: Duration::from_millis(3),
        ..Recorder::default()
    };
    let h = Harness::start(config, recorder.clone());
    h.send(ProbeCommand::SetPaths(paths(8))).await;
    for i in 0..3 {
        h.send(burst(&h, &svc(i), 2, 60)).await; // 16 queries per 250 ms each: 64/s wanted
    }
    h.send(ProbeCommand::SetSweep(sweep(20, 2))).await; // 320 queries per 2 s: 160/s wanted

    tokio::time::sleep(Duration::from_secs(10)).await;
    let stats = h.stats.snapshot();
    h.stop().await;

    let sent = recorder.sent();
    assert!(
        max_in_window(&sent, Duration::from_secs(1)) <= 50,
        "max {} in 1 s",
        max_in_window(&sent, Duration::from_secs(1))
    );
    assert!(
        min_gap(&sent) >= Duration::from_millis(20),
        "min gap {:?}",
        min_gap(&sent)
    );
    assert!(sent.len() >= 495, "budget used: {} of 500", sent.len());
    assert_eq!(stats.total_queries(), sent.len() as u64);
    assert!(stats.skipped > 0, "192/s of bursts cannot fit 50/s");
    assert!(
        sent.iter().all(is_burst_query),
        "bursts leave nothing to the sweep"
    );
}

#[tokio::test(start_paused = true)]
async fn bursts_preempt_the_sweep() {
    let config = ProberConfig {
        queries_per_second: rate(100),
        sweep_period: Duration::from_secs(1),
        ..ProberConfig::default()
    };
    let recorder = Recorder::default();
    let h = Harness::start(config, recorder.clone());
    h.send(ProbeCommand::SetPaths(paths(4))).await;
    h.send(ProbeCommand::SetSweep(sweep(50, 5))).await; // 1000/s wanted: saturates the budget
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = recorder.sent().len();
    assert!(
        (195..=201).contains(&before),
        "sweep alone uses the budget: {before}"
    );

    let t0 = Instant::now();
    h.send(burst(&h, &svc(1), 2, 2)).await; // 8 queries per 250 ms, for 2 s
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = h.stats.snapshot();
    h.stop().await;

    let during: Vec<Sent> = recorder
        .sent()
        .into_iter()
        .filter(|s| s.at >= t0 && s.at < t0 + Duration::from_secs(2))
        .collect();
    let bursts: Vec<&Sent> = during.iter().filter(|s| is_burst_query(s)).collect();
    assert_eq!(bursts.len(), 64, "every round of 8 sent in full, 8 rounds");
    assert_eq!(stats.skipped, 0);
    assert!(
        bursts[0].at - t0 <= Duration::from_millis(10),
        "first burst query within one budget period"
    );
    // Each round goes out back to back at the budget's pace, before any sweep query.
    for round in 0..8u32 {
        let start = t0 + Duration::from_millis(250) * round;
        let in_round = bursts
            .iter()
            .filter(|s| s.at >= start && s.at < start + Duration::from_millis(90))
            .count();
        assert_eq!(in_round, 8, "round {round}");
    }
    let sweeps = during.len() - bursts.len();
    assert!(
        (130..=137).contains(&sweeps),
        "the sweep gets what the bursts leave: {sweeps}"
    );
    assert!(max_in_window(&recorder.sent(), Duration::from_secs(1)) <= 100);
    assert_eq!(stats.queries.get(&(DNS_POD, ProbeSource::Burst)), Some(&64));
}

#[tokio::test(start_paused = true)]
async fn small_budget_degrades_bursts_fairly() {
    let config = ProberConfig {
        queries_per_second: rate(10),
        ..ProberConfig::default()
    };
    let recorder = Recorder::default();
    let h = Harness::start(config, recorder.clone());
    h.send(ProbeCommand::SetPaths(paths(2))).await;
    h.send(burst(&h, &svc(1), 5, 60)).await; // 10 per 250 ms = 40/s each
    h.send(burst(&h, &svc(2), 5, 60)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stats = h.stats.snapshot();
    h.stop().await;

    let sent = recorder.sent();
    assert!(max_in_window(&sent, Duration::from_secs(1)) <= 10);
    let mut per_item: BTreeMap<(String, SocketAddr), usize> = BTreeMap::new();
    for s in &sent {
        *per_item.entry((s.name.to_ascii(), s.server)).or_default() += 1;
    }
    let first = sent
        .iter()
        .filter(|s| s.name.to_ascii().contains("svc-1."))
        .count();
    let second = sent.len() - first;
    assert!(
        first.abs_diff(second) <= 1,
        "round-robin between bursts: {first} vs {second}"
    );
    assert_eq!(
        per_item.len(),
        20,
        "every (name, path) of both bursts was probed"
    );
    assert!(
        per_item.values().all(|n| (2..=3).contains(n)),
        "{per_item:?}"
    );
    assert!(stats.skipped >= 300, "skipped {}", stats.skipped);
}

#[tokio::test(start_paused = true)]
async fn sweep_is_spread_over_its_period() {
    let config = ProberConfig {
        queries_per_second: rate(100),
        sweep_period: Duration::from_secs(3),
        ..ProberConfig::default()
    };
    let recorder = Recorder::default();
    let h = Harness::start(config, recorder.clone());
    h.send(ProbeCommand::SetPaths(paths(3))).await;
    h.send(ProbeCommand::SetSweep(sweep(5, 2))).await; // 30 queries per 3 s: one every 100 ms
    tokio::time::sleep(Duration::from_millis(5950)).await;
    h.stop().await;

    let sent = recorder.sent();
    assert_eq!(sent.len(), 60);
    assert!(
        min_gap(&sent) >= Duration::from_millis(100),
        "{:?}",
        min_gap(&sent)
    );
    let mut per_item: BTreeMap<(String, SocketAddr), usize> = BTreeMap::new();
    for s in &sent {
        *per_item.entry((s.name.to_ascii(), s.server)).or_default() += 1;
    }
    assert_eq!(per_item.len(), 30);
    assert!(per_item.values().all(|n| *n == 2));
}

#[tokio::test(start_paused = true)]
async fn bursts_end_at_their_deadline_or_when_stopped() {
    let config = ProberConfig {
        queries_per_second: rate(100),
        ..ProberConfig::default()
    };
    let recorder = Recorder::default();
    let h = Harness::start(config, recorder.clone());
    h.send(ProbeCommand::SetPaths(paths(1))).await;
    let t0 = Instant::now();
    h.send(burst(&h, &svc(1), 1, 1)).await; // deadline in 1 s
    h.send(burst(&h, &svc(2), 1, 60)).await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    h.send(ProbeCommand::StopBurst { service: svc(2) }).await;
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = h.stats.snapshot();
    h.stop().await;

    let sent = recorder.sent();
    let first: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.name.to_ascii().contains("svc-1."))
        .collect();
    assert_eq!(first.len(), 4, "rounds at 0, 250, 500, 750 ms");
    assert!(first.iter().all(|s| s.at < t0 + Duration::from_secs(1)));
    let second: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.name.to_ascii().contains("svc-2."))
        .collect();
    assert_eq!(second.len(), 7, "rounds at 0 … 1500 ms");
    assert!(second.iter().all(|s| s.at <= stopped));
    assert_eq!(stats.active_bursts, 0);
}

#[tokio::test(start_paused = true)]
async fn paths_change_at_run_time() {
    let config = ProberConfig {
        queries_per_second: rate(100),
        ..ProberConfig::default()
    };
    let recorder = Recorder::default();
    let h = Harness::start(config, recorder.clone());
    let all = paths(4);
    h.send(ProbeCommand::SetPaths(all[..2].to_vec())).await;
    h.send(burst(&h, &svc(1), 1, 60)).await;
    tokio::time::sleep(Duration::from_millis(990)).await;
    let switched = Instant::now();
    h.send(ProbeCommand::SetPaths(all[1..].to_vec())).await; // path 0 gone, 2 and 3 new
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.stop().await;

    let sent = recorder.sent();
    let servers_before: HashSet<SocketAddr> = sent
        .iter()
        .filter(|s| s.at < switched)
        .map(|s| s.server)
        .collect();
    let servers_after: HashSet<SocketAddr> = sent
        .iter()
        .filter(|s| s.at >= switched)
        .map(|s| s.server)
        .collect();
    let addr = |p: &ProbePath| p.path.server;
    assert_eq!(servers_before, all[..2].iter().map(addr).collect());
    assert_eq!(servers_after, all[1..].iter().map(addr).collect());
    assert_eq!(
        sent.iter().filter(|s| s.at >= switched).count(),
        12,
        "4 rounds × 3 paths"
    );
}

#[tokio::test(start_paused = true)]
async fn observations_carry_path_index_answer_time_and_failures() {
    let config = ProberConfig {
        queries_per_second: rate(100),
        ..ProberConfig::default()
    };
    let all = paths(2);
    let mut silent = HashSet::new();
    silent.insert(all[1].path.server);
    let recorder = Recorder {
        latency: Duration::from_millis(7),
        silent,
        timeout: Duration::from_secs(1),
        ..Recorder::default()
    };
    let h = Harness::start(config, recorder.clone());
    h.send(ProbeCommand::SetPaths(all.clone())).await;
    let key = svc(1);
    h.send(ProbeCommand::Burst {
        service: key.clone(),
        names: vec![a_name(&key)],
        until: h.in_secs(60),
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let stats = h.stats.snapshot();
    let events = h.events.lock().unwrap().clone();
    let anchor = h.clock;
    h.stop().await;

    let ok: Vec<&ProbeEvent> = events
        .iter()
        .filter(|e| e.observation.path == PathIdx(0))
        .collect();
    let failed: Vec<&ProbeEvent> = events
        .iter()
        .filter(|e| e.observation.path == PathIdx(1))
        .collect();
    assert_eq!(
        ok.len(),
        9,
        "a silent path does not stall the others: rounds at 0 … 2000 ms"
    );
    assert_eq!(
        failed.len(),
        5,
        "timeouts after 1 s: rounds at 0 … 1000 ms have failed"
    );
    let first = ok[0];
    assert_eq!(first.observation.service, key);
    assert_eq!(first.path_id, "dns-pod/10.244.0.10:53");
    assert_eq!(first.source, ProbeSource::Burst);
    assert_eq!(first.observation.latency, Some(Duration::from_millis(7)));
    let expected_at: Time = "2026-11-30T05:00:00.007Z".parse().unwrap();
    assert_eq!(
        first.observation.at, expected_at,
        "answer arrival on the injected clock ({:?})",
        anchor
    );
    assert_eq!(
        first.observation.result,
        ObservationResult::Held(vec![HeldTarget {
            target: Target::ip(IpAddr::V4(Ipv4Addr::new(10, 244, 0, 1))),
            ttl: Some(30),
            last_used: None,
        }])
    );
    assert!(
        failed
            .iter()
            .all(|e| e.observation.result == ObservationResult::Failed(FailureReason::Timeout))
    );
    assert_eq!(stats.errors.get(&(DNS_POD, "timeout")), Some(&5));
    assert_eq!(
        stats.in_flight, 4,
        "queries to the silent path sent at 1250 … 2000 ms still outstanding"
    );
}
