//! Command-line interface definition: kubectl-style global flags and one subcommand per verb.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::LazyLock;

use clap::builder::PossibleValue;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use ghostip_datapath::Format;
use ghostip_logs::Target;
use ghostip_session::layers::dns::budget::DEFAULT_CLUSTER_QPS;

use crate::layers::datapath::readers::Datapath;

/// Measures how long DNS caches, node datapaths and clients keep routing to pod IPs
/// that Kubernetes already removed.
///
/// Exit codes: 0 clean/converged, 1 stale or finding, 2 error.
#[derive(Debug, Parser)]
#[command(name = "ghostip", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The file name under which kubectl finds the binary as its plugin `kubectl ghostip`.
pub const KUBECTL_PLUGIN: &str = "kubectl-ghostip";

impl Cli {
    /// Parses `args` (the program name first) as the command line, with the program named in
    /// help and usage as it was invoked: `kubectl ghostip` when the file is
    /// [`KUBECTL_PLUGIN`] (a symlink or a copy of `ghostip`), else as clap names it. Nothing
    /// else depends on the name: the plugin behaves exactly as `ghostip`.
    pub fn try_parse_invoked<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let mut command = Cli::command();
        if args.first().is_some_and(is_kubectl_plugin) {
            command = command.bin_name("kubectl ghostip");
        }
        let mut matches = command.try_get_matches_from(args)?;
        Cli::from_arg_matches_mut(&mut matches)
    }
}

/// Whether `argv0` names the kubectl plugin file (`kubectl-ghostip`, `.exe` on Windows).
fn is_kubectl_plugin(argv0: &OsString) -> bool {
    Path::new(argv0)
        .file_name()
        .and_then(|f| f.to_str())
        .is_some_and(|f| f.strip_suffix(".exe").unwrap_or(f) == KUBECTL_PLUGIN)
}

/// `ghostip completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The completion script of the whole command line for `shell`.
pub fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "ghostip", &mut out);
    out
}

/// Options every command understands.
#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Output format: `table` (fitted to the terminal), `wide` (full columns) or `json`;
    /// `sarif` is written by `audit` only. Each command's `--help` lists the formats it writes.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = OutputFormat::Table, value_name = "FORMAT")]
    pub output: OutputFormat,
    /// Path of the history database (default: $GHOSTIP_DB, /var/lib/ghostip/ghostip.db as root,
    /// else ~/.local/state/ghostip/ghostip.db).
    #[arg(long, global = true, value_name = "PATH", env = "GHOSTIP_DB")]
    pub db: Option<PathBuf>,
    /// Log filter (tracing syntax, e.g. `info`, `ghostip=debug`).
    #[arg(long, global = true, default_value = "info", env = "GHOSTIP_LOG")]
    pub log: String,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable tables, fitted to the terminal's width (`COLUMNS`, default 80).
    Table,
    /// The tables with full columns, nothing abbreviated or wrapped.
    Wide,
    /// One JSON document (JSON lines for streams).
    Json,
    /// SARIF 2.1.0 (code-scanning tools); only `audit` writes it.
    Sarif,
}

impl OutputFormat {
    /// The name `-o` takes.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Table => "table",
            OutputFormat::Wide => "wide",
            OutputFormat::Json => "json",
            OutputFormat::Sarif => "sarif",
        }
    }

    /// The layout of human output on this process's stdout.
    pub fn layout(self) -> crate::printer::Layout {
        crate::printer::Layout::detect(self == OutputFormat::Wide)
    }
}

/// What `-o` takes for the commands that write a table or JSON.
pub const TABLE_OR_JSON: &[OutputFormat] =
    &[OutputFormat::Table, OutputFormat::Wide, OutputFormat::Json];
/// What `-o` takes for `agent`, whose table is its logs.
pub const AGENT_OUTPUTS: &[OutputFormat] = &[OutputFormat::Table, OutputFormat::Json];
/// What `-o` takes for `audit`.
pub const AUDIT_OUTPUTS: &[OutputFormat] = &[
    OutputFormat::Table,
    OutputFormat::Wide,
    OutputFormat::Json,
    OutputFormat::Sarif,
];
/// What `-o` takes for `watch`, which writes no report (its logs go to stderr).
pub const WATCH_OUTPUTS: &[OutputFormat] = &[OutputFormat::Table];

/// A value parser of `-o` that takes only `formats`, so a command's `--help` and its usage
/// errors name exactly what it writes.
fn output_parser(
    formats: &'static [OutputFormat],
) -> impl clap::builder::TypedValueParser<Value = OutputFormat> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(formats.iter().filter_map(|f| f.to_possible_value()))
        .try_map(|s| OutputFormat::from_str(&s, false))
}

/// `-o` of the commands that write a table or one JSON document.
#[derive(Debug, Args, Clone)]
pub struct TableOrJson {
    /// Output format: `table` (fitted to the terminal), `wide` (full columns), or `json`
    /// (one JSON document).
    #[arg(id = "output", short = 'o', long = "output", global = true, value_name = "FORMAT", default_value = "table", value_parser = output_parser(TABLE_OR_JSON))]
    pub output: OutputFormat,
}

/// `-o` of `ghostip agent`.
#[derive(Debug, Args, Clone)]
pub struct AgentOutput {
    /// Output format: `table` (logs only, on stderr), or `json` (also one JSON object per
    /// event on stdout).
    #[arg(id = "output", short = 'o', long = "output", global = true, value_name = "FORMAT", default_value = "table", value_parser = output_parser(AGENT_OUTPUTS))]
    pub output: OutputFormat,
}

/// `-o` of `ghostip audit`.
#[derive(Debug, Args, Clone)]
pub struct AuditOutput {
    /// Output format: `table` (fitted to the terminal), `wide` (full lines), `json` (one JSON
    /// document), or `sarif` (SARIF 2.1.0, for code-scanning tools).
    #[arg(id = "output", short = 'o', long = "output", global = true, value_name = "FORMAT", default_value = "table", value_parser = output_parser(AUDIT_OUTPUTS))]
    pub output: OutputFormat,
}

/// `-o` of `ghostip watch`: it writes no report, so the flag is hidden and takes `table` only.
#[derive(Debug, Args, Clone)]
pub struct WatchOutput {
    /// Output format (watch writes no report; its logs go to stderr).
    #[arg(id = "output", short = 'o', long = "output", global = true, hide = true, value_name = "FORMAT", default_value = "table", value_parser = output_parser(WATCH_OUTPUTS))]
    pub output: OutputFormat,
}

/// Subcommands.
// Parsed once per process and moved into its command: the agent's many flags cost nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch the truth, keep the ledger and probe every DNS path continuously; serve /metrics.
    Watch(WatchArgs),
    /// Observe a rollout (or trigger it with --restart) and report every stale window per path.
    Rollout(RolloutArgs),
    /// One-shot: judge every DNS path reachable from here against the truth now, and each node's datapath and DNS health where agents run.
    Check(CheckArgs),
    /// Who owned an IP at a given time (and before and after), from the ledger.
    Whois(WhoisArgs),
    /// Per node (DaemonSet): diff this node's load-balancer datapath with the truth, probe its DNS paths; serve /metrics.
    Agent(AgentArgs),
    /// Offline node datapath dumps: print the normalized table, or diff it against a truth file.
    Datapath(DatapathArgs),
    /// Predict from configuration how long callers will dial removed pod IPs, per Service.
    Audit(AuditArgs),
    /// Find connection failures in client logs and explain them with who owned each IP then.
    Explain(ExplainArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(CompletionsArgs),
    /// A pod's preStop hook: block until every layer let go of the pod's IP (bounded), then exit 0.
    DrainWait(DrainWaitArgs),
    /// Simulate the DNS queries and API watch traffic of watch and the agents during a rollout, with and without --cluster-qps.
    SimulateLoad(SimulateLoadArgs),
    /// Score a soak's directory: faults detected, false positives, RSS and CPU over time; exit 1 on a missed fault or a false positive.
    SoakScore(SoakScoreArgs),
}

