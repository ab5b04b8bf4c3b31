//! The cluster-wide DNS probe budget: each process's share of `--cluster-qps`, the few nodes that probe a Service's bursts, and an agent's effective probe rates.
//!
//! Pure: the node count and the flags come in, rates and decisions go out. The figures
//! behind the defaults (docs/AGENT.md, "Cluster-wide DNS budget"):
//!
//! - one CoreDNS instance on 2 vCPUs serves [`COREDNS_INSTANCE_QPS`] internal queries per
//!   second, CPU-bound (coredns/deployment, `kubernetes/Scaling_CoreDNS.md`), and kubeadm
//!   deploys [`COREDNS_DEFAULT_REPLICAS`] of them;
//! - [`DEFAULT_CLUSTER_QPS`] is [`CLUSTER_QPS_PERCENT`] % of that smallest default fleet:
//!   3 366 queries per second, the sum of every ghostip probe in the cluster;
//! - `watch` keeps [`WATCH_PERCENT`] % of it (bounded by its own `--qps`), the agents share
//!   the rest equally ([`ClusterBudget::agent_share`]);
//! - the check only a node can make (the kube-dns ClusterIP through its own datapath) runs
//!   on every node every `--dns-health-interval`; CoreDNS pod IPs are probed one at a time
//!   with what the share leaves ([`AgentRates`]);
//! - a headless Service's bursts after a change are probed by about [`BURST_SAMPLE`] nodes
//!   chosen by hashing the Service and the node name ([`in_burst_sample`]).

use std::time::Duration;

use ghostip_core::ServiceKey;

/// Internal-name queries per second one CoreDNS instance (default settings, 2 vCPUs)
/// served when CPU-bound (coredns/deployment, `kubernetes/Scaling_CoreDNS.md`).
pub const COREDNS_INSTANCE_QPS: u32 = 33_669;
/// CoreDNS replicas kubeadm deploys: the smallest fleet a cluster runs by default.
pub const COREDNS_DEFAULT_REPLICAS: u32 = 2;
/// The default `--cluster-qps`, in percent of [`COREDNS_DEFAULT_REPLICAS`] ×
/// [`COREDNS_INSTANCE_QPS`].
pub const CLUSTER_QPS_PERCENT: u32 = 5;
/// The default `--cluster-qps`: 5 % of what the two CoreDNS replicas kubeadm deploys serve
/// (2 × 33 669 × 5 / 100 = 3 366 queries per second).
pub const DEFAULT_CLUSTER_QPS: u32 =
    COREDNS_INSTANCE_QPS * COREDNS_DEFAULT_REPLICAS * CLUSTER_QPS_PERCENT / 100;
/// Percent of `--cluster-qps` kept for `watch` (its bursts and sweep cover every headless
/// Service from one place); the agents share the rest.
pub const WATCH_PERCENT: u32 = 10;
/// Expected number of nodes whose agents probe one headless Service's bursts.
pub const BURST_SAMPLE: u32 = 3;
/// The longest time from a node's datapath going stale to its agent flagging DNS through
/// the ClusterIP as failing.
pub const TIME_TO_FLAG_TARGET: Duration = Duration::from_secs(10);
/// Failing ClusterIP probes the health verdict needs in its window (20 % of 10,
/// `HealthConfig::default`).
pub const FAILURES_TO_FLAG: u32 = 2;

/// The cluster-wide budget, queries per second over every ghostip process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterBudget {
    /// `--cluster-qps`.
    pub cluster_qps: u32,
}

impl Default for ClusterBudget {
    fn default() -> Self {
        Self {
            cluster_qps: DEFAULT_CLUSTER_QPS,
        }
    }
}

impl ClusterBudget {
    /// The budget of `--cluster-qps`; `0` turns it off (each process keeps only its `--qps`).
    pub fn from_flag(cluster_qps: u32) -> Option<Self> {
        (cluster_qps > 0).then_some(Self { cluster_qps })
    }

    /// What `watch` keeps: [`WATCH_PERCENT`] % of the budget.
    pub fn watch_reserve(&self) -> f64 {
        f64::from(self.cluster_qps) * f64::from(WATCH_PERCENT) / 100.0
    }

