//! The commands: each turns parsed flags into a run of the adapters and an [`Outcome`].

mod agent;
mod audit;
mod check;
mod datapath;
pub mod drain_wait;
mod explain;
mod rollout;
mod simulate_load;
pub mod soak_score;
mod watch;
mod whois;

use std::num::NonZeroU32;
use std::time::Duration;

use anyhow::Context as _;
use ghostip_core::engine::EngineConfig;

use crate::cli::{Cli, Command, DnsArgs, GlobalArgs, Scope};
use crate::kube::{ConnectOptions, Connection, KubeError};
use crate::ledger::{Ledger, LedgerError};
use crate::pipeline::ProbeSettings;
use ghostip_session::layers::dns::DnsConfig;
use ghostip_session::layers::dns::names::NameConfig;
use ghostip_session::layers::dns::paths::PathConfig;
use ghostip_session::{ServiceFilter, SessionConfig};
use ghostip_session::{Session, SyncState};

/// How a command ended, when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Converged and clean: exit 0.
    Clean,
    /// Stale endpoints or findings: exit 1.
    Finding,
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<Outcome> {
    cli.command
        .check_output(cli.global.output)
        .map_err(anyhow::Error::msg)?;
    match cli.command {
        Command::Watch(args) => watch::run(&cli.global, args).await,
        Command::Rollout(args) => rollout::run(&cli.global, args).await,
        Command::Check(args) => check::run(&cli.global, args).await,
        Command::Whois(args) => whois::run(&cli.global, args),
        Command::Agent(args) => agent::run(&cli.global, args).await,
        Command::Datapath(args) => datapath::run(&cli.global, args),
        Command::Audit(args) => audit::run(&cli.global, args).await,
        Command::Explain(args) => explain::run(&cli.global, args),
        Command::DrainWait(args) => drain_wait::run(&cli.global, args).await,
        Command::SimulateLoad(args) => simulate_load::run(&cli.global, args),
        Command::SoakScore(args) => soak_score::run(&cli.global, args),
        Command::Completions(args) => {
            crate::printer::write_stdout(&crate::cli::completion_script(args.shell));
            Ok(Outcome::Clean)
        }
    }
}

/// A hint for errors a user can fix.
pub fn hint_for(e: &anyhow::Error) -> Option<&'static str> {
    for cause in e.chain() {
        if let Some(k) = cause.downcast_ref::<KubeError>() {
            return Some(match k {
                KubeError::Kubeconfig { .. } | KubeError::NoConfig { .. } => {
                    "pass --kubeconfig PATH (and --context NAME), or set KUBECONFIG"
                }
                KubeError::Unreachable { .. } | KubeError::Timeout { .. } => {
                    "check that the API server is up and reachable from here (kubectl get --raw /readyz)"
                }
                _ => continue,
            });
        }
        if let Some(l) = cause.downcast_ref::<LedgerError>() {
            if matches!(l, LedgerError::Locked { .. }) {
                return Some(
                    "one writer per ledger: pass another --db, or stop that process (whois, explain and datapath diff only read and may run beside it)",
                );
            }
            let text = l.to_string();
            if text.contains("newer") {
                return Some(
                    "this database was written by a newer ghostip; upgrade, or pass --db with another file",
                );
            }
            return Some(
                "pass --db PATH to use another database file; the existing file was left untouched",
            );
        }
    }
    None
}

pub(crate) async fn kube_connect(g: &GlobalArgs) -> anyhow::Result<Connection> {
    let opts = ConnectOptions {
        kubeconfig: g.kubeconfig.clone(),
        context: g.context.clone(),
    };
    crate::kube::connect(&opts)
        .await
        .context("connecting to Kubernetes")
}

/// Opens an existing ledger without creating, migrating or writing it (whois and other
/// read-only questions).
pub(crate) fn open_ledger_read_only(g: &GlobalArgs) -> anyhow::Result<Ledger> {
    let path = match &g.db {
        Some(p) => p.clone(),
        None => crate::ledger::default_db_path().context("finding the history database")?,
    };
    Ledger::open_read_only(&path).context("opening the history database")
}

/// Opens the ledger for writing (`watch`, `agent`, `rollout`): takes its writer lock for
/// as long as the returned `Ledger` lives, and refuses while another process writes it.
pub(crate) fn open_ledger(g: &GlobalArgs) -> anyhow::Result<Ledger> {
    let path = match &g.db {
        Some(p) => p.clone(),
        None => crate::ledger::default_db_path().context("finding the history database")?,
    };
    Ledger::open(&path).map_err(|e| match e {
        // `ghostip: opening the ledger PATH: another ghostip process (PID n) is writing it`
        LedgerError::Locked { .. } => {
            anyhow::Error::new(e).context(format!("opening the ledger {}", path.display()))
        }
        e => anyhow::Error::new(e).context("opening the history database"),
    })
}

pub(crate) fn probe_settings(d: &DnsArgs, sweep: Duration) -> anyhow::Result<ProbeSettings> {
    Ok(ProbeSettings {
        qps: NonZeroU32::new(d.qps).context("--qps must be at least 1")?,
        interval: d.interval,
        sweep,
        query_timeout: d.query_timeout,
    })
}

/// The Services `-n` and `-l` select.
pub(crate) fn service_filter(scope: &Scope) -> ServiceFilter {
    ServiceFilter {
        namespace: scope.namespace.clone(),
        only: None,
        selector: scope
            .selector
            .as_deref()
            .map(ServiceFilter::parse_selector)
            .unwrap_or_default(),
    }
}

pub(crate) fn session_config(filter: ServiceFilter, record_timeline: bool) -> SessionConfig {
    SessionConfig {
        filter,
        engine: EngineConfig::default(),
        record_timeline,
    }
}

/// The DNS layer as the DNS flags describe it.
pub(crate) fn dns_config(d: &DnsArgs) -> DnsConfig {
    DnsConfig {
        paths: PathConfig {
            pods: !d.no_pod_paths,
            cluster_ip: !d.no_cluster_ip,
            node_local: d.node_local,
            overrides: d.dns_servers.clone(),
            ..PathConfig::default()
        },
        names: NameConfig {
            zone: d.zone.clone(),
            srv: !d.no_srv,
        },
        burst_limit: Duration::from_secs(600),
    }
}

/// A session with every registered layer's model ([`crate::layers::LAYERS`]); `node` for the
/// agent's node-local layers.
pub(crate) fn new_session(
    cfg: SessionConfig,
    sync: SyncState,
    dns: &DnsConfig,
    node: Option<&str>,
) -> Session {
    let mut session = Session::new(cfg, sync);
    crate::layers::register_models(&mut session, &crate::layers::ModelSetup { dns, node });
    session
}

pub(crate) fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    let s = serde_json::to_string_pretty(v).context("encoding JSON output")?;
    crate::printer::write_stdout_line(&s);
    Ok(())
}

/// Resolves on SIGTERM (how Kubernetes starts a graceful shutdown) or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // Kubernetes sends SIGTERM to start a graceful shutdown.
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