impl Command {
    /// The command's name on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Watch(_) => "watch",
            Command::Rollout(_) => "rollout",
            Command::Check(_) => "check",
            Command::Whois(_) => "whois",
            Command::Agent(_) => "agent",
            Command::Datapath(_) => "datapath",
            Command::Audit(_) => "audit",
            Command::Explain(_) => "explain",
            Command::Completions(_) => "completions",
            Command::DrainWait(_) => "drain-wait",
            Command::SimulateLoad(_) => "simulate-load",
            Command::SoakScore(_) => "soak-score",
        }
    }

    /// What `-o` takes for this command (the same lists its `--help` shows).
    pub fn outputs(&self) -> &'static [OutputFormat] {
        match self {
            Command::Watch(_) => WATCH_OUTPUTS,
            Command::Audit(_) => AUDIT_OUTPUTS,
            Command::Agent(_) => AGENT_OUTPUTS,
            _ => TABLE_OR_JSON,
        }
    }

    /// Refuses an `-o` the command does not write (given before the command name, where the
    /// global flag takes every format), naming what it takes.
    pub fn check_output(&self, output: OutputFormat) -> Result<(), String> {
        let accepted = self.outputs();
        if accepted.contains(&output) {
            return Ok(());
        }
        let names: Vec<&str> = accepted.iter().map(|f| f.name()).collect();
        let takes = match names.as_slice() {
            [one] => format!("only {one}"),
            [init @ .., last] => format!("{} or {last}", init.join(", ")),
            [] => String::new(),
        };
        let why = match (self, output) {
            (Command::Watch(_), _) => " (watch writes no report; its logs go to stderr)",
            (_, OutputFormat::Sarif) => " (only audit writes sarif)",
            _ => "",
        };
        Err(format!(
            "-o {}: `ghostip {}` takes {takes}{why}",
            output.name(),
            self.name()
        ))
    }
}

/// Namespace selection shared by commands that read many Services.
#[derive(Debug, Args, Clone)]
pub struct Scope {
    /// Namespace to look at (default: all namespaces).
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// All namespaces (the default when -n is not given).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Label selector on Services, e.g. `app=web,tier!=db`.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
}

/// DNS probing options shared by watch, rollout and check.
#[derive(Debug, Args, Clone)]
pub struct DnsArgs {
    /// Extra DNS server to probe as its own path (repeatable), e.g. 10.0.0.10 or 10.0.0.10:5353.
    #[arg(long = "dns-server", value_name = "IP[:PORT]", value_parser = parse_dns_server)]
    pub dns_servers: Vec<SocketAddr>,
    /// Probe NodeLocal DNSCache at this address as a path.
    #[arg(long, value_name = "IP[:PORT]", value_parser = parse_dns_server)]
    pub node_local: Option<SocketAddr>,
    /// Do not probe CoreDNS pods at their pod IPs.
    #[arg(long)]
    pub no_pod_paths: bool,
    /// Do not probe the kube-dns ClusterIP.
    #[arg(long)]
    pub no_cluster_ip: bool,
    /// DNS query budget of this process in queries per second (1 to 1000); never exceeded.
    /// Every agent has its own: the cluster's DNS sees up to this times the number of nodes.
    #[arg(long, default_value_t = 100, value_name = "QPS", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_QPS)))]
    pub qps: u32,
    /// Probe interval while a change is converging (50ms to 1m).
    #[arg(long, default_value = "250ms", value_parser = parse_probe_interval, value_name = "DURATION")]
    pub interval: Duration,
    /// Timeout of one DNS query (10ms to 30s).
    #[arg(long, default_value = "1s", value_parser = parse_query_timeout, value_name = "DURATION")]
    pub query_timeout: Duration,
    /// Cluster DNS zone.
    #[arg(long, default_value = "cluster.local", value_name = "ZONE")]
    pub zone: String,
    /// Do not ask SRV names (`_port._proto.service`) of named ports: their answers are then
    /// not judged (one query less per named port, path and probe round).
    #[arg(long)]
    pub no_srv: bool,
}

/// `ghostip watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Services to watch.
    #[command(flatten)]
    pub scope: Scope,
    /// DNS probing.
    #[command(flatten)]
    pub dns: DnsArgs,
    /// Address of the HTTP endpoint (/metrics, /healthz, /readyz): `IP:PORT`, IPv6 as
    /// `[IP]:PORT` (brackets around IPv4 work too), or `:PORT` for every address of both
    /// families.
    #[arg(long, default_value = "127.0.0.1:9753", value_name = "ADDR", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Who may read the HTTP endpoint.
    #[command(flatten)]
    pub auth: AuthArgs,
    /// Period of the slow sweep over every headless Service name (1s to 24h).
    #[arg(long, default_value = "30s", value_parser = parse_sweep, value_name = "DURATION")]
    pub sweep: Duration,
    /// DNS query budget of every ghostip process in the cluster together (watch and all the
    /// agents), queries per second; 0 turns it off. watch takes 10 % of it, at most its
    /// --qps. Default 3366: 5 % of what the two CoreDNS replicas kubeadm deploys serve (33 669
    /// internal queries per second each, CPU-bound on 2 vCPUs). Give every process the same
    /// value.
    #[arg(long, default_value_t = DEFAULT_CLUSTER_QPS, value_name = "QPS", value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_CLUSTER_QPS)))]
    pub cluster_qps: u32,
    /// How long the ledger keeps closed history.
    #[arg(long, default_value = "7d", value_parser = parse_duration, value_name = "DURATION")]
    pub retention: Duration,
    /// Exit (code 2) once writes to the ledger have failed this long without a success
    /// (disk full, I/O error, corruption). From the first failure /readyz answers 503; failed
    /// writes are kept in memory (up to 8192, later ones dropped and counted in
    /// ghostip_ledger_write_errors_total) and retried every second.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub ledger_failure_exit_after: Duration,
    /// Reading gRPC clients' balancers through channelz.
    #[command(flatten)]
    pub channelz: ChannelzArgs,
    /// Scrape each CoreDNS pod's /metrics this often (1s to 1h; 0 turns it off): the
    /// endpoints of the kube-dns Service at its port named `metrics`, else 9153. Each scrape
    /// takes at most 2 s and 4 MiB; a pod's scrapes of the last 30 minutes are kept (at most
    /// 240). 15 s puts a scrape within 15 s of each end of a DNS finding's window, where
    /// CoreDNS's dns_programming_duration p99 is read beside it.
    #[arg(long, default_value = "15s", value_parser = parse_coredns_interval, value_name = "DURATION")]
    pub coredns_metrics_interval: Duration,
    /// Output format.
    #[command(flatten)]
    pub output: WatchOutput,
}

