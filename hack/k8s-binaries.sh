#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-scheduler and kubectl (the control plane), kubelet,
# kube-controller-manager and kube-proxy (the real node of `migops local up --real-node`) and containerd
# (containerd, containerd-shim-runc-v2, ctr) from their Go modules into a cache outside the repo.
# Idempotent: does nothing when the binaries for the pinned versions are already there; builds only the
# missing ones (adding the node binaries to a cache holding the first four compiles just those).
# Prints the directory holding the binaries on its last line of stdout.
#   hack/k8s-binaries.sh                 everything (what `make test` needs: the real node too)
#   hack/k8s-binaries.sh control-plane   etcd, kube-apiserver, kube-scheduler, kubectl (the demo, `migops
#                                        local up`, every cluster test but the real node's)
set -euo pipefail
SET=${1:-all}
case $SET in all|control-plane) ;; *) echo "usage: $0 [all|control-plane]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=k8s-versions.env
. "$here/k8s-versions.env"
# shellcheck source=go-build.env
. "$here/go-build.env"
K=$KUBERNETES_VERSION
E=$ETCD_VERSION
C=$CONTAINERD_VERSION
cache=${MIGOPS_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/migops/k8s}
out="$cache/$K-etcd$E-$GO_BUILD_FLAVOUR"
log() { echo "k8s-binaries: $*" >&2; }

K8S_CMDS="kube-apiserver kube-scheduler kubectl"
[ "$SET" = all ] && K8S_CMDS="$K8S_CMDS kubelet kube-controller-manager kube-proxy"
CONTAINERD_CMDS="containerd containerd-shim-runc-v2 ctr"
have() { for b in "$@"; do [ -x "$out/$b" ] || return 1; done; }
# containerd's version is not in the directory name (that would orphan the cached Kubernetes builds when
# only containerd moves): a stamp next to the binaries says which one they are.
have_containerd() { have $CONTAINERD_CMDS && [ "$(cat "$out/containerd.version" 2>/dev/null)" = "$C" ]; }
have_k8s() { have $K8S_CMDS; }
have_all() { have etcd && have_k8s && { [ "$SET" = control-plane ] || have_containerd; }; }
# A directory of ready binaries (built elsewhere) replaces the cache and the build.
if [ -n "${MIGOPS_K8S_BIN:-}" ]; then
  out=$(cd "$MIGOPS_K8S_BIN" && pwd)
  # The node binaries are needed only by the real node, which checks for them when it starts.
  have etcd kube-apiserver kube-scheduler kubectl || {
    log "MIGOPS_K8S_BIN=$MIGOPS_K8S_BIN lacks an executable etcd, kube-apiserver, kube-scheduler or kubectl"; exit 1; }
  echo "$out"; exit 0
