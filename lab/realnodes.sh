# Real lab nodes (lab/up --node-kind real): how each node's containerd and
# kubelet are configured and started, and what of the host they need.
# Sourced by lib.sh. docs/LAB.md, "Real nodes".
# shellcheck shell=bash

# The host values of the kernel tunables a kubelet sets (setupKernelTunables;
# they are not per network namespace): lab/up records them before the first
# kubelet starts and lab/down writes them back.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

save_host_sysctls() {
  local f=$LAB_STATE/host-sysctls k
  [[ -e $f ]] && return 0
  for k in "${KUBELET_SYSCTLS[@]}"; do printf '%s=%s\n' "$k" "$(sysctl -n "$k")"; done >"$f.tmp"
  mv "$f.tmp" "$f"
}

# restore_host_sysctls: write back what save_host_sysctls recorded.
restore_host_sysctls() {
  local f=$LAB_STATE/host-sysctls kv
  [[ -f $f ]] || return 0
  while read -r kv; do
    [[ -n $kv ]] && sysctl -qw "$kv" >/dev/null 2>&1 || log "could not restore sysctl $kv"
  done <"$f"
}

# The host directories a real node bind-mounts over (in its own mount
# namespace) must exist as mount points; the ones lab/up had to create are
# recorded and lab/down removes them.
ensure_host_mountpoint() {
  [[ -d $1 ]] && return 0
  mkdir -p "$1"
  echo "$1" >>"$LAB_STATE/host-dirs"
}

# cgroup_hierarchies: the mount points of every cgroup hierarchy (v1 and v2).
cgroup_hierarchies() {
  awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" || $(i+1) == "cgroup2") print $5; break } }' \
    /proc/self/mountinfo
}

# start_containerd node-N: containerd again, under the running kubelet (the
# containers kept running under their shims; the kubelet reconnects).
start_containerd() {
  local node=$1
  proc_running "kubelet-$node" || die "$node: the kubelet is not running: lab/component start kubelet-$node starts the node"
  START_MODE=nsenter start_proc "containerd-$node" "$(node_netns "$node")" "$LAB_DIR/realnode" "$node" containerd
  wait_for "containerd-$node" 30 "containerd on $node answers" node_exec "$node" ctr -a /run/containerd/containerd.sock version
}

# The kubelet's cgroupRoot (/ghostip-node-N) must exist in every hierarchy;
# lab/down removes it with everything below.
ensure_cgroup_root() {
  local h
  for h in $(cgroup_hierarchies); do mkdir -p "$h/ghostip-$1"; done
}

# remove_cgroup_roots: kill what still runs in a node's cgroups, then remove
# them, deepest first, in every hierarchy.
remove_cgroup_roots() {
  local h d pids
  for h in $(cgroup_hierarchies); do
    for d in "$h"/ghostip-node-*; do
      [[ -d $d ]] || continue
      pids=$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs || true)
      [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
    done
  done
  sleep 0.2
  for h in $(cgroup_hierarchies); do
    for d in "$h"/ghostip-node-*; do
      [[ -d $d ]] || continue
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [[ -d $d ]] && log "could not remove cgroup $d"
    done
  done
  return 0
}