/// The channelz layer's bounds: which gRPC clients' balancers `watch` reads, how often, how much.
///
/// Only pods that opt in are read: the annotation `ghostip.io/channelz-port: "<port>"` or a
/// container port named `channelz` (docs/CHANNELZ.md).
#[derive(Debug, Clone, Args)]
pub struct ChannelzArgs {
    /// Read each opted-in client pod's channelz at most this often (1s to 1h). 10 s sees a
    /// stale subchannel well within grpc-go's 30 s re-resolution interval.
    #[arg(long, default_value = "10s", value_parser = parse_channelz_interval, value_name = "DURATION")]
    pub channelz_interval: Duration,
    /// Deadline of one read of one client, connect and every request included (100ms to
    /// 30s); a client that answers slower is an error for that pod only.
    #[arg(long, default_value = "2s", value_parser = parse_channelz_deadline, value_name = "DURATION")]
    pub channelz_deadline: Duration,
    /// Subchannels read per client and read, over all its channels (1 to 100000); a read
    /// that reaches it stops there, says so, and is not taken as the client closing
    /// channels. 2000 bounds a read to ~2000 small requests.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000), value_name = "N")]
    pub channelz_max_subchannels: u32,
    /// Opted-in client pods read at most (1 to 100000); more are named in the log and not
    /// read.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000), value_name = "N")]
    pub channelz_max_clients: u32,
    /// Client reads in flight at once (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64), value_name = "N")]
    pub channelz_concurrency: u32,
    /// List the running pods for opted-in clients this often (5s to 1h; one paged list of
    /// every running pod each time). A client started less than this before a rollout may
    /// not be read during it.
    #[arg(long, default_value = "60s", value_parser = parse_channelz_discovery, value_name = "DURATION")]
    pub channelz_discovery_interval: Duration,
    /// Channelz gRPC requests per second, summed over every client (1 to 100000; each
    /// GetTopChannels page and each GetSubchannel is one; a read's GetSubchannel requests go
    /// in batches of up to 32, so one second may hold 32 more). 500 covers 500 clients of up to 9
    /// subchannels each once per 10 s interval (500 × 10 requests / 10 s); past that, reads
    /// stretch (the effective interval grows, shown in /status and
    /// ghostip_channelz_effective_interval_seconds) and no client is skipped. It bounds the
    /// load watch puts on the clients and its own CPU, not the API server's.
    #[arg(long, default_value_t = DEFAULT_CHANNELZ_QPS, value_parser = clap::value_parser!(u32).range(1..=100_000), value_name = "N")]
    pub channelz_qps: u32,
}

/// `--channelz-qps`'s default: 500 clients × (1 page + 9 subchannels) per 10 s.
pub const DEFAULT_CHANNELZ_QPS: u32 = 500;

/// `--auth` of the HTTP endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// `required` when listening on an address other than loopback, else `none`.
    Auto,
    /// Every request but /healthz and /readyz carries a bearer token that the API server
    /// authenticates (TokenReview) and authorizes for the path (SubjectAccessReview).
    Required,
    /// No authentication.
    None,
}

/// Authentication of the HTTP endpoints, as kube-rbac-proxy does it.
#[derive(Debug, Args, Clone)]
pub struct AuthArgs {
    /// Authentication of requests other than /healthz and /readyz: a bearer token checked
    /// with a TokenReview and a SubjectAccessReview (`get` on the path as a non-resource
    /// URL: /metrics, /status, /v1/ips). `auto`: required unless listening on loopback.
    #[arg(long = "auth", value_enum, default_value_t = AuthMode::Auto, value_name = "MODE")]
    pub mode: AuthMode,
    /// Audience the bearer tokens must be issued for (repeatable), e.g. `ghostip` for
    /// tokens from `kubectl create token NAME --audience ghostip`: a token captured on the
    /// way to this endpoint is then useless against the API server. Default: the API
    /// server's own audiences.
    #[arg(long = "auth-audience", value_name = "AUDIENCE")]
    pub audiences: Vec<String>,
}

impl AuthArgs {
    /// Whether requests to an endpoint on `listen` must be authenticated.
    pub fn required(&self, listen: SocketAddr) -> bool {
        match self.mode {
            AuthMode::Required => true,
            AuthMode::None => false,
            AuthMode::Auto => !listen.ip().to_canonical().is_loopback(),
        }
    }
}

/// `ghostip rollout`.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// The workload, as `deployment/NAME` (also `deploy/`, `statefulset/`, `sts/`, `daemonset/`, `ds/`).
    #[arg(value_name = "KIND/NAME")]
    pub workload: String,
    /// Namespace of the workload.
    #[arg(short = 'n', long, default_value = "default", value_name = "NS")]
    pub namespace: String,
    /// Trigger the rollout (like `kubectl rollout restart`) instead of waiting for one.
    #[arg(long)]
    pub restart: bool,
    /// Give up after this long (the report then marks unconverged paths).
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    /// Keep probing this long after the rollout finished, so slow caches can converge.
    #[arg(long, default_value = "90s", value_parser = parse_duration, value_name = "DURATION")]
    pub settle: Duration,
    /// Write a self-contained HTML timeline to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// DNS probing.
    #[command(flatten)]
    pub dns: DnsArgs,
    /// Output format.
    #[command(flatten)]
    pub output: TableOrJson,
}

/// `ghostip check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Services to check.
    #[command(flatten)]
    pub scope: Scope,
    /// DNS probing.
    #[command(flatten)]
    pub dns: DnsArgs,
    /// The node agents whose findings the check includes.
    #[command(flatten)]
    pub agents: AgentsArgs,
    /// Give up on the API server after this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub request_timeout: Duration,
    /// Output format.
    #[command(flatten)]
    pub output: TableOrJson,
}

/// `--datapath` of `ghostip agent`: `auto`, or a datapath the agent reads, named by its path
/// kind (the formats of `ghostip_datapath::FORMATS` that have an agent reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatapathChoice {
    /// Detect: try the local datapaths in their `auto` order, keep the first with frontends.
    Auto,
    /// This datapath.
    Read(Datapath),
}

impl ValueEnum for DatapathChoice {
    fn value_variants<'a>() -> &'a [Self] {
        static CHOICES: LazyLock<Vec<DatapathChoice>> = LazyLock::new(|| {
            std::iter::once(DatapathChoice::Auto)
                .chain(Datapath::all().map(DatapathChoice::Read))
                .collect()
        });
        &CHOICES
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            DatapathChoice::Auto => {
                let tried: Vec<&str> = Datapath::auto_order().map(Datapath::as_str).collect();
                PossibleValue::new("auto").help(format!(
                    "Detect: cilium when its services map is pinned in --cilium-bpf-dir \
                     (read from the maps), else {} (keeps the first with service frontends)",
                    tried.join(", then "),
                ))
            }
            DatapathChoice::Read(d) => PossibleValue::new(d.as_str()).help(d.help()),
        })
    }
}

/// `--cilium-read` of `ghostip agent`: how the Cilium datapath is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CiliumRead {
    /// Cilium's pinned BPF load-balancer maps, opened directly.
    Maps,
    /// `cilium-dbg service list -o json` in the Cilium agent pod (Kubernetes exec API).
    Exec,
}

