# Where the scripts' cargo builds go. Sourced by scripts/test, scripts/demo and
# scripts/bench-agent-audit, never executed.
#
# The target directory lives outside the clone so that CI runs (a fresh clone each time) and
# later runs on the same machine reuse one build cache: /var/cache/ghostip/target as root,
# $XDG_CACHE_HOME/ghostip/target (default ~/.cache/ghostip/target) otherwise. A
# CARGO_TARGET_DIR already set in the environment wins. Nothing is forced on plain `cargo`
# commands: without the scripts, cargo builds into ./target as usual.
# shellcheck shell=bash
if [[ -z ${CARGO_TARGET_DIR:-} ]]; then
  if [[ $(id -u) == 0 ]]; then
    CARGO_TARGET_DIR=/var/cache/ghostip/target
  else
    CARGO_TARGET_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/ghostip/target
  fi
fi
export CARGO_TARGET_DIR
mkdir -p "$CARGO_TARGET_DIR"
