//! The DNS layer's part of a drain: when every DNS path, and the clients it answered, let go of the pod's IP.
//!
//! Each path lets go at the first answer after t0 that no longer holds the IP, and the
//! clients it answered let go when the TTL it handed out with the IP expires: every answer
//! that held it pushes the let-go time to `answer + TTL`. A path that does not cache the
//! cluster domain answered fresh until t0, so its clients may keep the IP until t0 + the TTL
//! such answers carry (the Corefile's `client_ttl`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::{Observation, ObservationResult, Time};
use serde::Serialize;

use crate::drain::{LayerStatus, LayerView, LetGo};

/// One DNS path as the drain sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DnsPathHold {
    /// Path id.
    pub path: String,
    /// Whether the path caches the cluster domain (a caching path reveals, in its first
    /// answer, the expiry of every copy it handed out; one that does not cache answered fresh
    /// until t0).
    pub caches: bool,
    /// TTL a fresh answer carries to clients.
    pub client_ttl: Duration,
    /// Last answer that still held the IP.
    pub last_held: Option<Time>,
    /// Latest expiry of an answer that held the IP (answer time + TTL).
    pub expiry: Option<Time>,
    /// First answer after t0 (and after the last one that held it) without the IP.
    pub first_without: Option<Time>,
    /// The last query failed, with why.
    pub failing: Option<String>,
}

impl DnsPathHold {
    /// When this path and the clients it answered let go, once the path no longer answers
    /// with the IP; `None` while it still does (or has not answered since t0).
    fn let_go(&self, t0: Time) -> Option<Time> {
        let dropped = self.first_without?;
        let mut at = dropped;
        if let Some(e) = self.expiry {
            at = at.max(e);
        }
        if !self.caches {
            at = at.max(t0.checked_add(self.client_ttl).unwrap_or(t0));
        }
        Some(at)
    }
}

/// Every DNS path's hold on one IP.
#[derive(Clone, Debug)]
pub struct DnsLetGo {
    ip: IpAddr,
    paths: BTreeMap<String, DnsPathHold>,
    /// DNS could not be checked at all (no path reachable), with why.
    unknown: Option<String>,
}

impl DnsLetGo {
    /// The DNS part of the drain of `ip`, with no path yet.
    pub fn new(ip: IpAddr) -> Self {
        Self {
            ip,
            paths: BTreeMap::new(),
            unknown: None,
        }
    }

    /// A DNS path to watch; `caches`: whether it caches the cluster domain, `client_ttl`:
    /// the TTL its fresh answers carry.
    pub fn add_path(&mut self, path: &str, caches: bool, client_ttl: Duration) {
        let hold = self
            .paths
            .entry(path.to_string())
            .or_insert_with(|| DnsPathHold {
                path: path.to_string(),
                caches,
                client_ttl,
                last_held: None,
                expiry: None,
                first_without: None,
                failing: None,
            });
        hold.caches = caches;
        hold.client_ttl = client_ttl;
    }

    /// DNS cannot be checked (no path found or reachable); paths that can be are still
    /// judged.
    pub fn unknown(&mut self, why: impl Into<String>) {
        self.unknown = Some(why.into());
    }

    /// One answer of one DNS path for one of the pod's Services; `t0` as the drain knows it
    /// now (only an answer after t0 says the path dropped the IP).
    pub fn on_answer(&mut self, path: &str, obs: &Observation, t0: Option<Time>) {
        let ip = self.ip;
        let Some(hold) = self.paths.get_mut(path) else {
            return;
        };
        match &obs.result {
            ObservationResult::Failed(reason) => hold.failing = Some(reason.to_string()),
            ObservationResult::Held(held) => {
                hold.failing = None;
                match held.iter().find(|h| h.target.ip == ip) {
                    Some(h) => {
                        hold.last_held = Some(hold.last_held.map_or(obs.at, |l| l.max(obs.at)));
                        let ttl = Duration::from_secs(u64::from(h.ttl.unwrap_or(0)));
                        let expiry = obs.at.checked_add(ttl).unwrap_or(obs.at);
                        hold.expiry = Some(hold.expiry.map_or(expiry, |e| e.max(expiry)));
                        hold.first_without = None;
                    }
                    None => {
                        // Only an answer after t0 says the path dropped the IP; before t0 it
                        // had no reason to hold it.
                        if t0.is_some_and(|t0| obs.at >= t0) && hold.first_without.is_none() {
                            hold.first_without = Some(obs.at);
                        }
                    }
                }
            }
        }
    }
}

impl LetGo for DnsLetGo {
    fn views(&self, t0: Time, now: Time, out: &mut Vec<LayerStatus>) {
        if let Some(why) = &self.unknown {
            out.push(LayerStatus {
                layer: "dns",
                path: "*".into(),
                view: LayerView::Unknown { why: why.clone() },
            });
        }
        for hold in self.paths.values() {
            let view = match hold.let_go(t0) {
                Some(at) if at <= now => LayerView::LetGo { at },
                Some(at) => LayerView::Holding {
                    why: if hold.expiry.is_some_and(|e| e >= at) {
                        "clients may hold an answer with the IP until its TTL expires".into()
                    } else {
                        format!(
                            "fresh answers until t0 carried TTL {} s to clients",
                            hold.client_ttl.as_secs()
                        )
                    },
                    until: Some(at),
                },
                None if hold.failing.is_some() && hold.last_held.is_none() => LayerView::Unknown {
                    why: format!(
                        "the path does not answer: {}",
                        hold.failing.as_deref().unwrap_or_default()
                    ),
                },
                None if hold.last_held.is_some() => LayerView::Holding {
                    why: "the path still answers with the IP".into(),
                    until: hold.expiry,
                },
                None => LayerView::Holding {
                    why: "no answer since the IP left the endpoints".into(),
                    until: None,
                },
            };
            out.push(LayerStatus {
                layer: "dns",
                path: hold.path.clone(),
                view,
            });
        }
    }
}