/// `ghostip agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Name of the node this agent runs on (the DaemonSet sets it from the downward API).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: String,
    /// Which load-balancer datapath to read.
    #[arg(long, value_enum, default_value_t = DatapathChoice::Auto)]
    pub datapath: DatapathChoice,
    /// Address of the HTTP endpoint (/metrics, /healthz, /readyz, /status, /v1/ips/IP):
    /// `IP:PORT`, IPv6 as `[IP]:PORT` (brackets around IPv4 work too, so
    /// `[$(HOST_IP)]:9754` suits both families), or `:PORT` for every address.
    #[arg(long, default_value = "127.0.0.1:9754", value_name = "ADDR", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Who may read the HTTP endpoint.
    #[command(flatten)]
    pub auth: AuthArgs,
    /// Average CPU the datapath reads may use, in percent of one core; the full-audit
    /// period adapts to the measured cost of a read to stay under it.
    #[arg(long, default_value_t = 2.0, value_name = "PERCENT")]
    pub max_cpu: f64,
    /// Shortest period between two full audits of the datapath; at least 1s (a read's
    /// measured cost leaves out the process start: audits more often overran --max-cpu).
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub min_audit_period: Duration,
    /// Longest period between two full audits, however cheap they are; not below
    /// --min-audit-period.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub max_audit_period: Duration,
    /// Interval of the re-reads after a truth change, until the datapath converged (above
    /// zero; the CPU budget of --max-cpu still paces them).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub reread_interval: Duration,
    /// Longest time re-reads follow one truth change (then the periodic audit takes over).
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub reread_for: Duration,
    /// Kill a datapath reader (its whole process group) that runs longer than this; its
    /// output is read until then and at most 1 GiB of it (8 times the largest dump
    /// benchmarked; 150 000 endpoints in iptables-save are about 50 MB). The CPU a killed read
    /// used counts against --max-cpu.
    #[arg(long, default_value = "120s", value_parser = parse_duration, value_name = "DURATION")]
    pub read_timeout: Duration,
    /// How long the datapath may lag the truth before it is over its expected lag
    /// (kube-proxy's minSyncPeriod plus one sync).
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub datapath_lag: Duration,
    /// Pods of this namespace are not clients of the conntrack layer: their flows are
    /// ghostip's own (the watch asks every CoreDNS pod straight, so a CoreDNS pod that left
    /// keeps its probes' entries for up to 120 s). Repeat for more namespaces; the Helm
    /// chart and deploy/ pass the watch's namespace.
    #[arg(
        long = "conntrack-ignore-namespace",
        default_value = "ghostip",
        value_name = "NAMESPACE"
    )]
    pub conntrack_ignore_namespaces: Vec<String>,
    /// Interval of the DNS health probe of the kube-dns ClusterIP through this node's
    /// datapath (100ms to 1h). Each round also asks one CoreDNS pod IP in turn when the
    /// share of --cluster-qps pays for it (every round up to 3029 nodes at the default), and
    /// always after a failing ClusterIP probe. At 2s a node whose datapath still sends half
    /// the ClusterIP's queries to a dead CoreDNS pod is flagged within 9s (2 failing probes
    /// of 4, plus the 1s query timeout): the 10s target.
    #[arg(long, default_value = "2s", value_parser = parse_dns_health_interval, value_name = "DURATION")]
    pub dns_health_interval: Duration,
    /// DNS query budget of every ghostip process in the cluster together (watch and all the
    /// agents), queries per second; 0 turns it off (each agent probes every DNS path every
    /// round and every burst, up to its --qps). The agents share 90 % of it equally (watch
    /// keeps 10 %), each at most its --qps; the ClusterIP probe runs every
    /// --dns-health-interval whatever the share, and a headless Service's bursts are probed
    /// by about 3 nodes chosen by hashing its name with the node's. Default 3366: 5 % of what
    /// the two CoreDNS replicas kubeadm deploys serve (33 669 internal queries per second
    /// each, CPU-bound on 2 vCPUs); 5000 nodes then send 3000/s at rest. Give every process
    /// the same value.
    #[arg(long, default_value_t = DEFAULT_CLUSTER_QPS, value_name = "QPS", value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_CLUSTER_QPS)))]
    pub cluster_qps: u32,
    /// Name of the agents' DaemonSet: its status.desiredNumberScheduled is the node count
    /// that shares --cluster-qps (one watch of one object, by name). Until it is read, or when
    /// it cannot be, the agent probes only the ClusterIP (and a pod IP after a failure) and
    /// no burst.
    #[arg(long, default_value = "ghostip-agent", value_name = "NAME")]
    pub daemonset: String,
    /// Namespace of the agents' DaemonSet (the DaemonSet sets POD_NAMESPACE from the downward
    /// API).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "ghostip-agent",
        value_name = "NS"
    )]
    pub daemonset_namespace: String,
    /// How --datapath cilium reads Cilium's load-balancer table: `maps` opens its pinned BPF
    /// maps under --cilium-bpf-dir (needs CAP_BPF and the host's bpffs; no Kubernetes
    /// access); `exec` runs `cilium-dbg service list -o json` in this node's Cilium agent pod
    /// through the exec API (needs `pods/exec` on the Cilium pods, not granted by default).
    /// Maps are read with BPF_MAP_LOOKUP_BATCH (Linux 5.6+), 4096 entries per call at first,
    /// doubled up to the map's max_entries when one hash bucket holds more; a kernel that
    /// refuses it is read key by key (2 syscalls a key). A map read is repeated when Cilium
    /// replaced a map meanwhile, at most 3 times, and one map's read stops after 2 x its
    /// max_entries + 1024 entries (a key-by-key walk restarts when the current key is
    /// deleted); both then fail the read rather than give a mixed table.
    #[arg(long, value_enum, default_value = "maps", value_name = "HOW")]
    pub cilium_read: CiliumRead,
    /// Directory where Cilium pins its BPF maps: read with --cilium-read maps, and looked at
    /// by --datapath auto, which picks Cilium when its services map is pinned there.
    #[arg(long, default_value = crate::layers::datapath::cilium_maps::DEFAULT_PIN_DIR, value_name = "DIR")]
    pub cilium_bpf_dir: PathBuf,
    /// Namespace of the Cilium agent pods (with --cilium-read exec).
    #[arg(long, default_value = "kube-system", value_name = "NS")]
    pub cilium_namespace: String,
    /// Label selector of the Cilium agent pods (with --cilium-read exec).
    #[arg(long, default_value = "k8s-app=cilium", value_name = "SELECTOR")]
    pub cilium_selector: String,
    /// Container of the Cilium agent pod to exec into (with --cilium-read exec).
    #[arg(long, default_value = "cilium-agent", value_name = "NAME")]
    pub cilium_container: String,
    /// kube-proxy's metrics on this node (`http://HOST:PORT/PATH`, plain HTTP), scraped every
    /// --kube-proxy-scrape-period for its last sync and its network-programming latency;
    /// `off` disables. The default is kube-proxy's own --metrics-bind-address (the agent is
    /// hostNetwork). One scrape reads at most 4 MiB within 2s (kube-proxy serves about
    /// 100 KB). kube-proxy is `component-stalled` when a Service change waited longer than
    /// --kube-proxy-min-sync-period + the scrape period + one sync for a sync; once its
    /// endpoint refuses after it answered (the process is gone), longer than
    /// --kube-proxy-min-sync-period + one sync (a change brings the next scrape forward);
    /// never while it never answered.
    #[arg(
        long,
        default_value = "http://127.0.0.1:10249/metrics",
        value_name = "URL"
    )]
    pub kube_proxy_metrics: String,
    /// Period of the kube-proxy scrapes (1s to 5m); part of how long a Service change may
    /// wait for kube-proxy's sync before it is stalled.
    #[arg(long, default_value = "10s", value_parser = parse_scrape_period, value_name = "DURATION")]
    pub kube_proxy_scrape_period: Duration,
    /// kube-proxy's --min-sync-period (its config's minSyncPeriod): the longest it holds a
    /// change before syncing. Set it to the cluster's value when changed there.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub kube_proxy_min_sync_period: Duration,
    /// How long the ledger keeps closed history.
    #[arg(long, default_value = "7d", value_parser = parse_duration, value_name = "DURATION")]
    pub retention: Duration,
    /// Exit (code 2) once writes to the ledger have failed this long without a success
    /// (disk full, I/O error, corruption). From the first failure /readyz answers 503; failed
    /// writes are kept in memory (up to 8192, later ones dropped and counted in
    /// ghostip_ledger_write_errors_total) and retried every second.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub ledger_failure_exit_after: Duration,
    /// DNS probing of this node's DNS paths.
    #[command(flatten)]
    pub dns: DnsArgs,
    /// Output format.
    #[command(flatten)]
    pub output: AgentOutput,
}