    /// `watch`'s rate: its reserve, at most its own `--qps`.
    pub fn watch_share(&self, qps: u32) -> f64 {
        self.watch_reserve().min(f64::from(qps))
    }

    /// One agent's rate among `nodes` agents: the budget less `watch`'s reserve, split
    /// equally, at most the agent's own `--qps`. An unknown or zero node count counts as
    /// one node.
    pub fn agent_share(&self, nodes: u32, qps: u32) -> f64 {
        let agents = f64::from(self.cluster_qps) - self.watch_reserve();
        (agents / f64::from(nodes.max(1))).min(f64::from(qps))
    }
}

/// A 64-bit hash that every agent computes alike, whatever its build: FNV-1a over the
/// bytes, then the splitmix64 finalizer to spread FNV's low-entropy high bits.
fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The node's score for `service`: a hash of both, uniform over `u64`.
pub fn sample_score(service: &ServiceKey, node: &str) -> u64 {
    stable_hash(&[
        service.namespace.as_bytes(),
        service.name.as_bytes(),
        node.as_bytes(),
    ])
}

/// Whether `node` probes `service`'s bursts, among `nodes` nodes, `sample` of them
/// expected: its score falls under `sample / nodes` of the hash space (every node when
/// `nodes <= sample`).
///
/// Rendezvous hashing with a threshold in place of the top `sample`: each agent decides
/// from its own name and the node count, without the other nodes' names (which would cost
/// every agent a watch of every Node). A node's score never changes, so adding a node
/// moves about `sample / nodes` memberships (the new node's, and those the lower
/// threshold leaves out); the sample has `sample` nodes on average (Poisson: with 3, no
/// node at all for 5 % of the Services, which `watch` still probes).
pub fn in_burst_sample(service: &ServiceKey, node: &str, nodes: u32, sample: u32) -> bool {
    if nodes <= sample {
        return true;
    }
    let threshold = (u64::MAX / u64::from(nodes)).saturating_mul(u64::from(sample));
    sample_score(service, node) < threshold
}

/// The flags an agent's rates come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgentFlags {
    /// `--cluster-qps` (`None`: `0`, no cluster budget).
    pub cluster: Option<ClusterBudget>,
    /// `--qps`: this process's own ceiling.
    pub qps: u32,
    /// `--dns-health-interval`.
    pub health_interval: Duration,
    /// `--query-timeout`.
    pub query_timeout: Duration,
}

/// An agent's effective DNS rates, from its flags, the node count and its CoreDNS pods.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgentRates {
    /// Queries per second this agent may send in all (its budget's rate).
    pub share: f64,
    /// The ClusterIP probe's interval: `--dns-health-interval`, longer only when the share
    /// cannot pay for one probe per interval.
    pub cluster_ip_interval: Duration,
    /// One CoreDNS pod IP (in turn) every this many health rounds; `None`: only in the
    /// round after a failing ClusterIP probe. Without a cluster budget every pod IP is
    /// probed every round (`pods_per_round` is then the pod count).
    pub pod_every: Option<u32>,
    /// Pod IPs probed in a round that probes pods.
    pub pods_per_round: u32,
    /// Queries per second of the health check at rest.
    pub health_qps: f64,
    /// What the share leaves for bursts, queries per second.
    pub burst_qps: f64,
    /// Whether only a sample of nodes probes each Service's bursts.
    pub sampled_bursts: bool,
    /// How long a stale node takes to be flagged: [`FAILURES_TO_FLAG`] failing ClusterIP
    /// probes when one of the `dns_pods` CoreDNS backends is dead (a fraction `1/dns_pods`
    /// of the probes fail), plus one query timeout.
    pub time_to_flag: Duration,
    /// The ClusterIP check alone needs more than the share: the check wins (it is the
    /// agent's purpose) and the cluster total exceeds `--cluster-qps`.
    pub over_budget: bool,
}

