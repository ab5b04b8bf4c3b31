//! The `DrainWait` Events drain-wait leaves on its pods, read back by `ghostip watch` for `ghostip_drain_wait_seconds{layer}`.
//!
//! [`observations`] is pure: it turns one Event's annotation (the drain's JSON line) into
//! (layer, seconds waited) pairs; [`follow`] watches the Events (field selector
//! `reason=DrainWait`, every namespace) and observes each drain once.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use ghostip_core::Time;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{DRAIN_ANNOTATION, DRAIN_REASON};
use crate::metrics::{DrainLabels, Metrics};

/// (layer, seconds) to observe for one drain: per layer, how long after the drain started
/// it let go (a layer still holding at the end counts the whole wait); `total`: the wait.
pub fn observations(line: &Value) -> Vec<(String, f64)> {
    let parse = |v: &Value| v.as_str().and_then(|s| s.parse::<Time>().ok());
    let Some(started) = parse(&line["started"]) else {
        return Vec::new();
    };
    let waited = line["waited_s"].as_f64().unwrap_or(0.0);
    let mut per_layer: std::collections::BTreeMap<String, f64> = Default::default();
    for l in line["layers"].as_array().into_iter().flatten() {
        let Some(layer) = l["layer"].as_str() else {
            continue;
        };
        let secs = match l["state"].as_str() {
            Some("let-go") => parse(&l["at"])
                .map(|at| (at.duration_since(started).as_secs_f64()).clamp(0.0, waited)),
            Some("holding") => Some(waited),
            _ => None,
        };
        if let Some(s) = secs {
            let e = per_layer.entry(layer.to_string()).or_insert(0.0);
            *e = e.max(s);
        }
    }
    let mut out: Vec<(String, f64)> = per_layer.into_iter().collect();
    out.push(("total".to_string(), waited));
    out
}

/// Follows the DrainWait Events until `cancel`, observing each once (by its uid).
pub async fn follow(client: kube::Client, metrics: Arc<Metrics>, cancel: CancellationToken) {
    let api: Api<Event> = Api::all(client);
    let cfg = watcher::Config::default().fields(&format!("reason={DRAIN_REASON}"));
    // kube-runtime's backoff between failed attempts (client-go's: 0.8 s doubling to 30 s):
    // an API server that is away is not asked in a busy loop.
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    loop {
        let ev = tokio::select! {
            () = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        let event = match ev {
            Ok(WatchEvent::Apply(e)) => e,
            // Drains recorded before ghostip started are history, not observations.
            Ok(WatchEvent::InitApply(e)) => {
                if let Some(uid) = e.metadata.uid.clone() {
                    seen.insert(uid);
                }
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "watching DrainWait Events (retrying)");
                continue;
            }
        };
        let Some(uid) = event.metadata.uid.clone() else {
            continue;
        };
        if !seen.insert(uid) {
            continue;
        }
        let Some(line) = event
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DRAIN_ANNOTATION))
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
        else {
            continue;
        };
        for (layer, secs) in observations(&line) {
            metrics
                .drain_wait
                .get_or_create(&DrainLabels { layer })
                .observe(secs);
        }
        // Bounded memory: a long watch forgets old uids.
        if seen.len() > 10_000 {
            seen.clear();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn each_layer_counts_until_it_let_go_and_holding_ones_count_the_whole_wait() {
        let line: Value = serde_json::json!({
            "event": "drain-wait", "ip": "10.244.1.7",
            "started": "2026-12-03T08:00:00Z", "finished": "2026-12-03T08:00:25Z",
            "waited_s": 25.0, "release": "bound",
            "layers": [
                {"layer": "endpoint", "path": "10.244.1.7", "state": "let-go", "at": "2026-12-03T08:00:00.400Z"},
                {"layer": "dns", "path": "dns-pod/a", "state": "let-go", "at": "2026-12-03T08:00:12Z"},
                {"layer": "dns", "path": "dns-pod/b", "state": "let-go", "at": "2026-12-03T08:00:14.5Z"},
                {"layer": "datapath", "path": "node-2", "state": "holding", "why": "still routes"},
                {"layer": "datapath", "path": "node-3", "state": "unknown", "why": "refused"}
            ]
        });
        let obs = observations(&line);
        assert_eq!(
            obs,
            vec![
                ("datapath".to_string(), 25.0),
                ("dns".to_string(), 14.5),
                ("endpoint".to_string(), 0.4),
                ("total".to_string(), 25.0),
            ]
        );
        assert!(observations(&serde_json::json!({"error": "no pod IP"})).is_empty());
    }
}
