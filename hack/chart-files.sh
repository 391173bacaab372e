#!/usr/bin/env bash
# Render the chart's objects from the kustomize overlays: charts/migops/files/<mode>.yaml (one per
# mode) and charts/migops/crds/ (the MigSync CRD, which Helm installs before any template). The
# overlays are the one source of truth; tests/helm/test_chart.py fails when these files differ
# from a fresh render. Run after changing anything under manifests/:  hack/chart-files.sh [CHART_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kubectl="$("$root/hack/k8s-binaries.sh" | tail -n1)/kubectl"
py=${PYTHON:-$root/.venv/bin/python}; [ -x "$py" ] || py=python3
chart=${1:-$root/charts/migops}  # another directory: a fresh render to compare (tests)
mkdir -p "$chart/files" "$chart/crds"
declare -A overlay=([agent]=gpu-operator [mig-manager]=gpu-operator-mig-manager [webhook-only]=gpu-operator-webhook-only)
for mode in "${!overlay[@]}"; do
  "$kubectl" kustomize "$root/manifests/overlays/${overlay[$mode]}" \
    | "$py" "$root/hack/chart_split.py" "$chart/files/$mode.yaml" "$chart/crds"
done
