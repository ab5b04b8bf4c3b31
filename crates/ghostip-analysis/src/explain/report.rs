//! The explanation of a set of logs: failures classified (joined when a history is given),
//! aggregated per target, class, Service and rollout window, with one sentence per window.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use ghostip_core::Time;
use ghostip_logs::{Aggregator, Class, ConnFailure, Kind, Report, ScanStats, classify};
use serde::Serialize;

use super::history::{FlowWindow, HeldWindow, HistoryError, HistorySource};
use super::join::{Joiner, Removal, TargetFacts};
use super::windows::{RolloutWindow, rollout_windows};

/// Keeps failures inside `[since, until)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeFilter {
    /// Inclusive start.
    pub since: Option<Time>,
    /// Exclusive end.
    pub until: Option<Time>,
}

impl TimeFilter {
    fn active(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }

    /// `None`: the failure has no time and a filter is set.
    fn keeps(&self, t: Option<Time>) -> Option<bool> {
        if !self.active() {
            return Some(true);
        }
        let t = t?;
        Some(self.since.is_none_or(|s| t >= s) && self.until.is_none_or(|u| t < u))
    }
}

/// A rollout window with the errors aimed at its removed pods, and the resets without a peer
/// address its clients logged while it was under way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WindowSummary {
    /// The window.
    #[serde(flatten)]
    pub window: RolloutWindow,
    /// Errors attributed to it: `aimed_errors + peerless_resets`.
    pub errors: u64,
    /// Errors aimed at IPs of its pods.
    pub aimed_errors: u64,
    /// Resets that name no peer address (Java's `SocketException: Connection reset`), logged
    /// while the rollout was under way by a client (an input) whose other errors aimed at its
    /// pods.
    pub peerless_resets: u64,
    /// Per kind.
    pub by_kind: BTreeMap<Kind, u64>,
    /// Per class.
    pub by_class: BTreeMap<Class, u64>,
    /// First error.
    pub first_error: Option<Time>,
    /// Last error.
    pub last_error: Option<Time>,
    /// "47 errors = 31 refused + 16 reset, between … and … UTC (72 s), all aimed at IPs of
    /// the 3 pods removed by the 15:42 rollout of prod/deploy/x"; with resets that name no
    /// peer: "…: 31 aimed at IPs of the 3 pods removed by the 15:42 rollout of prod/deploy/x,
    /// 16 resets with no peer address during that rollout's window".
    pub sentence: String,
}

/// An input that could not be read to its end: the report holds what was read before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReadError {
    /// The input.
    pub input: String,
    /// Bytes of log text read before the error (for gzip, decompressed bytes).
    pub offset: u64,
    /// For gzip: bytes of the compressed file read before the error.
    pub compressed_offset: Option<u64>,
    /// What failed.
    pub error: String,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.input, self.offset)?;
        if let Some(c) = self.compressed_offset {
            write!(f, " of the decompressed text (byte {c} of the gzip file)")?;
        }
        write!(f, ": {}", self.error)
    }
}

/// What the join learned about one target IP (at its first failure).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TargetSummary {
    /// The IP.
    pub ip: IpAddr,
    /// Failures aimed at it.
    pub errors: u64,
    /// Whether the history knew the IP.
    pub known: bool,
    /// Time of its first failure.
    pub first_error: Option<Time>,
    /// Owner at that time (or the last one before it, `gone`).
    pub owner_at_first_error: Option<TargetFacts>,
    /// Owner now.
    pub owner_now: Option<TargetFacts>,
    /// What the node agents' conntrack reads saw of flows to it after it left (a ledger kept
    /// by `ghostip agent`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_flows: Option<AgentFlows>,
    /// The clients whose own copy (a gRPC balancer, read through channelz) held the IP after
    /// it left (a ledger kept by `ghostip watch`), with the failures in each window.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldSummary>,
}

/// One client-side window over a removed endpoint, joined with the failures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeldSummary {
    /// The window, as the ledger has it.
    #[serde(flatten)]
    pub window: HeldWindow,
    /// The client pod (`<namespace>/<pod>`).
    pub holder: String,
    /// Failures aimed at the endpoint within the window.
    pub failures_within: u64,
    /// The first of them.
    pub first_failure: Option<Time>,
    /// The last of them.
    pub last_failure: Option<Time>,
}

impl HeldSummary {
    fn of(w: &HeldWindow) -> Self {
        Self {
            holder: w.holder(),
            window: w.clone(),
            failures_within: 0,
            first_failure: None,
            last_failure: None,
        }
    }

