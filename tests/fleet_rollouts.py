"""A fleet of three local clusters rolled out by Argo CD or Flux, for tests/argocd and tests/flux.

`migops local up --clusters 3 --repo DIR --argocd|--flux`, as a user runs it, on the fleet repo `make
demo-fleet` runs (migops.local.demo_fleet): the canary (A100 40GB) runs the tool and the git server,
train (H100) and inference (A100 80GB) are wave 1. The clusters' names and waves are examples/fleet's,
so the ApplicationSet and Flux objects that run are examples/fleet/gitops/'s (the tests compare them).
Both tools' tests make the same two releases (`release`):

- GOOD: every cluster to `all-3g` (3g.20gb on the canary's A100 40GB, 3g.40gb elsewhere);
- BAD: every cluster to `all-1g.10gb`: 7 x 1g.10gb fits an H100 or A100 80GB (1 memory slice each) but
  not the canary's A100 40GB, where 1g.10gb takes 2 slices and at most 4 fit.

Importable by name (tests/ is on sys.path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from gitrepo import Clone, run
from local_cli import down_on_exit, migops_local

from migops.api.names import MIG_CONFIG_LABEL
from migops.local import fleet
from migops.local.demo_fleet import CANARY, CLUSTERS, GOOD, GPUS, OTHERS, nodes_yaml, write_repo

MIGOPS = Path(sys.executable).parent / "migops"
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_GITOPS = ROOT / "examples" / "fleet" / "gitops"
# Per model: the MIG instances GOOD makes on one GPU.
GOOD_PROFILES = {CANARY: ["3g.20gb", "3g.20gb"], "train": ["3g.40gb", "3g.40gb"], "inference": ["3g.40gb", "3g.40gb"]}


@dataclass
class LocalFleet:
    home: Path
    url: str  # the fleet repo, served by the canary
    up_seconds: float

    @property
    def kubeconfig(self) -> Path:
        return fleet.kubeconfig_path(self.home)

    def workdir(self, cluster: str) -> Path:
        return fleet.cluster_home(self.home, cluster) / "local"

    def kubectl(self, cluster: str, *args: str) -> str:
        from migops.local.binaries import locate

        out = subprocess.run(
            [str(locate().kubectl), f"--kubeconfig={self.kubeconfig}", f"--context={cluster}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    def get(self, cluster: str, *args: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.kubectl(cluster, "get", *args, "-o", "json"))
        return found

    def migsync(self, cluster: str) -> dict[str, Any]:
        return self.get(cluster, "migsync", "-n", "migops-system", "migops", "--show-managed-fields")

    def labels(self, cluster: str) -> dict[str, str]:
        return {
            n["metadata"]["name"]: n["metadata"]["labels"].get(MIG_CONFIG_LABEL)
            for n in self.get(cluster, "nodes")["items"]
        }

    def gpus(self, cluster: str) -> dict[str, str]:
        """Each node's simulated GPUs, as the agent left them (the state file's text)."""
        return {p.parent.name: p.read_text() for p in sorted((self.workdir(cluster) / "agents").glob("*/gpus.json"))}

    def profiles(self, cluster: str) -> dict[str, list[list[str]]]:
        """Per node, per GPU: the MIG instances' profiles."""
        return {
            node: [sorted(i["profile"] for i in g["instances"]) for g in json.loads(text)["gpus"]]
            for node, text in self.gpus(cluster).items()
        }

    def status(self) -> tuple[int, list[dict[str, Any]]]:
        out = migops("fleet", "status", "--kubeconfig", str(self.kubeconfig), "-o", "json")
        return out.returncode, json.loads(out.stdout)["clusters"]


def migops(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MIGOPS), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env=dict(os.environ)
    )


