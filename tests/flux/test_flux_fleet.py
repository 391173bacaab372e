"""Flux rolls a fleet repo out cluster by cluster: a Kustomization per cluster, dependsOn the wave before.

Three local clusters (tests/fleet_rollouts.py): the canary runs Flux's source- and kustomize-controller;
the Kustomizations of examples/fleet/gitops/flux.yaml apply each cluster's clusters/<name>/sync (the
MigSync that pins the commit) through its kubeconfig Secret (made from the fleet kubeconfig), wait for
the MigSync to be healthy (kstatus: observedGeneration, Ready, Reconciling, Stalled), and wave 1
`dependsOn` the canary's: Flux applies it only once the canary's is Ready at the same revision.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_rollouts import (
    LocalFleet,
    assert_good_rollout,
    assert_held,
    assert_validate_names_the_canary_only,
    contained,
    example_objects,
    held,
    local_fleet,
    migops,
    release,
    show,
    wait_canary_refused,
    wait_in_sync,
)
from gitrepo import Clone
from polling import until

from migops.local import flux
from migops.local.demo_fleet import BAD, CANARY, GOOD, OTHERS

pytestmark = pytest.mark.cluster
SOURCE = "mig-fleet"


@pytest.fixture(scope="module")
def flux_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    yield from local_fleet(tmp_path_factory.mktemp("flux-fleet"), "flux")


def kustomizations(lf: LocalFleet) -> dict[str, dict[str, Any]]:
    found = lf.get(CANARY, "kustomizations.kustomize.toolkit.fluxcd.io", "-n", flux.NAMESPACE)["items"]
    return {k["metadata"]["name"]: k for k in found}


def ready(k: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in k["status"]["conditions"] if c["type"] == "Ready")


def push(lf: LocalFleet, clone: Clone, config: str) -> tuple[str, str]:
    """A release, then what `flux reconcile source git mig-fleet` does (the GitRepository polls every minute)."""
    change, rel = release(lf, clone, config)
    lf.kubectl(
        CANARY,
        "annotate",
        "--overwrite",
        "-n",
        flux.NAMESPACE,
        "gitrepository",
        SOURCE,
        f"reconcile.fluxcd.io/requestedAt={time.time():.6f}",
    )
    return change, rel


def test_the_fleet_runs_the_example_kustomizations(flux_fleet: LocalFleet) -> None:
    lf = flux_fleet
    print(f"migops local up --clusters 3 --flux (the first release rolled out): {lf.up_seconds:.0f}s")
    expected = example_objects("flux", lf.url)
    live = {
        "GitRepository": lf.get(CANARY, "gitrepository", "-n", flux.NAMESPACE, SOURCE),
        **{name: k for name, k in kustomizations(lf).items()},
    }
    for obj in expected:
        key = "GitRepository" if obj["kind"] == "GitRepository" else obj["metadata"]["name"]
        assert contained(obj, live[key]) == [], key
    assert [o["metadata"]["name"] for o in expected[1:]] == [
        "mig-fleet-canary",
        "mig-fleet-train",
        "mig-fleet-inference",
    ]
    for k in kustomizations(lf).values():
        assert ready(k)["status"] == "True", k["status"]


def test_a_good_commit_reaches_the_canary_then_the_others(flux_fleet: LocalFleet, tmp_path: Path) -> None:
    lf = flux_fleet
    wait_in_sync(lf, lf.status()[1][0]["ref"])
    clone = Clone(lf.url, tmp_path / "clone")
    pushed = time.monotonic()
    change, rel = push(lf, clone, GOOD)
    assert migops("validate", str(clone.path)).returncode == 0
    assert_good_rollout(lf, change, flux.FLUX_MANAGER)
    print(f"commit -> every cluster in sync: {time.monotonic() - pushed:.0f}s")

    def applied() -> dict[str, dict[str, Any]] | None:
        found = kustomizations(lf)
        done = all(
            k["status"].get("lastAppliedRevision", "").endswith(rel) and ready(k)["status"] == "True"
            for k in found.values()
        )
        return found if done else None

    until(applied, 120, "every Kustomization Ready at the release")


def test_a_commit_the_canary_cannot_place_stops_at_the_canary(flux_fleet: LocalFleet, tmp_path: Path) -> None:
    lf = flux_fleet
    wait_in_sync(lf, lf.status()[1][0]["ref"])
    before = {c: held(lf, c) for c in OTHERS}
    previous = {name: k["status"]["lastAppliedRevision"] for name, k in kustomizations(lf).items()}
    clone = Clone(lf.url, tmp_path / "clone")
    change, rel = push(lf, clone, BAD)
    assert_validate_names_the_canary_only(clone)  # the pull-request check would have refused it

    wait_canary_refused(lf, change)

    def failed() -> dict[str, dict[str, Any]] | None:
        found = kustomizations(lf)
        return found if ready(found["mig-fleet-canary"])["reason"] == "HealthCheckFailed" else None

    found = until(failed, 180, "the canary's Kustomization failing its health check")
    time.sleep(20)  # several dependency requeues (2 s) and health checks: nothing moves on
    show(lf, clone, "get", "kustomizations", "-n", flux.NAMESPACE)
    found = kustomizations(lf)
    for name, k in found.items():
        print(f"Kustomization {name}: Ready={ready(k)['status']} {ready(k)['reason']}: {ready(k)['message']}")
    canary = found["mig-fleet-canary"]
    assert canary["status"]["lastAttemptedRevision"].endswith(rel)
    assert canary["status"]["lastAppliedRevision"] == previous["mig-fleet-canary"]
    assert ready(canary)["status"] == "False"
    assert "MigSync/migops-system/migops status: 'Failed'" in ready(canary)["message"], ready(canary)
    # Flux has fetched the release (its artifact) and holds it back from the other clusters.
    source = lf.get(CANARY, "gitrepository", "-n", flux.NAMESPACE, SOURCE)
    assert source["status"]["artifact"]["revision"].endswith(rel)
    for c in OTHERS:
        k = found[f"mig-fleet-{c}"]
        assert (ready(k)["status"], ready(k)["reason"]) == ("False", "DependencyNotReady")
        assert ready(k)["message"] == "dependency 'flux-system/mig-fleet-canary' is not ready"
        assert k["status"]["lastAppliedRevision"] == previous[f"mig-fleet-{c}"]
        assert k["status"]["lastAttemptedRevision"] == previous[f"mig-fleet-{c}"]
    assert_held(lf, before)
