# Shared settings and helpers for the lab scripts. Sourced, never executed.
# shellcheck shell=bash
LAB_DIR=${LAB_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck source=versions.env
. "$LAB_DIR/versions.env"
GO_VERSION=$(go env GOVERSION 2>/dev/null || echo unknown)
LAB_CACHE=${GHOSTIP_LAB_CACHE:-/var/cache/ghostip-lab}
LAB_KEY="k8s${KUBERNETES_VERSION}-etcd${ETCD_VERSION}-coredns${COREDNS_VERSION}-kwok${KWOK_VERSION}-${GO_VERSION}"
LAB_BIN=${GHOSTIP_LAB_BIN:-$LAB_CACHE/$LAB_KEY/bin}

log() { printf 'lab: %s\n' "$*" >&2; }
die() { printf 'lab: error: %s\n' "$*" >&2; exit 1; }
