#!/usr/bin/env bash
# Re-creates the real-tool captures in this folder from generated kube-proxy rules:
# the generator's iptables-save text is loaded with iptables-restore and the generator's
# nft script with nft -f, each in a fresh network namespace, and read back with the real
# iptables-save / nft -j. Needs root, unshare, iptables (nf_tables) and nft.
# Usage: bash crates/ghostip-datapath/tests/data/capture.sh
set -euo pipefail
cd "$(dirname "$0")"
gen() { cargo run -q --release -p ghostip-datapath --example gen_dump -- "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gen iptables 12 40 --empty-every 6 > "$tmp/rules.iptables"
unshare -n sh -c "iptables-restore < '$tmp/rules.iptables' && iptables-save" \
  | sed -e 's/ on [A-Z][a-z][a-z] [A-Z][a-z][a-z] .*$/ on (date removed)/' \
  > iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt

gen nft-script 12 40 --empty-every 6 > "$tmp/rules.nft"
unshare -n sh -c "nft -f '$tmp/rules.nft' && nft -j list table ip kube-proxy" \
  > nft-j_gen-12svc-40ep_nft-1.0.6.json

gen nft-script 6 14 --inline-dnat > "$tmp/inline.nft"
unshare -n sh -c "nft -f '$tmp/inline.nft' && nft -j list table ip kube-proxy" \
  > nft-j_gen-6svc-14ep-inline-dnat_nft-1.0.6.json

iptables --version
nft --version
