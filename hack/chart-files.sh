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
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
components="$root/manifests/overlays/components"
for mode in "${!overlay[@]}"; do
  "$kubectl" kustomize "$root/manifests/overlays/${overlay[$mode]}" \
    | "$py" "$root/hack/chart_split.py" "$chart/files/$mode.yaml" "$chart/crds"
  # certificates.mode=cert-manager: the same overlay with the cert-manager component.
  mkdir -p "$work/$mode"
  printf 'resources: [%s]\ncomponents: [%s]\n' "$(realpath --relative-to="$work/$mode" "$root/manifests/overlays/${overlay[$mode]}")" \
    "$(realpath --relative-to="$work/$mode" "$components/cert-manager")" > "$work/$mode/kustomization.yaml"
  "$kubectl" kustomize "$work/$mode" | "$py" "$root/hack/chart_split.py" "$chart/files/$mode+cert-manager.yaml" "$work"
done
# webhook.networkPolicy.enabled: the component's NetworkPolicy.
mkdir -p "$work/netpol"
printf 'components: [%s]\n' "$(realpath --relative-to="$work/netpol" "$components/webhook-network-policy")" > "$work/netpol/kustomization.yaml"
"$kubectl" kustomize "$work/netpol" | "$py" "$root/hack/chart_split.py" "$chart/files/webhook-network-policy.yaml" "$work"
