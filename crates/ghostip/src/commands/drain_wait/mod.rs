//! `ghostip drain-wait`: a pod's preStop hook that returns once every layer has let go of the pod's IP, or at a bound.
//!
//! Run in the pod (its network namespace, its ServiceAccount), it learns its IP (`POD_IP`
//! or `--ip`) and:
//! - follows its namespace's EndpointSlices until the IP is `ready: false` /
//!   `terminating: true` or gone ([`endpoint`]): that moment is t0;
//! - probes every DNS path ([`dns`]: each CoreDNS pod, the kube-dns ClusterIP, NodeLocal
//!   DNSCache, its own resolvers) for the names of its headless Services, with the prober and
//!   the global query budget every DNS probe of ghostip uses;
//! - asks every node's agent whether its datapath still routes a Service to the IP
//!   ([`agent_answers`]);
//! - with `--wait-connections`, counts established connections to its listening ports in
//!   its own network namespace (`/proc/net/tcp{,6}`, read from the kernel);
//!
//! and hands all of it to the pure [`DrainModel`], which says when everything let go. It
//! never waits past `--max-wait` (default: the pod's grace period minus `--margin`) and
//! always exits 0: a preStop hook that fails must not make a termination worse. What it
//! waited for goes to one JSON line on stdout and, unless `--no-event`, to an Event on the
//! pod (reason `DrainWait`), from which `ghostip watch` exports
//! `ghostip_drain_wait_seconds{layer}`.

pub mod agent_answers;
mod dns;
mod endpoint;
pub mod events;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use futures::StreamExt as _;
use ghostip_core::truth::ServicePort;
use ghostip_core::{PathIdx, ServiceKey, Time};
use ghostip_datapath::socket_table::SocketTable;
use ghostip_session::drain::{
    ConnectionsLetGo, Decision, DrainConfig, DrainModel, LayerView, Release,
};
use ghostip_session::layers::channelz::drain::{ClientReport, ClientsLetGo, holders};
use ghostip_session::layers::datapath::drain::NodesLetGo;
use ghostip_session::layers::dns::drain::DnsLetGo;
use ghostip_session::layers::dns::names::{ProbeName, QueryType, srv_name};
use ghostip_session::layers::dns::probe::{ProbeCommand, ProbePath};
use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Outcome, kube_connect};
use crate::agent_client::{self as node_agents, Agent, AgentClient, AgentSelector};
use crate::cli::{DrainWaitArgs, Given, GlobalArgs};
use crate::kube::Connection;
use crate::layers::dns::prober::{ProbeEvent, Prober, ProberConfig};
use crate::layers::dns::query::QueryConfig;
use endpoint::{EndpointView, SliceUpdate};

/// The annotation of the `DrainWait` Event holding the drain's JSON line.
pub const DRAIN_ANNOTATION: &str = "ghostip.io/drain";

/// The Event reason `ghostip watch` follows.
pub const DRAIN_REASON: &str = "DrainWait";

/// Default bound when the pod's grace period cannot be read (30 s, Kubernetes' default,
/// minus the default margin).
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(20);

/// Fallback when neither `--fallback` nor a Corefile gives a budget.
const DEFAULT_FALLBACK: Duration = Duration::from_secs(30);