    /// "the gRPC balancer of grpcdemo/grpcclient (channelz) held 10.244.2.7:50051 for 31.2 s
    /// after it left; 412 of these failures fall within it". A log does not say which client
    /// wrote it: every client's window over the address is listed.
    pub fn sentence(&self) -> String {
        let held = match self.window.until {
            Some(u) => format!(
                "for {:.1} s after it left",
                u.duration_since(self.window.since).as_secs_f64().max(0.0)
            ),
            None => "after it left, still when the ledger was read".to_owned(),
        };
        format!(
            "the gRPC balancer of {} ({}) held {} {held}; {} of these failures fall within it",
            self.holder, self.window.layer, self.window.target, self.failures_within
        )
    }
}

/// Flows to a removed endpoint that a node's agent saw outlive it, joined with the failures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentFlows {
    /// Failures aimed at the IP while such flows were alive (after it left, before the agent
    /// saw them gone).
    pub failures_on_flows: u64,
    /// Of those, resets (a pooled connection the exiting pod closed).
    pub resets_on_flows: u64,
    /// The agents' paths that saw them (`conntrack/node-1`).
    pub paths: BTreeSet<String>,
    /// The pods that held the IP.
    pub former_pods: BTreeSet<String>,
    /// How long the flows outlived the endpoint, from its departure to when the client last
    /// held or tried them (the finding's `last_seen`):
    /// the shortest and longest, seconds (windows still open when the ledger was read are
    /// left out).
    pub outlived_s: Option<(f64, f64)>,
}

impl AgentFlows {
    fn of(flows: &[FlowWindow]) -> Option<Self> {
        if flows.is_empty() {
            return None;
        }
        let spans: Vec<f64> = flows
            .iter()
            .filter_map(|w| {
                w.last_used
                    .or(w.until)
                    .map(|u| u.duration_since(w.since).as_secs_f64().max(0.0))
            })
            .collect();
        let outlived_s = spans
            .iter()
            .copied()
            .reduce(f64::min)
            .zip(spans.iter().copied().reduce(f64::max));
        Some(Self {
            failures_on_flows: 0,
            resets_on_flows: 0,
            paths: flows.iter().map(|w| w.path.clone()).collect(),
            former_pods: flows.iter().filter_map(|w| w.former_pod.clone()).collect(),
            outlived_s,
        })
    }

    /// "42 resets, all on flows the agent saw outlive pod demo/web-6tbbt by 18–61 s".
    pub fn sentence(&self, errors: u64) -> String {
        let pods: Vec<&str> = self.former_pods.iter().map(String::as_str).collect();
        let pods = match pods.as_slice() {
            [] => "the endpoint".to_owned(),
            [one] => format!("pod {one}"),
            many => format!("pods {}", many.join(", ")),
        };
        let by = match self.outlived_s {
            Some((lo, hi)) if (hi - lo) < 0.5 => format!(" by {hi:.0} s"),
            Some((lo, hi)) => format!(" by {lo:.0}–{hi:.0} s"),
            None => String::new(),
        };
        let share = if self.failures_on_flows == errors {
            "all".to_owned()
        } else {
            format!("{} of them", self.failures_on_flows)
        };
        let nodes: Vec<&str> = self
            .paths
            .iter()
            .map(|p| p.strip_prefix("conntrack/").unwrap_or(p))
            .collect();
        format!(
            "{errors} failure(s) ({} resets), {share} on flows the agent on {} saw outlive {pods}{by}",
            self.resets_on_flows,
            nodes.join(", ")
        )
    }
}

/// Where the history came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryInfo {
    /// Description (`ledger PATH`, `truth history FILE (N pods)`).
    pub source: String,
    /// Whether Services were known (the ledger's memberships).
    pub services: bool,
    /// Distinct target IPs looked up (one lookup each).
    pub distinct_ips: usize,
}

/// The result of `ghostip explain`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    /// The inputs read.
    pub inputs: Vec<String>,
    /// The history joined, if any.
    pub history: Option<HistoryInfo>,
    /// One line: counts per kind and the time span.
    pub headline: String,
    /// Rollout windows behind the errors, with their sentences.
    pub windows: Vec<WindowSummary>,
    /// Groups per target, class, Service and window.
    pub report: Report,
    /// Per target IP: who owned it at its first failure and now.
    pub targets: Vec<TargetSummary>,
    /// Whether any failure has a staleness class (exit 1).
    pub staleness: bool,
    /// Scanner counts.
    pub stats: ScanStats,
    /// Failures left out by `--since` / `--until`.
    pub filtered_out: u64,
    /// Failures without a time left out because `--since` / `--until` was given.
    pub undated_filtered_out: u64,
    /// Warnings for the user (year/zone assumed, binary lines, unknown shapes, …).
    pub warnings: Vec<String>,
    /// What a ledger would add, when there was none.
    pub note: Option<String>,
    /// `--target`: only failures aimed at this address were kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_target: Option<String>,
    /// Inputs that could not be read to their end (the command then exits 2).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_errors: Vec<ReadError>,
}

