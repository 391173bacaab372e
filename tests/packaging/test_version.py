"""One version, written once (pyproject.toml), read everywhere: `migops --version` (package metadata), the
image's OCI label default, the change log's newest release (released as the tag v<version>)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_flag_prints_the_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "migops", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"migops {VERSION}"


def test_image_label_default_is_the_version() -> None:
    args = re.findall(r"^ARG VERSION=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert args == [VERSION]
    assert 'org.opencontainers.image.version="${VERSION}"' in (ROOT / "Dockerfile").read_text()


def test_changelog_names_the_version() -> None:
    """The newest release heading (after "Unreleased") is the version pyproject.toml gives."""
    headings = re.findall(r"^## \[?v?([0-9][^\]\s]*)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == VERSION, headings


def test_each_release_tag_is_the_version_its_commit_carries() -> None:
    """A tag v<X> (what users pin with pre-commit's `rev:` and pip's `@v<X>`) sits on a commit whose
    pyproject.toml says X, so `migops --version` of that checkout agrees with the pin."""
    git = ["git", "-C", str(ROOT)]
    if subprocess.run([*git, "rev-parse", "--git-dir"], capture_output=True, check=False).returncode != 0:
        return  # an unpacked sdist: no history to check
    tags = subprocess.run([*git, "tag", "--list", "v*"], capture_output=True, text=True, check=True).stdout.split()
    for tag in tags:
        text = subprocess.run(
            [*git, "show", f"{tag}:pyproject.toml"], capture_output=True, text=True, check=True
        ).stdout
        assert tomllib.loads(text)["project"]["version"] == tag[1:], f"{tag}: pyproject.toml says otherwise"


def test_pre_commit_config_is_valid_and_pins_the_locked_ruff() -> None:
    import re as _re

    import yaml

    pre_commit = Path(sys.executable).with_name("pre-commit")
    out = subprocess.run(
        [str(pre_commit), "validate-config", str(ROOT / ".pre-commit-config.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    hooks = {
        h["id"]: h for r in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"] for h in r["hooks"]
    }
    locked = _re.search(r"^ruff==(\S+)", (ROOT / "requirements-dev.lock").read_text(), _re.M)
    assert locked and hooks["ruff-check"]["additional_dependencies"] == [f"ruff=={locked.group(1)}"]
    assert hooks["ruff-format"]["additional_dependencies"] == [f"ruff=={locked.group(1)}"]


def test_chart_version_and_app_version_are_the_version() -> None:
    """`helm install charts/migops` from a checkout installs the image tag of the version (`make release`
    packages the chart with pyproject.toml's version whatever Chart.yaml says; this keeps them equal)."""
    import yaml

    chart = yaml.safe_load((ROOT / "charts" / "migops" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