/// The drain's JSON line.
#[derive(Debug, Serialize)]
pub struct DrainLine {
    /// Always `drain-wait`.
    pub event: &'static str,
    /// `namespace/name`, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The IP.
    pub ip: IpAddr,
    /// When the hook started.
    pub started: Time,
    /// When it returned.
    pub finished: Time,
    /// How long it waited.
    pub waited_s: f64,
    /// The bound.
    pub max_wait_s: f64,
    /// When the IP left the ready endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t0: Option<Time>,
    /// Why it returned.
    pub release: Release,
    /// The stand-in for what could not be checked, and where it came from.
    pub fallback_s: f64,
    /// Where the fallback came from.
    pub fallback_source: String,
    /// Seconds the API server did not answer during the drain.
    pub api_gap_s: f64,
    /// DNS answers (or failures) the drain's probes received, over every path.
    pub dns_queries: u64,
    /// Requests to the node agents.
    pub agent_requests: u64,
    /// Every layer and path.
    pub layers: Vec<ghostip_session::drain::LayerStatus>,
    /// Flag values that could not be read or were out of range, and what was used instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The flags as the drain uses them: each value read, or its default where it could not be
/// (named in `warnings`), since the hook never fails on its command line.
struct Settings {
    max_wait: Option<Duration>,
    margin: Duration,
    fallback: Option<Duration>,
    qps: NonZeroU32,
    interval: Duration,
    timeout: Duration,
    warnings: Vec<String>,
}

impl Settings {
    fn of(args: &DrainWaitArgs) -> Settings {
        let mut warnings = Vec::new();
        let w = &mut warnings;
        let max_wait = args
            .max_wait
            .as_ref()
            .and_then(|m| m.clone().ok_or_warn("--max-wait", w));
        let fallback = args
            .fallback
            .as_ref()
            .and_then(|f| f.clone().ok_or_warn("--fallback", w));
        let margin = args
            .margin
            .or_default("--margin", Duration::from_secs(10), w);
        let qps = args.qps.or_default("--qps", 20, w);
        let interval = args
            .interval
            .or_default("--interval", Duration::from_millis(500), w);
        let timeout =
            args.request_timeout
                .or_default("--request-timeout", Duration::from_secs(1), w);
        for why in &warnings {
            tracing::warn!("{why}");
        }
        Settings {
            max_wait,
            margin,
            fallback,
            qps: NonZeroU32::new(qps).unwrap_or(NonZeroU32::MIN),
            interval,
            timeout,
            warnings,
        }
    }

    /// The bound: `--max-wait` within the grace period, else the grace period minus
    /// `--margin` (20 s when the grace period is unknown). A `--max-wait` at or past the grace
    /// period is lowered to the grace period minus `--margin`; one past [`MAX_UNKNOWN_GRACE`]
    /// without a known grace period to [`DEFAULT_MAX_WAIT`]; each with a warning.
    fn bound(&mut self, grace: Option<Duration>) -> Duration {
        let limit = grace.map_or(DEFAULT_MAX_WAIT, |g| {
            g.saturating_sub(self.margin).max(Duration::from_secs(1))
        });
        match (self.max_wait, grace) {
            (None, _) => limit,
            (Some(m), Some(g)) if m >= g => {
                self.warn(format!(
                    "--max-wait {:?} is not within the pod's grace period of {g:?}: waiting at most {limit:?} (the grace period minus --margin)",
                    m
                ));
                limit
            }
            (Some(m), None) if m > MAX_UNKNOWN_GRACE => {
                self.warn(format!(
                    "--max-wait {m:?} is over {MAX_UNKNOWN_GRACE:?} and the pod's grace period is unknown: waiting at most {limit:?}"
                ));
                limit
            }
            (Some(m), _) => m,
        }
    }

