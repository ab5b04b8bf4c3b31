//! Command-line interface definition: kubectl-style global flags and one subcommand per verb.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use ghostip_logs::Target;

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
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = OutputFormat::Table)]
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
    /// Human-readable tables.
    Table,
    /// One JSON document (JSON lines for streams).
    Json,
    /// SARIF 2.1.0 (code-scanning tools); only `audit` writes it.
    Sarif,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch the truth, keep the ledger and probe every DNS path continuously; serve /metrics.
    Watch(WatchArgs),
    /// Observe a rollout (or trigger it with --restart) and report every stale window per path.
    Rollout(RolloutArgs),
    /// One-shot: compare each headless Service's answers on each DNS path with the truth now.
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
    /// Global DNS query budget in queries per second; never exceeded.
    #[arg(long, default_value_t = 100, value_name = "QPS")]
    pub qps: u32,
    /// Probe interval while a change is converging.
    #[arg(long, default_value = "250ms", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,
    /// Timeout of one DNS query.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub query_timeout: Duration,
    /// Cluster DNS zone.
    #[arg(long, default_value = "cluster.local", value_name = "ZONE")]
    pub zone: String,
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
    /// Address of the HTTP endpoint (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "127.0.0.1:9753", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Period of the slow sweep over every headless Service name.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub sweep: Duration,
    /// How long the ledger keeps closed history.
    #[arg(long, default_value = "7d", value_parser = parse_duration, value_name = "DURATION")]
    pub retention: Duration,
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
    /// Give up on the API server after this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub request_timeout: Duration,
}

/// `--datapath` of `ghostip agent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DatapathChoice {
    /// Detect: kube-proxy nftables, then iptables, then IPVS (Cilium is never guessed).
    Auto,
    /// kube-proxy iptables mode (`iptables-save -t nat`).
    Iptables,
    /// kube-proxy nftables mode (`nft -j list table ip kube-proxy`).
    Nftables,
    /// kube-proxy IPVS mode (`ipvsadm-save -n`).
    Ipvs,
    /// Cilium, read with `cilium-dbg service list -o json` in this node's Cilium agent pod
    /// through the Kubernetes exec API (needs `pods/exec` on the Cilium pods).
    Cilium,
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
    /// Address of the HTTP endpoint (/metrics, /healthz, /readyz, /status).
    #[arg(long, default_value = "127.0.0.1:9754", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Average CPU the datapath reads may use, in percent of one core; the full-audit
    /// period adapts to the measured cost of a read to stay under it.
    #[arg(long, default_value_t = 2.0, value_name = "PERCENT")]
    pub max_cpu: f64,
    /// Shortest period between two full audits of the datapath.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub min_audit_period: Duration,
    /// Longest period between two full audits, however cheap they are.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub max_audit_period: Duration,
    /// Interval of the re-reads after a truth change, until the datapath converged.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub reread_interval: Duration,
    /// Longest time re-reads follow one truth change (then the periodic audit takes over).
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub reread_for: Duration,
    /// Kill a datapath reader that runs longer than this.
    #[arg(long, default_value = "120s", value_parser = parse_duration, value_name = "DURATION")]
    pub read_timeout: Duration,
    /// How long the datapath may lag the truth before it is over its expected lag
    /// (kube-proxy's minSyncPeriod plus one sync).
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub datapath_lag: Duration,
    /// Interval of the DNS health probes (one query per DNS path of this node).
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub dns_health_interval: Duration,
    /// Namespace of the Cilium agent pods (with --datapath cilium).
    #[arg(long, default_value = "kube-system", value_name = "NS")]
    pub cilium_namespace: String,
    /// Label selector of the Cilium agent pods (with --datapath cilium).
    #[arg(long, default_value = "k8s-app=cilium", value_name = "SELECTOR")]
    pub cilium_selector: String,
    /// Container of the Cilium agent pod to exec into (with --datapath cilium).
    #[arg(long, default_value = "cilium-agent", value_name = "NAME")]
    pub cilium_container: String,
    /// How long the ledger keeps closed history.
    #[arg(long, default_value = "7d", value_parser = parse_duration, value_name = "DURATION")]
    pub retention: Duration,
    /// DNS probing of this node's DNS paths.
    #[command(flatten)]
    pub dns: DnsArgs,
}

