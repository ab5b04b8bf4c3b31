# Helpers shared by the scenarios. Sourced after lib.sh.
# shellcheck shell=bash

SCEN_NS=demo
SCEN_OBSERVER=node-1   # where dig runs (any node works)

say() { printf '\n=== %s\n' "$*"; }
# Show a command and its output, as an operator would type it.
show() { printf '$ %s\n' "$*"; }

require_lab() {
  need_root
  [[ -d $LAB_STATE && -e /run/netns/$LAB_HUB ]] || die "the lab is not up: run lab/up first"
  in_hub curl -fsS --max-time 3 --cacert "$LAB_STATE/pki/ca.crt" -H "Authorization: Bearer $(<"$LAB_STATE/token")" \
    "$LAB_API/readyz" >/dev/null 2>&1 || die "the lab's kube-apiserver does not answer (see lab/status)"
}

# Name and IP of every Ready CoreDNS pod: "name ip" lines.
coredns_pods() {
  kc -n kube-system get pods -l k8s-app=kube-dns \
    -o jsonpath='{range .items[?(@.status.podIP)]}{.metadata.name}{" "}{.status.podIP}{" "}{.metadata.deletionTimestamp}{"\n"}{end}' |
    awk 'NF == 2 {print $1, $2}'
}

# dig_a NODE SERVER NAME: "TTL ip,ip,..." of the A answer, or "- ERR:<reason>".
dig_a() {
  local out rc=0
  out=$(in_node "$1" timeout 3 dig +noall +answer +time=1 +tries=1 "@$2" "$3" A 2>&1) || rc=$?
  if ((rc != 0)); then
    printf -- '- ERR:%s\n' "$(printf '%s' "$out" | tr -s ' \n' ' ' | cut -c1-60 | sed 's/ *$//; s/ /_/g')"
    return
  fi
  printf '%s\n' "$out" | awk '$4 == "A" {ips[++n] = $5; if (min == "" || $2 < min) min = $2}
    END {if (n == 0) {print "- NOANSWER"; exit}
         s = ""; for (i = 1; i <= n; i++) s = s (i > 1 ? "," : "") ips[i]; print min, s}' |
    { read -r ttl ips; printf '%s %s\n' "$ttl" "$(tr ',' '\n' <<<"$ips" | sort -V | paste -sd, -)"; }
}

# set_corefile FILE: make the coredns ConfigMap hold FILE and make every
# CoreDNS pod run it (rollout restart when it changed); waits until exactly
# the Deployment's replicas serve and the old pods are gone.
set_corefile() {
  local file=$1 cur want
  want=$(<"$file")
  cur=$(kc -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}')
  if [[ $cur != "$want" ]]; then
    say "switching the coredns ConfigMap to $(basename "$file") and restarting CoreDNS"
    show "kubectl -n kube-system create configmap coredns --from-file=Corefile=$file --dry-run=client -o yaml | kubectl apply -f -"
    kc -n kube-system create configmap coredns --from-file=Corefile="$file" --dry-run=client -o yaml | kc apply -f - >/dev/null
    show "kubectl -n kube-system rollout restart deployment/coredns"
    kc -n kube-system rollout restart deployment/coredns >/dev/null
    KC_TIMEOUT=150 kc -n kube-system rollout status deployment/coredns --timeout=120s
  fi
  wait_coredns_settled
}

coredns_settled() {
  local want pods files
  want=$(kc -n kube-system get deploy coredns -o jsonpath='{.spec.replicas}')
  [[ $(kc -n kube-system get deploy coredns -o jsonpath='{.status.updatedReplicas}/{.status.readyReplicas}/{.status.replicas}') == "$want/$want/$want" ]] || return 1
  pods=$(kc -n kube-system get pods -l k8s-app=kube-dns --no-headers 2>/dev/null | wc -l)
  if [[ $(node_kind) == real ]]; then
    files=$pods
  else
    files=$(compgen -G "$LAB_STATE/pods/kube-system_coredns-*.env" | wc -l)
  fi
  ((pods == want && files == want))
}

# The component that runs the lab's pods: podsync on kwok nodes; on real
# nodes the kubelets (checked by the API's view, not a process: "-").
pods_component() { if [[ $(node_kind) == real ]]; then echo -; else echo podsync; fi; }

