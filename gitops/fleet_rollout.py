"""The objects that roll a fleet repo out wave by wave with Argo CD or Flux, made from its fleet.yaml.

Each cluster's `sync/` directory holds its MigSync, whose `spec.ref` pins the commit the cluster follows;
the GitOps tool applies that directory to the cluster, a wave only when every cluster of the waves
before it is healthy (its MigSync in sync at the commit it pins, no failed node):

- Argo CD: one ApplicationSet. Its cluster generator makes an Application per cluster Secret carrying
  the wave label; Progressive Syncs (`RollingSync`) sync the Applications one wave (one step) at a time,
  a step only when every Application of the steps before is Healthy, as the MigSync health check
  (reconciler/data/argocd-migsync-health.lua) says.
- Flux: a GitRepository and one Kustomization per cluster, applying through `spec.kubeConfig.secretRef`
  (the cluster's kubeconfig in a Secret), `wait: true` (kstatus reads the MigSync's Ready, Reconciling
  and Stalled conditions and observedGeneration), each `dependsOn` every Kustomization of the wave
  before: Flux applies a dependant only once those are Ready at the same source revision.

`migops fleet gitops` prints them; `migops local up --clusters` and the fleet tests apply them;
examples/fleet/gitops/ holds them for examples/fleet (written by `make generate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migops.api.names import FLEET_WAVE_LABEL
from migops.gitops.fleet import FleetCluster, FleetFile

NAME = "mig-fleet"  # the ApplicationSet, the GitRepository, and the prefix of the Applications / Kustomizations
ARGOCD_NAMESPACE = "argocd"
FLUX_NAMESPACE = "flux-system"
MIGSYNC_NAMESPACE = "migops-system"
BRANCH = "main"
# Argo CD's label on a Secret that registers a cluster.
ARGOCD_CLUSTER_SECRET = {"argocd.argoproj.io/secret-type": "cluster"}
FLUX_KUBECONFIG_KEY = "value"  # the key of the kubeconfig in its Secret (Flux's default)


def application_name(cluster: str) -> str:
    return f"{NAME}-{cluster}"


def kustomization_name(cluster: str) -> str:
    return f"{NAME}-{cluster}"


def kubeconfig_secret_name(cluster: str) -> str:
    return f"{NAME}-{cluster}-kubeconfig"


def sync_path(cluster: FleetCluster) -> str:
    return f"{cluster.path}/sync"


def _wave_values(fleet: FleetFile) -> list[list[str]]:
    return [[str(wave[0].wave)] for wave in fleet.waves]


# ------------------------------------------------------------------------------------------ Argo CD
def applicationset(fleet: FleetFile, url: str, branch: str = BRANCH) -> dict[str, Any]:
    """The ApplicationSet: an Application per registered cluster of the fleet (`mig-fleet-<name>`,
    syncing `clusters/<name>/sync` of `branch` into it), synced by RollingSync one wave at a time.

    No `automated` sync policy: RollingSync turns it off on every Application it generates and starts
    each sync itself. `maxUpdate: 100%` syncs a wave's clusters together (as Flux's dependsOn does);
    Server-Side Diff is off, as migops.local.argocd.application explains; a failed sync is retried
    once (a webhook's denial is not transient)."""
    custom = [c.name for c in fleet.clusters if c.path != f"clusters/{c.name}"]
    if custom:
        raise ValueError(
            f"the ApplicationSet reads clusters/<name>/sync; cluster(s) {', '.join(custom)} have another path "
            "in fleet.yaml"
        )
    waves = _wave_values(fleet)
    steps = [
        {"matchExpressions": [{"key": FLEET_WAVE_LABEL, "operator": "In", "values": values}], "maxUpdate": "100%"}
        for values in waves
    ]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": NAME, "namespace": ARGOCD_NAMESPACE},
        "spec": {
            "goTemplate": True,
            "goTemplateOptions": ["missingkey=error"],
            "generators": [
                {
                    "clusters": {
                        "selector": {
                            "matchExpressions": [
                                {"key": FLEET_WAVE_LABEL, "operator": "In", "values": [v for w in waves for v in w]}
                            ]
                        }
                    }
                }
            ],
            "strategy": {"type": "RollingSync", "rollingSync": {"steps": steps}},
            "template": {
                "metadata": {
                    "name": application_name("{{.name}}"),
                    "labels": {FLEET_WAVE_LABEL: "{{index .metadata.labels " + f'"{FLEET_WAVE_LABEL}"' + "}}"},
                    "annotations": {"argocd.argoproj.io/compare-options": "ServerSideDiff=false"},
                },
                "spec": {
                    "project": "default",
                    "source": {"repoURL": url, "targetRevision": branch, "path": "clusters/{{.name}}/sync"},
                    "destination": {"server": "{{.server}}", "namespace": MIGSYNC_NAMESPACE},
                    "syncPolicy": {
                        "syncOptions": ["ServerSideApply=true"],
                        "retry": {"limit": 1, "backoff": {"duration": "5s", "factor": 2, "maxDuration": "1m"}},
                    },
                },
            },
        },
    }


