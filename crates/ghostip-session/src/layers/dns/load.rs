//! A simulation of the load ghostip puts on CoreDNS and the API server at cluster scale: DNS queries per second and watch traffic during a rollout, with and without the cluster budget.
//!
//! Pure: second by second, time passed in, nothing sent. The agents' rates come from
//! [`AgentRates::derive`] and the burst sample from [`in_burst_sample`], the functions
//! the agent itself runs; the rest of the model ([`LoadModel`]) is the defaults of the
//! flags and a few stated assumptions about the rollout. `ghostip simulate-load` prints
//! [`table`] (docs/AGENT.md, "Cluster-wide DNS budget").

use std::fmt::Write as _;
use std::time::Duration;

use ghostip_core::ServiceKey;

use super::budget::{AgentFlags, AgentRates, BURST_SAMPLE, ClusterBudget, in_burst_sample};

/// What the simulation assumes besides the node and pod counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadModel {
    /// CoreDNS pods (kubeadm's default 2): every process probes each and the ClusterIP.
    pub coredns_pods: u32,
    /// Pods per headless Service rolled out (the rollout's pods make `pods / this` Services).
    pub pods_per_service: u32,
    /// Names probed per Service and path in a burst round (A and one SRV name).
    pub names_per_service: u32,
    /// `--interval`: a burst round every interval.
    pub burst_interval: Duration,
    /// How long a Service's burst runs after its change (the DNS layer's 3 × the 5 s
    /// cache + 15 s).
    pub burst_for: Duration,
    /// How long the rollout takes; Services change one after the other, evenly spread.
    pub rollout_for: Duration,
    /// `watch --sweep`: every rolled-out Service's names on every path once per period.
    pub sweep_period: Duration,
    /// The agent's own sweep over its node's paths (300 s), without a cluster budget only
    /// (with one, the sweep is `watch`'s).
    pub agent_sweep_period: Duration,
    /// The agents' flags (`cluster` is set per row).
    pub agent: AgentFlags,
    /// `watch --qps`.
    pub watch_qps: u32,
    /// EndpointSlice updates per replaced pod (new pod added not ready, then ready; old
    /// pod terminating, then removed): each goes to every process (all watch every slice).
    pub slice_events_per_pod: u32,
    /// Pod updates per replaced pod (4 for the new one, 4 for the old): each goes to
    /// `watch` and to the agent of the pod's node.
    pub pod_events_per_pod: u32,
    /// Watch streams every process holds for the truth (EndpointSlices, Services, Pods,
    /// the two Corefile ConfigMaps).
    pub truth_watches: u32,
}

impl Default for LoadModel {
    fn default() -> Self {
        Self {
            coredns_pods: 2,
            pods_per_service: 10,
            names_per_service: 2,
            burst_interval: Duration::from_millis(250),
            burst_for: Duration::from_secs(30),
            rollout_for: Duration::from_secs(60),
            sweep_period: Duration::from_secs(30),
            agent_sweep_period: Duration::from_secs(300),
            agent: AgentFlags {
                cluster: None,
                qps: 100,
                health_interval: Duration::from_secs(2),
                query_timeout: Duration::from_secs(1),
            },
            watch_qps: 100,
            slice_events_per_pod: 4,
            pod_events_per_pod: 8,
            truth_watches: 5,
        }
    }
}

/// The load of one cluster size, with or without the budget.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadRow {
    /// Nodes (one agent each) and one `watch`.
    pub nodes: u32,
    /// Pods rolled out.
    pub pods: u32,
    /// `--cluster-qps`, `None` without the budget.
    pub cluster_qps: Option<u32>,
    /// DNS queries per second to CoreDNS at rest (health checks and the sweep).
    pub rest_qps: f64,
    /// One agent's queries per second at rest.
    pub rest_qps_per_agent: f64,
    /// The busiest second of the rollout, queries to CoreDNS.
    pub peak_qps: f64,
    /// Watch streams the API server holds for ghostip (one more per agent with the budget:
    /// its DaemonSet, for the node count).
    pub watch_streams: u64,
    /// Watch events per second the API server sends ghostip during the rollout.
    pub watch_events_per_s: f64,
    /// How long a stale node takes to be flagged ([`AgentRates::time_to_flag`]).
    pub time_to_flag: Duration,
}