    fn warn(&mut self, why: String) {
        tracing::warn!("{why}");
        self.warnings.push(why);
    }
}

/// The longest `--max-wait` taken as given when the pod's grace period cannot be read.
const MAX_UNKNOWN_GRACE: Duration = Duration::from_secs(86_400);

trait OkOrWarn<T> {
    fn ok_or_warn(self, flag: &str, warnings: &mut Vec<String>) -> Option<T>;
}

impl<T> OkOrWarn<T> for Given<T> {
    /// The value, or `None` (the flag's absence: its default) with a warning.
    fn ok_or_warn(self, flag: &str, warnings: &mut Vec<String>) -> Option<T> {
        match self {
            Given::Ok(v) => Some(v),
            Given::Bad(why) => {
                warnings.push(format!("{flag}: {why}; using the default"));
                None
            }
        }
    }
}

/// Prints the JSON line of a drain that could not start: no IP, or a command line that could
/// not be parsed (`main` calls this and exits 0).
pub fn parse_failure(error: &str) {
    let error = error.trim_end();
    tracing::error!("{error}; not waiting");
    write_line(&serde_json::json!({
        "event": "drain-wait",
        "started": crate::clock::wall_now(),
        "error": format!("{error}; not waiting"),
    }));
}

/// One JSON line to stdout; never fails (a closed stdout loses the line, not the hook).
fn write_line(v: &impl Serialize) {
    match serde_json::to_string(v) {
        Ok(s) => crate::printer::write_stdout_line(&s),
        Err(e) => tracing::error!(error = %e, "encoding the drain's line"),
    }
}

pub(super) async fn run(g: &GlobalArgs, args: DrainWaitArgs) -> anyhow::Result<Outcome> {
    let started = crate::clock::wall_now();
    // SIGTERM (the container being stopped with the hook still running) or Ctrl-C: from here on
    // they end the wait with what was seen, instead of killing the hook without its line.
    let signalled = CancellationToken::new();
    {
        let signalled = signalled.clone();
        tokio::spawn(async move {
            super::shutdown_signal().await;
            signalled.cancel();
        });
    }
    let ip = match &args.ip {
        Some(Given::Ok(ip)) => *ip,
        // Never block a termination on a misconfiguration.
        Some(Given::Bad(why)) => {
            parse_failure(&format!(
                "POD_IP / --ip: {why}: set POD_IP from the downward API (fieldRef status.podIP)"
            ));
            return Ok(Outcome::Clean);
        }
        None => {
            parse_failure(
                "no pod IP: set POD_IP from the downward API (fieldRef status.podIP) or pass --ip",
            );
            return Ok(Outcome::Clean);
        }
    };
    let settings = Settings::of(&args);
    let line = drain(g, &args, settings, ip, started, signalled).await;
    write_line(&line);
    Ok(Outcome::Clean)
}

/// What the drain knows of its pod.
#[derive(Default)]
struct PodFacts {
    grace: Option<Duration>,
    /// When the deletion was requested (deletionTimestamp minus the grace period).
    deleted_at: Option<Time>,
    uid: Option<String>,
}

async fn pod_facts(conn: &Connection, ns: &str, name: &str, timeout: Duration) -> PodFacts {
    let api: Api<Pod> = Api::namespaced(conn.client.clone(), ns);
    let pod = match tokio::time::timeout(timeout, api.get_opt(name)).await {
        Ok(Ok(Some(p))) => p,
        Ok(Ok(None)) => {
            tracing::warn!(pod = %format!("{ns}/{name}"), "the pod was not found; its grace period is unknown");
            return PodFacts::default();
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "reading the pod; its grace period is unknown");
            return PodFacts::default();
        }
        Err(_) => return PodFacts::default(),
    };
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs);
    let deleted_at = pod.metadata.deletion_timestamp.as_ref().and_then(|t| {
        let deadline: Time = t.0.to_string().parse().ok()?;
        deadline.checked_sub(grace.unwrap_or_default()).ok()
    });
    PodFacts {
        grace,
        deleted_at,
        uid: pod.metadata.uid.clone(),
    }
}

