#!/usr/bin/env bash
# Real conntrack entries of pod-to-pod flows through a "node": three network namespaces
# (node, client pod, server pods) joined by veth pairs; the node routes between them and
# DNATs two "ClusterIPs" like kube-proxy (kube-dns 10.96.0.10:53/udp -> 10.244.3.53:53,
# a web Service 10.96.5.5:80/tcp -> 10.244.3.71:8080). The client (10.244.1.10) makes:
#   1. UDP to 10.96.0.10:53 (DNATed to the "CoreDNS pod" 10.244.3.53, replied)
#   2. UDP to 10.244.3.53:53 directly (replied)
#   3. TCP to 10.96.5.5:80 (DNATed to 10.244.3.71:8080, kept ESTABLISHED)
#   4. TCP to 10.244.3.72:9000 directly (kept ESTABLISHED)
#   5. UDP to 10.244.3.71:7000 (nobody listens: [UNREPLIED])
#   6. TCP to 10.244.3.71:8080 directly, closed by the client at once (CLOSE_WAIT)
# then `conntrack -L` in the node namespace is written to OUT (default: this folder's
# conntrack-L_netns-pods_conntrack-1.4.7.txt). Namespaces get unique names and are
# always deleted. Every flow is one packet exchange to addresses inside the namespaces.
# Needs root, ip, nft, conntrack, python3.
# Usage: bash crates/ghostip-datapath/tests/data/capture-conntrack-pods.sh [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/conntrack-L_netns-pods_conntrack-1.4.7.txt}
tag="gip-ct-$$"
node="$tag-node"; cli="$tag-cli"; srv="$tag-srv"
tmp=$(mktemp -d)
cleanup() {
  [ -n "${srv_pid:-}" ] && kill "$srv_pid" 2>/dev/null || true
  [ -n "${cli_pid:-}" ] && kill "$cli_pid" 2>/dev/null || true
  for ns in "$node" "$cli" "$srv"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
for ns in "$node" "$cli" "$srv"; do ip netns add "$ns"; done
ip -n "$node" link add vc type veth peer name eth0 netns "$cli"
ip -n "$node" link add vs type veth peer name eth0 netns "$srv"
ip -n "$node" addr add 10.244.1.1/24 dev vc
ip -n "$node" addr add 10.244.3.1/24 dev vs
ip -n "$cli" addr add 10.244.1.10/24 dev eth0
for a in 10.244.3.53 10.244.3.71 10.244.3.72; do ip -n "$srv" addr add $a/24 dev eth0; done
for ns in "$node" "$cli" "$srv"; do ip -n "$ns" link set lo up; done
ip -n "$node" link set vc up; ip -n "$node" link set vs up
ip -n "$cli" link set eth0 up; ip -n "$srv" link set eth0 up
ip -n "$cli" route add default via 10.244.1.1
ip -n "$srv" route add default via 10.244.3.1
ip netns exec "$node" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "$node" nft -f - <<'NFT'
table ip kube-proxy {
  chain prerouting { type nat hook prerouting priority -100;
    ip daddr 10.96.0.10 udp dport 53 dnat to 10.244.3.53:53
    ip daddr 10.96.5.5 tcp dport 80 dnat to 10.244.3.71:8080
  }
}
NFT
ip netns exec "$srv" python3 - "$tmp" <<'PY' &
import socket, sys, time, os, select
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("10.244.3.53", 53))
w = socket.socket(socket.AF_INET, socket.SOCK_STREAM); w.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); w.bind(("10.244.3.71", 8080)); w.listen(8)
x = socket.socket(socket.AF_INET, socket.SOCK_STREAM); x.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); x.bind(("10.244.3.72", 9000)); x.listen(8)
open(os.path.join(sys.argv[1], "srv-ready"), "w").close()
held = []
deadline = time.time() + 20
while time.time() < deadline and not os.path.exists(os.path.join(sys.argv[1], "done")):
    r, _, _ = select.select([u, w, x], [], [], 0.2)
    for s in r:
        if s is u:
            d, a = u.recvfrom(512); u.sendto(b"answer", a)
        else:
            c, _ = s.accept(); held.append(c)
PY
srv_pid=$!
for _ in $(seq 50); do [ -e "$tmp/srv-ready" ] && break; sleep 0.1; done
ip netns exec "$cli" python3 - "$tmp" <<'PY' &
import socket, sys, time, os
tmp = sys.argv[1]
def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b"query", addr)
    try: s.recvfrom(512)
    except OSError: pass
    return s
keep = [udp(("10.96.0.10", 53)), udp(("10.244.3.53", 53))]
keep.append(socket.create_connection(("10.96.5.5", 80), timeout=2))
keep.append(socket.create_connection(("10.244.3.72", 9000), timeout=2))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("10.244.3.71", 7000)); keep.append(s)
c = socket.create_connection(("10.244.3.71", 8080), timeout=2); c.close()
time.sleep(0.3)
open(os.path.join(tmp, "cli-ready"), "w").close()
deadline = time.time() + 20
while time.time() < deadline and not os.path.exists(os.path.join(tmp, "done")):
    time.sleep(0.1)
PY
cli_pid=$!
for _ in $(seq 100); do [ -e "$tmp/cli-ready" ] && break; sleep 0.1; done
[ -e "$tmp/cli-ready" ] || { echo "client flows did not complete" >&2; exit 1; }
ip netns exec "$node" conntrack -L > "$tmp/ct.txt" 2>&1
touch "$tmp/done"
wait "$cli_pid" "$srv_pid" || true
srv_pid=; cli_pid=
cp "$tmp/ct.txt" "$out"
