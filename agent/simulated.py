"""A simulated GPU node: any catalogue model, state in a JSON file, the driver's refusals included.

The state file IS the simulated GPUs: every query reads it as it is now (never a copy from start-up),
and every change is a read-modify-write under an exclusive lock (`<state-file>.lock`, flock) written
atomically (temporary file + rename), so another process changing the GPUs out of band, as a person
with `nvidia-smi mig` does (`migops sim ...`, or an edit of the file), is what the agent sees next,
and two writers never lose each other's change. `atomic()` makes several changes one: the lock is held
throughout and the file written once at the end, so a reader sees the GPUs before or after them, never
half-way, and a refused call among them leaves the GPUs as they were. The file survives agent restarts and simulated
reboots, as a GPU's state survives the agent.
What the simulator enforces comes from the catalogue and `migops.mig` (valid starts, memory-slice
overlap via `Placement.mask`, compute slices, max counts, the one media-engine set, which compute
instances a GPU instance offers), and what it models follows the driver: a MIG mode change stays
pending until the GPU is reset; instances do not survive a reboot, the mode does.

Faults are injected through a second JSON file (`<state-file>.faults` by default) that the simulator
only reads, so a test or a person can change it while an agent runs:

    {"in_use":     [{"gpu": 0, "start": 4, "pids": [4242]}],    # processes on that instance
     "nvml_error": [{"op": "create_gpu_instance", "gpu": 3, "code": "UNKNOWN"}],  # gpu optional
     "reset_fails": true,             # GPU reset fails (mode stays pending)
     "reboot_fails": true,            # a reboot does not apply the pending mode either
     "op_delay": 0.5}                 # seconds each changing call takes
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from migops.agent.backend import ComputeInstance, Device, GpuError, GpuInstance, GpuState
from migops.agent.plan import gi_profile
from migops.mig.catalogue import GpuModel, catalogue
from migops.mig.placement import Placement
from migops.mig.profile import compute_subprofile_allowed

STATE_VERSION = 1
_REPEAT = re.compile(r"^([1-9][0-9]*)x(.+)$")
OPS = (
    "set_mig_mode",
    "reset",
    "create_gpu_instance",
    "create_compute_instance",
    "destroy_compute_instance",
    "destroy_gpu_instance",
)


def parse_gpus(text: str) -> list[GpuModel]:
    """`8x0x233010DE`, `0x233010DE,0x20B510DE`, `2xNVIDIA-H100-80GB-HBM3,1x0x20B710DE`: models in
    index order. Raises UnknownGpuError / ValueError with the part that is wrong."""
    cat = catalogue()
    models: list[GpuModel] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError(f"empty GPU in {text!r}")
        repeat = _REPEAT.match(part)  # "8x<GPU>"; a bare "0x2330..." is a device ID, not a count
        if repeat:
            count, name = repeat.groups()
            if not 1 <= int(count) <= 16:
                raise ValueError(f"{part!r}: a node holds 1 to 16 GPUs")
            models.extend([cat.resolve(name)] * int(count))
        else:
            models.append(cat.resolve(part))
    if len(models) > 16:
        raise ValueError(f"{text!r} names {len(models)} GPUs; a node holds at most 16")
    return models


def initial_state(models: Sequence[GpuModel], node: str) -> dict[str, Any]:
    """Fresh GPUs: MIG disabled, no instances (what a new node boots with)."""
    return {
        "version": STATE_VERSION,
        "node": node,
        "boots": 0,
        "gpus": [
            {
                "index": i,
                "device_id": m.device_id,
                "uuid": f"GPU-sim-{node}-{i}",
                "bus_id": f"00000000:{0x18 + i:02X}:00.0",
                "mig": {"current": False, "pending": False},
                "next_gi": 1,
                "instances": [],
                "ops": {op: 0 for op in OPS},
            }
            for i, m in enumerate(models)
        ],
    }


class SimulatedBackend:
    """The Backend interface over a state file that other processes may change at any time.

    `out_of_band=True` is a person's change (the `migops sim` command, nvidia-smi on a real node): not
    counted in the per-GPU `ops` (they count exactly the agent's driver calls), and the injected driver
    faults (`op_delay`, `nvml_error`) are the agent's, not theirs; processes (`in_use`) are everyone's."""

    name = "simulated"

    def __init__(
        self,
        state_file: str | Path,
        models: Sequence[GpuModel] | None = None,
        node: str = "node",
        faults_file: str | Path | None = None,
        sleep=time.sleep,
        out_of_band: bool = False,
    ) -> None:
        self.path = Path(state_file)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.faults_path = Path(faults_file) if faults_file else self.path.with_name(self.path.name + ".faults")
        self._sleep = sleep
        self._out_of_band = out_of_band
        self._by_device: dict[str, GpuModel] = {}
        self._open: dict[str, Any] | None = None  # the state inside `atomic()`, written when it ends
        with self._locked():
            if self.path.exists():
                state = self._load()
                have = [g["device_id"] for g in state["gpus"]]
                if models is not None and have != [m.device_id for m in models]:
                    raise ValueError(
                        f"{self.path} holds GPUs {','.join(have)}, not the ones asked for "
                        f"({','.join(m.device_id for m in models)}); remove it to start afresh"
                    )
            else:
                if not models:
                    raise ValueError(f"{self.path} does not exist: name the GPUs (e.g. --gpus 8x0x233010DE)")
                self._save(initial_state(models, node))

    # ------------------------------------------------------------------ reading
    def devices(self) -> list[Device]:
        return [
            Device(g["index"], g["device_id"], g["uuid"], g["bus_id"], self._model(g).mig_capable)
            for g in self._load()["gpus"]
        ]

    def model(self, index: int) -> GpuModel:
        return self._model(self._gpu(self._load(), index))

    def read(self, index: int) -> GpuState:
        faults = self._faults()
        if not self._out_of_band:
            self._fault(faults, "read", index)
        g = self._gpu(self._load(), index)
        busy = self._busy(faults, g)
        return GpuState(
            index,
            g["mig"]["current"],
            g["mig"]["pending"],
            tuple(
                GpuInstance(
                    i["id"],
                    i["profile"],
                    i["start"],
                    i["size"],
                    tuple(ComputeInstance(c["id"], c["slices"]) for c in i["compute"]),
                    tuple(busy.get(i["start"], ())),
                )
                for i in sorted(g["instances"], key=lambda i: i["start"])
            ),
        )

    def ops(self, index: int) -> dict[str, int]:
        """How many changing calls the agent made on each GPU (tests and benchmarks count them)."""
        return dict(self._gpu(self._load(), index)["ops"])

    @property
    def boots(self) -> int:
        return int(self._load()["boots"])

    # ------------------------------------------------------------------ changing
    def set_mig_mode(self, index: int, enabled: bool) -> None:
        self._begin("set_mig_mode", index)
        with self._change() as state:
            g = self._gpu(state, index)
            model = self._model(g)
            if not model.mig_capable:  # what NVML answers for a GPU without MIG (a display GPU)
                raise GpuError("set_mig_mode", index, "NOT_SUPPORTED", f"{model.name} cannot do MIG")
            if g["instances"]:
                raise GpuError("set_mig_mode", index, "IN_USE", "destroy the GPU's MIG instances first")
            g["mig"]["pending"] = bool(enabled)
            self._count(g, "set_mig_mode")

    def reset(self, indices: Sequence[int]) -> None:
        for index in indices:
            self._begin("reset", index)
        faults = self._faults()
        with self._change() as state:
            for index in indices:
                g = self._gpu(state, index)
                if faults.get("reset_fails"):
                    raise GpuError("reset", index, "RESET_FAILED", "In use by another client (injected fault)")
                if self._busy(faults, g):
                    raise GpuError("reset", index, "RESET_FAILED", "processes are running on the GPU")
            for index in indices:
                g = self._gpu(state, index)
                g["mig"]["current"] = g["mig"]["pending"]
                g["instances"] = []
                self._count(g, "reset")

    def reboot(self) -> None:
        """The node restarts: pending modes take effect (unless `reboot_fails`), instances are gone."""
        apply_mode = not self._faults().get("reboot_fails")
        with self._change() as state:
            for g in state["gpus"]:
                if apply_mode:
                    g["mig"]["current"] = g["mig"]["pending"]
                g["instances"] = []
            state["boots"] += 1

    def create_gpu_instance(self, index: int, profile: str, start: int) -> int:
        self._begin("create_gpu_instance", index)
        with self._change() as state:
            g = self._gpu(state, index)
            model = self._model(g)
            if not g["mig"]["current"]:
                raise GpuError("create_gpu_instance", index, "NOT_SUPPORTED", "MIG mode is disabled")
            gi = gi_profile(model, profile)
            table = model.table
            if gi is None or table is None:  # a model without a table has no profiles: gi is None then
                raise GpuError("create_gpu_instance", index, "NOT_SUPPORTED", f"{model.name} has no profile {profile}")
            if start not in gi.starts:
                raise GpuError(
                    "create_gpu_instance",
                    index,
                    "INVALID_ARGUMENT",
                    f"{profile} cannot start at slice {start} (valid: {','.join(map(str, gi.starts))})",
                )
            new = Placement(start, gi.memory_slices, gi.name)
            existing = [
                (gi_profile(model, i["profile"]), Placement(i["start"], i["size"], i["profile"]))
                for i in g["instances"]
            ]
            clash = [p for _, p in existing if p.mask & new.mask]
            if clash:
                raise GpuError(
                    "create_gpu_instance",
                    index,
                    "INSUFFICIENT_RESOURCES",
                    f"slices {start}-{start + gi.memory_slices - 1} overlap {clash[0].profile}@{clash[0].start}",
                )
            if sum(1 for p, _ in existing if p is gi) >= gi.max_count:
                raise GpuError(
                    "create_gpu_instance",
                    index,
                    "INSUFFICIENT_RESOURCES",
                    f"{gi.max_count} x {profile} already exist (the maximum)",
                )
            if sum(p.compute_slices for p, _ in existing if p) + gi.compute_slices > table.compute_slices:
                raise GpuError("create_gpu_instance", index, "INSUFFICIENT_RESOURCES", "no compute slices left")
            if gi.has_media_extensions and any(p and p.has_media_extensions for p, _ in existing):
                raise GpuError(
                    "create_gpu_instance",
                    index,
                    "INSUFFICIENT_RESOURCES",
                    "the GPU's one media-engine set is taken by another +me instance",
                )
            gid = g["next_gi"]
            g["next_gi"] += 1
            g["instances"].append(
                {"id": gid, "profile": gi.name, "start": start, "size": gi.memory_slices, "compute": [], "next_ci": 0}
            )
            self._count(g, "create_gpu_instance")
            return gid

    def create_compute_instance(self, index: int, gi: int, slices: int) -> int:
        self._begin("create_compute_instance", index)
        with self._change() as state:
            g = self._gpu(state, index)
            inst = self._instance(g, index, gi, "create_compute_instance")
            profile = gi_profile(self._model(g), inst["profile"])
            assert profile is not None
            if not compute_subprofile_allowed(slices, profile.compute_slices):
                raise GpuError(
                    "create_compute_instance",
                    index,
                    "NOT_SUPPORTED",
                    f"a {profile.name} instance offers no {slices}-slice compute instance",
                )
            used = sum(c["slices"] for c in inst["compute"])
            if used + slices > profile.compute_slices:
                raise GpuError(
                    "create_compute_instance",
                    index,
                    "INSUFFICIENT_RESOURCES",
                    f"{profile.name} has {profile.compute_slices - used} compute slices left",
                )
            cid = inst["next_ci"]
            inst["next_ci"] += 1
            inst["compute"].append({"id": cid, "slices": slices})
            self._count(g, "create_compute_instance")
            return cid

    def destroy_compute_instance(self, index: int, gi: int, ci: int) -> None:
        faults = self._begin("destroy_compute_instance", index)
        with self._change() as state:
            g = self._gpu(state, index)
            inst = self._instance(g, index, gi, "destroy_compute_instance")
            if self._busy(faults, g).get(inst["start"]):
                raise GpuError("destroy_compute_instance", index, "IN_USE", "processes are running on the instance")
            before = len(inst["compute"])
            inst["compute"] = [c for c in inst["compute"] if c["id"] != ci]
            if len(inst["compute"]) == before:
                raise GpuError("destroy_compute_instance", index, "NOT_FOUND", f"no compute instance {ci} in GI {gi}")
            self._count(g, "destroy_compute_instance")

    def destroy_gpu_instance(self, index: int, gi: int) -> None:
        faults = self._begin("destroy_gpu_instance", index)
        with self._change() as state:
            g = self._gpu(state, index)
            inst = self._instance(g, index, gi, "destroy_gpu_instance")
            if inst["compute"] or self._busy(faults, g).get(inst["start"]):
                raise GpuError(
                    "destroy_gpu_instance", index, "IN_USE", "the instance still has compute instances or processes"
                )
            g["instances"] = [i for i in g["instances"] if i["id"] != gi]
            self._count(g, "destroy_gpu_instance")

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ internals
    def _load(self) -> dict[str, Any]:
        """The GPUs as they are now. A rename replaces the file whole, so a reader never sees half a write."""
        if self._open is not None:
            return self._open
        try:
            state = json.loads(self.path.read_text())
        except FileNotFoundError:
            raise GpuError(
                "read-state", None, "UNKNOWN", f"{self.path}: the simulated GPUs' state file is gone"
            ) from None
        except ValueError as exc:
            raise GpuError("read-state", None, "UNKNOWN", f"{self.path}: not valid JSON ({exc})") from None
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            version = state.get("version") if isinstance(state, dict) else None
            raise ValueError(f"{self.path}: unknown state version {version!r}")
        return state

    def _model(self, g: dict[str, Any]) -> GpuModel:
        # Any NVIDIA device ID is a GPU: a MIG-capable model, or one that cannot do MIG (a display GPU).
        device_id = g["device_id"]
        if device_id not in self._by_device:
            self._by_device[device_id] = catalogue().resolve(device_id)
        return self._by_device[device_id]

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """The changes made inside as one: under the lock throughout, written once when the block ends,
        not at all when it raises. What `migops sim` does for each action a person asks for."""
        if self._open is not None:
            raise RuntimeError("atomic() does not nest")
        with self._locked():
            self._open = self._load()
            try:
                yield
                state = self._open
            finally:
                self._open = None
            self._save(state)

    @contextmanager
    def _change(self) -> Iterator[dict[str, Any]]:
        """Read-modify-write under the lock; a call that raises changes nothing. Inside `atomic()`, the
        change is made to the open state (the lock is held already)."""
        if self._open is not None:
            yield self._open
            return
        with self._locked():
            state = self._load()
            yield state
            self._save(state)

    @staticmethod
    def _gpu(state: dict[str, Any], index: int) -> dict[str, Any]:
        if not 0 <= index < len(state["gpus"]):
            raise GpuError("lookup", index, "INVALID_ARGUMENT", "no such GPU")
        return state["gpus"][index]

    @staticmethod
    def _instance(g: dict, index: int, gi: int, op: str) -> dict[str, Any]:
        for inst in g["instances"]:
            if inst["id"] == gi:
                return inst
        raise GpuError(op, index, "NOT_FOUND", f"no GPU instance {gi}")

    def _faults(self) -> dict[str, Any]:
        try:
            return json.loads(self.faults_path.read_text() or "{}")
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise GpuError("read-faults", None, "UNKNOWN", f"{self.faults_path}: {exc}") from None

    @staticmethod
    def _busy(faults: dict[str, Any], g: dict[str, Any]) -> dict[int, tuple[int, ...]]:
        """start -> pids of the injected `in_use` processes on this GPU's existing instances."""
        starts = {i["start"] for i in g["instances"]}
        return {
            f["start"]: tuple(f.get("pids") or (4242,))
            for f in faults.get("in_use", ())
            if f.get("gpu") == g["index"] and f.get("start") in starts
        }

    @staticmethod
    def _fault(faults: dict[str, Any], op: str, index: int) -> None:
        for f in faults.get("nvml_error", ()):
            if f.get("op") == op and f.get("gpu", index) == index:
                raise GpuError(op, index, str(f.get("code", "UNKNOWN")), "injected fault")

    def _begin(self, op: str, index: int) -> dict[str, Any]:
        """The injected delay and errors of a changing call (outside the lock: a slow driver call must
        not block readers or another writer's turn). Returns the faults read."""
        faults = self._faults()
        if self._out_of_band:
            return faults
        delay = float(faults.get("op_delay") or 0)
        if delay:
            self._sleep(delay)
        self._fault(faults, op, index)
        return faults

    def _count(self, g: dict[str, Any], op: str) -> None:
        if not self._out_of_band:
            g["ops"][op] += 1

    def _save(self, state: dict[str, Any]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        tmp.replace(self.path)