impl LoadRow {
    /// Whether the busiest second stays within the budget (always, without one).
    pub fn within_budget(&self) -> bool {
        self.cluster_qps
            .is_none_or(|b| self.peak_qps <= f64::from(b) + 1e-6)
    }
}

/// The simulation of one cluster.
#[derive(Debug)]
pub struct LoadSim {
    model: LoadModel,
    nodes: u32,
    pods: u32,
    budget: Option<ClusterBudget>,
    rates: AgentRates,
    /// When each Service changes.
    changes: Vec<Duration>,
    /// Per agent, the indices of the Services whose bursts it probes; `None`: every one
    /// (no sample, every agent alike).
    samples: Option<Vec<Vec<usize>>>,
}

impl LoadSim {
    /// A cluster of `nodes` nodes rolling out `pods` pods, under `budget`.
    pub fn new(model: LoadModel, nodes: u32, pods: u32, budget: Option<ClusterBudget>) -> Self {
        let flags = AgentFlags {
            cluster: budget,
            ..model.agent
        };
        let rates = AgentRates::derive(&flags, nodes, model.coredns_pods);
        let services = pods.div_ceil(model.pods_per_service.max(1)) as usize;
        let changes = (0..services)
            .map(|i| model.rollout_for.mul_f64(i as f64 / services as f64))
            .collect();
        let samples = rates.sampled_bursts.then(|| {
            let keys: Vec<ServiceKey> = (0..services)
                .map(|i| ServiceKey::new("rollout", format!("svc-{i}")))
                .collect();
            (0..nodes)
                .map(|n| {
                    let node = format!("node-{n}");
                    (0..services)
                        .filter(|s| in_burst_sample(&keys[*s], &node, nodes, BURST_SAMPLE))
                        .collect()
                })
                .collect()
        });
        Self {
            model,
            nodes,
            pods,
            budget,
            rates,
            changes,
            samples,
        }
    }

    /// The agents' rates in this cluster.
    pub fn rates(&self) -> &AgentRates {
        &self.rates
    }

    fn bursting(&self, s: usize, t: Duration) -> bool {
        let at = self.changes[s];
        t >= at && t < at + self.model.burst_for
    }

    /// Queries per second one process wants for `services` Services bursting.
    fn burst_demand(&self, services: usize) -> f64 {
        let paths = f64::from(self.model.coredns_pods + 1);
        services as f64 * f64::from(self.model.names_per_service) * paths
            / self.model.burst_interval.as_secs_f64()
    }

    /// Queries per second of a sweep over every rolled-out Service's names and paths.
    fn sweep_demand(&self, period: Duration) -> f64 {
        let paths = f64::from(self.model.coredns_pods + 1);
        self.changes.len() as f64 * f64::from(self.model.names_per_service) * paths
            / period.as_secs_f64()
    }

    /// One agent's queries in the second starting at `t`, `services` of its Services
    /// bursting: its health rounds, then bursts and its sweep within what is left.
    fn agent_qps(&self, services: usize) -> f64 {
        let demand = self.burst_demand(services);
        let r = &self.rates;
        if r.sampled_bursts {
            r.health_qps + demand.min(r.burst_qps)
        } else {
            let sweep = self.sweep_demand(self.model.agent_sweep_period);
            (r.health_qps + demand + sweep).min(r.share)
        }
    }

    /// `watch`'s queries in the second starting at `t`, `services` Services bursting.
    fn watch_qps(&self, services: usize) -> f64 {
        let sweep = self.sweep_demand(self.model.sweep_period);
        let rate = match self.budget {
            Some(b) => b.watch_share(self.model.watch_qps),
            None => f64::from(self.model.watch_qps),
        };
        (self.burst_demand(services) + sweep).min(rate)
    }