/// A reset without a peer address, kept until the rollout windows are known.
struct Peerless {
    input: usize,
    at: Time,
    failure: ConnFailure,
    class: Class,
}

/// Whether a failure is a reset that names no peer address (nothing to join it by).
fn is_peerless_reset(f: &ConnFailure) -> bool {
    f.kind == Kind::Reset && f.target.is_none()
}

/// Collects failures, joins them, and builds the [`Explanation`].
///
/// Resets that name no peer address cannot be joined; with a history they are kept aside until
/// the rollout windows are known, then attributed to the window under way at their time whose
/// pods the same input's other failures aimed at (when exactly one is).
pub struct Explainer<'a> {
    joiner: Option<Joiner<&'a dyn HistorySource>>,
    filter: TimeFilter,
    agg: Aggregator,
    /// The input the failures come from (see [`Explainer::start_input`]).
    input: usize,
    peerless: Vec<Peerless>,
    /// Per removal key: the inputs whose failures aimed at the pod, and the Services.
    removal_inputs: HashMap<String, BTreeSet<usize>>,
    removal_services: HashMap<String, BTreeSet<String>>,
    targets: BTreeMap<IpAddr, TargetSummary>,
    error: Option<HistoryError>,
    filtered_out: u64,
    undated_filtered_out: u64,
    staleness: bool,
}

