#!/usr/bin/env bash
# Build Flux's source-controller and kustomize-controller from their Go modules into the cache that holds
# the Kubernetes binaries, with the CRDs (config/crd/bases) of the same module versions beside them.
# Idempotent: does nothing when the binaries and CRDs for the pinned versions are already there.
# Prints the directory holding them on its last line of stdout (binaries at the top, CRDs under crds/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=flux-versions.env
. "$here/flux-versions.env"
# shellcheck source=go-build.env
. "$here/go-build.env"
S=$SOURCE_CONTROLLER_VERSION
K=$KUSTOMIZE_CONTROLLER_VERSION
# Always the approved toolchain (the go command fetches it once from the module proxy): the same compiler
# on every machine, whatever Go is installed, and ready for v1.10.x's `go 1.27.0`.
export GOTOOLCHAIN=$FLUX_GOTOOLCHAIN
cache=${MIGOPS_FLUX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/migops/flux}
out="$cache/source-$S-kustomize-$K-$GO_BUILD_FLAVOUR"
log() { echo "flux-binaries: $*" >&2; }

have_all() {
  [ -x "$out/source-controller" ] && [ -x "$out/kustomize-controller" ] \
    && [ -s "$out/crds/source.toolkit.fluxcd.io_gitrepositories.yaml" ] \
    && [ -s "$out/crds/kustomize.toolkit.fluxcd.io_kustomizations.yaml" ]
}
if [ -n "${MIGOPS_FLUX_BIN:-}" ]; then
  out=$(cd "$MIGOPS_FLUX_BIN" && pwd)
  have_all || { log "MIGOPS_FLUX_BIN=$MIGOPS_FLUX_BIN lacks source-controller, kustomize-controller or crds/"; exit 1; }
  echo "$out"; exit 0
fi
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || {
  log "Go is required to build source-controller $S and kustomize-controller $K (no 'go' on PATH)."
  log "Install Go, or build them elsewhere and set MIGOPS_FLUX_BIN=<dir with both binaries and crds/>."
  exit 1
}
mkdir -p "$out/crds"
# One build at a time per cache: a second caller waits, then finds the binaries and does nothing.
if command -v flock >/dev/null; then
  exec 9>"$cache/.build.lock"
  if ! flock -n 9; then log "another build is running; waiting for it"; flock 9; fi
  if have_all; then echo "$out"; exit 0; fi
fi
log "cold build: fetches $GOTOOLCHAIN and the modules, compiles for ~15 min on 2 cores (once per cache)"
work=$(mktemp -d); trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
start=$(date +%s)

# build NAME VERSION REPLACES: the module's own main package, built with its own go.mod/go.sum.
build() {
  local name=$1 ver=$2 replaces=$3 mod="github.com/fluxcd/$1" dir r
  dir=$(cd "$work" && go mod download -json "$mod@$ver" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  cp "$dir"/config/crd/bases/*.yaml "$out/crds/"
  [ -x "$out/$name" ] && return 0
  log "building $name $ver"
  cp -r "$dir" "$work/$name"; chmod -R u+w "$work/$name"
  # The module points its api/ submodule at ./api, which is a separate module (not in this zip):
  # drop that replace so the published api module of the version it requires is used.
  (cd "$work/$name" && go mod edit -dropreplace="$mod/api" \
    && for r in $replaces; do go mod edit -replace="$r"; done \
    && go build -trimpath $GO_GCFLAGS -ldflags='-s -w' -o "$out/$name.tmp" . >&2)
  mv "$out/$name.tmp" "$out/$name"
}
build source-controller "$S" "$SOURCE_CONTROLLER_REPLACES"
build kustomize-controller "$K" "$KUSTOMIZE_CONTROLLER_REPLACES"

"$out/source-controller" --help >/dev/null 2>&1 || true
log "built in $(( $(date +%s) - start ))s into $out"
echo "$out"