    /// DNS queries to CoreDNS in the second starting at `t`.
    pub fn dns_qps_at(&self, t: Duration) -> f64 {
        let bursting = |list: &mut dyn Iterator<Item = usize>| -> usize {
            list.filter(|s| self.bursting(*s, t)).count()
        };
        let all = bursting(&mut (0..self.changes.len()));
        let agents = match &self.samples {
            None => f64::from(self.nodes) * self.agent_qps(all),
            Some(samples) => samples
                .iter()
                .map(|mine| self.agent_qps(bursting(&mut mine.iter().copied())))
                .sum(),
        };
        agents + self.watch_qps(all)
    }

    /// Watch events per second the API server sends ghostip in the second starting at `t`.
    pub fn watch_events_at(&self, t: Duration) -> f64 {
        if t >= self.model.rollout_for {
            return 0.0;
        }
        let per_s = f64::from(self.pods) / self.model.rollout_for.as_secs_f64();
        let slices = per_s * f64::from(self.model.slice_events_per_pod) * f64::from(self.nodes + 1);
        let pods = per_s * f64::from(self.model.pod_events_per_pod) * 2.0;
        slices + pods
    }

    /// Runs the rollout second by second until every burst ended, and one second at rest.
    pub fn run(&self) -> LoadRow {
        let end = self.model.rollout_for + self.model.burst_for;
        let mut peak_qps: f64 = 0.0;
        let mut peak_events: f64 = 0.0;
        let mut t = Duration::ZERO;
        while t < end {
            peak_qps = peak_qps.max(self.dns_qps_at(t));
            peak_events = peak_events.max(self.watch_events_at(t));
            t += Duration::from_secs(1);
        }
        let rest_qps = self.dns_qps_at(end);
        let per_process = u64::from(self.model.truth_watches);
        let daemonset = u64::from(self.budget.is_some());
        LoadRow {
            nodes: self.nodes,
            pods: self.pods,
            cluster_qps: self.budget.map(|b| b.cluster_qps),
            rest_qps,
            rest_qps_per_agent: self.agent_qps(0),
            peak_qps,
            watch_streams: u64::from(self.nodes) * (per_process + daemonset) + per_process,
            watch_events_per_s: peak_events,
            time_to_flag: self.rates.time_to_flag,
        }
    }
}

/// Simulates each node count with and without the budget of `cluster_qps`.
pub fn simulate(model: LoadModel, nodes: &[u32], pods: u32, cluster_qps: u32) -> Vec<LoadRow> {
    let mut rows = Vec::new();
    for n in nodes {
        for budget in [None, ClusterBudget::from_flag(cluster_qps)] {
            rows.push(LoadSim::new(model, *n, pods, budget).run());
        }
    }
    rows
}

