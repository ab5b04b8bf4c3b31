# Shell functions that assemble OCI images with umoci and write them as OCI archives,
# without a container engine. Sourced by scripts/build-image and
# lab/images/build, never executed.
# shellcheck shell=bash

# The fixed creation time written into image configs and history, so that the
# same inputs give the same config digest (the layers' tar entries use it too).
OCI_EPOCH=${SOURCE_DATE_EPOCH:-0}
OCI_CREATED=$(date -u -d "@$OCI_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

oci_log() { printf '%s: %s\n' "${OCI_PROG:-oci}" "$*" >&2; }
oci_die() { printf '%s: error: %s\n' "${OCI_PROG:-oci}" "$*" >&2; exit 2; }

# oci_need CMD...: install the Debian package of each missing command with
# apt-get (root, no sudo), or name what is missing.
oci_need() {
  local -A pkgof=([umoci]=umoci [skopeo]=skopeo [jq]=jq [mmdebstrap]=mmdebstrap [gcc]=gcc
    [containerd]=containerd [ctr]=containerd [runc]=runc [sha256sum]=coreutils [tar]=tar [gzip]=gzip
    [musl-gcc]=musl-tools [strip]=binutils [git]=git [busybox]=busybox-static)
  local c want=()
  for c in "$@"; do
    command -v "$c" >/dev/null && continue
    want+=("${pkgof[$c]:-$c}")
  done
  # gcc -static links against libc.a from libc6-dev.
  if [[ " $* " == *" gcc "* && ! -e /usr/lib/x86_64-linux-gnu/libc.a ]]; then want+=(libc6-dev); fi
  ((${#want[@]} == 0)) && return 0
  [[ $(id -u) == 0 ]] || oci_die "missing Debian packages: ${want[*]} (apt-get install ${want[*]})"
  oci_log "installing Debian packages: ${want[*]}"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "${want[@]}" >/dev/null ||
    { timeout 300 apt-get update >/dev/null &&
      DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "${want[@]}" >/dev/null; } ||
    oci_die "apt-get install ${want[*]} failed"
}

# oci_hash FILE|DIR...: one sha256 over the paths' names, modes and contents
# (sorted), for cache keys. Prints the first 16 hex digits.
oci_hash() {
  local p
  for p in "$@"; do
    if [[ -d $p ]]; then
      (cd "$p" && find . -type f -print0 | LC_ALL=C sort -z |
        xargs -0r sh -c 'for f; do printf "%s %s\n" "$(stat -c %a "$f")" "$f"; cat "$f"; done' sh)
    else
      printf '%s %s\n' "$(stat -c %a "$p")" "${p##*/}"; cat "$p"
    fi
  done | sha256sum | cut -c1-16
}

# oci_tar_dir DIR OUT.tar: a reproducible, uncompressed layer tar of DIR's
# contents (root-owned, mtime OCI_EPOCH, sorted).
oci_tar_dir() {
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$OCI_EPOCH" \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$1" -cf "$2" .
}

# oci_repository REPO_DIR: the workspace's `repository` URL (Cargo.toml).
oci_repository() { sed -n 's/^repository = "\(.*\)"$/\1/p' "$1/Cargo.toml" | head -n1; }

# oci_init LAYOUT: an empty image (no layers) tagged `build` in a new layout.
oci_init() {
  rm -rf "$1"
  umoci init --layout "$1"
  umoci new --image "$1:build"
}

# oci_add_layer LAYOUT LAYER.tar WHAT: append an uncompressed layer tar.
oci_add_layer() {
  umoci raw add-layer --image "$1:build" --history.created "$OCI_CREATED" \
    --history.created_by "$3" "$2"
}

# oci_config LAYOUT UMOCI-CONFIG-ARGS...: set the image config (entrypoint,
# user, labels...), with the fixed creation time, linux/amd64.
oci_config() {
  local l=$1; shift
  umoci config --image "$l:build" --created "$OCI_CREATED" --history.created "$OCI_CREATED" \
    --os linux --architecture amd64 "$@"
}

# oci_archive LAYOUT OUT.tar NAME...: name the image (each NAME a full
# reference such as docker.io/library/ghostip:0.1.0) and write the layout as
# an OCI archive. Each name is one entry of index.json carrying both
# io.containerd.image.name (read by `ctr images import`) and
# org.opencontainers.image.ref.name (read by skopeo and podman).
oci_archive() {
  local l=$1 out=$2; shift 2
  umoci gc --layout "$l"
  local names; names=$(printf '%s\n' "$@" | jq -R . | jq -s .)
  jq --argjson names "$names" '
    (.manifests | map(select(.annotations["org.opencontainers.image.ref.name"] == "build")) | .[0]) as $m
    | if $m == null then error("no image tagged build") else . end
    | .manifests = [ $names[] as $n
        | ($m | .annotations = {"io.containerd.image.name": $n, "org.opencontainers.image.ref.name": $n}) ]
  ' "$l/index.json" >"$l/index.json.new"
  mv "$l/index.json.new" "$l/index.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$OCI_EPOCH" \
    -C "$l" -cf "$out.tmp" oci-layout index.json blobs
  mv "$out.tmp" "$out"
}

# oci_debian_sources: the bookworm apt sources of this machine, one-line
# format, for mmdebstrap (only the mirror this machine's apt uses is reachable).
# Reads /etc/apt/sources.list and /etc/apt/sources.list.d/*.{list,sources}.
oci_debian_sources() {
  local f
  {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f $f ]] && grep -E '^[[:space:]]*deb[[:space:]]' "$f" | sed -E 's/\[[^]]*\][[:space:]]*//'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -f $f ]] || continue
      # deb822 stanzas: one line per (URI, suite).
      awk '
        function flush(  i, j, nu, ns, u, s) {
          if (types ~ /(^| )deb( |$)/ && enabled != "no") {
            nu = split(uris, u, " "); ns = split(suites, s, " ")
            for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print "deb " u[i] " " s[j] " " comps
          }
          types = uris = suites = comps = enabled = ""
        }
        /^[[:space:]]*#/ { next }
        /^[[:space:]]*$/ { flush(); next }
        { k = tolower($1); sub(/:$/, "", k); $1 = ""; sub(/^ /, "")
          if (k == "types") types = $0; else if (k == "uris") uris = $0
          else if (k == "suites") suites = $0; else if (k == "components") comps = $0
          else if (k == "enabled") enabled = tolower($0) }
        END { flush() }' "$f"
    done
  } | awk '$3 ~ /^bookworm/' | LC_ALL=C sort -u
}