impl std::fmt::Debug for Explainer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Explainer")
            .field("filter", &self.filter)
            .field("targets", &self.targets.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Explainer<'a> {
    /// An explainer joining with `history` (or classifying by kind only without one).
    pub fn new(history: Option<&'a dyn HistorySource>, filter: TimeFilter) -> Self {
        Explainer {
            joiner: history.map(Joiner::new),
            filter,
            agg: Aggregator::new(),
            input: 0,
            peerless: Vec::new(),
            removal_inputs: HashMap::new(),
            removal_services: HashMap::new(),
            targets: BTreeMap::new(),
            error: None,
            filtered_out: 0,
            undated_filtered_out: 0,
            staleness: false,
        }
    }

    /// The failures added from now on come from the next input (the first input needs no
    /// call). Resets without a peer address are attributed to a rollout through the other
    /// failures of their own input.
    pub fn start_input(&mut self, index: usize) {
        self.input = index;
    }

    /// Adds one failure (in input order). A history error stops the join; it is returned by
    /// [`Explainer::finish`].
    pub fn add(&mut self, f: &ConnFailure) {
        match self.filter.keeps(f.timestamp) {
            None => {
                self.undated_filtered_out += 1;
                return;
            }
            Some(false) => {
                self.filtered_out += 1;
                return;
            }
            Some(true) => {}
        }
        // Nothing to join a reset without a peer address by: it waits for the windows.
        if self.joiner.is_some()
            && self.error.is_none()
            && is_peerless_reset(f)
            && let Some(at) = f.timestamp
        {
            let class = classify(f);
            self.staleness |= class.is_staleness();
            let mut failure = f.clone();
            failure.raw = String::new();
            self.peerless.push(Peerless {
                input: self.input,
                at,
                failure,
                class,
            });
            return;
        }
        let joined = match (&mut self.joiner, &self.error) {
            (Some(j), None) => match j.join(f) {
                Ok(x) => Some(x),
                Err(e) => {
                    self.error = Some(e);
                    None
                }
            },
            _ => None,
        };
        let Some(joined) = joined else {
            let class = classify(f);
            self.staleness |= class.is_staleness();
            self.agg.add(f, class);
            return;
        };
        self.staleness |= joined.class.is_staleness();
        let service = joined.service.as_ref().map(ToString::to_string);
        let key = joined.removal.as_ref().map(|r| r.key.as_str());
        if let Some(key) = key {
            self.removal_inputs
                .entry(key.to_owned())
                .or_default()
                .insert(self.input);
            if let Some(s) = &service {
                self.removal_services
                    .entry(key.to_owned())
                    .or_default()
                    .insert(s.clone());
            }
        }
        self.agg.add_in(f, joined.class, service.as_deref(), key);
        if let Some(target) = f.target {
            let ip = target.ip().to_canonical();
            let flows: &[FlowWindow] = self
                .joiner
                .as_ref()
                .and_then(|j| j.history(ip))
                .map_or(&[], |h| h.flows.as_slice());
            let t = self.targets.entry(ip).or_insert_with(|| TargetSummary {
                ip,
                errors: 0,
                known: joined.known_ip,
                first_error: f.timestamp,
                owner_at_first_error: joined.at_error.clone(),
                owner_now: joined.now.clone(),
                agent_flows: AgentFlows::of(flows),
                held: Vec::new(),
            });
            t.errors += 1;
            let held: &[HeldWindow] = self
                .joiner
                .as_ref()
                .and_then(|j| j.history(ip))
                .map_or(&[], |h| h.held.as_slice());
            let addr = target.to_string();
            for w in held.iter().filter(|w| w.target == addr) {
                let i = match t.held.iter().position(|x| x.window == *w) {
                    Some(i) => i,
                    None => {
                        t.held.push(HeldSummary::of(w));
                        t.held.len() - 1
                    }
                };
                if let (Some(x), Some(at)) = (t.held.get_mut(i), f.timestamp)
                    && w.covers(at)
                {
                    x.failures_within += 1;
                    x.first_failure = Some(x.first_failure.map_or(at, |a| a.min(at)));
                    x.last_failure = Some(x.last_failure.map_or(at, |a| a.max(at)));
                }
            }
            if let (Some(af), Some(at)) = (&mut t.agent_flows, f.timestamp)
                && flows.iter().any(|w| w.covers(at))
            {
                af.failures_on_flows += 1;
                if f.kind == Kind::Reset {
                    af.resets_on_flows += 1;
                }
            }
        }
    }

    /// Builds the explanation.
    ///
    /// # Errors
    /// The first [`HistoryError`] met while joining.
    pub fn finish(
        self,
        inputs: Vec<String>,
        stats: ScanStats,
    ) -> Result<Explanation, HistoryError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let with_history = self.joiner.is_some();
        let (agg, windows, history) = match &self.joiner {
            Some(j) => {
                let windows = rollout_windows(j.removals().values());
                let label: HashMap<&str, &str> = windows
                    .iter()
                    .flat_map(|w| w.keys.iter().map(|k| (k.as_str(), w.label.as_str())))
                    .collect();
                let mut agg = self
                    .agg
                    .relabel_windows(|k| label.get(k).map(|l| (*l).to_owned()));
                let spans = if self.peerless.is_empty() {
                    Vec::new()
                } else {
                    window_spans(&windows, j.removals(), &agg.clone().report(true))
                };
                for p in &self.peerless {
                    let mut under_way = windows.iter().zip(&spans).filter(|(w, (from, to))| {
                        (*from..=*to).contains(&p.at)
                            && w.keys.iter().any(|k| {
                                self.removal_inputs
                                    .get(k)
                                    .is_some_and(|i| i.contains(&p.input))
                            })
                    });
                    match (under_way.next(), under_way.next()) {
                        (Some((w, _)), None) => {
                            let services: BTreeSet<&String> = w
                                .keys
                                .iter()
                                .filter_map(|k| self.removal_services.get(k))
                                .flatten()
                                .collect();
                            let service = match services.len() {
                                1 => services.into_iter().next().map(String::as_str),
                                _ => None,
                            };
                            agg.add_in(&p.failure, p.class, service, Some(&w.label));
                        }
                        // No window, or several: nothing tells which rollout it belongs to.
                        _ => agg.add(&p.failure, p.class),
                    }
                }
                let info = HistoryInfo {
                    source: j.source().describe(),
                    services: j.source().has_services(),
                    distinct_ips: j.lookups(),
                };
                (agg, windows, Some(info))
            }
            None => (self.agg, Vec::new(), None),
        };
        let report = agg.report(with_history);
        let windows = summarize_windows(&report, windows);
        let mut warnings = stats.warnings();
        if self.undated_filtered_out > 0 {
            warnings.push(format!(
                "{} failure(s) without a time were left out by --since/--until",
                self.undated_filtered_out
            ));
        }
        if let Some(h) = &history
            && !h.services
        {
            warnings.push(
                "the truth history has no Services: failures are not attributed to one".to_owned(),
            );
        }
        Ok(Explanation {
            inputs,
            headline: report.headline(),
            note: report.ledger_note().map(str::to_owned),
            history,
            windows,
            report,
            targets: self.targets.into_values().collect(),
            staleness: self.staleness,
            stats,
            filtered_out: self.filtered_out,
            undated_filtered_out: self.undated_filtered_out,
            warnings,
            only_target: None,
            read_errors: Vec::new(),
        })
    }
}

