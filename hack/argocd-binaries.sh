#!/usr/bin/env bash
# Build Argo CD's one binary (github.com/argoproj/argo-cd/v3/cmd) from its Go module into
# ~/.cache/migops/argocd/<version>-<flavour>/, with the role names it is run under (argocd-application-controller,
# argocd-repo-server: symlinks, the component is chosen by argv[0]) and, from the same module zip, the CRDs
# (crds/), the install manifest whose RBAC the local stack gives each component (manifests/) and the
# helper scripts the image puts on the repo-server's PATH (git-verify-wrapper.sh, gpg-wrapper.sh).
# Idempotent: does nothing when everything for the pinned version is there (the warm path).
# Prints the directory on its last line of stdout. MIGOPS_ARGOCD_BIN points at a ready directory instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=argocd-versions.env
. "$here/argocd-versions.env"
# shellcheck source=go-build.env
. "$here/go-build.env"
V=$ARGOCD_VERSION
MOD=github.com/argoproj/argo-cd/v3
export GOTOOLCHAIN=$ARGOCD_GOTOOLCHAIN
cache=${MIGOPS_ARGOCD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/migops/argocd}
out="$cache/$V-$GO_BUILD_FLAVOUR"
ROLES="argocd-application-controller argocd-repo-server"
log() { echo "argocd-binaries: $*" >&2; }
t0=$(date +%s)

have_all() {
  [ -x "$out/argocd" ] || return 1
  local r; for r in $ROLES git-verify-wrapper.sh; do [ -x "$out/$r" ] || return 1; done
  [ -s "$out/crds/application-crd.yaml" ] && [ -s "$out/crds/appproject-crd.yaml" ] \
    && [ -s "$out/manifests/install.yaml" ]
}
if [ -n "${MIGOPS_ARGOCD_BIN:-}" ]; then
  out=$(cd "$MIGOPS_ARGOCD_BIN" && pwd)
  have_all || { log "MIGOPS_ARGOCD_BIN=$MIGOPS_ARGOCD_BIN lacks argocd, $ROLES, crds/ or manifests/install.yaml"; exit 1; }
  echo "$out"; exit 0
fi
if have_all; then log "warm: Argo CD $V cached in $out ($(( $(date +%s) - t0 ))s)"; echo "$out"; exit 0; fi

command -v go >/dev/null || {
  log "Go is required to build Argo CD $V (no 'go' on PATH)."
  log "Install Go, or build it elsewhere and set MIGOPS_ARGOCD_BIN=<dir with argocd, $ROLES, crds/, manifests/>."
  exit 1
}
mkdir -p "$cache"
# One build at a time per cache: a second caller waits, then finds the binary and does nothing.
if command -v flock >/dev/null; then
  exec 9>"$cache/.build.lock"
  if ! flock -n 9; then log "another build is running; waiting for it"; flock 9; fi
  if have_all; then echo "$out"; exit 0; fi
fi
log "cold build of Argo CD $V: fetches $GOTOOLCHAIN and ~280 modules (~2 GB), compiles ~2,300 packages (7-20 min on 2 cores, ~2.4 GB RSS)"
work=$(mktemp -d); trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
rm -rf "$out.tmp"; mkdir -p "$out.tmp/crds" "$out.tmp/manifests"  # nothing of an interrupted build

cd "$work"
go mod init migops.local/argocd-build >/dev/null 2>&1
read -r dir gomod released < <(go mod download -json "$MOD@$V" \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"], d["GoMod"], json.load(open(d["Info"]))["Time"])')
# A building module does not inherit replaces: copy Argo CD's own (every k8s.io/* pinned to the version
# it was built with). Local-path replaces (gitops-engine/v3 => ./gitops-engine) point into folders the
# module zip lacks; the published module of that version is used instead.
go mod edit -json "$gomod" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    new = r["New"]
    if new["Path"].startswith((".", "/")):
        continue
    old = r["Old"]["Path"] + ("@" + r["Old"]["Version"] if r["Old"].get("Version") else "")
    print("-replace=" + old + "=" + new["Path"] + "@" + new["Version"])
' > replaces
# shellcheck disable=SC2046
go mod edit $(cat replaces)
log "$(wc -l < replaces) replaces copied from Argo CD's go.mod"
# (quiet: the ~350 "go: added" lines say nothing a failure would not)
go get "$MOD/cmd@$V" 2>&1 | { grep -v '^go: added ' || true; } >&2
t_get=$(date +%s)
log "modules resolved in $(( t_get - t0 ))s"
# Stamped as Argo CD's Makefile does (otherwise `argocd version` says v99.99.99): the VERSION file of
# the module, its release time as the build date (the same bytes on every machine), kubectl's version
# from its go.mod. The module zip carries no commit, so Argo CD prints v3.6.1+unknown.
pkg=$MOD/common
kubectl=$(go mod edit -json "$gomod" | python3 -c 'import json,sys; print(next(r["Version"] for r in json.load(sys.stdin)["Require"] if r["Path"] == "k8s.io/kubectl"))')
ldflags="-s -w -X $pkg.version=$(cat "$dir/VERSION") -X $pkg.buildDate=$released -X $pkg.gitTreeState=clean"
ldflags="$ldflags -X $pkg.kubectlVersion=$kubectl -X $pkg.extraBuildInfo=migops-hack/argocd-binaries.sh"
go build -trimpath $GO_GCFLAGS -ldflags="$ldflags" -o "$out.tmp/argocd" "$MOD/cmd" >&2
t_build=$(date +%s)
for r in $ROLES; do ln -sf argocd "$out.tmp/$r"; done
# The helper scripts Argo CD's image puts on the repo-server's PATH (it runs git-verify-wrapper.sh for
# every revision, signed or not).
cp "$dir"/hack/git-verify-wrapper.sh "$dir"/hack/gpg-wrapper.sh "$out.tmp/"
cp "$dir"/manifests/crds/*-crd.yaml "$out.tmp/crds/"
cp "$dir"/manifests/install.yaml "$out.tmp/manifests/"
chmod -R u+w "$out.tmp"; chmod +x "$out.tmp"/*.sh
"$out.tmp/argocd-repo-server" --help >/dev/null
"$out.tmp/argocd-application-controller" --help >/dev/null
rm -rf "$out"; mv "$out.tmp" "$out"
log "cold: built in $(( t_build - t0 ))s (modules $(( t_get - t0 ))s, compile $(( t_build - t_get ))s) into $out"
echo "$out"