# oci_debian_rootfs CACHE_DIR PKG...: a Debian bookworm rootfs tarball
# (mmdebstrap --variant=essential plus PKG..., no docs, man pages or locales,
# no /dev entries), cached in CACHE_DIR keyed by the package list and the apt
# sources. Prints its path.
oci_debian_rootfs() {
  local cache=$1; shift
  local pkgs; pkgs=$(printf '%s\n' "$@" | LC_ALL=C sort -u | paste -sd, -)
  local sources; sources=$(oci_debian_sources)
  [[ -n $sources ]] || oci_die "no bookworm source in /etc/apt/sources.list*: mmdebstrap needs one"
  local key; key=$(printf '%s\n' essential no-recommends merged-usr-hook "$pkgs" "$sources" | sha256sum | cut -c1-16)
  local out=$cache/rootfs-bookworm-$key.tar
  if [[ ! -e $out ]]; then
    oci_need mmdebstrap
    mkdir -p "$cache"
    oci_log "building the Debian bookworm rootfs ($pkgs) into $out"
    local src=() l
    while IFS= read -r l; do src+=("$l"); done <<<"$sources"
    SOURCE_DATE_EPOCH=$OCI_EPOCH timeout 900 mmdebstrap --quiet --format=tar --variant=essential --include="$pkgs" \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --skip=output/dev --aptopt='APT::Install-Recommends "false"' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      bookworm "$out.tmp" "${src[@]}" >&2 ||
      { rm -f "$out.tmp"; oci_die "mmdebstrap failed (mirror from /etc/apt/sources.list*: ${src[0]})"; }
    mv "$out.tmp" "$out"
  fi
  printf '%s\n' "$out"
}
