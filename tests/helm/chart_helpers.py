"""Running helm on the chart, and reading what it renders."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "migops"
MODES = ("agent", "mig-manager", "webhook-only")


def run_helm(
    helm: Path, *args: str, check: bool = True, timeout: float = 300, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env_args = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    out = subprocess.run([str(helm), *args, *env_args], capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stderr}"
    return out


def set_args(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        out += ["--set-json" if not isinstance(value, str) else "--set-string", f"{key}={_json(value)}"]
    return out


def _json(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def template(
    helm: Path,
    values: dict[str, Any] | None = None,
    *,
    namespace: str = "migops-system",
    release: str = "migops",
    extra: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    out = run_helm(helm, "template", release, str(CHART), "-n", namespace, *set_args(values or {}), *extra)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def crds() -> list[dict[str, Any]]:
    files = sorted(p for p in (CHART / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
    return [yaml.safe_load(p.read_text()) for p in files]
