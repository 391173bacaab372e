"""Locate etcd, kube-apiserver, kube-scheduler and kubectl, and the real node's kubelet,
kube-controller-manager, kube-proxy and containerd: built by hack/k8s-binaries.sh, never committed.

The script is the only place that knows the pinned versions and the cache layout; this module
runs it (instant when the binaries are cached) and takes the directory from its last line of
stdout. `MIGOPS_K8S_BIN` points at a ready directory instead, for machines that bring their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BIN_ENV = "MIGOPS_K8S_BIN"
NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kubectl")
# Only the real node (migops.local.realnode) needs these; it checks for them when it starts, so a
# MIGOPS_K8S_BIN directory with just the four above still runs everything else.
NODE_NAMES = ("kubelet", "kube-controller-manager", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr")
# hack/ sits next to the migops package in the repository (editable installs and CI clones).
SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "k8s-binaries.sh"


class BinariesUnavailable(RuntimeError):
    """The binaries are missing and could not be built; the message carries the reason."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the binaries, all in `directory`."""

    directory: Path

    @property
    def etcd(self) -> Path:
        return self.directory / "etcd"

    @property
    def kube_apiserver(self) -> Path:
        return self.directory / "kube-apiserver"

    @property
    def kube_scheduler(self) -> Path:
        return self.directory / "kube-scheduler"

    @property
    def kubectl(self) -> Path:
        return self.directory / "kubectl"

    @property
    def kubelet(self) -> Path:
        return self.directory / "kubelet"

    @property
    def kube_controller_manager(self) -> Path:
        return self.directory / "kube-controller-manager"

    @property
    def kube_proxy(self) -> Path:
        return self.directory / "kube-proxy"

    @property
    def containerd(self) -> Path:
        return self.directory / "containerd"

    @property
    def ctr(self) -> Path:
        return self.directory / "ctr"

    def missing(self, names: tuple[str, ...] = NAMES) -> list[str]:
        """Names of the binaries (default: the control plane's) not present and executable in `directory`."""
        return [n for n in names if not os.access(self.directory / n, os.X_OK)]


def locate(*, node: bool = False, echo_build: bool = False) -> Binaries:
    """Return the binaries, building them first if needed (minutes on a cold machine): the control
    plane's, and with `node` the real node's too (the demo and the cluster tests never wait for those).

    With `echo_build` the script's progress goes to our stderr as it happens (the CLI);
    otherwise it is captured and only shown in the error if the build fails (tests).
    """
    override = os.environ.get(BIN_ENV)
    if override:
        found = Binaries(Path(override).resolve())
        if found.missing():
            raise BinariesUnavailable(f"${BIN_ENV}={override} lacks executable {', '.join(found.missing())}")
        return found
    if not SCRIPT.is_file():
        raise BinariesUnavailable(
            f"{SCRIPT} not found (an installed copy without the repository?); "
            f"build the binaries with the repository's hack/k8s-binaries.sh and set ${BIN_ENV}"
        )
    found = Binaries(run_script(SCRIPT, "all" if node else "control-plane", echo_build=echo_build))
    if found.missing():
        raise BinariesUnavailable(f"{SCRIPT} reported {found.directory} but it lacks {', '.join(found.missing())}")
    return found


def run_script(script: Path, *args: str, echo_build: bool = False) -> Path:
    """Run a hack/*-binaries.sh build script (instant when its cache is warm); the directory it
    prints on its last line of stdout. BinariesUnavailable with its output when it fails."""
    proc = subprocess.run(
        ["bash", str(script), *args],
        stdout=subprocess.PIPE,
        stderr=None if echo_build else subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        detail = (proc.stderr or "").strip()[-4000:] if not echo_build else "(see above)"
        raise BinariesUnavailable(f"{script} failed with exit code {proc.returncode}; its output:\n{detail}")
    return Path(lines[-1]).resolve()


if __name__ == "__main__":  # `python -m migops.local.binaries`: print the directory
    try:
        print(locate(echo_build=True).directory)
    except BinariesUnavailable as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
