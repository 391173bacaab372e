"""`migops local up --clusters N --repo DIR --argocd|--flux`: a fleet repo rolled out by the GitOps tool.

The canary runs the tool (Argo CD with its ApplicationSet controller, or Flux's source- and
kustomize-controller) and the loopback git server; every cluster runs a reconciler with no MigSync of its
own. Once every cluster is up:

1. DIR's files are committed into the served repository `mig-fleet`, then a release commit points every
   cluster's sync/migsync.yaml at the served URL and pins it to that first commit (what `migops fleet
   pin` writes);
2. the clusters are registered with the tool from the fleet kubeconfig (Argo CD: a cluster Secret each,
   labelled with its wave; Flux: a kubeconfig Secret each) and the tool's objects of
   migops.gitops.fleet_rollout are applied on the canary;
3. `up` waits until every cluster's MigSync is in sync at the pinned commit, wave by wave.

From then on a change reaches the clusters as in a real fleet: commit, `migops fleet pin`, push.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config as kconfig

from migops.api.migsync import API_VERSION, KIND
from migops.gitops import fleet_rollout
from migops.gitops.fleet import MIGSYNC_FILE, FleetFile, FleetProblem, parse_fleet
from migops.local import argocd, flux, gitserver
from migops.local import reconciler as local_reconciler

REPO = fleet_rollout.NAME  # the bare repository on the canary's git server
Progress = Callable[[str], None]


def read_fleet(directory: Path) -> FleetFile:
    """DIR's fleet.yaml; ValueError naming its problems."""

    def read(path: str) -> bytes | None:
        target = directory / path
        return target.read_bytes() if target.is_file() else None

    problems: list[FleetProblem] = []
    found = parse_fleet(read, problems)
    errors = [p for p in problems if p.severity == "error"]
    if found is None or errors:
        raise ValueError("; ".join(map(str, errors or problems)))
    return found


def pinned_migsync(current: str | None, url: str, ref: str, path: str) -> str:
    """A cluster's sync/migsync.yaml following `path` of `url` at `ref` (its other fields kept)."""
    obj = yaml.safe_load(current) if current else None
    if not isinstance(obj, dict):
        obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {}, "spec": {}}
    meta = obj.setdefault("metadata", {})
    meta.setdefault("name", local_reconciler.MIGSYNC)
    meta.setdefault("namespace", local_reconciler.NAMESPACE)
    spec = obj.get("spec")
    obj["spec"] = {**(spec if isinstance(spec, dict) else {}), "url": url, "ref": ref, "path": path}
    return yaml.safe_dump(obj, sort_keys=False)


def seed(bare: Path, directory: Path, fleet: FleetFile, url: str) -> tuple[str, str]:
    """Commit DIR's files, then the release pinning every cluster to that commit: (first, release)."""
    files = local_reconciler.text_files(directory)
    first = gitserver.commit(bare, files, f"the fleet repo, as `migops local up` found it in {directory}")
    pins = {
        f"{c.path}/{MIGSYNC_FILE}": pinned_migsync(files.get(f"{c.path}/{MIGSYNC_FILE}"), url, first, c.path)
        for c in fleet.clusters
    }
    release = gitserver.commit(bare, pins, f"release {first[:12]}: every cluster follows it, from {url}")
    return first, release


def _kubeconfig_parts(kubeconfig: Path) -> tuple[str, Mapping[str, str], Mapping[str, str]]:
    """(server, cluster, user) of a one-context kubeconfig `migops local` wrote."""
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    return cluster["server"], cluster, doc["users"][0]["user"]


def argocd_cluster_config(kubeconfig: Path) -> tuple[str, dict[str, Any]]:
    """(server, Argo CD cluster config) from a cluster's client-certificate kubeconfig."""
    server, cluster, user = _kubeconfig_parts(kubeconfig)
    tls = {
        "caData": cluster["certificate-authority-data"],
        "certData": user["client-certificate-data"],
        "keyData": user["client-key-data"],
    }
    return server, {"tlsClientConfig": tls}


