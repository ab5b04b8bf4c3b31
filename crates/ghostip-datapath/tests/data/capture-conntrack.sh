#!/usr/bin/env bash
# Re-creates the real conntrack captures in this folder: in a fresh network namespace,
# nftables DNATs a "ClusterIP" 10.96.0.10:53 (UDP and TCP) and [fd00::a]:53 to "pod"
# addresses on lo; python3 sockets make a replied UDP flow, an unreplied UDP flow, a TCP
# connection and an unreplied IPv6 UDP flow; then `conntrack -L` prints them as text and,
# under `strace -e read=3`, the kernel's netlink dump of the same table is saved as raw
# bytes (all recvmsg buffers, NLMSG_DONE included).
# Needs root, unshare, nft, conntrack, strace, python3.
# Usage: bash crates/ghostip-datapath/tests/data/capture-conntrack.sh
set -euo pipefail
cd "$(dirname "$0")"
out=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/flows.sh" <<'EOF'
set -e
ip link set lo up
for a in 10.96.0.10/32 10.244.1.5/32 10.244.1.6/32; do ip addr add $a dev lo; done
for a in fd00::a/128 fd00::5/128; do ip addr add $a dev lo; done
nft -f - <<'NFT'
table inet t {
  chain out { type nat hook output priority -100; ip daddr 10.96.0.10 udp dport 53 dnat ip to 10.244.1.5:5353; ip daddr 10.96.0.10 tcp dport 53 dnat ip to 10.244.1.6:5354; ip6 daddr fd00::a udp dport 53 dnat ip6 to [fd00::5]:5353; }
  chain f { type filter hook output priority 0; ct state new accept; }
}
NFT
python3 - "$1" <<'PY'
import socket, subprocess, sys
tmp = sys.argv[1]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("10.244.1.5", 5353))
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM); t.bind(("10.244.1.6", 5354)); t.listen(4)
u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u6.bind(("fd00::5", 5353))
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.sendto(b"q", ("10.96.0.10", 53))
data, addr = u.recvfrom(100); u.sendto(b"a", addr); c.recvfrom(100)
c2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c2.sendto(b"q", ("10.96.0.10", 53))
c6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); c6.sendto(b"q", ("fd00::a", 53))
tc = socket.create_connection(("10.96.0.10", 53)); s, _ = t.accept(); tc.send(b"x"); s.recv(10); s.send(b"y"); tc.recv(10)
subprocess.run(f"conntrack -L > {tmp}/ct.txt 2>&1", shell=True, check=True)
subprocess.run(f"strace -e trace=recvmsg -e read=3 -o {tmp}/strace.txt conntrack -L > /dev/null 2>&1", shell=True, check=True)
PY
EOF
unshare -n bash "$tmp/flows.sh" "$tmp"
cp "$tmp/ct.txt" "$out/conntrack-L_netns-dnat_conntrack-1.4.7.txt"
python3 - "$tmp/strace.txt" "$out/conntrack-netlink-dump_netns-dnat.bin" <<'PY'
import re, sys
data = bytearray()
for line in open(sys.argv[1]):
    m = re.match(r"\s*\|\s+[0-9a-f]{5}\s+((?:[0-9a-f]{2}\s+){1,16})", line)
    if m:
        data += bytes.fromhex("".join(m.group(1).split()))
open(sys.argv[2], "wb").write(data)
print(len(data), "bytes of netlink messages")
PY
conntrack --version
uname -r
