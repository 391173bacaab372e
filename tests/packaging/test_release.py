"""hack/release.py's own rules, without building anything: the release notes are CHANGELOG.md's dated section
of the version (refused when there is none), and SHA256SUMS is what `sha256sum -c` reads. The release itself
is built and installed by tests/helm/test_helm_install.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
_spec = importlib.util.spec_from_file_location("release_script", ROOT / "hack" / "release.py")
assert _spec is not None and _spec.loader is not None
release = importlib.util.module_from_spec(_spec)
sys.modules["release_script"] = release
_spec.loader.exec_module(release)

CHANGELOG = """# Changelog

## [Unreleased]

### Added
- next

## [1.2.0] — 2027-01-05

### Fixed
- this

## [1.1.0] — 2026-12-01

- that
"""


def test_the_notes_are_the_versions_section() -> None:
    assert release.notes(CHANGELOG, "1.2.0") == "## [1.2.0] — 2027-01-05\n\n### Fixed\n- this\n"
    assert release.notes(CHANGELOG, "1.1.0") == "## [1.1.0] — 2026-12-01\n\n- that\n"
    assert release.notes((ROOT / "CHANGELOG.md").read_text(), VERSION).startswith(f"## [{VERSION}] — ")


def test_a_version_without_a_dated_section_is_refused() -> None:
    with pytest.raises(release.ReleaseError, match=r"no section `## \[1.3.0\] — YYYY-MM-DD`"):
        release.notes(CHANGELOG, "1.3.0")
    with pytest.raises(release.ReleaseError, match="has no date"):
        release.notes(CHANGELOG.replace("[1.2.0] — 2027-01-05", "[1.2.0]"), "1.2.0")
    with pytest.raises(release.ReleaseError):
        release.notes(CHANGELOG, "Unreleased")


def test_checksums_are_what_sha256sum_checks(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"wheel")
    (tmp_path / "b.tgz").write_bytes(b"\x00chart" * 1000)
    sums = release.checksums(tmp_path)
    assert sums.name == "SHA256SUMS" and len(sums.read_text().splitlines()) == 2
    ok = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout == "a.whl: OK\nb.tgz: OK\n", ok.stdout + ok.stderr
    (tmp_path / "b.tgz").write_bytes(b"tampered")
    bad = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and "b.tgz: FAILED" in bad.stdout