def register(api: Any, tool: str, fleet: FleetFile, kubeconfigs: Mapping[str, Path], url: str) -> list[dict[str, Any]]:
    """The clusters' Secrets and the tool's objects, applied on the canary; the tool's objects."""
    if tool == "argocd":
        secrets = []
        for c in fleet.clusters:
            server, config = argocd_cluster_config(kubeconfigs[c.name])
            secrets.append(fleet_rollout.argocd_cluster_secret(c, server, config))
        objects = [fleet_rollout.applicationset(fleet, url)]
        argocd.apply(api, *secrets, *objects)
        return objects
    secrets = [fleet_rollout.flux_kubeconfig_secret(c.name, kubeconfigs[c.name].read_text()) for c in fleet.clusters]
    objects = fleet_rollout.flux_objects(fleet, url)
    flux.apply(api, *secrets, *objects)
    return objects


def wait_rolled_out(
    fleet: FleetFile, kubeconfig: Path, ref: str, progress: Progress, *, timeout: float = 600.0
) -> None:
    """Until every cluster's MigSync is in sync at `ref`, saying when each wave is; RuntimeError at once
    when a cluster's is Stalled (a refused commit does not move by waiting), TimeoutError at the end."""
    from migops.cli.fleet import read_cluster

    deadline = time.monotonic() + timeout
    began = time.monotonic()
    for wave in fleet.waves:
        pending = {c.name for c in wave}
        while pending:
            for name in sorted(pending):
                row = read_cluster(str(kubeconfig), name, local_reconciler.NAMESPACE, local_reconciler.MIGSYNC)
                if row["inSync"] and row["lastAppliedRevision"] == ref:
                    pending.discard(name)
                elif row["stalled"] and row["lastAttemptedRevision"] == ref:
                    raise RuntimeError(f"cluster {name}: {row['reason']}: {row['message']}")
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"cluster(s) {', '.join(sorted(pending))} not in sync at {ref[:12]}")
            if pending:
                time.sleep(1)
        progress(
            f"wave {wave[0].wave} ({', '.join(c.name for c in wave)}) in sync at {ref[:12]} "
            f"({time.monotonic() - began:.0f}s)"
        )


def rollout(
    tool: str,
    directory: Path,
    fleet: FleetFile,
    canary_workdir: Path,
    canary_kubeconfig: Path,
    url: str,
    kubeconfigs: Mapping[str, Path],
    fleet_kubeconfig: Path,
    progress: Progress,
) -> str:
    """Seed, register, wait (the module's steps 1-3); the commit every cluster follows."""
    bare = flux.git_root(canary_workdir) / f"{REPO}.git"
    first, release = seed(bare, directory, fleet, url)
    progress(f"fleet repo {url}: {first[:12]} (the files of {directory}), {release[:12]} (every cluster pinned to it)")
    api = kconfig.new_client_from_config(config_file=str(canary_kubeconfig))
    try:
        objects = register(api, tool, fleet, kubeconfigs, url)
    finally:
        api.close()
    kinds = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in objects)
    progress(f"{'Argo CD' if tool == 'argocd' else 'Flux'}: {len(fleet.clusters)} cluster(s) registered; {kinds}")
    wait_rolled_out(fleet, fleet_kubeconfig, first, progress)
    return first


def tool_of(flux_on: bool, argocd_on: bool) -> str | None:
    if flux_on and argocd_on:
        raise ValueError("a fleet is rolled out by one GitOps tool: --flux or --argocd, not both")
    return "flux" if flux_on else "argocd" if argocd_on else None


def ordered_names(fleet: FleetFile) -> Sequence[str]:
    """The clusters in wave order: the first is the canary, which runs the tool."""
    return [c.name for wave in fleet.waves for c in wave]
