//! The IO side of every layer, one folder each, behind one [`LayerAdapter`] trait and one registration table, [`LAYERS`].
//!
//! A layer is two folders and one line: its pure model in
//! `ghostip-session/src/layers/<name>/` (a [`LayerModel`]), its adapter here in
//! `layers/<name>/` (reader, adapter, status), and its [`Registration`] in [`LAYERS`]. The
//! commands never name a layer: `watch`, `rollout` and the agent build their session's models
//! with [`register_models`], and the agent starts the node-local adapters with
//! [`start_node_adapters`], `watch` its cluster-wide ones with [`start_cluster_adapters`],
//! and both drive them through the [`Pipeline`]
//! ([`Pipeline::adapters_on_truth`], [`Pipeline::step_adapters`]); `/status` has one section
//! per layer, filled from each adapter's [`LayerSnapshot`].
//!
//! | layer | model (pure) | adapter (IO) | where it runs |
//! |---|---|---|---|
//! | [`dns`] | answers of every DNS path, Corefile lags, names, health | the prober (queries within one global budget), connect probes, the node's DNS health check | every command; health in the agent |
//! | [`datapath`] | a node's load-balancer backends against the truth, read pacing | dump readers (processes), Cilium exec | the agent |
//! | [`conntrack`] | flows of this node's pods to removed endpoints | a netlink dump | the agent |
//! | [`channelz`] | opted-in gRPC clients' subchannels to removed endpoints | channelz reads (gRPC) of client pods | `watch`; drain-wait's part |
//! | [`components`] | kube-proxy's last sync against the Service changes (`component-stalled`); CoreDNS's programming p99 over a range | bounded scrapes of their `/metrics` | the agent (kube-proxy); `watch` (CoreDNS) |
//!
//! [`LayerModel`]: ghostip_session::LayerModel

pub mod channelz;
pub mod components;
pub mod conntrack;
pub mod datapath;
pub mod dns;
pub mod node;
pub mod reads;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::future::LocalBoxFuture;
use ghostip_core::{Layer, ServiceKey, Time};
use ghostip_session::drain::{DrainConfig, DrainModel, LetGo};
use ghostip_session::layers::dns::DnsConfig;
use ghostip_session::{LayerModel, Session};

use crate::cli::AgentArgs;
use crate::pipeline::Pipeline;
use node::{IpView, NodeOutputs, TrackingView};

/// The IO side of one layer in a long-running command: it reads or probes its paths and feeds
/// what it saw to its model in the [`Pipeline`]'s session.
///
/// The agent's loop calls [`on_truth`](Self::on_truth) after each truth event and
/// [`step`](Self::step) after every step of the pipeline (at least every 250 ms), then
/// publishes [`snapshot`](Self::snapshot) in `/status`.
pub trait LayerAdapter: Send {
    /// The layer this adapter reads.
    fn layer(&self) -> Layer;

    /// A truth event was applied: the model's desired sets may have changed (a re-read is
    /// due). `synced`: the truth synced at least once.
    fn on_truth(&mut self, _p: &mut Pipeline, _now: Time, _synced: bool) {}

    /// Feeds what finished since the last step to the session, the ledger, the metrics and the
    /// output, then starts what is due. Never waits on IO.
    fn step<'a>(
        &'a mut self,
        p: &'a mut Pipeline,
        now: Time,
        synced: bool,
    ) -> LocalBoxFuture<'a, ()>;

    /// What `/status` shows of this layer now.
    fn snapshot(&self) -> Arc<dyn LayerSnapshot>;

    /// Stops IO in flight (readers are killed, probes cancelled).
    fn shutdown(&mut self) {}
}

/// One layer's section of the agent's `/status`, and its part of the per-IP answer.
pub trait LayerSnapshot: Send + Sync + std::fmt::Debug {
    /// The section under `layers.<id>` in `/status`.
    fn to_json(&self) -> serde_json::Value;

    /// Adds what this layer knows of `ip` to the answer of `GET /v1/ips/{ip}`; `open` are the
    /// open trackings of the node's paths.
    fn answer_ip(&self, _ip: IpAddr, _open: &[TrackingView], _view: &mut IpView) {}

    /// What the layer reads on this node (`iptables`, `nftables`), when it has a choice.
    fn source(&self) -> Option<String> {
        None
    }

    /// Why the layer cannot be read now, for the summary that leads `/status`.
    fn problem(&self) -> Option<String> {
        None
    }
}

/// A layer with nothing to show yet.
#[derive(Debug)]
pub struct NoSnapshot;

impl LayerSnapshot for NoSnapshot {
    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// What every command's session is built from.
pub struct ModelSetup<'a> {
    /// The DNS layer's configuration (paths, names).
    pub dns: &'a DnsConfig,
    /// The node, for node-local layers (the agent); `None` in cluster-wide commands.
    pub node: Option<&'a str>,
}