/// `ghostip drain-wait`: run as the pod's `preStop` exec hook. It always exits 0 (a failing
/// preStop hook must not make termination worse); what it waited for and why goes to one JSON
/// line on stdout. Its flag values never fail the parse: a value it cannot read is named in the
/// line's `warnings` and its default used instead ([`Given`]); an IP it cannot read is an
/// `error` and no wait.
#[derive(Debug, Args)]
pub struct DrainWaitArgs {
    /// The pod's IP (the downward API's `status.podIP`).
    #[arg(long, env = "POD_IP", value_name = "IP", value_parser = given(|s| s.trim().parse::<IpAddr>().map_err(|_| format!("`{s}` is not an IP address"))))]
    pub ip: Option<Given<IpAddr>>,
    /// The pod's name, to read its grace period and to attach the result as an Event.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub pod_name: Option<String>,
    /// The pod's namespace (where its EndpointSlices are).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS")]
    pub pod_namespace: Option<String>,
    /// Never wait longer than this (default: the pod's terminationGracePeriodSeconds minus
    /// --margin, or 20 s when the pod cannot be read). A bound at or past the grace period
    /// (the kubelet would kill the hook first) is lowered to the grace period minus --margin,
    /// and one over 24 h without a known grace period to 20 s, with a warning.
    #[arg(long, value_parser = given(parse_duration), value_name = "DURATION")]
    pub max_wait: Option<Given<Duration>>,
    /// What the default --max-wait leaves of the grace period for the container's own
    /// shutdown after SIGTERM.
    #[arg(long, default_value = "10s", value_parser = given(parse_duration), value_name = "DURATION")]
    pub margin: Given<Duration>,
    /// Also wait until no established TCP connection to the pod's listening ports remains
    /// (pooled clients moved away), read from the pod's network namespace.
    #[arg(long)]
    pub wait_connections: bool,
    /// Stand-in for a layer that cannot be checked, counted from when the IP left the
    /// endpoints (default: the staleness budget `ghostip audit` computes for the pod's
    /// Service from the cluster's Corefiles, else 30 s).
    #[arg(long, value_parser = given(parse_duration), value_name = "DURATION")]
    pub fallback: Option<Given<Duration>>,
    /// Namespace of the per-node agents asked whether their node still routes to the IP.
    #[arg(long, default_value = "ghostip-agent", value_name = "NS")]
    pub agent_namespace: String,
    /// Label selector of the per-node agent pods.
    #[arg(
        long,
        default_value = "app.kubernetes.io/name=ghostip-agent",
        value_name = "SELECTOR"
    )]
    pub agent_selector: String,
    /// Port of the agents' HTTP endpoint (on their node's IP).
    #[arg(long, default_value_t = 9754, value_name = "PORT")]
    pub agent_port: u16,
    /// An agent to ask, as NODE=IP:PORT (repeatable), instead of finding the agent pods.
    #[arg(long = "agent", value_name = "NODE=IP:PORT", value_parser = parse_agent)]
    pub agents: Vec<(String, SocketAddr)>,
    /// Do not ask the agents (node datapaths are then judged by the fallback).
    #[arg(long, conflicts_with = "agents")]
    pub no_agents: bool,
    /// Global DNS query budget of this drain in queries per second (1 to 1000); never
    /// exceeded.
    #[arg(long, default_value = "20", value_name = "QPS", value_parser = given(parse_drain_qps))]
    pub qps: Given<u32>,
    /// Interval of DNS probes and agent polls while waiting (100ms to 1m).
    #[arg(long, default_value = "500ms", value_parser = given(|s| parse_duration_in(s, Duration::from_millis(100), Duration::from_secs(60))), value_name = "DURATION")]
    pub interval: Given<Duration>,
    /// Timeout of one DNS query or agent request (10ms to 30s).
    #[arg(long, default_value = "1s", value_parser = given(parse_query_timeout), value_name = "DURATION")]
    pub request_timeout: Given<Duration>,
    /// Cluster DNS zone.
    #[arg(long, default_value = "cluster.local", value_name = "ZONE")]
    pub zone: String,
    /// Do not record the result as an Event on the pod.
    #[arg(long)]
    pub no_event: bool,
}

/// A flag value as given: read, or kept with why it could not be. `drain-wait` takes its flags
/// this way, since a preStop hook must not fail on a value it cannot read: it names the value
/// in its JSON line and uses the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Given<T> {
    /// The value, read.
    Ok(T),
    /// A value that could not be read, and why.
    Bad(String),
}

impl<T: Clone> Given<T> {
    /// The value, or `default` with the reason pushed to `warnings` (naming the flag).
    pub fn or_default(&self, flag: &str, default: T, warnings: &mut Vec<String>) -> T {
        match self {
            Given::Ok(v) => v.clone(),
            Given::Bad(why) => {
                warnings.push(format!("{flag}: {why}; using the default"));
                default
            }
        }
    }
}

/// A value parser that never fails: `parse`'s error becomes [`Given::Bad`].
fn given<T: Clone + Send + Sync + 'static>(
    parse: impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
) -> impl Fn(&str) -> Result<Given<T>, String> + Clone + Send + Sync + 'static {
    move |s| Ok(parse(s).map_or_else(Given::Bad, Given::Ok))
}

/// `drain-wait --qps`: 1 to [`MAX_QPS`].
fn parse_drain_qps(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(q) if (1..=MAX_QPS).contains(&q) => Ok(q),
        _ => Err(format!("`{s}` is out of range: expected 1 to {MAX_QPS}")),
    }
}

fn parse_agent(s: &str) -> Result<(String, SocketAddr), String> {
    let (node, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NODE=IP:PORT"))?;
    if node.is_empty() {
        return Err(format!("`{s}`: the node name is empty"));
    }
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| format!("`{s}`: {addr} is not IP:PORT ({e})"))?;
    Ok((node.to_string(), addr))
}

/// `ghostip whois`.
#[derive(Debug, Args)]
pub struct WhoisArgs {
    /// The IP address.
    #[arg(value_name = "IP")]
    pub ip: std::net::IpAddr,
    /// When: an RFC 3339 time, `now`, or relative like `-5m`, `-30s`, `-2h`.
    #[arg(
        long,
        default_value = "now",
        value_name = "TIME",
        allow_hyphen_values = true
    )]
    pub at: String,
    /// Output format.
    #[command(flatten)]
    pub output: TableOrJson,
}

/// `ghostip soak-score`.
#[derive(Debug, Args)]
pub struct SoakScoreArgs {
    /// The soak's directory: `ground-truth.json`, `ledgers/*.db`, and
    /// `metrics/<source>/<unix-seconds>.prom` (docs/SOAK.md).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Also write the score as a self-contained SVG chart to this file: faults as lanes,
    /// findings as ticks, RSS per process as lines.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Largest `ground-truth.json` or scraped `.prom` file read (bytes, or with a Ki, Mi, Gi
    /// suffix); a larger one is an error naming it. A scrape of the watch at 150 000
    /// endpoints is under 1 MiB, so the default leaves room to spare (docs/SOAK.md).
    #[arg(long, value_name = "SIZE", default_value = "64Mi", value_parser = crate::input::parse_size)]
    pub max_input_size: u64,
    /// Output format.
    #[command(flatten)]
    pub output: TableOrJson,
}

