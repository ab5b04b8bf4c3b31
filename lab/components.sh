# How each lab component is started (flags in one place). Sourced by lab/up
# and lab/component after lib.sh. Every function returns once the component
# is healthy, or fails naming it with the last lines of its log.
# shellcheck shell=bash

PKI=$LAB_STATE/pki

start_etcd() {
  start_proc etcd "$LAB_HUB" "$LAB_BIN/etcd" --name=lab --data-dir="$LAB_STATE/etcd" \
    --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
    --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
    --initial-cluster=lab=http://127.0.0.1:2380 --listen-metrics-urls=http://127.0.0.1:2381 \
    --unsafe-no-fsync --log-level=warn
  wait_for etcd 30 "etcd /health" in_hub curl -fsS --max-time 1 http://127.0.0.1:2379/health
}

apiserver_ready() {
  in_hub curl -fsS --max-time 2 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(<"$LAB_STATE/token")" \
    "$LAB_API/readyz"
}

start_apiserver() {
  # --advertise-address: the hub has no default route, so the apiserver
  # cannot guess one; 10.200.0.1 is also what the `kubernetes` Service's
  # endpoints (and kube-proxy's rules for 10.96.0.1) point at.
  start_proc kube-apiserver "$LAB_HUB" "$LAB_BIN/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$LAB_HUB_IP" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --cert-dir="$PKI/generated" \
    --token-auth-file="$LAB_STATE/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$LAB_SERVICE_CIDR" \
    --kubelet-client-certificate="$PKI/kubelet-client.crt" --kubelet-client-key="$PKI/kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=true --profiling=false
  wait_for kube-apiserver 90 "kube-apiserver /readyz" apiserver_ready
}

start_kcm() {
  local kc=$LAB_KUBECONFIG
  start_proc kube-controller-manager "$LAB_HUB" "$LAB_BIN/kube-controller-manager" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false --controllers='*' \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --service-cluster-ip-range="$LAB_SERVICE_CIDR" \
    --allocate-node-cidrs=true --cluster-cidr="$LAB_CLUSTER_CIDR" --node-cidr-mask-size=24 --profiling=false
  wait_for kube-controller-manager 60 "kube-controller-manager /healthz" \
    in_hub curl -kfsS --max-time 2 https://127.0.0.1:10257/healthz
}

start_scheduler() {
  local kc=$LAB_KUBECONFIG
  start_proc kube-scheduler "$LAB_HUB" "$LAB_BIN/kube-scheduler" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false
  wait_for kube-scheduler 60 "kube-scheduler /healthz" in_hub curl -kfsS --max-time 2 https://127.0.0.1:10259/healthz
}

# kwok fakes the kubelets' status reporting: node conditions and lease
# heartbeats, pod Ready and pod IP (from podsync's annotation, see
# lab/kwok/pod-ready.yaml; and lab/kwok/pod-ready-again.yaml restores Ready
# after a node NotReady blip, as a kubelet does). Pod deletion is left to
# podsync (no pod-delete stage), which deletes the Pod object after
# emulating the termination.
write_kwok_config() {
  local s=$LAB_BIN/kwok-stages f
  {
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
      pod/fast/pod-complete.yaml; do
      [[ -f $s/$f ]] || die "kwok stage $s/$f missing; rerun lab/build kwok"
      echo '---'; cat "$s/$f"
    done
    echo '---'; cat "$LAB_DIR/kwok/pod-ready.yaml"
    echo '---'; cat "$LAB_DIR/kwok/pod-ready-again.yaml"
  } >"$LAB_STATE/kwok.yaml"
}

start_kwok() {
  start_proc kwok "$LAB_HUB" "$LAB_BIN/kwok" --kubeconfig="$LAB_KUBECONFIG" --config="$LAB_STATE/kwok.yaml" \
    --manage-all-nodes=true --node-lease-duration-seconds=40
  sleep 1
  proc_running kwok || fail_component kwok "exited right after start"
}

podsync_synced_count() { grep -c '"event":"caches-synced"' "$LAB_STATE/logs/podsync.jsonl" 2>/dev/null || true; }

start_podsync() {
  local nodes before; nodes=$(lab_nodes | paste -sd, -)
  before=$(podsync_synced_count); before=${before:-0}
  START_MODE=nsenter start_proc podsync "$LAB_HUB" "$LAB_BIN/podsync" run --kubeconfig="$LAB_KUBECONFIG" \
    --state-dir="$LAB_STATE" --nodes="$nodes" --coredns="$LAB_BIN/coredns" \
    --cluster-dns="$LAB_DNS_IP" --cluster-domain="$LAB_DOMAIN" --node-netns-prefix=ghostip-
  wait_for podsync 30 "podsync caches synced" test_gt podsync_synced_count "$before"
}

test_gt() { local v; v=$("$1"); (( ${v:-0} > $2 )); }

kube_proxy_synced() {
  # /healthz answers 200 only once the proxier has synced its rules.
  in_node "$1" curl -fsS --max-time 2 http://127.0.0.1:10256/healthz
}

# start_kube_proxy node-N: the real kube-proxy in the node's namespace.
# Conntrack sysctls cannot be set in a netns, so the conntrack limits and
# timeouts are 0 (leave as is), as hack/local-up-cluster.sh does.
start_kube_proxy() {
  local node=$1 mode; mode=$(<"$LAB_STATE/proxy-mode")
  if [[ $(node_kind) == real ]]; then start_kube_proxy_pod "$node"; return; fi
  PATH=$(lab_path) start_proc "kube-proxy-$node" "$(node_netns "$node")" "$LAB_BIN/kube-proxy" \
    --kubeconfig="$LAB_KUBECONFIG" --hostname-override="$node" --proxy-mode="$mode" \
    --cluster-cidr="$LAB_CLUSTER_CIDR" \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249 --v=2
  wait_for "kube-proxy-$node" 60 "kube-proxy on $node synced (/healthz)" kube_proxy_synced "$node"
}


# component_names: every daemon lab/up starts, in start order.
component_names() {
  local n
  if [[ $(node_kind) == real ]]; then
    echo etcd kube-apiserver kube-controller-manager kube-scheduler
    for n in $(lab_nodes); do echo "containerd-$n kubelet-$n"; done
  else
    echo etcd kube-apiserver kube-controller-manager kube-scheduler kwok podsync
  fi
  if [[ $(node_cni) == cilium ]]; then
    for n in $(lab_nodes); do echo "cilium-$n"; done
  else
    for n in $(lab_nodes); do echo "kube-proxy-$n"; done
  fi
}

start_component() {
  case $1 in
    etcd) start_etcd ;;
    kube-apiserver) start_apiserver ;;
    kube-controller-manager) start_kcm ;;
    kube-scheduler) start_scheduler ;;
    kwok) start_kwok ;;
    podsync) start_podsync ;;
    kube-proxy-node-*) start_kube_proxy "${1#kube-proxy-}" ;;
    kubelet-node-*) start_real_node "${1#kubelet-}" ;;
    containerd-node-*) start_containerd "${1#containerd-}" ;;
    cilium-node-*) start_cilium "${1#cilium-}" ;;
    *) die "unknown component $1 (known: $(component_names | xargs))" ;;
  esac
}