# pod_gone NAMESPACE NAME: the pod's processes are gone (podsync's state
# file on kwok nodes; the Pod object, which the kubelet deletes last, on real ones).
pod_gone() {
  if [[ $(node_kind) == real ]]; then
    ! kc -n "$1" get pod "$2" >/dev/null 2>&1
  else
    ! compgen -G "$LAB_STATE/pods/$1_$2.env" >/dev/null
  fi
}

wait_coredns_settled() {
  wait_for "$(pods_component)" 120 "CoreDNS settled (all replicas ready, old pods gone)" coredns_settled
  local name ip
  while read -r name ip; do
    wait_for - 30 "CoreDNS $name answers at $ip" dig_ok "$ip"
  done < <(coredns_pods)
}

dig_ok() { in_node "$SCEN_OBSERVER" dig +short +time=1 +tries=1 "@$1" "kubernetes.default.svc.$LAB_DOMAIN" | grep -q .; }

# deploy_web [MIN_READY_SECONDS [PRESTOP_SECONDS]]: namespace demo,
# Deployment web (3 replicas, containerPort 8080, default rolling update =
# maxSurge 1 / maxUnavailable 0 for 3 replicas, preStop `sleep N` when N > 0),
# headless Service web. Waits until the rollout is complete and the
# EndpointSlice lists 3 ready endpoints.
deploy_web() {
  local min_ready=${1:-0} prestop=${2:-0} lifecycle="" grace=30
  # kwok nodes: podsync runs every pod of this Deployment as `podsync serve`
  # (the image is never pulled). Real nodes: the lab's server image, which is
  # that same server, and Kubernetes' own sleep action (the image has no shell).
  local image=registry.k8s.io/e2e-test-images/agnhost:2.53 args='["netexec", "--http-port=8080"]' env=""
  if [[ $(node_kind) == real ]]; then
    image=$(sed -n 's/^SERVER_IMAGE=//p' "$LAB_BIN/images/names.env")
    args='["--pod", "$(POD_NAMESPACE)/$(POD_NAME)", "--ip", "$(POD_IP)", "--tcp", "8080", "--keepalive"]'
    env='env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}, {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}, {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}]'
  fi
  if ((prestop > 0)); then
    if [[ $(node_kind) == real ]]; then
      lifecycle="lifecycle: {preStop: {sleep: {seconds: $prestop}}}"
    else
      lifecycle="lifecycle: {preStop: {exec: {command: [\"/bin/sh\", \"-c\", \"sleep $prestop\"]}}}"
    fi
    ((prestop + 5 > grace)) && grace=$((prestop + 5))
  fi
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $SCEN_NS}
EOF
  wait_for kube-controller-manager 30 "ServiceAccount $SCEN_NS/default" kc -n "$SCEN_NS" get serviceaccount default
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $SCEN_NS, labels: {app: web}}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080, targetPort: 8080, protocol: TCP}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: $SCEN_NS, labels: {app: web}}
spec:
  replicas: 3
  minReadySeconds: $min_ready
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: $grace
      containers:
      - name: web
        image: $image
        args: $args
        ports: [{name: http, containerPort: 8080, protocol: TCP}]
        $env
        $lifecycle
EOF
  KC_TIMEOUT=200 kc -n "$SCEN_NS" rollout status deployment/web --timeout=180s >/dev/null
  if ! poll 90 web_settled; then
    web_diagnose >&2
    die "timed out after 90s waiting for: 3 ready endpoints in the web EndpointSlice and no terminating web pod"
  fi
}

