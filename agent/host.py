"""The host side of a reconfiguration: systemd GPU clients, the reboot, and host commands.

mig-manager stops host services that hold the GPUs (nvsm, dcgm, ...; the operator's `gpu-clients`
ConfigMap, `version: v1` / `systemd-services:`) before it changes the geometry, and the kubelet too
when the MIG mode changes. The agent does the same through `systemctl` run in the host's root
(`chroot /host`), which needs the host's / mounted and hostPID, and nothing NVML needs.

The services it stopped are written to a small journal file before they are stopped, so an agent
killed in the middle still starts them again on its next run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from migops.mig.problems import MigError
from migops.mig.yamlsafe import load_yaml

log = logging.getLogger(__name__)

DEFAULT_ROOT = "/host"
KUBELET_SERVICE = "kubelet.service"


class HostError(RuntimeError):
    """A host command failed; the message has the command and its output."""


class HostCommands:
    """Runs a command in the host's root: `chroot <root> argv...`; with `root=None` in the agent's own root."""

    def __init__(
        self, root: str | None = DEFAULT_ROOT, *, timeout: float = 120.0, env: Mapping[str, str] | None = None
    ) -> None:
        self.prefix: tuple[str, ...] = ("chroot", root) if root else ()
        self.timeout = timeout
        self.env = dict(env) if env is not None else None

    def run(self, argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        full = [*self.prefix, *argv]
        try:
            result = subprocess.run(
                full, capture_output=True, text=True, timeout=self.timeout, env=self.env, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HostError(f"{' '.join(full)}: {exc}") from None
        if check and result.returncode != 0:
            out = (result.stderr or result.stdout).strip().splitlines()
            raise HostError(f"{' '.join(full)} exited {result.returncode}: {out[-1] if out else 'no output'}")
        return result

    def __call__(self, argv: Sequence[str]) -> None:
        """For NvmlBackend(reset=...): run it, raise on failure."""
        self.run(argv)


@dataclass(frozen=True)
class UnitState:
    name: str
    load: str  # loaded | not-found | masked ...
    active: str  # active | inactive | failed | activating ...
    unit_file: str  # enabled | disabled | static ...
    type: str  # simple | oneshot | forking ...

    @property
    def should_stop(self) -> bool:
        """mig-manager's rule: stop what runs or has failed; leave missing units and inactive
        (including finished oneshot) ones alone."""
        if self.load != "loaded":
            return False
        return self.active in ("active", "activating", "reloading", "failed")


class Systemd:
    """The host's systemd, through `systemctl`."""

    def __init__(self, host: HostCommands, journal: Path | None = None) -> None:
        self.host = host
        self.journal = journal

    def unit(self, name: str) -> UnitState:
        out = self.host.run(
            ["systemctl", "show", "--property=LoadState,ActiveState,UnitFileState,Type", "--", name]
        ).stdout
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return UnitState(
            name,
            props.get("LoadState", "not-found"),
            props.get("ActiveState", "inactive"),
            props.get("UnitFileState", ""),
            props.get("Type", ""),
        )

    def stop(self, names: Sequence[str]) -> list[str]:
        """Stop the listed units that run (or failed); return them, in order, for `start`."""
        stopped = self.pending()
        for name in names:
            state = self.unit(name)
            if not state.should_stop:
                log.info("host service %s: %s/%s, left alone", name, state.load, state.active)
                continue
            if name not in stopped:
                stopped.append(name)
            self._write(stopped)  # before stopping: a kill in between must not lose it
            self.host.run(["systemctl", "stop", "--", name])
            log.info("host service %s stopped", name)
        return stopped

    def start(self, names: Sequence[str] | None = None) -> None:
        """Start what `stop` stopped (default: whatever the journal lists), without waiting for it
        (--no-block: a unit ordered after the GPU reset target must not deadlock us)."""
        names = list(names) if names is not None else self.pending()
        errors = []
        for name in reversed(names):
            try:
                self.host.run(["systemctl", "start", "--no-block", "--", name])
            except HostError as exc:
                errors.append(str(exc))
        self._write([])
        if errors:
            raise HostError("; ".join(errors))

    def pending(self) -> list[str]:
        """Units stopped by an earlier run and not yet started again."""
        if self.journal is None:
            return []
        try:
            return list(json.loads(self.journal.read_text()).get("stopped", []))
        except (FileNotFoundError, ValueError):
            return []

    def reboot(self) -> None:
        self.host.run(["systemctl", "reboot"])

    def _write(self, stopped: list[str]) -> None:
        if self.journal is None:
            return
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.journal.with_name(f".{self.journal.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"stopped": stopped}))
        tmp.replace(self.journal)


def parse_gpu_clients(text: str | bytes, source: str = "gpu-clients file") -> tuple[str, ...]:
    """The GPU Operator's gpu-clients file: `version: v1` and `systemd-services: [unit, ...]`."""
    try:
        doc = load_yaml(text)
    except MigError as exc:
        raise ValueError(f"{source}: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: expected a mapping with version and systemd-services")
    if doc.get("version") != "v1":
        raise ValueError(f"{source}: version must be \"v1\", not {doc.get('version')!r}")
    unknown = set(doc) - {"version", "systemd-services"}
    if unknown:
        raise ValueError(
            f"{source}: unexpected field(s) {', '.join(sorted(map(str, unknown)))} (allowed: version, systemd-services)"
        )
    services = doc.get("systemd-services") or []
    if not isinstance(services, list) or not all(isinstance(s, str) and s.strip() == s and s for s in services):
        raise ValueError(f"{source}: systemd-services must be a list of unit names")
    return tuple(services)