/// `ghostip audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Manifest file, directory or `-` (stdin) to audit (YAML, multi-document, Helm output,
    /// `kubectl get -o json` Lists, raw Corefiles); repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "PATH",
        required_unless_present = "cluster"
    )]
    pub files: Vec<PathBuf>,
    /// Process directories given with -f recursively (each file once, symlink loops noted
    /// on stderr and not followed).
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Largest file read with -f (bytes, or with a Ki, Mi, Gi suffix), standard input
    /// included; a larger one is an input that could not be read, and a stream is read no
    /// further than this. The default is over 4 times `kubectl get deploy,sts,svc -A -o json`
    /// of 10 000 Services (docs/AUDIT.md).
    #[arg(long, value_name = "SIZE", default_value = "512Mi", value_parser = crate::input::parse_size)]
    pub max_input_size: u64,
    /// Read the objects from the cluster (get/list only) instead of files.
    #[arg(long, conflicts_with = "files")]
    pub cluster: bool,
    /// Services to audit; -n also places manifest objects without a namespace (default: `default`).
    #[command(flatten)]
    pub scope: Scope,
    /// Cluster DNS zone.
    #[arg(long, default_value = "cluster.local", value_name = "ZONE")]
    pub zone: String,
    /// Give up on the API server after this long (--cluster).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub request_timeout: Duration,
    /// Output format.
    #[command(flatten)]
    pub output: AuditOutput,
}

/// `ghostip explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Log files: plain text, JSON lines, `kubectl logs --timestamps` output, gzip (also
    /// rotated, concatenated members). `-` or none: standard input.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Pod history for clusters without a ghostip ledger: Pod JSON documents, e.g. the output
    /// of `kubectl get pods -A -o json --watch --output-watch-events` recorded during the
    /// incident, and/or `kubectl get pods -A -o json` (used instead of --db).
    #[arg(long, value_name = "FILE")]
    pub truth_history: Option<PathBuf>,
    /// Largest --truth-history read (bytes, or with a Ki, Mi, Gi suffix); a larger file is
    /// refused unread and a stream is read no further than this. The default holds a watch of
    /// 1 000 000 Pod events (about 540 MB) with room to spare (docs/EXPLAIN.md).
    #[arg(long, value_name = "SIZE", default_value = "1Gi", value_parser = crate::input::parse_size)]
    pub max_input_size: u64,
    /// Only failures at or after this time: RFC 3339, `now`, or relative like `-2h`.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only failures before this time: RFC 3339, `now`, or relative like `-30m`.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Year of timestamps that carry none (syslog `Mar 19 08:02:43`, klog `E0319 …`); without
    /// it the year is guessed from the log and the times are marked approximate.
    #[arg(long, value_name = "YEAR")]
    pub year: Option<i16>,
    /// Time zone of timestamps that carry none: `UTC`, an offset like `+02:00`, or an IANA
    /// name like `Europe/Berlin`; without it UTC is assumed and the times are marked
    /// approximate.
    #[arg(long, value_name = "TZ")]
    pub tz: Option<String>,
    /// Threads that scan each regular, uncompressed log file (4 MiB segments of it at once,
    /// each thread reading into one reused buffer of about that size; the result is the same as
    /// with one). Gzip files and standard input are read by one thread. Default: the available
    /// cores, at most 8.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
    /// Accepted for scripts written for earlier versions, and ignored: every file is read with
    /// plain reads (a memory-mapped file truncated under the scan ended the process with
    /// SIGBUS; a read of it is short, and reported).
    #[arg(long, value_enum, default_value_t = MmapMode::Auto, value_name = "WHEN", hide = true)]
    pub mmap: MmapMode,
    /// Only failures aimed at this address (their target, or the DNS server a lookup asked):
    /// `IP` or `IP:PORT`, IPv6 as `[::1]:8080` or bare. For an IPv4 address only the lines
    /// that spell it and the multi-line events around them (at most 40 lines each way) are
    /// examined, which is faster on a large log; an event whose parts lie further from every
    /// line naming the address may be joined differently than in the full scan.
    #[arg(long, value_name = "IP[:PORT]", value_parser = parse_target)]
    pub target: Option<Target>,
    /// Output format.
    #[command(flatten)]
    pub output: TableOrJson,
}

/// Parses `explain --target`: `IP` or `IP:PORT`, IPv6 as `[::1]:8080` or bare.
pub fn parse_target(s: &str) -> Result<Target, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(Target {
            ip: a.ip(),
            port: Some(a.port()),
        });
    }
    s.parse::<std::net::IpAddr>()
        .map(|ip| Target { ip, port: None })
        .map_err(|_| format!("`{s}` is not an IP or IP:PORT"))
}

/// `explain --mmap` (ignored: every file is read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MmapMode {
    /// Formerly: map settled regular files. Now: read them.
    Auto,
    /// Read every file.
    Never,
}

/// Parses `IP` or `IP:PORT` (port 53 by default), IPv6 as `[::1]:53` or bare.
pub fn parse_dns_server(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<std::net::IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("`{s}` is not an IP or IP:PORT"))
}

/// The highest `--qps`: one process's DNS query budget.
pub const MAX_QPS: u32 = 1000;

/// The highest `--cluster-qps`: ten CoreDNS instances' worth of queries.
pub const MAX_CLUSTER_QPS: u32 = 1_000_000;

/// The most nodes `simulate-load` takes: twice the 5 000 Kubernetes supports.
pub const MAX_SIMULATED_NODES: u32 = 10_000;

/// The most pods `simulate-load` takes: the 150 000 Kubernetes supports.
pub const MAX_SIMULATED_PODS: u32 = 150_000;

/// `ghostip simulate-load`: a pure simulation, nothing is sent anywhere.
#[derive(Debug, Args)]
pub struct SimulateLoadArgs {
    /// Node counts to simulate, comma-separated (1 to 10000: twice what Kubernetes
    /// supports); one agent per node and one watch.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,5000", value_name = "N,...", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SIMULATED_NODES)))]
    pub nodes: Vec<u32>,
    /// Pods the rollout replaces within 60s, in headless Services of 10 pods (1 to 150000:
    /// what Kubernetes supports).
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SIMULATED_PODS)))]
    pub pods: u32,
    /// The --cluster-qps simulated (1 to 1000000); every size is also simulated without it.
    #[arg(long, default_value_t = DEFAULT_CLUSTER_QPS, value_name = "QPS", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLUSTER_QPS)))]
    pub cluster_qps: u32,
}

/// Parses a listen address: `IP:PORT`, `[IP]:PORT` (required for IPv6, accepted for IPv4, as
/// Go's `net.SplitHostPort` does, so `[$(HOST_IP)]:PORT` works for both families), or
/// `:PORT`, every address of both families (`[::]:PORT`).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("`{s}`: `{p}` is not a port (0 to 65535)"))
    };
    if let Some(p) = s.strip_prefix(':') {
        return Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port(p)?));
    }
    if let Some(rest) = s.strip_prefix('[') {
        let Some((host, p)) = rest.split_once("]:") else {
            return Err(format!("`{s}` is not [IP]:PORT"));
        };
        let ip: IpAddr = host
            .parse()
            .map_err(|_| format!("`{s}`: `{host}` is not an IP address"))?;
        return Ok(SocketAddr::new(ip, port(p)?));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if s.matches(':').count() > 1 {
        return Err(format!(
            "`{s}`: an IPv6 address needs brackets around it: [IP]:PORT, e.g. `[fd00::1]:9754` \
             (`[$(HOST_IP)]:9754` works for IPv4 and IPv6)"
        ));
    }
    if s.parse::<IpAddr>().is_ok() {
        return Err(format!("`{s}` has no port: use {s}:PORT"));
    }
    Err(format!("`{s}` is not IP:PORT, [IP]:PORT or :PORT"))
}