# What the lab shows when web does not settle: pods with their conditions,
# the EndpointSlice's endpoints, node readiness and podsync's last actions on
# demo pods.
web_diagnose() {
  echo "--- web pods (name node ip phase ready deletionTimestamp)"
  kc -n "$SCEN_NS" get pods -l app=web -o json | jq -r '.items[] | [.metadata.name, .spec.nodeName,
    (.status.podIP // "-"), .status.phase,
    ((.status.conditions // []) | map(select(.type == "Ready") | .status) | first // "-"),
    (.metadata.deletionTimestamp // "-")] | @tsv'
  echo "--- web EndpointSlices (address ready serving terminating)"
  kc -n "$SCEN_NS" get endpointslices -l kubernetes.io/service-name=web -o json | jq -r '.items[] |
    .metadata.name as $n | (.endpoints // [])[] | [$n, .addresses[0], .conditions.ready,
    .conditions.serving, .conditions.terminating] | @tsv'
  echo "--- nodes"
  kc get nodes --no-headers
  echo "--- podsync, last demo/ events"
  grep '"demo/' "$LAB_STATE/logs/podsync.jsonl" 2>/dev/null | tail -n 25
}

web_ready_ips() {
  kc -n "$SCEN_NS" get endpointslices -l kubernetes.io/service-name=web -o json |
    jq -r '[.items[].endpoints[]? | select(.conditions.ready == true) | .addresses[0]] | sort | .[]' | sort -V
}

web_settled() {
  [[ $(web_ready_ips | wc -l) == 3 ]] || return 1
  [[ $(kc -n "$SCEN_NS" get pods -l app=web --no-headers 2>/dev/null | wc -l) == 3 ]]
}

# Resolve --corefile NAME|FILE.
corefile_path() {
  case $1 in
    classic|kubeadm-classic) echo "$LAB_DIR/corefiles/kubeadm-classic" ;;
    cache5) echo "$LAB_DIR/corefiles/cache5" ;;
    new|kubeadm-new) echo "$LAB_DIR/corefiles/kubeadm-new" ;;
    *) [[ -f $1 ]] || die "no Corefile '$1' (classic, cache5, kubeadm-new or a file)"; echo "$1" ;;
  esac
}

# watch_slices NAMESPACE SERVICE OUT SECONDS: records the Service's
# EndpointSlice watch in OUT, one "ms<TAB>TYPE<TAB>slice<TAB>ready,ips" line
# per event, timestamped on arrival, in the background for at most SECONDS;
# OUT.pid holds the PID of the kubectl to stop it by. Returns once the first
# event is in.
watch_slices() {
  local ns=$1 svc=$2 out=$3 secs=$4
  {
    ip netns exec "$LAB_HUB" env KUBECONFIG="$LAB_KUBECONFIG" timeout "$secs" "$LAB_BIN/kubectl" \
      -n "$ns" get endpointslices -l kubernetes.io/service-name="$svc" -w -o json --output-watch-events 2>/dev/null &
    echo $! >"$out.pid"
    wait
  } | jq -c --unbuffered -r '[.type, .object.metadata.name,
        ([.object.endpoints[]? | select(.conditions.ready == true) | .addresses[0]] | join(","))] | @tsv' |
    while IFS= read -r l; do printf '%s\t%s\n' "$(now_ms)" "$l"; done >"$out" &
  local _
  for _ in $(seq 1 40); do [[ -s $out.pid && -s $out ]] && break; sleep 0.25; done
}

# slices_ready_now FILE: the ready addresses (comma-separated, sorted) of the
# latest state of every slice in a watch_slices log.
slices_ready_now() {
  awk -F'\t' '{st[$3] = ($2 == "DELETED") ? "" : $4} END {for (k in st) print st[k]}' "$1" |
    tr ',' '\n' | grep . | sort -Vu | paste -sd, -
}

# corefile_budget FILE: "CACHE_CAP RECORD_TTL DISABLED EXPECT" for a
# Corefile: how long CoreDNS may keep answering a removed pod IP of a headless
# Service (EXPECT s: min(cache cap, kubernetes ttl), 0 when cluster.local
# answers are not cached).
corefile_budget() {
  local cap ttl disabled
  cap=$(awk '$1 == "cache" {print ($2 ~ /^[0-9]+$/) ? $2 : 3600; exit}' "$1")
  ttl=$(awk '$1 == "ttl" {print $2; exit}' "$1")
  ttl=${ttl:-5}
  disabled=$(grep -Eq "disable[[:space:]]+success[[:space:]]+($LAB_DOMAIN|\\.)" "$1" && echo 1 || echo 0)
  [[ -n $cap ]] || disabled=1   # no cache plugin at all
  if ((disabled)); then echo "${cap:-none} $ttl 1 0"; else echo "$cap $ttl 0 $((cap < ttl ? cap : ttl))"; fi
}