impl AgentRates {
    /// The rates among `nodes` agents with `dns_pods` CoreDNS pods (at least 1).
    pub fn derive(flags: &AgentFlags, nodes: u32, dns_pods: u32) -> Self {
        let interval = flags.health_interval.max(Duration::from_millis(1));
        let round_qps = 1.0 / interval.as_secs_f64();
        let pods = dns_pods.max(1);
        let Some(cluster) = flags.cluster else {
            let share = f64::from(flags.qps);
            let health_qps = round_qps * f64::from(1 + pods);
            return Self {
                share,
                cluster_ip_interval: interval,
                pod_every: Some(1),
                pods_per_round: pods,
                health_qps,
                burst_qps: (share - health_qps).max(0.0),
                sampled_bursts: false,
                time_to_flag: time_to_flag(interval, pods, flags.query_timeout),
                over_budget: false,
            };
        };
        let share = cluster.agent_share(nodes, flags.qps);
        let over_budget = share < round_qps;
        let cluster_ip_interval = if over_budget && share > 0.0 {
            Duration::from_secs_f64(1.0 / share)
        } else {
            interval
        };
        let left = share - round_qps;
        let pod_every = if left >= round_qps {
            Some(1)
        } else if left > 0.0 {
            let every = (round_qps / left).ceil();
            // At most u32::MAX rounds: beyond, pods wait for a failing ClusterIP probe.
            (every < f64::from(u32::MAX)).then_some(every as u32)
        } else {
            None
        };
        let cip_qps = 1.0 / cluster_ip_interval.as_secs_f64();
        let health_qps = cip_qps + pod_every.map_or(0.0, |n| round_qps / f64::from(n));
        Self {
            share,
            cluster_ip_interval,
            pod_every,
            pods_per_round: 1,
            health_qps,
            burst_qps: (share - health_qps).max(0.0),
            sampled_bursts: true,
            time_to_flag: time_to_flag(cluster_ip_interval, pods, flags.query_timeout),
            over_budget,
        }
    }

    /// The rates while the node count is not known (the DaemonSet not read yet, or not
    /// readable): the ClusterIP every `--dns-health-interval`, a pod IP only after a failing
    /// ClusterIP probe, no burst. What 5 000 agents starting at once may send before they
    /// know they are 5 000.
    pub fn unknown_count(flags: &AgentFlags, dns_pods: u32) -> Self {
        let interval = flags.health_interval.max(Duration::from_millis(1));
        let cip_qps = 1.0 / interval.as_secs_f64();
        Self {
            share: cip_qps,
            cluster_ip_interval: interval,
            pod_every: None,
            pods_per_round: 1,
            health_qps: cip_qps,
            burst_qps: 0.0,
            sampled_bursts: true,
            time_to_flag: time_to_flag(interval, dns_pods, flags.query_timeout),
            over_budget: false,
        }
    }

    /// Which pod IPs (indices into the `pods` CoreDNS pods, in order) health round `round`
    /// probes; `cluster_ip_failed`: the last ClusterIP probe failed (the pods are then
    /// asked at once, so an outage of every CoreDNS pod is not read as this node's
    /// datapath).
    pub fn pods_in_round(&self, round: u64, pods: usize, cluster_ip_failed: bool) -> Vec<usize> {
        if pods == 0 {
            return Vec::new();
        }
        let due = match self.pod_every {
            Some(n) => round.is_multiple_of(u64::from(n.max(1))),
            None => false,
        };
        if !due && !cluster_ip_failed {
            return Vec::new();
        }
        let per = (self.pods_per_round as usize).clamp(1, pods);
        if per == pods {
            return (0..pods).collect();
        }
        let rounds_with_pods = match self.pod_every {
            Some(n) => round / u64::from(n.max(1)),
            None => round,
        };
        let first = usize::try_from(rounds_with_pods % pods as u64).unwrap_or(0);
        (0..per).map(|i| (first + i) % pods).collect()
    }
}

