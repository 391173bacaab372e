"""`make demo-fleet`: a fleet of three GPU clusters rolled out by Flux (or Argo CD: TOOL=argocd), a canary first.

As a user runs it, with `migops` commands and git:

1. `migops local up --clusters 3 --repo DIR --flux`: three local clusters of different GPUs (the canary
   A100 40GB, train H100, inference A100 80GB), the tool on the canary, the fleet repo served from it;
2. each cluster's inventory recorded (`migops inventory`), the fleet checked (`migops validate`);
3. a good release (every cluster to all-3g; `migops fleet pin`): the canary in sync first, then wave 1;
4. a release the canary cannot place (7 x 1g.10gb fits an H100 or A100 80GB, not an A100 40GB): the
   pull-request check names the canary; pushed all the same, the canary refuses it and the tool holds
   wave 1, whose clusters keep their commit, labels and GPUs;
5. the good change pinned again: the canary back in sync;
6. `migops local down` (KEEP=1 leaves the fleet running).

Not part of `make demo`: three control planes and a GitOps tool take minutes to start on 2 cores.
Exit status 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migops.api.names import MIG_CONFIG_LABEL

CANARY, OTHERS = "canary", ("train", "inference")
CLUSTERS = (CANARY, *OTHERS)
GPUS = ("0x20B010DE", "0x233010DE", "0x20B210DE")  # A100-SXM4-40GB, H100 80GB, A100-SXM4-80GB: one per cluster
GOOD, BAD = "all-3g", "all-1g.10gb"
FLEET_YAML = (
    "version: v1\nclusters:\n  - {name: canary, wave: 0}\n  - {name: train, wave: 1}\n  - {name: inference, wave: 1}\n"
)
# The configs every cluster carries. all-1g.10gb names a profile that is one memory slice on an H100 or
# A100 80GB (7 fit) but two on an A100 40GB (4 fit).
CONFIGS = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-3g:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""


def nodes_yaml(config: str) -> str:
    return f"version: v1\ndefault: {config}\n"


def write_repo(root: Path) -> Path:
    """The fleet repo: examples/fleet's clusters and waves, the shared configs, every cluster all-disabled
    (`migops local up` writes each cluster's sync/migsync.yaml when it serves the repo)."""
    root.mkdir(parents=True)
    (root / "fleet.yaml").write_text(FLEET_YAML)
    (root / "config.yaml").write_text(CONFIGS)
    for name in CLUSTERS:
        (root / "clusters" / name).mkdir(parents=True)
        (root / "clusters" / name / "config.yaml").write_text(CONFIGS)
        (root / "clusters" / name / "nodes.yaml").write_text(nodes_yaml("all-disabled"))
    return root


class DemoFailed(Exception):
    """A step did not behave as the demo says it does."""


class Demo:
    def __init__(self, work: Path, tool: str) -> None:
        self.work, self.tool = work, tool
        identity = {"GIT_AUTHOR_NAME": "migops demo", "GIT_AUTHOR_EMAIL": "demo@migops.invalid"}
        identity |= {"GIT_COMMITTER_NAME": "migops demo", "GIT_COMMITTER_EMAIL": "demo@migops.invalid"}
        self.env = {**identity, **os.environ, "MIGOPS_HOME": str(work / "home")}
        self.kubeconfig = work / "home" / "fleet" / "kubeconfig"
        self.clone = work / "clone"
        self.began = time.monotonic()

    def say(self, text: str) -> None:
        print(f"\n[{time.monotonic() - self.began:5.0f}s] == {text}", flush=True)

    def run(self, *argv: str, cwd: Path | None = None, ok: bool = True, show: bool = True, shown: str = "") -> str:
        if show:
            print(f"$ {shown or ' '.join(argv)}".replace(str(self.clone), "."), flush=True)
        proc = subprocess.run(list(argv), cwd=cwd, env=self.env, capture_output=True, text=True, check=False)
        if show and proc.stdout.strip():
            print(proc.stdout.rstrip(), flush=True)
        if ok and proc.returncode != 0:
            raise DemoFailed(f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def migops(self, *args: str, cwd: Path | None = None, ok: bool = True, show: bool = True) -> str:
        shown = " ".join(("migops", *args)).replace(f"--kubeconfig {self.kubeconfig}", "").replace("  ", " ")
        return self.run(sys.executable, "-m", "migops", *args, cwd=cwd, ok=ok, show=show, shown=shown)

    def git(self, *args: str, show: bool = True) -> str:
        return self.run("git", "-C", str(self.clone), *args, show=show, shown=" ".join(("git", *args)))

    def kubectl(self, cluster: str, *args: str, show: bool = True) -> str:
        from migops.local.binaries import locate

        kubectl = str(locate().kubectl)
        argv = (f"--kubeconfig={self.kubeconfig}", f"--context={cluster}", *args)
        return self.run(kubectl, *argv, show=show, shown=" ".join(("kubectl", *argv[1:])))

    def status(self) -> list[dict[str, Any]]:
        out = self.migops(
            "fleet",
            "status",
            "--fleet",
            str(self.clone),
            "--kubeconfig",
            str(self.kubeconfig),
            "-o",
            "json",
            ok=False,
            show=False,
        )
        rows: list[dict[str, Any]] = json.loads(out)["clusters"]
        return rows

    def until(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(1)
        raise DemoFailed(f"{what}: not within {timeout:.0f}s")

    def labels(self, cluster: str) -> dict[str, str]:
        nodes = json.loads(self.kubectl(cluster, "get", "nodes", "-o", "json", show=False))["items"]
        return {n["metadata"]["name"]: n["metadata"]["labels"].get(MIG_CONFIG_LABEL, "") for n in nodes}

    # -------------------------------------------------------------------------------------- steps
    def up(self, repo: Path) -> str:
        self.say(f"three clusters, {self.tool} on the canary rolling the fleet repo out")
        args = ["local", "up", "--clusters", "3", "--nodes", "2", "--gpus-per-node", "2", "--strategy", "mixed"]
        out = self.migops(*args, *(a for g in GPUS for a in ("--gpu", g)), "--repo", str(repo), f"--{self.tool}")
        return next(line.split()[2] for line in out.splitlines() if line.strip().startswith("fleet repo:"))

    def release(self, config: str, *, expect_valid: bool) -> tuple[str, str]:
        """Every cluster to `config` with fresh inventories, checked, committed, pinned, pushed."""
        self.git("pull", "-q", "--ff-only", show=False)
        for c in CLUSTERS:
            (self.clone / "clusters" / c / "nodes.yaml").write_text(nodes_yaml(config))
            self.migops(
                "inventory",
                "--cluster",
                c,
                "--kubeconfig",
                str(self.kubeconfig),
                "--context",
                c,
                "-o",
                str(self.clone / "clusters" / c / "inventory.yaml"),
                show=False,
            )
        checked = self.migops("validate", ".", cwd=self.clone, ok=False)
        if ("INVALID" in checked) == expect_valid:
            raise DemoFailed(f"migops validate said {'INVALID' if expect_valid else 'valid'} for {config}")
        self.git("add", "-A", show=False)
        self.git("commit", "-q", "-m", f"every cluster to {config}")
        change = self.git("rev-parse", "HEAD", show=False).strip()
        return change, self.pin(change)

    def pin(self, change: str) -> str:
        self.migops("fleet", "pin", change, str(self.clone))
        self.git("commit", "-qam", f"release {change[:12]}")
        self.git("push", "-q", "origin", "HEAD:main")
        if self.tool == "flux":  # `flux reconcile source git mig-fleet`: the GitRepository polls every minute
            self.kubectl(
                CANARY,
                "annotate",
                "--overwrite",
                "-n",
                "flux-system",
                "gitrepository",
                "mig-fleet",
                f"reconcile.fluxcd.io/requestedAt={time.time():.0f}",
                show=False,
            )
        return self.git("rev-parse", "HEAD", show=False).strip()

    def follow(self, change: str, clusters: tuple[str, ...] = CLUSTERS, timeout: float = 600) -> None:
        """Print each of `clusters` when it is in sync at `change`, until all are; the canary must be first."""
        seen: dict[str, float] = {}
        start = time.monotonic()
        while len(seen) < len(clusters):
            for row in self.status():
                if (
                    row["cluster"] in clusters
                    and row["cluster"] not in seen
                    and row["inSync"]
                    and row["lastAppliedRevision"] == change
                ):
                    seen[row["cluster"]] = time.monotonic() - start
                    print(
                        f"  {row['cluster']} (wave {row['wave']}) in sync at {change[:12]} after {seen[row['cluster']]:.0f}s"
                    )
            if time.monotonic() - start > timeout:
                raise DemoFailed(f"not every cluster in sync at {change[:12]} within {timeout:.0f}s")
            time.sleep(1)
        if min(seen, key=lambda c: seen[c]) != CANARY:
            raise DemoFailed(f"a cluster was in sync before the canary: {seen}")

    def tool_view(self) -> None:
        kind = "kustomizations" if self.tool == "flux" else "applications"
        self.kubectl(CANARY, "get", kind, "-n", "flux-system" if self.tool == "flux" else "argocd")

    def main(self) -> None:
        repo = write_repo(self.work / "seed")
        url = self.up(repo)
        self.run("git", "clone", "-q", url, str(self.clone))
        self.migops("fleet", "status", "--fleet", str(self.clone), "--kubeconfig", str(self.kubeconfig))

        self.say("a good release: every cluster to all-3g (the check passes; the canary first, then wave 1)")
        good, _ = self.release(GOOD, expect_valid=True)
        self.follow(good)
        for c in CLUSTERS:
            if set(self.labels(c).values()) != {GOOD}:
                raise DemoFailed(f"{c}'s nodes are not all {GOOD}: {self.labels(c)}")

        self.say("a release the canary's A100 40GB cannot place: the check names the canary; pushed all the same")
        before = {c: self.labels(c) for c in OTHERS}
        bad, _ = self.release(BAD, expect_valid=False)
        self.until(
            lambda: any(
                r["cluster"] == CANARY and r["stalled"] and r["lastAttemptedRevision"] == bad for r in self.status()
            ),
            300,
            "the canary refusing the release",
        )
        time.sleep(20)  # the tool has had every chance to move wave 1
        self.tool_view()
        self.migops("fleet", "status", "--fleet", str(self.clone), "--kubeconfig", str(self.kubeconfig), ok=False)
        for c in OTHERS:
            row = next(r for r in self.status() if r["cluster"] == c)
            if row["ref"] != good or self.labels(c) != before[c]:
                raise DemoFailed(f"{c} took the release the canary refused: {row}")
        print("  train and inference: still pinned to the good change, labels as before")

        self.say("the good change pinned again: the canary back in sync, wave 1 unchanged")
        self.pin(good)
        self.follow(good, (CANARY,))
        self.migops("fleet", "status", "--fleet", str(self.clone), "--kubeconfig", str(self.kubeconfig))


def main() -> int:
    tool = os.environ.get("TOOL", "flux")
    if tool not in ("flux", "argocd"):
        print(f"demo-fleet: TOOL={tool}: flux or argocd", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="migops-demo-fleet-"))
    demo = Demo(work, tool)
    try:
        demo.main()
        demo.say("done: every step behaved as described")
        return 0
    except DemoFailed as exc:
        print(f"\ndemo-fleet: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if os.environ.get("KEEP"):
            print(f"\nKEEP=1: the fleet is still running; MIGOPS_HOME={work / 'home'} migops local down stops it")
        else:
            demo.migops("local", "down", ok=False, show=False)
            import shutil

            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
