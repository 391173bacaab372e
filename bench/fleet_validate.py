"""Benchmark of `migops validate` of a fleet repo (docs/fleet.md): 20 clusters x 2,000 GPU nodes' inventories
(target: <= 2 s for the whole command). Each cluster has its own mix of four GPU models, two node pools
on a label its selectors read, and the shared configs plus one of its own; the inventories group the nodes
as `migops inventory` writes them. Prints the figures next to the target; no pass/fail.

Measured as a user runs it: `migops validate DIR` in a fresh process (best of --runs, wall and CPU), and
in-process the read-and-judge alone (`gitops.fleet.check_fleet`, CPU, jsonschema already imported), so
start-up and the verdict's cost show apart. The import of jsonschema is timed on its own: in the
development environment it loads rfc3987-syntax (installed for cyclonedx-python-lib's
jsonschema[format-nongpl], not by migops's own requirements), which builds its grammars at import. So
the whole command is timed twice: in this environment, and as `pip install migops` has it (the same
process with rfc3987-syntax unimportable, which jsonschema treats as not installed).

`python bench/fleet_validate.py [--clusters 20] [--nodes 2000] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from migops.gitops.fleet import check_fleet, directory_reader

MODELS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A30")
SHARED = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.6gb": 4}
  all-3g:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices: {"2g.12gb": 2}
"""


def write_fleet(root: Path, clusters: int, nodes: int) -> None:
    names = [f"cluster-{i:02d}" for i in range(clusters)]
    fleet = {"version": "v1", "clusters": [{"name": n, "wave": min(i, 2)} for i, n in enumerate(names)]}
    (root / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    (root / "config.yaml").write_text(SHARED)
    for i, name in enumerate(names):
        d = root / "clusters" / name
        (d / "sync").mkdir(parents=True)
        own = f"  own-{i}:\n    - devices: all\n      mig-enabled: false\n"
        (d / "config.yaml").write_text(SHARED + own)
        (d / "nodes.yaml").write_text(
            "version: v1\nstrategy: mixed\ndefault: all-disabled\nassignments:\n"
            "  - {nodeSelector: {matchLabels: {pool: train}}, config: all-3g}\n"
            "  - {nodeSelector: {matchLabels: {pool: infer}}, config: all-1g}\n"
        )
        groups: dict[tuple[str, str], list[str]] = {}
        for j in range(nodes):
            model = MODELS[(i + j) % len(MODELS)]
            groups.setdefault((model, "train" if j % 3 else "infer"), []).append(f"{name}-gpu-{j:05d}")
        inventory = {
            "version": "v1",
            "cluster": name,
            "strategy": "mixed",
            "configMap": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
            "labels": ["nvidia.com/gpu.count", "nvidia.com/gpu.product", "pool"],
            "nodes": [
                {"names": members, "labels": {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": m, "pool": p}}
                for (m, p), members in sorted(groups.items())
            ],
        }
        (d / "inventory.yaml").write_text(yaml.safe_dump(inventory, sort_keys=False, default_flow_style=None))
        (d / "sync" / "migsync.yaml").write_text(
            "apiVersion: migops.io/v1alpha1\nkind: MigSync\nmetadata: {name: migops, namespace: migops-system}\n"
            f'spec: {{url: https://git.example.com/fleet.git, ref: "{"a1" * 20}", path: clusters/{name}}}\n'
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_fleet(root, args.clusters, args.nodes)
        size = sum(p.stat().st_size for p in root.rglob("inventory.yaml"))
        imported = cpu_of([sys.executable, "-c", "import jsonschema"])[1] - cpu_of([sys.executable, "-c", "pass"])[1]
        import jsonschema  # noqa: F401  (imported before the clock starts: timed above)

        judged = []
        for _ in range(args.runs):
            began = time.process_time()
            verdict = check_fleet(directory_reader(root))
            judged.append(time.process_time() - began)
        assert verdict.valid, [str(p) for c in verdict.clusters for p in c.problems][:5]
        nodes = sum(c.nodes for c in verdict.clusters)
        whole = [cpu_of([sys.executable, "-m", "migops", "validate", str(root)]) for _ in range(args.runs)]
        installed = [cpu_of([sys.executable, "-c", AS_INSTALLED, str(root)]) for _ in range(args.runs)]
    load = os.getloadavg()[0]
    print(f"fleet: {args.clusters} clusters x {args.nodes} nodes = {nodes} nodes; inventories {size / 1024:.0f} KiB")
    print(f"check_fleet in-process (read + judge): {min(judged):.2f} s CPU, best of {args.runs}")
    print(
        f"migops validate DIR, whole process: best {min(w for w, _ in whole):.2f} s wall, "
        f"{min(c for _, c in whole):.2f} s CPU of {args.runs} (target <= 2 s; load average {load:.1f})"
    )
    print(f"  of which importing jsonschema here: {imported:.2f} s CPU")
    print(
        f"migops validate DIR as installed (no rfc3987-syntax): best {min(w for w, _ in installed):.2f} s wall, "
        f"{min(c for _, c in installed):.2f} s CPU of {args.runs}"
    )


# `migops validate DIR` with rfc3987-syntax unimportable: jsonschema then goes without the IRI formats,
# as it does where only migops's own requirements are installed.
AS_INSTALLED = (
    "import runpy, sys; sys.modules['rfc3987_syntax'] = None; "
    "sys.argv = ['migops', 'validate', sys.argv[1]]; runpy.run_module('migops', run_name='__main__')"
)


def cpu_of(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of `argv`, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stdout[-2000:]
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


if __name__ == "__main__":
    main()