def argocd_cluster_secret(cluster: FleetCluster, server: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The Secret registering `cluster` with Argo CD (what `argocd cluster add` writes), labelled with its
    wave. `config`: Argo CD's cluster config (tlsClientConfig or bearerToken). Argo CD may manage only
    the MigSync's namespace there (`namespaces`, no cluster-scoped resources)."""
    import json

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{NAME}-cluster-{cluster.name}",
            "namespace": ARGOCD_NAMESPACE,
            "labels": {**ARGOCD_CLUSTER_SECRET, FLEET_WAVE_LABEL: str(cluster.wave)},
        },
        "type": "Opaque",
        "stringData": {
            "name": cluster.name,
            "server": server,
            "namespaces": MIGSYNC_NAMESPACE,
            "clusterResources": "false",
            "config": json.dumps(dict(config), sort_keys=True),
        },
    }


# ------------------------------------------------------------------------------------------ Flux
def git_repository(url: str, branch: str = BRANCH, interval: str = "1m") -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": NAME, "namespace": FLUX_NAMESPACE},
        "spec": {"interval": interval, "url": url, "ref": {"branch": branch}, "timeout": "20s"},
    }


def kustomizations(fleet: FleetFile) -> list[dict[str, Any]]:
    """One Kustomization per cluster, applying its sync/ directory through its kubeconfig Secret, waiting
    for the MigSync to be healthy (`wait: true`, up to `timeout`), depending on the wave before; never
    pruning (deleting a MigSync releases the cluster's nodes)."""
    out = []
    before: tuple[FleetCluster, ...] = ()
    for wave in fleet.waves:
        for cluster in wave:
            spec: dict[str, Any] = {
                "interval": "10m",
                "retryInterval": "1m",
                "timeout": "5m",
                "sourceRef": {"kind": "GitRepository", "name": NAME},
                "path": f"./{sync_path(cluster)}",
                "prune": False,
                "wait": True,
                "kubeConfig": {"secretRef": {"name": kubeconfig_secret_name(cluster.name), "key": FLUX_KUBECONFIG_KEY}},
            }
            if before:
                spec["dependsOn"] = [{"name": kustomization_name(c.name)} for c in before]
            out.append(
                {
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                    "kind": "Kustomization",
                    "metadata": {
                        "name": kustomization_name(cluster.name),
                        "namespace": FLUX_NAMESPACE,
                        "labels": {FLEET_WAVE_LABEL: str(cluster.wave)},
                    },
                    "spec": spec,
                }
            )
        before = wave
    return out


def flux_objects(fleet: FleetFile, url: str, branch: str = BRANCH) -> list[dict[str, Any]]:
    return [git_repository(url, branch), *kustomizations(fleet)]


def flux_kubeconfig_secret(cluster: str, kubeconfig: str) -> dict[str, Any]:
    """The Secret holding a cluster's kubeconfig, as `spec.kubeConfig.secretRef` reads it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": kubeconfig_secret_name(cluster), "namespace": FLUX_NAMESPACE},
        "type": "Opaque",
        "stringData": {FLUX_KUBECONFIG_KEY: kubeconfig},
    }