/// [`FAILURES_TO_FLAG`] failing probes at one in `dns_pods` failing, `interval` apart,
/// plus the timeout of the last one.
fn time_to_flag(interval: Duration, dns_pods: u32, timeout: Duration) -> Duration {
    interval * FAILURES_TO_FLAG * dns_pods.max(1) + timeout
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(i: usize) -> ServiceKey {
        ServiceKey::new("default", format!("svc-{i}"))
    }

    fn flags(cluster_qps: u32) -> AgentFlags {
        AgentFlags {
            cluster: ClusterBudget::from_flag(cluster_qps),
            qps: 100,
            health_interval: Duration::from_secs(2),
            query_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_default_is_five_percent_of_two_coredns_instances() {
        assert_eq!(DEFAULT_CLUSTER_QPS, 3366);
        assert_eq!(ClusterBudget::default().cluster_qps, 3366);
        assert_eq!(ClusterBudget::from_flag(0), None);
    }

    #[test]
    fn shares() {
        let b = ClusterBudget { cluster_qps: 3366 };
        assert!((b.watch_reserve() - 336.6).abs() < 1e-9);
        assert_eq!(b.watch_share(100), 100.0);
        assert!((b.watch_share(1000) - 336.6).abs() < 1e-9);
        // 3029.4 for the agents.
        assert!((b.agent_share(5000, 100) - 0.60588).abs() < 1e-9);
        assert!((b.agent_share(1000, 100) - 3.0294).abs() < 1e-9);
        assert!((b.agent_share(100, 100) - 30.294).abs() < 1e-9);
        // A small cluster: the agent's own --qps binds.
        assert_eq!(b.agent_share(3, 100), 100.0);
        // An unknown node count is one node.
        assert_eq!(b.agent_share(0, 5000), b.agent_share(1, 5000));
        // The shares add up to the budget.
        let total = b.watch_reserve() + 5000.0 * b.agent_share(5000, 100);
        assert!((total - 3366.0).abs() < 1e-6, "{total}");
    }

    #[test]
    fn rates_from_flags_on_a_three_node_lab() {
        // At rest: one ClusterIP probe and one pod IP per 2 s round: 1 query per second.
        let r = AgentRates::derive(&flags(DEFAULT_CLUSTER_QPS), 3, 2);
        assert_eq!(r.share, 100.0);
        assert_eq!(r.cluster_ip_interval, Duration::from_secs(2));
        assert_eq!((r.pod_every, r.pods_per_round), (Some(1), 1));
        assert_eq!(r.health_qps, 1.0);
        assert_eq!(r.burst_qps, 99.0);
        assert!(r.sampled_bursts && !r.over_budget);
        // 2 failures at one in 2 failing, 2 s apart, plus the 1 s timeout.
        assert_eq!(r.time_to_flag, Duration::from_secs(9));
        // Without a cluster budget: every path every round, as before (1.5/s).
        let r = AgentRates::derive(&flags(0), 3, 2);
        assert_eq!((r.pod_every, r.pods_per_round), (Some(1), 2));
        assert_eq!(r.health_qps, 1.5);
        assert_eq!(r.burst_qps, 98.5);
        assert!(!r.sampled_bursts);
    }

    #[test]
    fn rates_from_flags_at_five_thousand_nodes() {
        let r = AgentRates::derive(&flags(DEFAULT_CLUSTER_QPS), 5000, 2);
        // 0.60588/s: the ClusterIP every 2 s, a pod IP every ceil(0.5 / 0.10588) = 5 rounds.
        assert_eq!(r.cluster_ip_interval, Duration::from_secs(2));
        assert_eq!(r.pod_every, Some(5));
        assert!((r.health_qps - 0.6).abs() < 1e-9);
        assert!((r.burst_qps - 0.00588).abs() < 1e-9);
        assert!(!r.over_budget);
        assert!(r.time_to_flag <= TIME_TO_FLAG_TARGET);
        // A budget too small for the ClusterIP check: it runs as often as the share pays,
        // no pod IP but after a failure, and says it is over.
        let r = AgentRates::derive(&flags(1000), 5000, 2);
        assert!(r.over_budget);
        assert_eq!(r.pod_every, None);
        assert_eq!(r.cluster_ip_interval, Duration::from_secs_f64(1.0 / 0.18));
        assert!(r.time_to_flag > TIME_TO_FLAG_TARGET);
        // A longer --dns-health-interval lengthens the time to flag.
        let mut f = flags(DEFAULT_CLUSTER_QPS);
        f.health_interval = Duration::from_secs(3);
        let r = AgentRates::derive(&f, 5000, 2);
        assert_eq!(r.time_to_flag, Duration::from_secs(13));
    }

    #[test]
    fn pod_ips_in_turn() {
        let r = AgentRates::derive(&flags(DEFAULT_CLUSTER_QPS), 5000, 3);
        assert_eq!(r.pod_every, Some(5));
        let rounds: Vec<Vec<usize>> = (0..16).map(|i| r.pods_in_round(i, 3, false)).collect();
        let probed: Vec<(u64, Vec<usize>)> = rounds
            .into_iter()
            .enumerate()
            .filter(|(_, p)| !p.is_empty())
            .map(|(i, p)| (i as u64, p))
            .collect();
        assert_eq!(
            probed,
            vec![(0, vec![0]), (5, vec![1]), (10, vec![2]), (15, vec![0])]
        );
        // After a failing ClusterIP probe the round asks a pod IP at once.
        assert_eq!(r.pods_in_round(7, 3, true), vec![1]);
        let none = AgentRates::derive(&flags(0), 3, 2);
        assert_eq!(none.pods_in_round(3, 2, false), vec![0, 1]);
        assert!(r.pods_in_round(0, 0, true).is_empty());
    }

    #[test]
    fn before_the_node_count_is_known() {
        let r = AgentRates::unknown_count(&flags(DEFAULT_CLUSTER_QPS), 2);
        assert_eq!(r.health_qps, 0.5);
        assert_eq!((r.pod_every, r.burst_qps), (None, 0.0));
        assert!(r.pods_in_round(0, 2, false).is_empty());
        assert_eq!(r.pods_in_round(1, 2, true), vec![1]);
        assert_eq!(r.time_to_flag, Duration::from_secs(9));
    }

    #[test]
    fn the_burst_sample_has_about_the_sample_size() {
        let nodes: Vec<String> = (0..1000).map(|i| format!("node-{i}")).collect();
        let services = 2000;
        let mut total = 0usize;
        let mut empty = 0usize;
        for s in 0..services {
            let k = key(s);
            let n = nodes
                .iter()
                .filter(|n| in_burst_sample(&k, n, 1000, BURST_SAMPLE))
                .count();
            total += n;
            empty += usize::from(n == 0);
        }
        // 3 per Service on average (6000 expected), and e^-3 = 5 % without any node.
        assert!((5700..=6300).contains(&total), "{total}");
        assert!((60..=140).contains(&empty), "{empty}");
        // Every node when there are no more nodes than the sample.
        assert!(nodes[..3].iter().all(|n| in_burst_sample(&key(0), n, 3, 3)));
    }

    #[test]
    fn adding_a_node_moves_about_one_nth_of_the_sample() {
        let n = 100u32;
        let mut nodes: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
        let services = 1000;
        let sample = |nodes: &[String], count: u32| -> Vec<Vec<String>> {
            (0..services)
                .map(|s| {
                    nodes
                        .iter()
                        .filter(|x| in_burst_sample(&key(s), x, count, BURST_SAMPLE))
                        .cloned()
                        .collect()
                })
                .collect()
        };
        let before = sample(&nodes, n);
        nodes.push("node-new".into());
        let after = sample(&nodes, n + 1);
        let members: usize = before.iter().map(Vec::len).sum();
        let mut moved = 0usize;
        for (b, a) in before.iter().zip(&after) {
            moved += b.iter().filter(|x| !a.contains(x)).count();
            moved += a.iter().filter(|x| !b.contains(x)).count();
        }
        // About 3000 memberships; adding the 101st node moves about 2 × 3000 / 101 = 59 of
        // them (the new node's ~30 and ~30 that the lower threshold leaves out; 67 with
        // these names), where a hash modulo the node count would move nearly all. Bound:
        // 1.5 times that expectation, 3 / N of the memberships.
        assert!((2700..=3300).contains(&members), "{members}");
        assert!(
            moved * n as usize <= 3 * members,
            "{moved} of {members} moved"
        );
        assert!(moved > 0);
        // Nobody but the new node joins a sample.
        for (b, a) in before.iter().zip(&after) {
            assert!(a.iter().all(|x| b.contains(x) || x == "node-new"));
        }
    }

    #[test]
    fn the_hash_is_fixed() {
        // Agents of different builds must agree: the score is part of the protocol.
        assert_eq!(
            sample_score(&ServiceKey::new("default", "web"), "node-1"),
            sample_score(&ServiceKey::new("default", "web"), "node-1")
        );
        assert_ne!(stable_hash(&[b"ab", b"c"]), stable_hash(&[b"a", b"bc"]));
        assert_eq!(
            sample_score(&ServiceKey::new("default", "web"), "node-1"),
            18_032_943_848_388_777_884
        );
    }
}
