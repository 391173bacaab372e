#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-scheduler and kubectl from their Go modules into a cache outside the repo.
# Idempotent: does nothing when the binaries for the pinned versions are already there.
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=k8s-versions.env
. "$here/k8s-versions.env"
K=$KUBERNETES_VERSION
E=$ETCD_VERSION
cache=${MIGOPS_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/migops/k8s}
out="$cache/$K-etcd$E"
log() { echo "k8s-binaries: $*" >&2; }

have_all() { [ -x "$out/etcd" ] && [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-scheduler" ] && [ -x "$out/kubectl" ]; }
# A directory of ready binaries (built elsewhere) replaces the cache and the build.
if [ -n "${MIGOPS_K8S_BIN:-}" ]; then
  out=$(cd "$MIGOPS_K8S_BIN" && pwd)
  have_all || { log "MIGOPS_K8S_BIN=$MIGOPS_K8S_BIN lacks an executable etcd, kube-apiserver, kube-scheduler or kubectl"; exit 1; }
  echo "$out"; exit 0
fi
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || {
  log "Go is required to build etcd $E and kube-apiserver/kube-scheduler/kubectl $K (no 'go' on PATH)."
  log "Install Go >= 1.26, or build them elsewhere and set MIGOPS_K8S_BIN=<dir with etcd, kube-apiserver, kube-scheduler, kubectl>."
  exit 1
}
mkdir -p "$out"
# One build at a time per cache (two checkouts running `make test` at once): the second waits,
# then finds the binaries and does nothing.
if command -v flock >/dev/null; then
  exec 9>"$cache/.build.lock"
  if ! flock -n 9; then log "another build is running; waiting for it"; flock 9; fi
  if have_all; then echo "$out"; exit 0; fi
fi
log "cold build: downloads modules and compiles for ~10 min on 2 cores (once per cache)"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0
start=$(date +%s)

if [ ! -x "$out/etcd" ]; then
  log "building etcd $E"
  mkdir -p "$work/etcd"
  (cd "$work/etcd" && go mod init tmp/etcd >/dev/null 2>&1 \
    && go get "go.etcd.io/etcd/server/v3@$E" >&2 \
    && go build -trimpath -ldflags='-s -w' -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3 >&2)
  mv "$out/etcd.tmp" "$out/etcd"
fi

if [ ! -x "$out/kube-apiserver" ] || [ ! -x "$out/kube-scheduler" ] || [ ! -x "$out/kubectl" ]; then
  log "building kube-apiserver, kube-scheduler and kubectl $K"
  S=v0.${K#v1.}; MINOR=$(echo "$K" | cut -d. -f2)
  mkdir -p "$work/kas"; cd "$work/kas"
  go mod init tmp/kas >/dev/null 2>&1
  KMOD=$(go mod download -json "k8s.io/kubernetes@$K" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  # k/k requires its staging modules at v0.0.0 with local replaces; point each at its published tag.
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*#\1#p' "$KMOD"); do
    go mod edit -replace="$m=$m@$S"
  done
  go mod edit -go="$(sed -n 's/^go //p' "$KMOD")"
  grep '^godebug' "$KMOD" >> go.mod || true
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$K" "k8s.io/kubernetes/cmd/kube-scheduler@$K" \
    "k8s.io/kubernetes/cmd/kubectl@$K" >&2
  LD='-s -w'
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LD="$LD -X $p.gitVersion=$K -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
  done
  if [ ! -x "$out/kube-apiserver" ]; then
    go build -trimpath -tags selinux,notest -ldflags="$LD" -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2
    mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
  fi
  # The scheduler binds Pods to Nodes by their allocatable resources: where MIG workloads land.
  for cmd in kube-scheduler kubectl; do
    if [ ! -x "$out/$cmd" ]; then
      go build -trimpath -ldflags="$LD" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" >&2
      mv "$out/$cmd.tmp" "$out/$cmd"
    fi
  done
fi

"$out/etcd" --version >&2
"$out/kube-apiserver" --version >&2
log "built in $(( $(date +%s) - start ))s into $out"
echo "$out"