/// What the agent hands to each node-local adapter when it starts.
pub struct NodeSetup<'a> {
    /// The agent's flags.
    pub args: &'a AgentArgs,
    /// The Kubernetes client (the Cilium reader execs in the Cilium pod).
    pub client: &'a kube::Client,
    /// This node.
    pub node: &'a str,
    /// The cluster DNS Service (`kube-system/kube-dns`): failures of node-wide reads are
    /// recorded under it, the DNS health check asks for its name.
    pub dns_service: &'a ServiceKey,
    /// The cluster's DNS zone (`cluster.local`).
    pub zone: &'a str,
    /// Set on shutdown: readers kill their process groups.
    pub kill: &'a Arc<AtomicBool>,
    /// Where the adapters report.
    pub out: &'a NodeOutputs,
}

/// Starts a node-local adapter (registering its model and paths with the pipeline's session
/// where it has them); `Ok(None)` when the layer has nothing to read on this node.
pub type StartNode =
    for<'a> fn(
        &'a NodeSetup<'a>,
        &'a mut Pipeline,
    ) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>>;

/// What `watch` hands to each cluster-wide adapter when it starts.
pub struct ClusterSetup<'a> {
    /// The Kubernetes client.
    pub client: &'a kube::Client,
    /// The channelz layer's bounds.
    pub channelz: &'a crate::cli::ChannelzArgs,
    /// The cluster-wide layers' metrics ([`register_metrics`] with [`Runs::Cluster`]).
    pub metrics: &'a BTreeMap<Layer, LayerMetrics>,
    /// `--coredns-metrics-interval` (zero: CoreDNS is not scraped).
    pub coredns_interval: std::time::Duration,
    /// The cluster DNS Service (`kube-system/kube-dns`): its endpoints are the CoreDNS pods.
    pub dns_service: &'a ServiceKey,
}

impl ClusterSetup<'_> {
    /// `layer`'s metrics, when they were registered as a `T`; else a set no registry exports.
    pub fn metrics_of<T: Default + Send + Sync + 'static>(&self, layer: Layer) -> Arc<T> {
        self.metrics
            .get(&layer)
            .and_then(|m| Arc::clone(m).downcast::<T>().ok())
            .unwrap_or_default()
    }
}

/// Starts a cluster-wide adapter (`watch`); `Ok(None)` when the layer has nothing to read.
pub type StartCluster =
    for<'a> fn(
        &'a ClusterSetup<'a>,
        &'a mut Pipeline,
    ) -> LocalBoxFuture<'a, anyhow::Result<Option<Box<dyn LayerAdapter>>>>;

/// Where a command runs layers' adapters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// The agent: node-local adapters.
    Node,
    /// `watch`: cluster-wide adapters.
    Cluster,
}

/// One layer's line in [`LAYERS`].
pub struct Registration {
    /// The layer.
    pub layer: Layer,
    /// Its pure model in every command's session, when it has one from the start (the
    /// datapath's model waits for its path, registered by its adapter).
    pub model: fn(&ModelSetup<'_>) -> Option<Box<dyn LayerModel>>,
    /// Its node-local adapter in the agent.
    pub node: Option<StartNode>,
    /// Its cluster-wide adapter in `watch`.
    pub cluster: Option<StartCluster>,
    /// Its part of `drain-wait`'s judgment of one IP, when the layer can hold an endpoint's
    /// address.
    pub drain: Option<fn(IpAddr) -> Box<dyn LetGo>>,
    /// Registers its adapter's metrics next to the fixed ones (in the command that runs the
    /// adapter); its adapter takes them back by type ([`node::NodeOutputs::metrics_of`],
    /// [`ClusterSetup::metrics_of`]).
    pub metrics: Option<fn(&mut crate::metrics::Metrics) -> LayerMetrics>,
}

/// One layer's metrics, as registered (its adapter knows their type).
pub type LayerMetrics = Arc<dyn std::any::Any + Send + Sync>;

/// Registers the metrics of every layer whose adapter runs where `runs` says, by layer.
pub fn register_metrics(
    m: &mut crate::metrics::Metrics,
    runs: Runs,
) -> BTreeMap<Layer, LayerMetrics> {
    LAYERS
        .iter()
        .filter(|r| match runs {
            Runs::Node => r.node.is_some(),
            Runs::Cluster => r.cluster.is_some(),
        })
        .filter_map(|r| r.metrics.map(|register| (r.layer, register(m))))
        .collect()
}

/// Every layer ghostip knows, in the order the agent starts them.
pub const LAYERS: &[Registration] = &[
    dns::LAYER,
    datapath::LAYER,
    conntrack::LAYER,
    channelz::LAYER,
    components::LAYER,
];

/// Registers every layer's model that has one from the start with `session`.
pub fn register_models(session: &mut Session, setup: &ModelSetup<'_>) {
    for r in LAYERS {
        if let Some(model) = (r.model)(setup) {
            session.register_boxed(model);
        }
    }
}

/// Starts every node-local adapter on the pipeline, in [`LAYERS`] order. A layer that fails
/// to start is logged with its cause and left out; the rest keep working.
pub async fn start_node_adapters(setup: &NodeSetup<'_>, p: &mut Pipeline) {
    for r in LAYERS {
        let Some(start) = r.node else { continue };
        match start(setup, p).await {
            Ok(Some(adapter)) => p.add_adapter(adapter),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(layer = %r.layer, error = %format!("{e:#}"), "starting the layer failed; the other layers keep working");
            }
        }
    }
}