/// The rows as a Markdown table.
pub fn table(rows: &[LoadRow]) -> String {
    let mut out = String::from(
        "| nodes | pods | --cluster-qps | DNS q/s at rest | per agent at rest | DNS q/s peak | within budget | watch streams | watch events/s | time to flag |\n\
         |---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n",
    );
    for r in rows {
        let budget = r.cluster_qps.map_or("off".to_string(), |b| b.to_string());
        let within = match r.cluster_qps {
            None => "n/a",
            Some(_) if r.within_budget() => "yes",
            Some(_) => "no",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {budget} | {:.1} | {:.2} | {:.1} | {within} | {} | {:.0} | {:.1} s |",
            r.nodes,
            r.pods,
            r.rest_qps,
            r.rest_qps_per_agent,
            r.peak_qps,
            r.watch_streams,
            r.watch_events_per_s,
            r.time_to_flag.as_secs_f64(),
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::budget::{DEFAULT_CLUSTER_QPS, TIME_TO_FLAG_TARGET};
    use super::*;

    #[test]
    fn a_small_case_exactly() {
        let rows = simulate(LoadModel::default(), &[3], 20, DEFAULT_CLUSTER_QPS);
        // 3 nodes, 2 Services of 10 pods changing at 0 s and 30 s: every node is in every
        // sample (3 <= 3). Without the budget: health 3 paths / 2 s = 1.5/s per agent, its
        // sweep 2 Services x 2 names x 3 paths / 300 s = 0.04/s; a burst is 2 names x 3
        // paths / 0.25 s = 24/s per Service and process; watch's sweep 12 / 30 s = 0.4/s.
        // Rest: 3 x 1.54 + 0.4 = 5.02; peak (one Service bursting): 3 x 25.54 + 24.4 =
        // 101.02. With it: health 1/s per agent (the ClusterIP and one pod IP per 2 s
        // round), no agent sweep: rest 3 x 1 + 0.4 = 3.4, peak 3 x 25 + 24.4 = 99.4.
        let t = table(&rows);
        assert_eq!(
            t,
            "| nodes | pods | --cluster-qps | DNS q/s at rest | per agent at rest | DNS q/s peak | within budget | watch streams | watch events/s | time to flag |\n\
             |---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n\
             | 3 | 20 | off | 5.0 | 1.54 | 101.0 | n/a | 20 | 11 | 9.0 s |\n\
             | 3 | 20 | 3366 | 3.4 | 1.00 | 99.4 | yes | 23 | 11 | 9.0 s |\n",
            "{t}"
        );
        // Watch events: 20 pods over 60 s, 4 slice updates to 4 processes and 8 pod
        // updates to 2: (20 / 60) × (16 + 16) = 10.67.
        assert!((rows[0].watch_events_per_s - 32.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn five_thousand_nodes_stay_within_the_budget_and_flag_in_time() {
        let model = LoadModel::default();
        let off = LoadSim::new(model, 5000, 1000, None).run();
        let on = LoadSim::new(model, 5000, 1000, Some(ClusterBudget::default())).run();
        // Without: 5000 x (1.5 health + 2.0 sweep of 100 Services) + watch's 20 sweep at
        // rest, and every agent at its 100/s in the rollout.
        assert!((off.rest_qps - 17_520.0).abs() < 1e-6, "{}", off.rest_qps);
        // With: 5000 x 0.6 health + 20.
        assert!((on.rest_qps - 3020.0).abs() < 1e-6, "{}", on.rest_qps);
        assert!((off.peak_qps - 500_100.0).abs() < 1e-6, "{}", off.peak_qps);
        assert!(on.within_budget(), "{on:?}");
        assert!(on.peak_qps <= f64::from(DEFAULT_CLUSTER_QPS));
        assert!(on.rest_qps < off.rest_qps / 2.0);
        assert!(on.time_to_flag <= TIME_TO_FLAG_TARGET);
        assert_eq!(on.watch_streams, off.watch_streams + 5000);
    }

    #[test]
    fn every_size_of_the_documented_table_is_within_budget() {
        for row in simulate(
            LoadModel::default(),
            &[100, 1000, 5000],
            1000,
            DEFAULT_CLUSTER_QPS,
        )
        .iter()
        .filter(|r| r.cluster_qps.is_some())
        {
            assert!(row.within_budget(), "{row:?}");
            assert!(row.time_to_flag <= TIME_TO_FLAG_TARGET, "{row:?}");
        }
    }

    #[test]
    fn the_documented_table_is_the_simulation() {
        // docs/AGENT.md, "Cluster-wide DNS budget": the output of
        // `ghostip simulate-load --nodes 100,1000,5000 --pods 1000`.
        let doc = include_str!("../../../../../docs/AGENT.md");
        let t = table(&simulate(
            LoadModel::default(),
            &[100, 1000, 5000],
            1000,
            DEFAULT_CLUSTER_QPS,
        ));
        assert!(doc.contains(&t), "docs/AGENT.md's table is not:\n{t}");
        assert!(doc.contains("ghostip simulate-load --nodes 100,1000,5000 --pods 1000\n"));
    }
}