# write_real_node node-N: containerd's and the kubelet's configuration and
# the node's CNI network (bridge + host-local over the node's podCIDR).
write_real_node() {
  local node=$1 nd; nd=$(node_dir "$node")
  mkdir -p "$nd"/{kubelet,log,containerd,cni,cni-ipam,manifests}
  local pause; pause=$(sed -n 's/^PAUSE_IMAGE=//p' "$LAB_BIN/images/names.env" 2>/dev/null || true)
  # The CNI plugins containerd runs: the lab's, and on a Cilium node cilium-cni beside them.
  local cni_bin=$LAB_BIN/cni
  if [[ $(node_cni) == cilium ]]; then
    cni_bin=$nd/cni-bin
    mkdir -p "$cni_bin"
    ln -sfn "$LAB_BIN"/cni/* "$cni_bin/"
    ln -sfn "$LAB_BIN/cilium-cni" "$cni_bin/cilium-cni"
  fi
  [[ -n $pause ]] || die "no pause image in $LAB_BIN/images (run lab/build images)"
  cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd"
state = "/run/containerd"
# The opt plugin would create /opt/containerd on the host; the lab needs none of these.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "/run/containerd/containerd.sock"
[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  # The lab's processes lack CAP_SYS_RESOURCE: a negative oom_score_adj fails.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "/run/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$nd/cni"
    max_conf_num = 1
EOF
  if [[ $(node_cni) == cilium ]]; then
    # cilium-cni asks the node's agent (its socket in the node's /run) for the address.
    cat >"$nd/cni/05-cilium.conflist" <<EOF
{
  "cniVersion": "0.3.1",
  "name": "cilium",
  "plugins": [{"type": "cilium-cni", "log-file": "/var/run/cilium/cilium-cni.log"}]
}
EOF
  else
  cat >"$nd/cni/10-lab.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lab",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$nd/cni-ipam",
              "ranges": [[{"subnet": "$(node_cidr "$node")"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  fi
  # Pods with dnsPolicy Default (CoreDNS) get this resolv.conf: the hub,
  # where nothing serves DNS (names outside the cluster fail fast; no loop).
  printf 'nameserver %s\n' "$LAB_HUB_IP" >"$nd/resolv.conf"
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Debian 12's containerd 1.6 and this kernel's cgroup v1/v2 hybrid; see docs/LAB.md.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /ghostip-$node
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: $nd/manifests
address: $(node_ip "$node")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $LAB_STATE/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: $LAB_DOMAIN
clusterDNS: [$LAB_DNS_IP]
resolvConf: $nd/resolv.conf
podLogsDir: /var/log/pods
# The host's disk is shared with everything else on it and may be fuller
# than a node's would be: no eviction or image GC for disk in the lab.
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
EOF
}

real_node_ready() {
  [[ $(kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# start_real_node node-N: containerd + kubelet in the node's namespaces
# (lab/realnode); returns once the kubelet reports the Node Ready.
start_real_node() {
  local node=$1 nd; nd=$(node_dir "$node")
  if proc_running "containerd-$node"; then
    # A kubelet restart: containerd and the containers kept running.
    START_MODE=nsenter start_proc "kubelet-$node" "$(node_netns "$node")" "$LAB_DIR/realnode" "$node" kubelet
    wait_for - 90 "$node Ready (log: $(logfile "kubelet-$node"))" real_node_ready "$node"
    return
  fi
  [[ -f $nd/kubelet.yaml ]] || write_real_node "$node"
  save_host_sysctls
  ensure_host_mountpoint /var/lib/kubelet
  ensure_cgroup_root "$node"
  PATH=$(lab_path) START_MODE=nsenter start_proc "kubelet-$node" "$(node_netns "$node")" "$LAB_DIR/realnode" "$node"
  wait_for - 90 "$node Ready (log: $(logfile "kubelet-$node"))" real_node_ready "$node"
}

# node_exec node-N CMD...: CMD in a real node's network and mount namespaces
# (those of its containerd), where /run/containerd/containerd.sock is.
node_exec() {
  local node=$1 pid; shift
  pid=$(proc_pid "containerd-$node") || die "$node: containerd is not running"
  nsenter -t "$pid" -n -m -- "$@"
}

# import_on_node node-N ARCHIVE: the OCI archive into the node's containerd.
import_on_node() {
  node_exec "$1" ctr -a /run/containerd/containerd.sock -n k8s.io images import --no-unpack "$2" >/dev/null ||
    die "$1: ctr images import $2 failed"
}

# --- kube-proxy on a real node: a static pod -------------------------------------
# The kubelet runs it from the node's manifest directory (hostNetwork, the lab's
# kube-proxy image, the flags of the kwok lab's process). `lab/kube-proxy stop`
# takes the manifest away: the kubelet stops the container and its rules stay in
# the node's namespace, as when kube-proxy lost the API server.
kube_proxy_manifest() { printf '%s/manifests/kube-proxy.yaml' "$(node_dir "$1")"; }

write_kube_proxy_pod() {
  local node=$1 mode image backend switch=""
  mode=$(<"$LAB_STATE/proxy-mode")
  image=$(sed -n 's/^KUBE_PROXY_IMAGE=//p' "$LAB_BIN/images/names.env")
  [[ -n $image ]] || die "no kube-proxy image in $LAB_BIN/images (run lab/build)"
  backend=$(cat "$LAB_STATE/iptables-backend" 2>/dev/null || echo host)
  if [[ $backend == host ]]; then
    case $(iptables -V 2>/dev/null) in *legacy*) backend=legacy ;; *) backend=nft ;; esac
  fi
  # The image's iptables is Debian's (nf_tables by default); the other backend is an
  # alternative inside the container.
  [[ $backend == legacy ]] &&
    switch='update-alternatives --quiet --set iptables /usr/sbin/iptables-legacy; update-alternatives --quiet --set ip6tables /usr/sbin/ip6tables-legacy; '
  # Written beside the manifest under a dot name, which the kubelet's file source skips:
  # a plain .tmp there is read as a second static pod of the same name, whose mirror
  # then fights the real one's (its volume stuck for the kubelet's 2-minute deadline).
  local tmp
  tmp="$(node_dir "$node")/manifests/.kube-proxy.yaml.tmp"
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: kube-proxy
  namespace: kube-system
  labels: {k8s-app: kube-proxy, tier: node}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  terminationGracePeriodSeconds: 5
  containers:
  - name: kube-proxy
    image: $image
    command: ["/bin/sh", "-c", "${switch}exec /usr/local/bin/kube-proxy --kubeconfig=$LAB_KUBECONFIG --hostname-override=$node --proxy-mode=$mode --cluster-cidr=$LAB_CLUSTER_CIDR --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249 --v=2"]
    securityContext: {privileged: true}
    volumeMounts:
    - {name: kubeconfig, mountPath: $LAB_KUBECONFIG, readOnly: true}
  volumes:
  - {name: kubeconfig, hostPath: {path: $LAB_KUBECONFIG, type: File}}
EOF
  mv "$tmp" "$(kube_proxy_manifest "$node")"
}

# kube_proxy_container_pid node-N: the PID of the kube-proxy process the kubelet
# started (in the node's network namespace, its image's binary).
kube_proxy_container_pid() {
  local p exe
  for p in $(ip netns pids "$(node_netns "$1")" 2>/dev/null); do
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    [[ $exe == /usr/local/bin/kube-proxy ]] && { echo "$p"; return 0; }
  done
  return 1
}

start_kube_proxy_pod() {
  local node=$1
  write_kube_proxy_pod "$node"
  wait_for - 90 "kube-proxy static pod on $node synced (/healthz)" kube_proxy_synced "$node"
}

stop_kube_proxy_pod() {
  local node=$1 t=${2:-10} i
  rm -f "$(kube_proxy_manifest "$node")"
  for i in $(seq 1 $((t * 4 + 40))); do
    kube_proxy_container_pid "$node" >/dev/null || return 0
    sleep 0.25
  done
  log "kube-proxy on $node still runs after its manifest was removed"
  return 1
}

# --- Cilium on a real node (lab/up --cni cilium) ----------------------------------
# cilium-agent runs as a lab process in the node's network namespace and in the
# mount namespace of its containerd (lab/realnode node-N cilium), where the
# node's own bpffs is mounted at /sys/fs/bpf, its cgroup v2 at
# /run/cilium/cgroupv2, and the kernel-wide sysctls it writes are files of the
# node. kube-proxy replacement on (no kube-proxy), VXLAN between the nodes,
# Kubernetes IPAM (the Node's podCIDR), identities as CRDs (no operator, no
# etcd), no L7 proxy, no Hubble, no health endpoints. docs/LAB.md, "Cilium nodes".

# cilium_agent_args node-N: the agent's flags, one per line.
cilium_agent_args() {
  printf '%s\n' \
    --k8s-kubeconfig-path="$LAB_KUBECONFIG" \
    --k8s-namespace=kube-system \
    --cluster-name=ghostip-lab \
    --ipam=kubernetes \
    --k8s-require-ipv4-pod-cidr=true \
    --enable-ipv4=true --enable-ipv6=false \
    --routing-mode=tunnel --tunnel-protocol=vxlan \
    --devices=eth0 \
    --kube-proxy-replacement=true \
    --bpf-root=/sys/fs/bpf \
    --cgroup-root=/run/cilium/cgroupv2 \
    --state-dir=/run/cilium \
    --lib-dir="$LAB_STATE/cilium/lib" \
    --identity-allocation-mode=crd \
    --enable-l7-proxy=false \
    --enable-hubble=false \
    --enable-health-checking=false \
    --enable-endpoint-health-checking=false \
    --enable-policy=never \
    --enable-ipv4-masquerade=false \
    --enable-bpf-masquerade=false \
    --cni-exclusive=false \
    --agent-health-port=9879
}

# cilium_runtime: what every agent shares, under the lab's state: clang on PATH
# as Cilium calls it (Debian's clang-19; Cilium needs 18 or newer) and its
# library dir with the module's bpf/ sources.
cilium_runtime() {
  local clang
  clang=$(command -v clang-19) || die "no clang-19 (Debian package clang-19): Cilium compiles its datapath with it"
  mkdir -p "$LAB_STATE/cilium/bin" "$LAB_STATE/cilium/lib"
  ln -sfn "$clang" "$LAB_STATE/cilium/bin/clang"
  ln -sfn "$LAB_BIN/cilium-bpf" "$LAB_STATE/cilium/lib/bpf"
}

# cilium_ready node-N: the node's agent answers `cilium-dbg status --brief` with OK.
cilium_ready() {
  local out
  out=$(node_exec "$1" "$LAB_BIN/cilium-dbg" status --brief 2>&1) && [[ $out == OK* ]]
}

# start_cilium node-N: the node's agent, then until it is ready (it compiles
# its datapath first: a minute or more on two cores).
start_cilium() {
  local node=$1
  cilium_runtime
  START_MODE=nsenter start_proc "cilium-$node" "$(node_netns "$node")" "$LAB_DIR/realnode" "$node" cilium
  wait_for "cilium-$node" 300 "cilium-agent on $node ready (cilium-dbg status)" cilium_ready "$node"
}

stop_cilium() { stop_proc "cilium-$1" "${2:-10}"; }