/// `ghostip drain-wait`: run as the pod's `preStop` exec hook. It always exits 0 (a failing
/// preStop hook must not make termination worse); what it waited for and why goes to one JSON
/// line on stdout.
#[derive(Debug, Args)]
pub struct DrainWaitArgs {
    /// The pod's IP (the downward API's `status.podIP`).
    #[arg(long, env = "POD_IP", value_name = "IP")]
    pub ip: Option<std::net::IpAddr>,
    /// The pod's name, to read its grace period and to attach the result as an Event.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub pod_name: Option<String>,
    /// The pod's namespace (where its EndpointSlices are).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS")]
    pub pod_namespace: Option<String>,
    /// Never wait longer than this (default: the pod's terminationGracePeriodSeconds minus
    /// --margin, or 20 s when the pod cannot be read).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_wait: Option<Duration>,
    /// What the default --max-wait leaves of the grace period for the container's own
    /// shutdown after SIGTERM.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub margin: Duration,
    /// Also wait until no established TCP connection to the pod's listening ports remains
    /// (pooled clients moved away), read from the pod's network namespace.
    #[arg(long)]
    pub wait_connections: bool,
    /// Stand-in for a layer that cannot be checked, counted from when the IP left the
    /// endpoints (default: the staleness budget `ghostip audit` computes for the pod's
    /// Service from the cluster's Corefiles, else 30 s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub fallback: Option<Duration>,
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
    /// Do not ask the agents (node datapaths are then judged by the fallback).
    #[arg(long)]
    pub no_agents: bool,
    /// Global DNS query budget of this drain in queries per second; never exceeded.
    #[arg(long, default_value_t = 20, value_name = "QPS")]
    pub qps: u32,
    /// Interval of DNS probes and agent polls while waiting.
    #[arg(long, default_value = "500ms", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,
    /// Timeout of one DNS query or agent request.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub request_timeout: Duration,
    /// Cluster DNS zone.
    #[arg(long, default_value = "cluster.local", value_name = "ZONE")]
    pub zone: String,
    /// Do not record the result as an Event on the pod.
    #[arg(long)]
    pub no_event: bool,
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
    /// Process directories given with -f recursively.
    #[arg(short = 'R', long)]
    pub recursive: bool,
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
    /// Threads that scan each regular, uncompressed log file (ranges of the file at once; the
    /// result is the same as with one). Gzip files and standard input are read by one thread.
    /// Default: the available cores, at most 8.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
    /// Memory-map regular, uncompressed files not modified in the last 5 seconds and scan them
    /// in place (`auto`, the default, as ripgrep does for a file it is given: no copy into read
    /// buffers, the resident set bounded by the 4 MiB segments in flight), or read every file (`never`). The
    /// result is the same. A mapped file truncated while it is scanned (a quiet log that
    /// copytruncate rotation empties mid-scan) ends the process with SIGBUS: use `never` on
    /// logs that may be rotated under the scan.
    #[arg(long, value_enum, default_value_t = MmapMode::Auto, value_name = "WHEN")]
    pub mmap: MmapMode,
    /// Only failures aimed at this address (their target, or the DNS server a lookup asked):
    /// `IP` or `IP:PORT`, IPv6 as `[::1]:8080` or bare. For an IPv4 address only the lines
    /// that spell it and the multi-line events around them (at most 40 lines each way) are
    /// examined, which is faster on a large log; an event whose parts lie further from every
    /// line naming the address may be joined differently than in the full scan.
    #[arg(long, value_name = "IP[:PORT]", value_parser = parse_target)]
    pub target: Option<Target>,
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

/// `explain --mmap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MmapMode {
    /// Map settled regular files, read the others.
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
    Ok(Duration::from_secs_f64(secs))
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
}

/// `ghostip datapath show|diff`.
#[derive(Debug, Args)]
pub struct DatapathArgs {
    /// What to do with the dump.
    #[command(subcommand)]
    pub command: DatapathCommand,
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

/// Format of a datapath dump (`auto` detects it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DumpFormat {
    /// Detect the format from the first 64 KiB.
    Auto,
    /// `iptables-save` / `ip6tables-save` of kube-proxy in iptables mode.
    Iptables,
    /// `nft -j list table ip kube-proxy` (or `ip6`, or `nft -j list ruleset`).
    NftJson,
    /// `ipvsadm -Ln` or `ipvsadm-save -n`.
    Ipvsadm,
    /// `cilium-dbg service list`.
    CiliumServiceList,
    /// `cilium-dbg service list -o json`.
    CiliumServiceJson,
    /// `cilium-dbg bpf lb list` (text or `-o json`).
    CiliumBpfLbList,
    /// `cilium-dbg shell -- db/show frontends`.
    CiliumDbFrontends,
    /// Cilium `lb/maps-dump`.
    CiliumLbMaps,
    /// `conntrack -L` (or `-E`, `-o extended`).
    Conntrack,
}

/// The dump to read.
#[derive(Debug, Args, Clone)]
pub struct DumpSource {
    /// The dump file; `-` reads standard input.
    #[arg(short = 'f', long = "from-file", value_name = "DUMP")]
    pub from_file: PathBuf,
    /// Format of the dump.
    #[arg(long, value_enum, default_value_t = DumpFormat::Auto)]
    pub format: DumpFormat,
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
}
