# Shared settings and helpers for the lab scripts. Sourced, never executed.
# shellcheck shell=bash
# shellcheck disable=SC2034  # the layout constants are used by the scripts sourcing this file
LAB_DIR=${LAB_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck source=versions.env
. "$LAB_DIR/versions.env"
LAB_CACHE=${GHOSTIP_LAB_CACHE:-/var/cache/ghostip-lab}
GO_VERSION=$(go env GOVERSION 2>/dev/null || true)
if [[ -z $GO_VERSION ]]; then
  # No `go` on PATH (e.g. `sudo` with a secure_path): use the newest cache
  # entry built for these component versions.
  GO_VERSION=$(ls -1dt "$LAB_CACHE/k8s${KUBERNETES_VERSION}-etcd${ETCD_VERSION}-coredns${COREDNS_VERSION}-kwok${KWOK_VERSION}-"* 2>/dev/null |
    head -n1 | sed 's/.*-//')
  GO_VERSION=${GO_VERSION:-unknown}
fi
LAB_KEY="k8s${KUBERNETES_VERSION}-etcd${ETCD_VERSION}-coredns${COREDNS_VERSION}-kwok${KWOK_VERSION}-${GO_VERSION}"
LAB_BIN=${GHOSTIP_LAB_BIN:-$LAB_CACHE/$LAB_KEY/bin}

log() { printf 'lab: %s\n' "$*" >&2; }
die() { printf 'lab: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# Lab layout. Every address below lives only inside namespaces the lab
# creates (see docs/LAB.md); nothing is added to the root namespace.
LAB_STATE=/var/lib/ghostip-lab            # fixed: lab/down and tests rely on it
LAB_HUB=ghostip-hub                       # control plane + "cluster network"
LAB_HUB_IP=10.200.0.1                     # bridge lab0 in the hub, apiserver
LAB_NODE_PREFIX=10.200.0                  # node-N = 10.200.0.(10+N)
LAB_SERVICE_CIDR=10.96.0.0/16
LAB_DNS_IP=10.96.0.10
LAB_CLUSTER_CIDR=10.244.0.0/16            # node-N podCIDR = 10.244.N.0/24
LAB_DOMAIN=cluster.local
LAB_KUBECONFIG=$LAB_STATE/admin.kubeconfig
LAB_API=https://$LAB_HUB_IP:6443

node_ip() { printf '%s.%d' "$LAB_NODE_PREFIX" $((10 + ${1#node-})); }
node_cidr() { printf '10.244.%d.0/24' "${1#node-}"; }
node_netns() { printf 'ghostip-%s' "$1"; }
# A real node's files (containerd root, kubelet root, logs, configs).
node_dir() { printf '%s/node/%s' "$LAB_STATE" "$1"; }
# The kind of the lab's nodes: kwok (fake kubelet, podsync) or real.
node_kind() { cat "$LAB_STATE/node-kind" 2>/dev/null || echo kwok; }
# The network plugin of real nodes: bridge (+ kube-proxy) or cilium.
node_cni() { cat "$LAB_STATE/cni" 2>/dev/null || echo bridge; }
# The cgroup v2 hierarchy's mount point (/sys/fs/cgroup/unified on a hybrid host).
cgroup2_mount() {
  awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") { print $5; exit } break } }' /proc/self/mountinfo
}

# Node names recorded by lab/up.
lab_nodes() { cat "$LAB_STATE/nodes" 2>/dev/null || true; }

need_root() { [[ $(id -u) == 0 ]] || die "the lab needs root (network namespaces, veths, iptables): run it as root"; }

need_netns() {
  command -v ip >/dev/null || die "no 'ip' command: install iproute2"
  ip netns list >/dev/null 2>&1 || die "'ip netns' does not work here (no network namespace support?)"
}

need_bins() {
  local b missing=()
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kwok coredns podsync; do
    [[ -x $LAB_BIN/$b ]] || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || die "missing binaries in $LAB_BIN: ${missing[*]}; run lab/build first (cold: ~30-60 min on 2 cores)"
}

# What a real node needs beyond the kwok lab: the kubelet and CNI plugins
# (lab/build), the lab's images (lab/build images), containerd and runc
# (Debian packages, installed when missing).
need_real_node_bins() {
  local missing=() b
  for b in kubelet cni/bridge cni/host-local cni/loopback cni/portmap images/names.env; do
    [[ -e $LAB_BIN/$b ]] || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || die "missing in $LAB_BIN: ${missing[*]}; run lab/build"
  local want=()
  command -v containerd >/dev/null || want+=(containerd)
  command -v runc >/dev/null || want+=(runc)
  ((${#want[@]} == 0)) && return 0
  log "installing Debian packages: ${want[*]}"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "${want[@]}" >/dev/null ||
    { timeout 300 apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "${want[@]}" >/dev/null; } ||
    die "apt-get install ${want[*]} failed"
}

# Install the Debian packages the lab needs, only for missing commands.
ensure_pkgs() {
  local -A pkgof=([ip]=iproute2 [iptables]=iptables [nft]=nftables [conntrack]=conntrack [dig]=dnsutils
    [openssl]=openssl [jq]=jq [curl]=curl [setsid]=util-linux [nsenter]=util-linux [timeout]=coreutils)
  local c want=()
  for c in "${!pkgof[@]}"; do command -v "$c" >/dev/null || want+=("${pkgof[$c]}"); done
  ((${#want[@]} == 0)) && return 0
  log "installing Debian packages: ${want[*]}"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "${want[@]}" >/dev/null ||
    { timeout 300 apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "${want[@]}" >/dev/null; } ||
    die "apt-get install ${want[*]} failed"
}

# need_cilium_bins: what lab/up --cni cilium runs (lab/build cilium), and clang-19.
need_cilium_bins() {
  local missing=() b
  for b in cilium-agent cilium-cni cilium-dbg cilium-bpf cilium-crds/.complete; do
    [[ -e $LAB_BIN/$b ]] || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || die "missing in $LAB_BIN: ${missing[*]}; run lab/build cilium (cold: about 40 min)"
  # clang-19: Cilium compiles its datapath at start (it needs clang 18 or newer);
  # bpftool: lab/tests/down-leaves-nothing counts what is loaded in the kernel.
  command -v clang-19 >/dev/null && command -v bpftool >/dev/null && return 0
  log "installing Debian packages: clang-19 llvm-19 bpftool"
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y --no-install-recommends clang-19 llvm-19 bpftool >/dev/null ||
    { timeout 300 apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y --no-install-recommends clang-19 llvm-19 bpftool >/dev/null; } ||
    die "apt-get install clang-19 llvm-19 bpftool failed"
}

# Is a lab (complete or half-started) present?
lab_present() {
  [[ -d $LAB_STATE ]] && return 0
  ip netns list 2>/dev/null | grep -q '^ghostip-' && return 0
  compgen -G '/etc/netns/ghostip-*' >/dev/null && return 0
  return 1
}

# The iptables backend of the nodes (lab/up --iptables-backend): `legacy` and
# `nft` are a directory of iptables* links to that xtables binary, put first
# on the PATH of kube-proxy, in_node and lab/exec; `host` uses the host's
# alternatives as they are.
setup_iptables_backend() {
  local backend=$1 dir=$LAB_STATE/iptables-bin multi n
  echo "$backend" >"$LAB_STATE/iptables-backend"
  [[ $backend == host ]] && return 0
  multi=$(command -v "xtables-$backend-multi") || die "xtables-$backend-multi not found (package iptables)"
  mkdir -p "$dir"
  for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -sfn "$multi" "$dir/$n"
  done
}

# lab_path: the PATH for commands in the node namespaces (the backend's
# iptables first, when one was chosen).
lab_path() {
  if [[ -d $LAB_STATE/iptables-bin ]]; then echo "$LAB_STATE/iptables-bin:$PATH"; else echo "$PATH"; fi
}

# Run a command in the hub / a node / a pod namespace.
in_hub() { ip netns exec "$LAB_HUB" "$@"; }
# On a Cilium node the command runs in the node's cgroup, as a node's own
# processes do: Cilium's socket load-balancing (the ClusterIPs) is attached there.
in_node() {
  local n=$1; shift
  if [[ $(node_cni) == cilium ]]; then
    (join_node_cgroup "$n" && PATH=$(lab_path) exec ip netns exec "$(node_netns "$n")" "$@")
  else
    PATH=$(lab_path) ip netns exec "$(node_netns "$n")" "$@"
  fi
}
# join_node_cgroup node-N: moves the calling (sub)shell into the node's cgroup v2, once
# the node has one (lab/up's network setup runs before the node starts).
join_node_cgroup() {
  local d; d="$(cgroup2_mount)/ghostip-$1"
  [[ -d $d ]] || return 0
  echo "$BASHPID" >"$d/cgroup.procs"
}

# kubectl, run in the hub against the lab apiserver; bounded by KC_TIMEOUT s.
kc() { ip netns exec "$LAB_HUB" env KUBECONFIG="$LAB_KUBECONFIG" timeout "${KC_TIMEOUT:-60}" "$LAB_BIN/kubectl" "$@"; }

# Resolve a lab/exec target to a namespace name: hub, node-N, or a pod name
# (NAME or NAMESPACE/NAME, from podsync's state files).
target_netns() {
  local t=$1 f
  case $t in
    hub) echo "$LAB_HUB"; return ;;
    node-[0-9]*) echo "$(node_netns "$t")"; return ;;
  esac
  if [[ $t == */* ]]; then
    f="$LAB_STATE/pods/${t%%/*}_${t#*/}.env"
  else
    f=$(compgen -G "$LAB_STATE/pods/*_$t.env" | head -n1 || true)
  fi
  [[ -n $f && -f $f ]] || return 1
  sed -n 's/^POD_NETNS=//p' "$f"
}

# pod_env NAMESPACE NAME KEY: a field from podsync's state file.
pod_env() { sed -n "s/^$3=//p" "$LAB_STATE/pods/$1_$2.env" 2>/dev/null; }

# ---------------------------------------------------------------------------
# Processes. Each lab daemon runs as `ip netns exec NS BIN ...` (ip execs the
# binary, so the recorded PID is the daemon's own), in its own session, with
# stdin/stdout/stderr detached from the caller.
pidfile() { printf '%s/pids/%s.pid' "$LAB_STATE" "$1"; }
logfile() { printf '%s/logs/%s.log' "$LAB_STATE" "$1"; }

# start_proc NAME NETNS BIN ARGS...
# With START_MODE=nsenter the daemon enters only the network namespace and
# stays in the root mount namespace. podsync needs that: `ip netns exec`
# makes a private (slave) mount namespace, so the pod namespaces podsync
# creates with `ip netns add` would be bind-mounted only there, invisible to
# lab/down and everything else (their /run/netns files would be empty).
start_proc() {
  local name=$1 ns=$2; shift 2
  mkdir -p "$LAB_STATE/pids" "$LAB_STATE/logs"
  printf '%s start %s\n' "$(date -u +%FT%T.%3NZ)" "$*" >>"$(logfile "$name")"
  if [[ ${START_MODE:-} == nsenter ]]; then
    setsid nsenter --net="/run/netns/$ns" -- "$@" </dev/null >>"$(logfile "$name")" 2>&1 &
  else
    setsid ip netns exec "$ns" "$@" </dev/null >>"$(logfile "$name")" 2>&1 &
  fi
  local pid=$! i exe
  echo "$pid" >"$(pidfile "$name")"
  # Wait until the forked shell has exec'd into setsid -> ip -> the binary,
  # so that proc_pid's PID-reuse guard recognises it.
  for i in $(seq 1 40); do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
    [[ -z $exe || $exe == "$1" || $exe == "$(readlink -f "$1")" ]] && break
    sleep 0.05
  done
}

# proc_pid NAME: the recorded PID if that process still runs a lab binary.
proc_pid() {
  # kube-proxy on a real node is a static pod: its process, found in the node's namespace.
  if [[ $1 == kube-proxy-node-* && $(node_kind) == real ]]; then
    kube_proxy_container_pid "${1#kube-proxy-}"
    return
  fi
  local f pid; f=$(pidfile "$1")
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ && -d /proc/$pid ]] || return 1
  # Guard against PID reuse: the process must run a lab binary (or be the
  # short-lived `ip netns exec` before its exec).
  local exe; exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  [[ $exe == */ip || $exe == */setsid || $exe == */nsenter || $exe == */containerd || $exe == */bash ]] ||
    is_lab_exe "$exe" || return 1
  # A real node's containerd and its lab/realnode script before it execs the
  # kubelet: only when the process is in a lab network namespace.
  if [[ $exe == */containerd || $exe == */bash ]] && ! in_lab_netns "$pid"; then return 1; fi
  echo "$pid"
}

# is_lab_exe PATH: PATH (a /proc/PID/exe target) is one of the lab binaries,
# also when $LAB_BIN holds symlinks or the binary was replaced since.
is_lab_exe() {
  local exe=${1% (deleted)} b
  [[ -n $exe ]] || return 1
  [[ $exe == "$LAB_BIN"/* ]] && return 0
  b=$LAB_BIN/${exe##*/}
  [[ -e $b && $(readlink -f "$b") == "$exe" ]]
}

proc_running() { proc_pid "$1" >/dev/null; }

# in_lab_netns PID: the process is in one of the lab's network namespaces.
in_lab_netns() {
  local ns
  for ns in /run/netns/ghostip-*; do
    [[ -e $ns && $(stat -L -c %i "$ns" 2>/dev/null) == "$(stat -L -c %i "/proc/$1/ns/net" 2>/dev/null)" ]] && return 0
  done
  return 1
}

# pid_alive PID: exists and is not a zombie waiting to be reaped.
pid_alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $st && $st != Z && $st != X ]]
}

# stop_proc NAME [TIMEOUT_S]: SIGTERM, then SIGKILL after TIMEOUT_S.
stop_proc() {
  local name=$1 t=${2:-10} pid i
  if [[ $name == kube-proxy-node-* && $(node_kind) == real ]]; then
    stop_kube_proxy_pod "${name#kube-proxy-}" "$t"
    return
  fi
  pid=$(proc_pid "$name") || { rm -f "$(pidfile "$name")"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 $((t * 20))); do
    pid_alive "$pid" || break
    sleep 0.05
  done
  if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  rm -f "$(pidfile "$name")"
}

# fail_component NAME WHAT: name the component, show its last log lines, die.
fail_component() {
  local name=$1 what=$2
  printf 'lab: error: %s %s\n' "$name" "$what" >&2
  printf 'lab: last 20 lines of %s:\n' "$(logfile "$name")" >&2
  tail -n 20 "$(logfile "$name")" 2>/dev/null | sed 's/^/    /' >&2 || true
  printf 'lab: fix the cause, then run lab/down before retrying\n' >&2
  exit 1
}

# wait_for NAME SECONDS DESC CMD...: poll CMD every 0.25 s for up to
# SECONDS; fail naming component NAME if it dies or the time runs out.
wait_for() {
  local name=$1 secs=$2 desc=$3; shift 3
  local i
  for i in $(seq 1 $((secs * 4))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [[ $name != - ]] && ! proc_running "$name"; then
      fail_component "$name" "exited while waiting for: $desc"
    fi
    sleep 0.25
  done
  [[ $name == - ]] && die "timed out after ${secs}s waiting for: $desc"
  fail_component "$name" "not ready after ${secs}s ($desc)"
}

# Milliseconds since the epoch.
now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo "${t:0:13}"; }

# poll SECONDS CMD...: like wait_for, but returns 1 on timeout instead of
# failing (for checks whose failure is a result, not an error).
poll() {
  local secs=$1 _i; shift
  for _i in $(seq 1 $((secs * 4))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  return 1
}

# Real nodes (containerd + kubelet): their configuration, start and teardown.
# shellcheck source=realnodes.sh
. "$LAB_DIR/realnodes.sh"
