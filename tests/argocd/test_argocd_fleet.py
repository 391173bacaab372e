"""Argo CD rolls a fleet repo out cluster by cluster: one ApplicationSet, Progressive Syncs by wave.

Three local clusters (tests/fleet_rollouts.py): the canary runs Argo CD (repo-server,
application-controller and the ApplicationSet controller of the same build, Progressive Syncs on); every
cluster is registered by a Secret made from the fleet kubeconfig, labelled with its wave; the
ApplicationSet of examples/fleet/gitops/argocd.yaml makes an Application per cluster applying its
clusters/<name>/sync (the MigSync that pins the commit), and RollingSync syncs wave 1 only once every
Application of wave 0 is Healthy, as the MigSync health check says.
"""

from __future__ import annotations

import base64
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

from migops.api.names import FLEET_WAVE_LABEL
from migops.local import argocd
from migops.local.demo_fleet import BAD, CANARY, GOOD, OTHERS

pytestmark = pytest.mark.cluster
# Argo CD's own knobs, short for a test: every Application refreshed every 3 s; RollingSync's refresh
# grace period then defaults to three refreshes (migops.local.argocd.GRACE_ENV). It must span several:
# RollingSync counts an Application refreshed since the commit was seen as up to date, and a refresh that
# began before the commit reached Argo CD but ended after it counts too, so with a grace period of one
# refresh the canary can still look done at its previous commit while wave 1 starts (this test caught
# it with 3 s; docs/fleet.md).
ENV = {argocd.RESYNC_ENV: "3s"}


@pytest.fixture(scope="module")
def argo_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    yield from local_fleet(tmp_path_factory.mktemp("argocd-fleet"), "argocd", ENV)


def applications(lf: LocalFleet) -> dict[str, dict[str, Any]]:
    return {a["metadata"]["name"]: a for a in lf.get(CANARY, "applications", "-n", argocd.NAMESPACE)["items"]}


def appset_status(lf: LocalFleet) -> dict[str, Any]:
    status: dict[str, Any] = lf.get(CANARY, "applicationset", "-n", argocd.NAMESPACE, "mig-fleet")["status"]
    return status


def steps(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {s["application"]: (s["step"], s["status"]) for s in status.get("applicationStatus") or ()}


def rollout(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "RolloutProgressing")


def test_the_fleet_is_registered_by_wave_and_runs_the_example_applicationset(argo_fleet: LocalFleet) -> None:
    lf = argo_fleet
    print(f"migops local up --clusters 3 --argocd (the first release rolled out): {lf.up_seconds:.0f}s")
    live = lf.get(CANARY, "applicationset", "-n", argocd.NAMESPACE, "mig-fleet")
    (expected,) = example_objects("argocd", lf.url)
    assert contained(expected, live) == []
    secrets = lf.get(CANARY, "secrets", "-n", argocd.NAMESPACE, "-l", "argocd.argoproj.io/secret-type=cluster")
    registered = sorted(
        (s["metadata"]["labels"][FLEET_WAVE_LABEL], base64.b64decode(s["data"]["name"]).decode())
        for s in secrets["items"]
    )
    assert registered == [("0", "canary"), ("1", "inference"), ("1", "train")]
    apps = applications(lf)
    assert sorted(apps) == ["mig-fleet-canary", "mig-fleet-inference", "mig-fleet-train"]
    for app in apps.values():
        # RollingSync syncs the Applications itself: no automated policy, each sync its operation.
        assert "automated" not in app["spec"]["syncPolicy"] or not app["spec"]["syncPolicy"]["automated"].get(
            "enabled", True
        )
        assert app["status"]["operationState"]["operation"]["initiatedBy"]["username"] == "applicationset-controller"
    assert set(steps(appset_status(lf)).values()) == {("1", "Healthy"), ("2", "Healthy")}


def test_a_good_commit_reaches_the_canary_then_the_others(argo_fleet: LocalFleet, tmp_path: Path) -> None:
    lf = argo_fleet
    wait_in_sync(lf, lf.status()[1][0]["ref"])
    clone = Clone(lf.url, tmp_path / "clone")
    pushed = time.monotonic()
    change, _ = release(lf, clone, GOOD)
    assert migops("validate", str(clone.path)).returncode == 0
    assert_good_rollout(lf, change, argocd.ARGOCD_MANAGER)
    print(f"commit -> every cluster in sync: {time.monotonic() - pushed:.0f}s")

    def completed() -> dict[str, Any] | None:
        status = appset_status(lf)
        return status if rollout(status)["status"] == "False" else None

    status = until(completed, 60, "the ApplicationSet's rollout completed")
    assert set(steps(status).values()) == {("1", "Healthy"), ("2", "Healthy")}
    assert rollout(status)["message"] == "ApplicationSet Rollout has completed"


def test_a_commit_the_canary_cannot_place_stops_at_the_canary(argo_fleet: LocalFleet, tmp_path: Path) -> None:
    lf = argo_fleet
    wait_in_sync(lf, lf.status()[1][0]["ref"])
    before = {c: held(lf, c) for c in OTHERS}
    clone = Clone(lf.url, tmp_path / "clone")
    change, rel = release(lf, clone, BAD)
    assert_validate_names_the_canary_only(clone)  # the pull-request check would have refused it

    refused = wait_canary_refused(lf, change)
    print(f"canary MigSync Stalled: {next(c for c in refused['status']['conditions'] if c['type'] == 'Stalled')}")

    def degraded() -> dict[str, Any] | None:
        app = applications(lf)["mig-fleet-canary"]
        return app if app["status"]["health"]["status"] == "Degraded" else None

    app = until(degraded, 120, "the canary's Application Degraded")
    (migsync,) = [r for r in app["status"]["resources"] if r["kind"] == "MigSync"]
    print(f"Application mig-fleet-canary: health {app['status']['health']}")
    print(f"  resource MigSync migops-system/migops: {migsync['health']}")
    assert app["status"]["sync"] == {**app["status"]["sync"], "status": "Synced", "revision": rel}
    assert app["status"]["health"]["message"] == "Caused by migops.io/MigSync:migops-system/migops"
    assert migsync["health"]["status"] == "Degraded"
    message = migsync["health"]["message"]
    assert message.startswith("ValidationFailed: revision ") and "[count-exceeds-max]" in message, message
    assert "the cluster keeps revision" in message

    time.sleep(20)  # several refreshes and ApplicationSet reconciles: nothing moves on
    show(lf, clone, "get", "applications", "-n", argocd.NAMESPACE)
    status = appset_status(lf)
    print(f"ApplicationSet mig-fleet: {status['applicationStatus']}")
    print(f"  {rollout(status)}")
    assert steps(status) == {
        "mig-fleet-canary": ("1", "Progressing"),
        "mig-fleet-train": ("2", "Waiting"),
        "mig-fleet-inference": ("2", "Waiting"),
    }
    assert rollout(status)["status"] == "True"
    assert rollout(status)["message"] == "ApplicationSet is performing rollout of step 1"
    apps = applications(lf)
    for c in OTHERS:
        # Argo CD has the commit (OutOfSync at it) and holds it; the cluster has none of it.
        assert apps[f"mig-fleet-{c}"]["status"]["sync"]["status"] == "OutOfSync"
        assert apps[f"mig-fleet-{c}"]["status"]["sync"]["revision"] == rel
    assert_held(lf, before)
