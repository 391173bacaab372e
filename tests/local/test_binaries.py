"""Missing binaries fail loudly with the build script's reason; they are never skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from migops.local import binaries
from migops.local.binaries import BinariesUnavailable, locate


def test_no_go_and_no_cache_fails_with_the_scripts_reason(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(binaries.BIN_ENV, raising=False)
    monkeypatch.setenv("MIGOPS_K8S_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a machine without Go
    if any(Path(d, "go").exists() for d in ("/usr/bin", "/bin")):
        pytest.fail("this test needs Go outside /usr/bin and /bin to simulate its absence")
    with pytest.raises(BinariesUnavailable) as err:
        locate()
    assert "k8s-binaries.sh failed with exit code 1" in str(err.value)
    assert "Go is required" in str(err.value)
    assert "MIGOPS_K8S_BIN" in str(err.value)


def test_override_directory_must_hold_all_four(tmp_path: Path, monkeypatch) -> None:
    for name in ("etcd", "kube-apiserver", "kube-scheduler"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv(binaries.BIN_ENV, str(tmp_path))
    with pytest.raises(BinariesUnavailable, match="lacks executable kubectl"):
        locate()
    (tmp_path / "kubectl").write_text("#!/bin/sh\n")
    (tmp_path / "kubectl").chmod(0o755)
    found = locate()
    assert found.kubectl == tmp_path.resolve() / "kubectl"
    assert os.access(found.etcd, os.X_OK)