/// A duration flag between `min` and `max`; the error names the accepted range.
fn parse_duration_in(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min || d > max {
        return Err(format!(
            "`{s}` is out of range: expected {} to {}",
            show_duration(min),
            show_duration(max)
        ));
    }
    Ok(d)
}

/// A duration as the flags spell it (`50ms`, `30s`, `24h`).
fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// `--interval`: 50ms to 1m (a burst round every interval).
pub fn parse_probe_interval(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_millis(50), Duration::from_secs(60))
}

/// `--channelz-interval`: 1s to 1h.
pub fn parse_channelz_interval(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_secs(1), Duration::from_secs(3600))
}

/// `--coredns-metrics-interval`: 0 (off) or 1s to 1h.
pub fn parse_coredns_interval(s: &str) -> Result<Duration, String> {
    if parse_duration(s)? == Duration::ZERO {
        return Ok(Duration::ZERO);
    }
    parse_duration_in(s, Duration::from_secs(1), Duration::from_secs(3600))
}

/// `--channelz-discovery-interval`: 5s to 1h.
pub fn parse_channelz_discovery(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_secs(5), Duration::from_secs(3600))
}

/// `--channelz-deadline`: 100ms to 30s.
pub fn parse_channelz_deadline(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_millis(100), Duration::from_secs(30))
}

/// `--sweep`: 1s to 24h.
pub fn parse_sweep(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_secs(1), Duration::from_secs(86_400))
}

/// `--query-timeout`: 10ms to 30s.
pub fn parse_query_timeout(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_millis(10), Duration::from_secs(30))
}

/// `--kube-proxy-scrape-period`: 1s to 5m (a scrape more often than once a second would
/// load kube-proxy for nothing; less often than every 5 minutes says nothing of a sync).
pub fn parse_scrape_period(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_secs(1), Duration::from_secs(300))
}

/// `--dns-health-interval`: 100ms to 1h.
pub fn parse_dns_health_interval(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_millis(100), Duration::from_secs(3600))
}