fi
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || {
  log "Go is required to build etcd $E and kube-apiserver/kube-scheduler/kubectl $K (no 'go' on PATH)."
  log "Install Go >= 1.26, or build them elsewhere and set MIGOPS_K8S_BIN=<dir with etcd $K8S_CMDS $CONTAINERD_CMDS>."
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
log "cold build ($SET): downloads modules and compiles for ~$([ "$SET" = all ] && echo 15 || echo 6) min on 2 cores (once per cache)"
work=$(mktemp -d); kas=""
std=""
# A failure stops the background jobs (and the go commands they run) before the work directory goes.
trap 'for j in $kas $std; do pkill -P "$j" 2>/dev/null; kill "$j" 2>/dev/null; done; rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0
start=$(date +%s)

# Kubernetes' modules download (network) while etcd compiles (CPU): the two overlap.
S=v0.${K#v1.}; MINOR=$(echo "$K" | cut -d. -f2)
kas_modules() {
  local t0; t0=$(date +%s)
  mkdir -p "$work/kas"; cd "$work/kas"
  go mod init tmp/kas >/dev/null 2>&1
  KMOD=$(go mod download -json "k8s.io/kubernetes@$K" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  # k/k requires its staging modules at v0.0.0 with local replaces; point each at its published tag.
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*#\1#p' "$KMOD"); do
    go mod edit -replace="$m=$m@$S"
  done
  go mod edit -go="$(sed -n 's/^go //p' "$KMOD")"
  grep '^godebug' "$KMOD" >> go.mod || true
  local pkgs=""; for cmd in $K8S_CMDS; do pkgs="$pkgs k8s.io/kubernetes/cmd/$cmd@$K"; done
  # shellcheck disable=SC2086
  go get $pkgs >&2
  log "Kubernetes modules downloaded in $(( $(date +%s) - t0 ))s"
}
if ! have_k8s; then
  kas_modules & kas=$!
fi
# The standard library needs no module: it compiles (into Go's build cache, where etcd's and Kubernetes'
# builds find it: build tags do not change it) while the modules download.
if [ ! -x "$out/etcd" ] || [ -n "$kas" ]; then
  (t0=$(date +%s); go build -trimpath net/http os/exec encoding/json text/template crypto/x509 >&2
   log "the standard library's common packages compiled in $(( $(date +%s) - t0 ))s") & std=$!
fi

if [ ! -x "$out/etcd" ]; then
  log "building etcd $E"
  mkdir -p "$work/etcd"
  t0=$(date +%s)
  (cd "$work/etcd" && go mod init tmp/etcd >/dev/null 2>&1 && go get "go.etcd.io/etcd/server/v3@$E" >&2)
  [ -z "$std" ] || { wait "$std"; std=""; }
  t1=$(date +%s)
  (cd "$work/etcd" && go build -trimpath $GO_GCFLAGS -ldflags='-s -w' -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3 >&2)
  mv "$out/etcd.tmp" "$out/etcd"
  log "etcd: modules $(( t1 - t0 ))s, compile $(( $(date +%s) - t1 ))s"
fi

if [ -n "$kas" ]; then
  log "building the missing ones of $K8S_CMDS ($K)"
  wait "$kas"; kas=""
  [ -z "$std" ] || { wait "$std"; std=""; }
  cd "$work/kas"
  LD='-s -w'
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LD="$LD -X $p.gitVersion=$K -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
  done
  # One build configuration for every Kubernetes binary (upstream's server tags, selinux,notest, and
  # the same ldflags) and one `go build` of all the missing ones: the packages the API server, the
  # scheduler, kubelet and the rest share are compiled once, not once per tag set, and the links run
  # in parallel. The scheduler binds Pods to Nodes by their allocatable resources (where MIG workloads
  # land); kubelet, kube-controller-manager and kube-proxy run the real node.
  missing=""; for cmd in $K8S_CMDS; do [ -x "$out/$cmd" ] || missing="$missing k8s.io/kubernetes/cmd/$cmd"; done
  t1=$(date +%s)
  rm -rf "$out/.tmp"; mkdir -p "$out/.tmp"
  # shellcheck disable=SC2086
  go build -trimpath -tags=selinux,notest $GO_GCFLAGS -ldflags="$LD" -o "$out/.tmp/" $missing >&2
  for f in "$out/.tmp"/*; do mv "$f" "$out/"; done
  rmdir "$out/.tmp"
  log "compiled$missing in $(( $(date +%s) - t1 ))s"
fi

if [ "$SET" = all ] && ! have_containerd; then
  log "building containerd $C (containerd, containerd-shim-runc-v2, ctr)"
  mkdir -p "$work/containerd"; cd "$work/containerd"
  go mod init tmp/containerd >/dev/null 2>&1
  go get "github.com/containerd/containerd/v2@$C" >&2
  # No cgo: the btrfs snapshotter and seccomp-by-libseccomp go (overlayfs is what the node uses).
  t0=$(date +%s)
  for cmd in $CONTAINERD_CMDS; do
    go build -trimpath -tags=no_btrfs $GO_GCFLAGS -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$C" \
      -o "$out/$cmd.tmp" "github.com/containerd/containerd/v2/cmd/$cmd" >&2
  done
  for cmd in $CONTAINERD_CMDS; do mv "$out/$cmd.tmp" "$out/$cmd"; done
  echo "$C" > "$out/containerd.version"
  log "containerd built in $(( $(date +%s) - t0 ))s"
fi

"$out/etcd" --version >&2
"$out/kube-apiserver" --version >&2
if [ "$SET" = all ]; then "$out/kubelet" --version >&2; "$out/containerd" --version >&2; fi
log "$SET built in $(( $(date +%s) - start ))s into $out"
echo "$out"