def local_fleet(tmp: Path, tool: str, env: Mapping[str, str] = {}) -> Iterator[LocalFleet]:
    """Up (the initial release rolled out to every cluster), yield, down: nothing left behind."""
    home = tmp / "home"
    repo = write_repo(tmp / "seed")
    began = time.monotonic()
    args = ["up", "--clusters", "3", "--nodes", "1", "--gpus-per-node", "1", "--strategy", "mixed"]
    args += [a for g in GPUS for a in ("--gpu", g)] + ["--repo", str(repo), f"--{tool}"]
    try:
        with down_on_exit(home):
            up = subprocess.run(
                [str(MIGOPS), "local", *args],
                env={**os.environ, **env, "MIGOPS_HOME": str(home)},
                capture_output=True,
                text=True,
                timeout=1200,
                check=False,
            )
            seconds = time.monotonic() - began
            print(up.stdout)
            assert up.returncode == 0, f"migops local up failed:\n{up.stdout}\n{up.stderr}"
            url = next(line.split()[2] for line in up.stdout.splitlines() if line.strip().startswith("fleet repo:"))
            yield LocalFleet(home, url, seconds)
    finally:
        down = migops_local(home, "down", timeout=600)
        assert down.returncode == 0, down.stderr
        assert not fleet.fleet_dir(home).exists()


def release(lf: LocalFleet, clone: Clone, config: str) -> tuple[str, str]:
    """Every cluster's nodes.yaml to `config`, with its inventory recorded from the cluster, as one commit
    (the change); then `migops fleet pin` of it as a second (the release); both pushed at once, as a
    merged pull request would land them: (change, release)."""
    run(["git", "-C", str(clone.path), "pull", "-q", "--ff-only"])
    for c in CLUSTERS:
        (clone.path / "clusters" / c / "nodes.yaml").write_text(nodes_yaml(config))
        out = migops(
            "inventory",
            "--cluster",
            c,
            "--kubeconfig",
            str(lf.kubeconfig),
            "--context",
            c,
            "-o",
            str(clone.path / "clusters" / c / "inventory.yaml"),
        )
        assert out.returncode == 0, out.stderr
    run(["git", "-C", str(clone.path), "add", "-A"])
    run(["git", "-C", str(clone.path), "commit", "-q", "-m", f"every cluster to {config}"])
    change = run(["git", "-C", str(clone.path), "rev-parse", "HEAD"]).strip()
    pinned = migops("fleet", "pin", change, str(clone.path))
    assert pinned.returncode == 0, pinned.stderr
    return change, clone.push({}, f"release {change[:12]}")


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def applied_at(migsync: Mapping[str, Any], manager: str) -> datetime:
    """When `manager` (the GitOps tool's field manager) last changed the MigSync's spec: the API server's
    own record of the apply that carried the commit to the cluster."""
    times = [
        when(e["time"])
        for e in migsync["metadata"]["managedFields"]
        if e["manager"] == manager and "f:spec" in (e.get("fieldsV1") or {})
    ]
    assert times, [(e["manager"], e.get("operation")) for e in migsync["metadata"]["managedFields"]]
    return max(times)


def wait_in_sync(lf: LocalFleet, change: str, timeout: float = 300) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        code, rows = lf.status()
        if code == 0 and all(r["lastAppliedRevision"] == change for r in rows):
            return rows
        time.sleep(1)
    raise AssertionError(f"the fleet not in sync at {change[:12]} after {timeout:.0f}s: {rows}")


def assert_good_rollout(lf: LocalFleet, change: str, manager: str) -> None:
    """Every cluster at `change`, its node relabelled and its GPUs repartitioned by its agent; the canary
    in sync before the tool applied the commit to any other cluster."""
    rows = wait_in_sync(lf, change)
    assert [(r["cluster"], r["nodesInSync"], r["nodes"]) for r in rows] == [(c, 1, 1) for c in CLUSTERS]
    for c in CLUSTERS:
        assert set(lf.labels(c).values()) == {GOOD}, c
        assert list(lf.profiles(c).values()) == [[GOOD_PROFILES[c]]], c
    canary = lf.migsync(CANARY)
    canary_ready = when(condition(canary, "Ready")["lastTransitionTime"])
    print(f"canary: applied {applied_at(canary, manager):%H:%M:%S}, Ready {canary_ready:%H:%M:%S}")
    for c in OTHERS:
        other = lf.migsync(c)
        applied, ready = applied_at(other, manager), when(condition(other, "Ready")["lastTransitionTime"])
        print(f"{c}: applied {applied:%H:%M:%S}, Ready {ready:%H:%M:%S}")
        # Second resolution on both sides: the same second is allowed, earlier is not.
        assert applied >= canary_ready, (c, applied, canary_ready)
        assert ready >= applied


