//! Where the pod's IP stands in its namespace's EndpointSlices, followed by a watch: ready, terminating (since when) or no longer listed.
//!
//! One namespace-scoped watch of EndpointSlices (the pod's Services are not known in
//! advance): each slice is converted to the core's record and only the slices listing the
//! IP are kept.

use std::collections::BTreeMap;
use std::net::IpAddr;

use futures::StreamExt;
use futures::stream::BoxStream;
use ghostip_core::Time;
use ghostip_core::truth::SliceRecord;
use ghostip_session::drain::EndpointState;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::kube::convert::slice_record;

/// What the watch delivered.
pub(super) enum SliceUpdate {
    /// The slices changed (or a LIST completed).
    Changed,
    /// The watch failed: a gap in what is known about the endpoint.
    Failed(String),
}

/// The slices of the namespace that list the IP.
pub(super) struct EndpointView {
    ip: IpAddr,
    slices: BTreeMap<String, SliceRecord>,
    listing: Option<BTreeMap<String, SliceRecord>>,
    synced: bool,
    stream: BoxStream<'static, Result<Event<EndpointSlice>, watcher::Error>>,
}

impl EndpointView {
    /// Starts the watch of `namespace`'s EndpointSlices.
    pub fn start(client: kube::Client, namespace: &str, ip: IpAddr) -> Self {
        let api: Api<EndpointSlice> = Api::namespaced(client, namespace);
        // Backoff between failed attempts (0.8 s doubling, capped): an API server that is
        // away is not asked in a busy loop while DNS and the agents are still checked.
        let stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        Self {
            ip,
            slices: BTreeMap::new(),
            listing: None,
            synced: false,
            stream,
        }
    }

    /// The next change.
    pub async fn next(&mut self) -> Option<SliceUpdate> {
        let ev = self.stream.next().await?;
        Some(match ev {
            Err(e) => SliceUpdate::Failed(e.to_string()),
            Ok(Event::Init) => {
                self.listing = Some(BTreeMap::new());
                SliceUpdate::Changed
            }
            Ok(Event::InitApply(s)) => {
                let name = s.metadata.name.clone().unwrap_or_default();
                let record = self.relevant(&s);
                match (&mut self.listing, record) {
                    (Some(l), Some(r)) => {
                        l.insert(name, r);
                    }
                    (None, Some(r)) => {
                        self.slices.insert(name, r);
                    }
                    _ => {}
                }
                SliceUpdate::Changed
            }
            Ok(Event::InitDone) => {
                if let Some(l) = self.listing.take() {
                    self.slices = l;
                }
                self.synced = true;
                SliceUpdate::Changed
            }
            Ok(Event::Apply(s)) => {
                let name = s.metadata.name.clone().unwrap_or_default();
                match self.relevant(&s) {
                    Some(r) => self.slices.insert(name, r),
                    None => self.slices.remove(&name),
                };
                SliceUpdate::Changed
            }
            Ok(Event::Delete(s)) => {
                self.slices
                    .remove(&s.metadata.name.clone().unwrap_or_default());
                SliceUpdate::Changed
            }
        })
    }

    /// The slice as the truth keeps it, when it lists the IP.
    fn relevant(&self, s: &EndpointSlice) -> Option<SliceRecord> {
        let r = slice_record(s).ok()?;
        r.endpoints.iter().any(|e| e.ip == self.ip).then_some(r)
    }

    /// Whether a LIST completed: until then the endpoint's state is unknown.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// The Services whose slices list the IP.
    pub fn services(&self) -> Vec<String> {
        let mut v: Vec<String> = self.slices.values().map(|s| s.service.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The endpoint's state; `now` dates a state first seen now. A terminating endpoint is
    /// dated by its slice's `last-change-trigger-time` when that falls in
    /// `[not_before, now]` (the deletion request or the drain's start: the annotation may
    /// carry an older change, such as a readiness flap), else by `now`.
    pub fn state(&self, now: Time, not_before: Time) -> EndpointState {
        if !self.synced {
            return EndpointState::Unknown;
        }
        let listed: Vec<(&SliceRecord, bool)> = self
            .slices
            .values()
            .filter_map(|s| {
                s.endpoints
                    .iter()
                    .find(|e| e.ip == self.ip)
                    .map(|e| (s, e.ready))
            })
            .collect();
        if listed.is_empty() {
            return EndpointState::NotListed { since: now };
        }
        if listed.iter().any(|(_, ready)| *ready) {
            return EndpointState::Ready;
        }
        let since = listed
            .iter()
            .filter_map(|(s, _)| s.trigger_time)
            .filter(|t| *t >= not_before && *t <= now)
            .max()
            .unwrap_or(now);
        EndpointState::Terminating { since }
    }
}