/// When each window was under way: from its first removal to the last of its last removal,
/// the end of its pods' hold on their IPs and its last error aimed at them.
fn window_spans(
    windows: &[RolloutWindow],
    removals: &BTreeMap<String, Removal>,
    report: &Report,
) -> Vec<(Time, Time)> {
    windows
        .iter()
        .map(|w| {
            let held = w
                .keys
                .iter()
                .filter_map(|k| removals.get(k).and_then(|r| r.until));
            let errors = report
                .groups
                .iter()
                .filter(|g| g.window.as_deref() == Some(w.label.as_str()))
                .filter_map(|g| g.last);
            let end = held.chain(errors).fold(w.last_removal, Time::max);
            (w.first_removal, end)
        })
        .collect()
}

fn summarize_windows(report: &Report, windows: Vec<RolloutWindow>) -> Vec<WindowSummary> {
    windows
        .into_iter()
        .filter_map(|window| {
            let mut part = Report {
                groups: Vec::new(),
                total: 0,
                by_kind: BTreeMap::new(),
                by_class: BTreeMap::new(),
                first: None,
                last: None,
                with_ledger: true,
            };
            let mut peerless = 0;
            for g in report
                .groups
                .iter()
                .filter(|g| g.window.as_deref() == Some(window.label.as_str()))
            {
                part.total += g.errors;
                if g.target_ip.is_none() {
                    peerless += g.errors;
                }
                for (k, n) in &g.by_kind {
                    *part.by_kind.entry(*k).or_default() += n;
                }
                *part.by_class.entry(g.class).or_default() += g.errors;
                for t in [g.first, g.last].into_iter().flatten() {
                    part.first = Some(part.first.map_or(t, |f| f.min(t)));
                    part.last = Some(part.last.map_or(t, |l| l.max(t)));
                }
            }
            if part.total == 0 {
                return None;
            }
            let aimed = part.total - peerless;
            let pods = window.pods.len();
            let pods = if pods == 1 {
                "the pod".to_owned()
            } else {
                format!("the {pods} pods")
            };
            let sentence = if peerless == 0 {
                let share = if part.total == report.total {
                    "all".to_owned()
                } else {
                    format!("{} of {}", part.total, report.total)
                };
                format!(
                    "{}, {share} aimed at IPs of {pods} removed by the {}",
                    part.headline(),
                    window.label
                )
            } else {
                let of_all = if part.total == report.total {
                    String::new()
                } else {
                    format!(" ({} of {} errors)", part.total, report.total)
                };
                format!(
                    "{}: {aimed} aimed at IPs of {pods} removed by the {}, {peerless} reset{} with \
                     no peer address during that rollout's window{of_all}",
                    part.headline(),
                    window.label,
                    if peerless == 1 { "" } else { "s" },
                )
            };
            Some(WindowSummary {
                errors: part.total,
                aimed_errors: aimed,
                peerless_resets: peerless,
                by_kind: part.by_kind,
                by_class: part.by_class,
                first_error: part.first,
                last_error: part.last,
                sentence,
                window,
            })
        })
        .collect()
}

impl Explanation {
    /// Exit 1 when any failure is staleness.
    pub fn is_finding(&self) -> bool {
        self.staleness
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use ghostip_logs::{ScanOptions, scan_bytes};

    use super::*;

    #[test]
    fn without_history_says_what_the_ledger_would_add() {
        let log = b"2024-05-01T15:42:10Z dial tcp 10.244.3.71:8080: connect: connection refused\n\
                    2024-05-01T15:42:11Z dial tcp 10.244.3.71:8080: connect: connection refused\n\
                    2024-05-01T15:50:00Z lookup web on 10.96.0.10:53: read udp 10.244.1.2:4242->10.96.0.10:53: i/o timeout\n";
        let (failures, stats) = scan_bytes(log, ScanOptions::default()).unwrap();
        let mut e = Explainer::new(
            None,
            TimeFilter {
                since: None,
                until: Some("2024-05-01T15:45:00Z".parse().unwrap()),
            },
        );
        for f in &failures {
            e.add(f);
        }
        let x = e.finish(vec!["a.log".into()], stats).unwrap();
        assert_eq!(x.report.total, 2);
        assert_eq!(x.filtered_out, 1);
        assert!(x.is_finding());
        assert!(x.note.is_some());
        assert!(x.history.is_none());
    }
}
