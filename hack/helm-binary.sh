#!/usr/bin/env bash
# helm, built once from its Go module into the cache beside the Kubernetes binaries
# (~/.cache/migops/helm/<version>-<flavour>/helm). Idempotent; prints the binary's path on its last line.
# The chart tests (tests/helm/) and `make helm` use it; nothing is pulled from a chart repository.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=go-build.env
. "$here/go-build.env"
HELM_VERSION="v3.22.0"   # helm.sh/helm/v3: the line the GPU Operator's own install docs use
cache=${MIGOPS_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/migops/helm}
out="$cache/$HELM_VERSION-$GO_BUILD_FLAVOUR"
if [ -n "${MIGOPS_HELM_BIN:-}" ]; then echo "$MIGOPS_HELM_BIN"; exit 0; fi
if [ -x "$out/helm" ]; then echo "$out/helm"; exit 0; fi
command -v go >/dev/null || { echo "helm-binary: Go is required to build helm $HELM_VERSION" >&2; exit 1; }
mkdir -p "$out"
exec 9>"$cache/.build.lock"
flock 9
if [ -x "$out/helm" ]; then echo "$out/helm"; exit 0; fi
echo "helm-binary: building helm $HELM_VERSION (once per cache, ~2 min on 2 cores)" >&2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init tmp/helm >/dev/null 2>&1
GOFLAGS=-mod=mod go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
# As helm's own Makefile: the Kubernetes version that `helm template` and `helm lint` assume is the
# client-go module's (v0.N -> 1.N), not the library's fallback of 1.20.
minor=$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for p in chartutil lint/rules; do ld="$ld -X helm.sh/helm/v3/pkg/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$p.k8sVersionMinor=$minor"; done
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath $GO_GCFLAGS -ldflags "$ld" \
  -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm >&2
mv "$out/helm.tmp" "$out/helm"
"$out/helm" version --short >&2
echo "$out/helm"