/// Parses durations like `250ms`, `1s`, `5m`, `2h`, `7d`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 250ms, 30s, 5m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => {
            return Err(format!(
                "`{s}`: unknown unit `{unit}` (use ms, s, m, h or d)"
            ));
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{s}` is not a valid duration"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is too long a duration"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_and_servers_parse() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert!(parse_duration("5x").is_err());
        assert_eq!(
            parse_dns_server("10.96.0.10").unwrap(),
            "10.96.0.10:53".parse().unwrap()
        );
        assert_eq!(
            parse_dns_server("127.0.0.1:5353").unwrap(),
            "127.0.0.1:5353".parse().unwrap()
        );
        assert!(parse_dns_server("nope").is_err());
    }

    #[test]
    fn listen_addresses_of_both_families() {
        let ok = |s: &str| parse_listen(s).unwrap().to_string();
        assert_eq!(ok("127.0.0.1:9754"), "127.0.0.1:9754");
        assert_eq!(ok("0.0.0.0:9753"), "0.0.0.0:9753");
        assert_eq!(ok("[fd00::1]:9754"), "[fd00::1]:9754");
        assert_eq!(ok("[::1]:9754"), "[::1]:9754");
        // `[$(HOST_IP)]:9754` as the kubelet expands it on an IPv4 node.
        assert_eq!(ok("[192.0.2.10]:9754"), "192.0.2.10:9754");
        assert_eq!(ok(":9753"), "[::]:9753");
        // `$(HOST_IP):9754` on an IPv6 node: an address that could be fd00::1 port 9754 or
        // fd00::1:9754 without a port.
        let e = parse_listen("fd00::1:9754").unwrap_err();
        assert!(e.contains("needs brackets"), "{e}");
        let e = parse_listen("fd00::1").unwrap_err();
        assert!(e.contains("needs brackets"), "{e}");
        for bad in [
            "10.0.0.1",
            "[fd00::1]",
            "[fd00::1]9754",
            "[web]:80",
            "localhost:9754",
            "10.0.0.1:99999",
            ":",
            "",
        ] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn auth_auto_is_required_off_loopback() {
        let args = |mode| AuthArgs {
            mode,
            audiences: Vec::new(),
        };
        let at = |s: &str| parse_listen(s).unwrap();
        for loopback in [
            "127.0.0.1:9754",
            "127.0.0.2:9754",
            "[::1]:9754",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(!args(AuthMode::Auto).required(at(loopback)), "{loopback}");
            assert!(
                args(AuthMode::Required).required(at(loopback)),
                "{loopback}"
            );
        }
        for other in [
            "10.200.0.11:9754",
            "0.0.0.0:9753",
            ":9753",
            "[fd00::1]:9754",
        ] {
            assert!(args(AuthMode::Auto).required(at(other)), "{other}");
            assert!(!args(AuthMode::None).required(at(other)), "{other}");
        }
    }

    #[test]
    fn durations_in_range() {
        assert_eq!(
            parse_probe_interval("250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(
            parse_probe_interval("0s").unwrap_err(),
            "`0s` is out of range: expected 50ms to 1m"
        );
        assert_eq!(
            parse_sweep("25h").unwrap_err(),
            "`25h` is out of range: expected 1s to 24h"
        );
        assert!(parse_sweep("24h").is_ok() && parse_sweep("1s").is_ok());
        assert!(parse_query_timeout("5ms").is_err() && parse_query_timeout("10ms").is_ok());
        assert!(parse_dns_health_interval("50ms").is_err());
    }

    #[test]
    fn channelz_qps_defaults_to_500_and_takes_1_to_100000() {
        let parse = |args: &[&str]| Cli::try_parse_from(args.iter().copied());
        let qps = |c: Cli| match c.command {
            Command::Watch(w) => Some(w.channelz.channelz_qps),
            _ => None,
        };
        assert_eq!(qps(parse(&["ghostip", "watch"]).unwrap()), Some(500));
        let c = parse(&["ghostip", "watch", "--channelz-qps", "100000"]).unwrap();
        assert_eq!(qps(c), Some(100_000));
        assert!(parse(&["ghostip", "watch", "--channelz-qps", "0"]).is_err());
        assert!(parse(&["ghostip", "watch", "--channelz-qps", "100001"]).is_err());
    }

    #[test]
    fn coredns_metrics_interval_defaults_to_15s_0_turns_it_off() {
        let parse = |args: &[&str]| Cli::try_parse_from(args.iter().copied());
        let interval = |c: Cli| match c.command {
            Command::Watch(w) => Some(w.coredns_metrics_interval),
            _ => None,
        };
        assert_eq!(
            interval(parse(&["ghostip", "watch"]).unwrap()),
            Some(Duration::from_secs(15))
        );
        let c = parse(&["ghostip", "watch", "--coredns-metrics-interval", "0"]).unwrap();
        assert_eq!(interval(c), Some(Duration::ZERO));
        let c = parse(&["ghostip", "watch", "--coredns-metrics-interval", "1h"]).unwrap();
        assert_eq!(interval(c), Some(Duration::from_secs(3600)));
        for bad in ["500ms", "2h", "x"] {
            assert!(
                parse(&["ghostip", "watch", "--coredns-metrics-interval", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn output_formats_per_command() {
        let parse = |args: &[&str]| Cli::try_parse_from(args.iter().copied());
        // After the command: what the command writes, nothing else.
        assert!(parse(&["ghostip", "check", "-o", "sarif"]).is_err());
        let c = parse(&["ghostip", "audit", "-f", "x", "-o", "sarif"]).unwrap();
        assert_eq!(c.global.output, OutputFormat::Sarif);
        let c = parse(&["ghostip", "check", "-o", "json"]).unwrap();
        assert_eq!(c.global.output, OutputFormat::Json);
        let c = parse(&["ghostip", "datapath", "show", "-f", "x", "-o", "json"]).unwrap();
        assert_eq!(c.global.output, OutputFormat::Json);
        // Before the command: checked against the command when it runs.
        let c = parse(&["ghostip", "-o", "json", "whois", "10.0.0.1"]).unwrap();
        assert_eq!(c.global.output, OutputFormat::Json);
        assert!(c.command.check_output(c.global.output).is_ok());
        let c = parse(&["ghostip", "-o", "sarif", "check"]).unwrap();
        assert_eq!(
            c.command.check_output(c.global.output).unwrap_err(),
            "-o sarif: `ghostip check` takes table, wide or json (only audit writes sarif)"
        );
        let c = parse(&["ghostip", "-o", "wide", "agent", "--node-name", "n"]).unwrap();
        assert_eq!(
            c.command.check_output(c.global.output).unwrap_err(),
            "-o wide: `ghostip agent` takes table or json"
        );
        let c = parse(&["ghostip", "whois", "10.0.0.1", "-o", "wide"]).unwrap();
        assert_eq!(c.global.output, OutputFormat::Wide);
        let c = parse(&["ghostip", "-o", "sarif", "audit", "-f", "x"]).unwrap();
        assert!(c.command.check_output(c.global.output).is_ok());
    }
}

/// `ghostip datapath show|diff`.
#[derive(Debug, Args)]
pub struct DatapathArgs {
    /// What to do with the dump.
    #[command(subcommand)]
    pub command: DatapathCommand,
    /// Output format.
    #[command(flatten)]
    pub output: TableOrJson,
}

/// Datapath subcommands.
#[derive(Debug, Subcommand)]
pub enum DatapathCommand {
    /// Print the normalized load-balancer (or conntrack) table of a dump.
    Show(DatapathShowArgs),
    /// Compare a dump with `kubectl get services,endpointslices -A -o json` output; exit 1
    /// when a backend is stale or missing (load-balancer dumps) or a flow goes to a removed
    /// endpoint (conntrack dumps).
    Diff(DatapathDiffArgs),
}

/// Format of a datapath dump: `auto` (detected) or one of `ghostip_datapath::FORMATS`, by
/// name or alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpFormat {
    /// Detect the format from the first 64 KiB.
    Auto,
    /// This format.
    Is(Format),
}

impl DumpFormat {
    /// The format given, `None` for `auto`.
    pub fn format(self) -> Option<Format> {
        match self {
            DumpFormat::Auto => None,
            DumpFormat::Is(f) => Some(f),
        }
    }
}

impl ValueEnum for DumpFormat {
    fn value_variants<'a>() -> &'a [Self] {
        static CHOICES: LazyLock<Vec<DumpFormat>> = LazyLock::new(|| {
            std::iter::once(DumpFormat::Auto)
                .chain(Format::all().map(DumpFormat::Is))
                .collect()
        });
        &CHOICES
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            DumpFormat::Auto => {
                PossibleValue::new("auto").help("Detect the format from the first 64 KiB")
            }
            DumpFormat::Is(f) => {
                let info = f.info();
                PossibleValue::new(info.name)
                    .aliases(info.aliases.iter().copied())
                    .help(info.help)
            }
        })
    }
}

/// The dump to read.
#[derive(Debug, Args, Clone)]
pub struct DumpSource {
    /// The dump file; `-` reads standard input.
    #[arg(
        short = 'f',
        long = "from-file",
        value_name = "DUMP",
        required_unless_present = "from_bpf",
        conflicts_with = "from_bpf"
    )]
    pub from_file: Option<PathBuf>,
    /// Read Cilium's pinned BPF load-balancer maps in this directory instead of a dump
    /// (e.g. /sys/fs/bpf/tc/globals; needs CAP_BPF), as `ghostip agent` does.
    #[arg(long, value_name = "DIR")]
    pub from_bpf: Option<PathBuf>,
    /// Format of the dump.
    #[arg(long, value_enum, default_value_t = DumpFormat::Auto)]
    pub format: DumpFormat,
    /// Largest input read (bytes, or with a Ki, Mi, Gi suffix): the dump, and diff's --truth
    /// file, each; a larger one is refused, and a stream is read no further than this.
    /// The default is over 4 times the largest input at 10 000 Services / 150 000
    /// endpoints (nft -j dump 127 MB, kubectl truth 127 MB; docs/DATAPATH.md).
    #[arg(long, value_name = "SIZE", default_value = "512Mi", value_parser = crate::input::parse_size)]
    pub max_input_size: u64,
}

/// `ghostip datapath show`.
#[derive(Debug, Args)]
pub struct DatapathShowArgs {
    /// The dump.
    #[command(flatten)]
    pub source: DumpSource,
}

/// `ghostip datapath diff`.
#[derive(Debug, Args)]
pub struct DatapathDiffArgs {
    /// The dump.
    #[command(flatten)]
    pub source: DumpSource,
    /// The truth: `kubectl get services,endpointslices -A -o json` (or `-o yaml`) output.
    #[arg(long, value_name = "FILE")]
    pub truth: PathBuf,
    /// The node the dump was taken on (traffic policy `Local` narrows to its endpoints).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// When the dump was taken: RFC 3339, `now`, or relative like `-5m` (ages are computed
    /// from it; conntrack ownership is looked up at that time).
    #[arg(long, default_value = "now", value_name = "TIME")]
    pub at: String,
    /// The cluster DNS Service, for stale DNS conntrack entries.
    #[arg(long, default_value = "kube-system/kube-dns", value_name = "NS/NAME")]
    pub dns_service: String,
    /// Conntrack dumps: flows whose client (the original source) is this address are not
    /// judged; pass the node's own addresses where ghostip's probes ran on it (repeatable).
    #[arg(long = "exclude-source", value_name = "IP")]
    pub exclude_sources: Vec<std::net::IpAddr>,
}

/// Where `ghostip check` finds the node agents (`ghostip agent` DaemonSet) whose datapath and
/// DNS-health findings it includes.
#[derive(Debug, Args, Clone)]
pub struct AgentsArgs {
    /// Do not ask the node agents (only the DNS paths reachable from here are checked).
    #[arg(long)]
    pub no_agents: bool,
    /// Namespace of the agent pods.
    #[arg(long, default_value = "ghostip-agent", value_name = "NS")]
    pub agents_namespace: String,
    /// Label selector of the agent pods.
    #[arg(
        long,
        default_value = "app.kubernetes.io/name=ghostip-agent",
        value_name = "SELECTOR"
    )]
    pub agents_selector: String,
    /// Port of the agents' HTTP endpoint on their node's address.
    #[arg(long, default_value_t = 9754, value_name = "PORT")]
    pub agents_port: u16,
    /// Give up on one agent after this long.
    #[arg(long, default_value = "3s", value_parser = parse_duration, value_name = "DURATION")]
    pub agent_timeout: Duration,
}