@dataclass(frozen=True)
class Held:
    """What a cluster shows, to compare before and after a commit that must not reach it."""

    ref: str
    generation: int
    applied: str
    labels: dict[str, str]
    gpus: dict[str, str]


def held(lf: LocalFleet, cluster: str) -> Held:
    obj = lf.migsync(cluster)
    return Held(
        obj["spec"]["ref"],
        obj["metadata"]["generation"],
        obj["status"]["lastAppliedRevision"],
        lf.labels(cluster),
        lf.gpus(cluster),
    )


def assert_held(lf: LocalFleet, before: Mapping[str, Held]) -> None:
    """The other clusters exactly as they were; `migops fleet status` says the canary is stalled."""
    for c in OTHERS:
        assert held(lf, c) == before[c], c
    code, rows = lf.status()
    assert code == 1
    assert [(r["cluster"], r["inSync"], r["stalled"]) for r in rows] == [
        (CANARY, False, True),
        *((c, True, False) for c in OTHERS),
    ]


def show(lf: LocalFleet, clone: Clone, *kubectl: str) -> None:
    """What a user looks at (shown with -s): the tool's table and `migops fleet status`."""
    print(f"$ kubectl {' '.join(kubectl)}\n{lf.kubectl(CANARY, *kubectl)}")
    out = migops("fleet", "status", "--fleet", str(clone.path), "--kubeconfig", str(lf.kubeconfig))
    print(f"$ migops fleet status --fleet .\n{out.stdout}")


def wait_canary_refused(lf: LocalFleet, change: str, timeout: float = 240) -> dict[str, Any]:
    """The canary's MigSync once its reconciler refused `change` (Stalled=True); the object."""
    deadline = time.monotonic() + timeout
    obj: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj = lf.migsync(CANARY)
        status = obj.get("status") or {}
        if status.get("lastAttemptedRevision") == change and condition(obj, "Stalled")["status"] == "True":
            return obj
        time.sleep(1)
    raise AssertionError(f"the canary did not refuse {change[:12]} in {timeout:.0f}s: {obj.get('status')}")


def assert_validate_names_the_canary_only(clone: Clone) -> None:
    """The pull-request check would have refused BAD: the canary's cluster only, with the rule."""
    out = migops("validate", str(clone.path))
    print(out.stdout)
    assert out.returncode != 0
    invalid = [line for line in out.stdout.splitlines() if line.endswith(": INVALID")]
    assert len(invalid) == 1 and invalid[0].endswith("clusters/canary/nodes.yaml: cluster canary: INVALID"), out.stdout
    assert "[count-exceeds-max]" in out.stdout


def example_objects(tool: str, url: str) -> list[dict[str, Any]]:
    """examples/fleet/gitops/<tool>.yaml's objects with the served repository's URL."""
    docs = [d for d in yaml.safe_load_all((EXAMPLE_GITOPS / f"{tool}.yaml").read_text()) if d]
    text = json.dumps(docs).replace("https://git.example.com/platform/mig-fleet.git", url)
    found: list[dict[str, Any]] = json.loads(text)
    return found


def contained(expected: Any, live: Any, where: str = "") -> list[str]:
    """Where `live` lacks or differs from what `expected` states (the API server adds defaults and status)."""
    if isinstance(expected, dict):
        if not isinstance(live, dict):
            return [f"{where}: {live!r}"]
        return [d for k, v in expected.items() for d in contained(v, live.get(k), f"{where}.{k}")]
    return [] if expected == live else [f"{where}: {live!r} != {expected!r}"]
