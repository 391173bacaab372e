"""The distribution installs one import namespace, `migops`, and every package folder is in it.

`mig`, `certs`, `webhook`, `agent`, ... are other distributions' names on PyPI: a wheel that put them at
the top level would break an environment holding both. The folders stay at the top of the repository
and install as `migops.<folder>` through a symbolic link migops/<folder> -> ../<folder>, so a forgotten
link would silently drop a package from the wheel: the test walks the tree and checks that each one is
there, as real files (a wheel holds no links).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Repository folders that are not installed.
NOT_INSTALLED = {"tests", "bench", "hack", "docs", "examples", "manifests", ".git", ".venv", "build", "dist"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # Build from a copy: setuptools writes build/ into the source tree, which would leave stale module
    # copies in the checkout.
    source = tmp_path_factory.mktemp("source") / "migops"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"
        ),
    )
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    (path,) = out.glob("migops-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def _source_packages() -> dict[str, Path]:
    """Import name -> folder for every package folder in the repository (a folder with __init__.py)."""
    found: dict[str, Path] = {}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts[0] in NOT_INSTALLED or any(p.startswith(".") for p in rel.parts):
            continue
        parts = rel.parts if rel.parts[0] == "migops" else ("migops", *rel.parts)
        found[".".join(parts)] = init.parent
    return found


def test_wheel_has_only_the_migops_namespace(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"migops"}, sorted(tops)


def test_every_package_folder_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    packages = _source_packages()
    assert {"migops", "migops.mig", "migops.certs", "migops.local"} <= set(packages)
    for dotted, folder in packages.items():
        assert f"{dotted.replace('.', '/')}/__init__.py" in names, f"{folder} is not installed as {dotted}"
        for module in folder.glob("*.py"):
            assert f"{dotted.replace('.', '/')}/{module.name}" in names, f"{module} missing from the wheel"


def test_every_package_folder_is_linked_into_migops() -> None:
    """The links are the mapping: each top-level package folder has one, and each link names one."""
    links = {p.name: os.readlink(p) for p in (ROOT / "migops").iterdir() if p.is_symlink()}
    tops = {f.parts[0] for f in (p.relative_to(ROOT) for p in _source_packages().values()) if f.parts[0] != "migops"}
    assert links == {name: f"../{name}" for name in tops}


def test_wheel_holds_files_not_links(wheel: zipfile.ZipFile) -> None:
    for info in wheel.infolist():
        assert (info.external_attr >> 16) & 0o170000 != 0o120000, f"{info.filename} is a symbolic link"
    assert len(wheel.read("migops/mig/catalogue.py")) > 1000


def test_package_data_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert "migops/mig/data/gpus.yaml" in names
    assert "migops/mig/data/gpus.schema.json" in names
    assert "migops/local/data/clusterpolicy-crd.yaml" in names
    assert "migops/local/data/agent-rbac.yaml" in names  # a link in the checkout, the file itself in the wheel
    assert "migops/reconciler/data/argocd-migsync-health.lua" in names  # Argo CD health check of a MigSync


def test_console_script_points_into_the_namespace(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "migops = migops.cli:main" in text