async fn drain(
    g: &GlobalArgs,
    args: &DrainWaitArgs,
    mut settings: Settings,
    ip: IpAddr,
    started: Time,
    signalled: CancellationToken,
) -> DrainLine {
    let timeout = settings.timeout;
    let conn = match tokio::time::timeout(Duration::from_secs(5), kube_connect(g)).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "no API server: the endpoint and the agents cannot be checked");
            None
        }
        Err(_) => {
            tracing::warn!(
                "no API server within 5 s: the endpoint and the agents cannot be checked"
            );
            None
        }
    };
    let pod_key = args
        .pod_namespace
        .as_ref()
        .zip(args.pod_name.as_ref())
        .map(|(ns, n)| (ns.clone(), n.clone()));
    let facts = match (&conn, &pod_key) {
        (Some(c), Some((ns, name))) => pod_facts(c, ns, name, timeout).await,
        _ => PodFacts::default(),
    };
    let max_wait = settings.bound(facts.grace);
    let plan = dns::plan(
        conn.as_ref().map(|c| &c.client),
        &args.zone,
        timeout,
        started,
    )
    .await;
    let fallback = match (settings.fallback, &plan.budget) {
        (Some(f), _) => (f, "--fallback".to_string()),
        (None, Some(b)) => b.clone(),
        (None, None) => (
            DEFAULT_FALLBACK,
            "default: no --fallback and no Corefile to compute a budget from".to_string(),
        ),
    };
    // Every registered layer's part, and the pod's own connections when asked.
    let mut model = crate::layers::drain_model(DrainConfig {
        ip,
        started,
        max_wait,
        fallback: fallback.clone(),
    });
    if args.wait_connections {
        model.register(Box::new(ConnectionsLetGo::new(ip)));
    }
    for why in &plan.unknown {
        model.unknown("dns", "kube-system", why.clone());
    }
    tracing::info!(%ip, max_wait_s = max_wait.as_secs_f64(), paths = plan.paths.len(), fallback_s = fallback.0.as_secs_f64(), "drain started");

    // The endpoint.
    let not_before = facts
        .deleted_at
        .unwrap_or(started)
        .min(started)
        .checked_sub(Duration::from_secs(2))
        .unwrap_or(started);
    let mut view = match (&conn, &args.pod_namespace) {
        (Some(c), Some(ns)) => Some(EndpointView::start(c.client.clone(), ns, ip)),
        _ => {
            // A preStop hook runs only when the pod terminates: the IP is leaving now.
            model
                .on_endpoint(ghostip_session::drain::EndpointState::Terminating { since: started });
            model.unknown(
                "endpoint",
                ip.to_string(),
                "no API server or no POD_NAMESPACE: assumed the IP left the endpoints when the drain started",
            );
            None
        }
    };

    // DNS probing.
    let cancel = CancellationToken::new();
    let (probe_tx, cmd_rx) = mpsc::channel(64);
    let (ev_tx, mut probe_rx) = mpsc::channel::<ProbeEvent>(1024);
    let prober = Prober::new(
        ProberConfig {
            queries_per_second: settings.qps,
            burst_interval: settings.interval,
            sweep_period: Duration::from_secs(3600),
            max_in_flight: 64,
        },
        QueryConfig {
            timeout,
            ..QueryConfig::default()
        },
    );
    tokio::spawn(prober.run(cmd_rx, ev_tx, cancel.child_token()));
    let path_ids: Vec<String> = plan
        .paths
        .iter()
        .map(|(p, _, _)| p.id().to_string())
        .collect();
    let _ = probe_tx
        .send(ProbeCommand::SetPaths(
            plan.paths
                .iter()
                .enumerate()
                .map(|(i, (p, _, _))| ProbePath {
                    idx: PathIdx(u32::try_from(i).unwrap_or(u32::MAX)),
                    path: p.clone(),
                })
                .collect(),
        ))
        .await;
    // `max_wait` is at most a day past now (Settings::bound), well within what a Time holds.
    let bound = started.checked_add(max_wait).unwrap_or(started);
    let mut probed: BTreeSet<String> = BTreeSet::new();
    let mut dns_added = false;

    // Agents.
    let agent_client = AgentClient::new(conn.as_ref().and_then(|c| c.bearer.clone()), timeout);
    let mut agents: Vec<Agent> = Vec::new();
    if args.no_agents {
        nodes_unknown(&mut model, "--no-agents: node datapaths are not asked");
    } else if !args.agents.is_empty() {
        agents = args
            .agents
            .iter()
            .map(|(node, addr)| Agent {
                node: node.clone(),
                addr: *addr,
            })
            .collect();
    } else if let Some(c) = &conn {
        let sel = AgentSelector {
            namespace: args.agent_namespace.clone(),
            selector: args.agent_selector.clone(),
            port: args.agent_port,
        };
        match node_agents::find(&c.client, &sel, timeout).await {
            Ok(a) if a.is_empty() => nodes_unknown(
                &mut model,
                format!(
                    "no running agent pod ({}) in namespace {}",
                    args.agent_selector, args.agent_namespace
                ),
            ),
            Ok(a) => agents = a,
            Err(e) => nodes_unknown(&mut model, format!("{:#}", anyhow::Error::from(e))),
        }
    } else {
        nodes_unknown(&mut model, "no API server to find the agents");
    }

    // Opted-in gRPC clients in the pod's namespace (what its RBAC lets it list): their
    // balancers must let go of the IP too (docs/CHANNELZ.md).
    let mut cz_clients = Vec::new();
    if let (Some(c), Some(ns)) = (&conn, &args.pod_namespace) {
        let listed = tokio::time::timeout(
            timeout,
            crate::layers::channelz::discovery::list_opted_in(c.client.clone(), Some(ns.clone())),
        )
        .await
        .unwrap_or_else(|_| {
            Err(crate::layers::channelz::discovery::ListError {
                forbidden: false,
                message: format!("listing pods for channelz: no answer within {timeout:?}"),
            })
        });
        match listed {
            Ok(mut found) => {
                found.truncate(MAX_CHANNELZ_CLIENTS);
                cz_clients = found;
            }
            // The Role grants no `list` on pods: channelz clients were not opted in here.
            Err(e) if e.forbidden => {
                tracing::info!(error = %e, "gRPC clients' channelz not checked: the ServiceAccount may not list pods (deploy/drain-wait/rbac.yaml)");
            }
            Err(e) => {
                if let Some(part) = model.part_mut::<ClientsLetGo>() {
                    part.unknown(e.message);
                }
            }
        }
    }

    let mut ticker = tokio::time::interval(settings.interval.max(Duration::from_millis(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut gap_since: Option<Time> = None;
    let mut gap_total = Duration::ZERO;
    let mut ticks: u64 = 0;
    let (mut dns_queries, mut agent_requests) = (0u64, 0u64);
    let mut endpoint_assumed = false;
    let decision: Decision = loop {
        tokio::select! {
            () = signalled.cancelled() => {
                tracing::warn!(%ip, "signalled while waiting: letting the pod stop with what was seen");
                let mut d = model.decide(crate::clock::wall_now());
                if d.release.is_none() {
                    d.release = Some(Release::Signal);
                }
                break d;
            }
            Some(u) = async { match view.as_mut() { Some(v) => v.next().await, None => std::future::pending().await } } => {
                let now = crate::clock::wall_now();
                match u {
                    SliceUpdate::Failed(e) => {
                        if gap_since.is_none() {
                            tracing::warn!(error = %e, "the EndpointSlice watch failed; DNS and agents are still checked");
                            gap_since = Some(now);
                        }
                        // Never read at all: as without an API server, the hook's start
                        // stands in for t0 (a preStop hook runs once the pod terminates).
                        if !endpoint_assumed && view.as_ref().is_some_and(|v| !v.synced()) {
                            endpoint_assumed = true;
                            model.on_endpoint(ghostip_session::drain::EndpointState::Terminating { since: started });
                            model.unknown(
                                "endpoint",
                                ip.to_string(),
                                format!("the EndpointSlices could not be read ({e}): assumed the IP left the endpoints when the drain started"),
                            );
                        }
                    }
                    SliceUpdate::Changed => {
                        if let Some(since) = gap_since.take() {
                            gap_total += Duration::try_from(now.duration_since(since)).unwrap_or_default();
                        }
                    }
                }
                if let Some(v) = &view {
                    let state = v.state(now, not_before);
                    // A watch that has not listed yet says nothing about the endpoint.
                    if !matches!(state, ghostip_session::drain::EndpointState::Unknown) {
                        model.on_endpoint(state);
                    }
                    for svc in v.services() {
                        if probed.insert(svc.clone())
                            && let Some(c) = &conn
                            && let Some(ns) = &args.pod_namespace
                            && let Some((service, names)) = headless_names(c, ns, &svc, ip, &args.zone, timeout).await
                        {
                            if settings.fallback.is_none()
                                && let Some(f) = audit_budget(&plan.corefiles, &service, &args.zone)
                            {
                                model.set_fallback(f);
                            }
                            if !dns_added {
                                dns_added = true;
                                for (p, caches, ttl) in &plan.paths {
                                    if let Some(dns) = model.part_mut::<DnsLetGo>() {
                                        dns.add_path(p.id(), *caches, *ttl);
                                    }
                                }
                                if plan.paths.is_empty()
                                    && let Some(dns) = model.part_mut::<DnsLetGo>()
                                {
                                    dns.unknown("no DNS path could be found");
                                }
                            }
                            let _ = probe_tx.send(ProbeCommand::Burst {
                                service: ServiceKey::new(ns.clone(), svc.clone()),
                                names,
                                until: bound,
                            }).await;
                        }
                    }
                }
            }
            Some(ev) = probe_rx.recv() => {
                dns_queries += 1;
                if let Some(id) = path_ids.get(ev.observation.path.0 as usize) {
                    let t0 = model.t0();
                    if let Some(dns) = model.part_mut::<DnsLetGo>() {
                        dns.on_answer(id, &ev.observation, t0);
                    }
                }
            }
            _ = ticker.tick() => {
                ticks += 1;
                if !agents.is_empty() && ticks % 2 == 1 {
                    let asks = agents.iter().map(|a| agent_answers::ask(&agent_client, a, ip));
                    let answers = futures::future::join_all(asks).await;
                    agent_requests += answers.len() as u64;
                    for (a, r) in agents.iter().zip(answers) {
                        if let Some(nodes) = model.part_mut::<NodesLetGo>() {
                            nodes.on_node(&a.node, r);
                        }
                    }
                }
                if !cz_clients.is_empty() && ticks % 2 == 1 {
                    let at = crate::clock::wall_now();
                    let bounds = crate::layers::channelz::reader::ReadBounds {
                        deadline: timeout.min(Duration::from_secs(2)),
                        ..Default::default()
                    };
                    let reads: Vec<(String, Result<ClientReport, String>)> = futures::stream::iter(&cz_clients)
                        .map(|o| {
                            let bounds = bounds.clone();
                            async move {
                                let name = format!("{}/{}", o.namespace, o.name);
                                let r = match &o.channelz {
                                    Ok(addr) => crate::layers::channelz::reader::read(*addr, &bounds)
                                        .await
                                        .map(|r| ClientReport { read_at: at, holding: holders(&r, ip) })
                                        .map_err(|e| e.to_string()),
                                    Err(e) => Err(e.clone()),
                                };
                                (name, r)
                            }
                        })
                        .buffer_unordered(4)
                        .collect()
                        .await;
                    if let Some(part) = model.part_mut::<ClientsLetGo>() {
                        for (name, r) in reads {
                            part.on_client(&name, r);
                        }
                    }
                }
                if let Some(c) = model.part_mut::<ConnectionsLetGo>() {
                    match count_connections() {
                        Ok(n) => c.on_count(crate::clock::wall_now(), n),
                        Err(e) => c.unknown(e),
                    }
                }
            }
        }
        let now = crate::clock::wall_now();
        let d = model.decide(now);
        if d.release.is_some() {
            break d;
        }
    };
    cancel.cancel();
    let finished = crate::clock::wall_now();
    if let Some(since) = gap_since {
        gap_total += Duration::try_from(finished.duration_since(since)).unwrap_or_default();
    }
    let release = decision.release.unwrap_or(Release::Bound);
    let line = DrainLine {
        event: "drain-wait",
        pod: pod_key.as_ref().map(|(ns, n)| format!("{ns}/{n}")),
        ip,
        started,
        finished,
        waited_s: Duration::try_from(finished.duration_since(started))
            .unwrap_or_default()
            .as_secs_f64(),
        max_wait_s: max_wait.as_secs_f64(),
        t0: model.t0(),
        release,
        fallback_s: fallback.0.as_secs_f64(),
        fallback_source: fallback.1,
        api_gap_s: gap_total.as_secs_f64(),
        dns_queries,
        agent_requests,
        layers: decision.layers,
        warnings: std::mem::take(&mut settings.warnings),
    };
    log_result(&line);
    if !args.no_event
        && let (Some(c), Some((ns, name))) = (&conn, &pod_key)
        && let Err(e) = record_event(c, ns, name, facts.uid.as_deref(), &line, timeout).await
    {
        tracing::warn!(error = %e, "recording the drain as an Event on the pod");
    }
    line
}

/// One log line: which layers held at the bound are named.
fn log_result(line: &DrainLine) {
    let held: Vec<String> = line
        .layers
        .iter()
        .filter(|l| matches!(l.view, LayerView::Holding { .. }))
        .map(|l| format!("{} {}", l.layer, l.path))
        .collect();
    let unknown: Vec<String> = line
        .layers
        .iter()
        .filter(|l| matches!(l.view, LayerView::Unknown { .. }))
        .map(|l| format!("{} {}", l.layer, l.path))
        .collect();
    match line.release {
        Release::Bound => tracing::warn!(
            ip = %line.ip,
            waited_s = line.waited_s,
            still_held = %held.join(", "),
            "drain bound reached: layers still hold the IP; letting the pod stop"
        ),
        Release::LetGoWithFallback => tracing::info!(
            ip = %line.ip,
            waited_s = line.waited_s,
            unknown = %unknown.join(", "),
            fallback_s = line.fallback_s,
            "every layer that could be checked let go; the fallback covered the rest"
        ),
        Release::LetGo => {
            tracing::info!(ip = %line.ip, waited_s = line.waited_s, "every layer let go of the IP");
        }
        Release::Signal => tracing::warn!(
            ip = %line.ip,
            waited_s = line.waited_s,
            still_held = %held.join(", "),
            "signalled before every layer let go; letting the pod stop"
        ),
    }
}

/// The staleness budget `ghostip audit` computes for the Service from the Corefiles (its DNS
/// chain: the callers' own caches are not known here), as the drain's fallback.
fn audit_budget(corefiles: &[String], service: &Service, zone: &str) -> Option<(Duration, String)> {
    let texts: Vec<&str> = corefiles.iter().map(String::as_str).collect();
    let cfg = ghostip_analysis::audit::AuditConfig {
        zone: zone.to_string(),
        ..ghostip_analysis::audit::AuditConfig::default()
    };
    let b =
        ghostip_analysis::audit::staleness_budget_from_parts(&texts, service, &[], &cfg).ok()?;
    let total = u64::try_from(b.total_s?).ok().filter(|s| *s > 0)?;
    let chain: Vec<String> = b
        .chain
        .iter()
        .map(|c| format!("{} {} s ({})", c.layer, c.seconds, c.source))
        .collect();
    Some((
        Duration::from_secs(total),
        format!(
            "ghostip audit's staleness budget for {}: {}",
            b.service,
            chain.join(" + ")
        ),
    ))
}

/// The DNS names of a headless Service the IP belongs to ([`probe_names`]), with the
/// Service; `None` for a Service that is not headless or cannot be read.
async fn headless_names(
    conn: &Connection,
    ns: &str,
    svc: &str,
    ip: IpAddr,
    zone: &str,
    timeout: Duration,
) -> Option<(Service, Vec<ProbeName>)> {
    let api: Api<Service> = Api::namespaced(conn.client.clone(), ns);
    let s = tokio::time::timeout(timeout, api.get_opt(svc))
        .await
        .ok()?
        .ok()??;
    let record = crate::kube::convert::service_record(&s).ok()?;
    if !record.headless {
        return None;
    }
    let names = probe_names(&record.key.dns_name(zone), ip, &record.ports);
    Some((s, names))
}

/// What drain-wait asks of a headless Service named `base`: A or AAAA by the family of `ip`
/// (an answer of the other family says nothing of this IP), and SRV for each named port
/// (whose targets' addresses come in the additional section). Names that do not parse are
/// left out.
fn probe_names(base: &str, ip: IpAddr, ports: &[ServicePort]) -> Vec<ProbeName> {
    let qtype = if ip.is_ipv4() {
        QueryType::A
    } else {
        QueryType::Aaaa
    };
    let srv = ports.iter().filter_map(|p| {
        let port_name = p.name.as_deref().filter(|n| !n.is_empty())?;
        Some((srv_name(port_name, p.protocol, base), QueryType::Srv))
    });
    std::iter::once((base.to_string(), qtype))
        .chain(srv)
        .filter_map(|(name, qtype)| {
            Some(ProbeName {
                name: Name::from_ascii(name).ok()?,
                qtype,
            })
        })
        .collect()
}

/// Established connections to the listening ports of this network namespace.
fn count_connections() -> Result<usize, String> {
    let mut text = String::new();
    let mut read_any = false;
    for f in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        match std::fs::read_to_string(f) {
            Ok(t) => {
                read_any = true;
                text.push_str(&t);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("reading {f}: {e}")),
        }
    }
    if !read_any {
        return Err("no /proc/self/net/tcp: connections cannot be counted".into());
    }
    let table = SocketTable::parse(&text);
    Ok(table.established_to(&table.listening_ports()))
}

/// The drain as an Event on the pod, its JSON line in an annotation.
async fn record_event(
    conn: &Connection,
    ns: &str,
    name: &str,
    uid: Option<&str>,
    line: &DrainLine,
    timeout: Duration,
) -> anyhow::Result<()> {
    let json = serde_json::to_string(line)?;
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(line.finished.to_string().parse()?);
    let held = line
        .layers
        .iter()
        .filter(|l| matches!(l.view, LayerView::Holding { .. }))
        .count();
    let message = match line.release {
        Release::Bound => format!(
            "drain-wait reached its bound after {:.1} s with {held} layer(s) still holding {}",
            line.waited_s, line.ip
        ),
        Release::Signal => format!(
            "drain-wait was signalled after {:.1} s with {held} layer(s) still holding {}",
            line.waited_s, line.ip
        ),
        _ => format!(
            "drain-wait: every layer let go of {} after {:.1} s",
            line.ip, line.waited_s
        ),
    };
    let ev = Event {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(format!("{name}.drain-")),
            namespace: Some(ns.to_string()),
            annotations: Some(BTreeMap::from([(DRAIN_ANNOTATION.to_string(), json)])),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            uid: uid.map(str::to_string),
            ..Default::default()
        },
        reason: Some(DRAIN_REASON.into()),
        message: Some(message),
        type_: Some(
            if matches!(line.release, Release::Bound | Release::Signal) {
                "Warning".into()
            } else {
                "Normal".into()
            },
        ),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        reporting_component: Some("ghostip-drain-wait".into()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some("ghostip-drain-wait".into()),
            host: None,
        }),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(conn.client.clone(), ns);
    tokio::time::timeout(timeout, api.create(&PostParams::default(), &ev))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} ms", timeout.as_millis()))??;
    Ok(())
}

