"""Benchmark of the agent's recovery from an API server outage at each point of its flow (pending,
paused, mid-apply, restoring; tests/agent/outage_harness.py): kube-apiserver killed with SIGKILL, started
again DOWN seconds after the kill (default 10), then the seconds from its answering again until the node
reads `success` for its config with the GPU clients' deploy labels restored. `mid-apply` includes the
driver calls still to run when the server is back (slowed to 1 s each). A real kube-apiserver and etcd; one simulated agent per point.

    python bench/agent_outage.py [DOWN]

Prints figures; no pass/fail.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "agent"))

from agent_harness import install_agent_stack, start_agent  # noqa: E402
from outage_harness import POINTS, outage_at  # noqa: E402

from migops.local.binaries import locate  # noqa: E402
from migops.local.controlplane import ControlPlane  # noqa: E402


def main(argv: list[str]) -> int:
    down = float(argv[0]) if argv else 10.0
    binaries = locate()
    print(f"API server outage of {down:g} s at each point of the agent's flow (SIGKILL, then started again):")
    with tempfile.TemporaryDirectory(prefix="migops-bench-") as tmp, ControlPlane(binaries) as plane:
        with plane.api_client() as api:
            install_agent_stack(api, binaries.directory)
            for point in POINTS:
                started = []

                def agent(node: str, gpus: str, *extra: str):
                    started.append(start_agent(api, plane, node, Path(tmp), gpus, *extra))
                    return started[-1]

                try:
                    got = outage_at(point, plane, api, agent, down)
                finally:
                    for proc in started:
                        proc.stop()
                took = "never (within 90 s)" if got.seconds is None else f"{got.seconds:5.2f} s"
                alive = "running" if got.agent_alive else "EXITED"
                print(
                    f"  {point:<10} API server away {got.down:5.2f} s; node reported {took} after it answered; "
                    f"agent {alive}; state {got.state}, "
                    f"device-plugin {got.deploy['nvidia.com/gpu.deploy.device-plugin']}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
