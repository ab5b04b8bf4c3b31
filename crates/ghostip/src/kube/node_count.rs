//! The number of nodes sharing the cluster's DNS budget: the agents' DaemonSet's `status.desiredNumberScheduled`, from one watch of that one object.
//!
//! Every agent needs the node count to take its share of `--cluster-qps`. The DaemonSet
//! knows it (the nodes that run an agent are exactly those that share the budget) and
//! changes only when nodes or agent pods come and go; a watch of every Node would send each
//! agent every Node's status update (5 000 nodes × one per 5 min = 17 events per second
//! to each of 5 000 agents). RBAC: get/list/watch `daemonsets.apps` in the agent's
//! namespace, restricted to its name.

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The node count a DaemonSet gives: `status.desiredNumberScheduled`, `None` without a
/// status yet or with a negative count.
pub fn node_count(ds: &DaemonSet) -> Option<u32> {
    let n = ds.status.as_ref()?.desired_number_scheduled;
    u32::try_from(n).ok().filter(|n| *n > 0)
}

/// Follows the DaemonSet `namespace/name` until `cancel`, publishing its node count on
/// `tx` (`None` until it is read; 1 when the list holds no such DaemonSet: an agent no
/// DaemonSet runs counts as the only node). A failed watch is retried with kube-runtime's backoff
/// (0.8 s doubling to 30 s); the first failure is logged, the last count is kept.
pub async fn follow_node_count(
    client: kube::Client,
    namespace: String,
    name: String,
    tx: watch::Sender<Option<u32>>,
    cancel: CancellationToken,
) {
    let api: Api<DaemonSet> = Api::namespaced(client, &namespace);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut warned = false;
    // Whether the current (re)list named the DaemonSet: an agent that no DaemonSet runs (a
    // process on a node, as in a test) counts as the only node sharing the budget.
    let mut listed = false;
    loop {
        let ev = tokio::select! {
            () = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        match ev {
            Ok(Event::Init) => listed = false,
            Ok(Event::InitDone) if !listed => {
                tracing::info!(daemonset = %format!("{namespace}/{name}"), "no such DaemonSet: this agent counts as the only node sharing --cluster-qps");
                tx.send_if_modified(|old| {
                    let changed = old.is_none();
                    old.get_or_insert(1);
                    changed
                });
            }
            Ok(Event::Apply(ds) | Event::InitApply(ds)) => {
                if ds.metadata.name.as_deref() != Some(name.as_str()) {
                    continue;
                }
                listed = true;
                if let Some(n) = node_count(&ds) {
                    tx.send_if_modified(|old| {
                        let changed = *old != Some(n);
                        *old = Some(n);
                        changed
                    });
                }
            }
            Ok(_) => {}
            Err(e) => {
                if !warned {
                    warned = true;
                    tracing::warn!(daemonset = %format!("{namespace}/{name}"), error = %e, "cannot read the node count from the agents' DaemonSet (retrying); until then this agent probes only the ClusterIP and no burst");
                } else {
                    tracing::debug!(error = %e, "watching the agents' DaemonSet (retrying)");
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_desired_number_scheduled() {
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ghostip-agent", "namespace": "ghostip-agent"},
            "status": {"desiredNumberScheduled": 5000, "currentNumberScheduled": 4990,
                       "numberMisscheduled": 0, "numberReady": 4980}
        }))
        .unwrap();
        assert_eq!(node_count(&ds), Some(5000));
        let none: DaemonSet =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
        assert_eq!(node_count(&none), None);
        let zero: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "status": {"desiredNumberScheduled": 0, "currentNumberScheduled": 0,
                       "numberMisscheduled": 0, "numberReady": 0}
        }))
        .unwrap();
        assert_eq!(node_count(&zero), None);
    }
}