/// Opted-in gRPC clients drain-wait reads at most (in the pod's namespace).
const MAX_CHANNELZ_CLIENTS: usize = 50;

/// The nodes' datapaths cannot be checked at all (no agent to ask), with why.
fn nodes_unknown(model: &mut DrainModel, why: impl Into<String>) {
    if let Some(nodes) = model.part_mut::<NodesLetGo>() {
        nodes.unknown(why);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_headless_service_is_asked_by_family_and_by_named_port() {
        let base = "web.demo.svc.cluster.local.";
        let port = |name: &str, protocol| ServicePort {
            name: Some(name.to_string()),
            port: 8080,
            protocol,
            node_port: None,
        };
        let ports = [
            port("http", ghostip_core::Protocol::Tcp),
            port("metrics", ghostip_core::Protocol::Udp),
            port("", ghostip_core::Protocol::Tcp),
        ];
        let asked = |ip: &str| -> Vec<String> {
            probe_names(base, ip.parse().unwrap(), &ports)
                .iter()
                .map(|p| format!("{} {}", p.qtype.as_str(), p.name))
                .collect()
        };
        assert_eq!(
            asked("10.244.1.3"),
            [
                "A web.demo.svc.cluster.local.",
                "SRV _http._tcp.web.demo.svc.cluster.local.",
                "SRV _metrics._udp.web.demo.svc.cluster.local.",
            ]
        );
        assert_eq!(
            asked("fd00:10:244::3")[0],
            "AAAA web.demo.svc.cluster.local."
        );
        // No named port: the address query alone.
        assert_eq!(
            probe_names(base, "10.244.1.3".parse().unwrap(), &[]).len(),
            1
        );
    }
}