/// Starts every cluster-wide adapter on the pipeline (`watch`), in [`LAYERS`] order. A
/// layer that fails to start is logged with its cause and left out; the rest keep working.
pub async fn start_cluster_adapters(setup: &ClusterSetup<'_>, p: &mut Pipeline) {
    for r in LAYERS {
        let Some(start) = r.cluster else { continue };
        match start(setup, p).await {
            Ok(Some(adapter)) => p.add_adapter(adapter),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(layer = %r.layer, error = %format!("{e:#}"), "starting the layer failed; the other layers keep working");
            }
        }
    }
}

/// A drain of one pod IP with every registered layer's part.
pub fn drain_model(cfg: DrainConfig) -> DrainModel {
    let ip = cfg.ip;
    let mut model = DrainModel::new(cfg);
    for r in LAYERS {
        if let Some(part) = r.drain {
            model.register(part(ip));
        }
    }
    model
}

/// The snapshots of every running adapter, by layer.
pub fn snapshots(p: &Pipeline) -> BTreeMap<Layer, Arc<dyn LayerSnapshot>> {
    p.adapters()
        .iter()
        .map(|a| (a.layer(), a.snapshot()))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::path::Path;

    use super::*;

    /// docs/ARCHITECTURE.md's table of layers names each registered layer with its model and
    /// adapter folders, and every folder it names exists.
    #[test]
    fn the_architecture_table_names_every_layer_and_existing_folders() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
        let section = doc
            .split("## Adding a layer")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("docs/ARCHITECTURE.md has an `Adding a layer` section");
        let rows: Vec<Vec<&str>> = section
            .lines()
            .skip_while(|l| *l != "| layer | model | adapter |")
            .skip(2)
            .take_while(|l| l.starts_with("| "))
            .map(|l| {
                l.split('|')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .collect();
        let named: Vec<&str> = rows.iter().map(|r| r[0]).collect();
        let registered: Vec<&str> = LAYERS.iter().map(|r| r.layer.as_str()).collect();
        assert_eq!(
            named, registered,
            "the table lists the layers of LAYERS, in order"
        );
        for row in &rows {
            for cell in &row[1..] {
                let path = cell.trim_matches('`');
                assert!(
                    root.join(path).is_dir(),
                    "docs/ARCHITECTURE.md names `{path}`, which does not exist"
                );
                assert!(
                    path.ends_with(&format!("/layers/{}/", row[0])),
                    "`{path}`: a layer's folders are named after it"
                );
            }
        }
    }

    /// drain-wait asks every registered layer that can hold an endpoint's address: DNS,
    /// the nodes' datapaths and the opted-in gRPC clients' balancers.
    #[test]
    fn a_drain_has_the_part_of_every_registered_layer() {
        use ghostip_session::layers::channelz::drain::ClientsLetGo;
        use ghostip_session::layers::datapath::drain::NodesLetGo;
        use ghostip_session::layers::dns::drain::DnsLetGo;
        let mut m = drain_model(DrainConfig {
            ip: "10.244.1.7".parse().unwrap(),
            started: Time::from_second(1_800_000_000).unwrap(),
            max_wait: std::time::Duration::from_secs(60),
            fallback: (std::time::Duration::from_secs(30), "test".into()),
        });
        assert!(m.part_mut::<DnsLetGo>().is_some());
        assert!(m.part_mut::<NodesLetGo>().is_some());
        assert!(m.part_mut::<ClientsLetGo>().is_some());
        let with_drain = LAYERS.iter().filter(|r| r.drain.is_some()).count();
        assert_eq!(with_drain, 3);
    }

    /// Every layer is registered once.
    #[test]
    fn each_layer_is_registered_once() {
        let mut ids: Vec<&str> = LAYERS.iter().map(|r| r.layer.as_str()).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
    }
}
