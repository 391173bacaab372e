"""What `migops local up` leaves behind for `down`, `status` and `env`, under $MIGOPS_HOME.

Layout: `$MIGOPS_HOME/local/` is the control plane's workdir (certificates, etcd data, logs,
kubeconfigs) and `state.json` in it records the servers (pid + start time), the API server
URL and the seeded nodes. `down` removes the whole directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from migops.local.process import ProcessRef, is_alive

HOME_ENV = "MIGOPS_HOME"
SERVERS = ("etcd", "kube-apiserver")


def default_home() -> Path:
    return (Path.home() / ".migops").expanduser().resolve()


def migops_home() -> Path:
    """$MIGOPS_HOME, default ~/.migops (absolute, so state never depends on the cwd)."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".migops").expanduser().resolve()


def local_dir(home: Path) -> Path:
    return home / "local"


def state_file(home: Path) -> Path:
    return local_dir(home) / "state.json"


@dataclass(frozen=True)
class NodeRecord:
    """One seeded node, as `status` shows it."""

    name: str
    product: str
    device_id: str
    gpus: int


@dataclass(frozen=True)
class LocalState:
    """A running (or crashed) local control plane started by `migops local up`."""

    api_url: str
    kubeconfig: str
    bin_dir: str
    workdir: str
    strategy: str
    processes: dict[str, ProcessRef]
    nodes: list[NodeRecord] = field(default_factory=list)
    ready_seconds: float | None = None
    webhook_url: str | None = None
    repo: str | None = None  # the config repo the reconciler follows
    reconciler_url: str | None = None  # its /healthz, /readyz, /metrics and POST /hook
    real_node: str | None = None  # the real node's directory (migops.local.realnode), when it runs
    flux_git: str | None = None  # with --flux: the git URL Flux's GitRepository follows (push here)
    argocd_git: str | None = None  # with --argocd: the git URL Argo CD's Application follows (push here)

    def running(self) -> bool:
        """etcd and kube-apiserver alive (the very processes we started, not recycled pids): the
        cluster is up; `status` reports any other process that has exited."""
        servers = [r for name, r in self.processes.items() if name in SERVERS]
        return bool(servers) and all(is_alive(r) for r in servers)

    def to_json(self) -> dict:
        data = asdict(self)
        data["processes"] = {k: v.to_json() for k, v in self.processes.items()}
        return data

    @classmethod
    def from_json(cls, data: dict) -> LocalState:
        return cls(
            api_url=data["api_url"],
            kubeconfig=data["kubeconfig"],
            bin_dir=data["bin_dir"],
            workdir=data["workdir"],
            strategy=data["strategy"],
            processes={k: ProcessRef.from_json(v) for k, v in data["processes"].items()},
            nodes=[NodeRecord(**n) for n in data.get("nodes", [])],
            ready_seconds=data.get("ready_seconds"),
            webhook_url=data.get("webhook_url"),
            repo=data.get("repo"),
            reconciler_url=data.get("reconciler_url"),
            real_node=data.get("real_node"),
            flux_git=data.get("flux_git"),
            argocd_git=data.get("argocd_git"),
        )


def load(home: Path) -> LocalState | None:
    """The recorded state, or None when nothing was started (or the file is unreadable)."""
    try:
        return LocalState.from_json(json.loads(state_file(home).read_text()))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def save(home: Path, state: LocalState) -> None:
    """Write atomically: a concurrent `status` never reads half a file."""
    path = state_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    tmp.replace(path)


@contextlib.contextmanager
def locked(home: Path) -> Iterator[None]:
    """Serialise `up` and `down` on one home (two `up`s must not start two clusters)."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".local.lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
