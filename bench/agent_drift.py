"""Benchmark of the agent's drift check (target: one check < 5 ms, so a short interval is cheap), and of
the detection latency a person's out-of-band change sees.

1. One check (`agent.drift.check`: read every GPU, compare with the applied config) on an
   8-GPU H100 node with all-balanced applied, through the simulated backend (the state file read on
   every query) and through the NVML backend over the fake pynvml of tests/agent (the same NVML calls
   a real driver answers, through `ReadOnlyNvml`; the fake's own cost is included).
2. Detection latency: a real kube-apiserver, one simulated agent (`--drift-interval 1`), a GPU
   instance destroyed with `migops sim` N times; from the change to the `migops.io/mig.drift`
   annotation on the Node (expected: uniform over the interval, plus a check and one API write), and
   to the repair's `success`. `--no-cluster` skips it.

Prints figures; no pass/fail.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "agent"))

from fake_pynvml import FakeNvml  # noqa: E402

from migops.agent.backend import Backend  # noqa: E402
from migops.agent.desired import desired_on_node, node_models  # noqa: E402
from migops.agent.drift import check  # noqa: E402
from migops.agent.nvml import NvmlBackend  # noqa: E402
from migops.agent.plan import plan_gpu  # noqa: E402
from migops.agent.simulated import SimulatedBackend, parse_gpus  # noqa: E402
from migops.agent.state import ConfigRequest  # noqa: E402
from migops.mig.catalogue import catalogue  # noqa: E402
from migops.mig.spec import parse_config  # noqa: E402

CONFIG_TEXT = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
CONFIG = parse_config(CONFIG_TEXT)
NAME = "all-balanced"
REQUEST = ConfigRequest(NAME, CONFIG, None, "mixed", "gpu-operator")


def apply(backend: Backend) -> None:
    desired = desired_on_node(REQUEST, node_models(backend.devices()))
    for d in desired:
        backend.set_mig_mode(d.index, True)
    backend.reset([d.index for d in desired])
    for d in desired:
        created: dict = {}
        for step in plan_gpu(backend.read(d.index), d).steps:
            if step.op == "create_gi":
                created[step.placement] = backend.create_gpu_instance(
                    d.index, step.placement.profile, step.placement.start
                )
            elif step.op == "create_ci":
                backend.create_compute_instance(d.index, created[step.placement], step.slices)


def time_checks(backend: Backend, runs: int = 300) -> tuple[list[float], int]:
    desired = desired_on_node(REQUEST, node_models(backend.devices()))  # validated once per config
    times = []
    drifts = 0
    for _ in range(runs):
        began = time.perf_counter()
        found = check(backend, desired)
        times.append(time.perf_counter() - began)
        drifts += bool(found.drifts)
    return times, drifts


def show(label: str, times: list[float]) -> None:
    ms = sorted(t * 1000 for t in times)
    p50, p90 = statistics.median(ms), ms[int(len(ms) * 0.9)]
    print(f"  {label:<44} p50 {p50:6.3f} ms   p90 {p90:6.3f} ms   max {ms[-1]:6.3f} ms   ({len(ms)} checks)")


def check_cost() -> None:
    print("one drift check, 8 x H100 with all-balanced (32 GPU instances, 32 compute instances):")
    with tempfile.TemporaryDirectory(prefix="migops-bench-") as tmp:
        sim = SimulatedBackend(Path(tmp) / "gpus.json", parse_gpus("8x0x233010DE"), node="bench")
        apply(sim)
        times, drifts = time_checks(sim)
        assert drifts == 0
        show("simulated (state file read per query)", times)
        person = SimulatedBackend(sim.path, out_of_band=True)
        inst = sim.read(3).instances[-1]
        for ci in inst.compute:
            person.destroy_compute_instance(3, inst.id, ci.id)
        person.destroy_gpu_instance(3, inst.id)
        times, drifts = time_checks(sim)
        assert drifts == len(times)
        show("simulated, one GPU drifted", times)
    h100 = catalogue().resolve("0x233010DE")
    fake = FakeNvml([h100] * 8)
    nvml = NvmlBackend(
        fake, reset=lambda argv: fake.reset([int(b.split(":")[1], 16) - 0x18 for b in argv[-1].split(",")])
    )
    apply(nvml)
    before = len(fake.calls)
    times, drifts = time_checks(nvml)
    assert drifts == 0
    show("NVML backend over the fake pynvml", times)
    print(f"  NVML calls per check: {(len(fake.calls) - before) // len(times)} (all getters, via ReadOnlyNvml)")


def detection_latency(rounds: int = 8, interval: float = 1.0) -> None:
    from kubernetes import client as k8s

    from migops.local import agents as local_agents
    from migops.local import cluster
    from migops.local.binaries import locate
    from migops.local.cluster import plan_nodes
    from migops.local.controlplane import ControlPlane

    print(f"\ndetection latency, one simulated agent (2 x H100, --drift-interval {interval:g}), {rounds} changes:")
    with (
        tempfile.TemporaryDirectory(prefix="migops-bench-") as tmp,
        ControlPlane(locate()) as plane,
        plane.api_client() as api,
    ):
        cluster.seed(api, plan_nodes(1, [catalogue().resolve("0x233010DE")], 2, "mixed"), "mixed")
        core = k8s.CoreV1Api(api)
        core.create_namespaced_config_map(
            "gpu-operator", {"metadata": {"name": "default-mig-parted-config"}, "data": {"config.yaml": CONFIG_TEXT}}
        )
        node = core.list_node().items[0].metadata.name
        state = Path(tmp) / "gpus.json"
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with open(Path(tmp) / "agent.log", "wb") as log:
            argv = local_agents.command(
                node,
                "2x0x233010DE",
                state,
                Path(tmp),
                plane.admin_kubeconfig,
                pod_timeout=5,
                retry_base=0.5,
                retry_max=2,
                drift_interval=interval,
            )
            agent = subprocess.Popen(
                [*argv, "--drift-max-repairs", "100"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
            )
        try:

            def notes() -> dict[str, str]:
                return core.read_node(node).metadata.annotations or {}

            def wait(check, timeout: float = 60.0) -> float:
                began = time.monotonic()
                while not check():
                    if time.monotonic() - began > timeout:
                        raise TimeoutError((Path(tmp) / "agent.log").read_text()[-3000:])
                    time.sleep(0.01)
                return time.monotonic()

            core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config": NAME}}})
            wait(
                lambda: (
                    notes().get("migops.io/mig.config.applied") == NAME
                    and (core.read_node(node).metadata.labels or {}).get("nvidia.com/mig.config.state") == "success"
                )
            )
            seen, repaired = [], []
            for i in range(rounds):
                time.sleep(interval * ((i * 0.37) % 1))  # changes at spread-out points of the interval
                gpu = json.loads(state.read_text())["gpus"][i % 2]
                start = gpu["instances"][-1]["start"]
                began = time.monotonic()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "migops",
                        "sim",
                        "destroy-gi",
                        "--state-file",
                        str(state),
                        "--gpu",
                        str(i % 2),
                        "--start",
                        str(start),
                    ],
                    check=True,
                    capture_output=True,
                )
                changed = time.monotonic()
                seen.append(wait(lambda: "migops.io/mig.drift" in notes()) - changed)
                repaired.append(wait(lambda: "migops.io/mig.drift" not in notes()) - changed)
                del began
            print(
                f"  change -> migops.io/mig.drift on the Node: p50 {statistics.median(seen):.2f} s, "
                f"max {max(seen):.2f} s (interval {interval:g} s; polled every 10 ms)"
            )
            print(
                f"  change -> repaired (success, annotation gone): p50 {statistics.median(repaired):.2f} s, "
                f"max {max(repaired):.2f} s"
            )
        finally:
            agent.terminate()
            agent.wait(20)


def main(argv: list[str]) -> int:
    check_cost()
    if "--no-cluster" not in argv:
        detection_latency()
    return 0


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    sys.exit(main(sys.argv[1:]))
