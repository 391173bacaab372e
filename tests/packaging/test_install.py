"""A clean install: `pip install -e .` and the wheel build say nothing but that they worked (no setuptools
warnings), and the lock files pin, with hashes, versions that the package's ranges allow."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _copy(dest: Path) -> Path:
    shutil.copytree(
        ROOT,
        dest,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            ".hypothesis",
            ".mypy_cache",
            ".ruff_cache",
        ),
    )
    return dest


def test_editable_install_and_wheel_print_no_warning(tmp_path: Path) -> None:
    source = _copy(tmp_path / "migops")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    # As `make venv` runs it (pip shows setuptools' BuildBackendWarnings there: three screens of them before).
    editable = subprocess.run(
        [*pip, "install", "--no-deps", "-e", str(source)], capture_output=True, text=True, timeout=600, check=False
    )
    assert editable.returncode == 0, editable.stderr[-3000:]
    wheel = subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    for out in (editable, wheel):
        text = out.stdout + out.stderr
        assert "BuildBackendWarning" not in text and "SetuptoolsDeprecationWarning" not in text, text[-3000:]
        assert not re.search(r"(?i)warning|deprecat", text), text[-3000:]
    # The editable install is one path entry (the checkout), which static tools follow.
    (pth,) = (venv / "lib").glob("python3.*/site-packages/__editable__.migops-*.pth")
    assert pth.read_text().strip() == str(source)


def _lock(name: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip-compile --generate-hashes file."""
    pins: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", (ROOT / name).read_text()):
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", block)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = (
                m.group(2),
                re.findall(r"--hash=sha256:([0-9a-f]{64})", block),
            )
    return pins


@pytest.mark.parametrize(
    "lock, extras",
    [("requirements.lock", ("suggest",)), ("requirements-dev.lock", ("suggest", "test", "lint", "release"))],
)
def test_locks_pin_what_the_ranges_allow(lock: str, extras: tuple[str, ...]) -> None:
    pins = _lock(lock)
    wanted = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    wanted += [Requirement(r) for e in extras for r in PYPROJECT["project"]["optional-dependencies"][e]]
    for req in wanted:
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{req} is not in {lock}"
        assert req.specifier.contains(pins[name][0], prereleases=True), f"{lock}: {name}=={pins[name][0]} breaks {req}"
    assert all(hashes for _, hashes in pins.values()), f"{lock}: a pin without hashes"


def test_upper_bounds_where_behaviour_matters() -> None:
    deps = {Requirement(r).name.lower(): Requirement(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not deps["kubernetes"].specifier.contains("37.0.0")  # the generated API changed in v37
    assert not deps["gunicorn"].specifier.contains("27.1.0")  # migops.webhook.worker uses gthread internals
    assert all(not str(r.specifier).startswith("==") for r in deps.values()), "ranges, not exact pins"


def test_static_tools_resolve_the_checkout(tmp_path: Path) -> None:
    """The development venv's mypy, run outside the checkout, follows `from migops.mig import ...` into the
    checkout's files (the editable .pth and py.typed): what IDEs and pyright see too."""
    mypy = Path(sys.executable).with_name("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from migops.mig.catalogue import GpuModel\nfrom migops.webhook.server import gunicorn_options\n"
        "reveal_type(GpuModel.label)\nreveal_type(gunicorn_options)\n"
    )
    out = subprocess.run(
        [str(mypy), "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(probe)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(
        r'Revealed type is "def \(self: migops\.mig\.catalogue\.GpuModel\) -> (builtins\.)?str"', out.stdout
    ), out.stdout
    assert re.search(r"log_format: (builtins\.)?str =", out.stdout), out.stdout
