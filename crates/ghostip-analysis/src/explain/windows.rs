//! Rollout windows: removals of pods of one workload close together in time, named the way an
//! operator remembers them ("the 15:42 rollout of prod/deploy/x").

use std::collections::BTreeMap;
use std::fmt;

use ghostip_core::{PodRef, Time};
use jiff::SignedDuration;
use serde::Serialize;

use super::join::Removal;

/// Removals of one workload less than this apart belong to one window.
pub const WINDOW_GAP: SignedDuration = SignedDuration::from_secs(300);

/// The workload a pod belongs to, as kubectl names it (`shop/deploy/web`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Workload {
    /// Namespace.
    pub namespace: String,
    /// kubectl short kind: `deploy`, `sts`, `ds`, `rs`, `job`, `pod`, or the lowercase kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// Whether `s` looks like a pod-template-hash (what a Deployment appends to its ReplicaSets).
fn is_template_hash(s: &str) -> bool {
    (5..=10).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl Workload {
    /// The workload of a pod from its controller owner: a ReplicaSet named `NAME-HASH` is the
    /// Deployment `NAME`; without an owner the pod is its own workload.
    pub fn of(pod: &PodRef, owner_kind: Option<&str>, owner_name: Option<&str>) -> Workload {
        let (kind, name) = match (owner_kind, owner_name) {
            (Some("ReplicaSet"), Some(n)) => match n.rsplit_once('-') {
                Some((deploy, hash)) if !deploy.is_empty() && is_template_hash(hash) => {
                    ("deploy".to_owned(), deploy.to_owned())
                }
                _ => ("rs".to_owned(), n.to_owned()),
            },
            (Some("StatefulSet"), Some(n)) => ("sts".to_owned(), n.to_owned()),
            (Some("DaemonSet"), Some(n)) => ("ds".to_owned(), n.to_owned()),
            (Some("Job"), Some(n)) => ("job".to_owned(), n.to_owned()),
            (Some(k), Some(n)) => (k.to_ascii_lowercase(), n.to_owned()),
            _ => ("pod".to_owned(), pod.name.clone()),
        };
        Workload {
            namespace: pod.namespace.clone(),
            kind,
            name,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// Removals of one workload, each less than [`WINDOW_GAP`] after the previous one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RolloutWindow {
    /// "15:42 rollout of shop/deploy/web" (several pods) or "15:42 removal of …" (one pod);
    /// the date is added when two windows would otherwise share a label.
    pub label: String,
    /// The workload.
    pub workload: Workload,
    /// The first removal (deletion request) in the window.
    pub first_removal: Time,
    /// The last one.
    pub last_removal: Time,
    /// The removed pods (`namespace/name`), in removal order.
    pub pods: Vec<String>,
    /// The removal keys (pod UIDs) in the window.
    #[serde(skip)]
    pub keys: Vec<String>,
}

/// Groups removals into windows per workload, ordered by first removal.
pub fn rollout_windows<'a>(removals: impl IntoIterator<Item = &'a Removal>) -> Vec<RolloutWindow> {
    let mut by_workload: BTreeMap<&Workload, Vec<&Removal>> = BTreeMap::new();
    for r in removals {
        by_workload.entry(&r.workload).or_default().push(r);
    }
    let mut windows: Vec<RolloutWindow> = Vec::new();
    for (workload, mut rs) in by_workload {
        rs.sort_by_key(|r| (r.at, r.key.clone()));
        let mut current: Option<RolloutWindow> = None;
        for r in rs {
            match current.as_mut() {
                Some(w) if r.at.duration_since(w.last_removal) < WINDOW_GAP => {
                    w.last_removal = r.at;
                    w.pods.push(r.pod.to_string());
                    w.keys.push(r.key.clone());
                }
                _ => {
                    windows.extend(current.take());
                    current = Some(RolloutWindow {
                        label: String::new(),
                        workload: workload.clone(),
                        first_removal: r.at,
                        last_removal: r.at,
                        pods: vec![r.pod.to_string()],
                        keys: vec![r.key.clone()],
                    });
                }
            }
        }
        windows.extend(current);
    }
    windows.sort_by(|a, b| {
        a.first_removal
            .cmp(&b.first_removal)
            .then_with(|| a.workload.cmp(&b.workload))
    });
    let label = |w: &RolloutWindow, fmt: &str| {
        let what = if w.pods.len() > 1 {
            "rollout"
        } else {
            "removal"
        };
        format!("{} {what} of {}", w.first_removal.strftime(fmt), w.workload)
    };
    let short: Vec<String> = windows.iter().map(|w| label(w, "%H:%M")).collect();
    for (i, w) in windows.iter_mut().enumerate() {
        let clash = short.iter().filter(|s| **s == short[i]).count() > 1;
        w.label = if clash {
            label(w, "%Y-%m-%d %H:%M")
        } else {
            short[i].clone()
        };
    }
    windows
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "prod".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn removal(name: &str, rs: &str, at: &str) -> Removal {
        let p = pod(name);
        Removal {
            key: p.uid.clone(),
            workload: Workload::of(&p, Some("ReplicaSet"), Some(rs)),
            pod: p,
            at: at.parse().unwrap(),
            until: None,
        }
    }

    #[test]
    fn workloads_from_owners() {
        let p = pod("x-1");
        assert_eq!(
            Workload::of(&p, Some("ReplicaSet"), Some("x-7c9d8f5b4")).to_string(),
            "prod/deploy/x"
        );
        assert_eq!(
            Workload::of(&p, Some("ReplicaSet"), Some("plain")).to_string(),
            "prod/rs/plain"
        );
        assert_eq!(
            Workload::of(&p, Some("StatefulSet"), Some("db")).to_string(),
            "prod/sts/db"
        );
        assert_eq!(Workload::of(&p, None, None).to_string(), "prod/pod/x-1");
    }

    #[test]
    fn removals_close_in_time_form_one_rollout() {
        let rs = [
            removal("x-a", "x-7c9d8f5b4", "2024-05-01T15:42:05Z"),
            removal("x-b", "x-7c9d8f5b4", "2024-05-01T15:42:40Z"),
            removal("x-c", "x-7c9d8f5b4", "2024-05-01T15:43:10Z"),
            // Another rollout of the same Deployment an hour later.
            removal("x-d", "x-5f6a7b8c9", "2024-05-01T16:40:00Z"),
            // Another workload at the same time.
            removal("y-a", "y-6b7c8d9e0", "2024-05-01T15:42:20Z"),
        ];
        let w = rollout_windows(&rs);
        let labels: Vec<&str> = w.iter().map(|w| w.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "15:42 rollout of prod/deploy/x",
                "15:42 removal of prod/deploy/y",
                "16:40 removal of prod/deploy/x"
            ]
        );
        assert_eq!(w[0].pods, ["prod/x-a", "prod/x-b", "prod/x-c"]);
        assert_eq!(w[0].last_removal, "2024-05-01T15:43:10Z".parse().unwrap());
    }

    #[test]
    fn same_minute_on_two_days_gets_dates() {
        let rs = [
            removal("x-a", "x-7c9d8f5b4", "2024-05-01T15:42:05Z"),
            removal("x-b", "x-7c9d8f5b4", "2024-05-02T15:42:05Z"),
        ];
        let w = rollout_windows(&rs);
        assert_eq!(w[0].label, "2024-05-01 15:42 removal of prod/deploy/x");
        assert_eq!(w[1].label, "2024-05-02 15:42 removal of prod/deploy/x");
    }
}
