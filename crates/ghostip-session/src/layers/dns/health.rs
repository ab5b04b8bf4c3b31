//! DNS path health from one node: whether the kube-dns ClusterIP answers while the CoreDNS pods do, judged over the last probes.
//!
//! Pure. The agent asks every DNS path of its node (each CoreDNS pod IP, the kube-dns
//! ClusterIP, which goes through this node's datapath) the same question at a low rate
//! and records each outcome here. [`DnsHealth::verdict`] turns the last
//! [`HealthConfig::window`] outcomes per path into a finding when the ClusterIP fails
//! clearly more often than the pod IPs: the signature of a node whose datapath sends part
//! of the DNS traffic to a dead CoreDNS backend ("pod IP answers, ClusterIP times out from
//! node-2").

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use ghostip_core::{PathKind, Time};
use serde::Serialize;

use super::{DNS_CLUSTER_IP, DNS_POD};

/// Thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HealthConfig {
    /// Outcomes kept per path.
    pub window: usize,
    /// Fewest outcomes on the ClusterIP path before it is judged.
    pub min_samples: usize,
    /// Failure ratio of the ClusterIP path from which it is failing.
    pub fail_ratio: f64,
    /// Success ratio every pod path must reach for the pods to count as answering.
    pub pods_ok_ratio: f64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            window: 10,
            min_samples: 5,
            fail_ratio: 0.2,
            pods_ok_ratio: 0.9,
        }
    }
}

/// Counts of one path over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathHealth {
    /// Path id (`dns-cluster-ip/10.96.0.10:53@node-2`).
    pub path: String,
    /// Kind of path.
    pub kind: PathKind,
    /// Outcomes in the window.
    pub probes: usize,
    /// Failed ones.
    pub failures: usize,
    /// Reason of the last failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// When the last outcome was recorded.
    pub last_at: Time,
}

/// The judgement over the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum HealthVerdict {
    /// Not enough probes yet, or no ClusterIP path.
    Unknown,
    /// The ClusterIP answers (or everything fails alike: not this node's datapath).
    Healthy,
    /// The ClusterIP fails while every CoreDNS pod answers: this node's datapath is wrong.
    ClusterIpFailing {
        /// The ClusterIP path.
        path: String,
        /// Failed / total probes of the ClusterIP in the window.
        failures: usize,
        /// Probes in the window.
        probes: usize,
        /// Pod paths that answered.
        pods_answering: usize,
    },
}

impl HealthVerdict {
    /// Whether this is a finding.
    pub fn is_finding(&self) -> bool {
        matches!(self, HealthVerdict::ClusterIpFailing { .. })
    }
}

/// The last outcomes of one path: when, and the failure reason if it failed.
type Outcomes = VecDeque<(Time, Option<String>)>;

/// The recorder.
#[derive(Clone, Debug, Default)]
pub struct DnsHealth {
    cfg: HealthConfig,
    paths: BTreeMap<String, (PathKind, Outcomes)>,
    /// The current paths, once known: outcomes of other paths are dropped.
    current: Option<BTreeSet<String>>,
}

impl DnsHealth {
    /// An empty recorder.
    pub fn new(cfg: HealthConfig) -> Self {
        Self {
            cfg,
            paths: BTreeMap::new(),
            current: None,
        }
    }

    /// Sets the current path ids (CoreDNS pods come and go): the outcomes of other paths
    /// are forgotten, and so are outcomes that arrive for them later.
    ///
    /// A probe to a deleted CoreDNS pod can be in flight when its path goes away; its
    /// timeout must not bring the path back, or the pods would count as failing forever
    /// and hide a failing ClusterIP.
    pub fn retain_paths(&mut self, ids: &[String]) {
        let current: BTreeSet<String> = ids.iter().cloned().collect();
        self.paths.retain(|k, _| current.contains(k));
        self.current = Some(current);
    }

    /// Records one probe: `failure` is `None` when it answered (any rcode but a failure).
    /// Outcomes of paths that are no longer current are dropped.
    pub fn record(&mut self, path: &str, kind: PathKind, at: Time, failure: Option<String>) {
        if self.current.as_ref().is_some_and(|c| !c.contains(path)) {
            return;
        }
        let (_, q) = self
            .paths
            .entry(path.to_string())
            .or_insert_with(|| (kind, VecDeque::new()));
        q.push_back((at, failure));
        while q.len() > self.cfg.window.max(1) {
            q.pop_front();
        }
    }

    /// Per-path counts.
    pub fn paths(&self) -> Vec<PathHealth> {
        self.paths
            .iter()
            .filter_map(|(id, (kind, q))| {
                Some(PathHealth {
                    path: id.clone(),
                    kind: *kind,
                    probes: q.len(),
                    failures: q.iter().filter(|(_, f)| f.is_some()).count(),
                    last_failure: q.iter().rev().find_map(|(_, f)| f.clone()),
                    last_at: q.back()?.0,
                })
            })
            .collect()
    }

    /// The verdict over the window.
    pub fn verdict(&self) -> HealthVerdict {
        let paths = self.paths();
        let Some(cip) = paths.iter().find(|p| p.kind == DNS_CLUSTER_IP) else {
            return HealthVerdict::Unknown;
        };
        if cip.probes < self.cfg.min_samples {
            return HealthVerdict::Unknown;
        }
        let ratio = |p: &PathHealth| p.failures as f64 / p.probes.max(1) as f64;
        let pods: Vec<&PathHealth> = paths
            .iter()
            .filter(|p| p.kind == DNS_POD && p.probes > 0)
            .collect();
        let pods_ok = !pods.is_empty()
            && pods
                .iter()
                .all(|p| 1.0 - ratio(p) >= self.cfg.pods_ok_ratio);
        if ratio(cip) >= self.cfg.fail_ratio && pods_ok {
            return HealthVerdict::ClusterIpFailing {
                path: cip.path.clone(),
                failures: cip.failures,
                probes: cip.probes,
                pods_answering: pods.len(),
            };
        }
        HealthVerdict::Healthy
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time::from_second(1_800_000_000 + s).unwrap()
    }

    const CIP: &str = "dns-cluster-ip/10.96.0.10:53@node-2";

    fn run(h: &mut DnsHealth, n: i64, cip_fails_every: i64, pod_fails: bool) {
        for i in 0..n {
            let f =
                (cip_fails_every > 0 && i % cip_fails_every == 0).then(|| "timeout".to_string());
            h.record(CIP, DNS_CLUSTER_IP, t(i), f);
            for pod in [
                "dns-pod/10.244.1.2:53@node-2",
                "dns-pod/10.244.2.3:53@node-2",
            ] {
                h.record(pod, DNS_POD, t(i), pod_fails.then(|| "timeout".into()));
            }
        }
    }

    #[test]
    fn cluster_ip_failing_while_pods_answer_is_a_finding() {
        let mut h = DnsHealth::new(HealthConfig::default());
        assert_eq!(h.verdict(), HealthVerdict::Unknown);
        run(&mut h, 10, 2, false);
        let v = h.verdict();
        assert!(v.is_finding(), "{v:?}");
        let HealthVerdict::ClusterIpFailing {
            failures,
            probes,
            pods_answering,
            ..
        } = v
        else {
            unreachable!()
        };
        assert_eq!((failures, probes, pods_answering), (5, 10, 2));
    }

    #[test]
    fn everything_failing_or_everything_answering_is_not() {
        let mut h = DnsHealth::new(HealthConfig::default());
        run(&mut h, 20, 1, true);
        assert_eq!(h.verdict(), HealthVerdict::Healthy);
        let mut h = DnsHealth::new(HealthConfig::default());
        run(&mut h, 20, 0, false);
        assert_eq!(h.verdict(), HealthVerdict::Healthy);
    }

    #[test]
    fn the_window_forgets_old_failures() {
        let mut h = DnsHealth::new(HealthConfig::default());
        run(&mut h, 20, 2, false);
        assert!(h.verdict().is_finding());
        for i in 20..30 {
            h.record(CIP, DNS_CLUSTER_IP, t(i), None);
        }
        assert_eq!(h.verdict(), HealthVerdict::Healthy);
        h.retain_paths(&[CIP.to_string()]);
        assert_eq!(h.paths().len(), 1);
    }

    #[test]
    fn a_late_timeout_of_a_removed_pod_path_does_not_hide_a_failing_cluster_ip() {
        let mut h = DnsHealth::new(HealthConfig::default());
        let live = "dns-pod/10.244.1.2:53@node-2";
        let dead = "dns-pod/10.244.2.3:53@node-2";
        h.retain_paths(&[CIP.to_string(), live.to_string(), dead.to_string()]);
        // The dead pod's path leaves the truth ...
        h.retain_paths(&[CIP.to_string(), live.to_string()]);
        // ... while a probe to it was in flight: its timeout arrives afterwards.
        h.record(dead, DNS_POD, t(0), Some("timeout".into()));
        for i in 1..=10 {
            let f = (i % 2 == 0).then(|| "timeout".to_string());
            h.record(CIP, DNS_CLUSTER_IP, t(i), f);
            h.record(live, DNS_POD, t(i), None);
        }
        assert!(h.verdict().is_finding(), "{:?}", h.verdict());
        assert!(h.paths().iter().all(|p| p.path != dead));
    }
}
